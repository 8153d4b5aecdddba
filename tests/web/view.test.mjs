// view.test.mjs - a link reopens the view drawn, and the view stays drawn
// as the screen changes (each test failed on the page before its fix): the
// retain and table boxes in the link, the words kept out of a link they
// would make unusable, canvases redrawn at a new device pixel ratio, the
// overview moved by keyboard.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage, waitDrawn, WAIT } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const hash = (page) => new URLSearchParams(new URL(page.url()).hash.slice(1));
const copied = async (page) => {
  await page.click('#copy-link');
  return page.textContent('#status');
};

test('the retain and table boxes are in the link when ticked, and a link reopens them', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b%20c&h=0`);
  // unticked (the default): not in the link
  assert.equal(hash(page).has('retain'), false);
  assert.equal(hash(page).has('table'), false);
  await page.check('#table-toggle'); // a view control: in the link at once
  assert.equal(hash(page).get('table'), '1');
  await page.check('#retain');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.mapId && document.body.dataset.state === 'ready');
  assert.equal(hash(page).get('retain'), '1');
  assert.equal(hash(page).get('table'), '1');
  const { page: fresh, errors: e2 } = await openPage(browser, page.url());
  assert.equal(await fresh.isChecked('#retain'), true);
  assert.equal(await fresh.isChecked('#table-toggle'), true);
  assert.equal(await fresh.isVisible('#table-view'), true);
  assert.match(await fresh.evaluate(() => window.attnd.run.mapId || ''), /^m/, 'the reopened run was not retained');
  // unticked again: gone from the link
  await fresh.uncheck('#table-toggle');
  assert.equal(hash(fresh).has('table'), false);
  assert.equal(await fresh.isVisible('#table-view'), false);
  assert.deepEqual([...errors, ...e2], []);
  await page.close();
  await fresh.close();
});

test('words past 16 KiB are not kept in the link: Copy link says so, and the link reopened says it has no input', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b&h=0`);
  const words = ['x', 'y', 'z'].map((c) => c.repeat(6000)).join(' '); // 3 tokens, 18002 characters
  await page.fill('#text', words);
  await page.evaluate(() => document.getElementById('run').click());
  // (polled: on the page before, playwright's waitForFunction never
  // returned once the 18 KB link was written)
  for (let i = 0; i < 150 && !(await page.evaluate(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready')); i++)
    await new Promise((res) => setTimeout(res, 100));
  assert.ok(page.url().length < 4096, `a link of ${page.url().length} characters`);
  assert.match(await copied(page), /too large for a link/);
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: WAIT });
  assert.notEqual(await page.evaluate(() => document.body.dataset.state), 'ready');
  assert.equal(await page.evaluate(() => window.attnd.run), null, 'another input was run in its place');
  assert.match(await page.textContent('#status'), /words were too large to keep in a link/);
  assert.equal(await page.inputValue('#text'), '');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a long word\'s labels are cut to fit by halving, not a character at a time', async () => {
  // three 6000-character words: each label (map rows and columns, the
  // lines' two sides) took up to 6000 measures of up to 6000 characters,
  // ~72000 in all, and the page stopped for 18-60 s; cut by halving, a
  // label takes about 14. Counted, not timed.
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.addInitScript(() => {
    const measure = CanvasRenderingContext2D.prototype.measureText;
    window.measures = 0;
    CanvasRenderingContext2D.prototype.measureText = function (t) { window.measures++; return measure.call(this, t); };
  });
  await page.goto(`${daemon.url}/#model=toy&text=a%20b&h=0`);
  await waitDrawn(page);
  // (the third of astral characters, two UTF-16 units each: a cut
  // between a pair's halves drew a lone surrogate's replacement glyph)
  const words = ['x'.repeat(6000), 'y'.repeat(6000), '\u{1F600}'.repeat(3000)];
  await page.fill('#text', words.join(' '));
  const before = await page.evaluate(() => window.measures);
  await page.evaluate(() => document.getElementById('run').click());
  // (polled, as above; the guard is generous: the old page took 60 s here)
  for (let i = 0; i < 1200 && !(await page.evaluate(() => window.attnd.run?.T === 3 && document.body.dataset.state === 'ready')); i++)
    await new Promise((res) => setTimeout(res, 100));
  assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready');
  const n = await page.evaluate(() => window.measures) - before;
  assert.ok(n > 0 && n < 1000, `${n} text measures to draw three long words' labels`);
  // each line label is the longest prefix that fits, with its '…'
  const cut = await page.evaluate(() => [...document.querySelectorAll('#lines text')].map((e) => e.firstChild.nodeValue));
  assert.ok(cut.length >= 6, JSON.stringify(cut.map((t) => t.length)));
  for (const t of cut) {
    assert.match(t, /^(x+|y+|\u{1F600}+)…$/u, JSON.stringify(t.slice(-8)));
    assert.ok(t.length < 200, `a label of ${t.length} characters`);
  }
  // a cut never splits an astral character's pair of UTF-16 units (a
  // lone half draws as a replacement glyph): measured 6 px a unit and the
  // '…' 6, the longest prefix of 'a' + 20 of them in 66 px is 10 units,
  // 'a', four whole ones and half of the fifth; cut is 'a' and four
  const cutAstral = await page.evaluate(async () => {
    const { cutText } = await import('./web/heatmap.js');
    const ctx = { measureText: (t) => ({ width: 6 * t.length }) };
    return cutText(ctx, `a${'\u{1F600}'.repeat(20)}`, 66);
  });
  assert.equal(cutAstral, `a${'\u{1F600}'.repeat(4)}…`);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a change of device pixel ratio (zoom, another screen) redraws the canvases at the new ratio', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(
    Array.from({ length: 120 }, (_, i) => `w${i % 17}`).join(' '))}&h=0`);
  const sizes = () => page.evaluate(() => [...document.querySelectorAll('#heatmap, #legend-bar, #overview, #heads canvas')]
    .map((c) => [c.width, c.height, parseFloat(c.style.width), parseFloat(c.style.height)]));
  const first = await sizes();
  assert.ok(first.length >= 6, JSON.stringify(first)); // the map, legend, overview, 2 heads and the mean
  for (const [w, h, cw, ch] of first) assert.deepEqual([w, h], [Math.round(cw), Math.round(ch)]);
  // The ratio a browser zoom or another screen gives, emulated; headless
  // chromium updates its rendering (and tells the page's media queries)
  // when a frame is made: a screenshot makes one.
  const cdp = await page.context().newCDPSession(page);
  const ratio = async (r) => {
    await cdp.send('Emulation.setDeviceMetricsOverride', { width: 1400, height: 1000, deviceScaleFactor: r, mobile: false });
    await cdp.send('Page.captureScreenshot', {});
    await page.waitForFunction((x) => window.devicePixelRatio === x, r);
    // every canvas follows, at r times its CSS size in device pixels
    await page.waitForFunction((x) => [...document.querySelectorAll('#heatmap, #legend-bar, #overview, #heads canvas')]
      .every((c) => c.width === Math.round(parseFloat(c.style.width) * x)), r, { timeout: WAIT }).catch(() => {});
    const got = await sizes();
    for (const [w, h, cw, ch] of got) assert.deepEqual([w, h], [Math.round(cw * r), Math.round(ch * r)], `ratio ${r}: ${JSON.stringify(got)}`);
  };
  await ratio(2);
  await ratio(1.5);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the overview moves the zoom window by keyboard: arrows by a quarter window, Page Up/Down by one, Home/End to the ends', async () => {
  const words = Array.from({ length: 300 }, (_, i) => `w${i % 37}`).join(' ');
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=${encodeURIComponent(words)}&h=1&win=100.40.64`);
  const info = () => page.textContent('#zoom-info');
  assert.match(await info(), /^rows 100–163, keys 40–103 of 300 × 300$/);
  assert.equal(await page.evaluate(() => document.getElementById('overview').tabIndex), 0, 'not in the tab order');
  await page.focus('#overview');
  await page.keyboard.press('ArrowDown');
  assert.match(await info(), /^rows 116–179, keys 40–103 /);
  await page.keyboard.press('ArrowLeft');
  assert.match(await info(), /^rows 116–179, keys 24–87 /);
  await page.keyboard.press('PageUp');
  assert.match(await info(), /^rows 52–115, keys 24–87 /);
  await page.keyboard.press('End');
  assert.match(await info(), /^rows 236–299, keys 236–299 /);
  assert.equal(new URLSearchParams(new URL(page.url()).hash.slice(1)).get('win'), '236.236.64');
  await page.keyboard.press('Home');
  assert.match(await info(), /^rows 0–63, keys 0–63 /);
  assert.equal(await page.evaluate(() => document.activeElement.id), 'overview');
  assert.deepEqual(errors, []);
  await page.close();
});
