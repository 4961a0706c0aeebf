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
    /// "From then on" is from when the scheduler reads the subscription,
    /// which goes on the batched stream (within its interval), while
    /// [`log_event`](Client::log_event) is a call: an event this client
    /// logs right after subscribing may reach the scheduler first and not
    /// be sent to the subscription, as with Python's client.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dask::Op;

    fn event(topic: &str, event: Value) -> Event {
        Event {
            op: Op::new(),
            topic: topic.into(),
            event,
        }
    }

    /// Events of any shape reach the subscriptions of their topic, in
    /// order, never a panic; a topic nobody subscribed to, or whose
    /// subscriptions are gone, drops them.
    #[test]
    fn events_of_any_shape_are_delivered() {
        let topics = Mutex::new(Topics::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (gone, rx_gone) = mpsc::unbounded_channel();
        drop(rx_gone);
        topics
            .lock()
            .unwrap()
            .subscribers
            .insert("t".into(), vec![(1, tx), (2, gone)]);
        let msg = Value::map_of([("a", Value::from(1))]);
        deliver(
            &topics,
            event("t", Value::Array(vec![Value::Float(1.5), msg.clone()])),
        );
        deliver(
            &topics,
            event("t", Value::Array(vec![Value::from(7), Value::str("x")])),
        );
        deliver(&topics, event("t", Value::str("no time")));
        deliver(
            &topics,
            event("t", Value::Array(vec![Value::Nil, Value::Nil])),
        );
        deliver(&topics, event("other", Value::Nil));
        let got: Vec<TopicEvent> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!((got[0].time, &got[0].msg), (1.5, &msg));
        assert_eq!((got[1].time, &got[1].msg), (7.0, &Value::str("x")));
        assert!(got[2].time.is_nan() && got[2].msg == Value::str("no time"));
        assert!(got[3].time.is_nan() && got[3].msg == Value::Nil);
        // The dropped receiver's sender was let go.
        assert_eq!(topics.lock().unwrap().subscribers["t"].len(), 1);
        assert_eq!(subscribed(&topics), vec!["t".to_owned()]);
        end_all(&topics);
        assert!(subscribed(&topics).is_empty());
    }
}
