//! Token trees: validation, positions and the attention pattern of a tree pass.

use anyhow::{bail, Result};

/// The shape of one tree pass: for each node, its depth and the nodes it attends to
/// among the new ones (its ancestors from the top level down, then itself).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeLayout {
    parents: Vec<Option<usize>>,
    depths: Vec<usize>,
    visible: Vec<Vec<usize>>,
}

impl TreeLayout {
    /// Checks `parents` (each parent index must precede its child) and derives the layout.
    pub fn new(parents: &[Option<usize>]) -> Result<Self> {
        let mut depths = Vec::with_capacity(parents.len());
        let mut visible: Vec<Vec<usize>> = Vec::with_capacity(parents.len());
        for (i, &parent) in parents.iter().enumerate() {
            let (depth, mut seen) = match parent {
                None => (0, Vec::new()),
                Some(p) if p < i => (depths[p] + 1, visible[p].clone()),
                Some(p) => bail!("tree node {i} has parent {p}, which does not precede it"),
            };
            seen.push(i);
            depths.push(depth);
            visible.push(seen);
        }
        Ok(Self { parents: parents.to_vec(), depths, visible })
    }

    /// A chain: node i is the child of node i - 1 (a prompt chunk).
    pub fn chain(len: usize) -> Self {
        let parents: Vec<_> = (0..len).map(|i| i.checked_sub(1)).collect();
        Self::new(&parents).expect("a chain is a valid tree")
    }

    pub fn len(&self) -> usize {
        self.parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// Depth of node `i` (0 for top-level nodes); its position is `cache_len + depth`.
    pub fn depth(&self, i: usize) -> usize {
        self.depths[i]
    }

    pub fn max_depth(&self) -> Option<usize> {
        self.depths.iter().copied().max()
    }

    /// New nodes that node `i` attends to, in order: ancestors from the top, then `i`.
    pub fn visible(&self, i: usize) -> &[usize] {
        &self.visible[i]
    }

    /// Checks that `path` is a chain from a top-level node downwards.
    pub fn check_path(&self, path: &[usize]) -> Result<()> {
        let mut expected_parent = None;
        for &node in path {
            if node >= self.len() {
                bail!("path node {node} is out of range (the last tree had {} nodes)", self.len());
            }
            if self.parents[node] != expected_parent {
                bail!("path is not a chain from a top-level node: node {node} does not follow {expected_parent:?}");
            }
            expected_parent = Some(node);
        }
        Ok(())
    }

    /// The additive attention mask over `[cache ; nodes]` (0 = visible, -inf = hidden),
    /// row-major `[len, cache_len + len]`. The forward pass gathers `visible` rows
    /// instead of materialising this; it documents and tests the same pattern.
    pub fn mask(&self, cache_len: usize) -> Vec<f32> {
        let width = cache_len + self.len();
        let mut mask = vec![f32::NEG_INFINITY; self.len() * width];
        for i in 0..self.len() {
            let row = &mut mask[i * width..(i + 1) * width];
            row[..cache_len].fill(0.0);
            for &j in self.visible(i) {
                row[cache_len + j] = 0.0;
            }
        }
        mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_mask_of_a_branching_tree() {
        //   0 ─ 1 ─ 3
        //   └── 2
        //   4 (second top-level node)
        let t = TreeLayout::new(&[None, Some(0), Some(0), Some(1), None]).unwrap();
        let depths: Vec<_> = (0..5).map(|i| t.depth(i)).collect();
        assert_eq!(depths, [0, 1, 1, 2, 0]);
        assert_eq!(t.visible(3), [0, 1, 3]);
        assert_eq!(t.visible(2), [0, 2]);
        assert_eq!(t.visible(4), [4]);
        let cache = 2;
        let m = t.mask(cache);
        let visible = |i: usize| -> Vec<usize> { (0..cache + 5).filter(|&j| m[i * (cache + 5) + j] == 0.0).collect() };
        assert_eq!(visible(0), [0, 1, 2]);
        assert_eq!(visible(1), [0, 1, 2, 3]);
        assert_eq!(visible(2), [0, 1, 2, 4]);
        assert_eq!(visible(3), [0, 1, 2, 3, 5]);
        assert_eq!(visible(4), [0, 1, 6]);
    }

    #[test]
    fn chain_is_causal() {
        let t = TreeLayout::chain(3);
        assert_eq!(t.visible(2), [0, 1, 2]);
        assert_eq!(t.max_depth(), Some(2));
    }

    #[test]
    fn rejects_forward_parent_links_and_bad_paths() {
        assert!(TreeLayout::new(&[Some(0)]).is_err());
        assert!(TreeLayout::new(&[None, Some(2), None]).is_err());
        let t = TreeLayout::new(&[None, Some(0), Some(0), Some(1)]).unwrap();
        assert!(t.check_path(&[0, 1, 3]).is_ok());
        assert!(t.check_path(&[]).is_ok());
        assert!(t.check_path(&[1, 3]).is_err(), "must start at the top level");
        assert!(t.check_path(&[0, 2, 3]).is_err(), "3 is not a child of 2");
        assert!(t.check_path(&[0, 9]).is_err());
    }
}
