//! Percentiles of measured delays.

use std::time::Duration;

/// Summary of a sample of durations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// Nearest-rank percentiles; an empty sample gives zeros and `count == 0`.
pub fn summarize(mut sample: Vec<Duration>) -> Summary {
    if sample.is_empty() {
        return Summary::default();
    }
    sample.sort_unstable();
    let rank = |p: f64| {
        let i = ((p / 100.0) * sample.len() as f64).ceil() as usize;
        sample[i.clamp(1, sample.len()) - 1]
    };
    Summary {
        count: sample.len(),
        p50: rank(50.0),
        p90: rank(90.0),
        p99: rank(99.0),
        max: sample[sample.len() - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s = summarize((1..=100).map(Duration::from_millis).collect());
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(summarize(Vec::new()).count, 0);
    }
}
