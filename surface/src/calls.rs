//! `harness/src/calls/generated.rs`: one typed Rust binding per
//! `[[function]]` of the table (one per overload), the only place that
//! function's call is written as SQL. The hand calls of
//! `harness/src/calls.rs` wrap them in the harness's types.
//!
//! | SQL type | argument | result column |
//! |---|---|---|
//! | `text` | `&str` | `String` |
//! | `bigint` | `i64` | `i64` |
//! | `integer` | `i32` | `i32` |
//! | `boolean` | `bool` | `bool` |
//! | `double precision` | `f64` | `f64` |
//! | `double precision[]` | `&[f64]` | `Vec<f64>` |
//! | `jsonb` | `&Value` | `Value` |
//! | `bigint[]` | `&[i64]` | `Vec<i64>` |
//! | `jsonb[]` | `&[Value]` | `Vec<Value>` |
//! | `text[]` | `&[Option<&str>]` (`None`: a NULL element) | `Vec<String>` |
//! | `timestamp with time zone[]` | `&[Option<&str>]`, timestamps as text, `$n::timestamptz[]` | `Vec<String>`, `::text` |
//! | `interval` | `&str`, interval text bound as `text`, `$n::interval` | `String`, `::text` |
//! | `timestamp with time zone` | `&RunAt`: `$n::timestamptz`, or `($n::interval OPERATOR(pg_catalog.+) pg_catalog.clock_timestamp())` | `String`, `::text` |
//!
//! An argument with a `DEFAULT` is an `Option`, passed by name
//! (`name => $n`) when `Some` and left out when `None`, so the server's
//! default applies. A scalar result is its Rust type (`void`: `()`); a
//! `TABLE(...)` result is a `Vec` of a row struct, one per distinct result
//! (named after the first function with it), every column
//! an `Option`: `pg_get_function_result` does not say which columns are
//! never NULL, and the generator does not guess. A function's binding has
//! its SQL name; an overload after the first of its name in the table is
//! named after its arguments, `NAME_by_ARG_ARG` (`work_item(id)`:
//! `work_item_by_id`). The text is rendered as rustfmt formats it, so the
//! file passes `cargo fmt --check` without running rustfmt here.

use crate::{split_top_level, Error, Function};

/// Result columns (jsonb) that a later version added to a function the
/// harness also calls on databases of earlier versions (the upgrade tests
/// claim before they update): read as `to_jsonb(r) -> 'name'`, which is
/// NULL where the row has no such column, rather than `r.name`, which an
/// older function's row cannot answer. `progress`: 0.12.0's claim rows
/// and `work_item`.
const LATER_COLUMNS: &[&str] = &["progress"];

/// As [`LATER_COLUMNS`], for text columns, read as `to_jsonb(r) ->>
/// 'name'`. `trace`: 0.12.0's claim rows.
const LATER_TEXT_COLUMNS: &[&str] = &["trace"];

/// The generated file, relative to the repository's root.
pub const PATH: &str = "harness/src/calls/generated.rs";

/// The widest line rustfmt leaves as it is (its `max_width`, 100): the
/// generated SQL's width too, so the doc comments' code blocks are wrapped
/// by the SQL's [`crate::wrap`].
const MAX_WIDTH: usize = crate::WIDTH;

/// The widest argument list rustfmt keeps on one line (its `fn_call_width`).
const CALL_WIDTH: usize = 60;

/// The names a binding uses itself, which no SQL argument may take.
const RESERVED: [&str; 2] = ["c", "call"];

/// Rust's keywords, which an identifier taken from SQL writes as `r#name`.
const KEYWORDS: [&str; 51] = [
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "Self", "static", "struct", "super", "trait", "true", "try", "type",
    "typeof", "unsafe", "unsized", "use", "virtual", "where", "while",
];

/// How an argument of a SQL type is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// A parameter of Rust type `rust`, bound as `Type::<ty>`, `cast`
    /// written after its placeholder.
    Value {
        rust: &'static str,
        ty: &'static str,
        cast: &'static str,
    },
    /// A `timestamptz` given as a `RunAt` (the call builder writes it).
    RunAt,
}

/// A SQL type the generator knows: how an argument of it is bound, and how
/// a result (a column, or a scalar) of it is read.
struct SqlType {
    /// As `pg_get_function_arguments` / `_result` print it.
    name: &'static str,
    /// How an argument of it is bound.
    pass: Pass,
    /// The Rust type a result of it is read as.
    read: &'static str,
    /// Whether a result of it is read through `::text` (as the server
    /// renders it).
    read_as_text: bool,
}

/// Every SQL type the generator knows (the module documentation's table).
static SQL_TYPES: [SqlType; 13] = {
    const fn value(rust: &'static str, ty: &'static str, cast: &'static str) -> Pass {
        Pass::Value { rust, ty, cast }
    }
    const fn t(name: &'static str, pass: Pass, read: &'static str, text: bool) -> SqlType {
        SqlType {
            name,
            pass,
            read,
            read_as_text: text,
        }
    }
    [
        t("text", value("&str", "TEXT", ""), "String", false),
        t("bigint", value("i64", "INT8", ""), "i64", false),
        t("integer", value("i32", "INT4", ""), "i32", false),
        t("boolean", value("bool", "BOOL", ""), "bool", false),
        t("double precision", value("f64", "FLOAT8", ""), "f64", false),
        t(
            "double precision[]",
            value("&[f64]", "FLOAT8_ARRAY", ""),
            "Vec<f64>",
            false,
        ),
        t("jsonb", value("&Value", "JSONB", ""), "Value", false),
        t(
            "bigint[]",
            value("&[i64]", "INT8_ARRAY", ""),
            "Vec<i64>",
            false,
        ),
        t(
            "jsonb[]",
            value("&[Value]", "JSONB_ARRAY", ""),
            "Vec<Value>",
            false,
        ),
        t(
            "text[]",
            value("&[Option<&str>]", "TEXT_ARRAY", ""),
            "Vec<String>",
            false,
        ),
        t(
            "timestamp with time zone[]",
            value("&[Option<&str>]", "TEXT_ARRAY", "::timestamptz[]"),
            "Vec<String>",
            true,
        ),
        t(
            "interval",
            value("&str", "TEXT", "::interval"),
            "String",
            true,
        ),
        t("timestamp with time zone", Pass::RunAt, "String", true),
    ]
};

/// The known type `sql_type`, if the generator knows it.
fn known_type(sql_type: &str) -> Option<&'static SqlType> {
    SQL_TYPES.iter().find(|known| known.name == sql_type)
}

/// How an argument of `sql_type` is bound, if the generator knows the type.
fn pass(sql_type: &str) -> Option<Pass> {
    known_type(sql_type).map(|known| known.pass)
}

/// The Rust type a result (a column, or a scalar) of `sql_type` is read as,
/// and whether it is read as text (`::text`), if the generator knows it.
fn read_as(sql_type: &str) -> Option<(&'static str, bool)> {
    known_type(sql_type).map(|known| (known.read, known.read_as_text))
}

/// One argument of a function, as the table declares it.
#[derive(Debug, Clone, Copy)]
struct Argument<'f> {
    name: &'f str,
    sql_type: &'f str,
    /// Declared with a `DEFAULT`: an `Option`, passed by name when `Some`.
    optional: bool,
    pass: Pass,
}

/// What a function returns.
#[derive(Debug, Clone)]
enum Returns<'f> {
    /// `void`.
    Void,
    /// One value: its Rust type, read through `::text` or not.
    Scalar(&'static str, bool),
    /// `TABLE(...)`: each column's name, SQL type, Rust type, and whether
    /// it is read through `::text`.
    Table(Vec<(&'f str, &'f str, &'static str, bool)>),
}

/// A binding to render: the function, its Rust name, arguments and result.
struct Binding<'f> {
    function: &'f Function,
    /// Its Rust name.
    name: String,
    /// Whether the table has another function of its SQL name.
    overloaded: bool,
    /// The row struct of its `TABLE(...)` result: named after the first
    /// binding in the table with the same result, which defines it (so
    /// `work_claim_key` reads `WorkClaimRow`).
    row: String,
    arguments: Vec<Argument<'f>>,
    returns: Returns<'f>,
}

/// Each function's binding name, in the table's order: its SQL name, or for
/// an overload after the first of its name, `NAME_by_ARG_ARG` from its
/// argument names. Refuses names that collide, an overload without
/// arguments to be named after, and an argument named as a binding's own
/// variables (`c`, `call`).
pub fn binding_names(functions: &[Function]) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = Vec::new();
    for (i, function) in functions.iter().enumerate() {
        let arguments = function.argument_names();
        if let Some(reserved) = arguments.iter().find(|a| RESERVED.contains(a)) {
            return Err(Error::Table(format!(
                "{}: an argument named {reserved:?} takes the name of a binding's own \
                 variable (surface/src/calls.rs)",
                function.name
            )));
        }
        let overload = functions[..i].iter().any(|f| f.name == function.name);
        let name = if !overload {
            function.name.clone()
        } else if arguments.is_empty() {
            return Err(Error::Table(format!(
                "{}: an overload without arguments has no binding name \
                 (NAME_by_ARGUMENTS; surface/src/calls.rs)",
                function.name
            )));
        } else {
            format!("{}_by_{}", function.name, arguments.join("_"))
        };
        let taken =
            names.contains(&name) || (overload && functions.iter().any(|other| other.name == name));
        if taken {
            return Err(Error::Table(format!(
                "{}: its binding name {name} is another's",
                function.signature()
            )));
        }
        names.push(name);
    }
    Ok(names)
}

/// The bindings of every function, with the types checked.
fn bindings(functions: &[Function]) -> Result<Vec<Binding<'_>>, Error> {
    let names = binding_names(functions)?;
    let row_of = |function: &Function| {
        let first = functions
            .iter()
            .position(|f| f.returns == function.returns)
            .expect("the function itself has its result");
        format!("{}Row", camel(&names[first]))
    };
    functions
        .iter()
        .zip(names.iter().cloned())
        .map(|(function, name)| {
            let unknown = |sql_type: &str| {
                Error::Table(format!(
                    "{}: no Rust type for the SQL type {sql_type:?} (add it to \
                     surface/src/calls.rs)",
                    function.signature()
                ))
            };
            let arguments = function
                .argument_list()
                .into_iter()
                .map(|declared| {
                    let (name, rest) = declared.split_once(' ').unwrap_or((declared, ""));
                    let (sql_type, optional) = match rest.split_once(" DEFAULT ") {
                        Some((sql_type, _)) => (sql_type, true),
                        None => (rest, false),
                    };
                    let pass = pass(sql_type).ok_or_else(|| unknown(sql_type))?;
                    Ok(Argument {
                        name,
                        sql_type,
                        optional,
                        pass,
                    })
                })
                .collect::<Result<Vec<_>, Error>>()?;
            let returns = match function.returns.as_str() {
                "void" => Returns::Void,
                returns => match returns
                    .strip_prefix("TABLE(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    Some(columns) => Returns::Table(
                        split_top_level(columns)
                            .into_iter()
                            .map(|column| {
                                let (name, sql_type) =
                                    column.split_once(' ').unwrap_or((column, ""));
                                let (rust, text) =
                                    read_as(sql_type).ok_or_else(|| unknown(sql_type))?;
                                Ok((name, sql_type, rust, text))
                            })
                            .collect::<Result<Vec<_>, Error>>()?,
                    ),
                    None => {
                        let (rust, text) = read_as(returns).ok_or_else(|| unknown(returns))?;
                        Returns::Scalar(rust, text)
                    }
                },
            };
            Ok(Binding {
                function,
                name,
                overloaded: functions.iter().filter(|f| f.name == function.name).count() > 1,
                row: row_of(function),
                arguments,
                returns,
            })
        })
        .collect()
}

/// The generated file's text.
pub fn render(functions: &[Function]) -> Result<String, Error> {
    let bindings = bindings(functions)?;
    let uses = |wanted: &dyn Fn(&str) -> bool| {
        bindings.iter().any(|b| {
            b.arguments.iter().any(|a| wanted(a.sql_type))
                || matches!(&b.returns, Returns::Table(columns)
                    if columns.iter().any(|(_, sql_type, _, _)| wanted(sql_type)))
        })
    };
    let json = uses(&|sql_type| sql_type.starts_with("jsonb"))
        || functions.iter().any(|f| f.returns.starts_with("jsonb"));
    let run_at = bindings
        .iter()
        .any(|b| b.arguments.iter().any(|a| a.pass == Pass::RunAt));
    let typed = bindings.iter().any(|b| {
        b.arguments
            .iter()
            .any(|a| matches!(a.pass, Pass::Value { .. }))
    });
    let table = bindings
        .iter()
        .any(|b| matches!(b.returns, Returns::Table(_)));

    let mut out = String::from(HEADER);
    if typed {
        out.push_str("use postgres::types::Type;\n");
    }
    out.push_str(if table {
        "use postgres::{GenericClient, Row};\n"
    } else {
        "use postgres::GenericClient;\n"
    });
    if json {
        out.push_str("use serde_json::Value;\n");
    }
    out.push_str(if run_at {
        "\nuse super::{Call, CallResult, RunAt};\n"
    } else {
        "\nuse super::{Call, CallResult};\n"
    });
    let mut defined: Vec<&str> = Vec::new();
    for binding in &bindings {
        if let Returns::Table(columns) = &binding.returns {
            if !defined.contains(&binding.row.as_str()) {
                defined.push(&binding.row);
                let readers: Vec<&str> = bindings
                    .iter()
                    .filter(|other| other.row == binding.row)
                    .map(|other| other.name.as_str())
                    .collect();
                out.push('\n');
                out.push_str(&row_struct(&binding.row, &readers, columns));
            }
        }
        out.push('\n');
        out.push_str(&function(binding));
    }
    Ok(out)
}

/// The file's head: what it is, and its module documentation.
const HEADER: &str = "\
// Generated from sql/functions.toml by `cargo run -p workfence-surface`: do not edit.
// `cargo run -p workfence-surface -- --check` (and the checklist test) fails while it is stale.

//! The typed bindings of the extension's SQL functions, generated: one per
//! `[[function]]` of `sql/functions.toml` (one per overload), the only place
//! that function's call is written as SQL. The hand calls of [`super`] wrap
//! them in the harness's types; call those.
//!
//! - Every argument is a parameter bound with its type (`query_typed`: no
//!   named prepared statement, so a call also works through PgBouncer in
//!   transaction pooling mode): `text` is `&str`, `bigint` `i64`, `integer`
//!   `i32`, `boolean` `bool`, `jsonb` `&Value`, `bigint[]` `&[i64]`,
//!   `jsonb[]` `&[Value]`; an `interval` is interval text (`'30 seconds'`),
//!   cast by the server; a `timestamp with time zone` is a [`super::RunAt`].
//! - An argument with a `DEFAULT` is an `Option`: `Some` passes it by name
//!   (`name => $n`), `None` leaves it out, so the server's default applies
//!   (and the call works against a version that lacks the argument).
//! - A scalar result is its Rust type (`void`: `()`). A `TABLE(...)` result
//!   is a `Vec` of a row struct, one per distinct result (named after the
//!   first function with it: `work_claim_key` reads `WorkClaimRow`), every
//!   column an `Option` (the
//!   catalog does not say which columns are never NULL), times and intervals
//!   as the server renders them (`::text`).
//! - A binding has its function's name; an overload after the first of its
//!   name in the table is named after its arguments (`NAME_by_ARG_ARG`).
//! - Errors are the server's, its SQLSTATE in the [`postgres::Error`]
//!   ([`super::SqlState`]).

";

/// `name` as a Rust identifier (`r#name` for a keyword).
fn ident(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    }
}

/// `work_item_by_id` as a type's name: `WorkItemById`.
fn camel(name: &str) -> String {
    name.split('_')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// `text` as `///` lines of at most [`MAX_WIDTH`] characters where the words
/// allow, each starting with `indent`.
fn doc(text: &str, indent: &str) -> String {
    let prefix = format!("{indent}/// ");
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && prefix.len() + line.len() + 1 + word.len() > MAX_WIDTH {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
        .iter()
        .map(|line| format!("{prefix}{line}").trim_end().to_string() + "\n")
        .collect()
}

/// `open` + `items` joined by `, ` + `close` as `///` lines of a code block,
/// broken after a comma before a line passes [`MAX_WIDTH`] (the SQL files'
/// wrapping, [`crate::wrap`]), continuation lines indented by four.
fn doc_code(open: &str, items: &[&str], close: &str) -> String {
    crate::wrap(&format!("/// {open}"), items, close, "///     ") + "\n"
}

/// A method call statement `{indent}{receiver}({args});` as rustfmt lays it
/// out: on one line when it fits, else one argument per line.
fn statement(indent: &str, head: &str, args: &[String], tail: &str) -> String {
    let joined = args.join(", ");
    let one_line = format!("{indent}{head}({joined}){tail}\n");
    if joined.len() <= CALL_WIDTH && one_line.len() <= MAX_WIDTH + 1 {
        return one_line;
    }
    let mut text = format!("{indent}{head}(\n");
    for arg in args {
        text.push_str(&format!("{indent}    {arg},\n"));
    }
    text.push_str(&format!("{indent}){tail}\n"));
    text
}

/// The row struct `row` of the bindings `readers` (whose functions have
/// the same `RETURNS TABLE`), and the function that reads it from a row.
fn row_struct(row: &str, readers: &[&str], columns: &[(&str, &str, &'static str, bool)]) -> String {
    let readers: Vec<String> = readers.iter().map(|name| format!("[`{name}`]")).collect();
    let mut text = doc(
        &format!(
            "A row of the result of {} (its `RETURNS TABLE`), every column an `Option`: \
             the catalog does not say which are never NULL.",
            readers.join(" and ")
        ),
        "",
    );
    text.push_str(&format!(
        "#[derive(Debug, Clone, PartialEq)]\npub struct {row} {{\n"
    ));
    for (name, sql_type, rust, as_text) in columns {
        let what = if *as_text {
            format!("`{name} {sql_type}`, as the server renders it (`::text`).")
        } else {
            format!("`{name} {sql_type}`.")
        };
        text.push_str(&doc(&what, "    "));
        text.push_str(&format!("    pub {}: Option<{rust}>,\n", ident(name)));
    }
    text.push_str(&format!(
        "}}\n\nimpl {row} {{\n    /// The row's columns, in the order of the select list.\n    \
         fn read(row: &Row) -> CallResult<{row}> {{\n        Ok({row} {{\n"
    ));
    for (i, (name, ..)) in columns.iter().enumerate() {
        text.push_str(&format!(
            "            {}: row.try_get({i})?,\n",
            ident(name)
        ));
    }
    text.push_str("        })\n    }\n}\n");
    text
}

/// A function's binding.
fn function(binding: &Binding) -> String {
    let function = binding.function;
    let mut text = doc(
        &format!(
            "`workfence.{}{}`: {}",
            function.name,
            if binding.overloaded {
                format!("({})", function.argument_names().join(", "))
            } else {
                String::new()
            },
            lowercase_first(&function.summary)
                + if function.summary.ends_with('.') {
                    ""
                } else {
                    "."
                }
        ),
        "",
    );
    text.push_str("///\n/// ```sql\n");
    text.push_str(&doc_code(
        &format!("workfence.{}(", function.name),
        &function.argument_list(),
        ")",
    ));
    match function.returns.strip_prefix("TABLE(") {
        Some(columns) => text.push_str(&doc_code(
            "RETURNS TABLE(",
            &split_top_level(columns.strip_suffix(')').unwrap_or(columns)),
            ")",
        )),
        None => text.push_str(&format!("/// RETURNS {}\n", function.returns)),
    }
    text.push_str("/// ```\n///\n");
    text.push_str(&doc(
        "Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's \
         section of `docs/reference.md` lists them).",
        "",
    ));

    let mut params = vec!["c: &mut impl GenericClient".to_string()];
    for argument in &binding.arguments {
        let rust = match argument.pass {
            Pass::Value { rust, .. } => rust,
            Pass::RunAt => "&RunAt",
        };
        let rust = if argument.optional {
            format!("Option<{rust}>")
        } else {
            rust.to_string()
        };
        params.push(format!("{}: {rust}", ident(argument.name)));
    }
    // clippy::too_many_arguments counts more than seven.
    if params.len() > 7 {
        text.push_str("#[allow(clippy::too_many_arguments)]\n");
    }
    let result = match &binding.returns {
        Returns::Void => "()".to_string(),
        Returns::Scalar(rust, _) => rust.to_string(),
        Returns::Table(_) => format!("Vec<{}>", binding.row),
    };
    let one_line = format!(
        "pub fn {}({}) -> CallResult<{result}> {{",
        binding.name,
        params.join(", ")
    );
    if one_line.len() <= MAX_WIDTH {
        text.push_str(&one_line);
        text.push('\n');
    } else {
        text.push_str(&format!("pub fn {}(\n", binding.name));
        for param in &params {
            text.push_str(&format!("    {param},\n"));
        }
        text.push_str(&format!(") -> CallResult<{result}> {{\n"));
    }

    let binding_mut = if binding.arguments.is_empty() {
        "let call"
    } else {
        "let mut call"
    };
    match &binding.returns {
        Returns::Table(columns) => {
            let select: Vec<String> = columns
                .iter()
                .map(|(name, _, _, as_text)| {
                    if LATER_COLUMNS.contains(&&**name) {
                        // Read by name from the row, NULL where the
                        // function's version has no such column.
                        format!("pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) '{name}'")
                    } else if LATER_TEXT_COLUMNS.contains(&&**name) {
                        format!("pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) '{name}'")
                    } else {
                        format!("r.{name}{}", if *as_text { "::text" } else { "" })
                    }
                })
                .collect();
            text.push_str(&format!("    {binding_mut} = Call::new(\n"));
            let mut lines: Vec<String> = Vec::new();
            let mut line = String::from("SELECT");
            for (i, column) in select.iter().enumerate() {
                let piece = if i + 1 == select.len() {
                    column.clone()
                } else {
                    format!("{column},")
                };
                // 9 columns of indent, a quote or a space, and ` \` after it.
                if line.len() + 1 + piece.len() + 12 > MAX_WIDTH {
                    lines.push(std::mem::take(&mut line));
                    line.push_str(&piece);
                } else {
                    line.push(' ');
                    line.push_str(&piece);
                }
            }
            lines.push(line);
            lines.push(format!("FROM workfence.{}(", function.name));
            for (i, line) in lines.iter().enumerate() {
                // Continuation lines: the string goes on past `\`, their
                // indent dropped; a space before it keeps the words apart.
                let open = if i == 0 { "\"" } else { " " };
                let end = if i + 1 == lines.len() { "\"," } else { " \\" };
                text.push_str(&format!("        {open}{line}{end}\n"));
            }
            text.push_str("    );\n");
        }
        _ => text.push_str(&statement(
            "    ",
            &format!("{binding_mut} = Call::new"),
            &[format!("\"SELECT workfence.{}(\"", function.name)],
            ";",
        )),
    }
    for argument in &binding.arguments {
        let name = ident(argument.name);
        let (method, args) = match (argument.pass, argument.optional) {
            (Pass::Value { ty, cast, .. }, false) => (
                "call.arg",
                vec![
                    format!("&{name}"),
                    format!("Type::{ty}"),
                    format!("\"{cast}\""),
                ],
            ),
            (Pass::Value { ty, cast, .. }, true) => (
                "call.named",
                vec![
                    format!("\"{}\"", argument.name),
                    format!("&{name}"),
                    format!("Type::{ty}"),
                    format!("\"{cast}\""),
                ],
            ),
            (Pass::RunAt, false) => ("call.at", vec![name]),
            (Pass::RunAt, true) => (
                "call.named_at",
                vec![format!("\"{}\"", argument.name), name],
            ),
        };
        text.push_str(&statement("    ", method, &args, ";"));
    }
    let (method, args) = match &binding.returns {
        Returns::Void => ("call.void", vec!["c".to_string(), "\")\"".to_string()]),
        Returns::Scalar(_, as_text) => (
            "call.value",
            vec![
                "c".to_string(),
                if *as_text { "\")::text\"" } else { "\")\"" }.to_string(),
            ],
        ),
        Returns::Table(_) => (
            "call.rows",
            vec![
                "c".to_string(),
                "\") AS r\"".to_string(),
                format!("{}::read", binding.row),
            ],
        ),
    };
    text.push_str(&statement("    ", method, &args, ""));
    text.push_str("}\n");
    text
}

/// `text` with its first character in lower case, unless it starts a word
/// in capitals or code (`README`, `` `x` ``).
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second))
            if first.is_ascii_uppercase() && !second.is_ascii_uppercase() =>
        {
            first.to_ascii_lowercase().to_string() + &text[1..]
        }
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Surface;

    /// A table of `functions`, each `(name, arguments, returns)`.
    fn table(functions: &[(&str, &str, &str)]) -> Surface {
        let text: String = functions
            .iter()
            .map(|(name, arguments, returns)| {
                format!(
                    "[[function]]\nname = \"{name}\"\narguments = \"{arguments}\"\n\
                     returns = \"{returns}\"\ngroup = \"items\"\ngrant = \"operate\"\n\
                     router = \"by_hand\"\nexecute = \"operator\"\nsummary = \"Does it.\"\n\
                     comment = \"{name}(...)\"\ndoc = \"Does it.\"\n"
                )
            })
            .collect();
        Surface::parse(&text).unwrap()
    }

    #[test]
    fn a_default_argument_is_an_option_passed_by_name_and_a_required_one_by_position() {
        let surface = table(&[(
            "work_finish",
            "id bigint, owner text, lease interval, result jsonb DEFAULT NULL",
            "boolean",
        )]);
        let text = render(&surface.functions).unwrap();
        assert!(
            text.contains(
                "pub fn work_finish(\n    c: &mut impl GenericClient,\n    id: i64,\n    \
                 owner: &str,\n    lease: &str,\n    result: Option<&Value>,\n) -> CallResult<bool> {\n"
            ),
            "{text}"
        );
        assert!(text.contains("    let mut call = Call::new(\"SELECT workfence.work_finish(\");\n"));
        assert!(
            text.contains("    call.arg(&id, Type::INT8, \"\");\n"),
            "{text}"
        );
        assert!(text.contains("    call.arg(&lease, Type::TEXT, \"::interval\");\n"));
        assert!(
            text.contains("    call.named(\"result\", &result, Type::JSONB, \"\");\n"),
            "{text}"
        );
        assert!(text.contains("    call.value(c, \")\")\n}\n"), "{text}");
    }

    #[test]
    fn a_timestamptz_argument_is_a_run_at() {
        let surface = table(&[
            (
                "work_reschedule",
                "queue text, run_at timestamp with time zone",
                "boolean",
            ),
            (
                "work_retry",
                "queue text, run_at timestamp with time zone DEFAULT NULL",
                "void",
            ),
        ]);
        let text = render(&surface.functions).unwrap();
        assert!(text.contains("run_at: &RunAt,"), "{text}");
        assert!(text.contains("    call.at(run_at);\n"), "{text}");
        assert!(text.contains("run_at: Option<&RunAt>,"), "{text}");
        assert!(
            text.contains("    call.named_at(\"run_at\", run_at);\n"),
            "{text}"
        );
        assert!(text.contains("use super::{Call, CallResult, RunAt};\n"));
        assert!(text.contains(") -> CallResult<()> {\n"), "{text}");
        assert!(text.contains("    call.void(c, \")\")\n"), "{text}");
    }

    #[test]
    fn an_overload_is_named_after_its_arguments_and_a_table_gets_a_row_struct() {
        let columns = "TABLE(id bigint, run_at timestamp with time zone, payload jsonb)";
        let surface = table(&[
            ("work_item", "queue text, key text", columns),
            ("work_item", "id bigint", columns),
        ]);
        let text = render(&surface.functions).unwrap();
        // 102 characters on one line: rustfmt's layout, a parameter a line.
        assert!(
            text.contains(
                "pub fn work_item(\n    c: &mut impl GenericClient,\n    queue: &str,\n    \
                 key: &str,\n) -> CallResult<Vec<WorkItemRow>> {\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "pub fn work_item_by_id(c: &mut impl GenericClient, id: i64) \
                 -> CallResult<Vec<WorkItemRow>> {\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("/// `workfence.work_item(id)`: does it.\n"),
            "{text}"
        );
        // The overloads return the same TABLE: one row struct, named after
        // the first, serves both.
        assert_eq!(
            text.matches("pub struct WorkItemRow {\n").count(),
            1,
            "{text}"
        );
        assert!(!text.contains("WorkItemByIdRow"), "{text}");
        assert!(text.contains("    pub run_at: Option<String>,\n"), "{text}");
        assert!(text.contains("    pub payload: Option<Value>,\n"), "{text}");
        assert!(
            text.contains(
                "        \"SELECT r.id, r.run_at::text, r.payload \\\n         \
                 FROM workfence.work_item(\",\n"
            ),
            "{text}"
        );
        assert_eq!(
            text.matches("    call.rows(c, \") AS r\", WorkItemRow::read)\n")
                .count(),
            2,
            "{text}"
        );
    }

    #[test]
    fn an_unknown_type_or_a_colliding_name_is_refused() {
        let surface = table(&[("work_x", "at money", "boolean")]);
        assert!(matches!(render(&surface.functions), Err(Error::Table(_))));
        let text = "[[function]]\nname = \"work_x\"\narguments = \"c text\"\nreturns = \
                    \"void\"\ngroup = \"items\"\ngrant = \"operate\"\nrouter = \"by_hand\"\n\
                    execute = \"operator\"\nsummary = \"x\"\ncomment = \"x\"\ndoc = \"x\"\n";
        assert!(matches!(Surface::parse(text), Err(Error::Table(_))));
        let collides = text
            .replace("c text", "queue text")
            .replace("work_x", "work_x_by_id")
            + &text.replace("c text", "queue text")
            + &text.replace("c text", "id bigint");
        assert!(
            matches!(Surface::parse(&collides), Err(Error::Table(ref e)) if e.contains("work_x_by_id")),
            "{:?}",
            Surface::parse(&collides).map(|_| ())
        );
        assert!(Surface::parse(&collides.replace("work_x_by_id", "work_y")).is_ok());
    }
}
