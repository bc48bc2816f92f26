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
    /// The non-root nodes of `tree` (built under the limits) to verify, each
    /// with its parent, when the KV cache holds `cache_len` tokens; all of
    /// them by default.
    fn select(&mut self, tree: &DraftTree, _cache_len: usize) -> Vec<usize> {
        (1..tree.len()).collect()
    }
    /// Feedback after verification: the step's [`Verified`] outcome.
    fn observe(&mut self, _step: &Verified<'_>) {}
}

/// What one step's verification showed.
pub struct Verified<'a> {
    /// The tree drafted under the limits, before [`BudgetPolicy::select`] cut it.
    pub pool: &'a DraftTree,
    /// The tree verified: `pool` or the part of it that `select` kept.
    pub tree: &'a DraftTree,
    /// The accepted path in `tree`, from its root.
    pub path: &'a [usize],
    /// The model's token after the path.
    pub next: u32,
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
    /// `(nodes, milliseconds)`, sorted by nodes, nodes >= 1, never falling.
    points: Vec<(usize, f64)>,
}

impl CostCurve {
    /// The curve through `points`, each lowered to the least time of the counts at or above
    /// its own: a pass over more nodes does all the work of a pass over fewer, so a point
    /// above a larger count's time was slowed by other work (a curve that fell made the larger
    /// tree look cheaper than the smaller one; a measured 6-node pass above the 8-node one at
    /// 2,048 cached tokens, on a shared host).
    pub fn new(mut points: Vec<(usize, f64)>) -> Option<CostCurve> {
        points.retain(|&(k, ms)| k >= 1 && ms.is_finite() && ms > 0.0);
        points.sort_by_key(|&(k, _)| k);
        points.dedup_by_key(|p| p.0);
        let mut least = f64::INFINITY;
        for (_, ms) in points.iter_mut().rev() {
            least = least.min(*ms);
            *ms = least;
        }
        (!points.is_empty()).then_some(CostCurve { points })
    }

    pub fn points(&self) -> &[(usize, f64)] {
        &self.points
    }

    /// Estimated milliseconds of one forward over `nodes` tokens.
    pub fn cost(&self, nodes: usize) -> f64 {
        match self.points[..] {
            [(k, ms)] => ms * nodes as f64 / k as f64,
            _ => piecewise_linear(&self.points, nodes),
        }
    }
}

/// Forward-pass cost by node count and cache length: a cost curve measured
/// at each of a few cache lengths, interpolated linearly in the cache length
/// (attention work grows with it: on a CPU with a 2,048-token cache each node
/// costs about three times what it costs with 256).
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    /// `(cache length, curve)`, sorted by cache length.
    curves: Vec<(usize, CostCurve)>,
}

impl CostModel {
    /// The model of `curves`, each point lowered to the cost of the same node count on every
    /// longer cache: a pass on a longer cache does all the work of one on a shorter cache, so
    /// a point above it was slowed by other work (a 6-node pass measured at 18.3 ms on 256
    /// cached tokens and 16.8 ms on 2,048, on a shared host, AMD EPYC Zen 4 class).
    pub fn new(mut curves: Vec<(usize, CostCurve)>) -> Option<CostModel> {
        curves.sort_by_key(|(len, _)| *len);
        curves.dedup_by_key(|(len, _)| *len);
        for shorter in (0..curves.len().saturating_sub(1)).rev() {
            let longer = &curves[shorter + 1].1;
            let lowered = curves[shorter].1.points().iter().map(|&(k, ms)| (k, ms.min(longer.cost(k)))).collect();
            curves[shorter].1 = CostCurve::new(lowered)?;
        }
        (!curves.is_empty()).then_some(CostModel { curves })
    }

    pub fn curves(&self) -> &[(usize, CostCurve)] {
        &self.curves
    }

    /// Estimated milliseconds of one forward over `nodes` tokens on a cache
    /// of `cache_len` tokens.
    pub fn cost(&self, nodes: usize, cache_len: usize) -> f64 {
        let at_lengths: Vec<(usize, f64)> = self.curves.iter().map(|(len, curve)| (*len, curve.cost(nodes))).collect();
        match at_lengths[..] {
            [(_, ms)] => ms,
            _ => piecewise_linear(&at_lengths, cache_len),
        }
    }
}

/// The value at `x` of the line through the two measured points around it
/// (the first or last two outside their range), never below half the first
/// value. `points` holds at least two points, sorted by distinct `x`.
fn piecewise_linear(points: &[(usize, f64)], x: usize) -> f64 {
    let upper = points.iter().position(|&(px, _)| px >= x).unwrap_or(points.len() - 1).max(1);
    let (x0, y0) = points[upper - 1];
    let (x1, y1) = points[upper];
    let slope = (y1 - y0) / (x1 - x0) as f64;
    (y0 + slope * (x as f64 - x0 as f64)).max(points[0].1 * 0.5)
}

/// Buckets of the acceptance model: origin x share of the parent's weight x
/// depth x length of the context match that found the draft (for prompt
/// lookup, how far its occurrence runs: a run of 16 or more says the text
/// repeats itself) x place among
/// its siblings (first, second, later: the model picks one child at most, and
/// a second guess at the same position is accepted far less often than its
/// share of the weight suggests).
const SHARE_EDGES: [f32; 5] = [0.1, 0.25, 0.5, 0.75, 0.95];
const DEPTH_BUCKETS: usize = 3;
const MATCH_EDGES: [usize; 4] = [3, 5, 9, 16];
const SIBLING_BUCKETS: usize = 3;
/// A node's origin: the one source that proposes it, or [`SEVERAL_SOURCES`].
const ORIGINS: usize = Source::ALL.len() + 1;
/// The origin of a node that more than one source proposes, whichever of them weighs most.
/// Which one weighs most is chance: along one agreed chain it changes where one source's
/// guesses end. Learned apart by it, the deeper nodes would sit in groups never verified
/// (priced at 1/2), which the budget would then never verify: they would never learn.
const SEVERAL_SOURCES: usize = Source::ALL.len();
const BUCKETS: usize = ORIGINS * (SHARE_EDGES.len() + 1) * DEPTH_BUCKETS * (MATCH_EDGES.len() + 1) * SIBLING_BUCKETS;

/// Groups of buckets: origin x depth x place among siblings (a bucket without
/// its share and match length). A bucket with few counted nodes of its own
/// leans on its group's rate.
const GROUPS: usize = ORIGINS * DEPTH_BUCKETS * SIBLING_BUCKETS;
/// Counted nodes' worth of weight that a bucket's rate gives its group's rate.
const BUCKET_PRIOR: f64 = 2.0;
/// Verified nodes' worth of weight that a group's rate gives 1/2: tens of misses
/// are needed before a kind of draft stops being tried.
const GROUP_PRIOR: f64 = 20.0;

/// Picks the verified tree size that maximises tokens per millisecond over
/// the whole generation. A node's chance to be accepted is the product, along
/// its branch, of learned conditional rates: how often a node of that bucket
/// carried the model's choice when its parent was accepted. Siblings share
/// one chance: the model's next token is at most one of them.
///
/// Each step keeps the nodes whose expected tokens beat what their time would
/// bring at the speed decoding runs at ([`Speed`]), not the tree with the best
/// ratio of its own: a step of weak drafts that only beats one-token decoding
/// is not worth its time when the steps around it run faster (Dinkelbach's rule
/// for the best ratio of sums).
#[derive(Clone, Debug)]
pub struct CostAwareBudget {
    cost: CostModel,
    max_nodes: usize,
    max_depth: usize,
    accepted: Vec<f64>,
    tried: Vec<f64>,
    /// Sums of `accepted` and `tried` over each group's buckets.
    group_accepted: Vec<f64>,
    group_tried: Vec<f64>,
    speed: Speed,
    /// The cache length the last tree was selected at.
    cache_len: usize,
}

/// Tokens a step brought against its cost in one-token passes at the same cache
/// length, summed over recent steps with older ones fading: how fast decoding
/// runs, measured in the units the cost curve gives without timing noise.
#[derive(Clone, Debug)]
struct Speed {
    tokens: f64,
    passes: f64,
}

/// How much each older step counts less than the one after it: the speed
/// follows the last few tens of steps.
const SPEED_DECAY: f64 = 0.97;
/// Steps' worth of one token per one-token pass the speed starts from:
/// plain decoding's, until drafts have shown what they bring.
const SPEED_PRIOR: f64 = 4.0;

impl Speed {
    fn new() -> Speed {
        Speed { tokens: SPEED_PRIOR, passes: SPEED_PRIOR }
    }

    /// Tokens per one-token pass's time.
    fn value(&self) -> f64 {
        self.tokens / self.passes
    }

    fn add(&mut self, tokens: f64, passes: f64) {
        self.tokens = self.tokens * SPEED_DECAY + tokens;
        self.passes = self.passes * SPEED_DECAY + passes;
    }
}

impl CostAwareBudget {
    pub fn new(cost: CostModel, max_nodes: usize, max_depth: usize) -> CostAwareBudget {
        CostAwareBudget {
            cost,
            max_nodes,
            max_depth,
            accepted: vec![0.0; BUCKETS],
            tried: vec![0.0; BUCKETS],
            group_accepted: vec![0.0; GROUPS],
            group_tried: vec![0.0; GROUPS],
            speed: Speed::new(),
            cache_len: 0,
        }
    }

    /// Prices trees with `cost` from now on, keeping what the budget learned.
    pub fn set_cost(&mut self, cost: CostModel) {
        self.cost = cost;
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
        let origin = if tree.agreeing[node] > 1 {
            SEVERAL_SOURCES
        } else {
            Source::ALL.iter().position(|&s| s == tree.sources[node]).unwrap_or(0)
        };
        let sibling_bucket = tree.sibling_ranks[node].min(SIBLING_BUCKETS - 1);
        (((origin * (SHARE_EDGES.len() + 1) + share_bucket) * DEPTH_BUCKETS + depth_bucket) * (MATCH_EDGES.len() + 1)
            + match_bucket)
            * SIBLING_BUCKETS
            + sibling_bucket
    }

    /// The group of a bucket (see [`GROUPS`]), from the bucket's index.
    fn group(bucket: usize) -> usize {
        let sibling = bucket % SIBLING_BUCKETS;
        let depth = bucket / SIBLING_BUCKETS / (MATCH_EDGES.len() + 1) % DEPTH_BUCKETS;
        let origin = bucket / SIBLING_BUCKETS / (MATCH_EDGES.len() + 1) / DEPTH_BUCKETS / (SHARE_EDGES.len() + 1);
        (origin * DEPTH_BUCKETS + depth) * SIBLING_BUCKETS + sibling
    }

    /// A bucket's conditional acceptance rate, smoothed towards its group's,
    /// which is smoothed towards 1/2. Most buckets see few nodes; with a
    /// prior of 1/2 each, every new kind of second guess was priced at one
    /// chance in two, though second guesses pass one time in ten. Leaning on
    /// the group, a new bucket starts from what its kind of draft earned.
    fn rate(&self, bucket: usize) -> f64 {
        let group = Self::group(bucket);
        let group_rate = (self.group_accepted[group] + GROUP_PRIOR / 2.0) / (self.group_tried[group] + GROUP_PRIOR);
        (self.accepted[bucket] + BUCKET_PRIOR * group_rate) / (self.tried[bucket] + BUCKET_PRIOR)
    }

    /// Counts one drafted node of `bucket` whose parent was accepted: `accepted` if it
    /// carried the model's choice.
    fn count(&mut self, bucket: usize, accepted: bool) {
        let group = Self::group(bucket);
        self.tried[bucket] += 1.0;
        self.group_tried[group] += 1.0;
        if accepted {
            self.accepted[bucket] += 1.0;
            self.group_accepted[group] += 1.0;
        }
    }
}

/// What a cost-aware budget learned: per bucket, the drafted nodes with an
/// accepted parent and how many of them carried the model's choice. Carried from one
/// process to the next so a fresh one does not start from zero.
#[derive(Clone, Debug, PartialEq)]
pub struct AcceptanceCounts {
    pub accepted: Vec<f64>,
    pub tried: Vec<f64>,
}

impl CostAwareBudget {
    pub fn counts(&self) -> AcceptanceCounts {
        AcceptanceCounts { accepted: self.accepted.clone(), tried: self.tried.clone() }
    }

    /// Continues from counts learned earlier. `false` (and nothing changed)
    /// when they do not fit this budget's buckets or are not counts.
    pub fn restore(&mut self, counts: AcceptanceCounts) -> bool {
        let fits = counts.accepted.len() == BUCKETS
            && counts.tried.len() == BUCKETS
            && counts.accepted.iter().zip(&counts.tried).all(|(&a, &t)| a.is_finite() && a >= 0.0 && t >= a);
        if fits {
            (self.accepted, self.tried) = (counts.accepted, counts.tried);
            self.group_accepted = vec![0.0; GROUPS];
            self.group_tried = vec![0.0; GROUPS];
            for bucket in 0..BUCKETS {
                self.group_accepted[Self::group(bucket)] += self.accepted[bucket];
                self.group_tried[Self::group(bucket)] += self.tried[bucket];
            }
        }
        fits
    }
}

/// Draft nodes the cost-aware budget ranks, per node it may verify: the pool
/// is built by weight, the verified nodes are chosen from it by their chance
/// to be accepted, so a source with many heavy but unlikely nodes cannot
/// crowd out the likely ones of another.
const POOL_FACTOR: usize = 4;

impl BudgetPolicy for CostAwareBudget {
    fn limits(&self) -> (usize, usize) {
        (self.max_nodes * POOL_FACTOR, self.max_depth)
    }

    /// Ranks nodes by their chance to be accepted (the product of learned
    /// rates along the branch; a child never outranks its parent) and keeps
    /// the most likely ones, as many as maximise expected tokens less what the
    /// pass's time would bring at the current speed: for each tree size, the
    /// most likely nodes are the ones that bring the most expected tokens. The
    /// rates of one parent's children are claimed heaviest child first and
    /// never add up past 1.
    fn select(&mut self, tree: &DraftTree, cache_len: usize) -> Vec<usize> {
        let mut reach = vec![0.0f64; tree.len()];
        reach[0] = 1.0;
        let mut unclaimed = vec![1.0f64; tree.len()];
        for node in 1..tree.len() {
            let parent = tree.parents[node].expect("non-root node");
            let rate = self.rate(Self::bucket(tree, node)).min(unclaimed[parent]);
            unclaimed[parent] -= rate;
            reach[node] = reach[parent] * rate;
        }
        let mut order: Vec<usize> = (1..tree.len()).collect();
        order.sort_by(|&a, &b| reach[b].total_cmp(&reach[a]).then(tree.depths[a].cmp(&tree.depths[b])).then(a.cmp(&b)));
        self.cache_len = cache_len;
        let (speed, one_token) = (self.speed.value(), self.cost.cost(1, cache_len));
        let mut expected = 1.0;
        let (mut best_nodes, mut best_gain) = (0, expected - speed);
        for (rank, &node) in order.iter().take(self.max_nodes).enumerate() {
            expected += reach[node];
            let gain = expected - speed * self.cost.cost(rank + 2, cache_len) / one_token;
            if gain > best_gain {
                (best_nodes, best_gain) = (rank + 1, gain);
            }
        }
        order.truncate(best_nodes);
        order
    }

    /// Learns from every drafted node whose parent the model accepted, verified or not: the
    /// accepted tokens and the model's next one tell which child it would have taken.
    /// Learning from the verified nodes alone, a bucket's rate was what its few chosen nodes
    /// earned, and passes brought fewer tokens than their nodes' rates promised.
    fn observe(&mut self, step: &Verified<'_>) {
        let Verified { pool, tree, path, next } = *step;
        let passes = self.cost.cost(tree.len(), self.cache_len) / self.cost.cost(1, self.cache_len);
        self.speed.add(path.len() as f64, passes);
        let mut accepted = vec![false; pool.len()];
        accepted[0] = true;
        let mut deepest = 0;
        for &node in &path[1..] {
            let child =
                pool.child_with_token(deepest, tree.tokens[node]).expect("the verified tree is part of the pool");
            (accepted[child], deepest) = (true, child);
        }
        let taken_next = pool.child_with_token(deepest, next);
        for node in 1..pool.len() {
            let parent = pool.parents[node].expect("non-root node");
            if accepted[parent] {
                self.count(Self::bucket(pool, node), accepted[node] || taken_next == Some(node));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drafter::Candidate;
    use crate::tree::build;

    /// Feeds `budget` the verification of the whole of `tree`, accepting `path`, the model's
    /// next token one the tree does not hold.
    fn observe(budget: &mut CostAwareBudget, tree: &DraftTree, path: &[usize]) {
        budget.observe(&Verified { pool: tree, tree, path, next: u32::MAX });
    }

    /// A budget whose cost does not depend on the cache length.
    fn budget(points: Vec<(usize, f64)>, max_nodes: usize, max_depth: usize) -> CostAwareBudget {
        let model = CostModel::new(vec![(256, CostCurve::new(points).unwrap())]).unwrap();
        CostAwareBudget::new(model, max_nodes, max_depth)
    }

    /// Trains `budget` on `tree` with the nodes of `source` (one branch from
    /// the root) always accepted and the others never; returns those nodes
    /// and what the budget then selects, sorted.
    fn accept_only(budget: &mut CostAwareBudget, tree: &DraftTree, source: Source) -> (Vec<usize>, Vec<usize>) {
        let accepted: Vec<usize> = (1..tree.len()).filter(|&n| tree.sources[n] == source).collect();
        let path: Vec<usize> = std::iter::once(0).chain(accepted.iter().copied()).collect();
        for _ in 0..50 {
            observe(budget, tree, &path);
        }
        let mut selected = budget.select(tree, 256);
        selected.sort();
        (accepted, selected)
    }

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
    fn a_point_above_a_larger_counts_time_is_lowered_to_it() {
        let curve = CostCurve::new(vec![(1, 5.0), (4, 8.7), (5, 7.3), (6, 28.3), (8, 26.7), (16, 40.0)]).unwrap();
        assert_eq!(curve.points(), &[(1, 5.0), (4, 7.3), (5, 7.3), (6, 26.7), (8, 26.7), (16, 40.0)]);
    }

    #[test]
    fn cost_grows_linearly_with_the_cache_length_between_and_beyond_measurements() {
        let short = CostCurve::new(vec![(1, 10.0), (8, 20.0)]).unwrap();
        let long = CostCurve::new(vec![(1, 16.0), (8, 44.0)]).unwrap();
        let model = CostModel::new(vec![(2048, long), (256, short)]).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(model.cost(8, 256), 20.0));
        assert!(close(model.cost(1, 2048), 16.0));
        assert!(close(model.cost(8, 1152), 32.0));
        assert!(close(model.cost(8, 3840), 68.0));
        assert!(close(model.cost(1, 0), 10.0 - 6.0 * 256.0 / 1792.0));
    }

    #[test]
    fn a_point_above_the_same_count_on_a_longer_cache_is_lowered_to_it() {
        let short = CostCurve::new(vec![(1, 6.1), (5, 13.6), (6, 18.3), (8, 21.1)]).unwrap();
        let long = CostCurve::new(vec![(1, 9.4), (5, 15.2), (6, 16.8), (8, 23.9)]).unwrap();
        let model = CostModel::new(vec![(2048, long.clone()), (256, short)]).unwrap();
        assert_eq!(model.curves()[0].1.points(), &[(1, 6.1), (5, 13.6), (6, 16.8), (8, 21.1)]);
        assert_eq!(model.curves()[1].1, long);
    }

    #[test]
    fn a_tree_that_pays_on_a_short_cache_is_cut_on_a_long_one() {
        let short = CostCurve::new(vec![(1, 10.0), (8, 10.0)]).unwrap();
        let long = CostCurve::new(vec![(1, 16.0), (8, 80.0)]).unwrap();
        let mut budget = CostAwareBudget::new(CostModel::new(vec![(256, short), (2048, long)]).unwrap(), 8, 8);
        let tree = chain(&[1, 2, 3, 4, 5, 6, 7]);
        for _ in 0..20 {
            observe(&mut budget, &tree, &[0, 1, 2]);
        }
        assert_eq!(budget.select(&tree, 256).len(), 7);
        assert!(budget.select(&tree, 2048).len() < 7);
    }

    #[test]
    fn a_new_cost_prices_the_next_trees_and_keeps_what_was_learned() {
        let mut budget = budget(vec![(1, 10.0), (8, 80.0)], 8, 8);
        let tree = chain(&[1, 2, 3, 4, 5, 6, 7]);
        for _ in 0..20 {
            observe(&mut budget, &tree, &[0, 1, 2]);
        }
        let learned = budget.counts();
        assert!(budget.select(&tree, 256).len() < 7, "a steep curve cuts the tree");
        budget.set_cost(CostModel::new(vec![(256, CostCurve::new(vec![(1, 10.0), (8, 10.0)]).unwrap())]).unwrap());
        assert_eq!(budget.select(&tree, 256).len(), 7, "a flat curve verifies it whole");
        assert_eq!(budget.counts(), learned);
    }

    #[test]
    fn a_flat_cost_curve_verifies_everything() {
        let mut budget = budget(vec![(1, 10.0), (64, 10.0)], 64, 16);
        assert_eq!(budget.select(&chain(&[1, 2, 3, 4, 5]), 256).len(), 5);
    }

    #[test]
    fn drafts_that_never_pass_stop_being_verified_on_a_steep_curve() {
        let mut budget = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        let tree = chain(&[1, 2, 3]);
        assert!(!budget.select(&tree, 256).is_empty(), "unknown drafts are worth a try");
        for _ in 0..50 {
            observe(&mut budget, &tree, &[0]);
        }
        assert!(budget.select(&tree, 256).is_empty());
    }

    #[test]
    fn drafts_that_always_pass_are_kept_whole() {
        let mut budget = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        let tree = chain(&[1, 2, 3, 4]);
        for _ in 0..50 {
            observe(&mut budget, &tree, &[0, 1, 2, 3, 4]);
        }
        assert_eq!(budget.select(&tree, 256).len(), 4);
    }

    #[test]
    fn a_light_reliable_branch_is_verified_before_a_heavy_unreliable_one() {
        let mut budget = budget(vec![(1, 10.0), (3, 12.0), (8, 40.0)], 8, 8);
        let candidates = [
            Candidate { tokens: vec![1, 2], weight: 9.0, source: Source::Common, matched: 2 },
            Candidate { tokens: vec![5, 6], weight: 1.0, source: Source::Repository, matched: 2 },
        ];
        let tree = build(0, &candidates, 64, 16);
        let (light, selected) = accept_only(&mut budget, &tree, Source::Repository);
        assert_eq!(selected, light);
    }

    #[test]
    fn likely_nodes_are_found_beyond_the_heaviest_ones() {
        let mut budget = budget(vec![(1, 10.0), (3, 12.0), (8, 40.0)], 4, 8);
        let mut candidates: Vec<Candidate> = (0..12)
            .map(|i| Candidate { tokens: vec![100 + i], weight: 1.0, source: Source::Common, matched: 2 })
            .collect();
        candidates.push(Candidate { tokens: vec![5, 6], weight: 0.5, source: Source::Repository, matched: 2 });
        let (pool, depth) = budget.limits();
        let tree = build(0, &candidates, pool, depth);
        let (likely, selected) = accept_only(&mut budget, &tree, Source::Repository);
        assert_eq!(likely.len(), 2, "the light branch is in the pool");
        assert_eq!(selected, likely);
    }

    #[test]
    fn weak_drafts_that_beat_plain_decoding_are_dropped_once_steps_run_faster() {
        let mut budget = budget(vec![(1, 10.0), (2, 12.0), (8, 40.0)], 8, 8);
        let weak = build(0, &[Candidate { tokens: vec![1], weight: 1.0, source: Source::Common, matched: 2 }], 64, 16);
        for step in 0..30 {
            observe(&mut budget, &weak, if step % 10 < 3 { &[0, 1] } else { &[0] });
        }
        // One chance in three for a fifth more time: better than one token a pass.
        assert_eq!(budget.select(&weak, 256), vec![1]);
        let strong = chain_matched(&[5, 6, 7, 8], 12);
        for _ in 0..40 {
            observe(&mut budget, &strong, &[0, 1, 2, 3, 4]);
        }
        assert_eq!(budget.select(&strong, 256).len(), 4);
        // Now a pass brings about two tokens for its time: the weak draft costs more than it brings.
        assert!(budget.select(&weak, 256).is_empty());
    }

    #[test]
    fn restored_counts_give_the_choices_they_were_learned_with() {
        let mut trained = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        let tree = chain(&[1, 2, 3]);
        for _ in 0..50 {
            observe(&mut trained, &tree, &[0]);
        }
        let mut fresh = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        assert!(!fresh.select(&tree, 256).is_empty());
        assert!(fresh.restore(trained.counts()));
        assert!(fresh.select(&tree, 256).is_empty());
        assert_eq!(fresh.counts(), trained.counts());
    }

    #[test]
    fn counts_of_another_layout_or_impossible_ones_are_refused() {
        let mut budget = budget(vec![(1, 10.0), (8, 40.0)], 8, 8);
        let before = budget.counts();
        let short = AcceptanceCounts { accepted: vec![0.0; 3], tried: vec![1.0; 3] };
        assert!(!budget.restore(short));
        let mut impossible = before.clone();
        impossible.accepted[0] = 5.0;
        assert!(!budget.restore(impossible), "more accepted than tried");
        assert_eq!(budget.counts(), before);
    }

    #[test]
    fn long_context_matches_are_judged_apart_from_short_ones() {
        let mut budget = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        let (short, long) = (chain_matched(&[1, 2, 3, 4], 2), chain_matched(&[1, 2, 3, 4], 12));
        for _ in 0..50 {
            observe(&mut budget, &short, &[0]);
            observe(&mut budget, &long, &[0, 1, 2, 3, 4]);
        }
        assert!(budget.select(&short, 256).is_empty());
        assert_eq!(budget.select(&long, 256).len(), 4);
    }

    #[test]
    fn drafts_that_several_sources_propose_are_judged_apart() {
        let mut budget = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        let from = |source| Candidate { tokens: vec![1, 2, 3, 4], weight: 1.0, source, matched: 4 };
        let alone = build(0, &[from(Source::Repository)], 64, 16);
        let agreed = build(0, &[from(Source::Repository), from(Source::Prompt)], 64, 16);
        for _ in 0..50 {
            observe(&mut budget, &alone, &[0]);
            observe(&mut budget, &agreed, &[0, 1, 2, 3, 4]);
        }
        assert!(budget.select(&alone, 256).is_empty());
        assert_eq!(budget.select(&agreed, 256).len(), 4);
    }

    #[test]
    fn agreed_drafts_are_judged_alike_whichever_source_weighs_most() {
        let mut budget = budget(vec![(1, 10.0), (2, 14.0), (8, 40.0)], 8, 8);
        let from = |source, weight| Candidate { tokens: vec![1, 2, 3, 4], weight, source, matched: 4 };
        let repository_heaviest = build(0, &[from(Source::Repository, 2.0), from(Source::Prompt, 1.0)], 64, 16);
        let prompt_heaviest = build(0, &[from(Source::Repository, 1.0), from(Source::Prompt, 2.0)], 64, 16);
        for _ in 0..50 {
            observe(&mut budget, &repository_heaviest, &[0, 1, 2, 3, 4]);
        }
        assert_eq!(budget.select(&prompt_heaviest, 256).len(), 4, "what the agreed chain earned carries over");
    }

    #[test]
    fn siblings_share_one_chance() {
        // Four untried guesses for the same next token: the model picks at most one of them,
        // so together they bring at most one expected token, not four halves.
        let mut budget = budget(vec![(1, 10.0), (8, 24.0)], 8, 8);
        let candidates: Vec<Candidate> = (1..=4)
            .map(|token| Candidate { tokens: vec![token], weight: 1.0, source: Source::Repository, matched: 2 })
            .collect();
        let tree = build(0, &candidates, 64, 16);
        assert_eq!(budget.select(&tree, 256).len(), 2);
    }

    #[test]
    fn a_second_guess_is_judged_apart_from_the_first() {
        let mut budget = budget(vec![(1, 10.0), (3, 12.0), (8, 40.0)], 8, 8);
        let candidates = [
            Candidate { tokens: vec![1], weight: 1.0, source: Source::Repository, matched: 2 },
            Candidate { tokens: vec![2], weight: 1.0, source: Source::Repository, matched: 2 },
        ];
        let tree = build(0, &candidates, 64, 16);
        assert_eq!(tree.sibling_ranks, vec![0, 0, 1]);
        for _ in 0..50 {
            observe(&mut budget, &tree, &[0, 2]);
        }
        assert_eq!(budget.select(&tree, 256), vec![2]);
    }

    #[test]
    fn drafts_left_unverified_learn_from_the_models_choice() {
        let mut taught = budget(vec![(1, 10.0), (2, 12.0), (3, 30.0)], 8, 8);
        let guess = |token, weight| Candidate { tokens: vec![token], weight, source: Source::Repository, matched: 2 };
        // The model always takes the second guess, which the budget never verifies at first.
        let pool = build(0, &[guess(1, 3.0), guess(2, 1.0)], 64, 16);
        let first = pool.keep(&[1]);
        for _ in 0..50 {
            taught.observe(&Verified { pool: &pool, tree: &first, path: &[0], next: pool.tokens[2] });
        }
        let [first_guess, second_guess] = buckets(&pool)[..] else { panic!("two nodes") };
        assert!(taught.rate(first_guess) < 0.1, "{}", taught.rate(first_guess));
        assert!(taught.rate(second_guess) > 0.9, "{}", taught.rate(second_guess));
        assert_eq!(taught.select(&pool, 256), vec![2]);
        // The model's choice outside the pool teaches the pool's nodes that they were not it.
        let mut unseen = budget(vec![(1, 10.0), (2, 12.0), (3, 30.0)], 8, 8);
        for _ in 0..50 {
            unseen.observe(&Verified { pool: &pool, tree: &first, path: &[0], next: 7 });
        }
        assert!(buckets(&pool).iter().all(|&bucket| unseen.rate(bucket) < 0.1));
    }

    /// The buckets of a tree's nodes, in node order.
    fn buckets(tree: &DraftTree) -> Vec<usize> {
        (1..tree.len()).map(|node| CostAwareBudget::bucket(tree, node)).collect()
    }

    #[test]
    fn a_new_bucket_starts_from_what_its_kind_of_draft_earned() {
        let mut budget = budget(vec![(1, 10.0), (8, 24.0)], 8, 8);
        let guess = |token, weight, source| Candidate { tokens: vec![token], weight, source, matched: 2 };
        // Second guesses of the repository store (a quarter of the weight) never pass.
        let seen = build(0, &[guess(1, 3.0, Source::Repository), guess(2, 1.0, Source::Repository)], 64, 16);
        for _ in 0..40 {
            observe(&mut budget, &seen, &[0, 1]);
        }
        // A second guess with half the weight is another bucket of the same group.
        let new = build(0, &[guess(3, 1.0, Source::Repository), guess(4, 1.0, Source::Repository)], 64, 16);
        let [first, second] = buckets(&new)[..] else { panic!("two nodes") };
        assert!(!buckets(&seen).contains(&second));
        assert!(budget.rate(second) < 0.3, "{}", budget.rate(second));
        assert!(budget.rate(first) > 0.7, "{}", budget.rate(first));
        // Another source's second guesses have learned nothing.
        let other = build(0, &[guess(3, 1.0, Source::Common), guess(4, 1.0, Source::Common)], 64, 16);
        assert_eq!(budget.rate(buckets(&other)[1]), 0.5);
    }

    #[test]
    fn a_few_early_misses_do_not_stop_a_kind_of_draft_from_being_tried() {
        let mut budget = budget(vec![(1, 10.0), (8, 24.0)], 8, 8);
        let seen = chain_matched(&[1], 2);
        for _ in 0..10 {
            observe(&mut budget, &seen, &[0]);
        }
        let untried = chain_matched(&[1], 7);
        assert_ne!(buckets(&seen), buckets(&untried));
        assert!(budget.rate(buckets(&untried)[0]) > 0.3);
    }

    #[test]
    fn group_rates_are_rebuilt_from_restored_counts() {
        let mut learned = budget(vec![(1, 10.0), (8, 24.0)], 8, 8);
        let tree =
            build(0, &[Candidate { tokens: vec![1, 2], weight: 1.0, source: Source::Prompt, matched: 4 }], 64, 16);
        for _ in 0..5 {
            observe(&mut learned, &tree, &[0, 1]);
        }
        let mut restored = budget(vec![(1, 10.0), (8, 24.0)], 8, 8);
        assert!(restored.restore(learned.counts()));
        assert!(restored.restore(learned.counts()));
        let untried = chain_matched(&[5], 9);
        for bucket in buckets(&tree).into_iter().chain(buckets(&untried)) {
            assert_eq!(restored.rate(bucket), learned.rate(bucket));
        }
    }
}
