//! `braid lab --monitor ADDR`: the dashboard of a lab run, live. Side a's daemon serves its
//! monitor on 127.0.0.1:9190 inside its namespace; a small proxy on the host's `ADDR`
//! forwards each connection there (the connection to the daemon is made from a thread in
//! the namespace: a socket stays in the namespace it was made in). At most
//! [`MAX_CLIENTS`] connections at once; the proxy stops when dropped.
//!
//! After the run, the monitor's 1 s samples give a second plot of the link-sharing
//! scenarios: each class's rate per second as braid's shaper sent it
//! ([`class_plot`]), beside the receivers' own plot.
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use super::netns::spawn_in_netns;
use super::plot::{self, Panel, Series};

/// Where side a's monitor listens, inside its namespace.
pub const IN_NS: &str = "127.0.0.1:9190";
/// The `[monitor]` table added to side a's config.
pub const CONFIG: &str = "\n[monitor]\nlisten = \"127.0.0.1:9190\"\nhistory = false\n";
/// Most connections forwarded at once.
pub const MAX_CLIENTS: usize = 16;

/// The host-side proxy to a namespace's monitor.
pub struct Proxy {
    stop: Arc<AtomicBool>,
    /// The host address it listens on.
    pub addr: SocketAddr,
}

impl Proxy {
    /// Listen on `addr` and forward to [`IN_NS`] in namespace `ns`.
    pub fn start(addr: SocketAddr, ns: &str) -> Result<Proxy> {
        let l = TcpListener::bind(addr)
            .with_context(|| format!("--monitor: cannot listen on {addr}"))?;
        l.set_nonblocking(true)?;
        let addr = l.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (st, ns) = (stop.clone(), ns.to_owned());
        let open = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Ok((client, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                if open.load(Ordering::Relaxed) >= MAX_CLIENTS {
                    continue;
                }
                let _ = client.set_nonblocking(false);
                let Ok(h) = spawn_in_netns(&ns, || Ok(TcpStream::connect(IN_NS)?)) else {
                    continue;
                };
                let Ok(Ok(upstream)) = h.join() else { continue };
                open.fetch_add(1, Ordering::Relaxed);
                let o = open.clone();
                std::thread::spawn(move || {
                    pipe(client, upstream);
                    o.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
        Ok(Proxy { stop, addr })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copy both ways until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || copy(a2, b2));
    copy(b, a);
    let _ = up.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// An open `/events` stream in namespace `ns`, read until dropped: what a page costs the
/// daemon (`braid lab --monitor` keeps one open during each test).
pub struct Page {
    stop: Arc<AtomicBool>,
    /// Events read so far.
    pub events: Arc<AtomicUsize>,
}

impl Page {
    /// Open the stream.
    pub fn open(ns: &str) -> Result<Page> {
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(AtomicUsize::new(0));
        let (st, ev) = (stop.clone(), events.clone());
        let h = spawn_in_netns(ns, || {
            let mut c = TcpStream::connect(IN_NS)?;
            c.write_all(b"GET /events HTTP/1.1\r\nHost: lab\r\n\r\n")?;
            c.set_read_timeout(Some(Duration::from_millis(500)))?;
            Ok(c)
        })?;
        let mut c = h
            .join()
            .map_err(|_| anyhow::anyhow!("page opener panicked"))??;
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while !st.load(Ordering::Relaxed) {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let k = buf[..n].windows(6).filter(|w| w == b"event:").count();
                        ev.fetch_add(k, Ordering::Relaxed);
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        });
        Ok(Page { stop, events })
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The monitor's 1 s samples, read in namespace `ns`.
pub fn samples(ns: &str) -> Result<Vec<Value>> {
    let h = spawn_in_netns(ns, || -> Result<Vec<Value>> {
        let mut c = TcpStream::connect(IN_NS)?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.write_all(b"GET /api/history?range=short HTTP/1.1\r\nHost: lab\r\n\r\n")?;
        let mut out = Vec::new();
        c.take(64 << 20).read_to_end(&mut out)?;
        let text = String::from_utf8_lossy(&out);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: Value = serde_json::from_str(body).context("the monitor's history")?;
        Ok(v.get("samples")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    })?;
    h.join()
        .map_err(|_| anyhow::anyhow!("history reader panicked"))?
}

/// An SVG of each leaf class's rate per second (Mbit/s) from the monitor's samples, over
/// the samples from `from_ms` on; `names` labels classes by id.
pub fn class_plot(
    title: &str,
    samples: &[Value],
    from_ms: u64,
    names: &[(String, String)],
    y_max: f64,
) -> String {
    let kept: Vec<&Value> = samples
        .iter()
        .filter(|s| {
            s.get("t")
                .and_then(Value::as_u64)
                .is_some_and(|t| t > from_ms)
        })
        .collect();
    let series: Vec<(String, Vec<f64>)> = names
        .iter()
        .map(|(id, name)| {
            let vals = kept
                .iter()
                .map(|s| {
                    s.get("c")
                        .and_then(Value::as_array)
                        .and_then(|c| {
                            c.iter()
                                .find(|x| x.get("id").and_then(Value::as_str) == Some(id))
                        })
                        .and_then(|x| x.get("r"))
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0)
                        / 1e6
                })
                .collect();
            (format!("{name} ({id})"), vals)
        })
        .collect();
    let panel = Panel {
        title: "braid's shaper, per class, from the monitor's 1 s samples".into(),
        series: series
            .iter()
            .enumerate()
            .map(|(i, (label, values))| Series {
                label,
                values,
                dashed: false,
                colour: i,
            })
            .collect(),
    };
    plot::svg(title, &[panel], y_max)
}
