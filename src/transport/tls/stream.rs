//! [`TlsStream`]: a TCP stream under our record layer, an
//! `AsyncRead + AsyncWrite` as the plain stream is.
//!
//! ```text
//! poll_read(buf) ─▶ plaintext waiting in the read-ahead? copy it (small)
//!                ─▶ a whole record in the read-ahead? open it there
//!                ─▶ room in buf for a whole record? read ciphertext into buf, open the
//!                   records there (the plaintext lands in the caller's buffer: no copy)
//!                ─▶ otherwise read into the read-ahead
//! poll_write_vectored(bufs) ─▶ what is left of the last records written first; then up
//!                   to WRITE_CHUNK of the slices sealed into records in one reused
//!                   buffer (one copy, the AEAD's in place), written in one call
//! poll_shutdown ─▶ close_notify, then the TCP write side shut
//! ```

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion, SupportedCipherSuite};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::read::{PostHandshake, RecordReader};
use super::record::{Cipher, ContentType, RecordKeys, Version, MAX_PLAINTEXT};
use crate::transport::error::TlsError;

/// What the handshake left for the record layer.
pub(super) struct Leftover {
    /// Ciphertext received and not processed: the start of a record.
    pub(super) ciphertext: Vec<u8>,
    /// Application data rustls decrypted with the handshake's last flight.
    pub(super) plaintext: Vec<u8>,
}

/// Plaintext sealed per write call at most: records written while still in
/// the CPU's cache, and one `write` for 16 records.
const WRITE_CHUNK: usize = 256 << 10;

/// Records sealed and not written past which answering a KeyUpdate fails.
const MAX_UNSENT: usize = WRITE_CHUNK + (1 << 20);

/// rustls' key schedule after the handshake.
pub(crate) enum Kernel {
    Client(KernelConnection<ClientConnectionData>),
    Server(KernelConnection<ServerConnectionData>),
}

impl Kernel {
    fn suite(&self) -> SupportedCipherSuite {
        match self {
            Kernel::Client(k) => k.negotiated_cipher_suite(),
            Kernel::Server(k) => k.negotiated_cipher_suite(),
        }
    }

    fn version(&self) -> ProtocolVersion {
        match self {
            Kernel::Client(k) => k.protocol_version(),
            Kernel::Server(k) => k.protocol_version(),
        }
    }
}

fn rustls_error(e: rustls::Error) -> TlsError {
    TlsError::session(&e)
}

/// Our record keys from rustls' secrets.
pub(crate) fn keys(
    version: Version,
    (seq, secrets): (u64, ConnectionTrafficSecrets),
) -> Result<RecordKeys, TlsError> {
    let (cipher, key, iv) = match &secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key, iv),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (Cipher::Chacha20Poly1305, key, iv)
        }
        _ => {
            return Err(TlsError::new(
                "TLS: a cipher our record layer does not have",
            ))
        }
    };
    RecordKeys::new(version, cipher, key.as_ref(), iv.as_ref(), seq)
}

/// The sending side, and what the reader asks of the key schedule.
struct Sender {
    kernel: Kernel,
    version: Version,
    keys: RecordKeys,
    /// Records under one key before a KeyUpdate (TLS 1.3) or the end of the
    /// connection (TLS 1.2): the AEAD's confidentiality limit, less margin.
    limit: u64,
    /// Sealed records not written yet: `out[written..]`.
    out: Vec<u8>,
    written: usize,
    /// A KeyUpdate to send before the next record (and whether it asks
    /// the peer for one).
    update: Option<bool>,
    sent_close: bool,
    /// KeyUpdates sent and received.
    updates: (u64, u64),
}

impl Sender {
    fn update_tx(&mut self, request_peer: bool) -> Result<(), TlsError> {
        if self.version != Version::Tls13 {
            return Err(TlsError::new(
                "TLS: the AEAD's confidentiality limit is reached and TLS 1.2 has no key update",
            ));
        }
        let message = [24, 0, 0, 1, u8::from(request_peer)];
        self.keys
            .seal(ContentType::Handshake, &[&message], &mut self.out)?;
        let secrets = match &mut self.kernel {
            Kernel::Client(k) => k.update_tx_secret(),
            Kernel::Server(k) => k.update_tx_secret(),
        }
        .map_err(rustls_error)?;
        self.keys = keys(self.version, secrets)?;
        self.updates.0 += 1;
        Ok(())
    }

    /// Before each record: a KeyUpdate owed or due.
    fn before_record(&mut self) -> Result<(), TlsError> {
        if let Some(request) = self.update.take() {
            self.update_tx(request)?;
        }
        if self.keys.seq() >= self.limit {
            self.update_tx(false)?;
        }
        Ok(())
    }

    fn seal(&mut self, typ: ContentType, pieces: &[&[u8]]) -> Result<(), TlsError> {
        self.before_record()?;
        self.keys.seal(typ, pieces, &mut self.out)
    }

    /// Writes what is sealed and not written.
    fn poll_out(&mut self, tcp: &mut TcpStream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.out.len() {
            let n = ready!(Pin::new(&mut *tcp).poll_write(cx, &self.out[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Writes what the socket takes now, without registering for more
    /// (from the reading side).
    fn try_out(&mut self, tcp: &TcpStream) {
        while self.written < self.out.len() {
            match tcp.try_write(&self.out[self.written..]) {
                Ok(n) if n > 0 => self.written += n,
                _ => return,
            }
        }
        self.out.clear();
        self.written = 0;
    }
}

impl PostHandshake for Sender {
    fn update_rx(&mut self) -> Result<RecordKeys, TlsError> {
        let secrets = match &mut self.kernel {
            Kernel::Client(k) => k.update_rx_secret(),
            Kernel::Server(k) => k.update_rx_secret(),
        }
        .map_err(rustls_error)?;
        self.updates.1 += 1;
        keys(self.version, secrets)
    }

    fn owe_key_update(&mut self) -> Result<(), TlsError> {
        // Answered at once (with update_not_requested), before any more
        // application data (RFC 8446 §4.6.3). A peer that asks for them
        // faster than it reads would make `out` grow without end.
        if self.out.len() - self.written > MAX_UNSENT {
            return Err(TlsError::new(
                "TLS: the peer asks for key updates faster than it reads them",
            ));
        }
        self.update_tx(false)
    }

    fn ticket(&mut self, payload: &[u8]) -> Result<(), TlsError> {
        match &mut self.kernel {
            Kernel::Client(k) => k.handle_new_session_ticket(payload).map_err(rustls_error),
            Kernel::Server(_) => Err(TlsError::new(
                "TLS: unexpected_message: a NewSessionTicket sent to the server",
            )),
        }
    }
}

/// A TLS connection after its handshake (rustls', with Dask's certificate
/// rules: [`TlsConfig`](super::TlsConfig)): our record layer over the TCP
/// stream, with `ring`'s AEAD. Large reads are decrypted in the caller's
/// buffer (no copy after decryption); writes are sealed in one reused
/// buffer per connection. Errors are `io::Error`s carrying a
/// [`TlsError`](crate::transport::TlsError) (a
/// [`TransportError::Tls`](crate::transport::TransportError::Tls) once
/// through a connection).
pub struct TlsStream {
    tcp: TcpStream,
    reader: RecordReader,
    sender: Sender,
    suite: SupportedCipherSuite,
    /// The first error: every later read or write fails with it.
    failed: Option<TlsError>,
    /// Application data that came with the handshake's last flight.
    early: Vec<u8>,
    copies: TlsCopies,
}

/// Where a [`TlsStream`]'s received plaintext went ([`TlsStream::copies`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsCopies {
    /// Plaintext decrypted where the caller's read put it (its buffer):
    /// never copied after decryption.
    pub in_place: u64,
    /// Plaintext decrypted in the stream's read-ahead and copied into the
    /// caller's buffer (small reads, and what was read ahead of a large one).
    pub copied: u64,
    /// Ciphertext of a record cut by a read, moved between the read-ahead
    /// and the caller's buffer (less than a record per read).
    pub ciphertext_moved: u64,
}

impl fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("tcp", &self.tcp)
            .field("suite", &self.suite.suite())
            .field("reader", &self.reader)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl TlsStream {
    pub(super) fn new(
        tcp: TcpStream,
        kernel: Kernel,
        secrets: ExtractedSecrets,
        leftover: Leftover,
    ) -> Result<TlsStream, TlsError> {
        let version = match kernel.version() {
            ProtocolVersion::TLSv1_3 => Version::Tls13,
            ProtocolVersion::TLSv1_2 => Version::Tls12,
            v => return Err(TlsError::new(format!("TLS: protocol {v:?} not supported"))),
        };
        let suite = kernel.suite();
        let limit = match suite {
            SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
            SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
        };
        let reader = RecordReader::new(keys(version, secrets.rx)?, &leftover.ciphertext)?;
        Ok(TlsStream {
            tcp,
            reader,
            sender: Sender {
                kernel,
                version,
                keys: keys(version, secrets.tx)?,
                limit: limit.saturating_sub(1 << 10),
                out: Vec::new(),
                written: 0,
                update: None,
                sent_close: false,
                updates: (0, 0),
            },
            suite,
            failed: None,
            early: leftover.plaintext,
            copies: TlsCopies::default(),
        })
    }

    /// The TCP stream underneath.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The cipher suite agreed, as rustls names it (`TLS13_AES_128_GCM_SHA256`).
    pub fn cipher_suite(&self) -> String {
        format!("{:?}", self.suite.suite())
    }

    /// Whether TLS 1.3 was agreed (else TLS 1.2).
    pub fn is_tls13(&self) -> bool {
        self.sender.version == Version::Tls13
    }

    /// Updates our sending keys (TLS 1.3 KeyUpdate, RFC 8446 §4.6.3) before
    /// the next record written, asking the peer to update its own when
    /// `request_peer`. Keys are also updated, without asking, before the
    /// cipher's confidentiality limit. An error with TLS 1.2.
    pub fn update_keys(&mut self, request_peer: bool) -> Result<(), crate::transport::TlsError> {
        if self.sender.version != Version::Tls13 {
            return Err(TlsError::new("TLS: key updates need TLS 1.3"));
        }
        self.sender.update = Some(request_peer || self.sender.update == Some(true));
        Ok(())
    }

    /// The KeyUpdates (TLS 1.3) sent and received so far: `(sent, received)`.
    pub fn key_updates(&self) -> (u64, u64) {
        self.sender.updates
    }

    /// Where the plaintext received so far went: decrypted in the caller's
    /// buffer, or copied there from the read-ahead.
    pub fn copies(&self) -> TlsCopies {
        self.copies
    }

    /// Test hook: the records sent under one key before a key update.
    #[cfg(test)]
    pub(crate) fn set_key_limit(&mut self, records: u64) {
        self.sender.limit = records;
    }

    fn fail(&mut self, e: TlsError) -> io::Error {
        self.failed.get_or_insert(e.clone());
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    fn poll_read_inner(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.early.is_empty() {
                let n = self.early.len().min(buf.remaining());
                buf.put_slice(&self.early[..n]);
                self.early.drain(..n);
                self.copies.copied += n as u64;
                return Poll::Ready(Ok(()));
            }
            let plain = self.reader.plaintext();
            if !plain.is_empty() {
                let n = plain.len().min(buf.remaining());
                buf.put_slice(&plain[..n]);
                self.reader.consume(n);
                self.copies.copied += n as u64;
                return Poll::Ready(Ok(()));
            }
            if self.reader.is_closed() || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let opened = self.reader.open_buffered(&mut self.sender);
            self.sender.try_out(&self.tcp);
            if opened.map_err(|e| self.fail(e))? {
                continue;
            }
            if let Some(want) = self.reader.direct_read(buf.remaining()) {
                let have = self.reader.pending();
                let dst = buf.initialize_unfilled_to(want);
                let mut rb = ReadBuf::new(&mut dst[have..want]);
                ready!(Pin::new(&mut self.tcp).poll_read(cx, &mut rb))?;
                let read = rb.filled().len();
                if read == 0 {
                    self.reader.eof().map_err(|e| self.fail(e))?;
                    continue;
                }
                let opened = self.reader.open_direct(dst, read, &mut self.sender);
                self.sender.try_out(&self.tcp);
                let n = opened.map_err(|e| self.fail(e))?;
                self.copies.in_place += n as u64;
                self.copies.ciphertext_moved += (have + self.reader.pending()) as u64;
                if n > 0 {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let mut rb = ReadBuf::new(self.reader.room());
            ready!(Pin::new(&mut self.tcp).poll_read(cx, &mut rb))?;
            let read = rb.filled().len();
            match read {
                0 => self.reader.eof().map_err(|e| self.fail(e))?,
                n => self.reader.filled(n),
            }
        }
    }

    fn poll_write_inner(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.sender.sent_close {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "TLS: write after close_notify",
            )));
        }
        ready!(self.sender.poll_out(&mut self.tcp, cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum::<usize>().min(WRITE_CHUNK);
        let (mut taken, mut slice, mut offset) = (0, 0, 0);
        while taken < total {
            // One record: the next pieces of the slices, up to 2^14 bytes.
            let mut pieces: smallvec::SmallVec<[&[u8]; 8]> = smallvec::SmallVec::new();
            let mut len = 0;
            while len < MAX_PLAINTEXT.min(total - taken) && slice < bufs.len() {
                let s = &bufs[slice][offset..];
                let n = s.len().min(MAX_PLAINTEXT - len).min(total - taken - len);
                if n > 0 {
                    pieces.push(&s[..n]);
                }
                len += n;
                offset += n;
                if offset == bufs[slice].len() {
                    (slice, offset) = (slice + 1, 0);
                }
            }
            self.sender
                .seal(ContentType::ApplicationData, &pieces)
                .map_err(|e| self.fail(e))?;
            taken += len;
        }
        // Start writing now; what the socket does not take is written
        // by the next call (or flush).
        if let Poll::Ready(Err(e)) = self.sender.poll_out(&mut self.tcp, cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(taken))
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = &this.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e.clone())));
        }
        this.poll_read_inner(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = &this.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e.clone())));
        }
        this.poll_write_inner(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(request) = this.sender.update.take() {
            this.sender
                .update_tx(request)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        ready!(this.sender.poll_out(&mut this.tcp, cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.sender.sent_close {
            this.sender.sent_close = true;
            // close_notify: a warning alert, description 0.
            let sealed = this.sender.seal(ContentType::Alert, &[&[1, 0]]);
            sealed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        ready!(this.sender.poll_out(&mut this.tcp, cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
