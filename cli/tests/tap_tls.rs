//! `framewire tap` on a real TLS Dask cluster (issue 17, items 2 and 4): a
//! `dask scheduler --protocol tls` and a `dask worker` with Dask's
//! `--tls-ca-file/--tls-cert/--tls-key` (certificates made by the test), and
//!
//! * a tap that ends TLS on both sides (`--listen tls://`, `--upstream
//!   tls://`, one set of files), with a Python `Client` holding a
//!   `distributed.security.Security` through it;
//! * a mixed tap: plaintext clients, TLS upstream (`--upstream-tls-*`: the
//!   tap holds the client certificate), with a plain `Client`;
//!
//! both running scatter, submit and gather of numpy arrays checked in
//! Python (`tests/dask/tap_client.py`), their logs complete, every
//! connection copied (`spliced=0`: the kernel only sees ciphertext).
//! Then the refusals at the TLS tap's door, one log line each and nothing
//! relayed: a client without a certificate, one from another CA, an
//! expired one, plaintext, and a handshake that stalls (refused at the deadline while a
//! good client is relayed). A TLS upstream that refuses the tap's
//! certificate: one error line for that connection. And the reverse mix: TLS clients relayed to a
//! plaintext scheduler (`framewire call` through it). The test fails, never
//! skips, without Python Dask.

#[path = "../../tests/support/certs.rs"]
mod certs;
#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "support/procs.rs"]
mod procs;

use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use procs::{scratch_dir, wait_all_closed, Daemon, STARTUP};
use serde_json::Value as Json;

const BIN: &str = env!("CARGO_BIN_EXE_framewire");
const CLIENT_GUARD: Duration = Duration::from_secs(180);

fn flags(prefix: &str, ca: &Path, cert: &Path, key: &Path) -> Vec<String> {
    [("ca-file", ca), ("cert", cert), ("key", key)]
        .iter()
        .flat_map(|(f, p)| [format!("--{prefix}tls-{f}"), p.display().to_string()])
        .collect()
}

/// A tap, and the `HOST:PORT` it listens on.
fn start_tap(dir: &Path, name: &str, args: &[String]) -> (Daemon, String, PathBuf) {
    let log = dir.join(format!("{name}-messages.log"));
    let mut tap = Daemon::start(
        name,
        Command::new(BIN)
            .arg("tap")
            .args(args)
            .args(["--log", log.to_str().unwrap()]),
        dir,
    );
    let addr = tap.wait_for(Duration::from_secs(10), |log| {
        let line = log
            .lines()
            .find(|l| l.starts_with("framewire tap: listening on "))?;
        let addr = line["framewire tap: listening on ".len()..]
            .split(',')
            .next()?;
        Some(addr.to_owned())
    });
    (tap, addr, log)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits (bounded) until at least `n` lines of the log contain `needle`.
fn wait_log(path: &Path, needle: &str, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = read(path);
        if log.lines().filter(|l| l.contains(needle)).count() >= n {
            return log;
        }
        assert!(Instant::now() < deadline, "waiting for {needle:?}:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key))
}

fn num(line: &str, key: &str) -> u64 {
    field(line, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no integer {key} in {line:?}"))
}

/// Waits for a client script; returns its exit status and output.
fn finish(client: &mut Daemon, logs: &[&Path]) -> (ExitStatus, String) {
    let status = procs::wait_exit_within(client, CLIENT_GUARD, || {
        let logs: Vec<String> = logs.iter().map(|p| read(p)).collect();
        format!("tap logs:\n{}", logs.join("\n"))
    });
    (status, client.logs())
}

/// A complete log of a client's session: the handshakes first, the
/// client's ops, the scattered array both ways, no error, every connection
/// opened with `tls_note` and closed having copied everything.
fn check_log(name: &str, log: &str, tls_note: &str, scattered: u64) {
    let mut ops_c2u = BTreeSet::new();
    let mut ops_u2c = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let (mut big_c2u, mut big_u2c) = (false, false);
    for line in log.lines() {
        assert!(
            !line.contains(" error"),
            "{name}: an error line: {line}\n{log}"
        );
        if line.contains(" open client=") {
            assert!(line.contains(tls_note), "{name}: {line}");
        }
        if line.contains(" closed ") {
            assert!(line.contains(" by="), "{name}: {line}");
            assert_eq!(num(line, "spliced="), 0, "{name}: {line}");
            assert!(num(line, "copied=") > 0, "{name}: {line}");
        }
        let dir = if line.contains(" c->u ") {
            "c->u"
        } else if line.contains(" u->c ") {
            "u->c"
        } else {
            continue;
        };
        let conn = num(line, "conn=");
        let ops = field(line, "op=").unwrap_or_else(|| panic!("{line}"));
        if seen.insert((conn, dir)) {
            assert_eq!(ops, "(handshake)", "{name}: first message: {line}");
        }
        let (frames, bytes) = (num(line, "frames="), num(line, "bytes="));
        let set = if dir == "c->u" {
            big_c2u |= ops == "scatter" && bytes > scattered && frames >= 3;
            &mut ops_c2u
        } else {
            big_u2c |= bytes > scattered && frames >= 3;
            &mut ops_u2c
        };
        for op in ops.split(',') {
            set.insert(op.split('*').next().unwrap().to_owned());
        }
    }
    for op in [
        "register-client",
        "identity",
        "update-graph",
        "scatter",
        "gather",
    ] {
        assert!(ops_c2u.contains(op), "{name}: no c->u op={op}:\n{log}");
    }
    assert!(ops_u2c.contains("key-in-memory"), "{name}: {log}");
    assert!(
        big_c2u && big_u2c,
        "{name}: the 8 MB array both ways:\n{log}"
    );
}

/// A TLS client without a certificate (Python's `ssl`, the CA loaded):
/// what it saw.
fn no_certificate_client(python: &Path, addr: &str, ca: &Path) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let script = r#"
import socket, ssl, sys
host, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.load_verify_locations(ca)
s = socket.create_connection((host, port), timeout=10)
try:
    t = ctx.wrap_socket(s)
    t.sendall(b"\x01" + b"\x00" * 15)
    print("RECV", t.recv(1))
except (ssl.SSLError, OSError) as e:
    print("REFUSED", e)
"#;
    let out = Command::new(python)
        .args(["-c", script, host, port, ca.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `framewire call ADDRESS identity` with `flags`: (success, stdout, stderr).
fn call(flags: &[String], address: &str) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(["call", "--timeout", "10"])
        .args(flags)
        .args([address, r#"{"op": "identity"}"#])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines of `log` about connection `conn`.
fn conn_lines<'a>(log: &'a str, conn: &str) -> Vec<&'a str> {
    let key = format!(" conn={conn} ");
    log.lines().filter(|l| l.contains(&key)).collect()
}

#[test]
fn tls_cluster_through_taps_and_refusals() {
    let python = dask_python::python();
    let dir = scratch_dir("tap-tls");
    let c = certs::make(&dir.path().join("certs"));
    let good = flags("", &c.ca(), &c.cert(), &c.key());

    // A TLS scheduler and worker, as Dask's flags make them.
    let mut tls_args = vec!["--protocol".to_owned(), "tls".to_owned()];
    tls_args.extend(good.iter().cloned());
    let (mut sched, sched_addr) =
        procs::scheduler_with(&python, dir.path(), "scheduler", &[], &tls_args);
    // And a plaintext one, for a tap that takes TLS in and speaks tcp out.
    let (_plain_sched, plain_addr) =
        procs::scheduler_with(&python, dir.path(), "plain-scheduler", &[], &[] as &[&str]);
    let mut worker = Daemon::start(
        "worker",
        Command::new(&python)
            .args(["-m", "distributed.cli.dask_worker", &sched_addr])
            .args(["--nthreads", "2", "--no-nanny", "--no-dashboard"])
            .args(["--host", "127.0.0.1"])
            .args(&good),
        dir.path(),
    );

    // TLS on both sides, one set of files.
    let both_args: Vec<String> = ["--listen", "tls://127.0.0.1:0", "--upstream", &sched_addr]
        .map(str::to_owned)
        .into_iter()
        .chain(good.iter().cloned())
        .collect();
    let (mut tap, tap_addr, tap_log) = start_tap(dir.path(), "tap-tls", &both_args);
    // Plain clients, a TLS upstream: the client certificate is the tap's.
    let mixed_args: Vec<String> = ["--listen", "127.0.0.1:0", "--upstream", &sched_addr]
        .map(str::to_owned)
        .into_iter()
        .chain(flags("upstream-", &c.ca(), &c.cert(), &c.key()))
        .collect();
    let (mut mixed, mixed_addr, mixed_log) = start_tap(dir.path(), "tap-mixed", &mixed_args);
    worker.wait_for(STARTUP, |log| log.contains("Registered to:").then_some(()));

    // Both clients at once (wall time).
    let script = procs::repo_root().join("tests/dask/tap_client.py");
    let mut tls_client = Daemon::start(
        "client-tls",
        Command::new(&python)
            .arg(&script)
            .arg(format!("tls://{tap_addr}"))
            .args(&good),
        dir.path(),
    );
    let mut plain_client = Daemon::start(
        "client-plain",
        Command::new(&python)
            .arg(&script)
            .arg(format!("tcp://{mixed_addr}")),
        dir.path(),
    );
    let logs = [tap_log.as_path(), mixed_log.as_path()];
    let (status, out) = finish(&mut tls_client, &logs);
    let scattered = procs::check_tap_client("TLS client", status, &out, "");
    let (status, out) = finish(&mut plain_client, &logs);
    procs::check_tap_client("plain client", status, &out, "");

    let log = wait_all_closed(&tap_log);
    check_log("tap-tls", &log, " tls=client:TLS13_", scattered);
    assert!(log.contains(",upstream:TLS13_"), "{log}");
    let log = wait_all_closed(&mixed_log);
    check_log("tap-mixed", &log, " tls=upstream:TLS13_", scattered);
    assert!(!log.contains("tls=client"), "{log}");

    // ---- refusals at the TLS tap's door -------------------------------------
    let before = read(&tap_log);
    let refusals_from = before.lines().count();
    let opened_before = before.matches(" open client=").count();
    // 1. No client certificate: the tap requires one, as a Dask server.
    let seen = no_certificate_client(&python, &tap_addr, &c.ca());
    assert!(
        seen.starts_with("REFUSED") || seen.starts_with("RECV b''"),
        "{seen}"
    );
    wait_log(&tap_log, " error accepting client=", 1);
    // 2. A certificate from another CA.
    let stranger = flags("", &c.ca(), &c.other_cert(), &c.other_key());
    let (ok, out, err) = call(&stranger, &format!("tls://{tap_addr}"));
    assert!(!ok, "another CA's certificate got through: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    wait_log(&tap_log, " error accepting client=", 2);
    // 3. A certificate the CA signed, expired yesterday.
    let expired = flags("", &c.ca(), &c.expired_cert(), &c.expired_key());
    let (ok, out, err) = call(&expired, &format!("tls://{tap_addr}"));
    assert!(!ok, "an expired certificate got through: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    wait_log(&tap_log, " error accepting client=", 3);
    // 4. Plaintext to the TLS listener.
    let (ok, out, err) = call(&[], &format!("tcp://{tap_addr}"));
    assert!(!ok, "plaintext got through: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let log = wait_log(&tap_log, " error accepting client=", 4);
    // Then a good client, relayed.
    let (ok, out, err) = call(&good, &format!("tls://{tap_addr}"));
    assert!(ok, "after the refusals: {err}\n{}", read(&tap_log));
    let reply: Json = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(reply["type"], "Scheduler", "{reply}");
    assert!(tap.is_running(), "{}", tap.logs());

    // (The log is written in batches: wait for the good client's lines.)
    wait_log(&tap_log, " open client=", opened_before + 1);
    let log_after = wait_all_closed(&tap_log);
    let new: Vec<&str> = log_after.lines().skip(refusals_from).collect();
    let errors: Vec<&str> = new
        .iter()
        .copied()
        .filter(|l| l.contains(" error"))
        .collect();
    assert_eq!(errors.len(), 4, "{}", new.join("\n"));
    for (line, reason) in errors.iter().zip([
        "peer sent no certificates",
        "UnknownIssuer",
        "certificate expired",
        "TLS handshake failed",
    ]) {
        assert!(line.contains(reason), "{reason:?} not in {line}");
        // One line for the connection, and nothing relayed from it.
        let conn = field(line, "conn=").unwrap();
        assert_eq!(conn_lines(&log_after, conn), [*line], "{log_after}");
    }
    let good_conn = new
        .iter()
        .find(|l| l.contains(" open client="))
        .and_then(|l| field(l, "conn="))
        .unwrap_or_else(|| panic!("the good client: {log}"));
    let lines = conn_lines(&log_after, good_conn);
    assert!(
        lines.iter().any(|l| l.contains(" c->u op=identity ")),
        "{lines:?}"
    );
    // handshake, identity and close; handshake and reply (after `close`,
    // either side may close first).
    let last = lines.last().unwrap();
    assert!(
        last.contains(" closed by=") && last.contains(" reason=eof c->u=3 u->c=2 "),
        "{lines:?}"
    );

    // ---- TLS in, tcp out --------------------------------------------------------
    let reverse_args: Vec<String> = ["--listen", "tls://127.0.0.1:0", "--upstream", &plain_addr]
        .map(str::to_owned)
        .into_iter()
        .chain(good.iter().cloned())
        .collect();
    let (_reverse, reverse_addr, reverse_log) = start_tap(dir.path(), "tap-reverse", &reverse_args);
    let (ok, out, err) = call(&good, &format!("tls://{reverse_addr}"));
    assert!(ok, "TLS in, tcp out: {err}\n{}", read(&reverse_log));
    let reply: Json = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        reply["address"],
        Json::String(plain_addr.clone()),
        "{reply}"
    );
    wait_log(&reverse_log, " open client=", 1);
    let log = wait_all_closed(&reverse_log);
    let open = log.lines().find(|l| l.contains(" open client=")).unwrap();
    assert!(open.contains(" tls=client:TLS13_"), "{open}");
    assert!(!open.contains("upstream:"), "{open}");
    assert!(log.contains(" c->u op=identity "), "{log}");
    assert!(!log.contains(" error"), "{log}");
    let closed = log.lines().find(|l| l.contains(" closed ")).unwrap();
    assert_eq!(num(closed, "spliced="), 0, "{closed}");

    // ---- the upstream refuses the tap's certificate ------------------------------
    let refused_args: Vec<String> = ["--listen", "127.0.0.1:0", "--upstream", &sched_addr]
        .map(str::to_owned)
        .into_iter()
        .chain(flags("upstream-", &c.ca(), &c.other_cert(), &c.other_key()))
        .collect();
    let (mut refused, refused_addr, refused_log) =
        start_tap(dir.path(), "tap-refused", &refused_args);
    let (ok, out, err) = call(&[], &format!("tcp://{refused_addr}"));
    assert!(!ok, "a refused tap certificate got through: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // TLS 1.3: the tap's handshake completes, the refusal arrives as an
    // alert on its first read, and nothing reached the scheduler's Dask
    // side (the client's handshake died in the TLS layer).
    let log = wait_log(&refused_log, " closed ", 1);
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" error")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(
        errors[0].contains(
            " error u->c reading from upstream: TLS: the peer refused our certificate (alert UnknownCA)"
        ),
        "{log}"
    );
    assert!(log.contains(" closed c->u=1 u->c=0 "), "{log}");
    assert!(refused.is_running());

    // ---- a handshake that stalls: refused at the deadline -------------------
    let stall_args: Vec<String> = ["--listen", "tls://127.0.0.1:0", "--upstream", &sched_addr]
        .map(str::to_owned)
        .into_iter()
        .chain(["--handshake-timeout".to_owned(), "1".to_owned()])
        .chain(good.iter().cloned())
        .collect();
    let (mut stall_tap, stall_addr, stall_log) = start_tap(dir.path(), "tap-stall", &stall_args);
    let started = Instant::now();
    let mut silent = TcpStream::connect(&stall_addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    // Meanwhile, a good client goes through.
    let (ok, _, err) = call(&good, &format!("tls://{stall_addr}"));
    assert!(
        ok,
        "during a stalled handshake: {err}\n{}",
        read(&stall_log)
    );
    let mut rest = Vec::new();
    let _ = silent.read_to_end(&mut rest);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "closed after {took:?}"
    );
    let log = wait_log(&stall_log, " error accepting client=", 1);
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" error")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(
        errors[0].contains("timed out in the TLS handshake"),
        "{log}"
    );
    assert!(stall_tap.is_running() && mixed.is_running() && sched.is_running());
}
