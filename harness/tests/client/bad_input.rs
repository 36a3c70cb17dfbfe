//! Bad input, as a client sees it: every function × every bad argument.
//!
//! The table is generated, not listed: each function is described by its
//! arguments, each argument by its SQL type, a valid value and the bad values
//! of its kind (NULL, empty, blank, too long, control characters, zero,
//! negative or absurd intervals, counts out of range...). Every call that
//! replaces exactly one valid argument with one bad value must fail with the
//! documented SQLSTATE, a message naming the argument, a hint (and, for
//! 22023, a detail), and must change no row and draw no id or epoch (a
//! snapshot of the table and both sequences, before and after). The valid
//! call itself is run too, in a rolled-back transaction, so every error is
//! known to come from the one bad value.
//!
//! Tokens that are merely not current (unknown ids, epochs of another item,
//! the wrong owner, a finished or cancelled item) are not errors: the
//! functions refuse them (false, zero rows), except `work_assert`, which
//! raises 55000. Those are checked the same way.
//!
//! Both tables run twice: on a database with the extension, and through a
//! PL/Proxy router in front of four shards (`router/install.sql`,
//! docs/scaling.md), where every error must come back as the shard raised
//! it and nothing may change on any shard.
//!
//! Needs the extension installed (scripts/test.sh does that first).

use crate::common;

use common::ok;

use postgres::error::DbError;
use postgres::Client;

/// `"q".repeat(n)`, for the length limits.
fn long(c: char, bytes: usize) -> String {
    c.to_string().repeat(bytes)
}

/// One bad value of an argument and the SQLSTATE it must raise.
struct Bad {
    value: Option<String>,
    sqlstate: &'static str,
}

fn bad(value: Option<&str>, sqlstate: &'static str) -> Bad {
    Bad {
        value: value.map(str::to_owned),
        sqlstate,
    }
}

fn null() -> Bad {
    bad(None, "22004")
}

fn invalid(value: &str) -> Bad {
    bad(Some(value), "22023")
}

/// One argument of a function: its SQL name and type, a valid value (text,
/// cast to the type in SQL; None = NULL) and the bad values of its kind.
struct Arg {
    name: &'static str,
    sql_type: &'static str,
    valid: Option<String>,
    bad: Vec<Bad>,
}

fn arg(name: &'static str, sql_type: &'static str, valid: Option<&str>, bad: Vec<Bad>) -> Arg {
    Arg {
        name,
        sql_type,
        valid: valid.map(str::to_owned),
        bad,
    }
}

fn queue_arg() -> Arg {
    arg(
        "queue",
        "text",
        Some("q"),
        vec![
            null(),
            invalid(""),
            invalid(&long('q', 129)),
            invalid("a\nb"),
            invalid("tab\t"),
            invalid("del\u{7f}"),
        ],
    )
}

fn owner_arg() -> Arg {
    arg(
        "owner",
        "text",
        Some("w"),
        vec![
            null(),
            invalid(""),
            invalid("   "),
            invalid("\t\n"),
            invalid(&long('o', 257)),
            invalid(&long('é', 129)),
            invalid("laptop\n"),
        ],
    )
}

/// `key` where it is required (`work_claim_key`, `work_cancel`); in
/// `work_enqueue` NULL means "generate one".
fn key_arg(required: bool) -> Arg {
    let mut bad = vec![invalid(""), invalid(&long('k', 513)), invalid("k\tk")];
    if required {
        bad.insert(0, null());
    }
    arg("key", "text", Some("a"), bad)
}

fn lease_arg() -> Arg {
    arg(
        "lease",
        "interval",
        Some("1 minute"),
        vec![
            null(),
            invalid("0"),
            invalid("-1 second"),
            invalid("7 days 00:00:00.000001"),
            invalid("8 days"),
            invalid("100000 years"),
            invalid("1 day -1 hour"),
            invalid("1 mon -29 days"),
        ],
    )
}

/// `delay` (`work_release`, required) and `retry_in` (`work_fail`, NULL =
/// backoff).
fn delay_arg(name: &'static str, required: bool) -> Arg {
    let mut bad = vec![
        invalid("-1 second"),
        invalid("366 days"),
        // 365 days by the 30-day rule, 370 or 371 real days from any date.
        invalid("12 mon 5 days"),
        invalid("1000 years"),
        invalid("1 mon -29 days"),
    ];
    if required {
        bad.insert(0, null());
    }
    arg(name, "interval", Some("0"), bad)
}

fn count_arg(name: &'static str, valid: &str) -> Arg {
    arg(
        name,
        "integer",
        Some(valid),
        vec![
            null(),
            invalid("0"),
            invalid("-1"),
            invalid("1001"),
            invalid("2147483647"),
        ],
    )
}

/// `concurrency`, `rate` and `per_group` of `work_limit`: 1 to 10000, NULL
/// for no limit (for per_group: serial groups).
fn limit_arg(name: &'static str) -> Arg {
    arg(
        name,
        "integer",
        Some("5"),
        vec![
            invalid("0"),
            invalid("-1"),
            invalid("10001"),
            invalid("-2147483648"),
        ],
    )
}

fn not_null(name: &'static str, sql_type: &'static str, valid: &str) -> Arg {
    arg(name, sql_type, Some(valid), vec![null()])
}

/// `capability` of the queue-grant functions.
fn capability_arg() -> Arg {
    arg(
        "capability",
        "text",
        Some("claim"),
        vec![
            null(),
            invalid(""),
            invalid("Claim"),
            invalid("all"),
            invalid("claim "),
        ],
    )
}

/// The arguments of `work_grant` and `work_revoke`: a capability, queues (a
/// name or a prefix and `*`) and an existing role (the cluster's superuser).
fn grant_args() -> Vec<Arg> {
    vec![
        capability_arg(),
        arg(
            "queues",
            "text",
            Some("q.*"),
            vec![
                null(),
                invalid(""),
                invalid(&long('q', 129)),
                invalid(&format!("{}*", long('q', 129))),
                invalid("a\nb*"),
                invalid("\t*"),
            ],
        ),
        arg(
            "role",
            "text",
            Some("postgres"),
            vec![
                null(),
                invalid(""),
                invalid(&long('r', 64)),
                invalid("postgres\n"),
                bad(Some("no_such_role"), "42704"),
                bad(Some("Postgres"), "42704"),
            ],
        ),
    ]
}

/// A function: its name and arguments, in order.
struct Function {
    name: &'static str,
    args: Vec<Arg>,
}

/// The token every token function is called with: item A's current claim.
struct Fixture {
    a_id: i64,
    a_epoch: i64,
    b_id: i64,
    b_epoch: i64,
    done_id: i64,
    done_epoch: i64,
    cancelled_id: i64,
    cancelled_epoch: i64,
}

fn functions(f: &Fixture) -> Vec<Function> {
    let id = || not_null("id", "bigint", &f.a_id.to_string());
    let epoch = || not_null("epoch", "bigint", &f.a_epoch.to_string());
    vec![
        Function {
            name: "work_enqueue",
            args: vec![
                queue_arg(),
                not_null("payload", "jsonb", "{}"),
                key_arg(false),
                arg("run_at", "timestamptz", None, vec![invalid("infinity")]),
                not_null("priority", "integer", "0"),
                count_arg("max_attempts", "25"),
                arg(
                    "max_run",
                    "interval",
                    None,
                    vec![
                        invalid("0"),
                        invalid("-1 second"),
                        invalid("365 days 00:00:00.000001"),
                        invalid("1000 years"),
                        invalid("1 day -1 hour"),
                    ],
                ),
                // NULL: an item in no group.
                arg(
                    "group_key",
                    "text",
                    None,
                    vec![
                        invalid(""),
                        invalid(&long('g', 129)),
                        invalid(&long('é', 65)),
                        invalid("g\ng"),
                        invalid("tab\t"),
                        invalid("del\u{7f}"),
                    ],
                ),
            ],
        },
        Function {
            name: "work_claim",
            args: vec![
                queue_arg(),
                owner_arg(),
                lease_arg(),
                count_arg("max_items", "1"),
                arg(
                    "wait",
                    "interval",
                    Some("0"),
                    vec![
                        null(),
                        invalid("-1 second"),
                        invalid("01:00:00.000001"),
                        invalid("1 day"),
                        invalid("1 day -23 hours"),
                    ],
                ),
            ],
        },
        Function {
            name: "work_claim_key",
            args: vec![queue_arg(), key_arg(true), owner_arg(), lease_arg()],
        },
        Function {
            name: "work_renew",
            args: vec![id(), owner_arg(), epoch(), lease_arg()],
        },
        Function {
            name: "work_finish",
            args: vec![
                id(),
                owner_arg(),
                epoch(),
                arg("result", "jsonb", None, vec![]),
            ],
        },
        Function {
            name: "work_finish_many",
            args: vec![
                owner_arg(),
                arg(
                    "ids",
                    "bigint[]",
                    Some(&format!("{{{}}}", f.a_id)),
                    vec![null(), bad(Some(&format!("{{{},NULL}}", f.a_id)), "22004")],
                ),
                arg(
                    "epochs",
                    "bigint[]",
                    Some(&format!("{{{}}}", f.a_epoch)),
                    vec![
                        null(),
                        bad(Some("{NULL}"), "22004"),
                        invalid("{}"),
                        invalid(&format!("{{{},{}}}", f.a_epoch, f.a_epoch)),
                    ],
                ),
                arg(
                    "results",
                    "jsonb[]",
                    None,
                    vec![invalid("{}"), invalid("{1,2}")],
                ),
            ],
        },
        Function {
            name: "work_release",
            args: vec![id(), owner_arg(), epoch(), delay_arg("delay", true)],
        },
        Function {
            name: "work_fail",
            args: vec![
                id(),
                owner_arg(),
                epoch(),
                not_null("error", "text", "boom"),
                delay_arg("retry_in", false),
            ],
        },
        Function {
            name: "work_finish_and_claim",
            args: vec![
                queue_arg(),
                owner_arg(),
                lease_arg(),
                not_null("last_id", "bigint", &f.a_id.to_string()),
                not_null("last_epoch", "bigint", &f.a_epoch.to_string()),
                arg("result", "jsonb", None, vec![]),
                count_arg("max_items", "1"),
            ],
        },
        Function {
            name: "work_fail_and_claim",
            args: vec![
                queue_arg(),
                owner_arg(),
                lease_arg(),
                not_null("last_id", "bigint", &f.a_id.to_string()),
                not_null("last_epoch", "bigint", &f.a_epoch.to_string()),
                not_null("error", "text", "boom"),
                delay_arg("retry_in", false),
                count_arg("max_items", "1"),
            ],
        },
        Function {
            name: "work_assert",
            args: vec![id(), owner_arg(), epoch()],
        },
        Function {
            name: "work_cancel",
            args: vec![queue_arg(), key_arg(true)],
        },
        Function {
            name: "work_lease_status",
            args: vec![id(), owner_arg(), epoch()],
        },
        Function {
            name: "work_retry",
            args: vec![
                queue_arg(),
                key_arg(true),
                arg("run_at", "timestamptz", None, vec![invalid("infinity")]),
            ],
        },
        Function {
            name: "work_reschedule",
            args: vec![
                queue_arg(),
                key_arg(true),
                arg(
                    "run_at",
                    "timestamptz",
                    Some("2026-01-01 00:00:00+00"),
                    vec![null(), invalid("infinity")],
                ),
            ],
        },
        Function {
            name: "work_pause",
            args: vec![queue_arg()],
        },
        Function {
            name: "work_limit",
            args: vec![
                queue_arg(),
                limit_arg("concurrency"),
                limit_arg("rate"),
                arg(
                    "per",
                    "interval",
                    Some("1 second"),
                    vec![
                        null(),
                        invalid("0"),
                        invalid("-1 second"),
                        invalid("1 day 00:00:00.000001"),
                        invalid("2 days"),
                        invalid("1 mon -29 days"),
                    ],
                ),
                limit_arg("per_group"),
            ],
        },
        Function {
            name: "work_resume",
            args: vec![queue_arg()],
        },
        Function {
            name: "work_item",
            args: vec![queue_arg(), key_arg(true)],
        },
        Function {
            name: "work_item",
            args: vec![id()],
        },
        Function {
            name: "work_items",
            args: vec![
                queue_arg(),
                arg(
                    "state",
                    "text",
                    None,
                    vec![
                        invalid(""),
                        invalid("scheduled"),
                        invalid("expired"),
                        invalid("PENDING"),
                    ],
                ),
                arg("after", "bigint", None, vec![]),
                count_arg("max", "50"),
            ],
        },
        Function {
            name: "queue_counters",
            args: vec![queue_arg()],
        },
        Function {
            name: "work_grant",
            args: grant_args(),
        },
        Function {
            name: "work_revoke",
            args: grant_args(),
        },
        Function {
            name: "work_enforce_grants",
            args: vec![not_null("enforced", "boolean", "true")],
        },
        Function {
            name: "work_may",
            args: vec![capability_arg(), queue_arg()],
        },
        Function {
            name: "work_purge",
            args: vec![
                arg(
                    "older_than",
                    "interval",
                    Some("7 days"),
                    vec![
                        null(),
                        invalid("-1 second"),
                        invalid("3651 days"),
                        invalid("1 mon -29 days"),
                    ],
                ),
                {
                    // NULL: every queue.
                    let mut queue = queue_arg();
                    queue.valid = Some("q".into());
                    queue.bad.retain(|b| b.value.is_some());
                    queue
                },
            ],
        },
    ]
}

/// `SELECT count(*) FROM workfence.f($1::text::t1, ...)`: every value is a
/// text parameter cast on the server, so NULL stays NULL and nothing is
/// formatted into the SQL.
fn call_sql(function: &Function) -> String {
    let params: Vec<String> = function
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| format!("${}::text::{}", i + 1, a.sql_type))
        .collect();
    format!(
        "SELECT count(*) FROM workfence.{}({})",
        function.name,
        params.join(", ")
    )
}

fn call(client: &mut Client, sql: &str, values: &[Option<String>]) -> Result<i64, postgres::Error> {
    let params: Vec<&(dyn postgres::types::ToSql + Sync)> = values
        .iter()
        .map(|v| v as &(dyn postgres::types::ToSql + Sync))
        .collect();
    client.query_one(sql, &params).map(|row| row.get(0))
}

fn db_error(err: &postgres::Error) -> &DbError {
    err.as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {err}"))
}

fn fixture(client: &mut Client) -> Fixture {
    let claim = |client: &mut Client, key: &str| -> (i64, i64) {
        let row = ok(
            client.query_one(
                "SELECT id, epoch FROM workfence.work_claim_key('q', $1, 'w', '1 hour')",
                &[&key],
            ),
            "claim",
        );
        (row.get(0), row.get(1))
    };
    ok(
        client.batch_execute(
            "SELECT workfence.work_enqueue('q', '{}', k)
               FROM unnest(ARRAY['a', 'b', 'done', 'cancelled', 'pending']) AS k",
        ),
        "enqueue",
    );
    let (a_id, a_epoch) = claim(client, "a");
    let (b_id, b_epoch) = claim(client, "b");
    let (done_id, done_epoch) = claim(client, "done");
    let (cancelled_id, cancelled_epoch) = claim(client, "cancelled");
    let finished: bool = ok(
        client.query_one(
            "SELECT workfence.work_finish($1, 'w', $2)",
            &[&done_id, &done_epoch],
        ),
        "finish",
    )
    .get(0);
    let cancelled: bool = ok(
        client.query_one("SELECT workfence.work_cancel('q', 'cancelled')", &[]),
        "cancel",
    )
    .get(0);
    assert!(
        finished && cancelled,
        "fixture: finish {finished}, cancel {cancelled}"
    );
    Fixture {
        a_id,
        a_epoch,
        b_id,
        b_epoch,
        done_id,
        done_epoch,
        cancelled_id,
        cancelled_epoch,
    }
}

#[test]
fn every_bad_argument_of_every_function_is_rejected_and_changes_nothing() {
    let (cluster, mut client) = common::own_cluster_with_database("bad_input");
    let mut observer = ok(cluster.connect_to("bad_input"), "connecting the observer");
    let cases = every_bad_argument(&mut client, Target::Direct, &mut || {
        common::snapshot(&mut observer)
    });
    println!("bad_input: {cases}");
}

/// The same table through a PL/Proxy router in front of four shards
/// (docs/scaling.md): every bad call fails with the SQLSTATE, the message
/// naming the argument, the hint and the detail the shard raised (PL/Proxy
/// passes them on, prefixed), and changes nothing on any shard.
#[test]
fn every_bad_argument_is_rejected_the_same_through_the_router() {
    let cluster = common::own_cluster();
    let router = common::router(&cluster, "bad_input");
    let mut client = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let cases = every_bad_argument(&mut client, Target::Router, &mut || {
        common::shards_snapshot(&mut shards)
    });
    println!("bad_input through the router: {cases}");
}

/// Where a test's calls go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The database with the extension.
    Direct,
    /// A router database (PL/Proxy) in front of shards with the extension.
    Router,
}

/// Runs every bad call of the table on `client`, checking each error and
/// that `snapshot` (of everything a call could change) stays the same; a
/// summary of what ran. Directly, the valid call of each function is run
/// first in a rolled-back transaction, so every error is known to come from
/// its one bad value; through a router that cannot be (each shard call
/// commits on its own), and the direct run has shown it for the same table.
fn every_bad_argument(
    client: &mut Client,
    target: Target,
    snapshot: &mut dyn FnMut() -> String,
) -> String {
    let fixture = fixture(client);
    let functions = functions(&fixture);

    let mut cases = 0;
    for function in &functions {
        let sql = call_sql(function);
        let valid: Vec<Option<String>> = function.args.iter().map(|a| a.valid.clone()).collect();

        if target == Target::Direct {
            // The valid call succeeds (rolled back, so it changes nothing).
            let mut tx = ok(client.transaction(), "BEGIN");
            let params: Vec<&(dyn postgres::types::ToSql + Sync)> = valid
                .iter()
                .map(|v| v as &(dyn postgres::types::ToSql + Sync))
                .collect();
            if let Err(err) = tx.query_one(&sql, &params) {
                panic!("{}: the valid call failed: {err}", function.name);
            }
            ok(tx.rollback(), "ROLLBACK");
        }
        // After the valid call: a rolled-back INSERT still draws from
        // items_id_seq (sequences are not transactional).
        let before = snapshot();

        for (position, argument) in function.args.iter().enumerate() {
            for bad in &argument.bad {
                cases += 1;
                let mut values = valid.clone();
                values[position] = bad.value.clone();
                let what = format!("{}({} = {:?})", function.name, argument.name, bad.value);
                let err = match call(client, &sql, &values) {
                    Ok(rows) => panic!("{what} was accepted ({rows} rows)"),
                    Err(err) => err,
                };
                let db = db_error(&err);
                assert_eq!(db.code().code(), bad.sqlstate, "{what}: {db:?}");
                let named = format!("argument \"{}\"", argument.name);
                assert!(
                    db.message().contains(&named),
                    "{what}: message {:?}",
                    db.message()
                );
                assert!(db.hint().is_some(), "{what}: no HINT");
                if bad.sqlstate == "22023" {
                    assert!(db.detail().is_some(), "{what}: no DETAIL");
                }
                assert_eq!(snapshot(), before, "{what} changed something");
            }
        }
    }
    assert!(cases >= 100, "only {cases} cases: the table lost its rows");
    format!(
        "{cases} bad calls over {} functions rejected",
        functions.len()
    )
}

#[test]
fn tokens_that_are_not_current_are_refused_and_change_nothing() {
    let (cluster, mut client) = common::own_cluster_with_database("not_current");
    let mut observer = ok(cluster.connect_to("not_current"), "connecting the observer");
    tokens_that_are_not_current(&mut client, &mut || common::snapshot(&mut observer));
}

/// The same through a PL/Proxy router in front of four shards: the shards
/// refuse, the router's work_assert raises 55000 as the shard's would.
#[test]
fn tokens_that_are_not_current_are_refused_through_the_router() {
    let cluster = common::own_cluster();
    let router = common::router(&cluster, "not_current");
    let mut client = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    tokens_that_are_not_current(&mut client, &mut || common::shards_snapshot(&mut shards));
}

/// Every call with a token that is not current, and every claim of what is
/// not claimable, on `client`: refused, and `snapshot` unchanged.
fn tokens_that_are_not_current(client: &mut Client, snapshot: &mut dyn FnMut() -> String) {
    let f = fixture(client);
    let unknown = f.a_id.max(f.b_id).max(f.done_id).max(f.cancelled_id) + 1000;
    // (what, id, owner, epoch): none of them is a current token.
    let tokens: Vec<(&str, i64, &str, i64)> = vec![
        ("unknown id", unknown, "w", f.a_epoch),
        ("epoch of another item", f.a_id, "w", f.b_epoch),
        ("epoch from the future", f.a_id, "w", f.a_epoch + 1_000_000),
        ("wrong owner", f.a_id, "w2", f.a_epoch),
        ("owner with other spacing", f.a_id, " w", f.a_epoch),
        ("finished item", f.done_id, "w", f.done_epoch),
        ("cancelled item", f.cancelled_id, "w", f.cancelled_epoch),
    ];
    let refusals = [
        "SELECT workfence.work_renew($1, $2, $3, '1 minute')",
        "SELECT workfence.work_release($1, $2, $3)",
        "SELECT workfence.work_fail($1, $2, $3, 'boom')",
    ];
    let finishes = [
        "SELECT workfence.work_finish($1, $2, $3)",
        "SELECT finished FROM workfence.work_finish_many($2, ARRAY[$1::bigint], ARRAY[$3::bigint])",
    ];
    let before = snapshot();
    for (what, id, owner, epoch) in &tokens {
        for sql in refusals {
            let accepted: bool = ok(client.query_one(sql, &[id, owner, epoch]), sql).get(0);
            assert!(!accepted, "{sql} with a token with {what}");
        }
        // A finished item's own token may repeat its finish (true, no
        // change); every other token is refused.
        for sql in finishes {
            let finished: bool = ok(client.query_one(sql, &[id, owner, epoch]), sql).get(0);
            assert_eq!(finished, *what == "finished item", "{sql} with {what}");
        }
        let err = client
            .query_one(
                "SELECT workfence.work_assert($1, $2, $3)",
                &[id, owner, epoch],
            )
            .expect_err(&format!("work_assert with {what} must raise"));
        let db = db_error(&err);
        assert_eq!(db.code().code(), "55000", "work_assert with {what}: {db:?}");
        assert!(
            db.message().starts_with("lease lost"),
            "{what}: {}",
            db.message()
        );
        assert!(
            db.detail().is_some() && db.hint().is_some(),
            "{what}: {db:?}"
        );
        assert_eq!(snapshot(), before, "a token with {what} changed something");
    }
    // Claims of what is not claimable return nothing and change nothing.
    for (sql, what) in [
        (
            "SELECT count(*) FROM workfence.work_claim('no such queue', 'w', '1 minute', 10)",
            "unknown queue",
        ),
        (
            "SELECT count(*) FROM workfence.work_claim_key('q', 'no such key', 'w', '1 minute')",
            "unknown key",
        ),
        (
            "SELECT count(*) FROM workfence.work_claim_key('q', 'a', 'w', '1 minute')",
            "item under a live lease",
        ),
        (
            "SELECT count(*) FROM workfence.work_claim_key('q', 'done', 'w', '1 minute')",
            "finished item",
        ),
        (
            "SELECT count(*) FROM workfence.work_claim_key('q', 'cancelled', 'w', '1 minute')",
            "cancelled item",
        ),
    ] {
        let n: i64 = ok(client.query_one(sql, &[]), what).get(0);
        assert_eq!(n, 0, "claim of an {what}");
    }
    let cancels: bool = ok(
        client.query_one("SELECT workfence.work_cancel('q', 'done')", &[]),
        "cancel",
    )
    .get(0);
    assert!(!cancels, "a finished item cannot be cancelled");
    assert_eq!(snapshot(), before, "refused claims changed something");
}
