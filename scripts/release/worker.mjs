// The release test's Node.js worker (scripts/release-test.sh): run from a fresh npm project that
// installed only the packed `workfence` tarball and `pg`, never this repository.
//
// usage: node worker.mjs DSN
// Enqueues three items into queue `release-node` with the library, works them with its Worker
// (each handler returns its result: work_finish), and exits 0 once the server says all three are
// done with their results, 1 otherwise (after 60 s at most).
import pg from 'pg';
import { Worker, enqueue } from 'workfence';

const QUEUE = 'release-node';
const dsn = process.argv[2];
const db = new pg.Client({ connectionString: dsn });
await db.connect();
for (const n of [0, 1, 2]) {
  await enqueue(db, QUEUE, { n }, { key: `k${n}` });
}
const worker = new Worker({
  dsn,
  queue: QUEUE,
  pollWait: 1,
  handleSignals: false,
  handler: async (job) => ({ doubled: job.payload.n * 2 }),
});
const running = worker.run();
let results = [];
for (let i = 0; i < 600 && results.length < 3; i++) {
  const { rows } = await db.query(
    "SELECT (result->>'doubled')::int AS d FROM workfence.items WHERE queue = $1 AND state = 'done' ORDER BY key",
    [QUEUE],
  );
  results = rows.map((row) => row.d);
  if (results.length < 3) await new Promise((resolve) => setTimeout(resolve, 100));
}
await worker.stop();
await running;
await db.end();
const { version } = JSON.parse(
  await import('node:fs').then((fs) => fs.promises.readFile(new URL(import.meta.resolve('workfence/package.json')))),
);
console.log(`node workfence ${version}: done ${JSON.stringify(results)}`);
process.exit(JSON.stringify(results) === '[0,2,4]' ? 0 : 1);
