//! The cost calibration of a loaded model, in the background: it starts once no request has
//! wanted the model for a moment, gives the model back within one forward pass when a request
//! wants it (and starts over later), and is measured again later when the machine was busy.
//! Requests never wait for it; until it is done they draft a small fixed tree. A cost curve
//! not yet confirmed by later measurements (see [`crate::completion::calibrate`]) is in use
//! and measured again once its last measurement is
//! [`CONFIRM_AFTER`](crate::completion::calibrate::CONFIRM_AFTER) old.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::completion::calibrate::unix_now;
use crate::completion::{Calibration, Completer, Unconfirmed};
use crate::sync::lock;

/// Quiet time (no request wanting the model) before calibration starts or resumes.
const IDLE_BEFORE: Duration = Duration::from_secs(1);
/// Wait before measuring again after a disturbed calibration.
const RETRY_AFTER: Duration = Duration::from_secs(60);
/// Disturbed measurements before giving up until the next start (the last one stays in use).
const MAX_DISTURBED: usize = 5;

/// Where the calibration of the loaded model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalibrationState {
    /// Not measured yet (requests use a small fixed tree).
    Pending,
    Measuring,
    /// Measured while the machine was busy: in use, measured again later.
    Disturbed,
    /// Measured, in use, and measured again later to confirm it.
    Confirming,
    /// Confirmed: measured here, or read from the cache.
    Done,
    /// Not needed (fixed draft budget) or impossible (see the log).
    Off,
}

impl CalibrationState {
    pub fn name(self) -> &'static str {
        match self {
            CalibrationState::Pending => "pending",
            CalibrationState::Measuring => "measuring",
            CalibrationState::Disturbed => "disturbed",
            CalibrationState::Confirming => "confirming",
            CalibrationState::Done => "done",
            CalibrationState::Off => "off",
        }
    }
}

/// What requests and the background calibration share.
#[derive(Debug)]
pub struct CalibrationControl {
    /// Requests waiting for or using the model, and other work calibration gives way to.
    wanting: AtomicUsize,
    last_request: Mutex<Instant>,
    state: Mutex<CalibrationState>,
}

/// Held by a request while it wants the model.
pub struct Wanting<'a>(&'a CalibrationControl);

impl Drop for Wanting<'_> {
    fn drop(&mut self) {
        *lock(&self.0.last_request) = Instant::now();
        self.0.wanting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl CalibrationControl {
    pub fn new(state: CalibrationState) -> Self {
        CalibrationControl {
            wanting: AtomicUsize::new(0),
            last_request: Mutex::new(Instant::now()),
            state: Mutex::new(state),
        }
    }

    pub fn state(&self) -> CalibrationState {
        *lock(&self.state)
    }

    fn set_state(&self, state: CalibrationState) {
        *lock(&self.state) = state;
    }

    /// Marks a request as wanting the model until the guard drops: calibration gives way. Other
    /// work that shares the cores (building the common store) holds one too.
    pub fn want(&self) -> Wanting<'_> {
        self.wanting.fetch_add(1, Ordering::AcqRel);
        Wanting(self)
    }

    fn wanted(&self) -> bool {
        self.wanting.load(Ordering::Acquire) > 0
    }

    /// How long until the model has been unwanted for [`IDLE_BEFORE`] (zero when it has).
    fn idle_in(&self) -> Option<Duration> {
        if self.wanted() {
            return Some(IDLE_BEFORE);
        }
        let quiet = lock(&self.last_request).elapsed();
        IDLE_BEFORE.checked_sub(quiet).filter(|left| !left.is_zero())
    }
}

/// Calibrates the completer in the background until done (confirmed), off or given up; ends
/// early when the model is replaced (nothing else holds it any more).
pub async fn run(completer: Weak<tokio::sync::Mutex<Completer>>, control: Weak<CalibrationControl>) {
    let mut disturbed = 0;
    let mut pause = IDLE_BEFORE;
    loop {
        tokio::time::sleep(pause).await;
        let (Some(shared), Some(completer)) = (control.upgrade(), completer.upgrade()) else { return };
        if let Some(wait) = shared.idle_in() {
            pause = wait;
            continue;
        }
        let guard = completer.lock_owned().await;
        // A request may have held the model meanwhile: the quiet moment starts after it.
        if let Some(wait) = shared.idle_in() {
            pause = wait;
            continue;
        }
        // Requests keep a curve in use while it is measured again.
        let before = shared.state();
        if before != CalibrationState::Confirming {
            shared.set_state(CalibrationState::Measuring);
        }
        let measuring = Arc::clone(&shared);
        let outcome = tokio::task::spawn_blocking(move || {
            let mut completer = guard;
            completer.calibrate_until(Unconfirmed::MeasureAgain, &|| measuring.wanted())
        })
        .await;
        pause = IDLE_BEFORE;
        match outcome {
            // Measured, or not due yet (or confirmed meanwhile by another process).
            Ok(Ok(Calibration::Measured(calibrated) | Calibration::Cached(calibrated))) => {
                let Some(wait) = calibrated.confirm_in(unix_now()) else {
                    return shared.set_state(CalibrationState::Done);
                };
                shared.set_state(CalibrationState::Confirming);
                pause = wait.max(IDLE_BEFORE);
            }
            Ok(Ok(Calibration::Disturbed(_))) => {
                disturbed += 1;
                shared.set_state(CalibrationState::Disturbed);
                if disturbed >= MAX_DISTURBED {
                    tracing::warn!("the cost calibration was disturbed {disturbed} times; keeping the last one");
                    return;
                }
                pause = RETRY_AFTER;
            }
            Ok(Ok(Calibration::Interrupted)) => shared.set_state(before),
            Ok(Err(error)) => {
                tracing::warn!("cost calibration failed: {error}; drafting keeps a small fixed tree");
                return shared.set_state(CalibrationState::Off);
            }
            Err(join) => {
                tracing::error!("cost calibration crashed: {join}");
                return shared.set_state(CalibrationState::Off);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wanted_model_is_not_idle_until_a_quiet_moment_after() {
        let control = CalibrationControl::new(CalibrationState::Pending);
        let request = control.want();
        assert!(control.wanted());
        assert_eq!(control.idle_in(), Some(IDLE_BEFORE));
        drop(request);
        assert!(!control.wanted());
        assert!(control.idle_in().is_some_and(|left| left <= IDLE_BEFORE));
        *lock(&control.last_request) = Instant::now() - IDLE_BEFORE;
        assert_eq!(control.idle_in(), None);
    }
}
