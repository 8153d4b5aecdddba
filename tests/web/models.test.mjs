// models.test.mjs - the model picker follows the server's models without
// a reload: a model another client loads (or unloads) through the API
// shows up when the picker takes the focus, and after a run answered 404.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite, openPage, sdpaHash, WAIT } from './harness.mjs';

let daemon, browser;
browserSuite((d, b) => { daemon = d; browser = b; });

const SEED = { q: [[2, 0, 2, 0], [0, 4, 0, 2]], k: [[1, 0, 1, 0], [0, 1, 0, 0]], v: [[1, 2], [3, 0]] };

async function repo(name, what) {
  const res = await fetch(`${daemon.url}/v2/repository/models/${name}/${what}`, { method: 'POST' });
  assert.equal(res.status, 200, `${what} ${name}: ${await res.text()}`);
  if (what === 'load') // loading is in the background: until it is ready
    for (let i = 0; i < 100 && (await fetch(`${daemon.url}/v2/models/${name}/ready`)).status !== 200; i++)
      await new Promise((r) => setTimeout(r, 100));
}

const listed = (page) => page.$$eval('#model option', (os) => os.map((o) => o.value));

test('a model loaded through the API by another client is in the picker once it takes the focus', async () => {
  await repo('toy', 'unload');
  const { page, errors } = await openPage(browser, `${daemon.url}/${sdpaHash(SEED, '&h=0')}`);
  assert.ok(!(await listed(page)).includes('toy'), 'unloaded: not listed');
  await repo('toy', 'load');
  await page.focus('#model');
  await page.waitForFunction(() => [...document.querySelectorAll('#model option')].some((o) => o.value === 'toy'),
    null, { timeout: WAIT });
  assert.equal(await page.inputValue('#model'), 'sdpa', 'the selection stays');
  // and it runs, chosen from the picker
  await page.selectOption('#model', 'toy');
  await page.fill('#text', 'a b');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.run?.model === 'toy' && document.body.dataset.state === 'ready');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a run answered 404 (its model unloaded by another client) asks for the models again', async () => {
  const { page } = await openPage(browser, `${daemon.url}/#model=toy&text=a+b&h=0`);
  const asked = [];
  page.on('request', (r) => { if (r.url().endsWith('/v2/repository/index')) asked.push(r.url()); });
  await repo('toy', 'unload');
  await page.click('#run'); // the button has the focus, not the picker
  await page.waitForFunction(() => document.body.dataset.state === 'error');
  assert.match(await page.textContent('#status'), /toy/);
  for (let i = 0; i < 40 && !asked.length; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(asked.length, 1, 'the index was asked again after the 404');
  assert.equal(await page.inputValue('#model'), 'toy', 'the model shown stays selected, its error says why');
  await repo('toy', 'load');
  await page.close();
});

test('a model picked while a run is on its way: the map drawn and the link name the model it ran on', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a+b+c&h=0`);
  let go;
  const held = new Promise((r) => { go = r; });
  await page.route('**/v2/models/toy/infer', async (r) => { await held; await r.continue(); });
  await page.fill('#text', 'x y');
  await page.click('#run');
  await page.selectOption('#model', 'sdpa'); // the next Run's model; this one ran on toy
  go();
  await page.waitForFunction(() => window.attnd.run.T === 2 && document.body.dataset.state === 'ready');
  const hash = new URLSearchParams((await page.evaluate(() => location.hash)).slice(1));
  assert.equal(await page.evaluate(() => window.attnd.run.model), 'toy');
  assert.equal(hash.get('model'), 'toy', `the link: ${hash}`);
  assert.equal(hash.get('text'), 'x y');
  await page.click('#heads button >> nth=1'); // any redraw writes the link again
  assert.equal(new URLSearchParams((await page.evaluate(() => location.hash)).slice(1)).get('model'), 'toy');
  assert.deepEqual(errors, []);
  await page.close();
});
