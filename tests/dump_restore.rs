//! `pg_dump` of a database using pg_workfence, restored into a new database:
//! the items, their states and both sequences come back, so a claim after
//! the restore gets an epoch above every epoch handed out before, and an
//! enqueue gets a fresh id (contract, promise 7).

use std::process::Command;

use pg_workfence_client::{Cluster, Error};

fn ok<T>(result: Result<T, Error>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn dump_and_restore_keeps_items_states_and_the_epoch_sequence() {
    let base = std::env::var("WORKFENCE_SCRATCH")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string());
    let cluster = ok(Cluster::start(base), "starting a throwaway cluster");
    ok(
        cluster.create_database("source"),
        "creating the source database",
    );
    let mut src = ok(cluster.connect_to("source"), "connecting to source");

    // Items in several states, and epochs handed out.
    for key in ["a", "b", "c", "d"] {
        src.execute("SELECT workfence.work_enqueue('q', '{}', $1)", &[&key])
            .unwrap();
    }
    let claimed = src
        .query(
            "SELECT id, epoch FROM workfence.work_claim('q', 'w', '1 hour', 3)",
            &[],
        )
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let (done_id, done_epoch): (i64, i64) = (claimed[0].get(0), claimed[0].get(1));
    let (held_id, held_epoch): (i64, i64) = (claimed[1].get(0), claimed[1].get(1));
    assert!(src
        .query_one(
            "SELECT workfence.work_finish($1, 'w', $2)",
            &[&done_id, &done_epoch]
        )
        .unwrap()
        .get::<_, bool>(0));
    let max_epoch: i64 = src
        .query_one("SELECT max(epoch) FROM workfence.items", &[])
        .unwrap()
        .get(0);
    let before: Vec<String> = src
        .query(
            "SELECT concat_ws(' ', id, key, state, owner, epoch) FROM workfence.items ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();

    // pg_dump | psql into a new, empty database.
    let dump = cluster.data_dir().with_extension("dump.sql");
    let status = Command::new(cluster.bin_dir().join("pg_dump"))
        .args(["-h", cluster.host(), "-p", &cluster.port().to_string()])
        .args(["-U", "postgres", "-d", "source", "-f"])
        .arg(&dump)
        .status()
        .expect("running pg_dump");
    assert!(status.success(), "pg_dump failed");
    let mut admin = ok(cluster.connect(), "connecting");
    admin.batch_execute("CREATE DATABASE restored").unwrap();
    let status = Command::new(cluster.bin_dir().join("psql"))
        .args(["-h", cluster.host(), "-p", &cluster.port().to_string()])
        .args([
            "-U",
            "postgres",
            "-d",
            "restored",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-f",
        ])
        .arg(&dump)
        .status()
        .expect("running psql");
    assert!(status.success(), "restoring the dump failed");
    std::fs::remove_file(&dump).ok();

    let mut dst = ok(cluster.connect_to("restored"), "connecting to restored");
    let after: Vec<String> = dst
        .query(
            "SELECT concat_ws(' ', id, key, state, owner, epoch) FROM workfence.items ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(after, before, "items and states restored");

    // The held lease is still honoured, the finished token still answers.
    assert!(dst
        .query_one(
            "SELECT workfence.work_renew($1, 'w', $2, '1 hour')",
            &[&held_id, &held_epoch]
        )
        .unwrap()
        .get::<_, bool>(0));
    assert!(dst
        .query_one(
            "SELECT workfence.work_finish($1, 'w', $2)",
            &[&done_id, &done_epoch]
        )
        .unwrap()
        .get::<_, bool>(0));
    // A new enqueue gets a new id; the next claim an epoch above all before.
    let new_id: i64 = dst
        .query_one("SELECT id FROM workfence.work_enqueue('q', '{}', 'e')", &[])
        .unwrap()
        .get(0);
    let max_id: i64 = src
        .query_one("SELECT max(id) FROM workfence.items", &[])
        .unwrap()
        .get(0);
    assert!(
        new_id > max_id,
        "id {new_id} reissued after restore (max was {max_id})"
    );
    let epoch: i64 = dst
        .query_one(
            "SELECT epoch FROM workfence.work_claim('q', 'w', '1 hour')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        epoch > max_epoch,
        "epoch {epoch} not above {max_epoch} after restore"
    );
}
