//! Helpers shared by the in-server suites (plain functions, not tests).

use pgrx::prelude::*;

/// A scalar query with bigint parameters.
pub(super) fn one<T: pgrx::IntoDatum + pgrx::FromDatum>(sql: &str, args: &[i64]) -> Option<T> {
    let args: Vec<pgrx::datum::DatumWithOid> = args.iter().map(|a| (*a).into()).collect();
    Spi::get_one_with_args::<T>(sql, &args).expect("query failed")
}

/// Run a statement with bigint parameters; it must succeed.
pub(super) fn run(sql: &str, args: &[i64]) {
    let args: Vec<pgrx::datum::DatumWithOid> = args.iter().map(|a| (*a).into()).collect();
    Spi::run_with_args(sql, &args).expect("statement failed");
}

/// Two columns of item `id`: `columns` is their SELECT list over
/// `workfence.items`, e.g. `"state::text, epoch"`.
pub(super) fn item_two<A, B>(columns: &str, id: i64) -> (Option<A>, Option<B>)
where
    A: pgrx::IntoDatum + pgrx::FromDatum,
    B: pgrx::IntoDatum + pgrx::FromDatum,
{
    Spi::get_two_with_args(&item_query(columns), &[id.into()]).expect("query failed")
}

/// Three columns of item `id`, as [`item_two`] reads two.
pub(super) fn item_three<A, B, C>(columns: &str, id: i64) -> (Option<A>, Option<B>, Option<C>)
where
    A: pgrx::IntoDatum + pgrx::FromDatum,
    B: pgrx::IntoDatum + pgrx::FromDatum,
    C: pgrx::IntoDatum + pgrx::FromDatum,
{
    Spi::get_three_with_args(&item_query(columns), &[id.into()]).expect("query failed")
}

fn item_query(columns: &str) -> String {
    format!("SELECT {columns} FROM workfence.items WHERE id = $1")
}

/// Enqueue `key` into `queue` (payload `{}`); its id.
pub(super) fn enqueue(queue: &str, key: &str) -> i64 {
    Spi::get_one_with_args::<i64>(
        "SELECT id FROM workfence.work_enqueue($1, '{}', $2)",
        &[queue.into(), key.into()],
    )
    .unwrap()
    .unwrap()
}

/// Make the lease of item `id` lapse, as the clock would.
pub(super) fn lapse(id: i64) {
    run(
        "UPDATE workfence.items SET lease_until = clock_timestamp() - interval '1 second' WHERE id = $1",
        &[id],
    );
}

/// Run `sql` (with bigint parameters $1, $2 bound from `a`, `b`) in a
/// subtransaction; return "SQLSTATE: message", or "00000" on success.
pub(super) fn error_of(sql: &str, a: i64, b: i64) -> String {
    Spi::run(
        "CREATE OR REPLACE FUNCTION pg_temp.error_of(q text, a bigint, b bigint) RETURNS text
         LANGUAGE plpgsql AS $$
         BEGIN
             EXECUTE q USING a, b;
             RETURN '00000';
         EXCEPTION WHEN OTHERS THEN
             RETURN SQLSTATE || ': ' || SQLERRM;
         END $$",
    )
    .unwrap();
    Spi::get_one_with_args::<String>(
        "SELECT pg_temp.error_of($1, $2, $3)",
        &[sql.into(), a.into(), b.into()],
    )
    .unwrap()
    .unwrap()
}

/// The number of rows `sql` returns (a `SELECT count(*) ...`).
pub(super) fn count(sql: &str) -> i64 {
    one::<i64>(sql, &[]).expect("count(*) is never NULL")
}

/// (id, epoch) of the item `work_claim` returns, or None for zero rows.
/// Any other outcome (an error, a NULL column) fails the test.
pub(super) fn claim(queue: &str, owner: &str, lease: &str) -> Option<(i64, i64)> {
    match Spi::get_two_with_args::<i64, i64>(
        "SELECT id, epoch FROM workfence.work_claim($1, $2, $3::interval)",
        &[queue.into(), owner.into(), lease.into()],
    ) {
        Ok((Some(id), Some(epoch))) => Some((id, epoch)),
        Err(pgrx::spi::SpiError::InvalidPosition) => None,
        other => panic!("work_claim returned {other:?}"),
    }
}

pub(super) fn token_call(func: &str, id: i64, owner: &str, epoch: i64) -> bool {
    let sql = match func {
        "renew" => "SELECT workfence.work_renew($1, $2, $3, '30 seconds')",
        "finish" => "SELECT workfence.work_finish($1, $2, $3)",
        "release" => "SELECT workfence.work_release($1, $2, $3)",
        "fail" => "SELECT workfence.work_fail($1, $2, $3, 'boom')",
        other => panic!("no such call {other}"),
    };
    Spi::get_one_with_args::<bool>(sql, &[id.into(), owner.into(), epoch.into()])
        .unwrap()
        .unwrap()
}

/// Everything a call could change: every row, and the last epoch this
/// session drew from the sequence (`currval`). Not the sequence's global
/// position: the suites run in parallel in one database, and other
/// tests' claims move it.
pub(super) fn snapshot() -> String {
    Spi::run(
        "CREATE OR REPLACE FUNCTION pg_temp.session_epoch() RETURNS text
         LANGUAGE plpgsql AS $$
         BEGIN
             RETURN pg_catalog.currval('workfence.epoch_seq')::text;
         EXCEPTION WHEN object_not_in_prerequisite_state THEN
             RETURN 'none drawn';
         END $$",
    )
    .unwrap();
    Spi::get_one::<String>(
        "SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') || ' ' ||
                pg_temp.session_epoch()
           FROM workfence.items t",
    )
    .unwrap()
    .unwrap()
}
