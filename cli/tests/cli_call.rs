//! `framewire call` against a real Python Dask scheduler (started here; the
//! test fails, never skips, when Python Dask is missing), and against
//! addresses that refuse or never answer.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

const BIN: &str = env!("CARGO_BIN_EXE_framewire");

/// Every `framewire call` here finishes in well under this.
const CALL_GUARD: Duration = Duration::from_secs(60);

// ---- helpers -------------------------------------------------------------------

#[path = "support/procs.rs"]
mod procs;
use procs::{scratch_dir, spawn_framewire, Daemon};

/// A real `dask scheduler` on 127.0.0.1, any free port, no dashboard.
fn start_scheduler(dir: &Path) -> (Daemon, String) {
    procs::scheduler(&dask_python::python(), dir, &[])
}

/// Runs `framewire ARGS` with `stdin`, killing it after [`CALL_GUARD`].
fn framewire(args: &[&str], stdin: Option<&str>) -> (Output, Duration) {
    procs::run_framewire(args, stdin.map(str::as_bytes), CALL_GUARD)
}

/// The one JSON line a successful call prints.
fn reply(out: &Output) -> Json {
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {stdout}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The one-line error of a failed call (exit 1, nothing on stdout).
fn failure(out: &Output) -> String {
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.ends_with('\n'));
    assert!(stderr.starts_with("framewire: "), "{stderr}");
    stderr.trim_end().to_owned()
}

/// At least `n` bytes of one line of text repeated: what lz4 compresses well.
fn compressible(n: usize) -> Vec<u8> {
    let line = b"framewire call: the same line again and again, so that lz4 finds matches.\n";
    line.iter().copied().cycle().take(n).collect()
}

/// `{"op": "echo", "data": {"$serialize": {"$bytes": "<hex>"}}}`: the bytes
/// in a block of their own (one payload frame).
fn echo_message(data: &[u8]) -> String {
    format!(
        r#"{{"op": "echo", "data": {{"$serialize": {{"$bytes": "{}"}}}}}}"#,
        hex::encode(data)
    )
}

/// The JSON `call` prints for bytes over 512: length and digest.
fn long_bytes(data: &[u8]) -> Json {
    serde_json::json!({
        "$bytes": null,
        "len": data.len(),
        "sha256": hex::encode(Sha256::digest(data)),
    })
}

/// `framewire tap ARGS --listen 127.0.0.1:0 --upstream UPSTREAM`: the tap,
/// the address it listens on, and its log file.
fn start_tap(dir: &Path, upstream: &str, args: &[&str]) -> (Daemon, String, PathBuf) {
    let log = dir.join("tap-messages.log");
    let mut cmd = Command::new(BIN);
    cmd.arg("tap")
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream, "--log"])
        .arg(&log);
    let mut tap = Daemon::start("tap", &mut cmd, dir);
    let addr = tap.wait_for(Duration::from_secs(10), |log| {
        let line = log
            .lines()
            .find(|l| l.starts_with("framewire tap: listening on "))?;
        let rest = line.trim_start_matches("framewire tap: listening on ");
        Some(rest.split(',').next()?.to_owned())
    });
    (tap, addr, log)
}

/// Waits (bounded) until the file holds `n` lines containing `needle`.
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

/// The `bytes=` of the log line containing `needle`.
fn logged_bytes(log: &str, needle: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{log}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("bytes="))
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("no bytes= in {line:?}"))
}

// ---- tests --------------------------------------------------------------------

#[test]
fn call_against_a_real_scheduler() {
    let dir = scratch_dir("call");
    let (scheduler, address) = start_scheduler(dir.path());
    let on_failure = || scheduler.logs();

    // identity: the scheduler describes itself.
    let (out, _) = framewire(&["call", &address, r#"{"op": "identity"}"#], None);
    let identity = reply(&out);
    assert_eq!(identity["type"], "Scheduler", "{identity}");
    let id = identity["id"].as_str().expect("an id");
    assert!(id.starts_with("Scheduler-"), "{identity}");
    assert_eq!(identity["address"], address.as_str(), "{identity}");
    assert!(identity["workers"].is_object(), "{identity}");

    // The message from stdin: the same scheduler.
    let (out, _) = framewire(&["call", &address, "-"], Some(r#"{"op": "identity"}"#));
    assert_eq!(reply(&out)["id"], id);

    // With --timeout, a fraction of a second is plenty for a live server.
    let (out, _) = framewire(
        &["call", "--timeout", "20", &address, r#"{"op": "identity"}"#],
        None,
    );
    assert_eq!(reply(&out)["address"], address.as_str());

    // echo: blocks in the reply come back deserialized, as with
    // `inspect --deserialize` (an array by dtype, shape and digest).
    let data = "0100000002000000ffffffff";
    let msg = format!(
        r#"{{"op": "echo", "data": {{"$serialize": {{"$ndarray": {{"dtype": "<i4", "shape": [3], "data": "{data}"}}}}}}}}"#
    );
    let (out, _) = framewire(&["call", &address, &msg], None);
    let echoed = reply(&out);
    let digest = hex::encode(Sha256::digest(hex::decode(data).unwrap()));
    assert_eq!(
        echoed,
        serde_json::json!({"$ndarray": {"dtype": "<i4", "shape": [3], "data_sha256": digest}}),
        "scheduler log:\n{}",
        on_failure()
    );
    let (out, _) = framewire(
        &[
            "call",
            &address,
            r#"{"op": "echo", "data": {"$bytes": "00ff10"}}"#,
        ],
        None,
    );
    assert_eq!(reply(&out), serde_json::json!({"$bytes": "00ff10"}));

    // "reply": false, as Dask's send_recv(reply=False): nothing to wait for.
    let (out, _) = framewire(
        &["call", &address, r#"{"op": "identity", "reply": false}"#],
        None,
    );
    assert_eq!(reply(&out), Json::Null);

    // An error reply: the handler raised, Dask answers
    // {"status": "uncaught-error", "exception": .., "exception_text": ..}.
    let (out, _) = framewire(
        &["call", &address, r#"{"op": "identity", "bogus": 1}"#],
        None,
    );
    let line = failure(&out);
    assert!(
        line.starts_with(&format!(
            "framewire: {address}: identity: remote error (uncaught-error): TypeError("
        )),
        "{line}"
    );
    assert!(line.contains("bogus"), "{line}");

    // The server is still fine afterwards.
    let (out, _) = framewire(&["call", &address, r#"{"op": "identity"}"#], None);
    assert_eq!(reply(&out)["id"], id);

    // --checksums offer: a Python server never offers them; the call works
    // without.
    let identity_msg = r#"{"op": "identity"}"#;
    let (out, _) = framewire(
        &["call", "--checksums", "offer", &address, identity_msg],
        None,
    );
    assert_eq!(reply(&out)["id"], id);
    // --checksums require: one line, exit 1.
    let (out, _) = framewire(
        &["call", "--checksums", "require", &address, identity_msg],
        None,
    );
    let line = failure(&out);
    assert!(
        line.starts_with(&format!(
            "framewire: {address}: checksums required, the server did not offer them"
        )),
        "{line}"
    );

    // --compression lz4: offered, but a Dask server answers nil to a client
    // on its own host, so nothing is compressed; the call works all the
    // same. Seen through a tap (with --checksums, not agreed with Python):
    // the 120 000 compressible bytes cross uncompressed both ways.
    let data = compressible(120_000);
    let (tap, tap_addr, tap_log) = start_tap(dir.path(), &address, &["--checksums"]);
    let (out, _) = framewire(
        &[
            "call",
            "--compression",
            "lz4",
            "--checksums",
            "offer",
            &format!("tcp://{tap_addr}"),
            "-",
        ],
        Some(&echo_message(&data)),
    );
    assert_eq!(
        reply(&out),
        long_bytes(&data),
        "scheduler log:\n{}\ntap log:\n{}",
        on_failure(),
        tap.logs()
    );
    let log = wait_log(&tap_log, " closed", 1);
    assert!(log.contains("conn=1 checksums=not-agreed"), "{log}");
    assert!(!log.contains(" error "), "{log}");
    assert!(logged_bytes(&log, "conn=1 c->u op=echo ") > data.len() as u64);
    assert!(logged_bytes(&log, "conn=1 u->c op=- ") > data.len() as u64);
    drop(tap);

    // zstd likewise (straight to the scheduler).
    let (out, _) = framewire(
        &["call", "--compression", "zstd", &address, "-"],
        Some(&echo_message(&data)),
    );
    assert_eq!(reply(&out), long_bytes(&data));
}

#[test]
fn connection_refused_is_one_line() {
    // A port that was free a moment ago: nothing listens there.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let address = format!("tcp://127.0.0.1:{port}");
    // Tried again and again for --connect-timeout, as Dask's connect().
    let (out, elapsed) = framewire(
        &[
            "call",
            "--connect-timeout",
            "1",
            &address,
            r#"{"op": "identity"}"#,
        ],
        None,
    );
    let line = failure(&out);
    assert!(
        line.starts_with(&format!(
            "framewire: timed out trying to connect to {address} after 1 s ("
        )),
        "{line}"
    );
    assert!(
        line.ends_with("Connection refused (os error 111)"),
        "{line}"
    );
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
}

#[test]
fn a_server_that_starts_after_call_is_reached() {
    // Dask's connect() retries until its timeout: so does call. The server
    // comes up half a second after call started.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("tcp://{}", listener.local_addr().unwrap());
    drop(listener);
    let python = dask_python::python();
    let child = spawn_framewire(
        &[
            "call",
            "--connect-timeout",
            "60",
            "--timeout",
            "90",
            &address,
            r#"{"op": "echo", "data": "late"}"#,
        ],
        None,
    );
    std::thread::sleep(Duration::from_millis(500));
    let dir = scratch_dir("call-late");
    let port = address.rsplit(':').next().unwrap();
    let mut server = Daemon::start(
        "late-scheduler",
        std::process::Command::new(&python).args([
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--no-dashboard",
        ]),
        dir.path(),
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), r#""late""#);
    assert!(server.is_running());
}

#[test]
fn timeout_on_a_listener_that_never_answers() {
    // The kernel completes the TCP handshake (backlog), but nobody ever
    // reads or writes: no Dask handshake comes back.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("tcp://{}", listener.local_addr().unwrap());
    let (out, elapsed) = framewire(
        &[
            "call",
            "--timeout",
            "0.5",
            &address,
            r#"{"op": "identity"}"#,
        ],
        None,
    );
    let line = failure(&out);
    assert_eq!(
        line,
        format!("framewire: {address}: no handshake from the server within 0.5 s")
    );
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    drop(listener);
}

#[test]
fn bad_input_is_one_line() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("tcp://{}", listener.local_addr().unwrap());
    for (args, needle) in [
        (vec!["call", &address, "{"], "JSON input: "),
        (vec!["call", &address, "[1, 2]"], "an object with an \"op\""),
        (vec!["call", &address, r#"{"x": 1}"#], "needs an \"op\""),
        (
            vec!["call", &address, r#"{"op": "x", "y": {"$serialized": 1}}"#],
            "cannot be rebuilt",
        ),
        (
            vec!["call", "ucx://127.0.0.1:1", r#"{"op": "identity"}"#],
            "only tcp:// and tls:// addresses",
        ),
        (
            vec!["call", "tls://127.0.0.1:1", r#"{"op": "identity"}"#],
            "a tls:// address needs --tls-ca-file, --tls-cert and --tls-key",
        ),
        (
            vec![
                "call",
                "--tls-cert",
                "x.pem",
                &address,
                r#"{"op": "identity"}"#,
            ],
            "--tls: TLS needs --tls-ca-file and --tls-cert",
        ),
        (
            vec![
                "call",
                "--tls-ca-file",
                "/nonexistent/ca.pem",
                "--tls-cert",
                "x.pem",
                "tls://127.0.0.1:1",
                r#"{"op": "identity"}"#,
            ],
            "/nonexistent/ca.pem",
        ),
        (
            vec!["call", "tcp://127.0.0.1", r#"{"op": "identity"}"#],
            "expected tcp://HOST:PORT",
        ),
    ] {
        let (out, _) = framewire(&args, None);
        let line = failure(&out);
        assert!(line.contains(needle), "{args:?}: {line}");
    }
    // An empty stdin is not a message either.
    let (out, _) = framewire(&["call", &address, "-"], Some(""));
    assert!(failure(&out).contains("JSON input: "));

    // An unknown codec.
    for codec in ["brotli", "LZ4", ""] {
        let (out, _) = framewire(
            &[
                "call",
                "--compression",
                codec,
                &address,
                r#"{"op": "identity"}"#,
            ],
            None,
        );
        assert_eq!(
            failure(&out),
            format!(
                "framewire: --compression {codec:?}: unknown codec (known: zlib, snappy, lz4, zstd)"
            )
        );
    }

    // None of these even connected: the listener has nothing to accept.
    listener.set_nonblocking(true).unwrap();
    let accepted = listener.accept().map(|(_, peer)| peer);
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection was made: {accepted:?}"
    );
}

#[test]
fn call_a_framewire_server_with_lz4_and_checksums() {
    use framewire::Value;

    let (addr, seen) = fw_server::start();
    let address = format!("tcp://{addr}");
    let data = compressible(150_000);
    let msg = echo_message(&data);
    let expected = serde_json::json!({"status": "OK", "data": long_bytes(&data)});
    let lz4 = Some(Value::Array(vec![Value::str("lz4")]));
    let raw = Some(Value::Array(vec![Value::Nil]));

    // Both agreed: the payload went out lz4-compressed (the server looked at
    // the raw sub-header), every message after the handshakes carried a
    // trailer both ways, and the compressed reply decodes intact.
    let (out, _) = framewire(
        &[
            "call",
            "--checksums",
            "require",
            "--compression",
            "lz4",
            &address,
            "-",
        ],
        Some(&msg),
    );
    assert_eq!(reply(&out), expected);
    let s = fw_server::wait_seen(&seen, 0);
    assert!(s.checksums, "{s:?}");
    assert_eq!(s.compression.as_deref(), Some("lz4"), "{s:?}");
    assert_eq!(s.echo_codecs, [vec![lz4.clone()]], "{s:?}");
    assert_eq!(s.reply_codecs, [vec![lz4.clone()]], "{s:?}");
    assert_eq!(s.ops, ["echo", "close"], "{s:?}");
    assert_eq!(s.end.as_deref(), Some("eof"), "{s:?}");

    // Neither flag: Dask's defaults, nothing compressed, no trailers.
    let (out, _) = framewire(&["call", &address, "-"], Some(&msg));
    assert_eq!(reply(&out), expected);
    let s = fw_server::wait_seen(&seen, 1);
    assert!(!s.checksums, "{s:?}");
    assert_eq!(s.compression, None, "{s:?}");
    assert_eq!(s.echo_codecs, [vec![raw.clone()]], "{s:?}");
    assert_eq!(s.reply_codecs, [vec![raw.clone()]], "{s:?}");

    // zstd against a server offering lz4: no codec agreed, so nothing is
    // compressed; checksums still are.
    let (out, _) = framewire(
        &[
            "call",
            "--compression",
            "zstd",
            "--checksums",
            "offer",
            &address,
            "-",
        ],
        Some(&msg),
    );
    assert_eq!(reply(&out), expected);
    let s = fw_server::wait_seen(&seen, 2);
    assert!(s.checksums, "{s:?}");
    assert_eq!(s.compression, None, "{s:?}");
    assert_eq!(s.echo_codecs, [vec![raw]], "{s:?}");
    assert_eq!(s.ops, ["echo", "close"], "{s:?}");
}
#[path = "support/framewire_server.rs"]
mod fw_server;
