//! In-server tests of `work_enqueue`: idempotence on (queue, key), generated
//! keys, payloads byte for byte.
//!
//! Each test is one transaction (rolled back by the harness); the passage of
//! time is simulated by moving `lease_until` into the past (see `mod.rs`).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::one;

    #[pg_test]
    fn enqueue_is_idempotent_on_queue_and_key() {
        let (id1, inserted1) = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('mail', '{\"to\": \"a\"}', 'k1')",
        )
        .unwrap();
        let (id2, inserted2) = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('mail', '{\"to\": \"b\"}', 'k1')",
        )
        .unwrap();
        assert_eq!(id1, id2);
        assert_eq!((inserted1, inserted2), (Some(true), Some(false)));
        // The existing item is left exactly as it was.
        let to: String = one(
            "SELECT payload->>'to' FROM workfence.items WHERE id = $1",
            &[id1.unwrap()],
        )
        .unwrap();
        assert_eq!(to, "a");
        // The same key in another queue is another item.
        let id3: i64 = one(
            "SELECT id FROM workfence.work_enqueue('sms', '{}', 'k1')",
            &[],
        )
        .unwrap();
        assert_ne!(id1.unwrap(), id3);
    }

    #[pg_test]
    fn generated_keys_are_distinct_uuidv7() {
        let keys: Vec<String> = (0..3)
            .map(|_| one::<String>("SELECT key FROM workfence.work_enqueue('q')", &[]).unwrap())
            .collect();
        for key in &keys {
            let version: String =
                Spi::get_one_with_args("SELECT substr($1, 15, 1)", &[key.as_str().into()])
                    .unwrap()
                    .unwrap();
            assert_eq!(version, "7", "{key} is not a UUIDv7");
            assert!(Spi::get_one_with_args::<bool>(
                "SELECT $1::uuid IS NOT NULL",
                &[key.as_str().into()]
            )
            .unwrap()
            .unwrap());
        }
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[1], keys[2]);
    }

    #[pg_test]
    fn payload_is_returned_byte_for_byte() {
        // A number beyond f64 and a deep structure survive the round trip.
        let payload = r#"{"n": 12345678901234567890123.000000000000000001, "a": [1, {"b": null}], "s": "é\u0001"}"#;
        Spi::run_with_args(
            "SELECT workfence.work_enqueue('q', $1::jsonb)",
            &[payload.into()],
        )
        .unwrap();
        let same = Spi::get_one_with_args::<bool>(
            "SELECT payload = $1::jsonb AND payload::text = $1::jsonb::text FROM workfence.work_claim('q', 'w', '1 minute')",
            &[payload.into()],
        )
        .unwrap()
        .unwrap();
        assert!(same);
    }
}
