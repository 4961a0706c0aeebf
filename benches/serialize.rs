//! Layer 3: serialize / deserialize of collections in every
//! `IterateCollection` mode, for N from 10 to 1e6 leaves, and `dumps` /
//! `loads` of a task message whose `Serialize`d payload grows from 1 KiB to
//! 1 GiB. Names: `<api>/<variant>/<size>`:
//!
//! * `serialize/<collection>/<mode>/<n>`, `deserialize/<collection>/<mode>/<n>`
//!   (element throughput: per-leaf cost), for every collection of
//!   `common::STRUCTS` (`Never` is skipped where it must refuse: a
//!   `Serialized` block inside);
//! * `serialize_roundtrip/{tuple_small_ints,tuple_small_ints_packed,list_bytes8}/<mode>/<n>`: both
//!   together (the figure `scripts/bench-compare` sets beside Dask);
//! * `dumps_loads/serialize_payload/{dumps,loads}/<size>`;
//! * `dumps_collection/{tuple_small_ints,list_bytes8}/{serialize,dumps,loads}/<n>`:
//!   an iterated collection through `dumps` and `loads`, beside `serialize`
//!   alone;
//! * `compression/lz4_decode/{framewire,lz4_flex}/64MiB`: decompressing a
//!   compressible 64 MiB frame through framewire's path (declared-size
//!   checks against the limits, the budget, an exact buffer, `Bytes`)
//!   beside lz4_flex's `decompress_size_prepended` alone.
//!
//! `cargo bench --bench serialize -- --quick` runs everything in a few
//! minutes; a filter narrows it (`-- 'serialize/tuple_small_ints'`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode,
    Throughput,
};
use framewire::message::decode;
use framewire::serialize::IterateCollection;
use framewire::serialize::{deserialize, serialize};
use framewire::{dumps, dumps_with, Limits, Value};

mod common;
use common::{collection, deserialize_options, modes, serialize_options, size_name, STRUCTS};

const N: [usize; 4] = [10, 1_000, 100_000, 1_000_000];

fn configure<M: criterion::measurement::Measurement>(g: &mut BenchmarkGroup<'_, M>, n: usize) {
    g.throughput(Throughput::Elements(n as u64));
    if n >= 100_000 {
        // Milliseconds to a second per call: few, flat samples.
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
    } else {
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(1));
    }
}

/// `serialize/…` and `deserialize/…` of every collection.
fn ser_de(c: &mut Criterion) {
    let de = deserialize_options();
    for name in STRUCTS {
        let mut ser_group = c.benchmark_group(format!("serialize/{name}"));
        let mut de_group_ids = Vec::new();
        for n in N {
            let value = collection(name, n);
            configure(&mut ser_group, n);
            for (mode_name, mode) in modes() {
                let opts = serialize_options(mode);
                let Ok(block) = serialize(&value, &opts) else {
                    continue; // `never` with a `Serialized` inside: refused, as it must be
                };
                ser_group.bench_function(BenchmarkId::new(mode_name, n), |b| {
                    b.iter(|| black_box(serialize(black_box(&value), &opts).unwrap()))
                });
                de_group_ids.push((mode_name, n, block));
            }
        }
        ser_group.finish();
        let mut de_group = c.benchmark_group(format!("deserialize/{name}"));
        for (mode_name, n, block) in de_group_ids {
            configure(&mut de_group, n);
            de_group.bench_function(BenchmarkId::new(mode_name, n), |b| {
                b.iter(|| black_box(deserialize(black_box(&block), &de).unwrap()))
            });
        }
        de_group.finish();
    }
}

/// `serialize_roundtrip/…`: serialize, then deserialize the block.
fn roundtrip(c: &mut Criterion) {
    let de = deserialize_options();
    for name in ["tuple_small_ints", "tuple_small_ints_packed", "list_bytes8"] {
        let mut g = c.benchmark_group(format!("serialize_roundtrip/{name}"));
        for n in N {
            let value = collection(name, n);
            configure(&mut g, n);
            for (mode_name, mode) in modes() {
                let opts = serialize_options(mode);
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
}

/// `dumps_loads/serialize_payload/…`: the cost must not grow with the payload
/// (it is sliced into 64 MiB shards, never copied).
fn big_payload(c: &mut Criterion) {
    let limits = Limits::dask_compat();
    let mut g = c.benchmark_group("dumps_loads/serialize_payload");
    g.throughput(Throughput::Elements(1));
    for size in [1usize << 10, 1 << 20, 64 << 20, 1 << 30] {
        let name = size_name(size);
        let msg = common::serialize_task(bytes::Bytes::from(vec![1u8; size]));
        g.bench_function(BenchmarkId::new("dumps", &name), |b| {
            b.iter(|| black_box(dumps(black_box(&msg)).unwrap()))
        });
        let frames = dumps(&msg).unwrap();
        g.bench_function(BenchmarkId::new("loads", &name), |b| {
            b.iter(|| black_box(decode(black_box(&frames), &limits).unwrap()))
        });
    }
    g.finish();
}

/// `dumps_collection/<collection>/{serialize,dumps,loads}/<n>`: the
/// collection iterated (`Always`) in a `Serialize` inside a message, through
/// `dumps` and back through `loads` (deserialized), beside `serialize` of the
/// collection alone: what the split table and `num-sub-frames` add to the
/// header `serialize` writes.
fn dumps_collection(c: &mut Criterion) {
    let opts = serialize_options(IterateCollection::Always);
    let de = deserialize_options();
    for name in ["tuple_small_ints", "list_bytes8"] {
        let mut g = c.benchmark_group(format!("dumps_collection/{name}"));
        for n in [1_000, 1_000_000] {
            configure(&mut g, n);
            let value = collection(name, n);
            let msg = Value::map_of([
                ("op", Value::str("update-data")),
                ("data", Value::ToSerialize(Box::new(value.clone()))),
            ]);
            g.bench_function(BenchmarkId::new("serialize", n), |b| {
                b.iter(|| black_box(serialize(black_box(&value), &opts).unwrap()))
            });
            g.bench_function(BenchmarkId::new("dumps", n), |b| {
                b.iter(|| black_box(dumps_with(black_box(&msg), &opts).unwrap()))
            });
            let frames = dumps_with(&msg, &opts).unwrap();
            g.bench_function(BenchmarkId::new("loads", n), |b| {
                b.iter(|| black_box(framewire::loads_with(black_box(&frames), &de).unwrap()))
            });
        }
        g.finish();
    }
}

/// `compression/lz4_decode/{framewire,lz4_flex}/64MiB`: what framewire's
/// checks add to lz4_flex's block decoder.
fn lz4_decode(c: &mut Criterion) {
    use framewire::serialize::{decompress, Codec, DecompressBudget};
    const SIZE: usize = 64 << 20;
    // Compressible but not trivial: text with varying numbers.
    let mut data = Vec::with_capacity(SIZE + 64);
    let mut i = 0u64;
    while data.len() < SIZE {
        let row = format!("row {i:>10}: value={} status=ok;\n", i * 7919 % 100_003);
        data.extend_from_slice(row.as_bytes());
        i += 1;
    }
    data.truncate(SIZE);
    let packed = Codec::Lz4.compress(&data).unwrap();
    let limits = Limits::dask_compat();
    let mut g = c.benchmark_group("compression/lz4_decode");
    g.throughput(Throughput::Bytes(SIZE as u64))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.bench_function(BenchmarkId::new("framewire", "64MiB"), |b| {
        b.iter(|| {
            let mut budget = DecompressBudget::new(&limits);
            let out = decompress(Codec::Lz4, black_box(&packed), &mut budget).unwrap();
            assert_eq!(out.len(), SIZE);
            out
        })
    });
    g.bench_function(BenchmarkId::new("lz4_flex", "64MiB"), |b| {
        b.iter(|| {
            let out = lz4_flex::block::decompress_size_prepended(black_box(&packed)).unwrap();
            assert_eq!(out.len(), SIZE);
            out
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    roundtrip,
    big_payload,
    dumps_collection,
    lz4_decode,
    ser_de
);
criterion_main!(benches);
