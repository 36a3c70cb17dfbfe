// The SIGSTOP-past-the-lease harness with an effect outside the database (issue 35): two copies
// of a worker under ONE owner name; one is stopped (SIGSTOP) holding a job past its lease, the
// other claims the job anew and sends; the first is resumed (SIGCONT) and its job goes on to
// send. Sent plainly, the email goes out twice (the database keeps one finish: fencing refuses
// the stale one, but the file is not the database). Sent inside job.guard(), the resumed copy is
// refused before it sends: one email.
//
// Ordered by the processes' own reports over IPC and the item's state in the database (the
// lapse on the server's clock), never by sleeps.

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { enqueue } from '../index.js';
import { connect, freshQueue, itemRow, testDsn, waitFor } from './helpers.js';

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'sink-worker.js');
let db;
const dir = mkdtempSync(path.join(os.tmpdir(), 'workfence-sink-'));
const children = new Set();
before(async () => { db = await connect(); });
after(async () => {
  for (const child of children) {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }
  await db?.end();
  rmSync(dir, { recursive: true, force: true });
});

/** A copy of the worker, with the events it reported. */
function copy(env) {
  const child = fork(fixture, [], {
    env: { ...process.env, WORKFENCE_TEST_DSN: testDsn(), ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  children.add(child);
  const events = [];
  child.on('message', (m) => events.push(m));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return {
    child, events, exited,
    has: (predicate) => events.find(predicate),
    async stop() {
      child.send({ stop: true });
      await exited;
      children.delete(child);
    },
  };
}

/**
 * Runs the scenario with `mode` ('plain' or 'guard') and returns the sink's lines, the item's
 * row and both copies' events.
 */
async function scenario(mode) {
  const queue = freshQueue('node-sigstop');
  const sink = path.join(dir, `${mode}.txt`);
  const { id } = await enqueue(db, queue, { to: 'a@example.com' }, { key: 'welcome-42' });
  const common = { QUEUE: queue, OWNER: 'shared-owner', MODE: mode, SINK: sink };

  // Copy A claims the job and waits, holding it, for the parent's go.
  const a = copy({ ...common, LEASE: '1', HOLD: '1' });
  const started = await waitFor('A started the job', () => a.has((e) => e.event === 'started'), 30);
  a.child.kill('SIGSTOP');
  // Stopped past its lease: the lease lapses on the server's clock.
  await waitFor('A\'s lease to lapse', async () => (await itemRow(db, id)).lapsed, 30);

  // Copy B, under the same owner name, claims the job anew, sends and finishes it.
  const b = copy({ ...common, LEASE: '30', HOLD: '0' });
  const sent = await waitFor('B sent', () => b.has((e) => e.event === 'sent' || e.event === 'refused'), 30);
  assert.equal(sent.event, 'sent');
  assert.ok(BigInt(sent.epoch) > BigInt(started.epoch), 'B holds a newer epoch');
  await waitFor('the item done by B', async () => (await itemRow(db, id)).state === 'done', 30);

  // A resumes, and its job goes on to send (its heartbeat may or may not have noticed the loss).
  a.child.kill('SIGCONT');
  a.child.send({ go: started.id });
  const outcome = await waitFor('A\'s job to end', () => a.has((e) => e.event === 'sent' || e.event === 'refused'), 30);
  await waitFor('A done with the item', () => a.has((e) => e.event === 'log'
    && new RegExp(`^(refused id=${id} |lease lost \\(notified\\) id=${id} |finish id=${id} )`).test(e.message)), 30);
  await Promise.all([a.stop(), b.stop()]);
  const lines = readFileSync(sink, 'utf8').split('\n').filter(Boolean);
  return { lines, row: await itemRow(db, id), outcome, a, b, started, sent };
}

test('without job.guard() a copy stopped past its lease and resumed sends the email a second time', async () => {
  const { lines, row, outcome, a, sent } = await scenario('plain');
  // The database is fenced: one finish, B's.
  assert.equal(row.state, 'done');
  assert.equal(row.epoch, sent.epoch);
  assert.ok(!a.has((e) => e.event === 'log' && /^finish /.test(e.message)), 'A\'s finish was refused');
  // The email is not: the duplicate.
  assert.equal(outcome.event, 'sent');
  assert.equal(lines.length, 2, lines.join('\n'));
  console.log(`sigstop plain: ${lines.length} sends (duplicate shown):\n  ${lines.join('\n  ')}`);
});

test('with job.guard() the resumed copy is refused before it sends: one email', async () => {
  const { lines, row, outcome, a, sent } = await scenario('guard');
  assert.equal(row.state, 'done');
  assert.equal(row.epoch, sent.epoch);
  assert.equal(outcome.event, 'refused');
  assert.match(outcome.error, /^LeaseLost: /);
  assert.ok(!a.has((e) => e.event === 'log' && /^(finish|fail) /.test(e.message)), 'A sent no settle');
  assert.equal(lines.length, 1, lines.join('\n'));
  assert.match(lines[0], new RegExp(`^welcome-42 \\d+:${sent.epoch} pid=`), 'sent under B\'s token');
  console.log(`sigstop guard: ${lines.length} send (0 duplicates): ${lines[0]}`);
});
