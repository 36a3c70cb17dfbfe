//! Tokens that survive losing a suffix of history (docs/contract.md, promise
//! 8; docs/failover.md), with real servers on loopback: the bug report's
//! scenario, two workers named `routines/laptop`, played across
//!
//! - a **promotion** of a streaming standby that was stopped before the
//!   primary's last claims (the primary then crashes, `pg_ctl -m
//!   immediate`);
//! - a **point-in-time recovery**: a base backup and the archived WAL
//!   replayed to an LSN before the claims, promoted;
//! - an **older dump restored**, into another cluster (a new system, timeline
//!   1) and into another database of the same cluster;
//! - two standbys of one primary promoted **one after the other**, both
//!   starting timeline 2 (a timeline number repeats; the generation floor
//!   does not).
//!
//! In each, worker A claims items on the old history and keeps its tokens;
//! the new history does not know those claims, and worker B claims the same
//! items there. Every epoch B gets is above every epoch A got, and every
//! one of A's tokens is refused (renew, finish, lease status). Without the
//! generation floor B would get A's very epochs (the sequence's position is
//! only as new as the WAL the new server has), and A's finish would be
//! honoured. And a claim on a hot standby is refused at once (25006).

use crate::common;

use common::{ok, scalar};
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, Token};
use workfence_harness::Cluster;

/// The bug report's owner name, shared by both workers.
const OWNER: &str = "routines/laptop";
/// The queue of the scenario.
const QUEUE: &str = "routines";
/// The items each scenario claims on the old history.
const KEYS: [&str; 3] = ["daily", "hourly", "weekly"];

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    ok(cluster.connect_to(name), "connecting")
}

fn enqueue_all(c: &mut Client) {
    for key in KEYS {
        common::enqueue_new(c, &Enqueue::new(QUEUE).key(key));
    }
}

/// Claims every item of [`KEYS`] by key, as [`OWNER`]; their tokens.
fn claim_all(c: &mut Client, who: &str) -> Vec<Token> {
    KEYS.iter()
        .map(|key| {
            ok(
                calls::claim_key(c, QUEUE, key, OWNER, "10 minutes"),
                &format!("{who}'s claim of {key}"),
            )
            .unwrap_or_else(|| panic!("{who}: {key} is not claimable"))
            .token(OWNER)
        })
        .collect()
}

/// The scenario's end, on the new history `c`: B claims the items A held,
/// every epoch of B's above every one of A's, A refused, B finishing.
fn a_is_fenced_off_and_b_finishes(c: &mut Client, a: &[Token], what: &str) {
    let b = claim_all(c, "B");
    let highest_a = a.iter().map(|t| t.epoch).max().expect("A's tokens");
    for token in &b {
        assert!(
            token.epoch > highest_a,
            "{what}: B got epoch {} after A's {highest_a}: an epoch handed out again",
            token.epoch
        );
    }
    for token in a {
        assert!(
            !ok(calls::renew(c, token, "1 minute"), "A's renew"),
            "{what}: A's renew of {} honoured",
            token.id
        );
        assert!(
            !ok(calls::finish(c, token, None), "A's finish"),
            "{what}: A's finish of {} honoured",
            token.id
        );
        assert_ne!(
            ok(calls::lease_status(c, token), "A's lease status"),
            "current",
            "{what}"
        );
    }
    for token in &b {
        assert!(ok(calls::finish(c, token, None), "B's finish"), "{what}");
    }
    let keys: Vec<&str> = KEYS.to_vec();
    let done: i64 = scalar(
        c,
        "SELECT count(*) FROM workfence.items WHERE state = 'done' AND key = ANY($1)",
        &[&keys],
    );
    assert_eq!(done, KEYS.len() as i64, "{what}: each item done once");
}

/// The generation row of database `c`: (timeline, floor).
fn generation(c: &mut Client) -> (i32, i64) {
    let row = ok(
        c.query_one("SELECT timeline, floor FROM workfence.generation", &[]),
        "the generation row",
    );
    (row.get(0), row.get(1))
}

#[test]
fn a_promoted_standby_that_missed_the_last_claims_never_hands_their_epochs_out_again() {
    let base = common::scratch_base();
    let mut primary = ok(Cluster::start(&base), "the primary");
    let mut p = database(&primary, "jobs");
    enqueue_all(&mut p);
    let mut standby = ok(primary.standby(&base), "the standby");
    common::caught_up(&primary, &standby);
    // The standby falls behind: stopped, it misses what follows.
    ok(standby.stop(), "stopping the standby");
    let a = claim_all(&mut p, "A");
    drop(p);
    ok(primary.crash(), "crashing the primary");
    ok(standby.start_again(), "starting the standby again");
    ok(standby.promote(), "promoting the standby");
    let mut s = ok(standby.connect_to("jobs"), "connecting to the new primary");
    a_is_fenced_off_and_b_finishes(&mut s, &a, "promotion");
    assert_eq!(
        generation(&mut s).0,
        2,
        "the new primary's timeline is recorded"
    );
    let log = std::fs::read_to_string(standby.log_file()).unwrap_or_default();
    assert!(
        log.contains("claims continue a new history"),
        "the bump is logged for the operator"
    );
}

#[test]
fn a_point_in_time_recovery_to_before_the_claims_never_hands_their_epochs_out_again() {
    let base = common::scratch_base();
    let primary = ok(
        Cluster::builder(&base).archive_wal().start(),
        "the primary, archiving its WAL",
    );
    let mut p = database(&primary, "jobs");
    enqueue_all(&mut p);
    let mut backup = ok(primary.backup(&base), "the base backup");
    // The recovery target: after the enqueues, before the claims.
    let target: String = scalar(&mut p, "SELECT pg_catalog.pg_current_wal_lsn()::text", &[]);
    let a = claim_all(&mut p, "A");
    // Every WAL file with the claims is archived, as after a day of work.
    let segment: String = scalar(
        &mut p,
        "SELECT pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn())",
        &[],
    );
    ok(
        p.execute("SELECT pg_catalog.pg_switch_wal()", &[]),
        "switching WAL",
    );
    common::poll_until(
        &mut p,
        "SELECT coalesce(last_archived_wal >= $1, false) FROM pg_catalog.pg_stat_archiver",
        &[&segment],
        "the WAL of the claims archived",
    );
    let archive = primary.archive_dir().expect("archiving").to_path_buf();
    ok(
        backup.recover_to(&archive, &target),
        "the point-in-time recovery",
    );
    let mut r = ok(
        backup.connect_to("jobs"),
        "connecting to the recovered server",
    );
    let claimed: i64 = scalar(
        &mut r,
        "SELECT count(*) FROM workfence.items WHERE state = 'claimed'",
        &[],
    );
    assert_eq!(claimed, 0, "the recovery stopped before the claims");
    a_is_fenced_off_and_b_finishes(&mut r, &a, "point-in-time recovery");
}

/// `pg_dump` of `database` on `from`, restored into the new database `into`
/// on `to` (created empty), with the cluster's own tools.
fn dump_and_restore(from: &Cluster, database: &str, to: &Cluster, into: &str) {
    let dump = from.data_dir().with_extension(format!("{into}.sql"));
    let run = |cluster: &Cluster, program: &str, args: &[&str]| {
        let status = ok(
            std::process::Command::new(cluster.bin_dir().join(program))
                .args(["-h", cluster.host(), "-p", &cluster.port().to_string()])
                .args(["-U", "postgres"])
                .args(args)
                .status(),
            program,
        );
        assert!(status.success(), "{program}: {status}");
    };
    let file = dump.to_string_lossy().into_owned();
    run(from, "pg_dump", &["-d", database, "-f", &file]);
    let mut admin = ok(to.connect(), "connecting");
    ok(
        admin.batch_execute(&format!("CREATE DATABASE {into}")),
        "an empty database",
    );
    run(
        to,
        "psql",
        &[
            "-X",
            "-q",
            "-o",
            "/dev/null",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            into,
            "-f",
            &file,
        ],
    );
    ok(std::fs::remove_file(&dump), "removing the dump");
}

#[test]
fn an_older_dump_restored_never_hands_out_the_epochs_claimed_after_it() {
    let base = common::scratch_base();
    let source = ok(Cluster::start(&base), "the source cluster");
    let mut c = database(&source, "jobs");
    enqueue_all(&mut c);
    // One claim finished before the dump: the restored rows carry epochs.
    let before = common::enqueued_and_claimed(&mut c, QUEUE, "monthly", OWNER, "1 minute");
    assert!(ok(calls::finish(&mut c, &before, None), "finish"));
    let other = ok(Cluster::start(&base), "another cluster");
    let dump_then = |into: &str, to: &Cluster| dump_and_restore(&source, "jobs", to, into);
    // The dump is taken now; the claims come after it.
    dump_then("jobs_elsewhere", &other);
    dump_then("jobs_again", &source);
    let a = claim_all(&mut c, "A");
    for (cluster, db, what) in [
        (
            &other,
            "jobs_elsewhere",
            "a dump restored into another cluster",
        ),
        (
            &source,
            "jobs_again",
            "a dump restored into another database",
        ),
    ] {
        let mut r = ok(
            cluster.connect_to(db),
            "connecting to the restored database",
        );
        a_is_fenced_off_and_b_finishes(&mut r, &a, what);
        let rows: i64 = scalar(&mut r, "SELECT count(*) FROM workfence.generation", &[]);
        assert_eq!(rows, 1, "{what}: the new history replaced both rows");
    }
}

/// Timeline numbers repeat: two standbys of one primary, promoted one after
/// the other, both start timeline 2. The second must still hand out epochs
/// above the first's, which it never saw.
#[test]
fn standbys_promoted_one_after_the_other_on_the_same_timeline_number_never_share_an_epoch() {
    let base = common::scratch_base();
    let mut primary = ok(Cluster::start(&base), "the primary");
    let mut p = database(&primary, "jobs");
    enqueue_all(&mut p);
    let mut first = ok(primary.standby(&base), "the first standby");
    let mut second = ok(primary.standby(&base), "the second standby");
    common::caught_up(&primary, &first);
    common::caught_up(&primary, &second);
    ok(second.stop(), "stopping the second standby");
    drop(p);
    ok(primary.crash(), "crashing the primary");
    ok(first.promote(), "promoting the first standby");
    let mut f = ok(first.connect_to("jobs"), "connecting to the first");
    let a = claim_all(&mut f, "A");
    assert_eq!(generation(&mut f).0, 2);
    drop(f);
    ok(first.crash(), "crashing the first standby, with its claims");
    ok(second.start_again(), "starting the second standby");
    ok(second.promote(), "promoting the second standby");
    let mut s = ok(second.connect_to("jobs"), "connecting to the second");
    assert_eq!(
        generation(&mut s).0,
        1,
        "before its first claim, the row is the old primary's"
    );
    a_is_fenced_off_and_b_finishes(&mut s, &a, "a second promotion on timeline 2");
    assert_eq!(
        generation(&mut s).0,
        2,
        "the same timeline number as the first standby's"
    );
}

#[test]
fn a_claim_on_a_hot_standby_is_refused_at_once() {
    let base = common::scratch_base();
    let primary = ok(Cluster::start(&base), "the primary");
    let mut p = database(&primary, "jobs");
    enqueue_all(&mut p);
    let standby = ok(primary.standby(&base), "the standby");
    common::caught_up(&primary, &standby);
    let mut s = ok(standby.connect_to("jobs"), "connecting to the standby");
    for (what, result) in [
        (
            "work_claim",
            calls::claim(&mut s, QUEUE, OWNER, "1 minute", None, None).map(drop),
        ),
        (
            "work_claim with a 3 s wait",
            calls::claim(&mut s, QUEUE, OWNER, "1 minute", None, Some("3 seconds")).map(drop),
        ),
        (
            "work_claim_key",
            calls::claim_key(&mut s, QUEUE, "daily", OWNER, "1 minute").map(drop),
        ),
    ] {
        let started = std::time::Instant::now();
        let err = result.expect_err(what);
        let db = err.as_db_error().expect("a server error");
        assert_eq!(db.code().code(), "25006", "{what}: {}", db.message());
        assert!(db.message().contains("hot standby"), "{}", db.message());
        assert!(db.hint().is_some(), "{what}: no HINT");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{what} waited before refusing"
        );
    }
}

/// The first claims of a new history never wait for each other and never
/// go back. `DELETE FROM workfence.generation` starts a new history (the
/// documented way after a snapshot restored in place). Claim A, in a
/// transaction kept open, moves the sequence and rewrites the row under the
/// table lock; claim B, from another connection, returns while A still
/// holds it (had it waited, this test would hang: B runs on the test's
/// thread before A's transaction ends); a long poll that found nothing and
/// another claim come next; A rolls back, taking its row with it, and the
/// next claim to commit records the history. Every epoch is above every one
/// before the new history, and each is above the one before it: moving the
/// sequence again never moves it back.
#[test]
fn first_claims_of_a_new_history_neither_wait_nor_go_back() {
    let cluster = common::own_cluster();
    let mut admin = database(&cluster, "jobs");
    for key in ["before", "a", "b", "c", "d"] {
        common::enqueue_new(&mut admin, &Enqueue::new(QUEUE).key(key));
    }
    let connect = || {
        let mut c = ok(cluster.connect_to("jobs"), "connecting");
        ok(
            c.batch_execute("SET statement_timeout = '30s'"),
            "statement_timeout",
        );
        c
    };
    fn claim(c: &mut impl postgres::GenericClient, key: &str) -> i64 {
        ok(calls::claim_key(c, QUEUE, key, OWNER, "10 minutes"), key)
            .unwrap_or_else(|| panic!("{key} is not claimable"))
            .epoch
    }
    let before = claim(&mut admin, "before");
    let rows =
        |c: &mut Client| -> i64 { scalar(c, "SELECT count(*) FROM workfence.generation", &[]) };
    assert_eq!(rows(&mut admin), 1);
    ok(
        admin.batch_execute("DELETE FROM workfence.generation"),
        "a new history",
    );

    let mut a = connect();
    let mut tx = ok(a.transaction(), "BEGIN (A)");
    let epoch_a = claim(&mut tx, "a");
    let mut b = connect();
    let epoch_b = claim(&mut b, "b");
    let mut c = connect();
    let none = ok(
        calls::claim(
            &mut c,
            "an empty queue",
            OWNER,
            "1 minute",
            None,
            Some("10 milliseconds"),
        ),
        "a long poll that finds nothing",
    );
    assert!(none.is_empty());
    let epoch_c = claim(&mut c, "c");
    ok(tx.rollback(), "ROLLBACK (A)");
    assert_eq!(
        rows(&mut admin),
        0,
        "A's row went with its transaction; B and C wrote none"
    );
    let mut d = connect();
    let epoch_d = claim(&mut d, "d");
    assert_eq!(
        rows(&mut admin),
        1,
        "D's committed claim recorded the history"
    );

    let epochs = [before, epoch_a, epoch_b, epoch_c, epoch_d];
    let floor = before + 1_000_000_000;
    assert!(
        epoch_a > floor,
        "the new history's first epoch {epoch_a} is above the generation floor, far above {before}"
    );
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "every epoch above the one before: {epochs:?}"
    );
}
