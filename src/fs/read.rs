//! Files read whole within bounds, and who could have chosen what they hold.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::place::{Place, Strangers};
use super::{MAX_LINKS, dir_of};

/// The largest file read whole: a configuration file, a CA bundle, a password or service file.
/// Airflow's generated `airflow.cfg` is about 100 KB and a system's CA bundle about 200 KB.
pub(crate) const MAX_READ: u64 = 16 << 20;

/// Reads a whole file the user or the environment named, within bounds: it must be a regular
/// file (a FIFO would block the open and the read, a device such as `/dev/zero` never ends)
/// of at most [`MAX_READ`] bytes. A symlink is followed: reading through one writes nothing,
/// and configuration is often mounted so (a Kubernetes ConfigMap).
pub(crate) fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
    let file = File::from(fd);
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
    pub(super) fn of(path: PathBuf, stat: &rustix::fs::Stat) -> Holder {
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
    let mut dir_shown = dir_of(path).to_path_buf();
    let mut file_shown = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        dirs.push(Holder::of(dir_shown.clone(), &rustix::fs::fstat(&at.dir)?));
        let entry = at.entry()?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        match entry.kind() {
            // A descriptor of this process in /proc: the kernel's own link, opened below.
            FileType::Symlink if !at.in_proc() => {
                let target = rustix::fs::readlinkat(&entry.fd, "", Vec::new())?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                // (`components` drops the `.` a bare name's directory adds.)
                dir_shown = dir_shown.join(dir_of(&target)).components().collect();
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
