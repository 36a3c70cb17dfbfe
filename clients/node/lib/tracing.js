// Trace context (from 0.12.0): OpenTelemetry across the queue, when it is installed.
//
// An item carries a W3C `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`),
// stored by `work_enqueue(..., trace)` and handed back with every claim. `enqueue` sends the one
// given as `options.trace`, else the active span's context; the runner shows it as `job.trace`
// and, when an OpenTelemetry SDK is registered (or `tracerProvider` is given), runs the handler
// inside a span `process <queue>` (kind CONSUMER) with a LINK to the enqueuer's span: the run is
// a trace of its own, linked to the one that enqueued it (as otelriver and opentelemetry_oban do).
//
// `@opentelemetry/api` is an optional peer dependency, imported on first use: without it, or
// with no SDK registered (the API's no-op tracer provider), nothing is sent, no span is made, and
// the cost is one check per enqueue and per job. The API has no W3C propagator of its own (that is
// in @opentelemetry/core), so the header is written and read here, by the W3C rules.

import { createRequire } from 'node:module';

const VERSION = createRequire(import.meta.url)('../package.json').version;

/** The instrumentation scope (tracer name) of the runner's spans. */
export const TRACER_NAME = 'workfence';

/** The OpenTelemetry API once looked for: undefined before, null when it is not installed. */
let api;
/** The promise of that look, while it runs. */
let loading = null;
/** The last provider {@link consumerTracer} made a tracer of, and that tracer. */
let cached = null;

/**
 * The `@opentelemetry/api` module, imported once; null when it is not installed (or fails to
 * load). Internal.
 * @returns {Promise<any>}
 */
export function loadApi() {
  if (api !== undefined) return Promise.resolve(api);
  loading ??= import('@opentelemetry/api').then(
    (module) => (module.trace ? module : module.default ?? null),
    () => null,
  ).then((module) => {
    api = module;
    return api;
  });
  return loading;
}

/**
 * Whether `@opentelemetry/api` can be imported.
 * @returns {Promise<boolean>}
 */
export async function tracingAvailable() {
  return (await loadApi()) !== null;
}

const HEX_ID = (length) => new RegExp(`^[0-9a-f]{${length}}$`);
const TRACE_ID = HEX_ID(32);
const SPAN_ID = HEX_ID(16);
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);
/** A traceparent as W3C Trace Context reads it (OpenTelemetry's propagators' pattern). */
const TRACEPARENT = /^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$/;
/** The most characters of a traceparent that is read (OpenTelemetry's bound). */
const TRACEPARENT_MAX = 512;

/**
 * The W3C `traceparent` of a span context: `00-<traceId>-<spanId>-<flags as 2 hex>`, as
 * OpenTelemetry's W3CTraceContextPropagator writes it; null for a missing or invalid context
 * (ids not lowercase hex of 32 and 16 digits, or all zeros). Needs no OpenTelemetry package.
 * @param {{traceId: string, spanId: string, traceFlags: number} | null | undefined} spanContext
 * @returns {string | null}
 */
export function formatTraceparent(spanContext) {
  if (!spanContext) return null;
  const { traceId, spanId, traceFlags } = spanContext;
  if (typeof traceId !== 'string' || !TRACE_ID.test(traceId) || traceId === ZERO_TRACE) return null;
  if (typeof spanId !== 'string' || !SPAN_ID.test(spanId) || spanId === ZERO_SPAN) return null;
  const flags = Number.isInteger(traceFlags) ? traceFlags & 0xff : 0;
  return `00-${traceId}-${spanId}-${flags.toString(16).padStart(2, '0')}`;
}

/**
 * The span context a W3C `traceparent` names, as OpenTelemetry's propagator reads it
 * (`isRemote: true`, `traceFlags` a number: 1 = sampled); null for a missing or malformed value
 * (wrong length or case, all-zero ids, version `ff`, fields after version `00`, over 512
 * characters). Needs no OpenTelemetry package.
 * @param {string | null | undefined} value
 * @returns {{traceId: string, spanId: string, traceFlags: number, isRemote: true} | null}
 */
export function parseTraceparent(value) {
  if (typeof value !== 'string' || value.length === 0 || value.length > TRACEPARENT_MAX) return null;
  const match = TRACEPARENT.exec(value);
  if (!match) return null;
  const [, version, traceId, spanId, flags, rest] = match;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return null;
  return { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
}

/**
 * The `traceparent` of the active span's context (what `enqueue` sends when it is given no
 * `trace`): null when `@opentelemetry/api` is not installed or no valid span context is active
 * (with no SDK registered there is none, unless one was propagated in).
 * @returns {Promise<string | null>}
 */
export async function currentTraceparent() {
  const otel = await loadApi();
  if (otel === null) return null;
  const spanContext = otel.trace.getSpanContext(otel.context.active());
  if (!spanContext || !otel.isSpanContextValid(spanContext)) return null;
  return formatTraceparent(spanContext);
}

/**
 * Whether `provider` is OpenTelemetry's no-op tracer provider (no SDK registered), also through
 * the API's proxy provider and across copies of the API.
 */
function isNoop(otel, provider) {
  let real = provider;
  if (typeof real?.getDelegate === 'function') real = real.getDelegate();
  if (!real || typeof real.getTracer !== 'function') return true;
  const noop = new otel.ProxyTracerProvider().getDelegate();
  return real === noop || real.constructor === noop.constructor
    || real.constructor?.name === 'NoopTracerProvider';
}

/**
 * The tracer of the runner's spans from `provider` (null/undefined: the global one), or null when
 * nothing is to be traced: the API is not installed (or not loaded yet: {@link loadApi}), or no
 * provider was given and the global one is the API's no-op provider. Internal.
 * @param {any} provider
 * @returns {any} a Tracer or null
 */
export function consumerTracer(provider) {
  if (!api) return null;
  let from = provider;
  if (from === null || from === undefined) {
    from = api.trace.getTracerProvider();
    if (isNoop(api, from)) return null;
  }
  if (cached !== null && cached.provider === from) return cached.tracer;
  const tracer = from.getTracer(TRACER_NAME, VERSION);
  cached = { provider: from, tracer };
  return tracer;
}

/**
 * Starts the span `process <queue>` (kind CONSUMER) of one job's run: a new trace (`root`, not a
 * child of what is active), linked to the enqueuer's span context when the job's `trace` parses,
 * with the attributes `messaging.system` (`pg_workfence`), `messaging.destination.name` (the
 * queue), `messaging.message.id` (the item id), `workfence.epoch` and `workfence.attempt`.
 * Internal.
 * @param {any} tracer
 * @param {string} queue
 * @param {{id: string, epoch: string, attempt: number, trace: string | null}} job
 */
export function startConsumerSpan(tracer, queue, job) {
  const linked = parseTraceparent(job.trace);
  return tracer.startSpan(`process ${queue}`, {
    kind: api.SpanKind.CONSUMER,
    root: true,
    links: linked ? [{ context: linked }] : [],
    attributes: {
      'messaging.system': 'pg_workfence',
      'messaging.destination.name': queue,
      'messaging.message.id': job.id,
      'workfence.epoch': job.epoch,
      'workfence.attempt': job.attempt,
    },
  });
}

/**
 * Calls `fn()` with `span` active (where a context manager is registered), so that spans the
 * handler makes are the span's children. Internal.
 * @template T
 * @param {any} span
 * @param {() => T} fn
 * @returns {T}
 */
export function withSpan(span, fn) {
  return api.context.with(api.trace.setSpan(api.context.active(), span), fn);
}

/**
 * The type name of an error: its `name` unless that is the generic `Error`, then its class's name
 * (`class InvoiceMissing extends Error {}` names `InvoiceMissing`), as `work_fail`'s text has it.
 */
function typeName(error) {
  const name = typeof error.name === 'string' ? error.name : '';
  if (name && name !== 'Error' && name !== 'error') return name;
  const cls = error.constructor?.name;
  return cls && cls !== 'Object' ? cls : (name || 'Error');
}

/**
 * Ends a job's span: a run that threw (or returned what is not JSON) has the exception recorded
 * and the error status with the error's text; one without an error but `reason` (`lease lost`:
 * its token was refused) the error status with that text. Internal.
 * @param {any} span
 * @param {{threw: boolean, error?: unknown, reason?: string | null}} outcome
 */
export function endConsumerSpan(span, { threw, error, reason = null }) {
  if (threw) {
    const exception = error instanceof Error ? error : String(error);
    span.recordException(exception);
    const message = error instanceof Error
      ? `${typeName(error)}${error.message ? `: ${error.message}` : ''}`
      : String(error);
    span.setStatus({ code: api.SpanStatusCode.ERROR, message });
  } else if (reason) {
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: reason });
  }
  span.end();
}
