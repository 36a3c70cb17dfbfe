//! In-server tests of the kept-plan cache (`src/pg/plans.rs`): two statements
//! never share a plan, whatever their text; the generic-plan and JIT settings
//! do not leak out of a statement that raises.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pg::plans::{self, params, Statement};
    use crate::pgrx_tests::helpers::{enqueue, error_of, one, run};

    params! {
        /// `$1` an int4.
        struct IntParam {
            value: i32 = INT4OID,
        }
    }

    params! {
        /// `$1` a text.
        struct TextParam<'a> {
            value: &'a str = TEXTOID,
        }
    }

    // Two statements with the same text and different parameter types: a
    // cache keyed by text (or by a hand-written name copied from one to the
    // other) would run one with the other's plan.
    static AS_INT: Statement<IntParam> = Statement::new(
        r#"
SELECT pg_catalog.format('%s:%s', pg_catalog.pg_typeof($1), $1)
"#,
    );
    static AS_TEXT: Statement<TextParam> = Statement::new(
        r#"
SELECT pg_catalog.format('%s:%s', pg_catalog.pg_typeof($1), $1)
"#,
    );

    fn text_of(rows: pgrx::spi::SpiTupleTable<'_>) -> crate::base::error::Result<String> {
        Ok(rows.first().get_one::<String>()?.unwrap_or_default())
    }

    #[pg_test]
    fn statements_with_the_same_text_keep_their_own_plans() {
        for _ in 0..2 {
            let (int, text) = Spi::connect_mut(|client| {
                let int = plans::run(client, &AS_INT, IntParam { value: 42 }, text_of);
                let text = plans::run(client, &AS_TEXT, TextParam { value: "x" }, text_of);
                (int.unwrap(), text.unwrap())
            });
            assert_eq!(int, "integer:42");
            assert_eq!(text, "text:x");
        }
    }

    /// The extension runs its kept statements as generic plans, without
    /// JIT and planned without sequential scans by setting `plan_cache_mode`,
    /// `jit` and `enable_seqscan` around each one (src/pg/plans.rs). A statement that raises must leave the session's own
    /// settings as they were.
    #[pg_test]
    fn plan_settings_are_restored_after_a_statement_raises() {
        run("SET LOCAL plan_cache_mode = force_custom_plan", &[]);
        run("SET LOCAL jit = on", &[]);
        run("SET LOCAL enable_seqscan = on", &[]);
        run(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 RAISE EXCEPTION 'refused under %, jit %, enable_seqscan %',
                     current_setting('plan_cache_mode'), current_setting('jit'),
                     current_setting('enable_seqscan');
             END $$",
            &[],
        );
        run(
            "CREATE TRIGGER refuse BEFORE UPDATE ON workfence.items
             FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()",
            &[],
        );
        enqueue("q", "k");
        let err = error_of(
            "SELECT count(*) FROM workfence.work_claim('q', 'w', '1 minute')",
            0,
            0,
        );
        assert!(
            err.starts_with("P0001: refused under force_generic_plan, jit off, enable_seqscan off"),
            "{err}"
        );
        assert_eq!(
            one::<String>("SELECT current_setting('plan_cache_mode')", &[]).as_deref(),
            Some("force_custom_plan")
        );
        assert_eq!(
            one::<String>("SELECT current_setting('jit')", &[]).as_deref(),
            Some("on")
        );
        assert_eq!(
            one::<String>("SELECT current_setting('enable_seqscan')", &[]).as_deref(),
            Some("on")
        );
    }
}
