//! A TCP proxy between the tool and a database server that can stall: on [`Proxy::stall`] it
//! stops forwarding in both directions without closing anything, as a NAT that dropped its
//! mapping, a firewall or a failover without a reset leaves a connection. Both kernels keep
//! acknowledging what reaches them, so TCP keepalives and `tcp_user_timeout` see nothing wrong:
//! only the tool's own bounds end a command then.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    stalled: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `target`.
    pub fn to(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let stalled = Arc::new(AtomicBool::new(false));
        let target = target.to_string();
        let flag = Arc::clone(&stalled);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&target) else { continue };
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (from, to) = (from.try_clone().expect("clone"), to.try_clone().expect("clone"));
                    let flag = Arc::clone(&flag);
                    std::thread::spawn(move || pump(from, to, &flag));
                }
                // The sockets stay open as long as the pumps hold their clones: a stalled
                // connection is never closed by the proxy.
            }
        });
        Proxy { port, stalled }
    }

    /// From now on nothing more is forwarded, in either direction, on any connection.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, stalled: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0_u8; 16384];
    loop {
        if stalled.load(Ordering::SeqCst) {
            // Holds both sockets, reading nothing, until the test process ends.
            std::thread::sleep(Duration::from_secs(3600));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
            Ok(n) => {
                if stalled.load(Ordering::SeqCst) {
                    // Read just as the stall began: dropped, as a dead link would.
                    continue;
                }
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}
