//! [`FrameCodec`]: Dask's framing as a tokio-util [`Decoder`] / [`Encoder`],
//! for [`Framed`](tokio_util::codec::Framed), `FramedRead` and
//! `FramedWrite`; a thin driver over the read path's [`FrameReader`] and the
//! write path's plan.
//!
//! ```text
//! decode(src)      ──▶ FrameReader (every frame a slice of src) ──▶ Message ──▶ Some(Envelope)
//!                                                               └─▶ Need ──▶ room kept in src, None
//! decode_eof(src)  ──▶ None between messages, else Truncated (poisoned)
//! encode(env, dst) ──▶ the sender's limits ──▶ write::plan: prelude, every frame copied into dst
//! ```
//!
//! The decoder is the connection's, but for where frames go: `FramedRead`
//! owns the read buffer and fills it, so every frame, large or small, is a
//! slice of it.

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder, Framed, FramedRead, FramedWrite};

use crate::envelope::Envelope;
use crate::limits::Limits;

use super::error::TransportError;
use super::read::{Event, FrameReader};
use super::stats::{reserve_counted, Stats};
use super::write;

/// Dask's TCP framing as a tokio-util [`Decoder`] / [`Encoder`].
///
/// * Decoding is zero-copy: each message's frames are slices of the read
///   buffer. Every declared size is checked against [`Limits`] first, and
///   at most [`Limits::prealloc_cap`] is reserved ahead of the bytes that
///   arrived.
/// * **Encoding copies** every payload into the write buffer (tokio-util's
///   `Encoder` writes into one `BytesMut`). For large payloads use
///   [`Connection`](super::Connection), which writes each frame's own
///   `Bytes` with vectored writes.
/// * After any error the codec is poisoned: `FramedRead` resumes after a
///   decoder error (tokio#3976), so every later `decode` returns
///   [`TransportError::Poisoned`], never a message.
/// * `decode_eof` in the middle of a message gives
///   [`EnvelopeError::Truncated`](crate::EnvelopeError::Truncated) with the
///   offset reached.
///
/// # Examples
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use framewire::transport::FrameCodec;
/// use framewire::{Envelope, Limits};
/// use tokio_util::codec::{Decoder, Encoder};
///
/// let mut codec = FrameCodec::builder().limits(Limits::dask_compat()).new_codec();
/// let env = Envelope::new(vec![Bytes::from_static(b"\x81\xa2op\xa4ping")])?;
/// let mut buf = BytesMut::new();
/// codec.encode(&env, &mut buf)?;
/// buf.extend_from_slice(&[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // count = 0
/// assert_eq!(codec.decode(&mut buf)?, Some(env));
/// assert!(codec.decode(&mut buf).is_err()); // EmptyMessage
/// assert!(codec.is_poisoned());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FrameCodec {
    reader: FrameReader,
    /// The send counters (the receive ones are the reader's).
    sent: Stats,
}

/// Options for a [`FrameCodec`], in the style of
/// `tokio_util::codec::length_delimited::Builder`.
///
/// ```
/// use framewire::transport::FrameCodec;
/// use framewire::Limits;
/// let codec = FrameCodec::builder().limits(Limits::dask_compat()).new_codec();
/// assert_eq!(codec.limits().max_depth, 1024);
/// ```
#[derive(Clone, Debug, Default)]
pub struct FrameCodecBuilder {
    limits: Limits,
}

impl FrameCodecBuilder {
    /// The limits every incoming prelude is checked against (and outgoing
    /// messages too: the codec refuses to send what it would refuse to
    /// receive). Default: [`Limits::default()`] (Dask's profile);
    /// [`Limits::strict()`] for untrusted peers.
    pub fn limits(&mut self, limits: Limits) -> &mut FrameCodecBuilder {
        self.limits = limits;
        self
    }

    /// A codec with these options.
    pub fn new_codec(&self) -> FrameCodec {
        FrameCodec {
            reader: FrameReader::shared_only(self.limits.clone()),
            sent: Stats::default(),
        }
    }

    /// A `FramedRead` over `io` with a codec with these options.
    pub fn new_read<T: tokio::io::AsyncRead>(&self, io: T) -> FramedRead<T, FrameCodec> {
        FramedRead::new(io, self.new_codec())
    }

    /// A `FramedWrite` over `io` with a codec with these options.
    pub fn new_write<T: tokio::io::AsyncWrite>(&self, io: T) -> FramedWrite<T, FrameCodec> {
        FramedWrite::new(io, self.new_codec())
    }

    /// A `Framed` over `io` with a codec with these options.
    pub fn new_framed<T>(&self, io: T) -> Framed<T, FrameCodec>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    {
        Framed::new(io, self.new_codec())
    }
}

impl FrameCodec {
    /// A codec with [`Limits::default()`].
    pub fn new() -> FrameCodec {
        FrameCodecBuilder::default().new_codec()
    }

    /// Options for a codec.
    pub fn builder() -> FrameCodecBuilder {
        FrameCodecBuilder::default()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        self.reader.limits()
    }

    /// What the codec has encoded and decoded so far. The send counters
    /// count messages encoded into the write buffer (`Framed` writes them
    /// out later), with every frame byte in
    /// [`bytes_copied_on_send`](Stats::bytes_copied_on_send): the encoder
    /// copies them all (and the bytes of earlier messages still in the
    /// write buffer when growing it moves them). The receive counters count
    /// messages decoded, and [`bytes_copied_on_receive`](Stats::bytes_copied_on_receive)
    /// (all of it [`bytes_relocated_on_receive`](Stats::bytes_relocated_on_receive))
    /// the bytes moved when the decoder grew the read buffer (decoded frames
    /// are slices of it: nothing else is copied).
    ///
    /// ```
    /// use bytes::{Bytes, BytesMut};
    /// use framewire::transport::FrameCodec;
    /// use framewire::Envelope;
    /// use tokio_util::codec::Encoder;
    ///
    /// let mut codec = FrameCodec::new();
    /// let env = Envelope::new(vec![Bytes::from_static(b"\x90"), Bytes::from(vec![1u8; 100_000])])?;
    /// codec.encode(&env, &mut BytesMut::new())?;
    /// assert_eq!(codec.stats().bytes_copied_on_send, 100_001);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        Stats::merge(self.sent, self.reader.received())
    }

    /// Whether an earlier error stopped the codec.
    pub fn is_poisoned(&self) -> bool {
        self.reader.is_poisoned()
    }
}

impl Default for FrameCodec {
    fn default() -> FrameCodec {
        FrameCodec::new()
    }
}

impl Decoder for FrameCodec {
    type Item = Envelope;
    type Error = TransportError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Envelope>, TransportError> {
        match self.reader.poll(src)? {
            Event::Message(env) => Ok(Some(env)),
            Event::Need(_) => {
                self.reader.reserve_shared(src);
                Ok(None)
            }
            Event::Head(_) | Event::Forward(_) => unreachable!("a message reader relays nothing"),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Envelope>, TransportError> {
        match self.decode(src)? {
            Some(env) => Ok(Some(env)),
            None => self.reader.end(src).map(|()| None),
        }
    }
}

/// Copies the message into `dst` (every payload byte, counted in
/// [`FrameCodec::stats`]); refuses,
/// before writing anything, a message the codec's own limits would refuse.
impl Encoder<&Envelope> for FrameCodec {
    type Error = TransportError;

    fn encode(&mut self, env: &Envelope, dst: &mut BytesMut) -> Result<(), TransportError> {
        env.check_limits(self.reader.limits())?;
        let len = usize::try_from(env.wire_len()).map_err(|_| {
            TransportError::Encode(crate::error::EncodeError::TooLong { len: usize::MAX })
        })?;
        // Earlier messages still in the buffer move if growing it moves it.
        self.sent.bytes_copied_on_send += reserve_counted(dst, len);
        let mut large = 0;
        let small = write::plan(env, None, dst, |dst, _, frame| {
            // The copy a connection does not make: counted here, as it is made.
            dst.put_slice(frame);
            large += frame.len() as u64;
        });
        self.sent.bytes_copied_on_send += small + large;
        self.sent.messages_sent += 1;
        self.sent.frames_sent += env.frames().len() as u64;
        self.sent.bytes_sent += env.wire_len();
        Ok(())
    }
}

/// As `Encoder<&Envelope>`.
impl Encoder<Envelope> for FrameCodec {
    type Error = TransportError;

    fn encode(&mut self, env: Envelope, dst: &mut BytesMut) -> Result<(), TransportError> {
        self.encode(&env, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::EnvelopeError;
    use crate::protocol::DecodeError;
    use bytes::Bytes;

    fn wire(frames: &[&'static [u8]]) -> Bytes {
        Envelope::new(frames.iter().map(|f| Bytes::from_static(f)).collect())
            .unwrap()
            .to_bytes()
    }

    #[test]
    fn decode_splits_back_to_back_messages() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&wire(&[b"\xa1a", b"xyz"]));
        buf.extend_from_slice(&wire(&[b"\xa1b"]));
        let mut c = FrameCodec::new();
        let a = c.decode(&mut buf).unwrap().unwrap();
        assert_eq!(a.frames(), [&b"\xa1a"[..], b"xyz"]);
        let b = c.decode(&mut buf).unwrap().unwrap();
        assert_eq!(b.frames(), [&b"\xa1b"[..]]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert_eq!(c.decode_eof(&mut buf).unwrap(), None);
    }

    #[test]
    fn poisoned_after_error() {
        let mut buf = BytesMut::from(&[16u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
        let mut c = FrameCodec::new();
        assert!(matches!(
            c.decode(&mut buf),
            Err(TransportError::Decode(DecodeError::Envelope(
                EnvelopeError::EmptyMessage
            )))
        ));
        buf.clear();
        buf.extend_from_slice(&wire(&[b"\xa1a"]));
        assert!(matches!(c.decode(&mut buf), Err(TransportError::Poisoned)));
        assert!(c.is_poisoned());
    }

    #[test]
    fn eof_mid_message_is_truncated() {
        let w = wire(&[b"\xa1a", b"xyz"]);
        let mut buf = BytesMut::from(&w[..w.len() - 1]);
        let mut c = FrameCodec::new();
        match c.decode_eof(&mut buf) {
            Err(TransportError::Decode(DecodeError::Envelope(EnvelopeError::Truncated {
                offset,
                needed,
                ..
            }))) => {
                assert_eq!(offset, w.len() as u64 - 1);
                assert_eq!(needed, w.len() as u64);
            }
            other => panic!("{other:?}"),
        }
        assert!(c.is_poisoned());
    }
}
