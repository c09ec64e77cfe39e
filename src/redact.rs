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
    if let Ok(mut secrets) = SECRETS.lock() {
        for form in [secret.to_string(), percent_encode(secret)] {
            if !secrets.contains(&form) {
                secrets.push(form);
            }
        }
    }
}

/// Replaces every registered secret in `text` with `***`, longest first so that a secret
/// containing another is replaced whole.
pub(crate) fn redact(text: &str) -> String {
    let Ok(secrets) = SECRETS.lock() else {
        return text.to_string();
    };
    let mut ordered: Vec<&String> = secrets.iter().collect();
    ordered.sort_by_key(|s| std::cmp::Reverse(s.len()));
    ordered.iter().fold(text.to_string(), |acc, secret| acc.replace(secret.as_str(), "***"))
}

/// The form a password takes inside a URL.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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
