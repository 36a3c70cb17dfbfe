// Integration tests of workflows (issue 37, from 0.12.0): enqueue's after and onParentFailure,
// job.parentResults() and workflow(): a fan-in whose step reads both parents' results, a failed
// parent cancelling its waiting descendants, a step that runs anyway and sees the failure, a stale
// token reading nothing, the errors, and a database before workflows. Against the cluster of
// WORKFENCE_TEST_DSN.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';

import pg from 'pg';

import {
  InvalidArgument, LeaseLost, NullArgument, UnknownParent, Worker, awaitResult, cancel,
  connectionConfig, enqueue, item, workflow,
} from '../index.js';
import { connect, freshQueue, gate, recordingLogger, testDsn, waitFor } from './helpers.js';

let db;
let waiter;
before(async () => {
  db = await connect();
  waiter = new pg.Pool({ ...connectionConfig(testDsn()), max: 2 });
});
const workers = new Set();
after(async () => {
  await Promise.allSettled([...workers].map((w) => w.stop()));
  await waiter?.end();
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
  const running = w.run();
  running.catch(() => {}); // awaited by the test; keep an early rejection from being unhandled
  return { w, logger, running };
}

/** Stops the worker and waits for run() to end. */
async function stop({ w, running }) {
  await w.stop();
  await running;
}

/** The item's outcome once it is done, failed or cancelled (awaitResult on a pool of its own). */
async function finished(queue, key) {
  const outcome = await awaitResult(waiter, queue, key, { timeout: 20 });
  assert.ok(outcome && ['done', 'failed', 'cancelled'].includes(outcome.state),
    `${key} not finished: ${JSON.stringify(outcome)}`);
  return outcome;
}

/** The rows of workflow() as sorted `id depth parents` strings. */
function graph(rows) {
  return rows.map((r) => `${r.id} ${r.depth} [${[...r.parents].sort().join(',')}]`).sort();
}

test('a fan-in child runs after both parents and reads their results with job.parentResults()', async () => {
  const queue = freshQueue();
  const p1 = await enqueue(db, queue, { n: 1 }, { key: 'p1' });
  const p2 = await enqueue(db, queue, { n: 2 }, { key: 'p2' });
  // ids as enqueue returns them (strings), or as bigints and numbers.
  const child = await enqueue(db, queue, {}, { key: 'child', after: [p1.id, BigInt(p2.id)] });
  assert.equal((await item(db, child.id)).state, 'waiting');
  // The graph, read from either end.
  assert.deepEqual(graph(await workflow(db, child.id)), graph([
    { id: child.id, depth: 0, parents: [p1.id, p2.id] },
    { id: p1.id, depth: -1, parents: [] },
    { id: p2.id, depth: -1, parents: [] },
  ]));
  const aroundP1 = await workflow(db, Number(p1.id));
  assert.deepEqual(aroundP1.map((r) => r.depth), [0, 1], 'nearest first');
  assert.deepEqual({ ...aroundP1[1], parents: [...aroundP1[1].parents].sort() }, {
    id: child.id, queue, key: 'child', state: 'waiting', depth: 1, parents: [p1.id, p2.id].sort(),
  });
  assert.deepEqual(await workflow(db, '4611686018427387904'), []);

  const ran = [];
  const seen = {};
  const w = worker(queue, async (job) => {
    ran.push(job.key);
    seen[job.key] = await job.parentResults();
    if (job.key === 'child') {
      return { sum: Object.values(seen.child).reduce((sum, r) => sum + r.doubled, 0) };
    }
    return { doubled: job.payload.n * 2 };
  }, { concurrency: 2 });
  const outcome = await finished(queue, 'child');
  await stop(w);
  assert.deepEqual(outcome, { state: 'done', result: { sum: 6 }, lastError: null });
  assert.deepEqual([ran.slice(0, 2).sort(), ran.slice(2)], [['p1', 'p2'], ['child']]);
  assert.deepEqual(seen, {
    p1: {},
    p2: {},
    child: { [p1.id]: { doubled: 2 }, [p2.id]: { doubled: 4 } },
  });
  assert.deepEqual(new Set((await workflow(db, child.id)).map((r) => r.state)), new Set(['done']));
});

test('a failed parent (maxAttempts 1) cancels its waiting descendants by default', async () => {
  const queue = freshQueue();
  const parent = await enqueue(db, queue, {}, { key: 'parent', maxAttempts: 1 });
  const child = await enqueue(db, queue, {}, { key: 'child', after: [parent.id] });
  const grandchild = await enqueue(db, queue, {}, { key: 'grandchild', after: [child.id] });
  const ran = [];
  const w = worker(queue, async (job) => {
    ran.push(job.key);
    throw new Error('boom');
  });
  const failed = await finished(queue, 'parent');
  const cancelled = await finished(queue, 'child');
  const also = await finished(queue, 'grandchild');
  await stop(w);
  assert.equal(failed.state, 'failed');
  assert.match(failed.lastError, /^Error: boom\n/);
  assert.deepEqual(cancelled, { state: 'cancelled', result: null, lastError: `parent ${parent.id} ended failed` });
  assert.deepEqual(also, { state: 'cancelled', result: null, lastError: `parent ${child.id} ended cancelled` });
  assert.deepEqual(ran, ['parent'], 'no descendant ran');
  assert.deepEqual(graph(await workflow(db, grandchild.id)), graph([
    { id: grandchild.id, depth: 0, parents: [child.id] },
    { id: child.id, depth: -1, parents: [parent.id] },
    { id: parent.id, depth: -2, parents: [] },
  ]));
});

test("with onParentFailure 'run' the child runs and sees the failure in parentResults()", async () => {
  const queue = freshQueue();
  const bad = await enqueue(db, queue, { fail: true }, { key: 'bad', maxAttempts: 1 });
  const good = await enqueue(db, queue, { fail: false }, { key: 'good' });
  await enqueue(db, queue, {}, { key: 'child', after: [bad.id, good.id], onParentFailure: 'run' });
  const seen = [];
  const w = worker(queue, async (job) => {
    if (job.key === 'child') {
      seen.push(await job.parentResults());
      return 'ran anyway';
    }
    if (job.payload.fail) throw new Error('boom');
    return { ok: true };
  }, { concurrency: 2 });
  const outcome = await finished(queue, 'child');
  await stop(w);
  assert.deepEqual(outcome, { state: 'done', result: 'ran anyway', lastError: null });
  assert.equal(seen.length, 1);
  const [results] = seen;
  assert.deepEqual(Object.keys(results).sort(), [bad.id, good.id].sort());
  assert.deepEqual(results[good.id], { ok: true });
  assert.deepEqual(Object.keys(results[bad.id]).sort(), ['error', 'state']);
  assert.equal(results[bad.id].state, 'failed');
  assert.match(results[bad.id].error, /^Error: boom\n {4}at /);
});

test('job.parentResults() under a token that is no longer current is null and stops the job like a refused renew', async () => {
  const queue = freshQueue();
  const { id, key } = await enqueue(db, queue, {});
  const started = gate();
  const letGo = gate();
  const answers = [];
  let reason;
  const { w, logger, running } = worker(queue, async (job) => {
    answers.push(await job.parentResults()); // current: no parents
    started.open();
    await letGo.promise;
    answers.push(await job.parentResults()); // the item was cancelled meanwhile
    reason = job.signal.reason;
    // A second call after the loss sends nothing and answers null.
    answers.push(await job.parentResults());
    return 'ignored';
  });
  await started.promise;
  // An operator cancels the item: no notification comes, so it is the read that is refused.
  assert.equal(await cancel(db, queue, key), true);
  letGo.open();
  await waitFor('the handler done', () => reason !== undefined);
  await stop({ w, running });
  assert.deepEqual(answers, [{}, null, null]);
  assert.ok(reason instanceof LeaseLost);
  const lines = logger.lines.filter((l) => l.message.includes(`id=${id}`)).map((l) => [l.level, l.message]);
  assert.deepEqual(lines.slice(1), [
    ['warn', `parent_results id=${id} refused`],
    ['warn', `refused id=${id} (lease lost)`],
  ]);
});

test('enqueue refuses unknown parents (UnknownParent, 23503), a bad policy and a null id; an existing key keeps its edges', async () => {
  const queue = freshQueue();
  const parent = await enqueue(db, queue, {}, { key: 'p' });
  await assert.rejects(enqueue(db, queue, {}, { key: 'c', after: [parent.id, '4611686018427387904'] }), (err) => {
    assert.ok(err instanceof UnknownParent, String(err));
    assert.equal(err.code, '23503');
    assert.equal(err.message, 'parent item 4611686018427387904 does not exist');
    assert.ok(err.hint);
    return true;
  });
  await assert.rejects(enqueue(db, queue, {}, { key: 'c', after: [parent.id], onParentFailure: 'ignore' }),
    InvalidArgument);
  await assert.rejects(enqueue(db, queue, {}, { key: 'c', after: [parent.id, null] }), NullArgument);
  assert.equal(await item(db, queue, 'c'), null, 'nothing was enqueued');
  const plain = await enqueue(db, queue, {}, { key: 'plain' });
  const again = await enqueue(db, queue, {}, { key: 'plain', after: [parent.id] });
  assert.deepEqual(again, { id: plain.id, key: 'plain', inserted: false });
  assert.deepEqual(graph(await workflow(db, plain.id)), [`${plain.id} 0 []`]);
});

test('against a 0.11.0 database: enqueue without after works; with after or onParentFailure it is 42883', async () => {
  const name = `workfence_node_0110_wf_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE DATABASE ${name}`);
  try {
    const old = new pg.Client({ ...connectionConfig(testDsn()), database: name });
    await old.connect();
    try {
      await old.query("CREATE EXTENSION pg_workfence VERSION '0.11.0'");
      const queue = freshQueue();
      const made = await enqueue(old, queue, {}, { key: 'a', after: [] });
      assert.equal(made.inserted, true);
      await assert.rejects(enqueue(old, queue, {}, { key: 'b', after: [made.id] }), (err) => err.code === '42883');
      await assert.rejects(enqueue(old, queue, {}, { key: 'b', onParentFailure: 'run' }), (err) => err.code === '42883');
    } finally {
      await old.end();
    }
  } finally {
    await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
});
