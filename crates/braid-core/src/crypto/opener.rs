//! Opening transport datagrams away from the tunnel's owner: the AEAD, the costly part of
//! receiving, may run on other threads, while everything that keeps state (the replay
//! window, roaming, the bond) stays with the one owner of the [`super::Tunnel`].
//!
//! The owner hands a worker an [`OpenKeys`] (its sessions' receive keys, shared, and where
//! each replay window stands); the worker calls [`OpenKeys::open`] on each datagram and
//! hands back what it found ([`Preopen`]), which the owner passes on with the datagram
//! ([`super::Tunnel::open_preopened`]): the checks that need state then run in order as
//! for any datagram (expiry, replay window, marking), but not the AEAD again.
//!
//! A datagram the keys cannot speak for (a handshake message, a session made after the
//! keys were taken) is left [`Preopen::Untouched`] for the owner to open itself. One that
//! fails its tag is [`Preopen::Failed`]: its bytes are garbage now, and it is counted as
//! a bad tag.

use std::sync::Arc;

use super::envelope::{self, TransportKey, OVERHEAD};

/// The receive keys of a tunnel's sessions, to open datagrams on another thread. Holding
/// it keeps the keys alive (a session's keys are not erased while a worker uses them).
#[derive(Clone, Default)]
pub struct OpenKeys {
    slots: [Option<Slot>; 3],
}

#[derive(Clone)]
struct Slot {
    /// The low 16 bits of our index, which the peer's datagrams carry.
    index: u16,
    key: Arc<TransportKey>,
    /// The replay window's top when the keys were taken: where counters expand from.
    top: u64,
}

impl core::fmt::Debug for OpenKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let indexes: Vec<u16> = self.slots.iter().flatten().map(|s| s.index).collect();
        f.debug_struct("OpenKeys")
            .field("indexes", &indexes)
            .finish()
    }
}

/// What [`OpenKeys::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preopen {
    /// Not tried: the owner opens it.
    Untouched,
    /// Authenticated and decrypted in place.
    Opened(Preopened),
    /// The tag did not verify (the bytes are no longer what arrived).
    Failed,
}

/// A datagram authenticated by [`OpenKeys::open`]: with what key and counter. Only this
/// module makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preopened {
    pub(super) index: u16,
    pub(super) counter: u64,
    /// Which key opened it (its address: the key is alive while the [`OpenKeys`] that
    /// opened it is, so the address names it).
    pub(super) key: usize,
}

impl OpenKeys {
    /// Keys of the sessions `(index, key, replay top)`.
    pub(super) fn new<'a>(
        sessions: impl Iterator<Item = (u16, &'a Arc<TransportKey>, u64)>,
    ) -> Self {
        let mut keys = OpenKeys::default();
        for (slot, (index, key, top)) in keys.slots.iter_mut().zip(sessions) {
            *slot = Some(Slot {
                index,
                key: Arc::clone(key),
                top,
            });
        }
        keys
    }

    /// Authenticate and decrypt a transport datagram in place, if one of the keys is its
    /// session's. Nothing is checked here that needs the tunnel's state: the replay
    /// window is the owner's, after.
    pub fn open(&self, datagram: &mut [u8]) -> Preopen {
        if datagram.len() < OVERHEAD {
            return Preopen::Untouched;
        }
        let Some((_, index, low)) = envelope::read_transport_header(datagram) else {
            return Preopen::Untouched;
        };
        let Some(slot) = self.slots.iter().flatten().find(|s| s.index == index) else {
            return Preopen::Untouched;
        };
        let counter = envelope::expand_counter(slot.top, low);
        match slot.key.open(counter, datagram) {
            Ok(()) => Preopen::Opened(Preopened {
                index,
                counter,
                key: key_id(&slot.key),
            }),
            Err(_) => Preopen::Failed,
        }
    }
}

/// A key's identity: its address.
pub(super) fn key_id(key: &Arc<TransportKey>) -> usize {
    Arc::as_ptr(key) as usize
}
