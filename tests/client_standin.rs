//! `framewire::dask::Client` against stand-ins for a scheduler and a worker
//! that this test scripts: what a real cluster does only by chance or by
//! force (a worker that no longer has a key, a stream that breaks in the
//! middle of a wait, a scheduler that refuses the client when it comes
//! back) happens here on cue, and the stand-ins record every op the client
//! sends and every connection it holds open. The conversations themselves
//! are proven against real Python clusters in `tests/client.rs`; these tests
//! hold the client's own claims:
//!
//! * a `wait` in progress fails with `ClientError::ConnectionLost` when the
//!   stream is lost;
//! * registering again gives up at `ClientOptions::timeout`;
//! * `gather` falls back to the scheduler (through the pool, with its
//!   retry of a dead pooled connection) when a worker does not have a key;
//! * the client's two pools (`gather`, `gather_blocks`) share one
//!   `connection_limit`;
//! * `release` sends `client-releases-keys` when the last hold goes, and
//!   only then.

#[path = "support/refusing.rs"]
mod refusing;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use framewire::dask::{Client, ClientError, ClientOptions, Key};
use framewire::transport::{Connection, ConnectionBuilder, HandshakeOptions};
use framewire::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How a stand-in server behaves.
#[derive(Clone, Copy, Default)]
struct Script {
    /// Calls served on a connection before the server closes it (a server
    /// that dropped an idle connection); 0: no bound.
    calls_per_connection: usize,
    /// `get_data` answers without the keys (a worker that lost them).
    lacks_keys: bool,
}

/// What a stand-in saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Request ops, in order (not those of the stream).
    calls: Mutex<Vec<String>>,
    /// Every op the client sent on its stream, with its message.
    stream: Mutex<Vec<Value>>,
    /// When each `register-client` arrived.
    registrations: Mutex<Vec<Instant>>,
    /// Connections open now, the client's stream excepted.
    open: AtomicUsize,
    /// Set: `register-client` is refused (`stream-start` with an error).
    refuse: AtomicBool,
}

impl Seen {
    fn calls(&self, op: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|o| *o == op)
            .count()
    }

    fn stream_ops(&self, op: &str) -> Vec<Value> {
        let stream = self.stream.lock().unwrap();
        stream
            .iter()
            .filter(|m| m.get("op").and_then(Value::as_str) == Some(op))
            .cloned()
            .collect()
    }
}

/// A stand-in server on 127.0.0.1 (scheduler and worker in one: the ops
/// of both), holding `data`, naming `worker` in `who_has` replies.
struct StandIn {
    address: String,
    seen: Arc<Seen>,
    /// Set to true: the server ends the client's stream.
    cut: watch::Sender<bool>,
}

async fn stand_in(script: Script, data: Vec<(Value, Value)>, worker: Option<String>) -> StandIn {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("tcp://{}", listener.local_addr().unwrap());
    let worker = worker.unwrap_or_else(|| address.clone());
    let seen = Arc::new(Seen::default());
    let (cut, cut_rx) = watch::channel(false);
    let shared = (seen.clone(), Arc::new(data), Arc::new(worker));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (seen, data, worker) = (shared.0.clone(), shared.1.clone(), shared.2.clone());
            let cut = cut_rx.clone();
            tokio::spawn(async move {
                let (conn, _) = ConnectionBuilder::new()
                    .accept(stream, &HandshakeOptions::default())
                    .await
                    .unwrap();
                serve(conn, script, &seen, &data, &worker, cut).await;
            });
        }
    });
    StandIn { address, seen, cut }
}

/// One connection: requests, until it turns into the client's stream.
async fn serve(
    mut conn: Connection<framewire::transport::Socket>,
    script: Script,
    seen: &Seen,
    data: &[(Value, Value)],
    worker: &str,
    cut: watch::Receiver<bool>,
) {
    seen.open.fetch_add(1, Ordering::SeqCst);
    let mut served = 0;
    let keys = |msg: &Value| -> Vec<Value> {
        msg.get("keys")
            .and_then(Value::as_array)
            .unwrap_or_default()
            .to_vec()
    };
    while let Some(Ok(msg)) = conn.recv_value().await {
        let op = msg
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if op == "register-client" {
            seen.open.fetch_sub(1, Ordering::SeqCst);
            seen.registrations.lock().unwrap().push(Instant::now());
            return stream(conn, seen, cut).await;
        }
        seen.calls.lock().unwrap().push(op.clone());
        let reply = match op.as_str() {
            "close" => break,
            "versions" => Value::map_of([("packages", Value::Map(Vec::new()))]),
            "ncores_running" => Value::Map(vec![(Value::str(worker), Value::from(1))]),
            "who_has" => Value::Map(
                keys(&msg)
                    .into_iter()
                    .map(|k| (k, Value::Array(vec![Value::str(worker)])))
                    .collect(),
            ),
            // A handler that raises, answered as Dask's `Server` answers
            // then (`error_message`): status, the exception's repr, the
            // traceback.
            "raise" => Value::map_of([
                ("status", Value::from_static("uncaught-error")),
                ("exception_text", Value::from_static("KeyError('x')")),
                ("traceback_text", Value::from_static("Traceback ...")),
            ]),
            "gather" | "get_data" => {
                let asked = keys(&msg);
                let found: Vec<(Value, Value)> = data
                    .iter()
                    .filter(|(k, _)| asked.contains(k))
                    .filter(|_| op == "gather" || !script.lacks_keys)
                    .cloned()
                    .collect();
                Value::map_of([
                    ("status", Value::from_static("OK")),
                    ("data", Value::Map(found)),
                ])
            }
            other => panic!("the stand-in got an op it does not serve: {other}"),
        };
        conn.send_value(&reply).await.unwrap();
        if op == "get_data" {
            // The caller's "OK".
            let ok = conn.recv_value().await.unwrap().unwrap();
            assert_eq!(ok.as_str(), Some("OK"));
        }
        served += 1;
        if served == script.calls_per_connection {
            break;
        }
    }
    seen.open.fetch_sub(1, Ordering::SeqCst);
}

/// The client's stream: `stream-start` (or a refusal), then every op it
/// sends recorded, until the client closes it or the test cuts it.
async fn stream(
    mut conn: Connection<framewire::transport::Socket>,
    seen: &Seen,
    mut cut: watch::Receiver<bool>,
) {
    let refuse = seen.refuse.load(Ordering::SeqCst);
    let error = if refuse {
        "refused by the stand-in"
    } else {
        ""
    };
    let start = Value::map_of([
        ("op", Value::from_static("stream-start")),
        ("error", Value::str(error)),
    ]);
    conn.send_value(&Value::Array(vec![start])).await.unwrap();
    if refuse {
        return;
    }
    loop {
        tokio::select! {
            msg = conn.recv_value() => match msg {
                Some(Ok(Value::Array(batch))) => seen.stream.lock().unwrap().extend(batch),
                Some(Ok(other)) => seen.stream.lock().unwrap().push(other),
                _ => return,
            },
            _ = cut.wait_for(|c| *c) => return, // dropped: the stream ends
        }
    }
}

/// Polls `done` every 10 ms for at most 10 s; fails with `what`.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn key_value(k: &str) -> Value {
    Value::str(k)
}

/// A `wait` for a key the scheduler has not reported on is in progress
/// when the stream breaks: it fails with `ConnectionLost`, at once.
#[tokio::test]
async fn a_wait_in_progress_fails_with_connection_lost_when_the_stream_is_lost() {
    let s = stand_in(Script::default(), vec![], None).await;
    let client = Client::connect(&s.address, ClientOptions::default())
        .await
        .expect("connect");
    let key = Key::from("never-reported");
    let wait = client.wait(std::slice::from_ref(&key));
    tokio::pin!(wait);
    // The wait asked about the key, and is still waiting.
    let asked = async {
        eventually("report-key on the stream", || {
            !s.seen.stream_ops("report-key").is_empty()
        })
        .await
    };
    tokio::select! {
        r = &mut wait => panic!("the wait ended before the stream broke: {r:?}"),
        () = asked => {}
    }
    s.cut.send(true).unwrap();
    match tokio::time::timeout(Duration::from_secs(5), wait).await {
        Ok(Err(ClientError::ConnectionLost)) => {}
        other => panic!("the wait after the stream broke: {other:?}"),
    }
}

/// The stream breaks and the scheduler refuses the client from then on:
/// the client tries to register again (0.1 s apart) for
/// `ClientOptions::timeout`, then gives up for good.
#[tokio::test]
async fn registering_again_gives_up_at_the_clients_timeout() {
    let s = stand_in(Script::default(), vec![], None).await;
    let timeout = Duration::from_secs(1);
    let opts = ClientOptions::new().timeout(Some(timeout));
    let _client = Client::connect(&s.address, opts).await.expect("connect");
    s.seen.refuse.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    s.cut.send(true).unwrap();
    // Watched well past the timeout: a client that went on trying would
    // register every 0.1 s or so all along.
    tokio::time::sleep(timeout + Duration::from_secs(4)).await;
    let after: Vec<Duration> = s
        .seen
        .registrations
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t > cut)
        .map(|t| *t - cut)
        .collect();
    assert!(
        after.len() >= 2,
        "it did not try again, or only once: {after:?}"
    );
    // The last attempt started before the timeout passed (plus what a
    // loaded machine needs for one attempt).
    let last = *after.last().unwrap();
    assert!(
        last <= timeout + Duration::from_secs(2),
        "still registering {last:?} after the stream broke (timeout {timeout:?}): {after:?}"
    );
}

/// A worker that does not have a key: `gather` asks the scheduler for it
/// (`gather`), on the pool's connection to the scheduler, which the
/// scheduler closed after `who_has`: the pool's retry makes the call again
/// on a fresh one.
#[tokio::test]
async fn gather_falls_back_to_the_scheduler_through_the_pool_with_its_retry() {
    let key = Key::from("kept-elsewhere");
    let data = vec![(key_value("kept-elsewhere"), Value::from(42))];
    let worker = stand_in(
        Script {
            lacks_keys: true,
            ..Script::default()
        },
        data.clone(),
        None,
    )
    .await;
    let scheduler = stand_in(
        Script {
            calls_per_connection: 1,
            ..Script::default()
        },
        data,
        Some(worker.address.clone()),
    )
    .await;
    let client = Client::connect(&scheduler.address, ClientOptions::default())
        .await
        .expect("connect");
    let got = client
        .gather(std::slice::from_ref(&key))
        .await
        .expect("gather through the scheduler");
    assert_eq!(got[&key], Value::from(42));
    assert_eq!(worker.seen.calls("get_data"), 1);
    assert_eq!(
        (
            scheduler.seen.calls("who_has"),
            scheduler.seen.calls("gather")
        ),
        (1, 1)
    );
    // `who_has` opened the scheduler's pooled connection, the worker's
    // `get_data` another; the fallback took the scheduler's back from the
    // pool, found it closed, and opened a fresh one.
    assert_eq!((client.pool().opened(), client.pool().reused()), (3, 1));
    client.close().await.expect("close");
}

/// With a limit of one connection, `gather` (values) then `gather_blocks`
/// (blocks) each close the other pool's idle connection to make room: one
/// connection stays open in all, never one per pool.
#[tokio::test]
async fn the_clients_two_pools_share_one_connection_limit() {
    let key = Key::from("shared-limit");
    let data = vec![(key_value("shared-limit"), Value::bin(&b"bytes"[..]))];
    let worker = stand_in(Script::default(), data.clone(), None).await;
    let scheduler = stand_in(Script::default(), data, Some(worker.address.clone())).await;
    let opts = ClientOptions::new().connection_limit(1);
    let client = Client::connect(&scheduler.address, opts)
        .await
        .expect("connect");
    let open =
        || scheduler.seen.open.load(Ordering::SeqCst) + worker.seen.open.load(Ordering::SeqCst);
    let keys = std::slice::from_ref(&key);
    let got = client.gather(keys).await.expect("gather");
    assert_eq!(got[&key], Value::bin(&b"bytes"[..]));
    eventually("one connection open after gather", || open() == 1).await;
    let got = client.gather_blocks(keys).await.expect("gather_blocks");
    assert!(matches!(got[&key], Value::Bin(_)), "{:?}", got[&key]);
    eventually("one connection open after gather_blocks", || open() == 1).await;
    // The worker's connection of each pool, and the scheduler's (`who_has`)
    // twice: each closed for the next.
    assert_eq!(client.pool().opened(), 4);
    assert_eq!(client.pool().open_connections(), 1);
    client.close().await.expect("close");
}

/// Holds are counted: a key desired twice is released once with no word
/// to the scheduler, and the second release sends `client-releases-keys`
/// with the key and the client's id.
#[tokio::test]
async fn release_tells_the_scheduler_only_when_the_last_hold_goes() {
    let s = stand_in(Script::default(), vec![], None).await;
    let client = Client::connect(&s.address, ClientOptions::default())
        .await
        .expect("connect");
    let key = Key::from("held-twice");
    let keys = std::slice::from_ref(&key);
    client.desire(keys).unwrap();
    client.desire(keys).unwrap();
    client.release(keys).unwrap();
    assert_eq!(client.held(), vec![key.clone()]);
    client.release(keys).unwrap();
    assert!(client.held().is_empty());
    eventually("client-releases-keys on the stream", || {
        !s.seen.stream_ops("client-releases-keys").is_empty()
    })
    .await;
    // The stream is ordered: a message for the first release would have
    // come before this one.
    let releases = s.seen.stream_ops("client-releases-keys");
    assert_eq!(releases.len(), 1, "{releases:?}");
    assert_eq!(
        releases[0].get("keys"),
        Some(&Value::Array(vec![key_value("held-twice")]))
    );
    assert_eq!(
        releases[0].get("client").and_then(Value::as_str),
        Some(client.id())
    );
    assert_eq!(s.seen.stream_ops("client-desires-keys").len(), 2);
    client.close().await.expect("close");
}

/// Clones share one client: a key one clone holds (from another task) is
/// held by all, and `close` through one ends it for every clone.
#[tokio::test]
async fn a_clients_clones_share_it() {
    let s = stand_in(Script::default(), vec![], None).await;
    let client = Client::connect(&s.address, ClientOptions::default())
        .await
        .expect("connect");
    let key = Key::from("held-by-a-clone");
    let other = client.clone();
    let k = key.clone();
    tokio::spawn(async move { other.desire(std::slice::from_ref(&k)) })
        .await
        .unwrap()
        .expect("desire through a clone");
    assert_eq!(client.held(), vec![key.clone()]);
    let other = client.clone();
    client.close().await.expect("close");
    match other.desire(std::slice::from_ref(&key)) {
        Err(ClientError::Transport(_)) => {}
        r => panic!("a clone of a closed client: {r:?}"),
    }
    eventually("the stream closed", || {
        s.seen.stream_ops("close-client").len() == 1
    })
    .await;
}

/// Each facade's error says what kind of failure it is, the same kinds
/// whichever facade reported it: a refused connection (the client's, a
/// call's, a connection's), an error reply, an address that is not one.
#[tokio::test]
async fn facade_errors_are_matched_by_kind() {
    use framewire::transport::{ConnectionBuilder, HandshakeOptions};
    use framewire::ErrorKind;

    // A port nobody listens on: refused at once.
    let (_refusing, closed) = refusing::refusing_address();
    let mut quick = ConnectionBuilder::new();
    quick.connect_timeout(Some(Duration::from_millis(300)));
    let client = Client::connect(&closed, ClientOptions::new().connection(quick.clone())).await;
    assert_eq!(client.unwrap_err().kind(), ErrorKind::Connect);
    let rpc = framewire::dask::Rpc::connect(&closed, &quick, &HandshakeOptions::default()).await;
    let e = rpc.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connect);
    assert_eq!(e.address(), Some(closed.as_str()), "{e}");
    // What a worker's registration retries on.
    assert!(e.is_unreachable(), "{e}");
    let conn = quick.connect(&closed, &HandshakeOptions::default()).await;
    assert_eq!(conn.unwrap_err().kind(), ErrorKind::Connect);
    let bad = quick
        .connect("ucx://127.0.0.1:1", &HandshakeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidAddress, "{bad}");
    assert!(bad.to_string().contains("ucx://127.0.0.1:1"), "{bad}");

    // An error reply: the call's error is Remote, with Dask's texts.
    let s = stand_in(Script::default(), vec![], None).await;
    let client = Client::connect(&s.address, ClientOptions::default())
        .await
        .expect("connect");
    let raise = Value::map_of([("op", Value::from_static("raise"))]);
    let e = client
        .pool()
        .call::<_, Value>(&s.address, &raise)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Remote, "{e}");
    assert!(!e.is_unreachable(), "an error reply is an answer: {e}");
    assert_eq!(e.remote().unwrap().exception_text, "KeyError('x')");
    // It names the op and the address it called.
    assert_eq!(
        (e.op(), e.address()),
        (Some("raise"), Some(s.address.as_str()))
    );
    assert!(
        e.to_string()
            .starts_with(&format!("calling raise on {}: ", s.address)),
        "{e}"
    );
    client.close().await.expect("close");
}
