// embed.test.mjs - the page's sample-embedding generator against vectors
// an independent Python implementation wrote (gen_embed_vectors.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { embed, fnv1a32, tokenize } from '../../server/web/embed.js';

const ref = JSON.parse(fs.readFileSync(new URL('./embed_vectors.json', import.meta.url)));

test('FNV-1a 32 of the lower-cased UTF-8 bytes', () => {
  // The published FNV-1a 32 offset basis is the hash of "".
  assert.equal(fnv1a32(''), 2166136261);
  for (const [w, h] of Object.entries(ref.fnv1a32)) assert.equal(fnv1a32(w), h, w);
});

test('embeddings agree with the Python reference to float32', () => {
  for (const c of ref.cases) {
    const x = embed(c.words, c.d);
    assert.equal(x.length, c.words.length * c.d);
    c.x.forEach((row, i) => row.forEach((v, k) => {
      assert.equal(x[i * c.d + k], v, `${c.words[i]} d=${c.d} [${i}][${k}]`);
    }));
  }
});

test('halves have unit length and repeated words share content', () => {
  const d = 64, words = tokenize('the cat sat on the mat');
  const x = embed(words, d);
  for (let i = 0; i < words.length; i++) {
    let c = 0, p = 0;
    for (let k = 0; k < d / 2; k++) { c += x[i * d + k] ** 2; p += x[i * d + d / 2 + k] ** 2; }
    assert.ok(Math.abs(c - 1) < 1e-5 && Math.abs(p - 1) < 1e-5);
  }
  for (let k = 0; k < d / 2; k++) assert.equal(x[k], x[4 * d + k]); // "the" twice
  assert.notEqual(x[d / 2 + 1], x[4 * d + d / 2 + 1]); // other positions
});

test('widths that are not multiples of 4 are refused', () => {
  assert.throws(() => embed(['a'], 6), /multiple of 4/);
});

test('the page agrees with tools/embed.py, the demo model\'s generator', async () => {
  const { spawnSync } = await import('node:child_process');
  const words = ['the', 'cat', 'sat', 'on', 'the', 'mat', 'Naïve'];
  for (const d of [8, 64]) {
    const r = spawnSync('python3', [new URL('../../tools/embed.py', import.meta.url).pathname, String(d), ...words], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const rows = r.stdout.trim().split('\n').map((l) => l.split(' ').slice(1).map(Number));
    const x = embed(words, d);
    rows.forEach((row, i) => row.forEach((v, k) => assert.equal(x[i * d + k], Math.fround(v), `${words[i]} d=${d} [${k}]`)));
  }
});

test('a sequence step embeds its words at their true positions (pos0 onwards)', () => {
  // Stepping "sat on" after "the cat" gives the rows the whole sentence has.
  const d = 16, all = embed(['the', 'cat', 'sat', 'on'], d), step = embed(['sat', 'on'], d, 2);
  assert.deepEqual(Array.from(step), Array.from(all.subarray(2 * d)));
  assert.notDeepEqual(Array.from(embed(['sat', 'on'], d)), Array.from(step));
});
