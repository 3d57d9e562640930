//! Tests against a real API server, and the library they stand on.
//!
//! Must not: be needed by the project's components at run time.

pub mod chart;
pub mod helm;
pub mod serviceaccount;
