//! Processes and scratch directories for the CLI tests: the `framewire`
//! binary run with some stdin, and background processes and directories that
//! are killed, reaped and removed on drop, whatever happens.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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

/// A scratch directory, `framewire-<tag>-…` under the system's temporary
/// directory, removed on drop.
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("framewire-{tag}-"))
        .tempdir()
        .expect("a scratch directory")
}

/// A background process, killed (and reaped) on drop, whatever happens.
pub struct Daemon {
    name: String,
    pub child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` in `dir`, stdout and stderr into `dir/<name>.log`.
    pub fn start(name: &str, cmd: &mut Command, dir: &Path) -> Daemon {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Daemon {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `find` finds something in the log; panics (with the log)
    /// if the process exits or `timeout` passes first.
    pub fn wait_for<T>(&mut self, timeout: Duration, find: impl Fn(&str) -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            let log = self.log();
            if let Some(found) = find(&log) {
                return found;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}) early; its log:\n{log}", self.name);
            }
            assert!(
                started.elapsed() < timeout,
                "{}: nothing expected in the log after {timeout:?}; the log:\n{log}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to exit; panics (with its log and `context`,
    /// the logs of the processes it talks to) if it is still running after
    /// `guard`.
    pub fn wait_exit(&mut self, guard: Duration, context: impl Fn() -> String) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < guard,
                "{} hung; its log:\n{}\n{}",
                self.name,
                self.log(),
                context()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Time a Python process gets to come up (a loaded CI machine is slow).
pub const STARTUP: Duration = Duration::from_secs(90);

/// The first `tcp://` or `tls://` word of the first log line containing
/// `marker`.
pub fn address_after(log: &str, marker: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(marker))?;
    line.split_whitespace()
        .find(|w| w.starts_with("tcp://") || w.starts_with("tls://"))
        .map(str::to_owned)
}

/// A real `dask scheduler` on 127.0.0.1 (any free port, no dashboard) with
/// `args` added (`--protocol tls` and Dask's TLS flags, for instance), its
/// log `dir/<name>.log`; returns it once it has printed its address, and
/// that address.
pub fn dask_scheduler<S: AsRef<std::ffi::OsStr>>(
    python: &Path,
    dir: &Path,
    name: &str,
    args: &[S],
) -> (Daemon, String) {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "distributed.cli.dask_scheduler"])
        .args(["--host", "127.0.0.1", "--port", "0", "--no-dashboard"])
        .args(args);
    let mut scheduler = Daemon::start(name, &mut cmd, dir);
    let address = scheduler.wait_for(STARTUP, |log| address_after(log, "Scheduler at:"));
    (scheduler, address)
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
