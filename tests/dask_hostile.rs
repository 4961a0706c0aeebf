//! Hostile input to the typed Dask messages: wrong types, missing fields,
//! unknown variants and ops, huge declared collections. Every case must end
//! in a typed error — `DecodeError::Field` naming the field's path for what
//! does not fit a Rust type, a msgpack error for what the msgpack layer
//! refuses before serde sees it — never in a panic; declared sizes are
//! bounded by `Limits`, checked with the counting allocator of
//! `tests/common` (as `tests/hostile.rs` does for the layers below).
//!
//! The messages are real ones (`tests/captures/conversation/`) with one
//! field made wrong. Each goes through the direct path too
//! (`framewire::typed::from_frames`), which must accept and refuse exactly
//! what `loads` + `from_value` do, with the same value or error, under the
//! same allocation bounds.
#![cfg(feature = "dask")]

mod common;

use std::path::Path;

use bytes::Bytes;
use framewire::dask::{
    BatchedReader, ComputeTask, HeartbeatReply, Key, Keys, RegisterWorkerReply, SchedulerRequest,
    SchedulerToClient, SchedulerToWorker, StartStop, TaskFinished, WorkerRequest,
    WorkerToScheduler,
};
use framewire::transport::{Connection, TransportError};
use framewire::{
    message, DecodeError, Envelope, Limits, MessageError, MsgpackError, Position, Value,
};
use serde::Deserialize;

use common::{bounded, on_small_stack, SMALL};

// ---- real messages -------------------------------------------------------------

fn limits() -> Limits {
    Limits::dask_compat()
}

/// Frame 0 of a conversation capture, pass-through.
fn capture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/captures/conversation")
        .join(name)
        .join("wire.bin");
    let wire = Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")));
    let (env, _) = Envelope::decode(&wire, &limits()).unwrap();
    message::decode(env.frames(), &limits()).unwrap()
}

/// The first op of a capture (the message itself when it is not a batch).
fn op_of(name: &str) -> Value {
    match capture(name) {
        Value::Array(mut items) => items.remove(0),
        v => v,
    }
}

/// Every typed op map of the captures, with the channel that reads it.
fn typed_ops() -> Vec<(String, Channel, Value)> {
    use Channel::*;
    let stream = |name: &str, ch: Channel| {
        let v = op_of(name);
        (name.to_owned(), ch, v)
    };
    vec![
        stream("compute-task_1", SchedulerToWorker),
        stream("compute-task_2", SchedulerToWorker),
        stream("free-keys_1", SchedulerToWorker),
        stream("acquire-replicas_1", SchedulerToWorker),
        stream("remove-replicas_1", SchedulerToWorker),
        stream("steal-request_1", SchedulerToWorker),
        stream("worker-status-change_1", SchedulerToWorker),
        stream("close_1", SchedulerToWorker),
        stream("task-finished_1", WorkerToScheduler),
        stream("task-erred_1", WorkerToScheduler),
        stream("release-worker-data_1", WorkerToScheduler),
        stream("add-keys_1", WorkerToScheduler),
        stream("reschedule_1", WorkerToScheduler),
        stream("steal-response_1", WorkerToScheduler),
        stream("worker-status-change_2", WorkerToScheduler),
        stream("keep-alive_1", WorkerToScheduler),
        stream("close-stream_1", WorkerToScheduler),
        stream("stream-start_1", SchedulerToClient),
        stream("task-erred_2", SchedulerToClient),
        stream("get_data_1", WorkerRequest),
        stream("get_data_2", WorkerRequest),
        stream("update_data_2", WorkerRequest),
        stream("gather_2", WorkerRequest),
        stream("free_keys_1", WorkerRequest),
        stream("identity_2", WorkerRequest),
        stream("register-worker_1", SchedulerRequest),
        stream("heartbeat_worker_1", SchedulerRequest),
        stream("gather_1", SchedulerRequest),
        stream("scatter_1", SchedulerRequest),
        stream("update_data_1", SchedulerRequest),
        stream("identity_1", SchedulerRequest),
        stream("close_2", SchedulerRequest),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Channel {
    SchedulerToWorker,
    WorkerToScheduler,
    SchedulerToClient,
    WorkerRequest,
    SchedulerRequest,
}

/// What the channel enum's `from_value` made of `v`: `Ok(Some(variant))`
/// for a typed op, `Ok(None)` for `Other`.
fn decode(ch: Channel, v: Value) -> Result<Option<String>, DecodeError> {
    fn name(x: &impl std::fmt::Debug) -> Option<String> {
        let d = format!("{x:?}");
        let variant = d.split(['(', ' ']).next().unwrap_or_default().to_owned();
        (variant != "Other").then_some(variant)
    }
    Ok(match ch {
        Channel::SchedulerToWorker => name(&SchedulerToWorker::from_value(v)?),
        Channel::WorkerToScheduler => name(&WorkerToScheduler::from_value(v)?),
        Channel::SchedulerToClient => name(&SchedulerToClient::from_value(v)?),
        Channel::WorkerRequest => name(&WorkerRequest::from_value(v)?),
        Channel::SchedulerRequest => name(&SchedulerRequest::from_value(v)?),
    })
}

/// `v` with `path` (field names from the top) set to `new` (`None`: removed).
fn with(v: &Value, path: &[&str], new: Option<Value>) -> Value {
    let Value::Map(entries) = v else {
        panic!("not a map at {path:?}: {v:?}")
    };
    let (first, rest) = path.split_first().expect("a path");
    let mut out = Vec::with_capacity(entries.len());
    let mut found = false;
    for (k, val) in entries {
        if k.as_str() == Some(*first) {
            found = true;
            match (rest.is_empty(), &new) {
                (true, Some(n)) => out.push((k.clone(), n.clone())),
                (true, None) => {}
                (false, _) => out.push((k.clone(), with(val, rest, new.clone()))),
            }
        } else {
            out.push((k.clone(), val.clone()));
        }
    }
    assert!(found, "no field {first} in {v:?}");
    Value::Map(out)
}

/// The first entry's key of the map at `field`.
fn first_key(v: &Value, field: &str) -> Value {
    v.get(field).and_then(Value::as_map).expect("a map")[0]
        .0
        .clone()
}

/// Replaces item `i` of the array at `field` (or the value of the map entry
/// `key`) with `new`.
fn with_item(v: &Value, field: &str, at: Result<usize, &Value>, new: Value) -> Value {
    let inner = v.get(field).expect("the field").clone();
    let replaced = match (inner, at) {
        (Value::Array(mut items), Ok(i)) => {
            items[i] = new;
            Value::Array(items)
        }
        (Value::Map(mut entries), Err(key)) => {
            let entry = entries.iter_mut().find(|(k, _)| k == key).expect("the key");
            entry.1 = new;
            Value::Map(entries)
        }
        (other, at) => panic!("{field}: cannot replace {at:?} in {other:?}"),
    };
    with(v, &[field], Some(replaced))
}

#[track_caller]
fn assert_field_error(r: Result<Option<String>, DecodeError>, path: &str, message: &str) {
    match r {
        Err(DecodeError::Field {
            path: p,
            message: m,
        }) => {
            assert_eq!(p, path, "path (message: {m})");
            assert!(
                m.contains(message),
                "{path}: {m:?} does not say {message:?}"
            );
        }
        other => panic!("expected DecodeError::Field at {path:?}, got {other:?}"),
    }
}

// ---- wrong types ------------------------------------------------------------------

/// A wrong type anywhere in a known op is `DecodeError::Field` with the
/// path of the field (not `Other`: the op is known, its fields are wrong).
#[test]
fn wrong_types_name_their_field() {
    use Channel::*;
    let compute = op_of("compute-task_1");
    let dep = first_key(&compute, "who_has");
    let dep_name = dep.as_str().unwrap().to_owned();
    let finished = op_of("task-finished_1");
    let register = op_of("register-worker_1");
    let heartbeat = op_of("heartbeat_worker_1");
    let get_data = op_of("get_data_1");

    let cases: Vec<(&str, Channel, Value, String, &str)> = vec![
        (
            "run_id as a str",
            SchedulerToWorker,
            with(&compute, &["run_id"], Some(Value::str("1"))),
            "run_id".into(),
            "expected i64",
        ),
        (
            "who_has entry not a list",
            SchedulerToWorker,
            with_item(
                &compute,
                "who_has",
                Err(&dep),
                Value::str("tcp://127.0.0.1:1"),
            ),
            format!("who_has.{dep_name}"),
            "expected a sequence",
        ),
        (
            "who_has address an int",
            SchedulerToWorker,
            with_item(
                &compute,
                "who_has",
                Err(&dep),
                Value::Array(vec![Value::from(8786i64)]),
            ),
            format!("who_has.{dep_name}[0]"),
            "expected a string",
        ),
        (
            "nbytes negative",
            SchedulerToWorker,
            with_item(&compute, "nbytes", Err(&dep), Value::from(-1i64)),
            format!("nbytes.{dep_name}"),
            "expected u64",
        ),
        (
            "run_spec inline bytes instead of a block",
            SchedulerToWorker,
            with(&compute, &["run_spec"], Some(Value::bin(&b"\x80\x05."[..]))),
            "run_spec".into(),
            "expected a block",
        ),
        (
            "key a map",
            SchedulerToWorker,
            with(&compute, &["key"], Some(Value::map_of([("x", Value::Nil)]))),
            "key".into(),
            "a Dask key",
        ),
        (
            "key above i64",
            SchedulerToWorker,
            with(&compute, &["key"], Some(Value::from(u64::MAX))),
            "key".into(),
            "above i64",
        ),
        (
            "startstops[0].start a str",
            WorkerToScheduler,
            with(
                &finished,
                &["startstops"],
                Some(Value::Array(vec![Value::map_of([
                    ("action", Value::str("compute")),
                    ("start", Value::str("soon")),
                    ("stop", Value::Float(1.0)),
                ])])),
            ),
            "startstops[0].start".into(),
            "expected f64",
        ),
        (
            "thread negative",
            WorkerToScheduler,
            with(&finished, &["thread"], Some(Value::from(-5i64))),
            "thread".into(),
            "expected u64",
        ),
        (
            "nthreads above u32",
            SchedulerRequest,
            with(&register, &["nthreads"], Some(Value::from(1i64 << 40))),
            "nthreads".into(),
            "u32",
        ),
        (
            "memory_limit a float",
            SchedulerRequest,
            with(&register, &["memory_limit"], Some(Value::Float(2e9))),
            "memory_limit".into(),
            "expected u64",
        ),
        (
            "services port a str",
            SchedulerRequest,
            with(&register, &["services", "dashboard"], Some(Value::str("x"))),
            "services.dashboard".into(),
            "expected u64",
        ),
        (
            "heartbeat address nil",
            SchedulerRequest,
            with(&heartbeat, &["address"], Some(Value::Nil)),
            "address".into(),
            "expected a string",
        ),
        (
            "get_data keys an int",
            WorkerRequest,
            with(&get_data, &["keys"], Some(Value::from(3i64))),
            "keys".into(),
            "did not match any variant",
        ),
        (
            "who an array",
            WorkerRequest,
            with(&get_data, &["who"], Some(Value::Array(vec![]))),
            "who".into(),
            "expected a string",
        ),
    ];
    for (what, ch, v, path, message) in cases {
        let r = decode(ch, v);
        assert!(
            matches!(&r, Err(DecodeError::Field { .. })),
            "{what}: {r:?}"
        );
        assert_field_error(r, &path, message);
    }

    // Replies.
    let reply = op_of("heartbeat_worker-reply_1");
    let bad = with(&reply, &["heartbeat-interval"], Some(Value::str("0.5s")));
    let r = framewire::from_value::<HeartbeatReply>(bad).map(|_| None);
    assert_field_error(r, "heartbeat-interval", "expected a number");
    let reply = op_of("register-worker-reply_1");
    let bad = with(
        &reply,
        &["worker-plugins", "shuffle"],
        Some(Value::from(1i64)),
    );
    let r = framewire::from_value::<RegisterWorkerReply>(bad).map(|_| None);
    assert_field_error(r, "worker-plugins.shuffle", "bytes");
}

/// A block (or an array) where a map is expected is a wrong type, not a
/// map: the side-table marker framewire hands serde for a block (a
/// one-entry map `{"\0framewire::side-table": index}`) must not come out
/// as a map entry of the user's data.
#[test]
fn a_block_where_a_map_is_expected_is_an_error() {
    let compute = op_of("compute-task_1");
    let block = compute.get("run_spec").unwrap().clone();
    let exception = op_of("task-erred_1").get("exception").unwrap().clone();

    // nbytes: Map<Key, u64> given the __Pickled__ block.
    let bad = with(&compute, &["nbytes"], Some(block.clone()));
    let r = SchedulerToWorker::from_value(bad);
    assert!(
        matches!(&r, Err(DecodeError::Field { path, .. }) if path == "nbytes"),
        "nbytes = a block decoded as {r:?}"
    );

    // resources: Map<String, f64> given a __Serialized__ block.
    let bad = with(&op_of("register-worker_1"), &["resources"], Some(exception));
    let r = SchedulerRequest::from_value(bad);
    assert!(
        matches!(&r, Err(DecodeError::Field { path, .. }) if path == "resources"),
        "resources = a block decoded as {r:?}"
    );

    // scatter's data: Map<Key, Value> given a block: never a map whose key
    // is the marker (re-encoding it would put the marker on the wire).
    let bad = with(&op_of("scatter_1"), &["data"], Some(block));
    let r = SchedulerRequest::from_value(bad);
    assert!(
        matches!(&r, Err(DecodeError::Field { path, .. }) if path == "data"),
        "data = a block decoded as {r:?}"
    );
}

/// Decoding through serde — `framewire::from_value::<SchedulerToWorker>`,
/// a `Vec` of ops, `Connection::recv_msg`, `BatchedReader::recv` — must
/// name the field just as the enum's own `from_value` does.
#[test]
fn channel_enums_through_serde_keep_the_field_path() {
    let compute = op_of("compute-task_1");
    let bad = with(&compute, &["run_id"], Some(Value::str("1")));

    let direct = SchedulerToWorker::from_value(bad.clone()).map(|_| None);
    assert_field_error(direct, "run_id", "expected i64");

    let via_serde = framewire::from_value::<SchedulerToWorker>(bad.clone()).map(|_| None);
    assert_field_error(via_serde, "run_id", "expected i64");

    let batch = Value::Array(vec![op_of("free-keys_1"), bad]);
    let in_a_batch = framewire::from_value::<Vec<SchedulerToWorker>>(batch.clone()).map(|_| None);
    assert_field_error(in_a_batch, "[1].run_id", "expected i64");

    // Through serde's own buffering (a `flatten`ed field): the message's
    // path is in the error's message, after the outer path (no thread-local
    // carries it across the buffered conversion).
    #[derive(Debug, Deserialize)]
    struct Flat {
        #[serde(flatten)]
        #[allow(dead_code)]
        msg: SchedulerToWorker,
    }
    let buffered = framewire::from_value::<Vec<Flat>>(batch).map(|_| None);
    assert_field_error(buffered, "[1]", "run_id: invalid type");
}

/// The same through `BatchedReader::recv`, as a worker reads its stream.
#[test]
fn batched_reader_names_the_field_of_a_bad_op() {
    let compute = op_of("compute-task_1");
    let bad = with(&compute, &["run_id"], Some(Value::str("1")));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut tx = Connection::builder().deserialize_blocks(false).build(a);
        let rx = Connection::builder().deserialize_blocks(false).build(b);
        let (r, _w) = rx.into_split();
        let mut stream = BatchedReader::new(r);
        tx.send_value(&Value::Array(vec![bad])).await.unwrap();
        stream
            .recv::<SchedulerToWorker>()
            .await
            .expect("a message")
            .unwrap_err()
    });
    match err {
        TransportError::Decode(e) => {
            assert_field_error(Err(e), "run_id", "expected i64");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// A struct decoded from a map whose `op` names another message: an error
/// at `op` (the channel enums never do this: they dispatch on `op`).
#[test]
fn the_wrong_op_is_an_error_at_op() {
    let free = op_of("free-keys_1");
    let r = framewire::from_value::<ComputeTask>(free).map(|_| None);
    assert_field_error(r, "op", "compute-task");
    let r = framewire::from_value::<TaskFinished>(op_of("add-keys_1")).map(|_| None);
    assert_field_error(r, "op", "task-finished");
}

/// Unknown ops and unknown variants: the channel enums keep an unknown op
/// whole (`Other`), a map without an op too; a user's tagged enum refuses
/// an unknown variant with a typed error; an unknown field is ignored.
#[test]
fn unknown_ops_and_variants() {
    let mut unknown = op_of("compute-task_1");
    unknown = with(&unknown, &["op"], Some(Value::str("compute-task-v2")));
    assert_eq!(
        decode(Channel::SchedulerToWorker, unknown.clone()).unwrap(),
        None
    );
    let SchedulerToWorker::Other(kept) = SchedulerToWorker::from_value(unknown.clone()).unwrap()
    else {
        panic!("not Other")
    };
    assert_eq!(kept, unknown, "kept whole");

    // No op at all, an op that is not a str, not a map.
    let no_op = with(&op_of("free-keys_1"), &["op"], None);
    assert_eq!(decode(Channel::SchedulerToWorker, no_op).unwrap(), None);
    let int_op = with(&op_of("free-keys_1"), &["op"], Some(Value::from(1i64)));
    assert_eq!(decode(Channel::SchedulerToWorker, int_op).unwrap(), None);
    assert_eq!(
        decode(Channel::WorkerToScheduler, Value::str("OK")).unwrap(),
        None
    );

    // An op the channel does not carry (compute-task to the scheduler).
    assert_eq!(
        decode(Channel::WorkerToScheduler, op_of("compute-task_1")).unwrap(),
        None
    );

    // An unknown field is ignored (Dask adds fields across versions).
    let extra = match op_of("steal-request_1") {
        Value::Map(mut e) => {
            e.push((Value::str("new-in-2027"), Value::from(1i64)));
            Value::Map(e)
        }
        _ => unreachable!(),
    };
    assert_eq!(
        decode(Channel::SchedulerToWorker, extra)
            .unwrap()
            .as_deref(),
        Some("StealRequest")
    );

    // A user's tagged enum: an unknown variant is a typed error.
    #[derive(Debug, Deserialize)]
    #[serde(tag = "op", rename_all = "kebab-case")]
    #[allow(dead_code)]
    enum Mine {
        KeepAlive,
        StealRequest { key: Key, stimulus_id: String },
    }
    match framewire::from_value::<Mine>(op_of("free-keys_1")) {
        Err(DecodeError::Field { path, message }) => {
            assert_eq!(path, "op", "the tag");
            assert!(message.contains("unknown variant `free-keys`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let stolen: Mine = framewire::from_value(op_of("steal-request_1")).unwrap();
    assert!(matches!(stolen, Mine::StealRequest { .. }));
}

// ---- missing fields ------------------------------------------------------------------

/// Every field of every typed capture, removed in turn: either the type
/// lets it be absent, or the error is `missing field` at the top. What
/// Dask requires must be required: every field of `compute-task`
/// (`ComputeTaskEvent` has no defaults), and the fields the scheduler's
/// handlers take without default — except those Dask lets be nil: they
/// are `Option`s, and an absent `Option` reads as nil (issue 14: "`Option`
/// fields may be absent or nil").
#[test]
fn missing_fields_are_typed_errors() {
    let mut optional: Vec<String> = Vec::new();
    for (name, ch, v) in typed_ops() {
        let fields: Vec<String> = v
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .collect();
        for field in &fields {
            let without = with(&v, &[field], None);
            match decode(ch, without) {
                Ok(None) => assert_eq!(field, "op", "{name}: only a missing op is Other"),
                Ok(Some(_)) => optional.push(format!("{name}.{field}")),
                Err(DecodeError::Field { path, message }) => {
                    assert_eq!(path, "", "{name} without {field}");
                    assert_eq!(message, format!("missing field `{field}`"), "{name}");
                }
                Err(other) => panic!("{name} without {field}: {other:?}"),
            }
        }
    }
    // Dask requires these (tests/dask/ops-2026.8.0.md): none may be optional.
    let required = [
        "compute-task_1.key",
        "compute-task_1.run_id",
        "compute-task_1.priority",
        "compute-task_1.stimulus_id",
        "compute-task_1.who_has",
        "compute-task_1.nbytes",
        "compute-task_1.run_spec",
        "compute-task_1.actor",
        "compute-task_1.annotations",
        "task-finished_1.key",
        "task-finished_1.run_id",
        "task-finished_1.nbytes",
        "task-finished_1.type",
        "task-finished_1.typename",
        "task-finished_1.metadata",
        "task-finished_1.startstops",
        "task-finished_1.stimulus_id",
        "task-erred_1.key",
        "task-erred_1.run_id",
        "task-erred_1.stimulus_id",
        "register-worker_1.address",
        "register-worker_1.status",
        "register-worker_1.server_id",
        "register-worker_1.nthreads",
        "register-worker_1.name",
        "register-worker_1.now",
        "register-worker_1.resources",
        "register-worker_1.metrics",
        "register-worker_1.services",
        "register-worker_1.local_directory",
        "register-worker_1.versions",
        "register-worker_1.extra",
        "register-worker_1.stimulus_id",
        "heartbeat_worker_1.address",
        "heartbeat_worker_1.metrics",
        "scatter_1.data",
        "scatter_1.client",
        "free-keys_1.keys",
        "free-keys_1.stimulus_id",
        "get_data_1.keys",
    ];
    // Required by Dask but nil-able: absent reads as nil.
    let nil_able = [
        "compute-task_1.resource_restrictions",
        "compute-task_1.span_id",
        "register-worker_1.memory_limit",
        "register-worker_1.nanny",
        "scatter_1.workers",
    ];
    for n in nil_able {
        assert!(optional.iter().any(|o| o == n), "{n} should read as nil");
    }
    let wrongly_optional: Vec<&&str> = required
        .iter()
        .filter(|r| optional.iter().any(|o| o == *r))
        .collect();
    assert!(
        wrongly_optional.is_empty(),
        "Dask requires {wrongly_optional:?}, the Rust types let them be absent"
    );
}

// ---- any wrong value, anywhere: never a panic ----------------------------------------

/// Values of every kind, a block and an array included.
fn hostile_values() -> Vec<Value> {
    let block = op_of("compute-task_1").get("run_spec").unwrap().clone();
    let serialized = op_of("task-erred_1").get("exception").unwrap().clone();
    let mut deep = Value::str("x");
    for _ in 0..200 {
        deep = Value::Array(vec![deep]);
    }
    vec![
        Value::Nil,
        Value::Bool(true),
        Value::from(-1i64),
        Value::from(u64::MAX),
        Value::Int(framewire::Integer::try_from_i128(i128::from(i64::MIN)).unwrap()),
        Value::Float(f64::NAN),
        Value::Float(1.5),
        Value::str(""),
        Value::str("tcp://127.0.0.1:1"),
        Value::bin(&b"\xff\x00"[..]),
        Value::Array(vec![]),
        Value::Array(vec![Value::Nil, Value::map_of([])]),
        Value::IntArray((0..40).collect()),
        Value::map_of([]),
        Value::Map(vec![(
            Value::Array(vec![Value::str("k"), 0i64.into()]),
            Value::Nil,
        )]),
        Value::map_of([
            ("__Set__", Value::Bool(true)),
            ("as-list", Value::from(1i64)),
        ]),
        deep,
        block,
        serialized,
        framewire::to_value(
            &framewire::NdArray::from_c_order("<i8", &[2], Bytes::from(vec![0u8; 16])).unwrap(),
        )
        .unwrap(),
    ]
}

/// Every top-level field of every typed capture, replaced by each hostile
/// value: no panic; an error is `DecodeError::Field` whose path starts at
/// that field; what decodes encodes again.
#[test]
fn any_value_in_any_field_is_a_typed_error_or_a_message() {
    let values = hostile_values();
    let mut decoded = 0;
    let mut refused = 0;
    for (name, ch, v) in typed_ops() {
        let fields: Vec<String> = v
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .filter(|f| f != "op")
            .collect();
        for field in &fields {
            for (i, bad) in values.iter().enumerate() {
                let msg = with(&v, &[field], Some(bad.clone()));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let r = decode(ch, msg.clone());
                    if r.is_ok() {
                        // What decodes must encode again.
                        let again = reencode(ch, msg.clone());
                        assert!(again.is_ok(), "{again:?}");
                    }
                    if let Err(e) = direct_agrees(ch, &msg) {
                        panic!("{name}.{field} = hostile value {i}: {e}");
                    }
                    r
                }))
                .unwrap_or_else(|_| panic!("{name}.{field} = hostile value {i}: a panic"));
                match r {
                    Ok(Some(_)) => decoded += 1,
                    Ok(None) => panic!("{name}.{field}: a known op became Other"),
                    Err(DecodeError::Field { path, message }) => {
                        refused += 1;
                        let at_field = path == *field
                            || path.starts_with(&format!("{field}."))
                            || path.starts_with(&format!("{field}["));
                        assert!(
                            at_field,
                            "{name}.{field} = value {i}: error at {path:?}: {message}"
                        );
                    }
                    Err(other) => panic!("{name}.{field} = value {i}: {other:?}"),
                }
            }
        }
    }
    assert!(refused > decoded, "{refused} refused, {decoded} decoded");
}

/// `msg` as frames, read by the channel's enum through the direct path and
/// through `loads` + `from_value`: the same value or the same error.
fn direct_agrees(ch: Channel, msg: &Value) -> Result<(), String> {
    fn agree<T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        frames: &[Bytes],
    ) -> Result<(), String> {
        let opts = framewire::DeserializeOptions::with_limits(limits());
        let direct = framewire::typed::from_frames::<T>(frames, &opts);
        let dynamic = framewire::loads_with(frames, &opts).and_then(framewire::from_value::<T>);
        // Compared as printed too: a NaN field is unequal to itself.
        match direct == dynamic || format!("{direct:?}") == format!("{dynamic:?}") {
            true => Ok(()),
            false => Err(format!(
                "from_frames {direct:?}\nloads + from_value {dynamic:?}"
            )),
        }
    }
    let frames = framewire::dumps(msg).map_err(|e| format!("dumps: {e}"))?;
    match ch {
        Channel::SchedulerToWorker => agree::<SchedulerToWorker>(&frames),
        Channel::WorkerToScheduler => agree::<WorkerToScheduler>(&frames),
        Channel::SchedulerToClient => agree::<SchedulerToClient>(&frames),
        Channel::WorkerRequest => agree::<WorkerRequest>(&frames),
        Channel::SchedulerRequest => agree::<SchedulerRequest>(&frames),
    }?;
    // In a batch, after a good op: the path gains its index.
    let batch = Value::Array(vec![op_of("keep-alive_1"), msg.clone()]);
    let frames = framewire::dumps(&batch).map_err(|e| format!("dumps: {e}"))?;
    match ch {
        Channel::SchedulerToWorker => agree::<Vec<SchedulerToWorker>>(&frames),
        Channel::WorkerToScheduler => agree::<Vec<WorkerToScheduler>>(&frames),
        Channel::SchedulerToClient => agree::<Vec<SchedulerToClient>>(&frames),
        Channel::WorkerRequest => agree::<Vec<WorkerRequest>>(&frames),
        Channel::SchedulerRequest => agree::<Vec<SchedulerRequest>>(&frames),
    }
}

fn reencode(ch: Channel, v: Value) -> Result<Value, framewire::EncodeError> {
    match ch {
        Channel::SchedulerToWorker => {
            framewire::to_value(&SchedulerToWorker::from_value(v).unwrap())
        }
        Channel::WorkerToScheduler => {
            framewire::to_value(&WorkerToScheduler::from_value(v).unwrap())
        }
        Channel::SchedulerToClient => {
            framewire::to_value(&SchedulerToClient::from_value(v).unwrap())
        }
        Channel::WorkerRequest => framewire::to_value(&WorkerRequest::from_value(v).unwrap()),
        Channel::SchedulerRequest => framewire::to_value(&SchedulerRequest::from_value(v).unwrap()),
    }
}

/// A key nested as deep as `Limits::dask_compat` lets msgpack nest
/// decodes into `Key` (serde recurses) on a 2 MiB stack, the default of a
/// spawned thread and of tokio's workers, and encodes again, through both
/// paths; one level deeper is refused by the msgpack layer.
#[test]
fn a_key_nested_to_the_depth_limit_decodes_on_a_default_stack() {
    let max = limits().max_depth;
    // {"op": "free-keys", "keys": [KEY], "stimulus_id": "s"}: KEY at depth 2.
    let frame = |key_depth: usize| {
        let mut b = vec![0x83, 0xa2, b'o', b'p', 0xa9];
        b.extend_from_slice(b"free-keys");
        b.extend_from_slice(b"\xa4keys\x91");
        b.extend(std::iter::repeat_n(0x91, key_depth));
        b.extend_from_slice(b"\xa1x\xabstimulus_id\xa1s");
        Bytes::from(b)
    };
    // The map is level 1, the keys array level 2: key arrays fill the rest.
    let deepest = max - 2;
    let ok = on_small_stack(2 << 20, move || {
        let v = message::decode(&[frame(deepest)], &limits()).expect("within max_depth");
        let SchedulerToWorker::FreeKeys(m) = SchedulerToWorker::from_value(v.clone()).unwrap()
        else {
            panic!("not free-keys")
        };
        let mut depth = 0;
        let mut k = &m.keys[0];
        while let Key::Tuple(items) = k {
            depth += 1;
            k = &items[0];
        }
        assert_eq!(depth, deepest);
        // The direct paths, on the same stack.
        let opts = framewire::DeserializeOptions::with_limits(limits());
        let direct = framewire::typed::from_frames::<SchedulerToWorker>(&[frame(deepest)], &opts);
        assert!(matches!(direct, Ok(SchedulerToWorker::FreeKeys(ref d)) if *d == m));
        let written = framewire::typed::to_frames(&m, &Default::default()).unwrap();
        assert_eq!(written, [frame(deepest)]);
        framewire::to_value(&m).unwrap() == v
    });
    assert!(ok, "the deep key round-trips");
    let err = message::decode(&[frame(deepest + 1)], &limits()).unwrap_err();
    assert!(
        matches!(
            err,
            MessageError::Msgpack(MsgpackError::DepthExceeded { limit, .. }) if limit == max
        ),
        "{err:?}"
    );
}

// ---- huge declared collections ---------------------------------------------------------

/// msgpack for `{"op": "free-keys", "keys": <KEYS>, "stimulus_id": "s"}`.
fn free_keys_frame(keys: &[u8]) -> Vec<u8> {
    let mut b = vec![0x83, 0xa2, b'o', b'p', 0xa9];
    b.extend_from_slice(b"free-keys");
    b.extend_from_slice(b"\xa4keys");
    b.extend_from_slice(keys);
    b.extend_from_slice(b"\xabstimulus_id\xa1s");
    b
}

/// Frame 0 through the message layer, then into the channel enum, the
/// whole of it under the allocation bound of `tests/hostile.rs`.
/// `extra`: what the items the decoder really read may cost
/// ([`items_cost`]).
#[track_caller]
fn decode_bounded(
    frame: Vec<u8>,
    limits: &Limits,
    extra: usize,
) -> Result<SchedulerToWorker, DecodeError> {
    let frames = vec![Bytes::from(frame)];
    let len = frames[0].len();
    let dynamic = bounded(SMALL + len + extra, || {
        let v = message::decode(&frames, limits)?;
        SchedulerToWorker::from_value(v)
    });
    // The direct path: the same result, within the same bound.
    let opts = framewire::DeserializeOptions::with_limits(limits.clone());
    let direct = bounded(SMALL + len + extra, || {
        framewire::typed::from_frames::<SchedulerToWorker>(&frames, &opts)
    });
    assert_eq!(direct, dynamic, "from_frames vs loads + from_value");
    dynamic
}

/// Bytes a decoded container of `items` items may hold: its `Vec<Value>`
/// with doubling slack (as in `tests/hostile.rs`).
fn items_cost(items: usize) -> usize {
    2 * items * std::mem::size_of::<Value>()
}

/// A `Vec<Key>` field whose array declares 2^32 - 1 keys (or a map of
/// 2^32 - 1 entries, a 4 GiB str) in a few bytes: refused by the msgpack
/// layer before serde sees it, allocating no more than a small constant.
#[test]
fn huge_declared_collections_are_refused_before_serde() {
    // keys: array32 of u32::MAX items, 3 present.
    let mut keys = vec![0xdd, 0xff, 0xff, 0xff, 0xff];
    keys.extend_from_slice(b"\xa1a\xa1b\xa1c");
    let frame = free_keys_frame(&keys);
    let keys_at = frame
        .windows(5)
        .position(|w| w == [0xdd, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    for l in [Limits::dask_compat(), Limits::strict()] {
        let err = decode_bounded(frame.clone(), &l, 0).unwrap_err();
        match err {
            DecodeError::Message(MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                at,
                declared,
                ..
            })) => {
                assert_eq!(
                    at,
                    Position {
                        frame: 0,
                        offset: keys_at
                    }
                );
                assert_eq!(declared, u64::from(u32::MAX));
            }
            other => panic!("{other:?}"),
        }
    }

    // who_has: map32 of u32::MAX entries in acquire-replicas.
    let mut b = vec![0x84, 0xa2, b'o', b'p', 0xb0];
    b.extend_from_slice(b"acquire-replicas");
    b.extend_from_slice(b"\xa7who_has\xdf\xff\xff\xff\xff\xa1x\x91\xa1y");
    b.extend_from_slice(b"\xa6nbytes\x80\xabstimulus_id\xa1s");
    let err = decode_bounded(b, &limits(), 0).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Message(MessageError::Msgpack(
                MsgpackError::LengthExceedsRemaining {
                    declared: 0xffff_ffff,
                    ..
                }
            ))
        ),
        "{err:?}"
    );

    // stimulus_id: str32 of 4 GiB - 1.
    let mut b = vec![0x83, 0xa2, b'o', b'p', 0xa9];
    b.extend_from_slice(b"free-keys\xa4keys\x90\xabstimulus_id\xdb\xff\xff\xff\xffs");
    let err = decode_bounded(b, &limits(), 0).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Message(MessageError::Msgpack(
                MsgpackError::LengthExceedsRemaining {
                    declared: 0xffff_ffff,
                    ..
                }
            ))
        ),
        "{err:?}"
    );
}

/// Keys that are really there but more than `Limits::strict` lets one
/// frame hold: refused by the item budget, before serde; the keys read
/// until then cost what `tests/hostile.rs` allows them.
#[test]
fn too_many_keys_for_strict_limits_are_refused_before_serde() {
    let strict = Limits::strict();
    let n = strict.max_msgpack_items + 1;
    let mut keys = vec![0xdd];
    keys.extend_from_slice(&(n as u32).to_be_bytes());
    keys.extend(std::iter::repeat_n(0x07, n)); // the int key 7, n times
    let cost = items_cost(strict.max_msgpack_items);
    let err = decode_bounded(free_keys_frame(&keys), &strict, cost).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Message(MessageError::Msgpack(MsgpackError::ItemBudgetExceeded {
                limit,
                ..
            })) if limit == strict.max_msgpack_items
        ),
        "{err:?}"
    );
    // Within the budget, the same keys decode.
    let n = strict.max_msgpack_items - 16;
    let mut keys = vec![0xdd];
    keys.extend_from_slice(&(n as u32).to_be_bytes());
    keys.extend(std::iter::repeat_n(0x07, n));
    let frames = vec![Bytes::from(free_keys_frame(&keys))];
    let v = message::decode(&frames, &strict).unwrap();
    let SchedulerToWorker::FreeKeys(m) = SchedulerToWorker::from_value(v).unwrap() else {
        panic!("free-keys")
    };
    assert_eq!(m.keys.len(), n);
    assert!(m.keys.iter().all(|k| *k == Key::Int(7)));
}

/// The same huge declaration arriving on a connection: `recv_msg` returns
/// the msgpack error (and poisons the connection), bounded as above.
#[test]
fn huge_declared_collection_on_a_connection() {
    let mut keys = vec![0xdd, 0xff, 0xff, 0xff, 0xff];
    keys.extend_from_slice(b"\xa1a");
    let frame = Bytes::from(free_keys_frame(&keys));
    let wire = Envelope::new(vec![frame]).unwrap().to_bytes();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut rx = Connection::builder().deserialize_blocks(false).build(b);
    rt.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut a = a;
        a.write_all(&wire).await.unwrap();
        a.shutdown().await.unwrap();
    });
    let r = bounded(SMALL + wire.len(), || {
        rt.block_on(rx.recv_msg::<SchedulerToWorker>())
    });
    match r {
        Some(Err(TransportError::Decode(DecodeError::Message(MessageError::Msgpack(
            MsgpackError::LengthExceedsRemaining { declared, .. },
        ))))) => assert_eq!(declared, 0xffff_ffff),
        other => panic!("{other:?}"),
    }
    assert!(rx.is_poisoned());
}

/// `Keys`, `StartStop` and `Key` alone: the errors of the pieces.
#[test]
fn the_pieces_refuse_with_typed_errors() {
    let r = framewire::from_value::<Keys>(Value::map_of([
        ("__Set__", Value::Bool(true)),
        ("as-list", Value::from(1i64)),
    ]))
    .map(|_| None);
    assert_field_error(r, "", "did not match any variant");
    let r = framewire::from_value::<StartStop>(Value::map_of([
        ("action", Value::str("compute")),
        ("start", Value::Float(1.0)),
    ]))
    .map(|_| None);
    assert_field_error(r, "", "missing field `stop`");
    let r = framewire::from_value::<Vec<StartStop>>(Value::Array(vec![Value::map_of([
        ("action", Value::str("compute")),
        ("start", Value::Float(1.0)),
    ])]))
    .map(|_| None);
    assert_field_error(r, "[0]", "missing field `stop`");
    for bad in [
        Value::Nil,
        Value::Bool(false),
        Value::map_of([]),
        Value::from(u64::MAX),
    ] {
        let r = framewire::from_value::<Key>(bad.clone()).map(|_| None::<String>);
        assert!(
            matches!(r, Err(DecodeError::Field { ref path, .. }) if path.is_empty()),
            "{bad:?}: {r:?}"
        );
    }
}

/// `reply`: absent asks for a reply (Dask's `msg.pop("reply", True)`), nil
/// asks for none (its truth is tested), and re-encoding keeps the meaning.
#[test]
fn a_nil_reply_means_no_reply() {
    let identity = Value::map_of([("op", Value::str("identity"))]);
    let absent: framewire::dask::Identity = framewire::from_value(identity).unwrap();
    assert_eq!(absent.reply, None);
    let nil = Value::map_of([("op", Value::str("identity")), ("reply", Value::Nil)]);
    let nil: framewire::dask::Identity = framewire::from_value(nil).unwrap();
    assert_eq!(nil.reply, Some(false));
    let back = framewire::to_value(&nil).unwrap();
    assert_eq!(back.get("reply"), Some(&Value::Bool(false)));
}
