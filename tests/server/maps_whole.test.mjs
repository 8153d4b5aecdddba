// maps_whole.test.mjs - a retained map read whole in one request (b=all,
// h=all: [B, H, T, S], or [B, ...] / [H, ...] with one of them) and as a
// NumPy .npy file (format=npy), held to PyTorch's numbers and numpy's own
// header bytes (fixtures/maps_whole.json, tests/server/gen_maps_whole.py,
// from the inputs of fixtures/refs.json); bad parameters are 400s naming
// themselves, and an answer past --request-memory is 413 naming it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { REFS, fp32, infer, maxDiff, start } from './helper.mjs';
import { D, gqaModels, stepBody, tokens } from './seq_helper.mjs';

const W = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'maps_whole.json'), 'utf8'));

let d;
before(async () => { d = await start(); });
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

async function retain(dm, model, body) {
  const r = await infer(dm, model, { ...body, parameters: { ...(body.parameters || {}), retain: true } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.parameters.map_id;
}
const get = (dm, id, q) => fetch(`${dm.url}/v2/maps/${id}/attention?${q}`);
/** GET a map as .npy; asserts 200, numpy's header for shape, and returns the floats. */
async function npy(dm, id, q, shape) {
  const r = await get(dm, id, `${q}&format=npy`);
  const buf = Buffer.from(await r.arrayBuffer());
  assert.equal(r.status, 200, `${q}: ${buf.toString().slice(0, 300)}`);
  assert.equal(r.headers.get('content-type'), 'application/octet-stream');
  assert.equal(r.headers.get('map-shape'), shape.join(','), q);
  const hdr = Buffer.from(W.npy_headers[shape.join(',')], 'base64');
  assert.equal(buf.subarray(0, hdr.length).toString('latin1'), hdr.toString('latin1'), `${q}: numpy's header`);
  const n = shape.reduce((a, x) => a * x, 1);
  assert.equal(buf.length, hdr.length + 4 * n, `${q}: header and ${n} floats`);
  return Array.from(new Float32Array(buf.buffer.slice(buf.byteOffset + hdr.length, buf.byteOffset + buf.length)));
}
const sdpa = () => {
  const r = REFS.sdpa;
  return retain(d, 'sdpa', {
    inputs: [fp32('q', r.q_shape, r.q), fp32('k', r.k_shape, r.k), fp32('v', r.v_shape, r.v)],
    outputs: [{ name: 'output' }, { name: 'scores' }],
  });
};
// the [T, S] planes of a [B, H, T, S] array a: item b's, head h's
const plane = (a, [, H, T, S], b, h) => a.slice((b * H + h) * T * S, (b * H + h + 1) * T * S);

test('b=all&h=all: the whole [B, H, T, S] map in one request, PyTorch\'s numbers, as .npy, f32 and JSON', async () => {
  const id = await sdpa();
  const s = W.sdpa;
  assert.deepEqual(s.shape, [2, 3, 4, 6]);
  assert.ok(maxDiff(await npy(d, id, 'b=all&h=all', s.shape), s.attention) < 1e-6, 'npy vs PyTorch');
  assert.ok(maxDiff(await npy(d, id, 'b=all&h=all&what=scores', s.shape), s.scores) < 2e-6, 'scores vs PyTorch');
  assert.deepEqual(await npy(d, id, 'b=all&h=all&what=v', s.v_shape), s.v.map(Math.fround), 'the value rows as sent');
  const f = await get(d, id, 'b=all&h=all&format=f32');
  assert.equal(f.status, 200);
  assert.equal(f.headers.get('map-shape'), '2,3,4,6');
  assert.ok(maxDiff(Array.from(new Float32Array(await f.arrayBuffer())), s.attention) < 1e-6, 'f32 vs PyTorch');
  const j = await (await get(d, id, 'b=all&h=all')).json();
  assert.equal(j.b, 'all');
  assert.equal(j.h, 'all');
  assert.deepEqual(j.shape, [2, 3, 4, 6]);
  assert.deepEqual(j.source_shape, [2, 3, 4, 6]);
  assert.deepEqual(j.block, [1, 1]);
  assert.ok(maxDiff(j.data, s.attention) < 1e-6, 'JSON vs PyTorch');
  // one of them: item 1's heads [H, T, S]; each item's head 2 [B, T, S]
  const h1 = await npy(d, id, 'b=1&h=all', [3, 4, 6]);
  assert.ok(maxDiff(h1, s.attention.slice(3 * 24)) < 1e-6, 'b=1&h=all');
  const b2 = await npy(d, id, 'b=all&h=2', [2, 4, 6]);
  assert.ok(maxDiff(b2, [...plane(s.attention, s.shape, 0, 2), ...plane(s.attention, s.shape, 1, 2)]) < 1e-6, 'b=all&h=2');
  // each item's mean over heads, PyTorch's a.mean(1)
  assert.ok(maxDiff(await npy(d, id, 'b=all&h=mean', s.mean_shape), s.mean) < 1e-6, 'b=all&h=mean');
  // max=3: blocks of 2 x 2, each plane pooled as one plane's request pools it
  assert.deepEqual(s.pooled3_shape, [2, 3, 2, 3]);
  assert.ok(maxDiff(await npy(d, id, 'b=all&h=all&max=3', s.pooled3_shape), s.pooled3) < 1e-6, 'pooled vs PyTorch max_pool2d');
  const pj = await (await get(d, id, 'b=all&h=mean&max=3')).json();
  assert.deepEqual(pj.shape, [2, 2, 3]);
  assert.deepEqual(pj.source_shape, [2, 4, 6]);
  assert.deepEqual(pj.block, s.pooled3_block);
  assert.ok(maxDiff(pj.data, s.pooled3_mean) < 1e-6, 'pooled mean vs PyTorch');
  // one plane as .npy: [T, S], the same numbers as its f32
  assert.ok(maxDiff(await npy(d, id, 'b=1&h=1', [4, 6]), plane(s.attention, s.shape, 1, 1)) < 1e-6, 'b=1&h=1 npy');
});

test('b=all&h=all&what=mask: every item\'s and head\'s mask at once (context_lengths and a [B, T, S] mask)', async () => {
  const c = REFS.cross;
  const [B, T] = c.shape, S = c.context_shape[1];
  const id = await retain(d, 'tiny', {
    inputs: [fp32('x', c.shape, c.x), fp32('context', c.context_shape, c.context),
      { name: 'context_lengths', datatype: 'INT32', shape: [B], data: c.context_lengths },
      { name: 'mask', datatype: 'BOOL', shape: [B, T, S], data: c.mask }],
  });
  assert.deepEqual(await npy(d, id, 'b=all&h=all&what=mask', W.cross.shape), W.cross.mask);
  assert.ok(maxDiff(await npy(d, id, 'b=all&h=all', W.cross.shape), c.attention) < 1e-6, 'attention vs PyTorch');
  // what it did not keep is a 400 for the whole map as for one plane
  for (const w of ['scores', 'v']) {
    const r = await get(d, id, `b=all&h=all&what=${w}&format=npy`);
    assert.equal(r.status, 400, w);
    assert.match((await r.json()).error, new RegExp(`^what: map ${id} was retained without ${w === 'v' ? 'values' : 'scores'} `), w);
  }
});

test('bad b, h, format: 400 naming the parameter; a whole map too large for JSON says what to ask', async () => {
  const id = await sdpa();
  for (const [q, msg] of [
    ['b=every', 'b: expected a batch index >= 0 or "all"'],
    ['h=any', 'h: expected a head index >= 0, "mean" or "all"'],
    ['b=all&h=-1', 'h: expected a head index >= 0, "mean" or "all"'],
    ['format=npz', 'format: expected json, f32 or npy'],
    ['h=mean&what=v', 'h: what=v needs a head index or "all" (values have no mean)'],
    ['b=all&h=all&what=v&max=2', 'max: what=v is never pooled'],
    ['b=2&h=all', 'b: 2 is out of range [0, 2)'],
    ['b=all&h=3', 'h: 3 is out of range [0, 3)'],
  ]) {
    const r = await get(d, id, q);
    assert.equal(r.status, 400, q);
    assert.equal((await r.json()).error, msg, q);
  }
  const r = await get(d, 'm999999-000000', 'b=all&h=all&format=npy');
  assert.equal(r.status, 404);
  // 2 x 4 heads of 384 x 384 is 1.18M cells: past JSON's 1M, each plane not
  const T = 384, D = 2, rnd = (n) => Array.from({ length: n }, (_, i) => Math.sin(i));
  const big = await retain(d, 'sdpa', { inputs: [fp32('q', [2, 4, T, D], rnd(8 * T * D)), fp32('k', [2, 4, T, D], rnd(8 * T * D)), fp32('v', [2, 4, T, D], rnd(8 * T * D))] });
  const bj = await get(d, big, 'b=all&h=all');
  assert.equal(bj.status, 400);
  assert.equal((await bj.json()).error, 'max: 1179648 cells (384 x 384 a plane) are too large for JSON; ask for max=, format=f32 or npy, or one b and h');
  for (const q of ['b=all&h=all&max=256', 'b=all&h=all&format=npy']) {
    const r = await get(d, big, q);
    assert.equal(r.status, 200, q);
    await r.arrayBuffer(); // read whole: an answer left unread would hold the drain
  }
});

test('an answer past --request-memory is 413 naming it; one plane, or f32, that fits is served', async () => {
  // 4 heads of 100 x 100: the infer and the whole map in f32 fit 400 kB, the whole map as JSON does not
  const dm = await start({ args: ['--request-memory', '400000'] });
  try {
    const T = 100, D = 2, rnd = (n) => Array.from({ length: n }, (_, i) => Math.cos(i));
    const id = await retain(dm, 'sdpa', { inputs: [fp32('q', [1, 4, T, D], rnd(4 * T * D)), fp32('k', [1, 4, T, D], rnd(4 * T * D)), fp32('v', [1, 4, T, D], rnd(4 * T * D))] });
    const r = await get(dm, id, 'b=all&h=all');
    assert.equal(r.status, 413);
    const e = (await r.json()).error;
    assert.match(e, /^b, h: the \[1,4,100,100\] map as JSON takes \d+ bytes, more than one request may \(400000 bytes, request-memory\); ask for format=npy, one b and h at a time, max=, or raise --request-memory$/, e);
    const f = await get(dm, id, 'b=all&h=all&format=npy');
    assert.equal(f.status, 200);
    assert.equal((await f.arrayBuffer()).byteLength, 128 + 4 * 4 * T * T);
    for (const q of ['h=3', 'b=all&h=all&max=50']) { // one plane as JSON; pooled
      const g = await get(dm, id, q);
      assert.equal(g.status, 200, q);
      await g.arrayBuffer();
    }
  } finally {
    const x = await dm.stop();
    assert.equal(x.code, 0, dm.log());
  }
});

// The bound counts what an answer allocates: the stored t x s planes are
// read in place (a pooled answer never makes one), and a single f32
// plane is its own body. A sequence's map grows past --request-memory a
// step at a time (each step fits): a plane of it is larger than the
// bound, yet its pooled overview, as JSON or f32, and its head mean are
// served; the whole plane is 413 advising only what fits (max=).
test('a sequence\'s map grown past --request-memory: its pooled planes are served, the 413 advises what fits', async () => {
  const dm = await start({ dir: gqaModels(), args: ['--request-memory', '1048576'] });
  try {
    const N = 528, xs = tokens(N, 40); // 528 x 528 x 4 = 1115136 bytes a plane
    let id = null;
    for (let t0 = 0; t0 < N; t0 += 16) {
      const r = await infer(dm, 'gqa', stepBody('grow', xs.slice(t0 * D, (t0 + 16) * D), { start: t0 === 0, outputs: [{ name: 'y' }], extra: t0 === 0 ? { retain: true } : {} }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      id = id || r.json.parameters.map_id;
      assert.equal(r.json.parameters.map_id, id, `step at ${t0}`);
    }
    for (const [q, shape] of [['h=0&max=64', [59, 59]], ['h=mean&max=64', [59, 59]], ['h=1&max=16&what=mask', [16, 16]]]) {
      const r = await get(dm, id, q);
      const text = await r.text();
      assert.equal(r.status, 200, `${q}: ${text}`);
      assert.deepEqual(JSON.parse(text).shape, shape, q);
    }
    const f = await get(dm, id, 'h=0&max=16&format=f32');
    const fb = await f.arrayBuffer();
    assert.equal(f.status, 200, Buffer.from(fb).toString());
    assert.equal(fb.byteLength, 4 * 16 * 16);
    assert.equal(f.headers.get('map-shape'), '16,16');
    for (const [q, as] of [['h=0', 'JSON'], ['h=0&format=f32', 'f32'], ['h=0&format=npy', 'npy']]) {
      const r = await get(dm, id, q);
      assert.equal(r.status, 413, q);
      const e = (await r.json()).error;
      assert.match(e, new RegExp(`^max: the \\[${N},${N}\\] map as ${as} takes \\d+ bytes, more than one request may \\(1048576 bytes, request-memory\\); ask for max=, or raise --request-memory$`), e);
    }
  } finally {
    const x = await dm.stop();
    assert.equal(x.code, 0, dm.log());
  }
});

// A single plane as f32 is the body it fills: 4 MiB of a [1024, 1024]
// map (and its .npy, 4 MiB and a header) under a 10 MiB bound; the whole
// plane as JSON (about 17 MiB of text beside it) is 413.
test('a single f32 or npy plane counts its buffer once: a 4 MiB plane under 10 MiB is served', async () => {
  const dm = await start({ args: ['--request-memory', '10485760'] });
  try {
    const T = 1024, x = Array.from({ length: T }, (_, i) => Math.sin(i));
    const id = await retain(dm, 'sdpa', { inputs: ['q', 'k', 'v'].map((n) => fp32(n, [1, 1, T, 1], x)), outputs: [{ name: 'output' }] });
    for (const [q, len] of [['format=f32', 4 * T * T], ['h=0&format=f32', 4 * T * T], ['h=0&format=npy', 128 + 4 * T * T]]) {
      const r = await get(dm, id, q);
      const b = await r.arrayBuffer();
      assert.equal(r.status, 200, `${q}: ${Buffer.from(b).toString().slice(0, 300)}`);
      assert.equal(b.byteLength, len, q);
    }
    const j = await get(dm, id, 'h=0');
    assert.equal(j.status, 413);
    const e = (await j.json()).error;
    assert.match(e, /^max: the \[1024,1024\] map as JSON takes \d+ bytes, more than one request may \(10485760 bytes, request-memory\); ask for format=npy, max=, or raise --request-memory$/, e);
  } finally {
    const x = await dm.stop();
    assert.equal(x.code, 0, dm.log());
  }
});

// A reader of several answers (weights, mask, scores: the page's open of
// a map a sequence steps) learns from each which version its cells are
// from, without asking for the metadata again (no such header before).
test('every /attention answer says the version of the map its cells are from (Map-Version), as the metadata\'s version', async () => {
  const dm = await start({ dir: gqaModels() });
  try {
    const xs = tokens(3, 41);
    const meta = async (id) => (await (await fetch(`${dm.url}/v2/maps/${id}`)).json()).version;
    let id = null;
    for (let t0 = 0; t0 < 3; t0++) {
      const r = await infer(dm, 'gqa', stepBody('ver', xs.slice(t0 * D, (t0 + 1) * D), { start: t0 === 0, outputs: [{ name: 'y' }], extra: t0 === 0 ? { retain: true } : {} }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      id = id || r.json.parameters.map_id;
      const v = await meta(id);
      assert.equal(v, t0);
      for (const q of ['b=all&h=all&format=f32', 'h=0', 'h=1&what=mask&format=npy', 'h=mean&max=2']) {
        const a = await get(dm, id, q);
        await a.arrayBuffer();
        assert.equal(a.status, 200, q);
        assert.equal(a.headers.get('map-version'), String(v), q);
      }
    }
    // not on an error
    const bad = await get(dm, id, 'h=9');
    await bad.arrayBuffer();
    assert.equal(bad.status, 400);
    assert.equal(bad.headers.get('map-version'), null);
  } finally {
    const x = await dm.stop();
    assert.equal(x.code, 0, dm.log());
  }
});
