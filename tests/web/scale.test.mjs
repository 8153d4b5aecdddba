// scale.test.mjs - a model whose config.json sets its own `scale` (not
// 1/√d_k): the readout's scaled score and q·k and the step view's columns
// follow the scale the server used (GET /v2/models/{m}'s parameters.scale,
// a retained map's metadata), so the softmax of the scaled scores shown is
// the weights the server returned. On a page that divided by √d_k itself
// every number below was another.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage } from './harness.mjs';

// toy_scaled: the harness's toy (W = I, 2 heads of d_k 8: head 0 sees
// columns 0..7 of x) with scale 0.25, where 1/√8 is 0.3536.
const SCALE = 0.25, DK = 8, T = 4;
const X = Array.from({ length: T }, (_, i) => Array.from({ length: 16 }, (_, d) => ((i * 5 + d * 3) % 7 - 3) / 2));
const TOKENS = ['a', 'b', 'c', 'd'];
const dot = (i, j) => { let s = 0; for (let d = 0; d < DK; d++) s += X[i][d] * X[j][d]; return s; };

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; }, [], { toys: { toy_scaled: { scale: SCALE } } });

async function readout(page, i, j) {
  const c = await page.evaluate(([a, b]) => window.attnd.cellCenter(a, b), [i, j]);
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForFunction(([a, b]) => document.querySelector('#readout [data-field=query]')?.textContent.includes(`#${a}`) &&
    document.querySelector('#readout [data-field=key]')?.textContent.includes(`#${b}`), [i, j]);
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#readout dd')].map((d) => [d.dataset.field, d.textContent])));
}

// checkPage: head 0, query row 1 (picked in the link): the readout of
// (1, j) and the step view's row, against x's dot products times the
// scale and against the server's weights (window.attnd.run.attention).
async function checkPage(page) {
  const run = await page.evaluate(() => ({ scale: window.attnd.run.scale, att: Array.from(window.attnd.run.attention) }));
  assert.equal(run.scale, SCALE, 'the run carries the model\'s scale');
  for (let j = 0; j < T; j++) {
    const r = await readout(page, 1, j);
    const want = dot(1, j) * SCALE;
    assert.ok(Math.abs(Number(r['scaled-score']) - want) < 1e-5, `(1, ${j}) scaled score ${r['scaled-score']}, want ${want}`);
    const qk = r['q-k'].match(/^(\S+)\s+\((.*)\)$/);
    assert.ok(qk, r['q-k']);
    assert.ok(Math.abs(Number(qk[1]) - dot(1, j)) < 1e-4, `(1, ${j}) q·k ${qk[1]}, want ${dot(1, j)}`);
    assert.equal(qk[2], '× scale = 0.2500');
  }
  const steps = await page.textContent('#steps');
  assert.match(steps, /scores are q·k × scale = 0\.2500/);
  assert.doesNotMatch(steps, /√d_k =/);
  const head = await page.$$eval('#steps table thead th', (ths) => ths.map((th) => th.textContent));
  assert.deepEqual(head.slice(0, 5), ['key', 'q·k', '× scale', 'exp(s − max)', 'weight']);
  const rows = await page.$$eval('#steps table tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => Number(td.textContent))));
  assert.equal(rows.length, T);
  const shown = rows.map((r) => r[1]);
  const mx = Math.max(...shown), ex = shown.map((s) => Math.exp(s - mx)), sum = ex.reduce((a, b) => a + b);
  for (let j = 0; j < T; j++) {
    assert.ok(Math.abs(rows[j][0] - dot(1, j)) < 1e-4, `step q·k of key ${j}: ${rows[j][0]}, want ${dot(1, j)}`);
    assert.ok(Math.abs(rows[j][1] - dot(1, j) * SCALE) < 1e-4, `step scaled score of key ${j}: ${rows[j][1]}`);
    const server = run.att[(0 * T + 1) * T + j]; // head 0, row 1, key j
    assert.ok(Math.abs(rows[j][3] - server) < 1e-6, `shown weight of key ${j}: ${rows[j][3]}, server's ${server}`);
    assert.ok(Math.abs(ex[j] / sum - server) < 2e-4, `softmax of the shown scores, key ${j}: ${ex[j] / sum}, server's ${server}`);
  }
}

const link = (extra = '') => `${daemon.url}/#model=toy_scaled&causal=0&h=0&q=1${extra}` +
  `&json=${encodeURIComponent(JSON.stringify({ x: X, tokens: TOKENS }))}`;

test('a run on a model with its own scale: scores worked out from q and k times that scale', async () => {
  const meta = await (await fetch(`${daemon.url}/v2/models/toy_scaled`)).json();
  assert.equal(meta.parameters.scale, SCALE);
  const { page, errors } = await openPage(browser, link());
  assert.equal(await page.evaluate(() => window.attnd.run.scores), undefined, 'no server scores: the page works them out');
  await checkPage(page);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a retained run on it: the server\'s scores, q·k worked back by the model\'s scale', async () => {
  const { page, errors } = await openPage(browser, link());
  await page.check('#retain');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run?.mapId && window.attnd.run.scores && document.body.dataset.state === 'ready');
  await checkPage(page);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a retained map of it: its metadata\'s scale turns the kept scores back into q·k', async () => {
  const body = {
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, 16], data: X.flat() }],
    outputs: ['attention', 'scores', 'v', 'y'].map((name) => ({ name })),
    parameters: { retain: true, tokens: TOKENS },
  };
  const res = await fetch(`${daemon.url}/v2/models/toy_scaled/infer`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  const id = (await res.json()).parameters.map_id;
  assert.equal((await (await fetch(`${daemon.url}/v2/maps/${id}`)).json()).scale, SCALE);
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0&q=1`);
  assert.equal(await page.evaluate(() => window.attnd.run.source), 'map');
  await checkPage(page);
  assert.deepEqual(errors, []);
  await page.close();
});
