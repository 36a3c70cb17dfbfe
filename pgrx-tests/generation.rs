//! In-server tests of the generation floor (0.8.0, `src/verbs/generation.rs`):
//! the history a database's epochs come from, and the first claim of a new
//! one moving `epoch_seq` above every older epoch. Promotions, point-in-time
//! recoveries and restores with real servers are in
//! `harness/tests/client/failover.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{claim, enqueue};
    use crate::verbs::generation::{floor_at, EPOCHS_PER_MS};

    /// The trigger `items_sequence_floor` computes the floor in SQL from the
    /// transaction's start; `generation::floor_at` in Rust. They agree.
    #[pg_test]
    fn the_sql_floor_is_the_rust_floor() {
        let sql = Spi::get_one::<i64>(
            "SELECT floor(date_part('epoch', transaction_timestamp()
                                               - '2000-01-01 00:00:00+00'::timestamptz)
                          * 1000::float8)::int8 * 1024",
        )
        .unwrap()
        .expect("a floor");
        // SAFETY: reads this transaction's start time.
        let start = unsafe { pgrx::pg_sys::GetCurrentTransactionStartTimestamp() };
        assert_eq!(sql, floor_at(start));
    }

    /// The tests that move or read `epoch_seq`'s position take this lock
    /// (held to the end of their transaction, which pgrx rolls back), so a
    /// new history started by one (its `setval` is not rolled back) cannot
    /// land inside the other's claim: pg tests run concurrently.
    fn serialize_generation_tests() {
        Spi::run("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('workfence tests: generation'))")
            .unwrap();
    }

    /// The sequence's next value, as a claim would draw it.
    fn next_epoch() -> i64 {
        Spi::get_one::<i64>(
            "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
               FROM workfence.epoch_seq",
        )
        .unwrap()
        .expect("a position")
    }

    /// The install recorded the history it runs on, so a claim in this
    /// database draws the sequence's next value: it does not move it to
    /// the floor. (Other tests claiming concurrently draw a few values in
    /// between; a move to the floor jumps by at least 1,024 per millisecond
    /// since the last history started, and from a fresh install's
    /// sequence by about 2^49.)
    #[pg_test]
    fn the_install_recorded_this_history() {
        serialize_generation_tests();
        let matches = Spi::get_one::<bool>(
            "SELECT g.system_identifier = s.system_identifier
                    AND g.database = d.oid
               FROM workfence.generation AS g, pg_control_system() AS s, pg_database AS d
              WHERE d.datname = current_database()",
        )
        .unwrap();
        assert_eq!(matches, Some(true));
        enqueue("generation_same", "k");
        let next = next_epoch();
        let (_, epoch) = claim("generation_same", "w", "1 minute").expect("claimable");
        assert!(
            (next..next + EPOCHS_PER_MS).contains(&epoch),
            "epoch {epoch} is not the sequence's next value {next}: the claim moved it"
        );
    }

    /// A history the row does not name (here: no row, as after `DELETE FROM
    /// workfence.generation`, the documented way to start a new history by
    /// hand) makes the next claim move the sequence to the floor and record
    /// this history.
    #[pg_test]
    fn the_first_claim_of_a_new_history_starts_at_the_floor() {
        serialize_generation_tests();
        Spi::run("DELETE FROM workfence.generation").unwrap();
        enqueue("generation_new", "k");
        // SAFETY: reads the clock.
        let before = floor_at(unsafe { pgrx::pg_sys::GetCurrentTimestamp() });
        let (_, epoch) = claim("generation_new", "w", "1 minute").expect("claimable");
        assert!(epoch >= before, "epoch {epoch} below the floor {before}");
        let (rows, floor) =
            Spi::get_two::<i64, i64>("SELECT count(*), max(floor) FROM workfence.generation")
                .unwrap();
        assert_eq!(rows, Some(1));
        assert!(floor.is_some_and(|f| f <= epoch && f >= before));
    }
}
