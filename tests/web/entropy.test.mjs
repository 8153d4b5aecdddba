// entropy.test.mjs - the "row entropy" column beside the focused map
// (README "The visualiser"): each query row's entropy in nats, the
// server's what=entropy of the retained map (not worked out in the page),
// for the head shown or the mean of the heads', asked only when the box
// is ticked, and asked again when a sequence's map grows. On main
// (7fd8e29) the page had no such box or column.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ENTROPY_H1, ENTROPY_SPEC, browserSuite, openPage, sdpaHash } from './harness.mjs';
import { runSequence } from './seqpage.mjs';

let daemon, browser;
browserSuite(async (d, b) => {
  daemon = d;
  browser = b;
  const v2 = await (await fetch(`${daemon.url}/v2`)).json();
  assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
});

// serverEntropy: the server's what=entropy of map id, item b, head h, as
// the strings of its float32 values (what the column's data-values holds).
async function serverEntropy(id, h, b = 0) {
  const r = await fetch(`${daemon.url}/v2/maps/${id}/attention?b=${b}&h=${h}&what=entropy&format=f32`);
  assert.equal(r.status, 200);
  return { version: r.headers.get('map-version'), values: Array.from(new Float32Array(await r.arrayBuffer()), String) };
}
const shown = async (page) => (await page.getAttribute('#entropy', 'data-values')).split(',').filter(Boolean);
const entropyAsks = (asked) => asked.filter((u) => /what=entropy/.test(u));

const SPEC = ENTROPY_SPEC, H1 = ENTROPY_H1;

test('row entropy of a retained sdpa map: the server\'s what=entropy, a one-hot row 0, a uniform row ln S, drawn as bars to ln S', async () => {
  const asked = [];
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  page.on('request', (r) => asked.push(r.url()));
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${daemon.url}/${sdpaHash(SPEC, '&causal=1&retain=1&ent=1')}`);
  await page.waitForFunction(() => document.getElementById('entropy').dataset.values);
  const id = await page.evaluate(() => window.attnd.run.mapId);
  assert.match(id, /^m\d+-[0-9a-f]{6}$/);
  assert.equal(await page.isChecked('#entropy-toggle'), true);
  const server = await serverEntropy(id, 0);
  const vals = await shown(page);
  assert.deepEqual(vals, server.values, 'the column shows the server\'s values');
  // independent of attnd: the rows worked out by hand
  assert.equal(Number(vals[0]), 0, 'a one-hot row: 0 nats');
  assert.ok(Math.abs(Number(vals[1]) - H1) < 1e-6, `row 1: ${vals[1]}, by hand ${H1}`);
  assert.ok(Math.abs(Number(vals[2]) - Math.log(3)) < 1e-6, `row 2 (uniform): ${vals[2]}, ln 3 = ${Math.log(3)}`);
  assert.equal(entropyAsks(asked).length, 1, 'asked once');
  // the legend says the scale: 0 to ln S
  assert.match(await page.textContent('#entropy-key'), /head 0's\): 0 \(one key\) to ln S = ln 3 = 1\.0986 nats/);
  // the bars: row 2's reaches the scale's end (ln S), row 0 has none
  const px = await page.evaluate(() => {
    const cv = document.getElementById('entropy'), r = cv.getBoundingClientRect();
    const at = (i, x) => {
      const y = Math.floor(window.attnd.cellCenter(i, 0).pageY - r.top);
      return Array.from(cv.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3));
    };
    return { row0: at(0, 20), row2near: at(2, 20), row2end: at(2, 56), row1mid: at(1, 40) };
  });
  const bar = [124, 196, 255];
  assert.deepEqual(px.row2near, bar, JSON.stringify(px));
  assert.deepEqual(px.row2end, bar, JSON.stringify(px));
  assert.notDeepEqual(px.row0, bar, JSON.stringify(px));
  assert.notDeepEqual(px.row1mid, bar, `row 1's bar is ${(H1 / Math.log(3)).toFixed(2)} of the scale: ${JSON.stringify(px)}`);
  // the readout names the hovered row's entropy
  const c = await page.evaluate(() => window.attnd.cellCenter(2, 1));
  await page.mouse.move(c.pageX, c.pageY);
  await page.waitForSelector('#readout dd[data-field=entropy]');
  assert.match(await page.textContent('#readout dd[data-field=entropy]'), /^1\.098612 nats \(uniform: ln S = 1\.098612\)$/);
  // the link keeps the box
  assert.match(await page.evaluate(() => location.hash), /&ent=1/);
  // unticked: the column goes, and nothing more is asked, not even for
  // the next map (a Run: a new retained map, which a ticked box asks
  // for); counted once the page is settled (the run drawn, the network
  // idle), so a request fired later is caught too
  await page.uncheck('#entropy-toggle');
  assert.equal(await page.isHidden('#entropy'), true);
  await page.click('#run');
  await page.waitForFunction((old) => window.attnd.run.mapId && window.attnd.run.mapId !== old &&
    document.body.dataset.state === 'ready', id);
  await page.waitForLoadState('networkidle');
  assert.equal(await page.isHidden('#entropy'), true);
  assert.equal(entropyAsks(asked).length, 1, entropyAsks(asked).join('\n'));
  assert.deepEqual(errors, []);
  await page.close();
});

test('the mean over heads shows the server\'s h=mean (the mean of the heads\' entropies); a run not retained asks nothing and says why', async () => {
  const asked = [];
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=the%20cat%20sat%20on%20the%20mat&causal=0&retain=1&h=mean&ent=1`);
  page.on('request', (r) => asked.push(r.url()));
  await page.waitForFunction(() => document.getElementById('entropy').dataset.values);
  const id = await page.evaluate(() => window.attnd.run.mapId);
  const mean = await serverEntropy(id, 'mean');
  assert.deepEqual(await shown(page), mean.values);
  // the server's mean is the mean of its heads' (a consistency check of the route, not of the page)
  const [h0, h1] = [await serverEntropy(id, 0), await serverEntropy(id, 1)];
  mean.values.forEach((m, i) => assert.ok(Math.abs(Number(m) - (Number(h0.values[i]) + Number(h1.values[i])) / 2) < 1e-6));
  assert.match(await page.textContent('#entropy-key'), /the mean of the heads' entropies/);
  // head 1: its own
  await page.click('#heads button[data-head="1"]');
  await page.waitForFunction((v) => document.getElementById('entropy').dataset.values === v, h1.values.join(','));
  // not retained: no map on the server, nothing asked
  const before = entropyAsks(asked).length;
  await page.uncheck('#retain');
  await page.click('#run');
  await page.waitForFunction(() => !window.attnd.run.mapId && document.body.dataset.state === 'ready');
  assert.match(await page.textContent('#entropy-key'), /retain on the server/);
  assert.equal(await page.getAttribute('#entropy', 'data-values'), '');
  assert.equal(entropyAsks(asked).length, before);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a sequence\'s row entropy is asked again after a Step (its map\'s version grew): one request more, the server\'s values for the new version', async () => {
  const { page, errors } = await runSequence(browser, daemon.url);
  const { mapId } = await page.evaluate(() => window.attnd.sequence);
  const asked = [];
  page.on('request', (r) => { const u = new URL(r.url()); asked.push(`${r.method()} ${u.pathname}${u.search}`); });
  await page.check('#entropy-toggle');
  await page.waitForFunction(() => document.getElementById('entropy').dataset.values.split(',').length === 2);
  const v0 = await serverEntropy(mapId, 1);
  assert.equal(v0.version, '0');
  assert.deepEqual(await shown(page), v0.values);
  assert.equal(Number(v0.values[0]), 0, 'a causal first row sees one key: 0 nats');
  asked.length = 0;
  await page.fill('#seq-next', 'sat');
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.getElementById('entropy').dataset.values.split(',').length === 3);
  const v1 = await serverEntropy(mapId, 1);
  assert.equal(v1.version, '1');
  assert.deepEqual(await shown(page), v1.values);
  assert.deepEqual(v1.values.slice(0, 2), v0.values, 'the first rows keep theirs');
  // the Step's 5 requests, then the entropy of the new version
  const m = `/v2/maps/${mapId}`;
  assert.deepEqual(asked, [
    'POST /v2/models/toy/infer',
    `GET ${m}`,
    `GET ${m}/attention?b=all&h=all&what=attention&format=f32`,
    `GET ${m}/attention?b=all&h=all&what=mask&format=f32`,
    `GET ${m}/attention?b=all&h=all&what=scores&format=f32`,
    `GET ${m}/attention?b=0&h=1&what=entropy&format=f32`,
  ]);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a failed entropy answer (503 "retry shortly") is asked again when the box is unticked and ticked', async () => {
  // before: the failure was kept under the map's key, so untick/tick
  // showed the same note and never asked again
  const asked = [];
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  let first = true;
  await page.route(/what=entropy/, (route) => {
    asked.push(route.request().url());
    if (!first) return route.continue();
    first = false;
    return route.fulfill({ status: 503, contentType: 'application/json', headers: { 'Retry-After': '1' },
      body: JSON.stringify({ error: 'server: the memory for decoded requests and unsent answers is in use; retry shortly' }) });
  });
  await page.goto(`${daemon.url}/${sdpaHash(SPEC, '&causal=1&retain=1&ent=1')}`);
  await page.waitForFunction(() => /retry shortly/.test(document.getElementById('entropy-key').textContent));
  assert.equal(await page.getAttribute('#entropy', 'data-values'), '');
  assert.equal(asked.length, 1);
  await page.uncheck('#entropy-toggle');
  await page.check('#entropy-toggle');
  await page.waitForFunction(() => document.getElementById('entropy').dataset.values);
  const id = await page.evaluate(() => window.attnd.run.mapId);
  assert.deepEqual(await shown(page), (await serverEntropy(id, 0)).values);
  assert.doesNotMatch(await page.textContent('#entropy-key'), /retry shortly/);
  assert.equal(asked.length, 2);
  assert.deepEqual(errors, []);
  await page.close();
});
