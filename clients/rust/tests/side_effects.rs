//! A side effect outside the database (here a file, one line per send) made under
//! [`Job::guard`] is made once, whatever copy of the job runs late: two copies of a worker under
//! one owner name, one of them stalled past its lease (the stand-in for SIGSTOP: its heartbeat
//! stops, and the new claim is not notified to it, so it learns of the loss only from the
//! server) while the other claims the item anew and sends. When the stalled copy's timer fires,
//! its guard is refused (55000) and it sends nothing; without the guard it sends a duplicate.
//! And a guard the stalled copy takes first, before anyone claimed the item anew, holds the new
//! claim off (the row lock) until it has sent and finished.

mod common;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_postgres::Client;
use workfence::{EnqueueOptions, Job, Worker};

/// The outside system: a file that gets one line per send.
struct Sink(PathBuf);

impl Sink {
    /// A new empty file in the temporary directory.
    fn new() -> Arc<Self> {
        let path = std::env::temp_dir().join(common::unique("workfence_sink"));
        std::fs::write(&path, "").expect("create the sink");
        Arc::new(Sink(path))
    }

    /// One send: appends `line`.
    fn send(&self, line: &str) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.0)
            .expect("open the sink");
        writeln!(file, "{line}").expect("write the sink");
    }

    /// Every send so far.
    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.0)
            .expect("read the sink")
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.0) {
            eprintln!("removing {}: {e}", self.0.display());
        }
    }
}

/// The documented way: the send inside the job's guard, which then finishes the item.
async fn send_guarded(job: &Job, sink: &Sink) -> workfence::Result<()> {
    let guard = job.guard().await?;
    sink.send(&job.fencing_token());
    guard
        .finish(Some(json!({ "sent": job.fencing_token() })))
        .await
}

/// Both copies' owner name (a shared name is no identity: the epoch fences).
const OWNER: &str = "tests/copies";

/// The copy that stalls. Its handler stops renewing (a stopped process's heartbeat stops with
/// it), reports its (id, epoch) on `started` and leaves the send to a timer, a task of its own
/// (which a lost lease does not abort), that waits for `fire` and then runs `send` with the job,
/// reporting its outcome on `outcome`.
fn stalled_copy<F, Fut>(
    queue: &str,
    started: mpsc::UnboundedSender<(i64, i64)>,
    fire: Arc<Notify>,
    outcome: mpsc::UnboundedSender<workfence::Result<()>>,
    send: F,
) -> (
    workfence::Handle,
    tokio::task::JoinHandle<workfence::Result<()>>,
)
where
    F: Fn(Arc<Job>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = workfence::Result<()>> + Send + 'static,
{
    let w = Worker::builder(common::dsn(), queue)
        .owner(OWNER)
        .poll_wait(Duration::from_secs(1))
        .lease(Duration::from_secs(1))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let (started, fire, outcome, send) = (
                    started.clone(),
                    Arc::clone(&fire),
                    outcome.clone(),
                    send.clone(),
                );
                async move {
                    job.stop_renewing();
                    let job = Arc::new(job);
                    started
                        .send((job.id, job.epoch))
                        .map_err(|e| e.to_string())?;
                    let timer = tokio::spawn(async move {
                        fire.notified().await;
                        let sent = send(Arc::clone(&job)).await;
                        outcome.send(sent).map_err(|e| e.to_string())
                    });
                    timer.await??;
                    Ok(None)
                }
            },
            std::future::pending(),
        )
        .await
    });
    (handle, task)
}

/// The other copy: same owner, sends under the guard at once. Its claims do not notify
/// `work_lease_lost` (a superuser setting of its session), so the stalled copy is told nothing,
/// as a stopped process reads nothing before its timer fires.
fn prompt_copy(
    queue: &str,
    sink: Arc<Sink>,
) -> (
    workfence::Handle,
    tokio::task::JoinHandle<workfence::Result<()>>,
) {
    let dsn = format!(
        "{} options='-c workfence.notify_lease_lost=off'",
        common::dsn()
    );
    let w = Worker::builder(dsn, queue)
        .owner(OWNER)
        .poll_wait(Duration::from_secs(1))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let sink = Arc::clone(&sink);
                async move {
                    send_guarded(&job, &sink).await?;
                    Ok(None)
                }
            },
            std::future::pending(),
        )
        .await
    });
    (handle, task)
}

/// Stops a worker and waits (bounded) for `run` to return Ok.
async fn stop(handle: workfence::Handle, task: tokio::task::JoinHandle<workfence::Result<()>>) {
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
}

/// Waits until item `key` of `queue` is done; returns its epoch.
async fn done_epoch(c: &Client, queue: &str, key: &str) -> i64 {
    common::wait_for(&format!("{key} done"), || async {
        let item = workfence::item(c, queue, key)
            .await
            .expect("item")
            .expect("exists");
        (item.state == "done").then_some(item.epoch.expect("epoch"))
    })
    .await
}

/// The stalled copy claims the item and stalls past its lease; the prompt copy claims it anew
/// and sends (under the guard); then the stalled copy's timer fires and it sends with `send`.
/// Returns the sink's lines, the stalled send's outcome, and both epochs.
async fn a_stalled_copy_fires_after_a_new_claim<F, Fut>(
    send: F,
) -> (Vec<String>, workfence::Result<()>, i64, i64)
where
    F: Fn(Arc<Job>, Arc<Sink>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = workfence::Result<()>> + Send + 'static,
{
    let c = common::connect().await;
    let queue = common::unique("fx_stalled");
    let sink = Sink::new();
    workfence::enqueue(
        &c,
        &queue,
        &json!({"to": "a@example.com"}),
        &EnqueueOptions::default().key("mail"),
    )
    .await
    .expect("enqueue");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (outcome_tx, mut outcome) = mpsc::unbounded_channel();
    let fire = Arc::new(Notify::new());
    let stalled_sink = Arc::clone(&sink);
    let (stalled, stalled_task) = stalled_copy(
        &queue,
        started_tx,
        Arc::clone(&fire),
        outcome_tx,
        move |job| send(job, Arc::clone(&stalled_sink)),
    );
    let (id, stale_epoch) = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("the stalled copy's job starts")
        .expect("a job");
    common::wait_lease_lapsed(&c, id).await;
    let (prompt, prompt_task) = prompt_copy(&queue, Arc::clone(&sink));
    let new_epoch = done_epoch(&c, &queue, "mail").await;
    assert!(new_epoch > stale_epoch, "claimed anew by the prompt copy");
    // The stalled copy resumes: its timer fires.
    fire.notify_one();
    let stale = tokio::time::timeout(common::DEADLINE, outcome.recv())
        .await
        .expect("the stalled copy's timer ran")
        .expect("an outcome");
    stop(prompt, prompt_task).await;
    stop(stalled, stalled_task).await;
    let item = workfence::item(&c, &queue, "mail")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!(
        (item.state.as_str(), item.epoch),
        ("done", Some(new_epoch)),
        "the item stays the prompt copy's"
    );
    assert_eq!(
        item.result,
        Some(json!({ "sent": format!("{id}:{new_epoch}") }))
    );
    (sink.lines(), stale, stale_epoch, new_epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_copys_guard_is_refused_and_it_sends_nothing() {
    let (sends, stale, _, new_epoch) =
        a_stalled_copy_fires_after_a_new_claim(|job, sink| async move {
            send_guarded(&job, &sink).await
        })
        .await;
    match stale {
        Err(e) => assert!(
            e.is_lease_lost() && e.code() == Some("55000"),
            "the stalled copy's guard: {e:?}"
        ),
        Ok(()) => panic!("the stalled copy's guard was granted"),
    }
    assert_eq!(sends.len(), 1, "0 duplicate sends: {sends:?}");
    assert!(sends[0].ends_with(&format!(":{new_epoch}")), "{sends:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_the_stalled_copy_sends_a_duplicate() {
    let (sends, stale, stale_epoch, new_epoch) =
        a_stalled_copy_fires_after_a_new_claim(|job, sink| async move {
            // Checked nothing, held nothing: the stale copy cannot know it is stale.
            sink.send(&job.fencing_token());
            Ok(())
        })
        .await;
    stale.expect("an unguarded send is not refused");
    assert_eq!(sends.len(), 2, "the duplicate shows: {sends:?}");
    assert!(sends[0].ends_with(&format!(":{new_epoch}")), "{sends:?}");
    assert!(sends[1].ends_with(&format!(":{stale_epoch}")), "{sends:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_taken_after_the_lease_lapsed_holds_off_a_new_claim_until_it_ends() {
    let c = common::connect().await;
    let queue = common::unique("fx_held");
    let sink = Sink::new();
    workfence::enqueue(
        &c,
        &queue,
        &json!({"to": "a@example.com"}),
        &EnqueueOptions::default().key("mail"),
    )
    .await
    .expect("enqueue");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (outcome_tx, mut outcome) = mpsc::unbounded_channel();
    let (held_tx, held) = oneshot::channel::<()>();
    let held_tx = Arc::new(std::sync::Mutex::new(Some(held_tx)));
    let fire = Arc::new(Notify::new());
    let proceed = Arc::new(Notify::new());
    let (stalled_sink, go) = (Arc::clone(&sink), Arc::clone(&proceed));
    let (stalled, stalled_task) = stalled_copy(
        &queue,
        started_tx,
        Arc::clone(&fire),
        outcome_tx,
        move |job: Arc<Job>| {
            let (sink, go, held_tx) = (
                Arc::clone(&stalled_sink),
                Arc::clone(&go),
                Arc::clone(&held_tx),
            );
            async move {
                let guard = job.guard().await?;
                if let Some(held) = held_tx
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
                {
                    held.send(()).map_err(|()| {
                        workfence::Error::Pool("the test stopped listening".into())
                    })?;
                }
                go.notified().await;
                sink.send(&job.fencing_token());
                guard
                    .finish(Some(json!({ "sent": job.fencing_token() })))
                    .await
            }
        },
    );
    let (id, epoch) = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("the job starts")
        .expect("a job");
    common::wait_lease_lapsed(&c, id).await;
    // Its timer fires before anyone claimed the item anew: the guard is granted (the token is
    // still current), and holds the row.
    fire.notify_one();
    tokio::time::timeout(common::DEADLINE, held)
        .await
        .expect("the guard is taken")
        .expect("held");
    let claim = "SELECT id FROM workfence.work_claim($1, $2, interval '1 minute')";
    let lapsed: bool = c
        .query_one(
            "SELECT lease_until < clock_timestamp() FROM workfence.items WHERE id = $1",
            &[&id],
        )
        .await
        .expect("lease")
        .get(0);
    assert!(lapsed, "the lease has lapsed");
    let taken = c.query(claim, &[&queue, &OWNER]).await.expect("claim");
    assert!(taken.is_empty(), "a claim under the guard takes nothing");
    proceed.notify_one();
    tokio::time::timeout(common::DEADLINE, outcome.recv())
        .await
        .expect("the send ran")
        .expect("an outcome")
        .expect("sent and finished under the guard");
    let taken = c.query(claim, &[&queue, &OWNER]).await.expect("claim");
    assert!(taken.is_empty(), "nothing to claim: the item is done");
    stop(stalled, stalled_task).await;
    let item = workfence::item(&c, &queue, "mail")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!((item.state.as_str(), item.epoch), ("done", Some(epoch)));
    assert_eq!(sink.lines(), [format!("{id}:{epoch}")], "one send");
}
