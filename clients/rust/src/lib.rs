//! # workfence
//!
//! The Rust worker library of [pg_workfence](https://github.com/pg-workfence/pg_workfence), the
//! PostgreSQL extension for lease-fenced claiming of work: every claim hands out a fresh,
//! strictly increasing `epoch` (a fencing token), and only an item's newest epoch can renew,
//! finish, release, fail or assert it.
//!
//! - [`enqueue`] (with [`EnqueueOptions::group_key`] for serial groups and, from 0.12.0,
//!   [`EnqueueOptions::on_conflict`] for debounce and throttle: [`OnConflict`]), from 0.12.0
//!   [`enqueue_many`] (many [`EnqueueItem`]s in one statement, with [`EnqueueManyOptions`]),
//!   [`await_result`] (from 0.12.0: wait for an item's [`Outcome`]) and the operator's calls
//!   ([`retry`], [`reschedule`], [`reschedule_in`], [`cancel`], [`pause`], [`resume`],
//!   [`limit`], [`item`], [`item_by_id`]) on a connection you pass;
//! - the schedules (from 0.12.0; cron in the server, one item per slot): [`schedule`] with
//!   [`ScheduleOptions`], [`unschedule`], [`pause_schedule`], [`resume_schedule`],
//!   [`fire_schedules`] and [`schedules`] (each a [`Schedule`]), on a connection you pass;
//! - [`Worker`], the runner: long-poll claims, a heartbeat renewing every held item and
//!   listening on `work_lease_lost`, your [`Handler`] run per [`Job`] and cancelled when its
//!   lease is lost, the job's [`FencedTransaction`] (and [`Job::guard`] around a side effect
//!   outside the database), checkpoints ([`Job::progress`], [`Job::checkpoint`]), failures with
//!   a retry policy, settles sent again after a lost connection, release on SIGTERM/SIGINT;
//! - workflows (from 0.12.0): [`EnqueueOptions::after`] makes an item wait for its parents
//!   (with [`OnParentFailure`] for a parent that fails), [`Job::parent_results`] reads what
//!   they ended with, and [`workflow`] the graph around an item (each row a [`WorkflowItem`]);
//! - [`Error`], one variant per SQLSTATE;
//! - trace context (from 0.12.0): [`EnqueueOptions::trace`] and [`Job::trace`], a W3C
//!   `traceparent` stored with the item; with the cargo feature `otel` (off by default: nothing
//!   of OpenTelemetry is compiled without it), [`enqueue`] sends the current OpenTelemetry span's
//!   and the worker runs each handler in a `process <queue>` consumer span linked to it
//!   (`traceparent` formats a context's).
//!
//! The behaviour, settings and log lines are those every pg_workfence library shares
//! (clients/README.md); logging goes through `tracing`, target `workfence`.
//!
//! ```no_run
//! use std::time::Duration;
//! use workfence::{Job, Worker};
//!
//! # async fn demo() -> Result<(), workfence::Error> {
//! let worker = Worker::builder("host=127.0.0.1 user=app dbname=app", "emails")
//!     .concurrency(4)
//!     .lease(Duration::from_secs(30))
//!     .build()?;
//! worker
//!     .run_until_signal(|job: Job| async move {
//!         let tx = job.transaction().await?;
//!         tx.execute(
//!             "INSERT INTO app.sent (item_id, epoch) VALUES ($1, $2)",
//!             &[&job.id, &job.epoch],
//!         )
//!         .await?;
//!         tx.finish(Some(serde_json::json!({"sent": true}))).await?;
//!         Ok(None)
//!     })
//!     .await
//! # }
//! ```

mod error;
mod failure;
mod job;
mod ops;
#[cfg(feature = "otel")]
mod otel;
mod registry;
mod schedules;
mod settle;
mod traceparent;
mod worker;

pub use error::{Error, Result, ServerError};
pub use job::{FencedTransaction, Job};
pub use ops::{
    await_result, cancel, enqueue, enqueue_many, item, item_by_id, limit, pause, reschedule,
    reschedule_in, resume, retry, workflow, EnqueueItem, EnqueueManyOptions, EnqueueOptions,
    Enqueued, Item, Limits, OnConflict, OnParentFailure, Outcome, WorkflowItem,
};
pub use schedules::{
    fire_schedules, pause_schedule, resume_schedule, schedule, schedules, unschedule, CatchUp,
    Schedule, ScheduleOptions,
};
pub use worker::{
    Handle, Handler, HandlerError, HandlerResult, RetryPolicy, Worker, WorkerBuilder,
};

#[cfg(feature = "otel")]
pub use otel::traceparent;

/// tokio-util's cancellation token, as [`Job::cancellation_token`] returns it.
pub use tokio_util::sync::CancellationToken;
