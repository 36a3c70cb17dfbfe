//! Errors reach clients as documented: message, detail and hint, never a
//! Rust backtrace (issue 21, item 11).
//!
//! pgrx appends a captured Rust backtrace to an error's DETAIL, and Rust
//! captures one whenever `RUST_BACKTRACE` is set in the server's
//! environment, as it is on many developers' machines. This test starts its
//! own cluster with `RUST_BACKTRACE=1` in the environment (the server
//! inherits it) and checks the DETAIL of an argument error (22023), a
//! cancelled long poll (57014) and a lost lease (55000).

use crate::common;

use common::ok;
use postgres::error::DbError;
use workfence_harness::calls::{self, Token};
use workfence_harness::Cluster;

/// A DETAIL line that looks like a backtrace frame ("  12: foo::bar") or
/// its header.
fn has_backtrace(detail: Option<&str>) -> bool {
    detail.is_some_and(|d| {
        d.contains("backtrace")
            || d.lines().any(|l| {
                let l = l.trim_start();
                l.split_once(':')
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            })
    })
}

fn db_error(result: Result<impl Sized, postgres::Error>) -> DbError {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.as_db_error().expect("a server error").clone(),
    }
}

#[test]
fn no_rust_backtrace_reaches_a_client() {
    // Only this test runs in this binary: the environment is its own.
    std::env::set_var("RUST_BACKTRACE", "1");
    std::env::remove_var("RUST_LIB_BACKTRACE");
    let cluster = ok(
        Cluster::start(common::scratch_base()),
        "a cluster started with RUST_BACKTRACE=1",
    );
    ok(cluster.create_database("errors"), "database");
    let mut c = ok(cluster.connect_to("errors"), "connecting");

    let bad_lease = db_error(calls::claim(&mut c, "q", "w", "0", None, None));
    assert_eq!(bad_lease.code().code(), "22023");
    assert_eq!(
        bad_lease.detail(),
        // Intervals are shown as PostgreSQL prints them (issue 11), not in
        // microseconds.
        Some("The lease is '00:00:00'.")
    );

    ok(
        c.batch_execute("SET statement_timeout = '200ms'"),
        "statement_timeout",
    );
    let cancelled = db_error(calls::claim(
        &mut c,
        "q",
        "w",
        "1 minute",
        Some(1),
        Some("10 seconds"),
    ));
    assert_eq!(cancelled.code().code(), "57014");
    assert!(
        !has_backtrace(cancelled.detail()),
        "57014 DETAIL: {:?}",
        cancelled.detail()
    );
    ok(c.batch_execute("RESET statement_timeout"), "RESET");

    let lost = db_error(calls::assert(&mut c, &Token::new(1, "w", 1)));
    assert_eq!(lost.code().code(), "55000");
    assert_eq!(
        lost.detail(),
        Some(
            "No item has this id (where queue grants are enforced: none in a queue this role \
             may claim)."
        )
    );
    for e in [&bad_lease, &cancelled, &lost] {
        assert!(!has_backtrace(e.detail()), "DETAIL: {:?}", e.detail());
        assert!(!has_backtrace(e.hint()), "HINT: {:?}", e.hint());
    }
}
