//! Keeping the prefill of a request within its latency bound
//! ([`CompletionRequest::prompt_latency`](super::CompletionRequest)): a prompt whose uncached
//! part would take longer to read is cut to a shorter window before the cursor.
//!
//! A cold prompt of 2,000 tokens takes 3 s to read on two AVX-512 cores and 12 s on two AVX2
//! cores of the Zen 1 class, which is how long the first suggestion after a start, or after a
//! jump to another file, would take. Shorter windows come from a fixed list, and the window of
//! the prompt before is tried first, so that the requests that follow a cut one (the person
//! types on) choose the same window, whose cache they reuse, without building the prompts of the
//! others; the whole window takes over as soon as what is left of it to read fits the bound (a
//! warm-up reads it in the background, after the short one).
//!
//! What reading costs on this machine, the time to prefill `n` new tokens after `c` cached
//! ones, is learned from the prefills the engine runs (and one short timed prefill as the server
//! loads the model). A token's cost grows with the positions before it (attention reads each of
//! them): `n × base × (1 + POSITION_WEIGHT × (c + n / 2))` milliseconds. The shape is fixed;
//! `base` is learned, each long enough prefill moving it halfway to what that prefill measured.

use std::time::Duration;

use anyhow::Result;

use super::prompt::Prompt;

/// The windows (most prompt tokens) a prompt may be cut to, longest first.
const SHORTER_WINDOWS: [usize; 12] = [1792, 1536, 1280, 1024, 896, 768, 640, 512, 448, 384, 320, 256];

/// What each position before a token adds to that token's cost, as a share of the cost of a
/// token with nothing before it. For the default model, `copilotd complete --prompt-tokens N`:
/// 247 new tokens in 1.00 s, 395 in 1.77 s, 939 in 4.91 s and 1,920 in 12.36 s (AVX2, Zen 1
/// class), a fit of 0.8e-3; 1.1e-3 from the prefill rates at 512 and 1,800 tokens (AVX-512,
/// Zen 4 class). Larger models spend more of a token on their weights, and less on attention:
/// for them the shape overestimates long prompts, and the windows chosen are on the short side.
const POSITION_WEIGHT: f64 = 1.0e-3;

/// Prefills shorter than this are not learned from: fixed costs per pass weigh too much in them.
const LEAST_LEARNED_TOKENS: usize = 32;

/// The learned prefill cost.
#[derive(Debug, Clone, Default)]
pub struct PrefillCost {
    /// Milliseconds of a token with nothing before it; `None` until a prefill was seen.
    base_ms: Option<f64>,
}

impl PrefillCost {
    /// Learns from a prefill of `new` tokens after `cached` ones that took `took`.
    pub fn observe(&mut self, new: usize, cached: usize, took: Duration) {
        if new < LEAST_LEARNED_TOKENS {
            return;
        }
        let measured = took.as_secs_f64() * 1000.0 / shape(new, cached);
        self.base_ms = Some(match self.base_ms {
            Some(base) => (base + measured) / 2.0,
            None => measured,
        });
    }

    /// Milliseconds a prefill of `new` tokens after `cached` ones is expected to take; `None`
    /// before any prefill was seen.
    pub fn estimate_ms(&self, new: usize, cached: usize) -> Option<f64> {
        self.base_ms.map(|base| base * shape(new, cached))
    }
}

/// The prompt a request is answered with, and the whole window's when that one is shorter.
#[derive(Debug, Clone)]
pub struct TimelyPrompt {
    pub prompt: Prompt,
    /// The prompt of the whole window, when `prompt` is cut shorter to be read in time.
    pub whole: Option<Prompt>,
    /// The window `prompt` was cut to, if it was.
    pub window: Option<usize>,
}

/// The prompt to answer with within `latency`: `whole` (the prompt of the whole window) when
/// its tokens not yet cached (`cached` tells how many a prompt finds in the cache) are read in
/// time, or when the cost is not known yet or there is no bound; else the prompt of the window
/// `last` (the prompt before's) if it is read in time, or of the longest of [`SHORTER_WINDOWS`]
/// that is (`in_window` builds them), or of the shortest when none is.
pub fn timely_prompt(
    whole: Prompt,
    latency: Option<Duration>,
    cost: &PrefillCost,
    cached: impl Fn(&[u32]) -> usize,
    mut in_window: impl FnMut(usize) -> Result<Prompt>,
    last: Option<usize>,
) -> Result<TimelyPrompt> {
    let in_time = |prompt: &Prompt| {
        let reused = cached(&prompt.tokens).min(prompt.tokens.len());
        match (latency, cost.estimate_ms(prompt.tokens.len() - reused, reused)) {
            (Some(latency), Some(ms)) => ms <= latency.as_secs_f64() * 1000.0,
            _ => true,
        }
    };
    if in_time(&whole) {
        return Ok(TimelyPrompt { prompt: whole, whole: None, window: None });
    }
    let windows = SHORTER_WINDOWS.into_iter().filter(|&window| window < whole.tokens.len());
    let mut shorter = None;
    let last = last.filter(|&last| SHORTER_WINDOWS.contains(&last) && last < whole.tokens.len());
    for window in last.into_iter().chain(windows) {
        let prompt = in_window(window)?;
        let read_in_time = in_time(&prompt);
        shorter = Some((prompt, window));
        if read_in_time {
            break;
        }
    }
    Ok(match shorter {
        Some((prompt, window)) => TimelyPrompt { prompt, whole: Some(whole), window: Some(window) },
        None => TimelyPrompt { prompt: whole, whole: None, window: None },
    })
}

/// The cost of `new` tokens after `cached` ones, in costs of a token with nothing before it.
fn shape(new: usize, cached: usize) -> f64 {
    new as f64 * (1.0 + POSITION_WEIGHT * (cached as f64 + new as f64 / 2.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_is_learned_from_long_enough_prefills_and_grows_with_the_positions_before() {
        let mut cost = PrefillCost::default();
        assert_eq!(cost.estimate_ms(100, 0), None, "nothing seen yet");
        cost.observe(LEAST_LEARNED_TOKENS - 1, 0, Duration::from_secs(1));
        assert_eq!(cost.estimate_ms(100, 0), None, "too short to learn from");
        // 1,000 tokens from nothing in 3 s: a token with nothing before it costs 2 ms.
        cost.observe(1000, 0, Duration::from_secs(3));
        let estimate = |new, cached| cost.estimate_ms(new, cached).unwrap();
        assert!((estimate(1000, 0) - 3000.0).abs() < 1e-6);
        assert!((estimate(100, 0) - 210.0).abs() < 1e-6);
        assert!(estimate(100, 2000) > 2.0 * estimate(100, 0), "later tokens cost more");
        // Each prefill moves the learned cost halfway to what it measured.
        cost.observe(1000, 0, Duration::from_secs(6));
        assert!((cost.estimate_ms(1000, 0).unwrap() - 4500.0).abs() < 1e-6);
    }

    /// A prompt of `len` tokens counting up from `first`.
    fn prompt(first: u32, len: usize) -> Prompt {
        Prompt { tokens: (first..first + len as u32).collect(), healed: String::new() }
    }

    /// The window chosen for a 2,000-token prompt when `cached` tells what is cached and the
    /// prompt before was cut to `last`, with a token costing 1 ms (and more after others) and a
    /// bound of 600 ms: the whole prompt starts at token 0, a window of `w` tokens at token
    /// `2000 - w`.
    fn chosen(cost: &PrefillCost, cached: impl Fn(&[u32]) -> usize, last: Option<usize>) -> TimelyPrompt {
        let latency = Some(Duration::from_millis(600));
        let in_window = |window| Ok(prompt(2000 - window as u32, window));
        timely_prompt(prompt(0, 2000), latency, cost, cached, in_window, last).unwrap()
    }

    #[test]
    fn a_prompt_is_cut_to_the_longest_window_read_in_time() {
        let mut cost = PrefillCost::default();
        // Nothing known of the cost yet: the whole window.
        let unknown = chosen(&cost, |_| 0, None);
        assert!(unknown.whole.is_none() && unknown.window.is_none() && unknown.prompt.tokens.len() == 2000);
        cost.observe(100, 0, Duration::from_millis(105));
        // Cold: 512 tokens take 643 ms, 448 take 548 ms.
        let cold = chosen(&cost, |_| 0, None);
        assert_eq!((cold.prompt.tokens.len(), cold.whole.as_ref().map(|w| w.tokens.len())), (448, Some(2000)));
        assert_eq!(cold.window, Some(448));
        // The person typed on after a prompt cut to 384 tokens, which is cached but for its last
        // tokens: it stays, though a cold 448 would be read in time too.
        let typing = chosen(&cost, |tokens| if tokens[0] == 2000 - 384 { 380 } else { 0 }, Some(384));
        assert_eq!((typing.prompt.tokens.len(), typing.window), (384, Some(384)));
        // A warm-up read most of the whole window: what is left of it fits, and it takes over.
        let warmed = chosen(&cost, |tokens| if tokens[0] == 0 { 1900 } else { 0 }, Some(384));
        assert!(warmed.whole.is_none() && warmed.window.is_none() && warmed.prompt.tokens.len() == 2000);
        // The window before is not read in time any more (the person went elsewhere, and a
        // prefill got slower): the longest that is.
        let mut slower = cost.clone();
        slower.observe(100, 0, Duration::from_millis(189));
        assert_eq!(chosen(&slower, |_| 0, Some(448)).window, Some(320));
        // Too slow for every window: the shortest.
        let mut slow = PrefillCost::default();
        slow.observe(100, 0, Duration::from_secs(10));
        assert_eq!(chosen(&slow, |_| 0, Some(448)).prompt.tokens.len(), 256);
        // No bound, or a prompt shorter than every window: the whole window.
        let unbounded = timely_prompt(prompt(0, 2000), None, &slow, |_| 0, |_| unreachable!(), None).unwrap();
        assert!(unbounded.whole.is_none());
        let no_time = Some(Duration::ZERO);
        let short = timely_prompt(prompt(0, 200), no_time, &slow, |_| 0, |_| unreachable!(), Some(256)).unwrap();
        assert_eq!((short.prompt.tokens.len(), short.whole.is_none()), (200, true));
    }
}
