// proxyerr.test.mjs - the page behind a proxy that answers for attnd: a
// small node proxy in front of the real daemon passes everything through
// except the paths a test breaks, which it answers as nginx does when its
// upstream is down or slow (502/503/504, an HTML page). attnd answers every
// error as JSON; the page must say what came instead of attnd's answer
// (status, content type, the page's text without its tags) and that the
// proxy answered, not attnd: not a bare "HTTP 502".
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { browserSuite, openPage, WAIT } from './harness.mjs';

let daemon, browser, proxy, base;
let broken = null; // { path: RegExp, status, body? } answered by the proxy itself

const NGINX = {
  502: 'Bad Gateway', 503: 'Service Temporarily Unavailable', 504: 'Gateway Time-out',
  431: 'Request Header Fields Too Large',
};
const page502 = (status) => `<html>\r\n<head><title>${status} ${NGINX[status]}</title></head>\r\n<body>\r\n` +
  `<center><h1>${status} ${NGINX[status]}</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n`;

function door(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (broken && broken.path.test(req.url)) {
      res.writeHead(broken.status, { 'Content-Type': 'text/html', Server: 'nginx/1.24.0' });
      res.end(broken.body || page502(broken.status));
      return;
    }
    const u = new URL(daemon.url);
    const up = http.request({ host: u.hostname, port: u.port, method: req.method,
      path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
    up.end(Buffer.concat(chunks));
  });
}

browserSuite(async (d, b) => {
  daemon = d;
  browser = b;
  proxy = http.createServer(door);
  await new Promise((res) => proxy.listen(0, '127.0.0.1', res));
  base = `http://127.0.0.1:${proxy.address().port}`;
});
after(() => { if (proxy) proxy.close(); });

// said: the checks on a message about the proxy's status page.
function said(text, status, path) {
  assert.match(text, new RegExp(`HTTP ${status}, text/html`), text);
  assert.match(text, new RegExp(`“${status} ${NGINX[status]} ${status} ${NGINX[status]}`), text); // its text
  assert.doesNotMatch(text, /<|>/, text); // its tags stripped
  assert.match(text, /proxy between this page and attnd answered, not attnd/, text);
  assert.ok(text.includes(path), text);
}

test('a Run answered by the proxy (502, an nginx HTML page) says so, not only "HTTP 502"', async () => {
  const { page } = await openPage(browser, `${base}/#model=toy&text=a%20b&h=0`);
  broken = { path: /\/infer$/, status: 502 };
  try {
    await page.click('#run');
    await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  } finally { broken = null; }
  const text = await page.textContent('#status');
  said(text, 502, '/v2/models/toy/infer');
  assert.equal(await page.getAttribute('#status', 'role'), 'alert');
  await page.close();
});

test('a model list answered by the proxy (503) says what came', async () => {
  broken = { path: /^\/v2\/repository\/index$/, status: 503 };
  let page;
  try {
    page = await browser.newPage();
    await page.goto(`${base}/`);
    await page.waitForFunction(() => document.body.dataset.state === 'idle', null, { timeout: WAIT });
  } finally { broken = null; }
  const text = await page.textContent('#status');
  assert.match(text, /could not list its models/);
  said(text, 503, '/v2/repository/index');
  await page.close();
});

test('a model\'s metadata answered by the proxy (504) says what came', async () => {
  broken = { path: /^\/v2\/models\/toy$/, status: 504 };
  let page;
  try {
    page = await browser.newPage();
    await page.goto(`${base}/#model=toy&text=a%20b&h=0`);
    await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  } finally { broken = null; }
  said(await page.textContent('#status'), 504, '/v2/models/toy');
  await page.close();
});

test('a sequence step answered by the proxy (502) says what came', async () => {
  const { page } = await openPage(browser, `${base}/#model=toy&text=a%20b&h=0`);
  broken = { path: /\/infer$/, status: 502 };
  let msg;
  try {
    msg = await page.evaluate(async () => {
      const api = await import('./web/api.js');
      const meta = await api.modelMeta('toy');
      try { await api.seqStep(meta, 'proxyerr-1', ['a', 'b'], 0, { start: true }); return 'no error'; } catch (e) {
        return `${e.status} ${e.message}`;
      }
    });
  } finally { broken = null; }
  assert.match(msg, /^502 /);
  said(msg, 502, '/v2/models/toy/infer');
  await page.close();
});

test('a Run answered 431 in HTML (a proxy, or the HTTP library under attnd) names both', async () => {
  const { page } = await openPage(browser, `${base}/#model=toy&text=a%20b&h=0`);
  broken = { path: /\/infer$/, status: 431 };
  try {
    await page.click('#run');
    await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  } finally { broken = null; }
  const text = await page.textContent('#status');
  assert.match(text, /HTTP 431, text\/html/, text);
  assert.match(text, /a proxy between this page and attnd, or the HTTP library under attnd/, text);
  assert.doesNotMatch(text, /<|>/, text);
  await page.close();
});

// A captive portal's (or a login proxy's) page, answered 200.
const PORTAL = '<!DOCTYPE html>\n<html><head><title>Guest Wi-Fi</title><style>body{font:14px sans-serif}</style></head>\n' +
  '<body><h1>Sign in to Guest Wi-Fi</h1><form action="/login"><input name="room"></form></body></html>\n';

test('a map plane answered 200 with HTML (a portal or login page) says what came, not "unexpected size"', async () => {
  const r = await fetch(`${daemon.url}/v2/models/toy/infer`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2, 16], data: Array.from({ length: 32 }, (_, i) => (i % 5) / 5) }],
      outputs: [{ name: 'y' }], parameters: { retain: true, tokens: ['a', 'b'] } }),
  });
  const id = (await r.json()).parameters.map_id;
  assert.ok(id);
  broken = { path: /\/attention\?/, status: 200, body: PORTAL };
  let page;
  try {
    page = await browser.newPage();
    await page.goto(`${base}/#map=${id}&h=0`);
    await page.waitForFunction(() => document.body.dataset.state === 'error', null, { timeout: WAIT });
  } finally { broken = null; }
  const text = await page.textContent('#status');
  assert.match(text, /HTTP 200, text\/html/, text);
  // its text, not its style sheet
  assert.match(text, /not its attention plane as FP32: “Guest Wi-Fi Sign in to Guest Wi-Fi”/, text);
  assert.ok(text.includes(`/v2/maps/${id}/attention`), text);
  assert.doesNotMatch(text, /<|>|unexpected/, text);
  await page.close();
});
