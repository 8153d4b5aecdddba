// binary.test.mjs - a run's outputs come as binary tensors (the Triton
// extension: JSON header, then raw FP32), not as text of numbers: the
// page asks for them, reads the same floats the JSON answer carries, still
// reads an answer that is all JSON, and says so when a binary answer's
// sizes do not add up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage, sdpaHash, waitDrawn, WAIT } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

// The first seed example (README): weights [[0.881, 0.119], [0.119, 0.881]].
const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]] };

// infers: the page's infer requests from now on, with their answers'
// Inference-Header-Content-Length (null: none).
function infers(page) {
  const seen = [];
  page.on('response', async (r) => {
    if (r.request().method() !== 'POST' || !r.url().endsWith('/infer')) return;
    seen.push({ body: JSON.parse(r.request().postData()), hlen: (await r.allHeaders())['inference-header-content-length'] ?? null });
  });
  return seen;
}

// jsonAnswer: the same request asked of the daemon without binary outputs.
async function jsonAnswer(body) {
  const b = { ...body, parameters: { ...body.parameters, binary_data_output: false } };
  const res = await fetch(`${daemon.url}/v2/models/toy/infer`, { method: 'POST', body: JSON.stringify(b) });
  assert.equal(res.status, 200);
  return res.json();
}

test('a run asks for binary outputs and draws the floats the JSON answer carries', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  const seen = infers(page);
  await page.fill('#text', 'the cat sat on the mat');
  await page.click('#run');
  await waitDrawn(page);
  assert.equal(seen.length, 1);
  assert.equal(seen[0].body.parameters.binary_data_output, true);
  assert.ok(Number(seen[0].hlen) > 0, 'the answer is binary');
  const got = await page.evaluate(() => {
    const r = window.attnd.run;
    return { attention: Array.from(r.attention), q: Array.from(r.q), y: Array.from(r.y), T: r.T, H: r.H };
  });
  const want = {};
  for (const o of (await jsonAnswer(seen[0].body)).outputs) want[o.name] = o.data.map(Math.fround);
  assert.deepEqual([got.H, got.T], [2, 6]);
  assert.deepEqual(got.attention, want.attention);
  assert.deepEqual(got.q, want.q);
  assert.deepEqual(got.y, want.y);
  assert.deepEqual(errors, []);
  await page.close();
});

test('sdpa\'s seed example through binary outputs: the worked weights', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/${sdpaHash(SEED, '&h=0')}`);
  const r = await page.evaluate(() => ({ a: Array.from(window.attnd.run.attention), y: Array.from(window.attnd.run.y) }));
  const w = [0.880797, 0.119203, 0.119203, 0.880797];
  r.a.forEach((x, i) => assert.ok(Math.abs(x - w[i]) < 1e-6, `${i}: ${x}`));
  assert.ok(Math.abs(r.y[0] - (1 * w[0] + 3 * w[1])) < 1e-5);
  assert.deepEqual(errors, []);
  await page.close();
});

test('an answer that is all JSON (a server without binary outputs) is drawn as before', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  await page.route('**/v2/models/toy/infer', async (route) => {
    const body = JSON.parse(route.request().postData());
    await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(await jsonAnswer(body)) });
  });
  await page.fill('#text', 'a b c');
  await page.click('#run');
  await waitDrawn(page);
  const a = await page.evaluate(() => Array.from(window.attnd.run.attention));
  assert.equal(a.length, 2 * 3 * 3);
  assert.ok(a.every((x) => x >= 0 && x <= 1));
  assert.deepEqual(errors, []);
  await page.close();
});

test('a binary answer whose sizes do not add up (cut short) is an error that says so, not a wrong map', async () => {
  const { page } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  await page.route('**/v2/models/toy/infer', async (route) => {
    const res = await route.fetch();
    const buf = await res.body();
    await route.fulfill({ response: res, body: buf.subarray(0, buf.length - 4) });
  });
  await page.fill('#text', 'a b c');
  await page.click('#run');
  await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  const st = await page.evaluate(() => ({ text: document.getElementById('status').textContent,
    role: document.getElementById('status').getAttribute('role') }));
  assert.match(st.text, /binary answer is not what this page expects/);
  assert.equal(st.role, 'alert');
  await page.close();
});
