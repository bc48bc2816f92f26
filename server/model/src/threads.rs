//! The threads the forward pass runs on.
//!
//! The model's own kernels split their work over rayon's pool; candle's CPU kernels (used
//! at load time, and for weights kept in a quantized format this runtime has no kernel
//! for) use candle's pool. Both are sized from the same variables. rayon's workers spin
//! briefly and then sleep, so a busy machine (an editor, a build, the workspace indexer)
//! slows a forward pass down in proportion instead of stalling it at every barrier.

use std::ops::Range;

/// Requests `threads` worker threads. The pools read `CANDLE_NUM_THREADS` /
/// `RAYON_NUM_THREADS` (default: the cores) once, the first time they are used, so this
/// must run before any computation in the process.
pub fn configure(threads: Option<usize>) {
    if let Some(n) = threads.filter(|&n| n > 0) {
        let n = n.to_string();
        std::env::set_var("CANDLE_NUM_THREADS", &n);
        std::env::set_var("RAYON_NUM_THREADS", &n);
    }
}

/// Threads the forward pass actually runs on.
pub fn effective() -> usize {
    rayon::current_num_threads()
}

/// Calls `f` on consecutive ranges covering `0..n_items`, in parallel, a few ranges per
/// thread so that a slow thread's share can be taken over by the others.
pub fn for_each_range(n_items: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    use rayon::prelude::*;
    let chunk = n_items.div_ceil(effective() * 4).max(1);
    (0..n_items.div_ceil(chunk)).into_par_iter().for_each(|c| f(c * chunk..((c + 1) * chunk).min(n_items)));
}
