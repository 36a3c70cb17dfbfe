//! The tokens a worker holds, shared by the claim loop, the job tasks, the heartbeat and the
//! notification listener: which ones the heartbeat renews, and which ones are lost.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How much shorter than the lease what a claim row says is left of it must be for the runner to
/// take it for `max_run`'s end.
const MAX_RUN_MARGIN: Duration = Duration::from_secs(1);

/// What became of a held token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Still ours, as far as the worker knows.
    Held,
    /// A renew was refused, a `work_lease_lost` notification named it, or `work_assert` raised
    /// 55000: somebody else has the item (or nobody may). Abandon it.
    Lost,
    /// The shutdown grace ran out while its handler ran: cancelled, to be released.
    Shutdown,
    /// Finished by the job's fenced transaction.
    Settled,
}

/// One held token.
#[derive(Debug)]
struct Entry {
    /// The epoch the claim handed out.
    epoch: i64,
    /// Cancelled when the token is lost, or on shutdown after the grace: the job's signal.
    cancel: CancellationToken,
    /// False after `Job::stop_renewing`.
    renew: bool,
    /// True while a fenced transaction or a settling call has the item (no renew may run then:
    /// it would wait on `work_assert`'s row lock and then be refused).
    quiet: bool,
    /// What became of it.
    fate: Fate,
    /// When its lease ends at the earliest, as far as the runner knows: the send time of the
    /// claim plus what the claim row said was left of the lease, or of the last renew that
    /// returned true plus the lease (at most `cap`).
    lease_end: Instant,
    /// The end of the run that `max_run` sets (`claimed_at + max_run`), when the claim showed
    /// it: no renew moves the lease past it.
    cap: Option<Instant>,
}

/// The part of a `work_lease_lost` payload matched on (the others are ignored; the owner never
/// is: other workers may carry the same name).
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct LostToken {
    /// The item's id.
    pub(crate) id: i64,
    /// The superseded epoch.
    pub(crate) epoch: i64,
}

/// The held tokens, by item id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Item id -> its entry.
    items: Mutex<HashMap<i64, Entry>>,
    /// Woken whenever a token is lost or cancelled (the claim loop then drops lost items from
    /// its buffer).
    pub(crate) changed: Notify,
    /// Held by the heartbeat while a renew is in flight; taken (and let go) by a job before it
    /// starts its fenced transaction, so that no renew of its item is in flight then.
    pub(crate) renew_gate: tokio::sync::Mutex<()>,
}

impl Registry {
    /// The map, also after a panic elsewhere while it was locked (every update leaves it whole).
    fn lock(&self) -> MutexGuard<'_, HashMap<i64, Entry>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts holding (`id`, `epoch`), claimed by a statement sent at `sent` for a `lease`, of
    /// which the claim row said `left` remained (`None`: not known); returns the job's
    /// cancellation token.
    pub(crate) fn add(
        &self,
        id: i64,
        epoch: i64,
        sent: Instant,
        lease: Duration,
        left: Option<Duration>,
    ) -> CancellationToken {
        let cancel = CancellationToken::new();
        let left = left.map_or(lease, |left| left.min(lease));
        // Over a second short of the lease (more than the time between the claim and the
        // reading of what is left): `max_run` ends the run there, renews or not.
        let cap = (left + MAX_RUN_MARGIN < lease).then(|| sent + left);
        self.lock().insert(
            id,
            Entry {
                epoch,
                cancel: cancel.clone(),
                renew: true,
                quiet: false,
                fate: Fate::Held,
                lease_end: sent + left,
                cap,
            },
        );
        cancel
    }

    /// A renew sent at `sent` for `lease` returned true for (`id`, `epoch`).
    pub(crate) fn renewed(&self, id: i64, epoch: i64, sent: Instant, lease: Duration) {
        self.update(id, epoch, |e| {
            let until = sent + lease;
            e.lease_end = e.cap.map_or(until, |cap| cap.min(until));
        });
    }

    /// When the lease of (`id`, `epoch`) ends at the earliest, as far as the runner knows (see
    /// `Entry::lease_end`); `None` if it is not held.
    pub(crate) fn lease_end(&self, id: i64, epoch: i64) -> Option<Instant> {
        self.lock()
            .get(&id)
            .filter(|e| e.epoch == epoch)
            .map(|e| e.lease_end)
    }

    /// Whether the heartbeat renews (`id`, `epoch`): held, and not stopped by
    /// `Job::stop_renewing`.
    pub(crate) fn renews(&self, id: i64, epoch: i64) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|e| e.epoch == epoch && e.renew)
    }

    /// Whether (`id`, `epoch`) is in a fenced transaction or a settling call.
    pub(crate) fn is_quiet(&self, id: i64, epoch: i64) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|e| e.epoch == epoch && e.quiet)
    }

    /// Stops holding (`id`, `epoch`), if it is still the held token of `id`.
    pub(crate) fn forget(&self, id: i64, epoch: i64) {
        let mut items = self.lock();
        if items.get(&id).is_some_and(|e| e.epoch == epoch) {
            items.remove(&id);
        }
    }

    /// How many tokens are held.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The fate of (`id`, `epoch`); `None` if it is not held.
    pub(crate) fn fate(&self, id: i64, epoch: i64) -> Option<Fate> {
        self.lock()
            .get(&id)
            .filter(|e| e.epoch == epoch)
            .map(|e| e.fate)
    }

    /// The tokens the heartbeat renews now: held, not stopped, not in a fenced transaction.
    /// Two arrays, ids and epochs, in the same order.
    pub(crate) fn renewable(&self) -> (Vec<i64>, Vec<i64>) {
        self.lock()
            .iter()
            .filter(|(_, e)| e.fate == Fate::Held && e.renew && !e.quiet)
            .map(|(id, e)| (*id, e.epoch))
            .unzip()
    }

    /// Changes one flag of a held (`id`, `epoch`).
    fn update(&self, id: i64, epoch: i64, change: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self.lock().get_mut(&id).filter(|e| e.epoch == epoch) {
            change(entry);
        }
    }

    /// `Job::stop_renewing`: the heartbeat leaves (`id`, `epoch`) alone from now on.
    pub(crate) fn stop_renewing(&self, id: i64, epoch: i64) {
        self.update(id, epoch, |e| e.renew = false);
    }

    /// Marks (`id`, `epoch`) as in (or out of) a fenced transaction or a settling call.
    pub(crate) fn set_quiet(&self, id: i64, epoch: i64, quiet: bool) {
        self.update(id, epoch, |e| e.quiet = quiet);
    }

    /// Keeps the heartbeat away from (`id`, `epoch`) and waits until no renew is in flight
    /// (docs/writing-workers.md: the heartbeat must stop before the finishing transaction).
    pub(crate) async fn quiesce(&self, id: i64, epoch: i64) {
        self.set_quiet(id, epoch, true);
        drop(self.renew_gate.lock().await);
    }

    /// Marks a held (`id`, `epoch`) lost and, if `cancel`, cancels its job. True if it was held
    /// (and not lost, cancelled or settled already).
    pub(crate) fn lose(&self, id: i64, epoch: i64, cancel: bool) -> bool {
        let lost = {
            let mut items = self.lock();
            match items.get_mut(&id) {
                Some(e) if e.epoch == epoch && e.fate == Fate::Held => {
                    e.fate = Fate::Lost;
                    if cancel {
                        e.cancel.cancel();
                    }
                    true
                }
                _ => false,
            }
        };
        if lost {
            self.changed.notify_waiters();
        }
        lost
    }

    /// Marks (`id`, `epoch`) finished by its fenced transaction. True if it was held.
    pub(crate) fn settle(&self, id: i64, epoch: i64) -> bool {
        let mut items = self.lock();
        match items.get_mut(&id) {
            Some(e) if e.epoch == epoch && e.fate == Fate::Held => {
                e.fate = Fate::Settled;
                true
            }
            _ => false,
        }
    }

    /// The shutdown grace ran out: cancels every job still held, marking it for release.
    pub(crate) fn cancel_all(&self) {
        for e in self.lock().values_mut() {
            if e.fate == Fate::Held {
                e.fate = Fate::Shutdown;
                e.cancel.cancel();
            }
        }
        self.changed.notify_waiters();
    }

    /// A `work_lease_lost` payload: when its (id, epoch) is a held token, marks it lost, cancels
    /// its job and returns it. Unreadable payloads and other tokens (most of what a listener
    /// hears) give `None`. Never matches by owner.
    pub(crate) fn notified(&self, payload: &str) -> Option<LostToken> {
        let token: LostToken = serde_json::from_str(payload).ok()?;
        self.lose(token.id, token.epoch, true).then_some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds (`id`, `epoch`) under a 30 s lease claimed now.
    fn add(r: &Registry, id: i64, epoch: i64) -> CancellationToken {
        r.add(id, epoch, Instant::now(), Duration::from_secs(30), None)
    }

    #[test]
    fn the_lease_end_is_the_last_confirmation_plus_the_lease_within_max_run() {
        let r = Registry::default();
        let lease = Duration::from_secs(30);
        let t0 = Instant::now();
        r.add(1, 10, t0, lease, Some(Duration::from_millis(29_500)));
        assert_eq!(
            r.lease_end(1, 10),
            Some(t0 + Duration::from_millis(29_500)),
            "what is left counts"
        );
        r.add(2, 20, t0, lease, Some(Duration::from_secs(10)));
        assert_eq!(r.lease_end(2, 20), Some(t0 + Duration::from_secs(10)));
        let t1 = t0 + Duration::from_secs(5);
        r.renewed(1, 10, t1, lease);
        r.renewed(2, 20, t1, lease);
        assert_eq!(
            r.lease_end(1, 10),
            Some(t1 + lease),
            "29.5 s of 30: not max_run"
        );
        assert_eq!(
            r.lease_end(2, 20),
            Some(t0 + Duration::from_secs(10)),
            "max_run's end holds"
        );
        assert_eq!(r.lease_end(1, 11), None);
        assert!(!r.is_quiet(1, 10));
        r.set_quiet(1, 10, true);
        assert!(r.is_quiet(1, 10) && !r.is_quiet(1, 11));
    }

    #[test]
    fn a_notification_matches_by_id_and_epoch_only() {
        let r = Registry::default();
        let token = add(&r, 7, 42);
        assert_eq!(r.notified(r#"{"id": 7, "epoch": 41, "owner": "x"}"#), None);
        assert_eq!(r.notified(r#"{"id": 8, "epoch": 42}"#), None);
        assert_eq!(r.notified("not json"), None);
        assert!(!token.is_cancelled());
        assert_eq!(
            r.notified(r#"{"id": 7, "queue": "q", "key": "k", "owner": "o", "epoch": 42}"#),
            Some(LostToken { id: 7, epoch: 42 })
        );
        assert!(token.is_cancelled());
        assert_eq!(r.fate(7, 42), Some(Fate::Lost));
        // Once lost, a second notification or a refused renew is not news.
        assert_eq!(r.notified(r#"{"id": 7, "epoch": 42}"#), None);
        assert!(!r.lose(7, 42, true));
    }

    #[test]
    fn the_heartbeat_renews_only_held_renewing_and_not_quiet_tokens() {
        let r = Registry::default();
        add(&r, 1, 10);
        add(&r, 2, 20);
        add(&r, 3, 30);
        add(&r, 4, 40);
        r.stop_renewing(2, 20);
        r.set_quiet(3, 30, true);
        r.lose(4, 40, false);
        r.stop_renewing(1, 11); // another epoch: ignored
        assert_eq!(r.renewable(), (vec![1], vec![10]));
        assert!(r.renews(1, 10) && !r.renews(2, 20) && !r.renews(1, 11));
        r.set_quiet(3, 30, false);
        let (mut ids, _) = r.renewable();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 3]);
    }

    #[test]
    fn settled_and_forgotten_tokens_are_not_lost_or_cancelled() {
        let r = Registry::default();
        let token = add(&r, 5, 50);
        assert!(r.settle(5, 50));
        assert!(!r.lose(5, 50, true));
        r.cancel_all();
        assert!(!token.is_cancelled());
        assert_eq!(r.fate(5, 50), Some(Fate::Settled));
        r.forget(5, 49);
        assert_eq!(r.len(), 1);
        r.forget(5, 50);
        assert_eq!(r.len(), 0);
        assert_eq!(r.fate(5, 50), None);
    }

    #[test]
    fn shutdown_cancels_held_jobs_for_release() {
        let r = Registry::default();
        let held = add(&r, 1, 1);
        let lost = add(&r, 2, 2);
        r.lose(2, 2, false);
        r.cancel_all();
        assert!(held.is_cancelled());
        assert_eq!(r.fate(1, 1), Some(Fate::Shutdown));
        assert!(!lost.is_cancelled());
        assert_eq!(r.fate(2, 2), Some(Fate::Lost));
    }
}
