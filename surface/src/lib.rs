//! pg_workfence's SQL surface as one table, and the files generated from it.
//!
//! `sql/functions.toml` holds one `[[function]]` per SQL function (one per
//! overload): its arguments and result as the catalog shows them
//! (`pg_get_function_arguments`, `pg_get_function_result`, casts left out),
//! the queue grant it needs, how the PL/Proxy router routes it, a one-line
//! summary, its `COMMENT ON FUNCTION` text (the facts: arguments, limits,
//! SQLSTATEs) and its reference section (markdown prose).
//!
//! From it, [`Surface::generated`] renders the regions of five files that no
//! one edits by hand, and one whole file:
//!
//! | file | region | what |
//! |---|---|---|
//! | `sql/finalize.sql` | `comments` | every `COMMENT ON FUNCTION` |
//! | `docs/reference.md` | `items`, `flow`, `reading`, `grants` | each function's section |
//! | `README.md` | `index` | the table of functions, linking to those sections |
//! | `router/install.sql` | `queue`, `id` | the PL/Proxy wrappers that run a call on one shard |
//! | `docs/operations.md` | `least-privilege-grants` | the group roles' `GRANT EXECUTE`s |
//! | `harness/src/calls/generated.rs` | the whole file | a typed Rust binding per function ([`calls`]) |
//!
//! A region is the lines between a line starting `-- surface:NAME:begin`
//! (`<!-- surface:NAME:begin` in markdown) and one starting
//! `-- surface:NAME:end` (the grants block keeps the markers the tests that
//! run it look for, `<!-- least-privilege-grants:begin -->`). `cargo run -p workfence-surface` rewrites them;
//! `--check` (and `harness/tests/client/checklist.rs`) fails when one is stale.
//! The checklist also compares the table with the installed catalog, so a
//! signature in the table is the one the extension has. (The anchors keep
//! SQL beside its generated docs the same way: pgrx generates the schema,
//! River generates its driver code with sqlc and checks it in CI.)

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod calls;

/// The table, relative to the repository's root.
pub const TABLE: &str = "sql/functions.toml";

/// What can go wrong reading the table or the files it generates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The table is not valid TOML, or not of the table's shape.
    #[error("{TABLE}: {0}")]
    Parse(#[from] toml::de::Error),
    /// The table parses but says something impossible (a repeated
    /// signature, an empty field, a summary over one line).
    #[error("{TABLE}: {0}")]
    Table(String),
    /// A generated file lacks one of its regions' markers.
    #[error(
        "{path}: no region {name:?} (a line starting {begin:?}, and below it one starting {end:?})"
    )]
    Region {
        /// The file.
        path: &'static str,
        /// The region.
        name: &'static str,
        /// The begin marker.
        begin: String,
        /// The end marker.
        end: String,
    },
}

/// One SQL function (one overload) of schema `workfence`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Function {
    /// The SQL name, without the schema.
    pub name: String,
    /// The arguments as `pg_get_function_arguments` shows them, casts left
    /// out (`payload jsonb DEFAULT '{}'`).
    pub arguments: String,
    /// The result as `pg_get_function_result` shows it.
    pub returns: String,
    /// The reference region the section goes in.
    pub group: Group,
    /// The queue grant (or role) a call needs.
    pub grant: Grant,
    /// How the PL/Proxy router runs it.
    pub router: Route,
    /// The `COMMENT ON FUNCTION` of a generated router wrapper, when it says
    /// more than "Router: runs NAME on the queue's (item's) shard."
    #[serde(default)]
    pub router_comment: Option<String>,
    /// The group role of `docs/operations.md`, *Least privilege*, granted
    /// `EXECUTE` on it.
    pub execute: Execute,
    /// One line for the README's index.
    pub summary: String,
    /// The `COMMENT ON FUNCTION` text (`\df+`): the facts, arguments, limits
    /// and SQLSTATEs, which the reference section must agree with.
    pub comment: String,
    /// The reference section's prose (markdown).
    pub doc: String,
}

/// The regions of `docs/reference.md`, in the order of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Enqueue, claim, the token calls and the operator verbs.
    Items,
    /// Flow control's `work_limit`.
    Flow,
    /// Schedules (from 0.12.0).
    Schedules,
    /// The reading calls.
    Reading,
    /// Queue grants.
    Grants,
}

impl Group {
    /// Every group, in the page's order.
    pub const ALL: [Group; 5] = [
        Group::Items,
        Group::Flow,
        Group::Schedules,
        Group::Reading,
        Group::Grants,
    ];

    /// The name of its region in `docs/reference.md`.
    pub fn region(self) -> &'static str {
        match self {
            Group::Items => "items",
            Group::Flow => "flow",
            Group::Schedules => "schedules",
            Group::Reading => "reading",
            Group::Grants => "grants",
        }
    }
}

/// What a role needs to call a function, besides `EXECUTE` on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Where queue grants are enforced, an `enqueue` grant covering the queue.
    Enqueue,
    /// ... a `claim` grant (tokens of other queues are refused as missing).
    Claim,
    /// ... an `operate` grant.
    Operate,
    /// ... a `read` grant.
    Read,
    /// ... a `purge` grant.
    Purge,
    /// The extension's owner or a superuser (the grants themselves).
    Owner,
    /// Every role: `EXECUTE` is granted to `PUBLIC`.
    Public,
    /// `EXECUTE` alone: no queue grant is checked (the call acts for
    /// others who had one, e.g. `work_fire_schedules`).
    Execute,
}

impl Grant {
    /// The capability's name in `work_grant`, if it is one.
    pub fn capability(self) -> Option<&'static str> {
        match self {
            Grant::Enqueue => Some("enqueue"),
            Grant::Claim => Some("claim"),
            Grant::Operate => Some("operate"),
            Grant::Read => Some("read"),
            Grant::Purge => Some("purge"),
            Grant::Owner | Grant::Public | Grant::Execute => None,
        }
    }

    fn describe(self) -> String {
        match self.capability() {
            Some(capability) => format!(
                "`EXECUTE`, and where queue grants are enforced a `{capability}` grant covering the queue"
            ),
            None if self == Grant::Owner => {
                "the extension's owner (or a member of it) or a superuser".to_string()
            }
            None if self == Grant::Execute => {
                "`EXECUTE`; no queue grant is checked".to_string()
            }
            None => "any role (`EXECUTE` is granted to `PUBLIC`)".to_string(),
        }
    }
}

/// Which group role of the operations guide's *Least privilege* gets
/// `EXECUTE` on a function (the queue grants then narrow it to queues).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execute {
    /// `workfence_enqueuer`: adds and cancels its items.
    Enqueuer,
    /// `workfence_worker`: claims and the token calls.
    Worker,
    /// `workfence_monitor`: reads.
    Monitor,
    /// `workfence_operator`: retries, reschedules, pauses, limits.
    Operator,
    /// No group: the extension's owner runs it.
    Owner,
    /// `PUBLIC` (the install script grants it).
    Public,
}

impl Execute {
    /// The groups that get `GRANT EXECUTE`, in the guide's order.
    pub const GROUPS: [Execute; 4] = [
        Execute::Enqueuer,
        Execute::Worker,
        Execute::Monitor,
        Execute::Operator,
    ];

    /// The group role's name, for a group.
    pub fn role(self) -> Option<&'static str> {
        match self {
            Execute::Enqueuer => Some("workfence_enqueuer"),
            Execute::Worker => Some("workfence_worker"),
            Execute::Monitor => Some("workfence_monitor"),
            Execute::Operator => Some("workfence_operator"),
            Execute::Owner | Execute::Public => None,
        }
    }
}

/// How `router/install.sql` runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// On the queue's shard, `hashtext(queue) & (N - 1)`: a generated wrapper.
    Queue,
    /// On the queue's shard, as [`Route::Queue`], once the router has
    /// checked that every item id of the function's `after bigint[]` (the
    /// parents of a workflow's item) is on that shard (`id >> 48`): 22023
    /// otherwise, since a child and its parents must be on one shard. A
    /// generated wrapper, in the `queue` region.
    QueueAfter,
    /// On the item's shard, `id >> 48`: a generated wrapper.
    Id,
    /// A wrapper written by hand (several shards, or two calls).
    ByHand,
}

impl Route {
    fn describe(self) -> &'static str {
        match self {
            Route::Queue => "runs on the queue's shard",
            Route::QueueAfter => {
                "runs on the queue's shard; every `after` id must be an item of that shard \
                 (`id >> 48`), else 22023 ([`scaling.md`](scaling.md), *Workflows live on one \
                 shard*)"
            }
            Route::Id => "runs on the item's shard (`id >> 48`)",
            Route::ByHand => {
                "written by hand in `router/install.sql`, whose header says where it runs"
            }
        }
    }
}

impl Function {
    /// The argument declarations, split at the commas between them.
    pub fn argument_list(&self) -> Vec<&str> {
        split_top_level(&self.arguments)
    }

    /// The argument names, in order.
    pub fn argument_names(&self) -> Vec<&str> {
        self.argument_list()
            .into_iter()
            .map(|argument| argument.split(' ').next().unwrap_or(argument))
            .collect()
    }

    /// The argument types, as a signature names them (`text, jsonb, ...`),
    /// `timestamp with time zone` written `timestamptz`.
    pub fn argument_types(&self) -> Vec<String> {
        self.argument_list()
            .into_iter()
            .map(|argument| {
                let declared = argument.split_once(' ').map_or("", |(_, rest)| rest);
                let without_default = declared
                    .split_once(" DEFAULT ")
                    .map_or(declared, |(ty, _)| ty);
                without_default.replace("timestamp with time zone", "timestamptz")
            })
            .collect()
    }

    /// Whether each argument, in order, may be NULL: those declared
    /// `DEFAULT NULL`. Every other argument raises 22004 for a NULL (an
    /// optional argument with another default too: omit it instead).
    pub fn argument_nullable(&self) -> Vec<bool> {
        self.argument_list()
            .into_iter()
            .map(|argument| argument.ends_with(" DEFAULT NULL"))
            .collect()
    }

    /// `workfence.name(type, ...)`, as `COMMENT ON FUNCTION` names it.
    pub fn signature(&self) -> String {
        format!(
            "workfence.{}({})",
            self.name,
            self.argument_types().join(", ")
        )
    }

    /// The reference section's heading text: `` `name(arguments) → result` ``.
    pub fn heading(&self) -> String {
        format!("`{}({}) → {}`", self.name, self.arguments, self.returns)
    }
}

/// The SQL surface: every function of `sql/functions.toml`, in its order.
#[derive(Debug, Clone)]
pub struct Surface {
    /// The functions, in the table's (and the reference's) order.
    pub functions: Vec<Function>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    function: Vec<Function>,
}

/// One file's text now and as the table renders it.
#[derive(Debug, Clone)]
pub struct Generated {
    /// Relative to the repository's root.
    pub path: &'static str,
    /// What the file holds.
    pub current: String,
    /// What it should hold.
    pub rendered: String,
}

impl Generated {
    /// Whether the file differs from what the table renders.
    pub fn is_stale(&self) -> bool {
        self.current != self.rendered
    }
}

impl Surface {
    /// Reads and checks `sql/functions.toml` under `root`.
    pub fn load(root: &Path) -> Result<Surface, Error> {
        let path = root.join(TABLE);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Read { path, source })?;
        Surface::parse(&text)
    }

    /// Parses and checks the table's text: every field non-empty, every
    /// (name, argument types) once, summaries one line, and text fields
    /// trimmed of the newlines TOML's multi-line strings leave.
    pub fn parse(text: &str) -> Result<Surface, Error> {
        let table: TableFile = toml::from_str(text)?;
        let mut functions = table.function;
        let mut seen = std::collections::BTreeSet::new();
        for function in &mut functions {
            for field in [
                &mut function.name,
                &mut function.arguments,
                &mut function.returns,
                &mut function.summary,
                &mut function.comment,
                &mut function.doc,
            ] {
                *field = field.trim().to_string();
            }
            let name = &function.name;
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                return Err(Error::Table(format!("bad function name {name:?}")));
            }
            for (field, value) in [
                ("returns", &function.returns),
                ("summary", &function.summary),
                ("comment", &function.comment),
                ("doc", &function.doc),
            ] {
                if value.is_empty() {
                    return Err(Error::Table(format!("{name}: empty {field}")));
                }
            }
            if function.summary.contains('\n') || function.comment.contains('\n') {
                return Err(Error::Table(format!(
                    "{name}: summary and comment are one line each"
                )));
            }
            if !seen.insert(function.signature()) {
                return Err(Error::Table(format!(
                    "{} is in the table twice",
                    function.signature()
                )));
            }
            if matches!(function.router, Route::Queue | Route::QueueAfter)
                && !function.argument_names().contains(&"queue")
            {
                return Err(Error::Table(format!(
                    "{name}: routed by queue, but has no argument queue"
                )));
            }
            if function.router == Route::QueueAfter
                && !function
                    .argument_list()
                    .iter()
                    .any(|argument| argument.starts_with("after bigint[]"))
            {
                return Err(Error::Table(format!(
                    "{name}: routed by queue and after, but has no argument after bigint[]"
                )));
            }
            if function.router == Route::Id && !function.argument_names().contains(&"id") {
                return Err(Error::Table(format!(
                    "{name}: routed by id, but has no argument id"
                )));
            }
        }
        calls::binding_names(&functions)?;
        Ok(Surface { functions })
    }

    /// Every generated file under `root`, now and as rendered.
    pub fn generated(&self, root: &Path) -> Result<Vec<Generated>, Error> {
        let mut files = Vec::new();
        let mut render =
            |path: &'static str, regions: Vec<(&'static str, String)>| -> Result<(), Error> {
                let full = root.join(path);
                let current = std::fs::read_to_string(&full).map_err(|source| Error::Read {
                    path: full.clone(),
                    source,
                })?;
                let mut rendered = current.clone();
                for (name, content) in regions {
                    rendered = replace_region(&rendered, path, name, &content)?;
                }
                files.push(Generated {
                    path,
                    current,
                    rendered,
                });
                Ok(())
            };
        render("sql/finalize.sql", vec![("comments", self.comments())])?;
        render(
            "docs/reference.md",
            Group::ALL
                .iter()
                .map(|&group| (group.region(), self.sections(group)))
                .collect(),
        )?;
        render("README.md", vec![("index", self.index())])?;
        render(
            "docs/operations.md",
            vec![("least-privilege-grants", self.grants_sql())],
        )?;
        render(
            "router/install.sql",
            vec![
                ("queue", self.wrappers(Route::Queue)),
                ("id", self.wrappers(Route::Id)),
            ],
        )?;
        // A whole file: missing (not yet generated) reads as empty.
        let full = root.join(calls::PATH);
        let current = match std::fs::read_to_string(&full) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(Error::Read { path: full, source }),
        };
        files.push(Generated {
            path: calls::PATH,
            current,
            rendered: calls::render(&self.functions)?,
        });
        Ok(files)
    }

    /// The files under `root` that differ from what the table renders.
    pub fn stale(&self, root: &Path) -> Result<Vec<&'static str>, Error> {
        Ok(self
            .generated(root)?
            .into_iter()
            .filter(Generated::is_stale)
            .map(|file| file.path)
            .collect())
    }

    /// Writes every stale file under `root`; returns their paths.
    pub fn write(&self, root: &Path) -> Result<Vec<&'static str>, Error> {
        let mut written = Vec::new();
        for file in self.generated(root)? {
            if file.is_stale() {
                let path = root.join(file.path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|source| Error::Write {
                        path: parent.to_path_buf(),
                        source,
                    })?;
                }
                std::fs::write(&path, &file.rendered)
                    .map_err(|source| Error::Write { path, source })?;
                written.push(file.path);
            }
        }
        Ok(written)
    }

    /// `sql/finalize.sql`'s region: a `COMMENT ON FUNCTION` per function.
    fn comments(&self) -> String {
        self.functions
            .iter()
            .map(|function| {
                format!(
                    "COMMENT ON FUNCTION {} IS\n'{}';\n",
                    function.signature(),
                    function.comment.replace('\'', "''")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A region of `docs/reference.md`: each function of `group`'s section.
    fn sections(&self, group: Group) -> String {
        self.functions
            .iter()
            .filter(|function| function.group == group)
            .map(|function| {
                format!(
                    "### {}\n{}\n\n*Who may call:* {}. *Through the router:* {}.\n",
                    function.heading(),
                    function.doc,
                    function.grant.describe(),
                    function.router.describe()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The names of the functions granted to `execute`, in the table's order,
    /// an overload once.
    pub fn granted_to(&self, execute: Execute) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for function in self.functions.iter().filter(|f| f.execute == execute) {
            if !names.contains(&function.name.as_str()) {
                names.push(&function.name);
            }
        }
        names
    }

    /// `docs/operations.md`'s least-privilege block: `USAGE` on the schema
    /// and `EXECUTE` on each group's functions (an overload named by its
    /// argument types), the monitor's view too.
    fn grants_sql(&self) -> String {
        let roles: Vec<&str> = Execute::GROUPS.iter().filter_map(|g| g.role()).collect();
        let mut sql = format!(
            "```sql\nGRANT USAGE ON SCHEMA workfence\n  TO {};\n",
            roles.join(", ")
        );
        for group in Execute::GROUPS {
            let role = group.role().expect("a group has a role");
            let functions: Vec<String> = self
                .functions
                .iter()
                .filter(|f| f.execute == group)
                .map(|f| {
                    let overloaded = self.functions.iter().filter(|o| o.name == f.name).count() > 1;
                    if overloaded {
                        f.signature()
                    } else {
                        format!("workfence.{}", f.name)
                    }
                })
                .collect();
            sql.push('\n');
            if group == Execute::Monitor {
                sql.push_str(&format!(
                    "GRANT SELECT ON workfence.work_queue_stats, workfence.work_queue_counters,\n    \
                     workfence.work_queue_history, workfence.work_schedules TO {role};\n"
                ));
            }
            if group == Execute::Operator {
                // The schedules it manages (and, through a router, how pause
                // and resume find a schedule's shard).
                sql.push_str(&format!(
                    "GRANT SELECT ON workfence.work_schedules TO {role};\n"
                ));
            }
            sql.push_str(&format!(
                "GRANT EXECUTE ON FUNCTION\n    {}\n  TO {role};\n",
                functions.join(",\n    ")
            ));
        }
        sql.push_str("```\n");
        sql
    }

    /// `README.md`'s region: one row per function, linking to its section.
    fn index(&self) -> String {
        let mut rows = vec![
            "| function | what it does | grant |".to_string(),
            "|---|---|---|".to_string(),
        ];
        for function in &self.functions {
            let overloaded = self
                .functions
                .iter()
                .filter(|other| other.name == function.name)
                .count()
                > 1;
            let shown = if overloaded {
                format!(
                    "{}({})",
                    function.name,
                    function.argument_names().join(", ")
                )
            } else {
                function.name.clone()
            };
            let grant = match function.grant.capability() {
                Some(capability) => capability,
                None if function.grant == Grant::Owner => "owner",
                None if function.grant == Grant::Execute => "EXECUTE",
                None => "PUBLIC",
            };
            rows.push(format!(
                "| [`{shown}`](docs/reference.md#{}) | {} | {grant} |",
                github_anchor(&function.heading()),
                function.summary
            ));
        }
        rows.join("\n") + "\n"
    }

    /// A region of `router/install.sql`: a PL/Proxy wrapper per function
    /// routed by `route` (the `queue` region: by [`Route::Queue`] and
    /// [`Route::QueueAfter`], in the table's order).
    fn wrappers(&self, route: Route) -> String {
        self.functions
            .iter()
            .filter(|function| match route {
                Route::Queue => matches!(function.router, Route::Queue | Route::QueueAfter),
                _ => function.router == route,
            })
            .map(|function| {
                let (target, shard) = match function.router {
                    Route::Queue => ("workfence_router.queue_shard(queue)", "the queue's shard"),
                    // The hash of the queue, once the parents are checked
                    // (PL/Proxy evaluates it on the router, before it
                    // connects to any shard).
                    Route::QueueAfter => (
                        "workfence_router.queue_shard_after(queue, after)",
                        "the queue's shard",
                    ),
                    Route::Id => (
                        "workfence_router.id_shard(id)",
                        "the item's shard (id >> 48)",
                    ),
                    Route::ByHand => unreachable!("hand-written wrappers are not generated"),
                };
                let head = wrap(
                    &format!("CREATE FUNCTION workfence.{}(", function.name),
                    &function.argument_list(),
                    ")",
                    "    ",
                );
                let returns = match function.returns.strip_prefix("TABLE(") {
                    Some(columns) => wrap(
                        "RETURNS TABLE(",
                        &split_top_level(columns.strip_suffix(')').unwrap_or(columns)),
                        ")",
                        "              ",
                    ),
                    None => format!("RETURNS {}", function.returns),
                };
                let comment = function
                    .router_comment
                    .clone()
                    .unwrap_or_else(|| format!("Router: runs {} on {shard}.", function.name));
                format!(
                    "{head}\n{returns} LANGUAGE plproxy AS $$\n    \
                     CLUSTER workfence_router.cluster('workfence.{}');\n    \
                     RUN ON {target};\n$$;\nCOMMENT ON FUNCTION {} IS\n{};\n",
                    function.name,
                    function.signature(),
                    sql_string_lines(&comment, "    ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The most characters a generated SQL line holds when it can be wrapped.
const WIDTH: usize = 100;

/// `open` + `items` joined by `, ` + `close`, wrapped after a comma before
/// a line would pass [`WIDTH`], continuation lines starting with `indent`.
fn wrap(open: &str, items: &[&str], close: &str, indent: &str) -> String {
    let mut lines = vec![open.to_string()];
    for (i, item) in items.iter().enumerate() {
        let piece = if i + 1 == items.len() {
            format!("{item}{close}")
        } else {
            format!("{item},")
        };
        let line = lines.last_mut().expect("lines starts with one");
        let fresh = line.ends_with('(') || line.trim().is_empty();
        if fresh {
            line.push_str(&piece);
        } else if line.len() + 1 + piece.len() <= WIDTH {
            line.push(' ');
            line.push_str(&piece);
        } else {
            lines.push(format!("{indent}{piece}"));
        }
    }
    if items.is_empty() {
        lines[0].push_str(close);
    }
    lines.join("\n")
}

/// `text` as SQL string literals, one per line, each starting with `indent`
/// and at most [`WIDTH`] long where the words allow: adjacent literals
/// separated by a newline are one string in SQL.
fn sql_string_lines(text: &str, indent: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_inclusive(' ') {
        let escaped = word.replace('\'', "''");
        if !current.is_empty() && indent.len() + current.len() + escaped.len() + 2 > WIDTH {
            lines.push(std::mem::take(&mut current));
        }
        current.push_str(&escaped);
    }
    lines.push(current);
    lines
        .iter()
        .map(|line| format!("{indent}'{line}'"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` split at the `, ` that are outside parentheses and quotes.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    let bytes = text.as_bytes();
    for (i, &byte) in bytes.iter().enumerate() {
        match byte {
            b'\'' => quoted = !quoted,
            b'(' if !quoted => depth += 1,
            b')' if !quoted => depth -= 1,
            b',' if !quoted && depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text[start..].trim().is_empty() {
        parts.push(text[start..].trim());
    }
    parts
}

/// GitHub's anchor of a heading's text: lower case, letters, digits, `_`,
/// `-` and spaces kept, spaces made `-`.
pub fn github_anchor(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `text` with the lines between region `name`'s markers replaced by
/// `content` (which ends with a newline).
fn replace_region(
    text: &str,
    path: &'static str,
    name: &'static str,
    content: &str,
) -> Result<String, Error> {
    // The operations guide's block keeps the markers its tests look for.
    let marker = if name == "least-privilege-grants" {
        name.to_string()
    } else {
        format!("surface:{name}")
    };
    let (begin, end) = if path.ends_with(".md") {
        (format!("<!-- {marker}:begin"), format!("<!-- {marker}:end"))
    } else {
        (format!("-- {marker}:begin"), format!("-- {marker}:end"))
    };
    let missing = || Error::Region {
        path,
        name,
        begin: begin.clone(),
        end: end.clone(),
    };
    let begin_at = line_starting(text, &begin, 0).ok_or_else(missing)?;
    let body_at = text[begin_at..]
        .find('\n')
        .map(|n| begin_at + n + 1)
        .ok_or_else(missing)?;
    let end_at = line_starting(text, &end, body_at).ok_or_else(missing)?;
    Ok(format!(
        "{}{}{}",
        &text[..body_at],
        content,
        &text[end_at..]
    ))
}

/// The byte offset of the first line at or after `from` that starts with
/// `prefix`.
fn line_starting(text: &str, prefix: &str, from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        if text[at..].starts_with(prefix) && (at == 0 || text.as_bytes()[at - 1] == b'\n') {
            return Some(at);
        }
        at += text[at..].find('\n')? + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_replaced_and_the_text_around_it_kept() {
        let text = "head\n-- surface:comments:begin (generated)\nold\nlines\n-- surface:comments:end\ntail\n";
        let replaced = replace_region(text, "sql/x.sql", "comments", "new\n").unwrap();
        assert_eq!(
            replaced,
            "head\n-- surface:comments:begin (generated)\nnew\n-- surface:comments:end\ntail\n"
        );
        assert!(matches!(
            replace_region("no markers\n", "sql/x.sql", "comments", "new\n"),
            Err(Error::Region { .. })
        ));
    }

    #[test]
    fn arguments_split_outside_quotes_and_parentheses() {
        assert_eq!(
            split_top_level("a jsonb DEFAULT '{a, b}', b numeric(10, 2), c text"),
            vec!["a jsonb DEFAULT '{a, b}'", "b numeric(10, 2)", "c text"]
        );
    }

    #[test]
    fn a_table_that_repeats_a_signature_or_routes_without_the_argument_is_refused() {
        let one = r#"
[[function]]
name = "work_pause"
arguments = "queue text"
returns = "boolean"
group = "items"
grant = "operate"
router = "queue"
execute = "operator"
summary = "Pauses."
comment = "work_pause(queue)"
doc = "Pauses."
"#;
        let surface = Surface::parse(one).unwrap();
        assert_eq!(
            surface.functions[0].signature(),
            "workfence.work_pause(text)"
        );
        assert!(matches!(
            Surface::parse(&one.repeat(2)),
            Err(Error::Table(_))
        ));
        let by_id = one.replace("router = \"queue\"", "router = \"id\"");
        assert!(matches!(Surface::parse(&by_id), Err(Error::Table(_))));
        // Routed by queue and after: needs `after bigint[]` beside queue.
        let by_after = one.replace("router = \"queue\"", "router = \"queue_after\"");
        assert!(matches!(Surface::parse(&by_after), Err(Error::Table(_))));
        let with_after = by_after.replace(
            "arguments = \"queue text\"",
            "arguments = \"queue text, after bigint[] DEFAULT NULL\"",
        );
        let surface = Surface::parse(&with_after).unwrap();
        let wrapper = surface.wrappers(Route::Queue);
        assert!(
            wrapper.contains("RUN ON workfence_router.queue_shard_after(queue, after);"),
            "{wrapper}"
        );
        assert!(surface.wrappers(Route::Id).is_empty());
        assert!(matches!(
            Surface::parse(&one.replace("grant", "grants")),
            Err(Error::Parse(_))
        ));
    }

    #[test]
    fn a_long_comment_is_adjacent_literals_that_join_to_it() {
        let text = "Router: runs x on the queue's shard; ".repeat(6);
        let sql = sql_string_lines(&text, "    ");
        assert!(sql.lines().count() > 1, "{sql}");
        assert!(sql.lines().all(|line| line.len() <= WIDTH), "{sql}");
        let joined: String = sql
            .lines()
            .map(|line| line.trim().trim_matches('\''))
            .collect();
        assert_eq!(joined.replace("''", "'"), text);
    }

    #[test]
    fn long_signatures_wrap_at_commas() {
        let wrapped = wrap("CREATE FUNCTION workfence.f(", &["a text"; 20], ")", "    ");
        assert!(wrapped.lines().all(|line| line.len() <= WIDTH), "{wrapped}");
        assert_eq!(wrapped.replace("\n   ", "").matches("a text").count(), 20);
    }
}
