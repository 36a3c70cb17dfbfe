// Unit tests of the trace context (from 0.12.0), no database: the traceparent's formatting and
// parsing, the active span's traceparent, the tracer of the runner's spans with and without an
// SDK, the statements enqueue sends in and out of a span (on a recording client), and the
// library without @opentelemetry/api (in a child process that cannot resolve it). This file's
// process registers a context manager (so that spans can be active) but never a global tracer
// provider: the global one stays the API's no-op provider, "no SDK".

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';

import {
  Worker, currentTraceparent, enqueue, formatTraceparent, parseTraceparent, tracingAvailable,
} from '../index.js';
import { consumerTracer, loadApi } from '../lib/tracing.js';

const here = path.dirname(fileURLToPath(import.meta.url));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';
const GIVEN = `00-${TRACE_ID}-${SPAN_ID}-01`;

/** An SDK tracer provider of the test's own (not registered globally). */
function sdkProvider() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { provider, exporter };
}

/**
 * A stand-in client recording each statement; the probe for work_enqueue's `trace` argument is
 * answered with `takesTrace`, anything else with an enqueue's row.
 */
function recordingClient(takesTrace = true) {
  const calls = [];
  return {
    calls,
    async query(text, values) {
      calls.push({ text, values });
      if (text.includes('pg_catalog.pg_proc')) return { rows: [{ takes: takesTrace }], rowCount: 1 };
      return { rows: [{ id: '1', key: 'k', inserted: true }], rowCount: 1 };
    },
  };
}

test('formatTraceparent writes the W3C header of a span context; null for an invalid one', () => {
  assert.equal(formatTraceparent({ traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 1 }), GIVEN);
  assert.equal(formatTraceparent({ traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 0 }), `00-${TRACE_ID}-${SPAN_ID}-00`);
  assert.equal(formatTraceparent({ traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 3 }), `00-${TRACE_ID}-${SPAN_ID}-03`);
  for (const bad of [
    null, undefined, { traceId: '0'.repeat(32), spanId: SPAN_ID, traceFlags: 1 },
    { traceId: TRACE_ID, spanId: '0'.repeat(16), traceFlags: 1 },
    { traceId: TRACE_ID.toUpperCase(), spanId: SPAN_ID, traceFlags: 1 },
    { traceId: TRACE_ID.slice(1), spanId: SPAN_ID, traceFlags: 1 },
  ]) {
    assert.equal(formatTraceparent(bad), null, JSON.stringify(bad));
  }
});

test('parseTraceparent reads ids and flags, and refuses what is not a traceparent', () => {
  assert.deepEqual(parseTraceparent(GIVEN), { traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 1, isRemote: true });
  assert.equal(parseTraceparent(`00-${TRACE_ID}-${SPAN_ID}-00`).traceFlags, 0);
  assert.equal(formatTraceparent(parseTraceparent(GIVEN)), GIVEN);
  // A later version may carry more fields: read, the rest ignored.
  assert.equal(parseTraceparent(`01-${TRACE_ID}-${SPAN_ID}-01-more`).spanId, SPAN_ID);
  for (const bad of [
    null, undefined, '', 'nope', GIVEN.slice(0, -1), GIVEN.toUpperCase(),
    `00-${'0'.repeat(32)}-${SPAN_ID}-01`, `00-${TRACE_ID}-${'0'.repeat(16)}-01`,
    `ff-${TRACE_ID}-${SPAN_ID}-01`, `${GIVEN}-extra`, `${GIVEN}${' '.repeat(600)}`,
  ]) {
    assert.equal(parseTraceparent(bad), null, String(bad));
  }
});

test('currentTraceparent is the active span\'s; null without one, and for the API\'s no-op tracer', async () => {
  const { provider } = sdkProvider();
  assert.equal(await tracingAvailable(), true);
  assert.equal(await currentTraceparent(), null);
  await provider.getTracer('test').startActiveSpan('produce', async (span) => {
    const { traceId, spanId, traceFlags } = span.spanContext();
    assert.equal(await currentTraceparent(), `00-${traceId}-${spanId}-0${traceFlags}`);
    span.end();
  });
  assert.equal(await currentTraceparent(), null);
  await trace.getTracer('test').startActiveSpan('no sdk', async (span) => {
    assert.equal(await currentTraceparent(), null);
    span.end();
  });
});

test('with no SDK registered the runner makes no tracer; a provider given is used', async () => {
  await loadApi();
  assert.equal(consumerTracer(null), null);
  const { provider } = sdkProvider();
  const tracer = consumerTracer(provider);
  assert.ok(tracer);
  assert.equal(consumerTracer(provider), tracer);
  assert.throws(() => new Worker({ dsn: 'host=x', queue: 'q', handler() {}, tracerProvider: {} }),
    /tracerProvider must be an OpenTelemetry TracerProvider/);
  assert.equal(new Worker({ dsn: 'host=x', queue: 'q', handler() {}, tracerProvider: provider }).tracerProvider, provider);
});

test('enqueue outside a span sends no trace and asks nothing more', async () => {
  const client = recordingClient();
  await enqueue(client, 'q', {}, { key: 'k' });
  assert.equal(client.calls.length, 1);
  assert.doesNotMatch(client.calls[0].text, /trace/);
});

test('enqueue in a span sends its traceparent where work_enqueue takes one (asked once per client); a given trace as it is', async () => {
  const { provider } = sdkProvider();
  const fresh = recordingClient(true);
  const old = recordingClient(false);
  let expected;
  await provider.getTracer('test').startActiveSpan('produce', async (span) => {
    expected = await currentTraceparent();
    for (let i = 0; i < 2; i += 1) {
      await enqueue(fresh, 'q', {}, { key: 'k' });
      await enqueue(old, 'q', {}, { key: 'k' });
    }
    await enqueue(old, 'q', {}, { key: 'k', trace: GIVEN });
    span.end();
  });
  const probes = (client) => client.calls.filter((c) => c.text.includes('pg_catalog.pg_proc')).length;
  assert.equal(probes(fresh), 1);
  assert.equal(probes(old), 1);
  const traced = (client) => client.calls.filter((c) => /trace => \$\d+::text/.test(c.text)).map((c) => c.values.at(-1));
  assert.deepEqual(traced(fresh), [expected, expected]);
  // A trace given is sent unchanged, asked nothing (an older server refuses it: 42883).
  assert.deepEqual(traced(old), [GIVEN]);
  const client = recordingClient();
  await enqueue(client, 'q', {}, { trace: GIVEN, onConflict: 'replace' });
  assert.match(client.calls[0].text, /on_conflict => \$3::text, trace => \$4::text/);
  assert.deepEqual(client.calls[0].values, ['q', '{}', 'replace', GIVEN]);
});

test('without @opentelemetry/api the library imports and works unchanged', async () => {
  // A resolve hook that fails every @opentelemetry/ import, as where the peer is not installed.
  const hook = `data:text/javascript,${encodeURIComponent(`
    export async function resolve(specifier, ctx, next) {
      if (specifier.startsWith('@opentelemetry/')) {
        const err = new Error('Cannot find package ' + specifier);
        err.code = 'ERR_MODULE_NOT_FOUND';
        throw err;
      }
      return next(specifier, ctx);
    }`)}`;
  const register = `data:text/javascript,${encodeURIComponent(
    `import { register } from 'node:module'; register(${JSON.stringify(hook)});`)}`;
  const script = `
    import assert from 'node:assert/strict';
    import { Worker, currentTraceparent, enqueue, parseTraceparent, tracingAvailable } from './index.js';
    import { consumerTracer } from './lib/tracing.js';
    await assert.rejects(import('@opentelemetry/api'));
    assert.equal(await tracingAvailable(), false);
    assert.equal(await currentTraceparent(), null);
    assert.equal(consumerTracer(null), null);
    assert.equal(parseTraceparent(${JSON.stringify(GIVEN)}).spanId, ${JSON.stringify(SPAN_ID)});
    const calls = [];
    const client = { async query(text, values) { calls.push(text); return { rows: [{ id: '1', key: 'k', inserted: true }] }; } };
    await enqueue(client, 'q', {});
    assert.equal(calls.length, 1);
    assert.doesNotMatch(calls[0], /trace/);
    new Worker({ dsn: 'host=x', queue: 'q', handler() {} });
    console.log('ok');
  `;
  const { stdout, stderr } = await promisify(execFile)(process.execPath,
    ['--import', register, '--input-type=module', '--eval', script],
    { cwd: path.join(here, '..') }).catch((err) => err);
  assert.equal(stdout.trim(), 'ok', stderr);
});
