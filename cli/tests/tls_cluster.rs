//! `framewire call` against a real TLS Dask cluster: a Python `dask
//! scheduler --protocol tls` with `--tls-ca-file/--tls-cert/--tls-key`
//! (certificates made by the test), reached with the same flags. And every
//! refusal, each in one line and within the deadline: no certificate,
//! another CA's, an expired one, plaintext to the TLS port, TLS to a
//! plaintext port. The test fails, never skips, when Python Dask is missing.

#[path = "../../tests/support/certs.rs"]
mod certs;
#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "support/procs.rs"]
mod procs;

use std::process::Command;
use std::time::{Duration, Instant};

use procs::{scratch_dir, Daemon};
use serde_json::Value as Json;

const BIN: &str = env!("CARGO_BIN_EXE_framewire");

fn tls_flags(ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Vec<String> {
    [
        ("--tls-ca-file", ca),
        ("--tls-cert", cert),
        ("--tls-key", key),
    ]
    .iter()
    .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
    .collect()
}

/// Runs `framewire call` and returns (success, stdout, stderr, elapsed).
fn call(flags: &[String], address: &str, json: &str) -> (bool, String, String, Duration) {
    let started = Instant::now();
    let out = Command::new(BIN)
        .arg("call")
        .args(["--timeout", "10"])
        .args(flags)
        .args([address, json])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

fn scheduler(
    python: &std::path::Path,
    dir: &tempfile::TempDir,
    tls: Option<&certs::Certs>,
) -> (Daemon, String) {
    match tls {
        Some(c) => {
            let mut args = vec!["--protocol".to_owned(), "tls".to_owned()];
            args.extend(tls_flags(&c.ca(), &c.cert(), &c.key()));
            procs::scheduler_with(python, dir.path(), "tls-scheduler", &[], &args)
        }
        None => procs::scheduler(python, dir.path(), &[]),
    }
}

#[test]
fn call_reaches_a_tls_scheduler_and_refusals_say_why() {
    let python = dask_python::python();
    let dir = scratch_dir("tls-call");
    let c = certs::make(&dir.path().join("certs"));
    let (mut tls_sched, address) = scheduler(&python, &dir, Some(&c));
    assert!(address.starts_with("tls://127.0.0.1:"), "{address}");

    // identity, with the cluster's certificates.
    let good = tls_flags(&c.ca(), &c.cert(), &c.key());
    let (ok, out, err, _) = call(&good, &address, r#"{"op": "identity"}"#);
    assert!(ok, "call failed: {err}\nscheduler:\n{}", tls_sched.logs());
    let reply: Json = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(reply["type"], "Scheduler", "{reply}");
    assert_eq!(reply["address"], Json::String(address.clone()), "{reply}");

    // Refused by the scheduler, or refusing it: one line each, quickly.
    let stranger = tls_flags(&c.ca(), &c.other_cert(), &c.other_key());
    let expired = tls_flags(&c.ca(), &c.expired_cert(), &c.expired_key());
    let other_ca = tls_flags(&c.other_ca(), &c.other_cert(), &c.other_key());
    let plain = address.replace("tls://", "tcp://");
    let cases: [(&str, &[String], &str, &[&str]); 4] = [
        // The server refuses our certificate: the client sees the alert.
        (
            "another CA's certificate",
            &stranger,
            &address,
            &["framewire: ", "tls://", "certificate"],
        ),
        (
            "an expired certificate",
            &expired,
            &address,
            &["framewire: ", "tls://", "certificate"],
        ),
        // We refuse the server's certificate.
        (
            "a server from another CA",
            &other_ca,
            &address,
            &["UnknownIssuer"],
        ),
        // Plaintext to the TLS port: the server never answers a Dask handshake.
        ("plaintext to a TLS port", &[], &plain, &["framewire: "]),
    ];
    for (name, flags, to, needles) in cases {
        let (ok, out, err, took) = call(flags, to, r#"{"op": "identity"}"#);
        assert!(!ok, "{name}: succeeded: {out}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{name}: {needle:?} not in {err}");
        }
        assert!(took < Duration::from_secs(10), "{name}: took {took:?}");
    }
    // The scheduler is unharmed and still answers.
    let (ok, _, err, _) = call(&good, &address, r#"{"op": "identity"}"#);
    assert!(ok, "after the refusals: {err}");
    assert!(tls_sched.is_running());

    // TLS to a plaintext scheduler.
    let (_plain_sched, tcp_address) = scheduler(&python, &dir, None);
    let (ok, _, err, took) = call(
        &good,
        &tcp_address.replace("tcp://", "tls://"),
        r#"{"op": "identity"}"#,
    );
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("TLS handshake failed"), "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
