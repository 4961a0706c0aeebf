//! One direction of a relayed connection: cut-through, message by message.
//!
//! ```text
//! from ──read──▶ buf: prelude (checked against Limits) + frame 0 ─ log the ops ─┐
//!                                                                               ▼
//!                      the message's bytes as they arrive ──write──▶ to   (copied)
//!                      or, past the buffered bytes, ≥ SPLICE_MIN left:
//!                      from ──splice──▶ pipe ──splice──▶ to               (spliced)
//! ```
//!
//! The tap needs the prelude (to know where the message ends) and frame 0
//! (to name its ops in the log); once both are in, the message's line is
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
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use framewire::envelope::{parse_prelude, PreludeStatus};
use framewire::transport::Socket;
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

/// The limits messages are checked against: what a real Dask peer sends.
const LIMITS: Limits = Limits::dask_compat();

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

/// A message whose prelude has been read.
#[derive(Clone, Copy, Debug)]
struct Head {
    /// Bytes of the whole message on the wire.
    wire_len: u64,
    frames: u64,
    /// Bytes of its prelude, `N` field included.
    header: usize,
    /// Bytes from its start to the end of frame 0 (prelude + frame 0).
    through_frame0: usize,
}

/// What the relay tells its owner about each message, when its line is due.
pub(super) struct Logged<'a> {
    /// The message's frame 0.
    pub(super) frame0: &'a [u8],
    pub(super) frames: u64,
    pub(super) bytes: u64,
}

/// One direction's state: what is buffered and where the current message
/// stands. All of it survives a cancelled future (nothing is lost in a
/// `select!`), though the tap never resumes one.
pub(super) struct Relay<'a> {
    pub(super) from: Reader<'a>,
    pub(super) to: Writer<'a>,
    buf: BytesMut,
    /// Bytes at the start of `buf` that may be forwarded (their messages
    /// have been logged).
    ready: usize,
    /// Bytes of the current (logged) message that have not reached `buf`
    /// yet; 0 between messages.
    left: u64,
    /// The current message's size (for [`Cut`]).
    total: u64,
    /// The next message's prelude, once parsed.
    head: Option<Head>,
    /// Bytes (from the start of the next message) that the next step needs.
    need: usize,
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
            buf: BytesMut::new(),
            ready: 0,
            left: 0,
            total: 0,
            head: None,
            need: 16,
            splice: splice && cfg!(target_os = "linux"),
            exact: false,
            #[cfg(target_os = "linux")]
            pipe: None,
            counts: Counts::default(),
        }
    }

    /// The message being received, if one has begun.
    pub(super) fn cut(&self) -> Option<Cut> {
        if self.left > 0 {
            return Some(Cut {
                received: self.total - self.left,
                total: Some(self.total),
            });
        }
        let pending = self.buf.len() - self.ready;
        (pending > 0).then(|| Cut {
            received: pending as u64,
            total: self.head.map(|h| h.wire_len),
        })
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
            let invalid = self.parse(log).err();
            if self.ready > 0 {
                if let Err(error) = self.write_ready().await {
                    let cut = self.cut();
                    return Some(End::Write { error, cut });
                }
            }
            if let Some(e) = invalid {
                let cut = self.cut();
                return Some(End::Read {
                    error: ReadError::Invalid(e),
                    cut,
                });
            }
            if until_one && self.counts.messages == 1 && self.left == 0 {
                return None;
            }
            #[cfg(target_os = "linux")]
            if self.splice && self.left >= SPLICE_MIN && self.buf.is_empty() {
                match self.splice_some().await {
                    Ok(()) => continue,
                    Err(end) => return Some(end),
                }
            }
            match self.read_some().await {
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

    /// Makes forwardable every buffered byte whose message has been logged,
    /// logging each message whose prelude and frame 0 are in.
    fn parse(&mut self, log: &mut (dyn FnMut(Logged<'_>) + Send)) -> Result<(), DecodeError> {
        loop {
            if self.left > 0 {
                let avail = (self.buf.len() - self.ready) as u64;
                let take = avail.min(self.left);
                self.ready += take as usize;
                self.left -= take;
                if self.left > 0 {
                    return Ok(());
                }
                continue;
            }
            let rest = &self.buf[self.ready..];
            if rest.is_empty() {
                self.need = 16;
                return Ok(());
            }
            let head = match self.head {
                Some(h) => h,
                None => match parse_prelude(rest, &LIMITS)? {
                    PreludeStatus::Need(n) => {
                        self.need = n;
                        return Ok(());
                    }
                    PreludeStatus::Complete(p) => {
                        // parse_prelude checked that the whole message is
                        // addressable: these fit in usize.
                        let h = Head {
                            wire_len: p.wire_len(),
                            frames: p.lengths().len() as u64,
                            header: p.header_len() as usize,
                            through_frame0: (p.header_len() + p.lengths()[0]) as usize,
                        };
                        self.head = Some(h);
                        h
                    }
                },
            };
            if rest.len() < head.through_frame0 {
                self.need = head.through_frame0;
                return Ok(());
            }
            log(Logged {
                frame0: &rest[head.header..head.through_frame0],
                frames: head.frames,
                bytes: head.wire_len,
            });
            self.counts.messages += 1;
            self.head = None;
            self.left = head.wire_len;
            self.total = head.wire_len;
        }
    }

    /// Writes the forwardable bytes.
    async fn write_ready(&mut self) -> io::Result<()> {
        let Some(to) = self.to.tcp() else {
            while self.ready > 0 {
                match self.to.write(&self.buf[..self.ready]).await? {
                    0 => return Err(io::ErrorKind::WriteZero.into()),
                    n => {
                        self.buf.advance(n);
                        self.ready -= n;
                        self.counts.copied += n as u64;
                    }
                }
            }
            // rustls may hold records the socket did not take yet.
            return self.to.flush().await;
        };
        while self.ready > 0 {
            match to.try_write(&self.buf[..self.ready]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.buf.advance(n);
                    self.ready -= n;
                    self.counts.copied += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads what the socket has (0 at its end): at least what the next
    /// step needs if it is here, at most [`MAX_READ`] (and, `exact`, never
    /// past the current message).
    async fn read_some(&mut self) -> io::Result<usize> {
        let pending = self.buf.len() - self.ready;
        let want = if self.left > 0 {
            usize::try_from(self.left).unwrap_or(usize::MAX)
        } else {
            self.need.saturating_sub(pending).max(1)
        };
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
                if self.buf.is_empty() && self.left == 0 {
                    // Between messages: hold no buffer while waiting.
                    self.buf = BytesMut::new();
                    let buf = &mut self.buf;
                    return std::future::poll_fn(|cx| poll_probe(r, cx, buf, room)).await;
                }
                if self.buf.capacity() - self.buf.len() < room.min(MIN_READ) {
                    self.buf.reserve(room);
                }
                return r.read_buf(&mut (&mut self.buf).limit(room)).await;
            }
        }
        .as_ref();
        loop {
            if self.buf.capacity() - self.buf.len() < room.min(MIN_READ) {
                self.buf.reserve(room);
            }
            let mut limited = (&mut self.buf).limit(room);
            match from.try_read_buf(&mut limited) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.buf.is_empty() {
                        // Idle: hold no buffer while waiting.
                        self.buf = BytesMut::new();
                    }
                    from.readable().await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Splices the next piece of the current message (at most a pipe's
    /// capacity) from `from` to `to`.
    #[cfg(target_os = "linux")]
    async fn splice_some(&mut self) -> Result<(), End> {
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
        let want = usize::try_from(self.left).unwrap_or(usize::MAX);
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
        self.left -= got as u64;
        if self.left == 0 {
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
