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
        let authority = canonical_authority(authority).map_err(|why| bad(&why))?;
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

    /// The host, without its port or an IPv6 address's brackets, in lower case and without a
    /// trailing dot: an address in its one spelling (see [`canonical_authority`]), the form
    /// `no_proxy` is compared with.
    pub(crate) fn host(&self) -> String {
        let rest = self.0.split_once("://").map_or(self.0.as_str(), |(_, rest)| rest);
        let authority = rest.split('/').next().unwrap_or(rest);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
        };
        host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
    }
}

/// The authority with its host in the one spelling the tool connects to and compares with
/// `no_proxy`, as curl and the URL standard (WHATWG) read a host:
///
/// - an IPv6 address in brackets, in its shortest form (`[0:0::1]` is `[::1]`);
/// - a host that ends in a number is an IPv4 address, which may be written in parts of
///   decimal, octal (`0177`) or hex (`0x7f`), fewer than four (`127.1`, `2130706433`): it is
///   written in dotted decimal (`127.000.000.001` is `127.0.0.1`), so the address the
///   connection goes to is the one `no_proxy` was compared with, whatever the system's
///   resolver would make of the text. One that is no address (`1.2.3.256`, `08.0.0.1`,
///   `1.2.3.4.5`), or that the standard and the resolver read differently (`127.0.0.1.`, a
///   name to glibc; `0x.0.0.1`, whose empty hex the resolver refuses), is refused;
/// - any other host is a name, kept as it is (DNS ignores its case).
///
/// A percent-encoded host is refused: the standard decodes it, the resolver does not.
pub(crate) fn canonical_authority(authority: &str) -> std::result::Result<String, String> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let (inside, after) = bracketed.split_once(']').ok_or("the IPv6 address has no closing ]")?;
        let address: std::net::Ipv6Addr =
            inside.parse().map_err(|_| format!("the host [{inside}] is not an IPv6 address"))?;
        if !(after.is_empty() || after.starts_with(':')) {
            return Err(format!("the host [{inside}] is followed by {}", quote(after)));
        }
        return Ok(format!("[{address}]{after}"));
    }
    let (host, port) =
        authority.rsplit_once(':').map_or((authority, None), |(host, port)| (host, Some(port)));
    if host.contains('%') {
        return Err(format!("the host {} is percent-encoded: give it as it is spelt", quote(host)));
    }
    if !ends_in_a_number(host) {
        return Ok(authority.to_string());
    }
    if host.ends_with('.') {
        return Err(format!(
            "the host {} is an IPv4 address to the URL standard and a name to the system's resolver: \
             give it without the trailing dot",
            quote(host)
        ));
    }
    let address = ipv4(host).ok_or_else(|| {
        format!(
            "the host {} ends in a number but is not an IPv4 address (up to four parts of decimal, \
             0-led octal or 0x hex digits, each in range)",
            quote(host)
        )
    })?;
    Ok(port.map_or_else(|| address.to_string(), |port| format!("{address}:{port}")))
}

/// Whether the URL standard reads `host` as an IPv4 address: its last label (after one
/// trailing dot) is a number, decimal or `0x` hex.
pub(crate) fn ends_in_a_number(host: &str) -> bool {
    let host = host.strip_suffix('.').filter(|h| !h.is_empty()).unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or(host);
    let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
    (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
        || hex.is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An IPv4 address in any of the spellings that both the URL standard and `inet_aton` (the
/// resolver's reading) take: one to four parts, each decimal, `0`-led octal or `0x` hex with
/// at least one digit, the last filling the bytes left (`127.1`, `2130706433`).
pub(crate) fn ipv4(text: &str) -> Option<std::net::Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (*part, 10)
        };
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        numbers.push(u64::from_str_radix(digits, radix).ok()?);
    }
    let (last, first) = numbers.split_last()?;
    if first.iter().any(|n| *n > 255) {
        return None;
    }
    let left = 4 - first.len() as u32;
    if *last >= 1_u64 << (8 * left) {
        return None;
    }
    let high = first.iter().enumerate().fold(0_u64, |acc, (i, n)| acc | n << (24 - 8 * i as u32));
    Some(std::net::Ipv4Addr::from(u32::try_from(high | last).ok()?))
}

/// A URL with any `user:password@` masked, for a message about a URL that was refused.
fn masked(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else { return text.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}@{}", crate::redact::MASK, &rest[at + 1..]),
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
        let path =
            segments.iter().fold(String::from("/api/v2"), |path, segment| path + "/" + &encode(segment));
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
        let query: Vec<String> =
            self.query.iter().map(|(name, value)| format!("{name}={}", encode(value))).collect();
        if query.is_empty() { self.path.clone() } else { format!("{}?{}", self.path, query.join("&")) }
    }
}

/// Percent-encodes every byte but ASCII letters, digits, `-`, `_` and `~`. A `.` is encoded
/// too, so that a key `.` or `..` is never read as a path step by a proxy on the way.
pub(crate) fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'~' => char::from(byte).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
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

    /// An IPv4 address in another spelling is connected to, and compared with `no_proxy`, in
    /// dotted decimal, as curl and the URL standard read it; one they read differently, or
    /// that is no address, is refused.
    #[test]
    fn hosts_that_are_addresses_are_written_in_their_one_spelling() {
        for (given, canonical) in [
            ("http://127.000.000.001:8080", "http://127.0.0.1:8080"),
            ("http://0x7f.1", "http://127.0.0.1"),
            ("http://0X7F.0.0.01/p", "http://127.0.0.1/p"),
            ("http://0177.0.0.1:1", "http://127.0.0.1:1"),
            ("http://2130706433:1", "http://127.0.0.1:1"),
            ("http://10.1.65535", "http://10.1.255.255"),
            ("http://[0:0:0:0:0:0:0:1]:8080", "http://[::1]:8080"),
            ("http://[FD00:0::5]", "http://[fd00::5]"),
            ("http://Airflow.Example.com:8080", "http://Airflow.Example.com:8080"),
            ("http://host.0x1g", "http://host.0x1g"),
            ("http://example.com.", "http://example.com."),
        ] {
            assert_eq!(base(given).unwrap().as_str(), canonical, "{given}");
        }
        assert_eq!(base("http://Example.COM.:1").unwrap().host(), "example.com");
        for (given, why) in [
            ("http://1.2.3.256", "not an IPv4 address"),
            ("http://08.0.0.1", "not an IPv4 address"),
            ("http://1.2.3.4.5", "not an IPv4 address"),
            ("http://a.1", "not an IPv4 address"),
            ("http://0x7f.0x.0.1", "not an IPv4 address"),
            ("http://4294967296", "not an IPv4 address"),
            ("http://127.0.0.1.:1", "trailing dot"),
            ("http://127%2E0.0.1", "percent-encoded"),
            ("http://[::1::2]:1", "not an IPv6 address"),
            ("http://[::1", "closing ]"),
            ("http://[::1]x", "followed by"),
        ] {
            let e = base(given).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("invalid --api-url"), "{given}: {e}");
        }
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
