//! How text from the database or the user is shown: one escaping rule for tables, plain
//! output and messages, so that a key holding a newline cannot break a line, and a
//! right-to-left override (U+202E) or a zero-width space cannot make one string look like
//! another.
//!
//! Characters that are invisible or move the cursor are written as Python writes them in a
//! `repr`: `\t`, `\n`, `\r`, then `\xHH`, `\uHHHH` or `\UHHHHHHHH` by code point. They are the
//! control characters (U+0000–U+001F, U+007F–U+009F), the format characters (Unicode category
//! Cf: bidirectional controls, zero-width spaces and joiners, the byte order mark, soft hyphen,
//! tags …) and the line and paragraph separators (U+2028, U+2029). Everything else, non-ASCII
//! letters and emoji included, is shown as it is.
//!
//! Also the percent-encoding of `urllib.parse` (`quote`, `unquote`), which the database URL
//! and the masking of its passwords share.

use std::borrow::Cow;
use std::fmt::Write;

/// The format characters (Unicode 15.1, category Cf), as inclusive ranges.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is shown escaped: a control, format or line/paragraph separator character.
pub(crate) fn is_hidden(c: char) -> bool {
    let code = u32::from(c);
    c.is_control()
        || code == 0x2028
        || code == 0x2029
        || FORMAT.iter().any(|(low, high)| (*low..=*high).contains(&code))
}

fn push_escape(out: &mut String, c: char) {
    let code = u32::from(c);
    let _ = match c {
        '\t' => write!(out, "\\t"),
        '\n' => write!(out, "\\n"),
        '\r' => write!(out, "\\r"),
        _ if code < 0x100 => write!(out, "\\x{code:02x}"),
        _ if code < 0x10000 => write!(out, "\\u{code:04x}"),
        _ => write!(out, "\\U{code:08x}"),
    };
}

fn escaped(text: &str, also: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_hidden(c) || also(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_hidden(c) {
            push_escape(&mut out, c);
        } else if also(c) {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A table cell: hidden characters escaped; backslashes stay as they are, so a JSON value
/// reads as JSON.
pub(crate) fn cell(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// A field of plain output: hidden characters escaped and every backslash doubled, so a line
/// holds no tab or newline of its own and each field decodes back to exactly one text.
pub(crate) fn field(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c == '\\')
}

/// `text` cut to `chars` characters, the last of them `…`, when it is longer: a long value or
/// key would make a table unreadable.
pub(crate) fn cut(text: &str, chars: usize) -> String {
    if text.chars().nth(chars).is_none() {
        return text.to_string();
    }
    let head: String = text.chars().take(chars.saturating_sub(1)).collect();
    format!("{head}…")
}

/// `text` within `chars` characters, its middle left out as `…` when it is longer: a long
/// path keeps its start and its file name.
pub(crate) fn cut_middle(text: &str, chars: usize) -> String {
    let count = text.chars().count();
    if count <= chars {
        return text.to_string();
    }
    let kept = chars.saturating_sub(1);
    let head: String = text.chars().take(kept / 2).collect();
    let tail: String = text.chars().skip(count - (kept - kept / 2)).collect();
    format!("{head}…{tail}")
}

/// Text quoted in a message: `"…"`, with `"` and `\` escaped and hidden characters escaped.
pub(crate) fn quote(text: &str) -> String {
    format!("\"{}\"", escaped(text, |c| c == '"' || c == '\\'))
}

/// `urllib.parse.unquote`: valid `%XX` escapes become bytes, anything else stays as written,
/// and bytes that are not UTF-8 become U+FFFD.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let decoded = percent_byte(bytes, i);
        out.push(decoded.unwrap_or(byte));
        i += if decoded.is_some() { 3 } else { 1 };
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The byte a `%XX` escape at `i` of `bytes` stands for, if one stands there.
pub(crate) fn percent_byte(bytes: &[u8], i: usize) -> Option<u8> {
    let hex = |at: usize| bytes.get(at).and_then(|b| char::from(*b).to_digit(16));
    if bytes.get(i) != Some(&b'%') {
        return None;
    }
    u8::try_from(hex(i + 1)? << 4 | hex(i + 2)?).ok()
}

/// `urllib.parse.quote`: letters, digits and `_.-~` stay, as do the bytes in `safe`; every
/// other byte becomes `%XX` (upper-case hex).
pub(crate) fn percent_encode(text: &str, safe: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~".contains(&b) || safe.contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A query key or value: space as `+`; `/` and `:` kept for readable socket paths. `@` must
/// stay encoded, or a URL with `host:port` would have its query taken for a password.
pub(crate) fn encode_query_part(text: &str) -> String {
    percent_encode(text, b" /:").replace(' ', "+")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_middle_keeps_both_ends_within_the_bound() {
        assert_eq!(cut_middle("/a/b/c", 6), "/a/b/c");
        assert_eq!(cut_middle("/aaaa/bbbb/airflow.cfg", 12), "/aaaa…ow.cfg");
        assert_eq!(cut_middle("/aaaa/bbbb/airflow.cfg", 12).chars().count(), 12);
    }

    #[test]
    fn hidden_characters_are_escaped_as_python_repr_writes_them() {
        assert_eq!(cell("a\tb\nc\rd\u{1b}e\u{7f}\u{85}"), "a\\tb\\nc\\rd\\x1be\\x7f\\x85");
        assert_eq!(cell("x\u{202e}y\u{200b}z\u{feff}\u{ad}"), "x\\u202ey\\u200bz\\ufeff\\xad");
        assert_eq!(cell("\u{2028}\u{2029}\u{e0001}"), "\\u2028\\u2029\\U000e0001");
        assert_eq!(cell("\0"), "\\x00");
    }

    #[test]
    fn visible_text_is_left_alone() {
        for text in ["plain", "café", "ключ/值", "🚀 emoji", "a\\b \"q\"", "\u{a0}nbsp", "e\u{301}"] {
            assert!(matches!(cell(text), Cow::Borrowed(_)), "{text}");
        }
        assert_eq!(field("a\\b"), "a\\\\b");
        assert_eq!(field("a\\tb\tc"), "a\\\\tb\\tc");
    }

    #[test]
    fn long_text_is_cut_with_an_ellipsis() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
        assert_eq!(cut(&"é".repeat(600), 60).chars().count(), 60);
    }

    #[test]
    fn quotes_escape_quotes_and_backslashes() {
        assert_eq!(quote("d'; DROP \"x\" \\"), "\"d'; DROP \\\"x\\\" \\\\\"");
        assert_eq!(quote("r\n\u{202e}"), "\"r\\n\\u202e\"");
        assert_eq!(quote(""), "\"\"");
    }
}
