//! Which instruction set the forward pass runs on.
//!
//! The model's own kernels (the quantized matmul of [`crate::quant`], attention) exist in one
//! version per CPU class. The best one the CPU supports is picked at load time; a
//! kernel can be forced with [`crate::LoadOptions::kernel`] or the environment variable
//! [`KERNEL_ENV`] (to compare kernels on one machine, or to test each one). Every kernel
//! computes the same numbers bit for bit (each is tested against one lane-by-lane
//! reference), so the choice changes speed only.

use std::fmt;
use std::str::FromStr;

/// Environment variable that forces a kernel by name (see [`Kernel::name`]).
pub const KERNEL_ENV: &str = "COPILOTD_KERNEL";

/// A CPU class the kernels are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// x86-64 with AVX-512 (F, BW, VL) and VNNI: 64-byte vectors, `vpdpbusd`.
    Avx512Vnni,
    /// x86-64 with AVX2, FMA and the VEX form of VNNI (recent Intel and AMD).
    AvxVnni,
    /// x86-64 with AVX2, FMA and F16C: byte products through `vpmaddubsw` / `vpmaddwd`.
    Avx2,
    /// aarch64 with the dot-product extension (`sdot`).
    NeonDotprod,
    /// aarch64 NEON: widening byte multiplies.
    Neon,
    /// Plain Rust, on any CPU: the kernels' lane-by-lane reference.
    Portable,
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 6] =
        [Kernel::Avx512Vnni, Kernel::AvxVnni, Kernel::Avx2, Kernel::NeonDotprod, Kernel::Neon, Kernel::Portable];

    /// The name used by `--kernel`, [`KERNEL_ENV`] and the benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni => "avx512-vnni",
            Kernel::AvxVnni => "avx-vnni",
            Kernel::Avx2 => "avx2",
            Kernel::NeonDotprod => "neon-dotprod",
            Kernel::Neon => "neon",
            Kernel::Portable => "portable",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => {
                Kernel::Avx2.is_supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => Kernel::Avx2.is_supported() && std::arch::is_x86_feature_detected!("avxvnni"),
            // F16C converts 4-bit weights' scales and the half-float KV cache; every AVX2 CPU has it.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => crate::ops::has_avx2_fma() && std::arch::is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "aarch64")]
            Kernel::NeonDotprod => {
                std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn best() -> Kernel {
        Kernel::ALL.into_iter().find(|k| k.is_supported()).unwrap_or(Kernel::Portable)
    }

    /// The kernels this CPU runs, fastest first.
    pub fn supported() -> Vec<Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.is_supported()).collect()
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kernel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Kernel::ALL.into_iter().find(|k| k.name() == wanted).ok_or_else(|| {
            let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
            format!("unknown kernel '{s}' (expected one of {})", names.join(", "))
        })
    }
}

/// The kernel a model runs on, and why, if it is not the one asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelChoice {
    pub kernel: Kernel,
    /// Set when the requested kernel could not be used.
    pub warning: Option<String>,
}

/// Picks the kernel: `requested` (from the options), else [`KERNEL_ENV`], else the best.
/// A kernel this CPU cannot run gives the portable kernel and a warning: never an illegal
/// instruction. An unknown name in the variable (a typo) gives the best and a warning.
pub fn choose(requested: Option<Kernel>) -> KernelChoice {
    choose_with(requested, std::env::var(KERNEL_ENV).ok())
}

/// [`choose`] with `variable` as the value of [`KERNEL_ENV`].
fn choose_with(requested: Option<Kernel>, variable: Option<String>) -> KernelChoice {
    let requested = match (requested, variable) {
        (Some(kernel), _) => Ok(Some(kernel)),
        (None, Some(name)) if !name.trim().is_empty() => {
            name.parse().map(Some).map_err(|e| format!("{KERNEL_ENV}: {e}"))
        }
        (None, _) => Ok(None),
    };
    match requested {
        Ok(None) => KernelChoice { kernel: Kernel::best(), warning: None },
        Ok(Some(kernel)) if kernel.is_supported() => KernelChoice { kernel, warning: None },
        Ok(Some(kernel)) => KernelChoice {
            kernel: Kernel::Portable,
            warning: Some(format!(
                "this CPU cannot run the {kernel} kernel; running the portable kernel (slow). \
                 Kernels this CPU runs: {}",
                names(&Kernel::supported())
            )),
        },
        Err(e) => {
            let kernel = Kernel::best();
            KernelChoice { kernel, warning: Some(format!("{e}; running the fastest kernel this CPU runs, {kernel}")) }
        }
    }
}

fn names(kernels: &[Kernel]) -> String {
    kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
}

/// The CPU as the benchmarks record it: its model name and the features the kernels use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuDescription {
    pub model: String,
    pub features: Vec<&'static str>,
}

impl CpuDescription {
    pub fn of_this_machine() -> CpuDescription {
        CpuDescription { model: cpu_model_name(), features: detected_features() }
    }
}

fn cpu_model_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            matches!(key.trim(), "model name" | "Model" | "Hardware").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| format!("unknown {} CPU", std::env::consts::ARCH))
}

fn detected_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let all = [
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("avxvnni", has!("avxvnni")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vl", has!("avx512vl")),
            ("avx512vnni", has!("avx512vnni")),
        ];
        all.into_iter().filter_map(|(name, present)| present.then_some(name)).collect()
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        let all = [("neon", has!("neon")), ("dotprod", has!("dotprod")), ("i8mm", has!("i8mm"))];
        all.into_iter().filter_map(|(name, present)| present.then_some(name)).collect()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for kernel in Kernel::ALL {
            assert_eq!(kernel.name().parse::<Kernel>(), Ok(kernel));
        }
        assert_eq!("AVX512_VNNI".parse::<Kernel>(), Ok(Kernel::Avx512Vnni));
        let error = "sse9".parse::<Kernel>().unwrap_err();
        assert!(error.contains("sse9") && error.contains("avx2"), "{error}");
    }

    #[test]
    fn the_portable_kernel_runs_everywhere_and_the_best_is_supported() {
        assert!(Kernel::Portable.is_supported());
        assert!(Kernel::best().is_supported());
        assert_eq!(Kernel::supported().first(), Some(&Kernel::best()));
    }

    #[test]
    fn a_kernel_the_cpu_lacks_falls_back_to_portable_with_a_warning() {
        let missing =
            Kernel::ALL.into_iter().find(|k| !k.is_supported()).expect("no CPU runs both x86 and ARM kernels");
        let choice = choose(Some(missing));
        assert_eq!(choice.kernel, Kernel::Portable);
        let warning = choice.warning.expect("a warning");
        assert!(warning.contains(missing.name()), "{warning}");
        assert_eq!(choose(Some(Kernel::Portable)), KernelChoice { kernel: Kernel::Portable, warning: None });
    }

    #[test]
    fn an_unknown_kernel_name_in_the_environment_gives_the_best_kernel_with_a_warning() {
        let choice = choose_with(None, Some("avx-512".to_owned()));
        assert_eq!(choice.kernel, Kernel::best());
        let warning = choice.warning.expect("a warning");
        assert!(warning.contains("unknown kernel 'avx-512'") && warning.contains(Kernel::best().name()), "{warning}");
    }
}
