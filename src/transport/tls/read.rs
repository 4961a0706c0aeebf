//! The receiving half of our record layer, without IO: records are opened
//! where they were read, in the read-ahead or in the caller's own buffer.
//!
//! ```text
//! read-ahead (64 KiB + a record): records opened one at a time, in place;
//!   application data handed out from there (the small remainder, copied)
//! caller's buffer (room for a whole record): ciphertext read there, in reads that end
//!   on record boundaries when the peer sends full records; each record opened into the
//!   plaintext before it (open_within), so the plaintext is contiguous where it landed;
//!   a partial record at the end goes back to the read-ahead
//! control records: alerts (close_notify = end of stream, anything else an error),
//!   KeyUpdate (new receive keys from rustls; answered when asked), NewSessionTicket
//!   (to rustls); anything else refused
//! ```

use std::ops::Range;

use super::record::{ContentType, Header, RecordKeys, Version, HEADER, MAX_PLAINTEXT, MAX_RECORD};
use crate::transport::error::TlsError;

/// How much the read-ahead reads at most past a record.
pub(crate) const READ_AHEAD: usize = 64 << 10;

/// The most a direct read asks for at once: the records it brings are
/// opened while they are still in the CPU's cache (as the sender seals
/// `WRITE_CHUNK` at a time), not after megabytes more have come in.
const DIRECT_READ: usize = 256 << 10;

/// A post-handshake handshake message longer than this is refused (a
/// NewSessionTicket is a few hundred bytes).
const MAX_HANDSHAKE_MESSAGE: usize = 64 << 10;

/// What the stream does for the reader when the peer's control messages
/// ask for it: rustls' key schedule, and our own sending side.
pub(crate) trait PostHandshake {
    /// The peer's next receive keys after its KeyUpdate.
    fn update_rx(&mut self) -> Result<RecordKeys, TlsError>;
    /// The peer asked for our KeyUpdate (update_requested).
    fn owe_key_update(&mut self) -> Result<(), TlsError>;
    /// A NewSessionTicket's body (refused by a server).
    fn ticket(&mut self, payload: &[u8]) -> Result<(), TlsError>;
}

fn error(what: impl Into<String>) -> TlsError {
    TlsError::new(format!("TLS: {}", what.into()))
}

/// The reading side: the keys, the read-ahead, a handshake message being
/// reassembled, and whether the stream has ended.
pub(crate) struct RecordReader {
    keys: RecordKeys,
    ahead: Box<[u8]>,
    /// Ciphertext not processed yet: `ahead[start..end]`.
    start: usize,
    end: usize,
    /// Plaintext of an application data record in the read-ahead, not
    /// handed out yet.
    plain: Range<usize>,
    /// A post-handshake handshake message in pieces.
    handshake: Vec<u8>,
    /// close_notify received (or the stream ended between records).
    closed: bool,
}

impl std::fmt::Debug for RecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordReader")
            .field("keys", &self.keys)
            .field("buffered", &(self.end - self.start))
            .field("plain", &self.plain.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl RecordReader {
    /// With `keys`, and what the handshake received and did not process.
    pub(crate) fn new(keys: RecordKeys, ciphertext: &[u8]) -> Result<RecordReader, TlsError> {
        let mut ahead = vec![0u8; READ_AHEAD + MAX_RECORD].into_boxed_slice();
        if ciphertext.len() > ahead.len() {
            return Err(error("more than a read-ahead left over by the handshake"));
        }
        ahead[..ciphertext.len()].copy_from_slice(ciphertext);
        Ok(RecordReader {
            keys,
            ahead,
            start: 0,
            end: ciphertext.len(),
            plain: 0..0,
            handshake: Vec::new(),
            closed: false,
        })
    }

    /// Whether the peer ended the stream (close_notify).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Marks the end of the stream: the peer closed the TCP stream. Between
    /// records that is an end (Python closes without close_notify; Dask's
    /// framing catches a cut message); inside one it is an error.
    pub(crate) fn eof(&mut self) -> Result<(), TlsError> {
        if self.start != self.end || !self.handshake.is_empty() {
            return Err(error(
                "the connection ended in the middle of a record (truncated)",
            ));
        }
        self.closed = true;
        Ok(())
    }

    /// Plaintext ready in the read-ahead.
    pub(crate) fn plaintext(&self) -> &[u8] {
        &self.ahead[self.plain.clone()]
    }

    /// `n` bytes of [`plaintext`](Self::plaintext) were handed out.
    pub(crate) fn consume(&mut self, n: usize) {
        self.plain.start += n;
    }

    /// Opens the next whole record in the read-ahead, if there is one
    /// (`false`: more bytes are needed). Application data becomes
    /// [`plaintext`](Self::plaintext); control messages are acted on.
    pub(crate) fn open_buffered(&mut self, post: &mut dyn PostHandshake) -> Result<bool, TlsError> {
        debug_assert!(self.plain.is_empty());
        let Some(header) = self.whole_record()? else {
            return Ok(false);
        };
        let (start, total) = (self.start, HEADER + header.len);
        let opened = self
            .keys
            .open(&header, &mut self.ahead[start..start + total], HEADER)?;
        self.start += total;
        let plain = start..start + opened.len;
        match opened.typ {
            ContentType::ApplicationData => {
                self.application_data()?;
                self.plain = plain;
            }
            typ => {
                let bytes = self.ahead[plain].to_vec();
                self.control(typ, &bytes, post)?;
            }
        }
        Ok(true)
    }

    /// The header of the whole record at `start`, if all of it is buffered.
    fn whole_record(&self) -> Result<Option<Header>, TlsError> {
        let have = self.end - self.start;
        if have < HEADER {
            return Ok(None);
        }
        let header = self.keys.header(self.header_bytes(self.start))?;
        Ok((have >= HEADER + header.len).then_some(header))
    }

    fn header_bytes(&self, at: usize) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h.copy_from_slice(&self.ahead[at..at + HEADER]);
        h
    }

    /// Room for a read into the read-ahead: what is left of it is moved to
    /// the front when less than a record's room remains.
    pub(crate) fn room(&mut self) -> &mut [u8] {
        if self.start == self.end && self.plain.is_empty() {
            (self.start, self.end) = (0, 0);
        } else if self.ahead.len() - self.end < MAX_RECORD && self.plain.is_empty() {
            self.ahead.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        &mut self.ahead[self.end..]
    }

    /// `n` bytes were read into [`room`](Self::room).
    pub(crate) fn filled(&mut self, n: usize) {
        self.end += n;
    }

    /// How much to read straight into a caller's buffer with `room` bytes
    /// free, if a whole record fits there: to the end of the record begun in
    /// the read-ahead, then as many full-size records as fit (the usual
    /// bulk stream, so that reads end on record boundaries). `None`: read
    /// into the read-ahead.
    pub(crate) fn direct_read(&self, room: usize) -> Option<usize> {
        if !self.plain.is_empty() || self.closed {
            return None;
        }
        let have = self.end - self.start;
        let full = MAX_PLAINTEXT + self.keys.overhead();
        let first = match have >= HEADER {
            true => {
                let h = self.header_bytes(self.start);
                HEADER + usize::from(u16::from_be_bytes([h[3], h[4]]))
            }
            false => full,
        };
        if room < first.max(full) || first <= have {
            return None;
        }
        let room = room.min(first.max(DIRECT_READ));
        Some(first + (room - first) / full * full)
    }

    /// Bytes of a record begun in the read-ahead: a direct read goes behind
    /// them (`dst[pending..]`).
    pub(crate) fn pending(&self) -> usize {
        self.end - self.start
    }

    /// Opens the records in `dst` once `read` bytes were read into
    /// `dst[pending..]` (the record begun in the read-ahead is put in front
    /// first, less than a record): their plaintext, contiguous, at the front
    /// of `dst`; a partial record at the end back into the read-ahead.
    /// Returns the plaintext's length.
    pub(crate) fn open_direct(
        &mut self,
        dst: &mut [u8],
        read: usize,
        post: &mut dyn PostHandshake,
    ) -> Result<usize, TlsError> {
        let have = self.end - self.start;
        dst[..have].copy_from_slice(&self.ahead[self.start..self.end]);
        (self.start, self.end) = (0, 0);
        let filled = have + read;
        let (mut r, mut w) = (0, 0);
        while filled - r >= HEADER {
            let mut h = [0u8; HEADER];
            h.copy_from_slice(&dst[r..r + HEADER]);
            let header = self.keys.header(h)?;
            let end = r + HEADER + header.len;
            if end > filled {
                break;
            }
            let opened = self.keys.open(&header, &mut dst[w..end], r - w + HEADER)?;
            r = end;
            match opened.typ {
                ContentType::ApplicationData => {
                    self.application_data()?;
                    w += opened.len;
                }
                typ => {
                    let bytes = dst[w..w + opened.len].to_vec();
                    self.control(typ, &bytes, post)?;
                    if self.closed {
                        return Ok(w); // nothing after close_notify counts
                    }
                }
            }
        }
        self.ahead[..filled - r].copy_from_slice(&dst[r..filled]);
        self.end = filled - r;
        Ok(w)
    }

    /// Application data may not cut into a handshake message (RFC 8446 §5.1).
    fn application_data(&self) -> Result<(), TlsError> {
        match self.handshake.is_empty() {
            true => Ok(()),
            false => Err(error(
                "unexpected_message: application data inside a handshake message",
            )),
        }
    }

    fn control(
        &mut self,
        typ: ContentType,
        bytes: &[u8],
        post: &mut dyn PostHandshake,
    ) -> Result<(), TlsError> {
        match typ {
            ContentType::Alert => {
                self.application_data()?;
                self.alert(bytes)
            }
            ContentType::Handshake => {
                if bytes.is_empty() {
                    return Err(error("unexpected_message: an empty handshake record"));
                }
                self.handshake.extend_from_slice(bytes);
                self.handshake_messages(post)
            }
            other => Err(error(format!(
                "unexpected_message: a {other:?} record after the handshake"
            ))),
        }
    }

    fn alert(&mut self, bytes: &[u8]) -> Result<(), TlsError> {
        let [level, description] = bytes else {
            return Err(error(format!(
                "decode_error: an alert of {} bytes",
                bytes.len()
            )));
        };
        if *description == 0 {
            self.closed = true; // close_notify
            return Ok(());
        }
        let alert = rustls::AlertDescription::from(*description);
        let e = TlsError::session(&rustls::Error::AlertReceived(alert));
        Err(match level {
            1 => TlsError::new(format!("{e} (a warning alert: refused)")),
            _ => e,
        })
    }

    /// Acts on every whole handshake message reassembled.
    fn handshake_messages(&mut self, post: &mut dyn PostHandshake) -> Result<(), TlsError> {
        while self.handshake.len() >= 4 {
            let h = &self.handshake;
            let len = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
            if len > MAX_HANDSHAKE_MESSAGE {
                return Err(error(format!("a handshake message of {len} bytes")));
            }
            if h.len() < 4 + len {
                return Ok(());
            }
            let typ = h[0];
            let body: Vec<u8> = h[4..4 + len].to_vec();
            self.handshake.drain(..4 + len);
            match (self.keys.version(), typ) {
                (Version::Tls13, 24) => {
                    let request = match body[..] {
                        [0] => false,
                        [1] => true,
                        _ => return Err(error("decode_error: a malformed KeyUpdate")),
                    };
                    // New keys from the next record on: nothing more of
                    // this record may follow (RFC 8446 §5.1).
                    if !self.handshake.is_empty() {
                        return Err(error(
                            "unexpected_message: a KeyUpdate not at the end of its record",
                        ));
                    }
                    self.keys = post.update_rx()?;
                    if request {
                        post.owe_key_update()?;
                    }
                }
                (Version::Tls13, 4) => post.ticket(&body)?,
                (Version::Tls12, 0) => {
                    return Err(error(
                        "the peer asked for a renegotiation (HelloRequest): not supported",
                    ))
                }
                (_, typ) => {
                    return Err(error(format!(
                        "unexpected_message: a handshake message of type {typ} after the handshake"
                    )))
                }
            }
        }
        Ok(())
    }
}
