// harness.test.mjs - harness.mjs fails a browser test file on a daemon's
// sanitizer report or crash, whenever it comes: fixtures/harness_case.mjs
// run (node --test, a child process) against fixtures/fake_attnd.mjs in
// each of its modes.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { ROOT, WAIT } from './harness.mjs';

const FAKE = path.join(ROOT, 'tests/web/fixtures/fake_attnd.mjs');
const CASE = path.join(ROOT, 'tests/web/fixtures/harness_case.mjs');

// runCase(mode): { code, out } of harness_case.mjs against the fake in
// mode, killed (and the test failed) if it has not ended in 4 x WAIT.
async function runCase(mode) {
  // NODE_TEST_CONTEXT would make the child report to this runner, not print
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT'));
  const child = spawn(process.execPath, ['--test', '--test-reporter=tap', CASE], {
    env: { ...env, ATTND: FAKE, FAKE_ATTND: mode }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  let hung = false;
  const t = setTimeout(() => { hung = true; child.kill('SIGKILL'); }, 4 * WAIT);
  const code = await new Promise((res) => child.on('exit', res));
  clearTimeout(t);
  assert.ok(!hung, `harness_case (${mode}) did not end in ${4 * WAIT} ms:\n${out}`);
  return { code, out };
}

test('a daemon that exits 0 on SIGTERM with nothing to report fails nothing', async () => {
  const { code, out } = await runCase('clean');
  assert.equal(code, 0, out);
  assert.match(out, /^# pass 2$/m, out);
});

test("a sanitizer's report mid-file fails the test it came in and the file, after the daemon exited", async () => {
  const { code, out } = await runCase('report');
  assert.equal(code, 1, out);
  assert.match(out, /^not ok 1 - the daemon answers$/m, out);
  assert.match(out, /sanitizer report during this test/, out);
  assert.match(out, /^ok 2 - a later test$/m, out);
  assert.match(out, /attnd ended badly \(exit 1\)/, out);
});

test('a daemon killed by a signal mid-file fails the file (stop() does not wait for it)', async () => {
  const { code, out } = await runCase('signal');
  assert.equal(code, 1, out);
  assert.match(out, /attnd ended badly \(exit SIGKILL\)/, out);
});

test("LeakSanitizer's report seconds after SIGTERM is waited for and fails the file", async () => {
  const { code, out } = await runCase('slow-leak');
  assert.equal(code, 1, out);
  assert.match(out, /attnd ended badly \(exit 1\)/, out);
  assert.match(out, /LeakSanitizer: detected memory leaks/, out);
});
