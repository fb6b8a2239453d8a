//! Which hop forgets first: inference from probe groups whose state is kept warm on part of
//! the path. Pure logic; the client runs the groups and fills [`Split`]s.
//!
//! A connection kept warm on hops `S` by TTL-limited keepalives dies after the shortest
//! timeout among the hops *not* in `S`. For a split after hop `h` two groups run:
//!
//! * **far-warm** (server keepalives with TTL `H − h` keep hops `h+1..H` warm): dies after
//!   `min(timeout of hops 1..h)`, the *near* segment;
//! * **near-warm** (client keepalives with TTL `h` keep hops `1..h` warm): dies after
//!   `min(timeout of hops h+1..H)`, the *far* segment.
//!
//! The ordinary probes (nothing warm) die after the overall minimum `T0`. The culprit is the
//! first hop `c` whose near segment `1..c` already dies at `T0`; the segment before it
//! (`1..c−1`) and after it (`c+1..H`) give the other boxes' timeouts (or lower bounds).
//! A hop that does not answer TTL-expired probes still counts; "hop 1" includes the client's
//! own firewall and the last hop the server's, which TTL cannot tell apart.

use std::time::Duration;

use serde::Serialize;

use crate::verdict::LadderOutcome;

/// The two groups that split the path after hop `hop`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Split {
    pub hop: usize,
    /// Hops `1..=hop` left cold (far-warm group).
    pub near: Option<LadderOutcome>,
    /// Hops `hop+1..=H` left cold (near-warm group).
    pub far: Option<LadderOutcome>,
}

/// What a group's death time says relative to the ordinary probes' `T0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compared {
    /// Died at `T0` (within the resolutions).
    Same,
    /// Survived longer than the ordinary probes lived.
    Longer,
    /// Not enough data.
    Unknown,
}

fn compare(g: Option<&LadderOutcome>, t0_upper: Duration) -> Compared {
    let Some(g) = g else {
        return Compared::Unknown;
    };
    let lower = g.lower.unwrap_or_default();
    if lower >= t0_upper {
        Compared::Longer
    } else if g.upper.is_some() {
        Compared::Same
    } else {
        Compared::Unknown
    }
}

/// The timeout of a run of hops (the shortest among them), as one group measured it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    pub first_hop: usize,
    pub last_hop: usize,
    /// Longest idle survived.
    #[serde(rename = "lower_s", with = "crate::duration::secs::option")]
    pub lower: Option<Duration>,
    /// Shortest idle that killed the connection; `None`: no timeout up to `lower`.
    #[serde(rename = "upper_s", with = "crate::duration::secs::option")]
    pub upper: Option<Duration>,
}

impl Segment {
    fn from(first_hop: usize, last_hop: usize, g: &LadderOutcome) -> Self {
        Segment {
            first_hop,
            last_hop,
            lower: g.lower,
            upper: g.upper,
        }
    }
}

/// Where the first-forgetting box is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "hop")]
pub enum Location {
    /// This hop forgets first.
    Hop(usize),
    /// Somewhere after this hop (the splits tested did not reach it).
    Beyond(usize),
    /// The groups do not say (too short a run, outages, contradictory results).
    Undetermined,
}

/// The inference's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CulpritAnalysis {
    pub location: Location,
    /// A box on the other side of the culprit forgets at the same time (within resolution):
    /// two boxes with equal timeouts.
    pub tie_after: bool,
    /// Hops before the culprit: their shortest timeout (or lower bound).
    pub before: Option<Segment>,
    /// Hops after the culprit.
    pub after: Option<Segment>,
}

/// Infer the culprit from the ordinary probes' outcome `t0` and the splits (ascending `hop`),
/// on a path of `hops` routers.
pub fn infer(t0: &LadderOutcome, splits: &[Split], hops: usize) -> CulpritAnalysis {
    let undetermined = CulpritAnalysis {
        location: Location::Undetermined,
        tie_after: false,
        before: None,
        after: None,
    };
    let Some(t0_upper) = t0.upper else {
        return undetermined;
    };
    if hops == 1 && splits.is_empty() {
        return CulpritAnalysis {
            location: Location::Hop(1),
            ..undetermined
        };
    }
    let mut previous: Option<&Split> = None;
    for s in splits {
        match compare(s.near.as_ref(), t0_upper) {
            Compared::Same => {
                let before = previous
                    .and_then(|p| p.near.as_ref())
                    .map(|g| Segment::from(1, s.hop - 1, g));
                let after = s.far.as_ref().map(|g| Segment::from(s.hop + 1, hops, g));
                return CulpritAnalysis {
                    location: Location::Hop(s.hop),
                    tie_after: compare(s.far.as_ref(), t0_upper) == Compared::Same,
                    before,
                    after,
                };
            }
            Compared::Longer => previous = Some(s),
            Compared::Unknown => return undetermined,
        }
    }
    let Some(last) = previous else {
        return undetermined;
    };
    // Every near segment tested outlived T0: the culprit is after the last split, and the far
    // segment of that split must die at T0 for the data to agree.
    if compare(last.far.as_ref(), t0_upper) != Compared::Same {
        return undetermined;
    }
    let before = last.near.as_ref().map(|g| Segment::from(1, last.hop, g));
    if last.hop + 1 == hops {
        CulpritAnalysis {
            location: Location::Hop(hops),
            tie_after: false,
            before,
            after: None,
        }
    } else {
        CulpritAnalysis {
            location: Location::Beyond(last.hop),
            tie_after: false,
            before,
            after: None,
        }
    }
}

/// The splits worth testing on a path of `hops` routers: after hop 1, 2, … up to `max`, and
/// never after the last router.
pub fn splits_for(hops: usize, max: usize) -> Vec<usize> {
    (1..hops.min(max + 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    /// A group against boxes whose shortest timeout is `timeout` (None: no stateful box),
    /// run to horizon 30 s at 1 s resolution.
    fn g(timeout: Option<u64>) -> LadderOutcome {
        LadderOutcome {
            lower: Some(s(timeout.map_or(30, |t| t - 1))),
            upper: timeout.map(s),
            resolution: s(1),
            horizon: s(30),
            tests: 5,
            lost_to_outage: 0,
            contradictions: 0,
            deaths: vec![],
        }
    }

    /// Simulate the groups for per-hop timeouts (None = stateless router).
    fn run(timeouts: &[Option<u64>], max_splits: usize) -> CulpritAnalysis {
        let min = |hops: &[Option<u64>]| hops.iter().flatten().min().copied();
        let t0 = g(min(timeouts));
        let h = timeouts.len();
        let splits: Vec<Split> = splits_for(h, max_splits)
            .into_iter()
            .map(|k| Split {
                hop: k,
                near: Some(g(min(&timeouts[..k]))),
                far: Some(g(min(&timeouts[k..]))),
            })
            .collect();
        infer(&t0, &splits, h)
    }

    #[test]
    fn culprit_and_other_timeouts_from_the_splits() {
        // (per-hop timeouts, max splits, culprit, before (lower, upper), after (lower, upper), tie)
        type Seg = Option<(u64, Option<u64>)>;
        type Row<'a> = (&'a [Option<u64>], usize, Location, Seg, Seg, bool);
        let table: [Row; 8] = [
            // cgnat-chain: home NAT 4 s, CGN 12 s: home NAT is the culprit, CGN 12 s after it.
            (
                &[Some(4), Some(12)],
                3,
                Location::Hop(1),
                None,
                Some((11, Some(12))),
                false,
            ),
            // Reversed: CGN (hop 2) forgets first, the home NAT holds 12 s.
            (
                &[Some(12), Some(4)],
                3,
                Location::Hop(2),
                Some((11, Some(12))),
                None,
                false,
            ),
            // Home NAT fine (no timeout in the run), CGN at hop 3 with 20 s.
            (
                &[None, None, Some(20), None],
                3,
                Location::Hop(3),
                Some((30, None)),
                Some((30, None)),
                false,
            ),
            // Culprit beyond the splits tested.
            (
                &[Some(25), None, None, Some(5), None],
                2,
                Location::Beyond(2),
                Some((24, Some(25))),
                None,
                false,
            ),
            // Two boxes with the same timeout.
            (
                &[Some(8), Some(8)],
                3,
                Location::Hop(1),
                None,
                Some((7, Some(8))),
                true,
            ),
            // Single router: by elimination.
            (&[Some(8)], 3, Location::Hop(1), None, None, false),
            // Last hop of three.
            (
                &[None, Some(20), Some(6)],
                3,
                Location::Hop(3),
                Some((19, Some(20))),
                None,
                false,
            ),
            // No timeout at all: nothing to blame.
            (&[None, None], 3, Location::Undetermined, None, None, false),
        ];
        for (timeouts, max, location, before, after, tie) in table {
            let a = run(timeouts, max);
            assert_eq!(a.location, location, "{timeouts:?}");
            let seg = |x: &Option<Segment>| {
                x.as_ref()
                    .map(|x| (x.lower.unwrap().as_secs(), x.upper.map(|u| u.as_secs())))
            };
            assert_eq!(seg(&a.before), before, "{timeouts:?} before");
            assert_eq!(seg(&a.after), after, "{timeouts:?} after");
            assert_eq!(a.tie_after, tie, "{timeouts:?} tie");
        }
    }

    #[test]
    fn missing_or_short_groups_leave_it_undetermined() {
        let t0 = g(Some(4));
        let split = Split {
            hop: 1,
            near: None,
            far: Some(g(Some(4))),
        };
        assert_eq!(infer(&t0, &[split], 2).location, Location::Undetermined);
        // A near group that neither died nor outlived T0 (cut short).
        let mut short = g(None);
        short.lower = Some(s(2));
        let split = Split {
            hop: 1,
            near: Some(short),
            far: Some(g(Some(4))),
        };
        assert_eq!(infer(&t0, &[split], 2).location, Location::Undetermined);
        assert_eq!(splits_for(2, 3), vec![1]);
        assert_eq!(splits_for(12, 3), vec![1, 2, 3]);
        assert!(splits_for(1, 3).is_empty());
    }
}
