// index.d.ts stays in step with the documented usage: test/types/usage.ts must compile with the
// pinned TypeScript (a devDependency), its `@ts-expect-error` lines proving misuse is rejected.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

test('index.d.ts type-checks the documented usage (tsc --noEmit)', async () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const { stdout, stderr } = await promisify(execFile)(
    process.execPath, [tsc, '--noEmit', '-p', path.join(here, 'types')],
    { cwd: path.join(here, '..') },
  ).catch((err) => err);
  assert.equal(`${stdout}${stderr}`.trim(), '', 'tsc reported errors');
});
