//! In-server tests of what a new user tripped over (issue 11): the catalog
//! comments, a claim rolled back, the long poll's queue key, and the
//! transaction block the suites run in. The autocommit `work_assert`, the
//! uncommitted claim seen from another connection and the waiters in
//! `pg_locks` need real connections: `harness/tests/client/first_use.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{enqueue, error_of, one};

    /// Each `#[pg_test]` runs inside the harness's `BEGIN` (pgrx-tests wraps
    /// the call in a client transaction it rolls back), so `work_assert`
    /// here meets the transaction-block path, the one workers use. Were that
    /// ever to change, every in-server `work_assert` test would be testing
    /// the 25P01 refusal instead: this test says so first.
    #[pg_test]
    fn the_suites_run_inside_a_transaction_block() {
        // SAFETY: reads this backend's transaction state.
        assert!(unsafe { pg_sys::IsTransactionBlock() });
    }

    /// The catalog says what the README and the contract say: an expired
    /// lease is claimed anew directly (claimed -> claimed, a new epoch), and
    /// every claim counts as an attempt, a lapsed lease too, a release
    /// giving its attempt back.
    #[pg_test]
    fn catalog_comments_tell_the_life_cycle_as_it_is() {
        let state: String = Spi::get_one(
            "SELECT pg_catalog.obj_description('workfence.item_state'::pg_catalog.regtype, 'pg_type')",
        )
        .unwrap()
        .unwrap();
        assert!(
            state.contains("claimed -> claimed, with a new epoch"),
            "{state}"
        );
        assert!(
            !state.contains("or when an expired lease is claimed anew"),
            "{state}"
        );
        let attempts: String = Spi::get_one(
            "SELECT pg_catalog.col_description('workfence.items'::pg_catalog.regclass, a.attnum)
               FROM pg_catalog.pg_attribute AS a
              WHERE a.attrelid = 'workfence.items'::pg_catalog.regclass
                AND a.attname = 'max_attempts'",
        )
        .unwrap()
        .unwrap();
        assert!(!attempts.contains("failed attempts"), "{attempts}");
        assert!(
            attempts.contains("every claim counts as one (a lapsed lease too)")
                && attempts.contains("a release gives its attempt back"),
            "{attempts}"
        );
        let status: String = Spi::get_one(
            "SELECT pg_catalog.obj_description(
                 'workfence.work_lease_status(bigint, text, bigint)'::pg_catalog.regprocedure,
                 'pg_proc')",
        )
        .unwrap()
        .unwrap();
        assert!(
            status.contains("current, uncommitted, superseded"),
            "{status}"
        );
    }

    /// A claim whose (sub)transaction rolled back handed out an epoch the
    /// item never carries: `superseded` (it never will), and `work_assert`'s
    /// DETAIL says the claim rolled back.
    #[pg_test]
    fn a_rolled_back_claim_leaves_a_superseded_epoch() {
        let id = enqueue("q", "k");
        // The claim runs in an exception block's subtransaction, which the
        // RAISE rolls back; the epoch leaves in the error's message.
        Spi::run(
            "CREATE FUNCTION pg_temp.claim_rolled_back() RETURNS bigint LANGUAGE plpgsql AS $$
             DECLARE e bigint;
             BEGIN
                 SELECT c.epoch INTO e FROM workfence.work_claim('q', 'w', '1 minute') AS c;
                 RAISE EXCEPTION '%', e;
             EXCEPTION WHEN raise_exception THEN
                 RETURN SQLERRM::bigint;
             END $$",
        )
        .unwrap();
        let epoch = one::<i64>("SELECT pg_temp.claim_rolled_back()", &[]).unwrap();
        assert_eq!(
            one::<String>(
                "SELECT workfence.work_lease_status($1, 'w', $2)",
                &[id, epoch]
            )
            .unwrap(),
            "superseded"
        );
        let err = error_of("SELECT workfence.work_assert($1, 'w', $2)", id, epoch);
        assert!(err.starts_with("55000: lease lost"), "{err}");
        assert!(err.ends_with("(rolled_back)"), "{err}");
        // Claimed for real, the item gets a newer epoch.
        let newer = one::<i64>(
            "SELECT epoch FROM workfence.work_claim('q', 'w', '1 minute')",
            &[],
        )
        .unwrap();
        assert!(newer > epoch);
    }

    /// The long poll's queue key is SQL's `hashtext(queue)`, so an operator
    /// can compute it (docs: the `pg_locks` query in `src/backend/wait.rs`).
    #[pg_test]
    fn queue_key_is_sql_hashtext() {
        let long = "x".repeat(128);
        for queue in [
            "mail",
            "Mail",
            "q",
            "",
            "é",
            "日本語のキュー",
            "crab 🦀 queue",
            "with space",
            long.as_str(),
        ] {
            let sql: i32 =
                Spi::get_one_with_args("SELECT pg_catalog.hashtext($1)", &[queue.into()])
                    .unwrap()
                    .unwrap();
            assert_eq!(crate::pg::keys::queue_key(queue), sql, "queue {queue:?}");
        }
    }
}
