//! Bad input, as a client sees it: every function × every bad argument.
//!
//! The table is generated, not listed: the functions and their arguments
//! (names, SQL types, which are `DEFAULT NULL`) are `sql/functions.toml`'s,
//! and each argument gets a valid value and the bad values of its name's
//! kind (`kind_of`: empty, blank, too long, control characters, zero,
//! negative or absurd intervals, counts out of range...), plus NULL where it
//! is not declared `DEFAULT NULL`. A new function whose arguments are named
//! as others' needs no edit here. Every call that
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

fn invalid(value: &str) -> Bad {
    bad(Some(value), "22023")
}

/// One argument of a function: its SQL name and type, a valid value (text,
/// cast to the type in SQL; None = NULL) and its bad values.
struct Arg {
    name: String,
    sql_type: String,
    valid: Option<String>,
    bad: Vec<Bad>,
}

/// A function: its name and arguments, in order.
struct Function {
    name: String,
    args: Vec<Arg>,
}

/// What every argument of one name shares, in whichever function it
/// appears: a valid value (None = NULL) and its bad values other than NULL.
struct Kind {
    valid: Option<String>,
    bad: Vec<Bad>,
}

fn kind(valid: Option<&str>, bad: Vec<Bad>) -> Kind {
    Kind {
        valid: valid.map(str::to_owned),
        bad,
    }
}

/// `max_items`, `max_attempts`, `max`: 1 to 1000.
fn count_kind(valid: &str) -> Kind {
    kind(
        Some(valid),
        vec![
            invalid("0"),
            invalid("-1"),
            invalid("1001"),
            invalid("2147483647"),
        ],
    )
}

/// The kind of each argument name of the SQL surface, or None for a name
/// this table does not know yet (the test then names it: a new argument
/// name needs its row here; a new function whose arguments are named as
/// others are needs none).
fn kind_of(name: &str, sql_type: &str, f: &Fixture) -> Option<Kind> {
    let id = f.a_id.to_string();
    let epoch = f.a_epoch.to_string();
    Some(match name {
        // `work_enqueue`'s parents (0.12.0, workflows; `work_items`' `after`
        // is a page's last id, below): NULL (no parents) is valid. Every id
        // is on item A's shard (ids carry it, id >> 48), so through a router
        // each reaches the shard of queue `q`, where A is.
        "after" if sql_type == "bigint[]" => {
            let ids = |ids: Vec<i64>| {
                let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
                format!("{{{}}}", ids.join(","))
            };
            let unknown = f.a_id + 1_000_000;
            kind(
                None,
                vec![
                    bad(Some(&format!("{{{id},NULL}}")), "22004"),
                    bad(Some("{NULL}"), "22004"),
                    // 1001 distinct parents: one over the cap.
                    invalid(&ids((1..=1001).map(|n| f.a_id + n).collect())),
                    // No item has it: refused as a missing row is.
                    bad(Some(&ids(vec![unknown])), "23503"),
                    bad(Some(&ids(vec![f.a_id, unknown])), "23503"),
                ],
            )
        }
        // `work_enqueue` (0.12.0): cancel or run.
        "on_parent_failure" => kind(
            Some("cancel"),
            vec![
                invalid(""),
                invalid("x"),
                invalid("Cancel"),
                invalid("run "),
                invalid("ignore"),
            ],
        ),
        "queue" => kind(
            Some("q"),
            vec![
                invalid(""),
                invalid(&long('q', 129)),
                invalid("a\nb"),
                invalid("tab\t"),
                invalid("del\u{7f}"),
            ],
        ),
        "owner" => kind(
            Some("w"),
            vec![
                invalid(""),
                invalid("   "),
                invalid("\t\n"),
                invalid(&long('o', 257)),
                invalid(&long('é', 129)),
                invalid("laptop\n"),
            ],
        ),
        "key" => kind(
            Some("a"),
            vec![invalid(""), invalid(&long('k', 513)), invalid("k\tk")],
        ),
        // `work_enqueue_many` (0.12.0): at most 10000 payloads, none NULL.
        // Two payloads are the valid value, which `keys`, `run_at` and
        // `group_keys` must match in length.
        "payloads" => kind(
            Some(r#"{"{}","{\"n\": 2}"}"#),
            vec![
                bad(Some("{NULL}"), "22004"),
                bad(Some(r#"{"{}",NULL}"#), "22004"),
                // 10001 payloads: one over the cap.
                invalid(&format!("{{{}}}", vec![r#""{}""#; 10_001].join(","))),
            ],
        ),
        // `work_enqueue_many` (0.12.0): one key per payload, NULL (every
        // key a new UUIDv7) valid; each element judged as `key`.
        "keys" => kind(
            None,
            vec![
                invalid(r#"{"",b}"#),
                invalid(&format!("{{{},b}}", long('k', 513))),
                invalid("{\"k\tk\",b}"),
                // Not as long as payloads (two).
                invalid("{}"),
                invalid("{a}"),
                invalid("{a,b,c}"),
            ],
        ),
        // `work_enqueue_many` (0.12.0): one group key per payload, NULL (no
        // group) valid; each element judged as `group_key`.
        "group_keys" => kind(
            None,
            vec![
                invalid(r#"{"",NULL}"#),
                invalid(&format!("{{NULL,{}}}", long('g', 129))),
                invalid("{\"g\ng\",NULL}"),
                invalid("{\"tab\t\",NULL}"),
                // Not as long as payloads (two).
                invalid("{g}"),
                invalid("{g,NULL,NULL}"),
            ],
        ),
        "lease" => kind(
            Some("1 minute"),
            vec![
                invalid("0"),
                invalid("-1 second"),
                invalid("7 days 00:00:00.000001"),
                invalid("8 days"),
                invalid("100000 years"),
                invalid("1 day -1 hour"),
                invalid("1 mon -29 days"),
            ],
        ),
        // `work_release`'s delay and `work_fail`'s retry_in (NULL = backoff).
        "delay" | "retry_in" => kind(
            Some("0"),
            vec![
                invalid("-1 second"),
                invalid("366 days"),
                // 365 days by the 30-day rule, 370 or 371 real days from any date.
                invalid("12 mon 5 days"),
                invalid("1000 years"),
                invalid("1 mon -29 days"),
            ],
        ),
        "max_items" => count_kind("1"),
        "max_attempts" => count_kind("25"),
        "max" => count_kind("50"),
        // `work_limit`: 1 to 10000, NULL for no limit (per_group: serial groups).
        "concurrency" | "rate" | "per_group" => kind(
            Some("5"),
            vec![
                invalid("0"),
                invalid("-1"),
                invalid("10001"),
                invalid("-2147483648"),
            ],
        ),
        "per" => kind(
            Some("1 second"),
            vec![
                invalid("0"),
                invalid("-1 second"),
                invalid("1 day 00:00:00.000001"),
                invalid("2 days"),
                invalid("1 mon -29 days"),
            ],
        ),
        "wait" => kind(
            Some("0"),
            vec![
                invalid("-1 second"),
                invalid("01:00:00.000001"),
                invalid("1 day"),
                invalid("1 day -23 hours"),
            ],
        ),
        "max_run" => kind(
            None,
            vec![
                invalid("0"),
                invalid("-1 second"),
                invalid("365 days 00:00:00.000001"),
                invalid("1000 years"),
                invalid("1 day -1 hour"),
            ],
        ),
        // `work_enqueue_many`'s (0.12.0): one element per payload, NULL
        // (every item due now) valid; each element judged as `run_at`.
        "run_at" if sql_type.ends_with("[]") => kind(
            None,
            vec![
                invalid("{2026-01-01 00:00:00+00,infinity}"),
                invalid("{infinity,NULL}"),
                // Not as long as payloads (two).
                invalid("{NULL}"),
                invalid("{}"),
                invalid("{NULL,NULL,NULL}"),
            ],
        ),
        "run_at" => kind(Some("2026-01-01 00:00:00+00"), vec![invalid("infinity")]),
        "name" => kind(
            Some("s"),
            vec![invalid(""), invalid(&long('n', 129)), invalid("a\nb")],
        ),
        "cron" => kind(
            Some("* * * * *"),
            vec![
                invalid(""),
                invalid("61 * * * *"),
                invalid("0 0 30 2 *"),
                invalid("* * * *"),
                invalid(&long('*', 257)),
            ],
        ),
        "timezone" => kind(
            Some("UTC"),
            vec![invalid(""), invalid("Mars/Olympus"), invalid("CET+1")],
        ),
        "catch_up" => kind(Some("latest"), vec![invalid(""), invalid("some")]),
        // `work_enqueue` (0.12.0): keep, replace, preserve_run_at.
        "on_conflict" => kind(
            Some("keep"),
            vec![
                invalid(""),
                invalid("Replace"),
                invalid("upsert"),
                invalid("keep "),
                invalid("x"),
            ],
        ),
        // `work_enqueue` (0.12.0): a W3C traceparent, or NULL.
        "trace" => kind(
            None,
            vec![
                invalid(""),
                invalid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"),
                invalid("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
                invalid("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
                invalid(&format!(
                    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-{}",
                    long('a', 256)
                )),
                invalid(
                    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\r\nX-Injected: 1",
                ),
            ],
        ),
        // `work_progress` (0.12.0): at most 64 KiB of jsonb.
        "progress" => kind(
            Some("{\"page\": 1}"),
            vec![invalid(&format!("\"{}\"", long('p', 64 * 1024)))],
        ),
        "group_key" => kind(
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
        "state" => kind(
            None,
            vec![
                invalid(""),
                invalid("scheduled"),
                invalid("expired"),
                invalid("PENDING"),
            ],
        ),
        "older_than" => kind(
            Some("7 days"),
            vec![
                invalid("-1 second"),
                invalid("3651 days"),
                invalid("1 mon -29 days"),
            ],
        ),
        "ids" => kind(
            Some(&format!("{{{id}}}")),
            vec![bad(Some(&format!("{{{id},NULL}}")), "22004")],
        ),
        "epochs" => kind(
            Some(&format!("{{{epoch}}}")),
            vec![
                bad(Some("{NULL}"), "22004"),
                invalid("{}"),
                invalid(&format!("{{{epoch},{epoch}}}")),
            ],
        ),
        "results" => kind(None, vec![invalid("{}"), invalid("{1,2}")]),
        // The token every token function is called with: item A's claim.
        "id" | "last_id" => kind(Some(&id), vec![]),
        "epoch" | "last_epoch" => kind(Some(&epoch), vec![]),
        "payload" => kind(Some("{}"), vec![]),
        "priority" => kind(Some("0"), vec![]),
        "error" => kind(Some("boom"), vec![]),
        "enforced" => kind(Some("true"), vec![]),
        "rebuild" => kind(Some("false"), vec![]),
        "after" | "result" => kind(None, vec![]),
        "capability" => kind(
            Some("claim"),
            vec![
                invalid(""),
                invalid("Claim"),
                invalid("all"),
                invalid("claim "),
            ],
        ),
        // `work_grant`, `work_revoke`: a name or a prefix and `*`.
        "queues" => kind(
            Some("q.*"),
            vec![
                invalid(""),
                invalid(&long('q', 129)),
                invalid(&format!("{}*", long('q', 129))),
                invalid("a\nb*"),
                invalid("\t*"),
            ],
        ),
        // An existing role: the cluster's superuser.
        "role" => kind(
            Some("postgres"),
            vec![
                invalid(""),
                invalid(&long('r', 64)),
                invalid("postgres\n"),
                bad(Some("no_such_role"), "42704"),
                bad(Some("Postgres"), "42704"),
            ],
        ),
        _ => return None,
    })
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

/// Every function of the SQL surface (`sql/functions.toml`, each overload),
/// its arguments as the table declares them: each argument's valid and bad
/// values are its name's [`kind_of`], and NULL (22004) is a bad value of
/// every argument not declared `DEFAULT NULL`.
fn functions(f: &Fixture) -> Vec<Function> {
    let surface = ok(
        workfence_surface::Surface::load(&common::repo_root()),
        "reading sql/functions.toml",
    );
    let mut unknown = Vec::new();
    let functions: Vec<Function> = surface
        .functions
        .iter()
        .map(|function| {
            let names = function.argument_names();
            let types = function.argument_types();
            let nullable = function.argument_nullable();
            let args = (0..names.len())
                .filter_map(|i| {
                    let Some(kind) = kind_of(names[i], &types[i], f) else {
                        unknown.push(format!("{}({})", function.name, names[i]));
                        return None;
                    };
                    assert!(
                        kind.valid.is_some() || nullable[i],
                        "{}({}): its kind's valid value is NULL, which the argument refuses",
                        function.name,
                        names[i]
                    );
                    let mut bad_values = kind.bad;
                    if !nullable[i] {
                        bad_values.insert(0, bad(None, "22004"));
                    }
                    Some(Arg {
                        name: names[i].to_owned(),
                        sql_type: types[i].clone(),
                        valid: kind.valid,
                        bad: bad_values,
                    })
                })
                .collect();
            Function {
                name: function.name.clone(),
                args,
            }
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "arguments whose name bad_input.rs's kind_of does not know: {unknown:?} \
         (give each its valid value and its bad values)"
    );
    assert!(
        functions.len() > 20,
        "sql/functions.toml read as {} functions",
        functions.len()
    );
    functions
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
               FROM unnest(ARRAY['a', 'b', 'done', 'cancelled', 'pending']) AS k;
             SELECT workfence.work_schedule('s', '0 0 1 1 *', 'q')",
        ),
        "enqueue, and the schedule the schedule calls name",
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
    let mut covered = std::collections::BTreeSet::new();
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
                covered.insert((function.name.as_str(), argument.name.as_str(), bad.sqlstate));
                let mut values = valid.clone();
                values[position] = bad.value.clone();
                if bad.sqlstate == "23503" {
                    // A parent no item is: judged only for a new item (an
                    // existing key's `after` is ignored, so that a
                    // resubmit after a parent was purged is no error).
                    if let Some(key) = function.args.iter().position(|a| a.name == "key") {
                        values[key] = Some(format!("bad-input-new-{cases}"));
                    }
                }
                let what = format!("{}({} = {:?})", function.name, argument.name, bad.value);
                let err = match call(client, &sql, &values) {
                    Ok(rows) => panic!("{what} was accepted ({rows} rows)"),
                    Err(err) => err,
                };
                let db = db_error(&err);
                assert_eq!(db.code().code(), bad.sqlstate, "{what}: {db:?}");
                if bad.sqlstate == "23503" {
                    // A parent no item is (work_enqueue's after): the
                    // message names the item, the detail the argument.
                    let named = format!("\"{}\" names item", argument.name);
                    assert!(
                        db.detail().is_some_and(|detail| detail.contains(&named)),
                        "{what}: detail {:?}",
                        db.detail()
                    );
                } else {
                    let named = format!("argument \"{}\"", argument.name);
                    assert!(
                        db.message().contains(&named),
                        "{what}: message {:?}",
                        db.message()
                    );
                }
                assert!(db.hint().is_some(), "{what}: no HINT");
                if bad.sqlstate == "22023" {
                    assert!(db.detail().is_some(), "{what}: no DETAIL");
                }
                if let (Some(array), "22004") = (&bad.value, bad.sqlstate) {
                    // A NULL element: the DETAIL says which one (a call may
                    // pass 10,000), counted from 1 (the table's arrays hold
                    // no commas inside their elements).
                    let place = array
                        .trim_matches(|c| c == '{' || c == '}')
                        .split(',')
                        .position(|e| e == "NULL")
                        .map(|i| i + 1);
                    let want = format!(
                        "Element {} of {} is NULL.",
                        place.expect("a 22004 value holds a NULL element"),
                        argument.name
                    );
                    // (Through the router, PL/Proxy prefixes "Remote detail: ".)
                    assert!(
                        db.detail().is_some_and(|d| d.ends_with(&want)),
                        "{what}: the NULL element's DETAIL {:?}, not {want:?}",
                        db.detail()
                    );
                }
                assert_eq!(snapshot(), before, "{what} changed something");
            }
        }
    }
    assert!(cases >= 100, "only {cases} cases: the table lost its rows");
    // Workflows (0.12.0): their arguments are in the table, each bad value
    // with its SQLSTATE.
    for expected in [
        ("work_enqueue", "after", "22004"),
        ("work_enqueue", "after", "22023"),
        ("work_enqueue", "after", "23503"),
        ("work_enqueue", "on_parent_failure", "22004"),
        ("work_enqueue", "on_parent_failure", "22023"),
        ("work_parent_results", "id", "22004"),
        ("work_parent_results", "owner", "22004"),
        ("work_parent_results", "owner", "22023"),
        ("work_parent_results", "epoch", "22004"),
        ("work_workflow", "id", "22004"),
        // The bulk enqueue (0.12.0): every argument's NULL, a NULL payload,
        // arrays of another length, too many payloads, bad elements.
        ("work_enqueue_many", "queue", "22004"),
        ("work_enqueue_many", "queue", "22023"),
        ("work_enqueue_many", "payloads", "22004"),
        ("work_enqueue_many", "payloads", "22023"),
        ("work_enqueue_many", "keys", "22023"),
        ("work_enqueue_many", "run_at", "22023"),
        ("work_enqueue_many", "priority", "22004"),
        ("work_enqueue_many", "max_attempts", "22004"),
        ("work_enqueue_many", "max_attempts", "22023"),
        ("work_enqueue_many", "group_keys", "22023"),
        ("work_enqueue_many", "on_conflict", "22004"),
        ("work_enqueue_many", "on_conflict", "22023"),
    ] {
        assert!(
            covered.contains(&expected),
            "the table has no bad call {expected:?}"
        );
    }
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
    // A read under the token (0.12.0, workflows): NULL for a token not
    // current, as work_renew answers false.
    let reads = ["SELECT workfence.work_parent_results($1, $2, $3) IS NULL"];
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
        for sql in reads {
            let refused: bool = ok(client.query_one(sql, &[id, owner, epoch]), sql).get(0);
            assert!(refused, "{sql} with a token with {what}");
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
