//! A path's directory, walked to and opened once, and what its name is by `fstat`.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::read::Holder;
use super::{Id, MAX_LINKS, dir_of, id_of, is_ours};

/// The directory of an output, opened once, and the output's name in it. Everything the
/// tool then does to that name (opening it, creating a temporary beside it, renaming that
/// over it, checking it still names the file being appended to) is relative to this
/// descriptor, so a directory on the way that another user renames or swaps for a symlink
/// after this open cannot redirect the write.
pub(crate) struct Place {
    pub(super) dir: std::os::fd::OwnedFd,
    /// Whether `dir` is readable, and so can be fsynced after a rename (a directory that is
    /// only searchable is opened as a path).
    pub(super) syncable: bool,
    pub(super) name: OsString,
    pub(super) shown: PathBuf,
}

impl Place {
    /// Opens the directory of an output's `path`, one component at a time ([`walk`]): a
    /// symlink another user could have planted on the way is refused.
    pub(crate) fn open(path: &Path) -> io::Result<Place> {
        Place::open_walking(path, Strangers::Refuse)
    }

    /// [`Place::open`] for an output: `Err(Ok(why))` when the path is refused (it names a
    /// directory, or a symlink on the way is another user's), `Err(Err(e))` when the directory
    /// cannot be opened.
    pub(super) fn open_output(path: &Path) -> Result<Place, Result<String, io::Error>> {
        Place::open(path).map_err(|e| match untrusted(&e) {
            _ if e.kind() == io::ErrorKind::IsADirectory => Ok("is a directory, not a file".to_string()),
            Some(why) => Ok(why),
            None => Err(e),
        })
    }

    pub(super) fn open_walking(path: &Path, strangers: Strangers<'_>) -> io::Result<Place> {
        let name = match path.file_name() {
            Some(name) if !path.as_os_str().as_encoded_bytes().ends_with(b"/") => name.to_os_string(),
            _ => return Err(io::Error::from(io::ErrorKind::IsADirectory)),
        };
        let (dir, syncable) = walk(None, dir_of(path), strangers)?;
        Ok(Place { dir, syncable, name, shown: path.to_path_buf() })
    }

    pub(super) fn try_clone(&self) -> io::Result<Place> {
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
    pub(super) fn open_at(&self, target: &Path, strangers: Strangers<'_>) -> io::Result<Place> {
        let name = target.file_name().ok_or_else(|| io::Error::from(io::ErrorKind::IsADirectory))?;
        let (dir, syncable) = walk(Some(self), dir_of(target), strangers)?;
        Ok(Place { dir, syncable, name: name.to_os_string(), shown: self.shown.clone() })
    }

    /// What the name is now, from `fstat` of a descriptor of it opened with `O_PATH |
    /// O_NOFOLLOW`: no permission is needed, nothing is followed, and a FIFO or a device is
    /// not opened for reading or writing (so nothing blocks and no device acts). `None`: no
    /// file has the name.
    pub(super) fn entry(&self) -> io::Result<Option<Entry>> {
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(Entry { stat: rustix::fs::fstat(&fd)?, fd })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the name is in `/proc` (`/dev/stdout` leads to `/proc/self/fd/1`): a
    /// descriptor of this process, which the kernel resolves and a rename cannot replace.
    pub(super) fn in_proc(&self) -> bool {
        rustix::fs::fstatfs(&self.dir).is_ok_and(|fs| fs.f_type == rustix::fs::PROC_SUPER_MAGIC)
    }

    /// Opens the name with `flags`, never through a symlink (in `/proc`, through the
    /// kernel's own link to a descriptor of this process only), and never blocking.
    pub(super) fn open_file(&self, flags: rustix::fs::OFlags, mode: u32) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        let follow = if self.in_proc() { OFlags::empty() } else { OFlags::NOFOLLOW };
        let flags = flags | follow | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        Ok(File::from(rustix::fs::openat(&self.dir, &self.name, flags, Mode::from_raw_mode(mode))?))
    }

    /// Whether the name still names the file with identity `id` (a file appended to: not
    /// unlinked, not replaced by a rename).
    pub(super) fn names(&self, id: Id) -> bool {
        rustix::fs::statat(&self.dir, &self.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| id_of(&stat) == id)
    }

    /// Makes a rename or a new name in the directory durable. Some file systems cannot fsync
    /// a directory; the data itself is on disk already, so that is not an error.
    pub(super) fn sync(&self) {
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
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UntrustedLink(String);

/// Why a path is refused, when an open failed on an [`UntrustedLink`].
fn untrusted(e: &io::Error) -> Option<String> {
    e.get_ref()?.downcast_ref::<UntrustedLink>().map(|link| link.0.clone())
}

/// What [`walk`] does with a symlink on the way that another user could have planted (one
/// that is neither root's nor this user's, in a directory other users can write).
pub(super) enum Strangers<'a> {
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
        Some(place) => {
            (rustix::fs::openat(&place.dir, ".", look, Mode::empty())?, dir_of(&place.shown).to_path_buf())
        }
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
            _ => return Err(rustix::io::Errno::NOTDIR.into()),
        }
    }
    match rustix::fs::openat(&at, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(dir) => Ok((dir, true)),
        Err(rustix::io::Errno::ACCESS) => Ok((at, false)),
        Err(e) => Err(e.into()),
    }
}

/// A name's file as [`Place::entry`] found it: the descriptor and its `fstat`.
pub(super) struct Entry {
    pub(super) fd: std::os::fd::OwnedFd,
    pub(super) stat: rustix::fs::Stat,
}

impl Entry {
    pub(super) fn kind(&self) -> rustix::fs::FileType {
        rustix::fs::FileType::from_raw_mode(self.stat.st_mode)
    }
}
