// auth.test.mjs - a daemon started with --api-key: the page asks for the
// key once, sends it as a bearer token, and retained maps are not readable
// without it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, sdpaHash, waitDrawn, WAIT } from './harness.mjs';

const KEY = 's3cret-key';
let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; }, ['--api-key', KEY]);

const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]] };

test('the page asks for the API key on 401, then runs; a reload keeps it', async () => {
  const page = await browser.newPage();
  await page.goto(daemon.url + sdpaHash(SEED, '&h=0'));
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  assert.equal(await page.isVisible('#auth'), true);
  assert.match(await page.textContent('#status'), /API key.*HTTP 401/);
  await page.fill('#api-key', KEY);
  await page.click('#auth button');
  await waitDrawn(page);
  assert.equal(await page.isVisible('#auth'), false);
  assert.equal(await page.evaluate(() => window.attnd.run.attention[0].toFixed(6)), '0.880797');
  await page.reload();
  await waitDrawn(page);
  assert.equal(await page.isVisible('#auth'), false);
  await page.close();
});

test('retained maps need the key too', async () => {
  const body = { inputs: ['q', 'k', 'v'].map((n) => ({ name: n, datatype: 'FP32', shape: [2, n === 'v' ? 2 : 4], data: SEED[n].flat() })), parameters: { retain: true } };
  const auth = { Authorization: `Bearer ${KEY}` };
  assert.equal((await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) })).status, 401);
  const r = await (await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', headers: auth, body: JSON.stringify(body) })).json();
  const id = r.parameters.map_id;
  for (const p of ['/v2/maps', `/v2/maps/${id}`, `/v2/maps/${id}/attention`]) {
    assert.equal((await fetch(daemon.url + p)).status, 401, p);
    assert.equal((await fetch(daemon.url + p, { headers: auth })).status, 200, p);
  }
  // The page itself loads without a key (it holds no data).
  assert.equal((await fetch(`${daemon.url}/`)).status, 200);
});

// keyGoesStale: the page's next request matching re is refused with 401,
// as when the daemon restarted with another key while the tab was open.
async function keyGoesStale(page, re) {
  let refuse = 1;
  await page.route(re, (r) => (refuse-- > 0
    ? r.fulfill({ status: 401, contentType: 'application/json', body: '{"error":"Authorization: missing or wrong API key"}' })
    : r.continue()));
}

test('a Run refused for its key: with the key given, the words typed run, not the link\'s', async () => {
  const page = await browser.newPage();
  await page.addInitScript((k) => sessionStorage.setItem('attnd.apiKey', k), KEY);
  await page.goto(`${daemon.url}/#model=toy&text=a%20b%20c&h=0`);
  await waitDrawn(page);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 3);
  await keyGoesStale(page, /\/infer$/);
  await page.fill('#text', 'one two three four five');
  await page.click('#run');
  await page.waitForFunction(() => !document.getElementById('auth').hidden);
  assert.match(await page.textContent('#status'), /API key/);
  await page.fill('#api-key', KEY);
  await page.click('#auth button');
  await page.waitForFunction(() => document.getElementById('auth').hidden && document.body.dataset.state === 'ready');
  assert.equal(await page.inputValue('#text'), 'one two three four five');
  assert.equal(await page.evaluate(() => window.attnd.run.T), 5);
  // The focus is back on Run, where the keyboard user was.
  assert.equal(await page.evaluate(() => document.activeElement.id), 'run');
  assert.match(await page.evaluate(() => location.hash), /text=one\+two\+three\+four\+five/);
  await page.close();
});

test('a sequence Step refused for its key: with the key given, the step is sent, not the link opened again', async () => {
  const page = await browser.newPage();
  await page.addInitScript((k) => sessionStorage.setItem('attnd.apiKey', k), KEY);
  await page.goto(`${daemon.url}/#model=toy&text=the%20cat&h=0`);
  await waitDrawn(page);
  const v2 = await (await fetch(`${daemon.url}/v2`, { headers: { Authorization: `Bearer ${KEY}` } })).json();
  assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
  await page.check('#seq-mode');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.sequence && window.attnd.run.T === 2 && document.body.dataset.state === 'ready');
  await keyGoesStale(page, /\/infer$/);
  await page.fill('#seq-next', 'sat');
  await page.press('#seq-next', 'Enter');
  await page.waitForFunction(() => !document.getElementById('auth').hidden);
  await page.fill('#api-key', KEY);
  await page.click('#auth button');
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready',
    null, { timeout: WAIT });
  assert.equal(await page.evaluate(() => window.attnd.sequence.words.join(' ')), 'the cat sat');
  assert.equal(await page.inputValue('#seq-next'), '');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'seq-next');
  await page.close();
});

test('a key that cannot go in a header (not ASCII) is refused at the form, not sent as "no answer from the server"', async () => {
  const page = await browser.newPage();
  await page.goto(daemon.url + sdpaHash(SEED, '&h=0'));
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  await page.fill('#api-key', 'clé-secrète');
  await page.click('#auth button');
  await page.waitForTimeout(300);
  assert.equal(await page.isVisible('#auth'), true);
  const text = await page.textContent('#status');
  assert.match(text, /API key: .*ASCII/);
  assert.doesNotMatch(text, /no answer from the server/);
  // The right key then works.
  await page.fill('#api-key', KEY);
  await page.click('#auth button');
  await waitDrawn(page);
  await page.close();
});
