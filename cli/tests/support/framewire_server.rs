//! A tiny framewire server for the CLI tests (`tests/cli_call.rs`,
//! `tests/tap_e2e.rs`): offers lz4 and checksum trailers, answers
//! `{"op": "echo", "data": x}` with `{"status": "OK", "data": x}` (x
//! deserialized, decompressed, and serialized again with the agreed codec),
//! and records what it saw.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use framewire::message::decode;
use framewire::serialize::{self, Codec, DeserializeOptions, SerializeOptions};
use framewire::transport::{Checksums, Connection, HandshakeOptions};
use framewire::{Envelope, Limits, Value};
use tokio::net::TcpListener;

/// What the server saw of one connection.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Whether the handshake agreed on checksum trailers.
    pub checksums: bool,
    /// The codec the handshake agreed on.
    pub compression: Option<String>,
    /// For each `echo`: the `compression` entry of each block's raw
    /// sub-header, as received (before anything is decompressed).
    pub echo_codecs: Vec<Vec<Option<Value>>>,
    /// The same for each reply sent.
    pub reply_codecs: Vec<Vec<Option<Value>>>,
    /// The ops received, in order.
    pub ops: Vec<String>,
    /// How the connection ended, once it has: `eof` or the error.
    pub end: Option<String>,
}

/// The handshake this server offers.
pub fn handshake() -> HandshakeOptions {
    {
        let mut o = HandshakeOptions::default();
        o.checksums = Checksums::Offer;
        o.compression = Some(Codec::Lz4);
        o
    }
}

/// Starts the server on 127.0.0.1 (any port), in a thread of its own
/// that ends with the test process: its address, and one record per
/// connection.
pub fn start() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            while let Ok((stream, _)) = listener.accept().await {
                let record = Recorder::new(Arc::clone(&record));
                tokio::spawn(async move {
                    let end = serve(stream, &record).await;
                    record.update(|s| s.end = Some(end));
                });
            }
        });
    });
    (addr, seen)
}

/// Updates one connection's record.
struct Recorder {
    all: Arc<Mutex<Vec<Seen>>>,
    idx: usize,
}

impl Recorder {
    fn new(all: Arc<Mutex<Vec<Seen>>>) -> Recorder {
        let idx = {
            let mut v = all.lock().unwrap();
            v.push(Seen::default());
            v.len() - 1
        };
        Recorder { all, idx }
    }

    fn update(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.all.lock().unwrap()[self.idx]);
    }
}

/// The `compression` entries of the blocks in a pass-through value.
fn codecs(v: &Value, out: &mut Vec<Option<Value>>) {
    match v {
        Value::Serialized(b) | Value::Pickled(b) => {
            out.push(b.header().get("compression").cloned());
        }
        Value::Array(items) => items.iter().for_each(|x| codecs(x, out)),
        Value::Map(entries) => entries.iter().for_each(|(_, x)| codecs(x, out)),
        _ => {}
    }
}

/// One connection: handshake, then echo until the peer closes.
async fn serve(stream: tokio::net::TcpStream, record: &Recorder) -> String {
    let limits = Limits::dask_compat();
    let accepted = Connection::builder()
        .limits(limits.clone())
        .accept(stream, &handshake())
        .await;
    let (mut conn, agreed) = match accepted {
        Ok(x) => x,
        Err(e) => return format!("handshake: {e}"),
    };
    record.update(|s| {
        s.checksums = agreed.checksums();
        s.compression = agreed.codec().map(|c| c.name().to_owned());
    });
    let codec = agreed.codec();
    loop {
        let env = match conn.recv().await {
            None => return "eof".into(),
            Some(Err(e)) => return format!("recv: {e}"),
            Some(Ok(env)) => env,
        };
        let msg = match decode(env.frames(), &limits) {
            Ok(v) => v,
            Err(e) => return format!("loads: {e}"),
        };
        let op = msg
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        record.update(|s| s.ops.push(op.clone()));
        if op != "echo" {
            continue;
        }
        let mut received = Vec::new();
        codecs(&msg, &mut received);
        record.update(|s| s.echo_codecs.push(received));
        let opts = DeserializeOptions::with_limits(limits.clone());
        let msg = match serialize::deserialize_blocks(msg, &opts) {
            Ok(v) => v,
            Err(e) => return format!("deserialize: {e}"),
        };
        let data = msg.get("data").cloned().unwrap_or(Value::Nil);
        let reply = Value::map_of([
            ("status", Value::str("OK")),
            ("data", Value::ToSerialize(Box::new(data))),
        ]);
        let mut sopts = SerializeOptions::default();
        sopts.compression = codec;
        let frames = framewire::dumps_with(&reply, &sopts).unwrap();
        let mut sent = Vec::new();
        codecs(&decode(&frames, &limits).unwrap(), &mut sent);
        record.update(|s| s.reply_codecs.push(sent));
        if let Err(e) = conn.send(Envelope::new(frames).unwrap()).await {
            return format!("send: {e}");
        }
    }
}

/// Waits (bounded) until the server has seen connection `idx` end.
pub fn wait_seen(seen: &std::sync::Mutex<Vec<Seen>>, idx: usize) -> Seen {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let all = seen.lock().unwrap().clone();
        if let Some(s) = all.get(idx).filter(|s| s.end.is_some()) {
            return s.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "connection {idx}: {all:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
