//! `framewire scatter`, `gather` and `who-has` against a real Dask cluster
//! (a Python scheduler and worker, started here), with Python
//! (`tests/dask/client_cli_peer.py`) reading what the CLI scattered and
//! computing what it gathers. Fails, never skips, when Python Dask is
//! missing.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "support/procs.rs"]
mod procs;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use procs::{cluster, scratch_dir, spawn_framewire};
use serde_json::{json, Value as Json};

/// Runs `framewire ARGS`, killed after 60 s.
fn framewire(args: &[&str]) -> Output {
    procs::run_framewire(args, None, Duration::from_secs(60)).0
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

    // Scatter: one line per worker; --fire-and-forget leaves the key in the
    // cluster and exits.
    let placed = ok(&[
        "scatter",
        "--fire-and-forget",
        &addr,
        "cli-array",
        &file("arr.npy"),
    ]);
    assert_eq!(
        String::from_utf8(placed).unwrap(),
        format!("scattered cli-array to {w_addr}\n")
    );
    ok(&[
        "scatter",
        "--fire-and-forget",
        "--bytes",
        &addr,
        "cli-bytes",
        &file("blob.bin"),
    ]);
    ok(&[
        "scatter",
        "--fire-and-forget",
        "--json",
        &addr,
        "cli-json",
        &file("value.json"),
    ]);

    // Held (the default): the key lives while the command runs, and is
    // released when it is interrupted.
    let mut held = spawn_framewire(
        &["scatter", "--bytes", &addr, "cli-held", &file("blob.bin")],
        None,
    );
    let mut line = String::new();
    BufReader::new(held.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, format!("scattered cli-held to {w_addr}\n"));
    let there = json_line(&ok(&["who-has", &addr, "cli-held"]));
    assert_eq!(there, json!({"cli-held": [w_addr.clone()]}));
    let pid = rustix::process::Pid::from_child(&held);
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = held.wait().unwrap();
    assert!(status.success(), "scatter interrupted: {status}");
    let released = |key: &str| {
        let started = Instant::now();
        loop {
            let gone = json_line(&ok(&["who-has", &addr, key]));
            if gone == json!({ key: [] }) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "still held: {gone}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    released("cli-held");
    // --hold: released after that long.
    let timed = framewire(&[
        "scatter",
        "--bytes",
        "--hold",
        "0.5",
        &addr,
        "cli-timed",
        &file("blob.bin"),
    ]);
    assert!(
        timed.status.success(),
        "{}",
        String::from_utf8_lossy(&timed.stderr)
    );
    assert!(String::from_utf8_lossy(&timed.stdout).starts_with("scattered cli-timed to "));
    released("cli-timed");

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
        [
            "cli-array",
            "cli-bytes",
            "cli-json",
            "py-array",
            "py-dict",
            "py-ordered"
        ],
        "{all}\n{}\n{}",
        sched.logs(),
        worker.logs()
    );

    // gather: an array to -o as .npy (numpy loads it), else a summary line;
    // bytes to -o as they are, else a JSON line; other values as JSON (read
    // from Python's pickles).
    let out = file("out.npy");
    ok(&["gather", &addr, "cli-array", "-o", &out]);
    assert_eq!(peer(&python, &["load", &out])["shape"], json!([3, 4]));
    let blob_out = file("blob.out");
    ok(&["gather", &addr, "cli-bytes", "-o", &blob_out]);
    let expected: Vec<u8> = (0..4).flat_map(|_| 0..=255u8).collect();
    assert_eq!(std::fs::read(&blob_out).unwrap(), expected);
    let blob = json_line(&ok(&["gather", &addr, "cli-bytes"]));
    assert_eq!(blob["len"], json!(1024), "{blob}");
    assert_eq!(
        json_line(&ok(&["gather", &addr, "py-dict"])),
        json!({"x": 0.25, "y": -3.0})
    );
    assert_eq!(
        json_line(&ok(&["gather", &addr, "cli-json"])),
        json!({"a": [1, 2, 3], "b": "text", "c": 1.5})
    );
    let summary = String::from_utf8(ok(&["gather", &addr, "py-array"])).unwrap();
    assert_eq!(summary, "py-array: array shape=[5] dtype=<f8 bytes=40\n");

    // A value that is not plain data: one line naming the global that
    // stopped it, status 1.
    let ordered = framewire(&["gather", &addr, "py-ordered"]);
    assert!(!ordered.status.success());
    let err = String::from_utf8(ordered.stderr).unwrap();
    assert!(
        err.contains("which framewire cannot read") && err.contains("collections.OrderedDict"),
        "{err}"
    );

    // A key the scheduler does not know: one line, status 1, at once.
    let started = Instant::now();
    let missing = framewire(&["gather", &addr, "nope"]);
    assert!(!missing.status.success());
    assert!(started.elapsed() < Duration::from_secs(20));
    let err = String::from_utf8(missing.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("'nope' is unknown to the scheduler"), "{err}");
    // Not a .npy file without --bytes: refused before connecting.
    let bad = framewire(&["scatter", &addr, "k", &file("blob.bin")]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a .npy file"));
}

/// `framewire submit`: a named function's result printed as `gather`
/// prints it (keyword arguments, a key of the cluster as an argument, a
/// key given), a task that raises as one line naming the exception.
#[test]
fn submit_against_a_real_cluster() {
    let python = dask_python::python();
    let dir = scratch_dir("cli-submit");
    let d = dir.path();
    let (_sched, addr) = cluster::scheduler(&python, d, &[]);
    let (_worker, _) = cluster::python_worker(&python, d, &addr, "w1");

    assert_eq!(
        json_line(&ok(&["submit", &addr, "operator:add", "1", "2"])),
        json!(3)
    );
    assert_eq!(
        json_line(&ok(&[
            "submit",
            "--kwargs",
            r#"{"base": 16}"#,
            &addr,
            "builtins:int",
            "\"ff\""
        ])),
        json!(255)
    );
    // A key given, and a key of the cluster as an argument (kept there by a
    // `scatter --fire-and-forget`).
    let six = file_with(d, "six.json", b"6");
    ok(&["scatter", "--json", "--fire-and-forget", &addr, "six", &six]);
    let args = [
        "submit",
        "--key",
        "cli-prod",
        &addr,
        "operator:mul",
        "@six",
        "7",
    ];
    assert_eq!(json_line(&ok(&args)), json!(42));
    // A task that raises: one line naming the exception, status 1.
    let raised = framewire(&["submit", &addr, "operator:truediv", "1", "0"]);
    assert_eq!(raised.status.code(), Some(1));
    let err = String::from_utf8(raised.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("ZeroDivisionError: division by zero"), "{err}");
    // --no-wait: the key printed, the task left running for the
    // scheduler's "fire-and-forget" client alone once this one exited...
    let slept = ok(&[
        "submit",
        "--no-wait",
        "--key",
        "nap",
        &addr,
        "time:sleep",
        "30",
    ]);
    assert_eq!(String::from_utf8(slept).unwrap(), "nap\n");
    let tasks = primitives_peer(&python, &addr, &["tasks"]);
    assert_eq!(tasks["tasks"]["nap"], json!(["fire-and-forget"]), "{tasks}");
    // ...and run: a side effect (a file opened for writing) comes.
    let made = d.join("made-by-a-task");
    let made_arg = serde_json::to_string(made.to_str().unwrap()).unwrap();
    ok(&[
        "submit",
        "--no-wait",
        &addr,
        "builtins:open",
        &made_arg,
        "\"w\"",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !made.exists() {
        assert!(Instant::now() < deadline, "the task left running never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A function name that is not one: refused before connecting.
    let bad = framewire(&["submit", &addr, "operator.add", "1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("operator.add"));
}

/// `dir/name` holding `bytes`, as a path string.
fn file_with(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `tests/dask/primitives_peer.py ADDRESS ARGS...`: its one fact.
fn primitives_peer(python: &Path, addr: &str, args: &[&str]) -> Json {
    let script = procs::repo_root().join("tests/dask/primitives_peer.py");
    let out = Command::new(python)
        .arg(script)
        .arg(addr)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "peer {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().find(|l| l.starts_with('{')).unwrap();
    serde_json::from_str(line).unwrap()
}

/// `framewire dataset`: a key the CLI scattered, published by it, is
/// Python's `get_dataset` future; datasets Python published (a future, a
/// plain object) are printed by `dataset get`; `list` and `delete`; a
/// name that exists needs `--replace`; a missing one is exit status 1.
#[test]
fn dataset_against_a_real_cluster() {
    let python = dask_python::python();
    let dir = scratch_dir("cli-dataset");
    let d = dir.path();
    let (_sched, addr) = cluster::scheduler(&python, d, &[]);
    let (_worker, _) = cluster::python_worker(&python, d, &addr, "w1");

    let value = file_with(d, "41.json", b"41");
    ok(&[
        "scatter",
        "--json",
        "--fire-and-forget",
        &addr,
        "ds-x",
        &value,
    ]);
    assert!(ok(&["dataset", "publish", &addr, "from-cli", "ds-x"]).is_empty());
    let got = primitives_peer(&python, &addr, &["dataset-get", "from-cli"]);
    assert_eq!(got["value"], 41, "{got}");
    assert_eq!(got["type"], "Future", "{got}");
    // Exists: refused without --replace.
    let again = framewire(&["dataset", "publish", &addr, "from-cli", "ds-x"]);
    assert_eq!(again.status.code(), Some(1));
    ok(&["dataset", "publish", "--replace", &addr, "from-cli", "ds-x"]);

    primitives_peer(&python, &addr, &["dataset-put", "from-python", "5"]);
    primitives_peer(&python, &addr, &["dataset-put-plain", "plain"]);
    let names = String::from_utf8(ok(&["dataset", "list", &addr])).unwrap();
    let mut names: Vec<&str> = names.lines().collect();
    names.sort();
    assert_eq!(names, ["from-cli", "from-python", "plain"]);
    assert_eq!(
        json_line(&ok(&["dataset", "get", &addr, "from-python"])),
        json!(5)
    );
    assert_eq!(
        json_line(&ok(&["dataset", "get", &addr, "plain"])),
        json!({"from": "python", "n": [1, 2]})
    );
    let missing = framewire(&["dataset", "get", &addr, "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8(missing.stderr).unwrap();
    assert!(err.contains("no dataset nope"), "{err}");

    for name in ["from-cli", "from-python", "plain", "nope"] {
        assert!(ok(&["dataset", "delete", &addr, name]).is_empty());
    }
    assert!(ok(&["dataset", "list", &addr]).is_empty());
}
