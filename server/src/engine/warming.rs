//! Warming: when the editor says where the person is (`copilotd/warm`, sent as a buffer is
//! entered) and the model is idle, the prompt of that place is prefilled in the background, so
//! the first completion there reuses the work instead of paying for a cold prefill (about 3 s
//! for 2,000 prompt tokens on two cores). A request, or a later warm-up, makes a warm-up give
//! the model back within one [`WARM_PIECE`](crate::completion) of prefill; what it prefilled
//! stays reusable. A warm-up waits its turn for the model behind a generation or the calibration,
//! and gives way at once if a request or a later warm-up came meanwhile: two names in quick
//! succession (an editor's focus event, then the buffer's) leave the later one warming.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::Job;
use crate::completion::Completer;

/// What warm-ups and requests share.
#[derive(Debug, Default)]
pub struct Warming {
    /// Bumped by each warm-up and each request: a warm-up goes on while it is the latest.
    latest: AtomicU64,
    /// Prompt tokens prefilled ahead of requests.
    tokens: AtomicU64,
}

impl Warming {
    /// A request wants the model: a running warm-up gives way.
    pub fn interrupt(&self) {
        self.latest.fetch_add(1, Ordering::AcqRel);
    }

    /// Prompt tokens prefilled ahead of requests so far.
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Acquire)
    }

    /// Numbers a new warm-up; earlier ones give way to it.
    pub fn start(&self) -> u64 {
        self.latest.fetch_add(1, Ordering::AcqRel) + 1
    }

    fn given_way(&self, id: u64) -> bool {
        self.latest.load(Ordering::Acquire) != id
    }
}

/// Warm-up `id`: prefills the prompt of `job` once it has the model, unless something came since.
pub async fn run(warming: Arc<Warming>, completer: Arc<tokio::sync::Mutex<Completer>>, job: Job, id: u64) {
    if warming.given_way(id) {
        return;
    }
    let mut completer = completer.lock_owned().await;
    if warming.given_way(id) {
        return;
    }
    let shared = Arc::clone(&warming);
    let outcome = tokio::task::spawn_blocking(move || completer.warm(&job.request(), &|| shared.given_way(id))).await;
    match outcome {
        Ok(Ok(tokens)) => {
            warming.tokens.fetch_add(tokens as u64, Ordering::AcqRel);
            tracing::debug!("warmed {tokens} prompt tokens ahead of a request");
        }
        Ok(Err(error)) => tracing::debug!("warming stopped: {error}"),
        Err(join) => tracing::error!("warming crashed: {join}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_warm_up_or_a_request_makes_a_warm_up_give_way() {
        let warming = Warming::default();
        let first = warming.start();
        assert!(!warming.given_way(first));
        let second = warming.start();
        assert!(warming.given_way(first) && !warming.given_way(second));
        warming.interrupt();
        assert!(warming.given_way(second));
    }
}
