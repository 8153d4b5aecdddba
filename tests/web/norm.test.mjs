// norm.test.mjs - the "norm-weighted" box (README "The visualiser"): the
// focused map drawn as Kobayashi et al. 2020's alpha_ij * |v_j W_O| (the
// server's what=norm of the retained map) in place of the weights, on a
// colour scale from 0 to the map's largest cell, for the head shown and
// the mean over heads; norm=1 in the link; a sequence's map, which keeps
// no norms, says the server's reason. The expected cells are the
// server's weights (what=attention) times norms worked out here from
// the inputs and the model's known weights (sdpa: |v_j|; the toy model:
// W_v = W_o = identity, so |v_j^h W_O^h| = |x_j's columns 8h..8h+7|),
// never what=norm's own answer. On main (3448ad0) the page had no such
// box: every test fails waiting for it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage, pixel, near, sdpaHash, viridis, WAIT } from './harness.mjs';
import { runSequence } from './seqpage.mjs';

let daemon, browser;
browserSuite(async (d, b) => { daemon = d; browser = b; });

// weights: the server's what=attention plane of map id, item 0, head h
async function weights(id, h) {
  const r = await fetch(`${daemon.url}/v2/maps/${id}/attention?b=0&h=${h}&what=attention&format=f32`);
  assert.equal(r.status, 200);
  return Array.from(new Float32Array(await r.arrayBuffer()));
}
const len = (a) => Math.sqrt(a.reduce((s, x) => s + x * x, 0));
const normAsks = (asked) => asked.filter((u) => /what=norm/.test(u));
const drawn = (page, what) => page.waitForFunction((w) => document.getElementById('heatmap').dataset.drawn === w, what, { timeout: WAIT });

// sdpa, causal: row 0 sees key 0 alone; v's rows have lengths √5, 3, 1
const SPEC = {
  q: [[2, 0, 2, 0], [0, 4, 0, 2], [0, 0, 0, 0]],
  k: [[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
  v: [[1, 2], [3, 0], [0, 1]],
  tokens: ['t0', 't1', 't2'],
};

test('sdpa: the box draws alpha * |v_j| on a scale to the map\'s largest cell, the legend and readout say so, norm=1 round-trips in the link', async () => {
  const asked = [];
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  page.on('request', (r) => asked.push(r.url()));
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${daemon.url}/${sdpaHash(SPEC, '&causal=1&retain=1&norm=1')}`);
  await drawn(page, 'norm');
  assert.equal(await page.isChecked('#norm-toggle'), true, 'the link ticked the box');
  const id = await page.evaluate(() => window.attnd.run.mapId);
  const a = await weights(id, 0), n = SPEC.v.map(len), S = 3;
  const want = a.map((w, k) => w * n[k % S]);
  const max = Math.max(...want);
  // by hand: row 1's scores over keys 0, 1 are 0 and 4/√4 = 2, its key 1
  // (|v_1| = 3) weighs e²/(e² + 1): 3 · 0.8808 = 2.642, the largest (past 1)
  assert.ok(Math.abs(max - 3 * Math.exp(2) / (Math.exp(2) + 1)) < 1e-6, `max ${max}`);
  assert.ok(Math.abs(Number(await page.getAttribute('#norm-key', 'data-max')) - max) < 1e-6);
  const key = await page.textContent('#norm-key');
  assert.match(key, /head 0's α · ‖v‖/);
  assert.match(key, new RegExp(`0 to the map's largest, ${max.toFixed(4)}, not 1`));
  // the legend's top tick is the map's largest, not 1
  const ticks = await page.$$eval('#legend-ticks span', (s) => s.map((e) => e.textContent));
  assert.equal(ticks.at(-1), max.toFixed(2));
  // every attended cell's colour: its value over the largest
  for (let i = 0; i < 3; i++)
    for (let j = 0; j <= i; j++) {
      const got = await pixel(page, i, j), exp = viridis(want[i * S + j] / max);
      assert.ok(near(got, exp), `cell (${i}, ${j}): ${got}, want ${exp.map(Math.round)} (${want[i * S + j]} of ${max})`);
    }
  // the readout: the cell's norm-weighted value beside its weight
  const c = await page.evaluate(() => window.attnd.cellCenter(1, 0));
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForSelector('#readout dd[data-field=norm]');
  assert.equal(await page.textContent('#readout dd[data-field=norm]'), want[3].toFixed(6));
  assert.equal(await page.textContent('#readout dd[data-field=weight]'), a[3].toFixed(6));
  assert.match(await page.textContent('#readout'), /norm-weighted, α · ‖v‖/);
  assert.match(await page.evaluate(() => location.hash), /&norm=1(&|$)/);
  assert.equal(normAsks(asked).length, 1, 'asked once');
  // unticked: the weights on the scale to 1, norm=1 gone from the link, nothing asked
  await page.uncheck('#norm-toggle');
  await drawn(page, 'attention');
  assert.equal(await page.isHidden('#norm-key'), true);
  assert.doesNotMatch(await page.evaluate(() => location.hash), /norm=/);
  const w10 = await pixel(page, 1, 0);
  assert.ok(near(w10, viridis(a[3])), `${w10} after unticking: the weight ${a[3]}`);
  // ticked again: the answer kept for this map, version, item and head
  await page.check('#norm-toggle');
  await drawn(page, 'norm');
  assert.match(await page.evaluate(() => location.hash), /&norm=1(&|$)/);
  assert.equal(normAsks(asked).length, 1, normAsks(asked).join('\n'));
  assert.deepEqual(errors, []);
  await page.close();
});

test('the toy model\'s mean over heads: the mean of the heads\' alpha * |v W_o|, head 1\'s its own; a run not retained says why', async () => {
  // x: 3 tokens of d_model 16; head h reads columns 8h..8h+7 (W_v = W_o = I)
  const x = [
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3],
    [2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0.5, 0, 0, 0, 0, 0],
  ];
  const json = encodeURIComponent(JSON.stringify({ x }));
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&json=${json}&causal=0&retain=1&h=mean&norm=1`);
  await drawn(page, 'norm');
  const id = await page.evaluate(() => window.attnd.run.mapId);
  const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
  assert.equal(meta.norm_of, 'v W_o');
  const S = 3, n = [0, 1].map((h) => x.map((r) => len(r.slice(8 * h, 8 * h + 8))));
  const [a0, a1] = [await weights(id, 0), await weights(id, 1)];
  const mean = a0.map((w, k) => (w * n[0][k % S] + a1[k] * n[1][k % S]) / 2);
  const head1 = a1.map((w, k) => w * n[1][k % S]);
  const check = async (want, what) => {
    const max = Math.max(...want);
    assert.ok(Math.abs(Number(await page.getAttribute('#norm-key', 'data-max')) - max) < 1e-6, what);
    for (let i = 0; i < 3; i++)
      for (let j = 0; j < 3; j++) {
        const got = await pixel(page, i, j), exp = viridis(want[i * S + j] / max);
        assert.ok(near(got, exp), `${what} cell (${i}, ${j}): ${got}, want ${exp.map(Math.round)}`);
      }
    const c = await page.evaluate(() => window.attnd.cellCenter(2, 1));
    await page.mouse.move(c.pageX, c.pageY);
    await page.waitForFunction((v) => document.querySelector('#readout dd[data-field=norm]')?.textContent === v, want[7].toFixed(6));
    return max;
  };
  const max = await check(mean, 'mean');
  assert.match(await page.textContent('#norm-key'), new RegExp(`the mean of the heads' α · ‖v W_o‖.*largest, ${max.toFixed(4)}`));
  await page.click('#heads button[data-head="1"]');
  // (the weights are drawn while head 1's cells are asked for: data-max '')
  await page.waitForFunction((m) => !['', m].includes(document.getElementById('norm-key').dataset.max), String(max));
  await check(head1, 'head 1');
  assert.match(await page.textContent('#norm-key'), /head 1's α · ‖v W_o‖/);
  // not retained: the weights, and why
  await page.uncheck('#retain');
  await page.click('#run');
  await page.waitForFunction(() => !window.attnd.run.mapId && document.body.dataset.state === 'ready');
  await drawn(page, 'attention');
  assert.match(await page.textContent('#norm-key'), /retain on the server/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a sequence\'s map keeps no norms: the legend and the box say the server\'s reason, the weights stay drawn, not asked again after a Step', async () => {
  const { page, errors } = await runSequence(browser, daemon.url);
  const { mapId } = await page.evaluate(() => window.attnd.sequence);
  const asked = [];
  page.on('request', (r) => asked.push(r.url()));
  // the server's own reason, as it answers it
  const r = await fetch(`${daemon.url}/v2/maps/${mapId}/attention?b=0&h=1&what=norm&format=f32`);
  assert.equal(r.status, 400);
  const reason = (await r.json()).error;
  assert.match(reason, /keeps no value norms/);
  await page.check('#norm-toggle');
  await page.waitForFunction(() => document.getElementById('norm-key').classList.contains('error'));
  const key = await page.textContent('#norm-key');
  assert.ok(key.includes(reason), `${key} names ${reason}`);
  assert.match(key, /the weights are drawn/);
  assert.ok((await page.$eval('#norm-toggle', (b) => b.parentElement.title)).includes(reason), 'the box\'s tooltip says it too');
  assert.equal(await page.getAttribute('#heatmap', 'data-drawn'), 'attention');
  assert.equal(normAsks(asked).length, 1);
  await page.fill('#seq-next', 'sat');
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready');
  await page.waitForLoadState('networkidle');
  assert.ok((await page.textContent('#norm-key')).includes(reason));
  assert.equal(normAsks(asked).length, 1, normAsks(asked).join('\n'));
  // (chromium logs the 400 it was answered: the network's line, not the page's)
  assert.deepEqual(errors.filter((e) => !/status of 400 \(Bad Request\)/.test(e)), []);
  await page.close();
});
