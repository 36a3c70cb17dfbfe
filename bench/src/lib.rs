//! What the benchmark's binaries share (`workfence-bench`, `-flow`,
//! `-router-bench`, `-ui-bench`, ...): the statistics their reports print, and
//! the paced load of `workfence-sustained` and `workfence-pressure` ([`load`]).

pub mod load;

/// Parses the value after `flag` on a command line (`it` yields the
/// arguments after it): 'FLAG needs a value' when there is none, the
/// parse error with the flag and the text otherwise.
pub fn value<T: std::str::FromStr>(
    flag: &str,
    it: &mut impl Iterator<Item = String>,
) -> Result<T, Box<dyn std::error::Error + Send + Sync>>
where
    T::Err: std::fmt::Display,
{
    let text = it.next().ok_or(format!("{flag} needs a value"))?;
    text.parse()
        .map_err(|e| format!("{flag} {text:?}: {e}").into())
}

/// The median of `v` (the mean of the two middle values for an even
/// count); NaN for none. NaNs sort last (`f64::total_cmp`).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
