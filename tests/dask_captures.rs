//! Every real capture of `tests/captures/conversation/` (a scheduler, two
//! workers and a client of `distributed` 2026.8.0, recorded on the wire by
//! `tests/dask/gen_conversation.py`) whose op is one of the typed ops of
//! `framewire::dask` goes through the typed layer:
//!
//! 1. `wire.bin` is decoded pass-through (`Envelope::decode` +
//!    `message::decode`: blocks kept as they came);
//! 2. the message (each element of a batched list) is decoded into the
//!    channel enum its channel and direction pick, or into its reply type,
//!    and must be the variant of its op, never `Other`;
//! 3. `to_value` of the typed value must give back exactly the same `Value`
//!    (map order, int/float, bin/str, block kind included), and
//!    `message::encode` of it the capture's frames byte for byte;
//! 4. the same frames decoded with `framewire::loads` (deserialize=True, as
//!    a Dask worker reads them) still decode into the same type, with the
//!    blocks that framewire deserializes turned into their values.
//!
//! A test fails if any typed op of issue 14 has no capture that went
//! through these checks.
//!
//! The same checks run over whole sessions of five releases (2024.12.1 to
//! 2026.8.0, `tests/captures/sessions/<release>/`, recorded by
//! `gen_conversation.py --session` with the pins of
//! `tests/dask/requirements[-RELEASE].txt`): every message through the byte
//! layers, every op map and reply through the typed channels, each typed op
//! read on every release, and none untyped (no op map read as `Other`, no
//! reply without its type).
#![cfg(feature = "dask")]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use framewire::dask::{
    BroadcastReply, ClientToScheduler, ErrorReply, GatherKeysReply, GatherReply, GetDataReply,
    HasWhatReply, HeartbeatReply, Key, Keys, NcoresReply, Number, RegisterWorkerReply,
    RetireWorkersReply, RunReply, SchedulerIdentity, SchedulerRequest, SchedulerToClient,
    SchedulerToWorker, Timedelta, UpdateDataReply, WhoHasReply, WorkerIdentity, WorkerRequest,
    WorkerToScheduler,
};
use framewire::envelope::{parse_prelude, PreludeStatus};
use framewire::{message, DeserializeOptions, Envelope, Limits, Value};
use serde::de::DeserializeOwned;
use serde::Serialize;

#[path = "common/json.rs"]
mod json;
use json::Json;

// ---- the captures --------------------------------------------------------------

fn conversation_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/captures/conversation")
}

fn limits() -> Limits {
    Limits::dask_compat()
}

/// One stored capture.
struct Case {
    name: String,
    op: String,
    ops: Vec<String>,
    channel: String,
    direction: String,
    request_op: Option<String>,
    /// A request Dask refused (its reply is an error): not a message of
    /// the protocol, so only its bytes are checked.
    failed: bool,
    /// `message` of `case.json`: frame 0 in the generator's JSON (null for
    /// a session's message).
    message: Json,
    /// The frames of `frame_NNN.bin`.
    frames: Vec<Bytes>,
    /// `wire.bin`.
    wire: Bytes,
}

fn read_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Json::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn str_field(j: &Json, key: &str) -> String {
    j[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a str in {j}"))
        .to_owned()
}

/// Every case `index.json` lists, with its files.
fn cases() -> Vec<Case> {
    let dir = conversation_dir();
    let index = read_json(&dir.join("index.json"));
    let listed = index["cases"].as_arr().expect("index.json cases");
    assert!(!listed.is_empty(), "index.json lists no case");
    // Every folder is listed, and every listed case has its folder.
    let mut folders: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    folders.sort();
    let mut names: Vec<String> = listed.iter().map(|c| str_field(c, "name")).collect();
    names.sort();
    assert_eq!(folders, names, "folders of {} vs index.json", dir.display());

    listed
        .iter()
        .map(|entry| {
            let name = str_field(entry, "name");
            let path = dir.join(&name);
            let case = read_json(&path.join("case.json"));
            let n_frames = case["n_frames"].as_u64().expect("n_frames") as usize;
            let frames = (0..n_frames)
                .map(|i| {
                    let f = path.join(format!("frame_{i:03}.bin"));
                    Bytes::from(std::fs::read(&f).unwrap_or_else(|e| panic!("{f:?}: {e}")))
                })
                .collect();
            let wire = Bytes::from(std::fs::read(path.join("wire.bin")).unwrap());
            Case {
                op: str_field(&case, "op"),
                ops: case["ops"]
                    .as_arr()
                    .expect("ops")
                    .iter()
                    .map(|o| o.as_str().expect("op").to_owned())
                    .collect(),
                channel: str_field(&case, "channel"),
                direction: str_field(&case, "direction"),
                request_op: case["request_op"].as_str().map(str::to_owned),
                failed: false,
                message: case["message"].clone(),
                frames,
                wire,
                name,
            }
        })
        .collect()
}

/// One release's recorded session (`tests/captures/sessions/<release>/`,
/// `gen_conversation.py --session`): every message, as a [`Case`] named
/// `<release>#<n> ...` whose `message` is null (a session stores no JSON
/// of frame 0).
struct Session {
    release: String,
    cases: Vec<Case>,
}

fn sessions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/captures/sessions")
}

/// The frames of one enveloped message, read from its prelude here rather
/// than by `Envelope` (which [`decode_wire`] checks against them).
fn split_frames(wire: &Bytes) -> Vec<Bytes> {
    let u64_at = |i: usize| u64::from_le_bytes(wire[i..i + 8].try_into().unwrap()) as usize;
    let count = u64_at(8);
    let mut pos = 16 + 8 * count;
    let frames = (0..count)
        .map(|i| {
            let n = u64_at(16 + 8 * i);
            pos += n;
            wire.slice(pos - n..pos)
        })
        .collect();
    assert_eq!(pos, wire.len(), "the frames fill the message");
    frames
}

/// Every release's session, oldest first.
fn sessions() -> Vec<Session> {
    let root = sessions_dir();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .collect();
    // 2025.5.1 before 2025.12.0
    dirs.sort_by_key(|d| {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        name.split('.')
            .map(|n| {
                n.parse::<u32>()
                    .unwrap_or_else(|_| panic!("not a release: {name}"))
            })
            .collect::<Vec<_>>()
    });
    dirs.iter()
        .map(|dir| {
            let release = dir.file_name().unwrap().to_string_lossy().into_owned();
            let index = read_json(&dir.join("session.json"));
            assert_eq!(
                index["versions"]["distributed"].as_str(),
                Some(release.as_str()),
                "{}: the session's release",
                dir.display()
            );
            let bin = Bytes::from(std::fs::read(dir.join("session.bin")).unwrap());
            let mut end = 0;
            let strs = |j: &Json| -> Vec<String> {
                j.as_arr()
                    .expect("a list")
                    .iter()
                    .map(|o| o.as_str().expect("a str").to_owned())
                    .collect()
            };
            let cases = index["messages"]
                .as_arr()
                .expect("messages")
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let offset = m["offset"].as_u64().unwrap() as usize;
                    let nbytes = m["nbytes"].as_u64().unwrap() as usize;
                    assert_eq!(offset, end, "{release}#{i}: messages one after the other");
                    end = offset + nbytes;
                    let wire = bin.slice(offset..end);
                    let labels = strs(&m["labels"]);
                    let channel = str_field(m, "channel");
                    let direction = str_field(m, "direction");
                    let op = labels
                        .first()
                        .unwrap_or_else(|| panic!("{release}#{i}: no label"));
                    Case {
                        name: format!("{release}#{i} ({channel} {direction} {op})"),
                        op: op.clone(),
                        ops: strs(&m["ops"]),
                        channel,
                        direction,
                        request_op: m["request_op"].as_str().map(str::to_owned),
                        failed: m["failed"].as_bool() == Some(true),
                        message: Json::Null,
                        frames: split_frames(&wire),
                        wire,
                    }
                })
                .collect();
            assert_eq!(
                end,
                bin.len(),
                "{}: session.bin is its messages",
                dir.display()
            );
            Session { release, cases }
        })
        .collect()
}

/// `wire.bin` as framewire reads it off a socket: the envelope (whose
/// frames must be the stored `frame_NNN.bin`), then frame 0 pass-through.
fn decode_wire(case: &Case) -> (Envelope, Value) {
    let (env, used) = Envelope::decode(&case.wire, &limits())
        .unwrap_or_else(|e| panic!("{}: wire.bin: {e}", case.name));
    assert_eq!(
        used,
        case.wire.len(),
        "{}: one message in wire.bin",
        case.name
    );
    assert_eq!(
        env.frames(),
        &case.frames[..],
        "{}: wire.bin frames vs frame_NNN.bin",
        case.name
    );
    let value = message::decode(env.frames(), &limits())
        .unwrap_or_else(|e| panic!("{}: message::decode: {e}", case.name));
    (env, value)
}

/// The same frames as a Dask worker reads them (`deserialize=True`).
fn decode_deserialized(case: &Case, env: &Envelope) -> Value {
    framewire::loads_with(
        env.frames(),
        &DeserializeOptions::with_limits(limits()).backed_by(env),
    )
    .unwrap_or_else(|e| panic!("{}: framewire::loads: {e}", case.name))
}

// ---- what a case is --------------------------------------------------------------

/// The channel enums (and the one channel that has none).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Channel {
    SchedulerToWorker,
    WorkerToScheduler,
    SchedulerToClient,
    /// The client's stream to the scheduler (`register-client` first).
    ClientToScheduler,
    WorkerRequest,
    SchedulerRequest,
}

fn stream_channel(case: &Case) -> Channel {
    match (case.channel.as_str(), case.direction.as_str()) {
        ("worker-scheduler stream", "scheduler->worker") => Channel::SchedulerToWorker,
        ("worker-scheduler stream", "worker->scheduler") => Channel::WorkerToScheduler,
        ("client-scheduler stream", "scheduler->client") => Channel::SchedulerToClient,
        ("client-scheduler stream", "client->scheduler") => Channel::ClientToScheduler,
        other => panic!("{}: no stream channel for {other:?}", case.name),
    }
}

/// The channel of a request: a single map sent to a worker or to the
/// scheduler (`register-worker` opens the worker's stream as a request,
/// `register-client` the client's).
fn request_channel(case: &Case) -> Channel {
    let to = case.direction.split("->").nth(1).expect("a direction");
    match (case.channel.as_str(), to) {
        ("worker RPC", "worker") => Channel::WorkerRequest,
        ("scheduler RPC", "scheduler") | ("worker-scheduler stream", "scheduler") => {
            Channel::SchedulerRequest
        }
        ("client-scheduler stream", "scheduler") => Channel::ClientToScheduler,
        other => panic!("{}: no request channel for {other:?}", case.name),
    }
}

/// The variant (the name its `Debug` starts with) each enum must decode an
/// op into; an op missing here must be `Other`.
fn expected_variant(channel: Channel, op: &str) -> Option<&'static str> {
    use Channel::*;
    Some(match (channel, op) {
        (SchedulerToWorker, "compute-task") => "ComputeTask",
        (SchedulerToWorker, "free-keys") => "FreeKeys",
        (SchedulerToWorker, "acquire-replicas") => "AcquireReplicas",
        (SchedulerToWorker, "remove-replicas") => "RemoveReplicas",
        (SchedulerToWorker, "steal-request") => "StealRequest",
        (SchedulerToWorker, "worker-status-change") => "WorkerStatusChange",
        (SchedulerToWorker, "close") => "Close",
        (SchedulerToWorker, "close-stream") => "CloseStream",
        (SchedulerToWorker, "remove-worker") => "RemoveWorker",
        (WorkerToScheduler, "log-event") => "LogEvent",
        (WorkerToScheduler, "task-finished") => "TaskFinished",
        (WorkerToScheduler, "task-erred") => "TaskErred",
        (WorkerToScheduler, "release-worker-data") => "ReleaseWorkerData",
        (WorkerToScheduler, "add-keys") => "AddKeys",
        (WorkerToScheduler, "reschedule") => "Reschedule",
        (WorkerToScheduler, "steal-response") => "StealResponse",
        (WorkerToScheduler, "worker-status-change") => "WorkerStatusChange",
        (WorkerToScheduler, "keep-alive") => "KeepAlive",
        (WorkerToScheduler, "close-stream") => "CloseStream",
        (SchedulerToClient, "stream-start") => "StreamStart",
        (SchedulerToClient, "task-erred") => "TaskErred",
        (SchedulerToClient, "key-in-memory") => "KeyInMemory",
        (SchedulerToClient, "lost-data") => "LostData",
        (SchedulerToClient, "cancelled-keys") => "CancelledKeys",
        (SchedulerToClient, "task-retried") => "TaskRetried",
        (SchedulerToClient, "restart") => "Restart",
        (SchedulerToClient, "error") => "Error",
        (SchedulerToClient, "event") => "Event",
        (SchedulerToClient, "adjust-heartbeat-interval") => "AdjustHeartbeatInterval",
        (ClientToScheduler, "register-client") => "RegisterClient",
        (ClientToScheduler, "update-graph") => "UpdateGraph",
        (ClientToScheduler, "client-desires-keys") => "ClientDesiresKeys",
        (ClientToScheduler, "report-key") => "ReportKey",
        (ClientToScheduler, "client-releases-keys") => "ClientReleasesKeys",
        (ClientToScheduler, "heartbeat-client") => "HeartbeatClient",
        (ClientToScheduler, "subscribe-topic") => "SubscribeTopic",
        (ClientToScheduler, "unsubscribe-topic") => "UnsubscribeTopic",
        (ClientToScheduler, "cancel-keys") => "CancelKeys",
        (ClientToScheduler, "close-client") => "CloseClient",
        (ClientToScheduler, "close-stream") => "CloseStream",
        (WorkerRequest, "get_data") => "GetData",
        (WorkerRequest, "update_data") => "UpdateData",
        (WorkerRequest, "gather") => "Gather",
        (WorkerRequest, "free_keys") => "FreeKeys",
        (WorkerRequest, "identity") => "Identity",
        (WorkerRequest, "run") => "Run",
        (WorkerRequest, "close") => "Close",
        (SchedulerRequest, "register-worker") => "RegisterWorker",
        (SchedulerRequest, "heartbeat_worker") => "HeartbeatWorker",
        (SchedulerRequest, "gather") => "Gather",
        (SchedulerRequest, "scatter") => "Scatter",
        (SchedulerRequest, "update_data") => "UpdateData",
        (SchedulerRequest, "identity") => "Identity",
        (SchedulerRequest, "register-client") => "RegisterClient",
        (SchedulerRequest, "who_has") => "WhoHas",
        (SchedulerRequest, "has_what") => "HasWhat",
        (SchedulerRequest, "ncores") => "Ncores",
        (SchedulerRequest, "ncores_running") => "NcoresRunning",
        (SchedulerRequest, "broadcast") => "Broadcast",
        (SchedulerRequest, "retire_workers") => "RetireWorkers",
        (SchedulerRequest, "replicate") => "Replicate",
        (SchedulerRequest, "amm_handler") => "AmmHandler",
        (SchedulerRequest, "close") => "Close",
        _ => return None,
    })
}

/// The variant name of a decoded enum value, from its derived `Debug`.
fn variant_of(x: &impl Debug) -> String {
    let debug = format!("{x:?}");
    debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

// ---- the checks --------------------------------------------------------------

/// What went through the checks: `"<case>: <op> as <type>"`, and the
/// coverage keys `"<op> as <type>"`.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    kinds: BTreeSet<String>,
}

impl Seen {
    fn add(&mut self, case: &Case, op: &str, as_type: &str) {
        self.lines.push(format!("{}: {op} as {as_type}", case.name));
        self.kinds.insert(format!("{op} as {as_type}"));
    }
}

/// `from_value::<T>` of `value` (an op map or a reply), then `to_value`
/// back, which must be exactly `value`; the direct paths agree with these
/// on the message's frames ([`direct_paths_agree`]).
#[track_caller]
fn typed_round_trip<T: Serialize + DeserializeOwned + Debug + PartialEq>(
    what: &str,
    value: &Value,
) -> T {
    let typed: T = framewire::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{what}: from_value: {e}\n{value:?}"));
    let back = framewire::to_value(&typed).unwrap_or_else(|e| panic!("{what}: to_value: {e}"));
    assert_eq!(
        back, *value,
        "{what}: to_value of the typed value differs from the capture\n{typed:?}"
    );
    let frames =
        framewire::dumps(value).unwrap_or_else(|e| panic!("{what}: dumps of the value: {e}"));
    direct_paths_agree::<T>(what, &frames);
    typed
}

/// `from_frames::<T>` of `frames` is `from_value` of `loads` of them, and
/// `to_frames` of that is `dumps` of `to_value` of it, byte for byte;
/// returns the frames `to_frames` wrote.
#[track_caller]
fn direct_paths_agree<T: Serialize + DeserializeOwned + Debug + PartialEq>(
    what: &str,
    frames: &[Bytes],
) -> Vec<Bytes> {
    let opts = DeserializeOptions::with_limits(limits());
    let dynamic: T = framewire::loads_with(frames, &opts)
        .and_then(framewire::from_value)
        .unwrap_or_else(|e| panic!("{what}: loads + from_value: {e}"));
    let direct: T = framewire::typed::from_frames(frames, &opts)
        .unwrap_or_else(|e| panic!("{what}: from_frames: {e}"));
    assert_eq!(direct, dynamic, "{what}: from_frames vs loads + from_value");
    let sopts = framewire::SerializeOptions::default();
    let dynamic = framewire::to_value(&direct)
        .and_then(|v| framewire::dumps_with(&v, &sopts))
        .unwrap_or_else(|e| panic!("{what}: to_value + dumps: {e}"));
    let direct = framewire::typed::to_frames(&direct, &sopts)
        .unwrap_or_else(|e| panic!("{what}: to_frames: {e}"));
    assert_eq!(direct, dynamic, "{what}: to_frames vs to_value + dumps");
    direct
}

/// Decodes one op map of `channel` (both the inherent `from_value` of the
/// enum and `framewire::from_value`), checks its variant, round-trips it;
/// returns the variant name (or the struct's type name).
fn check_op(case: &Case, channel: Channel, op_map: &Value, seen: &mut Seen) -> String {
    let op = op_map
        .get("op")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{}: an element without op: {op_map:?}", case.name))
        .to_owned();
    let what = format!("{} ({op}, {channel:?})", case.name);
    let expected = expected_variant(channel, &op);

    macro_rules! via_enum {
        ($enum:ty) => {{
            let inherent = <$enum>::from_value(op_map.clone())
                .unwrap_or_else(|e| panic!("{what}: {}::from_value: {e}", stringify!($enum)));
            let typed: $enum = typed_round_trip(&what, op_map);
            assert_eq!(typed, inherent, "{what}: the two decoding paths differ");
            assert_eq!(typed.op(), Some(op.as_str()), "{what}: op()");
            let variant = variant_of(&typed);
            match expected {
                Some(v) => assert_eq!(variant, v, "{what}: decoded as {typed:?}"),
                None => assert_eq!(variant, "Other", "{what}: an op the enum does not know"),
            }
            if variant != "Other" {
                seen.add(case, &op, &format!("{}::{variant}", stringify!($enum)));
            }
            variant
        }};
    }

    match channel {
        Channel::SchedulerToWorker => via_enum!(SchedulerToWorker),
        Channel::WorkerToScheduler => via_enum!(WorkerToScheduler),
        Channel::SchedulerToClient => via_enum!(SchedulerToClient),
        Channel::WorkerRequest => via_enum!(WorkerRequest),
        Channel::SchedulerRequest => via_enum!(SchedulerRequest),
        Channel::ClientToScheduler => via_enum!(ClientToScheduler),
    }
}

/// The type a reply decodes into: one per request op (and channel) that
/// framewire types.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reply {
    /// `"OK"`: after a `get_data` reply, and for `{op: close, reply: true}`.
    Ok,
    /// `{status: uncaught-error, ...}` (`ErrorReply`).
    Error,
    RegisterWorker,
    Heartbeat,
    GetData,
    /// The worker's `update_data` reply.
    UpdateData,
    /// nil: the scheduler's `update_data`, `replicate` and `amm_handler`
    /// (`run_once`), the worker's `free_keys`.
    Nil,
    /// The worker's `gather` reply.
    Gather,
    /// The scheduler's `gather` reply.
    GatherKeys,
    Scatter,
    SchedulerIdentity,
    WorkerIdentity,
    WhoHas,
    HasWhat,
    /// `ncores`, `ncores_running`.
    Ncores,
    /// A broadcast of `run`.
    Broadcast,
    RetireWorkers,
    Run,
}

/// What a reply decodes into, by its label, its request's op and its
/// channel; `None` for a reply to an op framewire does not type.
fn reply_of(case: &Case) -> Option<Reply> {
    let request = case.request_op.as_deref().expect("a reply has request_op");
    let to_worker = case.channel == "worker RPC";
    Some(match (case.op.as_str(), request, to_worker) {
        ("get_data-ok" | "close-reply", _, _) => Reply::Ok,
        ("uncaught-error-reply", _, _) => Reply::Error,
        (_, "register-worker", false) => Reply::RegisterWorker,
        (_, "heartbeat_worker", false) => Reply::Heartbeat,
        (_, "get_data", true) => Reply::GetData,
        (_, "update_data", true) => Reply::UpdateData,
        (_, "update_data", false) | (_, "free_keys", true) => Reply::Nil,
        (_, "gather", true) => Reply::Gather,
        (_, "gather", false) => Reply::GatherKeys,
        (_, "scatter", false) => Reply::Scatter,
        (_, "identity", false) => Reply::SchedulerIdentity,
        (_, "identity", true) => Reply::WorkerIdentity,
        (_, "who_has", false) => Reply::WhoHas,
        (_, "has_what", false) => Reply::HasWhat,
        (_, "ncores" | "ncores_running", false) => Reply::Ncores,
        (_, "broadcast", false) => Reply::Broadcast,
        (_, "retire_workers", false) => Reply::RetireWorkers,
        (_, "replicate" | "amm_handler", false) => Reply::Nil,
        (_, "run", true) => Reply::Run,
        _ => return None,
    })
}

/// Decodes a reply into its type and round-trips it; `None` (nothing
/// checked) for a reply to an op framewire does not type.
fn check_reply(case: &Case, value: &Value, seen: &mut Seen) -> Option<&'static str> {
    let reply = reply_of(case)?;
    let what = format!("{} (reply to {:?})", case.name, case.request_op);
    let kind = match reply {
        Reply::Ok => {
            let ok: String = typed_round_trip(&what, value);
            assert_eq!(ok, "OK", "{what}");
            "String"
        }
        Reply::Error => {
            let err: ErrorReply = typed_round_trip(&what, value);
            assert_eq!(err.status, "uncaught-error", "{what}");
            assert!(!err.exception_text.is_empty(), "{what}");
            assert!(
                matches!(err.exception, Value::Serialized(_)),
                "{what}: the exception block"
            );
            "ErrorReply"
        }
        Reply::RegisterWorker => {
            let r: RegisterWorkerReply = typed_round_trip(&what, value);
            assert_eq!(r.status, "OK", "{what}");
            "RegisterWorkerReply"
        }
        Reply::Heartbeat => {
            let r: HeartbeatReply = typed_round_trip(&what, value);
            assert_eq!(r.status, "OK", "{what}");
            "HeartbeatReply"
        }
        Reply::GetData => {
            let r: GetDataReply = typed_round_trip(&what, value);
            let data = r.data.as_ref().expect("data");
            assert!(
                data.values().all(|v| matches!(v, Value::Serialized(_))),
                "{what}: the values stay blocks pass-through"
            );
            "GetDataReply"
        }
        Reply::UpdateData => {
            typed_round_trip::<UpdateDataReply>(&what, value);
            "UpdateDataReply"
        }
        Reply::Nil => {
            typed_round_trip::<()>(&what, value);
            "()"
        }
        Reply::Gather => {
            typed_round_trip::<GatherReply>(&what, value);
            "GatherReply"
        }
        Reply::GatherKeys => {
            typed_round_trip::<GatherKeysReply>(&what, value);
            "GatherKeysReply"
        }
        Reply::Scatter => {
            typed_round_trip::<Vec<Key>>(&what, value);
            "Vec<Key>"
        }
        Reply::SchedulerIdentity => {
            let r: SchedulerIdentity = typed_round_trip(&what, value);
            assert_eq!(r.type_, "Scheduler", "{what}");
            "SchedulerIdentity"
        }
        Reply::WorkerIdentity => {
            let r: WorkerIdentity = typed_round_trip(&what, value);
            assert_eq!(r.type_, "Worker", "{what}");
            "WorkerIdentity"
        }
        Reply::WhoHas => {
            typed_round_trip::<WhoHasReply>(&what, value);
            "WhoHasReply"
        }
        Reply::HasWhat => {
            typed_round_trip::<HasWhatReply>(&what, value);
            "HasWhatReply"
        }
        Reply::Ncores => {
            let r: NcoresReply = typed_round_trip(&what, value);
            assert!(r.values().all(|&n| n > 0), "{what}");
            "NcoresReply"
        }
        Reply::Broadcast => {
            let r: BroadcastReply = typed_round_trip(&what, value);
            assert!(r.values().all(|r| r.status == "OK"), "{what}");
            "BroadcastReply"
        }
        Reply::RetireWorkers => {
            let r: RetireWorkersReply = typed_round_trip(&what, value);
            assert!(r.values().all(|w| w.type_ == "Worker"), "{what}");
            "RetireWorkersReply"
        }
        Reply::Run => {
            let r: RunReply = typed_round_trip(&what, value);
            assert_eq!(r.status, "OK", "{what}");
            assert!(r.result.is_some(), "{what}");
            "RunReply"
        }
    };
    seen.add(case, &case.op, kind);
    Some(kind)
}

/// Whether a case carries a typed op (or a reply to one).
fn is_typed(case: &Case) -> bool {
    case.op != "handshake"
}

/// The three checks on one case; returns what it decoded (variants or
/// reply types, one per element).
fn check_case(case: &Case, seen: &mut Seen) -> Vec<String> {
    let (_env, value) = decode_wire(case);
    let kinds: Vec<String> = match (&value, case.request_op.is_some()) {
        (_, true) => vec![check_reply(case, &value, seen)
            .unwrap_or("Other")
            .to_owned()],
        (Value::Array(items), false) => {
            let channel = stream_channel(case);
            let ops: Vec<&str> = items
                .iter()
                .map(|m| m.get("op").and_then(Value::as_str).unwrap_or("?"))
                .collect();
            assert_eq!(ops, case.ops, "{}: ops of the batch", case.name);
            items
                .iter()
                .map(|m| check_op(case, channel, m, seen))
                .collect()
        }
        (Value::Map(_), false) => {
            vec![check_op(case, request_channel(case), &value, seen)]
        }
        (other, false) => panic!("{}: neither a batch nor a request: {other:?}", case.name),
    };
    kinds
}

/// `to_value` of the typed form of `value` (per element for a batch), as
/// the list Dask's `BatchedSend` writes.
fn retyped(case: &Case, value: &Value) -> Value {
    fn one(case: &Case, channel: Option<Channel>, v: &Value) -> Value {
        let enc = match channel {
            Some(Channel::SchedulerToWorker) => {
                framewire::to_value(&SchedulerToWorker::from_value(v.clone()).unwrap())
            }
            Some(Channel::WorkerToScheduler) => {
                framewire::to_value(&WorkerToScheduler::from_value(v.clone()).unwrap())
            }
            Some(Channel::SchedulerToClient) => {
                framewire::to_value(&SchedulerToClient::from_value(v.clone()).unwrap())
            }
            Some(Channel::WorkerRequest) => {
                framewire::to_value(&WorkerRequest::from_value(v.clone()).unwrap())
            }
            Some(Channel::SchedulerRequest) => {
                framewire::to_value(&SchedulerRequest::from_value(v.clone()).unwrap())
            }
            Some(Channel::ClientToScheduler) => {
                framewire::to_value(&ClientToScheduler::from_value(v.clone()).unwrap())
            }
            None => unreachable!(),
        };
        enc.unwrap_or_else(|e| panic!("{}: to_value: {e}", case.name))
    }
    if case.request_op.is_some() {
        return reply_retyped(case, value);
    }
    match value {
        Value::Array(items) => {
            let channel = stream_channel(case);
            Value::Array(items.iter().map(|m| one(case, Some(channel), m)).collect())
        }
        _ => one(case, Some(request_channel(case)), value),
    }
}

fn reply_retyped(case: &Case, value: &Value) -> Value {
    fn via<T: Serialize + DeserializeOwned>(v: &Value) -> Value {
        framewire::to_value(&framewire::from_value::<T>(v.clone()).unwrap()).unwrap()
    }
    match reply_of(case) {
        Some(Reply::Ok) => via::<String>(value),
        Some(Reply::Error) => via::<ErrorReply>(value),
        Some(Reply::RegisterWorker) => via::<RegisterWorkerReply>(value),
        Some(Reply::Heartbeat) => via::<HeartbeatReply>(value),
        Some(Reply::GetData) => via::<GetDataReply>(value),
        Some(Reply::UpdateData) => via::<UpdateDataReply>(value),
        Some(Reply::Nil) => via::<()>(value),
        Some(Reply::Gather) => via::<GatherReply>(value),
        Some(Reply::GatherKeys) => via::<GatherKeysReply>(value),
        Some(Reply::Scatter) => via::<Vec<Key>>(value),
        Some(Reply::SchedulerIdentity) => via::<SchedulerIdentity>(value),
        Some(Reply::WorkerIdentity) => via::<WorkerIdentity>(value),
        Some(Reply::WhoHas) => via::<WhoHasReply>(value),
        Some(Reply::HasWhat) => via::<HasWhatReply>(value),
        Some(Reply::Ncores) => via::<NcoresReply>(value),
        Some(Reply::Broadcast) => via::<BroadcastReply>(value),
        Some(Reply::RetireWorkers) => via::<RetireWorkersReply>(value),
        Some(Reply::Run) => via::<RunReply>(value),
        // A reply framewire does not type stays the value it is.
        None => value.clone(),
    }
}

// ---- the tests ------------------------------------------------------------------

/// Every typed op of issue 14 (as `"<op> as <type>"`): each must have at
/// least one capture that went through the checks.
const REQUIRED: &[&str] = &[
    "register-worker as SchedulerRequest::RegisterWorker",
    "register-worker-reply as RegisterWorkerReply",
    "heartbeat_worker as SchedulerRequest::HeartbeatWorker",
    "heartbeat_worker-reply as HeartbeatReply",
    "compute-task as SchedulerToWorker::ComputeTask",
    "task-finished as WorkerToScheduler::TaskFinished",
    "task-erred as WorkerToScheduler::TaskErred",
    "task-erred as SchedulerToClient::TaskErred",
    "free-keys as SchedulerToWorker::FreeKeys",
    "free_keys as WorkerRequest::FreeKeys",
    "free_keys-reply as ()",
    "release-worker-data as WorkerToScheduler::ReleaseWorkerData",
    "add-keys as WorkerToScheduler::AddKeys",
    "reschedule as WorkerToScheduler::Reschedule",
    "acquire-replicas as SchedulerToWorker::AcquireReplicas",
    "remove-replicas as SchedulerToWorker::RemoveReplicas",
    "steal-request as SchedulerToWorker::StealRequest",
    "steal-response as WorkerToScheduler::StealResponse",
    "worker-status-change as SchedulerToWorker::WorkerStatusChange",
    "worker-status-change as WorkerToScheduler::WorkerStatusChange",
    "keep-alive as WorkerToScheduler::KeepAlive",
    "close as SchedulerToWorker::Close",
    "close as SchedulerRequest::Close",
    "close-reply as String",
    "close-stream as WorkerToScheduler::CloseStream",
    "close-stream as ClientToScheduler::CloseStream",
    "stream-start as SchedulerToClient::StreamStart",
    "get_data as WorkerRequest::GetData",
    "get_data-reply as GetDataReply",
    "get_data-ok as String",
    "update_data as WorkerRequest::UpdateData",
    "update_data as SchedulerRequest::UpdateData",
    "update_data-reply as UpdateDataReply",
    "update_data-reply as ()",
    "gather as WorkerRequest::Gather",
    "gather as SchedulerRequest::Gather",
    "gather-reply as GatherReply",
    "gather-reply as GatherKeysReply",
    "scatter as SchedulerRequest::Scatter",
    "scatter-reply as Vec<Key>",
    "identity as WorkerRequest::Identity",
    "identity as SchedulerRequest::Identity",
    "identity-reply as SchedulerIdentity",
    "identity-reply as WorkerIdentity",
    "uncaught-error-reply as ErrorReply",
];

/// The client's ops and the rest of what the sessions hold (not in the
/// single captures of `tests/captures/conversation/`): each must be read on
/// every release (`adjust-heartbeat-interval` from 2025.5.1 on).
const SESSION_REQUIRED: &[&str] = &[
    "register-client as ClientToScheduler::RegisterClient",
    "update-graph as ClientToScheduler::UpdateGraph",
    "client-releases-keys as ClientToScheduler::ClientReleasesKeys",
    "heartbeat-client as ClientToScheduler::HeartbeatClient",
    "subscribe-topic as ClientToScheduler::SubscribeTopic",
    "close-client as ClientToScheduler::CloseClient",
    "key-in-memory as SchedulerToClient::KeyInMemory",
    "adjust-heartbeat-interval as SchedulerToClient::AdjustHeartbeatInterval",
    "who_has as SchedulerRequest::WhoHas",
    "who_has-reply as WhoHasReply",
    "ncores_running as SchedulerRequest::NcoresRunning",
    "ncores_running-reply as NcoresReply",
    "broadcast as SchedulerRequest::Broadcast",
    "broadcast-reply as BroadcastReply",
    "retire_workers as SchedulerRequest::RetireWorkers",
    "retire_workers-reply as RetireWorkersReply",
    "replicate as SchedulerRequest::Replicate",
    "replicate-reply as ()",
    "amm_handler as SchedulerRequest::AmmHandler",
    "amm_handler-reply as ()",
    "run as WorkerRequest::Run",
    "run-reply as RunReply",
    "remove-worker as SchedulerToWorker::RemoveWorker",
    "log-event as WorkerToScheduler::LogEvent",
];

/// Decode, variant, exact `Value` round trip: every typed capture, and
/// the coverage of every typed op.
#[test]
fn every_typed_capture_decodes_and_round_trips() {
    let cases = cases();
    let mut seen = Seen::default();
    let mut skipped = Vec::new();
    for case in &cases {
        if !is_typed(case) {
            skipped.push(case.name.clone());
            continue;
        }
        let kinds = check_case(case, &mut seen);
        if case.request_op.is_some() {
            assert_ne!(kinds, ["Other"], "{}: a reply without a type", case.name);
        }
    }
    // Only the handshakes are not typed ops.
    assert!(
        skipped.iter().all(|n| n.starts_with("handshake_")),
        "{skipped:?}"
    );
    let missing: Vec<&&str> = REQUIRED
        .iter()
        .filter(|k| !seen.kinds.contains(**k))
        .collect();
    assert!(
        missing.is_empty(),
        "typed ops without a checked capture: {missing:?}\nchecked:\n{}",
        seen.lines.join("\n")
    );
    eprintln!(
        "{} captures, {} typed messages checked:\n{}",
        cases.len() - skipped.len(),
        seen.lines.len(),
        seen.lines.join("\n")
    );
}

/// Every typed capture, whole (a batch as `Vec` of its channel enum, a
/// request as the enum, a reply as its type), through the direct paths:
/// `from_frames` gives what `loads` + `from_value` give, and `to_frames`
/// of it what `to_value` + `dumps` give: the capture's frames, byte for
/// byte, unless deserializing turned blocks into values.
#[test]
fn every_typed_capture_through_the_direct_paths() {
    fn whole<T: Serialize + DeserializeOwned + Debug + PartialEq>(case: &Case) {
        let frames = direct_paths_agree::<T>(&case.name, &case.frames);
        let opts = DeserializeOptions::with_limits(limits());
        let deserialized = framewire::loads_with(&case.frames, &opts).unwrap();
        if deserialized == message::decode(&case.frames, &limits()).unwrap() {
            assert_eq!(
                frames, case.frames,
                "{}: to_frames vs the capture",
                case.name
            );
        }
    }
    let mut checked = 0;
    for case in cases().iter().filter(|c| is_typed(c)) {
        let (_env, value) = decode_wire(case);
        match (case.request_op.as_deref(), &value) {
            (Some(_), _) => match reply_of(case) {
                Some(Reply::Ok) => whole::<String>(case),
                Some(Reply::Error) => whole::<ErrorReply>(case),
                Some(Reply::RegisterWorker) => whole::<RegisterWorkerReply>(case),
                Some(Reply::Heartbeat) => whole::<HeartbeatReply>(case),
                Some(Reply::GetData) => whole::<GetDataReply>(case),
                Some(Reply::UpdateData) => whole::<UpdateDataReply>(case),
                Some(Reply::Nil) => whole::<()>(case),
                Some(Reply::Gather) => whole::<GatherReply>(case),
                Some(Reply::GatherKeys) => whole::<GatherKeysReply>(case),
                Some(Reply::Scatter) => whole::<Vec<Key>>(case),
                Some(Reply::SchedulerIdentity) => whole::<SchedulerIdentity>(case),
                Some(Reply::WorkerIdentity) => whole::<WorkerIdentity>(case),
                Some(Reply::WhoHas) => whole::<WhoHasReply>(case),
                Some(Reply::HasWhat) => whole::<HasWhatReply>(case),
                Some(Reply::Ncores) => whole::<NcoresReply>(case),
                Some(Reply::Broadcast) => whole::<BroadcastReply>(case),
                Some(Reply::RetireWorkers) => whole::<RetireWorkersReply>(case),
                Some(Reply::Run) => whole::<RunReply>(case),
                None => panic!("{}: no reply type", case.name),
            },
            (None, Value::Array(_)) => match stream_channel(case) {
                Channel::SchedulerToWorker => whole::<Vec<SchedulerToWorker>>(case),
                Channel::WorkerToScheduler => whole::<Vec<WorkerToScheduler>>(case),
                Channel::SchedulerToClient => whole::<Vec<SchedulerToClient>>(case),
                Channel::ClientToScheduler => whole::<Vec<ClientToScheduler>>(case),
                other => panic!("{}: a batch on {other:?}", case.name),
            },
            (None, _) => match request_channel(case) {
                Channel::WorkerRequest => whole::<WorkerRequest>(case),
                Channel::SchedulerRequest => whole::<SchedulerRequest>(case),
                Channel::ClientToScheduler => whole::<ClientToScheduler>(case),
                other => panic!("{}: a request on {other:?}", case.name),
            },
        }
        checked += 1;
    }
    assert!(checked >= REQUIRED.len(), "only {checked} captures");
}

/// `message::encode` of the retyped value gives the capture's frames byte
/// for byte (framewire's msgpack is Dask's for all of these).
#[test]
fn every_typed_capture_re_encodes_byte_identical() {
    let mut checked = 0;
    for case in cases().iter().filter(|c| is_typed(c)) {
        let (_env, value) = decode_wire(case);
        assert_encodes_to_the_capture(case, &retyped(case, &value));
        checked += 1;
    }
    assert!(checked >= REQUIRED.len(), "only {checked} captures");
}

/// `message::encode` of `value` is the case's frames byte for byte, and
/// enveloped its wire bytes.
#[track_caller]
fn assert_encodes_to_the_capture(case: &Case, value: &Value) {
    let frames =
        message::encode(value).unwrap_or_else(|e| panic!("{}: message::encode: {e}", case.name));
    assert_eq!(
        frames.len(),
        case.frames.len(),
        "{}: number of frames",
        case.name
    );
    for (i, (ours, theirs)) in frames.iter().zip(&case.frames).enumerate() {
        assert!(
            ours == theirs,
            "{}: frame {i} differs from Dask's\nours:   {}\ntheirs: {}",
            case.name,
            hex::encode(ours),
            hex::encode(theirs)
        );
    }
    // And the whole message is `wire.bin`, framing included, once the
    // first read covers the frames Dask's covered (SPEC.md: Dask keeps a
    // second numpy buffer out of its first read; `Envelope::new`
    // covers every frame, which Python reads the same).
    let PreludeStatus::Complete(prelude) = parse_prelude(&case.wire, &limits()).unwrap() else {
        panic!("{}: a whole prelude", case.name)
    };
    let wire = Envelope::with_first_read_frames(frames, prelude.frames_in_first_read())
        .unwrap()
        .to_bytes();
    assert_eq!(wire, case.wire, "{}: wire.bin", case.name);
}

/// The channel whose enum reads the op maps of a message that is not a
/// reply: a stream's batch, or a single request.
fn channel_of(case: &Case, value: &Value) -> Channel {
    match value {
        Value::Array(_) => stream_channel(case),
        _ => request_channel(case),
    }
}

/// Every message of every release's recorded session
/// (`tests/captures/sessions/<release>/`): through the byte layers
/// (decoded pass-through, deserialized as a Dask peer reads it, and
/// re-encoded byte-identical, framing included), and every op map and
/// reply through the typed channels: every op map reads as its variant
/// (never `Other`) and every reply as its type, on every release, after
/// deserializing too, and writes back the same bytes. Every typed op of
/// [`REQUIRED`] and [`SESSION_REQUIRED`] is read on every release. Prints,
/// per release, the messages and op maps read.
#[test]
fn every_release_session_through_the_byte_layers_and_the_typed_channels() {
    let sessions = sessions();
    let releases: Vec<&str> = sessions.iter().map(|s| s.release.as_str()).collect();
    // Every supported release, by name, oldest first: losing one fails
    // here.
    assert_eq!(
        releases,
        ["2024.12.1", "2025.5.1", "2025.12.0", "2026.3.0", "2026.8.0"],
        "the recorded sessions (tests/captures/sessions/)"
    );
    let mut report = Vec::new();
    for session in &sessions {
        let mut seen = Seen::default();
        let (mut op_maps, mut untyped_maps) = (0, 0);
        let mut untyped_ops = BTreeMap::<String, usize>::new();
        let mut untyped_replies = BTreeSet::new();
        let mut refused = Vec::new();
        for case in &session.cases {
            let (env, value) = decode_wire(case);
            let deserialized = decode_deserialized(case, &env);
            if !is_typed(case) || case.failed {
                if case.failed {
                    refused.push(case.op.as_str());
                }
                assert_encodes_to_the_capture(case, &value);
                continue;
            }
            let kinds = check_case(case, &mut seen);
            match &case.request_op {
                Some(request) if kinds == ["Other"] => {
                    untyped_replies.insert(format!("{request} ({})", case.channel));
                }
                Some(_) => {}
                None => {
                    let channel = channel_of(case, &value);
                    assert_eq!(kinds.len(), case.ops.len(), "{}", case.name);
                    for (op, kind) in case.ops.iter().zip(&kinds) {
                        op_maps += 1;
                        if kind == "Other" {
                            untyped_maps += 1;
                            *untyped_ops
                                .entry(format!("{op} ({channel:?})"))
                                .or_default() += 1;
                        }
                    }
                    // The same types from the deserialized value.
                    let maps = match &deserialized {
                        Value::Array(items) => items.iter().collect(),
                        map => vec![map],
                    };
                    let again: Vec<String> = maps
                        .into_iter()
                        .map(|m| check_op(case, channel, m, &mut Seen::default()))
                        .collect();
                    assert_eq!(again, kinds, "{}: deserialized", case.name);
                }
            }
            assert_encodes_to_the_capture(case, &retyped(case, &value));
        }
        let missing: Vec<&&str> = REQUIRED
            .iter()
            .chain(SESSION_REQUIRED)
            // 2024.12.1 does not answer heartbeat-client.
            .filter(|k| {
                session.release != "2024.12.1"
                    || **k
                        != "adjust-heartbeat-interval as SchedulerToClient::AdjustHeartbeatInterval"
            })
            .filter(|k| !seen.kinds.contains(**k))
            .collect();
        assert!(
            missing.is_empty(),
            "{}: typed ops not read from its session: {missing:?}",
            session.release
        );
        // Every op map and every reply of the session is typed.
        assert_eq!(
            (untyped_maps, &untyped_ops, &untyped_replies),
            (0, &BTreeMap::new(), &BTreeSet::new()),
            "{}: op maps and replies not typed ({op_maps} op maps)",
            session.release
        );
        // The workload's one bad call (identity with an unknown keyword).
        assert_eq!(
            refused,
            ["identity"],
            "{}: refused requests",
            session.release
        );
        report.push(format!(
            "distributed {}: {} messages, {op_maps} op maps, {untyped_maps} not typed: {}; \
             replies not typed: {}; requests Dask refused (bytes only): {}",
            session.release,
            session.cases.len(),
            untyped_ops
                .iter()
                .map(|(op, n)| format!("{op} x{n}"))
                .collect::<Vec<_>>()
                .join(", "),
            untyped_replies.into_iter().collect::<Vec<_>>().join(", "),
            refused.join(", "),
        ));
    }
    eprintln!("{}", report.join("\n"));
}

/// The same frames decoded as a Dask worker decodes them
/// (`framewire::loads`, deserialize=True) still give the typed values;
/// blocks framewire deserializes become their values.
#[test]
fn every_typed_capture_decodes_after_deserialize() {
    let mut seen = Seen::default();
    for case in cases().iter().filter(|c| is_typed(c)) {
        let (env, raw) = decode_wire(case);
        let value = decode_deserialized(case, &env);
        let kinds_raw = check_case(case, &mut Seen::default());
        // Decode the deserialized value into the same types.
        let kinds: Vec<String> = match (&value, case.request_op.is_some()) {
            (_, true) => vec![check_reply_deserialized(case, &value, &mut seen)],
            (Value::Array(items), false) => {
                let channel = stream_channel(case);
                items
                    .iter()
                    .map(|m| check_op(case, channel, m, &mut seen))
                    .collect()
            }
            (_, false) => vec![check_op(case, request_channel(case), &value, &mut seen)],
        };
        assert_eq!(kinds, kinds_raw, "{}: the same types either way", case.name);
        // Without blocks, the two decodings are the same value.
        if case.frames.len() == 1 {
            assert_eq!(value, raw, "{}", case.name);
        }
    }
}

/// Typed fields of messages read with deserialize=True, as a Dask worker
/// or client reads them: the exception of `task-erred` is the pickled
/// bytes, `update_data`'s array an `NdArray`, `scatter`'s bytes a bin;
/// the `__Pickled__` run_spec stays a block (framewire never unpickles).
#[test]
fn deserialized_blocks_become_values_in_typed_fields() {
    let cases = cases();
    let deserialized = |name: &str| {
        let case = find(&cases, name);
        let (env, _) = decode_wire(case);
        match decode_deserialized(case, &env) {
            Value::Array(mut items) => items.remove(0),
            v => v,
        }
    };

    let v = deserialized("task-erred_1");
    let WorkerToScheduler::TaskErred(m) = WorkerToScheduler::from_value(v).unwrap() else {
        panic!("task-erred_1")
    };
    assert_pickled_bytes("task-erred_1 exception", &m.exception);
    assert_pickled_bytes("task-erred_1 traceback", &m.traceback);

    let v = deserialized("task-erred_2");
    let SchedulerToClient::TaskErred(m) = SchedulerToClient::from_value(v).unwrap() else {
        panic!("task-erred_2")
    };
    assert_pickled_bytes("task-erred_2 exception", &m.exception);

    let v = deserialized("compute-task_1");
    let SchedulerToWorker::ComputeTask(m) = SchedulerToWorker::from_value(v).unwrap() else {
        panic!("compute-task_1")
    };
    assert!(m.run_spec.is_pickled());

    let v = deserialized("update_data_2");
    let WorkerRequest::UpdateData(m) = WorkerRequest::from_value(v).unwrap() else {
        panic!("update_data_2")
    };
    let (key, array) = m.data.first().expect("one value");
    let Value::NdArray(array) = array else {
        panic!("{key}: {array:?}")
    };
    // The array's bytes are the capture's payload frame, not a copy of it:
    // a slice of the `wire.bin` buffer the envelope was decoded from.
    let case = find(&cases, "update_data_2");
    let payload = case.frames.last().unwrap();
    assert_eq!(&array.data()[..], &payload[..]);
    let wire = case.wire.as_ptr_range();
    let data = array.data().as_ptr_range();
    assert!(
        wire.start <= data.start && data.end <= wire.end,
        "update_data_2: the array was copied out of the receive buffer"
    );

    let v = deserialized("scatter_1");
    let SchedulerRequest::Scatter(m) = SchedulerRequest::from_value(v).unwrap() else {
        panic!("scatter_1")
    };
    for (key, value) in &m.data {
        assert!(matches!(value, Value::Bin(_)), "{key}: {value:?}");
    }
}

/// A reply read with deserialize=True: error replies and data maps hold
/// the deserialized values (the pickled bytes of an exception, arrays).
fn check_reply_deserialized(case: &Case, value: &Value, seen: &mut Seen) -> String {
    let what = format!("{} (deserialized)", case.name);
    match case.op.as_str() {
        "uncaught-error-reply" => {
            let err: ErrorReply = typed_round_trip(&what, value);
            assert_pickled_bytes(&what, &err.exception);
            assert_pickled_bytes(&what, &err.traceback);
            "ErrorReply".into()
        }
        "get_data-reply" => {
            let r: GetDataReply = typed_round_trip(&what, value);
            // bytes and arrays are rebuilt; a pickle-serialized value
            // stays its block (framewire never unpickles).
            let data = r.data.as_ref().expect("data");
            for (k, v) in data {
                match v {
                    Value::Bin(_) | Value::NdArray(_) => {}
                    Value::Serialized(b) => assert_eq!(
                        b.header().map().get("serializer").and_then(Value::as_str),
                        Some("pickle"),
                        "{what}: {k}"
                    ),
                    other => panic!("{what}: {k} is {other:?}"),
                }
            }
            assert!(
                data.values()
                    .any(|v| matches!(v, Value::Bin(_) | Value::NdArray(_))),
                "{what}: something was deserialized"
            );
            "GetDataReply".into()
        }
        _ => check_reply(case, value, seen)
            .unwrap_or_else(|| panic!("{what}: no reply type"))
            .to_owned(),
    }
}

/// A pickle (protocol 2+ starts with PROTO 0x80).
#[track_caller]
fn assert_pickled_bytes(what: &str, v: &Value) {
    match v {
        Value::Bin(b) => assert_eq!(b.first(), Some(&0x80), "{what}: a pickle"),
        other => panic!("{what}: expected the pickled bytes, got {other:?}"),
    }
}

// ---- field by field, against case.json ---------------------------------------

/// A key from the generator's JSON (str, int, float, array).
fn key_of(j: &Json) -> Key {
    match j {
        Json::Str(s) => Key::from(s.as_str()),
        Json::Num(_) => match (j.as_int(), j.as_float()) {
            (Some(i), _) => Key::Int(i64::try_from(i).expect("an i64 key")),
            (None, Some(f)) => Key::Float(f),
            _ => panic!("not a key: {j}"),
        },
        Json::Arr(items) => Key::Tuple(items.iter().map(key_of).collect()),
        other => panic!("not a key: {other}"),
    }
}

fn int(j: &Json) -> i64 {
    let i = j.as_int().unwrap_or_else(|| panic!("not an int: {j}"));
    i64::try_from(i).unwrap()
}

fn uint(j: &Json) -> u64 {
    j.as_u64().unwrap_or_else(|| panic!("not a u64: {j}"))
}

fn float(j: &Json) -> f64 {
    j.as_float().unwrap_or_else(|| panic!("not a float: {j}"))
}

fn text(j: &Json) -> &str {
    j.as_str().unwrap_or_else(|| panic!("not a str: {j}"))
}

fn find<'a>(cases: &'a [Case], name: &str) -> &'a Case {
    cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no capture {name}"))
}

/// The first op of a capture (the message itself when it is not a batch),
/// from `wire.bin` and from `case.json`.
fn first_op(case: &Case) -> (&Json, Value) {
    let (_, value) = decode_wire(case);
    match (&case.message, value) {
        (Json::Arr(items), Value::Array(mut v)) => (&items[0], v.remove(0)),
        (j, v) => (j, v),
    }
}

/// The typed fields hold what Dask wrote (read independently from
/// `case.json`), not just something that round-trips.
#[test]
fn typed_fields_hold_what_dask_wrote() {
    let cases = cases();

    // task-erred from the worker: a tuple key, the exception block.
    let (json, v) = first_op(find(&cases, "task-erred_1"));
    let WorkerToScheduler::TaskErred(m) = WorkerToScheduler::from_value(v).unwrap() else {
        panic!("task-erred_1")
    };
    assert_eq!(m.key, key_of(&json["key"]));
    assert!(matches!(m.key, Key::Tuple(_)), "{:?}", m.key);
    assert_eq!(m.run_id, int(&json["run_id"]));
    assert_eq!(m.exception_text, text(&json["exception_text"]));
    assert_eq!(m.traceback_text, text(&json["traceback_text"]));
    assert_eq!(m.stimulus_id, text(&json["stimulus_id"]));
    assert_eq!(m.status, text(&json["status"]));
    assert_eq!(m.thread, Some(uint(&json["thread"])));
    let ss = &json["startstops"].as_arr().unwrap()[0];
    assert_eq!(m.startstops.len(), 1);
    assert_eq!(m.startstops[0].action, text(&ss["action"]));
    assert_eq!(m.startstops[0].start, float(&ss["start"]));
    assert_eq!(m.startstops[0].stop, float(&ss["stop"]));
    assert_eq!(m.startstops[0].source, None);
    let Value::Serialized(exc) = &m.exception else {
        panic!("exception: {:?}", m.exception)
    };
    assert_eq!(
        exc.header().map().get("type").and_then(Value::as_str),
        Some("bytes"),
        "to_serialize(pickle.dumps(exc))"
    );

    // The scheduler's task-erred to the client: the same blocks, its own shape.
    let (json, v) = first_op(find(&cases, "task-erred_2"));
    let SchedulerToClient::TaskErred(m) = SchedulerToClient::from_value(v).unwrap() else {
        panic!("task-erred_2")
    };
    assert_eq!(m.key, key_of(&json["key"]));
    assert!(matches!(m.exception, Value::Serialized(_)));
    assert!(matches!(m.traceback, Some(Value::Serialized(_))));

    // compute-task: the run_spec is the __Pickled__ block, kept verbatim.
    let (json, v) = first_op(find(&cases, "compute-task_1"));
    let SchedulerToWorker::ComputeTask(m) = SchedulerToWorker::from_value(v).unwrap() else {
        panic!("compute-task_1")
    };
    assert_eq!(m.key, key_of(&json["key"]));
    assert_eq!(m.run_id, int(&json["run_id"]));
    assert!(m.run_spec.is_pickled());
    assert!(m.run_spec.header().map().get("pickled-obj").is_some());
    let priority: Vec<i64> = json["priority"].as_arr().unwrap().iter().map(int).collect();
    let ours: Vec<i64> = m
        .priority
        .iter()
        .map(|p| match p {
            Number::Int(i) => *i,
            Number::Float(f) => panic!("priority {f}: not an int"),
        })
        .collect();
    assert_eq!(ours, priority);
    assert_eq!(m.span_id.as_deref(), json["span_id"].as_str());
    assert_eq!(m.actor, json["actor"].as_bool().unwrap());
    assert!(json["resource_restrictions"].is_null());
    assert_eq!(m.resource_restrictions, None);
    let json_who_has = json["who_has"].as_obj().unwrap();
    assert!(!json_who_has.is_empty(), "compute-task_1 has a dependency");
    assert_eq!(m.who_has.len(), json_who_has.len());
    for (k, addrs) in json_who_has {
        let key = Key::from(k.as_str());
        let theirs: Vec<&str> = addrs.as_arr().unwrap().iter().map(text).collect();
        assert_eq!(m.who_has[&key], theirs);
        assert_eq!(m.nbytes[&key], uint(&json["nbytes"][k.as_str()]));
    }

    // task-finished: `type` is inline bin (the pickled class).
    let (json, v) = first_op(find(&cases, "task-finished_1"));
    let WorkerToScheduler::TaskFinished(m) = WorkerToScheduler::from_value(v).unwrap() else {
        panic!("task-finished_1")
    };
    assert_eq!(m.key, key_of(&json["key"]));
    assert_eq!(hex::encode(&*m.type_), text(&json["type"]["$bytes"]));
    assert_eq!(m.typename, text(&json["typename"]));
    assert_eq!(m.nbytes, uint(&json["nbytes"]));
    assert_eq!(m.status, text(&json["status"]));

    // get_data from a worker: keys as a set; from the client: a list.
    let (json, v) = first_op(find(&cases, "get_data_1"));
    let WorkerRequest::GetData(m) = WorkerRequest::from_value(v).unwrap() else {
        panic!("get_data_1")
    };
    let Keys::Set(keys) = &m.keys else {
        panic!("get_data_1 keys: {:?}", m.keys)
    };
    let want: Vec<Key> = json["keys"]["as-list"]
        .as_arr()
        .unwrap()
        .iter()
        .map(key_of)
        .collect();
    assert_eq!(keys, &want);
    assert_eq!(m.who.as_deref(), Some(text(&json["who"])));
    assert_eq!(m.reply, Some(true));
    let (json, v) = first_op(find(&cases, "get_data_2"));
    let WorkerRequest::GetData(m) = WorkerRequest::from_value(v).unwrap() else {
        panic!("get_data_2")
    };
    let want: Vec<Key> = json["keys"].as_arr().unwrap().iter().map(key_of).collect();
    assert_eq!(m.keys, Keys::List(want));
    assert!(json["who"].is_null());
    assert_eq!(m.who, None);

    // register-worker: the fields add_worker takes.
    let (json, v) = first_op(find(&cases, "register-worker_1"));
    let SchedulerRequest::RegisterWorker(m) = SchedulerRequest::from_value(v).unwrap() else {
        panic!("register-worker_1")
    };
    assert_eq!(Some(m.reply), json["reply"].as_bool());
    assert_eq!(m.address, text(&json["address"]));
    assert_eq!(m.status, text(&json["status"]));
    assert_eq!(u64::from(m.nthreads), uint(&json["nthreads"]));
    assert_eq!(m.memory_limit, Some(uint(&json["memory_limit"])));
    assert_eq!(m.name.as_str(), Some(text(&json["name"])));
    assert_eq!(m.now, float(&json["now"]));
    assert_eq!(m.server_id, text(&json["server_id"]));
    assert_eq!(m.stimulus_id, text(&json["stimulus_id"]));
    assert_eq!(u64::from(m.pid), uint(&json["pid"]));
    assert_eq!(m.nanny, None);
    for (name, port) in json["services"].as_obj().unwrap() {
        assert_eq!(m.services[name.as_str()], uint(port));
    }

    // The register-worker reply: the plugins as inline bin.
    let (json, v) = first_op(find(&cases, "register-worker-reply_1"));
    let r: RegisterWorkerReply = framewire::from_value(v).unwrap();
    assert_eq!(r.status, text(&json["status"]));
    assert_eq!(r.time, Some(float(&json["time"])));
    assert_eq!(
        r.heartbeat_interval,
        Some(Number::Float(float(&json["heartbeat-interval"]))),
        "0.5 with two workers: a float"
    );
    assert_eq!(r.warning.as_deref(), Some(text(&json["warning"])));
    let plugins = r.worker_plugins.expect("worker-plugins");
    let json_plugins = json["worker-plugins"].as_obj().unwrap();
    assert_eq!(plugins.len(), json_plugins.len());
    for (name, bin) in json_plugins {
        assert_eq!(hex::encode(&*plugins[name.as_str()]), text(&bin["$bytes"]));
    }

    // heartbeat_worker: tuple keys inside metrics stay as they came.
    let (json, v) = first_op(find(&cases, "heartbeat_worker_1"));
    let SchedulerRequest::HeartbeatWorker(m) = SchedulerRequest::from_value(v).unwrap() else {
        panic!("heartbeat_worker_1")
    };
    assert_eq!(m.address, text(&json["address"]));
    assert_eq!(m.now, float(&json["now"]));
    assert_eq!(m.reply, Some(true));
    let digests = m
        .metrics
        .get("digests_total_since_heartbeat")
        .and_then(Value::as_map)
        .expect("digests");
    let json_digests = json["metrics"]["digests_total_since_heartbeat"]["$map"]
        .as_arr()
        .unwrap();
    assert_eq!(digests.len(), json_digests.len());
    assert!(digests.iter().any(|(k, _)| matches!(k, Value::Array(_))));

    // steal-request / steal-response: the same stimulus_id.
    let (json, v) = first_op(find(&cases, "steal-response_1"));
    let WorkerToScheduler::StealResponse(m) = WorkerToScheduler::from_value(v).unwrap() else {
        panic!("steal-response_1")
    };
    assert_eq!(m.key, key_of(&json["key"]));
    assert_eq!(m.state.as_deref(), json["state"].as_str());
    assert_eq!(m.stimulus_id, text(&json["stimulus_id"]));

    // The error reply: Dask's texts.
    let (json, v) = first_op(find(&cases, "uncaught-error-reply_1"));
    let e: ErrorReply = framewire::from_value(v).unwrap();
    assert_eq!(e.exception_text, text(&json["exception_text"]));
    assert_eq!(e.traceback_text, text(&json["traceback_text"]));
}

/// The request constructors write what Dask's `Client` sends (its
/// defaults), given only what the call names: checked against every
/// release's session, with `reply` set as `Rpc` sets it.
#[test]
fn request_constructors_write_what_dask_clients_send() {
    use framewire::dask::{
        AmmHandler, ClientReleasesKeys, GatherKeys, Replicate, RetireWorkers, Scatter,
        SubscribeTopic, WhoHas,
    };
    let mut checked = BTreeSet::new();
    for session in sessions() {
        for case in &session.cases {
            if case.request_op.is_some() || !is_typed(case) || case.failed {
                continue;
            }
            let (_env, value) = decode_wire(case);
            let what = format!("{} ({})", case.name, session.release);
            let ours = match (channel_of(case, &value), &value) {
                (Channel::SchedulerRequest, v) => match SchedulerRequest::from_value(v.clone()) {
                    Ok(SchedulerRequest::WhoHas(m)) => {
                        let mut c = WhoHas::new(m.keys.clone().unwrap());
                        c.reply = Some(true);
                        framewire::to_value(&c)
                    }
                    Ok(SchedulerRequest::Replicate(m)) => {
                        let mut c = Replicate::new(m.keys.clone(), m.n);
                        c.reply = Some(true);
                        framewire::to_value(&c)
                    }
                    Ok(SchedulerRequest::AmmHandler(m)) => {
                        let mut c = AmmHandler::new(m.method.clone());
                        c.reply = Some(true);
                        framewire::to_value(&c)
                    }
                    Ok(SchedulerRequest::RetireWorkers(m)) => {
                        let mut c = RetireWorkers::new(m.workers.clone().unwrap());
                        c.reply = Some(true);
                        framewire::to_value(&c)
                    }
                    Ok(SchedulerRequest::Scatter(m)) => {
                        let mut c = Scatter::new(m.data.clone(), m.client.clone());
                        c.workers = m.workers.clone();
                        c.reply = Some(true);
                        framewire::to_value(&c)
                    }
                    Ok(SchedulerRequest::Gather(m)) => {
                        let mut c = GatherKeys::new(m.keys.clone());
                        c.reply = Some(true);
                        framewire::to_value(&c)
                    }
                    _ => continue,
                },
                (Channel::ClientToScheduler, Value::Array(items)) => {
                    let built: Vec<Value> = items
                        .iter()
                        .map(
                            |m| match ClientToScheduler::from_value(m.clone()).unwrap() {
                                ClientToScheduler::ClientReleasesKeys(m) => framewire::to_value(
                                    &ClientReleasesKeys::new(m.keys.clone(), m.client.clone()),
                                )
                                .unwrap(),
                                ClientToScheduler::SubscribeTopic(m) => framewire::to_value(
                                    &SubscribeTopic::new(m.topic.clone(), m.client.clone()),
                                )
                                .unwrap(),
                                _ => m.clone(),
                            },
                        )
                        .collect();
                    Ok(Value::Array(built))
                }
                _ => continue,
            };
            let ours = ours.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(ours, value, "{what}: the constructor's message");
            checked.insert(case.ops.join(","));
        }
    }
    for op in [
        "who_has",
        "replicate",
        "amm_handler",
        "retire_workers",
        "scatter",
        "gather",
        "client-releases-keys",
        "subscribe-topic",
    ] {
        assert!(
            checked.iter().any(|c| c.split(',').any(|o| o == op)),
            "no {op} checked: {checked:?}"
        );
    }
}

/// The client's channels hold what Dask wrote, field by field (the
/// 2026.8.0 session; 2024.12.1's older update-graph too).
#[test]
fn client_channel_fields_hold_what_dask_wrote() {
    use framewire::dask::{KeyInMemory, UpdateGraph, WhoHas};
    let sessions = sessions();
    let mut seen = BTreeSet::new();
    for session in &sessions {
        // One who_has per session: its request, for its reply.
        let mut who_has_request: Option<Value> = None;
        for case in &session.cases {
            if !is_typed(case) || case.failed {
                continue;
            }
            let (_env, value) = decode_wire(case);
            let what = case.name.clone();
            if case.request_op.is_none() {
                let maps: Vec<&Value> = match &value {
                    Value::Array(items) => items.iter().collect(),
                    map => vec![map],
                };
                for m in maps {
                    match ClientToScheduler::from_value(m.clone()) {
                        Ok(ClientToScheduler::UpdateGraph(g))
                            if case.channel.starts_with("client") =>
                        {
                            let g: UpdateGraph = g;
                            let Keys::Set(keys) = &g.keys else {
                                panic!("{what}: keys as a set: {:?}", g.keys)
                            };
                            assert!(!keys.is_empty(), "{what}");
                            assert!(g.code.is_pickled() && g.annotations.is_pickled());
                            assert!(g.span_metadata.is_pickled(), "{what}");
                            if let Some(p) = &g.internal_priority {
                                assert!(p.keys().all(|k| keys.contains(k)), "{what}");
                            }
                            let old = session.release == "2024.12.1";
                            assert_eq!(g.expr_ser.is_none(), old, "{what}: expr_ser");
                            assert_eq!(g.graph_frames.is_some(), old, "{what}: graph_frames");
                            if let Some(e) = &g.expr_ser {
                                assert!(matches!(e, Value::Serialized(_)), "{what}: {e:?}");
                            }
                            // `submit`/`map` send "100 ms", `compute` "60s".
                            match &g.fifo_timeout {
                                Timedelta::Text(t) if t == "100 ms" || t == "60s" => {}
                                other => panic!("{what}: fifo_timeout {other:?}"),
                            }
                            seen.insert(format!("update-graph {}", session.release));
                        }
                        _ => {}
                    }
                    if case.direction == "scheduler->client" {
                        if let SchedulerToClient::KeyInMemory(k) =
                            SchedulerToClient::from_value(m.clone()).unwrap()
                        {
                            let k: KeyInMemory = k;
                            if let Some(t) = &k.type_ {
                                let t = t.as_ref().expect("a pickled type");
                                assert_eq!(t.first(), Some(&0x80), "{what}: a pickle");
                                seen.insert("key-in-memory type".into());
                            }
                        }
                    }
                }
                if case.op == "who_has" {
                    who_has_request = Some(value);
                }
                continue;
            }
            match (case.request_op.as_deref(), reply_of(case)) {
                (Some("who_has"), Some(Reply::WhoHas)) => {
                    let r: WhoHasReply = framewire::from_value(value).unwrap();
                    let req = who_has_request.take().expect("the who_has request");
                    let SchedulerRequest::WhoHas(req) = SchedulerRequest::from_value(req).unwrap()
                    else {
                        panic!("{what}: the request")
                    };
                    let req: WhoHas = req;
                    let asked = req.keys.expect("keys");
                    assert_eq!(r.keys().cloned().collect::<Vec<_>>(), asked, "{what}");
                    assert!(r
                        .values()
                        .all(|w| w.iter().all(|a| a.starts_with("tcp://"))));
                    seen.insert("who_has".into());
                }
                (_, Some(Reply::SchedulerIdentity)) => {
                    let r: SchedulerIdentity = framewire::from_value(value).unwrap();
                    assert!(r.id.starts_with("Scheduler-") && r.address.starts_with("tcp://"));
                    if let Some(n) = r.n_workers {
                        assert_eq!(n, 2, "{what}: two workers");
                        assert_eq!(r.total_threads, Some(2), "{what}");
                    }
                    for (addr, w) in &r.workers {
                        assert!(addr.starts_with("tcp://127.0.0.1:"), "{what}: {addr}");
                        assert_eq!(w.nthreads, 1, "{what}");
                        assert_eq!(w.memory_limit, Some(2 << 30), "{what}");
                        assert_eq!(w.host, "127.0.0.1", "{what}");
                        seen.insert("identity workers".into());
                    }
                }
                (_, Some(Reply::RetireWorkers)) => {
                    let r: RetireWorkersReply = framewire::from_value(value).unwrap();
                    assert_eq!(r.len(), 1, "{what}");
                    assert_eq!(r[0].status, "closed", "{what}");
                    seen.insert("retire_workers".into());
                }
                _ => {}
            }
        }
    }
    for want in [
        "update-graph 2024.12.1",
        "update-graph 2026.8.0",
        "key-in-memory type",
        "who_has",
        "identity workers",
        "retire_workers",
    ] {
        assert!(seen.contains(want), "{want} not checked: {seen:?}");
    }
}
