use super::*;
use proptest::prelude::*;

fn at_ms(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

/// A datagram from `from` to `to`: what `to` makes of it, and `to`'s hint (if any) opened
/// by `from` in turn.
fn send(from: &PlainTags, to: &mut PlainTags, now: Instant, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    from.wrap(payload, &mut out);
    match to.open(now, &out) {
        Opened::Deliver(d) => d.to_vec(),
        _ => Vec::new(),
    }
}

/// Deliver `from`'s datagram to `to`; a hint goes back to `from`. Returns whether `to`
/// accepted the datagram.
fn exchange(from: &mut PlainTags, to: &mut PlainTags, now: Instant) -> bool {
    let mut out = Vec::new();
    from.wrap(b"data", &mut out);
    match to.open(now, &out) {
        Opened::Deliver(d) => {
            assert_eq!(d, b"data");
            true
        }
        Opened::Hint(h) => {
            // A hint is accepted (empty) or refused without another hint going back
            // only if it is stale; it never carries data.
            if let Opened::Deliver(d) = from.open(now, &h) {
                assert!(d.is_empty());
            }
            false
        }
        Opened::Drop => false,
    }
}

#[test]
fn both_ends_learn_each_other_in_one_round_trip() {
    let (mut a, mut b) = (PlainTags::new(0xA), PlainTags::new(0xB));
    // A's first datagram is refused (B's tag unknown to A) and answered with a hint.
    assert!(!exchange(&mut a, &mut b, at_ms(0)));
    assert_eq!(a.peer(), Some(0xB));
    assert_eq!(b.peer(), None);
    // From then on everything is accepted both ways.
    assert!(exchange(&mut a, &mut b, at_ms(1)));
    assert_eq!(b.peer(), Some(0xA));
    assert!(exchange(&mut b, &mut a, at_ms(2)));
    assert_eq!(send(&a, &mut b, at_ms(3), b"x"), b"x");
    assert_eq!(b.counters().wrong_tag, 1);
    assert_eq!(b.counters().hints_sent, 1);
}

#[test]
fn a_restarted_peer_is_learned_from_either_direction() {
    for restarted_speaks_first in [true, false] {
        let (mut a, mut b) = (PlainTags::new(0xA), PlainTags::new(0xB));
        assert!(!exchange(&mut a, &mut b, at_ms(0)));
        assert!(exchange(&mut a, &mut b, at_ms(1)));
        // A restarts with a new tag; B still names the old one.
        let mut a2 = PlainTags::new(0xA2);
        let first = if restarted_speaks_first {
            exchange(&mut a2, &mut b, at_ms(10))
        } else {
            exchange(&mut b, &mut a2, at_ms(10))
        };
        assert!(!first, "the first datagram of either side is refused");
        // One hint later, both directions flow again.
        assert!(exchange(&mut a2, &mut b, at_ms(11)) || exchange(&mut a2, &mut b, at_ms(12)));
        assert!(exchange(&mut b, &mut a2, at_ms(13)));
        assert_eq!(b.peer(), Some(0xA2));
        assert_eq!(a2.peer(), Some(0xB));
        assert_eq!(b.counters().peer_tag_changes, 2);
    }
}

#[test]
fn an_accepted_datagram_is_never_answered() {
    let (mut a, mut b) = (PlainTags::new(0xA), PlainTags::new(0xB));
    exchange(&mut a, &mut b, at_ms(0));
    let mut out = Vec::new();
    for i in 0..100 {
        a.wrap(b"d", &mut out);
        assert!(matches!(b.open(at_ms(1 + i), &out), Opened::Deliver(_)));
    }
    assert_eq!(b.counters().hints_sent, 1);
}

#[test]
fn a_blind_spoofer_never_gets_through_and_gets_few_hints() {
    let (mut a, mut b) = (PlainTags::new(0x1234_5678_9abc_def0), PlainTags::new(0xB));
    exchange(&mut a, &mut b, at_ms(0));
    exchange(&mut a, &mut b, at_ms(1));
    // 20 000 forged datagrams in one second, every one with another guess of B's tag
    // and another sender tag (also forged hints: empty ones).
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut hints = 0;
    let refused_before = b.counters().wrong_tag;
    for i in 0..20_000u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut d = vec![TAGGED_VERSION];
        d.extend_from_slice(&(seed | 1).to_be_bytes());
        d.extend_from_slice(&seed.rotate_left(17).to_be_bytes());
        if i % 2 == 0 {
            d.extend_from_slice(b"forged data");
        }
        match b.open(Instant::from_micros(2000 + i * 50), &d) {
            Opened::Deliver(_) => panic!("a forged datagram got through"),
            Opened::Hint(h) => {
                hints += 1;
                // A hint names B's own tag and echoes the forger's, never A's.
                assert_eq!(h[1..9], 0xBu64.to_be_bytes());
            }
            Opened::Drop => {}
        }
    }
    assert_eq!(
        b.peer(),
        Some(0x1234_5678_9abc_def0),
        "the peer's tag never moved"
    );
    assert!(
        hints <= (HINT_BURST + HINTS_PER_SECOND + 1) as usize,
        "{hints} hints"
    );
    assert_eq!(b.counters().wrong_tag - refused_before, 20_000);
    // The real peer is still accepted.
    assert!(exchange(&mut a, &mut b, at_ms(2000)));
}

#[test]
fn malformed_envelopes_are_counted() {
    let mut b = PlainTags::new(0xB);
    let mut v1 = [1u8; 40];
    v1[0] = 1;
    let mut zero_sender = vec![TAGGED_VERSION];
    zero_sender.extend_from_slice(&0u64.to_be_bytes());
    zero_sender.extend_from_slice(&0xBu64.to_be_bytes());
    for bad in [
        &[][..],
        &[TAGGED_VERSION; 16][..],
        &v1[..],
        &zero_sender[..],
    ] {
        assert_eq!(b.open(at_ms(0), bad), Opened::Drop);
    }
    assert_eq!(b.counters().malformed, 4);
    assert_eq!(b.counters().hints_sent, 0);
}

#[test]
fn hints_refill_at_their_rate() {
    let mut b = PlainTags::new(0xB);
    let forged = |tag: u64| {
        let mut d = vec![TAGGED_VERSION];
        d.extend_from_slice(&tag.to_be_bytes());
        d.extend_from_slice(&7u64.to_be_bytes());
        d
    };
    let hinted = |b: &mut PlainTags, ms| matches!(b.open(at_ms(ms), &forged(9)), Opened::Hint(_));
    let burst = (0..10).filter(|_| hinted(&mut b, 0)).count();
    assert_eq!(burst, HINT_BURST as usize);
    // One token every 1/HINTS_PER_SECOND s.
    let step = 1000 / HINTS_PER_SECOND;
    assert!(!hinted(&mut b, step - 1));
    assert!(hinted(&mut b, step));
    assert!(!hinted(&mut b, step));
}

proptest! {
    #[test]
    fn any_bytes_are_refused_or_accepted_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = PlainTags::new(0xB);
        match b.open(at_ms(0), &bytes) {
            Opened::Deliver(d) => {
                // Only an envelope naming B's tag.
                prop_assert_eq!(&bytes[9..17], &0xBu64.to_be_bytes()[..]);
                prop_assert_eq!(d, &bytes[TAG_HEADER_LEN..]);
            }
            Opened::Hint(h) => prop_assert_eq!(&h[9..17], &bytes[1..9]),
            Opened::Drop => {}
        }
    }
}
