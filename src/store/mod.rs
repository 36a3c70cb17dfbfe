//! The items' SQL: fragments and parameters the verbs share, the server
//! clock, and the ready probe both claim paths use. Imports the layers below.

// SQL fragments, shared parameter structs and the clock statements share.
pub(crate) mod sql;
// What both claim paths share: the ready probe and a claim's outcome.
pub(crate) mod take;
