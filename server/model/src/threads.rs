//! The threads the forward pass runs on.
//!
//! The model's own kernels split their work over one rayon pool; candle's CPU kernels
//! (used at load time, and for weights kept in a quantized format this runtime has no
//! kernel for) use candle's pool. Both are sized from the same variables. rayon's workers
//! spin briefly and then sleep, so a busy machine (an editor, a build, the workspace
//! indexer) slows a forward pass down in proportion instead of stalling it at every barrier.
//!
//! A whole forward pass runs on one of the pool's workers ([`run`]): its ~240 parallel
//! loops then start on the thread that is already running, instead of each handing the
//! work to the pool and putting the caller to sleep until it is done.

use rayon::{ThreadPool, ThreadPoolBuilder};
use std::ops::Range;
use std::sync::OnceLock;

/// Requests `threads` worker threads, by default one per physical core (unless
/// `RAYON_NUM_THREADS` or `CANDLE_NUM_THREADS` says otherwise). The pools read those variables
/// once, the first time they are used, so this must run before any computation in the process.
pub fn configure(threads: Option<usize>) {
    let requested = threads.filter(|&n| n > 0);
    if requested.is_none() && set_by_person().is_some() {
        return;
    }
    let n = wanted(requested).to_string();
    std::env::set_var("CANDLE_NUM_THREADS", &n);
    std::env::set_var("RAYON_NUM_THREADS", &n);
}

/// The threads [`configure`] would give the pools for `threads`: that many, else what a person
/// set in `RAYON_NUM_THREADS` or `CANDLE_NUM_THREADS`, else one per physical core.
pub fn wanted(threads: Option<usize>) -> usize {
    threads.filter(|&n| n > 0).or_else(set_by_person).unwrap_or_else(physical_cores)
}

/// The thread count in `RAYON_NUM_THREADS` (else `CANDLE_NUM_THREADS`), if a person set one:
/// read before [`configure`] first sets them.
fn set_by_person() -> Option<usize> {
    static SET: OnceLock<Option<usize>> = OnceLock::new();
    *SET.get_or_init(|| {
        ["RAYON_NUM_THREADS", "CANDLE_NUM_THREADS"]
            .iter()
            .find_map(|var| std::env::var(var).ok())
            .map(|value| value.trim().parse().ok().filter(|&n| n > 0).unwrap_or_else(physical_cores))
    })
}

/// The threads the model runs on, once its pool has started (at the first forward pass). The
/// pool keeps them for the life of the process: a new count takes effect in a new process.
pub fn running() -> Option<usize> {
    POOL.get().map(ThreadPool::current_num_threads)
}

/// The physical cores this process may run on. Two threads of one core (SMT) share its vector
/// units and its L1 cache, where a block of weights is kept while every input row meets it: a
/// second thread there adds contention, not arithmetic (the pools' own default would take every
/// logical CPU).
fn physical_cores() -> usize {
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    num_cpus::get_physical().clamp(1, allowed)
}

static POOL: OnceLock<ThreadPool> = OnceLock::new();

fn pool() -> &'static ThreadPool {
    POOL.get_or_init(|| {
        ThreadPoolBuilder::new()
            .thread_name(|i| format!("copilotd-model-{i}"))
            .build()
            .expect("cannot start the model's worker threads")
    })
}

/// Threads the forward pass actually runs on.
pub fn effective() -> usize {
    pool().current_num_threads()
}

/// Runs `op` on a worker of the pool (directly, when already on one). A whole generation
/// runs there too: the work between forward passes (drafting, verifying) then has a core
/// while the other workers spin down, instead of competing with all of them for one.
pub fn run<R: Send>(op: impl FnOnce() -> R + Send) -> R {
    pool().install(op)
}

/// Calls `f` on consecutive ranges covering `0..n_items`, in parallel, a few ranges per
/// thread so that a slow thread's share can be taken over by the others.
pub fn for_each_range(n_items: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    use rayon::prelude::*;
    let chunk = range_len(n_items);
    run(|| (0..n_items.div_ceil(chunk)).into_par_iter().for_each(|c| f(c * chunk..((c + 1) * chunk).min(n_items))));
}

/// [`for_each_range`] over the rows of `out` (`row_len` items each): `f` gets the first
/// row of its range and the range's rows.
pub fn for_each_rows<T: Send>(out: &mut [T], row_len: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    use rayon::prelude::*;
    let rows = range_len(out.len() / row_len.max(1));
    run(|| out.par_chunks_mut(rows * row_len.max(1)).enumerate().for_each(|(c, part)| f(c * rows, part)));
}

/// [`for_each_range`] that returns `f`'s results, in the order of the ranges.
pub fn map_ranges<R: Send>(n_items: usize, f: impl Fn(Range<usize>) -> R + Sync + Send) -> Vec<R> {
    use rayon::prelude::*;
    let chunk = range_len(n_items);
    run(|| (0..n_items.div_ceil(chunk)).into_par_iter().map(|c| f(c * chunk..((c + 1) * chunk).min(n_items))).collect())
}

/// Whether per-row work on `rows` rows (quantizing inputs, SwiGLU) pays to split over the
/// threads: a prefill chunk's rows do, a tree pass's few do not (waking a sleeping worker
/// costs about 50 µs on a VM, measured, more than their work).
pub fn worth_splitting(rows: usize) -> bool {
    rows >= 64 && effective() > 1
}

/// Items per range of the parallel loops above.
fn range_len(n_items: usize) -> usize {
    n_items.div_ceil(effective() * 4).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_is_at_least_one_thread_and_at_most_the_cpus_allowed() {
        let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((1..=allowed).contains(&super::physical_cores()));
    }
}
