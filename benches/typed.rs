//! Typed messages (`framewire::typed`, `framewire::dask`) beside the dynamic
//! path on the same frames: decoding the 2026.8.0 scheduler's `compute-task`
//! batch (captured, `tests/captures/conversation/compute-task_1`) into
//! `Vec<SchedulerToWorker>` directly (`from_frames`) and through a `Value`
//! (`loads+from_value`) vs `loads` of it into a `Value`; encoding a
//! `task-finished` batch from its Rust type directly (`to_frames`) and
//! through a `Value` (`to_value+dumps`) vs `dumps` of the equivalent
//! `Value`; and a `Vec<i64>` of 10^6 elements through `to_value` +
//! `from_value`. Python's side of the first two is in `scripts/bench-compare
//! --only typed`. Names: `typed/<message>/<path>`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use framewire::dask::{SchedulerToWorker, WorkerToScheduler};
use framewire::serialize::{DeserializeOptions, SerializeOptions};
use framewire::typed::{from_frames, to_frames};
use framewire::{dumps, from_value, loads_with, to_value, Value};
use serde::{Deserialize, Serialize};

mod common;
use common::capture_frames;

fn compute_task(c: &mut Criterion) {
    let frames = capture_frames("compute-task_1");
    let opts = DeserializeOptions::default();
    // The typed result must hold what the dynamic one does.
    let typed: Vec<SchedulerToWorker> = from_value(loads_with(&frames, &opts).unwrap()).unwrap();
    assert!(matches!(typed[..], [SchedulerToWorker::ComputeTask(_)]));
    assert_eq!(
        from_frames::<Vec<SchedulerToWorker>>(&frames, &opts).unwrap(),
        typed
    );

    let mut g = c.benchmark_group("typed/compute-task");
    g.bench_function("loads", |b| {
        b.iter(|| black_box(loads_with(black_box(&frames), &opts).unwrap()))
    });
    g.bench_function("loads+from_value", |b| {
        b.iter(|| {
            let v = loads_with(black_box(&frames), &opts).unwrap();
            black_box(from_value::<Vec<SchedulerToWorker>>(v).unwrap())
        })
    });
    g.bench_function("from_frames", |b| {
        b.iter(|| {
            black_box(from_frames::<Vec<SchedulerToWorker>>(black_box(&frames), &opts).unwrap())
        })
    });
    g.finish();
}

fn task_finished(c: &mut Criterion) {
    let frames = capture_frames("task-finished_1");
    let opts = DeserializeOptions::default();
    let batch: Vec<WorkerToScheduler> = from_value(loads_with(&frames, &opts).unwrap()).unwrap();
    assert!(matches!(batch[..], [WorkerToScheduler::TaskFinished(_)]));
    let value = to_value(&batch).unwrap();
    // The same bytes as the capture: equal work on both sides.
    assert_eq!(dumps(&value).unwrap(), frames);
    let sopts = SerializeOptions::default();
    assert_eq!(to_frames(&batch, &sopts).unwrap(), frames);

    let mut g = c.benchmark_group("typed/task-finished");
    g.bench_function("dumps", |b| {
        b.iter(|| black_box(dumps(black_box(&value)).unwrap()))
    });
    g.bench_function("to_value+dumps", |b| {
        b.iter(|| black_box(dumps(&to_value(black_box(&batch)).unwrap()).unwrap()))
    });
    g.bench_function("to_frames", |b| {
        b.iter(|| black_box(to_frames(black_box(&batch), &sopts).unwrap()))
    });
    g.finish();
}

#[derive(Serialize, Deserialize)]
struct Ints {
    xs: Vec<i64>,
}

fn vec_i64(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let ints = Ints {
        xs: (0..N as i64).map(|i| i * 7 - 3_000_000).collect(),
    };
    let mut g = c.benchmark_group("typed/vec_i64");
    g.throughput(Throughput::Elements(N as u64));
    // Back to back, the pair frees 16 MB a round, which glibc's default
    // trim threshold (twice the largest freed mapping) hands back to the
    // kernel, so every round faults it in again; run with
    // MALLOC_TOP_PAD_=67108864 to see the pair without those faults.
    g.bench_function("to_value+from_value/1e6", |b| {
        b.iter(|| {
            let v: Value = to_value(black_box(&ints)).unwrap();
            black_box(from_value::<Ints>(v).unwrap())
        })
    });
    g.bench_function("to_value/1e6", |b| {
        b.iter(|| black_box(to_value(black_box(&ints)).unwrap()))
    });
    // The floor of the pair: two fresh vectors of N integers, each written
    // once (what `to_value` and `from_value` must at least produce).
    g.bench_function("floor_two_fresh_vecs/1e6", |b| {
        b.iter(|| {
            let first: Vec<i64> = black_box(&ints.xs).to_vec();
            let second: Vec<i64> = black_box(&first).to_vec();
            black_box((first, second))
        })
    });
    // The same floor in the pair's allocation pattern: the second vector
    // grown by pushes from serde's cautious capacity (1 MiB), as `Vec`'s
    // `Deserialize` grows it, and the first freed before the second.
    g.bench_function("floor_two_vecs_serde_growth/1e6", |b| {
        b.iter(|| {
            let first: Vec<i64> = black_box(&ints.xs).to_vec();
            let mut second: Vec<i64> = Vec::with_capacity((1 << 20) / 8);
            for &x in black_box(&first).iter() {
                second.push(x);
            }
            drop(first);
            black_box(second)
        })
    });
    let v = to_value(&ints).unwrap();
    assert!(
        v.get("xs").and_then(Value::as_int_array).is_some(),
        "packed"
    );
    g.bench_function("from_value/1e6", |b| {
        b.iter_batched(
            || v.clone(),
            |v| black_box(from_value::<Ints>(v).unwrap()),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, compute_task, task_finished, vec_i64);
criterion_main!(benches);
