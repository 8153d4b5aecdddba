// pooled_labels.test.mjs - what a retained map says of its keys and heads
// in Debian's chromium against a real attnd this file starts: the keys'
// own labels when they are as many as the queries, and the mean over the
// heads of a max-pooled map (page.test.mjs is near its file timeout).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { browserSuite, openPage, sdpaHash } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

// The seeds' first worked example (T=2, d_k=4, d_v=2).
const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]], tokens: ['t0', 't1'] };

test('retained with as many keys as queries, a map keeps the keys\' own labels', async () => {
  // sdpa with key_tokens, and a context of T tokens: the page sent the
  // queries' labels alone when S = T, so the store named the keys after
  // the queries, and the map reopened from it did too.
  const row = (i) => Array.from({ length: 16 }, (_, d) => Math.sin(i * 3 + d));
  const cases = [
    [sdpaHash({ ...SEED, key_tokens: ['k0', 'k1'] }, '&retain=1'), ['t0', 't1'], ['k0', 'k1']],
    [`#model=toy&retain=1&json=${encodeURIComponent(JSON.stringify({ x: [0, 1, 2].map(row), context: [5, 6, 7].map(row), tokens: ['a', 'b', 'c'] }))}`,
      ['a', 'b', 'c'], ['c0', 'c1', 'c2']],
  ];
  for (const [hash, tokens, keys] of cases) {
    const { page, errors } = await openPage(browser, daemon.url + hash);
    const run = await page.evaluate(() => ({ id: window.attnd.run.mapId, keys: window.attnd.run.keyTokens }));
    assert.deepEqual(run.keys, keys);
    const meta = await (await fetch(`${daemon.url}/v2/maps/${run.id}`)).json();
    assert.deepEqual([meta.tokens, meta.key_tokens], [tokens, keys]);
    assert.deepEqual(errors, []);
    await page.close();
  }
});

test('the mean over heads of a max-pooled map is the largest of each block of the mean', async () => {
  // sdpa [1, 2, 1100, 1]: every query of head 0 attends key 0 alone, of
  // head 1 key 1 alone (scores 1e4 against 0), so the mean over heads is
  // 0.5 on keys 0 and 1. Pooled in 3 x 3 blocks, the mean's block (0, 0)
  // holds at most 0.5; averaging the heads' pooled planes (each 1 there)
  // gave 1, a weight no query has.
  const T = 1100, col = (f) => Array.from({ length: 2 * T }, (_, x) => f(Math.floor(x / T), x % T));
  const body = {
    inputs: [
      { name: 'q', datatype: 'FP32', shape: [1, 2, T, 1], data: col(() => 100) },
      { name: 'k', datatype: 'FP32', shape: [1, 2, T, 1], data: col((h, j) => (j === h ? 100 : 0)) },
      { name: 'v', datatype: 'FP32', shape: [1, 2, T, 1], data: col(() => 0) },
    ],
    parameters: { retain: true },
  };
  const id = (await (await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) })).json()).parameters.map_id;
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=mean`);
  const [js] = await Promise.all([page.waitForEvent('download'), page.click('#export-json')]);
  const j = JSON.parse(fs.readFileSync(await js.path(), 'utf8'));
  assert.deepEqual([j.h, j.shape, j.max_pooled_block], ['mean', [367, 367], [3, 3]]);
  assert.deepEqual(j.data.slice(0, 2).map((x) => x.toFixed(6)), ['0.500000', '0.000000']);
  assert.equal(j.data[367].toFixed(6), '0.500000'); // rows 3..5, keys 0..2
  assert.deepEqual(errors, []);
  await page.close();
});

test('labels sent one list per batch item: the page shows item b\'s when it shows item b', async () => {
  // sdpa [2, 1, 2, 2]: each item's query and key labels its own
  const data = [1, 0, 0, 1, 1, 0, 0, 1];
  const body = {
    inputs: ['q', 'k', 'v'].map((name) => ({ name, datatype: 'FP32', shape: [2, 1, 2, 2], data })),
    parameters: { retain: true, tokens: [['the', 'cat', 'k.the', 'k.cat'], ['a', 'dog', 'k.a', 'k.dog']] },
  };
  const r = await (await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) })).json();
  const id = r.parameters.map_id;
  assert.ok(id, JSON.stringify(r));
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}`);
  const labels = () => page.evaluate(() => [window.attnd.run.tokens, window.attnd.run.keyTokens]);
  const head = () => page.$$eval('#table-view tbody th', (ths) => ths.map((th) => th.textContent));
  assert.deepEqual(await labels(), [['the', 'cat'], ['k.the', 'k.cat']]);
  await page.check('#table-toggle');
  assert.deepEqual(await head(), ['the', 'cat']);
  await page.selectOption('#batch', '1');
  await page.waitForFunction(() => window.attnd.run.tokens[0] === 'a');
  assert.deepEqual(await labels(), [['a', 'dog'], ['k.a', 'k.dog']]);
  assert.deepEqual(await head(), ['a', 'dog']);
  await page.selectOption('#batch', '0');
  await page.waitForFunction(() => window.attnd.run.tokens[0] === 'the');
  assert.deepEqual(await head(), ['the', 'cat']);
  assert.deepEqual(errors, []);
  await page.close();
});
