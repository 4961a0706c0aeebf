//! The TLS record layer once the handshake is over, ours (SPEC.md §6.3):
//! the traffic keys rustls derived, and `ring`'s AEAD (the one rustls uses)
//! sealing and opening records in place.
//!
//! ```text
//! TLS 1.3 (RFC 8446 §5.2):  17 03 03 len | AEAD(plaintext ‖ type ‖ zeros) ‖ tag
//!   nonce = iv XOR seq (left-padded, §5.3)      aad = the 5-byte header
//! TLS 1.2 AES-GCM (RFC 5288): type 03 03 len | explicit nonce (8) ‖ AEAD(plaintext) ‖ tag
//!   nonce = salt (4) ‖ explicit                  aad = seq ‖ type ‖ 03 03 ‖ plaintext length
//! TLS 1.2 ChaCha20-Poly1305 (RFC 7905): type 03 03 len | AEAD(plaintext) ‖ tag
//!   nonce = iv XOR seq                           aad as AES-GCM's
//! ```
//!
//! A record opens into the front of the window it is given
//! ([`RecordKeys::open`]: `ring`'s `open_within` decrypts while it moves),
//! so that records read back to back into a caller's buffer come out as
//! contiguous plaintext where they landed: no copy after decryption.
//! Every check is made before a byte of plaintext is used: the header
//! (version, type, length within the limits), the tag, then (TLS 1.3) the
//! inner type and the plaintext limit. Sequence numbers never wrap.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

use super::super::error::TlsError;

/// A record header: type, legacy version, length.
pub(crate) const HEADER: usize = 5;
/// The most plaintext a record carries (2^14).
pub(crate) const MAX_PLAINTEXT: usize = 1 << 14;
/// The longest TLS 1.3 record body (2^14 + 256, RFC 8446 §5.2).
const MAX_CIPHERTEXT_13: usize = MAX_PLAINTEXT + 256;
/// The longest TLS 1.2 record body (2^14 + 2048, RFC 5246 §6.2.3).
const MAX_CIPHERTEXT_12: usize = MAX_PLAINTEXT + 2048;
/// The longest record, header included, of either version.
pub(crate) const MAX_RECORD: usize = HEADER + MAX_CIPHERTEXT_12;
const TAG: usize = 16;

/// The protocol version the handshake agreed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    Tls12,
    Tls13,
}

/// The AEAD of the agreed cipher suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// A record's content type (RFC 8446 §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContentType {
    ChangeCipherSpec = 20,
    Alert = 21,
    Handshake = 22,
    ApplicationData = 23,
}

impl ContentType {
    fn from_byte(b: u8) -> Option<ContentType> {
        Some(match b {
            20 => ContentType::ChangeCipherSpec,
            21 => ContentType::Alert,
            22 => ContentType::Handshake,
            23 => ContentType::ApplicationData,
            _ => return None,
        })
    }
}

/// A record header, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    bytes: [u8; HEADER],
    /// The body's length (after the header).
    pub(crate) len: usize,
}

/// A record opened: its type, and its plaintext's length (at the front
/// of the window it was opened in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Opened {
    pub(crate) typ: ContentType,
    pub(crate) len: usize,
}

/// The keys of one direction: the AEAD key, its IV, and the sequence
/// number of the next record.
pub(crate) struct RecordKeys {
    version: Version,
    cipher: Cipher,
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl std::fmt::Debug for RecordKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or the IV.
        f.debug_struct("RecordKeys")
            .field("version", &self.version)
            .field("cipher", &self.cipher)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

fn error(what: impl Into<String>) -> TlsError {
    TlsError::new(format!("TLS: {}", what.into()))
}

impl RecordKeys {
    /// Keys from the traffic secrets' key and IV (12 bytes: for TLS 1.2
    /// AES-GCM, the 4-byte salt and 8 bytes rustls derived for the explicit
    /// nonces it sends), starting at sequence number `seq`.
    pub(crate) fn new(
        version: Version,
        cipher: Cipher,
        key: &[u8],
        iv: &[u8],
        seq: u64,
    ) -> Result<RecordKeys, TlsError> {
        let algorithm = match cipher {
            Cipher::Aes128Gcm => &aead::AES_128_GCM,
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
        };
        let key = UnboundKey::new(algorithm, key)
            .map_err(|_| error(format!("a {cipher:?} key of {} bytes", key.len())))?;
        let iv: [u8; 12] = iv
            .try_into()
            .map_err(|_| error(format!("an IV of {} bytes", iv.len())))?;
        Ok(RecordKeys {
            version,
            cipher,
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    pub(crate) fn version(&self) -> Version {
        self.version
    }

    /// The sequence number of the next record.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether TLS 1.2 records carry an 8-byte explicit nonce (AES-GCM).
    fn explicit_nonce(&self) -> usize {
        match (self.version, self.cipher) {
            (Version::Tls12, Cipher::Aes128Gcm | Cipher::Aes256Gcm) => 8,
            _ => 0,
        }
    }

    /// Bytes a record adds to at most [`MAX_PLAINTEXT`] of plaintext, header
    /// included (a record we send has no padding).
    pub(crate) fn overhead(&self) -> usize {
        let inner_type = usize::from(self.version == Version::Tls13);
        HEADER + self.explicit_nonce() + inner_type + TAG
    }

    /// The sequence number for this record; never wraps (RFC 8446 §5.3).
    fn next_seq(&mut self) -> Result<u64, TlsError> {
        let seq = self.seq;
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| error("the record sequence number is exhausted"))?;
        Ok(seq)
    }

    /// iv XOR the sequence number, left-padded (RFC 8446 §5.3, RFC 7905).
    fn xor_nonce(&self, seq: u64) -> [u8; 12] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }

    /// The TLS 1.2 additional data: seq ‖ type ‖ version ‖ length.
    fn aad12(seq: u64, typ: u8, len: usize) -> [u8; 13] {
        let mut aad = [0u8; 13];
        aad[..8].copy_from_slice(&seq.to_be_bytes());
        aad[8] = typ;
        aad[9..11].copy_from_slice(&[3, 3]);
        aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
        aad
    }

    /// Checks a record header: legacy version 03 03, a type this version
    /// allows on an established connection, a length within the limits.
    pub(crate) fn header(&self, bytes: [u8; HEADER]) -> Result<Header, TlsError> {
        let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        if bytes[1..3] != [3, 3] {
            return Err(error(format!(
                "a record with version {:02x}{:02x}, not 0303",
                bytes[1], bytes[2]
            )));
        }
        let typ = ContentType::from_byte(bytes[0]);
        let (allowed, max) = match self.version {
            // Everything is an encrypted application_data record after a
            // TLS 1.3 handshake (a change_cipher_spec only during it).
            Version::Tls13 => (typ == Some(ContentType::ApplicationData), MAX_CIPHERTEXT_13),
            Version::Tls12 => (
                matches!(
                    typ,
                    Some(
                        ContentType::ApplicationData | ContentType::Alert | ContentType::Handshake
                    )
                ),
                MAX_CIPHERTEXT_12,
            ),
        };
        if !allowed {
            return Err(error(format!(
                "unexpected_message: a record of content type {} after the handshake",
                bytes[0]
            )));
        }
        if len > max {
            return Err(error(format!(
                "record_overflow: a record of {len} bytes (at most {max})"
            )));
        }
        if len < self.overhead() - HEADER {
            return Err(error(format!(
                "decode_error: a record of {len} bytes is shorter than its AEAD's overhead"
            )));
        }
        Ok(Header { bytes, len })
    }

    /// Opens the record whose header is `header` and whose body is
    /// `window[src..]` (exactly), decrypting its plaintext to the front of
    /// `window`. On error nothing in `window` may be used.
    pub(crate) fn open(
        &mut self,
        header: &Header,
        window: &mut [u8],
        src: usize,
    ) -> Result<Opened, TlsError> {
        debug_assert_eq!(window.len() - src, header.len);
        let seq = self.next_seq()?;
        let bad_mac = || {
            error(
                "bad_record_mac: a record failed authentication (tampered, truncated, \
                 reordered or replayed)",
            )
        };
        match self.version {
            Version::Tls13 => {
                let nonce = Nonce::assume_unique_for_key(self.xor_nonce(seq));
                let plain = self
                    .key
                    .open_within(nonce, Aad::from(header.bytes), window, src..)
                    .map_err(|_| bad_mac())?;
                // The inner type is the last non-zero byte (RFC 8446 §5.4).
                let Some(at) = plain.iter().rposition(|&b| b != 0) else {
                    return Err(error("unexpected_message: a record with no content type"));
                };
                let typ = ContentType::from_byte(plain[at]).filter(|t| {
                    // A TLS 1.3 record never carries a change_cipher_spec
                    // inside (RFC 8446 §5).
                    *t != ContentType::ChangeCipherSpec
                });
                let Some(typ) = typ else {
                    return Err(error(format!(
                        "unexpected_message: inner content type {}",
                        plain[at]
                    )));
                };
                if at > MAX_PLAINTEXT {
                    return Err(error(format!(
                        "record_overflow: {at} bytes of plaintext in one record"
                    )));
                }
                Ok(Opened { typ, len: at })
            }
            Version::Tls12 => {
                let Some(typ) = ContentType::from_byte(header.bytes[0]) else {
                    unreachable!("checked by header()")
                };
                let explicit = self.explicit_nonce();
                let len = header.len - explicit - TAG;
                if len > MAX_PLAINTEXT {
                    return Err(error(format!(
                        "record_overflow: {len} bytes of plaintext in one record"
                    )));
                }
                let nonce = match explicit {
                    0 => self.xor_nonce(seq),
                    _ => {
                        let mut n = [0u8; 12];
                        n[..4].copy_from_slice(&self.iv[..4]);
                        n[4..].copy_from_slice(&window[src..src + 8]);
                        n
                    }
                };
                let aad = Self::aad12(seq, header.bytes[0], len);
                let plain = self
                    .key
                    .open_within(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        window,
                        src + explicit..,
                    )
                    .map_err(|_| bad_mac())?;
                debug_assert_eq!(plain.len(), len);
                Ok(Opened { typ, len })
            }
        }
    }

    /// Appends one record of type `typ` holding the concatenation of
    /// `pieces` (at most [`MAX_PLAINTEXT`] bytes in all) to `out`: the
    /// plaintext is copied once, into `out`, and sealed there.
    pub(crate) fn seal(
        &mut self,
        typ: ContentType,
        pieces: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), TlsError> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        assert!(len <= MAX_PLAINTEXT, "a record of {len} bytes");
        let seq = self.next_seq()?;
        let start = out.len();
        let body_len = self.overhead() - HEADER + len;
        let outer = match self.version {
            Version::Tls13 => ContentType::ApplicationData,
            Version::Tls12 => typ,
        } as u8;
        let header = [outer, 3, 3, (body_len >> 8) as u8, body_len as u8];
        out.reserve(HEADER + body_len);
        out.extend_from_slice(&header);
        let nonce;
        let explicit = self.explicit_nonce();
        match self.version {
            Version::Tls13 => nonce = self.xor_nonce(seq),
            Version::Tls12 => {
                // rustls' choice of explicit nonce: the derived 8 bytes
                // XOR the sequence number, unique per key (RFC 5288 §3).
                nonce = self.xor_nonce(seq);
                if explicit > 0 {
                    out.extend_from_slice(&nonce[4..]);
                }
            }
        }
        let plain_at = out.len();
        for p in pieces {
            out.extend_from_slice(p);
        }
        let nonce = Nonce::assume_unique_for_key(nonce);
        let tag = match self.version {
            Version::Tls13 => {
                out.push(typ as u8);
                self.key
                    .seal_in_place_separate_tag(nonce, Aad::from(header), &mut out[plain_at..])
            }
            Version::Tls12 => {
                let aad = Self::aad12(seq, typ as u8, len);
                self.key
                    .seal_in_place_separate_tag(nonce, Aad::from(aad), &mut out[plain_at..])
            }
        }
        .map_err(|_| error("sealing a record failed"))?;
        out.extend_from_slice(tag.as_ref());
        debug_assert_eq!(out.len() - start, HEADER + body_len);
        Ok(())
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
