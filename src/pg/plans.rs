//! Prepared SPI plans, made once per backend and kept for its lifetime.
//!
//! Every statement the functions run is a `static` [`Statement`]: fixed SQL
//! text with `$n` parameters (values are never formatted into SQL), written
//! as a raw string with real newlines (so `EXPLAIN`, `pg_stat_statements`
//! and error positions show readable SQL), and the typed struct its
//! parameters are bound from ([`Params`], declared with [`params!`] next to
//! the SQL). The first call in a backend prepares it with
//! `SPI_prepare` and `SPI_keepplan`; later calls execute the kept plan, so a
//! hot path is not parsed and planned per call. PostgreSQL's plan cache still
//! revalidates a kept plan when a table or index it uses changes.
//!
//! Kept plans always run as *generic* plans (the effect of
//! `plan_cache_mode = force_generic_plan`, for these statements only), and
//! without JIT compilation (`jit = off`, likewise; see [`KeptPlanSettings`]
//! for what JIT cost a claim). Left
//! to choose, the plan cache compares a generic plan's estimate with custom
//! plans' and, for the claim (whose `LIMIT $4` a custom plan knows to be 1),
//! re-plans it on every call: measured at about 200 µs of a 375 µs claim
//! (pg_stat_statements, pgbench, docs/benchmarks.md). Each statement has one
//! right shape whatever its parameters: an index walk in claim order, or an
//! index lookup by id.
//!
//! All SQL names its tables, functions and operators schema-qualified
//! (`OPERATOR(pg_catalog.=)`), so a caller's `search_path` cannot redirect it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};

use crate::base::error::{Result, WorkfenceError};

/// The parameters of a statement: one struct per statement (or per shape of
/// statement), its fields bound to `$1..$n` in the order they are declared.
/// Declare them with [`params!`], next to the statement's SQL.
pub trait Params {
    /// The struct itself with every lifetime `'static`: what a
    /// [`Statement`] names (a `static` cannot name a shorter lifetime), so
    /// that a statement takes its own parameter struct, borrowing for any
    /// lifetime, and no other.
    type Family: 'static;
    /// The type OIDs of `$1..$n`.
    const TYPES: &'static [pg_sys::Oid];
    /// The values of `$1..$n` (moved, not copied: a batch of payloads is
    /// not cloned to be bound).
    fn into_datums(self) -> Vec<DatumWithOid<'static>>;
}

/// A statement without parameters.
impl Params for () {
    type Family = ();
    const TYPES: &'static [pg_sys::Oid] = &[];
    fn into_datums(self) -> Vec<DatumWithOid<'static>> {
        Vec::new()
    }
}

/// Declare a [`Params`] struct: each field with its type and the OID of its
/// SQL type, bound to `$1..$n` in declaration order. For example
///
/// ```ignore
/// params! {
///     /// `$1` queue, `$2` key.
///     struct QueueKey<'a> { queue: &'a str = TEXTOID, key: &'a str = TEXTOID }
/// }
/// ```
macro_rules! params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident<$lt:lifetime> {
            $($(#[$fmeta:meta])* $field:ident : $ty:ty = $oid:ident),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name<$lt> {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl<$lt> $crate::pg::plans::Params for $name<$lt> {
            type Family = $name<'static>;
            const TYPES: &'static [::pgrx::pg_sys::Oid] = &[$(::pgrx::pg_sys::$oid),*];
            fn into_datums(self) -> Vec<::pgrx::datum::DatumWithOid<'static>> {
                vec![$(self.$field.into()),*]
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$fmeta:meta])* $field:ident : $ty:ty = $oid:ident),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::pg::plans::Params for $name {
            type Family = $name;
            const TYPES: &'static [::pgrx::pg_sys::Oid] = &[$(::pgrx::pg_sys::$oid),*];
            fn into_datums(self) -> Vec<::pgrx::datum::DatumWithOid<'static>> {
                vec![$(self.$field.into()),*]
            }
        }
    };
}
pub(crate) use params;

/// A statement the extension runs: fixed SQL with `$1..$n` bound from a `P`
/// ([`Params`], named with `'static` lifetimes: `Statement<ClaimParams>` in a
/// `static`; `run` takes the struct with any lifetime). Always a `static` item: the plan cache is keyed by its
/// address, so two statements never share a plan, whatever their names or
/// text (a `const` would have no one address).
pub struct Statement<P> {
    /// SQL text with `$1..$n` parameters, as `P` declares them.
    pub sql: &'static str,
    params: PhantomData<fn(&P)>,
}

impl<P> Statement<P> {
    /// The statement `sql`, its parameters bound from a `P`.
    pub const fn new(sql: &'static str) -> Self {
        Statement {
            sql,
            params: PhantomData,
        }
    }
}

/// A kept plan, with what it was prepared from (checked at every use).
struct Kept {
    sql: &'static str,
    types: &'static [pg_sys::Oid],
    plan: &'static OwnedPreparedStatement,
}

thread_local! {
    // Backends are single-threaded; PostgreSQL calls us only on its main
    // thread. A kept plan lives as long as the backend, so it is leaked on
    // purpose: the map hands out `&'static` references and nothing is
    // borrowed while a statement runs (it may raise and unwind). Keyed by
    // the address of the statement's `static`.
    static PLANS: RefCell<HashMap<usize, Kept>> = RefCell::new(HashMap::new());
}

/// Run `stmt` with `params` (read-write) on `client` and hand the result rows
/// to `read`, preparing and keeping the plan on first use in this backend.
pub fn run<P: Params, R>(
    client: &mut SpiClient<'_>,
    stmt: &'static Statement<P::Family>,
    params: P,
    read: impl FnOnce(SpiTupleTable<'_>) -> Result<R>,
) -> Result<R> {
    let key = std::ptr::from_ref(stmt) as usize;
    let cached = PLANS.with(|plans| {
        plans.borrow().get(&key).map(|kept| {
            (
                kept.plan,
                std::ptr::eq(kept.sql, stmt.sql) && kept.types == P::TYPES,
            )
        })
    });
    let plan = match cached {
        Some((plan, true)) => plan,
        // Two statements at one address: impossible for distinct statics;
        // a bug if it ever happens, never a wrong plan.
        Some((_, false)) => return Err(WorkfenceError::PlanKeyClash { sql: stmt.sql }),
        None => {
            let types: Vec<PgOid> = P::TYPES.iter().map(|oid| PgOid::from(*oid)).collect();
            let plan: &'static OwnedPreparedStatement =
                Box::leak(Box::new(client.prepare_mut(stmt.sql, &types)?.keep()));
            PLANS.with(|plans| {
                plans.borrow_mut().insert(
                    key,
                    Kept {
                        sql: stmt.sql,
                        types: P::TYPES,
                        plan,
                    },
                )
            });
            plan
        }
    };
    let args = params.into_datums();
    // `select` on a plan prepared with `prepare_mut` runs it read-write
    // (each statement takes a fresh snapshot and sees the ones before it)
    // without what `update` adds: an xid assigned up front. A claim that
    // finds nothing, a status read or a waiting claim then takes no xid
    // (none burnt, and a waiter holds no `backend_xid` back from vacuum).
    let rows = {
        let _settings = KeptPlanSettings::new();
        client.select(plan, None, &args)?
    };
    read(rows)
}

/// Sets the backend's `plan_cache_mode` to force_generic_plan, and `jit`
/// and `enable_seqscan` off, while it lives and puts the previous values back when dropped, also
/// when the statement raises (pgrx unwinds through this frame; the pg test
/// `plan_settings_are_restored_after_a_statement_raises` checks it). Only
/// the statement runs meanwhile. A trigger someone put on the extension's
/// tables (the kept statements fire none of its own) would run inside the
/// window and see the settings: one that saved them itself
/// (`set_config('jit', current_setting('jit'), true)`) would leave them in
/// the session after the statement, as functions with a `SET` clause do
/// not, since the values are written to the variables rather than through
/// the GUC stack.
///
/// JIT: the planner marks a plan for JIT compilation when its estimated
/// cost passes `jit_above_cost` (100,000 by default), and a kept plan is
/// compiled anew at every execution. A generic plan's estimate does not
/// know its `LIMIT` and counts every correlated probe of a walk in claim
/// order: the grouped claim's pick on a queue of 8,000 items in 1,000
/// groups was estimated at 117,809 and spent 25 ms of each 26 ms call
/// compiling 57 functions (auto_explain, PostgreSQL 15 with LLVM), against
/// 0.4 ms without. These statements read a few index pages each; none
/// gains from JIT.
///
/// Sequential scans: `enable_seqscan` is off while a kept statement is
/// planned (its generic plan is built, and rebuilt after an invalidation
/// such as `ANALYZE`, at an execution, inside this window), so the planner
/// takes a table's index wherever it has one (a table without one is still
/// read in full). The statements' `LIMIT`s are parameters or expressions,
/// which the planner takes to stop after a tenth of the rows it expects;
/// and a B-tree keeps the pages of rows deleted since (items_due_idx held
/// 1,017 pages for 4,000 items after a backlog of 100,000 was drained and
/// vacuumed). Priced by those pages, a batch claim's walk of a queue's due
/// items in claim order lost to a sequential scan and sort of the whole
/// table: 80 of a 10-item claim's 193 buffers beside 4,000 items
/// (auto_explain, PostgreSQL 15), and as many per claim however few items
/// it takes. Each statement is an index walk or look-up by design (see the
/// module comment), never a scan of a table that grows.
struct KeptPlanSettings {
    plan_cache_mode: std::ffi::c_int,
    jit: bool,
    seqscan: bool,
}

impl KeptPlanSettings {
    fn new() -> Self {
        // SAFETY: plain GUC variables of this single-threaded backend.
        unsafe {
            let previous = KeptPlanSettings {
                plan_cache_mode: pg_sys::plan_cache_mode,
                jit: pg_sys::jit_enabled,
                seqscan: pg_sys::enable_seqscan,
            };
            pg_sys::plan_cache_mode =
                pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as std::ffi::c_int;
            pg_sys::jit_enabled = false;
            pg_sys::enable_seqscan = false;
            previous
        }
    }
}

impl Drop for KeptPlanSettings {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe {
            pg_sys::plan_cache_mode = self.plan_cache_mode;
            pg_sys::jit_enabled = self.jit;
            pg_sys::enable_seqscan = self.seqscan;
        }
    }
}

/// The OID of relation `name` in schema `workfence`, or `InvalidOid` if
/// there is none (the extension is not installed in this database). Call
/// inside a transaction: catalog look-ups by name.
pub fn workfence_relation(name: &std::ffi::CStr) -> pg_sys::Oid {
    // SAFETY: catalog look-ups by NUL-terminated names, missing_ok.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"workfence".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return pg_sys::InvalidOid;
        }
        pg_sys::get_relname_relid(name.as_ptr(), schema)
    }
}

/// The rows of table `relid` that a snapshot taken now sees (the newest
/// committed state, whatever the isolation level: as PostgreSQL reads its
/// own catalogs, so a revoke counts at once even inside a REPEATABLE READ
/// transaction), each handed to `each` deformed into its columns.
///
/// # Safety
/// Call inside a transaction, with `relid` a table of `natts` columns.
pub unsafe fn latest_rows(
    relid: pg_sys::Oid,
    natts: usize,
    mut each: impl FnMut(&[pg_sys::Datum], &[bool]),
) {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let rel = pg_sys::table_open(relid, lock);
    let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
    let scan = pg_sys::systable_beginscan(
        rel,
        pg_sys::InvalidOid,
        false,
        snapshot,
        0,
        std::ptr::null_mut(),
    );
    let mut values = vec![pg_sys::Datum::from(0); natts];
    let mut nulls = vec![true; natts];
    loop {
        let tuple = pg_sys::systable_getnext(scan);
        if tuple.is_null() {
            break;
        }
        pg_sys::heap_deform_tuple(
            tuple,
            (*rel).rd_att,
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
        );
        each(&values, &nulls);
    }
    pg_sys::systable_endscan(scan);
    pg_sys::UnregisterSnapshot(snapshot);
    pg_sys::table_close(rel, lock);
}

/// The owner of relation `relid` (one this transaction may open): for the
/// extension's tables, the role its `SECURITY DEFINER` functions run as.
///
/// # Safety
/// Call inside a transaction, with `relid` an existing relation.
pub unsafe fn relation_owner(relid: pg_sys::Oid) -> pg_sys::Oid {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let rel = pg_sys::relation_open(relid, lock);
    let owner = (*(*rel).rd_rel).relowner;
    pg_sys::relation_close(rel, lock);
    owner
}

/// The schema of the extension installed in this database, as far as the
/// library's statements care: this version's, or one of a release before
/// 0.6.0.
///
/// A new library runs against the old schema from the moment it is
/// installed (a package upgrade replaces the file; new backends load it)
/// until `ALTER EXTENSION pg_workfence UPDATE` commits, and calls made
/// meanwhile must keep working (CONTRIBUTING.md, "An update keeps every
/// function callable"). The few statements that name what 0.6.0 added
/// (`workfence.queues`, `claimed_at`, `max_run`, `errors`) therefore come
/// in two forms, a [`Versioned`] pair built from one text with
/// [`by_schema!`]; the legacy form does what the released versions did
/// (no pause, no run-time limit, no error history), and no `work_lease_lost`
/// is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// 0.6.0 or later: `workfence.queues` exists.
    Current,
    /// Before 0.6.0 (the update has not run yet).
    Legacy,
}

/// The schema of this database's extension, read from the catalog caches
/// at every call (two cache look-ups): a concurrent `ALTER EXTENSION ...
/// UPDATE` is seen as soon as it commits. Call inside a transaction.
pub fn schema() -> Schema {
    if workfence_relation(c"queues") == pg_sys::InvalidOid {
        Schema::Legacy
    } else {
        Schema::Current
    }
}

/// A statement in two forms, for the [`Schema`] the database has: `current`
/// and `legacy` (both `static`, so each keeps its own plan).
pub struct Versioned<P> {
    /// For this version's schema.
    pub current: Statement<P>,
    /// For a schema before 0.6.0.
    pub legacy: Statement<P>,
}

impl<P> Versioned<P> {
    /// The form for the database's schema now.
    pub fn get(&'static self) -> &'static Statement<P> {
        match schema() {
            Schema::Current => &self.current,
            Schema::Legacy => &self.legacy,
        }
    }
}

/// A piece of SQL text that differs between the two forms of a
/// [`Versioned`] statement: `by_schema!(current, "...", "...")` is the first
/// text, `by_schema!(legacy, ...)` the second; statement templates take the
/// form as a macro argument and pass it on, so the text they share is
/// written once.
macro_rules! by_schema {
    (life, $current:expr, $legacy:expr) => {
        $current
    };
    (current, $current:expr, $legacy:expr) => {
        $current
    };
    (legacy, $current:expr, $legacy:expr) => {
        $legacy
    };
}
pub(crate) use by_schema;

/// A piece of SQL text only the `life` form of a [`Claiming`] statement
/// has (it names what 0.12.0 added): `life_only!(life, "...")` is the
/// text, any other form's is empty.
macro_rules! life_only {
    (life, $text:expr) => {
        $text
    };
    ($other:ident, $text:expr) => {
        ""
    };
}
pub(crate) use life_only;

/// A claim statement in three forms: `life` for a schema of 0.12.0 or
/// later, which returns the item's `trace` too (a column only that schema
/// has; `read_claim_result` finds it by name), and a [`Versioned`] pair for
/// the schemas before it, whose claims hand out no trace.
pub struct Claiming<P> {
    /// For 0.12.0's schema (the index `workfence.items_head_idx` exists).
    pub life: Statement<P>,
    /// For the schemas before.
    pub older: Versioned<P>,
}

impl<P> Claiming<P> {
    /// The form for the database's schema now.
    pub fn get(&'static self) -> &'static Statement<P> {
        if schema_has_heads() {
            &self.life
        } else {
            self.older.get()
        }
    }
}

/// Whether this database's schema has flow control (0.10.0 or later: the
/// index `workfence.items_group_idx` exists). A library newer than the
/// schema (installed, `ALTER EXTENSION ... UPDATE` not yet run) claims as
/// the schema's version did. Two catalog-cache look-ups.
pub fn schema_has_flow() -> bool {
    workfence_relation(c"items_group_idx") != pg_sys::InvalidOid
}

/// The form of a statement that names what 0.10.0 added (`group_key`, the
/// flow settings of `workfence.queues`) for this database's schema: `current`
/// from 0.10.0 on, `legacy` before (a library newer than the schema serves
/// the old one until `ALTER EXTENSION ... UPDATE`).
pub fn for_schema<P>(pair: &'static Versioned<P>) -> &'static Statement<P> {
    if schema_has_flow() {
        &pair.current
    } else {
        &pair.legacy
    }
}

/// Whether this database's schema has group heads (0.12.0 or later: the
/// index `workfence.items_head_idx` exists, with the columns `behind` and
/// `turn` and the setting `per_group`).
pub fn schema_has_heads() -> bool {
    workfence_relation(c"items_head_idx") != pg_sys::InvalidOid
}

/// Whether this database's schema keeps limits in slot rows (0.12.0 or
/// later: the table `workfence.queue_slots` exists). Before, a limited
/// queue's claims take turns on its limit lock (`flow::legacy_allowance`).
pub fn schema_has_slots() -> bool {
    workfence_relation(c"queue_slots") != pg_sys::InvalidOid
}
