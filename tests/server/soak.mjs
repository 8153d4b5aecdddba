// soak.mjs - make soak (not in CI): mixed traffic against one attnd for
// SOAK_SECONDS (default 300), sampling its RSS and open fds every
// SOAK_SAMPLE_MS (2000). Traffic: small and large infers (JSON and binary),
// retains with map reads (a 4 MiB store, so it fills early), uploads and
// unloads, bad requests, slow clients
// (cut by --header-timeout) and clients that vanish mid-body.
// Passes when: no answer is a 5xx other than 503 (and no connection of a
// well-formed request fails), the daemon exits 0 without a sanitizer report
// (run it on build/address/attnd: make SANITIZER=address soak), open fds
// once the traffic stopped equal those before it (+- SOAK_FD_TOL, 4), and
// RSS is flat: the largest sample of the last quarter is at most the
// largest of the first quarter (after warm-up) times 1 + SOAK_RSS_PCT/100
// (10) plus SOAK_RSS_MB (16) MiB. Prints the samples and a summary.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REFS, ROOT, SLOW, binaryRequest, f32bytes, fp32, start } from './helper.mjs';

const SECONDS = Number(process.env.SOAK_SECONDS || 300);
const SAMPLE_MS = Number(process.env.SOAK_SAMPLE_MS || 2000);
const FD_TOL = Number(process.env.SOAK_FD_TOL || 4);
const RSS_PCT = Number(process.env.SOAK_RSS_PCT || 10);
const RSS_MB = Number(process.env.SOAK_RSS_MB || 16);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every client here is 127.0.0.1 (undici's pool grows with the load):
// --max-connections-per-ip 0, as behind a proxy. SOAK_ARGS adds flags.
const d = await start({ args: ['--header-timeout', '5', '--min-body-rate', '1000', '--batch-delay-us', '500',
  '--maps-bytes', '4194304', '--max-connections-per-ip', '0', ...(process.env.SOAK_ARGS || '').split(' ').filter(Boolean)] });
const pid = d.proc.pid;
const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
const fds = () => readdirSync(`/proc/${pid}/fd`).length;

const status = new Map();
const kinds = new Map();
const failures = [];
function note(kind) { kinds.set(kind, (kinds.get(kind) || 0) + 1); }
function count(kind, st) {
  status.set(st, (status.get(st) || 0) + 1);
  note(kind);
  if (st >= 500 && st !== 503) failures.push(`${kind}: ${st}`);
}
async function req(kind, path, init = {}) {
  try {
    const r = await fetch(d.url + path, { ...init, signal: AbortSignal.timeout(30000 * SLOW) });
    const body = Buffer.from(await r.arrayBuffer());
    count(kind, r.status);
    return { status: r.status, body };
  } catch (e) {
    count(kind, 0);
    failures.push(`${kind}: ${e.cause?.code || e.message} at ${new Date().toISOString()}`);
    return { status: 0, body: Buffer.alloc(0) };
  }
}
const json = (o) => ({ method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(o) });

const X = REFS.causal;
const tinyDir = join(ROOT, 'tests', 'server', 'fixtures', 'models', 'tiny');
const upload = JSON.stringify({ parameters: {
  config: readFileSync(join(tinyDir, 'config.json'), 'utf8'),
  'file:model.safetensors': readFileSync(join(tinyDir, 'model.safetensors')).toString('base64'),
} });
const T = 256;
const bigX = f32bytes(Array.from({ length: T * 64 }, (_, i) => Math.sin(i) * 0.5));
const bigReq = binaryRequest({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, 64], parameters: { binary_data_size: bigX.length } }],
  outputs: [{ name: 'y', parameters: { binary_data: true } }, { name: 'attention', parameters: { binary_data: true } }] }, [bigX]);
const sdpa = (n) => ({ inputs: [fp32('q', [n, 4], Array(n * 4).fill(0.5)), fp32('k', [n, 4], Array(n * 4).fill(0.25)), fp32('v', [n, 4], Array(n * 4).fill(1))] });

const workers = {
  async small() { await req('small infer', '/v2/models/tiny/infer', json({ inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } })); },
  async large() {
    await req('large infer', '/v2/models/demo/infer', { method: 'POST', body: bigReq.body, headers: { 'Inference-Header-Content-Length': String(bigReq.headerLen) } });
  },
  async retain() {
    const r = await req('retain', '/v2/models/sdpa/infer', json({ ...sdpa(32), parameters: { retain: true } }));
    if (r.status !== 200) return;
    const id = JSON.parse(r.body).parameters.map_id;
    await req('map read', `/v2/maps/${id}/attention?h=0&max=16`);
    await req('map list', '/v2/maps');
  },
  async upload(i) {
    const name = `soak${i % 3}`;
    await req('upload', `/v2/repository/models/${name}/load`, { method: 'POST', body: upload });
    await req('infer uploaded', `/v2/models/${name}/infer`, json({ inputs: [fp32('x', X.shape, X.x)] }));
    await req('unload', `/v2/repository/models/${name}/unload`, { method: 'POST' });
    await req('index', '/v2/repository/index', { method: 'POST', body: '{}' });
  },
  async bad(i) {
    const cases = [
      ['bad json', '/v2/models/tiny/infer', { method: 'POST', body: '{"inputs": [' }],
      ['bad shape', '/v2/models/tiny/infer', json({ inputs: [fp32('x', [1, 2, 3], [1, 2, 3, 4, 5, 6])] })],
      ['no route', '/v2/nowhere', {}],
      ['body on GET route', '/v2/health/live', { method: 'POST', body: 'x' }],
      ['bad upload', '/v2/repository/models/.x/load', { method: 'POST', body: '{}' }],
      ['bad map query', '/v2/maps/m1-000000/attention?h=zz', {}],
      ['long path', '/v2/models/' + 'a'.repeat(3000), {}],
    ];
    const [k, p, init] = cases[i % cases.length];
    await req(k, p, init);
  },
  async slow() { // a head that never ends: cut by --header-timeout
    await new Promise((res) => {
      const s = connect(d.port, '127.0.0.1');
      s.on('error', () => {});
      s.on('connect', () => s.write('GET /v2/health/live HTTP/1.1\r\nX-Slow: '));
      const t = setInterval(() => s.write('a'), 500);
      s.on('close', () => { clearInterval(t); note('slow client cut'); res(); });
    });
  },
  async vanish() { // half a body, then gone
    await new Promise((res) => {
      const s = connect(d.port, '127.0.0.1');
      s.on('error', () => {});
      s.on('connect', () => {
        s.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"inputs":');
        setTimeout(() => { s.destroy(); note('vanished'); res(); }, 50);
      });
    });
  },
};

const fd0 = fds();
const samples = [];
const t0 = Date.now();
const end = t0 + SECONDS * 1000;
const sampler = setInterval(() => { samples.push({ t: (Date.now() - t0) / 1000, rss: rss(), fds: fds() }); }, SAMPLE_MS);
const loops = Object.entries({ small: 4, large: 1, retain: 2, upload: 1, bad: 2, slow: 2, vanish: 1 }).flatMap(([name, n]) =>
  Array.from({ length: n }, async (_, w) => {
    for (let i = w; Date.now() < end; i += n) await workers[name](i);
  }));
await Promise.all(loops);
clearInterval(sampler);
await sleep(8000); // the last slow clients are cut (header-timeout 5 s), keep-alives idle
samples.push({ t: (Date.now() - t0) / 1000, rss: rss(), fds: fds() });
const fd1 = fds();
const e = await d.stop();

if (process.env.SOAK_LOG) writeFileSync(process.env.SOAK_LOG, d.log()); // attnd's whole log
const mb = (b) => (b / 1048576).toFixed(1);
console.log('t(s)   RSS(MiB)  fds');
for (const s of samples) console.log(`${s.t.toFixed(0).padStart(5)}  ${mb(s.rss).padStart(8)}  ${s.fds}`);
const q = Math.max(1, Math.floor(samples.length / 4));
const firstMax = Math.max(...samples.slice(0, q).map((s) => s.rss));
const lastMax = Math.max(...samples.slice(-q).map((s) => s.rss));
const limit = firstMax * (1 + RSS_PCT / 100) + RSS_MB * 1048576;
console.log(`soak: ${SECONDS} s, ${[...kinds.values()].reduce((a, b) => a + b, 0)} operations: ` +
  [...kinds].map(([k, n]) => `${k} ${n}`).join(', '));
console.log(`soak: statuses ${[...status].sort((a, b) => a[0] - b[0]).map(([k, n]) => `${k}:${n}`).join(' ')}`);
console.log(`soak: RSS first quarter max ${mb(firstMax)} MiB, last quarter max ${mb(lastMax)} MiB (limit ${mb(limit)}); fds before ${fd0}, after ${fd1} (tolerance ${FD_TOL})`);
assert.equal(e.code, 0, d.log().slice(-3000));
if (failures.length) console.log(`soak: ${failures.length} failures; attnd's warnings:\n${d.log().split('\n').filter((l) => / (warn|error) /.test(l)).slice(-30).join('\n')}`);
assert.deepEqual(failures.slice(0, 20), [], 'no 5xx but 503, no failed connection');
assert.ok(Math.abs(fd1 - fd0) <= FD_TOL, `fds: ${fd0} before, ${fd1} after`);
const cut = (re) => (d.log().match(re) || []).length;
console.log(`soak: attnd closed slow connections ${cut(/\(header-timeout\)/g)} times, slow bodies ${cut(/\(min-body-rate\)/g)} times`);
// A sanitizer's allocator (ASan's quarantine) holds freed memory on purpose:
// RSS says nothing there, fds and statuses still do.
if (SLOW > 1) console.log('soak: sanitized build: RSS not judged');
else assert.ok(lastMax <= limit, `RSS grew: ${mb(firstMax)} -> ${mb(lastMax)} MiB`);
console.log('soak: pass');
