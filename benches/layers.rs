//! Layers 1 and 2: envelope encode/decode and pass-through `loads`/`dumps`,
//! whose cost must not depend on payload size (payloads are sliced, never
//! copied). Names: `<api>/<variant>/<size>`.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use framewire::message::decode;
use framewire::{dumps, Block, Envelope, Header, Limits, Value};

const SIZES: [(&str, usize); 4] = [
    ("1KiB", 1 << 10),
    ("1MiB", 1 << 20),
    ("64MiB", 64 << 20),
    ("1GiB", 1 << 30),
];

/// A compute-task message carrying one pre-serialized payload of `size` bytes
/// and one small one: 5 frames, like Dask's `task_with_numpy`.
fn task_message(payload: Bytes) -> Value {
    let numpy_header = |n: usize| {
        Header::new(Value::map_of([
            (
                "sub-header",
                Value::map_of([
                    ("dtype", Value::Array(vec![0.into(), "|u1".into()])),
                    ("shape", Value::Array(vec![n.into()])),
                    ("strides", Value::Array(vec![1.into()])),
                    ("writeable", Value::Array(vec![true.into()])),
                ]),
            ),
            ("type", "numpy.ndarray".into()),
            ("serializer", "dask".into()),
        ]))
    };
    let big = Block::new(numpy_header(payload.len()), [payload]);
    let small = Block::new(numpy_header(12), [Bytes::from_static(&[7; 12])]);
    Value::map_of([
        ("op", "compute-task".into()),
        ("key", Value::Array(vec!["add-abc".into(), 0.into()])),
        (
            "run_spec",
            Value::Array(vec![
                "operator.add".into(),
                Value::Serialized(Box::new(big)),
                Value::map_of([("k", Value::Serialized(Box::new(small)))]),
            ]),
        ),
        (
            "priority",
            Value::Array(vec![0.into(), 1.into(), (-2).into()]),
        ),
        ("duration", 0.5.into()),
        ("stimulus_id", "s-1".into()),
    ])
}

fn payload(size: usize) -> Bytes {
    Bytes::from(vec![1u8; size])
}

fn bench_envelope(c: &mut Criterion) {
    let limits = Limits::dask_compat();
    let mut g = c.benchmark_group("envelope");
    g.throughput(Throughput::Elements(1));
    for (name, size) in SIZES {
        let frames = dumps(&task_message(payload(size))).unwrap();
        g.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| {
                let env = Envelope::new(black_box(frames.clone())).unwrap();
                let prelude = env.prelude();
                black_box(env.io_slices(&prelude).len())
            })
        });
        let wire = Envelope::new(frames).unwrap().to_bytes();
        g.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| black_box(Envelope::decode(black_box(&wire), &limits).unwrap()))
        });
    }
    g.finish();
}

fn bench_message(c: &mut Criterion) {
    let limits = Limits::dask_compat();
    let mut g = c.benchmark_group("message");
    g.throughput(Throughput::Elements(1));
    for (name, size) in SIZES {
        let frames = dumps(&task_message(payload(size))).unwrap();
        let value = decode(&frames, &limits).unwrap();
        g.bench_function(BenchmarkId::new("loads_passthrough", name), |b| {
            b.iter(|| black_box(decode(black_box(&frames), &limits).unwrap()))
        });
        g.bench_function(BenchmarkId::new("dumps_passthrough", name), |b| {
            b.iter(|| black_box(dumps(black_box(&value)).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_envelope, bench_message);
criterion_main!(benches);
