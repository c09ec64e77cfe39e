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
            Credentials::Token(token) => token.clone(),
            Credentials::Command { command, origin } => {
                let printed = crate::config::run_command_bounded_by(
                    command,
                    TOKEN_COMMAND_TIMEOUT,
                    "a token command's limit",
                )
                .map_err(|why| {
                    Error::Auth(format!("cannot get a token from the command of {origin}: {why}"))
                })?;
                let token = printed.trim().to_string();
                if token.contains(char::is_whitespace) {
                    crate::redact::register_secret(&token);
                    return Err(Error::Auth(format!(
                        "the command of {origin} printed more than one word; it must print the token alone"
                    ))
                    .into());
                }
                token
            }
            Credentials::Login { username, password } => {
                let password = match password {
                    Some(password) => password.clone(),
                    None => prompt_password(username, http)?,
                };
                crate::redact::register_secret(&password);
                login(http, username, &password)?
            }
            Credentials::None => return Ok(None),
        };
        crate::redact::register_secret(&token);
        Ok(Some(token))
    }
}

/// `POST /auth/token`: a JWT for the user, as Airflow's simple and FAB auth managers mint it.
fn login(http: &Http, username: &str, password: &str) -> Result<String> {
    let mut body = serde_json::Map::new();
    body.insert("username".to_string(), Value::String(username.to_string()));
    body.insert("password".to_string(), Value::String(password.to_string()));
    let target = Target::literal("/auth/token");
    let answer = http.send(Method::POST, &target, Some(&Value::Object(body)), false)?;
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
    let restore = Restore { tty: &tty, original };
    let mut out = &tty;
    let _ = write!(out, "Password for {} at {}: ", quote(username), http.base().as_str());
    let _ = out.flush();
    let mut line = String::new();
    let read = std::io::BufReader::new(&tty).read_line(&mut line);
    drop(restore);
    let _ = writeln!(out);
    read.map_err(|_| missing())?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        return Err(missing());
    }
    Ok(password)
}

/// Puts the terminal's echo back, whatever happens while the password is read.
struct Restore<'a> {
    tty: &'a std::fs::File,
    original: rustix::termios::Termios,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(self.tty, rustix::termios::OptionalActions::Now, &self.original);
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
    fn describing_credentials_never_shows_a_secret() {
        let shown = [
            Credentials::Token("t0k".into()).describe(),
            Credentials::Login { username: "bob".into(), password: Some("pw".into()) }.describe(),
        ];
        assert!(!shown.iter().any(|s| s.contains("t0k") || s.contains("pw")), "{shown:?}");
    }
}
