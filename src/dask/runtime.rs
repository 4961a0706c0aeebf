//! What a program taking part in Dask's conversations needs from its
//! runtime, computed as Dask computes it: the clock (`time()`), ids of
//! servers and stimuli, and the process's memory.

use std::time::SystemTime;

/// Seconds since the epoch, as Dask's `time()`.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A `stimulus_id` as Dask makes them: `"<prefix>-<time>"`.
pub fn stimulus_id(prefix: &str) -> String {
    format!("{prefix}-{}", now())
}

/// A fresh id for a server (`"Worker-<32 hex digits>"`, the shape of
/// Dask's `"Worker-" + uuid4()`), from the OS's random hasher keys, the
/// clock and the process id.
pub fn server_id(kind: &str) -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let word = |salt: u64| {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.write_u32(std::process::id());
        h.finish()
    };
    format!("{kind}-{:016x}{:016x}", word(1), word(2))
}

/// This process's resident memory in bytes (Linux: `/proc/self/statm`; 0
/// elsewhere): what a worker reports as its `memory` metric.
pub fn resident_memory() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        // The page size of every Linux target Rust supports but a few
        // (which would only misreport a metric).
        pages * 4096
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}
