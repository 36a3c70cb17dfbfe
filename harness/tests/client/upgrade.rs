//! Upgrades: each released version, filled with items in every state,
//! updated with `ALTER EXTENSION pg_workfence UPDATE` (through every upgrade
//! script in between).
//!
//! The released install scripts are frozen in `sql/` (`pg_workfence--0.1.0.sql`
//! is exactly what version 0.1.0 installed) and installed beside the current
//! version by `scripts/test.sh`. For each, the test proves:
//! - every token handed out before the update is honoured or refused after it
//!   exactly as before (a live lease renews, a lapsed one nobody re-claimed
//!   is still current, a superseded or released one is refused, a finished
//!   one may repeat its finish), and new claims take epochs above all of them;
//! - a workflow (0.12.0) runs in the updated database, an item from before
//!   the update among its parents;
//! - a role granted `work_enqueue` before the update may call
//!   `work_enqueue_many` (0.12.0) after it, and a role without it may not;
//! - the updated extension is the same as a fresh install of the current
//!   version, object by object (functions with their definitions, security
//!   and settings, tables, columns, constraints, indexes, views, sequences,
//!   types, comments, privileges, dump configuration), so an upgrade script
//!   that forgot something fails here.
//!
//! Needs the extension installed (`scripts/test.sh`).

use crate::common;

use common::ok;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, SqlState, Token};
use workfence_harness::Cluster;

/// The released versions, whose frozen install scripts are in
/// `tests/fixtures/released/`.
const RELEASED: [&str; 11] = [
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0",
    "0.11.0",
];

/// One line per property of every object that belongs to the extension,
/// sorted: equal for two databases exactly when their extensions are.
const FINGERPRINT: &str = "
WITH ext AS (SELECT oid, extversion, extconfig, extcondition FROM pg_catalog.pg_extension
              WHERE extname = 'pg_workfence'),
members AS (
    SELECT d.classid, d.objid FROM pg_catalog.pg_depend AS d, ext
     WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.refobjid = ext.oid AND d.deptype = 'e')
SELECT line FROM (
    SELECT 'member ' || pg_catalog.pg_describe_object(m.classid, m.objid, 0) AS line FROM members AS m
  UNION ALL
    SELECT 'function ' || p.oid::pg_catalog.regprocedure::text || ' secdef=' || p.prosecdef
           || ' config=' || coalesce(p.proconfig::text, '') || ' acl=' || coalesce(p.proacl::text, '')
           || ' strict=' || p.proisstrict || ' volatile=' || p.provolatile::text || ' parallel=' || p.proparallel::text
           || ' comment=' || coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '')
           || E'\n' || pg_catalog.pg_get_functiondef(p.oid)
      FROM pg_catalog.pg_proc AS p JOIN members AS m ON m.objid = p.oid
     WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
  UNION ALL
    SELECT 'relation ' || c.oid::pg_catalog.regclass::text || ' kind=' || c.relkind::text
           || ' acl=' || coalesce(c.relacl::text, '') || ' options=' || coalesce(c.reloptions::text, '')
           || ' comment=' || coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), '')
           || CASE WHEN c.relkind = 'v' THEN E'\n' || pg_catalog.pg_get_viewdef(c.oid) ELSE '' END
      FROM pg_catalog.pg_class AS c JOIN members AS m ON m.objid = c.oid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
  UNION ALL
    SELECT 'column ' || a.attrelid::pg_catalog.regclass::text || '.' || a.attname
           || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull
           || ' default=' || coalesce(pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '')
           || ' comment=' || coalesce(pg_catalog.col_description(a.attrelid, a.attnum), '')
      FROM pg_catalog.pg_attribute AS a
      JOIN members AS m ON m.objid = a.attrelid
       AND m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
      LEFT JOIN pg_catalog.pg_attrdef AS ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
     WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
    SELECT 'constraint ' || con.conrelid::pg_catalog.regclass::text || ' ' || con.conname || ' '
           || pg_catalog.pg_get_constraintdef(con.oid)
      FROM pg_catalog.pg_constraint AS con
      JOIN members AS m ON m.objid = con.conrelid
       AND m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
  UNION ALL
    SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid) || ' comment='
           || coalesce(pg_catalog.obj_description(i.indexrelid, 'pg_class'), '')
      FROM pg_catalog.pg_index AS i
      JOIN members AS m ON m.objid = i.indrelid
       AND m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
  UNION ALL
    SELECT 'sequence ' || s.seqrelid::pg_catalog.regclass::text || ' ' || s.seqtypid::pg_catalog.regtype::text
           || ' start=' || s.seqstart || ' inc=' || s.seqincrement || ' max=' || s.seqmax
           || ' min=' || s.seqmin || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
      FROM pg_catalog.pg_sequence AS s JOIN members AS m ON m.objid = s.seqrelid
  UNION ALL
    SELECT 'type ' || t.oid::pg_catalog.regtype::text || ' labels='
           || coalesce((SELECT pg_catalog.string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                          FROM pg_catalog.pg_enum AS e WHERE e.enumtypid = t.oid), '')
           || ' comment=' || coalesce(pg_catalog.obj_description(t.oid, 'pg_type'), '')
      FROM pg_catalog.pg_type AS t JOIN members AS m ON m.objid = t.oid
     WHERE m.classid = 'pg_catalog.pg_type'::pg_catalog.regclass
  UNION ALL
    SELECT 'schema acl=' || coalesce(n.nspacl::text, '') || ' comment='
           || coalesce(pg_catalog.obj_description(n.oid, 'pg_namespace'), '')
      FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'workfence'
  UNION ALL
    SELECT 'dumped ' || (SELECT pg_catalog.string_agg(c::pg_catalog.regclass::text, ',' ORDER BY c::pg_catalog.regclass::text)
                           FROM pg_catalog.unnest(ext.extconfig) AS c)
           || ' conditions=' || coalesce(ext.extcondition::text, '')
      FROM ext
) AS lines
ORDER BY line";

fn fingerprint(c: &mut Client) -> Vec<String> {
    ok(c.query(FINGERPRINT, &[]), "catalog fingerprint")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every item's (key, state), in key order.
fn states(c: &mut Client) -> Vec<(String, String)> {
    common::pairs(
        c,
        "SELECT key, state::text FROM workfence.items ORDER BY key",
    )
}

fn version(c: &mut Client) -> String {
    ok(
        c.query_one(
            "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_workfence'",
            &[],
        ),
        "extversion",
    )
    .get(0)
}

/// Claims item `key` of queue 'q' as owner 'w': its token.
fn claim_key(c: &mut Client, key: &str, lease: &str) -> Token {
    ok(calls::claim_key(c, "q", key, "w", lease), "claim_key")
        .unwrap_or_else(|| panic!("{key} is not claimable"))
        .token("w")
}

/// `work_renew` of `t` for an hour.
fn renew(c: &mut Client, t: &Token) -> bool {
    ok(calls::renew(c, t, "1 hour"), "work_renew")
}

/// `work_finish` of `t`, no result.
fn finish(c: &mut Client, t: &Token) -> bool {
    ok(calls::finish(c, t, None), "work_finish")
}

/// Two tests per released version (its index in [`RELEASED`]): its update
/// keeps every token and matches a fresh install ([`upgrade_from`]), and its
/// updates under load fail no call ([`update_under_load`]). One test each,
/// not one for every version, so that they run side by side.
macro_rules! per_released_version {
    ($($index:literal: $keeps:ident, $under_load:ident;)*) => { $(
        #[test]
        fn $keeps() {
            upgrade_from(RELEASED[$index]);
        }

        #[test]
        fn $under_load() {
            let previous = RELEASED[$index];
            let (calls, during) = update_under_load(previous);
            println!(
                "upgrade: {UNDER_LOAD_ROUNDS} updates from {previous} under load: {calls} \
                 enqueue-claim-finish cycles, {during} of them while an update ran, 0 failed"
            );
        }
    )* };
}

per_released_version! {
    0: an_update_from_0_1_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_1_0_under_load_fails_no_call;
    1: an_update_from_0_2_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_2_0_under_load_fails_no_call;
    2: an_update_from_0_3_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_3_0_under_load_fails_no_call;
    3: an_update_from_0_4_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_4_0_under_load_fails_no_call;
    4: an_update_from_0_5_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_5_0_under_load_fails_no_call;
    5: an_update_from_0_6_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_6_0_under_load_fails_no_call;
    6: an_update_from_0_7_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_7_0_under_load_fails_no_call;
    7: an_update_from_0_8_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_8_0_under_load_fails_no_call;
    8: an_update_from_0_9_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_9_0_under_load_fails_no_call;
    9: an_update_from_0_10_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_10_0_under_load_fails_no_call;
    10: an_update_from_0_11_0_keeps_every_token_and_matches_a_fresh_install,
        an_update_from_0_11_0_under_load_fails_no_call;
}

/// Update `previous` while four connections enqueue, claim and finish as
/// fast as they can, [`UNDER_LOAD_ROUNDS`] times (a fresh database each):
/// no call may fail. Returns the calls made and how many ran while an
/// update was under way.
fn update_under_load(previous: &str) -> (u64, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Barrier, Mutex};

    let cluster = common::shared_cluster();
    let mut admin = ok(cluster.connect(), "connecting");
    let (mut calls, mut during) = (0, 0);
    for round in 0..UNDER_LOAD_ROUNDS {
        // The topic's cluster is shared: a database per version and round.
        let db = format!("load_{}_{round}", previous.replace('.', "_"));
        ok(
            admin.batch_execute(&format!("CREATE DATABASE {db}")),
            "CREATE DATABASE",
        );
        let mut updater = ok(cluster.connect_to(&db), "connecting");
        ok(
            updater.batch_execute(&format!(
                "CREATE EXTENSION pg_workfence VERSION '{previous}'"
            )),
            "installing the previous version",
        );
        let stop = Arc::new(AtomicBool::new(false));
        let updating = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicU64::new(0));
        let made_during = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::<String>::new()));
        let started = Arc::new(Barrier::new(5));
        let mut threads = Vec::new();
        for w in 0..4 {
            let mut c = ok(cluster.connect_to(&db), "load connection");
            let (stop, updating, made, made_during, errors, started) = (
                stop.clone(),
                updating.clone(),
                made.clone(),
                made_during.clone(),
                errors.clone(),
                started.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let owner = format!("load-{w}");
                let mut n = 0u64;
                let mut once = Some(started);
                while !stop.load(Ordering::Relaxed) {
                    let began_during = updating.load(Ordering::Relaxed);
                    let result = calls::enqueue(&mut c, &Enqueue::new("load"))
                        .and_then(|_| calls::claim(&mut c, "load", &owner, "1 minute", None, None))
                        .and_then(|claims| {
                            for claim in claims {
                                calls::finish(&mut c, &claim.token(&owner), None)?;
                            }
                            Ok(())
                        });
                    if let Err(e) = result {
                        errors.lock().unwrap().push(format!("{e:?}"));
                    }
                    made.fetch_add(1, Ordering::Relaxed);
                    // In flight while the update ran: begun or ended then.
                    if began_during || updating.load(Ordering::Relaxed) {
                        made_during.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                    if n == 20 {
                        if let Some(b) = once.take() {
                            b.wait();
                        }
                    }
                }
                if let Some(b) = once.take() {
                    b.wait();
                }
            }));
        }
        // Every load connection is under way before the update starts.
        started.wait();
        updating.store(true, Ordering::Relaxed);
        // The update's transaction stays open a moment after the script
        // ran, so that calls pile up against its locks and catalog changes
        // and meet its commit together (a bare update of 0.2.0 or 0.3.0
        // was over before most calls noticed it). The assertion does not
        // depend on the pause: any failed call fails the test.
        ok(
            updater.batch_execute(
                "BEGIN; ALTER EXTENSION pg_workfence UPDATE; SELECT pg_sleep(0.3); COMMIT",
            ),
            "ALTER EXTENSION pg_workfence UPDATE under load",
        );
        updating.store(false, Ordering::Relaxed);
        // Some calls after the update too, then stop.
        let after = made.load(Ordering::Relaxed) + 40;
        while made.load(Ordering::Relaxed) < after {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("load thread");
        }
        let errors = errors.lock().unwrap();
        assert!(
            errors.is_empty(),
            "updating {previous} under load, round {round}: {} call(s) failed: {errors:#?}",
            errors.len()
        );
        calls += made.load(Ordering::Relaxed);
        during += made_during.load(Ordering::Relaxed);
    }
    (calls, during)
}

/// Updates under load per released version.
const UNDER_LOAD_ROUNDS: usize = 5;

/// Install `previous`, make items in every state it can make, update, and
/// check the tokens and the catalog.
fn upgrade_from(previous: &str) {
    let cluster = common::own_cluster();
    let mut admin = ok(cluster.connect(), "connecting");
    for db in ["CREATE DATABASE previous", "CREATE DATABASE fresh"] {
        ok(admin.batch_execute(db), db);
    }
    let mut old = ok(cluster.connect_to("previous"), "connecting");
    if let Err(err) = old.batch_execute(&format!(
        "CREATE EXTENSION pg_workfence VERSION '{previous}'"
    )) {
        panic!(
            "installing version {previous}: {err:?}; scripts/test.sh copies \
             sql/pg_workfence--{previous}.sql into the extension directory"
        );
    }
    assert_eq!(version(&mut old), previous);

    // Items in every state version 0.1.0 can make (0.2.0's cancelled state
    // is made after the update), and the tokens for them.
    ok(
        old.batch_execute(
            "SELECT workfence.work_enqueue('q', '{}', k)
               FROM unnest(ARRAY['pending', 'live', 'lapsed', 'superseded', 'done',
                                 'released', 'retry', 'dead', 'later']) AS k;
             UPDATE workfence.items SET run_at = clock_timestamp() + interval '1 hour'
              WHERE key = 'later';
             UPDATE workfence.items SET max_attempts = 1 WHERE key = 'dead'",
        ),
        "enqueue",
    );
    let live = claim_key(&mut old, "live", "1 hour");
    let lapsed = claim_key(&mut old, "lapsed", "1 hour");
    let superseded = claim_key(&mut old, "superseded", "1 hour");
    let done = claim_key(&mut old, "done", "1 hour");
    let released = claim_key(&mut old, "released", "1 hour");
    let retry = claim_key(&mut old, "retry", "1 hour");
    let dead = claim_key(&mut old, "dead", "1 hour");
    // Leases lapse (as the clock would make them) for 'lapsed' and
    // 'superseded'; the latter is then claimed anew.
    ok(
        old.batch_execute(
            "UPDATE workfence.items SET lease_until = clock_timestamp() - interval '1 second'
              WHERE key IN ('lapsed', 'superseded')",
        ),
        "lapse",
    );
    let newer = claim_key(&mut old, "superseded", "1 hour");
    assert!(finish(&mut old, &done));
    assert!(ok(
        calls::release(&mut old, &released, None),
        "work_release"
    ));
    assert!(ok(
        calls::fail(&mut old, &retry, "boom", Some("0")),
        "work_fail"
    ));
    assert!(
        ok(calls::fail(&mut old, &dead, "boom", Some("0")), "work_fail"),
        "the only attempt fails: dead letter"
    );
    let max_before: i64 = ok(
        old.query_one("SELECT max(epoch) FROM workfence.items", &[]),
        "max epoch",
    )
    .get(0);
    let states_before = states(&mut old);
    // A role that may enqueue (EXECUTE on this version's work_enqueue),
    // and one that may call nothing, both with USAGE on the schema.
    ok(
        old.batch_execute(&format!(
            "CREATE ROLE {ENQUEUER} LOGIN;
             CREATE ROLE {STRANGER} LOGIN;
             GRANT USAGE ON SCHEMA workfence TO {ENQUEUER}, {STRANGER};
             GRANT EXECUTE ON FUNCTION workfence.work_enqueue TO {ENQUEUER};"
        )),
        "an enqueuer and a stranger",
    );

    ok(
        old.batch_execute("ALTER EXTENSION pg_workfence UPDATE"),
        "ALTER EXTENSION pg_workfence UPDATE",
    );
    let mut fresh = ok(cluster.connect_to("fresh"), "connecting");
    // The fresh install, with what the update must have given the two
    // roles: the enqueuer work_enqueue and work_enqueue_many (0.12.0), the
    // stranger nothing (the fingerprints compare every ACL).
    ok(
        fresh.batch_execute(&format!(
            "CREATE EXTENSION pg_workfence;
             GRANT USAGE ON SCHEMA workfence TO {ENQUEUER}, {STRANGER};
             GRANT EXECUTE ON FUNCTION workfence.work_enqueue, workfence.work_enqueue_many
                TO {ENQUEUER};"
        )),
        "fresh install",
    );
    let current = version(&mut fresh);
    assert_ne!(current, previous, "the current version is a new one");
    assert_eq!(version(&mut old), current, "updated to the current version");

    // Nothing moved in the update itself.
    let states_after = states(&mut old);
    assert_eq!(states_after, states_before);

    // Every token judged as before the update.
    assert!(renew(&mut old, &live), "a live lease renews");
    assert!(
        renew(&mut old, &lapsed),
        "a lapsed lease nobody re-claimed is still current"
    );
    for (what, token) in [
        ("superseded", superseded),
        ("released", released),
        ("retried", retry),
        ("dead-lettered", dead),
    ] {
        assert!(!renew(&mut old, &token), "{what} token renews");
        assert!(!finish(&mut old, &token), "{what} token finishes");
    }
    assert!(
        finish(&mut old, &done),
        "a repeated finish of the same token"
    );
    assert!(finish(&mut old, &newer), "the re-claim's token finishes");
    assert!(finish(&mut old, &live));
    // The new version's functions work on the old rows, and epochs go on
    // above everything handed out before.
    let after = claim_key(&mut old, "pending", "1 minute");
    assert!(
        after.epoch > max_before,
        "epoch {} after {max_before}",
        after.epoch
    );
    let cancelled = ok(
        calls::cancel(&mut old, "q", "later"),
        "work_cancel after the update",
    );
    assert!(cancelled);
    workflow_after_the_update(&mut old);
    enqueue_many_after_the_update(&cluster);

    // The updated extension is object for object a fresh install, but for
    // the old signatures an update keeps under another name until the next
    // version's update, when the update that renamed them ran in the same
    // transaction: 0.9.0's work_enqueue (renamed by
    // pg_workfence--0.9.0--0.10.0.sql, so kept from 0.9.0 and earlier),
    // 0.5.0's (renamed by
    // pg_workfence--0.5.0--0.6.0.sql, so kept from 0.5.0 and earlier), and,
    // from 0.1.0, its work_claim (pg_workfence--0.1.0--0.4.0.sql).
    let (mut updated, installed) = (fingerprint(&mut old), fingerprint(&mut fresh));
    for (retired, kept) in [
        (
            "work_enqueue_retired_0_9_0",
            !matches!(previous, "0.10.0" | "0.11.0"),
        ),
        (
            "work_enqueue_retired_0_5_0",
            !matches!(
                previous,
                "0.6.0" | "0.7.0" | "0.8.0" | "0.9.0" | "0.10.0" | "0.11.0"
            ),
        ),
        ("work_claim_retired_0_1_0", previous == "0.1.0"),
        // 0.11.0's work_item, renamed by pg_workfence--0.11.0--0.12.0.sql
        // (every release since 0.6.0 had it, and every older one reaches
        // 0.6.0 on the way), kept until the next release's update.
        ("work_item_retired_0_11_0", true),
        // 0.11.0's work_limit (0.10.0 brought it; the same update renames
        // it for per_group), kept likewise.
        ("work_limit_retired_0_11_0", true),
        // 0.11.0's functions whose rows or arguments a job's life (issue
        // 35) changed: every release has them on its way to 0.12.0.
        ("work_enqueue_retired_0_11_0", true),
        ("work_claim_retired_0_11_0", true),
        ("work_claim_key_retired_0_11_0", true),
        ("work_finish_and_claim_retired_0_11_0", true),
        ("work_fail_and_claim_retired_0_11_0", true),
        // 0.11.0's work_items (every older release reaches 0.11.0 on the
        // way).
        ("work_items_retired_0_11_0", true),
    ] {
        let before = updated.len();
        updated.retain(|l| !l.contains(retired));
        assert_eq!(
            updated.len() < before,
            kept,
            "{retired} kept after the update from {previous}"
        );
    }
    let missing: Vec<&String> = installed.iter().filter(|l| !updated.contains(l)).collect();
    let extra: Vec<&String> = updated.iter().filter(|l| !installed.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the update differs from a fresh install of {current}.\n\
         In a fresh install only:\n{missing:#?}\nAfter the update only:\n{extra:#?}"
    );
    assert!(updated.len() > 20, "the fingerprint lost its rows");
}

/// The role [`upgrade_from`] granted `work_enqueue` before the update.
const ENQUEUER: &str = "upgrade_enqueuer";
/// The role it granted nothing but `USAGE` on the schema.
const STRANGER: &str = "upgrade_stranger";

/// The bulk enqueue (0.12.0) in database `previous`, updated: the role that
/// could enqueue before the update may call `work_enqueue_many` after it
/// (the update gives it to whoever may execute the old `work_enqueue`),
/// and its items are there; the role that could not gets 42501 and adds
/// nothing.
fn enqueue_many_after_the_update(cluster: &Cluster) {
    let enqueue_many = |c: &mut Client| {
        calls::generated::work_enqueue_many(
            c,
            "bulk",
            &[serde_json::json!({"n": 1}), serde_json::json!({"n": 2})],
            Some(&[Some("b1"), Some("b2")]),
            None,
            None,
            None,
            None,
            None,
        )
    };
    let mut stranger = common::connect_as(cluster, "previous", STRANGER, "upgrade");
    let refused = enqueue_many(&mut stranger).expect_err("no work_enqueue before, none after");
    assert_eq!(refused.sqlstate(), Some("42501"), "{refused}");
    let mut enqueuer = common::connect_as(cluster, "previous", ENQUEUER, "upgrade");
    let rows = ok(
        enqueue_many(&mut enqueuer),
        "work_enqueue_many as the role granted work_enqueue before the update",
    );
    let added: Vec<(Option<&str>, Option<bool>)> = rows
        .iter()
        .map(|r| (r.key.as_deref(), r.inserted))
        .collect();
    assert_eq!(added, [(Some("b1"), Some(true)), (Some("b2"), Some(true))]);
    let mut admin = ok(cluster.connect_to("previous"), "connecting");
    let stored: Vec<(String, String)> = common::pairs(
        &mut admin,
        "SELECT key, payload::text FROM workfence.items WHERE queue = 'bulk' ORDER BY key",
    );
    assert_eq!(
        stored,
        [
            ("b1".to_owned(), r#"{"n": 1}"#.to_owned()),
            ("b2".to_owned(), r#"{"n": 2}"#.to_owned()),
        ]
    );
}

/// Workflows (0.12.0, issue 37) in a database updated to this version,
/// with an item from before the update among the parents (its row has the
/// new columns' defaults): the child waits, counted waiting (the kept
/// counts as the exact ones), and becomes pending in the transaction of its
/// last parent's finish; its claim reads both parents' results.
fn workflow_after_the_update(c: &mut Client) {
    let old_parent: i64 = common::scalar(
        c,
        "SELECT id FROM workfence.items WHERE queue = 'q' AND key = 'released'",
        &[],
    );
    let new_parent = common::enqueue_new(c, &Enqueue::new("q").key("wf-parent"));
    let child = common::enqueue_new(
        c,
        &Enqueue::new("q")
            .key("wf-child")
            .after(&[old_parent, new_parent]),
    );
    let state = |c: &mut Client| -> (String, i32) {
        let row = ok(
            c.query_one(
                "SELECT state::text, waiting_on FROM workfence.items WHERE id = $1",
                &[&child],
            ),
            "the child",
        );
        (row.get(0), row.get(1))
    };
    assert_eq!(state(c), ("waiting".to_owned(), 2));
    let waiting = |c: &mut Client, view: &str| -> i64 {
        common::scalar(
            c,
            &format!("SELECT s.waiting FROM workfence.{view} AS s WHERE s.queue = 'q'"),
            &[],
        )
    };
    assert_eq!(
        (
            waiting(c, "work_queue_stats"),
            waiting(c, "work_queue_stats_exact")
        ),
        (1, 1)
    );
    let old_run = claim_key(c, "released", "1 minute");
    assert!(finish(c, &old_run), "the old parent's finish");
    assert_eq!(state(c), ("waiting".to_owned(), 1));
    let new_run = claim_key(c, "wf-parent", "1 minute");
    assert!(finish(c, &new_run), "the new parent's finish");
    assert_eq!(
        state(c),
        ("pending".to_owned(), 0),
        "released by its last parent"
    );
    let run = claim_key(c, "wf-child", "1 minute");
    let results = ok(
        calls::generated::work_parent_results(c, child, &run.owner, run.epoch),
        "work_parent_results",
    );
    assert_eq!(
        results,
        serde_json::json!({
            old_parent.to_string(): null,
            new_parent.to_string(): null,
        })
    );
    assert!(finish(c, &run));
}

/// A signature an update renamed out of the way (`*_retired_*`) is dropped
/// by the next update, but not by the update that renamed it when it ran in
/// the same transaction (one `ALTER EXTENSION` through several scripts):
/// calls in flight that resolved it before that update must still find it.
/// 0.1.0's `work_claim` (renamed on the way to 0.4.0) and 0.5.0's
/// `work_enqueue` (renamed on the way to 0.6.0).
#[test]
fn a_retired_signature_is_dropped_by_the_update_after_its_rename() {
    const CLAIM: &str = "workfence.work_claim_retired_0_1_0(text, text, interval, integer)";
    const ENQUEUE: &str =
        "workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer)";
    const ENQUEUE_0_9_0: &str = "workfence.work_enqueue_retired_0_9_0(text, jsonb, text, timestamptz, integer, integer, interval)";
    let cluster = common::shared_cluster();
    for (db, from, steps, retired, kept) in [
        (
            "claim_in_two_steps",
            "0.1.0",
            &["0.4.0", "0.5.0"][..],
            CLAIM,
            false,
        ),
        ("claim_in_one_step", "0.1.0", &["0.5.0"][..], CLAIM, true),
        (
            "claim_at_the_next_update",
            "0.1.0",
            &["0.5.0", "0.6.0"][..],
            CLAIM,
            false,
        ),
        (
            "claim_to_0_6_0_in_one_step",
            "0.1.0",
            &["0.6.0"][..],
            CLAIM,
            true,
        ),
        (
            "claim_after_0_6_0",
            "0.1.0",
            &["0.6.0", "0.7.0"][..],
            CLAIM,
            false,
        ),
        (
            "enqueue_in_one_step",
            "0.5.0",
            &["0.7.0"][..],
            ENQUEUE,
            true,
        ),
        (
            "enqueue_at_the_next_update",
            "0.5.0",
            &["0.6.0", "0.7.0"][..],
            ENQUEUE,
            false,
        ),
        (
            "enqueue_to_0_8_0_in_one_step",
            "0.5.0",
            &["0.8.0"][..],
            ENQUEUE,
            true,
        ),
        (
            "enqueue_after_0_7_0",
            "0.5.0",
            &["0.7.0", "0.8.0"][..],
            ENQUEUE,
            false,
        ),
        (
            "enqueue_after_0_8_0",
            "0.5.0",
            &["0.8.0", "0.9.0"][..],
            ENQUEUE,
            false,
        ),
        (
            "enqueue_after_0_9_0",
            "0.5.0",
            &["0.9.0", "0.10.0"][..],
            ENQUEUE,
            false,
        ),
        (
            "enqueue_0_9_0_in_one_step",
            "0.9.0",
            &["0.11.0"][..],
            ENQUEUE_0_9_0,
            true,
        ),
        (
            "enqueue_0_9_0_at_the_next_update",
            "0.9.0",
            &["0.10.0", "0.11.0"][..],
            ENQUEUE_0_9_0,
            false,
        ),
    ] {
        ok(cluster.create_database(db), "create database");
        let mut c = ok(cluster.connect_to(db), "connect");
        ok(
            c.batch_execute(&format!(
                "DROP EXTENSION pg_workfence; CREATE EXTENSION pg_workfence VERSION '{from}'"
            )),
            "installing the old version",
        );
        for step in steps {
            ok(
                c.batch_execute(&format!("ALTER EXTENSION pg_workfence UPDATE TO '{step}'")),
                "updating",
            );
        }
        assert_eq!(&version(&mut c), steps.last().expect("a step"));
        assert_eq!(
            common::scalar::<bool>(
                &mut c,
                "SELECT pg_catalog.to_regprocedure($1) IS NOT NULL",
                &[&retired],
            ),
            kept,
            "{db}: {retired} after updating from {from} through {steps:?}"
        );
    }
}

/// The update to 0.7.0 changes nothing a role reaches until the owner turns
/// queue grants on: docs/operations.md's worker and monitor roles on a 0.6.0
/// database claim from every queue and read every queue's statistics after
/// it (the view now calls `work_may`, whose `EXECUTE` the update gives every
/// role that could read the view); then a grant and `work_enforce_grants`
/// scope the monitor, and nothing else.
#[test]
fn the_update_to_0_7_0_changes_no_roles_reach_until_grants_are_enforced() {
    let cluster = common::shared_cluster();
    ok(cluster.create_database("grants_off"), "create database");
    let mut admin = ok(cluster.connect_to("grants_off"), "connect");
    ok(
        admin.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.6.0';
             CREATE ROLE upgrade07_worker LOGIN;
             CREATE ROLE upgrade07_monitor LOGIN;
             GRANT USAGE ON SCHEMA workfence TO upgrade07_worker, upgrade07_monitor;
             GRANT EXECUTE ON FUNCTION workfence.work_enqueue, workfence.work_claim_key,
                   workfence.work_finish TO upgrade07_worker;
             GRANT SELECT ON workfence.work_queue_stats TO upgrade07_monitor;
             GRANT EXECUTE ON FUNCTION workfence.queue_counters TO upgrade07_monitor;
             ALTER EXTENSION pg_workfence UPDATE TO '0.7.0';",
        ),
        "0.6.0 with the guide's kind of grants, updated",
    );
    let mut worker = common::connect_as(&cluster, "grants_off", "upgrade07_worker", "upgrade");
    let mut monitor = common::connect_as(&cluster, "grants_off", "upgrade07_monitor", "upgrade");
    for queue in ["billing", "hr"] {
        let token = common::enqueued_and_claimed(&mut worker, queue, "k", "w", "1 minute");
        assert!(finish(&mut worker, &token), "{queue}");
    }
    let readable = |monitor: &mut Client| -> Vec<String> {
        ok(
            calls::queue_stats(monitor),
            "work_queue_stats after the update",
        )
        .into_iter()
        .map(|row| row.queue)
        .collect()
    };
    assert_eq!(readable(&mut monitor), ["billing", "hr"]);
    // Turned on, with a read grant of one queue for the monitor.
    ok(
        calls::grant(&mut admin, "read", "billing", "upgrade07_monitor"),
        "work_grant",
    );
    ok(
        calls::enforce_grants(&mut admin, true),
        "work_enforce_grants",
    );
    assert_eq!(readable(&mut monitor), ["billing"]);
}

/// A role granted `work_enqueue` before the update to 0.6.0, which gives it
/// a new argument (and so makes it a new function), may enqueue after it:
/// the update carries the grants of the 6-argument function over to the
/// 7-argument one, and a role without them gets none.
#[test]
fn the_update_to_0_6_0_keeps_the_grants_of_work_enqueue() {
    let cluster = common::shared_cluster();
    ok(cluster.create_database("enqueue_grants"), "create database");
    let mut admin = ok(cluster.connect_to("enqueue_grants"), "connect");
    ok(
        admin.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.5.0';
             CREATE ROLE upgrade_submitter LOGIN;
             CREATE ROLE upgrade_stranger LOGIN;
             GRANT USAGE ON SCHEMA workfence TO upgrade_submitter, upgrade_stranger;
             GRANT EXECUTE ON FUNCTION workfence.work_enqueue TO upgrade_submitter WITH GRANT OPTION;
             GRANT USAGE ON SCHEMA workfence TO PUBLIC;
             GRANT EXECUTE ON FUNCTION workfence.work_lease_status TO PUBLIC;
             GRANT SELECT ON workfence.work_queue_stats TO PUBLIC;
             ALTER EXTENSION pg_workfence UPDATE TO '0.6.0';",
        ),
        "0.5.0 with grants, updated",
    );
    // The grants made before the update stay as they were: PUBLIC's, and
    // the grant option, carried to the new work_enqueue.
    let kept: Vec<String> = ok(
        admin.query(
            "SELECT what FROM (
                 SELECT 'schema ' || a.privilege_type || ' ' || a.grantee::regrole::text AS what
                   FROM pg_namespace AS n, aclexplode(n.nspacl) AS a WHERE n.nspname = 'workfence'
                 UNION ALL
                 SELECT p.proname || ' ' || a.privilege_type || ' ' || a.grantee::regrole::text
                        || CASE WHEN a.is_grantable THEN ' grantable' ELSE '' END
                   FROM pg_proc AS p, aclexplode(p.proacl) AS a
                  WHERE p.pronamespace = 'workfence'::regnamespace
                    AND p.proname IN ('work_enqueue', 'work_lease_status')
                 UNION ALL
                 SELECT 'view ' || a.privilege_type || ' ' || a.grantee::regrole::text
                   FROM pg_class AS c, aclexplode(c.relacl) AS a
                  WHERE c.oid = 'workfence.work_queue_stats'::regclass
             ) AS g WHERE what NOT LIKE '% postgres%' ORDER BY 1",
            &[],
        ),
        "the grants after the update",
    )
    .iter()
    .map(|r| r.get::<_, String>(0).replace(" -", " PUBLIC"))
    .collect();
    assert_eq!(
        kept,
        [
            "schema USAGE PUBLIC",
            "schema USAGE upgrade_stranger",
            "schema USAGE upgrade_submitter",
            "view SELECT PUBLIC",
            "work_enqueue EXECUTE upgrade_submitter grantable",
            "work_lease_status EXECUTE PUBLIC",
        ]
    );
    let mut submitter =
        common::connect_as(&cluster, "enqueue_grants", "upgrade_submitter", "upgrade");
    let enqueued = ok(
        calls::enqueue(&mut submitter, &Enqueue::new("q").max_run("1 minute")),
        "the 7-argument work_enqueue, as the role granted the 6-argument one",
    );
    assert!(enqueued.inserted);
    let mut stranger =
        common::connect_as(&cluster, "enqueue_grants", "upgrade_stranger", "upgrade");
    let err = calls::enqueue(&mut stranger, &Enqueue::new("q")).expect_err("no grant, no enqueue");
    assert_eq!(err.code().map(|c| c.code()), Some("42501"));
}

/// A session that used the extension before `ALTER EXTENSION ... UPDATE` to
/// 0.6.0 (its library served the 0.5.0 schema) sees pauses after it, and
/// until the update a failure's text is kept whole, as 0.5.0 kept it.
#[test]
fn a_session_from_before_the_update_to_0_6_0_sees_pauses_after_it() {
    let cluster = common::shared_cluster();
    ok(
        cluster.create_database("pause_after_update"),
        "create database",
    );
    let mut worker = ok(cluster.connect_to("pause_after_update"), "connect");
    ok(
        worker.batch_execute(
            "DROP EXTENSION pg_workfence; CREATE EXTENSION pg_workfence VERSION '0.5.0'",
        ),
        "0.5.0",
    );
    for key in ["a", "b", "c"] {
        common::enqueue_new(&mut worker, &Enqueue::new("q").key(key));
    }
    let held = common::claimed_one(&mut worker, "q", "w", "1 minute").token("w");
    let long = "x".repeat(5000);
    assert!(ok(
        calls::fail(&mut worker, &held, &long, Some("1 hour")),
        "fail"
    ));
    let kept: i32 = common::scalar(
        &mut worker,
        "SELECT octet_length(last_error) FROM workfence.items WHERE id = $1",
        &[&held.id],
    );
    assert_eq!(kept, 5000, "before the update the text is kept whole");
    let mut operator = ok(cluster.connect_to("pause_after_update"), "operator");
    ok(
        operator.batch_execute("ALTER EXTENSION pg_workfence UPDATE TO '0.6.0'"),
        "update",
    );
    assert!(ok(calls::pause(&mut operator, "q"), "pause"));
    assert!(
        common::claim_count(&mut worker, "q") == 0,
        "a session from before the update claimed from a paused queue"
    );
    assert!(ok(calls::resume(&mut operator, "q"), "resume"));
    assert_eq!(common::claim_count(&mut worker, "q"), 1);
}

/// A monitoring role set up on 0.10.0 as docs/operations.md says (the view,
/// `queue_counters`, both `work_item`s) lists items after the update to
/// 0.11.0: the update grants `work_items` to whoever may execute
/// `work_item(bigint)`, with the grant option if it had it, and to no one
/// else.
#[test]
fn the_update_to_0_11_0_lets_a_monitor_list_items() {
    let cluster = common::shared_cluster();
    ok(cluster.create_database("monitor_lists"), "create database");
    let mut admin = ok(cluster.connect_to("monitor_lists"), "connect");
    ok(
        admin.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.10.0';
             CREATE ROLE upgrade11_monitor LOGIN;
             CREATE ROLE upgrade11_lead LOGIN;
             CREATE ROLE upgrade11_stranger LOGIN;
             GRANT USAGE ON SCHEMA workfence
                TO upgrade11_monitor, upgrade11_lead, upgrade11_stranger;
             GRANT SELECT ON workfence.work_queue_stats TO upgrade11_monitor;
             GRANT EXECUTE ON FUNCTION workfence.queue_counters, workfence.work_item(text, text),
                   workfence.work_item(bigint) TO upgrade11_monitor;
             GRANT EXECUTE ON FUNCTION workfence.work_item(bigint)
                TO upgrade11_lead WITH GRANT OPTION;
             SELECT workfence.work_enqueue('q', '{}', 'a');
             ALTER EXTENSION pg_workfence UPDATE TO '0.11.0';",
        ),
        "0.10.0 with the guide's monitoring grants, updated",
    );
    let granted: Vec<String> = ok(
        admin.query(
            "SELECT a.grantee::regrole::text || CASE WHEN a.is_grantable THEN ' grantable' ELSE '' END
               FROM pg_proc AS p, aclexplode(p.proacl) AS a
              WHERE p.oid = 'workfence.work_items(text, text, bigint, integer)'::regprocedure
                AND a.grantee <> p.proowner
              ORDER BY 1",
            &[],
        ),
        "the grants of work_items",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(granted, ["upgrade11_lead grantable", "upgrade11_monitor"]);
    let mut monitor = common::connect_as(&cluster, "monitor_lists", "upgrade11_monitor", "upgrade");
    let page = ok(
        calls::items(&mut monitor, "q", &calls::Page::default()),
        "work_items as the monitor",
    );
    assert_eq!(page.len(), 1);
    let mut stranger =
        common::connect_as(&cluster, "monitor_lists", "upgrade11_stranger", "upgrade");
    let refused = calls::items(&mut stranger, "q", &calls::Page::default())
        .expect_err("a role without work_item gets no work_items");
    assert_eq!(refused.sqlstate(), Some("42501"));
}
