//! A simulated worker's dependencies on their way, as `WorkerState` keeps
//! them (`worker_state_machine.py`, 2026.8.0), without I/O: which holder
//! is asked for which keys and when, what comes of each answer.
//!
//! * A key wanted goes to `fetch`, listed under each of its holders
//!   (`data_needed`).
//! * [`Fetches::select`] is `_ensure_communicating` (`:1519`): the holders
//!   with keys to give, neither asked already (one `get_data` in flight per
//!   holder, `in_flight_workers`) nor busy, by their most urgent key, the
//!   worker's own host first, then the most keys, then at random
//!   (`_select_workers_for_gather`, `:1590`); each asked for its keys in
//!   priority order, up to 50 MB a message and the bytes in flight allowed
//!   (`_select_keys_for_gather`, `_task_exceeds_transfer_limits`), until the
//!   transfers in flight are throttled (`_should_throttle_incoming_transfers`,
//!   `:1497`).
//! * [`Fetches::done`] is `_handle_gather_dep_success` / `_busy` /
//!   `_network_failure` (`:2929`-`:3012`).
//! * A key on its way that the scheduler sends to be computed here goes
//!   `resumed` ([`Fetches::resume`]): when it comes, it is the task's
//!   result; when it does not, the task is computed.

use std::cmp::Reverse;
use std::time::Duration;

use framewire::dask::Key;
use framewire::transport::Address;
use tokio::time::Instant;

use super::maps::{HashMap, HashSet};
use super::priority::Priority;

/// Bytes asked of one holder in one `get_data` at most, beyond the first
/// key (`distributed.worker.transfer.message-bytes-limit`: 50MB).
const MESSAGE_BYTES_LIMIT: u64 = 50_000_000;

/// Bytes in flight under which the count of transfers is not limited
/// (`transfer_incoming_bytes_throttle_threshold = int(10e6)`).
const THROTTLE_BYTES: u64 = 10_000_000;

/// Transfers in flight at most once [`THROTTLE_BYTES`] are
/// (`transfer_incoming_count_limit`: `distributed.worker.connections.outgoing`, 50).
const COUNT_LIMIT: usize = 50;

/// The share of the memory limit that may be in flight
/// (`distributed.worker.memory.transfer`: 0.10).
const MEMORY_SHARE: f64 = 0.10;

/// How long a holder that answered `busy` is passed over
/// (`Worker.retry_busy_worker_later`: 0.15 s).
const BUSY_PAUSE: Duration = Duration::from_millis(150);

/// A key's size when the scheduler gave none
/// (`distributed.scheduler.default-data-size`: 1 KiB).
pub const DEFAULT_NBYTES: u64 = 1024;

/// A dependency on its way.
#[derive(Debug)]
struct Dep {
    /// Its holders as far as this worker knows (`ts.who_has`).
    who_has: Vec<String>,
    /// The scheduler's size of it (`ts.nbytes`).
    nbytes: u64,
    /// The priority of the first task that wanted it.
    priority: Priority,
    state: State,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for a holder to be asked (`fetch`).
    Fetch,
    /// Asked (`flight`).
    Flight,
    /// Asked, and no longer wanted (`cancelled`): dropped when it comes.
    Cancelled,
    /// Asked, and since sent to be computed here (`resumed`, from `flight`
    /// to `waiting`): when it comes, it is the task's result; if it does
    /// not, the task is computed.
    Resumed,
}

/// How a `get_data` ended.
#[derive(Debug)]
pub enum Answer {
    /// `"OK"`: the keys the holder gave, with their sizes.
    Data(Vec<(Key, u64)>),
    /// `{"status": "busy"}`.
    Busy,
    /// The holder could not be reached or broke off.
    Failed,
}

/// What a finished `get_data` leaves to do.
#[derive(Debug, Default)]
pub struct Done {
    /// Keys now held (`_transition_flight_memory`), with their sizes.
    pub arrived: Vec<(Key, u64)>,
    /// Keys no holder is left for (`missing`), with their priority and size.
    pub missing: Vec<(Key, Priority, u64)>,
    /// Keys whose every holder is busy: asked of the scheduler again
    /// (`RequestRefreshWhoHasMsg` in `_handle_gather_dep_busy`).
    pub refresh: Vec<Key>,
    /// [Resumed](Fetches::resume) keys now held, with their sizes: the
    /// results of their tasks (`_transition_resumed_memory`).
    pub resumed: Vec<(Key, u64)>,
    /// Resumed keys that did not come: their tasks are computed after all
    /// (`_transition_resumed_fetch` once the transfer is done).
    pub compute: Vec<Key>,
}

/// A worker's dependencies on their way.
#[derive(Debug)]
pub struct Fetches {
    deps: HashMap<Key, Dep>,
    /// Keys in `fetch` by holder; a key no longer in `fetch` from that
    /// holder is skipped, and dropped, when the holder's list is read.
    data_needed: HashMap<String, Vec<Key>>,
    /// The keys asked of each holder, and their bytes.
    in_flight_workers: HashMap<String, (Vec<Key>, u64)>,
    /// Holders that answered `busy`, until when.
    busy: HashMap<String, Instant>,
    incoming_bytes: u64,
    bytes_limit: u64,
    /// The worker's own host (`get_address_host(self.address)`).
    host: String,
}

impl Fetches {
    /// For the worker at `address` with `memory_limit`.
    pub fn new(address: &str, memory_limit: Option<u64>) -> Fetches {
        let bytes_limit = memory_limit
            .filter(|m| *m > 0)
            .map_or(u64::MAX, |m| (m as f64 * MEMORY_SHARE) as u64);
        Fetches {
            deps: HashMap::default(),
            data_needed: HashMap::default(),
            in_flight_workers: HashMap::default(),
            busy: HashMap::default(),
            incoming_bytes: 0,
            bytes_limit,
            host: host_of(address).unwrap_or_default(),
        }
    }

    /// Whether `key` is being fetched (or is on its way, cancelled).
    pub fn contains(&self, key: &Key) -> bool {
        self.deps.contains_key(key)
    }

    /// `key` is wanted from `holders`: a new one goes to `fetch`; one on
    /// its way learns of its holders ([`update_who_has`](Self::update_who_has)),
    /// and if it was cancelled it is wanted again
    /// (`_transition_cancelled_fetch`, `:2116`). `holders` must not be
    /// empty (a key without holders is `missing`).
    pub fn want(&mut self, key: Key, holders: Vec<String>, nbytes: u64, priority: Priority) {
        if let Some(dep) = self.deps.get_mut(&key) {
            if dep.state == State::Cancelled {
                dep.state = State::Flight;
            }
            self.update_who_has(key, holders);
            return;
        }
        for h in &holders {
            need(&mut self.data_needed, h, &key);
        }
        let dep = Dep {
            who_has: holders,
            nbytes,
            priority,
            state: State::Fetch,
        };
        self.deps.insert(key, dep);
    }

    /// The scheduler's holders of a key on its way, in place of those known
    /// (`_update_who_has`, `:1414`; nothing if it is not on its way).
    pub fn update_who_has(&mut self, key: Key, holders: Vec<String>) {
        let Some(dep) = self.deps.get_mut(&key) else {
            return;
        };
        if dep.state == State::Fetch {
            for h in holders.iter().filter(|h| !dep.who_has.contains(h)) {
                need(&mut self.data_needed, h, &key);
            }
        }
        dep.who_has = holders;
    }

    /// `compute-task` for `key`, which may be wanted here as a dependency.
    /// On its way (even cancelled), it goes `resumed` and `true` is
    /// returned: the task waits for the transfer
    /// (`_transition_cancelled_waiting`, `:2143`). Not yet asked for, it is
    /// released (`_transition_fetch_released`, `:1918`), and the task is computed.
    pub fn resume(&mut self, key: &Key) -> bool {
        match self.deps.get_mut(key) {
            Some(dep) if dep.state == State::Fetch => {
                self.deps.remove(key);
                false
            }
            Some(dep) => {
                dep.state = State::Resumed;
                true
            }
            None => false,
        }
    }

    /// `key` is no longer wanted: released if not yet asked for,
    /// `cancelled` if on its way (`_transition_flight_released`, `:2253`;
    /// `_transition_resumed_released`, `:2106`).
    pub fn release(&mut self, key: &Key) {
        match self.deps.get_mut(key) {
            Some(dep) if dep.state == State::Fetch => {
                self.deps.remove(key);
            }
            Some(dep) => dep.state = State::Cancelled,
            None => {}
        }
    }

    fn throttled(&self) -> bool {
        (self.in_flight_workers.len() >= COUNT_LIMIT && self.incoming_bytes >= THROTTLE_BYTES)
            || self.incoming_bytes >= self.bytes_limit
    }

    /// Would `nbytes` more in a message of `message` bytes go past the
    /// limits? (`_task_exceeds_transfer_limits`, `:1676`: the first key of
    /// a worker with nothing in flight always goes.)
    fn exceeds(&self, nbytes: u64, message: u64) -> bool {
        if self.incoming_bytes == 0 && message == 0 {
            return false;
        }
        let mut allowance = self.bytes_limit.saturating_sub(self.incoming_bytes);
        if message != 0 {
            allowance = allowance.min(MESSAGE_BYTES_LIMIT).saturating_sub(message);
        }
        nbytes > allowance
    }

    /// `_ensure_communicating`: the `get_data`s to send now, a holder and
    /// its keys each, the keys now in `flight`. The caller asks only while
    /// the worker runs (a paused or retiring worker starts no transfer).
    pub fn select(&mut self) -> Vec<(String, Vec<Key>)> {
        let mut out = Vec::new();
        if self.data_needed.is_empty() || self.throttled() {
            return out;
        }
        let deps = &self.deps;
        let fetchable = |w: &str, k: &Key| {
            deps.get(k)
                .is_some_and(|d| d.state == State::Fetch && d.who_has.iter().any(|h| h == w))
        };
        self.data_needed.retain(|w, keys| {
            keys.retain(|k| fetchable(w, k));
            !keys.is_empty()
        });
        let mut candidates: Vec<_> = self
            .data_needed
            .iter()
            .filter(|(w, _)| {
                !self.in_flight_workers.contains_key(*w) && !self.busy.contains_key(*w)
            })
            .map(|(w, keys)| {
                let top = keys.iter().map(|k| deps[k].priority).min();
                let remote = host_of(w).as_deref() != Some(self.host.as_str());
                (
                    top,
                    remote,
                    Reverse(keys.len()),
                    fastrand::u64(..),
                    w.clone(),
                )
            })
            .collect();
        candidates.sort_unstable();
        for (.., worker) in candidates {
            let Some(mut keys) = self.data_needed.remove(&worker) else {
                continue;
            };
            // Some went to a holder picked before this one.
            let deps = &self.deps;
            let mut seen = HashSet::default();
            keys.retain(|k| {
                deps.get(k).is_some_and(|d| d.state == State::Fetch) && seen.insert(k.clone())
            });
            keys.sort_by_key(|k| deps[k].priority);
            let mut message = 0;
            let mut take = 0;
            for k in &keys {
                let n = deps[k].nbytes;
                if self.exceeds(n, message) {
                    break;
                }
                message += n;
                take += 1;
            }
            let rest = keys.split_off(take);
            if !rest.is_empty() {
                self.data_needed.insert(worker.clone(), rest);
            }
            if keys.is_empty() {
                // Not even one fits: nothing more goes now.
                break;
            }
            for k in &keys {
                if let Some(d) = self.deps.get_mut(k) {
                    d.state = State::Flight;
                }
            }
            self.incoming_bytes += message;
            self.in_flight_workers
                .insert(worker.clone(), (keys.clone(), message));
            out.push((worker, keys));
            if self.throttled() {
                break;
            }
        }
        out
    }

    /// The `get_data` to `worker` ended with `answer`, at `now`.
    pub fn done(&mut self, worker: &str, answer: Answer, now: Instant) -> Done {
        let mut done = Done::default();
        let Some((keys, bytes)) = self.in_flight_workers.remove(worker) else {
            return done;
        };
        self.incoming_bytes -= bytes;
        match answer {
            Answer::Data(got) => {
                let got: HashMap<Key, u64> = got.into_iter().collect();
                for key in keys {
                    match got.get(&key) {
                        // A cancelled one is dropped (`_transition_cancelled_released`).
                        Some(n) => match self.deps.remove(&key).map(|d| d.state) {
                            Some(State::Flight) => done.arrived.push((key, *n)),
                            Some(State::Resumed) => done.resumed.push((key, *n)),
                            _ => {}
                        },
                        // The holder did not have it: another is asked.
                        None => {
                            if let Some(d) = self.deps.get_mut(&key) {
                                d.who_has.retain(|w| w != worker);
                            }
                            self.refetch(key, &mut done);
                        }
                    }
                }
            }
            Answer::Busy => {
                self.busy.insert(worker.to_owned(), now + BUSY_PAUSE);
                for key in keys {
                    let all_busy = self
                        .deps
                        .get(&key)
                        .is_some_and(|d| d.who_has.iter().all(|w| self.busy.contains_key(w)));
                    let wanted = self.refetch(key.clone(), &mut done);
                    if wanted && all_busy {
                        done.refresh.push(key);
                    }
                }
            }
            Answer::Failed => {
                for key in keys {
                    self.refetch(key, &mut done);
                }
                self.holder_gone(worker, &mut done);
            }
        }
        done
    }

    /// A key back from `flight` to `fetch`, or `missing` without holders,
    /// or released if it was cancelled, or computed here if it was resumed.
    /// Whether it is still wanted.
    fn refetch(&mut self, key: Key, done: &mut Done) -> bool {
        let Some(dep) = self.deps.get_mut(&key) else {
            return false;
        };
        match dep.state {
            State::Cancelled => {
                self.deps.remove(&key);
                return false;
            }
            State::Resumed => {
                self.deps.remove(&key);
                done.compute.push(key);
                return false;
            }
            State::Fetch | State::Flight => {}
        }
        dep.state = State::Fetch;
        if dep.who_has.is_empty() {
            let dep = self.deps.remove(&key).expect("just read");
            done.missing.push((key, dep.priority, dep.nbytes));
            return false;
        }
        for h in &dep.who_has {
            need(&mut self.data_needed, h, &key);
        }
        true
    }

    /// `worker` is taken for gone (a network failure, `remove-worker`):
    /// dropped as a holder of every key, a key waiting for it alone is
    /// `missing` (`_handle_gather_dep_network_failure`,
    /// `_handle_remove_worker`).
    fn holder_gone(&mut self, worker: &str, done: &mut Done) {
        self.data_needed.remove(worker);
        let mut gone = Vec::new();
        for (key, dep) in &mut self.deps {
            dep.who_has.retain(|w| w != worker);
            if dep.who_has.is_empty() && dep.state == State::Fetch {
                gone.push(key.clone());
            }
        }
        for key in gone {
            let dep = self.deps.remove(&key).expect("just read");
            done.missing.push((key, dep.priority, dep.nbytes));
        }
    }

    /// `remove-worker` from the scheduler: the keys left without a holder.
    pub fn remove_worker(&mut self, worker: &str) -> Vec<(Key, Priority, u64)> {
        let mut done = Done::default();
        self.holder_gone(worker, &mut done);
        done.missing
    }

    /// When the next busy holder may be asked again.
    pub fn next_retry(&self) -> Option<Instant> {
        self.busy.values().min().copied()
    }

    /// The busy holders whose pause is over may be asked again
    /// (`_handle_retry_busy_worker`).
    pub fn retry_busy(&mut self, now: Instant) {
        self.busy.retain(|_, until| *until > now);
    }
}

/// `key` listed under holder `h` (`data_needed[h]`).
fn need(data_needed: &mut HashMap<String, Vec<Key>>, h: &str, key: &Key) {
    match data_needed.get_mut(h) {
        Some(keys) => keys.push(key.clone()),
        None => {
            data_needed.insert(h.to_owned(), vec![key.clone()]);
        }
    }
}

/// The host of an address (`get_address_host`), as the transport reads it.
fn host_of(address: &str) -> Option<String> {
    Address::parse(address).ok().map(|a| a.host().to_owned())
}

#[cfg(test)]
mod tests {
    use super::super::priority::{priority_of, replica};
    use super::*;
    use framewire::dask::Number;

    fn key(k: &str) -> Key {
        Key::from(k)
    }

    fn prio(p: i64) -> Priority {
        priority_of(&[Number::Int(p)], 0)
    }

    fn holders(ws: &[&str]) -> Vec<String> {
        ws.iter().map(|w| w.to_string()).collect()
    }

    /// One `get_data` in flight per holder: keys wanted from it meanwhile
    /// go together in the next one, once the first has answered.
    #[test]
    fn one_get_data_in_flight_per_holder() {
        let mut f = Fetches::new("tcp://127.0.0.1:1", None);
        f.want(key("a"), holders(&["tcp://127.0.0.1:2"]), 10, prio(0));
        assert_eq!(f.select(), [("tcp://127.0.0.1:2".into(), vec![key("a")])]);
        f.want(key("b"), holders(&["tcp://127.0.0.1:2"]), 10, prio(1));
        f.want(key("c"), holders(&["tcp://127.0.0.1:2"]), 10, prio(0));
        assert!(f.select().is_empty());
        let done = f.done(
            "tcp://127.0.0.1:2",
            Answer::Data(vec![(key("a"), 10)]),
            Instant::now(),
        );
        assert_eq!(done.arrived, [(key("a"), 10)]);
        // In priority order.
        assert_eq!(
            f.select(),
            [("tcp://127.0.0.1:2".into(), vec![key("c"), key("b")])]
        );
    }

    /// `compute-task` for a key wanted here: on its way, it is `resumed`
    /// and comes as the task's result, or, if it does not come, the task
    /// is computed; not yet asked for, it is released; resumed and then
    /// freed, it is dropped when it comes (`worker_state_machine.py`'s
    /// `_transition_cancelled_waiting`, `_transition_resumed_memory`,
    /// `_transition_resumed_fetch`, `_transition_fetch_released`,
    /// `_transition_resumed_released`).
    #[test]
    fn keys_sent_to_be_computed_while_on_their_way_resume() {
        let (h1, h2) = ("tcp://127.0.0.1:2", "tcp://127.0.0.1:3");
        let t = Instant::now();
        let mut f = Fetches::new("tcp://127.0.0.1:1", None);
        f.want(key("a"), holders(&[h1]), 10, prio(0));
        f.want(key("b"), holders(&[h2]), 10, prio(0));
        assert_eq!(f.select().len(), 2);
        f.want(key("c"), holders(&[h1]), 10, prio(0));
        assert!(f.resume(&key("a")));
        assert!(f.resume(&key("b")));
        assert!(!f.resume(&key("c")), "not yet asked for");
        assert!(!f.contains(&key("c")));
        assert!(!f.resume(&key("d")), "not wanted");
        let done = f.done(h1, Answer::Data(vec![(key("a"), 7)]), t);
        assert_eq!(done.resumed, [(key("a"), 7)]);
        assert!(done.arrived.is_empty());
        assert!(f.select().is_empty(), "c was released");
        let done = f.done(h2, Answer::Failed, t);
        assert_eq!(done.compute, [key("b")]);
        assert!(done.missing.is_empty() && !f.contains(&key("b")));
        f.want(key("e"), holders(&[h1]), 10, prio(0));
        assert_eq!(f.select(), [(h1.into(), vec![key("e")])]);
        assert!(f.resume(&key("e")));
        f.release(&key("e"));
        let done = f.done(h1, Answer::Data(vec![(key("e"), 7)]), t);
        assert!(done.resumed.is_empty() && done.arrived.is_empty());
    }

    /// A busy holder is passed over for another holder of the key, asked
    /// again after 0.15 s, and a key whose every holder is busy is asked of
    /// the scheduler again.
    #[test]
    fn busy_holders_wait_and_keys_they_alone_hold_are_refreshed() {
        let (h1, h2) = ("tcp://127.0.0.1:2", "tcp://127.0.0.1:3");
        let mut f = Fetches::new("tcp://127.0.0.1:1", None);
        f.want(key("a"), holders(&[h1]), 10, prio(0));
        assert_eq!(f.select(), [(h1.into(), vec![key("a")])]);
        let t = Instant::now();
        let done = f.done(h1, Answer::Busy, t);
        assert_eq!(done.refresh, [key("a")]);
        assert!(f.select().is_empty(), "busy");
        // The scheduler names another holder: asked at once.
        f.want(key("a"), holders(&[h1, h2]), 10, prio(0));
        assert_eq!(f.select(), [(h2.into(), vec![key("a")])]);
        f.done(h2, Answer::Busy, t);
        assert_eq!(f.next_retry(), Some(t + BUSY_PAUSE));
        f.retry_busy(t + BUSY_PAUSE);
        let mut asked = f.select();
        asked.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0].1, [key("a")]);
    }

    /// A holder without the key is dropped for it; a holder that fails is
    /// dropped for every key, and a key it alone held is missing.
    #[test]
    fn holders_without_the_key_or_failing_are_dropped() {
        let (h1, h2) = ("tcp://127.0.0.1:2", "tcp://127.0.0.1:3");
        let mut f = Fetches::new("tcp://127.0.0.1:1", None);
        f.want(key("a"), holders(&[h1]), 10, prio(0));
        f.want(key("b"), holders(&[h2]), 10, prio(1));
        f.want(key("c"), holders(&[h1, h2]), 10, prio(2));
        let mut asked = f.select();
        asked.sort_by(|a, b| a.0.cmp(&b.0));
        // h1 first (its most urgent key is the most urgent), with `c` too.
        assert_eq!(asked[0], (h1.into(), vec![key("a"), key("c")]));
        assert_eq!(asked[1], (h2.into(), vec![key("b")]));
        let t = Instant::now();
        let done = f.done(h1, Answer::Data(vec![]), t);
        assert!(done.arrived.is_empty());
        // `a` had no other holder.
        assert_eq!(
            done.missing.iter().map(|m| &m.0).collect::<Vec<_>>(),
            [&key("a")]
        );
        assert!(f.select().is_empty(), "h2 is asked already");
        let done = f.done(h2, Answer::Failed, t);
        // `b` (asked of h2) and `c` (waiting for h2): no holder left.
        let mut missing: Vec<String> = done.missing.iter().map(|m| format!("{:?}", m.0)).collect();
        missing.sort();
        assert_eq!(missing, [key("b"), key("c")].map(|k| format!("{k:?}")));
        assert!(!f.contains(&key("c")));
    }

    /// A key released before it is asked for is forgotten; on its way it is
    /// cancelled, dropped when it comes, unless wanted again first.
    #[test]
    fn released_keys_are_dropped_unless_wanted_again() {
        let h = "tcp://127.0.0.1:2";
        let mut f = Fetches::new("tcp://127.0.0.1:1", None);
        f.want(key("a"), holders(&[h]), 10, prio(0));
        f.release(&key("a"));
        assert!(f.select().is_empty());
        f.want(key("b"), holders(&[h]), 10, prio(0));
        f.want(key("c"), holders(&[h]), 10, prio(0));
        assert_eq!(f.select()[0].1.len(), 2);
        f.release(&key("b"));
        f.release(&key("c"));
        f.want(key("c"), holders(&[h]), 10, prio(0));
        let got = vec![(key("b"), 10), (key("c"), 10)];
        let done = f.done(h, Answer::Data(got), Instant::now());
        assert_eq!(done.arrived, [(key("c"), 10)]);
        assert!(!f.contains(&key("b")));
    }

    /// Past 10 MB in flight at most 50 transfers; past a tenth of the
    /// memory limit none; a message holds 50 MB beyond its first key.
    #[test]
    fn transfer_limits_as_dask() {
        let mut f = Fetches::new("tcp://127.0.0.1:1", Some(1_000_000_000));
        for i in 0..4 {
            f.want(
                key(&format!("k{i}")),
                holders(&["tcp://127.0.0.1:2"]),
                30_000_000,
                prio(i),
            );
        }
        // 100 MB allowed in flight, 50 MB a message: the first key alone
        // (a second would take the message past 50 MB).
        let asked = f.select();
        assert_eq!(asked[0].1, [key("k0")]);
        let mut f = Fetches::new("tcp://127.0.0.1:1", None);
        for i in 0..60 {
            let w = format!("tcp://127.0.0.1:{}", 100 + i);
            f.want(key(&format!("k{i}")), vec![w], 1_000_000, replica());
        }
        // 1 MB each: the count is limited once 10 MB are in flight, after
        // 50 transfers.
        assert_eq!(f.select().len(), 50);
        assert!(f.select().is_empty());
    }
}
