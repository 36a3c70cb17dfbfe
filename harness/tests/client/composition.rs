//! The composition test of issue 30: an operator verb changes only what it
//! names (docs/contract.md, *An operator verb changes only what it names*),
//! and every promise one connection can see still holds after it.
//!
//! On 0.11.0 `work_resume` deleted the queue's row of `workfence.queues`,
//! which also holds its serial groups, limits and rate window: one pause and
//! resume dropped them. A test per verb would have had to think of that
//! pair; this one is generated instead. Each case starts a fresh queue that
//! has every setting (grouped items, a concurrency limit, a rate limit whose
//! window is partly used, a pause, queue grants of two roles, grants
//! enforced, items pending, scheduled, claimed, lapsed, done, failed and
//! cancelled), then applies a random sequence of verbs (proptest): every
//! function of the extension that changes anything, through
//! `harness/src/calls.rs`, with random arguments (NULL limits too), from the
//! role that would call it (a worker and an operator role without
//! superuser, the grants managed by the superuser). A model of the queue
//! (its settings, grants, items and tokens) is stepped alongside, and after
//! every verb:
//!
//! - every setting equals the model's, read three ways: the queue's row of
//!   `workfence.queues` (paused, paused_at, grouped, concurrency, rate, per,
//!   the rate window's entries), `work_queue_stats` (paused, concurrency,
//!   rate, per) and `work_queue_grants` with the grant mode, and (from
//!   0.12.0) the case's schedule in `workfence.schedules` (its expression,
//!   catch_up, pause and queue; made, replaced, paused, resumed and removed
//!   by the schedule verbs, never due during a case, so that
//!   `work_fire_schedules` and the claims' lazy fire enqueue nothing); so a
//!   verb that changed a setting it does not name fails here, at that verb;
//! - (from 0.12.0, issue 35) enqueues of existing keys with `on_conflict`
//!   `replace` and `preserve_run_at` (a pending item's run_at, a finished
//!   item run again, a claimed one run once more after its holder's finish,
//!   final failure or dead letter) and `work_progress` with any token: each
//!   item's checkpoint and `rerun_after` are compared with the model's too,
//!   and only the current token stores a checkpoint;
//! - (from 0.12.0, issue 38) `work_enqueue_many`: up to five elements whose
//!   keys are the case's (existing keys, a key repeated in the call, now
//!   and then a NULL key), each with its run_at (now, 2000, an hour ahead)
//!   and in some calls a group, with any `on_conflict`, priority and
//!   max_attempts; the model applies the call as the `work_enqueue` of
//!   each element in turn, and its rows must be what those calls would have
//!   returned (in input order, the new ids growing); refused (42501: no
//!   `enqueue` grant, or an element running a cancelled item again without
//!   `operate`), the whole call changes nothing, as every refused call;
//! - (from 0.12.0, issue 36) the queue's row of `work_queue_counters`
//!   equals the model's counts: items enqueued (a finished or claimed item
//!   run again by `on_conflict` too), claimed, done, failed (final
//!   failures and dead letters), retried (`work_fail` with attempts left,
//!   `work_retry`), released, cancelled, lapsed leases claimed anew, and
//!   calls refused for a token that was not current (of an item that
//!   exists, in a queue the worker may claim from; a finish repeated with
//!   its own token is no refusal); so a verb that counts what it did not
//!   do, or forgets to count, fails at that verb (the file's cluster
//!   preloads the library);
//! - (from 0.12.0) `work_queue_stats`' counts of the queue's items in
//!   each state (`waiting` too), which the server keeps at each commit
//!   instead of counting the items, equal the model's items, and equal
//!   `queue_state_counts()` and `work_queue_stats_exact` (counted from the
//!   items);
//! - (from 0.12.0, issue 37) workflows: an enqueue names up to three of
//!   the case's keys as its parents (`after`, with `on_parent_failure`
//!   cancel or run; a purged key by its old id, refused 23503, as is a
//!   parent the worker may not `read`), so every verb meets items in the
//!   state `waiting` and their edges: a finish, a final failure, a dead
//!   letter or a cancel of a parent settles its children (released, pending
//!   even in a paused queue, or cancelled, transitively), `work_retry` of a
//!   parent brings back what its failure cancelled and of a child waits
//!   again for its open parents, `on_conflict` replaces a waiting item's
//!   payload and it keeps waiting, `work_purge` deletes the edges of what it
//!   purges. Each item's `waiting_on` and `on_parent_failure` and every edge
//!   of the case's items in `workfence.item_edges` (resolved, cancelled) are
//!   compared with the model's; after every verb `work_workflow` of each item
//!   with edges, as the operator, returns the model's graph (no row while
//!   the operator may not read the queue), and each claimed child's
//!   `work_parent_results` its parents' outcomes;
//! - every item of the queue equals the model's (state, attempts,
//!   max_attempts, group, priority, run_at, epoch, owner, lease lapsed or
//!   not), and each call's result is the model's (a claim returns exactly
//!   the items the model says, in claim order): a setting that the table
//!   keeps but a backend's cache lost, or the reverse, shows as a claim that
//!   takes too much or too little. Claims and token calls run on the
//!   worker's own long-lived connection, whose cached settings must follow
//!   every verb another connection commits;
//! - the promises, checked directly: at most one claimed item per group
//!   (flow control); a claim takes no more pending items than the
//!   concurrency limit leaves, and hands out no more than the rate leaves in
//!   the window; a paused queue's claim returns nothing; a token that is not
//!   current is refused, and `work_lease_status` agrees (promise 1); epochs
//!   only grow; a call refused for want of a queue grant (42501) changes
//!   nothing anywhere in the database; `work_may` answers as the model's
//!   grants say after every grant verb.
//!
//! Generated, not hand-listed: `every_function_of_the_extension_is_classified`
//! reads every function of schema `workfence` from a fresh install and fails
//! on one that [`FUNCTIONS`] does not classify, as a verb the generator
//! applies (it checks that the strategy produces it) or as not a verb, with
//! the reason. A function added to the extension therefore fails this file
//! until it is added to the generator and the model.
//!
//! Two broken resumes show that the test sees what it claims to see (each
//! runs the same property with `Verb::Resume` replaced, and requires it to
//! fail): `the_0_11_0_resume_is_caught`, issue 30's bug (the resume, then
//! the queue's row deleted in the same transaction as the superuser, which
//! is what 0.11.0's `DELETE ... WHERE paused` left), whose failure must
//! shrink to that one resume; and `a_resume_that_tells_no_session_is_caught`
//! (the row updated without the invalidation every backend's cache relies
//! on, `src/backend/paused.rs`), caught at the next claim of a backend that had read
//! the pause.
//!
//! No waiting on the clock: leases are 1 hour (live for the whole test) or
//! 1 microsecond (lapsed by the next statement), `run_at`s are now, 2000 or
//! an hour ahead, and the rate windows are an hour or longer, so no window
//! slides during a case. Every case has a queue of its own (`c<n>.jobs`) in
//! the test's database, on one cluster the file's tests share; its rows are
//! deleted at its end, so that every case reads a database of one case's
//! size.
//!
//! Seed: `WORKFENCE_COMPOSITION_SEED` (a fixed default, printed with the
//! figures: cases, verbs, time, calls per function, what the verbs met);
//! cases: `WORKFENCE_COMPOSITION_CASES`; `WORKFENCE_COMPOSITION_OLD_RESUME=1`
//! runs the main property against the simulated 0.11.0 resume (it must
//! fail, printing the minimal failing sequence). Needs the extension
//! installed (scripts/test.sh).

use crate::common;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::{connect_as, ok, snapshot};
use postgres::Client;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use workfence_harness::calls::{self, generated, Cycle, Enqueue, Enqueued, RunAt, SqlState, Token};
use workfence_harness::{Claim, Cluster};

/// The seed when `WORKFENCE_COMPOSITION_SEED` is not set.
const DEFAULT_SEED: u64 = 30;

/// Cases when `WORKFENCE_COMPOSITION_CASES` is not set.
const DEFAULT_CASES: u32 = 128;

/// Random verbs per case, after the setup.
const MAX_VERBS: usize = 30;

/// The role that enqueues, claims and presents tokens.
const WORKER: &str = "composition_worker";

/// The role that operates the queue (cancel, retry, reschedule, pause,
/// resume, limit, purge).
const OPERATOR: &str = "composition_operator";

/// Item keys a case uses (`k0` ...), groups (`g0` ...).
const KEYS: u8 = 12;
const GROUPS: u8 = 3;

/// `run_at` 2000-01-01 00:00:00+00, in microseconds since the Unix epoch.
const PAST: &str = "2000-01-01 00:00:00+00";
const PAST_US: i64 = 946_684_800_000_000;

/// What every function of schema `workfence` is to this test: a verb the
/// generator applies, or not a verb, and why. A function missing here fails
/// `every_function_of_the_extension_is_classified`.
#[derive(Debug)]
enum Kind {
    Verb,
    NotAVerb(&'static str),
}

const FUNCTIONS: &[(&str, Kind)] = &[
    (
        "items_sequence_floor",
        Kind::NotAVerb("the trigger function of workfence.items; no one calls it"),
    ),
    (
        "queue_counter_rows",
        Kind::NotAVerb(
            "reads the counters, changing nothing; compared with the model after every verb",
        ),
    ),
    (
        "queue_history_rows",
        Kind::NotAVerb(
            "reads the last hour the counters keep, changing nothing; its sums compared with the \
             counters after every verb",
        ),
    ),
    (
        "queue_state_counts",
        Kind::NotAVerb(
            "reads the state counts (a rebuild changes no item); compared with the model through \
             work_queue_stats after every verb",
        ),
    ),
    (
        "queue_counters",
        Kind::NotAVerb("reads the refusal and lapse counters, changing nothing"),
    ),
    ("work_assert", Kind::Verb),
    (
        "work_await",
        Kind::NotAVerb("reads one item's outcome (waiting for it), changing nothing"),
    ),
    ("work_cancel", Kind::Verb),
    ("work_claim", Kind::Verb),
    ("work_claim_key", Kind::Verb),
    ("work_enforce_grants", Kind::Verb),
    ("work_enqueue", Kind::Verb),
    ("work_enqueue_many", Kind::Verb),
    ("work_fail", Kind::Verb),
    ("work_fail_and_claim", Kind::Verb),
    ("work_finish", Kind::Verb),
    ("work_finish_and_claim", Kind::Verb),
    ("work_finish_many", Kind::Verb),
    ("work_grant", Kind::Verb),
    (
        "work_item",
        Kind::NotAVerb("reads one item (both forms), changing nothing"),
    ),
    (
        "work_items",
        Kind::NotAVerb("reads a page of a queue's items, changing nothing"),
    ),
    (
        "work_lease_status",
        Kind::NotAVerb(
            "reads a token's standing, changing nothing (checked after every token verb)",
        ),
    ),
    ("work_limit", Kind::Verb),
    (
        "work_parent_results",
        Kind::NotAVerb(
            "reads a claimed item's parents' outcomes under its token, changing nothing; \
             compared with the model after every claim of a child",
        ),
    ),
    (
        "work_workflow",
        Kind::NotAVerb(
            "reads the graph around an item, changing nothing; compared with the model after \
             every verb",
        ),
    ),
    (
        "work_may",
        Kind::NotAVerb(
            "reads the session role's grants, changing nothing (checked after every grant verb)",
        ),
    ),
    ("work_fire_schedules", Kind::Verb),
    ("work_pause", Kind::Verb),
    ("work_pause_schedule", Kind::Verb),
    ("work_progress", Kind::Verb),
    ("work_purge", Kind::Verb),
    ("work_release", Kind::Verb),
    ("work_renew", Kind::Verb),
    ("work_reschedule", Kind::Verb),
    ("work_resume", Kind::Verb),
    ("work_resume_schedule", Kind::Verb),
    ("work_retry", Kind::Verb),
    ("work_revoke", Kind::Verb),
    ("work_schedule", Kind::Verb),
    ("work_unschedule", Kind::Verb),
];

// ---------------------------------------------------------------------------
// The verbs and their generator.

/// A role of the queue grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Worker,
    Operator,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Worker => WORKER,
            Role::Operator => OPERATOR,
        }
    }
}

/// A capability of the queue grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cap {
    Enqueue,
    Claim,
    Operate,
    Read,
    Purge,
}

const CAPS: [Cap; 5] = [
    Cap::Enqueue,
    Cap::Claim,
    Cap::Operate,
    Cap::Read,
    Cap::Purge,
];

impl Cap {
    fn name(self) -> &'static str {
        match self {
            Cap::Enqueue => "enqueue",
            Cap::Claim => "claim",
            Cap::Operate => "operate",
            Cap::Read => "read",
            Cap::Purge => "purge",
        }
    }
}

/// The queues of a grant: the case's queue by name, or its prefix
/// (`c<n>.*`, which covers no other case's queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pat {
    Name,
    Prefix,
}

/// An owner name a worker claims under; `Intruder` only presents tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    W1,
    W2,
    Intruder,
}

impl Owner {
    fn name(self) -> &'static str {
        match self {
            Owner::W1 => "w1",
            Owner::W2 => "w2",
            Owner::Intruder => "intruder",
        }
    }
}

/// A lease: live for the whole test, or lapsed by the next statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lease {
    Long,
    Short,
}

impl Lease {
    fn text(self) -> &'static str {
        match self {
            Lease::Long => "1 hour",
            Lease::Short => "1 microsecond",
        }
    }
}

/// A `run_at`: the server's now, 2000-01-01, or an hour ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    Now,
    Past,
    Later,
}

impl When {
    fn run_at(self) -> RunAt {
        match self {
            When::Now => RunAt::In("0 seconds".into()),
            When::Past => RunAt::At(PAST.into()),
            When::Later => RunAt::In("1 hour".into()),
        }
    }

    fn at(self) -> At {
        match self {
            When::Now => At::Fresh,
            When::Past => At::Exact(PAST_US),
            When::Later => At::Future,
        }
    }
}

/// A release's delay or a failure's `retry_in`: none, or an hour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delay {
    Zero,
    Hour,
}

/// The window of a rate limit (each longer than any test run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Per {
    Hour,
    TwoHours,
    Day,
}

impl Per {
    fn text(self) -> &'static str {
        match self {
            Per::Hour => "1 hour",
            Per::TwoHours => "2 hours",
            Per::Day => "1 day",
        }
    }

    /// As the server renders it (`interval::text`).
    fn rendered(self) -> &'static str {
        match self {
            Per::Hour => "01:00:00",
            Per::TwoHours => "02:00:00",
            Per::Day => "1 day",
        }
    }
}

/// A token a worker presents: the `back`-th newest of the case's claims
/// (the newest when there are fewer), under another owner name if
/// `wrong_owner`; a token of no item before the case's first claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pick {
    back: u8,
    wrong_owner: bool,
}

impl Pick {
    const NEWEST: Pick = Pick {
        back: 0,
        wrong_owner: false,
    };
}

/// One call of a function of the extension, with its arguments.
#[derive(Clone, Debug, PartialEq)]
enum Verb {
    Enqueue {
        key: u8,
        group: Option<u8>,
        run_at: When,
        priority: i32,
        max_attempts: i32,
        /// From 0.12.0: `on_conflict`, one of [`ON_CONFLICTS`].
        on_conflict: u8,
        /// From 0.12.0: the trace, one of [`TRACES`].
        trace: u8,
        /// From 0.12.0 (workflows): the keys of its parents, `after`
        /// ([`Model::parents_for`] turns them into ids); none: no `after`.
        after: Vec<u8>,
        /// From 0.12.0: `on_parent_failure => 'run'` (else the default,
        /// cancel).
        run: bool,
    },
    /// `work_enqueue_many` (from 0.12.0): its elements in order, and the
    /// arguments common to them. The model applies it as the `work_enqueue`
    /// of each element in turn (no trace, no `after`).
    EnqueueMany {
        elements: Vec<Element>,
        priority: i32,
        max_attempts: i32,
        /// One of [`ON_CONFLICTS`].
        on_conflict: u8,
    },
    Claim {
        owner: Owner,
        lease: Lease,
        max_items: i32,
    },
    ClaimKey {
        key: u8,
        owner: Owner,
        lease: Lease,
    },
    Renew {
        token: Pick,
        lease: Lease,
    },
    /// `work_progress` (from 0.12.0) with the model's next checkpoint
    /// `{"n": ...}`.
    Progress {
        token: Pick,
    },
    Finish {
        token: Pick,
    },
    FinishMany {
        owner: Owner,
        tokens: Vec<Pick>,
    },
    FinishAndClaim {
        token: Pick,
        lease: Lease,
        max_items: i32,
    },
    FailAndClaim {
        token: Pick,
        retry_in: Delay,
        lease: Lease,
        max_items: i32,
    },
    Release {
        token: Pick,
        delay: Delay,
    },
    Fail {
        token: Pick,
        retry_in: Delay,
    },
    Assert {
        token: Pick,
    },
    Cancel {
        key: u8,
    },
    Retry {
        key: u8,
        run_at: Option<When>,
    },
    Reschedule {
        key: u8,
        run_at: When,
    },
    Pause,
    Resume,
    Limit {
        concurrency: Option<i32>,
        rate: Option<i32>,
        per: Per,
        /// From 0.12.0; None: serial groups.
        per_group: Option<i32>,
    },
    Purge {
        every_queue: bool,
    },
    Grant {
        capability: Cap,
        queues: Pat,
        role: Role,
    },
    Revoke {
        capability: Cap,
        queues: Pat,
        role: Role,
    },
    EnforceGrants(bool),
    /// `work_schedule` of the case's schedule (from 0.12.0): one of
    /// [`CRONS`] (yearly: never due during a case), one of [`CATCH_UPS`].
    Schedule {
        cron: u8,
        catch_up: u8,
    },
    Unschedule,
    PauseSchedule,
    ResumeSchedule,
    /// `work_fire_schedules()`, as the worker: nothing is due in a case.
    FireSchedules,
}

/// One element of a `work_enqueue_many` call: its key (None: a NULL
/// element, a new UUIDv7 key), group (None: a NULL element) and run_at
/// (`Now`: a NULL element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Element {
    key: Option<u8>,
    group: Option<u8>,
    run_at: When,
}

/// The case schedule's expressions: yearly, so that no slot comes due
/// while a case runs (a fire enqueues nothing the model does not know).
const CRONS: [&str; 2] = ["0 0 1 1 *", "0 0 2 1 *"];

/// `work_enqueue`'s `on_conflict`s (from 0.12.0).
const ON_CONFLICTS: [&str; 3] = ["keep", "replace", "preserve_run_at"];

/// The traces an enqueue gives (from 0.12.0): index 0 none, else a W3C
/// `traceparent` of a request.
const TRACES: [Option<&str>; 3] = [
    None,
    Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"),
];

/// The case schedule's `catch_up`s.
const CATCH_UPS: [&str; 3] = ["latest", "all", "none"];

impl Verb {
    /// The SQL function the verb calls.
    fn function(&self) -> &'static str {
        match self {
            Verb::Enqueue { .. } => "work_enqueue",
            Verb::EnqueueMany { .. } => "work_enqueue_many",
            Verb::Claim { .. } => "work_claim",
            Verb::ClaimKey { .. } => "work_claim_key",
            Verb::Renew { .. } => "work_renew",
            Verb::Progress { .. } => "work_progress",
            Verb::Finish { .. } => "work_finish",
            Verb::FinishMany { .. } => "work_finish_many",
            Verb::FinishAndClaim { .. } => "work_finish_and_claim",
            Verb::FailAndClaim { .. } => "work_fail_and_claim",
            Verb::Release { .. } => "work_release",
            Verb::Fail { .. } => "work_fail",
            Verb::Assert { .. } => "work_assert",
            Verb::Cancel { .. } => "work_cancel",
            Verb::Retry { .. } => "work_retry",
            Verb::Reschedule { .. } => "work_reschedule",
            Verb::Pause => "work_pause",
            Verb::Resume => "work_resume",
            Verb::Limit { .. } => "work_limit",
            Verb::Purge { .. } => "work_purge",
            Verb::Grant { .. } => "work_grant",
            Verb::Revoke { .. } => "work_revoke",
            Verb::EnforceGrants(_) => "work_enforce_grants",
            Verb::Schedule { .. } => "work_schedule",
            Verb::Unschedule => "work_unschedule",
            Verb::PauseSchedule => "work_pause_schedule",
            Verb::ResumeSchedule => "work_resume_schedule",
            Verb::FireSchedules => "work_fire_schedules",
        }
    }
}

fn key_name(key: u8) -> String {
    format!("k{key}")
}

fn group_name(group: u8) -> String {
    format!("g{group}")
}

fn pick() -> impl Strategy<Value = Pick> {
    (0..4u8, prop::bool::weighted(0.2)).prop_map(|(back, wrong_owner)| Pick { back, wrong_owner })
}

fn lease() -> impl Strategy<Value = Lease> {
    prop_oneof![3 => Just(Lease::Long), 1 => Just(Lease::Short)]
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![Just(When::Now), Just(When::Past), Just(When::Later)]
}

fn delay() -> impl Strategy<Value = Delay> {
    prop_oneof![2 => Just(Delay::Zero), 1 => Just(Delay::Hour)]
}

fn per() -> impl Strategy<Value = Per> {
    prop_oneof![Just(Per::Hour), Just(Per::TwoHours), Just(Per::Day)]
}

fn claimer() -> impl Strategy<Value = Owner> {
    prop_oneof![Just(Owner::W1), Just(Owner::W2)]
}

fn cap() -> impl Strategy<Value = Cap> {
    prop::sample::select(CAPS.to_vec())
}

fn pat() -> impl Strategy<Value = Pat> {
    prop_oneof![Just(Pat::Name), Just(Pat::Prefix)]
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::Worker), Just(Role::Operator)]
}

/// Any verb, with arguments in the ranges the model covers.
fn verb() -> impl Strategy<Value = Verb> {
    prop_oneof![
        5 => (
            0..KEYS,
            prop::option::weighted(0.4, 0..GROUPS),
            when(),
            prop_oneof![3 => Just(0), 1 => Just(-1), 1 => Just(1)],
            prop_oneof![Just(1), Just(2), Just(25)],
            prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
            0..TRACES.len() as u8,
            prop_oneof![
                3 => Just(Vec::new()),
                2 => prop::collection::vec(0..KEYS, 1..=3),
            ],
            prop::bool::weighted(0.3),
        )
            .prop_map(
                |(key, group, run_at, priority, max_attempts, on_conflict, trace, after, run)| {
                    Verb::Enqueue {
                        key,
                        group,
                        run_at,
                        priority,
                        max_attempts,
                        on_conflict,
                        trace,
                        after,
                        run,
                    }
                },
            ),
        // From 0.12.0: up to five elements, their keys from the case's
        // (so an existing key, and a key repeated in the call, are common; a
        // NULL key now and then); in groups in two calls of five; keep in
        // two of three (with no group: the one INSERT ... SELECT).
        3 => (
            prop::collection::vec(
                (
                    prop::option::weighted(0.9, 0..KEYS),
                    prop::option::weighted(0.7, 0..GROUPS),
                    when(),
                ),
                1..=5,
            ),
            prop::bool::weighted(0.4),
            prop_oneof![3 => Just(0), 1 => Just(-1), 1 => Just(1)],
            prop_oneof![Just(1), Just(2), Just(25)],
            prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
        )
            .prop_map(|(elements, grouped, priority, max_attempts, on_conflict)| {
                Verb::EnqueueMany {
                    elements: elements
                        .into_iter()
                        .map(|(key, group, run_at)| Element {
                            key,
                            group: group.filter(|_| grouped),
                            run_at,
                        })
                        .collect(),
                    priority,
                    max_attempts,
                    on_conflict,
                }
            }),
        6 => (claimer(), lease(), 1..=3i32)
            .prop_map(|(owner, lease, max_items)| Verb::Claim { owner, lease, max_items }),
        2 => (0..KEYS, claimer(), lease())
            .prop_map(|(key, owner, lease)| Verb::ClaimKey { key, owner, lease }),
        2 => (pick(), lease()).prop_map(|(token, lease)| Verb::Renew { token, lease }),
        2 => pick().prop_map(|token| Verb::Progress { token }),
        3 => pick().prop_map(|token| Verb::Finish { token }),
        1 => (
            prop_oneof![Just(Owner::W1), Just(Owner::W2), Just(Owner::Intruder)],
            prop::collection::vec(pick(), 1..=3),
        )
            .prop_map(|(owner, tokens)| Verb::FinishMany { owner, tokens }),
        2 => (pick(), lease(), 1..=2i32).prop_map(|(token, lease, max_items)| {
            Verb::FinishAndClaim { token, lease, max_items }
        }),
        2 => (pick(), delay(), lease(), 1..=2i32).prop_map(
            |(token, retry_in, lease, max_items)| Verb::FailAndClaim {
                token,
                retry_in,
                lease,
                max_items,
            }
        ),
        2 => (pick(), delay()).prop_map(|(token, delay)| Verb::Release { token, delay }),
        2 => (pick(), delay()).prop_map(|(token, retry_in)| Verb::Fail { token, retry_in }),
        1 => pick().prop_map(|token| Verb::Assert { token }),
        2 => (0..KEYS).prop_map(|key| Verb::Cancel { key }),
        2 => (0..KEYS, prop::option::of(when()))
            .prop_map(|(key, run_at)| Verb::Retry { key, run_at }),
        2 => (0..KEYS, when()).prop_map(|(key, run_at)| Verb::Reschedule { key, run_at }),
        2 => Just(Verb::Pause),
        3 => Just(Verb::Resume),
        2 => (
            prop::option::weighted(0.6, 1..=6i32),
            prop::option::weighted(0.6, 1..=16i32),
            per(),
            prop::option::weighted(0.5, 1..=3i32),
        )
            .prop_map(|(concurrency, rate, per, per_group)| Verb::Limit {
                concurrency,
                rate,
                per,
                per_group,
            }),
        // `work_limit(queue)`: every limit lifted.
        1 => per().prop_map(|per| Verb::Limit {
            concurrency: None,
            rate: None,
            per,
            per_group: None,
        }),
        1 => prop::bool::weighted(0.3).prop_map(|every_queue| Verb::Purge { every_queue }),
        1 => (cap(), pat(), role()).prop_map(|(capability, queues, role)| Verb::Grant {
            capability,
            queues,
            role,
        }),
        2 => (cap(), pat(), role()).prop_map(|(capability, queues, role)| Verb::Revoke {
            capability,
            queues,
            role,
        }),
        1 => any::<bool>().prop_map(Verb::EnforceGrants),
        2 => (0..CRONS.len() as u8, 0..CATCH_UPS.len() as u8)
            .prop_map(|(cron, catch_up)| Verb::Schedule { cron, catch_up }),
        1 => Just(Verb::Unschedule),
        1 => Just(Verb::PauseSchedule),
        1 => Just(Verb::ResumeSchedule),
        1 => Just(Verb::FireSchedules),
    ]
}

/// One case: the setup's limits, then the random verbs.
#[derive(Clone, Debug)]
struct Case {
    /// Whether the setup's items are in groups (in a third of the cases
    /// not, so that the queue, once its limits are lifted, claims by the
    /// plain path until a grouped enqueue).
    grouped: bool,
    concurrency: i32,
    rate: i32,
    per: Per,
    /// The setup's per_group (None: serial groups).
    per_group: Option<i32>,
    /// The attempts of the setup's lapsed lease (1: a lapsed final attempt,
    /// which the next claim dead-letters).
    lapsed_attempts: i32,
    verbs: Vec<Verb>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::bool::weighted(0.67),
        3..=5i32,
        10..=14i32,
        per(),
        prop::option::weighted(0.5, 2..=3i32),
        prop_oneof![Just(25), Just(1)],
        prop::collection::vec(verb(), 1..=MAX_VERBS),
    )
        .prop_map(
            |(grouped, concurrency, rate, per, per_group, lapsed_attempts, verbs)| Case {
                grouped,
                concurrency,
                rate,
                per,
                per_group,
                lapsed_attempts,
                verbs,
            },
        )
}

impl Case {
    /// The verbs that give the queue every setting before the random ones:
    /// grants of both roles (enforced), grouped (if `grouped`) and
    /// ungrouped items, limits,
    /// four claims in the rate window, an item of each state (a scheduled
    /// one, a live and a lapsed lease, done, failed, cancelled, and from
    /// 0.12.0 two children: `k7`, waiting for the claimed `k0` and the
    /// pending `k1` with `on_parent_failure` run, and `k8`, enqueued
    /// cancelled after `k7` and the failed `k4`), a pause.
    fn setup(&self) -> Vec<Verb> {
        let enqueue = |key, group: Option<u8>, run_at, max_attempts| Verb::Enqueue {
            key,
            group: group.filter(|_| self.grouped),
            run_at,
            priority: 0,
            max_attempts,
            on_conflict: 0,
            trace: 0,
            after: Vec::new(),
            run: false,
        };
        let child = |key, group: Option<u8>, after, run| Verb::Enqueue {
            key,
            group: group.filter(|_| self.grouped),
            run_at: When::Now,
            priority: 0,
            max_attempts: 25,
            on_conflict: 0,
            trace: 0,
            after,
            run,
        };
        let grant = |capability, queues, role| Verb::Grant {
            capability,
            queues,
            role,
        };
        let claim_key = |key, owner, lease| Verb::ClaimKey { key, owner, lease };
        vec![
            grant(Cap::Enqueue, Pat::Name, Role::Worker),
            grant(Cap::Claim, Pat::Prefix, Role::Worker),
            // A workflow's parents must be readable to its enqueuer.
            grant(Cap::Read, Pat::Prefix, Role::Worker),
            grant(Cap::Operate, Pat::Name, Role::Operator),
            grant(Cap::Enqueue, Pat::Name, Role::Operator),
            grant(Cap::Purge, Pat::Prefix, Role::Operator),
            grant(Cap::Read, Pat::Name, Role::Operator),
            Verb::EnforceGrants(true),
            enqueue(0, Some(0), When::Now, 25),
            enqueue(1, Some(0), When::Now, 25),
            enqueue(2, Some(1), When::Now, self.lapsed_attempts),
            enqueue(3, None, When::Now, 25),
            enqueue(4, None, When::Now, 1),
            enqueue(5, None, When::Later, 25),
            enqueue(6, Some(1), When::Past, 25),
            Verb::Limit {
                concurrency: Some(self.concurrency),
                rate: Some(self.rate),
                per: self.per,
                per_group: self.per_group,
            },
            claim_key(4, Owner::W1, Lease::Long),
            Verb::Fail {
                token: Pick::NEWEST,
                retry_in: Delay::Zero,
            },
            claim_key(3, Owner::W1, Lease::Long),
            Verb::Finish {
                token: Pick::NEWEST,
            },
            Verb::Cancel { key: 6 },
            claim_key(0, Owner::W2, Lease::Long),
            claim_key(2, Owner::W1, Lease::Short),
            child(7, Some(2), vec![0, 1], true),
            child(8, None, vec![7, 4], false),
            Verb::Pause,
        ]
    }
}

// ---------------------------------------------------------------------------
// The model.

/// An item's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Claimed,
    Done,
    Failed,
    Cancelled,
    /// From 0.12.0 (workflows): waiting for its parents.
    Waiting,
}

/// Every state, in the order of the counts compared ([`Model::check`]):
/// `work_queue_stats`' pending (due and scheduled), claimed (live and
/// expired), done, failed, cancelled, waiting.
const STATES: [State; 6] = [
    State::Pending,
    State::Claimed,
    State::Done,
    State::Failed,
    State::Cancelled,
    State::Waiting,
];

impl State {
    fn parse(text: &str) -> Result<State, String> {
        STATES
            .into_iter()
            .find(|state| state.name() == text)
            .ok_or_else(|| format!("unknown state {text:?}"))
    }

    /// As the server names it.
    fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Claimed => "claimed",
            State::Done => "done",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Waiting => "waiting",
        }
    }

    /// Done, failed or cancelled: what a child counts as settled.
    fn settled(self) -> bool {
        self.finished()
    }

    fn finished(self) -> bool {
        matches!(self, State::Done | State::Failed | State::Cancelled)
    }
}

/// An item's `run_at`: exact (microseconds since the Unix epoch, as read
/// back), or, for a change made by the verb just run, the server's clock
/// during the verb (`Fresh`: due from then on) or about an hour ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Exact(i64),
    Fresh,
    Future,
}

/// One item, as the model predicts it and as the server has it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Item {
    id: i64,
    key: String,
    state: State,
    attempts: i32,
    max_attempts: i32,
    group: Option<String>,
    priority: i32,
    run_at: At,
    epoch: Option<i64>,
    owner: Option<String>,
    /// While claimed: whether the lease has lapsed (`lease_until` NULL
    /// otherwise).
    lapsed: Option<bool>,
    /// From 0.12.0 (group heads, src/verbs/flow.rs): `turn` (microseconds) and
    /// `behind`, read back from the server after each verb, not predicted:
    /// the model checks the heads' invariant on them and orders a flow
    /// claim's due items by them.
    turn: Option<i64>,
    behind: bool,
    /// From 0.12.0: the checkpoint's `n` (`work_progress` writes `{"n": ...}`)
    /// and `rerun_after` (a run's epoch: that run ends with one more run;
    /// minus an epoch: that token finished, and the item runs once more).
    progress: Option<i64>,
    rerun: Option<i64>,
    /// From 0.12.0: its trace, one of [`TRACES`] (what every claim hands out).
    trace: u8,
    /// From 0.12.0 (workflows): its edges from parents not resolved yet,
    /// and its `on_parent_failure` (None without parents).
    waiting_on: i32,
    on_parent_failure: Option<String>,
}

/// An edge of `workfence.item_edges` (from 0.12.0), as the model has it:
/// its parent has settled and the child counted it (`resolved`); the
/// parent's failure cancelled the child (`cancelled`), so that a retry of
/// the parent brings the child back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Edge {
    resolved: bool,
    cancelled: bool,
}

/// The settings of a queue (a queue without a row has the defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Settings {
    paused: bool,
    grouped: bool,
    concurrency: Option<i32>,
    rate: Option<i32>,
    /// The rate window, as the server renders it.
    per: Option<String>,
    /// Claims in the rate window (rate slots used; every window of a case
    /// is hours long, longer than the case).
    used: i64,
    /// Items of one group claimed at once at most (from 0.12.0); None: 1.
    per_group: Option<i32>,
}

/// The model of one case's queue.
#[derive(Clone, Debug)]
struct Model {
    queue: String,
    prefix: String,
    settings: Settings,
    grants: BTreeSet<(Role, Cap, Pat)>,
    enforced: bool,
    /// By id.
    items: Vec<Item>,
    /// Every token the case's claims handed out, oldest first.
    tokens: Vec<Token>,
    /// The server's clock at the last observation (microseconds).
    now: i64,
    /// The newest epoch handed out in the case.
    max_epoch: i64,
    /// Lapsed final attempts a claim dead-letters `n` of, in no order.
    maybe_dead: Option<(Vec<i64>, usize)>,
    /// The case's schedule (named `<queue>.tick`, on the queue), if any.
    schedule: Option<Sched>,
    /// The `n` of the next `work_progress` (from 0.12.0).
    progress_next: i64,
    /// Runs sent round once more so far (from 0.12.0).
    reruns: u64,
    /// When a claimed item that `on_conflict` replaced runs once more
    /// (from 0.12.0), by id.
    rerun_at: BTreeMap<i64, At>,
    /// What the queue's counters must say (from 0.12.0,
    /// `work_queue_counters`), indexed by [`Counted`].
    counts: [i64; COUNTED],
    /// From 0.12.0 (workflows): the edges, by (parent, child).
    edges: BTreeMap<(i64, i64), Edge>,
    /// The ids of the keys a purge deleted (the newest per key), which an
    /// `after` may still name (refused, 23503).
    gone: BTreeMap<String, i64>,
    /// Every id the case's queue has had (its edges are read by them).
    ids_ever: BTreeSet<i64>,
    /// What the last verb's workflows went through (the figures).
    events: BTreeMap<&'static str, u64>,
}

/// The columns of `work_queue_counters` the model counts, in the view's
/// order.
#[derive(Clone, Copy, Debug)]
enum Counted {
    Enqueued,
    Claimed,
    Done,
    Failed,
    Retried,
    Released,
    Cancelled,
    Refused,
    Lapsed,
}

/// How many [`Counted`] columns there are.
const COUNTED: usize = 9;

/// A schedule as the model has it: its expression and catch_up (indexes
/// into [`CRONS`] and [`CATCH_UPS`]), whether it is paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sched {
    cron: u8,
    catch_up: u8,
    paused: bool,
}

/// How items settled for their children (workflows, from 0.12.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settled {
    Done,
    Failed,
    Cancelled,
}

/// What a claim takes, by the model.
#[derive(Debug, Default)]
struct Plan {
    /// The items claimed, in claim order.
    take: Vec<i64>,
    /// Lapsed final attempts, `dead` of which are dead-lettered.
    exhausted: Vec<i64>,
    dead: usize,
}

/// The facts a claim is checked against (flow control, work_pause).
#[derive(Debug)]
struct ClaimFacts {
    paused: bool,
    claimed_before: i64,
    used_before: i64,
    concurrency: Option<i32>,
    rate: Option<i32>,
    handed: i64,
    from_pending: i64,
    /// Lapsed final attempts dead-lettered.
    dead: usize,
    /// The queue had neither groups nor limits (the plain claim path).
    plain: bool,
    /// Items claimed per group before the claim, and the queue's
    /// per_group: a lowered per_group takes nothing back, but a claim takes
    /// no item of a group that has per_group claimed.
    group_claimed: BTreeMap<String, usize>,
    per_group: usize,
}

enum ClaimOf<'a> {
    Queue(i32),
    Key(&'a str),
}

impl Model {
    fn new(queue: String, prefix: String) -> Model {
        Model {
            queue,
            prefix,
            settings: Settings::default(),
            grants: BTreeSet::new(),
            enforced: false,
            items: Vec::new(),
            tokens: Vec::new(),
            now: 0,
            max_epoch: 0,
            maybe_dead: None,
            counts: [0; COUNTED],
            schedule: None,
            progress_next: 1,
            reruns: 0,
            rerun_at: BTreeMap::new(),
            edges: BTreeMap::new(),
            gone: BTreeMap::new(),
            ids_ever: BTreeSet::new(),
            events: BTreeMap::new(),
        }
    }

    /// The case schedule's name.
    fn schedule_name(&self) -> String {
        format!("{}.tick", self.queue)
    }

    fn pattern(&self, pat: Pat) -> String {
        match pat {
            Pat::Name => self.queue.clone(),
            Pat::Prefix => self.prefix.clone(),
        }
    }

    /// Whether `role` may use `capability` on the case's queue.
    fn may(&self, role: Role, capability: Cap) -> bool {
        !self.enforced
            || self
                .grants
                .iter()
                .any(|&(r, c, _)| r == role && c == capability)
    }

    /// Counts `n` of `what` for the queue's counters.
    fn counted(&mut self, what: Counted, n: i64) {
        self.counts[what as usize] += n;
    }

    /// A call with `token` that is not current, on an item that exists in
    /// a queue the worker may claim from (otherwise it answers as for no
    /// item), is a refusal the counters count, at once; a finish repeated
    /// with its own token is not one.
    fn refusal(&mut self, token: &Token, finishing: bool) {
        let answered_true = self.current(token) || (finishing && self.done_by(token));
        let counted =
            !answered_true && self.may(Role::Worker, Cap::Claim) && self.by_id(token.id).is_some();
        if counted {
            self.counted(Counted::Refused, 1);
        }
    }

    fn by_key(&self, key: &str) -> Option<usize> {
        self.items.iter().position(|i| i.key == key)
    }

    fn by_id(&self, id: i64) -> Option<usize> {
        self.items.iter().position(|i| i.id == id)
    }

    fn token(&self, pick: Pick) -> Token {
        let mut token = match self.tokens.len() {
            0 => Token::new(-1, Owner::W1.name(), 1),
            n => self.tokens[n - 1 - usize::from(pick.back).min(n - 1)].clone(),
        };
        if pick.wrong_owner {
            token.owner = Owner::Intruder.name().into();
        }
        token
    }

    /// Promise 1: the token is the item's current one (and the worker may
    /// claim from the queue, or its token calls answer as for no item).
    fn current(&self, token: &Token) -> bool {
        self.may(Role::Worker, Cap::Claim)
            && self.by_id(token.id).is_some_and(|i| {
                let item = &self.items[i];
                item.state == State::Claimed
                    && item.epoch == Some(token.epoch)
                    && item.owner.as_deref() == Some(token.owner.as_str())
            })
    }

    /// The item is done under this very token (a repeated finish is true).
    fn done_by(&self, token: &Token) -> bool {
        self.may(Role::Worker, Cap::Claim)
            && self.by_id(token.id).is_some_and(|i| {
                let item = &self.items[i];
                (item.state == State::Done || item.rerun == Some(-token.epoch))
                    && item.epoch == Some(token.epoch)
                    && item.owner.as_deref() == Some(token.owner.as_str())
            })
    }

    /// An item's place in claim order (priority, run_at, id). A `Fresh`
    /// run_at is the verb's clock: after every due one (at or before the
    /// last observation), before every one an hour ahead; a `Future` one,
    /// set by the verb, is after every other.
    fn order(&self, item: &Item) -> (i32, i64, i64) {
        let at = match item.run_at {
            At::Exact(t) => t,
            At::Fresh => self.now + 1,
            At::Future => i64::MAX,
        };
        (item.priority, at, item.id)
    }

    /// `items` in claim order.
    fn sorted<'a>(&self, mut items: Vec<&'a Item>) -> Vec<&'a Item> {
        items.sort_by_key(|i| self.order(i));
        items
    }

    /// An item's place in a flow claim's serving order (from 0.12.0,
    /// src/verbs/flow.rs): a pending item by (priority, turn else run_at, id),
    /// where `turn` is when a claim of its group made it the group's head;
    /// a lapsed lease by its claim order.
    fn serving(&self, item: &Item) -> (i32, i64, i64) {
        match (item.state, item.turn) {
            (State::Pending, Some(turn)) => (item.priority, turn, item.id),
            _ => self.order(item),
        }
    }

    /// A group whose first pending item in claim order is behind, if any:
    /// the heads' invariant (src/verbs/flow.rs) broken between two verbs.
    fn stranded_group(&self) -> Option<String> {
        let groups: BTreeSet<&String> =
            self.items.iter().filter_map(|i| i.group.as_ref()).collect();
        groups.into_iter().find_map(|g| {
            let pending = self
                .items
                .iter()
                .filter(|i| i.state == State::Pending && i.group.as_ref() == Some(g));
            let first = pending.min_by_key(|i| self.order(i))?;
            first.behind.then(|| g.clone())
        })
    }

    fn due(&self, item: &Item) -> bool {
        match item.run_at {
            At::Exact(t) => t <= self.now,
            At::Fresh => true,
            At::Future => false,
        }
    }

    fn lapsed(item: &Item) -> bool {
        item.state == State::Claimed && item.lapsed == Some(true)
    }

    fn claimed(&self) -> i64 {
        self.items
            .iter()
            .filter(|i| i.state == State::Claimed)
            .count() as i64
    }

    /// A grouped item's group lets a claim take it (docs/contract.md, flow
    /// control): no other item of the group claimed and, for a pending one,
    /// no pending item of the group before it, due or not.
    fn group_allows(&self, item: &Item) -> bool {
        let Some(group) = &item.group else {
            return true;
        };
        let same = |o: &&Item| o.id != item.id && o.group.as_ref() == Some(group);
        let per_group = self.settings.per_group.unwrap_or(1) as usize;
        self.items
            .iter()
            .filter(same)
            .filter(|o| o.state == State::Claimed)
            .count()
            < per_group
            && (item.state == State::Claimed
                || !self
                    .items
                    .iter()
                    .filter(same)
                    .any(|o| o.state == State::Pending && self.order(o) < self.order(item)))
    }

    /// What a claim takes: the due items and lapsed leases the settings
    /// allow, in claim order, and the lapsed final attempts it
    /// dead-letters (docs/contract.md: `work_claim`, `work_claim_key`,
    /// promise 2, flow control).
    fn plan<'a>(&'a self, of: &ClaimOf<'_>) -> Plan {
        let s = &self.settings;
        if s.paused {
            return Plan::default();
        }
        let limited = s.concurrency.is_some() || s.rate.is_some();
        let flow = s.grouped || limited;
        let max = match of {
            ClaimOf::Queue(n) => i64::from(*n),
            ClaimOf::Key(_) => 1,
        };
        let by_rate = s
            .rate
            .map_or(max, |r| (i64::from(r) - s.used).clamp(0, max));
        let by_slots = s
            .concurrency
            .map_or(max, |c| (i64::from(c) - self.claimed()).clamp(0, max));
        let (due_n, items_n) = (by_slots.min(by_rate), by_rate);
        if items_n == 0 {
            return Plan::default();
        }
        let exhausted = |i: &Item| Model::lapsed(i) && i.attempts >= i.max_attempts;
        match of {
            ClaimOf::Queue(_) => {
                // A flow claim picks in serving order (group heads,
                // round-robin); the rows come back in claim order.
                let pick_order = |mut items: Vec<&'a Item>| -> Vec<&'a Item> {
                    if flow {
                        items.sort_by_key(|i| self.serving(i));
                        items
                    } else {
                        self.sorted(items)
                    }
                };
                let due: Vec<&Item> = pick_order(
                    self.items
                        .iter()
                        .filter(|i| {
                            i.state == State::Pending
                                && self.due(i)
                                && (!flow || self.group_allows(i))
                        })
                        .collect(),
                )
                .into_iter()
                .take(due_n as usize)
                .collect();
                let any_lapsed = self.items.iter().any(Model::lapsed);
                if !flow && !any_lapsed {
                    return Plan {
                        take: due.iter().map(|i| i.id).collect(),
                        ..Plan::default()
                    };
                }
                let lapsed: Vec<&Item> = self
                    .sorted(
                        self.items
                            .iter()
                            .filter(|i| Model::lapsed(i) && !exhausted(i))
                            .collect(),
                    )
                    .into_iter()
                    .take(items_n as usize)
                    .collect();
                let mut groups = BTreeSet::new();
                let take = self
                    .sorted(
                        pick_order(due.into_iter().chain(lapsed).collect())
                            .into_iter()
                            .take(items_n as usize)
                            .filter(|i| i.group.as_ref().is_none_or(|g| groups.insert(g.clone())))
                            .collect(),
                    )
                    .into_iter()
                    .map(|i| i.id)
                    .collect();
                let exhausted: Vec<i64> = self
                    .items
                    .iter()
                    .filter(|i| exhausted(i))
                    .map(|i| i.id)
                    .collect();
                let dead = exhausted.len().min(items_n as usize);
                Plan {
                    take,
                    exhausted,
                    dead,
                }
            }
            ClaimOf::Key(key) => {
                let Some(i) = self.by_key(key) else {
                    return Plan::default();
                };
                let item = &self.items[i];
                let pending = item.state == State::Pending && self.due(item);
                if !pending && !Model::lapsed(item) {
                    return Plan::default();
                }
                if exhausted(item) {
                    return Plan {
                        exhausted: vec![item.id],
                        dead: 1,
                        ..Plan::default()
                    };
                }
                if flow && ((pending && due_n == 0) || !self.group_allows(item)) {
                    return Plan::default();
                }
                Plan {
                    take: vec![item.id],
                    ..Plan::default()
                }
            }
        }
    }

    /// Checks a claim's rows against `plan` and applies them: the items
    /// claimed under `owner` and `lease`, the dead letters, the rate window.
    fn claimed_as(
        &mut self,
        plan: &Plan,
        claims: &[Claim],
        owner: &str,
        lease: Lease,
    ) -> Result<ClaimFacts, String> {
        let facts = ClaimFacts {
            paused: self.settings.paused,
            claimed_before: self.claimed(),
            used_before: self.settings.used,
            concurrency: self.settings.concurrency,
            rate: self.settings.rate,
            handed: claims.len() as i64,
            from_pending: claims
                .iter()
                .filter(|c| {
                    self.by_id(c.id)
                        .is_some_and(|i| self.items[i].state == State::Pending)
                })
                .count() as i64,
            dead: plan.dead,
            plain: !self.settings.grouped
                && self.settings.concurrency.is_none()
                && self.settings.rate.is_none(),
            group_claimed: self
                .items
                .iter()
                .filter(|i| i.state == State::Claimed)
                .filter_map(|i| i.group.clone())
                .fold(BTreeMap::new(), |mut m, g| {
                    *m.entry(g).or_default() += 1;
                    m
                }),
            per_group: self.settings.per_group.unwrap_or(1) as usize,
        };
        self.counted(Counted::Claimed, facts.handed);
        self.counted(Counted::Lapsed, facts.handed - facts.from_pending);
        let got: Vec<i64> = claims.iter().map(|c| c.id).collect();
        if got != plan.take {
            return Err(format!(
                "the claim returned items {} where the model takes {} (claim order, the \
                 settings {:?}, the items before:\n{})",
                self.keys(&got),
                self.keys(&plan.take),
                self.settings,
                self.describe()
            ));
        }
        let mut epochs = BTreeSet::new();
        for claim in claims {
            if claim.epoch <= self.max_epoch || !epochs.insert(claim.epoch) {
                return Err(format!(
                    "epoch {} handed out after epoch {} (docs/contract.md, Words: epochs \
                     strictly increase)",
                    claim.epoch, self.max_epoch
                ));
            }
            let i = self.by_id(claim.id).expect("a planned item");
            let item = &mut self.items[i];
            if claim.attempt != item.attempts + 1 || claim.key != item.key {
                return Err(format!(
                    "claim of {} returned attempt {} (model {}) and key {}",
                    item.key,
                    claim.attempt,
                    item.attempts + 1,
                    claim.key
                ));
            }
            item.state = State::Claimed;
            item.attempts += 1;
            item.epoch = Some(claim.epoch);
            item.owner = Some(owner.to_owned());
            item.lapsed = Some(lease == Lease::Short);
            self.tokens.push(claim.token(owner));
        }
        self.max_epoch = self.max_epoch.max(epochs.last().copied().unwrap_or(0));
        if self.settings.rate.is_some() {
            self.settings.used += claims.len() as i64;
        }
        if plan.dead == plan.exhausted.len() {
            for &id in &plan.exhausted {
                self.dead_letter(id);
            }
        } else {
            self.maybe_dead = Some((plan.exhausted.clone(), plan.dead));
        }
        Ok(facts)
    }

    /// A lapsed final attempt dead-lettered (promise 2): failed, its token
    /// dead.
    fn dead_letter(&mut self, id: i64) {
        let i = self.by_id(id).expect("a lapsed item");
        self.counted(Counted::Failed, 1);
        self.items[i].state = State::Failed;
        self.items[i].lapsed = None;
        // A replace named this run: it runs once more (from 0.12.0).
        if self.items[i].rerun.is_some() && self.items[i].rerun == self.items[i].epoch {
            self.run_once_more(i, false);
        }
        if self.items[i].state == State::Failed {
            self.settle(vec![id], Settled::Failed);
        }
    }

    /// The keys of `ids`, for messages.
    fn keys(&self, ids: &[i64]) -> String {
        let keys: Vec<String> = ids
            .iter()
            .map(|&id| {
                self.by_id(id)
                    .map_or(format!("#{id}"), |i| self.items[i].key.clone())
            })
            .collect();
        format!("[{}]", keys.join(", "))
    }

    fn describe(&self) -> String {
        self.items.iter().map(|i| format!("  {i:?}\n")).collect()
    }

    /// Finishes the item of a current token.
    fn finish(&mut self, token: &Token) {
        let i = self.by_id(token.id).expect("a current token's item");
        self.counted(Counted::Done, 1);
        self.items[i].state = State::Done;
        self.items[i].lapsed = None;
        if self.items[i].rerun == Some(token.epoch) {
            self.run_once_more(i, true);
        }
        // A run sent round once more is not done: it releases nothing.
        if self.items[i].state == State::Done {
            self.settle(vec![token.id], Settled::Done);
        }
    }

    /// `on_conflict` replace (or, `preserve`, preserve_run_at) of item `i`
    /// with `run_at` (from 0.12.0, src/verbs/life.rs).
    fn conflict(&mut self, i: usize, run_at: At, preserve: bool) {
        if !matches!(self.items[i].state, State::Pending | State::Waiting) {
            // One more run asked for: an enqueue to the counters.
            self.counted(Counted::Enqueued, 1);
        }
        let item = &mut self.items[i];
        match item.state {
            State::Pending => {
                if !preserve {
                    item.run_at = run_at;
                }
                item.progress = None;
                item.rerun = None;
            }
            // From 0.12.0 (workflows): a waiting item takes the payload
            // and run_at as a pending one does, and keeps waiting.
            State::Waiting => {
                if !preserve {
                    item.run_at = run_at;
                }
                item.progress = None;
                item.rerun = None;
            }
            State::Claimed => {
                item.rerun = item.epoch;
                item.progress = None;
                let at = if preserve { At::Fresh } else { run_at };
                self.rerun_at.insert(item.id, at);
            }
            State::Done | State::Failed | State::Cancelled => {
                // From 0.12.0: back to waiting while a parent is open.
                item.state = if item.waiting_on > 0 {
                    State::Waiting
                } else {
                    State::Pending
                };
                item.attempts = 0;
                item.run_at = run_at;
                item.lapsed = None;
                item.progress = None;
                item.rerun = None;
                if item.on_parent_failure.is_some() {
                    let id = item.id;
                    self.rewait(id);
                }
            }
        }
    }

    /// The end of a run whose epoch `rerun` named: pending once more,
    /// attempts afresh, checkpoint cleared; `rerun` minus the epoch after a
    /// finish, NULL after a failure.
    fn run_once_more(&mut self, i: usize, finished: bool) {
        self.reruns += 1;
        let at = self.rerun_at.remove(&self.items[i].id).unwrap_or(At::Fresh);
        let item = &mut self.items[i];
        item.state = State::Pending;
        item.attempts = 0;
        item.run_at = at;
        item.lapsed = None;
        item.progress = None;
        item.rerun = if finished {
            item.epoch.map(|e| -e)
        } else {
            None
        };
    }

    /// Fails the item of a current token (docs/contract.md, `work_fail`).
    fn fail(&mut self, token: &Token, retry_in: Delay) {
        let i = self.by_id(token.id).expect("a current token's item");
        let final_attempt = self.items[i].attempts >= self.items[i].max_attempts;
        self.counted(
            if final_attempt {
                Counted::Failed
            } else {
                Counted::Retried
            },
            1,
        );
        let item = &mut self.items[i];
        item.lapsed = None;
        if item.attempts >= item.max_attempts {
            item.state = State::Failed;
            if item.rerun == Some(token.epoch) {
                self.run_once_more(i, false);
            }
            if self.items[i].state == State::Failed {
                self.settle(vec![token.id], Settled::Failed);
            }
        } else {
            item.state = State::Pending;
            item.run_at = match retry_in {
                Delay::Zero => At::Fresh,
                Delay::Hour => At::Future,
            };
        }
    }

    /// Counts a workflow event of the verb (the figures).
    fn event(&mut self, what: &'static str) {
        *self.events.entry(what).or_default() += 1;
    }

    /// The ids an enqueue of `key` names as `after`, in its order: the
    /// items of the keys `after` names, and for a key the model has none of
    /// (purged) its old id, unless the key exists (then its `after` is
    /// ignored, so only live parents are named); and whether one of them is
    /// an id of no item. None: no `after` (none given, or the key exists and
    /// the worker may not read its queue, where the parents' check comes
    /// before the key's).
    fn parents_for(&self, after: &[u8], key: u8) -> Option<(Vec<i64>, bool)> {
        if after.is_empty() {
            return None;
        }
        let exists = self.by_key(&key_name(key)).is_some();
        if exists && !self.may(Role::Worker, Cap::Read) {
            return None;
        }
        let mut ids = Vec::new();
        let mut unknown = false;
        for parent in after {
            let name = key_name(*parent);
            if let Some(i) = self.by_key(&name) {
                ids.push(self.items[i].id);
            } else if let (false, Some(&id)) = (exists, self.gone.get(&name)) {
                ids.push(id);
                unknown = true;
            }
        }
        Some((ids, unknown))
    }

    /// An enqueue the server refuses with 23503 (a parent no item is, or in
    /// a queue the worker may not read): a new key naming parents.
    fn parent_refused(&self, after: &[u8], key: u8) -> bool {
        self.by_key(&key_name(key)).is_none()
            && self.parents_for(after, key).is_some_and(|(ids, unknown)| {
                !ids.is_empty() && (unknown || !self.may(Role::Worker, Cap::Read))
            })
    }

    /// A new child `id` of the distinct `parents` (in `after`'s order):
    /// how it enters (docs/reference.md, `work_enqueue`'s after), its
    /// edges. Returns its state, `waiting_on` and `on_parent_failure`.
    fn enter(&mut self, id: i64, parents: &[i64], run: bool) -> (State, i32, Option<String>) {
        let states: Vec<State> = parents
            .iter()
            .map(|p| self.items[self.by_id(*p).expect("a live parent")].state)
            .collect();
        let ended_badly: Vec<bool> = states
            .iter()
            .map(|s| matches!(s, State::Failed | State::Cancelled))
            .collect();
        let open = states.iter().filter(|s| !s.settled()).count() as i32;
        let state = if ended_badly.iter().any(|bad| *bad) && !run {
            self.counted(Counted::Cancelled, 1);
            self.event("children enqueued cancelled (a parent had ended failed or cancelled)");
            State::Cancelled
        } else if open == 0 {
            self.event("children enqueued pending (their parents had ended)");
            State::Pending
        } else {
            self.event("children enqueued waiting");
            State::Waiting
        };
        for (n, parent) in parents.iter().enumerate() {
            // Every parent that ended badly forbids a `cancel` child.
            let cancelled = !run && ended_badly[n];
            self.edges.insert(
                (*parent, id),
                Edge {
                    resolved: states[n].settled(),
                    cancelled,
                },
            );
        }
        let policy = if run { "run" } else { "cancel" };
        (state, open, Some(policy.to_owned()))
    }

    /// The items `parents` settled as `outcome` in the verb's transaction
    /// (an accepted finish, a final failure, a dead letter, a cancel): each
    /// unresolved edge from them resolves once, the child counts it; a
    /// waiting child whose count reaches 0 is pending; with a failure or
    /// cancel, a waiting child whose policy is cancel is cancelled, and so,
    /// level by level, are its own (src/verbs/workflow.rs, SETTLE). An edge
    /// is marked cancelled when the parent's end forbids its child: policy
    /// cancel, and the child waiting or cancelled already by another
    /// parent's end (judged as the items and edges were before the level).
    fn settle(&mut self, parents: Vec<i64>, outcome: Settled) {
        let mut level = parents;
        let mut failed = outcome != Settled::Done;
        while !level.is_empty() {
            let marks: Vec<((i64, i64), bool)> = self
                .edges
                .iter()
                .filter(|((parent, _), edge)| level.contains(parent) && !edge.resolved)
                .map(|(&(parent, child), _)| {
                    let forbids = failed
                        && self.by_id(child).is_some_and(|i| {
                            let c = &self.items[i];
                            c.on_parent_failure.as_deref() == Some("cancel")
                                && (c.state == State::Waiting
                                    || self
                                        .edges
                                        .iter()
                                        .any(|(&(_, to), edge)| to == child && edge.cancelled))
                        });
                    ((parent, child), forbids)
                })
                .collect();
            let mut children: BTreeMap<i64, (i32, bool)> = BTreeMap::new();
            for ((parent, child), forbids) in marks {
                let edge = self.edges.get_mut(&(parent, child)).expect("an edge");
                edge.resolved = true;
                edge.cancelled = forbids;
                let counted = children.entry(child).or_default();
                counted.0 += 1;
                counted.1 |= forbids;
            }
            let mut next = Vec::new();
            for (child, (n, cancel)) in children {
                let Some(i) = self.by_id(child) else {
                    continue;
                };
                self.items[i].waiting_on -= n;
                if self.items[i].state != State::Waiting {
                    continue;
                }
                if cancel {
                    self.items[i].state = State::Cancelled;
                    self.counted(Counted::Cancelled, 1);
                    self.event("waiting children cancelled by a parent's end (transitively)");
                    next.push(child);
                } else if self.items[i].waiting_on <= 0 {
                    self.items[i].state = State::Pending;
                    self.event("waiting children released (pending)");
                    if self.settings.paused {
                        self.event("children released into their paused queue");
                    }
                    if failed {
                        self.event("children released by a parent's failure (run)");
                    }
                }
            }
            level = next;
            failed = true;
        }
    }

    /// `work_retry` sent `id` back: the children its failure cancelled wait
    /// again (their edges from it unresolved, counted again), unless
    /// another parent's end still forbids them, level by level
    /// (src/verbs/workflow.rs, REOPEN).
    fn reopen(&mut self, id: i64) {
        let mut level = vec![id];
        while !level.is_empty() {
            let reopened: Vec<(i64, i64)> = self
                .edges
                .iter()
                .filter(|((parent, _), edge)| level.contains(parent) && edge.cancelled)
                .map(|(&key, _)| key)
                .collect();
            let mut children: BTreeMap<i64, i32> = BTreeMap::new();
            for (_, child) in &reopened {
                *children.entry(*child).or_default() += 1;
            }
            let back: Vec<i64> = children
                .keys()
                .copied()
                .filter(|child| {
                    self.by_id(*child)
                        .is_some_and(|i| self.items[i].state == State::Cancelled)
                        && !self.edges.iter().any(|(&(parent, to), edge)| {
                            to == *child && edge.cancelled && !level.contains(&parent)
                        })
                })
                .collect();
            for key in reopened {
                self.edges.insert(
                    key,
                    Edge {
                        resolved: false,
                        cancelled: false,
                    },
                );
            }
            for (child, n) in children {
                if let Some(i) = self.by_id(child) {
                    self.items[i].waiting_on += n;
                }
            }
            for child in &back {
                let i = self.by_id(*child).expect("a child");
                self.items[i].state = State::Waiting;
                self.event("cancelled children back to waiting by a parent's retry");
            }
            level = back;
        }
    }

    /// A child `id` back by `work_retry` or an `on_conflict` re-run: it
    /// waits again for each parent that has not settled now (retried or
    /// run again since it settled), whose edge was resolved
    /// (src/verbs/workflow.rs, REWAIT).
    fn rewait(&mut self, id: i64) {
        let open: Vec<(i64, i64)> = self
            .edges
            .iter()
            .filter(|(&(parent, child), edge)| {
                child == id
                    && edge.resolved
                    && self.by_id(parent).is_some_and(|i| {
                        matches!(
                            self.items[i].state,
                            State::Pending | State::Claimed | State::Waiting
                        )
                    })
            })
            .map(|(&key, _)| key)
            .collect();
        if open.is_empty() {
            return;
        }
        for key in &open {
            self.edges.get_mut(key).expect("an edge").resolved = false;
        }
        let i = self.by_id(id).expect("the child");
        self.items[i].waiting_on += open.len() as i32;
        if self.items[i].state == State::Pending {
            self.items[i].state = State::Waiting;
        }
        self.event("children back waiting again for a parent run again since");
    }

    /// `work_retry` of the child `id`: its parents' ends no longer forbid
    /// it (src/verbs/workflow.rs, FORGIVE).
    fn forgive(&mut self, id: i64) {
        for (_, edge) in self.edges.iter_mut().filter(|((_, child), _)| *child == id) {
            edge.cancelled = false;
        }
    }

    /// What `work_workflow(id)` returns, by the model: the item (depth
    /// 0), its ancestors (-1, -2, ...) and descendants (1, 2, ...), each
    /// at its nearest depth, nearest first, then by id; each row's parents
    /// sorted. Rows: (id, key, state, depth, parents).
    fn workflow(&self, id: i64) -> Vec<(i64, String, String, i32, Vec<i64>)> {
        let mut depth: BTreeMap<i64, i32> = BTreeMap::new();
        if self.by_id(id).is_none() {
            return Vec::new();
        }
        depth.insert(id, 0);
        for step in [-1, 1] {
            let mut frontier = vec![id];
            let mut d = 0;
            while !frontier.is_empty() {
                d += step;
                let mut next = Vec::new();
                for &(parent, child) in self.edges.keys() {
                    let (from, to) = if step < 0 {
                        (child, parent)
                    } else {
                        (parent, child)
                    };
                    if frontier.contains(&from) && !depth.contains_key(&to) {
                        depth.insert(to, d);
                        next.push(to);
                    }
                }
                frontier = next;
            }
        }
        let mut rows: Vec<(i64, String, String, i32, Vec<i64>)> = depth
            .into_iter()
            .filter_map(|(node, d)| {
                let item = &self.items[self.by_id(node)?];
                let parents: Vec<i64> = self
                    .edges
                    .keys()
                    .filter(|(_, child)| *child == node)
                    .map(|(parent, _)| *parent)
                    .collect();
                Some((
                    node,
                    item.key.clone(),
                    item.state.name().to_owned(),
                    d,
                    parents,
                ))
            })
            .collect();
        rows.sort_by_key(|r| (r.3.abs(), r.3, r.0));
        rows
    }

    /// The items with an edge, either end.
    fn linked(&self) -> BTreeSet<i64> {
        self.edges.keys().flat_map(|&(p, c)| [p, c]).collect()
    }

    /// What `work_parent_results` under a current token of `id` says of
    /// each parent, by the model: its id and its state (a done parent's
    /// value is its result, JSON null in these cases; another's is an
    /// object with its state).
    fn parent_states(&self, id: i64) -> BTreeMap<String, State> {
        self.edges
            .keys()
            .filter(|(_, child)| *child == id)
            .filter_map(|(parent, _)| {
                let i = self.by_id(*parent)?;
                Some((parent.to_string(), self.items[i].state))
            })
            .collect()
    }

    /// Compares the server with the model; the model takes the server's
    /// exact times for the ones it knew only roughly, and the dead letters
    /// of a claim that chose among lapsed final attempts.
    fn check(&mut self, seen: &Observed) -> Result<(), String> {
        let mut diffs = Vec::new();
        let defaults = (Settings::default(), false);
        let (row, paused_at) = seen.row.as_ref().unwrap_or(&defaults);
        if *row != self.settings {
            diffs.push(format!(
                "workfence.queues: the server has {row:?}, the model {:?}",
                self.settings
            ));
        }
        if *paused_at != self.settings.paused {
            diffs.push(format!(
                "workfence.queues.paused_at is {} while paused is {}",
                if *paused_at { "set" } else { "NULL" },
                self.settings.paused
            ));
        }
        let stats = seen.stats.clone().unwrap_or_default();
        let model_stats = StatsRow {
            paused: self.settings.paused,
            concurrency: self.settings.concurrency,
            rate: self.settings.rate,
            per: self.settings.per.clone(),
            per_group: self.settings.per_group,
        };
        if stats != model_stats {
            diffs.push(format!(
                "work_queue_stats: the server has {stats:?}, the model {model_stats:?}"
            ));
        }
        if seen.grants != self.grants {
            diffs.push(format!(
                "work_queue_grants: the server has {:?}, the model {:?}",
                seen.grants, self.grants
            ));
        }
        if seen.enforced != self.enforced {
            diffs.push(format!(
                "queue grants enforced: the server says {}, the model {}",
                seen.enforced, self.enforced
            ));
        }
        let schedule = self.schedule.map(|s| {
            (
                CRONS[s.cron as usize].to_string(),
                CATCH_UPS[s.catch_up as usize].to_string(),
                s.paused,
                self.queue.clone(),
            )
        });
        if seen.schedule != schedule {
            diffs.push(format!(
                "workfence.schedules: the server has {:?}, the model {schedule:?}",
                seen.schedule
            ));
        }
        if let Some((candidates, n)) = self.maybe_dead.take() {
            let dead: Vec<i64> = candidates
                .iter()
                .copied()
                .filter(|&id| {
                    seen.items
                        .iter()
                        .any(|i| i.id == id && i.state == State::Failed)
                })
                .collect();
            if dead.len() != n {
                diffs.push(format!(
                    "the claim dead-lettered {} of the lapsed final attempts {}; the model \
                     says {n}",
                    self.keys(&dead),
                    self.keys(&candidates)
                ));
            }
            for id in dead {
                self.dead_letter(id);
            }
        }
        let ids = |items: &[Item]| items.iter().map(|i| i.id).collect::<Vec<_>>();
        if ids(&seen.items) != ids(&self.items) {
            diffs.push(format!(
                "items: the server has {:?}, the model {:?}",
                seen.items.iter().map(|i| &i.key).collect::<Vec<_>>(),
                self.items.iter().map(|i| &i.key).collect::<Vec<_>>()
            ));
        } else {
            for (model, server) in self.items.iter_mut().zip(&seen.items) {
                let At::Exact(at) = server.run_at else {
                    unreachable!("read back exactly")
                };
                let at_ok = match model.run_at {
                    At::Exact(t) => t == at,
                    At::Fresh => self.now <= at && at <= seen.now,
                    At::Future => at > seen.now + 30 * 60 * 1_000_000,
                };
                let mut expected = model.clone();
                expected.run_at = server.run_at;
                expected.turn = server.turn;
                expected.behind = server.behind;
                if expected != *server || !at_ok {
                    diffs.push(format!(
                        "item {}: the server has\n    {server:?}\n  the model\n    {model:?}",
                        model.key
                    ));
                }
                model.run_at = server.run_at;
                model.turn = server.turn;
                model.behind = server.behind;
            }
            if let Some(stranded) = self.stranded_group() {
                diffs.push(format!(
                    "group {stranded}: its first pending item is behind (no claim would \
                     ever take it):\n{}",
                    self.describe()
                ));
            }
        }
        let mut states = [0i64; 6];
        for item in &self.items {
            states[STATES
                .iter()
                .position(|s| *s == item.state)
                .expect("a state")] += 1;
        }
        if seen.states != states {
            diffs.push(format!(
                "work_queue_stats (pending, claimed, done, failed, cancelled, waiting): the \
                 server has {:?}, the model's items {states:?}",
                seen.states
            ));
        }
        // The counts the server keeps, read by the function under the view
        // and counted from the items (from 0.12.0, waiting too).
        if seen.state_counts != seen.states || seen.exact != seen.states {
            diffs.push(format!(
                "state counts (pending, claimed, done, failed, cancelled, waiting): \
                 work_queue_stats {:?}, queue_state_counts() {:?}, work_queue_stats_exact {:?}",
                seen.states, seen.state_counts, seen.exact
            ));
        }
        // Workflows (from 0.12.0): every edge of the case's items.
        if seen.edges != self.edges {
            diffs.push(format!(
                "workfence.item_edges (parent, child): the server has {:?}, the model {:?}",
                seen.edges, self.edges
            ));
        }
        // The last hour adds up to the counters (every case runs within
        // the hour of its queue's first count), and ends with the backlog
        // the state counts have, once they are kept.
        let (sums, backlog) = seen.hour;
        if sums[..] != seen.counts[..4] {
            diffs.push(format!(
                "work_queue_history's sums (enqueued, claimed, done, failed) {sums:?}, \
                 work_queue_counters {:?}",
                &seen.counts[..4]
            ));
        }
        if backlog.is_some_and(|b| b != seen.states[0]) {
            diffs.push(format!(
                "work_queue_history: the last backlog {backlog:?}, work_queue_stats' pending {}",
                seen.states[0]
            ));
        }
        if seen.counts != self.counts {
            diffs.push(format!(
                "work_queue_counters (enqueued, claimed, done, failed, retried, released, \
                 cancelled, refused, lapsed): the server has {:?}, the model {:?}",
                seen.counts, self.counts
            ));
            // Compared once: the model takes the server's, so that the next
            // verb is judged on its own.
            self.counts = seen.counts;
        }
        self.now = seen.now;
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(diffs.join("\n"))
        }
    }
}

// ---------------------------------------------------------------------------
// The server.

/// The queue's columns of `work_queue_stats` that are settings (a queue
/// without a row there has the defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct StatsRow {
    paused: bool,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: Option<String>,
    per_group: Option<i32>,
}

/// What the server has, read as the superuser.
struct Observed {
    /// The server's clock, microseconds since the Unix epoch.
    now: i64,
    /// The queue's row of `workfence.queues`, and whether `paused_at` is set.
    row: Option<(Settings, bool)>,
    stats: Option<StatsRow>,
    grants: BTreeSet<(Role, Cap, Pat)>,
    enforced: bool,
    items: Vec<Item>,
    /// The case's schedule as `workfence.schedules` has it: cron, catch_up,
    /// paused, queue.
    schedule: Option<(String, String, bool, String)>,
    /// The queue's row of `work_queue_counters` (from 0.12.0), in
    /// [`Counted`] order; zeros when it has none (nothing counted yet).
    counts: [i64; COUNTED],
    /// Its items per state as `work_queue_stats` counts them (pending,
    /// claimed, done, failed, cancelled, waiting), from the server's state
    /// counts; as `queue_state_counts()` reads them; and as
    /// `work_queue_stats_exact` counts the items.
    states: [i64; 6],
    state_counts: [i64; 6],
    exact: [i64; 6],
    /// The edges (from 0.12.0) into or out of an item the case's queue
    /// has had.
    edges: BTreeMap<(i64, i64), Edge>,
    /// Its last hour (`work_queue_history`, from 0.12.0): the sums of
    /// enqueued, claimed, done and failed over the hour, and the last
    /// minute's backlog.
    hour: ([i64; 4], Option<i64>),
}

/// The test's three connections to one database, and its figures.
struct Ctx {
    _cluster: Arc<Cluster>,
    /// The superuser: grant management, and every observation.
    admin: Client,
    worker: Client,
    operator: Client,
    /// How `Verb::Resume` resumes.
    resume: ResumeAs,
    /// Calls per function, the setup's included.
    calls: BTreeMap<&'static str, u64>,
    /// Calls per function of the generated verbs only (not the setup's),
    /// each run through to its checks: what shows the generator reaches
    /// every verb.
    generated: BTreeMap<&'static str, u64>,
    /// What the verbs met, counted (the figures).
    seen: BTreeMap<&'static str, u64>,
    cases: u64,
    verbs: u64,
}

/// How the test resumes a queue: with `work_resume`, or one of two broken
/// resumes the test must catch (each is `work_resume`'s effect on the table
/// done otherwise, as the superuser, in one transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResumeAs {
    /// `work_resume` as installed.
    Installed,
    /// 0.11.0's: `DELETE FROM workfence.queues ... WHERE paused`, with the
    /// invalidation at commit (issue 30): `work_resume` as the operator,
    /// then the queue's row deleted in its transaction.
    Of0110,
    /// A resume that updates the row but tells no session (no invalidation):
    /// backends that read the pause go on seeing it.
    Silent,
}

/// Case numbers, for queue names: every case (shrinking too) gets a queue
/// no earlier case touched.
static NEXT_CASE: AtomicU64 = AtomicU64::new(0);

fn cluster() -> Arc<Cluster> {
    // Preloaded: the counters live in shared memory (the maintenance
    // worker stays idle, no `workfence.maintenance_database`).
    common::shared_cluster_built(
        |builder| builder.setting("shared_preload_libraries", "pg_workfence"),
        |cluster| {
            let mut c = ok(cluster.connect(), "connecting");
            ok(
                c.batch_execute(&format!(
                    "CREATE ROLE {WORKER} LOGIN; CREATE ROLE {OPERATOR} LOGIN"
                )),
                "creating the worker and operator roles",
            );
        },
    )
}

impl Ctx {
    fn new(database: &str, resume: ResumeAs) -> Ctx {
        let cluster = cluster();
        ok(cluster.create_database(database), "creating the database");
        let mut admin = ok(cluster.connect_to(database), "connecting");
        ok(
            admin.batch_execute(&format!(
                "GRANT USAGE ON SCHEMA workfence TO {WORKER}, {OPERATOR};
                 GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO {WORKER}, {OPERATOR}"
            )),
            "granting the functions",
        );
        let worker = connect_as(&cluster, database, WORKER, "composition worker");
        let operator = connect_as(&cluster, database, OPERATOR, "composition operator");
        Ctx {
            _cluster: cluster,
            admin,
            worker,
            operator,
            resume,
            calls: BTreeMap::new(),
            seen: BTreeMap::new(),
            cases: 0,
            verbs: 0,
            generated: BTreeMap::new(),
        }
    }

    fn count(&mut self, what: &'static str, n: u64) {
        if n > 0 {
            *self.seen.entry(what).or_default() += n;
        }
    }

    fn observe(&mut self, m: &Model) -> Result<Observed, String> {
        let db = |e: postgres::Error| format!("observing: {}", error_text(&e));
        let row = self
            .admin
            .query_opt(
                "SELECT q.paused, q.paused_at IS NOT NULL, q.grouped, q.concurrency, q.rate,
                        q.per::text,
                        (SELECT pg_catalog.count(*) FROM workfence.queue_slots AS s
                          WHERE s.queue = q.queue AND s.kind = 'r' AND s.used_at IS NOT NULL),
                        q.per_group
                   FROM workfence.queues AS q
                  WHERE q.queue = $1",
                &[&m.queue],
            )
            .map_err(db)?
            .map(|r| {
                (
                    Settings {
                        paused: r.get(0),
                        grouped: r.get(2),
                        concurrency: r.get(3),
                        rate: r.get(4),
                        per: r.get(5),
                        used: r.get(6),
                        per_group: r.get(7),
                    },
                    r.get(1),
                )
            });
        let stats_row = calls::queue_stats(&mut self.admin)
            .map_err(db)?
            .into_iter()
            .find(|s| s.queue == m.queue);
        let paused = stats_row.as_ref().map(|s| s.paused);
        // The state counts the server keeps (from 0.12.0): pending (due
        // or scheduled), claimed (live or expired), done, failed, cancelled.
        // (The harness's row has no `waiting`: read beside it.)
        let waiting: i64 = self
            .admin
            .query_opt(
                "SELECT s.waiting FROM workfence.work_queue_stats AS s WHERE s.queue = $1",
                &[&m.queue],
            )
            .map_err(db)?
            .map_or(0, |r| r.get(0));
        let states = stats_row.as_ref().map_or([0; 6], |s| {
            [
                s.pending + s.scheduled,
                s.claimed + s.expired,
                s.done,
                s.failed,
                s.cancelled,
                waiting,
            ]
        });
        let six = |sql: &str, client: &mut Client| -> Result<[i64; 6], String> {
            client
                .query_opt(sql, &[&m.queue])
                .map_err(db)?
                .map_or(Ok([0; 6]), |r| {
                    <[i64; 6]>::try_from(r.get::<_, Vec<i64>>(0))
                        .map_err(|v| format!("{sql}: {v:?}"))
                })
        };
        let state_counts = six(
            "SELECT ARRAY[s.pending, s.claimed, s.done, s.failed, s.cancelled, s.waiting]
               FROM workfence.queue_state_counts() AS s WHERE s.queue = $1",
            &mut self.admin,
        )?;
        let exact = six(
            "SELECT ARRAY[s.pending + s.scheduled, s.claimed + s.expired, s.done, s.failed,
                          s.cancelled, s.waiting]
               FROM workfence.work_queue_stats_exact AS s WHERE s.queue = $1",
            &mut self.admin,
        )?;
        let ids: Vec<i64> = m.ids_ever.iter().copied().collect();
        let edges = self
            .admin
            .query(
                "SELECT e.parent, e.child, e.resolved, e.cancelled FROM workfence.item_edges AS e
                  WHERE e.parent = ANY ($1) OR e.child = ANY ($1)",
                &[&ids],
            )
            .map_err(db)?
            .iter()
            .map(|r| {
                (
                    (r.get(0), r.get(1)),
                    Edge {
                        resolved: r.get(2),
                        cancelled: r.get(3),
                    },
                )
            })
            .collect();
        let limits = calls::queue_limits(&mut self.admin)
            .map_err(db)?
            .into_iter()
            .find(|s| s.queue == m.queue);
        let stats = match (paused, limits) {
            (None, None) => None,
            (Some(paused), Some(limits)) => Some(StatsRow {
                paused,
                concurrency: limits.concurrency,
                rate: limits.rate,
                per: limits.per,
                per_group: limits.per_group,
            }),
            _ => return Err("work_queue_stats changed between two reads".into()),
        };
        let mut grants = BTreeSet::new();
        for g in calls::queue_grants(&mut self.admin).map_err(db)? {
            let role = match g.role.as_str() {
                WORKER => Role::Worker,
                OPERATOR => Role::Operator,
                _ => continue,
            };
            let pat = if g.queues == m.queue {
                Pat::Name
            } else if g.queues == m.prefix {
                Pat::Prefix
            } else {
                continue;
            };
            let cap = CAPS
                .into_iter()
                .find(|c| c.name() == g.capability)
                .ok_or_else(|| format!("unknown capability {}", g.capability))?;
            grants.insert((role, cap, pat));
        }
        let enforced: bool = self
            .admin
            .query_one(
                "SELECT EXISTS (SELECT FROM workfence.queue_grant_mode)",
                &[],
            )
            .map_err(db)?
            .get(0);
        let rows = self
            .admin
            .query(
                "WITH t AS MATERIALIZED (SELECT pg_catalog.clock_timestamp() AS now)
                 SELECT (extract(epoch FROM t.now) * 1000000)::int8, i.id, i.key,
                        i.state::text, i.attempts, i.max_attempts, i.group_key, i.priority,
                        (extract(epoch FROM i.run_at) * 1000000)::int8, i.epoch, i.owner,
                        CASE WHEN i.lease_until IS NOT NULL THEN i.lease_until <= t.now END,
                        (extract(epoch FROM i.turn) * 1000000)::int8, i.behind,
                        (i.progress OPERATOR(pg_catalog.->>) 'n')::int8, i.rerun_after, i.trace,
                        i.waiting_on, i.on_parent_failure
                   FROM t LEFT JOIN workfence.items AS i ON i.queue = $1
                  ORDER BY i.id",
                &[&m.queue],
            )
            .map_err(db)?;
        let now: i64 = rows[0].get(0);
        let mut items = Vec::new();
        for r in &rows {
            let Some(id) = r.get::<_, Option<i64>>(1) else {
                continue;
            };
            items.push(Item {
                id,
                key: r.get(2),
                state: State::parse(r.get(3))?,
                attempts: r.get(4),
                max_attempts: r.get(5),
                group: r.get(6),
                priority: r.get(7),
                run_at: At::Exact(r.get(8)),
                epoch: r.get(9),
                owner: r.get(10),
                lapsed: r.get(11),
                turn: r.get(12),
                behind: r.get(13),
                progress: r.get(14),
                rerun: r.get(15),
                trace: {
                    let trace: Option<String> = r.get(16);
                    TRACES
                        .iter()
                        .position(|t| *t == trace.as_deref())
                        .ok_or_else(|| format!("an item's trace {trace:?} no enqueue gave"))?
                        as u8
                },
                waiting_on: r.get(17),
                on_parent_failure: r.get(18),
            });
        }
        let schedule = self
            .admin
            .query_opt(
                "SELECT s.cron, s.catch_up, s.paused, s.queue FROM workfence.schedules AS s
                  WHERE s.name = $1",
                &[&m.schedule_name()],
            )
            .map_err(db)?
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)));
        let counts = self
            .admin
            .query_opt(
                "SELECT ARRAY[c.enqueued, c.claimed, c.done, c.failed, c.retried, c.released,
                              c.cancelled, c.refused, c.lapsed]
                   FROM workfence.work_queue_counters AS c
                  WHERE c.queue = $1",
                &[&m.queue],
            )
            .map_err(db)?
            .map_or(Ok([0; COUNTED]), |r| {
                <[i64; COUNTED]>::try_from(r.get::<_, Vec<i64>>(0))
                    .map_err(|v| format!("work_queue_counters: {v:?}"))
            })?;
        let hour = self
            .admin
            .query_one(
                "SELECT ARRAY[coalesce(sum(h.enqueued), 0), coalesce(sum(h.claimed), 0),
                              coalesce(sum(h.done), 0), coalesce(sum(h.failed), 0)]::bigint[],
                        (array_agg(h.backlog ORDER BY h.minute DESC))[1]
                   FROM workfence.queue_history_rows($1) AS h",
                &[&m.queue],
            )
            .map_err(db)
            .and_then(|r| {
                let sums = <[i64; 4]>::try_from(r.get::<_, Vec<i64>>(0))
                    .map_err(|v| format!("work_queue_history: {v:?}"))?;
                Ok((sums, r.get::<_, Option<i64>>(1)))
            })?;
        Ok(Observed {
            now,
            row,
            stats,
            grants,
            enforced,
            items,
            schedule,
            counts,
            states,
            state_counts,
            exact,
            edges,
            hour,
        })
    }

    /// Workflows (from 0.12.0), read as the roles that would: the graph
    /// around every item with an edge (`work_workflow`, as the operator:
    /// none while it may not read the queue), and the parents' outcomes of
    /// every child the verb claimed (`work_parent_results`, as the worker,
    /// under the claim's token).
    fn check_workflows(&mut self, m: &Model, claimed: &[i64]) -> Result<(), String> {
        let readable = m.may(Role::Operator, Cap::Read);
        for id in m.linked() {
            let rows = generated::work_workflow(&mut self.operator, id)
                .map_err(|e| format!("work_workflow({id}): {}", error_text(&e)))?;
            let got: Vec<(i64, String, String, i32, Vec<i64>)> = rows
                .into_iter()
                .map(|r| {
                    (
                        r.id.unwrap_or_default(),
                        r.key.unwrap_or_default(),
                        r.state.unwrap_or_default(),
                        r.depth.unwrap_or_default(),
                        r.parents.unwrap_or_default(),
                    )
                })
                .collect();
            let expected = if readable { m.workflow(id) } else { Vec::new() };
            if got != expected {
                return Err(format!(
                    "work_workflow({id}) as the operator (read: {readable}): the server has \
                     {got:?}, the model {expected:?}"
                ));
            }
            if !got.is_empty() {
                self.count("work_workflow graphs compared", 1);
            }
        }
        for &id in claimed {
            let expected = m.parent_states(id);
            let Some(i) = m.by_id(id) else { continue };
            let item = &m.items[i];
            if item.on_parent_failure.is_none() || item.state != State::Claimed {
                continue;
            }
            let (Some(owner), Some(epoch)) = (item.owner.clone(), item.epoch) else {
                continue;
            };
            let got = generated::work_parent_results(&mut self.worker, id, &owner, epoch)
                .map_err(|e| format!("work_parent_results of {}: {}", item.key, error_text(&e)))?;
            let object = got.as_object().cloned().unwrap_or_default();
            let keys: BTreeSet<&String> = object.keys().collect();
            let ok = keys == expected.keys().collect::<BTreeSet<_>>()
                && expected.iter().all(|(parent, state)| match state {
                    State::Done => object[parent].is_null(),
                    other => object[parent]["state"] == other.name(),
                });
            if !ok {
                return Err(format!(
                    "work_parent_results of {} is {got}; its parents are {expected:?}",
                    item.key
                ));
            }
            self.count("claimed children read their parents' outcomes", 1);
            if expected.values().any(|s| *s != State::Done) {
                self.count("claimed children read a parent that did not end done", 1);
            }
        }
        Ok(())
    }

    /// `work_may` of both roles for every capability against the model.
    fn check_may(&mut self, m: &Model) -> Result<(), String> {
        for role in [Role::Worker, Role::Operator] {
            for cap in CAPS {
                let client = match role {
                    Role::Worker => &mut self.worker,
                    Role::Operator => &mut self.operator,
                };
                let may = calls::may(client, cap.name(), &m.queue)
                    .map_err(|e| format!("work_may: {}", error_text(&e)))?;
                if may != m.may(role, cap) {
                    return Err(format!(
                        "work_may('{}', queue) as {} is {may}; the grants say {}",
                        cap.name(),
                        role.name(),
                        !may
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What a call returned.
#[derive(Debug)]
enum Outcome {
    Bool(bool),
    /// 42704: no schedule of that name (`work_pause_schedule`,
    /// `work_resume_schedule`).
    NoSchedule,
    Unit,
    Count(i64),
    Enqueued(Enqueued),
    Claims(Vec<Claim>),
    Cycle(Cycle),
    Many(Vec<(i64, bool)>),
    /// `work_enqueue_many`'s rows.
    Rows(Vec<generated::WorkEnqueueRow>),
}

/// The grant a verb needs (for a call naming the queue, which raises 42501
/// without it); `None` for the grant management (the superuser's) and the
/// token calls (answered as for no item instead).
fn needs(verb: &Verb) -> Option<(Role, Cap)> {
    match verb {
        Verb::Enqueue { .. } | Verb::EnqueueMany { .. } => Some((Role::Worker, Cap::Enqueue)),
        Verb::Claim { .. }
        | Verb::ClaimKey { .. }
        | Verb::FinishAndClaim { .. }
        | Verb::FailAndClaim { .. } => Some((Role::Worker, Cap::Claim)),
        Verb::Cancel { .. }
        | Verb::Retry { .. }
        | Verb::Reschedule { .. }
        | Verb::Pause
        | Verb::Resume
        | Verb::Limit { .. }
        | Verb::Schedule { .. }
        | Verb::Unschedule
        | Verb::PauseSchedule
        | Verb::ResumeSchedule => Some((Role::Operator, Cap::Operate)),
        Verb::Purge { .. } => Some((Role::Operator, Cap::Purge)),
        _ => None,
    }
}

/// Makes the call of `verb` as the role that would make it.
fn call(ctx: &mut Ctx, m: &Model, verb: &Verb) -> Result<Outcome, postgres::Error> {
    let q = m.queue.as_str();
    let w = &mut ctx.worker;
    let o = &mut ctx.operator;
    Ok(match verb {
        Verb::Enqueue {
            key,
            group,
            run_at,
            priority,
            max_attempts,
            on_conflict,
            trace,
            after,
            run,
        } => {
            let mut item = Enqueue::new(q)
                .key(key_name(*key))
                .priority(*priority)
                .max_attempts(*max_attempts);
            if *run_at != When::Now {
                item = item.run_at(run_at.run_at());
            }
            if let Some(group) = group {
                item = item.group_key(group_name(*group));
            }
            if *on_conflict != 0 {
                item = item.on_conflict(ON_CONFLICTS[*on_conflict as usize]);
            }
            if let Some(traceparent) = TRACES[*trace as usize] {
                item = item.trace(traceparent);
            }
            if let Some((parents, _)) = m.parents_for(after, *key) {
                // Possibly empty (every key named gone): no parents.
                item = item.after(&parents);
            }
            if *run {
                item = item.on_parent_failure("run");
            }
            Outcome::Enqueued(calls::enqueue(w, &item)?)
        }
        Verb::EnqueueMany {
            elements,
            priority,
            max_attempts,
            on_conflict,
        } => {
            let payloads: Vec<serde_json::Value> = (0..elements.len())
                .map(|n| serde_json::json!({ "element": n }))
                .collect();
            let keys: Vec<Option<String>> = elements.iter().map(|e| e.key.map(key_name)).collect();
            let groups: Vec<Option<String>> =
                elements.iter().map(|e| e.group.map(group_name)).collect();
            // An hour ahead on the server's clock, as a time (the array's
            // elements are times, not intervals).
            let later: String = if elements.iter().any(|e| e.run_at == When::Later) {
                w.query_one(
                    "SELECT (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) \
                     interval '1 hour')::text",
                    &[],
                )?
                .get(0)
            } else {
                String::new()
            };
            let run_at: Vec<Option<&str>> = elements
                .iter()
                .map(|e| match e.run_at {
                    When::Now => None,
                    When::Past => Some(PAST),
                    When::Later => Some(later.as_str()),
                })
                .collect();
            let keys: Vec<Option<&str>> = keys.iter().map(Option::as_deref).collect();
            let groups: Vec<Option<&str>> = groups.iter().map(Option::as_deref).collect();
            // An argument whose elements are all NULL is left out (its
            // default, NULL, means the same).
            let given = |v: &[Option<&str>]| v.iter().any(Option::is_some);
            Outcome::Rows(generated::work_enqueue_many(
                w,
                q,
                &payloads,
                given(&keys).then_some(&keys[..]),
                given(&run_at).then_some(&run_at[..]),
                (*priority != 0).then_some(*priority),
                (*max_attempts != 25).then_some(*max_attempts),
                given(&groups).then_some(&groups[..]),
                (*on_conflict != 0).then(|| ON_CONFLICTS[*on_conflict as usize]),
            )?)
        }
        Verb::Claim {
            owner,
            lease,
            max_items,
        } => Outcome::Claims(calls::claim(
            w,
            q,
            owner.name(),
            lease.text(),
            Some(*max_items),
            None,
        )?),
        Verb::ClaimKey { key, owner, lease } => Outcome::Claims(
            calls::claim_key(w, q, &key_name(*key), owner.name(), lease.text())?
                .into_iter()
                .collect(),
        ),
        Verb::Renew { token, lease } => {
            Outcome::Bool(calls::renew(w, &m.token(*token), lease.text())?)
        }
        Verb::Progress { token } => {
            let t = m.token(*token);
            let written: bool = w
                .query_one(
                    "SELECT workfence.work_progress($1, $2, $3, pg_catalog.jsonb_build_object('n', $4::int8))",
                    &[&t.id, &t.owner, &t.epoch, &m.progress_next],
                )?
                .get(0);
            Outcome::Bool(written)
        }
        Verb::Finish { token } => Outcome::Bool(calls::finish(w, &m.token(*token), None)?),
        Verb::FinishMany { owner, tokens } => {
            let tokens: Vec<Token> = tokens.iter().map(|p| m.token(*p)).collect();
            let ids: Vec<i64> = tokens.iter().map(|t| t.id).collect();
            let epochs: Vec<i64> = tokens.iter().map(|t| t.epoch).collect();
            Outcome::Many(calls::finish_many(w, owner.name(), &ids, &epochs, None)?)
        }
        Verb::FinishAndClaim {
            token,
            lease,
            max_items,
        } => Outcome::Cycle(calls::finish_and_claim(
            w,
            q,
            &m.token(*token),
            lease.text(),
            None,
            Some(*max_items),
        )?),
        Verb::FailAndClaim {
            token,
            retry_in,
            lease,
            max_items,
        } => Outcome::Cycle(calls::fail_and_claim(
            w,
            q,
            &m.token(*token),
            lease.text(),
            "composition",
            Some(retry_text(*retry_in)),
            Some(*max_items),
        )?),
        Verb::Release { token, delay } => Outcome::Bool(calls::release(
            w,
            &m.token(*token),
            (*delay == Delay::Hour).then_some("1 hour"),
        )?),
        Verb::Fail { token, retry_in } => Outcome::Bool(calls::fail(
            w,
            &m.token(*token),
            "composition",
            Some(retry_text(*retry_in)),
        )?),
        Verb::Assert { token } => {
            let mut tx = w.transaction()?;
            calls::assert(&mut tx, &m.token(*token))?;
            tx.commit()?;
            Outcome::Unit
        }
        Verb::Cancel { key } => Outcome::Bool(calls::cancel(o, q, &key_name(*key))?),
        Verb::Retry { key, run_at } => Outcome::Bool(calls::retry(
            o,
            q,
            &key_name(*key),
            run_at.map(When::run_at).as_ref(),
        )?),
        Verb::Reschedule { key, run_at } => {
            Outcome::Bool(calls::reschedule(o, q, &key_name(*key), &run_at.run_at())?)
        }
        Verb::Pause => Outcome::Bool(calls::pause(o, q)?),
        Verb::Schedule { cron, catch_up } => Outcome::Bool(calls::schedule(
            o,
            &m.schedule_name(),
            CRONS[*cron as usize],
            q,
            "UTC",
            CATCH_UPS[*catch_up as usize],
        )?),
        Verb::Unschedule => Outcome::Bool(calls::unschedule(o, &m.schedule_name())?),
        Verb::PauseSchedule | Verb::ResumeSchedule => {
            let name = m.schedule_name();
            let result = if *verb == Verb::PauseSchedule {
                calls::pause_schedule(o, &name)
            } else {
                calls::resume_schedule(o, &name)
            };
            match result {
                Ok(changed) => Outcome::Bool(changed),
                Err(e) if e.sqlstate() == Some("42704") => Outcome::NoSchedule,
                Err(e) => return Err(e),
            }
        }
        Verb::FireSchedules => Outcome::Count(i64::from(calls::fire_schedules(w)?)),
        Verb::Resume => match ctx.resume {
            ResumeAs::Installed => Outcome::Bool(calls::resume(o, q)?),
            ResumeAs::Of0110 => {
                // The operator's resume, then the row deleted (the
                // superuser may; the operator may not) before the commit
                // sends the resume's invalidation.
                let mut tx = ctx.admin.transaction()?;
                tx.batch_execute(&format!("SET LOCAL ROLE {OPERATOR}"))?;
                let resumed = calls::resume(&mut tx, q)?;
                tx.batch_execute("RESET ROLE")?;
                if resumed {
                    tx.execute("DELETE FROM workfence.queues WHERE queue = $1", &[&q])?;
                }
                tx.commit()?;
                Outcome::Bool(resumed)
            }
            ResumeAs::Silent => {
                // Refused as the installed one is, without the grant.
                let mut tx = ctx.admin.transaction()?;
                tx.batch_execute(&format!("SET LOCAL ROLE {OPERATOR}"))?;
                if !calls::may(&mut tx, Cap::Operate.name(), q)? {
                    calls::resume(&mut tx, q)?;
                }
                tx.batch_execute("RESET ROLE")?;
                let resumed = tx.execute(
                    "UPDATE workfence.queues SET paused = false, paused_at = NULL
                      WHERE queue = $1 AND paused",
                    &[&q],
                )? == 1;
                tx.commit()?;
                Outcome::Bool(resumed)
            }
        },
        Verb::Limit {
            concurrency,
            rate,
            per,
            per_group,
        } => {
            calls::work_limit_per_group(o, q, *concurrency, *rate, per.text(), *per_group)?;
            Outcome::Unit
        }
        Verb::Purge { every_queue } => Outcome::Count(calls::purge(
            o,
            Some("0 seconds"),
            (!every_queue).then_some(q),
        )?),
        Verb::Grant {
            capability,
            queues,
            role,
        } => Outcome::Bool(calls::grant(
            &mut ctx.admin,
            capability.name(),
            &m.pattern(*queues),
            role.name(),
        )?),
        Verb::Revoke {
            capability,
            queues,
            role,
        } => Outcome::Bool(calls::revoke(
            &mut ctx.admin,
            capability.name(),
            &m.pattern(*queues),
            role.name(),
        )?),
        Verb::EnforceGrants(on) => Outcome::Bool(calls::enforce_grants(&mut ctx.admin, *on)?),
    })
}

/// An error with the server's SQLSTATE and message (`postgres::Error`'s
/// own text is only "db error").
fn error_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

fn retry_text(delay: Delay) -> &'static str {
    match delay {
        Delay::Zero => "0 seconds",
        Delay::Hour => "1 hour",
    }
}

/// `expected` or the verb's result, as an error naming both.
fn expect<T: PartialEq + std::fmt::Debug>(got: T, expected: T, why: &str) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!("returned {got:?}; expected {expected:?}: {why}"))
    }
}

fn unexpected(outcome: &Outcome) -> String {
    format!("an unexpected result {outcome:?}")
}

/// One item as `work_enqueue` judges it: a `work_enqueue` call's, or an
/// element of a `work_enqueue_many` call's (whose elements have no trace and
/// no `after`).
struct One {
    key: String,
    group: Option<u8>,
    run_at: At,
    priority: i32,
    max_attempts: i32,
    on_conflict: u8,
    trace: u8,
    /// [`Model::parents_for`] of its `after`.
    parents: Option<(Vec<i64>, bool)>,
    run: bool,
}

/// Checks what the server returned for the enqueue of `one` (`e`) and steps
/// the model: an existing key is returned, not inserted, and changed as
/// `on_conflict` says; a new one is inserted with the largest id yet.
fn enqueued(ctx: &mut Ctx, m: &mut Model, one: One, e: &Enqueued) -> Result<(), String> {
    if one.group.is_some() {
        m.settings.grouped = true;
    }
    let parents = one.parents;
    match m.by_key(&one.key) {
        Some(i) => {
            expect(
                (e.id, e.inserted),
                (m.items[i].id, false),
                "an existing key is returned, not inserted",
            )?;
            if parents.is_some() {
                ctx.count("enqueues of an existing key with after (ignored)", 1);
            }
            if one.on_conflict != 0 {
                ctx.count(
                    match m.items[i].state {
                        State::Pending => "on_conflict: a pending item replaced",
                        State::Waiting => "on_conflict: a waiting item replaced (it keeps waiting)",
                        State::Claimed => "on_conflict: a claimed item to run once more",
                        _ => "on_conflict: a finished item run again",
                    },
                    1,
                );
                m.conflict(i, one.run_at, one.on_conflict == 2);
                // The run to come serves the request that sent the new
                // payload: the item takes its trace too.
                m.items[i].trace = one.trace;
            }
        }
        None => {
            expect(e.inserted, true, "a new key is inserted")?;
            m.counted(Counted::Enqueued, 1);
            if m.items.last().is_some_and(|last| last.id >= e.id) {
                return Err(format!("the new item's id {} is not the largest", e.id));
            }
            // Its parents, each once, in after's order.
            let mut distinct: Vec<i64> = Vec::new();
            for id in parents.map(|p| p.0).unwrap_or_default() {
                if !distinct.contains(&id) {
                    distinct.push(id);
                }
            }
            let parents = distinct;
            let (state, waiting_on, on_parent_failure) = if parents.is_empty() {
                (State::Pending, 0, None)
            } else {
                m.enter(e.id, &parents, one.run)
            };
            m.ids_ever.insert(e.id);
            m.items.push(Item {
                id: e.id,
                key: one.key,
                state: State::Pending,
                attempts: 0,
                max_attempts: one.max_attempts,
                group: one.group.map(group_name),
                priority: one.priority,
                run_at: one.run_at,
                epoch: None,
                owner: None,
                lapsed: None,
                turn: None,
                behind: false,
                progress: None,
                rerun: None,
                trace: one.trace,
                waiting_on,
                on_parent_failure,
            });
            // Sorted by id: the new one is the largest.
            let i = m.items.len() - 1;
            m.items[i].state = state;
        }
    }
    Ok(())
}

/// Checks the rows of a `work_enqueue_many` call and steps the model: a row
/// per element, in their order, each what the `work_enqueue` of that
/// element alone would have returned after the ones before it
/// (docs/contract.md, `work_enqueue_many`), and applied as it.
fn enqueued_many(
    ctx: &mut Ctx,
    m: &mut Model,
    elements: &[Element],
    (priority, max_attempts, on_conflict): (i32, i32, u8),
    rows: &[generated::WorkEnqueueRow],
) -> Result<(), String> {
    expect(rows.len(), elements.len(), "one row per payload")?;
    // The figures: which of the server's two paths the call took, and what
    // its elements met.
    let at_once = on_conflict == 0 && elements.iter().all(|e| e.group.is_none());
    ctx.count(
        if at_once {
            "work_enqueue_many: calls of one INSERT (no group, keep)"
        } else {
            "work_enqueue_many: calls item by item (a group, or replace)"
        },
        1,
    );
    let mut keys_seen = BTreeSet::new();
    for (n, (element, row)) in elements.iter().zip(rows).enumerate() {
        let at = |what: String| format!("element {n} {element:?}: {what}");
        let (Some(id), Some(key), Some(inserted)) = (row.id, row.key.clone(), row.inserted) else {
            return Err(at(format!("a NULL in its row {row:?}")));
        };
        match element.key {
            Some(k) => expect(
                key.as_str(),
                key_name(k).as_str(),
                "the row's key is its element's",
            )
            .map_err(at)?,
            // A NULL key: a new UUIDv7, of no item yet.
            None if key.len() != 36 || m.by_key(&key).is_some() => {
                return Err(at(format!("a NULL key came back as {key:?}")))
            }
            None => {}
        }
        if !keys_seen.insert(key.clone()) {
            ctx.count(
                "work_enqueue_many: elements of a key earlier in the call",
                1,
            );
        } else if m.by_key(&key).is_some() {
            ctx.count("work_enqueue_many: elements of an existing key", 1);
        }
        let one = One {
            key: key.clone(),
            group: element.group,
            run_at: element.run_at.at(),
            priority,
            max_attempts,
            on_conflict,
            trace: 0,
            parents: None,
            run: false,
        };
        enqueued(ctx, m, one, &Enqueued { id, key, inserted }).map_err(at)?;
    }
    Ok(())
}

/// Runs `verb` against the server and steps the model; then compares
/// everything and checks the promises.
fn step(ctx: &mut Ctx, m: &mut Model, verb: &Verb) -> Result<(), String> {
    if let Verb::Assert { token } = verb {
        return step_assert(ctx, m, *token);
    }
    *ctx.calls.entry(verb.function()).or_default() += 1;
    ctx.verbs += 1;
    // A schedule verb naming no schedule knows no queue to judge: it answers
    // (false, or 42704) without a grant.
    let names_no_schedule = matches!(
        verb,
        Verb::Unschedule | Verb::PauseSchedule | Verb::ResumeSchedule
    ) && m.schedule.is_none();
    // `work_schedule` needs `enqueue` on the queue as well (its items are
    // enqueues).
    let schedule_unenqueued =
        matches!(verb, Verb::Schedule { .. }) && !m.may(Role::Operator, Cap::Enqueue);
    // `on_conflict` running a cancelled item again needs `operate` as well
    // (from 0.12.0): an operator's cancel is undone with an operator's right.
    let uncancel_unoperated = match verb {
        Verb::Enqueue {
            key, on_conflict, ..
        } if *on_conflict != 0 => {
            m.by_key(&key_name(*key))
                .is_some_and(|i| m.items[i].state == State::Cancelled)
                && !m.may(Role::Worker, Cap::Operate)
        }
        // An element of a key whose item is cancelled (a later one of the
        // same key finds it pending again).
        Verb::EnqueueMany {
            elements,
            on_conflict,
            ..
        } if *on_conflict != 0 => {
            elements.iter().filter_map(|e| e.key).any(|key| {
                m.by_key(&key_name(key))
                    .is_some_and(|i| m.items[i].state == State::Cancelled)
            }) && !m.may(Role::Worker, Cap::Operate)
        }
        _ => false,
    };
    let refused = ((needs(verb).is_some_and(|(role, cap)| !m.may(role, cap))
        || schedule_unenqueued
        || uncancel_unoperated)
        && !names_no_schedule)
        || (*verb == Verb::Purge { every_queue: true } && m.enforced);
    if refused {
        // Refused means unchanged (docs/contract.md, queue-scoped
        // privileges): anywhere in the database.
        let before = snapshot(&mut ctx.admin);
        match call(ctx, m, verb) {
            Err(e) if e.sqlstate() == Some("42501") => {}
            other => {
                return Err(format!(
                    "{other:?}; expected 42501: the role has no grant covering the queue \
                     ({:?})",
                    m.grants
                ))
            }
        }
        let after = snapshot(&mut ctx.admin);
        if after != before {
            return Err(format!(
                "a call refused with 42501 changed the database:\n  before {before}\n  after  {after}"
            ));
        }
        ctx.count("calls refused for want of a queue grant (42501)", 1);
        let seen = ctx.observe(m)?;
        return m.check(&seen);
    }
    // Workflows (from 0.12.0): a new key's parent that is no item (purged),
    // or in a queue the worker may not read, is refused as a missing row
    // is, 23503, and the refusal changes nothing.
    if let Verb::Enqueue { key, after, .. } = verb {
        if m.parent_refused(after, *key) {
            let before = snapshot(&mut ctx.admin);
            match call(ctx, m, verb) {
                Err(e) if e.sqlstate() == Some("23503") => {}
                other => {
                    return Err(format!(
                        "{other:?}; expected 23503: a parent is no item or in a queue the worker \
                         may not read (read: {})",
                        m.may(Role::Worker, Cap::Read)
                    ))
                }
            }
            if snapshot(&mut ctx.admin) != before {
                return Err("an enqueue refused with 23503 changed the database".into());
            }
            ctx.count("enqueues refused: a parent purged or unreadable (23503)", 1);
            let seen = ctx.observe(m)?;
            return m.check(&seen);
        }
    }
    let reruns = m.reruns;
    let outcome = call(ctx, m, verb).map_err(|e| format!("failed: {}", error_text(&e)))?;
    let mut facts = None;
    let mut presented = None;
    match (verb, &outcome) {
        (
            Verb::Enqueue {
                key,
                group,
                run_at,
                priority,
                max_attempts,
                on_conflict,
                trace,
                after,
                run,
            },
            Outcome::Enqueued(e),
        ) => {
            let one = One {
                key: key_name(*key),
                group: *group,
                run_at: run_at.at(),
                priority: *priority,
                max_attempts: *max_attempts,
                on_conflict: *on_conflict,
                trace: *trace,
                parents: m.parents_for(after, *key),
                run: *run,
            };
            enqueued(ctx, m, one, e)?;
        }
        (
            Verb::EnqueueMany {
                elements,
                priority,
                max_attempts,
                on_conflict,
            },
            Outcome::Rows(rows),
        ) => enqueued_many(
            ctx,
            m,
            elements,
            (*priority, *max_attempts, *on_conflict),
            rows,
        )?,
        (
            Verb::Claim {
                owner,
                lease,
                max_items,
            },
            Outcome::Claims(claims),
        ) => {
            let plan = m.plan(&ClaimOf::Queue(*max_items));
            facts = Some(m.claimed_as(&plan, claims, owner.name(), *lease)?);
        }
        (Verb::ClaimKey { key, owner, lease }, Outcome::Claims(claims)) => {
            let plan = m.plan(&ClaimOf::Key(&key_name(*key)));
            facts = Some(m.claimed_as(&plan, claims, owner.name(), *lease)?);
        }
        (Verb::Renew { token, lease }, Outcome::Bool(renewed)) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(
                *renewed,
                current,
                "promise 1: only the current token renews",
            )?;
            if current {
                let i = m.by_id(t.id).expect("current");
                m.items[i].lapsed = Some(*lease == Lease::Short);
            }
            presented = Some((t, current));
        }
        (Verb::Progress { token }, Outcome::Bool(written)) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(
                *written,
                current,
                "promise 12: only the current token stores a checkpoint",
            )?;
            if current {
                let i = m.by_id(t.id).expect("current");
                m.items[i].progress = Some(m.progress_next);
                // A marker of a replaced run that ended otherwise goes
                // (PROGRESS in src/verbs/lease.rs).
                if m.items[i].rerun != m.items[i].epoch {
                    m.items[i].rerun = None;
                }
            }
            m.progress_next += 1;
            presented = Some((t, current));
        }
        (Verb::Finish { token }, Outcome::Bool(finished)) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(
                *finished,
                current || m.done_by(&t),
                "promise 1: only the current token finishes (a repeat of its finish is true)",
            )?;
            if current {
                m.finish(&t);
            }
            presented = Some((t, current));
        }
        (Verb::FinishMany { owner, tokens }, Outcome::Many(rows)) => {
            let pairs: Vec<Token> = tokens
                .iter()
                .map(|p| {
                    let t = m.token(*p);
                    Token::new(t.id, owner.name(), t.epoch)
                })
                .collect();
            let expected: Vec<(i64, bool)> = pairs
                .iter()
                .map(|t| (t.id, m.current(t) || m.done_by(t)))
                .collect();
            expect(
                rows.clone(),
                expected,
                "promise 1: each pair judged as work_finish judges it",
            )?;
            for t in &pairs {
                m.refusal(t, true);
            }
            for t in &pairs {
                if m.current(t) {
                    m.finish(t);
                }
            }
        }
        (
            Verb::FinishAndClaim {
                token,
                lease,
                max_items,
            },
            Outcome::Cycle(cycle),
        ) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(
                cycle.settled,
                current || m.done_by(&t),
                "promise 1: the finish half is work_finish",
            )?;
            if current {
                m.finish(&t);
            }
            let plan = m.plan(&ClaimOf::Queue(*max_items));
            facts = Some(m.claimed_as(&plan, &cycle.claimed, &t.owner, *lease)?);
            presented = Some((t, current));
        }
        (
            Verb::FailAndClaim {
                token,
                retry_in,
                lease,
                max_items,
            },
            Outcome::Cycle(cycle),
        ) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(
                cycle.settled,
                current,
                "promise 1: the fail half is work_fail",
            )?;
            if current {
                m.fail(&t, *retry_in);
            }
            let plan = m.plan(&ClaimOf::Queue(*max_items));
            facts = Some(m.claimed_as(&plan, &cycle.claimed, &t.owner, *lease)?);
            presented = Some((t, current));
        }
        (Verb::Release { token, delay }, Outcome::Bool(released)) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(
                *released,
                current,
                "promise 1: only the current token releases",
            )?;
            if current {
                m.counted(Counted::Released, 1);
                let i = m.by_id(t.id).expect("current");
                let item = &mut m.items[i];
                item.state = State::Pending;
                // From 0.12.0 a run with a checkpoint keeps its attempt
                // and gets one more instead (RELEASE_LIFE).
                if item.progress.is_some() {
                    item.max_attempts += 1;
                } else {
                    item.attempts = (item.attempts - 1).max(0);
                }
                item.lapsed = None;
                if *delay == Delay::Hour {
                    item.run_at = At::Future;
                }
            }
            presented = Some((t, current));
        }
        (Verb::Fail { token, retry_in }, Outcome::Bool(failed)) => {
            let t = m.token(*token);
            let current = m.current(&t);
            expect(*failed, current, "promise 1: only the current token fails")?;
            if current {
                m.fail(&t, *retry_in);
            }
            presented = Some((t, current));
        }
        (Verb::Cancel { key }, Outcome::Bool(cancelled)) => {
            let i = m.by_key(&key_name(*key));
            let cancellable = i.is_some_and(|i| {
                matches!(
                    m.items[i].state,
                    State::Pending | State::Claimed | State::Waiting
                )
            });
            expect(
                *cancelled,
                cancellable,
                "work_cancel: a pending, claimed or (from 0.12.0) waiting item",
            )?;
            if let (true, Some(i)) = (cancellable, i) {
                m.counted(Counted::Cancelled, 1);
                if m.items[i].state == State::Waiting {
                    m.event("waiting items cancelled by an operator");
                }
                m.items[i].state = State::Cancelled;
                m.items[i].lapsed = None;
                // Its waiting children learn of it (workflows).
                let id = m.items[i].id;
                m.settle(vec![id], Settled::Cancelled);
            }
        }
        (Verb::Retry { key, run_at }, Outcome::Bool(retried)) => {
            let i = m.by_key(&key_name(*key));
            let retriable =
                i.is_some_and(|i| matches!(m.items[i].state, State::Failed | State::Cancelled));
            expect(
                *retried,
                retriable,
                "work_retry: a failed or cancelled item",
            )?;
            if let (true, Some(i)) = (retriable, i) {
                m.counted(Counted::Retried, 1);
                let item = &mut m.items[i];
                // From 0.12.0: back to waiting while a parent is open.
                item.state = if item.waiting_on > 0 {
                    State::Waiting
                } else {
                    State::Pending
                };
                item.run_at = run_at.map_or(At::Fresh, When::at);
                item.max_attempts = item.max_attempts.max(item.attempts + 1);
                let (id, waiting, child) = (
                    item.id,
                    item.state == State::Waiting,
                    item.on_parent_failure.is_some(),
                );
                if waiting {
                    m.event("children retried back to waiting for an open parent");
                }
                if child {
                    m.forgive(id);
                    m.rewait(id);
                }
                m.reopen(id);
            }
        }
        (Verb::Reschedule { key, run_at }, Outcome::Bool(moved)) => {
            let i = m.by_key(&key_name(*key));
            let pending = i.is_some_and(|i| m.items[i].state == State::Pending);
            expect(*moved, pending, "work_reschedule: a pending item")?;
            if let (true, Some(i)) = (pending, i) {
                m.items[i].run_at = run_at.at();
            }
        }
        (Verb::Schedule { cron, catch_up }, Outcome::Bool(changed)) => {
            let was = m.schedule;
            let expected = was.is_none_or(|s| s.cron != *cron || s.catch_up != *catch_up);
            expect(*changed, expected, "work_schedule: true if new or changed")?;
            m.schedule = Some(Sched {
                cron: *cron,
                catch_up: *catch_up,
                paused: was.is_some_and(|s| s.paused),
            });
        }
        (Verb::Unschedule, Outcome::Bool(existed)) => {
            expect(
                *existed,
                m.schedule.is_some(),
                "work_unschedule: true if it existed",
            )?;
            m.schedule = None;
        }
        (Verb::PauseSchedule | Verb::ResumeSchedule, Outcome::NoSchedule) => {
            expect(
                true,
                m.schedule.is_none(),
                "42704 only for a missing schedule",
            )?;
        }
        (Verb::PauseSchedule | Verb::ResumeSchedule, Outcome::Bool(changed)) => {
            let pause = *verb == Verb::PauseSchedule;
            let Some(s) = m.schedule.as_mut() else {
                return Err("a missing schedule was paused or resumed".into());
            };
            expect(*changed, s.paused != pause, "true if it changed")?;
            s.paused = pause;
        }
        (Verb::FireSchedules, Outcome::Count(n)) => {
            expect(*n, 0, "work_fire_schedules: nothing is due in a case")?;
        }
        (Verb::Pause, Outcome::Bool(paused)) => {
            expect(
                *paused,
                !m.settings.paused,
                "work_pause: true if not paused",
            )?;
            m.settings.paused = true;
        }
        (Verb::Resume, Outcome::Bool(resumed)) => {
            expect(*resumed, m.settings.paused, "work_resume: true if paused")?;
            m.settings.paused = false;
        }
        (
            Verb::Limit {
                concurrency,
                rate,
                per,
                per_group,
            },
            Outcome::Unit,
        ) => {
            m.settings.per_group = *per_group;
            m.settings.concurrency = *concurrency;
            m.settings.rate = *rate;
            m.settings.per = rate.map(|_| per.rendered().to_owned());
            // A new rate keeps the window's most recent claims, as many as
            // it allows (src/verbs/flow.rs, SYNC_RATE); no rate, none.
            m.settings.used = rate.map_or(0, |r| m.settings.used.min(i64::from(r)));
        }
        (Verb::Purge { every_queue }, Outcome::Count(purged)) => {
            let finished = m.items.iter().filter(|i| i.state.finished()).count() as i64;
            if *every_queue {
                if *purged < finished {
                    return Err(format!(
                        "work_purge(every queue) purged {purged}, fewer than the {finished} \
                         finished items of this queue"
                    ));
                }
            } else {
                expect(
                    *purged,
                    finished,
                    "work_purge: every finished item of the queue",
                )?;
            }
            let purged: Vec<(i64, String)> = m
                .items
                .iter()
                .filter(|i| i.state.finished())
                .map(|i| (i.id, i.key.clone()))
                .collect();
            m.items.retain(|i| !i.state.finished());
            // Their edges go with them (from 0.12.0).
            let edges = m.edges.len();
            m.edges
                .retain(|(p, c), _| !purged.iter().any(|(id, _)| id == p || id == c));
            for _ in m.edges.len()..edges {
                m.event("edges deleted by a purge");
            }
            m.gone.extend(purged.into_iter().map(|(id, key)| (key, id)));
        }
        (
            Verb::Grant {
                capability,
                queues,
                role,
            },
            Outcome::Bool(new),
        ) => {
            let grant = (*role, *capability, *queues);
            expect(*new, !m.grants.contains(&grant), "work_grant: true if new")?;
            m.grants.insert(grant);
        }
        (
            Verb::Revoke {
                capability,
                queues,
                role,
            },
            Outcome::Bool(existed),
        ) => {
            let grant = (*role, *capability, *queues);
            expect(
                *existed,
                m.grants.contains(&grant),
                "work_revoke: true if it existed",
            )?;
            m.grants.remove(&grant);
        }
        (Verb::EnforceGrants(on), Outcome::Bool(changed)) => {
            expect(
                *changed,
                m.enforced != *on,
                "work_enforce_grants: true if changed",
            )?;
            m.enforced = *on;
        }
        (_, outcome) => return Err(unexpected(outcome)),
    }
    if let Some((t, false)) = &presented {
        // A token call that was not current (the model is unchanged by it).
        let finishing = matches!(verb, Verb::Finish { .. } | Verb::FinishAndClaim { .. });
        m.refusal(t, finishing);
    }
    let seen = ctx.observe(m)?;
    m.check(&seen)?;
    promises(&seen, facts.as_ref())?;
    let claimed: Vec<i64> = match &outcome {
        Outcome::Claims(claims) => claims.iter().map(|c| c.id).collect(),
        Outcome::Cycle(cycle) => cycle.claimed.iter().map(|c| c.id).collect(),
        _ => Vec::new(),
    };
    ctx.check_workflows(m, &claimed)?;
    for (what, n) in std::mem::take(&mut m.events) {
        ctx.count(what, n);
    }
    ctx.count("runs sent round once more (on_conflict)", m.reruns - reruns);
    if let Some(f) = &facts {
        ctx.count("items claimed", f.handed as u64);
        ctx.count(
            "lapsed leases claimed anew",
            (f.handed - f.from_pending) as u64,
        );
        ctx.count("lapsed final attempts dead-lettered", f.dead as u64);
        ctx.count("claims of a paused queue", u64::from(f.paused));
        ctx.count("claims that took nothing", u64::from(f.handed == 0));
        ctx.count(
            "claims of a queue without groups or limits",
            u64::from(f.plain),
        );
    }
    if let Some((t, was_current)) = presented {
        if !was_current {
            ctx.count("calls with a token that was not current (refused)", 1);
        }
        // Promise 1 as work_lease_status tells it.
        let status = calls::lease_status(&mut ctx.worker, &t)
            .map_err(|e| format!("work_lease_status: {}", error_text(&e)))?;
        expect(
            status == "current",
            m.current(&t),
            &format!("work_lease_status of {t:?} is {status:?}"),
        )?;
    }
    if matches!(
        verb,
        Verb::Grant { .. } | Verb::Revoke { .. } | Verb::EnforceGrants(_)
    ) {
        ctx.check_may(m)?;
    }
    Ok(())
}

/// `work_assert` in a transaction: passes for the current token, 55000 for
/// any other (promise 1); changes nothing.
fn step_assert(ctx: &mut Ctx, m: &mut Model, token: Pick) -> Result<(), String> {
    let verb = Verb::Assert { token };
    *ctx.calls.entry(verb.function()).or_default() += 1;
    ctx.verbs += 1;
    let t = m.token(token);
    let current = m.current(&t);
    match (call(ctx, m, &verb), current) {
        (Ok(_), true) => {}
        (Err(e), false) if e.sqlstate() == Some("55000") => m.refusal(&t, false),
        (other, _) => {
            return Err(format!(
                "{other:?}; promise 1: work_assert passes for the current token only \
                 (current: {current})"
            ))
        }
    }
    let seen = ctx.observe(m)?;
    m.check(&seen)
}

/// The promises one connection sees, checked on the server's items and the
/// claim's facts. The facts (limits, the window's use, what was claimed
/// before) come from the model's state before the claim, which the previous
/// verb's check had found equal to the server's: a model that is wrong about
/// them fails that check first.
fn promises(seen: &Observed, claim: Option<&ClaimFacts>) -> Result<(), String> {
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for item in &seen.items {
        if let (State::Claimed, Some(group)) = (item.state, &item.group) {
            *held.entry(group).or_default() += 1;
        }
    }
    let grew = |group: &str, n: usize| {
        claim.is_some_and(|f| {
            n > f.per_group && n > f.group_claimed.get(group).copied().unwrap_or(0)
        })
    };
    if let Some((group, n)) = held.iter().find(|(g, &n)| grew(g, n)) {
        return Err(format!(
            "a claim left group {group} with {n} items claimed (docs/contract.md, flow \
             control: a claim takes an item of a group with fewer than per_group claimed)"
        ));
    }
    if seen.items.iter().any(|i| i.group.is_some())
        && !seen.row.as_ref().is_some_and(|(s, _)| s.grouped)
    {
        return Err("the queue has grouped items but is not marked grouped".into());
    }
    let Some(f) = claim else {
        return Ok(());
    };
    if f.paused && f.handed > 0 {
        return Err(format!(
            "a claim of the paused queue returned {} items (work_pause)",
            f.handed
        ));
    }
    if let Some(c) = f.concurrency {
        let free = (i64::from(c) - f.claimed_before).max(0);
        if f.from_pending > free {
            return Err(format!(
                "a claim took {} pending items with {} of concurrency {c} claimed (flow control)",
                f.from_pending, f.claimed_before
            ));
        }
    }
    if let Some(r) = f.rate {
        let left = (i64::from(r) - f.used_before).max(0);
        if f.handed > left {
            return Err(format!(
                "a claim handed out {} items with {} of rate {r} used in the window (flow control)",
                f.handed, f.used_before
            ));
        }
    }
    Ok(())
}

/// One case: a fresh queue, the setup, the verbs; the first failure with
/// the verb that caused it.
fn run_case(ctx: &mut Ctx, case: &Case) -> Result<(), TestCaseError> {
    ctx.cases += 1;
    let n = NEXT_CASE.fetch_add(1, Ordering::Relaxed);
    let mut m = Model::new(format!("c{n}.jobs"), format!("c{n}.*"));
    let fail = |what: String| TestCaseError::fail(what);
    calls::enforce_grants(&mut ctx.admin, false)
        .map_err(|e| fail(format!("resetting the grant mode: {}", error_text(&e))))?;
    let seen = ctx.observe(&m).map_err(fail)?;
    m.check(&seen).map_err(fail)?;
    let setup = case.setup();
    for (i, verb) in setup.iter().chain(&case.verbs).enumerate() {
        step(ctx, &mut m, verb).map_err(|e| {
            let at = match i.checked_sub(setup.len()) {
                None => format!("setup verb {i}"),
                Some(k) => format!("verb {k}"),
            };
            fail(format!("{at}, {verb:?}, on queue {}:\n{e}", m.queue))
        })?;
        if i >= setup.len() {
            *ctx.generated.entry(verb.function()).or_default() += 1;
        }
    }
    ctx.check_may(&m).map_err(fail)?;
    // The case's rows go, so that every case reads a database of one
    // case's size (the views read every queue).
    let ids: Vec<i64> = m.ids_ever.iter().copied().collect();
    ctx.admin
        .execute(
            "WITH items AS (DELETE FROM workfence.items WHERE queue = $1),
                  queues AS (DELETE FROM workfence.queues WHERE queue = $1),
                  schedules AS (DELETE FROM workfence.schedules WHERE queue = $1),
                  edges AS (DELETE FROM workfence.item_edges
                             WHERE parent = ANY ($3) OR child = ANY ($3))
             DELETE FROM workfence.queue_grants WHERE queues IN ($1, $2)",
            &[&m.queue, &m.prefix, &ids],
        )
        .map_err(|e| fail(format!("removing the case's rows: {}", error_text(&e))))?;
    Ok(())
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

fn runner(seed: u64, cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Runs the property on database `database`: the minimal failing case, if
/// any, and the context with its figures.
fn run_property(
    database: &str,
    resume: ResumeAs,
    seed: u64,
    cases: u32,
) -> (Result<(), TestError<Case>>, Ctx) {
    let ctx = RefCell::new(Ctx::new(database, resume));
    let result = runner(seed, cases).run(&case(), |case| run_case(&mut ctx.borrow_mut(), &case));
    (result, ctx.into_inner())
}

#[test]
fn every_verb_changes_only_what_it_names() {
    let seed = env_or("WORKFENCE_COMPOSITION_SEED", DEFAULT_SEED);
    let cases = env_or("WORKFENCE_COMPOSITION_CASES", DEFAULT_CASES);
    let resume = match std::env::var("WORKFENCE_COMPOSITION_OLD_RESUME").as_deref() {
        Ok("1") => ResumeAs::Of0110,
        _ => ResumeAs::Installed,
    };
    let started = Instant::now();
    let (result, ctx) = run_property("composition", resume, seed, cases);
    let elapsed = started.elapsed();
    println!(
        "composition: seed {seed} (WORKFENCE_COMPOSITION_SEED), {} cases run, {} verbs \
         (setup included) in {:.1} s{}",
        ctx.cases,
        ctx.verbs,
        elapsed.as_secs_f64(),
        if resume == ResumeAs::Of0110 {
            ", resume simulating 0.11.0's"
        } else {
            ""
        }
    );
    println!("composition: calls per function: {:?}", ctx.calls);
    println!("composition: what the verbs met: {:?}", ctx.seen);
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, minimal)) => panic!(
            "seed {seed}: the minimal failing case, after the setup\n{:?}\nis\n{:#?}\n{reason}",
            minimal.setup(),
            minimal.verbs
        ),
        Err(TestError::Abort(reason)) => panic!("seed {seed}: aborted: {reason}"),
    }
    let never: Vec<&str> = FUNCTIONS
        .iter()
        .filter(|(name, kind)| matches!(kind, Kind::Verb) && !ctx.generated.contains_key(name))
        .map(|(name, _)| *name)
        .collect();
    assert!(
        never.is_empty(),
        "the generator never applied {never:?} in {} cases: more cases, or a weight",
        ctx.cases
    );
}

/// Runs the property against a broken resume, which it must catch: the
/// minimal failing sequence and why it failed.
fn caught(database: &str, resume: ResumeAs) -> (Vec<Verb>, String) {
    let seed = env_or("WORKFENCE_COMPOSITION_SEED", DEFAULT_SEED);
    let started = Instant::now();
    let (result, ctx) = run_property(database, resume, seed, DEFAULT_CASES);
    let (reason, minimal) = match result {
        Err(TestError::Fail(reason, minimal)) => (reason, minimal),
        other => panic!("seed {seed}: the property held against {resume:?} ({other:?})"),
    };
    println!(
        "composition: resume {resume:?} caught and shrunk in {} cases, {} verbs, {:.1} s: \
         {:?}\n{reason}",
        ctx.cases,
        ctx.verbs,
        started.elapsed().as_secs_f64(),
        minimal.verbs
    );
    (minimal.verbs, reason.message().to_owned())
}

/// The test's proof: against a resume that does what 0.11.0's did, the
/// property fails, and shrinks to that resume alone (the setup leaves the
/// queue paused), failing on the settings it dropped.
#[test]
fn the_0_11_0_resume_is_caught() {
    let (minimal, reason) = caught("composition_old_resume", ResumeAs::Of0110);
    assert_eq!(
        minimal,
        vec![Verb::Resume],
        "the minimal failing sequence: {reason}"
    );
    assert!(
        reason
            .contains("workfence.queues: the server has Settings { paused: false, grouped: false"),
        "the failure names the dropped settings: {reason}"
    );
}

/// The settings a backend caches must follow every verb another session
/// commits: against a resume that updates the table but tells no session,
/// the property fails at a claim of the worker's, which still sees the
/// pause (its shrunk sequence: something that makes the worker's backend
/// read the pause, the resume, the claim).
#[test]
fn a_resume_that_tells_no_session_is_caught() {
    let (minimal, reason) = caught("composition_silent_resume", ResumeAs::Silent);
    assert!(
        minimal.contains(&Verb::Resume),
        "the minimal failing sequence resumes: {minimal:?}"
    );
    assert!(
        reason.contains("the claim returned items [] where the model takes"),
        "a claim of the worker's found the queue still paused: {reason}"
    );
}

/// Every function of the extension is classified in [`FUNCTIONS`]; the
/// generator produces every one classified as a verb.
#[test]
fn every_function_of_the_extension_is_classified() {
    let cluster = cluster();
    ok(
        cluster.create_database("composition_catalog"),
        "creating the database",
    );
    let mut c = ok(cluster.connect_to("composition_catalog"), "connecting");
    let installed: BTreeSet<String> = ok(
        c.query(
            r"SELECT DISTINCT p.proname::text
                FROM pg_catalog.pg_proc AS p
                JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
               WHERE n.nspname = 'workfence'
                 AND p.proname NOT LIKE '%\_retired\_%'",
            &[],
        ),
        "the extension's functions",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    let classified: BTreeSet<String> = FUNCTIONS.iter().map(|(n, _)| (*n).to_owned()).collect();
    let new: Vec<&String> = installed.difference(&classified).collect();
    assert!(
        new.is_empty(),
        "workfence.{new:?} not classified: add each to FUNCTIONS in harness/tests/client/composition.rs, \
         either as a verb the generator applies (a Verb, its strategy, its call and its model \
         step) or as not a verb, with the reason (it changes nothing)"
    );
    for (name, kind) in FUNCTIONS {
        if let Kind::NotAVerb(why) = kind {
            println!("composition: {name} is not a verb: {why}");
        }
    }
    let gone: Vec<&String> = classified.difference(&installed).collect();
    assert!(
        gone.is_empty(),
        "FUNCTIONS classifies {gone:?}, which the extension does not have"
    );
    let mut runner = runner(DEFAULT_SEED, 1);
    let strategy = verb();
    let generated: BTreeSet<&str> = (0..5000)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .expect("a verb")
                .current()
                .function()
        })
        .collect();
    let verbs: BTreeSet<&str> = FUNCTIONS
        .iter()
        .filter(|(_, kind)| matches!(kind, Kind::Verb))
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(
        generated, verbs,
        "the generator's verbs and FUNCTIONS' verbs differ"
    );
}

/// Workflows (issue 37) with the operator verbs, a fixed sequence through
/// the same model and checks as the random ones, so that each seam is met
/// whatever the seed: `on_conflict` replace of a waiting item (it keeps
/// waiting, with the new run_at), a cancel and a retry of a waiting child,
/// a parent's finish releasing a child into its paused queue (no claim
/// takes it until the resume), a claimed child reading its parents'
/// outcomes, a parent's cancel releasing an `on_parent_failure => 'run'`
/// child and cancelling a cancel one, a retry of a failed and of a
/// cancelled parent bringing back the children their ends cancelled, a
/// final failure cancelling a child again, a purge deleting the edges of
/// what it purged (`workfence.item_edges`), an `after` naming a purged id
/// or a queue the worker may no longer read (23503), and `work_workflow`
/// answering nothing to an operator who may not read the queue. After
/// every verb the state counts equal `work_queue_stats_exact`, `waiting`
/// included.
#[test]
fn workflows_compose_with_the_operator_verbs() {
    let enqueue = |key: u8, after: Vec<u8>, run: bool| Verb::Enqueue {
        key,
        group: None,
        run_at: When::Now,
        priority: 0,
        max_attempts: 25,
        on_conflict: 0,
        trace: 0,
        after,
        run,
    };
    let newest = Pick::NEWEST;
    let claim_key = |key| Verb::ClaimKey {
        key,
        owner: Owner::W2,
        lease: Lease::Long,
    };
    // After the setup: k0 claimed (W2, the second newest token), k1
    // pending, k2 a lapsed lease (the newest), k3 done, k4 failed, k5
    // pending an hour ahead, k6 cancelled, k7 (run) waiting for k0 and k1,
    // k8 (cancel) enqueued cancelled after k7 and the failed k4; the queue
    // paused.
    let verbs = vec![
        // A waiting item replaced: new run_at (an hour ahead), still waiting.
        Verb::Enqueue {
            key: 7,
            group: None,
            run_at: When::Later,
            priority: 0,
            max_attempts: 25,
            on_conflict: 1,
            trace: 0,
            after: Vec::new(),
            run: false,
        },
        // A waiting item cancelled (its edge to k8 marked: k4's end already
        // forbids k8), and retried: back to waiting for k0 and k1; k8 stays
        // cancelled (k4 failed).
        Verb::Cancel { key: 7 },
        Verb::Retry {
            key: 7,
            run_at: None,
        },
        // k0 done: k7 waits for k1 alone.
        Verb::Finish {
            token: Pick {
                back: 1,
                wrong_owner: false,
            },
        },
        Verb::Resume,
        claim_key(1),
        Verb::Pause,
        // k1 done: k7 released, pending (an hour ahead) in its paused queue.
        Verb::Finish { token: newest },
        Verb::Reschedule {
            key: 7,
            run_at: When::Now,
        },
        Verb::Claim {
            owner: Owner::W1,
            lease: Lease::Long,
            max_items: 3,
        },
        Verb::Resume,
        // k7 claimed: its parents' outcomes (k0, k1 done).
        claim_key(7),
        // A failure with attempts left keeps k8 as it is.
        Verb::Fail {
            token: newest,
            retry_in: Delay::Zero,
        },
        // The failed k4 retried: k8 back to waiting (for k7 and k4); k4's
        // final failure cancels it again, the next retry brings it back,
        // k4's finish leaves it waiting for k7.
        Verb::Retry {
            key: 4,
            run_at: None,
        },
        claim_key(4),
        Verb::Fail {
            token: newest,
            retry_in: Delay::Zero,
        },
        Verb::Retry {
            key: 4,
            run_at: None,
        },
        claim_key(4),
        Verb::Finish { token: newest },
        // k9 (cancel) and k10 (run) wait for k5: k5's cancel cancels k9 and
        // releases k10, which reads k5's end; k5's retry brings k9 back.
        enqueue(9, vec![5], false),
        enqueue(10, vec![5], true),
        Verb::Cancel { key: 5 },
        claim_key(10),
        Verb::Finish { token: newest },
        Verb::Retry {
            key: 5,
            run_at: None,
        },
        // Everything finished goes, with its edges; an after naming a
        // purged key is refused.
        Verb::Purge { every_queue: false },
        enqueue(11, vec![0, 9], false),
        // A parent the worker may not read is refused as a missing one.
        Verb::Revoke {
            capability: Cap::Read,
            queues: Pat::Prefix,
            role: Role::Worker,
        },
        enqueue(11, vec![9], false),
        Verb::Grant {
            capability: Cap::Read,
            queues: Pat::Prefix,
            role: Role::Worker,
        },
        enqueue(11, vec![9, 8], true),
        // The operator may not read the queue: work_workflow shows nothing.
        Verb::Revoke {
            capability: Cap::Read,
            queues: Pat::Name,
            role: Role::Operator,
        },
        Verb::Cancel { key: 9 },
    ];
    let case = Case {
        grouped: false,
        concurrency: 5,
        rate: 14,
        per: Per::Day,
        per_group: None,
        lapsed_attempts: 25,
        verbs,
    };
    let mut ctx = Ctx::new("composition_workflows", ResumeAs::Installed);
    if let Err(e) = run_case(&mut ctx, &case) {
        panic!("{e}");
    }
    println!(
        "composition (workflows): what the verbs met: {:?}",
        ctx.seen
    );
    for seam in [
        "on_conflict: a waiting item replaced (it keeps waiting)",
        "waiting items cancelled by an operator",
        "children retried back to waiting for an open parent",
        "waiting children released (pending)",
        "children released into their paused queue",
        "claimed children read their parents' outcomes",
        "claimed children read a parent that did not end done",
        "children released by a parent's failure (run)",
        "waiting children cancelled by a parent's end (transitively)",
        "children enqueued waiting",
        "children enqueued cancelled (a parent had ended failed or cancelled)",
        "cancelled children back to waiting by a parent's retry",
        "edges deleted by a purge",
        "enqueues refused: a parent purged or unreadable (23503)",
        "work_workflow graphs compared",
    ] {
        assert!(
            ctx.seen.contains_key(seam),
            "the sequence never met {seam:?}: {:?}",
            ctx.seen
        );
    }
}

/// A database of the file's cluster for one of the focused tests below, and
/// the superuser's connection to it.
fn focused_database(name: &str) -> (Arc<Cluster>, Client) {
    let cluster = cluster();
    ok(cluster.create_database(name), "creating the database");
    let client = ok(cluster.connect_to(name), "connecting");
    (cluster, client)
}

/// `(state, waiting_on)` of the item `key` of `queue`.
fn standing(c: &mut Client, queue: &str, key: &str) -> (String, i32) {
    let row = ok(
        c.query_one(
            "SELECT state::text, waiting_on FROM workfence.items WHERE queue = $1 AND key = $2",
            &[&queue, &key],
        ),
        "an item's state",
    );
    (row.get(0), row.get(1))
}

/// A child enqueued after a parent that has already failed
/// (`on_parent_failure` cancel) is inserted cancelled, still counting its
/// parents not yet settled, and every ended parent's edge marked cancelled
/// (a bug of the first build of issue 37 counted none and marked one): a
/// retried child waits for its parents not yet settled, and a retried
/// parent brings back only the children no other parent's end forbids, as
/// for a child enqueued first and cancelled by the same ends at run time.
#[test]
fn a_child_enqueued_cancelled_counts_its_open_parents() {
    let (_cluster, mut c) = focused_database("composition_enqueued_cancelled");
    let q = "wf";
    let failed = common::enqueue_new(&mut c, &Enqueue::new(q).key("failed").max_attempts(1));
    let open = common::enqueue_new(&mut c, &Enqueue::new(q).key("open"));
    let token = ok(
        calls::claim_key(&mut c, q, "failed", "w", "1 hour"),
        "claim",
    )
    .expect("claimable")
    .token("w");
    assert!(ok(calls::fail(&mut c, &token, "boom", None), "fail"));
    common::enqueue_new(&mut c, &Enqueue::new(q).key("child").after(&[failed, open]));
    assert_eq!(
        standing(&mut c, q, "child"),
        ("cancelled".into(), 1),
        "one parent is open"
    );
    // The operator retries the child: it waits for the open parent.
    assert!(ok(
        calls::retry(&mut c, q, "child", None),
        "retry the child"
    ));
    assert_eq!(standing(&mut c, q, "child"), ("waiting".into(), 1));
    assert_eq!(
        claim_count(&mut c, q, "child"),
        0,
        "the child ran before its parent"
    );

    // Two parents cancelled before the child is enqueued: a retry of one
    // does not bring it back, the other still forbids it.
    let a = common::enqueue_new(&mut c, &Enqueue::new(q).key("a"));
    let b = common::enqueue_new(&mut c, &Enqueue::new(q).key("b"));
    assert!(ok(calls::cancel(&mut c, q, "a"), "cancel a"));
    assert!(ok(calls::cancel(&mut c, q, "b"), "cancel b"));
    common::enqueue_new(&mut c, &Enqueue::new(q).key("child2").after(&[a, b]));
    assert!(ok(calls::retry(&mut c, q, "a", None), "retry a"));
    assert_eq!(
        standing(&mut c, q, "child2").0,
        "cancelled",
        "b's cancel still forbids the child"
    );
}

/// Claims of `queue` (as owner `w`) until one returns nothing; how many of
/// them took `key`.
fn claim_count(c: &mut Client, queue: &str, key: &str) -> usize {
    let mut took = 0;
    loop {
        let claims = ok(
            calls::claim(c, queue, "w", "1 hour", Some(10), None),
            "claim",
        );
        if claims.is_empty() {
            return took;
        }
        took += claims.iter().filter(|claim| claim.key == key).count();
    }
}

/// `on_conflict => 'preserve_run_at'` of a waiting item keeps its
/// `run_at` (the first build of issue 37 moved it to now): a waiting item
/// takes the payload and `run_at` as a pending one does, and
/// preserve_run_at keeps a pending one's.
#[test]
fn preserve_run_at_keeps_a_waiting_items_run_at() {
    let (_cluster, mut c) = focused_database("composition_preserve_waiting");
    let q = "wf";
    let later = RunAt::At("2030-01-01 00:00:00+00".into());
    let parent = common::enqueue_new(&mut c, &Enqueue::new(q).key("parent"));
    for (key, after) in [("child", Some(parent)), ("plain", None)] {
        let mut item = Enqueue::new(q).key(key).run_at(later.clone());
        if let Some(parent) = after {
            item = item.after(&[parent]);
        }
        common::enqueue_new(&mut c, &item);
        let again = Enqueue::new(q)
            .key(key)
            .payload(serde_json::json!({"v": 2}))
            .on_conflict("preserve_run_at");
        assert!(!common::enqueued(&mut c, &again).inserted);
    }
    let run_ats: Vec<(String, String, String)> = ok(
        c.query(
            "SELECT key, state::text, run_at::text FROM workfence.items
              WHERE queue = $1 AND key IN ('child', 'plain') ORDER BY key",
            &[&q],
        ),
        "run_at",
    )
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect();
    assert_eq!(
        run_ats,
        vec![
            (
                "child".into(),
                "waiting".into(),
                "2030-01-01 00:00:00+00".into()
            ),
            (
                "plain".into(),
                "pending".into(),
                "2030-01-01 00:00:00+00".into()
            ),
        ]
    );
}
