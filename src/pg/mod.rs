//! The server's facilities, below every verb: what differs between
//! PostgreSQL majors, `jsonb` passed through, lock keys, the per-backend
//! cache of prepared SPI plans, shared invalidation. Imports only `base`.

// What differs between PostgreSQL majors.
pub(crate) mod compat;
// A `jsonb` value passed through byte for byte (no parse, no re-serialise).
pub mod jsonb;
// Lock keys: the int4 a queue or group name hashes to.
pub(crate) mod keys;
// Per-backend cache of prepared SPI plans.
pub(crate) mod plans;
// Keeping the backend's caches of the settings tables fresh (shared invalidation).
pub(crate) mod invalidation;
