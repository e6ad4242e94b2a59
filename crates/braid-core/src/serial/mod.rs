//! Serial line framing: SLIP (RFC 1055), SLIP6 and CSLIP (RFC 1144 Van Jacobson TCP/IP
//! header compression), byte for byte as Linux drivers/net/slip.
//!
//! STUB: being written.
