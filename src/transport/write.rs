//! The write side of a [`Connection`](super::Connection): one queued
//! message, written with vectored writes from the frames' own `Bytes`.
//!
//! ```text
//! Envelope { frames: [f0 300 B, f1 40 B, f2 64 MiB, f3 12 B] }
//!
//! chunks:  ┌ prelude (N, count, lengths) + f0 + f1 ┐ ┌ f2 (its own Bytes) ┐ ┌ f3 ┐
//!          └──── one buffer, small frames copied ──┘ └──── never copied ──┘ └copy┘
//!
//! writev(chunks[idx][off..], chunks[idx+1..], ≤ MAX_IOVECS slices) ──n──▶ advance (idx, off) by n
//! ```
//!
//! Frames under [`COALESCE_THRESHOLD`] are copied next to the prelude (one
//! allocation per message), so a small message costs one system call; larger
//! frames go to the kernel from their own memory. A partial write resumes at
//! the exact chunk and offset. Writers that are not vectored
//! ([`AsyncWrite::is_write_vectored`] is false) get one chunk per call: the
//! small frames are already coalesced, and large frames need no help.
//!
//! After an error, a deadline, or a cancelled send that had written part of
//! its message, the writer is poisoned: a later message would otherwise be
//! appended after half a message.

use std::io::{self, IoSlice};
use std::mem;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use smallvec::SmallVec;
use tokio::io::AsyncWrite;

use crate::envelope::Envelope;
use crate::limits::Limits;
use crate::value::Value;

use super::checksum;
use super::deadline::Deadline;
use super::error::{TimeoutPhase, TransportError};
use super::session::{self, Session};
use super::stats::Stats;

/// Frames shorter than this (16 KiB) are copied next to the prelude when a
/// [`Connection`](super::Connection) sends them, into one buffer per message,
/// instead of getting an iovec of their own (h2 makes the same trade with
/// its `CHAIN_THRESHOLD`). Copying 16 KiB costs about a microsecond, less
/// than the bookkeeping of a separate slice; larger frames are never copied
/// (they go to the kernel from their own memory).
pub const COALESCE_THRESHOLD: usize = 16 << 10;

/// Slices passed to one vectored write: Linux's `IOV_MAX`. A message with
/// more chunks is written in several calls.
pub(crate) const MAX_IOVECS: usize = 1024;

/// A message being written.
#[derive(Debug)]
struct Outgoing {
    chunks: Vec<Bytes>,
    /// The chunk being written, and the offset inside it.
    idx: usize,
    off: usize,
    /// Bytes of the message written so far.
    written: u64,
    /// Frames, wire bytes (prelude included) and the frame bytes copied
    /// into the coalescing buffer (counted as they were copied): what
    /// [`Stats`] adds up once the message is out.
    frames: u64,
    wire_len: u64,
    copied: u64,
    /// With checksums on and large frames in the message: their CRCs,
    /// computed as they are written, and the trailer still to append.
    sums: Option<Box<Sums>>,
}

/// CRCs of a message whose trailer is written last (see [`checksum`]).
#[derive(Debug)]
struct Sums {
    /// One per frame; large frames' are filled in as they are written.
    crcs: Vec<u32>,
    /// The frame lengths, for the length table's CRC.
    lengths: Vec<u64>,
    /// For each chunk that is a large frame, its frame index.
    chunk_frame: Vec<Option<usize>>,
    running: crc32fast::Hasher,
}

/// The one plan of how a message goes out, for [`Connection`](super::Connection)
/// and [`FrameCodec`](super::FrameCodec): its prelude
/// ([`Envelope::put_prelude`], declaring a checksum trailer of `trailer`
/// bytes if any), then its frames in order, each frame under
/// [`COALESCE_THRESHOLD`] copied into `buf` after the prelude, each larger
/// one handed to `large` as its own `Bytes` with its index (the connection
/// gives it an iovec of its own; the codec copies it too). Returns the
/// frame bytes copied into `buf`.
pub(crate) fn plan(
    env: &Envelope,
    trailer: Option<usize>,
    buf: &mut BytesMut,
    mut large: impl FnMut(&mut BytesMut, usize, &Bytes),
) -> u64 {
    env.put_prelude(buf, trailer.map(|len| len as u64));
    let mut copied = 0;
    for (i, f) in env.frames().iter().enumerate() {
        if f.len() < COALESCE_THRESHOLD {
            // The copy of this message: counted here, as it is made.
            buf.put_slice(f);
            copied += f.len() as u64;
        } else {
            large(buf, i, f);
        }
    }
    copied
}

impl Outgoing {
    fn new(env: &Envelope, checksums: bool) -> Outgoing {
        let frames = env.frames();
        let count = frames.len() + usize::from(checksums);
        let trailer_len = checksums.then(|| checksum::trailer_len(count));
        let small: usize = frames
            .iter()
            .filter(|f| f.len() < COALESCE_THRESHOLD)
            .map(Bytes::len)
            .sum();
        let mut buf = BytesMut::with_capacity(16 + 8 * count + small + trailer_len.unwrap_or(0));
        let mut chunks = Vec::new();
        let mut chunk_frame = Vec::new();
        let copied = plan(env, trailer_len, &mut buf, |buf, i, f| {
            if !buf.is_empty() {
                chunks.push(buf.split().freeze());
                chunk_frame.push(None);
            }
            chunks.push(f.clone());
            chunk_frame.push(Some(i));
        });
        let mut sums = None;
        if checksums {
            // Small frames are summed now (they were just copied: in cache);
            // large ones as they are written.
            let crcs: Vec<u32> = frames
                .iter()
                .map(|f| {
                    if f.len() < COALESCE_THRESHOLD {
                        crc32fast::hash(f)
                    } else {
                        0
                    }
                })
                .collect();
            let lengths = frames.iter().map(|f| f.len() as u64).collect::<Vec<_>>();
            if chunk_frame.iter().any(Option::is_some) {
                sums = Some(Box::new(Sums {
                    crcs,
                    lengths,
                    chunk_frame,
                    running: crc32fast::Hasher::new(),
                }));
            } else {
                // Everything is summed: the trailer joins the one buffer.
                buf.put_slice(&checksum::trailer(&crcs, lengths));
            }
        }
        if !buf.is_empty() {
            chunks.push(buf.freeze());
        }
        Outgoing {
            chunks,
            idx: 0,
            off: 0,
            written: 0,
            frames: frames.len() as u64,
            wire_len: env.wire_len() + trailer_len.map_or(0, |len| 8 + len as u64),
            copied,
            sums,
        }
    }

    fn is_done(&self) -> bool {
        self.idx == self.chunks.len() && self.sums.is_none()
    }

    /// Once every large frame is written (and summed), appends the trailer.
    fn finish_sums(&mut self) {
        if self.idx == self.chunks.len() {
            if let Some(s) = self.sums.take() {
                self.chunks
                    .push(checksum::trailer(&s.crcs, s.lengths.iter().copied()));
            }
        }
    }

    fn advance(&mut self, mut n: usize) {
        self.written += n as u64;
        while n > 0 {
            let rest = self.chunks[self.idx].len() - self.off;
            if let Some(s) = &mut self.sums {
                // Sum the bytes the kernel just took, while they are in cache.
                if let Some(&Some(frame)) = s.chunk_frame.get(self.idx) {
                    let m = n.min(rest);
                    s.running
                        .update(&self.chunks[self.idx][self.off..self.off + m]);
                    if m == rest {
                        s.crcs[frame] = mem::take(&mut s.running).finalize();
                    }
                }
            }
            if n < rest {
                self.off += n;
                return;
            }
            n -= rest;
            // Release the frame as soon as the kernel has it.
            self.chunks[self.idx] = Bytes::new();
            self.idx += 1;
            self.off = 0;
        }
    }

    fn poll_write_some<W: AsyncWrite + Unpin>(
        &self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let first = &self.chunks[self.idx][self.off..];
        if self.sums.is_some() && first.len() >= COALESCE_THRESHOLD {
            // A large frame being summed: write it in pieces that stay in
            // cache until summed.
            let piece = &first[..first.len().min(checksum::PIECE)];
            return Pin::new(io).poll_write(cx, piece);
        }
        if !io.is_write_vectored() {
            return Pin::new(io).poll_write(cx, first);
        }
        let mut slices: SmallVec<[IoSlice<'_>; 64]> = SmallVec::new();
        slices.push(IoSlice::new(first));
        for c in self.chunks[self.idx + 1..].iter().take(MAX_IOVECS - 1) {
            slices.push(IoSlice::new(c));
        }
        Pin::new(io).poll_write_vectored(cx, &slices)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum WriteStatus {
    Open,
    Poisoned,
    Closed,
}

/// The sending side of a connection or its write half (see this module's
/// docs): one queued message, its deadline, its counters.
#[derive(Debug)]
pub(crate) struct Sender {
    limits: Limits,
    out: Option<Outgoing>,
    state: WriteStatus,
    deadline: Deadline,
    stats: Stats,
    /// Whether messages carry a checksum trailer.
    checksums: bool,
}

impl Sender {
    pub(crate) fn new(limits: Limits, timeout: Option<std::time::Duration>) -> Sender {
        Sender {
            limits,
            out: None,
            state: WriteStatus::Open,
            deadline: Deadline::new(timeout),
            stats: Stats::default(),
            checksums: false,
        }
    }

    /// Starts (or stops) appending checksum trailers to messages.
    pub(crate) fn set_checksums(&mut self, on: bool) {
        self.checksums = on;
    }

    /// Counters of the messages written completely so far.
    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.state == WriteStatus::Poisoned
    }

    pub(crate) fn poison(&mut self) {
        self.state = WriteStatus::Poisoned;
        self.out = None;
        self.deadline.disarm();
    }

    fn check_open(&self) -> Result<(), TransportError> {
        match self.state {
            WriteStatus::Open => Ok(()),
            WriteStatus::Poisoned => Err(TransportError::Poisoned),
            WriteStatus::Closed => Err(TransportError::Closed),
        }
    }

    /// Writes the queued message, if any (Sink `poll_ready`).
    pub(crate) fn poll_ready<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), TransportError>> {
        self.check_open()?;
        self.poll_write_out(io, cx)
    }

    /// Queues a message (Sink `start_send`); nothing is written yet. A
    /// message over the limits is refused here, before any byte is written.
    pub(crate) fn start_send(&mut self, env: &Envelope) -> Result<(), TransportError> {
        self.check_open()?;
        if self.out.is_some() {
            return Err(TransportError::Io(io::Error::other(
                "start_send called while a message is queued: call poll_ready first",
            )));
        }
        env.check_limits(&self.limits)?;
        self.out = Some(Outgoing::new(env, self.checksums));
        self.deadline.arm();
        Ok(())
    }

    /// Writes the queued message, then flushes the IO (Sink `poll_flush`).
    pub(crate) fn poll_flush<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), TransportError>> {
        self.check_open()?;
        ready!(self.poll_write_out(io, cx))?;
        match ready!(Pin::new(io).poll_flush(cx)) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(e) => {
                self.poison();
                Poll::Ready(Err(e.into()))
            }
        }
    }

    /// Flushes, then shuts the IO's write direction down (Sink `poll_close`).
    pub(crate) fn poll_close<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), TransportError>> {
        if self.state == WriteStatus::Closed {
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_flush(io, cx))?;
        let r = ready!(Pin::new(io).poll_shutdown(cx));
        self.state = WriteStatus::Closed;
        Poll::Ready(r.map_err(TransportError::Io))
    }

    /// A `send` future was dropped with its message still queued: drop the
    /// message if none of it was written, else poison (the peer has half a
    /// message, and nothing may follow it).
    pub(crate) fn cancel_pending(&mut self) {
        if let Some(out) = self.out.take() {
            self.deadline.disarm();
            if out.written > 0 {
                self.poison();
            }
        }
    }

    fn poll_write_out<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), TransportError>> {
        while let Some(out) = &mut self.out {
            out.finish_sums();
            if out.is_done() {
                self.stats.messages_sent += 1;
                self.stats.frames_sent += out.frames;
                self.stats.bytes_sent += out.wire_len;
                self.stats.bytes_copied_on_send += out.copied;
                self.out = None;
                self.deadline.disarm();
                break;
            }
            match out.poll_write_some(io, cx) {
                Poll::Ready(Ok(0)) => {
                    self.poison();
                    return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero).into()));
                }
                Poll::Ready(Ok(n)) => {
                    out.advance(n);
                    if self.deadline.expired() && !out.is_done() {
                        self.poison();
                        return Poll::Ready(Err(TransportError::Timeout {
                            phase: TimeoutPhase::Write,
                        }));
                    }
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => {
                    self.poison();
                    return Poll::Ready(Err(e.into()));
                }
                Poll::Pending => {
                    if self.deadline.poll_expired(cx) {
                        self.poison();
                        return Poll::Ready(Err(TransportError::Timeout {
                            phase: TimeoutPhase::Write,
                        }));
                    }
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Sender {
    /// Writes one message and flushes; if the future is dropped before the
    /// message is out, [`Sender::cancel_pending`] runs.
    pub(crate) async fn send<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        env: &Envelope,
    ) -> Result<(), TransportError> {
        std::future::poll_fn(|cx| self.poll_ready(io, cx)).await?;
        self.start_send(env)?;
        let mut guard = CancelGuard {
            sender: self,
            armed: true,
        };
        std::future::poll_fn(|cx| guard.sender.poll_flush(io, cx)).await?;
        guard.armed = false;
        Ok(())
    }

    /// Sends `value` serialized with the session's options (the agreed
    /// codec).
    pub(crate) async fn send_value<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        session: &Session,
        value: &Value,
    ) -> Result<(), TransportError> {
        let env = session::encode_value(value, session)?;
        self.send(io, &env).await
    }

    /// Sends a typed message written with the session's options.
    #[cfg(feature = "serde")]
    pub(crate) async fn send_msg<W: AsyncWrite + Unpin, M: serde::Serialize + ?Sized>(
        &mut self,
        io: &mut W,
        session: &Session,
        msg: &M,
    ) -> Result<(), TransportError> {
        let env = session::encode_msg(msg, session)?;
        self.send(io, &env).await
    }
}

struct CancelGuard<'a> {
    sender: &'a mut Sender,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sender.cancel_pending();
        }
    }
}
