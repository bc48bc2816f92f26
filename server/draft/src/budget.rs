//! How big each step's draft tree is. The papers fix 64 nodes because a GPU
//! verifies 64 tokens for about the price of one; on a CPU the price grows
//! with the node count. `CostAwareBudget` keeps the prefix of the heaviest
//! nodes that maximises expected tokens per millisecond, from a measured
//! cost curve t(k) and acceptance rates learned while decoding.

use crate::drafter::Source;
use crate::tree::DraftTree;

/// Chooses each step's tree.
pub trait BudgetPolicy: Send {
    /// Upper bounds for drafting: (non-root nodes, depth).
    fn limits(&self) -> (usize, usize);
    /// How many of the heaviest non-root nodes of `tree` (built under the
    /// limits) to verify; all of them by default.
    fn select(&mut self, tree: &DraftTree) -> usize {
        tree.len() - 1
    }
    /// Feedback after verification: the verified tree and the accepted path.
    fn observe(&mut self, _tree: &DraftTree, _path: &[usize]) {}
}

/// A budget that never changes.
#[derive(Clone, Copy, Debug)]
pub struct FixedBudget {
    pub nodes: usize,
    pub depth: usize,
}

impl BudgetPolicy for FixedBudget {
    fn limits(&self) -> (usize, usize) {
        (self.nodes, self.depth)
    }
}

/// Forward-pass cost by node count, from measured points, interpolated
/// linearly and extended with the last slope.
#[derive(Clone, Debug, PartialEq)]
pub struct CostCurve {
    /// `(nodes, milliseconds)`, sorted by nodes, nodes >= 1.
    points: Vec<(usize, f64)>,
}

impl CostCurve {
    pub fn new(mut points: Vec<(usize, f64)>) -> Option<CostCurve> {
        points.retain(|&(k, ms)| k >= 1 && ms.is_finite() && ms > 0.0);
        points.sort_by_key(|&(k, _)| k);
        points.dedup_by_key(|p| p.0);
        (!points.is_empty()).then_some(CostCurve { points })
    }

    pub fn points(&self) -> &[(usize, f64)] {
        &self.points
    }

    /// Estimated milliseconds of one forward over `nodes` tokens.
    pub fn cost(&self, nodes: usize) -> f64 {
        let p = &self.points;
        if p.len() == 1 {
            return p[0].1 * nodes as f64 / p[0].0 as f64;
        }
        let upper = p.iter().position(|&(k, _)| k >= nodes).unwrap_or(p.len() - 1).max(1);
        let (k0, t0) = p[upper - 1];
        let (k1, t1) = p[upper];
        let slope = (t1 - t0) / (k1 - k0) as f64;
        (t0 + slope * (nodes as f64 - k0 as f64)).max(p[0].1 * 0.5)
    }
}

/// Buckets of the acceptance model: source x share of the parent's weight x
/// depth x length of the context match that found the draft.
const SHARE_EDGES: [f32; 5] = [0.1, 0.25, 0.5, 0.75, 0.95];
const DEPTH_BUCKETS: usize = 3;
const MATCH_EDGES: [usize; 3] = [3, 5, 9];
const BUCKETS: usize = Source::ALL.len() * (SHARE_EDGES.len() + 1) * DEPTH_BUCKETS * (MATCH_EDGES.len() + 1);

/// Picks the verified tree size that maximises expected tokens per
/// millisecond. A node's chance to be accepted is the product, along its
/// branch, of learned conditional rates: how often a node of that bucket
/// carried the model's choice when its parent was accepted.
#[derive(Clone, Debug)]
pub struct CostAwareBudget {
    cost: CostCurve,
    max_nodes: usize,
    max_depth: usize,
    accepted: Vec<f64>,
    tried: Vec<f64>,
}

impl CostAwareBudget {
    pub fn new(cost: CostCurve, max_nodes: usize, max_depth: usize) -> CostAwareBudget {
        CostAwareBudget { cost, max_nodes, max_depth, accepted: vec![0.0; BUCKETS], tried: vec![0.0; BUCKETS] }
    }

    pub fn cost_curve(&self) -> &CostCurve {
        &self.cost
    }

    fn bucket(tree: &DraftTree, node: usize) -> usize {
        let parent = tree.parents[node].expect("non-root node");
        let share = if tree.weights[parent] > 0.0 { tree.weights[node] / tree.weights[parent] } else { 0.0 };
        let share_bucket = SHARE_EDGES.iter().take_while(|&&edge| share >= edge).count();
        let depth_bucket = match tree.depths[node] {
            0 | 1 => 0,
            2 | 3 => 1,
            _ => 2,
        };
        let match_bucket = MATCH_EDGES.iter().take_while(|&&edge| tree.matched[node] >= edge).count();
        let source = Source::ALL.iter().position(|&s| s == tree.sources[node]).unwrap_or(0);
        ((source * (SHARE_EDGES.len() + 1) + share_bucket) * DEPTH_BUCKETS + depth_bucket) * (MATCH_EDGES.len() + 1)
            + match_bucket
    }

    /// Laplace-smoothed conditional acceptance rate of a bucket: unknown
    /// buckets start at 1/2, so they get tried.
    fn rate(&self, bucket: usize) -> f64 {
        (self.accepted[bucket] + 1.0) / (self.tried[bucket] + 2.0)
    }
}

impl BudgetPolicy for CostAwareBudget {
    fn limits(&self) -> (usize, usize) {
        (self.max_nodes, self.max_depth)
    }

    fn select(&mut self, tree: &DraftTree) -> usize {
        let mut reach = vec![0.0f64; tree.len()];
        reach[0] = 1.0;
        let mut expected = 1.0;
        let (mut best_nodes, mut best_rate) = (0, 1.0 / self.cost.cost(1));
        for (rank, node) in tree.heaviest_order().into_iter().enumerate() {
            let parent = tree.parents[node].expect("non-root node");
            reach[node] = reach[parent] * self.rate(Self::bucket(tree, node));
            expected += reach[node];
            let rate = expected / self.cost.cost(rank + 2);
            if rate > best_rate {
                (best_nodes, best_rate) = (rank + 1, rate);
            }
        }
        best_nodes
    }

    fn observe(&mut self, tree: &DraftTree, path: &[usize]) {
        let mut on_path = vec![false; tree.len()];
        for &node in path {
            on_path[node] = true;
        }
        for node in 1..tree.len() {
            let parent = tree.parents[node].expect("non-root node");
            if on_path[parent] {
                let bucket = Self::bucket(tree, node);
                self.tried[bucket] += 1.0;
                if on_path[node] {
                    self.accepted[bucket] += 1.0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drafter::Candidate;
    use crate::tree::build;

    fn chain(tokens: &[u32]) -> DraftTree {
        chain_matched(tokens, 4)
    }

    fn chain_matched(tokens: &[u32], matched: usize) -> DraftTree {
        build(0, &[Candidate { tokens: tokens.to_vec(), weight: 1.0, source: Source::Repository, matched }], 64, 16)
    }

    #[test]
    fn cost_curve_interpolates_and_extrapolates() {
        let curve = CostCurve::new(vec![(8, 40.0), (1, 10.0), (2, 12.0)]).unwrap();
        assert_eq!(curve.cost(1), 10.0);
        assert_eq!(curve.cost(5), 12.0 + 28.0 * 3.0 / 6.0);
        assert_eq!(curve.cost(16), 40.0 + 28.0 / 6.0 * 8.0);
        assert!(CostCurve::new(vec![(0, 1.0), (3, f64::NAN)]).is_none());
    }

    #[test]
    fn a_flat_cost_curve_verifies_everything() {
        let mut budget = CostAwareBudget::new(CostCurve::new(vec![(1, 10.0), (64, 10.0)]).unwrap(), 64, 16);
        assert_eq!(budget.select(&chain(&[1, 2, 3, 4, 5])), 5);
    }

    #[test]
    fn drafts_that_never_pass_stop_being_verified_on_a_steep_curve() {
        let mut budget = CostAwareBudget::new(CostCurve::new(vec![(1, 10.0), (2, 14.0), (8, 40.0)]).unwrap(), 8, 8);
        let tree = chain(&[1, 2, 3]);
        assert!(budget.select(&tree) > 0, "unknown drafts are worth a try");
        for _ in 0..50 {
            budget.observe(&tree, &[0]);
        }
        assert_eq!(budget.select(&tree), 0);
    }

    #[test]
    fn drafts_that_always_pass_are_kept_whole() {
        let mut budget = CostAwareBudget::new(CostCurve::new(vec![(1, 10.0), (2, 14.0), (8, 40.0)]).unwrap(), 8, 8);
        let tree = chain(&[1, 2, 3, 4]);
        for _ in 0..50 {
            budget.observe(&tree, &[0, 1, 2, 3, 4]);
        }
        assert_eq!(budget.select(&tree), 4);
    }

    #[test]
    fn long_context_matches_are_judged_apart_from_short_ones() {
        let mut budget = CostAwareBudget::new(CostCurve::new(vec![(1, 10.0), (2, 14.0), (8, 40.0)]).unwrap(), 8, 8);
        let (short, long) = (chain_matched(&[1, 2, 3, 4], 2), chain_matched(&[1, 2, 3, 4], 12));
        for _ in 0..50 {
            budget.observe(&short, &[0]);
            budget.observe(&long, &[0, 1, 2, 3, 4]);
        }
        assert_eq!(budget.select(&short), 0);
        assert_eq!(budget.select(&long), 4);
    }
}
