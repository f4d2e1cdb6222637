//! What the workspace's benchmarks share: their settings, read from the
//! environment, and the medians they print.

/// The number the environment variable `name` holds, or `default` when it
/// is not set.
///
/// # Panics
///
/// When it is set to something that does not read as such a number: a run
/// with a mistyped setting would measure something else.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {value:?}")),
        Err(_) => default,
    }
}

/// The median of `values` (of an even count, the upper middle one).
///
/// # Panics
///
/// When there are no values.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    assert!(!v.is_empty(), "the median of no values");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_median_is_the_middle_value_and_a_setting_falls_back_to_its_default() {
        assert_eq!(super::median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median([4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(super::env_number("TOLLGATE_TEST_SUPPORT_UNSET", 7u64), 7);
    }
}
