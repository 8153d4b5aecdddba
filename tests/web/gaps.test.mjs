// gaps.test.mjs - the visualiser's issue-5 follow-ups in chromium against a
// real attnd: explicit masks drawn as masks (not zeros) for sdpa, for
// attention models and for retained maps; the step view of a retained map;
// the input tabs by keyboard (WAI-ARIA tabs pattern).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, near, openPage, pixel, sdpaHash, viridis } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const isGrey = ([r, g, b]) => Math.abs(r - g) <= 12 && Math.abs(g - b) <= 12;
const ZERO = viridis(0);

// Q = 0 makes every score 0, so each row is uniform over its allowed keys:
// with mask row i allowing n_i keys, A[i][j] = 1/n_i there, masked elsewhere.
// The mask is not lower-triangular, so causal drawing cannot explain it.
const T = 4;
const MASK = [
  [true, false, true, true],
  [false, true, false, true],
  [true, true, true, false],
  [false, false, false, true],
];
const ZQ = Array.from({ length: T }, () => [0, 0]);
const KK = Array.from({ length: T }, (_, i) => [i, 1 - i]);
const VV = Array.from({ length: T }, (_, i) => [i, 1]);

// checkMaskDrawn: every cell of the focused map is the uniform weight of its
// row or, where MASK is false, the grey hatch, never the colour of 0.
async function checkMaskDrawn(page, mask = MASK) {
  for (let i = 0; i < mask.length; i++) {
    const n = mask[i].filter(Boolean).length;
    for (let j = 0; j < mask[i].length; j++) {
      const px = await pixel(page, i, j);
      if (mask[i][j]) {
        const want = viridis(Math.round(255 / n) / 255);
        assert.ok(near(px, want), `cell (${i},${j}) drew ${px}, want ${want.map(Math.round)}`);
      } else {
        assert.ok(isGrey(px), `masked cell (${i},${j}) drew ${px}, not the mask grey`);
        assert.ok(!near(px, ZERO, 20), `masked cell (${i},${j}) drew the colour of weight 0`);
      }
    }
  }
}

async function readout(page, i, j) {
  const c = await page.evaluate(([a, b]) => window.attnd.cellCenter(a, b), [i, j]);
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForFunction(([a, b]) => document.querySelector('#readout [data-field=query]')?.textContent.includes(`#${a}`) &&
    document.querySelector('#readout [data-field=key]')?.textContent.includes(`#${b}`), [i, j]);
  return page.textContent('#readout [data-field=weight]');
}

test('sdpa with a pasted mask: masked cells drawn as masks, not as zero weights', async () => {
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q: ZQ, k: KK, v: VV, mask: MASK }, '&q=1'));
  await checkMaskDrawn(page);
  assert.match(await readout(page, 0, 1), /masked/);
  assert.equal(await readout(page, 1, 1), '0.500000');
  // The step view skips the masked keys in the softmax: row 1 averages v1, v3.
  assert.match(await page.textContent('#steps'), /\[2\.0000, 1\.0000\]/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('sdpa with a per-head mask [B, H, T, S]: each head draws its own; the mean masks only what every head masks', async () => {
  const other = MASK.map((r) => r.map((x, j) => (j === 0 ? true : x)));
  const q = [[ZQ, ZQ]], k = [[KK, KK]], v = [[VV, VV]];
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q, k, v, mask: [[MASK, other]] }, '&h=0'));
  await checkMaskDrawn(page, MASK);
  await page.click('.head[data-head="1"]');
  await checkMaskDrawn(page, other);
  await page.click('.head[data-head="mean"]');
  // (1, 0): masked in head 0 only -> drawn as the mean weight (0 + 1/3) / 2.
  assert.ok(near(await pixel(page, 1, 0), viridis(Math.round(255 / 6) / 255)));
  assert.ok(isGrey(await pixel(page, 1, 2)), '(1, 2) is masked in both heads');
  assert.deepEqual(errors, []);
  await page.close();
});

test('an attention model with a pasted mask: masked cells drawn as masks', async () => {
  // toy: W = I, so the scores are x x^T / sqrt(8) per head; x = 0 makes
  // them 0 and each row uniform over its allowed keys, as above.
  const x = Array.from({ length: T }, () => new Array(16).fill(0));
  const spec = { x, mask: [MASK], tokens: ['a', 'b', 'c', 'd'] };
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&causal=0&json=${encodeURIComponent(JSON.stringify(spec))}`);
  await checkMaskDrawn(page);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a mask of the wrong shape is refused by the page, naming the mask', async () => {
  const page = await browser.newPage();
  await page.goto(daemon.url + sdpaHash({ q: ZQ, k: KK, v: VV, mask: [[true, false]] }));
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  assert.match(await page.textContent('#status'), /^mask: shape \[1, 2\]; expected \[4, 4\]/);
  await page.close();
});

// retain: POST sdpa on q, k, v (+ mask, + outputs) with retain; the map id.
async function retain(extra = {}, outputs = null) {
  const t = (name, a) => ({ name, datatype: 'FP32', shape: [a.length, a[0].length], data: a.flat() });
  const inputs = [t('q', ZQ), t('k', KK), t('v', VV)];
  if (extra.mask) inputs.push({ name: 'mask', datatype: 'BOOL', shape: [T, T], data: extra.mask.flat() });
  const body = { inputs, parameters: { retain: true, causal: !!extra.causal } };
  if (outputs) body.outputs = outputs.map((name) => ({ name }));
  const res = await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).parameters.map_id;
}

test('a retained causal map: the server\'s what=mask agrees with the page\'s drawing', async () => {
  const id = await retain({ causal: true });
  const m = await (await fetch(`${daemon.url}/v2/maps/${id}/attention?what=mask`)).json();
  // Causal, T = 4: row i attends keys 0..i.
  assert.deepEqual(m.data, [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1]);
  // q = 0: every score 0, so the weights are 1/(i+1) on keys 0..i (worked
  // out here, not read back from the page or the inline answer).
  const a = await (await fetch(`${daemon.url}/v2/maps/${id}/attention`)).json();
  assert.equal(a.data.length, T * T, 'one weight per cell'); // else the loop checks nothing
  a.data.forEach((w, k) => {
    const i = Math.floor(k / T), j = k % T;
    assert.ok(Math.abs(w - (j <= i ? 1 / (i + 1) : 0)) < 1e-7, `weight (${i},${j}) = ${w}`);
  });
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0`);
  await checkMaskDrawn(page, m.data.reduce((rows, x, k) => {
    if (k % T === 0) rows.push([]);
    rows[rows.length - 1].push(x === 1);
    return rows;
  }, []));
  assert.deepEqual(errors, []);
  await page.close();
});

test('a retained map with an explicit mask draws its masked cells as masks', async () => {
  const id = await retain({ mask: MASK });
  const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
  // A daemon that drops the request's mask is a regression, never a skip
  // (tests/server/anchors.test.mjs holds what=mask to the mask sent).
  assert.equal(meta.mask, true, `the map keeps the request's mask: ${JSON.stringify(meta)}`);
  const m = await (await fetch(`${daemon.url}/v2/maps/${id}/attention?what=mask`)).json();
  assert.deepEqual(m.data, MASK.flat().map(Number));
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0`);
  await checkMaskDrawn(page);
  assert.match(await readout(page, 3, 0), /masked/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the step view of a retained map: the numbers when scores were kept, else why not', async () => {
  for (const outputs of [null, ['output', 'attention', 'scores']]) {
    const id = await retain({}, outputs);
    const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
    // README: a retained request keeps its scores when it asked for the
    // scores output; both branches below must run, one per request
    const kept = (meta.retained || []).includes('scores');
    assert.equal(kept, outputs !== null, `retained ${JSON.stringify(meta.retained)} for outputs ${outputs}`);
    const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0&q=1`);
    const steps = await page.textContent('#steps');
    assert.match(steps, /query “t1” \(#1\)/);
    if (kept) {
      // K rows [i, 1 - i], q = 0: every scaled score 0, exp 1, sum 4.
      assert.match(steps, /√d_k = 1\.4142/);
      assert.match(steps, /sum of the exponentials is 4\.0000/);
      assert.equal(await page.$('#steps [data-why=no-scores]'), null);
    } else {
      const why = await page.textContent('#steps [data-why=no-scores]');
      assert.match(why, /No scores for this map: the server kept only its weights, so only the weights are listed/);
      assert.doesNotMatch(steps, /√d_k =/);
      // The weights are still listed: uniform 0.25 over the 4 keys.
      assert.equal((steps.match(/0\.250000/g) || []).length, 4);
    }
    assert.deepEqual(errors, []);
    await page.close();
  }
});

test('the input tabs by keyboard: arrows move and select, Home/End, one tab stop', async () => {
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q: ZQ, k: KK, v: VV }));
  const sel = () => page.evaluate(() => ({
    selected: document.querySelector('[role=tab][aria-selected=true]').id,
    focused: document.activeElement.id,
    stops: [...document.querySelectorAll('[role=tab]')].filter((t) => t.tabIndex === 0).map((t) => t.id),
    pane: [...document.querySelectorAll('[role=tabpanel]')].filter((p) => !p.hidden).map((p) => p.id),
  }));
  await page.focus('#tab-json');
  assert.deepEqual(await sel(), { selected: 'tab-json', focused: 'tab-json', stops: ['tab-json'], pane: ['pane-json'] });
  const steps = [
    ['ArrowRight', 'maps'], ['ArrowRight', 'words'], ['ArrowLeft', 'maps'], ['ArrowLeft', 'json'],
    ['Home', 'words'], ['End', 'maps'],
  ];
  for (const [key, t] of steps) {
    await page.keyboard.press(key);
    assert.deepEqual(await sel(), { selected: `tab-${t}`, focused: `tab-${t}`, stops: [`tab-${t}`], pane: [`pane-${t}`] }, key);
  }
  // Tab leaves the tablist for the selected panel's content.
  await page.keyboard.press('Home');
  await page.keyboard.press('Tab');
  assert.notEqual(await page.evaluate(() => document.activeElement.getAttribute('role')), 'tab');
  assert.deepEqual(errors, []);
  await page.close();
});

test('layout at 1400x1000 and 800x900: tabs on one line, nothing wider than the window, side panel placed', async () => {
  const demo = (await fetch(`${daemon.url}/v2/models/demo`)).ok ? 'demo' : 'toy';
  const url = `${daemon.url}/#model=${demo}&text=${encodeURIComponent('the cat sat on the mat because it was tired')}&h=1&q=4`;
  for (const [width, height] of [[1400, 1000], [800, 900]]) {
    const { page, errors } = await openPage(browser, url, { width, height });
    const m = await page.evaluate(() => {
      const box = (id) => document.getElementById(id).getBoundingClientRect();
      const tabs = [...document.querySelectorAll('[role=tab]')].map((t) => t.getBoundingClientRect().height);
      const steps = document.getElementById('steps');
      return {
        tabHeights: tabs, doc: document.documentElement.scrollWidth,
        stepsOverflow: steps.scrollWidth - steps.clientWidth,
        map: box('heatmap'), readout: box('readout'), lines: box('lines'),
      };
    });
    const label = `${width}x${height}`;
    assert.ok(Math.max(...m.tabHeights) - Math.min(...m.tabHeights) < 1 && m.tabHeights[0] < 40, `${label}: tab heights ${m.tabHeights}`);
    assert.ok(m.doc <= width, `${label}: page is ${m.doc}px wide`);
    assert.ok(m.stepsOverflow <= 0, `${label}: step table overflows by ${m.stepsOverflow}px`);
    if (width >= 1400) assert.ok(m.readout.left >= m.map.right, `${label}: readout beside the map`);
    else {
      assert.ok(m.readout.top >= m.map.bottom, `${label}: readout below the map`);
      assert.ok(Math.abs(m.lines.top - m.readout.top) < 60 && m.lines.left >= m.readout.right, `${label}: lines beside the readout`);
    }
    assert.deepEqual(errors, []);
    await page.close();
  }
});
