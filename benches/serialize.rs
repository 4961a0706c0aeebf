//! Layer 3: serialize + deserialize of large collections in every
//! `IterateCollection` mode, and `dumps` of a task message whose payload
//! grows from 1 KiB to 1 GiB. Names: `<api>/<variant>/<size>`.
//! `scripts/bench-serialize` runs these beside Python Dask's equivalents.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use framewire::serialize::{
    deserialize, serialize, DeserializeOptions, IterateCollection, SerializeOptions,
};
use framewire::{dumps, loads, Limits, Value};

const N: [usize; 3] = [1_000, 100_000, 1_000_000];

fn modes() -> [(&'static str, IterateCollection); 3] {
    [
        ("never", IterateCollection::Never),
        ("auto", IterateCollection::Auto),
        ("always", IterateCollection::Always),
    ]
}

fn roundtrip(c: &mut Criterion, name: &str, make: impl Fn(usize) -> Value) {
    let de = DeserializeOptions::with_limits(Limits::dask_compat());
    let mut g = c.benchmark_group(format!("serialize_roundtrip/{name}"));
    g.sample_size(10);
    for n in N {
        let value = make(n);
        g.throughput(Throughput::Elements(n as u64));
        for (mode_name, mode) in modes() {
            let opts = SerializeOptions {
                iterate: mode,
                ..Default::default()
            };
            if serialize(&value, &opts).is_err() {
                continue;
            }
            g.bench_function(BenchmarkId::new(mode_name, n), |b| {
                b.iter(|| {
                    let block = serialize(black_box(&value), &opts).unwrap();
                    black_box(deserialize(&block, &de).unwrap())
                })
            });
        }
    }
    g.finish();
}

fn small_ints(c: &mut Criterion) {
    roundtrip(c, "tuple_small_ints", |n| {
        Value::Array((0..n).map(|i| Value::from(i % 100)).collect())
    });
}

fn small_bytes(c: &mut Criterion) {
    roundtrip(c, "list_bytes8", |n| {
        Value::Array(
            (0..n)
                .map(|i| Value::Bin(Bytes::from((i as u64).to_le_bytes().to_vec())))
                .collect(),
        )
    });
}

fn big_payload(c: &mut Criterion) {
    let limits = Limits::dask_compat();
    let mut g = c.benchmark_group("dumps_loads/serialize_payload");
    for (name, size) in [("1KiB", 1usize << 10), ("1MiB", 1 << 20), ("1GiB", 1 << 30)] {
        let payload = Bytes::from(vec![1u8; size]);
        let msg = Value::map_of([
            ("op", "compute-task".into()),
            ("key", Value::Array(vec!["x".into(), 0.into()])),
            ("data", Value::Serialize(Box::new(Value::Bin(payload)))),
        ]);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("dumps", name), |b| {
            b.iter(|| black_box(dumps(black_box(&msg)).unwrap()))
        });
        let frames = dumps(&msg).unwrap();
        g.bench_function(BenchmarkId::new("loads", name), |b| {
            b.iter(|| black_box(loads(black_box(&frames), &limits).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, small_ints, small_bytes, big_payload);
criterion_main!(benches);
