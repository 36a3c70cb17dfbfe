// Integration tests of the enqueue helper, the operator's calls and the error mapping, against
// the cluster of WORKFENCE_TEST_DSN (scripts/client-tests.sh).

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';

import pg from 'pg';

import {
  InvalidArgument, LeaseLost, NoTransaction, NullArgument, WorkfenceError, cancel,
  connectionConfig, enqueue, item, limit, pause, reschedule, resume, retry,
} from '../index.js';
import { connect, freshQueue, testDsn } from './helpers.js';

let db;
before(async () => { db = await connect(); });
after(async () => { await db?.end(); });

test('enqueue inserts once per key and returns the id as an exact decimal string', async () => {
  const queue = freshQueue();
  const first = await enqueue(db, queue, { n: 1, list: [1, 2] }, { key: 'a', priority: 3, maxAttempts: 2, maxRun: 90 });
  assert.equal(first.key, 'a');
  assert.equal(first.inserted, true);
  assert.match(first.id, /^\d+$/);
  const again = await enqueue(db, queue, { n: 2 }, { key: 'a' });
  assert.deepEqual(again, { ...first, inserted: false });
  const row = await item(db, queue, 'a');
  assert.equal(row.id, first.id);
  assert.equal(row.state, 'pending');
  assert.deepEqual(row.payload, { n: 1, list: [1, 2] }); // an array stays JSON, not a SQL array
  assert.equal(row.priority, 3);
  assert.equal(row.max_attempts, 2);
  assert.equal(row.max_run, 90);
  assert.deepEqual(await item(db, first.id), row);
  assert.equal(await item(db, queue, 'missing'), null);
});

test('enqueue without a key gets a generated one; runAt in the future is not claimable', async () => {
  const queue = freshQueue();
  const later = new Date(Date.now() + 3600 * 1000);
  const { key, id } = await enqueue(db, queue, undefined, { runAt: later });
  assert.ok(key.length > 0);
  const row = await item(db, id);
  assert.deepEqual(row.payload, {});
  assert.equal(row.run_at.getTime(), later.getTime());
  const { rows } = await db.query(
    "SELECT id FROM workfence.work_claim($1, 'o', interval '30 s', 10)", [queue]);
  assert.equal(rows.length, 0);
  assert.equal(await reschedule(db, queue, key, new Date(Date.now() - 1000)), true);
  const { rows: claimed } = await db.query(
    "SELECT id::text AS id FROM workfence.work_claim($1, 'o', interval '30 s', 10)", [queue]);
  assert.deepEqual(claimed.map((r) => r.id), [id]);
});

test('cancel, retry, pause and resume act on the item and report whether they changed it', async () => {
  const queue = freshQueue();
  await enqueue(db, queue, {}, { key: 'k' });
  assert.equal(await retry(db, queue, 'k'), false); // pending: nothing to retry
  assert.equal(await cancel(db, queue, 'k'), true);
  assert.equal((await item(db, queue, 'k')).state, 'cancelled');
  assert.equal(await cancel(db, queue, 'k'), false);
  assert.equal(await retry(db, queue, 'k'), true);
  assert.equal((await item(db, queue, 'k')).state, 'pending');
  assert.equal(await pause(db, queue), true);
  assert.equal(await pause(db, queue), false);
  const { rows } = await db.query(
    "SELECT id FROM workfence.work_claim($1, 'o', interval '30 s', 10)", [queue]);
  assert.equal(rows.length, 0, 'a paused queue hands nothing out');
  assert.equal(await resume(db, queue), true);
  assert.equal(await resume(db, queue), false);
});

test('server errors arrive as the named classes with message, detail and hint', async () => {
  await assert.rejects(enqueue(db, 'x'.repeat(200), {}), (err) => {
    assert.ok(err instanceof InvalidArgument);
    assert.ok(err instanceof WorkfenceError);
    assert.equal(err.code, '22023');
    assert.match(err.message, /queue/);
    assert.equal(err.cause.code, '22023');
    return true;
  });
  await assert.rejects(cancel(db, null, 'k'), (err) => err instanceof NullArgument && err.code === '22004');
  await assert.rejects(enqueue(db, freshQueue(), {}, { maxAttempts: 0 }), InvalidArgument);
});

test('work_assert refusals map to LeaseLost (with the reason) and NoTransaction', async () => {
  const queue = freshQueue();
  const { key } = await enqueue(db, queue, {});
  const { rows: [token] } = await db.query(
    "SELECT id::text AS id, epoch::text AS epoch FROM workfence.work_claim($1, 'o', interval '30 s')", [queue]);
  const { query } = await import('../lib/operations.js');
  await assert.rejects(query(db, 'SELECT workfence.work_assert($1, $2, $3)', [token.id, 'o', token.epoch]),
    (err) => err instanceof NoTransaction && err.code === '25P01');
  assert.equal(await cancel(db, queue, key), true);
  await db.query('BEGIN');
  try {
    await assert.rejects(query(db, 'SELECT workfence.work_assert($1, $2, $3)', [token.id, 'o', token.epoch]),
      (err) => {
        assert.ok(err instanceof LeaseLost);
        assert.equal(err.code, '55000');
        assert.match(err.detail, /cancelled/);
        assert.ok(err.hint, 'the server gives a hint');
        return true;
      });
  } finally {
    await db.query('ROLLBACK');
  }
});

test('enqueue with groupKey puts the item in that group; a bad group key is InvalidArgument', async () => {
  const queue = freshQueue();
  await enqueue(db, queue, { op: 'debit' }, { key: 'd1', groupKey: 'customer-42' });
  await enqueue(db, queue, {}, { key: 'd2' });
  const { rows } = await db.query(
    'SELECT key, group_key FROM workfence.items WHERE queue = $1 ORDER BY id', [queue]);
  assert.deepEqual(rows, [{ key: 'd1', group_key: 'customer-42' }, { key: 'd2', group_key: null }]);
  await assert.rejects(enqueue(db, queue, {}, { groupKey: 'bad\ngroup' }),
    (err) => err instanceof InvalidArgument && err.code === '22023');
});

test('limit sets the queue\'s limits, replaces them, and lifts them when left out', async () => {
  const queue = freshQueue();
  const limits = async () => (await db.query(
    `SELECT concurrency, rate, extract(epoch FROM per)::float8 AS per
       FROM workfence.queues WHERE queue = $1`, [queue])).rows[0];
  assert.equal(await limit(db, queue, { concurrency: 5, rate: 100, per: 60 }), undefined);
  assert.deepEqual(await limits(), { concurrency: 5, rate: 100, per: 60 });
  await limit(db, queue, { rate: 3, per: 0.5 });
  assert.deepEqual(await limits(), { concurrency: null, rate: 3, per: 0.5 });
  await limit(db, queue, { rate: 7 }); // per: the server's default, 1 s
  assert.deepEqual(await limits(), { concurrency: null, rate: 7, per: 1 });
  await limit(db, queue, { concurrency: 2 });
  await enqueue(db, queue, {});
  const { rows: [stats] } = await db.query(
    'SELECT concurrency, rate FROM workfence.work_queue_stats WHERE queue = $1', [queue]);
  assert.deepEqual(stats, { concurrency: 2, rate: null });
  await limit(db, queue);
  const lifted = await limits();
  assert.ok(lifted === undefined || (lifted.concurrency === null && lifted.rate === null));
  await assert.rejects(limit(db, queue, { concurrency: 0 }), (err) => {
    assert.ok(err instanceof InvalidArgument);
    assert.match(err.message, /concurrency/);
    return true;
  });
  await assert.rejects(limit(db, queue, { rate: 1, per: 2 * 86400 }), InvalidArgument);
  await assert.rejects(limit(db, null), NullArgument);
});

test('limit sets perGroup, work_queue_stats shows it, and a call without it resets it', async () => {
  const queue = freshQueue();
  const perGroup = async () => (await db.query(
    'SELECT per_group FROM workfence.work_queue_stats WHERE queue = $1', [queue])).rows[0]?.per_group ?? null;
  await limit(db, queue, { concurrency: 5, perGroup: 3 });
  assert.equal(await perGroup(), 3);
  await limit(db, queue, { concurrency: 5 }); // a call sets every limit: per_group lifted
  assert.equal(await perGroup(), null);
  await limit(db, queue, { perGroup: 10000 });
  assert.equal(await perGroup(), 10000);
  for (const bad of [0, 10001]) {
    await assert.rejects(limit(db, queue, { perGroup: bad }), (err) => {
      assert.ok(err instanceof InvalidArgument);
      assert.equal(err.code, '22023');
      assert.match(err.message, /per_group/);
      return true;
    });
  }
  assert.equal(await perGroup(), 10000);
  await limit(db, queue);
  assert.equal(await perGroup(), null);
});

test('without perGroup, limit works against a 0.11.0 database (per_group is sent only when set)', async () => {
  const name = `workfence_node_0110_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE DATABASE ${name}`);
  try {
    const old = new pg.Client({ ...connectionConfig(testDsn()), database: name });
    await old.connect();
    try {
      await old.query("CREATE EXTENSION pg_workfence VERSION '0.11.0'");
      const queue = freshQueue();
      await limit(old, queue, { concurrency: 2, rate: 10, per: 60 });
      const { rows: [set] } = await old.query(
        'SELECT concurrency, rate FROM workfence.work_queue_stats WHERE queue = $1', [queue]);
      assert.deepEqual(set, { concurrency: 2, rate: 10 });
      // 0.11.0's work_limit has no per_group: 42883 (undefined function), an unnamed error.
      await assert.rejects(limit(old, queue, { perGroup: 2 }), (err) => err.code === '42883');
    } finally {
      await old.end();
    }
  } finally {
    await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
});

test('without groupKey, enqueue works against a 0.9.0 database (group_key is sent only when set)', async () => {
  const name = `workfence_node_090_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE DATABASE ${name}`);
  try {
    const old = new pg.Client({ ...connectionConfig(testDsn()), database: name });
    await old.connect();
    try {
      await old.query("CREATE EXTENSION pg_workfence VERSION '0.9.0'");
      const queue = freshQueue();
      const made = await enqueue(old, queue, { n: 1 },
        { key: 'k', runAt: new Date(), priority: 1, maxAttempts: 3, maxRun: 60 });
      assert.equal(made.inserted, true);
      assert.equal((await item(old, queue, 'k')).max_run, 60);
      // 0.9.0's work_enqueue has no group_key: 42883 (undefined function), an unnamed error.
      await assert.rejects(enqueue(old, queue, {}, { groupKey: 'g' }), (err) => err.code === '42883');
    } finally {
      await old.end();
    }
  } finally {
    await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
});
