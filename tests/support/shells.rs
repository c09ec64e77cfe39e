//! Real shells and `man`, driven as a user's terminal drives them: a completion script installed
//! the way docs/commands/completions.md says, then the completions a shell offers for a line.
//!
//! A tool that is not installed fails the test, saying that ./scripts/test.sh installs it, unless
//! `STATE_STORE_TEST_MISSING_TOOLS` (comma-separated, e.g. `zsh,fish,man`) says it is missing
//! on this machine; then its checks are skipped, with a note on stderr. bash is always needed.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{BIN, TempDir};

/// Whether `tool` can be run; `false` only when it is missing and declared missing.
pub fn installed(tool: &str, debian_package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    let declared = std::env::var("STATE_STORE_TEST_MISSING_TOOLS")
        .unwrap_or_default()
        .split(',')
        .any(|name| name.trim() == tool);
    assert!(
        declared,
        "{tool} is not installed, so its checks cannot run: ./scripts/test.sh installs it from \
         Debian's packages ({debian_package}) without starting or enabling a service, or set \
         STATE_STORE_TEST_MISSING_TOOLS={tool} to skip them"
    );
    eprintln!("note: {tool} is missing and STATE_STORE_TEST_MISSING_TOOLS lists it: its checks are skipped");
    false
}

/// Runs a command with its output captured, failing the test if it takes longer than 60 s
/// (a shell waiting for input it will never get).
pub fn output_within(cmd: &mut Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The completion script `state-store completions SHELL` prints.
pub fn script(shell: &str) -> String {
    let out = Command::new(BIN).args(["completions", shell]).output().expect("run state-store");
    assert!(out.status.success(), "completions {shell}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 script")
}

fn lines(out: &Output, what: &str) -> Vec<String> {
    assert!(
        out.status.success(),
        "{what} failed ({:?})\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// A bash with the script sourced (as `source <(state-store completions bash)` in ~/.bashrc
/// does), where `body` runs.
fn bash(dir: &TempDir, body: &str, args: &[&str]) -> Output {
    let path = dir.path().join("state-store.bash");
    std::fs::write(&path, script("bash")).expect("write script");
    let program = format!("source {} || exit 3\n{body}", shell_quote(&path));
    output_within(
        Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &program, "bash"])
            .args(args)
            .current_dir(dir.path()),
        "bash",
    )
}

/// What `complete -p state-store` says after the script is sourced.
pub fn bash_registration() -> String {
    let dir = TempDir::new();
    lines(&bash(&dir, "complete -p state-store", &[]), "complete -p state-store").join("\n")
}

/// What bash completes at the end of `line`, as a TAB there would: the function that
/// `complete -p state-store` names, called with COMP_WORDS, COMP_CWORD, COMP_LINE and
/// COMP_POINT set as readline sets them (a trailing space starts a new, empty word). Runs in an
/// empty directory, so file-name completion offers nothing.
pub fn bash_completes(line: &str) -> Vec<String> {
    let dir = TempDir::new();
    let body = r#"
spec=$(complete -p state-store) || exit 4
fn=${spec##* -F }; fn=${fn%% *}
COMP_LINE=$1; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
"$fn" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let out = bash(&dir, body, &[line]);
    lines(&out, &format!("bash completing {line:?}")).into_iter().filter(|l| !l.is_empty()).collect()
}

/// The zsh that reads the keys typed: `zsh -f -i` in a pseudo-terminal (zsh/zpty), with the
/// script as `_state-store` in a directory put first in `fpath` before `compinit`, as the docs
/// say to install it. `compadd` is wrapped to print each match it is given, between markers
/// printed before and after completion, and the line is typed followed by a TAB.
const ZSH_DRIVER: &str = r#"
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z 'PROMPT=""; RPROMPT=""; fpath=('"${(q)1}"' $fpath); autoload -U compinit; compinit -u -D
bindkey "^I" complete-word
zstyle ":completion:*" insert-tab false
__mark() { print -r -- "<<<$1>>>" }; __begin() { __mark BEGIN }; __end() { __mark END }
compprefuncs=( __begin ); comppostfuncs=( __end exit )
compadd() {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
  local -a __hits; builtin compadd -A __hits "$@"
  local h; for h in $__hits; do print -r -- "<<<HIT>>>$h"; done
}
__mark READY'
local out
while zpty -r z out; do [[ $out == *'<<<READY>>>'* ]] && break; done
zpty -n -w z "$2"$'\t'
while zpty -r z out; do
  [[ $out == *'<<<HIT>>>'* ]] && print -r -- "${${out#*<<<HIT>>>}%%$'\r'*}"
  [[ $out == *'<<<END>>>'* ]] && exit 0
done
exit 4
"#;

/// What zsh completes at the end of `line`, as a TAB there would (see [`ZSH_DRIVER`]).
pub fn zsh_completes(line: &str) -> Vec<String> {
    let dir = TempDir::new();
    let functions = dir.path().join("zfunc");
    std::fs::create_dir_all(&functions).expect("mkdir");
    std::fs::write(functions.join("_state-store"), script("zsh")).expect("write script");
    let out = output_within(
        Command::new("zsh")
            .args(["-f", "-c", ZSH_DRIVER, "zsh"])
            .arg(&functions)
            .arg(line)
            .env("HOME", dir.path())
            .current_dir(dir.path()),
        "zsh",
    );
    lines(&out, &format!("zsh completing {line:?}"))
}

/// What fish completes at the end of `line` (`complete -C`), with the script installed as
/// ~/.config/fish/completions/state-store.fish, where fish loads it on first use of a command
/// named state-store found on PATH.
pub fn fish_completes(line: &str) -> Vec<String> {
    let dir = TempDir::new();
    let completions = dir.path().join(".config/fish/completions");
    std::fs::create_dir_all(&completions).expect("mkdir");
    std::fs::write(completions.join("state-store.fish"), script("fish")).expect("write script");
    let bin_dir = Path::new(BIN).parent().expect("binary directory");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = output_within(
        Command::new("fish")
            .args(["-c", "complete -C $argv[1]", line])
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path().join(".config"))
            .env("XDG_DATA_HOME", dir.path().join(".local/share"))
            .env("PATH", path)
            .current_dir(dir.path()),
        "fish",
    );
    // Each completion is `word<TAB>description`.
    lines(&out, &format!("fish completing {line:?}"))
        .into_iter()
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .collect()
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
