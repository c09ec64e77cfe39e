//! The addresses of the REST transport: the base URL the user gives (`--api-url`), with any
//! path prefix kept, and the `/api/v2/…` paths built on it, every segment percent-encoded
//! with no safe character, so that a `/`, `?`, `%` or `#` in a dag id, run id or key stays
//! part of it. No path ever ends with a `/`: on Airflow's `{key:path}` routes a trailing slash
//! addresses the empty key, not the collection.

use crate::error::{Error, Result};
use crate::text::quote;

/// `scheme://host[:port][/prefix]`, with no trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseUrl(String);

impl BaseUrl {
    /// Checks a base URL: http or https, a host, no credentials, no query or fragment.
    /// `origin` says where it came from, for the message.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<BaseUrl> {
        let bad = |why: &str| -> anyhow::Error {
            Error::Usage(format!("invalid {origin} {}: {why}", quote(&masked(text)))).into()
        };
        let trimmed = text.trim();
        let Some((scheme, rest)) = trimmed.split_once("://") else {
            return Err(bad("expected http://HOST[:PORT][/PREFIX] or https://…"));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme must be http or https"));
        }
        if rest.contains(['?', '#']) {
            return Err(bad("give the web server's base URL, without a query or fragment"));
        }
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        if authority.contains('@') {
            return Err(bad(
                "credentials do not belong in the URL: use a token (AIRFLOW_CLI_TOKEN, --api-token-cmd) or --api-username with STATE_STORE_API_PASSWORD",
            ));
        }
        if authority.is_empty() || authority.starts_with(':') {
            return Err(bad("the URL has no host"));
        }
        if authority.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the host holds a blank or a control character"));
        }
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the path holds a blank or a control character; percent-encode it"));
        }
        let path = path.trim_end_matches('/');
        // `/api/v2` is added to every request; a URL that already ends with it would double it.
        if path.ends_with("/api/v2") || path.ends_with("/api/v1") {
            return Err(bad("give the web server's base URL without /api/v2: state-store adds it"));
        }
        Ok(BaseUrl(format!("{scheme}://{authority}{path}")))
    }

    /// The full URL of a request; messages show it as it is, since the base URL holds no
    /// credentials.
    pub(crate) fn join(&self, target: &Target) -> String {
        format!("{}{}", self.0, target.path_and_query())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn is_https(&self) -> bool {
        self.0.starts_with("https://")
    }

    /// Whether the URL has a path after its host: the deployment's prefix, or a mistake.
    pub(crate) fn has_path(&self) -> bool {
        self.0.split_once("://").is_some_and(|(_, rest)| rest.contains('/'))
    }

    /// What to check when the server there is not Airflow's API (an HTML page, a 404): without
    /// a path, a missing prefix; with one (`http://host:8080/ui`, the UI's address), that path,
    /// which may be one too many, and the URL without it.
    pub(crate) fn prefix_advice(&self) -> String {
        let rest = self.0.split_once("://").map_or(self.0.as_str(), |(_, rest)| rest);
        match rest.find('/') {
            None => "does --api-url lack the deployment's path prefix, or name another server?".to_string(),
            Some(at) => format!(
                "is {} the deployment's path prefix, or one too many (--api-url {})?",
                &rest[at..],
                &self.0[..self.0.len() - (rest.len() - at)]
            ),
        }
    }

    /// The host, without its port or an IPv6 address's brackets, in lower case.
    pub(crate) fn host(&self) -> String {
        let rest = self.0.split_once("://").map_or(self.0.as_str(), |(_, rest)| rest);
        let authority = rest.split('/').next().unwrap_or(rest);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
        };
        host.to_ascii_lowercase()
    }
}

/// A URL with any `user:password@` masked, for a message about a URL that was refused.
fn masked(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://{}@{}", crate::redact::MASK, &rest[at + 1..]),
                None => text.to_string(),
            }
        }
        None => text.to_string(),
    }
}

/// A request's path under the base URL and its query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    path: String,
    query: Vec<(&'static str, String)>,
    subject: Subject,
}

/// Whose state a request reads or writes, as Airflow checks permissions on it: a dag's task
/// instances, or assets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    Dag(String),
    Assets,
    Other,
}

impl Target {
    /// `/api/v2/` and the segments, each percent-encoded whole.
    pub(crate) fn api(segments: &[&str]) -> Target {
        let mut path = String::from("/api/v2");
        for segment in segments {
            path.push('/');
            path.push_str(&encode(segment));
        }
        let subject = match segments {
            ["dags", dag_id, ..] => Subject::Dag((*dag_id).to_string()),
            ["assets", ..] => Subject::Assets,
            _ => Subject::Other,
        };
        Target { path, query: Vec::new(), subject }
    }

    pub(crate) fn subject(&self) -> &Subject {
        &self.subject
    }

    /// A path outside `/api/v2` (the token exchange: `/auth/token`), given literally.
    pub(crate) fn literal(path: &'static str) -> Target {
        Target { path: path.to_string(), query: Vec::new(), subject: Subject::Other }
    }

    pub(crate) fn query(mut self, name: &'static str, value: impl ToString) -> Target {
        self.query.push((name, value.to_string()));
        self
    }

    fn path_and_query(&self) -> String {
        let mut text = self.path.clone();
        for (i, (name, value)) in self.query.iter().enumerate() {
            text.push(if i == 0 { '?' } else { '&' });
            text.push_str(name);
            text.push('=');
            text.push_str(&encode(value));
        }
        text
    }
}

/// Percent-encodes every byte but ASCII letters, digits, `-`, `_` and `~`. A `.` is encoded
/// too, so that a key `.` or `..` is never read as a path step by a proxy on the way.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_named_as_the_one_to_check_and_no_path_as_a_missing_prefix() {
        let ui = BaseUrl::parse("http://host:8080/ui/", "--api-url").unwrap();
        assert!(ui.has_path());
        assert_eq!(
            ui.prefix_advice(),
            "is /ui the deployment's path prefix, or one too many (--api-url http://host:8080)?"
        );
        let root = BaseUrl::parse("https://host", "--api-url").unwrap();
        assert!(!root.has_path());
        assert!(root.prefix_advice().contains("lack the deployment's path prefix"));
        let targets = [
            (Target::api(&["dags", "d/x", "dagRuns", "r"]), Subject::Dag("d/x".to_string())),
            (Target::api(&["assets", "7", "state-store"]), Subject::Assets),
            (Target::api(&["version"]), Subject::Other),
            (Target::literal("/auth/token"), Subject::Other),
        ];
        for (target, subject) in targets {
            assert_eq!(target.subject(), &subject);
        }
    }

    fn base(text: &str) -> Result<BaseUrl> {
        BaseUrl::parse(text, "--api-url")
    }

    #[test]
    fn a_prefix_is_kept_and_trailing_slashes_dropped() {
        let url = base("https://x.astronomer.run/dz3uu847/").unwrap();
        assert_eq!(url.join(&Target::api(&["version"])), "https://x.astronomer.run/dz3uu847/api/v2/version");
        assert_eq!(base("http://127.0.0.1:8080").unwrap().as_str(), "http://127.0.0.1:8080");
        assert_eq!(base("HTTP://h:1///").unwrap().as_str(), "http://h:1");
    }

    #[test]
    fn the_host_is_read_without_port_or_brackets() {
        assert_eq!(base("https://Airflow.Example.com:8443/p").unwrap().host(), "airflow.example.com");
        assert_eq!(base("http://[::1]:8080").unwrap().host(), "::1");
        assert_eq!(base("http://10.0.0.1").unwrap().host(), "10.0.0.1");
        assert!(base("https://h").unwrap().is_https() && !base("http://h").unwrap().is_https());
    }

    #[test]
    fn bad_base_urls_are_refused_with_the_password_masked() {
        for (text, why) in [
            ("ftp://h", "scheme"),
            ("h:8080", "expected"),
            ("http://", "no host"),
            ("http://h/?x=1", "query"),
            ("http://h/api/v2", "without /api/v2"),
            ("http://h/a b", "blank"),
        ] {
            let e = base(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        let e = base("https://user:s3cret@h/").unwrap_err().to_string();
        assert!(e.contains("credentials") && !e.contains("s3cret"), "{e}");
    }

    #[test]
    fn every_segment_is_encoded_whole() {
        let target =
            Target::api(&["dags", "a/b", "dagRuns", "r?x#1", "taskInstances", "t%", "state-store", ".."])
                .query("map_index", -1)
                .query("name_prefix_pattern", "s3://b/k&x=1");
        assert_eq!(
            target.path_and_query(),
            "/api/v2/dags/a%2Fb/dagRuns/r%3Fx%231/taskInstances/t%25/state-store/%2E%2E\
             ?map_index=-1&name_prefix_pattern=s3%3A%2F%2Fb%2Fk%26x%3D1"
        );
        assert_eq!(encode("é 日"), "%C3%A9%20%E6%97%A5");
        assert_eq!(encode("a-b_c~D9"), "a-b_c~D9");
    }
}
