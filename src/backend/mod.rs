//! Per-backend state and what runs after commit: the counters in shared
//! memory, the transaction's effects (`xact`), paused queues, the long poll's
//! waiters, NOTIFY. Names no verb: the commit's calls into the verbs are
//! handed to `xact` by `_PG_init`.

// Per-queue counters of refused tokens and lapsed leases (shared memory, when preloaded).
// The histograms' fixed buckets, shared by the counters and the last hour.
pub mod buckets;
pub mod counters;
// The last hour of each queue, minute by minute (the dashboard's charts).
pub mod history;
// Per-transaction state: wake-ups after commit, the fence of `work_assert` at commit.
pub(crate) mod xact;
// Which queues are paused, per backend, kept fresh by shared invalidation.
pub(crate) mod paused;
// The long poll of `work_claim(..., wait)`: waiters and their wake-ups.
pub mod wait;
// NOTIFY `work_enqueued` and `work_lease_lost`, and the settings that turn them off.
pub mod notify;
// Which queues have schedules, per backend; the maintenance worker's next fire (shared memory).
pub mod schedules;
