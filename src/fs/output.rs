//! Files written in full: replaced atomically, or written through as a stream.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::append::{LineKind, first_line_is};
use super::checks::refuse_database;
use super::place::{Place, Strangers};
use super::temp::Temporary;
use super::{Id, MAX_LINKS, dir_of, errno, id_of, is_ours};
use crate::error::{Error, Result};

/// What an output's name leads to, decided from `fstat` of descriptors only (see
/// [`Place::entry`]).
enum Found {
    /// Replaced by a rename: nothing at the name, a regular file (with its identity and the
    /// mode the replacement keeps, [`kept_mode`]), or a symlink that does not lead to a
    /// stream (another user's, or one to a file).
    Replace(Option<(Id, Option<u32>)>),
    /// Written through: where the stream is, and its identity (`None` in `/proc`, where the
    /// kernel leads to a descriptor of this process).
    Stream(Place, Option<Id>),
    /// Neither: the reason.
    Refused(String),
}

/// Where `place` leads. A symlink is followed only when root or this process's user owns it
/// (its target read from the link's own descriptor, so it cannot change between the check
/// and the read), and only to find a stream: `/dev/stdout`, or a link of the user's to a FIFO
/// or a terminal; a link that leads anywhere else is itself replaced, never followed.
fn find(place: &Place) -> io::Result<Found> {
    use rustix::fs::FileType;
    let mut at = place.try_clone()?;
    for hop in 0..MAX_LINKS {
        let behind_link = hop > 0;
        let Some(entry) = at.entry()? else { return Ok(Found::Replace(None)) };
        let stat = &entry.stat;
        return Ok(match entry.kind() {
            FileType::RegularFile if behind_link => Found::Replace(None),
            FileType::RegularFile => Found::Replace(Some((id_of(stat), kept_mode(stat)))),
            FileType::Directory => Found::Refused("is a directory, not a file".to_string()),
            FileType::Symlink if at.in_proc() => Found::Stream(at, None),
            FileType::Symlink if !is_ours(stat) => Found::Replace(None),
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(&entry.fd, "", Vec::new())?;
                let target = PathBuf::from(std::ffi::OsString::from_vec(target.into_bytes()));
                at = at.open_at(&target, Strangers::Refuse)?;
                continue;
            }
            FileType::Fifo | FileType::CharacterDevice if is_ours(stat) => {
                Found::Stream(at, Some(id_of(stat)))
            }
            FileType::Fifo | FileType::CharacterDevice => Found::Refused(format!(
                "belongs to another user (uid {}), and is neither a regular file nor replaced by this run; \
                 refusing to write through it",
                stat.st_uid
            )),
            _ if behind_link => Found::Replace(None),
            _ => Found::Refused(
                "is neither a regular file, a FIFO nor a character device (a terminal)".to_string(),
            ),
        });
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// This process's umask, which Linux shows in `/proc/self/status` (reading it with
/// `umask(2)` would change it); 022 when it cannot be read.
fn umask() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
            u32::from_str_radix(line.trim(), 8).ok()
        })
        .unwrap_or(0o022)
}

/// The mode `File::create` would give a new file: 0666 less this process's umask.
pub(crate) fn default_mode() -> u32 {
    0o666 & !umask()
}

/// The permission bits a replacement keeps from the file it replaces, or `None` when it is
/// made as a new file is. A mode is taken only from a file root or the run's user owns:
/// another user who plants a file (in a directory of theirs, or a sticky one) must not choose
/// the mode of root's file (a setuid one they then write into, or one they may rewrite). Even
/// then the setuid, setgid and sticky bits are dropped, and so is write for group and others
/// where the umask takes it away.
fn kept_mode(stat: &rustix::fs::Stat) -> Option<u32> {
    is_ours(stat).then(|| stat.st_mode & 0o777 & !(umask() & 0o022))
}

/// A file being written in full: replaced atomically at [`Output::commit`], or a stream
/// written in place. Dropped before `commit`, it leaves the old file as it was.
pub(crate) struct Output {
    out: BufWriter<File>,
    mode: OutputMode,
}

enum OutputMode {
    Replace {
        temporary: Temporary,
        place: Place,
        permissions: u32,
        /// The file replaced, under a shared lock until the rename: no clean starts appending
        /// to it meanwhile (see [`held_unless_appended`]).
        _held: Option<File>,
    },
    Stream {
        regular: bool,
    },
}

/// Which outputs a path may be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accepts {
    /// A regular file (replaced), or a stream written through: `export --file`.
    FileOrStream,
    /// A regular file only: renaming over a device or a FIFO would replace it (as root,
    /// `/dev/null` itself) with a regular file, and a metrics collector reads files.
    File,
}

/// An output path refused before anything is written: exit 2.
fn refused(what: &str, path: &Path, why: &str) -> anyhow::Error {
    Error::Usage(format!("{what} {}: {why} (nothing was written)", path.display())).into()
}

impl Output {
    /// Opens `path` for writing in full. `what` names the flag and `label` the file in
    /// messages (see [`target`]); `mode` is the new file's mode when none exists, or when
    /// the file replaced is another user's ([`kept_mode`]); a file whose first line is of the
    /// kind `spare` is never replaced. The directory is opened once, and what the name is (nothing,
    /// a regular file, a symlink, a stream) is decided from `fstat` of a descriptor of it
    /// ([`Place`]): a symlink at `path` is replaced, not followed, unless it is root's or this
    /// user's and leads to a stream (`/dev/stdout`), so a planted one cannot redirect the
    /// write; a stream is written through only when root or this user owns it.
    pub(crate) fn create(
        what: &str,
        label: &str,
        path: &Path,
        mode: u32,
        spare: Option<&LineKind>,
    ) -> Result<Output> {
        Output::open(what, label, path, (mode, spare), Accepts::FileOrStream)
    }

    /// `mode` is the new file's mode, and a file whose first line is of the kind it names is
    /// never replaced ([`held_unless_appended`]).
    fn open(
        what: &str,
        label: &str,
        path: &Path,
        (mode, spare): (u32, Option<&LineKind>),
        accepts: Accepts,
    ) -> Result<Output> {
        refuse_database(what, path)?;
        let failed = |e: io::Error| Error::output_file(target(label, path), e);
        let place = place_of(what, path).map_err(|e| e.unwrap_or_else(|e| failed(e).into()))?;
        match find(&place).map_err(failed)? {
            Found::Refused(why) => Err(refused(what, path, &why)),
            Found::Stream(..) if accepts == Accepts::File => {
                Err(refused(what, path, "is not a regular file (a device, FIFO or socket)"))
            }
            Found::Stream(at, id) => {
                // Appending: `/dev/stdout` redirected to a file with `>>` keeps what it held.
                let file = open_stream(&at, id).map_err(|e| match e {
                    Opened::Changed => {
                        refused(what, path, "was replaced by another file while it was being opened")
                    }
                    Opened::Failed(e) => failed(e).into(),
                })?;
                let regular = file.metadata().is_ok_and(|m| m.is_file());
                Ok(Output { out: BufWriter::new(file), mode: OutputMode::Stream { regular } })
            }
            Found::Replace(existing) => {
                let held = existing.map(|(id, _)| held_unless_appended(&place, id, spare));
                let held = held.transpose().map_err(|why| refused(what, path, &why))?.flatten();
                let name = place.name.to_string_lossy().into_owned();
                let (file, temporary) = Temporary::create_in(&place, &name).map_err(failed)?;
                let permissions = existing.and_then(|(_, kept)| kept).unwrap_or(mode);
                Ok(Output {
                    out: BufWriter::new(file),
                    mode: OutputMode::Replace { temporary, place, permissions, _held: held },
                })
            }
        }
    }

    /// Makes the new content the file's: flushed, fsynced, given its mode, renamed over the
    /// name (in the directory opened at the start), the directory fsynced so the rename
    /// survives a crash. A stream is flushed only: a pipe or a terminal cannot be fsynced.
    pub(crate) fn commit(self) -> io::Result<()> {
        let file = self.out.into_inner().map_err(io::IntoInnerError::into_error)?;
        match self.mode {
            OutputMode::Stream { regular: true } => file.sync_all(),
            OutputMode::Stream { regular: false } => Ok(()),
            OutputMode::Replace { temporary, place, permissions, _held } => {
                rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(permissions))?;
                file.sync_all()?;
                rustix::fs::renameat(&place.dir, &temporary.name, &place.dir, &place.name)?;
                temporary.keep();
                place.sync();
                Ok(())
            }
        }
    }
}

/// Opens the directory of an output: `Err(Ok(refusal))` for a path that names no file
/// (a directory), `Err(Err(e))` when the directory cannot be opened.
fn place_of(
    what: &str,
    path: &Path,
) -> std::result::Result<Place, std::result::Result<anyhow::Error, io::Error>> {
    Place::open_output(path).map_err(|e| e.map(|why| refused(what, path, &why)))
}

/// Refuses (exit 2) an output path that could not be written as `accepts` says, before
/// anything is opened for writing: for a check before the database is opened. The write
/// itself decides again, on what it opens.
pub(crate) fn check_output(
    what: &str,
    path: &Path,
    accepts: Accepts,
    spare: Option<&LineKind>,
) -> Result<()> {
    let place = match place_of(what, path) {
        Ok(place) => place,
        Err(Ok(refusal)) => return Err(refusal),
        Err(Err(e)) if e.kind() == io::ErrorKind::NotFound && accepts == Accepts::File => {
            let dir = dir_of(path);
            return Err(refused(what, path, &format!("the directory {} does not exist", dir.display())));
        }
        Err(Err(_)) => return Ok(()),
    };
    match find(&place) {
        Ok(Found::Refused(why)) => Err(refused(what, path, &why)),
        Ok(Found::Stream(..)) if accepts == Accepts::File => {
            Err(refused(what, path, "is not a regular file (a device, FIFO or socket)"))
        }
        Ok(Found::Replace(Some((id, _)))) => {
            held_unless_appended(&place, id, spare).map(drop).map_err(|why| refused(what, path, &why))
        }
        _ => Ok(()),
    }
}

/// The regular file `id` that an output is about to replace, under a shared `flock` until it
/// is replaced; or the refusal when a clean holds it (an archive being appended to, under
/// that clean's exclusive lock: replacing it would send the clean's rows to a file no name
/// leads to). `None` when the name no longer names that file or it cannot be read: the
/// rename then replaces whatever is there.
///
/// A file whose first line is of the kind `spare` (an archive, which may hold the only copy of
/// rows a clean deleted) is refused too, whoever holds it.
fn held_unless_appended(
    place: &Place,
    id: Id,
    spare: Option<&LineKind>,
) -> std::result::Result<Option<File>, String> {
    let Ok(file) = place.open_file(rustix::fs::OFlags::RDONLY, 0) else { return Ok(None) };
    let Ok(stat) = rustix::fs::fstat(&file) else { return Ok(None) };
    if id_of(&stat) != id {
        return Ok(None);
    }
    let locked = match file.try_lock_shared() {
        Ok(()) => true,
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(
                "is the archive a clean is writing (it holds its lock); refusing to replace it, which \
                 would send that clean's rows to a file no name leads to"
                    .to_string(),
            );
        }
        Err(std::fs::TryLockError::Error(_)) => false,
    };
    let len = u64::try_from(stat.st_size).unwrap_or(0);
    if let Some(kind) = spare
        && first_line_is(&file, len, kind)
    {
        return Err(format!(
            "holds {} (its first line is one); refusing to replace it, which would lose the rows it holds: \
             remove it first, or name another file",
            kind.name
        ));
    }
    Ok(locked.then_some(file))
}

/// How long an output that is a FIFO waits for a process to open it for reading.
pub(crate) const FIFO_READER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a stream was not opened.
enum Opened {
    /// The name now names another file than the one found: it was swapped meanwhile.
    Changed,
    Failed(io::Error),
}

/// Opens a stream output (a FIFO, a terminal, `/dev/stdout`) for appending, without ever
/// blocking: a FIFO that nobody reads (ENXIO with `O_NONBLOCK`) is tried again until
/// [`FIFO_READER_WAIT`] has passed, and the descriptor is then made blocking again for the
/// writes. What is opened must be the file found (`id`), by `fstat` of the descriptor.
fn open_stream(at: &Place, id: Option<Id>) -> std::result::Result<File, Opened> {
    use rustix::fs::OFlags;
    let until = std::time::Instant::now() + FIFO_READER_WAIT;
    loop {
        match at.open_file(OFlags::WRONLY | OFlags::APPEND, 0) {
            Ok(file) => {
                let stat = rustix::fs::fstat(&file).map_err(|e| Opened::Failed(e.into()))?;
                if id.is_some_and(|id| id != id_of(&stat)) {
                    return Err(Opened::Changed);
                }
                let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| Opened::Failed(e.into()))?;
                rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)
                    .map_err(|e| Opened::Failed(e.into()))?;
                return Ok(file);
            }
            Err(e) if e.raw_os_error() == Some(errno::NXIO) && std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) if e.raw_os_error() == Some(errno::NXIO) => {
                return Err(Opened::Failed(io::Error::other(format!(
                    "it is a FIFO that no process opened for reading within {} s",
                    FIFO_READER_WAIT.as_secs()
                ))));
            }
            // A symlink swapped in for the stream found.
            Err(e) if e.raw_os_error() == Some(errno::LOOP) => return Err(Opened::Changed),
            Err(e) => return Err(Opened::Failed(e)),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Replaces `path` with `bytes`, atomically (see [`Output`]); `path` must be a regular file
/// or nothing ([`Accepts::File`]).
pub(crate) fn replace(
    what: &str,
    label: &str,
    path: &Path,
    bytes: &[u8],
    (mode, spare): (u32, Option<&LineKind>),
) -> Result<()> {
    let mut output = Output::open(what, label, path, (mode, spare), Accepts::File)?;
    let written = output.write_all(bytes).and_then(|()| output.commit());
    Ok(written.map_err(|e| Error::output_file(target(label, path), e))?)
}

/// How an output error names the file: `archive PATH`, or the path alone.
pub(super) fn target(label: &str, path: &Path) -> String {
    if label.is_empty() { path.display().to_string() } else { format!("{label} {}", path.display()) }
}
