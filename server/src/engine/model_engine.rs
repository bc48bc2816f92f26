//! The real engine: the model loaded in the background, replaced when the model settings
//! change, and used by one completion at a time on a blocking thread.
//!
//! A generation runs on when its request is cancelled: editors cancel a request at the next
//! keystroke, and a person types faster than a completion ends, so most generations would
//! otherwise be thrown away just before they could help. Its suggestion is remembered as it
//! grows, each time a generated line ends, and when it ends ([`LastSuggestion`]); it answers
//! the requests that follow while the person types what it predicted, and its request itself
//! as soon as it has a whole line, without waiting for the rest. A request it cannot answer
//! (another document or cursor, other settings, typed text it did not predict) stops it within
//! a decode step. When the person takes a whole suggestion, the next one is generated at once,
//! before the editor asks for it, unless the running generation goes on with it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use copilotd_draft::cancel::{CancelToken, Cancelled};
use copilotd_model::{ModelInfo, Tokenizer};
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;

use super::calibration::{self, CalibrationControl, CalibrationState};
use super::saving::{self, Learned};
use super::typed_through::LastSuggestion;
use super::warming::{self, Warming};
use super::{CompletionService, Job, ModelState, Recent, ServiceError};
use crate::completion::feedback::{Teacher, Verdict};
use crate::completion::{
    self, unwanted, Completer, Completion, CompletionError, CompletionStats, EngineSettings, RecentStats, TypedAhead,
    LINES_SO_FAR,
};
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
    /// Told each time the last suggestion changes (a generation's lines or its end).
    suggestion_changed: watch::Sender<()>,
    /// The generation on the model, if any, whether or not its request still waits for it;
    /// one about to start while it waits for the model.
    running: Mutex<Option<Running>>,
    /// Generations started, for telling them apart.
    generations: AtomicU64,
    /// Tokens generated since the model was loaded, those of cancelled generations included.
    generated_tokens: AtomicU64,
    /// The engine's figures, which each generation updates as it ends.
    recent: Arc<Mutex<Recent>>,
    /// Teaches the completer's preference cache the person's verdicts.
    teacher: Teacher,
    /// Saves what the completer learned, a while after it learned it.
    learned: Learned,
    calibration: Arc<CalibrationControl>,
    /// Whether prompts show the model the text after the cursor
    /// ([`Completer::fills_in_the_middle`]; a change of it loads the model anew).
    fills_in_the_middle: bool,
    name: String,
    device: String,
    tokenizer: Tokenizer,
}

/// A generation on the model and the job it was started for.
struct Running {
    job: Job,
    handles: RunningHandles,
}

/// What a generation is run with.
#[derive(Clone)]
struct RunningHandles {
    id: u64,
    /// Stops it (a request it cannot answer came).
    stop: CancelToken,
    /// What was typed at its cursor since it started, as far as the requests that came tell.
    typed: TypedAhead,
}

impl Loaded {
    /// Lets the running generation go on if its suggestion could answer `job` (telling it
    /// what was typed), and stops it otherwise; whether it goes on.
    fn follow_or_stop_running(&self, job: &Job) -> bool {
        let running = lock(&self.running);
        let Some(running) = running.as_ref() else { return false };
        match running.job.typed_before(job) {
            Some(typed) => {
                running.handles.typed.set(typed);
                true
            }
            None => {
                running.handles.stop.cancel(Cancelled::Superseded);
                false
            }
        }
    }

    /// Registers the generation about to start for `job` (in place of any other).
    fn start_running(&self, job: &Job) -> RunningHandles {
        let handles = RunningHandles {
            id: self.generations.fetch_add(1, Ordering::Relaxed),
            stop: CancelToken::new(),
            typed: TypedAhead::default(),
        };
        *lock(&self.running) = Some(Running { job: job.clone(), handles: handles.clone() });
        handles
    }

    /// Unregisters a generation, unless another one took its place.
    fn forget_running(&self, id: u64) {
        let mut running = lock(&self.running);
        if running.as_ref().is_some_and(|running| running.handles.id == id) {
            *running = None;
        }
    }

    /// Whether the registered generation `handles` is still to run: nothing stopped it and no
    /// other took its place.
    fn still_wanted(&self, handles: &RunningHandles) -> bool {
        let running = lock(&self.running);
        !handles.stop.is_cancelled() && running.as_ref().is_some_and(|running| running.handles.id == handles.id)
    }

    /// Generates the suggestion that follows a whole suggestion taken (`taken`, the text the
    /// person took), before the editor asks for it: registered at once, so that a request it
    /// cannot answer stops it, then run when the model is free. Nothing to do when the taken
    /// text is the running generation's lines so far: it goes on after them.
    fn prepare_next(self: &Arc<Self>, taken: &str) {
        let Some(job) = lock(&self.last_suggestion).taken_whole(taken) else { return };
        if self.follow_or_stop_running(&job) {
            return;
        }
        let handles = self.start_running(&job);
        let loaded = Arc::clone(self);
        tokio::spawn(async move {
            let completer = Arc::clone(&loaded.completer).lock_owned().await;
            if loaded.still_wanted(&handles) {
                let _ = generate(Arc::clone(&loaded), completer, job, handles).await;
            } else {
                loaded.forget_running(handles.id);
            }
        });
    }

    /// Remembers a suggestion generated for `job`, whole or its lines so far, and tells the
    /// requests waiting for one.
    fn remember(&self, job: &Job, suggestion: &Completion) {
        lock(&self.last_suggestion).remember(job, suggestion);
        self.suggestion_changed.send_replace(());
    }

    /// Records the completer's figures after a generation (`recent`), then remembers the
    /// suggestion it ended with (whether or not anyone still waits for it), and unregisters it.
    /// The figures come first: a request waiting for the suggestion is answered as soon as it is
    /// remembered, and its answer is the last completion the status reports.
    fn finish_running(&self, id: u64, job: &Job, result: &Result<Completion, CompletionError>, recent: RecentStats) {
        self.generated_tokens.store(recent.generated_tokens, Ordering::Release);
        match result {
            Ok(completion) => {
                {
                    let mut figures = lock(&self.recent);
                    figures.tokens_per_second = recent.tokens_per_second;
                    figures.acceptance_length = recent.acceptance_length;
                    figures.last = serde_json::to_value(&completion.stats).ok();
                }
                self.remember(job, completion);
            }
            // Stopped (or failed): editors must not keep asking for lines that will not come.
            Err(_) => {
                lock(&self.last_suggestion).end_lines_so_far();
                self.suggestion_changed.send_replace(());
            }
        }
        self.forget_running(id);
    }
}

/// The model slot of the server.
pub struct ModelEngine {
    load: watch::Sender<Load>,
    /// Sequence number of the latest load; older loads finishing late are discarded.
    loads: AtomicU64,
    /// Shared with every model loaded, whose generations update it as they end.
    recent: Arc<Mutex<Recent>>,
    /// The workspace's repository datastores, given to every model loaded.
    repository: Mutex<Vec<Repository>>,
    /// The workspace cache directory where the preference cache persists.
    preferences: Mutex<Option<PathBuf>>,
    /// Prefilling the prompts of the places editors name (`copilotd/warm`) while the model idles.
    warming: Arc<Warming>,
}

impl Default for ModelEngine {
    fn default() -> Self {
        ModelEngine {
            load: watch::channel(Load::Idle).0,
            loads: AtomicU64::new(0),
            recent: Arc::default(),
            repository: Mutex::default(),
            preferences: Mutex::default(),
            warming: Arc::default(),
        }
    }
}

fn model_label(model: &Option<PathBuf>) -> String {
    match model {
        Some(path) => path.display().to_string(),
        None => "the default model".to_owned(),
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
            if let Some(dir) = &preferences {
                completer.restore_preferences(dir);
            }
            // Requests keep their prefills within their bound from the first one on.
            if let Err(error) = completer.time_prefill() {
                tracing::warn!("cannot time a prefill, so the first prompt is not cut to be read in time: {error}");
            }
            let calibration = match (completer.needs_calibration(), completer.use_cached_calibration()) {
                (false, _) => CalibrationState::Off,
                (true, Some(cached)) if cached.confirmed() => CalibrationState::Done,
                (true, Some(_)) => CalibrationState::Confirming,
                (true, None) => CalibrationState::Pending,
            };
            anyhow::Ok((completer, calibration))
        })
        .await;
        let state = match loaded {
            Ok(Ok((completer, calibration_state))) => {
                let info = completer.model_info().clone();
                let tokenizer = completer.tokenizer().clone();
                let (teacher, fills_in_the_middle) = (completer.teacher(), completer.fills_in_the_middle());
                let completer = Arc::new(tokio::sync::Mutex::new(completer));
                let calibration = Arc::new(CalibrationControl::new(calibration_state));
                let loaded = Loaded {
                    teacher,
                    fills_in_the_middle,
                    name: info.name.clone(),
                    device: info.device.clone(),
                    tokenizer: tokenizer.clone(),
                    learned: Learned::start_saver(Arc::clone(&completer), Arc::clone(&calibration)),
                    completer,
                    last_suggestion: Mutex::new(LastSuggestion::default()),
                    suggestion_changed: watch::channel(()).0,
                    running: Mutex::default(),
                    generations: AtomicU64::new(0),
                    generated_tokens: AtomicU64::new(0),
                    recent: Arc::clone(&self.recent),
                    calibration,
                };
                attach_common_store(tokenizer, info, Arc::clone(&loaded.completer), Arc::clone(&loaded.calibration));
                if matches!(calibration_state, CalibrationState::Pending | CalibrationState::Confirming) {
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
            // A background calibration gives the model back at once.
            let _wanting = loaded.calibration.want();
            loaded.completer.lock().await.set_repositories(repositories);
        }
    }

    /// The loaded model, waiting while it loads.
    async fn ready(&self, cancel: &CancelToken) -> Result<Arc<Loaded>, ServiceError> {
        let state = tokio::select! {
            state = settled(self.load.subscribe()) => state,
            reason = cancel.cancelled() => return Err(ServiceError::Cancelled(reason)),
        };
        match state {
            Load::Ready(loaded) => Ok(loaded),
            Load::Failed { model, error } => Err(ServiceError::Unavailable(format!("{model} is unavailable: {error}"))),
            Load::Idle | Load::Loading { .. } => {
                Err(ServiceError::Unavailable("the model is not loaded yet".to_owned()))
            }
        }
    }

    async fn run(&self, job: Job, cancel: CancelToken) -> Result<Completion, ServiceError> {
        self.warming.interrupt();
        let loaded = self.ready(&cancel).await?;
        let mut changes = loaded.suggestion_changed.subscribe();
        if let Some(answer) = self.typed_through(&loaded, &job) {
            return Ok(answer);
        }
        // Where no suggestion is wanted, the answer needs no model and does not wait for its turn
        // (unless the running generation goes on at this place: its suggestion was wanted).
        if !loaded.follow_or_stop_running(&job) {
            if let Some(nothing) = unwanted(&job.request(), loaded.fills_in_the_middle) {
                self.count_answer(&nothing.stats);
                return Ok(nothing);
            }
        }
        // A background calibration gives the model back at once.
        let _wanting = loaded.calibration.want();
        // Requests queue for the model; a superseded one leaves the queue at once, and one the
        // running generation's lines answer as soon as they do.
        let completer = tokio::select! {
            completer = Arc::clone(&loaded.completer).lock_owned() => completer,
            answer = self.typed_through_when_ready(&loaded, &job, &mut changes) => return Ok(answer),
            reason = cancel.cancelled() => return Err(ServiceError::Cancelled(reason)),
        };
        // The generation this request waited for may have predicted what was typed since.
        if let Some(answer) = self.typed_through(&loaded, &job) {
            return Ok(answer);
        }
        if let Some(reason) = cancel.reason() {
            return Err(ServiceError::Cancelled(reason));
        }
        let handles = loaded.start_running(&job);
        let task = generate(Arc::clone(&loaded), completer, job.clone(), handles);
        // The suggestion's first whole lines answer at once where the job takes them; the
        // generation goes on, and so does one whose request is cancelled (see the module).
        let outcome = tokio::select! {
            biased;
            outcome = task => outcome,
            answer = self.typed_through_when_ready(&loaded, &job, &mut changes), if job.early_lines => return Ok(answer),
            reason = cancel.cancelled() => return Err(ServiceError::Cancelled(reason)),
        };
        let completion = outcome.map_err(|join| ServiceError::Panicked(join.to_string()))??;
        lock(&self.recent).completions += 1;
        Ok(completion)
    }

    /// The answer that the rest of the last suggestion gives `job`, if it gives one, counted as
    /// a completion: stopped `typed_through`, or [`LINES_SO_FAR`] while its generation runs on.
    fn typed_through(&self, loaded: &Loaded, job: &Job) -> Option<Completion> {
        let answer = lock(&loaded.last_suggestion).continuation(job)?;
        let stop = if answer.partial { LINES_SO_FAR } else { "typed_through" };
        let stats = CompletionStats { stop, ..CompletionStats::empty(job.strategy) };
        self.count_answer(&stats);
        Some(Completion { text: answer.rest, tokens: answer.tokens, origin: answer.origin, stats })
    }

    /// Counts a completion answered without a generation of its own, `stats` its figures.
    fn count_answer(&self, stats: &CompletionStats) {
        let mut figures = lock(&self.recent);
        figures.completions += 1;
        figures.last = serde_json::to_value(stats).ok();
    }

    /// [`Self::typed_through`] as soon as a change of the last suggestion (`changes`) gives
    /// one; never, while none does.
    async fn typed_through_when_ready(
        &self,
        loaded: &Loaded,
        job: &Job,
        changes: &mut watch::Receiver<()>,
    ) -> Completion {
        loop {
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            if let Some(answer) = self.typed_through(loaded, job) {
                return answer;
            }
        }
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
            recent.generated_tokens = loaded.generated_tokens.load(Ordering::Acquire);
        }
        recent.warmed_tokens = self.warming.tokens();
        recent
    }

    fn load(&self, settings: EngineSettings) -> BoxFuture<'_, Result<(), String>> {
        self.load_model(settings).boxed()
    }

    fn set_repositories(&self, repositories: Vec<Repository>) -> BoxFuture<'_, ()> {
        self.attach_repositories(repositories).boxed()
    }

    fn set_preferences_dir(&self, dir: Option<PathBuf>) {
        *lock(&self.preferences) = dir;
    }

    fn save_learned(&self) -> BoxFuture<'_, ()> {
        async move {
            let Load::Ready(loaded) = self.state() else { return };
            // At shutdown nobody waits for a generation that runs on.
            if let Some(running) = lock(&loaded.running).as_ref() {
                running.handles.stop.cancel(Cancelled::Abandoned);
            }
            saving::save(&loaded.completer, &loaded.calibration).await;
        }
        .boxed()
    }

    fn warm(&self, job: Job) {
        let id = self.warming.start();
        let (warming, states) = (Arc::clone(&self.warming), self.load.subscribe());
        tokio::spawn(async move {
            if let Load::Ready(loaded) = settled(states).await {
                warming::run(warming, Arc::clone(&loaded.completer), job, id).await;
            }
        });
    }

    fn complete(&self, job: Job, cancel: CancelToken) -> BoxFuture<'_, Result<Completion, ServiceError>> {
        self.run(job, cancel).boxed()
    }

    fn feedback(&self, suggestion: &Completion, verdict: Verdict) {
        let Load::Ready(loaded) = self.state() else { return };
        let tokens = loaded.teacher.teach(&suggestion.text, &suggestion.tokens, &suggestion.origin, &verdict);
        tracing::debug!("feedback {verdict:?} on a suggestion: {tokens} tokens taught to the preference cache");
        loaded.learned.tell();
        if matches!(&verdict, Verdict::Accepted(taken) if taken.end == suggestion.text.len()) {
            self.warming.interrupt();
            loaded.prepare_next(&suggestion.text);
        }
    }
}

/// The model's state once a load has ended (ready or failed), waiting while it has not: idle, the
/// load has not been asked for yet, and it will be. `Idle` if the engine is gone.
async fn settled(mut states: watch::Receiver<Load>) -> Load {
    let waiting = states.wait_for(|state| !matches!(state, Load::Idle | Load::Loading { .. })).await;
    waiting.map(|state| state.clone()).unwrap_or(Load::Idle)
}

/// Runs `job` on the model `completer` holds, on a blocking thread, as the registered generation
/// `handles`; whatever it ends with is remembered for typed-through answers before the model is
/// given back, whether or not anyone awaits the task.
fn generate(
    loaded: Arc<Loaded>,
    mut completer: tokio::sync::OwnedMutexGuard<Completer>,
    job: Job,
    handles: RunningHandles,
) -> tokio::task::JoinHandle<Result<Completion, CompletionError>> {
    tokio::task::spawn_blocking(move || {
        let request = job.request();
        let mut lines = |lines: Completion| loaded.remember(&job, &lines);
        let result = completer.complete_following(&request, &handles.stop, &handles.typed, &mut lines);
        loaded.finish_running(handles.id, &job, &result, completer.recent_stats());
        loaded.learned.tell();
        result
    })
}

/// Opens (or, the first time, builds) the common datastore on a background
/// thread and hands it to the completer; completions are served without it
/// until then. A store refined for this model is preferred. Calibration waits
/// while it is opened or built: a build shares the cores with the measured passes.
fn attach_common_store(
    tokenizer: Tokenizer,
    info: ModelInfo,
    completer: Arc<tokio::sync::Mutex<Completer>>,
    calibration: Arc<CalibrationControl>,
) {
    std::thread::spawn(move || {
        let opened = {
            let _building = calibration.want();
            completion::common::open_for_model(&tokenizer, &info)
        };
        match opened {
            Ok(store) => completer.blocking_lock().set_common(store),
            Err(error) => tracing::warn!("serving without the common datastore: {error:#}"),
        }
    });
}
