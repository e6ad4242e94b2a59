//! `/events`: Server-Sent Events. First a `hello` event (the config summary, the last
//! 10 minutes of 1 s samples, the timeline, the latest status), then a `sample` event
//! after each sample (once a second: the sample, the events since the last one, a few live
//! figures), and a comment every [`KEEPALIVE`] when nothing comes. A client that does not
//! take what is written within the write timeout is dropped.
use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};

use super::worker::{Shared, State};

/// Longest silence on a stream.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// The figures the page's header shows, from the latest snapshot.
pub fn live(st: &State) -> Value {
    let Some(snap) = &st.latest else {
        return Value::Null;
    };
    let s = &snap.status;
    let health = match crate::status::health(s) {
        crate::status::Health::Up => json!({"state": "up", "why": ""}),
        crate::status::Health::Degraded(w) => json!({"state": "degraded", "why": w}),
        crate::status::Health::Down(w) => json!({"state": "down", "why": w}),
    };
    let e = s.get("encryption").unwrap_or(&Value::Null);
    let st_ = s.get("status").unwrap_or(&Value::Null);
    let paths: Vec<Value> = st_
        .get("paths")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|p| {
            json!({
                "name": p.get("name"), "state": p.get("state"), "capacity_bps": p.get("capacity_bps"),
                "pacing_bps": p.get("pacing_bps"), "min_rtt_us": p.get("min_rtt_us"), "downs": p.get("downs"),
                "last_rx_us": p.get("last_rx_us"), "tx_bytes": p.get("tx_bytes"), "rx_bytes": p.get("rx_bytes"),
            })
        })
        .collect();
    json!({
        "uptime_us": s.get("uptime_us"),
        "health": health,
        "encryption": e.get("enabled"),
        "established": e.get("established"),
        "handshake_age_us": e.get("latest_handshake_age_us"),
        "counters": st_.get("counters"),
        "paths": paths,
        "classes": snap.classes.as_ref().map(class_modes),
    })
}

fn class_modes(c: &Value) -> Value {
    c.as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|c| {
            (
                c.get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned(),
                c.get("mode").cloned().unwrap_or(Value::Null),
            )
        })
        .collect::<serde_json::Map<String, Value>>()
        .into()
}

fn event(name: &str, data: &Value) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

/// The `hello` event's data.
pub fn hello(st: &State) -> Value {
    json!({
        "interface": st.interface,
        "summary": st.summary,
        "history": st.history.short().collect::<Vec<_>>(),
        "events": st.timeline.all(),
        "live": live(st),
    })
}

/// Serve one stream until the client goes or the monitor stops.
pub fn stream(shared: &Shared, w: &mut impl Write) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n";
    let (first, mut seen, mut next_event) = {
        let st = shared.lock();
        (event("hello", &hello(&st)), st.seq, st.timeline.next_id())
    };
    if w.write_all(head.as_bytes())
        .and_then(|()| w.write_all(&first))
        .and_then(|()| w.flush())
        .is_err()
    {
        return;
    }
    loop {
        let msg = {
            let mut st = shared.lock();
            if st.seq == seen {
                st = shared
                    .changed
                    .wait_timeout(st, KEEPALIVE)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            if st.seq == seen {
                b": keepalive\n\n".to_vec()
            } else {
                seen = st.seq;
                let events: Vec<_> = st.timeline.since(next_event).into_iter().cloned().collect();
                next_event = st.timeline.next_id();
                event(
                    "sample",
                    &json!({"sample": st.sample, "events": events, "live": live(&st)}),
                )
            }
        };
        if w.write_all(&msg).and_then(|()| w.flush()).is_err() {
            return;
        }
    }
}
