//! What a lease holder can do with its token: renew, finish, release, fail,
//! assert, and ask how it stands (`work_lease_status`).
//!
//! Every call names the token as (id, owner, epoch). Each check of the token
//! and the state change it allows is ONE statement (`UPDATE ... WHERE id AND
//! owner AND epoch AND state = 'claimed'`), so the check and the change are
//! atomic under PostgreSQL's row locks: a concurrent re-claim either commits
//! first (and the UPDATE, re-checking the new row version, matches nothing)
//! or waits for this one. The epoch is the authority: an expired lease that no
//! one has re-claimed is still the newest and is honoured.
//!
//! Where queue grants are enforced ([`crate::access::grants`]) and the session's
//! role does not reach every queue, each statement that changes or locks a
//! row comes in its *scoped* form, which also requires the item's queue to
//! be `LIKE ANY` of the role's claim patterns (its last parameter): a token
//! of an item in a queue the role may not claim matches nothing, and is
//! then refused exactly as a token of a missing item is (the reads that
//! follow a refusal check the queue they read), so the answer never tells
//! whether such an item exists.

use std::collections::HashSet;

use pgrx::datum::{DatumWithOid, Interval};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::access::grants::{self, Capability, Scope};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::wait;
use crate::base::error::{LeaseStatus, OrReport, Result, WorkfenceError};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Params, Statement};
use crate::store::sql::errors_append;

/// The parameters of a statement guarded by a token, the same in every
/// one: `$1` id, `$2` owner, `$3` epoch, then what the statement adds
/// (`then`, [`Then`]) from `$4` on, and last the `LIKE` patterns of the
/// queues the role may claim (NULL in the open form, which ignores it; see
/// [`Fenced`]). Made by [`Token::params`] and [`Token::then`].
struct Guarded<'a, T> {
    token: &'a Token,
    then: T,
    scope: Option<Vec<String>>,
}

/// A token statement in its two forms: `open`, for a role that reaches
/// every queue (in the schema's two versions, see [`plans::Versioned`]),
/// and `scoped`, which matches only items whose queue is `LIKE ANY` of its
/// last parameter (the schema of this version only: queue grants came
/// after the legacy schema).
struct Fenced<P> {
    open: plans::Versioned<P>,
    scoped: Statement<P>,
}

/// The condition of the scoped form of a token statement (see [`Fenced`]),
/// on parameter `$p`; nothing in the open form.
macro_rules! scope_filter {
    (open, $p:literal) => {
        ""
    };
    (scoped, $p:literal) => {
        concat!(
            "\n   AND i.queue OPERATOR(pg_catalog.~~) ANY (",
            $p,
            "::pg_catalog.text[])"
        )
    };
}

/// The three forms of a token statement built by `$sql!(schema, scope)`.
macro_rules! fenced {
    ($sql:ident) => {
        Fenced {
            open: plans::Versioned {
                current: Statement::new($sql!(current, open)),
                legacy: Statement::new($sql!(legacy, open)),
            },
            scoped: Statement::new($sql!(current, scoped)),
        }
    };
}

/// The forms of a token statement built by `$sql!(current, scope, $more)`
/// for a schema of 0.12.0 or later ([`crate::verbs::life::schema_has_life`]):
/// `$more` adds columns to its `RETURNING` that name what 0.12.0 added
/// (`rerun_after`). Its `legacy` form is never chosen (such a schema has
/// no `rerun_after`) and is the current one.
macro_rules! fenced_life {
    ($sql:ident, $more:literal) => {
        Fenced {
            open: plans::Versioned {
                current: Statement::new($sql!(current, open, $more)),
                legacy: Statement::new($sql!(current, open, $more)),
            },
            scoped: Statement::new($sql!(current, scoped, $more)),
        }
    };
}

/// What a guarded statement binds after the token: nothing (`()`), one
/// value, or two (a pair), each a [`Value`].
trait Then: 'static {
    /// The type OIDs of `$1..$n`: the token's first (bigint, text, bigint),
    /// then those of the values, then the scope's (text[]).
    const TYPES: &'static [pg_sys::Oid];
    /// Bind the values, from `$4` on.
    fn bind(self, args: &mut Vec<DatumWithOid<'static>>);
}

/// A value bound after the token, with the OID of its SQL type.
trait Value: Into<DatumWithOid<'static>> + 'static {
    const OID: pg_sys::Oid;
}

impl Value for Option<Interval> {
    const OID: pg_sys::Oid = pg_sys::INTERVALOID;
}

impl Value for Option<RawJsonb> {
    const OID: pg_sys::Oid = pg_sys::JSONBOID;
}

impl Value for String {
    const OID: pg_sys::Oid = pg_sys::TEXTOID;
}

impl Then for () {
    const TYPES: &'static [pg_sys::Oid] = &[
        pg_sys::INT8OID,
        pg_sys::TEXTOID,
        pg_sys::INT8OID,
        pg_sys::TEXTARRAYOID,
    ];
    fn bind(self, _: &mut Vec<DatumWithOid<'static>>) {}
}

impl<A: Value> Then for A {
    const TYPES: &'static [pg_sys::Oid] = &[
        pg_sys::INT8OID,
        pg_sys::TEXTOID,
        pg_sys::INT8OID,
        A::OID,
        pg_sys::TEXTARRAYOID,
    ];
    fn bind(self, args: &mut Vec<DatumWithOid<'static>>) {
        args.push(self.into());
    }
}

impl<A: Value, B: Value> Then for (A, B) {
    const TYPES: &'static [pg_sys::Oid] = &[
        pg_sys::INT8OID,
        pg_sys::TEXTOID,
        pg_sys::INT8OID,
        A::OID,
        B::OID,
        pg_sys::TEXTARRAYOID,
    ];
    fn bind(self, args: &mut Vec<DatumWithOid<'static>>) {
        args.push(self.0.into());
        args.push(self.1.into());
    }
}

impl<T: Then> Params for Guarded<'_, T> {
    type Family = Guarded<'static, T>;
    const TYPES: &'static [pg_sys::Oid] = T::TYPES;
    fn into_datums(self) -> Vec<DatumWithOid<'static>> {
        let mut args = Vec::with_capacity(T::TYPES.len());
        args.push(self.token.id.into());
        args.push(self.token.owner.as_str().into());
        args.push(self.token.epoch.into());
        self.then.bind(&mut args);
        args.push(self.scope.into());
        args
    }
}

// Push the lease of the current token out to now + `$4` (the lease), but
// never past `claimed_at + max_run` (the item's run-time limit, NULL: none);
// once that is reached the lease cannot be renewed at all. (A schema before
// 0.6.0 has no run-time limit.)
macro_rules! renew_sql {
    ($mode:ident, $scope:ident) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET lease_until = "#,
            plans::by_schema!(
                $mode,
                r#"LEAST(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $4,
                           i.claimed_at OPERATOR(pg_catalog.+) i.max_run)"#,
                "pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $4"
            ),
            r#"
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            plans::by_schema!(
                $mode,
                r#"
   AND COALESCE(i.claimed_at OPERATOR(pg_catalog.+) i.max_run, 'infinity'::pg_catalog.timestamptz)
       OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()"#,
                ""
            ),
            scope_filter!($scope, "$5"),
            r#"
RETURNING i.id
"#
        )
    };
}

static RENEW: Fenced<Guarded<Option<Interval>>> = fenced!(renew_sql);

// Mark the item of the current token done, with its result `$4`.
macro_rules! finish_sql {
    ($mode:ident, $scope:ident) => {
        finish_sql!($mode, $scope, "")
    };
    ($mode:ident, $scope:ident, $more:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET state = 'done'::workfence.item_state,
       result = $4,
       lease_until = NULL,
       finished_at = pg_catalog.clock_timestamp()
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            scope_filter!($scope, "$5"),
            "\nRETURNING i.queue",
            $more,
            "\n"
        )
    };
}

static FINISH: Fenced<Guarded<Option<RawJsonb>>> = fenced!(finish_sql);

// FINISH from 0.12.0: also whether the item is to run once more
// (`rerun_after` is this run's epoch: a `work_enqueue` with `on_conflict`
// replaced it while it ran, [`crate::verbs::life`]).
// And (from 0.12.0's workflows) whether it has children to settle
// ([`crate::verbs::workflow`]), after a placeholder for FAIL_LIFE's
// fourth column.
static FINISH_LIFE: Fenced<Guarded<Option<RawJsonb>>> = fenced_life!(
    finish_sql,
    ", COALESCE(i.rerun_after OPERATOR(pg_catalog.=) i.epoch, false), i.claimed_at, false, i.has_children"
);

// After a token-guarded statement matched nothing: how the item stands
// towards the token, read with a fresh snapshot (its own statement, so in
// READ COMMITTED it sees a concurrent change of the row that the guarded
// statement waited for). No row: no such item. Columns: the item's queue
// (for the refusal counters), whether the token was never superseded:
// current (then the statement refused for a reason of its own, a renew
// past max_run) or newer than the item's committed epoch (a claim not yet
// committed, or one that rolled back: no worker was fenced off), and
// whether the item is done under this token (a finish repeated with the
// same token, after a lost reply). Never locks, never waits. (`$4`, the
// scope, is not used: the caller checks the queue it reads.)
macro_rules! after_refusal_sql {
    ($done:literal) => {
        concat!(
            r#"
SELECT i.queue,
       i.owner OPERATOR(pg_catalog.=) $2 AND i.epoch OPERATOR(pg_catalog.=) $3
         AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
         OR i.epoch IS NULL OR $3 OPERATOR(pg_catalog.>) i.epoch,
       i.owner OPERATOR(pg_catalog.=) $2 AND i.epoch OPERATOR(pg_catalog.=) $3
         AND ("#,
            $done,
            r#")
  FROM workfence.items AS i
 WHERE i.id OPERATOR(pg_catalog.=) $1
"#
        )
    };
}

static AFTER_REFUSAL: Statement<Guarded<()>> = Statement::new(after_refusal_sql!(
    "i.state OPERATOR(pg_catalog.=) 'done'::workfence.item_state"
));

// AFTER_REFUSAL from 0.12.0: an item this token finished and a replace
// sent to run once more (`rerun_after` = minus the epoch,
// [`crate::verbs::life`]) counts as done by the token too, so that a finish
// repeated after a lost reply is still answered true.
static AFTER_REFUSAL_LIFE: Statement<Guarded<()>> = Statement::new(after_refusal_sql!(
    "i.state OPERATOR(pg_catalog.=) 'done'::workfence.item_state OR i.rerun_after OPERATOR(pg_catalog.=) OPERATOR(pg_catalog.-) $3"
));

/// How an item stands towards a token a guarded statement did not match
/// (see [`AFTER_REFUSAL`]).
#[derive(Default)]
struct AfterRefusal {
    /// The item's queue; `None` if no item has the token's id.
    queue: Option<String>,
    /// The token is current after all, or newer than the item's epoch: not
    /// a stale token (not counted).
    current: bool,
    /// The item is done under this token.
    done_by_token: bool,
}

// Finish every (id, epoch) pair held under the owner, in one statement; the
// pairs finished.
// (`$5`: the scope, see `Fenced`.)
macro_rules! finish_many_sql {
    ($mode:ident, $scope:ident) => {
        finish_many_sql!($mode, $scope, "")
    };
    ($mode:ident, $scope:ident, $more:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET state = 'done'::workfence.item_state,
       result = r.result,
       lease_until = NULL,
       finished_at = pg_catalog.clock_timestamp()
  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4))
       AS r(id, epoch, result)
 WHERE i.id OPERATOR(pg_catalog.=) r.id
   AND i.owner OPERATOR(pg_catalog.=) $1
   AND i.epoch OPERATOR(pg_catalog.=) r.epoch
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            scope_filter!($scope, "$5"),
            "\nRETURNING i.id, i.epoch, i.queue",
            $more,
            "\n"
        )
    };
}

static FINISH_MANY: Fenced<FinishManyParams> = fenced!(finish_many_sql);

// FINISH_MANY from 0.12.0: also whether each item is to run once more (see
// FINISH_LIFE), and when it was claimed (for the run-time histogram).
// And whether it has children to settle (see FINISH_LIFE).
static FINISH_MANY_LIFE: Fenced<FinishManyParams> = fenced_life!(
    finish_many_sql,
    ", COALESCE(i.rerun_after OPERATOR(pg_catalog.=) i.epoch, false), i.claimed_at, i.has_children"
);

params! {
    /// `$1` owner, `$2` ids, `$3` epochs, `$4` results (one per id), `$5`
    /// the scope (see `Fenced`).
    struct FinishManyParams<'a> {
        owner: &'a str = TEXTOID,
        ids: Vec<i64> = INT8ARRAYOID,
        epochs: Vec<i64> = INT8ARRAYOID,
        results: Vec<Option<RawJsonb>> = JSONBARRAYOID,
        scope: Option<Vec<String>> = TEXTARRAYOID,
    }
}

// Of the (id, epoch) pairs the batch UPDATE did not take, how each item
// stands (as AFTER_REFUSAL reads one): its queue, and whether it is done
// under the pair's token (a finish repeated with the same token). Pairs of
// missing items have no row.
macro_rules! after_many_refused_sql {
    ($done:literal) => {
        concat!(
            r#"
SELECT i.id, r.epoch, i.queue,
       i.owner OPERATOR(pg_catalog.=) $1 AND i.epoch OPERATOR(pg_catalog.=) r.epoch
         AND ("#,
            $done,
            r#"),
       i.epoch IS NULL OR r.epoch OPERATOR(pg_catalog.>) i.epoch
  FROM workfence.items AS i
  JOIN ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) AS r(id, epoch)
    ON i.id OPERATOR(pg_catalog.=) r.id
"#
        )
    };
}

static AFTER_MANY_REFUSED: Statement<FinishedManyByParams> = Statement::new(
    after_many_refused_sql!("i.state OPERATOR(pg_catalog.=) 'done'::workfence.item_state"),
);

// AFTER_MANY_REFUSED from 0.12.0: a pair whose token finished the item
// that a replace then sent round once more counts as done by it (see
// AFTER_REFUSAL_LIFE).
static AFTER_MANY_REFUSED_LIFE: Statement<FinishedManyByParams> =
    Statement::new(after_many_refused_sql!(
        "i.state OPERATOR(pg_catalog.=) 'done'::workfence.item_state OR i.rerun_after OPERATOR(pg_catalog.=) OPERATOR(pg_catalog.-) r.epoch"
    ));

params! {
    /// `$1` owner, `$2` ids, `$3` epochs.
    struct FinishedManyByParams<'a> {
        owner: &'a str = TEXTOID,
        ids: Vec<i64> = INT8ARRAYOID,
        epochs: Vec<i64> = INT8ARRAYOID,
    }
}

// Hand the item of the current token back: pending from now + `$4` (the
// delay); with no delay it keeps its run_at, so its place in claim order
// (from 0.10.0: a worker shutting down does not send its items behind the
// ones queued after them, which matters most in a serial group). A
// release hands the attempt back: the job did not fail, it was put down.
macro_rules! release_sql {
    ($mode:ident, $scope:ident) => {
        release_sql!(
            @ $mode,
            $scope,
            "\n       attempts = GREATEST(i.attempts OPERATOR(pg_catalog.-) 1, 0)",
            ""
        )
    };
    // The form of a schema of 0.12.0 or later (RELEASE_LIFE): `$attempts`,
    // and the columns every settle's `_LIFE` form returns after the queue.
    ($mode:ident, $scope:ident, $attempts:literal) => {
        release_sql!(@ $mode, $scope, $attempts, ", false, i.claimed_at")
    };
    (@ $mode:ident, $scope:ident, $attempts:literal, $more:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET state = 'pending'::workfence.item_state,
       lease_until = NULL,
       run_at = CASE WHEN $4 OPERATOR(pg_catalog.=) '0'::pg_catalog.interval
                     THEN LEAST(i.run_at, pg_catalog.clock_timestamp())
                     ELSE pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $4 END,"#,
            $attempts,
            r#"
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            scope_filter!($scope, "$5"),
            "\nRETURNING i.queue",
            $more,
            "\n"
        )
    };
}

static RELEASE: Fenced<Guarded<Option<Interval>>> = fenced!(release_sql);

// RELEASE from 0.12.0: a run that stored a checkpoint keeps its attempt
// counted and raises `max_attempts` by one instead of giving the attempt
// back (the attempts left are the same), so that the next claim is not a
// first attempt, and a claim reads checkpoints only for items claimed
// before (attempt > 1, [`crate::verbs::life::with_progress`]): a lookup on
// every first attempt cost a claim -> finish 5% more instructions.
static RELEASE_LIFE: Fenced<Guarded<Option<Interval>>> = fenced_life!(
    release_sql,
    "\n       attempts = CASE WHEN i.progress IS NULL
                       THEN GREATEST(i.attempts OPERATOR(pg_catalog.-) 1, 0) ELSE i.attempts END,
       max_attempts = CASE WHEN i.progress IS NULL
                           THEN i.max_attempts ELSE i.max_attempts OPERATOR(pg_catalog.+) 1 END"
);

// Store the checkpoint `$4` of the current token (from 0.12.0; `$more` is
// empty: the macro's third argument makes it a `fenced_life!` statement,
// whose schema always has `progress`). A `rerun_after` left by a run that
// an `on_conflict` replace named and that ended otherwise than by a finish
// (a release, a retryable failure, a lapse) is dropped: this run is the
// one with the new payload, so its checkpoints are handed on
// ([`crate::verbs::life::with_progress`]); the replaced run's own marker
// stays while it runs, and its checkpoints are not.
macro_rules! progress_sql {
    ($mode:ident, $scope:ident, $more:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET progress = $4,
       rerun_after = CASE WHEN i.rerun_after OPERATOR(pg_catalog.=) i.epoch
                          THEN i.rerun_after END
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            scope_filter!($scope, "$5"),
            "\nRETURNING i.id",
            $more,
            "\n"
        )
    };
}

static PROGRESS: Fenced<Guarded<Option<RawJsonb>>> = fenced_life!(progress_sql, "");

/// The largest checkpoint `work_progress` stores: 64 KiB of jsonb in its
/// binary form (what `pg_column_size` reports before compression). A
/// checkpoint is rewritten with its row at every call, and handed out with
/// every claim of a retried item: a cursor, a page number, the ids done so
/// far, not the work's data (keep that in a table of your own).
pub const PROGRESS_MAX_BYTES: usize = 64 * 1024;

/// Store a checkpoint of the current run, for a retry to resume from.
///
/// SQL: `workfence.work_progress(id bigint, owner text, epoch bigint,
/// progress jsonb) RETURNS boolean` (from 0.12.0). True when the item is
/// claimed under exactly this owner AND epoch (an expired lease nobody
/// re-claimed still counts, as for `work_renew`): `progress` is stored in
/// the item's `progress`, replacing the one before, shown by `work_item`
/// and `work_items` and returned by the item's next claim (its `progress`
/// column), so a run after a failure, a release or a lapsed lease resumes
/// from it. False for any other token, which changes nothing: the token
/// check and the write are one `UPDATE` under the row lock, so a stale
/// writer (a zombie whose lease was re-claimed) can never overwrite a newer
/// run's checkpoint, and no reader sees an older checkpoint after a newer
/// one (docs/contract.md, promise 12). The idea of a checkpoint is River's
/// `JobUpdate` and awa's ADR-014; the fence is this extension's.
///
/// Errors: 22004 for a NULL argument; 22023 for a blank, oversized or
/// control-character owner, or a `progress` over 64 KiB
/// ([`PROGRESS_MAX_BYTES`]).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_progress(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    progress: Option<RawJsonb>,
) -> bool {
    (|| {
        let token = Token::new(id, owner, epoch)?;
        let progress = validate::required("progress", progress)?;
        // Its size uncompressed: a value read from a table arrives as a
        // TOAST pointer or compressed, a few bytes for any size.
        let size = progress.raw_size();
        if size > PROGRESS_MAX_BYTES {
            return Err(WorkfenceError::invalid(
                "progress",
                "must be at most 64 KiB",
                format!("The checkpoint is {size} bytes as jsonb."),
                "Store a cursor or the ids done so far, and keep bulky state in a table of your own.",
            ));
        }
        let scope = grants::scope(Capability::Claim)?;
        Ok(
            run_guarded(form(&PROGRESS, &scope), token.then(Some(progress), &scope))?
                || after_refusal(&token, false, &scope)?,
        )
    })()
    .or_report()
}

// Record the failure `$4` (the error) of the current token: retry after
// `$5` (retry_in), or after an exponential backoff with equal jitter
// (OPERATOR(...) binds like any user operator, left to right, hence the
// explicit parentheses):
// d = min(2^attempts s, 1 h), wait d/2 + random(0, d/2). Once the attempts
// are used up the item is failed (the dead letter state). The failure goes
// into the item's `errors` history too (not in a schema before 0.6.0).
macro_rules! fail_sql {
    // The forms of a schema before 0.12.0 return whether the failure was
    // final too (the state counts need it, `counters::moved`), in the
    // `_LIFE` forms' fourth column.
    ($mode:ident, $scope:ident) => {
        fail_sql!(
            $mode,
            $scope,
            ", false, NULL::pg_catalog.timestamptz, i.state OPERATOR(pg_catalog.=) 'failed'::workfence.item_state"
        )
    };
    ($mode:ident, $scope:ident, $more:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET state = CASE WHEN i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
                    THEN 'failed'::workfence.item_state
                    ELSE 'pending'::workfence.item_state END,
       run_at = CASE WHEN i.attempts OPERATOR(pg_catalog.>=) i.max_attempts THEN i.run_at
                ELSE pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) COALESCE($5,
                  pg_catalog.make_interval(secs =>
                    LEAST(pg_catalog.power(2::pg_catalog.float8, i.attempts::pg_catalog.float8),
                          3600::pg_catalog.float8)
                    OPERATOR(pg_catalog.*) (0.5::pg_catalog.float8 OPERATOR(pg_catalog.+)
                      (0.5::pg_catalog.float8 OPERATOR(pg_catalog.*) pg_catalog.random())))) END,
       finished_at = CASE WHEN i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
                          THEN pg_catalog.clock_timestamp() ELSE NULL END,
       lease_until = NULL,"#,
            plans::by_schema!(
                $mode,
                concat!(
                    r#"
       errors = "#,
                    errors_append!(
                        "i.attempts",
                        "i.epoch",
                        "i.owner",
                        "pg_catalog.clock_timestamp()",
                        "$4"
                    ),
                    ","
                ),
                ""
            ),
            r#"
       last_error = $4
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            scope_filter!($scope, "$6"),
            "\nRETURNING i.queue",
            $more,
            "\n"
        )
    };
}

static FAIL: Fenced<Guarded<(String, Option<Interval>)>> = fenced!(fail_sql);

// FAIL from 0.12.0: also whether the item, failed for good, is to run
// once more (see FINISH_LIFE).
// And whether it failed for good (else it goes round again: a retry),
// and whether it has children to settle (see FINISH_LIFE).
static FAIL_LIFE: Fenced<Guarded<(String, Option<Interval>)>> = fenced_life!(
    fail_sql,
    ", i.state OPERATOR(pg_catalog.=) 'failed'::workfence.item_state AND COALESCE(i.rerun_after OPERATOR(pg_catalog.=) i.epoch, false), i.claimed_at, i.state OPERATOR(pg_catalog.=) 'failed'::workfence.item_state, i.has_children"
);

// Lock the row of the current token. FOR NO KEY UPDATE: the row lock an
// UPDATE takes, held to the end of the caller's transaction, so no claim,
// renew or finish of another token can commit in between.
macro_rules! assert_sql {
    ($mode:ident, $scope:ident) => {
        concat!(
            r#"
SELECT i.id
  FROM workfence.items AS i
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state"#,
            scope_filter!($scope, "$4"),
            r#"
   FOR NO KEY UPDATE
"#
        )
    };
}

static ASSERT: Fenced<Guarded<()>> = fenced!(assert_sql);

// The re-check at commit of a token work_assert accepted (see `crate::backend::xact`):
// the row under this owner and epoch, locked again, with whether its newest
// version was written by this transaction (then a finish, release or fail
// under the token in this transaction explains a state other than claimed).
macro_rules! fence_sql {
    ($mode:ident, $scope:ident) => {
        concat!(
            r#"
SELECT i.state::pg_catalog.text, i.xmin::pg_catalog.text::pg_catalog.int8
  FROM workfence.items AS i
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3"#,
            scope_filter!($scope, "$4"),
            r#"
   FOR NO KEY UPDATE
"#
        )
    };
}

static FENCE: Fenced<Guarded<()>> = fenced!(fence_sql);

// How the item's row stands, for `work_lease_status` and `work_assert`'s
// DETAIL: the row version this statement's snapshot sees, with its xmax (a
// transaction updating or locking it, see `standing`).
static TOKEN_STATE: Statement<ItemParams> = Statement::new(
    r#"
SELECT i.state::pg_catalog.text, i.owner, i.epoch, i.xmax::pg_catalog.text::pg_catalog.int8,
       i.queue
  FROM workfence.items AS i
 WHERE i.id OPERATOR(pg_catalog.=) $1
"#,
);

params! {
    /// `$1` item id.
    struct ItemParams {
        id: i64 = INT8OID,
    }
}

pub(crate) use crate::base::types::Token;

impl Token {
    fn new(id: Option<i64>, owner: Option<String>, epoch: Option<i64>) -> Result<Token> {
        Ok(Token {
            id: validate::id(id)?,
            owner: validate::owner(owner)?,
            epoch: validate::epoch(epoch)?,
        })
    }

    /// The token as `$1` id, `$2` owner, `$3` epoch, and the claim scope
    /// of the role (`$4`, see [`Fenced`]).
    fn params(&self, scope: &Scope) -> Guarded<'_, ()> {
        self.then((), scope)
    }

    /// The token as `$1` id, `$2` owner, `$3` epoch, `then` from `$4` on,
    /// and last the claim scope of the role (see [`Fenced`]).
    fn then<T: Then>(&self, then: T, scope: &Scope) -> Guarded<'_, T> {
        Guarded {
            token: self,
            then,
            scope: scope.like(),
        }
    }
}

/// The form of `stmt` for `scope`.
fn form<P>(stmt: &'static Fenced<P>, scope: &Scope) -> &'static Statement<P> {
    match scope {
        Scope::Every => stmt.open.get(),
        Scope::Only { .. } => &stmt.scoped,
    }
}

/// Run a token-guarded statement; true when it matched the row.
fn run_guarded<P: Params>(stmt: &'static Statement<P::Family>, params: P) -> Result<bool> {
    Spi::connect_mut(|client| plans::run(client, stmt, params, |rows| Ok(!rows.is_empty())))
}

/// How a settle (finish, fail, release) that matched its row left it.
struct Ended {
    /// The item's queue.
    queue: String,
    /// Whether the item is to run once more (`on_conflict`,
    /// [`crate::verbs::life`]).
    rerun: bool,
    /// How long the run lasted, from its claim to now, in microseconds:
    /// `None` on a schema before 0.12.0 (whose settles return no
    /// `claimed_at`) or for a claim made before 0.6.0 (none recorded).
    ran_micros: Option<i64>,
    /// A failure that used up the attempts (the item is failed), not one
    /// that goes round again.
    failed_for_good: bool,
    /// The item has children (workflows, from 0.12.0), whose edges its
    /// settle resolves ([`crate::verbs::workflow::settled`]).
    has_children: bool,
}

impl Ended {
    /// Whether the run's end settled the item for its children: it is
    /// done or failed for good (`outcome`), not sent round once more.
    fn settles_children(&self) -> bool {
        self.has_children && !self.rerun
    }
}

/// The item `id`'s settle (an accepted finish or final failure) settled it
/// as `outcome` for its children (see [`Ended::settles_children`]).
fn settle_children(id: i64, outcome: crate::verbs::workflow::Outcome) -> Result<()> {
    Spi::connect_mut(|client| crate::verbs::workflow::settled(client, vec![id], outcome))
}

/// How long ago `claimed_at` was, in microseconds.
fn since(claimed_at: TimestampWithTimeZone) -> i64 {
    // SAFETY: reads the clock.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    now.saturating_sub(pg_sys::TimestampTz::from(claimed_at))
}

/// Run a token-guarded statement that returns the item's queue (`RETURNING
/// i.queue`; the `_LIFE` forms of a settle add whether the item is to run
/// once more, its `claimed_at`, and FAIL_LIFE whether it failed for good):
/// how it ended, if it matched the row.
fn run_returning_queue<P: Params>(
    stmt: &'static Statement<P::Family>,
    params: P,
) -> Result<Option<Ended>> {
    Spi::connect_mut(|client| {
        plans::run(client, stmt, params, |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let columns = rows.columns()?;
            let row = rows.first();
            let flag = |n: usize| -> Result<bool> {
                Ok(columns >= n && row.get::<bool>(n)?.unwrap_or(false))
            };
            let claimed_at = if columns >= 3 {
                row.get::<TimestampWithTimeZone>(3)?
            } else {
                None
            };
            Ok(row.get::<String>(1)?.map(|queue| Ended {
                queue,
                rerun: flag(2).unwrap_or(false),
                ran_micros: claimed_at.map(since),
                failed_for_good: flag(4).unwrap_or(false),
                has_children: flag(5).unwrap_or(false),
            }))
        })
    })
}

/// Run a token-guarded statement that hands the item back to its queue
/// (`RETURNING i.queue`, see [`run_returning_queue`]); when it matched,
/// claimers long-polling that queue are woken once the transaction commits.
fn run_handing_back<P: Params>(
    stmt: &'static Statement<P::Family>,
    params: P,
) -> Result<Option<Ended>> {
    let ended = run_returning_queue(stmt, params)?;
    if let Some(ended) = &ended {
        wait::wake_after_commit(&ended.queue, 1);
    }
    Ok(ended)
}

/// Run a token-guarded statement that ends the item's claim for good
/// (`RETURNING i.queue`, see [`run_returning_queue`]); when it matched, a
/// group or a limit's slot of the queue may have freed
/// ([`crate::verbs::flow::freed`]).
fn run_freeing<P: Params>(stmt: &'static Statement<P::Family>, params: P) -> Result<Option<Ended>> {
    let ended = run_returning_queue(stmt, params)?;
    if let Some(ended) = &ended {
        crate::verbs::flow::freed(&ended.queue)?;
    }
    Ok(ended)
}

/// After a token-guarded statement matched nothing: for a finish
/// (`finishing`), whether the item is done under this very token (a finish
/// repeated after a lost reply), which makes the call true. Otherwise the
/// call was refused, and the refusal is counted on the item's queue
/// ([`counters::refused`]), unless the token turns out current after all
/// (a renew past `max_run`) or no item has its id, or the item's queue is
/// outside the role's claim `scope` (then the call is answered as for a
/// missing item: false, not counted). Without the counters
/// (the library not preloaded), only a finish reads anything. One read by
/// primary key, with a fresh snapshot: it takes no lock and waits for no
/// one, so a refusal never waits behind the current holder's transaction.
fn after_refusal(token: &Token, finishing: bool, scope: &Scope) -> Result<bool> {
    if !finishing && !counters::enabled() {
        return Ok(false);
    }
    let after = Spi::connect_mut(|client| {
        let stmt = if crate::verbs::life::schema_has_life() {
            &AFTER_REFUSAL_LIFE
        } else {
            &AFTER_REFUSAL
        };
        plans::run(client, stmt, token.params(scope), |rows| {
            if rows.is_empty() {
                return Ok(AfterRefusal::default());
            }
            let row = rows.first();
            Ok(AfterRefusal {
                queue: row.get::<String>(1)?,
                current: row.get::<bool>(2)?.unwrap_or(false),
                done_by_token: row.get::<bool>(3)?.unwrap_or(false),
            })
        })
    })?;
    if after
        .queue
        .as_deref()
        .is_some_and(|queue| !scope.allows(queue))
    {
        // An item of a queue the role may not claim: as if there were none.
        return Ok(false);
    }
    if finishing && after.done_by_token {
        return Ok(true);
    }
    if let (Some(queue), false) = (&after.queue, after.current) {
        counters::refused(queue, 1);
    }
    Ok(false)
}

/// The server's clock (`clock_timestamp()`), as a `TimestampTz`.
fn server_now() -> i64 {
    // SAFETY: reads the system clock; cannot fail.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Push the lease of a claimed item out to `clock_timestamp() + lease`.
///
/// SQL: `workfence.work_renew(id bigint, owner text, epoch bigint, lease
/// interval) RETURNS boolean`. True only while the item is claimed under
/// exactly this owner AND epoch (an expired lease that nobody re-claimed
/// still counts); false otherwise (superseded, finished, released,
/// cancelled, unknown id): the worker should stop the job. An item enqueued
/// with `max_run` is never renewed past `claimed_at + max_run`: the lease
/// ends there at the latest, and once that time is reached every renew
/// returns false (from 0.6.0), although the token stays current until the
/// item is claimed anew (a finish still counts). A refusal is counted in
/// `work_queue_stats.refused` (see [`after_refusal`]).
///
/// Errors: 22004 for a NULL argument; 22023 for a blank, oversized or control-character owner, a
/// lease not in (0, 7 days].
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_renew(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    lease: Option<Interval>,
) -> bool {
    (|| {
        let token = Token::new(id, owner, epoch)?;
        validate::lease(lease.map(Into::into))?;
        let scope = grants::scope(Capability::Claim)?;
        Ok(
            run_guarded(form(&RENEW, &scope), token.then(lease, &scope))?
                || after_refusal(&token, false, &scope)?,
        )
    })()
    .or_report()
}

/// Mark the item done, storing `result`.
///
/// SQL: `workfence.work_finish(id bigint, owner text, epoch bigint, result
/// jsonb DEFAULT NULL) RETURNS boolean`. True when the item was claimed
/// under this exact token and is now done. Repeating the call with the same
/// token returns true again and changes nothing (the first result stays), so
/// a retry after a lost reply is safe. Any other token gets false.
///
/// Errors: 22004 for a NULL id, owner or epoch; 22023 for a blank or
/// oversized owner.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_finish(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    result: default!(Option<RawJsonb>, "NULL"),
) -> bool {
    finish(id, owner, epoch, result).or_report()
}

/// `work_finish`'s body, also the first half of
/// [`crate::verbs::cycle::work_finish_and_claim`]: true when the item was finished
/// under this token now or before (see `work_finish`).
pub(crate) fn finish(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    result: Option<RawJsonb>,
) -> Result<bool> {
    let token = Token::new(id, owner, epoch)?;
    let scope = grants::scope(Capability::Claim)?;
    let stmt = if crate::verbs::life::schema_has_life() {
        &FINISH_LIFE
    } else {
        &FINISH
    };
    match run_freeing(form(stmt, &scope), token.then(result, &scope))? {
        Some(ended) => {
            counters::run_ended(&ended.queue, Event::Done, ended.ran_micros);
            counters::moved(
                &ended.queue,
                Some(ItemState::Claimed),
                Some(ItemState::Done),
                1,
            );
            crate::verbs::life::ended(token.id, &ended.queue, ended.rerun, true)?;
            if ended.settles_children() {
                settle_children(token.id, crate::verbs::workflow::Outcome::Done)?;
            }
            Ok(true)
        }
        None => after_refusal(&token, true, &scope),
    }
}

/// Finish a claimed batch in one statement.
///
/// SQL: `workfence.work_finish_many(owner text, ids bigint[], epochs
/// bigint[], results jsonb[] DEFAULT NULL) RETURNS TABLE (id bigint,
/// finished boolean)`, one row per element of `ids`, in order. Each (id,
/// epoch) pair is judged exactly as `work_finish` judges it, with `results[n]`
/// (or NULL) as its result.
///
/// Errors: 22004 for a NULL owner, ids or epochs, or a NULL element in ids or
/// epochs; 22023 for a blank, oversized or control-character owner, or arrays of unequal length.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_finish_many(
    owner: Option<String>,
    ids: Option<Vec<Option<i64>>>,
    epochs: Option<Vec<Option<i64>>>,
    results: default!(Option<Vec<Option<RawJsonb>>>, "NULL"),
) -> TableIterator<'static, (name!(id, i64), name!(finished, bool))> {
    finish_many(owner, ids, epochs, results)
        .map(TableIterator::new)
        .or_report()
}

fn no_null_elements(arg: &'static str, values: Vec<Option<i64>>) -> Result<Vec<i64>> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            v.ok_or(WorkfenceError::NullElement {
                arg,
                element: i + 1,
            })
        })
        .collect()
}

fn finish_many(
    owner: Option<String>,
    ids: Option<Vec<Option<i64>>>,
    epochs: Option<Vec<Option<i64>>>,
    results: Option<Vec<Option<RawJsonb>>>,
) -> Result<Vec<(i64, bool)>> {
    let owner = validate::owner(owner)?;
    let ids = no_null_elements("ids", validate::required("ids", ids)?)?;
    let epochs = no_null_elements("epochs", validate::required("epochs", epochs)?)?;
    if epochs.len() != ids.len() {
        return Err(WorkfenceError::invalid(
            "epochs",
            "must have as many elements as \"ids\"",
            format!("ids has {} elements, epochs {}.", ids.len(), epochs.len()),
            "Pass the epoch of each claimed id, in the same order.",
        ));
    }
    let results = match results {
        Some(results) if results.len() != ids.len() => {
            return Err(WorkfenceError::invalid(
                "results",
                "must have as many elements as \"ids\"",
                format!("ids has {} elements, results {}.", ids.len(), results.len()),
                "Pass one result (or NULL) per id, or leave results out.",
            ));
        }
        Some(results) => results,
        None => vec![None; ids.len()],
    };
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let scope = grants::scope(Capability::Claim)?;
    let mut queues = Vec::new();
    let life = crate::verbs::life::schema_has_life();
    let mut ended = Vec::new();
    let mut parents = Vec::new();
    let mut pairs_done = |rows: pgrx::spi::SpiTupleTable<'_>| -> Result<HashSet<(i64, i64)>> {
        let mut set = HashSet::with_capacity(rows.len());
        for row in rows {
            let queue = row.get::<String>(3)?;
            if let (Some(id), Some(epoch)) = (row.get::<i64>(1)?, row.get::<i64>(2)?) {
                set.insert((id, epoch));
                if let (true, Some(queue)) = (life, &queue) {
                    let rerun = row.get::<bool>(4)?.unwrap_or(false);
                    ended.push((id, queue.clone(), rerun));
                    if !rerun && row.get::<bool>(6)?.unwrap_or(false) {
                        parents.push(id);
                    }
                    let ran = row.get::<TimestampWithTimeZone>(5)?.map(since);
                    counters::run_ended(queue, Event::Done, ran);
                } else if let Some(queue) = &queue {
                    counters::count(queue, Event::Done, 1);
                }
                if let Some(queue) = &queue {
                    counters::moved(queue, Some(ItemState::Claimed), Some(ItemState::Done), 1);
                }
            }
            if let Some(queue) = queue {
                if !queues.contains(&queue) {
                    queues.push(queue);
                }
            }
        }
        Ok(set)
    };
    let mut finished = Spi::connect_mut(|client| {
        plans::run(
            client,
            form(
                if life {
                    &FINISH_MANY_LIFE
                } else {
                    &FINISH_MANY
                },
                &scope,
            ),
            FinishManyParams {
                owner: &owner,
                ids: ids.clone(),
                epochs: epochs.clone(),
                results,
                scope: scope.like(),
            },
            &mut pairs_done,
        )
    })?;
    for queue in &queues {
        crate::verbs::flow::freed(queue)?;
    }
    for (id, queue, rerun) in &ended {
        crate::verbs::life::ended(*id, queue, *rerun, true)?;
    }
    if !parents.is_empty() {
        Spi::connect_mut(|client| {
            crate::verbs::workflow::settled(client, parents, crate::verbs::workflow::Outcome::Done)
        })?;
    }
    if finished.len() < ids.len() {
        // Pairs the UPDATE did not take may be finishes repeated with the same token.
        let (rest_ids, rest_epochs): (Vec<i64>, Vec<i64>) = ids
            .iter()
            .zip(&epochs)
            .filter(|pair| !finished.contains(&(*pair.0, *pair.1)))
            .map(|(id, epoch)| (*id, *epoch))
            .unzip();
        let mut refused: Vec<String> = Vec::new();
        let again = Spi::connect_mut(|client| {
            plans::run(
                client,
                if life {
                    &AFTER_MANY_REFUSED_LIFE
                } else {
                    &AFTER_MANY_REFUSED
                },
                FinishedManyByParams {
                    owner: &owner,
                    ids: rest_ids,
                    epochs: rest_epochs,
                },
                |rows| {
                    let mut done = HashSet::new();
                    for row in rows {
                        let (Some(id), Some(epoch)) = (row.get::<i64>(1)?, row.get::<i64>(2)?)
                        else {
                            continue;
                        };
                        let queue = row.get::<String>(3)?;
                        if queue.as_deref().is_some_and(|queue| !scope.allows(queue)) {
                            // A queue the role may not claim: as if missing.
                            continue;
                        }
                        if row.get::<bool>(4)?.unwrap_or(false) {
                            done.insert((id, epoch));
                        } else if row.get::<bool>(5)?.unwrap_or(false) {
                            // An epoch the item never carried: not stale.
                        } else if let Some(queue) = queue {
                            refused.push(queue);
                        }
                    }
                    Ok(done)
                },
            )
        })?;
        // One count per queue of the batch (usually one).
        refused.sort_unstable();
        for queue in refused.chunk_by(|a, b| a == b) {
            counters::refused(&queue[0], queue.len() as u64);
        }
        finished.extend(again);
    }
    Ok(ids
        .iter()
        .zip(&epochs)
        .map(|(id, epoch)| (*id, finished.contains(&(*id, *epoch))))
        .collect())
}

/// Hand a claimed item back unfinished (worker shutdown, snooze).
///
/// SQL: `workfence.work_release(id bigint, owner text, epoch bigint, delay
/// interval DEFAULT '0') RETURNS boolean`. True when the item was claimed
/// under this token: it is pending again, claimable from
/// `clock_timestamp() + delay`, and the attempt is given back (a release is
/// not a failure). From 0.10.0 a release with no delay keeps the item's
/// `run_at`, so its place in claim order (in its group too). The token is dead from then on. False for any other token.
///
/// Errors: 22004 for a NULL argument; 22023 for a blank, oversized or control-character owner, a
/// negative delay or one over 365 days (judged by its real length from now:
/// months count as the calendar months that follow, see
/// `validate::IntervalParts::micros_from`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_release(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    delay: default!(Option<Interval>, "'0'"),
) -> bool {
    (|| {
        let token = Token::new(id, owner, epoch)?;
        let delay_value = validate::required("delay", delay)?;
        validate::delay("delay", delay_value.into(), server_now())?;
        let scope = grants::scope(Capability::Claim)?;
        let stmt = if crate::verbs::life::schema_has_life() {
            &RELEASE_LIFE
        } else {
            &RELEASE
        };
        match run_handing_back(form(stmt, &scope), token.then(delay, &scope))? {
            Some(ended) => {
                counters::run_ended(&ended.queue, Event::Released, ended.ran_micros);
                counters::moved(
                    &ended.queue,
                    Some(ItemState::Claimed),
                    Some(ItemState::Pending),
                    1,
                );
                Ok(true)
            }
            None => after_refusal(&token, false, &scope),
        }
    })()
    .or_report()
}

/// Record a failed attempt.
///
/// SQL: `workfence.work_fail(id bigint, owner text, epoch bigint, error text,
/// retry_in interval DEFAULT NULL) RETURNS boolean`. True when the item was
/// claimed under this token: `error` is stored in `last_error`; if attempts
/// remain the item is pending again from `clock_timestamp() + retry_in`, or,
/// with `retry_in` NULL, after an exponential backoff with jitter (attempt n
/// waits between 2^n/2 and 2^n seconds, at most an hour); if the attempts are
/// used up the item is `failed` (dead letter). From 0.6.0 the failure is
/// also appended to the item's `errors` history (`{attempt, epoch, owner,
/// at, error}`, the newest [`validate::ERRORS_KEPT`] kept), and an error
/// text over [`validate::ERROR_TEXT_MAX_BYTES`] (2048 bytes) is cut there
/// and marked, in both places (not an error: the failure is recorded).
/// False for any other token, and then nothing is recorded.
///
/// Errors: 22004 for a NULL id, owner, epoch or error; 22023 for a blank or
/// oversized owner, a negative retry_in or one over 365 days (real length
/// from now, as for `work_release`'s delay).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_fail(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    error: Option<String>,
    retry_in: default!(Option<Interval>, "NULL"),
) -> bool {
    fail(id, owner, epoch, error, retry_in).or_report()
}

/// `work_fail`'s body, also the first half of
/// [`crate::verbs::cycle::work_fail_and_claim`]: true when the failure was recorded
/// under this token (see `work_fail`).
pub(crate) fn fail(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
    error: Option<String>,
    retry_in: Option<Interval>,
) -> Result<bool> {
    let token = Token::new(id, owner, epoch)?;
    let error = validate::required("error", error)?;
    // 0.6.0 bounds the text; a database not yet updated keeps it whole,
    // as its release did.
    let error = match plans::schema() {
        plans::Schema::Current => validate::error_text(error),
        plans::Schema::Legacy => error,
    };
    if let Some(retry) = retry_in {
        validate::delay("retry_in", retry.into(), server_now())?;
    }
    let scope = grants::scope(Capability::Claim)?;
    let stmt = if crate::verbs::life::schema_has_life() {
        &FAIL_LIFE
    } else {
        &FAIL
    };
    match run_handing_back(form(stmt, &scope), token.then((error, retry_in), &scope))? {
        Some(ended) => {
            let (event, state) = if ended.failed_for_good {
                (Event::Failed, ItemState::Failed)
            } else {
                (Event::Retried, ItemState::Pending)
            };
            counters::run_ended(&ended.queue, event, ended.ran_micros);
            counters::moved(&ended.queue, Some(ItemState::Claimed), Some(state), 1);
            crate::verbs::life::ended(token.id, &ended.queue, ended.rerun, false)?;
            if ended.failed_for_good && ended.settles_children() {
                settle_children(token.id, crate::verbs::workflow::Outcome::Failed)?;
            }
            Ok(true)
        }
        None => after_refusal(&token, false, &scope),
    }
}

/// Raise unless the caller holds the item's current lease, and hold the
/// item's row lock to the end of the transaction.
///
/// SQL: `workfence.work_assert(id bigint, owner text, epoch bigint) RETURNS
/// void`. Call it in the transaction that writes the job's effects, before
/// committing them: while the lock is held nobody can re-claim the item, so
/// the effects commit only under a lease that is still current. (Chubby's
/// sequencer check, Burrows 2006, done inside the database that holds both
/// the lease and the effects.)
///
/// The fence holds whatever savepoints do: if a subtransaction that held
/// the row lock rolls back (`ROLLBACK TO SAVEPOINT`, an exception block),
/// the lock is gone, so the transaction's commit (or `PREPARE TRANSACTION`)
/// checks the token again under a new row lock and raises 55000 "lease lost
/// before commit" if it is no longer current, which rolls the transaction
/// back (see `crate::backend::xact`).
///
/// Call it inside a transaction block (after `BEGIN`): outside one, a
/// current token is refused with 25P01, since the statement's own commit
/// would release the lock at once (a DO block or function called by a
/// single autocommit statement counts as outside; see the body).
///
/// Errors: 55000 (object_not_in_prerequisite_state) "lease lost" when the
/// token is not current, in or out of a transaction block; DETAIL says why
/// and HINT what to do, one of each per reason (missing, superseded, wrong
/// owner, finished, cancelled, released, uncommitted, rolled back: see
/// [`LeaseStatus`]); also at COMMIT as described above. 25P01
/// (no_active_sql_transaction) for a current token outside a transaction
/// block. 22004 for a NULL argument; 22023 for a blank, oversized or
/// control-character owner.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_assert(id: Option<i64>, owner: Option<String>, epoch: Option<i64>) {
    (|| {
        let token = Token::new(id, owner, epoch)?;
        let scope = grants::scope(Capability::Claim)?;
        // Outside a transaction block the row lock would end with this
        // statement: refused (25P01) as LOCK TABLE refuses it, but only for
        // a token that is current; a dead token gets its 55000 wherever it
        // is called (that news matters more, and the answer is the same in
        // or out of a transaction). Nothing is locked on this path.
        //
        // "Transaction block" is PostgreSQL's IsTransactionBlock(): after
        // BEGIN, or an implicit block (several statements in one simple
        // query string, or a pipeline of the extended protocol). A DO block
        // or a function called from one autocommit statement is refused
        // too, although that statement is a transaction that could hold
        // the lock over the writes it makes itself: a function cannot tell
        // that case from a bare `SELECT work_assert(...)` (LOCK TABLE can,
        // from its isTopLevel flag, which functions are not given), and the
        // rule "call it after BEGIN" has no exceptions to learn. Wrap such a
        // block in BEGIN ... COMMIT. The in-server tests
        // (`pgrx-tests/`) run inside BEGIN, so they meet the block path.
        // SAFETY: reads this backend's transaction state.
        if !unsafe { pg_sys::IsTransactionBlock() } {
            let standing = standing(&token, &scope)?;
            return Err(match standing.status {
                None => WorkfenceError::AssertOutsideTransaction,
                Some(status) => lease_lost(token, status, standing.queue, false),
            });
        }
        if run_guarded(form(&ASSERT, &scope), token.params(&scope))? {
            crate::backend::xact::asserted(token);
            return Ok(());
        }
        // Not current by the locking read, so not current by this later one
        // either (a claim never hands out an epoch twice): `None` cannot
        // come back, and would fail closed as before.
        let standing = standing(&token, &scope)?;
        let status = standing.status.unwrap_or(LeaseStatus::Released);
        Err(lease_lost(token, status, standing.queue, false))
    })()
    .or_report()
}

/// The 55000 "lease lost" error for `token`, not honoured because of
/// `status`; the refusal is counted on the item's `queue` (`None`: no such
/// item, not counted) unless the token is newer than the item's epoch.
fn lease_lost(
    token: Token,
    status: LeaseStatus,
    queue: Option<String>,
    at_commit: bool,
) -> WorkfenceError {
    // A token newer than the item's committed epoch was never superseded
    // (its claim has not committed, or rolled back): not counted.
    let stale = !matches!(status, LeaseStatus::Uncommitted | LeaseStatus::RolledBack);
    if let (Some(queue), true) = (&queue, stale) {
        counters::refused(queue, 1);
    }
    WorkfenceError::LeaseLost {
        id: token.id,
        owner: token.owner,
        epoch: token.epoch,
        status,
        at_commit,
    }
}

/// The fence at commit: each token `work_assert` accepted in this
/// transaction must still be current, or have been finished, released or
/// failed by this transaction itself; each is locked again (`FOR NO KEY
/// UPDATE`) so that it stays so until the commit. Called by `crate::backend::xact`
/// before a commit or prepare, only after a subtransaction rolled back.
///
/// Errors: 55000 "lease lost before commit", naming the first token that
/// is no longer current.
pub(crate) fn fence_at_commit(tokens: &[Token]) -> Result<()> {
    let scope = grants::scope(Capability::Claim)?;
    for token in tokens {
        let held = Spi::connect_mut(|client| {
            plans::run(client, form(&FENCE, &scope), token.params(&scope), |rows| {
                if rows.is_empty() {
                    return Ok(false);
                }
                let row = rows.first();
                let claimed = row.get::<String>(1)?.as_deref() == Some("claimed");
                let xmin = row.get::<i64>(2)?.unwrap_or(0);
                // SAFETY: a plain look-up of this backend's transaction state.
                let written_here = unsafe {
                    pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(
                        xmin as u32,
                    ))
                };
                Ok(claimed || written_here)
            })
        })?;
        if !held {
            let standing = standing(token, &scope)?;
            let status = standing.status.unwrap_or(LeaseStatus::Released);
            return Err(lease_lost(token.clone(), status, standing.queue, true));
        }
    }
    Ok(())
}

/// Why a token is (not) honoured.
///
/// SQL: `workfence.work_lease_status(id bigint, owner text, epoch bigint)
/// RETURNS text`, exactly one of:
/// - `current`: the item is claimed under this owner AND epoch; renew,
///   finish, release, fail and assert would succeed. A lease that lapsed but
///   that nobody has claimed anew is still `current` (the epoch is the
///   authority, time only opens the door).
/// - `uncommitted`: the epoch is newer than the item's committed one, and a
///   transaction that is still running is changing the item's row: the
///   claim that handed the epoch out has not committed yet. Only that
///   transaction sees the claim; every other connection's renew, finish,
///   release, fail and assert of the token are refused until it commits
///   (then the token is `current`). Precisely: the token's epoch is above
///   the epoch of the row version this call sees (or that has none), and
///   that version's `xmax` is a transaction in progress other than the
///   caller's. The same holds while another transaction holds the row
///   locked (`work_assert` of an older token, or a `FOR UPDATE` of someone's)
///   over the row a rolled-back claim left; a row locked by several
///   transactions at once (a MultiXact `xmax`, only from locks taken outside
///   the extension) is judged by its raw `xmax` value. The answer is of the
///   instant of the read: a claim that commits right after it is `current`
///   at the next call.
/// - `superseded`: the item does not carry this epoch and never will: it
///   was claimed again (a newer epoch), the lease was handed back with
///   `work_release` or a retryable `work_fail` (the next claim hands out a
///   newer epoch), or the claim that handed the epoch out rolled back (an
///   epoch newer than the item's, with nobody changing the item; an epoch
///   is never handed out twice, so it stays dead). Any epoch the item does
///   not carry, whatever the owner.
/// - `finished`: done or failed under this token.
/// - `cancelled`: cancelled while (or after being) held under this token.
/// - `wrong_owner`: the epoch is the item's, the owner is not.
/// - `missing`: no item has this id (never enqueued, or purged).
///
/// The same reading of the row as `work_assert`'s DETAIL, except that a
/// handed-back lease and a rolled-back claim are reported as `superseded`
/// (its DETAIL says "handed back" or "rolled back"). Reads with the
/// statement's snapshot: in READ COMMITTED the newest committed state at
/// each call, under REPEATABLE READ the transaction's snapshot (read-write
/// SPI takes `GetTransactionSnapshot()`); nothing changes.
///
/// VOLATILE, not STABLE, although it only reads: like every statement of the
/// extension (see `plans`), its read runs through read-write SPI, which
/// takes a fresh snapshot per statement, so two calls in one query may see
/// different committed states, which STABLE forbids. That is also the answer
/// a worker wants (the state its next renew would meet). PARALLEL UNSAFE:
/// read-write SPI cannot run in a parallel worker.
///
/// Errors: 22004 for a NULL argument; 22023 for a blank, oversized or
/// control-character owner.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_lease_status(id: Option<i64>, owner: Option<String>, epoch: Option<i64>) -> String {
    (|| {
        let token = Token::new(id, owner, epoch)?;
        let scope = grants::scope(Capability::Claim)?;
        Ok(match standing(&token, &scope)?.status {
            None => "current",
            Some(LeaseStatus::Released | LeaseStatus::RolledBack) => "superseded",
            Some(status) => status.as_str(),
        }
        .to_string())
    })()
    .or_report()
}

/// How the item's row stands towards a token, and its queue.
struct Standing {
    /// `None` when the token is current, else why it is not honoured.
    status: Option<LeaseStatus>,
    /// The item's queue; `None` when no item has the token's id.
    queue: Option<String>,
}

/// Read how the item's row stands towards `token`, with a fresh snapshot:
/// status `None` when the token is current (the item claimed under exactly
/// this owner and epoch, lapsed or not), else why it is not honoured. An
/// item whose queue is outside the role's claim `scope` stands as a missing
/// one.
fn standing(token: &Token, scope: &Scope) -> Result<Standing> {
    let row = Spi::connect_mut(|client| {
        plans::run(client, &TOKEN_STATE, ItemParams { id: token.id }, |rows| {
            let rows = rows.first();
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(Some(RowState {
                state: rows.get::<String>(1)?.unwrap_or_default(),
                owner: rows.get::<String>(2)?,
                epoch: rows.get::<i64>(3)?,
                xmax: rows.get::<i64>(4)?.unwrap_or(0),
                queue: rows.get::<String>(5)?,
            }))
        })
    })?;
    let Some(row) = row.filter(|row| row.queue.as_deref().is_none_or(|q| scope.allows(q))) else {
        return Ok(Standing {
            status: Some(LeaseStatus::Missing),
            queue: None,
        });
    };
    let status = status_of(token, &row);
    Ok(Standing {
        status,
        queue: row.queue,
    })
}

/// Why `token` is not honoured by the item's row as read (`None`: current).
fn status_of(token: &Token, row: &RowState) -> Option<LeaseStatus> {
    if row.epoch != Some(token.epoch) {
        // An epoch above the row's (or a row never claimed) was never the
        // row's committed epoch: a claim not committed yet, or one that
        // rolled back (or another item's epoch).
        if row.epoch.is_none_or(|epoch| token.epoch > epoch) {
            return Some(if changed_by_a_running_transaction(row.xmax) {
                LeaseStatus::Uncommitted
            } else {
                LeaseStatus::RolledBack
            });
        }
        return Some(LeaseStatus::Superseded);
    }
    if row.owner.as_deref() != Some(token.owner.as_str()) {
        return Some(LeaseStatus::WrongOwner);
    }
    match row.state.as_str() {
        "claimed" => None,
        "done" | "failed" => Some(LeaseStatus::Finished),
        "cancelled" => Some(LeaseStatus::Cancelled),
        // pending: the lease was handed back (a release, a retryable
        // failure, or an operator's work_retry).
        _ => Some(LeaseStatus::Released),
    }
}

/// The row version of an item that [`TOKEN_STATE`] read.
struct RowState {
    /// `state` as text.
    state: String,
    /// `owner`.
    owner: Option<String>,
    /// `epoch`.
    epoch: Option<i64>,
    /// The version's `xmax` (0 if none): who deletes, updates or locks it.
    xmax: i64,
    /// `queue`.
    queue: Option<String>,
}

/// Whether `xmax` (a row version's, as read by SQL) names a transaction
/// that is still running and is not this one: that transaction is updating
/// or locking the row.
fn changed_by_a_running_transaction(xmax: i64) -> bool {
    if xmax == 0 {
        return false;
    }
    // xmax is a 32-bit xid; SQL shows it unsigned.
    let xid = pg_sys::TransactionId::from(xmax as u32);
    // SAFETY: look-ups of the transaction status in the proc array and of
    // this backend's own transaction stack; both take the locks they need.
    unsafe {
        !pg_sys::TransactionIdIsCurrentTransactionId(xid) && pg_sys::TransactionIdIsInProgress(xid)
    }
}
