// security.test.mjs - the rules README states for --api-key, --cors-origins,
// uploads and the request, batching and connection limits, each route and
// each setting, tried the way they break: a token one byte longer or shorter
// than the key, an Origin that merely starts with an allowed one, a body one
// byte past a limit, a model name one character too long.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { REFS, SLOW, fp32, infer, maxDiff, start } from './helper.mjs';
import { slowStart } from './repo_helper.mjs';

const TINY = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'models', 'tiny');
const upload = () => ({
  parameters: {
    config: readFileSync(join(TINY, 'config.json'), 'utf8'),
    'file:model.safetensors': readFileSync(join(TINY, 'model.safetensors')).toString('base64'),
  },
});
const X = REFS.causal;
const xreq = () => ({ inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
const SEED = {
  inputs: [fp32('q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]), fp32('k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]), fp32('v', [2, 2], [1, 2, 3, 0])],
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const KEY = 'k3y-With.Symbols_0123456789';
// Every Authorization value that must be refused: none, the key without the
// scheme, another scheme, a wrong key, the key plus one byte, every proper
// prefix of the key, the key minus its first byte, the key's case changed.
const BAD_AUTH = [
  undefined, '', KEY, `Basic ${KEY}`, 'Bearer', 'Bearer ', `Bearer${KEY}`, `Bearer ${KEY}x`, `Bearer ${KEY}${KEY}`,
  `Bearer ${KEY.slice(1)}`, `Bearer ${KEY.toUpperCase()}`, `Bearer ${KEY.slice(0, -1)}X`, 'Bearer wrong', `Bearer "${KEY}"`,
  ...Array.from({ length: KEY.length }, (_, n) => `Bearer ${KEY.slice(0, n)}`),
];
const GOOD = { Authorization: `Bearer ${KEY}` };

async function call(d, method, path, body, headers = {}) {
  const h = { ...headers };
  for (const k of Object.keys(h)) if (h[k] === undefined) delete h[k];
  const r = await fetch(d.url + path, { method, headers: h, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = text; }
  return { status: r.status, headers: r.headers, json, text };
}

test('--api-key: two Authorization lines are refused (401), whichever holds the key, as the gRPC door refuses two; white space after the key is not part of it', async () => {
  // libmicrohttpd reads the first line and gRPC read the last, so the
  // doors disagreed on which one counted; now neither picks
  const d = await start({ args: ['--api-key', KEY] });
  try {
    const body = JSON.stringify(SEED);
    const raw = (lines) => new Promise((res, rej) => {
      const c = connect(d.port, '127.0.0.1');
      let got = '';
      c.on('data', (b) => { got += b; });
      c.on('error', rej);
      c.on('close', () => res(got));
      c.write(`POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n${
        lines.map((a) => `Authorization: ${a}\r\n`).join('')}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    for (const lines of [[`Bearer ${KEY}`, 'Bearer wrong'], ['Bearer wrong', `Bearer ${KEY}`], [`Bearer ${KEY}`, `Bearer ${KEY}`]]) {
      const got = await raw(lines);
      assert.match(got, /^HTTP\/1\.1 401 /, `${lines}: ${got.slice(0, 300)}`);
      assert.match(got, /Authorization: sent 2 times; send one/, got);
    }
    assert.match(await raw([`Bearer ${KEY}`]), /^HTTP\/1\.1 200 /, 'one line with the key');
    // white space around a field's value is not part of it (RFC 9110 5.5);
    // libmicrohttpd 0.9.75 keeps what trails it, and that key was refused
    for (const v of [`Bearer ${KEY} `, `Bearer ${KEY}\t`, `bearer  ${KEY} \t `])
      assert.match(await raw([v]), /^HTTP\/1\.1 200 /, `one line with the key and white space after it: ${JSON.stringify(v)}`);
    assert.match(await raw([`Bearer ${KEY} x`]), /^HTTP\/1\.1 401 /, 'the key, a space and more');
  } finally {
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('--api-key: every route README says needs the key refuses every wrong Authorization, and takes the right one', async (t) => {
  const d = await start({ t, args: ['--api-key', KEY] });
  // a retained map to fetch (made with the key)
  const rm = await infer(d, 'sdpa', { ...SEED, parameters: { retain: true } }, GOOD);
  assert.equal(rm.status, 200, JSON.stringify(rm.json));
  const id = rm.json.parameters.map_id;
  const guarded = [
    ['POST', '/v2/models/tiny/infer', xreq()],
    ['POST', '/v2/models/tiny/versions/1/infer', xreq()],
    ['POST', '/v2/models/sdpa/infer', SEED],
    ['POST', '/v2/repository/index', ''],
    ['POST', '/v2/repository/models/tiny/load', ''],
    ['POST', '/v2/repository/models/upx/load', upload()],
    ['POST', '/v2/repository/models/tiny/unload', ''],
    ['GET', '/v2/maps'],
    ['GET', `/v2/maps/${id}`],
    ['GET', `/v2/maps/${id}/attention`],
    ['GET', `/v2/maps/${id}/attention?what=mask&format=f32`],
  ];
  for (const [method, path, body] of guarded) {
    for (const a of BAD_AUTH) {
      const r = await call(d, method, path, body, { Authorization: a });
      assert.equal(r.status, 401, `${method} ${path} with Authorization ${JSON.stringify(a)}: ${r.text.slice(0, 200)}`);
      assert.equal(r.headers.get('www-authenticate'), 'Bearer', path);
      assert.match(r.json.error, /^Authorization: /, path);
    }
  }
  // nothing the refused calls asked for happened
  assert.equal(existsSync(join(d.dir, 'upx')), false, 'a refused upload wrote nothing');
  assert.deepEqual(readdirSync(d.dir).filter((f) => f.startsWith('.')), []);
  assert.equal((await fetch(`${d.url}/v2/models/tiny/ready`)).status, 200, 'a refused unload unloaded nothing');
  // HEAD and odd spellings of a guarded path never give its data away
  for (const p of ['/v2/maps', `/v2/maps/${id}`, '/v2//maps', '/v2/maps/', `/v2/m%61ps/${id}`]) {
    const r = await call(d, 'HEAD', p);
    assert.notEqual(r.status, 200, `HEAD ${p}`);
    const g = await call(d, 'GET', p);
    assert.ok([401, 404].includes(g.status), `GET ${p} without a key: ${g.status}`);
    assert.ok(!g.text.includes(id) || g.status === 401, `GET ${p} leaks the map`);
  }
  // the scheme in any case (README), the key exactly
  for (const a of [`bearer ${KEY}`, `BEARER ${KEY}`, `BeArEr ${KEY}`])
    assert.equal((await infer(d, 'sdpa', SEED, { Authorization: a })).status, 200, a);
  // the right key: each guarded route works
  for (const [method, path, body] of guarded.filter(([, p]) => !p.endsWith('/unload'))) {
    const r = await call(d, method, path, body, GOOD);
    assert.equal(r.status, 200, `${method} ${path} with the key: ${r.text.slice(0, 300)}`);
  }
  assert.ok(maxDiff((await infer(d, 'upx', xreq(), GOOD)).json.outputs[0].data, X.y) < 1e-5, 'the upload with the key serves');
  assert.equal((await call(d, 'POST', '/v2/repository/models/upx/unload', '', GOOD)).status, 200);
  // health, metadata, stats, metrics and the page stay open
  for (const p of ['/v2/health/live', '/v2/health/ready', '/v2', '/v2/models/tiny', '/v2/models/tiny/ready',
    '/v2/models/tiny/versions/1', '/v2/models/stats', '/v2/models/tiny/stats', '/metrics', '/', '/web/app.js'])
    assert.equal((await fetch(d.url + p)).status, 200, p);
  assert.equal((await d.stop()).code, 0);
});

test('ATTND_API_KEY is the same setting (the white space after it dropped); the flag wins over it', async (t) => {
  const d = await start({ t, env: { ATTND_API_KEY: 'from-env' }, args: ['--api-key', KEY] });
  assert.equal((await infer(d, 'sdpa', SEED, { Authorization: 'Bearer from-env' })).status, 401);
  assert.equal((await infer(d, 'sdpa', SEED, GOOD)).status, 200);
  assert.equal((await d.stop()).code, 0);
  // as a Kubernetes secret made from a file gives it: the newline is dropped
  const e = await start({ t, env: { ATTND_API_KEY: 'from-env\n' } });
  assert.equal((await infer(e, 'sdpa', SEED)).status, 401);
  assert.equal((await call(e, 'GET', '/v2/maps')).status, 401);
  assert.equal((await infer(e, 'sdpa', SEED, { Authorization: 'Bearer from-env' })).status, 200);
  assert.equal((await e.stop()).code, 0);
  // without a key nothing needs one
  const f = await start({ t });
  assert.equal((await infer(f, 'sdpa', SEED)).status, 200);
  assert.equal((await call(f, 'GET', '/v2/maps')).status, 200);
  assert.equal((await f.stop()).code, 0);
});

test('--cors-origins: only an exact listed origin is allowed; look-alikes are not', async (t) => {
  // empty entries (a doubled or trailing comma) are no entries
  const d = await start({ t, args: ['--cors-origins', 'http://a.example, ,https://b.example:8443,', '--api-key', KEY] });
  const acao = async (origin, path = '/v2', init = {}) =>
    (await fetch(d.url + path, { ...init, headers: { ...(init.headers || {}), Origin: origin } })).headers.get('access-control-allow-origin');
  for (const o of ['http://a.example', 'https://b.example:8443']) {
    assert.equal(await acao(o), o);
    const r = await fetch(`${d.url}/v2`, { headers: { Origin: o } });
    assert.equal(r.headers.get('vary'), 'Origin');
    // a page of another origin reads a binary answer's JSON length, a
    // 503's Retry-After and a ?format=f32 map's shape
    const exposed = r.headers.get('access-control-expose-headers').split(/, */);
    for (const h of ['Inference-Header-Content-Length', 'Retry-After', 'Map-Shape', 'Map-Version']) assert.ok(exposed.includes(h), `${h} not exposed: ${exposed}`);
  }
  for (const o of ['http://a.example.evil', 'http://a.example.evil.com', 'http://a.exampl', 'http://a.examplex', 'http://xa.example',
    'https://a.example', 'http://a.example:80', 'http://a.example/', 'http://a.example, http://evil.example', 'https://b.example',
    'https://b.example:84430', 'https://b.example:844', 'http://b.example:8443', 'null', '*', '', 'http://evil.example'])
    assert.equal(await acao(o), null, `Origin ${JSON.stringify(o)} must not be allowed`);
  // an answer without CORS still varies by Origin: a cache must not give
  // it to a listed origin (one without Origin too)
  for (const h of [{ Origin: 'http://evil.example' }, {}])
    assert.equal((await fetch(`${d.url}/v2`, { headers: h })).headers.get('vary'), 'Origin', JSON.stringify(h));
  // preflight: allowed origin answered with methods and headers, a look-alike not
  const pre = (o) => fetch(`${d.url}/v2/models/sdpa/infer`, {
    method: 'OPTIONS', headers: { Origin: o, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' },
  });
  let r = await pre('http://a.example');
  assert.equal(r.status, 204);
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://a.example');
  assert.match(r.headers.get('access-control-allow-headers'), /Authorization/);
  assert.match(r.headers.get('access-control-allow-headers'), /Content-Type/);
  // deploy/'s proxies keep a session's maps on one replica by this header
  assert.match(r.headers.get('access-control-allow-headers'), /X-Attnd-Session/);
  r = await pre('http://a.example.evil');
  assert.equal(r.headers.get('access-control-allow-origin'), null);
  assert.equal(r.headers.get('access-control-allow-methods'), null);
  // a look-alike origin with the right key: served (CORS is the browser's
  // rule, not auth), but without the header that would let a page read it
  r = await fetch(`${d.url}/v2/models/sdpa/infer`, { method: 'POST', body: JSON.stringify(SEED), headers: { ...GOOD, Origin: 'http://a.example.evil' } });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('access-control-allow-origin'), null);
  assert.equal((await d.stop()).code, 0);
});

test('--cors-origins "*" allows any origin; ATTND_CORS_ORIGINS is the same setting; without it no answer varies by Origin', async (t) => {
  const n = await start({ t });
  assert.equal((await fetch(`${n.url}/v2`, { headers: { Origin: 'http://a.example' } })).headers.get('vary'), null);
  assert.equal((await n.stop()).code, 0);
  const d = await start({ t, args: ['--cors-origins', '*'] });
  for (const o of ['http://anything.example', 'https://x.test:1'])
    assert.equal((await fetch(`${d.url}/v2`, { headers: { Origin: o } })).headers.get('access-control-allow-origin'), o);
  assert.equal((await d.stop()).code, 0);
  const e = await start({ t, env: { ATTND_CORS_ORIGINS: 'http://env.example' } });
  assert.equal((await fetch(`${e.url}/v2`, { headers: { Origin: 'http://env.example' } })).headers.get('access-control-allow-origin'), 'http://env.example');
  assert.equal((await fetch(`${e.url}/v2`, { headers: { Origin: 'http://env.example.evil' } })).headers.get('access-control-allow-origin'), null);
  assert.equal((await e.stop()).code, 0);
});

test('uploads: model names by README\'s rule, the body limit, and a refused upload writes nothing', async (t) => {
  const body = JSON.stringify(upload());
  // --max-body just above and just below this upload's size
  const d = await start({ t, args: ['--max-body', String(body.length)] });
  const L = (name, b = body) => call(d, 'POST', `/v2/repository/models/${name}/load`, b, { 'Content-Type': 'application/json' });
  // <name> is 1-128 characters of [A-Za-z0-9._-] without '..'
  for (const name of ['a', 'A-Z_0.9', 'x'.repeat(128)]) {
    const r = await L(name);
    assert.equal(r.status, 200, `${name}: ${r.text}`);
    assert.equal((await infer(d, name, xreq())).status, 200, name);
  }
  for (const name of ['x'.repeat(129), 'a..b', '..a', 'a%24b', 'a%20b', 'a%2fb', 'a%00b', 'caf%C3%A9']) {
    const r = await L(name);
    assert.ok([400, 404].includes(r.status), `${name}: ${r.status} ${r.text}`);
    if (r.status === 400) assert.match(r.json.error, /name/, name);
  }
  // the body: exactly --max-body is taken, one byte more is 413 naming the setting
  const over = await L('big', body + ' ');
  assert.equal(over.status, 413, over.text);
  assert.match(over.json.error, /max-body/);
  assert.equal(existsSync(join(d.dir, 'big')), false);
  const names = readdirSync(d.dir);
  assert.ok(!names.some((n) => n.startsWith('.') || n.length > 128 || n.includes('..')), names.join());
  assert.equal((await d.stop()).code, 0);
});

test('--max-json-body and --max-body: a JSON request one byte past its limit is 413; binary data counts against --max-body', async (t) => {
  const d = await start({ t, args: ['--max-json-body', '2048', '--max-body', '4096'] });
  const base = JSON.stringify(SEED);
  const pad = (n) => base + ' '.repeat(n - base.length);
  let r = await call(d, 'POST', '/v2/models/sdpa/infer', pad(2048));
  assert.equal(r.status, 200, r.text);
  r = await call(d, 'POST', '/v2/models/sdpa/infer', pad(2049));
  assert.equal(r.status, 413);
  assert.match(r.json.error, /max-json-body/);
  // binary: a short JSON header, tensors up to one byte past --max-body
  const h = Buffer.from(JSON.stringify({ inputs: [{ name: 'q', datatype: 'FP32', shape: [1, 1], parameters: { binary_data_size: 4 } }] }));
  const big = Buffer.concat([h, Buffer.alloc(4096 - h.length + 1)]);
  r = await fetch(`${d.url}/v2/models/sdpa/infer`, { method: 'POST', body: big, headers: { 'Inference-Header-Content-Length': String(h.length) } });
  assert.equal(r.status, 413);
  assert.match((await r.json()).error, /max-body/);
  r = await fetch(`${d.url}/v2/models/sdpa/infer`, { method: 'POST', body: Buffer.alloc(10), headers: { 'Inference-Header-Content-Length': '2049' } });
  assert.equal(r.status, 413);
  assert.match((await r.json()).error, /max-json-body/);
  assert.equal((await d.stop()).code, 0);
});

test('--max-tokens: batch x tokens up to the limit runs, one row more is 400 naming it', async (t) => {
  const d = await start({ t, args: ['--max-tokens', '6'] });
  const x = (B, T) => ({ inputs: [fp32('x', [B, T, 8], new Array(B * T * 8).fill(0.25))] });
  assert.equal((await infer(d, 'tiny', x(2, 3))).status, 200);
  assert.equal((await infer(d, 'tiny', x(1, 6))).status, 200);
  for (const [B, T] of [[1, 7], [7, 1], [2, 4]]) {
    const r = await infer(d, 'tiny', x(B, T));
    assert.equal(r.status, 400, `${B}x${T}`);
    assert.match(r.json.error, /max-tokens/);
  }
  // a sequence's step too: a start of 6 tokens runs, one of 7 is 400
  const seqStart = (id, T) => ({ inputs: [fp32('x', [1, T, 8], new Array(T * 8).fill(0.25))], parameters: { sequence_id: id, sequence_start: true, sequence_end: true } });
  assert.equal((await infer(d, 'tiny', seqStart('s6', 6))).status, 200);
  const s7 = await infer(d, 'tiny', seqStart('s7', 7));
  assert.equal(s7.status, 400, JSON.stringify(s7.json));
  assert.match(s7.json.error, /max-tokens/);
  const q = (lead, T) => {
    const n = lead.reduce((a, b) => a * b, 1) * T * 2;
    return { inputs: ['q', 'k', 'v'].map((nm) => fp32(nm, [...lead, T, 2], new Array(n).fill(0.5))) };
  };
  assert.equal((await infer(d, 'sdpa', q([2], 3))).status, 200);
  const r = await infer(d, 'sdpa', q([2, 2], 2));
  assert.equal(r.status, 400);
  assert.match(r.json.error, /max-tokens/);
  assert.equal((await d.stop()).code, 0);
});

test('--max-batch: concurrent requests share batches of at most max-batch sequences', async (t) => {
  const d = await start({ t, args: ['--max-batch', '3', '--instances', '1', '--batch-delay-us', '300000'] });
  const c = REFS.clients;
  const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => infer(d, 'tiny', { inputs: [fp32('x', c[i % c.length].shape, c[i % c.length].x)] })));
  rs.forEach((r, i) => {
    assert.equal(r.status, 200);
    assert.ok(maxDiff(r.json.outputs[0].data, c[i % c.length].y) < 1e-5);
  });
  const s = (await (await fetch(`${d.url}/v2/models/tiny/stats`)).json()).model_stats[0];
  const seqs = c.map((x) => x.shape[0]);
  assert.ok(seqs.every((n) => n === 1), 'the clients are one sequence each');
  assert.equal(s.batch_stats.reduce((n, b) => n + b.batch_size * b.compute_infer.count, 0), 8);
  for (const b of s.batch_stats) assert.ok(b.batch_size <= 3, `a batch of ${b.batch_size} sequences (max-batch 3)`);
  assert.ok(s.batch_stats.some((b) => b.batch_size > 1), 'requests met in a batch');
  assert.equal((await d.stop()).code, 0);
});

/** openSending(port, text): a raw connection that has sent text, with
 * what it got back and whether it closed. */
async function openSending(port, text) {
  const s = connect(port, '127.0.0.1');
  await new Promise((r, j) => { s.on('connect', r); s.on('error', j); });
  let got = '';
  let closed = false;
  s.on('data', (c) => { got += c; });
  s.on('close', () => { closed = true; });
  s.on('error', () => {});
  s.write(text);
  return { s, got: () => got, closed: () => closed };
}

test('--max-connections: a connection past the limit closes the one waiting longest for its request head', async (t) => {
  // ready: false: no pooled keep-alive connection of the helper's own.
  // Slow clients must not lock out new ones (issue 11): past the limit the
  // connection that has waited longest for its first head is closed.
  const d = await start({ t, args: ['--max-connections', '2'], ready: false });
  const open = (text) => openSending(d.port, text);
  const partial = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\n'; // headers not finished
  const held = [await open(partial)];
  await sleep(100);
  held.push(await open(partial));
  await sleep(200);
  const probe = await open('GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  for (let i = 0; i < 100 * SLOW && !probe.got().includes('\r\n\r\n'); i++) await sleep(50);
  assert.match(probe.got(), /^HTTP\/1\.1 200 /, 'the third connection is served');
  assert.ok(held[0].closed(), 'the oldest slow connection was closed');
  assert.ok(!held[1].closed(), 'the younger one is still open');
  // logged by the next sweep, from the log writer's thread: d.logged waits
  // 2 s times SLOW, a bound for a hang (it was 2 s unscaled), not a speed
  const over = /\b1 connection over max-connections \(2\): closed the one waiting longest/;
  assert.match(await d.logged(over, 2000), over);
  held[1].s.destroy();
  probe.s.destroy();
  assert.equal((await d.stop()).code, 0);
});

test('--max-connections: a client never served goes before an idle keep-alive one that was, however long that one waited', async (t) => {
  const d = await start({ t, args: ['--max-connections', '2'], ready: false });
  const open = (text) => openSending(d.port, text);
  // the served one: a whole request answered, then idle on keep-alive,
  // and waiting longer than the other when the third comes
  const served = await open('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n');
  for (let i = 0; i < 100 * SLOW && !served.got().includes('\r\n\r\n'); i++) await sleep(20);
  assert.match(served.got(), /^HTTP\/1\.1 200 /);
  await sleep(300);
  const slow = await open('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n'); // head not finished
  await sleep(200);
  const probe = await open('GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  for (let i = 0; i < 100 * SLOW && !probe.got().includes('\r\n\r\n'); i++) await sleep(50);
  assert.match(probe.got(), /^HTTP\/1\.1 200 /, 'the third connection is served');
  for (let i = 0; i < 40 && !slow.closed(); i++) await sleep(50);
  assert.ok(slow.closed(), 'the never-served connection was closed');
  assert.ok(!served.closed(), 'the served keep-alive one, though it waited longer, is still open');
  served.s.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  for (let i = 0; i < 100 * SLOW && !/\r\n\r\n[^]*HTTP\/1\.1 200 /.test(served.got()); i++) await sleep(20);
  assert.match(served.got(), /\r\n\r\n[^]*HTTP\/1\.1 200 /, 'and it is served again');
  served.s.destroy();
  probe.s.destroy();
  assert.equal((await d.stop()).code, 0);
});

/** fillBusy(t, d, head): max-connections (1) + MHD's 64 of headroom
 * connections, each with a request in progress: head read (100 Continue
 * says so), its body not sent. */
async function fillBusy(t, d, head) {
  const busy = [];
  t.after(() => { for (const c of busy) c.s.destroy(); });
  for (let i = 0; i < 1 + 64; i++) {
    const c = await openSending(d.port, head);
    for (let k = 0; k < 250 * SLOW && !c.got().includes('100 Continue') && !c.closed(); k++) await sleep(20);
    assert.match(c.got(), /^HTTP\/1\.1 100 Continue/, `connection ${i}: its request is in progress`);
    busy.push(c);
  }
  return busy;
}

// MHD takes max-connections + 64 (headroom: a connection past the limit
// is accepted, then one waiting for its head is closed). When every one
// of them has a request in progress nothing can be closed: the listener
// rests, new connections wait in the listen backlog (not closed, not
// reset), and each is served once a connection closes.
test('--max-connections with every connection busy: new ones wait, said once in the log, and are served as connections free', async (t) => {
  const d = await start({ t, args: ['--max-connections', '1', '--max-connections-per-ip', '0', '--min-body-rate', '0', '--connection-timeout', '0'] });
  const open = (text) => openSending(d.port, text);
  const body = JSON.stringify(SEED);
  const head = `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`;
  const busy = await fillBusy(t, d, head);
  // keep-alive: a connection served stays open, so one frees one place
  const live = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n';
  const waiting = [await open(live), await open(live)];
  await sleep(1000);
  for (const w of waiting) {
    assert.equal(w.got(), '', 'a connection past the limit waits for one to close');
    assert.ok(!w.closed(), 'it is not closed or reset');
  }
  assert.ok(busy.every((c) => !c.closed()), 'no busy connection was closed to make room');
  // the operator is told, once: not a line each retry (every 100 ms) of the
  // listener resting meanwhile
  const full = /warn attnd: http: every connection is busy \(max-connections 1 \+ 64 headroom, none that can be closed: each has a request in progress or bytes not read yet; the listener rested 1 time since the last such line\): new connections wait in the listen backlog until one closes; raise --max-connections/g;
  const log = await d.logged(full);
  assert.equal(log.match(full)?.length, 1, log);
  // a request finished (Connection: close): its connection closes, one
  // waiting is served; that one, keep-alive and idle, is then closed for
  // the other (a connection gone idle makes room, as at an accept)
  busy[0].s.write(body);
  for (let k = 0; k < 250 * SLOW && !/\r\n\r\n\{/.test(busy[0].got()); k++) await sleep(20);
  assert.match(busy[0].got(), /HTTP\/1\.1 200 OK/);
  for (let k = 0; k < 250 * SLOW && !waiting.every((w) => w.got()); k++) await sleep(20);
  for (const w of waiting) assert.match(w.got(), /^HTTP\/1\.1 200 /);
  for (let k = 0; k < 250 * SLOW && !waiting.some((w) => w.closed()); k++) await sleep(20);
  assert.equal(waiting.filter((w) => w.closed()).length, 1, 'the first served, idle, was closed for the second');
  assert.ok(busy.slice(1).every((c) => !c.closed()), 'no busy connection was closed to make room');
  // a client that goes: its connection closes, and a new one is served
  busy[1].s.destroy();
  const late = await open('GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  for (let k = 0; k < 250 * SLOW && !late.got(); k++) await sleep(20);
  assert.match(late.got(), /^HTTP\/1\.1 200 /);
  // every request that was held is carried out once its body comes
  for (const c of busy.slice(2)) c.s.write(body);
  for (let k = 0; k < 250 * SLOW && !busy.slice(2).every((c) => /\r\n\r\n\{/.test(c.got())); k++) await sleep(20);
  for (const c of busy.slice(2)) assert.match(c.got(), /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK/);
  assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  assert.equal((await d.stop()).code, 0);
});

// A connection that goes idle while the listener rests at the limit is
// closed to make room, as it would be at an accept: the accepts that
// filled the limit found every connection busy, and the one that went idle
// afterwards is not otherwise asked (it would hold its place until
// header-timeout).
test('--max-connections with every connection busy: one that goes idle (keep-alive) is closed for a waiting one', async (t) => {
  const d = await start({ t, args: ['--max-connections', '1', '--max-connections-per-ip', '0', '--min-body-rate', '0', '--connection-timeout', '0', '--header-timeout', '300'] });
  const open = (text) => openSending(d.port, text);
  const body = JSON.stringify(SEED);
  const head = `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`;
  const busy = await fillBusy(t, d, head);
  const live = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const waiting = [await open(live), await open(live)];
  await d.logged(/every connection is busy/);
  await sleep(300);
  for (const w of waiting) assert.equal(w.got(), '', 'a connection past the limit waits');
  // busy[0]'s request is answered and its connection stays open
  // (keep-alive): idle, it is closed, and the waiting ones are served (each
  // closes after its answer: Connection: close)
  busy[0].s.write(body);
  for (let k = 0; k < 250 * SLOW && !(waiting.every((w) => w.got()) && busy[0].closed()); k++) await sleep(20);
  assert.match(busy[0].got(), /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK[^]*\r\n\r\n\{"model_name"/, 'busy[0] was answered whole');
  assert.ok(busy[0].closed(), 'busy[0], idle, was closed to make room');
  for (const w of waiting) assert.match(w.got(), /^HTTP\/1\.1 200 /);
  assert.ok(busy.slice(1).every((c) => !c.closed()), 'no connection with a request in progress was closed');
  for (const c of busy) c.s.destroy(); // not to make the drain wait for their bodies
  assert.equal((await d.stop()).code, 0);
});

// The REST listener resting at MHD's limit closes an idle REST keep-alive
// to make room, never a gRPC connection: its close leaves MHD as full as
// it was (the listener would close one each time it asks again, every
// retry and each time a gRPC call ends, and admit no one).
test('--max-connections: a REST listener at its limit does not close idle gRPC connections for room they cannot make', async (t) => {
  const d = await start({ t, grpc: true, args: ['--max-connections', '1', '--max-connections-per-ip', '0', '--min-body-rate', '0', '--connection-timeout', '0', '--header-timeout', '300'] });
  // a gRPC connection with a call in progress (a stream left open): busy
  // while the REST connections fill MHD's limit, so none of their accepts
  // closes it
  const g = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  let gClosed = false;
  g.on('close', () => { gClosed = true; });
  g.on('error', () => {});
  const call = g.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer', 'content-type': 'application/grpc', te: 'trailers' });
  let status = null;
  call.on('response', (h) => { if (h['grpc-status'] !== undefined) status = h['grpc-status']; }); // trailers-only
  call.on('trailers', (h) => { status = h['grpc-status']; });
  call.on('error', () => {});
  call.resume();
  call.write(Buffer.alloc(0));
  await sleep(300);
  const body = JSON.stringify(SEED);
  const head = `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`;
  t.after(() => g.destroy());
  const busy = await fillBusy(t, d, head);
  const waiting = await openSending(d.port, 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await d.logged(/every connection is busy/);
  // the gRPC call ends: its connection goes idle, and stays open through
  // several of the listener's retries (100 ms)
  call.end();
  for (let k = 0; k < 250 * SLOW && status === null; k++) await sleep(20);
  assert.equal(status, '0', 'the gRPC call ended');
  await sleep(1000);
  assert.ok(!gClosed, 'the idle gRPC connection was closed for the REST listener');
  assert.equal(waiting.got(), '', 'the REST connection past the limit still waits');
  // a REST request ends: its connection, idle, makes room for the waiting
  // one (whose accept, past max-connections, may close the idle gRPC one:
  // the limit is both doors')
  busy[0].s.write(body);
  for (let k = 0; k < 250 * SLOW && !waiting.got(); k++) await sleep(20);
  assert.match(waiting.got(), /^HTTP\/1\.1 200 /);
  for (const c of busy) c.s.destroy();
  g.destroy();
  assert.equal((await d.stop()).code, 0);
});

test('--connection-timeout: an idle connection is closed by the server', async (t) => {
  const d = await start({ t, args: ['--connection-timeout', '1'] });
  const s = connect(d.port, '127.0.0.1');
  await new Promise((r) => s.on('connect', r));
  s.write('POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"in');
  const closed = await new Promise((r) => {
    const timer = setTimeout(() => r(false), 15000);
    s.on('close', () => { clearTimeout(timer); r(true); });
    s.on('error', () => {});
  });
  s.destroy();
  assert.ok(closed, 'the idle connection stayed open 15 s with --connection-timeout 1');
  assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  assert.equal((await d.stop()).code, 0);
});

// RFC 9110 10.1.1: a server may answer a request that waits for 100
// Continue with its final status instead. An infer to a model that is not
// loaded got 100 Continue, and its 404 only once the whole body had come
// (the model was looked up at its dispatch); it is answered from its head
// now, as a route's 404 or a 413 for its length is, and the connection
// closes (its client may send the body anyway, which is never read).
test('Expect: 100-continue: an infer to a model not loaded gets its 404 from the head, with no 100 Continue and its body never read; a loaded model gets 100 Continue and its answer; a body past its limit its 413 from the head', async (t) => {
  const origin = 'http://page.example';
  const d = await start({ t, args: ['--max-json-body', '4096', '--cors-origins', origin] });
  const body = JSON.stringify(SEED);
  const head = (model, len = body.length, more = '') => `POST /v2/models/${model}/infer HTTP/1.1\r\nHost: x\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${len}\r\n${more}\r\n`;
  const until = async (c, re) => { for (let k = 0; k < 250 * SLOW && !re.test(c.got()) && !c.closed(); k++) await sleep(20); };
  const finals = (text) => text.match(/HTTP\/1\.1 \d\d\d /g) || [];
  const EXPECT = 'Expect: 100-continue\r\n';
  // tiny unloaded: known to the repository, not loaded
  assert.equal((await fetch(`${d.url}/v2/repository/models/tiny/unload`, { method: 'POST' })).status, 200);
  for (const [model, why] of [['nosuch', 'not found; served: [^"]*'], ['tiny', 'not loaded \\(unloaded\\); load it with POST [^"]*']]) {
    // its head alone: the 404 comes before a byte of the body is sent
    const c = await openSending(d.port, head(model, body.length, `${EXPECT}Origin: ${origin}\r\n`));
    await until(c, /\r\n\r\n\{[^]*\}$/);
    assert.match(c.got(), /^HTTP\/1\.1 404 Not Found\r\n/, c.got());
    assert.doesNotMatch(c.got(), /100 Continue/);
    assert.match(c.got(), /\r\nConnection: close\r\n/i);
    assert.match(c.got(), new RegExp(`\\r\\nAccess-Control-Allow-Origin: ${origin}\\r\\n`, 'i'));
    assert.match(c.got(), new RegExp(`\\{"error":"model '${model}': ${why}"\\}$`));
    // the body sent all the same, a request behind it: neither is read
    c.s.write(body + 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n');
    await until(c, /(?!)/); // (until its close)
    assert.ok(c.closed(), 'the connection closes after the 404');
    assert.deepEqual(finals(c.got()), ['HTTP/1.1 404 '], c.got());
  }
  // head and body in one write, the body a request of its own: it is not
  // read as the next request (libmicrohttpd closes the connection)
  const smuggled = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n';
  const s = await openSending(d.port, head('nosuch', smuggled.length, EXPECT) + smuggled);
  await until(s, /(?!)/);
  assert.ok(s.closed());
  assert.deepEqual(finals(s.got()), ['HTTP/1.1 404 '], s.got());
  // without the expectation the body is on its way: it is read, answered
  // 404 after it, and the connection stays for the next request
  const k = await openSending(d.port, head('nosuch') + body + smuggled);
  await until(k, /HTTP\/1\.1 200 [^]*\r\n\r\n$/); // (health/live: no body)
  assert.deepEqual(finals(k.got()), ['HTTP/1.1 404 ', 'HTTP/1.1 200 '], k.got());
  k.s.destroy();
  // a loaded model: 100 Continue, then its answer, the connection kept
  const ok = await openSending(d.port, head('sdpa', body.length, EXPECT));
  await until(ok, /\r\n\r\n/);
  assert.equal(ok.got(), 'HTTP/1.1 100 Continue\r\n\r\n');
  ok.s.write(body + 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await until(ok, /(?!)/);
  assert.deepEqual(finals(ok.got()), ['HTTP/1.1 100 ', 'HTTP/1.1 200 ', 'HTTP/1.1 200 '], ok.got());
  assert.match(ok.got(), /"model_name":"sdpa"/);
  // a body past max-json-body: its 413 from the head, no 100 Continue
  const big = await openSending(d.port, head('sdpa', 5000, EXPECT));
  await until(big, /\r\n\r\n\{[^]*\}$/);
  assert.match(big.got(), /^HTTP\/1\.1 413 [^]*\r\nConnection: close\r\n[^]*Content-Length: 5000 bytes is over the limit of 4096 \(max-json-body\)/i, big.got());
  big.s.destroy();
  assert.equal((await d.stop()).code, 0);
});

// The other answers an Expect: 100-continue request can get from its head
// alone, as the infer's 404 above: an unload reads nothing of its body, so
// its 400 for the name and its 404 for a model not loaded (no load of it
// running) are known from the head; an infer's 400 for its
// Attnd-Sequence-Id comes first whatever its model and body. Each got 100
// Continue and its answer only after the body. The answer is the one the
// request gets without the expectation (after its body then), and a body
// past its limit keeps its 413 first, as it does without the expectation
// (an infer to a model not served got 404 instead).
test('Expect: 100-continue: an unload\'s 400 and 404, an infer\'s 400 for its Attnd-Sequence-Id and 413 for its length come from the head, the same answers as without the expectation', async (t) => {
  const d = await start({ t, args: ['--max-json-body', '4096', '--max-small-body', '1024'] });
  const body = JSON.stringify(SEED);
  const head = (path, len, more = '') => `POST ${path} HTTP/1.1\r\nHost: x\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${len}\r\n${more}\r\n`;
  const until = async (c, re) => { for (let k = 0; k < 250 * SLOW && !re.test(c.got()) && !c.closed(); k++) await sleep(20); };
  const finals = (text) => text.match(/HTTP\/1\.1 \d\d\d /g) || [];
  const EXPECT = 'Expect: 100-continue\r\n';
  const NEXT = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const BADSEQ = 'Attnd-Sequence-Id: a b\r\n';
  const seqMsg = 'Attnd-Sequence-Id: \'a b\' is not a sequence id';
  assert.equal((await fetch(`${d.url}/v2/repository/models/tiny/unload`, { method: 'POST' })).status, 200);
  const unload = (m) => `/v2/repository/models/${m}/unload`;
  const cases = [
    [unload('nosuch'), '{}', '', 404, 'model \'nosuch\': not loaded'],
    [unload('tiny'), '{}', '', 404, 'model \'tiny\': not loaded'],
    [unload('.hidden'), '{}', '', 400, 'model name \'.hidden\': use 1-128 characters'],
    [unload('sdpa'), '{}', '', 400, 'model \'sdpa\': built in; it cannot be loaded or unloaded'],
    ['/v2/models/nosuch/infer', body, BADSEQ, 400, seqMsg],
    ['/v2/models/sdpa/infer', body, BADSEQ, 400, seqMsg],
  ];
  for (const [path, b, more, status, msg] of cases) {
    // with the expectation: the answer from the head, the body never read
    const c = await openSending(d.port, head(path, b.length, EXPECT + more));
    await until(c, /\r\n\r\n\{[^]*\}$/);
    assert.match(c.got(), new RegExp(`^HTTP/1\\.1 ${status} `), `${path}: ${c.got()}`);
    assert.doesNotMatch(c.got(), /100 Continue/, path);
    assert.match(c.got(), /\r\nConnection: close\r\n/i, path);
    assert.ok(c.got().includes(`{"error":"${msg}`), `${path}: ${c.got()}`);
    c.s.write(b + NEXT);
    await until(c, /(?!)/); // (until its close)
    assert.ok(c.closed(), `${path}: the connection closes after the answer`);
    assert.deepEqual(finals(c.got()), [`HTTP/1.1 ${status} `], c.got());
    // without it: the same answer, after the body, the connection kept
    const k = await openSending(d.port, head(path, b.length, more) + b + NEXT);
    await until(k, /(?!)/);
    assert.deepEqual(finals(k.got()), [`HTTP/1.1 ${status} `, 'HTTP/1.1 200 '], k.got());
    assert.ok(k.got().includes(`{"error":"${msg}`), `${path}: ${k.got()}`);
  }
  // a body past its limit: its 413 from the head with or without the
  // expectation, whatever the model
  for (const [path, limit] of [[unload('nosuch'), 'max-small-body'], ['/v2/models/nosuch/infer', 'max-json-body']]) {
    for (const more of [EXPECT, '']) {
      const c = await openSending(d.port, head(path, 5000, more));
      await until(c, /\r\n\r\n\{[^]*\}$/);
      assert.match(c.got(), new RegExp(`^HTTP/1\\.1 413 [^]*Content-Length: 5000 bytes is over the limit of \\d+ \\(${limit}\\)`), `${path} ${more}: ${c.got()}`);
      c.s.destroy();
    }
  }
  // a loaded model's unload: 100 Continue, then its 200 after the body
  assert.equal((await fetch(`${d.url}/v2/repository/models/tiny/load`, { method: 'POST' })).status, 200);
  const ok = await openSending(d.port, head(unload('tiny'), 2, EXPECT));
  await until(ok, /\r\n\r\n/);
  assert.equal(ok.got(), 'HTTP/1.1 100 Continue\r\n\r\n');
  ok.s.write('{}' + NEXT);
  await until(ok, /(?!)/);
  assert.deepEqual(finals(ok.got()), ['HTTP/1.1 100 ', 'HTTP/1.1 200 ', 'HTTP/1.1 200 '], ok.got());
  assert.equal((await d.stop()).code, 0);
});

// An infer's transient refusals, a model whose first load still runs and
// a full queue (queue-size), were sent only after the body: with Expect:
// 100-continue the client got 100 Continue, uploaded its body, and then
// read the 503 it could have had from the head (as a handler that answers
// without reading the body does in Go's net/http, which sends the 100 on
// the first read only). They come from the head now, with the same
// message and Retry-After as without the expectation, no 100 and the
// body never read; a queue-full step still counts for its sequence, so
// its 503 comes from the head only when its header names the sequence.
test('Expect: 100-continue: an infer\'s 503 for a model still loading and for a full queue (its sequence, if any, in its header) come from the head, with Retry-After, the same answers as without the expectation', async (t) => {
  const { d, slow } = await slowStart(t, 'expect503', { args: ['--queue-size', '1', '--batch-delay-us', '10000000'] });
  const body = JSON.stringify(xreq());
  const head = (model, more = '') => `POST /v2/models/${model}/infer HTTP/1.1\r\nHost: x\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n${more}\r\n`;
  const until = async (c, re) => { for (let k = 0; k < 250 * SLOW && !re.test(c.got()) && !c.closed(); k++) await sleep(20); };
  const finals = (text) => text.match(/HTTP\/1\.1 \d\d\d /g) || [];
  const metric = async (re) => Number(re.exec(await (await fetch(`${d.url}/metrics`)).text())?.[1]);
  const NEXT = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const both = async (model, msg, more = '') => {
    // with the expectation: the 503 from the head, the body never read
    const c = await openSending(d.port, head(model, 'Expect: 100-continue\r\n' + more));
    await until(c, /\r\n\r\n\{[^]*\}$/);
    assert.match(c.got(), /^HTTP\/1\.1 503 /, `${model}: ${c.got()}`);
    assert.doesNotMatch(c.got(), /100 Continue/, model);
    assert.match(c.got(), /\r\nRetry-After: 1\r\n/i, model);
    assert.match(c.got(), /\r\nConnection: close\r\n/i, model);
    assert.ok(c.got().endsWith(`{"error":"${msg}"}`), `${model}: ${c.got()}`);
    c.s.write(body + NEXT);
    await until(c, /(?!)/); // (until its close)
    assert.ok(c.closed(), `${model}: the connection closes after the answer`);
    assert.deepEqual(finals(c.got()), ['HTTP/1.1 503 '], c.got());
    // without it: the same answer after the body, the connection kept
    const k = await openSending(d.port, head(model, more) + body + NEXT);
    await until(k, /(?!)/);
    assert.deepEqual(finals(k.got()), ['HTTP/1.1 503 ', 'HTTP/1.1 200 '], k.got());
    assert.match(k.got(), /\r\nRetry-After: 1\r\n/i, model);
    assert.ok(k.got().includes(`{"error":"${msg}"}`), `${model}: ${k.got()}`);
  };
  // a model whose first load runs (its config.json a FIFO not yet written)
  const loading = fetch(`${d.url}/v2/repository/models/slow/load`, { method: 'POST' });
  await slow.reading();
  await both('slow', "model 'slow': still loading; retry shortly");
  assert.ok(slow.release());
  assert.equal((await loading).status, 200);
  // a full queue: one request held by the batch delay (10 s)
  const pending = /^attnd_inference_pending_requests\{model="tiny",version="1"\} (\d+)$/m;
  const held = infer(d, 'tiny', xreq());
  for (let i = 0; i < 500 * SLOW && (await metric(pending)) !== 1; i++) await sleep(10);
  assert.equal(await metric(pending), 1);
  const full = "queue: model 'tiny' has 1 request in progress (queue-size); retry later";
  await both('tiny', full, 'Attnd-Sequence-Id: s1\r\n');
  // without the header the body may name the step's sequence, which the
  // 503 keeps from the idle sweep: 100 Continue, the body, then the 503
  const c = await openSending(d.port, head('tiny', 'Expect: 100-continue\r\n'));
  await until(c, /\r\n\r\n/);
  assert.equal(c.got(), 'HTTP/1.1 100 Continue\r\n\r\n');
  c.s.write(body + NEXT);
  await until(c, /(?!)/);
  assert.deepEqual(finals(c.got()), ['HTTP/1.1 100 ', 'HTTP/1.1 503 ', 'HTTP/1.1 200 '], c.got());
  assert.ok(c.got().includes(`{"error":"${full}"}`), c.got());
  assert.equal(await metric(/^attnd_inference_request_failure_total\{model="tiny",version="1",reason="rejected"\} (\d+)$/m), 3);
  // the drain serves the held request
  const stopped = d.stop();
  assert.equal((await held).status, 200);
  assert.equal((await stopped).code, 0);
});
