//! `framewire tap`: a transparent relay for Dask traffic that logs every
//! message.
//!
//! ```text
//! client ──▶ accept ── conn N ──▶ connect ──▶ upstream
//!        c->u: recv Envelope ─ log ─ send the same Envelope (frames are the received Bytes)
//!        u->c: recv Envelope ─ log ─ send the same Envelope
//! ```
//!
//! Nothing is deserialized and nothing is re-encoded: the tap does no
//! handshake of its own (the peers' handshake messages are relayed like any
//! other), and frames go out as the same `Bytes` they were received into.
//! Frame 0 is decoded in pass-through mode only to name the message's `op`s
//! in the log (a batched stream sends a list of op maps).
//!
//! Log lines (one per message, and one per connection event):
//!
//! ```text
//! 2026-11-29T19:10:50.123Z conn=1 open client=127.0.0.1:50412 upstream=127.0.0.1:8786
//! 2026-11-29T19:10:50.124Z conn=1 c->u op=(handshake) frames=1 bytes=66
//! 2026-11-29T19:10:50.125Z conn=1 c->u op=identity frames=1 bytes=48
//! 2026-11-29T19:10:50.126Z conn=1 u->c op=- frames=1 bytes=311
//! 2026-11-29T19:10:50.130Z conn=2 u->c op=task-finished*3,key-in-memory frames=7 bytes=1234
//! 2026-11-29T19:10:51.000Z conn=1 closed by=client reason=eof c->u=2 u->c=2
//! 2026-11-29T19:10:51.000Z conn=3 error c->u: invalid message from the peer: ...
//! ```
//!
//! `op=-`: frame 0 names no op (a reply); `op=?`: frame 0 does not decode
//! (the message is relayed all the same). Runs of one op in a batch are
//! written `op*N`. `bytes` is the message's size on the wire, prelude
//! included. A connection reset or a broken pipe is how a Dask peer often
//! goes away: it is logged as a close (`reason=reset`), not an error.
//!
//! Compressed frames are forwarded as they came: the tap never decodes a
//! payload, so it needs no codec of its own.
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
//! forwarding it. One line per connection says what was decided
//! (`conn=N checksums=verified` or `checksums=not-agreed`); a message whose
//! trailer does not match is a read error (`conn=N error c->u reading from
//! client: frame 1 fails its checksum: ...`) and closes the connection.
//! `frames` and `bytes` still count the trailer, as it travels on the wire.
//! Without `--checksums`, trailers are relayed as ordinary frames.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use framewire::message;
use framewire::transport::{
    Address, Connection, ReadHalf, TransportError, WriteHalf, EXTENSION_PREFIX,
};
use framewire::{Envelope, Limits, Value};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Time allowed to shut down the write sides once a connection is over.
const SHUTDOWN: Duration = Duration::from_secs(2);

/// Ops listed per message at most; the rest are counted.
const MAX_OPS: usize = 64;

/// The checksum extension (SPEC.md §6.2): its handshake key after
/// [`EXTENSION_PREFIX`], and the value both peers must send.
const CHECKSUM_EXTENSION: &str = "checksum";
const CHECKSUM_ALGORITHM: &str = "crc32";

/// Relays connections accepted on `listen` to `upstream` until killed;
/// with `checksums`, verifies the trailers of peers that agreed on them.
pub fn run(listen: &str, upstream: &str, log: Option<&str>, checksums: bool) -> Result<(), String> {
    let listen = Address::parse(listen)?.host_port().to_owned();
    let upstream = Address::parse(upstream)?.host_port().to_owned();
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
    rt.block_on(serve(&listen, upstream, logger, checksums))
}

async fn serve(
    listen: &str,
    upstream: String,
    logger: Logger,
    checksums: bool,
) -> Result<(), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    eprintln!("framewire tap: listening on {local}, upstream {upstream}");
    logger.line(format!("listening on {local} upstream={upstream}"));
    let next_id = AtomicU64::new(1);
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay_connection(
                    id,
                    stream,
                    peer,
                    upstream.clone(),
                    logger.clone(),
                    checksums,
                ));
            }
            Err(e) => {
                // Out of file descriptors and the like: try again shortly.
                logger.line(format!("error accepting a connection: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
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

/// How one direction of a connection ended.
enum End {
    /// The side it reads from closed cleanly.
    Eof,
    /// Reading failed.
    Read(TransportError),
    /// Writing to the other side failed.
    Write(TransportError),
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

/// Whether a handshake offers checksum trailers:
/// `"framewire-checksum": "crc32"`.
fn offers_checksums(env: &Envelope) -> bool {
    let Ok(v) = message::loads(env.frames(), &Limits::dask_compat()) else {
        return false;
    };
    let key = format!("{EXTENSION_PREFIX}{CHECKSUM_EXTENSION}");
    v.get(&key).and_then(Value::as_str) == Some(CHECKSUM_ALGORITHM)
}

async fn relay_connection(
    id: u64,
    client: TcpStream,
    peer: SocketAddr,
    upstream: String,
    logger: Logger,
    checksums: bool,
) {
    let up = match TcpStream::connect(&upstream).await {
        Ok(s) => s,
        Err(e) => {
            logger.line(format!(
                "conn={id} error connecting client={peer} to upstream {upstream}: {e}"
            ));
            return;
        }
    };
    let up_addr = up.peer_addr().map_or(upstream, |a| a.to_string());
    logger.line(format!("conn={id} open client={peer} upstream={up_addr}"));
    // As Dask does on every TCP comm.
    let _ = client.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let mut builder = Connection::builder();
    builder.limits(Limits::dask_compat());
    let (mut cr, mut cw) = builder.build(client).into_tcp_split();
    let (mut ur, mut uw) = builder.build(up).into_tcp_split();
    let mut counts = [0u64; 2];
    let [c2u, u2c] = &mut counts;
    let (c_agree, u_agree) = match checksums.then(Agreement::pair) {
        Some((c, u)) => (Some(c), Some(u)),
        None => (None, None),
    };
    let client_side = Relay {
        id,
        from: Side::Client,
        logger: &logger,
        agreement: c_agree,
    };
    let upstream_side = Relay {
        id,
        from: Side::Upstream,
        logger: &logger,
        agreement: u_agree,
    };
    // The first direction to end ends the connection: a Dask peer that
    // closes (or fails) is gone in both directions.
    let (side, end) = tokio::select! {
        end = client_side.run(&mut cr, &mut uw, c2u) => (Side::Client, end),
        end = upstream_side.run(&mut ur, &mut cw, u2c) => (Side::Upstream, end),
    };
    let tally = format!("c->u={} u->c={}", counts[0], counts[1]);
    match end {
        End::Eof => logger.line(format!(
            "conn={id} closed by={} reason=eof {tally}",
            side.name()
        )),
        End::Read(e) if is_reset(&e) => logger.line(format!(
            "conn={id} closed by={} reason=reset {tally}",
            side.name()
        )),
        End::Write(e) if is_reset(&e) => logger.line(format!(
            "conn={id} closed by={} reason=reset {tally}",
            side.other().name()
        )),
        End::Read(e) => {
            logger.line(format!(
                "conn={id} error {} reading from {}: {e}",
                side.direction(),
                side.name()
            ));
            logger.line(format!("conn={id} closed {tally}"));
        }
        End::Write(e) => {
            logger.line(format!(
                "conn={id} error {} writing to {}: {e}",
                side.direction(),
                side.other().name()
            ));
            logger.line(format!("conn={id} closed {tally}"));
        }
    }
    // Close the other side too (best effort), then drop both sockets.
    let _ = tokio::time::timeout(SHUTDOWN, async {
        let _ = tokio::join!(cw.close(), uw.close());
    })
    .await;
}

/// One direction of a connection.
struct Relay<'a> {
    id: u64,
    /// The side it reads from.
    from: Side,
    logger: &'a Logger,
    /// With `--checksums`: settled after the first message (the handshake).
    agreement: Option<Agreement>,
}

impl Relay<'_> {
    /// Relays the messages read from `r` to `w` until one side ends.
    async fn run(
        mut self,
        r: &mut ReadHalf<OwnedReadHalf>,
        w: &mut WriteHalf<OwnedWriteHalf>,
        count: &mut u64,
    ) -> End {
        let id = self.id;
        // Whether trailers are verified (and stripped) on reading: they are
        // still counted in the log, as they travel on the wire.
        let mut verified = false;
        loop {
            let env = match r.recv().await {
                None => return End::Eof,
                Some(Err(e)) => return End::Read(e),
                Some(Ok(env)) => env,
            };
            let (frames, bytes) = if verified {
                let n = env.frames().len() as u64 + 1;
                (n, env.wire_len() + 8 + 4 * n)
            } else {
                (env.frames().len() as u64, env.wire_len())
            };
            // Logged before it is forwarded: a request's line always comes
            // before its reply's.
            self.logger.line(format!(
                "conn={id} {} op={} frames={frames} bytes={bytes}",
                self.from.direction(),
                describe(&env, *count == 0),
            ));
            *count += 1;
            let agreement = self.agreement.take();
            let offered = agreement.is_some() && offers_checksums(&env);
            if let Err(e) = w.send(env).await {
                return End::Write(e);
            }
            // The handshake is relayed: once the other one has been read
            // too, both directions know whether the peers agreed.
            if let Some(agreement) = agreement {
                verified = agreement.settle(offered).await;
                r.set_checksums(verified);
                w.set_checksums(verified);
                if self.from == Side::Client {
                    let state = if verified { "verified" } else { "not-agreed" };
                    self.logger.line(format!("conn={id} checksums={state}"));
                }
            }
        }
    }
}

/// Whether an error is the peer going away abruptly.
fn is_reset(e: &TransportError) -> bool {
    use std::io::ErrorKind::*;
    matches!(e, TransportError::Io(io) if matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe))
}

/// The `op=` of a message: its ops, `(handshake)`, `-` or `?`.
fn describe(env: &Envelope, first: bool) -> String {
    // Pass-through decode: blocks are only skimmed, payloads never touched.
    let Ok(loaded) = message::loads_detailed(env.frames(), &Limits::dask_compat()) else {
        return "?".into();
    };
    let v = &loaded.value;
    if first && v.get("op").is_none() && v.get("pickle-protocol").is_some() {
        return "(handshake)".into();
    }
    let ops: Vec<&str> = match v {
        Value::Map(_) => v.get("op").and_then(Value::as_str).into_iter().collect(),
        Value::Array(items) => items
            .iter()
            .map(|m| m.get("op").and_then(Value::as_str).unwrap_or("-"))
            .collect(),
        _ => Vec::new(),
    };
    ops_text(&ops)
}

/// `a,b*3,c`; `-` for none; at most [`MAX_OPS`] runs.
fn ops_text(ops: &[&str]) -> String {
    if ops.is_empty() {
        return "-".into();
    }
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for &op in ops {
        match runs.last_mut() {
            Some((last, n)) if *last == op => *n += 1,
            _ => runs.push((op, 1)),
        }
    }
    let mut parts: Vec<String> = runs
        .iter()
        .take(MAX_OPS)
        .map(|&(op, n)| match n {
            1 => op.to_owned(),
            n => format!("{op}*{n}"),
        })
        .collect();
    if runs.len() > MAX_OPS {
        let rest: usize = runs[MAX_OPS..].iter().map(|&(_, n)| n).sum();
        parts.push(format!("...+{rest}"));
    }
    parts.join(",")
}

/// Log lines go through a channel to one writer thread, which flushes
/// whenever it has caught up.
#[derive(Clone)]
struct Logger {
    tx: mpsc::Sender<String>,
}

impl Logger {
    fn start(mut sink: Box<dyn Write + Send>) -> Result<Logger, String> {
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("tap-log".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(&mut sink);
                while let Ok(line) = rx.recv() {
                    let mut ok = writeln!(out, "{line}").is_ok();
                    while let Ok(line) = rx.try_recv() {
                        ok &= writeln!(out, "{line}").is_ok();
                    }
                    if !ok || out.flush().is_err() {
                        eprintln!("framewire: tap: cannot write the log");
                        std::process::exit(1);
                    }
                }
            })
            .map_err(|e| format!("cannot start the log thread: {e}"))?;
        Ok(Logger { tx })
    }

    /// Logs one line, prefixed with the time.
    fn line(&self, text: String) {
        let _ = self
            .tx
            .send(format!("{} {text}", rfc3339_ms(SystemTime::now())));
    }
}

/// `2026-11-29T19:10:50.123Z`.
pub fn rfc3339_ms(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
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
    use framewire::dumps;

    #[test]
    fn timestamps() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339_ms(t), "2023-11-14T22:13:20.123Z");
        assert_eq!(
            rfc3339_ms(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_ms(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn ops() {
        let env = |v: &Value| Envelope::new(dumps(v).unwrap()).unwrap();
        let op = |name: &str| Value::map_of([("op", Value::str(name))]);
        assert_eq!(describe(&env(&op("identity")), false), "identity");
        let batch = Value::Array(vec![op("a"), op("b"), op("b"), op("b"), Value::str("OK")]);
        assert_eq!(describe(&env(&batch), false), "a,b*3,-");
        assert_eq!(describe(&env(&Value::str("OK")), false), "-");
        let hs = Value::map_of([("compression", Value::Nil), ("pickle-protocol", 5u8.into())]);
        assert_eq!(describe(&env(&hs), true), "(handshake)");
        assert_eq!(describe(&env(&hs), false), "-");
        let bad = Envelope::new(vec![bytes::Bytes::from_static(b"\xc1")]).unwrap();
        assert_eq!(describe(&bad, false), "?");
        let many: Vec<String> = (0..70).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(ops_text(&many).ends_with(",...+6"));
    }
}
