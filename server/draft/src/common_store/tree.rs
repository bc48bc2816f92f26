//! The precomputed token tree of one n-gram: a trie of the continuations that
//! followed its occurrences, pruned to the most frequent prefixes.

use super::format::Node;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Trie of continuations with a count per node (index 0 is the root).
#[derive(Default)]
pub struct ContinuationTrie {
    token: Vec<u32>,
    count: Vec<u32>,
    children: Vec<Vec<u32>>,
}

impl ContinuationTrie {
    /// Empties the trie for reuse.
    pub fn clear(&mut self) {
        self.token.clear();
        self.count.clear();
        self.children.clear();
        self.push(0);
    }

    fn push(&mut self, token: u32) -> usize {
        self.token.push(token);
        self.count.push(0);
        self.children.push(Vec::new());
        self.token.len() - 1
    }

    /// Adds one occurrence's continuation, counted `weight` times. Inserting
    /// continuations in sorted order makes this O(length): the child sought is
    /// then always the last one added, which is checked first.
    pub fn insert(&mut self, continuation: &[u32], weight: u32) {
        if self.token.is_empty() {
            self.push(0);
        }
        let mut node = 0;
        for &t in continuation {
            let siblings = &self.children[node];
            let last = siblings.last().map(|&c| c as usize).filter(|&c| self.token[c] == t);
            let found = last.or_else(|| siblings.iter().map(|&c| c as usize).find(|&c| self.token[c] == t));
            node = match found {
                Some(c) => c,
                None => {
                    let c = self.push(t);
                    self.children[node].push(c as u32);
                    c
                }
            };
            self.count[node] = self.count[node].saturating_add(weight);
        }
    }

    /// The `budget` most frequent nodes (always whole prefixes: a node is
    /// kept only with its parent), in preorder with children by count
    /// descending, then token. Ties between equal counts go to the smaller
    /// token, then to the node inserted first, so the result is deterministic.
    pub fn prune(&self, budget: usize) -> Vec<Node> {
        if self.token.is_empty() {
            return Vec::new();
        }
        let mut kept = vec![false; self.token.len()];
        let mut frontier: BinaryHeap<(u32, Reverse<u32>, Reverse<usize>)> = BinaryHeap::new();
        let mut kept_count = 0usize;
        for &c in &self.children[0] {
            frontier.push((self.count[c as usize], Reverse(self.token[c as usize]), Reverse(c as usize)));
        }
        while let Some((_, _, Reverse(node))) = frontier.pop() {
            if kept_count == budget {
                break;
            }
            kept_count += 1;
            kept[node] = true;
            for &c in &self.children[node] {
                frontier.push((self.count[c as usize], Reverse(self.token[c as usize]), Reverse(c as usize)));
            }
        }
        let mut out = Vec::with_capacity(kept_count);
        self.emit(0, 0, &kept, &mut out);
        out
    }

    fn emit(&self, node: usize, depth: u8, kept: &[bool], out: &mut Vec<Node>) {
        let mut children: Vec<usize> = self.children[node].iter().map(|&c| c as usize).filter(|&c| kept[c]).collect();
        children.sort_by_key(|&c| (Reverse(self.count[c]), self.token[c]));
        if node != 0 {
            let kept_sum: u32 = children.iter().map(|&c| self.count[c]).fold(0, u32::saturating_add);
            out.push(Node { token: self.token[node], excess: self.count[node] - kept_sum, depth });
        }
        for c in children {
            self.emit(c, depth + 1, kept, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trie(conts: &[(&[u32], u32)]) -> ContinuationTrie {
        let mut t = ContinuationTrie::default();
        t.clear();
        for (c, w) in conts {
            t.insert(c, *w);
        }
        t
    }

    #[test]
    fn excess_sums_back_to_counts() {
        let t = trie(&[(&[1, 2, 3], 1), (&[1, 2], 1), (&[1, 4], 2)]);
        let nodes = t.prune(64);
        let view: Vec<(u32, u32, u8)> = nodes.iter().map(|n| (n.token, n.excess, n.depth)).collect();
        // 1 (count 4) -> 2 (count 2) -> 3 (count 1); 1 -> 4 (count 2).
        assert_eq!(view, vec![(1, 0, 1), (2, 1, 2), (3, 1, 3), (4, 2, 2)]);
    }

    #[test]
    fn pruning_keeps_frequent_whole_prefixes() {
        let t = trie(&[(&[1, 2, 3], 5), (&[7, 8], 3), (&[9], 1)]);
        let nodes = t.prune(3);
        let view: Vec<(u32, u32, u8)> = nodes.iter().map(|n| (n.token, n.excess, n.depth)).collect();
        // Budget 3: 1 (5), 2 (5), 3 (5) beat 7 (3); node 3 needs 1 and 2 first.
        assert_eq!(view, vec![(1, 0, 1), (2, 0, 2), (3, 5, 3)]);
        let nodes = t.prune(2);
        let view: Vec<(u32, u32, u8)> = nodes.iter().map(|n| (n.token, n.excess, n.depth)).collect();
        // The cut child's count stays with its parent as excess.
        assert_eq!(view, vec![(1, 0, 1), (2, 5, 2)]);
    }
}
