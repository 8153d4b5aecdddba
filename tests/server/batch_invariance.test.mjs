// batch_invariance.test.mjs - a request's answer has the same float bits
// whether it ran alone or in a batch with any other requests (identical
// ones, other lengths, sequence steps, a retained request): the README's
// "Batch invariance". One daemon runs every request alone (--max-batch 1),
// another runs them in batches of 8 (a long --batch-delay-us that a full
// batch cuts short); batch_stats prove each round was one batch of 8.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fp32, infer, modelsDir, mulberry32, safetensors, start } from './helper.mjs';

// d_model 512, 4 query heads and 2 kv heads of 64, RoPE, biases: weights
// of 1.5 MiB, over --solo-max-weights, so requests wait for a batch. (At
// d_model 256 OpenBLAS's Cooperlake kernels happened to give each row the
// bits of the row alone on these requests; at 512 they do not.)
const D = 512, H = 4, HKV = 2, DK = 64, N = 8;

function models() {
  const dir = modelsDir();
  const u = mulberry32(20261207), r = () => 2 * u() - 1;
  const m = (a, b) => [[a, b], Array.from({ length: a * b }, () => r() * 0.06)];
  const v = (n) => [[n], Array.from({ length: n }, () => r() * 0.1)];
  mkdirSync(join(dir, 'bi'));
  writeFileSync(join(dir, 'bi', 'model.safetensors'), safetensors({
    W_q: m(D, H * DK), W_k: m(D, HKV * DK), W_v: m(D, HKV * DK), W_o: m(H * DK, D),
    b_q: v(H * DK), b_k: v(HKV * DK), b_v: v(HKV * DK), b_o: v(D),
  }));
  writeFileSync(join(dir, 'bi', 'config.json'), JSON.stringify({
    n_heads: H, n_kv_heads: HKV, rope: { theta: 10000 },
    description: 'batch_invariance.test.mjs: GQA + RoPE + biases, seeded',
  }));
  return dir;
}

const xs = (t, seed) => {
  const u = mulberry32(seed);
  return Array.from({ length: t * D }, () => 2 * u() - 1);
};
const ALL = [{ name: 'y' }, { name: 'attention' }, { name: 'scores' }];
const plain = (t, seed, causal = true) => ({ inputs: [fp32('x', [1, t, D], xs(t, seed))], outputs: ALL, parameters: { causal } });
const step = (id, t, seed, start) => ({
  inputs: [fp32('x', [1, t, D], xs(t, seed))], outputs: ALL,
  parameters: { sequence_id: id, sequence_start: start, sequence_end: false },
});
const retained = (t, seed) => ({
  inputs: [fp32('x', [1, t, D], xs(t, seed))], outputs: [{ name: 'y' }, { name: 'attention' }, { name: 'v' }],
  parameters: { retain: true, causal: true },
});

// Rounds of N requests each. Lengths around the 48 rows of the skinny
// kernel and past 256 (a block of rows of its own); the sequence steps
// (a 10-token start, then a one-token step and a 20-token one) sit beside
// stateless requests.
const ROUNDS = [
  Array.from({ length: N }, () => plain(16, 1)),
  [plain(1, 2), plain(16, 3), plain(47, 4, false), plain(49, 5), plain(300, 6),
    plain(5, 7, false), retained(16, 8), step(71, 10, 9, true)],
  [step(71, 1, 10, false), step(72, 20, 11, true), plain(3, 12), plain(16, 1),
    plain(60, 13), plain(2, 14, false), plain(33, 15), retained(48, 16)],
];

const sdpa = (t, seed, causal) => ({
  inputs: ['q', 'k', 'v'].map((n, j) => fp32(n, [1, 2, t, DK], xs(t * 2 * DK / D, seed * 3 + j))),
  outputs: [{ name: 'output' }, { name: 'attention' }, { name: 'scores' }], parameters: { causal },
});
const SDPA = [sdpa(1, 20, false), sdpa(7, 21, true), sdpa(16, 22, true), sdpa(49, 23, false),
  sdpa(130, 24, true), sdpa(3, 25, false), sdpa(16, 22, true), sdpa(9, 26, true)];

// The bits of an answer: every output's data as float32s, the retained
// maps' attention and norm planes (all heads) as served.
async function bits(d, r, what) {
  assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.json).slice(0, 300)}`);
  const out = {};
  for (const o of r.json.outputs) out[o.name] = Buffer.from(Float32Array.from(o.data).buffer);
  const id = r.json.parameters?.map_id;
  if (id !== undefined)
    for (const q of ['what=attention', 'what=norm']) {
      const m = await fetch(`${d.url}/v2/maps/${id}/attention?${q}&b=all&h=all&format=f32`);
      assert.equal(m.status, 200, `${what} ${q}`);
      out[q] = Buffer.from(await m.arrayBuffer());
    }
  return out;
}

const batchesOf = async (d, n, model = 'bi') => {
  const s = (await (await fetch(`${d.url}/v2/models/${model}/stats`)).json()).model_stats[0];
  return s.batch_stats.filter((b) => b.batch_size === n).reduce((k, b) => k + b.compute_infer.count, 0);
};

test('every answer in a batch of 8 has the bits of the same request alone', async (t) => {
  const dir = models();
  const alone = await start({ t, dir, args: ['--max-batch', '1', '--batch-invariant', '1'] });
  const batched = await start({ t, dir, args: ['--batch-invariant', '1', '--max-batch', String(N), '--batch-delay-us', '10000000', '--instances', '1', '--solo-max-weights', '0'] });
  try {
    for (const [k, round] of ROUNDS.entries()) {
      const want = [];
      for (const [i, body] of round.entries()) // one after the other: batches of 1
        want.push(await bits(alone, await infer(alone, 'bi', body), `round ${k} request ${i} alone`));
      const rs = await Promise.all(round.map((body) => infer(batched, 'bi', body)));
      // the round ran as one batch of N, not as several smaller ones
      assert.equal(await batchesOf(batched, N), k + 1, `round ${k} was not one batch of ${N}`);
      const differ = [];
      for (const [i, r] of rs.entries()) {
        const got = await bits(batched, r, `round ${k} request ${i} batched`);
        assert.deepEqual(Object.keys(got).sort(), Object.keys(want[i]).sort());
        for (const name of Object.keys(got))
          if (!got[name].equals(want[i][name])) differ.push(`${i}:${name}`);
      }
      assert.deepEqual(differ, [], `round ${k}: these requests' outputs differ batched from alone`);
    }
    assert.equal(await batchesOf(alone, 1), ROUNDS.flat().length);
    // the built-in sdpa: 8 requests of 2 heads of 64, 1 to 130 query rows
    const want = [];
    for (const [i, body] of SDPA.entries())
      want.push(await bits(alone, await infer(alone, 'sdpa', body), `sdpa request ${i} alone`));
    const rs = await Promise.all(SDPA.map((body) => infer(batched, 'sdpa', body)));
    // each head counts as one of a batch's --max-batch sequences (and in
    // the stats): 16 heads in two batches of 8, 4 requests each
    const st = (await (await fetch(`${batched.url}/v2/models/sdpa/stats`)).json()).model_stats[0];
    assert.deepEqual([st.inference_count, st.execution_count], [2 * N, 2], 'the sdpa requests did not run as 2 batches');
    assert.equal(await batchesOf(batched, N, 'sdpa'), 2);
    const differ = [];
    for (const [i, r] of rs.entries()) {
      const got = await bits(batched, r, `sdpa request ${i} batched`);
      for (const name of Object.keys(want[i]))
        if (!got[name].equals(want[i][name])) differ.push(`${i}:${name}`);
    }
    assert.deepEqual(differ, [], 'sdpa: these requests\' outputs differ batched from alone');
    assert.equal((await batched.stop()).code, 0);
    assert.equal((await alone.stop()).code, 0);
  } catch (e) {
    await batched.stop('SIGKILL');
    await alone.stop('SIGKILL');
    throw e;
  }
});
