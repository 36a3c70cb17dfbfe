// Shared by the integration tests: the DSN, fresh queue names, a logger that records, and
// waiting on a condition with a deadline (never a bare sleep).

import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

import { connectionConfig } from '../index.js';

/** The test cluster's DSN; throws (the test FAILS) when WORKFENCE_TEST_DSN is unset. */
export function testDsn() {
  const dsn = process.env.WORKFENCE_TEST_DSN;
  if (!dsn) {
    throw new Error('WORKFENCE_TEST_DSN is not set: run the suite with '
      + '`bash scripts/client-tests.sh node` (it starts a cluster with the extension)');
  }
  return dsn;
}

/** A connected pg.Client on the test database; the caller ends it. */
export async function connect() {
  const client = new pg.Client(connectionConfig(testDsn()));
  await client.connect();
  return client;
}

/** A queue name no other test uses. */
export function freshQueue(prefix = 'node-test') {
  return `${prefix}-${randomBytes(6).toString('hex')}`;
}

/** A logger that keeps every line with its level (and prints nothing). */
export function recordingLogger() {
  const lines = [];
  const at = (level) => (message) => { lines.push({ level, message }); };
  return {
    lines,
    debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'),
    /** Messages only. */
    messages() { return lines.map((l) => l.message); },
    /** Whether a line matching `re` was logged. */
    has(re) { return lines.some((l) => re.test(l.message)); },
  };
}

/**
 * Polls `condition` (sync or async) every 20 ms until it returns a truthy value, which is
 * returned; fails after `seconds`.
 */
export async function waitFor(what, condition, seconds = 10) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await sleep(20);
  }
}

/** The item's row from workfence.work_item (by id), with `lapsed` (lease_until in the past). */
export async function itemRow(client, id) {
  const { rows: [row] } = await client.query(
    `SELECT state, epoch::text AS epoch, attempts, owner, result, errors, lease_until,
            lease_until < clock_timestamp() AS lapsed
       FROM workfence.work_item($1::bigint)`, [id]);
  return row;
}

/** A promise with its resolve function, for handlers the test lets go. */
export function gate() {
  let open;
  const promise = new Promise((resolve) => { open = resolve; });
  return { promise, open };
}

/**
 * A TCP proxy in front of the test cluster that can lose one reply: after `cutAfter(pattern)`,
 * the first connection that sends a message containing `pattern` (the statement's text) has it
 * forwarded to the server, and is then cut once the server's answer has ended (its
 * ReadyForQuery, sent after the statement committed), without that answer reaching the client:
 * a reply lost to a dropped connection after the commit, exactly. Other traffic passes through.
 * @returns {Promise<{port: number, cutAfter(pattern: string): Promise<void>, close(): Promise<void>}>}
 *   `cutAfter` resolves once the cut is done
 */
export async function replyCuttingProxy() {
  const { host, port } = connectionConfig(testDsn());
  let armed = null; // { pattern: Buffer, done: () => void }
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, host);
    sockets.add(client);
    sockets.add(upstream);
    let cutting = null; // the armed cut this connection took
    let tail = Buffer.alloc(0); // the end of the last chunk, for a pattern split across chunks
    let answer = Buffer.alloc(0);
    client.on('data', (chunk) => {
      const seen = Buffer.concat([tail, chunk]);
      tail = seen.subarray(Math.max(0, seen.length - 64));
      if (armed && !cutting && seen.includes(armed.pattern)) {
        cutting = armed;
        armed = null;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!cutting) {
        client.write(chunk);
        return;
      }
      answer = Buffer.concat([answer, chunk]);
      const end = answer.subarray(-6);
      // ReadyForQuery: 'Z', length 5, status 'I' (idle: the statement's transaction committed).
      if (end.length === 6 && end[0] === 0x5a && end.readInt32BE(1) === 5 && end[5] === 0x49) {
        client.destroy();
        upstream.destroy();
        cutting.done();
      }
    });
    const end = () => { client.destroy(); upstream.destroy(); };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', () => { sockets.delete(client); end(); });
    upstream.on('close', () => { sockets.delete(upstream); end(); });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    cutAfter(pattern) {
      return new Promise((done) => { armed = { pattern: Buffer.from(pattern), done }; });
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
