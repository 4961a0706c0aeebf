//! `framewire scatter`, `gather` and `who-has` against a real Dask cluster
//! (a Python scheduler and worker, started here), with Python
//! (`tests/dask/client_cli_peer.py`) reading what the CLI scattered and
//! computing what it gathers. Fails, never skips, when Python Dask is
//! missing.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "support/procs.rs"]
mod procs;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use procs::{cluster, scratch_dir, spawn_framewire};
use serde_json::{json, Value as Json};

/// Runs `framewire ARGS`, killed after 60 s.
fn framewire(args: &[&str]) -> Output {
    let started = Instant::now();
    let mut child = spawn_framewire(args, None);
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
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("framewire {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap().unwrap(),
        stderr: err.join().unwrap().unwrap(),
    }
}

fn ok(args: &[&str]) -> Vec<u8> {
    let out = framewire(args);
    assert!(
        out.status.success(),
        "framewire {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn json_line(bytes: &[u8]) -> Json {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn peer(python: &Path, args: &[&str]) -> Json {
    let script = procs::repo_root().join("tests/dask/client_cli_peer.py");
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "peer {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    json_line(&out.stdout)
}

#[test]
fn scatter_gather_who_has_against_a_real_cluster() {
    let python = dask_python::python();
    let dir = scratch_dir("cli-client");
    let d = dir.path();
    let (sched, addr) = cluster::scheduler(&python, d, &[]);
    let (worker, w_addr) = cluster::python_worker(&python, d, &addr, "w1");
    let file = |n: &str| d.join(n).to_str().unwrap().to_owned();
    assert_eq!(
        peer(&python, &["save", d.to_str().unwrap()])["check"],
        "saved"
    );

    // Scatter: where each went; kept after the command exits.
    let placed = json_line(&ok(&["scatter", &addr, "cli-array", &file("arr.npy")]));
    assert_eq!(placed, json!({"cli-array": [w_addr.clone()]}));
    ok(&["scatter", "--bytes", &addr, "cli-bytes", &file("blob.bin")]);
    ok(&["scatter", "--json", &addr, "cli-json", &file("value.json")]);
    let released = json_line(&ok(&[
        "scatter",
        "--bytes",
        "--release",
        &addr,
        "cli-gone",
        &file("blob.bin"),
    ]));
    assert_eq!(released, json!({"cli-gone": [w_addr.clone()]}));

    // Python reads them, and computes two keys for the CLI.
    let checked = peer(&python, &["check", &addr]);
    assert_eq!(
        checked["keys"],
        json!(["cli-array", "cli-bytes", "cli-json"])
    );

    // who-has: given keys, then every key; the released one is gone.
    let some = json_line(&ok(&["who-has", &addr, "cli-array", "nope"]));
    assert_eq!(some, json!({"cli-array": [w_addr.clone()], "nope": []}));
    let all = json_line(&ok(&["who-has", &addr]));
    let mut keys: Vec<&str> = all
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        ["cli-array", "cli-bytes", "cli-json", "py-array", "py-dict"],
        "{all}\n{}\n{}",
        sched.logs(),
        worker.logs()
    );

    // gather: an array as .npy (numpy loads it), bytes as they are, other
    // values as JSON (read from Python's pickles).
    let out = file("out.npy");
    ok(&["gather", &addr, "cli-array", "-o", &out]);
    assert_eq!(peer(&python, &["load", &out])["shape"], json!([3, 4]));
    let blob = ok(&["gather", &addr, "cli-bytes"]);
    let expected: Vec<u8> = (0..4).flat_map(|_| 0..=255u8).collect();
    assert_eq!(blob, expected);
    assert_eq!(
        json_line(&ok(&["gather", &addr, "py-dict"])),
        json!({"x": 0.25, "y": -3.0})
    );
    assert_eq!(
        json_line(&ok(&["gather", &addr, "cli-json"])),
        json!({"a": [1, 2, 3], "b": "text", "c": 1.5})
    );
    let npy = ok(&["gather", &addr, "py-array"]);
    assert!(npy.starts_with(b"\x93NUMPY\x01\x00"), "{npy:?}");
    assert!(String::from_utf8_lossy(&npy[..128]).contains("'shape': (5,)"));

    // A key the scheduler does not know: one line, status 1, at once.
    let started = Instant::now();
    let missing = framewire(&["gather", &addr, "nope"]);
    assert!(!missing.status.success());
    assert!(started.elapsed() < Duration::from_secs(20));
    let err = String::from_utf8(missing.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("'nope' was cancelled, or is unknown"), "{err}");
    // Not a .npy file without --bytes: refused before connecting.
    let bad = framewire(&["scatter", &addr, "k", &file("blob.bin")]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a .npy file"));
}
