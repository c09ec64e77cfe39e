//! Whether a config file may run commands. A `_cmd` option runs its command as the run's
//! user, so it is taken only from a file that no other user could have chosen: the file, and
//! every directory that held a name on the way to it, must be owned by root, by the run's
//! effective user or by an owner `STATE_STORE_TRUSTED_CONFIG_OWNERS` names, and the file
//! must be writable by its owner only, each directory too unless it is sticky (as `/tmp` is:
//! there no one else can rename or remove the file). It is the rule OpenSSH applies to a key
//! file and git, since CVE-2022-24765, to a repository another user owns; without it, root's
//! cron over the airflow user's home would run whatever that user writes into `airflow.cfg`.
//!
//! Everything is judged from `fstat` of the descriptors the file was read through
//! ([`crate::fs::read_with_holders`]), never from a name. A file that is not trusted is still
//! read for its plain values (the caller warns once); only its `_cmd` options are refused.
//! With a POSIX ACL the group bits are the ACL's mask, so a write granted to a named user or
//! group shows as group-writable and is refused too.

use super::*;
use crate::fs::{Holder, ReadFile};

/// The variable that names the further owners whose config files may run commands.
pub(crate) const TRUSTED_OWNERS_VAR: &str = "STATE_STORE_TRUSTED_CONFIG_OWNERS";

/// The owners whose config files may run commands: root, the run's effective user, and the
/// uids `STATE_STORE_TRUSTED_CONFIG_OWNERS` names. Nothing else is trusted by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trust {
    euid: u32,
    named: Vec<u32>,
}

impl Trust {
    pub(super) fn new(euid: u32, named: Vec<u32>) -> Trust {
        Trust { euid, named }
    }

    /// The run's trust: its effective user, and the owners the variable names, each a user
    /// name from the account database or a uid, comma-separated. A name that is no account is
    /// refused by name rather than skipped: a typo would otherwise refuse the very file it was
    /// meant to allow, with a message that blames the file.
    pub(super) fn from_env(vars: &Vars<'_>) -> Result<Trust, ConfigError> {
        let euid = rustix::process::geteuid().as_raw();
        let value = vars.get(TRUSTED_OWNERS_VAR);
        vars.check()?;
        let mut named = Vec::new();
        let mut accounts = None;
        for owner in value.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|o| !o.is_empty()) {
            let uid = match owner.parse::<u32>() {
                Ok(uid) if owner.bytes().all(|b| b.is_ascii_digit()) => uid,
                _ => {
                    let accounts = accounts.get_or_insert_with(read_accounts);
                    uid_of(accounts, owner).ok_or_else(|| ConfigError::Environment {
                        var: TRUSTED_OWNERS_VAR.to_owned(),
                        reason: format!(
                            "names {}, which is neither a uid nor a user in /etc/passwd; give user names or \
                             uids, comma-separated",
                            quote(owner)
                        ),
                    })?
                }
            };
            named.push(uid);
        }
        Ok(Trust::new(euid, named))
    }

    fn trusts(&self, uid: u32) -> bool {
        uid == 0 || uid == self.euid || self.named.contains(&uid)
    }

    /// `None` when the file may run commands, else who could have chosen what it holds.
    pub(super) fn judge(&self, read: &ReadFile) -> Option<Untrusted> {
        let untrusted = |problem| Some(Untrusted { file: read.file.clone(), problem });
        if !self.trusts(read.file.uid) {
            return untrusted(Problem::FileOwner);
        }
        if read.file.mode & 0o022 != 0 {
            return untrusted(Problem::FileWritable);
        }
        for dir in &read.dirs {
            if !self.trusts(dir.uid) {
                return untrusted(Problem::DirOwner(dir.clone()));
            }
            // Sticky: others may add names, but cannot rename or remove this one.
            if dir.mode & 0o022 != 0 && dir.mode & 0o1000 == 0 {
                return untrusted(Problem::DirWritable(dir.clone()));
            }
        }
        None
    }

    pub(super) fn euid(&self) -> u32 {
        self.euid
    }
}

/// What makes a config file untrusted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    /// The file's owner is not trusted.
    FileOwner,
    /// Group or others can write the file.
    FileWritable,
    /// A directory on the way is owned by someone not trusted.
    DirOwner(Holder),
    /// Group or others can write a directory on the way, which is not sticky.
    DirWritable(Holder),
}

/// A config file that may not run commands, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Untrusted {
    file: Holder,
    problem: Problem,
}

impl Untrusted {
    /// Who could have chosen the file's content: "a file that uid 1000 (airflow) owns".
    fn who(&self) -> String {
        let file = format!("a file that {} owns", owner(self.file.uid));
        match &self.problem {
            Problem::FileOwner => file,
            Problem::FileWritable => {
                format!("{file} and group or others can write (mode {:04o})", self.file.mode)
            }
            Problem::DirOwner(dir) => {
                format!("{file}, in {}, which {} owns", dir.path.display(), owner(dir.uid))
            }
            Problem::DirWritable(dir) => format!(
                "{file}, in {}, which group or others can write (mode {:04o}, no sticky bit)",
                dir.path.display(),
                dir.mode
            ),
        }
    }

    /// What would make the file trusted.
    fn remedy(&self) -> String {
        let trust = |uid| format!("to trust this owner, set {TRUSTED_OWNERS_VAR}={}", name_or_uid(uid));
        match &self.problem {
            Problem::FileOwner => trust(self.file.uid),
            Problem::DirOwner(dir) => trust(dir.uid),
            Problem::FileWritable => {
                format!("let only its owner write it (chmod go-w {})", self.file.path.display())
            }
            Problem::DirWritable(dir) => format!(
                "let only its owner write the directory (chmod go-w {}), or make it sticky",
                dir.path.display()
            ),
        }
    }

    /// The one line that refuses a `_cmd` option of the file.
    pub(super) fn refusal(&self, option: &str, location: &Source, euid: u32) -> String {
        format!(
            "{option} in {location} would run a command from {}; state-store runs a config file's _cmd \
             options only when root or the run's user (uid {euid}) owns the file and its directory and no other \
             user can write either; {}",
            self.who(),
            self.remedy()
        )
    }

    /// The one warning of a run that reads the file's plain values.
    pub(crate) fn warning(&self) -> String {
        format!(
            "{} is {}: its values are used, but none of its _cmd options will run; {}",
            self.file.path.display(),
            self.who(),
            self.remedy()
        )
    }
}

/// `uid 1000 (airflow)`, or `uid 1000` for a uid that has no name.
fn owner(uid: u32) -> String {
    name_of(&read_accounts(), uid).map_or_else(|| format!("uid {uid}"), |name| format!("uid {uid} ({name})"))
}

/// What to write into the variable for a uid: its name when it has one.
fn name_or_uid(uid: u32) -> String {
    name_of(&read_accounts(), uid).unwrap_or_else(|| uid.to_string())
}

/// The account database's users and uids, from `/etc/passwd` (what `getpwnam` reads on
/// ordinary systems; an account only a directory service knows is given by its uid). An
/// unreadable database has no names.
fn read_accounts() -> String {
    crate::fs::read_bounded(Path::new("/etc/passwd"))
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_default()
}

/// `name:password:uid:gid:gecos:home:shell` lines, as name and uid.
fn accounts(passwd: &str) -> impl Iterator<Item = (&str, u32)> {
    passwd.lines().filter_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let uid = fields.nth(1)?.parse().ok()?;
        (!name.is_empty()).then_some((name, uid))
    })
}

fn uid_of(passwd: &str, name: &str) -> Option<u32> {
    accounts(passwd).find(|(n, _)| *n == name).map(|(_, uid)| uid)
}

fn name_of(passwd: &str, uid: u32) -> Option<String> {
    accounts(passwd).find(|(_, u)| *u == uid).map(|(name, _)| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(path: &str, uid: u32, mode: u32) -> Holder {
        Holder { path: PathBuf::from(path), uid, mode }
    }

    fn read(file: Holder, dirs: Vec<Holder>) -> ReadFile {
        ReadFile { bytes: Vec::new(), file, dirs }
    }

    const RUN: u32 = 1000;
    const OTHER: u32 = 1001;

    #[test]
    fn root_and_the_run_s_user_are_trusted_and_others_only_when_named() {
        let trust = Trust::new(RUN, Vec::new());
        for uid in [0, RUN] {
            let file = read(holder("/c/airflow.cfg", uid, 0o644), vec![holder("/c", uid, 0o755)]);
            assert_eq!(trust.judge(&file), None, "{uid}");
        }
        let theirs = read(holder("/c/airflow.cfg", OTHER, 0o600), vec![holder("/c", 0, 0o755)]);
        assert_eq!(trust.judge(&theirs).map(|u| u.problem), Some(Problem::FileOwner));
        assert_eq!(Trust::new(RUN, vec![OTHER]).judge(&theirs), None);
        // The run's user is the effective one: root trusts the airflow user's files only when told.
        assert!(Trust::new(0, Vec::new()).judge(&read(holder("/c/a", RUN, 0o644), Vec::new())).is_some());
    }

    #[test]
    fn a_file_or_directory_others_can_write_is_not_trusted() {
        let trust = Trust::new(RUN, vec![OTHER]);
        for mode in [0o664, 0o646, 0o666, 0o620] {
            let file = read(holder("/c/airflow.cfg", 0, mode), vec![holder("/c", 0, 0o755)]);
            assert_eq!(trust.judge(&file).map(|u| u.problem), Some(Problem::FileWritable), "{mode:o}");
        }
        for mode in [0o775, 0o757, 0o777] {
            let dir = holder("/c", 0, mode);
            let file = read(holder("/c/airflow.cfg", 0, 0o644), vec![dir.clone()]);
            assert_eq!(trust.judge(&file).map(|u| u.problem), Some(Problem::DirWritable(dir)), "{mode:o}");
        }
        // A sticky directory: others cannot rename or remove a file they do not own.
        let sticky = read(holder("/tmp/airflow.cfg", RUN, 0o600), vec![holder("/tmp", 0, 0o1777)]);
        assert_eq!(trust.judge(&sticky), None);
        // Read-only for group and others, but executable or readable: fine.
        let fine = read(holder("/c/airflow.cfg", 0, 0o755), vec![holder("/c", RUN, 0o711)]);
        assert_eq!(trust.judge(&fine), None);
    }

    #[test]
    fn every_directory_on_the_way_is_judged() {
        let trust = Trust::new(RUN, Vec::new());
        // A link in a directory another user owns leads to a file root owns: that user
        // could point the link elsewhere.
        let link_dir = holder("/home/other", OTHER, 0o755);
        let file = read(
            holder("/etc/airflow/airflow.cfg", 0, 0o644),
            vec![link_dir.clone(), holder("/etc/airflow", 0, 0o755)],
        );
        assert_eq!(trust.judge(&file).map(|u| u.problem), Some(Problem::DirOwner(link_dir)));
        let fine = read(
            holder("/etc/airflow/..data/airflow.cfg", 0, 0o644),
            vec![holder("/etc/airflow", 0, 0o755), holder("/etc/airflow/..data", 0, 0o755)],
        );
        assert_eq!(trust.judge(&fine), None);
    }

    #[test]
    fn messages_name_the_option_the_file_and_its_owner() {
        let trust = Trust::new(0, Vec::new());
        let origin = Source::File { path: PathBuf::from("/opt/airflow/airflow.cfg"), line: Some(3) };
        let file = read(
            holder("/opt/airflow/airflow.cfg", 65534, 0o644),
            vec![holder("/opt/airflow", 65534, 0o755)],
        );
        let untrusted = trust.judge(&file).expect("untrusted");
        let line = untrusted.refusal("[database] sql_alchemy_conn_cmd", &origin, 0);
        let nobody = owner(65534);
        assert!(nobody.starts_with("uid 65534"), "{nobody}");
        assert!(
            line.starts_with(&format!(
                "[database] sql_alchemy_conn_cmd in /opt/airflow/airflow.cfg line 3 would run a command from \
                 a file that {nobody} owns; state-store runs a config file's _cmd options only when root or \
                 the run's user (uid 0) owns"
            )),
            "{line}"
        );
        assert!(
            line.ends_with(&format!("set STATE_STORE_TRUSTED_CONFIG_OWNERS={}", name_or_uid(65534))),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let warning = untrusted.warning();
        assert!(
            warning.starts_with(&format!(
                "/opt/airflow/airflow.cfg is a file that {nobody} owns: its values are used"
            )),
            "{warning}"
        );

        let writable = read(holder("/etc/airflow.cfg", 0, 0o666), vec![holder("/etc", 0, 0o755)]);
        let line =
            trust.judge(&writable).expect("untrusted").refusal("[core] sql_alchemy_conn_cmd", &origin, 0);
        assert!(
            line.contains("from a file that uid 0 (root) owns and group or others can write (mode 0666)"),
            "{line}"
        );
        assert!(line.ends_with("(chmod go-w /etc/airflow.cfg)"), "{line}");
        let in_shared = read(holder("/srv/x/airflow.cfg", 0, 0o644), vec![holder("/srv/x", 0, 0o777)]);
        let line = trust.judge(&in_shared).expect("untrusted").refusal("o", &origin, 0);
        assert!(
            line.contains("in /srv/x, which group or others can write (mode 0777, no sticky bit)"),
            "{line}"
        );
    }

    #[test]
    fn owners_are_names_or_uids() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\n# comment\nairflow:x:50000:0::/home/airflow:/bin/sh\n\nbad\n";
        assert_eq!(uid_of(passwd, "airflow"), Some(50000));
        assert_eq!(uid_of(passwd, "root"), Some(0));
        assert_eq!(uid_of(passwd, "air"), None);
        assert_eq!(name_of(passwd, 50000).as_deref(), Some("airflow"));
        assert_eq!(name_of(passwd, 7), None);

        let env = |value: &'static str| {
            move |name: &str| (name == TRUSTED_OWNERS_VAR).then(|| std::ffi::OsString::from(value))
        };
        let trust = |value: &'static str| {
            let env = env(value);
            Trust::from_env(&Vars::new(&env))
        };
        let euid = rustix::process::geteuid().as_raw();
        assert_eq!(trust(""), Ok(Trust::new(euid, Vec::new())));
        assert_eq!(trust(" 1234 , root,,"), Ok(Trust::new(euid, vec![1234, 0])));
        let e = trust("root,no-such-user-here").expect_err("unknown").to_string();
        assert_eq!(
            e,
            "environment variable STATE_STORE_TRUSTED_CONFIG_OWNERS names \"no-such-user-here\", which is \
             neither a uid nor a user in /etc/passwd; give user names or uids, comma-separated"
        );
        assert!(trust("+5").is_err(), "a uid is digits only");
        assert!(trust("99999999999").is_err(), "a uid fits in 32 bits");
        let none = |_: &str| None;
        assert_eq!(Trust::from_env(&Vars::new(&none)), Ok(Trust::new(euid, Vec::new())));
    }
}
