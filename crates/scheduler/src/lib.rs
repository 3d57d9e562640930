//! The scheduler: watch -> cache -> model -> session -> actions -> decisions -> apply.
pub mod model;
