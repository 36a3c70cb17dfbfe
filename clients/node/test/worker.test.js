// Integration tests of the worker runner against the cluster of WORKFENCE_TEST_DSN
// (scripts/client-tests.sh): what a user relies on, each on a fresh queue.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';

import pg from 'pg';

import {
  Cancelled, LeaseLost, NotPermitted, Worker, connectionConfig, enqueue, item, limit,
} from '../index.js';
import { connect, freshQueue, gate, itemRow, recordingLogger, testDsn, waitFor } from './helpers.js';

let db;
let table;
before(async () => {
  db = await connect();
  // This file's own business table (not examples.results).
  table = `workfence_node_test.results_${randomBytes(4).toString('hex')}`;
  await db.query('CREATE SCHEMA IF NOT EXISTS workfence_node_test');
  await db.query(`CREATE TABLE ${table} (item_id bigint, epoch bigint, output bigint)`);
});
// Every worker a test made is stopped at the end, also after a failed assertion (otherwise it
// would keep claiming and the test process would never exit).
const workers = new Set();
after(async () => {
  await Promise.allSettled([...workers].map((w) => w.stop()));
  await db?.query(`DROP TABLE IF EXISTS ${table}`);
  await db?.end();
});

/** A worker on `queue` with a recording logger; signals left alone (the test runner's own). */
function worker(queue, handler, options = {}) {
  const logger = recordingLogger();
  const w = new Worker({
    dsn: testDsn(), queue, handler, logger, handleSignals: false, pollWait: 1, owner: 'node-tests',
    shutdownGrace: 1, ...options,
  });
  workers.add(w);
  return { w, logger };
}

/** Runs `w` and returns its run() promise, failing the test if it rejects unexpectedly later. */
function start(w) {
  const running = w.run();
  running.catch(() => {}); // awaited by the test; keep an early rejection from being unhandled
  return running;
}

async function states(queue) {
  const { rows } = await db.query(
    `SELECT state::text, count(*)::int AS n FROM workfence.items WHERE queue = $1 GROUP BY 1 ORDER BY 1`, [queue]);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

test('a handler\'s return value finishes the item, with the event lines of clients/README.md', async () => {
  const queue = freshQueue();
  const ids = [];
  for (let n = 1; n <= 5; n += 1) ids.push((await enqueue(db, queue, { n })).id);
  const seen = [];
  const { w, logger } = worker(queue, async (job) => {
    seen.push({ id: job.id, attempt: job.attempt, queue: job.queue, owner: job.owner, aborted: job.signal.aborted });
    assert.match(job.epoch, /^\d+$/);
    assert.ok(job.leaseUntil instanceof Date);
    return { square: job.payload.n ** 2 };
  }, { batchSize: 2 });
  const running = start(w);
  await waitFor('5 items done', async () => (await states(queue)).done === 5);
  await w.stop();
  await running;
  assert.deepEqual(seen.map((s) => s.id).sort(), [...ids].sort());
  assert.ok(seen.every((s) => s.attempt === 1 && s.queue === queue && s.owner === 'node-tests' && !s.aborted));
  for (const [i, id] of ids.entries()) {
    const row = await itemRow(db, id);
    assert.deepEqual(row.result, { square: (i + 1) ** 2 });
    assert.ok(logger.has(new RegExp(`^claim id=${id} epoch=${row.epoch} attempt=1$`)));
    assert.ok(logger.has(new RegExp(`^finish id=${id} epoch=${row.epoch} ok$`)));
  }
  assert.equal(logger.messages().at(-1), 'exit');
  assert.deepEqual(logger.lines.filter((l) => l.level === 'error'), []);
});

test('the fenced transaction commits the handler\'s writes together with the finish', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, { n: 6 });
  const { w } = worker(queue, (job) => job.transaction(async (client) => {
    await client.query(`INSERT INTO ${table} VALUES ($1, $2, $3)`, [job.id, job.epoch, job.payload.n ** 2]);
    // Inside the transaction the item is still claimed: the finish comes just before COMMIT.
    const { rows: [{ state }] } = await client.query(
      'SELECT state::text FROM workfence.items WHERE id = $1', [job.id]);
    assert.equal(state, 'claimed');
    return { output: 36 };
  }));
  const running = start(w);
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await w.stop();
  await running;
  const row = await itemRow(db, id);
  assert.deepEqual(row.result, { output: 36 });
  const { rows } = await db.query(`SELECT epoch::text, output::int FROM ${table} WHERE item_id = $1`, [id]);
  assert.deepEqual(rows, [{ epoch: row.epoch, output: 36 }]);
});

test('a transaction whose token is no longer current writes nothing and abandons the item', async () => {
  const queue = freshQueue();
  const { id, key } = await enqueue(db, queue, {});
  const letGo = gate();
  let outcome;
  const { w, logger } = worker(queue, async (job) => {
    job.stopRenewing();
    await letGo.promise;
    try {
      return await job.transaction(async (client) => {
        await client.query(`INSERT INTO ${table} VALUES ($1, $2, 0)`, [job.id, job.epoch]);
        return 'written';
      });
    } catch (err) {
      outcome = err;
      throw err;
    }
  });
  const running = start(w);
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  // An operator cancels the item: the token dies, and no notification comes (only a re-claim sends
  // one), so it is work_assert that refuses.
  const { rows: [{ ok }] } = await db.query('SELECT workfence.work_cancel($1, $2) AS ok', [queue, key]);
  assert.equal(ok, true);
  letGo.open();
  await waitFor('the refusal', () => logger.has(new RegExp(`^refused id=${id} \\(lease lost\\)$`)));
  await w.stop();
  await running;
  assert.ok(outcome instanceof LeaseLost, `transaction() threw ${outcome}`);
  assert.equal(outcome.code, '55000');
  assert.match(outcome.detail, /cancelled/);
  const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${table} WHERE item_id = $1`, [id]);
  assert.equal(rows[0].n, 0, 'the business write was rolled back');
  assert.equal((await itemRow(db, id)).state, 'cancelled');
  assert.ok(!logger.has(/^(finish|fail|release) /), logger.messages().join('\n'));
});

test('a handler that throws fails the item with its type, message and stack, and the retry policy\'s delay', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {}, { maxAttempts: 2 });
  const policy = [];
  const { w, logger } = worker(queue, async function throwingHandler(job) {
    if (job.attempt === 2) job.payload.missing.call(); // a TypeError of the runtime's own
    throw new Error(`boom on attempt ${job.attempt}`);
  }, {
    retry: (attempt, error) => { policy.push([attempt, error.message]); return 0.2; },
  });
  const running = start(w);
  await waitFor('the item dead-lettered', async () => (await itemRow(db, id)).state === 'failed');
  await w.stop();
  await running;
  assert.deepEqual(policy, [[1, 'boom on attempt 1'],
    [2, "Cannot read properties of undefined (reading 'call')"]]);
  const row = await itemRow(db, id);
  assert.equal(row.attempts, 2);
  // The stored text: `<type>: <message>`, then the stack's frames (the handler's own first).
  const [first, second] = row.errors.map((e) => e.error.split('\n'));
  assert.equal(first[0], 'Error: boom on attempt 1');
  assert.equal(second[0], "TypeError: Cannot read properties of undefined (reading 'call')");
  for (const lines of [first, second]) {
    assert.match(lines[1], /^ {4}at (Worker\.)?throwingHandler (\[as _handler\] )?\(file:.*worker\.test\.js:\d+:\d+\)$/, lines.join('\n'));
    assert.ok(lines.slice(1).every((l) => /^ {4}at /.test(l)), lines.join('\n'));
  }
  // The log line has the first line only.
  assert.ok(logger.has(new RegExp(`^fail id=${id} epoch=\\d+ error=Error: boom on attempt 1$`)), logger.messages().join('\n'));
  assert.ok(logger.has(new RegExp(`^fail id=${id} epoch=\\d+ error=TypeError: Cannot read properties of undefined \\(reading 'call'\\)$`)));
});

test('the retry policy\'s delay is passed to work_fail (the item waits that long)', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {}, { maxAttempts: 5 });
  const { w } = worker(queue, async () => { throw new Error('later'); }, { retry: () => 3600 });
  const running = start(w);
  await waitFor('the first failure', async () => {
    const row = await itemRow(db, id);
    return row.state === 'pending' && row.attempts === 1;
  });
  await w.stop();
  await running;
  const { rows: [{ wait }] } = await db.query(
    'SELECT extract(epoch FROM run_at - clock_timestamp()) AS wait FROM workfence.work_item($1::bigint)', [id]);
  assert.ok(wait > 3500 && wait <= 3600, `run_at is ${wait} s away`);
});

test('the heartbeat renews a running job\'s lease past its first one', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  const letGo = gate();
  const { w, logger } = worker(queue, async () => { await letGo.promise; return 'ok'; }, { lease: 1.5 });
  const running = start(w);
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  const first = (await itemRow(db, id)).lease_until;
  // Past the first lease, the item is still held and its lease_until has moved on.
  await waitFor('two renews', () => logger.lines.filter((l) => l.message === `renew id=${id} ok`).length >= 2);
  const row = await itemRow(db, id);
  assert.ok(row.lease_until > first, 'lease_until moved');
  assert.equal(row.lapsed, false);
  assert.ok(logger.lines.find((l) => l.message === `renew id=${id} ok`).level === 'debug');
  letGo.open();
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await w.stop();
  await running;
});

test('a refused renew aborts the job\'s signal with LeaseLost and sends nothing for it', async () => {
  const queue = freshQueue();
  const { id, key } = await enqueue(db, queue, {});
  let reason;
  const { w, logger } = worker(queue, async (job) => {
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
    reason = job.signal.reason;
    return 'ignored';
  }, { lease: 1.2 });
  const running = start(w);
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  await db.query('SELECT workfence.work_cancel($1, $2)', [queue, key]);
  await waitFor('the abort', () => reason !== undefined);
  await w.stop();
  await running;
  assert.ok(reason instanceof LeaseLost);
  const lines = logger.lines.filter((l) => l.message.includes(`id=${id}`));
  assert.deepEqual(lines.slice(1).map((l) => [l.level, l.message]), [
    ['warn', `renew id=${id} refused`],
    ['warn', `refused id=${id} (lease lost)`],
  ]);
  assert.equal((await itemRow(db, id)).state, 'cancelled');
});

test('work_lease_lost naming the held token stops the job at once; the item is left to its new holder', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  let reason;
  const { w, logger } = worker(queue, async (job) => {
    job.stopRenewing();
    try {
      await sleep(60_000, undefined, { signal: job.signal });
    } catch (err) {
      reason = job.signal.reason;
      throw err;
    }
  }, { lease: 1 });
  const running = start(w);
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  const old = await itemRow(db, id);
  await waitFor('the lease to lapse on the server\'s clock', async () => (await itemRow(db, id)).lapsed);
  // Another worker with the SAME owner name claims it anew: only the epoch tells them apart.
  const { rows: [ours] } = await db.query(
    "SELECT epoch::text AS epoch FROM workfence.work_claim($1, 'node-tests', interval '1 minute')", [queue]);
  assert.ok(BigInt(ours.epoch) > BigInt(old.epoch));
  await waitFor('the job stopped', () => reason !== undefined, 5);
  assert.ok(reason instanceof LeaseLost);
  await waitFor('the refused line', () => logger.has(new RegExp(`^refused id=${id} \\(lease lost\\)$`)));
  assert.deepEqual(logger.lines.filter((l) => l.message.startsWith('lease lost')),
    [{ level: 'warn', message: `lease lost (notified) id=${id} epoch=${old.epoch}` }]);
  await w.stop();
  await running;
  const row = await itemRow(db, id);
  assert.equal(row.state, 'claimed');
  assert.equal(row.epoch, ours.epoch, 'still the new holder\'s');
  assert.ok(!logger.has(new RegExp(`^(finish|fail|release) id=${id} `)), logger.messages().join('\n'));
});

test('a notification for another epoch of the same item is ignored', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  const letGo = gate();
  const { w, logger } = worker(queue, async (job) => { await letGo.promise; return job.signal.aborted; });
  const running = start(w);
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  const { epoch } = await itemRow(db, id);
  // A sentinel notification after the forged one: once it is heard, the forged one was too.
  await db.query("SELECT pg_notify('work_lease_lost', $1)",
    [JSON.stringify({ id: Number(id), epoch: Number(epoch) - 1, owner: 'node-tests', queue, key: 'x' })]);
  await db.query("SELECT pg_notify('work_lease_lost', 'sentinel')");
  await waitFor('the sentinel', () => logger.has(/unreadable work_lease_lost payload="sentinel"/));
  letGo.open();
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await w.stop();
  await running;
  assert.deepEqual((await itemRow(db, id)).result, false, 'the job was not aborted');
  assert.ok(!logger.has(/lease lost/));
});

test('shutdown releases buffered items and lets a running handler finish within the grace', async () => {
  const queue = freshQueue();
  const ids = [];
  for (let n = 0; n < 3; n += 1) ids.push((await enqueue(db, queue, { n }, { key: `k${n}`, priority: n })).id);
  const letGo = gate();
  const { w, logger } = worker(queue, async (job) => { await letGo.promise; return job.signal.aborted; },
    { batchSize: 3, shutdownGrace: 30 });
  const running = start(w);
  await waitFor('the first job running', () => logger.messages().filter((m) => m.startsWith('claim ')).length === 3);
  const stopped = w.stop();
  // The buffered two are released at once, while the running one still runs.
  await waitFor('two releases', () => logger.messages().filter((m) => m.startsWith('release ')).length === 2);
  assert.deepEqual(await states(queue), { claimed: 1, pending: 2 });
  letGo.open();
  await stopped;
  await running;
  assert.deepEqual(await states(queue), { done: 1, pending: 2 });
  const done = await itemRow(db, ids[0]);
  assert.equal(done.result, false, 'finished within the grace, its signal not aborted');
  for (const id of ids.slice(1)) assert.equal((await itemRow(db, id)).attempts, 0, 'the attempt is given back');
  assert.equal(logger.messages().at(-1), 'exit');
});

test('after the grace the handler\'s signal aborts with Cancelled and its item is released', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  let reason;
  const { w, logger } = worker(queue, async (job) => {
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
    reason = job.signal.reason;
    return 'too late';
  }, { shutdownGrace: 0.2 });
  const running = start(w);
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  await w.stop();
  await running;
  assert.ok(reason instanceof Cancelled);
  const row = await itemRow(db, id);
  assert.equal(row.state, 'pending');
  assert.equal(row.attempts, 0);
  assert.ok(logger.has(new RegExp(`^release id=${id} epoch=${(await itemRow(db, id)).epoch}$`)));
  assert.ok(!logger.has(/^finish /), 'its late return is not sent');
});

test('a handler inside its transaction at the end of the grace is waited for, then released if it throws', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  let inside = false;
  const { w, logger } = worker(queue, (job) => job.transaction(async (client) => {
    await client.query(`INSERT INTO ${table} VALUES ($1, $2, 1)`, [job.id, job.epoch]);
    inside = true;
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
    throw job.signal.reason; // gives up: the transaction rolls back
  }), { shutdownGrace: 0.2 });
  const running = start(w);
  await waitFor('the handler in its transaction', () => inside);
  await w.stop();
  await running;
  const row = await itemRow(db, id);
  assert.equal(row.state, 'pending', 'released, not failed');
  assert.equal(row.attempts, 0);
  assert.deepEqual(row.errors, []);
  assert.ok(logger.has(new RegExp(`^release id=${id} epoch=\\d+$`)), logger.messages().join('\n'));
  const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${table} WHERE item_id = $1`, [id]);
  assert.equal(rows[0].n, 0, 'the write was rolled back');
});

test('stop() cuts a long poll short', async () => {
  const queue = freshQueue();
  const { w, logger } = worker(queue, async () => null,
    { pollWait: 600, dsn: `${testDsn()} application_name=${queue}` });
  const running = start(w);
  await waitFor('the long poll waiting', async () => {
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity
        WHERE application_name = $1 AND state = 'active' AND query LIKE '%work_claim%'`, [queue]);
    return rows[0].n === 1;
  });
  const began = Date.now();
  await w.stop();
  await running;
  assert.ok(Date.now() - began < 10_000, 'the 600 s poll did not run out');
  assert.deepEqual(logger.messages(), ['exit']);
});

test('never more than concurrency - 1 + batchSize items are held, and concurrency handlers run', async () => {
  const queue = freshQueue();
  for (let n = 0; n < 12; n += 1) await enqueue(db, queue, { n });
  let active = 0;
  let most = 0;
  let heldMost = 0;
  const gates = [];
  const { w } = worker(queue, async () => {
    active += 1;
    most = Math.max(most, active);
    const g = gate();
    gates.push(g);
    await g.promise;
    active -= 1;
    return null;
  }, { concurrency: 2, batchSize: 3 });
  const running = start(w);
  const claimedNow = async () => (await states(queue)).claimed ?? 0;
  for (let opened = 0; opened < 12; opened += 1) {
    await waitFor('a handler waiting', () => gates.length > opened);
    heldMost = Math.max(heldMost, await claimedNow());
    gates[opened].open();
  }
  await waitFor('12 items done', async () => (await states(queue)).done === 12);
  await w.stop();
  await running;
  assert.equal(most, 2, 'two handlers ran at once');
  assert.ok(heldMost <= 4 && heldMost >= 3, `held at most ${heldMost}`);
});

test('two items of one group are handed to the worker one at a time, in order, the second after the first finished', async () => {
  const queue = freshQueue();
  const first = await enqueue(db, queue, { n: 1 }, { groupKey: 'customer-42' });
  const second = await enqueue(db, queue, { n: 2 }, { groupKey: 'customer-42' });
  const events = [];
  let inGroup = 0;
  let mostInGroup = 0;
  const firstRunning = gate();
  const letFirstGo = gate();
  const { w } = worker(queue, async (job) => {
    if (job.payload.n === undefined) return null; // the ungrouped probe below
    inGroup += 1;
    mostInGroup = Math.max(mostInGroup, inGroup);
    events.push(`start ${job.payload.n}`);
    if (job.id === first.id) {
      firstRunning.open();
      await letFirstGo.promise;
    }
    events.push(`end ${job.payload.n}`);
    inGroup -= 1;
    return null;
  }, { concurrency: 4 });
  const running = start(w);
  await firstRunning.promise;
  // An ungrouped item enqueued after the second: the worker (room for three more) claims it, and
  // a claim handing it out would have handed out the second first (claim order), had its group
  // not held it back.
  const probe = await enqueue(db, queue, { probe: true });
  await waitFor('the ungrouped item done meanwhile', async () => (await itemRow(db, probe.id)).state === 'done');
  const waiting = await itemRow(db, second.id);
  assert.deepEqual([waiting.state, waiting.attempts], ['pending', 0], 'the second item waits for the first');
  letFirstGo.open();
  await waitFor('the second item done', async () => (await itemRow(db, second.id)).state === 'done');
  await w.stop();
  await running;
  assert.deepEqual(events, ['start 1', 'end 1', 'start 2', 'end 2']);
  assert.equal(mostInGroup, 1);
  const [a, b] = [await item(db, first.id), await item(db, second.id)];
  assert.ok(b.claimed_at >= a.finished_at, 'the server claimed the second after the first finished');
});

test('a limit set with limit() caps a worker of concurrency 4 at one job at a time; lifted, jobs overlap', async () => {
  const queue = freshQueue();
  await limit(db, queue, { concurrency: 1 });
  for (let i = 0; i < 4; i += 1) await enqueue(db, queue, { i });
  let active = 0;
  let most = 0;
  let pairArrived = 0;
  const pairTogether = gate();
  const { w } = worker(queue, async (job) => {
    active += 1;
    most = Math.max(most, active);
    try {
      if (job.payload.pair) {
        // After the limit is lifted: each of two items waits for the other to run.
        pairArrived += 1;
        if (pairArrived === 2) pairTogether.open();
        await pairTogether.promise;
      } else {
        await sleep(200); // holds the job, so that others would overlap it
      }
    } finally {
      active -= 1;
    }
    return null;
  }, { concurrency: 4 });
  const running = start(w);
  await waitFor('4 items done', async () => (await states(queue)).done === 4, 30);
  assert.equal(most, 1, 'one job at a time under concurrency 1');
  await limit(db, queue);
  for (let i = 0; i < 2; i += 1) await enqueue(db, queue, { pair: true });
  await waitFor('two items running at once', async () => (await states(queue)).done === 6, 30);
  await w.stop();
  await running;
  assert.equal(most, 2);
});

test('a result that is not JSON (a BigInt, a cycle) fails the item with the serialisation error', async () => {
  const queue = freshQueue();
  const circular = { a: 1 };
  circular.self = circular;
  const big = await enqueue(db, queue, { kind: 'big' }, { maxAttempts: 1, priority: 1 });
  const cyc = await enqueue(db, queue, { kind: 'cycle' }, { maxAttempts: 1, priority: 2 });
  const { w, logger } = worker(queue, async (job) => (job.payload.kind === 'big' ? { n: 10n } : circular));
  const running = start(w);
  await waitFor('both items failed', async () => (await states(queue)).failed === 2);
  await w.stop();
  await running;
  for (const { id } of [big, cyc]) {
    const row = await itemRow(db, id);
    assert.equal(row.state, 'failed');
    assert.equal(row.errors.length, 1);
    assert.match(row.errors[0].error, /^Error: result is not JSON: /);
    assert.ok(logger.has(new RegExp(`^fail id=${id} epoch=${row.epoch} error=Error: result is not JSON: `)),
      logger.messages().join('\n'));
  }
  assert.match((await itemRow(db, big.id)).errors[0].error, /BigInt/);
  assert.match((await itemRow(db, cyc.id)).errors[0].error, /circular/i);
  assert.deepEqual(logger.lines.filter((l) => l.level === 'error'), []);
});

test('a transaction whose result is not JSON rolls back its writes and fails the item', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {}, { maxAttempts: 1 });
  let thrown;
  const { w, logger } = worker(queue, async (job) => {
    try {
      return await job.transaction(async (client) => {
        await client.query(`INSERT INTO ${table} VALUES ($1, $2, 5)`, [job.id, job.epoch]);
        return { n: 10n };
      });
    } catch (err) {
      thrown = err;
      throw err;
    }
  });
  const running = start(w);
  await waitFor('the item failed', async () => (await itemRow(db, id)).state === 'failed');
  await w.stop();
  await running;
  assert.match(thrown?.message, /^result is not JSON: .*BigInt/);
  const row = await itemRow(db, id);
  assert.match(row.errors[0].error, /^Error: result is not JSON: .*BigInt/);
  const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${table} WHERE item_id = $1`, [id]);
  assert.equal(rows[0].n, 0, 'the write was rolled back');
  assert.ok(!logger.has(/^error /), logger.messages().join('\n'));
});

test('a database without the extension: the claim\'s error hints at CREATE EXTENSION, and exit error= is logged', async () => {
  const name = `workfence_node_noext_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE DATABASE ${name}`);
  try {
    const dsn = { ...connectionConfig(testDsn()), database: name };
    // No schema workfence: 3F000.
    const first = worker(freshQueue(), async () => null, { dsn });
    const err = await first.w.run().then(() => null, (e) => e);
    assert.equal(err?.code, '3F000', String(err));
    assert.match(err.hint, /CREATE EXTENSION pg_workfence/);
    assert.ok(first.logger.has(/^error code=3F000 .*CREATE EXTENSION pg_workfence/), first.logger.messages().join('\n'));
    assert.deepEqual(first.logger.lines.at(-1), { level: 'error', message: `exit error=${err.message}` });
    // A schema workfence without the function: 42883.
    const other = new pg.Client(dsn);
    await other.connect();
    await other.query('CREATE SCHEMA workfence');
    await other.end();
    const second = worker(freshQueue(), async () => null, { dsn });
    const err2 = await second.w.run().then(() => null, (e) => e);
    assert.equal(err2?.code, '42883', String(err2));
    assert.match(err2.hint, /CREATE EXTENSION pg_workfence/);
    assert.deepEqual(second.logger.lines.at(-1), { level: 'error', message: `exit error=${err2.message}` });
  } finally {
    await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
});

test('with handleSignals, SIGTERM stops run() and the handlers are removed afterwards', async () => {
  const queue = freshQueue();
  const before = process.listenerCount('SIGTERM');
  const beforeInt = process.listenerCount('SIGINT');
  const { w, logger } = worker(queue, async () => null, { handleSignals: true });
  const running = start(w);
  await waitFor('the handlers installed', () => process.listenerCount('SIGTERM') === before + 1
    && process.listenerCount('SIGINT') === beforeInt + 1);
  process.emit('SIGTERM', 'SIGTERM');
  await running;
  assert.equal(process.listenerCount('SIGTERM'), before);
  assert.equal(process.listenerCount('SIGINT'), beforeInt);
  assert.equal(logger.messages().at(-1), 'exit');
});

// ------------------------------------------------------------- when the loop itself fails

/** Backend pids of the worker whose connections carry application_name `name`. */
async function backends(name) {
  const { rows } = await db.query(
    `SELECT pid FROM pg_catalog.pg_stat_activity
      WHERE application_name = $1 AND pid <> pg_catalog.pg_backend_pid()`, [name]);
  return rows.map((r) => r.pid);
}

/** Whether the worker named `name` waits in its long poll. */
async function polling(name) {
  const { rows } = await db.query(
    `SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity
      WHERE application_name = $1 AND state = 'active' AND query LIKE '%work_claim%'`, [name]);
  return rows[0].n === 1;
}

/** What a server restart does to every session of the worker: terminate them (57P01). */
async function terminate(name) {
  const pids = await backends(name);
  assert.ok(pids.length >= 1, 'the worker has connections to terminate');
  await db.query('SELECT pg_catalog.pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);
  return pids;
}

test('sessions terminated in the long poll (57P01): the runner reconnects and works items enqueued afterwards', async () => {
  const queue = freshQueue();
  const done = [];
  const { w, logger } = worker(queue, async (job) => { done.push(job.payload.n); return { n: job.payload.n }; },
    { pollWait: 600, dsn: `${testDsn()} application_name=${queue}` });
  const running = start(w);
  let settled = false;
  running.then(() => { settled = true; }, () => { settled = true; });
  await waitFor('the long poll waiting', () => polling(queue));
  const killed = await terminate(queue);
  await waitFor('the claim connection replaced', async () => logger.has(/^reconnect claim in 0\.5s error=/)
    && (await backends(queue)).some((pid) => !killed.includes(pid)) && await polling(queue));
  await waitFor('the heartbeat reconnected', () => logger.has(/^reconnect heartbeat in 0\.5s error=/));
  const id = (await enqueue(db, queue, { n: 3 })).id;
  await waitFor('the item enqueued afterwards done', async () => (await itemRow(db, id)).state === 'done');
  assert.deepEqual(done, [3]);
  assert.equal(settled, false, 'run() is still running');
  assert.ok(logger.lines.filter((l) => /^reconnect /.test(l.message)).every((l) => l.level === 'warn'));
  await w.stop();
  await running; // resolves: no rejection
  assert.equal(logger.messages().at(-1), 'exit');
  assert.ok(!logger.has(/^exit error=/), logger.messages().join('\n'));
});

test('sessions terminated while a job runs: the job\'s item is still done once, later items too, run() does not reject', async () => {
  const queue = freshQueue();
  const first = gate();
  let started = 0;
  const { w, logger } = worker(queue, async (job) => {
    started += 1;
    if (job.payload.n === 1 && job.attempt === 1) await first.promise;
    return { n: job.payload.n };
  }, { lease: 2, dsn: `${testDsn()} application_name=${queue}` });
  const running = start(w);
  const id1 = (await enqueue(db, queue, { n: 1 })).id;
  await waitFor('the job running', () => started === 1);
  await terminate(queue);
  // The job finishes after every session it had was lost: its finish goes to a new connection,
  // or (if it was sent on the dead one) the item lapses and is claimed again.
  await waitFor('the heartbeat reconnecting', () => logger.has(/^reconnect heartbeat in /));
  first.open();
  await waitFor('the first item done', async () => (await itemRow(db, id1)).state === 'done', 20);
  const id2 = (await enqueue(db, queue, { n: 2 })).id;
  await waitFor('the item enqueued afterwards done', async () => (await itemRow(db, id2)).state === 'done', 20);
  const row1 = await itemRow(db, id1);
  assert.deepEqual(row1.result, { n: 1 });
  await w.stop();
  await running;
  assert.equal(logger.messages().at(-1), 'exit');
});

test('stop() during a reconnect backoff returns at once, not after the backoff', async () => {
  const queue = freshQueue();
  const { w, logger } = worker(queue, async () => null,
    { pollWait: 600, dsn: `${testDsn()} application_name=${queue}` });
  const running = start(w);
  // No claim succeeds in between (the long poll never returns), so each loss doubles the delay:
  // 0.5, 1, 2, 4, then 8 s.
  for (const delay of ['0\\.5', '1', '2', '4', '8']) {
    await waitFor('the long poll waiting', () => polling(queue), 20);
    await terminate(queue);
    await waitFor(`reconnect claim in ${delay}s`, () => logger.has(new RegExp(`^reconnect claim in ${delay}s error=`)), 20);
  }
  const began = Date.now();
  await w.stop();
  await running;
  assert.ok(Date.now() - began < 4000, `stop() took ${Date.now() - began} ms during an 8 s backoff`);
  assert.equal(logger.messages().at(-1), 'exit');
});

test('a read-only session (25006, a standby during failover) is retried, not fatal; stop() ends run() cleanly', async () => {
  // A read-only session: work_claim's update is refused with 25006, as on a hot standby.
  const dsn = { ...connectionConfig(testDsn()), options: '-c default_transaction_read_only=on' };
  const { w, logger } = worker(freshQueue(), async () => null, { dsn });
  const running = start(w);
  await waitFor('two retries', () => logger.lines.filter(
    (l) => l.level === 'warn' && /^reconnect claim in (0\.5|1)s error=.*\(25006\)$/.test(l.message)).length === 2);
  await w.stop();
  await running;
  assert.equal(logger.messages().at(-1), 'exit');
  assert.ok(!logger.has(/^exit error=/));
});

test('an error retrying cannot fix (42501, no grant) still ends run() with the named error and exit error=', async () => {
  const role = `workfence_node_nogrant_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE ROLE ${role} NOLOGIN`);
  try {
    // The session acts as a role without any right on the schema workfence.
    const dsn = { ...connectionConfig(testDsn()), options: `-c role=${role}` };
    const { w, logger } = worker(freshQueue(), async () => null, { dsn });
    const err = await w.run().then(() => null, (e) => e);
    assert.ok(err instanceof NotPermitted, String(err));
    assert.equal(err.code, '42501');
    assert.ok(logger.has(/^error code=42501 /), logger.messages().join('\n'));
    assert.ok(!logger.has(/^reconnect /), 'not retried');
    assert.deepEqual(logger.lines.at(-1), { level: 'error', message: `exit error=${err.message}` });
  } finally {
    await db.query(`DROP ROLE IF EXISTS ${role}`);
  }
});
