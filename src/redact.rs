//! Where a password can stand in text, and the one place that masks it there.
//!
//! Every line the tool prints on stderr ([`crate::output::note`]: errors, warnings, summaries)
//! and every report about the configuration or the database itself (`config`, `doctor`) goes
//! through [`mask`]. It replaces a password with `***` only where a password stands:
//!
//! - the userinfo of a URL, `scheme://user:PASSWORD@host` (raw or percent-encoded), even a URL
//!   the tool never parsed, such as one quoted on the stderr of a failed `_cmd`;
//! - the value of an option that names a password: libpq's `password=secret` and
//!   `password='with blanks'`, a URL query's `?password=`/`&sslpassword=`, a quoted key such as
//!   `"password": "secret"`;
//! - what a failing `_cmd` printed on stdout, where the command's stderr echoes it (the tool
//!   knows that exact text): a printed URL where its password stands, a line printed alone (a
//!   bare password) wherever it stands as a word of its own.
//!
//! Nothing else changes: masking every occurrence of the password's text instead would turn a
//! one-letter password or a common word (`airflow`, `denied`) into holes all over a message,
//! and those holes would tell the reader the password. Passwords the tool has learnt (the
//! database URL's, registered by [`register`]) are matched exactly at those positions, in all
//! their spellings, so one with a blank, a quote or an `@` is masked whole; an unknown one is
//! masked as far as the grammar of its position reaches. Stored keys and values are the user's
//! data and are printed as they are.

use std::ops::Range;
use std::sync::Mutex;

use crate::text::{self, encode_query_part, percent_byte, percent_encode};

/// What a password is shown as.
pub(crate) const MASK: &str = "***";

/// A secret (a password, a URL that may hold one) whose `Debug` is [`MASK`], so that a struct
/// holding one can derive its own `Debug` and never print it.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Masked<T>(pub T);

impl<T> std::fmt::Debug for Masked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

/// The secrets known to one masker, each in every spelling it may be printed in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secrets {
    /// Passwords, matched at password positions only. Longest first.
    passwords: Vec<String>,
    /// What a failing `_cmd` printed, matched wherever it stands as a whole word. Longest first.
    printed: Vec<String>,
}

/// The secrets this run has learnt, for [`mask`].
static LEARNT: Mutex<Secrets> = Mutex::new(Secrets::new());

/// Remembers a database password, so that it is masked whole wherever it stands as a
/// password. Empty passwords are ignored: there is nothing to hide.
pub(crate) fn register(password: &str) {
    if password.is_empty() {
        return;
    }
    keep_out_of_core_dumps();
    let mut learnt = LEARNT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    learnt.add_password(password);
}

/// Remembers a secret that is no URL's password (an API token, an API password), so that it
/// is masked wherever it stands as a word of its own: raw, percent-encoded (any byte, either
/// case of hex, see [`spelt_at`]), JSON-escaped, or in base64 (see [`base64_spellings`]).
pub(crate) fn register_secret(secret: &str) {
    if secret.is_empty() {
        return;
    }
    keep_out_of_core_dumps();
    let mut learnt = LEARNT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for form in std::iter::once(secret.to_string()).chain(base64_spellings(secret)) {
        learn_printed(&mut learnt.printed, &form);
    }
}

/// Remembers a login, `user` and its password: the password as [`register_secret`] does, and
/// `user:password` in base64, which is what an HTTP Basic header carries and what a server
/// that quotes the header echoes.
pub(crate) fn register_login(user: &str, password: &str) {
    if password.is_empty() {
        return;
    }
    register_secret(password);
    let mut learnt = LEARNT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for encoded in base64_spellings(&format!("{user}:{password}")) {
        learn_printed(&mut learnt.printed, &encoded);
    }
}

/// Adds `secret` and its JSON spellings to `printed`; its percent-encoded spellings need no
/// entry of their own, since [`spelt_at`] reads them in the raw one.
fn learn_printed(printed: &mut Vec<String>, secret: &str) {
    add_new(printed, std::iter::once(secret.to_string()).chain(json_spellings(secret)));
}

/// The base64 a peer may echo a secret in: the standard alphabet and the URL-safe one (a JWT's,
/// a URL's), each with and without its `=` padding, of the secret and of the secret with the
/// line end that `echo … | base64` adds.
fn base64_spellings(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let engines = [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD];
    let mut forms: Vec<String> = [secret.to_string(), format!("{secret}\n")]
        .iter()
        .flat_map(|bytes| engines.map(|engine| engine.encode(bytes)))
        .collect();
    forms.sort();
    forms.dedup();
    forms
}

/// How a JSON writer may spell a secret inside a string: Python's `ensure_ascii` (`\u00e4`,
/// with lower- or upper-case hex), raw UTF-8 with only `"`, `\` and controls escaped, and each
/// with `/` written `\/`.
fn json_spellings(secret: &str) -> Vec<String> {
    let inner = |quoted: String| quoted[1..quoted.len() - 1].to_string();
    let value = crate::json::Value::String(secret.to_string());
    let ascii = inner(crate::json::dumps(&value));
    let upper = upper_hex_escapes(&ascii);
    let unicode = inner(crate::json::dumps_unicode(&value));
    let mut forms = vec![ascii, upper, unicode];
    let slashed: Vec<String> = forms.iter().map(|f| f.replace('/', "\\/")).collect();
    forms.extend(slashed);
    forms.retain(|f| f != secret);
    forms.sort();
    forms.dedup();
    forms
}

/// `\u00e4` → `\u00E4`.
fn upper_hex_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\\u") {
        out.push_str(&rest[..at + 2]);
        let hex = rest[at + 2..].get(..4).unwrap_or("");
        out.push_str(&hex.to_ascii_uppercase());
        rest = &rest[at + 2 + hex.len()..];
    }
    out.push_str(rest);
    out
}

/// Once a secret is held, a core dump would write it to disk for anyone who can read the dump:
/// none is written from then on (`RLIMIT_CORE` 0), and the process is no longer dumpable, so
/// that another process of the same user cannot attach to it or read its memory either, as
/// ssh-agent and gpg-agent do. Neither can fail in a way worth stopping for.
fn keep_out_of_core_dumps() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use rustix::process::{DumpableBehavior, Resource, Rlimit, set_dumpable_behavior, setrlimit};
        let _ = setrlimit(Resource::Core, Rlimit { current: Some(0), maximum: Some(0) });
        let _ = set_dumpable_behavior(DumpableBehavior::NotDumpable);
    });
}

/// `text` with every password masked where it stands, and nothing else changed.
pub(crate) fn mask(text: &str) -> String {
    LEARNT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).mask(text)
}

/// Whether an option of this name holds a password: `password`, `passwd`, and names that end
/// in them (`sslpassword`, `PGPASSWORD`, `db_password`), in any case.
pub(crate) fn is_password_key(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.ends_with("password") || name.ends_with("passwd")
}

impl Secrets {
    pub(crate) const fn new() -> Secrets {
        Secrets { passwords: Vec::new(), printed: Vec::new() }
    }

    pub(crate) fn add_password(&mut self, password: &str) {
        add_spellings(&mut self.passwords, password);
    }

    /// Learns one line of what a `_cmd` printed on stdout (trimmed, not empty), after the
    /// passwords of the line read as a URL (`url::add_command_output`, which reads the output
    /// line by line). A line that is a connection string (a URL, `password=…`) is masked where
    /// its password stands, and that password, now known, is masked whole there; its other
    /// parts are not secret. Any other line (a bare password) is masked wherever it stands as
    /// a word of its own.
    pub(crate) fn add_command_line(&mut self, line: &str) {
        let found = self.password_ranges(line);
        if found.is_empty() && !line.contains("://") {
            add_spellings(&mut self.printed, line);
        }
        for range in found {
            let written = &line[range];
            add_spellings(&mut self.passwords, written);
            add_spellings(&mut self.passwords, &text::percent_decode(written));
        }
    }

    /// `text` with each secret masked where it stands, and nothing else changed.
    pub(crate) fn mask(&self, text: &str) -> String {
        let mut found = self.password_ranges(text);
        found.extend(self.printed_ranges(text));
        replace(text, found)
    }

    /// Where passwords stand in `text`: URL userinfo and password options.
    fn password_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut found = self.userinfo_ranges(text);
        found.extend(self.option_ranges(text));
        found
    }

    /// The length of the longest known password spelling at `text[at..]` that `fits` what
    /// follows it.
    fn known_at(&self, text: &str, at: usize, fits: impl Fn(&str) -> bool) -> Option<usize> {
        self.passwords.iter().find_map(|p| {
            let end = spelt_at(text.as_bytes(), at, p.as_bytes())?;
            (text.is_char_boundary(end) && fits(&text[end..])).then_some(end - at)
        })
    }

    /// The password of every `scheme://user:password@…`. A learnt password is matched whole up
    /// to its `@`; otherwise, as SQLAlchemy splits a URL, the password runs from the first `:`
    /// to the last `@` of the URL, which in foreign text ends at the first blank or quote.
    fn userinfo_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(at) = text[from..].find("://") {
            let start = from + at + 3;
            let tail = &text[start..];
            let end = tail.find(ends_url).unwrap_or(tail.len());
            let token = &tail[..end];
            from = start + end;
            // The user name runs to the first `:` or `/`, blanks included (SQLAlchemy's
            // `[^:/]*`), so a learnt password is looked for there even past a blank.
            if let Some(colon) = tail.find([':', '/']).filter(|&at| tail[at..].starts_with(':')) {
                let password_at = start + colon + 1;
                if let Some(len) = self.known_at(text, password_at, |after| after.starts_with('@')) {
                    found.push(password_at..password_at + len);
                    from = from.max(password_at + len + 1);
                    continue;
                }
            }
            if let Some(colon) = token.find(':')
                && let Some(last) = token.rfind('@')
                && last > colon + 1
            {
                found.push(start + colon + 1..start + last);
            }
        }
        found
    }

    /// The value of every option whose name holds a password: `password=value` (libpq's
    /// keyword/value form, ending at a blank), `password='value'` (quoted, `\` escapes),
    /// `?password=value&` (a URL query, ending at `&` or `#`), and `"password": "value"` (a
    /// quoted key, as in JSON or a Python dict). Not `password: YES`, which is MySQL saying
    /// whether a password was used.
    fn option_ranges(&self, text: &str) -> Vec<Range<usize>> {
        // ASCII lower-casing keeps every byte offset.
        let lower = text.to_ascii_lowercase();
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(at) = lower[from..].find("passw") {
            let key_at = from + at;
            from = key_at + 1;
            let Some(key) = ["password", "passwd"].into_iter().find(|key| lower[key_at..].starts_with(key))
            else {
                continue;
            };
            let key_end = key_at + key.len();
            // `password_file`, `passwords`: another word.
            if text[key_end..].starts_with(is_word) {
                continue;
            }
            let name_at = text[..key_at].trim_end_matches(is_word).len();
            let before = text[..name_at].chars().next_back();
            let quoted_key =
                before.filter(|c| matches!(c, '"' | '\'')).filter(|q| text[key_end..].starts_with(*q));
            let mut pos = key_end + quoted_key.map_or(0, char::len_utf8);
            pos += blanks(&text[pos..]);
            match text[pos..].chars().next() {
                Some('=') => {}
                Some(':') if quoted_key.is_some() => {}
                _ => continue,
            }
            pos += 1;
            pos += blanks(&text[pos..]);
            let in_query = quoted_key.is_none() && matches!(before, Some('?' | '&'));
            let value = self.option_value(text, pos, in_query, quoted_key.is_some());
            if !value.is_empty() {
                from = value.end;
                found.push(value);
            }
        }
        found
    }

    /// The extent of an option's value starting at `at`.
    fn option_value(&self, text: &str, at: usize, in_query: bool, after_quoted_key: bool) -> Range<usize> {
        let rest = &text[at..];
        if let Some(quote) = rest.chars().next().filter(|c| matches!(c, '\'' | '"')) {
            let inner = at + 1;
            return inner..inner + closing_quote(&text[inner..], quote);
        }
        let grammar = rest
            .find(|c: char| {
                c.is_whitespace()
                    || matches!(c, '"' | '\'' | '`' | '<' | '>')
                    || (in_query && matches!(c, '&' | '#'))
                    || (after_quoted_key && matches!(c, ',' | '}' | ']'))
            })
            .unwrap_or(rest.len());
        // A learnt password is masked whole, a blank in it included, and without the
        // punctuation that closes the sentence around it.
        let fits = |after: &str| {
            after.is_empty()
                || after.starts_with(|c: char| c.is_whitespace() || ",;.:)]}&#'\"`<>".contains(c))
        };
        let len = self.known_at(text, at, fits).unwrap_or(grammar);
        at..at + len
    }

    /// Every place where a printed text stands as a whole word, in any of the spellings
    /// [`spelt_at`] reads. One pass over the text: a spelling is tried only where its first
    /// byte stands, or a `%XX` that encodes it (or, for a blank, a `+`), so that a server's
    /// answer of 16 MiB, even one of nothing but `%`, is masked in one pass over it.
    fn printed_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut found = Vec::new();
        if self.printed.is_empty() {
            return found;
        }
        let mut by_first: Vec<Vec<&[u8]>> = vec![Vec::new(); 256];
        for printed in &self.printed {
            let Some(&first) = printed.as_bytes().first() else { continue };
            by_first[usize::from(first)].push(printed.as_bytes());
            if first == b' ' {
                by_first[usize::from(b'+')].push(printed.as_bytes());
            }
        }
        let bytes = text.as_bytes();
        let none: Vec<&[u8]> = Vec::new();
        for (at, &byte) in bytes.iter().enumerate() {
            // Where a `%XX` stands, the spellings that start with the byte it encodes too.
            let encoded = percent_byte(bytes, at).map_or(&none, |d| &by_first[usize::from(d)]);
            for spelling in by_first[usize::from(byte)].iter().chain(encoded) {
                let Some(end) = spelt_at(bytes, at, spelling) else { continue };
                if !text.is_char_boundary(at) || !text.is_char_boundary(end) {
                    continue;
                }
                let (before, inside, after) = (&text[..at], &text[at..end], &text[end..]);
                let glued_before = inside.starts_with(is_word) && before.ends_with(is_word);
                let glued_after = inside.ends_with(is_word) && after.starts_with(is_word);
                if !glued_before && !glued_after {
                    found.push(at..end);
                }
            }
        }
        found
    }
}

/// Where `spelling` ends if it stands at `at` of `text`, byte for byte, each byte as it is
/// or percent-encoded (`%2f` and `%2F` alike: RFC 3986 makes the case of the hex digits no
/// part of the encoding, and an encoder may encode any byte, unreserved ones included), a
/// blank also as `+` (a form's encoding); the longest such reading.
fn spelt_at(text: &[u8], at: usize, spelling: &[u8]) -> Option<usize> {
    let mut i = at;
    for (k, &want) in spelling.iter().enumerate() {
        let got = *text.get(i)?;
        let raw = got == want || (want == b' ' && got == b'+');
        let encoded = percent_byte(text, i) == Some(want);
        match (raw, encoded) {
            // A `%` of the spelling where the text has `%25`: either reading may go on.
            (true, true) => return spelt_either_way(text, i, &spelling[k..]),
            (true, false) => i += 1,
            (false, true) => i += 3,
            (false, false) => return None,
        }
    }
    Some(i)
}

/// [`spelt_at`] where a `%` may stand as itself or as `%25`: the offsets reached are kept
/// as a set.
fn spelt_either_way(text: &[u8], at: usize, spelling: &[u8]) -> Option<usize> {
    let mut ends = vec![at];
    let mut next = Vec::new();
    for &want in spelling {
        next.clear();
        for &i in &ends {
            let Some(&got) = text.get(i) else { continue };
            if got == want || (want == b' ' && got == b'+') {
                next.push(i + 1);
            }
            if percent_byte(text, i) == Some(want) {
                next.push(i + 3);
            }
        }
        if next.is_empty() {
            return None;
        }
        next.sort_unstable();
        next.dedup();
        std::mem::swap(&mut ends, &mut next);
    }
    ends.last().copied()
}

fn add_spellings(into: &mut Vec<String>, secret: &str) {
    add_new(into, password_spellings(secret));
}

/// Adds the `forms` that `into` lacks, and keeps it longest first.
fn add_new(into: &mut Vec<String>, forms: impl IntoIterator<Item = String>) {
    for form in forms {
        if !into.contains(&form) {
            into.push(form);
        }
    }
    into.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
}

/// Every spelling of a password that a URL or a driver message may carry: as written, and
/// percent-encoded the ways `quote`, SQLAlchemy's rendering and query strings encode it (upper-
/// and lower-case escapes, `+` for a space). Longest first, so that a masker that tries them in
/// order replaces an encoded form whole before a shorter form (the raw password can be part of
/// its own encoding, e.g. `%` in `%25`) cuts into it.
fn password_spellings(password: &str) -> Vec<String> {
    if password.is_empty() {
        return Vec::new();
    }
    let mut forms = vec![
        password.to_string(),
        percent_encode(password, b""),
        percent_encode(password, b" +"),
        encode_query_part(password),
        percent_encode(password, b"").replace("%20", "+"),
    ];
    let lower_hex: Vec<String> = forms.iter().map(|f| lowercase_escapes(f)).collect();
    forms.extend(lower_hex);
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    forms
}

/// `encoded` with its `%XX` escapes in lower-case hex.
fn lowercase_escapes(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut chars = encoded.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '%' {
            out.extend(chars.by_ref().take(2).map(|h| h.to_ascii_lowercase()));
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where a URL quoted in a message ends.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

fn blanks(text: &str) -> usize {
    text.len() - text.trim_start_matches([' ', '\t']).len()
}

/// The length of a quoted value up to its closing `quote` (a `\` escapes the next character),
/// or all of `text` when it is never closed.
fn closing_quote(text: &str, quote: char) -> usize {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == quote => return i,
            _ => {}
        }
    }
    text.len()
}

/// `text` with each range replaced by [`MASK`]; overlapping and touching ranges become one.
fn replace(text: &str, mut ranges: Vec<Range<usize>>) -> String {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(open) if range.start <= open.end => open.end = open.end.max(range.end),
            _ => merged.push(range),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for done in merged {
        out.push_str(&text[copied..done.start]);
        out.push_str(MASK);
        copied = done.end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knowing(passwords: &[&str]) -> Secrets {
        let mut secrets = Secrets::new();
        for password in passwords {
            secrets.add_password(password);
        }
        secrets
    }

    /// Messages the tool prints, word for word as the drivers and the tool write them.
    const MESSAGES: &[&str] = &[
        "cannot connect to PostgreSQL database no_such_db on 127.0.0.1:5432: FATAL: database \"no_such_db\" \
         does not exist",
        "cannot connect to PostgreSQL database x on 127.0.0.1:1: error connecting to server: Connection \
         refused (os error 111)",
        "cannot connect to PostgreSQL database airflow_x on 127.0.0.1:5432: FATAL: role \"airflow\" does not \
         exist",
        "cannot connect to MySQL database airflow_x on 127.0.0.1:3306: ERROR 1045 (28000): Access denied for \
         user 'airflow'@'127.0.0.1' (using password: YES)",
        "PostgreSQL database airflow_x on db:5432 has no task_state_store or asset_state_store table: is it \
         an Airflow 3.3 metastore? (`airflow db migrate` creates them)",
        "a SQLite URL takes no user, password, host or port (sqlite URL in [database] sql_alchemy_conn): use \
         sqlite:////absolute/path/to/airflow.db",
        "clean: deleted 12 expired task row(s) in 3 batch(es) from postgresql://airflow:***@db/airflow",
    ];

    /// The defect this module fixes: a password that is a letter or a word of the message
    /// must change nothing in it, neither as a known password nor as an unknown one.
    #[test]
    fn messages_without_a_password_position_are_unchanged_whatever_the_password() {
        for message in MESSAGES {
            let mut candidates: Vec<String> = ('a'..='z').chain('A'..='Z').map(String::from).collect();
            candidates
                .extend(message.split(|c: char| !is_word(c)).filter(|w| !w.is_empty()).map(String::from));
            candidates.extend(
                ["'", ":", "@", "***", "YES", "for", "denied", "database", "airflow"].map(String::from),
            );
            for password in &candidates {
                assert_eq!(knowing(&[password]).mask(message), *message, "password {password:?}");
            }
            assert_eq!(Secrets::new().mask(message), *message);
        }
    }

    #[test]
    fn short_and_common_passwords_are_masked_only_in_the_url() {
        let cases = [
            (
                "e",
                "cannot connect to postgresql://postgres:e@127.0.0.1:5432/no_such_db: database does not exist",
            ),
            (
                "airflow",
                "cannot connect to postgresql://airflow:airflow@db:5432/airflow_x (`airflow db migrate`)",
            ),
            ("database", "unknown database in mysql://root:database@127.0.0.1:3306/database"),
            ("denied", "Access denied for user 'u'@'h' (using password: YES): mysql://u:denied@h/denied"),
            ("for", "Access denied for user 'for'@'h' (using password: YES): mysql://for:for@h/for"),
        ];
        for (password, text) in cases {
            let masked = knowing(&[password]).mask(text);
            let url_password = format!(":{password}@");
            assert_eq!(masked, text.replacen(&url_password, ":***@", 1), "{password:?}");
            // The same without knowing the password: the URL's grammar finds it.
            assert_eq!(Secrets::new().mask(text), masked, "{password:?}");
        }
    }

    #[test]
    fn url_passwords_in_foreign_text_are_masked() {
        let cases = [
            (
                "vault: cannot fetch postgresql://airflow:s3cr%40t@db:5432/airflow (403)",
                "vault: cannot fetch postgresql://airflow:***@db:5432/airflow (403)",
            ),
            ("'mysql+pymysql://u:p@ss:w@h/db'", "'mysql+pymysql://u:***@h/db'"),
            ("a://u:pw@h and b://v:qq@k", "a://u:***@h and b://v:***@k"),
            (
                "no userinfo postgresql://db/airflow, user only mysql://root@h/x",
                "no userinfo postgresql://db/airflow, user only mysql://root@h/x",
            ),
            ("empty password a://u:@h", "empty password a://u:@h"),
            ("plain text, no url: a:b@c", "plain text, no url: a:b@c"),
            ("trailing ://", "trailing ://"),
            ("ü://ü:ü@ü", "ü://ü:***@ü"),
            (
                "port, no password: a://h:5432/db and a://u@h:1/x",
                "port, no password: a://h:5432/db and a://u@h:1/x",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(Secrets::new().mask(text), expected, "{text}");
        }
    }

    /// A learnt password is masked whole in every spelling, even where the grammar of foreign
    /// text would cut it (a blank, an `@`), and its bare mentions elsewhere are left alone.
    #[test]
    fn learnt_passwords_are_masked_whole_in_every_spelling_at_their_positions() {
        let known = knowing(&["p@ss w/%rd"]);
        let cases = [
            ("raw a://u:p@ss w/%rd@h/db", "raw a://u:***@h/db"),
            ("quoted a://u:p%40ss%20w%2F%25rd@h/db", "quoted a://u:***@h/db"),
            ("lower a://u:p%40ss%20w%2f%25rd@h/db", "lower a://u:***@h/db"),
            ("sa a://u:p%40ss w%2F%25rd@h/db?x=a@b", "sa a://u:***@h/db?x=a@b"),
            ("query a://h/db?password=p%40ss+w%2F%25rd&x=1", "query a://h/db?password=***&x=1"),
            ("libpq host=h password=p@ss w/%rd dbname=d", "libpq host=h password=*** dbname=d"),
            ("(password=p@ss w/%rd)", "(password=***)"),
            (
                "bare p@ss w/%rd is not at a password position",
                "bare p@ss w/%rd is not at a password position",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(known.mask(text), expected, "{text}");
        }
        // `%` alone: its encoding `%25` is masked whole, never cut in two.
        assert_eq!(knowing(&["%"]).mask("a://u:%25@h a%25b %"), "a://u:***@h a%25b %");
        assert_eq!(knowing(&[""]).mask("a://u:@h"), "a://u:@h");
    }

    #[test]
    fn password_options_are_masked_by_their_grammar() {
        let cases = [
            ("host=h password=secret dbname=d", "host=h password=*** dbname=d"),
            ("password = secret", "password = ***"),
            (r"host=h password='it\'s a secret' dbname=d", r"host=h password='***' dbname=d"),
            ("'host=h password=secret'", "'host=h password=***'"),
            ("a://h/db?password=s3cr%26t&sslmode=require#x", "a://h/db?password=***&sslmode=require#x"),
            ("a://h/db?sslmode=require&sslpassword=k", "a://h/db?sslmode=require&sslpassword=***"),
            ("{\"user\": \"u\", \"password\": \"p, w\"}", "{\"user\": \"u\", \"password\": \"***\"}"),
            ("{'passwd': 'pw', 'db': 'x'}", "{'passwd': '***', 'db': 'x'}"),
            ("{\"password\": 12345, \"db\": 1}", "{\"password\": ***, \"db\": 1}"),
            ("PGPASSWORD=secret psql", "PGPASSWORD=*** psql"),
            ("Password=Secret", "Password=***"),
            ("never closed password='abc def", "never closed password='***"),
            // Not a password position: MySQL saying whether one was used, other options.
            (
                "Access denied for user 'u'@'h' (using password: YES)",
                "Access denied for user 'u'@'h' (using password: YES)",
            ),
            (
                "password_file=/run/secret passwords=3 password=",
                "password_file=/run/secret passwords=3 password=",
            ),
            ("no password here, password: none", "no password here, password: none"),
        ];
        for (text, expected) in cases {
            assert_eq!(Secrets::new().mask(text), expected, "{text}");
        }
    }

    #[test]
    fn what_a_failing_command_printed_is_masked_where_it_stands_alone() {
        let mut printed = Secrets::new();
        crate::url::add_command_output(&mut printed, "e\n");
        assert_eq!(printed.mask("error: e is not a URL (e)"), "error: *** is not a URL (***)");
        assert_eq!(printed.mask("every line here stays"), "every line here stays");

        let mut printed = Secrets::new();
        crate::url::add_command_output(&mut printed, "airflow");
        assert_eq!(printed.mask("airflow_x: airflow rejected"), "airflow_x: *** rejected");

        // A printed URL is masked where its password stands, and that password, now known,
        // whole there (the blank in it included); the URL's other parts, and the words of the
        // message, are not secret.
        let mut printed = Secrets::new();
        crate::url::add_command_output(
            &mut printed,
            "postgresql://airflow:s%40e@db/airflow_x\nmysql://for:f r@h/db",
        );
        assert_eq!(
            printed.mask("vault: lease for airflow on db expired: postgresql://airflow:s%40e@db/airflow_x"),
            "vault: lease for airflow on db expired: postgresql://airflow:***@db/airflow_x"
        );
        assert_eq!(printed.mask("for mysql://for:f r@h/db"), "for mysql://for:***@h/db");

        // A URL without a password holds no secret.
        let mut printed = Secrets::new();
        crate::url::add_command_output(&mut printed, "postgresql://db/airflow");
        assert_eq!(
            printed.mask("cannot reach postgresql://db/airflow"),
            "cannot reach postgresql://db/airflow"
        );
    }

    #[test]
    fn masking_twice_changes_nothing_more() {
        let known = knowing(&["e", "p@ss w/%rd"]);
        for text in [
            "a://u:e@h/db password=e x",
            "a://u:p@ss w/%rd@h/db and ?password=p%40ss+w%2F%25rd",
            "\"password\": \"x\" a://u:***@h",
        ] {
            let once = known.mask(text);
            assert_eq!(known.mask(&once), once, "{text}");
        }
    }

    /// RFC 3986: `%2f` is `%2F`, and an encoder may encode any byte, an unreserved one too;
    /// a form writes a blank as `+`. Every such spelling of a secret is masked whole.
    #[test]
    fn percent_encoded_spellings_are_matched_in_any_case_and_any_choice_of_bytes() {
        let mut printed = Secrets::new();
        crate::url::add_command_output(&mut printed, "Pä s/%.w");
        for spelling in [
            "Pä s/%.w",
            "P%C3%A4%20s%2F%25%2Ew",
            "P%c3%a4%20s%2f%25%2ew",
            "P%c3%A4+s/%25.w",
            "%50%C3%a4 %73/%.%77",
        ] {
            assert_eq!(
                printed.mask(&format!("said: {spelling}, twice: ({spelling})")),
                "said: ***, twice: (***)"
            );
        }
        // Not a whole word, or a different byte: left alone.
        assert_eq!(printed.mask("xP%c3%a4 s/%.w"), "xP%c3%a4 s/%.w");
        assert_eq!(printed.mask("P%c3%a5 s/%.w"), "P%c3%a5 s/%.w");
        assert_eq!(spelt_at(b"a%25%b", 0, b"a%%b"), Some(6));
        assert_eq!(spelt_at(b"%2", 0, b"%"), Some(1));
        assert_eq!(spelt_at(b"%zz", 0, b"%"), Some(1));
        let mut known = Secrets::new();
        known.add_password("p@ss w");
        // Matched whole up to its `@`, although the grammar of foreign text ends at the blank.
        assert_eq!(known.mask("(a://u:p%40s%73 w@h)"), "(a://u:***@h)");
    }

    #[test]
    fn base64_spellings_of_a_secret_and_of_a_login_are_masked() {
        register_secret("b64-t0ken/secret?");
        // Standard and URL-safe alphabets, with and without padding; and with `echo`'s line end.
        for encoded in ["YjY0LXQwa2VuL3NlY3JldD8=", "YjY0LXQwa2VuL3NlY3JldD8", "YjY0LXQwa2VuL3NlY3JldD8K"] {
            assert_eq!(mask(&format!("token {encoded} refused")), "token *** refused", "{encoded}");
        }
        register_login("ann", "pw:ä");
        // base64("ann:pw:ä"), as a Basic header carries it, and its URL-safe spelling.
        assert_eq!(mask("Authorization: Basic YW5uOnB3OsOk"), "Authorization: Basic ***");
        assert_eq!(base64_spellings("?>?"), ["Pz4/", "Pz4/Cg", "Pz4/Cg==", "Pz4_", "Pz4_Cg", "Pz4_Cg=="]);
    }

    #[test]
    fn the_run_wide_registry_masks_what_was_registered() {
        let password = "Reg1stered pw";
        register(password);
        register("");
        assert_eq!(mask("a://u:Reg1stered pw@h/db; Reg1stered"), "a://u:***@h/db; Reg1stered");
        assert!(is_password_key("sslPassword") && is_password_key("passwd") && !is_password_key("passwords"));
    }
}
