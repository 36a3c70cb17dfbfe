#!/usr/bin/env node
// The overhead benchmark of the Node.js library (scripts/client-bench.sh runs it): items/s
// through the worker runner against the same loop in raw SQL calls, in the same run.
//
// usage: node clients/node/bench.js --dsn DSN [--items N] [--rounds R] [--batch B]
//
// Each round enqueues N items ('{}' payloads) into a fresh queue for each mode and times it,
// alternating which mode goes first:
//   raw:     one connection; work_claim(queue, owner, '30 s', B), then work_finish per item,
//            until N are finished;
//   library: the Worker with concurrency 1, batchSize B and a handler returning {"ok": true},
//            until N are finished, then stopped.
// stdout gets exactly one line per measurement:
//   bench lang=node mode=raw|library round=<r> items=<N> seconds=<s.sss> items_per_s=<x.x>

import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';

import { Worker, connectionConfig } from './index.js';

const OWNER = 'bench-node';

/** Enqueues `items` '{}' items into a fresh queue; returns its name. */
async function fill(db, mode, items) {
  const queue = `bench-node-${mode}-${randomBytes(5).toString('hex')}`;
  // A set-returning function in the select list runs once per row of generate_series.
  await db.query(
    "SELECT count(*) FROM (SELECT workfence.work_enqueue($1, '{}'::jsonb) FROM generate_series(1, $2::int)) AS e",
    [queue, items],
  );
  return queue;
}

/** The raw loop on one connection; resolves when `items` are finished. */
async function raw(dsnConfig, queue, items, batch) {
  const client = new pg.Client(dsnConfig);
  await client.connect();
  try {
    let finished = 0;
    while (finished < items) {
      const { rows } = await client.query(
        "SELECT id, epoch FROM workfence.work_claim($1, $2, interval '30 s', $3)", [queue, OWNER, batch]);
      for (const { id, epoch } of rows) {
        const { rows: [{ ok }] } = await client.query(
          `SELECT workfence.work_finish($1, $2, $3, '{"ok": true}') AS ok`, [id, OWNER, epoch]);
        if (!ok) throw new Error(`raw: finish of ${id} refused`);
        finished += 1;
      }
    }
  } finally {
    await client.end();
  }
}

/**
 * The library's runner; resolves when `items` are finished and it has stopped. The handler that
 * gets the last item asks for the stop; the shutdown lets it finish (the grace) before run()
 * returns.
 */
async function library(dsnConfig, queue, items, batch) {
  let handled = 0;
  const logger = { debug() {}, info() {}, warn() {}, error: (m) => process.stderr.write(`${m}\n`) };
  const worker = new Worker({
    dsn: dsnConfig, queue, owner: OWNER, concurrency: 1, batchSize: batch, lease: 30, pollWait: 1,
    handleSignals: false, logger,
    handler: async () => {
      handled += 1;
      if (handled === items) worker.stop();
      return { ok: true };
    },
  });
  await worker.run();
  if (handled !== items) throw new Error(`library: ${handled} of ${items} handled`);
}

async function main() {
  const { values } = parseArgs({
    options: {
      dsn: { type: 'string' },
      items: { type: 'string', default: '2000' },
      rounds: { type: 'string', default: '3' },
      batch: { type: 'string', default: '10' },
    },
  });
  if (!values.dsn) throw new Error('--dsn is required');
  const items = Number(values.items);
  const rounds = Number(values.rounds);
  const batch = Number(values.batch);
  for (const [name, v] of [['items', items], ['rounds', rounds], ['batch', batch]]) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer`);
  }
  const config = connectionConfig(values.dsn);
  const db = new pg.Client(config);
  await db.connect();
  try {
    const modes = { raw, library };
    for (let round = 1; round <= rounds; round += 1) {
      const order = round % 2 === 1 ? ['raw', 'library'] : ['library', 'raw'];
      for (const mode of order) {
        const queue = await fill(db, mode, items);
        const began = process.hrtime.bigint();
        await modes[mode](config, queue, items, batch);
        const seconds = Number(process.hrtime.bigint() - began) / 1e9;
        process.stdout.write(`bench lang=node mode=${mode} round=${round} items=${items} `
          + `seconds=${seconds.toFixed(3)} items_per_s=${(items / seconds).toFixed(1)}\n`);
      }
    }
  } finally {
    await db.end();
  }
}

main().catch((err) => {
  process.stderr.write(`bench.js: ${err.stack ?? err}\n`);
  process.exit(1);
});
