//! Certificates and a stand-in database server that speaks TLS, for the tests of whom a
//! connection trusts: a CA the user names (`sslrootcert`, `ssl_ca`), a CA the system store
//! would supply (OpenSSL reads `SSL_CERT_FILE`), and a server certificate from either.
//!
//! The stand-in answers only the opening of each protocol: PostgreSQL's `SSLRequest` (it
//! says `S`), MySQL's greeting with the SSL capability and the client's SSL request; then the
//! TLS handshake. What the client sends after the handshake (PostgreSQL's startup message and
//! password, MySQL's login packet) is recorded, so a test can tell a refused handshake from
//! one that passed. Every read and write has a timeout; the listener is on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};

/// How long the stand-in waits for any one read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A CA made with the `openssl` command: its certificate and key.
pub struct Ca {
    pub cert: PathBuf,
    key: PathBuf,
}

/// Runs `openssl` with `args`, each `{}` in them replaced by the next of `paths`.
fn openssl(args: &[&str], paths: &[&Path]) {
    let mut paths = paths.iter();
    let line: Vec<std::ffi::OsString> = args
        .iter()
        .map(|a| if *a == "{}" { paths.next().unwrap().as_os_str().to_owned() } else { a.into() })
        .collect();
    let out = Command::new("openssl").args(&line).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

const KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

impl Ca {
    /// A self-signed CA named `name`, in `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-subj"];
        let subject = format!("/CN={name}");
        args.push(&subject);
        args.extend(KEY);
        args.extend(["-keyout", "{}", "-out", "{}"]);
        openssl(&args, &[&key, &cert]);
        Ca { cert, key }
    }

    /// A server certificate for 127.0.0.1 (subject and IP SAN) this CA signs: (cert, key).
    pub fn server(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"];
        args.extend(KEY);
        args.extend([
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ]);
        args.extend(["-CA", "{}", "-CAkey", "{}", "-keyout", "{}", "-out", "{}"]);
        openssl(&args, &[&self.cert, &self.key, &key, &cert]);
        (cert, key)
    }
}

/// The protocol the stand-in opens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Postgres,
    Mysql,
}

/// What one connection came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The TLS handshake failed (the client refused the certificate, or went away).
    Refused(String),
    /// The handshake passed; the bytes the client sent after it.
    Passed(Vec<u8>),
}

pub struct StandIn {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections taken from the listener, whether or not their outcome is in `seen` yet.
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    /// Listens on 127.0.0.1 (a free port), presenting `cert` (with `key`) to every client.
    pub fn start(wire: Wire, cert: &Path, key: &Path) -> StandIn {
        let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
        acceptor.set_certificate_chain_file(cert).unwrap();
        acceptor.set_private_key_file(key, SslFiletype::PEM).unwrap();
        let acceptor = acceptor.build();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stand-in");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (record, stopped, count) = (Arc::clone(&seen), Arc::clone(&stop), Arc::clone(&accepted));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let outcome = serve(wire, &acceptor, stream);
                record.lock().unwrap().push(outcome);
            }
        });
        StandIn { port, seen, accepted, stop }
    }

    /// What each connection so far came to, and forgets them. The client may have ended before
    /// the stand-in's thread took its connection or recorded how the handshake went, so this
    /// waits (up to `IO_TIMEOUT`) for at least one outcome and for every connection taken.
    pub fn take(&self) -> Vec<Seen> {
        let deadline = std::time::Instant::now() + IO_TIMEOUT;
        loop {
            let mut seen = self.seen.lock().unwrap();
            let settled = !seen.is_empty() && seen.len() >= self.accepted.load(Ordering::SeqCst);
            if settled || std::time::Instant::now() >= deadline {
                self.accepted.fetch_sub(seen.len(), Ordering::SeqCst);
                return std::mem::take(&mut *seen);
            }
            drop(seen);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the listener so that its thread ends.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A MySQL greeting (HandshakeV10, sequence 0) offering TLS: protocol 41, secure connection,
/// plugin auth with `mysql_native_password`.
fn mysql_greeting() -> Vec<u8> {
    // CLIENT_LONG_PASSWORD | LONG_FLAG | CONNECT_WITH_DB | PROTOCOL_41 | SSL | TRANSACTIONS |
    // SECURE_CONNECTION | MULTI_RESULTS | PLUGIN_AUTH
    let caps: u32 = 0x1 | 0x4 | 0x8 | 0x200 | 0x800 | 0x2000 | 0x8000 | 0x2_0000 | 0x8_0000;
    let mut p = vec![10];
    p.extend(b"8.0.36-stand-in\0");
    p.extend(7u32.to_le_bytes());
    p.extend(b"abcdefgh\0");
    p.extend(&caps.to_le_bytes()[..2]);
    p.push(45); // utf8mb4_general_ci
    p.extend(2u16.to_le_bytes()); // SERVER_STATUS_AUTOCOMMIT
    p.extend(&caps.to_le_bytes()[2..]);
    p.push(21);
    p.extend([0; 10]);
    p.extend(b"ijklmnopqrst\0");
    p.extend(b"mysql_native_password\0");
    let mut packet = u32::try_from(p.len()).unwrap().to_le_bytes()[..3].to_vec();
    packet.push(0);
    packet.extend(p);
    packet
}

/// One MySQL packet: its header and payload.
fn mysql_packet(stream: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut header = [0; 4];
    stream.read_exact(&mut header)?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut packet = header.to_vec();
    packet.resize(4 + len, 0);
    stream.read_exact(&mut packet[4..])?;
    Ok(packet)
}

/// One PostgreSQL message without a type byte (the startup message): length, then the rest.
fn pg_untyped(stream: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0; 4];
    stream.read_exact(&mut len)?;
    let n = usize::try_from(u32::from_be_bytes(len)).unwrap().clamp(4, 1 << 16);
    let mut message = len.to_vec();
    message.resize(n, 0);
    stream.read_exact(&mut message[4..])?;
    Ok(message)
}

fn serve(wire: Wire, acceptor: &SslAcceptor, mut stream: TcpStream) -> Seen {
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let opened = match wire {
        Wire::Postgres => {
            let mut request = [0; 8];
            stream.read_exact(&mut request).and_then(|()| {
                assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47], "an SSLRequest");
                stream.write_all(b"S")
            })
        }
        Wire::Mysql => stream.write_all(&mysql_greeting()).and_then(|()| {
            let request = mysql_packet(&mut stream)?;
            assert!(request.len() == 36 && request[4 + 1] & 0x08 != 0, "an SSL request: {request:?}");
            Ok(())
        }),
    };
    if let Err(e) = opened {
        return Seen::Refused(format!("before TLS: {e}"));
    }
    let mut tls = match acceptor.accept(stream) {
        Ok(tls) => tls,
        Err(e) => return Seen::Refused(e.to_string()),
    };
    let mut after = Vec::new();
    match wire {
        Wire::Postgres => {
            // The startup message; then ask for the password in clear, as a server may.
            if let Ok(startup) = pg_untyped(&mut tls) {
                after.extend(startup);
                if tls.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).is_ok() {
                    let mut kind = [0; 1];
                    if tls.read_exact(&mut kind).is_ok() {
                        after.push(kind[0]);
                        after.extend(pg_untyped(&mut tls).unwrap_or_default());
                    }
                }
            }
        }
        Wire::Mysql => after.extend(mysql_packet(&mut tls).unwrap_or_default()),
    }
    let _ = tls.shutdown();
    Seen::Passed(after)
}
