//! In-server tests of the catalog as a user meets it: privileges and
//! documentation of every object, and no silent NULL for a NULL argument.
//!
//! Each test is one transaction (rolled back by the harness); the passage of
//! time is simulated by moving `lease_until` into the past (see `mod.rs`).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    // Every function x every bad argument (the documented SQLSTATE, a
    // message naming the argument, nothing changed) is one generated table,
    // run from a client connection: harness/tests/client/bad_input.rs.

    #[pg_test]
    fn tables_are_not_writable_by_public_and_everything_is_documented() {
        Spi::run("CREATE ROLE workfence_nobody").unwrap();
        for privilege in ["INSERT", "UPDATE", "DELETE", "SELECT", "TRUNCATE"] {
            let allowed = Spi::get_one_with_args::<bool>(
                "SELECT has_table_privilege('workfence_nobody', 'workfence.items', $1)",
                &[privilege.into()],
            )
            .unwrap();
            assert_eq!(allowed, Some(false), "{privilege} on items");
        }
        let usage = Spi::get_one::<bool>(
            "SELECT has_sequence_privilege('workfence_nobody', 'workfence.epoch_seq', 'USAGE')",
        )
        .unwrap();
        assert_eq!(usage, Some(false));
        let undocumented = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'workfence' AND obj_description(p.oid, 'pg_proc') IS NULL",
        )
        .unwrap();
        assert_eq!(undocumented, Some(0), "every function has a COMMENT");
        let undocumented = Spi::get_one::<String>(
            "SELECT coalesce(string_agg(c.relname, ', '), '') FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'workfence' AND c.relkind IN ('r', 'v', 'S', 'i')
                AND obj_description(c.oid, 'pg_class') IS NULL",
        )
        .unwrap();
        assert_eq!(
            undocumented.as_deref(),
            Some(""),
            "every table, view, index and sequence has a COMMENT"
        );
        let dumped = Spi::get_one::<String>(
            "SELECT string_agg(c::regclass::text, ', ' ORDER BY c::regclass::text)
               FROM pg_extension e, unnest(e.extconfig) AS c WHERE e.extname = 'pg_workfence'",
        )
        .unwrap();
        assert_eq!(
            dumped.as_deref(),
            Some(
                "workfence.epoch_seq, workfence.generation, workfence.item_edges, \
                 workfence.items, workfence.items_id_seq, workfence.queue_grant_mode, \
                 workfence.queue_grants, workfence.queue_slots, workfence.queues, \
                 workfence.schedules"
            ),
            "the tables and sequences pg_dump must keep the rows and positions of"
        );
    }

    #[pg_test]
    fn a_null_argument_never_returns_a_silent_null() {
        // pgrx makes functions with only non-Option arguments STRICT; these must not be.
        // (One without arguments, work_fire_schedules, is STRICT and cannot be given a NULL.)
        let strict = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'workfence' AND p.proisstrict AND p.pronargs > 0",
        )
        .unwrap();
        assert_eq!(strict, Some(0));
    }
}
