// seq_position.test.mjs - parameters.sequence_position: a step says how many
// tokens its sequence holds before it. At the length it appends; below it,
// the tokens from the position on are replaced (a step sent again after its
// answer was lost, or a new branch); past it, 409 and nothing changes. The
// reference is, as in sequences.test.mjs, one stateless causal request over
// the history the sequence has after the step.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { SLOW, fp32, infer, maxDiff, modelsDir, requestsUsed, safetensors, start } from './helper.mjs';
import { ALL, D, H, checkStep, full, gqaModels, metric, stepBody, tokens } from './seq_helper.mjs';

/** A step of rows xs at position pos (an end only when asked). */
function at(id, xs, pos, opts = {}) {
  return stepBody(id, xs, { ...opts, extra: { sequence_position: pos, ...(opts.extra || {}) } });
}

const rows = (xs, a, b) => xs.slice(a * D, b * D);

async function length(d, id) {
  const list = await (await fetch(`${d.url}/v2/sequences`)).json();
  const s = list.sequences.find((x) => x.id === id);
  return s ? s.length : null;
}

test('a step sent again at its position gives the same answer, the sequence as if sent once', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(6, 31);
    const ref5 = await full(d, rows(xs, 0, 5)), ref6 = await full(d, xs);
    checkStep(await infer(d, 'gqa', at('again', rows(xs, 0, 3), 0, { start: true })), ref5, 0, 3, 'start at 0');
    checkStep(await infer(d, 'gqa', at('again', rows(xs, 3, 4), 3)), ref5, 3, 1, 'step at 3');
    const first = await infer(d, 'gqa', at('again', rows(xs, 4, 5), 4));
    checkStep(first, ref5, 4, 1, 'step at 4');
    // its answer was lost: the client sends it again, twice, and once more
    // together with a copy still in flight (they run in arrival order)
    for (const k of [1, 2]) {
      const r = await infer(d, 'gqa', at('again', rows(xs, 4, 5), 4));
      checkStep(r, ref5, 4, 1, `sent again (${k})`);
      assert.equal(maxDiff(r.json.outputs[0].data, first.json.outputs[0].data), 0, 'the same y as the first time');
    }
    const both = await Promise.all([0, 1].map(() => infer(d, 'gqa', at('again', rows(xs, 4, 5), 4))));
    both.forEach((r, k) => checkStep(r, ref5, 4, 1, `in flight together (${k})`));
    assert.equal(await length(d, 'again'), 5);
    // the sequence goes on as if the step had been sent once
    checkStep(await infer(d, 'gqa', at('again', rows(xs, 5, 6), 5, { end: true })), ref6, 5, 1, 'next step');
    assert.equal(await metric(d, 'attnd_sequence_rewinds_total'), 4);
    assert.equal(await metric(d, 'attnd_sequence_rewound_tokens_total'), 4);
    assert.equal(await metric(d, 'attnd_kv_bytes'), 0);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a step below the length branches: the tokens from its position on are replaced', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const a = tokens(7, 32), b = tokens(3, 33), c = tokens(2, 34);
    const refA = await full(d, a);
    checkStep(await infer(d, 'gqa', stepBody('br', rows(a, 0, 4), { start: true })), refA, 0, 4, 'a 0..3');
    checkStep(await infer(d, 'gqa', stepBody('br', rows(a, 4, 7))), refA, 4, 3, 'a 4..6');
    // keep 2 tokens of a, then b: as if the history were a[0..1] b
    const refB = await full(d, [...rows(a, 0, 2), ...b]);
    checkStep(await infer(d, 'gqa', at('br', rows(b, 0, 2), 2)), refB, 2, 2, 'branch at 2');
    assert.equal(await length(d, 'br'), 4);
    // the next step may leave the position out: it appends
    checkStep(await infer(d, 'gqa', stepBody('br', rows(b, 2, 3))), refB, 4, 1, 'append after the branch');
    // position 0 without sequence_start replaces every token
    checkStep(await infer(d, 'gqa', at('br', c, 0)), await full(d, c), 0, 2, 'branch at 0');
    assert.equal(await length(d, 'br'), 2);
    // a longer step past the old end (a new page is needed: 71 tokens
    // over pages of 64)
    const long = tokens(70, 35);
    const refL = await full(d, [...c.slice(0, D), ...long]);
    checkStep(await infer(d, 'gqa', at('br', long, 1)), refL, 1, 70, 'branch at 1 past a page');
    assert.equal(await length(d, 'br'), 71);
    assert.equal(await metric(d, 'attnd_sequence_rewinds_total'), 3);
    assert.equal(await metric(d, 'attnd_sequence_rewound_tokens_total'), 5 + 5 + 1);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('sequence_position: past the end 409 and nothing changes; the rules', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(4, 36);
    const ref = await full(d, xs);
    checkStep(await infer(d, 'gqa', at('p', rows(xs, 0, 3), 0, { start: true })), ref, 0, 3, 'start');
    const past = await infer(d, 'gqa', at('p', rows(xs, 3, 4), 5));
    assert.equal(past.status, 409, JSON.stringify(past.json));
    assert.match(past.json.error, /sequence_position: 5 is past the end of sequence 'p', which holds 3 tokens/);
    assert.equal(await length(d, 'p'), 3);
    // one past the end is past it too (the first position it does not hold)
    const next = await infer(d, 'gqa', at('p', rows(xs, 3, 4), 4));
    assert.equal(next.status, 409, JSON.stringify(next.json));
    assert.match(next.json.error, /sequence_position: 4 is past the end of sequence 'p', which holds 3 tokens/);
    assert.equal(await length(d, 'p'), 3);
    checkStep(await infer(d, 'gqa', at('p', rows(xs, 3, 4), 3)), ref, 3, 1, 'after the 409s');
    assert.equal(await metric(d, 'attnd_inference_request_failure_total', 'gqa', ',reason="bad_request"'), 2);
    // a count of one reads in the singular
    assert.equal((await infer(d, 'gqa', at('one', rows(xs, 0, 1), 0, { start: true }))).status, 200);
    const one = await infer(d, 'gqa', at('one', rows(xs, 1, 2), 2));
    assert.equal(one.status, 409, JSON.stringify(one.json));
    assert.match(one.json.error, /past the end of sequence 'one', which holds 1 token; send its tokens from position 1 first/);
    // a start is the whole history: position 0 or none
    const s = await infer(d, 'gqa', at('q', rows(xs, 0, 1), 2, { start: true }));
    assert.equal(s.status, 400);
    assert.match(s.json.error, /sequence_position: 2 with sequence_start/);
    // a position needs a sequence
    const none = await infer(d, 'gqa', { inputs: [fp32('x', [1, 1, D], rows(xs, 0, 1))], parameters: { sequence_position: 0 } });
    assert.equal(none.status, 400);
    assert.match(none.json.error, /sequence_position: given without parameters.sequence_id/);
    for (const bad of [-1, '3', 1.5, 2 ** 31, true, null]) {
      const r = await infer(d, 'gqa', at('p', rows(xs, 0, 1), bad));
      assert.equal(r.status, 400, `${bad}: ${JSON.stringify(r.json)}`);
      assert.match(r.json.error, /parameters.sequence_position: expected an integer 0 \.\. 2147483647/);
    }
    // an unknown sequence is the usual 400, whatever the position
    const unk = await infer(d, 'gqa', at('nope', rows(xs, 0, 1), 0));
    assert.equal(unk.status, 400);
    assert.match(unk.json.error, /unknown sequence 'nope'/);
    assert.equal(await length(d, 'p'), 4);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('an ended sequence\'s last step sent again is 409 (it was carried out); a step after the end says it ended', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(5, 44);
    const ref = await full(d, xs);
    const one = async (id) => {
      const r = await fetch(`${d.url}/v2/sequences/${id}`);
      return { status: r.status, json: await r.json() };
    };
    checkStep(await infer(d, 'gqa', at('end', rows(xs, 0, 3), 0, { start: true })), ref, 0, 3, 'start');
    const live = await one('end');
    assert.equal(live.status, 200);
    assert.deepEqual([live.json.id, live.json.model, live.json.length], ['end', 'gqa', 3]);
    assert.ok(live.json.bytes > 0 && live.json.idle_ms >= 0, JSON.stringify(live.json));
    checkStep(await infer(d, 'gqa', at('end', rows(xs, 3, 4), 3, { end: true })), ref, 3, 1, 'the last step');
    assert.equal(await length(d, 'end'), null, 'ended: not listed');
    const ended = await one('end');
    assert.equal(ended.status, 404);
    assert.match(ended.json.error, /^sequence 'end' ended \d+\.\d s ago at 4 tokens: a step with sequence_end was answered$/);
    const never = await one('never');
    assert.equal(never.status, 404);
    assert.match(never.json.error, /^unknown sequence 'never' \(never started, ended/);
    const again = await infer(d, 'gqa', at('end', rows(xs, 3, 4), 3, { end: true }));
    assert.equal(again.status, 409, JSON.stringify(again.json));
    assert.match(again.json.error, /^parameters.sequence_position: sequence 'end' ended \d+\.\d s ago at 4 tokens: a step with sequence_end was answered; position 3 was in it \(its steps were carried out\), and an ended sequence takes no step/);
    const after = await infer(d, 'gqa', at('end', rows(xs, 4, 5), 4));
    assert.equal(after.status, 400);
    assert.match(after.json.error, /unknown sequence 'end' \(ended \d+\.\d s ago at 4 tokens: a step with sequence_end was answered\); send sequence_start: true/);
    // deleted: a step is told so
    checkStep(await infer(d, 'gqa', at('del', rows(xs, 0, 2), 0, { start: true })), ref, 0, 2, 'start del');
    assert.equal((await fetch(`${d.url}/v2/sequences/del`, { method: 'DELETE' })).status, 200);
    const gone = await infer(d, 'gqa', at('del', rows(xs, 2, 3), 2));
    assert.equal(gone.status, 400);
    assert.match(gone.json.error, /unknown sequence 'del' \(dropped \d+\.\d s ago at 2 tokens: deleted\)/);
    // a restart begins it again
    checkStep(await infer(d, 'gqa', at('end', rows(xs, 0, 4), 0, { start: true })), ref, 0, 4, 'restart');
    checkStep(await infer(d, 'gqa', at('end', rows(xs, 4, 5), 4)), ref, 4, 1, 'after the restart');
    assert.equal((await one('end')).json.length, 5);
    assert.equal(await metric(d, 'attnd_kv_bytes') > 0, true);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a step below the length that fails leaves the sequence as it was', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(6, 37);
    const ref = await full(d, xs);
    checkStep(await infer(d, 'gqa', stepBody('f', rows(xs, 0, 5), { start: true })), ref, 0, 5, 'start');
    // finite inputs whose projections overflow float32: the pass writes
    // keys and values of infinities over rows 2..4 before the step is
    // refused; they must be put back
    const huge = new Array(3 * D).fill(3e38);
    const r = await infer(d, 'gqa', at('f', huge, 2));
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(r.json.error, /overflow float32/);
    assert.equal(await length(d, 'f'), 5);
    checkStep(await infer(d, 'gqa', at('f', rows(xs, 5, 6), 5)), ref, 5, 1, 'after the failed rewind');
    assert.equal(await metric(d, 'attnd_sequence_rewinds_total'), 0);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('--kv-dtype f16: a key FP16 rounds to infinity is refused naming FP16, not float32', async () => {
  const d = await start({ dir: gqaModels(), args: ['--kv-dtype', 'f16'] });
  try {
    // keys and values of ~1e6: far inside float32 (the same rows as one
    // stateless request answer 200), past FP16's largest, 65504: the step
    // once answered "the inputs overflow float32", which they do not
    const big = tokens(2, 41).map((v) => v * 1e6);
    assert.equal((await infer(d, 'gqa', { inputs: [fp32('x', [1, 2, D], big)] })).status, 200);
    assert.equal((await infer(d, 'gqa', stepBody('h', tokens(1, 42), { start: true }))).status, 200);
    const r = await infer(d, 'gqa', stepBody('h', big));
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(r.json.error, /^inputs: a projection, score or output of sequence 0 is not finite: a key or value of 65520 or more, which FP16 rounds to infinity \(its largest is 65504; the K\/V cache is FP16: --kv-dtype f16\)/);
    assert.equal(await length(d, 'h'), 1);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('--kv-dtype bf16: a value of 3.3962e38 or more is refused naming BF16, not float32', async () => {
  // one head of one dim: the value is x itself, every score 0
  const dir = modelsDir();
  mkdirSync(join(dir, 'one'));
  const one = (w) => [[1, 1], [w]];
  writeFileSync(join(dir, 'one', 'model.safetensors'), safetensors({
    W_q: one(0), W_k: one(0), W_v: one(1), W_o: one(1),
  }));
  writeFileSync(join(dir, 'one', 'config.json'), JSON.stringify({ n_heads: 1, causal: true }));
  const d = await start({ dir, args: ['--kv-dtype', 'bf16'] });
  try {
    // 3.4e38 is inside float32 (the same rows as one stateless request
    // answer 200) but BF16 rounds it to infinity: the step once answered
    // "the inputs overflow float32", which they do not
    const st = await infer(d, 'one', { inputs: [fp32('x', [1, 2, 1], [1, 3.4e38])] });
    assert.equal(st.status, 200, JSON.stringify(st.json));
    const step = (xs, start) => ({
      inputs: [fp32('x', [1, xs.length, 1], xs)],
      parameters: { sequence_id: 'b', sequence_start: start, sequence_end: false },
    });
    assert.equal((await infer(d, 'one', step([1], true))).status, 200);
    const r = await infer(d, 'one', step([3.4e38], false));
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(r.json.error, /^inputs: a projection, score or output of sequence 0 is not finite: a key or value of 3\.3962e38 or more, which BF16 rounds to infinity \(its largest is 3\.3895e38; the K\/V cache is BF16: --kv-dtype bf16\)/);
    assert.equal(await length(d, 'b'), 1);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('retain: a branch rewinds the map; a failed one leaves it as it was', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const a = tokens(6, 38), b = tokens(2, 39);
    const refA = await full(d, a);
    const s0 = await infer(d, 'gqa', stepBody('rm', rows(a, 0, 4), { start: true, extra: { retain: true } }));
    checkStep(s0, refA, 0, 4, 'start');
    const id = s0.json.parameters.map_id;
    checkStep(await infer(d, 'gqa', stepBody('rm', rows(a, 4, 6))), refA, 4, 2, 'a 4..5');
    const refB = await full(d, [...rows(a, 0, 3), ...b]);
    const br = await infer(d, 'gqa', at('rm', b, 3));
    checkStep(br, refB, 3, 2, 'branch at 3');
    assert.equal(br.json.parameters.map_id, id);
    for (const h of [0, H - 1]) {
      const m = await (await fetch(`${d.url}/v2/maps/${id}/attention?h=${h}`)).json();
      assert.deepEqual(m.shape, [5, 5]);
      const want = [];
      for (let i = 0; i < 5; i++)
        for (let j = 0; j < 5; j++) want.push(j <= i ? refB.attention[(h * 5 + i) * 5 + j] : 0);
      assert.ok(maxDiff(m.data, want) <= 1e-5, `map head ${h} after the branch`);
    }
    // a branch that fails before its answer is made (a non-finite
    // output) never grew the map: map and sequence stay as they were
    const bad = await infer(d, 'gqa', at('rm', new Array(D).fill(3e38), 1));
    assert.equal(bad.status, 400);
    const list = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.deepEqual(list.sequences.map((s) => [s.id, s.length, s.map_id]), [['rm', 5, id]]);
    const refC = await full(d, [...rows(a, 0, 3), ...b, ...rows(a, 5, 6)]);
    const next = await infer(d, 'gqa', stepBody('rm', rows(a, 5, 6), { outputs: ALL }));
    checkStep(next, refC, 5, 1, 'after the failed branch');
    assert.equal(next.json.parameters.map_id, id);
    const m = await (await fetch(`${d.url}/v2/maps/${id}/attention?h=2`)).json();
    assert.deepEqual(m.shape, [6, 6]);
    const want = [];
    for (let i = 0; i < 6; i++)
      for (let j = 0; j < 6; j++) want.push(j <= i ? refC.attention[(2 * 6 + i) * 6 + j] : 0);
    assert.ok(maxDiff(m.data, want) <= 1e-5, 'map after the failed branch and a step');
    // non-causal steps' rows weigh every key of their step: rewound into
    // such a step, the kept rows' weights on the replaced keys read 0
    const nc = await infer(d, 'gqa', stepBody('nc', rows(a, 0, 3), { start: true, extra: { retain: true, causal: false } }));
    assert.equal(nc.status, 200, JSON.stringify(nc.json));
    const ncId = nc.json.parameters.map_id;
    const before = await (await fetch(`${d.url}/v2/maps/${ncId}/attention?h=0`)).json();
    assert.ok(before.data[1 * 3 + 2] > 0, 'row 1 weighs key 2 (non-causal)');
    const nb = await infer(d, 'gqa', at('nc', rows(b, 0, 1), 2, { extra: { causal: false } }));
    assert.equal(nb.status, 200, JSON.stringify(nb.json));
    const after = await (await fetch(`${d.url}/v2/maps/${ncId}/attention?h=0`)).json();
    assert.deepEqual(after.shape, [3, 3]);
    assert.equal(after.data[1 * 3 + 2], 0, 'row 1 no longer weighs the replaced key 2');
    assert.equal(after.data[0 * 3 + 1], before.data[0 * 3 + 1], 'the kept rows keep their other weights');
    // causal is each step's own (README "Sequences"): the start's
    // causal: false does not carry; a step of 2 without it takes gqa's
    // default (causal), its first row weighs not the second's key
    const c2 = await infer(d, 'gqa', at('nc', rows(tokens(2, 42), 0, 2), 3, { outputs: [{ name: 'attention' }] }));
    assert.equal(c2.status, 200, JSON.stringify(c2.json));
    assert.deepEqual(c2.json.outputs[0].shape, [1, H, 2, 5]);
    assert.equal(c2.json.outputs[0].data.flat(Infinity)[4], 0, 'a step without causal: the default, causal');
    const n2 = await infer(d, 'gqa', at('nc', rows(tokens(2, 43), 0, 2), 3, { outputs: [{ name: 'attention' }], extra: { causal: false } }));
    assert.ok(n2.json.outputs[0].data.flat(Infinity)[4] > 0, 'a step with causal: false');
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('follow: wait=N&version=V wakes at a branch that keeps the rows; wait=N alone waits it out', async () => {
  const d = await start({ dir: gqaModels(), args: ['--maps-wait-ms', String(8000 * SLOW)] });
  try {
    const a = tokens(4, 40), b = tokens(1, 41);
    const s0 = await infer(d, 'gqa', stepBody('fw', rows(a, 0, 3), { start: true, extra: { retain: true } }));
    const id = s0.json.parameters.map_id;
    const meta = async () => (await fetch(`${d.url}/v2/maps/${id}`)).json();
    assert.equal((await meta()).version, 0);
    assert.equal((await infer(d, 'gqa', stepBody('fw', rows(a, 3, 4)))).status, 200);
    const m1 = await meta();
    assert.deepEqual([m1.shape, m1.version], [[1, H, 4, 4], 1]);
    const t0 = Date.now();
    const waiting = (q) => fetch(`${d.url}/v2/maps/${id}?${q}`).then(async (r) => ({ status: r.status, ms: Date.now() - t0, json: await r.json() }));
    const withV = waiting(`wait=4&version=1&timeout_ms=${8000 * SLOW}`);
    const without = waiting('wait=4&timeout_ms=1500');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await infer(d, 'gqa', at('fw', b, 3))).status, 200); // still 4 rows
    const w = await withV, wo = await without;
    assert.equal(w.status, 200);
    assert.deepEqual([w.json.shape, w.json.version], [[1, H, 4, 4], 2]);
    assert.ok(w.ms < 7000 * SLOW, `with version= answered ${w.ms} ms in, at the branch, not its timeout`);
    assert.ok(wo.ms >= 1400, `without version= it waited out its timeout (${wo.ms} ms)`);
    // a version already different answers at once; a bad one is named
    const now = await waiting('wait=4&version=1');
    assert.equal(now.json.version, 2);
    const bad = await fetch(`${d.url}/v2/maps/${id}?wait=4&version=x`);
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).error, /^version:/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('the rows a step replaces count against request-memory (413); a step\'s outputs against memory-budget (503)', async () => {
  // gqa keeps 64 bytes of K/V per token (f32), as many as its x and y
  // rows each: a 100-token step holds 12.8 KB with y, 6.4 KB more with
  // the rows it replaces. With request-memory 16000 it appends, and
  // replaces nothing.
  const lim = ['--request-memory', '16000', '--max-json-body', '1000000'];
  let d = await start({ dir: gqaModels(), args: lim });
  try {
    const xs = tokens(200, 42), y = [{ name: 'y' }];
    assert.equal((await infer(d, 'gqa', at('rm', rows(xs, 0, 100), 0, { start: true, outputs: y }))).status, 200);
    const r = await infer(d, 'gqa', at('rm', rows(xs, 100, 200), 0, { outputs: y }));
    assert.equal(r.status, 413, JSON.stringify(r.json));
    assert.match(r.json.error, /sequence_position: this step replaces tokens whose 6400 bytes of K\/V are kept until it is answered, more than request-memory \(16000\)/);
    assert.equal(await length(d, 'rm'), 100);
    assert.equal((await infer(d, 'gqa', at('rm', rows(xs, 100, 200), 100, { outputs: y }))).status, 200);
    assert.equal(await length(d, 'rm'), 200);
  } finally { assert.equal((await d.stop()).code, 0); }
  // a step's outputs are allocated when its turn comes (their size needs
  // the sequence's length): then they count against memory-budget, beside
  // a body another client holds (2.5 MB reserved from its Content-Length).
  // 100 tokens' attention and scores over 700 keys are 2.24 MB.
  const budget = ['--memory-budget', '4000000', '--request-memory', '3000000', '--max-body', '3000000', '--max-json-body', '3000000'];
  d = await start({ dir: gqaModels(), args: budget });
  const used = async () => requestsUsed(await (await fetch(`${d.url}/metrics`)).text()); // (connections' own aside)
  const held = connect(d.port, '127.0.0.1');
  try {
    const xs = tokens(700, 43), pick = [{ name: 'attention' }, { name: 'scores' }];
    assert.equal((await infer(d, 'gqa', at('mb', rows(xs, 0, 600), 0, { start: true, outputs: [{ name: 'y' }] }))).status, 200);
    held.write('POST /v2/models/gqa/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2500000\r\n\r\n{');
    // (100 x 20 ms times SLOW: a bound for a hang, not a speed)
    for (let i = 0; i < 100 * SLOW && await used() < 2500000; i++) await new Promise((res) => setTimeout(res, 20));
    assert.equal(await used(), 2500001, 'the held body\'s reservation');
    for (const [pos, what] of [[600, 'appending'], [550, 'replacing']]) {
      const r = await infer(d, 'gqa', at('mb', rows(xs, pos, pos + 100), pos, { outputs: pick }));
      assert.equal(r.status, 503, `${what}: ${r.json.error || 'answered'}`);
      assert.equal(r.headers.get('retry-after'), '1');
      assert.match(r.json.error, /memory for decoded requests and unsent answers \(4000000 bytes, memory-budget\) is in use and cannot take this step's \d+/);
      assert.equal(await length(d, 'mb'), 600, `${what}: the sequence is as it was`);
    }
    // what a refused step took is given back; with the body gone, it fits
    assert.equal(await used(), 2500001);
    held.destroy();
    for (let i = 0; i < 100 * SLOW && await used() > 0; i++) await new Promise((res) => setTimeout(res, 20));
    const ok = await infer(d, 'gqa', at('mb', rows(xs, 600, 700), 600, { outputs: pick }));
    assert.equal(ok.status, 200, ok.json.error);
    assert.deepEqual(ok.json.outputs.map((o) => o.shape), [[1, H, 100, 700], [1, H, 100, 700]]);
    assert.equal(ok.json.parameters.sequence_length, 700);
    await new Promise((res) => setTimeout(res, 50));
    assert.equal(await used(), 0, 'all given back');
  } finally { held.destroy(); assert.equal((await d.stop()).code, 0); }
});

test('steps waiting for their turn count their decoded request and outputs in memory-budget, not their bodies', async () => {
  // the first step waits 2 s for company (batch-delay-us; the same under
  // a sanitizer, where four such waits would pass the deadline); the others
  // are decoded and wait behind it. Each body writes a zero as "0" (2
  // bytes a float with its comma); decoded, x and y are 4 bytes a float each.
  const d = await start({ dir: gqaModels(), args: ['--batch-delay-us', '2000000', '--deadline-ms', '120000'] });
  const used = async () => requestsUsed(await (await fetch(`${d.url}/metrics`)).text()); // (connections' own aside)
  try {
    const y = [{ name: 'y' }], T = 2000;
    assert.equal((await infer(d, 'gqa', stepBody('w', new Array(D).fill(0), { start: true, outputs: y }))).status, 200);
    const bodies = [0, 1, 2, 3].map(() => JSON.stringify(stepBody('w', new Array(T * D).fill(0), { outputs: y })));
    const sent = bodies.map((b) => infer(d, 'gqa', b));
    const bodyBytes = bodies.reduce((n, b) => n + b.length, 0), held = 4 * 2 * T * D * 4;
    let u = 0;
    for (let k = 0; k < 60 && u < held; k++) {
      await new Promise((res) => setTimeout(res, 25));
      u = await used();
    }
    assert.ok(u >= held, `memory-budget holds ${u} bytes for 4 steps whose x and y are ${held} (their bodies ${bodyBytes})`);
    const answers = await Promise.all(sent);
    answers.forEach((r) => assert.equal(r.status, 200, r.json.error));
    assert.deepEqual(answers.map((r) => r.json.parameters.sequence_length).sort((a, b) => a - b), [2001, 4001, 6001, 8001]);
    await new Promise((res) => setTimeout(res, 50));
    assert.equal(await used(), 0, 'all given back');
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a step\'s answer says its sequence\'s K/V bytes once it is in (sequence_bytes): appended, past a page, rewound, as GET /v2/sequences/{id}', async () => {
  // (no answer said them: a client read GET /v2/sequences/{id} after
  // every step, as the web page's panel did)
  const d = await start({ dir: gqaModels() });
  try {
    const per = (await (await fetch(`${d.url}/v2/models/gqa`)).json()).parameters.kv_bytes_per_token;
    const pages = (n) => Math.ceil(n / 64) * 64 * per; // README: pages of 64 tokens
    const xs = tokens(70, 23), y = [{ name: 'y' }];
    const steps = [[0, 3, { start: true }], [3, 64], [67, 3], [10, 1], [11, 2, { end: true }]];
    for (const [pos, n, opts = {}] of steps) {
      const r = await infer(d, 'gqa', at('b', rows(xs, pos, pos + n), pos, { ...opts, outputs: y }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json.parameters.sequence_length, pos + n);
      assert.equal(r.json.parameters.sequence_bytes, pages(pos + n), `at ${pos} + ${n}`);
      const g = await fetch(`${d.url}/v2/sequences/b`);
      if (opts.end) { assert.equal(g.status, 404); continue; }
      assert.equal((await g.json()).bytes, pages(pos + n), `GET after ${pos} + ${n}`);
    }
  } finally { assert.equal((await d.stop()).code, 0); }
});
