//! In-server tests of the kept-plan cache (`src/plans.rs`): two statements
//! never share a plan, whatever their text.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::plans::{self, params, Statement};

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

    fn text_of(rows: pgrx::spi::SpiTupleTable<'_>) -> crate::error::Result<String> {
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
}
