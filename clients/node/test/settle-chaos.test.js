// Settles lost to dropped connections (issue 35): two worker processes (concurrency 4 each) work
// a steady stream of quick jobs while the test terminates one of their backends five times a
// second (pg_terminate_backend): in each 200 ms, the first backend it sees running a finish,
// fail or release (it looks for one for up to 80 ms), else one of the workers' connections at
// random (claim, heartbeat, pool), so that settles are hit: a connection lost while idle is
// noticed before it is used, and costs nothing. A finish killed before its answer
// came is sent again with the same token on a new connection, so no job runs a second time
// because its settle was lost: the goal is 0 such re-runs.
//
// WORKFENCE_CHAOS_SECONDS sets how long the terminations go on (default 20); WORKFENCE_CHAOS_LIB
// runs the same chaos against another copy of the library (its index.js), to measure a version
// without the resend. The figures are printed.

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { connect, freshQueue, testDsn, waitFor } from './helpers.js';

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'chaos-worker.js');
const SECONDS = Number(process.env.WORKFENCE_CHAOS_SECONDS ?? 20);
const KILLS_PER_SECOND = 5;
const ENQUEUED_PER_SECOND = 100;
const LEASE = 5;

let db;
const dir = mkdtempSync(path.join(os.tmpdir(), 'workfence-chaos-'));
const children = new Set();
before(async () => { db = await connect(); });
after(async () => {
  for (const child of children) child.kill('SIGKILL');
  await db?.end();
  rmSync(dir, { recursive: true, force: true });
});

/** Backends of the workers (application_name `name`) running a finish, fail or release now. */
const SETTLING = `SELECT pid FROM pg_catalog.pg_stat_activity
  WHERE application_name = $1 AND state = 'active' AND query ~ 'work_(finish|fail|release)\\('
  LIMIT 1`;

/**
 * Terminates one backend of the workers: the first one seen running a settle before `until`
 * (performance.now()), else one at random. Resolves to the number terminated (0 or 1).
 */
async function terminateOne(name, until) {
  let pid = null;
  while (pid === null && performance.now() < until) {
    const { rows } = await db.query(SETTLING, [name]);
    pid = rows[0]?.pid ?? null;
  }
  if (pid === null) {
    const { rows } = await db.query(
      `SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = $1
        ORDER BY random() LIMIT 1`, [name]);
    pid = rows[0]?.pid ?? null;
  }
  if (pid === null) return 0;
  const { rows: [{ killed }] } = await db.query('SELECT pg_catalog.pg_terminate_backend($1) AS killed', [pid]);
  return killed ? 1 : 0;
}

test(`under ${KILLS_PER_SECOND} pg_terminate_backend a second, no job runs twice because its settle was lost`, async (t) => {
  const queue = freshQueue('node-chaos');
  const events = path.join(dir, 'events.jsonl');
  const env = {
    ...process.env,
    WORKFENCE_TEST_DSN: `${testDsn()} application_name=${queue}`,
    QUEUE: queue, EVENTS: events, CONCURRENCY: '4', LEASE: String(LEASE), WORK_MS: '10',
    ...(process.env.WORKFENCE_CHAOS_LIB ? { LIB: process.env.WORKFENCE_CHAOS_LIB } : {}),
  };
  const exits = [];
  for (let n = 0; n < 2; n += 1) {
    const child = fork(fixture, [], { env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.add(child);
    exits.push(new Promise((resolve) => child.on('exit', resolve)));
  }

  // The load and the chaos, paced by the clock (they are the experiment, not a synchronisation):
  // every 100 ms, 10 items enqueued and, every 200 ms, one backend of the workers terminated
  // (looked for in the 80 ms before the next tick).
  let enqueued = 0;
  let kills = 0;
  const began = performance.now();
  for (let tick = 0; tick < SECONDS * 10; tick += 1) {
    const n = ENQUEUED_PER_SECOND / 10;
    await db.query(
      `SELECT workfence.work_enqueue($1, jsonb_build_object('n', g), 'item-' || g)
         FROM generate_series($2::int, $3::int) AS g`, [queue, enqueued, enqueued + n - 1]);
    enqueued += n;
    if (tick % 2 === 1) kills += await terminateOne(queue, began + (tick + 1) * 100 - 20);
    await sleep(began + (tick + 1) * 100 - performance.now());
  }

  // Every item done: those whose claim's answer was lost wait out their lease first.
  await waitFor('every item done', async () => {
    const { rows: [{ n }] } = await db.query(
      "SELECT count(*)::int AS n FROM workfence.items WHERE queue = $1 AND state = 'done'", [queue]);
    return n === enqueued;
  }, LEASE * 4 + 30);
  for (const child of children) child.kill('SIGTERM');
  await Promise.all(exits);

  // Per item, its runs (by epoch) and what the runner logged for each token.
  const runs = new Map(); // id -> [{epoch, returned}]
  const logs = new Map(); // `${id}:${epoch}` -> [message]
  for (const line of readFileSync(events, 'utf8').split('\n').filter(Boolean)) {
    const e = JSON.parse(line);
    if (e.ev === 'run') {
      if (!runs.has(e.id)) runs.set(e.id, []);
      runs.get(e.id).push({ epoch: BigInt(e.epoch), returned: false });
    } else if (e.ev === 'return') {
      runs.get(e.id).find((r) => r.epoch === BigInt(e.epoch)).returned = true;
    } else {
      const m = /id=(\d+)(?: epoch=(\d+))?/.exec(e.message);
      if (!m) continue;
      const key = m[2] ? `${m[1]}:${m[2]}` : `${m[1]}:?`;
      if (!logs.has(key)) logs.set(key, []);
      logs.get(key).push(e.message);
    }
  }
  const figures = {
    seconds: SECONDS, kills, items: enqueued, runs: 0, itemsRunTwice: 0,
    rerunsAfterLostSettle: 0, rerunsAfterLostLease: 0, resends: 0, settlesLandedOnResend: 0,
    settlesAbandoned: 0,
  };
  for (const [id, list] of runs) {
    list.sort((a, b) => (a.epoch < b.epoch ? -1 : 1));
    figures.runs += list.length;
    if (list.length > 1) figures.itemsRunTwice += 1;
    for (const run of list.slice(0, -1)) {
      // A run followed by another: why did its token not settle the item?
      const said = logs.get(`${id}:${run.epoch}`) ?? [];
      if (run.returned && said.some((m) => /^settle /.test(m))) figures.rerunsAfterLostSettle += 1;
      else figures.rerunsAfterLostLease += 1;
    }
  }
  for (const [key, said] of logs) {
    const resent = said.filter((m) => /^resend /.test(m)).length;
    figures.resends += resent;
    if (resent > 0 && said.some((m) => /^(finish .* ok|fail |release )/.test(m))) figures.settlesLandedOnResend += 1;
    if (said.some((m) => /^settle /.test(m))) figures.settlesAbandoned += 1;
    void key;
  }
  const { rows: [db_] } = await db.query(
    `SELECT count(*)::int AS done, count(*) FILTER (WHERE attempts > 1)::int AS attempted_again
       FROM workfence.items WHERE queue = $1 AND state = 'done'`, [queue]);
  const summary = `settle chaos (${process.env.WORKFENCE_CHAOS_LIB ? `library ${process.env.WORKFENCE_CHAOS_LIB}` : 'this library'}): `
    + `${JSON.stringify({ ...figures, done: db_.done, doneAfterMoreThanOneAttempt: db_.attempted_again })}`;
  t.diagnostic(summary);
  console.log(summary);

  assert.equal(db_.done, enqueued, 'every item done once');
  assert.ok(kills >= SECONDS * KILLS_PER_SECOND * 0.8, `the chaos happened: ${kills} terminations`);
  assert.equal(figures.rerunsAfterLostSettle, 0, 'no job ran twice because its settle was lost');
});
