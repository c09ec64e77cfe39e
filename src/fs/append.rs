//! Files appended to in whole lines only.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::checks::refuse_database;
use super::output::target;
use super::place::Place;
use super::{Id, errno, id_of, is_ours};
use crate::error::{Error, Result};

/// Refuses (exit 2) a file [`AppendLines::open`] would refuse as it is now (a symlink, not a
/// regular file, other hard links, another user's), before anything is opened for writing:
/// for a check before the database is opened. The open itself decides again, on what it
/// opens.
pub(crate) fn check_append(label: &str, path: &Path) -> Result<()> {
    let refuse = |why: &str| -> anyhow::Error {
        Error::Usage(format!("{}: {why}; nothing was written or deleted", target(label, path))).into()
    };
    let place = match Place::open_output(path) {
        Ok(place) => place,
        Err(Ok(why)) => return Err(refuse(&why)),
        Err(Err(_)) => return Ok(()),
    };
    match place.entry() {
        Ok(Some(entry)) if entry.kind() == rustix::fs::FileType::Symlink => Err(refuse(SYMLINK_REFUSAL)),
        Ok(Some(entry)) => refuse_appending(&entry.stat).map_err(|why| refuse(&why)),
        _ => Ok(()),
    }
}

/// What [`AppendLines::open`] found after the last whole line of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nothing: the file was empty, new, or ended in a newline.
    Whole,
    /// A partial line of this many bytes, cut off.
    Cut(u64),
    /// A whole line that only lacked its newline, which was added.
    Completed,
}

/// What the lines of an appended file are, so that a file that holds anything else is never
/// written to or cut.
pub(crate) struct LineKind {
    /// Whether a line (without its newline) is one.
    pub whole: fn(&[u8]) -> bool,
    /// How every line starts: a partial last line is cut only when it starts so (or is a
    /// shorter piece of that start).
    pub start: &'static [u8],
    /// What a file of such lines is, in messages ("archive lines").
    pub name: &'static str,
}

/// Whether the first line of `file` (`len` bytes long) is a whole line of `kind`; one that
/// does not start as the kind's lines do is not read further, one past [`JUDGED_LINE`] not at
/// all. A file that cannot be read is not judged one.
pub(super) fn first_line_is(file: &File, len: u64, kind: &LineKind) -> bool {
    let mut start = vec![0; kind.start.len()];
    if len < start.len() as u64 || file.read_exact_at(&mut start, 0).is_err() || start != kind.start {
        return false;
    }
    let Ok(end) = line_end_after(file, 0, len.min(JUDGED_LINE)) else { return false };
    let mut line = vec![0; usize::try_from(end).unwrap_or(0)];
    file.read_exact_at(&mut line, 0).is_ok() && (kind.whole)(line.strip_suffix(b"\n").unwrap_or(&line))
}

/// The longest line that is read to judge whether it is one of the file's kind.
const JUDGED_LINE: u64 = 64 << 20;
/// Bytes held before they are written: a batch is written as a few large writes.
const APPEND_BUFFER: usize = 1 << 20;

/// A file appended to in batches of whole lines. Lines are held, then written, and
/// [`AppendLines::commit`] fsyncs them; a batch that cannot be written whole (a full disk, an
/// I/O error, a file size limit) is cut off again, back to the length the file had after the
/// last commit. The file is locked (`flock`) while open, so two runs never interleave.
pub(crate) struct AppendLines {
    file: File,
    committed: u64,
    held: Vec<u8>,
    /// Where the file is, and its identity: a file unlinked or renamed over while it is
    /// appended to is found at the next commit.
    place: Place,
    id: Id,
}

impl AppendLines {
    /// Opens (or creates) `path`, cuts off a partial last line, and says what it found there.
    /// `kind` says what the file's lines are: a file that exists is appended to only when its
    /// first and last whole lines are of that kind and a partial last line starts as one
    /// (an unterminated last line that is whole only lacks its newline, and is kept). The
    /// file is opened once (`O_NOFOLLOW | O_NONBLOCK`, relative to its directory opened once),
    /// and written only when `fstat` of that descriptor says it is a regular file with one
    /// name that root or this user owns: another user who can create a name in the directory
    /// must not make a run cut or append to a file of their choosing, nor read the rows from
    /// a file of their own. `what` names the flag and `label` the file in messages.
    pub(crate) fn open(what: &str, label: &str, path: &Path, kind: &LineKind) -> Result<(AppendLines, Tail)> {
        refuse_database(what, path)?;
        let shown = || target(label, path);
        let refuse = |why: String| -> anyhow::Error {
            Error::Usage(format!("{}: {why}; nothing was written or deleted", shown())).into()
        };
        let failed = |e: io::Error| Error::output_file(shown(), e);
        let place = Place::open_output(path).map_err(|e| e.map_or_else(|e| failed(e).into(), refuse))?;
        let (file, created) = open_appended(&place).map_err(|e| match e.raw_os_error() {
            Some(errno::LOOP) => refuse(SYMLINK_REFUSAL.to_string()),
            _ => failed(e).into(),
        })?;
        let stat = rustix::fs::fstat(&file).map_err(|e| failed(e.into()))?;
        refuse_appending(&stat).map_err(refuse)?;
        file.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => Error::Busy(format!(
                "{}: another state-store run is writing it; nothing was deleted",
                shown()
            )),
            std::fs::TryLockError::Error(e) => failed(e),
        })?;
        if created {
            place.sync();
        }
        let mut lines = AppendLines { file, committed: 0, held: Vec::new(), id: id_of(&stat), place };
        let tail = lines.repair(kind).map_err(failed)?.map_err(refuse)?;
        Ok((lines, tail))
    }

    /// Cuts the file back to its last newline, unless what follows it is a whole line; or
    /// says why the file is not of `kind`, before anything is written.
    fn repair(&mut self, kind: &LineKind) -> io::Result<std::result::Result<Tail, String>> {
        let len = self.file.metadata()?.len();
        self.committed = len;
        if len == 0 {
            return Ok(Ok(Tail::Whole));
        }
        let end = last_line_end(&self.file, len)?;
        let not_ours = |which: &str| {
            format!(
                "is not a file of this kind: its {which} line is not one (a file another user linked or \
                 named here?); give a new file or one this command wrote"
            )
        };
        if end > 0 {
            let first_end = line_end_after(&self.file, 0, end)?;
            // The last whole line starts past the newline before its own.
            let last_start = last_line_end(&self.file, end - 1)?;
            for (which, start, stop) in [("first", 0, first_end), ("last whole", last_start, end)] {
                if !self.judge(kind, start, stop - 1)? {
                    return Ok(Err(not_ours(which)));
                }
            }
        }
        if end == len {
            return Ok(Ok(Tail::Whole));
        }
        let partial = len - end;
        if self.judge(kind, end, len)? {
            self.file.write_all(b"\n")?;
            self.file.sync_all()?;
            self.committed = len + 1;
            return Ok(Ok(Tail::Completed));
        }
        let mut head = vec![0; usize::try_from(partial.min(kind.start.len() as u64)).unwrap_or(0)];
        self.file.read_exact_at(&mut head, end)?;
        if !kind.start.starts_with(&head) {
            return Ok(Err(not_ours("last")));
        }
        self.file.set_len(end)?;
        self.file.sync_all()?;
        self.committed = end;
        Ok(Ok(Tail::Cut(partial)))
    }

    /// Whether the bytes `start..stop` are a whole line of `kind`; a line past
    /// [`JUDGED_LINE`] is not read, and is not one.
    fn judge(&self, kind: &LineKind, start: u64, stop: u64) -> io::Result<bool> {
        if stop - start > JUDGED_LINE {
            return Ok(false);
        }
        let mut line = vec![0; usize::try_from(stop - start).unwrap_or(0)];
        self.file.read_exact_at(&mut line, start)?;
        Ok((kind.whole)(&line))
    }

    /// Writes what is held, cutting the batch off on failure.
    pub(super) fn spill(&mut self) -> io::Result<()> {
        self.file.write_all(&self.held).inspect_err(|_| self.rollback())?;
        self.held.clear();
        Ok(())
    }

    /// Makes the lines written since the last commit durable; on failure they are cut off,
    /// and the file ends where it did after the last commit.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
        self.spill()?;
        self.file.sync_all().inspect_err(|_| self.rollback())?;
        self.committed = self.file.metadata()?.len();
        self.still_named()
    }

    /// Whether the file is still the one its path names: not unlinked (no name left), not
    /// renamed over by another file. Lines synced into a file that no path leads to are not
    /// kept, so the rows they hold must not be deleted.
    pub(crate) fn still_named(&self) -> io::Result<()> {
        let linked = rustix::fs::fstat(&self.file).is_ok_and(|stat| stat.st_nlink > 0);
        if linked && self.place.names(self.id) {
            return Ok(());
        }
        Err(io::Error::other(
            "was removed or replaced by another file while this run appended to it; the lines written since \
             are in a file no path leads to, so the rows they hold are not deleted",
        ))
    }

    /// Forgets the lines held and cuts off those written since the last commit. If even the
    /// cut fails, the next open cuts the partial line.
    pub(crate) fn rollback(&mut self) {
        self.held.clear();
        if self.file.set_len(self.committed).is_ok() {
            let _ = self.file.sync_all();
        }
    }
}

impl Write for AppendLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.held.extend_from_slice(buf);
        if self.held.len() >= APPEND_BUFFER {
            self.spill()?;
        }
        Ok(buf.len())
    }

    /// Nothing is written until there is enough to write, or [`AppendLines::commit`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The length of the file up to and including its last newline (0 when it has none).
fn last_line_end(file: &File, len: u64) -> io::Result<u64> {
    let mut chunk = vec![0; 64 * 1024];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let piece = &mut chunk[..usize::try_from(end - start).unwrap_or(0)];
        file.read_exact_at(piece, start)?;
        if let Some(at) = piece.iter().rposition(|&b| b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Why a file that exists is never appended to: its refusal, or `Ok` for a regular file with
/// one name that root or this user owns.
fn refuse_appending(stat: &rustix::fs::Stat) -> std::result::Result<(), String> {
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err("is not a regular file; an archive must be a file that can be fsynced before rows are \
                    deleted"
            .to_string());
    }
    if stat.st_nlink > 1 {
        return Err(format!(
            "has {} hard links; a file is appended to only under its one name, since every other name \
             (a snapshot's, or a file another user linked here) would change with it",
            stat.st_nlink
        ));
    }
    if !is_ours(stat) {
        return Err(format!(
            "belongs to another user (uid {}); a file is appended to only when root or this run's user owns \
             it, since its owner could read the rows, or cut them off after they are deleted",
            stat.st_uid
        ));
    }
    Ok(())
}

/// Opens the file appended to, creating it (`O_EXCL`) when no file has the name: never
/// through a symlink, never blocking (a FIFO or a device is opened, found by `fstat`, and
/// refused). The second value says whether it was created.
fn open_appended(place: &Place) -> io::Result<(File, bool)> {
    use rustix::fs::OFlags;
    let flags = OFlags::RDWR | OFlags::APPEND;
    loop {
        match place.open_file(flags, 0) {
            Ok(file) => return Ok((file, false)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match place.open_file(flags | OFlags::CREATE | OFlags::EXCL, 0o666) {
                    Ok(file) => return Ok((file, true)),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// A symlink at an appended file's path.
const SYMLINK_REFUSAL: &str = "is a symbolic link, which is never followed (another user who can create a \
                               name in its directory could point it at any file); give the file itself";

/// The end (past its newline) of the line that starts at `start`, which ends at `limit` at
/// the latest.
fn line_end_after(file: &File, start: u64, limit: u64) -> io::Result<u64> {
    let mut chunk = vec![0; 64 * 1024];
    let mut at = start;
    while at < limit {
        let piece = &mut chunk[..usize::try_from((limit - at).min(64 * 1024)).unwrap_or(0)];
        file.read_exact_at(piece, at)?;
        if let Some(i) = piece.iter().position(|&b| b == b'\n') {
            return Ok(at + i as u64 + 1);
        }
        at += piece.len() as u64;
    }
    Ok(limit)
}
