//! Live transport interop with the real Python `distributed` 2026.8.0 over
//! 127.0.0.1, both directions, through `tests/dask/comm_peer.py`:
//!
//! * Python `listen` ↔ framewire `connect`: framewire sends numpy arrays
//!   (`NdArray`), bytes (`Value::ToSerialize`), collections and an op that
//!   fails; Python's handler answers, framewire checks the replies.
//! * framewire `accept` ↔ Python `connect`: Python sends
//!   `to_serialize(np.arange(10))`, bytes, collections and a 24 MB array;
//!   framewire decodes them (`deserialize_blocks`), checks them, and replies
//!   with an array and bytes that Python checks.
//!
//! Both handshakes carry a `framewire-test` extension, which Python must
//! ignore (and keep in `remote_info`). Both directions run twice: over
//! `tcp://`, and over `tls://` with mutual certificates (made by the test),
//! Python's side configured by a `distributed.security.Security`.
//!
//! These tests FAIL when Python Dask is missing: they never skip.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use bytes::Bytes;
use framewire::message;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::DeserializeOptions;
use framewire::transport::{Connection, ConnectionBuilder, HandshakeOptions, TlsConfig};
use framewire::{dumps, Envelope, Limits, NdArray, Value};
use sha2::Digest;

#[path = "support/certs.rs"]
mod certs;
#[path = "support/dask_python.rs"]
mod dask_python;
use dask_python::python;

/// The transport under test: `tcp://`, or `tls://` with a test CA and a
/// certificate that Python and framewire both present.
enum Scheme {
    Tcp,
    Tls(certs::Certs, TlsConfig),
}

impl Scheme {
    fn tls(tag: &str) -> Scheme {
        let c = certs::scratch(&format!("pytls-{tag}"));
        let config = TlsConfig::from_pem_files(&c.ca(), &c.cert(), Some(&c.key())).unwrap();
        Scheme::Tls(c, config)
    }
    fn name(&self) -> &'static str {
        match self {
            Scheme::Tcp => "tcp",
            Scheme::Tls(..) => "tls",
        }
    }
    fn config(&self) -> Option<&TlsConfig> {
        match self {
            Scheme::Tcp => None,
            Scheme::Tls(_, config) => Some(config),
        }
    }
    /// A builder with the limits of these tests and the certificates, if any.
    fn builder(&self) -> ConnectionBuilder {
        let mut b = ConnectionBuilder::new();
        b.limits(limits());
        if let Scheme::Tls(_, config) = self {
            b.tls(config.clone());
        }
        b
    }
    /// `args` for comm_peer.py, with `--tls CA CERT KEY` for TLS.
    fn peer(&self, args: &[&str]) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if let Scheme::Tls(c, _) = self {
            args.push("--tls".into());
            for f in [c.ca(), c.cert(), c.key()] {
                args.push(f.display().to_string());
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        peer(&args)
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn peer(args: &[&str]) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(python())
        .arg(root().join("tests/dask/comm_peer.py"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start comm_peer.py");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

fn limits() -> Limits {
    Limits::dask_compat()
}

fn opts() -> HandshakeOptions {
    HandshakeOptions::default().extension("test", Value::str("v1"))
}

fn decode(env: &Envelope) -> Value {
    let value = message::decode(env.frames(), &limits()).expect("loads");
    deserialize_blocks(value, &DeserializeOptions::with_limits(limits())).expect("deserialize")
}

fn message(value: &Value) -> Envelope {
    Envelope::new(dumps(value).expect("dumps")).expect("envelope")
}

fn f64s(values: impl IntoIterator<Item = f64>) -> Bytes {
    values
        .into_iter()
        .flat_map(f64::to_le_bytes)
        .collect::<Vec<u8>>()
        .into()
}

fn float(v: Option<&Value>) -> f64 {
    match v {
        Some(Value::Float(f)) => *f,
        other => panic!("expected a float, got {other:?}"),
    }
}

fn int(v: Option<&Value>) -> i128 {
    v.and_then(Value::as_int)
        .unwrap_or_else(|| panic!("expected an int, got {v:?}"))
        .as_i128()
}

fn bin(v: Option<&Value>) -> &Bytes {
    match v {
        Some(Value::Bin(b)) => b,
        other => panic!("expected bytes, got {other:?}"),
    }
}

fn array(v: Option<&Value>) -> &NdArray {
    match v {
        Some(Value::NdArray(a)) => a,
        other => panic!("expected an ndarray, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framewire_connects_to_python_listen() {
    framewire_connects_to_python(Scheme::Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framewire_connects_to_python_listen_over_tls() {
    framewire_connects_to_python(Scheme::tls("listen")).await;
}

async fn framewire_connects_to_python(scheme: Scheme) {
    let (mut child, mut lines) = scheme.peer(&["listen"]);
    let first = lines.next().expect("port line").unwrap();
    let port: serde_json::Value = serde_json::from_str(&first).unwrap();
    let port = port["port"].as_u64().unwrap() as u16;

    let address = format!("{}://127.0.0.1:{port}", scheme.name());
    let (mut conn, agreed) = scheme
        .builder()
        .connect(&address, &opts())
        .await
        .expect("connect + handshake");
    let our_suite = conn.get_ref().cipher_suite();
    assert_eq!(our_suite.is_some(), scheme.config().is_some());
    assert_eq!(agreed.pickle_protocol(), 5);
    assert_eq!(agreed.codec(), None);
    // The Python peer's handshake carries its interpreter's version.
    assert_eq!(agreed.peer_python(), Some(dask_python::python_version()));
    assert!(
        agreed.peer_extensions().is_empty(),
        "Python offers no extensions"
    );
    assert!(!agreed.agreed("test"));

    let mut call = async |msg: Value| -> Value {
        conn.send(message(&msg)).await.expect("send");
        decode(&conn.recv().await.expect("a reply").expect("a valid reply"))
    };

    // Python saw our handshake, extension key included, and negotiated the same.
    let info = call(Value::map_of([("op", "info".into())])).await;
    let remote = info.get("remote_info").unwrap();
    assert_eq!(remote.get("framewire-test"), Some(&Value::str("v1")));
    assert_eq!(int(remote.get("pickle-protocol")), 5);
    assert_eq!(remote.get("compression"), Some(&Value::Nil));
    let options = info.get("options").unwrap();
    assert_eq!(int(options.get("pickle-protocol")), 5);
    assert_eq!(options.get("compression"), Some(&Value::Nil));
    // Over TLS, Python's ssl module agreed TLS 1.3 with us.
    match (&scheme, info.get("tls")) {
        (Scheme::Tcp, None) => {}
        (Scheme::Tls(..), Some(tls)) => {
            assert_eq!(tls.get("version"), Some(&Value::str("TLSv1.3")), "{tls:?}");
            assert_eq!(
                tls.get("cipher"),
                Some(&Value::str("TLS_AES_256_GCM_SHA384"))
            );
            assert_eq!(our_suite.as_deref(), Some("TLS13_AES_256_GCM_SHA384"));
        }
        (_, other) => panic!("{}: tls info {other:?}", scheme.name()),
    }

    // An 8 MB float64 array (a large frame on both sides' paths).
    let n = 1_000_000u64;
    let data = f64s((0..n).map(|i| i as f64 * 0.5));
    let arr = NdArray::from_c_order("<f8", &[n], data).unwrap();
    let reply = call(Value::map_of([
        ("op", "sum".into()),
        ("array", Value::NdArray(Box::new(arr))),
    ]))
    .await;
    assert_eq!(reply.get("status"), Some(&Value::str("OK")));
    assert_eq!(float(reply.get("sum")), 0.5 * (n * (n - 1) / 2) as f64);
    assert_eq!(reply.get("dtype"), Some(&Value::str("float64")));
    assert_eq!(reply.get("shape"), Some(&Value::Array(vec![n.into()])));
    assert_eq!(float(reply.get("first")), 0.0);

    // A small 2-D int64 array.
    let ints: Bytes = (1i64..=6)
        .flat_map(i64::to_le_bytes)
        .collect::<Vec<u8>>()
        .into();
    let arr = NdArray::from_c_order("<i8", &[2, 3], ints).unwrap();
    let reply = call(Value::map_of([
        ("op", "sum".into()),
        ("array", Value::NdArray(Box::new(arr))),
    ]))
    .await;
    assert_eq!(float(reply.get("sum")), 21.0);
    assert_eq!(reply.get("dtype"), Some(&Value::str("int64")));
    assert_eq!(
        reply.get("shape"),
        Some(&Value::Array(vec![2.into(), 3.into()]))
    );

    // 300 KiB of bytes out of band; Python answers with them reversed, out of band.
    let payload: Bytes = (0..300 * 1024)
        .map(|i| (i * 7 % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let reply = call(Value::map_of([
        ("op", "bytes".into()),
        (
            "payload",
            Value::ToSerialize(Box::new(Value::Bin(payload.clone()))),
        ),
    ]))
    .await;
    assert_eq!(int(reply.get("len")), payload.len() as i128);
    let sha = hex::encode(sha2::Sha256::digest(&payload));
    assert_eq!(reply.get("sha256"), Some(&Value::str(&sha)));
    let reversed: Vec<u8> = payload.iter().rev().copied().collect();
    assert_eq!(&bin(reply.get("reversed"))[..], &reversed[..]);

    // Collections and scalars come back as sent (tuples are arrays on the wire).
    let data = Value::map_of([
        (
            "ints",
            Value::Array(vec![1.into(), (-2).into(), u64::MAX.into()]),
        ),
        ("text", "naïve ☃".into()),
        ("nil", Value::Nil),
        ("flag", true.into()),
        ("half", 0.5.into()),
        ("blob", Value::bin(vec![0u8, 1, 2, 255])),
        (
            "nested",
            Value::Array(vec![Value::map_of([("k", Value::Array(vec![]))])]),
        ),
    ]);
    let reply = call(Value::map_of([
        ("op", "echo".into()),
        ("data", data.clone()),
    ]))
    .await;
    assert_eq!(reply.get("type"), Some(&Value::str("dict")));
    assert_eq!(reply.get("data"), Some(&data));

    // An error reply, as Dask's RPC handlers send it.
    let reply = call(Value::map_of([
        ("op", "fail".into()),
        ("text", "boom".into()),
    ]))
    .await;
    assert_eq!(reply.get("status"), Some(&Value::str("error")));
    let text = reply.get("exception_text").and_then(Value::as_str).unwrap();
    assert!(text.contains("boom"), "{text}");
    assert!(reply.get("exception").is_some());
    assert!(reply
        .get("traceback_text")
        .and_then(Value::as_str)
        .is_some());

    // close: Python answers "OK" and closes; the stream then ends cleanly.
    let reply = call(Value::map_of([("op", "close".into())])).await;
    assert_eq!(reply, Value::str("OK"));
    assert!(conn.recv().await.is_none(), "clean close after OK");
    assert!(!conn.is_poisoned());
    drop(conn);
    assert!(child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_connects_to_framewire_accept() {
    python_connects_to_framewire(Scheme::Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_connects_to_framewire_accept_over_tls() {
    python_connects_to_framewire(Scheme::tls("accept")).await;
}

async fn python_connects_to_framewire(scheme: Scheme) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let (mut child, mut lines) = scheme.peer(&["connect", &port]);
    let (stream, _) = listener.accept().await.unwrap();
    let (mut conn, agreed) = scheme
        .builder()
        .accept(stream, &opts())
        .await
        .expect("accept + handshake");
    assert_eq!(
        conn.get_ref().cipher_suite().is_some(),
        scheme.config().is_some()
    );
    assert_eq!(agreed.pickle_protocol(), 5);
    assert_eq!(agreed.codec(), None);
    assert!(!agreed.agreed("test"));

    let mut got = Vec::new();
    for _ in 0..5 {
        let env = conn
            .recv()
            .await
            .expect("a message")
            .expect("a valid message");
        got.push((env.clone(), decode(&env)));
    }

    // 1: to_serialize(np.arange(10))
    let (_, m) = &got[0];
    assert_eq!(m.get("op"), Some(&Value::str("array")));
    let a = array(m.get("data"));
    assert_eq!((a.dtype(), a.shape()), ("<i8", &[10u64][..]));
    let expect: Vec<u8> = (0i64..10).flat_map(i64::to_le_bytes).collect();
    assert_eq!(&a.to_c_order()[..], &expect[..]);

    // 2: to_serialize(bytes) and an in-band bytes value
    let (_, m) = &got[1];
    assert_eq!(&bin(m.get("data"))[..], &b"hello world".repeat(1000)[..]);
    assert_eq!(&bin(m.get("raw"))[..], b"\x00\x01");

    // 3: collections (tuples and lists are both arrays)
    let (_, m) = &got[2];
    assert_eq!(
        m.get("tuple"),
        Some(&Value::Array(vec![1.into(), "two".into(), 3.5.into()]))
    );
    assert_eq!(m.get("list"), Some(&Value::Array(vec![1.into(), 2.into()])));
    assert_eq!(
        m.get("nested"),
        Some(&Value::map_of([(
            "a",
            Value::Array(vec![Value::Nil, true.into()])
        )]))
    );

    // 4: a 24 MB float64 array: its frame went through the large-buffer path
    // and the array's data is that frame, not a copy.
    let (env, m) = &got[3];
    let a = array(m.get("data"));
    assert_eq!((a.dtype(), a.shape()), ("<f8", &[3_000_000u64][..]));
    let data = a.data();
    let big = env
        .frames()
        .iter()
        .find(|f| f.len() == data.len())
        .expect("the data frame");
    assert_eq!(
        big.as_ptr(),
        data.as_ptr(),
        "the array is a view of the received frame"
    );
    let at = |i: usize| f64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((at(0), at(1), at(2_999_999)), (0.0, 1.0, 2_999_999.0));
    let sum: f64 = (0..3_000_000).map(at).sum();
    assert_eq!(sum, float(m.get("sum")));

    // 5: what Python negotiated, and that it kept our extension key.
    let (_, m) = &got[4];
    let options = m.get("options").unwrap();
    assert_eq!(int(options.get("pickle-protocol")), 5);
    assert_eq!(options.get("compression"), Some(&Value::Nil));
    assert_eq!(m.get("remote_extension"), Some(&Value::str("v1")));

    // Reply with an array and bytes; Python checks them.
    let arr = NdArray::from_c_order("<f8", &[2, 3], f64s((0..6).map(|i| i as f64 + 0.5))).unwrap();
    let payload: Bytes = (0..=255u8)
        .cycle()
        .take(256 * 512)
        .collect::<Vec<u8>>()
        .into();
    let reply = Value::map_of([
        ("status", "OK".into()),
        ("received", 5.into()),
        ("array", Value::NdArray(Box::new(arr))),
        ("payload", Value::ToSerialize(Box::new(Value::Bin(payload)))),
    ]);
    conn.send(message(&reply)).await.expect("send reply");

    let line = lines.next().expect("Python's verdict").unwrap();
    let verdict: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(verdict["ok"], true, "Python: {verdict}");
    assert_eq!(verdict["array_sum"], 18.0);
    assert!(conn.recv().await.is_none(), "Python closed cleanly");
    assert!(child.wait().unwrap().success());
}

/// Checksum trailers (SPEC.md §6.2) against a real Python peer: Python
/// never offers them, so `Require` fails the handshake and `Offer` falls
/// back to plain Dask messages; and a message that carries a trailer anyway
/// (an orphan frame) is still read by Python's `loads`, value intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_ignores_checksum_offers_and_reads_a_message_with_a_trailer() {
    use framewire::transport::{Checksums, HandshakeError, TransportError};

    // Require: refused.
    let (mut child, mut lines) = peer(&["listen"]);
    let first = lines.next().expect("port line").unwrap();
    let port: serde_json::Value = serde_json::from_str(&first).unwrap();
    let port = port["port"].as_u64().unwrap() as u16;
    let mut require = opts();
    require.checksums = Checksums::Require;
    let refused = Connection::builder()
        .limits(limits())
        .connect(&format!("127.0.0.1:{port}"), &require)
        .await;
    assert!(matches!(
        refused,
        Err(TransportError::Handshake(HandshakeError::ChecksumRequired))
    ));
    child.kill().ok();
    child.wait().ok();

    // Offer: not agreed; then a hand-made trailer on one message.
    let (mut child, mut lines) = peer(&["listen"]);
    let first = lines.next().expect("port line").unwrap();
    let port: serde_json::Value = serde_json::from_str(&first).unwrap();
    let port = port["port"].as_u64().unwrap() as u16;
    let mut offer = opts();
    offer.checksums = Checksums::Offer;
    let (mut conn, agreed) = Connection::builder()
        .limits(limits())
        .connect(&format!("127.0.0.1:{port}"), &offer)
        .await
        .expect("connect + handshake");
    assert!(!agreed.checksums());

    let data = Value::map_of([
        ("x", Value::from(7u64)),
        (
            "payload",
            Value::ToSerialize(Box::new(Value::bin(vec![5u8; 100_000]))),
        ),
    ]);
    let msg = Value::map_of([("op", Value::str("echo")), ("data", data.clone())]);
    let mut frames = dumps(&msg).unwrap();
    let mut trailer = Vec::new();
    for f in &frames {
        trailer.extend_from_slice(&crc32fast::hash(f).to_le_bytes());
    }
    let table: Vec<u8> = frames
        .iter()
        .flat_map(|f| (f.len() as u64).to_le_bytes())
        .collect();
    trailer.extend_from_slice(&crc32fast::hash(&table).to_le_bytes());
    frames.push(Bytes::from(trailer));
    conn.send(Envelope::new(frames).unwrap())
        .await
        .expect("send");
    let reply = decode(&conn.recv().await.expect("a reply").expect("a valid reply"));
    assert_eq!(reply.get("status"), Some(&Value::str("OK")), "{reply:?}");
    // Python echoes the bytes back inline (its handler returns them as they are).
    let plain = Value::map_of([
        ("x", Value::from(7u64)),
        ("payload", Value::bin(vec![5u8; 100_000])),
    ]);
    assert!(
        reply.get("data") == Some(&plain),
        "Python did not decode the message intact"
    );
    drop(conn);
    child.wait().ok();
}

/// The TCP options of a framewire connection equal those Dask's own comm
/// sets (`set_tcp_timeout`, read back from a real Python comm's socket by
/// tests/dask/tcp_timeout_peer.py) for every `distributed.comm.timeouts.tcp`
/// tried, and both refuse a timeout under 11 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_timeouts_are_set_as_dask_sets_them() {
    const TIMEOUTS: [u64; 9] = [10, 11, 12, 19, 30, 45, 60, 100, 301];
    let out = Command::new(python())
        .arg(root().join("tests/dask/tcp_timeout_peer.py"))
        .args(TIMEOUTS.map(|t| t.to_string()))
        .stderr(Stdio::null())
        .output()
        .expect("run tcp_timeout_peer.py");
    let line = String::from_utf8_lossy(&out.stdout);
    let dask: serde_json::Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("tcp_timeout_peer.py: {e} ({}): {line}", out.status));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    for t in TIMEOUTS {
        let python = &dask[t.to_string()];
        let secs = std::time::Duration::from_secs(t);
        if t < 11 {
            assert!(
                python["refused"]
                    .as_str()
                    .unwrap()
                    .contains("Timeout too low"),
                "{t}: {python}"
            );
            let refused = std::panic::catch_unwind(|| {
                ConnectionBuilder::new().tcp_timeout(Some(secs));
            });
            assert!(refused.is_err(), "{t} s: framewire accepted it");
            let stream = std::net::TcpStream::connect(addr).unwrap();
            stream.set_nonblocking(true).unwrap();
            let socket =
                framewire::transport::Socket::Tcp(tokio::net::TcpStream::from_std(stream).unwrap());
            let err = socket.set_tcp_timeout(Some(secs)).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
            continue;
        }
        let mut builder = ConnectionBuilder::new();
        builder.tcp_timeout(Some(secs));
        let address = framewire::transport::Address::Tcp(addr.to_string());
        let accepted = async {
            let stream = listener.accept().await.unwrap().0;
            let plain = ConnectionBuilder::new();
            let socket = plain.accept_socket(stream, None).await.unwrap();
            socket.set_tcp_timeout(Some(secs)).unwrap();
            socket
        };
        let (connected, accepted) = tokio::join!(builder.connect_socket(&address), accepted);
        let connected = connected.unwrap();
        for (side, socket) in [
            ("connect_socket", &connected),
            ("set_tcp_timeout", &accepted),
        ] {
            let sock = socket2::SockRef::from(socket.tcp());
            let ours = serde_json::json!({
                "keepalive": sock.keepalive().unwrap() as u8,
                "idle": sock.tcp_keepalive_time().unwrap().as_secs(),
                "interval": sock.tcp_keepalive_interval().unwrap().as_secs(),
                "probes": sock.tcp_keepalive_retries().unwrap(),
                "user_timeout_ms": sock.tcp_user_timeout().unwrap().map_or(0, |d| d.as_millis()),
            });
            assert_eq!(
                &ours, python,
                "tcp_timeout {t} s, {side}: framewire vs Dask"
            );
        }
    }
}
