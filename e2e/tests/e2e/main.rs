//! The e2e tier: tests against a real API server (`KUBECONFIG`, else the local control plane started by
//! `cargo xtask cluster up`). One binary, one module per area; each test owns a namespace and its nodes.
//!
//! Run one: `cargo test -p e2e --test e2e node_agent::job_pods_run_to_completion`.

mod crds;
mod node_agent;
mod nodes;
mod seeds;
mod validation;
