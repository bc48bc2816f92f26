//! SPECTRA-CORE's n-gram storage: the forward dictionary S_fwd (a token to
//! the continuations seen after it: many guesses) and the backward
//! dictionary S_bwd (a sequence of up to N−1 tokens to the one token seen
//! after it last: one good guess, built token by token). Both hold the
//! subsequences of every n-gram added, as in the paper, and both are bounded.
//!
//! S_bwd keys a sequence by a 64-bit hash of it, not by its tokens: every token
//! added stores all N−1 suffixes of its history, and the hashes of those come
//! from one pass over it, each step one multiply-and-shift mix. A collision
//! (about one chance in 2^46 per lookup when the map is full) would give a
//! wrong guess, which verification refuses like any other; the output never
//! depends on it.

use super::bounded_map::BoundedMap;

/// Longest n-gram the dictionaries store (N ≤ this).
pub const MAX_NGRAM: usize = 12;

/// Up to `MAX_NGRAM - 1` tokens stored inline: a continuation of S_fwd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    len: u8,
    tokens: [u32; MAX_NGRAM - 1],
}

impl Tokens {
    /// The last `MAX_NGRAM - 1` tokens of `tokens` at most.
    fn new(tokens: &[u32]) -> Tokens {
        let tokens = &tokens[tokens.len().saturating_sub(MAX_NGRAM - 1)..];
        let mut stored = [0; MAX_NGRAM - 1];
        stored[..tokens.len()].copy_from_slice(tokens);
        Tokens { len: tokens.len() as u8, tokens: stored }
    }

    pub fn as_slice(&self) -> &[u32] {
        &self.tokens[..self.len as usize]
    }
}

/// Sizes of the dictionaries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DictionaryLimits {
    /// N: tokens per n-gram (2..=`MAX_NGRAM`).
    pub ngram: usize,
    /// Continuations kept per S_fwd key, most recent first.
    pub continuations_per_key: usize,
    /// Most S_fwd keys held.
    pub forward_keys: usize,
    /// Most S_bwd entries held.
    pub backward_entries: usize,
}

impl Default for DictionaryLimits {
    fn default() -> Self {
        // N = 12, not the paper's 5: the backward search keys on up to eleven tokens of context and
        // the forward guesses run up to eleven tokens (by one cost curve, `spectra` 1.538x against
        // 1.510x with N = 8 and 1.456x with 5, `auto` 1.570x against 1.560x; N = 14 and 16 gained
        // no more than one package's noise; benches/README.md). Filled to the bounds with random
        // tokens (sequences of 50,000 added in turn), the dictionaries held 33–36 MB of resident
        // memory, 41 MB at the peak when a generation turns over (55–69 MB when S_bwd was keyed
        // by its tokens).
        DictionaryLimits { ngram: 12, continuations_per_key: 8, forward_keys: 1 << 16, backward_entries: 1 << 18 }
    }
}

/// S_fwd and S_bwd.
#[derive(Clone, Debug)]
pub struct NgramDictionaries {
    limits: DictionaryLimits,
    forward: BoundedMap<u32, Vec<Tokens>>,
    backward: BoundedMap<u64, u32>,
}

/// The S_bwd keys of the suffixes of `history` (its last `MAX_NGRAM - 1` tokens at most),
/// shortest first: `keys[k - 1]` is the key of its last `k` tokens. Each key is the previous
/// one mixed with one more token (splitmix64's finalizer), so suffixes of different lengths
/// differ even where their tokens are zeros.
fn suffix_keys(history: &[u32]) -> ([u64; MAX_NGRAM - 1], usize) {
    let mut keys = [0u64; MAX_NGRAM - 1];
    let mut key = 0x9E37_79B9_7F4A_7C15u64;
    for (slot, &token) in keys.iter_mut().zip(history.iter().rev()) {
        let mut z = key ^ u64::from(token);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        key = z ^ (z >> 31);
        *slot = key;
    }
    (keys, history.len().min(MAX_NGRAM - 1))
}

impl NgramDictionaries {
    pub fn new(mut limits: DictionaryLimits) -> NgramDictionaries {
        limits.ngram = limits.ngram.clamp(2, MAX_NGRAM);
        limits.continuations_per_key = limits.continuations_per_key.max(1);
        NgramDictionaries {
            limits,
            forward: BoundedMap::new(limits.forward_keys),
            backward: BoundedMap::new(limits.backward_entries),
        }
    }

    pub fn ngram(&self) -> usize {
        self.limits.ngram
    }

    /// Entries held: (S_fwd keys, S_bwd keys).
    pub fn sizes(&self) -> (usize, usize) {
        (self.forward.len(), self.backward.len())
    }

    /// Adds every n-gram of a sequence of real tokens (a prompt, output)
    /// that ends at index `from` or later.
    pub fn add_sequence(&mut self, tokens: &[u32], from: usize) {
        for end in from.max(1)..tokens.len() {
            let history = &tokens[end.saturating_sub(self.limits.ngram - 1)..end];
            self.add(history, tokens[end], tokens[end]);
        }
    }

    /// Adds the n-gram `history ⊕ next` (only the last N−1 tokens of
    /// `history` count) and its subsequences: S_bwd maps every suffix of the
    /// history to `next`, S_fwd maps every token of the history to what
    /// follows it up to `forward_next`, which is `next` or a token explored
    /// for coverage.
    pub fn add(&mut self, history: &[u32], next: u32, forward_next: u32) {
        let history = &history[history.len().saturating_sub(self.limits.ngram - 1)..];
        let (keys, count) = suffix_keys(history);
        for &key in &keys[..count] {
            self.backward.insert(key, next);
        }
        // At most N−1 ≤ MAX_NGRAM−1 history tokens and the next one.
        let mut buffer = [0u32; MAX_NGRAM];
        buffer[..history.len()].copy_from_slice(history);
        buffer[history.len()] = forward_next;
        let window = &buffer[..=history.len()];
        for start in 0..history.len() {
            self.add_continuation(window[start], Tokens::new(&window[start + 1..]));
        }
    }

    /// Puts `continuation` first among the continuations of `key`; an
    /// entry it extends is replaced, an entry that already extends it is
    /// only moved first.
    fn add_continuation(&mut self, key: u32, continuation: Tokens) {
        let limit = self.limits.continuations_per_key;
        let list = self.forward.entry(key, Vec::new);
        let new = continuation.as_slice();
        let found = list.iter().position(|old| {
            let old = old.as_slice();
            old.starts_with(new) || new.starts_with(old)
        });
        let entry = match found {
            Some(at) => {
                let old = list.remove(at);
                if old.as_slice().starts_with(new) {
                    old
                } else {
                    continuation
                }
            }
            None => continuation,
        };
        list.insert(0, entry);
        list.truncate(limit);
    }

    /// The continuations of `token`, most recent first.
    pub fn forward(&self, token: u32) -> &[Tokens] {
        self.forward.get(&token).map_or(&[], Vec::as_slice)
    }

    /// Whether S_fwd has a continuation of `token` starting with `next`.
    pub fn forward_has(&self, token: u32, next: u32) -> bool {
        self.forward(token).iter().any(|c| c.as_slice().first() == Some(&next))
    }

    /// Backward search (Alg. 1, lines 8–14): extends `context` one token at a
    /// time with S_bwd's answer for the longest suffix it knows (up to N−1
    /// tokens), up to `max_len` tokens, stopping where no suffix is known.
    /// Returns the guess and the suffix length that found its first token.
    pub fn backward_guess(&self, context: &[u32], max_len: usize) -> (Vec<u32>, usize) {
        let key_len = self.limits.ngram - 1;
        let mut history: Vec<u32> = context[context.len().saturating_sub(key_len)..].to_vec();
        let mut guess = Vec::new();
        let mut first_match = 0;
        while guess.len() < max_len {
            let (keys, count) = suffix_keys(&history[history.len().saturating_sub(key_len)..]);
            let found = (1..=count).rev().find_map(|k| self.backward.get(&keys[k - 1]).map(|&token| (k, token)));
            let Some((k, token)) = found else { break };
            if guess.is_empty() {
                first_match = k;
            }
            guess.push(token);
            history.push(token);
        }
        (guess, first_match)
    }
}
