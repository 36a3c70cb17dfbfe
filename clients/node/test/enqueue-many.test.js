// Integration tests of enqueueMany (`work_enqueue_many`, from 0.12.0) against the cluster of
// WORKFENCE_TEST_DSN (scripts/client-tests.sh): a result per item in the items' order, existing
// and repeated keys, the shared options, claimability, one statement's atomicity, the errors.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  InvalidArgument, NullArgument, WorkfenceError, enqueue, enqueueMany, item,
} from '../index.js';
import { query } from '../lib/operations.js';
import { connect, freshQueue } from './helpers.js';

let db;
before(async () => { db = await connect(); });
after(async () => { await db?.end(); });

async function count(queue) {
  const { rows: [{ n }] } = await db.query(
    'SELECT count(*)::int AS n FROM workfence.items WHERE queue = $1', [queue]);
  return n;
}

test('enqueueMany returns one result per item in order; existing and repeated keys are not inserted', async () => {
  const queue = freshQueue();
  const existing = await enqueue(db, queue, { n: 'old' }, { key: 'b' });
  const rows = await enqueueMany(db, queue, [
    { payload: { n: 1 }, key: 'a' },
    { payload: { n: 2 }, key: 'b' }, // the queue has it: returned, kept
    { payload: { n: 3, list: [1, 2] } }, // no key: a UUIDv7
    { payload: { n: 4 }, key: 'a' }, // repeats the first item's key
    { key: 'z' }, // no payload: {}
  ], { priority: 2, maxAttempts: 3 });
  assert.equal(rows.length, 5);
  assert.deepEqual(rows.map((r) => r.inserted), [true, false, true, false, true]);
  assert.deepEqual([rows[0], rows[1], rows[3], rows[4]].map((r) => r.key), ['a', 'b', 'a', 'z']);
  assert.match(rows[2].key, /^[0-9a-f-]{36}$/);
  for (const r of rows) assert.match(r.id, /^\d+$/);
  assert.deepEqual(rows[1], { id: existing.id, key: 'b', inserted: false });
  assert.deepEqual(rows[3], { id: rows[0].id, key: 'a', inserted: false });
  assert.equal(new Set([rows[0].id, rows[1].id, rows[2].id, rows[4].id]).size, 4);
  assert.equal(await count(queue), 4);

  const kept = await item(db, queue, 'b');
  assert.deepEqual(kept.payload, { n: 'old' }); // keep: unchanged
  assert.deepEqual([kept.priority, kept.max_attempts], [0, 25]);
  const first = await item(db, queue, 'a');
  assert.deepEqual(first.payload, { n: 1 }); // the first of the call wins
  assert.deepEqual([first.priority, first.max_attempts, first.state], [2, 3, 'pending']);
  const generated = await item(db, rows[2].id);
  assert.equal(generated.key, rows[2].key);
  assert.deepEqual(generated.payload, { n: 3, list: [1, 2] }); // an array stays JSON
  assert.deepEqual((await item(db, queue, 'z')).payload, {});
});

test('enqueueMany items are claimable, and take their runAt and groupKey', async () => {
  const queue = freshQueue();
  const later = new Date(Date.now() + 3600 * 1000);
  const rows = await enqueueMany(db, queue, [
    { payload: { i: 0 }, key: 'now-0' },
    { payload: { i: 1 }, key: 'later', runAt: later },
    { payload: { i: 2 }, key: 'grouped', groupKey: 'customer-7' },
    // Keys and payloads travel as array elements: quotes, commas, braces, backslashes and the
    // word NULL come back as they were.
    { payload: { s: 'a "b", {c} \\ d' }, key: 'odd "key", {3} \\ ü', runAt: null },
    { payload: 'NULL', key: 'NULL' },
  ]);
  assert.deepEqual(rows.map((r) => r.key),
    ['now-0', 'later', 'grouped', 'odd "key", {3} \\ ü', 'NULL']);
  assert.ok(rows.every((r) => r.inserted));
  assert.deepEqual((await item(db, queue, 'odd "key", {3} \\ ü')).payload, { s: 'a "b", {c} \\ d' });
  assert.equal((await item(db, queue, 'NULL')).payload, 'NULL');
  const { rows: claimed } = await db.query(
    "SELECT id::text AS id FROM workfence.work_claim($1, 'bulk-test', interval '30 s', 10)", [queue]);
  assert.deepEqual(new Set(claimed.map((r) => r.id)),
    new Set([rows[0].id, rows[2].id, rows[3].id, rows[4].id]),
    'every due item is claimed, the later one not yet');
  const pending = await item(db, queue, 'later');
  assert.equal(pending.state, 'pending');
  assert.equal(pending.run_at.getTime(), later.getTime());
  const { rows: [group] } = await db.query(
    'SELECT group_key FROM workfence.items WHERE id = $1', [rows[2].id]);
  assert.equal(group.group_key, 'customer-7');
});

test('enqueueMany with onConflict replace changes the existing item', async () => {
  const queue = freshQueue();
  const existing = await enqueue(db, queue, { v: 1 }, { key: 'debounced' });
  const rows = await enqueueMany(db, queue,
    [{ payload: { v: 2 }, key: 'debounced' }, { payload: { v: 9 }, key: 'fresh' }],
    { onConflict: 'replace' });
  assert.deepEqual(rows[0], { id: existing.id, key: 'debounced', inserted: false });
  assert.deepEqual([rows[1].key, rows[1].inserted], ['fresh', true]);
  assert.deepEqual((await item(db, queue, 'debounced')).payload, { v: 2 });
  await assert.rejects(enqueueMany(db, queue, [{ key: 'x' }], { onConflict: 'update' }),
    (err) => err instanceof InvalidArgument && /on_conflict/.test(err.message));
});

test('enqueueMany commits with the caller\'s transaction; an empty array enqueues nothing', async () => {
  const queue = freshQueue();
  await db.query('BEGIN');
  let rows;
  try {
    rows = await enqueueMany(db, queue, [{ key: 't1' }, {}]);
  } finally {
    await db.query('ROLLBACK');
  }
  assert.deepEqual(rows.map((r) => r.inserted), [true, true]);
  assert.equal(await count(queue), 0);
  assert.deepEqual(await enqueueMany(db, queue, []), []);
});

test('enqueueMany refusals are the named errors, and a refused call enqueues nothing', async () => {
  const queue = freshQueue();
  // One bad item refuses the whole call: the statement enqueues all its items or none.
  await assert.rejects(enqueueMany(db, queue, [{ key: 'fine' }, { key: '' }]), (err) => {
    assert.ok(err instanceof InvalidArgument);
    assert.ok(err instanceof WorkfenceError);
    assert.equal(err.code, '22023');
    assert.match(err.message, /key/);
    assert.equal(err.cause.code, '22023');
    return true;
  });
  await assert.rejects(enqueueMany(db, queue, [{}], { maxAttempts: 0 }),
    (err) => err instanceof InvalidArgument && /max_attempts/.test(err.message));
  // Over 10000 items: 22023, nothing enqueued.
  const tooMany = Array.from({ length: 10001 }, (_, i) => ({ payload: { i } }));
  await assert.rejects(enqueueMany(db, queue, tooMany),
    (err) => err instanceof InvalidArgument && /payloads/.test(err.message));
  assert.equal(await count(queue), 0);
  await assert.rejects(enqueueMany(db, null, [{}]), (err) => err instanceof NullArgument && err.code === '22004');
  // Not an array of items: refused before anything is sent.
  for (const bad of [{ payload: 1 }, 'abc', [null], [[1]], [3]]) {
    await assert.rejects(enqueueMany(db, queue, bad), InvalidArgument);
  }
});

test('work_enqueue_many\'s arrays of unequal lengths are InvalidArgument (22023) through the library\'s calls', async () => {
  // enqueueMany sends one element per item in every array, so it cannot send arrays of unequal
  // lengths; the server's refusal of them comes out of the library's query path as the same
  // InvalidArgument.
  const queue = freshQueue();
  await assert.rejects(query(db,
    `SELECT * FROM workfence.work_enqueue_many($1::text, $2::jsonb[], keys => $3::text[])`,
    [queue, ['{}', '{}'], ['only-one']]), (err) => {
    assert.ok(err instanceof InvalidArgument);
    assert.equal(err.code, '22023');
    assert.match(err.message, /keys/);
    assert.ok(err.detail && err.hint);
    return true;
  });
});
