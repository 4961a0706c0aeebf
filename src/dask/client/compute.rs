//! Computing: [`Client::submit`], [`Client::compute`], [`Client::map`],
//! [`Client::result`], [`Client::cancel`] — graphs of named Python calls
//! sent as `update-graph` in the form the scheduler's release reads.

use crate::dask::task::{call_token, graph_pickle, random_token, GraphForm};
use crate::dask::{Call, CancelKeys, Key, Keys, Map, Op, Timedelta, UpdateGraph};
use crate::pickle::{self, Py};
use crate::value::{Block, Header, Value};

use super::{Client, ClientError};

/// A `ToPickle` block of `py` (`{"__Pickled__": i}`).
fn to_pickle(py: &Py) -> Result<Block, ClientError> {
    let (p, _) = pickle::dumps_py(py).map_err(ClientError::Graph)?;
    let header = Value::map_of([("pickled-obj", Value::Bin(p))]);
    Ok(Block::new_pickled(Header::new(header), []))
}

impl Client {
    /// The scheduler's `distributed` release (`"2026.8.0"`), as its
    /// `versions` gave it when the client (last) registered.
    pub fn scheduler_release(&self) -> String {
        self.inner
            .shared
            .release
            .lock()
            .expect("not poisoned")
            .clone()
    }

    /// Computes `call` on the cluster under a key made as Dask makes a
    /// pure call's (`"<function name>-<32 hex digits>"`: the same call,
    /// the same key), as Python's `Client.submit`: one `update-graph` on
    /// the client's stream. The key is held as a scattered one is (see
    /// [`release`](Client::release)); get its value with
    /// [`result`](Client::result), or [`wait`](Client::wait) and
    /// [`gather`](Client::gather).
    ///
    /// Every function named must be importable on the scheduler (it
    /// unpickles the graph) and the workers (they call it).
    ///
    /// ```no_run
    /// use framewire::dask::{Call, Client, ClientOptions};
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::connect("tcp://127.0.0.1:8786", ClientOptions::default()).await?;
    /// let key = client.submit(Call::new("operator:add".parse()?).arg(1i64).arg(2i64))?;
    /// assert_eq!(client.result(&key).await?, 3i64.into());
    /// # Ok(())
    /// # }
    /// ```
    pub fn submit(&self, call: Call) -> Result<Key, ClientError> {
        let key = Key::from(format!(
            "{}-{}",
            call.function().name(),
            call_token(&call).map_err(ClientError::Graph)?
        ));
        self.submit_as(key.clone(), call)?;
        Ok(key)
    }

    /// [`submit`](Client::submit) under a key of the caller's.
    pub fn submit_as(&self, key: Key, call: Call) -> Result<(), ClientError> {
        self.compute([(key, call)]).map(|_| ())
    }

    /// Computes several tasks in one graph (one `update-graph`): a task's
    /// [`Arg::Key`](crate::dask::Arg::Key) of another task of the graph is
    /// a dependency the scheduler orders. Each key is held; their
    /// priorities follow the order given, as `Client.map`'s. Returns the
    /// keys, in that order.
    pub fn compute(
        &self,
        tasks: impl IntoIterator<Item = (Key, Call)>,
    ) -> Result<Vec<Key>, ClientError> {
        let tasks: Vec<(Key, Call)> = tasks.into_iter().collect();
        let keys: Vec<Key> = tasks.iter().map(|(k, _)| k.clone()).collect();
        if keys.is_empty() {
            return Ok(keys);
        }
        let release = self.scheduler_release();
        let form = GraphForm::of_release(&release)
            .ok_or_else(|| ClientError::UnsupportedRelease(release.clone()))?;
        let (graph, buffers) =
            graph_pickle(&tasks, form, &random_token()).map_err(ClientError::Graph)?;
        let writeable = Value::Array(buffers.iter().map(|&(_, w)| Value::Bool(w)).collect());
        let header = Value::map_of([
            ("serializer", Value::from_static(pickle::PickleFamily::NAME)),
            ("writeable", writeable),
        ]);
        let priority: Map<Key, i64> = keys.iter().cloned().zip(0..).collect();
        let mut msg = UpdateGraph {
            op: Op::new(),
            expr_ser: None,
            graph_header: None,
            graph_frames: None,
            keys: Keys::Set(keys.clone()),
            internal_priority: Some(priority),
            submitting_task: None,
            fifo_timeout: Timedelta::Text("100 ms".into()),
            actors: Value::Bool(false),
            code: to_pickle(&Py::Tuple(Vec::new()))?,
            annotations: to_pickle(&Py::Dict(Vec::new()))?,
            span_metadata: to_pickle(&Py::Dict(Vec::new()))?,
        };
        match form {
            GraphForm::Expr => {
                let frames = std::iter::once(graph).chain(buffers.into_iter().map(|(b, _)| b));
                let block = Block::new(Header::new(header), frames);
                msg.expr_ser = Some(block.into_value());
            }
            GraphForm::HighLevelGraph => {
                let frames = std::iter::once(graph)
                    .chain(buffers.into_iter().map(|(b, _)| b))
                    .map(Value::Bin)
                    .collect();
                msg.graph_header = Some(header);
                msg.graph_frames = Some(Value::Array(frames));
            }
        }
        // Held before the graph goes, as Python makes its futures first.
        self.inner.shared.update(|s| {
            s.hold(keys.iter());
            for k in &keys {
                // Submitted anew: what was reported of it before is moot;
                // the scheduler reports on it (`update-graph` makes this
                // client want it), unasked.
                s.cancelling.remove(k);
                s.keys.insert(k.clone(), super::KeyState::Pending);
            }
        });
        self.inner.shared.send(&msg)?;
        Ok(keys)
    }

    /// Calls `func` on each of `inputs` (its positional arguments), in one
    /// graph, as Python's `Client.map`: keys `"<function name>-<token>"`,
    /// priorities in the order of the inputs. Returns the keys in that
    /// order (equal calls share one key, as pure calls do in Dask).
    pub fn map<A, I>(
        &self,
        func: &crate::pickle::PyFunction,
        inputs: I,
    ) -> Result<Vec<Key>, ClientError>
    where
        I: IntoIterator<Item = A>,
        A: IntoIterator,
        A::Item: Into<crate::dask::Arg>,
    {
        let mut tasks = Vec::new();
        let mut order = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for args in inputs {
            let call = Call::new(func.clone()).args(args);
            let key = Key::from(format!(
                "{}-{}",
                func.name(),
                call_token(&call).map_err(ClientError::Graph)?
            ));
            order.push(key.clone());
            if seen.insert(key.clone()) {
                tasks.push((key, call));
            }
        }
        self.compute(tasks)?;
        Ok(order)
    }

    /// The value of `key` once it is in memory: [`wait`](Client::wait)
    /// then [`gather`](Client::gather), the wait's hold let go again (the
    /// key stays held as before). A task that raised is
    /// [`ClientError::Erred`] with its exception. A Python scalar (`int`,
    /// `float`, `bool`, `complex`, `None`, as the scheduler's report names
    /// its type) is fetched through the scheduler in one call, as Python's
    /// `Future.result()` fetches a value; any other value straight from
    /// its worker (`who_has`, then `get_data`).
    pub async fn result(&self, key: &Key) -> Result<Value, ClientError> {
        let keys = std::slice::from_ref(key);
        let waited = self.wait(keys).await;
        let value = match waited {
            Ok(()) => self.result_of(key).await,
            Err(e) => Err(e),
        };
        self.release(keys)?;
        let mut value = value?;
        Ok(value.swap_remove(key).unwrap_or(Value::Nil))
    }

    /// The value of `key`, in memory: a Python scalar (as the scheduler's
    /// report named its type) through the scheduler, in one call, as
    /// Python's `Future.result()`; any other (an array, a large value)
    /// straight from its worker, as [`gather`](Client::gather).
    async fn result_of(&self, key: &Key) -> Result<Map<Key, Value>, ClientError> {
        let scalar = matches!(
            self.inner
                .shared
                .state
                .lock()
                .expect("not poisoned")
                .keys
                .get(key),
            Some(super::KeyState::Memory { scalar: true })
        );
        if scalar {
            if let Some(v) = self.fetch_scalar(key).await? {
                return Ok(Map::from_iter([(key.clone(), v)]));
            }
        }
        self.gather(std::slice::from_ref(key)).await
    }

    /// Cancels `keys` (`cancel-keys`, as `Client.cancel`): the scheduler
    /// stops their tasks and reports them cancelled (`cancelled-keys`);
    /// `force` cancels them even if other clients want them. The client's
    /// holds of them are let go. (To 2024.12.1 – 2025.3.x schedulers
    /// without `reason` and `msg`, which 2024.12.1 does not take.)
    pub fn cancel(&self, keys: &[Key], force: bool) -> Result<(), ClientError> {
        let mut msg = CancelKeys::new(keys.iter().cloned());
        msg.force = force;
        self.inner.shared.update(|s| {
            for k in keys {
                s.held.remove(k);
                s.cancelling.insert(k.clone());
            }
        });
        // 2024.12.1's `stimulus_cancel(keys, client, force)` takes no
        // reason nor msg (an unknown argument would end the stream);
        // 2025.5.1's requires both.
        match GraphForm::of_release(&self.scheduler_release()) {
            Some(GraphForm::HighLevelGraph) => {
                let keys = crate::typed::to_value(&msg.keys).map_err(ClientError::Graph)?;
                self.inner.shared.send(&Value::map_of([
                    ("op", Value::from_static("cancel-keys")),
                    ("keys", keys),
                    ("force", Value::Bool(force)),
                ]))?;
            }
            _ => self.inner.shared.send(&msg)?,
        }
        Ok(())
    }
}
