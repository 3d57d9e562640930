//! The scheduler's decision core: snapshot in, decisions out.
//!
//! Owns: `model` (the cluster as plain data), `framework` (session and journal, placement policies,
//! gangs, fair-share policy, explanations and status reports), `fairshare` (KAI's proportion
//! mathematics), `actions` (allocate, consolidation, reclaim, preempt, stale-gang eviction), `config`
//! (the scheduler's configuration file), `cycle` (one pure scheduling cycle) and `sim` (an in-memory
//! cluster for tests, benchmarks and the CLI).
//!
//! Must not: do I/O, await, read a clock or depend on a Kubernetes client, async runtime, metrics or
//! HTTP crate. The compiler enforces the dependency part (this crate's manifest; `cargo xtask tidy`
//! checks the whole dependency tree); `cycle::run(&mut Cluster, &Config, now)` is the whole decision.

pub mod actions;
pub mod config;
pub mod cycle;
pub mod fairshare;
pub mod framework;
pub mod model;
pub mod sim;
