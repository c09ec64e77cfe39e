//! Everything that reaches the terminal goes through here.
//!
//! A command returns a report: typed data (a `Serialize` document), the tables people read and
//! the plain text shell variables take. This module renders it in the chosen format on stdout:
//! JSON with Python's `json.dumps` text ([`crate::json`]), YAML ([`yaml`]), tables ([`table`])
//! or plain. Messages for people go to stderr. A closed stdout (`state-store list | head`) is
//! not an error: the process ends quietly. Every message, and every report about the
//! configuration or the database itself, passes through [`redact::mask`] on its way out;
//! stored keys and values are printed as they are.

mod entries;
mod stream;
mod table;
mod yaml;

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::json::{self, Style, Value};
use crate::redact;
use crate::text::quote;
pub(crate) use entries::{AssetEntryDoc, Entry, TaskEntryDoc, entries};
pub(crate) use stream::{EntryStream, TABLE_ROWS};
pub(crate) use table::Table;

/// The form a report takes on stdout (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
    Yaml,
    Plain,
}

/// A report in every form: what JSON and YAML show, what a table shows, what plain shows.
pub(crate) struct Rendered<D> {
    pub doc: D,
    pub tables: Vec<Table>,
    pub plain: Option<String>,
}

impl<D> Rendered<D> {
    /// A report that is a document alone: a table shows nothing, plain nothing.
    pub(crate) fn doc(doc: D) -> Rendered<D> {
        Rendered { doc, tables: Vec::new(), plain: None }
    }
}

/// Writes a report to stdout in the chosen format.
pub(crate) fn emit<D: Serialize>(format: Format, rendered: &Rendered<D>) -> crate::error::Result<()> {
    Ok(write(format, rendered, false).map_err(crate::error::Error::stdout)?)
}

/// Writes a report about the configuration or the database itself (`config`, `doctor`), with
/// every text in it masked. Stored keys and values (`get`, `list`, `export`) go through
/// [`emit`] as they are: they are the user's data, and an export must import unchanged.
pub(crate) fn emit_report<D: Serialize>(format: Format, rendered: &Rendered<D>) -> crate::error::Result<()> {
    Ok(write(format, rendered, true).map_err(crate::error::Error::stdout)?)
}

fn write<D: Serialize>(format: Format, rendered: &Rendered<D>, masked: bool) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match format {
        Format::Json | Format::Yaml => out.write_all(document(format, &rendered.doc, masked)?.as_bytes())?,
        Format::Table => {
            for (i, table) in rendered.tables.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                out.write_all(if masked { table.masked() } else { table.render() }.as_bytes())?;
            }
        }
        Format::Plain => {
            if let Some(text) = &rendered.plain {
                writeln!(out, "{}", if masked { redact::mask(text) } else { text.clone() })?;
            }
        }
    }
    out.flush()
}

/// Every string of a report masked (object keys are field names).
fn mask_strings(value: &mut Value) {
    match value {
        Value::String(text) => *text = redact::mask(text),
        Value::Array(items) => items.iter_mut().for_each(mask_strings),
        Value::Object(fields) => fields.values_mut().for_each(mask_strings),
        _ => {}
    }
}

/// The text of a JSON or YAML document as [`emit`] (`masked`: [`emit_report`]) writes it,
/// final newline included.
pub(crate) fn document<D: Serialize>(format: Format, doc: &D, masked: bool) -> io::Result<String> {
    let mut doc = serde_json::to_value(doc)?;
    if masked {
        mask_strings(&mut doc);
    }
    match format {
        Format::Json => {
            // Indented for a person at a terminal, one line for a pipe or a file (`jq`, logs).
            let style = if io::stdout().is_terminal() { Style::Pretty(2) } else { Style::Unicode };
            Ok(format!("{}\n", json::to_text(&doc, style)))
        }
        _ => yaml::render(&doc),
    }
}

/// `-q`: status lines are not printed. Set once, before the command runs.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns the status lines off (`-q`, `--quiet`) or on.
pub(crate) fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether status lines and progress are off (`-q`).
pub(crate) fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A status line: what a command did (`deleted key …`, `exported N rows …`, clean's summary),
/// on stderr like every [`note`], unless `-q` turned status lines off, as cargo's, git's and
/// pip's `-q` do. Warnings and errors are never status lines: a script that silences the
/// status still hears what went wrong.
pub(crate) fn status(message: &str) {
    if !quiet() {
        note(message);
    }
}

/// A message for people, on stderr, with any password in it masked. Failing to write it is
/// not worth failing the command.
pub(crate) fn note(message: &str) {
    let line = redact::mask(message);
    #[cfg(test)]
    if let Some(line) = captured(line) {
        // libtest keeps what `eprintln!` writes out of the test's log unless the test fails.
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{line}");
        }
    }
    #[cfg(not(test))]
    {
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "{line}");
    }
}

#[cfg(test)]
thread_local! {
    /// The notes of [`capture_notes`] on this thread, while it runs.
    static CAPTURED: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
}

/// In the library's unit tests a note never reaches the process's stderr, which libtest does
/// not capture: it is kept for [`capture_notes`] (`None`), or handed back to go through
/// `eprintln!`, which libtest shows only for a test that fails.
#[cfg(test)]
fn captured(line: String) -> Option<String> {
    CAPTURED.with(|kept| match kept.borrow_mut().as_mut() {
        Some(notes) => {
            notes.push(line);
            None
        }
        None => Some(line),
    })
}

/// Runs `f` and returns the notes (warnings included) it wrote on this thread, instead of
/// writing them: a unit test that provokes a warning on purpose checks it.
#[cfg(test)]
pub(crate) fn capture_notes<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    CAPTURED.with(|kept| *kept.borrow_mut() = Some(Vec::new()));
    let result = f();
    let notes = CAPTURED.with(|kept| kept.borrow_mut().take()).unwrap_or_default();
    (result, notes)
}

pub(crate) fn warn(message: &str) {
    note(&format!("warning: {message}"));
}

/// The JSON value of a stored value. Text that is not JSON (a damaged row) is shown as a
/// string, with a warning, rather than hiding the row.
pub(crate) fn stored_value(key: &str, text: &str) -> Value {
    json::parse(text).unwrap_or_else(|e| {
        warn(&format!("the value of key {} is not valid JSON ({e}); shown as text", quote(key)));
        Value::String(text.to_string())
    })
}
