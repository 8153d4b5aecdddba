// auth.test.mjs - a daemon started with --api-key: the page asks for the
// key once, sends it as a bearer token, and retained maps are not readable
// without it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, sdpaHash, startAttnd, waitDrawn } from './harness.mjs';

const KEY = 's3cret-key';
let daemon, browser;
before(async () => {
  daemon = await startAttnd(['--api-key', KEY]);
  browser = await launch();
});
after(async () => {
  if (browser) await browser.close();
  if (daemon) await daemon.stop();
});

const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]] };

test('the page asks for the API key on 401, then runs; a reload keeps it', async () => {
  const page = await browser.newPage();
  await page.goto(daemon.url + sdpaHash(SEED, '&h=0'));
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  assert.equal(await page.isVisible('#auth'), true);
  assert.match(await page.textContent('#status'), /API key.*HTTP 401/);
  await page.fill('#api-key', KEY);
  await page.click('#auth button');
  await waitDrawn(page);
  assert.equal(await page.isVisible('#auth'), false);
  assert.equal(await page.evaluate(() => window.attnd.run.attention[0].toFixed(6)), '0.880797');
  await page.reload();
  await waitDrawn(page);
  assert.equal(await page.isVisible('#auth'), false);
  await page.close();
});

test('retained maps need the key too', async () => {
  const body = { inputs: ['q', 'k', 'v'].map((n) => ({ name: n, datatype: 'FP32', shape: [2, n === 'v' ? 2 : 4], data: SEED[n].flat() })), parameters: { retain: true } };
  const auth = { Authorization: `Bearer ${KEY}` };
  assert.equal((await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) })).status, 401);
  const r = await (await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', headers: auth, body: JSON.stringify(body) })).json();
  const id = r.parameters.map_id;
  for (const p of ['/v2/maps', `/v2/maps/${id}`, `/v2/maps/${id}/attention`]) {
    assert.equal((await fetch(daemon.url + p)).status, 401, p);
    assert.equal((await fetch(daemon.url + p, { headers: auth })).status, 200, p);
  }
  // The page itself loads without a key (it holds no data).
  assert.equal((await fetch(`${daemon.url}/`)).status, 200);
});
