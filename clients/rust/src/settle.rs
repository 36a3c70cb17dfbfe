//! Settling a token (finish, fail, release) when the connection may be lost: the call is sent
//! again with the same token after reconnecting, within the lease, and a refusal after a lost
//! reply is read with `work_lease_status`, so that a killed connection neither runs a job again
//! nor delays it by a lease; and a fenced transaction's `COMMIT` whose reply was lost is
//! resolved (clients/README.md, *A settle whose answer was lost*).

use serde_json::Value;
use tokio::time::{Duration, Instant};
use tokio_postgres::types::Json;

use crate::error::{Error, Result};
use crate::job::{Shared, FINISH_SQL};
use crate::registry::Fate;

/// Records a job's error; `$5` NULL (no retry policy) leaves `retry_in` NULL: the server's backoff.
const FAIL_SQL: &str =
    "SELECT workfence.work_fail($1, $2, $3, $4, retry_in => make_interval(secs => $5))";
/// Hands an item back unfinished (shutdown).
const RELEASE_SQL: &str = "SELECT workfence.work_release($1, $2, $3)";
/// Why a token is (not) honoured: asked when a settling call sent again after a lost reply is
/// refused, and when the reply of a fenced transaction's `COMMIT` is lost.
const LEASE_STATUS_SQL: &str = "SELECT workfence.work_lease_status($1, $2, $3)";
/// The item's newest epoch and owner (needs the `read` grant where queue grants are enforced).
const ITEM_TOKEN_SQL: &str = "SELECT epoch, owner FROM workfence.work_item($1::bigint)";
/// A renew of `$4` seconds: after a lost `COMMIT` reply, whether the token is still current.
const RENEW_SQL: &str = "SELECT workfence.work_renew($1, $2, $3, make_interval(secs => $4))";
/// The pause before the second try of a call sent again (the first is at once) after an error
/// that retrying can fix; it doubles up to [`PAUSE_MAX`], and the tries end with the lease.
const PAUSE_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two tries.
const PAUSE_MAX: Duration = Duration::from_secs(1);

/// A settling call of a token: what it sends.
pub(crate) enum Settle<'a> {
    /// `work_finish(id, owner, epoch, result)`.
    Finish(&'a Option<Json<Value>>),
    /// `work_fail(id, owner, epoch, error, retry_in)`, `retry_in` in seconds.
    Fail(&'a str, Option<f64>),
    /// `work_release(id, owner, epoch)`.
    Release,
}

impl Settle<'_> {
    /// The call's name in the log.
    fn name(&self) -> &'static str {
        match self {
            Settle::Finish(_) => "finish",
            Settle::Fail(..) => "fail",
            Settle::Release => "release",
        }
    }
}

/// What a settling call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The server answered true.
    Yes,
    /// A send whose reply was lost settled the item; the one sent again was refused for that
    /// reason ([`settled_before`]).
    Before,
    /// Refused: the token is not current (the lease is lost).
    Refused,
}

/// Sends `call` once on a connection of the pool; a connection that broke is dropped from the
/// pool rather than handed out again.
async fn send_settle(shared: &Shared, id: i64, epoch: i64, call: &Settle<'_>) -> Result<bool> {
    let conn = shared.pool.get().await?;
    let owner = &shared.owner;
    let answer = async {
        let row = match call {
            Settle::Finish(result) => {
                let stmt = conn.prepare_cached(FINISH_SQL).await?;
                conn.query_one(&stmt, &[&id, owner, &epoch, result]).await?
            }
            Settle::Fail(error, retry_in) => {
                let stmt = conn.prepare_cached(FAIL_SQL).await?;
                conn.query_one(&stmt, &[&id, owner, &epoch, error, retry_in])
                    .await?
            }
            Settle::Release => {
                let stmt = conn.prepare_cached(RELEASE_SQL).await?;
                conn.query_one(&stmt, &[&id, owner, &epoch]).await?
            }
        };
        row.try_get::<_, bool>(0)
    }
    .await;
    answer.map_err(|e| broken(e, conn))
}

/// Sends a settling call of (`id`, `epoch`) until it is answered. After an error that retrying
/// can fix ([`Error::is_transient`]: a connection lost or terminated, a server restarting, a
/// deadlock, ...) it is sent again with the same token, on a new connection where the old one
/// broke, logged `resend <verb> id=.. epoch=.. error=..` (warn): at once, then after
/// 0.1 s doubling to 1 s, while the lease the runner is sure of lasts (the send time of the
/// claim or of the last accepted renew plus the lease, or `max_run`'s end), and at least once:
/// a killed connection then neither runs the job again nor delays it by a lease. Past that, the
/// error is returned and the item left to its lease.
///
/// Repeating is safe under the token: a `work_finish` repeated after its first send committed
/// returns true; a `work_fail` or `work_release` repeated so is refused, and so is a finish
/// after which the item was put back to pending (`on_conflict`): a refusal after a lost reply is
/// read with [`settled_before`], so that it is not taken for a lost lease.
pub(crate) async fn settle(
    shared: &Shared,
    id: i64,
    epoch: i64,
    call: &Settle<'_>,
) -> Result<Settled> {
    let deadline = shared.registry.lease_end(id, epoch);
    let mut pause = Duration::ZERO;
    let mut unanswered = false;
    loop {
        match send_settle(shared, id, epoch, call).await {
            Ok(true) => return Ok(Settled::Yes),
            Ok(false) => {
                if unanswered && settled_before(shared, id, epoch, deadline, call).await {
                    return Ok(Settled::Before);
                }
                return Ok(Settled::Refused);
            }
            Err(e)
                if e.is_transient()
                    && (!unanswered || deadline.is_some_and(|d| Instant::now() + pause < d)) =>
            {
                unanswered = true;
                tracing::warn!(
                    target: "workfence",
                    "resend {} id={id} epoch={epoch} error={e}",
                    call.name()
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).clamp(PAUSE_FIRST, PAUSE_MAX);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether (`id`, `epoch`) was settled by a send of this runner whose reply was lost, now that
/// the call sent again was refused. `work_lease_status` says `finished` (done or failed under
/// this token): yes. It says `superseded`: yes while the lease lasts (asked before its end, and
/// no `work_lease_lost` notification named the token), since until then nobody can claim the
/// item anew: what moved it past this epoch was this token's own release, retryable fail, or a
/// finish after which `on_conflict` put the item back to pending ([`reads_as_settled`]); after
/// the lease, yes when `work_item` shows the item still carrying this epoch and owner (it needs
/// the `read` grant: without it the outcome is unknown, logged, and counted as no). Anything
/// else, or an error asking, is no.
async fn settled_before(
    shared: &Shared,
    id: i64,
    epoch: i64,
    deadline: Option<Instant>,
    call: &Settle<'_>,
) -> bool {
    let status = match lease_status(shared, id, epoch).await {
        Ok(status) => status,
        Err(e) => {
            tracing::warn!(target: "workfence", "lease status id={id} epoch={epoch} error={e}");
            return false;
        }
    };
    let within_lease = deadline.is_some_and(|d| Instant::now() < d);
    let notified_lost = shared.registry.fate(id, epoch) == Some(Fate::Lost);
    if reads_as_settled(&status, within_lease, notified_lost) {
        return true;
    }
    if status != "superseded" || notified_lost {
        return false;
    }
    match item_carries(shared, id, epoch).await {
        Some(carries) => carries,
        None => {
            tracing::warn!(
                target: "workfence",
                "settle id={id} epoch={epoch} outcome unknown ({} refused after a lost reply; \
                 no read grant to tell)",
                call.name()
            );
            false
        }
    }
}

/// How a token's `work_lease_status` reads after a settling call sent again was refused:
/// `finished` (done or failed under this token) is this token's settle; `superseded` is too
/// while the lease lasts (`within_lease`, asked before its end) and no `work_lease_lost`
/// notification named the token (`notified_lost`): until the lease ends nobody can claim the
/// item anew, so what moved it past this epoch was this token's own release, retryable fail,
/// or a finish after which `on_conflict` put the item back to pending. Anything else
/// (`current`: the first send did not commit, and the repeat was refused for a reason of its
/// own; `cancelled`, `wrong_owner`, `missing`) is not.
fn reads_as_settled(status: &str, within_lease: bool, notified_lost: bool) -> bool {
    match status {
        "finished" => true,
        "superseded" => within_lease && !notified_lost,
        _ => false,
    }
}

/// `work_lease_status(id, owner, epoch)` on a connection of the pool.
async fn lease_status(shared: &Shared, id: i64, epoch: i64) -> Result<String> {
    let conn = shared.pool.get().await?;
    let stmt = conn.prepare_cached(LEASE_STATUS_SQL).await?;
    let status = conn
        .query_one(&stmt, &[&id, &shared.owner, &epoch])
        .await
        .map_err(|e| broken(e, conn))?
        .try_get(0)?;
    Ok(status)
}

/// Whether `work_item(id)` shows the item still carrying `epoch` under this owner (a hand-back
/// by this token keeps both); `None` when it cannot be read (no `read` grant, or an error).
async fn item_carries(shared: &Shared, id: i64, epoch: i64) -> Option<bool> {
    let conn = shared.pool.get().await.ok()?;
    let row = conn.query_opt(ITEM_TOKEN_SQL, &[&id]).await.ok()??;
    let carried: Option<i64> = row.try_get(0).ok()?;
    let owner: Option<String> = row.try_get(1).ok()?;
    Some(carried == Some(epoch) && owner.as_deref() == Some(shared.owner.as_str()))
}

/// A query error as the library's error; a connection that broke is dropped from the pool
/// rather than handed out again.
fn broken(e: tokio_postgres::Error, conn: deadpool_postgres::Object) -> Error {
    let e = Error::from(e);
    if e.needs_new_connection() {
        drop(deadpool_postgres::Object::take(conn));
    }
    e
}

/// What became of a fenced transaction whose `COMMIT` lost its reply (its connection broke).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// It committed: the token finished the item.
    Yes,
    /// It did not (rolled back with its connection): the token is still current, and the renew
    /// that told so renewed the lease.
    No,
    /// The lease is lost: nothing of the transaction counts.
    LeaseLost,
    /// No answer before the lease ended.
    Unknown,
}

/// After the reply of a fenced transaction's `COMMIT` was lost: asks the server on a new
/// connection, again after a transient error while the lease lasts (at least once). First with
/// a renew (`work_renew`), which waits for the row lock of a transaction still ending on the old
/// backend before it answers (unless the job stopped renewing: then `work_lease_status` alone,
/// which does not wait): true, the transaction did not commit (and the lease is renewed); false,
/// then `work_lease_status`: `current` is [`Committed::No`], `finished` (or `superseded` within
/// the lease: a finish after which `on_conflict` put the item back) [`Committed::Yes`], anything
/// else [`Committed::LeaseLost`].
pub(crate) async fn commit_outcome(
    shared: &Shared,
    id: i64,
    epoch: i64,
    lease: Duration,
) -> Committed {
    let deadline = shared.registry.lease_end(id, epoch);
    let mut pause = Duration::ZERO;
    let mut tried = false;
    loop {
        let sent = Instant::now();
        let renews = shared.registry.renews(id, epoch);
        let answer = async {
            if !renews {
                return lease_status(shared, id, epoch).await.map(Some);
            }
            let conn = shared.pool.get().await?;
            let stmt = conn.prepare_cached(RENEW_SQL).await?;
            let renewed: bool = conn
                .query_one(&stmt, &[&id, &shared.owner, &epoch, &lease.as_secs_f64()])
                .await
                .map_err(|e| broken(e, conn))?
                .try_get(0)?;
            if renewed {
                return Ok(None);
            }
            lease_status(shared, id, epoch).await.map(Some)
        }
        .await;
        match answer {
            Ok(None) => {
                shared.registry.renewed(id, epoch, sent, lease);
                return Committed::No;
            }
            Ok(Some(status)) if status == "current" || status == "uncommitted" => {
                return Committed::No;
            }
            Ok(Some(status)) => {
                let within_lease = deadline.is_some_and(|d| Instant::now() < d);
                let notified_lost = shared.registry.fate(id, epoch) == Some(Fate::Lost);
                return if reads_as_settled(&status, within_lease, notified_lost) {
                    Committed::Yes
                } else {
                    Committed::LeaseLost
                };
            }
            Err(e)
                if e.is_transient()
                    && (!tried || deadline.is_some_and(|d| Instant::now() + pause < d)) =>
            {
                tried = true;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).clamp(PAUSE_FIRST, PAUSE_MAX);
            }
            Err(e) => {
                tracing::warn!(
                    target: "workfence",
                    "commit id={id} epoch={epoch} outcome unknown error={e}"
                );
                return Committed::Unknown;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_repeat_reads_as_settled_only_when_this_token_settled_the_item() {
        // Done or failed under this token: whatever else.
        assert!(reads_as_settled("finished", false, true));
        // Moved past this epoch before the lease could end: this token's release or fail.
        assert!(reads_as_settled("superseded", true, false));
        // After the lease's end, or once a notification said it was claimed anew: another claim.
        assert!(!reads_as_settled("superseded", false, false));
        assert!(!reads_as_settled("superseded", true, true));
        for other in [
            "current",
            "cancelled",
            "wrong_owner",
            "missing",
            "uncommitted",
        ] {
            assert!(!reads_as_settled(other, true, false), "{other}");
        }
    }
}
