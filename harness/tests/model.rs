//! The lease protocol as a model, explored exhaustively by the `stateright`
//! model checker: no cluster, no extension, only the protocol's design.
//!
//! Three workers that all claim as `routines/laptop` share a queue of two
//! items (`max_attempts` 2). Any of them may claim, renew, finish, release or
//! fail at any moment, in any order, with whatever token it was last given
//! for an item — a superseded one included: workers keep their tokens and go
//! on using them, which is the bug report's situation. The server's clock is
//! abstract: a live lease may lapse and a delayed item may come due at any
//! moment. Each action is one SQL statement of `src/claim.rs` or
//! `src/lease.rs`, atomic as it is under PostgreSQL's row locks;
//! `docs/model.md` maps every action onto its statement, and says what the
//! model leaves out.
//!
//! What the check proves, for every reachable state (`always` properties):
//! at most one token per item is honoured; a token that is not current (a
//! superseded one, or one whose lease ended) never changes an item, and a
//! superseded one is always refused; no claim takes an item under a live
//! lease; an item is written `done` at most once and its finish is
//! acknowledged to one token only; attempts stay within `max_attempts`. The `sometimes` properties keep the check from being
//! vacuous: the bug report's scenario (a lapsed lease taken over by a second
//! worker, the first worker's finish refused, the item done), a repeated
//! finish acknowledged, a lapsed lease renewed by its holder (docs/contract.md, promise
//! 2), both ways to `failed`, a retry, both items done.
//!
//! The checker must also catch broken protocols: fencing by owner name only
//! (as the queues this project answers do) and a finish retry that writes the
//! row again. For each, the test demands the counterexamples that show it.
//! A last test replays the bug report's scenario step by step.
//!
//! Runs in a few seconds with `--release`:
//! `cargo test -p workfence_harness --release --test model -- --nocapture`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path, Property};

/// Workers in the model; all claim under [`OWNER`].
const WORKERS: usize = 3;
/// Items in the one queue.
const ITEMS: usize = 2;
/// `max_attempts` of every item: small, so both outcomes of `work_fail` and
/// the claim's dead letter are reached.
const MAX_ATTEMPTS: u8 = 2;
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
    /// Broken: `current_token!()` and `FINISHED_BY` without the epoch, so a
    /// token is judged by its owner name and the item's state alone.
    OwnerOnly,
    /// Broken: `FINISH` also matches a row already done under the token, so a
    /// retried finish writes the row again instead of only reading it.
    FinishRewrites,
}

/// The statement a token is used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stmt {
    /// `RENEW`.
    Renew,
    /// `FINISH` (then `FINISHED_BY` when it matched nothing).
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
/// matter.
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
}

/// The columns of one `workfence.items` row that the statements read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Row {
    /// `state` (with `run_at` and `lease_until` abstracted).
    status: Status,
    /// `owner`: NULL until the first claim, then the claimer's owner name.
    owner: Option<&'static str>,
    /// `epoch`: NULL until the first claim; kept by release, fail, finish.
    epoch: Option<Epoch>,
    /// `attempts`.
    attempts: u8,
}

impl Row {
    /// A freshly enqueued, due item.
    const ENQUEUED: Row = Row {
        status: Status::Pending { due: true },
        owner: None,
        epoch: None,
        attempts: 0,
    };
}

/// What the model remembers about an item's past, for the properties only;
/// no statement reads it.
///
/// Every field is either fixed by the row in the extension's protocol
/// (`newest` is the row's epoch, `done_writes` is 1 exactly when the row is
/// done, `acked` is then its epoch, `acked_twice` stays false) or is
/// forgotten at the item's next claim (`taken_over`), so this history adds
/// few states: a flag that stayed set for ever would double the states after
/// it.
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
    taken_over: bool,
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
}

/// The whole system: the rows, what each worker holds, the epoch sequence,
/// and the history the properties read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// `workfence.items`.
    rows: [Row; ITEMS],
    /// `tokens[w][i]`: the epoch worker `w` was last given for item `i`.
    tokens: [[Option<Epoch>; ITEMS]; WORKERS],
    /// The next value of `workfence.epoch_seq`.
    next_epoch: Epoch,
    /// Per item: what happened to it.
    history: [History; ITEMS],
    /// A token that was not current changed a row, or its UPDATE matched one.
    stale_write: bool,
    /// A superseded token got true from a statement.
    superseded_honoured: bool,
    /// A claim took an item whose lease had not lapsed.
    live_lease_taken: bool,
    /// What the last step did, if a `sometimes` property looks for it.
    last: Option<Event>,
}

impl State {
    /// The ground truth the properties judge by: `epoch` is the newest token
    /// handed out for `item` and the lease it opened is still on (what
    /// `work_lease_status` calls `current`). The owner name plays no part: it
    /// is not an identity.
    fn is_current(&self, item: usize, epoch: Epoch) -> bool {
        self.history[item].newest == Some(epoch)
            && matches!(self.rows[item].status, Status::Claimed(_))
    }

    /// A newer token than `epoch` was handed out for `item`.
    fn is_superseded(&self, item: usize, epoch: Epoch) -> bool {
        self.history[item]
            .newest
            .is_some_and(|newest| newest > epoch)
    }

    /// Renames the epochs in play to 1, 2, ... keeping their order, and sets
    /// the sequence just past them.
    ///
    /// The statements only compare epochs for equality, and a claim's epoch
    /// is newer than every epoch in play; a renaming that keeps the order
    /// changes neither, so the renamed state behaves exactly as the original.
    /// It folds the unending run of epochs into finitely many states, which
    /// is what lets breadth-first search finish: the check covers any number
    /// of claims, not a bounded prefix.
    fn renumbered(mut self) -> State {
        let mut in_play: Vec<Epoch> = self
            .rows
            .iter()
            .filter_map(|row| row.epoch)
            .chain(
                self.history
                    .iter()
                    .flat_map(|h| [h.newest, h.acked])
                    .flatten(),
            )
            .chain(self.tokens.iter().flatten().copied().flatten())
            .collect();
        in_play.sort_unstable();
        in_play.dedup();
        let rename = |e: &mut Option<Epoch>| {
            if let Some(old) = *e {
                let rank = in_play.binary_search(&old).expect("epoch is in play");
                *e = Some(Epoch::try_from(rank + 1).expect("few epochs in play"));
            }
        };
        for row in &mut self.rows {
            rename(&mut row.epoch);
        }
        for history in &mut self.history {
            rename(&mut history.newest);
            rename(&mut history.acked);
        }
        for token in self.tokens.iter_mut().flatten() {
            rename(token);
        }
        self.next_epoch = Epoch::try_from(in_play.len() + 1).expect("few epochs in play");
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

/// `work_release`'s `delay`, `work_fail`'s `retry_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Retry {
    /// `'0'`: due at once.
    Now,
    /// A positive interval (or NULL: backoff): due once the clock gets there.
    Later,
}

/// One step: one SQL statement by a worker, or the server's clock moving on.
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
}

/// The protocol, under the SQL of `sql`.
struct LeaseModel {
    /// Whose statements run.
    sql: Sql,
    /// Each worker's owner name: all the same.
    owners: [&'static str; WORKERS],
    /// Whether each step ends with [`State::workers_sorted`].
    symmetry: bool,
}

impl LeaseModel {
    /// Three workers, one owner name, running `sql`; workers keep their
    /// numbers, so paths read as written.
    fn new(sql: Sql) -> LeaseModel {
        LeaseModel {
            sql,
            owners: [OWNER; WORKERS],
            symmetry: false,
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

    /// The WHERE clause of `stmt` (`current_token!()` in the extension):
    /// does the token match the row?
    fn matches(&self, stmt: Stmt, row: &Row, owner: &str, epoch: Epoch) -> bool {
        let owner_ok = row.owner == Some(owner);
        let epoch_ok = row.epoch == Some(epoch);
        let claimed = matches!(row.status, Status::Claimed(_));
        match self.sql {
            Sql::Extension => owner_ok && epoch_ok && claimed,
            Sql::OwnerOnly => owner_ok && claimed,
            Sql::FinishRewrites if stmt == Stmt::Finish => {
                owner_ok && epoch_ok && (claimed || row.status == Status::Done)
            }
            Sql::FinishRewrites => owner_ok && epoch_ok && claimed,
        }
    }

    /// `FINISHED_BY`: is the row done under this token (a repeated finish)?
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
        match row.status {
            Status::Pending { due: true } => next.history[item].taken_over = false,
            Status::Claimed(Lease::Lapsed) if row.attempts < MAX_ATTEMPTS => {
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
        let epoch = state.next_epoch;
        next.next_epoch = epoch.checked_add(1).expect("epochs are renumbered");
        next.history[item].newest = Some(epoch);
        next.rows[item] = Row {
            status: Status::Claimed(Lease::Live),
            owner: Some(self.owners[worker]),
            epoch: Some(epoch),
            attempts: row.attempts + 1,
        };
        next.tokens[worker][item] = Some(epoch);
        Some(next)
    }

    /// A token-guarded statement by `worker` with its token for `item`; None
    /// when the worker has never claimed the item.
    fn use_token(&self, state: &State, worker: usize, item: usize, stmt: Stmt) -> Option<State> {
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
                    row.status = if row.attempts >= MAX_ATTEMPTS {
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
    /// `attempts` never exceeds `max_attempts`.
    pub const ATTEMPTS_BOUNDED: &str = "attempts stay within max_attempts";
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
            last: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for item in 0..ITEMS {
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
            Action::Renew { worker, item } => self.use_token(state, worker, item, Stmt::Renew),
            Action::Finish { worker, item } => self.use_token(state, worker, item, Stmt::Finish),
            Action::Release {
                worker,
                item,
                retry,
            } => self.use_token(state, worker, item, Stmt::Release(retry)),
            Action::Fail {
                worker,
                item,
                retry,
            } => self.use_token(state, worker, item, Stmt::Fail(retry)),
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
        vec![
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
                s.rows.iter().all(|row| row.attempts <= MAX_ATTEMPTS)
            }),
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
            Property::sometimes(sometimes::ALL_DONE, |_, s: &State| {
                s.rows.iter().all(|row| row.status == Status::Done)
            }),
        ]
    }
}

/// The extension's protocol keeps every `always` property in every reachable
/// state, every `sometimes` property is reached, and the search ran to the
/// end.
#[test]
fn extension_protocol_holds_in_every_state() {
    let visited = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&visited);
    let started = Instant::now();
    // No target state count, depth or timeout: the search stops when the
    // frontier is empty, or at the first counterexample to an `always`
    // property (a broken model may have no end of states after it).
    let checker = LeaseModel::new(Sql::Extension)
        .with_symmetry()
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
        "extension: {} unique states ({} generated), max depth {}, {:.1?}",
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
    let model = LeaseModel::new(Sql::Extension);
    let mut path = vec![model.init_states().remove(0)];
    let mut step = |action: Action| -> State {
        let last = path.last().expect("starts with the initial state");
        let next = model
            .next_state(last, action)
            .unwrap_or_else(|| panic!("{action:?} is not possible"));
        path.push(next.clone());
        next
    };

    step(Action::Claim {
        worker: A,
        item: ITEM,
    });
    step(Action::LeaseLapses { item: ITEM });
    let b_claimed = step(Action::Claim {
        worker: B,
        item: ITEM,
    });
    let a_token = b_claimed.tokens[A][ITEM].expect("A was given a token");
    let b_token = b_claimed.tokens[B][ITEM].expect("B was given a token");
    assert!(b_token > a_token, "B's epoch is newer than A's");
    assert!(b_claimed.history[ITEM].taken_over);
    assert_eq!(b_claimed.rows[ITEM].attempts, 2);

    let a_renewed = step(Action::Renew {
        worker: A,
        item: ITEM,
    });
    assert_eq!(
        a_renewed, b_claimed,
        "A's renew is refused, nothing changes"
    );
    let a_finished = step(Action::Finish {
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

    let b_finished = step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_finished.rows[ITEM].status, Status::Done);
    assert_eq!(b_finished.rows[ITEM].epoch, Some(b_token));
    let b_retried = step(Action::Finish {
        worker: B,
        item: ITEM,
    });
    assert_eq!(b_retried.last, Some(Event::FinishRepeated));
    assert_eq!(b_retried.rows, b_finished.rows, "the retry changes nothing");
    let a_late = step(Action::Finish {
        worker: A,
        item: ITEM,
    });
    assert_eq!(a_late.history[ITEM].done_writes, 1, "finished exactly once");

    for property in model.properties() {
        match property.expectation {
            Expectation::Always => {
                for state in &path {
                    assert!((property.condition)(&model, state), "{}", property.name);
                }
            }
            _ if property.name == sometimes::TAKEN_OVER_STALE_REFUSED_DONE => {
                assert!((property.condition)(&model, &a_late), "{}", property.name);
            }
            _ => {}
        }
    }
}

/// Checks `sql` until each of `expected` has a counterexample, and demands
/// that it has; prints each counterexample's actions.
fn assert_caught(sql: Sql, expected: &[&'static str]) {
    let started = Instant::now();
    let wanted: BTreeSet<&'static str> = expected.iter().copied().collect();
    // One thread, workers keeping their numbers: the search goes level by
    // level, so the counterexamples are short and read as written.
    let checker = LeaseModel::new(sql)
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

/// A retried finish that writes the row again (instead of `FINISHED_BY`'s
/// read) finishes the item twice. The checker must find it.
#[test]
fn finish_retry_that_writes_is_caught() {
    assert_caught(
        Sql::FinishRewrites,
        &[always::DONE_ONCE, always::STALE_CHANGES_NOTHING],
    );
}
