//! Which kernels run: the instruction set ([`Isa`]: detected, or asked for with
//! `TOOLGATE_ISA`) and whether toolgate's kernels run at all (`TOOLGATE_KERNELS`).

/// What `TOOLGATE_KERNELS` asks for, read once: `candle` (candle's own ops everywhere,
/// for comparison), `portable` (these kernels without SIMD, as `TOOLGATE_ISA=portable`),
/// anything else or unset (these kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Choice {
    Best,
    Portable,
    Candle,
}

pub(super) fn choice() -> Choice {
    static CHOICE: std::sync::OnceLock<Choice> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| match std::env::var("TOOLGATE_KERNELS").as_deref() {
        Ok("candle") => Choice::Candle,
        Ok("portable") => Choice::Portable,
        _ => Choice::Best,
    })
}

/// Whether the CPU model runs on these kernels: true unless `TOOLGATE_KERNELS=candle`
/// (which keeps candle's own ops everywhere, for comparison). Read once.
pub fn enabled() -> bool {
    choice() != Choice::Candle
}

/// The instruction set the kernels run with, from least to most capable (the x86 and
/// ARM sets are ordered by declaration only: no CPU has both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust, any CPU.
    Portable,
    /// AVX2 + FMA + F16C (x86-64).
    Avx2,
    /// AVX-512 F/BW/VL/VNNI on top of [`Isa::Avx2`] (x86-64): the k-quant dot
    /// products (Q4_K, Q5_K, Q6_K) in 512-bit registers, every other kernel as AVX2.
    Avx512,
    /// NEON with the dot-product extension (aarch64 `dotprod`: Graviton 2 and later,
    /// Apple M1 and later, Ampere Altra): the decode-time dot products of the 32- and
    /// 256-weight types (`neon.rs`), with the portable kernels' bits; everything else
    /// as [`Isa::Portable`].
    Neon,
}

impl Isa {
    /// The kernels the run uses: the best this CPU supports, or the one
    /// `TOOLGATE_ISA=portable|avx2|avx512|neon` asks for (`TOOLGATE_KERNELS=portable` is
    /// `TOOLGATE_ISA=portable`). An instruction set the CPU lacks is never used: asking
    /// for one gives the best the CPU has below it. Read once (cheap afterwards).
    ///
    /// ```
    /// use toolgate::kernels::Isa;
    /// assert!(Isa::detect().supported());
    /// assert!(Isa::available().contains(&Isa::detect()));
    /// ```
    pub fn detect() -> Isa {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            let best = Self::available().last().copied().unwrap_or(Isa::Portable);
            let asked = match std::env::var("TOOLGATE_ISA").as_deref() {
                Ok("portable") => Isa::Portable,
                Ok("avx2") => Isa::Avx2,
                Ok("avx512") => Isa::Avx512,
                Ok("neon") => Isa::Neon,
                Ok(other) => {
                    tracing::warn!("TOOLGATE_ISA={other} is not portable, avx2, avx512 or neon; using {best:?}");
                    best
                }
                Err(_) => best,
            };
            let asked = if choice() == Choice::Portable { Isa::Portable } else { asked };
            Self::available().into_iter().rev().find(|&i| i <= asked).unwrap_or(Isa::Portable)
        })
    }

    /// Whether this CPU runs the kernels of `self` (checked at each call: cheap, a
    /// cached CPUID read).
    pub fn supported(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => {
                std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every instruction set this CPU runs the kernels with, least capable first
    /// (tests compare each against the same reference).
    pub fn available() -> Vec<Isa> {
        [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon].into_iter().filter(|i| i.supported()).collect()
    }
}
