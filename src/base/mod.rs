//! The bottom layer: the shared types every layer names and the one error
//! enum with its SQLSTATEs. Imports nothing of the crate above it.

// The shared types every layer names (capability, queue pattern, interval
// parts); imports nothing of the crate.
pub mod types;
// Domain errors and their SQLSTATEs.
pub mod error;
// A schedule's slots: cron expressions in a time zone (croner, chrono-tz).
pub mod cron;
