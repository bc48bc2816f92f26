//! The model's lifecycle inside the server: loaded in the background, replaced when the model
//! settings change, used by one completion at a time on a blocking thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::requests::{CancelFlag, Cancelled};
use copilotd_model::Tokenizer;

use crate::completion::{self, Completer, Completion, CompletionRequest, EngineSettings, Strategy};
use crate::workspace::SharedStore;

/// Where the model is.
#[derive(Clone)]
pub enum Load {
    /// Not asked to load yet (before `initialized`).
    Idle,
    Loading {
        model: String,
    },
    Ready(Arc<Loaded>),
    Failed {
        model: String,
        error: String,
    },
}

/// A loaded model, shared by completions (one at a time).
pub struct Loaded {
    completer: Arc<tokio::sync::Mutex<Completer>>,
    pub name: String,
    pub device: String,
    pub tokenizer: Tokenizer,
}

/// One completion to run, owning its inputs.
#[derive(Debug, Clone)]
pub struct Job {
    pub text: Arc<String>,
    pub cursor: usize,
    pub path: Option<String>,
    pub max_tokens: usize,
    pub strategy: Strategy,
}

/// Why a completion produced no text.
#[derive(Debug)]
pub enum CompleteError {
    /// The model is missing or failed to load.
    Unavailable(String),
    Cancelled(Cancelled),
    Failed(anyhow::Error),
    /// The engine panicked; the server goes on.
    Panicked(String),
}

/// Recent figures for `copilotd/status`.
#[derive(Debug, Clone, Default)]
pub struct Recent {
    pub completions: u64,
    pub tokens_per_second: Option<f64>,
    pub acceptance_length: Option<f64>,
    pub last: Option<serde_json::Value>,
}

/// The model slot of the server.
pub struct Engine {
    load: watch::Sender<Load>,
    /// Sequence number of the latest load; older loads finishing late are discarded.
    loads: AtomicU64,
    recent: Mutex<Recent>,
    /// The workspace's repository datastore, given to every model loaded.
    repository: Mutex<Option<SharedStore>>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            load: watch::channel(Load::Idle).0,
            loads: AtomicU64::new(0),
            recent: Mutex::new(Recent::default()),
            repository: Mutex::new(None),
        }
    }
}

fn model_label(model: &Option<PathBuf>) -> String {
    match model {
        Some(path) => path.display().to_string(),
        None => "default model".to_owned(),
    }
}

impl Engine {
    pub fn state(&self) -> Load {
        self.load.borrow().clone()
    }

    pub fn recent(&self) -> Recent {
        self.recent.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Loads a model in the background. Resolves to the load error, if any (for the editor).
    pub async fn load(self: &Arc<Self>, settings: EngineSettings) -> Result<(), String> {
        let sequence = self.loads.fetch_add(1, Ordering::AcqRel) + 1;
        let model = model_label(&settings.model);
        self.load.send_replace(Load::Loading { model: model.clone() });
        let repository = self.repository.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let mut completer = Completer::load(&settings)?;
            if let Some(store) = repository {
                completer.set_repository(store);
            }
            anyhow::Ok(completer)
        })
        .await;
        let state = match loaded {
            Ok(Ok(completer)) => {
                let info = completer.model_info();
                let tokenizer = completer.tokenizer().clone();
                let loaded = Loaded {
                    name: info.name.clone(),
                    device: info.device.clone(),
                    tokenizer: tokenizer.clone(),
                    completer: Arc::new(tokio::sync::Mutex::new(completer)),
                };
                attach_common_store(tokenizer, Arc::clone(&loaded.completer));
                Load::Ready(Arc::new(loaded))
            }
            Ok(Err(err)) => Load::Failed { model, error: format!("{err:#}") },
            Err(join) => Load::Failed { model, error: format!("model loading crashed: {join}") },
        };
        let error = match &state {
            Load::Failed { error, .. } => Err(error.clone()),
            _ => Ok(()),
        };
        if self.loads.load(Ordering::Acquire) == sequence {
            self.load.send_replace(state);
        }
        error
    }

    /// Gives the repository datastore to the current and all future models.
    pub async fn set_repository(&self, store: SharedStore) {
        *self.repository.lock().unwrap_or_else(|p| p.into_inner()) = Some(store.clone());
        if let Load::Ready(loaded) = self.state() {
            loaded.completer.lock().await.set_repository(store);
        }
    }

    /// Runs one completion, waiting for the model if it is still loading. Stops within one
    /// decode step once `flag` is cancelled.
    pub async fn complete(&self, job: Job, flag: CancelFlag) -> Result<Completion, CompleteError> {
        let mut states = self.load.subscribe();
        let waiting = states
            // Idle: `initialized` (which starts the load) has not been handled yet.
            .wait_for(|state| !matches!(state, Load::Idle | Load::Loading { .. }));
        let state = tokio::select! {
            state = waiting => state.map(|state| state.clone()).unwrap_or(Load::Idle),
            reason = cancellation(&flag) => return Err(CompleteError::Cancelled(reason)),
        };
        let loaded = match state {
            Load::Ready(loaded) => loaded,
            Load::Failed { model, error } => {
                return Err(CompleteError::Unavailable(format!("model {model} is unavailable: {error}")))
            }
            Load::Idle | Load::Loading { .. } => {
                return Err(CompleteError::Unavailable("the model is not loaded yet".to_owned()))
            }
        };
        // Requests queue for the model; a superseded one leaves the queue at once.
        let mut completer = tokio::select! {
            completer = Arc::clone(&loaded.completer).lock_owned() => completer,
            reason = cancellation(&flag) => return Err(CompleteError::Cancelled(reason)),
        };
        if let Some(reason) = flag.reason() {
            return Err(CompleteError::Cancelled(reason));
        }
        let worker_flag = flag.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let request = CompletionRequest {
                text: &job.text,
                cursor: job.cursor,
                path: job.path.as_deref(),
                max_tokens: job.max_tokens,
                strategy: job.strategy,
            };
            let result = completer.complete(&request, &|| worker_flag.is_cancelled());
            (result, completer.recent_stats())
        })
        .await;
        match outcome {
            Ok((Ok(completion), recent)) => {
                let mut figures = self.recent.lock().unwrap_or_else(|p| p.into_inner());
                figures.completions += 1;
                figures.tokens_per_second = recent.tokens_per_second;
                figures.acceptance_length = recent.acceptance_length;
                figures.last = serde_json::to_value(&completion.stats).ok();
                Ok(completion)
            }
            Ok((Err(err), _)) if err.downcast_ref::<completion::Cancelled>().is_some() => {
                Err(CompleteError::Cancelled(flag.reason().unwrap_or(Cancelled::ByClient)))
            }
            Ok((Err(err), _)) => Err(CompleteError::Failed(err)),
            Err(join) => Err(CompleteError::Panicked(join.to_string())),
        }
    }
}

/// Opens (or, the first time, builds) the common datastore on a background
/// thread and hands it to the completer; completions are served without it
/// until then.
fn attach_common_store(tokenizer: Tokenizer, completer: Arc<tokio::sync::Mutex<Completer>>) {
    std::thread::spawn(move || match completion::common::open_or_build(&tokenizer) {
        Ok(store) => completer.blocking_lock().set_common(store),
        Err(error) => tracing::warn!("serving without the common datastore: {error:#}"),
    });
}

/// Resolves when `flag` is cancelled (polled: cancellation is a flag shared with the decode loop).
async fn cancellation(flag: &CancelFlag) -> Cancelled {
    loop {
        if let Some(reason) = flag.reason() {
            return reason;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
