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
//! of `src/verbs/claim.rs`, `src/verbs/lease.rs`, `src/verbs/cancel.rs` or `src/verbs/operate.rs`,
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
//! The flow configurations (`LeaseModel::with_flow`, issue 17) put the
//! items in groups (`group_key`) and the queue under a concurrency limit
//! (`work_limit`), with two workers, batch claims and the operator's cancel.
//! A claim there is not one statement but several steps, as in the
//! extension, and between any two of them anything else may happen. A claim
//! of a queue with groups and no limit picks from its snapshot, then (the
//! groups locked) re-checks in a fresh snapshot and writes.
//!
//! A claim of the limited queue takes *slot rows* (issue 33, 0.12.0):
//! `work_limit(queue, concurrency => c)` makes the rows 1..c of
//! `workfence.queue_slots`, each with an `item`, NULL at first, and a slot
//! is free when its item is not in state `claimed`. A lapsed lease is still
//! claimed, so it keeps its slot, and claiming it anew takes no other;
//! finishing, failing, releasing, cancelling or dead-lettering the item
//! frees the slot without a write to it. The claim, in its own READ
//! COMMITTED transaction (`src/verbs/flow.rs`):
//! 1. `LOCK_SLOTS` ([`Action::Begin`] takes its snapshot S1, the rest is in
//!    [`Action::Pick`]): the slots that S1 shows free, in slot order, up to
//!    the items wanted, `FOR UPDATE SKIP LOCKED`. A row another transaction
//!    holds is skipped, so claims of the queue never wait on each other. A
//!    row another claim wrote and committed after S1 is re-checked by
//!    PostgreSQL's EvalPlanQual on its newest version, but the `items`
//!    sub-query of that re-check still reads S1: a slot just given to an
//!    item that S1 saw pending looks free, and is locked.
//! 2. `VERIFY_SLOTS` (in [`Action::Pick`]): a new statement, whose snapshot
//!    is taken after the row locks were granted, so every transaction that
//!    held one of those rows before has committed or aborted; it keeps the
//!    locked slots whose item is not claimed in that snapshot.
//! 3. `PICK` (in [`Action::Pick`]) and `TAKE` ([`Action::Commit`]), with
//!    the groups' rules as above: at most one pending item per kept slot,
//!    and any lapsed leases, which need none.
//! 4. `USE_SLOTS` ([`Action::Commit`]): each pending item claimed is
//!    written into a kept slot (`item = id`); the commit releases the locks.
//!
//! Why that holds the limit whatever the skips and re-checks interleave
//! with: a claim fills only a slot it holds locked and that a snapshot
//! taken after the lock was granted shows free. Every claim that filled the
//! slot before has committed by then, so an item it put there that is still
//! claimed is seen; and from `VERIFY_SLOTS` to the commit nobody else can
//! fill the slot (the lock), nor can its old item become claimed again (a
//! pending item is claimed only into a slot its claim holds; a lapsed lease
//! is claimed anew only while it is still claimed). So every claimed item
//! is the item of a slot of its own, and there are c slots. `LOCK_SLOTS`
//! alone cannot decide, because of step 1's EvalPlanQual: without step 2
//! (`Sql::NoSlotRecheck`) the checker finds claim B's S1 taken, claim A
//! locking the slot, claiming an item into it and committing, and B's scan
//! then reaching the unlocked slot, finding A's item pending in S1 and
//! filling the slot again. With a slot that a lapsed lease frees
//! (`Sql::SlotFreedByLease`: free if the item is not claimed *or* its lease
//! has expired) it finds a claim filling the slot of a lapsed lease, and
//! that lease going live again beside it, renewed by its holder or claimed
//! anew.
//!
//! The checker proves: at most one item of a group is claimed, lapsed
//! leases included; a claim never takes a grouped item while another
//! pending item of its group is ahead of it in the claim order; every
//! claimed item holds a slot of its own, lapsed leases included, and so
//! never more items claimed than the limit, nor more under unexpired
//! leases, a holder's renew of a lapsed lease included; and every fencing
//! property above, through the new claim path. Its `sometimes` properties:
//! a group's lapsed item claimed anew by another worker while the next
//! waits, a dead letter freeing its group, a group reordered by a release,
//! a batch of two, the limit reached while an item is ready, a lapsed item
//! claimed anew in its own slot (or renewed by its holder) while another
//! waits for the limit, the group's re-check dropping what its snapshot
//! picked, a claim's scan skipping the slot another claim holds, its
//! `VERIFY_SLOTS` giving up a slot filled since its S1 (the race it is
//! there for), and a claim taking an item while another claim of the
//! limited queue is in flight (under the limit lock they took turns).
//! Without the group's re-check (`Sql::NoGroupRecheck`), without
//! `VERIFY_SLOTS` (`Sql::NoSlotRecheck`) or with slots freed by a lapse
//! (`Sql::SlotFreedByLease`) the checker must find the broken property.
//!
//! What the limit's model leaves out: the limit is 1 (one slot), since two
//! items can never pass a limit of 2; lowering a limit (the slots above it
//! that still hold a claimed item stay as retired rows, which a claim
//! absorbs before it claims new items) is not modelled, nor raising it;
//! nor is a rate limit (its slots are free by `used_at <= now - per`, and
//! the model's clock has no times, only leases lapsing and items coming
//! due). The model's claim does `LOCK_SLOTS`'s scan, `VERIFY_SLOTS` and the
//! pick in one step, and holds only the slots it fills; it lets other
//! statements write an item between its pick and its commit, as if `PICK`
//! locked no row. Each of these gives the model's claims at least every
//! behaviour the extension's have ([`LeaseModel::pick`],
//! [`LeaseModel::commit`]). A slot's `item` is forgotten once that item
//! leaves `claimed` ([`State::slots_forgotten`]).
//!
//! The flow configurations of a group of two and of the limit also have
//! an operator who pauses and resumes the queue at any moment (issue 30).
//! A claim reads the queue's settings (`workfence.queues`: paused, grouped,
//! the limit) when it starts, as `src/backend/paused.rs` does: through the pause
//! lock, which a pause holds from before its write until its invalidation
//! has gone out, so that a claim starting in between reads the queue as
//! paused too. The checker proves that a claim that starts while the queue
//! is paused claims nothing (one that began before the pause committed may
//! still write), that the groups and the limit survive every pause and
//! resume, and that both hold, with every property above, across any
//! interleaving of pauses and resumes with claims in flight and settles.
//! 0.11.0's resume, which deleted the queue's row and with it the groups
//! and the limit (`Sql::ResumeDeletesRow`), a claim that ignores the pause
//! (`Sql::ClaimIgnoresPause`) and one that trusts its cache without the
//! pause lock (`Sql::NoPauseLock`) are caught.
//!
//! **Group heads** (issue 33, 0.12.0, `src/verbs/flow.rs`). A claim of a grouped
//! queue reads only *candidates*, items whose `behind` is false (`PICK`),
//! takes a grouped one only if its group has fewer than `per_group` items
//! claimed (`work_limit(..., per_group => n)`) and no pending item before
//! it, in a snapshot taken after it holds the group's lock (`TAKE`, which
//! does not read `behind`: safety never rests on it), and keeps `behind`
//! up to date. The group heads' configurations
//! ([`LeaseModel::with_group_of_three`]) have one group of three items,
//! `per_group` 1 (three workers) or 2 (two), the operator's cancel and a producer
//! that enqueues the third item while everything else goes on. There a
//! claim is four steps: [`Action::Pick`] (`PICK`, in its snapshot),
//! [`Action::Take`] (the group's `try_lock`, then `TAKE` in a snapshot
//! taken after it; its writes uncommitted, their rows locked),
//! [`Action::Normalize`] (`NORMALIZE`, a new statement under the lock: the
//! group's first pending item becomes its head, every other candidate
//! behind) and [`Action::Commit`]. An enqueue is two: [`Action::Enqueue`]
//! (`INSERT_GROUPED_BEHIND`, `src/verbs/enqueue.rs`: behind if a pending item of
//! its group comes before it in its snapshot) and [`Action::EnqueueCommit`]
//! (its pre-commit, `verify_behind` in `src/backend/xact.rs` and `VERIFY_BEHIND`:
//! the group's lock tried without waiting; got it, the item is re-checked
//! in a fresh snapshot; not, it is made a candidate). A cancel of a grouped
//! item waits for the group's lock and normalizes the group (`regroup`). A
//! release with `delay => '0'` keeps its `run_at`, so its place
//! ([`Retry::Kept`]). The configuration of a group of two (with pause and
//! resume) keeps group heads too.
//!
//! The checker proves, besides every property above: at most `per_group`
//! items of a group claimed, first claims in the group's order, no item
//! outside pending behind, and the design's invariant: every group whose
//! lock no transaction holds has its first pending item as a candidate
//! (every state with no transaction in flight is one of them), so that a
//! group with room and a due first item offers it to the next claim. A
//! group that broke it would be stranded: no claim picks its first item,
//! so none ever normalizes it. Its `sometimes` properties: a stale
//! candidate (a pending item not first and not behind), a claim's and a
//! cancel's `NORMALIZE` making the next item the head, a stale candidate
//! set behind, a claim passing over a group another claim holds, an
//! enqueue's pre-commit finding the lock held, its re-check clearing
//! `behind` (the race it is there for), an item enqueued ahead of the
//! head, and with `per_group` 2 two items claimed while the third waits.
//! There is no `eventually` property: stateright checks those on acyclic
//! paths only, and every path here can cycle (a lapse and a renew, a claim
//! and a release), so a starvation would go unreported. Nor is the
//! round-robin order (`turn`) checked: a pick takes any candidate.
//!
//! The checker must find a stranded group (or, for the count, three items
//! of a group claimed) under each broken variant of the design:
//! `Sql::EnqueueSkipsRecheck` (no `VERIFY_BEHIND` re-check),
//! `Sql::NormalizeInPickSnapshot`, `Sql::TakeCountsInPickSnapshot`
//! (`per_group` 2), `Sql::CancelSkipsNormalize`; and under two it found
//! in the code while this part was written: `Sql::NormalizeSkipsLockedHead`
//! (`NORMALIZE` updating the head `SKIP LOCKED`, while a claim's `PICK`
//! holds the row it locked before its re-check failed) and
//! `Sql::CancelInTransactionSnapshot` (`regroup` under REPEATABLE READ,
//! reading a snapshot from before the lock).
//!
//! **Workflows** (issue 37, 0.12.0; docs/contract.md, promise 13). A child
//! enqueued `after` its parents is `waiting` while one of them has not
//! settled (`done`, `failed` or `cancelled`), and its `waiting_on` counts
//! its edges (`workfence.item_edges`) that are not resolved. The statement
//! that ends a parent (an accepted finish, a failure on the last attempt,
//! a claim's dead letter, a cancel) resolves each of the parent's edges
//! once, in its own transaction ([`LeaseModel::settle`], `SETTLE` in
//! `src/verbs/workflow.rs`): a child whose count reaches 0 is released
//! (`pending`); a failure or a cancel instead cancels a waiting child
//! enqueued with `on_parent_failure => 'cancel'` (the edge marked
//! `cancelled`), and that cancel passes down to the child's own children,
//! while a `'run'` child counts the parent settled. `work_retry` of a
//! parent unresolves its `cancelled` edges and brings back a child that no
//! other parent's failure forbids ([`LeaseModel::reopen`], `REOPEN`); a
//! child the operator retries waits on every parent that has not settled.
//! The configurations ([`LeaseModel::with_workflow`]): two parents and
//! their child, with `'cancel'` and with `'run'`, and a chain of three with
//! `'cancel'`; two workers, who keep every token they were given for one
//! parent (the zombie's) and use it at any moment; leases lapsing; the
//! operator's cancel and retry. The checker proves, besides every fencing
//! property: a waiting item has a parent that has not settled;
//! `waiting_on` counts the unresolved edges, and no parent of one has
//! settled; a `'cancel'` child waits only while no parent has failed and
//! runs only once every parent is done (unless the operator retried it
//! past a failed parent); a child is released only once every parent has
//! ended, never by a token that is not current, and leaves `waiting` once
//! per time it entered it. Its `sometimes` properties: a child done after
//! its parents; a zombie's finish of a parent refused after the worker
//! that took the parent over finished it and the child was released; a
//! failed parent cancelling the child; a child a retried parent brought
//! back, released; a `'run'` child running after a parent failed; a cancel
//! and a retry passing down the chain. It must catch a release guarded by
//! the owner name alone (`Sql::ReleaseOnOwnerOnly`), one that counts an
//! edge without its `resolved` flag (`Sql::ReleaseWithoutResolved`) or
//! releases a child whatever its state (`Sql::ReleaseIgnoresState`), an
//! edge marked `cancelled` only by the failure that cancels
//! (`Sql::CancelMarksOneEdge`), and a child's retry judged by its count
//! alone (`Sql::RetryByCount`, what `RETRY_LIFE` did when this was
//! written: the model found it).
//!
//! The checker must also catch broken protocols: fencing by owner name only
//! (as the queues this project answers do), a finish retry that writes the
//! row again, a retry that undoes a cancel under the old token, a retry that
//! leaves `max_attempts` alone, and a claim that picks by exclusion and so
//! takes cancelled items. For each, the test demands the counterexamples
//! that show it. The last tests replay the bug report's scenario, a cancel
//! then a retry, and a dead letter's retry step by step.
//!
//! Runs in under a minute with `--release` (about 45 s on two shared cores,
//! the group heads' configurations 7 to 14 s each, the workflows' 2.5 to
//! 9.5 s; docs/model.md, Figures):
//! `cargo test -p workfence-harness --release --test client -- model:: --nocapture`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path, Property};

/// Workers in the model; all claim under [`OWNER`]. The flow configurations
/// have [`FLOW_WORKERS`] of them act.
const WORKERS: usize = 3;
/// Items the model has room for: the group heads' configurations have
/// three; every other configuration acts on fewer ([`LeaseModel::items`]),
/// and the rows past them are never inserted ([`Status::Unborn`]).
const ITEMS: usize = 3;
/// Items of the lease configuration (and of the flow configurations but
/// the group of three).
const LEASE_ITEMS: usize = 2;
/// A group (`group_key`) of a flow configuration.
type Group = u8;
/// A flow configuration's items: both in one group (`group_key => 'g'`),
/// enqueued in id order. The group's order, its hand-over after a lapse and
/// the race its re-check guards against. (The third row is never inserted.)
const ONE_GROUP: [Option<Group>; ITEMS] = [Some(0), Some(0), None];
/// A flow configuration's items: the first in a group, the second in none.
/// A batch can take both; and since the group lets one item be out at a
/// time and the other item is free, a limit of 1 can hold a claim back.
const GROUP_AND_NONE: [Option<Group>; ITEMS] = [Some(0), None, None];
/// The group heads' configurations (issue 33, 0.12.0): three items in one
/// group, the first two enqueued before the run, the third
/// ([`LATE_ITEM`]) enqueued during it.
const GROUP_OF_THREE: [Option<Group>; ITEMS] = [Some(0), Some(0), Some(0)];
/// The item of [`GROUP_OF_THREE`] that a producer enqueues while the
/// workers and the operator act ([`Action::Enqueue`]).
const LATE_ITEM: usize = 2;
/// Workers that act in a flow configuration: two claims in flight at once
/// are the race the re-check guards against.
const FLOW_WORKERS: usize = 2;
/// `max_items` of a flow claim.
const BATCH: usize = 2;
/// Workers that act in a workflow configuration: a zombie and the worker
/// that took its lease over.
const WORKFLOW_WORKERS: usize = 2;
/// A workflow configuration's edges (issue 37), per child its parents:
/// `i2` enqueued `after => ARRAY[i0, i1]`. Counting: the child waits for
/// two parents, and one may fail while the other finishes.
const TWO_PARENTS: [ItemSet; ITEMS] = [ItemSet(0), ItemSet(0), ItemSet(0b011)];
/// A workflow configuration's edges: `i1` after `i0`, `i2` after `i1`.
/// What passes down: a cancel that propagates, and a retry that brings
/// back a child and its own child.
const CHAIN: [ItemSet; ITEMS] = [ItemSet(0), ItemSet(0b001), ItemSet(0b010)];
/// The `work_limit(concurrency => 1)` of a flow configuration.
const LIMIT: u8 = 1;
/// The concurrency slots of `workfence.queue_slots` the model keeps: those
/// `work_limit` makes for [`LIMIT`] (a lowered limit's retired slots are
/// not modelled).
const SLOTS: usize = LIMIT as usize;
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
    /// The statements of `src/verbs/claim.rs` and `src/verbs/lease.rs`.
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
    /// Broken: no generation floor (`src/verbs/generation.rs`). After the server
    /// loses a suffix of its history, `epoch_seq` continues from the
    /// position it had then, so a claim hands out an epoch the lost suffix
    /// had handed out already.
    NoGeneration,
    /// Broken: a flow claim writes what its snapshot picked without the
    /// group half of the re-check (no item of the group claimed, the item
    /// the group's first pending one), keeping only the UPDATE's own guard
    /// on the row (still pending and due, or still claimed under a lapsed
    /// lease) and the limit's slots.
    NoGroupRecheck,
    /// Broken: a claim of a limited queue skips `VERIFY_SLOTS` (the slot
    /// half of the re-check): it fills every slot its `LOCK_SLOTS` locked,
    /// as that statement judged them. A slot that another claim gave an
    /// item and committed after `LOCK_SLOTS`'s snapshot was taken is
    /// locked in its newest version (PostgreSQL's EvalPlanQual re-check),
    /// but the item is read in the old snapshot, where it was not yet
    /// claimed: the slot looks free and is filled a second time. The
    /// group's re-check and the row's guard stay.
    NoSlotRecheck,
    /// Broken: a concurrency slot counts as free when its item's lease has
    /// lapsed (free iff the item is not claimed *or* its `lease_until` has
    /// passed), in `LOCK_SLOTS` and `VERIFY_SLOTS` alike, so a lapsed lease
    /// gives up its slot. A lapsed lease claimed anew still takes no slot,
    /// and its holder may still renew it (docs/contract.md, promise 2).
    SlotFreedByLease,
    /// Broken: 0.11.0's `work_resume`, which deleted the queue's row of
    /// `workfence.queues` (`DELETE ... WHERE q.paused`) instead of setting
    /// `paused = false`: the row also holds `grouped` and `concurrency`, so
    /// the resume drops the queue's serial groups and its limit, and the
    /// claims after it take the plain path, which knows neither.
    ResumeDeletesRow,
    /// Broken: a claim that does not look at the pause (neither the
    /// settings' `paused` nor the pause lock): it claims from a paused
    /// queue as from an open one.
    ClaimIgnoresPause,
    /// Broken: a claim that reads its backend's cached settings without
    /// first probing the queue's pause lock (`src/backend/paused.rs`). Between the
    /// pause's commit and its invalidation a backend whose cache predates
    /// the commit still reads the queue as open.
    NoPauseLock,
    /// Broken (group heads, 0.12.0): the enqueue's pre-commit does not
    /// re-check its items in a fresh snapshot (`VERIFY_BEHIND`) when it gets
    /// the group's lock: an item keeps the `behind` its insert's snapshot
    /// gave it. (When the lock is busy it still clears them.) This is also
    /// what an enqueue in a REPEATABLE READ or SERIALIZABLE transaction
    /// would do if `VERIFY_BEHIND` read the transaction's snapshot there
    /// (`verify_behind` in `src/backend/xact.rs` makes its items candidates
    /// instead).
    EnqueueSkipsRecheck,
    /// Broken (group heads): a claim's `NORMALIZE` reads the group in its
    /// `PICK`'s snapshot, taken before it held the group's lock, instead of
    /// a snapshot taken after: it sees none of the items that became
    /// pending since (an enqueue that committed in between).
    NormalizeInPickSnapshot,
    /// Broken (group heads): `TAKE` re-checks the group's order in its
    /// fresh snapshot but counts the group's claimed items as its `PICK`'s
    /// snapshot showed them (taken before it held the group's lock).
    TakeCountsInPickSnapshot,
    /// Broken (group heads): `work_cancel` of a grouped item does not
    /// normalize the group (no `regroup` after `CANCEL`).
    CancelSkipsNormalize,
    /// Broken (group heads), what `src/verbs/flow.rs` had when this variant was
    /// written: `NORMALIZE` updates the group's head `FOR UPDATE SKIP
    /// LOCKED`, leaving a head another transaction holds locked as it is,
    /// on the argument that only a claim's `PICK` locks a pending item and
    /// it locks only candidates. Under READ COMMITTED `PICK` locks a row
    /// before its EvalPlanQual re-check, and a row that fails it (it became
    /// behind after the pick's snapshot was taken) stays locked to the
    /// claim's commit. To see that, under this variant a claim's pick is
    /// two steps ([`Action::Snapshot`], then [`Action::Pick`]) and the
    /// claim holds the rows its scan locked ([`InFlight::rows`]).
    NormalizeSkipsLockedHead,
    /// Broken (group heads): `work_cancel` in a REPEATABLE READ (or
    /// SERIALIZABLE) transaction, whose statements all read the
    /// transaction's snapshot, taken at its first statement: before it
    /// waited for the group's lock, and perhaps long before. `CANCEL` and
    /// `NORMALIZE` read the group as it was then; a row they would lock or
    /// write that another transaction changed since raises a serialization
    /// failure (40001), which aborts the cancel. Under this variant the
    /// cancel is two steps ([`Action::CancelBegin`], then
    /// [`Action::Cancel`]).
    CancelInTransactionSnapshot,
    /// Broken (workflows, issue 37): a parent's children are released by
    /// a statement guarded by the owner name alone (`WHERE p.id = $1 AND
    /// p.owner = $2`), apart from `FINISH`'s token guard: every finish
    /// whose owner name is the parent row's resolves the parent's edges
    /// and releases its children, whether or not `FINISH` matched. A
    /// zombie with a superseded token and the same owner name releases the
    /// children while the parent is claimed by another worker, or pending.
    ReleaseOnOwnerOnly,
    /// Broken (workflows): the release decrements `waiting_on` for every
    /// edge from the parent, without reading the edge's `resolved` flag
    /// (it still sets it). A parent that ends twice (failed, retried, then
    /// done) counts twice towards a child that its failure did not cancel.
    ReleaseWithoutResolved,
    /// Broken (workflows): the release makes a child whose `waiting_on`
    /// reaches 0 `pending` without looking at its state (`state = CASE WHEN
    /// waiting_on = 1 THEN 'pending' ELSE state END`, no `state =
    /// 'waiting'`): a child that a failed parent cancelled comes back when
    /// its other parent is done.
    ReleaseIgnoresState,
    /// Broken (workflows): a parent that ends failed or cancelled marks its
    /// edge `cancelled` only when that cancels a waiting child, as the
    /// design's first sentence on `work_retry` reads ("the children its
    /// failure cancelled"), not also when another parent's failure has
    /// cancelled the child already. Of two parents that both failed, the
    /// second's edge is not marked, so the retry of the first brings the
    /// child back while the second is still failed; or, the second retried
    /// first (which brings nothing back), the child waits for the first
    /// alone, and runs while the second is pending.
    CancelMarksOneEdge,
    /// Broken (workflows), what `RETRY_LIFE` (`src/verbs/operate.rs`,
    /// 743ea60) does when this variant was written: `work_retry` of a
    /// child goes back to `waiting` when `waiting_on > 0`, else to
    /// `pending`, with its edges as they are. An edge resolved by a
    /// parent's failure or cancel that did not cancel the child (the
    /// operator had cancelled it first), whose parent was retried since,
    /// stays resolved: the child goes by the other parents alone, and runs
    /// while that parent is pending (or, in a chain, before its own parent
    /// has run).
    RetryByCount,
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
    /// `cancelled` by `work_cancel`, or (workflows) by a parent that ended
    /// failed or cancelled.
    Cancelled,
    /// `waiting` (workflows, issue 37): a child with an edge from a parent
    /// that has not settled, counted by [`State::waiting_on`]. No claim
    /// sees it (it is not `pending`); the statement that settles its last
    /// such parent makes it `pending` (due: see [`LeaseModel::settle`]),
    /// or `cancelled`.
    Waiting,
    /// No row yet: an item the run has not enqueued (the late item of a
    /// group heads' configuration before its [`Action::Enqueue`], and the
    /// rows past [`LeaseModel::items`], for ever).
    Unborn,
    /// Inserted by a `work_enqueue` whose transaction has not committed:
    /// no other snapshot sees the row. It already has its place in its
    /// group's order (its `priority` and `run_at` are fixed), `due` when
    /// its `run_at` has been reached. [`Action::EnqueueCommit`] makes it
    /// `pending`.
    Inserted {
        /// Whether `run_at` has been reached.
        due: bool,
    },
}

impl Status {
    /// Whether the item has a place in its group's claim order: pending, or
    /// inserted by an enqueue in flight (whose `run_at` is fixed, so that a
    /// release's new `run_at` lands before or after it).
    fn in_order(self) -> bool {
        matches!(self, Status::Pending { .. } | Status::Inserted { .. })
    }

    /// Whether the item is due by the clock and has a place in the order.
    fn due_in_order(self) -> bool {
        matches!(
            self,
            Status::Pending { due: true } | Status::Inserted { due: true }
        )
    }
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

    /// A row that is not there (yet).
    const UNBORN: Row = Row {
        status: Status::Unborn,
        ..Row::ENQUEUED
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
    /// Workflows: the item is in a time of waiting, from its insert as
    /// `waiting` (or its coming back to `waiting`) to the statement that
    /// takes it out: the ground truth of "waiting", set and cleared by the
    /// model's record of those events, apart from the row the statements
    /// write. Equal to the row's `waiting` unless a statement writes a
    /// child that is not waiting as if it were.
    waiting: bool,
    /// Workflows: the parents that have ended (their rows `done`, `failed`
    /// or `cancelled`) at least once: the ground truth of "every parent has
    /// ended", judged by the parents' rows, not by the edges the statements
    /// write. (A parent retried and pending again has ended before: a
    /// `'run'` child counts its failure, and a child its retry brings back
    /// is judged by [`always::CANCEL_CHILD_AFTER_DONE_PARENTS`].)
    parents_ended: ItemSet,
    /// Workflows: the item came back to `waiting` by the retry of a parent
    /// whose failure had cancelled it (transitively, of an ancestor's), and
    /// has not left `waiting` since.
    reopened: bool,
    /// Workflows: the operator's `work_retry` took the item back while one
    /// of its parents had ended failed or cancelled (the operator's
    /// decision: that parent does not cancel it again).
    overruled: bool,
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
    /// A flow claim's re-check dropped a grouped item that its snapshot had
    /// picked and that the row's own guard would still have let through:
    /// the group had moved on between the pick and the write.
    GroupRecheckDropped,
    /// `LOCK_SLOTS` of a limited queue's claim passed over a slot that its
    /// snapshot showed free, because another claim in flight holds it
    /// locked (`SKIP LOCKED`).
    SlotSkipped,
    /// `VERIFY_SLOTS` of a limited queue's claim gave up a slot that its
    /// `LOCK_SLOTS` had locked: the slot's item is claimed in the newer
    /// snapshot. A claim gave the slot that item and committed after
    /// `LOCK_SLOTS`'s snapshot was taken, whose EvalPlanQual re-check read
    /// the item in the old snapshot, still pending: the race the re-check
    /// is there for.
    SlotRecheckDropped,
    /// A flow claim took a lapsed item anew while the limit was reached: in
    /// the item's own slot, which it kept through the lapse.
    LapsedClaimedInItsSlot,
    /// A flow claim took two items (a batch, one per group).
    BatchOfTwo,
    /// A flow claim that began (picked) before a pause committed took an
    /// item after it (docs/reference.md's `work_pause`: such a claim may still
    /// return items).
    ClaimedAcrossThePause,
    /// A limited queue's claim took an item while another claim of the
    /// queue was in flight: the claims of a limited queue do not take turns
    /// (issue 33), as they did on the queue's limit lock, which a claim
    /// held from before its count to its commit.
    ClaimedBesideAnother,
    /// Group heads: an enqueue's pre-commit found its group's lock held
    /// (a claim of the group in flight) and cleared `behind` of its item,
    /// which its insert's snapshot had set.
    EnqueueLockBusy,
    /// Group heads: an enqueue's pre-commit got its group's lock and its
    /// re-check (`VERIFY_BEHIND`) cleared `behind` of its item, which its
    /// insert's snapshot had set: the item before it left `pending` in
    /// between (the race the re-check is there for).
    EnqueueRecheckCleared,
    /// Group heads: a claim's `NORMALIZE` made its group's first pending
    /// item, which was behind, the head.
    ClaimMadeHead,
    /// Group heads: `NORMALIZE` set a candidate that is not its group's
    /// first pending item behind (a stale candidate retired).
    StaleRetired,
    /// Group heads: a cancel's `NORMALIZE` made the group's first pending
    /// item, which was behind, the head.
    CancelMadeHead,
    /// Group heads: a claim's `TAKE` found its group's lock held by another
    /// transaction and dropped the group's item.
    GroupLockBusy,
    /// Group heads: an enqueue committed an item ahead of every pending
    /// item of its group.
    EnqueuedAhead,
    /// Workflows: the statement that ended a parent released `child`
    /// (`waiting` to `pending`; the first such child, if one step
    /// released more).
    ChildReleased {
        /// Which child.
        child: usize,
        /// It had come back to `waiting` by the retry of a parent whose
        /// failure had cancelled it ([`History::reopened`]).
        reopened: bool,
    },
}

/// A set of items, a bit per item (bit `i` for item `i`): the items a flow
/// claim picked; a child's parents, or those of its edges that are
/// resolved.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct ItemSet(u8);

impl ItemSet {
    /// The items of the set, in id order.
    fn items(self) -> impl Iterator<Item = usize> {
        (0..ITEMS).filter(move |&item| self.0 & (1 << item) != 0)
    }

    /// Whether `item` is in the set.
    fn contains(self, item: usize) -> bool {
        self.0 & (1 << item) != 0
    }

    /// The set with `item` added.
    fn with(self, item: usize) -> ItemSet {
        ItemSet(self.0 | 1 << item)
    }

    /// The set without `item`.
    fn without(self, item: usize) -> ItemSet {
        ItemSet(self.0 & !(1 << item))
    }

    /// How many items the set has.
    fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set has no item.
    fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Debug for ItemSet {
    /// `{i0, i1}`: as short as the paths that print it need.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.items().map(|item| format!("i{item}")).collect();
        write!(f, "{{{}}}", names.join(", "))
    }
}

/// A set of a limited queue's concurrency slots, a bit per slot (bit `s`
/// for the slot numbered `s + 1` in `workfence.queue_slots`).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct SlotSet(u8);

impl SlotSet {
    /// The slots of the set, in slot order.
    fn slots(self) -> impl Iterator<Item = usize> {
        (0..SLOTS).filter(move |&slot| self.0 & (1 << slot) != 0)
    }

    /// The set with `slot` added.
    fn with(self, slot: usize) -> SlotSet {
        SlotSet(self.0 | 1 << slot)
    }

    /// How many slots the set has.
    fn len(self) -> usize {
        self.0.count_ones() as usize
    }
}

impl std::fmt::Debug for SlotSet {
    /// `{s1}`: slots as `workfence.queue_slots` numbers them, from 1.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.slots().map(|slot| format!("s{}", slot + 1)).collect();
        write!(f, "{{{}}}", names.join(", "))
    }
}

/// How far a flow claim in flight has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Phase {
    /// A limited queue's claim whose `LOCK_SLOTS` has taken its snapshot
    /// (S1) and not yet reached the slot rows ([`Action::Begin`]): what it
    /// read in S1, which is all its scan and its EvalPlanQual re-check
    /// read of the items.
    Begun {
        /// The slots at or below the limit that S1 shows free (its scan
        /// looks at no other row).
        free: SlotSet,
        /// The items S1 shows busy ([`LeaseModel::busy`]); none when no
        /// slot is free in S1 (nothing reads them then).
        busy: ItemSet,
    },
    /// Under [`Sql::NormalizeSkipsLockedHead`]: the claim's `PICK` has
    /// taken its snapshot ([`Action::Snapshot`]) and not yet reached the
    /// rows ([`Action::Pick`]).
    Snapped {
        /// The items that pass `PICK`'s `WHERE` in the snapshot
        /// ([`LeaseModel::offered`]): the rows its scan will lock.
        passing: ItemSet,
    },
    /// The claim has picked ([`Action::Pick`]); its write and commit are
    /// next ([`Action::Commit`]; with group heads, [`Action::Take`] first).
    Picked {
        /// What its snapshot picked.
        items: ItemSet,
        /// The slots it holds locked to its commit, which `VERIFY_SLOTS`
        /// kept, one for each pending item picked (see
        /// [`LeaseModel::pick`]); none for a queue without a limit.
        kept: SlotSet,
        /// Under [`Sql::NormalizeInPickSnapshot`], the items pending in the
        /// pick's snapshot (the only ones its `NORMALIZE` will see); empty
        /// otherwise (nothing reads it).
        seen: ItemSet,
        /// Under [`Sql::TakeCountsInPickSnapshot`], how many items of the
        /// group were claimed in the pick's snapshot (what its `TAKE` will
        /// count); 0 otherwise (nothing reads it).
        claimed_seen: u8,
    },
    /// Group heads: the claim holds the locks of the groups it got
    /// (`try_lock`) and its `TAKE`, in a snapshot taken after they were
    /// granted, has decided what it claims ([`Action::Take`]). Its writes
    /// are not committed: every other snapshot still sees those rows as
    /// they were, and the rows are locked to the claim's commit. Its
    /// `NORMALIZE` is next ([`Action::Normalize`]), or, when it claimed no
    /// pending or lapsed item of a group, its commit.
    Taken {
        /// What `TAKE` claims (or dead-letters).
        took: ItemSet,
        /// The groups whose locks it holds, a bit per group.
        locked: u8,
        /// As in [`Phase::Picked`], for [`Sql::NormalizeInPickSnapshot`].
        seen: ItemSet,
    },
    /// Group heads: the claim's `NORMALIZE` has run (its writes are the
    /// claim's, uncommitted); its commit is next ([`Action::Commit`]),
    /// which makes `TAKE`'s and `NORMALIZE`'s writes visible and releases
    /// the locks.
    Normalized {
        /// What `TAKE` claims (or dead-letters).
        took: ItemSet,
        /// The groups whose locks it holds.
        locked: u8,
    },
}

/// A flow claim between its first step ([`Action::Begin`] for a limited
/// queue, [`Action::Pick`] otherwise) and its [`Action::Commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct InFlight {
    /// How far it has come.
    phase: Phase,
    /// The queue was paused when the claim began: a pause had committed and
    /// no resume since (the ground truth, whatever the claim read). Only a
    /// broken claim ([`Sql::ClaimIgnoresPause`], [`Sql::NoPauseLock`])
    /// begins then; the monitor of "a claim that starts while its queue is
    /// paused claims nothing" reads it at the commit.
    while_paused: bool,
    /// Under [`Sql::NormalizeSkipsLockedHead`], the item rows its `PICK`
    /// locked (`FOR UPDATE SKIP LOCKED`), those that failed the
    /// EvalPlanQual re-check included, held to its commit; empty otherwise
    /// (the model's claims lock no row before `TAKE`, see
    /// [`LeaseModel::commit`]).
    rows: ItemSet,
}

impl InFlight {
    /// The slot rows the claim holds locked.
    fn locked(self) -> SlotSet {
        match self.phase {
            Phase::Picked { kept, .. } => kept,
            Phase::Begun { .. }
            | Phase::Snapped { .. }
            | Phase::Taken { .. }
            | Phase::Normalized { .. } => SlotSet::default(),
        }
    }

    /// The group locks the claim holds, a bit per group.
    fn groups_locked(self) -> u8 {
        match self.phase {
            Phase::Taken { locked, .. } | Phase::Normalized { locked, .. } => locked,
            Phase::Begun { .. } | Phase::Snapped { .. } | Phase::Picked { .. } => 0,
        }
    }

    /// The item rows the claim holds locked to its commit: those its
    /// `TAKE` wrote, and those its `PICK` locked
    /// ([`Sql::NormalizeSkipsLockedHead`] only).
    fn rows_locked(self) -> ItemSet {
        let took = match self.phase {
            Phase::Taken { took, .. } | Phase::Normalized { took, .. } => took,
            Phase::Begun { .. } | Phase::Snapped { .. } | Phase::Picked { .. } => ItemSet(0),
        };
        ItemSet(took.0 | self.rows.0)
    }
}

/// The queue's row of `workfence.queues` (from 0.6.0; the flow columns from
/// 0.10.0): the settings a claim reads before it picks
/// (`paused::settings`, `src/backend/paused.rs`). No row reads as the default: not
/// paused, no groups, no limit. (`paused_at`, `rate`, `per` and the rate
/// window are not modelled; `PRUNE`'s delete of a row that holds no
/// setting any more is the default again.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct QueueRow {
    /// `paused`: set by `work_pause`, cleared by `work_resume`.
    paused: bool,
    /// `grouped`: set by the queue's first grouped enqueue (before the
    /// model's run: every item is enqueued at the start).
    grouped: bool,
    /// `concurrency`: set by `work_limit` (before the model's run).
    concurrency: Option<u8>,
}

impl QueueRow {
    /// Whether a claim that read these settings takes the flow path
    /// (`flow::claim`: [`Action::Pick`] then [`Action::Commit`]) rather than
    /// the plain one-statement claim ([`Action::Claim`]), which knows
    /// neither groups nor limits.
    fn flow(self) -> bool {
        self.grouped || self.concurrency.is_some()
    }
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
    /// Per item: its place in the claim order (priority, run_at, id) among
    /// the pending items of its group, 0 first. Every item has priority 0 in
    /// the model, so the place is the order of `run_at` (then id), which is
    /// all that is kept of `run_at` besides "due or not"
    /// ([`LeaseModel::place`]). 0 for an item that is not pending or in no
    /// group (nothing reads it then).
    run_order: [u8; ITEMS],
    /// Per worker: its flow claim in flight, from its first step to its
    /// commit ([`InFlight`]).
    picked: [Option<InFlight>; WORKERS],
    /// `workfence.queue_slots`: the `item` column of the limited queue's
    /// concurrency slots, in slot order (NULL until a claim gives the slot
    /// an item). Written only by a claim's `USE_SLOTS`; nothing empties
    /// it: a slot is free once its item leaves `claimed`.
    slots: [Option<usize>; SLOTS],
    /// A claim took a grouped pending item while another pending item of its
    /// group was ahead of it in the claim order.
    out_of_order: bool,
    /// The queue's row of `workfence.queues`, as committed.
    queue: QueueRow,
    /// A `work_pause` has committed (its row is visible) and its
    /// transaction has not yet sent its invalidation and released its pause
    /// lock ([`Action::PauseReleased`]). A backend whose cached settings
    /// predate the commit still holds them as valid meanwhile.
    pausing: bool,
    /// A claim that began while the queue was paused claimed or
    /// dead-lettered an item.
    paused_claimed: bool,
    /// `workfence.items.behind` (group heads, 0.12.0): a grouped pending
    /// item known to have a pending item of its group before it, which is
    /// no candidate of a claim. An inserted row carries what its
    /// transaction wrote. False in every configuration without group heads
    /// (nothing reads it there).
    behind: [bool; ITEMS],
    /// Under [`Sql::CancelInTransactionSnapshot`], the cancel in flight
    /// between its snapshot and its `CANCEL`; None otherwise.
    snapshot_cancel: Option<SnapshotCancel>,
    /// Workflows (issue 37): `workfence.items.waiting_on`, the unresolved
    /// edges into each item, kept under its row lock. Signed, as the
    /// column is: [`Sql::ReleaseWithoutResolved`] takes it below 0.
    waiting_on: [i8; ITEMS],
    /// Workflows: per child, the parents whose edge
    /// (`workfence.item_edges`) is `resolved`.
    resolved: [ItemSet; ITEMS],
    /// Workflows: per child, the parents whose edge is `cancelled`: the
    /// parent ended failed or cancelled while the child, with `'cancel'`,
    /// was waiting (the edge cancelled it) or cancelled by another parent's
    /// failure. Its failure forbids the child: the parent's `work_retry`
    /// unresolves the edge, and brings the child back once no such edge is
    /// left.
    edge_cancelled: [ItemSet; ITEMS],
    /// Workflows: a token statement took a child out of `waiting`
    /// (released or cancelled it) with a token that was not current.
    stale_release: bool,
    /// Workflows: a child was released (made `pending`) while one of its
    /// parents had never ended ([`History::parents_ended`]).
    early_release: bool,
    /// Workflows: a statement took a child out of `waiting` (released or
    /// cancelled it) that was in no time of waiting ([`History::waiting`]):
    /// a second exit for one entry.
    left_twice: bool,
}

/// A `work_cancel` in a REPEATABLE READ transaction, between the snapshot
/// its statements read ([`Action::CancelBegin`]) and its `CANCEL` and
/// `NORMALIZE` ([`Action::Cancel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SnapshotCancel {
    /// The item it cancels.
    item: usize,
    /// The items' states in the snapshot.
    status: [Status; ITEMS],
    /// Their `behind` in the snapshot.
    behind: [bool; ITEMS],
    /// Their places in the snapshot's claim order.
    run_order: [u8; ITEMS],
    /// The items whose rows another transaction wrote since the snapshot
    /// (a write that changed no column the model keeps, a claim's
    /// `NORMALIZE` of a head's `turn`, included): locking or updating one
    /// raises 40001.
    written: ItemSet,
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
            // The epochs in play as a set of bits (no allocation: this runs
            // at every step). Renumbered after every step, they stay small.
            let mut in_play: u128 = 0;
            for epoch in [
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
            {
                assert!(epoch < 128, "few epochs in play");
                in_play |= 1 << epoch;
            }
            let rename = |e: &mut Option<Epoch>| {
                if let Some(old) = *e {
                    assert!(in_play & (1 << old) != 0, "epoch is in play");
                    // Its rank among the epochs in play, from 1.
                    let below = (in_play & ((1 << old) - 1)).count_ones();
                    *e = Some(Epoch::try_from(below + 1).expect("few epochs in play"));
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
            most = most.max(in_play.count_ones());
        }
        self.next_epoch = Epoch::try_from(most + 1).expect("few epochs in play");
        self
    }

    /// Sorts the first `workers` workers by the tokens they hold and the
    /// claim they have in flight (symmetry reduction); the others never act.
    ///
    /// The workers share one owner name and the model keeps nothing else
    /// about them, so a state with two workers swapped behaves exactly as the
    /// original; one representative of each such class is enough. Worker
    /// numbers in the actions of a path are then positions in this order,
    /// not fixed workers.
    fn workers_sorted(mut self, workers: usize) -> State {
        let mut held: [_; WORKERS] = std::array::from_fn(|w| (self.tokens[w], self.picked[w]));
        held[..workers].sort_unstable();
        for (w, (tokens, picked)) in held.into_iter().take(workers).enumerate() {
            self.tokens[w] = tokens;
            self.picked[w] = picked;
        }
        self
    }

    /// Forgets the item of each slot whose item is not in state `claimed`
    /// (the slot's `item` reads as NULL).
    ///
    /// Every statement that reads a slot's item reads whether it is
    /// claimed (busy, under [`Sql::SlotFreedByLease`] whether its lease is
    /// live): a slot whose item is not claimed is free, as an empty one is,
    /// in every snapshot from now on, save one that is older than the
    /// item's leaving `claimed`, which only `LOCK_SLOTS`'s EvalPlanQual
    /// re-check reads ([`Phase::Begun`]). That re-check reads a slot's
    /// item in a snapshot (S1) that showed the slot free; an item claimed in
    /// S1 held a slot of its own in S1 ([`always::SLOT_OF_ITS_OWN`], checked
    /// in every state), which under a limit of 1 is that very slot, which
    /// S1 then would not have shown free. So as long as that property holds
    /// the re-check never finds an item that S1 has claimed, and forgetting
    /// the item changes no step; the first step that breaks it is taken
    /// alike. Without it a slot would remember items long done: the limit's
    /// configuration has about two fifths more states (and holds in them
    /// all, as it was checked to).
    fn slots_forgotten(mut self) -> State {
        for slot in &mut self.slots {
            if slot.is_some_and(|item| !matches!(self.rows[item].status, Status::Claimed(_))) {
                *slot = None;
            }
        }
        self
    }

    /// How many items are in state `claimed`, lapsed leases included (what
    /// the contract's limit counts).
    fn claimed(&self) -> usize {
        self.rows
            .iter()
            .filter(|row| matches!(row.status, Status::Claimed(_)))
            .count()
    }

    /// How many items are claimed under an unexpired lease.
    fn live(&self) -> usize {
        self.rows
            .iter()
            .filter(|row| row.status == Status::Claimed(Lease::Live))
            .count()
    }
}

/// `work_release`'s `delay`, `work_fail`'s `retry_in`, `work_retry`'s
/// `run_at`, a late `work_enqueue`'s `run_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Retry {
    /// `'0'` (`run_at` NULL or not in the future): due at once. For an
    /// item in a group: `work_fail`'s `retry_in => '0'`, `work_retry`'s
    /// `run_at` NULL, an enqueue's `run_at` now (a release with
    /// `delay => '0'` is [`Retry::Kept`]).
    Now,
    /// A positive interval (or NULL: backoff; a future `run_at`): due once
    /// the clock gets there. In a group, behind every other pending item
    /// (its `run_at` is the latest).
    Later,
    /// Flow configuration, an item in a group only: as `Later`, but a
    /// `run_at` before that of another pending, not yet due item of the
    /// group (a shorter delay than the one that item got), so it goes ahead
    /// of it. With the others, these are every place a new `run_at` can
    /// take.
    Sooner,
    /// A late enqueue only ([`Action::Enqueue`]): a `run_at` in the past,
    /// or a higher priority, that puts the item ahead of every item of its
    /// group; due at once.
    First,
    /// `work_release` of an item in a group with `delay => '0'`, which
    /// keeps its `run_at` (from 0.10.0: `LEAST(run_at, clock_timestamp())`),
    /// so its place: due, and ahead of every item not yet due; among the
    /// due items, wherever its old `run_at` puts it. The model takes every
    /// such place: this many due items of the group ahead of it.
    Kept(u8),
}

impl Retry {
    /// Whether the new `run_at` is reached at once.
    fn due(self) -> bool {
        matches!(self, Retry::Now | Retry::First | Retry::Kept(_))
    }
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
    /// The start of a claim of a limited queue (`work_claim` of a queue
    /// with a `work_limit`, issue 33): it reads the queue's settings, and
    /// its `LOCK_SLOTS` statement takes its snapshot (S1), in which it
    /// sees which concurrency slots are free. It has locked nothing yet:
    /// its scan reaches the slot rows later, at the claim's
    /// [`Action::Pick`], and anything may happen in between.
    Begin {
        /// Who claims.
        worker: usize,
    },
    /// The pick of a flow claim. For a queue with groups and no limit,
    /// the claim's first step: the candidates read from the claim's
    /// snapshot, by the rules of the group as that snapshot shows them
    /// (with group heads, `PICK` reads only items that are not behind).
    /// For a limited queue, after [`Action::Begin`]: `LOCK_SLOTS`'s scan
    /// locks the slot rows S1 showed free, skipping those other claims
    /// hold and re-checking the others by their newest version (read with
    /// S1's items: EvalPlanQual), `VERIFY_SLOTS` keeps the locked slots
    /// whose item is not claimed in a new snapshot, and the pick takes no
    /// more pending items than that, any number of lapsed leases (none at
    /// all is a pick too: the claim then ends with nothing). Nothing is
    /// written yet.
    Pick {
        /// Who claims.
        worker: usize,
        /// What its snapshot offered it.
        items: ItemSet,
    },
    /// The second half of a flow claim: lock each picked item's group, read
    /// again in a fresh snapshot, write the items that still pass (`TAKE`),
    /// give each pending item claimed a kept slot (`USE_SLOTS`), then
    /// commit, which releases every lock. One step, because the locks keep
    /// every other claim of those groups, and of those slots, out of it
    /// until the commit. With group heads the group locks and `TAKE` are
    /// [`Action::Take`] and `NORMALIZE` is [`Action::Normalize`], and this
    /// is the commit alone, which makes their writes visible.
    Commit {
        /// Whose claim.
        worker: usize,
    },
    /// A standby replays everything so far (the failover configuration).
    Replicate,
    /// The server loses the suffix of its history after the last
    /// [`Action::Replicate`]: the standby is promoted (or the database is
    /// recovered to that point, or an older dump restored). The rows go back
    /// to what the standby had; workers keep every token they were given.
    /// Once per run.
    LoseSuffix,
    /// `work_pause` of the queue, by an operator, up to its commit becoming
    /// visible: it took the queue's pause lock, set `paused` (`PAUSE`), and
    /// committed. Its invalidation has not been sent yet, and it still holds
    /// the lock ([`Action::PauseReleased`]). No step when the queue is
    /// paused already.
    Pause,
    /// The rest of the pause's commit: PostgreSQL sends its invalidation of
    /// `workfence.queues` to every backend, then releases its pause lock.
    PauseReleased,
    /// Under [`Sql::CancelInTransactionSnapshot`]: the operator's
    /// REPEATABLE READ transaction takes its snapshot, in which its
    /// `work_cancel` of `item` will read the group.
    CancelBegin {
        /// Which item.
        item: usize,
    },
    /// Under [`Sql::NormalizeSkipsLockedHead`], a claim's first step: it
    /// reads the queue's settings and its `PICK` takes its snapshot, in
    /// which it finds the rows it will lock; its scan reaches them at its
    /// [`Action::Pick`].
    Snapshot {
        /// Who claims.
        worker: usize,
    },
    /// Group heads: the claim's `try_lock` of each picked item's group
    /// (a group whose lock another transaction holds is passed over), then
    /// `TAKE` in a snapshot taken after the locks were granted: each item
    /// that still passes the group's rule (fewer than `per_group` items of
    /// the group claimed, no pending item of the group before it) and the
    /// row's own guard is written, uncommitted ([`Phase::Taken`]).
    Take {
        /// Whose claim.
        worker: usize,
    },
    /// Group heads: the claim's `NORMALIZE`, a new statement under the
    /// group locks it holds, for each group whose item it claimed: the
    /// group's first pending item becomes its head (`behind` false), and
    /// every other pending item that is not behind becomes behind.
    Normalize {
        /// Whose claim.
        worker: usize,
    },
    /// A producer's `work_enqueue` of `item` into its group, in its own
    /// transaction, up to its pre-commit: the row is inserted with the
    /// place `run_at` gives it, and `behind` as its snapshot shows it
    /// (whether a pending item of its group comes before it). Nothing else
    /// sees the row yet.
    Enqueue {
        /// Which item (the late one).
        item: usize,
        /// Its `run_at`: [`Retry::First`], [`Retry::Now`] or
        /// [`Retry::Later`].
        run_at: Retry,
    },
    /// The enqueue's pre-commit and commit (`VERIFY_BEHIND`): it tries its
    /// group's lock without waiting. Got it: in a fresh snapshot, its item,
    /// if behind, is made a candidate unless a pending item still comes
    /// before it. Did not get it (a claim of the group holds it): its item
    /// is made a candidate. Then the commit makes the row visible and
    /// releases the lock: one step, since nobody else can hold the lock in
    /// between.
    EnqueueCommit {
        /// Which item.
        item: usize,
    },
    /// `work_resume` of the queue, by an operator, whole: it takes the pause
    /// lock, clears `paused` (`RESUME`, then `PRUNE`), commits, sends its
    /// invalidation and releases the lock. One step, taken at the release:
    /// until then every claim reads the queue as paused (the lock), as it
    /// did before the resume. No step when the queue is not paused.
    Resume,
}

/// `on_parent_failure` of the children of a workflow configuration (every
/// child has the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnParentFailure {
    /// `'cancel'`: a parent that ends failed or cancelled cancels the child
    /// while it waits.
    Cancel,
    /// `'run'`: such a parent counts as settled; the child runs once every
    /// parent has settled.
    Run,
}

/// How a parent ended, in the statement that settles its edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// `done`, by an accepted finish.
    Done,
    /// `failed` (`work_fail` on the last attempt, or a claim's dead letter)
    /// or `cancelled` (`work_cancel`, or its own parent's failure).
    Failed,
}

/// The statement that settles a parent's edges, as the workflow's
/// monitors judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settler {
    /// `work_finish` or `work_fail`, with a token: whether that token was
    /// current before the statement (the ground truth, [`State::is_current`]).
    Token {
        /// The token was current.
        current: bool,
    },
    /// A claim's dead letter, or the operator's `work_cancel`: no token.
    Untokened,
}

/// Whether a claim of `row` dead-letters it: claimed under a lapsed lease on
/// its last attempt (the claim's `exhausted` CTE).
fn dead_letter(row: &Row) -> bool {
    row.status == Status::Claimed(Lease::Lapsed) && row.attempts >= row.max_attempts
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
    /// Whether an operator may cancel (and retry, if `retries`).
    operators: bool,
    /// Whether an operator may retry.
    retries: bool,
    /// Whether the server may lose a suffix of its history
    /// ([`Action::Replicate`], [`Action::LoseSuffix`]).
    failover: bool,
    /// How many workers act (the others hold nothing, ever).
    workers: usize,
    /// Each item's group (`group_key`), or none.
    groups: [Option<Group>; ITEMS],
    /// The queue's `work_limit` concurrency, if any.
    limit: Option<u8>,
    /// Whether this is a flow configuration: the queue has groups (and
    /// perhaps a limit), so its claims are flow claims, [`Action::Pick`]
    /// then [`Action::Commit`], instead of the one statement
    /// [`Action::Claim`], as long as the queue's settings say so (every
    /// claim reads them first: [`LeaseModel::settings_seen`]).
    flow: bool,
    /// Whether an operator may pause and resume the queue
    /// ([`Action::Pause`], [`Action::PauseReleased`], [`Action::Resume`]).
    pauses: bool,
    /// The queue's `per_group` (`work_limit(..., per_group => n)`, 0.12.0):
    /// at most that many items of a group claimed at once; 1 (serial
    /// groups) when unset.
    per_group: u8,
    /// Whether the queue's claims keep group heads (0.12.0): a pick takes
    /// only candidates (`behind` false), a claim is [`Action::Pick`],
    /// [`Action::Take`], [`Action::Normalize`] and [`Action::Commit`], and
    /// a cancel of a grouped item normalizes its group. Set in the
    /// configurations that have a group of two items or more; in a group of
    /// one, `behind` is never set and `NORMALIZE` writes nothing.
    heads: bool,
    /// The item a producer enqueues during the run ([`Action::Enqueue`]),
    /// if any.
    late: Option<usize>,
    /// A lean configuration (the group heads'), whose three items would
    /// be too many states with all of the lease machinery (it did not end
    /// within five minutes): after every step it forgets each token that
    /// is not current, every item's history but `newest` (a claimed item's)
    /// and `cancelled`, and the row's `owner` and `epoch` of every item
    /// that is not claimed ([`LeaseModel::forgotten`]). The lease
    /// configuration proves that a token that is not current changes
    /// nothing and is refused by every statement, and nothing else reads
    /// what is forgotten, so the rows, the claims and the groups behave as
    /// before; the fencing properties hold in it trivially, and the
    /// `sometimes` properties that need a stale token or a long history
    /// are not asked of it.
    lean: bool,
    /// Workflows (issue 37): per item, the parents it was enqueued
    /// `after` ([`TWO_PARENTS`], [`CHAIN`]); none outside a workflow
    /// configuration.
    parents: [ItemSet; ITEMS],
    /// Workflows: the children's `on_parent_failure`.
    on_parent_failure: OnParentFailure,
    /// Workflows: the parent whose workers keep every token they were given,
    /// stale ones included (the zombies); the other items' tokens that are
    /// not current are forgotten ([`LeaseModel::others_forgotten`]).
    zombie: usize,
    /// Whether an operator may retry an item that is no item's parent
    /// (every item outside a workflow configuration).
    retry_leaves: bool,
}

impl LeaseModel {
    /// Three workers, one owner name, running `sql`; workers keep their
    /// numbers, so paths read as written.
    fn new(sql: Sql) -> LeaseModel {
        LeaseModel {
            sql,
            owners: [OWNER; WORKERS],
            symmetry: false,
            items: LEASE_ITEMS,
            operators: true,
            retries: true,
            failover: false,
            workers: WORKERS,
            groups: [None; ITEMS],
            limit: None,
            flow: false,
            pauses: false,
            per_group: 1,
            heads: false,
            late: None,
            lean: false,
            parents: [ItemSet(0); ITEMS],
            on_parent_failure: OnParentFailure::Cancel,
            zombie: 0,
            retry_leaves: true,
        }
    }

    /// A workflow configuration (issue 37): three items, with the edges of
    /// `parents` and the children's `on_parent_failure`, each child
    /// `waiting` from the start; [`WORKFLOW_WORKERS`] workers, who keep
    /// every token they were given for `zombie` (a parent) and use it at any
    /// moment, the current token of each other item; leases lapsing; the
    /// operator's cancel and retry; delays of `'0'` only (a later `run_at`
    /// only holds a claim back, which a claim that finds nothing does too).
    fn with_workflow(
        self,
        parents: [ItemSet; ITEMS],
        on_failure: OnParentFailure,
        zombie: usize,
    ) -> LeaseModel {
        assert!(!self.flow && !self.failover, "workflows are apart");
        assert!(
            (0..ITEMS).all(|child| parents[child].items().all(|parent| parent < child)),
            "a child is enqueued after its parents (an edge is made only from an item that \
             exists), so the edges go from lower ids to higher ones and no cycle forms"
        );
        let model = LeaseModel {
            items: ITEMS,
            workers: WORKFLOW_WORKERS,
            parents,
            on_parent_failure: on_failure,
            zombie,
            ..self
        };
        assert!(model.is_parent(zombie), "the zombies are a parent's");
        model
    }

    /// The workflow configuration without the operator's retry of its leaf
    /// (the child that is no parent). `work_retry` of a child reads no
    /// `on_parent_failure` ([`LeaseModel::retry`]), so the `'cancel'`
    /// configurations check it for both shapes; without it the `'run'`
    /// configuration has a fifth of the states (181,230 instead of 895,563,
    /// 3 s instead of 18 s).
    fn without_leaf_retries(self) -> LeaseModel {
        assert!(self.workflow(), "leaves are a workflow's");
        LeaseModel {
            retry_leaves: false,
            ..self
        }
    }

    /// Whether `item` is a parent of another item.
    fn is_parent(&self, item: usize) -> bool {
        self.children(item).next().is_some()
    }

    /// Whether this is a workflow configuration.
    fn workflow(&self) -> bool {
        self.parents.iter().any(|parents| !parents.is_empty())
    }

    /// The children of `parent`.
    fn children(&self, parent: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.items).filter(move |&child| self.parents[child].contains(parent))
    }

    /// A flow configuration (issue 17): items in the groups of `groups`,
    /// claims in two steps, [`FLOW_WORKERS`] workers, batches of [`BATCH`],
    /// the operator's cancel (not its retry: see docs/model.md), and the
    /// queue's concurrency `limit` if given.
    fn with_flow(self, groups: [Option<Group>; ITEMS], limit: Option<u8>) -> LeaseModel {
        assert!(
            limit.is_none_or(|n| usize::from(n) <= SLOTS),
            "the model keeps SLOTS slot rows; and above 1, a commit could have slots \
             for some of the items it picked but not all, and LeaseModel::commit does \
             not choose which"
        );
        assert!(
            groups.iter().any(Option::is_some) || limit.is_some(),
            "a queue with neither groups nor a limit claims by the plain statement"
        );
        let model = LeaseModel {
            retries: false,
            workers: FLOW_WORKERS,
            groups,
            limit,
            flow: true,
            ..self
        };
        let heads = model.group_of_two();
        assert!(
            !heads || limit.is_none(),
            "the group heads' configurations have no limit: with one, a group of two \
             never binds a limit of 1 (the group alone lets one item out)"
        );
        LeaseModel { heads, ..model }
    }

    /// A group heads' configuration (issue 33, 0.12.0): the three items of
    /// [`GROUP_OF_THREE`] in one group, the queue's `per_group` set to
    /// `per_group`, [`LATE_ITEM`] enqueued by a producer during the run,
    /// `workers` workers (three: a claim may hold the group's lock while
    /// another has picked and a third picks), the operator's cancel, and
    /// the lean history ([`LeaseModel::lean`]).
    fn with_group_of_three(self, per_group: u8, workers: usize) -> LeaseModel {
        assert!((1..=2).contains(&per_group), "three items: 1 or 2");
        assert!((2..=WORKERS).contains(&workers), "claims that race: 2 or 3");
        LeaseModel {
            items: ITEMS,
            per_group,
            late: Some(LATE_ITEM),
            lean: true,
            workers,
            ..self.with_flow(GROUP_OF_THREE, None)
        }
    }

    /// `state` with what a lean configuration does not keep forgotten
    /// ([`LeaseModel::lean`]): every token that is not current, and, for
    /// an item that is not claimed, its history but `cancelled` and its
    /// row's `owner` and `epoch` (no token is current for it, so no
    /// statement compares them).
    fn forgotten(mut state: State) -> State {
        for item in 0..ITEMS {
            for w in 0..WORKERS {
                if state.tokens[w][item].is_some_and(|epoch| !state.is_current(item, epoch)) {
                    state.tokens[w][item] = None;
                }
            }
            if !matches!(state.rows[item].status, Status::Claimed(_)) {
                state.history[item] = History {
                    cancelled: state.history[item].cancelled,
                    ..History::default()
                };
                state.rows[item].owner = None;
                state.rows[item].epoch = None;
            } else {
                state.history[item] = History {
                    newest: state.history[item].newest,
                    ..History::default()
                };
            }
        }
        state
    }

    /// `state` with what a workflow configuration does not keep of its
    /// items but [`LeaseModel::zombie`] forgotten: as
    /// [`LeaseModel::forgotten`] does, every token that is not current,
    /// and, but for what the retry bound and the workflow read (`retried`,
    /// `cancelled`, `waiting`, `parents_ended`, `reopened`, `overruled`),
    /// the item's history, and its row's `owner` and `epoch` when it is not
    /// claimed.
    ///
    /// Nothing is lost for the extension's SQL: a token that is not current
    /// changes nothing and gets false from every statement (the lease
    /// configuration proves it for every item, and this one for the zombie
    /// parent), so a statement under such a token makes no step that
    /// changes a row or an edge, and no workflow property reads the refusal.
    /// A broken release that a stale token can reach
    /// ([`Sql::ReleaseOnOwnerOnly`]) is reached through the zombie parent's
    /// tokens. Each of these items is still claimed, renewed, finished,
    /// failed, released, cancelled and retried, by the holder of its
    /// current token. (With both parents' tokens kept, the two parents'
    /// configuration has 1,531,403 states, five times as many, and takes
    /// 35 s.)
    fn others_forgotten(&self, mut state: State) -> State {
        for item in (0..self.items).filter(|&item| item != self.zombie) {
            for w in 0..WORKERS {
                if state.tokens[w][item].is_some_and(|epoch| !state.is_current(item, epoch)) {
                    state.tokens[w][item] = None;
                }
            }
            let history = state.history[item];
            let claimed = matches!(state.rows[item].status, Status::Claimed(_));
            state.history[item] = History {
                newest: history.newest.filter(|_| claimed),
                cancelled: history.cancelled,
                retried: history.retried,
                waiting: history.waiting,
                parents_ended: history.parents_ended,
                reopened: history.reopened,
                overruled: history.overruled,
                ..History::default()
            };
            if !claimed {
                state.rows[item].owner = None;
                state.rows[item].epoch = None;
            }
        }
        state
    }

    /// The flow configuration with an operator who may pause and resume the
    /// queue at any moment (issue 30), between and across the claims' picks
    /// and commits and the holders' settles.
    fn with_pauses(self) -> LeaseModel {
        assert!(
            self.flow,
            "pause and resume are modelled in flow configurations"
        );
        LeaseModel {
            pauses: true,
            ..self
        }
    }

    /// The failover configuration: the server may lose the suffix of its
    /// history after any point a standby replayed, once. To keep the pairs
    /// of (state, state the standby had) within reach, one item (with the
    /// operator's cancel and retry): the statements never look at two
    /// items at once, and a loss puts every row back the same way. (Two
    /// items did not finish within minutes.)
    fn with_failover(self) -> LeaseModel {
        assert!(!self.flow, "the failover and flow configurations are apart");
        LeaseModel {
            items: 1,
            failover: true,
            ..self
        }
    }

    /// The same model with the workers' symmetry reduced: about a sixth of
    /// the states (3! orders of three workers), the same behaviours. A pause
    /// configuration's window is also folded where no claim can tell it
    /// apart ([`LeaseModel::window_folded`]).
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
            | Sql::NoGeneration
            | Sql::NoGroupRecheck
            | Sql::NoSlotRecheck
            | Sql::SlotFreedByLease
            | Sql::ResumeDeletesRow
            | Sql::ClaimIgnoresPause
            | Sql::NoPauseLock
            | Sql::EnqueueSkipsRecheck
            | Sql::NormalizeInPickSnapshot
            | Sql::TakeCountsInPickSnapshot
            | Sql::CancelSkipsNormalize
            | Sql::NormalizeSkipsLockedHead
            | Sql::CancelInTransactionSnapshot
            | Sql::ReleaseOnOwnerOnly
            | Sql::ReleaseWithoutResolved
            | Sql::ReleaseIgnoresState
            | Sql::CancelMarksOneEdge
            | Sql::RetryByCount => owner_ok && epoch_ok && claimed,
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
                self.settle(&mut next, item, Ended::Failed, Settler::Untokened);
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
        // The claim's own UPDATE makes the row no candidate-in-waiting: a
        // claimed item is never behind, so that a release, a failure with
        // a retry or a retry brings it back a candidate.
        next.behind[item] = false;
        Some(next)
    }

    /// Whether two of the items share a group.
    fn group_of_two(&self) -> bool {
        (0..self.items).any(|item| self.peers(item).next().is_some())
    }

    /// The other items of `item`'s group; none when it is in no group.
    fn peers(&self, item: usize) -> impl Iterator<Item = usize> + '_ {
        let group = self.groups[item];
        (0..self.items)
            .filter(move |&other| other != item && group.is_some() && self.groups[other] == group)
    }

    /// Whether another pending item of `item`'s group is ahead of it in the
    /// claim order, as a snapshot shows it (an enqueue in flight is seen by
    /// nobody else).
    fn preceded(&self, state: &State, item: usize) -> bool {
        self.peers(item).any(|other| {
            matches!(state.rows[other].status, Status::Pending { .. })
                && state.run_order[other] < state.run_order[item]
        })
    }

    /// How many items of `group` are in state `claimed`, lapsed leases
    /// included.
    fn claimed_in(&self, state: &State, group: Group) -> usize {
        (0..self.items)
            .filter(|&item| {
                self.groups[item] == Some(group)
                    && matches!(state.rows[item].status, Status::Claimed(_))
            })
            .count()
    }

    /// How many items of `item`'s group other than `item` are claimed.
    fn others_claimed(&self, state: &State, item: usize) -> usize {
        self.peers(item)
            .filter(|&other| matches!(state.rows[other].status, Status::Claimed(_)))
            .count()
    }

    /// Whether `item`'s group has as many items claimed as its
    /// `per_group`, `item` included.
    fn group_full(&self, state: &State, item: usize) -> bool {
        self.groups[item]
            .is_some_and(|group| self.claimed_in(state, group) >= usize::from(self.per_group))
    }

    /// The first pending item, in claim order, of each group that has one
    /// and whose lock no transaction holds ([`always::HEAD_IS_CANDIDATE`]).
    fn heads_free<'a>(&'a self, state: &'a State) -> impl Iterator<Item = usize> + 'a {
        (0..self.items).filter(move |&item| {
            self.groups[item].is_some_and(|group| !self.group_locked(state, group, None))
                && matches!(state.rows[item].status, Status::Pending { .. })
                && !self.preceded(state, item)
        })
    }

    /// Whether a claim's `TAKE` may claim `item` by what `state` shows
    /// (the limit apart), the rules of issue 17 with 0.12.0's `per_group`.
    /// An item in no group as the one-statement claim: pending and due, or
    /// claimed under a lapsed lease. An item in a group: claimed under a
    /// lapsed lease on its last attempt, always (a dead letter frees its
    /// group); claimed under a lapsed lease with attempts left, when fewer
    /// than `per_group` other items of its group are claimed (with
    /// `per_group` 1: only the group's holder, claimed anew); pending and
    /// due, when fewer than `per_group` items of its group are claimed and
    /// it is the group's first pending item in the claim order (a first
    /// item not yet due makes the group wait). With `per_group` 1 at most
    /// one item of a group passes.
    fn group_rule(&self, state: &State, item: usize) -> bool {
        let row = state.rows[item];
        if self.groups[item].is_none() {
            return matches!(
                row.status,
                Status::Pending { due: true } | Status::Claimed(Lease::Lapsed)
            );
        }
        let room = self.others_claimed(state, item) < usize::from(self.per_group);
        match row.status {
            Status::Claimed(Lease::Lapsed) => dead_letter(&row) || room,
            Status::Pending { due: true } => room && !self.preceded(state, item),
            _ => false,
        }
    }

    /// Whether a flow claim's pick may take `item` by what its snapshot,
    /// `state`, shows: [`LeaseModel::group_rule`], and with group heads a
    /// grouped pending item only if it is a candidate (not `behind`).
    /// `PICK` reads the candidates (`items_head_idx`); `TAKE` does not look
    /// at `behind`, so the group's safety never rests on it.
    fn offered(&self, state: &State, item: usize) -> bool {
        self.group_rule(state, item)
            && !(self.heads
                && self.groups[item].is_some()
                && matches!(state.rows[item].status, Status::Pending { .. })
                && state.behind[item])
    }

    /// Whether `row` keeps the slot that names it busy, as the slot
    /// statements (`LOCK_SLOTS`, `VERIFY_SLOTS`) judge it: the item is in
    /// state `claimed`, lapsed leases included; under
    /// [`Sql::SlotFreedByLease`], only under an unexpired lease.
    fn busy(&self, row: &Row) -> bool {
        match self.sql {
            Sql::SlotFreedByLease => row.status == Status::Claimed(Lease::Live),
            _ => matches!(row.status, Status::Claimed(_)),
        }
    }

    /// Whether a slot whose `item` column is `item` is free when the items
    /// are judged by `busy` (a snapshot's view of them).
    fn slot_free(item: Option<usize>, busy: ItemSet) -> bool {
        item.is_none_or(|item| busy.0 & (1 << item) == 0)
    }

    /// The items `state` shows busy ([`LeaseModel::busy`]).
    fn busy_items(&self, state: &State) -> ItemSet {
        ItemSet(
            (0..ITEMS)
                .filter(|&item| self.busy(&state.rows[item]))
                .fold(0, |set, item| set | 1 << item),
        )
    }

    /// The concurrency slots at or below the limit (all the model has).
    fn limit_slots(&self) -> impl Iterator<Item = usize> {
        0..self.limit.map_or(0, usize::from)
    }

    /// Whether a claim of `row` needs a concurrency slot: a pending item
    /// does (`PICK`'s `due` CTE, at most the slots kept); a lapsed lease
    /// claimed anew keeps its own (the slot still names it: `USE_SLOTS`
    /// gives slots to the other items only), and a dead letter frees one.
    fn takes_slot(row: &Row) -> bool {
        matches!(row.status, Status::Pending { .. })
    }

    /// Whether the limit is reached in `state`: as many items claimed as
    /// the limit (what the contract counts, lapsed leases included).
    fn limit_reached(&self, state: &State) -> bool {
        self.limit
            .is_some_and(|n| state.claimed() >= usize::from(n))
    }

    /// Whether an item waits for the limit in `state`: the limit is
    /// reached, and a claim would take an item that needs a slot but for it.
    fn waits_for_the_limit(&self, state: &State) -> bool {
        self.limit_reached(state)
            && (0..self.items)
                .any(|item| self.offered(state, item) && Self::takes_slot(&state.rows[item]))
    }

    /// Whether an item waits for its group in `state`: it is pending and
    /// due, and its group has `per_group` items claimed. A claim that
    /// ignored the group would take it.
    fn waits_for_its_group(&self, state: &State) -> bool {
        (0..self.items).any(|item| {
            state.rows[item].status == Status::Pending { due: true } && self.group_full(state, item)
        })
    }

    /// The queue's row as the run starts: not paused, `grouped` when an
    /// item has a `group_key`, and the configuration's limit.
    fn queue_at_start(&self) -> QueueRow {
        QueueRow {
            paused: false,
            grouped: self.groups.iter().any(Option::is_some),
            concurrency: self.limit,
        }
    }

    /// The settings a claim that starts in `state` reads
    /// (`paused::settings`, `src/backend/paused.rs`), or None when it hands out
    /// nothing because the queue reads as paused. The claim first probes the
    /// queue's pause lock without waiting: while a pause holds it (between
    /// its commit and its invalidation, [`State::pausing`]), the queue reads
    /// as paused. Otherwise the backend's cache, which the invalidation of
    /// every committed pause and resume has reached, gives the committed
    /// row. Under [`Sql::NoPauseLock`] a claim during the pause's window
    /// reads a cache from before the pause's commit (a backend without one
    /// would read the row and hand out nothing, a step the model need not
    /// take); under [`Sql::ClaimIgnoresPause`] it reads the row and does not
    /// look at `paused`.
    fn settings_seen(&self, state: &State) -> Option<QueueRow> {
        let seen = match self.sql {
            Sql::NoPauseLock if state.pausing => QueueRow {
                paused: false,
                ..state.queue
            },
            Sql::ClaimIgnoresPause => QueueRow {
                paused: false,
                ..state.queue
            },
            _ if state.pausing => return None,
            _ => state.queue,
        };
        (!seen.paused).then_some(seen)
    }

    /// The settings a flow claim by `worker` that starts in `state` reads
    /// ([`LeaseModel::settings_seen`]); None when the worker has a claim in
    /// flight already, or when the claim reads the queue as paused or takes
    /// the plain path.
    ///
    /// The settings that send a claim down the flow path are always those
    /// the run began with (a resume that deletes the row sends the claims
    /// after it down the plain path instead), so the group rules and the
    /// limit judge by the configuration's.
    fn flow_start(&self, state: &State, worker: usize) -> Option<QueueRow> {
        if state.picked[worker].is_some() {
            return None;
        }
        let seen = self.settings_seen(state)?;
        if !seen.flow() {
            return None;
        }
        debug_assert_eq!(seen, self.queue_at_start());
        Some(seen)
    }

    /// [`Action::Begin`]: a claim of the limited queue starts, and its
    /// `LOCK_SLOTS` takes its snapshot S1 (`state`). S1 decides which slot
    /// rows the scan will try to lock (those at or below the limit it shows
    /// free), and it is the snapshot in which the scan's EvalPlanQual
    /// re-check will read the items; both are kept with the claim.
    fn begin(&self, state: &State, worker: usize) -> Option<State> {
        let seen = self.flow_start(state, worker)?;
        seen.concurrency?;
        let busy = self.busy_items(state);
        let free = self
            .limit_slots()
            .filter(|&slot| Self::slot_free(state.slots[slot], busy))
            .fold(SlotSet::default(), SlotSet::with);
        let mut next = state.clone();
        next.picked[worker] = Some(InFlight {
            phase: Phase::Begun {
                free,
                busy: if free.0 == 0 { ItemSet(0) } else { busy },
            },
            while_paused: state.queue.paused,
            rows: ItemSet(0),
        });
        Some(next)
    }

    /// [`Action::Pick`]. A claim of a queue with groups and no limit
    /// starts here: it read settings that send it down the flow path
    /// ([`LeaseModel::flow_start`]), and `items` must be what its snapshot
    /// (`state`) offers ([`LeaseModel::offered`]), at most a batch. Any
    /// such set, not only the first ones in the claim order: a claim may
    /// find fewer (rows locked by others are skipped), and the model does
    /// not order the groups among themselves.
    ///
    /// A claim of the limited queue comes here after [`Action::Begin`],
    /// and this step is three statements of the extension, at this moment
    /// (`state`):
    /// - the rest of `LOCK_SLOTS`: its scan reaches the rows its snapshot
    ///   S1 showed free, in slot order, up to a batch of them (`LIMIT $3`).
    ///   A row another claim in flight holds locked is skipped (`SKIP
    ///   LOCKED`). Any other row is locked if it is free by its newest
    ///   committed version, the items read in S1: when a claim gave the
    ///   slot an item and committed after S1, PostgreSQL's EvalPlanQual
    ///   re-checks the `WHERE` clause on that version, but the clause's
    ///   sub-query on `workfence.items` still runs in S1, where that item
    ///   may be pending. (A row nobody wrote since S1 is free by S1 still.)
    /// - `VERIFY_SLOTS`, in a snapshot taken after those locks were granted
    ///   (every claim that held those rows before has committed): it keeps
    ///   the locked slots that are free in it ([`Sql::NoSlotRecheck`] keeps
    ///   them all).
    /// - the pick, from its own snapshot: `items`, what the snapshot
    ///   offers, with no more pending items ([`LeaseModel::takes_slot`])
    ///   than the slots kept. An empty pick ends the claim.
    ///
    /// The claim then holds the slots its pending items will fill, and no
    /// other. In the extension a claim holds every row its scan locked, from
    /// the scan to its commit. The model's claims do all the extension's
    /// can, and their lock windows are within the extension's, so the
    /// model's runs include the extension's, whatever its claims'
    /// statements interleave with:
    /// - a row a claim locks and does not fill is written by no one while
    ///   it holds it (the claim does not, and the lock keeps others out);
    ///   holding it only makes other claims' scans skip it, which leaves
    ///   them fewer slots and no other way to act. Not holding it leaves
    ///   them more: every interleaving with the lock is one without it,
    ///   the skipping claims (which fill nothing) picking as they would.
    /// - a row a claim locks and fills is, from the scan to the pick,
    ///   written and locked by no one (the claim holds it), so the scan
    ///   locks it at the pick as it did earlier. Its item cannot become
    ///   claimed meanwhile (a pending item is claimed only into a slot the
    ///   claim holds, and only a claimed item can be claimed anew), so
    ///   `VERIFY_SLOTS` keeps it at the pick as it did earlier.
    /// - a row `VERIFY_SLOTS` gives up is one the claim does not fill.
    fn pick(&self, state: &State, worker: usize, items: ItemSet) -> Option<State> {
        let mut next = state.clone();
        let (in_flight, kept) = match state.picked[worker] {
            None => {
                let seen = self.flow_start(state, worker)?;
                if seen.concurrency.is_some() || items.0 == 0 {
                    return None;
                }
                if self.pick_locks() {
                    return None;
                }
                let in_flight = InFlight {
                    // Replaced below.
                    phase: Phase::Begun {
                        free: SlotSet::default(),
                        busy: ItemSet(0),
                    },
                    while_paused: state.queue.paused,
                    rows: ItemSet(0),
                };
                (in_flight, None)
            }
            Some(InFlight {
                phase: Phase::Snapped { passing },
                ..
            }) => {
                return self.pick_locking(state, worker, items, passing);
            }
            Some(in_flight) => {
                let Phase::Begun { free, busy } = in_flight.phase else {
                    return None;
                };
                let held = (0..WORKERS)
                    .filter(|&w| w != worker)
                    .filter_map(|w| state.picked[w])
                    .fold(0, |held, other| held | other.locked().0);
                let mut locked = SlotSet::default();
                for slot in free.slots() {
                    if locked.len() == BATCH {
                        break;
                    }
                    if held & (1 << slot) != 0 {
                        next.last = Some(Event::SlotSkipped);
                    } else if Self::slot_free(state.slots[slot], busy) {
                        locked = locked.with(slot);
                    }
                }
                let now_busy = self.busy_items(state);
                let kept = locked
                    .slots()
                    .filter(|&slot| {
                        self.sql == Sql::NoSlotRecheck
                            || Self::slot_free(state.slots[slot], now_busy)
                    })
                    .fold(SlotSet::default(), SlotSet::with);
                if kept != locked {
                    next.last = Some(Event::SlotRecheckDropped);
                }
                (in_flight, Some(kept))
            }
        };
        let mut pending = 0;
        for item in items.items() {
            if item >= self.items || !self.offered(state, item) {
                return None;
            }
            if Self::takes_slot(&state.rows[item]) {
                pending += 1;
            }
        }
        if kept.is_some_and(|kept| pending > kept.len()) || items.items().count() > BATCH {
            return None;
        }
        // One item per group in a batch.
        let mut groups = 0u8;
        for item in items.items() {
            if let Some(group) = self.groups[item] {
                if groups & (1 << group) != 0 {
                    return None;
                }
                groups |= 1 << group;
            }
        }
        if items.0 == 0 {
            next.picked[worker] = None;
            return Some(next);
        }
        let kept = kept
            .unwrap_or_default()
            .slots()
            .take(pending)
            .fold(SlotSet::default(), SlotSet::with);
        // What the broken variants carry from the pick's snapshot to the
        // claim's later statements; nothing otherwise.
        let seen = if self.sql == Sql::NormalizeInPickSnapshot {
            ItemSet(
                (0..self.items)
                    .filter(|&item| matches!(state.rows[item].status, Status::Pending { .. }))
                    .fold(0, |set, item| set | 1 << item),
            )
        } else {
            ItemSet(0)
        };
        // (Its configuration has one group.)
        let claimed_seen = match items.items().find_map(|item| self.groups[item]) {
            Some(group) if self.sql == Sql::TakeCountsInPickSnapshot => {
                u8::try_from(self.claimed_in(state, group)).expect("few items")
            }
            _ => 0,
        };
        next.picked[worker] = Some(InFlight {
            phase: Phase::Picked {
                items,
                kept,
                seen,
                claimed_seen,
            },
            ..in_flight
        });
        Some(next)
    }

    /// Whether a claim's pick is two steps and holds the rows it locked
    /// ([`Sql::NormalizeSkipsLockedHead`]).
    fn pick_locks(&self) -> bool {
        self.sql == Sql::NormalizeSkipsLockedHead
    }

    /// [`Action::Snapshot`] ([`Sql::NormalizeSkipsLockedHead`]): a claim of
    /// the queue with group heads starts, and its `PICK` takes its
    /// snapshot (`state`): the items that pass its `WHERE` there.
    fn snapshot(&self, state: &State, worker: usize) -> Option<State> {
        let seen = self.flow_start(state, worker)?;
        if !self.pick_locks() || seen.concurrency.is_some() {
            return None;
        }
        let passing = ItemSet(
            (0..self.items)
                .filter(|&item| self.offered(state, item))
                .fold(0, |set, item| set | 1 << item),
        );
        let mut next = state.clone();
        next.picked[worker] = Some(InFlight {
            phase: Phase::Snapped { passing },
            while_paused: state.queue.paused,
            rows: ItemSet(0),
        });
        Some(next)
    }

    /// [`Action::Pick`] after [`Action::Snapshot`]: `PICK`'s scan reaches
    /// the rows that passed in its snapshot. A row another transaction
    /// holds locked is skipped; every other one is locked, then re-checked
    /// on its newest version (EvalPlanQual: the row's own columns, its
    /// `behind` among them; the sub-queries on the group still read the
    /// snapshot), and returned if it passes. A row that fails stays locked
    /// to the claim's commit, as PostgreSQL leaves it. `items` is what the
    /// claim keeps of the rows returned (any of them, as
    /// [`LeaseModel::pick`]); the claim stays in flight as long as it holds
    /// a row (its transaction goes on: it may be a caller's).
    fn pick_locking(
        &self,
        state: &State,
        worker: usize,
        items: ItemSet,
        passing: ItemSet,
    ) -> Option<State> {
        let in_flight = state.picked[worker]?;
        let others = (0..WORKERS)
            .filter(|&w| w != worker)
            .filter_map(|w| state.picked[w])
            .fold(0, |rows, other| rows | other.rows_locked().0);
        let reached = ItemSet(passing.0 & !others);
        let returned = |item: usize| {
            let row = state.rows[item];
            match row.status {
                Status::Pending { due: true } => {
                    !(self.heads && self.groups[item].is_some() && state.behind[item])
                }
                Status::Claimed(Lease::Lapsed) => true,
                _ => false,
            }
        };
        let mut groups = 0u8;
        for item in items.items() {
            if reached.0 & (1 << item) == 0 || !returned(item) {
                return None;
            }
            if let Some(group) = self.groups[item] {
                if groups & (1 << group) != 0 {
                    return None;
                }
                groups |= 1 << group;
            }
        }
        if items.items().count() > BATCH {
            return None;
        }
        let mut next = state.clone();
        next.picked[worker] = (reached.0 != 0).then_some(InFlight {
            phase: Phase::Picked {
                items,
                kept: SlotSet::default(),
                seen: ItemSet(0),
                claimed_seen: 0,
            },
            rows: reached,
            ..in_flight
        });
        Some(next)
    }

    /// `state`, or, when it is in a pause's window ([`State::pausing`]) and
    /// a claim that starts in it reads what it would read once the pause
    /// is released ([`LeaseModel::settings_seen`]), the same state with the
    /// pause released. The release changes only [`State::pausing`], and
    /// only a claim's start reads that (the statements, the clock and the
    /// monitors read the committed row); a resume waits for the release.
    /// So when the claims read alike, every step from the window leads to
    /// a state that folds the same way, the release leads to the released
    /// state, and the released state can do no more than the release and
    /// then its own steps: both reach the same states, and the search needs
    /// only one of them. Under the extension's claim, which probes the
    /// pause lock, they read alike (paused), and the window folds; without
    /// the probe ([`Sql::NoPauseLock`]) they do not, and it is explored. A
    /// reduction of the exhaustive runs, as the workers' symmetry is: the
    /// replays and the broken variants' runs keep the window.
    fn window_folded(&self, state: State) -> State {
        if state.pausing
            && self.settings_seen(&state)
                == self.settings_seen(&State {
                    pausing: false,
                    ..state.clone()
                })
        {
            State {
                pausing: false,
                ..state
            }
        } else {
            state
        }
    }

    /// The plain claim, [`Action::Claim`], by `worker` of `item`: the claim
    /// read settings that send it down the plain path (no groups, no limit:
    /// [`LeaseModel::settings_seen`]), and its one statement
    /// ([`LeaseModel::claim`]) knows nothing of groups and limits. In a flow
    /// configuration that happens only after a broken resume deleted the
    /// queue's settings ([`Sql::ResumeDeletesRow`]).
    fn plain_claim(&self, state: &State, worker: usize, item: usize) -> Option<State> {
        if self.settings_seen(state)?.flow() {
            return None;
        }
        let mut next = self.claim(state, worker, item)?;
        if state.queue.paused {
            next.paused_claimed = true;
        }
        // The monitor of "first-claimed in claim order", as in a commit.
        if self.groups[item].is_some()
            && matches!(state.rows[item].status, Status::Pending { .. })
            && self.preceded(state, item)
        {
            next.out_of_order = true;
        }
        Some(next)
    }

    /// The second half of a flow claim, [`Action::Commit`]: with the picked
    /// items' groups locked, a fresh snapshot (`state`: every claim that
    /// held those locks before has committed) re-checks each picked item,
    /// in id order, by the group's rules ([`LeaseModel::offered`]). An item
    /// that passes is written by the claim's UPDATE (`TAKE`), whose own
    /// guard on the row ([`LeaseModel::claim`]: still pending and due, or
    /// still claimed under a lapsed lease) is the last word; the rest are
    /// dropped. In a limited queue, each pending item claimed is given one
    /// of the slots `VERIFY_SLOTS` kept, in slot order (`USE_SLOTS`: the
    /// slot's `item` is set to it); a lapsed lease claimed anew keeps the
    /// slot that names it, and a dead letter frees its slot by leaving
    /// `claimed`. The commit releases the slot rows' locks.
    ///
    /// The model lets any statement write a picked item between the pick
    /// and the commit, as if the pick locked no row. The extension's `PICK`
    /// locks its rows `FOR UPDATE SKIP LOCKED` to the commit, so there an
    /// item is at `TAKE` as it was picked, and an item picked as a lapsed
    /// lease never needs a slot at `TAKE`. When the model has it pending by
    /// then (its holder released it meanwhile) and the claim has no kept
    /// slot left for it, the commit leaves it: a state a claim that did not
    /// pick it reaches as well. Whether an item takes a slot is judged by
    /// the row now, as `USE_SLOTS` judges it by `TAKE`'s result.
    ///
    /// With a limit of at most 1 a commit never has slots for some of its
    /// pending items but not all (it picked at most one), so "in id order"
    /// is no choice the model makes for the claim.
    ///
    /// With group heads ([`LeaseModel::heads`]) the claim's `TAKE` has run
    /// already ([`Action::Take`], then [`Action::Normalize`] when it served
    /// a group), and the commit makes its writes visible
    /// ([`LeaseModel::commit_taken`]).
    fn commit(&self, state: &State, worker: usize) -> Option<State> {
        let in_flight = state.picked[worker]?;
        let mut next = state.clone();
        next.picked[worker] = None;
        let limited = self.limit.is_some();
        match in_flight.phase {
            Phase::Picked { items, kept, .. } if !self.heads => {
                self.commit_picked(state, &mut next, worker, items, kept);
            }
            Phase::Taken { took, .. } if self.served(state, took) == 0 => {
                self.commit_taken(&mut next, worker, took);
            }
            Phase::Normalized { took, .. } => self.commit_taken(&mut next, worker, took),
            Phase::Begun { .. }
            | Phase::Snapped { .. }
            | Phase::Picked { .. }
            | Phase::Taken { .. } => return None,
        }
        let taken = (0..ITEMS)
            .filter(|&item| {
                next.rows[item].status == Status::Claimed(Lease::Live)
                    && state.rows[item].status != Status::Claimed(Lease::Live)
            })
            .count();
        if taken == 2 && next.last.is_none() {
            next.last = Some(Event::BatchOfTwo);
        }
        // The monitor of "a claim that starts while its queue is paused
        // claims nothing", judged by when the claim began; a claim that
        // began before the pause committed may still write after it.
        if next.rows != state.rows {
            if in_flight.while_paused {
                next.paused_claimed = true;
            } else if state.queue.paused && taken > 0 && next.last.is_none() {
                next.last = Some(Event::ClaimedAcrossThePause);
            }
        }
        if limited && taken > 0 && next.last.is_none() && next.picked.iter().any(Option::is_some) {
            next.last = Some(Event::ClaimedBesideAnother);
        }
        Some(next)
    }

    /// [`LeaseModel::commit`] without group heads: the group locks, the
    /// re-check, `TAKE` and `USE_SLOTS`, written into `next`.
    fn commit_picked(
        &self,
        state: &State,
        next: &mut State,
        worker: usize,
        items: ItemSet,
        kept: SlotSet,
    ) {
        let limited = self.limit.is_some();
        let full = self.limit_reached(state);
        let mut free_slots = kept.slots();
        for item in items.items() {
            let row = next.rows[item];
            let Some(mut written) = self.claim(next, worker, item) else {
                continue;
            };
            if self.sql != Sql::NoGroupRecheck && !self.group_rule(next, item) {
                next.last = Some(Event::GroupRecheckDropped);
                continue;
            }
            if limited && Self::takes_slot(&row) {
                let Some(slot) = free_slots.next() else {
                    continue;
                };
                written.slots[slot] = Some(item);
            } else if full && !dead_letter(&row) {
                written.last = Some(Event::LapsedClaimedInItsSlot);
            }
            // The monitor of "first-claimed in claim order": judged by the
            // model's order, whatever the re-check did.
            if self.groups[item].is_some()
                && matches!(row.status, Status::Pending { .. })
                && self.preceded(next, item)
            {
                written.out_of_order = true;
            }
            *next = written;
        }
    }

    /// Whether a transaction other than `worker`'s claim (any, for `None`)
    /// holds the lock of `group`: a claim of it between its
    /// [`Action::Take`] and its [`Action::Commit`]. (A cancel and an
    /// enqueue's pre-commit hold it within their one step.)
    fn group_locked(&self, state: &State, group: Group, worker: Option<usize>) -> bool {
        (0..WORKERS)
            .filter(|&w| Some(w) != worker)
            .filter_map(|w| state.picked[w])
            .any(|in_flight| in_flight.groups_locked() & (1 << group) != 0)
    }

    /// Whether `item`'s row is locked by a claim in flight whose `TAKE`
    /// wrote it (or, under [`Sql::NormalizeSkipsLockedHead`], whose `PICK`
    /// locked it): every other statement that would write it waits for that
    /// claim's commit (a claim's `PICK` skips it).
    fn row_locked(state: &State, item: usize) -> bool {
        state
            .picked
            .iter()
            .flatten()
            .any(|in_flight| in_flight.rows_locked().0 & (1 << item) != 0)
    }

    /// The item rows that claims in flight other than `worker`'s (all, for
    /// `None`) hold locked.
    fn rows_locked_by_others(state: &State, worker: Option<usize>) -> ItemSet {
        ItemSet(
            (0..WORKERS)
                .filter(|&w| Some(w) != worker)
                .filter_map(|w| state.picked[w])
                .fold(0, |rows, other| rows | other.rows_locked().0),
        )
    }

    /// The groups a claim that `TAKE`s `took` in `state` serves, a bit per
    /// group: the groups of its grouped items that it claims (not those it
    /// dead-letters). `NORMALIZE` runs for them.
    fn served(&self, state: &State, took: ItemSet) -> u8 {
        took.items()
            .filter(|&item| !dead_letter(&state.rows[item]))
            .filter_map(|item| self.groups[item])
            .fold(0, |groups, group| groups | 1 << group)
    }

    /// [`Action::Take`] (group heads): the claim tries each picked item's
    /// group lock without waiting, and a group another transaction holds
    /// is passed over; then `TAKE`, in a snapshot taken after the locks
    /// were granted (`state`: every transaction that held one of them
    /// before has committed), re-checks each remaining item by the group's
    /// rule ([`LeaseModel::group_rule`], which does not read `behind`) and
    /// the row's own guard, and writes those that pass. The writes are not
    /// visible until the commit, and their rows are locked to it
    /// ([`LeaseModel::row_locked`]). A claim that took nothing and holds no
    /// group lock ends here.
    fn take(&self, state: &State, worker: usize) -> Option<State> {
        let in_flight = state.picked[worker]?;
        let Phase::Picked {
            items,
            seen,
            claimed_seen,
            ..
        } = in_flight.phase
        else {
            return None;
        };
        if !self.heads {
            return None;
        }
        let mut next = state.clone();
        let mut locked = 0u8;
        let mut took = ItemSet(0);
        for item in items.items() {
            let row = state.rows[item];
            if let Some(group) = self.groups[item] {
                if self.group_locked(state, group, Some(worker)) {
                    next.last = Some(Event::GroupLockBusy);
                    continue;
                }
                locked |= 1 << group;
            }
            if self.claim(state, worker, item).is_none() {
                continue;
            }
            let pending = matches!(row.status, Status::Pending { .. });
            let passes = match self.sql {
                Sql::NoGroupRecheck => true,
                Sql::TakeCountsInPickSnapshot if self.groups[item].is_some() && pending => {
                    claimed_seen < self.per_group && !self.preceded(state, item)
                }
                _ => self.group_rule(state, item),
            };
            if !passes {
                next.last = Some(Event::GroupRecheckDropped);
                continue;
            }
            // The monitor of "first-claimed in claim order", judged when
            // `TAKE` writes.
            if self.groups[item].is_some() && pending && self.preceded(state, item) {
                next.out_of_order = true;
            }
            took.0 |= 1 << item;
        }
        next.picked[worker] = if took.0 == 0 && locked == 0 && in_flight.rows.0 == 0 {
            None
        } else {
            Some(InFlight {
                phase: Phase::Taken { took, locked, seen },
                ..in_flight
            })
        };
        Some(next)
    }

    /// `NORMALIZE` of `group`, written into `next` by a transaction that
    /// holds the group's lock and for which the items of `took` are claimed
    /// (its own `TAKE`): the group's first pending item in the claim order
    /// becomes its head (`behind` false), and every other pending item that
    /// is not behind becomes behind. Only the items of `visible` are seen
    /// (under [`Sql::NormalizeInPickSnapshot`], those pending in the pick's
    /// snapshot). Returns the events, a behind item made the head and a
    /// stale candidate retired, and the head if its row was updated.
    ///
    /// Under [`Sql::NormalizeSkipsLockedHead`] the updates take their rows
    /// `FOR UPDATE SKIP LOCKED`, and a row that another transaction holds
    /// locked (`skip`) is left as it is; the design's `NORMALIZE` updates
    /// the head whoever holds its row (it waits for it).
    fn normalize_group(
        &self,
        next: &mut State,
        group: Group,
        took: ItemSet,
        visible: ItemSet,
        skip: ItemSet,
    ) -> (bool, bool, Option<usize>) {
        let skip = if self.pick_locks() { skip.0 } else { 0 };
        let pending: Vec<usize> = (0..self.items)
            .filter(|&item| {
                self.groups[item] == Some(group)
                    && matches!(next.rows[item].status, Status::Pending { .. })
                    && took.0 & (1 << item) == 0
                    && visible.0 & (1 << item) != 0
            })
            .collect();
        let Some(&first) = pending.iter().min_by_key(|&&item| next.run_order[item]) else {
            return (false, false, None);
        };
        let mut made_head = false;
        let mut head = None;
        if skip & (1 << first) == 0 {
            made_head = next.behind[first];
            next.behind[first] = false;
            head = Some(first);
        }
        let mut retired = false;
        for &item in &pending {
            if item != first && !next.behind[item] && skip & (1 << item) == 0 {
                next.behind[item] = true;
                retired = true;
            }
        }
        (made_head, retired, head)
    }

    /// [`Action::Normalize`] (group heads): the claim's `NORMALIZE`, a new
    /// statement whose snapshot (`state`) is taken after its `TAKE`, for
    /// each group it served. Its writes are the claim's, uncommitted; the
    /// model makes them visible at once, which nothing can tell: the only
    /// readers of `behind` are the picks, whose claims cannot take an item
    /// of these groups before this claim commits (it holds their locks),
    /// and the statements that hold the group's lock, which cannot run
    /// until then. No step when the claim served no group.
    fn normalize(&self, state: &State, worker: usize) -> Option<State> {
        let in_flight = state.picked[worker]?;
        let Phase::Taken { took, locked, seen } = in_flight.phase else {
            return None;
        };
        let served = self.served(state, took);
        if served == 0 {
            return None;
        }
        let visible = if self.sql == Sql::NormalizeInPickSnapshot {
            seen
        } else {
            ItemSet((1 << ITEMS) - 1)
        };
        let mut next = state.clone();
        let others = Self::rows_locked_by_others(state, Some(worker));
        for group in (0..8).filter(|&group| served & (1 << group) != 0) {
            let (made_head, retired, head) =
                self.normalize_group(&mut next, group, took, visible, others);
            // A claim's `NORMALIZE` writes its group's head (`turn`) even
            // when it was a candidate already.
            if let (Some(cancel), Some(head)) = (&mut next.snapshot_cancel, head) {
                cancel.written.0 |= 1 << head;
            }
            if made_head {
                next.last = Some(Event::ClaimMadeHead);
            } else if retired {
                next.last = Some(Event::StaleRetired);
            }
        }
        next.picked[worker] = Some(InFlight {
            phase: Phase::Normalized { took, locked },
            ..in_flight
        });
        Some(next)
    }

    /// The commit of a claim with group heads: `TAKE`'s writes of `took`
    /// become visible ([`LeaseModel::claim`], on rows nobody could write
    /// since: they are locked), `NORMALIZE`'s are already, and the group
    /// locks are released (`next.picked[worker]` is gone already).
    fn commit_taken(&self, next: &mut State, worker: usize, took: ItemSet) {
        for item in took.items() {
            *next = self
                .claim(next, worker, item)
                .expect("a row TAKE wrote is locked to the commit");
        }
    }

    /// Gives `item`, just made pending (or inserted) with `retry` as its new
    /// `run_at`, its place among the pending and inserted items of its
    /// group. `run_at` is the clock plus a delay, so it is later than every
    /// due item's: `Now` (due at once) goes right behind those and ahead of
    /// every item not yet due; `Later` behind all; `Sooner` (not due) where
    /// `Now` goes. `First` (a past `run_at`) goes ahead of all, and `Kept`
    /// (a release's old `run_at`) among the due items. Nothing for an item
    /// in no group.
    fn place(&self, state: &mut State, item: usize, retry: Retry) {
        if self.groups[item].is_none() {
            return;
        }
        let mut order: Vec<usize> = self
            .peers(item)
            .filter(|&other| state.rows[other].status.in_order())
            .collect();
        order.sort_by_key(|&other| (state.run_order[other], other));
        let due = order
            .iter()
            .filter(|&&other| state.rows[other].status.due_in_order())
            .count();
        let at = match retry {
            Retry::Now | Retry::Sooner => due,
            Retry::Later => order.len(),
            Retry::First => 0,
            Retry::Kept(ahead) => usize::from(ahead).min(due),
        };
        order.insert(at, item);
        for (rank, &member) in order.iter().enumerate() {
            state.run_order[member] = u8::try_from(rank).expect("few items");
        }
    }

    /// Whether [`Retry::Sooner`] for `item` is a place of its own: `item` is
    /// in a group, and another pending (or inserted) item of it is not yet
    /// due.
    fn sooner_differs(&self, state: &State, item: usize) -> bool {
        self.peers(item).any(|other| {
            let status = state.rows[other].status;
            status.in_order() && !status.due_in_order()
        })
    }

    /// The `delay`, `retry_in` or `run_at` choices for `item`: `Sooner`
    /// only for an item in a group.
    fn delays(&self, item: usize) -> &'static [Retry] {
        if self.groups[item].is_some() {
            &[Retry::Now, Retry::Later, Retry::Sooner]
        } else if self.workflow() {
            &[Retry::Now]
        } else {
            &[Retry::Now, Retry::Later]
        }
    }

    /// The `delay` choices of `work_release` for `item`: for an item in a
    /// group, `'0'` keeps its `run_at`, which may be anywhere among the
    /// group's due items ([`Retry::Kept`]); in no group the place does not
    /// matter, and `'0'` is [`Retry::Now`].
    fn release_delays(&self, item: usize) -> &'static [Retry] {
        if self.groups[item].is_some() {
            &[
                Retry::Kept(0),
                Retry::Kept(1),
                Retry::Kept(2),
                Retry::Later,
                Retry::Sooner,
            ]
        } else if self.workflow() {
            &[Retry::Now]
        } else {
            &[Retry::Now, Retry::Later]
        }
    }

    /// Whether [`Retry::Kept`] for `item` is a place: no more due items of
    /// its group ahead of it than there are.
    fn kept_fits(&self, state: &State, item: usize, ahead: u8) -> bool {
        let due = self
            .peers(item)
            .filter(|&other| state.rows[other].status.due_in_order())
            .count();
        usize::from(ahead) <= due
    }

    /// Numbers each group's pending (and inserted) items 0, 1, ... in their
    /// claim order, and sets every other item's place to 0: two states that
    /// differ only in places nothing reads are one.
    fn order_renumbered(&self, mut state: State) -> State {
        let mut order: Vec<usize> = (0..ITEMS)
            .filter(|&item| self.groups[item].is_some() && state.rows[item].status.in_order())
            .collect();
        order.sort_by_key(|&item| (self.groups[item], state.run_order[item], item));
        state.run_order = [0; ITEMS];
        for (at, &item) in order.iter().enumerate() {
            let first = order
                .iter()
                .position(|&other| self.groups[other] == self.groups[item])
                .expect("the item itself");
            state.run_order[item] = u8::try_from(at - first).expect("few items");
        }
        state
    }

    /// `work_cancel`'s `CANCEL` (`src/verbs/cancel.rs`) of `item`: a pending or
    /// claimed item becomes `cancelled`, its `owner` and `epoch` stay and its
    /// lease ends. None (no step) for a done, failed or cancelled item.
    ///
    /// The history records, apart from the row, that every token handed out
    /// for the item so far is dead and that the item is cancelled.
    ///
    /// With group heads, after `CANCEL` a cancel of a grouped item takes
    /// its group's lock, waiting for the claim of the group that holds it
    /// (no step while one does), and normalizes the group in a snapshot
    /// taken after the lock was granted (`regroup` and `NORMALIZE` in
    /// `src/verbs/flow.rs`), which also makes the cancelled item not behind (so a
    /// `work_retry` brings it back a candidate). One step: nobody else
    /// writes the group's pending items while the lock is held, and
    /// `CANCEL`'s write (its row locked from `CANCEL` on) is seen by nobody
    /// before the commit.
    fn cancel(&self, state: &State, item: usize) -> Option<State> {
        let mut next = state.clone();
        match state.rows[item].status {
            Status::Pending { .. } => {}
            Status::Claimed(_) => {
                next.last = Some(Event::CancelledWhileClaimed { item });
            }
            Status::Waiting => {
                let history = &mut next.history[item];
                if !history.waiting {
                    next.left_twice = true;
                }
                history.waiting = false;
                history.reopened = false;
            }
            Status::Done
            | Status::Failed(_)
            | Status::Cancelled
            | Status::Unborn
            | Status::Inserted { .. } => return None,
        }
        next.rows[item].status = Status::Cancelled;
        let history = &mut next.history[item];
        history.revoked = history.newest;
        history.cancelled = true;
        history.taken_over = false;
        // Workflows: its edges end as a failure's do, in the cancel's
        // transaction.
        self.settle(&mut next, item, Ended::Failed, Settler::Untokened);
        if let Some(group) = self.groups[item].filter(|_| self.heads) {
            if self.group_locked(state, group, None) {
                return None;
            }
            if self.sql != Sql::CancelSkipsNormalize {
                let all = ItemSet((1 << ITEMS) - 1);
                let others = Self::rows_locked_by_others(state, None);
                if self
                    .normalize_group(&mut next, group, ItemSet(0), all, others)
                    .0
                {
                    next.last = Some(Event::CancelMadeHead);
                }
                next.behind[item] = false;
            }
        }
        Some(next)
    }

    /// [`Action::CancelBegin`] ([`Sql::CancelInTransactionSnapshot`]): the
    /// operator's REPEATABLE READ transaction takes its snapshot (`state`)
    /// before it cancels `item`, a grouped pending item.
    fn cancel_begin(&self, state: &State, item: usize) -> Option<State> {
        if self.sql != Sql::CancelInTransactionSnapshot
            || state.snapshot_cancel.is_some()
            || self.groups[item].is_none()
            || !matches!(state.rows[item].status, Status::Pending { .. })
        {
            return None;
        }
        let mut next = state.clone();
        next.snapshot_cancel = Some(SnapshotCancel {
            item,
            status: state.rows.map(|row| row.status),
            behind: state.behind,
            run_order: state.run_order,
            written: ItemSet(0),
        });
        Some(next)
    }

    /// [`Action::Cancel`] of the item a [`SnapshotCancel`] began on: once
    /// the group's lock is free, `CANCEL` and `NORMALIZE` read the group in
    /// the transaction's snapshot. A row they lock or write that another
    /// transaction wrote since the snapshot raises 40001, and the cancel
    /// rolls back (a step that changes nothing but ends it).
    fn cancel_in_snapshot(&self, state: &State, cancel: SnapshotCancel) -> Option<State> {
        let item = cancel.item;
        let group = self.groups[item]?;
        if self.group_locked(state, group, None) {
            return None;
        }
        let aborted = Some(State {
            snapshot_cancel: None,
            ..state.clone()
        });
        let written = |other: usize| cancel.written.0 & (1 << other) != 0;
        if written(item) {
            return aborted;
        }
        let mut next = State {
            snapshot_cancel: None,
            ..state.clone()
        };
        next.rows[item].status = Status::Cancelled;
        let history = &mut next.history[item];
        history.revoked = history.newest;
        history.cancelled = true;
        history.taken_over = false;
        // NORMALIZE, in the snapshot: the group's pending items there but
        // the cancelled one.
        let pending: Vec<usize> = (0..self.items)
            .filter(|&other| {
                other != item
                    && self.groups[other] == Some(group)
                    && matches!(cancel.status[other], Status::Pending { .. })
            })
            .collect();
        if let Some(&first) = pending.iter().min_by_key(|&&other| cancel.run_order[other]) {
            if cancel.behind[first] {
                if written(first) {
                    return aborted;
                }
                next.behind[first] = false;
            }
            for &other in &pending {
                if other != first && !cancel.behind[other] {
                    if written(other) {
                        return aborted;
                    }
                    next.behind[other] = true;
                }
            }
        }
        next.behind[item] = false;
        Some(next)
    }

    /// [`Action::Enqueue`]: the late item's `INSERT`, with `run_at`'s
    /// place in its group's order (`First`: ahead of every item; `Now`:
    /// due, behind the due items; `Later`: not due, behind all) and, with
    /// group heads, `behind` as the insert's snapshot (`state`) shows it:
    /// whether a pending item of its group comes before it. An enqueue in
    /// flight sees no other transaction's uncommitted writes (a claim's
    /// `TAKE`), and nobody sees its row.
    fn enqueue(&self, state: &State, item: usize, run_at: Retry) -> Option<State> {
        if self.late != Some(item) || state.rows[item].status != Status::Unborn {
            return None;
        }
        let mut next = state.clone();
        next.rows[item].status = Status::Inserted {
            due: matches!(run_at, Retry::First | Retry::Now),
        };
        self.place(&mut next, item, run_at);
        next.behind[item] = self.heads && self.preceded(&next, item);
        Some(next)
    }

    /// [`Action::EnqueueCommit`]: the enqueue's pre-commit
    /// (`VERIFY_BEHIND`) and commit. It tries its group's lock. Held by a
    /// claim in flight (which may not see this item: its `NORMALIZE` ran
    /// or runs in a snapshot without it), the item is made a candidate
    /// (a stale one, if it is not first: claims skip those). Got it, the
    /// item, if behind, is re-checked in a fresh snapshot (`state`, taken
    /// after the lock was granted: every claim that held it has committed)
    /// and made a candidate when no pending item comes before it any more;
    /// [`Sql::EnqueueSkipsRecheck`] keeps the insert's `behind`.
    fn enqueue_commit(&self, state: &State, item: usize) -> Option<State> {
        let Status::Inserted { due } = state.rows[item].status else {
            return None;
        };
        let mut next = state.clone();
        next.rows[item].status = Status::Pending { due };
        if self
            .peers(item)
            .any(|other| matches!(next.rows[other].status, Status::Pending { .. }))
            && !self.preceded(&next, item)
        {
            next.last = Some(Event::EnqueuedAhead);
        }
        if let Some(group) = self.groups[item].filter(|_| self.heads && state.behind[item]) {
            if self.group_locked(state, group, None) {
                next.behind[item] = false;
                next.last = Some(Event::EnqueueLockBusy);
            } else if self.sql != Sql::EnqueueSkipsRecheck && !self.preceded(&next, item) {
                next.behind[item] = false;
                next.last = Some(Event::EnqueueRecheckCleared);
            }
        }
        Some(next)
    }

    /// `work_retry`'s statement on `item`: a failed or cancelled item goes
    /// back to `pending` (due at once or later, by `run_at`), with
    /// `max_attempts` raised to `attempts + 1` if the attempts are used up;
    /// `owner`, `epoch` and `attempts` stay. None (no step) for any other
    /// state, and once the item has had its [`MAX_RETRIES`] retry.
    ///
    /// Workflows (`RETRY_LIFE`, then `workflow::forgiven` and
    /// `workflow::reopened`, `src/verbs/operate.rs`): an item with a parent
    /// that has not settled goes back to `waiting` instead, its edges from
    /// those parents unresolved again and `waiting_on` their number (the
    /// design: "waiting if some parent is still unsettled, else pending");
    /// the item's own edges are no longer `cancelled` (its parents'
    /// failures no longer cancel it: the operator's decision); and the
    /// children its failure cancelled come back ([`LeaseModel::reopen`]).
    /// [`Sql::RetryByCount`] judges by `waiting_on` as it stands.
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
            Status::Pending { .. }
            | Status::Claimed(_)
            | Status::Done
            | Status::Waiting
            | Status::Unborn
            | Status::Inserted { .. } => return None,
        };
        let mut next = state.clone();
        let row = &mut next.rows[item];
        row.status = if self.sql == Sql::RetryRestoresClaim
            && before.status == Status::Cancelled
            && before.epoch.is_some()
        {
            Status::Claimed(Lease::Live)
        } else {
            Status::Pending { due: run_at.due() }
        };
        if self.sql != Sql::RetryKeepsMaxAttempts {
            row.max_attempts = before.max_attempts.max(before.attempts + 1);
        }
        if matches!(row.status, Status::Pending { .. }) {
            self.place(&mut next, item, run_at);
        }
        let history = &mut next.history[item];
        history.revoked = history.newest;
        history.cancelled = false;
        history.retried = Some(retried);
        history.taken_over = false;
        if self.sql != Sql::RetryByCount {
            // Its edges from the parents that have not settled are
            // unresolved again, and counted.
            let unsettled = ItemSet(
                self.parents[item]
                    .items()
                    .filter(|&parent| !Self::settled(&next, parent))
                    .fold(0, |set, parent| set | 1 << parent),
            );
            next.resolved[item] = ItemSet(next.resolved[item].0 & !unsettled.0);
            next.waiting_on[item] = i8::try_from(unsettled.len()).expect("few parents");
        }
        if next.waiting_on[item] > 0 {
            next.rows[item].status = Status::Waiting;
            next.history[item].waiting = true;
        }
        if self.parents[item]
            .items()
            .any(|parent| Self::failed_or_cancelled(&next, parent))
        {
            next.history[item].overruled = true;
        }
        next.edge_cancelled[item] = ItemSet(0);
        self.reopen(&mut next, item);
        Some(next)
    }

    /// Whether `item` has settled: `done`, `failed` or `cancelled`.
    fn settled(state: &State, item: usize) -> bool {
        matches!(
            state.rows[item].status,
            Status::Done | Status::Failed(_) | Status::Cancelled
        )
    }

    /// Whether `item` has ended `failed` or `cancelled`.
    fn failed_or_cancelled(state: &State, item: usize) -> bool {
        matches!(
            state.rows[item].status,
            Status::Failed(_) | Status::Cancelled
        )
    }

    /// The workflow's part of a statement that has just ended `parent`
    /// (its row written in `next`), in that statement's transaction
    /// (`workflow::settled`, `src/verbs/workflow.rs`: `SETTLE`, and
    /// `SETTLE_DONE` for one parent done). Each edge from `parent` that is
    /// not resolved is resolved, once (`... AND NOT e.resolved`), and the
    /// child's `waiting_on` drops by one under its row lock. A parent that
    /// ended failed or cancelled marks the edge `cancelled` when it forbids
    /// the child: the child says `'cancel'` and is waiting, or a parent's
    /// failure has cancelled it already. Then a waiting child is cancelled
    /// if the edge is `cancelled` (its `last_error` names the parent), and
    /// that ends the child's own edges the same way, down the graph;
    /// otherwise a waiting child whose count reaches 0 becomes `pending` (a
    /// `'run'` child counts a failed parent as ended). A child that is not
    /// waiting keeps its state. Under [`Sql::ReleaseWithoutResolved`]
    /// every edge from the parent counts, resolved or not; under
    /// [`Sql::ReleaseIgnoresState`] a count reaching 0 makes the child
    /// `pending` whatever its state; under [`Sql::CancelMarksOneEdge`] an
    /// edge is `cancelled` only when it cancels a waiting child.
    ///
    /// A released child is `pending` and due. A child whose `run_at` is
    /// later would come due later, which [`Action::ComesDue`] does: a
    /// claim between the two would find nothing, a step that changes
    /// nothing.
    ///
    /// The monitors, judged by the ground truth: a child taken out of
    /// `waiting` that was in no time of waiting, or by a token that was not
    /// current; a child released while one of its parents never ended.
    fn settle(&self, next: &mut State, parent: usize, ended: Ended, settler: Settler) {
        let parent_ended = Self::settled(next, parent);
        for child in self.children(parent) {
            if parent_ended {
                let history = &mut next.history[child];
                history.parents_ended = history.parents_ended.with(parent);
            }
            if next.resolved[child].contains(parent) && self.sql != Sql::ReleaseWithoutResolved {
                continue;
            }
            next.resolved[child] = next.resolved[child].with(parent);
            next.waiting_on[child] -= 1;
            let waiting = next.rows[child].status == Status::Waiting;
            let forbids = ended == Ended::Failed
                && self.on_parent_failure == OnParentFailure::Cancel
                && (waiting
                    || (self.sql != Sql::CancelMarksOneEdge
                        && !next.edge_cancelled[child].is_empty()));
            if forbids {
                next.edge_cancelled[child] = next.edge_cancelled[child].with(parent);
            }
            let cancels = forbids && waiting;
            let releases = !forbids
                && next.waiting_on[child] <= 0
                && (waiting || self.sql == Sql::ReleaseIgnoresState);
            if !cancels && !releases {
                continue;
            }
            let history = &mut next.history[child];
            if !history.waiting {
                next.left_twice = true;
            }
            history.waiting = false;
            let reopened = std::mem::take(&mut history.reopened);
            if settler == (Settler::Token { current: false }) {
                next.stale_release = true;
            }
            if cancels {
                next.rows[child].status = Status::Cancelled;
                let history = &mut next.history[child];
                history.revoked = history.newest;
                history.cancelled = true;
                history.taken_over = false;
                self.settle(next, child, Ended::Failed, settler);
            } else {
                next.rows[child].status = Status::Pending { due: true };
                if next.history[child].parents_ended != self.parents[child] {
                    next.early_release = true;
                }
                if next.last.is_none() {
                    next.last = Some(Event::ChildReleased { child, reopened });
                }
            }
        }
    }

    /// The workflow's part of `work_retry` of `parent` (back to `pending`
    /// or `waiting` in `next`; `workflow::reopened`, `REOPEN`): each edge
    /// from it that its failure marked `cancelled` is unresolved again (and
    /// no longer `cancelled`), and the child's `waiting_on` rises by one; a
    /// cancelled child none of whose other edges is still `cancelled` (no
    /// other parent's failure forbids it) comes back to `waiting`, and so,
    /// level by level down the graph, do the children its cancellation
    /// cancelled.
    fn reopen(&self, next: &mut State, parent: usize) {
        for child in self.children(parent) {
            if !next.edge_cancelled[child].contains(parent) {
                continue;
            }
            next.edge_cancelled[child] = next.edge_cancelled[child].without(parent);
            next.resolved[child] = next.resolved[child].without(parent);
            next.waiting_on[child] += 1;
            if next.rows[child].status != Status::Cancelled
                || !next.edge_cancelled[child].is_empty()
            {
                continue;
            }
            next.rows[child].status = Status::Waiting;
            let history = &mut next.history[child];
            history.waiting = true;
            history.reopened = true;
            history.cancelled = false;
            history.taken_over = false;
            self.reopen(next, child);
        }
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
                    row.status = Status::Pending { due: retry.due() };
                    row.attempts = row.attempts.saturating_sub(1);
                    self.place(&mut next, item, retry);
                }
                matched
            }
            Stmt::Fail(retry) => {
                if matched {
                    row.status = if row.attempts >= row.max_attempts {
                        Status::Failed(FailedBy::WorkFail)
                    } else {
                        Status::Pending { due: retry.due() }
                    };
                    if matches!(row.status, Status::Pending { .. }) {
                        self.place(&mut next, item, retry);
                    }
                }
                matched
            }
        };
        // Workflows: an accepted finish, or a failure on the last attempt,
        // settles the parent's edges in the same transaction. Under
        // `Sql::ReleaseOnOwnerOnly` every finish with the row's owner name
        // settles them, whether or not `FINISH` matched.
        let settler = Settler::Token {
            current: state.is_current(item, epoch),
        };
        match stmt {
            Stmt::Finish
                if matched
                    || (self.sql == Sql::ReleaseOnOwnerOnly && before.owner == Some(owner)) =>
            {
                self.settle(&mut next, item, Ended::Done, settler);
            }
            Stmt::Fail(_) if matched && matches!(next.rows[item].status, Status::Failed(_)) => {
                self.settle(&mut next, item, Ended::Failed, settler);
            }
            Stmt::Renew | Stmt::Finish | Stmt::Release(_) | Stmt::Fail(_) => {}
        }
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
    /// No more items of a group than its `per_group` are claimed at once
    /// (1: serial groups), lapsed leases included.
    pub const GROUP_SERIAL: &str = "at most per_group items of a group are claimed";
    /// A claim takes a grouped pending item only when no other pending item
    /// of its group is ahead of it in the claim order (priority, run_at,
    /// id) at the moment it writes.
    pub const GROUP_IN_ORDER: &str =
        "a claim never takes a grouped item while another of its group is ahead of it";
    /// The contract's sentence on `concurrency`, literally (docs/contract.md,
    /// "Flow control (0.10.0)"): at most that many items of the queue in
    /// state `claimed` at once, lapsed leases included.
    pub const LIMIT_HELD: &str =
        "at most `concurrency` items claimed at once, a lapsed lease keeping its slot";
    /// What that gives a worker: never more items under unexpired leases
    /// than the limit, whatever claims and renews did (a renew of a lapsed
    /// lease included: [`super::a_renewed_lapsed_lease_stays_within_the_limit`]).
    pub const LIVE_WITHIN_LIMIT: &str =
        "never more items under unexpired leases than the limit, renews included";
    /// Issue 30; docs/contract.md and docs/reference.md, `work_pause`: from the
    /// pause's commit on, claims return nothing (and dead-letter nothing)
    /// until a resume; a claim that began before the commit may still
    /// return items.
    pub const PAUSED_CLAIMS_NOTHING: &str =
        "a claim that starts while its queue is paused claims nothing";
    /// Issue 33: every claimed item, lapsed leases included, is the `item`
    /// of a concurrency slot at or below the limit. A slot names one item,
    /// so no two claims hold one slot, and the limit follows: there are
    /// `concurrency` such slots.
    pub const SLOT_OF_ITS_OWN: &str =
        "every claimed item holds a slot of its own, a lapsed lease keeping its slot";
    /// Issue 30: "An operator verb changes only what it names": a pause and
    /// a resume change `paused`, and the queue's other settings (`grouped`,
    /// `concurrency`) survive them.
    pub const SETTINGS_SURVIVE: &str =
        "the queue's groups and limit survive every pause and resume";
    /// Group heads (issue 33, 0.12.0), the design's invariant: every group
    /// whose lock no transaction holds has its first pending item in claim
    /// order as a candidate (`behind` false). Every state with no
    /// transaction in flight is one of those. A group that breaks it is
    /// stranded: no claim picks its first item, so none ever normalizes it.
    pub const HEAD_IS_CANDIDATE: &str =
        "every group whose lock is free has its first pending item as a candidate";
    /// What that gives a worker: when no transaction holds a group's lock,
    /// its first pending item is due and the group has fewer than
    /// `per_group` items claimed, a claim that starts now may take it.
    pub const HEAD_CLAIMABLE: &str =
        "a group with room and a due first pending item offers it to the next claim";
    /// Group heads: only a pending (or inserted, uncommitted) item is ever
    /// behind: a claim, a cancel and a dead letter leave it a candidate, so
    /// a release, a failure with a retry or a `work_retry` brings it back
    /// one.
    pub const BEHIND_ONLY_PENDING: &str = "no item outside pending is behind";
    /// Workflows (issue 37), the issue's words: every item in state
    /// `waiting` has a parent that is not `done`, `failed` or `cancelled`,
    /// so a child never waits for nothing.
    pub const WAITING_ON_A_PARENT: &str = "a waiting item has a parent that has not settled";
    /// Workflows: `waiting_on` is what the design says it is, the number of
    /// the item's edges that are not resolved, and no parent of such an
    /// edge has settled: so the statement that settles its last parent
    /// finds it at 1, and releases it.
    pub const WAITING_ON_COUNTS_EDGES: &str =
        "waiting_on counts an item's unresolved edges, and their parents have not settled";
    /// Workflows, `on_parent_failure => 'cancel'`: a child in `waiting`
    /// has no parent `failed` or `cancelled` (a re-opened one only once
    /// every such parent was retried), and a child `pending`, `claimed` or
    /// `done` has every parent `done`, unless the operator's `work_retry`
    /// took the child back while a parent had failed
    /// ([`super::History::overruled`]).
    pub const CANCEL_CHILD_AFTER_DONE_PARENTS: &str =
        "a 'cancel' child waits only while no parent has failed, and runs only once every \
         parent is done, unless the operator retried it past a failed parent";
    /// Workflows: the step that makes a child `pending` from `waiting`
    /// comes after every parent has ended (done, failed or cancelled), by
    /// the parents' rows ([`super::History::parents_ended`]), whatever the
    /// edges say.
    pub const RELEASED_AFTER_EVERY_PARENT: &str =
        "a child is released only once every parent has ended";
    /// Workflows: no `work_finish` or `work_fail` whose token is not
    /// current (superseded, or its lease ended) releases or cancels a
    /// child; the state records it ([`super::State::stale_release`]).
    pub const NO_STALE_RELEASE: &str = "no token that is not current takes a child out of waiting";
    /// Workflows: every step that takes a child out of `waiting` (a
    /// release, a cancel) finds it in a time of waiting by the ground truth
    /// ([`super::History::waiting`]), which that step ends: one exit per
    /// entry (the insert, or a coming back).
    pub const LEFT_WAITING_ONCE: &str =
        "a child leaves waiting at most once per time it entered waiting";
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
    pub const ALL_DONE: &str = "every item done";
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
    /// Issue 17: the group's claimed item lapsed, and the next claim took it
    /// anew (another worker), not the item behind it.
    pub const GROUP_HANDED_OVER: &str =
        "a group's lapsed item claimed anew by another worker while the next one waits";
    /// Issue 17: a dead letter frees its group.
    pub const GROUP_FREED_BY_DEAD_LETTER: &str =
        "a group's item dead-lettered by a claim, then the next one claimed";
    /// Issue 17: a release or retryable failure sent the group's first item
    /// behind the second (a new `run_at`), and the second was claimed first.
    pub const GROUP_REORDERED: &str =
        "a group's second item claimed while its first waits behind it";
    /// Issue 17: two items in one claim, one of them grouped.
    pub const BATCH_OF_TWO: &str = "a batch claim takes two items, one per group";
    /// Issue 17: the race the group's re-check is there for.
    pub const GROUP_RECHECK_DROPPED: &str =
        "a claim's re-check drops a grouped item its snapshot picked and the row would allow";
    /// Issue 17: the limit reached, an item ready but for it.
    pub const LIMIT_REACHED: &str =
        "the limit reached while an item is ready to be claimed but for it";
    /// Issue 17: a lapsed lease kept its slot, and a claim took the item
    /// anew in it, the limit reached, while another item waits for a slot.
    pub const LAPSED_CLAIMED_IN_ITS_SLOT: &str =
        "a lapsed item claimed anew in its own slot while another waits for the limit";
    /// Issue 17: the holder of a lapsed lease renewed it, in the slot the
    /// lease kept, while another item waits for the limit (where a limit
    /// counting only unexpired leases would have let that item out).
    pub const LAPSED_RENEWED_AT_THE_LIMIT: &str =
        "a lapsed lease renewed by its holder while another item waits for the limit";
    /// Issue 33: `SKIP LOCKED` at work: a claim passed over the slot
    /// another claim holds, instead of waiting for it.
    pub const SLOT_SKIPPED: &str = "a claim's LOCK_SLOTS skips a free slot another claim holds";
    /// Issue 33: the race `VERIFY_SLOTS` is there for.
    pub const SLOT_RECHECK_DROPPED: &str =
        "a claim's VERIFY_SLOTS gives up a slot its LOCK_SLOTS locked, filled since its snapshot";
    /// Issue 33: the claims of a limited queue no longer take turns.
    pub const CLAIMED_BESIDE_ANOTHER: &str =
        "a claim of the limited queue takes an item while another claim of it is in flight";
    /// Issue 30: the claim docs/reference.md's `work_pause` allows.
    pub const CLAIMED_ACROSS_THE_PAUSE: &str =
        "a claim begun before a pause committed takes an item after it";
    /// Issue 30: a state where a resume that drops the groups goes wrong
    /// (the resume is a step from every paused state).
    pub const PAUSED_WHILE_THE_GROUP_WAITS: &str =
        "the queue paused while an item waits for its group";
    /// Issue 30: a state where a resume that drops the limit goes wrong.
    pub const PAUSED_WHILE_THE_LIMIT_WAITS: &str =
        "the queue paused while an item waits for the limit";
    /// Group heads: a candidate that is not its group's first pending item
    /// (a release's, or an enqueue's that found the lock busy).
    pub const STALE_CANDIDATE: &str = "a pending item that is not first is a candidate";
    /// Group heads: a claim's `NORMALIZE` made the next item the head.
    pub const CLAIM_MADE_HEAD: &str = "a claim's NORMALIZE makes a behind item the head";
    /// Group heads: `NORMALIZE` set a stale candidate behind.
    pub const STALE_RETIRED: &str = "a NORMALIZE sets a stale candidate behind";
    /// Group heads: a cancel's `NORMALIZE` made the next item the head.
    pub const CANCEL_MADE_HEAD: &str =
        "a cancel of a group's head makes the item behind it the head";
    /// Group heads: a claim's `TAKE` passed over a group whose lock another
    /// claim held.
    pub const GROUP_LOCK_BUSY: &str = "a claim passes over a group another claim holds";
    /// Group heads: the enqueue's pre-commit found the group's lock held
    /// and made its item a candidate.
    pub const ENQUEUE_LOCK_BUSY: &str =
        "an enqueue's pre-commit finds its group's lock held and clears behind";
    /// Group heads: the race `VERIFY_BEHIND` is there for: the item before
    /// the enqueued one was claimed after the insert's snapshot, and the
    /// claim's `NORMALIZE` did not see the enqueued item.
    pub const ENQUEUE_RECHECK_CLEARED: &str =
        "an enqueue's re-check clears behind that its insert's snapshot set";
    /// Group heads: the late item enqueued ahead of the group's head, which
    /// stays a candidate (stale), while the group has room.
    pub const ENQUEUED_AHEAD: &str =
        "an item enqueued ahead of its group's head is the group's candidate to claim";
    /// `per_group` 2: two items of the group claimed at once while a third
    /// waits for the group.
    pub const GROUP_FULL_AT_TWO: &str =
        "two items of a group claimed at once while a third waits for the group";
    /// Workflows: the workflow's purpose, a child run after its parents.
    pub const CHILD_RELEASED_DONE: &str = "a child is done after every parent was done";
    /// Workflows: the bug report's scenario on a parent, with the child
    /// released by the finish that was accepted.
    pub const ZOMBIE_REFUSED_AFTER_RELEASE: &str =
        "a zombie's finish of a parent is refused after the worker that took it over \
         finished it and its child was released";
    /// Workflows, `'cancel'`.
    pub const FAILED_PARENT_CANCELLED_CHILD: &str = "a parent that failed has cancelled its child";
    /// Workflows, `'cancel'`.
    pub const REOPENED_CHILD_RELEASED: &str =
        "a child that a retried parent brought back to waiting is released";
    /// Workflows, `'run'`.
    pub const RUN_AFTER_A_FAILED_PARENT: &str = "a 'run' child runs after a parent failed";
    /// Workflows, a chain of `'cancel'` children.
    pub const CANCELLED_DOWN_THE_CHAIN: &str =
        "a parent that failed has cancelled its child and, through it, its grandchild";
    /// Workflows, a chain of `'cancel'` children.
    pub const REOPENED_DOWN_THE_CHAIN: &str =
        "a retried parent has brought back its child and its grandchild";
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut enqueued = State {
            rows: std::array::from_fn(|item| {
                if item >= self.items || self.late == Some(item) {
                    Row::UNBORN
                } else {
                    Row::ENQUEUED
                }
            }),
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
            // Enqueued in id order: each group's items in that claim order.
            run_order: [0, 1, 2],
            picked: [None; WORKERS],
            slots: [None; SLOTS],
            out_of_order: false,
            queue: self.queue_at_start(),
            pausing: false,
            paused_claimed: false,
            behind: [false; ITEMS],
            snapshot_cancel: None,
            waiting_on: [0; ITEMS],
            resolved: [ItemSet(0); ITEMS],
            edge_cancelled: [ItemSet(0); ITEMS],
            stale_release: false,
            early_release: false,
            left_twice: false,
        };
        // Workflows: each child is inserted after its parents, all pending
        // then, so it is `waiting` on every one of them.
        for child in 0..self.items {
            let parents = self.parents[child];
            if !parents.is_empty() {
                enqueued.rows[child].status = Status::Waiting;
                enqueued.waiting_on[child] = i8::try_from(parents.len()).expect("few parents");
                enqueued.history[child].waiting = true;
            }
        }
        // Each item's enqueue saw the items enqueued before it pending: with
        // group heads, all but a group's first are behind (and stay so
        // through their pre-commits' re-checks).
        if self.heads {
            enqueued.behind = std::array::from_fn(|item| {
                matches!(enqueued.rows[item].status, Status::Pending { .. })
                    && self.preceded(&enqueued, item)
            });
        }
        vec![self.order_renumbered(enqueued)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // What a claim that starts now reads: the flow path, the plain one,
        // or nothing (paused).
        let seen = self.settings_seen(state);
        let flow_path = seen.is_some_and(QueueRow::flow);
        let plain_path = seen.is_some_and(|seen| !seen.flow());
        for worker in 0..self.workers {
            match state.picked[worker].map(|in_flight| in_flight.phase) {
                Some(Phase::Begun { .. }) => {
                    for items in 0..1u8 << self.items {
                        actions.push(Action::Pick {
                            worker,
                            items: ItemSet(items),
                        });
                    }
                }
                Some(Phase::Picked { .. }) if self.heads => actions.push(Action::Take { worker }),
                Some(Phase::Picked { .. } | Phase::Normalized { .. }) => {
                    actions.push(Action::Commit { worker });
                }
                Some(Phase::Taken { .. }) => {
                    actions.push(Action::Normalize { worker });
                    actions.push(Action::Commit { worker });
                }
                None if flow_path && seen.is_some_and(|seen| seen.concurrency.is_some()) => {
                    actions.push(Action::Begin { worker });
                }
                None if flow_path && self.pick_locks() => {
                    actions.push(Action::Snapshot { worker });
                }
                Some(Phase::Snapped { .. }) => {
                    for items in 0..1u8 << self.items {
                        actions.push(Action::Pick {
                            worker,
                            items: ItemSet(items),
                        });
                    }
                }
                None if flow_path => {
                    for items in 1..1u8 << self.items {
                        actions.push(Action::Pick {
                            worker,
                            items: ItemSet(items),
                        });
                    }
                }
                None => {}
            }
        }
        if self.failover && !state.failed_over {
            actions.push(Action::Replicate);
            if state.replica.is_some() {
                actions.push(Action::LoseSuffix);
            }
        }
        if self.pauses {
            actions.push(if state.pausing {
                Action::PauseReleased
            } else if state.queue.paused {
                Action::Resume
            } else {
                Action::Pause
            });
        }
        if let Some(item) = self.late {
            match state.rows[item].status {
                Status::Unborn => {
                    for run_at in [Retry::First, Retry::Now, Retry::Later] {
                        actions.push(Action::Enqueue { item, run_at });
                    }
                }
                Status::Inserted { .. } => actions.push(Action::EnqueueCommit { item }),
                _ => {}
            }
        }
        for item in 0..self.items {
            if self.operators {
                actions.push(Action::Cancel { item });
            }
            if self.operators && self.sql == Sql::CancelInTransactionSnapshot {
                actions.push(Action::CancelBegin { item });
            }
            if self.operators && self.retries && (self.retry_leaves || self.is_parent(item)) {
                for &run_at in self.delays(item) {
                    actions.push(Action::Retry { item, run_at });
                }
            }
            match state.rows[item].status {
                Status::Claimed(Lease::Live) => actions.push(Action::LeaseLapses { item }),
                Status::Pending { due: false } | Status::Inserted { due: false } => {
                    actions.push(Action::ComesDue { item });
                }
                _ => {}
            }
            for worker in 0..self.workers {
                if plain_path {
                    actions.push(Action::Claim { worker, item });
                }
                if state.tokens[worker][item].is_none() {
                    continue;
                }
                actions.push(Action::Renew { worker, item });
                actions.push(Action::Finish { worker, item });
                for &retry in self.release_delays(item) {
                    actions.push(Action::Release {
                        worker,
                        item,
                        retry,
                    });
                }
                for &retry in self.delays(item) {
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
        if let Action::Release {
            item,
            retry: Retry::Sooner,
            ..
        }
        | Action::Fail {
            item,
            retry: Retry::Sooner,
            ..
        }
        | Action::Retry {
            item,
            run_at: Retry::Sooner,
        } = action
        {
            if !self.sooner_differs(state, item) {
                return None;
            }
        }
        if let Action::Release {
            item,
            retry: Retry::Kept(ahead),
            ..
        } = action
        {
            if !self.kept_fits(state, item, ahead) {
                return None;
            }
        }
        // A row a claim's `TAKE` wrote is locked to that claim's commit:
        // every statement that would write it waits (a plain claim's
        // `FOR UPDATE SKIP LOCKED` skips it).
        if let Action::Claim { item, .. }
        | Action::Renew { item, .. }
        | Action::Finish { item, .. }
        | Action::Release { item, .. }
        | Action::Fail { item, .. }
        | Action::Cancel { item }
        | Action::Retry { item, .. } = action
        {
            if Self::row_locked(state, item) {
                return None;
            }
        }
        let next = match action {
            Action::Claim { worker, item } => self.plain_claim(state, worker, item),
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
            Action::Cancel { item } => match state.snapshot_cancel {
                Some(cancel) if cancel.item == item => self.cancel_in_snapshot(state, cancel),
                _ => self.cancel(state, item),
            },
            Action::CancelBegin { item } => self.cancel_begin(state, item),
            Action::Retry { item, run_at } => self.retry(state, item, run_at),
            Action::Begin { worker } => self.begin(state, worker),
            Action::Pick { worker, items } => self.pick(state, worker, items),
            Action::Commit { worker } => self.commit(state, worker),
            Action::Take { worker } => self.take(state, worker),
            Action::Snapshot { worker } => self.snapshot(state, worker),
            Action::Normalize { worker } => self.normalize(state, worker),
            Action::Enqueue { item, run_at } => self.enqueue(state, item, run_at),
            Action::EnqueueCommit { item } => self.enqueue_commit(state, item),
            Action::LeaseLapses { item } => {
                let mut next = state.clone();
                next.rows[item].status = Status::Claimed(Lease::Lapsed);
                Some(next)
            }
            // Within a group, `run_at`s are reached in their order: an item
            // comes due only once every pending item ahead of it has.
            Action::ComesDue { item }
                if self.peers(item).any(|other| {
                    let status = state.rows[other].status;
                    status.in_order()
                        && !status.due_in_order()
                        && state.run_order[other] < state.run_order[item]
                }) =>
            {
                None
            }
            Action::ComesDue { item } => {
                let mut next = state.clone();
                next.rows[item].status = match state.rows[item].status {
                    Status::Inserted { due: false } => Status::Inserted { due: true },
                    _ => Status::Pending { due: true },
                };
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
            Action::Pause if self.pauses && !state.queue.paused => {
                let mut next = state.clone();
                next.queue.paused = true;
                next.pausing = true;
                Some(next)
            }
            Action::Pause => None,
            Action::PauseReleased => state.pausing.then(|| State {
                pausing: false,
                ..state.clone()
            }),
            Action::Resume if self.pauses && state.queue.paused && !state.pausing => {
                let mut next = state.clone();
                next.queue = match self.sql {
                    // 0.11.0: `DELETE FROM workfence.queues ... WHERE
                    // q.paused`, the whole row.
                    Sql::ResumeDeletesRow => QueueRow::default(),
                    // `RESUME` sets `paused = false` and nothing else;
                    // `PRUNE` deletes the row only when no setting is left,
                    // which reads as the same settings.
                    _ => QueueRow {
                        paused: false,
                        ..state.queue
                    },
                };
                Some(next)
            }
            Action::Resume => None,
        };
        next.map(|next| {
            let mut next = if self.lean {
                Self::forgotten(next)
            } else if self.workflow() {
                self.others_forgotten(next)
            } else {
                next
            };
            // What a cancel in flight on its snapshot will find written.
            if let (Some(cancel), Some(_)) = (&mut next.snapshot_cancel, state.snapshot_cancel) {
                for item in 0..ITEMS {
                    if next.rows[item] != state.rows[item]
                        || next.behind[item] != state.behind[item]
                    {
                        cancel.written.0 |= 1 << item;
                    }
                }
            }
            let next = self.order_renumbered(next.renumbered().slots_forgotten());
            if self.symmetry && self.pauses {
                self.window_folded(next).workers_sorted(self.workers)
            } else if self.symmetry {
                next.workers_sorted(self.workers)
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
        if self.flow {
            properties.extend([
                Property::always(always::GROUP_SERIAL, |model: &LeaseModel, s: &State| {
                    (0..model.items).all(|item| {
                        model.groups[item].is_none_or(|group| {
                            model.claimed_in(s, group) <= usize::from(model.per_group)
                        })
                    })
                }),
                Property::always(always::GROUP_IN_ORDER, |_, s: &State| !s.out_of_order),
            ]);
        }
        if self.heads {
            properties.extend([
                Property::always(
                    always::HEAD_IS_CANDIDATE,
                    |model: &LeaseModel, s: &State| {
                        model.heads_free(s).all(|first| !s.behind[first])
                    },
                ),
                Property::always(always::HEAD_CLAIMABLE, |model: &LeaseModel, s: &State| {
                    model.heads_free(s).all(|first| {
                        s.rows[first].status != (Status::Pending { due: true })
                            || model.group_full(s, first)
                            || model.offered(s, first)
                    })
                }),
                Property::always(always::BEHIND_ONLY_PENDING, |_, s: &State| {
                    (0..ITEMS).all(|item| !s.behind[item] || s.rows[item].status.in_order())
                }),
                Property::sometimes(
                    sometimes::STALE_CANDIDATE,
                    |model: &LeaseModel, s: &State| {
                        (0..model.items).any(|item| {
                            matches!(s.rows[item].status, Status::Pending { .. })
                                && !s.behind[item]
                                && model.preceded(s, item)
                        })
                    },
                ),
                Property::sometimes(sometimes::CLAIM_MADE_HEAD, |_, s: &State| {
                    s.last == Some(Event::ClaimMadeHead)
                }),
                Property::sometimes(sometimes::CANCEL_MADE_HEAD, |_, s: &State| {
                    s.last == Some(Event::CancelMadeHead)
                }),
                Property::sometimes(sometimes::GROUP_LOCK_BUSY, |_, s: &State| {
                    s.last == Some(Event::GroupLockBusy)
                }),
            ]);
        }
        if let Some(late) = self.late {
            properties.extend([
                // Takes a group of three: in a group of two the only item
                // pending besides the one a claim takes or a cancel ends is
                // the first.
                Property::sometimes(sometimes::STALE_RETIRED, |_, s: &State| {
                    s.last == Some(Event::StaleRetired)
                }),
                Property::sometimes(sometimes::ENQUEUE_LOCK_BUSY, |_, s: &State| {
                    s.last == Some(Event::EnqueueLockBusy)
                }),
                Property::sometimes(sometimes::ENQUEUE_RECHECK_CLEARED, |_, s: &State| {
                    s.last == Some(Event::EnqueueRecheckCleared)
                }),
            ]);
            properties.push(Property::sometimes(
                sometimes::ENQUEUED_AHEAD,
                |model: &LeaseModel, s: &State| {
                    s.last == Some(Event::EnqueuedAhead)
                        && model.late.is_some_and(|late| {
                            model.heads_free(s).any(|first| first == late)
                                && model.claimed_in(s, 0) < usize::from(model.per_group)
                        })
                },
            ));
            assert_eq!(late, LATE_ITEM);
        }
        if self.heads && self.per_group == 2 {
            properties.push(Property::sometimes(
                sometimes::GROUP_FULL_AT_TWO,
                |model: &LeaseModel, s: &State| model.waits_for_its_group(s) && s.claimed() == 2,
            ));
        }
        if self.limit.is_some() {
            properties.extend([
                Property::always(always::LIMIT_HELD, |model: &LeaseModel, s: &State| {
                    model.limit.is_none_or(|n| s.claimed() <= usize::from(n))
                }),
                Property::always(
                    always::LIVE_WITHIN_LIMIT,
                    |model: &LeaseModel, s: &State| {
                        model.limit.is_none_or(|n| s.live() <= usize::from(n))
                    },
                ),
                Property::always(always::SLOT_OF_ITS_OWN, |model: &LeaseModel, s: &State| {
                    (0..model.items).all(|item| {
                        !matches!(s.rows[item].status, Status::Claimed(_))
                            || model.limit_slots().any(|slot| s.slots[slot] == Some(item))
                    })
                }),
            ]);
        }
        // Reachable in every configuration.
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
            // Two items, and an operator that cancels (and retries, below,
            // where the configuration has it).
            properties.extend([
                Property::sometimes(sometimes::ALL_DONE, |model: &LeaseModel, s: &State| {
                    s.rows[..model.items]
                        .iter()
                        .all(|row| row.status == Status::Done)
                }),
                Property::sometimes(sometimes::CANCELLED_HOLDER_REFUSED, |_, s: &State| {
                    s.last == Some(Event::CancelledHolderRefused)
                }),
            ]);
        }
        if !self.failover && self.retries {
            properties.extend([
                Property::sometimes(sometimes::DEAD_LETTER_RETRIED_DONE, |_, s: &State| {
                    s.rows.iter().zip(&s.history).any(|(row, history)| {
                        history.retried == Some(RetriedFrom::DeadLetter)
                            && row.status == Status::Done
                    })
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
        if self.flow && self.group_of_two() {
            properties.extend([
                Property::sometimes(
                    sometimes::GROUP_HANDED_OVER,
                    |model: &LeaseModel, s: &State| {
                        (0..model.items).any(|item| {
                            model.groups[item].is_some()
                                && matches!(s.rows[item].status, Status::Claimed(_))
                                && s.history[item].taken_over
                                && model.peers(item).any(|other| {
                                    matches!(s.rows[other].status, Status::Pending { .. })
                                })
                        })
                    },
                ),
                Property::sometimes(
                    sometimes::GROUP_FREED_BY_DEAD_LETTER,
                    |model: &LeaseModel, s: &State| {
                        (0..model.items).any(|item| {
                            model.groups[item].is_some()
                                && s.rows[item].status
                                    == Status::Failed(FailedBy::LapsedOnFinalAttempt)
                                && model
                                    .peers(item)
                                    .any(|other| matches!(s.rows[other].status, Status::Claimed(_)))
                        })
                    },
                ),
                Property::sometimes(
                    sometimes::GROUP_REORDERED,
                    |model: &LeaseModel, s: &State| {
                        (0..model.items).any(|first| {
                            matches!(s.rows[first].status, Status::Pending { .. })
                                && model.peers(first).any(|second| {
                                    second > first
                                        && matches!(s.rows[second].status, Status::Claimed(_))
                                })
                        })
                    },
                ),
                Property::sometimes(sometimes::GROUP_RECHECK_DROPPED, |_, s: &State| {
                    s.last == Some(Event::GroupRecheckDropped)
                }),
            ]);
        }
        if self.flow {
            if self.limit.is_some() {
                properties.extend([
                    Property::sometimes(sometimes::LIMIT_REACHED, |model: &LeaseModel, s| {
                        model.waits_for_the_limit(s)
                    }),
                    Property::sometimes(
                        sometimes::LAPSED_CLAIMED_IN_ITS_SLOT,
                        |model: &LeaseModel, s: &State| {
                            s.last == Some(Event::LapsedClaimedInItsSlot)
                                && model.waits_for_the_limit(s)
                        },
                    ),
                    Property::sometimes(
                        sometimes::LAPSED_RENEWED_AT_THE_LIMIT,
                        |model: &LeaseModel, s: &State| {
                            s.last == Some(Event::LapsedLeaseRenewed)
                                && model.waits_for_the_limit(s)
                        },
                    ),
                    Property::sometimes(sometimes::SLOT_SKIPPED, |_, s: &State| {
                        s.last == Some(Event::SlotSkipped)
                    }),
                    Property::sometimes(sometimes::SLOT_RECHECK_DROPPED, |_, s: &State| {
                        s.last == Some(Event::SlotRecheckDropped)
                    }),
                    Property::sometimes(sometimes::CLAIMED_BESIDE_ANOTHER, |_, s: &State| {
                        s.last == Some(Event::ClaimedBesideAnother)
                    }),
                ]);
            } else if !self.group_of_two() {
                properties.push(Property::sometimes(
                    sometimes::BATCH_OF_TWO,
                    |_, s: &State| s.last == Some(Event::BatchOfTwo),
                ));
            }
        }
        if self.lean {
            // What needs stale tokens, attempts or a long history, which a
            // lean configuration forgets.
            let kept_only_in_full = [
                sometimes::TAKEN_OVER_STALE_REFUSED_DONE,
                sometimes::STALE_FINISH_REFUSED,
                sometimes::FINISH_REPEATED,
                sometimes::BACK_TO_PENDING,
                sometimes::CANCELLED_HOLDER_REFUSED,
                sometimes::GROUP_HANDED_OVER,
            ];
            properties.retain(|property| !kept_only_in_full.contains(&property.name));
        }
        if self.pauses {
            properties.extend([
                Property::always(always::PAUSED_CLAIMS_NOTHING, |_, s: &State| {
                    !s.paused_claimed
                }),
                Property::always(always::SETTINGS_SURVIVE, |model: &LeaseModel, s| {
                    QueueRow {
                        paused: false,
                        ..s.queue
                    } == model.queue_at_start()
                }),
                Property::sometimes(sometimes::CLAIMED_ACROSS_THE_PAUSE, |_, s: &State| {
                    s.last == Some(Event::ClaimedAcrossThePause)
                }),
            ]);
            if self.group_of_two() {
                properties.push(Property::sometimes(
                    sometimes::PAUSED_WHILE_THE_GROUP_WAITS,
                    |model: &LeaseModel, s: &State| {
                        s.queue.paused && !s.pausing && model.waits_for_its_group(s)
                    },
                ));
            }
            if self.limit.is_some() {
                properties.push(Property::sometimes(
                    sometimes::PAUSED_WHILE_THE_LIMIT_WAITS,
                    |model: &LeaseModel, s: &State| {
                        s.queue.paused && !s.pausing && model.waits_for_the_limit(s)
                    },
                ));
            }
        }
        if self.workflow() {
            self.workflow_properties(&mut properties);
        }
        properties
    }
}

impl LeaseModel {
    /// The workflow configurations' properties (issue 37).
    fn workflow_properties(&self, properties: &mut Vec<Property<Self>>) {
        properties.extend([
            Property::always(
                always::WAITING_ON_A_PARENT,
                |model: &LeaseModel, s: &State| {
                    (0..ITEMS).all(|child| {
                        s.rows[child].status != Status::Waiting
                            || model.parents[child]
                                .items()
                                .any(|parent| !Self::settled(s, parent))
                    })
                },
            ),
            Property::always(
                always::WAITING_ON_COUNTS_EDGES,
                |model: &LeaseModel, s: &State| {
                    (0..ITEMS).all(|child| {
                        let unresolved = ItemSet(model.parents[child].0 & !s.resolved[child].0);
                        i8::try_from(unresolved.len()).ok() == Some(s.waiting_on[child])
                            && unresolved.items().all(|parent| !Self::settled(s, parent))
                    })
                },
            ),
            Property::always(always::RELEASED_AFTER_EVERY_PARENT, |_, s: &State| {
                !s.early_release
            }),
            Property::always(always::NO_STALE_RELEASE, |_, s: &State| !s.stale_release),
            Property::always(always::LEFT_WAITING_ONCE, |_, s: &State| !s.left_twice),
            Property::sometimes(
                sometimes::CHILD_RELEASED_DONE,
                |model: &LeaseModel, s: &State| {
                    (0..ITEMS).any(|child| {
                        !model.parents[child].is_empty()
                            && s.rows[child].status == Status::Done
                            && model.parents[child]
                                .items()
                                .all(|parent| s.rows[parent].status == Status::Done)
                    })
                },
            ),
            Property::sometimes(
                sometimes::ZOMBIE_REFUSED_AFTER_RELEASE,
                |model: &LeaseModel, s: &State| {
                    matches!(s.last, Some(Event::StaleFinishRefused { item })
                    if s.rows[item].status == Status::Done
                        && s.history[item].taken_over
                        && model.children(item).any(|child| !matches!(
                            s.rows[child].status,
                            Status::Waiting | Status::Cancelled
                        )))
                },
            ),
        ]);
        match self.on_parent_failure {
            OnParentFailure::Cancel => properties.extend([
                Property::always(
                    always::CANCEL_CHILD_AFTER_DONE_PARENTS,
                    |model: &LeaseModel, s: &State| {
                        (0..ITEMS).all(|child| {
                            let mut parents = model.parents[child].items();
                            s.history[child].overruled
                                || match s.rows[child].status {
                                    Status::Waiting => {
                                        !parents.any(|parent| Self::failed_or_cancelled(s, parent))
                                    }
                                    Status::Pending { .. } | Status::Claimed(_) | Status::Done => {
                                        parents.all(|parent| s.rows[parent].status == Status::Done)
                                    }
                                    Status::Failed(_)
                                    | Status::Cancelled
                                    | Status::Unborn
                                    | Status::Inserted { .. } => true,
                                }
                        })
                    },
                ),
                Property::sometimes(sometimes::FAILED_PARENT_CANCELLED_CHILD, |_, s: &State| {
                    (0..ITEMS).any(|child| {
                        s.rows[child].status == Status::Cancelled
                            && s.edge_cancelled[child]
                                .items()
                                .any(|parent| matches!(s.rows[parent].status, Status::Failed(_)))
                    })
                }),
                Property::sometimes(sometimes::REOPENED_CHILD_RELEASED, |_, s: &State| {
                    matches!(s.last, Some(Event::ChildReleased { reopened: true, .. }))
                }),
            ]),
            OnParentFailure::Run => properties.push(Property::sometimes(
                sometimes::RUN_AFTER_A_FAILED_PARENT,
                |model: &LeaseModel, s: &State| {
                    (0..ITEMS).any(|child| {
                        matches!(s.rows[child].status, Status::Claimed(_) | Status::Done)
                            && !s.history[child].overruled
                            && model.parents[child]
                                .items()
                                .any(|parent| matches!(s.rows[parent].status, Status::Failed(_)))
                    })
                },
            )),
        }
        let chain = (0..ITEMS).any(|child| {
            self.parents[child]
                .items()
                .any(|parent| !self.parents[parent].is_empty())
        });
        if chain && self.on_parent_failure == OnParentFailure::Cancel {
            properties.extend([
                Property::sometimes(sometimes::CANCELLED_DOWN_THE_CHAIN, |_, s: &State| {
                    (0..ITEMS).any(|grandchild| {
                        s.rows[grandchild].status == Status::Cancelled
                            && s.edge_cancelled[grandchild].items().any(|child| {
                                s.rows[child].status == Status::Cancelled
                                    && s.edge_cancelled[child].items().any(|parent| {
                                        matches!(s.rows[parent].status, Status::Failed(_))
                                    })
                            })
                    })
                }),
                Property::sometimes(
                    sometimes::REOPENED_DOWN_THE_CHAIN,
                    |model: &LeaseModel, s: &State| {
                        (0..ITEMS).any(|grandchild| {
                            s.rows[grandchild].status == Status::Waiting
                                && s.history[grandchild].reopened
                                && model.parents[grandchild].items().any(|child| {
                                    s.rows[child].status == Status::Waiting
                                        && s.history[child].reopened
                                })
                        })
                    },
                ),
            ]);
        }
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

/// Issue 17's groups: two items in one group, with 0.12.0's group heads:
/// claims in four steps (pick from a snapshot, then lock and `TAKE`,
/// `NORMALIZE`, commit), two workers, the operator's cancel (which
/// normalizes the group), and (issue 30) the operator's pause and resume at
/// any moment. Every `always` property holds (the group's: one claimed item
/// at a time, claims in the group's order, the group's first pending item a
/// candidate whenever its lock is free; the pause's: a claim that starts
/// while the queue is paused claims nothing, and the queue stays grouped
/// through every pause and resume; and every fencing property as before),
/// and every `sometimes` property is reached, among them a hand-over after
/// a lapse, the re-check dropping an item its snapshot picked, a claim
/// begun before a pause writing after it, and the queue paused while an
/// item waits for its group (a resume is a step from there).
#[test]
fn flow_control_holds_in_a_group() {
    check_exhaustively(
        "flow control, one group of two, pause and resume",
        LeaseModel::new(Sql::Extension)
            .with_flow(ONE_GROUP, None)
            .with_pauses()
            .with_symmetry(),
    );
}

/// Issue 17 with an item in a group and one in none, no limit: as
/// [`flow_control_holds_in_a_group`], with batch claims that take both.
#[test]
fn flow_control_holds_with_batches() {
    check_exhaustively(
        "flow control, a group and an item in none",
        LeaseModel::new(Sql::Extension)
            .with_flow(GROUP_AND_NONE, None)
            .with_symmetry(),
    );
}

/// Issue 17 with `work_limit(concurrency => 1)` over an item in a group and
/// one in none, its claims taking the slot (issue 33), and (issue 30) the
/// operator's pause and resume at any moment: every claimed item holds the
/// slot, lapsed leases included, so never more than one item claimed and
/// never more than one lease unexpired, renews included; the limit is
/// reached while an item is ready, and meanwhile a lapsed item is claimed
/// anew in its own slot or renewed by its holder; a claim's scan skips the
/// slot another claim holds, its `VERIFY_SLOTS` gives up a slot filled
/// since its snapshot, and a claim takes an item while another is in
/// flight; a claim that starts while the queue is paused claims nothing,
/// the limit survives every pause and resume, and the queue is paused while
/// an item waits for the limit (a resume is a step from there).
#[test]
fn flow_control_holds_under_a_limit() {
    check_exhaustively(
        "flow control, a group and an item in none, limit 1, pause and resume",
        LeaseModel::new(Sql::Extension)
            .with_flow(GROUP_AND_NONE, Some(LIMIT))
            .with_pauses()
            .with_symmetry(),
    );
}

/// Group heads (issue 33, 0.12.0) with serial groups: three items in one
/// group, the third enqueued by a producer during the run (its insert and
/// its pre-commit two steps, between which anything may happen), claims in
/// four steps (pick from a snapshot, group lock and `TAKE`, `NORMALIZE`,
/// commit), three workers and the operator's cancel. Every `always`
/// property holds, the design's invariant among them (every group whose
/// lock is free has its first pending item as a candidate), and every
/// `sometimes` property is reached.
#[test]
fn group_heads_hold_in_a_group_of_three() {
    check_exhaustively(
        "group heads, a group of three, per_group 1, a late enqueue",
        LeaseModel::new(Sql::Extension)
            .with_group_of_three(1, 3)
            .with_symmetry(),
    );
}

/// Group heads with `per_group => 2`: as
/// [`group_heads_hold_in_a_group_of_three`], with two items of the group
/// out at once and the third waiting for the group, and two workers (with
/// three, 902,294 states and 21 s, which passed too).
#[test]
fn group_heads_hold_with_two_per_group() {
    check_exhaustively(
        "group heads, a group of three, per_group 2, a late enqueue",
        LeaseModel::new(Sql::Extension)
            .with_group_of_three(2, 2)
            .with_symmetry(),
    );
}

/// Workflows (issue 37): two parents and a child enqueued `after` both
/// with `on_parent_failure => 'cancel'`, two workers using every token
/// they were given, leases lapsing, the operator's cancel and retry. Every
/// `always` property holds (a waiting item has a parent that has not
/// settled; `waiting_on` counts the unresolved edges; the child runs only
/// once both parents are done and waits only while neither has failed; it
/// is released only once every parent has ended, never by a token that is
/// not current, and leaves `waiting` once per time it entered it; and every
/// fencing property as before), and every `sometimes` property is reached,
/// among them a zombie's finish of a parent refused after the child was
/// released, and a child a retried parent brought back, released.
#[test]
fn workflow_holds_in_every_state() {
    check_exhaustively(
        "workflow, two parents, 'cancel'",
        LeaseModel::new(Sql::Extension)
            .with_workflow(TWO_PARENTS, OnParentFailure::Cancel, 0)
            .with_symmetry(),
    );
}

/// Workflows: as [`workflow_holds_in_every_state`], the child with
/// `on_parent_failure => 'run'`: a parent that ends failed or cancelled
/// counts as settled, and the child runs once both have settled. The
/// operator retries the parents, not the child
/// ([`LeaseModel::without_leaf_retries`]).
#[test]
fn workflow_holds_with_run_on_parent_failure() {
    check_exhaustively(
        "workflow, two parents, 'run'",
        LeaseModel::new(Sql::Extension)
            .with_workflow(TWO_PARENTS, OnParentFailure::Run, 0)
            .without_leaf_retries()
            .with_symmetry(),
    );
}

/// Workflows: a chain, a parent, its child and its grandchild, each child
/// with `'cancel'`: a failure cancels down the chain, and a retry of the
/// parent brings both back.
#[test]
fn workflow_holds_down_a_chain() {
    check_exhaustively(
        "workflow, a chain of three, 'cancel'",
        LeaseModel::new(Sql::Extension)
            .with_workflow(CHAIN, OnParentFailure::Cancel, 1)
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
        Replay::of(LeaseModel::new(Sql::Extension))
    }

    /// A replay of `model` from its initial state.
    fn of(model: LeaseModel) -> Replay {
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

    /// The rest of `worker`'s flow claim after its pick: with group heads
    /// [`Action::Take`], [`Action::Normalize`] when the claim served a
    /// group, and [`Action::Commit`]; without, [`Action::Commit`]. Returns
    /// the state after `TAKE` (the commit's, without group heads) and the
    /// state after the commit.
    fn claim_rest(&mut self, worker: usize) -> (State, State) {
        if !self.model.heads {
            let committed = self.step(Action::Commit { worker });
            return (committed.clone(), committed);
        }
        let taken = self.step(Action::Take { worker });
        if self
            .model
            .next_state(self.now(), Action::Normalize { worker })
            .is_some()
        {
            self.step(Action::Normalize { worker });
        }
        (taken, self.step(Action::Commit { worker }))
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

    /// Whether the property `name` holds in `state`.
    fn holds(&self, name: &str, state: &State) -> bool {
        let property = self
            .model
            .properties()
            .into_iter()
            .find(|property| property.name == name)
            .unwrap_or_else(|| panic!("no property \"{name}\""));
        (property.condition)(&self.model, state)
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

/// [`assert_caught`] in the configuration of `model`; returns each
/// counterexample's actions, in the order of `expected`.
fn assert_caught_in(model: LeaseModel, expected: &[&'static str]) -> Vec<Vec<Action>> {
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
    expected
        .iter()
        .map(|&name| {
            let actions = checker
                .discovery(name)
                .unwrap_or_else(|| panic!("{sql:?}: no counterexample for \"{name}\""))
                .into_actions();
            println!("{sql:?} breaks \"{name}\": {actions:?}");
            actions
        })
        .collect()
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

/// Without the group half of the re-check, a claim writes the item its
/// snapshot saw first in the group although the group has moved on since:
/// the item went behind the other one, or the other one is claimed now. The
/// row's own guard does not see it (the item is still pending and due). The
/// checker must find both the order and the one-claimed-item rule broken.
#[test]
fn claim_without_the_group_recheck_is_caught() {
    assert_caught_in(
        LeaseModel::new(Sql::NoGroupRecheck).with_flow(ONE_GROUP, None),
        &[always::GROUP_IN_ORDER, always::GROUP_SERIAL],
    );
}

/// Without `VERIFY_SLOTS`, a claim fills a slot that another claim gave an
/// item after the first claim's `LOCK_SLOTS` took its snapshot: the
/// EvalPlanQual re-check read that item in the old snapshot, pending, and
/// locked the slot as free. The checker must find the limit passed, by a
/// claim's write, and that write must be the race: the claim's snapshot
/// predates another claim's commit, and its scan reached the slot after
/// it.
#[test]
fn claim_without_the_slot_recheck_is_caught() {
    let model = || LeaseModel::new(Sql::NoSlotRecheck).with_flow(GROUP_AND_NONE, Some(LIMIT));
    let broken = [
        always::LIMIT_HELD,
        always::LIVE_WITHIN_LIMIT,
        always::SLOT_OF_ITS_OWN,
    ];
    let paths = assert_caught_in(model(), &broken);
    for (path, name) in paths.iter().zip(broken) {
        let prefix = breaking_prefix(model(), path, name).expect("the property breaks");
        let Some(&Action::Commit { worker }) = prefix.last() else {
            panic!(
                "\"{name}\" was broken by {:?}, not by a claim",
                prefix.last()
            );
        };
        let at = |wanted: Action| {
            prefix
                .iter()
                .rposition(|&action| action == wanted)
                .unwrap_or_else(|| panic!("no {wanted:?} in {prefix:?}"))
        };
        let began = at(Action::Begin { worker });
        let picked = prefix
            .iter()
            .rposition(|&action| matches!(action, Action::Pick { worker: w, .. } if w == worker))
            .expect("the claim's pick");
        assert!(
            prefix[began..picked]
                .iter()
                .any(|&action| matches!(action, Action::Commit { worker: w } if w != worker)),
            "another claim committed between the snapshot and the lock: {prefix:?}"
        );
    }
}

/// Group heads: an enqueue whose pre-commit keeps the `behind` its
/// insert's snapshot gave its item (no `VERIFY_BEHIND` re-check when it gets
/// the lock; what a re-check in a REPEATABLE READ transaction's snapshot
/// does too) strands its group: the item before it was claimed or
/// cancelled after the insert, by a transaction whose `NORMALIZE` could not
/// see the uncommitted item, and the item commits behind with nothing
/// pending before it. The checker must find it, broken by the enqueue's
/// commit.
#[test]
fn an_enqueue_without_its_recheck_is_caught() {
    let model = || LeaseModel::new(Sql::EnqueueSkipsRecheck).with_group_of_three(1, 3);
    let broken = [always::HEAD_IS_CANDIDATE, always::HEAD_CLAIMABLE];
    let paths = assert_caught_in(model(), &broken);
    for (path, name) in paths.iter().zip(broken) {
        let prefix = breaking_prefix(model(), path, name).expect("the property breaks");
        assert!(
            matches!(prefix.last(), Some(Action::EnqueueCommit { .. })),
            "\"{name}\" was broken by {:?}, not by the enqueue's commit",
            prefix.last()
        );
        let inserted = prefix
            .iter()
            .position(|action| matches!(action, Action::Enqueue { .. }))
            .expect("the insert");
        assert!(
            prefix[inserted..]
                .iter()
                .any(|action| matches!(action, Action::Normalize { .. } | Action::Cancel { .. })),
            "a NORMALIZE ran between the insert and its commit: {prefix:?}"
        );
    }
}

/// Group heads: a claim whose `NORMALIZE` reads the group in its pick's
/// snapshot (taken before it held the group's lock) misses an item that an
/// enqueue committed behind the item the claim then takes: the item is the
/// group's first pending one, and behind. The checker must find it, broken
/// by the claim's commit (which releases the group's lock).
#[test]
fn a_normalize_in_the_picks_snapshot_is_caught() {
    let model = || LeaseModel::new(Sql::NormalizeInPickSnapshot).with_group_of_three(1, 3);
    let paths = assert_caught_in(model(), &[always::HEAD_IS_CANDIDATE]);
    let prefix = breaking_prefix(model(), &paths[0], always::HEAD_IS_CANDIDATE).expect("it breaks");
    let Some(&Action::Commit { worker }) = prefix.last() else {
        panic!("broken by {:?}, not by a claim's commit", prefix.last());
    };
    let picked = prefix
        .iter()
        .rposition(|&action| matches!(action, Action::Pick { worker: w, .. } if w == worker))
        .expect("the claim's pick");
    assert!(
        prefix[picked..].contains(&Action::EnqueueCommit { item: LATE_ITEM }),
        "an enqueue committed after the claim's pick: {prefix:?}"
    );
}

/// Group heads with `per_group => 2`: a `TAKE` that re-checks the group's
/// order in its fresh snapshot but counts the group's claimed items as its
/// pick's snapshot showed them claims a third item of the group. The
/// checker must find three claimed, by a claim's commit.
#[test]
fn a_take_counting_in_the_picks_snapshot_is_caught() {
    let model = || LeaseModel::new(Sql::TakeCountsInPickSnapshot).with_group_of_three(2, 2);
    let paths = assert_caught_in(model(), &[always::GROUP_SERIAL]);
    let prefix = breaking_prefix(model(), &paths[0], always::GROUP_SERIAL).expect("it breaks");
    assert!(
        matches!(prefix.last(), Some(Action::Commit { .. })),
        "broken by {:?}, not by a claim's commit",
        prefix.last()
    );
    let mut replay = Replay::of(model());
    for &action in &prefix {
        replay.step(action);
    }
    assert_eq!(
        replay.now().claimed(),
        3,
        "three items of the group claimed"
    );
}

/// Group heads: a `work_cancel` of a group's head that does not normalize
/// the group leaves the item behind it the first pending one, and behind
/// (and the cancelled item marked behind). The checker must find both,
/// broken by the cancel.
#[test]
fn a_cancel_without_normalize_is_caught() {
    let model = || LeaseModel::new(Sql::CancelSkipsNormalize).with_group_of_three(1, 3);
    let broken = [always::HEAD_IS_CANDIDATE, always::BEHIND_ONLY_PENDING];
    let paths = assert_caught_in(model(), &broken);
    for (path, name) in paths.iter().zip(broken) {
        let broken_by = first_breaking(model(), path, name);
        assert!(
            matches!(broken_by, Some(Action::Cancel { .. })),
            "\"{name}\" was broken by {broken_by:?}, not by a cancel"
        );
    }
}

/// Group heads, `src/verbs/flow.rs`'s `NORMALIZE` as it stood: the head updated
/// `FOR UPDATE SKIP LOCKED`. A claim's `PICK` whose snapshot shows an item
/// as its group's head reaches the row after another transaction made it
/// behind: PostgreSQL locks the row, the re-check fails, the row is not
/// returned and stays locked to the claim's commit. When the item becomes
/// the group's first pending one while that claim is in flight, the
/// `NORMALIZE` that should make it the head (a claim's, or a cancel's)
/// skips it: the group is stranded. The checker must find it, broken by a
/// claim's commit or a cancel, and the path must have a claim in flight
/// that holds the stranded item's row.
#[test]
fn a_normalize_that_skips_a_locked_head_is_caught() {
    let model = || LeaseModel::new(Sql::NormalizeSkipsLockedHead).with_group_of_three(1, 3);
    let paths = assert_caught_in(model(), &[always::HEAD_IS_CANDIDATE]);
    let prefix = breaking_prefix(model(), &paths[0], always::HEAD_IS_CANDIDATE).expect("it breaks");
    assert!(
        matches!(
            prefix.last(),
            Some(Action::Commit { .. } | Action::Cancel { .. })
        ),
        "broken by {:?}, not by a NORMALIZE's commit",
        prefix.last()
    );
    let mut replay = Replay::of(model());
    for &action in &prefix {
        replay.step(action);
    }
    let stranded = replay.now();
    let first = model()
        .heads_free(stranded)
        .find(|&first| stranded.behind[first])
        .expect("a stranded head");
    assert!(
        LeaseModel::row_locked(stranded, first),
        "a claim in flight holds the stranded head's row: {prefix:?}"
    );
}

/// Group heads: a `work_cancel` whose statements read a snapshot taken
/// before it held the group's lock (a REPEATABLE READ or SERIALIZABLE
/// transaction's) normalizes the group as it was then. An item that was a
/// candidate in that snapshot, set behind since by another transaction's
/// `NORMALIZE`, is left behind when the cancel makes it the group's first
/// pending item: `NORMALIZE`'s head update selects only items behind in its
/// snapshot, so it never touches the row, and no serialization failure
/// stops it. The checker must find the group stranded by such a cancel.
#[test]
fn a_cancel_in_a_repeatable_read_snapshot_is_caught() {
    let model = || LeaseModel::new(Sql::CancelInTransactionSnapshot).with_group_of_three(1, 3);
    let paths = assert_caught_in(model(), &[always::HEAD_IS_CANDIDATE]);
    let prefix = breaking_prefix(model(), &paths[0], always::HEAD_IS_CANDIDATE).expect("it breaks");
    let Some(&Action::Cancel { item }) = prefix.last() else {
        panic!("broken by {:?}, not by a cancel", prefix.last());
    };
    let began = prefix
        .iter()
        .position(|&action| action == Action::CancelBegin { item })
        .expect("the cancel's snapshot");
    assert!(
        began + 1 < prefix.len() - 1,
        "something ran between the cancel's snapshot and its cancel: {prefix:?}"
    );
}

/// A slot that counts as free once its item's lease has lapsed
/// (`Sql::SlotFreedByLease`) breaks the contract, though every claim keeps
/// to its slots: a claim fills the slot of a lapsed lease, so two items are
/// claimed; and the lapsed item then goes live again, by its holder's
/// renew (docs/contract.md, promise 2) or a claim that takes it anew (which
/// needs no slot), so two leases are unexpired. The checker must find both,
/// the first broken by a claim's write, the second by a write or a renew.
#[test]
fn a_slot_freed_by_a_lapsed_lease_is_caught() {
    let model = || LeaseModel::new(Sql::SlotFreedByLease).with_flow(GROUP_AND_NONE, Some(LIMIT));
    let paths = assert_caught_in(
        model(),
        &[
            always::LIMIT_HELD,
            always::LIVE_WITHIN_LIMIT,
            always::SLOT_OF_ITS_OWN,
        ],
    );
    let claimed_by = first_breaking(model(), &paths[0], always::LIMIT_HELD);
    assert!(
        matches!(claimed_by, Some(Action::Commit { .. })),
        "the claimed items passed the limit by {claimed_by:?}, not by a claim"
    );
    let live_by = first_breaking(model(), &paths[1], always::LIVE_WITHIN_LIMIT);
    assert!(
        matches!(live_by, Some(Action::Commit { .. } | Action::Renew { .. })),
        "the unexpired leases passed the limit by {live_by:?}, not by a claim or a renew"
    );
}

/// The step of `path`, replayed in `model` (workers keeping their numbers),
/// after which the `always` property `name` first no longer holds; prints
/// the path up to it. (The checker's counterexample may go on past it: the
/// property stays broken, and the checker keeps the last path it met.)
fn first_breaking(model: LeaseModel, path: &[Action], name: &str) -> Option<Action> {
    breaking_prefix(model, path, name).and_then(|prefix| prefix.last().copied())
}

/// [`first_breaking`]'s path: `path` up to and with the step after which
/// `name` first no longer holds.
fn breaking_prefix(model: LeaseModel, path: &[Action], name: &str) -> Option<Vec<Action>> {
    let sql = model.sql;
    let mut replay = Replay::of(model);
    let at = path.iter().position(|&action| {
        let next = replay.step(action);
        !replay.holds(name, &next)
    })?;
    println!("{sql:?} first breaks \"{name}\" by: {:?}", &path[..=at]);
    Some(path[..=at].to_vec())
}

/// Under `concurrency => 1`, a lapsed lease keeps its slot, so its holder's
/// renew cannot pass the limit, step by step (workers keep their numbers).
/// A claims the grouped item into the slot and its lease lapses: one item
/// claimed, no lease unexpired, and yet no claim locks the slot for the
/// other item (the limit is reached while it is ready); A renews, one lease
/// unexpired. A claim whose `LOCK_SLOTS` snapshot predates A's claim locks
/// the slot (its EvalPlanQual re-check reads the grouped item in that old
/// snapshot, pending), and its `VERIFY_SLOTS` gives the slot up: the lapsed
/// lease holds it. B then takes the lapsed item anew, in its own slot,
/// while the other waits; A's renew changes nothing. Every `always`
/// property holds at every step. With slots freed by a lapse
/// (`Sql::SlotFreedByLease`) A fills the lapsed lease's slot with the other
/// item, and the lapsed item goes live again beside it, by A's renew or by
/// B's claim of it anew.
#[test]
fn a_renewed_lapsed_lease_stays_within_the_limit() {
    const A: usize = 0;
    const B: usize = 1;
    const GROUPED: usize = 0;
    const FREE: usize = 1;
    let grouped = ItemSet(1 << GROUPED);
    let free = ItemSet(1 << FREE);
    let nothing = ItemSet(0);
    let model = |sql| LeaseModel::new(sql).with_flow(GROUP_AND_NONE, Some(LIMIT));
    let pick = |worker, items| Action::Pick { worker, items };
    let claim = |worker, items| {
        [
            Action::Begin { worker },
            pick(worker, items),
            Action::Commit { worker },
        ]
    };
    let renew_a = Action::Renew {
        worker: A,
        item: GROUPED,
    };

    // A claims, its lease lapses: no claim has a slot for the other item.
    let mut replay = Replay::of(model(Sql::Extension));
    for action in claim(A, grouped) {
        replay.step(action);
    }
    assert_eq!(replay.now().slots, [Some(GROUPED)]);
    let lapsed = replay.step(Action::LeaseLapses { item: GROUPED });
    assert_eq!((lapsed.claimed(), lapsed.live()), (1, 0));
    replay.assert_reached(sometimes::LIMIT_REACHED, &lapsed);
    for worker in [A, B] {
        // The slot names a claimed item in the snapshot: nothing to lock.
        let begun = replay.step(Action::Begin { worker });
        assert_eq!(
            begun.picked[worker].map(|f| f.phase),
            Some(Phase::Begun {
                free: SlotSet(0),
                busy: ItemSet(0)
            })
        );
        replay.no_step(pick(worker, free));
        replay.no_step(pick(worker, ItemSet(grouped.0 | free.0)));
        let ended = replay.step(pick(worker, nothing));
        assert_eq!(ended.picked[worker], None);
    }
    let renewed = replay.step(renew_a);
    assert_eq!(renewed.last, Some(Event::LapsedLeaseRenewed));
    assert_eq!((renewed.claimed(), renewed.live()), (1, 1));
    replay.assert_reached(sometimes::LAPSED_RENEWED_AT_THE_LIMIT, &renewed);
    replay.assert_always();

    // With a slot freed by the lapse, A's next claim fills it with the
    // other item; A's renew, or B's claim of the lapsed item anew, then
    // makes two leases unexpired.
    let lapse = [
        &claim(A, grouped)[..],
        &[Action::LeaseLapses { item: GROUPED }],
        &claim(A, free),
    ]
    .concat();
    let b_anew = [
        Action::Begin { worker: B },
        pick(B, grouped),
        Action::Commit { worker: B },
    ];
    for then in [&[renew_a][..], &b_anew] {
        let mut without = Replay::of(model(Sql::SlotFreedByLease));
        for &action in &lapse {
            without.step(action);
        }
        assert_eq!((without.now().claimed(), without.now().live()), (2, 1));
        assert!(!without.holds(always::LIMIT_HELD, without.now()));
        for &action in then {
            without.step(action);
        }
        assert_eq!((without.now().claimed(), without.now().live()), (2, 2));
        assert!(!without.holds(always::LIVE_WITHIN_LIMIT, without.now()));
    }

    // B's snapshot from before A's claim: it locks the slot, and its
    // VERIFY_SLOTS finds the lapsed lease in it.
    let mut replay = Replay::of(model(Sql::Extension));
    replay.step(Action::Begin { worker: B });
    for action in claim(A, grouped) {
        replay.step(action);
    }
    replay.step(Action::LeaseLapses { item: GROUPED });
    replay.no_step(pick(B, free));
    let dropped = replay.step(pick(B, nothing));
    assert_eq!(dropped.last, Some(Event::SlotRecheckDropped));
    let renewed = replay.step(renew_a);
    assert_eq!(renewed.live(), 1);

    // B takes the lapsed item anew, in its slot, while the other waits.
    replay.step(Action::LeaseLapses { item: GROUPED });
    for action in &b_anew[..2] {
        replay.step(*action);
    }
    let b_claimed = replay.step(Action::Commit { worker: B });
    assert_eq!(b_claimed.last, Some(Event::LapsedClaimedInItsSlot));
    let a_token = b_claimed.tokens[A][GROUPED].expect("A was given a token");
    let b_token = b_claimed.tokens[B][GROUPED].expect("B was given a token");
    assert!(b_token > a_token, "B's epoch is newer than A's");
    assert_eq!(b_claimed.rows[FREE].status, Status::Pending { due: true });
    assert_eq!(b_claimed.slots, [Some(GROUPED)], "the slot is not written");
    replay.assert_reached(sometimes::LAPSED_CLAIMED_IN_ITS_SLOT, &b_claimed);
    let a_late = replay.step(renew_a);
    assert_eq!(a_late.rows, b_claimed.rows, "A's renew changes nothing");
    replay.assert_always();
}

/// A group handed over after a lapse, step by step (workers keep their
/// numbers): A claims the group's first item; nothing else of the group can
/// be picked while it is claimed. Its lease lapses; the second item still
/// cannot be picked, and B's claim takes the first item anew with a newer
/// epoch. A's finish is refused; B finishes, which frees the group, and the
/// second item is claimed next. Every `always` property holds at every step.
#[test]
fn group_handed_over_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const FIRST: usize = 0;
    const SECOND: usize = 1;
    let first = ItemSet(1 << FIRST);
    let second = ItemSet(1 << SECOND);
    let mut replay = Replay::of(LeaseModel::new(Sql::Extension).with_flow(ONE_GROUP, None));

    replay.no_step(Action::Pick {
        worker: A,
        items: second,
    });
    replay.step(Action::Pick {
        worker: A,
        items: first,
    });
    let (_, a_claimed) = replay.claim_rest(A);
    let a_token = a_claimed.tokens[A][FIRST].expect("A was given a token");
    replay.no_step(Action::Pick {
        worker: B,
        items: second,
    });
    replay.no_step(Action::Pick {
        worker: B,
        items: first,
    });
    replay.step(Action::LeaseLapses { item: FIRST });
    replay.no_step(Action::Pick {
        worker: B,
        items: second,
    });
    replay.step(Action::Pick {
        worker: B,
        items: first,
    });
    let (_, b_claimed) = replay.claim_rest(B);
    let b_token = b_claimed.tokens[B][FIRST].expect("B was given a token");
    assert!(b_token > a_token, "B's epoch is newer than A's");
    assert_eq!(b_claimed.rows[FIRST].attempts, 2);
    assert_eq!(b_claimed.rows[SECOND].status, Status::Pending { due: true });
    replay.assert_reached(sometimes::GROUP_HANDED_OVER, &b_claimed);

    let a_finished = replay.step(Action::Finish {
        worker: A,
        item: FIRST,
    });
    assert_eq!(
        a_finished.rows, b_claimed.rows,
        "A's finish changes nothing"
    );
    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: FIRST,
    });
    assert_eq!(b_finished.rows[FIRST].status, Status::Done);
    replay.step(Action::Pick {
        worker: A,
        items: second,
    });
    let (_, next) = replay.claim_rest(A);
    assert_eq!(next.rows[SECOND].status, Status::Claimed(Lease::Live));
    replay.assert_always();
}

/// The race the group's re-check is there for, step by step: A's snapshot
/// picks the group's first item; before A writes, B claims that item and
/// fails it with `retry_in => '0'`, which sends it behind the second item
/// (a new `run_at`; a candidate still, a stale one). The first item is
/// pending and due again, so the row's own guard would let A write it. If A writes now, it takes the first item
/// while the second is ahead of it; if B first claims the second item, A
/// makes it two claimed items in the group. The extension's re-check drops
/// the item either way; without it each property breaks on its path.
#[test]
fn group_recheck_race_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const FIRST: usize = 0;
    const SECOND: usize = 1;
    let pick = |worker, item: usize| Action::Pick {
        worker,
        items: ItemSet(1 << item),
    };
    for (b_takes_second, broken) in [
        (false, always::GROUP_IN_ORDER),
        (true, always::GROUP_SERIAL),
    ] {
        for sql in [Sql::Extension, Sql::NoGroupRecheck] {
            let mut replay = Replay::of(LeaseModel::new(sql).with_flow(ONE_GROUP, None));
            replay.step(pick(A, FIRST));
            replay.step(pick(B, FIRST));
            replay.claim_rest(B);
            replay.step(Action::Fail {
                worker: B,
                item: FIRST,
                retry: Retry::Now,
            });
            if b_takes_second {
                replay.step(pick(B, SECOND));
                replay.claim_rest(B);
            }
            let (a_took, a_wrote) = replay.claim_rest(A);
            if sql == Sql::Extension {
                assert_eq!(a_took.last, Some(Event::GroupRecheckDropped));
                assert_eq!(a_wrote.rows[FIRST].status, Status::Pending { due: true });
                replay.assert_reached(sometimes::GROUP_RECHECK_DROPPED, &a_took);
                replay.assert_always();
            } else {
                assert_eq!(a_wrote.rows[FIRST].status, Status::Claimed(Lease::Live));
                assert!(
                    !replay.holds(broken, &a_wrote),
                    "without the re-check, \"{broken}\" must break"
                );
            }
        }
    }
}

/// The race `VERIFY_SLOTS` is there for, step by step, under
/// `concurrency => 1` (workers keep their numbers): B's `LOCK_SLOTS` takes
/// its snapshot while the slot is empty; A's claim locks the slot, claims
/// the grouped item into it and commits; B's scan then reaches the slot,
/// no longer locked, and its EvalPlanQual re-check reads the slot's new
/// item in B's old snapshot, where it is pending: B locks the slot. The
/// extension's `VERIFY_SLOTS` sees the item claimed and gives the slot up,
/// so B cannot take the other item; without it B does, and two items are
/// claimed, both under unexpired leases. And `SKIP LOCKED`: once the slot
/// is free again, a claim whose scan reaches it while A's claim holds it
/// passes it over (and gets nothing), while A's claim takes an item.
#[test]
fn slot_recheck_race_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const GROUPED: usize = 0;
    const FREE: usize = 1;
    let grouped = ItemSet(1 << GROUPED);
    let free = ItemSet(1 << FREE);
    let nothing = ItemSet(0);
    let pick = |worker, items| Action::Pick { worker, items };
    let race = [
        Action::Begin { worker: B },
        Action::Begin { worker: A },
        pick(A, grouped),
        Action::Commit { worker: A },
    ];
    let model = |sql| LeaseModel::new(sql).with_flow(GROUP_AND_NONE, Some(LIMIT));
    let b_takes_free = [pick(B, free), Action::Commit { worker: B }];

    let mut replay = Replay::of(model(Sql::Extension));
    for action in race {
        replay.step(action);
    }
    assert_eq!(replay.now().slots, [Some(GROUPED)]);
    replay.no_step(b_takes_free[0]);
    let b_verified = replay.step(pick(B, nothing));
    assert_eq!(b_verified.last, Some(Event::SlotRecheckDropped));
    assert_eq!((b_verified.claimed(), b_verified.live()), (1, 1));
    replay.assert_reached(sometimes::SLOT_RECHECK_DROPPED, &b_verified);
    replay.assert_always();

    let mut without = Replay::of(model(Sql::NoSlotRecheck));
    for action in race.into_iter().chain(b_takes_free) {
        without.step(action);
    }
    assert_eq!((without.now().claimed(), without.now().live()), (2, 2));
    assert_eq!(without.now().slots, [Some(FREE)], "the slot given twice");
    assert!(
        !without.holds(always::LIMIT_HELD, without.now()),
        "without VERIFY_SLOTS, B passes the limit"
    );
    assert!(!without.holds(always::SLOT_OF_ITS_OWN, without.now()));

    // SKIP LOCKED, once the grouped item is done and the slot free: A's
    // claim holds the slot for the free item when B's scan reaches it.
    let mut replay = Replay::of(model(Sql::Extension));
    for action in [
        Action::Begin { worker: A },
        pick(A, grouped),
        Action::Commit { worker: A },
        Action::Finish {
            worker: A,
            item: GROUPED,
        },
        Action::Begin { worker: A },
        Action::Begin { worker: B },
        pick(A, free),
    ] {
        replay.step(action);
    }
    replay.no_step(pick(B, free));
    let skipped = replay.step(pick(B, nothing));
    assert_eq!(skipped.last, Some(Event::SlotSkipped));
    replay.assert_reached(sometimes::SLOT_SKIPPED, &skipped);
    // B's next claim starts before A's commits: A claims beside it.
    replay.step(Action::Begin { worker: B });
    let a_claimed = replay.step(Action::Commit { worker: A });
    assert_eq!(a_claimed.last, Some(Event::ClaimedBesideAnother));
    assert_eq!(a_claimed.slots, [Some(FREE)]);
    replay.assert_reached(sometimes::CLAIMED_BESIDE_ANOTHER, &a_claimed);
    replay.assert_always();
}

/// 0.11.0's resume deleted the queue's row of `workfence.queues`, and with
/// it `grouped`: after a pause and a resume, claims took the plain path,
/// which knows no groups, and two items of one group were claimed at once.
/// The checker must find the settings gone, the group claimed twice by a
/// claim (a step after the resume), and a claim out of the group's order.
#[test]
fn a_resume_that_drops_the_groups_is_caught() {
    assert_resume_drop_caught(
        ONE_GROUP,
        None,
        [always::GROUP_SERIAL, always::GROUP_IN_ORDER],
    );
}

/// 0.11.0's resume deleted `concurrency` with the row: after a pause and a
/// resume, the plain claims took more items than the limit. The checker
/// must find the settings gone and the limit passed by a claim.
#[test]
fn a_resume_that_drops_the_limit_is_caught() {
    assert_resume_drop_caught(
        GROUP_AND_NONE,
        Some(LIMIT),
        [always::LIMIT_HELD, always::LIVE_WITHIN_LIMIT],
    );
}

/// 0.11.0's resume (`Sql::ResumeDeletesRow`) on a queue with `groups` and
/// `limit`, paused and resumed: the checker finds the settings gone, first
/// at a resume, and each of `broken` broken by a plain claim after one.
fn assert_resume_drop_caught(
    groups: [Option<Group>; ITEMS],
    limit: Option<u8>,
    broken: [&'static str; 2],
) {
    let model = || {
        LeaseModel::new(Sql::ResumeDeletesRow)
            .with_flow(groups, limit)
            .with_pauses()
    };
    let paths = assert_caught_in(model(), &[always::SETTINGS_SURVIVE, broken[0], broken[1]]);
    let gone_by = first_breaking(model(), &paths[0], always::SETTINGS_SURVIVE);
    assert_eq!(
        gone_by,
        Some(Action::Resume),
        "the settings go with a resume"
    );
    for (path, name) in paths[1..].iter().zip(broken) {
        let broken_by = first_breaking(model(), path, name);
        assert!(
            matches!(broken_by, Some(Action::Claim { .. })),
            "\"{name}\" was broken by {broken_by:?}, not by a plain claim"
        );
        assert!(path.contains(&Action::Resume), "a resume came first");
    }
}

/// A claim that does not look at the pause claims from a paused queue, in
/// the pause's window and after it alike. The checker must find it, broken
/// by a claim's write.
#[test]
fn a_claim_that_ignores_the_pause_is_caught() {
    let model = || {
        LeaseModel::new(Sql::ClaimIgnoresPause)
            .with_flow(ONE_GROUP, None)
            .with_pauses()
    };
    let paths = assert_caught_in(model(), &[always::PAUSED_CLAIMS_NOTHING]);
    let broken_by = first_breaking(model(), &paths[0], always::PAUSED_CLAIMS_NOTHING);
    assert!(
        matches!(broken_by, Some(Action::Commit { .. })),
        "broken by {broken_by:?}, not by a claim's write"
    );
    // Once the pause is released too.
    let mut replay = Replay::of(model());
    for action in [
        Action::Pause,
        Action::PauseReleased,
        Action::Pick {
            worker: 0,
            items: ItemSet(1),
        },
    ] {
        replay.step(action);
    }
    replay.claim_rest(0);
    assert!(!replay.holds(always::PAUSED_CLAIMS_NOTHING, replay.now()));
}

/// Without the pause lock's probe, a claim that starts after the pause
/// committed and before its invalidation reached the backend reads the
/// backend's cached settings, from before the pause, and claims. The
/// checker must find it, with the claim begun inside that window: after
/// the pause's commit and before its release. Once the pause is released
/// (its invalidation sent), no claim starts: the window is the whole hole,
/// and the lock closes it.
#[test]
fn a_claim_without_the_pause_lock_is_caught() {
    let model = || {
        LeaseModel::new(Sql::NoPauseLock)
            .with_flow(ONE_GROUP, None)
            .with_pauses()
    };
    let paths = assert_caught_in(model(), &[always::PAUSED_CLAIMS_NOTHING]);
    let path = breaking_prefix(model(), &paths[0], always::PAUSED_CLAIMS_NOTHING)
        .expect("the property breaks on the path");
    let Some(&Action::Commit { worker }) = path.last() else {
        panic!("broken by {:?}, not by a claim's write", path.last());
    };
    let picked = path
        .iter()
        .rposition(|&action| matches!(action, Action::Pick { worker: w, .. } if w == worker))
        .expect("the claim's pick");
    let paused = path[..picked]
        .iter()
        .rposition(|&action| action == Action::Pause)
        .expect("a pause before the claim began");
    assert!(
        !path[paused..picked].contains(&Action::PauseReleased),
        "the claim began between the pause's commit and its release: {path:?}"
    );
    let mut replay = Replay::of(model());
    replay.step(Action::Pause);
    replay.step(Action::PauseReleased);
    replay.no_step(Action::Pick {
        worker: 0,
        items: ItemSet(1),
    });
}

/// A pause and a resume under `concurrency => 1`, step by step (workers
/// keep their numbers). B's claim locks the slot and picks the free item
/// before the pause commits; while the pause holds its lock, A's claim
/// reads the queue as paused, and B's claim writes (a claim begun before the pause may still
/// return items). Once the pause is released, A's claims still hand out
/// nothing. The resume keeps the limit: the free item is claimed and named
/// by the slot, so the grouped one waits for the limit, and A's claim locks
/// no slot and takes nothing. B
/// finishes while the queue is paused again; after the next resume A
/// claims the grouped item. Every `always` property holds at every step.
/// Under 0.11.0's resume, which deletes the settings, A's claim after the
/// first resume takes the grouped item beside the free one: two items
/// claimed under a limit of 1.
#[test]
fn pause_and_resume_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const GROUPED: usize = 0;
    const FREE: usize = 1;
    let grouped = ItemSet(1 << GROUPED);
    let free = ItemSet(1 << FREE);
    let model = |sql| {
        LeaseModel::new(sql)
            .with_flow(GROUP_AND_NONE, Some(LIMIT))
            .with_pauses()
    };
    let pick = |worker, items| Action::Pick { worker, items };
    let claim_a = Action::Claim {
        worker: A,
        item: GROUPED,
    };
    let begin_a = Action::Begin { worker: A };
    let b_picks_free = [Action::Begin { worker: B }, pick(B, free)];
    let to_first_resume = [
        b_picks_free[0],
        b_picks_free[1],
        Action::Pause,
        Action::Commit { worker: B },
        Action::PauseReleased,
        Action::Resume,
    ];

    let mut replay = Replay::of(model(Sql::Extension));
    for action in b_picks_free {
        replay.step(action);
    }
    let paused = replay.step(Action::Pause);
    assert!(paused.queue.paused && paused.pausing);
    replay.no_step(begin_a);
    let b_claimed = replay.step(Action::Commit { worker: B });
    assert_eq!(b_claimed.rows[FREE].status, Status::Claimed(Lease::Live));
    replay.assert_reached(sometimes::CLAIMED_ACROSS_THE_PAUSE, &b_claimed);
    let released = replay.step(Action::PauseReleased);
    replay.assert_reached(sometimes::PAUSED_WHILE_THE_LIMIT_WAITS, &released);
    replay.no_step(Action::Pause);
    replay.no_step(begin_a);
    replay.no_step(claim_a);
    let resumed = replay.step(Action::Resume);
    assert_eq!(resumed.queue, model(Sql::Extension).queue_at_start());
    replay.no_step(Action::Resume);
    replay.no_step(claim_a);
    // The slot names the claimed free item: A's claim locks nothing, and
    // its pick has no slot for the grouped item.
    replay.step(begin_a);
    replay.no_step(pick(A, grouped));
    replay.step(pick(A, ItemSet(0)));

    replay.step(Action::Pause);
    replay.step(Action::PauseReleased);
    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: FREE,
    });
    assert_eq!(b_finished.rows[FREE].status, Status::Done);
    replay.no_step(begin_a);
    replay.step(Action::Resume);
    replay.step(begin_a);
    replay.step(pick(A, grouped));
    let a_claimed = replay.step(Action::Commit { worker: A });
    assert_eq!(a_claimed.rows[GROUPED].status, Status::Claimed(Lease::Live));
    assert_eq!(a_claimed.claimed(), 1);
    replay.assert_always();

    let mut wiped = Replay::of(model(Sql::ResumeDeletesRow));
    for action in to_first_resume {
        wiped.step(action);
    }
    assert_eq!(wiped.now().queue, QueueRow::default(), "the row is gone");
    assert!(!wiped.holds(always::SETTINGS_SURVIVE, wiped.now()));
    wiped.no_step(begin_a);
    let a_claimed = wiped.step(claim_a);
    assert_eq!(a_claimed.claimed(), 2);
    assert!(
        !wiped.holds(always::LIMIT_HELD, &a_claimed),
        "after 0.11.0's resume, A passes the limit"
    );
}

/// Workflows, step by step (workers keep their numbers), two parents and
/// a child with `'cancel'`: A claims parent `i0`, its lease lapses, B takes
/// it over and finishes it: the child still waits for `i1`. A claims and
/// finishes `i1`, which releases the child; A's late finish of `i0` is
/// refused and releases nothing. B runs the child. Every `always` property
/// holds at every step.
#[test]
fn workflow_scenario_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const P0: usize = 0;
    const P1: usize = 1;
    const CHILD: usize = 2;
    let mut replay = Replay::of(LeaseModel::new(Sql::Extension).with_workflow(
        TWO_PARENTS,
        OnParentFailure::Cancel,
        P0,
    ));
    assert_eq!(replay.now().rows[CHILD].status, Status::Waiting);
    assert_eq!(replay.now().waiting_on[CHILD], 2);
    replay.no_step(Action::Claim {
        worker: A,
        item: CHILD,
    });

    replay.step(Action::Claim {
        worker: A,
        item: P0,
    });
    replay.step(Action::LeaseLapses { item: P0 });
    replay.step(Action::Claim {
        worker: B,
        item: P0,
    });
    let b_finished = replay.step(Action::Finish {
        worker: B,
        item: P0,
    });
    assert_eq!(b_finished.rows[P0].status, Status::Done);
    assert_eq!(b_finished.rows[CHILD].status, Status::Waiting);
    assert_eq!(b_finished.waiting_on[CHILD], 1);

    replay.step(Action::Claim {
        worker: A,
        item: P1,
    });
    let released = replay.step(Action::Finish {
        worker: A,
        item: P1,
    });
    assert_eq!(released.rows[CHILD].status, Status::Pending { due: true });
    assert_eq!(released.waiting_on[CHILD], 0);
    assert_eq!(
        released.last,
        Some(Event::ChildReleased {
            child: CHILD,
            reopened: false
        })
    );

    let zombie = replay.step(Action::Finish {
        worker: A,
        item: P0,
    });
    assert_eq!(
        zombie.rows, released.rows,
        "the zombie's finish changes nothing"
    );
    replay.assert_reached(sometimes::ZOMBIE_REFUSED_AFTER_RELEASE, &zombie);

    replay.step(Action::Claim {
        worker: B,
        item: CHILD,
    });
    let done = replay.step(Action::Finish {
        worker: B,
        item: CHILD,
    });
    replay.assert_reached(sometimes::CHILD_RELEASED_DONE, &done);
    replay.assert_always();
}

/// Workflows, step by step: parent `i1` fails on its first attempt (a
/// retry: the child still waits), then on its last, which cancels the
/// child. The operator's retry of `i1` brings the child back to wait for
/// both parents; once both are done it is released. Every `always`
/// property holds at every step.
#[test]
fn workflow_failed_parent_retried_in_the_model() {
    const A: usize = 0;
    const B: usize = 1;
    const P0: usize = 0;
    const P1: usize = 1;
    const CHILD: usize = 2;
    let mut replay = Replay::of(LeaseModel::new(Sql::Extension).with_workflow(
        TWO_PARENTS,
        OnParentFailure::Cancel,
        P0,
    ));
    let fail = |worker| Action::Fail {
        worker,
        item: P1,
        retry: Retry::Now,
    };
    replay.step(Action::Claim {
        worker: A,
        item: P1,
    });
    let retried = replay.step(fail(A));
    assert_eq!(retried.rows[P1].status, Status::Pending { due: true });
    assert_eq!(retried.rows[CHILD].status, Status::Waiting);
    assert_eq!(retried.waiting_on[CHILD], 2);

    replay.step(Action::Claim {
        worker: A,
        item: P1,
    });
    let failed = replay.step(fail(A));
    assert_eq!(failed.rows[P1].status, Status::Failed(FailedBy::WorkFail));
    assert_eq!(failed.rows[CHILD].status, Status::Cancelled);
    assert_eq!(failed.edge_cancelled[CHILD], ItemSet(0).with(P1));
    replay.assert_reached(sometimes::FAILED_PARENT_CANCELLED_CHILD, &failed);
    replay.no_step(Action::Cancel { item: CHILD });
    replay.no_step(Action::Claim {
        worker: B,
        item: CHILD,
    });

    let reopened = replay.step(Action::Retry {
        item: P1,
        run_at: Retry::Now,
    });
    assert_eq!(reopened.rows[P1].status, Status::Pending { due: true });
    assert_eq!(reopened.rows[CHILD].status, Status::Waiting);
    assert_eq!(reopened.waiting_on[CHILD], 2);
    assert!(reopened.history[CHILD].reopened);

    replay.step(Action::Claim {
        worker: B,
        item: P0,
    });
    replay.step(Action::Finish {
        worker: B,
        item: P0,
    });
    replay.step(Action::Claim {
        worker: A,
        item: P1,
    });
    let released = replay.step(Action::Finish {
        worker: A,
        item: P1,
    });
    assert_eq!(released.rows[CHILD].status, Status::Pending { due: true });
    replay.assert_reached(sometimes::REOPENED_CHILD_RELEASED, &released);
    replay.assert_always();
}

/// The state `model` reaches by `path`, replayed with the workers keeping
/// their numbers.
fn replayed(model: LeaseModel, path: &[Action]) -> State {
    let mut replay = Replay::of(model);
    for &action in path {
        replay.step(action);
    }
    replay.now().clone()
}

/// Workflows: children released by a statement that checks the parent's
/// owner name alone. A zombie, whose token for the parent the other worker
/// (under the same name) superseded, or whose lease ended, finishes: its
/// `FINISH` matches nothing, but the release runs, resolves the parent's
/// edges and lets the child out while the parent is not done. The checker
/// must find it: the release (or cancel) by that finish breaks the first
/// two properties; the third breaks by that finish, or later, when the
/// parent, its edge resolved already, fails or is cancelled and no longer
/// cancels the child.
#[test]
fn a_release_on_the_owner_name_only_is_caught() {
    let model = || {
        LeaseModel::new(Sql::ReleaseOnOwnerOnly).with_workflow(
            TWO_PARENTS,
            OnParentFailure::Cancel,
            0,
        )
    };
    let broken = [
        always::NO_STALE_RELEASE,
        always::RELEASED_AFTER_EVERY_PARENT,
        always::CANCEL_CHILD_AFTER_DONE_PARENTS,
    ];
    let paths = assert_caught_in(model(), &broken);
    for (path, name) in paths.iter().zip(broken) {
        let prefix = breaking_prefix(model(), path, name).expect("the property breaks");
        // The finishes on the path whose token was not current and that
        // resolved an edge.
        let mut replay = Replay::of(model());
        let stale: Vec<usize> = prefix
            .iter()
            .enumerate()
            .filter_map(|(at, &action)| {
                let before = replay.now().clone();
                let after = replay.step(action);
                let Action::Finish { worker, item } = action else {
                    return None;
                };
                let epoch = before.tokens[worker][item]?;
                (!before.is_current(item, epoch) && after.resolved != before.resolved).then_some(at)
            })
            .collect();
        assert!(
            !stale.is_empty(),
            "a finish whose token was not current resolved an edge: {prefix:?}"
        );
        if name != always::CANCEL_CHILD_AFTER_DONE_PARENTS {
            assert_eq!(
                stale.last(),
                Some(&(prefix.len() - 1)),
                "\"{name}\" was broken by that finish: {prefix:?}"
            );
        }
    }
}

/// Workflows: a release that counts every edge from the parent, resolved or
/// not. With `'run'`, a parent that ended (its edge resolved, the child
/// still waiting for the other), was retried and then ended again counts
/// twice, and the child is released while its other parent has not ended.
/// The checker must find it, each property broken by the second end of a
/// retried parent.
#[test]
fn a_release_without_the_resolved_flag_is_caught() {
    let model = || {
        LeaseModel::new(Sql::ReleaseWithoutResolved)
            .with_workflow(TWO_PARENTS, OnParentFailure::Run, 0)
            .without_leaf_retries()
    };
    let broken = [
        always::RELEASED_AFTER_EVERY_PARENT,
        always::WAITING_ON_COUNTS_EDGES,
    ];
    for (path, name) in assert_caught_in(model(), &broken).iter().zip(broken) {
        let prefix = breaking_prefix(model(), path, name).expect("the property breaks");
        let (&last, before) = prefix.split_last().expect("a step");
        let before = replayed(model(), before);
        let parent = acted_on(last).expect("a step on an item");
        assert!(
            model().is_parent(parent) && before.history[parent].retried.is_some(),
            "\"{name}\" was broken by {last:?}, not by a retried parent's end: {prefix:?}"
        );
    }
}

/// Workflows: a release that makes a child `pending` when its count reaches
/// 0, whatever its state: a child that one parent's failure cancelled comes
/// back when the other parent is done, and runs. The checker must find it.
#[test]
fn a_release_that_ignores_the_state_is_caught() {
    assert_caught_in(
        LeaseModel::new(Sql::ReleaseIgnoresState).with_workflow(
            TWO_PARENTS,
            OnParentFailure::Cancel,
            0,
        ),
        &[
            always::LEFT_WAITING_ONCE,
            always::CANCEL_CHILD_AFTER_DONE_PARENTS,
        ],
    );
}

/// Workflows: an edge marked `cancelled` only by the failure that cancels a
/// waiting child. Both parents end failed or cancelled, the second's edge
/// unmarked, so the first's retry brings the child back while the second
/// is still failed or cancelled; or, the second retried first (it brings
/// nothing back), the child comes back waiting for the first alone, and
/// runs while the second is pending. The checker must find it, broken by a
/// step on a parent after a parent's retry brought the child back.
#[test]
fn an_edge_marked_by_the_first_failure_only_is_caught() {
    const CHILD: usize = 2;
    let model = || {
        LeaseModel::new(Sql::CancelMarksOneEdge).with_workflow(
            TWO_PARENTS,
            OnParentFailure::Cancel,
            0,
        )
    };
    let name = always::CANCEL_CHILD_AFTER_DONE_PARENTS;
    let path = assert_caught_in(model(), &[name]).remove(0);
    let prefix = breaking_prefix(model(), &path, name).expect("the property breaks");
    let mut replay = Replay::of(model());
    let reopened = prefix.iter().any(|&action| {
        let before = replay.now().rows[CHILD].status;
        let after = replay.step(action).rows[CHILD].status;
        matches!(action, Action::Retry { item, .. } if item != CHILD)
            && before == Status::Cancelled
            && after == Status::Waiting
    });
    let last = *prefix.last().expect("a step");
    assert!(
        reopened && acted_on(last).is_some_and(|item| item != CHILD),
        "\"{name}\" was broken by {last:?}, not by a parent's step after a parent's retry \
         brought the child back: {prefix:?}"
    );
}

/// Workflows: `work_retry` of a child by its `waiting_on` alone, as
/// `RETRY_LIFE` does when this was written. The operator cancels the
/// waiting child, then a parent (whose edge resolves without cancelling
/// anything: the child is cancelled already), retries that parent, and
/// retries the child: its count leaves out the retried parent, so it is
/// released while that parent is pending, or, in the chain, is `pending`
/// at once while its parent waits. The checker must find both.
#[test]
fn a_child_retried_by_its_count_is_caught() {
    for parents in [TWO_PARENTS, CHAIN] {
        let model = || {
            LeaseModel::new(Sql::RetryByCount).with_workflow(parents, OnParentFailure::Cancel, 0)
        };
        let name = always::CANCEL_CHILD_AFTER_DONE_PARENTS;
        let path = assert_caught_in(model(), &[name]).remove(0);
        let prefix = breaking_prefix(model(), &path, name).expect("the property breaks");
        assert!(
            prefix.iter().any(|&action| matches!(
                action,
                Action::Retry { item, .. } if !model().parents[item].is_empty()
            )),
            "a child's retry is on the path: {prefix:?}"
        );
    }
}

/// The item a step's statement acts on, if it names one.
fn acted_on(action: Action) -> Option<usize> {
    match action {
        Action::Claim { item, .. }
        | Action::Renew { item, .. }
        | Action::Finish { item, .. }
        | Action::Release { item, .. }
        | Action::Fail { item, .. }
        | Action::Cancel { item }
        | Action::Retry { item, .. }
        | Action::LeaseLapses { item }
        | Action::ComesDue { item }
        | Action::CancelBegin { item }
        | Action::Enqueue { item, .. }
        | Action::EnqueueCommit { item } => Some(item),
        Action::Begin { .. }
        | Action::Pick { .. }
        | Action::Commit { .. }
        | Action::Replicate
        | Action::LoseSuffix
        | Action::Pause
        | Action::PauseReleased
        | Action::Snapshot { .. }
        | Action::Take { .. }
        | Action::Normalize { .. }
        | Action::Resume => None,
    }
}

/// Schedules (issue 34, 0.12.0): firing as a model of its own, explored
/// exhaustively. One schedule whose slots are 0, 1, 2; an abstract clock
/// (`now`) that may advance at any moment; two firers, each a transaction
/// of `src/verbs/schedule.rs`'s steps, between any two of which anything
/// else may happen:
/// 1. `DUE` (`Lock`): the schedule's row `FOR UPDATE SKIP LOCKED`, due when
///    its `next_slot <= now`. A row another firer holds is skipped (this
///    firer ends, fires nothing); a row locked reads its newest committed
///    version (READ COMMITTED's re-check).
/// 2. One insert per slot the round fires (`catch_up => 'all'`, every slot
///    from `next_slot` to `now`) (`Insert`), uncommitted.
/// 3. `RECORD` and the commit (`Commit`), or an abort (`Abort`: a crash, a
///    rollback, a claim's statement failing), which loses the inserts with
///    the record.
///
/// And a server that may lose everything after a replica's last replay (a
/// standby promoted, `Replicate` then `Lose`), which takes rows and items
/// back together. The items are a list, not a set keyed by slot: the model
/// proves the row protocol alone fires a slot once per history, without the
/// items' unique key, which the extension keeps as a second guard.
///
/// Properties: `always`: no slot has two items in the committed history; a
/// committed `next_slot` is after every slot with an item. `sometimes`:
/// every slot fired (so the check is not vacuous), a fire lost and fired
/// again. Broken variants the checker must catch: a fire that reads
/// `next_slot` without locking the row (`FireSql::NoRowLock`), and one that
/// commits its items before recording the slot (`FireSql::RecordApart`).
mod firing {
    use super::*;

    /// The slots the schedule names: 0..SLOTS.
    const SLOTS: u8 = 3;
    /// Firers.
    const FIRERS: usize = 2;

    /// The extension's firing, or a broken variant of it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub(super) enum FireSql {
        Extension,
        /// `DUE` without `FOR UPDATE`: a firer reads the row in its snapshot
        /// and goes on whether another holds it or not.
        NoRowLock,
        /// The items committed in a transaction of their own before the
        /// record (a lost record then refires the slot).
        RecordApart,
    }

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    enum Firer {
        Idle,
        /// Holds the row (or, under `NoRowLock`, read it) with this
        /// next_slot; `inserted` so far.
        Firing {
            next: u8,
            inserted: Vec<u8>,
        },
    }

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub(super) struct FireState {
        now: u8,
        next_slot: u8,
        items: Vec<u8>,
        firers: [Firer; FIRERS],
        /// A replica's copy of (next_slot, items), and whether the loss
        /// happened (once).
        replica: Option<(u8, Vec<u8>)>,
        lost: bool,
        refired_after_loss: bool,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub(super) enum FireAction {
        Tick,
        Lock(usize),
        Insert(usize),
        Commit(usize),
        Abort(usize),
        Replicate,
        Lose,
    }

    pub(super) struct FireModel {
        pub(super) sql: FireSql,
    }

    const ONE_ITEM_PER_SLOT: &str = "no slot has two items";
    const NEXT_AFTER_FIRED: &str = "next_slot is after every fired slot";
    const ALL_FIRED: &str = "every slot fired";
    const REFIRED: &str = "a lost fire fired again";

    impl Model for FireModel {
        type State = FireState;
        type Action = FireAction;

        fn init_states(&self) -> Vec<FireState> {
            vec![FireState {
                now: 0,
                next_slot: 0,
                items: Vec::new(),
                firers: [Firer::Idle, Firer::Idle],
                replica: None,
                lost: false,
                refired_after_loss: false,
            }]
        }

        fn actions(&self, s: &FireState, actions: &mut Vec<FireAction>) {
            if s.now < SLOTS - 1 {
                actions.push(FireAction::Tick);
            }
            for f in 0..FIRERS {
                match &s.firers[f] {
                    Firer::Idle => actions.push(FireAction::Lock(f)),
                    Firer::Firing { next, inserted } => {
                        let due = next + inserted.len() as u8;
                        if due <= s.now {
                            actions.push(FireAction::Insert(f));
                        }
                        actions.push(FireAction::Commit(f));
                        actions.push(FireAction::Abort(f));
                    }
                }
            }
            if !s.lost {
                actions.push(FireAction::Replicate);
                if s.replica.is_some() {
                    actions.push(FireAction::Lose);
                }
            }
        }

        fn next_state(&self, s: &FireState, action: FireAction) -> Option<FireState> {
            let mut n = s.clone();
            let held_by_other = |f: usize| {
                (0..FIRERS).any(|o| o != f && matches!(s.firers[o], Firer::Firing { .. }))
            };
            match action {
                FireAction::Tick => n.now += 1,
                FireAction::Lock(f) => {
                    let locked = self.sql != FireSql::NoRowLock && held_by_other(f);
                    if locked || s.next_slot > s.now {
                        return None; // skipped, or nothing due: nothing happens
                    }
                    n.firers[f] = Firer::Firing {
                        next: s.next_slot,
                        inserted: Vec::new(),
                    };
                }
                FireAction::Insert(f) => {
                    let Firer::Firing { next, inserted } = &mut n.firers[f] else {
                        return None;
                    };
                    let slot = *next + inserted.len() as u8;
                    inserted.push(slot);
                    if self.sql == FireSql::RecordApart {
                        // Committed at once, apart from the record.
                        n.items.push(slot);
                    }
                }
                FireAction::Commit(f) => {
                    let Firer::Firing { next, inserted } =
                        std::mem::replace(&mut n.firers[f], Firer::Idle)
                    else {
                        return None;
                    };
                    if self.sql != FireSql::RecordApart {
                        n.items.extend(&inserted);
                    }
                    if s.lost && !inserted.is_empty() {
                        n.refired_after_loss = true;
                    }
                    // RECORD: next_slot past the slots fired. (Without
                    // the lock, this is the firer's own view, written over
                    // whatever committed since.)
                    n.next_slot = next + inserted.len() as u8;
                }
                FireAction::Abort(f) => n.firers[f] = Firer::Idle,
                FireAction::Replicate => n.replica = Some((s.next_slot, s.items.clone())),
                FireAction::Lose => {
                    let (next_slot, items) = s.replica.clone()?;
                    n.next_slot = next_slot;
                    n.items = items;
                    n.firers = [Firer::Idle, Firer::Idle];
                    n.lost = true;
                }
            }
            Some(n)
        }

        fn properties(&self) -> Vec<Property<Self>> {
            vec![
                Property::always(ONE_ITEM_PER_SLOT, |_, s: &FireState| {
                    (0..SLOTS).all(|slot| s.items.iter().filter(|&&i| i == slot).count() <= 1)
                }),
                Property::always(NEXT_AFTER_FIRED, |_, s: &FireState| {
                    s.items.iter().all(|&i| i < s.next_slot)
                }),
                Property::sometimes(ALL_FIRED, |_, s: &FireState| {
                    (0..SLOTS).all(|slot| s.items.contains(&slot))
                }),
                Property::sometimes(REFIRED, |_, s: &FireState| s.refired_after_loss),
            ]
        }
    }

    fn check(sql: FireSql) -> impl Checker<FireModel> {
        let started = Instant::now();
        let checker = FireModel { sql }.checker().spawn_bfs().join();
        println!(
            "firing {sql:?}: {} unique states, max depth {}, {:.1?}",
            checker.unique_state_count(),
            checker.max_depth(),
            started.elapsed()
        );
        checker
    }

    #[test]
    fn each_slot_fires_once_in_every_history() {
        let checker = check(FireSql::Extension);
        checker.assert_properties();
        assert!(checker.unique_state_count() > 100);
    }

    #[test]
    fn a_fire_without_the_row_lock_or_with_the_record_apart_is_caught() {
        for sql in [FireSql::NoRowLock, FireSql::RecordApart] {
            let checker = check(sql);
            let found = checker.discovery(ONE_ITEM_PER_SLOT);
            assert!(found.is_some(), "{sql:?}: a slot fired twice is not found");
            println!(
                "{sql:?} fires a slot twice: {:?}",
                found.unwrap().into_actions()
            );
        }
    }
}

/// Checkpoints (0.12.0, issue 35; docs/contract.md, promise 12): workers
/// that all claim as one owner name write `work_progress` with whatever
/// token they last got, a superseded one included, while leases lapse and
/// the item is claimed anew or fails and is retried at any moment; a reader
/// (`work_item`, or the next claim's `progress`) looks at any moment.
/// Each action is one statement of `src/verbs/lease.rs` or
/// `src/verbs/claim.rs`, atomic under the item's row lock. A write is
/// named (epoch, n): the n-th write of the run with that epoch, so the
/// writes a worker makes are ordered by real time, and a run's writes all
/// come after the writes of the runs before it (a claim supersedes the
/// token before its holder's next statement).
mod checkpoints {
    use super::*;

    /// Workers (one owner name).
    const WORKERS: usize = 2;
    /// Claims of the item in a history (epochs 1..=CLAIMS).
    const CLAIMS: u8 = 3;
    /// Writes per run.
    const WRITES: u8 = 2;

    /// The extension's `work_progress`, or a broken variant of it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub(super) enum ProgressSql {
        /// `UPDATE ... WHERE owner AND epoch AND state = 'claimed'`.
        Extension,
        /// The owner's name checked, not the epoch (the bug report's
        /// check): any token of the shared name writes.
        OwnerOnly,
    }

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub(super) struct CheckpointState {
        /// The item's epoch (0: never claimed) and whether it is claimed.
        epoch: u8,
        claimed: bool,
        /// The stored checkpoint: (epoch, n) of the write that stored it.
        progress: Option<(u8, u8)>,
        /// Each worker's token (the epoch it was last given) and how many
        /// writes it made under it.
        workers: [(u8, u8); WORKERS],
        /// The newest checkpoint any reader has seen, and whether a reader
        /// ever saw one older than one seen before.
        seen: Option<(u8, u8)>,
        went_back: bool,
        /// A write replaced a newer checkpoint with an older one.
        overwrote_newer: bool,
        /// A claim handed out the checkpoint of an earlier run.
        resumed: bool,
        /// A write under a superseded token was refused.
        refused_stale: bool,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub(super) enum CheckpointAction {
        /// Worker w claims the item (it is pending, or its lease lapsed).
        Claim(usize),
        /// Worker w writes its next checkpoint with its token.
        Progress(usize),
        /// Worker w fails the run with its token (retry: pending).
        Fail(usize),
        /// A reader looks.
        Read,
    }

    pub(super) struct CheckpointModel {
        pub(super) sql: ProgressSql,
    }

    const NEVER_BACK: &str = "no reader sees an older checkpoint after a newer one";
    const NEWEST_RUN: &str = "no write replaces a newer checkpoint with an older one";
    const RESUMED: &str = "a claim resumes from an earlier run's checkpoint";
    const REFUSED: &str = "a stale write is refused";

    impl Model for CheckpointModel {
        type State = CheckpointState;
        type Action = CheckpointAction;

        fn init_states(&self) -> Vec<CheckpointState> {
            vec![CheckpointState {
                epoch: 0,
                claimed: false,
                progress: None,
                workers: [(0, 0); WORKERS],
                seen: None,
                went_back: false,
                overwrote_newer: false,
                resumed: false,
                refused_stale: false,
            }]
        }

        fn actions(&self, s: &CheckpointState, actions: &mut Vec<CheckpointAction>) {
            for w in 0..WORKERS {
                // A claimed item's lease may lapse at any moment: a claim
                // may always take it anew (the clock is abstract).
                if s.epoch < CLAIMS {
                    actions.push(CheckpointAction::Claim(w));
                }
                let (token, written) = s.workers[w];
                if token > 0 && written < WRITES {
                    actions.push(CheckpointAction::Progress(w));
                }
                if token > 0 {
                    actions.push(CheckpointAction::Fail(w));
                }
            }
            actions.push(CheckpointAction::Read);
        }

        fn next_state(
            &self,
            s: &CheckpointState,
            action: CheckpointAction,
        ) -> Option<CheckpointState> {
            let mut n = s.clone();
            match action {
                CheckpointAction::Claim(w) => {
                    n.epoch = s.epoch + 1;
                    n.claimed = true;
                    n.workers[w] = (n.epoch, 0);
                    // The claim row's progress: the stored checkpoint.
                    if s.progress.is_some() {
                        n.resumed = true;
                    }
                }
                CheckpointAction::Progress(w) => {
                    let (token, written) = s.workers[w];
                    let current = match self.sql {
                        ProgressSql::Extension => s.claimed && token == s.epoch,
                        ProgressSql::OwnerOnly => true,
                    };
                    n.workers[w].1 = written + 1;
                    if current {
                        if s.progress.is_some_and(|stored| (token, written) < stored) {
                            n.overwrote_newer = true;
                        }
                        n.progress = Some((token, written));
                    } else if token < s.epoch {
                        n.refused_stale = true;
                    }
                }
                CheckpointAction::Fail(w) => {
                    let (token, _) = s.workers[w];
                    if !(s.claimed && token == s.epoch) {
                        return None; // refused: nothing changes
                    }
                    n.claimed = false;
                }
                CheckpointAction::Read => {
                    if let Some(p) = s.progress {
                        if s.seen.is_some_and(|seen| p < seen) {
                            n.went_back = true;
                        }
                        n.seen = Some(n.seen.map_or(p, |seen| seen.max(p)));
                    }
                }
            }
            if n == *s {
                return None;
            }
            Some(n)
        }

        fn properties(&self) -> Vec<Property<Self>> {
            vec![
                Property::always(NEVER_BACK, |_, s: &CheckpointState| !s.went_back),
                Property::always(NEWEST_RUN, |_, s: &CheckpointState| !s.overwrote_newer),
                Property::sometimes(RESUMED, |_, s: &CheckpointState| s.resumed),
                Property::sometimes(REFUSED, |_, s: &CheckpointState| s.refused_stale),
            ]
        }
    }

    fn check(sql: ProgressSql) -> impl Checker<CheckpointModel> {
        let started = Instant::now();
        let checker = CheckpointModel { sql }.checker().spawn_bfs().join();
        println!(
            "checkpoints {sql:?}: {} unique states, max depth {}, {:.1?}",
            checker.unique_state_count(),
            checker.max_depth(),
            started.elapsed()
        );
        checker
    }

    #[test]
    fn no_reader_sees_an_older_checkpoint_after_a_newer_one() {
        let checker = check(ProgressSql::Extension);
        checker.assert_properties();
        assert!(checker.unique_state_count() > 100);
    }

    #[test]
    fn a_checkpoint_checked_by_owner_name_only_is_caught() {
        let checker = check(ProgressSql::OwnerOnly);
        let found = checker.discovery(NEVER_BACK);
        assert!(found.is_some(), "a checkpoint going back is not found");
        println!(
            "OwnerOnly: a reader sees an older checkpoint: {:?}",
            found.unwrap().into_actions()
        );
    }
}
