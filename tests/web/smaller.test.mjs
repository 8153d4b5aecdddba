// smaller.test.mjs - issue 10, point 3: what a new user tripped over on the
// page, one test each (each fails on the page before the fix): a link
// pasted into an open tab, a retained sdpa map naming its own model, the
// step view of a map kept without scores, the status line's time, the
// table's rounding, the row the step view opens on; a link to a model
// the server has not loaded; a model list the server could not give.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage, sdpaHash, startAttnd, waitDrawn, WAIT } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]], tokens: ['t0', 't1'] };

// linkOf(page): the link's parameters as the page holds them now. Not
// page.url(): that is Playwright's copy, updated by a protocol event that
// may come after a click whose handler called replaceState has returned
// (under load, the h= of a head just clicked read as the old one).
const linkOf = async (page) => new URLSearchParams((await page.evaluate(() => location.hash)).slice(1));

// retainSdpa: POST sdpa on the seed with retain and no outputs list (so
// the store keeps weights and value rows, not scores); the map id.
async function retainSdpa() {
  const t = (name, a) => ({ name, datatype: 'FP32', shape: [a.length, a[0].length], data: a.flat() });
  const body = { inputs: [t('q', SEED.q), t('k', SEED.k), t('v', SEED.v)], parameters: { retain: true } };
  const res = await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).parameters.map_id;
}

test('a link pasted into a tab that shows the page draws what the link says', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=the%20cat%20sat&h=0`);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 3);
  // Only the fragment changes, as when a link to the same page is pasted.
  await page.evaluate(() => { location.hash = '#model=toy&text=one%20two%20three%20four%20five&h=1&q=2'; });
  await page.waitForFunction(() => window.attnd.run.T === 5 && window.attnd.state.h === 1,
    null, { timeout: WAIT });
  await waitDrawn(page);
  assert.equal(await page.inputValue('#text'), 'one two three four five');
  assert.match(await page.textContent('#focus-title'), /^Head 1/);
  assert.match(await page.textContent('#steps h2'), /query “three” \(#2\)/);
  // And a link to a retained map.
  const id = await retainSdpa();
  await page.evaluate((m) => { location.hash = `#map=${m}&h=0&q=1`; }, id);
  await page.waitForFunction((m) => window.attnd.run.mapId === m, id, { timeout: WAIT });
  await waitDrawn(page);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 2);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a retained sdpa map opened by #map= names its own model and shape', async () => {
  const id = await retainSdpa();
  const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0`);
  assert.equal(await page.inputValue('#model'), 'sdpa');
  const info = await page.textContent('#model-info');
  assert.ok(info.includes(`[${meta.shape.join(', ')}]`), info);
  assert.match(info, /sdpa/);
  assert.doesNotMatch(info, /d_model/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a map kept without scores: the step view lists weights only, no weight × v, no output', async () => {
  const id = await retainSdpa();
  const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
  assert.ok(!meta.retained.includes('scores') && meta.retained.includes('v'), JSON.stringify(meta.retained));
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0&q=0`);
  assert.match(await page.textContent('#steps [data-why=no-scores]'), /only the weights are listed/);
  const heads = await page.$$eval('#steps th[scope=col]', (ths) => ths.map((t) => t.textContent));
  assert.deepEqual(heads, ['key', 'weight']);
  assert.doesNotMatch(await page.textContent('#steps'), /Output of head|weight × v/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the status line and the map list give times for people, not raw ISO 8601', async () => {
  const id = await retainSdpa();
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0`);
  const iso = /\d{4}-\d\d-\d\dT\d\d:\d\d/;
  const status = await page.textContent('#status');
  assert.doesNotMatch(status, iso);
  assert.match(status, /retained \d+ s ago \(.*\d:\d\d:\d\d.*\)/);
  await page.click('#tab-maps');
  await page.waitForSelector(`#maps button:has-text("${id}")`);
  const item = await page.textContent(`#maps button:has-text("${id}")`);
  assert.doesNotMatch(item, iso);
  assert.match(item, /ago/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the table rounds as the readout does (6 decimals)', async () => {
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash(SEED, '&h=0&q=0'));
  await page.check('#table-toggle');
  const cells = await page.$$eval('#table-view tbody td', (tds) => tds.map((td) => td.textContent));
  assert.equal(cells.length, 4);
  assert.match(cells[0], /^0\.88079[67]$/);
  assert.match(cells[1], /^0\.11920[23]$/);
  const c = await page.evaluate(() => window.attnd.cellCenter(0, 1));
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForFunction(() => /#1/.test(document.querySelector('#readout [data-field=key]')?.textContent || ''));
  assert.equal(await page.textContent('#readout [data-field=weight]'), cells[1]);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the step view opens on the strongest off-diagonal row, and follows the hovered cell', async () => {
  // Causal, k_j = e_j, d_k = 4: q_1 = 4 e_0, q_2 = 20 e_1, q_3 = 4 e_2. Row 2
  // puts ~0.9999 on key 1, the strongest weight off the diagonal; row 0
  // (only itself) has nothing to show.
  const e = (j, s) => [0, 1, 2, 3].map((d) => (d === j ? s : 0));
  const spec = { q: [e(0, 0), e(0, 4), e(1, 20), e(2, 4)], k: [0, 1, 2, 3].map((j) => e(j, 1)), v: [[1], [2], [3], [4]] };
  const { page, errors } = await openPage(browser, daemon.url + sdpaHash(spec, '&causal=1&h=0'));
  assert.match(await page.textContent('#steps h2'), /\(#2\)/);
  assert.doesNotMatch(await page.evaluate(() => location.hash), /[&#]q=/);
  const c = await page.evaluate(() => window.attnd.cellCenter(3, 1));
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForFunction(() => /\(#3\)/.test(document.querySelector('#steps h2').textContent), null, { timeout: WAIT });
  await page.mouse.move(0, 0);
  await page.waitForFunction(() => /\(#2\)/.test(document.querySelector('#steps h2').textContent), null, { timeout: WAIT });
  // A chosen row (click) stays, and goes into the link.
  const d = await page.evaluate(() => window.attnd.cellCenter(1, 0));
  await page.mouse.click(d.pageX, d.pageY);
  await page.mouse.move(0, 0);
  await page.waitForFunction(() => /\(#1\)/.test(document.querySelector('#steps h2').textContent) && /q=1/.test(location.hash));
  assert.deepEqual(errors, []);
  await page.close();
});

test('a map of one query over 140000 keys (1 x 140000 cells, not pooled) opens, step view included', async () => {
  // the step view's row maximum was Math.max(...row): past ~125k
  // arguments V8 throws "Maximum call stack size exceeded"
  const S = 140000;
  const t = (name, shape, data) => ({ name, datatype: 'FP32', shape, data });
  const k = Array.from({ length: S }, (_, j) => (j % 7) / 7);
  const body = { inputs: [t('q', [1, 1], [1]), t('k', [S, 1], k), t('v', [S, 1], Array(S).fill(1))],
    parameters: { retain: true } };
  const res = await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, (await res.clone().text()).slice(0, 300));
  const id = (await res.json()).parameters.map_id;
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0`);
  assert.equal(await page.evaluate(() => window.attnd.run.S), S);
  assert.match(await page.textContent('#steps h2'), /query .* \(#0\)/);
  assert.match(await page.textContent('#steps'), /Showing the 16 keys with the largest weights of 140000/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a link naming a model the server has not loaded says so and runs no other model in its place', async () => {
  const page = await browser.newPage();
  await page.goto(`${daemon.url}/#model=nope&text=a%20b&h=0`);
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: WAIT });
  assert.equal(await page.evaluate(() => document.body.dataset.state), 'error');
  assert.match(await page.textContent('#status'), /model 'nope'.*(not found|not loaded)/);
  assert.equal(await page.getAttribute('#status', 'role'), 'alert');
  assert.equal(await page.evaluate(() => window.attnd.run), null);
  assert.equal(await page.inputValue('#model'), 'nope');
  // The link stays as given, to reload once the model is there.
  assert.match(await page.evaluate(() => location.hash), /model=nope/);
  // Choosing a model the server has runs it, even with Run pressed while
  // its metadata is still on its way.
  await page.route(/\/v2\/models\/toy$/, async (r) => { await new Promise((res) => setTimeout(res, 800)); await r.continue(); });
  await page.selectOption('#model', 'toy');
  await page.click('#run');
  await waitDrawn(page);
  assert.equal(await page.evaluate(() => window.attnd.run.model), 'toy');
  await page.close();
});

test('a Run the server never answers (connection refused) says the server did not answer, not "Failed to fetch"', async () => {
  const { page } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b&h=0`);
  await page.route(/\/infer$/, (r) => r.abort('connectionrefused'));
  await page.click('#run');
  await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  const text = await page.textContent('#status');
  assert.match(text, /no answer from the server/);
  assert.match(text, /stopped|restarted|network/);
  assert.equal(await page.getAttribute('#status', 'role'), 'alert');
  await page.close();
});

test('an answer that is not JSON (a proxy\'s login page) is named as such, not as a JSON parse error', async () => {
  const { page } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b&h=0`);
  await page.route(/\/infer$/, (r) => r.fulfill({ status: 200, contentType: 'text/html',
    body: '<!doctype html><title>Sign in</title><p>Please sign in</p>' }));
  await page.click('#run');
  await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  const text = await page.textContent('#status');
  assert.match(text, /not JSON/);
  assert.match(text, /text\/html/);
  assert.match(text, /Sign in/);
  assert.doesNotMatch(text, /Unexpected token/);
  assert.match(text, /^\/v2\/models\/toy\/infer: /);
  await page.close();
});

test('a map of many heads opening says how far it is, answer by answer', async () => {
  const H = 8, T = 3;
  const t = (name, d) => ({ name, datatype: 'FP32', shape: [1, H, T, d],
    data: Array.from({ length: H * T * d }, (_, i) => Math.sin(i)) });
  const res = await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST',
    body: JSON.stringify({ inputs: [t('q', 2), t('k', 2), t('v', 2)], parameters: { retain: true } }) });
  const id = (await res.json()).parameters.map_id;
  const page = await browser.newPage();
  await page.route(/\/attention\?/, async (r) => { await new Promise((res) => setTimeout(res, 40)); await r.continue(); });
  await page.addInitScript(() => {
    window.seen = [];
    new MutationObserver(() => window.seen.push(document.getElementById('status').textContent))
      .observe(document, { subtree: true, childList: true, characterData: true });
  });
  await page.goto(`${daemon.url}/#map=${id}&h=0`);
  await waitDrawn(page);
  const seen = await page.evaluate(() => window.seen);
  const planes = seen.filter((s) => /opening map .*: \d+ of \d+ planes/.test(s));
  // 8 heads' weights and 8 heads' value rows (no scores kept), each kind
  // in one answer (b=all&h=all).
  assert.ok(planes.some((s) => s.includes(`opening map ${id}: 8 of 16 planes`)), seen.join('\n'));
  assert.ok(planes.some((s) => s.includes('16 of 16 planes')), seen.join('\n'));
  assert.equal(await page.evaluate(() => window.attnd.run.H), H);
  await page.close();
});

test('a pasted JSON too large for the link: reopened, the link says it has no input, and runs nothing else', async () => {
  const T = 120, d = 16;
  const m = (f) => Array.from({ length: T }, (_, i) => Array.from({ length: d }, (_, j) => Number(Math.sin(f * i + j).toFixed(6))));
  const spec = { q: m(1), k: m(2), v: m(3) };
  assert.ok(JSON.stringify(spec).length > 16384);
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=sdpa&json=${encodeURIComponent(JSON.stringify(SEED))}&h=0`);
  await page.fill('#json', JSON.stringify(spec));
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.T === 120 && document.body.dataset.state === 'ready');
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: WAIT });
  assert.notEqual(await page.evaluate(() => document.body.dataset.state), 'ready');
  assert.equal(await page.evaluate(() => window.attnd.run), null, 'another input was run in its place');
  assert.match(await page.textContent('#status'), /too large to keep in a link/);
  assert.equal(await page.inputValue('#json'), '');
  assert.deepEqual(errors, []);
  await page.close();
});

// bigSpec: sdpa input whose JSON is past the link's 16 KiB.
function bigSpec() {
  const T = 120, d = 16;
  const m = (f) => Array.from({ length: T }, (_, i) => Array.from({ length: d }, (_, j) => Number(Math.sin(f * i + j).toFixed(6))));
  return { q: m(1), k: m(2), v: m(3) };
}
const copied = async (page) => {
  await page.click('#copy-link');
  return page.textContent('#status');
};

test('Copy link judges the drawn run\'s input, not the tab or the fields changed since', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b&h=0`);
  // A pasted JSON past 16 KiB drawn, then the Words tab opened and words
  // typed, not run: the link cannot hold the drawn input.
  await page.click('#tab-json');
  await page.fill('#json', JSON.stringify({ x: bigSpec().q }));
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.T === 120 && document.body.dataset.state === 'ready');
  await page.click('#tab-words');
  await page.fill('#text', 'one two');
  assert.match(await copied(page), /too large for a link/);
  // The words run (the JSON field still holds the large input), then the
  // JSON tab opened to look at it: the drawn words fit in the link.
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.T === 2 && document.body.dataset.state === 'ready');
  await page.click('#tab-json');
  assert.doesNotMatch(await copied(page), /too large/);
  const p = await linkOf(page);
  assert.equal(p.get('text'), 'one two');
  assert.equal(p.get('model'), 'toy');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a Run that failed leaves the link on the drawn run\'s words and causal box, not the failed one\'s', async () => {
  const { page } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b%20c&causal=0&h=0`);
  await page.fill('#text', '   ');
  await page.check('#causal');
  await page.click('#run');
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  assert.match(await page.textContent('#status'), /type at least one word/);
  await page.click('#heads button[data-head="1"]'); // the drawn map still studied
  const p = await linkOf(page);
  assert.equal(p.get('text'), 'a b c');
  assert.equal(p.get('causal'), '0');
  assert.equal(p.get('h'), '1');
  await page.close();
});

test('a link to a zoomed long map reopens the same zoom window, not one around the query row', async () => {
  const words = Array.from({ length: 300 }, (_, i) => `w${i % 37}`).join(' ');
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(words)}&h=1`);
  await page.click('#zoom-in');
  await page.focus('#heatmap');
  for (let i = 0; i < 3; i++) await page.keyboard.press('PageDown'); // the window follows the cursor
  await page.keyboard.press('Home');
  const seen = await page.textContent('#zoom-info');
  assert.match(seen, /keys 0–31 of 300 × 300/);
  const { page: fresh, errors: e2 } = await openPage(browser, page.url());
  assert.equal(await fresh.textContent('#zoom-info'), seen);
  assert.equal(await fresh.evaluate(() => window.attnd.state.q), await page.evaluate(() => window.attnd.state.q));
  assert.deepEqual([...errors, ...e2], []);
  await page.close();
  await fresh.close();
});

test('a Run overtaken by the next one is aborted, not downloaded to be dropped', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b&h=0`);
  let n = 0;
  await page.route(/\/infer$/, async (r) => { // the first Run's answer is slow
    if (n++ === 0) await new Promise((res) => setTimeout(res, 3000));
    await r.continue().catch(() => {}); // (aborted meanwhile)
  });
  const failed = [];
  page.on('requestfailed', (r) => { if (/\/infer$/.test(r.url())) failed.push(r.failure().errorText); });
  const done = [];
  page.on('requestfinished', (r) => { if (/\/infer$/.test(r.url())) done.push(r.url()); });
  await page.fill('#text', 'one two three');
  await page.click('#run');
  await page.waitForTimeout(300);
  await page.fill('#text', 'four five six seven');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.T === 4 && document.body.dataset.state === 'ready');
  await page.waitForTimeout(3500); // the first answer would have come by now
  assert.deepEqual(failed, ['net::ERR_ABORTED']);
  assert.equal(done.length, 1, 'only the second Run\'s answer was read');
  assert.equal(await page.evaluate(() => window.attnd.run.T), 4);
  assert.match(await page.textContent('#status'), /T=4/);
  assert.deepEqual(errors.filter((e) => !/ERR_ABORTED|aborted/i.test(e)), []);
  await page.close();
});

test('a long token: its labels are cut inside the map, the lines and the step view, not run out of them', async () => {
  const long = 'Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(6);
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(`the ${long} sat on`)}&h=0&q=1`);
  // The selected row's label is bold: the canvas's first columns stay
  // blank beside it (lit: its start was drawn off the canvas's left edge).
  const lit = await page.evaluate(() => {
    const c = document.getElementById('heatmap'), ctx = c.getContext('2d');
    const { py, cell } = window.attnd.cellCenter(1, 0);
    const d = ctx.getImageData(0, py - cell / 2, 3, cell).data;
    let n = 0;
    for (let k = 3; k < d.length; k += 4) if (d[k] > 0) n++;
    return n;
  });
  // The lines' labels stay inside the 300-pixel panel, cut with …, the
  // whole token their tooltip.
  const lines = await page.evaluate(() => [...document.querySelectorAll('#lines text')].map((t) => {
    const b = t.getBBox();
    return { x0: b.x, x1: b.x + b.width, text: t.firstChild.textContent, title: t.querySelector('title')?.textContent };
  }));
  const out = lines.filter((l) => !(l.x0 >= 0 && l.x1 <= 300));
  const cut = lines.filter((l) => l.title === long && /^Pneumono.*…$/.test(l.text)); // as the query and as a key
  // The step view's heading wraps the token inside its panel.
  const wraps = await page.evaluate(() => { const h = document.querySelector('#steps h2'); return h.scrollWidth <= h.clientWidth; });
  assert.deepEqual({ lit, out, cut: cut.length, wraps }, { lit: 0, out: [], cut: 2, wraps: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('Enter or Space on the map before any arrow shows the cursor, and Space does not scroll the page', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=the%20cat%20sat%20on%20the%20mat&h=0`);
  await page.focus('#heatmap');
  const y0 = await page.evaluate(() => window.scrollY);
  await page.keyboard.press(' ');
  await page.waitForTimeout(200);
  const got = { scrolled: (await page.evaluate(() => window.scrollY)) !== y0,
    query: await page.evaluate(() => document.querySelector('#readout dd[data-field="query"]')?.textContent ?? null) };
  const row = await page.evaluate(() => window.attnd.run.tokens.length > 0 && document.querySelector('#steps h2')?.textContent);
  assert.deepEqual(got, { scrolled: false, query: `${/query “([^”]*)” \(#(\d+)\)/.exec(row).slice(1).join(' (#')})` });
  await page.keyboard.press('Enter'); // now picks that row
  assert.equal(await page.evaluate(() => window.attnd.state.q), Number(/\(#(\d+)\)/.exec(row)[1]));
  assert.deepEqual(errors, []);
  await page.close();
});

test('while the server is slow to list its models, the status line says what the page waits for', async () => {
  const page = await browser.newPage();
  await page.route(/\/v2\/repository\/index$/, async (r) => { await new Promise((res) => setTimeout(res, 1500)); await r.continue(); });
  await page.goto(`${daemon.url}/#model=toy&text=a%20b&h=0`);
  await page.waitForTimeout(500);
  assert.equal(await page.evaluate(() => document.body.dataset.state), 'loading');
  assert.match(await page.textContent('#status'), /asking the server for its models/);
  await waitDrawn(page);
  await page.close();
});

test('a long run the server could send without the scores is drawn, its readout working the score out from q and k', async () => {
  // 1000 words on the toy: weights and scores do not fit in 12 MB of
  // request memory, the weights alone do; a run need not ask for the scores.
  const d = await startAttnd(['--request-memory', '12000000']);
  try {
    const words = Array.from({ length: 1000 }, (_, i) => `w${i}`).join(' ');
    const { page, errors } = await openPage(browser, `${d.url}/#model=toy&text=${encodeURIComponent(words)}&h=1&q=500`);
    assert.equal(await page.evaluate(() => window.attnd.run.T), 1000);
    await page.focus('#heatmap');
    await page.keyboard.press('ArrowRight'); // (500, 1)
    const want = await page.evaluate(() => {
      const r = window.attnd.run, dk = r.headDim;
      let s = 0;
      for (let k = 0; k < dk; k++) s += r.q[((0 * r.H + 1) * r.T + 500) * dk + k] * r.k[((0 * r.H + 1) * r.S + 1) * dk + k];
      return s / Math.sqrt(dk);
    });
    assert.equal(Number(await page.textContent('#readout [data-field="scaled-score"]')).toFixed(4), want.toFixed(4));
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await d.stop();
  }
});

test('h=mean in a link to a one-head map shows head 0, pressed, not a mean with no head to pick', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=sdpa&json=${encodeURIComponent(JSON.stringify(SEED))}&h=mean`);
  assert.match(await page.textContent('#focus-title'), /^Head 0/);
  assert.equal(await page.getAttribute('.head[data-head="0"]', 'aria-pressed'), 'true');
  assert.doesNotMatch(await page.textContent('#steps'), /mean over heads/);
  assert.match(await page.evaluate(() => location.hash), /[#&]h=0(&|$)/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a model list the server could not give (no answer, a 503) says so, not "Choose a model" over a list of sdpa alone', async () => {
  for (const fail of [(r) => r.abort('connectionrefused'),
    (r) => r.fulfill({ status: 503, contentType: 'application/json', body: '{"error":"server: draining (shutting down)"}' })]) {
    const page = await browser.newPage();
    await page.route(/\/v2\/repository\/index$/, fail);
    await page.goto(`${daemon.url}/`);
    await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: WAIT });
    const text = await page.textContent('#status');
    assert.match(text, /could not list its models/, text);
    assert.match(text, /no answer from the server|draining/, text);
    assert.equal(await page.getAttribute('#status', 'role'), 'alert');
    // sdpa, built in, stays offered.
    assert.deepEqual(await page.$$eval('#model option', (o) => o.map((x) => x.value)), ['sdpa']);
    await page.close();
  }
});
