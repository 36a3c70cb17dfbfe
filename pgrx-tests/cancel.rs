//! In-server tests of `work_cancel`.
//!
//! Each test is one transaction (rolled back by the harness); the passage of
//! time is simulated by moving `lease_until` into the past (see `mod.rs`).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{
        claim, count, enqueue, error_of, item_two, lapse, snapshot, token_call,
    };

    #[pg_test]
    fn cancel_withdraws_an_unfinished_item_and_kills_its_token() {
        let cancel = |key: &str| {
            Spi::get_one_with_args::<bool>("SELECT workfence.work_cancel('q', $1)", &[key.into()])
                .unwrap()
                .unwrap()
        };
        // Claimed: cancelled, the holder's token refused everything.
        let id = enqueue("q", "claimed");
        let (_, epoch) = claim("q", "w", "1 minute").unwrap();
        assert!(cancel("claimed"));
        let row = item_two::<String, bool>(
            "state::text, finished_at IS NOT NULL AND lease_until IS NULL",
            id,
        );
        assert_eq!(row, (Some("cancelled".into()), Some(true)));
        let before = snapshot();
        for call in ["renew", "finish", "release", "fail"] {
            assert!(!token_call(call, id, "w", epoch), "{call} after cancel");
        }
        assert_eq!(snapshot(), before, "refused calls change nothing");
        let err = error_of("SELECT workfence.work_assert($1, 'w', $2)", id, epoch);
        assert!(err.starts_with("55000: lease lost"), "{err}");
        assert!(err.contains("cancelled"), "{err}");
        // Never claimed again, not even when its old lease would have lapsed.
        lapse(id);
        assert_eq!(claim("q", "w", "1 minute"), None);
        assert_eq!(
            count("SELECT count(*) FROM workfence.work_claim_key('q', 'claimed', 'w', '1 minute')"),
            0
        );
        // A re-submit of the key returns the cancelled item, not a new one.
        let again = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('q', '{}', 'claimed')",
        )
        .unwrap();
        assert_eq!(again, (Some(id), Some(false)));

        // Pending: cancelled before anyone claims it.
        enqueue("q", "pending");
        assert!(cancel("pending"));
        assert_eq!(claim("q", "w", "1 minute"), None);

        // Finished, cancelled or unknown: false, nothing changes.
        let done = enqueue("q", "done");
        let (_, done_epoch) = claim("q", "w", "1 minute").unwrap();
        assert!(token_call("finish", done, "w", done_epoch));
        let before = snapshot();
        for key in ["done", "claimed", "pending", "no such key"] {
            assert!(!cancel(key), "cancel of {key}");
        }
        assert_eq!(snapshot(), before);
        assert!(
            token_call("finish", done, "w", done_epoch),
            "done stays done"
        );
    }
}
