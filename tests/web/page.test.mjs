// page.test.mjs - the visualiser in Debian's chromium against a real attnd
// this file starts: what is drawn (pixels of maps with known values), what
// the readout says (the seeds' worked numbers), shared URLs, retained maps.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { ARTIFACTS, browserSuite, near, openPage, pixel, retainAndReopen, sdpaHash, viridis, waitDrawn, WAIT } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const SENTENCE = 'the cat sat on the mat because it was tired';
// The sentence's d = 16 embeddings from the independent Python generator.
const EMBED16 = JSON.parse(fs.readFileSync(new URL('./embed_vectors.json', import.meta.url)))
  .cases.find((c) => c.d === 16 && c.words.join(' ') === SENTENCE);
// The seeds' first worked example (T=2, d_k=4, d_v=2).
const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]], tokens: ['t0', 't1'] };

const isGrey = ([r, g, b]) => Math.abs(r - g) <= 12 && Math.abs(g - b) <= 12;

test('identity map: diagonal drawn as the top of the colour map, the rest as its bottom', async () => {
  // Orthogonal Q = K rows scaled by 10, d_k = 8: scaled scores 100/sqrt(8)
  // = 35.4 on the diagonal and 0 elsewhere, so A = I to float precision.
  const T = 6, eye = Array.from({ length: T }, (_, i) => Array.from({ length: 8 }, (_, d) => (d === i ? 10 : 0)));
  const v = eye.map((r) => r.slice(0, 2));
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q: eye, k: eye, v }));
  const top = viridis(1), bottom = viridis(0);
  assert.deepEqual(top.map(Math.round), [0xfd, 0xe7, 0x25]);
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      const px = await pixel(page, i, j);
      assert.ok(near(px, i === j ? top : bottom), `cell (${i},${j}) drew ${px}`);
    }
  assert.deepEqual(errors, []);
  await page.close();
});

test('causal-uniform map: row i drawn at 1/(i+1), masked cells hatched grey, not as zeros', async () => {
  // Q = 0 makes every score 0; with the causal mask row i is uniform over
  // keys 0..i, so A[i][j] = 1/(i+1) for j <= i and masked for j > i.
  const T = 5;
  const q = Array.from({ length: T }, () => [0, 0, 0, 0]);
  const k = Array.from({ length: T }, (_, i) => [i, 1, -i, 2]);
  const v = Array.from({ length: T }, (_, i) => [i, 1]);
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q, k, v }, '&causal=1'));
  const zero = viridis(0);
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      const px = await pixel(page, i, j);
      if (j <= i) {
        const want = viridis(Math.round(255 / (i + 1)) / 255);
        assert.ok(near(px, want), `cell (${i},${j}) drew ${px}, want ${want.map(Math.round)}`);
      } else {
        assert.ok(isGrey(px), `masked cell (${i},${j}) drew ${px}, not grey`);
        assert.ok(!near(px, zero, 20), `masked cell (${i},${j}) looks like a zero weight`);
      }
    }
  // The readout names a masked cell as such.
  const c = await page.evaluate(() => window.attnd.cellCenter(1, 3));
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForFunction(() => /masked/.test(document.querySelector('#readout [data-field=weight]')?.textContent || ''));
  assert.deepEqual(errors, []);
  await page.close();
});

test('hover readout and step view show the seed example\'s numbers', async () => {
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash(SEED, '&h=0&q=0'));
  const read = async (i, j) => {
    const c = await page.evaluate(([a, b]) => window.attnd.cellCenter(a, b), [i, j]);
    await page.mouse.move(c.pageX, c.pageY);
    await page.waitForFunction(([a, b]) => document.querySelector('#readout [data-field=query]')?.textContent.includes(`#${a}`) &&
      document.querySelector('#readout [data-field=key]')?.textContent.includes(`#${b}`), [i, j]);
    return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#readout dd')].map((d) => [d.dataset.field, d.textContent])));
  };
  // Seed: S = [[2, 0], [0, 2]] after / sqrt(4); A = [[0.880797, 0.119203], ...].
  let r = await read(0, 0);
  assert.match(r.weight, /^0\.88079[67]$/);
  assert.equal(r['scaled-score'], '2.000000');
  assert.match(r['q-k'], /^4\.000000/);
  r = await read(0, 1);
  assert.match(r.weight, /^0\.11920[23]$/);
  assert.equal(r['scaled-score'], '0');
  r = await read(1, 1);
  assert.match(r.weight, /^0\.88079[67]$/);
  // Step view for query 0: output [1.2384, 1.7616] as in the seed.
  const steps = await page.textContent('#steps');
  assert.match(steps, /√d_k = 2\.0000/);
  assert.match(steps, /\[1\.2384, 1\.7616\]/);
  // Keyboard: focus the map, move the cursor, Enter selects query row 1.
  await page.focus('#heatmap');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => /query “t1”/.test(document.querySelector('#steps h2').textContent));
  assert.match(await page.textContent('#steps'), /\[2\.7616, 0\.2384\]/);
  assert.match(await page.evaluate(() => location.hash), /q=1/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('[ and ] on the map step through the heads and the mean', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(SENTENCE)}&h=0`);
  await page.focus('#heatmap');
  const seen = [];
  for (const key of [']', ']', ']', '[']) {
    await page.keyboard.press(key);
    seen.push(await page.textContent('#focus-title'));
  }
  assert.deepEqual(seen.map((t) => t.split(' · ')[0]), ['Head 1', 'Mean over heads', 'Head 0', 'Mean over heads']);
  assert.equal(await page.getAttribute('.head[data-head="mean"]', 'aria-pressed'), 'true');
  assert.deepEqual(errors, []);
  await page.close();
});

test('the head grid is not drawn again for every key on the map, only when what it shows changes', async () => {
  // Each thumbnail goes over every cell of its head: on a long map with
  // many heads, drawing them all again for every arrow key made the
  // cursor lag by a second.
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(SENTENCE)}&h=0`);
  const mark = () => page.evaluate(() => { for (const c of document.querySelectorAll('#heads canvas')) c.dataset.mark = '1'; });
  const marked = () => page.evaluate(() => [...document.querySelectorAll('#heads canvas')].filter((c) => c.dataset.mark).length);
  await mark();
  await page.focus('#heatmap');
  for (const key of ['ArrowDown', 'ArrowRight', 'Enter', ']']) await page.keyboard.press(key);
  await page.click('.head[data-head="mean"]');
  assert.equal(await marked(), 3, 'the thumbnails were drawn again');
  assert.equal(await page.getAttribute('.head[data-head="mean"]', 'aria-pressed'), 'true');
  assert.equal(await page.getAttribute('.head[data-head="1"]', 'aria-pressed'), 'false');
  assert.match(await page.textContent('#focus-title'), /^Mean over heads/);
  // A head picked by keyboard keeps the focus (its button is not replaced).
  await page.focus('.head[data-head="0"]');
  await page.keyboard.press('Enter');
  assert.match(await page.textContent('#focus-title'), /^Head 0/);
  assert.equal(await page.evaluate(() => document.activeElement.dataset.head), '0');
  // A new scale changes what they show: drawn again.
  await page.selectOption('#scale', 'log');
  assert.equal(await marked(), 0);
  await mark();
  await page.click('#run');
  await waitDrawn(page);
  assert.equal(await marked(), 0, 'a new run draws its own');
  assert.deepEqual(errors, []);
  await page.close();
});

test('the overview of a long map is not made again for every cursor move or hover', async () => {
  // Its image goes over every cell of the map (1M here): made for every
  // arrow key and every cell the pointer crossed, hovering lagged.
  const words = Array.from({ length: 1000 }, (_, i) => `w${i}`).join(' ');
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.addInitScript(() => {
    window.overviewImages = 0; // the overview of 1000 x 1000: 200 x 200 pooled
    const orig = CanvasRenderingContext2D.prototype.createImageData;
    CanvasRenderingContext2D.prototype.createImageData = function (w, h) {
      if (w === 200 && h === 200) window.overviewImages++;
      return orig.call(this, w, h);
    };
  });
  await page.goto(`${daemon.url}/#model=toy&text=${encodeURIComponent(words)}&h=0`);
  await waitDrawn(page);
  assert.equal(await page.isVisible('#overview-wrap'), true);
  const made = await page.evaluate(() => window.overviewImages);
  assert.ok(made >= 1);
  await page.focus('#heatmap');
  for (const key of ['ArrowDown', 'ArrowRight', 'ArrowDown', 'Enter']) await page.keyboard.press(key);
  for (let k = 0; k < 4; k++) {
    const c = await page.evaluate((j) => window.attnd.cellCenter(j, j), k + 5);
    await page.mouse.move(c.pageX, c.pageY);
  }
  await page.click('#zoom-in');
  assert.equal(await page.evaluate(() => window.overviewImages), made, 'the overview was made again');
  assert.match(await page.textContent('#zoom-info'), /of 1000 × 1000/);
  // Another head shows another map: made again.
  await page.focus('#heatmap');
  await page.keyboard.press(']');
  assert.equal(await page.evaluate(() => window.overviewImages), made + 1);
  await page.close();
});

test('a long map by keyboard: Page Up/Down by a window, Home/End to the row\'s ends, Ctrl+Home/End to the map\'s', async () => {
  // With the arrows alone, row 150 of 200 took 150 key presses.
  const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(words)}&h=0&q=10`);
  const at = async () => [await page.textContent('#readout [data-field="query"]'), await page.textContent('#readout [data-field="key"]')]
    .map((t) => Number(t.match(/\(#(\d+)\)/)[1]));
  await page.focus('#heatmap');
  await page.keyboard.press('ArrowDown'); // (11, 0)
  assert.deepEqual(await at(), [11, 0]);
  await page.keyboard.press('End');
  assert.deepEqual(await at(), [11, 199]);
  await page.keyboard.press('PageDown');
  assert.deepEqual(await at(), [75, 199]); // a window of 64 rows
  await page.keyboard.press('Home');
  assert.deepEqual(await at(), [75, 0]);
  await page.keyboard.press('PageUp');
  assert.deepEqual(await at(), [11, 0]);
  await page.keyboard.press('Control+End');
  assert.deepEqual(await at(), [199, 199]);
  assert.match(await page.textContent('#zoom-info'), /rows 136–199, keys 136–199 of 200 × 200/);
  await page.keyboard.press('Control+Home');
  assert.deepEqual(await at(), [0, 0]);
  assert.match(await page.textContent('#zoom-info'), /rows 0–63, keys 0–63/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a shared link reopens the same view, drawn the same', async () => {
  const url = `${daemon.url}/#model=toy&text=${encodeURIComponent(SENTENCE)}&causal=0`;
  const { page, errors } = await openPage(browser, url);
  // Choose head 1 and query 3 the way a person would.
  await page.click('.head[data-head="1"]');
  const c = await page.evaluate(() => window.attnd.cellCenter(3, 0));
  await page.mouse.click(c.pageX, c.pageY);
  await page.mouse.move(0, 0);
  await page.waitForFunction(() => /h=1/.test(location.hash) && /q=3/.test(location.hash));
  const link = await page.evaluate(() => location.href);
  const before = await page.evaluate(() => document.getElementById('heatmap').toDataURL());
  const title = await page.textContent('#focus-title');
  const step = await page.textContent('#steps h2');

  const again = await openPage(browser, link);
  assert.equal(await again.page.textContent('#focus-title'), title);
  assert.equal(await again.page.textContent('#steps h2'), step);
  assert.equal(await again.page.inputValue('#text'), SENTENCE);
  const drawn = await again.page.evaluate(() => document.getElementById('heatmap').toDataURL());
  assert.ok(drawn === before, 'the reopened heatmap is drawn differently');
  assert.deepEqual([...errors, ...again.errors], []);
  await page.close();
  await again.page.close();
});

test('a retained map opens from the list and draws as the inline one did', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(SENTENCE)}&h=1&q=2`);
  const inline = await page.evaluate(() => document.getElementById('heatmap').toDataURL());
  const id = await retainAndReopen(page);
  const drawn = await page.evaluate(() => document.getElementById('heatmap').toDataURL());
  assert.ok(drawn === inline, 'the retained map is drawn differently from the inline one');
  // ... and both are the toy's attention, worked out here from the Python
  // generator's embeddings (embed_vectors.json): head 1 is
  // softmax(p_i . p_j / sqrt(8)) over the position halves p.
  const x = EMBED16.x, T = x.length;
  for (let i = 0; i < T; i++) {
    const s = x.map((r) => r.slice(8).reduce((a, v, d) => a + v * x[i][8 + d], 0) / Math.sqrt(8));
    const m = Math.max(...s), e = s.map((v) => Math.exp(v - m)), z = e.reduce((a, b) => a + b, 0);
    for (let j = 0; j < T; j++) {
      const want = viridis(Math.round((255 * e[j]) / z) / 255), px = await pixel(page, i, j);
      assert.ok(near(px, want), `retained cell (${i},${j}) drew ${px}, want ${want.map(Math.round)} (weight ${(e[j] / z).toFixed(4)})`);
    }
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test('the demo, drawn: screenshot kept as a test artefact', async () => {
  const demo = await fetch(`${daemon.url}/v2/models/demo`);
  const model = demo.ok ? 'demo' : 'toy';
  const { page, errors } = await openPage(browser,
    `${daemon.url}/#model=${model}&text=${encodeURIComponent(SENTENCE)}&h=3&q=4`, { width: 1400, height: 1180 });
  // Head 3 of the demo matches equal words: the second "the" (#4) and the first (#0).
  const c = await page.evaluate(() => window.attnd.cellCenter(4, 0));
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForFunction(() => /#4/.test(document.querySelector('#readout [data-field=query]')?.textContent || ''));
  const heads = await page.$$('.head');
  const H = await page.evaluate(() => window.attnd.run.H);
  assert.equal(heads.length, H > 1 ? H + 1 : 1);
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, 'visualiser.png'), fullPage: true });
  assert.ok(fs.statSync(path.join(ARTIFACTS, 'visualiser.png')).size > 10000);
  assert.deepEqual(errors, []);
  await page.close();
});

test('log scale: weight w drawn at (log10 w + 4) / 4 of the colour map', async () => {
  const T = 5;
  const q = Array.from({ length: T }, () => [0, 0]);
  const k = Array.from({ length: T }, (_, i) => [i, -i]);
  const v = Array.from({ length: T }, (_, i) => [i, 1]);
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q, k, v }, '&causal=1&scale=log'));
  assert.equal(await page.inputValue('#scale'), 'log');
  for (let i = 0; i < T; i++) {
    const want = viridis(Math.round(((Math.log10(1 / (i + 1)) + 4) / 4) * 255) / 255);
    const px = await pixel(page, i, 0);
    assert.ok(near(px, want), `cell (${i},0) drew ${px}, want ${want.map(Math.round)}`);
  }
  assert.match(await page.textContent('#legend-ticks'), /1e-4.*1e-2.*1e\+0/);
  assert.deepEqual(errors, []);
  await page.close();
});

// causalUniformMap(T): retain a causal map of T zero queries on sdpa,
// A[i][j] = 1/(i+1) (every live key scores the same); its map_id.
async function causalUniformMap(T) {
  const body = {
    inputs: [
      { name: 'q', datatype: 'FP32', shape: [T, 2], data: new Array(2 * T).fill(0) },
      { name: 'k', datatype: 'FP32', shape: [T, 2], data: Array.from({ length: 2 * T }, (_, x) => (x % 7) - 3) },
      { name: 'v', datatype: 'FP32', shape: [T, 1], data: Array.from({ length: T }, (_, x) => x) },
    ],
    parameters: { causal: true, retain: true },
  };
  const resp = await (await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) })).json();
  return resp.parameters.map_id;
}

test('long sequence: zoom window around the query, overview, keyboard follows', async () => {
  const id = await causalUniformMap(200);
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0&q=150`);
  assert.equal(await page.isVisible('#overview'), true);
  const info = await page.textContent('#zoom-info');
  const [, r0, r1] = info.match(/rows (\d+)–(\d+)/).map(Number);
  assert.ok(r0 <= 150 && 150 <= r1, info);
  assert.ok(near(await pixel(page, 150, 120), viridis(Math.round(255 / 151) / 255)));
  assert.ok(isGrey(await pixel(page, 150, 160)), 'masked cell right of the diagonal');
  await page.click('#zoom-out');
  assert.match(await page.textContent('#zoom-info'), /of 200 × 200/);
  const [, z0, z1] = (await page.textContent('#zoom-info')).match(/rows (\d+)–(\d+)/).map(Number);
  assert.equal(z1 - z0 + 1, 128);
  // The keyboard cursor walks out of the window and the window follows.
  await page.focus('#heatmap');
  for (let x = 0; x < 3; x++) await page.keyboard.press('ArrowUp');
  const c = await page.evaluate(() => window.attnd.state.win);
  assert.ok(c.r0 <= 147);
  assert.match(await page.textContent('#readout'), /#147/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('exports: .npy and JSON hold the focused map\'s numbers', async () => {
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash(SEED, '&h=0'));
  const [npy] = await Promise.all([page.waitForEvent('download'), page.click('#export-npy')]);
  const buf = fs.readFileSync(await npy.path());
  assert.deepEqual([...buf.subarray(0, 8)], [0x93, 78, 85, 77, 80, 89, 1, 0]);
  const hlen = buf.readUInt16LE(8);
  assert.equal((10 + hlen) % 64, 0);
  assert.match(buf.toString('latin1', 10, 10 + hlen), /'descr': '<f4', 'fortran_order': False, 'shape': \(2, 2\)/);
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + 10 + hlen, buf.byteOffset + buf.length));
  assert.deepEqual(Array.from(data, (x) => x.toFixed(6)), ['0.880797', '0.119203', '0.119203', '0.880797']);
  const [js] = await Promise.all([page.waitForEvent('download'), page.click('#export-json')]);
  const j = JSON.parse(fs.readFileSync(await js.path(), 'utf8'));
  assert.deepEqual(j.shape, [2, 2]);
  assert.deepEqual(j.tokens, ['t0', 't1']);
  assert.equal(j.data[0].toFixed(6), '0.880797');
  const [png] = await Promise.all([page.waitForEvent('download'), page.click('#export-png')]);
  assert.deepEqual([...fs.readFileSync(await png.path()).subarray(1, 4)], [80, 78, 71]); // "PNG"
  assert.deepEqual(errors, []);
  await page.close();
});

test('PNG of a zoomed map: the whole map, one pixel a cell, not the window drawn', async () => {
  const T = 200, id = await causalUniformMap(T);
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0&q=150&scale=log`);
  assert.equal(await page.isVisible('#overview'), true);
  const [png] = await Promise.all([page.waitForEvent('download'), page.click('#export-png')]);
  const buf = fs.readFileSync(await png.path());
  assert.deepEqual([buf.readUInt32BE(16), buf.readUInt32BE(20)], [T, T], 'width, height');
  // Its pixels, read back through the browser's decoder.
  const px = await page.evaluate(async (b64) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width; c.height = img.height;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const at = (i, j) => Array.from(g.getImageData(j, i, 1, 1).data.slice(0, 3));
    return { a: at(0, 0), b: at(199, 3), m: at(10, 150) };
  }, buf.toString('base64'));
  const logPos = (w) => (Math.log10(w) + 4) / 4;
  assert.ok(near(px.a, viridis(Math.round(255 * logPos(1)) / 255)), `(0, 0): ${px.a}`);
  assert.ok(near(px.b, viridis(Math.round(255 * logPos(1 / 200)) / 255)), `(199, 3): ${px.b}`);
  assert.ok(isGrey(px.m), `masked (10, 150): ${px.m}`);
  assert.deepEqual(errors, []);
  await page.close();
});

test('pasted labels that do not fit (too few tokens, too many key_tokens, not a list) are refused, naming the field', async () => {
  const SPEC = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 0, 0]], v: [[1, 2], [3, 0], [1, 1]] };
  const row = (i) => Array.from({ length: 16 }, (_, d) => Math.sin(i * 3 + d));
  const cases = [
    ['sdpa', { ...SPEC, tokens: ['a'] }, /tokens: 1 label for 2 queries/],
    ['sdpa', { ...SPEC, key_tokens: ['a', 'b', 'c', 'd'] }, /key_tokens: 4 labels for 3 keys/],
    ['sdpa', { ...SPEC, tokens: 'ab' }, /tokens: expected a list/],
    ['toy', { x: [0, 1, 2].map(row), tokens: ['a', 'b'] }, /tokens: 2 labels for 3 queries/],
    ['toy', { x: [0, 1].map(row), context: [5, 6, 7].map(row), key_tokens: ['a'] }, /key_tokens: 1 label for 3 keys/],
  ];
  for (const [model, spec, want] of cases) {
    const page = await browser.newPage();
    await page.goto(`${daemon.url}/#model=${model}&json=${encodeURIComponent(JSON.stringify(spec))}&h=0`);
    await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: WAIT });
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'error', JSON.stringify(spec));
    assert.match(await page.textContent('#status'), want);
    await page.close();
  }
});

test('pasted JSON with a context runs cross-attention: T queries by S keys', async () => {
  const row = (i) => Array.from({ length: 16 }, (_, d) => Math.sin(i * 3 + d));
  const spec = { x: [0, 1, 2].map(row), context: [5, 6, 7, 8, 9].map(row), tokens: ['a', 'b', 'c'] };
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&json=${encodeURIComponent(JSON.stringify(spec))}`);
  const run = await page.evaluate(() => ({ T: window.attnd.run.T, S: window.attnd.run.S, keys: window.attnd.run.keyTokens }));
  assert.deepEqual(run, { T: 3, S: 5, keys: ['c0', 'c1', 'c2', 'c3', 'c4'] });
  // Each row of weights sums to 1 (read from the table view, 3 decimals).
  await page.check('#table-toggle');
  const rows = await page.$$eval('#table-view tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => Number(td.textContent))));
  assert.equal(rows.length, 3);
  for (const r of rows) {
    assert.equal(r.length, 5);
    assert.ok(Math.abs(r.reduce((a, b) => a + b, 0) - 1) < 0.006, `row sums to ${r}`);
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test('a map over 1M cells opens max-pooled by the server, labelled as such', async () => {
  const T = 1100; // 1.21M cells: the page asks for max=512, blocks of 3
  const body = {
    inputs: [
      { name: 'q', datatype: 'FP32', shape: [T, 2], data: new Array(2 * T).fill(0) },
      { name: 'k', datatype: 'FP32', shape: [T, 2], data: new Array(2 * T).fill(1) },
      { name: 'v', datatype: 'FP32', shape: [T, 1], data: new Array(T).fill(1) },
    ],
    parameters: { causal: true, retain: true },
  };
  const resp = await (await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) })).json();
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${resp.parameters.map_id}&q=100`);
  const run = await page.evaluate(() => ({ T: window.attnd.run.T, S: window.attnd.run.S, block: window.attnd.run.block }));
  assert.deepEqual(run, { T: 367, S: 367, block: [3, 3] });
  assert.match(await page.textContent('#overview-note'), /3×3 blocks of 1100 × 1100/);
  // Pooled cell (100, 80) is the max of rows 300..302 over keys 240..242:
  // 1/301, the weight of row 300 (the zoom window opens around q = 100).
  assert.ok(near(await pixel(page, 100, 80), viridis(Math.round(255 / 301) / 255)));
  assert.ok(isGrey(await pixel(page, 100, 120)), 'a block wholly after the query is masked');
  assert.ok(!isGrey(await pixel(page, 100, 100)), 'the diagonal block is not');
  // The readout says a pooled cell's number is its block's largest weight.
  await page.focus('#heatmap');
  await page.keyboard.press('ArrowRight'); // (100, 1): rows 300..302, keys 3..5
  assert.match(await page.textContent('#readout'), /300\.\.302.*3\.\.5.*largest of its 3 × 3 block/s);
  assert.equal(await page.textContent('#readout [data-field=weight]'), (1 / 301).toFixed(6));
  // Its exports say they are pooled: in the JSON, and in the files' names.
  const [js] = await Promise.all([page.waitForEvent('download'), page.click('#export-json')]);
  const j = JSON.parse(fs.readFileSync(await js.path(), 'utf8'));
  assert.deepEqual([j.shape, j.max_pooled_block, j.source_shape], [[367, 367], [3, 3], [1100, 1100]]);
  assert.match(js.suggestedFilename(), /-max3x3\.json$/);
  const [npy] = await Promise.all([page.waitForEvent('download'), page.click('#export-npy')]);
  assert.match(npy.suggestedFilename(), /-max3x3\.npy$/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('batch selector appears for B > 1 and switches the drawn map', async () => {
  // Batch item 0: identity (Q = K = 10 I); item 1: uniform (Q = 0).
  const eye = [[10, 0, 0], [0, 10, 0], [0, 0, 10]], zero = eye.map((r) => r.map(() => 0));
  const v = eye.map((r) => r.slice(0, 1));
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash({ q: [eye, zero], k: [eye, eye], v: [v, v] }));
  assert.equal(await page.isVisible('#batch-wrap'), true);
  assert.ok(near(await pixel(page, 0, 1), viridis(0)));
  await page.selectOption('#batch', '1');
  await page.waitForFunction(() => /b=1/.test(location.hash));
  assert.ok(near(await pixel(page, 0, 1), viridis(Math.round(255 / 3) / 255)), 'uniform third');
  // B = 1: no selector.
  const one = await openPage(browser, daemon.url + sdpaHash(SEED));
  assert.equal(await one.page.isVisible('#batch-wrap'), false);
  assert.deepEqual([...errors, ...one.errors], []);
  await page.close();
  await one.page.close();
});

test('a bad input shows the daemon\'s error naming the field', async () => {
  const page = await browser.newPage();
  await page.goto(daemon.url + sdpaHash({ q: [[1, 2, 3]], k: [[1, 2]], v: [[1]] }));
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  const msg = await page.textContent('#status');
  assert.match(msg, /\bk\b.*HTTP 400/);
  assert.equal(await page.getAttribute('#status', 'role'), 'alert');
  await page.close();
});
