//! Real Dask clusters with every connection through `framewire tap`, run by
//! `tests/dask/tap_cluster.py` (scheduler, workers, taps, a `Client`; it
//! checks the results in Python and prints one JSON line), and the taps'
//! logs parsed here. Included by the tests that use them, with
//! `procs.rs` and `dask_python.rs`.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::dask_python;
use crate::procs::{self, Daemon};

/// The size of the workloads: `FRAMEWIRE_SCALE=full` for the sizes of
/// issue #12, anything else unset or `small` (the default, quick).
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub full: bool,
}

impl Scale {
    pub fn from_env() -> Scale {
        match std::env::var("FRAMEWIRE_SCALE").as_deref() {
            Err(_) | Ok("") | Ok("small") => Scale { full: false },
            Ok("full") => Scale { full: true },
            Ok(other) => panic!("FRAMEWIRE_SCALE={other:?}: expected small or full"),
        }
    }

    /// `small` by default, `full` with `FRAMEWIRE_SCALE=full`.
    pub fn pick<T>(self, small: T, full: T) -> T {
        if self.full {
            full
        } else {
            small
        }
    }
}

/// Runs `tap_cluster.py ARGS` (with `--dir` and `--framewire` added) in
/// `dir`; returns its JSON result and its output. Fails the test if the
/// script exits with an error before printing a result, or outlives `guard`.
pub fn run(dir: &tempfile::TempDir, args: &[&str], guard: Duration) -> (Json, String) {
    let python = dask_python::python();
    let script = procs::repo_root().join("tests/dask/tap_cluster.py");
    let cluster_dir = dir.path().join("cluster");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .args(args)
        .arg("--dir")
        .arg(&cluster_dir)
        .args(["--framewire", env!("CARGO_BIN_EXE_framewire")]);
    let mut proc = Daemon::start("tap_cluster", &mut cmd, dir.path());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = proc.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < guard,
            "tap_cluster.py {args:?} still running after {guard:?}:\n{}",
            tail(&proc.logs(), 6000)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = proc.logs();
    let result = proc
        .stdout()
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Json>(l).ok().filter(Json::is_object))
        .unwrap_or_else(|| {
            panic!(
                "tap_cluster.py {args:?} printed no result ({status}):\n{}",
                tail(&out, 6000)
            )
        });
    eprintln!(
        "tap_cluster.py {args:?}: {status} in {:.1?}",
        started.elapsed()
    );
    (result, out)
}

/// The last `n` bytes of `text` (at a char boundary).
pub fn tail(text: &str, n: usize) -> &str {
    let mut at = text.len().saturating_sub(n);
    while !text.is_char_boundary(at) {
        at += 1;
    }
    &text[at..]
}

/// One tap of a cluster, from the result's `cluster.taps`.
#[derive(Debug)]
pub struct TapInfo {
    pub name: String,
    pub log: String,
}

pub fn taps(result: &Json) -> Vec<TapInfo> {
    result["cluster"]["taps"]
        .as_array()
        .unwrap_or_else(|| panic!("no cluster.taps in {result}"))
        .iter()
        .map(|t| TapInfo {
            name: t["name"].as_str().unwrap().to_owned(),
            log: std::fs::read_to_string(t["log"].as_str().unwrap())
                .unwrap_or_else(|e| panic!("tap log {}: {e}", t["log"])),
        })
        .collect()
}

/// One message line of a tap's log.
#[derive(Debug, Clone)]
pub struct Message {
    pub time: String,
    pub conn: u64,
    /// `c->u` or `u->c`.
    pub direction: String,
    pub ops: String,
    pub frames: u64,
    pub bytes: u64,
}

impl Message {
    /// How many times `op` appears in the message's ops (`a,b*3,c`).
    pub fn count_op(&self, op: &str) -> u64 {
        self.ops
            .split(',')
            .map(|run| match run.split_once('*') {
                Some((name, n)) if name == op => n.parse().unwrap_or(0),
                None if run == op => 1,
                _ => 0,
            })
            .sum()
    }
}

/// One `closed` line: its fields (`by`, `reason`, `c->u`, `copied`, ...).
#[derive(Debug, Clone)]
pub struct Closed {
    pub time: String,
    pub conn: u64,
    pub fields: std::collections::BTreeMap<String, String>,
}

impl Closed {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    pub fn int(&self, key: &str) -> u64 {
        self.get(key)
            .unwrap_or_else(|| panic!("no {key}= in {self:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{key}= is not an integer in {self:?}"))
    }
}

/// A tap's log, parsed: message lines, `open` and `closed` lines, and every
/// other line that mentions an error.
#[derive(Debug, Default)]
pub struct TapLog {
    pub messages: Vec<Message>,
    pub opened: Vec<u64>,
    pub closed: Vec<Closed>,
    pub errors: Vec<String>,
}

fn word_value<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    words.iter().find_map(|w| w.strip_prefix(key))
}

/// Parses a tap's log; panics on a line of an unknown shape.
pub fn parse_log(log: &str) -> TapLog {
    let mut out = TapLog::default();
    for line in log.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let time = words.first().copied().unwrap_or_default().to_owned();
        if words.contains(&"error") {
            out.errors.push(line.to_owned());
            continue;
        }
        let Some(conn) = word_value(&words, "conn=") else {
            assert!(words.get(1) == Some(&"listening"), "unknown line {line:?}");
            continue;
        };
        let conn: u64 = conn.parse().unwrap_or_else(|_| panic!("conn= in {line:?}"));
        match words.get(2).copied() {
            Some("c->u") | Some("u->c") => {
                let int = |key: &str| -> u64 {
                    word_value(&words, key)
                        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
                        .parse()
                        .unwrap_or_else(|_| panic!("{key} in {line:?}"))
                };
                out.messages.push(Message {
                    time,
                    conn,
                    direction: words[2].to_owned(),
                    ops: word_value(&words, "op=")
                        .unwrap_or_else(|| panic!("no op= in {line:?}"))
                        .to_owned(),
                    frames: int("frames="),
                    bytes: int("bytes="),
                });
            }
            Some("open") => out.opened.push(conn),
            Some("closed") => out.closed.push(Closed {
                time,
                conn,
                fields: words[3..]
                    .iter()
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            }),
            Some(w) if w.starts_with("checksums=") => {}
            _ => panic!("unknown line {line:?}"),
        }
    }
    out
}
