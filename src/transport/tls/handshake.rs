//! The TLS handshake, rustls' (unbuffered API), over a TCP stream; then
//! rustls hands over the traffic secrets and keeps the key schedule
//! ([`KernelConnection`]) for our record layer.
//!
//! ```text
//! process_tls_records(received) ──EncodeTlsData──▶ queue the handshake record
//!        ▲                       ──TransmitTlsData─▶ write what is queued
//!        │                       ──BlockedHandshake / WriteTraffic while still
//!        │                         handshaking (a TLS 1.3 server waiting for
//!        └── read more ◀───────────the client's Finished)
//!                                ──ReadTraffic───▶ application data that came with the
//!                                                  last flight: kept, handed out first
//!                                ──WriteTraffic, done──▶ dangerous_into_kernel_connection:
//!                                   (secrets and sequence numbers, KernelConnection);
//!                                   what was received and not processed (never a
//!                                   whole record: rustls processes those) goes to
//!                                   the record layer's read-ahead
//! ```
//!
//! A failed handshake sends the alert rustls queued (without waiting) and
//! is one line, as before.

use std::sync::Arc;

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::pki_types::ServerName;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::{ClientConfig, ExtractedSecrets, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::stream::{Kernel, Leftover, TlsStream};
use crate::transport::error::{TlsError, TransportError};

/// The most a handshake may leave unprocessed at once (a flight of
/// certificates fits many times over).
const MAX_HANDSHAKE_BUFFER: usize = 1 << 20;

/// An unbuffered rustls connection, client or server.
trait Unbuffered: Sized {
    type Data;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn handshaking(&self) -> bool;
    /// The traffic secrets and the key schedule, once the handshake is
    /// done.
    fn into_kernel(self) -> Result<(ExtractedSecrets, Kernel), rustls::Error>;
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
    fn handshaking(&self) -> bool {
        self.is_handshaking()
    }
    fn into_kernel(self) -> Result<(ExtractedSecrets, Kernel), rustls::Error> {
        let (secrets, kernel) = self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Client(kernel)))
    }
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
    fn handshaking(&self) -> bool {
        self.is_handshaking()
    }
    fn into_kernel(self) -> Result<(ExtractedSecrets, Kernel), rustls::Error> {
        let (secrets, kernel) = self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Server(kernel)))
    }
}

fn failed(e: &rustls::Error) -> TransportError {
    TransportError::Tls(TlsError::handshake(e))
}

fn closed(e: Option<std::io::Error>) -> TransportError {
    let how = e.map_or_else(|| "it sent nothing more".to_owned(), |e| e.to_string());
    TransportError::Tls(TlsError::new(format!(
        "TLS handshake failed: the peer closed the connection ({how}); is it a tls:// endpoint, \
         with our CA?"
    )))
}

/// Runs the handshake of `conn` over `tcp` to its end.
async fn drive<C: Unbuffered>(
    tcp: &mut TcpStream,
    conn: &mut C,
) -> Result<Leftover, TransportError> {
    let mut incoming = vec![0u8; 16 << 10];
    let mut used = 0;
    let mut outgoing: Vec<u8> = Vec::new();
    let mut plaintext = Vec::new();
    enum Next {
        Again,
        Transmit,
        Read,
        Done,
        Fail(TransportError),
    }
    loop {
        let UnbufferedStatus { discard, state } = conn.process(&mut incoming[..used]);
        let next = match state {
            Err(e) => Next::Fail(failed(&e)),
            Ok(ConnectionState::EncodeTlsData(mut data)) => {
                let at = outgoing.len();
                outgoing.resize(at + 4096, 0);
                let n = match data.encode(&mut outgoing[at..]) {
                    Ok(n) => n,
                    Err(EncodeError::InsufficientSize(e)) => {
                        outgoing.resize(at + e.required_size, 0);
                        data.encode(&mut outgoing[at..]).map_err(|e| {
                            TransportError::Tls(TlsError::new(format!("TLS handshake: {e}")))
                        })?
                    }
                    Err(e) => {
                        return Err(TransportError::Tls(TlsError::new(format!(
                            "TLS handshake: {e}"
                        ))))
                    }
                };
                outgoing.truncate(at + n);
                Next::Again
            }
            Ok(ConnectionState::TransmitTlsData(data)) => {
                tcp.write_all(&outgoing)
                    .await
                    .map_err(|e| closed(Some(e)))?;
                outgoing.clear();
                data.done();
                Next::Transmit
            }
            Ok(ConnectionState::ReadTraffic(mut data)) => {
                while let Some(record) = data.next_record() {
                    let record = record.map_err(|e| failed(&e))?;
                    plaintext.extend_from_slice(record.payload);
                }
                Next::Again
            }
            Ok(ConnectionState::BlockedHandshake) => Next::Read,
            Ok(ConnectionState::WriteTraffic(_)) => match conn.handshaking() {
                true => Next::Read,
                false => Next::Done,
            },
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => return Err(closed(None)),
            Ok(other) => {
                // Early data (never enabled) or a state of a later rustls.
                return Err(TransportError::Tls(TlsError::new(format!(
                    "TLS handshake: unexpected state {other:?}"
                ))));
            }
        };
        if discard > 0 {
            incoming.copy_within(discard..used, 0);
            used -= discard;
        }
        match next {
            Next::Again | Next::Transmit => {}
            Next::Done => break,
            Next::Fail(e) => {
                send_alerts(tcp, conn, &mut incoming[..used], &mut outgoing);
                return Err(e);
            }
            Next::Read => {
                if used == incoming.len() {
                    if incoming.len() >= MAX_HANDSHAKE_BUFFER {
                        return Err(TransportError::Tls(TlsError::new(
                            "TLS handshake failed: more than 1 MiB of handshake unprocessed",
                        )));
                    }
                    incoming.resize(incoming.len() * 2, 0);
                }
                match tcp.read(&mut incoming[used..]).await {
                    Ok(0) => return Err(closed(None)),
                    Ok(n) => used += n,
                    Err(e) => return Err(closed(Some(e))),
                }
            }
        }
    }
    incoming.truncate(used);
    Ok(Leftover {
        ciphertext: incoming,
        plaintext,
    })
}

/// After a failed handshake: the alert rustls queued, written if the
/// socket takes it now (never waiting). (rustls' deframer wants the same
/// received bytes back, `incoming`; it is asked once: a second call would
/// deframe the bad bytes again.)
fn send_alerts<C: Unbuffered>(
    tcp: &TcpStream,
    conn: &mut C,
    incoming: &mut [u8],
    outgoing: &mut Vec<u8>,
) {
    outgoing.clear();
    let UnbufferedStatus { state, .. } = conn.process(incoming);
    if let Ok(ConnectionState::EncodeTlsData(mut data)) = state {
        outgoing.resize(512, 0);
        if let Ok(n) = data.encode(outgoing) {
            let _ = tcp.try_write(&outgoing[..n]);
        }
    }
}

/// The handshake as the side that connects, then the record layer.
pub(crate) async fn connect(
    tcp: TcpStream,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> Result<TlsStream, TransportError> {
    establish(tcp, move || UnbufferedClientConnection::new(config, name)).await
}

/// The handshake as the side that accepted, then the record layer.
pub(crate) async fn accept(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
) -> Result<TlsStream, TransportError> {
    establish(tcp, move || UnbufferedServerConnection::new(config)).await
}

/// The handshake over `tcp` of the connection `make` gives, then the
/// record layer over its secrets. The connection (a few KiB) is made
/// inside this future, not passed into it: passed in, it would be held
/// twice in every caller's future, and a tap's task for each connection
/// is as large as its largest state (7.7 KiB a connection against 5.4,
/// `scripts/tap-memory`).
async fn establish<C: Unbuffered>(
    mut tcp: TcpStream,
    make: impl FnOnce() -> Result<C, rustls::Error>,
) -> Result<TlsStream, TransportError> {
    let mut conn = make().map_err(|e| failed(&e))?;
    let leftover = drive(&mut tcp, &mut conn).await?;
    let (secrets, kernel) = conn.into_kernel().map_err(|e| failed(&e))?;
    TlsStream::new(tcp, kernel, secrets, leftover).map_err(TransportError::Tls)
}
