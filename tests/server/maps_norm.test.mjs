// maps_norm.test.mjs - what=norm: the norm-based attention of Kobayashi et
// al. 2020 ("Attention is Not Only a Weight: Analyzing Transformers with
// Vector Norms"): cell (i, j) of head h is alpha_ij^h |v_j^h W_O^h|_2,
// the length of what key j adds to query i's output through head h
// (before b_o); sdpa, with no W_o, |v_j^h|_2. [T, S] a plane like
// what=attention; h=mean the mean of the heads' cells. Held to PyTorch's
// (fixtures/maps_norm.json, tests/server/gen_maps_norm.py: tiny, an
// nn.MultiheadAttention, on refs.json's inputs), to a 2-token sdpa case
// worked by hand, and to one worked here from a GQA weight set of
// d_model 320 (two W_o panels) whose weights the test made, checked first
// against the model's own output (sum_h sum_j alpha v W_O^h + b_o = y).
//
// Tolerance 1e-6, as maps_entropy's: attnd's weights agree with PyTorch's
// to < 1e-6, its v (the engine's, float32) to a few ulp, and its norms are
// summed in double where PyTorch's are float32 matrix products, each cell
// rounded once on either side; the cells here are below 2.9 (ulp 2.4e-7)
// and the largest difference seen is 2.4e-7 (sdpa), 1e-7 (gqa320).
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { REFS, fp32, infer, maxDiff, modelsDir, mulberry32, post, safetensors, start, mapFloats } from './helper.mjs';

const N = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'maps_norm.json'), 'utf8'));
const TOL = 1e-6;

// a GQA weight set of d_model 320: W_o is stored as two column panels
// (256 + 64, attn.h's ATTN_PANELS), 4 query heads over 2 kv heads of 8
const GD = 320, GH = 4, GKV = 2, GK = 8;
function gqaWeights(seed, oScale = 1) {
  const u = mulberry32(seed);
  const r = () => 2 * u() - 1;
  const m = (rows, cols, s) => [[rows, cols], Array.from({ length: rows * cols }, () => r() * s)];
  const v = (n) => [[n], Array.from({ length: n }, () => r() * 0.1)];
  const w = {
    W_q: m(GD, GH * GK, 0.1), W_k: m(GD, GKV * GK, 0.1), W_v: m(GD, GKV * GK, 0.1), W_o: m(GH * GK, GD, 0.3),
    b_q: v(GH * GK), b_k: v(GKV * GK), b_v: v(GKV * GK), b_o: v(GD),
  };
  w.W_o[1] = w.W_o[1].map((x) => x * oScale);
  return w;
}
const gqaConfig = JSON.stringify({ n_heads: GH, n_kv_heads: GKV, description: 'maps_norm.test: GQA, d_model 320' });

let d;
before(async () => {
  const dir = modelsDir();
  mkdirSync(join(dir, 'gqa320'));
  writeFileSync(join(dir, 'gqa320', 'model.safetensors'), safetensors(gqaWeights(7)));
  writeFileSync(join(dir, 'gqa320', 'config.json'), gqaConfig);
  d = await start({ dir });
});
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

async function retain(model, body) {
  const r = await infer(d, model, { ...body, parameters: { ...(body.parameters || {}), retain: true } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r;
}
const idOf = (r) => r.json.parameters.map_id;
const get = (id, q) => fetch(`${d.url}/v2/maps/${id}/attention?${q}`);
const meta = async (id) => (await fetch(`${d.url}/v2/maps/${id}`)).json();
const floats = (id, q, shape) => mapFloats(d, id, q, shape);
const near = (got, want, what) => {
  const diff = maxDiff(got, want);
  assert.ok(diff < TOL, `${what}: differs by ${diff}`);
};
// plane [T, S] of head h of item b in a [B, H, T, S] array
const planeOf = (a, [, H, T, S], b, h) => a.slice((b * H + h) * T * S, (b * H + h + 1) * T * S);
// maps_pool_max's overview of a [T, S] plane into at most n x n blocks
function poolMax(p, T, S, n) {
  const bt = T <= n ? 1 : Math.ceil(T / n), bs = S <= n ? 1 : Math.ceil(S / n);
  const R = Math.ceil(T / bt), C = Math.ceil(S / bs), out = new Array(R * C).fill(-Infinity);
  for (let i = 0; i < T; i++) for (let j = 0; j < S; j++) {
    const k = Math.floor(i / bt) * C + Math.floor(j / bs);
    out[k] = Math.max(out[k], p[i * S + j]);
  }
  return { out, R, C };
}
const sdpaInputs = (r) => [fp32('q', r.q_shape, r.q), fp32('k', r.k_shape, r.k), fp32('v', r.v_shape, r.v)];

test('what=norm of a weight set (tiny): alpha |v W_O^h| per head, its h=mean, every item and head, pooled, as JSON, f32 and npy, PyTorch\'s numbers; the map lists norm', async () => {
  const c = REFS.self;
  const id = idOf(await retain('tiny', { inputs: [fp32('x', c.shape, c.x)] }));
  const m = await meta(id);
  assert.deepEqual(m.retained, ['attention', 'mask', 'norm'], 'v was not asked for: computed for the norms, not kept');
  assert.equal(m.norm_of, 'v W_o');
  const s = N.self; // [2, 2, 5, 5]
  const [B, H, T, S] = s.shape;
  const j = await (await get(id, 'what=norm&b=1&h=0')).json();
  assert.equal(j.what, 'norm');
  assert.deepEqual(j.shape, [T, S]);
  assert.deepEqual(j.source_shape, [T, S]);
  near(j.data, planeOf(s.cells, s.shape, 1, 0), 'b=1&h=0');
  near(await floats(id, 'what=norm&b=0&h=1&format=f32', [T, S]), planeOf(s.cells, s.shape, 0, 1), 'b=0&h=1 f32');
  near(await floats(id, 'what=norm&b=all&h=all&format=npy', [B, H, T, S]), s.cells, 'b=all&h=all npy');
  // h=mean: the mean of the heads' cells, (1/H) sum_h alpha^h |v^h W_O^h|
  near(await floats(id, 'what=norm&b=all&h=mean&format=f32', [B, T, S]), s.mean, 'b=all&h=mean');
  const jm = await (await get(id, 'what=norm&b=1&h=mean')).json();
  assert.equal(jm.h, 'mean');
  near(jm.data, s.mean.slice(T * S), 'h=mean JSON');
  // max=: the block maxima, as for what=attention
  const { out, R, C } = poolMax(planeOf(s.cells, s.shape, 0, 1), T, S, 2);
  const jp = await (await get(id, 'what=norm&b=0&h=1&max=2')).json();
  assert.deepEqual(jp.shape, [R, C]);
  assert.deepEqual(jp.block, [3, 3]);
  near(jp.data, out, 'max=2');
  // the cells are the weights times the key's norm: a row of what=attention
  // weighed by PyTorch's norms
  const a = (await (await get(id, 'what=attention&b=1&h=1')).json()).data;
  const nb = s.norms.slice((1 * H + 1) * S, (1 * H + 2) * S);
  near(a.map((p, k) => p * nb[k % S]), planeOf(s.cells, s.shape, 1, 1), 'attention x norms');
});

test('what=norm with lengths, and of cross-attention with context_lengths and a mask: masked and padded cells are 0', async () => {
  const c = REFS.lengths;
  const id = idOf(await retain('tiny', {
    inputs: [fp32('x', c.shape, c.x), { name: 'lengths', datatype: 'INT32', shape: [2], data: c.lengths }],
  }));
  near(await floats(id, 'what=norm&b=all&h=all&format=f32', N.lengths.shape), N.lengths.cells, 'lengths');
  const x = REFS.cross;
  const [B, T] = x.shape, S = x.context_shape[1];
  const cid = idOf(await retain('tiny', {
    inputs: [fp32('x', x.shape, x.x), fp32('context', x.context_shape, x.context),
      { name: 'context_lengths', datatype: 'INT32', shape: [B], data: x.context_lengths },
      { name: 'mask', datatype: 'BOOL', shape: [B, T, S], data: x.mask }],
  }));
  const got = await floats(cid, 'what=norm&b=all&h=all&format=npy', N.cross.shape);
  near(got, N.cross.cells, 'cross');
  const allowed = await floats(cid, 'what=mask&b=all&h=all&format=f32', N.cross.shape);
  allowed.forEach((ok, k) => { if (!ok) assert.equal(got[k], 0, `masked cell ${k}`); });
  near(await floats(cid, 'what=norm&b=all&h=mean&format=f32', [B, T, S]), N.cross.mean, 'cross h=mean');
});

test('what=norm of sdpa is alpha |v_j| (no W_o): PyTorch\'s, and a 2-token case by hand', async () => {
  const id = idOf(await retain('sdpa', { inputs: sdpaInputs(REFS.sdpa) }));
  const m = await meta(id);
  assert.deepEqual(m.retained, ['attention', 'mask', 'v', 'norm']);
  assert.equal(m.norm_of, 'v');
  near(await floats(id, 'what=norm&b=all&h=all&format=f32', N.sdpa.shape), N.sdpa.cells, 'sdpa');
  // q . k_j = 0 for both keys: alpha = (1/2, 1/2); |v_0| = |(3, 4)| = 5,
  // |v_1| = |(0, 1)| = 1: cells 2.5 and 0.5
  const hid = idOf(await retain('sdpa', {
    inputs: [fp32('q', [1, 2], [0, 0]), fp32('k', [2, 2], [1, 0, 0, 1]), fp32('v', [2, 2], [3, 4, 0, 1])],
  }));
  assert.deepEqual((await (await get(hid, 'what=norm')).json()).data, [2.5, 0.5]);
});

// worked here: v (the model's own v output), the weights the test made
test('what=norm of a GQA weight set whose W_o is two panels: |v_j^h W_O^h| through each query head\'s kv head, worked here and checked against the model\'s y', async () => {
  const T = 6, u = mulberry32(99);
  const xs = Array.from({ length: T * GD }, () => 2 * u() - 1);
  const r = await retain('gqa320', { inputs: [fp32('x', [1, T, GD], xs)], outputs: [{ name: 'y' }, { name: 'attention' }, { name: 'v' }] });
  const out = Object.fromEntries(r.json.outputs.map((o) => [o.name, o.data]));
  const w = gqaWeights(7), Wo = w.W_o[1], bo = w.b_o[1];
  // f[h][j] = v_j^{kv(h)} W_O^h (d_model wide)
  const f = [];
  for (let h = 0; h < GH; h++) {
    const g = Math.floor(h / (GH / GKV)), fh = [];
    for (let j = 0; j < T; j++) {
      const row = new Array(GD).fill(0);
      for (let k = 0; k < GK; k++) {
        const vk = out.v[(g * T + j) * GK + k];
        for (let q = 0; q < GD; q++) row[q] += vk * Wo[(h * GK + k) * GD + q];
      }
      fh.push(row);
    }
    f.push(fh);
  }
  // the decomposition the norms measure: y_i = sum_h sum_j alpha_ij^h f[h][j] + b_o
  const y = [];
  for (let i = 0; i < T; i++) for (let q = 0; q < GD; q++) {
    let s = bo[q];
    for (let h = 0; h < GH; h++) for (let j = 0; j < T; j++) s += out.attention[(h * T + i) * T + j] * f[h][j][q];
    y.push(s);
  }
  assert.ok(maxDiff(y, out.y) < 1e-4, `sum of alpha v W_O^h + b_o vs y: ${maxDiff(y, out.y)}`);
  const want = [];
  for (let h = 0; h < GH; h++) for (let i = 0; i < T; i++) for (let j = 0; j < T; j++)
    want.push(out.attention[(h * T + i) * T + j] * Math.hypot(...f[h][j]));
  const m = await meta(idOf(r));
  assert.deepEqual(m.retained, ['attention', 'mask', 'v', 'norm'], 'v asked for: kept');
  near(await floats(idOf(r), 'what=norm&h=all&format=f32', [GH, T, T]), want, 'gqa320');
});

test('a map keeps the norms of the instance that answered: a reload with another W_o changes new maps\', not an old one\'s', async () => {
  const T = 3, u = mulberry32(5);
  const xs = Array.from({ length: T * GD }, () => 2 * u() - 1);
  const load = async (oScale) => {
    const st = safetensors(gqaWeights(7, oScale));
    const r = await post(`${d.url}/v2/repository/models/gqa320b/load`, { parameters: { config: gqaConfig, 'file:model.safetensors': st.toString('base64') } });
    assert.equal(r.status, 200, JSON.stringify(r.json));
  };
  await load(1);
  const old = idOf(await retain('gqa320b', { inputs: [fp32('x', [1, T, GD], xs)] }));
  const before_ = await floats(old, 'what=norm&h=all&format=f32', [GH, T, T]);
  assert.ok(before_.some((x) => x > 0), 'some cell is not 0');
  await load(2); // W_o doubled: every norm doubles, the weights stay
  const fresh = idOf(await retain('gqa320b', { inputs: [fp32('x', [1, T, GD], xs)] }));
  assert.deepEqual(await floats(old, 'what=norm&h=all&format=f32', [GH, T, T]), before_, 'the old map\'s norms');
  near(await floats(fresh, 'what=norm&h=all&format=f32', [GH, T, T]), before_.map((x) => 2 * x), 'the new map\'s: doubled');
});

// gramBytes: attnd_model_norm_gram_bytes of model m (/metrics)
async function gramBytes(m) {
  const text = await (await fetch(`${d.url}/metrics`)).text();
  const g = new RegExp(`^attnd_model_norm_gram_bytes\\{model="${m}",version="1"\\} (\\d+)$`, 'm').exec(text);
  assert.ok(g, `/metrics has no attnd_model_norm_gram_bytes of ${m}`);
  return Number(g[1]);
}

test('a loaded weight set keeps its W_o Gram matrices from its first retained request on (attnd_model_norm_gram_bytes), a reload\'s new instance its own', async () => {
  const T = 2, xs = Array.from({ length: T * GD }, (_, i) => Math.sin(i));
  const body = { inputs: [fp32('x', [1, T, GD], xs)] };
  const load = async () => {
    const r = await post(`${d.url}/v2/repository/models/gqa320c/load`, { parameters: { config: gqaConfig, 'file:model.safetensors': safetensors(gqaWeights(11)).toString('base64') } });
    assert.equal(r.status, 200, JSON.stringify(r.json));
  };
  const bytes = GH * GK * GK * 8; // H d_v x d_v doubles
  await load();
  assert.equal((await infer(d, 'gqa320c', body)).status, 200);
  assert.equal(await gramBytes('gqa320c'), 0, 'none made without retain');
  await retain('gqa320c', body);
  assert.equal(await gramBytes('gqa320c'), bytes, 'made by the first retained request');
  await retain('gqa320c', body);
  assert.equal(await gramBytes('gqa320c'), bytes, 'kept, not made again');
  assert.equal(await gramBytes('sdpa'), 0, 'sdpa has no W_o');
  await load();
  assert.equal(await gramBytes('gqa320c'), 0, 'a reload: a new instance, none made yet');
  await retain('gqa320c', body);
  assert.equal(await gramBytes('gqa320c'), bytes, 'the new instance\'s');
});

test('what=norm of an upload whose value heads are wider than d_model makes no Gram matrices (they would be d_v^2 doubles: 512 MiB for this 128 KiB upload): |v_j W_O| itself, worked here', async () => {
  // d_model 2, one head: head_dim 2, v_head_dim 8192
  const DM = 2, DV = 8192, T = 3, u = mulberry32(31);
  const m = (rows, cols, s) => [[rows, cols], Array.from({ length: rows * cols }, () => Math.fround((2 * u() - 1) * s))];
  const w = { W_q: m(DM, 2, 0.5), W_k: m(DM, 2, 0.5), W_v: m(DM, DV, 0.05), W_o: m(DV, DM, 0.05) };
  const cfg = JSON.stringify({ n_heads: 1, description: 'maps_norm.test: v_head_dim 8192 over d_model 2' });
  const up = await post(`${d.url}/v2/repository/models/wide/load`, { parameters: { config: cfg, 'file:model.safetensors': safetensors(w).toString('base64') } });
  assert.equal(up.status, 200, JSON.stringify(up.json));
  const xs = Array.from({ length: T * DM }, () => 2 * u() - 1);
  const r = await retain('wide', { inputs: [fp32('x', [1, T, DM], xs)], outputs: [{ name: 'attention' }, { name: 'v' }] });
  assert.equal(await gramBytes('wide'), 0, 'no Gram matrices made');
  const out = Object.fromEntries(r.json.outputs.map((o) => [o.name, o.data]));
  const Wo = w.W_o[1], want = [];
  const norms = Array.from({ length: T }, (_, j) => Math.hypot(...Array.from({ length: DM }, (_, q) => {
    let f = 0;
    for (let k = 0; k < DV; k++) f += out.v[j * DV + k] * Wo[k * DM + q];
    return f;
  })));
  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) want.push(out.attention[i * T + j] * norms[j]);
  near(await floats(idOf(r), 'what=norm&format=f32', [T, T]), want, 'wide');
});

test('what=norm where no norms were kept (a sequence\'s map) is a 400 saying why; b, h out of range are 400s; an unknown what names norm', async () => {
  const c = REFS.causal;
  const D = c.shape[2];
  const r1 = await infer(d, 'tiny', {
    inputs: [fp32('x', [1, 2, D], c.x.slice(0, 2 * D))],
    parameters: { sequence_id: 4401, sequence_start: true, sequence_end: true, causal: true, retain: true },
  });
  assert.equal(r1.status, 200, JSON.stringify(r1.json));
  const sid = idOf(r1);
  assert.ok(!(await meta(sid)).retained.includes('norm'));
  let r = await get(sid, 'what=norm');
  assert.equal(r.status, 400);
  assert.match((await r.json()).error, /^what: map \S+ keeps no value norms \(what=norm: a sequence's map keeps none/);
  const id = idOf(await retain('sdpa', { inputs: sdpaInputs(REFS.sdpa) }));
  for (const [q, msg] of [
    ['what=norm&b=2', 'b: 2 is out of range [0, 2)'],
    ['what=norm&h=3', 'h: 3 is out of range [0, 3)'],
    ['what=norms', 'what: expected attention, scores, mask, v, entropy or norm'],
  ]) {
    r = await get(id, q);
    assert.equal(r.status, 400, q);
    assert.equal((await r.json()).error, msg, q);
  }
  assert.equal((await get(id, 'what=norm')).status, 200);
});
