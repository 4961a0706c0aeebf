//! The record reader under a fuzzer (feature `unstable`;
//! `fuzz/fuzz_targets/tls_record_read.rs`).
//!
//! The input is a selector byte (version and cipher, the read sizes) and
//! then operations `op, len, bytes…` that build a stream: records sealed
//! with the stream's keys (application data, alerts, handshake messages,
//! KeyUpdates, NewSessionTickets, large records), raw bytes, flipped bits.
//! The stream is read back through the read-ahead and straight into a
//! caller's buffer: each must give a prefix of the application data sealed
//! (never a byte from a bad record; the direct path's a prefix of the
//! read-ahead's, as it drops what a read opened before a bad record), and
//! never panic.

use super::read::{PostHandshake, RecordReader};
use super::record::{Cipher, ContentType, RecordKeys, Version, MAX_PLAINTEXT};
use crate::transport::error::TlsError;

const KEY: [u8; 32] = [7; 32];
const IV: [u8; 12] = [9; 12];

#[derive(Clone, Copy)]
struct Suite(Version, Cipher);

impl Suite {
    fn keys(self) -> RecordKeys {
        let len = match self.1 {
            Cipher::Aes128Gcm => 16,
            _ => 32,
        };
        RecordKeys::new(self.0, self.1, &KEY[..len], &IV, 0).expect("valid keys")
    }
}

/// rustls' part, for the fuzzer: a KeyUpdate gives fresh keys (the same
/// key, sequence number 0, as the stream's builder does).
struct Post(Suite);

impl PostHandshake for Post {
    fn update_rx(&mut self) -> Result<RecordKeys, TlsError> {
        Ok(self.0.keys())
    }
    fn owe_key_update(&mut self) -> Result<(), TlsError> {
        Ok(())
    }
    fn ticket(&mut self, _: &[u8]) -> Result<(), TlsError> {
        Ok(())
    }
}

/// Builds a stream from `input` and reads it back both ways; panics only
/// when an invariant above is broken.
pub fn fuzz_tls_records(input: &[u8]) {
    let Some((&selector, mut ops)) = input.split_first() else {
        return;
    };
    let suite = match selector % 6 {
        0 => Suite(Version::Tls13, Cipher::Aes128Gcm),
        1 => Suite(Version::Tls13, Cipher::Aes256Gcm),
        2 => Suite(Version::Tls13, Cipher::Chacha20Poly1305),
        3 => Suite(Version::Tls12, Cipher::Aes128Gcm),
        4 => Suite(Version::Tls12, Cipher::Aes256Gcm),
        _ => Suite(Version::Tls12, Cipher::Chacha20Poly1305),
    };
    let mut tx = suite.keys();
    let mut wire = Vec::new();
    let mut sent = Vec::new();
    while let [op, len, rest @ ..] = ops {
        let n = usize::from(*len).min(rest.len());
        let (body, next) = rest.split_at(n);
        ops = next;
        let seal = |tx: &mut RecordKeys, typ, bytes: &[u8], wire: &mut Vec<u8>| {
            for chunk in bytes.chunks(MAX_PLAINTEXT) {
                tx.seal(typ, &[chunk], wire).expect("seal");
            }
        };
        match op % 8 {
            0 => {
                seal(&mut tx, ContentType::ApplicationData, body, &mut wire);
                sent.extend_from_slice(body);
            }
            1 => seal(&mut tx, ContentType::Handshake, body, &mut wire),
            2 => seal(&mut tx, ContentType::Alert, body, &mut wire),
            3 if suite.0 == Version::Tls13 => {
                let request = body.first().map_or(0, |b| b & 1);
                seal(
                    &mut tx,
                    ContentType::Handshake,
                    &[24, 0, 0, 1, request],
                    &mut wire,
                );
                tx = suite.keys();
            }
            4 => {
                let mut m = vec![4, 0, (n >> 8) as u8, n as u8];
                m.extend_from_slice(body);
                seal(&mut tx, ContentType::Handshake, &m, &mut wire);
            }
            5 => wire.extend_from_slice(body),
            6 if !wire.is_empty() && n >= 2 => {
                let at = usize::from(u16::from_be_bytes([body[0], body[1]])) % wire.len();
                wire[at] ^= 1 << (body.get(2).copied().unwrap_or(0) % 8);
            }
            _ => {
                let big = vec![*len; usize::from(*len) * 128 + 1];
                seal(&mut tx, ContentType::ApplicationData, &big, &mut wire);
                sent.extend_from_slice(&big);
            }
        }
    }
    let chunk = 1 + usize::from(selector / 6) * 97;
    let buffered = read_back(suite, &wire, chunk, None);
    let room = 16 << 10 | usize::from(selector) << 8;
    let direct = read_back(suite, &wire, chunk * 64, Some(room));
    assert!(sent.starts_with(&buffered), "plaintext that was not sent");
    // A direct read that meets a bad record drops the good plaintext it
    // opened before it in the same read (the error ends the stream).
    assert!(buffered.starts_with(&direct), "the two read paths disagree");
}

/// Feeds `wire` to a reader `chunk` bytes at a time (into the read-ahead,
/// or a caller's buffer of `room` bytes when it takes one): the plaintext
/// until the end or the first error.
fn read_back(suite: Suite, wire: &[u8], chunk: usize, room: Option<usize>) -> Vec<u8> {
    let mut post = Post(suite);
    let mut r = RecordReader::new(suite.keys(), &[]).expect("a reader");
    let (mut out, mut pos) = (Vec::new(), 0);
    loop {
        loop {
            let p = r.plaintext();
            if !p.is_empty() {
                out.extend_from_slice(p);
                let n = p.len();
                r.consume(n);
            }
            if r.is_closed() {
                return out;
            }
            match r.open_buffered(&mut post) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => return out,
            }
        }
        if pos == wire.len() {
            let _ = r.eof();
            return out;
        }
        if let Some(want) = room.and_then(|room| r.direct_read(room).map(|w| (room, w))) {
            let (room, want) = want;
            let have = r.pending();
            let mut dst = vec![0u8; room];
            let n = (want - have).min(wire.len() - pos).min(chunk);
            dst[have..have + n].copy_from_slice(&wire[pos..pos + n]);
            pos += n;
            match r.open_direct(&mut dst, n, &mut post) {
                Ok(w) => out.extend_from_slice(&dst[..w]),
                Err(_) => return out,
            }
            continue;
        }
        let space = r.room();
        let n = space.len().min(wire.len() - pos).min(chunk);
        space[..n].copy_from_slice(&wire[pos..pos + n]);
        r.filled(n);
        pos += n;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sealed_streams_read_back_whole_both_ways() {
        // Application data, a KeyUpdate, a large record, a ticket, more
        // data, close_notify: each suite, small and large reads.
        for selector in 0u8..12 {
            let mut input = vec![selector];
            input.extend_from_slice(&[0, 5, b'h', b'e', b'l', b'l', b'o']);
            input.extend_from_slice(&[3, 1, 1]);
            input.extend_from_slice(&[7, 200]);
            input.extend_from_slice(&[4, 3, 1, 2, 3]);
            input.extend_from_slice(&[0, 3, b'b', b'y', b'e']);
            input.extend_from_slice(&[2, 2, 1, 0]);
            input.extend_from_slice(&[0, 3, b'x', b'x', b'x']);
            super::fuzz_tls_records(&input);
            // A good record, then (TLS 1.2) a refused NewSessionTicket in
            // the same read (a fuzzer's find, fuzz/artifacts: the direct
            // path drops the record before the error).
            super::fuzz_tls_records(&[10, 0x7b, 0, 0x5c, 0xff, 6, 0x5c, 0xff]);
            // And with one bit flipped somewhere.
            input.extend_from_slice(&[6, 3, 0, 40, 3]);
            super::fuzz_tls_records(&input);
        }
    }
}
