//! Checks by name that refuse an output before anything is opened: an open database, or
//! two outputs of one run that are the same file.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{MAX_LINKS, lock, parent};
use crate::error::{Error, Result};

/// The files SQLite keeps beside a database, by the suffix of their names.
const DATABASE_FILES: &[(&str, &str)] = &[
    ("", "the SQLite database"),
    ("-wal", "the -wal file of the SQLite database"),
    ("-shm", "the -shm file of the SQLite database"),
    ("-journal", "the -journal file of the SQLite database"),
];

/// A database file a command opened: its directory (as given and resolved) and its name.
pub(super) struct Protected {
    pub(super) shown: PathBuf,
    places: Vec<(PathBuf, OsString)>,
}

pub(super) static DATABASES: Mutex<Vec<Protected>> = Mutex::new(Vec::new());

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
                    anyhow::bail!(Error::Usage(format!(
                        "{what} {}: is {part} {} this command has open; refusing to write over it \
                         (nothing was written)",
                        path.display(),
                        database.shown.display()
                    )));
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
    if let (Ok(out), Ok(f)) = (fs::metadata(output), fs::metadata(file)) {
        return id(&out) == id(&f);
    }
    let place = |p: &Path| -> Option<((u64, u64), OsString)> {
        let dir = fs::metadata(parent(p)?).ok()?;
        Some((id(&dir), p.file_name()?.to_os_string()))
    };
    let Some(target) = place(file) else { return false };
    std::iter::once(output.to_path_buf())
        .chain(follow(output))
        .any(|c| place(&c).is_some_and(|p| p == target))
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

/// Refuses (exit 2) two paths of one run that are the same file, however spelt (a symlink,
/// a hard link, `x/../`, a name that does not exist yet): one would destroy the other (a
/// metrics file renamed over the archive the run just appended to). `what` names each flag.
pub(crate) fn refuse_same(one: (&str, &Path), other: (&str, &Path)) -> Result<()> {
    if same_file(one.1, other.1) || same_file(other.1, one.1) {
        anyhow::bail!(Error::Usage(format!(
            "{} {} and {} {} are the same file; give each its own (nothing was written)",
            one.0,
            one.1.display(),
            other.0,
            other.1.display()
        )));
    }
    Ok(())
}
