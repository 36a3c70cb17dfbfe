// Unit tests: no database. The parts of the library that decide something on their own.

import assert from 'node:assert/strict';
import os from 'node:os';
import { test } from 'node:test';

import pg from 'pg';

import {
  Cancelled, ERRORS_BY_SQLSTATE, InvalidArgument, LeaseLost, NoTransaction, NotPermitted,
  NullArgument, ReadOnly, SerializationFailure, UndefinedObject, UnknownParent, Worker,
  WorkfenceError,
  awaitResult, connectionConfig, defaultOwner, enqueue, enqueueMany, fromPgError, leaseLostToken,
  limit,
} from '../index.js';
import { ERROR_HEAD_MAX_BYTES, ERROR_TEXT_MAX_BYTES, failureText, heals } from '../lib/worker.js';

test('every SQLSTATE of clients/README.md maps to its named error class', () => {
  const expected = {
    '22004': NullArgument, '22023': InvalidArgument, '25006': ReadOnly, '25P01': NoTransaction,
    '40001': SerializationFailure, '42501': NotPermitted, '42704': UndefinedObject,
    '23503': UnknownParent, '55000': LeaseLost, '57014': Cancelled,
  };
  assert.deepEqual(Object.keys(ERRORS_BY_SQLSTATE).sort(), Object.keys(expected).sort());
  for (const [code, cls] of Object.entries(expected)) {
    const pgError = Object.assign(new Error(`message ${code}`), { code, detail: 'why', hint: 'do this' });
    const err = fromPgError(pgError);
    assert.ok(err instanceof cls, code);
    assert.ok(err instanceof WorkfenceError);
    assert.equal(err.name, cls.name);
    assert.equal(err.code, code);
    assert.equal(err.message, `message ${code}`);
    assert.equal(err.detail, 'why');
    assert.equal(err.hint, 'do this');
    assert.equal(err.cause, pgError);
  }
});

test('errors of other SQLSTATEs, and errors without one, are returned unchanged', () => {
  const other = Object.assign(new Error('syntax'), { code: '42601' });
  assert.equal(fromPgError(other), other);
  const plain = new Error('socket closed');
  assert.equal(fromPgError(plain), plain);
  const already = new LeaseLost('lost');
  assert.equal(fromPgError(already), already);
  assert.equal(already.code, '55000');
});

test('connectionConfig reads libpq keyword/value strings, quoting included', () => {
  assert.deepEqual(
    connectionConfig("host=127.0.0.1 port=5433 user=postgres dbname='my db' password='it\\'s' sslmode=disable"),
    { host: '127.0.0.1', port: 5433, user: 'postgres', database: 'my db', password: "it's", ssl: false },
  );
  assert.deepEqual(connectionConfig('postgresql://u@h/db'), { connectionString: 'postgresql://u@h/db' });
  assert.deepEqual(connectionConfig('connect_timeout=3'), { connectionTimeoutMillis: 3000 });
});

test('connectionConfig rejects what it cannot honour instead of ignoring it', () => {
  assert.throws(() => connectionConfig('host=x target_session_attrs=any'), /target_session_attrs/);
  assert.throws(() => connectionConfig('host'), /missing "="/);
  assert.throws(() => connectionConfig("dbname='open"), /unterminated/);
  assert.throws(() => connectionConfig('sslmode=sometimes'), /sslmode/);
});

test('leaseLostToken reads id and epoch exactly, also above 2^53', () => {
  assert.deepEqual(
    leaseLostToken('{"id": 7, "key": "k", "epoch": 42, "owner": "o", "queue": "q"}'),
    { id: '7', epoch: '42' },
  );
  assert.deepEqual(
    leaseLostToken('{"id": 9007199254740993, "epoch": 123456789012345678901}'),
    { id: '9007199254740993', epoch: '123456789012345678901' },
  );
});

test('leaseLostToken is not fooled by strings or nested members that look like a token', () => {
  assert.deepEqual(
    leaseLostToken('{"key": "{\\"id\\": 1, \\"epoch\\": 2}", "nested": {"id": 3, "epoch": 4}, "id": 5, "epoch": 6}'),
    { id: '5', epoch: '6' },
  );
  assert.equal(leaseLostToken('not json'), null);
  assert.equal(leaseLostToken('[1, 2]'), null);
  assert.equal(leaseLostToken('{"id": "7", "epoch": 42}'), null);
  assert.equal(leaseLostToken('{"id": 7.5, "epoch": 42}'), null);
  assert.equal(leaseLostToken('{"id": 7}'), null);
});

test('the default owner names the host and the process', () => {
  assert.equal(defaultOwner(), `${os.hostname()}:${process.pid}`);
});

const handler = async () => null;

test('Worker applies the defaults of clients/README.md', () => {
  const w = new Worker({ dsn: 'host=localhost', queue: 'q', handler });
  assert.equal(w.owner, defaultOwner());
  assert.equal(w.concurrency, 1);
  assert.equal(w.batchSize, 1);
  assert.equal(w.lease, 30);
  assert.equal(w.pollWait, 5);
  assert.equal(w.shutdownGrace, 10);
  assert.equal(w.retry, null);
  assert.equal(w.handleSignals, true);
  assert.equal(w.logger, console);
  assert.equal(new Worker({ dsn: 'host=localhost', queue: 'q', handler, concurrency: 4 }).batchSize, 4);
});

test('Worker rejects missing or out-of-range settings before connecting anything, as InvalidArgument', () => {
  const ok = { dsn: 'host=localhost', queue: 'q', handler };
  const bad = (options, re) => assert.throws(() => new Worker({ ...ok, ...options }), (err) => {
    assert.ok(err instanceof InvalidArgument, `${err.name}: ${err.message}`);
    assert.equal(err.code, '22023');
    if (re) assert.match(err.message, re);
    return true;
  });
  bad({ dsn: undefined }, /dsn/);
  bad({ queue: '' }, /queue/);
  bad({ queue: undefined }, /queue/);
  bad({ handler: 'no' }, /handler/);
  bad({ owner: '  ' }, /owner/);
  bad({ owner: '' }, /owner/);
  bad({ concurrency: 0 }, /concurrency/);
  bad({ concurrency: 1.5 }, /concurrency/);
  bad({ batchSize: 1001 }, /batchSize/);
  bad({ lease: 0 }, /lease/);
  bad({ lease: 7 * 86400 + 1 }, /lease/);
  bad({ pollWait: -1 }, /pollWait/);
  bad({ pollWait: 3601 }, /pollWait/);
  bad({ shutdownGrace: Number.NaN }, /shutdownGrace/);
  bad({ retry: 5 }, /retry/);
  bad({ logger: { info() {} } }, /logger.debug/);
  bad({ dsn: 'host=x bogus=1' }, /bogus/);
});

test('Worker checks queue and owner names as the server does (bytes, control characters, blank)', () => {
  const ok = { dsn: 'host=localhost', queue: 'q', handler };
  const bad = (options, re) => assert.throws(() => new Worker({ ...ok, ...options }), (err) => {
    assert.ok(err instanceof InvalidArgument, `${err.name}: ${err.message}`);
    assert.equal(err.code, '22023');
    assert.match(err.message, re);
    return true;
  });
  bad({ queue: 'jobs\n' }, /queue .*control character/);
  bad({ queue: 'a\tb' }, /queue .*control character/);
  bad({ queue: 'a\u0085b' }, /queue .*control character/); // C1, as Rust's char::is_control
  bad({ queue: 'q'.repeat(129) }, /queue .*128 bytes/);
  bad({ queue: '\u00e9'.repeat(65) }, /queue .*128 bytes/); // 65 characters, 130 bytes in UTF-8
  bad({ owner: 'o'.repeat(257) }, /owner .*256 bytes/);
  bad({ owner: '\u00e9'.repeat(129) }, /owner .*256 bytes/);
  bad({ owner: 'host:1\n' }, /owner .*control character/);
  bad({ owner: ' \t ' }, /owner/);
  // The limits themselves are allowed, and a queue of blanks is a name (the server takes it).
  assert.equal(new Worker({ ...ok, queue: '\u00e9'.repeat(64) }).queue.length, 64);
  assert.equal(new Worker({ ...ok, owner: 'o'.repeat(256) }).owner.length, 256);
  assert.equal(new Worker({ ...ok, queue: ' ' }).queue, ' ');
  assert.equal(new Worker({ ...ok, lease: 7 * 86400 }).lease, 7 * 86400);
});

test('run() that ends with an error logs exit error=<text> last', async () => {
  const logger = { lines: [], debug() {}, info(m) { this.lines.push(['info', m]); },
    warn(m) { this.lines.push(['warn', m]); }, error(m) { this.lines.push(['error', m]); } };
  const w = new Worker({ dsn: 'host=127.0.0.1 port=1 connect_timeout=1', queue: 'q', handler,
    handleSignals: false, logger });
  const err = await w.run().then(() => null, (e) => e); // nothing listens on port 1
  assert.ok(err instanceof Error);
  assert.deepEqual(logger.lines.at(-1), ['error', `exit error=${err.message}`]);
  assert.ok(!logger.lines.some(([, m]) => m === 'exit'));
});

test('run() may be called only once', async () => {
  const w = new Worker({ dsn: 'host=127.0.0.1 port=1 connect_timeout=1', queue: 'q', handler,
    handleSignals: false, logger: { debug() {}, info() {}, warn() {}, error() {} } });
  await assert.rejects(w.run()); // nothing listens on port 1
  await assert.rejects(w.run(), /only once/);
});

test('heals: connection errors and the retried SQLSTATEs heal, any other SQLSTATE does not', () => {
  /** A server error as node-postgres makes it (a pg.DatabaseError with the SQLSTATE). */
  const server = (code) => Object.assign(new pg.DatabaseError(`server ${code}`, 0, 'error'), { code });
  // No SQLSTATE: a lost or refused connection (node-postgres's own errors, Node system errors).
  assert.equal(heals(new Error('Connection terminated unexpectedly')), true);
  assert.equal(heals(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })), true);
  assert.equal(heals(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' })), true); // 5 letters, not a SQLSTATE
  for (const code of ['08006', '08003', '08P01', '57P01', '57P02', '57P03', '57014', '40001', '40P01',
    '25006', '53300', '53100', '53200']) {
    assert.equal(heals(server(code)), true, code);
    assert.equal(heals(fromPgError(server(code))), true, `${code} mapped`);
  }
  for (const code of ['3F000', '42883', '42501', '22023', '22004', '28P01', '3D000', '55000', '57000', 'XX000']) {
    assert.equal(heals(server(code)), false, code);
    assert.equal(heals(fromPgError(server(code))), false, `${code} mapped`);
  }
  assert.equal(heals(new InvalidArgument('bad', { code: '22023' })), false);
});

/** A client that records each statement and answers with `row`. */
function recordingClient(row) {
  const calls = [];
  return { calls, async query(text, values) { calls.push({ text, values }); return { rows: [row] }; } };
}

test('enqueue sends group_key (by name) only when groupKey is set, so 0.9.0 databases still take it', async () => {
  const client = recordingClient({ id: '1', key: 'k', inserted: true });
  await enqueue(client, 'q', {}, { key: 'k', maxRun: 5 });
  assert.doesNotMatch(client.calls[0].text, /group_key/);
  await enqueue(client, 'q', {}, { groupKey: 'customer-42' });
  assert.match(client.calls[1].text, /group_key => \$3::text/);
  assert.deepEqual(client.calls[1].values, ['q', '{}', 'customer-42']);
});

test('limit passes both limits (null lifts) and per only when given', async () => {
  const client = recordingClient({});
  assert.equal(await limit(client, 'q'), undefined);
  assert.deepEqual(client.calls[0].values, ['q', null, null]);
  assert.doesNotMatch(client.calls[0].text, /per =>/);
  await limit(client, 'q', { concurrency: 5, rate: 100, per: 60 });
  assert.deepEqual(client.calls[1].values, ['q', 5, 100, 60]);
  assert.match(client.calls[1].text, /per => make_interval\(secs => \$4::double precision\)/);
});

test('limit sends per_group (by name) only when perGroup is set, so 0.11.0 databases still take it', async () => {
  const client = recordingClient({});
  await limit(client, 'q', { concurrency: 5 });
  assert.doesNotMatch(client.calls[0].text, /per_group/);
  await limit(client, 'q', { perGroup: 4 });
  assert.deepEqual(client.calls[1].values, ['q', null, null, 4]);
  assert.match(client.calls[1].text, /per_group => \$4::integer/);
  await limit(client, 'q', { rate: 1, per: 60, perGroup: 2 });
  assert.deepEqual(client.calls[2].values, ['q', null, 1, 60, 2]);
  assert.match(client.calls[2].text, /per => make_interval\(secs => \$4::double precision\), per_group => \$5::integer\)/);
  await limit(client, 'q', { perGroup: null });
  assert.doesNotMatch(client.calls[3].text, /per_group/);
});

test('enqueue sends on_conflict (by name) only when onConflict is set, so 0.11.0 databases still take it', async () => {
  const client = recordingClient({ id: '1', key: 'k', inserted: false });
  await enqueue(client, 'q', { n: 1 }, { key: 'k' });
  assert.doesNotMatch(client.calls[0].text, /on_conflict/);
  await enqueue(client, 'q', { n: 2 }, { key: 'k', onConflict: 'replace' });
  assert.match(client.calls[1].text, /on_conflict => \$4::text/);
  assert.deepEqual(client.calls[1].values, ['q', '{"n":2}', 'k', 'replace']);
  await enqueue(client, 'q', {}, { key: 'k', groupKey: 'g', onConflict: 'preserve_run_at' });
  assert.match(client.calls[2].text, /group_key => \$4::text, on_conflict => \$5::text/);
});

test('enqueue sends after and on_parent_failure (by name) only when set, so older databases still take it', async () => {
  const client = recordingClient({ id: '3', key: 'c', inserted: true });
  for (const after of [undefined, null, []]) {
    await enqueue(client, 'q', {}, { key: 'c', after });
  }
  for (const { text } of client.calls) assert.doesNotMatch(text, /after|on_parent_failure/);
  await enqueue(client, 'q', {}, { key: 'c', after: ['1', 2n, 3] });
  assert.match(client.calls[3].text, /after => \$4::bigint\[\]\)/);
  assert.deepEqual(client.calls[3].values, ['q', '{}', 'c', ['1', '2', '3']]);
  await enqueue(client, 'q', {}, { groupKey: 'g', onConflict: 'keep', after: ['1', null], onParentFailure: 'run' });
  assert.match(client.calls[4].text,
    /group_key => \$3::text, on_conflict => \$4::text, after => \$5::bigint\[\], on_parent_failure => \$6::text\)/);
  assert.deepEqual(client.calls[4].values, ['q', '{}', 'g', 'keep', ['1', null], 'run']);
  await assert.rejects(enqueue(client, 'q', {}, { after: '1' }), InvalidArgument);
  assert.equal(client.calls.length, 5, 'nothing sent for an after that is not an array');
});

test('enqueueMany sends one element per item, and a column or option only when set', async () => {
  const client = recordingClient({ id: '1', key: 'k', inserted: true });
  await enqueueMany(client, 'q', [{ payload: { n: 1 } }, {}, { payload: [1, 2] }, { payload: null }]);
  assert.match(client.calls[0].text,
    /work_enqueue_many\(queue => \$1::text, payloads => \$2::jsonb\[\]\)/);
  // undefined: {} as in enqueue; null: the JSON null; an array stays one JSON value.
  assert.deepEqual(client.calls[0].values, ['q', ['{"n":1}', '{}', '[1,2]', 'null']]);
  const at = new Date('2026-12-07T10:00:00Z');
  await enqueueMany(client, 'q', [{ key: 'a', groupKey: 'g' }, { runAt: at }, {}],
    { priority: 1, maxAttempts: 3, onConflict: 'replace' });
  assert.match(client.calls[1].text, new RegExp(['keys => \\$3::text\\[\\]',
    'run_at => \\$4::timestamptz\\[\\]', 'priority => \\$5::integer',
    'max_attempts => \\$6::integer', 'group_keys => \\$7::text\\[\\]',
    'on_conflict => \\$8::text\\)'].join(', ')));
  assert.deepEqual(client.calls[1].values, ['q', ['{}', '{}', '{}'], ['a', null, null],
    [null, '2026-12-07T10:00:00.000Z', null], 1, 3, ['g', null, null], 'replace']);
  for (const bad of [undefined, 'ab', { payload: 1 }, [null], ['x']]) {
    await assert.rejects(enqueueMany(client, 'q', bad), InvalidArgument);
  }
  assert.equal(client.calls.length, 2, 'nothing sent for items that are not an array of objects');
});

/** A client answering each statement with the next of `answers` (rows), recording the calls. */
function scriptedClient(answers) {
  const calls = [];
  return {
    calls,
    async query(text, values) {
      calls.push({ text, values });
      return { rows: answers.shift() ?? [] };
    },
  };
}

test('awaitResult calls work_await again until the item is over, and answers null for no item', async () => {
  const pending = { state: 'pending', result: null, last_error: null };
  const client = scriptedClient([[pending], [{ ...pending, state: 'claimed' }],
    [{ state: 'done', result: { n: 1 }, last_error: 'Error: first try' }]]);
  assert.deepEqual(await awaitResult(client, 'q', 'k', { timeout: Infinity }),
    { state: 'done', result: { n: 1 }, lastError: 'Error: first try' });
  assert.equal(client.calls.length, 3);
  for (const call of client.calls) {
    assert.match(call.text, /workfence\.work_await\(\$1::text, \$2::text, make_interval\(secs => \$3::double precision\)\)/);
    assert.deepEqual(call.values.slice(0, 2), ['q', 'k']);
    assert.equal(call.values[2], 3600, 'each call may wait an hour; the server caps it');
  }
  assert.equal(await awaitResult(scriptedClient([[]]), 'q', 'missing'), null);
  for (const state of ['failed', 'cancelled']) {
    const once = scriptedClient([[{ state, result: null, last_error: null }]]);
    assert.equal((await awaitResult(once, 'q', 'k')).state, state);
    assert.equal(once.calls.length, 1);
  }
});

test('awaitResult with timeout 0 looks once without waiting and returns the state then', async () => {
  const client = scriptedClient([[{ state: 'claimed', result: null, last_error: null }]]);
  assert.deepEqual(await awaitResult(client, 'q', 'k', { timeout: 0 }),
    { state: 'claimed', result: null, lastError: null });
  assert.equal(client.calls.length, 1);
  assert.equal(client.calls[0].values[2], 0);
  // The default timeout is 30 s: the first call waits at most that.
  const byDefault = scriptedClient([[{ state: 'done', result: 1, last_error: null }]]);
  await awaitResult(byDefault, 'q', 'k');
  assert.ok(byDefault.calls[0].values[2] <= 30 && byDefault.calls[0].values[2] > 29);
  for (const bad of [-1, Number.NaN, '5']) {
    await assert.rejects(awaitResult(client, 'q', 'k', { timeout: bad }), InvalidArgument);
  }
  assert.equal(client.calls.length, 1, 'a bad timeout sends nothing');
});

test('failureText records the error\'s type, message, stack frames and causes', () => {
  class InvoiceMissing extends Error {}
  function lookup() { throw new InvoiceMissing('invoice', { cause: new TypeError('x is not a function') }); }
  let thrown;
  try { lookup(); } catch (err) { thrown = err; }
  const lines = failureText(thrown).split('\n');
  assert.equal(lines[0], 'InvoiceMissing: invoice');
  assert.match(lines[1], /^ {4}at lookup \(.*unit\.test\.js:\d+:\d+\)$/);
  assert.equal(lines.at(-1), 'caused by: TypeError: x is not a function');
  assert.ok(lines.slice(1, -1).every((l) => /^\s+at /.test(l)), lines.join('\n'));
  try { null.f(); } catch (err) { thrown = err; }
  assert.match(failureText(thrown), /^TypeError: Cannot read properties of null \(reading 'f'\)\n {4}at /);
  // A server error names its SQLSTATE; a name of its own is kept; no message, no colon.
  const server = Object.assign(new pg.DatabaseError('duplicate key', 0, 'error'), { code: '23505' });
  assert.match(failureText(server), /^DatabaseError: duplicate key \(23505\)\n/);
  assert.match(failureText(fromPgError(Object.assign(new pg.DatabaseError('lease lost', 0, 'error'),
    { code: '55000' }))), /^LeaseLost: lease lost \(55000\)/);
  assert.match(failureText(new RangeError()), /^RangeError\n/);
  // Values that are not Errors: their JSON or String().
  assert.equal(failureText('plain text'), 'plain text');
  assert.equal(failureText({ code: 7 }), '{"code":7}');
  assert.equal(failureText(undefined), 'undefined');
});

test('failureText is bounded to the server\'s 2048 bytes of UTF-8, cutting whole lines, and its first line to 1024', () => {
  assert.equal(ERROR_TEXT_MAX_BYTES, 2048);
  assert.equal(ERROR_HEAD_MAX_BYTES, 1024);
  const deep = (n) => (n === 0 ? new Error('deep') : deep(n - 1));
  const saved = Error.stackTraceLimit;
  Error.stackTraceLimit = 500;
  let text;
  try {
    text = failureText(deep(400));
  } finally {
    Error.stackTraceLimit = saved;
  }
  assert.ok(Buffer.byteLength(text) <= 2048, `${Buffer.byteLength(text)} bytes`);
  assert.ok(Buffer.byteLength(text) > 1900, 'the room is used');
  const lines = text.split('\n');
  assert.equal(lines[0], 'Error: deep');
  assert.match(lines[1], /^ {4}at deep /, 'the newest frame first');
  assert.match(lines.at(-1), /^\[cut: \d+ more lines\]$/);
  assert.ok(lines.slice(1, -1).every((l) => /^\s+at /.test(l)), 'only whole frames are kept');
  // A long message: its line cut at a character boundary (no broken UTF-8) to 1024 bytes, then
  // "...", and the frames after it.
  const long = failureText(new Error('\u00e9'.repeat(3000)));
  const [head, ...frames] = long.split('\n');
  assert.ok(Buffer.byteLength(head) <= 1024 && Buffer.byteLength(head) > 1015, `${Buffer.byteLength(head)}`);
  assert.ok(head.startsWith('Error: \u00e9\u00e9') && head.endsWith('\u00e9...'), head.slice(-10));
  assert.ok(!long.includes('\uFFFD'));
  assert.ok(frames.length > 0 && frames.every((l) => /^\s+at /.test(l)));
  assert.ok(Buffer.byteLength(long) <= 2048);
});
