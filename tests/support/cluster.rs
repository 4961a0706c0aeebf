//! Processes of a real Dask cluster for the tests: a Python `dask
//! scheduler`, Python `dask worker`s and the Rust data worker
//! (`examples/data_worker.rs`), each killed and reaped on drop, whatever
//! happens, with its stdout and stderr in files of a scratch directory.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Time a Python process gets to come up (a loaded CI machine is slow).
pub const STARTUP: Duration = Duration::from_secs(90);

/// A scratch directory, `framewire-<tag>-…` under the system's temporary
/// directory, removed on drop.
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("framewire-{tag}-"))
        .tempdir()
        .expect("a scratch directory")
}

/// A background process, killed (and reaped) on drop.
pub struct Daemon {
    pub name: String,
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Daemon {
    /// Starts `cmd` in `dir`, stdout into `dir/<name>.out`, stderr into
    /// `dir/<name>.err`.
    pub fn start(name: &str, cmd: &mut Command, dir: &Path) -> Daemon {
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        let child = cmd
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Daemon {
            name: name.to_owned(),
            child,
            out,
            err,
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Both outputs, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout:\n{}--- {} stderr:\n{}",
            self.name,
            self.stdout(),
            self.name,
            self.stderr()
        )
    }

    /// Waits until `find` finds something in stdout + stderr; panics (with
    /// the logs) if the process exits or `timeout` passes first.
    pub fn wait_for<T>(&mut self, timeout: Duration, find: impl Fn(&str) -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(found) = find(&(self.stdout() + &self.stderr())) {
                return found;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}) early\n{}", self.name, self.logs());
            }
            assert!(
                started.elapsed() < timeout,
                "{}: nothing expected after {timeout:?}\n{}",
                self.name,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to exit, at most `timeout`; `None` if it is
    /// still running then.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
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

/// The first `tcp://...` word of the first line containing `marker`.
pub fn address_after(log: &str, marker: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(marker))?;
    line.split_whitespace()
        .find(|w| w.starts_with("tcp://") || w.starts_with("tls://"))
        .map(str::to_owned)
}

/// A `dask scheduler` on a free loopback port, with extra environment
/// (Dask config variables); returns it and its address.
pub fn scheduler(python: &Path, dir: &Path, env: &[(&str, &str)]) -> (Daemon, String) {
    scheduler_with(python, dir, "scheduler", env, &[] as &[&str])
}

/// [`scheduler`] named `name` (its output `dir/<name>.out` and `.err`),
/// with more command-line arguments (`--protocol tls` and the TLS files,
/// for instance).
pub fn scheduler_with<S: AsRef<OsStr>>(
    python: &Path,
    dir: &Path,
    name: &str,
    env: &[(&str, &str)],
    args: &[S],
) -> (Daemon, String) {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "distributed.cli.dask_scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-dashboard",
    ]);
    cmd.args(args);
    cmd.envs(env.iter().copied());
    let mut d = Daemon::start(name, &mut cmd, dir);
    let addr = d.wait_for(STARTUP, |log| address_after(log, "Scheduler at:"));
    (d, addr)
}

/// A Python `dask worker` (no nanny, so killing it leaves nothing behind);
/// returns it and its address once registered.
pub fn python_worker(python: &Path, dir: &Path, scheduler: &str, name: &str) -> (Daemon, String) {
    python_worker_with(python, dir, scheduler, name, &[])
}

/// [`python_worker`] with more command-line arguments (the TLS files).
pub fn python_worker_with(
    python: &Path,
    dir: &Path,
    scheduler: &str,
    name: &str,
    args: &[&str],
) -> (Daemon, String) {
    let mut d = Daemon::start(
        name,
        Command::new(python)
            .args([
                "-m",
                "distributed.cli.dask_worker",
                scheduler,
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
                "--name",
                name,
            ])
            .args(args),
        dir,
    );
    let addr = d.wait_for(STARTUP, |log| {
        log.contains("Registered to:")
            .then(|| address_after(log, "Start worker at:"))
            .flatten()
    });
    (d, addr)
}

/// The data worker example's binary (`target/<profile>/examples/data_worker`),
/// built first (`cargo build --all-features --example data_worker`, in this
/// test's profile: a no-op when `cargo test` has just built it, and the
/// right binary when only this test was built); panics if the build fails.
pub fn data_worker_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let profile_dir = exe.parent().and_then(Path::parent).unwrap();
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args([
                "build",
                "-p",
                "framewire",
                "--all-features",
                "--example",
                "data_worker",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
            // Without the variables cargo sets for a test process: build
            // scripts that watch them (ring's) would rebuild otherwise.
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy();
                let set_for_tests = [
                    "CARGO_MANIFEST_",
                    "CARGO_PKG_",
                    "CARGO_CRATE_",
                    "CARGO_BIN_",
                ]
                .iter()
                .any(|p| name.starts_with(p))
                    || [
                        "CARGO_PRIMARY_PACKAGE",
                        "CARGO_TARGET_TMPDIR",
                        "CARGO_RUSTC_CURRENT_DIR",
                    ]
                    .contains(&&*name);
                if set_for_tests {
                    cmd.env_remove(&*name);
                }
            }
            if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
                cmd.arg("--release");
            }
            let out = cmd.output().expect("run cargo build");
            assert!(
                out.status.success(),
                "cargo build --example data_worker failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bin = profile_dir.join("examples/data_worker");
            assert!(bin.is_file(), "{} not built", bin.display());
            bin
        })
        .clone()
}

/// The Rust data worker, registered with `scheduler`; returns it and the
/// address it printed.
pub fn rust_worker(dir: &Path, name: &str, scheduler: &str, args: &[&str]) -> (Daemon, String) {
    let mut d = Daemon::start(
        name,
        Command::new(data_worker_binary())
            .arg(scheduler)
            .args(args)
            .env("RUST_BACKTRACE", "1"),
        dir,
    );
    let addr = d.wait_for(Duration::from_secs(60), |_| {
        let out = std::fs::read_to_string(dir.join(format!("{name}.out"))).ok()?;
        let line = out.lines().next()?;
        line.strip_prefix("listening on ").map(str::to_owned)
    });
    (d, addr)
}
