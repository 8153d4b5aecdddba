// follow.test.mjs - follow mode on a retained map (#map=<id>&follow=1 and the
// Follow box) against a real attnd: one long poll at a time, no busy
// polling; the newest row marked; a map that goes away says so. (Following
// a sequence as a client steps it: sequence.test.mjs.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { browserSuite, openPage, startAttnd, WAIT } from './harness.mjs';
import { embed } from '../../server/web/embed.js';

let daemon, browser;
// Room for one [1, 1, 3, 3] sdpa map with its bookkeeping, not two.
browserSuite((d, b) => { daemon = d; browser = b; }, ['--maps-bytes', '700']);

async function retain(scale) {
  const t = (name, a) => ({ name, datatype: 'FP32', shape: [a.length, a[0].length], data: a.flat() });
  const q = [[1, 0], [0, 1], [1, 1]].map((r) => r.map((x) => x * scale));
  const body = { inputs: [t('q', q), t('k', [[1, 0], [0, 1], [1, 1]]), t('v', [[1], [2], [3]])], parameters: { retain: true } };
  const res = await fetch(`${daemon.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).parameters.map_id;
}

test('#map=<id>&follow=1: one waiting request, newest row marked; an evicted map says it is gone', async () => {
  const id = await retain(1);
  const waits = [];
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&follow=1&h=0`);
  page.on('request', (r) => { if (/[?&]wait=/.test(r.url())) waits.push(r.url()); });
  assert.equal(await page.isChecked('#follow'), true);
  assert.match(await page.evaluate(() => location.hash), /follow=1/);
  assert.equal(await page.getAttribute('#heatmap', 'data-newest'), '2');
  assert.match(await page.textContent('#steps h2'), /\(#2\)/);
  // Nothing grows: one request stays parked (no polling loop).
  await page.waitForTimeout(1500);
  assert.ok(waits.length <= 1, `${waits.length} wait requests in 1.5 s: ${waits.join(' ')}`);
  // The store evicts the map for a newer one: the page says so at once.
  const other = await retain(2);
  assert.notEqual(other, id);
  await page.waitForFunction((m) => new RegExp(`Map ${m} is gone`).test(document.getElementById('status').textContent),
    id, { timeout: WAIT });
  assert.equal(await page.getAttribute('#status', 'role'), 'alert');
  assert.equal(await page.isChecked('#follow'), false);
  assert.doesNotMatch(await page.evaluate(() => location.hash), /follow=1/);
  // (chromium logs the wait's 404 as a console error: the answer expected)
  assert.deepEqual(errors.filter((e) => !/status of 404/.test(e)), []);
  await page.close();
});

test('the Follow box on a retained map turns following on and off, in the link too', async () => {
  const id = await retain(3);
  const { page, errors } = await openPage(browser, `${daemon.url}/#map=${id}&h=0&q=0`);
  assert.equal(await page.isVisible('#follow-wrap'), true);
  assert.equal(await page.isChecked('#follow'), false);
  assert.equal(await page.getAttribute('#heatmap', 'data-newest'), '');
  await page.check('#follow');
  await page.waitForFunction(() => /follow=1/.test(location.hash));
  // A picked query row stays picked while following.
  assert.match(await page.textContent('#steps h2'), /\(#0\)/);
  await page.uncheck('#follow');
  await page.waitForFunction(() => !/follow=1/.test(location.hash));
  assert.deepEqual(errors, []);
  await page.close();
});

test('a run that is no retained map offers no Follow box', async () => {
  const { page, errors } = await openPage(browser, `${daemon.url}/#model=toy&text=a%20b%20c&h=0`);
  assert.equal(await page.isVisible('#follow-wrap'), false);
  assert.deepEqual(errors, []);
  await page.close();
});

// A daemon with room for sequences' maps, and a sequence on its toy model
// that this test steps over HTTP: step(words, pos0, start) -> parameters.
// key: the daemon's --api-key, sent with the test's own requests.
async function withSequence(extra, body, key = '') {
  const d = await startAttnd(key ? [...extra, '--api-key', key] : extra);
  const auth = key ? { Authorization: `Bearer ${key}` } : {};
  try {
    const v2 = await (await fetch(`${d.url}/v2`, { headers: auth })).json();
    assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
    const id = `f-${Date.now()}`;
    const step = async (ws, pos0, start = false) => {
      const r = await fetch(`${d.url}/v2/models/toy/infer`, {
        method: 'POST', headers: { 'Attnd-Sequence-Id': id, ...auth },
        body: JSON.stringify({
          inputs: [{ name: 'x', datatype: 'FP32', shape: [1, ws.length, 16], data: Array.from(embed(ws, 16, pos0)) }],
          outputs: [{ name: 'attention' }],
          parameters: { sequence_id: id, causal: true, retain: true, tokens: ws, sequence_position: pos0, ...(start ? { sequence_start: true } : {}) },
        }),
      });
      assert.equal(r.status, 200, await r.clone().text());
      return (await r.json()).parameters;
    };
    await body(d, step);
  } finally {
    await d.stop();
  }
}

test('another map opened while following: the old map growing never draws over it', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    const t3 = (q) => ({ name: q, datatype: 'FP32', shape: [2, 2], data: [1, 0, 0, 1] });
    const res = await fetch(`${d.url}/v2/models/sdpa/infer`, { method: 'POST',
      body: JSON.stringify({ inputs: ['q', 'k', 'v'].map(t3), parameters: { retain: true } }) });
    const b = (await res.json()).parameters.map_id;
    await page.click('#tab-maps');
    await page.click(`#maps button:has-text("${b}")`);
    await page.waitForFunction((m) => window.attnd.run.mapId === m && document.body.dataset.state === 'ready', b);
    // The followed map grows while its wait is still pending.
    await step(['sat'], 2);
    await page.waitForTimeout(1000);
    assert.equal(await page.evaluate(() => window.attnd.run.mapId), b, 'the map opened last is the one shown');
    assert.equal(await page.evaluate(() => window.attnd.state.map), b);
    assert.match(await page.evaluate(() => location.hash), new RegExp(`map=${b}`));
    assert.deepEqual(errors, []);
    await page.close();
  });
});

test('a Run while following: the followed map growing never draws over the run', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    await page.click('#tab-words');
    await page.fill('#text', 'one two three four');
    await page.click('#run');
    await page.waitForFunction(() => window.attnd.run.source === 'model' && document.body.dataset.state === 'ready');
    await step(['sat'], 2);
    await page.waitForTimeout(1000);
    assert.equal(await page.evaluate(() => window.attnd.run.source), 'model');
    assert.equal(await page.evaluate(() => window.attnd.run.T), 4);
    assert.equal(await page.evaluate(() => window.attnd.state.map), null);
    assert.deepEqual(errors, []);
    await page.close();
  });
});

test('a draining server answers waits at once: the page does not ask again in a busy loop', async () => {
  await withSequence(['--drain-ms', '4000'], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const { page } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    const waits = [];
    page.on('request', (r) => { if (/[?&]wait=/.test(r.url())) waits.push(Date.now()); });
    // A request whose body is still coming holds the drain open.
    const { port } = new URL(d.url);
    const sock = net.connect(Number(port), '127.0.0.1');
    await new Promise((res) => sock.once('connect', res));
    sock.write('POST /v2/models/toy/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{');
    sock.on('error', () => {});
    await page.waitForTimeout(300);
    d.signal('SIGTERM');
    await page.waitForTimeout(2000);
    const n = waits.length;
    sock.destroy();
    assert.ok(n <= 4, `${n} wait requests in 2 s of drain`);
    await page.close();
  });
});

// statusOf: the status line's text and whether it is shown as an error.
const statusOf = (page) => page.evaluate(() => {
  const s = document.getElementById('status');
  return { text: s.textContent, error: s.classList.contains('error'), role: s.getAttribute('role') };
});

test('a wait answered 503 (maps-waiters full) says so and that it tries again; the first good answer clears it', async () => {
  await withSequence(['--maps-waiters', '1'], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    // Another watcher holds the one place to wait.
    const other = new AbortController();
    const held = fetch(`${d.url}/v2/maps/${a}?wait=2`, { signal: other.signal }).catch(() => null);
    await new Promise((res) => setTimeout(res, 300));
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    await page.waitForFunction(() => /503/.test(document.getElementById('status').textContent), null, { timeout: WAIT });
    let st = await statusOf(page);
    assert.match(st.text, new RegExp(`following map ${a}`));
    assert.match(st.text, /maps-waiters/);
    assert.match(st.text, /trying again in 1 s/);
    assert.equal(st.error, true);
    assert.equal(st.role, 'alert');
    // The other watcher goes: the next wait is answered normally (nothing
    // new), and the red line goes with it, before the map grows.
    other.abort();
    await held;
    await page.waitForFunction(() => !document.getElementById('status').classList.contains('error'), null, { timeout: WAIT });
    st = await statusOf(page);
    assert.doesNotMatch(st.text, /trying again/);
    assert.match(st.text, new RegExp(`following map ${a}`));
    assert.equal(await page.evaluate(() => window.attnd.run.T), 2);
    // Following goes on: a step is drawn.
    await step(['sat'], 2);
    await page.waitForFunction(() => window.attnd.run.T === 3, null, { timeout: WAIT });
    assert.match(await page.evaluate(() => location.hash), /follow=1/);
    assert.deepEqual(errors.filter((e) => !/status of (503|404)/.test(e)), []);
    await page.close();
  });
});

test('a wait that fails to connect says it tries again; the first good answer clears the red line', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const page = await browser.newPage();
    let cut = 1;
    await page.route(/[?&]wait=/, (r) => (cut-- > 0 ? r.abort('connectionreset') : r.continue()));
    await page.goto(`${d.url}/#map=${a}&follow=1&h=0`);
    await page.waitForFunction(() => /trying again/.test(document.getElementById('status').textContent), null, { timeout: WAIT });
    assert.equal((await statusOf(page)).error, true);
    await page.waitForFunction(() => !document.getElementById('status').classList.contains('error'), null, { timeout: WAIT });
    assert.doesNotMatch((await statusOf(page)).text, /trying again/);
    await step(['sat'], 2);
    await page.waitForFunction(() => window.attnd.run.T === 3, null, { timeout: WAIT });
    await page.close();
  });
});

test('a wait answered 401: the key is asked for, the link keeps follow=1, and following resumes with the key', async () => {
  const KEY = 'follow-key';
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const page = await browser.newPage();
    await page.addInitScript((k) => sessionStorage.setItem('attnd.apiKey', k), KEY);
    // The key the tab had stops working (the daemon restarted with a new
    // one, say): the first wait is refused.
    let refuse = 1;
    await page.route(/[?&]wait=/, (r) => (refuse-- > 0
      ? r.fulfill({ status: 401, contentType: 'application/json', body: '{"error":"Authorization: missing or wrong API key"}' })
      : r.continue()));
    await page.goto(`${d.url}/#map=${a}&follow=1&h=0`);
    await page.waitForFunction(() => !document.getElementById('auth').hidden, null, { timeout: WAIT });
    const st = await statusOf(page);
    assert.match(st.text, /API key/);
    assert.equal(st.error, true);
    assert.match(await page.evaluate(() => location.hash), /follow=1/);
    await page.fill('#api-key', KEY);
    await page.click('#auth button');
    await page.waitForFunction(() => document.getElementById('auth').hidden && document.body.dataset.state === 'ready');
    assert.equal(await page.isChecked('#follow'), true);
    assert.match(await page.evaluate(() => location.hash), /follow=1/);
    await step(['sat'], 2);
    await page.waitForFunction(() => window.attnd.run.T === 3, null, { timeout: WAIT });
    assert.match(await page.evaluate(() => location.hash), /follow=1/);
    await page.close();
  }, KEY);
});

test('Follow unticked while a wait is being tried again: the red "trying again" goes, nothing is tried again', async () => {
  await withSequence(['--maps-waiters', '1'], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const other = new AbortController();
    const held = fetch(`${d.url}/v2/maps/${a}?wait=2`, { signal: other.signal }).catch(() => null);
    await new Promise((res) => setTimeout(res, 300));
    const { page } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    await page.waitForFunction(() => /trying again/.test(document.getElementById('status').textContent), null, { timeout: WAIT });
    await page.uncheck('#follow');
    const waits = [];
    page.on('request', (r) => { if (/[?&]wait=/.test(r.url())) waits.push(r.url()); });
    await page.waitForTimeout(1500);
    const st = await statusOf(page);
    assert.doesNotMatch(st.text, /trying again/);
    assert.equal(st.error, false, st.text);
    assert.match(st.text, new RegExp(`stopped following map ${a}`));
    assert.deepEqual(waits, []);
    other.abort();
    await held;
    await page.close();
  });
});

test('a wait answered by something that is not the daemon (a proxy\'s sign-in page) says what came, and stops', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const page = await browser.newPage();
    await page.route(/[?&]wait=/, (r) => r.fulfill({ status: 200, contentType: 'text/html',
      body: '<!doctype html><title>Sign in</title><p>Your session has expired</p>' }));
    await page.goto(`${d.url}/#map=${a}&follow=1&h=0`);
    await page.waitForFunction(() => /not JSON/.test(document.getElementById('status').textContent), null, { timeout: WAIT });
    const st = await statusOf(page);
    assert.match(st.text, new RegExp(`following map ${a}: .*text/html.*session has expired`));
    assert.equal(st.error, true);
    assert.equal(await page.isChecked('#follow'), false);
    await page.close();
  });
});

test('following, a picked query row and the keyboard cursor stay where the user put them as the map grows', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    assert.match(await page.textContent('#steps h2'), /\(#1\)/); // the newest row
    await page.focus('#heatmap');
    await page.keyboard.press('ArrowUp'); // (0, 0)
    await page.keyboard.press('Enter'); // query 0 picked
    await page.keyboard.press('ArrowRight'); // (0, 1)
    assert.match(await page.textContent('#steps h2'), /\(#0\)/);
    await step(['sat'], 2);
    await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready', null, { timeout: WAIT });
    assert.equal(await page.getAttribute('#heatmap', 'data-newest'), '2');
    assert.equal(await page.evaluate(() => window.attnd.state.q), 0);
    assert.match(await page.textContent('#steps h2'), /\(#0\)/);
    assert.match(await page.evaluate(() => location.hash), /[#&]q=0(&|$)/);
    assert.match(await page.textContent('#readout [data-field="query"]'), /\(#0\)/);
    assert.match(await page.textContent('#readout [data-field="key"]'), /\(#1\)/);
    // The cursor goes on from where it was.
    await page.keyboard.press('ArrowDown');
    assert.match(await page.textContent('#readout [data-field="query"]'), /\(#1\)/);
    assert.deepEqual(errors, []);
    await page.close();
  });
});

// The wait's answer says how many rows the map had then; the page reads
// the map after it, and a step that lands in between is in what it draws.
// The status line counted the wait's rows ("following map …: 3 rows"
// beside T=4) until the next step: it counts what is drawn.
test('a step landing between the wait\'s answer and the map\'s reading: the status line counts the rows drawn', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    let hold = false, stepped = false;
    // The first read of the map after the wait answered: one more step first.
    await page.route((u) => u.pathname.endsWith(`/v2/maps/${a}`) && !u.searchParams.has('wait'), async (route) => {
      if (hold && !stepped) { stepped = true; await step(['on'], 3); }
      await route.continue();
    });
    hold = true;
    await step(['sat'], 2);
    await page.waitForFunction(() => window.attnd.run.T === 4 && document.body.dataset.state === 'ready', null, { timeout: WAIT });
    assert.ok(stepped, 'the map was read after the wait answered');
    const status = await page.textContent('#status');
    assert.match(status, /T=4, S=4/);
    assert.match(status, new RegExp(`following map ${a}: 4 rows`), status);
    assert.deepEqual(errors, []);
    await page.close();
  });
});

// The input panel names the followed map's model and shape: the shape it
// had when opened stayed ("shape [1, 2, 2, 2]" beside T=3) as the map
// grew or was stepped back.
test('following, the input panel\'s shape of the map is the one drawn, as it grows and as it is stepped back', async () => {
  await withSequence([], async (d, step) => {
    const a = (await step(['the', 'cat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    assert.match(await page.textContent('#model-info'), new RegExp(`Map ${a}: model toy, shape \\[1, 2, 2, 2\\]`));
    await step(['sat', 'on'], 2);
    await page.waitForFunction(() => window.attnd.run.T === 4 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
    assert.match(await page.textContent('#model-info'), new RegExp(`Map ${a}: model toy, shape \\[1, 2, 4, 4\\]`));
    await step(['dog'], 1); // back to 2 tokens
    await page.waitForFunction(() => window.attnd.run.T === 2 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
    assert.match(await page.textContent('#model-info'), new RegExp(`Map ${a}: model toy, shape \\[1, 2, 2, 2\\]`));
    assert.deepEqual(await page.evaluate(() => window.attnd.run.tokens), ['the', 'dog']);
    assert.deepEqual(errors, []);
    await page.close();
  });
});

// A wait that times out with nothing new asks whether a live sequence
// writes the map. It asked once: a sequence live then, which ended (or
// idled out, or went with its model) after, was never said to be gone,
// and the page kept saying "following map …: 3 rows" as if it could grow.
test('following, a sequence that ends after the map went quiet is said to be no longer live', async () => {
  await withSequence(['--maps-wait-ms', '300'], async (d, step) => {
    const a = (await step(['the', 'cat', 'sat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    const asked = []; // the page's GET /v2/sequences[/{id}], answered
    page.on('requestfinished', (q) => { if (/\/v2\/sequences(\/[^/]+)?$/.test(new URL(q.url()).pathname)) asked.push(q); });
    // A quiet answer, and the page's question while the sequence is live.
    for (let k = 0; k < 1500 && !asked.length; k++) await new Promise((res) => setTimeout(res, 20)); // hang guard 30 s
    assert.ok(asked.length, 'the page asked which sequence writes the map');
    assert.doesNotMatch(await page.textContent('#status'), /live/);
    const { sequences } = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.equal(sequences.length, 1);
    assert.equal((await fetch(`${d.url}/v2/sequences/${encodeURIComponent(sequences[0].id)}`, { method: 'DELETE' })).status, 200);
    // The next quiet answers: the page asks again and says so.
    const n = asked.length;
    for (let k = 0; k < 1500 && asked.length < n + 2; k++) await new Promise((res) => setTimeout(res, 20));
    await page.waitForFunction(() => /no longer live/.test(document.getElementById('status').textContent), null, { timeout: WAIT })
      .catch(() => {});
    const status = await page.textContent('#status');
    assert.match(status, new RegExp(`following map ${a}: sequence ${sequences[0].id}, which wrote it, is no longer live`), status);
    assert.equal(await page.isChecked('#follow'), true, 'still following, as the status line says');
    assert.match(status, /still watching/);
    assert.deepEqual(errors.filter((e) => !/status of 404/.test(e)), []); // (GET /v2/sequences/{id}: not live)
    await page.close();
  });
});

// The page's question whether a sequence still writes the map, answered
// 503 once (a replica's drain, a proxy's blip): it was taken as "the
// daemon lists no sequences, cannot tell", and the page never asked
// again, so a sequence that went after was never said to be gone.
test('following, a question about the map\'s sequence that fails once is asked again', async () => {
  await withSequence(['--maps-wait-ms', '300'], async (d, step) => {
    const a = (await step(['the', 'cat', 'sat'], 0, true)).map_id;
    const { page, errors } = await openPage(browser, `${d.url}/#map=${a}&follow=1&h=0`);
    const asked = [];
    page.on('requestfinished', (q) => { if (/\/v2\/sequences(\/[^/]+)?$/.test(new URL(q.url()).pathname)) asked.push(q); });
    for (let k = 0; k < 1500 && !asked.length; k++) await new Promise((res) => setTimeout(res, 20)); // hang guard 30 s
    assert.ok(asked.length, 'the page asked which sequence writes the map');
    let failed = 0;
    await page.route(/\/v2\/sequences/, (r) => {
      if (r.request().method() !== 'GET' || failed) return r.continue();
      failed++;
      return r.fulfill({ status: 503, contentType: 'application/json', headers: { 'Retry-After': '1' }, body: '{"error":"draining"}' });
    });
    for (let k = 0; k < 1500 && !failed; k++) await new Promise((res) => setTimeout(res, 20));
    assert.equal(failed, 1, 'the next question was answered 503');
    const { sequences } = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.equal((await fetch(`${d.url}/v2/sequences/${encodeURIComponent(sequences[0].id)}`, { method: 'DELETE' })).status, 200);
    await page.waitForFunction(() => /no longer live/.test(document.getElementById('status').textContent), null, { timeout: 30000 })
      .catch(() => {});
    const status = await page.textContent('#status');
    assert.match(status, new RegExp(`following map ${a}: sequence ${sequences[0].id}, which wrote it, is no longer live`), status);
    assert.deepEqual(errors.filter((e) => !/status of (503|404)/.test(e)), []);
    await page.close();
  });
});
