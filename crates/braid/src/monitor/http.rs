//! The monitor's HTTP listener: one thread accepts, each connection gets its own thread
//! (at most [`MAX_CONNECTIONS`], of which at most [`MAX_STREAMS`] are `/events` streams),
//! one request per connection (`Connection: close`). A request head is at most
//! [`HEAD_MAX`] bytes and must come within [`IO_TIMEOUT`]; requests are parsed by
//! `httparse`. With a token, every request must carry it (`Authorization: Bearer TOKEN`
//! or `?token=TOKEN`), compared in constant time.
//!
//! Why not `tiny_http`: it gives each connection a thread from a pool that grows without
//! bound; here the number of clients is bounded and a client over the bound is answered
//! 503 at once.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::assets;
use super::worker::Shared;
use crate::config::monitor::Token;

/// Most connections served at once (a connection over it gets a 503).
pub const MAX_CONNECTIONS: usize = 16;
/// Most `/events` streams at once.
pub const MAX_STREAMS: usize = 8;
/// Largest request head.
pub const HEAD_MAX: usize = 8192;
/// Time a client has to send its request, and to take each write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the connection threads share.
#[derive(Debug)]
pub struct Server {
    /// The monitor's state.
    pub shared: Arc<Shared>,
    token: Option<Token>,
    connections: AtomicUsize,
    /// Open `/events` streams.
    pub streams: AtomicUsize,
}

/// Start the listener's thread.
pub fn serve(
    listener: TcpListener,
    token: Option<Token>,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let server = Arc::new(Server {
        shared,
        token,
        connections: AtomicUsize::new(0),
        streams: AtomicUsize::new(0),
    });
    std::thread::Builder::new()
        .name("braid-monitor-http".into())
        .spawn(move || accept_loop(&listener, &server))
        .map_err(|e| anyhow::anyhow!("monitor: cannot start its listener thread: {e}"))?;
    Ok(())
}

fn accept_loop(listener: &TcpListener, server: &Arc<Server>) {
    loop {
        let Ok((conn, _)) = listener.accept() else {
            // EMFILE and the like: wait a little rather than spin.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
        let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
        let _ = conn.set_nodelay(true);
        if server.connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            server.connections.fetch_sub(1, Ordering::AcqRel);
            // Take what the client sent (a short wait at most), so that closing does not
            // reset the connection before the answer is read.
            let mut conn = conn;
            let _ = conn.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = conn.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = conn.read(&mut [0u8; 2048]);
            let _ = respond(&mut conn, 503, "text/plain", b"too many clients\n", &[]);
            // Close gently: what the client still sends is read (briefly) rather than
            // answered with a reset that could discard the 503 before it is read.
            let _ = conn.shutdown(std::net::Shutdown::Write);
            let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
            let _ = conn.read(&mut [0u8; 2048]);
            continue;
        }
        let s = server.clone();
        let spawned = std::thread::Builder::new()
            .name("braid-monitor-conn".into())
            .spawn(move || {
                let mut conn = conn;
                handle(&s, &mut conn);
                s.connections.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            server.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A parsed request: what the routes need.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query's `key=value` pairs (percent-decoded).
    pub query: Vec<(String, String)>,
    /// The bearer token, if an `Authorization: Bearer` header came.
    pub bearer: Option<String>,
}

impl Request {
    /// The query value of `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request head was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// More than [`HEAD_MAX`] bytes.
    TooLarge,
    /// Not HTTP.
    Malformed,
    /// The client closed or timed out before a whole head.
    Incomplete,
}

/// Read and parse one request head.
pub fn read_head(r: &mut impl Read) -> Result<Request, HeadError> {
    let mut buf = vec![0u8; HEAD_MAX];
    let mut len = 0;
    loop {
        let Some(space) = buf.get_mut(len..) else {
            return Err(HeadError::TooLarge);
        };
        if space.is_empty() {
            return Err(HeadError::TooLarge);
        }
        let n = r.read(space).map_err(|_| HeadError::Incomplete)?;
        if n == 0 {
            return Err(HeadError::Incomplete);
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(buf.get(..len).unwrap_or_default()) {
            Ok(httparse::Status::Complete(_)) => return Ok(from_parsed(&req)),
            Ok(httparse::Status::Partial) => continue,
            Err(_) => return Err(HeadError::Malformed),
        }
    }
}

fn from_parsed(req: &httparse::Request<'_, '_>) -> Request {
    let target = req.path.unwrap_or("/");
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let query = q
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    let bearer = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.trim().strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned());
    Request {
        method: req.method.unwrap_or("").to_owned(),
        path: percent_decode(path),
        query,
        bearer,
    }
}

/// `%XX` decoding (a bad escape is kept as it is; `+` stays `+`).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let hex = |j: usize| b.get(j).and_then(|d| (*d as char).to_digit(16));
        match (c, hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the request carries the token (always, without one configured). Constant
/// time in the token's content.
pub fn authorized(token: Option<&Token>, req: &Request) -> bool {
    let Some(t) = token else { return true };
    let given = req.bearer.as_deref().or(req.param("token")).unwrap_or("");
    bool::from(given.as_bytes().ct_eq(t.as_bytes()))
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// The page's policy: nothing from anywhere but braid itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Write a whole response and close.
pub fn respond(
    w: &mut impl Write,
    code: u16,
    ctype: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n",
        reason(code),
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}

fn json_body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn handle(server: &Server, conn: &mut TcpStream) {
    let req = match read_head(conn) {
        Ok(r) => r,
        Err(HeadError::TooLarge) => {
            let _ = respond(conn, 413, "text/plain", b"request head too large\n", &[]);
            return;
        }
        Err(HeadError::Malformed) => {
            let _ = respond(conn, 400, "text/plain", b"not an HTTP request\n", &[]);
            return;
        }
        Err(HeadError::Incomplete) => return,
    };
    if req.path == "/events" && req.method == "GET" && authorized(server.token.as_ref(), &req) {
        if server.streams.fetch_add(1, Ordering::AcqRel) >= MAX_STREAMS {
            server.streams.fetch_sub(1, Ordering::AcqRel);
            let _ = respond(conn, 503, "text/plain", b"too many event streams\n", &[]);
            return;
        }
        super::sse::stream(&server.shared, conn);
        server.streams.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let (code, ctype, body, extra) = route(server, &req);
    let body = if req.method == "HEAD" {
        Vec::new()
    } else {
        body
    };
    let _ = respond(conn, code, ctype, &body, &extra);
}

type Answer = (
    u16,
    &'static str,
    Vec<u8>,
    Vec<(&'static str, &'static str)>,
);

/// The answer to a request other than `/events`.
pub fn route(server: &Server, req: &Request) -> Answer {
    if req.method != "GET" && req.method != "HEAD" {
        return (
            405,
            "text/plain",
            b"only GET and HEAD\n".to_vec(),
            vec![("Allow", "GET, HEAD")],
        );
    }
    if !authorized(server.token.as_ref(), req) {
        return (
            401,
            "text/plain",
            b"this monitor needs its token: Authorization: Bearer TOKEN, or ?token=TOKEN in the page's address\n".to_vec(),
            vec![("WWW-Authenticate", "Bearer realm=\"braid\"")],
        );
    }
    let st = || server.shared.lock();
    match req.path.as_str() {
        "/" | "/index.html" => (
            200,
            "text/html; charset=utf-8",
            assets::INDEX_HTML.as_bytes().to_vec(),
            vec![("Content-Security-Policy", CSP)],
        ),
        "/app.js" => (
            200,
            "text/javascript; charset=utf-8",
            assets::APP_JS.as_bytes().to_vec(),
            vec![],
        ),
        "/style.css" => (
            200,
            "text/css; charset=utf-8",
            assets::STYLE_CSS.as_bytes().to_vec(),
            vec![],
        ),
        "/favicon.svg" | "/favicon.ico" => (
            200,
            "image/svg+xml",
            assets::FAVICON_SVG.as_bytes().to_vec(),
            vec![],
        ),
        "/metrics" => {
            let s = st();
            match &s.latest {
                Some(snap) => (
                    200,
                    super::metrics::CONTENT_TYPE,
                    super::metrics::render(&s.interface, snap).into_bytes(),
                    vec![],
                ),
                None => (
                    503,
                    "text/plain",
                    b"no figures yet (the daemon publishes once a second)\n".to_vec(),
                    vec![],
                ),
            }
        }
        "/api/status" => {
            let s = st();
            let body = json!({
                "interface": s.interface,
                "summary": s.summary,
                "status": s.latest.as_ref().map(|l| &l.status),
                "classes": s.latest.as_ref().and_then(|l| l.classes.as_ref()),
                "sample": s.sample,
            });
            (200, "application/json", json_body(&body), vec![])
        }
        "/api/history" => {
            let s = st();
            let long = req.param("range") == Some("long");
            let samples: Vec<&super::sample::Sample> = if long {
                s.history.long().collect()
            } else {
                s.history.short().collect()
            };
            (
                200,
                "application/json",
                json_body(
                    &json!({"range": if long { "long" } else { "short" }, "samples": samples}),
                ),
                vec![],
            )
        }
        "/api/events" => {
            let s = st();
            (
                200,
                "application/json",
                json_body(&json!({"events": s.timeline.all()})),
                vec![],
            )
        }
        _ => (404, "text/plain", b"not found\n".to_vec(), vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> Result<Request, HeadError> {
        read_head(&mut s.as_bytes())
    }

    #[test]
    fn heads_are_parsed_and_bounded() {
        let r = head("GET /api/history?range=long&token=a%2Bb HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer  tok \r\n\r\n").unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("GET", "/api/history")
        );
        assert_eq!(r.param("range"), Some("long"));
        assert_eq!(r.param("token"), Some("a+b"));
        assert_eq!(r.bearer.as_deref(), Some("tok"));
        assert_eq!(head("GET / HTTP/1.1\r\nHost"), Err(HeadError::Incomplete));
        assert_eq!(
            head("\x16\x03\x01 hello\r\n\r\n"),
            Err(HeadError::Malformed)
        );
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(HEAD_MAX));
        assert_eq!(head(&big), Err(HeadError::TooLarge));
        assert_eq!(percent_decode("%zz%41+"), "%zzA+");
    }

    #[test]
    fn the_token_is_required_when_set() {
        let req = |bearer: Option<&str>, q: Option<&str>| Request {
            method: "GET".into(),
            path: "/".into(),
            query: q
                .map(|t| vec![("token".to_owned(), t.to_owned())])
                .unwrap_or_default(),
            bearer: bearer.map(str::to_owned),
        };
        let dir = std::env::temp_dir().join(format!("braid-http-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t");
        crate::files::write_private(&f, "0123456789abcdef0123\n").unwrap();
        let t = crate::config::monitor::read_token(&f).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(authorized(None, &req(None, None)));
        assert!(!authorized(Some(&t), &req(None, None)));
        assert!(!authorized(
            Some(&t),
            &req(Some("0123456789abcdef012"), None)
        ));
        assert!(!authorized(
            Some(&t),
            &req(None, Some("0123456789abcdef0124"))
        ));
        assert!(authorized(
            Some(&t),
            &req(Some("0123456789abcdef0123"), None)
        ));
        assert!(authorized(
            Some(&t),
            &req(None, Some("0123456789abcdef0123"))
        ));
    }
}
