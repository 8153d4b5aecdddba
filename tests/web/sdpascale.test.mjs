// sdpascale.test.mjs - sdpa's scale field (parameters.scale, README
// "Inputs of a weight set"): what q is multiplied by before Q K^T, in
// place of 1/√d_k. The weights drawn are held to softmax((q × scale) k^T)
// from tests/server/gen_sdpa_scale.py (PyTorch, float64:
// tests/server/fixtures/sdpa_scale.json, on fixtures/refs.json's sdpa
// inputs); the map's caption says the scale, a retained map's as its
// metadata reports it; the link keeps it. On main (8e4e250) the page had
// no such field and sent no scale: every weight was 1/√d_k's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { browserSuite, openPage, sdpaHash, waitDrawn } from './harness.mjs';

const fixture = (f) => JSON.parse(readFileSync(new URL(`../server/fixtures/${f}`, import.meta.url), 'utf8'));
const REF = fixture('refs.json').sdpa; // q [2, 3, 4, 5], k, v [2, 3, 6, 5]
const SCALED = fixture('sdpa_scale.json').sdpa; // [{ scale, attention, ... }]

// nest: flat data as nested arrays of shape.
function nest(data, shape) {
  if (shape.length === 1) return data.slice(0, shape[0]);
  const n = shape.slice(1).reduce((a, b) => a * b, 1);
  return Array.from({ length: shape[0] }, (_, i) => nest(data.slice(i * n, (i + 1) * n), shape.slice(1)));
}
const SPEC = { q: nest(REF.q, REF.q_shape), k: nest(REF.k, REF.k_shape), v: nest(REF.v, REF.v_shape) };

function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const weights = (page) => page.evaluate(() => Array.from(window.attnd.run.attention));

test('sdpa\'s scale field: the weights are softmax((q × scale) k^T), the caption and the link say the scale', async () => {
  const s3 = SCALED.find((e) => e.scale === 3), s02 = SCALED.find((e) => e.scale === 0.2);
  // From a link that carries it.
  const { page, errors } = await openPage(browser, `${daemon.url}/${sdpaHash(SPEC, '&h=0&qscale=3')}`);
  assert.equal(await page.isVisible('#sdpa-scale'), true, 'the field is shown for sdpa');
  assert.equal(await page.inputValue('#sdpa-scale'), '3');
  assert.ok(maxDiff(await weights(page), s3.attention) < 1e-5, 'weights at scale 3');
  assert.match(await page.textContent('#focus-title'), / · scale 3\b/);
  // Typed in the field: Run sends it, the link follows.
  await page.fill('#sdpa-scale', '0.2');
  await page.click('#run');
  await page.waitForFunction(() => Math.abs(window.attnd.run.scale - 0.2) < 1e-6 && document.body.dataset.state === 'ready');
  assert.ok(maxDiff(await weights(page), s02.attention) < 1e-5, 'weights at scale 0.2');
  assert.match(await page.textContent('#focus-title'), / · scale 0\.2\b/);
  assert.match(await page.evaluate(() => location.hash), /[#&]qscale=0\.2(&|$)/);
  // Emptied: 1/√d_k (refs.json's own weights), no scale in the caption.
  await page.fill('#sdpa-scale', '');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.scale === null && document.body.dataset.state === 'ready');
  assert.ok(maxDiff(await weights(page), REF.attention) < 1e-5, 'weights at 1/√d_k');
  assert.doesNotMatch(await page.textContent('#focus-title'), /scale/);
  // Not a number: said on the page, nothing sent.
  await page.fill('#sdpa-scale', 'two');
  await page.click('#run');
  await page.waitForFunction(() => /scale: "two" is not a number/.test(document.getElementById('status').textContent));
  // One the server refuses: its 400 said.
  await page.fill('#sdpa-scale', '-1');
  await page.click('#run');
  await page.waitForFunction(() => /parameters\.scale/.test(document.getElementById('status').textContent));
  assert.deepEqual(errors.filter((e) => !/status of 400/.test(e)), []);
  await page.close();
});

test('a retained sdpa map of another scale: its caption says the scale the map\'s metadata reports', async () => {
  const s3 = SCALED.find((e) => e.scale === 3);
  const { page, errors } = await openPage(browser, `${daemon.url}/${sdpaHash(SPEC, '&h=0&qscale=3&retain=1')}`);
  const id = await page.evaluate(() => window.attnd.run.mapId);
  assert.ok(id, 'retained');
  const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
  assert.equal(meta.scale, 3);
  await page.goto(`${daemon.url}/#map=${id}&h=0`);
  await page.reload();
  await waitDrawn(page);
  assert.equal(await page.evaluate(() => window.attnd.run.mapId), id);
  assert.ok(maxDiff(await weights(page), s3.attention) < 1e-5, 'the map\'s weights at scale 3');
  assert.match(await page.textContent('#focus-title'), new RegExp(`map ${id} · scale 3\\b`));
  assert.deepEqual(errors, []);
  await page.close();
});

test('the scale field is sdpa\'s alone: hidden for a weight set, which has its own', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b&h=0`);
  assert.equal(await page.isHidden('#sdpa-scale-wrap'), true);
  assert.deepEqual(errors, []);
  await page.close();
});
