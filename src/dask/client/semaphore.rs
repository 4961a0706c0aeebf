//! [`Semaphore`] and [`Lock`]: Dask's `distributed.Semaphore` and
//! `distributed.Lock` (a semaphore of one lease in 2026.8.0) on a
//! [`Client`], leases refreshed in the background as Python refreshes them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::primitives::{op_of, uid};
use super::{Client, ClientError};
use crate::value::Value;

/// The scheduler's lease timeout as Python's semaphores register it
/// (`distributed.scheduler.locks.lease-timeout`, default 30 s); they
/// refresh their leases every fifth of it (6 s), and the scheduler checks
/// them every `lease-validation-interval` (10 s).
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Shared {
    client: Client,
    name: String,
    max_leases: u32,
    lease_timeout: Option<Duration>,
    /// The leases this semaphore holds, oldest first (Python's `_leases`).
    leases: Mutex<VecDeque<String>>,
    registered: tokio::sync::OnceCell<()>,
    refresher: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.refresher.lock().expect("not poisoned").take() {
            task.abort();
        }
    }
}

/// A Dask `Semaphore`: at most `max_leases` leases of a name held at once,
/// across every client (and worker) of the scheduler (`semaphore_register`,
/// `semaphore_acquire`, `semaphore_release`, `semaphore_refresh_leases`:
/// the scheduler's `SemaphoreExtension`). Made by [`Client::semaphore`];
/// its clones share its leases.
///
/// While it holds leases, a background task refreshes them every fifth of
/// the lease timeout (6 s of the default 30 s), as Python's
/// `Semaphore._refresh_leases` does; a lease not refreshed within the
/// timeout (the client gone, say) is released by the scheduler. Dropping
/// the last clone stops the refreshing (the leases then lapse).
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let db = client.semaphore("database", 2);
/// if db.acquire(Some(Duration::from_secs(5))).await? {
///     // at most 2 holders (Python's Semaphore(2, name="database") too)
///     db.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    shared: Arc<Shared>,
}

impl Client {
    /// The semaphore `name` of `max_leases` leases (Python's
    /// `Semaphore(max_leases, name=name)`), registered with the scheduler
    /// on its first acquire, with a lease timeout of
    /// [`DEFAULT_LEASE_TIMEOUT`]. All its users must agree on
    /// `max_leases` (the scheduler refuses another).
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let s = client.semaphore("slots", 4);
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str, max_leases: u32) -> Semaphore {
        self.semaphore_with(name, max_leases, Some(DEFAULT_LEASE_TIMEOUT))
    }

    /// [`semaphore`](Client::semaphore) with a lease timeout of its own
    /// (`None`: leases never lapse, Python's `lease-timeout: inf`). The
    /// scheduler keeps the timeout of the semaphore's first registration.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let s = client.semaphore_with("slots", 4, Some(Duration::from_secs(5)));
    /// # Ok(()) }
    /// ```
    pub fn semaphore_with(
        &self,
        name: &str,
        max_leases: u32,
        lease_timeout: Option<Duration>,
    ) -> Semaphore {
        Semaphore {
            shared: Arc::new(Shared {
                client: self.clone(),
                name: name.to_owned(),
                max_leases,
                lease_timeout,
                leases: Mutex::new(VecDeque::new()),
                registered: tokio::sync::OnceCell::new(),
                refresher: Mutex::new(None),
            }),
        }
    }

    /// The lock `name` (Python's `Lock(name)`: a semaphore of one lease).
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let lock = client.lock("resource");
    /// lock.acquire(None).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: &str) -> Lock {
        Lock {
            semaphore: self.semaphore(name, 1),
        }
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many leases of it this value (and its clones) holds.
    pub fn held(&self) -> usize {
        self.shared.leases.lock().expect("not poisoned").len()
    }

    async fn register(&self) -> Result<(), ClientError> {
        let s = &self.shared;
        s.registered
            .get_or_try_init(|| async {
                let lease_timeout = match s.lease_timeout {
                    Some(t) => Value::Float(t.as_secs_f64()),
                    None => Value::Nil,
                };
                let _: Value = s
                    .client
                    .call(&op_of(
                        "semaphore_register",
                        vec![
                            ("name", Value::str(&s.name)),
                            ("max_leases", Value::from(i64::from(s.max_leases))),
                            ("lease_timeout", lease_timeout),
                        ],
                    ))
                    .await?;
                Ok::<(), ClientError>(())
            })
            .await?;
        Ok(())
    }

    /// Acquires a lease (registering the semaphore first), waiting at
    /// most `timeout` for one (`None`: as long as it takes; zero: not at
    /// all): whether it got one.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let got = client.semaphore("slots", 4).acquire(Some(Duration::ZERO)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, timeout: Option<Duration>) -> Result<bool, ClientError> {
        self.register().await?;
        let s = &self.shared;
        let lease_id = uid();
        let timeout = match timeout {
            Some(t) => Value::Float(t.as_secs_f64()),
            None => Value::Nil,
        };
        let got: bool = s
            .client
            .call(&op_of(
                "semaphore_acquire",
                vec![
                    ("name", Value::str(&s.name)),
                    ("timeout", timeout),
                    ("lease_id", Value::str(&lease_id)),
                ],
            ))
            .await?;
        if got {
            s.leases.lock().expect("not poisoned").push_back(lease_id);
            self.refresh_in_background();
        }
        Ok(got)
    }

    /// Starts the refreshing task, once.
    fn refresh_in_background(&self) {
        let Some(timeout) = self.shared.lease_timeout else {
            return;
        };
        let mut task = self.shared.refresher.lock().expect("not poisoned");
        if task.is_some() {
            return;
        }
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        let every = (timeout / 5).max(Duration::from_millis(10));
        *task = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(s) = weak.upgrade() else { return };
                let ids: Vec<Value> = s
                    .leases
                    .lock()
                    .expect("not poisoned")
                    .iter()
                    .map(|id| Value::str(id))
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                // A failed refresh is tried again at the next tick (Python
                // retries and then logs).
                let _: Result<Value, _> = s
                    .client
                    .call(&op_of(
                        "semaphore_refresh_leases",
                        vec![
                            ("name", Value::str(&s.name)),
                            ("lease_ids", Value::Array(ids)),
                        ],
                    ))
                    .await;
            }
        }));
    }

    /// Releases the oldest lease held (Python's `release`): whether one was
    /// held (Python raises `RuntimeError("Released too often")` when none
    /// is).
    ///
    /// ```no_run
    /// # async fn f(s: framewire::dask::Semaphore) -> Result<(), Box<dyn std::error::Error>> {
    /// s.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self) -> Result<bool, ClientError> {
        let s = &self.shared;
        let Some(lease_id) = s.leases.lock().expect("not poisoned").pop_front() else {
            return Ok(false);
        };
        let _: Value = s
            .client
            .call(&op_of(
                "semaphore_release",
                vec![
                    ("name", Value::str(&s.name)),
                    ("lease_id", Value::str(&lease_id)),
                ],
            ))
            .await?;
        Ok(true)
    }

    /// The number of leases held now, by anyone (`semaphore_value`).
    ///
    /// ```no_run
    /// # async fn f(s: framewire::dask::Semaphore) -> Result<(), Box<dyn std::error::Error>> {
    /// let taken = s.value().await?;
    /// # Ok(()) }
    /// ```
    pub async fn value(&self) -> Result<u64, ClientError> {
        let s = &self.shared;
        Ok(s.client
            .call(&op_of(
                "semaphore_value",
                vec![("name", Value::str(&s.name))],
            ))
            .await?)
    }
}

/// A Dask `Lock`: in 2026.8.0 a [`Semaphore`] of one lease under the
/// lock's name, so a Rust `Lock` and a Python `Lock` of one name exclude
/// each other. Made by [`Client::lock`].
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let lock = client.lock("x");
/// if lock.acquire(Some(Duration::from_secs(1))).await? {
///     // Python's Lock("x").acquire(timeout=1) is False meanwhile
///     lock.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    semaphore: Semaphore,
}

impl Lock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Acquires the lock, waiting at most `timeout` (`None`: as long as it
    /// takes; zero: Python's `blocking=False`): whether it got it.
    ///
    /// ```no_run
    /// # async fn f(lock: framewire::dask::Lock) -> Result<(), Box<dyn std::error::Error>> {
    /// lock.acquire(None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, timeout: Option<Duration>) -> Result<bool, ClientError> {
        self.semaphore.acquire(timeout).await
    }

    /// Releases the lock: whether this value held it.
    ///
    /// ```no_run
    /// # async fn f(lock: framewire::dask::Lock) -> Result<(), Box<dyn std::error::Error>> {
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self) -> Result<bool, ClientError> {
        self.semaphore.release().await
    }

    /// Whether anyone holds the lock (Python's `locked`).
    ///
    /// ```no_run
    /// # async fn f(lock: framewire::dask::Lock) -> Result<(), Box<dyn std::error::Error>> {
    /// let taken = lock.locked().await?;
    /// # Ok(()) }
    /// ```
    pub async fn locked(&self) -> Result<bool, ClientError> {
        Ok(self.semaphore.value().await? == 1)
    }
}
