//! One cancellation token for a generation and whoever waits on it.
//!
//! The decode loop checks [`CancelToken::reason`] once per step (one atomic load); async callers
//! await [`CancelToken::cancelled`], which is woken by [`CancelToken::cancel`] without polling.
//! Only the standard library is used, so the token works with any executor.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Why a generation was stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// Whoever asked for it stopped waiting for the answer.
    Abandoned,
    /// A newer request for the same input replaced it.
    Superseded,
    /// The input it was computed from changed.
    InputChanged,
}

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cancelled::Abandoned => "abandoned by its caller",
            Cancelled::Superseded => "superseded by a newer request",
            Cancelled::InputChanged => "its input changed",
        })
    }
}

/// Not cancelled (the other codes are [`Cancelled`]'s variants).
const LIVE: u8 = 0;

impl Cancelled {
    const ALL: [Cancelled; 3] = [Cancelled::Abandoned, Cancelled::Superseded, Cancelled::InputChanged];

    fn code(self) -> u8 {
        Cancelled::ALL.iter().position(|&reason| reason == self).map_or(LIVE, |index| index as u8 + 1)
    }

    fn from_code(code: u8) -> Option<Cancelled> {
        code.checked_sub(1).and_then(|index| Cancelled::ALL.get(usize::from(index)).copied())
    }
}

#[derive(Debug, Default)]
struct Shared {
    reason: AtomicU8,
    /// Tasks awaiting [`CancelToken::cancelled`].
    wakers: Mutex<Vec<Waker>>,
}

/// A cancellation token shared by clones. The first reason given wins.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<Shared>);

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels with `reason` (ignored if already cancelled) and wakes every waiter.
    pub fn cancel(&self, reason: Cancelled) {
        let _ = self.0.reason.compare_exchange(LIVE, reason.code(), Ordering::AcqRel, Ordering::Acquire);
        let wakers = std::mem::take(&mut *self.wakers());
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Why it was cancelled, or `None` while live. Cheap: one atomic load.
    pub fn reason(&self) -> Option<Cancelled> {
        Cancelled::from_code(self.0.reason.load(Ordering::Acquire))
    }

    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// Resolves to the reason once the token is cancelled.
    pub fn cancelled(&self) -> WaitCancelled<'_> {
        WaitCancelled(self)
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, Vec<Waker>> {
        // A waker list cannot be left half-updated: a poisoned lock's data is still sound.
        self.0.wakers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The future of [`CancelToken::cancelled`].
#[derive(Debug)]
pub struct WaitCancelled<'a>(&'a CancelToken);

impl Future for WaitCancelled<'_> {
    type Output = Cancelled;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Cancelled> {
        if let Some(reason) = self.0.reason() {
            return Poll::Ready(reason);
        }
        let mut wakers = self.0.wakers();
        // Checked again under the lock: `cancel` takes the wakers after setting the reason.
        if let Some(reason) = self.0.reason() {
            return Poll::Ready(reason);
        }
        if !wakers.iter().any(|waker| waker.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct CountWakes(AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_first_reason_wins_and_is_seen_by_every_clone() {
        let token = CancelToken::new();
        let clone = token.clone();
        assert_eq!(clone.reason(), None);
        token.cancel(Cancelled::Superseded);
        token.cancel(Cancelled::InputChanged);
        assert_eq!(clone.reason(), Some(Cancelled::Superseded));
        assert!(clone.is_cancelled());
    }

    #[test]
    fn a_waiter_is_woken_once_by_cancel_and_then_ready() {
        let token = CancelToken::new();
        let counter = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counter));
        let mut cx = Context::from_waker(&waker);
        let mut wait = token.cancelled();
        assert_eq!(Pin::new(&mut wait).poll(&mut cx), Poll::Pending);
        // Polling again with the same waker does not register it twice.
        assert_eq!(Pin::new(&mut wait).poll(&mut cx), Poll::Pending);
        token.cancel(Cancelled::Abandoned);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut wait).poll(&mut cx), Poll::Ready(Cancelled::Abandoned));
    }

    #[test]
    fn every_reason_round_trips_through_its_code() {
        for reason in Cancelled::ALL {
            assert_eq!(Cancelled::from_code(reason.code()), Some(reason));
        }
        assert_eq!(Cancelled::from_code(LIVE), None);
    }
}
