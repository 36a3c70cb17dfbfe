//! What the packages and PGXN read about the extension agrees with the
//! build: `META.json` is valid against the PGXN Meta Spec (v1, the JSON
//! Schema of the `pgxn_meta` crate) and names the version `Cargo.toml`
//! builds, and the previous release the package test upgrades from is the
//! one whose install script is frozen in `sql/`.

use crate::common;

use common::repo_root;
use std::fs;

/// `version = "..."` of the `[package]` table of the root `Cargo.toml`.
fn cargo_version() -> String {
    let manifest = fs::read_to_string(repo_root().join("Cargo.toml")).expect("read Cargo.toml");
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[package]")
        .find_map(|line| {
            let value = line.trim().strip_prefix("version")?.trim_start();
            Some(value.strip_prefix('=')?.trim().trim_matches('"').to_owned())
        })
        .expect("a version in [package]")
}

/// `META.json`, parsed.
fn meta() -> serde_json::Value {
    let text = fs::read_to_string(repo_root().join("META.json")).expect("read META.json");
    serde_json::from_str(&text).expect("META.json is JSON")
}

#[test]
fn meta_json_is_valid_against_the_pgxn_meta_spec() {
    let meta = meta();
    let mut validator = pgxn_meta::valid::Validator::new();
    if let Err(e) = validator.validate(&meta) {
        panic!("META.json is not valid PGXN metadata: {e}");
    }
    assert_eq!(meta["meta-spec"]["version"], "1.0.0");
    // The validator is not a no-op: a required field removed is refused.
    let mut broken = meta.clone();
    broken.as_object_mut().expect("an object").remove("license");
    assert!(
        validator.validate(&broken).is_err(),
        "META.json without a license passed the validator"
    );
}

#[test]
fn meta_json_names_the_version_cargo_builds() {
    let meta = meta();
    let version = cargo_version();
    assert_eq!(meta["version"], version.as_str(), "META.json version");
    assert_eq!(
        meta["provides"]["pg_workfence"]["version"],
        version.as_str(),
        "META.json provides.pg_workfence.version"
    );
    let file = meta["provides"]["pg_workfence"]["file"]
        .as_str()
        .expect("provides.pg_workfence.file");
    assert!(
        repo_root().join(file).is_file(),
        "META.json names {file}, which is missing"
    );
}

#[test]
fn the_previous_release_the_package_test_upgrades_from_is_frozen() {
    let text = fs::read_to_string(repo_root().join("packaging/previous-release.sh"))
        .expect("read packaging/previous-release.sh");
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in packaging/previous-release.sh"))
            .to_owned()
    };
    let previous = value("PREVIOUS_VERSION");
    assert_ne!(
        previous,
        cargo_version(),
        "the previous release is this one"
    );
    assert!(
        repo_root()
            .join(format!(
                "tests/fixtures/released/pg_workfence--{previous}.sql"
            ))
            .is_file(),
        "release {previous} has no frozen install script in tests/fixtures/released/"
    );
    let upgrade = repo_root().join(format!(
        "sql/pg_workfence--{previous}--{}.sql",
        cargo_version()
    ));
    assert!(
        upgrade.is_file(),
        "no upgrade script {} from the previous release",
        upgrade.display()
    );
    assert_eq!(value("PREVIOUS_COMMIT").len(), 40, "a full commit hash");
}
