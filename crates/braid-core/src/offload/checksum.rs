//! The Internet checksum (RFC 1071) and the TCP/UDP pseudo-header sums.
//!
//! [`sum`] adds the buffer in memory order and converts to network order once at the
//! end: the ones' complement sum does not depend on byte order (RFC 1071 §2(B)). It adds
//! the 32-bit halves of 64-bit words as plain integers into eight 64-bit lanes, so no
//! carry has to be carried (the sum modulo 0xffff is what counts, and 2^16, 2^32 and 2^48
//! are all 1 modulo 0xffff), which the compiler turns into vector adds. Where the CPU has
//! AVX2 the same loop is also built for it and chosen at run time (`cargo bench -p
//! braid-core --bench offload -- --sample-size 200`, 2026-11-29, alternating with the
//! adc loop before it: a superframe cut into 45 segments 4.3 → 3.4 µs, 45 segments
//! merged 4.9-5.2 → 3.9 µs, 1500 bytes summed 60 → 50 ns).
//!
//! All values here are "network order numbers": the 16-bit value whose big-endian bytes
//! are the field on the wire.

/// Add with end-around carry.
#[inline(always)]
fn adc(acc: u64, w: u64) -> u64 {
    let (s, carry) = acc.overflowing_add(w);
    s + u64::from(carry)
}

#[inline(always)]
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_ne_bytes(w)
}

/// Fold a 64-bit end-around-carry accumulator to 16 bits (memory order).
#[inline(always)]
fn fold64(acc: u64) -> u16 {
    let s = (acc >> 32) + (acc & 0xffff_ffff);
    let s = (s >> 32) + (s & 0xffff_ffff);
    let s = (s >> 16) + (s & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    // The fold above leaves at most 16 bits.
    s as u16
}

/// The ones' complement sum of `data` (odd length padded with a zero byte) plus
/// `initial`, folded to 16 bits and not inverted.
pub fn sum(data: &[u8], initial: u16) -> u16 {
    add(to_net(kernel::sum(data)), initial)
}

/// Copy `src` into `dst` (of the same length, as [`slice::copy_from_slice`]) and return
/// [`sum`]`(src, initial)`: one pass over the bytes where a copy and then a sum would
/// read them twice. It pays most where the source is out of the cache: a superframe
/// just read from the TUN, a packet the worker opened on the other CPU.
pub fn copy_and_sum(dst: &mut [u8], src: &[u8], initial: u16) -> u16 {
    add(to_net(kernel::copy_and_sum(dst, src)), initial)
}

fn to_net(mem: u16) -> u16 {
    u16::from_be_bytes(mem.to_ne_bytes())
}

/// The loops, inlined into each build of them ([`kernel`]). A lane takes less than 2^33
/// per 64 bytes, so none can overflow below 2^37 bytes; packets are at most 64 KB.
#[inline(always)]
fn add_chunk(acc: &mut [u64; 8], c: &[u8]) {
    for (k, a) in acc.iter_mut().enumerate() {
        let w = word(&c[8 * k..8 * k + 8]);
        *a += (w & 0xffff_ffff) + (w >> 32);
    }
}

/// The lanes and the last bytes (fewer than 64), folded.
#[inline(always)]
fn finish(acc: &[u64; 8], mut rest: &[u8]) -> u16 {
    let mut total = acc.iter().fold(0, |t, &a| adc(t, a));
    while rest.len() >= 8 {
        total = adc(total, word(&rest[..8]));
        rest = &rest[8..];
    }
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    fold64(adc(total, u64::from_ne_bytes(tail)))
}

#[inline(always)]
fn sum_lanes(src: &[u8]) -> u16 {
    let mut acc = [0u64; 8];
    let mut from = src.chunks_exact(64);
    for c in &mut from {
        add_chunk(&mut acc, c);
    }
    finish(&acc, from.remainder())
}

#[inline(always)]
fn copy_lanes(dst: &mut [u8], src: &[u8]) -> u16 {
    assert_eq!(dst.len(), src.len(), "copy_and_sum: lengths differ");
    let mut acc = [0u64; 8];
    let mut from = src.chunks_exact(64);
    let mut to = dst.chunks_exact_mut(64);
    for (c, o) in (&mut from).zip(&mut to) {
        o.copy_from_slice(c);
        add_chunk(&mut acc, c);
    }
    let rest = from.remainder();
    to.into_remainder().copy_from_slice(rest);
    finish(&acc, rest)
}

/// The loop for this CPU: built for AVX2 too on x86-64, and that build used where the
/// CPU has it.
mod kernel {
    use super::{copy_lanes, sum_lanes};

    pub(super) fn sum(data: &[u8]) -> u16 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above: the one requirement of a
            // function built with `#[target_feature(enable = "avx2")]`.
            #[allow(unsafe_code)]
            return unsafe { avx2::sum(data) };
        }
        sum_lanes(data)
    }

    pub(super) fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u16 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as in `sum`.
            #[allow(unsafe_code)]
            return unsafe { avx2::copy_and_sum(dst, src) };
        }
        copy_lanes(dst, src)
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::{copy_lanes, sum_lanes};

        #[target_feature(enable = "avx2")]
        pub(super) fn sum(data: &[u8]) -> u16 {
            sum_lanes(data)
        }

        #[target_feature(enable = "avx2")]
        pub(super) fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u16 {
            copy_lanes(dst, src)
        }
    }
}

/// Ones' complement addition of two 16-bit sums.
pub fn add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    // At most 17 bits; one fold leaves 16.
    ((s & 0xffff) + (s >> 16)) as u16
}

/// The checksum field for `data` whose field is zero (or holds `initial`): the inverted
/// sum.
pub fn checksum(data: &[u8], initial: u16) -> u16 {
    !sum(data, initial)
}

/// The pseudo-header sum of TCP or UDP over IPv4 (RFC 793 §3.1): addresses, protocol
/// and the transport length.
pub fn pseudo_v4(src: &[u8; 4], dst: &[u8; 4], proto: u8, len: u16) -> u16 {
    let mut s = 0u32;
    for w in [src, dst] {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
        s += u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    s += u32::from(proto) + u32::from(len);
    fold32(s)
}

/// The pseudo-header sum of TCP or UDP over IPv6 (RFC 8200 §8.1).
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], proto: u8, len: u32) -> u16 {
    let mut s = 0u64;
    for a in [src, dst] {
        for w in a.chunks_exact(2) {
            s += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    s += u64::from(proto) + u64::from(len >> 16) + u64::from(len & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    fold32(u32::try_from(s).unwrap_or(u32::MAX))
}

fn fold32(s: u32) -> u16 {
    let s = (s >> 16) + (s & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 as written: 16-bit big-endian words, 32-bit accumulator, folded.
    fn reference(data: &[u8], initial: u16) -> u16 {
        let mut s: u64 = u64::from(initial);
        for c in data.chunks(2) {
            s += u64::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn exact_values() {
        // RFC 1071 §3's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
            0xddf2
        );
        // An IPv4 header (the Wikipedia example): checksum b861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h, 0), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(checksum(&h, 0), 0);
        assert_eq!(sum(&[], 0), 0);
        assert_eq!(sum(&[0xff], 0), 0xff00);
        assert_eq!(sum(&[0xff; 64], 0), 0xffff);
        // The largest packet, every lane as full as it gets, both builds.
        let big = vec![0xff; 65535];
        assert_eq!(sum(&big, 0), reference(&big, 0));
        assert_eq!(to_net(sum_lanes(&big)), reference(&big, 0));
        let mut copy = vec![0; 65535];
        assert_eq!(copy_and_sum(&mut copy, &big, 0), reference(&big, 0));
        assert_eq!(copy, big);
        assert_eq!(add(0xffff, 1), 1);
        assert_eq!(
            pseudo_v4(&[10, 0, 0, 1], &[10, 0, 0, 2], 6, 40),
            0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 6 + 40
        );
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = 1;
        let mut b = a;
        b[15] = 2;
        assert_eq!(pseudo_v6(&a, &b, 17, 0x1_0008), 0xfa01 + 3 + 17 + 1 + 8);
    }

    proptest! {
        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000), init: u16, skip in 0usize..8) {
            let d = &data[skip.min(data.len())..];
            // Equal as ones' complement values (0 and 0xffff are both zero).
            let (a, b) = (sum(d, init), reference(d, init));
            prop_assert!(a == b || (a % 0xffff == 0 && b % 0xffff == 0), "{a:x} {b:x}");
        }

        #[test]
        fn copy_and_sum_copies_and_sums_as_sum_does(data in proptest::collection::vec(any::<u8>(), 0..3000), init: u16, skip in 0usize..8, at in 0usize..8) {
            let src = &data[skip.min(data.len())..];
            let mut dst = vec![0u8; src.len() + at];
            let s = copy_and_sum(&mut dst[at..], src, init);
            prop_assert_eq!(&dst[at..], src);
            let r = reference(src, init);
            prop_assert_eq!(s % 0xffff, r % 0xffff, "{:x} {:x}", s, r);
        }

        /// The build without AVX2 (the one chosen where the CPU lacks it), called
        /// directly: the tests above run the AVX2 build on a CPU that has it.
        #[test]
        fn portable_build_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000), skip in 0usize..8) {
            let src = &data[skip.min(data.len())..];
            let r = reference(src, 0);
            prop_assert_eq!(sum_lanes(src) % 0xffff, to_net(r) % 0xffff);
            let mut dst = vec![0u8; src.len()];
            prop_assert_eq!(copy_lanes(&mut dst, src) % 0xffff, to_net(r) % 0xffff);
            prop_assert_eq!(&dst[..], src);
        }

        #[test]
        fn pseudo_matches_reference(src: [u8; 16], dst: [u8; 16], proto: u8, len: u32) {
            let mut p = Vec::new();
            p.extend_from_slice(&src);
            p.extend_from_slice(&dst);
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, proto]);
            prop_assert_eq!(pseudo_v6(&src, &dst, proto, len) % 0xffff, reference(&p, 0) % 0xffff);
            let (s4, d4): ([u8; 4], [u8; 4]) = (src[..4].try_into().unwrap(), dst[..4].try_into().unwrap());
            let mut p = Vec::new();
            p.extend_from_slice(&s4);
            p.extend_from_slice(&d4);
            p.extend_from_slice(&[0, proto]);
            p.extend_from_slice(&(len as u16).to_be_bytes());
            prop_assert_eq!(pseudo_v4(&s4, &d4, proto, len as u16) % 0xffff, reference(&p, 0) % 0xffff);
        }
    }
}
