//! Queue-scoped privileges (from 0.7.0): which queues a role reaches, and
//! with which capability.
//!
//! `EXECUTE` on a function says what a role may call; a **queue grant**
//! says on which queues: `work_grant('claim', 'billing.*', 'billing_worker')`
//! lets `billing_worker` (and every role that has its privileges, as
//! PostgreSQL's own GRANT counts membership, `has_privs_of_role`) claim from
//! the queues whose names start with `billing.` and use the tokens of their
//! items. Five capabilities ([`Capability`]), each covering a set of
//! functions. The idea is RabbitMQ's per-user configure/write/read patterns
//! and the queue-scoped policies of Amazon SQS, done inside the functions
//! since every queue shares one table (pgmq, with a table per queue, gets
//! the same from table GRANTs).
//!
//! **Opt-in.** Grants are checked only once the extension's owner turns
//! them on (`work_enforce_grants(true)`, a row in
//! `workfence.queue_grant_mode`); until then every call behaves exactly as
//! before 0.7.0 and the function `EXECUTE` grants alone decide. An update
//! to 0.7.0 leaves them off.
//!
//! **Whose rights.** The role the session runs as: its login role, or the
//! one `SET ROLE` chose (`GetOuterUserId`). The extension's functions are
//! `SECURITY DEFINER`, so inside them the current user is always their
//! owner, and PostgreSQL keeps no record of who the current user was
//! before: a `SECURITY DEFINER` function of a user's that calls ours is
//! therefore judged by the session's role, not by its own owner (it lends
//! its owner's `EXECUTE`, not its queue grants). Superusers reach every
//! queue, as PostgreSQL lets them past every GRANT. Inside a
//! security-restricted operation (a maintenance command running a table
//! owner's index or statistics expressions as that owner, autovacuum
//! included), the session's role is whoever ran the command, so nothing is
//! reached from there. Only a superuser or a member of the extension's
//! owner may change the grants, `EXECUTE` or not.
//!
//! **Refused calls.** A call that names a queue the role may not reach
//! raises 42501 naming the queue, before it changes anything. A token call
//! (renew, finish, release, fail, assert, lease status) names an item by id,
//! and must not tell whether an item exists in a queue the role may not
//! reach: it is refused exactly as for a missing item (false, `missing`,
//! 55000 with the missing DETAIL). Its statements carry the role's claim
//! scope as a parameter ([`token_scope`]), so a forbidden row is never
//! matched, locked or changed.
//!
//! **The cache.** Each backend reads the grants once and keeps, per
//! (role, capability), the queue patterns the role reaches ([`Scope`]);
//! the next call after a `work_grant`, `work_revoke` or
//! `work_enforce_grants` commits, or after a role's membership or
//! attributes change, reads them again ([`crate::pg::invalidation`]). A revoke
//! therefore takes effect at the role's next call. The grants are read
//! with a snapshot taken then, not the transaction's, so that holds inside
//! a REPEATABLE READ transaction too, as for PostgreSQL's own catalogs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::access::validate;
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::invalidation::{self, Watched};
use crate::pg::plans::{self, params, Statement};

pub use crate::base::types::{Capability, Pattern};

/// The queues one role reaches with one capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every queue: grants are not enforced, or the role is a superuser.
    Every,
    /// The queues of these patterns (none: no queue at all), with the same
    /// as `LIKE` patterns for the token statements.
    Only {
        /// The patterns of the grants that reach the role.
        patterns: Vec<Pattern>,
        /// [`Pattern::like`] of each.
        like: Vec<String>,
    },
}

impl Scope {
    /// The scope of these patterns.
    pub fn only(patterns: Vec<Pattern>) -> Scope {
        let like = patterns.iter().map(Pattern::like).collect();
        Scope::Only { patterns, like }
    }

    /// The `LIKE` patterns to bind to a token statement: `None` for every
    /// queue (the statement's open form), else the patterns' (see
    /// `crate::verbs::lease`).
    pub fn like(&self) -> Option<Vec<String>> {
        match self {
            Scope::Every => None,
            Scope::Only { like, .. } => Some(like.clone()),
        }
    }

    /// Whether `queue` is in the scope.
    pub fn allows(&self, queue: &str) -> bool {
        match self {
            Scope::Every => true,
            Scope::Only { patterns, .. } => patterns.iter().any(|p| p.matches(queue)),
        }
    }
}

/// One row of `workfence.queue_grants`.
struct Grant {
    role: pg_sys::Oid,
    capability: Capability,
    pattern: Pattern,
}

/// The grants as one backend read them.
struct Grants {
    /// The invalidation generation they were read in.
    generation: u64,
    /// Whether grants are enforced (`workfence.queue_grant_mode` has its row).
    enforced: bool,
    /// Every grant (empty when not enforced: they decide nothing then).
    grants: Vec<Grant>,
    /// The scopes worked out so far, per (role, capability).
    scopes: HashMap<(pg_sys::Oid, Capability), Scope>,
}

impl Grants {
    /// The scope of `role` for `capability`, worked out once.
    fn scope(&mut self, role: pg_sys::Oid, capability: Capability) -> Scope {
        if !self.enforced {
            return Scope::Every;
        }
        // SAFETY: reads a backend global.
        if unsafe { pg_sys::InSecurityRestrictedOperation() } {
            // A maintenance command (ANALYZE, VACUUM, CREATE INDEX, REINDEX,
            // REFRESH MATERIALIZED VIEW, autovacuum) runs a table owner's
            // index and statistics expressions as that owner, restricted;
            // the session's role is then whoever ran the command (a
            // superuser, autovacuum), whose grants must not be lent to the
            // owner's code. Nothing is reached from there.
            return Scope::only(Vec::new());
        }
        if let Some(scope) = self.scopes.get(&(role, capability)) {
            return scope.clone();
        }
        // SAFETY: catalog look-ups of roles (cached by PostgreSQL); they
        // raise only on a broken catalog.
        let scope = if unsafe { pg_sys::superuser_arg(role) } {
            Scope::Every
        } else {
            Scope::only(
                self.grants
                    .iter()
                    .filter(|g| {
                        g.capability == capability
                            && unsafe { pg_sys::has_privs_of_role(role, g.role) }
                    })
                    .map(|g| g.pattern.clone())
                    .collect(),
            )
        };
        self.scopes.insert((role, capability), scope.clone());
        scope
    }
}

thread_local! {
    /// The grants this backend read, kept until the generation changes.
    static CACHE: RefCell<Option<Grants>> = const { RefCell::new(None) };
}

/// The grants of this database (`grants` the OID of `workfence.queue_grants`,
/// `mode` that of `workfence.queue_grant_mode`), as a snapshot taken now sees
/// them. Reads the tables directly, not through SQL: no statement, no plan.
fn read_grants(generation: u64, grants: pg_sys::Oid, mode: pg_sys::Oid) -> Grants {
    let mut read = Grants {
        generation,
        enforced: false,
        grants: Vec::new(),
        scopes: HashMap::new(),
    };
    // SAFETY: the two tables of this version's schema (looked up by the
    // caller), with their columns: (enforced, enforced_since) and (role,
    // capability, queues, granted_at); text columns read by pgrx's text
    // FromDatum, which detoasts.
    unsafe {
        plans::latest_rows(mode, 2, |_, _| read.enforced = true);
        if !read.enforced {
            return read;
        }
        plans::latest_rows(grants, 4, |values, nulls| {
            if nulls[..3].iter().any(|null| *null) {
                return;
            }
            let role = pg_sys::Oid::from_datum(values[0], false);
            let capability = String::from_datum(values[1], false);
            let queues = String::from_datum(values[2], false);
            if let (Some(role), Some(capability), Some(queues)) = (role, capability, queues) {
                // The table's CHECK admits only the capabilities' names.
                if let Some(capability) = Capability::parse(&capability) {
                    read.grants.push(Grant {
                        role,
                        capability,
                        pattern: Pattern::parse(&queues),
                    });
                }
            }
        });
    }
    read
}

/// The role whose grants count: the session's current role (its login
/// role, or the one `SET ROLE` chose), not the `SECURITY DEFINER` owner
/// the function runs as.
fn session_role() -> pg_sys::Oid {
    // SAFETY: reads a backend global.
    unsafe { pg_sys::GetOuterUserId() }
}

/// The queues the session's role reaches with `capability`. Call inside a
/// transaction.
pub fn scope(capability: Capability) -> Result<Scope> {
    let generation = invalidation::generation();
    let role = session_role();
    let kept = CACHE.with(|cache| match &mut *cache.borrow_mut() {
        Some(grants) if grants.generation == generation => Some(grants.scope(role, capability)),
        _ => None,
    });
    if let Some(scope) = kept {
        return Ok(scope);
    }
    let grants_table = invalidation::watch(Watched::QueueGrants);
    let mode_table = invalidation::watch(Watched::QueueGrantMode);
    if grants_table == pg_sys::InvalidOid || mode_table == pg_sys::InvalidOid {
        // A schema before 0.7.0: nothing is enforced, and nothing is kept
        // (after ALTER EXTENSION ... UPDATE the next call finds the table).
        return Ok(Scope::Every);
    }
    let mut grants = read_grants(generation, grants_table, mode_table);
    let scope = grants.scope(role, capability);
    CACHE.with(|cache| *cache.borrow_mut() = Some(grants));
    Ok(scope)
}

/// Whether the session's role may use `capability` on `queue`.
pub fn allows(capability: Capability, queue: &str) -> Result<bool> {
    Ok(scope(capability)?.allows(queue))
}

/// Raise 42501 naming `queue` unless the session's role may use
/// `capability` on it.
pub fn check(capability: Capability, queue: &str) -> Result<()> {
    if allows(capability, queue)? {
        return Ok(());
    }
    Err(forbidden(capability, Some(queue.to_owned())))
}

/// Raise 42501 unless the session's role may use `capability` on every
/// queue (a call that names none: `work_purge` without a queue).
pub fn check_every_queue(capability: Capability) -> Result<()> {
    let every = match scope(capability)? {
        Scope::Every => true,
        Scope::Only { patterns, .. } => patterns
            .iter()
            .any(|p| matches!(p, Pattern::Prefix(prefix) if prefix.is_empty())),
    };
    if every {
        return Ok(());
    }
    Err(forbidden(capability, None))
}

/// The 42501 of `capability` on `queue` (`None`: every queue) for the
/// session's role.
fn forbidden(capability: Capability, queue: Option<String>) -> WorkfenceError {
    WorkfenceError::QueueForbidden {
        capability,
        queue,
        role: role_name(session_role()),
    }
}

/// The name of `role`, or its OID for a role dropped since.
fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: a catalog look-up by OID; noerr, so a NULL for a dropped role.
    let name = unsafe { pg_sys::GetUserNameFromId(role, true) };
    if name.is_null() {
        return format!("{}", role.to_u32());
    }
    // SAFETY: a NUL-terminated palloc'd string.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

// Grant `$2` on queues `$3` to role `$1`; a row only if it is new.
static GRANT: Statement<GrantParams> = Statement::new(
    r#"
INSERT INTO workfence.queue_grants AS g (role, capability, queues, granted_at)
VALUES ($1::pg_catalog.regrole, $2, $3, pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT queue_grants_pkey DO NOTHING
RETURNING g.queues
"#,
);

// Take grant `$2` on queues `$3` from role `$1`; a row only if it existed.
static REVOKE: Statement<GrantParams> = Statement::new(
    r#"
DELETE FROM workfence.queue_grants AS g
 WHERE g.role::pg_catalog.oid OPERATOR(pg_catalog.=) $1
   AND g.capability OPERATOR(pg_catalog.=) $2
   AND g.queues OPERATOR(pg_catalog.=) $3
RETURNING g.queues
"#,
);

params! {
    /// `$1` role, `$2` capability, `$3` queues (the pattern as written).
    struct GrantParams<'a> {
        role: pg_sys::Oid = OIDOID,
        capability: &'a str = TEXTOID,
        queues: &'a str = TEXTOID,
    }
}

// Turn enforcement on; a row only if it was off.
static ENFORCE: Statement<()> = Statement::new(
    r#"
INSERT INTO workfence.queue_grant_mode AS m (enforced_since)
VALUES (pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT queue_grant_mode_pkey DO NOTHING
RETURNING m.enforced_since
"#,
);

// Turn enforcement off; a row only if it was on.
static STOP_ENFORCING: Statement<()> = Statement::new(
    r#"
DELETE FROM workfence.queue_grant_mode AS m
RETURNING m.enforced_since
"#,
);

// The grants of roles that no longer exist (DROP ROLE keeps them: a
// `regrole` column records no dependency). Deleted at every change, so that a
// role created later with a reused OID inherits nothing.
static FORGET_DROPPED_ROLES: Statement<()> = Statement::new(
    r#"
DELETE FROM workfence.queue_grants AS g
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                    WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid)
RETURNING g.queues
"#,
);

/// Raise 42501 unless the session's role may manage queue grants: a
/// superuser, or a role with the privileges of the owner of the extension's
/// tables. `EXECUTE` on `work_grant` is not enough (an `ALTER DEFAULT
/// PRIVILEGES` or a `GRANT ... ON ALL FUNCTIONS` can hand it out), since a
/// role that could call it could grant itself every queue.
fn check_owner() -> Result<()> {
    let role = session_role();
    let table = plans::workfence_relation(Watched::QueueGrants.name());
    // SAFETY: catalog look-ups of roles and of an existing relation.
    let allowed = unsafe {
        !pg_sys::InSecurityRestrictedOperation()
            && (pg_sys::superuser_arg(role)
                || (table != pg_sys::InvalidOid
                    && pg_sys::has_privs_of_role(role, plans::relation_owner(table))))
    };
    if allowed {
        return Ok(());
    }
    Err(WorkfenceError::NotGrantManager {
        role: role_name(role),
    })
}

/// Run a statement that changes the grants, after forgetting the grants of
/// dropped roles; true if it changed a row, and then every backend reads
/// the grants again once this transaction commits.
fn change<P: plans::Params>(
    stmt: &'static Statement<P::Family>,
    params: P,
    table: Watched,
) -> Result<bool> {
    check_owner()?;
    let (forgot, changed) = Spi::connect_mut(|client| {
        let forgot = plans::run(client, &FORGET_DROPPED_ROLES, (), |rows| {
            Ok(!rows.is_empty())
        })?;
        let changed = plans::run(client, stmt, params, |rows| Ok(!rows.is_empty()))?;
        Ok::<_, WorkfenceError>((forgot, changed))
    })?;
    if forgot {
        invalidation::invalidate(Watched::QueueGrants);
    }
    if changed {
        invalidation::invalidate(table);
    }
    Ok(changed)
}

/// The OID of the role named `name` exactly.
fn role_oid(name: &str) -> Result<pg_sys::Oid> {
    let unknown = || WorkfenceError::UnknownRole {
        role: name.to_owned(),
    };
    let name_c = CString::new(name).map_err(|_| unknown())?;
    // SAFETY: a catalog look-up by a NUL-terminated name; missing_ok.
    let oid = unsafe { pg_sys::get_role_oid(name_c.as_ptr(), true) };
    if oid == pg_sys::InvalidOid {
        return Err(unknown());
    }
    Ok(oid)
}

/// Validated (capability, queues, role) of `work_grant` / `work_revoke`.
fn grant_arguments(
    capability: Option<String>,
    queues: Option<String>,
    role: Option<String>,
) -> Result<(Capability, Pattern, pg_sys::Oid)> {
    let capability = validate::capability(capability)?;
    let queues = validate::queues(queues)?;
    let role = role_oid(&validate::role(role)?)?;
    Ok((capability, queues, role))
}

/// Let a role use a capability on a queue or a prefix of queues.
///
/// SQL: `workfence.work_grant(capability text, queues text, role text)
/// RETURNS boolean`. `capability`: `enqueue`, `claim`, `operate`, `read`
/// or `purge` (see [`Capability`]); `queues`: a queue name, or a prefix
/// followed by `*` (`'billing.*'`; `'*'`: every queue); `role`: a role
/// name, exactly (case counts); members of the role are covered too, as
/// by PostgreSQL's GRANT. True if the grant is new, false if it existed.
/// Takes effect for every session at its next call after the transaction
/// commits, and only while grants are enforced (`work_enforce_grants`).
/// For the extension's owner (grant `EXECUTE` to no one else).
///
/// Errors: 22004 for a NULL argument; 22023 for an unknown capability, an
/// empty `queues`, a name or prefix over 128 bytes or with control
/// characters, an empty role name or one over 63 bytes; 42704 for a role
/// that does not exist; 42501 when the session's role is neither a
/// superuser nor a member of the extension's owner (see `check_owner`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_grant(
    capability: Option<String>,
    queues: Option<String>,
    role: Option<String>,
) -> bool {
    (|| {
        let (capability, queues, role) = grant_arguments(capability, queues, role)?;
        change(
            &GRANT,
            GrantParams {
                role,
                capability: capability.as_str(),
                queues: &queues.text(),
            },
            Watched::QueueGrants,
        )
    })()
    .or_report()
}

/// Take back a grant made with `work_grant`.
///
/// SQL: `workfence.work_revoke(capability text, queues text, role text)
/// RETURNS boolean`. The arguments name the grant exactly as it was made
/// (`'billing.*'` revokes the grant of `'billing.*'`, not one of
/// `'billing.invoices'`). True if the grant existed and is gone. Takes
/// effect at every session's next call after the transaction commits: a
/// worker of the role that holds a lease then finds its token refused as
/// if the item were missing. For the extension's owner.
///
/// Errors: 22004 for a NULL argument; 22023 for an unknown capability, an
/// empty `queues`, a name or prefix over 128 bytes or with control
/// characters, an empty role name or one over 63 bytes; 42704 for a role
/// that does not exist; 42501 when the session's role is neither a
/// superuser nor a member of the extension's owner.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_revoke(
    capability: Option<String>,
    queues: Option<String>,
    role: Option<String>,
) -> bool {
    (|| {
        let (capability, queues, role) = grant_arguments(capability, queues, role)?;
        change(
            &REVOKE,
            GrantParams {
                role,
                capability: capability.as_str(),
                queues: &queues.text(),
            },
            Watched::QueueGrants,
        )
    })()
    .or_report()
}

/// Turn the checking of queue grants on or off for this database.
///
/// SQL: `workfence.work_enforce_grants(enforced boolean) RETURNS boolean`.
/// On, every call of a role that is not a superuser is checked against the
/// queue grants of the role (and of the roles it is a member of): a role
/// without a grant reaches no queue at all. Off (the default, and what an
/// update from an earlier version leaves), grants are kept but decide
/// nothing, and the function `EXECUTE` grants alone decide, as before 0.7.0.
/// Make the grants first and turn enforcement on in the same transaction,
/// so that no worker is locked out in between. True if the setting changed.
/// For the extension's owner.
///
/// Errors: 22004 for a NULL `enforced`; 42501 when the session's role is
/// neither a superuser nor a member of the extension's owner.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_enforce_grants(enforced: Option<bool>) -> bool {
    (|| {
        let stmt = if validate::required("enforced", enforced)? {
            &ENFORCE
        } else {
            &STOP_ENFORCING
        };
        change(stmt, (), Watched::QueueGrantMode)
    })()
    .or_report()
}

/// Whether the calling session's role may use a capability on a queue.
///
/// SQL: `workfence.work_may(capability text, queue text) RETURNS boolean`.
/// True when queue grants are not enforced, when the role is a superuser,
/// or when a grant of `capability` to the role (or a role it is a member
/// of) covers `queue`. It answers for the session's own role only, so any
/// role that may use the queue may ask (a dashboard hides what its user may
/// not do); `work_queue_stats` uses it to show a role only the queues it
/// may read. `PUBLIC` may execute it (`sql/finalize.sql`), the one function
/// it may.
///
/// Errors: 22004 for a NULL argument; 22023 for an unknown capability or a
/// bad queue (see `work_enqueue`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_may(capability: Option<String>, queue: Option<String>) -> bool {
    (|| {
        let capability = validate::capability(capability)?;
        let queue = validate::queue(queue)?;
        allows(capability, &queue)
    })()
    .or_report()
}

#[cfg(test)]
mod tests {
    use super::{Capability, Pattern, Scope};

    #[test]
    fn a_trailing_star_makes_a_prefix_anything_else_a_name() {
        assert_eq!(
            Pattern::parse("billing.*"),
            Pattern::Prefix("billing.".into())
        );
        assert_eq!(Pattern::parse("*"), Pattern::Prefix(String::new()));
        assert_eq!(Pattern::parse("a*b"), Pattern::Queue("a*b".into()));
        assert_eq!(Pattern::parse("billing"), Pattern::Queue("billing".into()));
        for text in ["billing.*", "*", "a*b", "billing"] {
            assert_eq!(Pattern::parse(text).text(), text);
        }
    }

    #[test]
    fn a_name_matches_itself_only_and_a_prefix_what_starts_with_it() {
        let name = Pattern::parse("billing");
        assert!(name.matches("billing"));
        assert!(!name.matches("billing2"));
        assert!(!name.matches("Billing"));
        let prefix = Pattern::parse("billing.*");
        assert!(prefix.matches("billing."));
        assert!(prefix.matches("billing.invoices"));
        assert!(!prefix.matches("billing"));
        assert!(!prefix.matches("billingx.invoices"));
        assert!(Pattern::parse("*").matches(""));
        assert!(Pattern::parse("*").matches("anything"));
    }

    #[test]
    fn like_patterns_escape_the_wildcards_of_names() {
        assert_eq!(Pattern::parse("a_b").like(), "a\\_b");
        assert_eq!(Pattern::parse("50%*").like(), "50\\%%");
        assert_eq!(Pattern::parse("back\\slash").like(), "back\\\\slash");
        assert_eq!(Pattern::parse("*").like(), "%");
        assert_eq!(Pattern::parse("billing.*").like(), "billing.%");
    }

    #[test]
    fn a_scope_allows_the_queues_of_any_of_its_patterns() {
        let scope = Scope::only(vec![Pattern::parse("a"), Pattern::parse("b.*")]);
        assert!(scope.allows("a"));
        assert!(scope.allows("b.x"));
        assert!(!scope.allows("c"));
        assert!(!Scope::only(Vec::new()).allows("a"));
        assert!(Scope::Every.allows("anything"));
    }

    #[test]
    fn capabilities_parse_by_their_exact_names() {
        for capability in Capability::ALL {
            assert_eq!(Capability::parse(capability.as_str()), Some(capability));
        }
        assert_eq!(Capability::parse("Claim"), None);
        assert_eq!(Capability::parse("all"), None);
    }
}
