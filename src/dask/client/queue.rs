//! [`Queue`] (Dask's `distributed.Queue`) and the scheduler's events log
//! (`Client.log_event`, `Client.get_events`) on a [`Client`].

use std::time::Duration;

use super::primitives::{call_until, op_of, seconds};
use super::{Client, ClientError, VariableValue};
use crate::dask::{Key, RpcError};
use crate::typed;
use crate::value::Value;

/// A Dask `Queue`: a first-in first-out queue of keys and plain msgpack
/// values under a name, shared by every client of the scheduler
/// (`queue_create`, `queue_put`, `queue_get`, `queue_qsize`,
/// `queue_release`: the scheduler's `QueueExtension`). Made by
/// [`Client::queue`]; its items are [`VariableValue`]s.
///
/// A key put in the queue is held by the scheduler for it (client
/// `"queue-<name>"`) until a client gets it; that client then holds it
/// (`queue-future-release`, as Python's `Queue.get` sends) until it
/// [`release`](Client::release)s it.
///
/// ```no_run
/// # use std::time::Duration;
/// # use framewire::dask::{Key, VariableValue};
/// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let q = client.queue("jobs", 0).await?;
/// q.put(framewire::Value::from(1)).await?;
/// // Python: Queue("jobs").get() == 1
/// if let Some(VariableValue::Key { key, .. }) = q.get(Some(Duration::from_secs(5))).await? {
///     client.release(&[key])?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Queue {
    client: Client,
    name: String,
}

impl Client {
    /// The queue `name`, created in the scheduler when it is not there
    /// yet (`queue_create`; `maxsize` 0: unbounded), as Python's
    /// `Queue(name, maxsize=...)`.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let q = client.queue("jobs", 0).await?;
    /// # Ok(()) }
    /// ```
    pub async fn queue(&self, name: &str, maxsize: u64) -> Result<Queue, ClientError> {
        let _: Value = self
            .call(&op_of(
                "queue_create",
                vec![
                    ("name", Value::str(name)),
                    ("maxsize", Value::from(maxsize)),
                ],
            ))
            .await?;
        Ok(Queue {
            client: self.clone(),
            name: name.to_owned(),
        })
    }

    /// Logs `msg` (a msgpack value) under `topic` in the scheduler's
    /// events log (`log_event`), as Python's `Client.log_event`; clients
    /// subscribed to the topic get it.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.log_event("progress", framewire::Value::map_of([("done", 3.into())])).await?;
    /// # Ok(()) }
    /// ```
    pub async fn log_event(&self, topic: &str, msg: Value) -> Result<(), ClientError> {
        let _: Value = self
            .call(&op_of(
                "log_event",
                vec![("topic", Value::str(topic)), ("msg", msg)],
            ))
            .await?;
        Ok(())
    }

    /// The events logged under `topic` (`events`), oldest first: each its
    /// time (seconds since the epoch, the scheduler's clock) and message,
    /// as Python's `Client.get_events(topic)`.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// for (time, msg) in client.events("progress").await? {
    ///     println!("{time}: {msg:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn events(&self, topic: &str) -> Result<Vec<(f64, Value)>, ClientError> {
        let events: Vec<(f64, Value)> = self
            .call(&op_of("events", vec![("topic", Value::str(topic))]))
            .await?;
        Ok(events)
    }
}

impl Queue {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn put_fields(
        &self,
        item: (&'static str, Value),
        timeout: Option<Duration>,
    ) -> Result<(), ClientError> {
        let timeout = match timeout {
            Some(t) => Value::Float(t.as_secs_f64()),
            None => Value::Nil,
        };
        let _: Value = self
            .client
            .call(&op_of(
                "queue_put",
                vec![("name", Value::str(&self.name)), item, ("timeout", timeout)],
            ))
            .await?;
        Ok(())
    }

    /// Puts a plain msgpack value at the end of the queue.
    ///
    /// ```no_run
    /// # async fn f(q: framewire::dask::Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// q.put(framewire::Value::str("job-1")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn put(&self, value: Value) -> Result<(), ClientError> {
        self.put_fields(("data", value), None).await
    }

    /// Puts a key (Python: a `Future`) at the end of the queue: the
    /// scheduler holds it for the queue until a client gets it.
    ///
    /// ```no_run
    /// # use framewire::dask::Key;
    /// # async fn f(q: framewire::dask::Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// q.put_key(&Key::from("x")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn put_key(&self, key: &Key) -> Result<(), ClientError> {
        let key = typed::to_value(key).expect("a key is a value");
        self.put_fields(("key", key), None).await
    }

    /// The item at the head of the queue, taken off it, waiting for one at
    /// most `timeout` (`None` when it passed). A key is then held by this
    /// client (`queue-future-release`): let it go with
    /// [`Client::release`].
    ///
    /// ```no_run
    /// # async fn f(q: framewire::dask::Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// let item = q.get(None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn get(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<VariableValue>, ClientError> {
        let request = op_of(
            "queue_get",
            vec![
                ("name", Value::str(&self.name)),
                ("timeout", seconds(timeout)),
                ("batch", Value::Bool(false)),
            ],
        );
        let Some(record) = call_until(&self.client, &request, timeout).await? else {
            return Ok(None);
        };
        let value = record.get("value").cloned().unwrap_or(Value::Nil);
        if record.get("type").and_then(Value::as_str) != Some("Future") {
            return Ok(Some(VariableValue::Value(value)));
        }
        let key: Key = typed::from_value(value.clone()).map_err(RpcError::from)?;
        let state = record
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("lost")
            .to_owned();
        self.client
            .inner
            .shared
            .update(|s| s.hold(std::iter::once(&key)));
        self.client.inner.shared.send(&op_of(
            "queue-future-release",
            vec![("name", Value::str(&self.name)), ("key", value)],
        ))?;
        Ok(Some(VariableValue::Key { key, state }))
    }

    /// The number of items in the queue (`queue_qsize`).
    ///
    /// ```no_run
    /// # async fn f(q: framewire::dask::Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// let n = q.qsize().await?;
    /// # Ok(()) }
    /// ```
    pub async fn qsize(&self) -> Result<u64, ClientError> {
        Ok(self
            .client
            .call(&op_of(
                "queue_qsize",
                vec![("name", Value::str(&self.name))],
            ))
            .await?)
    }

    /// Lets go of the queue (`queue_release` on the stream, as Python's
    /// `Queue.close`): once every client that created it did, the
    /// scheduler drops it and lets go of the keys left in it.
    ///
    /// ```no_run
    /// # async fn f(q: framewire::dask::Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// q.close()?;
    /// # Ok(()) }
    /// ```
    pub fn close(&self) -> Result<(), ClientError> {
        self.client.inner.shared.send(&op_of(
            "queue_release",
            vec![("name", Value::str(&self.name))],
        ))?;
        Ok(())
    }
}
