//! HTTP for the REST transport: one keep-alive agent per process, bounded waits, retries of
//! what is safe to retry, and every answer turned into JSON or into an error kind with its
//! exit code (docs/rest.md#errors).
//!
//! A request that may have reached the server is never sent again: a write that a gateway
//! answered with a 502 or 504, or whose connection was reset, may have been carried out, and
//! sending it again could undo a newer write of a worker (a `set`) or delete a key written
//! since (a `clear`). So a request is retried, [`RETRIES`] times with a growing pause, only
//! when it never left: the connection could not be made, or a 503 with `Retry-After` says the
//! server did nothing. A GET changes nothing, so it is also retried after a 502, 503 or 504
//! or a reset connection. Everything else is reported (exit 4), as a timeout is.
//!
//! Every answer is bounded: [`MAX_BODY`] bytes, read within `--api-timeout`. Every text a
//! server sends is shown only through [`from_server`]: secrets masked in every spelling
//! before anything is cut, and control characters escaped.

use std::io::Read as _;
use std::time::{Duration, Instant};

use ureq::http::{Method, Response};
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
use ureq::{Agent, Body, Proxy};

use super::url::{BaseUrl, Target};
use crate::error::{Error, Result};
use crate::json::{self, Value};
use crate::output;
use crate::text::{self, quote};
use anyhow::bail;

/// Retries after the first try, of a request that never reached the server (see the module).
pub(crate) const RETRIES: u32 = 3;
/// The pause before the first retry; each next one doubles it (0.5 s, 1 s, 2 s).
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause a 503's `Retry-After` is honoured for; a longer one ends the command.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// The largest answer read. Airflow's largest is a page of 100 values, each at most
/// `[state_store] max_value_storage_bytes` (65,535 bytes of stored JSON, which the API sends
/// back no longer): about 6.5 MiB with its keys and timestamps.
pub(crate) const MAX_BODY: u64 = 16 * 1024 * 1024;
/// The most JSON values one answer may hold, so that reading it takes at most about 50 MB
/// (a value in memory takes about a hundred bytes; see [`json::count_values`]). A page of
/// Airflow's that holds more (100 values of 64 KiB, each an array of small numbers) is asked
/// for again in smaller pages; one entry never holds so many under Airflow's default
/// `max_value_storage_bytes`.
pub(crate) const MAX_VALUES: usize = 500_000;
/// The most of a server's error text quoted in a message.
const DETAIL_CHARS: usize = 300;

/// How the transport waits and whom it trusts.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub connect_timeout: Duration,
    /// The whole of one request: connect, send, wait for the answer and read it.
    pub timeout: Duration,
    /// PEM file of the CAs to trust instead of the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// `-v`: say each request and its answer on stderr.
    pub verbose: bool,
}

/// An answer the server gave: its status and its JSON (`None` for an empty body, as a 204's).
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub json: Option<Value>,
    /// How many times the request reached the server, this answer's try included: more than
    /// once when earlier answers said to send it again (a 503 with `Retry-After`, or for a GET
    /// a 502, 503 or 504).
    pub sent: u32,
    /// A 503 with `Retry-After`: the server saying it did nothing.
    pub did_nothing: bool,
}

pub(crate) struct Http {
    agent: Agent,
    /// The variable the proxy came from, for messages.
    proxy: Option<String>,
    base: BaseUrl,
    settings: Settings,
    /// `Authorization: Bearer …` for every request but the token exchange and the version.
    bearer: Option<String>,
}

impl Http {
    pub(crate) fn new(base: BaseUrl, settings: Settings) -> Result<Http> {
        let roots = match &settings.ca_file {
            Some(path) => RootCerts::new_with_certs(&read_ca_file(path)?),
            // native-tls loads the roots where the system keeps them (openssl-probe), also when
            // OpenSSL is linked in and knows no system paths of its own (the wheel).
            None => RootCerts::PlatformVerifier,
        };
        let tls = TlsConfig::builder().provider(TlsProvider::NativeTls).root_certs(roots).build();
        let proxies = crate::env::vars(&PROXY_VARIABLES)?;
        let proxy = proxy_for(&base, &|name| proxies.get(name).cloned())?;
        let (proxy_name, proxy) = proxy.unzip();
        if settings.verbose
            && let Some(variable) = &proxy_name
        {
            output::note(&format!("api: through the proxy of ${variable}"));
        }
        let agent: Agent = Agent::config_builder()
            .tls_config(tls)
            .proxy(proxy)
            // A 4xx's body says why; it is read, not turned into a bare status error.
            .http_status_as_error(false)
            // A redirect is reported, never followed: a login's body or a token must not go
            // to another address than the one the user named (docs/rest.md).
            .max_redirects(0)
            .timeout_connect(Some(settings.connect_timeout))
            .timeout_global(Some(settings.timeout))
            .user_agent(format!("state-store/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Http { agent, proxy: proxy_name, base, settings, bearer: None })
    }

    pub(crate) fn base(&self) -> &BaseUrl {
        &self.base
    }

    pub(crate) fn set_bearer(&mut self, token: String) {
        self.bearer = Some(format!("Bearer {token}"));
    }

    pub(crate) fn has_token(&self) -> bool {
        self.bearer.is_some()
    }

    /// Sends one request, with the token when `authorized`, and reads its answer: retried as
    /// the module says; any status is returned, for the caller to decide what it means.
    pub(crate) fn send(
        &self,
        method: Method,
        target: &Target,
        body: Option<&Value>,
        authorized: bool,
    ) -> Result<Answer> {
        let shown = self.base.join(target);
        let text = body.map(json::dumps);
        // A GET reads; sent twice, it changes nothing.
        let safe = method == Method::GET;
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0;
        let mut sent = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = self.once(&method, &shown, text.as_deref(), authorized);
            let elapsed = started.elapsed().as_millis();
            // The status answered, or the transport error in words.
            let why = result.as_ref().map_or_else(|e| self.describe(e), |r| r.status().as_u16().to_string());
            if self.settings.verbose {
                output::note(&format!("api: {method} {shown} -> {why} ({elapsed} ms)"));
            }
            match result {
                Ok(response) => {
                    sent += 1;
                    if attempt <= RETRIES
                        && let Some(wait) = retry_after(&response, safe, pause)
                    {
                        self.pause(wait, &why);
                        pause *= 2;
                        continue;
                    }
                    let answer = self.read_answer(response, &method, &shown)?;
                    return Ok(Answer { sent, ..answer });
                }
                Err(e) => {
                    let never_sent = is_connect_error(&e);
                    if (never_sent || (safe && is_reset(&e))) && attempt <= RETRIES {
                        self.pause(pause, &why);
                        pause *= 2;
                        continue;
                    }
                    let tries = if attempt > 1 { format!(" after {attempt} tries") } else { String::new() };
                    let through =
                        self.proxy.as_ref().map_or(String::new(), |n| format!(" through the proxy of ${n}"));
                    let unsure = if never_sent || safe {
                        ""
                    } else {
                        "; the request may have been carried out, so it was not sent again (check before retrying)"
                    };
                    bail!(Error::Remote(format!("{method} {shown} failed{through}{tries}: {why}{unsure}")));
                }
            }
        }
    }

    fn once(
        &self,
        method: &Method,
        url: &str,
        body: Option<&str>,
        authorized: bool,
    ) -> std::result::Result<Response<Body>, ureq::Error> {
        let mut request = ureq::http::Request::builder()
            .method(method.clone())
            .uri(url)
            .header("Accept", "application/json");
        if authorized && let Some(bearer) = &self.bearer {
            request = request.header("Authorization", bearer.as_str());
        }
        match body {
            Some(text) => {
                let request = request.header("Content-Type", "application/json").body(text.to_string())?;
                self.agent.run(request)
            }
            None => self.agent.run(request.body(())?),
        }
    }

    /// A transport error in words, a timeout with the flag that bounds it: the same words
    /// whether the headers or the body came too slowly.
    fn describe(&self, e: &ureq::Error) -> String {
        if self.base.is_https() && answered_without_tls(e) {
            return format!(
                "the server does not speak TLS: it answered the TLS handshake with something else, as a \
                 plain HTTP server does (OpenSSL: \"wrong version number\"); if it serves http, give \
                 --api-url {}",
                self.base.as_str().replacen("https://", "http://", 1)
            );
        }
        match e {
            ureq::Error::Timeout(ureq::Timeout::Connect) => format!(
                "no connection within {} s (--api-connect-timeout)",
                self.settings.connect_timeout.as_secs()
            ),
            ureq::Error::Timeout(_) => {
                format!("no answer within {} s (--api-timeout)", self.settings.timeout.as_secs())
            }
            ureq::Error::Io(io) => within(io).map_or_else(|| io.to_string(), |inner| self.describe(inner)),
            ureq::Error::BodyExceedsLimit(_) => {
                format!(
                    "the answer is larger than {} MiB, more than Airflow's API ever sends",
                    MAX_BODY >> 20
                )
            }
            ureq::Error::HostNotFound => "host not found".to_string(),
            ureq::Error::ConnectionFailed => "connection failed".to_string(),
            other => other.to_string(),
        }
    }

    fn pause(&self, pause: Duration, why: &str) {
        if self.settings.verbose {
            output::note(&format!("api: {why}; retrying in {} ms", pause.as_millis()));
        }
        std::thread::sleep(pause);
    }

    /// Reads an answer: JSON, or nothing for an empty body. A body that is not JSON is not
    /// Airflow's API talking (an HTML page from the UI's catch-all route, a proxy's page).
    fn read_answer(&self, response: Response<Body>, method: &Method, shown: &str) -> Result<Answer> {
        let status = response.status().as_u16();
        if (300..400).contains(&status) {
            return Err(redirect(&response, method, shown));
        }
        let did_nothing = status == 503 && response.headers().contains_key("retry-after");
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())
            .unwrap_or_default();
        let mut bytes = Vec::new();
        let read = response.into_body().into_with_config().limit(MAX_BODY).reader().read_to_end(&mut bytes);
        if let Err(e) = read {
            let why = within(&e)
                .map_or_else(|| from_server(&e.to_string(), DETAIL_CHARS), |inner| self.describe(inner));
            return Err(Error::Remote(format!("cannot read the answer of {method} {shown}: {why}")).into());
        }
        if bytes.is_empty() {
            return Ok(Answer { status, json: None, sent: 1, did_nothing });
        }
        let is_json = content_type.starts_with("application/json") || content_type.contains("+json");
        if !is_json {
            let given =
                if content_type.is_empty() { "none".to_string() } else { from_server(&content_type, 100) };
            let what = if content_type.starts_with("text/html") {
                "an HTML page".to_string()
            } else {
                format!("a body that is not JSON (Content-Type {given})")
            };
            // A page instead of the API (a UI's catch-all route, a login page), or no such
            // path: the URL is the likely mistake.
            let hint = if (200..300).contains(&status) || status == 404 {
                format!(": this is not Airflow's API; {}", self.base.prefix_advice())
            } else {
                String::new()
            };
            let message = format!("{method} {shown} answered {status} with {what}{hint}");
            // Not Airflow's API talking (Airflow answers JSON, errors too): a proxy's or
            // another server's page. Only a refused login keeps its own code.
            bail!(match status {
                401 | 403 => Error::Auth(message),
                _ => Error::Remote(message),
            });
        }
        let values = json::count_values(&bytes);
        if values > MAX_VALUES {
            return Err(anyhow::Error::new(Crowded { values }).context(Error::Remote(format!(
                "{method} {shown} answered {status} with more than this tool reads"
            ))));
        }
        // JSON is UTF-8 (RFC 8259): a value decoded with replacement characters would be shown,
        // counted or archived as something the server does not hold.
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            Error::Remote(format!(
                "{method} {shown} answered {status} with bytes that are not UTF-8 (at byte {}): JSON must be \
                 UTF-8 (RFC 8259), and a value read from them would not be the one the server holds",
                e.valid_up_to()
            ))
        })?;
        let value = json::parse(text).map_err(|e| {
            Error::Remote(format!(
                "{method} {shown} answered {status} with JSON that cannot be read: {}",
                from_server(&e.to_string(), DETAIL_CHARS)
            ))
        })?;
        Ok(Answer { status, json: Some(value), sent: 1, did_nothing })
    }
}

/// An answer refused for holding more than [`MAX_VALUES`] JSON values: a page of them is
/// asked for again in smaller pages.
#[derive(Debug, thiserror::Error)]
#[error("the answer holds about {values} JSON values, more than the {MAX_VALUES} one answer may hold")]
pub(crate) struct Crowded {
    values: usize,
}

/// How long to wait before sending a request again after this answer, if it may be sent
/// again: a 503 with `Retry-After` (in seconds, at most [`MAX_RETRY_AFTER`]) says the server
/// did nothing; a GET is also sent again after any 502, 503 or 504.
fn retry_after(response: &Response<Body>, safe: bool, pause: Duration) -> Option<Duration> {
    let status = response.status().as_u16();
    if status == 503
        && let Some(after) = response.headers().get("retry-after")
    {
        let seconds = after.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok());
        return match seconds.map(Duration::from_secs) {
            Some(wait) if wait <= MAX_RETRY_AFTER => Some(wait.max(FIRST_PAUSE)),
            // An HTTP date, or longer than a command should sit waiting.
            _ if safe => Some(pause),
            _ => None,
        };
    }
    (safe && matches!(status, 502..=504)).then_some(pause)
}

/// Text a server sent (an error's detail, a header, a version), fit for a message: every
/// secret masked in each spelling first, so that no cut leaves part of one; blanks folded;
/// control and other hidden characters escaped, so that no escape sequence reaches the
/// terminal; then cut to `chars`.
pub(crate) fn from_server(text: &str, chars: usize) -> String {
    let masked = crate::redact::mask(text);
    let line: String = masked.split_whitespace().collect::<Vec<_>>().join(" ");
    text::cut(&text::cell(&line), chars)
}

/// A JSON value a server sent, with every string in it masked (keys too), before it is written
/// as text: `json.dumps` escapes what a secret holds (`ä` as `\u00e4`, `"` as `\"`), and the
/// escaped spelling is matched no more.
fn masked(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(crate::redact::mask(s)),
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        Value::Object(fields) => {
            Value::Object(fields.iter().map(|(k, v)| (crate::redact::mask(k), masked(v))).collect())
        }
        other => other.clone(),
    }
}

/// The error of a redirect, which is never followed, with the `--api-url` it suggests.
fn redirect(response: &Response<Body>, method: &Method, shown: &str) -> anyhow::Error {
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map_or_else(|| "elsewhere".to_string(), |l| String::from_utf8_lossy(l.as_bytes()).into_owned());
    // What to give as --api-url: the new address without the path this request asked for.
    let path = shown.split_once("://").and_then(|(_, rest)| rest.find("/api/v2/").map(|i| &rest[i..]));
    let base = path.and_then(|p| {
        location.split('?').next().and_then(|l| l.strip_suffix(p.split('?').next().unwrap_or(p)))
    });
    let advice = base.map(|base| format!("; give --api-url {}", from_server(base, DETAIL_CHARS)));
    Error::Remote(format!(
        "{method} {shown} answered {status}, a redirect to {}, which is not followed{}",
        from_server(&location, DETAIL_CHARS),
        advice.unwrap_or_default()
    ))
    .into()
}

/// The proxy for the base URL, chosen as curl chooses it: `https_proxy` (or `HTTPS_PROXY`)
/// for an https URL; for an http one `http_proxy` in lower case only (curl ignores
/// `HTTP_PROXY`: under CGI it is the request's `Proxy:` header, "httpoxy"); else `all_proxy`
/// (or `ALL_PROXY`). None when `no_proxy` (or `NO_PROXY`) names the host (see [`bypasses`]).
/// An http, https or SOCKS (4, 4a, 5, 5h) proxy is supported; any other scheme is refused.
/// Returns the variable it came from, for `-v`.
/// The variables [`proxy_for`] reads, read first through the one reader of the environment:
/// one that is not UTF-8 is refused by name (exit 3), never taken for unset.
const PROXY_VARIABLES: [&str; 7] =
    ["no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY", "http_proxy", "all_proxy", "ALL_PROXY"];

fn proxy_for(base: &BaseUrl, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<(String, Proxy)>> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let host = base.host();
    if set("no_proxy").or_else(|| set("NO_PROXY")).is_some_and(|list| bypasses(&list, &host)) {
        return Ok(None);
    }
    let names: &[&str] = if base.is_https() {
        &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    } else {
        &["http_proxy", "all_proxy", "ALL_PROXY"]
    };
    let Some((name, url)) = names.iter().find_map(|name| set(name).map(|url| (*name, url))) else {
        return Ok(None);
    };
    let url = url.trim();
    if let Some((_, password)) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
    {
        crate::redact::register_secret(password);
        crate::redact::register_secret(&crate::text::percent_decode(password));
    }
    let scheme = url.split_once("://").map_or("http", |(scheme, _)| scheme).to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https" | "socks4" | "socks4a" | "socks" | "socks5" | "socks5h") {
        bail!(Error::Usage(format!(
            "the proxy in ${name} has the scheme {}, which is not supported: give an http, https or SOCKS \
             (socks4, socks4a, socks5, socks5h) proxy",
            quote(&scheme)
        )));
    }
    let proxy = Proxy::new(url).map_err(|e| {
        Error::Usage(format!("invalid proxy in ${name}: {}", from_server(&e.to_string(), 200)))
    })?;
    Ok(Some((name.to_string(), proxy)))
}

/// Whether a `no_proxy` list names the host, as curl reads it: `*`; a host name, matched
/// with its subdomains (`example.com` and `.example.com` both take `api.example.com`), in any
/// case and with or without a trailing dot; an IP address, matched as an address (`::1` is
/// `0:0::1`, `127.000.000.001` is `127.0.0.1`); or, since curl 7.86, an address range in
/// CIDR notation (`10.0.0.0/8`, `::1/128`). A host that is an address (the base URL writes
/// it in its one spelling, see [`super::url::canonical_authority`]) is matched by addresses
/// and ranges only, never as a name by its last labels. A `:port` after an entry is ignored,
/// and an IPv6 address may be in brackets.
fn bypasses(list: &str, host: &str) -> bool {
    let host_ip = address(host);
    list.split(',').map(str::trim).filter(|e| !e.is_empty()).any(|entry| {
        if entry == "*" {
            return true;
        }
        let (written, prefix) =
            entry.split_once('/').map_or((entry, None), |(written, bits)| (written, Some(bits)));
        let unbracketed = written.trim_start_matches('[').split(']').next().unwrap_or(written);
        let without_port = written
            .rsplit_once(':')
            .filter(|(name, port)| !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(written, |(name, _)| name);
        if let Some(ip) = address(unbracketed).or_else(|| address(without_port)) {
            let Some(host_ip) = host_ip else { return false };
            let Ok(bits) = prefix.map(str::parse::<u32>).transpose() else { return false };
            return in_range(host_ip, ip, bits);
        }
        if prefix.is_some() || host_ip.is_some() {
            return false;
        }
        let name = without_port.trim_start_matches('.');
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        !name.is_empty() && (host == name || host.ends_with(&format!(".{name}")))
    })
}

/// An IP address, an IPv4 one in any spelling the URL standard and curl take (see
/// [`super::url::ipv4`]).
fn address(text: &str) -> Option<std::net::IpAddr> {
    let text = text.strip_suffix('.').unwrap_or(text);
    text.parse().ok().or_else(|| super::url::ipv4(text).map(std::net::IpAddr::V4))
}

/// Whether `host` is `network`, or within its first `bits` bits. An IPv4-mapped IPv6
/// address (`::ffff:127.0.0.1`) is the IPv4 address on either side, as the connection to it
/// is (a range of such addresses, its last 32 bits at most, the IPv4 range).
fn in_range(host: std::net::IpAddr, network: std::net::IpAddr, bits: Option<u32>) -> bool {
    use std::net::IpAddr;
    let (network, bits) = match (network, network.to_canonical(), bits) {
        (IpAddr::V6(_), IpAddr::V4(v4), Some(bits)) if bits >= 96 => (IpAddr::V4(v4), Some(bits - 96)),
        (IpAddr::V6(_), IpAddr::V4(_), Some(_)) => (network, bits),
        (_, canonical, bits) => (canonical, bits),
    };
    let host = if network.is_ipv4() { host.to_canonical() } else { host };
    let (host, network, width) = match (host, network) {
        (IpAddr::V4(h), IpAddr::V4(n)) => (u128::from(h.to_bits()), u128::from(n.to_bits()), 32),
        (IpAddr::V6(h), IpAddr::V6(n)) => (h.to_bits(), n.to_bits(), 128),
        _ => return false,
    };
    let bits = bits.unwrap_or(width);
    if bits > width {
        return false;
    }
    let shift = width - bits;
    shift == width || (host >> shift) == (network >> shift)
}

/// A connection that was never made: nothing reached the server, so a retry is safe.
fn is_connect_error(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::ConnectionFailed => true,
        // A host that does not resolve is a wrong URL far more often than a passing fault.
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => true,
        ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

/// A connection lost after the request may have been sent: only a GET is sent again.
fn is_reset(e: &ureq::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e, ureq::Error::Io(io) if matches!(
        io.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::NotConnected | ErrorKind::UnexpectedEof
    ))
}

/// Whether a TLS handshake failed because the peer's answer was not TLS at all: what OpenSSL
/// says when the first bytes back are a plain HTTP answer (`HTTP/1.1 400 …` read as a TLS
/// record: "wrong version number" in OpenSSL 1.1 and 3, "unknown protocol" in 1.0, "packet
/// length too long" when the bytes read as a huge record). native-tls hands the reason over
/// as text only.
fn answered_without_tls(e: &ureq::Error) -> bool {
    let text = match e {
        ureq::Error::NativeTls(tls) => tls.to_string(),
        ureq::Error::Io(io) => return within(io).is_some_and(answered_without_tls),
        _ => return false,
    };
    ["wrong version number", "unknown protocol", "packet length too long"]
        .iter()
        .any(|reason| text.contains(reason))
}

/// The transport error an I/O error carries, if it is one.
fn within(io: &std::io::Error) -> Option<&ureq::Error> {
    io.get_ref().and_then(|inner| inner.downcast_ref::<ureq::Error>())
}

/// The kind of error a status that is not the expected answer is: 404 not found (1), 422 and
/// other refusals of the request (2), 400 the server's configuration (3), 401 and 403 (10),
/// and 408, 429 and 5xx (4).
pub(crate) fn status_error(status: u16, message: &str) -> anyhow::Error {
    match status {
        404 => Error::NotFound(message.to_string()),
        401 | 403 => Error::Auth(message.to_string()),
        400 => Error::Config(message.to_string()),
        // A server too busy or too slow for now: try again later, as for a 5xx.
        408 | 429 => Error::Remote(message.to_string()),
        402..=499 => Error::Usage(message.to_string()),
        _ => Error::Remote(message.to_string()),
    }
    .into()
}

/// What the server said was wrong, in one line: FastAPI's `detail`, a string or a list of
/// validation errors (each `loc: msg`, without the `input` it echoes, which can be the whole
/// value); any other JSON as text, its strings masked first. Shown through [`from_server`].
pub(crate) fn detail(answer: &Answer) -> String {
    let said = match answer.json.as_ref().and_then(|j| j.get("detail")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(errors)) => errors
            .iter()
            .map(|e| {
                let loc = e.get("loc").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let place: Vec<String> = loc
                    .iter()
                    .filter(|p| p.as_str() != Some("body"))
                    .map(|p| p.as_str().map_or_else(|| json::dumps(&masked(p)), str::to_string))
                    .collect();
                let msg = match e.get("msg") {
                    Some(Value::String(msg)) => msg.clone(),
                    Some(other) => json::dumps(&masked(other)),
                    None => "invalid".to_string(),
                };
                if place.is_empty() { msg } else { format!("{}: {msg}", place.join(".")) }
            })
            .collect::<Vec<_>>()
            .join("; "),
        Some(other) => json::dumps(&masked(other)),
        None => answer.json.as_ref().map(|j| json::dumps(&masked(j))).unwrap_or_default(),
    };
    from_server(&said, DETAIL_CHARS)
}

/// The certificates of a PEM file, for `--api-ca-file`.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<Certificate<'static>>> {
    let shown = path.display();
    let pem = crate::fs::read_bounded(path)
        .map_err(|e| Error::Usage(format!("cannot read --api-ca-file {shown}: {e}")))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        let item = item.map_err(|e| Error::Usage(format!("--api-ca-file {shown} is not a PEM file: {e}")))?;
        if let ureq::tls::PemItem::Certificate(cert) = item {
            certs.push(cert);
        }
    }
    if certs.is_empty() {
        return Err(Error::Usage(format!("--api-ca-file {shown} holds no PEM certificate")).into());
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(url: &str, vars: &[(&str, &str)]) -> Option<String> {
        let base = BaseUrl::parse(url, "--api-url").unwrap();
        let env = |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_string());
        proxy_for(&base, &env).unwrap().map(|(name, _)| name)
    }

    #[test]
    fn the_proxy_is_chosen_by_scheme_and_no_proxy_as_curl_does() {
        let all =
            [("HTTPS_PROXY", "http://p:3128"), ("http_proxy", "http://q:3128"), ("ALL_PROXY", "http://r:1")];
        assert_eq!(chosen("https://a.example.com", &all).as_deref(), Some("HTTPS_PROXY"));
        assert_eq!(chosen("http://a.example.com", &all).as_deref(), Some("http_proxy"));
        assert_eq!(chosen("http://a.example.com", &all[..1]), None);
        assert_eq!(chosen("http://a.example.com", &[all[2]]).as_deref(), Some("ALL_PROXY"));
        for no_proxy in ["example.com", ".example.com", "x.org, a.example.com:443", "*"] {
            let vars = [all[0], ("NO_PROXY", no_proxy)];
            assert_eq!(chosen("https://a.example.com", &vars), None, "{no_proxy}");
        }
        assert!(chosen("https://a.example.com", &[all[0], ("no_proxy", "ample.com,other")]).is_some());
        for no_proxy in ["EXAMPLE.COM", "example.com.", ".Example.Com.:443"] {
            assert_eq!(
                chosen("https://A.Example.com.", &[all[0], ("NO_PROXY", no_proxy)]),
                None,
                "{no_proxy}"
            );
        }
        assert!(chosen("https://a.example.com", &[all[0], ("no_proxy", " ")]).is_some());
    }

    /// curl ignores an upper-case `HTTP_PROXY` (httpoxy: under CGI it comes from a request
    /// header), so it must not carry a token to a proxy for an http URL.
    #[test]
    fn upper_case_http_proxy_is_ignored_as_curl_ignores_it() {
        assert_eq!(chosen("http://a.example.com", &[("HTTP_PROXY", "http://evil:1")]), None);
        assert_eq!(
            chosen("http://a.example.com", &[("HTTP_PROXY", "http://evil:1"), ("ALL_PROXY", "http://p:1")])
                .as_deref(),
            Some("ALL_PROXY")
        );
        assert_eq!(chosen("https://a.example.com", &[("HTTP_PROXY", "http://evil:1")]), None);
    }

    #[test]
    fn no_proxy_takes_addresses_and_cidr_ranges() {
        let proxy = ("ALL_PROXY", "http://p:1");
        for (url, no_proxy) in [
            ("http://127.0.0.1:8080", "127.0.0.0/8"),
            ("http://127.0.0.1:8080", "127.0.0.1"),
            ("http://10.1.2.3", "192.168.0.0/16, 10.0.0.0/8"),
            ("http://[::1]:8080", "::1/128"),
            ("http://[::1]:8080", "::1"),
            ("http://[::1]:8080", "[::1]"),
            ("http://[fd00::5]", "fd00::/8"),
            ("http://10.1.2.3", "0.0.0.0/0"),
            ("http://127.000.000.001:8080", "127.0.0.1"),
            ("http://0x7f.1:8080", "127.0.0.1:8080"),
            ("http://2130706433", "127.0.0.0/8"),
            ("http://127.0.0.1", "127.1"),
            ("http://127.0.0.1", "0177.0.0.1/32"),
            ("http://[0:0:0:0:0:0:0:1]:8080", "::1"),
            ("http://[::1]", "[0:0::1]:8080"),
            // An IPv4-mapped IPv6 address is the IPv4 address, on either side.
            ("http://[::ffff:127.0.0.1]:8080", "127.0.0.1"),
            ("http://[::ffff:7f00:1]", "127.0.0.0/8"),
            ("http://127.0.0.1", "::ffff:127.0.0.1"),
            ("http://127.0.0.1", "[::ffff:7f00:1]:8080"),
            ("http://10.1.2.3", "::ffff:10.0.0.0/104"),
            ("http://[::ffff:10.1.2.3]", "::ffff:10.0.0.0/104"),
        ] {
            assert_eq!(chosen(url, &[proxy, ("NO_PROXY", no_proxy)]), None, "{url} {no_proxy}");
        }
        for (url, no_proxy) in [
            ("http://128.0.0.1", "127.0.0.0/8"),
            ("http://127.0.0.1", "::1/128"),
            ("http://10.1.2.3", "10.0.0.0/33"),
            ("http://10.1.2.3", "10.0.0.0/x"),
            ("http://host.example", "10.0.0.0/8"),
            ("http://[::2]", "::1"),
            // An address is never matched as a name by its last labels.
            ("http://10.0.0.1", "0.0.1"),
            ("http://127.0.0.1", "localhost"),
            ("http://[::ffff:128.0.0.1]", "127.0.0.0/8"),
            ("http://[::ffff:10.1.2.3]", "::ffff:10.0.0.0/120"),
        ] {
            assert!(chosen(url, &[proxy, ("NO_PROXY", no_proxy)]).is_some(), "{url} {no_proxy}");
        }
    }

    #[test]
    fn socks_proxies_are_taken_and_other_schemes_refused() {
        for url in ["socks5h://127.0.0.1:1080", "socks5://u:p@h:1", "socks4a://h:1", "socks://h"] {
            assert_eq!(chosen("https://a.example.com", &[("ALL_PROXY", url)]).as_deref(), Some("ALL_PROXY"));
        }
        let base = BaseUrl::parse("https://a.example.com", "--api-url").unwrap();
        let env = |name: &str| (name == "ALL_PROXY").then(|| "ftp://h:21".to_string());
        let e = proxy_for(&base, &env).err().unwrap().to_string();
        assert!(e.contains("not supported") && e.contains("ftp"), "{e}");
    }

    #[test]
    fn server_text_is_masked_before_it_is_cut_and_escaped() {
        let token = format!("tok{}", "x".repeat(372));
        crate::redact::register_secret(&token);
        let shown = from_server(&format!("{} {token}", "y".repeat(250)), DETAIL_CHARS);
        assert!(!shown.contains("tokxxx") && shown.contains("***"), "{shown}");
        assert_eq!(from_server("a\x1b[31mred\x07", 50), "a\\x1b[31mred\\x07");
        crate::redact::register_secret("Pässwörd\"\\x");
        let answer = Answer {
            sent: 1,
            did_nothing: false,
            status: 401,
            json: Some(
                json::parse(
                    r#"{"error": {"password": "P\u00e4ssw\u00f6rd\"\\x", "again": ["Pässwörd\"\\x"]}}"#,
                )
                .unwrap(),
            ),
        };
        let said = detail(&answer);
        assert_eq!(said, r#"{"error": {"password": "***", "again": ["***"]}}"#);
    }
}
