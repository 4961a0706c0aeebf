//! Handing keys over to another client (a Python one): keys scattered for
//! it ([`Client::scatter_for`]), held on its behalf
//! ([`Client::desire_for`]) or let go on its behalf
//! ([`Client::release_for`]), so that a Rust program can leave data to a
//! Python client and exit.
//!
//! Dask's own client does the same with the same ops, naming a client
//! other than itself: the scheduler's `update_data(who_has, nbytes,
//! client)` holds scattered keys for the client it is given
//! (`scheduler.py:7729`, `client_desires_keys(keys=list(who_has),
//! client=client)`), and `client-desires-keys` with a `client` field is how
//! `fire_and_forget` holds keys for the pseudo-client `"fire-and-forget"`
//! (`client.py:6017`). `client_desires_keys` makes a client it does not
//! know (`scheduler.py:5803`: "For publish, queues etc."): a key held for
//! a client id that never connects, or has left, is kept until
//! [`release_for`](Client::release_for) lets it go.

use super::{Client, ClientError};
use crate::dask::{ClientDesiresKeys, ClientReleasesKeys, Key, Map};
use crate::value::Value;

impl Client {
    /// [`scatter`](Client::scatter) for the client `owner` (its id:
    /// Python's `client.id`, `"Client-<32 hex digits>"`): the scheduler
    /// holds the keys for that client from the start (`update_data` with
    /// its id), not for this one, so they stay when this client closes and
    /// go when `owner` lets them go (a Python future of the key dropped) or
    /// closes. Python picks one up with `Future(key, client=c,
    /// state="memory")`.
    ///
    /// `owner` should be a client connected now: the scheduler keeps keys
    /// held for an id it does not know until they are let go on its
    /// behalf ([`release_for`](Client::release_for)).
    ///
    /// ```no_run
    /// # use framewire::dask::{Client, Key};
    /// # use framewire::Value;
    /// # async fn f(client: Client, python_client_id: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// client
    ///     .scatter_for(python_client_id, [(Key::from("handed"), Value::from(7))])
    ///     .await?;
    /// client.close().await?; // "handed" stays, held for the Python client
    /// // Python: Future("handed", client=c, state="memory").result() == 7
    /// # Ok(()) }
    /// ```
    pub async fn scatter_for(
        &self,
        owner: &str,
        data: impl IntoIterator<Item = (Key, Value)>,
    ) -> Result<Map<Key, Vec<String>>, ClientError> {
        self.place(data.into_iter().collect(), Some(owner)).await
    }

    /// Holds `keys` on behalf of the client `owner` (`client-desires-keys`
    /// naming it, as `fire_and_forget` names `"fire-and-forget"`): the
    /// scheduler keeps them for that client, and reports on them to it.
    /// This client's holds are not changed. A key the scheduler does not
    /// know yet is ignored by it (with a warning in its log): submit first.
    ///
    /// ```no_run
    /// # use framewire::dask::{Call, Client};
    /// # async fn f(client: Client, python_client_id: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// let key = client.submit(Call::new("operator:add".parse()?).arg(1i64).arg(2i64))?;
    /// client.desire_for(python_client_id, std::slice::from_ref(&key))?;
    /// client.close().await?; // the task goes on, its key held for Python
    /// # Ok(()) }
    /// ```
    pub fn desire_for(&self, owner: &str, keys: &[Key]) -> Result<(), ClientError> {
        let mut wish = ClientDesiresKeys::new(keys.iter().cloned());
        wish.client = Some(owner.to_owned());
        self.inner.shared.send(&wish)?;
        Ok(())
    }

    /// Lets go of `keys` on behalf of the client `owner`
    /// (`client-releases-keys` naming it): what the scheduler holds for
    /// that client is released (for `"fire-and-forget"`: what
    /// [`fire_and_forget`](Client::fire_and_forget) kept). This client's
    /// holds are not changed.
    ///
    /// ```no_run
    /// # use framewire::dask::{Client, Key};
    /// # fn f(client: Client) -> Result<(), Box<dyn std::error::Error>> {
    /// client.release_for("fire-and-forget", &[Key::from("x")])?;
    /// # Ok(()) }
    /// ```
    pub fn release_for(&self, owner: &str, keys: &[Key]) -> Result<(), ClientError> {
        self.inner
            .shared
            .send(&ClientReleasesKeys::new(keys.to_vec(), owner.to_owned()))?;
        Ok(())
    }
}
