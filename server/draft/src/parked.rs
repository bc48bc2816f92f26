//! KV caches of earlier prompts, set aside so that a prompt that begins like one of them (the
//! person went back to a file, or to a place far away in the same file) reuses it instead of
//! prefilling from nothing. A session holds one live cache in its model; the others wait here,
//! the least recently used dropped first once there are too many or they hold too much memory.

/// A cache set aside, and the tokens whose keys and values it holds.
pub struct Parked<C> {
    pub tokens: Vec<u32>,
    pub cache: C,
    bytes: usize,
}

/// The caches set aside, least recently used first.
pub struct ParkedCaches<C> {
    caches: Vec<Parked<C>>,
    max_caches: usize,
    max_bytes: usize,
}

impl<C> ParkedCaches<C> {
    /// At most `max_caches` caches holding at most `max_bytes` together.
    pub fn new(max_caches: usize, max_bytes: usize) -> Self {
        ParkedCaches { caches: Vec::new(), max_caches, max_bytes }
    }

    /// Sets `cache` aside (it holds `tokens`, in `bytes` of memory) as the most recently used,
    /// dropping the least recently used ones past the limits; a cache larger than the memory
    /// limit on its own is not kept.
    pub fn park(&mut self, tokens: Vec<u32>, cache: C, bytes: usize) {
        if tokens.is_empty() || self.max_caches == 0 || bytes > self.max_bytes {
            return;
        }
        self.caches.push(Parked { tokens, cache, bytes });
        while self.caches.len() > self.max_caches || self.bytes() > self.max_bytes {
            self.caches.remove(0);
        }
    }

    /// Takes out the cache sharing the longest prefix with `prompt` among those `prompt` would
    /// keep at least half of (the others stay aside whole), if that prefix is longer than
    /// `more_than` tokens.
    pub fn take_longest(&mut self, prompt: &[u32], more_than: usize) -> Option<Parked<C>> {
        let (index, shared) = self.longest(prompt)?;
        (shared > more_than).then(|| self.caches.remove(index))
    }

    /// The tokens [`Self::take_longest`] would find cached for `prompt`, taking nothing out.
    pub fn longest_shared(&self, prompt: &[u32]) -> usize {
        self.longest(prompt).map_or(0, |(_, shared)| shared)
    }

    /// The cache sharing the longest prefix with `prompt` among those `prompt` keeps at least
    /// half of (the most recently used of equals), and that prefix's length.
    fn longest(&self, prompt: &[u32]) -> Option<(usize, usize)> {
        self.caches
            .iter()
            .enumerate()
            .map(|(index, parked)| (index, shared_prefix(&parked.tokens, prompt), parked.tokens.len()))
            .filter(|&(_, shared, len)| keeps_most(shared, len))
            .map(|(index, shared, _)| (index, shared))
            .max_by_key(|&(index, shared)| (shared, index))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.caches.len()
    }

    fn bytes(&self) -> usize {
        self.caches.iter().map(|parked| parked.bytes).sum()
    }
}

/// Whether a prompt that shares `shared` tokens with a cache of `len` keeps at least half of it.
pub fn keeps_most(shared: usize, len: usize) -> bool {
    2 * shared >= len
}

/// Tokens at the start of `a` and `b` that are equal.
pub fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_sharing_the_longest_prefix_is_taken_if_it_shares_enough() {
        let mut parked = ParkedCaches::new(4, 1000);
        parked.park(vec![1, 2, 3, 4], "a", 10);
        parked.park(vec![1, 2, 9], "b", 10);
        parked.park(vec![7, 8], "c", 10);
        assert_eq!(parked.longest_shared(&[1, 2, 3, 5]), 3);
        assert!(parked.take_longest(&[1, 2, 3, 5], 3).is_none());
        let taken = parked.take_longest(&[1, 2, 3, 5], 2).unwrap();
        assert_eq!((taken.cache, taken.tokens), ("a", vec![1, 2, 3, 4]));
        assert_eq!(parked.len(), 2);
        assert!(parked.take_longest(&[5], 0).is_none());
        // A prompt that would keep less than half of a cache leaves it aside.
        parked.park(vec![4, 5, 6, 7, 8], "d", 10);
        assert_eq!(parked.longest_shared(&[4, 5, 0]), 0);
        assert!(parked.take_longest(&[4, 5, 0], 0).is_none());
        assert_eq!(parked.take_longest(&[4, 5, 6, 0], 0).unwrap().cache, "d");
    }

    #[test]
    fn the_least_recently_used_go_first_past_either_limit() {
        let mut parked = ParkedCaches::new(2, 25);
        parked.park(vec![1], "a", 10);
        parked.park(vec![2], "b", 10);
        parked.park(vec![3], "c", 10);
        assert_eq!(parked.len(), 2, "too many");
        assert!(parked.take_longest(&[1], 0).is_none());
        parked.park(vec![4], "d", 20);
        assert_eq!(parked.len(), 1, "too much memory");
        assert_eq!(parked.take_longest(&[4], 0).unwrap().cache, "d");
        parked.park(vec![5], "e", 26);
        parked.park(Vec::new(), "f", 1);
        assert_eq!(parked.len(), 0, "too large on its own, or empty");
    }
}
