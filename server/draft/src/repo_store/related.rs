//! Which files of the store share the most n-grams with a piece of text: how the server picks
//! the repository files a FIM prompt shows the model before the current file.

use std::collections::{HashMap, HashSet};

use super::{RepositoryStore, MAX_SUFFIX};

impl RepositoryStore {
    /// The files holding the most distinct `n`-grams of the `contexts` (`n` in `1..=MAX_SUFFIX`;
    /// no n-gram spans two contexts),
    /// with how many each holds, most first, ties by path; `exclude` (the current file) is
    /// never listed. An n-gram that occurs more than `max_occurrences` times in the store is
    /// boilerplate and counts for no file. At most `max_occurrences + 1` occurrences are read
    /// per n-gram, so the cost depends on the context's length, not on the store's size.
    /// Occurrences are the index's: followed by at least one more token of their file.
    pub fn files_sharing(
        &self,
        contexts: &[&[u32]],
        n: usize,
        max_occurrences: usize,
        exclude: Option<&str>,
    ) -> Vec<(&str, usize)> {
        if n == 0 || n > MAX_SUFFIX {
            return Vec::new();
        }
        let excluded = exclude.and_then(|path| self.slot(path));
        let mut seen = HashSet::new();
        let mut counts: HashMap<u32, usize> = HashMap::new();
        let mut files = Vec::with_capacity(max_occurrences + 1);
        for gram in contexts.iter().flat_map(|context| context.windows(n)) {
            if !seen.insert(gram) {
                continue;
            }
            let Some((matched, occurrences)) = self.index.longest_match(&self.files, gram, n) else {
                continue;
            };
            if matched < n {
                continue;
            }
            files.clear();
            files.extend(occurrences.take(max_occurrences + 1).map(|p| p.file));
            if files.len() > max_occurrences {
                continue;
            }
            files.sort_unstable();
            files.dedup();
            for &file in files.iter().filter(|&&file| Some(file) != excluded) {
                *counts.entry(file).or_default() += 1;
            }
        }
        let mut ranked: Vec<(&str, usize)> =
            counts.into_iter().map(|(slot, count)| (&*self.files[slot as usize].path, count)).collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        ranked
    }
}
