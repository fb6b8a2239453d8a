//! Load generators for `pathdoc server`, shared by the benchmark binaries and the server load
//! test: [`net`] (connections from chosen 127/8 source addresses), [`child`] (the server under
//! test as a child process), [`procfs`] (memory, CPU and socket readings), [`attack`] (the
//! hostile load of issue #13 and what it makes the server hold), [`hold`] (issue #20's spread-out
//! attacker that holds every slot of a pool it can and re-takes freed ones).

pub mod attack;
pub mod child;
pub mod hold;
pub mod net;
pub mod procfs;
