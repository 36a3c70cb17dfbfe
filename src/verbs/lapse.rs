//! What a superseded lapsed lease leaves behind, once a claim (or the
//! maintenance worker) has taken the item anew or dead-lettered it: an
//! entry in the item's `errors` history, the `work_lease_lost`
//! notification, and (claimed anew only) the queue's `lapsed` counter.
//!
//! Done after the statement that superseded the tokens, on the rare path
//! only: a claim that finds no lapsed lease runs none of it, so the claim
//! statement itself carries no `errors` expression (its cost is paid by
//! every claim, at plan start-up, whether or not a lease lapsed).

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::backend::counters::{self, Event, ItemState};
use crate::backend::notify;
use crate::base::error::Result;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::errors_append;

pub use crate::base::types::LostToken;

// Append one `errors` entry per lapsed lease (the arrays have one element
// per token), in the transaction that superseded them (which holds their
// row locks).
static RECORD: Statement<RecordParams> = Statement::new(concat!(
    r#"
UPDATE workfence.items AS i
   SET errors = "#,
    errors_append!("e.attempt", "e.epoch", "e.owner", "e.at", "e.error"),
    r#"
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),
                  pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6))
       AS e(id, attempt, epoch, owner, at, error)
 WHERE i.id OPERATOR(pg_catalog.=) e.id
"#
));

params! {
    /// `$1` ids, `$2` attempts, `$3` epochs, `$4` owners, `$5` lapsed_at,
    /// `$6` error texts: one element per lapsed lease.
    struct RecordParams {
        ids: Vec<i64> = INT8ARRAYOID,
        attempts: Vec<i32> = INT4ARRAYOID,
        epochs: Vec<i64> = INT8ARRAYOID,
        owners: Vec<String> = TEXTARRAYOID,
        at: Vec<TimestampWithTimeZone> = TIMESTAMPTZARRAYOID,
        errors: Vec<String> = TEXTARRAYOID,
    }
}

/// Settle `lost`, the tokens one statement superseded: record each in its
/// item's `errors` and notify `work_lease_lost` (neither on a schema before
/// 0.6.0, which has no `errors` and no such channel), and count the leases
/// claimed anew in their queues' `lapsed` when the transaction commits.
/// Nothing at all when `lost` is empty.
pub fn settle(client: &mut SpiClient<'_>, lost: &[LostToken]) -> Result<()> {
    if lost.is_empty() {
        return Ok(());
    }
    for token in lost {
        if token.dead_lettered {
            counters::count(&token.queue, Event::Failed, 1);
            counters::moved(
                &token.queue,
                Some(ItemState::Claimed),
                Some(ItemState::Failed),
                1,
            );
        } else {
            counters::count(&token.queue, Event::Lapsed, 1);
        }
    }
    if plans::schema() == plans::Schema::Legacy {
        return Ok(());
    }
    let params = RecordParams {
        ids: lost.iter().map(|t| t.id).collect(),
        attempts: lost.iter().map(|t| t.attempt).collect(),
        epochs: lost.iter().map(|t| t.epoch).collect(),
        owners: lost.iter().map(|t| t.owner.clone()).collect(),
        at: lost.iter().map(|t| t.lapsed_at).collect(),
        errors: lost.iter().map(|t| t.error().to_owned()).collect(),
    };
    plans::run(client, &RECORD, params, |_| Ok(()))?;
    if crate::verbs::life::schema_has_life() {
        crate::verbs::life::dead_lettered(client, lost)?;
    }
    notify::lease_lost(client, lost)
}
