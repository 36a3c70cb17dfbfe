//! NOTIFY `work_enqueued`, heard by a LISTENing client connection.
//!
//! What it proves, for a worker that sleeps on `LISTEN work_enqueued` (whose
//! operator turned `workfence.notify_enqueued` on: off by default from 0.12.0,
//! and then nothing is sent):
//! - every enqueue of a due item (run_at NULL, past or `-infinity`), committed
//!   on its own, is heard exactly once, on channel `work_enqueued`, with the
//!   queue name as payload, from the enqueuing backend;
//! - a re-submit of an existing key (`inserted = false`), an item scheduled in
//!   the future and a rejected call are not heard at all;
//! - nothing is heard while the enqueuing transaction is open, or after it
//!   rolls back; at commit, one notification per queue it enqueued into
//!   (PostgreSQL folds identical notifications of one transaction).
//!
//! "Exactly" and "nothing" are decided without sleeping: after the calls
//! under test, a third connection commits a marker notification on another
//! channel the listener also listens on. PostgreSQL delivers notifications of
//! different transactions in commit order, so whatever the calls sent (and
//! had committed) arrives before the marker; the listener collects everything
//! up to it. The only time bound is the generous deadline for the marker.
//!
//! Needs the extension installed (`scripts/test.sh`). Runs in a few seconds.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{enqueued, ok};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, RunAt};
use workfence_harness::Cluster;

/// The channel `work_enqueue` notifies.
const CHANNEL: &str = "work_enqueued";

/// The channel of the test's own end-of-batch marker.
const MARKER: &str = "workfence_test_marker";

/// How long the listener waits for the marker before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// One cluster for the tests that run at the same time.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster()
}

/// The listening side: a connection LISTENing on `work_enqueued` and the
/// marker channel, and a connection that sends the markers.
struct Ear {
    /// LISTENs on `work_enqueued` and the marker channel.
    listener: Client,
    /// Sends the markers.
    marker: Client,
    /// Markers sent so far (each marker's payload is unique).
    markers: u32,
    /// The enqueuer's backend pid, which every notification must carry.
    enqueuer_pid: i32,
}

/// A fresh database (channels are per database, so tests running at once do
/// not hear each other) with `workfence.notify_enqueued` on, as an operator
/// whose workers `LISTEN` sets it: the listening side and the enqueuer's
/// connection.
fn setup(cluster: &Cluster, database: &str) -> (Ear, Client) {
    ok(cluster.create_database(database), "creating the database");
    ok(
        ok(cluster.connect_to(database), "connecting").batch_execute(&format!(
            "ALTER DATABASE {database} SET workfence.notify_enqueued = on"
        )),
        "turning the notification on",
    );
    let connect = || ok(cluster.connect_to(database), "connecting");
    let mut listener = connect();
    ok(
        listener.batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {MARKER};")),
        "LISTEN",
    );
    let mut enqueuer = connect();
    let enqueuer_pid = ok(enqueuer.query_one("SELECT pg_backend_pid()", &[]), "pid").get(0);
    let ear = Ear {
        listener,
        marker: connect(),
        markers: 0,
        enqueuer_pid,
    };
    (ear, enqueuer)
}

impl Ear {
    /// The payloads heard on `work_enqueued` since the last call: commits a
    /// marker from the marker connection and collects everything the
    /// listener receives before it.
    fn heard(&mut self) -> Vec<String> {
        self.markers += 1;
        let tag = self.markers.to_string();
        ok(
            self.marker
                .execute("SELECT pg_notify($1, $2)", &[&MARKER, &tag]),
            "sending the marker",
        );
        let mut heard = Vec::new();
        let mut notifications = self.listener.notifications();
        let mut incoming = notifications.timeout_iter(DEADLINE);
        loop {
            let notification = match ok(incoming.next(), "receiving notifications") {
                Some(notification) => notification,
                None => panic!("marker {tag} not received within {DEADLINE:?}; heard {heard:?}"),
            };
            if notification.channel() == MARKER {
                assert_eq!(notification.payload(), tag, "markers arrive in order");
                return heard;
            }
            assert_eq!(notification.channel(), CHANNEL);
            assert_eq!(
                notification.process_id(),
                self.enqueuer_pid,
                "sent by the enqueuing backend"
            );
            heard.push(notification.payload().to_string());
        }
    }
}

#[test]
fn each_due_enqueue_is_heard_once_with_its_queue() {
    let cluster = cluster();
    let (mut ear, mut enqueuer) = setup(&cluster, "notify_due");
    assert_eq!(
        ear.heard(),
        Vec::<String>::new(),
        "nothing before any enqueue"
    );

    assert!(enqueued(&mut enqueuer, &Enqueue::new("mail").key("a")).inserted);
    assert_eq!(ear.heard(), vec!["mail"]);

    // A re-submit inserts nothing and notifies nobody.
    assert!(!enqueued(&mut enqueuer, &Enqueue::new("mail").key("a")).inserted);
    assert_eq!(ear.heard(), Vec::<String>::new());

    // Not due yet: nobody could claim it, nobody is told.
    let later = Enqueue::new("mail").key("later");
    let in_an_hour = RunAt::In("1 hour".into());
    assert!(enqueued(&mut enqueuer, &later.run_at(in_an_hour)).inserted);
    assert_eq!(ear.heard(), Vec::<String>::new());

    // Due in the past, or at -infinity: due now.
    let (b, c) = (Enqueue::new("sms").key("b"), Enqueue::new("sms").key("c"));
    let a_minute_ago = RunAt::In("-1 minute".into());
    assert!(enqueued(&mut enqueuer, &b.run_at(a_minute_ago)).inserted);
    assert!(enqueued(&mut enqueuer, &c.run_at(RunAt::At("-infinity".into()))).inserted);
    assert_eq!(ear.heard(), vec!["sms", "sms"]);

    // One per enqueue (each its own transaction), in commit order.
    assert!(enqueued(&mut enqueuer, &Enqueue::new("mail").key("d")).inserted);
    assert!(enqueued(&mut enqueuer, &Enqueue::new("mail").key("e")).inserted);
    assert!(enqueued(&mut enqueuer, &Enqueue::new("sms").key("f")).inserted);
    assert_eq!(ear.heard(), vec!["mail", "mail", "sms"]);

    // A rejected enqueue is not heard.
    let err = enqueuer
        .query_one("SELECT workfence.work_enqueue('mail', NULL)", &[])
        .expect_err("a NULL payload is rejected");
    assert_eq!(err.code().map(|c| c.code()), Some("22004"));
    assert_eq!(ear.heard(), Vec::<String>::new());
}

#[test]
fn nothing_is_heard_before_the_enqueue_commits() {
    let cluster = cluster();
    let (mut ear, mut enqueuer) = setup(&cluster, "notify_commit");

    let mut tx = ok(enqueuer.transaction(), "BEGIN");
    assert!(enqueued(&mut tx, &Enqueue::new("mail").key("a")).inserted);
    assert!(enqueued(&mut tx, &Enqueue::new("mail").key("b")).inserted);
    assert!(enqueued(&mut tx, &Enqueue::new("sms").key("c")).inserted);
    // Open: the marker, committed after these calls, arrives alone.
    assert_eq!(ear.heard(), Vec::<String>::new());
    ok(tx.commit(), "COMMIT");
    // At commit: one per queue (the two enqueues into mail fold into one).
    assert_eq!(ear.heard(), vec!["mail", "sms"]);

    // A rolled-back enqueue is never heard.
    let mut tx = ok(enqueuer.transaction(), "BEGIN");
    assert!(enqueued(&mut tx, &Enqueue::new("mail").key("d")).inserted);
    ok(tx.rollback(), "ROLLBACK");
    assert_eq!(ear.heard(), Vec::<String>::new());
}

#[test]
fn an_operator_can_keep_queue_names_private() {
    let cluster = cluster();
    let (mut ear, mut enqueuer) = setup(&cluster, "notify_off");
    // A role with no grants may LISTEN: with the notification on, it learns
    // queue names.
    ok(
        enqueuer.batch_execute("CREATE ROLE nosy LOGIN"),
        "a role with no grants",
    );
    let mut nosy = common::connect_as(&cluster, "notify_off", "nosy", "nosy");
    ok(nosy.batch_execute("LISTEN work_enqueued"), "LISTEN as nosy");
    assert!(enqueued(&mut enqueuer, &Enqueue::new("payroll").key("a")).inserted);
    assert_eq!(ear.heard(), vec!["payroll"]);
    let told = ok(
        nosy.notifications().timeout_iter(DEADLINE).next(),
        "nosy's notification",
    )
    .expect("nosy hears the queue's name");
    assert_eq!(told.payload(), "payroll");
    // Back to the default, off (from 0.12.0; a superuser-only setting):
    // nothing is sent, and enqueue and claim work as before.
    ok(
        enqueuer.batch_execute("ALTER DATABASE notify_off RESET workfence.notify_enqueued"),
        "ALTER DATABASE",
    );
    let mut quiet = ok(cluster.connect_to("notify_off"), "a new session");
    ear.enqueuer_pid = common::scalar(&mut quiet, "SELECT pg_backend_pid()", &[]);
    assert!(enqueued(&mut quiet, &Enqueue::new("payroll").key("b")).inserted);
    assert_eq!(ear.heard(), Vec::<String>::new());
    let claimed = ok(
        calls::claim(&mut quiet, "payroll", "w", "1 minute", Some(10), None),
        "claim",
    )
    .len();
    assert_eq!(claimed, 2);
}
