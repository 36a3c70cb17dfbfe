// Integration tests of a job's whole life (issue 35, from 0.12.0): enqueue's onConflict, the
// checkpoint and job.progress(), awaitResult, the fencing token, job.guard(), and settles sent
// again after a dropped connection. Against the cluster of WORKFENCE_TEST_DSN.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';

import pg from 'pg';

import {
  InvalidArgument, LeaseLost, NullArgument, Worker, awaitResult, connectionConfig, enqueue, item,
} from '../index.js';
import {
  connect, freshQueue, gate, itemRow, recordingLogger, replyCuttingProxy, testDsn, waitFor,
} from './helpers.js';

let db;
before(async () => { db = await connect(); });
const workers = new Set();
const cleanups = [];
after(async () => {
  await Promise.allSettled([...workers].map((w) => w.stop()));
  for (const cleanup of cleanups) await cleanup();
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

/** A connection of its own holding an open transaction, for row locks the test controls. */
async function holder() {
  const client = await connect();
  cleanups.push(() => client.end().catch(() => {}));
  return client;
}

// ------------------------------------------------------------------------------ onConflict

test('enqueue onConflict: keep leaves the item, replace takes payload and runAt, preserve_run_at keeps run_at', async () => {
  const queue = freshQueue();
  const later = new Date(Date.now() + 3600_000);
  const first = await enqueue(db, queue, { v: 1 }, { key: 'k', runAt: later });
  assert.equal(first.inserted, true);
  const kept = await enqueue(db, queue, { v: 2 }, { key: 'k' });
  assert.deepEqual(kept, { ...first, inserted: false });
  assert.deepEqual((await item(db, queue, 'k')).payload, { v: 1 });

  // Debounce: 50 enqueues of one key leave one pending item with the last payload.
  for (let v = 3; v < 53; v += 1) {
    const again = await enqueue(db, queue, { v }, { key: 'k', onConflict: 'replace', runAt: later });
    assert.deepEqual(again, { ...first, inserted: false });
  }
  let row = await item(db, queue, 'k');
  assert.deepEqual([row.state, row.payload, row.run_at.getTime()], ['pending', { v: 52 }, later.getTime()]);

  // Throttle: the payload changes, run_at stays.
  await enqueue(db, queue, { v: 53 }, { key: 'k', onConflict: 'preserve_run_at', runAt: new Date() });
  row = await item(db, queue, 'k');
  assert.deepEqual([row.payload, row.run_at.getTime()], [{ v: 53 }, later.getTime()]);

  // replace without runAt: due now. The worker runs it once, with the last payload.
  await enqueue(db, queue, { v: 54 }, { key: 'k', onConflict: 'replace' });
  const seen = [];
  const w = worker(queue, async (job) => { seen.push(job.payload.v); return job.payload.v; });
  await waitFor('the item done', async () => (await item(db, queue, 'k')).state === 'done');
  // A finished item with replace runs again, attempts counted afresh.
  await enqueue(db, queue, { v: 55 }, { key: 'k', onConflict: 'replace' });
  await waitFor('the item done again', async () => {
    const r = await item(db, queue, 'k');
    return r.state === 'done' && r.result === 55;
  });
  await stop(w);
  assert.deepEqual(seen, [54, 55]);
  assert.equal((await item(db, queue, 'k')).attempts, 1);

  await assert.rejects(enqueue(db, queue, {}, { key: 'k', onConflict: 'update' }), InvalidArgument);
});

test('against a 0.11.0 database: enqueue without onConflict, item() without progress, a worker\'s checkpoint null', async () => {
  const name = `workfence_node_0110_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE DATABASE ${name}`);
  try {
    const dsn = { ...connectionConfig(testDsn()), database: name };
    const old = new pg.Client(dsn);
    await old.connect();
    try {
      await old.query("CREATE EXTENSION pg_workfence VERSION '0.11.0'");
      const queue = freshQueue();
      const { id } = await enqueue(old, queue, { n: 1 }, { key: 'k' });
      // 0.11.0's work_enqueue has no on_conflict: 42883 (undefined function), an unnamed error.
      await assert.rejects(enqueue(old, queue, {}, { key: 'k', onConflict: 'replace' }), (err) => err.code === '42883');
      let checkpoint;
      const w = worker(queue, async (job) => { checkpoint = job.checkpoint; return 'ok'; }, { dsn });
      await waitFor('the item done', async () => (await item(old, id)).state === 'done');
      await stop(w);
      assert.equal(checkpoint, null);
      const row = await item(old, queue, 'k');
      assert.deepEqual([row.state, row.result, row.progress], ['done', 'ok', null]);
    } finally {
      await old.end();
    }
  } finally {
    await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
});

// ---------------------------------------------------------------- checkpoint and progress

test('a retried job resumes from the checkpoint its earlier attempt stored with job.progress()', async () => {
  const queue = freshQueue();
  const { id, key } = await enqueue(db, queue, { pages: 5 }, { maxAttempts: 3 });
  const attempts = [];
  const { w, logger, running } = worker(queue, async (job) => {
    attempts.push({ attempt: job.attempt, checkpoint: job.checkpoint });
    for (let page = job.checkpoint?.page ?? 0; page < job.payload.pages; page += 1) {
      if (job.attempt === 1 && page === 3) throw new Error('the network went away');
      assert.equal(await job.progress({ page: page + 1 }), true);
    }
    return { pages: job.payload.pages };
  }, { retry: () => 0 });
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await stop({ w, running });
  assert.deepEqual(attempts, [{ attempt: 1, checkpoint: null }, { attempt: 2, checkpoint: { page: 3 } }]);
  const row = await item(db, queue, key);
  assert.deepEqual(row.progress, { page: 5 });
  assert.deepEqual(row.result, { pages: 5 });
  assert.ok(!logger.has(/refused/), logger.messages().join('\n'));
});

test('job.progress() under a token that is no longer current returns false and stops the job like a refused renew', async () => {
  const queue = freshQueue();
  const { id, key } = await enqueue(db, queue, {});
  const letGo = gate();
  let outcome;
  let reason;
  const { w, logger, running } = worker(queue, async (job) => {
    await job.progress({ step: 1 });
    await letGo.promise;
    outcome = await job.progress({ step: 2 });
    reason = job.signal.reason;
    // A second call after the loss sends nothing and answers false.
    assert.equal(await job.progress({ step: 3 }), false);
    return 'ignored';
  });
  await waitFor('the first checkpoint', async () => (await item(db, id))?.progress?.step === 1);
  // An operator cancels the item: no notification comes, so it is the progress that is refused.
  await db.query('SELECT workfence.work_cancel($1, $2)', [queue, key]);
  letGo.open();
  await waitFor('the handler done', () => reason !== undefined);
  await stop({ w, running });
  assert.equal(outcome, false);
  assert.ok(reason instanceof LeaseLost);
  assert.deepEqual((await item(db, id)).progress, { step: 1 }, 'the stale write changed nothing');
  const lines = logger.lines.filter((l) => l.message.includes(`id=${id}`)).map((l) => [l.level, l.message]);
  assert.deepEqual(lines.slice(1), [
    ['warn', `progress id=${id} refused`],
    ['warn', `refused id=${id} (lease lost)`],
  ]);
});

test('job.progress() checks its value and, inside job.transaction(), writes in that transaction', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {}, { maxAttempts: 1 });
  const errors = {};
  const { w, running } = worker(queue, async (job) => {
    for (const [name, value] of [['undefined', undefined], ['big', 'x'.repeat(70 * 1024)], ['bigint', 1n]]) {
      errors[name] = await job.progress(value).then(() => null, (err) => err);
    }
    return job.transaction(async (client) => {
      // The transaction holds the item's row lock: a progress on another connection would wait
      // on it for ever; this one is in the transaction.
      assert.equal(await job.progress({ inside: true }), true);
      const { rows: [{ progress }] } = await client.query(
        'SELECT progress FROM workfence.work_item($1::bigint)', [job.id]);
      assert.deepEqual(progress, { inside: true });
      return 'ok';
    });
  });
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await stop({ w, running });
  assert.ok(errors.undefined instanceof NullArgument, String(errors.undefined));
  assert.ok(errors.big instanceof InvalidArgument, String(errors.big));
  assert.ok(errors.bigint instanceof TypeError, String(errors.bigint));
  assert.deepEqual((await item(db, id)).progress, { inside: true });
});

// ---------------------------------------------------------------------------- awaitResult

test('awaitResult wakes at the finish, answers failed items with their error, null for none, the state at timeout', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, { n: 6 }, { key: 'job' });
  assert.deepEqual(await awaitResult(db, queue, 'job', { timeout: 0 }),
    { state: 'pending', result: null, lastError: null });
  assert.equal(await awaitResult(db, queue, 'no-such-key', { timeout: 5 }), null);

  // A waiter on its own connection; the item is claimed and finished by hand meanwhile.
  const waiter = await holder();
  const began = performance.now();
  const waiting = awaitResult(waiter, queue, 'job', { timeout: 20 });
  await waitFor('the waiter in work_await', async () => {
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity
        WHERE pid = $1 AND state = 'active' AND query LIKE '%work_await%'`, [waiter.processID]);
    return rows[0].n === 1;
  });
  const { rows: [claim] } = await db.query(
    "SELECT epoch FROM workfence.work_claim($1, 'by-hand', interval '1 minute')", [queue]);
  const finishedAt = performance.now();
  await db.query("SELECT workfence.work_finish($1, 'by-hand', $2, '{\"n\": 36}')", [id, claim.epoch]);
  const awaited = await waiting;
  const late = performance.now() - finishedAt;
  assert.deepEqual(awaited, { state: 'done', result: { n: 36 }, lastError: null });
  assert.ok(late < 1000, `awaitResult returned ${late.toFixed(0)} ms after the finish`);
  assert.ok(performance.now() - began < 20_000);

  // A failed item: its last error.
  const failing = await enqueue(db, queue, {}, { key: 'bad', maxAttempts: 1 });
  const w = worker(queue, async () => { throw new TypeError('no invoice'); });
  const failed = await awaitResult(db, queue, failing.key, { timeout: 20 });
  await stop(w);
  assert.equal(failed.state, 'failed');
  assert.equal(failed.result, null);
  assert.match(failed.lastError, /^TypeError: no invoice\n {4}at /);

  // A timeout: the state then, after about the timeout (one call per server cap of 3 s).
  await enqueue(db, queue, {}, { key: 'later', runAt: new Date(Date.now() + 3600_000) });
  const t0 = performance.now();
  assert.deepEqual(await awaitResult(db, queue, 'later', { timeout: 1.5 }),
    { state: 'pending', result: null, lastError: null });
  const waited = performance.now() - t0;
  assert.ok(waited >= 1400 && waited < 4000, `waited ${waited.toFixed(0)} ms for a 1.5 s timeout`);
});

// ----------------------------------------------------------------- fencing token and guard

test('job.fencingToken is "<id>:<epoch>"; job.guard() holds the lease around its callback and renews it', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  const inside = gate();
  const letGo = gate();
  let token;
  let guarded;
  const { w, logger, running } = worker(queue, async (job) => {
    token = job.fencingToken;
    guarded = await job.guard(async (client) => {
      inside.open();
      await letGo.promise;
      // The guard renewed the lease in its transaction: a full lease from here.
      const { rows: [{ renewed }] } = await client.query(
        'SELECT lease_until > $2 AS renewed FROM workfence.work_item($1::bigint)', [job.id, job.leaseUntil]);
      assert.equal(await job.progress({ sent: true }), true, 'progress inside the guard');
      return renewed;
    });
    await assert.rejects(job.guard(async () => job.guard(async () => null)), /one job\.guard\(\) or job\.transaction\(\)/);
    return { token };
  }, { lease: 2 });
  await inside.promise;
  const before = await itemRow(db, id);
  assert.equal(token, `${id}:${before.epoch}`);
  // While the guard runs, the item's row is locked: even a lapsed lease cannot be claimed anew.
  await waitFor('the lease to lapse', async () => (await itemRow(db, id)).lapsed);
  const { rows: none } = await db.query(
    "SELECT id FROM workfence.work_claim($1, 'other', interval '1 minute')", [queue]);
  assert.deepEqual(none, [], 'nothing claimable while the guard holds the item');
  letGo.open();
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await stop({ w, running });
  assert.equal(guarded, true);
  const row = await itemRow(db, id);
  assert.equal(row.epoch, before.epoch, 'never claimed anew');
  assert.deepEqual(row.result, { token: `${id}:${before.epoch}` });
  assert.ok(!logger.has(/refused|lease lost/), logger.messages().join('\n'));
});

test('job.guard() under a stale token throws LeaseLost without running its callback', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  const letGo = gate();
  let ran = false;
  let thrown;
  const { w, logger, running } = worker(queue, async (job) => {
    job.stopRenewing();
    await letGo.promise;
    try {
      await job.guard(async () => { ran = true; });
    } catch (err) {
      thrown = err;
    }
    return 'ignored';
  }, { lease: 1 });
  await waitFor('the claim', () => logger.has(new RegExp(`^claim id=${id} `)));
  await waitFor('the lease to lapse', async () => (await itemRow(db, id)).lapsed);
  // Claimed anew under the same owner name, as by a second copy of the worker.
  await db.query("SELECT workfence.work_claim($1, 'node-tests', interval '1 minute')", [queue]);
  letGo.open();
  await waitFor('the handler done', () => thrown !== undefined);
  await stop({ w, running });
  assert.equal(ran, false);
  assert.ok(thrown instanceof LeaseLost, String(thrown));
  assert.ok(!logger.has(new RegExp(`^(finish|fail|release) id=${id} `)), logger.messages().join('\n'));
});

// ---------------------------------------------------- settles sent again after a lost connection

/** The backends of connections named `name` waiting on a lock in a statement matching `like`. */
async function lockWaiters(name, like) {
  const { rows } = await db.query(
    `SELECT pid FROM pg_catalog.pg_stat_activity
      WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2`, [name, like]);
  return rows.map((r) => r.pid);
}

test('a finish whose connection is terminated before it commits is sent again, and the job does not run twice', async () => {
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  const letGo = gate();
  let runs = 0;
  const w = worker(queue, async (job) => {
    runs += 1;
    job.stopRenewing(); // the held row lock below would hold up a renew
    await letGo.promise;
    return { runs };
  }, { dsn: `${testDsn()} application_name=${queue}` });
  await waitFor('the claim', () => w.logger.has(new RegExp(`^claim id=${id} `)));
  // The test holds the item's row lock (work_assert under the worker's own token), so that the
  // worker's finish waits on it, and is terminated there: it has not committed.
  const { epoch } = await itemRow(db, id);
  const locker = await holder();
  await locker.query('BEGIN');
  await locker.query("SELECT workfence.work_assert($1, 'node-tests', $2)", [id, epoch]);
  letGo.open();
  const [first] = await waitFor('the finish waiting', () => lockWaiters(queue, '%work_finish%').then((p) => p.length && p));
  await db.query('SELECT pg_catalog.pg_terminate_backend($1)', [first]);
  await waitFor('the finish sent again', () => lockWaiters(queue, '%work_finish%').then((p) => p.length && !p.includes(first)));
  await locker.query('ROLLBACK');
  await waitFor('the item done', async () => (await itemRow(db, id)).state === 'done');
  await stop(w);
  const row = await itemRow(db, id);
  assert.deepEqual(row.result, { runs: 1 });
  assert.equal(row.attempts, 1);
  assert.equal(runs, 1);
  assert.ok(w.logger.has(new RegExp(`^resend finish id=${id} epoch=${epoch} error=`)), w.logger.messages().join('\n'));
  assert.ok(w.logger.has(new RegExp(`^finish id=${id} epoch=${epoch} ok$`)));
  assert.ok(!w.logger.has(/^settle |refused/), w.logger.messages().join('\n'));
});

test('settles whose reply is lost after they committed are sent again and count as settled, not as a lost lease', async () => {
  const proxy = await replyCuttingProxy();
  cleanups.push(() => proxy.close());
  const queue = freshQueue();
  const ok = await enqueue(db, queue, { kind: 'finish' }, { priority: 1 });
  const retried = await enqueue(db, queue, { kind: 'fail' }, { priority: 2, maxAttempts: 3 });
  const dead = await enqueue(db, queue, { kind: 'fail' }, { priority: 3, maxAttempts: 1 });
  const inTx = await enqueue(db, queue, { kind: 'transaction' }, { priority: 4 });
  const order = [ok, retried, dead, inTx];
  const cuts = { finish: 'work_finish', fail: 'work_fail', transaction: 'COMMIT' };
  const steps = new Map(order.map(({ id }) => [id, gate()]));
  let returned;
  const w = worker(queue, async (job) => {
    await steps.get(job.id).promise; // the test arms the proxy first
    if (job.payload.kind === 'finish') return 'done';
    if (job.payload.kind === 'fail') throw new Error('boom');
    returned = await job.transaction(async () => 'committed');
    return returned;
  }, { dsn: `${testDsn()} port=${proxy.port}`, retry: () => 3600 });
  for (const { id } of order) {
    await waitFor('the claim', () => w.logger.has(new RegExp(`^claim id=${id} `)));
    const { kind } = (await item(db, id)).payload;
    const cut = proxy.cutAfter(cuts[kind]);
    steps.get(id).open();
    await cut;
    await waitFor('the item settled', async () => (await itemRow(db, id)).state !== 'claimed');
  }
  await waitFor('four items settled', () => w.logger.messages().filter((m) => /^(finish|fail) /.test(m)).length === 4);
  await stop(w);
  const states = [];
  for (const { id } of order) states.push(await itemRow(db, id));
  assert.deepEqual(states.map((r) => [r.state, r.errors.length]),
    [['done', 0], ['pending', 1], ['failed', 1], ['done', 0]]);
  assert.equal(returned, 'committed', 'job.transaction() returned normally after its lost COMMIT reply');
  for (const [n, { id }] of order.entries()) {
    const { epoch } = states[n];
    const verb = n === 1 || n === 2 ? 'fail' : 'finish';
    const expected = new RegExp(`^resend ${n === 3 ? 'commit' : verb} id=${id} epoch=${epoch} error=`);
    assert.ok(w.logger.has(expected), `${expected}\n${w.logger.messages().join('\n')}`);
    assert.ok(w.logger.has(new RegExp(`^${verb} id=${id} epoch=${epoch} (ok|error=Error: boom)$`)));
  }
  assert.ok(!w.logger.has(/^settle |refused|lease lost/), w.logger.messages().join('\n'));
});

test('a release at shutdown whose reply is lost is sent again and counts as released', async () => {
  const proxy = await replyCuttingProxy();
  cleanups.push(() => proxy.close());
  const queue = freshQueue();
  const { id } = await enqueue(db, queue, {});
  const w = worker(queue, async (job) => {
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
    return 'too late';
  }, { dsn: `${testDsn()} port=${proxy.port}`, shutdownGrace: 0 });
  await waitFor('the claim', () => w.logger.has(new RegExp(`^claim id=${id} `)));
  const { epoch } = await itemRow(db, id);
  const cut = proxy.cutAfter('work_release');
  await stop(w);
  await cut;
  const row = await itemRow(db, id);
  assert.deepEqual([row.state, row.attempts], ['pending', 0]);
  assert.ok(w.logger.has(new RegExp(`^resend release id=${id} epoch=${epoch} error=`)), w.logger.messages().join('\n'));
  assert.ok(w.logger.has(new RegExp(`^release id=${id} epoch=${epoch}$`)));
  assert.ok(!w.logger.has(/^settle |^release id=\d+ epoch=\d+ error|refused/), w.logger.messages().join('\n'));
});
