// limits.test.mjs - long runs in chromium against a real attnd: a run whose
// answer the browser cannot hold (6000 words on the toy: 2 x 6000 x 6000
// weights, about 1 GB of JSON) is refused before it is sent, saying how
// many words fit and what to do; retained, it is read from the store
// max-pooled; a sequence's steps do not carry the map they retain; a 413
// (the body past --max-json-body, the outputs past --request-memory) says
// which limit, about how many words fit and which setting to raise.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage, startAttnd, waitDrawn } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const words = (n) => Array.from({ length: n }, (_, i) => `w${i % 97}`).join(' ');

// settled: the page's state once it stops loading, and its status line.
async function settled(page, timeout = 60000) {
  await page.waitForFunction(() => ['ready', 'error', 'idle'].includes(document.body.dataset.state), null, { timeout });
  return page.evaluate(() => ({ state: document.body.dataset.state, status: document.getElementById('status').textContent,
    alert: document.getElementById('status').getAttribute('role') }));
}

// posts: the infer requests page sends from now on (their bodies' outputs).
function posts(page) {
  const seen = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/infer')) seen.push(JSON.parse(r.postData()).outputs.map((o) => o.name));
  });
  return seen;
}

test('a run too large for one answer (6000 words on the toy) is refused before it is sent, saying how many words fit', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  const sent = posts(page);
  await page.fill('#text', words(6000));
  await page.click('#run');
  const s = await settled(page, 20000);
  assert.equal(s.state, 'error');
  assert.equal(s.alert, 'alert');
  assert.match(s.status, /6000 words/);
  assert.match(s.status, /6000 × 6000 weights \(72,000,000/);
  assert.match(s.status, /at most 2896 words/);
  assert.match(s.status, /retain on the server/);
  assert.deepEqual(sent, [], 'nothing sent');
  assert.deepEqual(errors, []);
  await page.close();
});

test('such a run retained is read from the store max-pooled, not carried whole in the answer', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  const sent = posts(page);
  await page.fill('#text', words(3000));
  await page.check('#retain');
  await page.click('#run');
  const s = await settled(page);
  assert.equal(s.state, 'ready', s.status);
  assert.deepEqual(sent, [['y']], 'the answer carries no map');
  const r = await page.evaluate(() => ({ ...window.attnd.run, attention: null, mask: null }));
  assert.equal(r.source, 'map');
  assert.deepEqual(r.sourceShape, [3000, 3000]);
  assert.deepEqual(r.block, [6, 6]);
  assert.match(await page.evaluate(() => location.hash), new RegExp(`map=${r.mapId}`));
  assert.match(s.status, /max-pooled|retained/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a sequence\'s steps do not carry the map they retain: a 3000-word start is drawn from the store', async () => {
  const v2 = await (await fetch(`${daemon.url}/v2`)).json();
  assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  const sent = posts(page);
  await page.fill('#text', words(3000));
  await page.check('#seq-mode');
  await page.check('#causal');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.sequence && window.attnd.run.sourceShape?.[0] === 3000, null, { timeout: 60000 });
  await waitDrawn(page);
  assert.deepEqual(sent, [['y']]);
  // a max-pooled map has no single cells, however its sequence began:
  // the step view offers no way to its scores
  const why = await page.textContent('#steps [data-why="no-scores"]');
  assert.match(why, /max-pooled/);
  assert.doesNotMatch(why, /as a sequence|Run its input again/);
  await page.fill('#seq-next', 'more');
  await page.press('#seq-next', 'Enter');
  await page.waitForFunction(() => window.attnd.run.sourceShape?.[0] === 3001, null, { timeout: 60000 });
  assert.deepEqual(sent, [['y'], ['y']]);
  await page.click('#seq-end');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a sequence whose map the store cannot hold says so, naming maps-bytes', async () => {
  const v2 = await (await fetch(`${daemon.url}/v2`)).json();
  assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=one&h=0`);
  await page.fill('#text', words(6000)); // 288 MB of map, 256 MiB of store
  await page.check('#seq-mode');
  await page.click('#run');
  const s = await settled(page);
  assert.equal(s.state, 'error');
  assert.match(s.status, /kept no map/);
  assert.match(s.status, /maps-bytes/);
  assert.match(s.status, /fewer words/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a 413 for the body says which limit it passed, about how many words fit, and which setting to raise', async () => {
  const small = await startAttnd(['--max-json-body', '65536']);
  try {
    // 500 words: 160 kB of JSON, past max-json-body.
    const { page, errors } = await openPage(browser, `${small.url}/#model=toy&text=one&h=0`);
    await page.fill('#text', words(500));
    await page.click('#run');
    let s = await settled(page);
    assert.equal(s.state, 'error');
    assert.match(s.status, /max-json-body/);
    assert.match(s.status, /HTTP 413/);
    const fit = Number((/fewer words \(about (\d+) fit\)/.exec(s.status) || [])[1]);
    assert.ok(fit > 150 && fit < 300, s.status); // 160 kB: about 200
    assert.match(s.status, /--max-json-body/);
    // The same start as a sequence.
    await page.check('#seq-mode');
    await page.click('#run');
    s = await settled(page);
    assert.match(s.status, /max-json-body.*about \d+ fit.*--max-json-body/);
    assert.deepEqual(errors.filter((e) => !/status of 413/.test(e)), []);
    await page.close();
  } finally {
    await small.stop();
  }
});

test('a 413 for the outputs (request-memory) says about how many words fit', async () => {
  const small = await startAttnd(['--request-memory', '12000000']);
  try {
    // 2000 words: 32 MB of weights, past 12 MB of request memory; about
    // 1220 fit (2 x T x T x 4 bytes).
    const { page, errors } = await openPage(browser, `${small.url}/#model=toy&text=one&h=0`);
    await page.fill('#text', words(2000));
    await page.click('#run');
    const s = await settled(page);
    assert.equal(s.state, 'error');
    assert.match(s.status, /request-memory/);
    const fit = Number((/fewer words \(about (\d+) fit\)/.exec(s.status) || [])[1]);
    assert.ok(fit > 1100 && fit < 1300, s.status);
    assert.match(s.status, /--request-memory/);
    assert.deepEqual(errors.filter((e) => !/status of 413/.test(e)), []);
    await page.close();
  } finally {
    await small.stop();
  }
});

// A retained run whose maps are larger than the whole store: the 400
// said "ask for fewer tokens or heads" and no more; now about how many
// words fit, and that many do (on main, 8e4e250: no "about N" in it).
test('a retained run past the whole retained-map store says about how many words fit, and that many are kept', async () => {
  const small = await startAttnd(['--maps-bytes', '100000']);
  try {
    // 100 words on the toy with their scores: 2 heads x 100 x 100 x 4 x 2 = 160 kB
    const { page, errors } = await openPage(browser, `${small.url}/#model=toy&text=one&h=0&retain=1`);
    await page.fill('#text', words(100));
    await page.click('#run');
    let s = await settled(page);
    assert.equal(s.state, 'error');
    assert.match(s.status, /maps-bytes/);
    const fit = Number((/send at most about (\d+) words/.exec(s.status) || [])[1]);
    assert.ok(fit > 60 && fit < 100, s.status); // 100 kB of 160: about 79
    await page.fill('#text', words(fit));
    await page.click('#run');
    await page.waitForFunction((n) => window.attnd.run?.T === n && window.attnd.run.mapId, fit);
    s = await settled(page);
    assert.equal(s.state, 'ready', s.status);
    assert.deepEqual(errors.filter((e) => !/status of 400/.test(e)), []);
    await page.close();
  } finally {
    await small.stop();
  }
});
