//! Queue-scoped privileges (issue 19, release 0.7.0), from real client
//! connections, each test in a database of its own on one shared cluster.
//!
//! - **The matrix**: a role per capability (enqueue, claim, operate, read,
//!   purge), each granted it on `billing.*`, and a role granted nothing, all
//!   with `EXECUTE` on every function (so that only the queue grants
//!   decide), call every function on a queue of `billing.*` and on one
//!   outside it. The permitted calls work; a forbidden call that names its
//!   queue raises 42501 naming it, a forbidden token call answers exactly
//!   what the same call answers for an id no item has, and neither changes
//!   anything (a snapshot of every table before and after).
//! - Group membership (with and without `INHERIT`), `SET ROLE`, and a user's
//!   own `SECURITY DEFINER` function: whose grants count.
//! - A revoke takes effect at the next call of a session that used the
//!   grant a moment before; a worker holding a lease is fenced off by it.
//! - A long poll ended by a revoke passes the wake-up it took on.
//! - `work_queue_stats` shows a role only the queues it may read, even to
//!   a query whose own condition would see every row (a leaky function).
//! - Grants decide nothing until `work_enforce_grants(true)`.
//! - The operations guide's two-team setup, run verbatim, does what its
//!   paragraph says.
//! - Grants and their switch survive `pg_dump` and a restore.
//! - Only the extension's owner manages grants, `EXECUTE` or not; a
//!   maintenance command's restricted operation reaches no queue; a revoke
//!   counts inside an open REPEATABLE READ transaction; queue names with
//!   `LIKE`'s wildcards are matched literally; a dropped role's grants go.
//! - Workflows (0.12.0): a parent (`work_enqueue`'s `after`) in a queue the
//!   role may not read is refused exactly as an id of no item (23503), even
//!   in the role's own queue without `read`; a child in a queue it may not
//!   enqueue to is 42501; `work_workflow` shows only the rows of queues the
//!   role may read, none around an item it may not; `work_parent_results`
//!   answers a token only to a role with `claim` on the child's queue.
//! - The bulk enqueue (0.12.0): `work_enqueue_many` is in the matrix (both
//!   of its paths); running a cancelled item again through it needs
//!   `operate`, as through `work_enqueue`.

use crate::common;

use std::fmt::Debug;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{connect_as, ok, scalar};
use postgres::Client;
use workfence_harness::calls::{self, CallResult, Enqueue, RunAt, Token};
use workfence_harness::Cluster;

/// The application_name of the role connections (pg_stat_activity).
const SESSION: &str = "pg_workfence queue grants test";

/// The operations guide: the two-team setup is run from it.
const GUIDE: &str = include_str!("../../../docs/operations.md");

/// A queue the matrix roles' grants (`billing.*`) cover.
const PERMITTED: &str = "billing.invoices";
/// A queue they do not cover.
const FORBIDDEN: &str = "hr.payroll";

/// The operations guide's SQL block `marker`.
fn guide(marker: &str) -> &'static str {
    common::doc_sql_block(GUIDE, "docs/operations.md", marker)
}

/// The matrix roles: one per capability, and one with no grant at all.
const MATRIX_ROLES: [(&str, Option<&str>); 6] = [
    ("qg_enqueue", Some("enqueue")),
    ("qg_claim", Some("claim")),
    ("qg_operate", Some("operate")),
    ("qg_read", Some("read")),
    ("qg_purge", Some("purge")),
    ("qg_none", None),
];

/// The cluster the tests share: the guide's function groups and two-team
/// roles, the matrix roles, and the roles of the other tests (roles are
/// cluster-wide, so they are made once, here).
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_with(|cluster| {
        let mut admin = ok(cluster.connect(), "connecting as the superuser");
        ok(
            admin.batch_execute(guide("least-privilege-roles")),
            "the guide's group roles",
        );
        ok(
            admin.batch_execute(guide("queue-grants-roles")),
            "the guide's two-team roles",
        );
        for (role, _) in MATRIX_ROLES {
            ok(
                admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")),
                "a matrix role",
            );
        }
        ok(
            admin.batch_execute(
                "CREATE ROLE qg_team NOLOGIN;
                 CREATE ROLE qg_member LOGIN IN ROLE qg_team;
                 CREATE ROLE qg_noinherit LOGIN NOINHERIT IN ROLE qg_team;
                 CREATE ROLE qg_other LOGIN;
                 CREATE ROLE qg_owner NOLOGIN;
                 CREATE ROLE qg_waiter LOGIN;
                 CREATE ROLE qg_stayer LOGIN;
                 CREATE ROLE qg_grafana LOGIN IN ROLE workfence_monitor;
                 CREATE ROLE qg_patterns LOGIN;
                 CREATE ROLE qg_gone LOGIN;
                 CREATE ROLE qg_flow LOGIN;
                 CREATE ROLE qg_bulk LOGIN;",
            ),
            "the other tests' roles",
        );
    })
}

/// A database of its own with the extension, and the superuser's
/// connection to it. `roles` get `USAGE` on the schema, `EXECUTE` on every
/// function and `SELECT` on the statistics view, so that the queue grants
/// alone decide what they reach.
fn database(cluster: &Cluster, name: &str, roles: &[&str]) -> Client {
    ok(cluster.create_database(name), "creating the database");
    let mut admin = ok(cluster.connect_to(name), "connecting as the superuser");
    for role in roles {
        ok(
            admin.batch_execute(&format!(
                "GRANT USAGE ON SCHEMA workfence TO {role};
                 GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO {role};
                 GRANT SELECT ON workfence.work_queue_stats TO {role};"
            )),
            "function grants",
        );
    }
    admin
}

fn grant(admin: &mut Client, capability: &str, queues: &str, role: &str) {
    assert!(
        ok(calls::grant(admin, capability, queues, role), "work_grant"),
        "{capability} on {queues} to {role} was granted before"
    );
}

fn enforce(admin: &mut Client) {
    assert!(
        ok(calls::enforce_grants(admin, true), "work_enforce_grants"),
        "grants were enforced before"
    );
}

/// What a call returned, or the error it raised, comparable across calls.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The call's result, rendered with `{:?}`.
    Value(String),
    /// The server's error: SQLSTATE, message, DETAIL, HINT.
    Error {
        code: String,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
}

impl Outcome {
    fn of<T: Debug>(result: CallResult<T>) -> Outcome {
        match result {
            Ok(value) => Outcome::Value(format!("{value:?}")),
            Err(err) => {
                let db = err
                    .as_db_error()
                    .unwrap_or_else(|| panic!("not a server error: {err}"));
                Outcome::Error {
                    code: db.code().code().to_owned(),
                    message: db.message().to_owned(),
                    detail: db.detail().map(str::to_owned),
                    hint: db.hint().map(str::to_owned),
                }
            }
        }
    }

    fn code(&self) -> Option<&str> {
        match self {
            Outcome::Value(_) => None,
            Outcome::Error { code, .. } => Some(code),
        }
    }

    /// The outcome with the token's id taken out of the message (the one
    /// thing a caller already knows), so that two ids' answers compare.
    fn without_id(&self, id: i64) -> Outcome {
        match self {
            Outcome::Error {
                code,
                message,
                detail,
                hint,
            } => Outcome::Error {
                code: code.clone(),
                message: message.replace(&format!("item {id} "), "item <id> "),
                detail: detail.clone(),
                hint: hint.clone(),
            },
            value => value.clone(),
        }
    }
}

/// What the superuser sets up for one call: an item in the queue, in the
/// state the function acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fixture {
    /// Nothing.
    None,
    /// A pending item.
    Pending,
    /// A cancelled item (what `work_retry` takes back).
    Cancelled,
    /// An item claimed by the superuser as owner `w` (its token is current).
    Claimed,
    /// The queue paused (what `work_resume` ends).
    Paused,
}

/// One call of the matrix on `queue`, item `key` (and, for a claimed
/// fixture, its current `token`).
struct Case<'a> {
    queue: &'a str,
    key: &'a str,
    token: Option<Token>,
}

impl Case<'_> {
    fn token(&self) -> &Token {
        self.token.as_ref().expect("a claimed fixture")
    }
}

/// How a forbidden call is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// 42501 naming the queue.
    Raises,
    /// Exactly the answer for an id no item has.
    AsMissing,
    /// `work_queue_stats` shows no row for the queue.
    NoRow,
}

/// One function of the matrix.
struct Op {
    name: &'static str,
    capability: &'static str,
    fixture: Fixture,
    refusal: Refusal,
    call: fn(&mut Client, &Case) -> Outcome,
    /// The outcome of a permitted call, when it is fixed.
    permitted: Option<&'static str>,
    /// The call names every queue (`work_purge` without one): a grant of
    /// `billing.*` does not cover it.
    every_queue: bool,
}

fn ops() -> Vec<Op> {
    vec![
        Op {
            name: "work_enqueue",
            capability: "enqueue",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::enqueue(c, &Enqueue::new(case.queue).key(case.key)).map(|e| e.inserted),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        // The bulk enqueue (0.12.0), both of its paths: items without a
        // group in one INSERT, and items with one each as work_enqueue
        // enqueues it. A refusal inserts neither item.
        Op {
            name: "work_enqueue_many",
            capability: "enqueue",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(enqueue_many(c, case, None)),
            permitted: Some("[(true, true), (true, true)]"),
            every_queue: false,
        },
        Op {
            name: "work_enqueue_many with group keys",
            capability: "enqueue",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(enqueue_many(c, case, Some([Some("g"), None]))),
            permitted: Some("[(true, true), (true, true)]"),
            every_queue: false,
        },
        Op {
            name: "work_claim",
            capability: "claim",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::claim(c, case.queue, "r", "1 minute", Some(1000), None)
                        .map(|claims| claims.iter().any(|claim| claim.key == case.key)),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_claim with wait",
            capability: "claim",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::claim(c, case.queue, "r", "1 minute", Some(1000), Some("1 second"))
                        .map(|claims| claims.iter().any(|claim| claim.key == case.key)),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_claim_key",
            capability: "claim",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::claim_key(c, case.queue, case.key, "r", "1 minute")
                        .map(|claim| claim.is_some()),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_renew",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| Outcome::of(calls::renew(c, case.token(), "1 minute")),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_finish",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| Outcome::of(calls::finish(c, case.token(), None)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_finish_many",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| {
                let t = case.token();
                Outcome::of(
                    calls::finish_many(c, &t.owner, &[t.id], &[t.epoch], None)
                        .map(|rows| rows.iter().map(|row| row.1).collect::<Vec<_>>()),
                )
            },
            permitted: Some("[true]"),
            every_queue: false,
        },
        Op {
            name: "work_release",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| Outcome::of(calls::release(c, case.token(), None)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_fail",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| Outcome::of(calls::fail(c, case.token(), "boom", None)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_finish_and_claim",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::finish_and_claim(c, case.queue, case.token(), "1 minute", None, None)
                        .map(|cycle| cycle.settled),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_fail_and_claim",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::fail_and_claim(
                        c,
                        case.queue,
                        case.token(),
                        "1 minute",
                        "boom",
                        None,
                        None,
                    )
                    .map(|cycle| cycle.settled),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_assert",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| {
                let mut tx = ok(c.transaction(), "BEGIN");
                let outcome = Outcome::of(calls::assert(&mut tx, case.token()));
                drop(tx); // rolled back
                outcome
            },
            permitted: Some("()"),
            every_queue: false,
        },
        Op {
            name: "work_lease_status",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| Outcome::of(calls::lease_status(c, case.token())),
            permitted: Some("\"current\""),
            every_queue: false,
        },
        Op {
            name: "work_parent_results",
            capability: "claim",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            // NULL for a token the role may not present, as for a missing
            // item; `{}` for a current one of an item without parents.
            call: |c, case| {
                let t = case.token();
                Outcome::of(
                    c.query_one(
                        "SELECT workfence.work_parent_results($1, $2, $3)::text",
                        &[&t.id, &t.owner, &t.epoch],
                    )
                    .map(|row| row.get::<_, Option<String>>(0)),
                )
            },
            permitted: Some("Some(\"{}\")"),
            every_queue: false,
        },
        Op {
            name: "work_workflow",
            capability: "read",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            // Zero rows for an item the role may not read, as for a
            // missing one; the item alone for one without edges.
            call: |c, case| {
                Outcome::of(
                    calls::generated::work_workflow(c, case.token().id).map(|rows| rows.len()),
                )
            },
            permitted: Some("1"),
            every_queue: false,
        },
        Op {
            name: "work_cancel",
            capability: "operate",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(calls::cancel(c, case.queue, case.key)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_retry",
            capability: "operate",
            fixture: Fixture::Cancelled,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(calls::retry(c, case.queue, case.key, None)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_reschedule",
            capability: "operate",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(calls::reschedule(
                    c,
                    case.queue,
                    case.key,
                    &RunAt::In("1 hour".into()),
                ))
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_pause",
            capability: "operate",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(calls::pause(c, case.queue)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_limit",
            capability: "operate",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            // Every limit lifted (NULLs): the grant is checked all the same,
            // and the later fixtures' claims of the queue are not limited.
            call: |c, case| Outcome::of(calls::work_limit(c, case.queue, None, None, "1 second")),
            permitted: Some("()"),
            every_queue: false,
        },
        Op {
            name: "work_resume",
            capability: "operate",
            fixture: Fixture::Paused,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(calls::resume(c, case.queue)),
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_item(queue, key)",
            capability: "read",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(calls::item(c, case.queue, case.key).map(|item| item.is_some()))
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_items",
            capability: "read",
            fixture: Fixture::Pending,
            refusal: Refusal::Raises,
            call: |c, case| {
                Outcome::of(
                    calls::items(c, case.queue, &calls::Page::default())
                        .map(|page| page.iter().any(|item| item.key == case.key)),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_item(id)",
            capability: "read",
            fixture: Fixture::Claimed,
            refusal: Refusal::AsMissing,
            call: |c, case| {
                Outcome::of(calls::item_by_id(c, case.token().id).map(|item| item.is_some()))
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "queue_counters",
            capability: "read",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            // Nothing is counted without shared_preload_libraries: no row.
            call: |c, case| Outcome::of(calls::queue_counters(c, case.queue)),
            permitted: Some("None"),
            every_queue: false,
        },
        Op {
            name: "work_queue_stats",
            capability: "read",
            fixture: Fixture::Pending,
            refusal: Refusal::NoRow,
            call: |c, case| {
                Outcome::of(
                    calls::queue_stats(c)
                        .map(|rows| rows.iter().any(|row| row.queue == case.queue)),
                )
            },
            permitted: Some("true"),
            every_queue: false,
        },
        Op {
            name: "work_purge",
            capability: "purge",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            call: |c, case| Outcome::of(calls::purge(c, Some("0"), Some(case.queue))),
            permitted: None,
            every_queue: false,
        },
        Op {
            name: "work_purge of every queue",
            capability: "purge",
            fixture: Fixture::None,
            refusal: Refusal::Raises,
            call: |c, _| Outcome::of(calls::purge(c, Some("0"), None)),
            permitted: None,
            every_queue: true,
        },
    ]
}

/// `work_enqueue_many` of two items of `case.queue`, keys `<key>/1` and
/// `<key>/2`, in `group_keys` if given: for each row, whether its key is
/// the one asked for, in the order asked, and whether it was inserted.
fn enqueue_many(
    c: &mut Client,
    case: &Case,
    group_keys: Option<[Option<&str>; 2]>,
) -> CallResult<Vec<(bool, bool)>> {
    let keys = [format!("{}/1", case.key), format!("{}/2", case.key)];
    let rows = calls::generated::work_enqueue_many(
        c,
        case.queue,
        &[serde_json::json!({"n": 1}), serde_json::json!({"n": 2})],
        Some(&[Some(keys[0].as_str()), Some(keys[1].as_str())]),
        None,
        None,
        None,
        group_keys.as_ref().map(|g| &g[..]),
        None,
    )?;
    Ok(rows
        .iter()
        .enumerate()
        .map(|(i, row)| (row.key.as_ref() == keys.get(i), row.inserted == Some(true)))
        .collect())
}

/// The superuser's set-up of `fixture` for item `key` of `queue`.
fn prepare(admin: &mut Client, fixture: Fixture, queue: &str, key: &str) -> Option<Token> {
    match fixture {
        Fixture::None => None,
        Fixture::Pending => {
            common::enqueue_new(admin, &Enqueue::new(queue).key(key));
            None
        }
        Fixture::Cancelled => {
            common::enqueue_new(admin, &Enqueue::new(queue).key(key));
            assert!(ok(calls::cancel(admin, queue, key), "cancel"));
            None
        }
        Fixture::Claimed => Some(common::enqueued_and_claimed(
            admin, queue, key, "w", "1 minute",
        )),
        Fixture::Paused => {
            assert!(ok(calls::pause(admin, queue), "pause"));
            None
        }
    }
}

/// The queue grant each function of the matrix needs is the one the table of
/// the SQL surface (`sql/functions.toml`, `grant`) documents for it, which
/// the reference and the README's index show.
#[test]
fn the_surface_tables_grants_are_the_ones_the_matrix_checks() {
    let surface = ok(
        workfence_surface::Surface::load(&common::repo_root()),
        "sql/functions.toml",
    );
    let mut checked = 0;
    for op in ops() {
        // "work_claim with wait", "work_item(id)": the function's name first.
        let name: String = op
            .name
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        for function in surface.functions.iter().filter(|f| f.name == name) {
            assert_eq!(
                function.grant.capability(),
                Some(op.capability),
                "{}: sql/functions.toml says grant {:?}, the matrix checks {:?}",
                op.name,
                function.grant,
                op.capability
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 25,
        "only {checked} rows of the table were checked"
    );
}

#[test]
fn each_role_reaches_exactly_the_queues_and_functions_its_grant_covers() {
    let cluster = cluster();
    let roles: Vec<&str> = MATRIX_ROLES.iter().map(|(role, _)| *role).collect();
    let mut admin = database(&cluster, "matrix", &roles);
    for (role, capability) in MATRIX_ROLES {
        if let Some(capability) = capability {
            grant(&mut admin, capability, "billing.*", role);
        }
    }
    enforce(&mut admin);

    let ops = ops();
    let mut cases = 0;
    for (role, capability) in MATRIX_ROLES {
        let mut client = connect_as(&cluster, "matrix", role, SESSION);
        for op in &ops {
            for queue in [PERMITTED, FORBIDDEN] {
                cases += 1;
                let key = format!("{}-{role}", op.name);
                let what = format!("{role}: {} on {queue}", op.name);
                let token = prepare(&mut admin, op.fixture, queue, &key);
                let case = Case {
                    queue,
                    key: &key,
                    token,
                };
                let before = common::snapshot(&mut admin);
                let outcome = (op.call)(&mut client, &case);
                let permitted =
                    capability == Some(op.capability) && queue == PERMITTED && !op.every_queue;
                if permitted {
                    assert_eq!(outcome.code(), None, "{what}: {outcome:?}");
                    if let (Some(expected), Outcome::Value(value)) = (op.permitted, &outcome) {
                        assert_eq!(value, expected, "{what}");
                    }
                } else {
                    match op.refusal {
                        Refusal::Raises => match &outcome {
                            Outcome::Error { code, message, .. } => {
                                assert_eq!(code, "42501", "{what}: {message}");
                                assert!(
                                    message.starts_with("permission denied for queue"),
                                    "{what}: {message}"
                                );
                            }
                            Outcome::Value(value) => panic!("{what} was allowed: {value}"),
                        },
                        Refusal::AsMissing => {
                            // The same call with an id no item has.
                            let token = case.token();
                            let missing_id = token.id + 1_000_000;
                            let missing = Case {
                                queue,
                                key: &key,
                                token: Some(Token::new(missing_id, &token.owner, token.epoch)),
                            };
                            let as_missing = (op.call)(&mut client, &missing);
                            assert_eq!(
                                outcome.without_id(token.id),
                                as_missing.without_id(missing_id),
                                "{what}: not answered as for a missing item"
                            );
                            assert_ne!(outcome.code(), Some("42501"), "{what}");
                        }
                        Refusal::NoRow => assert_eq!(
                            outcome,
                            Outcome::Value("false".into()),
                            "{what}: the view shows the queue"
                        ),
                    }
                    assert_eq!(
                        common::snapshot(&mut admin),
                        before,
                        "{what} changed something"
                    );
                }
                // A pause (the operator's, or the fixture of a refused
                // resume) would close the queue to the cases after it.
                ok(calls::resume(&mut admin, queue), "resume");
            }
        }
    }
    println!(
        "queue_grants: {cases} calls of {} functions by {} roles on a permitted and a forbidden queue",
        ops.len(),
        MATRIX_ROLES.len()
    );
    assert!(cases >= 250, "only {cases} cases");
}

/// The bulk enqueue (0.12.0) judges each item as `work_enqueue` would: a
/// role with `enqueue` on the queue adds items, and gets an existing
/// cancelled one back as it is under `keep`; running that item again
/// (`on_conflict => 'replace'`) needs `operate` as well: without it the
/// call raises 42501 and inserts not even its new item (one statement);
/// once granted, the same call inserts the new item and runs the
/// cancelled one again with the new payload.
#[test]
fn a_bulk_enqueue_runs_a_cancelled_item_again_only_with_operate() {
    let cluster = cluster();
    let db = "bulk_operate";
    let mut admin = database(&cluster, db, &["qg_bulk"]);
    grant(&mut admin, "enqueue", "billing.*", "qg_bulk");
    enforce(&mut admin);
    prepare(&mut admin, Fixture::Cancelled, PERMITTED, "cancelled");
    let mut bulk = connect_as(&cluster, db, "qg_bulk", SESSION);
    let enqueue_many = |c: &mut Client, new: &str, on_conflict: &str| {
        calls::generated::work_enqueue_many(
            c,
            PERMITTED,
            &[serde_json::json!({"v": new}), serde_json::json!({"v": new})],
            Some(&[Some(new), Some("cancelled")]),
            None,
            None,
            None,
            None,
            Some(on_conflict),
        )
        .map(|rows| {
            rows.into_iter()
                .map(|r| (r.key.unwrap_or_default(), r.inserted == Some(true)))
                .collect::<Vec<_>>()
        })
    };
    let state = |admin: &mut Client| -> (String, String) {
        let row = ok(
            admin.query_one(
                "SELECT state::text, payload::text FROM workfence.items
                  WHERE queue = $1 AND key = 'cancelled'",
                &[&PERMITTED],
            ),
            "the cancelled item",
        );
        (row.get(0), row.get(1))
    };

    // keep: the new item added, the cancelled one returned as it is.
    assert_eq!(
        ok(enqueue_many(&mut bulk, "kept", "keep"), "keep"),
        [("kept".to_owned(), true), ("cancelled".to_owned(), false)]
    );
    assert_eq!(state(&mut admin).0, "cancelled");

    // replace without operate: refused, nothing inserted. (The first item,
    // inserted before the second was judged, drew an id from the sequence,
    // which a rollback does not give back: the rows are compared.)
    let rows = |admin: &mut Client| -> String {
        scalar(
            admin,
            "SELECT string_agg(i::text, '|' ORDER BY i.id) FROM workfence.items AS i",
            &[],
        )
    };
    let before = rows(&mut admin);
    match Outcome::of(enqueue_many(&mut bulk, "replaced", "replace")) {
        Outcome::Error { code, message, .. } => {
            assert_eq!(code, "42501", "{message}");
            assert!(message.contains(PERMITTED), "{message}");
        }
        value => panic!("a cancelled item run again without operate: {value:?}"),
    }
    assert_eq!(
        rows(&mut admin),
        before,
        "a refused bulk enqueue changed an item"
    );

    // With operate: the same call runs it again.
    grant(&mut admin, "operate", "billing.*", "qg_bulk");
    assert_eq!(
        ok(enqueue_many(&mut bulk, "replaced", "replace"), "replace"),
        [
            ("replaced".to_owned(), true),
            ("cancelled".to_owned(), false)
        ]
    );
    assert_eq!(
        state(&mut admin),
        ("pending".to_owned(), r#"{"v": "replaced"}"#.to_owned())
    );
}

#[test]
fn nothing_is_checked_until_grants_are_enforced() {
    let cluster = cluster();
    let mut admin = database(&cluster, "not_enforced", &["qg_other"]);
    // A grant to someone else, not enforced: qg_other, which has none,
    // still reaches every queue, as before 0.7.0.
    grant(&mut admin, "claim", "billing.*", "qg_claim");
    let mut other = connect_as(&cluster, "not_enforced", "qg_other", SESSION);
    for queue in [PERMITTED, FORBIDDEN] {
        let token = common::enqueued_and_claimed(&mut other, queue, "k", "o", "1 minute");
        assert!(ok(calls::finish(&mut other, &token, None), "finish"));
        assert!(ok(calls::may(&mut other, "purge", queue), "work_may"));
    }
    assert_eq!(ok(calls::queue_stats(&mut other), "stats").len(), 2);
    // Enforced, the same role reaches nothing; turned off again, everything.
    enforce(&mut admin);
    let refused = calls::enqueue(&mut other, &Enqueue::new(PERMITTED).key("k2"));
    assert_eq!(Outcome::of(refused).code(), Some("42501"));
    assert!(ok(calls::queue_stats(&mut other), "stats").is_empty());
    assert!(ok(
        calls::enforce_grants(&mut admin, false),
        "stop enforcing"
    ));
    ok(
        calls::enqueue(&mut other, &Enqueue::new(PERMITTED).key("k2")),
        "enqueue once grants are off again",
    );
}

#[test]
fn group_membership_and_set_role_count_as_postgresql_grants_do() {
    let cluster = cluster();
    let mut admin = database(
        &cluster,
        "membership",
        &["qg_team", "qg_member", "qg_noinherit", "qg_other"],
    );
    grant(&mut admin, "enqueue", "billing.*", "qg_team");
    enforce(&mut admin);
    let enqueue = |c: &mut Client, key: &str| {
        Outcome::of(calls::enqueue(c, &Enqueue::new(PERMITTED).key(key))).code() != Some("42501")
    };

    // A member (INHERIT, the default) has the group's grants.
    let mut member = connect_as(&cluster, "membership", "qg_member", SESSION);
    assert!(enqueue(&mut member, "member"));
    // A NOINHERIT member only after SET ROLE to the group.
    let mut noinherit = connect_as(&cluster, "membership", "qg_noinherit", SESSION);
    assert!(!enqueue(&mut noinherit, "noinherit"));
    ok(noinherit.batch_execute("SET ROLE qg_team"), "SET ROLE");
    assert!(enqueue(&mut noinherit, "noinherit as the team"));
    ok(noinherit.batch_execute("RESET ROLE"), "RESET ROLE");
    assert!(!enqueue(&mut noinherit, "noinherit again"));

    // A superuser that SET ROLEs to a role is judged as that role.
    ok(admin.batch_execute("SET ROLE qg_other"), "SET ROLE");
    assert!(!enqueue(&mut admin, "as qg_other"));
    ok(admin.batch_execute("RESET ROLE"), "RESET ROLE");
    assert!(
        enqueue(&mut admin, "superuser"),
        "a superuser reaches every queue"
    );

    // Membership granted and revoked while a session runs: its next call.
    let mut other = connect_as(&cluster, "membership", "qg_other", SESSION);
    assert!(!enqueue(&mut other, "other 1"));
    ok(admin.batch_execute("GRANT qg_team TO qg_other"), "GRANT");
    assert!(enqueue(&mut other, "other 2"));
    ok(
        admin.batch_execute("REVOKE qg_team FROM qg_other"),
        "REVOKE",
    );
    assert!(!enqueue(&mut other, "other 3"));
}

/// A `SECURITY DEFINER` function of a user's, owned by a role whose grants
/// cover the queue, lends its owner's `EXECUTE` but not its queue grants:
/// the session's role is judged (documented in docs/reference.md, *Queue grants*).
#[test]
fn a_users_security_definer_function_is_judged_by_the_sessions_role() {
    let cluster = cluster();
    let mut admin = database(&cluster, "definer", &["qg_owner", "qg_member"]);
    grant(&mut admin, "enqueue", "billing.*", "qg_owner");
    grant(&mut admin, "enqueue", "billing.*", "qg_team");
    enforce(&mut admin);
    ok(
        admin.batch_execute(
            "CREATE FUNCTION public.submit(k text) RETURNS bigint
               LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
               AS $$ SELECT id FROM workfence.work_enqueue('billing.invoices', key => k) $$;
             ALTER FUNCTION public.submit(text) OWNER TO qg_owner;
             REVOKE ALL ON FUNCTION public.submit(text) FROM PUBLIC;
             GRANT EXECUTE ON FUNCTION public.submit(text) TO qg_other, qg_member;",
        ),
        "the user's SECURITY DEFINER function",
    );
    // qg_other has no grant: refused, although the function's owner has one.
    let mut other = connect_as(&cluster, "definer", "qg_other", SESSION);
    let refused = other.query_one("SELECT public.submit('other')", &[]);
    assert_eq!(Outcome::of(refused).code(), Some("42501"));
    // qg_member's group has one: the same function works for it.
    let mut member = connect_as(&cluster, "definer", "qg_member", SESSION);
    ok(
        member.query_one("SELECT public.submit('member')", &[]),
        "submit",
    );
}

#[test]
fn a_revoke_takes_effect_at_the_next_call_and_fences_off_a_held_lease() {
    let cluster = cluster();
    let mut admin = database(&cluster, "revoke", &["qg_claim", "qg_stayer"]);
    grant(&mut admin, "claim", "billing.*", "qg_claim");
    grant(&mut admin, "claim", "billing.*", "qg_stayer");
    enforce(&mut admin);
    let mut worker = connect_as(&cluster, "revoke", "qg_claim", SESSION);
    let mut stayer = connect_as(&cluster, "revoke", "qg_stayer", SESSION);
    for key in ["held", "next"] {
        common::enqueue_new(&mut admin, &Enqueue::new(PERMITTED).key(key));
    }
    let held = ok(
        calls::claim_key(&mut worker, PERMITTED, "held", "w", "300 milliseconds"),
        "claim",
    )
    .expect("claimable")
    .token("w");
    // The session has just used its grant (its decision is cached) ...
    assert!(ok(
        calls::renew(&mut worker, &held, "300 milliseconds"),
        "renew"
    ));
    assert!(ok(
        calls::revoke(&mut admin, "claim", "billing.*", "qg_claim"),
        "revoke"
    ));
    // ... and its very next calls are judged without it.
    let claim = calls::claim_key(&mut worker, PERMITTED, "next", "w", "1 minute");
    assert_eq!(Outcome::of(claim).code(), Some("42501"));
    let before = common::snapshot(&mut admin);
    assert!(!ok(calls::renew(&mut worker, &held, "1 minute"), "renew"));
    assert!(!ok(calls::finish(&mut worker, &held, None), "finish"));
    assert_eq!(
        ok(calls::lease_status(&mut worker, &held), "status"),
        "missing"
    );
    let mut tx = ok(worker.transaction(), "BEGIN");
    let asserted = Outcome::of(calls::assert(&mut tx, &held));
    drop(tx);
    assert_eq!(asserted.code(), Some("55000"), "{asserted:?}");
    assert_eq!(
        common::snapshot(&mut admin),
        before,
        "the revoked worker changed something"
    );
    // The token is still the item's current one: a permitted worker takes
    // the item once the lease lapses, and finishes it.
    assert_eq!(
        ok(calls::lease_status(&mut admin, &held), "status"),
        "current"
    );
    common::wait_out_lease(&mut admin, held.id);
    let taken = ok(
        calls::claim_key(&mut stayer, PERMITTED, "held", "s", "1 minute"),
        "claim",
    )
    .expect("the lapsed lease is claimable")
    .token("s");
    assert!(taken.epoch > held.epoch);
    assert!(ok(calls::finish(&mut stayer, &taken, None), "finish"));
    // Granted again: the next call works again.
    grant(&mut admin, "claim", "billing.*", "qg_claim");
    ok(
        calls::claim_key(&mut worker, PERMITTED, "next", "w", "1 minute"),
        "claim after the grant",
    )
    .expect("claimable");
}

/// Two claimers long-poll one queue; the first to wait loses its grant
/// while it waits. One enqueue wakes one waiter, the one registered first
/// (the lock manager lists a lock's holders in the order they came), so the
/// revoked waiter takes the wake-up: its attempt fails with 42501, and it
/// must pass the wake-up on, or the permitted waiter would get the item only
/// at the end of its wait.
#[test]
fn a_long_poll_ended_by_a_revoke_passes_its_wake_up_on() {
    let cluster = cluster();
    let mut admin = database(&cluster, "long_poll", &["qg_waiter", "qg_stayer"]);
    grant(&mut admin, "claim", "billing.*", "qg_waiter");
    grant(&mut admin, "claim", "billing.*", "qg_stayer");
    enforce(&mut admin);
    const TRIALS: usize = 5;
    for trial in 0..TRIALS {
        let mut revoked = connect_as(&cluster, "long_poll", "qg_waiter", SESSION);
        let mut stayer = connect_as(&cluster, "long_poll", "qg_stayer", SESSION);
        let (revoked_pid, stayer_pid) = (
            common::backend_pid(&mut revoked),
            common::backend_pid(&mut stayer),
        );
        // Waits of 3 s, workfence.long_poll_max's default.
        let revoked_wait = std::thread::spawn(move || {
            Outcome::of(calls::claim(
                &mut revoked,
                PERMITTED,
                "r",
                "1 minute",
                None,
                Some("3 seconds"),
            ))
        });
        common::wait_until_waiting(&mut admin, revoked_pid);
        let stayer_wait = std::thread::spawn(move || {
            ok(
                calls::claim(
                    &mut stayer,
                    PERMITTED,
                    "s",
                    "1 minute",
                    None,
                    Some("3 seconds"),
                ),
                "the permitted waiter's claim",
            )
        });
        common::wait_until_waiting(&mut admin, stayer_pid);
        assert!(ok(
            calls::revoke(&mut admin, "claim", "billing.*", "qg_waiter"),
            "revoke"
        ));
        common::enqueue_new(
            &mut admin,
            &Enqueue::new(PERMITTED).key(format!("t{trial}")),
        );
        let claimed = stayer_wait.join().expect("the permitted waiter");
        let revoked_outcome = revoked_wait.join().expect("the revoked waiter");
        assert_eq!(
            claimed.len(),
            1,
            "trial {trial}: the permitted waiter got nothing"
        );
        // How long the item waited for a claim, by the server's clock.
        let waited: f64 = scalar(
            &mut admin,
            "SELECT extract(epoch FROM i.claimed_at - i.created_at)::float8
               FROM workfence.items AS i WHERE i.id = $1",
            &[&claimed[0].id],
        );
        assert!(
            waited < 1.5,
            "trial {trial}: the item waited {waited:.3} s for a waiter (a wake-up was lost)"
        );
        assert_eq!(
            revoked_outcome.code(),
            Some("42501"),
            "trial {trial}: {revoked_outcome:?}"
        );
        grant(&mut admin, "claim", "billing.*", "qg_waiter");
    }
}

#[test]
fn the_statistics_view_shows_a_role_only_the_queues_it_may_read() {
    let cluster = cluster();
    let mut admin = database(&cluster, "stats", &["qg_read", "qg_grafana"]);
    for queue in [PERMITTED, "billing.refunds", FORBIDDEN] {
        common::enqueue_new(&mut admin, &Enqueue::new(queue).key("k"));
    }
    assert!(ok(
        calls::pause(&mut admin, "hr.empty"),
        "a paused queue without items"
    ));
    grant(&mut admin, "read", "billing.*", "qg_read");
    grant(&mut admin, "read", "*", "workfence_monitor");
    enforce(&mut admin);
    let queues = |c: &mut Client| -> Vec<String> {
        ok(calls::queue_stats(c), "work_queue_stats")
            .into_iter()
            .map(|row| row.queue)
            .collect()
    };
    let mut reader = connect_as(&cluster, "stats", "qg_read", SESSION);
    assert_eq!(queues(&mut reader), ["billing.invoices", "billing.refunds"]);
    let mut grafana = connect_as(&cluster, "stats", "qg_grafana", SESSION);
    assert_eq!(
        queues(&mut grafana),
        [
            "billing.invoices",
            "billing.refunds",
            "hr.empty",
            "hr.payroll"
        ]
    );
    // A query whose own condition records every row it sees (a function
    // with a side effect, not LEAKPROOF) sees only the readable rows,
    // whatever the planner does with the condition (the filter runs in a
    // MATERIALIZED CTE, and the view is a security_barrier besides).
    ok(
        admin.batch_execute(
            "CREATE TABLE public.seen (queue text);
             GRANT INSERT, SELECT ON public.seen TO qg_read;
             CREATE FUNCTION public.peek(q text) RETURNS boolean LANGUAGE plpgsql COST 0.0001
               AS $$ BEGIN INSERT INTO public.seen VALUES (q); RETURN true; END $$;",
        ),
        "a leaky function",
    );
    let rows = ok(
        reader.query(
            "SELECT queue FROM workfence.work_queue_stats WHERE public.peek(queue)",
            &[],
        ),
        "the leaky query",
    );
    assert_eq!(rows.len(), 2);
    let seen: Vec<String> = ok(
        reader.query("SELECT DISTINCT queue FROM public.seen ORDER BY 1", &[]),
        "seen",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(seen, ["billing.invoices", "billing.refunds"]);
}

/// docs/operations.md, *Queue grants*: the roles and the grants, run
/// verbatim, then each sentence of the paragraph after them.
#[test]
fn the_operations_guides_two_team_setup_does_what_it_says() {
    let cluster = cluster();
    ok(
        cluster.create_database("two_teams"),
        "creating the database",
    );
    let mut admin = ok(cluster.connect_to("two_teams"), "connecting");
    ok(
        admin.batch_execute(guide("least-privilege-grants")),
        "the guide's function grants",
    );
    let listed = ok(
        admin.simple_query(guide("queue-grants")),
        "the guide's queue grants",
    );
    let grants: Vec<String> = listed
        .iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) if row.len() == 3 => Some(format!(
                "{} {} {}",
                row.get(0).unwrap_or_default(),
                row.get(1).unwrap_or_default(),
                row.get(2).unwrap_or_default()
            )),
            _ => None,
        })
        .collect();
    assert_eq!(grants.len(), 7, "the guide's listing: {grants:?}");
    assert!(grants.contains(&"billing_worker claim billing.*".to_string()));

    let connect = |role: &str| connect_as(&cluster, "two_teams", role, SESSION);
    let (mut billing_app, mut billing_worker) = (connect("billing_app"), connect("billing_worker"));
    let (mut search_app, mut search_worker) = (connect("search_app"), connect("search_worker"));
    let mut oncall = connect("oncall");

    common::enqueue_new(
        &mut billing_app,
        &Enqueue::new("billing.invoices").key("inv-1"),
    );
    common::enqueue_new(
        &mut search_app,
        &Enqueue::new("search.reindex").key("idx-1"),
    );
    // billing_worker may not claim search's queue: 42501 naming it.
    let claim = calls::claim(
        &mut billing_worker,
        "search.reindex",
        "b",
        "1 minute",
        None,
        None,
    );
    match Outcome::of(claim) {
        Outcome::Error { code, message, .. } => {
            assert_eq!(code, "42501");
            assert!(message.contains("\"search.reindex\""), "{message}");
        }
        other => panic!("billing_worker claimed from search.reindex: {other:?}"),
    }
    // A search item's token, in billing_worker's hands, is refused exactly
    // as a token of no item.
    let search_token =
        common::claimed_one(&mut search_worker, "search.reindex", "s", "1 minute").token("s");
    let before = common::snapshot(&mut admin);
    assert!(!ok(
        calls::finish(&mut billing_worker, &search_token, None),
        "finish"
    ));
    assert_eq!(
        ok(
            calls::lease_status(&mut billing_worker, &search_token),
            "status"
        ),
        "missing"
    );
    assert_eq!(common::snapshot(&mut admin), before);
    assert!(ok(
        calls::finish(&mut search_worker, &search_token, None),
        "finish"
    ));
    // search_app cannot cancel billing's jobs; billing_app can.
    let cancel = calls::cancel(&mut search_app, "billing.invoices", "inv-1");
    assert_eq!(Outcome::of(cancel).code(), Some("42501"));
    assert!(ok(
        calls::cancel(&mut billing_app, "billing.invoices", "inv-1"),
        "cancel"
    ));
    // oncall reads every queue and operates on every queue.
    let queues: Vec<String> = ok(calls::queue_stats(&mut oncall), "stats")
        .into_iter()
        .map(|row| row.queue)
        .collect();
    assert_eq!(queues, ["billing.invoices", "search.reindex"]);
    assert!(ok(
        calls::retry(&mut oncall, "billing.invoices", "inv-1", None),
        "retry"
    ));
    // billing_worker claims its own.
    common::claimed_one(&mut billing_worker, "billing.invoices", "b", "1 minute");
    // The revoke of the paragraph after.
    let revoked = ok(
        admin.query_one(
            "SELECT workfence.work_revoke('claim', 'billing.*', 'billing_worker')",
            &[],
        ),
        "the guide's revoke",
    );
    assert!(revoked.get::<_, bool>(0));
    let claim = calls::claim(
        &mut billing_worker,
        "billing.invoices",
        "b",
        "1 minute",
        None,
        None,
    );
    assert_eq!(Outcome::of(claim).code(), Some("42501"));
}

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
fn grants_and_their_enforcement_survive_pg_dump_and_restore() {
    let cluster = cluster();
    let mut source = database(&cluster, "dumped", &["qg_claim"]);
    grant(&mut source, "claim", "billing.*", "qg_claim");
    grant(&mut source, "read", "*", "workfence_monitor");
    enforce(&mut source);
    let dump = cluster.data_dir().with_extension("queue-grants-dump.sql");
    run_client(&cluster, "pg_dump", "dumped", &["-f"], &dump);
    let mut admin = ok(cluster.connect(), "connecting");
    ok(
        admin.batch_execute("CREATE DATABASE restored_grants"),
        "an empty database for the restore",
    );
    let restore = ["-X", "-q", "-o", "/dev/null", "-v", "ON_ERROR_STOP=1", "-f"];
    run_client(&cluster, "psql", "restored_grants", &restore, &dump);
    ok(std::fs::remove_file(&dump), "removing the dump");
    let mut restored = ok(cluster.connect_to("restored_grants"), "connecting");
    assert_eq!(
        ok(calls::queue_grants(&mut restored), "grants"),
        ok(calls::queue_grants(&mut source), "grants")
    );
    let enforced: i64 = scalar(
        &mut restored,
        "SELECT count(*) FROM workfence.queue_grant_mode",
        &[],
    );
    assert_eq!(enforced, 1, "enforcement restored");
    let mut worker = connect_as(&cluster, "restored_grants", "qg_claim", SESSION);
    let refused = calls::claim(&mut worker, FORBIDDEN, "w", "1 minute", None, None);
    assert_eq!(Outcome::of(refused).code(), Some("42501"));
    ok(
        calls::claim(&mut worker, PERMITTED, "w", "1 minute", None, None),
        "a permitted claim after the restore",
    );
}

#[test]
fn only_the_owner_manages_grants_whatever_execute_it_handed_out() {
    let cluster = cluster();
    // qg_other has EXECUTE on every function, work_grant included.
    let mut admin = database(&cluster, "managers", &["qg_other"]);
    let mut other = connect_as(&cluster, "managers", "qg_other", SESSION);
    let before = common::snapshot(&mut admin);
    for outcome in [
        Outcome::of(calls::grant(&mut other, "claim", "*", "qg_other")),
        Outcome::of(calls::revoke(&mut other, "claim", "*", "qg_other")),
        Outcome::of(calls::enforce_grants(&mut other, true)),
    ] {
        match outcome {
            Outcome::Error { code, message, .. } => {
                assert_eq!(code, "42501");
                assert_eq!(message, "permission denied to manage queue grants");
            }
            value => panic!("a role that is not the owner managed grants: {value:?}"),
        }
    }
    assert_eq!(common::snapshot(&mut admin), before);
    grant(&mut admin, "claim", "*", "qg_other");
}

/// A maintenance command runs the table owner's index expressions as that
/// owner, restricted (PostgreSQL's security-restricted operation), while
/// the session's role stays whoever ran it: a superuser here. The owner's
/// code must not reach the queues through the superuser's rights.
#[test]
fn a_maintenance_commands_restricted_operation_reaches_no_queue() {
    let cluster = cluster();
    let mut admin = database(&cluster, "restricted", &["qg_claim"]);
    grant(&mut admin, "claim", "billing.*", "qg_claim");
    enforce(&mut admin);
    ok(
        admin.batch_execute(
            "CREATE TABLE public.t (i integer);
             INSERT INTO public.t VALUES (1);
             ALTER TABLE public.t OWNER TO qg_claim;
             CREATE FUNCTION public.probe(i integer) RETURNS integer LANGUAGE plpgsql IMMUTABLE
               AS $$ BEGIN
                   IF workfence.work_may('claim', 'hr.payroll') THEN
                       RAISE EXCEPTION 'the table owner''s code reached hr.payroll';
                   END IF;
                   RETURN i;
               END $$;
             ALTER FUNCTION public.probe(integer) OWNER TO qg_claim;",
        ),
        "the owner's table and function",
    );
    // The superuser builds the index and analyzes the table: the probe runs
    // restricted, as qg_claim, in the superuser's session.
    ok(
        admin
            .batch_execute("CREATE INDEX t_probe ON public.t (public.probe(i)); ANALYZE public.t;"),
        "CREATE INDEX and ANALYZE of the owner's expression",
    );
    // Outside such an operation, the superuser reaches every queue.
    assert!(ok(
        calls::may(&mut admin, "claim", "hr.payroll"),
        "work_may"
    ));
}

#[test]
fn a_revoke_counts_inside_an_open_repeatable_read_transaction() {
    let cluster = cluster();
    let mut admin = database(&cluster, "repeatable", &["qg_claim"]);
    grant(&mut admin, "claim", "billing.*", "qg_claim");
    enforce(&mut admin);
    for key in ["a", "b"] {
        common::enqueue_new(&mut admin, &Enqueue::new(PERMITTED).key(key));
    }
    let mut worker = connect_as(&cluster, "repeatable", "qg_claim", SESSION);
    let mut tx = ok(
        worker
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .start(),
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
    );
    // The transaction's snapshot is taken, and the grant used.
    ok(
        calls::claim_key(&mut tx, PERMITTED, "a", "w", "1 minute"),
        "a claim under the grant",
    )
    .expect("claimable");
    assert!(ok(
        calls::revoke(&mut admin, "claim", "billing.*", "qg_claim"),
        "revoke"
    ));
    let after = calls::claim_key(&mut tx, PERMITTED, "b", "w", "1 minute");
    assert_eq!(Outcome::of(after).code(), Some("42501"));
}

/// `LIKE`'s wildcards and escape in queue names are matched as themselves,
/// by the token statements' scoped forms (`LIKE ANY` of escaped patterns)
/// as by the checks of calls that name a queue.
#[test]
fn queue_names_with_like_wildcards_are_matched_literally() {
    let cluster = cluster();
    let mut admin = database(&cluster, "wildcards", &["qg_patterns"]);
    for queues in ["a_b", "x%y*", "b\\c"] {
        grant(&mut admin, "claim", queues, "qg_patterns");
    }
    enforce(&mut admin);
    let mut role = connect_as(&cluster, "wildcards", "qg_patterns", SESSION);
    for (queue, covered) in [
        ("a_b", true),
        ("axb", false),
        ("a_bc", false),
        ("x%yz", true),
        ("x%y", true),
        ("xzyz", false),
        ("x%zy", false),
        ("b\\c", true),
        ("bc", false),
        ("b\\", false),
    ] {
        let token = common::enqueued_and_claimed(&mut admin, queue, "k", "w", "1 minute");
        let finished = ok(calls::finish(&mut role, &token, None), "finish");
        assert_eq!(finished, covered, "a token of an item in {queue:?}");
        assert_eq!(
            ok(calls::may(&mut role, "claim", queue), "work_may"),
            covered,
            "{queue:?}"
        );
    }
}

#[test]
fn a_dropped_roles_grants_are_forgotten_at_the_next_change() {
    let cluster = cluster();
    let mut admin = database(&cluster, "dropped_role", &[]);
    grant(&mut admin, "claim", "billing.*", "qg_gone");
    ok(admin.batch_execute("DROP ROLE qg_gone"), "DROP ROLE");
    let listed = ok(calls::queue_grants(&mut admin), "grants");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].role.starts_with("unknown (OID="), "{listed:?}");
    grant(&mut admin, "read", "*", "workfence_monitor");
    let listed = ok(calls::queue_grants(&mut admin), "grants");
    assert_eq!(
        listed,
        [calls::QueueGrant {
            role: "workfence_monitor".into(),
            capability: "read".into(),
            queues: "*".into(),
        }]
    );
}

/// An error's SQLSTATE, message, detail and hint with the id `id` written
/// `<id>`, so that the answers for two ids compare.
fn error_without(outcome: &Outcome, id: i64) -> Outcome {
    match outcome {
        Outcome::Error {
            code,
            message,
            detail,
            hint,
        } => {
            let id = id.to_string();
            Outcome::Error {
                code: code.clone(),
                message: message.replace(&id, "<id>"),
                detail: detail.as_ref().map(|d| d.replace(&id, "<id>")),
                hint: hint.clone(),
            }
        }
        value => value.clone(),
    }
}

#[test]
fn a_workflows_parents_children_and_graph_follow_the_queue_grants() {
    let cluster = cluster();
    let db = "workflow_grants";
    let mut admin = database(&cluster, db, &["qg_flow", "qg_enqueue", "qg_read"]);
    for capability in ["enqueue", "read", "claim"] {
        grant(&mut admin, capability, "billing.*", "qg_flow");
    }
    grant(&mut admin, "enqueue", "billing.*", "qg_enqueue");
    grant(&mut admin, "read", "billing.*", "qg_read");
    enforce(&mut admin);
    let billed = common::enqueue_new(&mut admin, &Enqueue::new(PERMITTED).key("billed"));
    let payroll = common::enqueue_new(&mut admin, &Enqueue::new(FORBIDDEN).key("payroll"));
    let mut flow = connect_as(&cluster, db, "qg_flow", SESSION);

    // A parent the role may read: the child waits for it.
    let child = common::enqueue_new(
        &mut flow,
        &Enqueue::new(PERMITTED).key("child").after(&[billed]),
    );
    let state: String = scalar(
        &mut admin,
        "SELECT state::text FROM workfence.items WHERE id = $1",
        &[&child],
    );
    assert_eq!(state, "waiting");

    // A parent in a queue it may not read is refused exactly as an id no
    // item has, and changes nothing; so is every parent of a role that may
    // not read, its own queue's too.
    let before = common::snapshot(&mut admin);
    let with_parent = |c: &mut Client, queue: &str, parent: i64| {
        Outcome::of(
            calls::enqueue(c, &Enqueue::new(queue).key("late").after(&[parent])).map(|e| e.id),
        )
    };
    let hidden = with_parent(&mut flow, PERMITTED, payroll);
    let missing_id = payroll + 1_000_000;
    let missing = with_parent(&mut flow, PERMITTED, missing_id);
    assert_eq!(hidden.code(), Some("23503"), "{hidden:?}");
    assert_eq!(
        error_without(&hidden, payroll),
        error_without(&missing, missing_id),
        "a parent the role may not read is not told from a missing one"
    );
    let mut blind = connect_as(&cluster, db, "qg_enqueue", SESSION);
    let unread = with_parent(&mut blind, PERMITTED, billed);
    assert_eq!(
        error_without(&unread, billed),
        error_without(&with_parent(&mut blind, PERMITTED, missing_id), missing_id),
        "an enqueuer without read: its own queue's parent is missing to it"
    );
    // A child in a queue the role may not enqueue to: 42501 naming it.
    match with_parent(&mut flow, FORBIDDEN, billed) {
        Outcome::Error { code, message, .. } => {
            assert_eq!(code, "42501", "{message}");
            assert!(message.contains(FORBIDDEN), "{message}");
        }
        value => panic!("a child in {FORBIDDEN} was enqueued: {value:?}"),
    }
    assert_eq!(
        common::snapshot(&mut admin),
        before,
        "a refusal changed something"
    );

    // A graph across two queues (the superuser's): the role sees the rows
    // of the queues it may read, and nothing around an item it may not.
    let joined = common::enqueue_new(
        &mut admin,
        &Enqueue::new(PERMITTED)
            .key("joined")
            .after(&[billed, payroll]),
    );
    let graph = |c: &mut Client, id: i64| -> Vec<(i64, String, i32, Vec<i64>)> {
        ok(calls::generated::work_workflow(c, id), "work_workflow")
            .into_iter()
            .map(|r| {
                (
                    r.id.expect("id"),
                    r.queue.expect("queue"),
                    r.depth.expect("depth"),
                    r.parents.expect("parents"),
                )
            })
            .collect()
    };
    let everything = graph(&mut admin, joined);
    assert_eq!(everything.len(), 3, "{everything:?}");
    assert_eq!(
        graph(&mut flow, joined),
        [
            (joined, PERMITTED.to_owned(), 0, vec![billed, payroll]),
            (billed, PERMITTED.to_owned(), -1, vec![]),
        ],
        "the rows of billing.* only (the parents array still names every parent)"
    );
    assert_eq!(
        graph(&mut flow, payroll),
        [],
        "nothing around an unreadable item"
    );
    assert_eq!(graph(&mut flow, billed).len(), 3, "billed, child, joined");

    // The parents done, the joined child is claimed: its token reads the
    // parents' results for a role with claim on its queue, and for a role
    // without it is a missing item's (NULL).
    for (queue, key) in [(PERMITTED, "billed"), (FORBIDDEN, "payroll")] {
        let token = ok(
            calls::claim_key(&mut admin, queue, key, "w", "1 minute"),
            "claim",
        )
        .expect("a parent to run")
        .token("w");
        let result = serde_json::json!({ "from": key });
        assert!(ok(
            calls::finish(&mut admin, &token, Some(&result)),
            "finish"
        ));
    }
    let claim = ok(
        calls::claim_key(&mut flow, PERMITTED, "joined", "w", "1 minute"),
        "claim the joined child",
    )
    .expect("released by its parents' finishes");
    let results = |c: &mut Client, id: i64| -> Option<String> {
        ok(
            c.query_one(
                "SELECT workfence.work_parent_results($1, 'w', $2)::text",
                &[&id, &claim.epoch],
            ),
            "work_parent_results",
        )
        .get(0)
    };
    // Every parent's result, the unreadable queue's too: the claim grant on
    // the child's queue decides, as the enqueue of the child was allowed
    // to name its parents.
    let read: serde_json::Value =
        serde_json::from_str(&results(&mut flow, joined).expect("a current token")).unwrap();
    assert_eq!(
        read,
        serde_json::json!({
            billed.to_string(): {"from": "billed"},
            payroll.to_string(): {"from": "payroll"},
        })
    );
    let mut reader = connect_as(&cluster, db, "qg_read", SESSION);
    assert_eq!(
        results(&mut reader, joined),
        None,
        "no claim grant: as missing"
    );
    assert_eq!(results(&mut reader, joined + 1_000_000), None);
}
