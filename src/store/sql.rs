//! The store's shared pieces: SQL fragments several statements are built
//! from (each a `macro_rules!` expanding to a string literal, so a statement
//! stays one `concat!` of fixed text), the parameter structs statements of
//! different modules share, and the server's clock a statement is given.
//! Below the verbs: it names nothing of them, so claim, flow, wait, lapse,
//! lease and enqueue build on it without importing one another for it.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

use crate::base::error::{Result, WorkfenceError};
use crate::pg::plans::params;

/// Append one entry to an item's `errors` history (`i.errors`, NULL or a
/// jsonb array), keeping the newest [`validate::ERRORS_KEPT`] (20): when the
/// history is full its oldest entry is dropped. The entry is a
/// `workfence.error_entry` (attempt, epoch, owner, at, error) as jsonb, its
/// fields the five SQL expressions given. For an `UPDATE workfence.items AS
/// i`. A composite and `to_jsonb` rather than `jsonb_build_object`: the same
/// object, through functions whose every argument has a type
/// (`harness/tests/client/privileges.rs` shadows each function the SQL names). The
/// pure test `errors_bound_is_validate_errors_kept` checks the number
/// against the constant.
macro_rules! errors_append {
    ($attempt:literal, $epoch:literal, $owner:literal, $at:literal, $error:literal) => {
        concat!(
            "CASE WHEN pg_catalog.jsonb_array_length(COALESCE(i.errors, '[]'::pg_catalog.jsonb)) ",
            "OPERATOR(pg_catalog.>=) 20 THEN i.errors OPERATOR(pg_catalog.-) 0 ",
            "ELSE COALESCE(i.errors, '[]'::pg_catalog.jsonb) END OPERATOR(pg_catalog.||) ",
            "pg_catalog.to_jsonb(ROW(",
            $attempt,
            ", ",
            $epoch,
            ", ",
            $owner,
            ", ",
            $at,
            ", ",
            $error,
            ")::workfence.error_entry)"
        )
    };
}
pub(crate) use errors_append;

/// What a claim statement sets, for the rows it picked (`p`, with `p.dead`
/// true for a lapsed final attempt, which is dead-lettered rather than
/// claimed: a job that keeps crashing its worker cannot loop forever). One
/// UPDATE does both, so that a claim starts one modifying plan node, not
/// two (plan start-up is most of a claim's cost). For schema `current`:
/// `claimed_at` and a lease capped at `claimed_at + max_run`; for `legacy`
/// (see [`plans::Schema`]) neither column exists. `$owner`, `$lease` and
/// `$now` are the statement's parameters for the owner, the lease and the
/// server's clock. `nextval` is called for the claimed rows only (a CASE
/// evaluates only the branch it takes). For schema `life` (0.12.0, see
/// [`plans::Claiming`]) as `current`, and the rows end with the item's
/// `trace`.
macro_rules! claim_sets {
    ($mode:ident, $owner:literal, $lease:literal, $now:literal) => {
        concat!(
            r#"
   SET state = CASE WHEN p.dead THEN 'failed'::workfence.item_state
                    ELSE 'claimed'::workfence.item_state END,
       epoch = CASE WHEN p.dead THEN i.epoch
                    ELSE pg_catalog.nextval('workfence.epoch_seq'::pg_catalog.regclass) END,
       owner = CASE WHEN p.dead THEN i.owner ELSE "#,
            $owner,
            r#" END,
       attempts = CASE WHEN p.dead THEN i.attempts ELSE i.attempts OPERATOR(pg_catalog.+) 1 END,
       last_error = CASE WHEN p.dead THEN 'lease expired on the final attempt' ELSE i.last_error END,
       finished_at = CASE WHEN p.dead THEN "#,
            $now,
            r#" ELSE i.finished_at END,"#,
            $crate::pg::plans::by_schema!(
                $mode,
                concat!(
                    "\n       claimed_at = CASE WHEN p.dead THEN i.claimed_at ELSE ",
                    $now,
                    " END,\n       lease_until = CASE WHEN p.dead THEN NULL ELSE LEAST(",
                    $now,
                    " OPERATOR(pg_catalog.+) ",
                    $lease,
                    ", ",
                    $now,
                    " OPERATOR(pg_catalog.+) i.max_run) END"
                ),
                concat!(
                    "\n       lease_until = CASE WHEN p.dead THEN NULL ELSE ",
                    $now,
                    " OPERATOR(pg_catalog.+) ",
                    $lease,
                    " END"
                )
            ),
            r#"
  FROM picked AS p
 WHERE i.id OPERATOR(pg_catalog.=) p.id
RETURNING i.id, i.key, i.payload, i.epoch, i.attempts, i.lease_until,
          p.lost_owner, p.lost_epoch, p.lost_at, p.dead, i.priority, i.run_at"#,
            $crate::pg::plans::life_only!($mode, ", i.trace"),
            "\n"
        )
    };
}

pub(crate) use claim_sets;

/// SQL, a boolean: whether queue `$1` has an item in state `$state` whose
/// `$column` is at or before `$2`: the first entry of the partial index
/// that holds the queue's `$state` items in `$column` order, read with the
/// item's row (see `LAPSED` in [`crate::store::take`] for why not `min` or
/// `EXISTS`). [`lapsed_probe!`] and [`due_probe!`] are its two uses.
macro_rules! first_at_or_before {
    ($state:literal, $column:literal) => {
        concat!(
            "(SELECT i.id\n",
            "          FROM workfence.items AS i\n",
            "         WHERE i.queue OPERATOR(pg_catalog.=) $1\n",
            "           AND i.state OPERATOR(pg_catalog.=) '",
            $state,
            "'::workfence.item_state\n",
            "           AND i.",
            $column,
            " OPERATOR(pg_catalog.<=) $2\n",
            "         ORDER BY i.",
            $column,
            "\n",
            "         LIMIT 1) IS NOT NULL"
        )
    };
}
pub(crate) use first_at_or_before;

/// SQL, a boolean: whether queue `$1` has a claimed item whose lease lapsed
/// by the clock `$2`: the first entry of `items_lease_idx` at or before
/// `$2`. Shared by `LAPSED`, the long poll's re-check ([`crate::backend::wait`]) and
/// a limited queue's first statement ([`crate::verbs::flow`]).
macro_rules! lapsed_probe {
    () => {
        $crate::store::sql::first_at_or_before!("claimed", "lease_until")
    };
}
pub(crate) use lapsed_probe;

/// SQL, a boolean: whether queue `$1` has a pending item due by the clock
/// `$2`: the first entry of `items_ready_idx` at or before `$2`.
macro_rules! due_probe {
    () => {
        $crate::store::sql::first_at_or_before!("pending", "run_at")
    };
}
pub(crate) use due_probe;

/// The server's clock (`clock_timestamp()`), for a claim's `$5`.
pub(crate) fn server_clock() -> Result<TimestampWithTimeZone> {
    // SAFETY: reads the system clock; cannot fail.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    TimestampWithTimeZone::try_from(now).map_err(|_| WorkfenceError::UnexpectedNull {
        column: "clock_timestamp()",
    })
}

// A group's pending items, in SQL, for alias `$o` of `workfence.items`
// whose queue and group_key are fixed by the caller's other clauses:
// `state < 'claimed'` among `state IN (pending, claimed)`, which proves the
// predicate of `items_group_idx` and of no other partial index, so that a
// plan reads them there, in claim order ([`group_order!`]), and never walks
// the queue's pending items in `items_due_idx` or `items_head_idx` asking
// each for its group. Written as `state = 'pending'`, it let a generic plan
// made on a small table do that: 25,000 grouped items enqueued by one
// statement into a new database took over 30 s (each enqueue's probe
// walked the queue), 1.2 s once its plan read `items_group_idx`.
macro_rules! group_pending {
    ($o:literal) => {
        concat!(
            $o,
            ".state OPERATOR(pg_catalog.=) ANY ('{pending,claimed}'::workfence.item_state[])\n",
            "                   AND ",
            $o,
            ".state OPERATOR(pg_catalog.<) 'claimed'::workfence.item_state"
        )
    };
}
pub(crate) use group_pending;

// The claim order of a group's items as `items_group_idx` holds them, for
// alias `$o` (after [`group_pending!`] or [`group_has_room!`]'s clauses).
macro_rules! group_order {
    ($o:literal) => {
        concat!(
            "ORDER BY ",
            $o,
            ".state, ",
            $o,
            ".priority, ",
            $o,
            ".run_at, ",
            $o,
            ".id"
        )
    };
}
pub(crate) use group_order;

params! {
    /// `$1` queue, `$2` key.
    pub(crate) struct QueueKey<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
    }
}

params! {
    /// `$1` queue.
    pub(crate) struct QueueParams<'a> {
        queue: &'a str = TEXTOID,
    }
}

#[cfg(test)]
mod tests {
    use crate::access::validate;

    /// The number in the SQL of [`errors_append!`] is the documented bound.
    #[test]
    fn errors_bound_is_validate_errors_kept() {
        let sql = errors_append!("1", "2", "'o'", "now()", "'x'");
        assert!(
            sql.contains(&format!(
                "OPERATOR(pg_catalog.>=) {} ",
                validate::ERRORS_KEPT
            )),
            "{sql}"
        );
    }
}
