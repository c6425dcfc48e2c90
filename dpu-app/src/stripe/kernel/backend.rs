//! Which kernels run: the instruction set, picked once from CPUID, and the table
//! format each kernel wants.

/// The instruction set the kernels run with. Only [`Backend::detect`],
/// [`Backend::all_available`] and [`Backend::by_name`] hand out SIMD ones, and
/// only after checking the CPU, so a `Backend` value is proof that the CPU has
/// what it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend(pub(super) Isa);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Isa {
    Portable,
    /// `vgf2p8affineqb` on zmm: GFNI with AVX-512F/BW (masked tails).
    #[cfg(target_arch = "x86_64")]
    GfniAvx512,
    /// VEX-encoded `vgf2p8affineqb` on ymm: GFNI with AVX2.
    #[cfg(target_arch = "x86_64")]
    GfniAvx2,
    /// Split tables, `vpshufb` on zmm: AVX-512BW.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// Split tables, `vpshufb` on ymm: AVX2.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// Split tables, `tbl` on 128-bit vectors.
    #[cfg(target_arch = "aarch64")]
    Neon,
}

/// How a kernel wants each coefficient: the 32-byte split table of
/// [`super::super::gf::split_table`] (shuffle kernels, portable) or the 8-byte bit
/// matrix of [`super::super::gf::affine_matrix`] (GFNI kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// Two 16-entry nibble tables, 32 bytes.
    Split,
    /// One 8x8 GF(2) matrix as a little-endian u64, 8 bytes.
    Affine,
}

impl TableKind {
    /// Bytes of one coefficient's table.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Split => 32,
            Self::Affine => 8,
        }
    }
}

/// Every backend this build knows, fastest first: the order [`Backend::detect`]
/// tries them in. GFNI does one multiply per byte per instruction where a split
/// table needs two shuffles, a shift and two masks, so GFNI comes first at each
/// width; wider vectors come before narrower ones at the same method (measured in
/// `benches/codec.rs`; figures in `dpu-app/src/bench/README.md`).
const PREFERENCE: &[Isa] = &[
    #[cfg(target_arch = "x86_64")]
    Isa::GfniAvx512,
    #[cfg(target_arch = "x86_64")]
    Isa::GfniAvx2,
    #[cfg(target_arch = "x86_64")]
    Isa::Avx512,
    #[cfg(target_arch = "x86_64")]
    Isa::Avx2,
    #[cfg(target_arch = "aarch64")]
    Isa::Neon,
    Isa::Portable,
];

impl Isa {
    /// Whether this CPU runs the kernels of `self`.
    fn supported(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx512 => {
                std::arch::is_x86_feature_detected!("gfni")
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx2 => {
                std::arch::is_x86_feature_detected!("gfni")
                    && std::arch::is_x86_feature_detected!("avx")
                    && std::arch::is_x86_feature_detected!("avx2")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
        }
    }
}

impl Backend {
    /// The fastest kernels this CPU runs: the first of, in order, GFNI on zmm
    /// (`gfni` + `avx512f` + `avx512bw`), GFNI on ymm (`gfni` + `avx2`), AVX-512BW
    /// split tables, AVX2 split tables (x86-64); NEON (aarch64); the portable
    /// table code otherwise. [`Backend::features`] says what each needs.
    pub fn detect() -> Self {
        Self::all_available().next().unwrap_or(Self(Isa::Portable))
    }

    /// Every backend this CPU runs, fastest first ([`Backend::detect`]'s pick
    /// first, [`Backend::portable`] last). Tests and the benchmark run them all.
    pub fn all_available() -> impl Iterator<Item = Self> {
        PREFERENCE.iter().copied().filter(|isa| isa.supported()).map(Self)
    }

    /// The backend called `name` (see [`Backend::name`]) if this CPU runs it.
    pub fn by_name(name: &str) -> Option<Self> {
        Self::all_available().find(|b| b.name() == name)
    }

    /// The portable kernels: plain Rust, any CPU; slow (about 1 GB/s), used where
    /// no SIMD kernel exists and to cross-check the SIMD ones in tests.
    pub fn portable() -> Self {
        Self(Isa::Portable)
    }

    /// Name for logs and the benchmark: `gfni-avx512`, `gfni-avx2`, `avx512`,
    /// `avx2`, `neon` or `portable`.
    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx512 => "gfni-avx512",
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx2 => "gfni-avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
        }
    }

    /// The CPU features (as `is_*_feature_detected!` names them) the kernels need.
    pub fn features(self) -> &'static [&'static str] {
        match self.0 {
            Isa::Portable => &[],
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx512 => &["gfni", "avx512f", "avx512bw"],
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx2 => &["gfni", "avx", "avx2"],
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => &["avx512f", "avx512bw"],
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => &["avx2"],
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => &["neon"],
        }
    }

    /// The per-coefficient table format these kernels read.
    pub fn table_kind(self) -> TableKind {
        match self.0 {
            #[cfg(target_arch = "x86_64")]
            Isa::GfniAvx512 | Isa::GfniAvx2 => TableKind::Affine,
            _ => TableKind::Split,
        }
    }

    /// Every backend in [`Backend::detect`]'s order of preference, whether or
    /// not this CPU runs it, by name (for reports of what was skipped).
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        PREFERENCE.iter().map(|&isa| Self(isa).name())
    }
}
