//! The schedules (from 0.12.0) through the library against a real database: a schedule made
//! with `schedule` shows in `schedules()`, a due slot fires once with the documented key and a
//! `Worker` claims its item (also when only the worker's long poll fires it), pause and resume,
//! and the SQLSTATEs of bad arguments and unknown schedules.
//!
//! A slot is made due without waiting by moving the schedule's `next_slot` a second into the
//! past (as superuser, on the table); the expressions are yearly, so no slot comes due by itself.
//! `work_fire_schedules` fires every due schedule of the database, so the tests here, which run
//! in parallel threads, take [`SERIAL`] first: a count of fired items is then the test's own.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio::sync::MutexGuard;
use tokio_postgres::Client;
use workfence::{CatchUp, Error, Job, Schedule, ScheduleOptions};

/// A yearly expression: no slot of it comes due during a test unless the test moves it.
const YEARLY: &str = "0 0 1 1 *";

/// Held by each test of this file for its whole run.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes [`SERIAL`].
async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// Moves the schedule's next slot a second into the past (whole seconds, as slots are), as
/// though it had come due: returns that slot and the key its item gets, formatted by the
/// server's `to_char` in UTC (`<name>@YYYY-MM-DDTHH:MI:SSZ`, the documented key).
async fn make_due(c: &Client, name: &str) -> (SystemTime, String) {
    let row = c
        .query_one(
            "UPDATE workfence.schedules \
                SET next_slot = date_trunc('second', clock_timestamp()) - interval '1 second', \
                    last_slot = NULL \
              WHERE name = $1 \
          RETURNING next_slot, \
                    name || '@' || to_char(next_slot AT TIME ZONE 'UTC', \
                                           'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
            &[&name],
        )
        .await
        .expect("make the slot due");
    (row.get(0), row.get(1))
}

/// The schedule of `name` as `schedules()` lists it.
async fn shown(c: &Client, name: &str) -> Option<Schedule> {
    let mut found: Vec<Schedule> = workfence::schedules(c)
        .await
        .expect("schedules")
        .into_iter()
        .filter(|s| s.name == name)
        .collect();
    assert!(found.len() <= 1, "{found:?}");
    found.pop()
}

/// The keys of the queue's items, oldest first.
async fn keys(c: &Client, queue: &str) -> Vec<String> {
    c.query(
        "SELECT key FROM workfence.items WHERE queue = $1 ORDER BY id",
        &[&queue],
    )
    .await
    .expect("keys")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The (id, key, payload) of each job a worker ran.
type Seen = Arc<Mutex<Vec<(i64, String, serde_json::Value)>>>;

/// A worker of `queue` that records each job's (id, key, payload) and finishes it; returns the
/// stop handle, the run task and the record.
fn run_worker(
    queue: &str,
) -> (
    workfence::Handle,
    tokio::task::JoinHandle<workfence::Result<()>>,
    Seen,
) {
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    let worker = common::worker(queue).build().expect("build");
    let handle = worker.handle();
    let task = tokio::spawn(async move {
        worker
            .run(
                move |job: Job| {
                    let record = Arc::clone(&record);
                    async move {
                        record.lock().unwrap_or_else(PoisonError::into_inner).push((
                            job.id,
                            job.key.clone(),
                            job.payload.clone(),
                        ));
                        Ok(None)
                    }
                },
                std::future::pending(),
            )
            .await
    });
    (handle, task, seen)
}

/// Stops the worker and waits (bounded) for `run` to return Ok.
async fn stop(handle: workfence::Handle, task: tokio::task::JoinHandle<workfence::Result<()>>) {
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
}

#[tokio::test]
async fn a_schedule_shows_in_schedules_and_a_replace_says_whether_it_changed() {
    let _serial = serial().await;
    let mut c = common::connect().await;
    let name = common::unique("rs_schedule");
    let queue = common::unique("sched_show");

    let tx = c.transaction().await.expect("BEGIN");
    assert!(workfence::schedule(
        &tx,
        &name,
        "0 2 * * *",
        &queue,
        &json!({}),
        &ScheduleOptions::default()
    )
    .await
    .expect("schedule in a transaction"));
    tx.rollback().await.expect("ROLLBACK");
    assert_eq!(shown(&c, &name).await, None, "rolled back with the caller");

    let before = SystemTime::now();
    let options = ScheduleOptions::default()
        .timezone("Europe/Berlin")
        .priority(2)
        .max_attempts(3)
        .group_key("reports");
    let payload = json!({"kind": "daily"});
    assert!(
        workfence::schedule(&c, &name, "0 2 * * *", &queue, &payload, &options)
            .await
            .expect("schedule")
    );
    let row = shown(&c, &name).await.expect("listed");
    let next = row.next_slot.expect("a next slot");
    assert_eq!(
        row,
        Schedule {
            name: name.clone(),
            cron: "0 2 * * *".to_owned(),
            timezone: "Europe/Berlin".to_owned(),
            queue: queue.clone(),
            catch_up: CatchUp::Latest,
            paused: false,
            next_slot: Some(next),
            last_slot: None,
            last_item_id: None,
            last_fired_at: None,
            payload: payload.clone(),
            priority: 2,
            max_attempts: 3,
            group_key: Some("reports".to_owned()),
        }
    );
    // The first slot after now, within the next day, at 02:00 Berlin time (01:00 or 00:00 UTC).
    let ahead = next.duration_since(before).expect("a slot after now");
    assert!(ahead <= Duration::from_secs(25 * 3600), "{ahead:?}");
    let local: String = c
        .query_one(
            "SELECT to_char($1::timestamptz AT TIME ZONE 'Europe/Berlin', 'HH24:MI:SS')",
            &[&next],
        )
        .await
        .expect("local time")
        .get(0);
    assert_eq!(local, "02:00:00");

    assert!(
        !workfence::schedule(&c, &name, "0 2 * * *", &queue, &payload, &options)
            .await
            .expect("the same again"),
        "the same settings change nothing"
    );
    let all = ScheduleOptions::default().catch_up(CatchUp::All);
    assert!(
        workfence::schedule(&c, &name, "0 2 * * *", &queue, &json!({}), &all)
            .await
            .expect("replace")
    );
    let row = shown(&c, &name).await.expect("listed");
    assert_eq!(
        (
            row.catch_up,
            row.timezone.as_str(),
            row.payload,
            row.group_key
        ),
        (CatchUp::All, "UTC", json!({}), None)
    );

    assert!(workfence::unschedule(&c, &name).await.expect("unschedule"));
    assert!(!workfence::unschedule(&c, &name).await.expect("again"));
    assert_eq!(shown(&c, &name).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_slot_fires_one_item_with_the_documented_key_that_a_worker_claims() {
    let _serial = serial().await;
    let c = common::connect().await;
    let name = common::unique("rs_schedule");
    let queue = common::unique("sched_fire");
    let payload = json!({"report": "yearly"});
    workfence::schedule(
        &c,
        &name,
        YEARLY,
        &queue,
        &payload,
        &ScheduleOptions::default().priority(1),
    )
    .await
    .expect("schedule");
    let (slot, key) = make_due(&c, &name).await;
    assert_eq!(workfence::fire_schedules(&c).await.expect("fire"), 1);
    assert_eq!(
        workfence::fire_schedules(&c).await.expect("fire again"),
        0,
        "a slot is fired once"
    );
    assert_eq!(keys(&c, &queue).await, vec![key.clone()]);
    let item = workfence::item(&c, &queue, &key)
        .await
        .expect("item")
        .expect("the slot's item");
    assert_eq!(
        (
            item.state.as_str(),
            item.run_at,
            &item.payload,
            item.priority
        ),
        ("pending", slot, &payload, 1)
    );
    let row = shown(&c, &name).await.expect("listed");
    assert_eq!(
        (row.last_slot, row.last_item_id),
        (Some(slot), Some(item.id))
    );
    assert!(row.last_fired_at.is_some());
    assert!(row.next_slot.expect("next") > slot);

    let (handle, task, seen) = run_worker(&queue);
    common::wait_for_all(&c, &queue, "done", 1).await;
    stop(handle, task).await;
    assert_eq!(
        *seen.lock().unwrap_or_else(PoisonError::into_inner),
        vec![(item.id, key, payload)]
    );
    workfence::unschedule(&c, &name).await.expect("unschedule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_long_poll_fires_a_due_slot_itself() {
    let _serial = serial().await;
    let c = common::connect().await;
    let name = common::unique("rs_schedule");
    let queue = common::unique("sched_poll");
    workfence::schedule(
        &c,
        &name,
        YEARLY,
        &queue,
        &json!({"n": 1}),
        &ScheduleOptions::default(),
    )
    .await
    .expect("schedule");
    let (slot, key) = make_due(&c, &name).await;
    // No fire_schedules: the worker's claim of the queue fires the due slot.
    let (handle, task, seen) = run_worker(&queue);
    common::wait_for_all(&c, &queue, "done", 1).await;
    stop(handle, task).await;
    let seen: Vec<String> = seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(_, key, _)| key.clone())
        .collect();
    assert_eq!(seen, vec![key]);
    assert_eq!(
        shown(&c, &name).await.expect("listed").last_slot,
        Some(slot)
    );
    workfence::unschedule(&c, &name).await.expect("unschedule");
}

#[tokio::test]
async fn pause_and_resume_a_schedule() {
    let _serial = serial().await;
    let c = common::connect().await;
    let name = common::unique("rs_schedule");
    let queue = common::unique("sched_pause");
    let defaults = ScheduleOptions::default();
    workfence::schedule(&c, &name, YEARLY, &queue, &json!({}), &defaults)
        .await
        .expect("schedule");
    assert!(workfence::pause_schedule(&c, &name).await.expect("pause"));
    assert!(
        !workfence::pause_schedule(&c, &name)
            .await
            .expect("pause again"),
        "already paused"
    );
    assert!(shown(&c, &name).await.expect("listed").paused);
    let (_, key) = make_due(&c, &name).await;
    assert_eq!(
        workfence::fire_schedules(&c).await.expect("fire"),
        0,
        "a paused schedule fires nothing"
    );
    assert!(keys(&c, &queue).await.is_empty());
    assert!(
        !workfence::schedule(&c, &name, YEARLY, &queue, &json!({}), &defaults)
            .await
            .expect("the same again"),
        "unchanged"
    );
    assert!(
        shown(&c, &name).await.expect("listed").paused,
        "a replace keeps the pause"
    );

    assert!(workfence::resume_schedule(&c, &name).await.expect("resume"));
    assert!(
        !workfence::resume_schedule(&c, &name)
            .await
            .expect("resume again"),
        "not paused"
    );
    assert!(!shown(&c, &name).await.expect("listed").paused);
    // The slot missed while paused: catch_up 'latest' fires it.
    assert_eq!(workfence::fire_schedules(&c).await.expect("fire"), 1);
    assert_eq!(keys(&c, &queue).await, vec![key]);
    workfence::unschedule(&c, &name).await.expect("unschedule");
}

#[tokio::test]
async fn bad_arguments_and_unknown_schedules_are_their_named_errors() {
    let c = common::connect().await;
    let name = common::unique("rs_schedule");
    let queue = common::unique("sched_errors");
    let defaults = ScheduleOptions::default();
    match workfence::schedule(&c, &name, "every day at two", &queue, &json!({}), &defaults).await {
        Err(e @ Error::InvalidArgument(..)) => {
            let server = e.server().expect("server error");
            assert_eq!(server.code, "22023");
            let text = format!(
                "{} {}",
                server.message,
                server.detail.as_deref().unwrap_or("")
            );
            assert!(text.contains("cron"), "{e}");
        }
        other => panic!("a bad cron expression: expected InvalidArgument, got {other:?}"),
    }
    let mars = ScheduleOptions::default().timezone("Mars/Olympus_Mons");
    match workfence::schedule(&c, &name, YEARLY, &queue, &json!({}), &mars).await {
        Err(e @ Error::InvalidArgument(..)) => assert_eq!(e.code(), Some("22023")),
        other => panic!("an unknown time zone: expected InvalidArgument, got {other:?}"),
    }
    let zero = ScheduleOptions::default().max_attempts(0);
    assert!(matches!(
        workfence::schedule(&c, &name, YEARLY, &queue, &json!({}), &zero).await,
        Err(Error::InvalidArgument(..))
    ));
    assert!(matches!(
        workfence::schedule(&c, "", YEARLY, &queue, &json!({}), &defaults).await,
        Err(Error::InvalidArgument(..))
    ));
    assert_eq!(shown(&c, &name).await, None, "nothing was made");

    match workfence::pause_schedule(&c, &name).await {
        Err(e @ Error::UndefinedObject(..)) => assert_eq!(e.code(), Some("42704")),
        other => panic!("pausing an unknown schedule: expected UndefinedObject, got {other:?}"),
    }
    match workfence::resume_schedule(&c, &name).await {
        Err(e @ Error::UndefinedObject(..)) => assert_eq!(e.code(), Some("42704")),
        other => panic!("resuming an unknown schedule: expected UndefinedObject, got {other:?}"),
    }
    assert!(!workfence::unschedule(&c, &name).await.expect("unschedule"));
}
