// sdpa_scale.test.mjs - the built-in sdpa's parameters.scale (PyTorch 2's
// scaled_dot_product_attention scale=: what q is multiplied by before
// Q K^T, in place of 1/sqrt(d_k)), held to softmax((q * scale) k^T)
// computed in float64 by tests/server/gen_sdpa_scale.py
// (fixtures/sdpa_scale.json, from fixtures/refs.json's inputs): its
// output, weights and scores, inline and retained (the map's "scale"),
// requests of different scales batched apart, and 400s for a scale no
// float holds or a weight set given one.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { REFS, fp32, infer, maxDiff, modelsDir, start } from './helper.mjs';

const S = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'sdpa_scale.json'), 'utf8'));

let d;
before(async () => { d = await start(); });
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

const inputs = (e) => [fp32('q', e.q_shape, e.q), fp32('k', e.k_shape, e.k), fp32('v', e.v_shape, e.v)];
const out = (r, name) => r.json.outputs.find((o) => o.name === name).data;

test('parameters.scale: sdpa\'s output, weights and scores are softmax((q x scale) k^T)\'s', async () => {
  for (const [name, causal] of [['sdpa', false], ['sdpa_causal', true]]) {
    for (const want of S[name]) {
      const r = await infer(d, 'sdpa', {
        inputs: inputs(REFS[name]), parameters: { scale: want.scale, causal, retain: true },
        outputs: [{ name: 'output' }, { name: 'attention' }, { name: 'scores' }],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const at = `${name} scale ${want.scale}`;
      assert.ok(maxDiff(out(r, 'output'), want.output) < 2e-6, `${at}: output`);
      assert.ok(maxDiff(out(r, 'attention'), want.attention) < 1e-6, `${at}: attention`);
      assert.ok(maxDiff(out(r, 'scores'), want.scores) < 4e-6, `${at}: scores`);
      // the retained map says the scale its scores were made with
      const id = r.json.parameters.map_id;
      const m = await (await fetch(`${d.url}/v2/maps/${id}`)).json();
      assert.equal(m.scale, Math.fround(want.scale), `${at}: map's scale`);
      const sc = await (await fetch(`${d.url}/v2/maps/${id}/attention?what=scores&b=all&h=all`)).json();
      assert.ok(maxDiff(sc.data, want.scores) < 4e-6, `${at}: retained scores`);
    }
  }
  // 1 and 1.0 are the same scale; no scale is 1/sqrt(d_k) as before
  const one = await infer(d, 'sdpa', { inputs: inputs(REFS.sdpa), parameters: { scale: 1 }, outputs: [{ name: 'output' }] });
  assert.ok(maxDiff(out(one, 'output'), S.sdpa[0].output) < 2e-6, 'scale 1 (an integer)');
  const dflt = await infer(d, 'sdpa', { inputs: inputs(REFS.sdpa), outputs: [{ name: 'output' }] });
  assert.ok(maxDiff(out(dflt, 'output'), REFS.sdpa.output) < 2e-6, 'no scale: PyTorch\'s default');
});

test('requests of different scales share no batch: each gets its own scale\'s numbers', async (t) => {
  const db = await start({ t, args: ['--max-batch', '16', '--batch-delay-us', '200000', '--instances', '1'] });
  try {
    const scales = [undefined, 3, undefined, 1, 3, undefined, 1, 0.2];
    const want = (s) => (s === undefined ? REFS.sdpa.output : S.sdpa.find((x) => x.scale === s).output);
    const rs = await Promise.all(scales.map((scale) => infer(db, 'sdpa', {
      inputs: inputs(REFS.sdpa), parameters: scale === undefined ? {} : { scale }, outputs: [{ name: 'output' }],
    })));
    rs.forEach((r, i) => {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.ok(maxDiff(out(r, 'output'), want(scales[i])) < 2e-6, `request ${i}, scale ${scales[i]}`);
    });
    const s = (await (await fetch(`${db.url}/v2/models/sdpa/stats`)).json()).model_stats[0];
    assert.ok(s.execution_count < scales.length, `they batched (${s.execution_count} batches)`);
    assert.equal((await db.stop()).code, 0);
  } catch (e) { await db.stop('SIGKILL'); throw e; }
});

test('a scale no float holds, not a number, or given to a weight set: 400 naming it', async () => {
  const msg = 'parameters.scale: expected a positive number that a float holds (1.4e-45 to 3.4e38), what q is multiplied by before Q K^T';
  for (const scale of [0, -1, 1e-50, 1e39, '0.5', true, null, [0.5]]) {
    const r = await infer(d, 'sdpa', { inputs: inputs(REFS.sdpa), parameters: { scale } });
    assert.equal(r.status, 400, JSON.stringify(scale));
    assert.equal(r.json.error, msg, JSON.stringify(scale));
  }
  const c = REFS.self;
  const w = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { scale: 0.5 } });
  assert.equal(w.status, 400);
  assert.equal(w.json.error, 'parameters.scale: model \'tiny\' is a weight set, whose scale is its own (its config.json\'s, else 1/sqrt(head_dim), in its metadata); only the built-in sdpa takes one');
  // a sequence step of a weight set likewise, its sequence not begun
  const st = await infer(d, 'tiny', { inputs: [fp32('x', [1, 5, 8], c.x.slice(0, 40))], parameters: { sequence_id: 77, sequence_start: true, scale: 0.5 } });
  assert.equal(st.status, 400);
  assert.equal(st.json.error, w.json.error);
  assert.deepEqual((await (await fetch(`${d.url}/v2/sequences`)).json()).sequences ?? [], []);
});

test('scores a scale makes overflow: the 400 names parameters.scale beside the inputs', async () => {
  // refs.json's sdpa q and k are below 3 in magnitude (d_k 5): 3e38, a
  // float, times any q.k past 1.14 is past float32's largest, 3.4e38,
  // and no input alone is the cause
  const r = await infer(d, 'sdpa', { inputs: inputs(REFS.sdpa), parameters: { scale: 3e38 } });
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.match(r.json.error, /is not finite \(the inputs overflow float32\); scale them down, or parameters\.scale$/);
  // without a scale of its own the message stays as it was
  const e = REFS.sdpa;
  const big = (n) => new Array(n).fill(1e38); // each q.k is 5e76
  const n = await infer(d, 'sdpa', { inputs: [fp32('q', e.q_shape, big(e.q.length)), fp32('k', e.k_shape, big(e.k.length)), fp32('v', e.v_shape, e.v)] });
  assert.equal(n.status, 400, JSON.stringify(n.json));
  assert.match(n.json.error, /\(the inputs overflow float32\); scale them down$/);
});

test('a weight set\'s overflow with a scale of its own (config.json) does not point at parameters.scale, which it refuses', async (t) => {
  const dir = modelsDir();
  const cfg = join(dir, 'tiny', 'config.json');
  writeFileSync(cfg, JSON.stringify({ ...JSON.parse(readFileSync(cfg, 'utf8')), scale: 0.125 }));
  const dw = await start({ t, dir });
  try {
    const c = REFS.self;
    const w = await infer(dw, 'tiny', { inputs: [fp32('x', c.shape, c.x.map(() => 3e38))] });
    assert.equal(w.status, 400, JSON.stringify(w.json));
    assert.match(w.json.error, /\(the inputs overflow float32\); scale them down$/);
    assert.equal((await dw.stop()).code, 0);
  } catch (e) { await dw.stop('SIGKILL'); throw e; }
});
