//! Prepared SPI plans, made once per backend and kept for its lifetime.
//!
//! Every statement the functions run is a `static` [`Statement`]: fixed SQL
//! text with `$n` parameters (values are never formatted into SQL) and the
//! parameter types. The first call in a backend prepares it with
//! `SPI_prepare` and `SPI_keepplan`; later calls execute the kept plan, so a
//! hot path is not parsed and planned per call. PostgreSQL's plan cache still
//! revalidates a kept plan when a table or index it uses changes.
//!
//! Kept plans always run as *generic* plans (the effect of
//! `plan_cache_mode = force_generic_plan`, for these statements only). Left
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

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};

use crate::error::Result;

/// A statement the extension runs: its SQL and parameter types.
pub struct Statement {
    /// Unique name, the cache key.
    pub name: &'static str,
    /// SQL text with `$1..$n` parameters.
    pub sql: &'static str,
    /// Parameter type OIDs, in order.
    pub args: &'static [pg_sys::Oid],
}

thread_local! {
    // Backends are single-threaded; PostgreSQL calls us only on its main
    // thread. A kept plan lives as long as the backend, so it is leaked on
    // purpose: the map hands out `&'static` references and nothing is
    // borrowed while a statement runs (it may raise and unwind).
    static PLANS: RefCell<HashMap<&'static str, &'static OwnedPreparedStatement>> =
        RefCell::new(HashMap::new());
}

/// Run `stmt` with `args` (read-write) on `client` and hand the result rows to
/// `read`, preparing and keeping the plan on first use in this backend.
pub fn run<R>(
    client: &mut SpiClient<'_>,
    stmt: &'static Statement,
    args: &[DatumWithOid<'_>],
    read: impl FnOnce(SpiTupleTable<'_>) -> Result<R>,
) -> Result<R> {
    let cached = PLANS.with(|plans| plans.borrow().get(stmt.name).copied());
    let plan = match cached {
        Some(plan) => plan,
        None => {
            let types: Vec<PgOid> = stmt.args.iter().map(|oid| PgOid::from(*oid)).collect();
            let plan: &'static OwnedPreparedStatement =
                Box::leak(Box::new(client.prepare_mut(stmt.sql, &types)?.keep()));
            PLANS.with(|plans| plans.borrow_mut().insert(stmt.name, plan));
            plan
        }
    };
    // `select` on a plan prepared with `prepare_mut` runs it read-write
    // (each statement takes a fresh snapshot and sees the ones before it)
    // without what `update` adds: an xid assigned up front. A claim that
    // finds nothing, a status read or a waiting claim then takes no xid
    // (none burnt, and a waiter holds no `backend_xid` back from vacuum).
    let rows = {
        let _generic = ForceGenericPlan::new();
        client.select(plan, None, args)?
    };
    read(rows)
}

/// Sets the backend's `plan_cache_mode` to force_generic_plan while it
/// lives and puts the previous value back when dropped, also when the
/// statement raises (pgrx unwinds through this frame; the pg test
/// `plan_cache_mode_is_restored_after_a_statement_raises` checks it). Only
/// the statement runs meanwhile; a trigger someone put on the extension's
/// table (it has none) would run inside the window and see the setting.
struct ForceGenericPlan(std::ffi::c_int);

impl ForceGenericPlan {
    fn new() -> Self {
        // SAFETY: a plain int GUC variable of this single-threaded backend.
        unsafe {
            let previous = pg_sys::plan_cache_mode;
            pg_sys::plan_cache_mode =
                pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as std::ffi::c_int;
            ForceGenericPlan(previous)
        }
    }
}

impl Drop for ForceGenericPlan {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { pg_sys::plan_cache_mode = self.0 };
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
