//! One established session: the two transport keys, the indexes, the send counter and
//! the receive replay window.

use std::sync::Arc;

use super::envelope::{AeadError, PendingSeal, TransportKey};
use super::replay::ReplayWindow;
use super::Cipher;
use crate::Instant;

/// Names a session: the index *we* chose, which the peer puts in the receiver-index
/// field of every datagram it sends us on this session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u32);

impl core::fmt::Display for SessionId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "session#{:08x}", self.0)
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Session {
    pub local_index: u32,
    pub remote_index: u32,
    send: Arc<TransportKey>,
    recv: Arc<TransportKey>,
    pub send_counter: u64,
    pub replay: ReplayWindow,
    pub created: Instant,
    pub initiator: bool,
}

impl Session {
    pub(super) fn new(
        local_index: u32,
        remote_index: u32,
        keys: ([u8; 32], [u8; 32]),
        cipher: Cipher,
        window_bits: usize,
        created: Instant,
        initiator: bool,
    ) -> Self {
        let (mut s, mut r) = keys;
        let session = Self {
            local_index,
            remote_index,
            send: Arc::new(TransportKey::new(&s, cipher)),
            recv: Arc::new(TransportKey::new(&r, cipher)),
            send_counter: 0,
            replay: ReplayWindow::new(window_bits),
            created,
            initiator,
        };
        zeroize::Zeroize::zeroize(&mut s);
        zeroize::Zeroize::zeroize(&mut r);
        session
    }

    pub(super) fn id(&self) -> SessionId {
        SessionId(self.local_index)
    }

    /// Number and lay out a datagram with the next counter; the AEAD is the returned
    /// job's (see [`PendingSeal`]).
    pub(super) fn seal_deferred(
        &mut self,
        user_type: u8,
        buf: &mut [u8],
        plaintext_len: usize,
    ) -> Result<PendingSeal, AeadError> {
        let job = PendingSeal::new(
            &self.send,
            (user_type, self.remote_index, self.send_counter),
            buf,
            plaintext_len,
        )?;
        self.send_counter += 1;
        Ok(job)
    }

    /// Authenticate and decrypt in place a datagram whose full counter is `counter`; the
    /// replay window is the caller's business.
    pub(super) fn open(&self, counter: u64, datagram: &mut [u8]) -> Result<(), AeadError> {
        self.recv.open(counter, datagram)
    }

    /// The receive key, to open datagrams elsewhere ([`super::OpenKeys`]).
    pub(super) fn recv_key(&self) -> &Arc<TransportKey> {
        &self.recv
    }

    /// Whether this session's transport datagrams carry `index16` (the low 16 bits of our
    /// index, as [`super::envelope::write_transport_header`] sends it).
    pub(super) fn named_by(&self, index16: u16) -> bool {
        self.local_index as u16 == index16
    }
}
