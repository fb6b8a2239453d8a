//! Server-wide budgets for the expensive things a session can start: throughput stream threads
//! and bulk downloads. Each holds a thread and/or megabytes of kernel send queue for seconds, so
//! each has a cap per client and a cap in total; a [`BudgetHold`] returns its share on drop.
//! Taking from a budget is one map update under a short lock.

use std::sync::{Arc, Mutex};

use crate::fair::{FairPool, Over};
use crate::limits::{lock, ClientKey, Limits};

/// Why the server did not start something: the reason for logs and counters, the limit in
/// force, and the message for the user (what to do about it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refuse {
    pub reason: &'static str,
    pub limit: u32,
    pub message: String,
}

/// The words for a take the fairness rule ([`crate::fair`]) refused: the server is busy, how
/// much this client may take now, and the way out.
pub(crate) fn fair_share_message(
    what: &str,
    client: ClientKey,
    n: u32,
    (used, total, held, may_take): (u32, u32, u32, u32),
    total_flag: &str,
) -> String {
    let now = if may_take == 0 {
        "none more until some finish".to_string()
    } else {
        format!("at most {may_take} more now")
    };
    format!(
        "the server is busy: {used} of its {total} {what} are in use, shared fairly between the client addresses that want them; \
         this client address ({client}) holds {held} and may take {now}, this needs {n}; \
         try again in a minute (or with fewer) or ask its operator to raise {total_flag}"
    )
}

/// One budget with a per-client and a total cap, shared fairly ([`crate::fair`]).
#[derive(Debug)]
pub struct Budget {
    /// What is counted, for messages ("throughput streams").
    what: &'static str,
    /// The flags that raise the caps, for messages.
    total_flag: &'static str,
    client_flag: &'static str,
    /// The reasons logged when a cap refuses.
    total_reason: &'static str,
    client_reason: &'static str,
    fair_reason: &'static str,
    state: Mutex<FairPool>,
}

/// A share of a [`Budget`]; dropping it gives the share back.
#[derive(Debug)]
pub struct BudgetHold {
    budget: Arc<Budget>,
    client: ClientKey,
    n: u32,
}

impl Budget {
    /// Take `n` units for `client`, or say which cap stops it.
    pub fn try_take(self: &Arc<Self>, client: ClientKey, n: u32) -> Result<BudgetHold, Refuse> {
        let mut pool = lock(&self.state);
        match pool.try_take(client, n) {
            Ok(()) => Ok(BudgetHold {
                budget: self.clone(),
                client,
                n,
            }),
            Err(over) => Err(self.refusal(client, n, over)),
        }
    }

    /// The words for a take the pool did not admit.
    fn refusal(&self, client: ClientKey, n: u32, over: Over) -> Refuse {
        let what = self.what;
        match over {
            Over::PerClient { limit, held } => Refuse {
                reason: self.client_reason,
                limit,
                message: format!(
                    "it allows {limit} {what} at once per client address ({client}) and this one needs {n} with {held} in use; \
                     wait for the others from this address to finish or ask its operator to raise {}",
                    self.client_flag
                ),
            },
            Over::Total { limit, used } => Refuse {
                reason: self.total_reason,
                limit,
                message: format!(
                    "it is running its maximum of {limit} {what} ({used} in use, this needs {n}); try again in a minute or ask its operator to raise {}",
                    self.total_flag
                ),
            },
            Over::FairShare {
                used,
                total,
                held,
                may_take,
            } => Refuse {
                reason: self.fair_reason,
                limit: total,
                message: fair_share_message(what, client, n, (used, total, held, may_take), self.total_flag),
            },
        }
    }

    /// An empty share for `client`, to [`grow`](BudgetHold::try_grow) one unit at a time.
    pub fn empty(self: &Arc<Self>, client: ClientKey) -> BudgetHold {
        BudgetHold {
            budget: self.clone(),
            client,
            n: 0,
        }
    }

    /// Units in use now.
    pub fn in_use(&self) -> u32 {
        lock(&self.state).used()
    }

    pub fn total(&self) -> u32 {
        lock(&self.state).total()
    }
}

impl BudgetHold {
    /// Take `n` more units into this share, under the same caps as [`Budget::try_take`].
    pub fn try_grow(&mut self, n: u32) -> Result<(), Refuse> {
        let more = self.budget.try_take(self.client, n)?;
        self.n += more.n;
        std::mem::forget(more);
        Ok(())
    }

    /// Units this share holds.
    pub fn units(&self) -> u32 {
        self.n
    }
}

impl Drop for BudgetHold {
    fn drop(&mut self) {
        lock(&self.budget.state).give(self.client, self.n);
    }
}

/// Every budget of a server.
#[derive(Debug)]
pub struct Budgets {
    /// Throughput-test stream threads (one per data stream, either direction).
    pub streams: Arc<Budget>,
    /// MTU-check bulk downloads.
    pub bulk: Arc<Budget>,
    /// Idle-check probe records (a TCP probe connection or a UDP binding, kept with its
    /// session for the results): the state a client can make the server keep most cheaply.
    pub probes: Arc<Budget>,
}

impl Budgets {
    pub fn new(limits: &Limits) -> Self {
        Budgets {
            streams: Arc::new(Budget {
                what: "throughput streams",
                total_flag: "--max-streams",
                client_flag: "--max-streams-per-ip",
                total_reason: "streams-total",
                client_reason: "streams-per-client",
                fair_reason: "streams-fair-share",
                state: Mutex::new(FairPool::new(limits.streams_total, limits.streams_per_ip)),
            }),
            bulk: Arc::new(Budget {
                what: "bulk downloads",
                total_flag: "--max-bulk",
                client_flag: "--max-bulk-per-ip",
                total_reason: "bulk-total",
                client_reason: "bulk-per-client",
                fair_reason: "bulk-fair-share",
                state: Mutex::new(FairPool::new(limits.bulk_total, limits.bulk_per_ip)),
            }),
            probes: Arc::new(Budget {
                what: "idle-check probes (connections and UDP bindings, kept until their session ends)",
                total_flag: "--max-idle-probes",
                client_flag: "--max-idle-probes-per-ip",
                total_reason: "idle-probes-total",
                client_reason: "idle-probes-per-client",
                fair_reason: "idle-probes-fair-share",
                state: Mutex::new(FairPool::new(limits.probes_total, limits.probes_per_ip)),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_client_and_in_total_hold_and_release() {
        let limits = Limits {
            streams_total: 5,
            streams_per_ip: 3,
            ..Limits::default()
        };
        let budgets = Budgets::new(&limits);
        let a = ClientKey::of("192.0.2.1".parse().unwrap(), &limits);
        let b = ClientKey::of("192.0.2.2".parse().unwrap(), &limits);
        let first = budgets.streams.try_take(a, 2).unwrap();
        let refused = budgets.streams.try_take(a, 2).unwrap_err();
        assert_eq!(refused.reason, "streams-per-client");
        assert!(
            refused.message.contains("--max-streams-per-ip"),
            "{}",
            refused.message
        );
        // The pool is shared fairly: b, holding nothing, may take 2 of the 3 free now.
        let busy = budgets.streams.try_take(b, 3).unwrap_err();
        assert_eq!(busy.reason, "streams-fair-share");
        assert!(
            busy.message.contains("the server is busy") && busy.message.contains("at most 2 more"),
            "{}",
            busy.message
        );
        let _b = budgets.streams.try_take(b, 2).unwrap();
        let c = ClientKey::of("192.0.2.3".parse().unwrap(), &limits);
        let _c = budgets.streams.try_take(c, 1).unwrap();
        let full = budgets.streams.try_take(a, 1).unwrap_err();
        assert_eq!((full.reason, full.limit), ("streams-total", 5));
        drop(first);
        assert_eq!(budgets.streams.in_use(), 3);
        assert!(budgets.streams.try_take(a, 1).is_ok());
        let mut growing = budgets.bulk.empty(b);
        for _ in 0..limits.bulk_per_ip {
            growing.try_grow(1).unwrap();
        }
        assert_eq!(growing.try_grow(1).unwrap_err().reason, "bulk-per-client");
        assert_eq!(budgets.bulk.in_use(), limits.bulk_per_ip);
        drop(growing);
        assert_eq!(budgets.bulk.in_use(), 0);
    }
}
