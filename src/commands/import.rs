//! `import FILE`: restores the rows of an `export` (or of a clean/clear `--archive`) by
//! upsert, with their value text, timestamps and writer fields exactly as exported.
//!
//! The file is read twice. The first pass parses every line and finds every row's dag run or
//! asset, writing nothing, so a malformed line (exit 2) or a row whose parent is gone (exit 1,
//! unless `--skip-missing`) is found before anything changes. The second pass writes, one
//! transaction per `--batch-size` rows. A row that is older than the one stored now is left
//! alone and counted as "kept newer": restoring an archive never overwrites a value written
//! since. Stdin (`-`) is first copied to a temporary file, so that it can be read twice.

use anyhow::Context as _;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Context;
use crate::archive::{AssetRecord, Record, TaskRecord, parse_line};
use crate::cli::{GlobalArgs, ImportArgs};
use crate::db::{Access, AssetRestore, Store, TaskWrite};
use crate::error::{Error, Result};
use crate::model::{Asset, StoredTime};
use crate::output::{self, Rendered};
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &ImportArgs) -> Result<()> {
    let ctx = Context::load(global, None)?;
    let source = Source::open(&args.file)?;
    let mut store = ctx.open(if args.dry_run { Access::ReadOnly } else { Access::ReadWrite })?;
    let mut parents = Parents::default();
    let mut counts = Counts::default();

    // Pass 1: every line parsed, every parent found; nothing written.
    source.each(|line_no, record| {
        match parents.resolve(&mut store, &record)? {
            Some(parent) => {
                check(&store, &record, parent)
                    .with_context(|| Error::Usage(format!("{} line {line_no}", source.name)))?;
                if args.dry_run && stored_is_newer(&mut store, &record, parent)? {
                    counts.kept_newer += 1;
                } else {
                    counts.add(&record);
                }
            }
            None if args.skip_missing => counts.skipped_missing += 1,
            None => {
                return Err(Error::NotFound(format!(
                    "{} line {line_no}: {}; nothing was imported (--skip-missing skips such rows)",
                    source.name,
                    missing(&record)
                ))
                .into());
            }
        }
        Ok(())
    })?;

    if !args.dry_run {
        counts = Counts { skipped_missing: counts.skipped_missing, ..Counts::default() };
        let mut in_batch = 0;
        let written = source.each(|_, record| {
            let Some(parent) = parents.resolve(&mut store, &record)? else { return Ok(()) };
            if in_batch == 0 {
                store.begin()?;
            }
            if stored_is_newer(&mut store, &record, parent)? {
                counts.kept_newer += 1;
            } else {
                restore(&mut store, &record, parent)?;
                counts.add(&record);
            }
            in_batch += 1;
            if in_batch >= args.batch_size {
                store.commit()?;
                in_batch = 0;
            }
            Ok(())
        });
        match written {
            Ok(()) if in_batch > 0 => store.commit()?,
            Ok(()) => {}
            Err(e) => {
                if in_batch > 0 {
                    let _ = store.rollback();
                }
                return Err(e);
            }
        }
    }

    let verb = if args.dry_run { "import --dry-run: would restore" } else { "import: restored" };
    output::note(&format!(
        "{verb} {} task row(s) and {} asset row(s) from {}; {} kept newer (the stored row is newer), {} skipped (dag run or asset missing)",
        counts.task_rows, counts.asset_rows, source.name, counts.kept_newer, counts.skipped_missing
    ));
    let plain = Some((counts.task_rows + counts.asset_rows).to_string());
    output::emit(
        ctx.format,
        &Rendered { doc: Imported { dry_run: args.dry_run, counts }, tables: Vec::new(), plain },
    )
}

/// `{"dry_run": …, "task_rows": N, "asset_rows": M, "kept_newer": K, "skipped_missing": S}`.
#[derive(Serialize)]
struct Imported {
    dry_run: bool,
    #[serde(flatten)]
    counts: Counts,
}

#[derive(Default, Serialize)]
struct Counts {
    task_rows: u64,
    asset_rows: u64,
    kept_newer: u64,
    skipped_missing: u64,
}

impl Counts {
    fn add(&mut self, record: &Record) {
        match record {
            Record::Task(_) => self.task_rows += 1,
            Record::Asset(_) => self.asset_rows += 1,
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
    dag_runs: HashMap<(String, String), Option<i64>>,
    assets: HashMap<(i64, Option<String>, Option<String>), Option<i64>>,
}

impl Parents {
    /// The dag_run.id of a task row or the asset.id of an asset row; `None` when it is gone.
    /// An asset is found by name and uri when the export knew them (ids are not stable from
    /// one database to another), by id only when its asset row was already gone at export.
    fn resolve(&mut self, store: &mut Store, record: &Record) -> Result<Option<i64>> {
        match record {
            Record::Task(t) => {
                let key = (t.scope.dag_id.clone(), t.scope.run_id.clone());
                if let Some(found) = self.dag_runs.get(&key) {
                    return Ok(*found);
                }
                let found = store.dag_run_id(&key.0, &key.1)?;
                self.dag_runs.insert(key, found);
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

/// Whether the row stored now was written after the exported one.
fn stored_is_newer(store: &mut Store, record: &Record, parent: i64) -> Result<bool> {
    let (stored, exported) = match record {
        Record::Task(t) => (store.task_entry(&t.scope, &t.key)?.map(|e| e.updated_at), t.updated_at),
        Record::Asset(a) => {
            (store.asset_entry(&asset_ref(parent), &a.key)?.map(|e| e.updated_at), a.updated_at)
        }
    };
    Ok(matches!(stored, Some(StoredTime::At(at)) if at > exported))
}

/// A row as the restore upserts take it, with its dag run or asset resolved.
enum Restore<'a> {
    Task(TaskWrite<'a>),
    Asset(AssetRestore<'a>),
}

fn restore_of(record: &Record, parent: i64) -> Restore<'_> {
    match record {
        Record::Task(TaskRecord { scope, key, value, updated_at, expires_at }) => Restore::Task(TaskWrite {
            dag_run_id: parent,
            scope,
            key,
            value,
            updated_at: *updated_at,
            expires_at: *expires_at,
        }),
        Record::Asset(a) => Restore::Asset(AssetRestore {
            asset_id: parent,
            key: &a.key,
            value: &a.value,
            updated_at: a.updated_at,
            writer: &a.writer,
        }),
    }
}

/// What the dialect's columns cannot hold (MySQL's 2038 limit, characters outside the BMP…)
/// is found in the first pass, before anything is written.
fn check(store: &Store, record: &Record, parent: i64) -> Result<()> {
    match restore_of(record, parent) {
        Restore::Task(w) => store.check_restore_task(&w),
        Restore::Asset(w) => store.check_restore_asset(&w),
    }
}

fn restore(store: &mut Store, record: &Record, parent: i64) -> Result<()> {
    match restore_of(record, parent) {
        Restore::Task(w) => store.restore_task(&w),
        Restore::Asset(w) => store.restore_asset(&w),
    }
}

/// The file to import, readable as many times as needed.
struct Source {
    path: PathBuf,
    name: String,
    /// A copy of stdin, removed when the import ends.
    spooled: bool,
}

impl Source {
    fn open(path: &Path) -> Result<Source> {
        if path.as_os_str() != "-" {
            File::open(path).with_context(|| Error::Usage(format!("cannot read {}", path.display())))?;
            return Ok(Source { path: path.to_path_buf(), name: path.display().to_string(), spooled: false });
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let spool =
            std::env::temp_dir().join(format!("state-store-import-{}-{nanos}.jsonl", std::process::id()));
        let copy = || -> std::io::Result<()> {
            let mut file = File::options().write(true).create_new(true).open(&spool)?;
            std::io::copy(&mut std::io::stdin().lock(), &mut file)?;
            file.sync_all()
        };
        let source = Source { path: spool.clone(), name: "stdin".to_string(), spooled: true };
        copy().with_context(|| Error::Usage(format!("cannot copy stdin to {}", spool.display())))?;
        Ok(source)
    }

    /// Calls `f` with each non-blank line's number and record, in order.
    fn each(&self, mut f: impl FnMut(u64, Record) -> Result<()>) -> Result<()> {
        let file =
            File::open(&self.path).with_context(|| Error::Usage(format!("cannot read {}", self.name)))?;
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut line_no = 0;
        loop {
            buf.clear();
            let read = reader
                .read_until(b'\n', &mut buf)
                .with_context(|| Error::Usage(format!("cannot read {}", self.name)))?;
            if read == 0 {
                return Ok(());
            }
            line_no += 1;
            let line = std::str::from_utf8(&buf)
                .map_err(|_| Error::Usage(format!("{} line {line_no}: not UTF-8 text", self.name)))?;
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            let record = parse_line(line)
                .map_err(|problem| Error::Usage(format!("{} line {line_no}: {problem}", self.name)))?;
            f(line_no, record)?;
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        if self.spooled {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
