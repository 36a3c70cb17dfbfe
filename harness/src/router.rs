//! A PL/Proxy router in front of shard databases (docs/scaling.md), set up
//! on a throwaway [`Cluster`] as the guide says: each shard a database with
//! the extension and its shard number in its item ids, the router a
//! database with PL/Proxy, the foreign server `workfence_shards` naming the
//! shards, and `router/install.sql` run in it. Unlike the guide's setup, the
//! router and its shards share one cluster, which trusts every local
//! connection (so no user mapping needs a password), and `USAGE` on the
//! foreign server goes to PUBLIC.

use crate::{Cluster, Error, Result};

/// The router's install script (`router/install.sql`), as built.
pub const INSTALL_SQL: &str = include_str!("../../router/install.sql");

/// The environment variable naming another install script for the routers
/// [`Router::create`] makes, instead of [`INSTALL_SQL`]: to run the router
/// tests against another version of it without rebuilding, e.g. the last
/// commit's (`git show HEAD:router/install.sql > /tmp/old.sql`), to see a
/// new test fail there.
pub const INSTALL_SQL_ENV: &str = "WORKFENCE_ROUTER_SQL";

/// The install script the routers are made with: the file
/// [`INSTALL_SQL_ENV`] names, else [`INSTALL_SQL`].
pub fn install_sql() -> Result<std::borrow::Cow<'static, str>> {
    match std::env::var_os(INSTALL_SQL_ENV) {
        None => Ok(std::borrow::Cow::Borrowed(INSTALL_SQL)),
        Some(path) => std::fs::read_to_string(&path)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| {
                Error::Setup(format!(
                    "{INSTALL_SQL_ENV}={}: {e}",
                    std::path::Path::new(&path).display()
                ))
            }),
    }
}

/// A router database and its shard databases on one cluster.
#[derive(Debug, Clone)]
pub struct Router {
    /// The router database.
    pub database: String,
    /// The shard databases, shard 0 first.
    pub shards: Vec<String>,
}

/// How a shard's item ids are numbered: shard `s`'s are `s * 2^48`, `+ 1`, ...
/// (shard 0's from 1)
/// (`router/install.sql`), so `id >> 48` names the shard.
pub const ID_BITS: u32 = 48;

/// The statement that gives shard `shard` its item ids: run once in the
/// shard database, as a superuser, before its first enqueue.
pub fn shard_setup_sql(shard: usize) -> String {
    format!(
        "SELECT pg_catalog.setval('workfence.items_id_seq', GREATEST(1, {shard}::bigint << {ID_BITS}), false)"
    )
}

impl Router {
    /// Creates `shards` shard databases (`<name>_shard<n>`, each with the
    /// extension and its shard number) and the router database `<name>`
    /// (PL/Proxy, the foreign server with one option per shard, a user
    /// mapping for PUBLIC, `router/install.sql`, or the script
    /// [`INSTALL_SQL_ENV`] names) on `cluster`. `shards`
    /// must be a power of two (PL/Proxy maps a hash to a shard with its low
    /// bits).
    pub fn create(cluster: &Cluster, name: &str, shards: usize) -> Result<Router> {
        if !shards.is_power_of_two() {
            return Err(Error::Setup(format!(
                "{shards} shards: PL/Proxy needs a power of two"
            )));
        }
        let setup = |what: &str, e: postgres::Error| Error::Setup(format!("{what}: {e}"));
        let mut names = Vec::with_capacity(shards);
        for shard in 0..shards {
            let database = format!("{name}_shard{shard}");
            cluster.create_database(&database)?;
            let mut c = cluster.connect_to(&database)?;
            c.batch_execute(&shard_setup_sql(shard))
                .map_err(|e| setup("numbering a shard's item ids", e))?;
            names.push(database);
        }
        let mut admin = cluster.connect()?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|e| setup("creating the router database", e))?;
        let options: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(n, database)| {
                format!(
                    "p{n} 'host={} port={} dbname={database}'",
                    cluster.host(),
                    cluster.port()
                )
            })
            .collect();
        let mut router = cluster.connect_to(name)?;
        router
            .batch_execute(&format!(
                "CREATE EXTENSION plproxy;
                 CREATE SERVER workfence_shards FOREIGN DATA WRAPPER plproxy OPTIONS ({});
                 CREATE USER MAPPING FOR PUBLIC SERVER workfence_shards;
                 GRANT USAGE ON FOREIGN SERVER workfence_shards TO PUBLIC;",
                options.join(", ")
            ))
            .map_err(|e| setup("PL/Proxy and the foreign server of the shards", e))?;
        router
            .batch_execute(&install_sql()?)
            .map_err(|e| setup("router/install.sql", e))?;
        Ok(Router {
            database: name.to_owned(),
            shards: names,
        })
    }

    /// Doubles the shards (docs/scaling.md, *Adding shards*): creates shard
    /// databases N..2N-1 as [`Router::create`] does, then adds their options
    /// `pN`.. to the foreign server in one `ALTER SERVER` (PL/Proxy rereads
    /// it at the next call). Queues whose hash has bit N set now route to
    /// shard `s + N`; what they left on shard `s` must be drained there.
    pub fn double(&mut self, cluster: &Cluster) -> Result<()> {
        let setup = |what: &str, e: postgres::Error| Error::Setup(format!("{what}: {e}"));
        let old = self.shards.len();
        let mut options = Vec::with_capacity(old);
        for shard in old..2 * old {
            let database = format!("{}_shard{shard}", self.database);
            cluster.create_database(&database)?;
            let mut c = cluster.connect_to(&database)?;
            c.batch_execute(&shard_setup_sql(shard))
                .map_err(|e| setup("numbering a shard's item ids", e))?;
            options.push(format!(
                "ADD p{shard} 'host={} port={} dbname={database}'",
                cluster.host(),
                cluster.port()
            ));
            self.shards.push(database);
        }
        let mut router = cluster.connect_to(&self.database)?;
        router
            .batch_execute(&format!(
                "ALTER SERVER workfence_shards OPTIONS ({})",
                options.join(", ")
            ))
            .map_err(|e| setup("adding the shards to the foreign server", e))
    }

    /// The connection string of the router database on `cluster`.
    pub fn connection_string(&self, cluster: &Cluster) -> String {
        cluster.connection_string(&self.database)
    }

    /// The shard (0-based, the foreign server's option `p<n>`) the router
    /// sends calls naming `queue` to: `hashtext(queue) & (N - 1)`, asked of
    /// the router's own helper through `router`, a connection to it.
    pub fn shard_of_queue(&self, router: &mut postgres::Client, queue: &str) -> Result<usize> {
        let shards = i32::try_from(self.shards.len())
            .map_err(|_| Error::Setup(format!("{} shards", self.shards.len())))?;
        let shard: i32 = router
            .query_one(
                "SELECT workfence_router.queue_shard($1) OPERATOR(pg_catalog.&) ($2 - 1)",
                &[&queue, &shards],
            )
            .map_err(|e| Error::Setup(format!("the shard of queue {queue:?}: {e}")))?
            .get(0);
        usize::try_from(shard).map_err(|_| Error::Setup(format!("shard {shard}")))
    }

    /// The shard an item id names (`id >> 48`).
    pub fn shard_of_id(id: i64) -> usize {
        usize::try_from(id >> ID_BITS).unwrap_or(usize::MAX)
    }

    /// For tests only: a view `workfence.items` in the router database with
    /// every shard's items (a PL/Proxy `RUN ON ALL` over each shard's table,
    /// `state` as text), so that a test's observations written against one
    /// database's table read the same through the router. Not part of
    /// `router/install.sql`: any query of it reads every shard's whole table.
    /// Like every PL/Proxy function of the router, its helper names its
    /// cluster with `workfence_router.cluster()`, which refuses a call as
    /// a role other than the session's (a router made from an install
    /// script without it, see [`INSTALL_SQL_ENV`], names the cluster).
    pub fn create_items_view(&self, cluster: &Cluster) -> Result<()> {
        let mut router = cluster.connect_to(&self.database)?;
        let setup =
            |e: postgres::Error| Error::Setup(format!("the test view workfence.items: {e}"));
        let checked: bool = router
            .query_one(
                "SELECT pg_catalog.to_regprocedure('workfence_router.cluster(text)') IS NOT NULL",
                &[],
            )
            .map_err(setup)?
            .get(0);
        let cluster_statement = if checked {
            "CLUSTER workfence_router.cluster('workfence_router.test_items');"
        } else {
            "CLUSTER 'workfence_shards';"
        };
        router
            .batch_execute(&ITEMS_VIEW_SQL.replace("CLUSTER;", cluster_statement))
            .map_err(setup)
    }
}

/// [`Router::create_items_view`]'s SQL (`CLUSTER;` stands for its cluster
/// statement).
const ITEMS_VIEW_SQL: &str = "
CREATE FUNCTION workfence_router.test_items()
RETURNS TABLE(id bigint, queue text, key text, payload jsonb, priority integer,
              run_at timestamptz, state text, attempts integer, max_attempts integer,
              owner text, epoch bigint, lease_until timestamptz, last_error text,
              result jsonb, created_at timestamptz, finished_at timestamptz,
              claimed_at timestamptz, max_run interval, errors jsonb)
LANGUAGE plproxy AS $$
    CLUSTER;
    RUN ON ALL;
    SELECT i.id, i.queue, i.key, i.payload, i.priority, i.run_at, i.state::text, i.attempts,
           i.max_attempts, i.owner, i.epoch, i.lease_until, i.last_error, i.result,
           i.created_at, i.finished_at, i.claimed_at, i.max_run, i.errors
      FROM workfence.items AS i;
$$;
CREATE VIEW workfence.items AS SELECT * FROM workfence_router.test_items();
";
