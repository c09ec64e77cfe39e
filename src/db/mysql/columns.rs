//! What Airflow's MySQL columns can hold, which is less than on the other databases:
//! - `TIMESTAMP(6)` columns hold naive UTC from 1970-01-01 00:00:01 to 2038-01-19
//!   03:14:07.999999;
//! - `value` is MEDIUMTEXT (16,777,215 bytes);
//! - keys and dag/run/task ids are `utf8mb3_bin`: no characters outside the Basic
//!   Multilingual Plane. Asset names and uris are latin1 (MySQL's cp1252).
//!
//! What a column cannot hold is refused before the server sees it, naming the column; a
//! lookup by such text matches nothing.

use crate::error::{Error, Result};
use crate::text::quote;
use crate::time::Timestamp;

/// The first and last instants a MySQL `TIMESTAMP(6)` column can hold, in microseconds since
/// the Unix epoch: 1970-01-01 00:00:01 and 2038-01-19 03:14:07.999999 UTC.
const TIMESTAMP_FIRST_MICROS: i64 = 1_000_000;
const TIMESTAMP_LAST_MICROS: i64 = 2_147_483_647_999_999;

/// `MEDIUMTEXT` holds at most 2^24 - 1 bytes.
pub(super) const MEDIUMTEXT_BYTES: usize = 16_777_215;

/// Whether `utf8mb3` (MySQL's three-byte UTF-8) can hold the text: only characters of the
/// Basic Multilingual Plane.
pub(super) fn fits_utf8mb3(text: &str) -> bool {
    // A character past U+FFFF is the one UTF-8 sequence whose lead byte is 0xF0 or more.
    !text.bytes().any(|b| b >= 0xF0)
}

/// Whether MySQL's `latin1` can hold the text. That charset is Windows-1252, with its five
/// unassigned bytes (0x81, 0x8D, 0x8F, 0x90, 0x9D) mapped to the C1 controls of the same
/// number; every other C1 control maps to nothing.
pub(super) fn fits_latin1(text: &str) -> bool {
    text.chars().all(|c| match u32::from(c) {
        0x00..=0x7F | 0xA0..=0xFF => true,
        0x81 | 0x8D | 0x8F | 0x90 | 0x9D => true,
        _ => "€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ".contains(c),
    })
}

/// Refuses text a `utf8mb3` column cannot store, naming the column.
pub(super) fn require_utf8mb3(column: &str, text: &str) -> Result<()> {
    if fits_utf8mb3(text) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{column} {} contains characters outside the Basic Multilingual Plane (such as emoji), \
             which Airflow's MySQL schema cannot store (utf8mb3 column)",
            quote(text)
        ))
        .into())
    }
}

pub(super) fn require_latin1(column: &str, text: &str) -> Result<()> {
    if fits_latin1(text) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{column} {} contains characters that Airflow's MySQL schema cannot store (latin1 column)",
            quote(text)
        ))
        .into())
    }
}

/// Refuses an instant a `TIMESTAMP(6)` column cannot hold, before anything is written.
pub(super) fn require_storable_time(column: &str, at: Timestamp) -> Result<()> {
    if at.micros() > TIMESTAMP_LAST_MICROS {
        anyhow::bail!(Error::Usage(format!(
            "cannot store {column} {at}: MySQL TIMESTAMP ends at 2038-01-19 03:14:07 UTC; use a shorter retention or never"
        )));
    }
    if at.micros() < TIMESTAMP_FIRST_MICROS {
        anyhow::bail!(Error::Usage(format!(
            "cannot store {column} {at}: MySQL TIMESTAMP starts at 1970-01-01 00:00:01 UTC"
        )));
    }
    Ok(())
}

pub(super) fn require_value_size(column: &str, value: &str) -> Result<()> {
    if value.len() > MEDIUMTEXT_BYTES {
        return Err(Error::Usage(format!(
            "the value is {} bytes as stored; Airflow's MySQL column {column} (MEDIUMTEXT) holds at most {MEDIUMTEXT_BYTES}",
            value.len()
        )).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::kind;

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).expect("timestamp")
    }

    #[test]
    fn timestamp_range_is_mysqls() {
        assert!(require_storable_time("expires_at", ts("2038-01-19T03:14:07.999999Z")).is_ok());
        assert!(require_storable_time("expires_at", ts("1970-01-01T00:00:01Z")).is_ok());
        let late = require_storable_time("expires_at", ts("2038-01-19T03:14:08Z")).expect_err("too late");
        assert!(matches!(kind(&late), Some(Error::Usage(_))));
        assert!(late.to_string().contains("MySQL TIMESTAMP ends at 2038-01-19 03:14:07 UTC"), "{late}");
        let early =
            require_storable_time("expires_at", ts("1970-01-01T00:00:00.999999Z")).expect_err("too early");
        assert!(matches!(kind(&early), Some(Error::Usage(_))));
        assert_eq!(TIMESTAMP_LAST_MICROS, ts("2038-01-19T03:14:07.999999Z").micros());
    }

    #[test]
    fn utf8mb3_holds_the_basic_multilingual_plane_only() {
        assert!(fits_utf8mb3("plain ascii/key"));
        assert!(fits_utf8mb3("한국어 ключ €\u{FFFF}"));
        assert!(!fits_utf8mb3("rocket 🚀"));
        assert!(!fits_utf8mb3("\u{10000}"));
        let err = require_utf8mb3("key", "🚀").expect_err("refused");
        assert!(matches!(kind(&err), Some(Error::Usage(_))));
        assert!(err.to_string().starts_with("key "), "{err}");
    }

    #[test]
    fn latin1_is_windows_1252() {
        assert!(fits_latin1("s3://bucket/café"));
        assert!(fits_latin1("€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ"));
        assert!(fits_latin1("\u{81}\u{8D}\u{8F}\u{90}\u{9D}\u{A0}ÿ"));
        assert!(!fits_latin1("\u{80}"));
        assert!(!fits_latin1("\u{9F}"));
        assert!(!fits_latin1("ā"));
        assert!(!fits_latin1("주문"));
        assert!(!fits_latin1("🚀"));
        // The full repertoire, as MariaDB 10.11 converts it: 256 characters.
        let count =
            (0..=0x10FFFF_u32).filter_map(char::from_u32).filter(|c| fits_latin1(&c.to_string())).count();
        assert_eq!(count, 256);
    }

    #[test]
    fn value_size_is_mediumtext() {
        assert!(require_value_size("v", &"x".repeat(MEDIUMTEXT_BYTES)).is_ok());
        assert!(matches!(
            require_value_size("v", &"x".repeat(MEDIUMTEXT_BYTES + 1)).err().as_ref().and_then(kind),
            Some(Error::Usage(_))
        ));
    }
}
