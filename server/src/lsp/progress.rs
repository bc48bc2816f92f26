//! Work-done progress (`$/progress`) for long background jobs such as the initial indexing.
//!
//! The job reports `(done, total)` from any thread through a [`ProgressSink`]; [`drive`] turns
//! the latest values into `window/workDoneProgress/create`, then `begin`, throttled `report`s
//! and `end` notifications.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tower_lsp_server::lsp_types::request::WorkDoneProgressCreate;
use tower_lsp_server::lsp_types::{ProgressToken, WorkDoneProgressCreateParams};
use tower_lsp_server::{Bounded, Client, NotCancellable, OngoingProgress};

/// Least time between two `report` notifications.
const REPORT_INTERVAL: Duration = Duration::from_millis(100);
/// How long to wait for the client to accept a progress token.
const CREATE_TIMEOUT: Duration = Duration::from_secs(5);

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// The job's side: cheap, thread-safe updates; only the latest value is sent.
#[derive(Debug, Clone)]
pub struct ProgressSink(watch::Sender<(usize, usize)>);

impl ProgressSink {
    pub fn update(&self, done: usize, total: usize) {
        self.0.send_replace((done, total));
    }
}

/// A sink and the receiver [`drive`] reads.
pub fn channel() -> (ProgressSink, watch::Receiver<(usize, usize)>) {
    let (sender, receiver) = watch::channel((0, 0));
    (ProgressSink(sender), receiver)
}

fn percentage(done: usize, total: usize) -> u32 {
    (done.min(total) * 100).checked_div(total).unwrap_or(0) as u32
}

/// Reports the job's progress to the client until `job` resolves to its final message. When the
/// client does not support work-done progress (`enabled` false) or refuses the token, the job is
/// only awaited.
pub async fn drive<F>(
    client: &Client,
    enabled: bool,
    title: &str,
    mut updates: watch::Receiver<(usize, usize)>,
    job: F,
) -> String
where
    F: Future<Output = String>,
{
    let token = ProgressToken::String(format!("copilotd/{}", NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)));
    let create = client.send_request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams { token: token.clone() });
    let created = enabled && matches!(tokio::time::timeout(CREATE_TIMEOUT, create).await, Ok(Ok(())));
    if !created {
        return job.await;
    }
    let progress = client.progress(token, title).with_percentage(0).with_message("starting").begin().await;
    tokio::pin!(job);
    let mut last_report = tokio::time::Instant::now() - REPORT_INTERVAL;
    let mut reported = (0, 0);
    loop {
        // The job's end first, so that `end` is never held back by a throttled report.
        tokio::select! {
            biased;
            message = &mut job => {
                // A job that ended between two polls still reports where it got to.
                let latest = *updates.borrow();
                if latest != reported {
                    report(&progress, latest).await;
                }
                progress.finish_with_message(message.clone()).await;
                return message;
            }
            changed = updates.changed() => {
                if changed.is_err() {
                    // The sink is gone; only the outcome is left to wait for.
                    let message = (&mut job).await;
                    progress.finish_with_message(message.clone()).await;
                    return message;
                }
                tokio::time::sleep_until(last_report + REPORT_INTERVAL).await;
                reported = *updates.borrow_and_update();
                report(&progress, reported).await;
                last_report = tokio::time::Instant::now();
            }
        }
    }
}

async fn report(progress: &OngoingProgress<Bounded, NotCancellable>, (done, total): (usize, usize)) {
    progress.report_with_message(format!("{done}/{total} files"), percentage(done, total)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_bounded() {
        assert_eq!(percentage(0, 0), 0);
        assert_eq!(percentage(5, 10), 50);
        assert_eq!(percentage(12, 10), 100);
    }
}
