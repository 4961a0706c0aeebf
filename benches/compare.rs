//! framewire's side of `scripts/bench-compare`: a worker that runs one
//! measurement per request, so the driver (`benches/bench_compare.py`) can
//! interleave it with Python Dask's side (`benches/dask_peer.py`) round by
//! round. Not a criterion bench (`harness = false`):
//!
//! ```text
//! compare serve      JSON requests on stdin, one JSON result per line on stdout
//! compare rss-recv   receives one message on 127.0.0.1 (port printed first) and
//!                    prints its VmRSS before and VmHWM after (peak-RSS row)
//! compare wire-recv SCHEME CERTS [raw]
//!                    the receiving process of the `wire` rows: listens on
//!                    SCHEME://127.0.0.1 (address printed first), receives
//!                    messages (deserialized, as Dask's comms do) and answers
//!                    "ok" to each one marked `last`, until the sender closes
//!                    (`raw`: length-prefixed bytes, the rows' ceiling)
//! compare make-certs DIR
//!                    a CA and a certificate for both sides (TLS rows), PEM
//! compare peer-recv VARIANT SIZE COUNT FLAVOR
//!                    the receiving process of a `peer` measurement: listens on
//!                    127.0.0.1 (port printed first), receives 1 + COUNT
//!                    messages of VARIANT and answers one byte after the first
//!                    and after the last
//! compare peer-pong FLAVOR [raw]
//!                    the server process of a `peer_rt` measurement: answers
//!                    every "ping" with "pong" until the client closes (`raw`:
//!                    as many bytes back, unparsed, the rows' ceiling)
//! ```
//!
//! Requests (`"op"`): `serde` {struct, mode, n, min_time}, `floor` {n,
//! min_time} (reading the boxed integer tuple once, summing it: the memory
//! floor of the boxed rows), `output_floor` {struct, mode, n, min_time}
//! (allocating and writing the header, frame list and element array one
//! `serde` call of that row produces: its fresh-memory floor),
//! `msg_collection` {struct, n, min_time} (`dumps` + `loads` of a message
//! carrying the collection, iterated, in a `Serialize`), `dumps` {size, min_time}, `peer` {variant,
//! size, count, flavor} (two processes: this one sends, a fresh `peer-recv`
//! receives), `peer_rt` {count, flavor, raw?} (two processes: this one asks, a
//! fresh `peer-pong` answers; `raw`: the same bytes unparsed, the ceiling), and the same in one process (both ends
//! spawned tasks of one runtime): `transport` {variant, size, count,
//! flavor}, `small_one_way` {count, flavor}, `round_trip` {count, flavor};
//! `rss` {size, deserialize},
//! `wire` {scheme, size, count, certs, raw?} (two processes: this one sends,
//! a fresh `wire-recv` receives; `raw`: length-prefixed bytes over the same
//! socket, the ceiling), `connect` {address, certs, count} (connect,
//! TLS and Dask handshakes, one `identity` call, to a running server),
//! `typed` {case, path, min_time} (a captured message, `tests/captures/conversation/<case>`,
//! through `loads`, `from_frames` (`typed_decode`), `loads+from_value`
//! (`typed_decode_value`), `dumps`, `to_frames` (`typed_encode`) or
//! `to_value+dumps` (`typed_encode_value`)),
//! `client_gather` {address, key, count, idle?} (`dask::Client::gather` of a
//! key a Python client holds, `count` times after one untimed),
//! `client_small` {address, n, size, idle?} (`Client::scatter` of `n` bytes
//! values, then `Client::gather` of them; see those functions),
//! `client_compute` {address, n} (`Client::map` of `operator:add` over `n`
//! inputs, then `wait`: wall and process CPU seconds), `client_tiny`
//! {address, count} (`submit` + `result` of one `operator:add`, `count`
//! times),
//! `reset` (drop cached values), `quit`. Timed loops run until `min_time` seconds have passed (at least
//! one call); results are seconds, never ratios: the driver pairs them.
//! `serde`, `floor`, `output_floor`, `msg_collection` and `dumps` also report the thread's CPU seconds per
//! call (`/proc/thread-self/schedstat`).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use bytes::Bytes;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{deserialize, deserialize_owned, serialize};
use framewire::transport::{Address, Connection, ConnectionBuilder, HandshakeOptions, TlsConfig};
use framewire::{dumps, Envelope, Limits, Value};
use serde_json::{json, Value as Json};

#[path = "../tests/support/certs.rs"]
mod certs;
mod common;
use common::{
    collection, deserialize_options, mode, ndarray_message, payload, ping_client, pong_server,
    rss_and_hwm, serialize_options, serialize_task, thread_cpu_secs, Flavor, Link, PingPong,
    Variant,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => serve(),
        Some("rss-recv") => rss_recv(args.get(1).map(String::as_str) == Some("deserialize")),
        Some("wire-recv") => wire_recv(
            &args[1],
            &args[2],
            args.get(3).map_or("msgs", String::as_str),
        ),
        Some("make-certs") => {
            certs::make(std::path::Path::new(&args[1]));
        }
        Some("peer-recv") => peer_recv(
            Variant::parse(&args[1]),
            args[2].parse().expect("a size"),
            args[3].parse().expect("a count"),
            Flavor::parse(&args[4]),
        ),
        Some("peer-pong") => peer_pong(
            Flavor::parse(&args[1]),
            args.get(2).map(String::as_str) == Some("raw"),
        ),
        _ => {
            // `cargo bench` runs every bench target with `--bench`: nothing to do here.
            eprintln!("compare: the worker of scripts/bench-compare (run that instead)");
        }
    }
}

/// Values kept between rounds of one row, so building them is never timed.
#[derive(Default)]
struct Cache {
    /// The collection of the current serialize row, by (name, n).
    collection: Option<((String, usize), Value)>,
    /// (collection, mode) pairs whose warm-up call has run.
    warmed: HashSet<(String, String)>,
    dumps: HashMap<usize, Value>,
    /// The payloads of the `peer` rows, by size.
    payloads: HashMap<usize, Bytes>,
    runtimes: HashMap<&'static str, tokio::runtime::Runtime>,
    /// The `client_*` rows' clients, by scheduler address and idle
    /// connections per worker: connected once and kept warm, as a Python
    /// `Client` is.
    clients: HashMap<(String, usize), framewire::dask::Client>,
    /// Keys of the `client_small` rows are new each round.
    small_round: u64,
    /// Inputs of the `client_compute` and `client_tiny` rows are new each
    /// call (their keys are tokens of them).
    compute_round: i64,
}

impl Cache {
    /// The collection `name` of `n` elements, built once and kept until
    /// another one is asked for (the previous one is freed first).
    fn collection(&mut self, name: &str, n: usize) -> &Value {
        let key = (name.to_owned(), n);
        if self.collection.as_ref().map(|(k, _)| k) != Some(&key) {
            self.collection = None;
            self.collection = Some((key, collection(name, n)));
        }
        &self.collection.as_ref().expect("cached").1
    }

    fn runtime(&mut self, flavor: &str) -> &tokio::runtime::Runtime {
        let key = match flavor {
            "1thread" => "1thread",
            _ => "2threads",
        };
        self.runtimes
            .entry(key)
            .or_insert_with(|| Flavor::parse(key).runtime())
    }
}

fn serve() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut cache = Cache::default();
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let req: Json = serde_json::from_str(&line).expect("a JSON request");
        let op = req["op"].as_str().unwrap_or("");
        if op == "quit" {
            break;
        }
        let result = handle(op, &req, &mut cache);
        writeln!(out, "{result}").expect("stdout");
        out.flush().expect("stdout");
    }
}

fn get_usize(req: &Json, key: &str) -> usize {
    req[key]
        .as_u64()
        .unwrap_or_else(|| panic!("request needs {key}")) as usize
}

/// Calls `f` until `min_time` seconds have passed; seconds per call.
fn timed(min_time: f64, f: impl FnMut()) -> (f64, u64) {
    let (per_call, _, calls) = timed_cpu(min_time, f);
    (per_call, calls)
}

/// [`timed`], with this thread's CPU seconds per call too. The clock is
/// read after each batch of calls, not after each call (a batch doubles
/// while it takes under `BATCH_SECS`), so a call of a few hundred
/// nanoseconds is not charged a clock read; `dask_peer.py` times the same
/// way.
fn timed_cpu(min_time: f64, mut f: impl FnMut()) -> (f64, f64, u64) {
    const BATCH_SECS: f64 = 0.001;
    let start = Instant::now();
    let cpu = thread_cpu_secs();
    let (mut calls, mut batch, mut last) = (0u64, 1u64, 0.0);
    loop {
        for _ in 0..batch {
            f();
        }
        calls += batch;
        let elapsed = start.elapsed().as_secs_f64();
        if elapsed >= min_time {
            let cpu = thread_cpu_secs() - cpu;
            return (elapsed / calls as f64, cpu / calls as f64, calls);
        }
        if elapsed - last < BATCH_SECS {
            batch *= 2;
        }
        last = elapsed;
    }
}

/// How `output_floor` writes a row's rebuilt array.
#[derive(Clone, Copy)]
enum Packed {
    /// A `Value` an item.
    No,
    /// An `i64` an item (`Value::IntArray`).
    Ints,
    /// A `u32` end an item over one buffer (`Value::BinArray`, contiguous).
    Offsets,
    /// A `Bytes` an item (`Value::BinArray` of separate frames).
    Bytes,
    /// The items are the frames, one each, in order (`Value::BinArray` of
    /// separate frames): the frame list, handed over by value, is the
    /// array, and no list of its own is needed.
    Frames,
}

fn handle(op: &str, req: &Json, cache: &mut Cache) -> Json {
    let min_time = req["min_time"].as_f64().unwrap_or(0.1);
    match op {
        "serde" => {
            let name = req["struct"].as_str().expect("struct").to_owned();
            let n = get_usize(req, "n");
            let mode_name = req["mode"].as_str().expect("mode");
            let opts = serialize_options(mode(mode_name));
            let de = deserialize_options();
            let warm_up = cache.warmed.insert((name.clone(), mode_name.to_owned()));
            let value = cache.collection(&name, n);
            if warm_up {
                // Untimed warm-up, once per collection and mode (first-use costs).
                match serialize(value, &opts) {
                    Ok(block) => drop(deserialize(&block, &de).expect("deserialize")),
                    Err(e) => return json!({"error": e.to_string()}),
                }
            }
            let mut frames = 0;
            let (per_call, cpu, calls) = timed_cpu(min_time, || {
                let block = serialize(std::hint::black_box(value), &opts).expect("serialize");
                frames = block.frames().len();
                // By value, as `loads` hands each block to `deserialize_blocks`.
                std::hint::black_box(deserialize_owned(block, &de).expect("deserialize"));
            });
            json!({"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls, "frames": frames})
        }
        "output_floor" => {
            // Allocating and writing the three largest buffers one `serde`
            // call of this row produces (its block's header, its frame
            // list, the rebuilt array's elements), nothing else: what any
            // implementation writing that output to fresh memory pays under
            // this process's allocator.
            let name = req["struct"].as_str().expect("struct").to_owned();
            let n = get_usize(req, "n");
            let value = cache.collection(&name, n);
            let opts = serialize_options(mode(req["mode"].as_str().expect("mode")));
            let block = serialize(value, &opts).expect("serialize");
            let frames = block.frames().len();
            // The header as it goes on the wire: the frame after frame 0.
            let header =
                dumps(&Value::Serialized(Box::new(block.clone()))).expect("dumps")[1].len();
            // The rebuilt array: `Value`s, packed integers, or packed bytes
            // (one offset an item over one buffer, or a `Bytes` an item).
            let (items, packed) = match deserialize(&block, &deserialize_options()) {
                Ok(Value::Array(items)) => (items.len(), Packed::No),
                Ok(Value::IntArray(ints)) => (ints.len(), Packed::Ints),
                Ok(Value::BinArray(bins)) => match bins.as_contiguous() {
                    Some(_) => (bins.len(), Packed::Offsets),
                    None if bins.len() == frames
                        && bins
                            .iter()
                            .zip(block.frames())
                            .all(|(b, f)| (b.as_ptr(), b.len()) == (f.as_ptr(), f.len())) =>
                    {
                        (bins.len(), Packed::Frames)
                    }
                    None => (bins.len(), Packed::Bytes),
                },
                _ => panic!("{name} does not come back as an array"),
            };
            drop(block);
            let (per_call, cpu, calls) = timed_cpu(min_time, || {
                let mut h: Vec<u8> = Vec::with_capacity(header);
                h.resize(header, 0x81); // written, not calloc's untouched zero pages
                let mut f: Vec<Bytes> = Vec::with_capacity(frames);
                f.resize(frames, Bytes::new());
                match packed {
                    Packed::Ints => {
                        let mut v: Vec<i64> = Vec::with_capacity(items);
                        v.resize(items, 1);
                        std::hint::black_box(&v);
                    }
                    Packed::Offsets => {
                        let mut v: Vec<u32> = Vec::with_capacity(items);
                        v.resize(items, 1);
                        std::hint::black_box(&v);
                    }
                    Packed::Bytes => {
                        let mut v: Vec<Bytes> = Vec::with_capacity(items);
                        v.resize(items, Bytes::new());
                        std::hint::black_box(&v);
                    }
                    Packed::Frames => {} // the frame list above
                    Packed::No => {
                        let mut v: Vec<Value> = Vec::with_capacity(items);
                        v.resize(items, Value::Nil);
                        std::hint::black_box(&v);
                    }
                }
                std::hint::black_box((&h, &f));
            });
            json!({"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls,
                   "header_bytes": header, "frames": frames, "items": items,
                   "items_are_frames": matches!(packed, Packed::Frames)})
        }
        "msg_collection" => {
            // A message carrying the collection in a `Serialize`, iterated
            // (Dask iterates a list of bytes by inference): dumps, then loads
            // with every block deserialized.
            let name = req["struct"].as_str().expect("struct").to_owned();
            let n = get_usize(req, "n");
            let value = cache.collection(&name, n).clone();
            let msg = Value::map_of([
                ("op", Value::str("update-data")),
                ("data", Value::ToSerialize(Box::new(value))),
            ]);
            let opts = serialize_options(mode("always"));
            let de = deserialize_options();
            let frames = framewire::dumps_with(&msg, &opts).expect("dumps").len();
            let (per_call, cpu, calls) = timed_cpu(min_time, || {
                let f = framewire::dumps_with(std::hint::black_box(&msg), &opts).expect("dumps");
                std::hint::black_box(framewire::loads_with(&f, &de).expect("loads"));
            });
            json!({"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls, "frames": frames})
        }
        "floor" => {
            // Reading the boxed tuple once: what any encoder of it pays.
            let n = get_usize(req, "n");
            let Value::Array(items) = cache.collection("tuple_small_ints", n) else {
                unreachable!("a boxed tuple")
            };
            let (per_call, cpu, calls) = timed_cpu(min_time, || {
                let sum = std::hint::black_box(items)
                    .iter()
                    .filter_map(|v| v.as_int()?.as_u64())
                    .fold(0u64, u64::wrapping_add);
                std::hint::black_box(sum);
            });
            json!({"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls})
        }
        "dumps" => {
            let size = get_usize(req, "size");
            let msg = cache
                .dumps
                .entry(size)
                .or_insert_with(|| serialize_task(Bytes::from(vec![1u8; size])));
            let frames = dumps(msg).expect("dumps").len();
            let (per_call, cpu, calls) = timed_cpu(min_time, || {
                std::hint::black_box(dumps(std::hint::black_box(msg)).expect("dumps"));
            });
            json!({"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls, "frames": frames})
        }
        "peer" => {
            let variant = Variant::parse(req["variant"].as_str().expect("variant"));
            let (size, count) = (get_usize(req, "size"), get_usize(req, "count"));
            let flavor = Flavor::parse(req["flavor"].as_str().unwrap_or("2threads"));
            let payload = cache
                .payloads
                .entry(size)
                .or_insert_with(|| payload(size))
                .clone();
            let rt = cache.runtime(flavor.name());
            let secs = peer_send(rt, variant, payload, count, flavor);
            json!({"secs": secs, "bytes": size * count, "count": count})
        }
        "peer_rt" => {
            let count = get_usize(req, "count");
            let flavor = Flavor::parse(req["flavor"].as_str().unwrap_or("2threads"));
            let spawned = req["client"].as_str() != Some("block_on");
            let rt = cache.runtime(flavor.name());
            let secs = if req["raw"].as_bool() == Some(true) {
                peer_round_trips_raw(rt, count, flavor)
            } else {
                peer_round_trips(rt, count, flavor, spawned)
            };
            json!({"secs": secs, "count": count})
        }
        "transport" => {
            let variant = Variant::parse(req["variant"].as_str().expect("variant"));
            let (size, count) = (get_usize(req, "size"), get_usize(req, "count"));
            let rt = cache.runtime(req["flavor"].as_str().unwrap_or("2threads"));
            let mut link = Link::new(rt, variant, size);
            let secs = link.run(rt, count as u64).as_secs_f64();
            json!({"secs": secs, "bytes": size * count, "count": count})
        }
        "small_one_way" => {
            let count = get_usize(req, "count");
            let rt = cache.runtime(req["flavor"].as_str().unwrap_or("1thread"));
            let mut link = Link::small(rt);
            let secs = link.run(rt, count as u64).as_secs_f64();
            json!({"secs": secs, "count": count})
        }
        "round_trip" => {
            let count = get_usize(req, "count");
            let rt = cache.runtime(req["flavor"].as_str().unwrap_or("1thread"));
            let mut pp = PingPong::new(rt);
            let secs = pp.run(rt, count as u64).as_secs_f64();
            json!({"secs": secs, "count": count})
        }
        "typed" => typed(req, min_time),
        #[cfg(feature = "pickle")]
        "pickle_loads" => pickle_loads(req, min_time),
        "wire" => wire_send(req),
        "connect" => connect_identity(req),
        "client_gather" => client_gather(req, cache),
        "client_small" => client_small(req, cache),
        "client_compute" => client_compute(req, cache),
        "client_tiny" => client_tiny(req, cache),
        "reset" => {
            let runtimes = std::mem::take(&mut cache.runtimes);
            *cache = Cache {
                runtimes,
                ..Cache::default()
            };
            json!({"ok": true})
        }
        "rss" => rss_send(
            get_usize(req, "size"),
            req["deserialize"].as_bool().unwrap_or(true),
        ),
        other => json!({"error": format!("unknown op {other:?}")}),
    }
}

/// The client of the `client_*` rows, connected to `address` on the
/// multi-thread runtime (once; kept between rounds). The request's `idle`
/// (default 4): idle connections it keeps per worker (0: none, a connection
/// per call, as before the pool).
fn client_for<'c>(
    address: &str,
    req: &Json,
    cache: &'c mut Cache,
) -> (&'c tokio::runtime::Runtime, &'c framewire::dask::Client) {
    use framewire::dask::{Client, ClientOptions, DEFAULT_IDLE_PER_ADDRESS};
    let idle = req["idle"]
        .as_u64()
        .map_or(DEFAULT_IDLE_PER_ADDRESS, |n| n as usize);
    let want = (address.to_owned(), idle);
    if !cache.clients.contains_key(&want) {
        cache.clients.retain(|(a, _), _| a == address);
        let rt = cache.runtime("2threads");
        let opts = ClientOptions::new().idle_connections_per_address(idle);
        let client = rt
            .block_on(Client::connect(address, opts))
            .expect("connect the client");
        cache.clients.insert(want.clone(), client);
    }
    let rt = cache.runtimes.get("2threads").expect("made above");
    (rt, &cache.clients[&want])
}

/// `client_gather` {address, key, count}: `Client::gather` of one key (an
/// array a Python client holds), `count` times after one untimed gather;
/// the seconds of each.
fn client_gather(req: &Json, cache: &mut Cache) -> Json {
    use framewire::dask::Key;
    let address = req["address"].as_str().expect("address").to_owned();
    let key = Key::from(req["key"].as_str().expect("key"));
    let count = get_usize(req, "count");
    let (rt, client) = client_for(&address, req, cache);
    rt.block_on(async {
        let keys = std::slice::from_ref(&key);
        client.wait(keys).await.expect("wait for the key");
        let size = |v: &Value| match v {
            Value::NdArray(a) => a.data().len(),
            other => framewire::dask::nbytes(other) as usize,
        };
        drop(client.gather(keys).await.expect("gather")); // warm-up, untimed
        let mut times = Vec::with_capacity(count);
        let mut bytes = 0;
        for _ in 0..count {
            let t = Instant::now();
            let got = client.gather(keys).await.expect("gather");
            times.push(t.elapsed().as_secs_f64());
            bytes = size(&got[&key]);
        }
        let pool = client.pool();
        json!({"times": times, "bytes": bytes, "opened": pool.opened(), "reused": pool.reused()})
    })
}

/// `client_small` {address, n, size}: `Client::scatter` of `n` bytes values
/// of `size` bytes under new keys, then `Client::gather` of them all
/// (checked equal), timed apart; then the keys are released, and the
/// scheduler's `who_has` polled until it has forgotten them (then 0.5 s
/// more for the worker), untimed.
fn client_small(req: &Json, cache: &mut Cache) -> Json {
    use framewire::dask::Key;
    let address = req["address"].as_str().expect("address").to_owned();
    let (n, size) = (get_usize(req, "n"), get_usize(req, "size"));
    cache.small_round += 1;
    let round = cache.small_round;
    let (rt, client) = client_for(&address, req, cache);
    let keys: Vec<Key> = (0..n)
        .map(|i| Key::from(format!("fw-small-{round}-{i}")))
        .collect();
    let values: Vec<Value> = (0..n)
        .map(|i| Value::bin(vec![(i % 251) as u8; size]))
        .collect();
    rt.block_on(async {
        let t = Instant::now();
        client
            .scatter(keys.iter().cloned().zip(values.iter().cloned()))
            .await
            .expect("scatter");
        let scatter_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let got = client.gather(&keys).await.expect("gather");
        let gather_s = t.elapsed().as_secs_f64();
        let bin = |v: &Value| match v {
            Value::Bin(b) => Some(b.clone()),
            _ => None,
        };
        for (k, v) in keys.iter().zip(&values) {
            assert_eq!(bin(&got[k]), bin(v), "{k} gathered back as sent");
        }
        drop(got);
        client.release(&keys).expect("release");
        // Untimed: the cluster forgets the keys before the next measure
        // (the other side's), so that no freeing overlaps it.
        let quiet = Instant::now();
        while quiet.elapsed().as_secs() < 30 {
            let left = client.who_has(&keys).await.expect("who_has");
            if left.values().all(Vec::is_empty) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        json!({"scatter_s": scatter_s, "gather_s": gather_s, "secs": scatter_s + gather_s, "n": n})
    })
}

/// This process's CPU seconds (user + system, `/proc/self/stat`, in the
/// kernel's clock ticks of 1/100 s).
fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // After the command name's closing parenthesis: fields 3 onwards.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f[i].parse::<f64>().expect("a tick count");
    // utime and stime are fields 14 and 15, here 11 and 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// Releases `keys` and polls the scheduler until it has forgotten them
/// (then 0.5 s more), untimed: no freeing overlaps the next measure.
async fn forget(client: &framewire::dask::Client, keys: &[framewire::dask::Key]) {
    client.release(keys).expect("release");
    let quiet = Instant::now();
    while quiet.elapsed().as_secs() < 30 {
        let states = client.task_status(keys).await.expect("task_status");
        if states.values().all(Option::is_none) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}

/// `client_compute` {address, n}: `Client::map` of `operator:add` over
/// `(i, round)` for `i` in `0..n` (one `update-graph`), then `wait` for all
/// of them: the wall seconds and this process's CPU seconds of the two;
/// then the keys are released and forgotten, untimed.
fn client_compute(req: &Json, cache: &mut Cache) -> Json {
    let address = req["address"].as_str().expect("address").to_owned();
    let n = get_usize(req, "n") as i64;
    cache.compute_round += 1;
    let round = cache.compute_round;
    let (rt, client) = client_for(&address, req, cache);
    let add: framewire::dask::PyFunction = "operator:add".parse().expect("a name");
    rt.block_on(async {
        let (t, cpu) = (Instant::now(), process_cpu_s());
        let keys = client.map(&add, (0..n).map(|i| [i, round])).expect("map");
        client.wait(&keys).await.expect("wait");
        let (secs, cpu_s) = (t.elapsed().as_secs_f64(), process_cpu_s() - cpu);
        // Held twice: by `map` and by `wait` (each a hold, as futures).
        client.release(&keys).expect("release");
        forget(client, &keys).await;
        json!({"secs": secs, "cpu_s": cpu_s, "n": n})
    })
}

/// `client_tiny` {address, count}: `submit` of one `operator:add(round, 1)`
/// and its `result`, `count` times (new inputs each time); the seconds of
/// each.
fn client_tiny(req: &Json, cache: &mut Cache) -> Json {
    use framewire::dask::Call;
    let address = req["address"].as_str().expect("address").to_owned();
    let count = get_usize(req, "count");
    let first = cache.compute_round + 1;
    cache.compute_round += count as i64;
    let (rt, client) = client_for(&address, req, cache);
    rt.block_on(async {
        let mut times = Vec::with_capacity(count);
        let mut keys = Vec::with_capacity(count);
        for round in first..first + count as i64 {
            let t = Instant::now();
            let add = Call::new("operator:add".parse().expect("a name"))
                .arg(round)
                .arg(1i64);
            let key = client.submit(add).expect("submit");
            // Read as Python's `result()` reads it: unpickled.
            let got = match client.result(&key).await.expect("result") {
                Value::Serialized(b) => {
                    framewire::pickle::deserialize(&b, &Default::default()).expect("a pickle")
                }
                other => other,
            };
            times.push(t.elapsed().as_secs_f64());
            assert_eq!(got, Value::from(round + 1));
            keys.push(key);
        }
        forget(client, &keys).await;
        json!({"times": times})
    })
}

/// Starts a child process of this executable with `args`; returns it and
/// the first line it prints (the port it listens on).
fn spawn_peer(args: &[&str]) -> (std::process::Child, u16) {
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn a peer");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let port = lines
        .next()
        .expect("a port line")
        .expect("read")
        .trim()
        .parse()
        .expect("a port");
    (child, port)
}

/// Binds 127.0.0.1:0, prints the port, accepts one connection.
async fn accept_one() -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    println!("{}", listener.local_addr().expect("addr").port());
    std::io::stdout().flush().expect("stdout");
    let (s, _) = listener.accept().await.expect("accept");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// The sending process of a `peer` measurement: starts a `peer-recv`
/// process, connects, sends one warm-up message and waits for its one-byte
/// answer, then times `count` messages until the receiver has answered the
/// last one. The sending loop is a task spawned on `rt` (as a server runs a
/// connection), on either runtime flavor; the receiver runs the same way.
fn peer_send(rt: &Runtime, variant: Variant, payload: Bytes, count: usize, flavor: Flavor) -> f64 {
    let (mut child, port) = spawn_peer(&[
        "peer-recv",
        variant.name(),
        &payload.len().to_string(),
        &count.to_string(),
        flavor.name(),
    ]);
    let secs = rt.block_on(async {
        let s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let (mut r, w) = s.into_split();
        let tx = variant.sender(w, &payload);
        let mut ack = [0u8; 1];
        let tx = tokio::spawn(tx.send(payload.clone(), 1))
            .await
            .expect("warm-up");
        r.read_exact(&mut ack).await.expect("an answer");
        let timed = tokio::spawn(async move {
            let t0 = Instant::now();
            let tx = tx.send(payload, count as u64).await;
            r.read_exact(&mut ack).await.expect("an answer");
            (t0.elapsed().as_secs_f64(), tx)
        });
        let (secs, tx) = timed.await.expect("the sender");
        drop(tx);
        secs
    });
    child.wait().expect("peer-recv exit");
    secs
}

/// The receiving process of a `peer` measurement (see [`peer_send`]).
fn peer_recv(variant: Variant, size: usize, count: u64, flavor: Flavor) {
    let rt = flavor.runtime();
    rt.block_on(async {
        let (r, mut w) = accept_one().await.into_split();
        let run = tokio::spawn(async move {
            let rx = variant.receiver(r, size);
            let rx = rx.recv(1).await;
            w.write_all(b"k").await.expect("answer");
            let rx = rx.recv(count).await;
            w.write_all(b"k").await.expect("answer");
            drop(rx);
        });
        run.await.expect("the receiver");
    });
}

/// The client process of a `peer_rt` measurement: starts a `peer-pong`
/// process, connects, 10 untimed round trips, then `count` timed ones, in a
/// task spawned on `rt` (`spawned`), or in `block_on` itself: on the
/// multi-thread runtime the future `block_on` runs is polled by the calling
/// thread, not a worker, so every answer is a wake-up of another thread.
fn peer_round_trips(rt: &Runtime, count: usize, flavor: Flavor, spawned: bool) -> f64 {
    let (mut child, port) = spawn_peer(&["peer-pong", flavor.name()]);
    let secs = rt.block_on(async {
        let s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut client = Connection::builder().limits(Limits::dask_compat()).build(s);
        let run = async move {
            ping_client(&mut client, 10).await;
            let t0 = Instant::now();
            ping_client(&mut client, count as u64).await;
            t0.elapsed().as_secs_f64()
        };
        if spawned {
            tokio::spawn(run).await.expect("the client")
        } else {
            run.await
        }
    });
    child.wait().expect("peer-pong exit");
    secs
}

/// The bytes of one `"ping"` (or `"pong"`) message on the wire: the
/// prelude (`N`, frame count 1, frame length 5) and frame 0, msgpack
/// `"ping"`.
fn wire_ping() -> Vec<u8> {
    let frame = dumps(&Value::str("ping")).expect("dumps");
    let env = Envelope::new(frame).expect("env");
    let mut bytes = env.prelude().to_vec();
    for frame in env.frames() {
        bytes.extend_from_slice(frame);
    }
    assert_eq!(bytes.len() as u64, env.wire_len());
    bytes
}

/// The ceiling of the `peer_rt` rows: the same set-up (two processes, a
/// task spawned on `flavor`'s runtime, `TCP_NODELAY`), the same bytes each
/// way as one `"ping"`/`"pong"` message, written whole and read whole with
/// `read_exact`: no framing, no msgpack, nothing built or parsed. What is
/// left is the runtime, the syscalls and the kernel's loopback.
fn peer_round_trips_raw(rt: &Runtime, count: usize, flavor: Flavor) -> f64 {
    let (mut child, port) = spawn_peer(&["peer-pong", flavor.name(), "raw"]);
    let ping = wire_ping();
    let secs = rt.block_on(async move {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let run = async move {
            let mut answer = vec![0u8; ping.len()];
            let mut t0 = Instant::now();
            for i in 0..10 + count {
                if i == 10 {
                    t0 = Instant::now();
                }
                s.write_all(&ping).await.expect("write");
                s.read_exact(&mut answer).await.expect("read");
            }
            t0.elapsed().as_secs_f64()
        };
        tokio::spawn(run).await.expect("the client")
    });
    child.wait().expect("peer-pong exit");
    secs
}

/// The server process of a `peer_rt` measurement (`raw`: of its ceiling,
/// answering each message's bytes with as many bytes, unparsed).
fn peer_pong(flavor: Flavor, raw: bool) {
    let rt = flavor.runtime();
    rt.block_on(async {
        let s = accept_one().await;
        if raw {
            tokio::spawn(raw_pong_server(s)).await.expect("the server");
        } else {
            tokio::spawn(pong_server(s)).await.expect("the server");
        }
    });
}

/// Reads one message's bytes at a time and writes as many back, until the
/// client closes.
async fn raw_pong_server(mut s: TcpStream) {
    let pong = wire_ping();
    let mut buf = vec![0u8; pong.len()];
    while s.read_exact(&mut buf).await.is_ok() {
        s.write_all(&pong).await.expect("write");
    }
}

/// The TLS files of a `make-certs` directory (`-`: none, plain TCP).
fn tls_config(certs: &str) -> Option<TlsConfig> {
    (certs != "-").then(|| {
        let c = certs::Certs::at(std::path::Path::new(certs));
        TlsConfig::from_pem_files(&c.ca(), &c.cert(), Some(&c.key())).expect("the TLS files")
    })
}

/// A builder with these certificates, if any.
fn builder(tls: Option<&TlsConfig>) -> ConnectionBuilder {
    let mut b = ConnectionBuilder::new();
    if let Some(config) = tls {
        b.tls(config.clone());
    }
    b
}

fn handshake_options() -> HandshakeOptions {
    {
        let mut o = HandshakeOptions::default();
        o.timeout = Some(std::time::Duration::from_secs(60));
        o
    }
}

/// The sending process of a `wire` row: starts a `wire-recv` process,
/// connects (`tcp://` or `tls://`), sends one warm-up message and waits for
/// its "ok", then times `count` messages of a `size`-byte ndarray until the
/// receiver has answered the last one. Dask's comms run the same way
/// (`benches/dask_peer.py`), each side in its own process.
fn wire_send(req: &Json) -> Json {
    let scheme = req["scheme"].as_str().expect("scheme");
    let certs = req["certs"].as_str().unwrap_or("-");
    let (size, count) = (get_usize(req, "size"), get_usize(req, "count"));
    let raw = req["raw"].as_bool() == Some(true);
    // The old ceiling: the raw loop over tokio-rustls (rustls' own records,
    // framewire's TLS path before issue 32).
    let old = req["old_tls"].as_bool() == Some(true);
    let mode = match (raw, old) {
        (true, true) => "rawold",
        (true, false) => "raw",
        _ => "msgs",
    };
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .args(["wire-recv", scheme, certs, mode])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn wire-recv");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let address = lines.next().expect("an address").expect("read");
    let tls = tls_config(certs);
    if raw {
        let (secs, suite) = raw_wire_send(&address, tls.as_ref(), size, count, old);
        child.wait().expect("wire-recv exit");
        return json!({"secs": secs, "bytes": size * count, "count": count, "cipher": suite});
    }
    let data = ndarray_message(Bytes::from(vec![1u8; size]));
    let with_last = |last: bool| {
        let mut m = data.clone(); // the same payload `Bytes`, not a copy
        if let Value::Map(entries) = &mut m {
            entries.push(("last".into(), last.into()));
        }
        m
    };
    let (more, last) = (with_last(false), with_last(true));
    let rt = Flavor::TwoThreads.runtime();
    let (secs, suite) = rt.block_on(async {
        let (mut conn, _) = builder(tls.as_ref())
            .connect(&address, &handshake_options())
            .await
            .expect("connect");
        let suite = conn.get_ref().cipher_suite();
        conn.send_value(&last).await.expect("warm-up");
        conn.recv_value().await.expect("ok").expect("ok");
        let t0 = Instant::now();
        for i in 0..count {
            let msg = if i + 1 == count { &last } else { &more };
            conn.send_value(msg).await.expect("send");
        }
        conn.recv_value().await.expect("ok").expect("ok");
        let secs = t0.elapsed().as_secs_f64();
        conn.close().await.ok();
        (secs, suite)
    });
    child.wait().expect("wire-recv exit");
    json!({"secs": secs, "bytes": size * count, "count": count, "cipher": suite})
}

/// The ceiling of the `wire` rows (`raw`): the same socket (framewire's
/// [`Socket`], TLS included), the same payload size and count, written
/// with `write_all` after an 8-byte length (its top bit: the last one) and
/// read with `read_exact` into one reused buffer; no Dask handshake,
/// nothing framed, encoded or decoded. The receiver answers one byte to
/// each message marked last, as the framed rows' receiver answers "ok".
fn raw_wire_send(
    address: &str,
    tls: Option<&TlsConfig>,
    size: usize,
    count: usize,
    old: bool,
) -> (f64, Option<String>) {
    let address = Address::parse(address).expect("an address");
    let rt = Flavor::TwoThreads.runtime();
    rt.block_on(async {
        if old {
            let tls = tls.expect("certificates");
            let tcp = TcpStream::connect(address.host_port())
                .await
                .expect("connect");
            tcp.set_nodelay(true).expect("nodelay");
            let tcp = tokio::io::BufReader::with_capacity(64 << 10, tcp);
            let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
            let mut s = tokio_rustls::TlsConnector::from(tls.client_config().clone())
                .connect(name, tcp)
                .await
                .expect("TLS");
            s.get_mut().1.set_buffer_limit(Some(1 << 20));
            let suite = s
                .get_ref()
                .1
                .negotiated_cipher_suite()
                .map(|c| format!("{:?} (tokio-rustls)", c.suite()));
            return (raw_loop(&mut s, size, count).await, suite);
        }
        let mut s = builder(tls)
            .connect_socket(&address)
            .await
            .expect("connect");
        let suite = s.cipher_suite();
        (raw_loop(&mut s, size, count).await, suite)
    })
}

/// The sending side of the raw loop: a warm-up message, then `count`
/// timed; seconds.
async fn raw_loop<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    size: usize,
    count: usize,
) -> f64 {
    let payload = vec![1u8; size];
    let send = async |s: &mut S, last: bool| {
        let head = size as u64 | u64::from(last) << 63;
        s.write_all(&head.to_le_bytes()).await.expect("write");
        s.write_all(&payload).await.expect("write");
        if last {
            s.flush().await.expect("flush");
            s.read_exact(&mut [0u8]).await.expect("the answer");
        }
    };
    send(s, true).await; // warm-up
    let t0 = Instant::now();
    for i in 0..count {
        send(s, i + 1 == count).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    s.shutdown().await.ok();
    secs
}

/// The receiving process of a raw `wire` row ([`raw_wire_send`]).
async fn raw_wire_recv<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) {
    let mut buf = Vec::new();
    let mut head = [0u8; 8];
    while s.read_exact(&mut head).await.is_ok() {
        let head = u64::from_le_bytes(head);
        let len = (head & !(1 << 63)) as usize;
        buf.resize(len, 0);
        s.read_exact(&mut buf).await.expect("the payload");
        if head >> 63 == 1 {
            s.write_all(b"k").await.expect("answer");
            s.flush().await.expect("flush");
        }
    }
}

/// The receiving process of a `wire` row (`raw`: of its ceiling).
fn wire_recv(scheme: &str, certs: &str, mode: &str) {
    let raw = mode != "msgs";
    let tls = tls_config(certs);
    let rt = Flavor::TwoThreads.runtime();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        println!("{scheme}://127.0.0.1:{port}");
        std::io::stdout().flush().expect("stdout");
        let (s, _) = listener.accept().await.expect("accept");
        if mode == "rawold" {
            s.set_nodelay(true).expect("nodelay");
            let config = tls.as_ref().expect("certificates").server_config().clone();
            let s = tokio::io::BufReader::with_capacity(64 << 10, s);
            let mut s = tokio_rustls::TlsAcceptor::from(config)
                .accept(s)
                .await
                .expect("TLS");
            s.get_mut().1.set_buffer_limit(Some(1 << 20));
            return raw_wire_recv(s).await;
        }
        if raw {
            let s = builder(tls.as_ref())
                .accept_socket(s, None)
                .await
                .expect("accept");
            return raw_wire_recv(s).await;
        }
        let (mut conn, _) = builder(tls.as_ref())
            .accept(s, &handshake_options())
            .await
            .expect("accept");
        let ok = Value::str("ok");
        while let Some(msg) = conn.recv_value().await {
            let msg = msg.expect("recv");
            assert!(matches!(msg.get("data"), Some(Value::NdArray(_))));
            if msg.get("last") == Some(&Value::Bool(true)) {
                conn.send_value(&ok).await.expect("ok");
            }
        }
    });
}

/// `count` times: connect to `address`, TLS and Dask handshakes, one
/// `{"op": "identity", "reply": true}` and its reply (timed), then close
/// (not timed). Seconds per call, each call's.
fn connect_identity(req: &Json) -> Json {
    let address = req["address"].as_str().expect("address");
    let tls = tls_config(req["certs"].as_str().unwrap_or("-"));
    let count = get_usize(req, "count");
    let identity = Value::map_of([("op", Value::str("identity")), ("reply", true.into())]);
    let rt = Flavor::OneThread.runtime();
    let times: Vec<f64> = rt.block_on(async {
        let mut times = Vec::with_capacity(count);
        for _ in 0..count {
            let t0 = Instant::now();
            let (mut conn, _) = builder(tls.as_ref())
                .connect(address, &handshake_options())
                .await
                .expect("connect");
            conn.send_value(&identity).await.expect("send");
            let reply = conn.recv_value().await.expect("a reply").expect("reply");
            times.push(t0.elapsed().as_secs_f64());
            assert!(reply.get("type").is_some(), "{reply:?}");
            conn.close().await.ok();
        }
        times
    });
    json!({"times": times})
}

/// `framewire::pickle::loads` of the pickle at `path`, the value built and
/// dropped per call (`benches/pickle.rs` has the criterion version).
#[cfg(feature = "pickle")]
fn pickle_loads(req: &Json, min_time: f64) -> Json {
    let path = req["path"].as_str().expect("path");
    let data = Bytes::from(std::fs::read(path).expect("the pickle"));
    let limits = framewire::Limits::default();
    framewire::pickle::loads(&data, &[], &limits).expect("Python's pickle");
    let (per_call, calls) = timed(min_time, || {
        let v = framewire::pickle::loads(std::hint::black_box(&data), &[], &limits);
        std::hint::black_box(v.expect("Python's pickle"));
    });
    json!({"per_call_s": per_call, "calls": calls, "bytes": data.len()})
}

/// A captured 2026.8.0 message decoded into its Rust type or encoded from
/// it, or the dynamic path on the same frames (`benches/typed.rs` has the
/// criterion version).
fn typed(req: &Json, min_time: f64) -> Json {
    use framewire::dask::{SchedulerToWorker, WorkerToScheduler};
    use framewire::serialize::{DeserializeOptions, SerializeOptions};
    use framewire::typed::{from_frames, to_frames};
    use framewire::{from_value, to_value};

    let case = req["case"].as_str().expect("case");
    let frames = common::capture_frames(case);
    assert!(!frames.is_empty(), "no capture {case}");
    let opts = DeserializeOptions::default();
    let loads = |f: &[Bytes]| framewire::loads_with(f, &opts).expect("loads");
    let (per_call, calls) = match (case, req["path"].as_str().expect("path")) {
        (_, "loads") => timed(min_time, || {
            std::hint::black_box(loads(std::hint::black_box(&frames)));
        }),
        ("compute-task_1", "typed_decode") => timed(min_time, || {
            let f = std::hint::black_box(&frames);
            std::hint::black_box(from_frames::<Vec<SchedulerToWorker>>(f, &opts).expect("typed"));
        }),
        ("compute-task_1", "typed_decode_value") => timed(min_time, || {
            let v = loads(std::hint::black_box(&frames));
            std::hint::black_box(from_value::<Vec<SchedulerToWorker>>(v).expect("typed"));
        }),
        ("task-finished_1", path) => {
            let batch: Vec<WorkerToScheduler> = from_value(loads(&frames)).expect("typed");
            let value = to_value(&batch).expect("to_value");
            assert_eq!(dumps(&value).expect("dumps"), frames, "the captured bytes");
            let sopts = SerializeOptions::default();
            assert_eq!(to_frames(&batch, &sopts).expect("to_frames"), frames);
            match path {
                "dumps" => timed(min_time, || {
                    std::hint::black_box(dumps(std::hint::black_box(&value)).expect("dumps"));
                }),
                "typed_encode" => timed(min_time, || {
                    let b = std::hint::black_box(&batch);
                    std::hint::black_box(to_frames(b, &sopts).expect("to_frames"));
                }),
                "typed_encode_value" => timed(min_time, || {
                    let v = to_value(std::hint::black_box(&batch)).expect("to_value");
                    std::hint::black_box(dumps(&v).expect("dumps"));
                }),
                other => return json!({"error": format!("no path {other:?}")}),
            }
        }
        (case, path) => return json!({"error": format!("no typed row {case}/{path}")}),
    };
    json!({"per_call_s": per_call, "calls": calls, "frames": frames.len()})
}

/// The sending side of the peak-RSS row: starts a fresh `rss-recv` process
/// (so its peak is its own), sends it one message carrying a `size`-byte
/// ndarray (sharded at 64 MiB, as Dask does) and returns its report.
fn rss_send(size: usize, deserialize: bool) -> Json {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .arg("rss-recv")
        .arg(if deserialize { "deserialize" } else { "frames" })
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn rss-recv");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let port: u16 = lines
        .next()
        .expect("a port line")
        .expect("read")
        .trim()
        .parse()
        .expect("a port");
    let msg = ndarray_message(Bytes::from(vec![1u8; size]));
    let env = Envelope::new(dumps(&msg).expect("dumps")).expect("envelope");
    let frames = env.frames().len();
    let rt = Flavor::OneThread.runtime();
    rt.block_on(async {
        let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut tx = Connection::builder().limits(Limits::dask_compat()).build(s);
        tx.send(env).await.expect("send");
        // Wait for the receiver to be done before dropping the payload.
        let _ = tx.recv().await;
    });
    let report = lines.next().expect("a report").expect("read");
    child.wait().expect("rss-recv exit");
    let mut report: Json = serde_json::from_str(&report).expect("JSON report");
    report["frames"] = json!(frames);
    report["size"] = json!(size);
    report
}

/// Receives one message and reports `VmRSS` before it and `VmHWM` after it
/// (with every frame, or the deserialized value, still alive).
fn rss_recv(deserialize: bool) {
    let rt = Flavor::OneThread.runtime();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::io::stdout().flush().expect("stdout");
        let (s, _) = listener.accept().await.expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let limits = Limits::dask_compat();
        let mut rx = Connection::builder().limits(limits.clone()).build(s);
        let (rss_before, hwm_before) = rss_and_hwm();
        let env = rx.recv().await.expect("a message").expect("recv");
        let payload: usize = env.frames().iter().skip(1).map(Bytes::len).sum();
        let kept = if deserialize {
            let value = decode(env.frames(), &limits).expect("loads");
            // Shards merge into the receive buffer: no copy.
            let de = deserialize_options().backed_by(&env);
            drop(env);
            let value = deserialize_blocks(value, &de).expect("deserialize");
            let data = match value.get("data") {
                Some(Value::NdArray(a)) => a.data().len(),
                other => panic!("expected an ndarray, got {other:?}"),
            };
            assert!(data > 0);
            Box::new(value) as Box<dyn std::any::Any>
        } else {
            Box::new(env) as Box<dyn std::any::Any>
        };
        let (rss_after, hwm_after) = rss_and_hwm();
        println!(
            "{}",
            json!({
                "rss_before": rss_before, "hwm_before": hwm_before,
                "rss_after": rss_after, "hwm_after": hwm_after,
                "payload": payload, "deserialized": deserialize,
            })
        );
        std::io::stdout().flush().expect("stdout");
        drop(kept);
        // Tell the sender we are done (any message will do).
        let ack = Envelope::new(dumps(&Value::str("ok")).expect("dumps")).expect("env");
        let _ = rx.send(ack).await;
    });
}
