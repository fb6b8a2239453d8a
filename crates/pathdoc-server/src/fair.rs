//! The one admission rule every global pool of the server applies (connections, handshakes,
//! sessions, throughput streams, bulk downloads, idle probes), so that a client spread over
//! many addresses cannot take a pool from the others first come, first served.
//!
//! **The rule.** A pool has `total` units and a per-client cap `per_client` (`c`). A client
//! (address group, [`ClientKey`](crate::ClientKey)) holding `held` units may take `n` more when
//! they fit both caps and, counting the units one at a time, its holding stays within its
//! share of what would be left free:
//!
//! ```text
//! (held + n − 1) · (total − c)  ≤  c · (total − used − n)
//! ```
//!
//! So a client's cap is `c` scaled by the free fraction of the pool beyond one client's cap:
//! alone on an empty pool a client gets its whole `c`; the fuller the pool, the less a client
//! that already holds some may add; a client holding nothing may always take a unit that is
//! free. With `G` clients taking what the rule allows at the same time, each ends up with about
//! `c · total / (total − c + G · c)` units and the rest stays free for newcomers; an attacker
//! whose groups arrive one after another needs about `total / c × (1 + ln c)` of them to leave
//! nothing free ([`groups_to_exhaust`]), against `total / c` first come, first served. A pool whose total is no larger than its per-client cap (a server
//! for one user) has no share to keep and is first come, first served.

use std::collections::HashMap;

use crate::limits::ClientKey;

/// Why a pool did not admit a take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The client would hold more than the per-client cap.
    PerClient { limit: u32, held: u32 },
    /// The pool has not `n` units free.
    Total { limit: u32, used: u32 },
    /// The pool is busy: the client already holds `held` and may take at most `may_take`
    /// more now (0: none until others finish).
    FairShare {
        used: u32,
        total: u32,
        held: u32,
        may_take: u32,
    },
}

/// Whether a client holding `held` of a pool (`used` of `total` in use, per-client cap
/// `per_client`) may take `n` more units. Pure; see the module docs for the rule.
pub fn admits(total: u32, per_client: u32, used: u32, held: u32, n: u32) -> Result<(), Over> {
    if held.saturating_add(n) > per_client {
        return Err(Over::PerClient {
            limit: per_client,
            held,
        });
    }
    if used.saturating_add(n) > total {
        return Err(Over::Total { limit: total, used });
    }
    if n == 0 || fits_share(total, per_client, used, held, n) {
        return Ok(());
    }
    Err(Over::FairShare {
        used,
        total,
        held,
        may_take: may_take(total, per_client, used, held),
    })
}

fn fits_share(total: u32, per_client: u32, used: u32, held: u32, n: u32) -> bool {
    if total <= per_client {
        return true;
    }
    let beyond_one = u64::from(total - per_client);
    let after = u64::from(held) + u64::from(n) - 1;
    let free_after = u64::from(total - used - n);
    after * beyond_one <= u64::from(per_client) * free_after
}

/// The most units a client holding `held` may take now (within both caps and its share).
pub fn may_take(total: u32, per_client: u32, used: u32, held: u32) -> u32 {
    let room = per_client
        .saturating_sub(held)
        .min(total.saturating_sub(used));
    (1..=room)
        .rev()
        .find(|&n| fits_share(total, per_client, used, held, n))
        .unwrap_or(0)
}

/// How many address groups an attacker needs to leave a pool with no unit free: groups arrive
/// one after another, each taking what the rule lets it while the earlier ones keep theirs
/// (each newcomer gets about `c` × the free fraction, so the free part shrinks geometrically:
/// about `total / c × (1 + ln c)` groups, against `total / c` first come, first served). The
/// figure the resource table of docs/server.md gives per pool.
pub fn groups_to_exhaust(total: u32, per_client: u32) -> u32 {
    let mut pool = FairPool::new(total, per_client);
    let mut groups: Vec<ClientKey> = Vec::new();
    let key = |i: u32| ClientKey::of(std::net::IpAddr::from(i.to_be_bytes()), &Default::default());
    while pool.used() < total {
        // Everyone already in takes what it may; a new group comes when none can.
        let mut took = false;
        for g in &groups {
            took |= pool.try_take(*g, 1).is_ok();
        }
        if !took {
            let g = key(groups.len() as u32 + 1);
            groups.push(g);
            if pool.try_take(g, 1).is_err() {
                break;
            }
        }
    }
    groups.len() as u32
}

/// One pool's units, in use in total and per client, under [`admits`].
#[derive(Debug, Default)]
pub struct FairPool {
    total: u32,
    per_client: u32,
    used: u32,
    held: HashMap<ClientKey, u32>,
}

impl FairPool {
    pub fn new(total: u32, per_client: u32) -> Self {
        FairPool {
            total,
            per_client,
            used: 0,
            held: HashMap::new(),
        }
    }

    /// Take `n` units for `client`, or say which bound stops it.
    pub fn try_take(&mut self, client: ClientKey, n: u32) -> Result<(), Over> {
        let held = self.held(client);
        admits(self.total, self.per_client, self.used, held, n)?;
        if n > 0 {
            self.used += n;
            *self.held.entry(client).or_insert(0) += n;
        }
        Ok(())
    }

    /// Give back `n` units `client` took.
    pub fn give(&mut self, client: ClientKey, n: u32) {
        self.used = self.used.saturating_sub(n);
        if let Some(h) = self.held.get_mut(&client) {
            *h = h.saturating_sub(n);
            if *h == 0 {
                self.held.remove(&client);
            }
        }
    }

    pub fn held(&self, client: ClientKey) -> u32 {
        self.held.get(&client).copied().unwrap_or(0)
    }

    pub fn used(&self) -> u32 {
        self.used
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    pub fn per_client(&self) -> u32 {
        self.per_client
    }

    /// Clients holding at least one unit.
    pub fn clients(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> ClientKey {
        ClientKey::of(std::net::IpAddr::from(i.to_be_bytes()), &Default::default())
    }

    /// Every client takes one unit at a time while the rule lets it; what each holds at the end.
    fn fill(pool: &mut FairPool, clients: u32) -> Vec<u32> {
        loop {
            let mut took = false;
            for c in 0..clients {
                took |= pool.try_take(key(c), 1).is_ok();
            }
            if !took {
                break;
            }
        }
        (0..clients).map(|c| pool.held(key(c))).collect()
    }

    #[test]
    fn a_lone_client_gets_its_whole_per_client_cap() {
        for (total, per) in [
            (4096, 32),
            (64, 16),
            (16, 4),
            (100_000, 4096),
            (8, 2),
            (2, 2),
        ] {
            let mut pool = FairPool::new(total, per);
            assert_eq!(fill(&mut pool, 1), vec![per], "{total}/{per}");
        }
        // A throughput test takes its streams at once: 16 of 64 for a lone client.
        assert!(admits(64, 16, 0, 0, 16).is_ok());
    }

    #[test]
    fn the_per_client_and_total_caps_still_hold() {
        assert_eq!(
            admits(16, 4, 0, 4, 1),
            Err(Over::PerClient { limit: 4, held: 4 })
        );
        assert_eq!(
            admits(16, 4, 16, 0, 1),
            Err(Over::Total {
                limit: 16,
                used: 16
            })
        );
        assert!(
            admits(16, 4, 15, 0, 1).is_ok(),
            "the last unit goes to a newcomer"
        );
    }

    #[test]
    fn many_clients_leave_room_for_a_newcomer() {
        // The issue's attacks: 130 addresses against 4096 sessions (32 each), 4 addresses
        // against 64 streams (16 each) and against 16 bulk downloads (4 each).
        for (total, per, attackers) in [(4096, 32, 130), (64, 16, 4), (16, 4, 4), (256, 4, 130)] {
            let mut pool = FairPool::new(total, per);
            let held = fill(&mut pool, attackers);
            let free = total - pool.used();
            assert!(free >= 1, "{total}/{per} with {attackers}: {held:?}");
            // The newcomer (a client that holds nothing) gets a unit.
            assert!(pool.try_take(key(1_000_000), 1).is_ok());
            // First come, first served would have given the attackers everything.
            assert!(attackers * per >= total);
        }
        // With 130 groups on the session pool each holds about c·T/(T − c + G·c) ≈ 15.9.
        let mut pool = FairPool::new(4096, 32);
        let held = fill(&mut pool, 130);
        assert!(held.iter().all(|&h| (15..=17).contains(&h)), "{held:?}");
        assert!(4096 - pool.used() >= 1900, "{} used", pool.used());
    }

    #[test]
    fn a_multi_unit_take_counts_its_units_one_at_a_time() {
        // Four addresses asking for 16 streams each no longer get all 64.
        let mut pool = FairPool::new(64, 16);
        assert!(pool.try_take(key(1), 16).is_ok());
        let over = pool.try_take(key(2), 16).unwrap_err();
        assert_eq!(
            over,
            Over::FairShare {
                used: 16,
                total: 64,
                held: 0,
                may_take: 12
            }
        );
        assert!(pool.try_take(key(2), 12).is_ok());
        // A one-stream test of a newcomer still runs.
        assert!(pool.try_take(key(3), 1).is_ok());
    }

    #[test]
    fn giving_back_frees_the_share() {
        let mut pool = FairPool::new(8, 2);
        pool.try_take(key(1), 2).unwrap();
        pool.give(key(1), 2);
        assert_eq!((pool.used(), pool.clients()), (0, 0));
        pool.give(key(9), 3);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn exhausting_a_pool_takes_several_times_the_groups_first_come_first_served_does() {
        assert_eq!(groups_to_exhaust(8, 8), 1, "a one-user pool: first come");
        // (pool, per-client cap, groups needed): the figures of docs/server.md's resource
        // table, against total / per-client groups first come, first served.
        for (total, per, groups) in [
            (16, 4, 8),
            (64, 16, 13),
            (4096, 32, 518),
            (100_000, 4096, 214),
            (2048, 256, 46),
            (8192, 1024, 57),
            (512, 4, 266),
        ] {
            let needed = groups_to_exhaust(total, per);
            assert_eq!(needed, groups, "{total}/{per}");
            assert!(needed >= 2 * total / per, "{total}/{per}: {needed}");
        }
    }
}
