//! Who may do what: the argument checks every function shares and the
//! queue-scoped grants. Imports `base` and `pg`.

// Argument checks shared by every function (pure, no database access).
pub mod validate;
// Queue-scoped privileges: `work_grant`, `work_revoke`, `work_enforce_grants`, `work_may`.
pub mod grants;
