//! Real concurrency for the tests of races: `n` tasks released together by one barrier, so they
//! reach the service at once rather than one after another. A test
//! repeats a race for its rounds itself, since each round sets up its own rows and checks them
//! afterwards.

use std::{future::Future, sync::Arc};

use tokio::sync::Barrier;

/// Runs `task(0)` … `task(n - 1)` as `n` tokio tasks that wait at one barrier and then run
/// together; returns their outputs in task order. A task that panics fails the test here.
pub(crate) async fn race<T, Fut>(n: usize, task: impl Fn(usize) -> Fut) -> Vec<T>
where
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, work) = (barrier.clone(), task(i));
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut outputs = Vec::with_capacity(n);
    for t in tasks {
        outputs.push(t.await.unwrap());
    }
    outputs
}
