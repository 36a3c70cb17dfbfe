//! In-server tests (`#[pg_test]`), one file per topic: the SQL surface
//! exercised the way a user calls it, one transaction per test (rolled back
//! by the harness). Shared helpers are in `helpers.rs`.
//!
//! The passage of time is simulated by moving `lease_until` into the past
//! with a direct UPDATE (what the clock would do); the real-time lapse and
//! real concurrency are tested from client connections in `harness/tests/client/`.

mod cancel;
mod catalog;
mod claim;
mod enqueue;
mod first_use;
mod flow;
mod generation;
mod grants;
mod helpers;
mod lease;
mod operate;
mod ops;
mod plans;
mod privileges;
mod schedules;
