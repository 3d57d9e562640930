//! The scheduler: watch -> cache -> model -> session -> actions -> decisions -> apply.
//!
//! Owns: `model` (the cluster as plain data), `framework` (session, journal, placement, explanations,
//! status), `actions`, `config`, `cycle` (one pure scheduling cycle). The I/O edges come later in the
//! module list (`cache` feeds the model, `apply` executes decisions).
//!
//! Must not: do I/O or read clocks anywhere but the I/O edges and the binary.

pub mod actions;
pub mod apply;
pub mod cache;
pub mod coalesce;
pub mod config;
pub mod cycle;
pub mod fairshare;
pub mod framework;
pub mod loop_state;
pub mod metrics;
pub mod model;
pub mod sim;
