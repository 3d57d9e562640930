//! The cluster model the scheduling core reads and writes.
pub mod resources;
