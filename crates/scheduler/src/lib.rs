//! The scheduler's I/O edges around the pure decision core (`kai-scheduler-core`):
//! watch -> `cache` -> model -> core cycle -> decisions -> `apply`.
//!
//! Owns: `cache` (watches and the conversion of API objects into the model), `apply` (decisions ->
//! API writes), `coalesce` (one status write in flight per object), `loop_state` (when to run the next
//! cycle, and the feedback a failed write sends back to it), `metrics`, `gpu_env` (what the containers
//! of a pod sharing a GPU see), `webhook` (the GPU-sharing admission webhook the process serves), `usage`
//! (usage-based fair share's record: folded after each cycle, stored in a ConfigMap), and the binaries
//! (`main.rs`, `kai-gpu-reservation`).
//!
//! Must not: make scheduling decisions; every decision is made by `scheduler_core::cycle::run`.

pub mod apply;
pub mod cache;
pub mod coalesce;
pub mod gpu_env;
pub mod loop_state;
pub mod metrics;
pub mod usage;
pub mod webhook;
