//! The DSLReports speed test's bufferbloat grade of a round-trip increase under load (A+ < 5 ms,
//! A < 30, B < 60, C < 200, D < 400, F ≥ 400 ms; there is no E), shared by the throughput
//! check and `pathdoc analyze`.

/// Upper bounds (ms of RTT increase, exclusive) of each grade; anything above the last is F.
pub const GRADES: &[(f64, &str)] = &[
    (5.0, "A+"),
    (30.0, "A"),
    (60.0, "B"),
    (200.0, "C"),
    (400.0, "D"),
];

/// Increase from which a finding is a Warn (grade C or worse): a terminal feels sluggish.
pub const WARN_FROM_MS: f64 = 60.0;

/// The grades in one line, for a finding's summary.
pub const GRADES_TEXT: &str = "A+ < 5 ms, A < 30, B < 60, C < 200, D < 400, F ≥ 400";

/// The DSLReports grade of an RTT increase in milliseconds.
pub fn grade(increase_ms: f64) -> &'static str {
    GRADES
        .iter()
        .find(|(bound, _)| increase_ms < *bound)
        .map_or("F", |(_, g)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades_follow_dslreports_thresholds() {
        for (ms, g) in [
            (0.0, "A+"),
            (4.9, "A+"),
            (5.0, "A"),
            (29.9, "A"),
            (30.0, "B"),
            (59.9, "B"),
            (60.0, "C"),
            (199.0, "C"),
            (200.0, "D"),
            (399.0, "D"),
            (400.0, "F"),
            (2000.0, "F"),
        ] {
            assert_eq!(grade(ms), g, "{ms}");
        }
    }
}
