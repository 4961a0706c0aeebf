//! `framewire tap` in front of a real Dask cluster: a Python `dask scheduler`
//! and `dask worker` (started here; the test fails, never skips, when Python
//! Dask is missing), and a Python `Client` that connects through the tap and
//! moves numpy arrays both ways (`tests/dask/tap_client.py`). The worker
//! talks to the scheduler directly; everything the client says goes through
//! the tap, relayed unchanged.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

const BIN: &str = env!("CARGO_BIN_EXE_framewire");

/// Time the client script gets for its whole graph.
const CLIENT_GUARD: Duration = Duration::from_secs(180);

// ---- helpers -------------------------------------------------------------------

#[path = "support/procs.rs"]
mod procs;
use procs::{scratch_dir, Daemon, STARTUP};

/// One parsed message line of the tap's log.
#[derive(Debug)]
struct Message {
    conn: u64,
    direction: String,
    ops: String,
    frames: u64,
    bytes: u64,
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn is_rfc3339_ms(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 24
        && t.ends_with('Z')
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && t.char_indices()
            .filter(|&(i, _)| ![4, 7, 10, 13, 16, 19, 23].contains(&i))
            .all(|(_, c)| c.is_ascii_digit())
}

fn field<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    words.iter().find_map(|w| w.strip_prefix(key))
}

fn int_field(words: &[&str], key: &str, line: &str) -> u64 {
    field(words, key)
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not an integer in {line:?}"))
}

// ---- the test -----------------------------------------------------------------

#[test]
fn dask_cluster_works_through_the_tap() {
    let python = dask_python::python();
    let dir = scratch_dir("tap");

    let (scheduler, sched_addr) = procs::scheduler(&python, dir.path(), &[]);

    // One worker process (no nanny, so that killing it leaves nothing
    // behind), straight to the scheduler.
    let mut worker = Daemon::start(
        "worker",
        Command::new(&python).args([
            "-m",
            "distributed.cli.dask_worker",
            &sched_addr,
            "--nworkers",
            "1",
            "--nthreads",
            "2",
            "--no-nanny",
            "--no-dashboard",
            "--host",
            "127.0.0.1",
        ]),
        dir.path(),
    );

    let tap_log = dir.path().join("tap-messages.log");
    let upstream = sched_addr.trim_start_matches("tcp://").to_owned();
    let mut tap = Daemon::start(
        "tap",
        Command::new(BIN).args([
            "tap",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--log",
            tap_log.to_str().unwrap(),
        ]),
        dir.path(),
    );
    let tap_addr = tap.wait_for(Duration::from_secs(10), |log| {
        let line = log
            .lines()
            .find(|l| l.starts_with("framewire tap: listening on "))?;
        let addr = line
            .trim_start_matches("framewire tap: listening on ")
            .split(',')
            .next()?;
        Some(addr.to_owned())
    });
    assert!(!tap_addr.ends_with(":0"), "the real port: {tap_addr}");
    worker.wait_for(STARTUP, |log| log.contains("Registered to:").then_some(()));

    // The client, through the tap.
    let script = procs::repo_root().join("tests/dask/tap_client.py");
    let mut client = Daemon::start(
        "client",
        Command::new(&python)
            .arg(&script)
            .arg(format!("tcp://{tap_addr}")),
        dir.path(),
    );
    let status = procs::wait_exit_within(&mut client, CLIENT_GUARD, || {
        let tap = std::fs::read_to_string(&tap_log).unwrap_or_default();
        format!("tap log:\n{tap}")
    });
    let client_out = client.logs();
    let scheduler_log = format!("scheduler:\n{}", scheduler.logs());
    let scattered = procs::check_tap_client("client", status, &client_out, &scheduler_log);

    // The client closed its connections: wait (bounded) until the tap has
    // logged a close for every connection it opened.
    let log = procs::wait_all_closed(&tap_log);
    assert!(tap.is_running(), "the tap keeps listening: {}", tap.logs());

    // ---- the log ----
    let mut messages = Vec::new();
    let mut conns = BTreeSet::new();
    for line in log.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(
            words.first().is_some_and(|t| is_rfc3339_ms(t)),
            "timestamp: {line:?}"
        );
        assert!(!words.contains(&"error"), "an error line: {line:?}\n{log}");
        if let Some(id) = field(&words, "conn=") {
            conns.insert(id.parse::<u64>().unwrap());
        }
        let Some(direction) = words
            .iter()
            .find(|w| **w == "c->u" || **w == "u->c")
            .map(|w| w.to_string())
        else {
            continue;
        };
        let m = Message {
            conn: int_field(&words, "conn=", line),
            direction,
            ops: field(&words, "op=")
                .unwrap_or_else(|| panic!("no op= in {line:?}"))
                .to_owned(),
            frames: int_field(&words, "frames=", line),
            bytes: int_field(&words, "bytes=", line),
        };
        assert!(m.frames > 0 && m.bytes > 0, "{line:?}");
        // A message is at least its prelude (16 bytes + 8 per frame).
        assert!(m.bytes >= 16 + 8 * m.frames, "{line:?}");
        messages.push(m);
    }
    assert!(
        conns.len() >= 2,
        "the client opens several connections: {log}"
    );
    let c2u: Vec<&Message> = messages.iter().filter(|m| m.direction == "c->u").collect();
    let u2c: Vec<&Message> = messages.iter().filter(|m| m.direction == "u->c").collect();
    assert!(!c2u.is_empty() && !u2c.is_empty(), "{log}");

    // Each connection starts with the relayed handshake, both ways.
    let mut first: BTreeMap<(u64, &str), &str> = BTreeMap::new();
    for m in &messages {
        first
            .entry((m.conn, m.direction.as_str()))
            .or_insert(m.ops.as_str());
    }
    for ((conn, dir), ops) in &first {
        assert_eq!(*ops, "(handshake)", "conn {conn} {dir}: {log}");
    }

    // What a Dask client says to its scheduler.
    let has_op = |msgs: &[&Message], op: &str| {
        msgs.iter()
            .any(|m| m.ops.split(',').any(|o| o.split('*').next() == Some(op)))
    };
    for op in [
        "register-client",
        "identity",
        "update-graph",
        "scatter",
        "gather",
    ] {
        assert!(has_op(&c2u, op), "no c->u op={op}:\n{log}");
    }
    assert!(
        has_op(&u2c, "key-in-memory"),
        "no u->c key-in-memory:\n{log}"
    );

    // The 8 MB array crossed the tap both ways, as a frame of its own.
    assert!(
        c2u.iter()
            .any(|m| m.ops == "scatter" && m.bytes > scattered && m.frames >= 3),
        "the scatter message: {log}"
    );
    assert!(
        u2c.iter().any(|m| m.bytes > scattered && m.frames >= 3),
        "the gathered array: {log}"
    );

    // And the scheduler saw a well-behaved client.
    let sched_log = scheduler.logs();
    assert!(
        sched_log.contains("Receive client connection"),
        "{sched_log}"
    );
}

// ---- without Python: byte-exact relaying, bad peers -----------------------------

mod raw {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use bytes::Bytes;
    use framewire::{dumps, Envelope, Value};

    /// A raw TCP echo server (bytes back as they come), one thread per
    /// connection; the listener thread ends with the process.
    fn echo_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let mut writer = stream;
                    let _ = std::io::copy(&mut reader, &mut writer);
                });
            }
        });
        addr
    }

    fn start_tap(dir: &Path, upstream: &str, name: &str) -> (Daemon, String, PathBuf) {
        start_tap_with(dir, upstream, name, &[])
    }

    /// [`start_tap`] with more options (`--checksums`).
    fn start_tap_with(
        dir: &Path,
        upstream: &str,
        name: &str,
        options: &[&str],
    ) -> (Daemon, String, PathBuf) {
        let log = dir.join(format!("{name}-messages.log"));
        let mut tap = Daemon::start(
            name,
            Command::new(BIN).arg("tap").args(options).args([
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                upstream,
                "--log",
                log.to_str().unwrap(),
            ]),
            dir,
        );
        let addr = tap.wait_for(Duration::from_secs(10), |log| {
            let line = log
                .lines()
                .find(|l| l.starts_with("framewire tap: listening on "))?;
            Some(
                line.trim_start_matches("framewire tap: listening on ")
                    .split(',')
                    .next()?
                    .to_owned(),
            )
        });
        (tap, addr, log)
    }

    fn connect(addr: &str) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    fn wire(v: &Value) -> Bytes {
        Envelope::new(dumps(v).unwrap()).unwrap().to_bytes()
    }

    /// Waits (bounded) until the log holds `n` lines containing `needle`.
    fn wait_log(path: &Path, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(path).unwrap_or_default();
            if log.lines().filter(|l| l.contains(needle)).count() >= n {
                return log;
            }
            assert!(Instant::now() < deadline, "waiting for {needle:?}:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn tap_relays_bytes_unchanged_and_survives_bad_peers() {
        let dir = scratch_dir("tap-raw");
        let upstream = echo_server();
        let (mut tap, addr, log_path) = start_tap(dir.path(), &upstream, "tap");

        let handshake = Value::map_of([
            ("compression", Value::Nil),
            (
                "python",
                Value::Array(vec![3u8.into(), 11u8.into(), 7u8.into()]),
            ),
            ("pickle-protocol", 5u8.into()),
        ]);
        let op = |name: &str| Value::map_of([("op", Value::str(name))]);
        let big = Value::map_of([
            ("op", Value::str("update-data")),
            (
                "data",
                Value::ToSerialize(Box::new(Value::Bin(Bytes::from(
                    (0..3 << 20)
                        .map(|i| (i * 7 % 251) as u8)
                        .collect::<Vec<u8>>(),
                )))),
            ),
        ]);
        let batch = Value::Array(vec![
            op("task-finished"),
            op("task-finished"),
            op("release"),
        ]);
        let msgs = [
            wire(&handshake),
            wire(&big),
            wire(&batch),
            wire(&Value::str("OK")),
        ];

        // Two connections at once; each gets its bytes back exactly.
        let mut a = connect(&addr);
        let mut b = connect(&addr);
        for m in &msgs {
            a.write_all(m).unwrap();
        }
        b.write_all(&msgs[0]).unwrap();
        let sent: Vec<u8> = msgs.iter().flat_map(|m| m.iter().copied()).collect();
        let mut back = vec![0u8; sent.len()];
        a.read_exact(&mut back).unwrap();
        assert!(back == sent, "the relayed bytes differ");
        let mut back = vec![0u8; msgs[0].len()];
        b.read_exact(&mut back).unwrap();
        assert_eq!(back, msgs[0]);

        // A peer that sends garbage (2^40 frames) is cut off, with an error
        // line; the other connection carries on.
        let mut bad = connect(&addr);
        let mut garbage = 100u64.to_le_bytes().to_vec();
        garbage.extend_from_slice(&(1u64 << 40).to_le_bytes());
        bad.write_all(&garbage).unwrap();
        let mut rest = Vec::new();
        let _ = bad.read_to_end(&mut rest); // EOF (or a reset): closed by the tap
        assert!(rest.is_empty());
        b.write_all(&msgs[2]).unwrap();
        let mut back = vec![0u8; msgs[2].len()];
        b.read_exact(&mut back).unwrap();
        assert_eq!(back, msgs[2]);
        drop((a, b));

        let log = wait_log(&log_path, " closed", 3);
        assert!(tap.is_running(), "{}", tap.logs());
        let lines: Vec<&str> = log.lines().collect();
        let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
        // Both directions of every message, ops named, frames and bytes exact.
        for dir in ["c->u", "u->c"] {
            assert!(
                has(&format!(
                    "conn=1 {dir} op=(handshake) frames=1 bytes={}",
                    msgs[0].len()
                )),
                "{log}"
            );
            assert!(
                has(&format!(
                    "conn=1 {dir} op=update-data frames=3 bytes={}",
                    msgs[1].len()
                )),
                "{log}"
            );
            assert!(
                has(&format!(
                    "conn=1 {dir} op=task-finished*2,release frames=1 bytes={}",
                    msgs[2].len()
                )),
                "{log}"
            );
            assert!(
                has(&format!(
                    "conn=1 {dir} op=- frames=1 bytes={}",
                    msgs[3].len()
                )),
                "{log}"
            );
        }
        assert!(has("conn=3 error c->u reading from client: "), "{log}");
        assert!(has("conn=3 closed c->u=0 u->c=0"), "{log}");
        assert!(
            has("conn=1 closed by=client reason=eof c->u=4 u->c=4"),
            "{log}"
        );

        // An upstream that refuses: the client is closed, the error logged,
        // and the tap keeps listening.
        let refused = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        // It tries for --connect-timeout, as Dask's connect() does.
        let (mut tap2, addr2, log2) = start_tap_with(
            dir.path(),
            &refused,
            "tap-refused",
            &["--connect-timeout", "0.5"],
        );
        for _ in 0..2 {
            let mut c = connect(&addr2);
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
            assert!(rest.is_empty());
        }
        let log = wait_log(&log2, "error connecting", 2);
        assert!(
            log.contains(&format!("to upstream {refused}: gave up after 0.5 s (")),
            "{log}"
        );
        assert!(log.contains("attempts): Connection refused"), "{log}");
        assert!(tap2.is_running(), "{}", tap2.logs());
    }

    /// A raw TCP server that reads each connection to its end and sends
    /// what it received (once the client closed) on the channel.
    fn sink_server() -> (String, std::sync::mpsc::Receiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let _ = stream.read_to_end(&mut got);
                    let _ = tx.send(got);
                });
            }
        });
        (addr, rx)
    }

    /// The `closed` line of `conn` in `log`, as `key=value` pairs.
    fn closed_fields(log: &str, conn: u64) -> BTreeMap<String, String> {
        let prefix = format!("conn={conn} closed ");
        let line = log
            .lines()
            .find(|l| l.contains(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{log}"));
        line.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn int(fields: &BTreeMap<String, String>, key: &str) -> u64 {
        fields[key].parse().unwrap()
    }

    /// An `update-data` message with a payload frame of `n` bytes.
    fn big_message(n: usize) -> Bytes {
        let payload: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
        wire(&Value::map_of([
            ("op", Value::str("update-data")),
            (
                "data",
                Value::ToSerialize(Box::new(Value::Bin(Bytes::from(payload)))),
            ),
        ]))
    }

    /// A message is forwarded as it arrives, not once it is whole: half of
    /// a 4 MiB message comes back through the tap (client → tap → echo →
    /// tap → client) before the other half is sent, and its line is
    /// already logged. The close line accounts for every byte relayed, as
    /// copied or spliced (on Linux, most of the payload is spliced; with
    /// `--no-splice` everything is copied).
    #[test]
    fn tap_forwards_messages_as_they_arrive() {
        let dir = scratch_dir("tap-cut-through");
        let upstream = echo_server();
        let msg = big_message(4 << 20);
        for (name, options) in [("tap", &[][..]), ("tap-copy", &["--no-splice"][..])] {
            let (mut tap, addr, log_path) = start_tap_with(dir.path(), &upstream, name, options);
            let mut c = connect(&addr);
            let half = msg.len() / 2;
            c.write_all(&msg[..half]).unwrap();
            let mut back = vec![0u8; half];
            c.read_exact(&mut back).unwrap();
            assert!(
                back == msg[..half],
                "{name}: the first half, relayed both ways"
            );
            for dir in ["c->u", "u->c"] {
                wait_log(
                    &log_path,
                    &format!("conn=1 {dir} op=update-data frames=3 bytes={}", msg.len()),
                    1,
                );
            }
            c.write_all(&msg[half..]).unwrap();
            let mut back = vec![0u8; msg.len() - half];
            c.read_exact(&mut back).unwrap();
            assert!(back == msg[half..], "{name}: the second half");
            drop(c);
            let log = wait_log(&log_path, " closed", 1);
            let f = closed_fields(&log, 1);
            assert_eq!(f["reason"], "eof", "{log}");
            assert_eq!((int(&f, "c->u"), int(&f, "u->c")), (1, 1), "{log}");
            let (copied, spliced) = (int(&f, "copied"), int(&f, "spliced"));
            assert_eq!(copied + spliced, 2 * msg.len() as u64, "{name}: {log}");
            if options.is_empty() && cfg!(target_os = "linux") {
                assert!(spliced > msg.len() as u64, "{name}: mostly spliced: {log}");
            } else {
                assert_eq!(spliced, 0, "{name}: {log}");
            }
            assert!(tap.is_running(), "{}", tap.logs());
        }
    }

    /// A client that sends part of a message and closes: the upstream gets
    /// exactly the bytes sent, then the end of the stream (as it would
    /// without the tap); the tap logs the cut (`reason=truncated`, with how
    /// much of the message arrived), no error, and relays the next
    /// connection as usual. Cut before frame 0 is whole, nothing of the
    /// message is forwarded (its line is never logged).
    #[test]
    fn tap_reports_messages_cut_short() {
        let dir = scratch_dir("tap-truncated");
        let (upstream, received) = sink_server();
        let (mut tap, addr, log_path) = start_tap(dir.path(), &upstream, "tap");
        let msg = big_message(1 << 20);
        let handshake = wire(&Value::map_of([("pickle-protocol", 5u8.into())]));
        for (conn, cut) in [(1u64, msg.len() / 2), (2, 20), (3, msg.len())] {
            let mut c = connect(&addr);
            c.write_all(&handshake).unwrap();
            c.write_all(&msg[..cut]).unwrap();
            drop(c);
            let got = received.recv_timeout(Duration::from_secs(20)).unwrap();
            let log = wait_log(&log_path, &format!("conn={conn} closed"), 1);
            let f = closed_fields(&log, conn);
            assert_eq!(f["by"], "client", "{log}");
            // 20 bytes: not even the prelude (40 bytes), never forwarded.
            let relayed = handshake.len() + if cut == 20 { 0 } else { cut };
            assert!(
                got[..] == [&handshake[..], &msg[..cut]].concat()[..relayed],
                "{log}"
            );
            assert_eq!(got.len(), relayed, "{log}");
            match cut {
                c if c == msg.len() => {
                    assert_eq!(f["reason"], "eof", "{log}");
                    assert!(!f.contains_key("cut"), "{log}");
                }
                20 => {
                    // The prelude is not even whole: its size is unknown.
                    assert_eq!(f["reason"], "truncated", "{log}");
                    assert_eq!(f["cut"], "20/?", "{log}");
                    assert_eq!(int(&f, "c->u"), 1, "only the handshake: {log}");
                }
                _ => {
                    assert_eq!(f["reason"], "truncated", "{log}");
                    assert_eq!(f["cut"], format!("{cut}/{}", msg.len()), "{log}");
                    assert_eq!(int(&f, "c->u"), 2, "{log}");
                }
            }
        }
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(!log.contains(" error "), "{log}");
        assert!(tap.is_running(), "{}", tap.logs());
    }

    /// A side that closes between its own messages while a message is
    /// coming to it cuts that message short: the close line says who closed
    /// and how (`by=client reason=eof`), and how much of the other way's
    /// message got through (`cut=`), spliced or copied. (A Dask worker that
    /// gives up on a transfer from a worker it was told is gone closes so.)
    #[test]
    fn tap_reports_a_message_cut_by_its_receiver() {
        let dir = scratch_dir("tap-cut-by-receiver");
        let msg = big_message(1 << 20);
        let half = msg.len() / 2;
        // An upstream that sends half of `msg`, then waits for the end.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = listener.local_addr().unwrap().to_string();
        let sent = msg.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let sent = sent.clone();
                std::thread::spawn(move || {
                    stream.write_all(&sent[..half]).unwrap();
                    let _ = stream.read_to_end(&mut Vec::new());
                });
            }
        });
        for (name, options) in [("tap", &[][..]), ("tap-copy", &["--no-splice"][..])] {
            let (mut tap, addr, log_path) = start_tap_with(dir.path(), &upstream, name, options);
            let mut c = connect(&addr);
            let mut got = vec![0u8; half];
            c.read_exact(&mut got).unwrap();
            assert!(got == msg[..half], "{name}");
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty(), "{name}: {} more bytes", rest.len());
            let log = wait_log(&log_path, " closed", 1);
            let f = closed_fields(&log, 1);
            assert_eq!(
                (f["by"].as_str(), f["reason"].as_str()),
                ("client", "eof"),
                "{log}"
            );
            assert_eq!(f["cut"], format!("{half}/{}", msg.len()), "{name}: {log}");
            assert_eq!((int(&f, "c->u"), int(&f, "u->c")), (0, 1), "{log}");
            assert_eq!(int(&f, "copied") + int(&f, "spliced"), half as u64, "{log}");
            assert!(tap.is_running(), "{}", tap.logs());
        }
    }

    /// Messages that arrived together with bytes that are not a message are
    /// forwarded before the connection is cut for them.
    #[test]
    fn tap_forwards_messages_before_garbage() {
        let dir = scratch_dir("tap-garbage");
        let (upstream, received) = sink_server();
        let (_tap, addr, log_path) = start_tap(dir.path(), &upstream, "tap");
        let handshake = wire(&Value::map_of([("pickle-protocol", 5u8.into())]));
        let ping = wire(&Value::map_of([("op", Value::str("ping"))]));
        let mut garbage = 100u64.to_le_bytes().to_vec();
        garbage.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let mut c = connect(&addr);
        c.write_all(&[&handshake[..], &ping[..], &garbage[..]].concat())
            .unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest); // closed by the tap
        let got = received.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(got == [&handshake[..], &ping[..]].concat(), "{got:?}");
        let log = wait_log(&log_path, " closed", 1);
        assert!(log.contains("conn=1 c->u op=ping frames=1"), "{log}");
        assert!(
            log.contains("conn=1 error c->u reading from client: invalid message from the peer: "),
            "{log}"
        );
        let f = closed_fields(&log, 1);
        assert_eq!((int(&f, "c->u"), f["cut"].as_str()), (2, "16/?"), "{log}");
    }

    /// Resident memory of a process, in KiB.
    fn vm_rss_kib(pid: u32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    /// A declared size reserves nothing: first messages that declare a
    /// 1 TiB frame, and a length table of 2^32 - 1 frames, then stall,
    /// leave the tap small and relaying (with and without `--checksums`,
    /// where the first message is read exactly).
    #[cfg(target_os = "linux")]
    #[test]
    fn tap_reserves_nothing_for_declared_sizes() {
        let dir = scratch_dir("tap-declared");
        let upstream = echo_server();
        for (name, options) in [("tap", &[][..]), ("tap-sums", &["--checksums"][..])] {
            let (mut tap, addr, log_path) = start_tap_with(dir.path(), &upstream, name, options);
            let ping = dumps(&Value::map_of([("op", Value::from("ping"))])).unwrap();
            let frame0 = &ping[0][..];
            let mut huge = Vec::new();
            huge.extend_from_slice(&(8 + 16 + frame0.len() as u64).to_le_bytes());
            huge.extend_from_slice(&2u64.to_le_bytes());
            huge.extend_from_slice(&(frame0.len() as u64).to_le_bytes());
            huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
            huge.extend_from_slice(frame0);
            huge.extend_from_slice(&[0u8; 100]);
            let mut table = (8u64 + 8 * u64::from(u32::MAX)).to_le_bytes().to_vec();
            table.extend_from_slice(&u64::from(u32::MAX).to_le_bytes());
            table.extend_from_slice(&[0u8; 1000]);
            let mut stalled = Vec::new();
            for bytes in [&huge, &table] {
                let mut c = connect(&addr);
                c.write_all(bytes).unwrap();
                stalled.push(c);
            }
            // The 1 TiB message's line is logged (its frame 0 is in).
            let wire_len = 32 + frame0.len() as u64 + (1 << 40);
            wait_log(&log_path, &format!("op=ping frames=2 bytes={wire_len}"), 1);
            std::thread::sleep(Duration::from_millis(300));
            let rss = vm_rss_kib(tap.child.id());
            assert!(rss < 64 << 10, "{name}: {rss} KiB resident");
            // And it still relays.
            let mut c = connect(&addr);
            let ping = wire(&Value::map_of([("op", Value::str("ping"))]));
            c.write_all(&ping).unwrap();
            let mut back = vec![0u8; ping.len()];
            c.read_exact(&mut back).unwrap();
            assert_eq!(back, ping);
            assert!(tap.is_running(), "{name}: {}", tap.logs());
            drop(stalled);
        }
    }

    /// At least `n` bytes of one line of text repeated: what lz4 compresses well.
    fn compressible(n: usize) -> Vec<u8> {
        let line = b"framewire tap: the same line again and again, so that lz4 finds matches.\n";
        line.iter().copied().cycle().take(n).collect()
    }

    /// `framewire call --timeout 30 ARGS` with `stdin`: exit 0 and one JSON
    /// line, which is returned.
    fn call(args: &[&str], stdin: &str) -> Json {
        let mut child = Command::new(BIN)
            .args(["call", "--timeout", "30"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdin.take().unwrap();
        let text = stdin.to_owned();
        let writer = std::thread::spawn(move || pipe.write_all(text.as_bytes()));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        serde_json::from_str(stdout.trim_end()).unwrap()
    }

    /// `(frames, bytes)` of the log line containing `needle`.
    fn logged(log: &str, needle: &str) -> (u64, u64) {
        let line = log
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{log}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        (
            int_field(&words, "frames=", line),
            int_field(&words, "bytes=", line),
        )
    }

    #[test]
    fn tap_verifies_checksums_between_framewire_peers() {
        use sha2::{Digest, Sha256};

        let dir = scratch_dir("tap-sums");
        let (server, seen) = fw_server::start();
        let data = compressible(150_000);
        let msg = format!(
            r#"{{"op": "echo", "data": {{"$serialize": {{"$bytes": "{}"}}}}}}"#,
            hex::encode(&data)
        );
        let expected = serde_json::json!({"status": "OK", "data": {
            "$bytes": null,
            "len": data.len(),
            "sha256": hex::encode(Sha256::digest(&data)),
        }});
        let lz4 = Some(Value::Array(vec![Value::str("lz4")]));

        // With --checksums: the two framewire peers agree on trailers (and
        // lz4) through the tap, which verifies the trailers of every message
        // after the handshakes, strips them and adds them again.
        // `framewire call` through a tap, asking for trailers and lz4.
        let call_through = |addr: &str| {
            let tap_address = format!("tcp://{addr}");
            let args = [
                "--checksums",
                "require",
                "--compression",
                "lz4",
                &tap_address,
                "-",
            ];
            call(&args, &msg)
        };
        let (mut tap, addr, log_path) =
            start_tap_with(dir.path(), &server, "tap-sums", &["--checksums"]);
        assert_eq!(call_through(&addr), expected);
        let s = fw_server::wait_seen(&seen, 0);
        assert!(s.checksums, "{s:?}");
        assert_eq!(s.compression.as_deref(), Some("lz4"), "{s:?}");
        assert_eq!(s.echo_codecs, [vec![lz4.clone()]], "{s:?}");
        assert_eq!(s.ops, ["echo", "close"], "{s:?}");
        let log = wait_log(&log_path, " closed", 1);
        assert!(log.contains("conn=1 checksums=verified"), "{log}");
        assert!(!log.contains(" error "), "{log}");
        assert!(log.contains("conn=1 closed by=client"), "{log}");
        // frames and bytes as on the wire, trailer included: frame 0, the
        // sub-header, the lz4 payload (far smaller than the data), trailer.
        let echo = logged(&log, "conn=1 c->u op=echo ");
        let answer = logged(&log, "conn=1 u->c op=- ");
        assert_eq!(echo.0, 4, "{log}");
        assert_eq!(answer.0, 4, "{log}");
        assert!(echo.1 < data.len() as u64 / 10, "{log}");
        assert!(answer.1 < data.len() as u64 / 10, "{log}");

        // A client that agrees on checksums, then sends a message with a
        // valid trailer but one bit of frame 0 flipped: the tap reports it
        // and closes the connection; the message never reaches the server.
        let mut bad = connect(&addr);
        let mut offer = framewire::transport::HandshakeOptions::default();
        offer.checksums = framewire::transport::Checksums::Offer;
        bad.write_all(&wire(&offer.to_value().unwrap())).unwrap();
        let theirs = wire(&fw_server::handshake().to_value().unwrap());
        let mut back = vec![0u8; theirs.len()];
        bad.read_exact(&mut back).unwrap();
        assert_eq!(back, theirs, "the server's handshake, relayed");
        let mut frames = dumps(&Value::map_of([("op", Value::str("echo"))])).unwrap();
        // The trailer (SPEC.md §6.2): each frame's CRC32, then the length
        // table's, u32 LE.
        let mut trailer = Vec::new();
        for f in &frames {
            trailer.extend_from_slice(&crc32fast::hash(f).to_le_bytes());
        }
        let table: Vec<u8> = frames
            .iter()
            .flat_map(|f| (f.len() as u64).to_le_bytes())
            .collect();
        trailer.extend_from_slice(&crc32fast::hash(&table).to_le_bytes());
        let mut flipped = frames[0].to_vec();
        *flipped.last_mut().unwrap() ^= 0x10;
        frames[0] = Bytes::from(flipped);
        frames.push(Bytes::from(trailer));
        bad.write_all(&Envelope::new(frames).unwrap().to_bytes())
            .unwrap();
        let mut rest = Vec::new();
        let _ = bad.read_to_end(&mut rest); // EOF (or a reset): closed by the tap
        assert!(rest.is_empty(), "{rest:?}");
        let log = wait_log(&log_path, " closed", 2);
        assert!(log.contains("conn=2 checksums=verified"), "{log}");
        assert!(
            log.lines()
                .any(|l| l.contains("conn=2 error c->u reading from client: ")
                    && l.contains("checksum")),
            "{log}"
        );
        let s = fw_server::wait_seen(&seen, 1);
        assert!(s.checksums, "{s:?}");
        assert!(s.ops.is_empty(), "{s:?}");
        assert!(tap.is_running(), "{}", tap.logs());

        // Without --checksums: the same call works, the trailers relayed as
        // ordinary frames (the same frames and bytes), nothing said about
        // verifying.
        let (_plain, addr, plain_log) = start_tap_with(dir.path(), &server, "tap-plain", &[]);
        assert_eq!(call_through(&addr), expected);
        let s = fw_server::wait_seen(&seen, 2);
        assert!(s.checksums, "{s:?}");
        assert_eq!(s.echo_codecs, [vec![lz4]], "{s:?}");
        let log = wait_log(&plain_log, " closed", 1);
        assert!(!log.contains("checksums="), "{log}");
        assert!(!log.contains(" error "), "{log}");
        assert_eq!(logged(&log, "conn=1 c->u op=echo "), echo, "{log}");
        assert_eq!(logged(&log, "conn=1 u->c op=- "), answer, "{log}");
    }
}
// ---- a framewire server: lz4 and checksums offered --------------------------------

#[path = "support/framewire_server.rs"]
mod fw_server;
