//! One completion at a cursor: prompt, drafting strategy, speculative
//! decoding, stop rules. Shared by `copilotd complete` and the LSP server so
//! both give the same text for the same buffer and cursor.

pub mod acceptance;
mod brackets;
pub mod calibrate;
pub mod common;
pub mod drafting;
pub mod error;
pub mod feedback;
pub mod line_start;
pub mod model_adapter;
pub mod preferences;
pub mod prompt;
pub mod prompt_latency;
pub mod repo_context;
pub mod sampling;
mod save_failures;
pub mod stop;
pub mod strategy;
pub mod trigger;
pub mod typed_ahead;

pub use calibrate::{Calibrated, Calibration, Unconfirmed};
pub use error::CompletionError;
pub use sampling::Sampling;
pub use strategy::Strategy;
pub use trigger::Trigger;
pub use typed_ahead::TypedAhead;

use crate::model_files;
use crate::workspace::Repository;
use anyhow::Result;
use copilotd_draft::budget::{CostModel, FixedBudget};
use copilotd_draft::cancel::CancelToken;
use copilotd_draft::common_store::CommonStore;
use copilotd_draft::decode::{DecodeHooks, DecodeOptions, DecodeStats, Healing, Session, StopReason};
use copilotd_draft::drafter::Drafter;
use copilotd_draft::fastcoder::FastCoderConfig;
use copilotd_draft::pref_cache::PreferenceCache;
use copilotd_model::{FimTokens, Kernel, LoadOptions, Model, ModelInfo, Tokenizer, WeightFormat};
use drafting::{BudgetSettings, DraftSources};
use model_adapter::LoadedModel;
use preferences::PreferenceFile;
use prompt_latency::{PrefillCost, TimelyPrompt};
use repo_context::RepoContext;
use save_failures::SaveFailures;
use serde::Serialize;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stop::{BlockSyntax, StopRules};

/// Prompt tokens [`Completer::warm`] prefills between its checks for a request: a request
/// waits at most this long a prefill for the model.
const WARM_PIECE: usize = 128;
/// Tokens of [`Completer::time_prefill`]'s prefill.
const PREFILL_PROBE_TOKENS: usize = 64;

/// How the engine is set up: which model, how it decodes.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// A GGUF file or safetensors directory; `None`: the default model.
    pub model: Option<PathBuf>,
    pub threads: Option<usize>,
    pub weights: WeightFormat,
    /// Kernel to run on (default: the model crate's choice).
    pub kernel: Option<Kernel>,
    pub prompt: prompt::PromptBudget,
    /// Use fill-in-the-middle prompts when the model has FIM tokens.
    pub fim: bool,
    /// Put files of the repository before the current one in FIM prompts, when the model
    /// has repository-level tokens (`repo_context`).
    pub repo_context: bool,
    /// Draft tree sizes.
    pub budget: BudgetSettings,
    /// FastCoder's parameters and component switches.
    pub fastcoder: FastCoderConfig,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            model: None,
            threads: None,
            weights: WeightFormat::default(),
            kernel: None,
            prompt: prompt::PromptBudget::default(),
            // Models with fill-in-the-middle tokens see the text after the cursor too.
            fim: true,
            repo_context: true,
            budget: BudgetSettings::default(),
            fastcoder: FastCoderConfig::default(),
        }
    }
}

/// One completion request.
#[derive(Clone, Copy, Debug)]
pub struct CompletionRequest<'a> {
    /// The whole buffer.
    pub text: &'a str,
    /// Byte offset of the cursor in `text`.
    pub cursor: usize,
    /// Workspace-relative path of the buffer, when it has one.
    pub path: Option<&'a str>,
    /// The editor's language id of the buffer (`python`, `rust`, `plaintext`...), when an editor
    /// asks: it sets the block syntax of the stop rules, before the path's extension.
    pub language: Option<&'a str>,
    pub max_tokens: usize,
    pub strategy: Strategy,
    /// Greedy (the default) or lossless sampling.
    pub sampling: Sampling,
    /// Who asked: where code follows the cursor, an editor asking on its own gets nothing.
    pub trigger: Trigger,
    /// Most time the prefill of the prompt's uncached part may take: a prompt that would take
    /// longer is cut to a shorter window before the cursor ([`prompt_latency`]). `None`: the
    /// whole window, however long it takes (the same prompt for the same text every time).
    pub prompt_latency: Option<Duration>,
}

/// Statistics of one completion, as printed by `complete --json`.
#[derive(Clone, Debug, Serialize)]
pub struct CompletionStats {
    pub strategy: Strategy,
    pub prompt_tokens: usize,
    pub reused_prompt_tokens: usize,
    pub new_tokens: usize,
    pub forward_steps: usize,
    pub acceptance_length: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub draft_ms: f64,
    pub ms_per_token: f64,
    pub tree_nodes: usize,
    /// Decode milliseconds that the cost curve in use predicts for the forward passes: no
    /// drafting time and no timing noise (`None` before calibration).
    pub curve_ms: Option<f64>,
    pub stop: &'static str,
    /// Whether the prompt was cut to a shorter window to be read within the request's
    /// [`CompletionRequest::prompt_latency`].
    pub window_shortened: bool,
}

impl CompletionStats {
    /// The figures of a completion that generated nothing, stopped [`NOT_GENERATED`] (nothing
    /// to prompt with, or nothing wanted there).
    pub fn empty(strategy: Strategy) -> Self {
        let stats = CompletionStats::new(strategy, &DecodeStats::default(), StopReason::EndOfText, None);
        CompletionStats { stop: NOT_GENERATED, ..stats }
    }

    fn new(strategy: Strategy, stats: &DecodeStats, stop: StopReason, cost: Option<&CostModel>) -> Self {
        CompletionStats {
            strategy,
            prompt_tokens: stats.prompt_tokens,
            reused_prompt_tokens: stats.reused_tokens,
            new_tokens: stats.new_tokens,
            forward_steps: stats.forward_steps,
            acceptance_length: stats.acceptance_length(),
            prefill_ms: stats.prefill_ms,
            decode_ms: stats.decode_ms,
            draft_ms: stats.draft_ms,
            ms_per_token: stats.ms_per_token(),
            tree_nodes: stats.tree_nodes,
            // A fold from +0.0: `sum` of no passes is -0.0, which reports would print as such.
            curve_ms: cost
                .map(|cost| stats.passes.iter().fold(0.0, |ms, &(nodes, cached)| ms + cost.cost(nodes, cached))),
            stop: match stop {
                StopReason::MaxTokens => "max_tokens",
                StopReason::EndOfText => "end_of_text",
                StopReason::StopRule => "stop_rule",
                StopReason::Indentation => "indentation",
                StopReason::ContextFull => "context_full",
            },
            window_shortened: false,
        }
    }
}

/// A finished completion.
#[derive(Clone, Debug)]
pub struct Completion {
    /// Text to insert at the cursor, cut by the stop rules.
    pub text: String,
    /// The generated token ids (before the text was cut; for a typed-through answer, those
    /// of the suggestion it continues).
    pub tokens: Vec<u32>,
    /// Where the text comes from, for feedback on it.
    pub origin: feedback::Origin,
    pub stats: CompletionStats,
}

impl Completion {
    /// No text, with these figures.
    fn empty(stats: CompletionStats) -> Completion {
        Completion { text: String::new(), tokens: Vec::new(), origin: feedback::Origin::default(), stats }
    }

    /// Whether this is a generation's whole lines so far, its rest to follow.
    pub fn is_partial(&self) -> bool {
        self.stats.stop == LINES_SO_FAR
    }
}

/// Tokens/s and acceptance length over recent completions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecentStats {
    pub completions: usize,
    pub tokens_per_second: Option<f64>,
    pub acceptance_length: Option<f64>,
    /// Tokens generated since start, by every completion (cancelled ones included).
    pub generated_tokens: u64,
}

/// How many completions `RecentStats` averages over.
const RECENT_WINDOW: usize = 20;

/// Owns the model and the drafting state; serves completions one at a time.
pub struct Completer {
    session: Session<LoadedModel>,
    tokenizer: Tokenizer,
    info: ModelInfo,
    settings: EngineSettings,
    sources: DraftSources,
    /// Where the preference cache persists ([`Completer::restore_preferences`]).
    preference_file: Option<PreferenceFile>,
    /// Whether saving the acceptance counts, and the preference cache, keeps failing.
    acceptance_saves: SaveFailures,
    preference_saves: SaveFailures,
    /// This model's forward cost by tree size and cache length, once measured or read from
    /// the cache ([`Completer::calibrate`]); until then drafting uses a small fixed tree.
    cost_model: Option<CostModel>,
    /// Each token id's text, for token healing.
    token_texts: Option<std::sync::Arc<[String]>>,
    recent: VecDeque<CompletionStats>,
    /// What reading prompts costs, for keeping requests' prefills within their bound.
    prefill_cost: PrefillCost,
    /// The window the last prompt was cut to, if it was.
    last_window: Option<usize>,
}

/// Loads the model that `settings` name (fetching the default one if needed), as
/// [`Completer::load`] does. Also the entry point of measurements of the bare model (the cost
/// curve benchmark): they load their own model rather than reach into a `Completer`'s.
pub fn load_model(settings: &EngineSettings) -> Result<Model> {
    let path = model_files::resolve(settings.model.as_deref())?;
    let options = LoadOptions { threads: settings.threads, weights: settings.weights, kernel: settings.kernel };
    // The model's errors already say "cannot load model <path>".
    let model = Model::load(&path, &options)?;
    if let Some(warning) = &model.info().kernel_warning {
        tracing::warn!("{warning}");
    }
    Ok(model)
}

impl Completer {
    /// Loads the configured model (fetching the default one if needed).
    pub fn load(settings: &EngineSettings) -> Result<Completer> {
        Ok(Completer::new(load_model(settings)?, settings.clone()))
    }

    pub fn new(model: Model, settings: EngineSettings) -> Completer {
        let tokenizer = model.tokenizer().clone();
        let info = model.info().clone();
        let mut sources = DraftSources::new(settings.fastcoder.clone(), settings.budget);
        let (acceptance_info, fingerprint) = (info.clone(), tokenizer.fingerprint());
        sources.acceptance_files =
            Some(Box::new(move |strategy| acceptance::file(&acceptance_info, fingerprint, strategy)));
        Completer {
            session: Session::new(LoadedModel(model)),
            tokenizer,
            info,
            settings,
            sources,
            preference_file: None,
            acceptance_saves: SaveFailures::default(),
            preference_saves: SaveFailures::default(),
            cost_model: None,
            token_texts: None,
            recent: VecDeque::new(),
            prefill_cost: PrefillCost::default(),
            last_window: None,
        }
    }

    pub fn model_info(&self) -> &ModelInfo {
        &self.info
    }

    /// Whether FIM prompts show files of the repository before the current one (the model
    /// has repository-level tokens and FIM and repository context are on).
    pub fn uses_repo_context(&self) -> bool {
        self.settings.fim && self.settings.repo_context && self.info.fim.is_some_and(|fim| fim.repo.is_some())
    }

    /// Whether prompts show the model the text after the cursor (fill-in-the-middle).
    pub fn fills_in_the_middle(&self) -> bool {
        self.fim().is_some()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The live repository datastores of the workspace being served, one per folder.
    pub fn set_repositories(&mut self, repositories: Vec<Repository>) {
        self.sources.repository = repositories;
    }

    /// Opens the common datastore refined for this model if there is one, else
    /// the one for its tokenizer, building that first (once, cached) when it is
    /// missing or unusable.
    pub fn load_common_store(&mut self) -> Result<()> {
        let store = common::open_for_model(&self.tokenizer, &self.info)?;
        self.sources.common = Some(store);
        Ok(())
    }

    /// Replaces the preference cache with the one persisted for this tokenizer in the workspace
    /// cache directory `workspace_cache` (see [`PreferenceFile`]), which
    /// [`Completer::save_learned`] saves to from now on.
    pub fn restore_preferences(&mut self, workspace_cache: &Path) {
        let config = self.sources.fastcoder.cache;
        let (file, restored) = PreferenceFile::open(workspace_cache, self.tokenizer.fingerprint(), config);
        *crate::sync::lock(&self.sources.cache) = restored.unwrap_or_else(|| PreferenceCache::new(config));
        self.preference_file = Some(file);
    }

    /// Keeps what drafting learned: the budgets' acceptance counts and the preference cache,
    /// where [`Completer::restore_preferences`] found it (not before that). A failure is logged,
    /// once while the same kind of file keeps failing. Never on a completion's path: the engine
    /// saves a while after completions, and at exit.
    pub fn save_learned(&mut self) {
        self.acceptance_saves.log(self.sources.save_acceptance());
        if let Some(file) = &mut self.preference_file {
            self.preference_saves.log(file.save(&mut crate::sync::lock(&self.sources.cache)));
        }
    }

    /// What teaches the preference cache the person's verdicts on this completer's suggestions.
    pub fn teacher(&self) -> feedback::Teacher {
        let context_len = self.sources.fastcoder.cache_context_len;
        feedback::Teacher::new(Arc::clone(&self.sources.cache), self.tokenizer.clone(), context_len)
    }

    /// The common datastore built for this model's tokenizer.
    pub fn set_common(&mut self, store: Arc<CommonStore>) {
        self.sources.common = Some(store);
    }

    pub fn recent_stats(&self) -> RecentStats {
        let (tokens, ms, steps) = self.recent.iter().fold((0usize, 0.0f64, 0usize), |(t, m, s), stats| {
            (t + stats.new_tokens, m + stats.decode_ms, s + stats.forward_steps)
        });
        RecentStats {
            completions: self.recent.len(),
            tokens_per_second: (ms > 0.0).then(|| tokens as f64 * 1000.0 / ms),
            acceptance_length: (steps > 0).then(|| tokens as f64 / steps as f64),
            generated_tokens: self.session.generated_tokens(),
        }
    }

    /// Uses the cached cost curve of this model on this machine, if there is one (cheap);
    /// returns it.
    pub fn use_cached_calibration(&mut self) -> Option<Calibrated> {
        let cached = calibrate::cached(&self.session.model_mut().0);
        if let Some(calibrated) = &cached {
            self.use_cost_model(&calibrated.cost);
        }
        cached
    }

    /// Whether drafting still waits for the cost curve (and uses a small fixed tree meanwhile).
    pub fn needs_calibration(&self) -> bool {
        self.settings.budget.cost_aware && self.cost_model.is_none()
    }

    /// Measures the cost curve (or reads it from the cache, see [`Unconfirmed`]) until
    /// `interrupt` says stop, checked between forward passes. A disturbed measurement is
    /// used until a better one.
    pub fn calibrate_until(
        &mut self,
        unconfirmed: Unconfirmed,
        interrupt: &dyn Fn() -> bool,
    ) -> Result<Calibration, CompletionError> {
        // Measured on top of the cached prompt, which the next request reuses.
        let calibration =
            self.session.on_top_of_cache(|model| calibrate::calibrate(&mut model.0, unconfirmed, interrupt))?;
        match &calibration {
            Calibration::Cached(Calibrated { cost, .. })
            | Calibration::Measured(Calibrated { cost, .. })
            | Calibration::Disturbed(cost) => self.use_cost_model(cost),
            Calibration::Interrupted => {}
        }
        Ok(calibration)
    }

    /// Measures the cost curve now unless it is known, or once more if a confirming measurement
    /// is due and `unconfirmed` says so (blocking: the CLI and benchmarks).
    pub fn calibrate(&mut self, unconfirmed: Unconfirmed) -> Result<(), CompletionError> {
        if self.settings.budget.cost_aware {
            self.calibrate_until(unconfirmed, &|| false)?;
        }
        Ok(())
    }

    /// Prices drafts with `cost` from the next request on.
    pub fn use_cost_model(&mut self, cost: &CostModel) {
        self.sources.update_cost_model(cost);
        self.cost_model = Some(cost.clone());
    }

    /// Completes the buffer at the cursor. `cancel` is checked once per
    /// decode step; once it fires the result is [`CompletionError::Cancelled`].
    pub fn complete(
        &mut self,
        request: &CompletionRequest,
        cancel: &CancelToken,
    ) -> Result<Completion, CompletionError> {
        self.complete_following(request, cancel, &TypedAhead::default(), &mut |_| {})
    }

    /// [`Self::complete`], stopping early once the text generated and `typed` (what the person
    /// typed at the cursor meanwhile) part ways, and giving `lines` the suggestion's whole lines
    /// each time a generated line ends (a beginning of the completion's text: see
    /// [`whole_lines`]), with the stop reason [`LINES_SO_FAR`].
    pub fn complete_following(
        &mut self,
        request: &CompletionRequest,
        cancel: &CancelToken,
        typed: &TypedAhead,
        lines: &mut (dyn FnMut(Completion) + Send),
    ) -> Result<Completion, CompletionError> {
        let text = request.text;
        check_cursor(request)?;
        let (unseen_rest, unseen_lines) = match self.fim() {
            Some(_) => ("", ""),
            None => (rest_of_line(text, request.cursor), lines_after_cursor(text, request.cursor)),
        };
        if let Some(nothing) = unwanted_before(request, unseen_rest) {
            return Ok(nothing);
        }
        let TimelyPrompt { prompt, whole, .. } = self.timely_prompt(request)?;
        if prompt.tokens.is_empty() {
            return Ok(Completion::empty(CompletionStats::empty(request.strategy)));
        }
        let healing = (!prompt.healed.is_empty()).then(|| self.healing(&prompt.healed));
        let line_start = text[..request.cursor].rfind('\n').map_or(0, |i| i + 1);
        let mut rules =
            StopRules::new(&text[line_start..request.cursor], BlockSyntax::for_buffer(request.path, request.language))
                .with_unseen_rest(unseen_rest)
                .with_unseen_lines(unseen_lines);
        if rest_of_line(text, request.cursor).trim().is_empty() {
            rules = rules.with_line_ending_at_cursor();
        }

        let options = DecodeOptions {
            max_new_tokens: request.max_tokens.max(1),
            end_tokens: self.info.eos_tokens.clone(),
            sampling: request.sampling.params_for(&prompt.tokens),
            healing,
        };
        let origin = feedback::Origin {
            context: prompt.tokens[prompt.tokens.len().saturating_sub(feedback::CONTEXT_TOKENS)..].to_vec(),
            healed: prompt.healed.clone(),
            skipped: 0,
            tokenizer: self.tokenizer.fingerprint(),
        };
        let healed = prompt.healed.clone();
        let tokenizer = self.tokenizer.clone();
        let mut published = 0;
        let mut stop = |generated: &[u32]| {
            tokenizer
                .decode(generated)
                .map(|text| {
                    let after = after_cursor(&text, &healed);
                    let (kept, stop) = rules.apply(after);
                    if let Some(whole) = whole_lines(kept).filter(|whole| whole.len() > published) {
                        published = whole.len();
                        let stats = CompletionStats { stop: LINES_SO_FAR, ..CompletionStats::empty(request.strategy) };
                        let origin = origin.clone();
                        lines(Completion { text: whole.to_owned(), tokens: generated.to_vec(), origin, stats });
                    }
                    stop || typed.parted_from(after)
                })
                .unwrap_or(false)
        };
        let hooks = DecodeHooks { stop: &mut stop, cancel };
        let mut drafter = self.sources.drafter(request.strategy, &self.tokenizer)?;
        let strategy = request.strategy;
        if let Some(cost) =
            self.cost_model.as_ref().filter(|_| drafter.is_some() && self.sources.needs_cost_model(strategy))
        {
            self.sources.set_cost_model(strategy, cost.clone());
        }
        let drafter = drafter.as_mut().map(|d| d.as_mut() as &mut dyn Drafter);
        let mut fixed = FixedBudget { nodes: 0, depth: 0 };
        let budget = self.sources.budget_policy(strategy, &mut fixed);
        let session = &mut self.session;
        let generation = copilotd_model::run_on_model_threads(|| {
            session.generate(&prompt.tokens, &options, drafter, budget, hooks)
        })?;
        let (read, cached) =
            (generation.stats.prompt_tokens - generation.stats.reused_tokens, generation.stats.reused_tokens);
        self.prefill_cost.observe(read, cached, Duration::from_secs_f64(generation.stats.prefill_ms / 1000.0));
        let decoded = decode_whole_characters(&self.tokenizer, &generation.tokens)?;
        let text = final_text(&rules, after_cursor(&decoded, &healed), generation.stop).to_string();
        let stats = CompletionStats {
            window_shortened: whole.is_some(),
            ..CompletionStats::new(request.strategy, &generation.stats, generation.stop, self.cost_model.as_ref())
        };
        self.recent.push_back(stats.clone());
        if self.recent.len() > RECENT_WINDOW {
            self.recent.pop_front();
        }
        Ok(Completion { text, tokens: generation.tokens, origin, stats })
    }

    /// Prefills the prompt of `request` before it is asked for, so that the request (or one
    /// whose prompt begins the same) reuses the work; [`WARM_PIECE`] tokens at a time, until
    /// `stop` says to give the model back. A prompt cut to be read within the request's bound is
    /// read first, then the whole window's. Returns the tokens prefilled.
    pub fn warm(&mut self, request: &CompletionRequest, stop: &dyn Fn() -> bool) -> Result<usize, CompletionError> {
        check_cursor(request)?;
        let TimelyPrompt { prompt, whole, .. } = self.timely_prompt(request)?;
        let mut warmed = 0;
        for prompt in std::iter::once(prompt).chain(whole) {
            if prompt.tokens.is_empty() || stop() {
                break;
            }
            let (cached, started) = (self.session.reusable(&prompt.tokens), Instant::now());
            let read = self.session.warm(&prompt.tokens, WARM_PIECE, stop)?;
            self.prefill_cost.observe(read, cached, started.elapsed());
            warmed += read;
        }
        Ok(warmed)
    }

    /// Times a short prefill, on top of the cached prompt, so that requests are kept within their
    /// [`CompletionRequest::prompt_latency`] from the first one on (the language server does,
    /// as it loads the model: 0.26–0.29 s on two AVX2 cores of the Zen 1 class).
    pub fn time_prefill(&mut self) -> Result<(), CompletionError> {
        let cost = &mut self.prefill_cost;
        self.session.on_top_of_cache(|model| {
            let tokens = calibrate::sample_tokens(&model.0, PREFILL_PROBE_TOKENS)?;
            let (cached, started) = (model.0.cache_len(), Instant::now());
            model.0.prefill(&tokens)?;
            let took = started.elapsed();
            tracing::debug!("a prefill of {} tokens took {took:.0?}", tokens.len());
            cost.observe(tokens.len(), cached, took);
            anyhow::Ok(())
        })?;
        Ok(())
    }

    /// The prompt to answer `request` with ([`prompt_latency::timely_prompt`]), trying the
    /// window of the prompt before first.
    fn timely_prompt(&mut self, request: &CompletionRequest) -> Result<TimelyPrompt> {
        let whole = self.prompt(request)?;
        let cached = |tokens: &[u32]| self.session.reusable(tokens);
        let in_window = |window| self.prompt_in_window(request, window);
        let (latency, cost) = (request.prompt_latency, &self.prefill_cost);
        let timely = prompt_latency::timely_prompt(whole, latency, cost, cached, in_window, self.last_window)?;
        self.last_window = timely.window;
        if let Some(whole) = &timely.whole {
            let (whole, cut) = (whole.tokens.len(), timely.prompt.tokens.len());
            tracing::debug!("prompt of {whole} tokens cut to {cut} to be read within {:?}", request.prompt_latency);
        }
        Ok(timely)
    }

    /// The prompt of a request (its cursor checked by the caller), within the model's context
    /// less the room of the request's generation and its deepest draft: FIM when the model has FIM
    /// tokens and FIM is on, after files of the repository when the model has repository-level
    /// tokens, repository context is on and the buffer has a path.
    pub fn prompt(&self, request: &CompletionRequest) -> Result<prompt::Prompt> {
        self.prompt_in_window(request, usize::MAX)
    }

    /// [`Self::prompt`] with at most `window` tokens.
    fn prompt_in_window(&self, request: &CompletionRequest, window: usize) -> Result<prompt::Prompt> {
        let fim = self.fim();
        let repo = match (fim.and_then(|fim| fim.repo), request.path) {
            (Some(tokens), Some(path)) if self.settings.repo_context => {
                Some(RepoContext { tokens, repositories: &self.sources.repository, path })
            }
            _ => None,
        };
        let generation = request.max_tokens + self.settings.budget.max_depth + 1;
        let budget = self.settings.prompt.within_context(self.info.context_length, generation);
        let budget = prompt::PromptBudget { max_tokens: budget.max_tokens.min(window), ..budget };
        prompt::build(&self.tokenizer, request.text, request.cursor, &budget, fim, repo.as_ref())
    }

    /// The model's FIM tokens when prompts use them (the model has them and FIM is on): the
    /// model then sees the text after the cursor.
    fn fim(&self) -> Option<&FimTokens> {
        self.info.fim.as_ref().filter(|_| self.settings.fim)
    }

    /// Completes like [`Completer::complete`], drafting from `sources` instead of the engine's
    /// own, which are left as they were: the one way to compare drafting configurations on one
    /// loaded model (the benchmarks do). Each configuration keeps its own [`DraftSources`] (made
    /// with [`DraftSources::new`], its stores set), and what drafting learns (the preference
    /// cache, acceptance rates) stays in them. The model, its prompt cache and its measured cost
    /// curve are shared.
    pub fn complete_with(
        &mut self,
        sources: &mut DraftSources,
        request: &CompletionRequest,
        cancel: &CancelToken,
    ) -> Result<Completion, CompletionError> {
        std::mem::swap(&mut self.sources, sources);
        let result = self.complete(request, cancel);
        std::mem::swap(&mut self.sources, sources);
        result
    }

    /// The healing of a prompt whose last token, `text`, was taken off (the vocabulary's texts
    /// are decoded once, at the first use).
    fn healing(&mut self, text: &str) -> Healing {
        let tokenizer = &self.tokenizer;
        let token_texts = self.token_texts.get_or_insert_with(|| {
            (0..tokenizer.vocab_size() as u32).map(|id| tokenizer.decode(&[id]).unwrap_or_default()).collect()
        });
        Healing { text: text.to_owned(), token_texts: token_texts.clone() }
    }
}

/// The text of `tokens` without a character that the last of them leave unfinished: a
/// generation that stops inside a character of several bytes (at its token limit) decodes
/// them as U+FFFD, which the editor would insert. At most three bytes of a character can be
/// missing; a text that still ends in U+FFFD without them has it as a character of its own.
fn decode_whole_characters(tokenizer: &Tokenizer, tokens: &[u32]) -> Result<String> {
    let whole = tokenizer.decode(tokens)?;
    if !whole.ends_with(char::REPLACEMENT_CHARACTER) {
        return Ok(whole);
    }
    for dropped in 1..=tokens.len().min(3) {
        let text = tokenizer.decode(&tokens[..tokens.len() - dropped])?;
        if !text.ends_with(char::REPLACEMENT_CHARACTER) {
            return Ok(text);
        }
    }
    Ok(whole)
}

/// The empty answer to `request` where no suggestion is wanted ([`trigger::wanted`]), for a
/// model that sees the text after the cursor when `fills_in_the_middle`; `None` where one is
/// wanted or the cursor is not a character boundary (the completion reports that).
pub fn unwanted(request: &CompletionRequest, fills_in_the_middle: bool) -> Option<Completion> {
    check_cursor(request).ok()?;
    let unseen_rest = if fills_in_the_middle { "" } else { rest_of_line(request.text, request.cursor) };
    unwanted_before(request, unseen_rest)
}

/// [`unwanted`] where the model does not see `unseen_rest` after the cursor on its line.
fn unwanted_before(request: &CompletionRequest, unseen_rest: &str) -> Option<Completion> {
    if trigger::wanted(request.trigger, unseen_rest) {
        return None;
    }
    let stats = CompletionStats { stop: trigger::CODE_AFTER_CURSOR, ..CompletionStats::empty(request.strategy) };
    Some(Completion::empty(stats))
}

/// An error unless the request's cursor is a character boundary in its text.
fn check_cursor(request: &CompletionRequest) -> Result<(), CompletionError> {
    match request.text.is_char_boundary(request.cursor) {
        true => Ok(()),
        false => Err(CompletionError::InvalidCursor(request.cursor)),
    }
}

/// The text after byte `cursor` (a character boundary) on its line, without the line break.
fn rest_of_line(text: &str, cursor: usize) -> &str {
    let rest = &text[cursor..];
    rest[..rest.find('\n').unwrap_or(rest.len())].trim_end_matches('\r')
}

/// The text after the line of byte `cursor`.
fn lines_after_cursor(text: &str, cursor: usize) -> &str {
    text[cursor..].split_once('\n').map_or("", |(_, after)| after)
}

/// The generated text after the cursor: without the healed text that the
/// first tokens restored (nothing while they have restored only a part of it).
fn after_cursor<'a>(generated: &'a str, healed: &str) -> &'a str {
    match generated.strip_prefix(healed) {
        Some(after) => after,
        None if healed.starts_with(generated) => "",
        None => generated,
    }
}

/// The stop reason of the whole lines a generation has given so far
/// ([`Completer::complete_following`]).
pub const LINES_SO_FAR: &str = "lines_so_far";

/// The stop reason of a completion that generated nothing, since nothing was to be generated.
pub const NOT_GENERATED: &str = "not_generated";

/// The suggestion a generation that ended for `stop` gives. One cut off by its token limit
/// ends in an unfinished line (`    def set_x_`), left out when whole lines come before it.
fn final_text<'a>(rules: &StopRules, generated: &'a str, stop: StopReason) -> &'a str {
    if stop != StopReason::MaxTokens {
        return rules.apply_to_end(generated);
    }
    match rules.apply(generated) {
        (kept, true) => kept,
        (kept, false) => whole_lines(kept).unwrap_or(kept),
    }
}

/// The lines of a suggestion so far (`kept`, cut by the stop rules) that more tokens can no
/// longer change: all before its last line break, without trailing white space (a line ending
/// there may lose it); `None` while they hold nothing but white space. Every later text of the
/// suggestion, and so the finished one, begins with them.
fn whole_lines(kept: &str) -> Option<&str> {
    let whole = kept[..kept.rfind('\n')?].trim_end();
    (!whole.trim_start().is_empty()).then_some(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_up_reads_the_window_cut_to_be_read_in_time_then_the_whole_one() {
        use copilotd_test_support::synthetic::{self, Family, GgmlDType, Shape};
        let dir = tempfile::tempdir().unwrap();
        let shape = Shape { context: 4096, ..synthetic::TINY };
        let written =
            synthetic::write_shaped(dir.path(), Family::StarCoder, &shape, "Q8_0", &|_, _| GgmlDType::Q8_0, false);
        let model = Model::load(&written.model, &LoadOptions::default()).unwrap();
        let mut completer = Completer::new(model, EngineSettings { fim: false, ..EngineSettings::default() });
        completer.time_prefill().unwrap();
        let text: String = (0..400).map(|i| format!("total = total + {i}\n")).collect();
        // No prompt is read in a nanosecond: a cold one is cut to the shortest window.
        let request = CompletionRequest {
            text: &text,
            cursor: text.len(),
            path: None,
            language: None,
            max_tokens: 8,
            strategy: Strategy::Ar,
            sampling: Sampling::GREEDY,
            trigger: Trigger::Invoked,
            prompt_latency: Some(Duration::from_nanos(1)),
        };
        let whole = completer.prompt(&request).unwrap().tokens.len();
        assert!(whole > 1000, "{whole}");
        let cut = completer.complete(&request, &CancelToken::new()).unwrap().stats;
        assert!(cut.window_shortened && cut.prompt_tokens <= 256, "{cut:?}");

        // The warm-up reads the short window (cached already), then the whole one; a request after
        // it finds the whole window read and takes it.
        let warmed = completer.warm(&request, &|| false).unwrap();
        assert_eq!(warmed, whole);
        let after = completer.complete(&request, &CancelToken::new()).unwrap().stats;
        assert!(!after.window_shortened, "{after:?}");
        assert_eq!((after.prompt_tokens, after.reused_prompt_tokens), (whole, whole - 1));
    }

    #[test]
    fn a_model_with_a_short_context_completes_a_long_file_within_it() {
        use copilotd_test_support::synthetic::{self, Family, GgmlDType};
        let dir = tempfile::tempdir().unwrap();
        let written = synthetic::write(dir.path(), Family::StarCoder, GgmlDType::Q8_0);
        let model = Model::load(&written.model, &LoadOptions::default()).unwrap();
        let context = model.info().context_length;
        let settings = EngineSettings { fim: false, ..EngineSettings::default() };
        let mut completer = Completer::new(model, settings);
        let text = format!("{}total = total", "total = total + 1\n".repeat(400));
        for (strategy, max_tokens) in [(Strategy::Ar, 40), (Strategy::Pld, 40), (Strategy::Pld, 2 * context)] {
            let request = CompletionRequest {
                text: &text,
                cursor: text.len(),
                path: None,
                language: None,
                max_tokens,
                strategy,
                sampling: Sampling::GREEDY,
                trigger: Trigger::Invoked,
                prompt_latency: None,
            };
            let stats = completer.complete(&request, &CancelToken::new()).unwrap().stats;
            let generation = (max_tokens + BudgetSettings::default().max_depth + 1).min(context / 2);
            assert!(stats.prompt_tokens <= context - generation, "{strategy} {max_tokens}: {stats:?}");
            // A generation asked for more than the context holds ends where it is full.
            if max_tokens > context {
                assert_eq!(stats.stop, "context_full", "{stats:?}");
                assert_eq!(stats.prompt_tokens + stats.new_tokens, context + 1);
            }
        }
    }

    #[test]
    fn saves_that_keep_failing_are_warned_of_once() {
        use crate::lsp::tests::captured_log::CapturedLog;
        use copilotd_draft::budget::CostCurve;
        use copilotd_test_support::synthetic::{self, Family, GgmlDType};
        let dir = tempfile::tempdir().unwrap();
        let written = synthetic::write(dir.path(), Family::StarCoder, GgmlDType::Q8_0);
        let model = Model::load(&written.model, &LoadOptions::default()).unwrap();
        let mut completer = Completer::new(model, EngineSettings::default());
        // Nothing can be made below a regular file, whoever runs the test.
        let blocker = dir.path().join("a file");
        std::fs::write(&blocker, b"").unwrap();
        let counts = blocker.join("acceptance");
        completer.sources.acceptance_files = Some(Box::new(move |strategy| counts.join(format!("{strategy}.json"))));
        let curve = CostCurve::new(vec![(1, 10.0), (32, 40.0)]).unwrap();
        for strategy in [Strategy::Pld, Strategy::FastCoder] {
            completer.sources.set_cost_model(strategy, CostModel::new(vec![(256, curve.clone())]).unwrap());
        }
        // The preference cache's lock cannot be opened: a directory holds its name.
        let workspace = dir.path().join("workspace");
        completer.restore_preferences(&workspace);
        let lock = crate::workspace::paths::preferences_path(&workspace, completer.tokenizer.fingerprint());
        std::fs::create_dir_all(format!("{}.lock", lock.display())).unwrap();

        let log = CapturedLog::default();
        tracing::subscriber::with_default(log.subscriber(), || (0..3).for_each(|_| completer.save_learned()));
        let warnings = |about: &str| log.text().lines().filter(|l| l.contains("WARN") && l.contains(about)).count();
        assert_eq!(warnings("acceptance counts"), 1, "{}", log.text());
        assert_eq!(warnings(".lock"), 1, "{}", log.text());
    }

    #[test]
    fn the_text_after_the_cursor_starts_once_the_healed_text_is_restored() {
        assert_eq!(after_cursor("\n    return x", "\n    "), "return x");
        assert_eq!(after_cursor("\n   ", "\n    "), "", "a part of the healed text is nothing after the cursor");
        assert_eq!(after_cursor("\n    ", "\n    "), "");
        assert_eq!(after_cursor("x = 1", ""), "x = 1");
    }

    #[test]
    fn a_suggestion_cut_off_by_its_token_limit_leaves_out_its_unfinished_line() {
        let rules = StopRules::new("    ", BlockSyntax::Indentation);
        let cut_off = "x = 1\n    y = compu";
        assert_eq!(final_text(&rules, cut_off, StopReason::MaxTokens), "x = 1");
        assert_eq!(final_text(&rules, cut_off, StopReason::EndOfText), cut_off, "the model ended it there");
        assert_eq!(final_text(&rules, "return self.ite", StopReason::MaxTokens), "return self.ite", "one line");
        let past_the_block = "x = 1\n    y = 2\nz = compu";
        assert_eq!(final_text(&rules, past_the_block, StopReason::MaxTokens), "x = 1\n    y = 2", "cut by a rule");
    }

    #[test]
    fn whole_lines_are_those_before_the_last_line_break() {
        assert_eq!(whole_lines("x = 1\n    y = 2\n    ret"), Some("x = 1\n    y = 2"));
        assert_eq!(whole_lines("x = 1\n"), Some("x = 1"));
        assert_eq!(whole_lines("\n    return x\n"), Some("\n    return x"), "the cursor's line ended at once");
        // A line whose end may still be cut, or only white space: nothing yet.
        assert_eq!(whole_lines("x = 1"), None);
        assert_eq!(whole_lines("\n    \n  re"), None);
        assert_eq!(whole_lines(""), None);
        assert_eq!(whole_lines("x = 1  \n"), Some("x = 1"), "trailing white space may be cut at the end");
    }
}
