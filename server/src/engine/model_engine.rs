//! The real engine: the model loaded in the background, replaced when the model settings
//! change, and used by one completion at a time on a blocking thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copilotd_draft::cancel::CancelToken;
use copilotd_model::{ModelInfo, Tokenizer};
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;

use super::calibration::{self, CalibrationControl, CalibrationState};
use super::typed_through::LastSuggestion;
use super::{CompletionService, Job, ModelState, Recent, ServiceError};
use crate::completion::feedback::{Origin, Teacher, Verdict};
use crate::completion::{self, Completer, Completion, CompletionRequest, CompletionStats, EngineSettings, Strategy};
use crate::sync::lock;
use crate::workspace::Repository;

/// Where the model is, with the model itself once loaded.
#[derive(Clone)]
enum Load {
    /// Not asked to load yet (before the server's `initialized`).
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
struct Loaded {
    completer: Arc<tokio::sync::Mutex<Completer>>,
    /// The last suggestion, for typed-through answers (forgotten with the model).
    last_suggestion: Mutex<LastSuggestion>,
    /// Teaches the completer's preference cache the person's verdicts.
    teacher: Teacher,
    calibration: Arc<CalibrationControl>,
    name: String,
    device: String,
    tokenizer: Tokenizer,
}

/// The model slot of the server.
pub struct ModelEngine {
    load: watch::Sender<Load>,
    /// Sequence number of the latest load; older loads finishing late are discarded.
    loads: AtomicU64,
    recent: Mutex<Recent>,
    /// The workspace's repository datastores, given to every model loaded.
    repository: Mutex<Vec<Repository>>,
    /// Where the preference cache persists, and when it was last saved there.
    preferences: Mutex<Option<PathBuf>>,
    preferences_saved: Mutex<Instant>,
}

/// How often a completion also saves the preference cache.
const SAVE_PREFERENCES_EVERY: Duration = Duration::from_secs(60);

impl Default for ModelEngine {
    fn default() -> Self {
        ModelEngine {
            load: watch::channel(Load::Idle).0,
            loads: AtomicU64::new(0),
            recent: Mutex::new(Recent::default()),
            repository: Mutex::default(),
            preferences: Mutex::default(),
            preferences_saved: Mutex::new(Instant::now()),
        }
    }
}

fn model_label(model: &Option<PathBuf>) -> String {
    match model {
        Some(path) => path.display().to_string(),
        None => "default model".to_owned(),
    }
}

impl ModelEngine {
    fn state(&self) -> Load {
        self.load.borrow().clone()
    }

    async fn load_model(&self, settings: EngineSettings) -> Result<(), String> {
        let sequence = self.loads.fetch_add(1, Ordering::AcqRel) + 1;
        let model = model_label(&settings.model);
        self.load.send_replace(Load::Loading { model: model.clone() });
        let repository = lock(&self.repository).clone();
        let preferences = lock(&self.preferences).clone();
        let loaded = tokio::task::spawn_blocking(move || {
            // The server never downloads on its own: a missing default model is an error here.
            let path = crate::model_files::resolve_local(settings.model.as_deref())?;
            let mut completer = Completer::load(&EngineSettings { model: Some(path), ..settings })?;
            completer.set_repositories(repository);
            if let Some(path) = &preferences {
                completer.restore_preferences(path);
            }
            let calibration = match (completer.needs_calibration(), completer.use_cached_calibration()) {
                (false, _) => CalibrationState::Off,
                (true, true) => CalibrationState::Done,
                (true, false) => CalibrationState::Pending,
            };
            anyhow::Ok((completer, calibration))
        })
        .await;
        let state = match loaded {
            Ok(Ok((completer, calibration_state))) => {
                let info = completer.model_info().clone();
                let tokenizer = completer.tokenizer().clone();
                let loaded = Loaded {
                    teacher: completer.teacher(),
                    name: info.name.clone(),
                    device: info.device.clone(),
                    tokenizer: tokenizer.clone(),
                    completer: Arc::new(tokio::sync::Mutex::new(completer)),
                    last_suggestion: Mutex::new(LastSuggestion::default()),
                    calibration: Arc::new(CalibrationControl::new(calibration_state)),
                };
                attach_common_store(tokenizer, info, Arc::clone(&loaded.completer));
                if calibration_state == CalibrationState::Pending {
                    let (completer, control) = (Arc::downgrade(&loaded.completer), Arc::downgrade(&loaded.calibration));
                    tokio::spawn(calibration::run(completer, control));
                }
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

    async fn attach_repositories(&self, repositories: Vec<Repository>) {
        lock(&self.repository).clone_from(&repositories);
        if let Load::Ready(loaded) = self.state() {
            loaded.completer.lock().await.set_repositories(repositories);
        }
    }

    /// The loaded model, waiting while it loads.
    async fn ready(&self, cancel: &CancelToken) -> Result<Arc<Loaded>, ServiceError> {
        let mut states = self.load.subscribe();
        // Idle: the load has not been asked for yet; it will be.
        let waiting = states.wait_for(|state| !matches!(state, Load::Idle | Load::Loading { .. }));
        let state = tokio::select! {
            state = waiting => state.map(|state| state.clone()).unwrap_or(Load::Idle),
            reason = cancel.cancelled() => return Err(ServiceError::Cancelled(reason)),
        };
        match state {
            Load::Ready(loaded) => Ok(loaded),
            Load::Failed { model, error } => {
                Err(ServiceError::Unavailable(format!("model {model} is unavailable: {error}")))
            }
            Load::Idle | Load::Loading { .. } => {
                Err(ServiceError::Unavailable("the model is not loaded yet".to_owned()))
            }
        }
    }

    async fn run(&self, job: Job, cancel: CancelToken) -> Result<Completion, ServiceError> {
        let loaded = self.ready(&cancel).await?;
        let typed_through = {
            let last = lock(&loaded.last_suggestion);
            let rest = last.continuation(&job.text, job.cursor, job.path.as_deref());
            rest.map(|rest| (last.origin_of(&rest), rest))
        };
        if let Some(((tokens, origin), rest)) = typed_through {
            return Ok(self.typed_through(job.strategy, rest, tokens, origin));
        }
        let (text, cursor, path) = (Arc::clone(&job.text), job.cursor, job.path.clone());
        // A background calibration gives the model back at once.
        let _wanting = loaded.calibration.want();
        // Requests queue for the model; a superseded one leaves the queue at once.
        let mut completer = tokio::select! {
            completer = Arc::clone(&loaded.completer).lock_owned() => completer,
            reason = cancel.cancelled() => return Err(ServiceError::Cancelled(reason)),
        };
        if let Some(reason) = cancel.reason() {
            return Err(ServiceError::Cancelled(reason));
        }
        let save_preferences = self.preferences_due();
        let outcome = tokio::task::spawn_blocking(move || {
            let request = CompletionRequest {
                text: &job.text,
                cursor: job.cursor,
                path: job.path.as_deref(),
                max_tokens: job.max_tokens,
                strategy: job.strategy,
                sampling: job.sampling,
            };
            let result = completer.complete(&request, &cancel);
            if let Some(path) = save_preferences {
                save_preferences_to(&completer, &path);
            }
            (result, completer.recent_stats())
        })
        .await;
        let (result, recent) = outcome.map_err(|join| ServiceError::Panicked(join.to_string()))?;
        lock(&self.recent).generated_tokens = recent.generated_tokens;
        let completion = result?;
        lock(&loaded.last_suggestion).remember(text, cursor, path, &completion);
        let mut figures = lock(&self.recent);
        figures.completions += 1;
        figures.tokens_per_second = recent.tokens_per_second;
        figures.acceptance_length = recent.acceptance_length;
        figures.last = serde_json::to_value(&completion.stats).ok();
        Ok(completion)
    }

    /// The preference file, when it is time to save to it again.
    fn preferences_due(&self) -> Option<PathBuf> {
        let path = lock(&self.preferences).clone()?;
        let mut saved = lock(&self.preferences_saved);
        (saved.elapsed() >= SAVE_PREFERENCES_EVERY).then(|| {
            *saved = Instant::now();
            path
        })
    }

    /// The answer that the rest of the last suggestion gives, counted as a completion.
    fn typed_through(&self, strategy: Strategy, rest: String, tokens: Vec<u32>, origin: Origin) -> Completion {
        let stats = CompletionStats { stop: "typed_through", ..CompletionStats::empty(strategy) };
        let mut figures = lock(&self.recent);
        figures.completions += 1;
        figures.last = serde_json::to_value(&stats).ok();
        Completion { text: rest, tokens, origin, stats }
    }
}

impl CompletionService for ModelEngine {
    fn model_state(&self) -> ModelState {
        match self.state() {
            Load::Idle => ModelState::Idle,
            Load::Loading { model } => ModelState::Loading { model },
            Load::Ready(loaded) => ModelState::Ready { name: loaded.name.clone(), device: loaded.device.clone() },
            Load::Failed { model, error } => ModelState::Failed { model, error },
        }
    }

    fn tokenizer(&self) -> Option<Tokenizer> {
        match self.state() {
            Load::Ready(loaded) => Some(loaded.tokenizer.clone()),
            _ => None,
        }
    }

    fn recent(&self) -> Recent {
        let mut recent = lock(&self.recent).clone();
        if let Load::Ready(loaded) = self.state() {
            recent.calibration = Some(loaded.calibration.state());
        }
        recent
    }

    fn load(&self, settings: EngineSettings) -> BoxFuture<'_, Result<(), String>> {
        self.load_model(settings).boxed()
    }

    fn set_repositories(&self, repositories: Vec<Repository>) -> BoxFuture<'_, ()> {
        self.attach_repositories(repositories).boxed()
    }

    fn set_preferences_file(&self, path: Option<PathBuf>) {
        *lock(&self.preferences) = path;
    }

    fn save_preferences(&self) -> BoxFuture<'_, ()> {
        async move {
            let (Some(path), Load::Ready(loaded)) = (lock(&self.preferences).clone(), self.state()) else { return };
            let completer = loaded.completer.lock().await;
            save_preferences_to(&completer, &path);
        }
        .boxed()
    }

    fn complete(&self, job: Job, cancel: CancelToken) -> BoxFuture<'_, Result<Completion, ServiceError>> {
        self.run(job, cancel).boxed()
    }

    fn feedback(&self, suggestion: &Completion, verdict: Verdict) {
        let Load::Ready(loaded) = self.state() else { return };
        let tokens = loaded.teacher.teach(&suggestion.text, &suggestion.tokens, &suggestion.origin, &verdict);
        tracing::debug!("feedback {verdict:?} on a suggestion: {tokens} tokens taught to the preference cache");
    }
}

/// Saves the completer's preference cache, with a warning in the log when it cannot.
fn save_preferences_to(completer: &Completer, path: &std::path::Path) {
    if let Err(err) = completer.save_preferences(path) {
        tracing::warn!("{err:#}");
    }
}

/// Opens (or, the first time, builds) the common datastore on a background
/// thread and hands it to the completer; completions are served without it
/// until then. A store refined for this model is preferred.
fn attach_common_store(tokenizer: Tokenizer, info: ModelInfo, completer: Arc<tokio::sync::Mutex<Completer>>) {
    std::thread::spawn(move || match completion::common::open_for_model(&tokenizer, &info) {
        Ok(store) => completer.blocking_lock().set_common(store),
        Err(error) => tracing::warn!("serving without the common datastore: {error:#}"),
    });
}
