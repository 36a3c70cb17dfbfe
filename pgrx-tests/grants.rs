//! In-server tests of queue grants (0.7.0): `work_grant`, `work_revoke`,
//! `work_enforce_grants`, `work_may`, and what the session's role reaches
//! once they are enforced, inside one transaction with `SET LOCAL ROLE`.
//!
//! The suites run in parallel in one database and roles are cluster-wide,
//! so each test makes roles of its own name (rolled back with it). The
//! matrix of every role × function × queue, group membership across
//! sessions, a revoke seen by another session, the long poll and dump and
//! restore are tested from client connections in
//! `harness/tests/client/queue_grants.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{claim, enqueue, error_of};

    /// A role `name` with `EXECUTE` on every function (so that only the
    /// queue grants decide what it reaches).
    fn role(name: &str) {
        Spi::run(&format!(
            "CREATE ROLE {name};
             GRANT USAGE ON SCHEMA workfence TO {name};
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO {name};"
        ))
        .unwrap();
    }

    fn change(function: &str, capability: &str, queues: &str, role: &str) -> bool {
        Spi::get_one_with_args::<bool>(
            &format!("SELECT workfence.{function}($1, $2, $3)"),
            &[capability.into(), queues.into(), role.into()],
        )
        .unwrap()
        .expect("never NULL")
    }

    fn enforce(enforced: bool) -> bool {
        Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_enforce_grants($1)",
            &[enforced.into()],
        )
        .unwrap()
        .expect("never NULL")
    }

    fn may(capability: &str, queue: &str) -> bool {
        Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_may($1, $2)",
            &[capability.into(), queue.into()],
        )
        .unwrap()
        .expect("never NULL")
    }

    #[pg_test]
    fn a_grant_is_new_once_and_a_revoke_takes_it_back_once() {
        role("wfg_once");
        assert!(change("work_grant", "claim", "billing.*", "wfg_once"));
        assert!(!change("work_grant", "claim", "billing.*", "wfg_once"));
        // Another pattern, another grant.
        assert!(change("work_grant", "claim", "billing", "wfg_once"));
        assert!(change("work_revoke", "claim", "billing.*", "wfg_once"));
        assert!(!change("work_revoke", "claim", "billing.*", "wfg_once"));
        assert!(enforce(true));
        assert!(!enforce(true));
        assert!(enforce(false));
        assert!(!enforce(false));
    }

    #[pg_test]
    fn a_role_reaches_only_its_queues_once_grants_are_enforced() {
        role("wfg_billing");
        assert!(change("work_grant", "claim", "billing.*", "wfg_billing"));
        enqueue("hr", "k");
        Spi::run("SET LOCAL ROLE wfg_billing").unwrap();
        // Not enforced: every queue.
        assert!(may("claim", "hr"));
        assert_eq!(
            error_of(
                "SELECT count(*) FROM workfence.work_claim('hr', 'w', '1 minute')",
                0,
                0
            ),
            "00000"
        );
        Spi::run("RESET ROLE").unwrap();
        assert!(enforce(true));
        Spi::run("SET LOCAL ROLE wfg_billing").unwrap();
        assert!(may("claim", "billing.invoices"));
        assert!(!may("claim", "hr"));
        assert!(!may("enqueue", "billing.invoices"));
        assert_eq!(
            error_of(
                "SELECT count(*) FROM workfence.work_claim('hr', 'w', '1 minute')",
                0,
                0
            ),
            "42501: permission denied for queue \"hr\""
        );
        Spi::run("RESET ROLE").unwrap();
        // A superuser reaches every queue.
        assert!(may("purge", "hr"));
    }

    #[pg_test]
    fn a_token_of_a_queue_the_role_may_not_claim_is_answered_as_missing() {
        role("wfg_token");
        assert!(change("work_grant", "claim", "billing.*", "wfg_token"));
        assert!(enforce(true));
        enqueue("hr", "k");
        let (id, epoch) = claim("hr", "w", "1 minute").expect("claimable");
        let status = |id: i64| {
            Spi::get_one_with_args::<String>(
                "SELECT workfence.work_lease_status($1, 'w', $2)",
                &[id.into(), epoch.into()],
            )
            .unwrap()
            .expect("never NULL")
        };
        Spi::run("SET LOCAL ROLE wfg_token").unwrap();
        assert_eq!(status(id), "missing");
        let finished = Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_finish($1, 'w', $2)",
            &[id.into(), epoch.into()],
        )
        .unwrap();
        assert_eq!(finished, Some(false));
        Spi::run("RESET ROLE").unwrap();
        assert_eq!(status(id), "current", "the refused finish changed nothing");
    }

    #[pg_test(error = "argument \"role\": role \"wfg_nobody_at_all\" does not exist")]
    fn a_grant_to_a_role_that_does_not_exist_is_refused() {
        change("work_grant", "claim", "billing.*", "wfg_nobody_at_all");
    }

    #[pg_test(
        error = "argument \"capability\" must be one of enqueue, claim, operate, read, purge"
    )]
    fn an_unknown_capability_is_refused() {
        may("admin", "billing");
    }
}
