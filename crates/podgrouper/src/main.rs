//! `kai-podgrouper`: see the library crate.
fn main() {}
