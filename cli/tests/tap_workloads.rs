//! Real Dask workloads with every connection through `framewire tap`
//! (issue #12, part 2): a Python `dask scheduler`, two `dask worker`s and a
//! Python `Client`; a tap in front of the scheduler and one in front of each
//! worker, the workers advertising their tap's address, so that
//! client→scheduler, worker→scheduler and worker→worker traffic (and the
//! scheduler's connections to the workers) all go through a tap. The
//! workloads (`tests/dask/tap_cluster.py workloads`) check their own results
//! in Python; this test checks the taps' logs: no error, and the messages
//! the workloads must have sent, so that it cannot pass without the traffic
//! going through the taps.
//!
//! Sizes (`FRAMEWIRE_SCALE`): by default (`small`) (a) scatter and gather of
//! 40 000 keys (one `scatter` message of 80 001 frames, more than the 65 536
//! frames the tap used to refuse), (b) a ~100 MB dask.array, (c) `client.map`
//! over 5 000 tasks; with `FRAMEWIRE_SCALE=full`, the sizes of the issue:
//! 200 000 keys, ~400 MB, 20 000 tasks. The default run takes about a
//! minute on two cores; Dask's own per-key cost (about 5 000 keys/s for a
//! scatter, as much for the gather, without any tap) is what keeps the
//! default below 200 000 keys.
//!
//! Fails, never skips, when Python Dask is missing.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/tap_cluster.rs"]
mod tap_cluster;

use std::time::Duration;

use procs::scratch_dir;
use tap_cluster::{parse_log, Scale, TapLog};

#[test]
fn real_workloads_through_taps() {
    let scale = Scale::from_env();
    let keys: u64 = scale.pick(40_000, 200_000);
    let array_mb: u64 = scale.pick(100, 400);
    let tasks: u64 = scale.pick(5_000, 20_000);
    let guard = Duration::from_secs(scale.pick(600, 3600));
    let dir = scratch_dir("tap-workloads");
    let (result, out) = tap_cluster::run(
        &dir,
        &[
            "workloads",
            "--scatter",
            &keys.to_string(),
            "--array-mb",
            &array_mb.to_string(),
            "--map",
            &tasks.to_string(),
        ],
        guard,
    );
    let context = || format!("{result}\n{}", tap_cluster::tail(&out, 4000));

    // Every result was checked in Python.
    for check in [
        "scatter_gather",
        "array_sum",
        "array_colsums",
        "array_rechunk",
        "map_sum",
        "map_gather",
    ] {
        assert_eq!(result["checks"][check], true, "{check}: {}", context());
    }
    assert_eq!(result["ok"], true, "{}", context());
    assert_eq!(result["keys"], keys, "{}", context());
    assert_eq!(result["tasks"], tasks, "{}", context());
    assert_eq!(result["workers_end"], 2, "{}", context());
    let array_bytes = result["array_bytes"].as_u64().unwrap();
    assert!(
        array_bytes as f64 >= array_mb as f64 * 0.95e6,
        "{}",
        context()
    );
    eprintln!(
        "scatter {}s gather {}s ({keys} keys), array {}s ({array_bytes} bytes), map {}s ({tasks} tasks)",
        result["scatter_s"], result["gather_s"], result["array_s"], result["map_s"]
    );

    // ---- the taps' logs ----
    let taps = tap_cluster::taps(&result);
    let names: Vec<&str> = taps.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["scheduler", "w0", "w1"], "{}", context());
    let logs: Vec<(String, TapLog)> = taps
        .iter()
        .map(|t| (t.name.clone(), parse_log(&t.log)))
        .collect();
    for ((name, log), tap) in logs.iter().zip(&taps) {
        assert!(
            log.errors.is_empty(),
            "tap {name}: error lines {:?}\n{}",
            log.errors,
            tap_cluster::tail(&tap.log, 3000)
        );
        // Every connection it opened was relayed, then closed.
        let mut opened = log.opened.clone();
        let mut closed: Vec<u64> = log.closed.iter().map(|c| c.conn).collect();
        opened.sort_unstable();
        closed.sort_unstable();
        assert!(!opened.is_empty(), "tap {name} relayed nothing");
        assert_eq!(opened, closed, "tap {name}: opened vs closed connections");
        for m in &log.messages {
            assert!(
                m.frames > 0 && m.bytes >= 16 + 8 * m.frames,
                "{name}: {m:?}"
            );
        }
    }
    let sched = &logs[0].1;
    let workers = [&logs[1].1, &logs[2].1];
    let frames = 2 * keys + 1;

    // (a) The scatter went to the scheduler as one message of 2N+1 frames
    // (a sub-header and a payload per key), and came back from it as the
    // gather's answer of 2N+1 frames; the workers received their share with
    // `update_data` (2k+1 frames for k keys, the k adding up to N) and gave
    // it back with `get_data`.
    assert!(
        sched
            .messages
            .iter()
            .any(|m| m.direction == "c->u" && m.ops == "scatter" && m.frames == frames),
        "no c->u op=scatter frames={frames} in the scheduler's tap"
    );
    assert!(
        sched
            .messages
            .iter()
            .any(|m| m.direction == "u->c" && m.ops == "-" && m.frames == frames),
        "no u->c answer of frames={frames} (the gather) in the scheduler's tap"
    );
    let updated: u64 = workers
        .iter()
        .flat_map(|l| &l.messages)
        .filter(|m| m.direction == "c->u" && m.ops == "update_data")
        .map(|m| (m.frames - 1) / 2)
        .sum();
    assert_eq!(updated, keys, "keys sent to the workers with update_data");

    // (b) The rechunk moved array data between the workers through their
    // taps: about half of the array crosses (each output chunk takes a
    // piece of every input chunk, and the input chunks are spread over two
    // workers); a quarter is a floor no honest run misses.
    let worker_bytes: u64 = workers
        .iter()
        .flat_map(|l| &l.messages)
        .map(|m| m.bytes)
        .sum();
    assert!(
        worker_bytes >= array_bytes / 4,
        "the workers' taps relayed {worker_bytes} bytes, the array is {array_bytes}"
    );

    // (c) Every mapped task reached a worker through the scheduler's tap
    // (`compute-task` on the workers' batched streams, u->c).
    let compute: u64 = sched
        .messages
        .iter()
        .filter(|m| m.direction == "u->c")
        .map(|m| m.count_op("compute-task"))
        .sum();
    assert!(
        compute >= tasks,
        "{compute} compute-task relayed for {tasks} mapped tasks"
    );
}
