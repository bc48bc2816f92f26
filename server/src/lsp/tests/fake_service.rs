//! A [`CompletionService`] that answers from a script instead of a model.

use std::collections::VecDeque;
use std::sync::Mutex;

use copilotd_draft::cancel::CancelToken;
use copilotd_model::Tokenizer;
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::completion::feedback::Verdict;
use crate::completion::{Completion, CompletionError, CompletionStats, EngineSettings};
use crate::engine::{CompletionService, Job, ModelState, Recent, ServiceError};
use crate::sync::lock;
use crate::workspace::Repository;

/// What the fake does with the next job.
#[derive(Debug, Clone)]
pub enum Step {
    /// Completes with this text.
    Answer(&'static str),
    /// Waits until the job is cancelled.
    WaitForCancel,
    Unavailable,
    Fail,
    InvalidCursor,
    /// Reports an engine crash.
    Crashed,
    /// Panics inside the handler.
    Panic,
}

#[derive(Default)]
pub struct FakeService {
    script: Mutex<VecDeque<Step>>,
    /// The token of every job received, in order.
    tokens: Mutex<Vec<CancelToken>>,
    /// Every job received, in order.
    jobs: Mutex<Vec<Job>>,
    /// Every verdict received, with the text of its suggestion, in order.
    verdicts: Mutex<Vec<(String, Verdict)>>,
    /// Every place to warm received, in order.
    warmed: Mutex<Vec<Job>>,
    /// How many times what was learned was saved.
    saves: Mutex<usize>,
    /// How many times a model was loaded.
    loads: Mutex<usize>,
}

impl FakeService {
    pub fn with_script(steps: impl IntoIterator<Item = Step>) -> FakeService {
        FakeService { script: Mutex::new(steps.into_iter().collect()), ..FakeService::default() }
    }

    pub fn token(&self, job: usize) -> CancelToken {
        lock(&self.tokens)[job].clone()
    }

    pub fn jobs(&self) -> Vec<Job> {
        lock(&self.jobs).clone()
    }

    pub fn verdicts(&self) -> Vec<(String, Verdict)> {
        lock(&self.verdicts).clone()
    }

    pub fn saves(&self) -> usize {
        *lock(&self.saves)
    }

    pub fn loads(&self) -> usize {
        *lock(&self.loads)
    }

    pub fn warmed(&self) -> Vec<Job> {
        lock(&self.warmed).clone()
    }

    async fn run(&self, job: Job, cancel: CancelToken) -> Result<Completion, ServiceError> {
        lock(&self.tokens).push(cancel.clone());
        lock(&self.jobs).push(job.clone());
        let step = lock(&self.script).pop_front().unwrap_or(Step::Answer(""));
        match step {
            Step::Answer(text) => Ok(Completion {
                text: text.to_owned(),
                tokens: Vec::new(),
                origin: Default::default(),
                stats: CompletionStats::empty(job.strategy),
            }),
            Step::WaitForCancel => Err(ServiceError::Cancelled(cancel.cancelled().await)),
            Step::Unavailable => Err(ServiceError::Unavailable("no model in this test".to_owned())),
            Step::Fail => Err(CompletionError::Failed(anyhow::anyhow!("the fake failed")).into()),
            Step::InvalidCursor => Err(CompletionError::InvalidCursor(job.cursor).into()),
            Step::Crashed => Err(ServiceError::Panicked("the fake crashed".to_owned())),
            Step::Panic => panic!("the fake panicked"),
        }
    }
}

impl CompletionService for FakeService {
    fn model_state(&self) -> ModelState {
        ModelState::Ready { name: "fake".to_owned(), device: "none".to_owned() }
    }

    fn tokenizer(&self) -> Option<Tokenizer> {
        None
    }

    fn recent(&self) -> Recent {
        Recent::default()
    }

    fn load(&self, _: EngineSettings) -> BoxFuture<'_, Result<(), String>> {
        *lock(&self.loads) += 1;
        async { Ok(()) }.boxed()
    }

    fn set_repositories(&self, _: Vec<Repository>) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }

    fn set_preferences_dir(&self, _: Option<std::path::PathBuf>) {}

    fn save_learned(&self) -> BoxFuture<'_, ()> {
        *lock(&self.saves) += 1;
        async {}.boxed()
    }

    fn complete(&self, job: Job, cancel: CancelToken) -> BoxFuture<'_, Result<Completion, ServiceError>> {
        self.run(job, cancel).boxed()
    }

    fn feedback(&self, suggestion: &Completion, verdict: Verdict) {
        lock(&self.verdicts).push((suggestion.text.clone(), verdict));
    }

    fn warm(&self, job: Job) {
        lock(&self.warmed).push(job);
    }
}
