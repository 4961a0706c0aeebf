//! Fetching values ([`Client::gather`]) and, when some cannot be had, why
//! each failed ([`GatherError`]).

use std::sync::Arc;
use std::time::Duration;

use super::{key_error, Client, ClientError, GatherError, KeyFailure, KeyState};
use crate::dask::{gather_from_pool, ConnectionPool, GatherKeys, GatherKeysReply, Key, Map, Op};
use crate::value::Value;

/// How long [`Client::gather`] waits for the scheduler to report the
/// exception of an erred key this client did not follow.
const ERRED_REPORT_WAIT: Duration = Duration::from_secs(5);

impl Client {
    /// The values of `keys`, fetched as `Client.gather(direct=True)` does:
    /// where they are from the scheduler (`who_has`), then straight from
    /// the workers that hold them (`get_data`), and what they could not
    /// give through the scheduler (`gather`).
    pub(super) async fn fetch(
        &self,
        keys: &[Key],
        pool: &Arc<ConnectionPool>,
    ) -> Result<Map<Key, Value>, ClientError> {
        let who_has = self.who_has(keys).await?;
        let got = gather_from_pool(&who_has, None, pool).await;
        let mut data = got.data;
        let missing: Vec<Key> = keys
            .iter()
            .filter(|k| !data.contains_key(*k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            // Through the scheduler (Dask's `retry_operation(
            // self.scheduler.gather, ...)`), on a pooled connection that
            // reads values as the workers' do.
            let request = GatherKeys {
                op: Op::new(),
                keys: missing,
                reply: None,
            };
            let reply: GatherKeysReply = pool.call(&self.inner.scheduler, &request).await?;
            data.extend(reply.data.unwrap_or_default());
        }
        // In the order asked.
        let mut out = Map::default();
        let mut failed = Vec::new();
        for k in keys {
            match data.swap_remove(k) {
                Some(v) => {
                    out.insert(k.clone(), v);
                }
                None => failed.push(k.clone()),
            }
        }
        if failed.is_empty() {
            return Ok(out);
        }
        let reasons = self.why_not_gathered(&failed).await?;
        Err(ClientError::Missing(Box::new(GatherError::new(
            failed.into_iter().zip(reasons).collect(),
        ))))
    }

    /// The value of `key`, in memory, a Python scalar (see
    /// [`scalar_type`]): through the scheduler (`gather`, one call: the
    /// scheduler fetches it from its worker), as Python's `Future.result()`
    /// fetches every value; `None` when the scheduler could not give it.
    pub(super) async fn fetch_scalar(&self, key: &Key) -> Result<Option<Value>, ClientError> {
        let request = GatherKeys {
            op: Op::new(),
            keys: vec![key.clone()],
            reply: None,
        };
        let reply: GatherKeysReply = self
            .inner
            .pool
            .call(&self.inner.scheduler, &request)
            .await?;
        Ok(reply.data.and_then(|mut d| d.swap_remove(key)))
    }

    /// Why each of `keys` could not be gathered: what the scheduler
    /// reported of it on the stream (erred with its exception, cancelled,
    /// lost, unknown), else its state in the scheduler
    /// (`get_task_status`). The exception of an erred key this client was
    /// not told of is asked for as Dask's client learns it: the key held
    /// for a moment (`client-desires-keys`, which the scheduler answers
    /// with its `task-erred`), then let go.
    async fn why_not_gathered(&self, keys: &[Key]) -> Result<Vec<KeyFailure>, ClientError> {
        let mut reasons: Vec<Option<KeyFailure>> = {
            let state = self.inner.shared.state.lock().expect("not poisoned");
            keys.iter()
                .map(|k| failure_of(k, state.keys.get(k)))
                .collect()
        };
        let ask: Vec<Key> = keys
            .iter()
            .zip(&reasons)
            .filter(|(_, r)| r.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        if ask.is_empty() {
            return Ok(reasons.into_iter().map(Option::unwrap).collect());
        }
        let states = self.task_status(&ask).await?;
        for (k, reason) in keys.iter().zip(reasons.iter_mut()) {
            if reason.is_some() {
                continue;
            }
            *reason = Some(match states.get(k).cloned().flatten().as_deref() {
                None => KeyFailure::Unknown,
                Some("memory") => KeyFailure::Unreachable,
                Some("erred") => self.erred_report(k).await,
                Some(state) => KeyFailure::NotInMemory(state.to_owned()),
            });
        }
        Ok(reasons.into_iter().map(Option::unwrap).collect())
    }

    /// The exception of erred `key`: the key held (the scheduler reports
    /// `task-erred` at once to a client that wants an erred key) until the
    /// report comes, then let go.
    async fn erred_report(&self, key: &Key) -> KeyFailure {
        let keys = std::slice::from_ref(key);
        let waited = tokio::time::timeout(ERRED_REPORT_WAIT, self.wait(keys)).await;
        let _ = self.release(keys);
        match waited {
            Ok(Err(ClientError::Erred(e))) => KeyFailure::Erred(e),
            Ok(Err(ClientError::Cancelled(_))) => KeyFailure::Cancelled,
            Ok(Err(ClientError::Lost(_))) => KeyFailure::Lost,
            Ok(Err(ClientError::Unknown(_))) => KeyFailure::Unknown,
            _ => KeyFailure::NotInMemory("erred".into()),
        }
    }
}

/// Whether the `type` of a `key-in-memory` report (a pickle of the
/// result's class; nil for `None`) names one of Python's scalars: `int`,
/// `float`, `bool`, `complex` or `NoneType`, as a worker pickles them
/// (`builtins` and the name, `STACK_GLOBAL`). Only compared, never read as
/// a pickle.
pub(super) fn scalar_type(type_: Option<&Option<crate::typed::Bin>>) -> bool {
    const SCALARS: [&[u8]; 4] = [
        b"\x8c\x08builtins\x94\x8c\x03int\x94\x93\x94.",
        b"\x8c\x08builtins\x94\x8c\x05float\x94\x93\x94.",
        b"\x8c\x08builtins\x94\x8c\x04bool\x94\x93\x94.",
        b"\x8c\x08builtins\x94\x8c\x07complex\x94\x93\x94.",
    ];
    match type_ {
        Some(None) => true,
        Some(Some(t)) => SCALARS.iter().any(|s| t.ends_with(s)),
        None => false,
    }
}

/// The failure the stream reported of `k`, if any.
fn failure_of(k: &Key, state: Option<&KeyState>) -> Option<KeyFailure> {
    Some(match key_error(k, state)? {
        ClientError::Erred(e) => KeyFailure::Erred(e),
        ClientError::Cancelled(_) => KeyFailure::Cancelled,
        ClientError::Lost(_) => KeyFailure::Lost,
        ClientError::Unknown(_) => KeyFailure::Unknown,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::scalar_type;
    use crate::typed::Bin;

    /// The types Python's workers report (`pickle.dumps(int)`, ...):
    /// scalars by name only; anything else, or a longer name, is not one.
    #[test]
    fn scalar_types_by_their_pickles() {
        let of = |name: &str| {
            let mut p =
                b"\x80\x05\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c".to_vec();
            p.push(name.len() as u8);
            p.extend(name.as_bytes());
            p.extend(b"\x94\x93\x94.");
            Some(Bin::from(p))
        };
        for name in ["int", "float", "bool", "complex"] {
            assert!(scalar_type(Some(&of(name))), "{name}");
        }
        for name in ["str", "list", "bytes", "dict", "xint"] {
            assert!(!scalar_type(Some(&of(name))), "{name}");
        }
        assert!(scalar_type(Some(&None)));
        assert!(!scalar_type(None));
        let numpy = b"\x80\x05\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94.".to_vec();
        assert!(!scalar_type(Some(&Some(Bin::from(numpy)))));
    }
}
