//! Subscribing to the scheduler's event topics ([`Client::subscribe_topic`],
//! Python's `Client.subscribe_topic`): `subscribe-topic` and
//! `unsubscribe-topic` on the client's stream, and the `event` messages the
//! scheduler's broker sends on it (`broker.py`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::{Client, ClientError, Shared};
use crate::dask::Event;
use crate::value::Value;

/// An event logged under a topic (by `log_event`, Python's or
/// [`Client::log_event`], or by the scheduler itself), as a subscription
/// ([`TopicEvents`]) receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicEvent {
    /// The topic it was logged under.
    pub topic: String,
    /// When it was logged: seconds since the epoch, the scheduler's clock.
    pub time: f64,
    /// The message logged.
    pub msg: Value,
}

/// The live subscriptions of a client, by topic.
#[derive(Debug, Default)]
pub(super) struct Topics {
    next: u64,
    subscribers: HashMap<String, Vec<(u64, mpsc::UnboundedSender<TopicEvent>)>>,
}

/// `{"op": op, "topic": topic, "client": client}`.
fn topic_op(op: &'static str, topic: &str, client: &str) -> Value {
    Value::map_of([
        ("op", Value::from_static(op)),
        ("topic", Value::str(topic)),
        ("client", Value::str(client)),
    ])
}

/// The events of one topic a client subscribed to, as they come
/// ([`Client::subscribe_topic`]); dropping it ends the subscription (the
/// scheduler is told when it was the topic's last one).
#[derive(Debug)]
pub struct TopicEvents {
    topic: String,
    id: u64,
    rx: mpsc::UnboundedReceiver<TopicEvent>,
    shared: Arc<Shared>,
    client: String,
}

impl TopicEvents {
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The next event of the topic, waited for; `None` once the
    /// subscription ended ([`Client::unsubscribe_topic`], or the client
    /// closed). Events wait here, in order, until read.
    pub async fn next(&mut self) -> Option<TopicEvent> {
        self.rx.recv().await
    }

    /// The next event if one came already (`None`: none yet, or ended).
    pub fn try_next(&mut self) -> Option<TopicEvent> {
        self.rx.try_recv().ok()
    }
}

impl Drop for TopicEvents {
    fn drop(&mut self) {
        let last = {
            let mut topics = self.shared.topics.lock().expect("not poisoned");
            match topics.subscribers.get_mut(&self.topic) {
                Some(subs) => {
                    subs.retain(|(id, _)| *id != self.id);
                    if subs.is_empty() {
                        topics.subscribers.remove(&self.topic);
                        true
                    } else {
                        false
                    }
                }
                // Unsubscribed already.
                None => false,
            }
        };
        if last {
            let _ = self
                .shared
                .send(&topic_op("unsubscribe-topic", &self.topic, &self.client));
        }
    }
}

impl Client {
    /// Subscribes to `topic` of the scheduler's events log, as Python's
    /// `Client.subscribe_topic(topic, handler)`: `subscribe-topic` on the
    /// client's stream; every event logged under the topic from then on
    /// (by any client's `log_event`, or by the scheduler) comes on the
    /// stream as an `event` message, and is read from the returned
    /// [`TopicEvents`]. Several subscriptions to one topic each get every
    /// event. The events of earlier times: [`events`](Client::events).
    ///
    /// ```no_run
    /// # async fn f(client: framewire::dask::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut progress = client.subscribe_topic("progress")?;
    /// // Python: client.log_event("progress", {"done": 3})
    /// while let Some(event) = progress.next().await {
    ///     println!("{}: {:?}", event.time, event.msg);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn subscribe_topic(&self, topic: &str) -> Result<TopicEvents, ClientError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (id, first) = {
            let mut topics = self.inner.shared.topics.lock().expect("not poisoned");
            topics.next += 1;
            let id = topics.next;
            let subs = topics.subscribers.entry(topic.to_owned()).or_default();
            subs.push((id, tx));
            (id, subs.len() == 1)
        };
        let events = TopicEvents {
            topic: topic.to_owned(),
            id,
            rx,
            shared: self.inner.shared.clone(),
            client: self.inner.id.clone(),
        };
        if first {
            self.inner
                .shared
                .send(&topic_op("subscribe-topic", topic, &self.inner.id))?;
        }
        Ok(events)
    }

    /// Ends every subscription to `topic` (their [`TopicEvents::next`]
    /// gives `None` once the events already come are read):
    /// `unsubscribe-topic`, as Python's `Client.unsubscribe_topic`. A
    /// topic not subscribed to is left alone.
    pub fn unsubscribe_topic(&self, topic: &str) -> Result<(), ClientError> {
        let had = {
            let mut topics = self.inner.shared.topics.lock().expect("not poisoned");
            topics.subscribers.remove(topic).is_some()
        };
        if had {
            self.inner
                .shared
                .send(&topic_op("unsubscribe-topic", topic, &self.inner.id))?;
        }
        Ok(())
    }
}

/// Hands an `event` message to the subscriptions of its topic. An event
/// none takes (every subscription dropped meanwhile) is dropped.
pub(super) fn deliver(topics: &Mutex<Topics>, msg: Event) {
    let (time, logged) = match msg.event {
        Value::Array(mut pair) if pair.len() == 2 => {
            let logged = pair.pop().expect("two items");
            let time = match &pair[0] {
                Value::Float(t) => *t,
                other => match other.as_int() {
                    Some(i) => i.as_i128() as f64,
                    None => f64::NAN,
                },
            };
            (time, logged)
        }
        // Not `(time, msg)`: the message as it came, no time.
        other => (f64::NAN, other),
    };
    let mut topics = topics.lock().expect("not poisoned");
    if let Some(subs) = topics.subscribers.get_mut(&msg.topic) {
        subs.retain(|(_, tx)| {
            tx.send(TopicEvent {
                topic: msg.topic.clone(),
                time,
                msg: logged.clone(),
            })
            .is_ok()
        });
    }
}

/// The topics subscribed to, to subscribe again on a new registration.
pub(super) fn subscribed(topics: &Mutex<Topics>) -> Vec<String> {
    let topics = topics.lock().expect("not poisoned");
    topics.subscribers.keys().cloned().collect()
}

/// Subscribes again to every topic (after the client registered again).
pub(super) fn resubscribe(shared: &Shared, client: &str) {
    for topic in subscribed(&shared.topics) {
        let _ = shared.send(&topic_op("subscribe-topic", &topic, client));
    }
}

/// Ends every subscription (the client ended for good).
pub(super) fn end_all(topics: &Mutex<Topics>) {
    topics.lock().expect("not poisoned").subscribers.clear();
}
