//! The lease protocol as a model, explored exhaustively by the `stateright`
//! model checker: no cluster, no extension, only the protocol's design.
//!
//! Three workers that all claim as `routines/laptop` share a queue of two
//! items (`max_attempts` 2). Any of them may claim, renew, finish, release or
//! fail at any moment, in any order, with whatever token it was last given
//! for an item — a superseded one included: workers keep their tokens and go
//! on using them, which is the bug report's situation. An operator may
//! cancel an item or retry it (a dead letter or a cancelled item back to
//! pending, at most once per item in the model) at any moment, without a
//! token. The server's clock is abstract: a live lease may lapse and a
//! delayed item may come due at any moment. Each action is one SQL statement
//! of `src/claim.rs`, `src/lease.rs`, `src/cancel.rs` or `src/operate.rs`,
//! atomic as it is under PostgreSQL's row locks; `docs/model.md` maps every
//! action onto its statement, and says what the model leaves out.
//!
//! What the check proves, for every reachable state (`always` properties):
//! at most one token per item is honoured; a token that is not current (a
//! superseded one, or one whose lease ended) never changes an item, and a
//! superseded one is always refused; a token handed out before a cancel or
//! retry of its item never acts again; no claim takes an item under a live
//! lease, nor a cancelled item; an item is written `done` at most once and
//! its finish is acknowledged to one token only; attempts stay within the
//! row's `max_attempts`, which a retry raises by one at most. The
//! `sometimes` properties keep the check from being vacuous: the bug
//! report's scenario (a lapsed lease taken over by a second worker, the
//! first worker's finish refused, the item done), a repeated finish
//! acknowledged, a lapsed lease renewed by its holder (docs/contract.md,
//! promise 2), both ways to `failed`, a hand-back to pending, both items
//! done, a dead letter retried and done, a cancelled holder's finish
//! refused, a cancelled item retried and claimed again.
//!
//! In the failover configuration (`LeaseModel::with_failover`, one item) a
//! standby may replay the state at any moment, and once the server may lose
//! everything after the last replay (a promotion, a point-in-time recovery,
//! an older dump restored): the rows go back, the workers keep their
//! tokens, and a token handed out in the lost suffix must never act again
//! (docs/contract.md, promise 8; docs/failover.md). Without the generation
//! floor (`Sql::NoGeneration`) the checker must find the reissued epoch.
//!
//! The checker must also catch broken protocols: fencing by owner name only
//! (as the queues this project answers do), a finish retry that writes the
//! row again, a retry that undoes a cancel under the old token, a retry that
//! leaves `max_attempts` alone, and a claim that picks by exclusion and so
//! takes cancelled items. For each, the test demands the counterexamples
//! that show it. The last tests replay the bug report's scenario, a cancel
//! then a retry, and a dead letter's retry step by step.
//!
//! Runs in well under a minute with `--release`:
//! `cargo test -p workfence-harness --release --test model -- --nocapture`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path, Property};

/// Workers in the model; all claim under [`OWNER`].
const WORKERS: usize = 3;
/// Items in the one queue.
const ITEMS: usize = 2;
/// `max_attempts` of every item when it is enqueued: small, so both outcomes
/// of `work_fail` and the claim's dead letter are reached. Only a retry
/// raises it, per row.
const MAX_ATTEMPTS: u8 = 2;
/// Operator retries (`work_retry`) the model allows per item. Not a limit of
/// the extension: a bound that keeps the state space finite, since every
/// retry of a dead letter raises the row's `max_attempts`.
const MAX_RETRIES: u8 = 1;
/// The owner name every worker claims with (the bug report's).
const OWNER: &str = "routines/laptop";
/// Checker threads (the machine has two cores).
const THREADS: usize = 2;

/// An epoch (fencing token) as the model numbers it: see [`State::renumbered`].
type Epoch = u8;

/// Which SQL the model runs: the extension's, or a deliberately broken one
/// that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sql {
    /// The statements of `src/claim.rs` and `src/lease.rs`.
    Extension,
    /// Broken: the token guard and `AFTER_REFUSAL` without the epoch, so a
    /// token is judged by its owner name and the item's state alone.
    OwnerOnly,
    /// Broken: `FINISH` also matches a row already done under the token, so a
    /// retried finish writes the row again instead of only reading it.
    FinishRewrites,
    /// Broken: `work_retry` as an "undo" of the cancel. A cancelled item that
    /// has an owner and an epoch goes back to `claimed` under them, as if the
    /// cancel had not happened, so the old holder's token is honoured again.
    RetryRestoresClaim,
    /// Broken: `work_retry` without `max_attempts = GREATEST(...)`, so a
    /// retried dead letter is pending with its attempts used up, and the
    /// claim (whose `due` path does not look at attempts) goes past them.
    RetryKeepsMaxAttempts,
    /// Broken: the claim picks by exclusion, `state NOT IN ('done', 'failed')
    /// AND COALESCE(lease_until, run_at) <= clock_timestamp()`, as a query
    /// written before `cancelled` existed would: a cancelled item (no
    /// `lease_until`, its `run_at` passed or passing) is claimable.
    ClaimByExclusion,
    /// Broken: no generation floor (`src/generation.rs`). After the server
    /// loses a suffix of its history, `epoch_seq` continues from the
    /// position it had then, so a claim hands out an epoch the lost suffix
    /// had handed out already.
    NoGeneration,
}

/// The statement a token is used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stmt {
    /// `RENEW`.
    Renew,
    /// `FINISH` (then `AFTER_REFUSAL` when it matched nothing).
    Finish,
    /// `RELEASE` with this `delay`.
    Release(Retry),
    /// `FAIL` with this `retry_in`.
    Fail(Retry),
}

/// `lease_until` of a claimed item, against the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Lease {
    /// `lease_until > clock_timestamp()`.
    Live,
    /// `lease_until <= clock_timestamp()`: the item is claimable again.
    Lapsed,
}

/// How an item came to be `failed` (its `last_error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum FailedBy {
    /// `work_fail` on the last attempt.
    WorkFail,
    /// A claim found the lease lapsed on the last attempt (dead letter).
    LapsedOnFinalAttempt,
}

/// The `state` column, with the parts of `run_at` and `lease_until` that
/// matter. A cancelled item has no `lease_until`, and its `run_at` is not
/// kept: only the broken [`Sql::ClaimByExclusion`] would read it, and the
/// clock can always pass it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Status {
    /// `pending`; `due` when `run_at <= clock_timestamp()`.
    Pending {
        /// Whether `run_at` has been reached.
        due: bool,
    },
    /// `claimed`, with its lease.
    Claimed(Lease),
    /// `done`.
    Done,
    /// `failed`.
    Failed(FailedBy),
    /// `cancelled` by `work_cancel`.
    Cancelled,
}

/// The columns of one `workfence.items` row that the statements read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Row {
    /// `state` (with `run_at` and `lease_until` abstracted).
    status: Status,
    /// `owner`: NULL until the first claim, then the claimer's owner name.
    owner: Option<&'static str>,
    /// `epoch`: NULL until the first claim; kept by release, fail, finish,
    /// cancel and retry.
    epoch: Option<Epoch>,
    /// `attempts`.
    attempts: u8,
    /// `max_attempts`: [`MAX_ATTEMPTS`] until a retry raises it.
    max_attempts: u8,
}

impl Row {
    /// A freshly enqueued, due item.
    const ENQUEUED: Row = Row {
        status: Status::Pending { due: true },
        owner: None,
        epoch: None,
        attempts: 0,
        max_attempts: MAX_ATTEMPTS,
    };
}

/// What `work_retry` took back to `pending`: history, not a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RetriedFrom {
    /// A `failed` item (a dead letter, by `work_fail` or a claim).
    DeadLetter,
    /// A `cancelled` item.
    Cancelled,
}

/// What the model remembers about an item's past, for the properties (and,
/// `retried`, for the retry bound); no statement reads it.
///
/// Most fields are fixed by the row in the extension's protocol (`newest` is
/// the row's epoch, `done_writes` is 1 exactly when the row is done, `acked`
/// is then its epoch, `acked_twice` stays false, `cancelled` is set exactly
/// when the row is cancelled, `revoked` is `newest` or nothing) or are
/// forgotten at the item's next claim or cancel (`taken_over`, `revoked`),
/// so this history adds few states: a flag that stayed set for ever would
/// double the states after it. Only `retried` stays, and [`MAX_RETRIES`]
/// bounds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct History {
    /// The newest epoch a claim handed out for the item: the ground truth of
    /// which token is current, kept apart from the row the statements write.
    newest: Option<Epoch>,
    /// UPDATEs that set the item `done` (counted up to 2).
    done_writes: u8,
    /// The first token whose finish returned true.
    acked: Option<Epoch>,
    /// A finish returned true to a second, different token.
    acked_twice: bool,
    /// The item's latest claim took it from another worker's lapsed lease.
    /// Forgotten at the next claim, and at a cancel or retry: a `sometimes`
    /// property that reads it wants the item done under that claim.
    taken_over: bool,
    /// The newest epoch handed out for the item when an operator last
    /// cancelled or retried it: that token and every older one are dead from
    /// then on, whatever the row says. `None` also when no token had been
    /// handed out then. Forgotten at the next claim: its epoch is newer, so
    /// from then on all those tokens are superseded, and judged as such.
    revoked: Option<Epoch>,
    /// `work_cancel` took the item and no retry has taken it back since:
    /// the ground truth of "cancelled", kept apart from the row's state.
    cancelled: bool,
    /// The item's retry, if it had one ([`MAX_RETRIES`] is 1), and what it
    /// took back.
    retried: Option<RetriedFrom>,
}

/// What a standby has replayed: the rows and their histories as they stood
/// at the last [`Action::Replicate`]. A loss of the suffix after it
/// ([`Action::LoseSuffix`]) puts both back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Replica {
    /// `workfence.items` then.
    rows: [Row; ITEMS],
    /// The items' histories then: the ground truth of the history that
    /// survives.
    history: [History; ITEMS],
}

/// The epochs of an item that the server handed out and then lost with a
/// suffix of its history: those above `survived` (the newest the surviving
/// history has) up to `newest` (the newest handed out before the loss).
/// Workers may still hold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Lost {
    /// The item's newest epoch in the history that survived.
    survived: Option<Epoch>,
    /// The newest epoch handed out before the loss.
    newest: Epoch,
}

impl Lost {
    /// Whether `epoch` was handed out in the lost suffix.
    fn contains(&self, epoch: Epoch) -> bool {
        self.survived.is_none_or(|survived| epoch > survived) && epoch <= self.newest
    }
}

/// What the last step did, when it is something a `sometimes` property looks
/// for; forgotten at the next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Event {
    /// A finish with a superseded token of `item` returned false.
    StaleFinishRefused {
        /// Which item.
        item: usize,
    },
    /// The holder of a lapsed lease that nobody had re-claimed renewed it.
    LapsedLeaseRenewed,
    /// A finish repeated with the token that had finished the item returned
    /// true.
    FinishRepeated,
    /// `work_cancel` took `item` while it was claimed.
    CancelledWhileClaimed {
        /// Which item.
        item: usize,
    },
    /// Right after a cancel of a claimed item, its holder's finish returned
    /// false.
    CancelledHolderRefused,
    /// After the server lost a suffix, a finish with a token handed out in
    /// it returned false.
    LostFinishRefused,
}

/// The whole system: the rows, what each worker holds, the epoch sequence,
/// and the history the properties read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// `workfence.items`.
    rows: [Row; ITEMS],
    /// `tokens[w][i]`: the epoch worker `w` was last given for item `i`.
    tokens: [[Option<Epoch>; ITEMS]; WORKERS],
    /// The next value of `workfence.epoch_seq`: newer than every epoch in
    /// play, for every item.
    next_epoch: Epoch,
    /// Per item: what happened to it.
    history: [History; ITEMS],
    /// A token that was not current changed a row, or its UPDATE matched one.
    stale_write: bool,
    /// A superseded token got true from a statement.
    superseded_honoured: bool,
    /// A claim took an item whose lease had not lapsed.
    live_lease_taken: bool,
    /// A token handed out before a cancel or retry of its item changed the
    /// row, matched an UPDATE, or got true from a statement.
    revoked_acted: bool,
    /// A claim took (or dead-lettered) an item that was cancelled and not
    /// retried since.
    cancelled_claimed: bool,
    /// What the last step did, if a `sometimes` property looks for it.
    last: Option<Event>,
    /// What a standby has replayed (the failover configuration only).
    replica: Option<Replica>,
    /// Per item: the epochs lost with a suffix of the server's history.
    lost: [Option<Lost>; ITEMS],
    /// Per item, under [`Sql::NoGeneration`] after a loss: the next claim of
    /// the item draws its epoch from the sequence position that survived,
    /// right after this epoch (`None`: none had been handed out).
    reissue_after: [Option<Option<Epoch>>; ITEMS],
    /// The server has lost a suffix once (the model allows one loss).
    failed_over: bool,
    /// A token handed out in a lost suffix matched an UPDATE, changed a row
    /// or got true from a statement.
    lost_acted: bool,
}

impl State {
    /// The ground truth the properties judge by: `epoch` is the newest token
    /// handed out for `item`, no cancel or retry has ended it since, and the
    /// lease it opened is still on (what `work_lease_status` calls
    /// `current`). The owner name plays no part: it is not an identity.
    fn is_current(&self, item: usize, epoch: Epoch) -> bool {
        self.history[item].newest == Some(epoch)
            && !self.is_revoked(item, epoch)
            && matches!(self.rows[item].status, Status::Claimed(_))
    }

    /// `epoch` was handed out for `item` before an operator's cancel or
    /// retry of it (by the history, not the row).
    fn is_revoked(&self, item: usize, epoch: Epoch) -> bool {
        self.history[item]
            .revoked
            .is_some_and(|revoked| epoch <= revoked)
    }

    /// `epoch` was handed out for `item` in a suffix the server lost.
    fn is_lost(&self, item: usize, epoch: Epoch) -> bool {
        self.lost[item].is_some_and(|lost| lost.contains(epoch))
    }

    /// A newer token than `epoch` was handed out for `item`.
    fn is_superseded(&self, item: usize, epoch: Epoch) -> bool {
        self.history[item]
            .newest
            .is_some_and(|newest| newest > epoch)
    }

    /// Renames each item's epochs in play to 1, 2, ... keeping their order,
    /// and sets the sequence just past the largest.
    ///
    /// The statements only compare epochs for equality, and only within one
    /// item (a token names its item's id, and nothing compares the epochs of
    /// two items); a claim's epoch is newer than every epoch in play. A
    /// renaming per item that keeps the order changes neither, so the renamed
    /// state behaves exactly as the original. It folds the unending run of
    /// epochs into finitely many states, which is what lets breadth-first
    /// search finish: the check covers any number of claims, not a bounded
    /// prefix. Renaming per item, not over both at once, also forgets how the
    /// two items' epochs interleave, which no statement can see.
    fn renumbered(mut self) -> State {
        let mut most = 0;
        for item in 0..ITEMS {
            let replica = self.replica.map(|r| (r.rows[item], r.history[item]));
            let mut in_play: Vec<Epoch> = [
                self.rows[item].epoch,
                self.history[item].newest,
                self.history[item].acked,
                self.history[item].revoked,
                replica.and_then(|(row, _)| row.epoch),
                replica.and_then(|(_, history)| history.newest),
                replica.and_then(|(_, history)| history.acked),
                replica.and_then(|(_, history)| history.revoked),
                self.lost[item].and_then(|lost| lost.survived),
                self.lost[item].map(|lost| lost.newest),
                self.reissue_after[item].flatten(),
            ]
            .into_iter()
            .chain(self.tokens.iter().map(|held| held[item]))
            .flatten()
            .collect();
            in_play.sort_unstable();
            in_play.dedup();
            let rename = |e: &mut Option<Epoch>| {
                if let Some(old) = *e {
                    let rank = in_play.binary_search(&old).expect("epoch is in play");
                    *e = Some(Epoch::try_from(rank + 1).expect("few epochs in play"));
                }
            };
            rename(&mut self.rows[item].epoch);
            let history = &mut self.history[item];
            rename(&mut history.newest);
            rename(&mut history.acked);
            rename(&mut history.revoked);
            for held in &mut self.tokens {
                rename(&mut held[item]);
            }
            if let Some(replica) = &mut self.replica {
                rename(&mut replica.rows[item].epoch);
                let history = &mut replica.history[item];
                rename(&mut history.newest);
                rename(&mut history.acked);
                rename(&mut history.revoked);
            }
            if let Some(lost) = &mut self.lost[item] {
                rename(&mut lost.survived);
                let mut newest = Some(lost.newest);
                rename(&mut newest);
                lost.newest = newest.expect("renamed");
            }
            if let Some(after) = &mut self.reissue_after[item] {
                rename(after);
            }
            most = most.max(in_play.len());
        }
        self.next_epoch = Epoch::try_from(most + 1).expect("few epochs in play");
        self
    }

    /// Sorts the workers by the tokens they hold (symmetry reduction).
    ///
    /// The workers share one owner name and the model keeps nothing else
    /// about them, so a state with two workers' tokens swapped behaves
    /// exactly as the original; one representative of each such class is
    /// enough. Worker numbers in the actions of a path are then positions in
    /// this order, not fixed workers.
    fn workers_sorted(mut self) -> State {
        self.tokens.sort_unstable();
        self
    }
}

/// `work_release`'s `delay`, `work_fail`'s `retry_in`, `work_retry`'s
/// `run_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Retry {
    /// `'0'` (`run_at` NULL or not in the future): due at once.
    Now,
    /// A positive interval (or NULL: backoff; a future `run_at`): due once
    /// the clock gets there.
    Later,
}

/// One step: one SQL statement by a worker or an operator, or the server's
/// clock moving on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// `work_claim` (or `work_claim_key`) taking `item`, if it is claimable.
    Claim {
        /// Who claims.
        worker: usize,
        /// What it takes.
        item: usize,
    },
    /// `work_renew` with the worker's token for `item`.
    Renew {
        /// Who renews.
        worker: usize,
        /// With its token for this item.
        item: usize,
    },
    /// `work_finish` with the worker's token for `item`.
    Finish {
        /// Who finishes.
        worker: usize,
        /// With its token for this item.
        item: usize,
    },
    /// `work_release` with the worker's token for `item`.
    Release {
        /// Who releases.
        worker: usize,
        /// With its token for this item.
        item: usize,
        /// The `delay`.
        retry: Retry,
    },
    /// `work_fail` with the worker's token for `item`.
    Fail {
        /// Who fails.
        worker: usize,
        /// With its token for this item.
        item: usize,
        /// The `retry_in`.
        retry: Retry,
    },
    /// `work_cancel` of `item`, by an operator (no token).
    Cancel {
        /// Which item.
        item: usize,
    },
    /// `work_retry` of `item`, by an operator (no token).
    Retry {
        /// Which item.
        item: usize,
        /// The `run_at`.
        run_at: Retry,
    },
    /// The clock passes the item's `lease_until`.
    LeaseLapses {
        /// Whose lease.
        item: usize,
    },
    /// The clock passes a pending item's `run_at`.
    ComesDue {
        /// Which item.
        item: usize,
    },
    /// A standby replays everything so far (the failover configuration).
    Replicate,
    /// The server loses the suffix of its history after the last
    /// [`Action::Replicate`]: the standby is promoted (or the database is
    /// recovered to that point, or an older dump restored). The rows go back
    /// to what the standby had; workers keep every token they were given.
    /// Once per run.
    LoseSuffix,
}

/// The protocol, under the SQL of `sql`.
struct LeaseModel {
    /// Whose statements run.
    sql: Sql,
    /// Each worker's owner name: all the same.
    owners: [&'static str; WORKERS],
    /// Whether each step ends with [`State::workers_sorted`].
    symmetry: bool,
    /// How many items the workers and the clock act on (the rest stay
    /// enqueued, untouched).
    items: usize,
    /// Whether an operator may cancel and retry.
    operators: bool,
    /// Whether the server may lose a suffix of its history
    /// ([`Action::Replicate`], [`Action::LoseSuffix`]).
    failover: bool,
}

impl LeaseModel {
    /// Three workers, one owner name, running `sql`; workers keep their
    /// numbers, so paths read as written.
    fn new(sql: Sql) -> LeaseModel {
        LeaseModel {
            sql,
            owners: [OWNER; WORKERS],
            symmetry: false,
            items: ITEMS,
            operators: true,
            failover: false,
        }
    }

    /// The failover configuration: the server may lose the suffix of its
    /// history after any point a standby replayed, once. To keep the pairs
    /// of (state, state the standby had) within reach, one item (with the
    /// operator's cancel and retry): the statements never look at two
    /// items at once, and a loss puts every row back the same way. (Two
    /// items did not finish within minutes.)
    fn with_failover(self) -> LeaseModel {
        LeaseModel {
            items: 1,
            failover: true,
            ..self
        }
    }

    /// The same model with the workers' symmetry reduced: about a sixth of
    /// the states (3! orders of three workers), the same behaviours.
    fn with_symmetry(self) -> LeaseModel {
        assert!(
            self.owners.iter().all(|&owner| owner == self.owners[0]),
            "workers are interchangeable only when they share one owner name"
        );
        LeaseModel {
            symmetry: true,
            ..self
        }
    }

    /// The WHERE clause of `stmt` (the token guard in the extension):
    /// does the token match the row?
    fn matches(&self, stmt: Stmt, row: &Row, owner: &str, epoch: Epoch) -> bool {
        let owner_ok = row.owner == Some(owner);
        let epoch_ok = row.epoch == Some(epoch);
        let claimed = matches!(row.status, Status::Claimed(_));
        match self.sql {
            Sql::Extension
            | Sql::RetryRestoresClaim
            | Sql::RetryKeepsMaxAttempts
            | Sql::ClaimByExclusion
            | Sql::NoGeneration => owner_ok && epoch_ok && claimed,
            Sql::OwnerOnly => owner_ok && claimed,
            Sql::FinishRewrites if stmt == Stmt::Finish => {
                owner_ok && epoch_ok && (claimed || row.status == Status::Done)
            }
            Sql::FinishRewrites => owner_ok && epoch_ok && claimed,
        }
    }

    /// `AFTER_REFUSAL`: is the row done under this token (a repeated finish)?
    fn finished_by(&self, row: &Row, owner: &str, epoch: Epoch) -> bool {
        let epoch_ok = self.sql == Sql::OwnerOnly || row.epoch == Some(epoch);
        row.status == Status::Done && row.owner == Some(owner) && epoch_ok
    }

    /// How many workers hold a token for `item` that a renew would honour.
    fn honoured_tokens(&self, state: &State, item: usize) -> usize {
        (0..WORKERS)
            .filter(|&w| {
                state.tokens[w][item].is_some_and(|epoch| {
                    self.matches(Stmt::Renew, &state.rows[item], self.owners[w], epoch)
                })
            })
            .count()
    }

    /// `work_claim` / `work_claim_key` on one item: the `due`, `lapsed` and
    /// `exhausted_ids` CTEs, then `claim_update!()` or `dead_letter!()`.
    fn claim(&self, state: &State, worker: usize, item: usize) -> Option<State> {
        let row = state.rows[item];
        let mut next = state.clone();
        // The monitor of "a cancelled item is never claimed", judged by the
        // history: whatever the statement below does to the row, a claim
        // that takes a step here took a cancelled item.
        if state.history[item].cancelled {
            next.cancelled_claimed = true;
        }
        match row.status {
            Status::Pending { due: true } => next.history[item].taken_over = false,
            Status::Cancelled if self.sql == Sql::ClaimByExclusion => {
                next.history[item].taken_over = false;
            }
            Status::Claimed(Lease::Lapsed) if row.attempts < row.max_attempts => {
                let newest = state.history[item].newest;
                let holder = (0..WORKERS).find(|&w| state.tokens[w][item] == newest);
                next.history[item].taken_over = holder != Some(worker);
            }
            Status::Claimed(Lease::Lapsed) => {
                next.rows[item].status = Status::Failed(FailedBy::LapsedOnFinalAttempt);
                return Some(next);
            }
            _ => return None,
        }
        // The monitor of "time only opens the door": the statement above
        // must not have let a claim through while the lease is live.
        if row.status == Status::Claimed(Lease::Live) {
            next.live_lease_taken = true;
        }
        let epoch = match state.reissue_after[item] {
            // The sequence as it stood when the history was cut: right after
            // the newest epoch the surviving history has.
            Some(after) if self.sql == Sql::NoGeneration => after.map_or(1, |e| e + 1),
            _ => state.next_epoch,
        };
        next.reissue_after[item] = None;
        next.next_epoch = state
            .next_epoch
            .max(epoch)
            .checked_add(1)
            .expect("epochs are renumbered");
        next.history[item].newest = Some(epoch);
        next.history[item].revoked = None;
        next.rows[item] = Row {
            status: Status::Claimed(Lease::Live),
            owner: Some(self.owners[worker]),
            epoch: Some(epoch),
            attempts: row.attempts + 1,
            max_attempts: row.max_attempts,
        };
        next.tokens[worker][item] = Some(epoch);
        Some(next)
    }

    /// `work_cancel`'s `CANCEL` (`src/cancel.rs`) of `item`: a pending or
    /// claimed item becomes `cancelled`, its `owner` and `epoch` stay and its
    /// lease ends. None (no step) for a done, failed or cancelled item.
    ///
    /// The history records, apart from the row, that every token handed out
    /// for the item so far is dead and that the item is cancelled.
    fn cancel(&self, state: &State, item: usize) -> Option<State> {
        let mut next = state.clone();
        match state.rows[item].status {
            Status::Pending { .. } => {}
            Status::Claimed(_) => next.last = Some(Event::CancelledWhileClaimed { item }),
            Status::Done | Status::Failed(_) | Status::Cancelled => return None,
        }
        next.rows[item].status = Status::Cancelled;
        let history = &mut next.history[item];
        history.revoked = history.newest;
        history.cancelled = true;
        history.taken_over = false;
        Some(next)
    }

    /// `work_retry`'s statement on `item`: a failed or cancelled item goes
    /// back to `pending` (due at once or later, by `run_at`), with
    /// `max_attempts` raised to `attempts + 1` if the attempts are used up;
    /// `owner`, `epoch` and `attempts` stay. None (no step) for any other
    /// state, and once the item has had its [`MAX_RETRIES`] retry.
    ///
    /// The history records, apart from the row, that every token handed out
    /// for the item so far is dead and that it is no longer cancelled.
    fn retry(&self, state: &State, item: usize, run_at: Retry) -> Option<State> {
        let history = state.history[item];
        if u8::from(history.retried.is_some()) >= MAX_RETRIES {
            return None;
        }
        let before = state.rows[item];
        let retried = match before.status {
            Status::Failed(_) => RetriedFrom::DeadLetter,
            Status::Cancelled => RetriedFrom::Cancelled,
            Status::Pending { .. } | Status::Claimed(_) | Status::Done => return None,
        };
        let mut next = state.clone();
        let row = &mut next.rows[item];
        row.status = if self.sql == Sql::RetryRestoresClaim
            && before.status == Status::Cancelled
            && before.epoch.is_some()
        {
            Status::Claimed(Lease::Live)
        } else {
            Status::Pending {
                due: run_at == Retry::Now,
            }
        };
        if self.sql != Sql::RetryKeepsMaxAttempts {
            row.max_attempts = before.max_attempts.max(before.attempts + 1);
        }
        let history = &mut next.history[item];
        history.revoked = history.newest;
        history.cancelled = false;
        history.retried = Some(retried);
        history.taken_over = false;
        Some(next)
    }

    /// A token-guarded statement by `worker` with its token for `item`, after
    /// a step that did `previous`; None when the worker has never claimed the
    /// item.
    fn use_token(
        &self,
        state: &State,
        previous: Option<Event>,
        worker: usize,
        item: usize,
        stmt: Stmt,
    ) -> Option<State> {
        let epoch = state.tokens[worker][item]?;
        let owner = self.owners[worker];
        let before = state.rows[item];
        let mut next = state.clone();
        let matched = self.matches(stmt, &before, owner, epoch);
        let row = &mut next.rows[item];
        let returned = match stmt {
            Stmt::Renew => {
                if matched {
                    if before.status == Status::Claimed(Lease::Lapsed)
                        && state.is_current(item, epoch)
                    {
                        next.last = Some(Event::LapsedLeaseRenewed);
                    }
                    row.status = Status::Claimed(Lease::Live);
                }
                matched
            }
            Stmt::Finish => {
                let returned = if matched {
                    row.status = Status::Done;
                    let history = &mut next.history[item];
                    history.done_writes = (history.done_writes + 1).min(2);
                    true
                } else if self.finished_by(&before, owner, epoch) {
                    next.last = Some(Event::FinishRepeated);
                    true
                } else {
                    if state.is_superseded(item, epoch) {
                        next.last = Some(Event::StaleFinishRefused { item });
                    } else if previous == Some(Event::CancelledWhileClaimed { item })
                        && state.history[item].newest == Some(epoch)
                    {
                        next.last = Some(Event::CancelledHolderRefused);
                    }
                    false
                };
                let history = &mut next.history[item];
                if returned {
                    match history.acked {
                        None => history.acked = Some(epoch),
                        Some(first) if first != epoch => history.acked_twice = true,
                        Some(_) => {}
                    }
                }
                returned
            }
            Stmt::Release(retry) => {
                if matched {
                    row.status = Status::Pending {
                        due: retry == Retry::Now,
                    };
                    row.attempts = row.attempts.saturating_sub(1);
                }
                matched
            }
            Stmt::Fail(retry) => {
                if matched {
                    row.status = if row.attempts >= row.max_attempts {
                        Status::Failed(FailedBy::WorkFail)
                    } else {
                        Status::Pending {
                            due: retry == Retry::Now,
                        }
                    };
                }
                matched
            }
        };
        if !state.is_current(item, epoch) && (matched || next.rows[item] != before) {
            next.stale_write = true;
        }
        if state.is_superseded(item, epoch) && returned {
            next.superseded_honoured = true;
        }
        if state.is_revoked(item, epoch) && (matched || returned || next.rows[item] != before) {
            next.revoked_acted = true;
        }
        if state.is_lost(item, epoch) {
            if matched || returned || next.rows[item] != before {
                next.lost_acted = true;
            } else if stmt == Stmt::Finish {
                next.last = Some(Event::LostFinishRefused);
            }
        }
        Some(next)
    }
}

/// Names of the `always` properties (the invariants).
mod always {
    /// At most one worker holds a token for an item that a renew would honour.
    pub const ONE_HONOURED_TOKEN: &str = "at most one token per item is honoured";
    /// No UPDATE matches, and no row changes, under a token that is not current.
    pub const STALE_CHANGES_NOTHING: &str = "a token that is not current changes nothing";
    /// Every statement returns false to a superseded token.
    pub const SUPERSEDED_REFUSED: &str = "a superseded token is always refused";
    /// No claim takes an item whose lease is live.
    pub const LIVE_LEASE_KEPT: &str = "a live lease is never claimed away";
    /// At most one UPDATE sets an item done.
    pub const DONE_ONCE: &str = "an item is written done at most once";
    /// Finish returns true to one token per item only.
    pub const ONE_FINISHER: &str = "finish is acknowledged to one token per item";
    /// `attempts` never exceeds the row's `max_attempts`, and that is
    /// raised above [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS) by one at most per
    /// retry.
    pub const ATTEMPTS_BOUNDED: &str =
        "attempts stay within max_attempts, which a retry raises by one at most";
    /// A token handed out before a cancel or retry of its item never matches
    /// an UPDATE, never changes the row, and gets false from every statement.
    pub const REVOKED_TOKEN_DEAD: &str =
        "a token handed out before a cancel or retry never acts again";
    /// No claim takes (or dead-letters) an item that is cancelled and not
    /// retried since.
    pub const CANCELLED_NOT_CLAIMED: &str = "a cancelled item is never claimed until a retry";
    /// A token handed out in a suffix of history the server lost never
    /// matches an UPDATE, never changes a row, and gets false from every
    /// statement (docs/contract.md, promise 8).
    pub const LOST_TOKEN_DEAD: &str = "a token from a lost suffix of history never acts again";
}

/// Names of the `sometimes` properties (reachability: the check is not vacuous).
mod sometimes {
    /// The bug report's scenario.
    pub const TAKEN_OVER_STALE_REFUSED_DONE: &str =
        "an item taken over after its lease lapsed, the first holder's finish refused, done";
    /// A superseded token's finish is refused.
    pub const STALE_FINISH_REFUSED: &str = "a superseded token's finish is refused";
    /// docs/contract.md, promise 2.
    pub const LAPSED_LEASE_RENEWED: &str = "a lapsed lease nobody re-claimed is renewed";
    /// The retry after a lost reply.
    pub const FINISH_REPEATED: &str = "a repeated finish with the same token returns true";
    /// `work_fail` on the last attempt.
    pub const FAILED_BY_WORK_FAIL: &str = "work_fail on the last attempt makes the item failed";
    /// The claim's dead letter.
    pub const DEAD_LETTER: &str = "a claim dead-letters a lapsed final attempt";
    /// Release or a retryable failure.
    pub const BACK_TO_PENDING: &str = "a claimed item goes back to pending";
    /// Everything finished.
    pub const ALL_DONE: &str = "both items done";
    /// `work_retry` of a dead letter, then `work_finish` of a new claim.
    pub const DEAD_LETTER_RETRIED_DONE: &str = "a dead letter retried and then done";
    /// `work_cancel` of a claimed item, then its holder's `work_finish`.
    pub const CANCELLED_HOLDER_REFUSED: &str =
        "an item cancelled while claimed refuses its holder's finish";
    /// `work_cancel`, `work_retry`, then a claim with a newer epoch.
    pub const CANCELLED_RETRIED_CLAIMED: &str = "a cancelled item retried and claimed again";
    /// After a loss, a finish with a lost token is refused.
    pub const LOST_FINISH_REFUSED: &str =
        "after the server lost a suffix, a finish with a token from it is refused";
    /// After a loss, an item whose lost token a worker holds is claimed anew
    /// and done.
    pub const LOST_ITEM_DONE: &str =
        "after the server lost a suffix, an item claimed in it is claimed anew and done";
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            rows: [Row::ENQUEUED; ITEMS],
            tokens: [[None; ITEMS]; WORKERS],
            next_epoch: 1,
            history: [History::default(); ITEMS],
            stale_write: false,
            superseded_honoured: false,
            live_lease_taken: false,
            revoked_acted: false,
            cancelled_claimed: false,
            last: None,
            replica: None,
            lost: [None; ITEMS],
            reissue_after: [None; ITEMS],
            failed_over: false,
            lost_acted: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if self.failover && !state.failed_over {
            actions.push(Action::Replicate);
            if state.replica.is_some() {
                actions.push(Action::LoseSuffix);
            }
        }
        for item in 0..self.items {
            if self.operators {
                actions.push(Action::Cancel { item });
                for run_at in [Retry::Now, Retry::Later] {
                    actions.push(Action::Retry { item, run_at });
                }
            }
            match state.rows[item].status {
                Status::Claimed(Lease::Live) => actions.push(Action::LeaseLapses { item }),
                Status::Pending { due: false } => actions.push(Action::ComesDue { item }),
                _ => {}
            }
            for worker in 0..WORKERS {
                actions.push(Action::Claim { worker, item });
                if state.tokens[worker][item].is_none() {
                    continue;
                }
                actions.push(Action::Renew { worker, item });
                actions.push(Action::Finish { worker, item });
                for retry in [Retry::Now, Retry::Later] {
                    actions.push(Action::Release {
                        worker,
                        item,
                        retry,
                    });
                    actions.push(Action::Fail {
                        worker,
                        item,
                        retry,
                    });
                }
            }
        }
    }

    fn next_state(&self, last_state: &State, action: Action) -> Option<State> {
        // The last step's event is forgotten; this step may record its own.
        let state = &State {
            last: None,
            ..last_state.clone()
        };
        let next = match action {
            Action::Claim { worker, item } => self.claim(state, worker, item),
            Action::Renew { worker, item } => {
                self.use_token(state, last_state.last, worker, item, Stmt::Renew)
            }
            Action::Finish { worker, item } => {
                self.use_token(state, last_state.last, worker, item, Stmt::Finish)
            }
            Action::Release {
                worker,
                item,
                retry,
            } => self.use_token(state, last_state.last, worker, item, Stmt::Release(retry)),
            Action::Fail {
                worker,
                item,
                retry,
            } => self.use_token(state, last_state.last, worker, item, Stmt::Fail(retry)),
            Action::Cancel { item } => self.cancel(state, item),
            Action::Retry { item, run_at } => self.retry(state, item, run_at),
            Action::LeaseLapses { item } => {
                let mut next = state.clone();
                next.rows[item].status = Status::Claimed(Lease::Lapsed);
                Some(next)
            }
            Action::ComesDue { item } => {
                let mut next = state.clone();
                next.rows[item].status = Status::Pending { due: true };
                Some(next)
            }
            Action::Replicate => {
                let replica = Some(Replica {
                    rows: state.rows,
                    history: state.history,
                });
                (state.replica != replica).then(|| State {
                    replica,
                    ..state.clone()
                })
            }
            Action::LoseSuffix => state.replica.map(|replica| {
                let mut next = state.clone();
                for item in 0..ITEMS {
                    let survived = replica.history[item].newest;
                    if let Some(newest) = state.history[item].newest {
                        if survived != Some(newest) {
                            next.lost[item] = Some(Lost { survived, newest });
                        }
                    }
                    next.reissue_after[item] = Some(survived);
                }
                next.rows = replica.rows;
                next.history = replica.history;
                next.replica = None;
                next.failed_over = true;
                next
            }),
        };
        next.map(|next| {
            let next = next.renumbered();
            if self.symmetry {
                next.workers_sorted()
            } else {
                next
            }
        })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                always::ONE_HONOURED_TOKEN,
                |model: &LeaseModel, s: &State| {
                    (0..ITEMS).all(|i| model.honoured_tokens(s, i) <= 1)
                },
            ),
            Property::always(always::STALE_CHANGES_NOTHING, |_, s: &State| !s.stale_write),
            Property::always(always::LIVE_LEASE_KEPT, |_, s: &State| !s.live_lease_taken),
            Property::always(always::SUPERSEDED_REFUSED, |_, s: &State| {
                !s.superseded_honoured
            }),
            Property::always(always::DONE_ONCE, |_, s: &State| {
                s.history.iter().all(|h| h.done_writes <= 1)
            }),
            Property::always(always::ONE_FINISHER, |_, s: &State| {
                s.history.iter().all(|h| !h.acked_twice)
            }),
            Property::always(always::ATTEMPTS_BOUNDED, |_, s: &State| {
                s.rows.iter().zip(&s.history).all(|(row, history)| {
                    let retries = u8::from(history.retried.is_some());
                    row.attempts <= row.max_attempts && row.max_attempts <= MAX_ATTEMPTS + retries
                })
            }),
            Property::always(always::REVOKED_TOKEN_DEAD, |_, s: &State| !s.revoked_acted),
            Property::always(always::CANCELLED_NOT_CLAIMED, |_, s: &State| {
                !s.cancelled_claimed
            }),
            Property::always(always::LOST_TOKEN_DEAD, |_, s: &State| !s.lost_acted),
        ];
        // Reachable in both configurations.
        properties.extend([
            Property::sometimes(sometimes::TAKEN_OVER_STALE_REFUSED_DONE, |_, s: &State| {
                matches!(s.last, Some(Event::StaleFinishRefused { item })
                    if s.rows[item].status == Status::Done && s.history[item].taken_over)
            }),
            Property::sometimes(sometimes::STALE_FINISH_REFUSED, |_, s: &State| {
                matches!(s.last, Some(Event::StaleFinishRefused { .. }))
            }),
            Property::sometimes(sometimes::LAPSED_LEASE_RENEWED, |_, s: &State| {
                s.last == Some(Event::LapsedLeaseRenewed)
            }),
            Property::sometimes(sometimes::FINISH_REPEATED, |_, s: &State| {
                s.last == Some(Event::FinishRepeated)
            }),
            Property::sometimes(sometimes::FAILED_BY_WORK_FAIL, |_, s: &State| {
                s.rows
                    .iter()
                    .any(|row| row.status == Status::Failed(FailedBy::WorkFail))
            }),
            Property::sometimes(sometimes::DEAD_LETTER, |_, s: &State| {
                s.rows
                    .iter()
                    .any(|row| row.status == Status::Failed(FailedBy::LapsedOnFinalAttempt))
            }),
            Property::sometimes(sometimes::BACK_TO_PENDING, |_, s: &State| {
                s.rows
                    .iter()
                    .any(|row| matches!(row.status, Status::Pending { .. }) && row.epoch.is_some())
            }),
        ]);
        if self.failover {
            properties.extend([
                Property::sometimes(sometimes::LOST_FINISH_REFUSED, |_, s: &State| {
                    s.last == Some(Event::LostFinishRefused)
                }),
                Property::sometimes(sometimes::LOST_ITEM_DONE, |_, s: &State| {
                    (0..ITEMS).any(|i| {
                        s.rows[i].status == Status::Done
                            && s.lost[i].is_some()
                            && s.tokens
                                .iter()
                                .any(|held| held[i].is_some_and(|epoch| s.is_lost(i, epoch)))
                    })
                }),
            ]);
        } else {
            // Two items, and an operator that cancels and retries.
            properties.extend([
                Property::sometimes(sometimes::ALL_DONE, |_, s: &State| {
                    s.rows.iter().all(|row| row.status == Status::Done)
                }),
                Property::sometimes(sometimes::DEAD_LETTER_RETRIED_DONE, |_, s: &State| {
                    s.rows.iter().zip(&s.history).any(|(row, history)| {
                        history.retried == Some(RetriedFrom::DeadLetter)
                            && row.status == Status::Done
                    })
                }),
                Property::sometimes(sometimes::CANCELLED_HOLDER_REFUSED, |_, s: &State| {
                    s.last == Some(Event::CancelledHolderRefused)
                }),
                Property::sometimes(sometimes::CANCELLED_RETRIED_CLAIMED, |_, s: &State| {
                    (0..ITEMS).any(|i| {
                        s.history[i].retried == Some(RetriedFrom::Cancelled)
                            && s.history[i]
                                .newest
                                .is_some_and(|epoch| s.is_current(i, epoch))
                    })
                }),
            ]);
        }
        properties
    }
}

/// The extension's protocol keeps every `always` property in every reachable
/// state, every `sometimes` property is reached, and the search ran to the
/// end.
#[test]
fn extension_protocol_holds_in_every_state() {
    check_exhaustively("extension", LeaseModel::new(Sql::Extension).with_symmetry());
}

/// The extension's protocol when the server may lose the suffix of its
/// history after any point a standby replayed (docs/contract.md, promise 8;
/// docs/failover.md): every `always` property holds (a token from the lost
/// suffix never acts again, and the others as before), and the failover's
/// `sometimes` properties are reached.
#[test]
fn extension_protocol_holds_when_the_server_loses_a_suffix() {
    check_exhaustively(
        "extension, with a loss of history",
        LeaseModel::new(Sql::Extension)
            .with_failover()
            .with_symmetry(),
    );
}

/// Checks `model` exhaustively: every `always` property in every reachable
/// state, every `sometimes` property reached, and the search run to its end.
fn check_exhaustively(what: &str, model: LeaseModel) {
    let visited = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&visited);
    let started = Instant::now();
    // No target state count, depth or timeout: the search stops when the
    // frontier is empty, or at the first counterexample to an `always`
    // property (a broken model may have no end of states after it).
    let checker = model
        .checker()
        .threads(THREADS)
        .finish_when(HasDiscoveries::AnyFailures)
        .visitor(move |_: Path<State, Action>| {
            count.fetch_add(1, Ordering::Relaxed);
        })
        .spawn_bfs()
        .join();
    let elapsed = started.elapsed();
    println!(
        "{what}: {} unique states ({} generated), max depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        elapsed
    );
    checker.assert_properties();
    assert!(checker.unique_state_count() > 0);
    // Every state generated was also taken from the frontier and checked:
    // the search was exhaustive, not cut short.
    assert_eq!(
        visited.load(Ordering::Relaxed),
        checker.unique_state_count(),
        "the search stopped before it had checked every reachable state"
    );
    for property in checker.model().properties() {
        if property.expectation == Expectation::Sometimes {
            println!("reached: {}", property.name);
        }
    }
}

/// A path through the extension's model, replayed step by step with the
/// workers keeping their numbers: the states so far, and the model that
/// makes the steps.
struct Replay {
    /// The extension's protocol, without the symmetry reduction.
    model: LeaseModel,
    /// The initial state, then one state per step.
    path: Vec<State>,
}

impl Replay {
    /// A replay from the model's initial state.
    fn new() -> Replay {
        let model = LeaseModel::new(Sql::Extension);
        let path = vec![model.init_states().remove(0)];
        Replay { model, path }
    }

    /// The state the replay has reached.
    fn now(&self) -> &State {
        self.path.last().expect("starts with the initial state")
    }

    /// Takes `action`, which must be a step, and returns the state after it.
    fn step(&mut self, action: Action) -> State {
        let next = self
            .model
            .next_state(self.now(), action)
            .unwrap_or_else(|| panic!("{action:?} is not possible"));
        self.path.push(next.clone());
        next
    }

    /// Demands that `action` is no step here: its statement finds no row.
    fn no_step(&self, action: Action) {
        assert_eq!(
            self.model.next_state(self.now(), action),
            None,
            "{action:?} must change nothing"
        );
    }

    /// Demands that every `always` property holds in every state so far.
    fn assert_always(&self) {
        for property in self.model.properties() {
            if property.expectation == Expectation::Always {
                for state in &self.path {
                    assert!(
                        (property.condition)(&self.model, state),
                        "{}",
                        property.name
                    );
                }
            }
        }
    }

    /// Demands that the `sometimes` property `name` holds in `state`.
    fn assert_reached(&self, name: &str, state: &State) {
        let property = self
            .model
            .properties()
            .into_iter()
            .find(|property| property.name == name)
            .unwrap_or_else(|| panic!("no property \"{name}\""));
        assert_eq!(property.expectation, Expectation::Sometimes, "{name}");
        assert!((property.condition)(&self.model, state), "{name}");
    }
}

/// The scenario of docs/contract.md, step by step in the model (workers keep their
/// numbers): A claims, the lease lapses, B claims with a newer epoch; A's
/// renew and finish are refused and change nothing; B's finish is honoured
/// and its retry returns true again without a second write; A's finish after
/// that is still refused. Every `always` property holds at every step.
#[test]
fn bug_report_scenario_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const ITEM: usize = 0;
    let mut replay = Replay::new();

    replay.step(Action::Claim {
        worker: A,
        item: ITEM,
    });
    replay.step(Action::LeaseLapses { item: ITEM });
    let b_claimed = replay.step(Action::Claim {
        worker: B,
        item: ITEM,
    });
    let a_token = b_claimed.tokens[A][ITEM].expect("A was given a token");
    let b_token = b_claimed.tokens[B][ITEM].expect("B was given a token");
    assert!(b_token > a_token, "B's epoch is newer than A's");
    assert!(b_claimed.history[ITEM].taken_over);
    assert_eq!(b_claimed.rows[ITEM].attempts, 2);

    let a_renewed = replay.step(Action::Renew {
        worker: A,
        item: ITEM,
    });
    assert_eq!(
        a_renewed, b_claimed,
        "A's renew is refused, nothing changes"
    );
    let a_finished = replay.step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(
        a_finished.last,
        Some(Event::StaleFinishRefused { item: ITEM })
    );
    assert_eq!(
        a_finished.rows, b_claimed.rows,
        "A's finish changes nothing"
    );

    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_finished.rows[ITEM].status, Status::Done);
    assert_eq!(b_finished.rows[ITEM].epoch, Some(b_token));
    let b_retried = replay.step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_retried.last, Some(Event::FinishRepeated));
    assert_eq!(b_retried.rows, b_finished.rows, "the retry changes nothing");
    let a_late = replay.step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_late.history[ITEM].done_writes, 1, "finished exactly once");

    replay.assert_always();
    replay.assert_reached(sometimes::TAKEN_OVER_STALE_REFUSED_DONE, &a_late);
}

/// An operator cancels an item under A's live lease, step by step: A's renew
/// and finish are refused and change nothing, no claim takes the item, a
/// done item cannot be cancelled. The operator's retry puts it back to
/// pending with owner, epoch and attempts kept and an attempt left; A's
/// token stays dead, and B's claim hands out a newer epoch, which finishes
/// the item. Every `always` property holds at every step.
#[test]
fn cancel_then_retry_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const ITEM: usize = 0;
    let mut replay = Replay::new();

    let a_claimed = replay.step(Action::Claim {
        worker: A,
        item: ITEM,
    });
    let a_token = a_claimed.tokens[A][ITEM].expect("A was given a token");
    let cancelled = replay.step(Action::Cancel { item: ITEM });
    assert_eq!(cancelled.rows[ITEM].status, Status::Cancelled);
    assert_eq!(cancelled.rows[ITEM].epoch, Some(a_token), "the epoch stays");
    assert_eq!(cancelled.rows[ITEM].owner, Some(OWNER), "the owner stays");
    assert!(!cancelled.is_current(ITEM, a_token));
    replay.no_step(Action::Cancel { item: ITEM });
    replay.no_step(Action::Claim {
        worker: B,
        item: ITEM,
    });

    let a_finished = replay.step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_finished.last, Some(Event::CancelledHolderRefused));
    assert_eq!(
        a_finished.rows, cancelled.rows,
        "A's finish changes nothing"
    );
    let a_renewed = replay.step(Action::Renew {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_renewed.rows, cancelled.rows, "A's renew changes nothing");
    replay.assert_reached(sometimes::CANCELLED_HOLDER_REFUSED, &a_finished);

    let retried = replay.step(Action::Retry {
        item: ITEM,
        run_at: Retry::Now,
    });
    assert_eq!(retried.rows[ITEM].status, Status::Pending { due: true });
    assert_eq!(retried.rows[ITEM].epoch, Some(a_token), "the epoch stays");
    assert_eq!(retried.rows[ITEM].attempts, 1, "the attempts stay");
    assert_eq!(retried.rows[ITEM].max_attempts, MAX_ATTEMPTS, "one is left");
    assert!(retried.is_revoked(ITEM, a_token), "A's token is dead");
    let a_again = replay.step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_again.rows, retried.rows, "A's token stays dead");

    let b_claimed = replay.step(Action::Claim {
        worker: B,
        item: ITEM,
    });
    let b_token = b_claimed.tokens[B][ITEM].expect("B was given a token");
    assert!(b_token > a_token, "B's epoch is newer than A's");
    replay.assert_reached(sometimes::CANCELLED_RETRIED_CLAIMED, &b_claimed);
    let a_late = replay.step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_late.rows, b_claimed.rows, "A's finish changes nothing");
    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_finished.rows[ITEM].status, Status::Done);
    replay.no_step(Action::Cancel { item: ITEM });
    replay.no_step(Action::Retry {
        item: ITEM,
        run_at: Retry::Now,
    });

    replay.assert_always();
}

/// An operator retries a dead letter, step by step: A fails the item on both
/// of its attempts, the retry raises `max_attempts` by one and makes it
/// pending later, the item comes due and B claims and finishes it on the
/// third attempt. A second retry is beyond the model's bound. Every `always`
/// property holds at every step.
#[test]
fn dead_letter_retried_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const ITEM: usize = 1;
    let mut replay = Replay::new();
    let claim_a = Action::Claim {
        worker: A,
        item: ITEM,
    };
    let fail_a = Action::Fail {
        worker: A,
        item: ITEM,
        retry: Retry::Now,
    };

    replay.step(claim_a);
    replay.step(fail_a);
    replay.step(claim_a);
    let failed = replay.step(fail_a);
    assert_eq!(failed.rows[ITEM].status, Status::Failed(FailedBy::WorkFail));
    replay.no_step(Action::Cancel { item: ITEM });

    let retried = replay.step(Action::Retry {
        item: ITEM,
        run_at: Retry::Later,
    });
    assert_eq!(retried.rows[ITEM].status, Status::Pending { due: false });
    assert_eq!(
        retried.rows[ITEM].attempts, MAX_ATTEMPTS,
        "the attempts stay"
    );
    assert_eq!(retried.rows[ITEM].max_attempts, MAX_ATTEMPTS + 1);
    replay.no_step(Action::Claim {
        worker: B,
        item: ITEM,
    });
    replay.step(Action::ComesDue { item: ITEM });
    let b_claimed = replay.step(Action::Claim {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_claimed.rows[ITEM].attempts, MAX_ATTEMPTS + 1);
    let a_token = b_claimed.tokens[A][ITEM].expect("A was given a token");
    assert!(b_claimed.is_superseded(ITEM, a_token));
    let a_late = replay.step(Action::Renew {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_late.rows, b_claimed.rows, "A's token stays dead");
    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_finished.rows[ITEM].status, Status::Done);
    replay.assert_reached(sometimes::DEAD_LETTER_RETRIED_DONE, &b_finished);

    replay.assert_always();
}

/// Checks `sql` until each of `expected` has a counterexample, and demands
/// that it has; prints each counterexample's actions.
fn assert_caught(sql: Sql, expected: &[&'static str]) {
    assert_caught_in(LeaseModel::new(sql), expected);
}

/// [`assert_caught`] in the configuration of `model`.
fn assert_caught_in(model: LeaseModel, expected: &[&'static str]) {
    let sql = model.sql;
    let started = Instant::now();
    let wanted: BTreeSet<&'static str> = expected.iter().copied().collect();
    // One thread, workers keeping their numbers: the search goes level by
    // level, so the counterexamples are short and read as written.
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AllOf(wanted))
        .spawn_bfs()
        .join();
    println!(
        "{sql:?}: {} unique states explored, {:.1?}",
        checker.unique_state_count(),
        started.elapsed()
    );
    for &name in expected {
        let path = checker
            .discovery(name)
            .unwrap_or_else(|| panic!("{sql:?}: no counterexample for \"{name}\""));
        println!("{sql:?} breaks \"{name}\": {:?}", path.into_actions());
    }
}

/// Fencing by owner name only, as the queues this project answers do: with
/// one owner name for every worker, a superseded worker renews and finishes
/// another's claim. The checker must find it.
#[test]
fn owner_only_fencing_is_caught() {
    assert_caught(
        Sql::OwnerOnly,
        &[
            always::ONE_HONOURED_TOKEN,
            always::STALE_CHANGES_NOTHING,
            always::SUPERSEDED_REFUSED,
            always::ONE_FINISHER,
        ],
    );
}

/// A retried finish that writes the row again (instead of `AFTER_REFUSAL`'s
/// read) finishes the item twice. The checker must find it.
#[test]
fn finish_retry_that_writes_is_caught() {
    assert_caught(
        Sql::FinishRewrites,
        &[always::DONE_ONCE, always::STALE_CHANGES_NOTHING],
    );
}

/// A retry written as an "undo" of the cancel, putting the item back to
/// `claimed` under the token it was cancelled from, lets that token renew and
/// finish again. The checker must find it.
#[test]
fn retry_that_restores_the_claim_is_caught() {
    assert_caught(
        Sql::RetryRestoresClaim,
        &[always::REVOKED_TOKEN_DEAD, always::STALE_CHANGES_NOTHING],
    );
}

/// A retry that leaves `max_attempts` as it is lets a retried dead letter be
/// claimed past its attempts. The checker must find it.
#[test]
fn retry_that_keeps_max_attempts_is_caught() {
    assert_caught(Sql::RetryKeepsMaxAttempts, &[always::ATTEMPTS_BOUNDED]);
}

/// A claim that picks by `state NOT IN ('done', 'failed')` takes cancelled
/// items. The checker must find it.
#[test]
fn claim_by_exclusion_is_caught() {
    assert_caught(Sql::ClaimByExclusion, &[always::CANCELLED_NOT_CLAIMED]);
}

/// Without the generation floor, a claim after the loss draws from the
/// sequence position that survived and hands out an epoch of the lost
/// suffix again: its holder's token is honoured beside the new one (the bug
/// report's double dispatch, through a failover). The checker must find it.
#[test]
fn epochs_reissued_after_a_loss_of_history_are_caught() {
    assert_caught_in(
        LeaseModel::new(Sql::NoGeneration).with_failover(),
        &[always::LOST_TOKEN_DEAD, always::ONE_HONOURED_TOKEN],
    );
}

/// The failover scenario of docs/failover.md, step by step: a standby
/// replays the enqueue; A claims; the server loses that suffix (the standby
/// is promoted); B, with A's owner name, claims the item anew and gets an
/// epoch above A's; A's renew and finish are refused and change nothing;
/// B finishes. Every `always` property holds at every step.
#[test]
fn failover_scenario_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const ITEM: usize = 0;
    let mut replay = Replay {
        model: LeaseModel::new(Sql::Extension).with_failover(),
        ..Replay::new()
    };
    replay.step(Action::Replicate);
    let a_claimed = replay.step(Action::Claim {
        worker: A,
        item: ITEM,
    });
    let a_token = a_claimed.tokens[A][ITEM].expect("A was given a token");
    let promoted = replay.step(Action::LoseSuffix);
    assert_eq!(promoted.rows[ITEM].status, Status::Pending { due: true });
    assert_eq!(promoted.rows[ITEM].epoch, None, "the claim is lost");
    assert_eq!(promoted.tokens[A][ITEM], Some(a_token), "A keeps its token");
    assert!(promoted.is_lost(ITEM, a_token));
    let b_claimed = replay.step(Action::Claim {
        worker: B,
        item: ITEM,
    });
    let a_token = b_claimed.tokens[A][ITEM].expect("A's token");
    let b_token = b_claimed.tokens[B][ITEM].expect("B's token");
    assert!(b_token > a_token, "B's epoch is above every lost one");
    let a_renewed = replay.step(Action::Renew {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_renewed.rows, b_claimed.rows, "A's renew changes nothing");
    let a_finished = replay.step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_finished.last, Some(Event::LostFinishRefused));
    assert_eq!(
        a_finished.rows, b_claimed.rows,
        "A's finish changes nothing"
    );
    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_finished.rows[ITEM].status, Status::Done);
    replay.assert_reached(sometimes::LOST_FINISH_REFUSED, &a_finished);
    replay.assert_reached(sometimes::LOST_ITEM_DONE, &b_finished);
    replay.assert_always();
}
