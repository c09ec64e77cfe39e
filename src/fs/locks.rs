//! Lock files: opened safely, their holders found, and taken over by renaming them away.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::Path;

use super::place::Place;
use super::read::read_bounded;
use super::{Id, id_of, random_name};

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
pub(super) fn flock_holder_in(table: &str, id: Id) -> Option<i64> {
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
    match rename_no_replace(&place, &place.name, &side) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let aside = Place { name: side.clone(), ..place.try_clone()? };
    let Some(entry) = aside.entry()? else { return Ok(None) };
    let regular = entry.kind() == rustix::fs::FileType::RegularFile;
    Ok(Some(SetAside { place, side, id: id_of(&entry.stat), regular }))
}

/// Renames `from` to `to` in the directory of `place`, unless a file has the name `to`.
fn rename_no_replace(place: &Place, from: &OsStr, to: &OsStr) -> rustix::io::Result<()> {
    rustix::fs::renameat_with(&place.dir, from, &place.dir, to, rustix::fs::RenameFlags::NOREPLACE)
}

impl SetAside {
    /// Renames the file back to its name, unless another file has the name by now.
    pub(crate) fn put_back(self) -> io::Result<()> {
        let place = &self.place;
        rename_no_replace(place, &self.side, &place.name)?;
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
