//! What the swarm measures, shared by all its workers: tasks finished per
//! second, the scheduler's decision latency, messages by op each way, and
//! the swarm's own CPU time and resident memory (sampled once a second).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

/// Latency samples longer than this are left out: the scheduler was idle
/// (no graph to run), not deciding.
pub const LATENCY_CAP: Duration = Duration::from_secs(10);

/// The swarm's counters.
#[derive(Debug)]
pub struct Stats {
    start: Instant,
    /// Workers registered now.
    pub registered: AtomicU64,
    /// Registrations (first ones and after a lost scheduler).
    pub registrations: AtomicU64,
    /// Workers the scheduler closed (`close`, heartbeat `missing`).
    pub removed: AtomicU64,
    /// Tasks finished (`task-finished` sent).
    pub finished: AtomicU64,
    /// Bytes served with `get_data`, and fetched.
    pub bytes_served: AtomicU64,
    pub bytes_fetched: AtomicU64,
    /// The last RSS sample, bytes.
    pub rss: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Tasks finished, by second since the start.
    finished_per_second: Vec<u64>,
    /// The first `task-finished` not yet followed by a `compute-task`.
    pending: Option<Instant>,
    /// (second since the start, latency in µs).
    latencies: Vec<(u32, u32)>,
    sent: BTreeMap<&'static str, u64>,
    received: BTreeMap<String, u64>,
    /// (seconds since the start, CPU seconds, RSS bytes, workers registered).
    samples: Vec<(f64, f64, u64, u64)>,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            start: Instant::now(),
            registered: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            bytes_served: AtomicU64::new(0),
            bytes_fetched: AtomicU64::new(0),
            rss: AtomicU64::new(resident_memory()),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn second(&self, t: Instant) -> usize {
        t.saturating_duration_since(self.start).as_secs() as usize
    }

    /// A message sent by a worker (stream, heartbeat, reply).
    pub fn sent(&self, op: &'static str) {
        *self.lock().sent.entry(op).or_default() += 1;
    }

    /// A message received by a worker.
    pub fn received(&self, op: &str) {
        self.lock().received_one(op);
    }

    /// A `task-finished` was queued for the scheduler.
    pub fn task_finished(&self) {
        let now = Instant::now();
        let s = self.second(now);
        self.finished.fetch_add(1, Relaxed);
        let mut inner = self.lock();
        inner.sent_one("task-finished");
        if inner.finished_per_second.len() <= s {
            inner.finished_per_second.resize(s + 1, 0);
        }
        inner.finished_per_second[s] += 1;
        inner.pending.get_or_insert(now);
    }

    /// A `compute-task` arrived: the scheduler's decision latency is the
    /// time since the first `task-finished` it had not answered.
    pub fn compute_received(&self) {
        let now = Instant::now();
        let s = self.second(now) as u32;
        let mut inner = self.lock();
        inner.received_one("compute-task");
        if let Some(t) = inner.pending.take() {
            let d = now.saturating_duration_since(t);
            if d <= LATENCY_CAP {
                let micros = u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
                inner.latencies.push((s, micros));
            }
        }
    }

    /// Records CPU time and RSS now (called once a second).
    pub fn sample(&self) {
        let rss = resident_memory();
        self.rss.store(rss, Relaxed);
        let t = self.start.elapsed().as_secs_f64();
        let registered = self.registered.load(Relaxed);
        self.lock()
            .samples
            .push((t, cpu_seconds(), rss, registered));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("stats are never poisoned")
    }

    /// The results as JSON, and the one summary line.
    pub fn report(&self, workers: usize, config: Json) -> (Json, String) {
        self.sample();
        let elapsed = self.start.elapsed().as_secs_f64();
        let inner = self.lock();
        let finished = self.finished.load(Relaxed);
        let mut all: Vec<u32> = inner.latencies.iter().map(|&(_, l)| l).collect();
        all.sort_unstable();
        let pct = |v: &[u32], p: f64| -> Option<f64> {
            if v.is_empty() {
                return None;
            }
            let i = ((v.len() - 1) as f64 * p).round() as usize;
            Some(f64::from(v[i]) / 1000.0)
        };
        let seconds = inner
            .finished_per_second
            .len()
            .max(inner.latencies.last().map_or(0, |&(s, _)| s as usize + 1))
            .max(elapsed.ceil() as usize);
        let mut by_second: Vec<Vec<u32>> = vec![Vec::new(); seconds];
        for &(s, l) in &inner.latencies {
            by_second[s as usize].push(l);
        }
        let timeline: Vec<Json> = by_second
            .iter_mut()
            .enumerate()
            .map(|(s, l)| {
                l.sort_unstable();
                json!({
                    "second": s,
                    "tasks_finished": inner.finished_per_second.get(s).copied().unwrap_or(0),
                    "latency_ms_p50": pct(l, 0.5),
                    "latency_ms_p99": pct(l, 0.99),
                })
            })
            .collect();
        let peak = inner.finished_per_second.iter().copied().max().unwrap_or(0);
        let (cpu, rss_peak) = inner
            .samples
            .iter()
            .fold((0.0f64, 0u64), |(c, r), s| (c.max(s.1), r.max(s.2)));
        let rss_last = inner.samples.last().map_or(0, |s| s.2);
        let samples: Vec<Json> = inner
            .samples
            .iter()
            .map(|s| json!({"t": s.0, "cpu_seconds": s.1, "rss_bytes": s.2, "registered": s.3}))
            .collect();
        let active: Vec<f64> = inner
            .finished_per_second
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| n as f64)
            .collect();
        let mean_active = if active.is_empty() {
            0.0
        } else {
            active.iter().sum::<f64>() / active.len() as f64
        };
        let results = json!({
            "config": config,
            "workers": workers,
            "elapsed_seconds": elapsed,
            "registrations": self.registrations.load(Relaxed),
            "removed_by_scheduler": self.removed.load(Relaxed),
            "tasks_finished": finished,
            "tasks_per_second_peak": peak,
            "tasks_per_second_mean_while_busy": mean_active,
            "decision_latency_ms": {
                "samples": all.len(),
                "p50": pct(&all, 0.5), "p90": pct(&all, 0.9),
                "p99": pct(&all, 0.99), "max": pct(&all, 1.0),
            },
            "messages_sent": inner.sent,
            "messages_received": inner.received,
            "bytes_served": self.bytes_served.load(Relaxed),
            "bytes_fetched": self.bytes_fetched.load(Relaxed),
            "cpu_seconds": cpu,
            "cpu_percent": if elapsed > 0.0 { 100.0 * cpu / elapsed } else { 0.0 },
            "rss_bytes_peak": rss_peak,
            "rss_bytes_end": rss_last,
            "timeline": timeline,
            "samples": samples,
        });
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        let summary = format!(
            "swarm: {workers} workers, {} registrations, {finished} tasks finished in {elapsed:.1} s \
             (peak {peak}/s, {mean_active:.0}/s while busy), decision latency p50 {} ms p99 {} ms \
             ({} samples), CPU {cpu:.2} s ({:.1} %), RSS peak {:.1} MiB",
            self.registrations.load(Relaxed),
            ms(pct(&all, 0.5)),
            ms(pct(&all, 0.99)),
            all.len(),
            if elapsed > 0.0 { 100.0 * cpu / elapsed } else { 0.0 },
            rss_peak as f64 / (1024.0 * 1024.0),
        );
        (results, summary)
    }
}

impl Inner {
    fn sent_one(&mut self, op: &'static str) {
        *self.sent.entry(op).or_default() += 1;
    }

    /// Counts `op` received (its name copied the first time only).
    fn received_one(&mut self, op: &str) {
        match self.received.get_mut(op) {
            Some(n) => *n += 1,
            None => {
                self.received.insert(op.to_owned(), 1);
            }
        }
    }
}

/// This process's resident memory, bytes.
pub fn resident_memory() -> u64 {
    framewire::dask::runtime::resident_memory()
}

/// This process's CPU time (user + system), seconds, from
/// `/proc/self/stat` (0 elsewhere than Linux).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at 3.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    // USER_HZ is 100 on every Linux target.
    ticks as f64 / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_from_first_unanswered_finish() {
        let s = Stats::new();
        s.compute_received(); // nothing pending: no sample
        s.task_finished();
        s.task_finished();
        s.compute_received();
        s.compute_received();
        let (j, line) = s.report(1, json!({}));
        assert_eq!(j["decision_latency_ms"]["samples"], 1);
        assert_eq!(j["tasks_finished"], 2);
        assert_eq!(j["messages_received"]["compute-task"], 3);
        assert_eq!(j["messages_sent"]["task-finished"], 2);
        assert!(line.starts_with("swarm: 1 workers"), "{line}");
    }
}
