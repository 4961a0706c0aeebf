//! `pickle/loads/<case>`: `framewire::pickle::loads` of the pickles Python
//! writes for a list of 10^6 ints and a dict of 10^5 str → float (protocol
//! 5, as Dask's pickle family sends them), the value built and dropped in
//! each iteration. Python's C `pickle.loads` of the same bytes, its result
//! freed, is timed before and after (`benches/pickle_loads.py`) and printed
//! beside criterion's figures: the target is framewire at least as
//! fast, both building their language's values (framewire packs the
//! million ints into one `IntArray`, as it does for msgpack).
//!
//! `cargo bench --features pickle --bench pickle`. Needs the Python of the
//! tests (`FRAMEWIRE_PYTHON` or `.venv-dask`, `scripts/setup-python`).

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use framewire::{pickle, Limits};

#[path = "../tests/support/dask_python.rs"]
mod dask_python;

const CASES: [&str; 2] = ["list_int_1e6", "dict_str_float_1e5"];

fn python(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pickle_loads.py");
    let out = Command::new(dask_python::python())
        .arg(script)
        .args(args)
        .output()
        .expect("run benches/pickle_loads.py");
    assert!(
        out.status.success(),
        "pickle_loads.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn loads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path().to_str().expect("a UTF-8 path");
    python(&["write", d]);
    let before = python(&["time", d]);
    let mut g = c.benchmark_group("pickle/loads");
    g.sample_size(20)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for name in CASES {
        let data = Bytes::from(std::fs::read(dir.path().join(format!("{name}.pkl"))).unwrap());
        g.throughput(Throughput::Bytes(data.len() as u64));
        let limits = Limits::default();
        g.bench_function(name, |b| {
            b.iter(|| pickle::loads(black_box(&data), &[], &limits).expect("Python's pickle"))
        });
    }
    g.finish();
    let after = python(&["time", d]);
    println!("Python's pickle.loads of the same bytes, before and after (ms):");
    for line in before.lines().chain(after.lines()) {
        println!("  {line}");
    }
}

criterion_group!(benches, loads);
criterion_main!(benches);
