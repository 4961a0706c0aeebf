//! Processes and scratch directories for the CLI tests: the `framewire`
//! binary run with some stdin, and the library tests' background processes
//! and scratch directories (`tests/support/cluster.rs`: killed, reaped and
//! removed on drop, whatever happens).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/cluster.rs"]
pub mod cluster;
// Not every test uses all of them.
#[allow(unused_imports)]
pub use cluster::{scheduler, scheduler_with, scratch_dir, Daemon, STARTUP};

/// The repository's root, where the captures and the Python scripts the
/// CLI tests use live (`tests/captures`, `tests/dask`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the CLI package sits in the repository")
        .to_path_buf()
}

/// Starts the `framewire` binary with `args`, stdout and stderr piped, and
/// `stdin` written to it (closed at once; none: null).
pub fn spawn_framewire(args: &[&str], stdin: Option<&[u8]>) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_framewire"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn framewire");
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(data).unwrap();
    }
    child
}

/// Runs `framewire ARGS` with `stdin` to its end, its pipes drained by
/// threads (so it never blocks on them); panics if it runs past `guard`.
/// Returns its output and how long it ran.
pub fn run_framewire(args: &[&str], stdin: Option<&[u8]>, guard: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = spawn_framewire(args, stdin);
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).map(|_| v)
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).map(|_| v)
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > guard {
            let _ = child.kill();
            let _ = child.wait();
            panic!("framewire {args:?} hung for {guard:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    let output = Output {
        status,
        stdout: out.join().unwrap().unwrap(),
        stderr: err.join().unwrap().unwrap(),
    };
    (output, elapsed)
}

/// Waits for `daemon` to exit; panics (with its output and `context`, the
/// logs of the processes it talks to) if it is still running after `guard`.
pub fn wait_exit_within(
    daemon: &mut Daemon,
    guard: Duration,
    context: impl Fn() -> String,
) -> ExitStatus {
    daemon.wait_exit(guard).unwrap_or_else(|| {
        panic!(
            "{} hung for {guard:?}\n{}\n{}",
            daemon.name,
            daemon.logs(),
            context()
        )
    })
}

/// Waits (bounded) until a tap's log at `path` has a close line for every
/// connection it opened; returns the log.
pub fn wait_all_closed(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let opened = log.lines().filter(|l| l.contains(" open client=")).count();
        let closed = log.lines().filter(|l| l.contains(" closed")).count();
        if opened > 0 && opened == closed {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "{opened} connections opened, {closed} closed; the tap's log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks the result line of `tests/dask/tap_client.py` (a Python `Client`
/// run through a tap): it exited cleanly, saw one worker and passed every
/// check. Returns the bytes it scattered. `context` (a log, say) is shown
/// when no result line came.
pub fn check_tap_client(name: &str, status: ExitStatus, out: &str, context: &str) -> u64 {
    use serde_json::Value as Json;
    let result: Json = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .find(|j| j.get("ok").is_some())
        .unwrap_or_else(|| panic!("{name}: no result line ({status}):\n{out}\n{context}"));
    assert!(status.success(), "{name}: {result}\n{out}");
    assert_eq!(result["ok"], true, "{name}: {result}");
    assert_eq!(result["workers"], 1, "{name}: {result}");
    for check in [
        "scatter_mean",
        "gather_doubled",
        "map_sum",
        "gather_map",
        "transpose",
    ] {
        assert_eq!(result["checks"][check], true, "{name}: {check}: {result}");
    }
    result["scattered_bytes"].as_u64().unwrap()
}
