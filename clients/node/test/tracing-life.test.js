// Integration tests of the trace context (from 0.12.0) against the cluster of WORKFENCE_TEST_DSN:
// an enqueue in a producer span, the runner's `process <queue>` span (kind CONSUMER, linked to the
// producer's span, its attributes, the error status of a handler that throws), a given trace passed
// through unchanged, nothing traced with no SDK, and a 0.11.0 database. The spans go to an
// in-memory exporter of a provider handed to each worker (`tracerProvider`); no global provider is
// registered, so the global one stays the API's no-op provider ("no SDK"). A context manager is
// registered, so that spans can be active.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';

import {
  SpanKind, SpanStatusCode, context, trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import pg from 'pg';

import {
  InvalidArgument, Worker, connectionConfig, enqueue, formatTraceparent, item,
} from '../index.js';
import {
  connect, freshQueue, recordingLogger, testDsn, waitFor,
} from './helpers.js';

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';
const GIVEN = `00-${TRACE_ID}-${SPAN_ID}-01`;

let db;
before(async () => { db = await connect(); });
const workers = new Set();
const providers = [];
after(async () => {
  await Promise.allSettled([...workers].map((w) => w.stop()));
  for (const provider of providers) await provider.shutdown();
  await db?.end();
});

/** An SDK tracer provider of the test's own and the exporter that keeps its finished spans. */
function sdkProvider() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  providers.push(provider);
  return { provider, exporter, tracer: provider.getTracer('test') };
}

/** A worker on `queue` with a recording logger; signals left alone (the test runner's own). */
function worker(queue, handler, options = {}) {
  const w = new Worker({
    dsn: testDsn(), queue, handler, logger: recordingLogger(), handleSignals: false, pollWait: 1,
    owner: 'node-tracing', shutdownGrace: 1, ...options,
  });
  workers.add(w);
  const running = w.run();
  running.catch(() => {}); // awaited by the test; keep an early rejection from being unhandled
  return { w, running };
}

/** Stops the worker and waits for run() to end. */
async function stop({ w, running }) {
  await w.stop();
  await running;
}

/** The finished spans `process <queue>`. */
function consumerSpans(exporter, queue) {
  return exporter.getFinishedSpans().filter((s) => s.name === `process ${queue}`);
}

/** The item's stored trace, read from the table. */
async function storedTrace(queue, key) {
  const { rows: [row] } = await db.query(
    'SELECT trace FROM workfence.items WHERE queue = $1 AND key = $2', [queue, key]);
  return row.trace;
}

test('the consumer span of a job enqueued in a span links to that span, with the attributes, as a trace of its own', async () => {
  const queue = freshQueue();
  const { provider, exporter, tracer } = sdkProvider();
  let produced;
  const made = await tracer.startActiveSpan('produce', async (span) => {
    produced = span.spanContext();
    try {
      return await enqueue(db, queue, { n: 1 }, { key: 'k' });
    } finally {
      span.end();
    }
  });
  assert.equal(await storedTrace(queue, 'k'), formatTraceparent(produced));
  const seen = [];
  const w = worker(queue, async (job) => {
    seen.push({ trace: job.trace, active: trace.getSpanContext(context.active()) });
    tracer.startSpan('inside').end(); // a child of the job's span
    return 'ok';
  }, { tracerProvider: provider });
  await waitFor('the consumer span', () => consumerSpans(exporter, queue).length === 1);
  await stop(w);
  const [span] = consumerSpans(exporter, queue);
  assert.equal(seen[0].trace, formatTraceparent(produced));
  assert.equal(span.kind, SpanKind.CONSUMER);
  assert.equal(span.parentSpanContext, undefined); // a trace of its own ...
  assert.notEqual(span.spanContext().traceId, produced.traceId);
  assert.equal(span.links.length, 1); // ... linked to the enqueuer's span
  assert.deepEqual([span.links[0].context.traceId, span.links[0].context.spanId], [produced.traceId, produced.spanId]);
  const row = await item(db, made.id);
  assert.deepEqual(span.attributes, {
    'messaging.system': 'pg_workfence',
    'messaging.destination.name': queue,
    'messaging.message.id': made.id,
    'workfence.epoch': row.epoch,
    'workfence.attempt': 1,
  });
  assert.equal(span.status.code, SpanStatusCode.UNSET);
  // The handler ran with the span active: its own spans are the span's children.
  assert.equal(seen[0].active.spanId, span.spanContext().spanId);
  const [inside] = exporter.getFinishedSpans().filter((s) => s.name === 'inside');
  assert.equal(inside.parentSpanContext.spanId, span.spanContext().spanId);
});

test('a handler that throws has an error span with the exception recorded, each attempt', async () => {
  const queue = freshQueue();
  const { provider, exporter, tracer } = sdkProvider();
  let produced;
  await tracer.startActiveSpan('produce', async (span) => {
    produced = span.spanContext();
    await enqueue(db, queue, {}, { maxAttempts: 2 });
    span.end();
  });
  class InvoiceMissing extends Error {}
  const w = worker(queue, async (job) => { throw new InvoiceMissing(`attempt ${job.attempt}`); },
    { tracerProvider: provider, retry: () => 0 });
  await waitFor('both attempts\' spans', () => consumerSpans(exporter, queue).length === 2);
  await stop(w);
  consumerSpans(exporter, queue).forEach((span, i) => {
    assert.equal(span.status.code, SpanStatusCode.ERROR);
    assert.equal(span.status.message, `InvoiceMissing: attempt ${i + 1}`);
    assert.equal(span.events.length, 1);
    assert.equal(span.events[0].name, 'exception');
    assert.equal(span.events[0].attributes['exception.message'], `attempt ${i + 1}`);
    assert.equal(span.attributes['workfence.attempt'], i + 1);
    assert.deepEqual([span.links[0].context.traceId, span.links[0].context.spanId], [produced.traceId, produced.spanId]);
  });
});

test('a trace given is passed through unchanged, whatever span is active; a malformed one is refused (22023)', async () => {
  const queue = freshQueue();
  const { provider, exporter, tracer } = sdkProvider();
  await tracer.startActiveSpan('produce', async (span) => {
    await enqueue(db, queue, {}, { key: 'a', trace: GIVEN });
    span.end();
  });
  await enqueue(db, queue, {}, { key: 'b', trace: `00-${TRACE_ID}-${SPAN_ID}-00` });
  assert.equal(await storedTrace(queue, 'a'), GIVEN);
  const seen = [];
  const w = worker(queue, async (job) => { seen.push(job.trace); }, { tracerProvider: provider });
  await waitFor('both consumer spans', () => consumerSpans(exporter, queue).length === 2);
  await stop(w);
  assert.deepEqual(seen.sort(), [`00-${TRACE_ID}-${SPAN_ID}-00`, GIVEN]);
  for (const span of consumerSpans(exporter, queue)) {
    assert.deepEqual([span.links[0].context.traceId, span.links[0].context.spanId], [TRACE_ID, SPAN_ID]);
  }
  await assert.rejects(enqueue(db, queue, {}, { trace: 'not a traceparent' }),
    (err) => err instanceof InvalidArgument && err.code === '22023');
});

test('with no SDK registered nothing is traced: the trace is null and no span is active in the handler', async () => {
  const queue = freshQueue();
  await trace.getTracer('test').startActiveSpan('no sdk', async (span) => {
    await enqueue(db, queue, {}, { key: 'a' });
    span.end();
  });
  await enqueue(db, queue, {}, { key: 'b' });
  assert.deepEqual([await storedTrace(queue, 'a'), await storedTrace(queue, 'b')], [null, null]);
  const seen = [];
  const w = worker(queue, async (job) => { seen.push([job.trace, trace.getSpanContext(context.active()) ?? null]); });
  await waitFor('both items done', async () => {
    const { rows: [{ n }] } = await db.query(
      "SELECT count(*)::int AS n FROM workfence.items WHERE queue = $1 AND state = 'done'", [queue]);
    return n === 2;
  });
  await stop(w);
  assert.deepEqual(seen, [[null, null], [null, null]]);
});

test('onConflict replace takes the new trace, keep leaves the old one; the claim hands out the item\'s', async () => {
  const queue = freshQueue();
  const other = '00-11111111111111111111111111111111-2222222222222222-01';
  await enqueue(db, queue, {}, { key: 'k', trace: GIVEN });
  await enqueue(db, queue, {}, { key: 'k', trace: other, onConflict: 'keep' });
  assert.equal(await storedTrace(queue, 'k'), GIVEN);
  await enqueue(db, queue, {}, { key: 'k', trace: other, onConflict: 'replace' });
  assert.equal(await storedTrace(queue, 'k'), other);
  let claimed;
  const w = worker(queue, async (job) => { claimed = job.trace; });
  await waitFor('the item claimed', () => claimed !== undefined);
  await stop(w);
  assert.equal(claimed, other);
});

test('against a 0.11.0 database: an enqueue in a span sends no trace, job.trace is null, the span has no link', async () => {
  const name = `workfence_node_0110_trace_${randomBytes(4).toString('hex')}`;
  await db.query(`CREATE DATABASE ${name}`);
  try {
    const dsn = { ...connectionConfig(testDsn()), database: name };
    const old = new pg.Client(dsn);
    await old.connect();
    try {
      await old.query("CREATE EXTENSION pg_workfence VERSION '0.11.0'");
      const queue = freshQueue();
      const { provider, exporter, tracer } = sdkProvider();
      await tracer.startActiveSpan('produce', async (span) => {
        await enqueue(old, queue, { n: 1 }, { key: 'k' });
        span.end();
      });
      // A trace given is sent: 0.11.0's work_enqueue has no such argument (42883).
      await assert.rejects(enqueue(old, queue, {}, { trace: GIVEN }), (err) => err.code === '42883');
      let seen;
      const w = worker(queue, async (job) => { seen = job.trace; }, { dsn, tracerProvider: provider });
      await waitFor('the consumer span', () => consumerSpans(exporter, queue).length === 1);
      await stop(w);
      assert.equal(seen, null);
      assert.deepEqual(consumerSpans(exporter, queue)[0].links, []);
    } finally {
      await old.end();
    }
  } finally {
    await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
});
