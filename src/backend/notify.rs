//! The extension's notifications (`NOTIFY`), and the settings that turn
//! them off.
//!
//! - `work_enqueued`, payload the queue's name: an enqueue inserted an item
//!   that is due at once (a hint to claim, not a count). Only with
//!   `workfence.notify_enqueued` on, off by default from 0.12.0.
//! - `work_lease_lost`, payload JSON `{"id", "queue", "key", "owner",
//!   "epoch"}`: a claim superseded that token, because its lease had lapsed
//!   and the item was claimed anew, or dead-lettered on its final attempt
//!   (by a claim or the maintenance worker). The token's holder can stop the
//!   job at once instead of learning it at its next renew.
//!
//! PostgreSQL delivers a notification when (and only if) the transaction
//! that sent it commits, and folds identical ones of one transaction into
//! one. Any role that can connect may `LISTEN` on any channel, so both
//! channels tell every such role queue names (and `work_lease_lost` keys
//! and owner names): an operator who must keep them private turns them off
//! with `workfence.notify_enqueued` and `workfence.notify_lease_lost`
//! (superuser-set).

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};

use crate::base::error::Result;
use crate::base::types::LostToken;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::QueueParams;

/// `workfence.notify_enqueued` (boolean, superuser-set): whether an enqueue
/// of a due item runs `NOTIFY work_enqueued, '<queue>'`. Off by default from
/// 0.12.0 (on before): PostgreSQL serialises the commits of every
/// transaction that notified behind one cluster-wide lock held through the
/// commit's WAL flush, which cut single-row enqueues from 8 connections to
/// 0.24x a plain INSERT (0.67x with it off; `workfence-enqueue`, issue 38),
/// and any role that can connect may LISTEN to the queue names. Long polls
/// (`work_claim(..., wait)`) are woken by latches and do not need it; a
/// worker that sleeps on `LISTEN work_enqueued` needs it on.
pub static NOTIFY_ENQUEUED: GucSetting<bool> = GucSetting::<bool>::new(false);

/// `workfence.notify_lease_lost` (boolean, default on, superuser-set):
/// whether a claim that supersedes a lapsed lease sends `work_lease_lost`.
pub static NOTIFY_LEASE_LOST: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Define the two settings; called from `_PG_init`.
pub fn init() {
    GucRegistry::define_bool_guc(
        c"workfence.notify_enqueued",
        c"pg_workfence: an enqueue of a due item sends NOTIFY work_enqueued with the queue name.",
        c"Off by default (from 0.12.0): notifying commits serialise on a cluster-wide lock, and \
          any role that can connect may LISTEN and so learn queue names. Long polls do not need \
          it; a worker that sleeps on LISTEN work_enqueued does.",
        &NOTIFY_ENQUEUED,
        GucContext::Suset,
        GucFlags::empty(),
    );
    GucRegistry::define_bool_guc(
        c"workfence.notify_lease_lost",
        c"pg_workfence: a claim that supersedes a lapsed lease sends NOTIFY work_lease_lost.",
        c"The payload names the superseded token (id, queue, key, owner, epoch); any role that \
          can connect may LISTEN, so turn this off to keep queue, key and owner names private.",
        &NOTIFY_LEASE_LOST,
        GucContext::Suset,
        GucFlags::empty(),
    );
}

// Tells listeners that an item of queue `$1` is claimable now.
static ENQUEUED: Statement<QueueParams> = Statement::new(
    r#"
SELECT pg_catalog.pg_notify('work_enqueued', $1)
"#,
);

/// Notify `work_enqueued` for `queue`, unless `workfence.notify_enqueued`
/// is off.
pub fn enqueued(client: &mut pgrx::spi::SpiClient<'_>, queue: &str) -> Result<()> {
    if NOTIFY_ENQUEUED.get() {
        plans::run(client, &ENQUEUED, QueueParams { queue }, |_| Ok(()))?;
    }
    Ok(())
}

// One `work_lease_lost` per superseded token (the arrays have one element
// per token), its payload built by the server so that every string is
// escaped as JSON: a `workfence.lost_token` as json, whose keys come in
// the composite's column order (id, queue, key, owner, epoch).
static LEASE_LOST: Statement<LeaseLostParams> = Statement::new(
    r#"
SELECT pg_catalog.pg_notify(
           'work_lease_lost',
           pg_catalog.to_json(ROW(l.id, l.queue, l.key, l.owner, l.epoch)::workfence.lost_token)
             ::pg_catalog.text)
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),
                  pg_catalog.unnest($4), pg_catalog.unnest($5)) AS l(id, queue, key, owner, epoch)
"#,
);

params! {
    /// `$1` ids, `$2` queues, `$3` keys, `$4` owners, `$5` epochs: one element per token.
    struct LeaseLostParams {
        ids: Vec<i64> = INT8ARRAYOID,
        queues: Vec<String> = TEXTARRAYOID,
        keys: Vec<String> = TEXTARRAYOID,
        owners: Vec<String> = TEXTARRAYOID,
        epochs: Vec<i64> = INT8ARRAYOID,
    }
}

/// Notify `work_lease_lost` for each of `tokens` (one statement for all),
/// unless there are none or `workfence.notify_lease_lost` is off. Called by
/// [`crate::verbs::lapse::settle`], which skips it on a schema before 0.6.0 (no
/// `workfence.lost_token` there).
pub fn lease_lost(client: &mut pgrx::spi::SpiClient<'_>, tokens: &[LostToken]) -> Result<()> {
    if tokens.is_empty() || !NOTIFY_LEASE_LOST.get() {
        return Ok(());
    }
    let params = LeaseLostParams {
        ids: tokens.iter().map(|t| t.id).collect(),
        queues: tokens.iter().map(|t| t.queue.clone()).collect(),
        keys: tokens.iter().map(|t| t.key.clone()).collect(),
        owners: tokens.iter().map(|t| t.owner.clone()).collect(),
        epochs: tokens.iter().map(|t| t.epoch).collect(),
    };
    plans::run(client, &LEASE_LOST, params, |_| Ok(()))
}
