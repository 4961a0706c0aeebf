//! A connection's receiving side: the async driver of its [`FrameReader`].
//!
//! ```text
//! poll ──▶ FrameReader::poll(rbuf) ──Need──▶ read into target (deadline armed by a message's
//!   ▲                                         first byte) ──n──▶ filled(n) ──┐
//!   └─────────────────────────────────────────────────────────────────────────┘
//!                                  ──Message──▶ Envelope     0 bytes read ──▶ end(rbuf)
//! ```

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::envelope::Envelope;
use crate::limits::Limits;
use crate::transport::deadline::Deadline;
use crate::transport::error::{TimeoutPhase, TransportError};
use crate::transport::session::{self, Session};
use crate::transport::stats::Received;
use crate::value::Value;

use super::{Event, FrameReader, Need, Target};

/// The receiving state of a connection or its read half: the reader, the
/// shared read buffer it is lent, and the per-message deadline.
#[derive(Debug)]
pub(crate) struct Receiver {
    frames: FrameReader,
    rbuf: BytesMut,
    deadline: Deadline,
    /// The peer closed the stream cleanly between messages.
    eof: bool,
}

impl Receiver {
    pub(crate) fn new(frames: FrameReader, timeout: Option<Duration>) -> Receiver {
        Receiver {
            frames,
            rbuf: BytesMut::new(),
            deadline: Deadline::new(timeout),
            eof: false,
        }
    }

    /// Counters of the messages received so far.
    pub(crate) fn received(&self) -> Received {
        self.frames.received()
    }

    /// Starts (or stops) expecting checksum trailers, from the next message.
    pub(crate) fn set_checksums(&mut self, on: bool) {
        self.frames.set_checksums(on);
    }

    /// Swaps the limits (the handshake is read under tight ones).
    pub(crate) fn replace_limits(&mut self, limits: Arc<Limits>) -> Arc<Limits> {
        self.frames.replace_limits(limits)
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.frames.is_poisoned()
    }

    pub(crate) fn poison(&mut self) {
        self.frames.poison();
        self.deadline.disarm();
    }

    /// Capacity of the read buffer plus the large buffer being filled:
    /// what the connection has reserved for a message in progress.
    pub(crate) fn reserved(&self) -> usize {
        self.rbuf.capacity() + self.frames.reserved()
    }

    /// The next message; `None` after a clean close or an error.
    pub(crate) fn poll_recv<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Envelope, TransportError>>> {
        if self.eof || self.frames.is_poisoned() {
            return Poll::Ready(None);
        }
        // A flood of buffered messages must still let other tasks run.
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        match self.poll_message(io, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(env))) => {
                coop.made_progress();
                Poll::Ready(Some(Ok(env)))
            }
            Poll::Ready(Ok(None)) => {
                self.eof = true;
                Poll::Ready(None)
            }
            Poll::Ready(Err(e)) => {
                self.poison();
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    /// The next message; `None` after a clean close or an error.
    /// Cancel-safe.
    pub(crate) async fn recv<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
    ) -> Option<Result<Envelope, TransportError>> {
        std::future::poll_fn(|cx| self.poll_recv(io, cx)).await
    }

    /// The next message, decoded as the session has it (its blocks
    /// deserialized, or kept as they came). Cancel-safe.
    pub(crate) async fn recv_value<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        session: &Session,
    ) -> Option<Result<Value, TransportError>> {
        let env = match self.recv(io).await? {
            Ok(env) => env,
            Err(e) => return Some(Err(e)),
        };
        Some(self.decode_value(&env, session))
    }

    /// The next message, read as `M` under the session's options.
    /// Cancel-safe.
    #[cfg(feature = "serde")]
    pub(crate) async fn recv_msg<R: AsyncRead + Unpin, M: serde::de::DeserializeOwned>(
        &mut self,
        io: &mut R,
        session: &Session,
    ) -> Option<Result<M, TransportError>> {
        let env = match self.recv(io).await? {
            Ok(env) => env,
            Err(e) => return Some(Err(e)),
        };
        Some(self.after_decode(session::decode_msg(&env, session)))
    }

    /// A message [`recv`](Receiver::recv) gave, decoded as
    /// [`recv_value`](Receiver::recv_value) decodes it.
    pub(crate) fn decode_value(
        &mut self,
        env: &Envelope,
        session: &Session,
    ) -> Result<Value, TransportError> {
        self.after_decode(session::decode_value(env, session))
    }

    /// A message that does not decode leaves the stream out of sync: poison.
    fn after_decode<M>(&mut self, r: Result<M, TransportError>) -> Result<M, TransportError> {
        if r.is_err() {
            self.poison();
        }
        r
    }

    fn poll_message<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Envelope>, TransportError>> {
        loop {
            let phase = match self.frames.poll(&mut self.rbuf)? {
                Event::Message(env) => {
                    self.deadline.disarm();
                    if !self.rbuf.is_empty() {
                        self.deadline.arm(); // the next message has begun
                    }
                    return Poll::Ready(Ok(Some(env)));
                }
                Event::Need(Need::Prelude { .. }) => TimeoutPhase::ReadPrelude,
                Event::Need(_) => TimeoutPhase::ReadFrames,
                Event::Head(_) | Event::Forward(_) => {
                    unreachable!("a connection's reader assembles messages")
                }
            };
            let target = self.frames.target(&mut self.rbuf)?;
            let n = match ready!(read(io, cx, target, &mut self.deadline)) {
                Ok(n) => n,
                Err(ReadError::Io(e)) => return Poll::Ready(Err(e.into())),
                Err(ReadError::Timeout) => {
                    return Poll::Ready(Err(TransportError::Timeout { phase }))
                }
            };
            if n == 0 {
                return Poll::Ready(self.frames.end(&self.rbuf).map(|()| None));
            }
            self.frames.filled(n);
        }
    }
}

/// Why a read failed.
enum ReadError {
    Io(io::Error),
    /// The message's deadline passed.
    Timeout,
}

/// One read into `target` (0 at EOF), with the deadline armed by its first
/// byte and checked.
fn read<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
    target: Target<'_>,
    deadline: &mut Deadline,
) -> Poll<Result<usize, ReadError>> {
    let polled = match target {
        Target::Buf { buf, limit } => {
            // `read_buf` into the spare capacity (no zero-filling, no
            // unsafe here); the future keeps no state, so polling a fresh
            // one each time is exact.
            let mut limited = buf.limit(limit);
            let read = std::pin::pin!(io.read_buf(&mut limited));
            read.poll(cx)
        }
        Target::Slice(slice) => {
            let mut rb = tokio::io::ReadBuf::new(slice);
            std::pin::Pin::new(&mut *io)
                .poll_read(cx, &mut rb)
                .map_ok(|()| rb.filled().len())
        }
    };
    match polled {
        Poll::Ready(Ok(n)) => {
            if n > 0 {
                deadline.arm(); // no-op when already armed
                if deadline.expired() {
                    return Poll::Ready(Err(ReadError::Timeout));
                }
            }
            Poll::Ready(Ok(n))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(ReadError::Io(e))),
        Poll::Pending => {
            if deadline.poll_expired(cx) {
                return Poll::Ready(Err(ReadError::Timeout));
            }
            Poll::Pending
        }
    }
}
