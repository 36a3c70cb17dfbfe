// Integration tests of the enqueue helper, the operator's calls and the error mapping, against
// the cluster of WORKFENCE_TEST_DSN (scripts/client-tests.sh).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  InvalidArgument, LeaseLost, NoTransaction, NullArgument, WorkfenceError, cancel, enqueue, item,
  pause, reschedule, resume, retry,
} from '../index.js';
import { connect, freshQueue } from './helpers.js';

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
