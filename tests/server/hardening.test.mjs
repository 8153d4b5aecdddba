// hardening.test.mjs - what hostile clients and crashes must not get
// through (issue 11): upload staging and names, body declarations per route,
// auth before any body, port sharing, slow clients, drain, memory budget.
// (How a request's bytes are framed: http_framing.test.mjs.)
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { request } from 'node:http';
import { connect } from 'node:net';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { ATTND, REFS, SLOW, fp32, infer, maxDiff, modelsDir, post, queued, requestsUsed, start, untilClosed, waitFor } from './helper.mjs';

const X = REFS.causal;
const xreq = (id) => ({ id, inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('upload leftovers of a crash are swept at start; names starting with . are refused', async () => {
  const dir = modelsDir();
  // what attnd 0.1.0 left when killed during an upload, and a staging
  // folder of the current layout whose process is gone
  const old = join(dir, '.upload-evil-999999999-0');
  mkdirSync(old);
  cpSync(join(dir, 'tiny'), old, { recursive: true });
  mkdirSync(join(dir, '.attnd-staging', 'tiny~999999999~3'), { recursive: true });
  writeFileSync(join(dir, '.attnd-staging', 'tiny~999999999~3', 'model.safetensors'), 'partial');
  const d = await start({ dir });
  try {
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('.')), [], 'staging leftovers removed');
    assert.match(d.log(), /removed 2 staging folders left by an interrupted upload/);
    let r = await post(`${d.url}/v2/repository/models/.upload-evil-999999999-0/load`, '');
    assert.equal(r.status, 400);
    assert.match(r.json.error, /not starting with '\.'/);
    r = await post(`${d.url}/v2/repository/models/.hidden/load`, {
      parameters: { 'file:model.safetensors': 'AAAA' },
    });
    assert.equal(r.status, 400);
    assert.equal(existsSync(join(dir, '.hidden')), false);
    const idx = await post(`${d.url}/v2/repository/index`, '');
    assert.equal(idx.json.find((m) => m.name.startsWith('.')), undefined);
  } finally {
    assert.equal((await d.stop()).code, 0);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** raw(port, text, ms): send text on a new connection, resolve with the
 * answer's status and text once a whole answer came (or the peer closed);
 * reject when none came within ms. */
function raw(port, text, ms = 3000, opts = {}) {
  return new Promise((resolve, reject) => {
    const sock = connect({ port, host: '127.0.0.1', ...opts });
    let buf = '';
    const done = (err) => {
      clearTimeout(t);
      sock.destroy();
      if (err) return reject(err);
      const m = /^HTTP\/1\.1 (\d+)/.exec(buf);
      resolve({ status: m ? Number(m[1]) : 0, text: buf });
    };
    const t = setTimeout(() => done(new Error(`no answer within ${ms} ms to ${text.slice(0, 60)}`)), ms);
    sock.on('error', () => done());
    sock.on('data', (d) => {
      buf += d;
      const h = buf.indexOf('\r\n\r\n');
      const cl = /content-length: (\d+)/i.exec(buf);
      if (h >= 0 && cl && buf.length >= h + 4 + Number(cl[1])) done();
    });
    sock.on('end', () => done());
    sock.write(text);
  });
}

test('a route that takes no body answers 413 from the headers, without reading one', async () => {
  const d = await start();
  try {
    // 64 MiB announced, none sent: answered at once, nothing buffered
    const r = await raw(d.port, 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n');
    assert.equal(r.status, 413);
    assert.match(r.text, /GET \/v2\/health\/live takes no body/);
    const c = await raw(d.port, 'GET /v2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n');
    assert.equal(c.status, 413);
    // named by its own method (a DELETE's and a HEAD's said GET)
    for (const [method, path] of [['DELETE', '/v2/sequences/abc'], ['HEAD', '/v2/health/live']]) {
      const b = await raw(d.port, `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}`);
      assert.equal(b.status, 413);
      if (method !== 'HEAD') assert.equal(JSON.parse(b.text.slice(b.text.indexOf('\r\n\r\n') + 4)).error, `body: ${method} ${path} takes no body`);
    }
    const m = await raw(d.port, 'GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n');
    assert.equal(m.status, 200, 'an empty body is no body');
    assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('the index body has a small limit (max-small-body), checked before reading it', async () => {
  const d = await start({ args: ['--max-small-body', '4096'] });
  try {
    const r = await raw(d.port, 'POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n{');
    assert.equal(r.status, 413);
    assert.match(r.text, /over the limit of 4096 \(max-small-body\)/);
    // chunked: cut at the limit, 413 when it ends
    const big = '{"ready": false, "pad": "' + 'x'.repeat(8000) + '"}';
    const c = await raw(d.port, `POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${big.length.toString(16)}\r\n${big}\r\n0\r\n\r\n`);
    assert.equal(c.status, 413);
    assert.match(c.text, /max-small-body/);
    const ok = await post(`${d.url}/v2/repository/index`, '{"ready": true}');
    assert.equal(ok.status, 200);
    assert.ok(ok.json.find((m) => m.name === 'tiny'));
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('authentication comes before any body is read', async () => {
  const d = await start({ env: { ATTND_API_KEY: 'k3y' } });
  try {
    for (const p of ['/v2/models/tiny/infer', '/v2/repository/models/x/load', '/v2/repository/index']) {
      const r = await raw(d.port, `POST ${p} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{`);
      assert.equal(r.status, 401, p);
    }
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a second attnd on a port in use fails at start, unless --reuse-port 1 asks to share it', async () => {
  const d = await start();
  try {
    const r = spawnSync(ATTND, ['--host', '127.0.0.1', '--port', String(d.port), '--models', d.dir], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 1, r.stderr);
    // its last line says why and what to do (it said "--reuse-port 1 shares
    // the port", and "drained; stopping" and the models' loads came after)
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.at(-1), `attnd: --host 127.0.0.1 --port ${d.port}: address in use (another server listens there): ` +
      'pick a free port with --port or ATTND_PORT, or run both servers with --reuse-port 1 to share it on purpose', r.stderr);
    assert.doesNotMatch(r.stderr, /drained/, 'a start that failed drained nothing');
  } finally { assert.equal((await d.stop()).code, 0); }
  const a = await start({ args: ['--reuse-port', '1'] });
  const b = await start({ args: ['--reuse-port', '1', '--port', String(a.port)] });
  try {
    assert.equal(b.port, a.port);
  } finally {
    assert.equal((await b.stop()).code, 0);
    assert.equal((await a.stop()).code, 0);
  }
});

test('Bearer is case-insensitive; --api-key-file; a path over 1 KiB is 414, logged cut', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'attnd-key-'));
  const kf = join(dir, 'key');
  writeFileSync(kf, 'fi1e-key\n');
  const d = await start({ args: ['--api-key-file', kf] });
  try {
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      const r = await infer(d, 'tiny', xreq('b'), { Authorization: `${scheme} fi1e-key` });
      assert.equal(r.status, 200, scheme);
    }
    assert.equal((await infer(d, 'tiny', xreq('b'), { Authorization: 'Bearer other' })).status, 401);
    const long = '/v2/models/' + 'a'.repeat(2000);
    const r = await fetch(d.url + long);
    assert.equal(r.status, 414);
    assert.match((await r.json()).error, /path: 2011 bytes, over the limit of 1023/);
    assert.match(await d.logged(/\/v2\/models\/aaaa+\.\.\.\(2011-bytes\) 414 /), /\/v2\/models\/aaaa+\.\.\.\(2011-bytes\) 414 /);
  } finally { assert.equal((await d.stop()).code, 0); }
  let r = spawnSync(ATTND, ['--api-key-file', join(dir, 'absent')], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--api-key-file .*absent: cannot read/);
  writeFileSync(kf, '\n');
  r = spawnSync(ATTND, ['--api-key-file', kf], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /no key on its first line/);
  // a byte no Authorization header can carry is refused, as --api-key's
  // are (a NUL byte cut the key short, to what came before it)
  for (const [key, at] of [['ab\x01c\n', 2], ['abc\x00def\n', 3], ['a\tb\n', 1]]) {
    writeFileSync(kf, key);
    r = spawnSync(ATTND, ['--api-key-file', kf, '--port', '0', '--grpc-port', '0'], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 2, JSON.stringify(key) + r.stderr);
    assert.match(r.stderr, new RegExp(`--api-key-file .*key: a control character at byte ${at}, which no Authorization header can carry`));
  }
  r = spawnSync(ATTND, ['--help'], { encoding: 'utf8' });
  assert.match(r.stdout, /prefer ATTND_API_KEY or --api-key-file/);
  rmSync(dir, { recursive: true, force: true });
});

/** open(port, opts): a connected socket (opts: localAddress...). */
function open(port, opts = {}) {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: '127.0.0.1', ...opts });
    s.on('connect', () => resolve(s));
    s.on('error', reject);
  });
}
/** closedWithin(sock, ms): resolves true when the peer closes it in time. */
function closedWithin(sock, ms) {
  return new Promise((resolve) => {
    if (sock.destroyed || sock.readableEnded) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    const done = () => { clearTimeout(t); resolve(true); };
    sock.on('close', done);
    sock.on('end', done);
    sock.on('error', done);
  });
}

// untilUsed: attnd_memory_budget_used_bytes once it is n, or what it is
// after 5 s (x SLOW)
// (the open connections' own 36 KiB each aside: requestsUsed)
const used = async (d) => requestsUsed(await (await fetch(`${d.url}/metrics`)).text());
async function untilUsed(d, n) {
  let u = await used(d);
  for (const until = Date.now() + 5000 * SLOW; u !== n && Date.now() < until; u = await used(d)) await sleep(20);
  return u;
}

test('SIGTERM: a request whose head came before the signal is served, its body finishing after it', async () => {
  const d = await start();
  const body = JSON.stringify(xreq('pre'));
  const sock = await open(d.port);
  let text = '';
  sock.on('data', (b) => { text += b; });
  sock.write(`POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
  assert.equal(await untilUsed(d, body.length + 1), body.length + 1, 'its head was read: its body reserved');
  const exit = d.stop('SIGTERM');
  assert.match(await d.logged(/SIGTERM: draining/), /SIGTERM: draining/);
  // a new request is refused meanwhile
  const late = await infer(d, 'tiny', xreq('late'));
  assert.equal(late.status, 503);
  sock.write(body.slice(20));
  const e = await exit;
  assert.equal(e.code, 0, d.log());
  assert.match(text, /^HTTP\/1\.1 200/, text);
  const y = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)).outputs[0].data;
  assert.ok(maxDiff(y, X.y) < 1e-5);
  sock.destroy();
});

test('memory budget: a body that does not fit beside the others gets 503 + Retry-After before it is read', async () => {
  const lim = ['--memory-budget', '1000000', '--max-body', '600000', '--max-json-body', '600000', '--request-memory', String(1000000 - 131072)];
  const d = await start({ args: lim });
  try {
    // A holds 600001 bytes of the budget while its body trickles in
    const a = await open(d.port);
    a.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 600000\r\n\r\n{');
    assert.equal(await untilUsed(d, 600001), 600001, 'A\'s head was read');
    const b = await raw(d.port, 'POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n\r\n');
    assert.equal(b.status, 503);
    assert.match(b.text, /retry-after: \d+/i);
    assert.match(b.text, /memory-budget/);
    const m = await (await fetch(`${d.url}/metrics`)).text();
    assert.equal(requestsUsed(m), 600001, 'A\'s reservation, and nothing of B\'s');
    assert.match(m, /\nattnd_open_connections [1-9]/);
    // a decoded request and its outputs count too: a 72 KB body whose
    // 300x300 attention and scores (720 KB) do not fit beside A
    const q = new Array(300 * 16).fill(0.25);
    const big = { inputs: [fp32('q', [300, 16], q), fp32('k', [300, 16], q), fp32('v', [300, 16], q)], outputs: [{ name: 'attention' }, { name: 'scores' }] };
    assert.ok(JSON.stringify(big).length > 65536, 'past the small-request path of sched.c');
    let r = await infer(d, 'sdpa', big);
    assert.equal(r.status, 503);
    assert.match(r.json.error, /memory for decoded requests .*memory-budget/);
    assert.equal((await infer(d, 'tiny', xreq('small'))).status, 200, 'small ones still fit');
    // a chunked body reserves as it grows: past what is left, the rest is
    // dropped unread and the answer is 503
    const pad = ' '.repeat(100000);
    const chunks = Array.from({ length: 5 }, () => `${pad.length.toString(16)}\r\n${pad}\r\n`).join('');
    const c = await raw(d.port, `POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}0\r\n\r\n`, 10000);
    assert.equal(c.status, 503);
    assert.match(c.text, /memory-budget/);
    a.destroy(); // its reservation is given back
    assert.equal(await untilUsed(d, 0), 0, 'A\'s reservation given back');
    r = await infer(d, 'sdpa', big);
    assert.equal(r.status, 200);
    assert.equal(await untilUsed(d, 0), 0, 'all given back');
  } finally { assert.equal((await d.stop()).code, 0); }
  const bad = spawnSync(ATTND, ['--memory-budget', '1000', '--max-body', '2000'], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--memory-budget 1000: below --request-memory 536870912 plus the 131072 bytes a request holds beside it \(its connection's state, and a gRPC call's\): a request that large could never be served; set --memory-budget to at least 537001984 \(or 0: no budget\)/);
});

test('memory budget: the least budget a start takes serves a body of exactly max-body (a budget of max-body took it 503 "retry shortly" for good)', async () => {
  const lim = ['--memory-budget', String(200000 + 131072), '--max-body', '200000', '--max-json-body', '200000', '--request-memory', '200000'];
  const d = await start({ args: lim });
  try {
    const body = JSON.stringify(xreq('edge'));
    // (padded inside its data, which request-memory's parse estimate
    // leaves out: 200000 of it, at the least budget's)
    const padded = body.replace('"data":[', `"data":[${' '.repeat(200000 - Buffer.byteLength(body))}`);
    const r = await raw(d.port, `POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n${padded}`, 10000);
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.equal(await untilUsed(d, 0), 0);
  } finally { assert.equal((await d.stop()).code, 0); }
  const one = spawnSync(ATTND, lim.map((a, i) => (i === 1 ? String(200000 + 131071) : a)), { encoding: 'utf8', timeout: 5000 });
  assert.equal(one.status, 2);
  assert.match(one.stderr, /set --memory-budget to at least 331072 \(or 0: no budget\)/);
});

test('memory budget: answers a client does not read count until sent, so new requests get 503, not memory', async () => {
  // a 24 KB request whose JSON answer (the 1000x1000 attention) is ~15 MB
  const T = 1000;
  const col = Array.from({ length: T }, (_, i) => (i % 8) / 8);
  const body = JSON.stringify({ inputs: [fp32('q', [T, 1], col), fp32('k', [T, 1], col), fp32('v', [T, 1], col)], outputs: [{ name: 'attention' }] });
  const head = `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
  /** a client that sends the request and reads only the first bytes of its answer */
  const slowReader = (d) => new Promise((resolve, reject) => {
    const sock = connect(d.port, '127.0.0.1');
    const t = setTimeout(() => reject(new Error('no answer')), 30000);
    sock.on('error', () => {});
    sock.once('data', (chunk) => {
      sock.pause();
      clearTimeout(t);
      resolve({ sock, status: Number(/^HTTP\/1\.1 (\d+)/.exec(chunk.toString())[1]) });
    });
    sock.write(head + body);
  });
  const lim = ['--memory-budget', '24000000', '--max-body', '1000000', '--max-json-body', '1000000', '--request-memory', String(24000000 - 131072)];
  const d = await start({ args: lim });
  const readers = [];
  try {
    for (let i = 0; i < 2; i++) { // the second fits beside the first's answer; then no more
      const r = await slowReader(d);
      readers.push(r.sock);
      assert.equal(r.status, 200);
    }
    assert.ok(await used(d) > 24000000, 'two unsent answers hold more than the budget');
    const third = await slowReader(d);
    readers.push(third.sock);
    assert.equal(third.status, 503);
    const r = await infer(d, 'tiny', xreq('small'));
    assert.equal(r.status, 503);
    assert.ok(Number(r.headers.get('retry-after')) >= 1);
    assert.match(r.json.error, /unsent answers .*memory-budget/);
    for (const s of readers) s.destroy(); // the answers go with their connections
    assert.equal(await untilUsed(d, 0), 0, 'all given back');
    assert.equal((await infer(d, 'tiny', xreq('small'))).status, 200);
  } finally {
    for (const s of readers) s.destroy();
    assert.equal((await d.stop()).code, 0);
  }
});

test('header-timeout and min-body-rate close slow clients', async () => {
  const d = await start({ args: ['--header-timeout', '1', '--min-body-rate', '1000'] });
  try {
    const h = await open(d.port);
    h.write('GET /v2/health/live HTTP/1.1\r\nHo');
    const drip = setInterval(() => { if (!h.destroyed) h.write('o'); }, 200);
    const b = await open(d.port);
    b.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n');
    const drip2 = setInterval(() => { if (!b.destroyed) b.write('          '); }, 200); // 50 B/s
    const idle = await open(d.port); // a keep-alive connection with nothing to say
    const [ch, cb, ci] = await Promise.all([closedWithin(h, 4000), closedWithin(b, 4000), closedWithin(idle, 4000)]);
    clearInterval(drip);
    clearInterval(drip2);
    assert.ok(ch, 'a request head trickling in is cut at header-timeout');
    assert.ok(cb, 'a body under min-body-rate is cut');
    assert.ok(ci, 'an idle connection is closed at header-timeout');
    assert.match(await d.logged(/request head did not arrive within 1 s \(header-timeout\)/), /request head did not arrive within 1 s \(header-timeout\)/);
    assert.match(await d.logged(/slower than 1000 bytes\/s \(min-body-rate\)/), /closed 1 connection whose body came slower than 1000 bytes\/s \(min-body-rate\); logged 408/);
    // the request cut short is logged and counted 408, as a timeout
    assert.match(await d.logged(/POST \/v2\/models\/tiny\/infer \d+ /), /POST \/v2\/models\/tiny\/infer 408 /);
    const m = await (await fetch(`${d.url}/metrics`)).text();
    assert.match(m, /\nattnd_http_responses_total\{code="408"\} 1\n/);
    // a client that sends its head and body promptly is not touched
    const ok = await raw(d.port, 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.equal(ok.status, 200);
    h.destroy(); b.destroy(); idle.destroy();
  } finally { assert.equal((await d.stop()).code, 0); }
});

// sendRead(d, sock, text): sock sends text to attnd d; true once attnd
// has read of it what it will (handed to the kernel, acked, and attnd's
// side of the socket holding less than was sent), false past a hang's
// bound
async function sendRead(d, sock, text) {
  sock.write(text);
  const n = Buffer.byteLength(text);
  return waitFor(() => !sock.writableLength && !queued(sock.localPort, d.port, 'tx') &&
    queued(d.port, sock.localPort) < n);
}

test('a chunk-size line longer than libmicrohttpd\'s buffer does not stop the loop: others are served, min-body-rate closes it', async () => {
  // libmicrohttpd 0.9.75 cannot move such a connection and asks to be run
  // again at once for as long as it is open; attnd re-armed a 0 ms timer
  // from that timer's callback, which libuv 1.44 runs again before polling:
  // no connection was served, no signal seen, until connection-timeout (60 s)
  const d = await start({ args: ['--header-timeout', '1'] });
  const stuck = connect({ port: d.port, host: '127.0.0.1' });
  stuck.on('error', () => {});
  let code;
  try {
    await new Promise((res) => stuck.on('connect', res));
    assert.ok(await sendRead(d, stuck, `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10;${'a'.repeat(40000)}`),
      'attnd read the stuck connection\'s bytes');
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${d.url}/v2/health/live`, { signal: AbortSignal.timeout(3000 * SLOW) })
        .catch((e) => assert.fail(`request ${i} beside the stuck connection: ${e.message}`));
      assert.equal(r.status, 200);
    }
    assert.match(await d.logged(/slower than 1024 bytes\/s \(min-body-rate\)/), /closed 1 connection whose body came slower than 1024 bytes\/s/);
  } finally {
    stuck.destroy();
    code = (await d.stop()).code;
  }
  assert.equal(code, 0);
});

test('a connection libmicrohttpd cannot move does not keep the loop busy while it waits for min-body-rate', async () => {
  // the same stuck connection at the default header-timeout (20 s): the
  // loop ran libmicrohttpd at once, again and again, half a core or more
  // here, until min-body-rate closed it; now 1 ms apart once nothing moves
  const d = await start();
  const stuck = connect({ port: d.port, host: '127.0.0.1' });
  stuck.on('error', () => {});
  const cpu = () => { // the daemon's user + system time, in s
    const f = readFileSync(`/proc/${d.proc.pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  };
  let code;
  try {
    await new Promise((res) => stuck.on('connect', res));
    assert.ok(await sendRead(d, stuck, `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10;${'a'.repeat(40000)}`),
      'attnd read the stuck connection\'s bytes');
    const c0 = cpu(), t0 = Date.now();
    await sleep(2000);
    const share = (cpu() - c0) / ((Date.now() - t0) / 1000);
    assert.ok(share < 0.25, `the daemon used ${share.toFixed(2)} of a core beside the stuck connection`);
    assert.equal((await fetch(`${d.url}/v2/health/live`, { signal: AbortSignal.timeout(3000 * SLOW) })).status, 200);
  } finally {
    stuck.destroy();
    // libmicrohttpd does not see this connection go until header-timeout
    // (20 s) closes it, and a drain would wait for it: a second SIGTERM
    // once the drain has begun cuts it short (exit 0 all the same)
    d.proc.kill('SIGTERM');
    await d.logged(/draining/);
    code = (await d.stop()).code;
  }
  assert.equal(code, 0);
});

test('a client that closes before its body is complete (FIN with its last bytes) frees its connection, request and reservation at once, logged 499', async () => {
  // Head (Content-Length 1 MB) then none or part of the body, and the FIN
  // at once: libmicrohttpd misses an end that comes with the last data
  // (likely with hundreds of KB: read in many 32 KB turns, the last one
  // after the FIN came),
  // so attnd's sweep asks; before, all three stayed until header-timeout
  // (20 s) / min-body-rate. So did a connection cut inside its head, and
  // an idle one half-closed with its (answered) request.
  // (--inline-conns 4: w's request below runs on the loop and is answered;
  // --drain-ms 2000: a stop with requests left open still ends soon)
  const d = await start({ args: ['--inline-conns', '4', '--drain-ms', '2000'] });
  const socks = [];
  let err = null;
  try {
    const gauges = async () => {
      const m = await (await fetch(`${d.url}/metrics`)).text();
      const g = (name) => Number(new RegExp(`\\n${name} (\\d+)\\n`).exec(m)[1]);
      return { conns: g('attnd_open_connections'), reqs: g('attnd_open_requests'), used: requestsUsed(m), gone: Number(/\nattnd_http_responses_total\{code="499"\} (\d+)\n/.exec(m)?.[1] ?? 0) };
    };
    await gauges(); // the metrics fetch's own keep-alive connection
    const base = await gauges();
    assert.equal(base.used, 0);
    // a whole request, then a half-close: still answered (README)
    const w = await open(d.port);
    socks.push(w);
    const answer = new Promise((resolve) => {
      let buf = '';
      const t = setTimeout(() => resolve(buf), 3000 * SLOW);
      const done = () => { clearTimeout(t); resolve(buf); };
      w.on('data', (c) => { buf += c; if (/\r\n\r\n/.test(buf)) done(); });
      w.on('end', done);
      w.on('error', done);
    });
    const wb = JSON.stringify(xreq('whole'));
    w.end(`POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${wb.length}\r\n\r\n${wb}`);
    assert.match(await answer, /^HTTP\/1\.1 200 /, 'a half-close after the whole request: answered');
    const head = 'POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n';
    const cuts = [0, 1000, 300000, 500000, 700000, 999999];
    for (const n of cuts) {
      const s = await open(d.port);
      s.on('error', () => {});
      s.end(head + '{'.padEnd(n, ' ').slice(0, n)); // data and FIN together
      socks.push(s);
    }
    const h = await open(d.port);
    h.on('error', () => {});
    h.end('POST /v2/models/tiny/infer HTTP/1.1\r\nHo'); // a head cut short
    socks.push(h);
    // (until all six are counted 499 too: the first look may come before
    // attnd has read any of them)
    let g = await gauges();
    for (const until = Date.now() + 2000 * SLOW; Date.now() < until &&
         (g.conns !== base.conns || g.reqs !== base.reqs || g.used !== 0 ||
          g.gone - base.gone < cuts.length);) {
      await sleep(50);
      g = await gauges();
    }
    assert.equal(g.used, 0, 'every Content-Length reservation given back');
    assert.equal(g.reqs, base.reqs, 'no request left open');
    assert.equal(g.conns, base.conns, 'no connection left open (CLOSE-WAIT)');
    assert.equal(g.gone - base.gone, cuts.length, 'each logged and counted 499, a client that went');
    assert.equal((await infer(d, 'tiny', xreq('after'))).status, 200);
  } catch (e) {
    err = e;
  }
  for (const s of socks) s.destroy();
  const st = await d.stop();
  if (err) throw err;
  assert.equal(st.code, 0);
});

test('max-connections-per-ip: one address cannot take every slot', async () => {
  const d = await start({ args: ['--max-connections-per-ip', '10'] });
  const socks = [];
  try {
    for (let i = 0; i < 40; i++) {
      const s = await open(d.port, { localAddress: '127.0.0.2' }).catch(() => null);
      if (s) { s.on('error', () => {}); s.write('GET / HTTP/1.1\r\n'); socks.push(s); }
    }
    // those past the 10 closed by attnd
    const open_ = () => socks.filter((s) => !s.destroyed && !s.readableEnded).length;
    await waitFor(() => open_() <= 10);
    const alive = open_();
    assert.ok(alive <= 10, `${alive} connections of one address stayed open`);
    assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200, 'another address is served');
  } finally {
    for (const s of socks) s.destroy();
    assert.equal((await d.stop()).code, 0);
  }
});

test('a legitimate client is served while 2000 slow connections are open or trying', async () => {
  // fds: 2000 here plus up to max-connections + 64 in attnd
  const soft = Number(/Max open files\s+(\d+)/.exec(readFileSync('/proc/self/limits', 'utf8'))[1]);
  const N = Math.min(2000, Math.max(200, soft - 600));
  // --header-timeout 0: no slow connection is ever closed for its time, so
  // only the eviction frees a place. Locked out, a client is never served
  // (it was told apart from a served one by a 60 s header-timeout against
  // a 40 s limit, a speed); served, it is, however long the load makes it
  const d = await start({ args: ['--max-connections', String(Math.min(1024, N >> 1)), '--header-timeout', '0'] });
  // 40 addresses x 50, in a thread of their own (slow_clients.mjs): each
  // sends a header byte now and then and reconnects when it is closed
  const w = new Worker(new URL('./slow_clients.mjs', import.meta.url), { workerData: { port: d.port, n: N } });
  const gone = new Promise((resolve) => w.once('exit', resolve));
  let opened = 0;
  let failed = null;
  w.on('message', (m) => { opened = m.opened; });
  w.on('error', (e) => { failed = e; });
  try {
    while (opened < N && !failed) await sleep(50);
    assert.ifError(failed);
    // every place taken: attnd closes slow ones for the newcomers
    const evicted = /over max-connections .*closed the ones? waiting longest/;
    assert.match(await d.logged(evicted, 20000), evicted, 'the slow connections filled max-connections');
    // Served, a call that opens a connection waits its turn in the listen
    // backlog behind the attackers' reconnections (about 1,000 at any
    // time), each accepted one evicting a slow one: 1-3 s here, up to 13 s
    // with two CPU hogs beside it on 2 cores. 40 s x SLOW a call is a
    // hang's bound, not a speed. Each call opens its own connection
    // (agent: false): a keep-alive one left idle between calls is itself
    // one waiting for a request head, which attnd may evict for a newcomer
    // as the next call is sent on it (fetch reused one so and got
    // UND_ERR_SOCKET after 4 ms under a 4x CPU throttle).
    const LIMIT = 40000 * SLOW;
    const legit = async (what, path, init = {}) => {
      const t0 = Date.now();
      const { status, text } = await new Promise((resolve, reject) => {
        const q = request(d.url + path, { method: init.method || 'GET', headers: init.headers, agent: false, timeout: LIMIT }, (res) => {
          let b = '';
          res.setEncoding('utf8');
          res.on('data', (c) => { b += c; });
          res.on('end', () => resolve({ status: res.statusCode, text: b }));
          res.on('error', reject);
        });
        q.on('timeout', () => q.destroy(new Error(`no answer within ${LIMIT} ms`)));
        q.on('error', reject);
        q.end(init.body);
      }).catch((e) => assert.fail(`legit client ${what}: ${e.code || e.message} after ${Date.now() - t0} ms\n${d.log().slice(-1500)}`));
      assert.equal(status, 200, `${what}: ${text}`);
    };
    for (let k = 0; k < 3; k++) {
      await legit(`${k} health`, '/v2/health/live');
      await legit(`${k} infer`, '/v2/models/tiny/infer', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(xreq(`legit${k}`)) });
    }
  } finally {
    w.postMessage('stop');
    await gone;
    assert.ifError(failed);
    assert.equal((await d.stop()).code, 0);
  }
});

test('answers tell clients to keep idle connections less than header-timeout (Keep-Alive: timeout=3/4 of it)', async () => {
  const d = await start({ args: ['--header-timeout', '8', '--api-key', 'k'] });
  try {
    const r = await raw(d.port, 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.match(r.text, /\r\nKeep-Alive: timeout=6\r\n/i);
    const k10 = await raw(d.port, 'GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n');
    assert.match(k10.text, /\r\nKeep-Alive: timeout=6\r\n/i, 'HTTP/1.0 asking to keep it');
    // a connection that closes after its answer gets no promise to keep it
    for (const head of ['HTTP/1.1\r\nHost: x\r\nConnection: close', 'HTTP/1.1\r\nHost: x\r\nConnection: TE, Close',
      'HTTP/1.1\r\nHost: x\r\nConnection: close,TE',
      'HTTP/1.0']) {
      const c = await untilClosed(d.port, `GET /v2/health/live ${head}\r\n\r\n`);
      assert.match(c, /^HTTP\/1\.1 200 /, head);
      assert.match(c, /\r\nConnection: close\r\n/i, head);
      assert.doesNotMatch(c, /\r\nKeep-Alive:/i, head);
    }
    // an answer made from the request's head alone (a route's 404 or 405,
    // a preflight, a wrong API key) keeps the connection when the request
    // has no body: a second request on it is answered too
    const next = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    for (const [req, status] of [['GET /v2/nope', 404], ['PUT /v2/health/live', 405],
      ['OPTIONS /v2/models/tiny/infer', 204], ['POST /v2/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n', 404],
      ['POST /v2/repository/models/tiny/unload', 401]]) {
      const text = req.includes('\r\n') ? req : `${req} HTTP/1.1\r\nHost: x\r\n\r\n`;
      const c = await untilClosed(d.port, text + next);
      assert.match(c, new RegExp(`^HTTP/1\\.1 ${status} `), req);
      const first = c.slice(0, c.indexOf('\r\n\r\n'));
      assert.doesNotMatch(first, /\r\nConnection: close/i, req);
      assert.match(first, /\r\nKeep-Alive: timeout=6/i, req);
      assert.match(c, /\r\n\r\n[^]*HTTP\/1\.1 200 /, `${req}: the next request on the connection was answered`);
    }
    // with a body it does not: libmicrohttpd closes the connection of an
    // answer queued before the body, which it then does not read
    for (const [req, status] of [['POST /v2/nope', 404], ['POST /v2/repository/models/tiny/unload', 401],
      ['POST /v2/repository/index', 413]]) {
      const len = status === 413 ? 70000 : 2;
      const auth = status === 413 ? 'Authorization: Bearer k\r\n' : '';
      const c = await untilClosed(d.port, `${req} HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: ${len}\r\n\r\n{}`);
      assert.match(c, new RegExp(`^HTTP/1\\.1 ${status} `), req);
      assert.match(c, /\r\nConnection: close\r\n/i, req);
      assert.doesNotMatch(c, /\r\nKeep-Alive:/i, req);
    }
  } finally { assert.equal((await d.stop()).code, 0); }
});
