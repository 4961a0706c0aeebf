//! The TLS record reader (our record layer after rustls' handshake): a
//! stream of sealed records, raw bytes and flipped bits, read back through
//! the read-ahead and straight into a caller's buffer. Never a panic, no
//! plaintext that was not sealed, the two paths in agreement (see
//! `framewire::transport::fuzz_tls_records`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    framewire::transport::fuzz_tls_records(data);
});
