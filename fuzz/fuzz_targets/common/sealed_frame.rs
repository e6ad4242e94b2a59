//! A sealed-looking datagram for the envelope targets (`tunnel`, `sealer`): the version-4
//! byte, a kind chosen from `kind` (a handshake kind, a transport kind: 0x10 + a message
//! type, known or not, or any byte), two zero bytes, then `body`.

pub fn sealed_frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let k = match kind % 6 {
        0 => 1,
        1 => 2,
        2 => 3,
        3 => 0x10 | (kind >> 4),
        4 => 0x1f,
        _ => kind,
    };
    let mut d = vec![braid_core::wire::SEALED_VERSION, k, 0, 0];
    d.extend_from_slice(body);
    d
}
