//! In-server checks of what the install script grants: every function is
//! `SECURITY DEFINER` with a pinned `search_path`, and PUBLIC may use
//! nothing in schema `workfence`. Checked on the catalog, so a function added
//! later without the privilege block of `sql/finalize.sql` fails here.
//!
//! What the roles of `docs/operations.md` can and cannot do, and the
//! `search_path` hijack attempt, are tested from real connections in
//! `harness/tests/client/privileges.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Every function of the extension, for the sanity check that the
    /// catalog queries below looked at something.
    const FUNCTIONS: &[&str] = &[
        "work_enqueue",
        "work_claim",
        "work_claim_key",
        "work_renew",
        "work_finish",
        "work_finish_many",
        "work_release",
        "work_fail",
        "work_assert",
        "work_cancel",
        "work_purge",
        "work_lease_status",
    ];

    /// The names (comma-separated, sorted; empty when none) that `sql` returns
    /// in its single text column.
    fn names(sql: &str) -> String {
        Spi::get_one::<String>(&format!(
            "SELECT coalesce(string_agg(name, ', ' ORDER BY name), '') FROM ({sql}) AS t(name)"
        ))
        .expect("catalog query failed")
        .expect("string_agg over coalesce is never NULL")
    }

    #[pg_test]
    fn every_function_is_security_definer_with_a_pinned_search_path() {
        let in_schema = names(
            "SELECT p.proname::text FROM pg_proc p
              WHERE p.pronamespace = 'workfence'::regnamespace",
        );
        for function in FUNCTIONS {
            assert!(
                in_schema.split(", ").any(|name| name == *function),
                "{function} is not in schema workfence: {in_schema}"
            );
        }
        let unsafe_functions = names(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = 'workfence'::regnamespace
                AND (NOT p.prosecdef
                     OR p.proconfig IS DISTINCT FROM ARRAY['search_path=pg_catalog, pg_temp'])",
        );
        assert_eq!(
            unsafe_functions, "",
            "not SECURITY DEFINER with SET search_path = pg_catalog, pg_temp"
        );
    }

    #[pg_test]
    fn public_may_use_nothing_in_the_schema() {
        // A NULL ACL means the default one, which for functions includes
        // EXECUTE for PUBLIC (grantee 0): acldefault() spells it out.
        let executable = names(
            "SELECT p.oid::regprocedure::text FROM pg_proc p,
                    aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
              WHERE p.pronamespace = 'workfence'::regnamespace AND a.grantee = 0",
        );
        // The one exception (sql/finalize.sql): work_may answers only what
        // the caller itself may do, and work_queue_stats calls it.
        assert_eq!(
            executable, "workfence.work_may(text,text)",
            "functions PUBLIC may execute"
        );
        let relations = names(
            "SELECT c.relname || ' ' || a.privilege_type FROM pg_class c,
                    aclexplode(coalesce(c.relacl, acldefault(
                        CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::\"char\",
                        c.relowner))) AS a
              WHERE c.relnamespace = 'workfence'::regnamespace
                AND c.relkind IN ('r', 'v', 'm', 'S', 'p', 'f') AND a.grantee = 0",
        );
        assert_eq!(relations, "", "tables, views and sequences PUBLIC may use");
        let schema = names(
            "SELECT a.privilege_type FROM pg_namespace n,
                    aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) AS a
              WHERE n.nspname = 'workfence' AND a.grantee = 0",
        );
        assert_eq!(schema, "", "privileges of PUBLIC on schema workfence");
        // The same through the privilege functions, for a role with no grant.
        Spi::run("CREATE ROLE workfence_no_grant").unwrap();
        let callable = names(
            "SELECT p.proname::text FROM pg_proc p
              WHERE p.pronamespace = 'workfence'::regnamespace
                AND has_function_privilege('workfence_no_grant', p.oid, 'EXECUTE')",
        );
        assert_eq!(
            callable, "work_may",
            "functions a role with no grant may execute"
        );
        let usage = Spi::get_one::<bool>(
            "SELECT has_schema_privilege('workfence_no_grant', 'workfence', 'USAGE')",
        )
        .unwrap();
        assert_eq!(usage, Some(false));
    }

    #[pg_test]
    fn a_role_with_execute_needs_no_table_privilege() {
        // The role may run work_enqueue and work_claim but has no privilege
        // on workfence.items or the sequences: the functions run as their
        // owner.
        Spi::run(
            "CREATE ROLE workfence_only_execute;
             GRANT USAGE ON SCHEMA workfence TO workfence_only_execute;
             GRANT EXECUTE ON FUNCTION workfence.work_enqueue, workfence.work_claim
                TO workfence_only_execute;
             SET LOCAL ROLE workfence_only_execute;",
        )
        .unwrap();
        let inserted = Spi::get_one::<bool>(
            "SELECT inserted FROM workfence.work_enqueue('privileges', '{}', 'k')",
        )
        .unwrap();
        assert_eq!(inserted, Some(true));
        let key = Spi::get_one::<String>(
            "SELECT key FROM workfence.work_claim('privileges', 'w', '1 minute')",
        )
        .unwrap();
        assert_eq!(key.as_deref(), Some("k"));
        let items = Spi::get_one::<bool>(
            "SELECT has_table_privilege('workfence_only_execute', 'workfence.items', 'SELECT')",
        )
        .unwrap();
        assert_eq!(items, Some(false));
        Spi::run("RESET ROLE").unwrap();
    }
}
