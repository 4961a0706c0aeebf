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
//! all small (under [`OWN_BUFFER_THRESHOLD`]) costs no copy and, when
//! several are in flight, one read for many messages. Large frames get a
//! buffer of their own, so that the small frame 0 (which decoded strings
//! point into) never pins a payload's memory, and consecutive large frames
//! (shards of one array) share it, contiguous, so merging them needs no
//! copy. Bytes of a large frame that a read took into the shared buffer
//! ahead of time (at most `READ_AHEAD`) are copied into its buffer: the
//! only copy on the way in, counted in
//! [`Stats::bytes_copied_on_receive`](super::Stats::bytes_copied_on_receive).
//!
//! **Receive-buffer recycling.** A fresh large buffer per message costs its
//! first-touch page faults, more than the copy from the kernel
//! (BENCHMARKS.md). The reader keeps a handle on the last large buffer;
//! once the application has dropped every frame of it,
//! [`BytesMut::try_reclaim`] hands the same memory back for the next large
//! run. Otherwise a fresh buffer grows as bytes arrive. (Buffers over the
//! connection's `max_recycled_buffer` are never kept.)
//!
//! All state lives in the reader and the driver's buffer: a driver whose
//! future is dropped between two polls loses nothing.

mod receive;
#[cfg(test)]
mod tests;

use std::mem;
use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use smallvec::SmallVec;

use crate::envelope::{parse_prelude, Envelope, EnvelopeError, Prelude, PreludeStatus};
use crate::limits::Limits;

use super::checksum::{self, Running};
use super::error::TransportError;
use super::stats::{reserve_counted, Stats};

pub(crate) use receive::Receiver;

/// Frames of at least this many bytes are read into a buffer of their own
/// (consecutive ones share it), straight from the socket, instead of the
/// shared read buffer. Below it, a frame is copied at most once, from the
/// kernel into the read buffer, and shares that buffer with its neighbours.
pub const OWN_BUFFER_THRESHOLD: usize = 64 << 10;

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
    Buf {
        buf: &'a mut BytesMut,
        limit: usize,
    },
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    Slice(&'a mut [u8]),
}

/// How a message reader places frames and fills the shared buffer.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    /// Frames of at least this many bytes go to a buffer of their own
    /// (`usize::MAX`: none, every frame is a slice of the shared buffer).
    own_from: usize,
    /// Whether the shared buffer's owner fills whatever room it has
    /// (tokio-util's `FramedRead`): room is then kept ahead in steps, and
    /// each message leaves the buffer whole, prelude included, once all of
    /// it has arrived. Otherwise (a connection) the driver reads at most
    /// `READ_AHEAD` past what the reader needs, and a prelude leaves the
    /// buffer as soon as it is parsed.
    owner_fills: bool,
    /// Whether the last large buffer is reused once its frames are dropped.
    recycle: bool,
    /// Large buffers above this size are not kept for reuse.
    recycle_limit: usize,
    /// Runs of large frames of at least this size are received into an
    /// anonymous mapped file in this directory instead of the heap.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    spill: Option<(std::path::PathBuf, usize)>,
}

impl Placement {
    /// A connection's: large frames in buffers of their own, recycled (or
    /// not, or not above `recycle_limit`).
    pub(crate) fn connection(recycle: bool, recycle_limit: usize) -> Placement {
        Placement {
            own_from: OWN_BUFFER_THRESHOLD,
            owner_fills: false,
            recycle,
            recycle_limit,
            #[cfg(all(target_os = "linux", feature = "mmap"))]
            spill: None,
        }
    }

    /// A codec's: every frame a slice of the shared buffer its owner fills.
    fn shared_only() -> Placement {
        Placement {
            own_from: usize::MAX,
            owner_fills: true,
            recycle: false,
            recycle_limit: 0,
            #[cfg(all(target_os = "linux", feature = "mmap"))]
            spill: None,
        }
    }

    /// Runs of large frames of at least `min_run` bytes go to a spill file
    /// in `dir`.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    pub(crate) fn spill(mut self, spill: Option<(std::path::PathBuf, usize)>) -> Placement {
        self.spill = spill;
        self
    }
}

/// What a reader hands back.
#[derive(Debug)]
enum Mode {
    /// Whole messages.
    Messages(Placement),
    /// Heads and forwarded bytes.
    Relay,
}

/// A sans-IO reader of Dask's framing (SPEC.md §2; see this module's
/// docs): fed bytes through a shared buffer its driver lends it, it checks
/// each prelude against [`Limits`] before anything is reserved for it, and
/// hands back whole messages or, as a relay reader, each message's head and
/// then its bytes. After an error it is poisoned: every later poll returns
/// [`TransportError::Poisoned`].
///
/// ```
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
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FrameReader {
    limits: Limits,
    /// Whether messages end with a checksum trailer to verify and remove.
    checksums: bool,
    mode: Mode,
    phase: Phase,
    /// A handle on the last large buffer, for [`BytesMut::try_reclaim`].
    spare: BytesMut,
    stats: Stats,
}

#[derive(Debug)]
enum Phase {
    /// Between messages, or in a prelude: `need` bytes (from the message's
    /// start) are needed at the last look.
    Prelude { need: usize },
    /// A message reader, the prelude parsed and taken out of the buffer.
    Body(Box<Body>),
    /// A relay reader, the prelude parsed: waiting for frame 0.
    Head(RelayHead),
    /// A relay reader: `left` bytes of a `total`-byte message to pass on.
    Pass { left: u64, total: u64 },
    /// An error happened: nothing more is read.
    Failed,
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

/// A run of back-to-back frames read into one buffer.
#[derive(Clone, Debug)]
struct Run {
    frames: Range<usize>,
    len: usize,
    place: Place,
}

/// A message reader's message whose prelude has been read.
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
    /// Bytes of the prelude still at the front of the shared buffer (see
    /// `Placement::owner_fills`): they leave it with the first run.
    header: usize,
    /// The buffer of the own-buffer run being read.
    large: Option<BytesMut>,
    /// With checksums on: the frames' CRCs so far, and how much of the
    /// run's own buffer (or spill file) they cover.
    sums: Option<Running>,
    hashed: usize,
    /// The buffers the runs were read into.
    buffers: SmallVec<[Bytes; 2]>,
    /// The spill file of the run being read, and its bytes so far.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    spill: Option<(crate::mmap::SpillBuffer, usize)>,
}

impl FrameReader {
    /// A relay reader: for each message, once its prelude (checked against
    /// `limits`) and frame 0 are in the shared buffer, an [`Event::Head`],
    /// then its bytes as they arrive ([`Event::Forward`], or
    /// [`Need::Body`] for the driver to pass on itself). Nothing is
    /// assembled and nothing is copied: the bytes forwarded are the
    /// buffer's own, split off it.
    pub fn relay(limits: Limits) -> FrameReader {
        FrameReader::with_mode(limits, Mode::Relay)
    }

    /// A message reader whose frames are all slices of the shared buffer,
    /// which its owner fills ([`FrameCodec`](super::FrameCodec)).
    pub(crate) fn shared_only(limits: Limits) -> FrameReader {
        FrameReader::messages(limits, Placement::shared_only())
    }

    /// A message reader that places frames as `placement` says (a
    /// [`Connection`](super::Connection)'s).
    pub(crate) fn messages(limits: Limits, placement: Placement) -> FrameReader {
        FrameReader::with_mode(limits, Mode::Messages(placement))
    }

    fn with_mode(limits: Limits, mode: Mode) -> FrameReader {
        FrameReader {
            limits,
            checksums: false,
            mode,
            phase: Phase::Prelude { need: 16 },
            spare: BytesMut::new(),
            stats: Stats::default(),
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
        self.stats
    }

    /// Whether an error stopped the reader.
    pub fn is_poisoned(&self) -> bool {
        matches!(self.phase, Phase::Failed)
    }

    /// Swaps the limits (the handshake is read under tight ones).
    pub(crate) fn replace_limits(&mut self, limits: Limits) -> Limits {
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
            Phase::Body(b) => b.large.as_ref().map_or(0, BytesMut::capacity),
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
            Phase::Head(h) => (buffered, Some(h.wire_len)),
            Phase::Pass { left, total } => (total - left + buffered.min(*left), Some(*total)),
            Phase::Body(b) => (
                b.done + b.in_run(buffered as usize) as u64,
                Some(b.wire_len),
            ),
        };
        Some(Progress { received, total })
    }

    /// A relay reader's step.
    fn poll_relay<'a>(&mut self, shared: &'a mut BytesMut) -> Result<Event<'a>, TransportError> {
        loop {
            match &mut self.phase {
                Phase::Failed => return Err(TransportError::Poisoned),
                Phase::Prelude { need } => match parse_prelude(shared, &self.limits)? {
                    PreludeStatus::Need(n) => {
                        *need = n;
                        return Ok(Event::Need(Need::Prelude {
                            more: n - shared.len(),
                        }));
                    }
                    PreludeStatus::Complete(p) => {
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
                Phase::Body(_) => unreachable!("a relay reader assembles no message"),
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
        let Mode::Messages(placement) = &self.mode else {
            unreachable!("poll: a relay reader is polled by poll_relay")
        };
        loop {
            let body = match &mut self.phase {
                Phase::Failed => return Err(TransportError::Poisoned),
                Phase::Prelude { need } => match parse_prelude(shared, &self.limits)? {
                    PreludeStatus::Need(n) => {
                        *need = n;
                        return Ok(Event::Need(Need::Prelude {
                            more: n - shared.len(),
                        }));
                    }
                    PreludeStatus::Complete(prelude) => {
                        let header = usize::try_from(prelude.header_len())
                            .map_err(|_| EnvelopeError::LengthOverflow)?;
                        let mut body = Body::new(prelude, self.checksums, placement)?;
                        if placement.owner_fills {
                            body.header = header;
                        } else {
                            shared.advance(header);
                        }
                        self.phase = Phase::Body(Box::new(body));
                        continue;
                    }
                },
                Phase::Body(body) => body,
                Phase::Head(_) | Phase::Pass { .. } => {
                    unreachable!("a message reader relays nothing")
                }
            };
            let Some(run) = body.runs.get(body.run).cloned() else {
                let Phase::Body(body) = mem::replace(&mut self.phase, Phase::Prelude { need: 16 })
                else {
                    unreachable!("in a message's body")
                };
                self.stats.bytes_received += body.wire_len;
                let env = body.finish()?;
                self.stats.messages_received += 1;
                self.stats.frames_received += env.frames().len() as u64;
                return Ok(Event::Message(env));
            };
            let mut into = Into {
                placement,
                spare: &mut self.spare,
                stats: &mut self.stats,
                #[cfg(all(target_os = "linux", feature = "mmap"))]
                cap: self.limits.prealloc_cap,
            };
            let data = match run.place {
                Place::Shared if shared.len() >= body.header + run.len => {
                    Some(shared.split_to(body.header + run.len).freeze())
                }
                Place::Shared => None,
                Place::Own => into.own(body, shared, &run),
                Place::Spill => into.spill(body, shared, &run)?,
            };
            match data {
                Some(data) => body.push_run(&run, data),
                None => {
                    return Ok(Event::Need(Need::Frames {
                        more: run.len - body.in_run(shared.len()),
                        frames: run.frames,
                        len: run.len,
                        place: run.place,
                    }))
                }
            }
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
        let more = match &self.phase {
            Phase::Failed => return Err(TransportError::Poisoned),
            Phase::Prelude { need } => *need - shared.len(),
            Phase::Body(body) => match &body.runs[body.run] {
                run if run.place == Place::Shared => body.header + run.len - shared.len(),
                _ => {
                    let cap = self.limits.prealloc_cap;
                    let Phase::Body(body) = &mut self.phase else {
                        unreachable!("in a message's body")
                    };
                    return body.target(cap, &mut self.stats);
                }
            },
            Phase::Head(h) => h.through_frame0 - shared.len(),
            Phase::Pass { left, .. } => usize::try_from(*left).unwrap_or(usize::MAX),
        };
        self.reserve(shared, more);
        Ok(Target::Buf {
            buf: shared,
            limit: more.saturating_add(READ_AHEAD),
        })
    }

    /// Room in the shared buffer for `more` bytes the reader needs: a
    /// driver that reads with a limit fills it up to `READ_AHEAD` past
    /// them, and room is reserved only when it is full; a codec's owner
    /// fills whatever room there is, so room is kept ahead (at least 4 KiB
    /// or all that is needed). Never more than `prealloc_cap` past the
    /// bytes held.
    fn reserve(&mut self, shared: &mut BytesMut, more: usize) {
        let cap = self.limits.prealloc_cap;
        let owner_fills = match &self.mode {
            Mode::Messages(p) => p.owner_fills,
            Mode::Relay => false,
        };
        let spare = shared.capacity() - shared.len();
        self.stats.bytes_relocated_on_receive += if owner_fills {
            if spare >= more.min(MIN_SPARE) {
                return;
            }
            reserve_counted(shared, more.min(cap.max(MIN_SPARE)))
        } else {
            if spare > 0 {
                return;
            }
            reserve_counted(shared, more.min(cap).max(MIN_READ))
        };
    }

    /// Makes room in the shared buffer for what the reader needs, after
    /// [`Event::Need`], for a driver that reads into it itself (a codec).
    pub(crate) fn reserve_shared(&mut self, shared: &mut BytesMut) {
        let more = match &self.phase {
            Phase::Prelude { need } => need.saturating_sub(shared.len()),
            Phase::Body(body) => body.runs.get(body.run).map_or(0, |run| {
                (body.header + run.len).saturating_sub(shared.len())
            }),
            _ => return,
        };
        self.reserve(shared, more);
    }

    /// A read into the last [`target`](FrameReader::target) took `n` bytes.
    pub(crate) fn filled(&mut self, n: usize) {
        #[cfg(all(target_os = "linux", feature = "mmap"))]
        if let Phase::Body(body) = &mut self.phase {
            if let Some((_, filled)) = &mut body.spill {
                *filled += n;
            }
        }
        #[cfg(not(all(target_os = "linux", feature = "mmap")))]
        let _ = n;
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
            Phase::Body(b) => b.wire_len,
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

/// What filling a run's own buffer or spill file needs besides the
/// message: the reader's placement, recycling handle and counters.
struct Into<'r> {
    placement: &'r Placement,
    spare: &'r mut BytesMut,
    stats: &'r mut Stats,
    /// `Limits::prealloc_cap`: how far a spill file may grow ahead.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    cap: usize,
}

impl Into<'_> {
    /// Moves what `shared` holds of an own-buffer run into the run's buffer
    /// (the recycled one, if the application let go of it) and sums it;
    /// once the run is whole, hands it over.
    fn own(&mut self, body: &mut Body, shared: &mut BytesMut, run: &Run) -> Option<Bytes> {
        let recycle = self.placement.recycle;
        let own = body
            .large
            .get_or_insert_with(|| take_large_buffer(self.spare, run.len, recycle));
        if !shared.is_empty() && own.len() < run.len {
            // At most READ_AHEAD bytes: the only copy of a large frame.
            let n = shared.len().min(run.len - own.len());
            self.stats.bytes_relocated_on_receive += reserve_counted(own, n);
            own.extend_from_slice(&shared[..n]);
            self.stats.bytes_copied_on_receive += n as u64;
            shared.advance(n);
        }
        if let Some(sums) = &mut body.sums {
            // Sum what just arrived, while it is in cache.
            sums.feed(&body.lengths, &own[body.hashed..]);
            body.hashed = own.len();
        }
        if own.len() < run.len {
            return None;
        }
        let mut own = body.large.take().unwrap_or_default();
        let data = own.split_to(run.len).freeze();
        body.hashed = 0;
        if recycle && data.len() + own.capacity() <= self.placement.recycle_limit {
            *self.spare = own; // keeps a handle on the allocation
        }
        Some(data)
    }

    /// Moves what `shared` holds of a spill run into its spill file
    /// (created at the run's start, growing as bytes arrive: at most twice
    /// what it holds plus `prealloc_cap`, never past the run) and sums it;
    /// once the run is whole, hands it over as one `Bytes` over the mapping.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    fn spill(
        &mut self,
        body: &mut Body,
        shared: &mut BytesMut,
        run: &Run,
    ) -> Result<Option<Bytes>, TransportError> {
        use crate::mmap::SpillBuffer;
        let Some((dir, _)) = &self.placement.spill else {
            unreachable!("spill runs only with a spill directory")
        };
        let (buf, filled) = match &mut body.spill {
            Some(s) => s,
            None => {
                let first = run.len.min(self.cap.max(MIN_SPILL));
                body.spill
                    .insert((SpillBuffer::new(dir, first).map_err(spill_error)?, 0))
            }
        };
        if !shared.is_empty() && *filled < run.len {
            // At most READ_AHEAD bytes, as for a heap buffer.
            let n = shared.len().min(run.len - *filled);
            buf.grow_to(*filled + n).map_err(spill_error)?;
            buf.as_mut()[*filled..*filled + n].copy_from_slice(&shared[..n]);
            self.stats.bytes_copied_on_receive += n as u64;
            shared.advance(n);
            *filled += n;
        }
        if let Some(sums) = &mut body.sums {
            sums.feed(&body.lengths, &buf.as_ref()[body.hashed..*filled]);
            body.hashed = *filled;
        }
        if *filled < run.len {
            return Ok(None);
        }
        let (buf, _) = body.spill.take().expect("a spill buffer");
        body.hashed = 0;
        buf.freeze().map(Some).map_err(spill_error)
    }

    #[cfg(not(all(target_os = "linux", feature = "mmap")))]
    fn spill(
        &mut self,
        _: &mut Body,
        _: &mut BytesMut,
        _: &Run,
    ) -> Result<Option<Bytes>, TransportError> {
        unreachable!("spill runs only with feature mmap")
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

#[cfg(all(target_os = "linux", feature = "mmap"))]
fn spill_error(e: crate::mmap::MmapError) -> TransportError {
    TransportError::Io(std::io::Error::other(e))
}

impl Body {
    fn new(
        prelude: Prelude,
        checksums: bool,
        placement: &Placement,
    ) -> Result<Body, EnvelopeError> {
        let (wire_len, header_len) = (prelude.wire_len(), prelude.header_len());
        let first_read_frames = prelude.frames_in_first_read();
        // Collected in place: a message of 2 × 10⁶ frames keeps one table.
        let lengths = prelude
            .into_lengths()
            .into_iter()
            .map(|len| usize::try_from(len).map_err(|_| EnvelopeError::LengthOverflow))
            .collect::<Result<Vec<usize>, _>>()?;
        let runs = runs(&lengths, placement);
        let sums = checksums.then(|| Running::new(&lengths));
        Ok(Body {
            frames: Vec::with_capacity(lengths.len()),
            done: header_len,
            header: 0,
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

    /// Slices the frames of `run` out of its buffer (after the prelude, if
    /// the buffer still holds it).
    fn push_run(&mut self, run: &Run, data: Bytes) {
        let mut at = mem::take(&mut self.header);
        if !data.is_empty() {
            self.buffers.push(data.clone());
        }
        if let (Some(sums), Place::Shared) = (&mut self.sums, run.place) {
            sums.feed(&self.lengths, &data[at..]);
        }
        for &len in &self.lengths[run.frames.clone()] {
            self.frames.push(data.slice(at..at + len));
            at += len;
        }
        self.done += run.len as u64;
        self.run += 1;
    }

    /// Where the current run, a large one, is read next: its own buffer
    /// (grown when full, by at most `cap` past what it holds), at most
    /// `LARGE_READ` at a time, or its spill file (grown when full: twice
    /// what it holds, or `cap` more, never past the run); with checksums,
    /// in pieces that stay in cache until summed.
    fn target(&mut self, cap: usize, stats: &mut Stats) -> Result<Target<'_>, TransportError> {
        let run = &self.runs[self.run];
        let summing = self.sums.is_some();
        if run.place == Place::Own {
            let own = self.large.as_mut().expect("an own buffer");
            let mut want = run.len - own.len();
            if summing {
                want = want.min(checksum::PIECE);
            }
            if own.capacity() == own.len() {
                stats.bytes_relocated_on_receive +=
                    reserve_counted(own, want.min(cap.max(MIN_READ)));
            }
            return Ok(Target::Buf {
                buf: own,
                limit: want.min(LARGE_READ),
            });
        }
        #[cfg(all(target_os = "linux", feature = "mmap"))]
        {
            let run_len = run.len;
            let (buf, filled) = self.spill.as_mut().expect("a spill file");
            if *filled == buf.len() {
                let next = (2 * buf.len())
                    .max(*filled + cap.max(MIN_SPILL))
                    .min(run_len);
                buf.grow_to(next).map_err(spill_error)?;
            }
            let mut want = buf.len().min(run_len) - *filled;
            if summing {
                want = want.min(checksum::PIECE);
            }
            let at = *filled;
            Ok(Target::Slice(&mut buf.as_mut()[at..at + want]))
        }
        #[cfg(not(all(target_os = "linux", feature = "mmap")))]
        unreachable!("spill runs only with feature mmap")
    }

    /// Bytes of the current run received so far (`shared`: the bytes in
    /// the shared buffer).
    fn in_run(&self, shared: usize) -> usize {
        match self.runs.get(self.run).map(|r| r.place) {
            Some(Place::Own) => self.large.as_ref().map_or(0, BytesMut::len),
            Some(Place::Spill) => self.spilled(),
            _ => shared.saturating_sub(self.header),
        }
    }

    /// Bytes of the current spill run in its file.
    fn spilled(&self) -> usize {
        #[cfg(all(target_os = "linux", feature = "mmap"))]
        return self.spill.as_ref().map_or(0, |(_, filled)| *filled);
        #[cfg(not(all(target_os = "linux", feature = "mmap")))]
        0
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

/// The runs of back-to-back frames a message's frames are read in: small
/// frames in the shared buffer, large ones in a buffer of their own or,
/// from the spill size up, a spill file. Empty frames join any run: they
/// never break contiguity.
fn runs(lengths: &[usize], placement: &Placement) -> Vec<Run> {
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    let spill_from = placement.spill.as_ref().map_or(usize::MAX, |(_, min)| *min);
    #[cfg(not(all(target_os = "linux", feature = "mmap")))]
    let spill_from = usize::MAX;
    let mut runs: Vec<Run> = Vec::new();
    for (i, &len) in lengths.iter().enumerate() {
        let place = if len >= placement.own_from {
            Place::Own
        } else {
            Place::Shared
        };
        match runs.last_mut() {
            Some(run) if run.place == place || len == 0 => {
                run.frames.end = i + 1;
                run.len += len;
            }
            _ => runs.push(Run {
                frames: i..i + 1,
                len,
                place,
            }),
        }
    }
    for run in &mut runs {
        if run.place == Place::Own && run.len >= spill_from {
            run.place = Place::Spill;
        }
    }
    runs
}
