// proxy.test.mjs - the page behind several replicas: served through the
// Kubernetes Ingress's session door (deploy/k8s/ingress.yaml: /session
// stripped, hashed on X-Attnd-Session), played here by a small node proxy
// in front of the real attnd. The page must send every API request through
// the door it came in by (relative to where it was served from) with one
// X-Attnd-Session value per tab, and Attnd-Sequence-Id with its sequence's
// steps, its map's fetches and its end. An API request outside /session
// answers 404 here, as the replica that does not hold the map would. The
// page's own files come through the door too: this proxy forwards only its
// prefixes (/session, and /tools/attnd for a page mounted under any path),
// as a proxy in front of other applications does.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { browserSuite, openPage, retainAndReopen, waitDrawn } from './harness.mjs';
import { embed } from '../../server/web/embed.js';

let daemon, browser, proxy, base;
const seen = []; // { method, path, session, seq, body } of every request

// door: the prefixes' rewrite (/session/x -> /x) onto the daemon; a
// prefix without its slash answers 301 to it with the slash, as nginx's
// `location /session/` does; any other path, the page's own files at
// /web/... too, answers 404 (another application, a replica that never
// saw the map).
const PREFIXES = ['/session', '/tools/attnd'];
function door(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    seen.push({ method: req.method, path: req.url, session: req.headers['x-attnd-session'],
      seq: req.headers['attnd-sequence-id'], body: body.toString() });
    const pre = PREFIXES.find((p) => req.url === p || req.url.startsWith(`${p}/`) || req.url.startsWith(`${p}?`));
    const rest = pre && req.url.slice(pre.length);
    if (pre && !rest.startsWith('/')) {
      res.writeHead(301, { Location: `${pre}/${rest}` });
      res.end();
      return;
    }
    if (!pre) {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: `proxy: ${req.url} is not under ${PREFIXES.join(' or ')}: another application` }));
      return;
    }
    const u = new URL(daemon.url);
    const up = http.request({ host: u.hostname, port: u.port, method: req.method,
      path: rest, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
    up.end(body);
  });
}

browserSuite(async (d, b) => {
  daemon = d;
  browser = b;
  const v2 = await (await fetch(`${daemon.url}/v2`)).json();
  assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
  proxy = http.createServer(door);
  await new Promise((res) => proxy.listen(0, '127.0.0.1', res));
  base = `http://127.0.0.1:${proxy.address().port}`;
});
after(() => { if (proxy) proxy.close(); });

const api = (r) => r.path.includes('/v2/') || /\/v2$/.test(r.path);

test('through the session door: a run, a retained map and a sequence, every request with its headers', async () => {
  seen.length = 0;
  const { page, errors } = await openPage(browser, `${base}/session/#model=toy&text=the%20cat%20sat&h=1`);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 3);
  // A retained map, opened from the list.
  const id = await retainAndReopen(page);
  let seqId = null, seqMap = null;
  // a sequence: started, stepped, ended: its map grows
  await page.click('#tab-words');
  await page.check('#seq-mode');
  await page.check('#causal');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.sequence && window.attnd.run.T === 3);
  await page.fill('#seq-next', 'down');
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 4);
  await waitDrawn(page);
  ({ id: seqId, mapId: seqMap } = await page.evaluate(() => window.attnd.sequence));
  assert.match(await page.evaluate(() => location.hash), new RegExp(`map=${seqMap}&seq=${seqId}&`));
  await page.click('#seq-end');
  await page.waitForFunction(() => /ended/.test(document.getElementById('seq-info').textContent));
  assert.deepEqual(errors, []);

  const calls = seen.filter(api);
  assert.ok(calls.length >= 8, `only ${calls.length} API requests`);
  assert.deepEqual(seen.filter((r) => !r.path.startsWith('/session/')).map((r) => `${r.method} ${r.path}`), [],
    'requests (the page\'s own files too) outside the door the page came in by');
  const outside = calls.filter((r) => !r.path.startsWith('/session/'));
  assert.deepEqual(outside.map((r) => `${r.method} ${r.path}`), [], 'API requests outside the door the page came in by');
  const session = calls[0].session;
  assert.match(String(session), /^[0-9a-f]{32}$/);
  const other = calls.filter((r) => r.session !== session);
  assert.deepEqual(other.map((r) => `${r.method} ${r.path} ${r.session}`), [], `requests without session ${session}`);
  const about = calls.filter((r) => r.body.includes(`"sequence_id":"${seqId}"`) || r.path.includes(`/maps/${seqMap}`) ||
    r.path.includes(`/sequences/${seqId}`));
  assert.ok(about.filter((r) => r.method === 'POST').length >= 2, 'the steps went by');
  assert.ok(about.some((r) => r.path.includes(`/maps/${seqMap}/attention`)), 'the map was read');
  assert.ok(about.some((r) => r.method === 'DELETE'), 'the end went by');
  const bare = about.filter((r) => r.seq !== seqId);
  assert.deepEqual(bare.map((r) => `${r.method} ${r.path} ${r.seq}`), [], `requests about sequence ${seqId} without its header`);
  await page.close();
});

test('two tabs send two sessions; the page at /session asks the API at /session/, at /web/index.html goes to / and asks it there', async () => {
  seen.length = 0;
  const a = await openPage(browser, `${base}/session/#model=toy&text=one%20two`);
  const b = await openPage(browser, `${base}/session#model=toy&text=one%20two`); // (no slash)
  const sessions = new Set(seen.filter(api).map((r) => r.session));
  assert.equal(sessions.size, 2, `sessions: ${[...sessions]}`);
  assert.deepEqual(seen.filter((r) => api(r) && !r.path.startsWith('/session/')).map((r) => r.path), []);
  await a.page.reload();
  await waitDrawn(a.page);
  assert.equal(new Set(seen.filter(api).map((r) => r.session)).size, 2, 'a reload keeps its tab\'s session');
  assert.deepEqual(seen.filter((r) => !/^\/session(\/|$)/.test(r.path)).map((r) => r.path), []);
  const w = await openPage(browser, `${daemon.url}/web/index.html#model=toy&text=one%20two`);
  assert.equal(await w.page.evaluate(() => window.attnd.run.T), 2);
  assert.equal(w.page.url(), `${daemon.url}/#model=toy&text=one+two&causal=0&h=0`);
  for (const p of [a, b, w]) { assert.deepEqual(p.errors, []); await p.page.close(); }
});

test('mounted under any prefix (/tools/attnd/), the page takes its files and the API through it; its /web/index.html leads there', async () => {
  seen.length = 0;
  const { page, errors } = await openPage(browser, `${base}/tools/attnd/#model=toy&text=the%20cat%20sat`);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 3);
  const paths = seen.map((r) => r.path);
  for (const f of ['style.css', 'app.js', 'api.js', 'heatmap.js', 'live.js'])
    assert.ok(paths.includes(`/tools/attnd/web/${f}`), `${f} not asked through the prefix: ${paths}`);
  assert.deepEqual(paths.filter((p) => !p.startsWith('/tools/attnd/')), [], 'requests outside the prefix');
  assert.ok(seen.filter(api).length >= 2);
  await page.close();
  for (const old of ['web/index.html']) {
    seen.length = 0;
    const o = await openPage(browser, `${base}/tools/attnd/${old}#model=toy&text=one%20two`);
    assert.equal(await o.page.evaluate(() => window.attnd.run.T), 2, old);
    assert.match(o.page.url(), /^http:\/\/127\.0\.0\.1:\d+\/tools\/attnd\/#model=toy&text=one/, old);
    assert.deepEqual(seen.map((r) => r.path).filter((p) => !p.startsWith('/tools/attnd/')), [], old);
    assert.deepEqual(o.errors, [], old);
    await o.page.close();
  }
  assert.deepEqual(errors, []);
});

// step: one step of sequence id on the toy model (d_model 16) straight to
// the daemon, as another client would; its answer's parameters.
async function step(id, ws, pos0, start) {
  const body = {
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, ws.length, 16], data: Array.from(embed(ws, 16, pos0)) }],
    outputs: [{ name: 'attention' }],
    parameters: { sequence_id: id, causal: true, retain: true, tokens: ws, sequence_position: pos0, ...(start ? { sequence_start: true } : {}) },
  };
  const r = await fetch(`${daemon.url}/v2/models/toy/infer`, {
    method: 'POST', body: JSON.stringify(body), headers: { 'Attnd-Sequence-Id': id },
  });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j.parameters;
}

test('a link that follows a sequence\'s map (seq=) sends its Attnd-Sequence-Id with every fetch of the map', async () => {
  const id = 'other-client-7';
  const p = await step(id, ['the', 'cat'], 0, true);
  seen.length = 0;
  const { page, errors } = await openPage(browser, `${base}/session/#map=${p.map_id}&seq=${id}&follow=1`);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 2);
  await step(id, ['sat'], 2);
  await page.waitForFunction(() => window.attnd.run.T === 3);
  await waitDrawn(page);
  assert.match(await page.evaluate(() => location.hash), new RegExp(`seq=${id}`));
  const about = seen.filter((r) => r.path.includes(`/maps/${p.map_id}`));
  assert.ok(about.some((r) => /[?&]wait=2/.test(r.path)), 'no wait for the map to grow');
  assert.deepEqual(about.filter((r) => r.seq !== id).map((r) => `${r.method} ${r.path} ${r.seq}`), []);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a link whose seq= is no sequence id (\'.\', \'..\': the server refuses them) is ignored: the map loads, no fetch carries it', async () => {
  const p = await step('other-client-8', ['the', 'cat'], 0, true);
  for (const bad of ['.', '..']) {
    seen.length = 0;
    const { page, errors } = await openPage(browser, `${base}/session/#map=${p.map_id}&seq=${bad}`);
    assert.equal(await page.evaluate(() => window.attnd.run.T), 2, bad);
    await waitDrawn(page);
    const about = seen.filter((r) => r.path.includes(`/maps/${p.map_id}`));
    assert.ok(about.length > 0, `${bad}: the map was read`);
    assert.deepEqual(seen.filter((r) => r.seq !== undefined).map((r) => `${r.method} ${r.path} ${r.seq}`), [], bad);
    assert.deepEqual(errors, [], bad);
    await page.close();
  }
});
