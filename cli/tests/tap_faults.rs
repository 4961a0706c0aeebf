//! Faults on a real Dask cluster with every connection through
//! `framewire tap` (issue #12, part 4), run by
//! `tests/dask/tap_cluster.py faults`:
//!
//! 1. Worker w0 holds an array; a task pinned to w1 needs it, so w1 fetches
//!    it from w0 through w0's tap (one `get_data` answer of the array's
//!    size). As soon as the tap logs that answer (its line comes once frame
//!    0 is in, before the payload is relayed), w0 is killed (SIGKILL). Dask
//!    must recover as it does without a tap: the array recomputed on w1,
//!    the task finished there, later work done. The tap must log the cut
//!    transfer on that connection (`reason=truncated|reset cut=X/Y`, X < Y:
//!    the kill came in the middle), no error anywhere, and only w0's
//!    connections (and that transfer) may end early: the client's and
//!    w1's carry on.
//! 2. A raw client sends the handshake and half of an `identity` message to
//!    the scheduler's tap, then closes: the tap logs the cut
//!    (`reason=truncated cut=SENT/TOTAL`), and the cluster carries on.
//!
//! The array is 256 MiB, the size, at every `FRAMEWIRE_SCALE` (the
//! test takes about 20 s on two cores). Fails, never skips, when Python
//! Dask is missing.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/tap_cluster.rs"]
mod tap_cluster;

use std::collections::BTreeMap;
use std::time::Duration;

use procs::scratch_dir;
use tap_cluster::{parse_log, TapLog};

/// Seconds since the epoch of a log line's `2026-11-29T19:10:50.123Z`.
fn epoch(t: &str) -> f64 {
    let n = |r: std::ops::Range<usize>| -> i64 { t[r].parse().unwrap() };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from civil (Howard Hinnant), as the tap writes them.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    secs as f64 + n(20..23) as f64 / 1000.0
}

/// `RECEIVED/TOTAL` of a `cut=` field.
fn cut(text: &str) -> (u64, u64) {
    let (a, b) = text.split_once('/').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn worker_killed_mid_transfer_and_a_client_cut_short() {
    let mib: u64 = 256;
    let dir = scratch_dir("tap-faults");
    let (result, out) = tap_cluster::run(
        &dir,
        &["faults", "--kill-mb", &mib.to_string()],
        Duration::from_secs(600),
    );
    let context = || format!("{result}\n{}", tap_cluster::tail(&out, 4000));
    for check in ["recomputed", "on_w1", "after_kill", "after_half_message"] {
        assert_eq!(result["checks"][check], true, "{check}: {}", context());
    }
    assert_eq!(result["ok"], true, "{}", context());
    let kill_time = result["kill_time"].as_f64().unwrap();
    let half_time = result["half_message_time"].as_f64().unwrap();
    eprintln!(
        "{mib} MiB, recovered {}s after the kill",
        result["recovery_s"]
    );

    let taps = tap_cluster::taps(&result);
    let logs: BTreeMap<String, TapLog> = taps
        .iter()
        .map(|t| (t.name.clone(), parse_log(&t.log)))
        .collect();
    for (name, log) in &logs {
        assert!(log.errors.is_empty(), "tap {name}: {:?}", log.errors);
    }

    // ---- 1. the transfer cut by the kill ----
    let kill_line = result["kill_line"].as_str().unwrap();
    let transfer: u64 = kill_line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("conn="))
        .unwrap()
        .parse()
        .unwrap();
    let w0 = &logs["w0"];
    let answer = w0
        .messages
        .iter()
        .find(|m| m.conn == transfer && m.direction == "u->c" && m.bytes >= mib << 20)
        .unwrap_or_else(|| panic!("no answer of {mib} MiB on conn {transfer}: {kill_line}"));
    let closed = w0
        .closed
        .iter()
        .find(|c| c.conn == transfer)
        .unwrap_or_else(|| panic!("conn {transfer} of tap w0 never closed"));
    // The tap sees w0's socket end (`by=upstream`), unless w1 gives up on
    // the transfer first (the scheduler tells it w0 is gone) and closes its
    // side while the tap is still forwarding what w0 had sent
    // (`by=client`, `reason=reset` or, when w1 had read all it was sent,
    // `reason=eof`): all are how the transfer breaks without a tap, and the
    // cut is logged either way.
    let by_upstream = closed.get("by") == Some("upstream");
    let reason = closed.get("reason").unwrap_or_default();
    assert!(
        if by_upstream {
            matches!(reason, "truncated" | "reset")
        } else {
            matches!(reason, "reset" | "eof")
        },
        "{closed:?}"
    );
    let (received, total) = cut(closed.get("cut").expect("cut="));
    assert_eq!(total, answer.bytes, "{closed:?}");
    assert!(
        received < total,
        "the kill came after the transfer: {closed:?}"
    );
    eprintln!("the transfer was cut at {received} of {total} bytes");

    // Only that connection was cut in the middle of a message (besides the
    // half message of part 2, on the scheduler's tap).
    let half = &result["half_message"];
    let half_port = half["port"].as_u64().unwrap();
    let sched = &logs["scheduler"];
    let half_conn = {
        let needle = format!(" open client=127.0.0.1:{half_port} ");
        let line = taps[0]
            .log
            .lines()
            .find(|l| l.contains(&needle))
            .unwrap_or_else(|| panic!("no {needle:?} in the scheduler's tap"));
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("conn="))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    for (name, log) in &logs {
        for c in &log.closed {
            let expected = (name == "w0" && c.conn == transfer)
                || (name == "scheduler" && c.conn == half_conn);
            assert_eq!(c.get("cut").is_some(), expected, "tap {name}: {c:?}");
        }
    }

    // Connections that ended abnormally (reset or truncated) are w0's,
    // gone quiet when it was killed, or the half message's; every other
    // connection that was relaying after the kill carried on to the end.
    for (name, log) in &logs {
        for c in &log.closed {
            let last = log
                .messages
                .iter()
                .filter(|m| m.conn == c.conn)
                .map(|m| epoch(&m.time))
                .fold(0.0, f64::max);
            let reason = c.get("reason").unwrap_or("error");
            if reason == "eof" || (name == "scheduler" && c.conn == half_conn) {
                continue;
            }
            assert!(
                last <= kill_time + 2.0,
                "tap {name}: conn {} ended ({reason}) after relaying at {last} (kill at {kill_time}): {c:?}",
                c.conn
            );
        }
    }
    let after_half = sched
        .messages
        .iter()
        .filter(|m| epoch(&m.time) > half_time + 0.1)
        .map(|m| m.conn)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(
        after_half.len() >= 2,
        "the client's and w1's connections carry on: {after_half:?}"
    );

    // ---- 2. the half message ----
    let closed = sched
        .closed
        .iter()
        .find(|c| c.conn == half_conn)
        .unwrap_or_else(|| panic!("conn {half_conn} never closed"));
    assert_eq!(closed.get("by"), Some("client"), "{closed:?}");
    assert_eq!(closed.get("reason"), Some("truncated"), "{closed:?}");
    assert_eq!(
        closed.get("cut"),
        Some(format!("{}/{}", half["sent"], half["total"]).as_str()),
        "{closed:?}"
    );
    assert_eq!(closed.int("c->u"), 2, "handshake + the cut message");
    let ops: Vec<&str> = sched
        .messages
        .iter()
        .filter(|m| m.conn == half_conn && m.direction == "c->u")
        .map(|m| m.ops.as_str())
        .collect();
    assert_eq!(ops, ["(handshake)", "identity"], "{closed:?}");
}
