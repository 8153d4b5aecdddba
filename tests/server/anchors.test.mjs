// anchors.test.mjs - retained maps and binary answers held to independent
// references, not only to the daemon's own inline answer: PyTorch's numbers
// (fixtures/refs.json, tests/server/gen_refs.py), the seeds' worked example
// (/work/shared/seeds 000: A = [[0.880797, 0.119202], [0.119202, 0.880797]])
// and masks and weights worked out here from the API's rules (README,
// "Retained attention maps"). A retained masked request's map returns its
// mask (what=mask), for sdpa and for a weight set; its rows' entropy
// (what=entropy) is the seed's worked out by hand.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { REFS, binaryRequest, f32bytes, fp32, infer, maxDiff, parseBinary, start } from './helper.mjs';

let d;
before(async () => { d = await start(); });
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

/** GET a map slice as JSON; asserts 200. */
async function slice(id, q) {
  const r = await fetch(`${d.url}/v2/maps/${id}/attention?${q}`);
  const j = await r.json();
  assert.equal(r.status, 200, `${q}: ${JSON.stringify(j)}`);
  return j;
}
/** GET a map slice as raw float32 (format=f32); asserts 200. */
async function sliceF32(id, q) {
  const r = await fetch(`${d.url}/v2/maps/${id}/attention?${q}&format=f32`);
  assert.equal(r.status, 200, q);
  return { shape: r.headers.get('map-shape'), data: Array.from(new Float32Array(await r.arrayBuffer())) };
}
async function retain(model, body) {
  const r = await infer(d, model, { ...body, parameters: { ...(body.parameters || {}), retain: true } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return { id: r.json.parameters.map_id, json: r.json };
}
const meta = async (id) => (await fetch(`${d.url}/v2/maps/${id}`)).json();

// The seed's first worked example (seeds 000): T = 2, d_k = 4, d_v = 2.
const SEED = {
  q: [2, 0, 2, 0, 0, 4, 0, 2], k: [1, 0, 1, 0, 0, 1, 0, 0], v: [1, 2, 3, 0],
  // scores q.k / sqrt(4): [[4/2, 0], [0, 4/2]]; A_00 = e^2 / (e^2 + 1)
  scores: [2, 0, 0, 2], a: 0.880797, b: 0.119202,
  // "0.880797 * [1, 2] + 0.119202 * [3, 0] = [1.238404, 1.761594]", and row 1
  out: [1.238404, 1.761594, 2.761594, 0.238405],
};

test('a retained sdpa map is the seed\'s worked example: weights, scores, values, output', async () => {
  const { id, json } = await retain('sdpa', {
    inputs: [fp32('q', [2, 4], SEED.q), fp32('k', [2, 4], SEED.k), fp32('v', [2, 2], SEED.v)],
    outputs: [{ name: 'output' }, { name: 'scores' }],
  });
  const out = json.outputs.find((o) => o.name === 'output').data;
  assert.ok(maxDiff(out, SEED.out) < 2e-6, `output ${out}`);
  const m = await meta(id);
  assert.deepEqual(m.shape, [1, 1, 2, 2]);
  assert.equal(m.d_k, 4);
  for (const w of ['attention', 'scores', 'v']) assert.ok(m.retained.includes(w), `${w} retained: ${m.retained}`);
  const a = await slice(id, 'b=0&h=0');
  assert.ok(maxDiff(a.data, [SEED.a, SEED.b, SEED.b, SEED.a]) < 1e-6, `attention ${a.data}`);
  const e2 = Math.exp(2);
  assert.ok(maxDiff(a.data, [e2 / (e2 + 1), 1 / (e2 + 1), 1 / (e2 + 1), e2 / (e2 + 1)]) < 1e-7);
  assert.deepEqual((await slice(id, 'h=0&what=scores')).data, SEED.scores);
  assert.deepEqual((await slice(id, 'h=0&what=v')).data, SEED.v);
  assert.deepEqual((await slice(id, 'h=0&what=mask')).data, [1, 1, 1, 1]);
  // what=entropy: each row's -sum p ln p, both rows [e^2, 1] / (e^2 + 1)
  const pa = e2 / (e2 + 1), pb = 1 / (e2 + 1), H = -(pa * Math.log(pa) + pb * Math.log(pb));
  const ent = await slice(id, 'h=0&what=entropy');
  assert.deepEqual(ent.shape, [2, 1]);
  assert.ok(maxDiff(ent.data, [H, H]) < 1e-6, `entropy ${ent.data} vs ${H}`);
});

test('retained maps of a weight set equal PyTorch\'s attention (f32, JSON, h=mean, max=)', async () => {
  for (const name of ['self', 'causal']) {
    const c = REFS[name];
    const [B, T] = c.shape, H = REFS.n_heads;
    const { id } = await retain('tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { causal: name === 'causal' } });
    for (let b = 0; b < B; b++) {
      const mean = new Array(T * T).fill(0);
      for (let h = 0; h < H; h++) {
        const ref = c.attention.slice(((b * H) + h) * T * T, ((b * H) + h + 1) * T * T);
        ref.forEach((x, i) => { mean[i] += x / H; });
        const f = await sliceF32(id, `b=${b}&h=${h}`);
        assert.equal(f.shape, `${T},${T}`);
        assert.ok(maxDiff(f.data, ref) < 1e-6, `${name} b=${b} h=${h}: f32 vs PyTorch`);
        assert.ok(maxDiff((await slice(id, `b=${b}&h=${h}`)).data, ref) < 1e-6, `${name} b=${b} h=${h}: JSON vs PyTorch`);
        // causal: query i attends keys 0..i (README), whatever the weights
        const mask = (await slice(id, `b=${b}&h=${h}&what=mask`)).data;
        assert.deepEqual(mask, ref.map((_, k) => (name === 'self' || k % T <= Math.floor(k / T) ? 1 : 0)), `${name} mask`);
      }
      assert.ok(maxDiff((await slice(id, `b=${b}&h=mean`)).data, mean) < 1e-6, `${name} b=${b} h=mean vs PyTorch`);
      // max=2 pools blocks of ceil(T/2) x ceil(T/2), each the largest weight
      const k = Math.ceil(T / 2), ref = c.attention.slice(b * H * T * T, (b * H + 1) * T * T);
      const want = [];
      for (let r = 0; r < 2; r++) for (let q = 0; q < 2; q++) {
        let m = -1;
        for (let i = r * k; i < Math.min(T, r * k + k); i++) for (let j = q * k; j < Math.min(T, q * k + k); j++) m = Math.max(m, ref[i * T + j]);
        want.push(m);
      }
      const p = await slice(id, `b=${b}&h=0&max=2`);
      assert.deepEqual(p.shape, [2, 2]);
      assert.ok(maxDiff(p.data, want) < 1e-6, `${name} b=${b} pooled vs PyTorch`);
    }
  }
});

test('a retained masked request\'s map returns its mask: sdpa with an explicit [T, S] mask', async () => {
  // q = 0: every score is 0, so row i is uniform over the keys its mask allows.
  const MASK = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1];
  for (const causal of [false, true]) {
    const { id } = await retain('sdpa', {
      inputs: [fp32('q', [4, 2], new Array(8).fill(0)), fp32('k', [4, 2], [0, 1, 1, 0, 2, -1, 3, -2]),
        fp32('v', [4, 2], [0, 1, 1, 1, 2, 1, 3, 1]), { name: 'mask', datatype: 'BOOL', shape: [4, 4], data: MASK.map(Boolean) }],
      parameters: { causal },
    });
    const m = await meta(id);
    assert.equal(m.mask, true, `GET /v2/maps/${id} says the request's mask was kept: ${JSON.stringify(m)}`);
    assert.ok(m.retained.includes('mask'), `retained: ${m.retained}`);
    const want = MASK.map((x, k) => (x && (!causal || k % 4 <= Math.floor(k / 4)) ? 1 : 0));
    const got = await slice(id, 'h=0&what=mask');
    assert.deepEqual(got.shape, [4, 4]);
    assert.deepEqual(got.data, want, `causal ${causal}`);
    const n = [0, 1, 2, 3].map((i) => want.slice(4 * i, 4 * i + 4).reduce((s, x) => s + x, 0));
    const att = await slice(id, 'h=0');
    assert.ok(maxDiff(att.data, want.map((x, k) => (x ? 1 / n[Math.floor(k / 4)] : 0))) < 1e-7, `weights ${att.data}`);
  }
});

test('what=mask with per-head masks: each head its own, h=mean any head, max= whole block masked', async () => {
  // sdpa [B=1, H=2, T=4, d]: a [1, 2, 4, 4] mask (q's leading dims then [T, S]).
  const M0 = [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1];
  const M1 = [0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1];
  const z = new Array(8).fill(0);
  const { id } = await retain('sdpa', {
    inputs: [fp32('q', [1, 2, 4, 1], z), fp32('k', [1, 2, 4, 1], z), fp32('v', [1, 2, 4, 1], [1, 2, 3, 4, 5, 6, 7, 8]),
      { name: 'mask', datatype: 'BOOL', shape: [1, 2, 4, 4], data: [...M0, ...M1].map(Boolean) }],
  });
  assert.deepEqual((await slice(id, 'h=0&what=mask')).data, M0);
  assert.deepEqual((await slice(id, 'h=1&what=mask')).data, M1);
  assert.deepEqual((await slice(id, 'h=mean&what=mask')).data, M0.map((x, k) => x | M1[k]));
  // 2 x 2 blocks: 0 only where the whole block is masked in that head
  const pool = (m) => [0, 1, 2, 3].map((c) => {
    const r0 = 2 * Math.floor(c / 2), c0 = 2 * (c % 2);
    return m[r0 * 4 + c0] | m[r0 * 4 + c0 + 1] | m[(r0 + 1) * 4 + c0] | m[(r0 + 1) * 4 + c0 + 1];
  });
  assert.deepEqual((await slice(id, 'h=1&what=mask&max=2')).data, pool(M1));
  assert.deepEqual((await slice(id, 'h=0&what=mask&max=2')).data, pool(M0));
  // what=v: the value rows head h read
  assert.deepEqual((await slice(id, 'h=1&what=v')).data, [5, 6, 7, 8]);
  // row 1 of head 1 has no visible key: zero weights, never NaN
  assert.deepEqual((await slice(id, 'h=1')).data.slice(4, 8), [0, 0, 0, 0]);
});

test('a retained masked request\'s map returns its mask: a weight set with context, context_lengths and a [B, T, S] mask', async () => {
  const c = REFS.cross;
  const [B, T] = c.shape, S = c.context_shape[1], H = REFS.n_heads;
  const { id } = await retain('tiny', {
    inputs: [fp32('x', c.shape, c.x), fp32('context', c.context_shape, c.context),
      { name: 'context_lengths', datatype: 'INT32', shape: [B], data: c.context_lengths },
      { name: 'mask', datatype: 'BOOL', shape: [B, T, S], data: c.mask }],
  });
  const m = await meta(id);
  assert.equal(m.mask, true, JSON.stringify(m));
  for (let b = 0; b < B; b++) {
    // key j is visible to query i when j < context_lengths[b] and mask[b][i][j]
    const want = Array.from({ length: T * S }, (_, k) => (c.mask[b * T * S + k] && k % S < c.context_lengths[b] ? 1 : 0));
    for (let h = 0; h < H; h++) {
      assert.deepEqual((await slice(id, `b=${b}&h=${h}&what=mask`)).data, want, `b=${b} h=${h}`);
      const ref = c.attention.slice((b * H + h) * T * S, (b * H + h + 1) * T * S);
      assert.ok(maxDiff((await sliceF32(id, `b=${b}&h=${h}`)).data, ref) < 1e-6, `b=${b} h=${h} vs PyTorch`);
    }
  }
});

test('binary answers carry PyTorch\'s numbers, not only the JSON answer\'s', async () => {
  const c = REFS.self;
  const { body, headerLen } = binaryRequest({
    inputs: [{ name: 'x', datatype: 'FP32', shape: c.shape, parameters: { binary_data_size: c.x.length * 4 } }],
    outputs: [{ name: 'y', parameters: { binary_data: true } }, { name: 'attention', parameters: { binary_data: true } }],
  }, [f32bytes(c.x)]);
  const r = await fetch(`${d.url}/v2/models/tiny/infer`, {
    method: 'POST', body, headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(headerLen) },
  });
  assert.equal(r.status, 200);
  const p = parseBinary(Buffer.from(await r.arrayBuffer()), Number(r.headers.get('inference-header-content-length')));
  assert.equal(p.rest, 0);
  assert.ok(maxDiff(p.raw.y, c.y) < 1e-5, 'binary y vs PyTorch');
  assert.ok(maxDiff(p.raw.attention, c.attention) < 1e-6, 'binary attention vs PyTorch');
  // sdpa, binary in and out: the seed's output, little-endian float32
  const s = binaryRequest({
    inputs: [['q', [2, 4], SEED.q], ['k', [2, 4], SEED.k], ['v', [2, 2], SEED.v]]
      .map(([name, shape, a]) => ({ name, datatype: 'FP32', shape, parameters: { binary_data_size: a.length * 4 } })),
    parameters: { binary_data_output: true },
  }, [f32bytes(SEED.q), f32bytes(SEED.k), f32bytes(SEED.v)]);
  const r2 = await fetch(`${d.url}/v2/models/sdpa/infer`, {
    method: 'POST', body: s.body, headers: { 'Inference-Header-Content-Length': String(s.headerLen) },
  });
  assert.equal(r2.status, 200);
  const buf = Buffer.from(await r2.arrayBuffer());
  const hl = Number(r2.headers.get('inference-header-content-length'));
  assert.equal(buf.length - hl, 16);
  const got = [0, 1, 2, 3].map((i) => buf.readFloatLE(hl + 4 * i));
  assert.ok(maxDiff(got, SEED.out) < 2e-6, `binary output ${got}`);
});
