//! Faults only a network makes, on a network the test makes itself
//! (tests/support/netns.rs: two namespaces joined by a veth pair, a peer in
//! each): a peer that goes silent behind a partition is called dead within
//! the connection's `tcp_timeout`, typed ([`TransportError::PeerTimeout`]),
//! whether the connection is idle or in the middle of a 256 MiB message; a
//! partition healed in time loses nothing.
//!
//! The bound is Dask's: a connection whose peer stops answering ends
//! within `tcp_timeout` (keepalive and `TCP_USER_TIMEOUT`,
//! `distributed/comm/tcp.py`'s `set_tcp_timeout`), plus 5 s of slack for
//! a loaded machine. `tcp_timeout` is 11 s here, Dask's smallest.

#[path = "support/netns.rs"]
mod netns;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use framewire::transport::{
    Connection, ConnectionBuilder, HandshakeOptions, Socket, TransportError,
};
use framewire::Envelope;
use netns::Net;
use tokio::net::TcpListener;

const TCP_TIMEOUT: Duration = Duration::from_secs(11);
/// What the tests allow past the partition: `tcp_timeout` + 5 s.
const BOUND: Duration = Duration::from_secs(16);
const PORT: u16 = 8786;

fn runtime() -> tokio::runtime::Runtime {
    // Current-thread: every socket is made on the thread that moved into
    // the namespace.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn builder() -> ConnectionBuilder {
    let mut b = Connection::builder();
    b.tcp_timeout(Some(TCP_TIMEOUT));
    b
}

/// A server on `net.a` and a client on `net.b`, each running `side` over
/// its connection once the handshake is done; `ready` is called (on the
/// test's thread) once both are connected.
struct Pair<S, C> {
    server: std::thread::JoinHandle<S>,
    client: std::thread::JoinHandle<C>,
}

fn pair<S, C, FS, FC>(net: &Net, server: FS, client: FC) -> Pair<S, C>
where
    S: Send + 'static,
    C: Send + 'static,
    FS: AsyncFnOnce(Connection<Socket>) -> S + Send + 'static,
    FC: AsyncFnOnce(Connection<Socket>) -> C + Send + 'static,
{
    let addr = SocketAddr::new(net.a.ip.into(), PORT);
    let (listening, wait) = mpsc::channel();
    let server = net.spawn_in(&net.a, move || {
        runtime().block_on(async move {
            let listener = TcpListener::bind(addr).await.unwrap();
            listening.send(()).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            let (conn, _) = builder()
                .accept(stream, &HandshakeOptions::default())
                .await
                .expect("the handshake, as the server");
            server(conn).await
        })
    });
    wait.recv().expect("the server listens");
    let client = net.spawn_in(&net.b, move || {
        runtime().block_on(async move {
            let (conn, _) = builder()
                .connect(&addr.to_string(), &HandshakeOptions::default())
                .await
                .expect("the handshake, as the client");
            client(conn).await
        })
    });
    Pair { server, client }
}

/// How a side's connection ended, and when.
#[derive(Debug)]
struct Ended {
    at: Instant,
    error: Option<TransportError>,
}

/// Waits for `recv` to end, after one ping each way.
async fn ping_then_wait(mut conn: Connection<Socket>, first: bool) -> Ended {
    let ping = || Envelope::new(vec![Bytes::from_static(b"\xa4ping")]).unwrap();
    if first {
        conn.send(ping()).await.unwrap();
    }
    let got = conn.recv().await.expect("a ping").expect("a ping");
    assert_eq!(got.frames()[0], &b"\xa4ping"[..]);
    if !first {
        conn.send(ping()).await.unwrap();
    }
    let error = match conn.recv().await {
        Some(Ok(env)) => panic!("unexpected message {env:?}"),
        Some(Err(e)) => Some(e),
        None => None,
    };
    Ended {
        at: Instant::now(),
        error,
    }
}

/// The thread's result, or a failed test if it is still running after
/// `limit` (a side that never notices would otherwise hang the test).
fn join_within<T>(side: &str, h: std::thread::JoinHandle<T>, limit: Duration) -> T {
    let started = Instant::now();
    while !h.is_finished() {
        assert!(
            started.elapsed() < limit,
            "{side}: still running {limit:?} later (a dead peer never noticed?)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    h.join().unwrap_or_else(|_| panic!("{side} panicked"))
}

/// Time the tests wait for a side before failing it.
const HANG: Duration = Duration::from_secs(60);

/// That `ended` is a dead-peer error within [`BOUND`] of `cut`.
fn assert_dead_peer(side: &str, ended: &Ended, cut: Instant) {
    let after = ended.at.saturating_duration_since(cut);
    match &ended.error {
        Some(e @ TransportError::PeerTimeout(_)) => {
            // What a caller branches on.
            assert_eq!(e.kind(), framewire::ErrorKind::PeerTimeout);
            eprintln!("{side}: peer timeout after {after:.1?} ({e})")
        }
        other => panic!("{side}: expected a PeerTimeout, got {other:?} after {after:?}"),
    }
    assert!(
        after <= BOUND,
        "{side}: the dead peer was noticed {after:?} after the partition (bound {BOUND:?})"
    );
}

#[test]
fn netns_an_idle_connection_across_a_partition_ends_on_both_sides_within_the_tcp_timeout() {
    let net = Net::for_test("idle connection across a partition");
    let p = pair(
        &net,
        async |conn| ping_then_wait(conn, true).await,
        async |conn| ping_then_wait(conn, false).await,
    );
    // Let both sides see the ping, then cut.
    std::thread::sleep(Duration::from_millis(500));
    let cut = Instant::now();
    net.partition();
    let server = join_within("the server", p.server, HANG);
    let client = join_within("the client", p.client, HANG);
    assert_dead_peer("server (the partitioned side)", &server, cut);
    assert_dead_peer("client", &client, cut);
}

#[test]
fn netns_a_256_mib_transfer_cut_by_a_partition_fails_typed_on_both_sides() {
    let net = Net::for_test("a 256 MiB transfer cut by a partition");
    // 200 Mbit/s out of A: the message takes about 11 s, so the partition
    // comes in the middle of it.
    net.tc(
        &net.a,
        &[
            "qdisc", "add", "dev", "fw0", "root", "tbf", "rate", "200mbit", "burst", "256kb",
            "latency", "50ms",
        ],
    );
    let (started_tx, started) = mpsc::channel();
    let p = pair(
        &net,
        async move |mut conn| {
            let payload = Bytes::from(vec![7u8; 256 << 20]);
            let env = Envelope::new(vec![Bytes::from_static(b"\x90"), payload]).unwrap();
            started_tx.send(()).unwrap();
            let r = conn.send(env).await;
            Ended {
                at: Instant::now(),
                error: r.err(),
            }
        },
        async |mut conn| {
            let r = conn.recv().await;
            Ended {
                at: Instant::now(),
                error: match r {
                    Some(Err(e)) => Some(e),
                    Some(Ok(env)) => panic!("the whole message arrived: {} bytes", env.wire_len()),
                    None => None,
                },
            }
        },
    );
    started.recv().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let cut = Instant::now();
    net.partition();
    let sender = join_within("the sender", p.server, HANG);
    let receiver = join_within("the receiver", p.client, HANG);
    assert_dead_peer("sender (the partitioned side)", &sender, cut);
    assert_dead_peer("receiver", &receiver, cut);
}

/// Message `i` of the heal test: its number and a payload made from it.
fn numbered(i: u32) -> Envelope {
    let mut payload = vec![0u8; 48 << 10];
    for (j, b) in payload.iter_mut().enumerate() {
        *b = (i as usize).wrapping_mul(31).wrapping_add(j) as u8;
    }
    let frame0 = Bytes::from(format!("\u{a0}{i:010}").into_bytes()); // not msgpack: frames are opaque here
    Envelope::new(vec![frame0, Bytes::from(payload)]).unwrap()
}

#[test]
fn netns_a_partition_healed_in_time_loses_and_duplicates_nothing() {
    let net = Net::for_test("a partition healed in time");
    const COUNT: u32 = 120;
    let p = pair(
        &net,
        // A sends a message every 50 ms; B answers each with its number.
        async |conn| {
            let (mut r, mut w) = conn.into_split();
            let sender = async move {
                for i in 0..COUNT {
                    w.send(numbered(i))
                        .await
                        .expect("send across the partition");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                w
            };
            let receiver = async move {
                let mut acks = Vec::new();
                while let Some(m) = r.recv().await {
                    let m = m.expect("an acknowledgement");
                    acks.push(m.frames()[0].clone());
                    if acks.len() == COUNT as usize {
                        break;
                    }
                }
                acks
            };
            let (_w, acks) = tokio::join!(sender, receiver);
            acks
        },
        async |mut conn| {
            let mut got = Vec::new();
            while got.len() < COUNT as usize {
                let m = conn.recv().await.expect("no end").expect("a message");
                let ack = m.frames()[0].clone();
                got.push(m);
                conn.send(Envelope::new(vec![ack]).unwrap()).await.unwrap();
            }
            got
        },
    );
    std::thread::sleep(Duration::from_secs(1));
    net.partition();
    std::thread::sleep(Duration::from_secs(3));
    net.heal();
    let acks = join_within("the sender", p.server, HANG);
    let got = join_within("the receiver", p.client, HANG);
    assert_eq!(got.len(), COUNT as usize);
    for (i, m) in got.iter().enumerate() {
        let want = numbered(i as u32);
        assert_eq!(m.frames(), want.frames(), "message {i} differs");
    }
    let want_acks: Vec<Bytes> = (0..COUNT)
        .map(|i| numbered(i).frames()[0].clone())
        .collect();
    assert_eq!(acks, want_acks, "the acknowledgements, in order");
}

/// A connect across a partition: the attempt hangs (nothing answers the
/// SYN), so the first one is cut at a fifth of the connect timeout, and the
/// next finds the server once the link is back.
#[test]
fn netns_a_connect_across_a_partition_succeeds_once_it_heals() {
    let net = Net::for_test("a connect across a partition");
    let addr = SocketAddr::new(net.a.ip.into(), PORT);
    let (listening, wait) = mpsc::channel();
    let server = net.spawn_in(&net.a, move || {
        runtime().block_on(async move {
            let listener = TcpListener::bind(addr).await.unwrap();
            listening.send(()).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            let (mut conn, _) = builder()
                .accept(stream, &HandshakeOptions::default())
                .await
                .unwrap();
            conn.recv_value().await.expect("a message").unwrap()
        })
    });
    wait.recv().unwrap();
    net.partition();
    let client = net.spawn_in(&net.b, move || {
        runtime().block_on(async move {
            let mut b = builder();
            b.connect_timeout(Some(Duration::from_secs(20)));
            let (mut conn, _) = b
                .connect(&format!("tcp://{addr}"), &HandshakeOptions::default())
                .await
                .expect("connected after the heal");
            conn.send_value(&framewire::Value::str("after the heal"))
                .await
                .unwrap();
        })
    });
    std::thread::sleep(Duration::from_secs(5));
    net.heal();
    join_within("the client", client, HANG);
    let got = join_within("the server", server, HANG);
    assert_eq!(got, framewire::Value::str("after the heal"));
}

/// A connect across a partition that does not heal: attempts until the
/// connect timeout, then one error naming the address and the cause.
#[test]
fn netns_a_connect_across_a_lasting_partition_gives_up_at_the_connect_timeout() {
    let net = Net::for_test("a connect across a lasting partition");
    net.partition();
    let addr = SocketAddr::new(net.a.ip.into(), PORT);
    let client = net.spawn_in(&net.b, move || {
        runtime().block_on(async move {
            let mut b = builder();
            b.connect_timeout(Some(Duration::from_secs(5)));
            let started = Instant::now();
            let r = b
                .connect(&format!("tcp://{addr}"), &HandshakeOptions::default())
                .await;
            (started.elapsed(), r.map(|_| ()))
        })
    });
    let (elapsed, r) = join_within("the client", client, HANG);
    let err = r.expect_err("nothing can answer");
    let TransportError::Connect(e) = &err else {
        panic!("expected a Connect error, got {err:?}");
    };
    // Attempts hang (nothing answers), or fail when the neighbour lookup
    // gives up (`No route to host`, after about 3 s): a few of them.
    assert!(e.attempts() >= 2, "{err}");
    assert!(
        matches!(
            e.last_error().kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::HostUnreachable
        ),
        "{err}"
    );
    assert!(elapsed >= Duration::from_secs(5), "{elapsed:?}");
    let text = err.to_string();
    let head = format!("timed out trying to connect to tcp://{addr} after 5 s (");
    assert!(text.starts_with(&head), "{text}");
}
