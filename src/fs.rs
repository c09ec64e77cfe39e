//! Every file the tool writes, and the edges each one keeps, in one place, so that a new
//! command gets them for free (node_exporter's textfile convention and pt-archiver's whole
//! archive lines are the models):
//!
//! - **Decided on what was opened** ([`Place`]). The directory of a path is walked to one
//!   component at a time ([`walk`]: a symlink another user could have planted on the way is
//!   never followed) and opened once, the
//!   name is opened once relative to it (`O_NOFOLLOW | O_NONBLOCK`, or `O_PATH` to look
//!   without opening a FIFO or a device), and every decision (type, owner, link count,
//!   identity, a clean's lock) is taken from `fstat` of that descriptor, never from a `stat`
//!   of the name followed by a second open: another user who can create names in the
//!   directory can swap the name between the two. Renames and temporary files are relative to
//!   the same directory descriptor, so a directory swapped meanwhile cannot redirect them.
//!   The checks by name before the database is opened ([`check_output`], [`check_append`],
//!   [`refuse_same`], [`refuse_database`]) only ever refuse; the open decides again.
//! - **No output is the open database.** An output path that names the SQLite database a
//!   command opened, or its `-wal`, `-shm` or `-journal`, is refused (exit 2) before a byte is
//!   written. Files are compared by device and inode, and a file that does not exist yet by
//!   its directory's identity and its name, never by spelling: a symlink, a hard link or
//!   `./x/../airflow.db` is the same file.
//! - **A file is replaced atomically** ([`Output`]): written to a temporary file in the same
//!   directory, fsynced, renamed over the target, and the directory fsynced; a failure or a
//!   signal leaves the old file as it was. A path that cannot be renamed over (a pipe, a FIFO,
//!   a terminal, `/dev/stdout`) is written in place as a stream, and never fsynced.
//! - **An archive is appended to in whole lines only** ([`AppendLines`]): a partial last line
//!   left by a killed run is cut off before anything is appended, and a batch whose write fails
//!   is cut off again, so the file always holds whole lines.
//! - **A temporary or lock file is created safely** ([`Temporary`], [`open_lock`], [`spool`]):
//!   `O_EXCL | O_NOFOLLOW` (a planted symlink is never followed), mode 0600, an unpredictable
//!   name, and removed on every exit that runs code: errors, the end of the run, and signals
//!   (`signals` calls [`remove_temporaries`]). A spool is never named at all (`O_TMPFILE`), so
//!   it cannot outlive the process even after `kill -9`. A lock file is 0600 too: no other
//!   user can open it, so none can `flock` it; one another user left is taken over only by
//!   renaming it away, which takes write on its directory ([`set_aside`]).

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// The error numbers this module tells apart, as `io::Error::raw_os_error` gives them.
mod errno {
    use rustix::io::Errno;
    pub(super) const NOTDIR: i32 = Errno::NOTDIR.raw_os_error();
    pub(super) const NXIO: i32 = Errno::NXIO.raw_os_error();
    pub(super) const LOOP: i32 = Errno::LOOP.raw_os_error();
    pub(super) const OPNOTSUPP: i32 = Errno::OPNOTSUPP.raw_os_error();
    pub(super) const ISDIR: i32 = Errno::ISDIR.raw_os_error();
    pub(super) const INVAL: i32 = Errno::INVAL.raw_os_error();
}

/// Open flags for std's `OpenOptionsExt::custom_flags`, which takes them as a C int.
mod flags {
    use rustix::fs::OFlags;
    #[allow(clippy::cast_possible_wrap)] // every flag is below 2^31
    const fn int(flag: OFlags) -> i32 {
        flag.bits() as i32
    }
    pub(super) const TMPFILE: i32 = int(OFlags::TMPFILE);
    pub(super) const CLOEXEC: i32 = int(OFlags::CLOEXEC);
    pub(super) const NONBLOCK: i32 = int(OFlags::NONBLOCK);
}

/// The files SQLite keeps beside a database, by the suffix of their names.
const DATABASE_FILES: &[(&str, &str)] = &[
    ("", "the SQLite database"),
    ("-wal", "the -wal file of the SQLite database"),
    ("-shm", "the -shm file of the SQLite database"),
    ("-journal", "the -journal file of the SQLite database"),
];

/// A database file a command opened: its directory (as given and resolved) and its name.
struct Protected {
    shown: PathBuf,
    places: Vec<(PathBuf, OsString)>,
}

static DATABASES: Mutex<Vec<Protected>> = Mutex::new(Vec::new());

/// Temporary files that exist by name, removed when a signal ends the process.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records that the process has the SQLite database at `path` open: from now on no output
/// may be it or one of the files SQLite keeps beside it. SQLite names those files after the
/// database's real path (it resolves symlinks), so both directories are kept.
pub(crate) fn protect_database(path: &Path) {
    let mut places = Vec::new();
    if let (Some(dir), Some(name)) = (parent(path).map(Path::to_path_buf), path.file_name()) {
        places.push((dir, name.to_os_string()));
    }
    if let Ok(real) = fs::canonicalize(path)
        && let (Some(dir), Some(name)) = (real.parent(), real.file_name())
    {
        places.push((dir.to_path_buf(), name.to_os_string()));
    }
    lock(&DATABASES).push(Protected { shown: path.to_path_buf(), places });
}

/// Refuses (exit 2) an output path that is an open database or one of its files. `what`
/// names the flag (`--file`), for the message.
pub(crate) fn refuse_database(what: &str, path: &Path) -> Result<()> {
    let databases = lock(&DATABASES);
    for database in databases.iter() {
        for (dir, name) in &database.places {
            for (suffix, part) in DATABASE_FILES {
                let mut file_name = name.clone();
                file_name.push(suffix);
                if same_file(path, &dir.join(&file_name)) {
                    return Err(Error::Usage(format!(
                        "{what} {}: is {part} {} this command has open; refusing to write over it \
                         (nothing was written)",
                        path.display(),
                        database.shown.display()
                    ))
                    .into());
                }
            }
        }
    }
    Ok(())
}

/// Whether writing `output` would write `file`: the same inode when it exists, else the same
/// directory and name, where `output` or the file a symlink at `output` points to would be
/// created.
fn same_file(output: &Path, file: &Path) -> bool {
    let id = |m: &fs::Metadata| (m.dev(), m.ino());
    let file_meta = fs::metadata(file).ok();
    if let (Ok(out), Some(f)) = (fs::metadata(output), &file_meta) {
        return id(&out) == id(f);
    }
    let place = |p: &Path| -> Option<((u64, u64), OsString)> {
        let dir = fs::metadata(parent(p)?).ok()?;
        Some((id(&dir), p.file_name()?.to_os_string()))
    };
    let Some(target) = place(file) else { return false };
    let mut candidates = vec![output.to_path_buf()];
    if let Some(resolved) = follow(output) {
        candidates.push(resolved);
    }
    candidates.iter().any(|c| place(c).is_some_and(|p| p == target))
}

/// Where a path leads once every symlink on the way is followed, even a dangling one: for a
/// refusal only (a name that changes meanwhile can make a run refuse, never write).
fn follow(path: &Path) -> Option<PathBuf> {
    let mut hop = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let dir = fs::canonicalize(parent(&hop)?).ok()?;
        let here = dir.join(hop.file_name()?);
        match fs::read_link(&here) {
            Ok(target) => hop = if target.is_absolute() { target } else { dir.join(target) },
            Err(_) => return Some(here),
        }
    }
    None
}

/// The directory a path's last component is in; `.` for a bare name.
fn parent(path: &Path) -> Option<&Path> {
    match path.parent() {
        Some(dir) if dir.as_os_str().is_empty() => Some(Path::new(".")),
        other => other,
    }
}

/// Whether this process's effective user or root owns a file: the rule Linux's
/// `protected_symlinks` and `protected_fifos` apply in shared directories, here applied to
/// every output written through rather than replaced, and to every file appended to.
fn is_ours(stat: &rustix::fs::Stat) -> bool {
    stat.st_uid == 0 || stat.st_uid == rustix::process::geteuid().as_raw()
}

/// A file's identity: its device and inode.
pub(crate) type Id = (u64, u64);

fn id_of(stat: &rustix::fs::Stat) -> Id {
    (stat.st_dev, stat.st_ino)
}

/// The directory of an output, opened once, and the output's name in it. Everything the
/// tool then does to that name (opening it, creating a temporary beside it, renaming that
/// over it, checking it still names the file being appended to) is relative to this
/// descriptor, so a directory on the way that another user renames or swaps for a symlink
/// after this open cannot redirect the write.
pub(crate) struct Place {
    dir: std::os::fd::OwnedFd,
    /// Whether `dir` is readable, and so can be fsynced after a rename (a directory that is
    /// only searchable is opened as a path).
    syncable: bool,
    name: OsString,
    shown: PathBuf,
}

impl Place {
    /// Opens the directory of an output's `path`, one component at a time ([`walk`]): a
    /// symlink another user could have planted on the way is refused.
    pub(crate) fn open(path: &Path) -> io::Result<Place> {
        Place::open_walking(path, Strangers::Refuse)
    }

    fn open_walking(path: &Path, strangers: Strangers<'_>) -> io::Result<Place> {
        let name = match path.file_name() {
            Some(name) if !path.as_os_str().as_encoded_bytes().ends_with(b"/") => name.to_os_string(),
            _ => return Err(io::Error::from(io::ErrorKind::IsADirectory)),
        };
        let (dir, syncable) = walk(None, parent(path).unwrap_or(Path::new(".")), strangers)?;
        Ok(Place { dir, syncable, name, shown: path.to_path_buf() })
    }

    fn try_clone(&self) -> io::Result<Place> {
        Ok(Place {
            dir: self.dir.try_clone()?,
            syncable: self.syncable,
            name: self.name.clone(),
            shown: self.shown.clone(),
        })
    }

    /// The place a symlink in this directory leads to: `target` as the link holds it,
    /// relative to this directory unless absolute, its directory part walked as [`walk`]
    /// walks one.
    fn open_at(&self, target: &Path, strangers: Strangers<'_>) -> io::Result<Place> {
        let name = target.file_name().ok_or_else(|| io::Error::from(io::ErrorKind::IsADirectory))?;
        let dir_path = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let (dir, syncable) = walk(Some(self), dir_path, strangers)?;
        Ok(Place { dir, syncable, name: name.to_os_string(), shown: self.shown.clone() })
    }

    /// What the name is now, from `fstat` of a descriptor of it opened with `O_PATH |
    /// O_NOFOLLOW`: no permission is needed, nothing is followed, and a FIFO or a device is
    /// not opened for reading or writing (so nothing blocks and no device acts). `None`: no
    /// file has the name.
    fn entry(&self) -> io::Result<Option<Entry>> {
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let stat = rustix::fs::fstat(&fd)?;
                Ok(Some(Entry { fd, stat }))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the name is in `/proc` (`/dev/stdout` leads to `/proc/self/fd/1`): a
    /// descriptor of this process, which the kernel resolves and a rename cannot replace.
    fn in_proc(&self) -> bool {
        rustix::fs::fstatfs(&self.dir).is_ok_and(|fs| fs.f_type == rustix::fs::PROC_SUPER_MAGIC)
    }

    /// Opens the name with `flags`, never through a symlink (in `/proc`, through the
    /// kernel's own link to a descriptor of this process only), and never blocking.
    fn open_file(&self, flags: rustix::fs::OFlags, mode: u32) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        let follow = if self.in_proc() { OFlags::empty() } else { OFlags::NOFOLLOW };
        let flags = flags | follow | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &self.name, flags, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    }

    /// Whether the name still names the file with identity `id` (a file appended to: not
    /// unlinked, not replaced by a rename).
    fn names(&self, id: Id) -> bool {
        rustix::fs::statat(&self.dir, &self.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| id_of(&stat) == id)
    }

    /// Makes a rename or a new name in the directory durable. Some file systems cannot fsync
    /// a directory; the data itself is on disk already, so that is not an error.
    fn sync(&self) {
        if self.syncable {
            let _ = rustix::fs::fsync(&self.dir);
        }
    }
}

/// Whether a user other than root and this process's user can create names in a directory:
/// it is theirs (they can change its mode), or it is writable by others, or by a group other
/// than root's.
fn others_can_write(stat: &rustix::fs::Stat) -> bool {
    !is_ours(stat) || stat.st_mode & 0o002 != 0 || (stat.st_mode & 0o020 != 0 && stat.st_gid != 0)
}

/// A symlink on the way to an output that another user may have planted: the path is
/// refused, as OpenSSH's `StrictModes` refuses a key file on such a path.
#[derive(Debug)]
struct UntrustedLink(String);

impl std::fmt::Display for UntrustedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UntrustedLink {}

/// Why a path is refused, when an open failed on an [`UntrustedLink`].
fn untrusted(e: &io::Error) -> Option<String> {
    e.get_ref()?.downcast_ref::<UntrustedLink>().map(|link| link.0.clone())
}

/// What [`walk`] does with a symlink on the way that another user could have planted (one
/// that is neither root's nor this user's, in a directory other users can write).
enum Strangers<'a> {
    /// Refuses it ([`UntrustedLink`]): the path leads to an output.
    Refuse,
    /// Follows it, and records every directory a symlink was followed in: the path leads to a
    /// file read whose writer matters ([`read_with_holders`]), and whoever can write such a
    /// directory chose where the path goes.
    Record(&'a mut Vec<Holder>),
}

/// Opens a directory by walking its path one component at a time, each opened from its
/// parent's descriptor with `O_PATH | O_NOFOLLOW` and judged by `fstat`, as systemd's
/// `chase()` walks paths. A symlink on the way is read from its own descriptor and followed;
/// one another user could have made is refused or recorded, as `strangers` says, so that a
/// directory of theirs on the way cannot lead a root run into a directory of root's. A
/// relative path starts at `from` (a symlink's directory), or at the working directory. The
/// directory is then opened readable (to fsync it), or as a path when it is only searchable;
/// the bool says which.
fn walk(
    from: Option<&Place>,
    path: &Path,
    mut strangers: Strangers<'_>,
) -> io::Result<(std::os::fd::OwnedFd, bool)> {
    use rustix::fs::{CWD, FileType, Mode, OFlags};
    use std::path::Component;
    let look = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root = || rustix::fs::openat(CWD, "/", look, Mode::empty());
    // The components still to walk, the next one last.
    let mut todo: Vec<OsString> = Vec::new();
    let push = |todo: &mut Vec<OsString>, path: &Path| {
        for component in path.components().rev() {
            match component {
                Component::Normal(name) => todo.push(name.to_os_string()),
                Component::ParentDir => todo.push(OsString::from("..")),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    let (mut at, mut walked) = match from {
        _ if path.is_absolute() => (root()?, PathBuf::from("/")),
        Some(place) => (
            rustix::fs::openat(&place.dir, ".", look, Mode::empty())?,
            parent(&place.shown).unwrap_or(Path::new(".")).to_path_buf(),
        ),
        None => (rustix::fs::openat(CWD, ".", look, Mode::empty())?, PathBuf::from(".")),
    };
    let mut at_stat = rustix::fs::fstat(&at)?;
    push(&mut todo, path);
    let mut links = 0;
    while let Some(name) = todo.pop() {
        let next = rustix::fs::openat(&at, name.as_os_str(), look, Mode::empty())?;
        let stat = rustix::fs::fstat(&next)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                walked.push(&name);
                (at, at_stat) = (next, stat);
            }
            FileType::Symlink => {
                match &mut strangers {
                    Strangers::Refuse if !is_ours(&stat) && others_can_write(&at_stat) => {
                        return Err(io::Error::other(UntrustedLink(format!(
                            "{} on the way is a symbolic link that uid {} owns, in a directory other users \
                             can write; refusing to follow it",
                            walked.join(&name).display(),
                            stat.st_uid
                        ))));
                    }
                    Strangers::Refuse => {}
                    Strangers::Record(dirs) => dirs.push(Holder::of(walked.clone(), &at_stat)),
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = rustix::fs::readlinkat(&next, "", Vec::new())?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                if target.is_absolute() {
                    walked = PathBuf::from("/");
                    at = root()?;
                    at_stat = rustix::fs::fstat(&at)?;
                }
                push(&mut todo, &target);
            }
            _ => return Err(io::Error::from_raw_os_error(errno::NOTDIR)),
        }
    }
    match rustix::fs::openat(&at, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(dir) => Ok((dir, true)),
        Err(rustix::io::Errno::ACCESS) => Ok((at, false)),
        Err(e) => Err(e.into()),
    }
}

/// A name's file as [`Place::entry`] found it: the descriptor and its `fstat`.
struct Entry {
    fd: std::os::fd::OwnedFd,
    stat: rustix::fs::Stat,
}

impl Entry {
    fn kind(&self) -> rustix::fs::FileType {
        rustix::fs::FileType::from_raw_mode(self.stat.st_mode)
    }
}

/// Linux's own limit of symlinks followed in one lookup.
const MAX_LINKS: usize = 40;

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

/// An unpredictable file name part: std's `RandomState` is keyed from the operating
/// system's random source once per thread (and changes on every use), so no crate is needed.
fn random_name() -> String {
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    hasher.write_u128(nanos.as_nanos());
    format!("{:016x}", hasher.finish())
}

/// A temporary file that exists by name until it is renamed ([`Temporary::keep`]) or
/// dropped, and that a signal ending the process removes too.
pub(crate) struct Temporary {
    /// Its directory, opened once, and its name there.
    dir: std::os::fd::OwnedFd,
    name: OsString,
    /// Its path, for a signal's removal.
    path: PathBuf,
    kept: bool,
}

impl Temporary {
    /// Creates `.NAME.RANDOM.tmp` in `dir` with `O_EXCL | O_NOFOLLOW` at mode 0600. The
    /// leading dot and the `.tmp` keep it out of a textfile collector's `*.prom`.
    pub(crate) fn create(dir: &Path, name: &str) -> io::Result<(File, Temporary)> {
        Temporary::create_in(&Place::open(&dir.join(name))?, name)
    }

    /// [`Temporary::create`] in a directory opened once.
    fn create_in(place: &Place, name: &str) -> io::Result<(File, Temporary)> {
        use rustix::fs::{Mode, OFlags};
        let shown_dir = parent(&place.shown).unwrap_or(Path::new(".")).to_path_buf();
        loop {
            let file_name = OsString::from(format!(".{name}.{}.tmp", random_name()));
            let path = shown_dir.join(&file_name);
            // Listed before it exists: a signal between the two finds nothing to remove, where
            // the other order could leave the file behind.
            lock(&TEMPORARIES).push(path.clone());
            let temporary = Temporary { dir: place.dir.try_clone()?, name: file_name, path, kept: true };
            let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(&temporary.dir, &temporary.name, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => {
                    let mut temporary = temporary;
                    temporary.kept = false;
                    return Ok((File::from(fd), temporary));
                }
                // Someone else's file: never ours to remove.
                Err(rustix::io::Errno::EXIST) => forget(&temporary.path),
                Err(e) => {
                    forget(&temporary.path);
                    return Err(e.into());
                }
            }
        }
    }

    /// The file was renamed away: nothing is left to remove.
    fn keep(mut self) {
        self.kept = true;
        forget(&self.path);
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.kept {
            let _ = rustix::fs::unlinkat(&self.dir, &self.name, rustix::fs::AtFlags::empty());
            forget(&self.path);
        }
    }
}

fn forget(path: &Path) {
    lock(&TEMPORARIES).retain(|p| p != path);
}

/// Names a file the process holds (a clean's lock file) for [`remove_temporaries`] to remove
/// when the process ends at once, until [`keep_at_exit`]: a lock file is removed on every
/// ending that runs code.
pub(crate) fn remove_at_exit(path: &Path) {
    lock(&TEMPORARIES).push(path.to_path_buf());
}

/// The file named by [`remove_at_exit`] is its holder's to remove again.
pub(crate) fn keep_at_exit(path: &Path) {
    forget(path);
}

/// Removes every temporary file that still exists by name: a signal is ending the process.
pub(crate) fn remove_temporaries() {
    for path in lock(&TEMPORARIES).drain(..) {
        let _ = fs::remove_file(path);
    }
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
                let file = match open_stream(&at, id) {
                    Ok(file) => file,
                    Err(Opened::Changed) => {
                        return Err(refused(
                            what,
                            path,
                            "was replaced by another file while it was being opened",
                        ));
                    }
                    Err(Opened::Failed(e)) => return Err(failed(e).into()),
                };
                let regular = file.metadata().is_ok_and(|m| m.is_file());
                Ok(Output { out: BufWriter::new(file), mode: OutputMode::Stream { regular } })
            }
            Found::Replace(existing) => {
                let held = match existing {
                    Some((id, _)) => {
                        held_unless_appended(&place, id, spare).map_err(|why| refused(what, path, &why))?
                    }
                    None => None,
                };
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
            OutputMode::Stream { regular } => {
                if regular {
                    file.sync_all()?;
                }
                Ok(())
            }
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
    match Place::open(path) {
        Ok(place) => Ok(place),
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
            Err(Ok(refused(what, path, "is a directory, not a file")))
        }
        Err(e) => match untrusted(&e) {
            Some(why) => Err(Ok(refused(what, path, &why))),
            None => Err(Err(e)),
        },
    }
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
            let dir = parent(path).unwrap_or(Path::new("."));
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

/// Refuses (exit 2) a file [`AppendLines::open`] would refuse as it is now (a symlink, not a
/// regular file, other hard links, another user's), before anything is opened for writing:
/// for a check before the database is opened. The open itself decides again, on what it
/// opens.
pub(crate) fn check_append(label: &str, path: &Path) -> Result<()> {
    let refuse = |why: &str| -> anyhow::Error {
        Error::Usage(format!("{}: {why}; nothing was written or deleted", target(label, path))).into()
    };
    let place = match Place::open(path) {
        Ok(place) => place,
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
            return Err(refuse("is a directory, not a file"));
        }
        Err(e) => return untrusted(&e).map_or(Ok(()), |why| Err(refuse(&why))),
    };
    match place.entry() {
        Ok(Some(entry)) if entry.kind() == rustix::fs::FileType::Symlink => Err(refuse(SYMLINK_REFUSAL)),
        Ok(Some(entry)) => refuse_appending(&entry.stat).map_err(|why| refuse(&why)),
        _ => Ok(()),
    }
}

/// Refuses (exit 2) two paths of one run that are the same file, however spelt (a symlink,
/// a hard link, `x/../`, a name that does not exist yet): one would destroy the other (a
/// metrics file renamed over the archive the run just appended to). `what` names each flag.
pub(crate) fn refuse_same(one: (&str, &Path), other: (&str, &Path)) -> Result<()> {
    if same_file(one.1, other.1) || same_file(other.1, one.1) {
        return Err(Error::Usage(format!(
            "{} {} and {} {} are the same file; give each its own (nothing was written)",
            one.0,
            one.1.display(),
            other.0,
            other.1.display()
        ))
        .into());
    }
    Ok(())
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

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
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
fn target(label: &str, path: &Path) -> String {
    if label.is_empty() { path.display().to_string() } else { format!("{label} {}", path.display()) }
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
fn first_line_is(file: &File, len: u64, kind: &LineKind) -> bool {
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
        let place = match Place::open(path) {
            Ok(place) => place,
            Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
                return Err(refuse("is a directory, not a file".into()));
            }
            Err(e) => return Err(untrusted(&e).map_or_else(|| failed(e).into(), refuse)),
        };
        let (file, created) = open_appended(&place).map_err(|e| match e.raw_os_error() {
            Some(errno::LOOP) => refuse(SYMLINK_REFUSAL.to_string()),
            _ => failed(e).into(),
        })?;
        let stat = rustix::fs::fstat(&file).map_err(|e| failed(e.into()))?;
        refuse_appending(&stat).map_err(refuse)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Busy(format!(
                    "{}: another state-store run is writing it; nothing was deleted",
                    shown()
                ))
                .into());
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(failed(e).into()),
        }
        if created {
            place.sync();
        }
        let mut lines = AppendLines { file, committed: 0, held: Vec::new(), id: id_of(&stat), place };
        let tail = match lines.repair(kind).map_err(failed)? {
            Ok(tail) => tail,
            Err(why) => return Err(refuse(why)),
        };
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
            let last_start = line_start_before(&self.file, end - 1)?;
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
    fn spill(&mut self) -> io::Result<()> {
        if let Err(e) = self.file.write_all(&self.held) {
            self.rollback();
            return Err(e);
        }
        self.held.clear();
        Ok(())
    }

    /// Makes the lines written since the last commit durable; on failure they are cut off,
    /// and the file ends where it did after the last commit.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
        self.spill()?;
        if let Err(e) = self.file.sync_all() {
            self.rollback();
            return Err(e);
        }
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

/// Where the line that holds the byte at `last` (its newline) starts.
fn line_start_before(file: &File, last: u64) -> io::Result<u64> {
    last_line_end(file, last)
}

/// A private copy of a stream (stdin), readable from the start as many times as needed. The
/// file has no name (`O_TMPFILE`; where the file system cannot, it is created 0600 with
/// `O_EXCL | O_NOFOLLOW` and unlinked at once), so no other user can open it and no exit, not
/// even `kill -9`, leaves it behind.
pub(crate) struct Spool {
    file: File,
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
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(flags::TMPFILE | flags::CLOEXEC)
        .open(dir);
    match opened {
        // No O_TMPFILE in this kernel or file system.
        Err(e) if matches!(e.raw_os_error(), Some(errno::OPNOTSUPP | errno::ISDIR | errno::INVAL)) => {
            let (file, temporary) = Temporary::create(dir, "state-store-spool")?;
            drop(temporary);
            Ok(file)
        }
        other => other,
    }
}

/// The largest file read whole: a configuration file, a CA bundle, a password or service file.
/// Airflow's generated `airflow.cfg` is about 100 KB and a system's CA bundle about 200 KB.
pub(crate) const MAX_READ: u64 = 16 << 20;

/// Reads a whole file the user or the environment named, within bounds: it must be a regular
/// file (a FIFO would block the open and the read, a device such as `/dev/zero` never ends)
/// of at most [`MAX_READ`] bytes. A symlink is followed: reading through one writes nothing,
/// and configuration is often mounted so (a Kubernetes ConfigMap).
pub(crate) fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new().read(true).custom_flags(flags::NONBLOCK | flags::CLOEXEC).open(path)?;
    let meta = file.metadata()?;
    read_whole(file, meta.is_file(), meta.len())
}

/// The bytes of an opened file, within [`MAX_READ`], when `fstat` said it is a regular file.
fn read_whole(file: File, regular: bool, len: u64) -> io::Result<Vec<u8>> {
    if !regular {
        return Err(not_regular());
    }
    let too_large =
        || io::Error::new(io::ErrorKind::FileTooLarge, format!("it is larger than {} MiB", MAX_READ >> 20));
    if len > MAX_READ {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_READ + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_READ {
        return Err(too_large());
    }
    Ok(bytes)
}

fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "it is not a regular file")
}

/// The owner and permission bits of a file or directory, from `fstat` of a descriptor of it,
/// and the path it was reached by (for messages only: nothing is decided by the path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) path: PathBuf,
    pub(crate) uid: u32,
    /// The permission bits, sticky bit included (`st_mode & 0o7777`).
    pub(crate) mode: u32,
}

impl Holder {
    fn of(path: PathBuf, stat: &rustix::fs::Stat) -> Holder {
        Holder { path, uid: stat.st_uid, mode: stat.st_mode & 0o7777 }
    }
}

/// A file read by [`read_with_holders`], and who could have chosen what it holds.
#[derive(Debug)]
pub(crate) struct ReadFile {
    pub(crate) bytes: Vec<u8>,
    /// The file, by `fstat` of the very descriptor the bytes were read from.
    pub(crate) file: Holder,
    /// Each directory that held a name on the way to the file, by `fstat` of the directory
    /// descriptor that name was opened in: the directory of the path given, then that of
    /// each symlink's target. Whoever can write one of them can put another file at the name.
    pub(crate) dirs: Vec<Holder>,
}

/// [`read_bounded`] for a file whose writer matters (a configuration file whose `_cmd`
/// options run commands): the same bounds, and besides the bytes, who owns and who can write
/// the file and every directory that held a name on the way to it: the file's own, each
/// symlink target's, and each directory a symlink on the way was followed in ([`walk`], which
/// here follows another user's symlinks too: a plain value may still be read from where they
/// lead, and the judgement sees who could have chosen it). The directory of `path`
/// is opened once, each name is looked at without following it (`O_PATH | O_NOFOLLOW`) and
/// then opened relative to that descriptor with `O_NOFOLLOW | O_NONBLOCK`; a symlink is
/// followed by reading it from its own descriptor and opening its target's directory
/// relative to the link's. So every owner reported is that of a descriptor actually used, and
/// the bytes come from the descriptor whose `fstat` is reported: another user who swaps a
/// name between the look and the read makes the read fail or reports their own ownership.
pub(crate) fn read_with_holders(path: &Path) -> io::Result<ReadFile> {
    use rustix::fs::{FileType, OFlags};
    let mut dirs = Vec::new();
    let mut at = Place::open_walking(path, Strangers::Record(&mut dirs))?;
    let mut dir_shown = parent(path).unwrap_or(Path::new(".")).to_path_buf();
    let mut file_shown = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        dirs.push(Holder::of(dir_shown.clone(), &rustix::fs::fstat(&at.dir)?));
        let entry = at.entry()?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        match entry.kind() {
            // A descriptor of this process in /proc: the kernel's own link, opened below.
            FileType::Symlink if !at.in_proc() => {
                let target = rustix::fs::readlinkat(&entry.fd, "", Vec::new())?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                let target_dir = match target.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => Path::new("."),
                };
                // (`components` drops the `.` a bare name's directory adds.)
                dir_shown = dir_shown.join(target_dir).components().collect();
                file_shown = dir_shown.join(target.file_name().unwrap_or_default());
                at = at.open_at(&target, Strangers::Record(&mut dirs))?;
            }
            FileType::RegularFile | FileType::Symlink => {
                let file = at.open_file(OFlags::RDONLY, 0)?;
                let stat = rustix::fs::fstat(&file)?;
                let regular = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile;
                let len = u64::try_from(stat.st_size).unwrap_or(0);
                let bytes = read_whole(file, regular, len)?;
                return Ok(ReadFile { bytes, file: Holder::of(file_shown, &stat), dirs });
            }
            // Not opened at all: a FIFO would wait for a writer, a device might act.
            _ => return Err(not_regular()),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// What [`open_lock`] found at a lock file's name.
#[derive(Debug)]
pub(crate) enum LockFile {
    /// The file, opened read-only (created if no file had the name).
    Opened(File),
    /// A regular file this process may not open: another user's, left by a run of theirs.
    Denied(Denied),
}

/// A lock file another user left, as `fstat` of an `O_PATH` descriptor of it shows it.
#[derive(Debug)]
pub(crate) struct Denied {
    /// Its device and inode.
    pub(crate) id: Id,
    /// Its owner.
    pub(crate) uid: u32,
}

/// Opens (creating it if needed) a lock file, read-only: `flock` needs no more. Created with
/// `O_EXCL | O_NOFOLLOW` at mode 0600, so no other user can open it, and so none can `flock`
/// it and hold a run off; never opened through a symlink (a planted one would make a root run
/// create or open its target); never a FIFO or a device (`O_NONBLOCK`, then refused by
/// `fstat`: a FIFO would block the open). A file this process may not open (another user's,
/// a root run's that died, say) is [`LockFile::Denied`]: whether it may be taken over is the
/// caller's to decide, from [`flock_holder`], and [`set_aside`] to do.
pub(crate) fn open_lock(path: &Path) -> io::Result<LockFile> {
    use rustix::fs::OFlags;
    let place = Place::open(path)?;
    let file = loop {
        match place.open_file(OFlags::RDONLY, 0) {
            Ok(file) => break file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match place.open_file(OFlags::RDONLY | OFlags::CREATE | OFlags::EXCL, 0o600) {
                    Ok(file) => break file,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => match place.entry()? {
                Some(entry) if entry.kind() == rustix::fs::FileType::RegularFile => {
                    return Ok(LockFile::Denied(Denied { id: id_of(&entry.stat), uid: entry.stat.st_uid }));
                }
                Some(_) => return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")),
                // Gone meanwhile: open or create it again.
                None => {}
            },
            Err(e) => return Err(e),
        }
    };
    let stat = rustix::fs::fstat(&file)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(LockFile::Opened(file))
}

/// The kernel's table of file locks.
const PROC_LOCKS: &str = "/proc/locks";

/// The process that holds a `flock` lock on the file with identity `id`, as the kernel's
/// table of locks (`/proc/locks`, read within [`MAX_READ`]) shows it: `None` when none does.
/// An error when the table cannot be read (no `/proc`): then no one can tell.
pub(crate) fn flock_holder(id: Id) -> io::Result<Option<i64>> {
    let table = read_bounded(Path::new(PROC_LOCKS))?;
    Ok(flock_holder_in(&String::from_utf8_lossy(&table), id))
}

/// [`flock_holder`] in the text of `/proc/locks`: lines such as
/// `3: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF` (its pid, then the device as hexadecimal
/// major and minor, and the inode); a line with `->` is a process waiting for the lock, not
/// holding it. A lock is matched by its inode alone when no line has the device too: on
/// overlayfs and btrfs `stat` shows another device than the kernel's table does, and a
/// holder missed there would let a run take over a held lock, where a file of another file
/// system with the same inode only makes a run wait for the next night.
fn flock_holder_in(table: &str, id: Id) -> Option<i64> {
    let (major, minor) = (rustix::fs::major(id.0), rustix::fs::minor(id.0));
    let mut by_inode = None;
    for line in table.lines() {
        let mut fields = line.split_whitespace().skip(1);
        if fields.next() != Some("FLOCK") {
            continue;
        }
        let (Some(pid), Some(file)) = (fields.nth(2), fields.next()) else { continue };
        let mut parts = file.split(':');
        let (Some(maj), Some(min), Some(ino)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Ok(pid) = pid.parse::<i64>() else { continue };
        if ino.parse::<u64>().ok() != Some(id.1) {
            continue;
        }
        let same_device = u32::from_str_radix(maj, 16).ok() == Some(major)
            && u32::from_str_radix(min, 16).ok() == Some(minor);
        if same_device {
            return Some(pid);
        }
        by_inode = by_inode.or(Some(pid));
    }
    by_inode
}

/// A lock file renamed away from its name to a random name beside it (`.NAME.RANDOM.aside`),
/// by [`set_aside`]: removed, or put back, by its taker.
pub(crate) struct SetAside {
    place: Place,
    side: OsString,
    /// The file renamed, as `fstat` of it under its side name shows it.
    pub(crate) id: Id,
    regular: bool,
}

/// Renames the file named `path` away to a random name in its directory (which needs write
/// on the directory, and, in a sticky one, owning the file or the directory: else
/// `PermissionDenied`), then looks at what was renamed: that is the file to decide on, whatever
/// the name held when it was last looked at. `None`: no file has the name any more.
pub(crate) fn set_aside(path: &Path) -> io::Result<Option<SetAside>> {
    let place = Place::open(path)?;
    let mut side = OsString::from(".");
    side.push(&place.name);
    side.push(format!(".{}.aside", random_name()));
    match rustix::fs::renameat_with(
        &place.dir,
        &place.name,
        &place.dir,
        &side,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let aside = Place { name: side.clone(), ..place.try_clone()? };
    let Some(entry) = aside.entry()? else { return Ok(None) };
    let regular = entry.kind() == rustix::fs::FileType::RegularFile;
    Ok(Some(SetAside { place, side, id: id_of(&entry.stat), regular }))
}

impl SetAside {
    /// Renames the file back to its name, unless another file has the name by now.
    pub(crate) fn put_back(self) -> io::Result<()> {
        let place = &self.place;
        rustix::fs::renameat_with(
            &place.dir,
            &self.side,
            &place.dir,
            &place.name,
            rustix::fs::RenameFlags::NOREPLACE,
        )?;
        place.sync();
        Ok(())
    }

    /// Removes the file; something else than a regular file is put back instead.
    pub(crate) fn remove(self) -> io::Result<()> {
        if !self.regular {
            return self.put_back();
        }
        rustix::fs::unlinkat(&self.place.dir, &self.side, rustix::fs::AtFlags::empty())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("state-store-fs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Lines such as `{1}`: a brace, digits, a brace.
    const BRACED: LineKind = LineKind {
        whole: |line| line.len() > 2 && line.starts_with(b"{") && line.ends_with(b"}"),
        start: b"{",
        name: "braced lines",
    };

    fn open_braced(path: &Path) -> Result<(AppendLines, Tail)> {
        AppendLines::open("--archive", "archive", path, &BRACED)
    }

    #[test]
    fn a_partial_last_line_is_cut_and_a_whole_one_completed() {
        let dir = temp_dir("tail");
        let path = dir.join("a.jsonl");
        fs::write(&path, b"{1}\n{2}\n{3").unwrap();
        let (mut lines, tail) = open_braced(&path).unwrap();
        assert_eq!(tail, Tail::Cut(2));
        lines.write_all(b"{4}\n").unwrap();
        lines.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{1}\n{2}\n{4}\n");
        // Lines written but not committed are cut off by a rollback.
        lines.write_all(b"{5}\n{6").unwrap();
        lines.spill().unwrap();
        lines.rollback();
        assert_eq!(fs::read(&path).unwrap(), b"{1}\n{2}\n{4}\n");
        drop(lines);
        fs::write(&path, b"{1}\n{2}").unwrap();
        let (_, tail) = open_braced(&path).unwrap();
        assert_eq!(tail, Tail::Completed);
        assert_eq!(fs::read(&path).unwrap(), b"{1}\n{2}\n");
        fs::write(&path, b"{no newline at all").unwrap();
        let (_, tail) = open_braced(&path).unwrap();
        assert_eq!(tail, Tail::Cut(18));
        assert_eq!(fs::read(&path).unwrap(), b"");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A file whose first or last whole line, or whose partial last line, is not of the kind
    /// (a configuration file linked or named there) is neither cut nor appended to.
    #[test]
    fn a_file_of_another_kind_is_never_cut_or_appended_to() {
        let dir = temp_dir("kind");
        let path = dir.join("a.jsonl");
        for text in [
            &b"line 1\nlast line without newline"[..],
            b"{1}\n{2}\nlast line without newline",
            b"[section]\n{1}\n",
            b"{1}\nkey = value\n",
            b"no newline at all",
        ] {
            fs::write(&path, text).unwrap();
            let err = open_braced(&path).err().unwrap().to_string();
            assert!(
                err.contains("is not a file of this kind") && err.contains("nothing was written"),
                "{err}"
            );
            assert_eq!(fs::read(&path).unwrap(), text);
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A symlink, a second hard link or a FIFO at the path is refused before anything is
    /// opened for writing: the file behind it is byte for byte as it was.
    #[test]
    fn symlinks_hard_links_and_fifos_are_never_appended_to() {
        let dir = temp_dir("planted");
        let precious = dir.join("precious.conf");
        let text = b"{1}\n{2}\n{partial";
        fs::write(&precious, text).unwrap();
        let link = dir.join("link.jsonl");
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        let hard = dir.join("hard.jsonl");
        fs::hard_link(&precious, &hard).unwrap();
        let fifo = dir.join("fifo.jsonl");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for (path, why) in [(&link, "symbolic link"), (&hard, "2 hard links"), (&fifo, "not a regular file")]
        {
            let err = open_braced(path).err().unwrap().to_string();
            assert!(err.contains(why), "{}: {err}", path.display());
            assert_eq!(fs::read(&precious).unwrap(), text);
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_appender_is_refused_while_the_first_holds_the_file() {
        let dir = temp_dir("busy");
        let path = dir.join("a.jsonl");
        let (_first, _) = open_braced(&path).unwrap();
        let err = open_braced(&path).err().unwrap();
        assert!(err.to_string().contains("another state-store run"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_replacement_is_atomic_keeps_the_mode_and_leaves_no_temporary() {
        let dir = temp_dir("replace");
        let path = dir.join("backup.jsonl");
        fs::write(&path, b"old\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let mut output = Output::create("--file", "", &path, 0o644, None).unwrap();
        output.write_all(b"new\n").unwrap();
        output.flush().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"old\n", "the old file stays until the commit");
        let temporary = names(&dir).into_iter().find(|n| n.ends_with(".tmp")).unwrap();
        let meta = fs::metadata(dir.join(&temporary)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{temporary}");
        output.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new\n");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(names(&dir), ["backup.jsonl"]);
        // Dropped before its commit: the old file is untouched and the temporary gone.
        let mut output = Output::create("--file", "", &path, 0o644, None).unwrap();
        output.write_all(b"partial").unwrap();
        drop(output);
        assert_eq!(fs::read(&path).unwrap(), b"new\n");
        assert_eq!(names(&dir), ["backup.jsonl"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_are_unpredictable_and_never_follow_a_symlink() {
        let a = random_name();
        let b = random_name();
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        let dir = temp_dir("lockfile");
        let victim = dir.join("victim");
        let link = dir.join("x.lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = open_lock(&link).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(errno::LOOP), "{err}");
        assert!(!victim.exists(), "the symlink's target is never created");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_file_is_0600_and_its_holder_is_found_in_proc_locks() {
        let dir = temp_dir("lockholder");
        let path = dir.join("x.lock");
        let LockFile::Opened(file) = open_lock(&path).unwrap() else { panic!("denied") };
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let stat = rustix::fs::fstat(&file).unwrap();
        assert_eq!(flock_holder(id_of(&stat)).unwrap(), None);
        file.lock().unwrap();
        assert_eq!(flock_holder(id_of(&stat)).unwrap(), Some(i64::from(std::process::id())));
        drop(file);
        assert_eq!(flock_holder(id_of(&stat)).unwrap(), None);
        let aside = set_aside(&path).unwrap().unwrap();
        assert_eq!(aside.id, id_of(&stat));
        assert!(!path.exists());
        aside.put_back().unwrap();
        assert!(path.exists());
        set_aside(&path).unwrap().unwrap().remove().unwrap();
        assert_eq!(names(&dir), Vec::<String>::new());
        assert!(set_aside(&path).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn proc_locks_lines_name_the_holder_not_a_waiter() {
        let dev = rustix::fs::makedev(8, 1);
        let table = "1: POSIX  ADVISORY  WRITE 11 08:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 22 00:2a:77 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 33 08:01:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 44 08:01:77 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 55 08:01:78 0 EOF\n";
        assert_eq!(flock_holder_in(table, (dev, 77)), Some(44), "the same device first");
        assert_eq!(flock_holder_in(table, (rustix::fs::makedev(9, 9), 77)), Some(22), "else the inode");
        assert_eq!(flock_holder_in(table, (dev, 79)), None);
        assert_eq!(flock_holder_in("garbage\n\n1: FLOCK\n", (dev, 77)), None);
    }

    #[test]
    fn a_spool_has_no_name_and_reads_from_the_start_each_time() {
        let spool = spool("stdin", &b"line 1\nline 2\n"[..]).unwrap();
        for _ in 0..2 {
            let mut text = String::new();
            spool.reader().unwrap().read_to_string(&mut text).unwrap();
            assert_eq!(text, "line 1\nline 2\n");
        }
        let meta = spool.file.metadata().unwrap();
        assert_eq!(meta.nlink(), 0, "no name in any directory");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn the_database_and_its_files_are_refused_however_they_are_spelt() {
        let dir = temp_dir("guard");
        let db = dir.join("guarded.db");
        fs::write(&db, b"").unwrap();
        fs::create_dir(dir.join("x")).unwrap();
        protect_database(&db);
        let link = dir.join("link");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let hard = dir.join("hard");
        fs::hard_link(&db, &hard).unwrap();
        for spelt in [db.clone(), dir.join("x/../guarded.db"), link, hard, dir.join("guarded.db-wal")] {
            let err = refuse_database("--file", &spelt).unwrap_err();
            assert!(err.to_string().contains("refusing to write over it"), "{}: {err}", spelt.display());
        }
        let dangling = dir.join("to-journal");
        std::os::unix::fs::symlink(dir.join("guarded.db-journal"), &dangling).unwrap();
        assert!(refuse_database("--archive", &dangling).is_err(), "a dangling link to a journal");
        assert!(refuse_database("--file", &dir.join("guarded.db.bak")).is_ok());
        assert!(refuse_database("--file", &dir.join("x/guarded.db")).is_ok());
        lock(&DATABASES).retain(|p| p.shown != db);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_read_for_its_holders_reports_each_directory_on_the_way() {
        let dir = temp_dir("holders");
        let conf = dir.join("conf");
        fs::create_dir(&conf).unwrap();
        fs::set_permissions(&conf, fs::Permissions::from_mode(0o750)).unwrap();
        let file = conf.join("airflow.cfg");
        fs::write(&file, b"[core]\n").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let read = read_with_holders(&file).unwrap();
        assert_eq!(read.bytes, b"[core]\n");
        assert_eq!(read.file, Holder { path: file.clone(), uid, mode: 0o640 });
        assert_eq!(read.dirs, vec![Holder { path: conf.clone(), uid, mode: 0o750 }]);
        // Through a relative link in another directory: both directories are reported, the
        // mode is the file's, not the link's.
        let link = dir.join("airflow.cfg");
        std::os::unix::fs::symlink("conf/airflow.cfg", &link).unwrap();
        let read = read_with_holders(&link).unwrap();
        assert_eq!(read.file.mode, 0o640);
        assert_eq!(read.file.path, dir.join("./conf/airflow.cfg"));
        let dir_mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            read.dirs,
            vec![
                Holder { path: dir.clone(), uid, mode: dir_mode },
                Holder { path: dir.join("conf"), uid, mode: 0o750 }
            ]
        );
        // A FIFO is refused without blocking; a directory, a missing file and a loop are errors.
        let fifo = dir.join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert_eq!(read_with_holders(&fifo).unwrap_err().to_string(), "it is not a regular file");
        assert!(read_with_holders(&conf).is_err());
        assert_eq!(read_with_holders(&dir.join("none")).unwrap_err().kind(), io::ErrorKind::NotFound);
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        assert!(read_with_holders(&dir.join("loop")).unwrap_err().to_string().contains("symbolic links"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
