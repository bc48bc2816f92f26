//! Thread count of candle's CPU kernels.

/// Requests `threads` worker threads for candle. candle sizes its pools once, from
/// `CANDLE_NUM_THREADS` / `RAYON_NUM_THREADS` (default: the physical cores), the first
/// time they are used, so this must run before any candle computation in the process.
pub fn configure(threads: Option<usize>) {
    if let Some(n) = threads.filter(|&n| n > 0) {
        let n = n.to_string();
        std::env::set_var("CANDLE_NUM_THREADS", &n);
        std::env::set_var("RAYON_NUM_THREADS", &n);
    }
}

/// Threads candle's kernels actually run on (its pool's workers plus the caller).
pub fn effective() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}
