//! Where the REST transport's bearer token comes from, the first of (docs/rest.md#tokens):
//!
//! 1. `AIRFLOW_CLI_TOKEN`, the variable airflowctl reads;
//! 2. a token command (`--api-token-cmd`, `STATE_STORE_API_TOKEN_CMD`), run as Airflow runs a
//!    `_cmd` (split like a shell line, no shell, bounded in time and output), whose stdout is
//!    the token: `gcloud auth print-access-token`, an MWAA exchange script;
//! 3. a login: `--api-username` with the password from `STATE_STORE_API_PASSWORD` or typed at
//!    a terminal, exchanged at `POST /auth/token` (Airflow's simple and FAB auth managers).
//!
//! No flag takes a token or a password as its value, since a command line shows in `ps`.
//! Every token and password learnt is registered with [`crate::redact`], so that no message
//! of this process can print it.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::Duration;

use ureq::http::Method;

use super::http::{Http, detail, status_error};
use super::url::Target;
use crate::error::{Error, Result};
use crate::json::Value;
use crate::text::quote;
use anyhow::bail;

/// How long a token command may run: Airflow's `[state_store] cmd_timeout` default, as no
/// configuration file is read on this transport.
const TOKEN_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The credentials a run was given, before any is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// `AIRFLOW_CLI_TOKEN`.
    Token(String),
    /// A token command.
    Command { command: String, origin: &'static str },
    /// A login; the password from the environment, else asked for at a terminal.
    Login { username: String, password: Option<String> },
    /// None: requests go without a token (a server that lets them through, or 401).
    None,
}

impl Credentials {
    /// The first source that is set. `env` reads the environment (a parameter, for tests).
    pub(crate) fn choose(
        token_cmd_flag: Option<&str>,
        username_flag: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Credentials {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if let Some(token) = set("AIRFLOW_CLI_TOKEN") {
            return Credentials::Token(token.trim().to_string());
        }
        if let Some(command) = token_cmd_flag.filter(|c| !c.trim().is_empty()) {
            return Credentials::Command { command: command.to_string(), origin: "--api-token-cmd" };
        }
        if let Some(command) = set("STATE_STORE_API_TOKEN_CMD") {
            return Credentials::Command { command, origin: "STATE_STORE_API_TOKEN_CMD" };
        }
        let username = username_flag.map(str::to_string).or_else(|| set("STATE_STORE_API_USERNAME"));
        match username {
            Some(username) => Credentials::Login { username, password: env("STATE_STORE_API_PASSWORD") },
            None => Credentials::None,
        }
    }

    /// Registers the secrets given (a token, a password) with [`crate::redact`], before any
    /// request: a server may quote them back in any answer, the first one included.
    pub(crate) fn register(&self) {
        match self {
            Credentials::Token(token) => crate::redact::register_secret(token),
            Credentials::Login { username, password: Some(password) } => {
                crate::redact::register_login(username, password);
            }
            _ => {}
        }
    }

    /// What `-v` says of them: never the secret itself.
    pub(crate) fn describe(&self) -> String {
        match self {
            Credentials::Token(_) => "a token from AIRFLOW_CLI_TOKEN".to_string(),
            Credentials::Command { origin, .. } => format!("a token from the command of {origin}"),
            Credentials::Login { username, .. } => format!("a login as {}", quote(username)),
            Credentials::None => "no token".to_string(),
        }
    }

    /// The bearer token, fetched or exchanged now; `None` without credentials.
    pub(crate) fn token(&self, http: &Http) -> Result<Option<String>> {
        let token = match self {
            Credentials::Token(token) => checked(token, "AIRFLOW_CLI_TOKEN")?,
            Credentials::Command { command, origin } => {
                let printed = crate::config::run_command_bounded_by(
                    command,
                    TOKEN_COMMAND_TIMEOUT,
                    "a token command's limit",
                )
                .map_err(|why| {
                    Error::Auth(format!("cannot get a token from the command of {origin}: {why}"))
                })?;
                checked(&printed, &format!("the command of {origin}"))?
            }
            Credentials::Login { username, password } => {
                let password = password.clone().map_or_else(|| prompt_password(username, http), Ok)?;
                crate::redact::register_login(username, &password);
                checked(&login(http, username, &password)?, "the login's answer")?
            }
            Credentials::None => return Ok(None),
        };
        Ok(Some(token))
    }
}

/// A token as an `Authorization: Bearer` header can carry it, registered as a secret: the
/// value alone, without a `Bearer ` that a curl example put before it, and nothing but
/// visible ASCII (RFC 6750's token characters are a subset): a blank or a line break would
/// end the header or smuggle another one in.
fn checked(given: &str, origin: &str) -> Result<String> {
    crate::redact::register_secret(given);
    let mut token = given.trim();
    crate::redact::register_secret(token);
    if let Some(head) = token.get(..6)
        && head.eq_ignore_ascii_case("bearer")
        && token[6..].chars().next().is_none_or(char::is_whitespace)
    {
        token = token[6..].trim_start();
    }
    crate::redact::register_secret(token);
    if token.is_empty() {
        return Err(Error::Auth(format!("the token from {origin} is empty")).into());
    }
    if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
        let what = match c {
            '\n' | '\r' => "a line break".to_string(),
            c if c.is_whitespace() => "a blank (more than one word?)".to_string(),
            c => format!("the character {}", quote(&c.to_string())),
        };
        bail!(Error::Auth(format!(
            "the token from {origin} is malformed: it holds {what}, which no bearer token has; give the \
             token alone"
        )));
    }
    Ok(token.to_string())
}

/// `POST /auth/token`: a JWT for the user, as Airflow's simple and FAB auth managers mint it.
fn login(http: &Http, username: &str, password: &str) -> Result<String> {
    let body = serde_json::json!({ "username": username, "password": password });
    let target = Target::literal("/auth/token");
    let answer = http.send(Method::POST, &target, Some(&body), false)?;
    let shown = http.base().join(&target);
    match answer.status {
        200 | 201 => answer
            .json
            .as_ref()
            .and_then(|j| j.get("access_token"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .ok_or_else(|| Error::Remote(format!("POST {shown} answered {} without an access_token", answer.status)).into()),
        400 | 401 | 403 | 422 => Err(Error::Auth(format!(
            "login as {} refused by POST {shown}: {}",
            quote(username),
            detail(&answer)
        ))
        .into()),
        404 | 405 => Err(Error::Auth(format!(
            "POST {shown} answered {}: this Airflow's auth manager mints no token for a user name and password; \
             give a token (AIRFLOW_CLI_TOKEN or --api-token-cmd)",
            answer.status
        ))
        .into()),
        status => Err(status_error(status, &format!("login at POST {shown} failed ({status}): {}", detail(&answer)))),
    }
}

/// Asks for the password at the terminal, without echo. Without a terminal there is nobody to
/// ask, and the run ends as a missing credential does (exit 10).
fn prompt_password(username: &str, http: &Http) -> Result<String> {
    let missing = || -> anyhow::Error {
        Error::Auth(format!(
            "--api-username {} needs a password: set STATE_STORE_API_PASSWORD, or run at a terminal to be asked",
            quote(username)
        ))
        .into()
    };
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(missing());
    }
    let tty = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").map_err(|_| missing())?;
    let original = rustix::termios::tcgetattr(&tty).map_err(|_| missing())?;
    let mut silent = original.clone();
    silent.local_modes.remove(rustix::termios::LocalModes::ECHO);
    rustix::termios::tcsetattr(&tty, rustix::termios::OptionalActions::Now, &silent)
        .map_err(|_| missing())?;
    // Ctrl-C at the prompt ends the process from the signal thread: it puts the echo back
    // too, and ends the prompt's line.
    if let Ok(tty) = tty.try_clone() {
        let original = original.clone();
        crate::signals::on_exit_restore(move || {
            let _ = rustix::termios::tcsetattr(&tty, rustix::termios::OptionalActions::Now, &original);
            let _ = writeln!(&tty);
        });
    }
    let restore = Restore { tty: &tty, original };
    let mut out = &tty;
    let _ = write!(out, "Password for {} at {}: ", quote(username), http.base().as_str());
    let _ = out.flush();
    let mut line = String::new();
    let read = std::io::BufReader::new(&tty).read_line(&mut line);
    drop(restore);
    let _ = writeln!(out);
    read.map_err(|_| missing())?;
    Some(line.trim_end_matches(['\n', '\r']))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .ok_or_else(missing)
}

/// Puts the terminal's echo back, whatever happens while the password is read.
struct Restore<'a> {
    tty: &'a std::fs::File,
    original: rustix::termios::Termios,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(self.tty, rustix::termios::OptionalActions::Now, &self.original);
        crate::signals::restored();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_string())
    }

    #[test]
    fn the_first_source_that_is_set_wins() {
        let all = [
            ("AIRFLOW_CLI_TOKEN", "t0k"),
            ("STATE_STORE_API_TOKEN_CMD", "print-token"),
            ("STATE_STORE_API_USERNAME", "ann"),
            ("STATE_STORE_API_PASSWORD", "pw"),
        ];
        assert_eq!(
            Credentials::choose(Some("cmd"), Some("bob"), &env(&all)),
            Credentials::Token("t0k".into())
        );
        assert_eq!(
            Credentials::choose(Some("cmd"), Some("bob"), &env(&all[1..])),
            Credentials::Command { command: "cmd".into(), origin: "--api-token-cmd" }
        );
        assert_eq!(
            Credentials::choose(None, Some("bob"), &env(&all[1..])),
            Credentials::Command { command: "print-token".into(), origin: "STATE_STORE_API_TOKEN_CMD" }
        );
        assert_eq!(
            Credentials::choose(None, Some("bob"), &env(&all[2..])),
            Credentials::Login { username: "bob".into(), password: Some("pw".into()) }
        );
        assert_eq!(
            Credentials::choose(None, None, &env(&all[2..])),
            Credentials::Login { username: "ann".into(), password: Some("pw".into()) }
        );
        assert_eq!(Credentials::choose(None, None, &env(&[("AIRFLOW_CLI_TOKEN", " ")])), Credentials::None);
    }

    #[test]
    fn tokens_are_taken_alone_and_malformed_ones_refused() {
        assert_eq!(checked(" Bearer eyJ.a-b_c~d+e/f= \n", "x").unwrap(), "eyJ.a-b_c~d+e/f=");
        assert_eq!(checked("bearer t0k", "x").unwrap(), "t0k");
        for (bad, why) in [
            ("t0k\r\nX-Evil: 1", "line break"),
            ("two words", "blank"),
            ("tök", "\"ö\""),
            ("Bearer ", "empty"),
            ("  ", "empty"),
        ] {
            let e = checked(bad, "AIRFLOW_CLI_TOKEN").unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("AIRFLOW_CLI_TOKEN"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn describing_credentials_never_shows_a_secret() {
        let shown = [
            Credentials::Token("t0k".into()).describe(),
            Credentials::Login { username: "bob".into(), password: Some("pw".into()) }.describe(),
        ];
        assert!(!shown.iter().any(|s| s.contains("t0k") || s.contains("pw")), "{shown:?}");
    }
}
