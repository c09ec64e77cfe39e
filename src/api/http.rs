//! HTTP for the REST transport: one keep-alive agent per process, bounded waits, retries of
//! what is safe to retry, and every answer turned into JSON or into an error kind with its
//! exit code (docs/rest.md#errors).
//!
//! Every request this tool sends is idempotent (GET, PUT, PATCH, DELETE, and the token
//! exchange, which only mints a token), so a connection that could not be made, and a 502,
//! 503 or 504 from a proxy in front of the server, are retried [`RETRIES`] times with a
//! growing pause. Nothing else is: a 4xx is the server's answer, and a timed-out request may
//! have been carried out already.

use std::io::Read as _;
use std::time::{Duration, Instant};

use ureq::http::{Method, Response};
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
use ureq::{Agent, Body, Proxy};

use super::url::{BaseUrl, Target};
use crate::error::{Error, Result};
use crate::json::{self, Value};
use crate::output;
use crate::text;

/// Retries after the first try, for a connection that could not be made or a 502/503/504.
pub(crate) const RETRIES: u32 = 3;
/// The pause before the first retry; each next one doubles it (0.5 s, 1 s, 2 s).
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The largest answer read: a page of 100 values of 64 KiB, each escaped, fits many times.
const MAX_BODY: u64 = 256 * 1024 * 1024;
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
        let proxy = proxy_for(&base, &|name| std::env::var(name).ok())?;
        if settings.verbose
            && let Some((variable, _)) = &proxy
        {
            output::note(&format!("api: through the proxy of ${variable}"));
        }
        let (proxy_name, proxy) = proxy.map_or((None, None), |(name, proxy)| (Some(name), Some(proxy)));
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
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = self.once(&method, &shown, text.as_deref(), authorized);
            let elapsed = started.elapsed().as_millis();
            match result {
                Ok(response) => {
                    let status = response.status().as_u16();
                    if self.settings.verbose {
                        output::note(&format!("api: {method} {shown} -> {status} ({elapsed} ms)"));
                    }
                    if matches!(status, 502..=504) && attempt <= RETRIES {
                        self.pause(&mut pause, &format!("{status}"));
                        continue;
                    }
                    return read_answer(response, &method, &shown);
                }
                Err(e) => {
                    let why = self.describe(&e);
                    if self.settings.verbose {
                        output::note(&format!("api: {method} {shown} -> {why} ({elapsed} ms)"));
                    }
                    if is_connect_error(&e) && attempt <= RETRIES {
                        self.pause(&mut pause, &why);
                        continue;
                    }
                    let tries = if is_connect_error(&e) {
                        format!(" after {} tries", RETRIES + 1)
                    } else {
                        String::new()
                    };
                    let through = self
                        .proxy
                        .as_ref()
                        .map(|name| format!(" through the proxy of ${name}"))
                        .unwrap_or_default();
                    return Err(
                        Error::Remote(format!("{method} {shown} failed{through}{tries}: {why}")).into()
                    );
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

    /// A transport error in words, a timeout with the flag that bounds it.
    fn describe(&self, e: &ureq::Error) -> String {
        match e {
            ureq::Error::Timeout(ureq::Timeout::Connect) => format!(
                "no connection within {} s (--api-connect-timeout)",
                self.settings.connect_timeout.as_secs()
            ),
            ureq::Error::Timeout(_) => {
                format!("no answer within {} s (--api-timeout)", self.settings.timeout.as_secs())
            }
            other => describe_error(other),
        }
    }

    fn pause(&self, pause: &mut Duration, why: &str) {
        if self.settings.verbose {
            output::note(&format!("api: {why}; retrying in {} ms", pause.as_millis()));
        }
        std::thread::sleep(*pause);
        *pause *= 2;
    }
}

/// The proxy for the base URL, chosen as curl chooses it: `https_proxy` (or `HTTPS_PROXY`)
/// for an https URL, `http_proxy` (or `HTTP_PROXY`) for an http one, else `all_proxy` (or
/// `ALL_PROXY`); none when `no_proxy` (or `NO_PROXY`) names the host: `*`, the host itself,
/// or a domain it is in (`example.com` and `.example.com` both take `api.example.com`).
/// Returns the variable it came from, for `-v`.
fn proxy_for(base: &BaseUrl, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<(String, Proxy)>> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let host = base.host();
    let excluded = set("no_proxy").or_else(|| set("NO_PROXY")).is_some_and(|list| {
        list.split(',').map(|e| e.trim().trim_start_matches('.').to_ascii_lowercase()).any(|entry| {
            let entry = entry.split_once(':').map_or(entry.as_str(), |(host, _)| host).to_string();
            entry == "*" || (!entry.is_empty() && (host == entry || host.ends_with(&format!(".{entry}"))))
        })
    });
    if excluded {
        return Ok(None);
    }
    let names: &[&str] = if base.is_https() {
        &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    } else {
        &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
    };
    let Some((name, url)) = names.iter().find_map(|name| set(name).map(|url| (*name, url))) else {
        return Ok(None);
    };
    if let Some((_, password)) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
    {
        crate::redact::register_secret(password);
    }
    let proxy = Proxy::new(url.trim()).map_err(|e| Error::Usage(format!("invalid proxy in ${name}: {e}")))?;
    Ok(Some((name.to_string(), proxy)))
}

/// A connection that was never made: nothing reached the server, so a retry is safe.
fn is_connect_error(e: &ureq::Error) -> bool {
    use std::io::ErrorKind;
    match e {
        // A host that does not resolve is a wrong URL far more often than a passing fault.
        ureq::Error::ConnectionFailed => true,
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::NotConnected
        ),
        _ => false,
    }
}

/// A transport error in words.
fn describe_error(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(which) => format!("timed out ({which})"),
        ureq::Error::HostNotFound => "host not found".to_string(),
        ureq::Error::ConnectionFailed => "connection failed".to_string(),
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// Reads an answer: JSON, or nothing for an empty body. A body that is not JSON is not
/// Airflow's API talking (an HTML page from the UI's catch-all route, a proxy's page).
fn read_answer(response: Response<Body>, method: &Method, shown: &str) -> Result<Answer> {
    let status = response.status().as_u16();
    if (300..400).contains(&status) {
        let location =
            response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("elsewhere");
        // What to give as --api-url: the new address without the path this request asked for.
        let path = shown.split_once("://").and_then(|(_, rest)| rest.find("/api/v2/").map(|i| &rest[i..]));
        let base = path.and_then(|p| {
            location.split('?').next().and_then(|l| l.strip_suffix(p.split('?').next().unwrap_or(p)))
        });
        let advice = match base {
            Some(base) => format!("; give --api-url {}", text::cut(base, DETAIL_CHARS)),
            None => String::new(),
        };
        return Err(Error::Remote(format!(
            "{method} {shown} answered {status}, a redirect to {}, which is not followed{advice}",
            text::cut(location, DETAIL_CHARS)
        ))
        .into());
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut bytes = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::Remote(format!("cannot read the answer of {method} {shown}: {e}")))?;
    if bytes.is_empty() {
        return Ok(Answer { status, json: None });
    }
    let is_json = content_type.starts_with("application/json") || content_type.contains("+json");
    if !is_json {
        let what = if content_type.starts_with("text/html") {
            "an HTML page".to_string()
        } else {
            format!(
                "a body that is not JSON (Content-Type {})",
                if content_type.is_empty() { "none" } else { &content_type }
            )
        };
        let hint = if (200..300).contains(&status) {
            ": this is not Airflow's API; does --api-url lack the deployment's path prefix, or name another server?"
        } else {
            ""
        };
        let message = format!("{method} {shown} answered {status} with {what}{hint}");
        // Not Airflow's API talking (Airflow answers JSON, errors too): a proxy's or another
        // server's page. Only a refused login keeps its own code.
        return Err(match status {
            401 | 403 => Error::Auth(message),
            _ => Error::Remote(message),
        }
        .into());
    }
    let text = String::from_utf8_lossy(&bytes);
    let value = json::parse(&text).map_err(|e| {
        Error::Remote(format!("{method} {shown} answered {status} with JSON that cannot be read: {e}"))
    })?;
    Ok(Answer { status, json: Some(value) })
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
/// value); cut to [`DETAIL_CHARS`].
pub(crate) fn detail(answer: &Answer) -> String {
    let said = match answer.json.as_ref().and_then(|j| j.get("detail")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(errors)) => errors
            .iter()
            .map(|e| {
                let place: Vec<String> = e
                    .get("loc")
                    .and_then(Value::as_array)
                    .map(|loc| {
                        loc.iter()
                            .filter(|p| p.as_str() != Some("body"))
                            .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let msg = e.get("msg").and_then(Value::as_str).unwrap_or("invalid");
                if place.is_empty() { msg.to_string() } else { format!("{}: {msg}", place.join(".")) }
            })
            .collect::<Vec<_>>()
            .join("; "),
        Some(other) => json::dumps(other),
        None => answer.json.as_ref().map(json::dumps).unwrap_or_default(),
    };
    let line: String = said.split_whitespace().collect::<Vec<_>>().join(" ");
    text::cut(&line, DETAIL_CHARS)
}

/// The certificates of a PEM file, for `--api-ca-file`.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<Certificate<'static>>> {
    let shown = path.display();
    let pem =
        std::fs::read(path).map_err(|e| Error::Usage(format!("cannot read --api-ca-file {shown}: {e}")))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Usage(format!("--api-ca-file {shown} is not a PEM file: {e}")).into());
            }
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
        assert!(chosen("https://a.example.com", &[all[0], ("no_proxy", " ")]).is_some());
    }
}
