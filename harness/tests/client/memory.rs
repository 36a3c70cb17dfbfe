//! A claim holds one payload at a time, not its whole batch (issue 21,
//! item 9).
//!
//! 100 items with 1 MB payloads (stored out of line, as TOAST) are claimed in
//! one call. The claiming backend's peak resident memory (`VmHWM` in
//! `/proc/<pid>/status`) may grow by no more than [`LIMIT`]. The cluster has
//! 16 MB of shared buffers, because resident memory also counts the shared
//! buffer pages a backend touches, and PostgreSQL still reads each payload
//! once: a row of `work_claim`'s result is a composite datum, which may not
//! hold TOAST pointers, so it is flattened (one row at a time). Before 0.4.0
//! the claim held every payload twice, in Rust and in PostgreSQL memory
//! (about 290 MB here; 1.9 GB for 1,000 such items). A query that reads the
//! payloads gets them whole.

use crate::common;

use common::{ok, scalar};
use workfence_harness::Cluster;

/// Items claimed, each with a payload of [`PAYLOAD_BYTES`].
const ITEMS: i32 = 100;
/// Payload size: hex digits of MD5s (barely compressible, so stored out of line).
const PAYLOAD_BYTES: i32 = 1_000_000;
/// The most the claiming backend's peak RSS may grow.
const LIMIT: i64 = 64 * 1024 * 1024;

/// The peak resident set of process `pid`, in bytes.
fn peak_rss(pid: i32) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the backend's /proc status (the test runs on the server's machine)");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("a VmHWM line");
    let kb: i64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in kB");
    kb * 1024
}

#[test]
fn a_claim_that_does_not_read_the_payloads_does_not_hold_them() {
    let cluster = ok(
        Cluster::builder(common::scratch_base())
            .setting("shared_buffers", "16MB")
            .start(),
        "a cluster with 16 MB of shared buffers",
    );
    ok(cluster.create_database("memory"), "database");
    let mut admin = ok(cluster.connect_to("memory"), "admin");
    ok(
        admin.execute(
            "SELECT workfence.work_enqueue('big', jsonb_build_object('blob', \
                    (SELECT string_agg(md5(g::text || '-' || n::text), '') \
                       FROM generate_series(1, $2 / 32) AS g))) \
               FROM generate_series(1, $1) AS n",
            &[&ITEMS, &PAYLOAD_BYTES],
        ),
        "enqueue 100 items of 1 MB",
    );
    let toasted: i64 = scalar(
        &mut admin,
        "SELECT pg_catalog.pg_total_relation_size(reltoastrelid) FROM pg_catalog.pg_class \
          WHERE oid = 'workfence.items'::regclass",
        &[],
    );
    assert!(
        toasted > i64::from(ITEMS) * i64::from(PAYLOAD_BYTES) / 4,
        "the payloads are stored out of line ({toasted} bytes of TOAST)"
    );

    let mut worker = ok(cluster.connect_to("memory"), "worker");
    let pid: i32 = scalar(&mut worker, "SELECT pg_catalog.pg_backend_pid()", &[]);
    let before = peak_rss(pid);
    let claimed: i64 = scalar(
        &mut worker,
        "SELECT count(*) FROM workfence.work_claim('big', 'w', '1 minute', $1)",
        &[&ITEMS],
    );
    let grew = peak_rss(pid) - before;
    println!(
        "memory: claiming {ITEMS} items of {PAYLOAD_BYTES} B without reading them grew the \
         backend's peak RSS by {:.1} MB",
        grew as f64 / 1048576.0
    );
    assert_eq!(claimed, i64::from(ITEMS));
    assert!(grew < LIMIT, "peak RSS grew by {grew} bytes");

    // Read, the payloads come back whole.
    ok(
        admin.execute(
            "UPDATE workfence.items SET state = 'pending', lease_until = NULL",
            &[],
        ),
        "hand them back",
    );
    let rows = ok(
        worker.query(
            "SELECT length(payload->>'blob') FROM workfence.work_claim('big', 'w', '1 minute', $1)",
            &[&ITEMS],
        ),
        "claim, reading the payloads",
    );
    assert_eq!(rows.len(), ITEMS as usize);
    for row in rows {
        assert_eq!(row.get::<_, i32>(0), PAYLOAD_BYTES / 32 * 32);
    }
}
