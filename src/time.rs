//! UTC instants in the text forms Airflow stores and shows, and the retention and duration
//! amounts users type on the command line.
//!
//! Airflow's SQLite columns hold `YYYY-MM-DD HH:MM:SS.ffffff` and are compared as strings, so
//! the text this module writes must sort exactly as the instants do. The calendar and both
//! text forms are chrono's; typed and stored text is scanned by hand, to the rules of Python's
//! `fromisoformat`, and limited to the years 1 to 9999 that Python's `datetime` (and so
//! Airflow) can hold.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{
    DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Offset, SecondsFormat, Timelike,
    Utc,
};

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_MINUTE: i64 = 60 * MICROS_PER_SECOND;
const MICROS_PER_HOUR: i64 = 60 * MICROS_PER_MINUTE;
const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;
const MICROS_PER_WEEK: i64 = 7 * MICROS_PER_DAY;

/// An instant in UTC, in microseconds since 1970-01-01T00:00:00Z (Python's resolution). Not
/// a chrono `DateTime`: PostgreSQL holds instants up to the year 294276, past chrono's reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Timestamp(i64);

/// Why a timestamp, retention or duration text was refused. The offending text is kept
/// (shortened, escaped) so the one-line message can show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TimeError {
    /// A timestamp given by a user.
    #[error(
        "invalid timestamp {text}: {problem}; expected RFC 3339 such as \
         2026-01-02T03:04:05Z or 2026-01-02T05:04:05.5+02:00, or a date 2026-01-02 (midnight UTC)"
    )]
    Timestamp { text: String, problem: &'static str },
    /// A date and time without `Z` or an offset: local time or UTC cannot be told apart.
    #[error(
        "timestamp {text} has no time zone: add Z for UTC (2026-01-02T03:04:05Z) \
         or an offset such as +02:00"
    )]
    NoOffset { text: String },
    /// Text found in a timestamp column.
    #[error(
        "unreadable stored timestamp {text}: {problem}; expected \
         YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]"
    )]
    StoredTimestamp { text: String, problem: &'static str },
    #[error(
        "invalid retention {text}: {problem}; expected whole numbers with units \
         w, d, h, m, s from largest to smallest (7d, 6h, 1h30m) or never"
    )]
    Retention { text: String, problem: &'static str },
    /// A retention that adds up to nothing; see `parse_retention`.
    #[error(
        "invalid retention {text}: retention must be positive; use never for keys \
         that should not expire"
    )]
    ZeroRetention { text: String },
    #[error(
        "invalid duration {text}: {problem}; expected whole numbers with units \
         w, d, h, m, s, ms from largest to smallest (200ms, 10m, 1h30m) or 0"
    )]
    Duration { text: String, problem: &'static str },
    #[error("[state_store] default_retention_days must be >= 0, got {days}")]
    NegativeRetentionDays { days: i64 },
    #[error(
        "[state_store] default_retention_days = {days} is too large \
         (expiry would be after the year 9999)"
    )]
    RetentionDaysTooLarge { days: i64 },
    /// now + retention is after 9999-12-31T23:59:59.999999Z.
    #[error(
        "the retention puts the expiry after 9999-12-31T23:59:59.999999Z, \
         the last instant a timestamp can hold; use never instead"
    )]
    ExpiryOutOfRange,
}

/// The text as a message shows it: quoted, escaped onto one line, cut at 64 characters.
fn shown(text: &str) -> String {
    const LIMIT: usize = 64;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("\"{}…\"", text[..cut].escape_debug()),
        None => format!("\"{}\"", text.escape_debug()),
    }
}

impl Timestamp {
    /// 0001-01-01T00:00:00Z.
    pub(crate) const MIN: Timestamp = Timestamp(-62_135_596_800 * MICROS_PER_SECOND);
    /// 9999-12-31T23:59:59.999999Z.
    pub(crate) const MAX: Timestamp = Timestamp(253_402_300_800 * MICROS_PER_SECOND - 1);

    /// The system clock, kept within `MIN..=MAX`. Not chrono's `Utc::now`, which panics on a
    /// clock set before 1970.
    pub(crate) fn now() -> Timestamp {
        let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
        };
        Timestamp(micros.clamp(Self::MIN.0, Self::MAX.0))
    }

    /// Any value is kept as given, even outside the years 1 to 9999 (PostgreSQL can hold
    /// such instants); only the parsers and `checked_add` enforce that range.
    pub(crate) fn from_micros(us: i64) -> Self {
        Timestamp(us)
    }

    pub(crate) fn micros(self) -> i64 {
        self.0
    }

    /// `self + us`, or `None` outside `MIN..=MAX`.
    pub(crate) fn checked_add(self, us: i64) -> Option<Timestamp> {
        self.0.checked_add(us).map(Timestamp).filter(Timestamp::in_range)
    }

    fn in_range(&self) -> bool {
        (Self::MIN..=Self::MAX).contains(self)
    }

    /// Midnight UTC of this instant's day, and of the `days`-th day after it: a UTC day is
    /// always 86,400 seconds (the Unix time scale has no leap seconds), so no calendar is
    /// needed.
    pub(crate) fn utc_midnight(self, days: i64) -> Timestamp {
        let day = self.0.div_euclid(MICROS_PER_DAY).saturating_add(days);
        Timestamp(day.saturating_mul(MICROS_PER_DAY))
    }

    /// The UTC calendar date of this instant, `YYYY-MM-DD`.
    pub(crate) fn utc_date(self) -> String {
        self.shown(|at| at.format("%Y-%m-%d").to_string())
    }

    /// A timestamp typed by a user. Accepts RFC 3339 (`T`, `t` or a space between date and
    /// time; `Z`, `z` or `±HH:MM`), a bare date as midnight UTC, and, like Python's
    /// `fromisoformat`, a missing `:SS`, a `,` decimal mark and `±HHMM`/`±HH` offsets.
    /// Fractions beyond microseconds are truncated, as Python does.
    pub(crate) fn parse_rfc3339(s: &str) -> Result<Timestamp, TimeError> {
        let (local, offset) =
            parse_datetime(s).map_err(|problem| TimeError::Timestamp { text: shown(s), problem })?;
        let offset = offset.ok_or_else(|| TimeError::NoOffset { text: shown(s) })?;
        to_utc(local, offset).ok_or_else(|| TimeError::Timestamp { text: shown(s), problem: OUT_OF_RANGE })
    }

    /// Text from a SQLite timestamp column: Airflow's own form, and what other writers
    /// leave there (no fraction, `T`, a `Z` or an offset). Text without an offset is UTC,
    /// which is how Airflow stores it.
    pub(crate) fn parse_db_text(s: &str) -> Result<Timestamp, TimeError> {
        let stored = |problem| TimeError::StoredTimestamp { text: shown(s), problem };
        let (local, offset) = parse_datetime(s).map_err(stored)?;
        to_utc(local, offset.unwrap_or(Utc.fix())).ok_or_else(|| stored(OUT_OF_RANGE))
    }

    /// Airflow's SQLite storage form, `YYYY-MM-DD HH:MM:SS.ffffff`; for years 1 to 9999 its
    /// string order is the instants' order.
    pub(crate) fn to_sqlite_text(self) -> String {
        self.shown(|at| {
            let (date, time) = (at.date_naive(), at.time());
            if !(1..=9999).contains(&date.year()) {
                return at.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
            }
            // Every timestamp an import or a clean binds is this text: written field by field,
            // without a format string to parse each time.
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
                date.year(),
                date.month(),
                date.day(),
                time.hour(),
                time.minute(),
                time.second(),
                time.nanosecond() / 1000
            )
        })
    }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, for display and JSON.
    pub(crate) fn to_rfc3339(self) -> String {
        self.shown(|at| at.to_rfc3339_opts(SecondsFormat::Micros, true))
    }

    /// Years outside 0 to 9999 get a sign (`+10000`, `-0001`), as ISO 8601 wants. An instant
    /// past chrono's ±262,143 years, which only a PostgreSQL row written by another tool can
    /// hold, has no calendar text here: it is shown as the count it is.
    fn shown(self, form: impl Fn(DateTime<Utc>) -> String) -> String {
        DateTime::from_timestamp_micros(self.0)
            .map_or_else(|| format!("{} microseconds after 1970-01-01T00:00:00Z", self.0), form)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

const OUT_OF_RANGE: &str = "outside the years 0001 to 9999 once converted to UTC";

/// `local` at `offset` east of UTC, if that instant is within `MIN..=MAX`.
fn to_utc(local: NaiveDateTime, offset: FixedOffset) -> Option<Timestamp> {
    let utc = local.checked_sub_offset(offset)?;
    Some(Timestamp(utc.and_utc().timestamp_micros())).filter(Timestamp::in_range)
}

/// A cursor over ASCII text; every read checks bounds, so malformed input cannot panic.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, wanted: &[u8]) -> Option<u8> {
        let b = self.peek().filter(|b| wanted.contains(b))?;
        self.pos += 1;
        Some(b)
    }

    /// Exactly `n` ASCII digits as a number; `n` is at most 4, so the number fits.
    fn digits(&mut self, n: usize) -> Option<u16> {
        let end = self.pos.checked_add(n)?;
        let run = self.bytes.get(self.pos..end)?;
        if !run.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.pos = end;
        Some(run.iter().fold(0, |acc, b| acc * 10 + u16::from(b - b'0')))
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }
}

/// The date and time as written, and the offset they carry: `None` if they have none, UTC
/// for a bare date.
///
/// Scanned by hand because no chrono parser takes the same texts as `fromisoformat`: its
/// RFC 3339 parser takes leap seconds, the year 0000 and any number of fraction digits but
/// no `,` decimal mark, missing `:SS` or `±HHMM`/`±HH` offset, its format parsers take
/// one-digit fields, and neither can say which field is wrong. The calendar checks (month
/// lengths, leap years, offset bounds) are chrono's.
fn parse_datetime(s: &str) -> Result<(NaiveDateTime, Option<FixedOffset>), &'static str> {
    let mut cur = Cursor { bytes: s.as_bytes(), pos: 0 };
    let date = (|| {
        let year = cur.digits(4)?;
        cur.eat(b"-")?;
        let month = cur.digits(2)?;
        cur.eat(b"-")?;
        let day = cur.digits(2)?;
        Some((i32::from(year), u32::from(month), u32::from(day)))
    })();
    let (year, month, day) = date.ok_or("expected a date YYYY-MM-DD")?;
    // chrono's calendar has a year 0, Python's starts at 1.
    let date = NaiveDate::from_ymd_opt(year, month, day).filter(|_| year > 0).ok_or(if year == 0 {
        "year must be 0001 to 9999"
    } else if !(1..=12).contains(&month) {
        "month must be 01 to 12"
    } else {
        "day out of range for the month"
    })?;
    if cur.at_end() {
        return Ok((date.and_time(NaiveTime::MIN), Some(Utc.fix())));
    }
    cur.eat(b"Tt ").ok_or("expected T or a space between the date and the time")?;

    let hour = cur.digits(2).ok_or("expected the time as HH:MM:SS")?;
    cur.eat(b":").ok_or("expected the time as HH:MM:SS")?;
    let minute = cur.digits(2).ok_or("expected the time as HH:MM:SS")?;
    let mut second = 0;
    let mut micro = 0;
    if cur.eat(b":").is_some() {
        second = cur.digits(2).ok_or("expected two digits of seconds")?;
        if cur.eat(b".,").is_some() {
            let start = cur.pos;
            while cur.peek().is_some_and(|b| b.is_ascii_digit()) {
                cur.pos += 1;
            }
            let fraction = &cur.bytes[start..cur.pos];
            if fraction.is_empty() || fraction.len() > 9 {
                return Err("expected 1 to 9 digits after the decimal point");
            }
            // Microseconds are Python's resolution; further digits are dropped, not rounded.
            micro = (0..6).fold(0, |acc, i| acc * 10 + fraction.get(i).map_or(0, |b| u32::from(b - b'0')));
        }
    }
    let (hour, minute, second) = (u32::from(hour), u32::from(minute), u32::from(second));
    // Below 1,000,000 micro cannot be chrono's leap-second form, so only a field can be wrong.
    let time = NaiveTime::from_hms_micro_opt(hour, minute, second, micro).ok_or(if hour > 23 {
        "hour must be 00 to 23"
    } else if minute > 59 {
        "minute must be 00 to 59"
    } else {
        "second must be 00 to 59 (leap seconds are not supported)"
    })?;

    let offset = match cur.eat(b"Zz+-") {
        None => None,
        Some(b'Z' | b'z') => Some(Utc.fix()),
        Some(sign) => {
            let bad = "expected the offset as +HH:MM or -HH:MM";
            let hours = cur.digits(2).ok_or(bad)?;
            let minutes = if cur.at_end() {
                0
            } else {
                cur.eat(b":");
                cur.digits(2).ok_or(bad)?
            };
            let seconds = i32::from(hours) * 3600 + i32::from(minutes) * 60;
            let offset =
                if sign == b'-' { FixedOffset::west_opt(seconds) } else { FixedOffset::east_opt(seconds) };
            // chrono bounds the hours; minutes past 59 it would carry into them.
            Some(offset.filter(|_| minutes < 60).ok_or("the offset must be less than 24 hours")?)
        }
    };
    if !cur.at_end() {
        return Err("unexpected text after the timestamp");
    }
    Ok((date.and_time(time), offset))
}

/// How long a task key lives after it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retention {
    /// `expires_at` NULL: only an explicit delete or clear removes the key.
    Never,
    /// Microseconds, always > 0.
    After(i64),
}

impl Retention {
    /// Airflow's `[state_store] default_retention_days`: 0 means never, negative is refused.
    pub(crate) fn from_default_retention_days(days: i64) -> Result<Retention, TimeError> {
        match days {
            ..0 => Err(TimeError::NegativeRetentionDays { days }),
            0 => Ok(Retention::Never),
            _ => days
                .checked_mul(MICROS_PER_DAY)
                .map(Retention::After)
                .ok_or(TimeError::RetentionDaysTooLarge { days }),
        }
    }

    /// The `expires_at` a write at `now` gets: `None` for never.
    pub(crate) fn expires_at(self, now: Timestamp) -> Result<Option<Timestamp>, TimeError> {
        match self {
            Retention::Never => Ok(None),
            Retention::After(us) => now.checked_add(us).map(Some).ok_or(TimeError::ExpiryOutOfRange),
        }
    }
}

impl fmt::Display for Retention {
    /// In the same units `parse_retention` reads: `never`, `7d`, `1h30m`, `2w3d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Retention::After(mut rest) = *self else {
            return f.write_str("never");
        };
        let mut wrote = false;
        for (unit, size) in RETENTION_UNITS {
            if rest >= *size {
                write!(f, "{}{unit}", rest / size)?;
                rest %= size;
                wrote = true;
            }
        }
        if rest > 0 || !wrote {
            // Only `from_micros`-style callers can build sub-second retentions.
            write!(f, "{rest}us")?;
        }
        Ok(())
    }
}

/// Largest first: amounts must be written in this order.
const RETENTION_UNITS: &[(&str, i64)] = &[
    ("w", MICROS_PER_WEEK),
    ("d", MICROS_PER_DAY),
    ("h", MICROS_PER_HOUR),
    ("m", MICROS_PER_MINUTE),
    ("s", MICROS_PER_SECOND),
];

/// `ms` is listed before `m` so the longer unit wins.
const DURATION_UNITS: &[(&str, i64)] = &[
    ("w", MICROS_PER_WEEK),
    ("d", MICROS_PER_DAY),
    ("h", MICROS_PER_HOUR),
    ("ms", 1_000),
    ("m", MICROS_PER_MINUTE),
    ("s", MICROS_PER_SECOND),
];

/// Sums `<digits><unit>` groups into microseconds. Units must appear from largest to
/// smallest, each once: `30m1h` or `1h1h` are more likely typos than intent.
fn parse_amounts(s: &str, units: &[(&str, i64)]) -> Result<i64, &'static str> {
    if s.is_empty() {
        return Err("empty");
    }
    let mut total: i64 = 0;
    let mut last_size = i64::MAX;
    let mut rest = s;
    while !rest.is_empty() {
        let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits_end == 0 {
            return Err("expected a whole number");
        }
        let amount: i64 = rest[..digits_end].parse().map_err(|_| "amount too large")?;
        rest = &rest[digits_end..];
        if rest.is_empty() {
            return Err("missing unit after the number");
        }
        let (unit, size) = units.iter().find(|(unit, _)| rest.starts_with(unit)).ok_or("unknown unit")?;
        rest = &rest[unit.len()..];
        // `7min`, or `7ms` where milliseconds are not allowed, must not read as `7m` + junk.
        if rest.starts_with(|c: char| c.is_alphabetic()) {
            return Err("unknown unit");
        }
        if *size >= last_size {
            return Err("units must go from largest to smallest, each at most once");
        }
        last_size = *size;
        total =
            amount.checked_mul(*size).and_then(|part| total.checked_add(part)).ok_or("amount too large")?;
    }
    Ok(total)
}

/// A retention such as `90s`, `15m`, `6h`, `7d`, `2w`, `1h30m`, or `never`.
///
/// Zero is refused rather than given a meaning: as a retention it would write a key that is
/// already expired, which the next clean deletes, and Airflow's own `default_retention_days
/// = 0` means the opposite (never expire). A user who types `0s` has to say which one.
pub(crate) fn parse_retention(s: &str) -> Result<Retention, TimeError> {
    if s.eq_ignore_ascii_case("never") {
        return Ok(Retention::Never);
    }
    // A bare `0` is "no retention" by intent, not a number that lacks its unit.
    if !s.is_empty() && s.bytes().all(|b| b == b'0') {
        return Err(TimeError::ZeroRetention { text: shown(s) });
    }
    match parse_amounts(s, RETENTION_UNITS) {
        Ok(0) => Err(TimeError::ZeroRetention { text: shown(s) }),
        Ok(us) => Ok(Retention::After(us)),
        Err(problem) => Err(TimeError::Retention { text: shown(s), problem }),
    }
}

/// A wait or time bound such as `200ms`, `10m`, `1h30m`; `0` (no unit) means none.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, TimeError> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let us = parse_amounts(s, DURATION_UNITS)
        .map_err(|problem| TimeError::Duration { text: shown(s), problem })?;
    // parse_amounts only sums non-negative amounts.
    Ok(Duration::from_micros(u64::try_from(us).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        match Timestamp::parse_rfc3339(s) {
            Ok(t) => t,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    fn db(s: &str) -> Timestamp {
        match Timestamp::parse_db_text(s) {
            Ok(t) => t,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    fn civil(year: i32, month: u32, day: u32, hour: u32, min: u32, sec: u32, us: u32) -> Timestamp {
        let fields =
            NaiveDate::from_ymd_opt(year, month, day).and_then(|d| d.and_hms_micro_opt(hour, min, sec, us));
        match fields.map(|f| Timestamp::from_micros(f.and_utc().timestamp_micros())) {
            Some(t) if t.in_range() => t,
            _ => panic!("invalid civil {year}-{month}-{day} {hour}:{min}:{sec}.{us}"),
        }
    }

    #[test]
    fn epoch_and_known_instants() {
        assert_eq!(ts("1970-01-01T00:00:00Z").micros(), 0);
        assert_eq!(ts("2026-01-02T03:04:05Z").micros(), 1_767_323_045 * MICROS_PER_SECOND);
        assert_eq!(ts("2000-02-29T12:00:00Z").micros(), 951_825_600 * MICROS_PER_SECOND);
        assert_eq!(ts("1969-12-31T23:59:59.999999Z").micros(), -1);
        assert_eq!(ts("1900-01-01T00:00:00Z").micros(), -2_208_988_800 * MICROS_PER_SECOND);
        assert_eq!(ts("0001-01-01T00:00:00Z"), Timestamp::MIN);
        assert_eq!(ts("9999-12-31T23:59:59.999999Z"), Timestamp::MAX);
        assert_eq!(Timestamp::MAX.to_sqlite_text(), "9999-12-31 23:59:59.999999");
        assert_eq!(Timestamp::MIN.to_rfc3339(), "0001-01-01T00:00:00.000000Z");
    }

    #[test]
    fn utc_midnights_and_dates() {
        let noon = ts("2026-12-02T12:30:00Z");
        assert_eq!(noon.utc_midnight(0), ts("2026-12-02T00:00:00Z"));
        assert_eq!(noon.utc_midnight(1), ts("2026-12-03T00:00:00Z"));
        assert_eq!(noon.utc_midnight(30), ts("2027-01-01T00:00:00Z"));
        let midnight = ts("2026-12-03T00:00:00Z");
        assert_eq!(midnight.utc_midnight(0), midnight, "midnight is the start of its own day");
        assert_eq!(ts("2026-12-02T23:59:59.999999Z").utc_midnight(1), midnight);
        assert_eq!(
            ts("2026-12-03T01:00:00+02:00").utc_date(),
            "2026-12-02",
            "the UTC date, not the local one"
        );
        assert_eq!(ts("2028-02-28T10:00:00Z").utc_midnight(1).utc_date(), "2028-02-29");
        assert_eq!(Timestamp::from_micros(-1).utc_midnight(0).utc_date(), "1969-12-31");
    }

    #[test]
    fn negative_epochs_render() {
        let t = Timestamp::from_micros(-1);
        assert_eq!(t.to_sqlite_text(), "1969-12-31 23:59:59.999999");
        assert_eq!(t, civil(1969, 12, 31, 23, 59, 59, 999_999));
        let t = Timestamp::from_micros(-86_400 * MICROS_PER_SECOND);
        assert_eq!(t.to_rfc3339(), "1969-12-31T00:00:00.000000Z");
        assert_eq!(db("1969-07-20 20:17:40.000000"), civil(1969, 7, 20, 20, 17, 40, 0));
        assert!(db("1969-07-20 20:17:40").micros() < 0);
    }

    /// The Gregorian rule, written out to check chrono's calendar against.
    fn days_in_month(year: i32, month: u32) -> u32 {
        match month {
            2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    #[test]
    fn civil_round_trip_every_day_of_some_years() {
        for year in [1, 4, 100, 400, 1582, 1900, 1969, 1970, 2000, 2024, 2100, 9999] {
            let mut previous: Option<Timestamp> = None;
            for month in 1..=12 {
                let last = days_in_month(year, month);
                let after_last = format!("{year:04}-{month:02}-{:02}", last + 1);
                assert!(Timestamp::parse_db_text(&after_last).is_err(), "{after_last}");
                for day in 1..=last {
                    let date = format!("{year:04}-{month:02}-{day:02}");
                    let t = db(&date);
                    assert_eq!(t, civil(year, month, day, 0, 0, 0, 0));
                    assert_eq!(t.to_sqlite_text(), format!("{date} 00:00:00.000000"));
                    assert_eq!(t.to_rfc3339(), format!("{date}T00:00:00.000000Z"));
                    if let Some(p) = previous {
                        assert_eq!(t.micros() - p.micros(), MICROS_PER_DAY);
                    }
                    previous = Some(t);
                }
            }
        }
    }

    #[test]
    fn leap_years() {
        assert!(Timestamp::parse_db_text("2024-02-29 00:00:00").is_ok());
        assert!(Timestamp::parse_db_text("2000-02-29 00:00:00").is_ok());
        assert!(Timestamp::parse_db_text("1900-02-29 00:00:00").is_err());
        assert!(Timestamp::parse_db_text("2023-02-29 00:00:00").is_err());
        assert!(Timestamp::parse_rfc3339("2100-02-29T00:00:00Z").is_err());
        assert_eq!(
            ts("2024-02-28T23:59:59Z").checked_add(MICROS_PER_SECOND),
            Some(ts("2024-02-29T00:00:00Z"))
        );
        assert_eq!(
            ts("2023-02-28T23:59:59Z").checked_add(MICROS_PER_SECOND),
            Some(ts("2023-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn stored_text_limits() {
        let cases = [
            ("0000-01-01 00:00:00", "year must be"),
            ("10000-01-01 00:00:00", "expected a date"),
            ("2026-13-01 00:00:00", "month must be"),
            ("2026-04-31 00:00:00", "day out of range"),
            ("2026-01-00 00:00:00", "day out of range"),
            ("2026-01-01 24:00:00", "hour must be"),
            ("2026-01-01 00:60:00", "minute must be"),
            ("2026-01-01 00:00:60", "leap seconds"),
            ("2026-01-01 00:00:00.1234567890", "1 to 9 digits"),
        ];
        for (text, fragment) in cases {
            let e = Timestamp::parse_db_text(text);
            let msg = e.map_or_else(|e| e.to_string(), |t| format!("parsed as {t}"));
            assert!(
                msg.starts_with("unreadable stored timestamp") && msg.contains(fragment),
                "{text}: {msg}"
            );
        }
    }

    #[test]
    fn leap_seconds_are_refused_even_where_one_was() {
        // 2016-12-31T23:59:60Z was a real leap second; chrono could hold it, Python cannot.
        for text in ["2016-12-31T23:59:60Z", "2016-12-31T23:59:60.5Z", "2016-12-31 23:59:60+00:00"] {
            let e = Timestamp::parse_rfc3339(text);
            let msg = e.map_or_else(|e| e.to_string(), |t| format!("parsed as {t}"));
            assert!(msg.contains("leap seconds are not supported"), "{text}: {msg}");
        }
        assert!(Timestamp::parse_db_text("2016-12-31 23:59:60.999999").is_err());
    }

    #[test]
    fn negative_offsets_at_the_edges_of_the_calendar() {
        assert_eq!(ts("0001-01-01T00:00:00-23:59"), civil(1, 1, 1, 23, 59, 0, 0));
        assert_eq!(ts("0001-01-01T00:00:00-00:00"), Timestamp::MIN);
        assert_eq!(ts("9999-12-31T00:00:00-23:59"), civil(9999, 12, 31, 23, 59, 0, 0));
        assert_eq!(ts("9999-12-31T00:00:59.999999-23:59"), Timestamp::MAX);
        assert!(Timestamp::parse_rfc3339("9999-12-31T00:01:00-23:59").is_err());
        assert_eq!(ts("2026-01-02T03:04:05-12"), civil(2026, 1, 2, 15, 4, 5, 0));
        assert_eq!(ts("2026-01-02T03:04:05-1230"), civil(2026, 1, 2, 15, 34, 5, 0));
        assert_eq!(db("2026-01-02 03:04:05.5-02:00"), civil(2026, 1, 2, 5, 4, 5, 500_000));
        for text in ["2026-01-02T03:04:05-24:00", "2026-01-02T03:04:05-2400", "2026-01-02T03:04:05-00:60"] {
            let msg =
                Timestamp::parse_rfc3339(text).map_or_else(|e| e.to_string(), |t| format!("parsed as {t}"));
            assert!(msg.contains("less than 24 hours"), "{text}: {msg}");
        }
        let e = Timestamp::parse_db_text("9999-12-31 23:00:00-01:00");
        assert!(matches!(e, Err(TimeError::StoredTimestamp { problem: OUT_OF_RANGE, .. })), "{e:?}");
    }

    #[test]
    fn fractions_beyond_microseconds_in_stored_text() {
        assert_eq!(db("2026-01-02 03:04:05.123456789"), civil(2026, 1, 2, 3, 4, 5, 123_456));
        assert_eq!(db("2026-01-02 03:04:05,000000999"), civil(2026, 1, 2, 3, 4, 5, 0));
        assert_eq!(db("9999-12-31 23:59:59.999999999"), Timestamp::MAX);
        assert_eq!(db("0001-01-01 00:00:00.000000999").to_sqlite_text(), "0001-01-01 00:00:00.000000");
        assert_eq!(civil(1, 1, 1, 0, 0, 0, 1).to_rfc3339(), "0001-01-01T00:00:00.000001Z");
        assert_eq!(civil(9999, 12, 31, 0, 0, 0, 0).to_sqlite_text(), "9999-12-31 00:00:00.000000");
    }

    #[test]
    fn rfc3339_forms() {
        let base = civil(2026, 1, 2, 3, 4, 5, 0);
        assert_eq!(ts("2026-01-02T03:04:05Z"), base);
        assert_eq!(ts("2026-01-02t03:04:05z"), base);
        assert_eq!(ts("2026-01-02 03:04:05Z"), base);
        assert_eq!(ts("2026-01-02T03:04:05+00:00"), base);
        assert_eq!(ts("2026-01-02T03:04:05-00:00"), base);
        assert_eq!(ts("2026-01-02T05:04:05+02:00"), base);
        assert_eq!(ts("2026-01-02T05:04:05+0200"), base);
        assert_eq!(ts("2026-01-02T05:04:05+02"), base);
        assert_eq!(ts("2026-01-01T21:34:05-05:30"), base);
        assert_eq!(ts("2026-01-02T03:04Z"), civil(2026, 1, 2, 3, 4, 0, 0));
        assert_eq!(ts("2026-01-02"), civil(2026, 1, 2, 0, 0, 0, 0));
        assert_eq!(ts("2026-01-02T03:04:05,5Z"), civil(2026, 1, 2, 3, 4, 5, 500_000));
    }

    #[test]
    fn fractions_pad_and_truncate_like_python() {
        // datetime.fromisoformat("2026-01-02T03:04:05.1234569+00:00") is .123456: cut, not
        // rounded.
        let cases = [
            ("1", 100_000),
            ("12", 120_000),
            ("000001", 1),
            ("123456", 123_456),
            ("1234567", 123_456),
            ("1234569", 123_456),
            ("999999999", 999_999),
        ];
        for (digits, micro) in cases {
            let text = format!("2026-01-02T03:04:05.{digits}Z");
            assert_eq!(ts(&text), civil(2026, 1, 2, 3, 4, 5, micro), "{text}");
        }
        assert_eq!(
            ts("9999-12-31T23:59:59.9999999Z"),
            Timestamp::MAX,
            "truncation cannot carry past the last instant"
        );
        assert!(Timestamp::parse_rfc3339("2026-01-02T03:04:05.Z").is_err());
        assert!(Timestamp::parse_rfc3339("2026-01-02T03:04:05.1234567890Z").is_err());
    }

    #[test]
    fn offsets_cross_midnight_and_years() {
        assert_eq!(ts("2026-01-02T01:00:00+02:00"), civil(2026, 1, 1, 23, 0, 0, 0));
        assert_eq!(ts("2025-12-31T23:30:00-01:00"), civil(2026, 1, 1, 0, 30, 0, 0));
        assert_eq!(ts("2024-03-01T00:30:00+01:00"), civil(2024, 2, 29, 23, 30, 0, 0));
        assert_eq!(ts("2026-01-02T03:04:05-23:59"), civil(2026, 1, 3, 3, 3, 5, 0));
        // Python: fromisoformat("9999-12-31T23:59:59.999999-01:00").astimezone(utc) raises
        // "date value out of range".
        let e = Timestamp::parse_rfc3339("9999-12-31T23:59:59.999999-01:00");
        assert!(matches!(e, Err(TimeError::Timestamp { problem: OUT_OF_RANGE, .. })), "{e:?}");
        assert!(Timestamp::parse_rfc3339("0001-01-01T00:00:00+01:00").is_err());
        assert_eq!(ts("0001-01-01T00:59:59+00:59"), civil(1, 1, 1, 0, 0, 59, 0));
    }

    #[test]
    fn naive_datetime_is_refused_with_a_hint() {
        for text in ["2026-01-02T03:04:05", "2026-01-02 03:04:05.5", "2026-01-02T03:04"] {
            let e = Timestamp::parse_rfc3339(text);
            assert!(matches!(e, Err(TimeError::NoOffset { .. })), "{text}: {e:?}");
            let msg = e.map_or_else(|e| e.to_string(), |_| String::new());
            assert!(msg.contains("add Z") && msg.contains("+02:00") && msg.contains(text), "{msg}");
        }
    }

    #[test]
    fn malformed_timestamps() {
        let cases = [
            ("", "expected a date"),
            ("2026", "expected a date"),
            ("2026-1-2T03:04:05Z", "expected a date"),
            ("20260102T030405Z", "expected a date"),
            ("0000-01-01", "year must be"),
            ("2026-00-10", "month must be"),
            ("2026-13-10", "month must be"),
            ("2026-04-31", "day out of range"),
            ("2026-01-00", "day out of range"),
            ("2026-01-02X03:04:05Z", "expected T"),
            ("2026-01-02Z", "expected T"),
            ("2026-01-02T3:04:05Z", "HH:MM:SS"),
            ("2026-01-02T03:4:05Z", "HH:MM:SS"),
            ("2026-01-02T03:04:5Z", "seconds"),
            ("2026-01-02T24:00:00Z", "hour must be"),
            ("2026-01-02T23:60:00Z", "minute must be"),
            ("2026-01-02T23:59:60Z", "leap seconds"),
            ("2026-01-02T03:04:05+24:00", "less than 24 hours"),
            ("2026-01-02T03:04:05+02:60", "less than 24 hours"),
            ("2026-01-02T03:04:05+2", "+HH:MM"),
            ("2026-01-02T03:04:05+02:0", "+HH:MM"),
            ("2026-01-02T03:04:05Z ", "unexpected text"),
            (" 2026-01-02T03:04:05Z", "expected a date"),
            ("2026-01-02T03:04:05ZZ", "unexpected text"),
            ("2026-01-02T03:04:05+02:00:00", "unexpected text"),
            ("２０２６-01-02", "expected a date"),
        ];
        for (text, fragment) in cases {
            match Timestamp::parse_rfc3339(text) {
                Ok(t) => panic!("{text:?} parsed as {t:?}"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains(fragment), "{text:?}: {msg}");
                    assert!(msg.contains("2026-01-02T03:04:05Z"), "{msg}");
                    assert!(!msg.contains('\n'));
                }
            }
        }
    }

    #[test]
    fn error_text_is_one_line_and_bounded() {
        let long = format!("2026-01-02T03:04:05Z{}", "x".repeat(500));
        let msg = Timestamp::parse_rfc3339(&long).map_or_else(|e| e.to_string(), |_| String::new());
        assert!(msg.len() < 400, "{msg}");
        assert!(msg.contains('…'));
        let msg = Timestamp::parse_db_text("2026-01-02\n03:04:05")
            .map_or_else(|e| e.to_string(), |_| String::new());
        assert!(msg.contains("\\n") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn db_text_forms() {
        let t = civil(2026, 1, 2, 3, 4, 5, 123_456);
        assert_eq!(db("2026-01-02 03:04:05.123456"), t);
        assert_eq!(db("2026-01-02T03:04:05.123456"), t);
        assert_eq!(db("2026-01-02 03:04:05.123456+00:00"), t);
        assert_eq!(db("2026-01-02 05:04:05.123456+02:00"), t);
        assert_eq!(db("2026-01-02T03:04:05.123456Z"), t);
        assert_eq!(db("2026-01-02 03:04:05.123"), civil(2026, 1, 2, 3, 4, 5, 123_000));
        assert_eq!(db("2026-01-02 03:04:05"), civil(2026, 1, 2, 3, 4, 5, 0));
        assert_eq!(db("2026-01-02 03:04"), civil(2026, 1, 2, 3, 4, 0, 0));
        assert_eq!(db("2026-01-02"), civil(2026, 1, 2, 0, 0, 0, 0));
        for bad in ["", "garbage", "1767323045", "2026-01-02 03:04:05 +00:00", "2026-02-30 00:00:00"] {
            let e = Timestamp::parse_db_text(bad);
            assert!(matches!(e, Err(TimeError::StoredTimestamp { .. })), "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn storage_and_display_forms() {
        let t = civil(2026, 1, 2, 3, 4, 5, 7);
        assert_eq!(t.to_sqlite_text(), "2026-01-02 03:04:05.000007");
        assert_eq!(t.to_rfc3339(), "2026-01-02T03:04:05.000007Z");
        assert_eq!(t.to_string(), t.to_rfc3339());
        let t = civil(5, 6, 7, 8, 9, 10, 0);
        assert_eq!(t.to_sqlite_text(), "0005-06-07 08:09:10.000000");
        assert_eq!(db(&t.to_sqlite_text()), t);
        assert_eq!(ts(&t.to_rfc3339()), t);
    }

    #[test]
    fn checked_add_stays_in_range() {
        let t = ts("2026-01-02T03:04:05Z");
        assert_eq!(t.checked_add(0), Some(t));
        assert_eq!(t.checked_add(-MICROS_PER_DAY), Some(ts("2026-01-01T03:04:05Z")));
        assert_eq!(Timestamp::MAX.checked_add(1), None);
        assert_eq!(Timestamp::MIN.checked_add(-1), None);
        assert_eq!(t.checked_add(i64::MAX), None);
        assert_eq!(Timestamp::from_micros(i64::MIN).checked_add(i64::MIN), None);
        // Out-of-range values are carried but not extended.
        assert_eq!(Timestamp::from_micros(i64::MAX).checked_add(-1), None);
    }

    #[test]
    fn extreme_micros_do_not_panic() {
        for us in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX] {
            let t = Timestamp::from_micros(us);
            let _ = (t.to_sqlite_text(), t.to_rfc3339());
        }
    }

    #[test]
    fn instants_outside_the_years_1_to_9999_render_with_a_sign() {
        let after_max = Timestamp::from_micros(Timestamp::MAX.micros() + 1);
        assert_eq!(after_max.to_rfc3339(), "+10000-01-01T00:00:00.000000Z");
        assert_eq!(after_max.to_sqlite_text(), "+10000-01-01 00:00:00.000000");
        let before_min = Timestamp::from_micros(Timestamp::MIN.micros() - 1);
        assert_eq!(before_min.to_rfc3339(), "0000-12-31T23:59:59.999999Z");
        let year_minus_one = Timestamp::from_micros(Timestamp::MIN.micros() - 367 * MICROS_PER_DAY);
        assert_eq!(year_minus_one.to_sqlite_text(), "-0001-12-31 00:00:00.000000");
        // Past chrono's range, which only PostgreSQL rows after the year 262142 reach.
        assert_eq!(
            Timestamp::from_micros(i64::MAX).to_rfc3339(),
            "9223372036854775807 microseconds after 1970-01-01T00:00:00Z"
        );
        assert_eq!(
            Timestamp::from_micros(i64::MIN).to_rfc3339(),
            "-9223372036854775808 microseconds after 1970-01-01T00:00:00Z"
        );
        for text in [after_max.to_rfc3339(), before_min.to_rfc3339(), year_minus_one.to_sqlite_text()] {
            assert!(
                Timestamp::parse_rfc3339(&text).is_err() && Timestamp::parse_db_text(&text).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn now_is_in_range_and_recent() {
        let now = Timestamp::now();
        assert!(now > ts("2020-01-01T00:00:00Z") && now <= Timestamp::MAX);
    }

    /// xorshift64*, enough to spread instants over the whole range reproducibly.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn instant(&mut self) -> Timestamp {
            let span = u64::try_from(Timestamp::MAX.micros() - Timestamp::MIN.micros()).unwrap_or(0) + 1;
            let offset = match self.next() % 4 {
                // Half the draws near "now" and near midnights, where digits roll over.
                0 => self.next() % span,
                1 => {
                    let day = self.next() % (span / u64::try_from(MICROS_PER_DAY).unwrap_or(1));
                    day * u64::try_from(MICROS_PER_DAY).unwrap_or(1) + self.next() % 3
                }
                _ => {
                    let around = u64::try_from(1_767_323_045 * MICROS_PER_SECOND - Timestamp::MIN.micros())
                        .unwrap_or(0);
                    around + self.next() % (400 * u64::try_from(MICROS_PER_DAY).unwrap_or(1))
                }
            };
            Timestamp::MIN
                .checked_add(i64::try_from(offset.min(span - 1)).unwrap_or(0))
                .unwrap_or(Timestamp::MIN)
        }
    }

    #[test]
    fn sqlite_text_order_and_round_trip_over_random_instants() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut all: Vec<(Timestamp, String)> = Vec::with_capacity(10_000);
        for _ in 0..10_000 {
            let t = rng.instant();
            let text = t.to_sqlite_text();
            assert_eq!(text.len(), 26, "{text}");
            assert_eq!(db(&text), t, "{text}");
            assert_eq!(ts(&t.to_rfc3339()), t);
            all.push((t, text));
        }
        for pair in all.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert_eq!(a.0.cmp(&b.0), a.1.cmp(&b.1), "{} vs {}", a.1, b.1);
        }
        all.sort_by_key(|(t, _)| *t);
        let by_time: Vec<&String> = all.iter().map(|(_, s)| s).collect();
        let mut by_text = by_time.clone();
        by_text.sort();
        assert_eq!(by_time, by_text);
    }

    #[test]
    fn retention_forms() {
        let after = |us: i64| Ok(Retention::After(us));
        assert_eq!(parse_retention("never"), Ok(Retention::Never));
        assert_eq!(parse_retention("NEVER"), Ok(Retention::Never));
        assert_eq!(parse_retention("90s"), after(90 * MICROS_PER_SECOND));
        assert_eq!(parse_retention("15m"), after(15 * MICROS_PER_MINUTE));
        assert_eq!(parse_retention("6h"), after(6 * MICROS_PER_HOUR));
        assert_eq!(parse_retention("7d"), after(7 * MICROS_PER_DAY));
        assert_eq!(parse_retention("2w"), after(14 * MICROS_PER_DAY));
        assert_eq!(parse_retention("1h30m"), after(90 * MICROS_PER_MINUTE));
        assert_eq!(
            parse_retention("1w2d3h4m5s"),
            after(
                MICROS_PER_WEEK
                    + 2 * MICROS_PER_DAY
                    + 3 * MICROS_PER_HOUR
                    + 4 * MICROS_PER_MINUTE
                    + 5 * MICROS_PER_SECOND
            )
        );
        assert_eq!(parse_retention("0h30m"), after(30 * MICROS_PER_MINUTE));
        assert_eq!(parse_retention("007d"), after(7 * MICROS_PER_DAY));
    }

    #[test]
    fn retention_refusals() {
        for zero in ["0s", "0d", "0h0m", "0", "00"] {
            let e = parse_retention(zero);
            assert!(matches!(e, Err(TimeError::ZeroRetention { .. })), "{zero}: {e:?}");
            let msg = e.map_or_else(|e| e.to_string(), |_| String::new());
            assert!(msg.contains("must be positive") && msg.contains("never"), "{msg}");
        }
        let cases = [
            ("", "empty"),
            ("7", "missing unit"),
            ("d", "whole number"),
            ("7x", "unknown unit"),
            ("7D", "unknown unit"),
            ("7ms", "unknown unit"),
            ("1.5h", "unknown unit"),
            ("-1d", "whole number"),
            ("+1d", "whole number"),
            ("1h 30m", "whole number"),
            (" 1h", "whole number"),
            ("30m1h", "largest to smallest"),
            ("1h1h", "largest to smallest"),
            ("99999999999999999999s", "too large"),
            ("9223372036854775807w", "too large"),
            ("500000w", "largest"),
            ("7min", "unknown unit"),
        ];
        for (text, fragment) in cases {
            match parse_retention(text) {
                Ok(r) if fragment == "largest" => {
                    // Parsable, but an expiry after the year 9999.
                    assert_eq!(r.expires_at(Timestamp::now()), Err(TimeError::ExpiryOutOfRange));
                }
                Ok(r) => panic!("{text:?} parsed as {r:?}"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains(fragment), "{text:?}: {msg}");
                    assert!(msg.contains("1h30m"), "{msg}");
                }
            }
        }
    }

    #[test]
    fn retention_expiry_and_days() {
        let now = ts("2026-01-02T03:04:05Z");
        assert_eq!(Retention::Never.expires_at(now), Ok(None));
        let r = parse_retention("1d").map_err(|e| e.to_string());
        assert_eq!(r.map(|r| r.expires_at(now)), Ok(Ok(Some(ts("2026-01-03T03:04:05Z")))));
        assert_eq!(Retention::from_default_retention_days(0), Ok(Retention::Never));
        assert_eq!(Retention::from_default_retention_days(30), Ok(Retention::After(30 * MICROS_PER_DAY)));
        assert_eq!(
            Retention::from_default_retention_days(-1).map_err(|e| e.to_string()),
            Err("[state_store] default_retention_days must be >= 0, got -1".to_string())
        );
        assert!(matches!(
            Retention::from_default_retention_days(i64::MAX),
            Err(TimeError::RetentionDaysTooLarge { .. })
        ));
        let huge = Retention::from_default_retention_days(3_000_000);
        assert_eq!(huge.map(|r| r.expires_at(now)), Ok(Err(TimeError::ExpiryOutOfRange)));
    }

    #[test]
    fn retention_display_reads_back() {
        for text in ["never", "90s", "15m", "6h", "1w", "2w", "1h30m", "1w2d3h4m5s"] {
            let r = parse_retention(text).map_err(|e| e.to_string());
            let shown = r.map(|r| r.to_string());
            let expected = if text == "90s" { "1m30s" } else { text };
            assert_eq!(shown.as_deref(), Ok(expected));
            let again = parse_retention(expected).map_err(|e| e.to_string());
            assert_eq!(again, parse_retention(text).map_err(|e| e.to_string()));
        }
        assert_eq!(Retention::After(1_500_000).to_string(), "1s500000us");
    }

    #[test]
    #[allow(clippy::duration_suboptimal_units)] // from_mins/from_hours are newer than the MSRV
    fn duration_forms() {
        let ok = |s: &str| parse_duration(s).map_err(|e| e.to_string());
        assert_eq!(ok("0"), Ok(Duration::ZERO));
        assert_eq!(ok("0s"), Ok(Duration::ZERO));
        assert_eq!(ok("0ms"), Ok(Duration::ZERO));
        assert_eq!(ok("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(ok("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(ok("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(ok("1s500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(ok("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(ok("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for (text, fragment) in [
            ("", "empty"),
            ("5", "missing unit"),
            ("00", "missing unit"),
            ("never", "whole number"),
            ("1.5s", "unknown unit"),
            ("10M", "unknown unit"),
            ("500ms1s", "largest to smallest"),
            ("1m1ms1s", "largest to smallest"),
            ("99999999999999w", "too large"),
            ("-1s", "whole number"),
        ] {
            match parse_duration(text) {
                Ok(d) => panic!("{text:?} parsed as {d:?}"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains(fragment), "{text:?}: {msg}");
                    assert!(msg.contains("200ms"), "{msg}");
                }
            }
        }
    }
}
