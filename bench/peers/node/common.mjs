// Shared plumbing for the Node.js peer runners of scripts/bench.sh (pgboss.mjs, graphile.mjs):
// argument parsing, the monitor connection (LSN reads, completion polling, verification), the
// timed phase, and the one JSON line on stdout. Everything else goes to stderr.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const here = dirname(fileURLToPath(import.meta.url));

// How often the monitor connection counts finished jobs while the workers run: the resolution of
// the timed phase's end.
export const POLL_MS = 20;

export function log(...parts) {
  process.stderr.write(parts.join(' ') + '\n');
}

export function fail(message) {
  log(`error: ${message}`);
  process.exit(1);
}

// --dsn URL --jobs N --concurrency C, each required; --batch B, optional: the runner's batched
// configuration, fetching up to B jobs at a time (each runner's header says what B sets). Nothing
// else. `batch` is undefined without --batch.
const USAGE = 'usage: --dsn URL --jobs N --concurrency C [--batch B]';
export function parseArgs(argv = process.argv.slice(2)) {
  const out = {};
  const names = { '--dsn': 'dsn', '--jobs': 'jobs', '--concurrency': 'concurrency', '--batch': 'batch' };
  const optional = new Set(['--batch']);
  for (let i = 0; i < argv.length; i++) {
    let flag = argv[i];
    let value;
    const eq = flag.indexOf('=');
    if (flag.startsWith('--') && eq > 0) {
      value = flag.slice(eq + 1);
      flag = flag.slice(0, eq);
    } else {
      value = argv[++i];
    }
    const key = names[flag];
    if (!key) fail(`unknown argument ${flag}; ${USAGE}`);
    if (value === undefined) fail(`${flag} needs a value`);
    out[key] = value;
  }
  for (const flag of Object.keys(names)) {
    if (out[names[flag]] === undefined && !optional.has(flag)) fail(`missing ${flag}; ${USAGE}`);
  }
  for (const key of ['jobs', 'concurrency', 'batch']) {
    if (out[key] === undefined) continue;
    if (!/^[1-9][0-9]*$/.test(out[key])) fail(`--${key} must be a positive integer, got ${out[key]}`);
    out[key] = Number(out[key]);
  }
  return out;
}

// The exact installed version of a package, from its own package.json in node_modules.
export function installedVersion(pkg) {
  const require = createRequire(join(here, 'package.json'));
  let dir = dirname(require.resolve(pkg));
  for (;;) {
    try {
      const meta = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
      if (meta.name === pkg) return meta.version;
    } catch {
      // not the package root yet
    }
    const up = dirname(dir);
    if (up === dir) throw new Error(`cannot find package.json of ${pkg}`);
    dir = up;
  }
}

// One plain connection outside the library's pool, for the LSN reads, the completion polling and
// the verification.
export async function monitorClient(dsn) {
  const client = new pg.Client({ connectionString: dsn, application_name: 'bench-monitor' });
  await client.connect();
  return client;
}

export async function currentLsn(client) {
  const { rows } = await client.query('SELECT pg_current_wal_insert_lsn()::text AS lsn');
  return rows[0].lsn;
}

export async function walBytes(client, before, after) {
  const { rows } = await client.query('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint::text AS d', [after, before]);
  return Number(rows[0].d);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The timed phase: reads the LSN, starts the clock, calls start() (which starts the workers), then
// runs `progress` (a query returning { done, failed }) every POLL_MS until done >= jobs; stops the
// clock and reads the LSN again. Fails on any failed job, a worker error reported through
// `errors`, or no progress for `stallSeconds`.
export async function timedRun({ client, jobs, start, progress, errors, stallSeconds = 120 }) {
  const lsnBefore = await currentLsn(client);
  const t0 = process.hrtime.bigint();
  const handle = await start();
  log(`workers started ${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(1)} ms into the timed phase`);
  let last = -1;
  let lastChange = t0;
  for (;;) {
    if (errors.length) throw errors[0];
    const { done, failed } = await progress();
    const now = process.hrtime.bigint();
    if (failed > 0) throw new Error(`${failed} job(s) failed during the run`);
    if (done >= jobs) {
      const seconds = Number(now - t0) / 1e9;
      const lsnAfter = await currentLsn(client);
      return { handle, seconds, wal_bytes: await walBytes(client, lsnBefore, lsnAfter), done };
    }
    if (done !== last) {
      last = done;
      lastChange = now;
    } else if (Number(now - lastChange) / 1e9 > stallSeconds) {
      throw new Error(`no progress for ${stallSeconds} s: ${done} of ${jobs} jobs done`);
    }
    await sleep(POLL_MS);
  }
}

export function report(fields) {
  process.stdout.write(JSON.stringify(fields) + '\n');
}
