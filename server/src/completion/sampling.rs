//! What a user asks of sampling (`temperature`, `top_p`, `seed`), checked once for the CLI and
//! the settings alike, and turned into the decode loop's parameters for one request.
//!
//! Temperature 0 is greedy decoding (the default). Above 0 every strategy samples losslessly:
//! its output follows the model's tempered, nucleus-filtered distribution exactly as plain
//! sampling would (the verification is SPECTRA's Algorithm 4, see `copilotd_draft::verify`).
//!
//! The seed works per request: each request's random generator is seeded from the user's seed
//! and the request's prompt tokens, never from earlier requests, so different prompts draw
//! independently. Under `ar` one request (same buffer, cursor, model and settings) then gives
//! the same completion every time. Under a drafting strategy the draws also follow the drafts
//! (one draw per child tried), and drafts depend on what the drafters learned from earlier
//! requests and on the measured cost curve: the same seed reproduces the text when the drafts
//! are the same, and otherwise gives a sample of the same distribution. Each `copilotd complete`
//! saves the acceptance counts it learned, which shape the next one's drafts: across runs the
//! text repeats under `ar`, or with `--fixed-budget`, whose draft trees do not follow the
//! counts. Without a seed every request draws fresh randomness.

use copilotd_draft::checksum;
use copilotd_draft::verify::SamplingParams;

/// Sampling settings as the user gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0: greedy; above: sampling at this temperature.
    pub temperature: f32,
    /// Nucleus: sample among the most likely tokens that reach this mass; 1: all tokens.
    pub top_p: f32,
    /// Seeds each request's draws (with its prompt); `None`: fresh randomness per request.
    pub seed: Option<u64>,
}

impl Sampling {
    /// Greedy decoding, the default.
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_p: 1.0, seed: None };

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// The decode loop's parameters for a request on `prompt`; `None` for greedy decoding.
    pub fn params_for(&self, prompt: &[u32]) -> Option<SamplingParams> {
        if self.is_greedy() {
            return None;
        }
        let seed = match self.seed {
            Some(seed) => {
                let mut ids = vec![seed as u32, (seed >> 32) as u32];
                ids.extend_from_slice(prompt);
                checksum::of_ids(&ids)
            }
            None => rand::random(),
        };
        Some(SamplingParams { temperature: self.temperature, top_p: self.top_p, seed })
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling::GREEDY
    }
}

/// A temperature: a number >= 0, finite also as the `f32` it is used as.
pub fn temperature(value: f64) -> Result<f32, String> {
    if (value as f32).is_finite() && value >= 0.0 {
        Ok(value as f32)
    } else {
        Err(format!("temperature must be a number >= 0 (0: greedy), got {value}"))
    }
}

/// A nucleus mass: a number in (0, 1].
pub fn top_p(value: f64) -> Result<f32, String> {
    if value > 0.0 && value <= 1.0 {
        Ok(value as f32)
    } else {
        Err(format!("top_p must be a number in (0, 1], got {value}"))
    }
}

/// A command-line temperature (for clap).
pub fn parse_temperature(text: &str) -> Result<f32, String> {
    temperature(text.trim().parse().map_err(|_| format!("temperature must be a number >= 0, got '{text}'"))?)
}

/// A command-line nucleus mass (for clap).
pub fn parse_top_p(text: &str) -> Result<f32, String> {
    top_p(text.trim().parse().map_err(|_| format!("top_p must be a number in (0, 1], got '{text}'"))?)
}

/// A command-line seed (for clap): an integer in 0..=2^64-1.
pub fn parse_seed(text: &str) -> Result<u64, String> {
    text.trim().parse().map_err(|_| format!("seed must be an integer in 0..={}, got '{text}'", u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_has_no_parameters_and_sampling_has_the_users() {
        assert_eq!(Sampling::GREEDY.params_for(&[1, 2]), None);
        let sampling = Sampling { temperature: 0.8, top_p: 0.9, seed: Some(3) };
        let params = sampling.params_for(&[1, 2]).unwrap();
        assert_eq!((params.temperature, params.top_p), (0.8, 0.9));
    }

    #[test]
    fn a_seed_makes_each_prompt_reproducible_and_prompts_independent() {
        let seeded = Sampling { temperature: 0.5, top_p: 1.0, seed: Some(7) };
        let seed = |sampling: Sampling, prompt: &[u32]| sampling.params_for(prompt).unwrap().seed;
        assert_eq!(seed(seeded, &[5, 6, 7]), seed(seeded, &[5, 6, 7]));
        assert_ne!(seed(seeded, &[5, 6, 7]), seed(seeded, &[5, 6, 8]));
        assert_ne!(seed(seeded, &[5, 6, 7]), seed(Sampling { seed: Some(8), ..seeded }, &[5, 6, 7]));
        // High bits of the seed count too.
        assert_ne!(seed(seeded, &[1]), seed(Sampling { seed: Some(7 | 1 << 40), ..seeded }, &[1]));
        let unseeded = Sampling { seed: None, ..seeded };
        assert_ne!(seed(unseeded, &[5, 6, 7]), seed(unseeded, &[5, 6, 7]), "fresh randomness per request");
    }

    #[test]
    fn out_of_range_values_are_clear_errors() {
        assert_eq!(parse_temperature("0.2"), Ok(0.2));
        assert_eq!(parse_temperature("0"), Ok(0.0));
        assert!(parse_temperature("-0.1").unwrap_err().contains("temperature must be a number >= 0"));
        assert!(parse_temperature("inf").is_err() && parse_temperature("NaN").is_err());
        assert!(parse_temperature("1e39").is_err(), "finite as f64, infinite as f32");
        assert!(parse_temperature("warm").unwrap_err().contains("got 'warm'"));
        assert_eq!(parse_top_p("1"), Ok(1.0));
        for bad in ["0", "1.01", "-0.5", "NaN"] {
            assert!(parse_top_p(bad).unwrap_err().contains("top_p must be a number in (0, 1]"), "{bad}");
        }
        assert_eq!(parse_seed("42"), Ok(42));
        for bad in ["1.5", "-1", "seven", "18446744073709551616"] {
            assert!(parse_seed(bad).unwrap_err().contains("seed must be an integer"), "{bad}");
        }
    }
}
