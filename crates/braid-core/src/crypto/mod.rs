//! Authenticated encryption for paths: keys, the Noise IKpsk2 handshake, the sealed
//! (version 2) datagram envelope, replay protection and handshake rate limiting.
//!
//! STUB: being written.
