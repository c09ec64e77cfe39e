//! The import engine: rows of an `export` (or of a clean/clear `--archive`) put back by
//! upsert, with their value text, timestamps and writer fields exactly as exported.
//!
//! The file is read twice. The first pass parses every line, finds every row's dag run or
//! asset and checks the row as the database will (`Store::check_restore`, and
//! `max_value_storage_bytes`), writing nothing, so a malformed line or a row the database
//! cannot hold (exit 2), a row whose parent is gone (exit 1, unless `skip_missing`) or, with
//! [`Mode::Fail`], a row whose key is already stored (exit 9) is found before anything
//! changes. `skip_damaged` hands the lines that are not whole rows to the caller instead. The
//! second pass reads exactly the bytes the first read, block by block checked against the
//! first pass's digests, and writes, one transaction per `batch_size` rows, each in
//! multi-row statements (`db::restore`); the last batch commits durably, and with it every
//! batch before it. In both passes the lines are parsed on a thread of their own, ahead of
//! the database's work. What a row does to a stored row with the same key is the [`Mode`]'s:
//! by default ([`Mode::Newer`]) a row older than the stored one is left alone and counted as
//! "kept newer", so restoring an archive never overwrites a value written since. The engine
//! prints nothing.

use anyhow::Context as _;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read as _};
use std::sync::mpsc::SyncSender;

use serde::Serialize;

use crate::archive::{AssetRecord, Record, TaskRecord, parse_line};
use crate::db::{self, AssetRestore, RestoreRow, Restored, Store, TaskWrite};
use crate::error::{Error, Result};
use crate::ops::usage;
use crate::text::quote;
use crate::time::Timestamp;

/// What a row of the file does to a stored row with its key: `import --on-conflict`, named
/// in the document as on the command line. (Plain comments on the variants: doc comments would
/// turn the whole `import --help` into clap's long form.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    // The stored row stays when its `updated_at` is later than the file's.
    Newer,
    // The file's row always replaces the stored one.
    Overwrite,
    // The stored row stays; only missing keys are inserted.
    Skip,
    // The whole file is refused if any of its keys is already stored.
    Fail,
}

/// What an import does and what it accepts.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Check and count only; write nothing.
    pub(crate) dry_run: bool,
    /// Count and skip rows whose dag run or asset is gone, instead of refusing the file.
    pub(crate) skip_missing: bool,
    /// Hand damaged lines to the caller and go on, instead of refusing the file.
    pub(crate) skip_damaged: bool,
    /// Rows per transaction.
    pub(crate) batch_size: u64,
    pub(crate) mode: Mode,
    /// The largest value a row may hold, and where that limit comes from (`[state_store]
    /// max_value_storage_bytes`); `None` for no limit but the database's.
    pub(crate) value_limit: Option<(u64, String)>,
}

/// What an import did (or, in a dry run, would do).
pub(crate) struct Report {
    pub(crate) counts: Counts,
    pub(crate) damaged: Damaged,
}

/// Imports the file `open` reads from its first byte (`name` in messages): checks every line, then, unless a dry run,
/// writes the rows. `damaged_line` hears of each damaged line `skip_damaged` skips, as the
/// first pass meets it.
pub(crate) fn run(
    store: &mut Store,
    open: &(dyn Fn() -> std::io::Result<File> + Sync),
    name: &str,
    options: &Options,
    mut damaged_line: impl FnMut(u64, &str),
) -> Result<Report> {
    // The largest value a row may carry: the configured limit, and never more than the
    // database's column holds.
    let limit = options.value_limit.as_ref().map_or(u64::MAX, |(limit, _)| *limit);
    let max_value = limit.min(store.max_value_bytes());
    let mut file = LineFile {
        open,
        name,
        max_value,
        max_line: max_line(max_value),
        skip_damaged: options.skip_damaged,
        checked: None,
    };
    let mode = options.mode;
    let mut parents = Parents::default();
    let mut counts = Counts::default();
    let mut damaged = Damaged::default();
    // A dry run counts what the writes would do, and `fail` refuses a key the file repeats:
    // both need what the rows before have done to the keys, which the database does not hold
    // yet.
    let mut seen = (options.dry_run || mode == Mode::Fail).then(Seen::default);
    // Where the unique keys pad with spaces, lines whose keys differ only in trailing spaces
    // are one row to the database: such a pair is refused, as MySQL's other limits are.
    let mut padded = store.key_text("x ").ne("x ").then(Padded::default);

    // Pass 1: every line parsed and checked, every parent found; nothing written.
    let mut pending: Vec<(u64, Record, i64)> = Vec::new();
    let checked = file.each(|item| {
        let (line_no, record) = match item {
            Item::Damaged(line_no, problem) => {
                damaged.add(line_no);
                damaged_line(line_no, &problem);
                return Ok(());
            }
            Item::Row(line_no, record) => (line_no, record),
        };
        let Some(parent) = parents.resolve(store, &record)? else {
            if options.skip_missing {
                counts.skipped_missing += 1;
                return Ok(());
            }
            return Err(Error::NotFound(format!(
                "{} line {line_no}: {}; nothing was imported (--skip-missing skips such rows)",
                name,
                missing(&record)
            ))
            .into());
        };
        let row = restore_row(&record, parent);
        let at_line = || Error::Usage(format!("{} line {line_no}", name));
        store.check_restore(&row).with_context(at_line)?;
        let (Record::Task(TaskRecord { value, .. }) | Record::Asset(AssetRecord { value, .. })) = &record;
        let size = value.len() as u64;
        if let Some((limit, from)) = options.value_limit.as_ref().filter(|(limit, _)| size > *limit) {
            return usage(format!(
                "{name} line {line_no}: the value is {size} bytes as stored, over [state_store] \
                 max_value_storage_bytes = {limit} (from {from}); nothing was imported (--allow-large imports it anyway)"
            ));
        }
        if let Some(padded) = &mut padded {
            let other = match padded.check(store, &record, parent, &row, line_no)? {
                None => None,
                Some(Twin::Line(line)) => Some(format!("the one on line {line}")),
                Some(Twin::Stored { task_id, key }) if matches!(record, Record::Task(_)) => {
                    Some(format!("the stored key {} of task_id={}", quote(&key), quote(&task_id)))
                }
                Some(Twin::Stored { key, .. }) => Some(format!("the stored key {}", quote(&key))),
            };
            if let Some(other) = other {
                return usage(format!(
                    "{name} line {line_no}: {} differs from {other} only in trailing spaces, which the \
                     database's collation ignores (PAD SPACE): it cannot hold both rows; nothing was imported",
                    describe_row(&record, parent)
                ));
            }
        }
        let Some(seen) = &mut seen else { return Ok(()) };
        // The stored rows' times are read a batch at a time, as the writes are made.
        if pending.len() as u64 >= options.batch_size {
            decide_batch(store, seen, mode, name, &pending, options.dry_run.then_some(&mut counts))?;
            pending.clear();
        }
        pending.push((line_no, record, parent));
        Ok(())
    });
    // The rows still waiting are decided before any error of a later line is reported, so
    // that the first line at fault is the one named, as when each row was decided as read.
    if let Some(seen) = &mut seen {
        decide_batch(store, seen, mode, name, &pending, options.dry_run.then_some(&mut counts))?;
    }
    checked?;
    drop(seen);
    drop(padded);

    if !options.dry_run {
        // Pass 2: the rows written, `--batch-size` of them to a transaction, from exactly the
        // bytes pass 1 checked. Its counts are its own: a row it does not write (its parent
        // missing, its line damaged) is counted here again, never dropped unseen.
        counts = Counts::default();
        store.begin_import()?;
        let mut batch = Vec::new();
        let written = file.each(|item| {
            let Item::Row(line_no, record) = item else { return Ok(()) };
            let Some(parent) = parents.resolve(store, &record)? else {
                counts.skipped_missing += 1;
                return Ok(());
            };
            // A full batch is written when the next row comes, so that the last one is known.
            if batch.len() as u64 >= options.batch_size {
                write_batch(store, mode, name, &batch, &mut counts, false)?;
                batch.clear();
            }
            batch.push((line_no, record, parent));
            Ok(())
        });
        let written = written.and_then(|()| write_batch(store, mode, name, &batch, &mut counts, true));
        if let Err(e) = written {
            if matches!(crate::error::kind(&e), Some(Error::Conflict(_))) {
                return Err(e);
            }
            let committed = counts.task_rows + counts.asset_rows;
            return Err(e.context(format!(
                "import of {name} stopped: the {committed} row(s) the batches before committed stay imported"
            )));
        }
    }
    counts.skipped_damaged = damaged.count;
    Ok(Report { counts, damaged })
}

/// Decides what each row of `batch` does to the row stored with its key, in the file's
/// order: the keys' stored times read in one statement per table, and a key met earlier in
/// the file taken as that earlier line left it. `counts` (a dry run) counts each outcome as
/// the writes would; [`Mode::Fail`] refuses the first row whose key is stored or repeated.
fn decide_batch(
    store: &mut Store,
    seen: &mut Seen,
    mode: Mode,
    name: &str,
    batch: &[(u64, Record, i64)],
    mut counts: Option<&mut Counts>,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let rows: Vec<RestoreRow<'_>> =
        batch.iter().map(|(_, record, parent)| restore_row(record, *parent)).collect();
    let stored_times = store.stored_updated_at_all(&rows)?;
    for ((line_no, record, parent), stored_time) in batch.iter().zip(stored_times) {
        let (line_no, parent) = (*line_no, *parent);
        let (Record::Task(TaskRecord { updated_at, .. }) | Record::Asset(AssetRecord { updated_at, .. })) =
            record;
        let (stored, earlier) = match seen.get(store, record, parent) {
            Some((line, at)) => (Some(at), Some(line)),
            None => (stored_time.map(|at| at.instant()), None),
        };
        let outcome = decide(mode, stored, *updated_at);
        if outcome == Outcome::Conflict {
            let why = match earlier {
                Some(line) => format!("is also on line {line}"),
                None => "is already stored".to_string(),
            };
            return Err(Error::Conflict(format!(
                "{} line {line_no}: {} {why}; nothing was imported (--on-conflict fail)",
                name,
                describe_row(record, parent)
            ))
            .into());
        }
        let after = match outcome {
            Outcome::Inserted | Outcome::Replaced => Some(*updated_at),
            _ => stored.flatten(),
        };
        seen.insert(store, record, parent, line_no, after);
        if let Some(counts) = counts.as_deref_mut() {
            counts.add(mode, matches!(record, Record::Task(_)), outcome.into());
        }
    }
    Ok(())
}

/// The longest line a row whose value holds up to `max_value` bytes can take: each byte of
/// the value may be written as a six-character escape (`\u0000`), and the other fields
/// (keys, ids, names, timestamps) take at most [`FIELD_BYTES`]. A longer line is refused
/// before it is read whole.
fn max_line(max_value: u64) -> u64 {
    max_value.saturating_mul(6).saturating_add(FIELD_BYTES)
}

/// Room for a line's fields other than its value: a 512-character key and a dozen
/// 250-character ids or names, each character escaped as a surrogate pair at worst, and
/// the field names.
const FIELD_BYTES: u64 = 64 << 10;

/// The damaged lines the first pass skipped: how many, and the first few line numbers, for
/// the final message (each is named on stderr as it is met).
#[derive(Default)]
pub(crate) struct Damaged {
    /// How many lines were damaged.
    pub(crate) count: u64,
    first: Vec<u64>,
}

impl Damaged {
    const NAMED: usize = 5;

    fn add(&mut self, line_no: u64) {
        self.count += 1;
        if self.first.len() < Self::NAMED {
            self.first.push(line_no);
        }
    }

    /// The first few damaged lines' numbers, in words: `line 3, 7, …`.
    pub(crate) fn describe(&self) -> String {
        let lines: Vec<String> = self.first.iter().map(u64::to_string).collect();
        let more = if self.count > self.first.len() as u64 { ", …" } else { "" };
        format!("line {}{more}", lines.join(", "))
    }
}

/// Writes one batch of rows in a transaction of its own. A failure rolls the batch back; the
/// batches before it stay committed. The commit of the last batch makes every batch durable.
fn write_batch(
    store: &mut Store,
    mode: Mode,
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
        Mode::Newer => db::OnConflict::KeepNewer,
        Mode::Overwrite => db::OnConflict::Replace,
        Mode::Skip | Mode::Fail => db::OnConflict::Keep,
    };
    if last {
        store.durable_commits()?;
    }
    store.begin()?;
    let written = store.restore(&rows, existing);
    let (tasks, assets) = match written {
        Ok(done) if mode != Mode::Fail || done.0.left + done.1.left == 0 => done,
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
            let (first, last) = (batch[0].0, batch[batch.len() - 1].0);
            let at = if first == last {
                format!("line {first}: this batch was rolled back")
            } else {
                let line = failing_line(store, batch, &rows, existing);
                let line = line.map_or_else(|| "a line of".to_string(), |n| format!("line {n}:"));
                format!("{line} this batch (lines {first}-{last}) was rolled back")
            };
            return Err(e.context(format!("{name} {at}")));
        }
    };
    store.commit()?;
    counts.add(mode, true, tasks);
    counts.add(mode, false, assets);
    Ok(())
}

/// The line of the first row of a failed batch that fails again on its own: the row the
/// database refused. The rows are tried one at a time in a transaction that is rolled back;
/// `None` when none fails alone (a deadlock, a lost connection: the batch's lines are named).
fn failing_line(
    store: &mut Store,
    batch: &[(u64, Record, i64)],
    rows: &[RestoreRow<'_>],
    existing: db::OnConflict,
) -> Option<u64> {
    store.begin().ok()?;
    let failed =
        batch.iter().zip(rows).find(|(_, row)| store.restore(std::slice::from_ref(*row), existing).is_err());
    let _ = store.rollback();
    failed.map(|((line_no, ..), _)| *line_no)
}

/// What the import did (or, in a dry run, would do) with the rows. `task_rows` and
/// `asset_rows` are the rows written, `inserted` plus `replaced`.
#[derive(Default, Serialize)]
pub(crate) struct Counts {
    pub(crate) task_rows: u64,
    pub(crate) asset_rows: u64,
    pub(crate) inserted: u64,
    pub(crate) replaced: u64,
    pub(crate) kept_newer: u64,
    pub(crate) skipped_existing: u64,
    pub(crate) skipped_missing: u64,
    pub(crate) skipped_damaged: u64,
}

impl Counts {
    fn add(&mut self, mode: Mode, task: bool, done: Restored) {
        self.inserted += done.inserted;
        self.replaced += done.replaced;
        if mode == Mode::Skip {
            self.skipped_existing += done.left;
        } else {
            self.kept_newer += done.left;
        }
        *(if task { &mut self.task_rows } else { &mut self.asset_rows }) += done.inserted + done.replaced;
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
fn decide(mode: Mode, stored: Option<Option<Timestamp>>, exported: Timestamp) -> Outcome {
    let Some(stored) = stored else { return Outcome::Inserted };
    match mode {
        Mode::Newer if stored.is_some_and(|at| at > exported) => Outcome::KeptNewer,
        Mode::Newer | Mode::Overwrite => Outcome::Replaced,
        Mode::Skip => Outcome::SkippedExisting,
        Mode::Fail => Outcome::Conflict,
    }
}

/// The keys the first pass has met, each with the line it was last on and the `updated_at`
/// its row holds after that line. A key is kept as a 128-bit fingerprint rather than as its
/// text, so that a file of millions of rows needs tens of bytes per row, not hundreds. The
/// fingerprint is of the key as the database compares it ([`Store::key_text`]).
#[derive(Default)]
struct Seen(HashMap<u128, (u64, Option<Timestamp>)>);

impl Seen {
    fn get(&self, store: &Store, record: &Record, parent: i64) -> Option<(u64, Option<Timestamp>)> {
        self.0.get(&fingerprint(record, parent, |text| store.key_text(text))).copied()
    }

    fn insert(&mut self, store: &Store, record: &Record, parent: i64, line_no: u64, at: Option<Timestamp>) {
        self.0.insert(fingerprint(record, parent, |text| store.key_text(text)), (line_no, at));
    }
}

/// A row's unique key as 128 bits: its parent, and for a task row its task id and map index,
/// with its key, each text as `text` gives it.
fn fingerprint<'r>(record: &'r Record, parent: i64, text: impl Fn(&'r str) -> &'r str) -> u128 {
    let half = |salt: u8| {
        let mut hasher = DefaultHasher::new();
        salt.hash(&mut hasher);
        match record {
            Record::Task(t) => {
                (0u8, parent, text(&t.scope.task_id), t.scope.map_index, text(&t.key)).hash(&mut hasher);
            }
            Record::Asset(a) => (1u8, parent, text(&a.key)).hash(&mut hasher),
        }
        hasher.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// Where the unique keys pad with spaces (MySQL), the rows met so far by their key as the
/// database compares it, each with its line and a fingerprint of its exact text: a row whose
/// key is the same to the database as an earlier row's or a stored one's, but not the same
/// text, would overwrite the other under its name.
#[derive(Default)]
struct Padded {
    rows: HashMap<u128, (u64, u128)>,
    /// Whether a dag run (`true`) or asset has stored keys or task ids ending in a space.
    spaced: HashMap<(bool, i64), bool>,
}

/// The other row a PAD SPACE collation takes for a row of the file.
enum Twin {
    Line(u64),
    Stored { task_id: String, key: String },
}

impl Padded {
    fn check(
        &mut self,
        store: &mut Store,
        record: &Record,
        parent: i64,
        row: &RestoreRow<'_>,
        line_no: u64,
    ) -> Result<Option<Twin>> {
        let (task, spaced) = match record {
            Record::Task(t) => (true, t.key.ends_with(' ') || t.scope.task_id.ends_with(' ')),
            Record::Asset(a) => (false, a.key.ends_with(' ')),
        };
        let key = fingerprint(record, parent, |text| store.key_text(text));
        // Without a trailing space the text is the key as the database compares it.
        let exact = if spaced { fingerprint(record, parent, |text| text) } else { key };
        if let Some(&(line, text)) = self.rows.get(&key)
            && text != exact
        {
            return Ok(Some(Twin::Line(line)));
        }
        self.rows.insert(key, (line_no, exact));
        // The stored rows: looked up for a row with a trailing space, or in a dag run or asset
        // that stores such keys; almost always neither, and one query per parent decides.
        let stored_spaced = match self.spaced.get(&(task, parent)) {
            Some(known) => *known,
            None => *self.spaced.entry((task, parent)).or_insert(store.stores_spaced_keys(task, parent)?),
        };
        if !spaced && !stored_spaced {
            return Ok(None);
        }
        Ok(store.stored_twin(row)?.map(|(task_id, key)| Twin::Stored { task_id, key }))
    }
}

/// A row's key and scope in words, for messages.
fn describe_row(record: &Record, parent: i64) -> String {
    match record {
        Record::Task(t) => format!("task key {} of {}", quote(&t.key), t.scope),
        Record::Asset(a) => {
            let asset = match &a.asset_name {
                Some(name) => format!("asset {} (id {parent})", quote(name)),
                None => format!("asset id {parent}"),
            };
            format!("asset key {} of {asset}", quote(&a.key))
        }
    }
}

fn missing(record: &Record) -> String {
    match record {
        Record::Task(t) => format!(
            "no dag run found for dag_id={} run_id={}",
            quote(&t.scope.dag_id),
            quote(&t.scope.run_id)
        ),
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

/// The file being imported, readable as many times as needed: the second time exactly as far
/// as the first, so that what is written is what was checked.
struct LineFile<'a> {
    /// Opens the file from its first byte: a path's file, or the copy of stdin.
    open: &'a (dyn Fn() -> std::io::Result<File> + Sync),
    name: &'a str,
    /// The largest value a row may hold, in bytes, and so the longest line accepted, in bytes
    /// without its line end.
    max_value: u64,
    max_line: u64,
    /// Damaged lines are handed over as [`Item::Damaged`] rather than refusing the file.
    skip_damaged: bool,
    /// What the first pass read, which every later pass reads again.
    checked: Option<Checked>,
}

/// The bytes the first pass read: how many, and a digest of each block of lines it handed
/// over. A later pass stops at the same length, and checks each block before handing over any
/// of its lines, so that a file appended to meanwhile (an archive cron keeps writing) is read
/// as it was checked, and a file rewritten or cut meanwhile is an error, not other data.
#[derive(Clone)]
struct Checked {
    len: u64,
    blocks: Vec<u64>,
}

/// A line of the file, as the passes see it.
enum Item {
    Row(u64, Record),
    /// A line that cannot be read (`--skip-damaged`), and why.
    Damaged(u64, String),
}

impl LineFile<'_> {
    /// Calls `f` with each non-blank line, in order. The lines are read and parsed on a
    /// thread of their own, a few hundred ahead of `f`, so that parsing the file overlaps the
    /// database's work. The first call reads to the end of the file and records what it read;
    /// every later call reads exactly that again.
    fn each(&mut self, mut f: impl FnMut(Item) -> Result<()>) -> Result<()> {
        let file = (self.open)().with_context(|| Error::Usage(format!("cannot read {}", self.name)))?;
        let (sender, receiver) = std::sync::mpsc::sync_channel(AHEAD_BATCHES);
        let this = &*self;
        let checked = std::thread::scope(|scope| {
            // The sender moves to the reader: when it ends, so does this loop.
            let reader = scope.spawn(move || this.read(file, sender));
            for parsed in receiver {
                for item in parsed? {
                    f(item)?;
                }
            }
            reader.join().map_err(|_| anyhow::anyhow!("the reader of {} stopped", this.name))
        })?;
        self.checked = Some(checked);
        Ok(())
    }

    /// Sends the parsed lines of `file` in blocks, and the first error last; stops early when
    /// nobody receives any more. Returns what it read.
    fn read(&self, file: File, sender: SyncSender<Result<Vec<Item>>>) -> Checked {
        let again = self.checked.as_ref();
        let mut reader = BufReader::new(file.take(again.map_or(u64::MAX, |c| c.len)));
        let mut buf = Vec::new();
        let mut line_no = 0;
        let mut read = Checked { len: 0, blocks: Vec::new() };
        let mut digest = DefaultHasher::new();
        let mut parsed = Vec::with_capacity(AHEAD_LINES);
        let end = loop {
            buf.clear();
            // At most one byte past the longest line: a longer one is never held whole.
            match (&mut reader).take(self.max_line.saturating_add(1)).read_until(b'\n', &mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => read.len += n as u64,
                Err(e) => {
                    break Err(
                        anyhow::Error::new(e).context(Error::Usage(format!("cannot read {}", self.name)))
                    );
                }
            }
            digest.write(&buf);
            line_no += 1;
            let whole = buf.last() == Some(&b'\n');
            if !whole && buf.len() as u64 > self.max_line {
                break usage(format!(
                    "{} line {line_no}: the line is longer than {} bytes, the most a row can take whose \
                     value is at most {} bytes ([state_store] max_value_storage_bytes, or with --allow-large \
                     what the database's column holds); nothing was imported",
                    self.name, self.max_line, self.max_value
                ));
            }
            match parse(&buf, whole) {
                Ok(Some(record)) => parsed.push(Item::Row(line_no, record)),
                Ok(None) => {}
                Err(problem) if self.skip_damaged => {
                    parsed.push(Item::Damaged(line_no, problem));
                    if let Some((cut, record)) = after_a_cut_row(&buf) {
                        if let Some(Item::Damaged(_, problem)) = parsed.last_mut() {
                            *problem = format!(
                                "its first {cut} bytes are a row cut short, and the whole row after them is restored"
                            );
                        }
                        parsed.push(Item::Row(line_no, record));
                    }
                }
                Err(problem) => {
                    break usage(format!(
                        "{} line {line_no}: {problem}; nothing was imported (--skip-damaged imports every whole line)",
                        self.name
                    ));
                }
            }
            if parsed.len() == AHEAD_LINES {
                if let Err(e) = self.block(&mut read, &mut digest, again, line_no) {
                    break Err(e);
                }
                if sender.send(Ok(std::mem::take(&mut parsed))).is_err() {
                    return read;
                }
            }
        };
        let end = end.and_then(|()| {
            self.block(&mut read, &mut digest, again, line_no)?;
            match again {
                Some(c) if read.len != c.len || read.blocks.len() != c.blocks.len() => usage(format!(
                    "{} changed after the first pass checked it: it is {} bytes long, not {}",
                    self.name, read.len, c.len
                )),
                _ => Ok(()),
            }
        });
        if end.is_ok() && !parsed.is_empty() && sender.send(Ok(parsed)).is_err() {
            return read;
        }
        if let Err(e) = end {
            let _ = sender.send(Err(e));
        }
        read
    }

    /// Ends a block of lines at `line_no`: records its digest, or, when reading again, checks
    /// it against the first pass's.
    fn block(
        &self,
        read: &mut Checked,
        digest: &mut DefaultHasher,
        again: Option<&Checked>,
        line_no: u64,
    ) -> Result<()> {
        let sum = std::mem::take(digest).finish();
        if let Some(c) = again
            && c.blocks.get(read.blocks.len()) != Some(&sum)
        {
            return usage(format!(
                "{} changed after the first pass checked it (in the lines up to line {line_no})",
                self.name
            ));
        }
        read.blocks.push(sum);
        Ok(())
    }
}

/// One line's record, `None` for a blank line; or what is wrong with it. A line without a line
/// end is the file's last, and one that is not a whole row was cut short.
fn parse(bytes: &[u8], whole: bool) -> Result<Option<Record>, String> {
    let cut = |problem: &str| {
        if whole {
            problem.to_string()
        } else {
            format!("cut short: the file ends inside this line, without a line end ({problem})")
        }
    };
    let Ok(line) = std::str::from_utf8(bytes) else { return Err(cut("not UTF-8 text")) };
    let line = line.trim_end_matches(['\n', '\r']);
    if line.trim().is_empty() {
        return Ok(None);
    }
    parse_line(line).map(Some).map_err(|problem| cut(&problem))
}

/// A damaged line that ends in a whole row: what a write cut short and then appended to
/// leaves (`clean --archive` after a crash). Every line `export` writes begins `{"kind":`,
/// which cannot occur unescaped inside a row's strings, so the row is the text after one of
/// them that reads as a whole row; the bytes before it are the row that was cut.
fn after_a_cut_row(bytes: &[u8]) -> Option<(usize, Record)> {
    const START: &[u8] = b"{\"kind\":";
    let ends = bytes.len() - bytes.iter().rev().take_while(|b| matches!(b, b'\n' | b'\r')).count();
    (1..ends.saturating_sub(START.len()))
        .filter(|&at| bytes[at..].starts_with(START))
        .find_map(|at| Some((at, parse_line(std::str::from_utf8(&bytes[at..ends]).ok()?).ok()?)))
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
        assert_eq!(decided(Mode::Newer), [Inserted, Replaced, Replaced, KeptNewer, Replaced]);
        assert_eq!(decided(Mode::Overwrite), [Inserted, Replaced, Replaced, Replaced, Replaced]);
        assert_eq!(
            decided(Mode::Skip),
            [Inserted, SkippedExisting, SkippedExisting, SkippedExisting, SkippedExisting]
        );
        assert_eq!(decided(Mode::Fail), [Inserted, Conflict, Conflict, Conflict, Conflict]);
    }

    fn line(map_index: i64, task_id: &str, key: &str) -> String {
        format!(
            r#"{{"kind": "task", "dag_id": "d", "run_id": "r", "task_id": "{task_id}", "map_index": {map_index}, "key": "{key}", "value": "1", "updated_at": "2026-01-01T00:00:00.000000Z", "expires_at": null}}"#
        )
    }

    #[test]
    fn a_key_is_the_same_key_only_in_the_same_scope() {
        let record = |map_index: i64, key: &str| parse_line(&line(map_index, "t", key)).unwrap();
        let exact = |record: &Record, parent| fingerprint(record, parent, |text| text);
        let k = exact(&record(-1, "k"), 7);
        assert_eq!(exact(&record(-1, "k"), 7), k);
        assert_ne!(exact(&record(0, "k"), 7), k, "another map index");
        assert_ne!(exact(&record(-1, "k"), 8), k, "another dag run");
        assert_ne!(exact(&record(-1, "K"), 7), k, "another key");
        assert_ne!(exact(&record(-1, "k "), 7), k, "trailing spaces count where keys do not pad");
        let padded = |record: &Record| fingerprint(record, 7, |text| text.trim_end_matches(' '));
        assert_eq!(padded(&record(-1, "k  ")), padded(&record(-1, "k")), "PAD SPACE");
        let spaced_task = parse_line(&line(-1, "t ", "k")).unwrap();
        assert_eq!(padded(&spaced_task), padded(&record(-1, "k")), "PAD SPACE in the task id");
        assert_ne!(padded(&record(-1, " k")), padded(&record(-1, "k")), "leading spaces count");
    }

    #[test]
    fn a_cut_line_is_named_as_cut_and_the_whole_row_after_it_is_found() {
        let whole = line(-1, "t", "k");
        assert!(parse(format!("{whole}\n").as_bytes(), true).unwrap().is_some());
        assert!(parse(whole.as_bytes(), false).unwrap().is_some(), "a whole last row without a line end");
        assert!(parse(b"  \r\n", true).unwrap().is_none());
        let half = &whole[..whole.len() / 2];
        assert!(parse(half.as_bytes(), false).unwrap_err().starts_with("cut short: "));
        assert!(parse(half.as_bytes(), true).unwrap_err().starts_with("not JSON"));
        // A cut inside a multi-byte character.
        let bytes = "{\"kind\": \"task\", \"key\": \"é".as_bytes();
        assert!(parse(&bytes[..bytes.len() - 1], false).unwrap_err().contains("not UTF-8"));

        let glued = format!("{half}{whole}\n");
        let (cut, record) = after_a_cut_row(glued.as_bytes()).expect("the whole row");
        assert_eq!(cut, half.len());
        assert_eq!(record, parse_line(&whole).unwrap());
        // Two cut rows before a whole one; a cut row alone; a whole row alone.
        let twice = format!("{half}{half}{whole}");
        assert_eq!(after_a_cut_row(twice.as_bytes()).map(|(cut, _)| cut), Some(2 * half.len()));
        assert!(after_a_cut_row(format!("{half}{half}\n").as_bytes()).is_none());
        assert!(after_a_cut_row(whole.as_bytes()).is_none(), "a row is never cut from its own start");
    }

    #[test]
    fn lines_are_bounded_by_the_largest_row() {
        assert_eq!(max_line(65_535), 65_535 * 6 + 65_536);
        assert_eq!(max_line(u64::MAX), u64::MAX);
        // The longest a 512-character key and ids can take in the export's escapes.
        let long = format!(
            r#"{{"kind": "asset", "asset_id": 1, "asset_name": "{n}", "asset_uri": "{n}", "key": {k}, "value": "", "updated_at": "2026-01-01T00:00:00.000000Z", "last_updated_by_kind": "task", "last_updated_by_dag_id": "{n}", "last_updated_by_run_id": "{n}", "last_updated_by_task_id": "{n}", "last_updated_by_map_index": 0}}"#,
            n = "\\u0000".repeat(1500),
            k = crate::json::dumps(&crate::json::Value::String("\u{1F680}".repeat(512))),
        );
        assert!((long.len() as u64) < FIELD_BYTES, "{}", long.len());
    }

    /// A memory sandbox with the dag run `d`/`r`, and a file of `lines`, removed when the
    /// fixture drops.
    struct Fixture {
        store: Store,
        path: std::path::PathBuf,
    }

    impl Fixture {
        fn new(name: &str, lines: &str) -> Fixture {
            let mut sandbox = crate::db::memory_sandbox().unwrap();
            sandbox.add_dag_run("d", "r").unwrap();
            let path = std::env::temp_dir()
                .join(format!("state-store-ops-import-{}-{name}.jsonl", std::process::id()));
            std::fs::write(&path, lines).unwrap();
            Fixture { store: sandbox.into_store(), path }
        }

        fn run(&mut self, options: &Options) -> (Result<Report>, Vec<(u64, String)>) {
            let mut damaged = Vec::new();
            let report = run(&mut self.store, &|| File::open(&self.path), "f", options, |n, why| {
                damaged.push((n, why.to_string()))
            });
            (report, damaged)
        }

        fn stored(&mut self) -> u64 {
            let filter = crate::model::TaskFilter::default();
            let all = crate::model::Page { limit: None, offset: 0 };
            self.store.list_task(&filter, all).unwrap().len() as u64
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn options(mode: Mode) -> Options {
        Options {
            dry_run: false,
            skip_missing: false,
            skip_damaged: false,
            batch_size: 2,
            mode,
            value_limit: None,
        }
    }

    fn rows(keys: &[&str]) -> String {
        keys.iter().map(|k| line(-1, "t", k) + "\n").collect()
    }

    #[test]
    fn a_dry_run_counts_what_the_import_then_writes() {
        let mut f = Fixture::new("counts", &rows(&["a", "b", "a", "c", "b"]));
        let (dry, _) = f.run(&Options { dry_run: true, ..options(Mode::Overwrite) });
        let dry = dry.unwrap().counts;
        assert_eq!((dry.inserted, dry.replaced), (3, 2));
        assert_eq!(f.stored(), 0, "a dry run writes nothing");
        let (done, _) = f.run(&options(Mode::Overwrite));
        let done = done.unwrap().counts;
        assert_eq!((done.inserted, done.replaced, done.task_rows), (3, 2, 5));
        assert_eq!(f.stored(), 3);
    }

    #[test]
    fn damaged_lines_are_handed_over_counted_and_skipped() {
        let whole = rows(&["a", "b"]);
        let mut f = Fixture::new("damaged", &format!("{whole}{}", &whole[..30]));
        let (refused, damaged) = f.run(&options(Mode::Newer));
        let refused = refused.err().unwrap().to_string();
        assert!(refused.starts_with("f line 3: cut short"), "{refused}");
        assert!(damaged.is_empty());
        assert_eq!(f.stored(), 0);
        let (report, damaged) = f.run(&Options { skip_damaged: true, ..options(Mode::Newer) });
        let report = report.unwrap();
        assert_eq!((report.counts.task_rows, report.counts.skipped_damaged), (2, 1));
        assert_eq!(damaged.len(), 1);
        assert_eq!(damaged[0].0, 3);
        assert_eq!(report.damaged.describe(), "line 3");
        assert_eq!(f.stored(), 2);
    }

    #[test]
    fn the_first_pass_refuses_what_the_columns_cannot_hold_and_writes_nothing() {
        let long = "k".repeat(513);
        let mut f = Fixture::new("long", &rows(&["a", "b", "c", &long]));
        let (refused, _) = f.run(&Options { batch_size: 1, ..options(Mode::Newer) });
        let refused = crate::error::message(refused.err().unwrap().as_ref());
        assert!(refused.starts_with("f line 4: \"key\" is 513 characters long"), "{refused}");
        assert_eq!(f.stored(), 0);
        let mut f = Fixture::new("large", &rows(&["a"]).replace("\"value\": \"1\"", "\"value\": \"12345\""));
        let limited = Options { value_limit: Some((4, "test".to_string())), ..options(Mode::Newer) };
        let refused = f.run(&limited).0.err().unwrap().to_string();
        assert!(
            refused.contains(
                "the value is 5 bytes as stored, over [state_store] max_value_storage_bytes = 4 (from test)"
            ),
            "{refused}"
        );
        assert_eq!(f.stored(), 0);
    }
}
