//! A shutdown signal that any number of background loops can wait on.

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::watch,
    time::{Interval, MissedTickBehavior},
};

/// Cloneable; `trigger` once, every `wait` returns.
#[derive(Clone)]
pub struct ShutdownSignal {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownSignal {
    pub fn new() -> ShutdownSignal {
        let (tx, rx) = watch::channel(false);
        ShutdownSignal {
            tx: Arc::new(tx),
            rx,
        }
    }

    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once `trigger` has been called (immediately if it already was).
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|v| *v).await;
    }

    /// The ticks of a background loop: every `every` (the first at once; a run longer than the
    /// interval delays the next tick instead of stacking runs), until shutdown.
    pub fn ticks(&self, every: Duration) -> Ticks<'_> {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ticks {
            interval,
            shutdown: self,
        }
    }
}

/// See [`ShutdownSignal::ticks`].
pub struct Ticks<'a> {
    interval: Interval,
    shutdown: &'a ShutdownSignal,
}

impl Ticks<'_> {
    /// Waits for the next tick: true, or false once shutdown is signalled (the loop ends).
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.interval.tick() => true,
            _ = self.shutdown.wait() => false,
        }
    }
}
