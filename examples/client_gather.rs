//! Times `framewire::dask::Client::gather` of one key (for BENCHMARKS.md):
//!
//!     cargo run --release --example client_gather -- tcp://127.0.0.1:8786 KEY [RUNS]
//!
//! Waits for the key (a Python client holds it), then gathers it RUNS times
//! (default 5) and prints each time and the best rate.

use std::time::Instant;

use framewire::dask::{Client, ClientOptions, Key};
use framewire::Value;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, key, rest @ ..] = &args[..] else {
        return Err("usage: client_gather ADDRESS KEY [RUNS]".into());
    };
    let runs: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(5);
    let client = Client::connect(addr, ClientOptions::default()).await?;
    let keys = [Key::from(key.as_str())];
    client.wait(&keys).await?;
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let t = Instant::now();
        let got = client.gather(&keys).await?;
        let s = t.elapsed().as_secs_f64();
        let n = match &got[&keys[0]] {
            Value::NdArray(a) => a.data().len(),
            other => framewire::dask::nbytes(other) as usize,
        };
        let t2 = Instant::now();
        client.who_has(&keys).await?;
        let w = t2.elapsed().as_secs_f64();
        println!(
            "gather {n} bytes: {:.1} ms (a who_has alone: {:.1} ms)",
            s * 1e3,
            w * 1e3
        );
        best = best.min(s / n as f64);
    }
    println!("best: {:.0} MB/s", 1e-6 / best);
    client.close().await?;
    Ok(())
}
