//! Prepared SPI plans, made once per backend and kept for its lifetime.
//!
//! Every statement the functions run is a `static` [`Statement`]: fixed SQL
//! text with `$n` parameters (values are never formatted into SQL) and the
//! parameter types. The first call in a backend prepares it with
//! `SPI_prepare` and `SPI_keepplan`; later calls execute the kept plan, so a
//! hot path is not parsed and planned per call. PostgreSQL's plan cache still
//! revalidates a kept plan when a table or index it uses changes.
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
    read(client.update(plan, None, args)?)
}
