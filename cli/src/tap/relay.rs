//! One direction of a relayed connection: cut-through, message by message.
//!
//! ```text
//! from ──read──▶ buf ──▶ FrameReader::relay: Event::Head (prelude + frame 0) ─ log the ops ─┐
//!                                                                                          ▼
//!                        Event::Forward: the message's bytes as they arrive ──write──▶ to  (copied)
//!                        or Need::Body{more ≥ SPLICE_MIN}, nothing buffered:
//!                        from ──splice──▶ pipe ──splice──▶ to, FrameReader::passed  (spliced)
//! ```
//!
//! The framing is the library's ([`FrameReader`], a relay reader: preludes
//! checked against `Limits::dask_compat()`); the relay does the IO. The tap
//! needs the prelude (to know where the message ends) and frame 0 (to name
//! its ops in the log); once both are in, the message's line is
//! logged and its bytes are forwarded as they arrive, not once the whole
//! message is in: a 256 MiB frame starts leaving the tap as soon as it
//! starts arriving, and the tap holds at most [`MAX_READ`] of it. On Linux,
//! the part of a message not yet read when its line is logged (large frames
//! and everything after frame 0) is moved with `splice(2)` when it is at
//! least [`SPLICE_MIN`] bytes: it never enters the tap's memory. What goes
//! through the tap's memory (preludes, frames 0, small messages, what was
//! read ahead) is counted as `copied`, what is spliced as `spliced`.
//!
//! The bytes are relayed unchanged: a message leaves the tap exactly as it
//! came, in the same order, and its log line is written before its first
//! byte is forwarded (a request's line always comes before its reply's).
//! Several small messages that arrived together are forwarded in one write.
//!
//! An idle direction holds no buffer: it is dropped before waiting for the
//! socket to become readable with nothing buffered.
//!
//! A TLS side ([`Reader::Tls`], [`Writer::Tls`]) is read and written
//! through rustls: the kernel only sees ciphertext, so nothing is spliced
//! on a connection with a TLS side, and every byte is `copied` (the
//! plaintext, counted as for TCP). Between messages, a TLS reader polls
//! into a buffer on the stack, so an idle TLS direction holds no buffer of
//! the relay's either (rustls keeps its own).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use framewire::transport::read::{Event, FrameReader, Need};
use framewire::transport::{Socket, TransportError};
use framewire::{DecodeError, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::{tcp, TcpStream};

#[cfg(target_os = "linux")]
use super::splice::Pipe;

/// The most a read asks for at once (and so the most of a message's
/// payload the tap holds when it copies).
pub(super) const MAX_READ: usize = 256 << 10;

/// The least room a read is given.
const MIN_READ: usize = 16 << 10;

/// What is left of a message (past the bytes already read) is spliced when
/// it is at least this long; less is copied.
pub(super) const SPLICE_MIN: u64 = 64 << 10;

/// The limits messages are checked against: what a real Dask peer sends
/// (one copy, shared by every connection's readers).
static LIMITS: LazyLock<Arc<Limits>> = LazyLock::new(|| Arc::new(Limits::dask_compat()));

/// The side a direction reads from.
pub(super) enum Reader<'a> {
    /// Plain TCP: read when readable, spliced from (Linux).
    Tcp(tcp::ReadHalf<'a>),
    /// TLS: the plaintext, through rustls.
    Tls(tokio::io::ReadHalf<&'a mut Socket>),
}

/// The side a direction writes to.
pub(super) enum Writer<'a> {
    /// Plain TCP: written when writable, spliced to (Linux).
    Tcp(tcp::WriteHalf<'a>),
    /// TLS: the plaintext, through rustls (flushed after each write).
    Tls(tokio::io::WriteHalf<&'a mut Socket>),
}

/// A connection's two halves: for TCP, the stream's own (whose socket the
/// relay polls and splices); for TLS, `tokio::io::split`'s.
pub(super) fn halves(socket: &mut Socket) -> (Reader<'_>, Writer<'_>) {
    match socket {
        Socket::Tcp(s) => {
            let (r, w) = s.split();
            (Reader::Tcp(r), Writer::Tcp(w))
        }
        tls => {
            let (r, w) = tokio::io::split(tls);
            (Reader::Tls(r), Writer::Tls(w))
        }
    }
}

impl Reader<'_> {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Reader::Tcp(r) => Some(r.as_ref()),
            Reader::Tls(_) => None,
        }
    }
}

impl Writer<'_> {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Writer::Tcp(w) => Some(w.as_ref()),
            Writer::Tls(_) => None,
        }
    }
}

impl AsyncRead for Reader<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Reader::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Writer<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Writer::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Writer::Tcp(w) => w.is_write_vectored(),
            Writer::Tls(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_flush(cx),
            Writer::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// Bytes of a message relayed before its connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cut {
    /// Bytes of it the tap received (and forwarded, once it was logged).
    pub(super) received: u64,
    /// Its size, once its prelude was in.
    pub(super) total: Option<u64>,
}

/// How a direction ended.
#[derive(Debug)]
pub(super) enum End {
    /// The side it reads from closed; `cut`: in the middle of a message.
    Eof(Option<Cut>),
    /// Reading failed: `reset` (the peer went away abruptly) or another
    /// socket error, or bytes that are not a Dask message.
    Read { error: ReadError, cut: Option<Cut> },
    /// Writing to the other side failed.
    Write { error: io::Error, cut: Option<Cut> },
}

#[derive(Debug)]
pub(super) enum ReadError {
    Io(io::Error),
    Invalid(DecodeError),
    /// From the store-and-forward relay of verified connections.
    Transport(framewire::TransportError),
}

impl ReadError {
    /// A socket error; on a TLS side, rustls' reason in the library's words
    /// (`TLS: the peer refused our certificate (alert UnknownCA)`).
    pub(super) fn from_io(e: io::Error) -> ReadError {
        match framewire::TransportError::from(e) {
            framewire::TransportError::Io(e) => ReadError::Io(e),
            tls => ReadError::Transport(tls),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Invalid(e) => write!(f, "invalid message from the peer: {e}"),
            ReadError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// Counters of one direction.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    /// Messages logged (frame 0 in).
    pub(super) messages: u64,
    /// Bytes forwarded from the tap's memory.
    pub(super) copied: u64,
    /// Bytes forwarded with `splice(2)`.
    pub(super) spliced: u64,
}

/// What a direction holds, and where its stream stands: the bytes read and
/// not yet handed back by its reader, and the bytes of logged messages
/// still to forward (split off the first, without a copy).
struct Held {
    buf: BytesMut,
    ready: BytesMut,
    /// The prelude and frame 0 of the next message, or how much of the
    /// current one is still to come.
    frames: FrameReader,
}

impl Held {
    fn new() -> Held {
        Held {
            buf: BytesMut::new(),
            ready: BytesMut::new(),
            frames: FrameReader::relay(Arc::clone(&LIMITS)),
        }
    }

    /// Makes forwardable every buffered byte whose message has been logged,
    /// logging each message whose prelude and frame 0 are in; returns what
    /// the reader needs next.
    fn parse(&mut self, log: &mut dyn FnMut(Logged<'_>)) -> Result<Need, ReadError> {
        loop {
            match self.frames.poll(&mut self.buf) {
                Ok(Event::Need(need)) => return Ok(need),
                Ok(Event::Head(head)) => log(Logged {
                    frame0: head.frame0(),
                    frames: head.frames(),
                    bytes: head.wire_len(),
                }),
                Ok(Event::Forward(bytes)) => self.ready.unsplit(bytes),
                Ok(Event::Message(_)) => unreachable!("a relay reader assembles no message"),
                Err(TransportError::Decode(e)) => return Err(ReadError::Invalid(e)),
                Err(e) => return Err(ReadError::Transport(e)),
            }
        }
    }

    /// The message being received, if one has begun.
    fn cut(&self) -> Option<Cut> {
        self.frames.progress(self.buf.len()).map(|p| Cut {
            received: p.received,
            total: p.total,
        })
    }
}

/// What the relay tells its owner about each message, when its line is due.
pub(super) struct Logged<'a> {
    /// The message's frame 0.
    pub(super) frame0: &'a [u8],
    pub(super) frames: u64,
    pub(super) bytes: u64,
}

/// One direction's state: what is buffered and where the current message
/// stands (its reader's). All of it survives a cancelled future (nothing
/// is lost in a `select!`), though the tap never resumes one.
pub(super) struct Relay<'a> {
    pub(super) from: Reader<'a>,
    pub(super) to: Writer<'a>,
    held: Held,
    /// Whether large remainders are spliced (never with a TLS side).
    splice: bool,
    /// Never read past the current message (the first message of a
    /// connection whose handshakes decide how the rest is relayed).
    pub(super) exact: bool,
    #[cfg(target_os = "linux")]
    pipe: Option<Pipe>,
    pub(super) counts: Counts,
}

impl<'a> Relay<'a> {
    pub(super) fn new(from: Reader<'a>, to: Writer<'a>, splice: bool) -> Relay<'a> {
        let splice = splice && from.tcp().is_some() && to.tcp().is_some();
        Relay {
            from,
            to,
            held: Held::new(),
            splice: splice && cfg!(target_os = "linux"),
            exact: false,
            #[cfg(target_os = "linux")]
            pipe: None,
            counts: Counts::default(),
        }
    }

    /// The message being received, if one has begun.
    pub(super) fn cut(&self) -> Option<Cut> {
        self.held.cut()
    }

    /// Relays messages until one side ends, or (with `until_one`) until the
    /// first message has been forwarded whole (`None`). `log` is called
    /// once per message, when its frame 0 is in and before any byte of it
    /// is forwarded.
    pub(super) async fn run(
        &mut self,
        until_one: bool,
        log: &mut (dyn FnMut(Logged<'_>) + Send),
    ) -> Option<End> {
        loop {
            // Bytes that are not a Dask message end the connection, once
            // the messages before them are forwarded.
            let parsed = self.held.parse(&mut |m| {
                self.counts.messages += 1;
                log(m)
            });
            if !self.held.ready.is_empty() {
                if let Err(error) = self.write_ready().await {
                    let cut = self.cut();
                    return Some(End::Write { error, cut });
                }
            }
            let need = match parsed {
                Ok(need) => need,
                Err(error) => {
                    let cut = self.cut();
                    return Some(End::Read { error, cut });
                }
            };
            if until_one && self.counts.messages == 1 && matches!(need, Need::Prelude { .. }) {
                return None;
            }
            #[cfg(target_os = "linux")]
            if let Need::Body { more } = need {
                if self.splice && more >= SPLICE_MIN {
                    match self.splice_some(more).await {
                        Ok(()) => continue,
                        Err(end) => return Some(end),
                    }
                }
            }
            match self.read_some(&need).await {
                Ok(0) => return Some(End::Eof(self.cut())),
                Ok(_) => {}
                Err(e) => {
                    let cut = self.cut();
                    return Some(End::Read {
                        error: ReadError::from_io(e),
                        cut,
                    });
                }
            }
        }
    }

    /// Writes the forwardable bytes, then lets go of their buffer (an idle
    /// direction holds none).
    async fn write_ready(&mut self) -> io::Result<()> {
        let Some(to) = self.to.tcp() else {
            while !self.held.ready.is_empty() {
                match self.to.write(&self.held.ready).await? {
                    0 => return Err(io::ErrorKind::WriteZero.into()),
                    n => {
                        self.held.ready.advance(n);
                        self.counts.copied += n as u64;
                    }
                }
            }
            self.held.ready = BytesMut::new();
            // rustls may hold records the socket did not take yet.
            return self.to.flush().await;
        };
        while !self.held.ready.is_empty() {
            match to.try_write(&self.held.ready) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.held.ready.advance(n);
                    self.counts.copied += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
                Err(e) => return Err(e),
            }
        }
        self.held.ready = BytesMut::new();
        Ok(())
    }

    /// Reads what the socket has (0 at its end): at least what the reader
    /// needs if it is here, at most [`MAX_READ`] (and, `exact`, never past
    /// the current message).
    async fn read_some(&mut self, need: &Need) -> io::Result<usize> {
        let want = usize::try_from(need.more()).unwrap_or(usize::MAX);
        // Never more than MAX_READ at once: a declared size reserves
        // nothing until its bytes arrive.
        let room = if self.exact {
            want.min(MAX_READ)
        } else {
            want.clamp(MIN_READ, MAX_READ)
        };
        let from = match &mut self.from {
            Reader::Tcp(r) => &*r,
            Reader::Tls(r) => {
                if self.held.buf.is_empty() && !matches!(need, Need::Body { .. }) {
                    // Between messages: hold no buffer while waiting.
                    self.held.buf = BytesMut::new();
                    let buf = &mut self.held.buf;
                    return std::future::poll_fn(|cx| poll_probe(r, cx, buf, room)).await;
                }
                if self.held.buf.capacity() - self.held.buf.len() < room.min(MIN_READ) {
                    self.held.buf.reserve(room);
                }
                return r.read_buf(&mut (&mut self.held.buf).limit(room)).await;
            }
        }
        .as_ref();
        loop {
            if self.held.buf.capacity() - self.held.buf.len() < room.min(MIN_READ) {
                self.held.buf.reserve(room);
            }
            let mut limited = (&mut self.held.buf).limit(room);
            match from.try_read_buf(&mut limited) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.held.buf.is_empty() {
                        // Idle: hold no buffer while waiting.
                        self.held.buf = BytesMut::new();
                    }
                    from.readable().await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Splices the next piece of the current message (at most a pipe's
    /// capacity, and never past its `more` bytes) from `from` to `to`.
    #[cfg(target_os = "linux")]
    async fn splice_some(&mut self, more: u64) -> Result<(), End> {
        let pipe = match self.pipe.take() {
            Some(p) => p,
            None => match Pipe::take() {
                Ok(p) => p,
                Err(_) => {
                    // No pipe (out of file descriptors): copy instead.
                    self.splice = false;
                    return Ok(());
                }
            },
        };
        let (Some(from), Some(to)) = (self.from.tcp(), self.to.tcp()) else {
            // A TLS side: never spliced (Relay::new).
            self.splice = false;
            pipe.give_back();
            return Ok(());
        };
        let want = usize::try_from(more).unwrap_or(usize::MAX);
        let got = loop {
            match from.try_io(Interest::READABLE, || pipe.fill(from, want)) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = from.readable().await {
                        self.pipe = Some(pipe);
                        return Err(self.read_end(e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    // Not a socket splice works on: copy instead.
                    self.splice = false;
                    pipe.give_back();
                    return Ok(());
                }
                Err(e) => {
                    self.pipe = Some(pipe);
                    return Err(self.read_end(e));
                }
            }
        };
        if got == 0 {
            pipe.give_back();
            return Err(End::Eof(self.cut()));
        }
        let mut in_pipe = got;
        while in_pipe > 0 {
            match to.try_io(Interest::WRITABLE, || pipe.drain(to, in_pipe)) {
                Ok(0) => {
                    // The bytes stay in the pipe: it is not given back.
                    return Err(End::Write {
                        error: io::ErrorKind::WriteZero.into(),
                        cut: self.cut(),
                    });
                }
                Ok(n) => {
                    in_pipe -= n;
                    self.counts.spliced += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(error) = to.writable().await {
                        return Err(End::Write {
                            error,
                            cut: self.cut(),
                        });
                    }
                }
                Err(error) => {
                    return Err(End::Write {
                        error,
                        cut: self.cut(),
                    })
                }
            }
        }
        self.held.frames.passed(got);
        if got as u64 == more {
            pipe.give_back();
        } else {
            self.pipe = Some(pipe);
        }
        Ok(())
    }

    #[cfg(target_os = "linux")]
    fn read_end(&self, e: io::Error) -> End {
        End::Read {
            error: ReadError::Io(e),
            cut: self.cut(),
        }
    }
}

/// Reads what a TLS reader has into `buf` (0 at its end), through a buffer
/// on the stack: while rustls has no plaintext, nothing is held but its own.
fn poll_probe(
    r: &mut tokio::io::ReadHalf<&mut Socket>,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    room: usize,
) -> Poll<io::Result<usize>> {
    let mut probe = [0u8; MIN_READ];
    let mut read = ReadBuf::new(&mut probe[..room.min(MIN_READ)]);
    ready!(Pin::new(r).poll_read(cx, &mut read))?;
    if !read.filled().is_empty() {
        buf.reserve(room.max(read.filled().len()));
        buf.extend_from_slice(read.filled());
    }
    Poll::Ready(Ok(read.filled().len()))
}

#[cfg(test)]
mod tests {
    //! The relay's framing without sockets: real captures fed one byte at
    //! a time log the messages `Envelope::decode` finds in them (a line
    //! each, before any of its bytes is forwarded) and forward every byte;
    //! bytes that are not a message end it with the error `Envelope::decode`
    //! gives for them.

    use std::path::Path;

    use bytes::{BufMut, Bytes, BytesMut};
    use framewire::{DecodeError, Envelope, EnvelopeError, Limits};

    use super::{Held, ReadError};

    /// A message's log line: frame 0, frames, bytes.
    type Line = (Vec<u8>, u64, u64);

    /// Lines logged (frame 0, frames, bytes) and bytes forwarded, from
    /// `input` fed one byte at a time; the error that ended it, if any.
    fn relay(input: &[u8]) -> (Vec<Line>, Vec<u8>, Option<ReadError>) {
        let mut held = Held::new();
        let (mut lines, mut forwarded) = (Vec::new(), Vec::new());
        for &b in input {
            held.buf.put_u8(b);
            let parsed = held.parse(&mut |m| lines.push((m.frame0.to_vec(), m.frames, m.bytes)));
            // A message's bytes are forwarded only once its line is logged.
            assert!(forwarded.len() + held.ready.len() <= lines.iter().map(|l| l.2 as usize).sum());
            forwarded.extend_from_slice(&held.ready);
            held.ready = BytesMut::new();
            if let Err(e) = parsed {
                return (lines, forwarded, Some(e));
            }
        }
        (lines, forwarded, None)
    }

    /// The messages of `input`, and the error after them if any.
    fn decode(input: &[u8]) -> (Vec<Line>, Option<EnvelopeError>) {
        let mut rest = Bytes::copy_from_slice(input);
        let mut lines = Vec::new();
        while !rest.is_empty() {
            match Envelope::decode(&rest, &Limits::dask_compat()) {
                Ok((env, used)) => {
                    lines.push((
                        env.frames()[0].to_vec(),
                        env.frames().len() as u64,
                        env.wire_len(),
                    ));
                    rest = rest.slice(used..);
                }
                Err(e) => return (lines, Some(e)),
            }
        }
        (lines, None)
    }

    fn captures() -> Vec<(String, Vec<u8>)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&root).unwrap() {
            let wire = entry.unwrap().path().join("wire.bin");
            if wire.exists() {
                out.push((wire.display().to_string(), std::fs::read(&wire).unwrap()));
            }
        }
        assert!(out.len() > 30, "{} captures", out.len());
        out
    }

    #[test]
    fn captures_one_byte_at_a_time_log_each_message_and_forward_every_byte() {
        let mut all = Vec::new();
        for (name, wire) in captures() {
            let (want, end) = decode(&wire);
            assert!(end.is_none(), "{name}");
            let (lines, forwarded, error) = relay(&wire);
            assert!(error.is_none(), "{name}: {error:?}");
            assert!(lines == want, "{name}");
            assert!(forwarded == wire, "{name}");
            all.extend_from_slice(&wire);
        }
        let (want, _) = decode(&all);
        let (lines, forwarded, error) = relay(&all);
        assert!(error.is_none() && lines == want && forwarded == all);
    }

    #[test]
    fn bytes_that_are_not_a_message_end_it_after_the_messages_before_them() {
        let (_, wire) = &captures()[0];
        let le = |n: u64| n.to_le_bytes();
        for garbage in [
            [le(16), le(0)].concat(),         // no frames
            [le(100), le(1), le(3)].concat(), // N off every frame boundary
            [le(24), le(1 << 60)].concat(),   // 2^60 frames
        ] {
            let input = [&wire[..], &garbage[..]].concat();
            let (want, Some(want_err)) = decode(&input) else {
                panic!("{garbage:?}")
            };
            let (lines, forwarded, error) = relay(&input);
            assert_eq!(lines, want);
            assert!(forwarded == wire[..]);
            match error {
                Some(ReadError::Invalid(DecodeError::Envelope(e))) => assert_eq!(e, want_err),
                other => panic!("{other:?}"),
            }
        }
    }
}
