//! The Python built-ins Airflow's configuration goes through, emulated: `os.path.expandvars`
//! and `expanduser`, `shlex.split` and `subprocess` for `_cmd` options, and `int()`/`float()`.

use super::*;

/// The injected environment, guarded against names no environment can hold. A value that is
/// not UTF-8 reads as unset here, and is recorded: [`Vars::check`] then refuses it by name
/// (exit 3) before anything is decided on its absence.
pub(super) struct Vars<'a> {
    env: &'a dyn Fn(&str) -> Option<std::ffi::OsString>,
    refused: std::cell::RefCell<Option<String>>,
}

impl<'a> Vars<'a> {
    pub(super) fn new(env: &'a dyn Fn(&str) -> Option<std::ffi::OsString>) -> Vars<'a> {
        Vars { env, refused: std::cell::RefCell::new(None) }
    }

    /// A variable as text.
    pub(super) fn get(&self, name: &str) -> Option<String> {
        let value = self.raw(name)?.into_string();
        if value.is_err() {
            self.refused.borrow_mut().get_or_insert_with(|| name.to_owned());
        }
        value.ok()
    }

    /// A variable as bytes, for a value that is a path and nothing else.
    pub(super) fn raw(&self, name: &str) -> Option<std::ffi::OsString> {
        if name.is_empty() || name.contains(['=', '\0']) {
            return None;
        }
        (self.env)(name)
    }

    /// The first variable read so far whose value is not UTF-8, refused.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        self.refused.borrow().as_ref().map_or(Ok(()), |var| Err(ConfigError::NotUtf8 { var: var.clone() }))
    }
}

/// Expansion stops with an error past these: Python would loop forever or run out of memory on
/// a variable that contains itself.
pub(super) const MAX_EXPANSION_ROUNDS: usize = 64;

pub(super) const MAX_EXPANDED_LEN: usize = 1 << 20;

/// Airflow's `expand_env_var`: Python's `os.path.expandvars` then `os.path.expanduser`, again
/// and again until the text stops changing. `None` when it never settles.
pub(super) fn expand_env_var(value: &str, vars: &Vars<'_>) -> Option<String> {
    let mut current = value.to_owned();
    for _ in 0..MAX_EXPANSION_ROUNDS {
        let next = expand_user(&expand_vars(&current, vars), vars);
        if next == current {
            return Some(next);
        }
        if next.len() > MAX_EXPANDED_LEN {
            return None;
        }
        current = next;
    }
    None
}

/// `os.path.expandvars` (POSIX): `$name` (ASCII letters, digits, `_`) and `${anything}` are
/// replaced when the variable exists and left alone otherwise; replaced text is not rescanned.
pub(super) fn expand_vars(text: &str, vars: &Vars<'_>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let reference = if let Some(braced) = after.strip_prefix('{') {
            braced.find('}').map(|end| (&braced[..end], end + 2))
        } else {
            let len = after.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
            (len > 0).then(|| (&after[..len], len))
        };
        if let Some((name, len)) = reference {
            out.push_str(&vars.get(name).unwrap_or_else(|| rest[dollar..=dollar + len].to_owned()));
            rest = &after[len..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `os.path.expanduser` (POSIX): a leading `~` is `$HOME` (or the account's home directory
/// when HOME is unset), `~name` that user's home directory; unknown users are left alone.
pub(super) fn expand_user(text: &str, vars: &Vars<'_>) -> String {
    let Some(after) = text.strip_prefix('~') else {
        return text.to_owned();
    };
    let end = after.find('/').unwrap_or(after.len());
    let (user, tail) = after.split_at(end);
    let home = if user.is_empty() {
        vars.get("HOME").or_else(|| account_home(None))
    } else {
        account_home(Some(user))
    };
    let Some(home) = home else {
        return text.to_owned();
    };
    let joined = format!("{}{tail}", home.trim_end_matches('/'));
    if joined.is_empty() { "/".to_owned() } else { joined }
}

/// The home directory of `user`, or of the current user (the real uid, as `os.getuid`), from
/// the system's account lookup (`getpwnam_r`, `getpwuid_r`), which Python's `pwd` module asks:
/// through NSS, an account from LDAP, SSSD or systemd's records counts as one of /etc/passwd.
/// A home that is not UTF-8 is left unexpanded.
pub(super) fn account_home(user: Option<&str>) -> Option<String> {
    use nix::unistd::{Uid, User};
    let account = match user {
        Some(name) => User::from_name(name),
        None => User::from_uid(Uid::current()),
    };
    account.ok().flatten().and_then(|account| account.dir.into_os_string().into_string().ok())
}

/// Python's `shlex.split` (POSIX mode, no comments), which Airflow uses to turn a `_cmd` value
/// into an argument list: no shell runs, so pipes, `$VAR` and globs are plain text.
pub(super) fn shlex_split(line: &str) -> Result<Vec<String>, &'static str> {
    let mut words = Vec::new();
    let mut word = String::new();
    // True once the current word has begun, even if only with `''`.
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if matches!(c, ' ' | '\t' | '\r' | '\n') {
            if in_word {
                words.push(std::mem::take(&mut word));
                in_word = false;
            }
            continue;
        }
        in_word = true;
        match c {
            '\\' => word.push(chars.next().ok_or("it ends with a lone backslash")?),
            quote @ ('\'' | '"') => {
                loop {
                    match chars.next().ok_or("a quotation is not closed")? {
                        ch if ch == quote => break,
                        '\\' if quote == '"' => {
                            let escaped = chars.next().ok_or("a quotation is not closed")?;
                            // Inside double quotes a backslash only escapes `"` and `\`.
                            if escaped != '"' && escaped != '\\' {
                                word.push('\\');
                            }
                            word.push(escaped);
                        }
                        ch => word.push(ch),
                    }
                }
            }
            other => word.push(other),
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Longest stderr excerpt quoted in an error.
pub(super) const MAX_STDERR_EXCERPT: usize = 200;

/// Runs a `_cmd` command as Airflow does (split by `shlex`, no shell) and returns its standard
/// output, decoded as UTF-8 with undecodable bytes dropped (Airflow's `decode(..., "ignore")`).
///
/// Two deliberate differences from Airflow: trailing line ends are removed (Airflow keeps
/// them, so `echo` output would put a newline into the URL, e.g. into an SQLite file name; no
/// working setup depends on that), and empty output is an error (Airflow falls back to the
/// default `[database] sql_alchemy_conn` for a file `_cmd`, and uses the empty string for an
/// environment `_CMD`; both silently open some other database). The command gets no standard
/// input, so it can never consume input meant for state-store. The error never contains the
/// command's output, which is a secret by design; it may quote the first line of its stderr,
/// with what the command printed on stdout masked there (a vault client that fails may echo
/// the URL or the password it printed), and any URL's password too.
///
/// Unlike Airflow's, the command is bounded: it runs in a process group of its own, which is
/// killed when it runs past `timeout` (`[state_store] cmd_timeout`), prints more than
/// [`MAX_COMMAND_OUTPUT`], or when the tool itself is ended by a signal; after the command
/// ends, whatever it left running in its group is killed too. A hung secrets client would
/// otherwise hang every cron run before it even takes the clean lock, and one that prints
/// without end would take all memory.
pub(super) fn run_command(command: &str, timeout: Duration) -> Result<String, String> {
    run_command_bounded_by(command, timeout, "[state_store] cmd_timeout")
}

/// [`run_command`], `bound` naming what sets `timeout` in the message of a command that
/// runs past it (the REST transport's token command has its own).
pub(crate) fn run_command_bounded_by(
    command: &str,
    timeout: Duration,
    bound: &str,
) -> Result<String, String> {
    let words = shlex_split(command).map_err(|e| format!("cannot split the command: {e}"))?;
    let Some((program, args)) = words.split_first() else {
        return Err("the command is empty".to_owned());
    };
    let output = run_bounded(program, args, timeout, bound)?;
    let mut text: String = output.stdout.utf8_chunks().map(|chunk| chunk.valid()).collect();
    if !output.status.success() {
        let mut printed = crate::redact::Secrets::new();
        crate::url::add_command_output(&mut printed, &text);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().map(|l| l.trim_matches(py_space)).find(|l| !l.is_empty()).unwrap_or("");
        let visible: String = first.chars().filter(|c| !c.is_control()).collect();
        // Masked before it is cut: a URL cut short of its `@` no longer shows where its password ends.
        let excerpt: String = printed.mask(&visible).chars().take(MAX_STDERR_EXCERPT).collect();
        let how = describe_status(output.status);
        return Err(if excerpt.is_empty() {
            format!("`{program}` {how}")
        } else {
            format!("`{program}` {how}: {excerpt}")
        });
    }
    let kept = text.trim_end_matches(['\n', '\r']).len();
    text.truncate(kept);
    if text.is_empty() {
        return Err(format!("`{program}` printed nothing"));
    }
    Ok(text)
}

/// The most a `_cmd` command may print on stdout: a URL or a password is a few hundred bytes.
pub(super) const MAX_COMMAND_OUTPUT: usize = 64 * 1024;
/// The most of its stderr kept (the rest is read and dropped), for the excerpt of an error.
const MAX_COMMAND_STDERR: usize = 64 * 1024;

/// What a bounded command left: its status and what it printed.
struct Bounded {
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Who is told of each `_cmd` command's process group (its own, `process_group(0)`): when it
/// has started, so that an ending of the process can kill it with everything it started, and
/// when it is over, just before it is killed here. Given once, at the start of the process, by
/// the caller above both (`lib.rs`, with `signals`'s bookkeeping); told to no one before.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommandWatch {
    pub started: fn(pid: u32),
    pub ended: fn(pid: u32),
}

static WATCH: std::sync::OnceLock<CommandWatch> = std::sync::OnceLock::new();

/// Sets who is told of each `_cmd` command's process group (see [`CommandWatch`]).
pub(crate) fn watch_commands(watch: CommandWatch) {
    let _ = WATCH.set(watch);
}

/// Kills the process group of the command `pid` started (it is over, or must be): here after
/// the command, and in `signals` when the process ends at once.
pub(crate) fn kill_group(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(0)) {
        // Already gone is fine: the group may have ended on its own.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Runs `program` in a process group of its own, as described at [`run_command`].
fn run_bounded(program: &str, args: &[String], timeout: Duration, bound: &str) -> Result<Bounded, String> {
    use std::os::unix::process::CommandExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        // The tool's own secret is the tool's: a command run for a value or a token never
        // needs the REST login's password, and might log or pass it on.
        .env_remove("STATE_STORE_API_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    WATCH.get().inspect(|watch| (watch.started)(child.id()));
    let too_much = Arc::new(AtomicBool::new(false));
    // What the command printed so far, readable while a reader still waits for the end of a
    // pipe that a process it left behind (a daemon, in a session of its own) holds open.
    let printed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (out_tx, out_rx) = std::sync::mpsc::channel();
    let (err_tx, err_rx) = std::sync::mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        let too_much = Arc::clone(&too_much);
        let printed = Arc::clone(&printed);
        std::thread::spawn(move || {
            let over = read_capped(stdout, &printed, MAX_COMMAND_OUTPUT, true);
            too_much.store(over, Ordering::SeqCst);
            let _ = out_tx.send(());
        });
    }
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            let kept = std::sync::Mutex::new(Vec::new());
            read_capped(stderr, &kept, MAX_COMMAND_STDERR, false);
            let _ = err_tx.send(kept.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner));
        });
    }
    let too_long = || {
        format!(
            "`{program}` printed more than {} KiB: stopped (a value is never that long)",
            MAX_COMMAND_OUTPUT / 1024
        )
    };
    let status = loop {
        if too_much.load(Ordering::SeqCst) {
            break Err(too_long());
        }
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() >= timeout => {
                break Err(format!(
                    "`{program}` did not finish within {} s ({bound}): stopped",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(format!("cannot wait for `{program}`: {e}")),
        }
    };
    // The command's group goes, whatever happened: nothing it started outlives this call, and
    // the pipes' other ends close, so the readers end.
    WATCH.get().inspect(|watch| (watch.ended)(child.id()));
    kill_group(child.id());
    let status = status.inspect_err(|_| {
        let _ = child.wait();
    })?;
    let patience = Duration::from_secs(1);
    let held_open = out_rx.recv_timeout(patience).is_err();
    let stdout = std::mem::take(&mut *printed.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    if held_open && stdout.is_empty() {
        return Err(format!(
            "`{program}` exited having printed nothing, and a process it left running (in a session of \
             its own) holds its stdout open"
        ));
    }
    if too_much.load(Ordering::SeqCst) {
        return Err(too_long());
    }
    let stderr = err_rx.recv_timeout(patience).unwrap_or_default();
    Ok(Bounded { status, stdout, stderr })
}

/// Reads `from` to its end into `kept`, keeping at most `cap` bytes. With `stop`, reading ends
/// as soon as there are more (and it returns true); without, the rest is read and dropped.
fn read_capped(
    mut from: impl std::io::Read,
    kept: &std::sync::Mutex<Vec<u8>>,
    cap: usize,
    stop: bool,
) -> bool {
    let mut chunk = [0_u8; 8192];
    loop {
        match from.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => {
                let mut kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    kept.extend_from_slice(&chunk[..room]);
                    if stop {
                        return true;
                    }
                } else {
                    kept.extend_from_slice(&chunk[..n]);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

pub(super) fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "failed".to_owned(),
    }
}

/// `int()`'s syntax for a base-10 string: surrounding whitespace, an optional sign, ASCII
/// digits with single underscores between them. Magnitudes beyond `i128` saturate, which
/// every caller's range check then rejects.
///
/// `int()` and `float()` strip less than `str.strip()`: the ASCII separators U+001C..U+001F
/// stay, which is exactly Rust's `trim`. Python would also take non-ASCII decimal digits
/// (`"٣"` is 3); those are refused here, as nobody writes them on purpose.
pub(super) fn python_int(text: &str) -> Option<i128> {
    let text = text.trim();
    let (negative, digits) = (text.starts_with('-'), text.strip_prefix(['+', '-']).unwrap_or(text));
    if !is_digit_part(digits) {
        return None;
    }
    let magnitude = digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0_i128, |n, d| n.saturating_mul(10).saturating_add(i128::from(d - b'0')));
    Some(if negative { -magnitude } else { magnitude })
}

/// Python's `digitpart`: digits, with single underscores only between two digits.
pub(super) fn is_digit_part(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// `float()`'s syntax, for Airflow's fallback in `getint`; `None` for anything else, and for
/// infinities and NaN, which `int()` refuses.
pub(super) fn python_float(text: &str) -> Option<f64> {
    let text = text.trim();
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = unsigned
        .split_once(['e', 'E'])
        .map_or((unsigned, None), |(mantissa, exponent)| (mantissa, Some(exponent)));
    let (whole, fraction) =
        mantissa.split_once('.').map_or((mantissa, None), |(whole, fraction)| (whole, Some(fraction)));
    let whole_ok = whole.is_empty() || is_digit_part(whole);
    let fraction_ok = fraction.is_none_or(|f| f.is_empty() || is_digit_part(f));
    let has_digits = !whole.is_empty() || fraction.is_some_and(|f| !f.is_empty());
    let exponent_ok = exponent.is_none_or(|e| is_digit_part(e.strip_prefix(['+', '-']).unwrap_or(e)));
    if !(whole_ok && fraction_ok && has_digits && exponent_ok) {
        return None;
    }
    let cleaned: String = text.chars().filter(|c| *c != '_').collect();
    cleaned.parse::<f64>().ok().filter(|f| f.is_finite())
}
