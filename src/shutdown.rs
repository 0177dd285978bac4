//! A shutdown signal that any number of background loops can wait on.

use std::sync::Arc;

use tokio::sync::watch;

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
}
