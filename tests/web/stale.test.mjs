// stale.test.mjs - an answer the page no longer waits for never draws: a
// Run (or a map opened from the list) that is slow to answer, overtaken
// by a newer Run or map, is dropped, its result and its error alike, so
// the page shows what its input and link say.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

// slowFirst: the page's first request matching re is held until the test
// calls release() (the newer Run drawn: an event, not a time, so a slow
// browser cannot let it through before it was overtaken), then sent
// (fail: answered with that HTTP status instead); { passed } resolves
// once its answer has reached the page (the request finished there, and
// the page's turns after it that read it).
async function slowFirst(page, re, fail = 0) {
  let first = true;
  let done, release;
  const passed = new Promise((res) => { done = res; });
  const released = new Promise((res) => { release = res; });
  await page.route(re, async (r) => {
    if (!first) return r.continue();
    first = false;
    const held = r.request();
    const finished = new Promise((res) => {
      const on = (q) => { if (q === held) { page.off('requestfinished', on); page.off('requestfailed', on); res(); } };
      page.on('requestfinished', on);
      page.on('requestfailed', on);
    });
    await released;
    if (fail) await r.fulfill({ status: fail, contentType: 'application/json', body: '{"error":"slow and failed"}' });
    else await r.continue();
    await finished;
    setTimeout(done, 300); // the page's reading of it
  });
  return { passed, release };
}

// overtake: a Run of five words (the one held), then, 100 ms on, a Run of
// two, drawn; then the held answer is let through, and reaches the page.
async function overtake(page, { passed, release }) {
  await page.fill('#text', 'one two three four five');
  await page.click('#run');
  await page.waitForTimeout(100);
  await page.fill('#text', 'x y');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.T === 2 && document.body.dataset.state === 'ready');
  release();
  await passed;
}

const state = (page) => page.evaluate(() => ({
  T: window.attnd.run.T, source: window.attnd.run.source, map: window.attnd.state.map,
  body: document.body.dataset.state, status: document.getElementById('status').textContent,
  error: document.getElementById('status').classList.contains('error'), hash: location.hash,
}));

test('a slow Run overtaken by a newer Run: the newer one stays drawn, as the words and the link say', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b%20c&h=0`);
  await overtake(page, await slowFirst(page, /\/infer$/));
  const s = await state(page);
  assert.equal(s.T, 2);
  assert.equal(s.body, 'ready');
  assert.match(s.hash, /text=x\+y/);
  assert.match(s.status, /T=2/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a slow Run that fails after a newer Run drew: no error over the newer one', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b%20c&h=0`);
  await overtake(page, await slowFirst(page, /\/infer$/, 503));
  const s = await state(page);
  assert.equal(s.body, 'ready');
  assert.equal(s.error, false, s.status);
  assert.deepEqual(errors.filter((e) => !/status of 503/.test(e)), []);
  await page.close();
});

test('a map from the list slow to open, then a Run: the Run stays drawn, the link names no map', async () => {
  const t3 = (q) => ({ name: q, datatype: 'FP32', shape: [3, 2], data: [1, 0, 0, 1, 1, 1] });
  const res = await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST',
    body: JSON.stringify({ inputs: ['q', 'k', 'v'].map(t3), parameters: { retain: true } }) });
  const id = (await res.json()).parameters.map_id;
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b%20c%20d&h=0`);
  await page.click('#tab-maps');
  const { passed, release } = await slowFirst(page, new RegExp(`/v2/maps/${id}$`));
  await page.click(`#maps button:has-text("${id}")`);
  await page.waitForTimeout(100);
  await page.click('#tab-words');
  await page.fill('#text', 'x y');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run.T === 2 && document.body.dataset.state === 'ready');
  release();
  await passed;
  const s = await state(page);
  assert.equal(s.source, 'model');
  assert.equal(s.T, 2);
  assert.equal(s.map, null);
  assert.doesNotMatch(s.hash, /map=/);
  assert.deepEqual(errors, []);
  await page.close();
});
