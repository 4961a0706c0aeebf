//! A message reader's message once its prelude is parsed: the runs its
//! frames are read in, where each run goes (the shared buffer, a buffer of
//! its own, a spill file) and how it gets there: the read-ahead copied in,
//! checksums fed, large buffers recycled.

use std::mem;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use memmap2::{MmapMut, MmapOptions};
use smallvec::SmallVec;

use crate::envelope::{Envelope, EnvelopeError, Prelude};
use crate::transport::checksum::{self, Running};
use crate::transport::error::TransportError;
use crate::transport::stats::{reserve_counted, Received};

#[cfg(all(target_os = "linux", feature = "mmap"))]
use super::MIN_SPILL;
use super::{Need, Place, Target, LARGE_READ, MIN_READ, OWN_BUFFER_THRESHOLD};

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
    pub(super) fn shared_only() -> Placement {
        Placement {
            own_from: usize::MAX,
            owner_fills: true,
            recycle: false,
            recycle_limit: 0,
            #[cfg(all(target_os = "linux", feature = "mmap"))]
            spill: None,
        }
    }

    /// See `owner_fills`.
    pub(super) fn owner_fills(&self) -> bool {
        self.owner_fills
    }

    /// Runs of large frames of at least `min_run` bytes go to a spill file
    /// in `dir`.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    pub(crate) fn spill(mut self, spill: Option<(std::path::PathBuf, usize)>) -> Placement {
        self.spill = spill;
        self
    }
}

/// A run of back-to-back frames read into one buffer.
#[derive(Clone, Debug)]
pub(super) struct Run {
    pub(super) frames: Range<usize>,
    pub(super) len: usize,
    pub(super) place: Place,
}

/// A message reader's message whose prelude has been read.
#[derive(Debug)]
pub(super) struct Body {
    /// Bytes of the whole message on the wire.
    wire_len: u64,
    /// Frames inside the first read (the prelude's `N`).
    first_read_frames: usize,
    /// The frame lengths, as `usize` (the whole message fits: checked), in
    /// the prelude's own allocation.
    lengths: Vec<usize>,
    /// Most messages have one to three runs: no allocation for them.
    runs: SmallVec<[Run; 3]>,
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
    large: Option<Large>,
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

/// The buffer of a run of large frames: mapped at the run's full length
/// at once, so that it never moves (address space only: the kernel commits
/// each page when the first byte lands in it, so the memory it takes
/// follows the bytes that arrived, as `Limits::prealloc_cap` asks); on the
/// heap where it is no larger than `prealloc_cap` (reserved whole at once),
/// and where no mapping can be made (a declared length beyond the address
/// space, a strict overcommit policy): then it grows as bytes arrive.
#[derive(Debug)]
enum Large {
    Heap(BytesMut),
    Mapped {
        map: MmapMut,
        /// Bytes of the run in it.
        filled: usize,
        /// Bytes of it written, this run or an earlier one: the memory
        /// it takes.
        touched: usize,
    },
}

impl Large {
    /// Bytes of the run in it.
    fn len(&self) -> usize {
        match self {
            Large::Heap(b) => b.len(),
            Large::Mapped { filled, .. } => *filled,
        }
    }

    /// The run's bytes so far.
    fn filled(&self) -> &[u8] {
        match self {
            Large::Heap(b) => b,
            Large::Mapped { map, filled, .. } => &map[..*filled],
        }
    }

    /// The memory it holds.
    fn reserved(&self) -> usize {
        match self {
            Large::Heap(b) => b.capacity(),
            Large::Mapped {
                filled, touched, ..
            } => (*filled).max(*touched),
        }
    }
}

/// A mapped buffer shared by the frames sliced out of it and the reader's
/// handle for reuse: whoever drops it last unmaps it.
struct SharedMap(Arc<(MmapMut, usize)>);

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.0 .0
    }
}

/// The last large buffer, kept to be reused once the application has
/// dropped every frame of it: no new allocation, no page faults.
#[derive(Debug, Default)]
pub(super) struct Spare {
    heap: BytesMut,
    /// A mapping, and how much of it was written.
    mapped: Option<Arc<(MmapMut, usize)>>,
}

/// What filling a run's own buffer or spill file needs besides the
/// message: the reader's placement, recycling handle and counters.
pub(super) struct Placing<'r> {
    pub(super) placement: &'r Placement,
    pub(super) spare: &'r mut Spare,
    pub(super) stats: &'r mut Received,
    /// `Limits::prealloc_cap`: runs above it are mapped, and how far a
    /// spill file may grow ahead.
    pub(super) cap: usize,
}

impl Placing<'_> {
    /// Moves what `shared` holds of an own-buffer run into the run's buffer
    /// (the recycled one, if the application let go of it) and sums it;
    /// once the run is whole, hands it over.
    fn own(&mut self, body: &mut Body, shared: &mut BytesMut, run: &Run) -> Option<Bytes> {
        let large = body.large.get_or_insert_with(|| {
            take_large(self.spare, run.len, self.placement, self.cap, self.stats)
        });
        if !shared.is_empty() && large.len() < run.len {
            // At most READ_AHEAD bytes: the only copy of a large frame.
            let n = shared.len().min(run.len - large.len());
            match large {
                Large::Heap(own) => {
                    self.stats.relocated_on_receive(reserve_counted(own, n));
                    own.extend_from_slice(&shared[..n]);
                }
                Large::Mapped { map, filled, .. } => {
                    map[*filled..*filled + n].copy_from_slice(&shared[..n]);
                    *filled += n;
                }
            }
            self.stats.bytes_copied_on_receive += n as u64;
            shared.advance(n);
        }
        if let Some(sums) = &mut body.sums {
            // Sum what just arrived, while it is in cache.
            sums.feed(&body.lengths, &large.filled()[body.hashed..]);
            body.hashed = large.len();
        }
        if large.len() < run.len {
            return None;
        }
        body.hashed = 0;
        let recycle = self.placement.recycle;
        match body.large.take()? {
            Large::Heap(mut own) => {
                let data = own.split_to(run.len).freeze();
                if recycle && data.len() + own.capacity() <= self.placement.recycle_limit {
                    self.spare.heap = own; // keeps a handle on the allocation
                }
                Some(data)
            }
            Large::Mapped {
                map,
                filled,
                touched,
            } => {
                let keep = recycle && map.len() <= self.placement.recycle_limit;
                let shared = Arc::new((map, filled.max(touched)));
                if keep {
                    self.spare.mapped = Some(shared.clone());
                }
                Some(Bytes::from_owner(SharedMap(shared)).slice(..run.len))
            }
        }
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

/// A buffer for a large run of `len` bytes (see [`Large`]): the recycled
/// one if the application dropped every frame of it and it is large
/// enough, else a new one.
fn take_large(
    spare: &mut Spare,
    len: usize,
    placement: &Placement,
    cap: usize,
    stats: &mut Received,
) -> Large {
    let recycle = placement.recycle;
    if len > cap {
        if let Some(map) = spare.mapped.take().filter(|_| recycle) {
            match Arc::try_unwrap(map) {
                Ok((map, touched)) if map.len() >= len => {
                    stats.buffers_recycled_on_receive += 1;
                    return Large::Mapped {
                        map,
                        filled: 0,
                        touched,
                    };
                }
                // Too small, or still held by the application: let go.
                _ => {}
            }
        }
        if let Ok(map) = MmapOptions::new().len(len).no_reserve_swap().map_anon() {
            return Large::Mapped {
                map,
                filled: 0,
                touched: 0,
            };
        }
    }
    if recycle && spare.heap.try_reclaim(len) {
        stats.buffers_recycled_on_receive += 1;
        return Large::Heap(mem::take(&mut spare.heap));
    }
    spare.heap = BytesMut::new(); // the application still holds it: let go
                                  // Whole at once when it is within `prealloc_cap`; beyond it (no
                                  // mapping could be made) it grows as bytes arrive, from `prealloc_cap`.
    Large::Heap(BytesMut::with_capacity(len.min(cap)))
}

#[cfg(all(target_os = "linux", feature = "mmap"))]
fn spill_error(e: crate::mmap::MmapError) -> TransportError {
    TransportError::Io(std::io::Error::other(e))
}

impl Body {
    /// A message whose prelude was parsed; `kept`: bytes of the prelude
    /// still at the front of the shared buffer (a codec's), which leave it
    /// with the first run.
    pub(super) fn new(
        prelude: Prelude,
        checksums: bool,
        placement: &Placement,
        kept: usize,
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
            header: kept,
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

    /// Bytes of the whole message on the wire.
    pub(super) fn wire_len(&self) -> u64 {
        self.wire_len
    }

    /// Bytes of the message received so far, `shared` of them in the
    /// shared buffer.
    pub(super) fn received(&self, shared: usize) -> u64 {
        self.done + self.in_run(shared) as u64
    }

    /// Memory the own buffer being filled holds.
    pub(super) fn reserved(&self) -> usize {
        self.large.as_ref().map_or(0, Large::reserved)
    }

    /// Takes the runs whose bytes are all here, from the shared buffer and
    /// the run's own buffer or file: `None` once every run is in, else what
    /// the current one still needs.
    pub(super) fn fill(
        &mut self,
        shared: &mut BytesMut,
        placing: &mut Placing<'_>,
    ) -> Result<Option<Need>, TransportError> {
        while let Some(run) = self.runs.get(self.run).cloned() {
            let data = match run.place {
                Place::Shared if shared.len() >= self.header + run.len => {
                    Some(shared.split_to(self.header + run.len).freeze())
                }
                Place::Shared => None,
                Place::Own => placing.own(self, shared, &run),
                Place::Spill => placing.spill(self, shared, &run)?,
            };
            let Some(data) = data else {
                return Ok(Some(Need::Frames {
                    more: run.len - self.in_run(shared.len()),
                    frames: run.frames,
                    len: run.len,
                    place: run.place,
                }));
            };
            self.push_run(&run, data);
        }
        Ok(None)
    }

    /// The bytes the shared buffer must hold for the current run, if it is
    /// read there.
    pub(super) fn shared_want(&self) -> Option<usize> {
        let run = self.runs.get(self.run)?;
        (run.place == Place::Shared).then_some(self.header + run.len)
    }

    /// Whether the current run, read in the shared buffer, is followed by a
    /// run that has a buffer or file of its own (whose bytes a read ahead
    /// would take only to copy them there).
    pub(super) fn own_run_next(&self) -> bool {
        self.runs
            .get(self.run + 1)
            .is_some_and(|r| r.place != Place::Shared)
    }

    /// A read into the current run's mapped buffer or spill file took `n`
    /// bytes.
    pub(super) fn filled(&mut self, n: usize) {
        if let Some(Large::Mapped { filled, .. }) = &mut self.large {
            *filled += n;
            return;
        }
        #[cfg(all(target_os = "linux", feature = "mmap"))]
        if let Some((_, filled)) = &mut self.spill {
            *filled += n;
        }
        #[cfg(not(all(target_os = "linux", feature = "mmap")))]
        let _ = n;
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
    /// (grown when full by what it holds, at least `cap`, never past the
    /// run), at most
    /// `LARGE_READ` at a time, or its spill file (grown when full: twice
    /// what it holds, or `cap` more, never past the run); with checksums,
    /// in pieces that stay in cache until summed.
    pub(super) fn target(
        &mut self,
        cap: usize,
        stats: &mut Received,
    ) -> Result<Target<'_>, TransportError> {
        let run = &self.runs[self.run];
        let summing = self.sums.is_some();
        if run.place == Place::Own {
            let large = self.large.as_mut().expect("an own buffer");
            let mut want = run.len - large.len();
            if summing {
                want = want.min(checksum::PIECE);
            }
            let own = match large {
                Large::Heap(own) => own,
                Large::Mapped { map, filled, .. } => {
                    let at = *filled;
                    return Ok(Target::Slice(&mut map[at..at + want.min(LARGE_READ)]));
                }
            };
            if own.capacity() == own.len() {
                // Geometric growth relative to what arrived: room for as
                // many bytes again as the buffer holds (at least `cap`),
                // never past the run. A buffer is then never more than
                // twice what arrived plus `cap`, however large the declared
                // length, and growing it moves at most as many bytes as the
                // run has in all (the sum of a doubling series), not the
                // quadratic total of fixed `cap` steps.
                let ahead = cap.max(MIN_READ).max(own.len());
                stats.relocated_on_receive(reserve_counted(own, want.min(ahead)));
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
            Some(Place::Own) => self.large.as_ref().map_or(0, Large::len),
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

    /// The message, its checksum trailer (if any) checked and removed.
    pub(super) fn finish(mut self) -> Result<Envelope, TransportError> {
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
fn runs(lengths: &[usize], placement: &Placement) -> SmallVec<[Run; 3]> {
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    let spill_from = placement.spill.as_ref().map_or(usize::MAX, |(_, min)| *min);
    #[cfg(not(all(target_os = "linux", feature = "mmap")))]
    let spill_from = usize::MAX;
    let mut runs: SmallVec<[Run; 3]> = SmallVec::new();
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
