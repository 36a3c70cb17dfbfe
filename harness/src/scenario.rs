//! Building blocks of the scenario from the bug report (one routine firing;
//! workers A and B both named `routines/laptop`; A's lease lapses; B claims),
//! shared by the client tests (`harness/tests/client/seed_scenario.rs`, `promises.rs`,
//! `pgbouncer.rs`). The checks themselves stay in the tests, written out.
//!
//! Everything here runs on a direct connection (the scheduler's, or an
//! observer's), never through a worker.

use postgres::Client;
use serde_json::Value;

pub use crate::calls::Enqueued;
use crate::calls::{self, Enqueue};
use crate::{Error, Result};

/// The queue of scheduled routines.
pub const QUEUE: &str = "routines";

/// The key of the one firing: routine name and the scheduled time it stands for.
pub const KEY: &str = "daily-report@2026-11-30T09:00Z";

/// The owner name both workers use: the same laptop's routine runner started twice.
pub const OWNER: &str = "routines/laptop";

/// A's lease: short, so that it lapses during the scenario.
pub const SHORT_LEASE: &str = "2 seconds";

/// B's lease: long enough to outlast the rest of the scenario.
pub const LONG_LEASE: &str = "5 minutes";

/// Enqueues one item with `work_enqueue(queue, payload, key)`.
pub fn enqueue(client: &mut Client, queue: &str, key: &str, payload: &Value) -> Result<Enqueued> {
    Ok(calls::enqueue(
        client,
        &Enqueue::new(queue).key(key).payload(payload.clone()),
    )?)
}

/// The moment a lease was seen lapsed, both times read from the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapse {
    /// The item's `lease_until`.
    pub lease_until: String,
    /// `clock_timestamp()` when the lapse was confirmed (after `lease_until`).
    pub server_now: String,
}

/// Waits, inside the server, until the lease of claimed item `id` has lapsed
/// by the server's clock: `pg_sleep_until(lease_until)`, then a check that
/// `lease_until < clock_timestamp()` (repeated in the unlikely case the sleep
/// ended on the very microsecond). The client's clock is never read.
pub fn wait_for_lease_lapse(client: &mut Client, id: i64) -> Result<Lapse> {
    const ROUNDS: usize = 100;
    for _ in 0..ROUNDS {
        client.execute(
            "SELECT pg_catalog.pg_sleep_until(lease_until) FROM workfence.items WHERE id = $1",
            &[&id],
        )?;
        let row = client
            .query_opt(
                "SELECT state::text, lease_until < pg_catalog.clock_timestamp(), \
                        lease_until::text, pg_catalog.clock_timestamp()::text \
                   FROM workfence.items WHERE id = $1",
                &[&id],
            )?
            .ok_or_else(|| Error::Setup(format!("item {id} does not exist")))?;
        let state: String = row.get(0);
        if state != "claimed" {
            return Err(Error::Setup(format!(
                "item {id} is {state}, not claimed: there is no lease to lapse"
            )));
        }
        if row.get::<_, bool>(1) {
            return Ok(Lapse {
                lease_until: row.get(2),
                server_now: row.get(3),
            });
        }
    }
    Err(Error::Setup(format!(
        "the lease of item {id} had not lapsed after {ROUNDS} pg_sleep_until rounds"
    )))
}

/// One item's row, as far as the scenario cares.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRow {
    /// `pending`, `claimed`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// Owner of the latest claim.
    pub owner: Option<String>,
    /// Epoch of the latest claim.
    pub epoch: Option<i64>,
    /// The result stored by the finish that took effect.
    pub result: Option<Value>,
    /// Server time it was finished, as text.
    pub finished_at: Option<String>,
}

/// Reads item `id`.
pub fn item(client: &mut Client, id: i64) -> Result<ItemRow> {
    let row = client
        .query_opt(
            "SELECT state::text, owner, epoch, result, finished_at::text \
               FROM workfence.items WHERE id = $1",
            &[&id],
        )?
        .ok_or_else(|| Error::Setup(format!("item {id} does not exist")))?;
    Ok(ItemRow {
        state: row.get(0),
        owner: row.get(1),
        epoch: row.get(2),
        result: row.get(3),
        finished_at: row.get(4),
    })
}

/// How many items of `queue` with `key` are done (the firing must have been
/// dispatched exactly once: 1).
pub fn done_count(client: &mut Client, queue: &str, key: &str) -> Result<i64> {
    Ok(client
        .query_one(
            "SELECT count(*) FROM workfence.items \
              WHERE queue = $1 AND key = $2 AND state = 'done'",
            &[&queue, &key],
        )?
        .get(0))
}
