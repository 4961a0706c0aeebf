//! The read path: [`FrameReader`], one state machine that turns a stream's
//! bytes into messages without IO, and the drivers that feed it.
//!
//! A `FrameReader` is fed bytes and says what it needs next; it never
//! touches a socket or a clock. Its driver owns the shared buffer (where
//! bytes are read, but for runs of large frames) and lends it on every
//! [`poll`](FrameReader::poll); the reader takes out of it what it uses,
//! parses and checks each prelude against [`Limits`] before anything is
//! reserved for it, decides where each run of frames is read (the shared
//! buffer, a buffer of its own, a spill file), sums checksum trailers as
//! the bytes land and bounds how far a read may run ahead.
//!
//! ```text
//!  driver ──read into the target the reader names──▶ ... ──poll(shared)──▶ Event
//!
//!   Prelude ──parse_prelude, Limits──┬─ message reader ──▶ Body: one run of frames at a time
//!     │ Need::Prelude{more}          │    Need::Frames{place: Shared}  split off `shared`: slices
//!     │                              │    Need::Frames{place: Own}     a buffer of its own (recycled),
//!     │                              │                                 the read-ahead copied into it
//!     │                              │    Need::Frames{place: Spill}   a spill file (feature mmap)
//!     │                              │    (each frame's CRC32 fed as its bytes land)
//!     │                              │ ──▶ trailer checked ──▶ Event::Message(Envelope) ──▶ Prelude
//!     │                              └─ relay reader ──▶ Need::Frames{frames: 0..1, place: Shared}
//!     │                                   ──▶ Event::Head(prelude + frame 0, still in `shared`)
//!     │                                   ──▶ Event::Forward(its bytes, split off `shared`)
//!     │                                       or Need::Body{more}: passed on by the driver ──▶ Prelude
//!   any error ──▶ Failed: every later poll is Err(Poisoned)
//! ```
//!
//! The drivers:
//!
//! * [`FrameCodec`](super::FrameCodec): tokio-util's `FramedRead` owns and
//!   fills the shared buffer; every frame is a slice of it.
//! * the [`Connection`](super::Connection)'s (and [`ReadHalf`](super::ReadHalf)'s)
//!   receiver: reads into the buffer or file the reader names, at most
//!   `READ_AHEAD` past what it needs, under a per-message deadline.
//! * `framewire tap` (the CLI): a relay reader, which hands back each
//!   message's head (for its log line) and then its bytes as they arrive.
//!
//! **Where frames go** (a connection's reader). A message whose frames are
//! all small (under 64 KiB) costs no copy and, when
//! several are in flight, one read for many messages. Large frames get a
//! buffer of their own, so that the small frame 0 (which decoded strings
//! point into) never pins a payload's memory, and consecutive large frames
//! (shards of one array) share it, contiguous, so merging them needs no
//! copy. Bytes of a large frame that a read took into the shared buffer
//! ahead of time (at most `READ_AHEAD`) are copied into its buffer: the
//! only copy on the way in, counted in
//! [`Stats::bytes_copied_on_receive`](super::Stats::bytes_copied_on_receive).
//!
//! **A large run's buffer never moves.** A run longer than `prealloc_cap`
//! gets an anonymous mapping of its full length at once (`MAP_NORESERVE`:
//! the kernel commits a page when the first byte lands in it, so memory
//! follows what arrived, not what the prelude declared); what arrived is
//! never relocated. Runs within `prealloc_cap` get a heap buffer of their
//! whole length. Where no mapping can be made (a declared length beyond
//! the address space, `vm.overcommit_memory = 2`), a heap buffer grows
//! geometrically as bytes arrive.
//!
//! **Nor does the shared buffer's.** A read runs ahead 24 KiB only where
//! as much room is left after it, for the rest of a message whose start
//! it takes (which then completes where it started); it takes exactly what
//! is needed otherwise, before a large frame (whose bytes would only be
//! copied into its own buffer), and in a length table longer than the
//! room, which is decoded as it arrives and taken out of the buffer.
//! Room is made when the buffer holds nothing (a new buffer moves
//! nothing), for all the prelude or run needs as the prelude declared it
//! (within `prealloc_cap`) and a read ahead. A buffer that holds bytes
//! grows only for the rest of a message over 24 KiB whose start a read
//! ahead took, or a need beyond `prealloc_cap`; what that moves is counted
//! as relocated.
//!
//! **Receive-buffer recycling.** A fresh large buffer per message costs its
//! first-touch page faults, more than the copy from the kernel
//! (BENCHMARKS.md). The reader keeps a handle on the last large buffer;
//! once the application has dropped every frame of it, the same memory
//! serves the next large run (for a heap buffer,
//! [`BytesMut::try_reclaim`]). (Buffers over the connection's
//! `max_recycled_buffer` are never kept.)
//!
//! All state lives in the reader and the driver's buffer: a driver whose
//! future is dropped between two polls loses nothing.

mod body;
mod receive;
#[cfg(test)]
mod tests;

use std::mem;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Buf, BytesMut};

use crate::envelope::{
    parse_prelude, prelude_head, prelude_of_table, Envelope, EnvelopeError, Prelude, PreludeStatus,
};
use crate::limits::Limits;

use super::error::TransportError;
use super::stats::{reserve_counted, Received, Stats};

pub(crate) use body::Placement;
use body::{Body, Placing, Spare};
pub(crate) use receive::Receiver;

/// Frames of at least this many bytes are read into a buffer of their own
/// (consecutive ones share it), straight from the socket, instead of the
/// shared read buffer. Below it, a frame is copied at most once, from the
/// kernel into the read buffer, and shares that buffer with its neighbours.
pub(crate) const OWN_BUFFER_THRESHOLD: usize = 64 << 10;

/// Bytes a connection's read may take past the end of what the reader
/// needs (the next prelude, the next small run). Bounds the copy into a
/// large buffer and the read-ahead per connection.
const READ_AHEAD: usize = 64 << 10;

/// The most one read into a large buffer asks for: the kernel then copies
/// a socket's bytes in pieces that are still in the CPU's cache, rather
/// than all it holds at once (BENCHMARKS.md, the transport's large
/// messages).
const LARGE_READ: usize = 64 << 10;

/// The smallest room reserved for a connection's read into the shared
/// buffer: a fixed size, never a declared one.
const MIN_READ: usize = 8 << 10;

/// What a connection's read into the shared buffer takes ahead at most,
/// with as much room kept after it for the rest of a message whose start
/// it took (which then completes where it started, nothing moved).
const SHARED_AHEAD: usize = 24 << 10;

/// Below this much spare room, a codec's shared buffer gets more.
const MIN_SPARE: usize = 4 << 10;

/// Smallest spill file, and the least it grows by.
#[cfg(all(target_os = "linux", feature = "mmap"))]
const MIN_SPILL: usize = 1 << 20;

/// What a [`FrameReader`] has for its driver after a [`poll`](FrameReader::poll).
#[derive(Debug)]
pub enum Event<'a> {
    /// Nothing more until more bytes arrive: what the next step needs.
    Need(Need),
    /// A relay reader: a message's prelude and frame 0 are at the start of
    /// the shared buffer (not taken out of it yet). Its bytes follow as
    /// [`Event::Forward`], prelude first.
    Head(Head<'a>),
    /// A relay reader: bytes of the message whose head was handed back,
    /// split off the front of the shared buffer, to pass on.
    Forward(BytesMut),
    /// A message reader: a whole message, its frames slices of the buffers
    /// they were read into.
    Message(Envelope),
}

/// What a [`FrameReader`] needs before it can go on. `more` is always at
/// least 1.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Need {
    /// `more` bytes of a prelude (`N`, `count`, the length table), in the
    /// shared buffer.
    Prelude {
        /// Bytes still missing from the buffer.
        more: usize,
    },
    /// The frames `frames` of the current message, `len` bytes in all, of
    /// which `more` have not arrived, into `place`.
    Frames {
        /// Their indices.
        frames: Range<usize>,
        /// Their bytes in all.
        len: usize,
        /// Bytes still missing.
        more: usize,
        /// Where they go.
        place: Place,
    },
    /// A relay reader: `more` bytes of the current message follow, and
    /// none is buffered. Read into the shared buffer (they come back as
    /// [`Event::Forward`]), or pass them on some other way and report them
    /// with [`FrameReader::passed`].
    Body {
        /// Bytes of the message still to come.
        more: u64,
    },
}

impl Need {
    /// The bytes still missing, whatever the step.
    pub fn more(&self) -> u64 {
        match self {
            Need::Prelude { more } | Need::Frames { more, .. } => *more as u64,
            Need::Body { more } => *more,
        }
    }
}

/// Where a run of frames is read into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Place {
    /// The shared buffer, the driver's: the frames are slices of it.
    Shared,
    /// A buffer of the run's own (consecutive large frames).
    Own,
    /// A spill file (`ConnectionBuilder::spill`, feature `mmap`).
    Spill,
}

/// A relay reader's view of a message whose prelude and frame 0 have
/// arrived: what a relay logs before passing the message on.
#[derive(Debug)]
pub struct Head<'a> {
    frame0: &'a [u8],
    frames: u64,
    wire_len: u64,
}

impl<'a> Head<'a> {
    /// Frame 0, in the shared buffer.
    pub fn frame0(&self) -> &'a [u8] {
        self.frame0
    }

    /// The message's frame count.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The message's size on the wire, prelude included.
    pub fn wire_len(&self) -> u64 {
        self.wire_len
    }
}

/// How far a reader is into a message: what a relay reports of a message
/// cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of it received so far (forwarded, passed or buffered).
    pub received: u64,
    /// Its size on the wire, once its prelude is in.
    pub total: Option<u64>,
}

/// Where a driver reads the bytes the reader needs: into a buffer's spare
/// capacity, at most `limit` bytes, or into a slice of a spill file.
#[derive(Debug)]
pub(crate) enum Target<'a> {
    Buf { buf: &'a mut BytesMut, limit: usize },
    Slice(&'a mut [u8]),
}

/// What a reader hands back.
#[derive(Debug)]
enum Mode {
    /// Whole messages (boxed: a relay keeps a reader per direction of every
    /// connection, and needs none of this).
    Messages(Box<Messages>),
    /// Heads and forwarded bytes.
    Relay,
}

/// A message reader's own state.
#[derive(Debug)]
struct Messages {
    placement: Placement,
    /// A handle on the last large buffer, to reuse it.
    spare: Spare,
}

/// A sans-IO reader of Dask's framing (SPEC.md §2; see this module's
/// docs): fed bytes through a shared buffer its driver lends it, it checks
/// each prelude against [`Limits`] before anything is reserved for it, and
/// hands back whole messages or, as a relay reader, each message's head and
/// then its bytes. After an error it is poisoned: every later poll returns
/// [`TransportError::Poisoned`]. Public with the feature `unstable`.
///
/// ```
/// # #[cfg(feature = "unstable")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use bytes::{Bytes, BytesMut};
/// use framewire::transport::read::{Event, FrameReader, Need};
/// use framewire::{Envelope, Limits};
///
/// let wire = Envelope::new(vec![Bytes::from_static(b"\x81\xa2op\xa4ping"), Bytes::from(vec![7; 100])])?
///     .to_bytes();
/// let mut relay = FrameReader::relay(Limits::dask_compat());
/// let mut buf = BytesMut::from(&wire[..20]);
/// assert!(matches!(relay.poll(&mut buf)?, Event::Need(Need::Prelude { more: 12 })));
/// buf.extend_from_slice(&wire[20..]);
/// match relay.poll(&mut buf)? {
///     Event::Head(head) => assert_eq!((head.frame0(), head.frames()), (&b"\x81\xa2op\xa4ping"[..], 2)),
///     other => panic!("{other:?}"),
/// }
/// match relay.poll(&mut buf)? {
///     Event::Forward(bytes) => assert_eq!(bytes, wire),
///     other => panic!("{other:?}"),
/// }
/// assert!(matches!(relay.poll(&mut buf)?, Event::Need(Need::Prelude { more: 16 })));
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "unstable"))]
/// # fn main() {}
/// ```
#[derive(Debug)]
pub struct FrameReader {
    /// Shared: a relay keeps a reader per direction of every connection.
    limits: Arc<Limits>,
    /// Whether messages end with a checksum trailer to verify and remove.
    checksums: bool,
    mode: Mode,
    phase: Phase,
    stats: Received,
}

#[derive(Debug)]
enum Phase {
    /// Between messages, or in a prelude: `need` bytes (from the message's
    /// start) are needed at the last look.
    Prelude { need: usize },
    /// A connection's message reader, in a prelude longer than the shared
    /// buffer's room: its length table decoded as it arrives, taken out of
    /// the buffer (nothing held there moves).
    Table(Box<Table>),
    /// A message reader, the prelude parsed and taken out of the buffer.
    Body(Box<Body>),
    /// A relay reader, the prelude parsed: waiting for frame 0.
    Head(RelayHead),
    /// A relay reader: `left` bytes of a `total`-byte message to pass on.
    Pass { left: u64, total: u64 },
    /// An error happened: nothing more is read.
    Failed,
}

/// The prelude at the start of `shared`, checked against `limits` (the one
/// place preludes are parsed), or what is missing of it (noted in `phase`).
fn prelude(
    limits: &Limits,
    phase: &mut Phase,
    shared: &BytesMut,
) -> Result<Result<Prelude, Need>, TransportError> {
    match parse_prelude(shared, limits)? {
        PreludeStatus::Complete(prelude) => Ok(Ok(prelude)),
        PreludeStatus::Need(n) => {
            *phase = Phase::Prelude { need: n };
            Ok(Err(Need::Prelude {
                more: n - shared.len(),
            }))
        }
    }
}

/// A relay reader's message whose prelude is parsed.
#[derive(Clone, Copy, Debug)]
struct RelayHead {
    wire_len: u64,
    frames: u64,
    /// Bytes of the prelude, `N` field included.
    header: usize,
    /// Bytes from the message's start to the end of frame 0.
    through_frame0: usize,
}

/// A prelude's length table, decoded as its bytes arrive.
#[derive(Debug)]
struct Table {
    first_read: u64,
    count: u64,
    /// Bytes of the whole prelude, `N` field included.
    len: usize,
    lengths: Vec<u64>,
    /// The bytes of a length not whole yet.
    part: [u8; 8],
    part_len: usize,
}

impl Table {
    /// Bytes of the prelude taken so far.
    fn taken(&self) -> usize {
        16 + 8 * self.lengths.len() + self.part_len
    }

    /// Takes the table's bytes out of `shared` (at most what is left of it).
    fn take(&mut self, shared: &mut BytesMut) {
        let n = (self.len - self.taken()).min(shared.len());
        let mut bytes = &shared[..n];
        while !bytes.is_empty() {
            let k = (8 - self.part_len).min(bytes.len());
            self.part[self.part_len..self.part_len + k].copy_from_slice(&bytes[..k]);
            self.part_len += k;
            bytes = &bytes[k..];
            if self.part_len == 8 {
                self.lengths.push(u64::from_le_bytes(self.part));
                self.part_len = 0;
            }
        }
        shared.advance(n);
    }
}

impl FrameReader {
    /// A relay reader: for each message, once its prelude (checked against
    /// `limits`) and frame 0 are in the shared buffer, an [`Event::Head`],
    /// then its bytes as they arrive ([`Event::Forward`], or
    /// [`Need::Body`] for the driver to pass on itself). Nothing is
    /// assembled and nothing is copied: the bytes forwarded are the
    /// buffer's own, split off it.
    ///
    /// `limits` may be an `Arc<Limits>` that many readers share (a relay
    /// of many connections), or a `Limits` of its own.
    pub fn relay(limits: impl Into<Arc<Limits>>) -> FrameReader {
        FrameReader::with_mode(limits.into(), Mode::Relay)
    }

    /// A message reader whose frames are all slices of the shared buffer,
    /// which its owner fills ([`FrameCodec`](super::FrameCodec)).
    pub(crate) fn shared_only(limits: Limits) -> FrameReader {
        FrameReader::messages(limits, Placement::shared_only())
    }

    /// A message reader that places frames as `placement` says (a
    /// [`Connection`](super::Connection)'s).
    pub(crate) fn messages(limits: Limits, placement: Placement) -> FrameReader {
        FrameReader::with_mode(
            Arc::new(limits),
            Mode::Messages(Box::new(Messages {
                placement,
                spare: Spare::default(),
            })),
        )
    }

    fn with_mode(limits: Arc<Limits>, mode: Mode) -> FrameReader {
        FrameReader {
            limits,
            checksums: false,
            mode,
            phase: Phase::Prelude { need: 16 },
            stats: Received::default(),
        }
    }

    /// The limits preludes are checked against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Counters of what was received: messages, frames and bytes once a
    /// message is complete (a relay reader's: passed on), and the copies
    /// and buffer moves made on the way in.
    pub fn stats(&self) -> Stats {
        self.stats.into()
    }

    /// The receive counters, for a driver that adds its own send counters.
    pub(crate) fn received(&self) -> Received {
        self.stats
    }

    /// Whether an error stopped the reader.
    pub fn is_poisoned(&self) -> bool {
        matches!(self.phase, Phase::Failed)
    }

    /// Swaps the limits (the handshake is read under tight ones).
    pub(crate) fn replace_limits(&mut self, limits: Arc<Limits>) -> Arc<Limits> {
        mem::replace(&mut self.limits, limits)
    }

    /// Starts (or stops) expecting checksum trailers, from the next message.
    pub(crate) fn set_checksums(&mut self, on: bool) {
        self.checksums = on;
    }

    pub(crate) fn poison(&mut self) {
        self.phase = Phase::Failed;
    }

    /// Capacity of the own buffer being filled.
    pub(crate) fn reserved(&self) -> usize {
        match &self.phase {
            Phase::Body(b) => b.reserved(),
            _ => 0,
        }
    }

    /// Goes as far as the bytes in `shared` (and in the reader's own
    /// buffers) allow, taking out of `shared` what it uses: the next
    /// message, head or bytes to forward, or what it needs first. `shared`
    /// must hold the stream's bytes from where the last call left it, with
    /// new bytes appended.
    pub fn poll<'a>(&mut self, shared: &'a mut BytesMut) -> Result<Event<'a>, TransportError> {
        let r = match &self.mode {
            Mode::Relay => self.poll_relay(shared),
            Mode::Messages(_) => self.poll_message(shared),
        };
        if r.is_err() {
            self.poison();
        }
        r
    }

    /// A relay reader has passed on `n` bytes of the current message
    /// without them entering the shared buffer (after [`Need::Body`]).
    pub fn passed(&mut self, n: usize) {
        if let Phase::Pass { left, .. } = &mut self.phase {
            debug_assert!(n as u64 <= *left, "passed more than the message holds");
            *left -= n as u64;
            self.close_relayed();
        }
    }

    /// How far the reader is into a message, counting the `buffered` bytes
    /// of the shared buffer it has not taken yet; `None` between messages
    /// with nothing buffered. After an error, the bytes buffered are those
    /// of the message it could not read.
    pub fn progress(&self, buffered: usize) -> Option<Progress> {
        let buffered = buffered as u64;
        let (received, total) = match &self.phase {
            Phase::Prelude { .. } | Phase::Failed if buffered == 0 => return None,
            // A prelude refused: the bytes of a message that never was.
            Phase::Prelude { .. } | Phase::Failed => (buffered, None),
            Phase::Table(t) => (t.taken() as u64 + buffered, None),
            Phase::Head(h) => (buffered, Some(h.wire_len)),
            Phase::Pass { left, total } => (total - left + buffered.min(*left), Some(*total)),
            Phase::Body(b) => (b.received(buffered as usize), Some(b.wire_len())),
        };
        Some(Progress { received, total })
    }

    /// A relay reader's step.
    fn poll_relay<'a>(&mut self, shared: &'a mut BytesMut) -> Result<Event<'a>, TransportError> {
        loop {
            match &mut self.phase {
                Phase::Failed => return Err(TransportError::Poisoned),
                Phase::Prelude { .. } => match prelude(&self.limits, &mut self.phase, shared)? {
                    Err(need) => return Ok(Event::Need(need)),
                    Ok(p) => {
                        // parse_prelude checked that the whole message is
                        // addressable: these fit in usize.
                        let header = p.header_len() as usize;
                        self.phase = Phase::Head(RelayHead {
                            wire_len: p.wire_len(),
                            frames: p.lengths().len() as u64,
                            header,
                            through_frame0: header + p.lengths()[0] as usize,
                        });
                    }
                },
                Phase::Head(h) => {
                    let h = *h;
                    if shared.len() < h.through_frame0 {
                        let len = h.through_frame0 - h.header;
                        return Ok(Event::Need(Need::Frames {
                            frames: 0..1,
                            len,
                            more: h.through_frame0 - shared.len(),
                            place: Place::Shared,
                        }));
                    }
                    self.phase = Phase::Pass {
                        left: h.wire_len,
                        total: h.wire_len,
                    };
                    self.stats.frames_received += h.frames;
                    return Ok(Event::Head(Head {
                        frame0: &shared[h.header..h.through_frame0],
                        frames: h.frames,
                        wire_len: h.wire_len,
                    }));
                }
                Phase::Pass { left, .. } => {
                    if shared.is_empty() {
                        return Ok(Event::Need(Need::Body { more: *left }));
                    }
                    // Fits in usize: at most the buffer's length.
                    let take = (*left).min(shared.len() as u64) as usize;
                    *left -= take as u64;
                    self.close_relayed();
                    return Ok(Event::Forward(shared.split_to(take)));
                }
                Phase::Body(_) | Phase::Table(_) => {
                    unreachable!("a relay reader assembles no message")
                }
            }
        }
    }

    /// Back to the next prelude once a relayed message is passed on whole.
    fn close_relayed(&mut self) {
        if let Phase::Pass { left: 0, total } = self.phase {
            self.stats.messages_received += 1;
            self.stats.bytes_received += total;
            self.phase = Phase::Prelude { need: 16 };
        }
    }

    /// A message reader's step.
    fn poll_message<'a>(&mut self, shared: &'a mut BytesMut) -> Result<Event<'a>, TransportError> {
        let Mode::Messages(messages) = &mut self.mode else {
            unreachable!("poll: a relay reader is polled by poll_relay")
        };
        let Messages { placement, spare } = &mut **messages;
        loop {
            let body = match &mut self.phase {
                Phase::Failed => return Err(TransportError::Poisoned),
                Phase::Prelude { .. } => match prelude(&self.limits, &mut self.phase, shared)? {
                    Err(need) => {
                        // A connection's prelude longer than the buffer's
                        // room: its table is decoded as it arrives.
                        if !placement.owner_fills() && shared.len() >= 16 {
                            if let Some((first_read, count, len)) =
                                prelude_head(shared, &self.limits)?
                            {
                                if len > shared.capacity() {
                                    shared.advance(16);
                                    let mut table = Table {
                                        first_read,
                                        count,
                                        len,
                                        // Grown as lengths arrive, from at
                                        // most `prealloc_cap` of them.
                                        lengths: Vec::with_capacity(
                                            ((len - 16) / 8).min(self.limits.prealloc_cap / 8),
                                        ),
                                        part: [0; 8],
                                        part_len: 0,
                                    };
                                    table.take(shared);
                                    self.phase = Phase::Table(Box::new(table));
                                    continue;
                                }
                            }
                        }
                        return Ok(Event::Need(need));
                    }
                    Ok(prelude) => {
                        let header = usize::try_from(prelude.header_len())
                            .map_err(|_| EnvelopeError::LengthOverflow)?;
                        // A codec's message leaves the buffer whole.
                        let kept = if placement.owner_fills() {
                            header
                        } else {
                            shared.advance(header);
                            0
                        };
                        let body = Body::new(prelude, self.checksums, placement, kept)?;
                        self.phase = Phase::Body(Box::new(body));
                        continue;
                    }
                },
                Phase::Table(table) => {
                    table.take(shared);
                    if table.taken() < table.len {
                        return Ok(Event::Need(Need::Prelude {
                            more: table.len - table.taken(),
                        }));
                    }
                    let Phase::Table(table) =
                        mem::replace(&mut self.phase, Phase::Prelude { need: 16 })
                    else {
                        unreachable!("in a prelude's table")
                    };
                    let Table {
                        first_read,
                        count,
                        lengths,
                        ..
                    } = *table;
                    let prelude = prelude_of_table(first_read, count, lengths, &self.limits)?;
                    let body = Body::new(prelude, self.checksums, placement, 0)?;
                    self.phase = Phase::Body(Box::new(body));
                    continue;
                }
                Phase::Body(body) => body,
                Phase::Head(_) | Phase::Pass { .. } => {
                    unreachable!("a message reader relays nothing")
                }
            };
            let mut placing = Placing {
                placement,
                spare,
                stats: &mut self.stats,
                cap: self.limits.prealloc_cap,
            };
            if let Some(need) = body.fill(shared, &mut placing)? {
                return Ok(Event::Need(need));
            }
            let Phase::Body(body) = mem::replace(&mut self.phase, Phase::Prelude { need: 16 })
            else {
                unreachable!("in a message's body")
            };
            self.stats.bytes_received += body.wire_len();
            let env = body.finish()?;
            self.stats.messages_received += 1;
            self.stats.frames_received += env.frames().len() as u64;
            return Ok(Event::Message(env));
        }
    }

    /// Where the driver reads next, after [`Event::Need`]: the shared buffer
    /// (room reserved as the reader's mode has it), the run's own buffer or
    /// its spill file. Then [`filled`](FrameReader::filled) with the bytes
    /// the read took.
    pub(crate) fn target<'a>(
        &'a mut self,
        shared: &'a mut BytesMut,
    ) -> Result<Target<'a>, TransportError> {
        if self.is_poisoned() {
            return Err(TransportError::Poisoned);
        }
        let Some(more) = self.shared_more(shared.len()) else {
            let cap = self.limits.prealloc_cap;
            let Phase::Body(body) = &mut self.phase else {
                unreachable!("only a message's runs are read elsewhere")
            };
            return body.target(cap, &mut self.stats);
        };
        let limit = self.reserve(shared, more);
        Ok(Target::Buf { buf: shared, limit })
    }

    /// Room in the shared buffer for `more` bytes the reader needs, and how
    /// many bytes the driver's read may take (`more` and what it reads
    /// ahead). A codec's owner fills whatever room there is, so room is
    /// kept ahead (at least 4 KiB or all that is needed). A relay's driver
    /// reads up to `READ_AHEAD` past what is needed, and room is reserved
    /// only when the buffer is full. Never more than `prealloc_cap` past
    /// the bytes held (but for a read ahead's fixed room).
    ///
    /// A message reader's bytes do not move: a read runs ahead
    /// `SHARED_AHEAD` only where as much room is left after it, for the
    /// rest of a message whose start it takes (a message of at most
    /// `SHARED_AHEAD` then completes where it started), and never before a length table decoded as it arrives or
    /// a large frame's own buffer. Room is made when the buffer holds
    /// nothing (a new buffer moves nothing): for all the prelude or run
    /// needs, as the prelude declared it (within `prealloc_cap`), and a
    /// read ahead. A buffer that holds bytes grows only when they need more
    /// than its room (the rest of a long message whose start a read ahead
    /// took, a need over `prealloc_cap`); what that moves is counted as
    /// relocated.
    fn reserve(&mut self, shared: &mut BytesMut, more: usize) -> usize {
        let cap = self.limits.prealloc_cap;
        let (owner_fills, messages) = match &self.mode {
            Mode::Messages(m) => (m.placement.owner_fills(), true),
            Mode::Relay => (false, false),
        };
        let spare = shared.capacity() - shared.len();
        let read_ahead = more.saturating_add(READ_AHEAD);
        if owner_fills {
            if spare >= more.min(MIN_SPARE) {
                return read_ahead;
            }
            let moved = reserve_counted(shared, more.min(cap.max(MIN_SPARE)));
            self.stats.relocated_on_receive(moved);
            return read_ahead;
        }
        if !messages {
            if spare > 0 {
                return read_ahead;
            }
            let moved = reserve_counted(shared, more.min(cap).max(MIN_READ));
            self.stats.relocated_on_receive(moved);
            return read_ahead;
        }
        let exact = match &self.phase {
            // A length table taken out as it arrives: no frame's bytes
            // follow it into this buffer.
            Phase::Table(_) => true,
            // The bytes after the run are a large frame's, which go to a
            // buffer of its own: not read ahead only to be copied there.
            Phase::Body(b) => b.own_run_next(),
            _ => false,
        };
        // What may be reserved past the bytes held.
        let room = cap.max(MIN_READ);
        let wanted = match exact {
            true => more,
            // Room for a read ahead of `SHARED_AHEAD`, and as much again
            // for the rest of a message whose start it takes.
            false => more.saturating_add(2 * SHARED_AHEAD),
        };
        if shared.is_empty() && spare < wanted.min(room) {
            // Nothing held: a new buffer moves nothing. All that is needed
            // at once, as the prelude declared it (within `prealloc_cap`).
            let moved = reserve_counted(shared, wanted.min(room));
            self.stats.relocated_on_receive(moved);
        } else if spare < more.min(room) {
            // Bytes held, and less room than they need: the rest of a
            // message over the read ahead whose start a read ahead took, or
            // a need over `prealloc_cap`. The buffer grows once for all of
            // it (within `prealloc_cap`); what that moves is counted.
            let moved = reserve_counted(shared, more.min(room));
            self.stats.relocated_on_receive(moved);
        }
        let spare = shared.capacity() - shared.len();
        if exact || spare < more.saturating_add(2 * SHARED_AHEAD) {
            // No room to read ahead and keep room after it: exactly what
            // is needed, nothing stranded at the buffer's end.
            return more;
        }
        // Ahead, keeping as much room for the rest of a message it starts:
        // a message of at most `SHARED_AHEAD` completes where it started.
        more + SHARED_AHEAD
    }

    /// Makes room in the shared buffer for what the reader needs, after
    /// [`Event::Need`], for a driver that reads into it itself (a codec).
    pub(crate) fn reserve_shared(&mut self, shared: &mut BytesMut) {
        if let Some(more) = self.shared_more(shared.len()) {
            let _ = self.reserve(shared, more);
        }
    }

    /// The bytes the next step needs in the shared buffer, which holds
    /// `held`; `None` when they go elsewhere (a run of large frames), or
    /// after an error.
    fn shared_more(&self, held: usize) -> Option<usize> {
        let want = match &self.phase {
            Phase::Prelude { need } => *need,
            Phase::Table(t) => held + (t.len - t.taken()),
            Phase::Body(body) => body.shared_want()?,
            Phase::Head(h) => h.through_frame0,
            Phase::Pass { left, .. } => return Some(usize::try_from(*left).unwrap_or(usize::MAX)),
            Phase::Failed => return None,
        };
        Some(want.saturating_sub(held))
    }

    /// A read into the last [`target`](FrameReader::target) took `n` bytes.
    pub(crate) fn filled(&mut self, n: usize) {
        if let Phase::Body(body) = &mut self.phase {
            body.filled(n);
        }
    }

    /// The stream ended: fine between messages with nothing left in
    /// `shared`; otherwise the message in progress is
    /// [`EnvelopeError::Truncated`] at the byte it reached, and the reader
    /// is poisoned.
    pub(crate) fn end(&mut self, shared: &BytesMut) -> Result<(), TransportError> {
        let needed = match &self.phase {
            Phase::Failed => return Err(TransportError::Poisoned),
            Phase::Prelude { .. } if shared.is_empty() => return Ok(()),
            Phase::Prelude { need } => *need as u64,
            Phase::Table(t) => t.len as u64,
            Phase::Body(b) => b.wire_len(),
            Phase::Head(h) => h.wire_len,
            Phase::Pass { total, .. } => *total,
        };
        let offset = self.progress(shared.len()).map_or(0, |p| p.received);
        self.poison();
        Err(EnvelopeError::Truncated {
            offset,
            needed,
            got: offset,
        }
        .into())
    }
}
