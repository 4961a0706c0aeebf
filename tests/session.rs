//! The session: a connection's defaults agree with each other, and after a
//! handshake it hands out the agreed codec and the options made from it,
//! so one call sends a whole message and one receives it.

use bytes::Bytes;
use framewire::serialize::{Codec, IterateCollection, SerializeOptions};
use framewire::transport::{Connection, ConnectionBuilder, HandshakeOptions};
use framewire::{dumps, DeserializeOptions, Limits, NdArray, Value};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An array of `n` float64s.
fn floats(n: usize) -> Value {
    let data: Vec<u8> = (0..n).flat_map(|i| (i as f64).to_le_bytes()).collect();
    Value::NdArray(Box::new(
        NdArray::from_c_order("<f8", &[n as u64], Bytes::from(data)).unwrap(),
    ))
}

/// What the default options produce, the default limits accept: a 20 MB
/// frame (above strict()'s 16 MiB), 100 000 elements iterated (a 3 MB
/// collection header, above strict()'s 1 MiB msgpack frames).
#[test]
fn default_limits_accept_what_default_options_produce() {
    let elements: Vec<Value> = (0..100_000).map(|i| Value::from(i as i64)).collect();
    let msg = Value::map_of([
        ("op", Value::str("store")),
        ("array", Value::ToSerialize(Box::new(floats(2_500_000)))),
        (
            "many",
            Value::ToSerialize(Box::new(Value::Array(elements.clone()))),
        ),
    ]);
    // What comes back: the values themselves (Dask's `loads` unwraps them).
    let expected = Value::map_of([
        ("op", Value::str("store")),
        ("array", floats(2_500_000)),
        ("many", Value::Array(elements)),
    ]);
    let same = |got: &Value| got == &expected;
    // The defaults agree without a connection too.
    let frames = dumps(&msg).unwrap();
    assert!(same(
        &framewire::loads_with(&frames, &DeserializeOptions::default()).unwrap()
    ));
    let mut opts = SerializeOptions::default();
    opts.iterate = IterateCollection::Always;
    let iterated = framewire::dumps_with(&msg, &opts).unwrap();
    assert!(iterated.len() > 100_000);
    assert!(same(
        &framewire::loads_with(&iterated, &DeserializeOptions::default()).unwrap()
    ));
    // strict() is not the default, and refuses them.
    assert!(framewire::loads_with(
        &iterated,
        &DeserializeOptions::with_limits(Limits::strict())
    )
    .is_err());

    rt().block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut builder = Connection::builder();
        builder.serialize_options(opts);
        let mut tx = builder.build(a);
        let mut rx = Connection::new(b);
        assert_eq!(tx.session().limits(), &Limits::default());
        let sent = msg.clone();
        let send = tokio::spawn(async move { tx.send_value(&sent).await });
        let got = rx.recv_value().await.expect("a message").unwrap();
        send.await.unwrap().unwrap();
        assert!(same(&got), "recv_value gives back what was sent");
        assert!(rx.stats().frames_received > 100_000, "sent iterated");
    });
}

#[test]
fn session_without_a_handshake_has_no_codec() {
    let (a, _b) = tokio::io::duplex(64);
    let conn = Connection::new(a);
    let session = conn.session();
    assert!(session.negotiated().is_none());
    assert_eq!(session.codec(), None);
    assert_eq!(session.serialize_options().compression, None);
}

#[test]
fn session_after_a_handshake_compresses_with_the_agreed_codec() {
    rt().block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut ours = HandshakeOptions::default();
        ours.compression = Some(Codec::Lz4);
        let builder = ConnectionBuilder::new();
        let (left, right) = tokio::join!(builder.handshake(a, &ours), builder.handshake(b, &ours));
        let ((mut left, agreed), (mut right, _)) = (left.unwrap(), right.unwrap());
        assert_eq!(agreed.codec(), Some(Codec::Lz4));
        assert_eq!(left.session().codec(), Some(Codec::Lz4));
        assert_eq!(
            left.session().negotiated().map(|n| n.codec()),
            Some(Some(Codec::Lz4))
        );
        // Zeros compress: the sub-header on the wire names lz4, and the
        // receiver gets the array back whole.
        let zeros = Value::ToSerialize(Box::new(Value::bin(vec![0u8; 1 << 20])));
        let msg = Value::map_of([("op", Value::str("store")), ("data", zeros.clone())]);
        left.send_value(&msg).await.unwrap();
        let env = right.recv().await.unwrap().unwrap();
        assert!(
            env.wire_len() < 100_000,
            "compressed: {} bytes",
            env.wire_len()
        );
        let raw = framewire::message::decode(env.frames(), right.session().limits()).unwrap();
        let Some(Value::Serialized(block)) = raw.get("data") else {
            panic!("{raw:?}")
        };
        assert_eq!(
            block.header().get("compression"),
            Some(&Value::Array(vec![Value::str("lz4")]))
        );
        let back = framewire::loads_with(env.frames(), &right.session().deserialize_options(&env));
        assert_eq!(
            back.unwrap().get("data"),
            Some(&Value::bin(vec![0u8; 1 << 20]))
        );
        // A peer that offers nothing: nothing is compressed.
        let (a, b) = tokio::io::duplex(1 << 20);
        let plain = HandshakeOptions::default();
        let builder = ConnectionBuilder::new();
        let (l, r) = tokio::join!(builder.handshake(a, &ours), builder.handshake(b, &plain));
        let ((mut l, _), (mut r, _)) = (l.unwrap(), r.unwrap());
        assert_eq!(l.session().codec(), None);
        let (sent, env) = tokio::join!(l.send_value(&msg), r.recv());
        sent.unwrap();
        assert!(env.unwrap().unwrap().wire_len() > 1 << 20);
    });
}

/// Shards that arrive back to back merge into a slice of the receive
/// buffer: `recv_value` deserializes backed by the message's buffers.
#[test]
fn recv_value_merges_shards_without_a_copy() {
    rt().block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut builder = Connection::builder();
        builder.serialize_options({
            let mut o = SerializeOptions::default();
            o.shard_size = 1 << 20;
            o
        });
        let mut tx = builder.build(a);
        let mut rx = Connection::new(b);
        let msg = Value::map_of([("x", Value::ToSerialize(Box::new(floats(1 << 20))))]);
        let sent = msg.clone();
        let send = tokio::spawn(async move { tx.send_value(&sent).await });
        let env = rx.recv().await.unwrap().unwrap();
        send.await.unwrap().unwrap();
        assert!(env.frames().len() >= 2 + 8, "8 shards of 1 MiB");
        let value =
            framewire::loads_with(env.frames(), &rx.session().deserialize_options(&env)).unwrap();
        assert!(
            value.get("x") == Some(&floats(1 << 20)),
            "the array comes back"
        );
        let Some(Value::NdArray(a)) = value.get("x") else {
            panic!()
        };
        let data = a.data().as_ptr() as usize;
        assert!(
            env.buffers().iter().any(|b| {
                let start = b.as_ptr() as usize;
                data >= start && data + a.data().len() <= start + b.len()
            }),
            "the merged array is a slice of a receive buffer"
        );
    });
}
