//! Least privilege and `search_path` safety, from real client connections.
//!
//! The setup is `docs/operations.md`, "Least privilege": its two SQL blocks
//! (the group roles, once per cluster; the grants, in each database) are read
//! from the guide and run verbatim, so the guide cannot drift from what is
//! tested. Each test then logs in as a member of `workfence_enqueuer`,
//! `workfence_worker` or `workfence_monitor`, or as a role with no grant at all
//! (what PUBLIC may do), and proves:
//!
//! - every function of schema `workfence` (found in the catalog, so a new one
//!   cannot be missed) is callable by exactly the group the guide names, and
//!   refused with SQLSTATE 42501 to every other role; every table, view and
//!   sequence is out of reach (42501) except the statistics view for the
//!   monitor;
//! - a worker claims, renews, asserts and finishes with its token, gets false
//!   with a stale epoch or another owner, and can neither `UPDATE`, `DELETE`,
//!   `INSERT` nor `SELECT` the items table, nor draw an epoch from the
//!   sequence;
//! - `search_path` hijacking fails: a role creates, in a schema of its own,
//!   functions, aggregates and operators shadowing every `pg_catalog` name the
//!   extension's SQL uses (checked against `src/`), each of which records its
//!   call; with that schema ahead of `pg_catalog` on its `search_path`, an
//!   unqualified query of the session does call every shadow, yet every
//!   function of the extension, called the same way, returns correct results
//!   and calls none, both with the functions' pinned `search_path` and with
//!   it removed (the schema-qualified SQL alone holds);
//! - the bulk enqueue (0.12.0) is the enqueuer's alone, and its statements
//!   follow no hostile `search_path` either;
//! - the grants survive `pg_dump` and a restore, and still work.
//!
//! Needs the extension installed (scripts/test.sh does that first). Runtime:
//! a few seconds after the build.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{connect_as, ok};

use postgres::Client;
use serde_json::json;
use workfence_harness::calls::{self, generated, Claim, Enqueue, RunAt, Token};
use workfence_harness::Cluster;
use workfence_surface::Execute;

/// The application_name of the role connections (pg_stat_activity).
const SESSION_NAME: &str = "pg_workfence privileges test";

/// The operations guide: its SQL blocks are the setup the tests run.
const OPERATIONS_GUIDE: &str = include_str!("../../../docs/operations.md");

/// A member of `workfence_enqueuer`.
const SUBMITTER: &str = "wf_submitter";
/// A member of `workfence_worker`.
const WORKER: &str = "wf_worker";
/// A member of `workfence_monitor`.
const MONITOR: &str = "wf_monitor";
/// A member of `workfence_operator`.
const OPERATOR: &str = "wf_operator";
/// A role granted nothing: it has only what PUBLIC has.
const NOBODY: &str = "wf_nobody";
/// A member of every group (enqueuer, worker, monitor, operator), owner of
/// schema `evil`: the would-be hijacker, who can call every function.
const APP: &str = "wf_app";

/// The login roles, members of the guide's group roles.
const LOGIN_ROLES: &str = "
    CREATE ROLE wf_submitter LOGIN IN ROLE workfence_enqueuer;
    CREATE ROLE wf_worker LOGIN IN ROLE workfence_worker;
    CREATE ROLE wf_monitor LOGIN IN ROLE workfence_monitor;
    CREATE ROLE wf_operator LOGIN IN ROLE workfence_operator;
    CREATE ROLE wf_nobody LOGIN;
    CREATE ROLE wf_app LOGIN IN ROLE workfence_enqueuer, workfence_worker, workfence_monitor,
                                     workfence_operator;";

/// The table of the SQL surface (`sql/functions.toml`), whose `execute`
/// says which group role of the guide gets each function: the guide's
/// `least-privilege-grants` block is generated from it.
fn surface() -> &'static workfence_surface::Surface {
    static SURFACE: std::sync::OnceLock<workfence_surface::Surface> = std::sync::OnceLock::new();
    SURFACE.get_or_init(|| {
        ok(
            workfence_surface::Surface::load(&common::repo_root()),
            "sql/functions.toml",
        )
    })
}

/// What the guide grants a group role (`Owner`: no group; `Public`: the
/// install script's one exception, `work_may`, which tells the caller what
/// the caller itself may do; only a role with `USAGE` on the schema reaches
/// it).
fn granted(execute: Execute) -> Vec<&'static str> {
    surface().granted_to(execute)
}

/// Functions the guide grants to no group: the table's `owner` ones (the
/// queue grants' management is the owner's: a role that could call
/// `work_grant` could grant itself every queue), and `items_sequence_floor`,
/// the items table's trigger, called by no one.
fn owner_only() -> Vec<&'static str> {
    let mut names = granted(Execute::Owner);
    names.push("items_sequence_floor");
    names
}
/// The relations a group may read (`workfence_monitor`): the queues'
/// statistics, (from 0.12.0) their counters and last hour, and the schedules, which
/// `workfence_operator` reads too.
const STATS_VIEW: &str = "workfence.work_queue_stats";
const COUNTERS_VIEW: &str = "workfence.work_queue_counters";
const HISTORY_VIEW: &str = "workfence.work_queue_history";
const SCHEDULES_VIEW: &str = "workfence.work_schedules";

/// The functions whose every argument may be NULL: `queue_history_rows(NULL)`
/// is every queue's history.
const NULL_MEANS_ALL: [&str; 1] = ["queue_history_rows"];

/// The operations guide's SQL block `marker`.
fn operations_sql(marker: &str) -> &'static str {
    common::doc_sql_block(OPERATIONS_GUIDE, "docs/operations.md", marker)
}

/// One cluster for the tests that run at the same time, with the guide's
/// group roles and the login roles (roles are cluster-wide); it stops and is
/// removed when the last test drops its handle.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_with(|cluster| {
        let mut admin = ok(cluster.connect(), "connecting as the superuser");
        ok(
            admin.batch_execute(operations_sql("least-privilege-roles")),
            "the guide's CREATE ROLE block",
        );
        ok(admin.batch_execute(LOGIN_ROLES), "creating the login roles");
    })
}

/// A fresh database with the extension and the guide's grants; the
/// superuser's connection to it.
fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the test database");
    let mut admin = ok(cluster.connect_to(name), "connecting as the superuser");
    ok(
        admin.batch_execute(operations_sql("least-privilege-grants")),
        "the guide's GRANT block",
    );
    admin
}

/// Runs `sql` (one round trip, its own transaction); the SQLSTATE and message
/// it failed with, or None when it succeeded.
fn failure(client: &mut Client, sql: &str) -> Option<(String, String)> {
    match client.batch_execute(sql) {
        Ok(()) => None,
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
            Some((db.code().code().to_owned(), db.message().to_owned()))
        }
    }
}

/// `sql` must fail with 42501 (insufficient_privilege).
fn assert_denied(client: &mut Client, who: &str, sql: &str) {
    match failure(client, sql) {
        Some((code, _)) if code == "42501" => {}
        other => panic!("{who}: {sql}: expected 42501, got {other:?}"),
    }
}

/// The superuser's check that item `id` satisfies `condition` (SQL over the
/// columns of workfence.items, written by the test, not data).
fn holds(admin: &mut Client, id: i64, condition: &str) {
    let row = ok(
        admin.query_one(
            &format!("SELECT ({condition}), i::text FROM workfence.items AS i WHERE i.id = $1"),
            &[&id],
        ),
        condition,
    );
    let (satisfied, item): (Option<bool>, String) = (row.get(0), row.get(1));
    assert_eq!(satisfied, Some(true), "item {item}: {condition}");
}

#[test]
fn every_role_may_use_exactly_what_the_guide_grants() {
    let cluster = cluster();
    let mut admin = database(&cluster, "privileges_matrix");

    // Every function of the schema, called with NULL arguments of its types:
    // a role allowed to run it reaches the function, which refuses a NULL
    // with 22004; any other role is stopped before it with 42501.
    let calls: Vec<(String, String)> = ok(
        admin.query(
            "SELECT p.proname::text,
                    pg_catalog.format('SELECT workfence.%I(%s)', p.proname,
                        coalesce((SELECT pg_catalog.string_agg(
                                             'NULL::' || pg_catalog.format_type(a.t, NULL), ', '
                                             ORDER BY a.n)
                                    FROM pg_catalog.unnest(p.proargtypes::oid[])
                                         WITH ORDINALITY AS a(t, n)), ''))
               FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'workfence'::pg_catalog.regnamespace
              ORDER BY 1",
            &[],
        ),
        "listing the functions",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect();
    let in_schema: BTreeSet<&str> = calls.iter().map(|(name, _)| name.as_str()).collect();
    let documented: BTreeSet<&str> = [
        granted(Execute::Enqueuer),
        granted(Execute::Worker),
        granted(Execute::Monitor),
        granted(Execute::Operator),
        owner_only(),
        granted(Execute::Public),
    ]
    .concat()
    .into_iter()
    .collect();
    assert_eq!(
        in_schema, documented,
        "every function is granted to a group in docs/operations.md, or documented as the owner's"
    );

    // Every table, view and sequence, and what each statement needs.
    let relations: Vec<(String, String, String)> = ok(
        admin.query(
            "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname), c.relkind::text,
                    coalesce((SELECT pg_catalog.format('%I', a.attname) FROM pg_catalog.pg_attribute AS a
                               WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                               ORDER BY a.attnum LIMIT 1), '')
               FROM pg_catalog.pg_class AS c
               JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
              WHERE n.nspname = 'workfence' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
              ORDER BY 1",
            &[],
        ),
        "listing the relations",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    let names: BTreeSet<&str> = relations.iter().map(|(name, _, _)| name.as_str()).collect();
    for expected in [
        "workfence.items",
        "workfence.queues",
        "workfence.epoch_seq",
        "workfence.items_id_seq",
        STATS_VIEW,
        COUNTERS_VIEW,
        HISTORY_VIEW,
        SCHEDULES_VIEW,
    ] {
        assert!(names.contains(expected), "{expected} is not in {names:?}");
    }
    let statements: Vec<(&str, String)> = relations
        .iter()
        .flat_map(|(rel, kind, column)| {
            match kind.as_str() {
                "S" => vec![
                    format!("SELECT pg_catalog.nextval('{rel}')"),
                    format!("SELECT pg_catalog.setval('{rel}', 1)"),
                    format!("SELECT last_value FROM {rel}"),
                ],
                "v" | "m" => vec![format!("SELECT count(*) FROM {rel}")],
                _ => vec![
                    format!("SELECT count(*) FROM {rel}"),
                    format!("INSERT INTO {rel} DEFAULT VALUES"),
                    format!("UPDATE {rel} SET {column} = {column}"),
                    format!("DELETE FROM {rel}"),
                    format!("TRUNCATE {rel}"),
                ],
            }
            .into_iter()
            .map(move |sql| (rel.as_str(), sql))
        })
        .collect();

    let public_functions = granted(Execute::Public);
    for (role, allowed) in [
        (SUBMITTER, granted(Execute::Enqueuer)),
        (WORKER, granted(Execute::Worker)),
        (MONITOR, granted(Execute::Monitor)),
        (OPERATOR, granted(Execute::Operator)),
        (NOBODY, Vec::new()),
    ] {
        let mut client = connect_as(&cluster, "privileges_matrix", role, SESSION_NAME);
        for (name, call) in &calls {
            let got = failure(&mut client, call);
            let public = public_functions.contains(&name.as_str()) && role != NOBODY;
            if allowed.contains(&name.as_str()) || public {
                let code = got.map(|(code, _)| code);
                // A function without arguments has no NULL to refuse: it
                // runs; so does one whose NULL argument means "every queue".
                let expected = (!call.ends_with("()") && !NULL_MEANS_ALL.contains(&name.as_str()))
                    .then_some("22004");
                assert_eq!(code.as_deref(), expected, "{role}: {call}");
            } else {
                let (code, message) = got.unwrap_or_else(|| panic!("{role} may run {call}"));
                assert_eq!(code, "42501", "{role}: {call}: {message}");
                // USAGE on the schema alone does not let a role call anything;
                // PUBLIC does not even have that.
                let object = if role == NOBODY {
                    "schema workfence"
                } else {
                    "function"
                };
                assert!(
                    message.starts_with(&format!("permission denied for {object}")),
                    "{role}: {call}: {message}"
                );
            }
        }
        for (rel, sql) in &statements {
            let readable = sql.starts_with("SELECT")
                && ((role == MONITOR
                    && [STATS_VIEW, COUNTERS_VIEW, HISTORY_VIEW, SCHEDULES_VIEW].contains(rel))
                    || (role == OPERATOR && *rel == SCHEDULES_VIEW));
            if readable {
                assert_eq!(failure(&mut client, sql), None, "{role}: {sql}");
            } else {
                assert_denied(&mut client, role, sql);
            }
        }
    }
}

#[test]
fn a_worker_changes_an_item_only_through_its_token() {
    let cluster = cluster();
    let db = "privileges_worker";
    let mut admin = database(&cluster, db);
    let mut submitter = connect_as(&cluster, db, SUBMITTER, SESSION_NAME);
    let mut worker = connect_as(&cluster, db, WORKER, SESSION_NAME);
    let mut monitor = connect_as(&cluster, db, MONITOR, SESSION_NAME);

    // The submitter submits; it may not claim.
    let enqueued = ok(
        calls::enqueue(
            &mut submitter,
            &Enqueue::new("mail")
                .key("welcome")
                .payload(json!({"to": "ada"})),
        ),
        "enqueue",
    );
    let (id, inserted) = (enqueued.id, enqueued.inserted);
    assert!(inserted);
    assert_denied(
        &mut submitter,
        SUBMITTER,
        "SELECT * FROM workfence.work_claim('mail', 'sneaky', '1 minute')",
    );

    // The worker claims and renews with its token.
    let claim = common::claimed_one(&mut worker, "mail", "mailer", "1 minute");
    let (claimed, epoch) = (claim.id, claim.epoch);
    assert_eq!(claimed, id);
    let sent = json!({"sent": true});
    let finish = |client: &mut Client, owner: &str, epoch: i64| -> bool {
        ok(
            calls::finish(client, &Token::new(id, owner, epoch), Some(&sent)),
            "finish",
        )
    };
    let token = claim.token("mailer");
    assert!(ok(calls::renew(&mut worker, &token, "1 minute"), "renew"));

    // Without the current token nothing is finished...
    assert!(!finish(&mut worker, "mailer", epoch - 1));
    assert!(!finish(&mut worker, "mailer", epoch + 1));
    assert!(!finish(&mut worker, "other", epoch));
    // ... and there is no way around the functions.
    for sql in [
        format!("UPDATE workfence.items SET state = 'done' WHERE id = {id}"),
        format!("UPDATE workfence.items SET epoch = epoch + 1, owner = 'mailer' WHERE id = {id}"),
        format!("DELETE FROM workfence.items WHERE id = {id}"),
        "INSERT INTO workfence.items (queue, key, payload, run_at, max_attempts) \
         VALUES ('mail', 'forged', '{}', now(), 1)"
            .to_owned(),
        "SELECT payload FROM workfence.items".to_owned(),
        "SELECT nextval('workfence.epoch_seq')".to_owned(),
        "SELECT * FROM workfence.work_enqueue('mail')".to_owned(),
        "SELECT workfence.work_cancel('mail', 'welcome')".to_owned(),
        "SELECT workfence.work_purge('0')".to_owned(),
        format!("SELECT * FROM {STATS_VIEW}"),
        format!("SELECT * FROM {COUNTERS_VIEW}"),
        format!("SELECT * FROM {HISTORY_VIEW}"),
    ] {
        assert_denied(&mut worker, WORKER, &sql);
    }
    holds(
        &mut admin,
        id,
        &format!("state = 'claimed' AND owner = 'mailer' AND epoch = {epoch} AND result IS NULL"),
    );

    // With its token, under work_assert, the worker finishes the item.
    let mut tx = ok(worker.transaction(), "BEGIN");
    ok(calls::assert(&mut tx, &token), "assert");
    let finished = ok(calls::finish(&mut tx, &token, Some(&sent)), "finish");
    assert!(finished);
    ok(tx.commit(), "COMMIT");
    let status = ok(calls::lease_status(&mut worker, &token), "lease status");
    assert_eq!(status, "finished");
    holds(
        &mut admin,
        id,
        &format!("state = 'done' AND epoch = {epoch} AND result = '{{\"sent\": true}}'"),
    );

    // The submitter withdraws another item; the monitor reads the figures,
    // and nothing else.
    common::enqueue_new(&mut submitter, &Enqueue::new("mail").key("later"));
    let cancelled = ok(calls::cancel(&mut submitter, "mail", "later"), "cancel");
    assert!(cancelled);
    let stats = ok(calls::queue_stats(&mut monitor), "stats");
    let mail = stats
        .iter()
        .find(|queue| queue.queue == "mail")
        .expect("a row for mail");
    let figures = (mail.pending, mail.claimed, mail.done, mail.cancelled);
    assert_eq!(figures, (0, 0, 1, 1));
    for sql in [
        "SELECT * FROM workfence.work_claim('mail', 'monitor', '1 minute')",
        "SELECT count(*) FROM workfence.items",
        "SELECT workfence.work_lease_status(1, 'mailer', 1)",
    ] {
        assert_denied(&mut monitor, MONITOR, sql);
    }
}

/// The bulk enqueue (0.12.0) under the guide's group roles: it is the
/// enqueuer's, as `work_enqueue` is. The submitter adds two items in one
/// call, which the worker then claims in their order; the worker, the
/// monitor, the operator and a role granted nothing are refused the same
/// call (42501), and it adds nothing.
#[test]
fn only_the_enqueuer_enqueues_many() {
    let cluster = cluster();
    let db = "privileges_bulk";
    let mut admin = database(&cluster, db);
    let enqueue_many = |client: &mut Client| {
        generated::work_enqueue_many(
            client,
            "mail",
            &[json!({"to": "ada"}), json!({"to": "bob"})],
            Some(&[Some("ada"), Some("bob")]),
            None,
            None,
            None,
            None,
            None,
        )
    };
    for who in [WORKER, MONITOR, OPERATOR, NOBODY] {
        let mut client = connect_as(&cluster, db, who, SESSION_NAME);
        let err = enqueue_many(&mut client).expect_err("only the enqueuer may enqueue many");
        let db_err = err.as_db_error().expect("a server error");
        assert_eq!(db_err.code().code(), "42501", "{who}: {}", db_err.message());
    }
    let items: i64 = common::scalar(&mut admin, "SELECT count(*) FROM workfence.items", &[]);
    assert_eq!(items, 0, "a refused bulk enqueue added items");

    let mut submitter = connect_as(&cluster, db, SUBMITTER, SESSION_NAME);
    let rows = ok(
        enqueue_many(&mut submitter),
        "work_enqueue_many as the submitter",
    );
    let added: Vec<(Option<&str>, Option<bool>)> = rows
        .iter()
        .map(|r| (r.key.as_deref(), r.inserted))
        .collect();
    assert_eq!(
        added,
        [(Some("ada"), Some(true)), (Some("bob"), Some(true))]
    );
    let mut worker = connect_as(&cluster, db, WORKER, SESSION_NAME);
    let claimed = ok(
        calls::claim(&mut worker, "mail", "mailer", "1 minute", Some(10), None),
        "claim",
    );
    let claimed: Vec<(i64, &str, &serde_json::Value)> = claimed
        .iter()
        .map(|c| (c.id, c.key.as_str(), &c.payload))
        .collect();
    assert_eq!(
        claimed,
        [
            (rows[0].id.expect("id"), "ada", &json!({"to": "ada"})),
            (rows[1].id.expect("id"), "bob", &json!({"to": "bob"})),
        ]
    );
}

/// Workflows (0.12.0) under the guide's group roles: the submitter
/// enqueues a step after another (`after`), the worker runs the parent,
/// which releases the child, and reads the parent's result from the
/// child's claim (`work_parent_results`, the worker's); the monitor draws
/// the graph (`work_workflow`, the monitor's). Neither function is anyone
/// else's, and the edges' table is no one's to read or write.
#[test]
fn a_workflow_runs_under_the_guides_group_roles() {
    let cluster = cluster();
    let db = "privileges_workflow";
    let mut admin = database(&cluster, db);
    let mut submitter = connect_as(&cluster, db, SUBMITTER, SESSION_NAME);
    let mut worker = connect_as(&cluster, db, WORKER, SESSION_NAME);
    let mut monitor = connect_as(&cluster, db, MONITOR, SESSION_NAME);
    let mut operator = connect_as(&cluster, db, OPERATOR, SESSION_NAME);

    let parent = common::enqueue_new(&mut submitter, &Enqueue::new("etl").key("extract"));
    let child = common::enqueue_new(
        &mut submitter,
        &Enqueue::new("etl").key("load").after(&[parent]),
    );
    holds(&mut admin, child, "state = 'waiting' AND waiting_on = 1");

    // The worker runs the parent; its finish releases the child.
    let claim = common::claimed_one(&mut worker, "etl", "etl-worker", "1 minute");
    assert_eq!(claim.id, parent, "a waiting item is not claimed");
    let rows = json!({"rows": 42});
    assert!(ok(
        calls::finish(&mut worker, &claim.token("etl-worker"), Some(&rows)),
        "finish the parent"
    ));
    let claim = common::claimed_one(&mut worker, "etl", "etl-worker", "1 minute");
    assert_eq!(claim.id, child);
    let results = ok(
        generated::work_parent_results(&mut worker, child, "etl-worker", claim.epoch),
        "work_parent_results as the worker",
    );
    assert_eq!(results, json!({ parent.to_string(): {"rows": 42} }));

    // The monitor draws the graph.
    let graph: Vec<(i64, i32)> = ok(
        generated::work_workflow(&mut monitor, parent),
        "work_workflow as the monitor",
    )
    .into_iter()
    .map(|row| (row.id.expect("id"), row.depth.expect("depth")))
    .collect();
    assert_eq!(graph, [(parent, 0), (child, 1)]);

    // Each function is its group's alone; the edges are no one's.
    let parent_results = format!(
        "SELECT workfence.work_parent_results({child}, 'etl-worker', {})",
        claim.epoch
    );
    let workflow = format!("SELECT * FROM workfence.work_workflow({parent})");
    for (who, client) in [
        (SUBMITTER, &mut submitter),
        (MONITOR, &mut monitor),
        (OPERATOR, &mut operator),
    ] {
        assert_denied(client, who, &parent_results);
    }
    for (who, client) in [
        (SUBMITTER, &mut submitter),
        (WORKER, &mut worker),
        (OPERATOR, &mut operator),
    ] {
        assert_denied(client, who, &workflow);
    }
    for (who, client) in [
        (SUBMITTER, &mut submitter),
        (WORKER, &mut worker),
        (MONITOR, &mut monitor),
        (OPERATOR, &mut operator),
    ] {
        for sql in [
            "SELECT count(*) FROM workfence.item_edges".to_owned(),
            format!("INSERT INTO workfence.item_edges (parent, child) VALUES ({child}, {parent})"),
            "UPDATE workfence.item_edges SET resolved = false".to_owned(),
            "DELETE FROM workfence.item_edges".to_owned(),
        ] {
            assert_denied(client, who, &sql);
        }
    }
    // The operator (work_retry) and the submitter (work_cancel) act on a
    // workflow's items: a cancelled parent cancels its waiting child, its
    // retry brings the child back.
    let first = common::enqueue_new(&mut submitter, &Enqueue::new("etl").key("first"));
    common::enqueue_new(
        &mut submitter,
        &Enqueue::new("etl").key("second").after(&[first]),
    );
    assert!(ok(calls::cancel(&mut submitter, "etl", "first"), "cancel"));
    let state = |admin: &mut Client| -> String {
        common::scalar(
            admin,
            "SELECT state::text FROM workfence.items WHERE key = 'second'",
            &[],
        )
    };
    assert_eq!(state(&mut admin), "cancelled");
    assert!(ok(
        calls::retry(&mut operator, "etl", "first", None),
        "retry"
    ));
    assert_eq!(state(&mut admin), "waiting");
}

/// A function or aggregate of schema `evil` shadowing a `pg_catalog` one.
struct Shadow {
    /// The `pg_catalog` name it shadows (what the extension's SQL calls).
    function: &'static str,
    /// What it records in `evil.calls` when called.
    logged: &'static str,
    /// An unqualified query that calls it when `evil` is ahead on the path.
    probe: &'static str,
}

/// The shadows of [`EVIL_SCHEMA`], besides its generated operators.
const SHADOWS: &[Shadow] = &[
    Shadow {
        function: "clock_timestamp",
        logged: "clock_timestamp()",
        probe: "SELECT clock_timestamp()",
    },
    Shadow {
        function: "now",
        logged: "now()",
        probe: "SELECT now()",
    },
    Shadow {
        function: "random",
        logged: "random()",
        probe: "SELECT random()",
    },
    Shadow {
        function: "power",
        logged: "power(double precision, double precision)",
        probe: "SELECT power(2::float8, 3::float8)",
    },
    Shadow {
        function: "make_interval",
        logged: "make_interval(...)",
        probe: "SELECT make_interval(secs => 1)",
    },
    Shadow {
        function: "nextval",
        logged: "nextval(regclass)",
        probe: "SELECT nextval('evil.probe_seq')",
    },
    Shadow {
        function: "setval",
        logged: "setval(regclass, bigint, boolean)",
        probe: "SELECT setval('evil.probe_seq', 1, false)",
    },
    Shadow {
        function: "unnest",
        logged: "unnest(anyarray)",
        probe: "SELECT unnest(ARRAY[1, 2])",
    },
    Shadow {
        function: "array_fill",
        logged: "array_fill(anyelement, integer[])",
        probe: "SELECT array_fill(1, ARRAY[2])",
    },
    Shadow {
        function: "pg_notify",
        logged: "pg_notify(text, text)",
        probe: "SELECT pg_notify('evil_probe', '')",
    },
    Shadow {
        function: "pg_try_advisory_xact_lock_shared",
        logged: "pg_try_advisory_xact_lock_shared(integer, integer)",
        probe: "SELECT pg_try_advisory_xact_lock_shared(1, 2)",
    },
    Shadow {
        function: "to_jsonb",
        logged: "to_jsonb(anyelement)",
        probe: "SELECT to_jsonb(1)",
    },
    Shadow {
        function: "to_json",
        logged: "to_json(anyelement)",
        probe: "SELECT to_json(1)",
    },
    Shadow {
        function: "jsonb_array_length",
        logged: "jsonb_array_length(jsonb)",
        probe: "SELECT jsonb_array_length('[1]'::jsonb)",
    },
    Shadow {
        function: "min",
        logged: "min(timestamp with time zone)",
        probe: "SELECT min('2000-01-01'::timestamptz)",
    },
    Shadow {
        function: "generate_series",
        logged: "generate_series(integer, integer)",
        probe: "SELECT generate_series(1, 2)",
    },
    Shadow {
        function: "count",
        logged: "count(*)",
        probe: "SELECT count(*) FROM (VALUES (1)) AS v(x)",
    },
    Shadow {
        function: "array_agg",
        logged: "array_agg(integer)",
        probe: "SELECT array_agg(x) FROM (VALUES (1)) AS v(x)",
    },
    Shadow {
        function: "bool_or",
        logged: "bool_or(boolean)",
        probe: "SELECT bool_or(x) FROM (VALUES (true)) AS v(x)",
    },
    Shadow {
        function: "current_database",
        logged: "current_database()",
        probe: "SELECT current_database()",
    },
    // Workflows (0.12.0, src/verbs/workflow.rs): the graph's depths, the
    // parents' results.
    Shadow {
        function: "abs",
        logged: "abs(integer)",
        probe: "SELECT abs(-1)",
    },
    Shadow {
        function: "max",
        logged: "max(integer)",
        probe: "SELECT max(x) FROM (VALUES (1)) AS v(x)",
    },
    Shadow {
        function: "jsonb_build_object",
        logged: "jsonb_build_object(text, text, text, text)",
        probe: "SELECT jsonb_build_object('state'::text, 'failed'::text, 'error'::text, 'x'::text)",
    },
    Shadow {
        function: "jsonb_object_agg",
        logged: "jsonb_object_agg(text, jsonb)",
        probe: "SELECT jsonb_object_agg(k, v) FROM (VALUES ('1'::text, 'null'::jsonb)) AS t(k, v)",
    },
];

/// What the would-be hijacker creates in its own schema `evil`: a table that
/// records every call, and shadows of `pg_catalog` functions and aggregates
/// (each records its call, then does what the original does, so a hijacked
/// statement would complete and its record commit). Every function pins its
/// own `search_path`, so the shadows never call each other.
const EVIL_SCHEMA: &str = r#"
CREATE TABLE evil.calls (shadow text NOT NULL, by_user name NOT NULL);
CREATE SEQUENCE evil.probe_seq;
CREATE FUNCTION evil.log(shadow text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN INSERT INTO evil.calls VALUES (shadow, current_user); END $$;

CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END $$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('now()'); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION evil.current_database() RETURNS name LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('current_database()'); RETURN pg_catalog.current_database(); END $$;
CREATE FUNCTION evil.random() RETURNS float8 LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('random()'); RETURN pg_catalog.random(); END $$;
CREATE FUNCTION evil.power(a float8, b float8) RETURNS float8 LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('power(double precision, double precision)'); RETURN pg_catalog.power(a, b); END $$;
CREATE FUNCTION evil.make_interval(years int DEFAULT 0, months int DEFAULT 0, weeks int DEFAULT 0,
                                   days int DEFAULT 0, hours int DEFAULT 0, mins int DEFAULT 0,
                                   secs float8 DEFAULT 0.0)
RETURNS interval LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN
    PERFORM evil.log('make_interval(...)');
    RETURN pg_catalog.make_interval(years, months, weeks, days, hours, mins, secs);
END $$;
CREATE FUNCTION evil.nextval(s regclass) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('nextval(regclass)'); RETURN pg_catalog.nextval(s); END $$;
CREATE FUNCTION evil.setval(s regclass, v bigint, c boolean) RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('setval(regclass, bigint, boolean)'); RETURN pg_catalog.setval(s, v, c); END $$;
CREATE FUNCTION evil.unnest(a anyarray) RETURNS SETOF anyelement LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('unnest(anyarray)'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
CREATE FUNCTION evil.generate_series(a int, b int) RETURNS SETOF int LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('generate_series(integer, integer)'); RETURN QUERY SELECT pg_catalog.generate_series(a, b); END $$;
CREATE FUNCTION evil.array_fill(v anyelement, dims int[]) RETURNS anyarray LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('array_fill(anyelement, integer[])'); RETURN pg_catalog.array_fill(v, dims); END $$;
CREATE FUNCTION evil.pg_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('pg_notify(text, text)'); PERFORM pg_catalog.pg_notify(channel, payload); END $$;
CREATE FUNCTION evil.pg_try_advisory_xact_lock_shared(a int, b int) RETURNS bool LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN
    PERFORM evil.log('pg_try_advisory_xact_lock_shared(integer, integer)');
    RETURN pg_catalog.pg_try_advisory_xact_lock_shared(a, b);
END $$;

CREATE FUNCTION evil.to_jsonb(a anyelement) RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('to_jsonb(anyelement)'); RETURN pg_catalog.to_jsonb(a); END $$;
CREATE FUNCTION evil.to_json(a anyelement) RETURNS json LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('to_json(anyelement)'); RETURN pg_catalog.to_json(a); END $$;
CREATE FUNCTION evil.jsonb_array_length(a jsonb) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('jsonb_array_length(jsonb)'); RETURN pg_catalog.jsonb_array_length(a); END $$;

CREATE FUNCTION evil.min_step(m timestamptz, v timestamptz) RETURNS timestamptz LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN
    PERFORM evil.log('min(timestamp with time zone)');
    RETURN CASE WHEN m IS NULL OR v OPERATOR(pg_catalog.<) m THEN v ELSE m END;
END $$;
CREATE AGGREGATE evil.min(timestamptz) (SFUNC = evil.min_step, STYPE = timestamptz);
CREATE FUNCTION evil.count_step(n bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('count(*)'); RETURN n OPERATOR(pg_catalog.+) 1; END $$;
CREATE AGGREGATE evil.count(*) (SFUNC = evil.count_step, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION evil.array_agg_step(a integer[], v integer) RETURNS integer[] LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('array_agg(integer)'); RETURN pg_catalog.array_append(a, v); END $$;
CREATE AGGREGATE evil.array_agg(integer) (SFUNC = evil.array_agg_step, STYPE = integer[]);
CREATE FUNCTION evil.bool_or_step(a boolean, v boolean) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('bool_or(boolean)'); RETURN COALESCE(a, false) OR v; END $$;
CREATE AGGREGATE evil.bool_or(boolean) (SFUNC = evil.bool_or_step, STYPE = boolean);

CREATE FUNCTION evil.abs(a integer) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN PERFORM evil.log('abs(integer)'); RETURN pg_catalog.abs(a); END $$;
CREATE FUNCTION evil.max_step(m integer, v integer) RETURNS integer LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN
    PERFORM evil.log('max(integer)');
    RETURN CASE WHEN m IS NULL OR v OPERATOR(pg_catalog.>) m THEN v ELSE m END;
END $$;
CREATE AGGREGATE evil.max(integer) (SFUNC = evil.max_step, STYPE = integer);
CREATE FUNCTION evil.jsonb_build_object(k1 text, v1 text, k2 text, v2 text) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog
AS $$ BEGIN
    PERFORM evil.log('jsonb_build_object(text, text, text, text)');
    RETURN pg_catalog.jsonb_build_object(k1, v1, k2, v2);
END $$;
CREATE FUNCTION evil.jsonb_object_agg_step(a jsonb, k text, v jsonb) RETURNS jsonb LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$ BEGIN
    PERFORM evil.log('jsonb_object_agg(text, jsonb)');
    RETURN COALESCE(a, '{}'::jsonb) OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(k, v);
END $$;
CREATE AGGREGATE evil.jsonb_object_agg(text, jsonb) (SFUNC = evil.jsonb_object_agg_step, STYPE = jsonb);
"#;

/// Shadows every binary `pg_catalog` operator named `=`, `<>`, `<`, `<=`,
/// `>`, `>=`, `+`, `-`, `*`, `/`, `||`, `~~`, `->` or `->>` between the types the extension's SQL compares and computes with: an
/// `evil` operator of the same name and operand types that records the call
/// as `op(left, right)` and then calls the original's function.
const EVIL_OPERATORS: &str = r#"
DO $generate$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT op.oid, op.oprname, op.oprleft::regtype AS l, op.oprright::regtype AS r,
               op.oprresult::regtype AS result,
               format('%I.%I', fn_ns.nspname, fn.proname) AS code,
               format('%s(%s, %s)', op.oprname, format_type(op.oprleft, NULL),
                      format_type(op.oprright, NULL)) AS logged
          FROM pg_operator AS op
          JOIN pg_proc AS fn ON fn.oid = op.oprcode
          JOIN pg_namespace AS fn_ns ON fn_ns.oid = fn.pronamespace
         WHERE op.oprnamespace = 'pg_catalog'::regnamespace
           AND op.oprname = ANY (ARRAY['=', '<>', '<', '<=', '>', '>=', '+', '-', '*', '/', '%', '||', '~~', '->', '->>'])
           AND op.oprleft = ANY (ARRAY['int4', 'int8', 'float8', 'numeric', 'text', 'timestamptz',
                                       'interval', 'bool', 'jsonb', 'anyenum']::regtype[])
           AND op.oprright = ANY (ARRAY['int4', 'int8', 'float8', 'numeric', 'text', 'timestamptz',
                                        'interval', 'bool', 'jsonb', 'anyenum']::regtype[])
    LOOP
        EXECUTE format(
            $f$CREATE FUNCTION evil.%I(a %s, b %s) RETURNS %s LANGUAGE plpgsql
               SET search_path = pg_catalog
               AS $body$ BEGIN PERFORM evil.log(%L); RETURN %s(a, b); END $body$$f$,
            'op_' || o.oid, o.l, o.r, o.result, o.logged, o.code);
        EXECUTE format('CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = evil.%I)',
                       o.oprname, o.l, o.r, 'op_' || o.oid);
    END LOOP;
END
$generate$;
"#;

/// The `pg_catalog` functions (and aggregates) and the operators the
/// extension's SQL calls, read from `src/`: `pg_catalog.name(` and
/// `OPERATOR(pg_catalog.op)`.
fn names_the_extension_calls() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut functions = BTreeSet::new();
    let mut operators = BTreeSet::new();
    for (_, text) in common::extension_sources() {
        for (at, _) in text.match_indices("pg_catalog.") {
            let rest = &text[at + "pg_catalog.".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && rest[name.len()..].starts_with('(') {
                functions.insert(name);
            }
        }
        for (at, _) in text.match_indices("OPERATOR(pg_catalog.") {
            let rest = &text[at + "OPERATOR(pg_catalog.".len()..];
            let symbol = rest.split(')').next().unwrap_or_default();
            operators.insert(symbol.to_owned());
        }
    }
    (functions, operators)
}

/// The hijacker's session: its own role, `evil` ahead of `pg_catalog`.
fn hostile_session(cluster: &Cluster, db: &str) -> Client {
    let mut client = connect_as(cluster, db, APP, SESSION_NAME);
    ok(
        client.batch_execute("SET search_path = evil, pg_catalog, public"),
        "SET search_path",
    );
    client
}

/// What `evil.calls` holds, read by the hijacker on a path without `evil`.
fn calls(attacker: &mut Client) -> Vec<(String, String)> {
    ok(
        attacker.query(
            "SELECT shadow, by_user::text FROM evil.calls ORDER BY shadow",
            &[],
        ),
        "reading evil.calls",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect()
}

/// Every function of the extension, called from `hostile` (whose own queries
/// would call the shadows), with each result checked, and each item's row
/// checked by the superuser on a clean `search_path`.
fn run_every_function(hostile: &mut Client, admin: &mut Client, queue: &str) {
    const OWNER: &str = "w";
    let enqueue = |client: &mut Client, key: &str| -> (i64, bool) {
        let item = Enqueue::new(queue).key(key).payload(json!({"n": 1}));
        let enqueued = ok(calls::enqueue(client, &item), "enqueue");
        (enqueued.id, enqueued.inserted)
    };
    let mut ids = Vec::new();
    for key in ["a", "b", "c", "d", "e", "f", "g"] {
        let (id, inserted) = enqueue(hostile, key);
        assert!(inserted, "{key}");
        ids.push(id);
    }
    assert_eq!(enqueue(hostile, "a"), (ids[0], false), "a re-submit");
    let [a, b, c, d, e, f, g] = ids[..] else {
        unreachable!("seven keys")
    };

    // Claims: two at once, one with a (zero) wait, one by key.
    let two = ok(
        calls::claim(hostile, queue, OWNER, "1 minute", Some(2), None),
        "claim",
    );
    let keys: Vec<&str> = two.iter().map(|item| item.key.as_str()).collect();
    assert_eq!(keys, ["a", "b"], "claim order");
    let third = ok(
        calls::claim(hostile, queue, OWNER, "1 minute", Some(1), Some("0")),
        "claim with wait",
    );
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].key, "c");
    let claim_key = |client: &mut Client, key: &str| -> Claim {
        ok(
            calls::claim_key(client, queue, key, OWNER, "1 minute"),
            "claim_key",
        )
        .unwrap_or_else(|| panic!("claim_key {key}: nothing claimed"))
    };
    let claim_key_in = |client: &mut Client, queue: &str, key: &str| -> i64 {
        ok(
            calls::claim_key(client, queue, key, OWNER, "1 minute"),
            "claim_key",
        )
        .unwrap_or_else(|| panic!("claim_key {queue}/{key}: nothing claimed"))
        .epoch
    };
    let fourth = claim_key(hostile, "d");
    let mut epochs = BTreeSet::new();
    for item in two.iter().chain(&third).chain([&fourth]) {
        assert_eq!(item.attempt, 1);
        assert!(epochs.insert(item.epoch), "epoch {} twice", item.epoch);
        holds(
            admin,
            item.id,
            &format!(
                "state = 'claimed' AND owner = 'w' AND epoch = {} AND attempts = 1 \
                 AND lease_until BETWEEN clock_timestamp() + interval '50 seconds' \
                                     AND clock_timestamp() + interval '1 minute'",
                item.epoch
            ),
        );
    }
    let (ea, eb, ec, ed) = (two[0].epoch, two[1].epoch, third[0].epoch, fourth.epoch);

    let token = |id: i64, epoch: i64| Token::new(id, OWNER, epoch);
    // Renew, finish (twice, then with another item's epoch).
    assert!(ok(
        calls::renew(hostile, &token(a, ea), "10 minutes"),
        "renew"
    ));
    holds(
        admin,
        a,
        "lease_until BETWEEN clock_timestamp() + interval '9 minutes' \
                         AND clock_timestamp() + interval '10 minutes'",
    );
    let result = json!({"ok": true});
    let mut finish = |id: i64, epoch: i64| -> bool {
        ok(
            calls::finish(hostile, &token(id, epoch), Some(&result)),
            "finish",
        )
    };
    assert!(finish(a, ea));
    assert!(finish(a, ea), "a repeated finish");
    assert!(!finish(a, eb), "another item's epoch");
    holds(
        admin,
        a,
        &format!("state = 'done' AND epoch = {ea} AND result = '{{\"ok\": true}}'"),
    );
    // Finish many.
    let finished = ok(
        calls::finish_many(hostile, OWNER, &[b, c], &[eb, ec], None),
        "finish_many",
    );
    assert_eq!(finished, [(b, true), (c, true)]);
    for id in [b, c] {
        holds(admin, id, "state = 'done' AND finished_at IS NOT NULL");
    }
    // Release with a delay.
    assert!(ok(
        calls::release(hostile, &token(d, ed), Some("1 hour")),
        "release"
    ));
    holds(
        admin,
        d,
        "state = 'pending' AND attempts = 0 AND lease_until IS NULL \
         AND run_at BETWEEN clock_timestamp() + interval '59 minutes' \
                        AND clock_timestamp() + interval '1 hour'",
    );
    // Fail with retry_in, and with the backoff (attempt 1: 1 to 2 seconds).
    let fifth = claim_key(hostile, "e");
    assert!(ok(
        calls::fail(hostile, &token(e, fifth.epoch), "boom", Some("2 hours")),
        "fail"
    ));
    holds(
        admin,
        e,
        "state = 'pending' AND attempts = 1 AND last_error = 'boom' \
         AND run_at BETWEEN clock_timestamp() + interval '119 minutes' \
                        AND clock_timestamp() + interval '2 hours'",
    );
    let sixth = claim_key(hostile, "f");
    assert!(ok(
        calls::fail(hostile, &token(f, sixth.epoch), "boom", None),
        "fail"
    ));
    holds(
        admin,
        f,
        "state = 'pending' AND attempts = 1 \
         AND run_at BETWEEN clock_timestamp() + interval '0.5 seconds' \
                        AND clock_timestamp() + interval '2 seconds'",
    );
    // Assert and lease status in one transaction, then cancel.
    let seventh = claim_key(hostile, "g");
    let mut tx = ok(hostile.transaction(), "BEGIN");
    ok(calls::assert(&mut tx, &token(g, seventh.epoch)), "assert");
    let status = ok(
        calls::lease_status(&mut tx, &token(g, seventh.epoch)),
        "lease status",
    );
    assert_eq!(status, "current");
    ok(tx.commit(), "COMMIT");
    let cancelled = ok(calls::cancel(hostile, queue, "g"), "cancel");
    assert!(cancelled);
    holds(admin, g, "state = 'cancelled'");
    let status = |client: &mut Client, id: i64, owner: &str, epoch: i64| -> String {
        ok(
            calls::lease_status(client, &Token::new(id, owner, epoch)),
            "lease status",
        )
    };
    assert_eq!(status(hostile, a, OWNER, ea), "finished");
    assert_eq!(status(hostile, g, OWNER, seventh.epoch), "cancelled");
    assert_eq!(status(hostile, d, OWNER, ed), "superseded");
    assert_eq!(status(hostile, a, "x", ea), "wrong_owner");

    // A long poll that waits: a queue whose only item is due in an hour.
    let later = format!("{queue}-later");
    let in_an_hour = Enqueue::new(&later)
        .key("x")
        .run_at(RunAt::In("1 hour".into()));
    ok(calls::enqueue(hostile, &in_an_hour), "enqueue for later");
    let rows = ok(
        calls::claim(
            hostile,
            &later,
            OWNER,
            "1 minute",
            Some(1),
            Some("20 milliseconds"),
        ),
        "claim with a wait",
    );
    assert!(rows.is_empty(), "nothing is due in {later}");

    // Operating queues, in a queue of their own: a dead letter retried, a
    // lapsed lease claimed anew (an `errors` entry and a work_lease_lost
    // payload built), a reschedule, a pause and a resume, work_item, and
    // the stats view (queue_counters).
    let ops = format!("{queue}-ops");
    let dead = Enqueue::new(&ops)
        .key("h")
        .max_attempts(1)
        .max_run("1 hour");
    let h = ok(calls::enqueue(hostile, &dead), "enqueue h").id;
    let h1 = claim_key_in(hostile, &ops, "h");
    assert!(ok(
        calls::fail(hostile, &token(h, h1), "boom", None),
        "fail h"
    ));
    assert!(ok(calls::retry(hostile, &ops, "h", None), "retry h"));
    holds(
        admin,
        h,
        "state = 'pending' AND max_attempts = 2 AND jsonb_array_length(errors) = 1",
    );
    let h2 = claim_key_in(hostile, &ops, "h");
    assert!(h2 > h1, "the retried item's next claim");
    let j = ok(
        calls::enqueue(hostile, &Enqueue::new(&ops).key("j")),
        "enqueue j",
    )
    .id;
    let j1 = claim_key_in(hostile, &ops, "j");
    ok(
        admin.execute(
            "UPDATE workfence.items SET lease_until = clock_timestamp() - interval '1 second' WHERE id = $1",
            &[&j],
        ),
        "the lease lapses",
    );
    ok(
        calls::resume(hostile, &ops),
        "resume of a queue never paused",
    );
    let j2 = claim_key_in(hostile, &ops, "j");
    assert!(j2 > j1);
    holds(
        admin,
        j,
        &format!("errors -> 0 ->> 'error' = 'lease expired' AND (errors -> 0 ->> 'epoch')::bigint = {j1}"),
    );
    let later_item = Enqueue::new(&ops)
        .key("i")
        .run_at(RunAt::In("1 hour".into()));
    let i = ok(calls::enqueue(hostile, &later_item), "enqueue i").id;
    assert!(ok(
        calls::reschedule(hostile, &ops, "i", &RunAt::In("0".into())),
        "reschedule"
    ));
    assert!(ok(calls::pause(hostile, &ops), "pause"));
    assert!(ok(
        calls::claim(hostile, &ops, OWNER, "1 minute", None, None),
        "paused claim"
    )
    .is_empty());
    assert!(ok(calls::resume(hostile, &ops), "resume"));
    let i1 = claim_key_in(hostile, &ops, "i");
    let seen = ok(calls::item(hostile, &ops, "j"), "work_item").expect("j");
    assert_eq!(
        (
            seen.state.as_str(),
            seen.epoch,
            seen.errors.as_array().map(Vec::len)
        ),
        ("claimed", Some(j2), Some(1))
    );
    assert_eq!(
        ok(calls::item_by_id(hostile, i), "work_item by id").map(|w| w.epoch),
        Some(Some(i1))
    );
    // Every listing of work_items (0.11.0), first page and the next.
    for state in [None, Some("pending"), Some("claimed"), Some("failed")] {
        let page = calls::Page {
            state: state.map(str::to_owned),
            max: Some(1),
            ..calls::Page::default()
        };
        let first = ok(calls::items(hostile, &ops, &page), "work_items");
        if let Some(last) = first.last() {
            let next = calls::Page {
                after: Some(last.id),
                ..page
            };
            ok(
                calls::items(hostile, &ops, &next),
                "work_items, the next page",
            );
        }
    }
    let stats = ok(calls::queue_stats(hostile), "stats");
    assert!(stats
        .iter()
        .any(|q| q.queue == ops && q.claimed == 3 && !q.paused));
    epochs.extend([h1, h2, j1, j2, i1]);

    // Flow control (from 0.10.0): a limited queue with serial groups, whose
    // claims run the statements of src/verbs/flow.rs.
    let flow = format!("{queue}_flow");
    ok(
        calls::work_limit(hostile, &flow, Some(2), Some(10), "1 minute"),
        "work_limit",
    );
    for (key, group) in [("x1", "gx"), ("x2", "gx"), ("y1", "gy"), ("z1", "gz")] {
        let item = Enqueue::new(&flow).key(key).group_key(group);
        assert!(ok(calls::enqueue(hostile, &item), "grouped enqueue").inserted);
    }
    let batch = ok(
        calls::claim(hostile, &flow, OWNER, "1 minute", Some(10), None),
        "flow claim",
    );
    let keys: Vec<&str> = batch.iter().map(|item| item.key.as_str()).collect();
    assert_eq!(keys, ["x1", "y1"], "one per group, two by the limit");
    let held_back = ok(
        calls::claim_key(hostile, &flow, "x2", OWNER, "1 minute"),
        "claim_key of a busy group",
    );
    assert!(held_back.is_none());
    assert!(ok(
        calls::finish(hostile, &token(batch[0].id, batch[0].epoch), None),
        "finish x1"
    ));
    let x2 = ok(
        calls::claim_key(hostile, &flow, "x2", OWNER, "1 minute"),
        "claim_key of a freed group",
    )
    .expect("x2 once x1 is done");
    epochs.extend(batch.iter().map(|item| item.epoch).chain([x2.epoch]));

    // The bulk enqueue (0.12.0), in a queue of its own: the one INSERT of
    // items without a group (a key that exists, one repeated in the call,
    // a generated one due later, the look-up of the existing keys), then
    // the item-by-item path of grouped items and of `on_conflict`.
    let bulk = format!("{queue}-bulk");
    let m1 = ok(
        calls::enqueue(hostile, &Enqueue::new(&bulk).key("m1")),
        "enqueue m1",
    )
    .id;
    let rows = ok(
        generated::work_enqueue_many(
            hostile,
            &bulk,
            &[
                json!({"m": 1}),
                json!({"m": 2}),
                json!({"m": 3}),
                json!({"m": 4}),
            ],
            Some(&[Some("m1"), Some("m2"), Some("m2"), None]),
            Some(&[None, None, None, Some("2100-01-01 00:00:00+00")]),
            Some(5),
            Some(3),
            None,
            None,
        ),
        "work_enqueue_many",
    );
    let got: Vec<(i64, bool)> = rows
        .iter()
        .map(|r| (r.id.expect("id"), r.inserted.expect("inserted")))
        .collect();
    let (m2, m4) = (got[1].0, got[3].0);
    assert_eq!(got, [(m1, false), (m2, true), (m2, false), (m4, true)]);
    assert_eq!(rows[3].key.as_ref().map(String::len), Some(36), "a UUID");
    holds(
        admin,
        m2,
        "state = 'pending' AND payload = '{\"m\": 2}' AND priority = 5 AND max_attempts = 3",
    );
    holds(admin, m4, "run_at = '2100-01-01 00:00:00+00'");
    let grouped = ok(
        generated::work_enqueue_many(
            hostile,
            &bulk,
            &[json!({"g": 1}), json!({"g": 2})],
            Some(&[Some("g1"), Some("g2")]),
            None,
            None,
            None,
            Some(&[Some("gg"), Some("gg")]),
            None,
        ),
        "work_enqueue_many with groups",
    );
    for row in &grouped {
        assert_eq!(row.inserted, Some(true), "{row:?}");
        holds(admin, row.id.expect("id"), "group_key = 'gg'");
    }
    let replaced = ok(
        generated::work_enqueue_many(
            hostile,
            &bulk,
            &[json!({"m": 22})],
            Some(&[Some("m2")]),
            None,
            None,
            None,
            None,
            Some("replace"),
        ),
        "work_enqueue_many, replace",
    );
    assert_eq!(replaced[0].id, Some(m2));
    holds(admin, m2, "payload = '{\"m\": 22}'");

    // Workflows (0.12.0), in a queue of their own: every statement of
    // src/verbs/workflow.rs runs (the parents' lock and the edges; a settle
    // by a finish, a final failure, a dead letter and a cancel; a retry's
    // re-open and forgive; the parents' results; the graph; a purge of
    // edges).
    let wf = format!("{queue}-wf");
    let new_in_wf = |client: &mut Client, item: Enqueue| -> i64 {
        let enqueued = ok(calls::enqueue(client, &item), "enqueue in a workflow");
        assert!(enqueued.inserted, "{}", enqueued.key);
        enqueued.id
    };
    let p1 = new_in_wf(hostile, Enqueue::new(&wf).key("p1"));
    let p2 = new_in_wf(hostile, Enqueue::new(&wf).key("p2").max_attempts(1));
    let p3 = new_in_wf(hostile, Enqueue::new(&wf).key("p3").max_attempts(1));
    let child = new_in_wf(
        hostile,
        Enqueue::new(&wf)
            .key("child")
            .after(&[p1, p2])
            .on_parent_failure("run"),
    );
    let grandchild = new_in_wf(hostile, Enqueue::new(&wf).key("grandchild").after(&[child]));
    let doomed = new_in_wf(hostile, Enqueue::new(&wf).key("doomed").after(&[p2]));
    let orphan = new_in_wf(hostile, Enqueue::new(&wf).key("orphan").after(&[p3]));
    holds(admin, child, "state = 'waiting' AND waiting_on = 2");
    // p1 done with a result; p2 fails its only attempt: the child (run)
    // is released, doomed (cancel) cancelled.
    let p1e = claim_key_in(hostile, &wf, "p1");
    assert!(ok(
        calls::finish(hostile, &token(p1, p1e), Some(&result)),
        "finish p1"
    ));
    let p2e = claim_key_in(hostile, &wf, "p2");
    assert!(ok(
        calls::fail(hostile, &token(p2, p2e), "boom", None),
        "fail p2"
    ));
    holds(admin, child, "state = 'pending' AND waiting_on = 0");
    holds(
        admin,
        doomed,
        &format!("state = 'cancelled' AND last_error = 'parent {p2} ended failed'"),
    );
    // p2 retried: doomed waits again; cancelled and retried itself, it
    // still waits for p2.
    assert!(ok(calls::retry(hostile, &wf, "p2", None), "retry p2"));
    holds(admin, doomed, "state = 'waiting' AND waiting_on = 1");
    assert!(ok(calls::cancel(hostile, &wf, "doomed"), "cancel doomed"));
    assert!(ok(
        calls::retry(hostile, &wf, "doomed", None),
        "retry doomed"
    ));
    holds(admin, doomed, "state = 'waiting' AND waiting_on = 1");
    // p3's lapsed only attempt is dead-lettered by a claim: orphan is
    // cancelled. (Only with the functions' pinned search_path: without it,
    // a claim's dead letter fails in RERUN_DEAD, src/verbs/life.rs, whose
    // `(i.id, i.rerun_after) IN (...)` resolves its `=` through the
    // caller's path and finds the shadow; reported. Unpinned, p3 fails its
    // only attempt instead.)
    let p3e = claim_key_in(hostile, &wf, "p3");
    if queue == "pinned" {
        ok(
            admin.execute(
                "UPDATE workfence.items SET lease_until = clock_timestamp() - interval '1 second' WHERE id = $1",
                &[&p3],
            ),
            "p3's lease lapses",
        );
        let none = ok(
            calls::claim_key(hostile, &wf, "p3", OWNER, "1 minute"),
            "the claim that dead-letters p3",
        );
        assert!(none.is_none());
    } else {
        assert!(ok(
            calls::fail(hostile, &token(p3, p3e), "boom", None),
            "fail p3"
        ));
    }
    holds(admin, p3, "state = 'failed'");
    holds(admin, orphan, "state = 'cancelled'");
    // The child reads its parents' outcomes, and the graph around it.
    let ce = claim_key_in(hostile, &wf, "child");
    let results = ok(
        generated::work_parent_results(hostile, child, OWNER, ce),
        "work_parent_results",
    );
    assert_eq!(
        results,
        json!({
            p1.to_string(): {"ok": true},
            p2.to_string(): {"state": "pending", "error": "boom"},
        })
    );
    let graph: Vec<(i64, i32, Vec<i64>)> =
        ok(generated::work_workflow(hostile, child), "work_workflow")
            .into_iter()
            .map(|row| {
                (
                    row.id.expect("id"),
                    row.depth.expect("depth"),
                    row.parents.expect("parents"),
                )
            })
            .collect();
    assert_eq!(
        graph,
        [
            (child, 0, vec![p1, p2]),
            (p1, -1, vec![]),
            (p2, -1, vec![]),
            (grandchild, 1, vec![child]),
        ]
    );
    // The child done releases the grandchild; p2 cancelled cancels doomed.
    assert!(ok(
        calls::finish(hostile, &token(child, ce), None),
        "finish the child"
    ));
    holds(admin, grandchild, "state = 'pending' AND waiting_on = 0");
    assert!(ok(calls::cancel(hostile, &wf, "p2"), "cancel p2"));
    holds(admin, doomed, "state = 'cancelled'");
    // The purge takes the edges of what it deletes (p1, p2, p3, the
    // child, doomed, orphan): the grandchild has none left.
    let purged = ok(calls::purge(hostile, Some("0"), Some(&wf)), "purge");
    assert_eq!(purged, 6);
    holds(
        admin,
        grandchild,
        "NOT EXISTS (SELECT FROM workfence.item_edges AS e WHERE i.id IN (e.parent, e.child))",
    );
    epochs.extend([p1e, p2e, p3e, ce]);

    // Purge what is finished: a, b, c (done) and g (cancelled).
    let purged = ok(calls::purge(hostile, Some("0"), Some(queue)), "purge");
    assert_eq!(purged, 4);
    let left: Vec<i64> = ok(
        admin.query(
            "SELECT id FROM workfence.items WHERE queue = $1 ORDER BY id",
            &[&queue],
        ),
        "items left",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(left, [d, e, f]);
    // Every epoch came from workfence.epoch_seq, and no other was drawn.
    let last: i64 = ok(
        admin.query_one("SELECT last_value FROM workfence.epoch_seq", &[]),
        "epoch_seq",
    )
    .get(0);
    assert_eq!(
        Some(&last),
        epochs
            .iter()
            .chain([&fifth.epoch, &sixth.epoch, &seventh.epoch])
            .max()
    );
}

#[test]
fn a_hostile_search_path_is_never_followed() {
    let cluster = cluster();
    let db = "privileges_hijack";
    let mut admin = database(&cluster, db);
    // The hijacker may create objects in a schema of its own, and (as a
    // maintenance role would be) purge.
    ok(
        admin.batch_execute(
            "CREATE SCHEMA evil AUTHORIZATION wf_app;
             GRANT EXECUTE ON FUNCTION workfence.work_purge TO wf_app;",
        ),
        "schema evil",
    );
    let mut attacker = connect_as(&cluster, db, APP, SESSION_NAME);
    ok(attacker.batch_execute(EVIL_SCHEMA), "creating the shadows");
    ok(
        attacker.batch_execute(EVIL_OPERATORS),
        "creating the shadow operators",
    );
    let operators: Vec<(String, String, String)> = ok(
        attacker.query(
            "SELECT o.oprname::text, format_type(o.oprleft, NULL), format_type(o.oprright, NULL)
               FROM pg_operator AS o WHERE o.oprnamespace = 'evil'::regnamespace ORDER BY 1, 2, 3",
            &[],
        ),
        "listing the shadow operators",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();

    // The shadows cover every pg_catalog function, aggregate and operator
    // the extension's SQL names.
    let (functions, symbols) = names_the_extension_calls();
    assert!(functions.contains("clock_timestamp") && symbols.contains("="));
    for function in &functions {
        assert!(
            SHADOWS.iter().any(|shadow| shadow.function == function),
            "src/ calls pg_catalog.{function}(: add a shadow of it to SHADOWS"
        );
    }
    for symbol in &symbols {
        assert!(
            operators.iter().any(|(name, _, _)| name == symbol),
            "src/ uses OPERATOR(pg_catalog.{symbol}): add it to the generated shadow operators"
        );
    }
    for (name, left, right) in [
        ("=", "bigint", "bigint"),
        ("=", "text", "text"),
        ("=", "anyenum", "anyenum"),
        ("<=", "timestamp with time zone", "timestamp with time zone"),
        ("+", "timestamp with time zone", "interval"),
        ("-", "timestamp with time zone", "interval"),
        ("*", "double precision", "double precision"),
        ("||", "jsonb", "jsonb"),
        ("-", "jsonb", "integer"),
        ("~~", "text", "text"),
    ] {
        assert!(
            operators.contains(&(name.to_owned(), left.to_owned(), right.to_owned())),
            "no shadow of {name}({left}, {right})"
        );
    }

    // The shadowing works: in the hostile session an unqualified query calls
    // every shadow.
    let mut hostile = hostile_session(&cluster, db);
    let mut probes: Vec<(String, String)> = SHADOWS
        .iter()
        .map(|shadow| (shadow.logged.to_owned(), shadow.probe.to_owned()))
        .collect();
    for (name, left, right) in &operators {
        let concrete = |t: &str| match t {
            "anyenum" => "workfence.item_state".to_owned(),
            other => other.to_owned(),
        };
        probes.push((
            format!("{name}({left}, {right})"),
            format!(
                "SELECT NULL::{} {name} NULL::{}",
                concrete(left),
                concrete(right)
            ),
        ));
    }
    for (logged, probe) in &probes {
        ok(hostile.batch_execute(probe), probe);
        assert!(
            calls(&mut attacker)
                .iter()
                .any(|(shadow, _)| shadow == logged),
            "{probe} did not call the shadow {logged}"
        );
    }
    ok(attacker.batch_execute("TRUNCATE evil.calls"), "TRUNCATE");

    // Every function, from the hostile session: correct results, no shadow
    // called.
    run_every_function(&mut hostile, &mut admin, "pinned");
    assert_eq!(
        calls(&mut attacker),
        Vec::<(String, String)>::new(),
        "shadows called by the extension"
    );

    // Without the pinned search_path, the schema-qualified SQL alone keeps
    // the shadows out (a new session: no plan prepared under the pin).
    ok(
        admin.batch_execute(
            "DO $$
             DECLARE f regprocedure;
             BEGIN
                 FOR f IN SELECT p.oid FROM pg_proc AS p
                           WHERE p.pronamespace = 'workfence'::regnamespace
                 LOOP
                     EXECUTE format('ALTER FUNCTION %s RESET search_path', f);
                 END LOOP;
             END $$",
        ),
        "removing the pinned search_path",
    );
    let pinned: i64 = ok(
        admin.query_one(
            "SELECT count(*) FROM pg_proc
              WHERE pronamespace = 'workfence'::regnamespace AND proconfig IS NOT NULL",
            &[],
        ),
        "proconfig",
    )
    .get(0);
    assert_eq!(pinned, 0);
    let mut hostile = hostile_session(&cluster, db);
    run_every_function(&mut hostile, &mut admin, "unpinned");
    assert_eq!(
        calls(&mut attacker),
        Vec::<(String, String)>::new(),
        "shadows called by the extension"
    );

    // With queue grants enforced, the token statements run in their scoped
    // forms (a LIKE over the role's patterns): those too call no shadow. And
    // the database's history forgotten, the first claim starts a new one
    // (src/verbs/generation.rs: a setval, the row rewritten): no shadow either.
    ok(
        admin.batch_execute(
            "SELECT workfence.work_grant(c, '*', 'wf_app')
               FROM unnest(ARRAY['enqueue', 'claim', 'operate', 'read', 'purge']) AS c;
             SELECT workfence.work_enforce_grants(true);
             DELETE FROM workfence.generation;",
        ),
        "granting wf_app every queue, forgetting the history",
    );
    let mut hostile = hostile_session(&cluster, db);
    run_every_function(&mut hostile, &mut admin, "granted");
    assert_eq!(
        calls(&mut attacker),
        Vec::<(String, String)>::new(),
        "shadows called by the extension under queue grants"
    );
}

/// Every privilege and security setting of schema `workfence` and its
/// objects, one line each, sorted.
const PRIVILEGES: &str = "
SELECT pg_catalog.string_agg(line, E'\\n' ORDER BY line) FROM (
    SELECT 'function ' || p.oid::pg_catalog.regprocedure::text || ' acl=' || coalesce(p.proacl::text, '')
           || ' secdef=' || p.prosecdef || ' config=' || coalesce(p.proconfig::text, '')
      FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'workfence'::pg_catalog.regnamespace
  UNION ALL
    SELECT 'relation ' || c.relname || ' acl=' || coalesce(c.relacl::text, '')
      FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'workfence'::pg_catalog.regnamespace
  UNION ALL
    SELECT 'schema acl=' || coalesce(n.nspacl::text, '')
      FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'workfence'
) AS t(line)";

/// Runs a client program of the cluster's PostgreSQL, as the superuser.
fn run_client(cluster: &Cluster, program: &str, database: &str, args: &[&str], file: &Path) {
    let status = ok(
        Command::new(cluster.bin_dir().join(program))
            .args(["-h", cluster.host(), "-p", &cluster.port().to_string()])
            .args(["-U", "postgres", "-d", database])
            .args(args)
            .arg(file)
            .status(),
        program,
    );
    assert!(status.success(), "{program} {database}: {status}");
}

#[test]
fn the_grants_survive_pg_dump_and_restore() {
    let cluster = cluster();
    let mut source = database(&cluster, "privileges_dumped");
    let before: String = ok(source.query_one(PRIVILEGES, &[]), "privileges").get(0);
    assert!(
        before.contains("workfence_worker=X/") && before.contains("workfence_monitor=r/"),
        "the guide's grants are in place: {before}"
    );

    let dump = cluster.data_dir().with_extension("privileges-dump.sql");
    run_client(&cluster, "pg_dump", "privileges_dumped", &["-f"], &dump);
    let mut admin = ok(cluster.connect(), "connecting");
    ok(
        admin.batch_execute("CREATE DATABASE privileges_restored"),
        "CREATE DATABASE",
    );
    let restore = ["-X", "-q", "-o", "/dev/null", "-v", "ON_ERROR_STOP=1", "-f"];
    run_client(&cluster, "psql", "privileges_restored", &restore, &dump);
    ok(std::fs::remove_file(&dump), "removing the dump");

    let mut restored = ok(cluster.connect_to("privileges_restored"), "connecting");
    let after: String = ok(restored.query_one(PRIVILEGES, &[]), "privileges").get(0);
    assert_eq!(after, before, "privileges after the restore");
    // And they work: the roles do their part, PUBLIC still nothing.
    let mut submitter = connect_as(&cluster, "privileges_restored", SUBMITTER, SESSION_NAME);
    ok(
        calls::enqueue(&mut submitter, &Enqueue::new("q").key("k")),
        "enqueue after the restore",
    );
    let mut worker = connect_as(&cluster, "privileges_restored", WORKER, SESSION_NAME);
    let key = common::claimed_one(&mut worker, "q", "w", "1 minute").key;
    assert_eq!(key, "k");
    let mut nobody = connect_as(&cluster, "privileges_restored", NOBODY, SESSION_NAME);
    assert_denied(
        &mut nobody,
        NOBODY,
        "SELECT * FROM workfence.work_claim('q', 'w', '1 minute')",
    );
}
