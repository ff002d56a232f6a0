//! A TCP proxy that puts a link of limited bandwidth and added latency between
//! a client and a server on loopback, for benchmarks of loading from object
//! storage (scripts/bench/s3_load.sh): every byte from the server to any
//! client shares one budget of RATE bytes per second, and each request (a
//! write from a client) waits LATENCY milliseconds before it is sent on.
//!
//!   throttle_proxy LISTEN_PORT UPSTREAM_PORT RATE_MBIT LATENCY_MS STATS_PORT
//!
//! RATE_MBIT 0 means unlimited. A connection to STATS_PORT reads the counters
//! since the last such read, `bytes_down requests`, and resets them.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How far behind the link's schedule a sender may be and catch up: a
/// burst of at most this much time's bytes (a token bucket of 1 ms).
const SLACK: Duration = Duration::from_millis(1);

/// The shared link: bytes per second and when the bytes sent so far have
/// gone through it.
struct Link {
    rate: f64,
    free_at: Mutex<Instant>,
    latency: Duration,
    bytes_down: AtomicU64,
    requests: AtomicU64,
}

impl Link {
    /// Waits until `n` more bytes fit through the link.
    fn pass(&self, n: usize) {
        self.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
        if self.rate == 0.0 {
            return;
        }
        let until = {
            let mut free_at = self.free_at.lock().unwrap();
            // A link idle for less than SLACK has lost nothing: one stream
            // whose copying and waking take a little time (as a sender's
            // next packet does) still fills the link, as TCP fills a real one.
            let start = (*free_at).max(Instant::now() - SLACK);
            *free_at = start + Duration::from_secs_f64(n as f64 / self.rate);
            *free_at
        };
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

fn arg(args: &[String], i: usize, what: &str) -> u64 {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i}: {what} (see the doc comment)"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listen = arg(&args, 1, "LISTEN_PORT") as u16;
    let upstream = arg(&args, 2, "UPSTREAM_PORT") as u16;
    let link = Arc::new(Link {
        rate: arg(&args, 3, "RATE_MBIT") as f64 * 1e6 / 8.0,
        free_at: Mutex::new(Instant::now()),
        latency: Duration::from_millis(arg(&args, 4, "LATENCY_MS")),
        bytes_down: AtomicU64::new(0),
        requests: AtomicU64::new(0),
    });
    let stats = TcpListener::bind(("127.0.0.1", arg(&args, 5, "STATS_PORT") as u16)).unwrap();
    let counters = link.clone();
    std::thread::spawn(move || {
        for mut conn in stats.incoming().flatten() {
            let down = counters.bytes_down.swap(0, Ordering::Relaxed);
            let requests = counters.requests.swap(0, Ordering::Relaxed);
            let _ = writeln!(conn, "{down} {requests}");
        }
    });
    let listener = TcpListener::bind(("127.0.0.1", listen)).unwrap();
    for client in listener.incoming().flatten() {
        let link = link.clone();
        std::thread::spawn(move || relay(client, upstream, &link));
    }
}

fn relay(client: TcpStream, upstream: u16, link: &Arc<Link>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut from_server, mut to_client) =
        (server.try_clone().unwrap(), client.try_clone().unwrap());
    let down = link.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = from_server.read(&mut buf) {
            down.pass(n);
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let (mut from_client, mut to_server) = (client, server);
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n @ 1..) = from_client.read(&mut buf) {
        // A request starts with its method; a body's later writes do not.
        const METHODS: [&[u8]; 5] = [b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE "];
        if METHODS.iter().any(|m| buf[..n].starts_with(m)) {
            link.requests.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(link.latency);
        if to_server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to_server.shutdown(Shutdown::Both);
}
