//! Dask's coordination primitives on a [`Client`]: published datasets,
//! [`Variable`]s and [`SharedEvent`]s (Python's `Event`), each speaking the
//! scheduler extension Python's object of the same name talks to
//! (`distributed.publish`, `.variable`, `.event` of 2026.8.0; the datasets
//! of 2026.3.0 and before too). Locks and semaphores are in `semaphore.rs`,
//! queues and the events log in `queue.rs`.

use std::time::Duration;

use bytes::Bytes;

use super::{Client, ClientError};
use crate::dask::runtime::server_id;
use crate::dask::{Key, RpcError};
use crate::typed;
use crate::value::{Block, Header, Value};

/// A fresh `uuid4().hex`-shaped id (32 hex digits).
pub(super) fn uid() -> String {
    let id = server_id("u");
    id[2..].to_owned()
}

/// Seconds, as Dask reads a timeout (nil: none).
pub(super) fn seconds(t: Option<Duration>) -> Value {
    match t {
        Some(t) => Value::Float(t.as_secs_f64()),
        None => Value::Nil,
    }
}

/// A key as a value of a message.
fn key_value(key: &Key) -> Value {
    typed::to_value(key).expect("a key is a value")
}

/// `{"op": op, fields...}`.
/// A call whose wait the scheduler bounds by `timeout` (`variable_get`,
/// `queue_get`): its reply, or `None` when that wait ran out (the
/// scheduler's error reply names a `TimeoutError`).
pub(super) async fn call_until(
    client: &Client,
    request: &Value,
    timeout: Option<Duration>,
) -> Result<Option<Value>, ClientError> {
    match client.call(request).await {
        Ok(r) => Ok(Some(r)),
        Err(e)
            if timeout.is_some()
                && e.remote()
                    .is_some_and(|r| r.exception_text.contains("Timeout")) =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) fn op_of(op: &'static str, fields: Vec<(&'static str, Value)>) -> Value {
    let mut entries = vec![(Value::from_static("op"), Value::from_static(op))];
    entries.extend(fields.into_iter().map(|(k, v)| (Value::from_static(k), v)));
    Value::Map(entries)
}

// ---- datasets -----------------------------------------------------------------

/// A dataset as [`Client::get_dataset`] gives it: the keys of the futures
/// it holds (now held by this client too, as Python's `get_dataset` binds
/// them), and its data as published (a pickle block, as the scheduler keeps
/// it: a Python `Future`, a list of them, or any object a Python client
/// published).
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// The keys the dataset holds (the futures in it).
    pub keys: Vec<Key>,
    /// The published object, as the scheduler keeps it (a serialized block).
    pub data: Value,
}

/// The wire form of the datasets: `publish_put {names, keys, data, ...}`
/// from 2026.6.0 on, one `publish_put {name, keys, data}` per dataset up to
/// 2026.3.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DatasetForm {
    Batched,
    Single,
}

/// `(year, month, patch)` of a `distributed` release (`"2026.8.0"`,
/// `"2026.3.0+12.gabc"`).
fn release_of(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version
        .split(['.', '+', '-', 'r', 'a', 'b'])
        .map(str::parse);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(y)), Some(Ok(m)), Some(Ok(p))) => Some((y, m, p)),
        (Some(Ok(y)), Some(Ok(m)), _) => Some((y, m, 0)),
        _ => None,
    }
}

/// The pickle of `distributed.client.Future(key)` (what `Future.__reduce__`
/// gives, `(Future, (key,))`), or a list of them: what Python's
/// `publish_dataset` sends of a future, read back by `get_dataset`.
fn futures_pickle(keys: &[Key]) -> Vec<u8> {
    fn key(out: &mut Vec<u8>, k: &Key) {
        match k {
            Key::Str(s) => {
                out.push(b'X'); // BINUNICODE
                out.extend((s.len() as u32).to_le_bytes());
                out.extend(s.as_bytes());
            }
            Key::Int(i) => {
                out.push(b'I'); // INT, decimal
                out.extend(i.to_string().as_bytes());
                out.push(b'\n');
            }
            Key::Float(f) => {
                out.push(b'G'); // BINFLOAT, big-endian
                out.extend(f.to_be_bytes());
            }
            Key::Bytes(b) => {
                out.push(b'B'); // BINBYTES
                out.extend((b.len() as u32).to_le_bytes());
                out.extend(b.iter());
            }
            Key::Tuple(items) => {
                out.push(b'('); // MARK
                for item in items {
                    key(out, item);
                }
                out.push(b't'); // TUPLE
            }
        }
    }
    fn future(out: &mut Vec<u8>, k: &Key) {
        out.extend(b"cdistributed.client\nFuture\n"); // GLOBAL
        key(out, k);
        out.push(0x85); // TUPLE1
        out.push(b'R'); // REDUCE
    }
    let mut out = vec![0x80, 4]; // PROTO 4
    match keys {
        [one] => future(&mut out, one),
        many => {
            out.push(b']'); // EMPTY_LIST
            out.push(b'('); // MARK
            for k in many {
                future(&mut out, k);
            }
            out.push(b'e'); // APPENDS
        }
    }
    out.push(b'.'); // STOP
    out
}

/// A block of Dask's `pickle` family holding `pickle`.
fn pickle_block(pickle: Vec<u8>) -> Value {
    let header = Value::map_of([
        ("serializer", Value::from_static("pickle")),
        ("writeable", Value::Array(Vec::new())),
    ]);
    Block::new(Header::new(header), [Bytes::from(pickle)]).into_value()
}

impl Client {
    /// Which wire form of the datasets the scheduler speaks: asked of it
    /// (`versions`: its `distributed` release; 2026.6.0 changed the form).
    async fn dataset_form(&self) -> Result<DatasetForm, ClientError> {
        let versions: Value = self
            .call(&Value::map_of([("op", Value::from_static("versions"))]))
            .await?;
        let release = versions
            .get("packages")
            .and_then(|p| p.get("distributed"))
            .and_then(Value::as_str)
            .and_then(release_of);
        Ok(match release {
            Some(r) if r < (2026, 6, 0) => DatasetForm::Single,
            _ => DatasetForm::Batched,
        })
    }

    /// Publishes `keys` under `name`, as Python's
    /// `client.publish_dataset(future, name=name)` does (a list of futures
    /// for several keys): the scheduler keeps the keys for the dataset
    /// (client `"published-<name>"`) until it is unpublished, and a Python
    /// client's `get_dataset(name)` gives a `Future` (or a list of them).
    /// The keys should be in the scheduler (held by this client, e.g.
    /// scattered). With `replace`, an existing dataset of that name is
    /// replaced (Python's `override=True`); without it, publishing a name
    /// that exists is the scheduler's error (`KeyError`).
    ///
    /// Both wire forms: `publish_flush_batched_send` on the stream, then
    /// `publish_put {names, keys, data, override, client, uid}` (2026.6.0
    /// on), or `publish_wait_flush {uid}` and `publish_put {keys, name,
    /// data, override, client}` (up to 2026.3), chosen by the scheduler's
    /// release.
    ///
    /// ```no_run
    /// # use framewire::dask::{Client, ClientOptions, Key};
    /// # use framewire::Value;
    /// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.scatter([(Key::from("x"), Value::from(42))]).await?;
    /// client.publish_dataset("answer", &[Key::from("x")], false).await?;
    /// // Python: c.get_dataset("answer").result() == 42
    /// # Ok(()) }
    /// ```
    pub async fn publish_dataset(
        &self,
        name: impl Into<Key>,
        keys: &[Key],
        replace: bool,
    ) -> Result<(), ClientError> {
        let name = key_value(&name.into());
        let form = self.dataset_form().await?;
        let keys_value = Value::Array(keys.iter().map(key_value).collect());
        let data = pickle_block(futures_pickle(keys));
        let uid = uid();
        self.inner.shared.send(&op_of(
            "publish_flush_batched_send",
            vec![("uid", Value::str(&uid))],
        ))?;
        match form {
            DatasetForm::Batched => {
                let () = self
                    .call(&op_of(
                        "publish_put",
                        vec![
                            ("names", Value::Array(vec![name])),
                            ("keys", Value::Array(vec![keys_value])),
                            ("data", Value::Array(vec![data])),
                            ("override", Value::Bool(replace)),
                            ("client", Value::str(self.id())),
                            ("uid", Value::str(&uid)),
                        ],
                    ))
                    .await?;
            }
            DatasetForm::Single => {
                let _: Value = self
                    .call(&op_of(
                        "publish_wait_flush",
                        vec![("uid", Value::str(&uid))],
                    ))
                    .await?;
                let _: Value = self
                    .call(&op_of(
                        "publish_put",
                        vec![
                            ("keys", keys_value),
                            ("name", name),
                            ("data", data),
                            ("override", Value::Bool(replace)),
                            ("client", Value::str(self.id())),
                        ],
                    ))
                    .await?;
            }
        }
        Ok(())
    }

    /// The dataset published under `name` (by this client or any other,
    /// Python's too), `None` when there is none; as Python's `get_dataset`,
    /// this client then holds its keys (`client-desires-keys`): gather
    /// them, and [`release`](Client::release) them when done.
    ///
    /// ```no_run
    /// # use framewire::dask::Client;
    /// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// // Python: c.publish_dataset(c.scatter(41), name="from-python")
    /// if let Some(ds) = client.get_dataset("from-python").await? {
    ///     let values = client.gather(&ds.keys).await?;
    ///     client.release(&ds.keys)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_dataset(&self, name: impl Into<Key>) -> Result<Option<Dataset>, ClientError> {
        let name = key_value(&name.into());
        let found: Value = match self.dataset_form().await? {
            DatasetForm::Batched => {
                let reply: Vec<Value> = self
                    .call(&op_of(
                        "publish_get",
                        vec![("names", Value::Array(vec![name]))],
                    ))
                    .await?;
                reply.into_iter().next().unwrap_or(Value::Nil)
            }
            DatasetForm::Single => {
                self.call(&op_of(
                    "publish_get",
                    vec![("name", name), ("client", Value::str(self.id()))],
                ))
                .await?
            }
        };
        if matches!(found, Value::Nil) {
            return Ok(None);
        }
        let keys: Vec<Key> = match found.get("keys") {
            Some(k) => typed::from_value(k.clone()).map_err(RpcError::from)?,
            None => Vec::new(),
        };
        let data = found.get("data").cloned().unwrap_or(Value::Nil);
        if !keys.is_empty() {
            self.desire(&keys)?;
        }
        Ok(Some(Dataset { keys, data }))
    }

    /// The names of the published datasets (`publish_list`), sorted as
    /// Python's `list_datasets` gives them.
    ///
    /// ```no_run
    /// # use framewire::dask::Client;
    /// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// for name in client.list_datasets().await? {
    ///     println!("{name}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_datasets(&self) -> Result<Vec<Key>, ClientError> {
        Ok(self.call(&op_of("publish_list", vec![])).await?)
    }

    /// Unpublishes the dataset `name` (none is fine), as Python's
    /// `unpublish_dataset`: the scheduler lets go of its keys (client
    /// `"published-<name>"`); they stay while another client holds them.
    ///
    /// ```no_run
    /// # use framewire::dask::Client;
    /// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.unpublish_dataset("answer").await?;
    /// # Ok(()) }
    /// ```
    pub async fn unpublish_dataset(&self, name: impl Into<Key>) -> Result<(), ClientError> {
        let name = key_value(&name.into());
        match self.dataset_form().await? {
            DatasetForm::Batched => {
                let uid = uid();
                self.inner.shared.send(&op_of(
                    "publish_flush_batched_send",
                    vec![("uid", Value::str(&uid))],
                ))?;
                let () = self
                    .call(&op_of(
                        "publish_delete",
                        vec![
                            ("names", Value::Array(vec![name])),
                            ("client", Value::str(self.id())),
                            ("uid", Value::str(&uid)),
                        ],
                    ))
                    .await?;
            }
            DatasetForm::Single => {
                let _: Value = self
                    .call(&op_of("publish_delete", vec![("name", name)]))
                    .await?;
            }
        }
        Ok(())
    }

    /// The [`Variable`] `name` (Python's `Variable(name)`), shared with
    /// every client of the scheduler.
    ///
    /// ```no_run
    /// # use framewire::dask::Client;
    /// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let x = client.variable("x");
    /// x.set(framewire::Value::from(123)).await?;
    /// # Ok(()) }
    /// ```
    pub fn variable(&self, name: &str) -> Variable {
        Variable {
            client: self.clone(),
            name: name.to_owned(),
        }
    }

    /// The [`SharedEvent`] `name` (Python's `Event(name)`), shared with every
    /// client of the scheduler.
    ///
    /// ```no_run
    /// # use framewire::dask::Client;
    /// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.event("go").set().await?;
    /// # Ok(()) }
    /// ```
    pub fn event(&self, name: &str) -> SharedEvent {
        SharedEvent {
            client: self.clone(),
            name: name.to_owned(),
        }
    }
}

// ---- Variable -------------------------------------------------------------------

/// What a [`Variable`] holds.
#[derive(Clone, Debug, PartialEq)]
pub enum VariableValue {
    /// A key (Python: a `Future`), and its state in the scheduler when read
    /// (`"memory"`, `"processing"`, `"erred"`, `"lost"`...).
    Key {
        /// The key.
        key: Key,
        /// Its state when the variable was read.
        state: String,
    },
    /// A plain msgpack value.
    Value(Value),
}

/// A Dask `Variable`: one value or key, under a name, shared by every
/// client of the scheduler (`variable_set`, `variable_get`,
/// `variable_delete`: the scheduler's `VariableExtension`). Made by
/// [`Client::variable`]; cheap to clone.
///
/// A key set in a variable is held by the scheduler for it (client
/// `"variable-<name>"`) until the variable is set again or deleted; a
/// client that reads it holds it too, from the confirmation
/// [`get`](Variable::get) sends (as Python's `Variable.get`).
///
/// ```no_run
/// # use framewire::dask::{Client, Key};
/// # use framewire::dask::VariableValue;
/// # async fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
/// let v = client.variable("shared");
/// // Python: Variable("shared").set(c.scatter(5))
/// if let Some(VariableValue::Key { key, .. }) = v.get(None).await? {
///     client.wait(std::slice::from_ref(&key)).await?;
///     let values = client.gather(std::slice::from_ref(&key)).await?;
///     client.release(&[key])?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Variable {
    client: Client,
    name: String,
}

/// How long `variable_set` of a key waits for the scheduler to know it
/// (Python's default `timeout="30 s"`).
const VARIABLE_SET_TIMEOUT: Duration = Duration::from_secs(30);

impl Variable {
    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the variable to a plain msgpack value (ints, floats, strs,
    /// bytes, lists, maps), as Python's `Variable.set(123)`.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.variable("x").set(framewire::Value::str("hello")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set(&self, value: Value) -> Result<(), ClientError> {
        let () = self
            .client
            .call(&op_of(
                "variable_set",
                vec![
                    ("name", Value::str(&self.name)),
                    ("data", value),
                    ("timeout", seconds(Some(VARIABLE_SET_TIMEOUT))),
                ],
            ))
            .await?;
        Ok(())
    }

    /// Sets the variable to a key (Python: `Variable.set(future)`): the
    /// scheduler holds it for the variable from then on (it waits up to
    /// 30 s for a key it does not know yet, then errs).
    ///
    /// ```no_run
    /// # use framewire::dask::Key;
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.scatter([(Key::from("x"), framewire::Value::from(1))]).await?;
    /// client.variable("v").set_key(&Key::from("x")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_key(&self, key: &Key) -> Result<(), ClientError> {
        let () = self
            .client
            .call(&op_of(
                "variable_set",
                vec![
                    ("name", Value::str(&self.name)),
                    ("key", key_value(key)),
                    ("timeout", seconds(Some(VARIABLE_SET_TIMEOUT))),
                ],
            ))
            .await?;
        Ok(())
    }

    /// The variable's value, waiting for it to be set (at most `timeout`:
    /// `None` when it passed). A key is then held by this client
    /// (`variable-future-received-confirm` on the stream, as Python sends
    /// it: without it the scheduler would keep the key pinned for the
    /// variable even after it is set again or deleted); let it go with
    /// [`Client::release`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let value = client.variable("x").get(Some(Duration::from_secs(5))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn get(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<VariableValue>, ClientError> {
        let request = op_of(
            "variable_get",
            vec![
                ("name", Value::str(&self.name)),
                ("client", Value::str(self.client.id())),
                ("timeout", seconds(timeout)),
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
        let token = record.get("token").cloned().unwrap_or(Value::Nil);
        let state = record
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("lost")
            .to_owned();
        // The scheduler holds the key for this client on the confirmation:
        // one more hold here, which `release` lets go.
        self.client
            .inner
            .shared
            .update(|s| s.hold(std::iter::once(&key)));
        self.client.inner.shared.send(&op_of(
            "variable-future-received-confirm",
            vec![
                ("name", Value::str(&self.name)),
                ("key", value),
                ("token", token),
            ],
        ))?;
        Ok(Some(VariableValue::Key { key, state }))
    }

    /// Deletes the variable (`variable_delete` on the stream, as Python's
    /// `Variable.delete`): the scheduler lets go of its key, once every
    /// client that read it confirmed.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.variable("x").delete()?;
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<(), ClientError> {
        self.client.inner.shared.send(&op_of(
            "variable_delete",
            vec![("name", Value::str(&self.name))],
        ))?;
        Ok(())
    }
}

// ---- Event ----------------------------------------------------------------------

/// A Dask `Event` (`distributed.Event`; named apart from
/// [`Event`](crate::dask::Event), the events log's `event` message): a flag
/// under a name, shared by every client of the
/// scheduler, that clients wait on (`event_set`, `event_clear`,
/// `event_is_set`, `event_wait`: the scheduler's `EventExtension`). Made by
/// [`Client::event`]; cheap to clone.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let go = client.event("go");
/// if go.wait(Some(Duration::from_secs(10))).await? {
///     println!("set (by Python's Event(\"go\").set(), say)");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SharedEvent {
    client: Client,
    name: String,
}

impl SharedEvent {
    /// The event's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn call<R: serde::de::DeserializeOwned>(
        &self,
        op: &'static str,
        mut fields: Vec<(&'static str, Value)>,
    ) -> Result<R, ClientError> {
        fields.insert(0, ("name", Value::str(&self.name)));
        Ok(self.client.call(&op_of(op, fields)).await?)
    }

    /// Sets the flag: every waiter, now and later until
    /// [`clear`](SharedEvent::clear), is woken.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.event("go").set().await?;
    /// # Ok(()) }
    /// ```
    pub async fn set(&self) -> Result<(), ClientError> {
        self.call::<Value>("event_set", vec![]).await.map(drop)
    }

    /// Clears the flag: waiters wait again.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.event("go").clear().await?;
    /// # Ok(()) }
    /// ```
    pub async fn clear(&self) -> Result<(), ClientError> {
        self.call::<Value>("event_clear", vec![]).await.map(drop)
    }

    /// Whether the flag is set.
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let set = client.event("go").is_set().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_set(&self) -> Result<bool, ClientError> {
        self.call("event_is_set", vec![]).await
    }

    /// Waits until the flag is set, at most `timeout` (`None`: as long as
    /// it takes, holding a pooled connection meanwhile): whether it was.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let woke = client.event("go").wait(Some(Duration::from_secs(1))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<bool, ClientError> {
        self.call("event_wait", vec![("timeout", seconds(timeout))])
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_read() {
        assert_eq!(release_of("2026.8.0"), Some((2026, 8, 0)));
        assert_eq!(release_of("2026.3.0+12.gabc"), Some((2026, 3, 0)));
        assert_eq!(release_of("2025.12"), Some((2025, 12, 0)));
        assert_eq!(release_of("dev"), None);
        assert!(release_of("2026.3.0").unwrap() < (2026, 6, 0));
    }

    #[test]
    fn a_future_pickle() {
        let p = futures_pickle(&[Key::from("x")]);
        assert_eq!(
            p,
            b"\x80\x04cdistributed.client\nFuture\nX\x01\x00\x00\x00x\x85R.".to_vec()
        );
        let p = futures_pickle(&[Key::from("a"), Key::from(("b", 1))]);
        assert!(p.starts_with(b"\x80\x04]("));
        assert!(p.ends_with(b"e."));
        let tuple: &[u8] = b"(X\x01\x00\x00\x00bI1\nt\x85R";
        assert!(p.windows(tuple.len()).any(|w| w == tuple));
    }
}
