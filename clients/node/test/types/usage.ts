// Compiled (never run) by test/types.test.js against index.d.ts: the documented usage must
// type-check, and the marked misuses must not.
import {
  Worker, Job, LeaseLost, WorkfenceError, NotPermitted, enqueue, item, limit, pause, resume, retry,
  reschedule, cancel, connectionConfig, fromPgError, defaultOwner, schedule, unschedule,
  pauseSchedule, resumeSchedule, fireSchedules, schedules, UndefinedObject, type Queryable,
  type Logger, type Schedule, awaitResult, type AwaitedResult, type Json, formatTraceparent,
  parseTraceparent, currentTraceparent, tracingAvailable, type TraceSpanContext,
  type TracerProviderLike, workflow, type WorkflowItem, type OnParentFailure, UnknownParent,
  enqueueMany, type EnqueueManyItem, type EnqueueManyOptions,
} from 'workfence';

declare const client: Queryable;

interface Payload { n: number; sleep_ms: number }

async function usage(): Promise<void> {
  const { id, key, inserted }: { id: string; key: string; inserted: boolean } =
    await enqueue(client, 'q', { n: 1 }, { key: 'k', runAt: new Date(), priority: 1, maxAttempts: 3, maxRun: 60 });
  const row = await item(client, 'q', key);
  if (row) { const state: string = row.state; const epoch: string | null = row.epoch; void state; void epoch; }
  await item(client, id);
  const flags: boolean[] = [await pause(client, 'q'), await resume(client, 'q'), await retry(client, 'q', 'k'),
    await reschedule(client, 'q', 'k', new Date()), await cancel(client, 'q', 'k')];
  void flags; void inserted;
  await enqueue(client, 'q', { n: 2 }, { groupKey: 'customer-42' });
  const lifted: void = await limit(client, 'q');
  void lifted;
  await limit(client, 'q', { concurrency: 5, rate: 100, per: 60 });
  await limit(client, 'q', { concurrency: null });
  await limit(client, 'q', { perGroup: 4 });
  await limit(client, 'q', { concurrency: 2, perGroup: null });
  // @ts-expect-error perGroup is a number
  await limit(client, 'q', { perGroup: '4' });
  // @ts-expect-error per is a number of seconds, not text
  await limit(client, 'q', { rate: 1, per: '1 minute' });
  // @ts-expect-error the group key is text
  await enqueue(client, 'q', {}, { groupKey: 42 });

  const changed: boolean = await schedule(client, 'nightly', '0 2 * * *', 'reports', { kind: 'daily' },
    { timezone: 'Europe/Berlin', catchUp: 'all', priority: 1, maxAttempts: 3, groupKey: 'g' });
  await schedule(client, 'hourly', '@hourly', 'reports');
  const toggled: boolean[] = [await pauseSchedule(client, 'nightly'), await resumeSchedule(client, 'nightly'),
    await unschedule(client, 'nightly')];
  const fired: number = await fireSchedules(client);
  const listed: Schedule[] = await schedules(client);
  for (const s of listed) {
    const next: Date | null = s.next_slot; const lastItem: string | null = s.last_item_id;
    const paused: boolean = s.paused; void next; void lastItem; void paused;
  }
  void changed; void toggled; void fired;
  // @ts-expect-error catchUp is 'latest', 'all' or 'none'
  await schedule(client, 'n', '@daily', 'q', {}, { catchUp: 'sometimes' });
  // @ts-expect-error the cron expression is text
  await schedule(client, 'n', 5, 'q');
  const unknown = fromPgError(new Error('x'));
  if (unknown instanceof UndefinedObject) { void unknown.code; }

  await enqueue(client, 'q', { n: 3 }, { key: 'k', onConflict: 'replace' });
  await enqueue(client, 'q', { n: 3 }, { key: 'k', onConflict: 'preserve_run_at', runAt: new Date() });
  // @ts-expect-error onConflict is 'keep', 'replace' or 'preserve_run_at'
  await enqueue(client, 'q', {}, { key: 'k', onConflict: 'update' });
  const awaited: AwaitedResult | null = await awaitResult(client, 'q', 'k', { timeout: 10 });
  if (awaited) {
    const st: 'pending' | 'claimed' | 'done' | 'failed' | 'cancelled' | 'waiting' = awaited.state;
    const res: Json = awaited.result; const le: string | null = awaited.lastError;
    void st; void res; void le;
  }
  await awaitResult(client, 'q', 'k');
  // @ts-expect-error the timeout is a number of seconds
  await awaitResult(client, 'q', 'k', { timeout: '10s' });
  await enqueue(client, 'q', {}, { trace: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
  // @ts-expect-error the trace is a traceparent string
  await enqueue(client, 'q', {}, { trace: { traceId: 'x' } });
  const parsed: TraceSpanContext | null = parseTraceparent('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
  const header: string | null = formatTraceparent(parsed);
  const active: string | null = await currentTraceparent();
  const otel: boolean = await tracingAvailable();
  void header; void active; void otel;
  const progressed = await item(client, 'q', 'k');
  if (progressed) { const p: Json = progressed.progress; void p; }

  const p1 = await enqueue(client, 'q', { n: 1 });
  const p2 = await enqueue(client, 'q', { n: 2 });
  await enqueue(client, 'q', {}, { after: [p1.id, p2.id] });
  const policy: OnParentFailure = 'run';
  await enqueue(client, 'q', {}, { after: [1n, 2], onParentFailure: policy });
  // @ts-expect-error onParentFailure is 'cancel' or 'run'
  await enqueue(client, 'q', {}, { after: [p1.id], onParentFailure: 'ignore' });
  // @ts-expect-error after is an array of ids
  await enqueue(client, 'q', {}, { after: p1.id });
  const graph: WorkflowItem[] = await workflow(client, p1.id);
  for (const step of graph) {
    const depth: number = step.depth; const parents: string[] = step.parents;
    const waiting: boolean = step.state === 'waiting';
    void depth; void parents; void waiting;
  }
  const many: Array<{ id: string; key: string; inserted: boolean }> = await enqueueMany(client, 'q', [
    { payload: { n: 1 }, key: 'a', runAt: new Date(), groupKey: 'g' }, { payload: [1, 2] }, {},
  ], { priority: 1, maxAttempts: 3, onConflict: 'replace' });
  const items: EnqueueManyItem[] = [{ key: null, runAt: '2026-12-07T10:00:00Z' }];
  const shared: EnqueueManyOptions = {};
  await enqueueMany(client, 'q', items, shared);
  void many;
  // @ts-expect-error items is an array of items
  await enqueueMany(client, 'q', { payload: 1 });
  // @ts-expect-error maxRun is not an option of enqueueMany
  await enqueueMany(client, 'q', [], { maxRun: 60 });
  // @ts-expect-error a key is text
  await enqueueMany(client, 'q', [{ key: 42 }]);
  // @ts-expect-error onConflict is 'keep', 'replace' or 'preserve_run_at'
  await enqueueMany(client, 'q', [], { onConflict: 'update' });
  const refused = fromPgError(new Error('x'));
  if (refused instanceof UnknownParent) { void refused.code; }

  const logger: Logger = console;
  const worker = new Worker<Payload>({
    dsn: 'host=localhost', queue: 'q', owner: defaultOwner(), concurrency: 2, batchSize: 4,
    lease: 30, pollWait: 5, shutdownGrace: 10, logger, handleSignals: false,
    retry: (attempt: number, _error: unknown) => Math.min(2 ** attempt, 60),
    handler: async (job: Job<Payload>) => {
      const n: number = job.payload.n;
      const signal: AbortSignal = job.signal;
      void signal;
      job.stopRenewing();
      const e: string = job.epoch;
      void e;
      const token: string = job.fencingToken;
      const resumeFrom: Json = job.checkpoint;
      const traceparent: string | null = job.trace;
      void traceparent;
      const stored: boolean = await job.progress({ step: 1 });
      const parentResults: Record<string, Json> | null = await job.parentResults();
      void parentResults;
      void resumeFrom; void stored;
      const sent: number = await job.guard(async (c) => {
        await c.query('INSERT INTO sent (token) VALUES ($1)', [token]);
        return 202;
      });
      void sent;
      // @ts-expect-error guard takes a callback
      await job.guard();
      return job.transaction(async (c) => {
        await c.query('INSERT INTO t VALUES ($1)', [n]);
        return { output: n * n };
      });
    },
  });
  const provider: TracerProviderLike = { getTracer: () => ({}) };
  const traced = new Worker({ dsn: 'x', queue: 'q', handler: async () => null, tracerProvider: provider });
  const given: TracerProviderLike | null = traced.tracerProvider;
  void given;
  // @ts-expect-error a tracer provider has getTracer
  new Worker({ dsn: 'x', queue: 'q', handler: async () => null, tracerProvider: {} });
  const stopped: Promise<void> = worker.stop();
  await worker.run();
  await stopped;
  const config = connectionConfig('host=x');
  void config;
  const err = fromPgError(new Error('x'));
  if (err instanceof LeaseLost) { const code: string = err.code; const d: string | undefined = err.detail; void code; void d; }
  if (err instanceof NotPermitted && err instanceof WorkfenceError) { void err.hint; }

  // @ts-expect-error queue is required
  new Worker({ dsn: 'x', handler: async () => null });
  // @ts-expect-error lease is a number of seconds, not text
  new Worker({ dsn: 'x', queue: 'q', handler: async () => null, lease: '30 seconds' });
  // @ts-expect-error ids are strings
  const wrong: number = (await enqueue(client, 'q')).id;
  void wrong;
}
void usage;
