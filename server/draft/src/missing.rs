//! FastCoder's missing table (§4.C): context suffixes for which every
//! datastore returned nothing, so that retrieval is skipped when one recurs.
//!
//! A datastore query fails exactly when no suffix of at least its shortest
//! length matches, so keying the table on the last `key_len` tokens (the
//! largest of the stores' shortest suffix lengths) makes a recorded miss a
//! certain miss — as long as the stores do not change. Entries therefore carry
//! the repository store's generation and are dropped when it moves on.

use std::collections::HashSet;

/// The table of known misses.
pub struct MissingTable {
    key_len: usize,
    capacity: usize,
    generation: u64,
    keys: HashSet<Vec<u32>>,
}

impl MissingTable {
    /// `key_len`: context suffix length used as the key (at least 1);
    /// `capacity`: the table is cleared when it would grow beyond this.
    pub fn new(key_len: usize, capacity: usize) -> MissingTable {
        MissingTable { key_len: key_len.max(1), capacity, generation: 0, keys: HashSet::new() }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgets everything recorded under another generation of the stores.
    pub fn sync_generation(&mut self, generation: u64) {
        if generation != self.generation {
            self.keys.clear();
            self.generation = generation;
        }
    }

    /// Whether `context` ends with a suffix recorded as a miss under
    /// `generation` (first forgetting entries of older generations).
    pub fn is_known_miss(&mut self, context: &[u32], generation: u64) -> bool {
        self.sync_generation(generation);
        self.key(context).is_some_and(|k| self.keys.contains(k))
    }

    /// Records that every store missed for `context` under `generation`.
    pub fn record_miss(&mut self, context: &[u32], generation: u64) {
        self.sync_generation(generation);
        let Some(key) = self.key(context) else { return };
        if self.keys.len() >= self.capacity {
            self.keys.clear();
        }
        if self.capacity > 0 {
            self.keys.insert(key.to_vec());
        }
    }

    fn key<'a>(&self, context: &'a [u32]) -> Option<&'a [u32]> {
        context.len().checked_sub(self.key_len).map(|start| &context[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recurring_suffix_is_a_known_miss() {
        let mut t = MissingTable::new(2, 100);
        assert!(!t.is_known_miss(&[1, 2, 3], 0));
        t.record_miss(&[1, 2, 3], 0);
        assert!(t.is_known_miss(&[9, 9, 2, 3], 0));
        assert!(!t.is_known_miss(&[2, 4], 0));
        assert!(!t.is_known_miss(&[3], 0), "shorter than the key");
    }

    #[test]
    fn a_new_generation_invalidates() {
        let mut t = MissingTable::new(2, 100);
        t.record_miss(&[5, 6], 7);
        assert!(t.is_known_miss(&[5, 6], 7));
        assert!(!t.is_known_miss(&[5, 6], 8));
        assert!(t.is_empty());
        // Entries from the new generation work as before.
        t.record_miss(&[5, 6], 8);
        assert!(t.is_known_miss(&[5, 6], 8));
    }

    #[test]
    fn bounded_by_capacity() {
        let mut t = MissingTable::new(1, 3);
        for k in 0..10u32 {
            t.record_miss(&[k], 0);
            assert!(t.len() <= 3);
            assert!(t.is_known_miss(&[k], 0));
        }
        let mut off = MissingTable::new(1, 0);
        off.record_miss(&[1], 0);
        assert!(!off.is_known_miss(&[1], 0));
    }
}
