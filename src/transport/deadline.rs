//! [`Deadline`]: the optional per-message deadline of a connection's
//! reading and writing sides, the only clock of the read and write paths.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// An optional per-message deadline, re-armed without reallocating.
#[derive(Debug)]
pub(crate) struct Deadline {
    timeout: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl Deadline {
    pub(crate) fn new(timeout: Option<Duration>) -> Deadline {
        Deadline {
            timeout,
            sleep: None,
            armed: false,
        }
    }

    /// Starts the clock, unless it is already running.
    pub(crate) fn arm(&mut self) {
        let Some(t) = self.timeout else { return };
        if self.armed {
            return;
        }
        let at = Instant::now() + t;
        match &mut self.sleep {
            Some(s) => s.as_mut().reset(at),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.armed = true;
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Whether the deadline has passed (without registering a wake-up).
    pub(crate) fn expired(&self) -> bool {
        match &self.sleep {
            Some(s) if self.armed => s.deadline() <= Instant::now(),
            _ => false,
        }
    }

    /// Whether the deadline has passed; if not, the task is woken when it does.
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        match &mut self.sleep {
            Some(s) if self.armed => s.as_mut().poll(cx).is_ready(),
            _ => false,
        }
    }
}
