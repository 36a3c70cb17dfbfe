//! The state machine: every verb of the SQL surface, its `#[pg_extern]`
//! wrapper beside it. Verbs import one another one way (no file reaches a
//! file that reaches it back) and every layer below.

// Flow control: serial groups and queue limits (`work_limit`).
pub mod flow;
// Epochs that survive a failover: the generation floor of a new history.
pub mod generation;
// Workflows (0.12.0): items that wait for others (`after`), `work_parent_results`, `work_workflow`.
pub mod workflow;
// `work_enqueue`.
pub mod enqueue;
// `work_enqueue_many`: many items of one queue in one call.
pub mod bulk;
// `work_claim`, `work_claim_key`.
pub mod claim;
// `work_renew`, `work_finish`, `work_finish_many`, `work_release`, `work_fail`, `work_assert`,
// `work_lease_status`.
pub mod lease;
// `work_finish_and_claim`, `work_fail_and_claim`: a worker's cycle in one call.
pub mod cycle;
// `work_cancel`.
pub mod cancel;
// `work_retry`, `work_reschedule`, `work_pause`, `work_resume`, `work_item`.
pub mod operate;
// `work_items`: a queue's items a page at a time (keyset pagination).
pub mod listing;
// `work_purge`.
pub mod purge;
// What a superseded lapsed lease leaves: its `errors` entry, `work_lease_lost`, the `lapsed` count.
pub mod lapse;
// A job's life (0.12.0): on_conflict's run once more, checkpoints in claims, `work_await`.
pub mod life;
// Schedules (0.12.0): work_schedule and its verbs, the fires.
pub mod schedule;
