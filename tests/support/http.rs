//! An HTTP server for the REST transport's fault tests: it answers what a test tells it to
//! (an HTML page, a 503, a redirect, silence, a body without end, a drip, a reset) and
//! records every request, so that a test can say what reached the network and what never
//! did. Airflow's real API is exercised by the interoperability tier
//! (tests/interop/test_rest.py); this one plays only the edges a real server will not produce
//! on demand, as curl's and hyper's own test servers misbehave on purpose. [`Socks5`] is a
//! SOCKS5 proxy in front of it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// What the server does with a request: answer with a whole HTTP response, or say nothing
/// and keep the connection open.
pub enum Reply {
    Send(String),
    /// A response that need not be UTF-8.
    Bytes(Vec<u8>),
    /// `head` (the status line and headers, without the blank line), then a body of `chunk`
    /// repeated `times` times (`u64::MAX`: without end), `every` apart.
    Stream {
        head: String,
        chunk: Vec<u8>,
        times: u64,
        every: std::time::Duration,
    },
    Silence,
    /// The connection closed without a word, after the request was read: what a client sees
    /// of a gateway that forwarded it and then lost the connection.
    Close,
}

pub struct FakeApi {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

/// The answer to `n`-th request (from 0), decided by the test.
type Responder = dyn Fn(&Request, usize) -> Reply + Send + Sync;

impl FakeApi {
    pub fn start(respond: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake API");
        let url = format!("http://127.0.0.1:{}", listener.local_addr().expect("address").port());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let respond: Arc<Responder> = Arc::new(respond);
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, respond) = (Arc::clone(&seen), Arc::clone(&respond));
                std::thread::spawn(move || serve(stream, &seen, &*respond));
            }
        });
        FakeApi { url, requests }
    }

    /// A server that speaks for Airflow 3.3.2 at `/api/v2/version` and answers everything
    /// else with `rest`.
    pub fn airflow(rest: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> FakeApi {
        FakeApi::start(move |request, n| {
            if request.target == "/api/v2/version" {
                Reply::Send(json(200, r#"{"version": "3.3.2", "git_version": null}"#))
            } else {
                rest(request, n)
            }
        })
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Request>>, respond: &Responder) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    loop {
        let Some(request) = read_request(&mut reader) else { return };
        let n = {
            let mut seen = seen.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        match respond(&request, n) {
            Reply::Send(response) => {
                if writer.write_all(response.as_bytes()).is_err() {
                    return;
                }
            }
            Reply::Bytes(response) => {
                if writer.write_all(&response).is_err() {
                    return;
                }
            }
            Reply::Stream { head, chunk, times, every } => {
                if writer.write_all(format!("{head}\r\n\r\n").as_bytes()).is_err() {
                    return;
                }
                for _ in 0..times {
                    if writer.write_all(&chunk).is_err() {
                        return;
                    }
                    if !every.is_zero() {
                        std::thread::sleep(every);
                    }
                }
            }
            Reply::Close => return,
            Reply::Silence => {
                // Holds the connection open and never answers.
                std::thread::sleep(std::time::Duration::from_secs(120));
                return;
            }
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, target, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// A whole response with a body of `content_type`.
pub fn response(status: u16, content_type: &str, body: &str, extra: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

pub fn json(status: u16, body: &str) -> String {
    response(status, "application/json", body, "")
}

pub fn html(status: u16, body: &str) -> String {
    response(status, "text/html; charset=utf-8", body, "")
}

pub fn no_content() -> String {
    "HTTP/1.1 204 No Content\r\n\r\n".to_string()
}

/// A SOCKS5 proxy (RFC 1928, no authentication) on a free port of 127.0.0.1 that connects
/// each client to the address it asks for, by name or by number, and counts the connections.
pub struct Socks5 {
    pub port: u16,
    connections: Arc<Mutex<Vec<String>>>,
}

impl Socks5 {
    pub fn start() -> Socks5 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the SOCKS proxy");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&connections);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || {
                    let _ = socks5_session(client, &seen);
                });
            }
        });
        Socks5 { port, connections }
    }

    /// The `host:port` each client asked for.
    pub fn connections(&self) -> Vec<String> {
        self.connections.lock().unwrap().clone()
    }
}

fn socks5_session(mut client: TcpStream, seen: &Mutex<Vec<String>>) -> std::io::Result<()> {
    let mut head = [0_u8; 2];
    client.read_exact(&mut head)?;
    let mut methods = vec![0_u8; usize::from(head[1])];
    client.read_exact(&mut methods)?;
    client.write_all(&[5, 0])?;
    let mut request = [0_u8; 4];
    client.read_exact(&mut request)?;
    let host = match request[3] {
        1 => {
            let mut ip = [0_u8; 4];
            client.read_exact(&mut ip)?;
            std::net::Ipv4Addr::from(ip).to_string()
        }
        3 => {
            let mut len = [0_u8; 1];
            client.read_exact(&mut len)?;
            let mut name = vec![0_u8; usize::from(len[0])];
            client.read_exact(&mut name)?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return Ok(()),
    };
    let mut port = [0_u8; 2];
    client.read_exact(&mut port)?;
    let target = format!("{host}:{}", u16::from_be_bytes(port));
    seen.lock().unwrap().push(target.clone());
    let server = TcpStream::connect(&target)?;
    client.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0])?;
    let (mut c2, mut s2) = (client.try_clone()?, server.try_clone()?);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut s2);
        let _ = s2.shutdown(std::net::Shutdown::Write);
    });
    let (mut s3, mut c3) = (server, client);
    let _ = std::io::copy(&mut s3, &mut c3);
    Ok(())
}
