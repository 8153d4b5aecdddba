// mapreads.test.mjs - how many requests the page makes to open a
// retained map (README "Retained attention maps": b=all and h=all put
// every item's and head's plane in one answer, from one version of the
// map). The planes drawn are held to PyTorch's (tests/server/fixtures/
// refs.json, sdpa on q [2, 3, 4, 5], k, v [2, 3, 6, 5]). On main
// (8e4e250) the page read one plane per request: 18 /attention requests
// for this map (weights, scores, values: 6 planes each), 3 now.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { browserSuite, openPage } from './harness.mjs';

const REF = JSON.parse(readFileSync(new URL('../server/fixtures/refs.json', import.meta.url), 'utf8')).sdpa;

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const fp32 = (name, shape, data) => ({ name, datatype: 'FP32', shape, data });

// retain(shapes...): a retained sdpa map of q, k, v (REF's, or their
// first item and head), with its scores: its id.
async function retain(whole) {
  const n = (s) => s.slice(-2).reduce((a, b) => a * b, 1);
  const cut = (data, shape) => (whole ? [data, shape] : [data.slice(0, n(shape)), shape.slice(-2)]);
  const [q, qs] = cut(REF.q, REF.q_shape), [k, ks] = cut(REF.k, REF.k_shape), [v, vs] = cut(REF.v, REF.v_shape);
  const r = await fetch(`${daemon.url}/v2/models/sdpa/infer`, {
    method: 'POST',
    body: JSON.stringify({ inputs: [fp32('q', qs, q), fp32('k', ks, k), fp32('v', vs, v)],
      outputs: [{ name: 'output' }, { name: 'scores' }], parameters: { retain: true } }),
  });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j.parameters.map_id;
}

// open(id, routeAll): the page on map id, counting its /attention
// requests (their query strings); routeAll (optional) answers the b=all
// ones itself.
async function open(id, routeAll) {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  const asked = [];
  ctx.on('request', (r) => { const u = new URL(r.url()); if (u.pathname.endsWith('/attention')) asked.push(u.search); });
  if (routeAll) await ctx.route((u) => u.pathname.endsWith('/attention') && u.searchParams.get('b') === 'all', routeAll);
  const { page, errors } = await openPage(ctx, `${daemon.url}/#map=${id}&h=0`);
  return { page, errors, asked, ctx };
}

function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

async function planes(page) {
  return page.evaluate(() => ({ B: window.attnd.run.B, H: window.attnd.run.H, att: Array.from(window.attnd.run.attention),
    scores: Array.from(window.attnd.run.scores), v: Array.from(window.attnd.run.v) }));
}

test('a map of 2 items x 3 heads opens in one request for each kind (weights, scores, values), not one per plane', async () => {
  const id = await retain(true);
  const { page, errors, asked, ctx } = await open(id);
  const p = await planes(page);
  assert.equal(p.B, 2);
  assert.equal(p.H, 3);
  assert.ok(maxDiff(p.att, REF.attention) < 1e-5, 'weights');
  assert.ok(maxDiff(p.scores, REF.scores) < 1e-5, 'scores');
  assert.ok(maxDiff(p.v, REF.v) < 1e-6, 'value rows');
  assert.equal(asked.length, 3, `requests: ${asked.join(' ')}`);
  for (const s of asked) assert.match(s, /[?&]b=all&h=all&/);
  assert.deepEqual(asked.map((s) => new URLSearchParams(s).get('what')).sort(), ['attention', 'scores', 'v']);
  assert.deepEqual(errors, []);
  await ctx.close();
});

test('a map of one plane is read as one plane (b=0&h=0)', async () => {
  const id = await retain(false);
  const { page, errors, asked, ctx } = await open(id);
  const p = await planes(page);
  assert.equal(p.B * p.H, 1);
  assert.ok(maxDiff(p.att, REF.attention.slice(0, 24)) < 1e-5, 'weights of item 0, head 0');
  assert.equal(asked.length, 3, `requests: ${asked.join(' ')}`);
  for (const s of asked) assert.match(s, /[?&]b=0&h=0&/);
  assert.deepEqual(errors, []);
  await ctx.close();
});

test('a server whose --request-memory refuses the whole map (413): the page reads it plane by plane', async () => {
  const id = await retain(true);
  const { page, errors, asked, ctx } = await open(id, (route) => route.fulfill({ status: 413,
    contentType: 'application/json', body: JSON.stringify({ error: 'b, h: the map takes 9999 bytes, more than one request may (1024 bytes, request-memory)' }) }));
  const p = await planes(page);
  assert.ok(maxDiff(p.att, REF.attention) < 1e-5, 'weights');
  assert.ok(maxDiff(p.scores, REF.scores) < 1e-5, 'scores');
  assert.ok(maxDiff(p.v, REF.v) < 1e-6, 'value rows');
  assert.equal(asked.filter((s) => /b=all/.test(s)).length, 3);
  assert.equal(asked.filter((s) => !/b=all/.test(s)).length, 18);
  assert.deepEqual(errors.filter((e) => !/status of 413/.test(e)), []);
  await ctx.close();
});
