//! The library pieces the data worker is made of (`framewire::dask`:
//! `Requests`, `DataStore`, `gather_from_workers`, `Heartbeats`), each
//! against in-process peers over loopback TCP:
//!
//! * zero copy, counted: a 64 MiB block received on a pass-through
//!   connection, held and served back allocates one payload-sized buffer
//!   (the one the socket read into) on the serving thread, and the bytes its
//!   sends copied are the small frames only; a control shows the instrument
//!   sees a copy of that size;
//! * blocks stay whole: a collection block (a Python `set` as Dask's
//!   `serialize` iterates it) is held and served as it came;
//! * fetching picks a holder at random, falls back to another, passes a
//!   busy one over and asks it again later, reports the missing keys and
//!   the failed workers;
//! * heartbeats follow the interval the replies ask for, stop at
//!   `missing`, give up on an unreachable scheduler;
//! * a bad request is answered and the connection goes on; `close` is
//!   answered `"OK"`.

mod common;
#[path = "support/refusing.rs"]
mod refusing;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use framewire::dask::{
    gather_from_workers, DataStore, GetData, GetDataReply, HeartbeatError, Heartbeats, Key, Keys,
    Map, Op, RequestError, Requests, Rpc, RpcCause, SchedulerRequest, UpdateData, UpdateDataReply,
    WorkerRequest,
};
use framewire::transport::{ConnectionBuilder, HandshakeOptions, COALESCE_THRESHOLD};
use framewire::{Block, Header, Value};
use tokio::net::TcpListener;

const PAYLOAD: usize = 64 << 20;

fn pass_through() -> ConnectionBuilder {
    let mut b = ConnectionBuilder::new();
    b.deserialize_blocks(false);
    b
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Serves `store` on one accepted connection until the peer closes it, as
/// the data worker does; returns the store and the connection's stats.
async fn serve_one(
    listener: TcpListener,
    mut store: DataStore,
) -> (DataStore, framewire::transport::Stats) {
    let (socket, _) = listener.accept().await.unwrap();
    let (conn, _) = pass_through()
        .accept(socket, &HandshakeOptions::default())
        .await
        .unwrap();
    let mut rq = Requests::new(conn);
    while let Some(req) = rq.next::<WorkerRequest>().await {
        match req.unwrap() {
            WorkerRequest::UpdateData(m) => {
                let reply = store.update_data(m);
                rq.reply(&reply).await.unwrap();
            }
            WorkerRequest::GetData(m) => {
                let reply = store.get_data(m.keys.keys());
                rq.reply_get_data(&reply, Duration::from_secs(30))
                    .await
                    .unwrap();
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let stats = rq.connection().stats();
    (store, stats)
}

fn update(key: &str, value: Value) -> UpdateData {
    UpdateData {
        op: Op::new(),
        data: Map::from_iter([(Key::from(key), value)]),
        stimulus_id: None,
        reply: None,
    }
}

fn get(keys: &[&str]) -> GetData {
    GetData {
        op: Op::new(),
        keys: Keys::List(keys.iter().map(|k| Key::from(*k)).collect()),
        who: None,
        reply: None,
    }
}

#[test]
fn a_held_block_is_served_from_the_frames_it_arrived_in() {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let payload: Bytes = (0..PAYLOAD).map(|i| (i * 31 % 251) as u8).collect();

    // The client, on a thread of its own (not measured): scatter the block,
    // fetch it back, check every byte.
    let sent = payload.clone();
    let client = std::thread::spawn(move || {
        current_thread().block_on(async move {
            let (conn, _) = ConnectionBuilder::new()
                .connect(&addr.to_string(), &HandshakeOptions::default())
                .await
                .unwrap();
            let mut rpc = Rpc::new(conn);
            let value = Value::ToSerialize(Box::new(Value::Bin(sent.clone())));
            let reply: UpdateDataReply = rpc.call(&update("x", value)).await.unwrap();
            assert_eq!(reply.nbytes[&Key::from("x")], PAYLOAD as u64);
            let got = rpc.get_data(&get(&["x", "absent"])).await.unwrap();
            let data = got.data.unwrap();
            assert_eq!(data.len(), 1, "only the key held");
            assert_eq!(data[&Key::from("x")], Value::Bin(sent));
            rpc.close().await.unwrap();
        })
    });

    // The server, measured: receive, hold, serve.
    let before = common::anonymous_mappings();
    let rt = current_thread();
    let ((store, stats), report) = common::measure(|| {
        rt.block_on(async {
            let listener = TcpListener::from_std(std_listener).unwrap();
            serve_one(listener, DataStore::new()).await
        })
    });
    client.join().expect("the client saw its bytes back");
    println!(
        "serving thread: peak {} bytes, retained {} bytes, {} allocations; sent {} bytes, \
         {} copied on send",
        report.peak, report.retained, report.allocs, stats.bytes_sent, stats.bytes_copied_on_send
    );

    // Held as it came: one block, its frame the payload.
    let Some(Value::Serialized(block)) = store.get(&Key::from("x")) else {
        panic!("not held as a block: {:?}", store.get(&Key::from("x")));
    };
    let frame = &block.frames()[0];
    assert_eq!(frame.len(), PAYLOAD);
    assert_eq!(frame, &payload);
    // The payload stays where it was received: a mapping the connection
    // made for it (the allocator does not see it), still held by the store;
    // a copy anywhere between receive and send would be a payload-sized
    // allocation on the serving thread.
    assert!(
        common::in_new_mapping(frame, &before),
        "the frame left its receive buffer"
    );
    assert!(report.peak < PAYLOAD / 4, "{report:?}");
    // Sent: the payload went out of its own memory; only small frames were
    // copied next to the prelude.
    assert!(stats.bytes_sent > PAYLOAD as u64, "{stats:?}");
    assert!(
        stats.bytes_copied_on_send < 2 * COALESCE_THRESHOLD as u64,
        "{stats:?}"
    );

    // The control: the instrument sees a copy of that frame.
    let (copy, control) = common::measure(|| Bytes::copy_from_slice(frame));
    assert_eq!(copy.len(), PAYLOAD);
    assert!(control.peak >= PAYLOAD, "{control:?}");
}

/// A `set` as Dask's client scatters it: a collection block of three
/// pickled elements, `type-serialized: "set"`.
fn python_set_block() -> Value {
    let pickle = |n: u8| Bytes::from(vec![0x80, 5, b'K', n, b'.']);
    let sub = || {
        Value::map_of([
            ("serializer", Value::str("pickle")),
            ("writeable", Value::Array(vec![])),
        ])
    };
    let ints = |v: [i64; 3]| Value::Array(v.iter().map(|&i| Value::from(i)).collect());
    let header = Value::map_of([
        ("sub-headers", Value::Array(vec![sub(), sub(), sub()])),
        ("is-collection", Value::Bool(true)),
        ("frame-lengths", ints([1, 1, 1])),
        ("type-serialized", Value::str("set")),
        ("split-num-sub-frames", ints([1, 1, 1])),
        ("split-offsets", ints([0, 1, 2])),
        ("compression", Value::Array(vec![Value::Nil; 3])),
    ]);
    Value::Serialized(Box::new(Block::new(
        Header::new(header),
        [pickle(1), pickle(2), pickle(3)],
    )))
}

#[tokio::test]
async fn collection_blocks_are_held_and_served_whole() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_one(listener, DataStore::new()));
    let (conn, _) = pass_through()
        .connect(&addr.to_string(), &HandshakeOptions::default())
        .await
        .unwrap();
    let mut rpc = Rpc::new(conn);
    let set = python_set_block();
    let _: UpdateDataReply = rpc.call(&update("s", set.clone())).await.unwrap();
    let got = rpc.get_data(&get(&["s"])).await.unwrap();
    rpc.close().await.unwrap();
    let back = &got.data.unwrap()[&Key::from("s")];
    let (store, _) = server.await.unwrap();
    let held = store.get(&Key::from("s")).unwrap();
    let (Value::Serialized(held), Value::Serialized(served), Value::Serialized(sent)) =
        (held, back, &set)
    else {
        panic!("not blocks: held {held:?}, served {back:?}");
    };
    for b in [held, served] {
        let header = b.header().map();
        assert_eq!(
            header.get("type-serialized").and_then(Value::as_str),
            Some("set")
        );
        assert_eq!(header.get("is-collection"), Some(&Value::Bool(true)));
        assert_eq!(b.frames(), sent.frames());
    }
    // Served as held: the header's bytes as they arrived.
    assert!(held.header().raw().is_some());
    assert_eq!(held.header().raw(), served.header().raw());
}

/// A fake worker holding `keys` (values: the key's bytes) that answers
/// `busy` to its first `busy_first` requests; counts the requests.
async fn fake_worker(keys: &[&str], busy_first: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("tcp://{}", listener.local_addr().unwrap());
    let mut store = DataStore::new();
    for k in keys {
        store.insert(Key::from(*k), Value::bin(k.as_bytes().to_vec()));
    }
    let store = Arc::new(Mutex::new(store));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let (store, calls) = (store.clone(), counted.clone());
            tokio::spawn(async move {
                let (conn, _) = pass_through()
                    .accept(socket, &HandshakeOptions::default())
                    .await
                    .unwrap();
                let mut rq = Requests::new(conn);
                while let Some(Ok(WorkerRequest::GetData(m))) = rq.next().await {
                    let reply = match calls.fetch_add(1, Ordering::SeqCst) < busy_first {
                        true => GetDataReply {
                            status: "busy".into(),
                            data: None,
                        },
                        false => store.lock().unwrap().get_data(m.keys.keys()),
                    };
                    rq.reply_get_data(&reply, Duration::from_secs(10))
                        .await
                        .unwrap();
                }
            });
        }
    });
    (addr, calls)
}

/// As Dask's `utils_comm.gather_from_workers`: a holder without the key or
/// failing is passed over for another, one answering `busy` too (asked
/// again 0.15 s later when only busy ones are left), and what no holder
/// gave is missing.
#[tokio::test]
async fn gather_falls_back_retries_busy_and_reports_what_failed() {
    let (a, _) = fake_worker(&["x"], 0).await;
    let (b, _) = fake_worker(&["x", "y"], 0).await;
    let (busy, busy_calls) = fake_worker(&["w"], 2).await;
    let (always_busy, always_busy_calls) = fake_worker(&["u"], usize::MAX).await;
    let (c, _) = fake_worker(&["u"], 0).await;
    let (_refusing, closed) = refusing::refusing_address();
    let who_has: Map<Key, Vec<String>> = Map::from_iter([
        (Key::from("x"), vec![closed.clone(), a.clone()]),
        (Key::from("v"), vec![closed.clone()]),
        (Key::from("y"), vec![a.clone(), b.clone()]),
        (Key::from("w"), vec![busy.clone()]),
        (Key::from("u"), vec![always_busy.clone(), c.clone()]),
        (Key::from("z"), vec![a.clone()]),
    ]);
    let got = gather_from_workers(
        &who_has,
        Some("tcp://me:1"),
        &pass_through(),
        &HandshakeOptions::default(),
    )
    .await;
    for k in ["x", "y", "w", "u"] {
        assert_eq!(
            got.data.get(&Key::from(k)),
            Some(&Value::bin(k.as_bytes().to_vec())),
            "{k}: {got:?}"
        );
    }
    let mut missing: Vec<String> = got.missing.iter().map(|k| format!("{k:?}")).collect();
    missing.sort();
    let expected = [Key::from("v"), Key::from("z")].map(|k| format!("{k:?}"));
    assert_eq!(missing, expected, "{got:?}");
    let failed: Vec<&str> = got.failed_workers.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(failed, [closed.as_str()], "{got:?}");
    assert_eq!(
        busy_calls.load(Ordering::SeqCst),
        3,
        "two busy answers, then the data"
    );
    // Once busy, passed over for the holder that is not.
    assert!(always_busy_calls.load(Ordering::SeqCst) <= 1, "{got:?}");
    // A transfer per answer with data, timed; none for a failure or a
    // `busy`.
    for t in &got.transfers {
        assert!(t.start > 1e9 && t.start <= t.stop, "{t:?}");
    }
    let from = |w: &str| got.transfers.iter().filter(|t| t.worker == w).count();
    assert_eq!(from(&busy), 1, "{got:?}");
    assert_eq!(from(&closed), 0, "{got:?}");
    assert_eq!(from(&always_busy), 0, "{got:?}");
    assert!(from(&a) >= 1 && from(&b) >= 1, "{got:?}");
    for (k, holder) in [("x", &a), ("y", &b), ("w", &busy), ("u", &c)] {
        let asked = got
            .transfers
            .iter()
            .any(|t| t.worker == *holder && t.keys.contains(&Key::from(k)));
        assert!(asked, "{k} from {holder}: {got:?}");
    }
    assert_eq!(got.transfers[0].startstop().action, "transfer");
}

/// Each key goes to one of its holders picked at random
/// (`random.choice` in `gather_from_workers`), not always the first: over
/// 40 gathers of a key held by two workers, both are asked (the chance
/// that one is never asked is 2 in 2^40).
#[tokio::test]
async fn gather_picks_a_holder_at_random() {
    let (first, first_calls) = fake_worker(&["k"], 0).await;
    let (second, second_calls) = fake_worker(&["k"], 0).await;
    let who_has: Map<Key, Vec<String>> =
        Map::from_iter([(Key::from("k"), vec![first.clone(), second.clone()])]);
    for _ in 0..40 {
        let got = gather_from_workers(
            &who_has,
            None,
            &pass_through(),
            &HandshakeOptions::default(),
        )
        .await;
        assert_eq!(got.data.len(), 1, "{got:?}");
    }
    let (n1, n2) = (
        first_calls.load(Ordering::SeqCst),
        second_calls.load(Ordering::SeqCst),
    );
    assert_eq!(n1 + n2, 40);
    assert!(n1 > 0 && n2 > 0, "{n1} and {n2}");
}

/// A fake scheduler answering `heartbeat_worker` `late` with `interval`,
/// or `missing` from the `missing_after`-th heartbeat on; counts them.
async fn fake_scheduler(
    interval: f64,
    missing_after: usize,
    late: Duration,
) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("tcp://{}", listener.local_addr().unwrap());
    let beats = Arc::new(AtomicUsize::new(0));
    let counted = beats.clone();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (conn, _) = ConnectionBuilder::new()
            .accept(socket, &HandshakeOptions::default())
            .await
            .unwrap();
        let mut rq = Requests::new(conn);
        while let Some(Ok(SchedulerRequest::HeartbeatWorker(hb))) = rq.next().await {
            assert!(hb.metrics.get("bandwidth").is_some(), "{:?}", hb.metrics);
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(late).await;
            let reply = match n >= missing_after {
                true => Value::map_of([("status", Value::str("missing"))]),
                false => Value::map_of([
                    ("status", Value::str("OK")),
                    ("time", Value::Float(0.0)),
                    ("heartbeat-interval", Value::Float(interval)),
                ]),
            };
            rq.reply(&reply).await.unwrap();
        }
    });
    (addr, beats)
}

fn metrics() -> Value {
    framewire::dask::WorkerMetrics::new(0).to_value()
}

/// Heartbeats to a fake scheduler (see [`fake_scheduler`]) until it says
/// `missing`: how long they took.
async fn heartbeats_until_missing(interval: f64, missing_after: usize, late: Duration) -> Duration {
    let (sched, beats) = fake_scheduler(interval, missing_after, late).await;
    let started = Instant::now();
    let hb = Heartbeats::new(
        &sched,
        "tcp://127.0.0.1:9",
        pass_through(),
        HandshakeOptions::default(),
    );
    let why = hb.run(Duration::from_secs(5), metrics).await;
    let took = started.elapsed();
    assert!(matches!(why, HeartbeatError::Missing), "{why}");
    assert_eq!(beats.load(Ordering::SeqCst), missing_after);
    took
}

#[tokio::test]
async fn heartbeats_follow_the_interval_asked_and_stop_when_missing() {
    let took = heartbeats_until_missing(0.02, 40, Duration::ZERO).await;
    // 39 intervals of 20 ms after the first reply (1 s before it): at the
    // default 1 s interval this would take 40 s.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(took >= Duration::from_millis(39 * 20), "{took:?}");
}

/// A period apart start to start, as Dask's periodic callback: replies
/// 0.2 s late at an interval of 0.25 s put the 9th heartbeat 2 s after the
/// first, not 3.6 s (a period after each reply).
#[tokio::test]
async fn heartbeats_go_a_period_apart_however_late_the_reply() {
    let took = heartbeats_until_missing(0.25, 9, Duration::from_millis(200)).await;
    assert!(took >= Duration::from_millis(2200), "{took:?}");
    assert!(took < Duration::from_millis(3000), "{took:?}");
}

#[tokio::test]
async fn heartbeats_give_up_on_an_unreachable_scheduler() {
    let (_refusing, closed) = refusing::refusing_address();
    let hb = Heartbeats::new(
        &closed,
        "tcp://127.0.0.1:9",
        pass_through(),
        HandshakeOptions::default(),
    );
    let why = hb.run(Duration::from_millis(500), metrics).await;
    let HeartbeatError::Failed { for_, last } = &why else {
        panic!("{why}");
    };
    assert!(*for_ >= Duration::from_millis(500), "{why}");
    assert!(matches!(last.cause(), RpcCause::Transport(_)), "{why}");
    assert!(
        why.to_string()
            .starts_with("no heartbeat reached the scheduler"),
        "{why}"
    );
}

#[tokio::test]
async fn bad_requests_are_answered_and_the_connection_goes_on() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (conn, _) = pass_through()
            .accept(socket, &HandshakeOptions::default())
            .await
            .unwrap();
        let mut rq = Requests::new(conn);
        let mut seen = Vec::new();
        while let Some(req) = rq.next::<WorkerRequest>().await {
            match req {
                Ok(WorkerRequest::Identity(_)) => {
                    seen.push("identity".to_owned());
                    rq.reply(&Value::str("me")).await.unwrap();
                }
                Ok(other) => panic!("{other:?}"),
                Err(RequestError::Bad(e)) => seen.push(e.to_string()),
                Err(e) => panic!("{e}"),
            }
        }
        seen
    });
    let (mut conn, _) = ConnectionBuilder::new()
        .connect(&addr.to_string(), &HandshakeOptions::default())
        .await
        .unwrap();
    let ask = |v: Value| v;
    for (request, expect) in [
        (ask(Value::from(3i64)), "not a map"),
        (ask(Value::map_of([("reply", Value::Bool(true))])), "no op"),
        (
            ask(Value::map_of([
                ("op", Value::str("get_data")),
                ("keys", 5i64.into()),
            ])),
            "keys",
        ),
    ] {
        conn.send_value(&request).await.unwrap();
        let reply = conn.recv_value().await.unwrap().unwrap();
        assert_eq!(
            reply.get("status").and_then(Value::as_str),
            Some("uncaught-error")
        );
        let text = reply.get("exception_text").and_then(Value::as_str).unwrap();
        assert!(text.contains(expect), "{text}");
    }
    // No reply wanted: none written; the next request is answered.
    let quiet = Value::map_of([
        ("op", Value::str("get_data")),
        ("reply", Value::Bool(false)),
    ]);
    conn.send_value(&quiet).await.unwrap();
    let mut rpc = Rpc::new(conn);
    let me: Value = rpc
        .call(&framewire::dask::Identity::default())
        .await
        .unwrap();
    assert_eq!(me, Value::str("me"));
    // `close` with a reply: "OK", and the server stops reading.
    let conn = rpc.connection();
    let close = Value::map_of([("op", Value::str("close")), ("reply", Value::Bool(true))]);
    conn.send_value(&close).await.unwrap();
    assert_eq!(conn.recv_value().await.unwrap().unwrap(), Value::str("OK"));
    let seen = server.await.unwrap();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(seen[4], "identity");
}
