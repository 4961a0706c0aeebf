//! The read side of a [`Connection`](super::Connection): a cancel-safe state
//! machine that turns bytes into [`Envelope`]s without copying payloads.
//!
//! ```text
//! socket ──read──▶ rbuf (read-ahead ≤ READ_AHEAD past what is needed)
//!                   │
//!                   ├─ prelude: parse_prelude(rbuf) → checked against Limits → advance
//!                   │
//!                   ├─ small run  (frames < OWN_BUFFER_THRESHOLD, back to back)
//!                   │      rbuf.split_to(run).freeze() ── slice ──▶ frames
//!                   │
//!                   └─ large run  (frames ≥ OWN_BUFFER_THRESHOLD, back to back)
//!                          rbuf's few read-ahead bytes copied, then
//!                          socket ──read──▶ own buffer (recycled when the app dropped
//!                                           the previous one) ── slice ──▶ frames
//! ```
//!
//! A message whose frames are all small costs no copy and, when several are
//! in flight, one read for many messages. Large frames get a buffer of their
//! own so that the small frame 0 (which decoded strings point into) never
//! pins a payload's memory, and consecutive large frames (shards of one
//! array) stay contiguous, so merging them needs no copy.
//!
//! **Receive-buffer recycling.** Allocating a fresh 64 MiB buffer per message
//! costs more in first-touch page faults than the copy from the kernel
//! (perf-peers.md). The reader keeps one handle on the last large buffer;
//! when the application has dropped every frame of it,
//! [`BytesMut::try_reclaim`] hands the same, already faulted-in memory back
//! for the next large message. If the application still holds it, a fresh
//! buffer is grown as bytes arrive. (A frame the application keeps pins its
//! whole buffer, as with any `Bytes` slice; buffers over
//! `max_recycled_buffer`, 1 GiB by default, are never kept.) Measured with
//! 64 MiB messages over loopback TCP, two processes (`scripts/bench-compare
//! --only transport`): recycling runs at least at the speed of plain reads
//! into one reused buffer (faster, with reads of [`LARGE_READ`] bytes); a
//! fresh buffer per message is markedly slower (page faults: BENCHMARKS.md
//! has the figures).
//!
//! All state lives in the struct: dropping a `recv` future loses nothing.

use std::future::Future;
use std::io;
use std::mem;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::envelope::EnvelopeError;
use crate::envelope::{parse_prelude, Envelope, Prelude, PreludeStatus};
use crate::limits::Limits;

use crate::transport::checksum::{self, Running};
use crate::transport::conn::Deadline;
use crate::transport::error::{TimeoutPhase, TransportError};
use crate::transport::stats::{reserve_counted, Stats};

/// Frames of at least this many bytes are read into a buffer of their own
/// (consecutive ones share it), straight from the socket, instead of the
/// shared read buffer. Below it, a frame is copied at most once, from the
/// kernel into the read buffer, and shares that buffer with its neighbours.
const OWN_BUFFER_THRESHOLD: usize = super::OWN_BUFFER_THRESHOLD;

/// Bytes the reader may read past the end of what it currently needs (the
/// next prelude, the next small run). Bounds the copy into a large buffer
/// and the read-ahead per connection.
const READ_AHEAD: usize = 64 << 10;

/// The most one read into a large buffer asks for. The kernel copies a
/// socket's bytes to the buffer in pieces this size, each while the bytes
/// are still in the CPU's cache, rather than all it holds at once (up to
/// the socket's receive buffer, megabytes, cold by the time they are
/// copied). Measured with two processes over loopback (`compare serve`,
/// `{"op":"peer","variant":"connection",...}`, 2-vCPU VM, 260 MiB L3):
/// 512 MiB messages 2.3 → 3.2–3.8 GiB/s, 64 MiB messages 3.7 → 4.4–5.1
/// GiB/s; 32 KiB pieces did as well, 128 KiB and 1 MiB ones worse.
const LARGE_READ: usize = 64 << 10;

/// The smallest read buffer reserved for a read: a fixed size, never a
/// declared one.
const MIN_READ: usize = 8 << 10;

/// A run of back-to-back frames read into one buffer.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Frames in the run.
    frames: usize,
    /// Their total length.
    len: usize,
    /// Whether they go into a buffer of their own.
    large: bool,
}

/// A message whose prelude has been read.
#[derive(Debug)]
struct Body {
    /// Bytes of the whole message on the wire.
    wire_len: u64,
    /// Frames inside the first read (the prelude's `N`).
    first_read_frames: usize,
    /// The frame lengths, as `usize` (the whole message fits: checked), in
    /// the prelude's own allocation.
    lengths: Vec<usize>,
    runs: Vec<Run>,
    /// The run being read.
    run: usize,
    /// Frames done so far.
    frames: Vec<Bytes>,
    /// Bytes of the message (from its start) in `frames` or the prelude.
    done: u64,
    /// The buffer of the large run being read.
    large: Option<BytesMut>,
    /// With checksums on: the frames' CRCs so far, and how much of `large`
    /// they cover.
    sums: Option<Running>,
    hashed: usize,
    /// The buffers the runs were read into.
    buffers: SmallVec<[Bytes; 2]>,
    /// The spill file of the large run being read, and its bytes so far.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    spill: Option<(crate::mmap::SpillBuffer, usize)>,
}

#[derive(Debug)]
enum Phase {
    Prelude,
    Body(Box<Body>),
    /// The peer closed the stream cleanly between messages.
    Eof,
    /// An error happened: nothing more is decoded.
    Failed,
}

/// How the reader allocates for large frames.
#[derive(Clone, Debug)]
pub(crate) struct ReadConfig {
    pub(crate) limits: Limits,
    pub(crate) recycle: bool,
    pub(crate) recycle_limit: usize,
    pub(crate) timeout: Option<std::time::Duration>,
    /// Whether messages end with a checksum trailer to verify and remove.
    pub(crate) checksums: bool,
    /// Where runs of large frames of at least this size are received
    /// instead of the heap: an anonymous mapped file in this directory.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    pub(crate) spill: Option<(std::path::PathBuf, usize)>,
}

/// The read half's state (see this module's docs).
#[derive(Debug)]
pub(crate) struct ReadState {
    cfg: ReadConfig,
    rbuf: BytesMut,
    phase: Phase,
    /// A handle on the last large buffer, for [`BytesMut::try_reclaim`].
    spare: BytesMut,
    deadline: Deadline,
    stats: Stats,
}

impl ReadState {
    pub(crate) fn new(cfg: ReadConfig) -> ReadState {
        let deadline = Deadline::new(cfg.timeout);
        ReadState {
            cfg,
            rbuf: BytesMut::new(),
            phase: Phase::Prelude,
            spare: BytesMut::new(),
            deadline,
            stats: Stats::default(),
        }
    }

    /// Counters of the messages received so far.
    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    /// Starts (or stops) expecting checksum trailers, from the next message.
    pub(crate) fn set_checksums(&mut self, on: bool) {
        self.cfg.checksums = on;
    }

    /// Swaps the limits (the handshake is read under tight ones).
    pub(crate) fn replace_limits(&mut self, limits: Limits) -> Limits {
        mem::replace(&mut self.cfg.limits, limits)
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        matches!(self.phase, Phase::Failed)
    }

    pub(crate) fn poison(&mut self) {
        self.phase = Phase::Failed;
        self.deadline.disarm();
    }

    /// Capacity of the read-ahead buffer plus the large buffer being filled:
    /// what the connection has reserved for a message in progress.
    pub(crate) fn reserved(&self) -> usize {
        let large = match &self.phase {
            Phase::Body(b) => b.large.as_ref().map_or(0, BytesMut::capacity),
            _ => 0,
        };
        self.rbuf.capacity() + large
    }

    pub(crate) fn poll_next<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Envelope, TransportError>>> {
        if matches!(self.phase, Phase::Eof | Phase::Failed) {
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
                self.phase = Phase::Eof;
                Poll::Ready(None)
            }
            Poll::Ready(Err(e)) => {
                self.poison();
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    fn poll_message<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Envelope>, TransportError>> {
        let cap = self.cfg.limits.prealloc_cap;
        loop {
            match &mut self.phase {
                Phase::Eof | Phase::Failed => return Poll::Ready(Ok(None)),
                Phase::Prelude => match parse_prelude(&self.rbuf, &self.cfg.limits)? {
                    PreludeStatus::Need(n) => {
                        let got = self.rbuf.len();
                        let read = fill(
                            io,
                            cx,
                            &mut self.rbuf,
                            n - got,
                            cap,
                            &mut self.deadline,
                            &mut self.stats.bytes_relocated_on_receive,
                        );
                        match ready!(read).map_err(|e| e.phase(TimeoutPhase::ReadPrelude))? {
                            0 if got == 0 => return Poll::Ready(Ok(None)),
                            0 => return Poll::Ready(Err(truncated(got as u64, n as u64))),
                            _ => {}
                        }
                    }
                    PreludeStatus::Complete(prelude) => {
                        let header = usize::try_from(prelude.header_len())
                            .map_err(|_| EnvelopeError::LengthOverflow)?;
                        self.rbuf.advance(header);
                        self.phase = Phase::Body(Box::new(Body::new(prelude, self.cfg.checksums)?));
                    }
                },
                Phase::Body(body) => {
                    let Some(&run) = body.runs.get(body.run) else {
                        let Phase::Body(body) = mem::replace(&mut self.phase, Phase::Prelude)
                        else {
                            unreachable!()
                        };
                        self.deadline.disarm();
                        if !self.rbuf.is_empty() {
                            self.deadline.arm(); // the next message has begun
                        }
                        self.stats.bytes_received += body.wire_len;
                        let env = body.finish()?;
                        self.stats.messages_received += 1;
                        self.stats.frames_received += env.frames().len() as u64;
                        return Poll::Ready(Ok(Some(env)));
                    };
                    if !run.large {
                        if self.rbuf.len() >= run.len {
                            let data = self.rbuf.split_to(run.len).freeze();
                            body.push_run(run, data);
                            continue;
                        }
                        let got = self.rbuf.len();
                        let read = fill(
                            io,
                            cx,
                            &mut self.rbuf,
                            run.len - got,
                            cap,
                            &mut self.deadline,
                            &mut self.stats.bytes_relocated_on_receive,
                        );
                        if ready!(read).map_err(|e| e.phase(TimeoutPhase::ReadFrames))? == 0 {
                            return Poll::Ready(Err(body.truncated(got)));
                        }
                        continue;
                    }
                    #[cfg(all(target_os = "linux", feature = "mmap"))]
                    if let Some((dir, min_run)) = &self.cfg.spill {
                        if run.len >= *min_run {
                            let data = ready!(poll_spill(
                                io,
                                cx,
                                body,
                                &mut self.rbuf,
                                dir,
                                run,
                                cap,
                                &mut self.deadline,
                                &mut self.stats.bytes_copied_on_receive,
                            ))?;
                            body.push_run(run, data);
                            continue;
                        }
                    }
                    let buf = body.large.get_or_insert_with(|| {
                        take_large_buffer(&mut self.spare, run.len, self.cfg.recycle)
                    });
                    if !self.rbuf.is_empty() && buf.len() < run.len {
                        // At most READ_AHEAD bytes: the only copy of a large frame.
                        let n = self.rbuf.len().min(run.len - buf.len());
                        self.stats.bytes_relocated_on_receive += reserve_counted(buf, n);
                        buf.extend_from_slice(&self.rbuf[..n]);
                        self.stats.bytes_copied_on_receive += n as u64;
                        self.rbuf.advance(n);
                    }
                    if let Some(sums) = &mut body.sums {
                        // Sum what just arrived, while it is in cache.
                        sums.feed(&body.lengths, &buf[body.hashed..]);
                        body.hashed = buf.len();
                    }
                    if buf.len() == run.len {
                        let mut buf = body.large.take().unwrap_or_default();
                        let data = buf.split_to(run.len).freeze();
                        body.hashed = 0;
                        if self.cfg.recycle && data.len() + buf.capacity() <= self.cfg.recycle_limit
                        {
                            self.spare = buf; // keeps a handle on the allocation
                        }
                        body.push_run(run, data);
                        continue;
                    }
                    let got = buf.len();
                    let mut want = run.len - got;
                    if body.sums.is_some() {
                        // Read in pieces that stay in cache until summed.
                        want = want.min(checksum::PIECE);
                    }
                    let read = fill_exact(
                        io,
                        cx,
                        buf,
                        want,
                        cap,
                        &mut self.deadline,
                        &mut self.stats.bytes_relocated_on_receive,
                    );
                    if ready!(read).map_err(|e| e.phase(TimeoutPhase::ReadFrames))? == 0 {
                        return Poll::Ready(Err(body.truncated(got)));
                    }
                }
            }
        }
    }
}

/// A buffer for a large run of `len` bytes: the recycled one if the
/// application dropped every frame of it (no new allocation, no page
/// faults), else a fresh one that grows as bytes arrive.
fn take_large_buffer(spare: &mut BytesMut, len: usize, recycle: bool) -> BytesMut {
    if recycle && spare.try_reclaim(len) {
        return mem::take(spare);
    }
    *spare = BytesMut::new(); // the application still holds it: let go
    BytesMut::new()
}

impl Body {
    fn new(prelude: Prelude, checksums: bool) -> Result<Body, EnvelopeError> {
        let (wire_len, header_len) = (prelude.wire_len(), prelude.header_len());
        let first_read_frames = prelude.frames_in_first_read();
        // Collected in place: a message of 2 × 10⁶ frames keeps one table.
        let lengths = prelude
            .into_lengths()
            .into_iter()
            .map(|len| usize::try_from(len).map_err(|_| EnvelopeError::LengthOverflow))
            .collect::<Result<Vec<usize>, _>>()?;
        let mut runs: Vec<Run> = Vec::new();
        for &len in &lengths {
            let large = len >= OWN_BUFFER_THRESHOLD;
            match runs.last_mut() {
                // Empty frames join any run: they never break contiguity.
                Some(run) if run.large == large || len == 0 => {
                    run.frames += 1;
                    run.len += len;
                }
                _ => runs.push(Run {
                    frames: 1,
                    len,
                    large,
                }),
            }
        }
        let sums = checksums.then(|| Running::new(&lengths));
        Ok(Body {
            frames: Vec::with_capacity(lengths.len()),
            done: header_len,
            wire_len,
            first_read_frames,
            lengths,
            runs,
            run: 0,
            large: None,
            sums,
            hashed: 0,
            buffers: SmallVec::new(),
            #[cfg(all(target_os = "linux", feature = "mmap"))]
            spill: None,
        })
    }

    /// Slices the frames of `run` out of its buffer.
    fn push_run(&mut self, run: Run, data: Bytes) {
        if run.len > 0 {
            self.buffers.push(data.clone());
        }
        if let (Some(sums), false) = (&mut self.sums, run.large) {
            sums.feed(&self.lengths, &data);
        }
        let start = self.frames.len();
        let mut at = 0;
        for &len in &self.lengths[start..start + run.frames] {
            self.frames.push(data.slice(at..at + len));
            at += len;
        }
        self.done += run.len as u64;
        self.run += 1;
    }

    fn truncated(&self, in_run: usize) -> TransportError {
        let offset = self.done + in_run as u64;
        truncated(offset, self.wire_len)
    }

    fn finish(mut self) -> Result<Envelope, TransportError> {
        let mut k = self.first_read_frames;
        if let Some(sums) = &self.sums {
            checksum::verify(&mut self.frames, sums.sums())?;
            k = k.min(self.frames.len());
        }
        Ok(Envelope::with_first_read_frames(self.frames, k)?.with_buffers(self.buffers))
    }
}

fn truncated(offset: u64, needed: u64) -> TransportError {
    TransportError::from(EnvelopeError::Truncated {
        offset,
        needed,
        got: offset,
    })
}

/// An error from a read, before its phase is known.
pub(crate) enum ReadError {
    Io(io::Error),
    Timeout,
}

impl ReadError {
    fn phase(self, phase: TimeoutPhase) -> TransportError {
        match self {
            ReadError::Io(e) => TransportError::from(e),
            ReadError::Timeout => TransportError::Timeout { phase },
        }
    }
}

/// One read into the shared buffer: at least `need` bytes are wanted, and up
/// to [`READ_AHEAD`] more are welcome. Returns the bytes read (0 at EOF);
/// adds to `relocated` what growing the buffer moved.
#[allow(clippy::too_many_arguments)]
fn fill<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    need: usize,
    cap: usize,
    deadline: &mut Deadline,
    relocated: &mut u64,
) -> Poll<Result<usize, ReadError>> {
    if buf.capacity() == buf.len() {
        *relocated += reserve_counted(buf, need.min(cap).max(MIN_READ));
    }
    read(io, cx, buf, need.saturating_add(READ_AHEAD), deadline)
}

/// One read into a large buffer, of at most [`LARGE_READ`] bytes and never
/// past the `need` bytes that remain of its run (the next bytes belong to
/// another buffer); adds to `relocated` what growing the buffer moved.
#[allow(clippy::too_many_arguments)]
fn fill_exact<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    need: usize,
    cap: usize,
    deadline: &mut Deadline,
    relocated: &mut u64,
) -> Poll<Result<usize, ReadError>> {
    if buf.capacity() == buf.len() {
        *relocated += reserve_counted(buf, need.min(cap.max(MIN_READ)));
    }
    read(io, cx, buf, need.min(LARGE_READ), deadline)
}

fn read<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    limit: usize,
    deadline: &mut Deadline,
) -> Poll<Result<usize, ReadError>> {
    // `read_buf` into the spare capacity (no zero-filling, no unsafe here);
    // the future keeps no state, so polling a fresh one each time is exact.
    let mut limited = (&mut *buf).limit(limit);
    let read = std::pin::pin!(io.read_buf(&mut limited));
    let polled = read.poll(cx);
    with_deadline(polled, cx, deadline)
}

/// A read's outcome, with the deadline armed by its first byte and checked.
fn with_deadline(
    polled: Poll<io::Result<usize>>,
    cx: &mut Context<'_>,
    deadline: &mut Deadline,
) -> Poll<Result<usize, ReadError>> {
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

/// Smallest spill file, and the least it grows by.
#[cfg(all(target_os = "linux", feature = "mmap"))]
const MIN_SPILL: usize = 1 << 20;

/// Reads a run of large frames into a spill file (`ConnectionBuilder::spill`) that
/// grows as bytes arrive (at most twice what it holds plus `cap`, never past
/// the run), then hands it over as one `Bytes` over the mapping.
#[cfg(all(target_os = "linux", feature = "mmap"))]
#[allow(clippy::too_many_arguments)]
fn poll_spill<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
    body: &mut Body,
    rbuf: &mut BytesMut,
    dir: &std::path::Path,
    run: Run,
    cap: usize,
    deadline: &mut Deadline,
    copied: &mut u64,
) -> Poll<Result<Bytes, TransportError>> {
    use crate::mmap::SpillBuffer;
    let spill_err = |e: crate::mmap::MmapError| TransportError::Io(io::Error::other(e));
    loop {
        let (buf, filled) = match &mut body.spill {
            Some(s) => s,
            None => {
                let first = run.len.min(cap.max(MIN_SPILL));
                body.spill
                    .insert((SpillBuffer::new(dir, first).map_err(spill_err)?, 0))
            }
        };
        if !rbuf.is_empty() && *filled < run.len {
            // At most READ_AHEAD bytes, as for a heap buffer.
            let n = rbuf.len().min(run.len - *filled);
            buf.grow_to(*filled + n).map_err(spill_err)?;
            buf.as_mut()[*filled..*filled + n].copy_from_slice(&rbuf[..n]);
            *copied += n as u64;
            rbuf.advance(n);
            *filled += n;
        }
        if let Some(sums) = &mut body.sums {
            sums.feed(&body.lengths, &buf.as_ref()[body.hashed..*filled]);
            body.hashed = *filled;
        }
        if *filled == run.len {
            let (buf, _) = body.spill.take().expect("a spill buffer");
            body.hashed = 0;
            return Poll::Ready(buf.freeze().map_err(spill_err));
        }
        if *filled == buf.len() {
            let next = (2 * buf.len())
                .max(*filled + cap.max(MIN_SPILL))
                .min(run.len);
            buf.grow_to(next).map_err(spill_err)?;
        }
        let mut want = buf.len().min(run.len) - *filled;
        if body.sums.is_some() {
            want = want.min(checksum::PIECE);
        }
        let mut rb = tokio::io::ReadBuf::new(&mut buf.as_mut()[*filled..*filled + want]);
        let polled = std::pin::Pin::new(&mut *io)
            .poll_read(cx, &mut rb)
            .map_ok(|()| rb.filled().len());
        let got = *filled;
        match ready!(with_deadline(polled, cx, deadline))
            .map_err(|e| e.phase(TimeoutPhase::ReadFrames))?
        {
            0 => return Poll::Ready(Err(body.truncated(got))),
            n => *filled += n,
        }
    }
}
