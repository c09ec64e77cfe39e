//! The last line of defence for passwords: every secret the tool learns (the database
//! password from a URL, however it was given) is registered here, and every error message is
//! passed through [`redact`] before it is printed, so a driver message that happens to echo a
//! connection string still cannot leak it.

use std::sync::Mutex;

static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers a secret. Empty strings are ignored (they would match everywhere).
pub(crate) fn register(secret: &str) {
    if secret.is_empty() {
        return;
    }
    if let Ok(mut secrets) = SECRETS.lock()
        && !secrets.iter().any(|s| s == secret)
    {
        secrets.push(secret.to_string());
    }
}

/// Replaces every registered secret in `text`, raw or percent-encoded, with `***`, and the
/// password of any URL in it: a secret the tool never learnt (the stderr of a failed `_cmd`
/// quoting a connection string) is still masked.
pub(crate) fn redact(text: &str) -> String {
    let text = crate::url::mask_url_passwords(text);
    let Ok(secrets) = SECRETS.lock() else {
        return text;
    };
    secrets.iter().fold(text, |acc, secret| crate::url::redact_in_text(&acc, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_raw_and_percent_encoded_forms() {
        register("p@ss:w/rd");
        let text = "failed for postgresql://u:p%40ss%3Aw%2Frd@h/db (password p@ss:w/rd)";
        let out = redact(text);
        assert!(!out.contains("p@ss"), "{out}");
        assert!(!out.contains("p%40ss"), "{out}");
        assert_eq!(out.matches("***").count(), 2);
    }
}
