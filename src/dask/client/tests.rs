//! The client's state machine, fed reports as the scheduler sends them.

use super::*;
use crate::transport::Connection;

fn op(name: &str, fields: Vec<(&'static str, Value)>) -> Value {
    let mut entries = vec![(Value::str("op"), Value::str(name))];
    entries.extend(fields.into_iter().map(|(k, v)| (Value::from_static(k), v)));
    Value::Map(entries)
}

/// The stream's reports land in the state; heartbeat intervals follow
/// the scheduler (an int too); ill-formed ops are skipped, not fatal.
#[tokio::test]
async fn reports_update_the_state() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut tx = Connection::new(a);
    let (r, _w) = Connection::new(b).into_split();
    let (changed, _) = watch::channel(0);
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        changed,
        heartbeat_ms: AtomicU64::new(5000),
        writer: Mutex::new(None),
        closing: AtomicBool::new(false),
        release: Mutex::new(String::new()),
        topics: Mutex::default(),
    });
    let reading = shared.clone();
    let task = tokio::spawn(async move {
        read_reports(&mut BatchedReader::new(r), &reading).await;
    });
    let batch = Value::Array(vec![
        op(
            "key-in-memory",
            vec![("key", Value::str("x")), ("type", Value::bin(vec![1u8]))],
        ),
        op(
            "task-erred",
            vec![("key", Value::str("bad")), ("exception", Value::Nil)],
        ),
        op(
            "cancelled-keys",
            vec![
                (
                    "keys",
                    Value::Array(vec![Value::str("c1"), Value::str("c2")]),
                ),
                ("reason", Value::str("lost dependencies")),
            ],
        ),
        // `report-key`'s answer for a key the scheduler does not know.
        op(
            "cancelled-keys",
            vec![("keys", Value::Array(vec![Value::str("u")]))],
        ),
        op(
            "lost-data",
            vec![("key", Value::Array(vec![Value::str("t"), Value::from(1)]))],
        ),
        // Hostile or odd: skipped.
        op(
            "key-in-memory",
            vec![("key", Value::map_of([("no", Value::Nil)]))],
        ),
        op(
            "adjust-heartbeat-interval",
            vec![("interval", Value::str("soon"))],
        ),
        op(
            "adjust-heartbeat-interval",
            vec![("interval", Value::Float(f64::NAN))],
        ),
        op(
            "adjust-heartbeat-interval",
            vec![("interval", Value::Float(-1.0))],
        ),
        Value::from(3),
        op(
            "adjust-heartbeat-interval",
            vec![("interval", Value::from(10))],
        ),
    ]);
    tx.send_value(&batch).await.unwrap();
    drop(tx);
    task.await.unwrap();
    let state = shared.state.lock().unwrap();
    assert_eq!(
        state.keys.get(&Key::from("x")),
        Some(&KeyState::Memory { scalar: false })
    );
    assert!(matches!(
        state.keys.get(&Key::from("bad")),
        Some(KeyState::Erred(_))
    ));
    assert_eq!(state.keys.get(&Key::from("c2")), Some(&KeyState::Cancelled));
    assert_eq!(state.keys.get(&Key::from("u")), Some(&KeyState::Unknown));
    assert_eq!(state.keys.get(&Key::from(("t", 1))), Some(&KeyState::Lost));
    assert_eq!(state.keys.len(), 6);
    assert_eq!(shared.heartbeat_ms.load(Ordering::Relaxed), 10_000);
}
