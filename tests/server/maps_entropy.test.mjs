// maps_entropy.test.mjs - what=entropy: each query row's Shannon entropy
// (nats) of its attention weights, H_i = -sum_j p_ij ln p_ij, one value
// per row ([T, 1] a plane; h=mean the mean of the heads' entropies),
// held to PyTorch's -(p * p.log()).nansum(-1) (fixtures/maps_entropy.json,
// tests/server/gen_maps_entropy.py, from the inputs of fixtures/refs.json).
//
// Tolerance 1e-6: attnd's weights agree with PyTorch's to < 1e-6 each
// (maps_whole.test), and a row's entropy moves by sum_j |ln p_j + 1| dp_j
// under them; both sides round the row's sum to float32 once (attnd sums
// in double, PyTorch in float32: a few ulp of values < ln 6 = 1.79, ulp
// 1.2e-7). The largest difference seen here is below 3e-7.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { REFS, fp32, infer, maxDiff, start, mapFloats } from './helper.mjs';

const E = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'maps_entropy.json'), 'utf8'));
const TOL = 1e-6;

let d;
before(async () => { d = await start(); });
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

async function retain(model, body) {
  const r = await infer(d, model, { ...body, parameters: { ...(body.parameters || {}), retain: true } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.parameters.map_id;
}
const get = (id, q) => fetch(`${d.url}/v2/maps/${id}/attention?${q}`);
const floats = (id, q, shape) => mapFloats(d, id, q, shape);
const sdpaInputs = (r) => [fp32('q', r.q_shape, r.q), fp32('k', r.k_shape, r.k), fp32('v', r.v_shape, r.v)];
// rows [T] of head h of item b in a [B, H, T] array
const rowsOf = (a, [, H, T], b, h) => a.slice((b * H + h) * T, (b * H + h + 1) * T);

test('what=entropy: each row\'s entropy of one head, of the heads\' mean, of every item and head, as JSON, f32 and npy, PyTorch\'s numbers', async () => {
  const id = await retain('sdpa', { inputs: sdpaInputs(REFS.sdpa) });
  const s = E.sdpa; // [2, 3, 4]
  const [B, H, T] = s.shape;
  const j = await (await get(id, 'what=entropy&b=1&h=2')).json();
  assert.equal(j.what, 'entropy');
  assert.deepEqual(j.shape, [T, 1]);
  assert.deepEqual(j.source_shape, [T, 1]);
  assert.deepEqual(j.block, [1, 1]);
  let diff = maxDiff(j.data, rowsOf(s.entropy, s.shape, 1, 2));
  assert.ok(diff < TOL, `b=1&h=2 vs PyTorch: ${diff}`);
  diff = maxDiff(await floats(id, 'what=entropy&b=0&h=1&format=f32', [T, 1]), rowsOf(s.entropy, s.shape, 0, 1));
  assert.ok(diff < TOL, `f32: ${diff}`);
  diff = maxDiff(await floats(id, 'what=entropy&b=all&h=all&format=npy', [B, H, T, 1]), s.entropy);
  assert.ok(diff < TOL, `b=all&h=all npy: ${diff}`);
  diff = maxDiff(await floats(id, 'what=entropy&b=1&h=all&format=f32', [H, T, 1]), s.entropy.slice(H * T));
  assert.ok(diff < TOL, `b=1&h=all: ${diff}`);
  // h=mean: the mean of the heads' entropies (not the entropy of the mean row)
  diff = maxDiff(await floats(id, 'what=entropy&b=all&h=mean&format=npy', [B, T, 1]), s.mean);
  assert.ok(diff < TOL, `b=all&h=mean: ${diff}`);
  const jm = await (await get(id, 'what=entropy&b=0&h=mean')).json();
  assert.equal(jm.h, 'mean');
  assert.ok(maxDiff(jm.data, s.mean.slice(0, T)) < TOL, 'h=mean JSON');
});

test('what=entropy of a causal map (masked cells are 0: 0 ln 0 = 0; its first row 0) and of cross-attention with context_lengths and a mask', async () => {
  const id = await retain('sdpa', { inputs: sdpaInputs(REFS.sdpa_causal), parameters: { causal: true } });
  const k = E.sdpa_causal; // [1, 1, 5]
  const got = await floats(id, 'what=entropy&format=f32', [5, 1]);
  assert.equal(got[0], 0, 'one key: no uncertainty');
  assert.ok(maxDiff(got, k.entropy) < TOL, `causal: ${maxDiff(got, k.entropy)}`);
  const c = REFS.cross;
  const [B, T] = c.shape, S = c.context_shape[1];
  const cid = await retain('tiny', {
    inputs: [fp32('x', c.shape, c.x), fp32('context', c.context_shape, c.context),
      { name: 'context_lengths', datatype: 'INT32', shape: [B], data: c.context_lengths },
      { name: 'mask', datatype: 'BOOL', shape: [B, T, S], data: c.mask }],
  });
  const x = E.cross; // [2, 2, 3]
  const all = await floats(cid, 'what=entropy&b=all&h=all&format=npy', [...x.shape, 1]);
  assert.ok(maxDiff(all, x.entropy) < TOL, `cross: ${maxDiff(all, x.entropy)}`);
  assert.ok(maxDiff(await floats(cid, 'what=entropy&b=all&h=mean&format=f32', [B, T, 1]), x.mean) < TOL, 'cross h=mean');
});

test('what=entropy of a sequence\'s map: each row over the keys its step held (PyTorch\'s causal map of the whole input)', async () => {
  const c = REFS.causal; // [1, 4, 8], tiny, causal
  const D = c.shape[2];
  const step = (rows, start, end) => infer(d, 'tiny', {
    inputs: [fp32('x', [1, rows.length / D, D], rows)],
    parameters: { sequence_id: 4301, sequence_start: start, sequence_end: end, causal: true, retain: start },
  });
  const r1 = await step(c.x.slice(0, 2 * D), true, false);
  assert.equal(r1.status, 200, JSON.stringify(r1.json));
  const id = r1.json.parameters.map_id;
  const r2 = await step(c.x.slice(2 * D), false, true);
  assert.equal(r2.status, 200, JSON.stringify(r2.json));
  const [H, T] = E.seq.shape.slice(1);
  const got = await floats(id, 'what=entropy&h=all&format=f32', [H, T, 1]);
  assert.ok(maxDiff(got, E.seq.entropy) < TOL, `sequence: ${maxDiff(got, E.seq.entropy)}`);
});

test('what=entropy: max= is refused (nothing to pool), b and h out of range are 400s as for the others, an unknown what names entropy', async () => {
  const id = await retain('sdpa', { inputs: sdpaInputs(REFS.sdpa) });
  for (const [q, msg] of [
    ['what=entropy&max=2', 'max: what=entropy is one value per query row, never pooled'],
    ['what=entropy&b=all&h=all&max=1&format=npy', 'max: what=entropy is one value per query row, never pooled'],
    ['what=entropy&b=2', 'b: 2 is out of range [0, 2)'],
    ['what=entropy&h=3', 'h: 3 is out of range [0, 3)'],
    ['what=entropies', 'what: expected attention, scores, mask, v, entropy or norm'],
  ]) {
    const r = await get(id, q);
    assert.equal(r.status, 400, q);
    assert.equal((await r.json()).error, msg, q);
  }
  // the server goes on serving
  assert.equal((await get(id, 'what=entropy')).status, 200);
});
