//! `import FILE`: restores the rows of an `export` (or of a clean/clear `--archive`) by
//! upsert, with their value text, timestamps and writer fields exactly as exported.
//!
//! The file is read twice. The first pass parses every line and finds every row's dag run or
//! asset, writing nothing, so a malformed line (exit 2), a row whose parent is gone (exit 1,
//! unless `--skip-missing`) or, with `--on-conflict fail`, a row whose key is already stored
//! (exit 9) is found before anything changes. The second pass writes, one transaction per
//! `--batch-size` rows, each in multi-row statements (`db::restore`); the last batch commits
//! durably, and with it every batch before it. In both passes the lines are parsed on a
//! thread of their own, ahead of the database's work. What a row does to a stored row with
//! the same key is `--on-conflict`'s: by default (`newer`) a row older than the stored one is
//! left alone and counted as "kept newer", so restoring an archive never overwrites a value
//! written since.
//! Stdin (`-`) is first copied to a temporary file, so that it can be read twice.

use anyhow::Context as _;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;

use serde::Serialize;

use super::{Context, describe_asset};
use crate::archive::{AssetRecord, Record, TaskRecord, parse_line};
use crate::cli::{GlobalArgs, ImportArgs, OnConflict};
use crate::db::{self, Access, AssetRestore, RestoreRow, Restored, Store, TaskWrite};
use crate::error::{Error, Result};
use crate::model::Asset;
use crate::output::{self, Rendered};
use crate::text::quote;
use crate::time::Timestamp;

pub(crate) fn run(global: &GlobalArgs, args: &ImportArgs) -> Result<()> {
    let ctx = Context::load(global, None)?;
    let source = Source::open(&args.file)?;
    let mut store = ctx.open(if args.dry_run { Access::ReadOnly } else { Access::ReadWrite })?;
    let mode = args.on_conflict;
    let mut parents = Parents::default();
    let mut counts = Counts::default();
    // A dry run counts what the writes would do, and `fail` refuses a key the file repeats:
    // both need what the rows before have done to the keys, which the database does not hold
    // yet.
    let mut seen = (args.dry_run || mode == OnConflict::Fail).then(Seen::default);

    // Pass 1: every line parsed, every parent found; nothing written.
    source.each(|line_no, record| {
        let Some(parent) = parents.resolve(&mut store, &record)? else {
            if args.skip_missing {
                counts.skipped_missing += 1;
                return Ok(());
            }
            return Err(Error::NotFound(format!(
                "{} line {line_no}: {}; nothing was imported (--skip-missing skips such rows)",
                source.name,
                missing(&record)
            ))
            .into());
        };
        let row = restore_row(&record, parent);
        store.check_restore(&row).with_context(|| Error::Usage(format!("{} line {line_no}", source.name)))?;
        let Some(seen) = &mut seen else { return Ok(()) };
        let (stored, earlier) = match seen.get(&record, parent) {
            Some((line, at)) => (Some(at), Some(line)),
            None => (store.stored_updated_at(&row)?.map(|at| at.instant()), None),
        };
        let outcome = decide(mode, stored, record_updated_at(&record));
        if outcome == Outcome::Conflict {
            let why = match earlier {
                Some(line) => format!("is also on line {line}"),
                None => "is already stored".to_string(),
            };
            return Err(Error::Conflict(format!(
                "{} line {line_no}: {} {why}; nothing was imported (--on-conflict fail)",
                source.name,
                describe_row(&record, parent)
            ))
            .into());
        }
        let after = match outcome {
            Outcome::Inserted | Outcome::Replaced => Some(record_updated_at(&record)),
            _ => stored.flatten(),
        };
        seen.insert(&record, parent, line_no, after);
        if args.dry_run {
            counts.add(mode, &record, outcome.into());
        }
        Ok(())
    })?;
    drop(seen);

    if !args.dry_run {
        // Pass 2: the rows written, `--batch-size` of them to a transaction.
        counts = Counts { skipped_missing: counts.skipped_missing, ..Counts::default() };
        store.begin_import()?;
        let mut batch = Vec::new();
        source.each(|line_no, record| {
            let Some(parent) = parents.resolve(&mut store, &record)? else { return Ok(()) };
            // A full batch is written when the next row comes, so that the last one is known.
            if batch.len() as u64 >= args.batch_size {
                write_batch(&mut store, mode, &source.name, &batch, &mut counts, false)?;
                batch.clear();
            }
            batch.push((line_no, record, parent));
            Ok(())
        })?;
        write_batch(&mut store, mode, &source.name, &batch, &mut counts, true)?;
    }

    let verb = if args.dry_run { "import --dry-run: would restore" } else { "import: restored" };
    // Only the mode's own way of leaving a stored row is named; the document has every count.
    let existing = match mode {
        OnConflict::Newer => format!("{} kept newer (the stored row is newer), ", counts.kept_newer),
        OnConflict::Skip => format!("{} skipped (the key is already stored), ", counts.skipped_existing),
        OnConflict::Overwrite | OnConflict::Fail => String::new(),
    };
    output::note(&format!(
        "{verb} {} task row(s) and {} asset row(s) from {} ({} inserted, {} replaced); {existing}{} skipped (dag run or asset missing)",
        counts.task_rows,
        counts.asset_rows,
        source.name,
        counts.inserted,
        counts.replaced,
        counts.skipped_missing
    ));
    let plain = Some((counts.task_rows + counts.asset_rows).to_string());
    let doc = Imported { dry_run: args.dry_run, on_conflict: mode_name(mode), counts };
    output::emit(ctx.format, &Rendered { doc, tables: Vec::new(), plain })
}

/// Writes one batch of rows in a transaction of its own. A failure rolls the batch back; the
/// batches before it stay committed. The commit of the last batch makes every batch durable.
fn write_batch(
    store: &mut Store,
    mode: OnConflict,
    name: &str,
    batch: &[(u64, Record, i64)],
    counts: &mut Counts,
    last: bool,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let rows: Vec<RestoreRow<'_>> =
        batch.iter().map(|(_, record, parent)| restore_row(record, *parent)).collect();
    let existing = match mode {
        OnConflict::Newer => db::OnConflict::KeepNewer,
        OnConflict::Overwrite => db::OnConflict::Replace,
        OnConflict::Skip | OnConflict::Fail => db::OnConflict::Keep,
    };
    if last {
        store.durable_commits()?;
    }
    store.begin()?;
    let written = store.restore(&rows, existing);
    let (tasks, assets) = match written {
        Ok(done) if mode != OnConflict::Fail || done.0.left + done.1.left == 0 => done,
        Ok(_) => {
            store.rollback()?;
            // Another session stored a key since the first pass found it missing.
            let mut stored = None;
            for ((line_no, record, parent), row) in batch.iter().zip(&rows) {
                if store.stored_updated_at(row)?.is_some() {
                    stored = Some((*line_no, describe_row(record, *parent)));
                    break;
                }
            }
            let (line_no, row) = stored.unwrap_or((batch[0].0, "a row of this batch".to_string()));
            let committed = counts.task_rows + counts.asset_rows;
            return Err(Error::Conflict(format!(
                "{name} line {line_no}: {row} was stored by another session during the import; this batch \
                 was rolled back, and the {committed} row(s) of the batches before it stay imported \
                 (--on-conflict fail)"
            ))
            .into());
        }
        Err(e) => {
            let _ = store.rollback();
            return Err(e);
        }
    };
    store.commit()?;
    counts.add_table(mode, true, tasks);
    counts.add_table(mode, false, assets);
    Ok(())
}

/// `{"dry_run": …, "on_conflict": "newer", "task_rows": N, "asset_rows": M, "inserted": I,
/// "replaced": R, "kept_newer": K, "skipped_existing": E, "skipped_missing": S}`.
#[derive(Serialize)]
struct Imported {
    dry_run: bool,
    on_conflict: &'static str,
    #[serde(flatten)]
    counts: Counts,
}

/// What the import did (or, in a dry run, would do) with the rows. `task_rows` and
/// `asset_rows` are the rows written, `inserted` plus `replaced`.
#[derive(Default, Serialize)]
struct Counts {
    task_rows: u64,
    asset_rows: u64,
    inserted: u64,
    replaced: u64,
    kept_newer: u64,
    skipped_existing: u64,
    skipped_missing: u64,
}

impl Counts {
    fn add(&mut self, mode: OnConflict, record: &Record, done: Restored) {
        self.add_table(mode, matches!(record, Record::Task(_)), done);
    }

    fn add_table(&mut self, mode: OnConflict, task: bool, done: Restored) {
        self.inserted += done.inserted;
        self.replaced += done.replaced;
        if mode == OnConflict::Skip {
            self.skipped_existing += done.left;
        } else {
            self.kept_newer += done.left;
        }
        *(if task { &mut self.task_rows } else { &mut self.asset_rows }) += done.inserted + done.replaced;
    }
}

fn mode_name(mode: OnConflict) -> &'static str {
    match mode {
        OnConflict::Newer => "newer",
        OnConflict::Overwrite => "overwrite",
        OnConflict::Skip => "skip",
        OnConflict::Fail => "fail",
    }
}

/// What one row of the file does to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// No row had its key: it is inserted.
    Inserted,
    /// It replaces the stored row with its key.
    Replaced,
    /// `newer`: the stored row was written after it, and stays.
    KeptNewer,
    /// `skip`: a row with its key is stored, and stays.
    SkippedExisting,
    /// `fail`: a row with its key is stored.
    Conflict,
}

impl From<Outcome> for Restored {
    fn from(outcome: Outcome) -> Restored {
        let one = |inserted, replaced, left| Restored { inserted, replaced, left };
        match outcome {
            Outcome::Inserted => one(1, 0, 0),
            Outcome::Replaced => one(0, 1, 0),
            Outcome::KeptNewer | Outcome::SkippedExisting => one(0, 0, 1),
            Outcome::Conflict => one(0, 0, 0),
        }
    }
}

/// The outcome of a row written at `exported` when the row stored with its key was written
/// at `stored` (`None`: no such row; `Some(None)`: a row whose `updated_at` cannot be read,
/// which is never taken for the newer one, as the upsert's comparison would not either).
fn decide(mode: OnConflict, stored: Option<Option<Timestamp>>, exported: Timestamp) -> Outcome {
    let Some(stored) = stored else { return Outcome::Inserted };
    match mode {
        OnConflict::Newer if stored.is_some_and(|at| at > exported) => Outcome::KeptNewer,
        OnConflict::Newer | OnConflict::Overwrite => Outcome::Replaced,
        OnConflict::Skip => Outcome::SkippedExisting,
        OnConflict::Fail => Outcome::Conflict,
    }
}

/// The keys the first pass has met, each with the line it was last on and the `updated_at`
/// its row holds after that line. A key is kept as a 128-bit fingerprint rather than as its
/// text, so that a file of millions of rows needs tens of bytes per row, not hundreds.
#[derive(Default)]
struct Seen(HashMap<u128, (u64, Option<Timestamp>)>);

impl Seen {
    fn fingerprint(record: &Record, parent: i64) -> u128 {
        let half = |salt: u8| {
            let mut hasher = DefaultHasher::new();
            salt.hash(&mut hasher);
            match record {
                Record::Task(t) => {
                    (0u8, parent, &t.scope.task_id, t.scope.map_index, &t.key).hash(&mut hasher)
                }
                Record::Asset(a) => (1u8, parent, &a.key).hash(&mut hasher),
            }
            hasher.finish()
        };
        (u128::from(half(0)) << 64) | u128::from(half(1))
    }

    fn get(&self, record: &Record, parent: i64) -> Option<(u64, Option<Timestamp>)> {
        self.0.get(&Self::fingerprint(record, parent)).copied()
    }

    fn insert(&mut self, record: &Record, parent: i64, line_no: u64, at: Option<Timestamp>) {
        self.0.insert(Self::fingerprint(record, parent), (line_no, at));
    }
}

fn record_updated_at(record: &Record) -> Timestamp {
    match record {
        Record::Task(t) => t.updated_at,
        Record::Asset(a) => a.updated_at,
    }
}

/// A row's key and scope in words, for messages.
fn describe_row(record: &Record, parent: i64) -> String {
    match record {
        Record::Task(t) => format!("task key {} of {}", quote(&t.key), t.scope),
        Record::Asset(a) => {
            let asset = match &a.asset_name {
                Some(name) => describe_asset(&Asset { id: parent, name: name.clone(), ..asset_ref(parent) }),
                None => format!("asset id {parent}"),
            };
            format!("asset key {} of {asset}", quote(&a.key))
        }
    }
}

fn missing(record: &Record) -> String {
    match record {
        Record::Task(t) => {
            format!(
                "no dag run found for dag_id={} run_id={}",
                quote(&t.scope.dag_id),
                quote(&t.scope.run_id)
            )
        }
        Record::Asset(AssetRecord { asset_name: Some(name), asset_uri: Some(uri), .. }) => {
            format!("no asset found with name {} and uri {}", quote(name), quote(uri))
        }
        Record::Asset(a) => format!("no asset found with id {}", a.asset_id),
    }
}

/// The dag run ids and asset ids of the rows, looked up once each.
#[derive(Default)]
struct Parents {
    /// By dag_id, then run_id: found without copying either.
    dag_runs: HashMap<String, HashMap<String, Option<i64>>>,
    assets: HashMap<(i64, Option<String>, Option<String>), Option<i64>>,
}

impl Parents {
    /// The dag_run.id of a task row or the asset.id of an asset row; `None` when it is gone.
    /// An asset is found by name and uri when the export knew them (ids are not stable from
    /// one database to another), by id only when its asset row was already gone at export.
    fn resolve(&mut self, store: &mut Store, record: &Record) -> Result<Option<i64>> {
        match record {
            Record::Task(t) => {
                let (dag_id, run_id) = (&t.scope.dag_id, &t.scope.run_id);
                if let Some(found) = self.dag_runs.get(dag_id).and_then(|runs| runs.get(run_id)) {
                    return Ok(*found);
                }
                let found = store.dag_run_id(dag_id, run_id)?;
                self.dag_runs.entry(dag_id.clone()).or_default().insert(run_id.clone(), found);
                Ok(found)
            }
            Record::Asset(a) => {
                let key = (a.asset_id, a.asset_name.clone(), a.asset_uri.clone());
                if let Some(found) = self.assets.get(&key) {
                    return Ok(*found);
                }
                let found = match (&a.asset_name, &a.asset_uri) {
                    (Some(name), Some(uri)) => store.asset_id_by_name_uri(name, uri)?,
                    _ => {
                        store.find_asset(&crate::model::AssetSelector::Id(a.asset_id))?.map(|found| found.id)
                    }
                };
                self.assets.insert(key, found);
                Ok(found)
            }
        }
    }
}

fn asset_ref(id: i64) -> Asset {
    Asset { id, name: String::new(), uri: String::new(), active: false }
}

/// A record as the restore upserts take it, with its dag run or asset resolved.
fn restore_row(record: &Record, parent: i64) -> RestoreRow<'_> {
    match record {
        Record::Task(TaskRecord { scope, key, value, updated_at, expires_at }) => {
            RestoreRow::Task(TaskWrite {
                dag_run_id: parent,
                scope,
                key,
                value,
                updated_at: *updated_at,
                expires_at: *expires_at,
            })
        }
        Record::Asset(a) => RestoreRow::Asset(AssetRestore {
            asset_id: parent,
            key: &a.key,
            value: &a.value,
            updated_at: a.updated_at,
            writer: &a.writer,
        }),
    }
}

/// The file to import, readable as many times as needed.
struct Source {
    path: PathBuf,
    name: String,
    /// A private copy of stdin (`import -`), which has no name and goes with the process.
    spool: Option<crate::fs::Spool>,
}

impl Source {
    fn open(path: &Path) -> Result<Source> {
        if path.as_os_str() != "-" {
            File::open(path).with_context(|| Error::Usage(format!("cannot read {}", path.display())))?;
            return Ok(Source { path: path.to_path_buf(), name: path.display().to_string(), spool: None });
        }
        let spool = crate::fs::spool("stdin", std::io::stdin().lock())?;
        Ok(Source { path: PathBuf::from("-"), name: "stdin".to_string(), spool: Some(spool) })
    }

    /// Calls `f` with each non-blank line's number and record, in order. The lines are read
    /// and parsed on a thread of their own, a few hundred ahead of `f`, so that parsing the
    /// file overlaps the database's work.
    fn each(&self, mut f: impl FnMut(u64, Record) -> Result<()>) -> Result<()> {
        let file = match &self.spool {
            Some(spool) => spool.reader(),
            None => File::open(&self.path),
        }
        .with_context(|| Error::Usage(format!("cannot read {}", self.name)))?;
        let (sender, receiver) = std::sync::mpsc::sync_channel(AHEAD_BATCHES);
        std::thread::scope(|scope| {
            // The sender moves to the reader: when it ends, so does this loop.
            scope.spawn(move || self.read(file, sender));
            for parsed in receiver {
                for (line_no, record) in parsed? {
                    f(line_no, record)?;
                }
            }
            Ok(())
        })
    }

    /// Sends the parsed lines of `file` in batches, and the first error last; stops early
    /// when nobody receives any more.
    fn read(&self, file: File, sender: SyncSender<Result<Vec<(u64, Record)>>>) {
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut line_no = 0;
        let mut parsed = Vec::with_capacity(AHEAD_LINES);
        let end = loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => {
                    break Err(
                        anyhow::Error::new(e).context(Error::Usage(format!("cannot read {}", self.name)))
                    );
                }
            }
            line_no += 1;
            let Ok(line) = std::str::from_utf8(&buf) else {
                break Err(Error::Usage(format!("{} line {line_no}: not UTF-8 text", self.name)).into());
            };
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            match parse_line(line) {
                Ok(record) => parsed.push((line_no, record)),
                Err(problem) => {
                    break Err(Error::Usage(format!("{} line {line_no}: {problem}", self.name)).into());
                }
            }
            if parsed.len() == AHEAD_LINES && sender.send(Ok(std::mem::take(&mut parsed))).is_err() {
                return;
            }
        };
        if !parsed.is_empty() && sender.send(Ok(parsed)).is_err() {
            return;
        }
        if let Err(e) = end {
            let _ = sender.send(Err(e));
        }
    }
}

/// Lines parsed ahead of the database, in batches of this many.
const AHEAD_LINES: usize = 256;
const AHEAD_BATCHES: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_decides_each_stored_state() {
        let at = |micros| Timestamp::from_micros(micros);
        let file_row = at(1_000);
        // no stored row, an older one, one as new, a newer one, one whose time cannot be read
        let stored = [None, Some(Some(at(999))), Some(Some(at(1_000))), Some(Some(at(1_001))), Some(None)];
        let decided = |mode| stored.map(|s| decide(mode, s, file_row));
        use Outcome::*;
        assert_eq!(decided(OnConflict::Newer), [Inserted, Replaced, Replaced, KeptNewer, Replaced]);
        assert_eq!(decided(OnConflict::Overwrite), [Inserted, Replaced, Replaced, Replaced, Replaced]);
        assert_eq!(
            decided(OnConflict::Skip),
            [Inserted, SkippedExisting, SkippedExisting, SkippedExisting, SkippedExisting]
        );
        assert_eq!(decided(OnConflict::Fail), [Inserted, Conflict, Conflict, Conflict, Conflict]);
    }

    #[test]
    fn a_key_is_the_same_key_only_in_the_same_scope() {
        let line = |map_index: i64, key: &str| {
            parse_line(&format!(
                r#"{{"kind": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": {map_index}, "key": "{key}", "value": "1", "updated_at": "2026-01-01T00:00:00.000000Z", "expires_at": null}}"#
            ))
            .unwrap()
        };
        let mut seen = Seen::default();
        seen.insert(&line(-1, "k"), 7, 3, None);
        assert_eq!(seen.get(&line(-1, "k"), 7), Some((3, None)));
        assert_eq!(seen.get(&line(0, "k"), 7), None, "another map index");
        assert_eq!(seen.get(&line(-1, "k"), 8), None, "another dag run");
        assert_eq!(seen.get(&line(-1, "K"), 7), None, "another key");
    }
}
