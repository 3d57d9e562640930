//! Time as the model sees it. Its own module so that the model's types (tasks, gangs, queues) can all
//! name it without importing one another.

/// Milliseconds since the Unix epoch. The core never reads a clock; `now` is an input.
pub type Millis = i64;
