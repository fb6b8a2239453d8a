//! Which probe sizes to send next: common link MTUs first, then a k-ary search between the
//! largest size that arrived and the smallest larger size that never did, with ICMP too-big
//! hints tried first. Pure logic, no sockets.
//!
//! Sizes are whole IP datagrams (what an interface MTU limits). A size "arrived" when at least
//! one of its attempts got through; it "failed" when every attempt was lost on the path (sizes
//! the sender's own stack refused are recorded separately and cap the search).

use std::collections::{BTreeMap, BTreeSet};

/// Link MTUs seen in the wild: Ethernet, PPPoE (1492), IPv4/IPv6-in-IPv6 and GRE tunnels, 802.1Q
/// quirks, WireGuard (1420), many VPNs (1400), the IPv6 minimum (1280), and RFC 791's 576.
pub const COMMON_MTUS: &[u16] = &[
    1500, 1492, 1480, 1476, 1460, 1440, 1420, 1400, 1380, 1360, 1280, 1024, 576,
];

/// Tally of one probe size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub sent: u32,
    pub received: u32,
}

/// The state of one direction's search.
#[derive(Debug, Clone)]
pub struct Search {
    min: u16,
    max: u16,
    tallies: BTreeMap<u16, Tally>,
    local_limit: Option<u16>,
    /// The sender's interface MTU, when its stack named it (local EMSGSIZE).
    interface_mtu: Option<u16>,
    hints: BTreeSet<u16>,
}

/// What capped the sizes a direction could probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeCap {
    /// The sender's own interface MTU: nothing larger can leave it.
    SenderInterface,
    /// The largest size probed (`--mtu-max` or the protocol's limit): the path may take more.
    ProbeLimit,
}

impl Search {
    /// Search sizes in `min..=max` (`max` is the largest size the sender can emit).
    pub fn new(min: u16, max: u16) -> Self {
        Search {
            min,
            max: max.max(min),
            tallies: BTreeMap::new(),
            local_limit: None,
            interface_mtu: None,
            hints: BTreeSet::new(),
        }
    }

    pub fn max(&self) -> u16 {
        self.max
    }

    /// Record how many attempts of `size` were sent and how many arrived.
    pub fn record(&mut self, size: u16, sent: u32, received: u32) {
        let t = self.tallies.entry(size).or_default();
        t.sent += sent;
        t.received += received.min(sent.max(received));
    }

    /// The sender's own stack refused `size` (EMSGSIZE): nothing at or above it can be probed.
    pub fn record_local_limit(&mut self, size: u16) {
        let limit = self.local_limit.map_or(size, |l| l.min(size));
        self.local_limit = Some(limit);
        self.max = self.max.min(limit.saturating_sub(1)).max(self.min);
    }

    /// The sender's stack refused a size and named its interface MTU: search up to exactly that.
    pub fn record_local_mtu(&mut self, mtu: u32) {
        let Ok(m) = u16::try_from(mtu) else {
            return;
        };
        if m < self.min {
            return;
        }
        self.interface_mtu = Some(self.interface_mtu.map_or(m, |i| i.min(m)));
        self.local_limit = Some(
            self.local_limit
                .map_or(m + 1, |l| l.min(m.saturating_add(1))),
        );
        self.max = self.max.min(m);
    }

    /// Why the search stopped where it did at the top.
    pub fn cap(&self) -> SizeCap {
        if self.local_limit.is_some() {
            SizeCap::SenderInterface
        } else {
            SizeCap::ProbeLimit
        }
    }

    /// A router said the next-hop MTU is `mtu`: worth probing exactly there.
    pub fn hint(&mut self, mtu: u32) {
        if let Ok(m) = u16::try_from(mtu) {
            if (self.min..=self.max).contains(&m) {
                self.hints.insert(m);
            }
        }
    }

    pub fn tallies(&self) -> &BTreeMap<u16, Tally> {
        &self.tallies
    }

    pub fn local_limit(&self) -> Option<u16> {
        self.local_limit
    }

    /// Largest size that arrived at least once.
    pub fn largest_ok(&self) -> Option<u16> {
        self.tallies
            .iter()
            .filter(|(s, t)| t.received > 0 && **s <= self.max)
            .map(|(s, _)| *s)
            .max()
    }

    /// Smallest size above `above` whose every attempt was lost.
    pub fn smallest_failed_above(&self, above: u16) -> Option<u16> {
        self.tallies
            .iter()
            .filter(|(s, t)| **s > above && **s <= self.max && t.sent > 0 && t.received == 0)
            .map(|(s, _)| *s)
            .min()
    }

    /// The sizes to probe next, at most `per_round`; empty when the search is finished.
    pub fn next_sizes(&self, per_round: usize) -> Vec<u16> {
        let per_round = per_round.max(1);
        let probed = |s: u16| self.tallies.get(&s).is_some_and(|t| t.sent > 0);
        if self.tallies.is_empty() {
            let mut first: Vec<u16> = COMMON_MTUS
                .iter()
                .copied()
                .filter(|s| (self.min..=self.max).contains(s))
                .collect();
            if !first.contains(&self.max) {
                first.insert(0, self.max);
            }
            first.sort_unstable_by(|a, b| b.cmp(a));
            return first;
        }
        let Some(lo) = self.largest_ok() else {
            // Nothing arrived: smaller sizes might, down to the minimum.
            let smallest = self.tallies.keys().copied().min().unwrap_or(self.max);
            if smallest > self.min && !probed(self.min) {
                return vec![self.min];
            }
            return Vec::new();
        };
        if lo >= self.max {
            return Vec::new();
        }
        let hi = match self.smallest_failed_above(lo) {
            Some(hi) => hi,
            None if !probed(self.max) => return vec![self.max],
            None => return Vec::new(),
        };
        if hi <= lo + 1 {
            return Vec::new();
        }
        let mut out: Vec<u16> = Vec::new();
        for &h in self.hints.iter().filter(|h| **h > lo && **h < hi) {
            for s in [h, h + 1] {
                if s > lo && s < hi && !probed(s) && !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        if !out.is_empty() {
            out.truncate(per_round);
            return out;
        }
        // The MTU is most often exactly a common value that arrived: try lo + 1 first.
        if !probed(lo + 1) {
            out.push(lo + 1);
        }
        let gap = u32::from(hi - lo);
        let k = (per_round.saturating_sub(out.len()) as u32).min(gap - 1);
        for i in 1..=k {
            let s = u32::from(lo) + (gap * i) / (k + 1);
            let s = s as u16;
            if s > lo && s < hi && !probed(s) && !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a search against a path that passes sizes ≤ `mtu`, return (found, rounds).
    fn run(min: u16, max: u16, mtu: u16, hint: Option<u32>) -> (Option<u16>, usize) {
        let mut s = Search::new(min, max);
        let mut rounds = 0;
        loop {
            let sizes = s.next_sizes(8);
            if sizes.is_empty() || rounds > 20 {
                break;
            }
            rounds += 1;
            for size in sizes {
                s.record(size, 3, if size <= mtu { 3 } else { 0 });
                if size > mtu {
                    if let Some(h) = hint {
                        s.hint(h);
                    }
                }
            }
        }
        (s.largest_ok(), rounds)
    }

    #[test]
    fn finds_exact_mtu_in_few_rounds() {
        // (min, max, true mtu, PTB hint, max rounds)
        let table: &[(u16, u16, u16, Option<u32>, usize)] = &[
            (576, 1500, 1500, None, 1),
            (576, 1500, 1420, None, 2),
            (576, 1500, 1280, None, 2),
            (576, 1500, 1433, None, 3),
            (576, 1500, 1433, Some(1433), 2),
            (576, 1500, 1499, None, 2),
            (576, 1500, 600, None, 4),
            (576, 9000, 9000, None, 1),
            (576, 9000, 8000, None, 6),
        ];
        for &(min, max, mtu, hint, max_rounds) in table {
            let (found, rounds) = run(min, max, mtu, hint);
            assert_eq!(
                found,
                Some(mtu),
                "min {min} max {max} mtu {mtu} hint {hint:?}"
            );
            assert!(
                rounds <= max_rounds,
                "mtu {mtu}: {rounds} rounds > {max_rounds}"
            );
        }
    }

    #[test]
    fn nothing_arrives_tries_minimum_then_stops() {
        let (found, rounds) = run(576, 1500, 100, None);
        assert_eq!(found, None);
        assert!(rounds <= 2, "{rounds}");
    }

    #[test]
    fn local_limit_caps_the_search() {
        let mut s = Search::new(576, 1500);
        s.record_local_limit(1400);
        assert_eq!(s.max(), 1399);
        let first = s.next_sizes(8);
        assert_eq!(first[0], 1399);
        assert!(first.iter().all(|x| *x <= 1399));
    }

    #[test]
    fn a_named_interface_mtu_ends_the_search_there() {
        let mut s = Search::new(576, 9000);
        assert_eq!(s.cap(), SizeCap::ProbeLimit);
        let first = s.next_sizes(8);
        assert_eq!(first[0], 9000);
        // 9000 refused locally; the stack names 1500.
        s.record_local_mtu(1500);
        for size in first.into_iter().filter(|&x| x <= 1500) {
            s.record(size, 3, 3);
        }
        assert_eq!(s.max(), 1500);
        assert_eq!(s.largest_ok(), Some(1500));
        assert!(s.next_sizes(8).is_empty());
        assert_eq!(s.cap(), SizeCap::SenderInterface);
    }

    #[test]
    fn lossy_size_with_one_arrival_counts_as_ok() {
        let mut s = Search::new(576, 1500);
        s.record(1500, 3, 1);
        assert_eq!(s.largest_ok(), Some(1500));
        assert!(s.next_sizes(8).is_empty());
    }

    #[test]
    fn bad_hint_outside_range_is_ignored() {
        let mut s = Search::new(576, 1500);
        s.hint(68);
        s.hint(70000);
        s.record(1500, 3, 0);
        s.record(1400, 3, 3);
        let next = s.next_sizes(4);
        assert_eq!(next, vec![1401, 1425, 1450, 1475]);
    }
}
