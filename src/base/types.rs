//! The shared types at the bottom of the crate: values every layer names
//! (a queue grant's capability and queue pattern, an interval's parts), with
//! no behaviour that reaches into another module. This file imports nothing
//! of the crate, so the error type, the argument checks and the grants can
//! all name them without importing one another in a loop.

use pgrx::datum::TimestampWithTimeZone;

/// Microseconds in a day.
pub const USECS_PER_DAY: i128 = 86_400 * 1_000_000;

/// What a queue grant allows, each covering a set of functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// `work_enqueue` (from 0.12.0 with `on_conflict`: a pending,
    /// claimed, done or failed item of the key; a cancelled one needs
    /// [`Capability::Operate`] too).
    Enqueue,
    /// `work_claim`, `work_claim_key` and the token calls: `work_renew`,
    /// `work_finish`, `work_finish_many`, `work_release`, `work_fail`,
    /// `work_assert`, `work_lease_status`, `work_progress`; and the fused
    /// `work_finish_and_claim`, `work_fail_and_claim` (both halves).
    Claim,
    /// `work_cancel`, `work_retry`, `work_reschedule`, `work_pause`,
    /// `work_resume`: acting on items and queues without a token.
    Operate,
    /// `work_queue_stats`, `work_item` (both forms), `work_items`,
    /// `work_await`, `queue_counters`.
    Read,
    /// `work_purge`.
    Purge,
}

impl Capability {
    /// Every capability, in the order the docs list them.
    pub const ALL: [Capability; 5] = [
        Capability::Enqueue,
        Capability::Claim,
        Capability::Operate,
        Capability::Read,
        Capability::Purge,
    ];

    /// The SQL name (`'claim'`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Enqueue => "enqueue",
            Capability::Claim => "claim",
            Capability::Operate => "operate",
            Capability::Read => "read",
            Capability::Purge => "purge",
        }
    }

    /// The capability named `text` exactly (lower case), if any.
    pub fn parse(text: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// The queues of a grant: one queue by name, or every queue whose name
/// starts with a prefix, written `prefix*` (`*` alone: every queue). A `*`
/// anywhere but at the end is part of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// The queue of this name.
    Queue(String),
    /// Every queue whose name starts with this (possibly empty) prefix.
    Prefix(String),
}

impl Pattern {
    /// The pattern written as `text`: a trailing `*` makes a prefix.
    pub fn parse(text: &str) -> Pattern {
        match text.strip_suffix('*') {
            Some(prefix) => Pattern::Prefix(prefix.to_owned()),
            None => Pattern::Queue(text.to_owned()),
        }
    }

    /// The queue name, or the prefix without its `*`.
    pub fn name(&self) -> &str {
        match self {
            Pattern::Queue(name) | Pattern::Prefix(name) => name,
        }
    }

    /// The pattern as written (and stored): the name, or the prefix and `*`.
    pub fn text(&self) -> String {
        match self {
            Pattern::Queue(name) => name.clone(),
            Pattern::Prefix(prefix) => format!("{prefix}*"),
        }
    }

    /// Whether `queue` is one of the pattern's queues (byte for byte).
    pub fn matches(&self, queue: &str) -> bool {
        match self {
            Pattern::Queue(name) => queue == name,
            Pattern::Prefix(prefix) => queue.starts_with(prefix.as_str()),
        }
    }

    /// The same set of queues as a SQL `LIKE` pattern: `%`, `_` and `\`
    /// in the name escaped with `\` (LIKE's default escape), and `%` for a
    /// prefix's rest.
    pub fn like(&self) -> String {
        let mut like = String::with_capacity(self.name().len() + 2);
        for c in self.name().chars() {
            if matches!(c, '%' | '_' | '\\') {
                like.push('\\');
            }
            like.push(c);
        }
        if let Pattern::Prefix(_) = self {
            like.push('%');
        }
        like
    }
}

/// The parts of a PostgreSQL `interval`, as [`pgrx::datum::Interval`] holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalParts {
    /// Months (counted as 30 days, as PostgreSQL does when comparing intervals).
    pub months: i32,
    /// Days.
    pub days: i32,
    /// Microseconds.
    pub micros: i64,
}

impl From<pgrx::datum::Interval> for IntervalParts {
    fn from(value: pgrx::datum::Interval) -> Self {
        IntervalParts {
            months: value.months(),
            days: value.days(),
            micros: value.micros(),
        }
    }
}

impl IntervalParts {
    /// Total length in microseconds, with a month as 30 days.
    pub fn total_micros(self) -> i128 {
        self.months as i128 * 30 * USECS_PER_DAY
            + self.days as i128 * USECS_PER_DAY
            + self.micros as i128
    }
}

/// A token a claim superseded: the item's lease had lapsed under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostToken {
    /// The item's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub key: String,
    /// The owner of the superseded token.
    pub owner: String,
    /// The superseded epoch.
    pub epoch: i64,
    /// The attempt the lapsed lease was (the item's `attempts` then).
    pub attempt: i32,
    /// When the lease lapsed (its `lease_until`).
    pub lapsed_at: TimestampWithTimeZone,
    /// Whether the item was dead-lettered (its final attempt) rather than
    /// claimed anew.
    pub dead_lettered: bool,
}

impl LostToken {
    /// The `error` of its `errors` entry.
    pub fn error(&self) -> &'static str {
        if self.dead_lettered {
            "lease expired on the final attempt"
        } else {
            "lease expired"
        }
    }
}

/// A validated token: what `work_claim` handed out, as the caller names it
/// (its checks and statements are `crate::verbs::lease`'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The item's id.
    pub(crate) id: i64,
    /// The owner the claim named.
    pub(crate) owner: String,
    /// The claim's epoch (the fencing token).
    pub(crate) epoch: i64,
}
