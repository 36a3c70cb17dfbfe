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
