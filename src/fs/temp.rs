//! Temporary files, which every exit that runs code removes, and nameless spools.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::place::Place;
use super::{dir_of, lock, random_name};
use crate::error::{Error, Result};

/// Temporary files that exist by name, removed when a signal ends the process.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A temporary file that exists by name until it is renamed ([`Temporary::keep`]) or
/// dropped, and that a signal ending the process removes too.
pub(crate) struct Temporary {
    /// Its directory, opened once, and its name there.
    pub(super) dir: std::os::fd::OwnedFd,
    pub(super) name: OsString,
    /// Its path, for a signal's removal.
    path: PathBuf,
    kept: bool,
}

impl Temporary {
    /// Creates `.NAME.RANDOM.tmp` in the place's directory, opened once, with `O_EXCL |
    /// O_NOFOLLOW` at mode 0600. The leading dot and the `.tmp` keep it out of a textfile
    /// collector's `*.prom`.
    pub(super) fn create_in(place: &Place, name: &str) -> io::Result<(File, Temporary)> {
        use rustix::fs::{Mode, OFlags};
        let shown_dir = dir_of(&place.shown).to_path_buf();
        loop {
            let file_name = OsString::from(format!(".{name}.{}.tmp", random_name()));
            let path = shown_dir.join(&file_name);
            // Listed before it exists: a signal between the two finds nothing to remove, where
            // the other order could leave the file behind.
            lock(&TEMPORARIES).push(path.clone());
            let mut temporary = Temporary { dir: place.dir.try_clone()?, name: file_name, path, kept: true };
            let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(&temporary.dir, &temporary.name, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => {
                    temporary.kept = false;
                    return Ok((File::from(fd), temporary));
                }
                // Someone else's file: never ours to remove.
                Err(rustix::io::Errno::EXIST) => keep_at_exit(&temporary.path),
                Err(e) => {
                    keep_at_exit(&temporary.path);
                    return Err(e.into());
                }
            }
        }
    }

    /// The file was renamed away: nothing is left to remove.
    pub(super) fn keep(mut self) {
        self.kept = true;
        keep_at_exit(&self.path);
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.kept {
            let _ = rustix::fs::unlinkat(&self.dir, &self.name, rustix::fs::AtFlags::empty());
            keep_at_exit(&self.path);
        }
    }
}

/// Names a file the process holds (a clean's lock file) for [`remove_temporaries`] to remove
/// when the process ends at once, until [`keep_at_exit`]: a lock file is removed on every
/// ending that runs code.
pub(crate) fn remove_at_exit(path: &Path) {
    lock(&TEMPORARIES).push(path.to_path_buf());
}

/// The file named by [`remove_at_exit`] (or a temporary's) is its holder's to remove again.
pub(crate) fn keep_at_exit(path: &Path) {
    lock(&TEMPORARIES).retain(|p| p != path);
}

/// Removes every temporary file that still exists by name: a signal is ending the process.
pub(crate) fn remove_temporaries() {
    for path in lock(&TEMPORARIES).drain(..) {
        let _ = fs::remove_file(path);
    }
}

/// A private copy of a stream (stdin), readable from the start as many times as needed. The
/// file has no name (`O_TMPFILE`; where the file system cannot, it is created 0600 with
/// `O_EXCL | O_NOFOLLOW` and unlinked at once), so no other user can open it and no exit, not
/// even `kill -9`, leaves it behind.
pub(crate) struct Spool {
    pub(super) file: File,
}

impl Spool {
    /// The copy, from its first byte. (Readers share one offset: one at a time.)
    pub(crate) fn reader(&self) -> io::Result<File> {
        let mut file = self.file.try_clone()?;
        file.seek(SeekFrom::Start(0))?;
        Ok(file)
    }
}

/// Copies `input` into a new spool in `$TMPDIR`. A spool that cannot be created or written
/// (a missing or full `$TMPDIR`) is an output error (exit 6); `input` that cannot be read is
/// a usage error (exit 2). `what` names the input (`stdin`).
pub(crate) fn spool(what: &str, mut input: impl Read) -> Result<Spool> {
    let dir = std::env::temp_dir();
    let failed = |e: io::Error| Error::output_file(format!("a copy of {what} in {}", dir.display()), e);
    let mut file = unnamed(&dir).map_err(failed)?;
    let mut buf = vec![0; 256 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(anyhow::Error::new(e).context(Error::Usage(format!("cannot read {what}")))),
        };
        file.write_all(&buf[..n]).map_err(failed)?;
    }
    Ok(Spool { file })
}

fn unnamed(dir: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    match rustix::fs::open(dir, OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))
    {
        Ok(fd) => Ok(File::from(fd)),
        // No O_TMPFILE in this kernel or file system.
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::INVAL) => {
            // The temporary, dropped at once, removes the name and leaves the open file.
            let name = "state-store-spool";
            Ok(Temporary::create_in(&Place::open(&dir.join(name))?, name)?.0)
        }
        Err(e) => Err(e.into()),
    }
}
