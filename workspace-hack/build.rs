//! Empty: a build script makes cargo build the `[build-dependencies]` of the
//! manifest, which unify the features of the workspace's build-time crates.
fn main() {}
