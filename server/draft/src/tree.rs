//! The draft tree: candidates merged into one trie rooted at the pending
//! token, cut down to a node budget.
//!
//! Node 0 is always the pending token (the root). Every other node continues
//! its parent. A node's weight is the sum of the weights of the candidates
//! that pass through it, so weights never grow along a branch and the
//! heaviest `budget` nodes always form whole prefixes.

use crate::drafter::{Candidate, Source};

/// A token tree in topological order (`parents[i] < i`), ready for one
/// forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftTree {
    pub tokens: Vec<u32>,
    /// `None` only for the root.
    pub parents: Vec<Option<usize>>,
    /// Depth of each node (root = 0).
    pub depths: Vec<usize>,
    /// Summed candidate weight per node (root: total weight).
    pub weights: Vec<f32>,
    /// Source of the heaviest candidate through each node.
    pub sources: Vec<Source>,
    /// Longest context match among the candidates through each node.
    pub matched: Vec<usize>,
    /// Each node's place among its parent's children in the merged
    /// candidates, heaviest first (root: 0); kept when the tree is cut.
    pub sibling_ranks: Vec<usize>,
    /// How many different sources propose each node (root: 0).
    pub agreeing: Vec<usize>,
}

impl DraftTree {
    /// A tree holding only the pending token: one plain autoregressive step.
    pub fn root_only(pending: u32) -> DraftTree {
        DraftTree::root(pending, 0.0, 1)
    }

    /// The root alone, of summed weight `weight`, with room for `nodes` nodes.
    fn root(pending: u32, weight: f32, nodes: usize) -> DraftTree {
        let mut tree = DraftTree::with_capacity(nodes);
        tree.tokens.push(pending);
        tree.parents.push(None);
        tree.depths.push(0);
        tree.weights.push(weight);
        tree.sources.push(Source::Fixed);
        tree.matched.push(0);
        tree.sibling_ranks.push(0);
        tree.agreeing.push(0);
        tree
    }

    /// A tree of no nodes with room for `nodes`.
    fn with_capacity(nodes: usize) -> DraftTree {
        DraftTree {
            tokens: Vec::with_capacity(nodes),
            parents: Vec::with_capacity(nodes),
            depths: Vec::with_capacity(nodes),
            weights: Vec::with_capacity(nodes),
            sources: Vec::with_capacity(nodes),
            matched: Vec::with_capacity(nodes),
            sibling_ranks: Vec::with_capacity(nodes),
            agreeing: Vec::with_capacity(nodes),
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn max_depth(&self) -> usize {
        self.depths.iter().copied().max().unwrap_or(0)
    }

    /// The child of `node` carrying `token`, if the tree has one.
    pub fn child_with_token(&self, node: usize, token: u32) -> Option<usize> {
        (node + 1..self.len()).find(|&i| self.parents[i] == Some(node) && self.tokens[i] == token)
    }

    /// Non-root nodes, heaviest first (ties: shallower, then earlier). Every
    /// prefix of this order is a whole subtree: a parent is never lighter
    /// than its child and is shallower.
    pub fn heaviest_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (1..self.len()).collect();
        order.sort_by(|&a, &b| {
            self.weights[b].total_cmp(&self.weights[a]).then(self.depths[a].cmp(&self.depths[b])).then(a.cmp(&b))
        });
        order
    }

    /// The subtree of the root and the `nodes` heaviest other nodes.
    pub fn keep_heaviest(&self, nodes: usize) -> DraftTree {
        let order = self.heaviest_order();
        self.keep(&order[..nodes.min(order.len())])
    }

    /// The subtree of the root and `nodes`, which must hold the parent of
    /// each of its nodes (other than the root); node order is preserved.
    pub fn keep(&self, nodes: &[usize]) -> DraftTree {
        let mut keep = vec![false; self.len()];
        keep[0] = true;
        for &node in nodes {
            keep[node] = true;
        }
        debug_assert!((1..self.len()).all(|n| !keep[n] || self.parents[n].is_some_and(|p| keep[p])));
        let mut new_index = vec![usize::MAX; self.len()];
        let mut tree = DraftTree::with_capacity(nodes.len() + 1);
        for node in (0..self.len()).filter(|&n| keep[n]) {
            new_index[node] = tree.tokens.len();
            tree.tokens.push(self.tokens[node]);
            tree.parents.push(self.parents[node].map(|p| new_index[p]));
            tree.depths.push(self.depths[node]);
            tree.weights.push(self.weights[node]);
            tree.sources.push(self.sources[node]);
            tree.matched.push(self.matched[node]);
            tree.sibling_ranks.push(self.sibling_ranks[node]);
            tree.agreeing.push(self.agreeing[node]);
        }
        tree
    }

    /// Children of `node` in tree order (heaviest first, see `build`).
    pub fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        (node + 1..self.len()).filter(move |&i| self.parents[i] == Some(node))
    }
}

/// Trie node used while merging candidates.
struct TrieNode {
    token: u32,
    depth: usize,
    weight: f32,
    best_weight: f32,
    source: Source,
    /// The sources of the candidates through the node, one bit each.
    sources: u32,
    matched: usize,
    /// The newest child, and the next older sibling: links instead of a list of children per
    /// node, which cost an allocation each.
    last_child: Option<usize>,
    older_sibling: Option<usize>,
}

/// The children of trie node `node`, newest first.
fn trie_children(trie: &[TrieNode], node: usize) -> impl Iterator<Item = usize> + '_ {
    std::iter::successors(trie[node].last_child, |&child| trie[child].older_sibling)
}

/// Merges `candidates` under the `pending` root, limited to `max_depth`, and
/// keeps the `budget` heaviest non-root nodes (see `keep_heaviest`). Nodes
/// are in breadth-first order with children heaviest first.
pub fn build(pending: u32, candidates: &[Candidate], budget: usize, max_depth: usize) -> DraftTree {
    let mut trie = vec![TrieNode {
        token: pending,
        depth: 0,
        weight: 0.0,
        best_weight: f32::NEG_INFINITY,
        source: Source::Fixed,
        sources: 0,
        matched: 0,
        last_child: None,
        older_sibling: None,
    }];
    for candidate in candidates {
        if candidate.weight.is_nan() || candidate.weight <= 0.0 {
            continue;
        }
        trie[0].weight += candidate.weight;
        let mut node = 0;
        for &token in candidate.tokens.iter().take(max_depth) {
            let existing = trie_children(&trie, node).find(|&c| trie[c].token == token);
            node = match existing {
                Some(child) => child,
                None => {
                    let child = trie.len();
                    let depth = trie[node].depth + 1;
                    trie.push(TrieNode {
                        token,
                        depth,
                        weight: 0.0,
                        best_weight: f32::NEG_INFINITY,
                        source: candidate.source,
                        sources: 0,
                        matched: 0,
                        last_child: None,
                        older_sibling: trie[node].last_child,
                    });
                    trie[node].last_child = Some(child);
                    child
                }
            };
            let entry = &mut trie[node];
            entry.weight += candidate.weight;
            entry.matched = entry.matched.max(candidate.matched);
            entry.sources |= 1 << candidate.source as u32;
            if candidate.weight > entry.best_weight {
                entry.best_weight = candidate.weight;
                entry.source = candidate.source;
            }
        }
    }

    // Emit in breadth-first order with children heaviest first, so parents
    // precede children and verification tries likely tokens first.
    let mut tree = DraftTree::root(pending, trie[0].weight, trie.len());
    let mut queue = std::collections::VecDeque::from([(0usize, 0usize)]);
    let mut children = Vec::new();
    while let Some((trie_node, tree_node)) = queue.pop_front() {
        children.clear();
        children.extend(trie_children(&trie, trie_node));
        children.sort_by(|&a, &b| trie[b].weight.total_cmp(&trie[a].weight).then(a.cmp(&b)));
        for (rank, &child) in children.iter().enumerate() {
            let index = tree.tokens.len();
            tree.tokens.push(trie[child].token);
            tree.parents.push(Some(tree_node));
            tree.depths.push(trie[child].depth);
            tree.weights.push(trie[child].weight);
            tree.sources.push(trie[child].source);
            tree.matched.push(trie[child].matched);
            tree.sibling_ranks.push(rank);
            tree.agreeing.push(trie[child].sources.count_ones() as usize);
            queue.push_back((child, index));
        }
    }
    debug_assert!(tree.parents.iter().enumerate().all(|(i, p)| p.is_none_or(|p| p < i)));
    if budget + 1 >= tree.len() {
        tree
    } else {
        tree.keep_heaviest(budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(tokens: &[u32], weight: f32) -> Candidate {
        Candidate { tokens: tokens.to_vec(), weight, source: Source::Fixed, matched: 0 }
    }

    #[test]
    fn shared_prefixes_merge_and_weights_add_up() {
        let tree = build(9, &[cand(&[1, 2, 3], 1.0), cand(&[1, 2, 4], 2.0), cand(&[5], 0.5)], 64, 10);
        assert_eq!(tree.tokens, vec![9, 1, 5, 2, 4, 3]);
        assert_eq!(tree.parents, vec![None, Some(0), Some(0), Some(1), Some(3), Some(3)]);
        assert_eq!(tree.depths, vec![0, 1, 1, 2, 3, 3]);
        assert_eq!(tree.weights, vec![3.5, 3.0, 0.5, 3.0, 2.0, 1.0]);
        assert_eq!(tree.sibling_ranks, vec![0, 0, 1, 0, 0, 1]);
    }

    #[test]
    fn each_node_counts_the_sources_that_propose_it() {
        let from = |tokens: &[u32], source| Candidate { tokens: tokens.to_vec(), weight: 1.0, source, matched: 2 };
        let candidates = [
            from(&[1, 2, 3], Source::Prompt),
            from(&[1, 2, 4], Source::Repository),
            from(&[1, 5], Source::Repository),
            from(&[1, 2], Source::Prompt),
        ];
        let tree = build(9, &candidates, 64, 10);
        assert_eq!(tree.tokens, vec![9, 1, 2, 5, 3, 4]);
        assert_eq!(tree.agreeing, vec![0, 2, 2, 1, 1, 1]);
        assert_eq!(tree.keep(&[1, 3]).agreeing, vec![0, 2, 1], "kept when the tree is cut");
    }

    #[test]
    fn budget_keeps_heaviest_whole_prefixes() {
        let candidates = [cand(&[1, 2, 3, 4], 1.0), cand(&[7, 8], 3.0), cand(&[1, 6], 1.5)];
        let tree = build(0, &candidates, 3, 10);
        // Weights: 1 -> 2.5, 7 -> 3, 8 -> 3, 6 -> 1.5, 2 -> 1 ...
        assert_eq!(tree.tokens, vec![0, 7, 1, 8]);
        for (i, parent) in tree.parents.iter().enumerate().skip(1) {
            assert!(parent.unwrap() < i);
        }
    }

    #[test]
    fn max_depth_truncates_candidates() {
        let tree = build(0, &[cand(&[1, 2, 3, 4, 5], 1.0)], 64, 2);
        assert_eq!(tree.tokens, vec![0, 1, 2]);
        assert_eq!(tree.max_depth(), 2);
    }

    #[test]
    fn zero_budget_or_no_candidates_gives_root_only() {
        assert_eq!(build(4, &[cand(&[1], 1.0)], 0, 8).tokens, vec![4]);
        assert_eq!(build(4, &[], 8, 8), DraftTree { weights: vec![0.0], ..DraftTree::root_only(4) });
    }

    #[test]
    fn keeping_the_heaviest_nodes_equals_building_with_that_budget() {
        let candidates =
            [cand(&[1, 2, 3, 4], 1.0), cand(&[7, 8], 3.0), cand(&[1, 6], 1.5), cand(&[9], 0.2), cand(&[5], 1.0)];
        let full = build(0, &candidates, 64, 10);
        for nodes in 0..full.len() {
            let kept = full.keep_heaviest(nodes);
            assert_eq!(kept, build(0, &candidates, nodes, 10), "{nodes} nodes");
            assert!(kept.parents.iter().enumerate().all(|(i, p)| p.is_none_or(|p| p < i)));
        }
    }

    #[test]
    fn child_lookup_finds_tokens_under_the_right_parent() {
        let tree = build(0, &[cand(&[1, 2], 1.0), cand(&[2, 1], 1.0)], 64, 8);
        let one = tree.child_with_token(0, 1).unwrap();
        assert_eq!(tree.tokens[tree.child_with_token(one, 2).unwrap()], 2);
        assert_eq!(tree.child_with_token(one, 1), None);
        assert_eq!(tree.children(0).count(), 2);
    }
}
