//! The HTTP listener of `serve --metrics ADDR`: one thread that answers `GET /metrics`
//! with a page the caller renders, 404 for any other path, 405 for another method.
//!
//! It never touches the serving loop's state: the page comes from a closure that reads
//! what the loop last published (`cluster::run::scrape`). Connections are served one
//! at a time with short read and write timeouts ([`METRICS_IO_TIMEOUT_MS`]) and a
//! request head of at most [`METRICS_REQUEST_BYTES_MAX`], so a client that stalls or
//! floods costs this thread at most a timeout and the serving loop nothing.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::exposition::CONTENT_TYPE;
use crate::limits::{METRICS_IO_TIMEOUT_MS, METRICS_REQUEST_BYTES_MAX};
use crate::Error;

const IO_TIMEOUT: Duration = Duration::from_millis(METRICS_IO_TIMEOUT_MS);

/// The running listener; stopped and joined on drop.
#[derive(Debug)]
pub struct MetricsHttp {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsHttp {
    /// Listens on `addr` (`HOST:PORT`; port 0 picks a free one, see
    /// [`MetricsHttp::local_addr`]) and answers every `GET /metrics` with `render()`.
    pub fn start(addr: &str, render: impl FnMut() -> String + Send + 'static) -> Result<Self, Error> {
        let bad = |source| Error::MetricsAddress { addr: addr.to_owned(), source };
        let wanted = addr.to_socket_addrs().map_err(bad)?.next().ok_or_else(|| {
            bad(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the name resolves to no address"))
        })?;
        let listener = TcpListener::bind(wanted).map_err(|source| Error::MetricsBind { addr: wanted, source })?;
        let addr = listener.local_addr().map_err(|source| Error::MetricsBind { addr: wanted, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn({
                let stop = Arc::clone(&stop);
                move || accept_loop(&listener, &stop, render)
            })
            .map_err(|source| Error::MetricsBind { addr, source })?;
        Ok(Self { addr, stop, thread: Some(thread) })
    }

    /// The address it listens on (with the port picked, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the thread out of accept(); it sees `stop` and returns.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let woken = TcpStream::connect_timeout(&wake, IO_TIMEOUT).is_ok();
        if let Some(thread) = self.thread.take() {
            if woken {
                let _ = thread.join();
            }
        }
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool, mut render: impl FnMut() -> String) {
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match stream {
            Ok(stream) => {
                if let Err(e) = answer(stream, &mut render) {
                    tracing::debug!("metrics: a request failed: {e}");
                }
            }
            // Out of descriptors or the like: do not spin on it.
            Err(e) => {
                tracing::warn!("metrics: accept failed: {e}");
                std::thread::sleep(IO_TIMEOUT);
            }
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET /metrics` (or `HEAD`: no body).
    Metrics { body: bool },
    /// Another path.
    NotFound,
    /// Another method on `/metrics`.
    MethodNotAllowed,
    /// Not an HTTP request line.
    BadRequest,
}

/// Routes the request line of `head`.
fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else { return Route::BadRequest };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Route::BadRequest;
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics { body: true },
        ("HEAD", "/metrics") => Route::Metrics { body: false },
        (_, "/metrics") => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

fn answer(mut stream: TcpStream, render: &mut impl FnMut() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = [0u8; METRICS_REQUEST_BYTES_MAX];
    let mut len = 0;
    // Read until the end of the head; a head larger than the buffer is refused.
    while !head[..len].windows(4).any(|w| w == b"\r\n\r\n") && !head[..len].windows(2).any(|w| w == b"\n\n") {
        if len == head.len() {
            respond(&mut stream, "431 Request Header Fields Too Large", "text/plain", b"head too large\n")?;
            // Closing with unread bytes would reset the connection and lose the answer:
            // read a bounded amount more first (the timeout bounds the time).
            stream.shutdown(std::net::Shutdown::Write)?;
            for _ in 0..4 {
                if stream.read(&mut head)? == 0 {
                    break;
                }
            }
            return Ok(());
        }
        let n = stream.read(&mut head[len..])?;
        if n == 0 {
            break;
        }
        len += n;
    }
    match route(&head[..len]) {
        Route::Metrics { body } => {
            let page = render();
            let bytes = if body { page.as_bytes() } else { &[] };
            respond_sized(&mut stream, "200 OK", CONTENT_TYPE, page.len(), bytes)
        }
        Route::NotFound => respond(&mut stream, "404 Not Found", "text/plain", b"only /metrics is served here\n"),
        Route::MethodNotAllowed => respond(&mut stream, "405 Method Not Allowed", "text/plain", b"use GET\n"),
        Route::BadRequest => respond(&mut stream, "400 Bad Request", "text/plain", b"not an HTTP/1 request\n"),
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    respond_sized(stream, status, content_type, body.len(), body)
}

fn respond_sized(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    length: usize,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn request_lines_are_routed_by_method_and_path() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Route::Metrics { body: true });
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics { body: true });
        assert_eq!(route(b"HEAD /metrics HTTP/1.1\r\n\r\n"), Route::Metrics { body: false });
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::MethodNotAllowed);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"GET /metricsx HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"hello\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(b""), Route::BadRequest);
        assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(&[0xff, b' ', b'/', b' ', b'H']), Route::BadRequest);
    }

    #[test]
    fn it_serves_the_page_and_404_and_reports_a_bound_address() {
        let mut calls = 0;
        let http = MetricsHttp::start("127.0.0.1:0", move || {
            calls += 1;
            format!("page {calls}\n")
        })
        .unwrap();
        let addr = http.local_addr();
        assert_ne!(addr.port(), 0);
        let ok = fetch(addr, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4") && ok.ends_with("\r\n\r\npage 1\n"), "{ok}");
        let head = fetch(addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.contains("Content-Length: 7\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(fetch(addr, "GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(fetch(addr, "DELETE /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2 * METRICS_REQUEST_BYTES_MAX));
        assert!(fetch(addr, &huge).starts_with("HTTP/1.1 431 "));
        // A client that connects and says nothing costs a timeout, then the next is served.
        let idle = TcpStream::connect(addr).unwrap();
        assert!(fetch(addr, "GET /metrics HTTP/1.1\r\n\r\n").ends_with("page 3\n"));
        drop(idle);

        // The port is taken now: a second listener says so, naming the address.
        let taken = MetricsHttp::start(&addr.to_string(), String::new).unwrap_err();
        let text = crate::error::Report(&taken).to_string();
        assert!(text.contains(&addr.to_string()) && text.contains("another port"), "{text}");
        drop(http);
        assert!(TcpStream::connect(addr).is_err(), "the listener is closed on drop");
    }

    #[test]
    fn an_address_that_is_no_address_says_what_to_give() {
        for bad in ["9464", "localhost", "127.0.0.1:99999", ""] {
            let e = MetricsHttp::start(bad, String::new).unwrap_err();
            let text = crate::error::Report(&e).to_string();
            assert!(text.contains(bad) && text.contains("HOST:PORT"), "{text}");
        }
    }
}
