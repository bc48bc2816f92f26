//! Saving what a loaded model learned (its preference cache and acceptance counts) off the
//! request path: a while after completions and feedback teach it something, once for all they
//! taught meanwhile, and a last time when the model is dropped (replaced). The end of a session saves through
//! [`super::CompletionService::save_learned`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::calibration::CalibrationControl;
use crate::completion::Completer;

/// How long after a lesson the saver saves: the lessons that come meanwhile are saved with it.
pub const SAVE_DELAY: Duration = Duration::from_secs(5);

/// Tells the saver of one loaded model that it learned something; dropped with the model, which
/// ends the saver.
pub struct Learned(mpsc::Sender<()>);

impl Learned {
    /// Starts the saver of `completer`.
    pub fn start_saver(completer: Arc<tokio::sync::Mutex<Completer>>, calibration: Arc<CalibrationControl>) -> Learned {
        let (sender, lessons) = mpsc::channel(1);
        tokio::spawn(run(lessons, completer, calibration));
        Learned(sender)
    }

    /// Something was learned: it is saved within [`SAVE_DELAY`] or so.
    pub fn tell(&self) {
        // A full channel already holds a save to come.
        let _ = self.0.try_send(());
    }
}

async fn run(
    mut lessons: mpsc::Receiver<()>,
    completer: Arc<tokio::sync::Mutex<Completer>>,
    calibration: Arc<CalibrationControl>,
) {
    // When the first lesson not saved yet is due to be: later ones do not put it off.
    let mut due: Option<Instant> = None;
    loop {
        tokio::select! {
            lesson = lessons.recv() => match lesson {
                Some(()) => {
                    due.get_or_insert_with(|| Instant::now() + SAVE_DELAY);
                }
                None => break,
            },
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                due = None;
                save(&completer, &calibration).await;
            }
        }
    }
    if due.is_some() {
        save(&completer, &calibration).await;
    }
}

/// Saves what `completer` learned, on a blocking thread, once the model is free (a background
/// calibration gives it back).
pub async fn save(completer: &Arc<tokio::sync::Mutex<Completer>>, calibration: &CalibrationControl) {
    let _wanting = calibration.want();
    let mut completer = Arc::clone(completer).lock_owned().await;
    // The completer logs its own failures to save.
    if let Err(join) = tokio::task::spawn_blocking(move || completer.save_learned()).await {
        tracing::warn!("saving what was learned crashed: {join}");
    }
}
