//! [`Job`]: what a handler is given; [`FencedTransaction`]: the handler's writes, committed only
//! under a current lease (docs/writing-workers.md, *The loop*, step 3; docs/contract.md,
//! promise 1).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{Row, ToStatement};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::error::{Error, Result, ServerError};
use crate::registry::{Fate, Registry};
use crate::settle::{commit_outcome, Committed};

/// Raises 55000 unless the token is current; holds the item's row lock to the end of the
/// transaction, so that nobody can claim the item before the commit.
pub(crate) const ASSERT_SQL: &str = "SELECT workfence.work_assert($1, $2, $3)";
/// Marks the item done with its result.
pub(crate) const FINISH_SQL: &str = "SELECT workfence.work_finish($1, $2, $3, $4)";
/// Stores the job's progress under its token (from 0.12.0); false for a token not current.
const PROGRESS_SQL: &str = "SELECT workfence.work_progress($1, $2, $3, $4)";
/// The results of the item's parents under its token (from 0.12.0, workflows); NULL for a
/// token not current.
const PARENT_RESULTS_SQL: &str = "SELECT workfence.work_parent_results($1, $2, $3)";

/// What every job of one worker shares: the held tokens, the pool, the owner name.
pub(crate) struct Shared {
    /// The held tokens.
    pub(crate) registry: Arc<Registry>,
    /// Connections for the fenced transactions and the settling calls.
    pub(crate) pool: deadpool_postgres::Pool,
    /// The owner name of every claim.
    pub(crate) owner: String,
    /// The lease every claim and renew asks for.
    pub(crate) lease: std::time::Duration,
}

/// One claimed item, handed to the handler. The public fields are the claim's row of
/// `work_claim`; the token is (`id`, the worker's owner, `epoch`).
///
/// A step of a workflow (enqueued with [`crate::EnqueueOptions::after`], from 0.12.0) reads what
/// its parents ended with from [`Job::parent_results`].
///
/// A job is cancelled ([`Job::cancelled`]) when its lease is lost (a renew refused, or `NOTIFY
/// work_lease_lost` naming exactly this id and epoch) or when the shutdown grace runs out. The
/// runner then also **drops the handler's future** (it runs as a task of its own, which is
/// aborted): code after the handler's current `.await` does not run, its `Drop`s do. Use the
/// token for work the handler hands to tasks of its own, which an abort does not reach.
pub struct Job {
    /// The item's id.
    pub id: i64,
    /// The item's key, unique within its queue.
    pub key: String,
    /// The payload, as enqueued.
    pub payload: Value,
    /// Which claim of the item this is (1 for the first).
    pub attempt: i32,
    /// The fencing token this claim handed out: pass it with every write to another system,
    /// and have that system refuse older epochs (docs/writing-workers.md, *Fencing writes to
    /// other systems with the epoch*).
    pub epoch: i64,
    /// The claim row's `progress` (from 0.12.0): the last checkpoint an earlier attempt stored.
    progress: Option<Value>,
    /// The claim row's `trace` (from 0.12.0): the enqueuer's W3C traceparent.
    trace: Option<String>,
    /// Cancelled on lease loss or at the end of the shutdown grace.
    cancel: CancellationToken,
    /// The worker's shared state.
    shared: Arc<Shared>,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("key", &self.key)
            .field("payload", &self.payload)
            .field("attempt", &self.attempt)
            .field("epoch", &self.epoch)
            .field("checkpoint", &self.progress)
            .field("trace", &self.trace)
            .field("owner", &self.shared.owner)
            .finish()
    }
}

impl Job {
    /// Made by the runner for each claimed row. The row's `progress` and `trace` columns (from
    /// 0.12.0) are read by name when the row has them: a server without them gives `None`.
    pub(crate) fn new(
        row: &Row,
        cancel: CancellationToken,
        shared: Arc<Shared>,
    ) -> std::result::Result<Self, tokio_postgres::Error> {
        let Json(payload) = row.try_get::<_, Json<Value>>("payload")?;
        let has = |name: &str| row.columns().iter().any(|c| c.name() == name);
        let progress = if has("progress") {
            row.try_get::<_, Option<Json<Value>>>("progress")?
                .map(|Json(v)| v)
        } else {
            None
        };
        let trace = if has("trace") {
            row.try_get("trace")?
        } else {
            None
        };
        Ok(Job {
            id: row.try_get("id")?,
            key: row.try_get("key")?,
            payload,
            attempt: row.try_get("attempt")?,
            epoch: row.try_get("epoch")?,
            progress,
            trace,
            cancel,
            shared,
        })
    }

    /// The job's **fencing token** as one stable string, `"<id>:<epoch>"` (e.g. `"7:42"`): pass
    /// it as the idempotency key of a call to an external API (a payment, an email provider), so
    /// that the API drops a repeat of the same attempt's call (a retry after a lost reply, or a
    /// call made again after the guard's commit failed: see [`Job::guard`]). Every claim of the
    /// item hands out a new epoch, so each attempt has its own token; a system that must refuse a
    /// stale attempt (not only a repeat) compares epochs instead (docs/writing-workers.md,
    /// *Fencing writes to other systems with the epoch*).
    pub fn fencing_token(&self) -> String {
        format!("{}:{}", self.id, self.epoch)
    }

    /// The last checkpoint an earlier attempt stored with [`Job::progress`] (the claim row's
    /// `progress`, from 0.12.0), to resume from; `None` on a first attempt, after a rerun by
    /// [`crate::OnConflict`], when no attempt stored one, or against a server older than 0.12.0.
    /// Only progress stored under a lease that was current at the time counts (a stale copy's
    /// write is refused). It is the value at the claim: this attempt's own [`Job::progress`]
    /// calls do not change it.
    pub fn checkpoint(&self) -> Option<&Value> {
        self.progress.as_ref()
    }

    /// The item's trace context (the claim row's `trace`, from 0.12.0): the W3C `traceparent`
    /// its enqueue was given ([`crate::EnqueueOptions::trace`], or with the `otel` feature the
    /// enqueuer's span), as stored; `None` when it was enqueued without one, or from a server
    /// older than 0.12.0. With the `otel` feature the handler already runs in a `process
    /// <queue>` span linked to it (README.md, *Tracing*).
    pub fn trace(&self) -> Option<&str> {
        self.trace.as_deref()
    }

    /// Stores `progress` as the item's checkpoint (`work_progress(id, owner, epoch, progress)`,
    /// from 0.12.0), on a connection of the runner's pool, committed at once: `work_item`,
    /// `work_items` and the dashboard show it, and the next claim of the item hands it to that
    /// attempt's [`Job::checkpoint`], so that a retried job resumes from it. At most 64 KiB of
    /// JSON text (else [`Error::InvalidArgument`], 22023).
    ///
    /// Fenced like a renew: `Ok(true)` when stored under the job's current token; **`Ok(false)`
    /// when the lease is lost** (the item was claimed anew, cancelled or finished): nothing was
    /// stored, and the runner treats it as a refused renew (logged `progress id=.. refused`,
    /// warn): the job is cancelled and its item abandoned. No write is made for a job already
    /// known lost.
    ///
    /// While the job's fenced transaction ([`Job::transaction`], [`Job::guard`]) is open, call
    /// [`FencedTransaction::progress`] instead: this call would wait for that transaction's row
    /// lock, so it is refused with [`Error::Config`]. Other errors: [`Error::Connection`] /
    /// [`Error::Pool`] (nothing known to be stored; the job goes on), 42883 in
    /// [`Error::Database`] against a server older than 0.12.0.
    pub async fn progress(&self, progress: &Value) -> Result<bool> {
        let (id, epoch) = (self.id, self.epoch);
        let registry = &self.shared.registry;
        if registry.fate(id, epoch) != Some(Fate::Held) {
            return Ok(false);
        }
        if registry.is_quiet(id, epoch) {
            return Err(Error::config(
                "progress",
                "the job's fenced transaction is open: call FencedTransaction::progress",
            ));
        }
        let conn = self.shared.pool.get().await?;
        let stmt = conn.prepare_cached(PROGRESS_SQL).await?;
        let stored: bool = conn
            .query_one(&stmt, &[&id, &self.shared.owner, &epoch, &Json(progress)])
            .await?
            .try_get(0)?;
        if !stored {
            tracing::warn!(target: "workfence", "progress id={id} refused");
            registry.lose(id, epoch, true);
        }
        Ok(stored)
    }

    /// The results of the items this one waited for (its *parents*,
    /// [`crate::EnqueueOptions::after`]), read with `work_parent_results(id, owner, epoch)`
    /// (from 0.12.0) on a connection of the runner's pool, fenced like a renew.
    ///
    /// `Ok(Some(map))`: each parent's id to what it ended with: a parent that is done maps to
    /// its result (`Value::Null` when it finished without one); one that ended failed or
    /// cancelled (only an item enqueued with [`crate::OnParentFailure::Run`] runs after that)
    /// maps to `{"state": "failed" | "cancelled", "error": <its last error text or null>}`. An
    /// empty map for an item without parents (a purged parent is left out).
    ///
    /// **`Ok(None)` when the lease is lost** (the item was claimed anew, cancelled or finished:
    /// a stalled copy reads nothing); the runner then treats it as a refused renew (logged
    /// `parent_results id=.. refused`, warn): the job is cancelled and its item abandoned. No
    /// statement is sent for a job already known lost. It only reads, so it may be called
    /// while the job's fenced transaction is open (it does not wait for that transaction's row
    /// lock). Other errors: [`Error::Connection`] / [`Error::Pool`] (the job goes on), 42883 in
    /// [`Error::Database`] against a server older than 0.12.0.
    pub async fn parent_results(&self) -> Result<Option<BTreeMap<i64, Value>>> {
        let (id, epoch) = (self.id, self.epoch);
        let registry = &self.shared.registry;
        if registry.fate(id, epoch) != Some(Fate::Held) {
            return Ok(None);
        }
        let conn = self.shared.pool.get().await?;
        let stmt = conn.prepare_cached(PARENT_RESULTS_SQL).await?;
        // The object's keys are the parents' ids as text, which serde_json reads as i64 keys.
        let results: Option<Json<BTreeMap<i64, Value>>> = conn
            .query_one(&stmt, &[&id, &self.shared.owner, &epoch])
            .await?
            .try_get(0)?;
        if results.is_none() {
            tracing::warn!(target: "workfence", "parent_results id={id} refused");
            registry.lose(id, epoch, true);
        }
        Ok(results.map(|Json(results)| results))
    }

    /// The owner name the item was claimed under (the worker's `owner` setting).
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Resolves once the job is cancelled: its lease was lost, or the shutdown grace ran out.
    /// (The runner drops the handler's future at the same time; see [`Job`].)
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether the job was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The job's cancellation token (a clone), for tasks the handler spawns; tokio-util's
    /// `CancellationToken`.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Stops the heartbeat from renewing this job's lease from now on: the lease then lapses
    /// `lease` after the last renew while the handler still runs, and another claim may take
    /// the item (the runner learns it from `NOTIFY work_lease_lost` and cancels the job).
    /// A hook for tests (a stand-in for a worker that stalls) and for jobs that should run
    /// into their lease on purpose. Not undone.
    pub fn stop_renewing(&self) {
        self.shared.registry.stop_renewing(self.id, self.epoch);
    }

    /// Begins the job's **fenced transaction**: `BEGIN`, then `work_assert(id, owner, epoch)`,
    /// which holds the item's row lock until the end, so that the writes made through the
    /// returned [`FencedTransaction`] commit only while the lease is held
    /// ([`FencedTransaction::finish`] runs `work_finish` and `COMMIT`). The heartbeat stops
    /// renewing the item first (a renew would wait on that row lock), and again while the
    /// transaction is open.
    ///
    /// Errors: [`Error::LeaseLost`] (55000: the token is not current, or the job's lease was
    /// already found lost; the runner then abandons the item), [`Error::Connection`] /
    /// [`Error::Pool`] (no connection), and any other server error of the statements.
    pub async fn transaction(&self) -> Result<FencedTransaction> {
        let registry = &self.shared.registry;
        registry.quiesce(self.id, self.epoch).await;
        let tx = FencedTransaction {
            conn: None,
            id: self.id,
            epoch: self.epoch,
            shared: Arc::clone(&self.shared),
        };
        if registry.fate(self.id, self.epoch) != Some(Fate::Held) {
            return Err(Error::LeaseLost(
                ServerError::lease_lost(format!(
                    "the lease of item {} epoch {} was lost before the transaction began",
                    self.id, self.epoch
                )),
                None,
            ));
        }
        let mut tx = tx;
        let conn = self.shared.pool.get().await?;
        conn.batch_execute("BEGIN").await?;
        tx.conn = Some(conn);
        let assert = tx.conn()?.prepare_cached(ASSERT_SQL).await?;
        if let Err(e) = tx
            .conn()?
            .execute(&assert, &[&self.id, &self.shared.owner, &self.epoch])
            .await
        {
            let e = Error::from(e);
            if e.is_lease_lost() {
                registry.lose(self.id, self.epoch, false);
            }
            return Err(e); // dropping `tx` rolls back
        }
        Ok(tx)
    }

    /// Checks and holds the job's lease around a **side effect outside the database** (an email,
    /// a call to another API): the job's fenced transaction ([`Job::transaction`]) under the name
    /// of what it is for here. Make the effect while the returned guard is open, then end it with
    /// [`FencedTransaction::finish`] (the item done, with whatever the guard's own writes) or
    /// [`FencedTransaction::commit`] (the job goes on):
    ///
    /// ```no_run
    /// # async fn send_email(_to: &str, _idempotency_key: &str) {}
    /// # async fn handler(job: workfence::Job) -> workfence::HandlerResult {
    /// let guard = job.guard().await?;          // Error::LeaseLost if this copy is stale
    /// send_email(job.payload["to"].as_str().unwrap_or(""), &job.fencing_token()).await;
    /// guard.finish(Some(serde_json::json!({"sent": true}))).await?;
    /// Ok(None)
    /// # }
    /// ```
    ///
    /// Why it works: `work_assert` refuses a token that is not current and holds the item's row
    /// lock until the guard ends, and a claim skips a locked item, so **no other worker can claim
    /// the item while the guard is held**, even past the lease. A copy of this job that lost its
    /// lease without knowing it yet — a process stopped past its lease (SIGSTOP, a long GC pause)
    /// and resumed, whose timer fires before its heartbeat notices — is refused here with
    /// [`Error::LeaseLost`] (55000) before it makes the effect; a guard taken first holds the new
    /// claim off until it ends. Checking the lease without holding it (a renew, then the effect)
    /// does not do this: the item can be claimed anew between the check and the effect.
    ///
    /// What it does not do: make the effect happen exactly once. If this process dies, or its
    /// connection is lost, after the effect and before the guard's commit, the item is claimed
    /// again and the effect made again: pass [`Job::fencing_token`] as the external system's
    /// idempotency key so that it drops the repeat. Keep the effect short: the guard holds a
    /// pool connection, a transaction and the row lock (the heartbeat does not renew the item
    /// meanwhile; a lease that lapses under the guard is not claimed anew, and the finish still
    /// counts).
    ///
    /// Errors: as [`Job::transaction`].
    pub async fn guard(&self) -> Result<FencedTransaction> {
        self.transaction().await
    }
}

/// The job's fenced transaction: a transaction on a connection of the runner's pool that began
/// with `work_assert` and ends with [`finish`](FencedTransaction::finish) (`work_finish`, then
/// `COMMIT`), [`commit`](FencedTransaction::commit) (the job goes on) or a rollback. Also what
/// [`Job::guard`] returns, to hold the lease around a side effect outside the database. Run the job's own writes through its query methods (or
/// [`client`](FencedTransaction::client)); they commit only while the lease is held.
///
/// Dropped without `finish` or `rollback` (an error returned with `?`, the handler cancelled),
/// it rolls back: a `ROLLBACK` sent from a task of its own, queued behind any statement still in
/// flight on the connection, which goes back to the pool afterwards.
///
/// Do not send `COMMIT`, `ROLLBACK` or `BEGIN` yourself; savepoints do not open the fence (a
/// rolled-back savepoint releases `work_assert`'s lock, and the commit then checks the token
/// again: docs/writing-workers.md).
pub struct FencedTransaction {
    /// The connection, with the transaction open; `None` once it ended.
    conn: Option<deadpool_postgres::Object>,
    /// The item's id.
    id: i64,
    /// The token's epoch.
    epoch: i64,
    /// The worker's shared state.
    shared: Arc<Shared>,
}

impl fmt::Debug for FencedTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedTransaction")
            .field("id", &self.id)
            .field("epoch", &self.epoch)
            .field("open", &self.conn.is_some())
            .finish()
    }
}

impl FencedTransaction {
    /// The open connection, or a config error once the transaction ended.
    fn conn(&self) -> Result<&deadpool_postgres::Object> {
        self.conn
            .as_ref()
            .ok_or_else(|| Error::config("transaction", "the fenced transaction has ended"))
    }

    /// The connection the transaction runs on (tokio-postgres's `Client`), for calls the
    /// methods below do not cover. Errors: [`Error::Config`] once the transaction ended.
    pub fn client(&self) -> Result<&tokio_postgres::Client> {
        Ok(self.conn()?)
    }

    /// `Client::execute` in the transaction: the number of rows changed.
    pub async fn execute<T>(&self, statement: &T, params: &[&(dyn ToSql + Sync)]) -> Result<u64>
    where
        T: ?Sized + ToStatement,
    {
        Ok(self.conn()?.execute(statement, params).await?)
    }

    /// `Client::query` in the transaction: every row.
    pub async fn query<T>(&self, statement: &T, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>>
    where
        T: ?Sized + ToStatement,
    {
        Ok(self.conn()?.query(statement, params).await?)
    }

    /// `Client::query_one` in the transaction: exactly one row, else an error.
    pub async fn query_one<T>(&self, statement: &T, params: &[&(dyn ToSql + Sync)]) -> Result<Row>
    where
        T: ?Sized + ToStatement,
    {
        Ok(self.conn()?.query_one(statement, params).await?)
    }

    /// `Client::query_opt` in the transaction: zero or one row.
    pub async fn query_opt<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>>
    where
        T: ?Sized + ToStatement,
    {
        Ok(self.conn()?.query_opt(statement, params).await?)
    }

    /// `Client::batch_execute` in the transaction: statements without parameters.
    pub async fn batch_execute(&self, sql: &str) -> Result<()> {
        Ok(self.conn()?.batch_execute(sql).await?)
    }

    /// Finishes the item with `result` (`work_finish(id, owner, epoch, result)`; `None` stores
    /// NULL) and commits, together with every write made in the transaction. The runner then
    /// settles nothing more for the job, whatever the handler returns.
    ///
    /// Errors: [`Error::LeaseLost`] (55000) when `work_finish` returns false (only possible
    /// through a PL/Proxy router, where `work_assert` holds no lock) or the `COMMIT` raises
    /// 55000 (a savepoint rolled back and the item was claimed anew): nothing was committed, and
    /// the runner abandons the item.
    ///
    /// A `COMMIT` whose reply is lost (its connection broke) is resolved before this returns,
    /// logged `resend commit id=.. epoch=.. error=..` (warn): on a new connection within the
    /// lease, a renew, which waits for a transaction still ending on the old backend (unless the
    /// job stopped renewing), then `work_lease_status`. Committed: `finish .. ok` and `Ok(())`.
    /// Not committed (the transaction rolled back with its connection; the token is still
    /// current): the connection error (return it: the item is failed with it and retried). The
    /// lease lost: [`Error::LeaseLost`]. No answer within the lease: logged `commit id=..
    /// epoch=.. outcome unknown error=..`, and the connection error. Any other error: the
    /// `COMMIT` failed and nothing was committed.
    pub async fn finish(mut self, result: Option<Value>) -> Result<()> {
        let (id, epoch) = (self.id, self.epoch);
        let registry = Arc::clone(&self.shared.registry);
        let conn = self.conn()?;
        let finish = conn.prepare_cached(FINISH_SQL).await?;
        let result = result.map(Json);
        let finished: bool = conn
            .query_one(&finish, &[&id, &self.shared.owner, &epoch, &result])
            .await?
            .try_get(0)?;
        if !finished {
            self.rollback_now().await?;
            registry.lose(id, epoch, false);
            return Err(Error::LeaseLost(
                ServerError::lease_lost(format!(
                    "work_finish returned false for item {id} epoch {epoch}: the token is not current"
                )),
                None,
            ));
        }
        let conn = self.conn.take().expect("checked open above");
        if let Err(e) = conn.batch_execute("COMMIT").await {
            let e = Error::from(e);
            if e.needs_new_connection() {
                // The reply is lost: ask the server on a new connection what became of it.
                drop(deadpool_postgres::Object::take(conn));
                tracing::warn!(target: "workfence", "resend commit id={id} epoch={epoch} error={e}");
                let lease = self.shared.lease;
                match commit_outcome(&self.shared, id, epoch, lease).await {
                    Committed::Yes => {
                        registry.settle(id, epoch);
                        tracing::info!(target: "workfence", "finish id={id} epoch={epoch} ok");
                        return Ok(());
                    }
                    Committed::LeaseLost => {
                        registry.lose(id, epoch, false);
                        registry.set_quiet(id, epoch, false);
                        return Err(Error::LeaseLost(
                            ServerError::lease_lost(format!(
                                "the COMMIT of item {id} epoch {epoch} lost its connection, and \
                                 the token is no longer current: nothing was committed"
                            )),
                            None,
                        ));
                    }
                    Committed::No | Committed::Unknown => {}
                }
            }
            if e.is_lease_lost() {
                registry.lose(id, epoch, false);
            }
            registry.set_quiet(id, epoch, false);
            return Err(e);
        }
        registry.settle(id, epoch);
        tracing::info!(target: "workfence", "finish id={id} epoch={epoch} ok");
        Ok(())
    }

    /// Stores `progress` as the item's checkpoint (`work_progress`, from 0.12.0) in the
    /// transaction: it commits with the transaction's writes, or not at all, so a retried job
    /// resumes from a checkpoint that matches what was committed. `Ok(true)` when stored (under
    /// `work_assert`'s lock the token is current); `Ok(false)` only through a PL/Proxy router,
    /// where `work_assert` holds no lock (the job's lease is then lost: commit nothing). As
    /// [`Job::progress`] otherwise.
    pub async fn progress(&self, progress: &Value) -> Result<bool> {
        let conn = self.conn()?;
        let stmt = conn.prepare_cached(PROGRESS_SQL).await?;
        let stored: bool = conn
            .query_one(
                &stmt,
                &[&self.id, &self.shared.owner, &self.epoch, &Json(progress)],
            )
            .await?
            .try_get(0)?;
        if !stored {
            tracing::warn!(target: "workfence", "progress id={} refused", self.id);
            self.shared.registry.lose(self.id, self.epoch, false);
        }
        Ok(stored)
    }

    /// Commits the transaction's writes **without finishing the item**: the job goes on (its
    /// lease is renewed again) and may begin another fenced transaction; the runner settles the
    /// item when the handler returns. The end of a [`Job::guard`] whose job has more to do.
    ///
    /// Errors: [`Error::LeaseLost`] when the `COMMIT` raises 55000 (a savepoint rolled back and
    /// the item was claimed anew meanwhile): nothing was committed, and the runner abandons the
    /// item. Any other error: the outcome of the `COMMIT` may be unknown (a lost connection).
    pub async fn commit(mut self) -> Result<()> {
        let (id, epoch) = (self.id, self.epoch);
        let conn = self
            .conn
            .take()
            .ok_or_else(|| Error::config("transaction", "the fenced transaction has ended"))?;
        let committed = conn.batch_execute("COMMIT").await;
        let registry = &self.shared.registry;
        registry.set_quiet(id, epoch, false);
        if let Err(e) = committed {
            let e = Error::from(e);
            if e.is_lease_lost() {
                registry.lose(id, epoch, false);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Rolls the transaction back, keeping nothing of it; the job goes on (its lease is renewed
    /// again) and may begin another fenced transaction. Errors: the `ROLLBACK`'s.
    pub async fn rollback(mut self) -> Result<()> {
        self.rollback_now().await
    }

    /// Sends `ROLLBACK` and lets the heartbeat renew the item again.
    async fn rollback_now(&mut self) -> Result<()> {
        self.shared.registry.set_quiet(self.id, self.epoch, false);
        if let Some(conn) = self.conn.take() {
            conn.batch_execute("ROLLBACK").await?;
        }
        Ok(())
    }
}

impl Drop for FencedTransaction {
    /// Rolls back an open transaction from a task of its own (see [`FencedTransaction`]). With
    /// no runtime to spawn on, the connection is closed instead, which rolls back too.
    fn drop(&mut self) {
        self.shared.registry.set_quiet(self.id, self.epoch, false);
        let Some(conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = conn.batch_execute("ROLLBACK").await {
                        tracing::debug!(target: "workfence", "rollback on drop: {e}");
                        // Not back into the pool: its state is unknown.
                        drop(deadpool_postgres::Object::take(conn));
                    }
                });
            }
            Err(_) => drop(deadpool_postgres::Object::take(conn)),
        }
    }
}
