//! `import FILE`: restores the rows of an `export` (or of a clean/clear `--archive`) by
//! upsert; the work is `ops::import`'s. The command turns the flags into options, names each
//! damaged line `--skip-damaged` skips on stderr, prints the summary and the document, and
//! ends with exit 11 when lines were skipped.
//! Stdin (`-`) is first copied to a temporary file, so that it can be read twice. At a
//! terminal, a bar follows each pass through the file.

use anyhow::Context as _;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Context;
use crate::cli::{GlobalArgs, ImportArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::ops::import::{self as engine, Counts, Mode, Options};
use crate::output::{self, Rendered};
use crate::progress::FileProgress;

pub(crate) fn run(global: &GlobalArgs, args: &ImportArgs) -> Result<()> {
    super::refuse_api(global, "import")?;
    let ctx = Context::load(global, None)?;
    let source = Source::open(&args.file)?;
    let mut store = ctx.open(if args.dry_run { Access::ReadOnly } else { Access::ReadWrite })?;
    let limit = &ctx.settings.max_value_storage_bytes;
    let mode = args.on_conflict;
    let options = Options {
        dry_run: args.dry_run,
        skip_missing: args.skip_missing,
        skip_damaged: args.skip_damaged,
        batch_size: args.batch_size,
        mode,
        value_limit: (limit.value > 0 && !args.allow_large).then(|| (limit.value, limit.source.to_string())),
    };
    let name = source.name.clone();
    // A dry run reads the file once; an import checks it, then reads it again to write.
    let progress =
        FileProgress::new("import", if args.dry_run { &["checking"] } else { &["checking", "writing"] });
    let open = || progress.opened(source.reader()?);
    let report = progress.during(|| {
        engine::run(&mut store, &open, &name, &options, |line_no, problem| {
            progress.suspend(|| output::warn(&format!("{name} line {line_no}: damaged, skipped: {problem}")));
        })
    })?;
    let (counts, damaged) = (report.counts, report.damaged);

    let verb = if args.dry_run { "import --dry-run: would restore" } else { "import: restored" };
    // Only the mode's own way of leaving a stored row is named; the document has every count.
    let existing = match mode {
        Mode::Newer => format!("{} kept newer (the stored row is newer), ", counts.kept_newer),
        Mode::Skip => format!("{} skipped (the key is already stored), ", counts.skipped_existing),
        Mode::Overwrite | Mode::Fail => String::new(),
    };
    let damaged_note = if args.skip_damaged {
        format!(", {} damaged line(s) skipped", damaged.count)
    } else {
        String::new()
    };
    output::status(&format!(
        "{verb} {} task row(s) and {} asset row(s) from {} ({} inserted, {} replaced); {existing}{} skipped (dag run or asset missing){damaged_note}",
        counts.task_rows, counts.asset_rows, name, counts.inserted, counts.replaced, counts.skipped_missing
    ));
    let plain = Some((counts.task_rows + counts.asset_rows).to_string());
    let doc = Imported { dry_run: args.dry_run, on_conflict: mode, counts };
    output::emit(ctx.format, &Rendered { doc, tables: Vec::new(), plain })?;
    if damaged.count > 0 {
        return Err(Error::Damaged(format!(
            "{}: {} damaged line(s) skipped ({}); every whole line was {}",
            name,
            damaged.count,
            damaged.describe(),
            if args.dry_run { "checked" } else { "restored" }
        ))
        .into());
    }
    Ok(())
}

/// `{"dry_run": …, "on_conflict": "newer", "task_rows": N, "asset_rows": M, "inserted": I,
/// "replaced": R, "kept_newer": K, "skipped_existing": E, "skipped_missing": S,
/// "skipped_damaged": D}`.
#[derive(Serialize)]
struct Imported {
    dry_run: bool,
    on_conflict: Mode,
    #[serde(flatten)]
    counts: Counts,
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

    /// The file from its first byte.
    fn reader(&self) -> std::io::Result<File> {
        match &self.spool {
            Some(spool) => spool.reader(),
            None => File::open(&self.path),
        }
    }
}
