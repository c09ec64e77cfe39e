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

mod append;
mod checks;
mod locks;
mod output;
mod place;
mod read;
mod temp;

use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use append::{AppendLines, LineKind, Tail, check_append};
pub(crate) use checks::{protect_database, refuse_database, refuse_same};
pub(crate) use locks::{Denied, LockFile, flock_holder, open_lock, set_aside};
pub(crate) use output::{Accepts, Output, check_output, default_mode, replace};
pub(crate) use read::{Holder, ReadFile, read_bounded, read_with_holders};
pub(crate) use temp::{Spool, keep_at_exit, remove_at_exit, remove_temporaries, spool};

/// The error numbers this module tells apart, as `io::Error::raw_os_error` gives them.
mod errno {
    use rustix::io::Errno;
    pub(super) const NXIO: i32 = Errno::NXIO.raw_os_error();
    pub(super) const LOOP: i32 = Errno::LOOP.raw_os_error();
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The directory a path's last component is in; `.` for a bare name.
fn parent(path: &Path) -> Option<&Path> {
    match path.parent() {
        Some(dir) if dir.as_os_str().is_empty() => Some(Path::new(".")),
        other => other,
    }
}

/// The directory a path's last component is in: `.` for a bare name, or a path with none.
fn dir_of(path: &Path) -> &Path {
    parent(path).unwrap_or(Path::new("."))
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

/// Linux's own limit of symlinks followed in one lookup.
const MAX_LINKS: usize = 40;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::checks::DATABASES;
    use super::locks::flock_holder_in;
    use super::*;
    use crate::error::Result;
    use std::fs;
    use std::io::{self, Read, Write};
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

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
        // Where the table's devices differ from `stat`'s, a lock is matched by inode alone, so
        // another process's lock of a file with the same inode on another file system may
        // answer: what is checked is that this process is the holder only while it holds it.
        let me = Some(i64::from(std::process::id()));
        assert_ne!(flock_holder(id_of(&stat)).unwrap(), me);
        file.lock().unwrap();
        assert_eq!(flock_holder(id_of(&stat)).unwrap(), me);
        drop(file);
        assert_ne!(flock_holder(id_of(&stat)).unwrap(), me);
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
