//! Shared by the `slip` and `slip6` targets: drive a streaming deframer and check it.

use braid_core::serial::slip::DecoderStats;
use braid_core::serial::{slip, slip6, DropReason, Event, FrameCodec, Framing};

/// One decoder event, owned.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Ev {
    Frame(Vec<u8>),
    Dropped(DropReason),
}

/// What the two streaming deframers have in common.
pub trait Deframer {
    const FRAMING: Framing;
    /// The frame delimiter byte.
    const DELIM: u8;
    fn with_max_frame(max: usize) -> Self;
    fn events(&mut self, input: &[u8], out: &mut Vec<Ev>);
    fn line_error(&mut self);
    fn hunt(&mut self);
    fn stats(&self) -> DecoderStats;
}

fn own(out: &mut Vec<Ev>) -> impl FnMut(Event<'_>) + '_ {
    |e| {
        out.push(match e {
            Event::Frame(f) => Ev::Frame(f.to_vec()),
            Event::Dropped(r) => Ev::Dropped(r),
        })
    }
}

impl Deframer for slip::Decoder {
    const FRAMING: Framing = Framing::Slip;
    const DELIM: u8 = slip::END;
    fn with_max_frame(max: usize) -> Self {
        slip::Decoder::with_max_frame(max)
    }
    fn events(&mut self, input: &[u8], out: &mut Vec<Ev>) {
        self.decode_events(input, &mut own(out));
    }
    fn line_error(&mut self) {
        slip::Decoder::line_error(self)
    }
    fn hunt(&mut self) {
        slip::Decoder::hunt(self)
    }
    fn stats(&self) -> DecoderStats {
        slip::Decoder::stats(self)
    }
}

impl Deframer for slip6::Decoder {
    const FRAMING: Framing = Framing::Slip6;
    const DELIM: u8 = slip6::DELIM;
    fn with_max_frame(max: usize) -> Self {
        slip6::Decoder::with_max_frame(max)
    }
    fn events(&mut self, input: &[u8], out: &mut Vec<Ev>) {
        self.decode_events(input, &mut own(out));
    }
    fn line_error(&mut self) {
        slip6::Decoder::line_error(self)
    }
    fn hunt(&mut self) {
        slip6::Decoder::hunt(self)
    }
    fn stats(&self) -> DecoderStats {
        slip6::Decoder::stats(self)
    }
}

/// Decode `line` in pieces of at most `chunk` bytes. With `errors`, a line error is
/// reported after every 0x00 byte (the pieces are cut there).
pub fn run<D: Deframer>(max_frame: usize, line: &[u8], chunk: usize, errors: bool) -> (Vec<Ev>, D) {
    run_from(D::with_max_frame(max_frame), line, chunk, errors)
}

fn run_from<D: Deframer>(mut d: D, line: &[u8], chunk: usize, errors: bool) -> (Vec<Ev>, D) {
    let mut evs = Vec::new();
    for piece in line.split_inclusive(|&b| b == 0) {
        for part in piece.chunks(chunk.max(1)) {
            d.events(part, &mut evs);
        }
        if errors && piece.last() == Some(&0) {
            d.line_error();
        }
    }
    (evs, d)
}

/// The whole check. Input: a config byte (bit 6: a small frame limit `3 + bits 0..5`;
/// bit 7: line errors), a chunk length, then line bytes.
pub fn check<D: Deframer>(data: &[u8]) -> Option<(Vec<Ev>, usize, bool)> {
    if data.len() < 2 {
        return None;
    }
    let max_frame = if data[0] & 0x40 != 0 {
        3 + usize::from(data[0] & 0x3F)
    } else {
        1152
    };
    let errors = data[0] & 0x80 != 0;
    let chunk = usize::from(data[1]);
    let line = &data[2..];

    let (whole, d) = run::<D>(max_frame, line, usize::MAX, errors);
    let (chunked, _) = run::<D>(max_frame, line, chunk, errors);
    assert_eq!(whole, chunked, "chunking changed the result");

    let stats = d.stats();
    let mut frames = Vec::new();
    for e in &whole {
        if let Ev::Frame(f) = e {
            assert!(
                f.len() > 2 && f.len() <= max_frame,
                "frame of {} bytes",
                f.len()
            );
            frames.push(f.clone());
        }
    }
    let count = |r: DropReason| whole.iter().filter(|e| **e == Ev::Dropped(r)).count() as u64;
    assert_eq!(stats.frames, frames.len() as u64);
    assert_eq!(stats.runts, count(DropReason::Runt));
    // A frame with an error is reported at its delimiter; the unfinished last frame may
    // hold one more.
    let unfinished = u64::from(line.last().is_some_and(|&b| b != D::DELIM));
    let (over, lerr) = (count(DropReason::Overrun), count(DropReason::LineError));
    assert!(stats.overruns >= over && stats.overruns <= over + unfinished);
    assert!(stats.line_errors >= lerr && stats.line_errors <= lerr + unfinished);
    if !errors {
        assert_eq!(stats.line_errors, 0);
    }

    // Hunting (a line just opened): what comes before the first delimiter is at most one
    // `Partial` drop, then the events are those of a decoder that starts at it.
    let mut hunter = D::with_max_frame(max_frame);
    hunter.hunt();
    let (mut hunted, hd) = run_from(hunter, line, chunk, errors);
    let k = line.iter().position(|&b| b == D::DELIM).unwrap_or(line.len());
    let (rest, _) = run::<D>(max_frame, &line[k..], usize::MAX, errors);
    let partial = hunted.first() == Some(&Ev::Dropped(DropReason::Partial));
    if partial {
        hunted.remove(0);
    }
    assert_eq!(hunted, rest, "hunting changed what follows the first delimiter");
    assert!(!hunted.contains(&Ev::Dropped(DropReason::Partial)));
    assert_eq!(hd.stats().partial, u64::from(partial));

    // The frame codec the daemon runs, in raw-ip mode (a classic SLIP peer's frames),
    // passes the hunting deframer's frames through.
    if max_frame == 1152 && !errors {
        let mut codec = FrameCodec::raw_ip(D::FRAMING, 296);
        let mut got = Vec::new();
        codec.decode(line, &mut |p| got.push(p.to_vec()));
        let want: Vec<Vec<u8>> = hunted
            .iter()
            .filter_map(|e| match e {
                Ev::Frame(f) => Some(f.clone()),
                Ev::Dropped(_) => None,
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(codec.counters().rx_frames, got.len() as u64);
        assert_eq!(codec.frame_stats(), hd.stats());
    }
    Some((whole, max_frame, errors))
}
