//! What a program taking part in Dask's conversations needs from its
//! runtime, computed as Dask computes it: the clock (`time()`), ids of
//! servers and stimuli, and the process's memory.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Seconds since the epoch, as Dask's `time()`.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The next call of a periodic callback whose last call was due at `last`,
/// once that call has ended at `now`: whole periods after `last`, the first
/// past `now`, as tornado's `PeriodicCallback._update_next` (which runs
/// Dask's heartbeats and `find-missing`): calls go a period apart start to
/// start, and the ones a call longer than a period covers are skipped. A
/// period under 1 ms is taken as 1 ms.
///
/// ```
/// use std::time::Duration;
/// use framewire::dask::runtime::next_tick;
/// use tokio::time::Instant;
///
/// let t0 = Instant::now();
/// let ms = Duration::from_millis;
/// // A heartbeat answered 0.3 s late: the next still goes 0.5 s after it started.
/// assert_eq!(next_tick(t0, ms(500), t0 + ms(300)), t0 + ms(500));
/// // Answered after 1.2 periods: the call due inside it is skipped.
/// assert_eq!(next_tick(t0, ms(500), t0 + ms(600)), t0 + ms(1000));
/// ```
pub fn next_tick(last: Instant, period: Duration, now: Instant) -> Instant {
    if last > now {
        return last;
    }
    let period = period.max(Duration::from_millis(1));
    let behind = (now - last).as_nanos() / period.as_nanos();
    let n = u32::try_from(behind + 1).unwrap_or(u32::MAX);
    period
        .checked_mul(n)
        .and_then(|d| last.checked_add(d))
        .unwrap_or(now + period)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_tick_keeps_the_grid_of_a_periodic_callback() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // A call that ended before its period was over: one period on.
        assert_eq!(next_tick(t0, ms(500), t0 + ms(120)), t0 + ms(500));
        // A call that took 1.2 periods: the tick inside it is skipped.
        assert_eq!(next_tick(t0, ms(500), t0 + ms(600)), t0 + ms(1000));
        // Exactly on a tick: the next one.
        assert_eq!(next_tick(t0, ms(500), t0 + ms(500)), t0 + ms(1000));
        // Still ahead: unchanged.
        assert_eq!(next_tick(t0 + ms(700), ms(500), t0 + ms(600)), t0 + ms(700));
        // A period of zero is taken as 1 ms.
        assert_eq!(next_tick(t0, Duration::ZERO, t0 + ms(3)), t0 + ms(4));
    }
}
