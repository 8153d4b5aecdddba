// sequences_maps.test.mjs - a sequence's retained map (split from
// sequences.test.mjs): one map that grows with every step under the same
// id, its mask what each row attended, its scores kept and rewound, and a
// map that outgrows --maps-bytes ending while the sequence goes on. The
// reference is, as there, one stateless causal request over the
// sequence's whole history.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SLOW, fp32, infer, maxDiff, start } from './helper.mjs';
import { ALL, D, H, checkStep, expectRows, full, gqaModels, metric, stepBody, tokens } from './seq_helper.mjs';

test('retain: one map that grows with every step, same id, readable meanwhile', async () => {
  const d = await start({ dir: gqaModels(), args: ['--api-key', 'k3y'] });
  const auth = { Authorization: 'Bearer k3y' };
  try {
    const xs = tokens(7, 9);
    const r0 = await infer(d, 'gqa', { inputs: [fp32('x', [1, 7, D], xs)], outputs: ALL, parameters: { causal: true } }, auth);
    const ref = { n: 7, ...Object.fromEntries(r0.json.outputs.map((o) => [o.name, o.data])) };
    let t0 = 0, id = null;
    for (const t of [3, 1, 3]) {
      const r = await infer(d, 'gqa', stepBody('ret', xs.slice(t0 * D, (t0 + t) * D),
        { start: t0 === 0, extra: t0 === 0 ? { retain: true, tokens: ['a', 'b', 'c'] } : { retain: true } }), auth);
      checkStep(r, ref, t0, t, `retain ${t0}`);
      t0 += t;
      if (!id) id = r.json.parameters.map_id;
      assert.equal(r.json.parameters.map_id, id);
      const m = await (await fetch(`${d.url}/v2/maps/${id}/attention?h=1`, { headers: auth })).json();
      assert.deepEqual(m.shape, [t0, t0]);
      const want = [];
      for (let i = 0; i < t0; i++)
        for (let j = 0; j < t0; j++) want.push(ref.attention[(1 * 7 + i) * 7 + j]);
      assert.ok(maxDiff(m.data, want) <= 1e-5);
    }
    const meta = await (await fetch(`${d.url}/v2/maps/${id}`, { headers: auth })).json();
    assert.match(JSON.stringify(meta), /"a"/);
    // grown, it still says the scale its scores were made with (1/sqrt(4))
    assert.deepEqual([meta.version, meta.d_k, meta.scale], [2, 4, 0.5]);
    // a later retain on a sequence that keeps no map is refused
    assert.equal((await infer(d, 'gqa', stepBody('plain', xs.slice(0, D), { start: true }), auth)).status, 200);
    const late = await infer(d, 'gqa', stepBody('plain', xs.slice(D, 2 * D), { extra: { retain: true } }), auth);
    assert.equal(late.status, 400);
    assert.match(late.json.error, /retain/);
    // DELETE needs the key like other mutating routes
    assert.equal((await fetch(`${d.url}/v2/sequences/ret`, { method: 'DELETE' })).status, 401);
    assert.equal((await fetch(`${d.url}/v2/sequences/ret`, { method: 'DELETE', headers: auth })).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});

// README, "Retained map": what=mask says, per row, which keys that row
// attended. A row of a step at positions p..p+n-1 attended keys 0..p+n-1
// (not causal) or 0..its own position (causal); the keys that came after
// its step did not exist for it. The weights are the stateless requests'
// over the tokens each step saw.
test('retain: a grown map\'s mask is what each row attended, whatever each step\'s causal flag', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(6, 15);
    const get = async (id, q) => (await fetch(`${d.url}/v2/maps/${id}/attention?${q}`)).json();
    const over = async (n, causal) => {
      const r = await infer(d, 'gqa', { inputs: [fp32('x', [1, n, D], xs.slice(0, n * D))],
        outputs: [{ name: 'attention' }], parameters: { causal } });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return r.json.outputs[0].data; // [1, H, n, n]
    };
    // a: a non-causal sequence (as on the non-causal demo model); b: a
    // causal start, then a step sent with "causal": false
    for (const [name, c0, c1] of [['a', false, false], ['b', true, false]]) {
      const id0 = `mask-${name}`;
      const r0 = await infer(d, 'gqa', stepBody(id0, xs.slice(0, 3 * D),
        { start: true, outputs: [{ name: 'y' }], extra: { retain: true, causal: c0 } }));
      assert.equal(r0.status, 200, JSON.stringify(r0.json));
      const r1 = await infer(d, 'gqa', stepBody(id0, xs.slice(3 * D, 6 * D),
        { outputs: [{ name: 'y' }], extra: { causal: c1 } }));
      assert.equal(r1.status, 200, JSON.stringify(r1.json));
      const id = r0.json.parameters.map_id;
      assert.equal(r1.json.parameters.map_id, id);
      const end = (i) => (i < 3 ? (c0 ? i + 1 : 3) : (c1 ? i + 1 : 6)); // keys 0 .. end-1
      const a3 = await over(3, c0), a6 = await over(6, c1);
      const wantMask = [];
      for (let i = 0; i < 6; i++) for (let j = 0; j < 6; j++) wantMask.push(j < end(i) ? 1 : 0);
      for (let h = 0; h < H; h++) {
        const wantAtt = [];
        for (let i = 0; i < 6; i++)
          for (let j = 0; j < 6; j++)
            wantAtt.push(i < 3 ? (j < 3 ? a3[(h * 3 + i) * 3 + j] : 0) : a6[(h * 6 + i) * 6 + j]);
        const w = await get(id, `h=${h}`);
        assert.ok(maxDiff(w.data, wantAtt) <= 1e-5, `${name} h=${h}: weights`);
        // where the mask says 0 the weight is exactly 0
        for (let k = 0; k < 36; k++) if (!wantMask[k]) assert.equal(w.data[k], 0, `${name} cell ${k}`);
        assert.deepEqual((await get(id, `h=${h}&what=mask`)).data, wantMask, `${name} h=${h}: mask`);
      }
      assert.deepEqual((await get(id, 'h=mean&what=mask')).data, wantMask, `${name} h=mean: mask`);
      // pooled 2 x 2 blocks: 0 only where the whole block was not attended
      const pooled = [];
      for (let r = 0; r < 3; r++)
        for (let c = 0; c < 3; c++)
          pooled.push([0, 1].some((di) => [0, 1].some((dj) => wantMask[(2 * r + di) * 6 + 2 * c + dj])) ? 1 : 0);
      assert.deepEqual((await get(id, 'h=0&what=mask&max=3')).data, pooled, `${name} pooled mask`);
    }
  } finally { assert.equal((await d.stop()).code, 0); }
});

// README, "Retained map": a map that can no longer grow (too big for
// --maps-bytes) ends: 404 from then on, a follower's long poll is told at
// once, the sequence goes on without one and no longer lists it; nor does
// the listing name a map that other maps evicted.
test('retain: a sequence\'s map that outgrows --maps-bytes ends (404, its follower told), the sequence goes on', async () => {
  // 4 heads: a T-token map holds 4 x T x T floats, 18,496 bytes at 34
  // tokens, 20,736 at 36
  const d = await start({ dir: gqaModels(), args: ['--maps-bytes', '20000'] });
  try {
    const xs = tokens(40, 16);
    const y = [{ name: 'y' }];
    const r0 = await infer(d, 'gqa', stepBody('big', xs.slice(0, 34 * D), { start: true, outputs: y, extra: { retain: true } }));
    assert.equal(r0.status, 200, JSON.stringify(r0.json));
    const id = r0.json.parameters.map_id;
    assert.ok(id, 'a 34-token map fits');
    let n = 34, ended = false;
    while (n < 39 && !ended) {
      const waiter = fetch(`${d.url}/v2/maps/${id}?wait=${n}&timeout_ms=${5000 * SLOW}`);
      const r = await infer(d, 'gqa', stepBody('big', xs.slice(n * D, (n + 1) * D), { outputs: y }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      n++;
      const w = await waiter;
      if (r.json.parameters.map_id) {
        assert.equal(r.json.parameters.map_id, id);
        assert.equal(w.status, 200);
        assert.equal((await w.json()).shape[2], n);
        continue;
      }
      ended = true;
      assert.equal(w.status, 404, `the follower was not told the map ended: ${await w.text()}`);
      assert.equal((await fetch(`${d.url}/v2/maps/${id}`)).status, 404);
      assert.equal((await fetch(`${d.url}/v2/maps/${id}/attention?h=0`)).status, 404);
      const seq = await (await fetch(`${d.url}/v2/sequences/big`)).json();
      assert.equal(seq.length, n);
      assert.equal(seq.map_id, undefined, JSON.stringify(seq));
      const why = new RegExp(`info attnd: sequence 'big': its map ${id} ends: map ${id}: ${n} rows over ${n} keys \\(4 heads\\) need more than the whole retained-map store \\(20000 bytes, maps-bytes\\); raise --maps-bytes`);
      assert.match(await d.logged(why), why, 'the log says why the map ended');
    }
    // 34 tokens and their row ends fit in 20,000 bytes, 36 do not
    assert.ok(ended && n >= 35 && n <= 36, `the map ended at ${n} tokens`);
    // the sequence goes on without a map
    const r = await infer(d, 'gqa', stepBody('big', xs.slice(n * D, (n + 1) * D), { outputs: y }));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.parameters.sequence_length, n + 1);
    assert.equal(r.json.parameters.map_id, undefined);
    // a sequence's map that other maps evicted is not listed either
    const s0 = await infer(d, 'gqa', stepBody('small', xs.slice(0, 2 * D), { start: true, outputs: y, extra: { retain: true } }));
    const small = s0.json.parameters.map_id;
    assert.equal((await (await fetch(`${d.url}/v2/sequences/small`)).json()).map_id, small);
    // two 34-token maps: the second evicts the oldest ones, small first
    for (let k = 0; k < 2; k++) {
      const kept = await infer(d, 'gqa', { inputs: [fp32('x', [1, 34, D], xs.slice(0, 34 * D))], parameters: { retain: true } });
      assert.equal(kept.status, 200, JSON.stringify(kept.json));
    }
    assert.equal((await fetch(`${d.url}/v2/maps/${small}`)).status, 404, 'the small map was not evicted');
    assert.equal((await (await fetch(`${d.url}/v2/sequences/small`)).json()).map_id, undefined);
    const listed = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.deepEqual(listed.sequences.filter((q) => q.map_id), [], JSON.stringify(listed));
  } finally { assert.equal((await d.stop()).code, 0); }
});

// README, "Retained map": a start that retains and asks for `scores` keeps
// them, and every later step grows them (computed for the map even when the
// step does not ask for the output). A row's scores are its step's (the
// stateless causal request's over the same tokens); on keys that came after
// its step, or that a rewind replaced, they read 0.
test('retain with scores: the map keeps them and grows them with every step, rewinds too', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(7, 17), other = tokens(1, 18);
    const ref = await full(d, xs);
    const y = [{ name: 'y' }];
    const check = async (id, seen, r, what) => {
      const n = seen.length;
      const meta = await (await fetch(`${d.url}/v2/maps/${id}`)).json();
      assert.deepEqual(meta.retained, ['attention', 'mask', 'scores'], what);
      assert.deepEqual(meta.shape, [1, H, n, n], what);
      for (let h = 0; h < H; h++) {
        const m = await (await fetch(`${d.url}/v2/maps/${id}/attention?h=${h}&what=scores`)).json();
        assert.ok(m.data, `${what}: ${JSON.stringify(m)}`);
        const want = [];
        for (let i = 0; i < n; i++)
          for (let j = 0; j < n; j++) want.push(j < seen[i] ? r.scores[(h * r.n + i) * r.n + j] : 0);
        assert.ok(maxDiff(m.data, want) <= 1e-5, `${what} h=${h}: max |diff| ${maxDiff(m.data, want)}`);
      }
    };
    const r0 = await infer(d, 'gqa', stepBody('sc', xs.slice(0, 3 * D), { start: true, extra: { retain: true } }));
    checkStep(r0, ref, 0, 3, 'start');
    const id = r0.json.parameters.map_id;
    await check(id, [3, 3, 3], ref, 'start');
    const r1 = await infer(d, 'gqa', stepBody('sc', xs.slice(3 * D, 4 * D), { outputs: y }));
    assert.deepEqual(r1.json.outputs.map((o) => o.name), ['y']);
    await check(id, [3, 3, 3, 4], ref, 'step 1');
    const r2 = await infer(d, 'gqa', stepBody('sc', xs.slice(4 * D, 7 * D), { outputs: y }));
    assert.equal(r2.json.parameters.map_id, id);
    await check(id, [3, 3, 3, 4, 7, 7, 7], ref, 'step 3');
    // back to 5 with another token: rows 0-4 kept on keys 0-4, row 5 new
    const xs2 = xs.slice(0, 5 * D).concat(other);
    const ref2 = await full(d, xs2);
    const r3 = await infer(d, 'gqa', stepBody('sc', other, { outputs: y, extra: { sequence_position: 5 } }));
    assert.equal(r3.status, 200, JSON.stringify(r3.json));
    await check(id, [3, 3, 3, 4, 5, 6], ref2, 'rewound');
    // a start that did not ask for scores keeps none, whatever later steps ask
    const p0 = await infer(d, 'gqa', stepBody('nosc', xs.slice(0, 2 * D), { start: true, outputs: y, extra: { retain: true } }));
    const p1 = await infer(d, 'gqa', stepBody('nosc', xs.slice(2 * D, 3 * D)));
    checkStep(p1, ref, 2, 1, 'nosc step');
    const pid = p0.json.parameters.map_id;
    assert.deepEqual((await (await fetch(`${d.url}/v2/maps/${pid}`)).json()).retained, ['attention', 'mask']);
    const no = await fetch(`${d.url}/v2/maps/${pid}/attention?what=scores`);
    assert.equal(no.status, 400);
    assert.match((await no.json()).error, /sequence_start|start/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

for (const [dtype, tol] of [['f16', 2e-3], ['bf16', 2e-2]])
  test(`--kv-dtype ${dtype}: half the bytes, within ${tol} of FP32`, async () => {
    const d = await start({ dir: gqaModels(), args: ['--kv-dtype', dtype] });
    try {
      const xs = tokens(9, 10);
      const ref = await full(d, xs);
      let t0 = 0, worst = 0;
      for (const t of [5, 1, 3]) {
        const r = await infer(d, 'gqa', stepBody('h', xs.slice(t0 * D, (t0 + t) * D), { start: t0 === 0 }));
        assert.equal(r.status, 200, JSON.stringify(r.json));
        const e = expectRows(ref, t0, t);
        for (const o of r.json.outputs) worst = Math.max(worst, maxDiff(o.data, e[o.name]));
        t0 += t;
      }
      if (process.env.SEQ_TEST_VERBOSE) console.log(`${dtype}: max |diff| ${worst}`);
      assert.ok(worst <= tol, `${dtype}: max |diff| ${worst} > ${tol}`);
      assert.ok(worst > 0, `${dtype}: bit-exact with FP32? the setting did not take`);
      // one 64-token page of 2 kv heads x (4 + 4) values at 2 bytes
      assert.equal(await metric(d, 'attnd_kv_bytes'), 2048);
    } finally { assert.equal((await d.stop()).code, 0); }
  });

test('a sequence that ends, is deleted or is started again leaves its map in the store', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(3, 61);
    const shape = async (id) => {
      const r = await fetch(`${d.url}/v2/maps/${id}`);
      return r.status === 200 ? (await r.json()).shape : r.status;
    };
    const begin = async (id) => {
      const r = await infer(d, 'gqa', stepBody(id, xs.slice(0, 2 * D), { start: true, extra: { retain: true } }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return r.json.parameters.map_id;
    };
    const ended = await begin('me');
    assert.equal((await infer(d, 'gqa', stepBody('me', xs.slice(2 * D), { end: true }))).status, 200);
    assert.deepEqual(await shape(ended), [1, H, 3, 3]);
    const deleted = await begin('md');
    assert.equal((await fetch(`${d.url}/v2/sequences/md`, { method: 'DELETE' })).status, 200);
    assert.deepEqual(await shape(deleted), [1, H, 2, 2]);
    const old = await begin('mr');
    const re = await infer(d, 'gqa', stepBody('mr', xs, { start: true }));
    assert.equal(re.status, 200);
    assert.equal(re.json.parameters.map_id, undefined, 'a restart without retain keeps no map');
    assert.deepEqual(await shape(old), [1, H, 2, 2]);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a sequence step is one item: parameters.tokens as several lists (one per batch item) is 400, as one list it labels the step\'s rows', async () => {
  // review: the lists were joined, so [["a"],["b"]] on a 2-token step
  // answered 200 and labelled its rows a, b, where README says a sequence
  // takes one list (or the lists form of it, one list) and lists that are
  // not B (1) answer 400
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(4, 11);
    const two = (n) => xs.slice(n * D, (n + 2) * D);
    const bad = await infer(d, 'gqa', stepBody('s', two(0), { start: true, extra: { retain: true, tokens: [['a'], ['b']] } }));
    assert.equal(bad.status, 400, JSON.stringify(bad.json));
    assert.equal(bad.json.error, 'parameters.tokens: 2 lists, expected 1 (a sequence step is one item)');
    const ok = await infer(d, 'gqa', stepBody('s', two(0), { start: true, extra: { retain: true, tokens: [['a', 'b']] } }));
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    const next = await infer(d, 'gqa', stepBody('s', two(2), { extra: { retain: true, tokens: [['c'], ['d']] } }));
    assert.equal(next.status, 400, JSON.stringify(next.json));
    assert.equal(next.json.error, 'parameters.tokens: 2 lists, expected 1 (a sequence step is one item)');
    const g = await fetch(`${d.url}/v2/sequences/s`);
    assert.equal((await g.json()).length, 2, 'the refused step added nothing');
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});
