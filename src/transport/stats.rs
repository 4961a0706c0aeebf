//! Counters a connection keeps of what it sent and received.

/// What a connection (or one of its halves) has moved so far. Counted by
/// the transport as it writes and reads, so `bytes_copied_on_send` is a
/// measurement, not an estimate: the frame bytes copied into the
/// coalescing buffer next to the prelude (frames under
/// [`COALESCE_THRESHOLD`](super::COALESCE_THRESHOLD)). Larger frames go to
/// the kernel from their own memory and are never counted there. Received
/// frames are always slices of the buffers the socket was read into.
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
    /// Frame bytes copied on the way out (small frames coalesced next to the
    /// prelude); large frames are written from their own `Bytes`.
    pub bytes_copied_on_send: u64,
    /// Messages received completely.
    pub messages_received: u64,
    /// Frames of those messages.
    pub frames_received: u64,
    /// Their bytes on the wire, preludes included.
    pub bytes_received: u64,
}

impl Stats {
    /// The send counters of `sent` with the receive counters of `received`.
    pub(crate) fn merge(sent: Stats, received: Stats) -> Stats {
        Stats {
            messages_received: received.messages_received,
            frames_received: received.frames_received,
            bytes_received: received.bytes_received,
            ..sent
        }
    }
}
