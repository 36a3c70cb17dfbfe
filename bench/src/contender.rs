//! The two contenders the driver calls statement by statement: pg_workfence
//! through its SQL functions, and the hand-written baseline, the same
//! semantics as plain SQL a client sends itself.
//!
//! Both expose the same operations with the same parameters, so a cell
//! (`crate::cell`) runs either without knowing which it drives. Every value is
//! a bind parameter; statements are prepared once per connection.

use postgres::types::ToSql;
use postgres::{Client, Statement};
use workfence_harness::calls::prepared;

use crate::Result;

/// The queue every cell works on.
pub const QUEUE: &str = "bench";

/// An always-empty queue the warm-up claims from.
const WARM_UP_QUEUE: &str = "warm-up";

/// Priority of the items a cell processes. Claims take lower priorities first,
/// so a cell's items come before the depth fixture's.
pub const CELL_PRIORITY: i32 = 0;
/// Priority of the pending depth fixture (workload 3): in the same queue and
/// the same index, claimed only after the cell's own items.
pub const DEPTH_PRIORITY: i32 = 1;
/// Priority of the retained finished rows (workload 4).
pub const RETAINED_PRIORITY: i32 = 2;

/// One contender's SQL. Parameters are the same for both:
/// - `claim`: queue text, owner text, lease text (an interval), max_items int
///   -> rows (id bigint, epoch bigint);
/// - `finish`: id, owner, epoch -> one row whose first column is true (or a
///   row count of 1) when the token was current;
/// - `finish_many`: owner, ids bigint[], epochs bigint[] -> one row: how many
///   finished;
/// - `renew`: id, owner, epoch, lease text -> affected rows or a boolean row;
/// - `cycle` (pg_workfence's fused call only): queue, owner, lease text,
///   last id, last epoch, max_items -> rows (id, epoch, settled), the next
///   claims (NULL when none) and whether the last item was finished.
pub struct Contender {
    /// Name in the report.
    pub name: &'static str,
    /// Its database on the benchmark cluster.
    pub database: &'static str,
    /// Schema set-up, run once in a fresh database.
    pub install: &'static str,
    /// Run on every worker session before it prepares its statements.
    session_setup: &'static str,
    /// The schema holding its `items` table and `epoch_seq` sequence (both
    /// contenders use the same names), for the fixtures and the cleanup
    /// between cells.
    schema: &'static str,
    claim: &'static str,
    finish: &'static str,
    finish_many: &'static str,
    renew: &'static str,
    /// The fused finish-and-claim, if the contender has one: a cell of this
    /// contender finishes each item and claims the next in one statement.
    cycle: Option<&'static str>,
    /// Enqueue `$1` pending items of priority `$2` through the contender's
    /// own enqueue path; returns one row, the count.
    enqueue: &'static str,
    /// Delete every finished item of the queue; returns one row, the count.
    purge: &'static str,
}

/// pg_workfence (the installed version), through its public functions only (the fixtures of
/// retained rows aside, which are written straight into the table).
pub static WORKFENCE: Contender = Contender {
    name: "pg_workfence",
    database: "bench_workfence",
    install: "CREATE EXTENSION pg_workfence",
    schema: "workfence",
    // The functions run their own statements as generic plans already.
    session_setup: "",
    claim: prepared::CLAIM_TOKENS,
    finish: prepared::FINISH,
    finish_many: prepared::FINISH_MANY_COUNT,
    renew: prepared::RENEW,
    cycle: None,
    enqueue: "SELECT pg_catalog.count(e.id) \
                FROM pg_catalog.generate_series(1, $1::int) AS g, \
                     LATERAL workfence.work_enqueue('bench', pg_catalog.jsonb_build_object('n', g), \
                                                   priority => $2::int) AS e",
    purge: "SELECT workfence.work_purge('0', 'bench')",
};

/// pg_workfence's worker cycle through its fused call (from 0.9.0): the
/// first item claimed with `work_claim`, then each item finished and the
/// next claimed by one `work_finish_and_claim`, and the last finished with
/// `work_finish`. Same database and functions as [`WORKFENCE`]; compared
/// with the baseline's two statements per item.
pub static WORKFENCE_FUSED: Contender = Contender {
    name: "pg_workfence fused",
    cycle: Some(prepared::FINISH_AND_CLAIM_TOKENS),
    ..WORKFENCE
};

/// The design's limit: the same claim (pending-and-due or lapsed, in
/// priority, run_at, id order, `FOR UPDATE SKIP LOCKED`, a fresh epoch from a
/// sequence in the same UPDATE) and the same fenced finish (id AND owner AND
/// epoch AND claimed), written by hand and sent by the client as prepared
/// statements. No dead-letter path, no argument checks, no function call.
pub static BASELINE: Contender = Contender {
    name: "baseline SQL",
    database: "bench_baseline",
    install: include_str!("../sql/baseline.sql"),
    schema: "baseline",
    // What pg_workfence does for its own statements (src/pg/plans.rs): left to
    // choose, the plan cache re-plans this claim on every call (a custom
    // plan knows LIMIT is 1), about 100 µs of a 200 µs claim here. The
    // baseline is meant as the design's limit, so it gets the same.
    session_setup: "SET plan_cache_mode = force_generic_plan",
    claim: include_str!("../sql/baseline_claim.sql"),
    finish: include_str!("../sql/baseline_finish.sql"),
    finish_many: "WITH f AS ( \
                    UPDATE baseline.items AS i SET state = 'done', result = NULL, \
                           lease_until = NULL, finished_at = pg_catalog.clock_timestamp() \
                      FROM ROWS FROM (pg_catalog.unnest($2::bigint[]), pg_catalog.unnest($3::bigint[])) \
                           AS r(id, epoch) \
                     WHERE i.id = r.id AND i.owner = $1 AND i.epoch = r.epoch \
                       AND i.state = 'claimed' \
                    RETURNING 1) \
                  SELECT pg_catalog.count(*) FROM f",
    cycle: None,
    renew: "UPDATE baseline.items SET lease_until = pg_catalog.clock_timestamp() + ($4::text)::interval \
             WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'",
    enqueue: "WITH ins AS ( \
                INSERT INTO baseline.items (queue, key, payload, priority) \
                SELECT 'bench', pg_catalog.gen_random_uuid()::text, \
                       pg_catalog.jsonb_build_object('n', g), $2::int \
                  FROM pg_catalog.generate_series(1, $1::int) AS g \
                RETURNING 1) \
              SELECT pg_catalog.count(*) FROM ins",
    purge: "WITH gone AS ( \
              DELETE FROM baseline.items \
               WHERE queue = 'bench' AND state IN ('done', 'failed', 'cancelled') \
              RETURNING 1) \
            SELECT pg_catalog.count(*) FROM gone",
};

/// The contenders with a database of their own, which the driver installs
/// and loads fixtures into, and runs statement by statement.
pub static CONTENDERS: [&Contender; 2] = [&WORKFENCE, &BASELINE];

/// Workload 1's contenders: both, and pg_workfence's fused cycle (in
/// pg_workfence's database).
pub static CYCLE_CONTENDERS: [&Contender; 3] = [&WORKFENCE, &BASELINE, &WORKFENCE_FUSED];

impl Contender {
    /// Enqueue `n` pending items of `priority` through the contender's own
    /// enqueue path, in one statement.
    pub fn enqueue(&self, db: &mut Client, n: i32, priority: i32) -> Result<i64> {
        Ok(db.query_one(self.enqueue, &[&n, &priority])?.get(0))
    }

    /// Workload 4's fixture: insert `n` items finished long ago (priority
    /// [`RETAINED_PRIORITY`]) straight into the table, as a busy queue's
    /// history would be; returns how many.
    pub fn retain(&self, db: &mut Client, n: i32) -> Result<i64> {
        // The schema is a constant of this file; values are parameters.
        let sql = format!(
            "WITH ins AS ( \
               INSERT INTO {s}.items (queue, key, payload, priority, run_at, state, \
                      attempts, max_attempts, owner, epoch, result, finished_at) \
               SELECT $1::text, 'done-' || g, '{{}}', $3::int, pg_catalog.now(), 'done', 1, 25, \
                      'bench-history', pg_catalog.nextval('{s}.epoch_seq'), '{{}}', \
                      pg_catalog.now() - interval '1 hour' \
                 FROM pg_catalog.generate_series(1, $2::int) AS g \
               RETURNING 1) \
             SELECT pg_catalog.count(*) FROM ins",
            s = self.schema
        );
        Ok(db
            .query_one(&sql, &[&QUEUE, &n, &RETAINED_PRIORITY])?
            .get(0))
    }

    /// Delete every finished item of the queue (`work_purge` for
    /// pg_workfence); returns how many.
    pub fn purge(&self, db: &mut Client) -> Result<i64> {
        Ok(db.query_one(self.purge, &[])?.get(0))
    }

    /// Before a cell: delete the rows earlier cells finished (the retained
    /// fixture stays) and VACUUM, so every cell starts from a table without
    /// their dead rows.
    pub fn reset(&self, db: &mut Client) -> Result<()> {
        db.execute(
            &format!(
                "DELETE FROM {}.items WHERE queue = $1 AND priority < $2 AND state <> 'pending'",
                self.schema
            ),
            &[&QUEUE, &RETAINED_PRIORITY],
        )?;
        Ok(db.batch_execute(&format!("VACUUM {}.items", self.schema))?)
    }

    /// Refresh the planner's statistics after a load.
    pub fn analyze(&self, db: &mut Client) -> Result<()> {
        Ok(db.batch_execute(&format!("ANALYZE {}.items", self.schema))?)
    }

    /// Prepare this contender's statements on `client`, for one worker.
    ///
    /// The session is warmed up before it is handed out, as a long-lived
    /// worker's connection is: every statement runs once (a claim of an
    /// empty queue, a finish, renew and finish_many of a token that does not
    /// exist), so plans are built before any clock starts.
    pub fn session(&'static self, mut client: Client, owner: String) -> Result<Session> {
        client.batch_execute(self.session_setup)?;
        let mut session = Session {
            claim: client.prepare(self.claim)?,
            finish: client.prepare(self.finish)?,
            finish_many: client.prepare(self.finish_many)?,
            renew: client.prepare(self.renew)?,
            cycle: self.cycle.map(|sql| client.prepare(sql)).transpose()?,
            client,
            owner,
        };
        let nobody = Token { id: -1, epoch: -1 };
        let warm = session.client.query(
            &session.claim,
            &[&WARM_UP_QUEUE, &session.owner, &"1 second", &1i32],
        )?;
        let mut cold = session.finish(nobody)? || session.renew(nobody, "1 second")?;
        if session.cycle.is_some() {
            let (settled, next) = session.cycle_in(WARM_UP_QUEUE, nobody, "1 second", 1)?;
            cold |= settled || !next.is_empty();
        }
        if !warm.is_empty() || cold || session.finish_many(&[nobody])? != 0 {
            return Err(crate::Error::Bench(format!(
                "{}: the warm-up touched an item",
                self.name
            )));
        }
        Ok(session)
    }
}

/// One worker's connection with the contender's statements prepared.
pub struct Session {
    client: Client,
    owner: String,
    claim: Statement,
    finish: Statement,
    finish_many: Statement,
    renew: Statement,
    cycle: Option<Statement>,
}

/// A claimed item's fencing token.
#[derive(Clone, Copy, Debug)]
pub struct Token {
    /// Item id.
    pub id: i64,
    /// The claim's epoch.
    pub epoch: i64,
}

/// Run a token-fenced statement; true when it reported success: pg_workfence's
/// functions return a boolean row, the baseline's UPDATEs match one row.
fn fenced(client: &mut Client, stmt: &Statement, params: &[&(dyn ToSql + Sync)]) -> Result<bool> {
    if stmt.columns().is_empty() {
        return Ok(client.execute(stmt, params)? == 1);
    }
    Ok(client.query_one(stmt, params)?.get::<_, bool>(0))
}

impl Session {
    /// Run `sql` on the session (for `SET synchronous_commit`).
    pub fn execute(&mut self, sql: &str) -> Result<()> {
        Ok(self.client.batch_execute(sql)?)
    }

    /// Claim up to `max_items` under a `lease` (interval text).
    pub fn claim(&mut self, lease: &str, max_items: i32) -> Result<Vec<Token>> {
        let rows = self
            .client
            .query(&self.claim, &[&QUEUE, &self.owner, &lease, &max_items])?;
        Ok(rows
            .iter()
            .map(|r| Token {
                id: r.get(0),
                epoch: r.get(1),
            })
            .collect())
    }

    /// Finish one item; true when its token was current.
    pub fn finish(&mut self, token: Token) -> Result<bool> {
        fenced(
            &mut self.client,
            &self.finish,
            &[&token.id, &self.owner, &token.epoch],
        )
    }

    /// Renew one item's lease; true when its token was current.
    pub fn renew(&mut self, token: Token, lease: &str) -> Result<bool> {
        let params: [&(dyn ToSql + Sync); 4] = [&token.id, &self.owner, &token.epoch, &lease];
        fenced(&mut self.client, &self.renew, &params)
    }

    /// Whether this session finishes and claims in one fused call
    /// ([`Session::cycle`]).
    pub fn fused(&self) -> bool {
        self.cycle.is_some()
    }

    /// Finish `last` and claim up to `max_items` more under `lease`, in one
    /// fused call: whether `last` was finished, and the new claims.
    pub fn cycle(
        &mut self,
        last: Token,
        lease: &str,
        max_items: i32,
    ) -> Result<(bool, Vec<Token>)> {
        self.cycle_in(QUEUE, last, lease, max_items)
    }

    fn cycle_in(
        &mut self,
        queue: &str,
        last: Token,
        lease: &str,
        max_items: i32,
    ) -> Result<(bool, Vec<Token>)> {
        let stmt = self.cycle.as_ref().ok_or_else(|| {
            crate::Error::Bench("this contender has no fused finish-and-claim".into())
        })?;
        let rows = self.client.query(
            stmt,
            &[
                &queue,
                &self.owner,
                &lease,
                &last.id,
                &last.epoch,
                &max_items,
            ],
        )?;
        let settled = rows.first().is_some_and(|r| r.get::<_, bool>(2));
        let claimed = rows
            .iter()
            .filter_map(|r| {
                Some(Token {
                    id: r.get::<_, Option<i64>>(0)?,
                    epoch: r.get::<_, Option<i64>>(1)?,
                })
            })
            .collect();
        Ok((settled, claimed))
    }

    /// Finish a batch in one statement; how many were current.
    pub fn finish_many(&mut self, tokens: &[Token]) -> Result<i64> {
        let ids: Vec<i64> = tokens.iter().map(|t| t.id).collect();
        let epochs: Vec<i64> = tokens.iter().map(|t| t.epoch).collect();
        Ok(self
            .client
            .query_one(&self.finish_many, &[&self.owner, &ids, &epochs])?
            .get(0))
    }
}
