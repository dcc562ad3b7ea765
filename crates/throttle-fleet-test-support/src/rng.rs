//! The seeded generator the tests and benchmarks share.

/// SplitMix64 (Steele, Lea and Flood, 2014): the one seeded generator of
/// the tests and benchmarks. Small and fast, its output depends only on its
/// seed, so a failing seed replays; not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (by remainder: a bias of at most `n / 2^64`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Nearly uniform in `[0, n)` by Lemire's multiply-shift, without the
    /// rejection step (a bias of at most `n / 2^64`): what the simulator's
    /// timelines are drawn with.
    pub fn below_by_multiply(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential gap with mean `mean_us` (Poisson arrivals).
    pub fn exp(&mut self, mean_us: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean_us) as u64
    }

    /// An index drawn with probability proportional to `weights`.
    pub fn weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
}
