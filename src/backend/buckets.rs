//! The fixed buckets of the server's duration histograms (time in queue,
//! run time), shared by the counters ([`super::counters`]) and each
//! queue's last hour ([`super::history`]), and the quantile estimate read
//! from them.

/// The histograms' upper bounds, in microseconds; a last, unbounded
/// bucket follows (`le="+Inf"`). From 5 ms to an hour: a job queue's waits
/// and runs span seconds to hours, where Prometheus' default buckets (5 ms
/// to 10 s) would put most of them in `+Inf`.
pub const BOUNDS_MICROS: [i64; 16] = [
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    300_000_000,
    900_000_000,
    3_600_000_000,
];

/// Buckets per histogram: one per bound, and `+Inf`.
pub const BUCKETS: usize = BOUNDS_MICROS.len() + 1;

/// The `q` quantile (0 to 1) of a histogram's observations, in seconds, as
/// Prometheus' `histogram_quantile` estimates it: the bucket holding the
/// observation of rank `q × count`, interpolated linearly between its
/// bounds (0 below the first); an observation in the unbounded last bucket
/// reads as the last bound. `None` without observations.
pub fn quantile(buckets: &[u32; BUCKETS], q: f64) -> Option<f64> {
    let count: u64 = buckets.iter().map(|&n| u64::from(n)).sum();
    if count == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * count as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        let n = u64::from(n);
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = BOUNDS_MICROS.get(i) else {
                return Some(BOUNDS_MICROS[BOUNDS_MICROS.len() - 1] as f64 / 1e6);
            };
            let lower = if i == 0 { 0 } else { BOUNDS_MICROS[i - 1] };
            let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
            return Some((lower as f64 + within * (upper - lower) as f64) / 1e6);
        }
        below += n;
    }
    Some(BOUNDS_MICROS[BOUNDS_MICROS.len() - 1] as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let mut buckets = [0; BUCKETS];
        assert_eq!(quantile(&buckets, 0.5), None);
        buckets[0] = 100; // all at or below 5 ms
        assert!((quantile(&buckets, 0.5).unwrap() - 0.0025).abs() < 1e-9);
        buckets[BUCKETS - 1] = 100; // as many beyond an hour
        assert_eq!(quantile(&buckets, 0.99), Some(3600.0));
        assert!((quantile(&buckets, 0.5).unwrap() - 0.005).abs() < 1e-9);
    }
}
