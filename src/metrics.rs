//! `clean --metrics-file`: what a run did, in Prometheus's text exposition format, for
//! node_exporter's textfile collector (docs/operations.md#metrics).
//!
//! The file is replaced at the end of every run that got past its command line, success or
//! failure, by writing a temporary file in the same directory and renaming it over the old
//! one (`fs::replace`), so the collector never reads half a file. The temporary name starts
//! with a dot and does not end in `.prom`, so the collector never reads it either; it is
//! created 0600 under a random name and never through a symlink, and a new metrics file is
//! 0644 (the collector runs as another user), a replaced one keeps its mode. A run that fails keeps the
//! time of the last successful run from the file it replaces, and so does a run skipped for
//! a custom `[state_store] backend` (exit 0, nothing cleaned): "no success in two days" is an
//! alert on that one series.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::archive::ARCHIVE_LINES;
use crate::error::Result;

/// The mode of a new metrics file: node_exporter reads it as another user.
const MODE: u32 = 0o644;

/// The series that survives failed runs.
const LAST_SUCCESS: &str = "state_store_clean_last_success_timestamp_seconds";

/// What one clean run did, as its metrics say it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CleanRun {
    pub(crate) task_rows_deleted: u64,
    pub(crate) asset_rows_deleted: u64,
    pub(crate) batches: u64,
    pub(crate) orphan_batches: u64,
    pub(crate) seconds: f64,
    /// A signal stopped the run between batches.
    pub(crate) interrupted: bool,
    /// The limit that stopped it: `max_rows` or `max_duration`.
    pub(crate) limit: Option<&'static str>,
    pub(crate) exit_code: i32,
    /// What is left to delete after the run: expired task rows (before its cutoff) and rows of
    /// inactive assets; unknown when the run could not count them (it failed before or during).
    pub(crate) backlog: Option<(u64, u64)>,
    /// A custom `[state_store] backend` made the run skip its work: exit 0, but no success.
    pub(crate) skipped: bool,
    /// Expired task rows the run skipped because another session held them locked; unknown
    /// when its expired phase did not run to its end.
    pub(crate) locked_rows_skipped: Option<u64>,
    /// When the run ended, in seconds since the epoch.
    pub(crate) ended: f64,
}

/// Where the metrics go. Checked before the run starts, so that a path that cannot work is a
/// usage error before the database is touched, not a surprise after the run.
#[derive(Debug, Clone)]
pub(crate) struct MetricsFile {
    path: PathBuf,
}

impl MetricsFile {
    pub(crate) fn new(path: &Path) -> Result<MetricsFile> {
        // Renaming over a device, a FIFO or a socket would replace it (as root, `/dev/null`
        // itself) with a regular file; the write decides again on what it opens.
        crate::fs::check_output("--metrics-file", path, crate::fs::Accepts::File, Some(&ARCHIVE_LINES))?;
        Ok(MetricsFile { path: path.to_path_buf() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Refuses (exit 2) a path that is the database the run opened, or one of its files.
    pub(crate) fn check(&self) -> Result<()> {
        crate::fs::refuse_database("--metrics-file", &self.path)
    }

    /// Replaces the file with this run's metrics, atomically.
    pub(crate) fn write(&self, run: &CleanRun) -> Result<()> {
        // Read only from a regular file of a bounded size: a FIFO planted since the run started
        // would block, a device never end.
        let previous =
            crate::fs::read_bounded(&self.path).ok().and_then(|bytes| String::from_utf8(bytes).ok());
        let succeeded = run.exit_code == 0 && !run.skipped;
        let last_success =
            succeeded.then(|| seconds(run.ended)).or_else(|| previous.as_deref().and_then(last_success));
        let text = render(run, last_success.as_deref());
        crate::fs::replace(
            "--metrics-file",
            "metrics file",
            &self.path,
            text.as_bytes(),
            (MODE, Some(&ARCHIVE_LINES)),
        )
    }
}

/// The value of the last-success series in a file this tool wrote, as it was written.
fn last_success(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix(LAST_SUCCESS)?.strip_prefix(' '))
        .map(str::trim)
        .find(|value| value.parse::<f64>().is_ok_and(f64::is_finite))
        .map(str::to_string)
}

/// Seconds since the epoch to the millisecond, as Prometheus reads a float.
fn seconds(value: f64) -> String {
    format!("{value:.3}")
}

/// The exposition text: for each metric its `# HELP` and `# TYPE` lines, then its samples.
/// Every series is present on every run (0 where nothing happened), so a query never finds a
/// gap, except the backlog when it could not be counted and the last success before the
/// first one.
pub(crate) fn render(run: &CleanRun, last_success: Option<&str>) -> String {
    let flag = |on: bool| u64::from(on).to_string();
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, samples: &[(&str, String)]| {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    metric(
        "state_store_clean_deleted_rows",
        "Rows the last clean run deleted: expired task keys, keys of inactive assets.",
        &[
            (r#"{table="task_state_store"}"#, run.task_rows_deleted.to_string()),
            (r#"{table="asset_state_store"}"#, run.asset_rows_deleted.to_string()),
        ],
    );
    metric(
        "state_store_clean_batches",
        "Batches (one transaction each) the last clean run committed, per phase.",
        &[
            (r#"{phase="expired"}"#, run.batches.to_string()),
            (r#"{phase="orphans"}"#, run.orphan_batches.to_string()),
        ],
    );
    metric(
        "state_store_clean_duration_seconds",
        "How long the last clean run took.",
        &[("", seconds(run.seconds))],
    );
    metric(
        "state_store_clean_interrupted",
        "1 when a signal (SIGTERM, SIGINT, SIGHUP, ...) stopped the last clean run between batches.",
        &[("", flag(run.interrupted))],
    );
    metric(
        "state_store_clean_limit_reached",
        "1 when the last clean run stopped at this limit, leaving the rest for the next run.",
        &[
            (r#"{limit="max_rows"}"#, flag(run.limit == Some("max_rows"))),
            (r#"{limit="max_duration"}"#, flag(run.limit == Some("max_duration"))),
        ],
    );
    metric(
        "state_store_clean_exit_code",
        "The exit code of the last clean run: 0 success, 7 another clean was running (docs/exit-codes.md).",
        &[("", run.exit_code.to_string())],
    );
    metric(
        "state_store_clean_skipped",
        "1 when the last clean run deleted nothing because [state_store] backend is not the metastore's.",
        &[("", flag(run.skipped))],
    );
    let locked = run
        .locked_rows_skipped
        .map_or_else(Vec::new, |rows| vec![(r#"{table="task_state_store"}"#, rows.to_string())]);
    metric(
        "state_store_clean_locked_rows_skipped",
        "Expired rows the last clean run skipped because another session held them locked.",
        &locked,
    );
    let backlog = run.backlog.map_or_else(Vec::new, |(tasks, assets)| {
        vec![
            (r#"{table="task_state_store"}"#, tasks.to_string()),
            (r#"{table="asset_state_store"}"#, assets.to_string()),
        ]
    });
    metric(
        "state_store_clean_backlog_rows",
        "Rows left to delete after the last clean run: expired task keys, keys of inactive assets.",
        &backlog,
    );
    metric(
        "state_store_clean_last_run_timestamp_seconds",
        "When the last clean run ended, in seconds since the epoch.",
        &[("", seconds(run.ended))],
    );
    let success = last_success.map_or_else(Vec::new, |value| vec![("", value.to_string())]);
    metric(
        LAST_SUCCESS,
        "When a clean run last ended with exit code 0, in seconds since the epoch.",
        &success,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn run() -> CleanRun {
        CleanRun {
            task_rows_deleted: 12,
            asset_rows_deleted: 3,
            batches: 2,
            orphan_batches: 1,
            seconds: 1.5,
            exit_code: 0,
            backlog: Some((7, 0)),
            ended: 1_764_633_600.25,
            ..CleanRun::default()
        }
    }

    /// Every sample line is `name{labels} value`, preceded by its metric's HELP and TYPE.
    #[test]
    fn every_sample_follows_its_help_and_type() {
        let text = render(&run(), Some("1764633600.250"));
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("a TYPE line names a kind");
                assert_eq!(kind, "gauge");
                declared.push(name.to_string());
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                assert_eq!(declared.last().map(String::as_str), Some(name), "{line}");
                let value = line.rsplit(' ').next().unwrap_or_default();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert_eq!(declared.len(), 10);
        assert!(text.contains("state_store_clean_deleted_rows{table=\"task_state_store\"} 12\n"));
        assert!(text.contains("state_store_clean_backlog_rows{table=\"task_state_store\"} 7\n"));
        assert!(text.contains("state_store_clean_duration_seconds 1.500\n"));
        assert!(text.contains("state_store_clean_last_success_timestamp_seconds 1764633600.250\n"));
    }

    #[test]
    fn a_failed_run_keeps_the_last_success_and_leaves_out_what_it_could_not_count() {
        let dir = std::env::temp_dir().join(format!("state-store-metrics-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("clean.prom");
        let file = MetricsFile::new(&path).expect("a file in an existing directory");
        file.write(&run()).expect("written");
        let failed = CleanRun { exit_code: 4, backlog: None, ended: 1_764_720_000.0, ..CleanRun::default() };
        file.write(&failed).expect("written");
        let text = fs::read_to_string(&path).expect("read back");
        assert!(text.contains("state_store_clean_exit_code 4\n"));
        assert!(text.contains("state_store_clean_last_run_timestamp_seconds 1764720000.000\n"));
        assert!(text.contains("state_store_clean_last_success_timestamp_seconds 1764633600.250\n"));
        assert!(!text.contains("state_store_clean_backlog_rows"));
        // A run skipped for a custom backend exits 0, yet is no success either.
        let skipped = CleanRun { skipped: true, ended: 1_764_806_400.0, ..CleanRun::default() };
        file.write(&skipped).expect("written");
        let text = fs::read_to_string(&path).expect("read back");
        assert!(text.contains("state_store_clean_skipped 1\n"));
        assert!(text.contains("state_store_clean_last_success_timestamp_seconds 1764633600.250\n"));
        let left: Vec<_> = fs::read_dir(&dir).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("clean.prom")], "no temporary file is left");
        fs::remove_dir_all(&dir).expect("cleaned up");
    }

    #[test]
    fn no_last_success_before_the_first_one() {
        let text = render(&CleanRun { exit_code: 3, ..CleanRun::default() }, None);
        assert!(!text.contains(LAST_SUCCESS));
        assert_eq!(last_success(&text), None);
        assert_eq!(last_success(&format!("{LAST_SUCCESS} 12.5\n")), Some("12.5".to_string()));
        assert_eq!(last_success(&format!("{LAST_SUCCESS} NaN\n{LAST_SUCCESS}_x 1\n")), None);
    }

    #[test]
    fn a_path_that_cannot_be_written_is_refused_before_the_run() {
        let missing = std::env::temp_dir().join("state-store-no-such-dir-42").join("clean.prom");
        let message = MetricsFile::new(&missing).expect_err("refused").to_string();
        assert!(message.contains("does not exist"), "{message}");
        assert!(MetricsFile::new(&std::env::temp_dir()).is_err());
    }
}
