//! The tiers of scripts/test.sh run the same tests against PostgreSQL 15 and
//! 18 by naming a `pg_config` in `WORKFENCE_PG_CONFIG`: this checks that the
//! clusters really are that major, and that the library loaded into them was
//! built for it, so that a green PG 18 tier cannot be a PG 15 run twice.

use crate::common;

use common::{ok, scalar, shared_cluster};
use std::process::Command;
use workfence_harness::calls::{self, Enqueue};

/// The major of a `pg_config --version` line ("PostgreSQL 18.6" -> 18).
fn major_of(version_line: &str) -> i32 {
    let number = version_line
        .trim()
        .strip_prefix("PostgreSQL ")
        .unwrap_or_else(|| panic!("unexpected pg_config --version: {version_line:?}"));
    let major: String = number.chars().take_while(char::is_ascii_digit).collect();
    major
        .parse()
        .unwrap_or_else(|_| panic!("no major in {version_line:?}"))
}

#[test]
fn the_cluster_runs_the_major_of_workfence_pg_config_with_its_own_build() {
    let pg_config = workfence_harness::pg_config();
    let output = ok(
        Command::new(&pg_config).arg("--version").output(),
        "run pg_config --version",
    );
    assert!(
        output.status.success(),
        "{} --version failed",
        pg_config.display()
    );
    let expected = major_of(&String::from_utf8_lossy(&output.stdout));

    let cluster = shared_cluster();
    ok(cluster.create_database("server_major"), "create database");
    let mut c = ok(cluster.connect_to("server_major"), "connect");
    let server: i32 = scalar(
        &mut c,
        "SELECT current_setting('server_version_num')::int / 10000",
        &[],
    );
    assert_eq!(
        server,
        expected,
        "the cluster is PostgreSQL {server}, {} is {expected}",
        pg_config.display()
    );
    // CREATE EXTENSION loaded the library (its magic block would have
    // refused a build for another major): a claim goes through it.
    ok(
        calls::enqueue(&mut c, &Enqueue::new("server_major").key("a")),
        "enqueue",
    );
    let claimed = ok(
        calls::claim(&mut c, "server_major", "w", "1 minute", None, None),
        "claim",
    );
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].epoch, 1);
    println!(
        "server_major: PostgreSQL {server} from {}",
        pg_config.display()
    );
}
