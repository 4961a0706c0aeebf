//! `framewire tap`: a transparent relay for Dask traffic that logs every
//! message.
//!
//! ```text
//! client ──▶ accept ── conn N ──▶ connect ──▶ upstream
//!        c->u: prelude + frame 0 ─ log ─ the message's bytes, forwarded as they arrive
//!        u->c: prelude + frame 0 ─ log ─ the message's bytes, forwarded as they arrive
//! ```
//!
//! Nothing is deserialized and nothing is re-encoded: the tap does no
//! handshake of its own (the peers' handshake messages are relayed like any
//! other), and every byte leaves as it came. The tap reads a message's
//! prelude (checked against [`Limits::dask_compat`]) and its frame 0, whose
//! ops it names in the log (a batched stream sends a list of op maps), then
//! forwards the message cut-through: its bytes leave as they arrive, the
//! large ones (on Linux) moved with `splice(2)` without entering the tap's
//! memory ([`relay`]).
//!
//! Log lines (one per message, and one per connection event):
//!
//! ```text
//! 2026-11-29T19:10:50.123Z conn=1 open client=127.0.0.1:50412 upstream=127.0.0.1:8786
//! 2026-11-29T19:10:50.124Z conn=1 c->u op=(handshake) frames=1 bytes=66
//! 2026-11-29T19:10:50.125Z conn=1 c->u op=identity frames=1 bytes=48
//! 2026-11-29T19:10:50.126Z conn=1 u->c op=- frames=1 bytes=311
//! 2026-11-29T19:10:50.130Z conn=2 u->c op=task-finished*3,key-in-memory frames=7 bytes=1234
//! 2026-11-29T19:10:51.000Z conn=1 closed by=client reason=eof c->u=2 u->c=2 copied=759 spliced=0
//! 2026-11-29T19:10:51.200Z conn=2 closed by=upstream reason=truncated c->u=9 u->c=12 copied=80211 spliced=1048576 cut=1048741/268435757
//! 2026-11-29T19:10:51.300Z conn=3 error c->u reading from client: invalid message from the peer: ...
//! 2026-11-29T19:10:51.300Z conn=3 closed c->u=0 u->c=0 copied=0 spliced=0 cut=16/?
//! 2026-12-02T20:41:07.512Z conn=4 closed by=upstream reason=peer-timeout c->u=3 u->c=3 copied=901 spliced=0
//! ```
//!
//! `op=-`: frame 0 names no op (a reply); `op=?`: frame 0 is not one
//! msgpack value (the message is relayed all the same). Runs of one op in a
//! batch are written `op*N`. `frames` and `bytes` (the message's size on the
//! wire, prelude included) come from the prelude: a message's line is
//! written once its prelude and frame 0 are in, before any of its bytes is
//! forwarded, so a request's line always comes before its reply's.
//!
//! The close line says which side ended the connection and how: `eof` (it
//! closed between messages), `truncated` (it closed in the middle of a
//! message), `reset` (it went away abruptly: a reset or a broken pipe, how a
//! Dask peer often leaves), `peer-timeout` (it stopped answering: a host
//! that died or a partition, noticed by TCP keepalive and
//! `TCP_USER_TIMEOUT` within [`Options::tcp_timeout`], as a Dask peer
//! notices it); then the messages relayed each way, the bytes
//! forwarded from the tap's memory (`copied`: preludes, frames 0, small
//! messages) and with `splice(2)` (`spliced`: never in the tap's memory),
//! and, when a message was cut short, `cut=RECEIVED/TOTAL` (bytes of it
//! the tap had received, all of them forwarded once its line was logged;
//! `?` before its prelude was in). That message may be one coming the other
//! way: a side that closes between its own messages (`eof`) still cuts
//! short the one it was being sent. The other side is closed in turn: it sees
//! the message cut at the same byte, as it would without the tap. Bytes
//! that are not a Dask message are an `error` line. A failing connection
//! never stops the others.
//!
//! On `SIGUSR1` the tap writes one line of what it holds: the connections
//! whose sockets and buffers it still has (from the accept until their
//! task let go of them), and the connections accepted so far:
//!
//! ```text
//! 2026-12-04T22:10:31.004Z stats live=2 accepted=17
//! ```
//!
//! Compressed frames are forwarded as they came: the tap never decodes a
//! payload, so it needs no codec of its own.
//!
//! Either side may be `tls://` (SPEC.md §6.3): the tap ends TLS there, as a
//! Dask server to its clients (a client certificate signed by the CA
//! required) and as a Dask client to its upstream, with the certificates it
//! is given ([`Tls`]), and relays the plaintext between the two sides as
//! above. A connection with a TLS side is never spliced (the kernel only
//! sees ciphertext): everything is `copied`, `spliced=0`. A client's TLS
//! handshake comes first, within [`Options::handshake_timeout`], and the
//! upstream is connected only once it succeeded; a failed or stalled one is
//! one line and nothing is relayed:
//!
//! ```text
//! 2026-12-01T18:19:26.823Z conn=1 open client=127.0.0.1:55140 upstream=127.0.0.1:38197 tls=client:TLS13_AES_256_GCM_SHA384,upstream:TLS13_AES_256_GCM_SHA384
//! 2026-12-01T18:19:27.815Z conn=2 error accepting client=127.0.0.1:55540: TLS handshake failed: peer sent no certificates
//! 2026-12-01T18:19:28.889Z conn=3 error accepting client=127.0.0.1:55562: timed out in the TLS handshake
//! ```
//!
//! With `--checksums`, the tap checks CRC32 trailers (SPEC.md §6.2) in
//! transit on connections whose peers agreed on them, still without taking
//! part in the handshake:
//!
//! ```text
//!  c->u: relay the client's handshake ─ note "framewire-checksum": "crc32"? ─┐
//!                                                                           ├─ both offered?
//!  u->c: relay the upstream's handshake ─ note "framewire-checksum"? ────────┘   each direction
//!        waits for the other's note, then (if so) verifies and strips trailers on its
//!        read half, and adds them again on its write half
//! ```
//!
//! Waiting is safe: a peer sends its second message only once it has
//! received the other side's handshake, which the tap reads before
//! forwarding it (and nothing past it: the handshake is read exactly). One
//! line per connection says what was decided (`conn=N checksums=verified`
//! or `checksums=not-agreed`). A verified connection is relayed store and
//! forward (each message read whole, its trailer checked, then written: all
//! of it `copied`); a message whose trailer does not match is a read error
//! (`conn=N error c->u reading from client: frame 1 fails its checksum:
//! ...`) and closes the connection, and never reaches the other side.
//! `frames` and `bytes` still count the trailer, as it travels on the wire.
//! Without `--checksums`, or when the peers did not agree, trailers are
//! relayed as ordinary frames, cut-through.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use framewire::message;
use framewire::transport::{
    Address, Connection, ConnectionBuilder, Socket, TlsConfig, TransportError, EXTENSION_PREFIX,
};
use framewire::{Limits, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

mod ops;
mod relay;
#[cfg(target_os = "linux")]
mod splice;

use ops::describe;
use relay::{halves, Cut, End, Logged, ReadError, Relay};

/// The checksum extension (SPEC.md §6.2): its handshake key after
/// [`EXTENSION_PREFIX`], and the value both peers must send.
const CHECKSUM_EXTENSION: &str = "checksum";
const CHECKSUM_ALGORITHM: &str = "crc32";

/// How the tap relays.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Dask's `distributed.comm.timeouts.tcp` for both sides of every
    /// connection: a side whose peer stops answering (a dead host, a
    /// partition) is called dead within about this time, and the
    /// connection ends (`reason=peer-timeout`). `None`: keepalive off.
    pub tcp_timeout: Option<Duration>,
    /// Dask's `distributed.comm.timeouts.connect`: how long the tap keeps
    /// trying to connect to the upstream for a client (Dask's backoff)
    /// before it gives up on that client.
    pub connect_timeout: Duration,
    /// Verify the checksum trailers of peers that agreed on them.
    pub checksums: bool,
    /// Move large message remainders with `splice(2)` (Linux); off: copy
    /// everything through the tap's memory (for comparison). Connections
    /// with a TLS side are always copied.
    pub splice: bool,
    /// The deadline of a client's TLS handshake.
    pub handshake_timeout: Duration,
}

/// The certificates of each side: for a `tls://` listen address (the
/// tap's server certificate; clients must present one signed by the CA)
/// and a `tls://` upstream (the tap's client certificate).
#[derive(Clone, Debug, Default)]
pub struct Tls {
    pub listen: Option<TlsConfig>,
    pub upstream: Option<TlsConfig>,
}

/// What every connection's task needs.
struct Shared {
    upstream: Address,
    /// Accepts clients: the listen side's TLS, the TCP timeout.
    accept: ConnectionBuilder,
    /// Connects to the upstream: its TLS, the TCP and connect timeouts.
    dial: ConnectionBuilder,
    logger: Logger,
    opts: Options,
    /// Connections whose state (sockets, relay buffers) the tap still
    /// holds: counted from the accept until that state is dropped.
    live: AtomicU64,
}

/// One connection counted in [`Shared::live`] while it lives: the first
/// thing a connection's task holds, so the last it drops.
struct Live<'a>(&'a AtomicU64);

impl<'a> Live<'a> {
    fn new(count: &'a AtomicU64) -> Live<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Live(count)
    }
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Relays connections accepted on `listen` to `upstream` until killed.
/// `tls` must hold a configuration for each `tls://` address.
pub fn run(
    listen: &str,
    upstream: &str,
    tls: Tls,
    log: Option<&str>,
    opts: Options,
) -> Result<(), String> {
    let listen = Address::parse(listen).map_err(|e| e.to_string())?;
    let upstream = Address::parse(upstream).map_err(|e| e.to_string())?;
    for (address, config, flags) in [
        (&listen, &tls.listen, "--tls-*"),
        (&upstream, &tls.upstream, "--tls-* or --upstream-tls-*"),
    ] {
        if address.is_tls() && config.is_none() {
            return Err(format!(
                "{address}: a tls:// address needs certificates ({flags}: CA file, certificate, key)"
            ));
        }
    }
    if (tls.listen.is_some() || tls.upstream.is_some()) && !listen.is_tls() && !upstream.is_tls() {
        return Err(
            "TLS files given, but neither --listen nor --upstream is a tls:// address".into(),
        );
    }
    let tls = Tls {
        listen: tls.listen.filter(|_| listen.is_tls()),
        upstream: tls.upstream.filter(|_| upstream.is_tls()),
    };
    let sink: Box<dyn Write + Send> = match log {
        Some(path) => {
            Box::new(std::fs::File::create(path).map_err(|e| format!("--log {path}: {e}"))?)
        }
        None => Box::new(std::io::stdout()),
    };
    let logger = Logger::start(sink)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut dial = ConnectionBuilder::new();
    dial.tcp_timeout(opts.tcp_timeout)
        .connect_timeout(Some(opts.connect_timeout));
    if let Some(config) = &tls.upstream {
        dial.tls(config.clone());
    }
    let mut accept = ConnectionBuilder::new();
    accept.tcp_timeout(opts.tcp_timeout);
    if let Some(config) = tls.listen {
        accept.tls(config);
    }
    let shared = Arc::new(Shared {
        upstream,
        accept,
        dial,
        logger,
        opts,
        live: AtomicU64::new(0),
    });
    rt.block_on(serve(&listen, shared))
}

async fn serve(listen: &Address, shared: Arc<Shared>) -> Result<(), String> {
    let listener = TcpListener::bind(listen.host_port())
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let upstream = &shared.upstream;
    // Counted from the first connection on; the handler in place before
    // the tap says it listens (SIGUSR1 would otherwise end the process).
    let next_id = Arc::new(AtomicU64::new(1));
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let usr1 = signal(SignalKind::user_defined1())
            .map_err(|e| format!("cannot handle SIGUSR1: {e}"))?;
        tokio::spawn(stats_on_signal(usr1, shared.clone(), next_id.clone()));
    }
    // `HOST:PORT` first (scripts read it), the schemes after.
    let scheme = if listen.is_tls() { "tls" } else { "tcp" };
    eprintln!("framewire tap: listening on {local}, upstream {upstream}, clients over {scheme}://");
    shared.logger.line(format_args!(
        "listening on {scheme}://{local} upstream={upstream}"
    ));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay_connection(id, stream, peer, Arc::clone(&shared)));
            }
            Err(e) => {
                // Out of file descriptors and the like: try again shortly.
                shared
                    .logger
                    .line(format_args!("error accepting a connection: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// On each `SIGUSR1`, one line: the connections the tap holds now and those
/// accepted so far (`stats live=N accepted=M`).
#[cfg(unix)]
async fn stats_on_signal(
    mut usr1: tokio::signal::unix::Signal,
    shared: Arc<Shared>,
    next_id: Arc<AtomicU64>,
) {
    while usr1.recv().await.is_some() {
        let live = shared.live.load(Ordering::SeqCst);
        let accepted = next_id.load(Ordering::Relaxed) - 1;
        shared
            .logger
            .line(format_args!("stats live={live} accepted={accepted}"));
    }
}

/// Which side a relay direction reads from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Upstream,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Client => Side::Upstream,
            Side::Upstream => Side::Client,
        }
    }

    /// The direction of messages read from this side.
    fn direction(self) -> &'static str {
        match self {
            Side::Client => "c->u",
            Side::Upstream => "u->c",
        }
    }
}

/// With `--checksums`: what one direction of a connection tells the other
/// about the handshake it relayed, and learns of the other's.
struct Agreement {
    /// Whether the handshake this direction relayed offered checksums; set
    /// once it has been read.
    ours: watch::Sender<Option<bool>>,
    /// The same, for the other direction.
    theirs: watch::Receiver<Option<bool>>,
}

impl Agreement {
    /// One for each direction of a connection.
    fn pair() -> (Agreement, Agreement) {
        let (a_tx, a_rx) = watch::channel(None);
        let (b_tx, b_rx) = watch::channel(None);
        (
            Agreement {
                ours: a_tx,
                theirs: b_rx,
            },
            Agreement {
                ours: b_tx,
                theirs: a_rx,
            },
        )
    }

    /// Publishes what our handshake offered and waits for the other
    /// direction's: whether both offered checksums.
    async fn settle(mut self, offered: bool) -> bool {
        // The other direction may be gone already (its receiver dropped).
        let _ = self.ours.send(Some(offered));
        let theirs = match self.theirs.wait_for(Option::is_some).await {
            Ok(v) => *v == Some(true),
            // The other direction ended before reading a handshake.
            Err(_) => false,
        };
        offered && theirs
    }
}

/// Whether a handshake (its frame 0) offers checksum trailers:
/// `"framewire-checksum": "crc32"`.
fn offers_checksums(frame0: Bytes) -> bool {
    let Ok(v) = message::decode(&[frame0], &Limits::dask_compat()) else {
        return false;
    };
    let key = format!("{EXTENSION_PREFIX}{CHECKSUM_EXTENSION}");
    v.get(&key).and_then(Value::as_str) == Some(CHECKSUM_ALGORITHM)
}

/// A failed accept or connect in a log line: the socket's own words, without
/// the library's `io error:` prefix; for a connect, the time and attempts it
/// took and the last cause (the upstream is named by the line).
fn socket_error(e: TransportError) -> String {
    match e {
        TransportError::Io(e) => e.to_string(),
        TransportError::Connect(e) => match e.deadline() {
            Some(d) => format!(
                "gave up after {} s ({} attempts): {}",
                d.as_secs_f64(),
                e.attempts(),
                e.last_error()
            ),
            None => e.last_error().to_string(),
        },
        e => e.to_string(),
    }
}

async fn relay_connection(id: u64, stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let Shared {
        upstream,
        accept,
        dial,
        logger,
        opts,
        live,
    } = &*shared;
    // Dropped last: after the sockets and the relays' buffers.
    let _live = Live::new(live);
    let timeout = opts.handshake_timeout;
    // A client's TLS handshake first: nothing reaches the upstream (it is
    // not even connected) from a client the tap refused.
    // The two handshakes' futures are boxed: held inline, their largest
    // states (rustls' connection) would size this task's future for as
    // long as the connection lives (`scripts/tap-memory`).
    let accepted = Box::pin(accept.accept_socket(stream, Some(timeout))).await;
    let mut client = match accepted {
        Ok(s) => s,
        Err(e) => {
            let e = socket_error(e);
            logger.line(format_args!("conn={id} error accepting client={peer}: {e}"));
            return;
        }
    };
    let mut up = match Box::pin(dial.connect_socket(upstream)).await {
        Ok(s) => s,
        Err(e) => {
            let e = socket_error(e);
            let upstream = match upstream {
                Address::Tcp(a) => a.clone(),
                tls => tls.to_string(),
            };
            logger.line(format_args!(
                "conn={id} error connecting client={peer} to upstream {upstream}: {e}"
            ));
            close(&mut client, timeout).await;
            return;
        }
    };
    let up_addr = up
        .tcp()
        .peer_addr()
        .map_or_else(|_| upstream.host_port().to_owned(), |a| a.to_string());
    let cipher = |s: &Socket| s.cipher_suite().unwrap_or_default();
    let tls_note = match (client.is_tls(), up.is_tls()) {
        (false, false) => String::new(),
        (true, false) => format!(" tls=client:{}", cipher(&client)),
        (false, true) => format!(" tls=upstream:{}", cipher(&up)),
        (true, true) => format!(" tls=client:{},upstream:{}", cipher(&client), cipher(&up)),
    };
    logger.line(format_args!(
        "conn={id} open client={peer} upstream={up_addr}{tls_note}"
    ));
    let (c_agree, u_agree) = match opts.checksums.then(Agreement::pair) {
        Some((c, u)) => (Some(c), Some(u)),
        None => (None, None),
    };
    let (cr, cw) = halves(&mut client);
    let (ur, uw) = halves(&mut up);
    let mut c2u = Direction {
        id,
        from: Side::Client,
        logger,
        agreement: c_agree,
        relay: Relay::new(cr, uw, opts.splice),
    };
    let mut u2c = Direction {
        id,
        from: Side::Upstream,
        logger,
        agreement: u_agree,
        relay: Relay::new(ur, cw, opts.splice),
    };
    // The first direction to end ends the connection: a Dask peer that
    // closes (or fails) is gone in both directions.
    let (side, end) = tokio::select! {
        end = c2u.run() => (Side::Client, end),
        end = u2c.run() => (Side::Upstream, end),
    };
    // A side that closes between its own messages may still cut short a
    // message coming the other way.
    let other_cut = match side {
        Side::Client => u2c.relay.cut(),
        Side::Upstream => c2u.relay.cut(),
    };
    let (a, b) = (c2u.relay.counts, u2c.relay.counts);
    drop((c2u, u2c));
    let tally = format!(
        "c->u={} u->c={} copied={} spliced={}",
        a.messages,
        b.messages,
        a.copied + b.copied,
        a.spliced + b.spliced
    );
    for line in end_lines(id, side, &end, &tally, other_cut) {
        logger.line(format_args!("{line}"));
    }
    // Close the other side too: it sees the connection end where the tap
    // saw it (a message cut short stays cut short), then drop both sockets.
    tokio::join!(close(&mut client, timeout), close(&mut up, timeout));
}

/// Shuts a socket's sending side (for TLS, after a `close_notify`, which a
/// peer that reads nothing more could hold up: within `timeout`).
async fn close(socket: &mut Socket, timeout: Duration) {
    let _ = tokio::time::timeout(timeout, socket.shutdown()).await;
}

/// `cut=RECEIVED/TOTAL`, after a space; nothing when no message was cut.
fn cut_text(cut: &Option<Cut>) -> String {
    match cut {
        None => String::new(),
        Some(Cut {
            received,
            total: Some(total),
        }) => format!(" cut={received}/{total}"),
        Some(Cut {
            received,
            total: None,
        }) => format!(" cut={received}/?"),
    }
}

/// The log lines of a connection's end, read from `side`; `other_cut`: the
/// message the other direction was in the middle of, if any, reported when
/// the ending direction cut none.
fn end_lines(id: u64, side: Side, end: &End, tally: &str, other_cut: Option<Cut>) -> Vec<String> {
    let cut_text = |cut: &Option<Cut>| cut_text(if cut.is_some() { cut } else { &other_cut });
    let closed = |by: Side, reason: &str, cut: &Option<Cut>| {
        format!(
            "conn={id} closed by={} reason={reason} {tally}{}",
            by.name(),
            cut_text(cut)
        )
    };
    match end {
        End::Eof(None) => vec![closed(side, "eof", &None)],
        End::Eof(cut) => vec![closed(side, "truncated", cut)],
        End::Read {
            error: ReadError::Io(e),
            cut,
        } if is_reset(e) => vec![closed(side, "reset", cut)],
        End::Write { error, cut } if is_reset(error) => vec![closed(side.other(), "reset", cut)],
        End::Read {
            error: ReadError::Transport(TransportError::PeerTimeout(_)),
            cut,
        } => vec![closed(side, "peer-timeout", cut)],
        End::Write { error, cut } if is_peer_timeout(error) => {
            vec![closed(side.other(), "peer-timeout", cut)]
        }
        End::Read { error, cut } => vec![
            format!(
                "conn={id} error {} reading from {}: {error}",
                side.direction(),
                side.name()
            ),
            format!("conn={id} closed {tally}{}", cut_text(cut)),
        ],
        End::Write { error, cut } => vec![
            format!(
                "conn={id} error {} writing to {}: {error}",
                side.direction(),
                side.other().name()
            ),
            format!("conn={id} closed {tally}{}", cut_text(cut)),
        ],
    }
}

/// Whether a socket error means that the peer stopped answering, as the
/// library classifies it ([`TransportError::PeerTimeout`]).
fn is_peer_timeout(e: &std::io::Error) -> bool {
    e.raw_os_error().is_some_and(|code| {
        matches!(
            TransportError::from(std::io::Error::from_raw_os_error(code)),
            TransportError::PeerTimeout(_)
        )
    })
}

/// Whether an error is the peer going away abruptly.
fn is_reset(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// One direction of a connection: its relay, and what it logs.
struct Direction<'a> {
    id: u64,
    /// The side it reads from.
    from: Side,
    logger: &'a Logger,
    /// With `--checksums`: settled after the first message (the handshake).
    agreement: Option<Agreement>,
    relay: Relay<'a>,
}

/// Writes a direction's message lines.
struct Lines<'a> {
    id: u64,
    direction: &'static str,
    logger: &'a Logger,
    /// Messages logged so far.
    count: u64,
    /// With `--checksums`: frame 0 of the first message (the handshake).
    first_frame0: Option<Bytes>,
    keep_first: bool,
}

impl Lines<'_> {
    fn message(&mut self, m: Logged<'_>) {
        let first = self.count == 0;
        self.logger.line(format_args!(
            "conn={} {} op={} frames={} bytes={}",
            self.id,
            self.direction,
            describe(m.frame0, first),
            m.frames,
            m.bytes
        ));
        if first && self.keep_first {
            self.first_frame0 = Some(Bytes::copy_from_slice(m.frame0));
        }
        self.count += 1;
    }
}

impl Direction<'_> {
    /// Relays the messages read from one side to the other until one side
    /// ends.
    async fn run(&mut self) -> End {
        let agreement = self.agreement.take();
        let mut lines = Lines {
            id: self.id,
            direction: self.from.direction(),
            logger: self.logger,
            count: 0,
            first_frame0: None,
            keep_first: agreement.is_some(),
        };
        if let Some(agreement) = agreement {
            // The handshake, read exactly: what follows it may have to be
            // read by the verifying relay.
            self.relay.exact = true;
            if let Some(end) = self.relay.run(true, &mut |m| lines.message(m)).await {
                return end;
            }
            self.relay.exact = false;
            let offered = lines.first_frame0.take().is_some_and(offers_checksums);
            let verified = agreement.settle(offered).await;
            if self.from == Side::Client {
                let state = if verified { "verified" } else { "not-agreed" };
                self.logger
                    .line(format_args!("conn={} checksums={state}", self.id));
            }
            if verified {
                return Box::pin(self.run_verified(&mut lines)).await;
            }
        }
        match self.relay.run(false, &mut |m| lines.message(m)).await {
            Some(end) => end,
            None => unreachable!("the relay only stops early when asked to"),
        }
    }

    /// Relays store and forward with the library's halves, which verify
    /// the trailers on reading and add them again on writing.
    async fn run_verified(&mut self, lines: &mut Lines<'_>) -> End {
        let mut builder = Connection::builder();
        builder.limits(Limits::dask_compat());
        let relay = &mut self.relay;
        let mut r = framewire::transport::ReadHalf::new(&mut relay.from, &builder);
        let mut w = framewire::transport::WriteHalf::new(&mut relay.to, &builder);
        r.set_checksums(true);
        w.set_checksums(true);
        loop {
            let env = match r.recv().await {
                None => return End::Eof(None),
                Some(Ok(env)) => env,
                Some(Err(TransportError::Io(e))) => {
                    return End::Read {
                        error: ReadError::Io(e),
                        cut: None,
                    }
                }
                Some(Err(e)) => {
                    return End::Read {
                        error: ReadError::Transport(e),
                        cut: None,
                    }
                }
            };
            // As on the wire: the trailer is one more frame, its CRCs.
            let frames = env.frames().len() as u64 + 1;
            let bytes = env.wire_len() + 8 + 4 * frames;
            let frame0 = env.frames().first().cloned().unwrap_or_default();
            lines.message(Logged {
                frame0: &frame0,
                frames,
                bytes,
            });
            relay.counts.messages += 1;
            if let Err(e) = w.send(env).await {
                let error = match e {
                    TransportError::Io(e) | TransportError::PeerTimeout(e) => e,
                    e => std::io::Error::other(e.to_string()),
                };
                return End::Write { error, cut: None };
            }
            relay.counts.copied += bytes;
        }
    }
}

/// How long log lines may wait before they are written out.
const LOG_DELAY: Duration = Duration::from_millis(10);

/// Log lines are appended to a shared buffer, which one writer thread
/// writes out and flushes at most [`LOG_DELAY`] after the first line of a
/// batch: a message costs the formatting of its line, not a wake-up of
/// another thread (only a line into an empty buffer wakes the writer).
#[derive(Clone)]
struct Logger {
    shared: Arc<LogShared>,
}

struct LogShared {
    buf: Mutex<Vec<u8>>,
    /// Signalled when a line goes into an empty buffer.
    not_empty: Condvar,
}

impl Logger {
    fn start(mut sink: Box<dyn Write + Send>) -> Result<Logger, String> {
        let shared = Arc::new(LogShared {
            buf: Mutex::new(Vec::new()),
            not_empty: Condvar::new(),
        });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("tap-log".into())
            .spawn(move || {
                let mut out = Vec::new();
                loop {
                    let mut buf = writer.buf.lock().unwrap_or_else(|e| e.into_inner());
                    while buf.is_empty() {
                        buf = writer
                            .not_empty
                            .wait(buf)
                            .unwrap_or_else(|e| e.into_inner());
                    }
                    drop(buf);
                    // Let the batch grow a little: one write for many lines.
                    std::thread::sleep(LOG_DELAY);
                    std::mem::swap(
                        &mut *writer.buf.lock().unwrap_or_else(|e| e.into_inner()),
                        &mut out,
                    );
                    if sink.write_all(&out).and_then(|()| sink.flush()).is_err() {
                        eprintln!("framewire: tap: cannot write the log");
                        std::process::exit(1);
                    }
                    out.clear();
                    if out.capacity() > 4 << 20 {
                        out = Vec::new(); // after a burst: let it go
                    }
                }
            })
            .map_err(|e| format!("cannot start the log thread: {e}"))?;
        Ok(Logger { shared })
    }

    /// Logs one line, prefixed with the time.
    fn line(&self, text: std::fmt::Arguments<'_>) {
        let now = Rfc3339Ms(SystemTime::now());
        let mut buf = self.shared.buf.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = buf.is_empty();
        let _ = writeln!(buf, "{now} {text}");
        drop(buf);
        if was_empty {
            self.shared.not_empty.notify_one();
        }
    }
}

/// A time as `2026-11-29T19:10:50.123Z` (RFC 3339, UTC, milliseconds).
struct Rfc3339Ms(SystemTime);

impl std::fmt::Display for Rfc3339Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self
            .0
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = d.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (y, m, day) = civil_from_days(days as i64);
        write!(
            f,
            "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            d.subsec_millis()
        )
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        let rfc3339_ms = |t: SystemTime| Rfc3339Ms(t).to_string();
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339_ms(t), "2023-11-14T22:13:20.123Z");
        assert_eq!(
            rfc3339_ms(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_ms(leap), "2000-02-29T00:00:00.000Z");
    }
}
