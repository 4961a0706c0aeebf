//! The transport over loopback TCP, one direction, byte throughput.
//! Names: `<api>/<variant>/<size>`:
//!
//! * `transport/<variant>/<size>` for 1 KiB, 64 KiB, 64 MiB and 512 MiB
//!   messages (512 MiB not with `--quick`), every variant on the same
//!   2-worker tokio runtime, sender and receiver as two tasks:
//!   - `connection`: framewire `Connection`, `send(Envelope[payload])` /
//!     `recv()`, receive buffers recycled;
//!   - `connection_fresh`: the same, a fresh receive buffer per message;
//!   - `connection_checksums`: `connection` with checksum trailers both
//!     ways (a CRC32 of every frame, sent and verified);
//!   - `connection_task`: a whole task message each way (`dumps` + send,
//!     `recv` + `loads` + `deserialize_blocks`) carrying a u8 ndarray;
//!   - `framecodec`: `Framed<_, FrameCodec>` (its encoder copies);
//!   - `length_delimited`: `Framed<_, LengthDelimitedCodec>`, one frame = the
//!     payload;
//!   - `raw_writev`: `writev(header, payload)`; `read_exact` into one reused,
//!     faulted-in buffer (the ceiling);
//! * `transport_msgs/one_way_<flavor>/1KiB_task`: `py_small_msgs.py`'s 1 KiB
//!   task message streamed one way over `Connection` (messages/s);
//! * `transport_msgs/round_trip_<flavor>/ping`: request/response (round trips/s).
//!
//! `<flavor>` is `1thread` (current-thread runtime) or `2threads`.
//! Each benchmark keeps one connection open across its samples.

use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};

mod common;
use common::{size_name, Flavor, Link, PingPong, Variant, KIB, MIB};

fn quick() -> bool {
    std::env::args().any(|a| a == "--quick")
}

fn one_way(c: &mut Criterion) {
    let rt = Flavor::TwoThreads.runtime();
    let mut sizes = vec![KIB, 64 * KIB, 64 * MIB];
    if !quick() {
        sizes.push(512 * MIB);
    }
    let mut g = c.benchmark_group("transport");
    for size in sizes {
        g.throughput(Throughput::Bytes(size as u64));
        if size >= MIB {
            g.sample_size(10)
                .sampling_mode(SamplingMode::Flat)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(if size > 64 * MIB { 8 } else { 4 }));
        } else {
            g.sample_size(20)
                .sampling_mode(SamplingMode::Auto)
                .warm_up_time(Duration::from_millis(500))
                .measurement_time(Duration::from_secs(2));
        }
        for variant in Variant::ALL {
            let mut link = Link::new(&rt, variant, size);
            g.bench_function(BenchmarkId::new(variant.name(), size_name(size)), |b| {
                b.iter_custom(|iters| link.run(&rt, iters))
            });
        }
    }
    g.finish();
}

fn small_messages(c: &mut Criterion) {
    let mut g = c.benchmark_group("transport_msgs");
    g.throughput(Throughput::Elements(1))
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (flavor, name) in [
        (Flavor::OneThread, "1thread"),
        (Flavor::TwoThreads, "2threads"),
    ] {
        let rt = flavor.runtime();
        let mut link = Link::small(&rt);
        g.bench_function(
            BenchmarkId::new(format!("one_way_{name}"), "1KiB_task"),
            |b| b.iter_custom(|iters| link.run(&rt, iters)),
        );
        let mut pp = PingPong::new(&rt);
        g.bench_function(
            BenchmarkId::new(format!("round_trip_{name}"), "ping"),
            |b| b.iter_custom(|iters| pp.run(&rt, iters)),
        );
    }
    g.finish();
}

criterion_group!(benches, one_way, small_messages);
criterion_main!(benches);
