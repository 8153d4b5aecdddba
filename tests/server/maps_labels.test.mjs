// maps_labels.test.mjs - parameters.tokens as one list per batch item:
// GET /v2/maps/{id} answers tokens and key_tokens as before (item 0's) and
// every item's in item_tokens and item_key_tokens; one list for every item
// answers as it did (no item_tokens). Bad shapes (a count that is not B,
// lists of mixed lengths, non-strings, labels past 64 KiB a map) are 400s
// naming the entry, and the server goes on serving.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { REFS, fp32, infer, start } from './helper.mjs';

let d;
before(async () => { d = await start(); });
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

const S0 = REFS.sdpa; // q [2, 3, 4, 7], k [2, 3, 6, 7]: B 2, T 4, S 6
const inputs = [fp32('q', S0.q_shape, S0.q), fp32('k', S0.k_shape, S0.k), fp32('v', S0.v_shape, S0.v)];
const retain = (tokens, ins = inputs) => infer(d, 'sdpa', { inputs: ins, parameters: { retain: true, tokens } });
const meta = async (id) => (await fetch(`${d.url}/v2/maps/${id}`)).json();
const words = (p, n) => Array.from({ length: n }, (_, i) => `${p}${i}`);

test('tokens as one list per batch item: item_tokens and item_key_tokens give each item\'s, tokens and key_tokens item 0\'s', async () => {
  const [B, , T] = S0.q_shape, S = S0.k_shape[2];
  assert.deepEqual([B, T, S], [2, 4, 6]);
  const lists = [0, 1].map((b) => [...words(`q${b}.`, T), ...words(`k${b}.`, S)]);
  const r = await retain(lists);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const m = await meta(r.json.parameters.map_id);
  assert.deepEqual(m.tokens, words('q0.', T));
  assert.deepEqual(m.key_tokens, words('k0.', S));
  assert.deepEqual(m.item_tokens, [words('q0.', T), words('q1.', T)]);
  assert.deepEqual(m.item_key_tokens, [words('k0.', S), words('k1.', S)]);
  // T labels a list: the keys are other rows (S != T), so theirs are empty
  const r2 = await retain([words('a', T), words('b', T)]);
  assert.equal(r2.status, 200, JSON.stringify(r2.json));
  const m2 = await meta(r2.json.parameters.map_id);
  assert.deepEqual(m2.item_tokens, [words('a', T), words('b', T)]);
  assert.deepEqual(m2.item_key_tokens, [[], []]);
  assert.deepEqual(m2.tokens, words('a', T));
  // one list for every item: as before, no item_tokens
  const r3 = await retain(lists[1]);
  assert.equal(r3.status, 200, JSON.stringify(r3.json));
  const m3 = await meta(r3.json.parameters.map_id);
  assert.deepEqual(m3.tokens, words('q1.', T));
  assert.deepEqual(m3.key_tokens, words('k1.', S));
  assert.equal(m3.item_tokens, undefined);
  assert.equal(m3.item_key_tokens, undefined);
});

test('self-attention (S = T): each item\'s list labels its keys too', async () => {
  const c = REFS.self; // tiny, [2, 5, 8]
  const r = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { retain: true, tokens: [words('x', 5), words('y', 5)] } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const m = await meta(r.json.parameters.map_id);
  assert.deepEqual(m.item_tokens, [words('x', 5), words('y', 5)]);
  assert.deepEqual(m.item_key_tokens, [words('x', 5), words('y', 5)]);
  assert.deepEqual(m.key_tokens, words('x', 5));
});

test('per-item tokens of the wrong shape are 400s naming the entry; the server goes on serving', async () => {
  const T = 4;
  for (const [tokens, msg] of [
    [[words('a', T), words('b', T), words('c', T)], 'parameters.tokens: 3 lists, expected 2 (one per batch item)'],
    [[words('a', T)], 'parameters.tokens: 1 list, expected 2 (one per batch item)'],
    [[words('a', T), words('b', 3)], 'parameters.tokens[1]: 3 labels, tokens[0] has 4 (every batch item\'s list is as long)'],
    [[words('a', 3), words('b', 3)], 'parameters.tokens[0]: 3 labels, expected 4 (one per query token) or T + S'],
    [[words('a', T), ['b0', 'b1', 2, 'b3']], 'parameters.tokens[1][2]: expected a string'],
    [[words('a', T), 'b'], 'parameters.tokens[1]: expected a list of strings, as tokens[0] is (one list per batch item)'],
    [['a', words('b', T)], 'parameters.tokens[1]: expected a string (one list for every batch item; or every entry a list, one per item)'],
    [[words('a', T), ['b0', 'b1', 'b2', 'x'.repeat(256)]], 'parameters.tokens[1][3]: longer than 255 bytes'],
  ]) {
    const r = await retain(tokens);
    assert.equal(r.status, 400, `${JSON.stringify(tokens)}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error, msg, JSON.stringify(tokens));
  }
  // past 64 KiB of labels a map, counted over every item's list: 2 x 150
  // labels of 255 bytes (76.5 KB); one list of them (38 KB) is kept
  const n = 150, rnd = (k) => Array.from({ length: k }, (_, i) => Math.sin(i));
  const big = [fp32('q', [2, 1, n, 1], rnd(2 * n)), fp32('k', [2, 1, n, 1], rnd(2 * n)), fp32('v', [2, 1, n, 1], rnd(2 * n))];
  const label = (p) => Array.from({ length: n }, (_, i) => `${p}${i}`.padEnd(255, '.'));
  const over = await retain([label('a'), label('b')], big);
  assert.equal(over.status, 400, JSON.stringify(over.json).slice(0, 300));
  assert.equal(over.json.error, 'parameters.tokens: labels exceed 65536 bytes');
  const one = await retain(label('a'), big);
  assert.equal(one.status, 200, JSON.stringify(one.json).slice(0, 300));
  // still serving: a per-item retain after the refusals
  const ok = await retain([words('a', T), words('b', T)]);
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
  assert.deepEqual((await meta(ok.json.parameters.map_id)).item_tokens[1], words('b', T));
});
