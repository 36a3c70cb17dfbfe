// Integration tests of the schedules (from 0.12.0) through the library, against the cluster of
// WORKFENCE_TEST_DSN (scripts/client-tests.sh): a schedule made with `schedule` shows in
// `schedules()`, a due slot fires once with the documented key and a Worker claims its item (also
// when only the worker's long poll fires it), pause and resume, and the errors.
//
// A slot is made due without waiting by moving the schedule's next_slot a second into the past
// (as superuser, on the table); the expressions are yearly, so no slot comes due by itself. This
// file's tests run one after another and are the suite's only schedules, so fireSchedules()
// counts only the slot the test made due.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, afterEach, before, test } from 'node:test';

import {
  InvalidArgument, NullArgument, UndefinedObject, Worker, WorkfenceError, fireSchedules, item,
  pauseSchedule, resumeSchedule, schedule, schedules, unschedule,
} from '../index.js';
import { connect, freshQueue, recordingLogger, testDsn, waitFor } from './helpers.js';

const YEARLY = '0 0 1 1 *';

let db;
before(async () => { db = await connect(); });
// Every schedule and worker a test made is removed or stopped at the end, also after a failed
// assertion.
const made = new Set();
const workers = new Set();
afterEach(async () => {
  await Promise.allSettled([...workers].map((w) => w.stop()));
  workers.clear();
  for (const name of made) await unschedule(db, name);
  made.clear();
});
after(async () => { await db?.end(); });

/** A schedule name no other test uses, removed after the test. */
function freshName() {
  const name = `node-schedule-${randomBytes(6).toString('hex')}`;
  made.add(name);
  return name;
}

/** Moves the schedule's next slot a second into the past (whole seconds); returns that slot. */
async function makeDue(name) {
  const { rows: [row] } = await db.query(
    `UPDATE workfence.schedules
        SET next_slot = date_trunc('second', clock_timestamp()) - interval '1 second', last_slot = NULL
      WHERE name = $1 RETURNING next_slot`, [name]);
  assert.ok(row, `no schedule ${name}`);
  return row.next_slot;
}

/** The documented key of a slot's item: `<name>@<slot as UTC ISO 8601>`, whole seconds. */
function slotKey(name, slot) {
  return `${name}@${slot.toISOString().replace(/\.000Z$/, 'Z')}`;
}

/** The schedule as schedules() lists it, or null. */
async function shown(name) {
  const found = (await schedules(db)).filter((s) => s.name === name);
  assert.ok(found.length <= 1);
  return found[0] ?? null;
}

async function keys(queue) {
  const { rows } = await db.query('SELECT key FROM workfence.items WHERE queue = $1 ORDER BY id', [queue]);
  return rows.map((r) => r.key);
}

/** A running worker on `queue` recording each job's (id, key, payload); stopped by afterEach. */
function runWorker(queue, seen) {
  const w = new Worker({
    dsn: testDsn(), queue, logger: recordingLogger(), handleSignals: false, pollWait: 1,
    owner: 'node-tests/schedules', shutdownGrace: 1,
    handler: async (job) => { seen.push({ id: job.id, key: job.key, payload: job.payload }); return null; },
  });
  workers.add(w);
  const running = w.run();
  running.catch(() => {}); // awaited at the stop
  return { w, running };
}

test('a schedule shows in schedules(), and a replace says whether it changed anything', async () => {
  const name = freshName();
  const queue = freshQueue();
  const before = Date.now();
  assert.equal(await schedule(db, name, '0 2 * * *', queue, { kind: 'daily' },
    { timezone: 'Europe/Berlin', priority: 2, maxAttempts: 3, groupKey: 'reports' }), true);
  const row = await shown(name);
  assert.ok(row);
  const { next_slot: next, ...rest } = row;
  assert.deepEqual(rest, {
    name, cron: '0 2 * * *', timezone: 'Europe/Berlin', queue, catch_up: 'latest', paused: false,
    last_slot: null, last_item_id: null, last_fired_at: null, payload: { kind: 'daily' }, priority: 2,
    max_attempts: 3, group_key: 'reports',
  });
  // The first slot after now: 02:00 in Berlin, within the next day.
  assert.ok(next instanceof Date && next.getTime() > before && next.getTime() - before <= 25 * 3600e3);
  const berlin = new Intl.DateTimeFormat('en-GB', {
    timeZone: 'Europe/Berlin', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
  }).format(next);
  assert.equal(berlin, '02:00:00');

  assert.equal(await schedule(db, name, '0 2 * * *', queue, { kind: 'daily' },
    { timezone: 'Europe/Berlin', priority: 2, maxAttempts: 3, groupKey: 'reports' }), false,
  'the same settings change nothing');
  assert.equal(await schedule(db, name, '0 2 * * *', queue, undefined, { catchUp: 'all' }), true);
  const replaced = await shown(name);
  assert.deepEqual([replaced.catch_up, replaced.timezone, replaced.payload, replaced.group_key],
    ['all', 'UTC', {}, null]);

  await db.query('BEGIN');
  assert.equal(await unschedule(db, name), true);
  await db.query('ROLLBACK');
  assert.ok(await shown(name), 'an unschedule rolled back with the caller\'s transaction');
  assert.equal(await unschedule(db, name), true);
  assert.equal(await unschedule(db, name), false);
  assert.equal(await shown(name), null);
});

test('a due slot fires one item with the documented key, and a worker claims it', async () => {
  const name = freshName();
  const queue = freshQueue();
  await schedule(db, name, YEARLY, queue, { report: 'yearly' }, { priority: 1 });
  const slot = await makeDue(name);
  assert.equal(await fireSchedules(db), 1);
  assert.equal(await fireSchedules(db), 0, 'a slot is fired once');
  const key = slotKey(name, slot);
  assert.deepEqual(await keys(queue), [key]);
  const fired = await item(db, queue, key);
  assert.equal(fired.state, 'pending');
  assert.equal(fired.run_at.getTime(), slot.getTime());
  assert.deepEqual(fired.payload, { report: 'yearly' });
  assert.equal(fired.priority, 1);
  const row = await shown(name);
  assert.equal(row.last_slot.getTime(), slot.getTime());
  assert.equal(row.last_item_id, fired.id);
  assert.ok(row.last_fired_at instanceof Date);
  assert.equal(row.next_slot.toISOString().slice(4), '-01-01T00:00:00.000Z', 'the next 1 January');

  const seen = [];
  const { w, running } = runWorker(queue, seen);
  await waitFor('the scheduled item done by the worker', async () => (await item(db, fired.id)).state === 'done');
  await w.stop();
  await running;
  assert.deepEqual(seen, [{ id: fired.id, key, payload: { report: 'yearly' } }]);
});

test('a worker\'s long poll fires a due slot itself', async () => {
  const name = freshName();
  const queue = freshQueue();
  await schedule(db, name, YEARLY, queue, { n: 1 });
  const slot = await makeDue(name);
  const key = slotKey(name, slot);
  // No fireSchedules: the worker's claim of the queue fires the due slot.
  const seen = [];
  const { w, running } = runWorker(queue, seen);
  await waitFor('the slot fired by the worker\'s claim, and done',
    async () => (await item(db, queue, key))?.state === 'done');
  await w.stop();
  await running;
  assert.deepEqual(seen.map((s) => s.key), [key]);
  assert.equal((await shown(name)).last_slot.getTime(), slot.getTime());
});

test('pauseSchedule and resumeSchedule: a paused schedule fires nothing, a resumed one its missed slot', async () => {
  const name = freshName();
  const queue = freshQueue();
  await schedule(db, name, YEARLY, queue);
  assert.equal(await pauseSchedule(db, name), true);
  assert.equal(await pauseSchedule(db, name), false, 'already paused');
  assert.equal((await shown(name)).paused, true);
  const slot = await makeDue(name);
  assert.equal(await fireSchedules(db), 0, 'a paused schedule fires nothing');
  assert.deepEqual(await keys(queue), []);
  assert.equal(await schedule(db, name, YEARLY, queue), false, 'unchanged');
  assert.equal((await shown(name)).paused, true, 'a replace keeps the pause');

  assert.equal(await resumeSchedule(db, name), true);
  assert.equal(await resumeSchedule(db, name), false, 'not paused');
  assert.equal((await shown(name)).paused, false);
  // The slot missed while paused: catchUp 'latest' fires it.
  assert.equal(await fireSchedules(db), 1);
  assert.deepEqual(await keys(queue), [slotKey(name, slot)]);
});

test('bad arguments and unknown schedules reject with the named errors', async () => {
  const name = freshName();
  const queue = freshQueue();
  await assert.rejects(schedule(db, name, 'every day at two', queue), (err) => {
    assert.ok(err instanceof InvalidArgument);
    assert.ok(err instanceof WorkfenceError);
    assert.equal(err.code, '22023');
    assert.equal(err.cause.code, '22023');
    assert.match(`${err.message} ${err.detail ?? ''}`, /cron/);
    return true;
  });
  await assert.rejects(schedule(db, name, YEARLY, queue, {}, { timezone: 'Mars/Olympus_Mons' }),
    (err) => err instanceof InvalidArgument && err.code === '22023');
  await assert.rejects(schedule(db, name, YEARLY, queue, {}, { catchUp: 'sometimes' }),
    (err) => err instanceof InvalidArgument && err.code === '22023');
  await assert.rejects(schedule(db, null, YEARLY, queue),
    (err) => err instanceof NullArgument && err.code === '22004');
  assert.equal(await shown(name), null, 'nothing was made');

  await assert.rejects(pauseSchedule(db, name),
    (err) => err instanceof UndefinedObject && err.code === '42704');
  await assert.rejects(resumeSchedule(db, name),
    (err) => err instanceof UndefinedObject && err.code === '42704');
  assert.equal(await unschedule(db, name), false);
});
