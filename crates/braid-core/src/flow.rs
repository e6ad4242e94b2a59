//! Peek IP/TCP/UDP (and Ethernet) headers. STUB: contract fixed, body being written.
