//! Merging what another process saved into a cache, so that two daemons on one workspace keep
//! each other's lessons rather than the last one to save overwriting the other's.
//!
//! A three-way merge per sequence: its weight in the file now and when this cache last read or
//! wrote the file (the [`Baseline`]) tell what the other process changed, and that change is
//! applied to this cache's weight. A dismissal here stays a dismissal, and one there counts
//! here too.

use std::collections::HashMap;

use super::{PreferenceCache, MAX_WEIGHT};

/// Each sequence's weight when a cache was last in step with its file.
#[derive(Clone, Debug, Default)]
pub struct Baseline(HashMap<Vec<u32>, u32>);

impl PreferenceCache {
    /// This cache's sequences and weights now, for a later [`merge_saved`](Self::merge_saved).
    pub fn baseline(&self) -> Baseline {
        Baseline(self.slots.iter().flatten().map(|entry| (entry.tokens.clone(), entry.weight)).collect())
    }

    /// Applies to this cache what changed in `saved` (the file as another process left it)
    /// since `base`: a sequence added there is added here (with the larger weight where both
    /// added it: confirmed twice is confirmed once), a weight raised or lowered there is
    /// raised or lowered here by as much, and a sequence gone from there loses here the
    /// weight it had in `base`. Sequences added there become the most recent here.
    pub fn merge_saved(&mut self, saved: &PreferenceCache, base: &Baseline) {
        let mut theirs: Vec<_> = saved.slots.iter().flatten().collect();
        theirs.sort_by_key(|entry| entry.last_used);
        for entry in theirs {
            let ours = self.weight(&entry.tokens).unwrap_or(0);
            match base.0.get(&entry.tokens) {
                None => self.set_weight(&entry.tokens, ours.max(entry.weight)),
                Some(&before) if before != entry.weight => {
                    self.set_weight(&entry.tokens, (ours + entry.weight).saturating_sub(before))
                }
                Some(_) => {}
            }
        }
        for (tokens, &before) in &base.0 {
            if !saved.by_content.contains_key(tokens) {
                let ours = self.weight(tokens).unwrap_or(0);
                self.set_weight(tokens, ours.saturating_sub(before));
            }
        }
    }

    /// Gives the sequence `tokens` the weight `weight` (at most [`MAX_WEIGHT`]): added if it
    /// is not held, removed at zero.
    fn set_weight(&mut self, tokens: &[u32], weight: u32) {
        match self.by_content.get(tokens) {
            Some(&slot) if weight == 0 => self.remove(slot as usize),
            Some(&slot) => {
                if let Some(entry) = self.slots[slot as usize].as_mut() {
                    entry.weight = weight.min(MAX_WEIGHT);
                }
            }
            None => self.upsert(tokens, weight, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pref_cache::{CacheConfig, ACCEPTED_BONUS, CONFIRMED_WEIGHT};

    fn cache() -> PreferenceCache {
        PreferenceCache::new(CacheConfig { activation: 0, ..CacheConfig::default() })
    }

    /// A cache holding what `base` holds, as a process that loaded it would.
    fn copy(of: &PreferenceCache) -> PreferenceCache {
        let mut copy = cache();
        copy.merge_saved(of, &Baseline::default());
        copy
    }

    #[test]
    fn two_processes_keep_each_others_lessons() {
        let mut file = cache();
        file.insert(&[1, 2, 3]);
        file.insert(&[4, 5, 6]);
        file.insert(&[7, 8, 9]);
        let base = file.baseline();
        let (mut a, mut b) = (copy(&file), copy(&file));
        a.accept(&[10, 11, 12]);
        a.accept(&[1, 2, 3]);
        a.reject(&[4, 5], &[6]);
        b.accept(&[20, 21, 22]);
        b.accept(&[1, 2, 3]);
        b.insert(&[10, 11, 12]);
        b.reject(&[7, 8], &[9]);
        // B saved first; A merges the file B left before saving.
        a.merge_saved(&b, &base);
        assert_eq!(a.weight(&[10, 11, 12]), Some(CONFIRMED_WEIGHT + ACCEPTED_BONUS), "added on both sides: the larger");
        assert_eq!(a.weight(&[20, 21, 22]), Some(CONFIRMED_WEIGHT + ACCEPTED_BONUS), "B's acceptance kept");
        assert_eq!(a.weight(&[1, 2, 3]), Some(CONFIRMED_WEIGHT + 2 * ACCEPTED_BONUS), "both acceptances count");
        assert_eq!(a.weight(&[4, 5, 6]), None, "A's dismissal stays");
        assert_eq!(a.weight(&[7, 8, 9]), None, "B's dismissal counts");
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn a_file_nobody_else_changed_changes_nothing() {
        let mut file = cache();
        file.accept(&[1, 2, 3]);
        let base = file.baseline();
        let mut ours = copy(&file);
        ours.reject(&[1, 2], &[3]);
        ours.insert(&[5, 6, 7]);
        let before = ours.baseline().0;
        ours.merge_saved(&file, &base);
        assert_eq!(ours.baseline().0, before);
    }
}
