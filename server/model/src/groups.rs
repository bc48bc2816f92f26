//! Cutting a pass's nodes, queries or input rows into groups that share what they load.
//!
//! Groups of a fixed size leave a lone item at the end of some passes (5 = 4 + 1). A lone
//! item shares nothing it loads, so it costs about what a whole group does: a 5-node pass
//! cost as much as a 6-node one (benches/README.md). Both ways below avoid it.

use std::ops::Range;

/// `0..n` in consecutive groups of `size`, except that where that would end in a lone item,
/// the last `size + 1` items go in groups of `size − 1` and two (for `size` of at least 3).
pub(crate) fn ending_in_a_pair(n: usize, size: usize) -> impl Iterator<Item = Range<usize>> {
    let tail = (size >= 3).then(|| [size - 1, 2]);
    cut(n, size, tail)
}

/// `0..n` in consecutive groups of `size`, except that the items left over join the last group
/// where that keeps it within `most` items (so none is alone once `most` exceeds `size`). A
/// value, read by index: a weight product looks its groups up for every block, and building
/// them anew (or allocating them) at each call showed in a one-token pass's profile.
#[derive(Clone, Copy)]
pub(crate) struct LargerGroups {
    n: usize,
    size: usize,
    count: usize,
}

impl LargerGroups {
    pub(crate) fn new(n: usize, size: usize, most: usize) -> LargerGroups {
        let size = size.max(1);
        let left = n % size;
        let joined = n > size && left > 0 && left <= most.saturating_sub(size);
        let count = if joined { n / size } else { n.div_ceil(size) };
        LargerGroups { n, size, count }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Group `k` (`k < len()`): `size` items from `k · size`, the last group up to `n`.
    pub(crate) fn get(&self, k: usize) -> Range<usize> {
        let start = k * self.size;
        start..if k + 1 == self.count { self.n } else { start + self.size }
    }
}

/// Groups of `size`, the last `size + 1` items cut as `tail` where groups of `size` would
/// leave one alone.
fn cut(n: usize, size: usize, tail: Option<[usize; 2]>) -> impl Iterator<Item = Range<usize>> {
    let size = size.max(1);
    let tail = tail.filter(|_| n > size && n % size == 1);
    let full = n / size - usize::from(tail.is_some());
    let sizes = std::iter::repeat_n(size, full).chain(tail.unwrap_or([n % size, 0])).filter(|&s| s > 0);
    sizes.scan(0, |start, s| {
        *start += s;
        Some(*start - s..*start)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn larger_groups(n: usize, size: usize, most: usize) -> impl Iterator<Item = Range<usize>> {
        let groups = LargerGroups::new(n, size, most);
        (0..groups.len()).map(move |k| groups.get(k))
    }

    fn sizes(groups: impl Iterator<Item = Range<usize>>) -> Vec<usize> {
        groups.map(|g| g.len()).collect()
    }

    #[test]
    fn groups_cover_every_item_once_in_order_and_none_is_alone_after_the_first() {
        for size in 1..=6 {
            for n in 0..=40 {
                let pairs: Vec<Range<usize>> = ending_in_a_pair(n, size).collect();
                for most in [size + 1, size + 2] {
                    let larger: Vec<Range<usize>> = larger_groups(n, size, most).collect();
                    for (groups, most) in [(&pairs, size), (&larger, most)] {
                        let covered: Vec<usize> = groups.iter().flat_map(|g| g.clone()).collect();
                        assert_eq!(covered, (0..n).collect::<Vec<_>>(), "n {n}, size {size}");
                        assert!(groups.iter().all(|g| !g.is_empty() && g.len() <= most), "n {n}, size {size}");
                    }
                    if n > size && size >= 2 {
                        assert!(larger.iter().all(|g| g.len() > 1), "n {n}, size {size}: {larger:?}");
                    }
                }
                if n > size && size >= 3 {
                    assert!(pairs.iter().all(|g| g.len() > 1), "n {n}, size {size}: {pairs:?}");
                }
            }
        }
        assert_eq!(sizes(ending_in_a_pair(5, 4)), [3, 2]);
        assert_eq!(sizes(ending_in_a_pair(9, 4)), [4, 3, 2]);
        assert_eq!(sizes(ending_in_a_pair(8, 4)), [4, 4]);
        assert_eq!(sizes(ending_in_a_pair(7, 4)), [4, 3]);
        assert_eq!(sizes(ending_in_a_pair(3, 2)), [2, 1]);
        assert_eq!(sizes(larger_groups(5, 4, 5)), [5]);
        assert_eq!(sizes(larger_groups(9, 4, 5)), [4, 5]);
        assert_eq!(sizes(larger_groups(6, 4, 5)), [4, 2]);
        assert_eq!(sizes(larger_groups(1, 4, 5)), [1]);
        assert_eq!(sizes(larger_groups(6, 4, 6)), [6]);
        assert_eq!(sizes(larger_groups(10, 4, 6)), [4, 6]);
        assert_eq!(sizes(larger_groups(7, 4, 6)), [4, 3]);
        assert_eq!(sizes(larger_groups(16, 4, 6)), [4, 4, 4, 4]);
    }
}
