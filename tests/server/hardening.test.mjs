// hardening.test.mjs - what hostile clients and crashes must not get
// through (issue 11): upload staging and names, body declarations per route,
// auth before any body, port sharing, slow clients, drain, memory budget.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ATTND, REFS, fp32, infer, maxDiff, modelsDir, post, start } from './helper.mjs';

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
    assert.match(r.stderr, /address in use/);
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
    await sleep(50);
    assert.match(d.log(), /\/v2\/models\/aaaa+\.\.\. \(2011 bytes\)/);
  } finally { assert.equal((await d.stop()).code, 0); }
  let r = spawnSync(ATTND, ['--api-key-file', join(dir, 'absent')], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--api-key-file .*absent: cannot read/);
  writeFileSync(kf, '\n');
  r = spawnSync(ATTND, ['--api-key-file', kf], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /no key on its first line/);
  r = spawnSync(ATTND, ['--help'], { encoding: 'utf8' });
  assert.match(r.stdout, /prefer ATTND_API_KEY or --api-key-file/);
  rmSync(dir, { recursive: true, force: true });
});
