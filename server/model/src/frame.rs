//! Cache-line-aligned stack frames for the x86-64 vector kernels.
//!
//! A kernel short of vector registers spills some to its stack frame, which the ABI aligns
//! to 16 bytes only. Where the frames above it leave the frame, a 32- or 64-byte spill can
//! straddle two cache lines, and every reload of it then costs two. That depends on every
//! caller's frame, so an unrelated change in the attention code once made the AVX2 kernels
//! 15–20% slower (benches/README.md). A kernel that calls [`align_frame!`] has its frame
//! aligned to 64 bytes: its spills sit where the compiler placed them in a line, whatever
//! called it.

/// A local that makes the compiler align its function's frame to a cache line.
#[repr(C, align(64))]
pub(crate) struct CacheLineFrame(pub(crate) [u8; 64]);

/// Aligns the calling function's stack frame to a cache line (see [`CacheLineFrame`]).
macro_rules! align_frame {
    () => {
        let frame = $crate::frame::CacheLineFrame([0; 64]);
        std::hint::black_box(&frame);
    };
}

pub(crate) use align_frame;
