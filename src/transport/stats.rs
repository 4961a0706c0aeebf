//! Counters a connection keeps of what it sent and received.

use bytes::BytesMut;

/// What a connection (or one of its halves, or a
/// [`FrameCodec`](super::FrameCodec)) has moved so far.
///
/// The copy counters are incremented where the copy happens, by the number
/// of bytes that copy moved; they count copies framewire makes between
/// buffers in this process's memory. The kernel's own copies (a `writev`
/// taking bytes from a frame's memory, a `read` filling a buffer) are not
/// copies in this sense, nor is what a TLS stream does with the bytes it
/// encrypts or decrypts (every byte, into records of its own).
///
/// * [`Connection`](super::Connection) sends: the prelude and the frames
///   under [`COALESCE_THRESHOLD`](super::COALESCE_THRESHOLD) (16 KiB) are copied into
///   one buffer per message (counted: the frame bytes); larger frames go to
///   the kernel from their own memory.
/// * [`Connection`](super::Connection) receives: frames are slices of the
///   buffers the socket was read into. Bytes are copied when a read that
///   ran ahead into the shared buffer took the start of a large frame, which
///   then moves into that frame's own buffer (at most 64 KiB per run of
///   large frames); and when a buffer that holds bytes has to grow and its
///   address changes, the bytes it held were copied to the new allocation
///   (counted as copied, and apart as relocated).
/// * [`FrameCodec`](super::FrameCodec)'s encoder copies every frame into the
///   write buffer.
///
/// ```
/// use framewire::transport::{Connection, Stats};
/// use framewire::{Envelope, Value};
/// use bytes::Bytes;
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let (a, b) = tokio::io::duplex(1 << 20);
/// let (mut tx, mut rx) = (Connection::new(a), Connection::new(b));
/// let payload = Bytes::from(vec![7u8; 100_000]);
/// let env = Envelope::new(vec![Bytes::from_static(b"\x90"), payload])?;
/// let (sent, got) = tokio::join!(tx.send(env), rx.recv());
/// sent?;
/// got.expect("a message")?;
/// let s: Stats = tx.stats();
/// assert_eq!((s.messages_sent, s.frames_sent), (1, 2));
/// assert_eq!(s.bytes_copied_on_send, 1); // frame 0 only; the payload was not copied
/// assert_eq!(rx.stats().bytes_received, s.bytes_sent);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Messages written completely.
    pub messages_sent: u64,
    /// Frames of those messages.
    pub frames_sent: u64,
    /// Their bytes on the wire, preludes included.
    pub bytes_sent: u64,
    /// Frame bytes copied into a buffer of framewire's on the way out,
    /// counted at the copy: into the coalescing buffer of a
    /// [`Connection`](super::Connection) (for the messages written
    /// completely), into the write buffer of a
    /// [`FrameCodec`](super::FrameCodec) (every frame, plus the bytes of
    /// earlier messages still in that buffer when growing it moved them).
    /// Preludes and checksum trailers are not frame bytes.
    pub bytes_copied_on_send: u64,
    /// Messages received completely.
    pub messages_received: u64,
    /// Frames of those messages.
    pub frames_received: u64,
    /// Their bytes on the wire, preludes included.
    pub bytes_received: u64,
    /// Bytes that arrived in one receive buffer and were then copied
    /// into another allocation, counted at the copy: the start of a large
    /// frame read ahead into the shared buffer and moved into the frame's
    /// own buffer or spill file, and the bytes a buffer held when growing it
    /// moved it to a new address (also counted in
    /// [`bytes_relocated_on_receive`](Stats::bytes_relocated_on_receive)).
    pub bytes_copied_on_receive: u64,
    /// Of [`bytes_copied_on_receive`](Stats::bytes_copied_on_receive), the
    /// bytes a receive buffer held when growing it moved it to another
    /// address (a reallocation, or `BytesMut` copying a buffer that frames
    /// still share into a new one). Counted when the move is seen: the
    /// buffer's address changed across the reservation. Only the buffers
    /// framewire grows itself (`Framed`'s own reservations are tokio-util's).
    pub bytes_relocated_on_receive: u64,
    /// Large frames received into the recycled buffer of an earlier one
    /// (its memory handed back once the application dropped every frame
    /// in it: no new allocation, no page faults), counted when the
    /// recycled buffer is taken. The other large runs got a fresh buffer.
    pub buffers_recycled_on_receive: u64,
}

/// Counter by counter, what `self` counts beyond `earlier` (saturating):
/// what a connection moved between two readings of its [`Stats`].
impl std::ops::Sub for Stats {
    type Output = Stats;
    fn sub(self, earlier: Stats) -> Stats {
        let mut d = self;
        d.zip_with(&earlier, u64::saturating_sub);
        d
    }
}

/// Counter by counter, the sum (saturating): what several connections
/// moved in all.
impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, other: Stats) {
        self.zip_with(&other, u64::saturating_add);
    }
}

impl Stats {
    /// Applies `f` to each counter of `self` and the same counter of
    /// `other`, in place.
    fn zip_with(&mut self, other: &Stats, f: fn(u64, u64) -> u64) {
        let Stats {
            messages_sent,
            frames_sent,
            bytes_sent,
            bytes_copied_on_send,
            messages_received,
            frames_received,
            bytes_received,
            bytes_copied_on_receive,
            bytes_relocated_on_receive,
            buffers_recycled_on_receive,
        } = self;
        for (mine, theirs) in [
            (messages_sent, other.messages_sent),
            (frames_sent, other.frames_sent),
            (bytes_sent, other.bytes_sent),
            (bytes_copied_on_send, other.bytes_copied_on_send),
            (messages_received, other.messages_received),
            (frames_received, other.frames_received),
            (bytes_received, other.bytes_received),
            (bytes_copied_on_receive, other.bytes_copied_on_receive),
            (bytes_relocated_on_receive, other.bytes_relocated_on_receive),
            (
                buffers_recycled_on_receive,
                other.buffers_recycled_on_receive,
            ),
        ] {
            *mine = f(*mine, theirs);
        }
    }

    /// The send counters of `sent` with the receive counters of `received`.
    pub(crate) fn merge(sent: Stats, received: Received) -> Stats {
        Stats {
            messages_received: received.messages_received,
            frames_received: received.frames_received,
            bytes_received: received.bytes_received,
            bytes_copied_on_receive: received.bytes_copied_on_receive,
            bytes_relocated_on_receive: received.bytes_relocated_on_receive,
            buffers_recycled_on_receive: received.buffers_recycled_on_receive,
            ..sent
        }
    }
}

/// The receive counters of [`Stats`], as a reader keeps them (a relay
/// keeps one reader per direction of every connection: the send counters
/// would be dead weight in each).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Received {
    pub(crate) messages_received: u64,
    pub(crate) frames_received: u64,
    pub(crate) bytes_received: u64,
    pub(crate) bytes_copied_on_receive: u64,
    pub(crate) bytes_relocated_on_receive: u64,
    pub(crate) buffers_recycled_on_receive: u64,
}

impl From<Received> for Stats {
    fn from(r: Received) -> Stats {
        Stats::merge(Stats::default(), r)
    }
}

impl Received {
    /// Counts `n` bytes a growing receive buffer moved: a copy, and a
    /// relocation.
    pub(crate) fn relocated_on_receive(&mut self, n: u64) {
        self.bytes_copied_on_receive += n;
        self.bytes_relocated_on_receive += n;
    }
}

/// Reserves room for `additional` more bytes in `buf`; returns the bytes the
/// reservation moved: what `buf` held, if its address changed (the
/// allocator, or `BytesMut` reclaiming its own front, moved them), else 0.
pub(crate) fn reserve_counted(buf: &mut BytesMut, additional: usize) -> u64 {
    let (before, held) = (buf.as_ptr(), buf.len());
    buf.reserve(additional);
    if held > 0 && buf.as_ptr() != before {
        held as u64
    } else {
        0
    }
}
