//! Tests against a real API server, and the library they stand on.
//!
//! Owns: finding the cluster ([`connect`]), installing what the project needs ([`install`]), applying
//! YAML ([`apply`]), the chart's RBAC and the components' credentials ([`chart_rbac`]), fake nodes
//! ([`nodes`]), the node agent that plays the kubelet ([`agent`]), the per-test environment
//! ([`harness::TestEnv`]), failure reports ([`report`]), the differential test's generator and independent
//! feasibility checker ([`differential`]), the project's kubectl ([`kubectl`]), binaries
//! ([`component`]), the scheduler tests' workloads ([`workloads`]), the GPU-sharing webhook registered
//! for one test's namespace ([`webhook`]), the end-to-end binding benchmark ([`bench`]), a fake API
//! server for the benchmarks too large for the local control plane ([`fakeapi`]) and faults injected
//! into the local control plane ([`controlplane`]). `cargo xtask` uses the
//! same code for the local control plane, so the tests and the developer's cluster are set up alike.
//!
//! Must not: be needed by the project's components at run time.
//!
//! A test:
//! ```no_run
//! use e2e::{FakeNodes, TestEnv};
//!
//! # async fn example() -> anyhow::Result<()> {
//! let t = TestEnv::start("my-test").await?;
//! let nodes = t.create_nodes(FakeNodes::new("gpu").count(2).gpus(8)).await?;
//! t.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n").await?;
//! t.finish().await
//! # }
//! ```

pub mod agent;
pub mod apply;
pub mod bench;
pub mod chart;
pub mod chart_rbac;
pub mod component;
pub mod connect;
pub mod controlplane;
pub mod differential;
pub mod fakeapi;
pub mod harness;
pub mod helm;
pub mod install;
pub mod kube_scheduler;
pub mod kubectl;
pub mod nodes;
pub mod paths;
pub mod report;
pub mod serviceaccount;
pub mod webhook;
pub mod workloads;

pub use agent::{EXIT_CODE_ANNOTATION, NodeAgent, RUN_SECONDS_ANNOTATION};
pub use apply::{Applier, FIELD_MANAGER, Placement};
pub use component::Component;
pub use connect::{ServerVersion, Target};
pub use harness::TestEnv;
pub use kubectl::Kubectl;
pub use nodes::FakeNodes;
pub use paths::DevPaths;

/// The current time as Kubernetes writes it (RFC 3339, whole seconds, UTC).
#[must_use]
pub fn now() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .expect("invariant: the current time is a valid timestamp")
        .to_string()
}
