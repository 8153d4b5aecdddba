// fuzz_http.mjs - a bounded, seeded HTTP fuzzer for attnd's REST door; not
// part of `make test` (CI runs it: make fuzz-http, the ASan build, seed 7,
// 90 s). It starts one attnd (ATTND_BIN, e.g.
// build/address+undefined/attnd; --api-key and --cors-origins set so 401s and CORS
// answers come too) and, for ATTND_FUZZ_N batches (default no limit) or
// ATTND_FUZZ_SECONDS (default 600), whichever ends first, sends raw-socket
// cases four at a time: valid requests mutated at random (method, path,
// query, header lines - the framing ones, Connection, Expect, Origin,
// Authorization, Inference-Header-Content-Length - and bodies), pipelined
// runs on one connection (head-answered errors first, then valid requests),
// half-written requests closed or reset, and sequence start/step/end/delete
// interleavings. Every answer must be < 500, a 501 (a method attnd does not
// recognise), a 503 or a 505 (libmicrohttpd's
// to an HTTP/2.0 request line); a well-framed request must be answered (or
// its connection closed) within ATTND_FUZZ_HANG_MS (default 10000), and a
// connection may close before its answers only after one that said
// Connection: close. After each batch /v2/health/live must answer 200; at
// the end SIGTERM must give exit 0 and no sanitizer report.
//   ATTND_BIN=build/address+undefined/attnd ATTND_FUZZ_SEED=7 node tests/server/fuzz_http.mjs
// Each case draws from a generator seeded from the seed and its place
// (batch, client, case): a seed sends the same bytes in every run (the
// summary's digest of them shows it), though the daemon's state between
// cases depends on timing. It prints its seed, and each finding with its
// case's place and the bytes sent (JSON-quoted);
// ATTND_FUZZ_SHOW=503 prints the bodies of the answers of that status.
import { createHash } from 'node:crypto';
import net from 'node:net';
import { mulberry32, sanitizerReport, start } from './helper.mjs';
import { D, gqaModels } from './seq_helper.mjs';

const env = process.env;
const SEED = Number(env.ATTND_FUZZ_SEED || Date.now() % 1e9);
const N = Number(env.ATTND_FUZZ_N || 1e6);
const UNTIL = Date.now() + 1000 * Number(env.ATTND_FUZZ_SECONDS || 600);
const HANG = Number(env.ATTND_FUZZ_HANG_MS || 10000);
const KEY = 'fuzz-key-1', ORIGIN = 'http://ok.example';
// the generator of the case being built (runCase); SEED's own first
let rnd = mulberry32(SEED);
const int = (n) => Math.floor(rnd() * n), pick = (a) => a[int(a.length)];
const findings = [], seen = {};
console.log(`fuzz_http: seed ${SEED}, up to ${N} batches, ${process.env.ATTND_BIN || 'build/default/attnd'}`);

// ---- requests: {method, path, query, headers: [[k, v]], body: Buffer|null, chunked}
const vec = (n) => Array.from({ length: n }, () => Math.round((rnd() * 2 - 1) * 100) / 100);
const j = (o) => Buffer.from(JSON.stringify(o));
const seqIds = ['s1', 's2', '7', 'a%3Fb'];
let TAG = 'x'; // the daemon's map ids are m<n>-TAG (random at its start)
const mapId = () => `m${1 + int(40)}-@TAG@`; // TAG goes in as the case is sent
function seqStep(id, t, o = {}) {
  return j({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, t, D], data: vec(t * D) }],
    outputs: [{ name: 'y' }], parameters: { sequence_id: id, ...o } });
}
// sdpa's parameters.scale (e033b0b) and causal: a float positive and
// finite is taken, anything else refused 400 (never a 5xx)
const sdpaParams = () => (rnd() < 0.3 ? { scale: pick([0.5, 0.25, 3, 1, 1e-45, 1e-46, 3.4e38, 1e39, 0, -1, '0.5', null, true, [], {}]) } : {});
function base() {
  const get = (path, query = '') => ({ method: 'GET', path, query, body: null });
  const post = (path, body) => ({ method: 'POST', path, query: '', body });
  const bin = () => {
    const h = j({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2, 8], parameters: { binary_data_size: 64 } }],
      parameters: { binary_data_output: true } });
    const r = post('/v2/models/tiny/infer', Buffer.concat([h, Buffer.from(new Float32Array(vec(16)).buffer)]));
    r.headers = [['Inference-Header-Content-Length', String(h.length)]];
    return r;
  };
  return pick([
    () => get('/v2/health/live'), () => get('/v2/health/ready'), () => get('/v2'), () => get('/metrics'),
    () => get('/v2/models/tiny'), () => get('/v2/models/tiny/versions/1/ready'), () => get('/v2/models/gqa/config'),
    () => get('/v2/models/stats'), () => get('/v2/models/tiny/stats'), () => get('/'), () => get('/web/app.js'),
    () => get('/v2/maps', pick(['', '?'])), () => get(`/v2/maps/${mapId()}`, pick(['', '?wait=0&timeout_ms=100', '?wait=9&timeout_ms=50'])),
    () => get(`/v2/maps/${mapId()}/attention`, '?b=0&h=0&max=4&format=f32&what=scores'),
    () => get('/v2/sequences'), () => get(`/v2/sequences/${pick(seqIds)}`),
    () => ({ method: 'DELETE', path: `/v2/sequences/${pick(seqIds)}`, query: '', body: null }),
    () => ({ method: 'OPTIONS', path: '/v2/models/tiny/infer', query: '', body: null,
      headers: [['Origin', ORIGIN], ['Access-Control-Request-Method', 'POST']] }),
    () => post('/v2/models/tiny/infer', j({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2, 8], data: vec(16) }] })), bin,
    () => post('/v2/models/sdpa/infer', j({ inputs: [
      { name: 'q', datatype: 'FP32', shape: [2, 4], data: vec(8) }, { name: 'k', datatype: 'FP32', shape: [2, 4], data: vec(8) },
      { name: 'v', datatype: 'FP32', shape: [2, 2], data: vec(4) }], parameters: { retain: true, ...sdpaParams() },
      ...(rnd() < 0.1 ? { outputs: [{ name: 'output', parameters: { classification: pick([0, 2, -1, '2', null, 1.5]) } }] } : {}) })),
    () => post('/v2/repository/index', pick([null, j({}), j({ ready: true })])),
    () => post(`/v2/repository/models/${pick(['tiny', 'gqa'])}/load`, null), () => post(`/v2/repository/models/${pick(['tiny', 'gqa'])}/unload`, j({})),
    () => post('/v2/repository/models/up1/load', j({ parameters: { config: '{"n_heads": 1}', 'file:model.safetensors': pick(['', 'AAAA', '!!']) } })),
    () => post('/v2/models/gqa/infer', seqStep(pick(seqIds), 1 + int(3), pick([{ sequence_start: true }, {}, { sequence_end: true }]))),
  ])();
}

// ---- mutations
const odd = ['', '0', '-1', '1e999', '18446744073709551616', '%00', '%zz', '%2F', 'a'.repeat(300), '\u00e9', 'NaN', '+1', ' 1'];
const qnames = ['b', 'h', 'max', 'format', 'what', 'wait', 'version', 'timeout_ms', 'x', '%62', ''];
function mutQuery() {
  return '?' + Array.from({ length: int(5) }, () => pick([
    () => `${pick(qnames)}=${pick(odd)}`, () => pick(qnames), () => '', () => `=${pick(odd)}`, () => '&&'])()).join('&');
}
function mutPath(p) {
  const seg = p.split('/');
  const i = 1 + int(Math.max(1, seg.length - 1));
  const r = pick([() => { seg[i] = pick(odd); }, () => { seg.splice(i, 0, pick(['..', '', 'versions', '2', '%2e%2e'])); },
    () => { seg.splice(i, 1); }, () => { seg[i] = 'x'.repeat(pick([63, 64, 95, 96, 200, 5000])); }]);
  r();
  return seg.join('/') || '/';
}
const hdrNames = ['Content-Length', 'Transfer-Encoding', 'Connection', 'Expect', 'Origin', 'Authorization',
  'Inference-Header-Content-Length', 'Content-Type', 'Attnd-Sequence-Id', 'Access-Control-Request-Method', 'X-\u00ff', 'Bad Name'];
const hdrVals = ['', 'close', 'keep-alive', 'close, close', 'chunked', 'gzip', 'chunked, chunked', '100-continue', 'bogus',
  ORIGIN, 'http://ok.example.evil', 'null', `Bearer ${KEY}`, `bearer  ${KEY}`, `Bearer ${KEY}x`, 'Bearer', '0', '-1', '99999999999999999999', '5', 'x'.repeat(9000), '\u00ff\u00fe'];
function mutBody(b) {
  const s = b ? b.toString('latin1') : '{}';
  return Buffer.from(pick([
    () => s.slice(0, int(s.length)), () => s.replace(/\d+(\.\d+)?/, pick(['1e400', '123456789012345678901234567890', '-0', '4294967297'])),
    () => '['.repeat(1 + int(20000)) + ']'.repeat(int(3)), () => '{"a":'.repeat(1 + int(5000)) + '1',
    () => s.replace(/"shape":\[[^\]]*\]/, `"shape":${pick(['"x"', '[]', '[-1,8]', '[4294967296,4294967296,8]', '[1,2,8,1,1,1,1,1,1]', '{}', 'null'])}`),
    () => s.replace(/"(data|datatype|inputs|parameters|name)":/, `"$1":${pick(['5', 'null', '"BF16"', '[]', '{}', 'true'])},"_":`),
    () => pick(['[]', '"str"', '42', 'null', '', '\u0000', '{"inputs":[]}', '{"a":1,"a":2}']),
    () => s + '\u0000\u00ff\u0001' + 'A'.repeat(int(100)), () => s + s,
    () => s.replace(/"sequence_(id|start|end|position)":[^,}]*/, `"sequence_$1":${pick(['0', '-1', '1.5', '18446744073709551616', '""', '"a/b"', `"${'q'.repeat(300)}"`, 'true', 'null', '[]'])}`),
  ])(), 'latin1');
}
function mutate(r) {
  r.headers = [...(r.headers || [])];
  for (let k = 1 + int(3); k--;) {
    pick([() => { r.method = pick(['GET', 'POST', 'PUT', 'DELETE', 'HEAD', 'OPTIONS', 'PATCH', 'get', 'G\u00ffT', 'X'.repeat(40)]); },
      () => { r.path = mutPath(r.path); }, () => { r.query = mutQuery(); }, () => { r.body = mutBody(r.body); },
      () => { r.headers.push([pick(hdrNames), pick(hdrVals)]); }, () => { r.noAuth = true; }, () => { r.chunked = true; },
      () => { r.headers.push(['Inference-Header-Content-Length', String(int(r.body ? r.body.length + 2 : 10))]); },
      () => { r.headers.push(['Expect', '100-continue']); }, () => { r.headers.push(['Connection', 'close']); },
      () => { r.version = pick(['HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0', 'HTTP/1.1 x', 'http/1.1']); },
      () => { r.path = pick(['*', 'http://127.0.0.1/v2/health/live', '/v2/health/live#x', '/./v2/health/live']); }])();
  }
  return r;
}
/** The bytes of r, and whether it is well framed (its body is exactly what its head announces). */
function encode(r) {
  const hs = [...(r.headers || [])];
  const framing = hs.some(([k]) => /^(content-length|transfer-encoding)$/i.test(k));
  if (!r.noAuth) hs.unshift(['Authorization', `Bearer ${KEY}`]);
  let body = r.body || Buffer.alloc(0);
  if (!framing && r.chunked) {
    hs.push(['Transfer-Encoding', 'chunked']);
    const parts = [];
    for (let o = 0; o < body.length;) { const n = Math.min(1 + int(body.length), body.length - o); parts.push(`${n.toString(16)}\r\n`, body.subarray(o, o + n), '\r\n'); o += n; }
    body = Buffer.concat([...parts.map((p) => Buffer.from(p)), Buffer.from('0\r\n\r\n')]);
  } else if (!framing && (r.body || r.method === 'POST')) hs.push(['Content-Length', String(body.length)]);
  const head = `${r.method} ${r.path}${r.query || ''} ${r.version || 'HTTP/1.1'}\r\nHost: 127.0.0.1\r\n` + hs.map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n';
  // owed an answer on a connection kept open: nothing a server may close on, or wait for
  const ok = !framing && !r.version && /^\/[!-~]*$/.test(r.path) && /^[A-Z]+$/.test(r.method) &&
    !hs.some(([k, v]) => /^connection$/i.test(k) || (/^expect$/i.test(k) && v !== '100-continue'));
  return { bytes: Buffer.concat([Buffer.from(head, 'latin1'), body]), ok, method: r.method };
}

// ---- the client: write, read every answer, report >= 500 (not 503) and hangs
function parse(buf, methods) {
  const out = [];
  let off = 0;
  for (;;) {
    const he = buf.indexOf('\r\n\r\n', off);
    if (he < 0) return { out, done: false };
    const head = buf.subarray(off, he).toString('latin1');
    const st = Number((/^HTTP\/1\.[01] (\d{3})/.exec(head) || [0, -1])[1]);
    let p = he + 4;
    if (st >= 100 && st < 200) { off = p; continue; }
    const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
    if (methods[out.length] !== 'HEAD' && st !== 204 && st !== 304) {
      if (cl) { if (buf.length < p + Number(cl[1])) return { out, done: false }; p += Number(cl[1]); }
      else if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
        for (let n = 1; n;) {
          const le = buf.indexOf('\r\n', p);
          if (le < 0) return { out, done: false };
          n = parseInt(buf.subarray(p, le).toString(), 16);
          p = le + 2 + n + 2;
          if (buf.length < p) return { out, done: false };
        }
      } else return { out: [...out, { st, head, body: buf.subarray(p) }], done: true };
    }
    out.push({ st, head, body: buf.subarray(he + 4, p) });
    off = p;
  }
}
// exchange: write parts (paced, or then closed or reset when abort), read
// answers until all n came or the server closed; the first expect are
// owed within HANG ms (hung when not), the rest get 500 ms more.
function exchange(parts, methods, n, expect, { abort = false, pace = 0, rand }) {
  return new Promise((resolve) => {
    const sock = net.connect(PORT, '127.0.0.1');
    let buf = Buffer.alloc(0), closed = false, timer, got = 0, grace = null;
    const finish = () => { clearTimeout(timer); clearTimeout(grace); sock.destroy(); resolve({ res: parse(buf, methods).out, closed, hung: !closed && got < expect }); };
    const rest = () => { if (!grace) grace = setTimeout(finish, 500); };
    sock.on('data', (d) => { buf = Buffer.concat([buf, d]); got = parse(buf, methods).out.length; if (got >= n) finish(); else if (got >= expect) rest(); });
    sock.on('error', () => {});
    sock.on('close', () => { closed = true; finish(); });
    sock.on('connect', async () => {
      for (const p of parts) { if (closed) break; sock.write(p); if (pace) await new Promise((r) => setTimeout(r, Math.floor(rand() * pace))); }
      if (abort) { const reset = rand() < 0.5; setTimeout(() => (reset ? sock.resetAndDestroy() : sock.end()), Math.floor(rand() * 30)); }
      timer = setTimeout(finish, abort ? 200 : HANG);
      if (got >= expect) rest();
    });
  });
}
function report(kind, what, bytes, res) {
  const f = `${kind}: ${what}; sent ${JSON.stringify(Buffer.concat(bytes).toString('latin1').slice(0, 1500))}`;
  findings.push(f);
  console.log(`FINDING ${f}\n  answers: ${res.map((x) => x.head.split('\r\n')[0]).join(' | ')}`);
}
const sent = []; // each case's bytes' digest, by its place
async function runCase(place) {
  rnd = mulberry32((SEED ^ Math.imul(place + 1, 0x9e3779b1)) >>> 0);
  const rand = rnd; // runCase's draws before its first await are its own; exchange's later ones use rand
  const kind = pick(['mutated', 'mutated', 'pipeline', 'half', 'sequence', 'valid']);
  let reqs;
  if (kind === 'sequence') {
    const id = pick(seqIds);
    reqs = Array.from({ length: 2 + int(5) }, () => pick([
      () => ({ method: 'POST', path: '/v2/models/gqa/infer', body: seqStep(id, 1 + int(4), pick([{ sequence_start: true }, {}, {}, { sequence_end: true }, { sequence_start: true, sequence_end: true }, { sequence_position: int(8) }])) }),
      () => ({ method: 'DELETE', path: `/v2/sequences/${id}`, body: null }), () => ({ method: 'GET', path: `/v2/sequences/${id}`, body: null })])());
  } else if (kind === 'pipeline') {
    const bad = () => pick([{ method: 'GET', path: '/nope' }, { method: 'PUT', path: '/v2/models/tiny' }, { method: 'GET', path: '/v2/maps', query: '?x=1' },
      { method: 'GET', path: '/v2/sequences/s1', query: '?a&a' }, { method: 'GET', path: '/v2/models/tiny/versions/2' }, { method: 'GET', path: '/v2/maps', noAuth: true },
      { method: 'OPTIONS', path: '/v2/health/live', headers: [['Origin', ORIGIN]] }, { method: 'DELETE', path: '/v2/sequences/nosuch', headers: [['Content-Length', '0']] }]);
    reqs = Array.from({ length: 2 + int(6) }, () => (rnd() < 0.5 ? { ...bad() } : base()));
    if (rnd() < 0.3) reqs[int(reqs.length)] = mutate(base());
  } else reqs = [kind === 'valid' ? base() : mutate(base())];
  const enc = reqs.map(encode);
  let parts = enc.map((e) => e.bytes);
  let expect = enc.findIndex((e) => !e.ok);
  expect = expect < 0 ? enc.length : expect; // past an ill-framed request, anything goes
  const half = kind === 'half';
  if (half) { const b = parts[0]; parts = [b.subarray(0, int(b.length))]; expect = 0; }
  else if (rnd() < 0.3) parts = Buffer.concat(parts).toString('latin1').match(/[\s\S]{1,97}/g).map((s) => Buffer.from(s, 'latin1'));
  sent[place] = createHash('sha1').update(Buffer.concat(parts)).digest('hex');
  parts = parts.map((b) => Buffer.from(b.toString('latin1').split('@TAG@').join(TAG), 'latin1'));
  const where = `case ${place} (batch ${Math.floor(place / 20)})`;
  const { res, closed, hung } = await exchange(parts, enc.map((e) => e.method), half ? 0 : enc.length, expect, { abort: half, pace: rnd() < 0.2 ? 20 : 0, rand });
  for (const x of res) {
    seen[x.st] = (seen[x.st] || 0) + 1;
    if (String(x.st) === env.ATTND_FUZZ_SHOW) console.log(`${x.st}: ${x.body.subarray(0, 300)}`);
  }
  for (const x of res) if (x.st < 0 || (x.st >= 500 && x.st !== 501 && x.st !== 503 && x.st !== 505)) report(`${kind}, ${where}`, `status ${x.st}`, parts, res);
  if (hung) report(`${kind}, ${where}`, `${res.length} of ${expect} answered in ${HANG} ms`, parts, res);
  // a connection closed before the answers owed, after one that did not say Connection: close
  const last = res[res.length - 1];
  // (bytes left unread at a close - a body answered from its head, requests pipelined behind
  // one that closes - no longer excuse it: attnd lingers, server/linger.c)
  if (!hung && closed && res.length < expect && !half &&
      (!last || !/\r\nconnection: *close/i.test(last.head)))
    report(`${kind}, ${where}`, `closed after ${res.length} of ${expect} answers without Connection: close`, parts, res);
}

const d = await start({ dir: gqaModels(), args: ['--api-key', KEY, '--cors-origins', ORIGIN, '--maps-wait-ms', '1000'] });
const PORT = d.port;
TAG = (await (await fetch(`${d.url}/v2/models/sdpa/infer`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
  body: JSON.stringify({ inputs: [['q', [1, 2]], ['k', [1, 2]], ['v', [1, 1]]].map(([name, shape]) => ({ name, datatype: 'FP32', shape, data: vec(shape[1]) })),
    parameters: { retain: true } }) })).json()).parameters.map_id.split('-')[1];
let batches = 0, cases = 0;
for (; batches < N && Date.now() < UNTIL; batches++) {
  await Promise.all(Array.from({ length: 4 }, async (_, c) => { for (let k = 0; k < 5; k++, cases++) await runCase(batches * 20 + c * 5 + k); }));
  const live = await fetch(`${d.url}/v2/health/live`).then((r) => r.status, (e) => String(e));
  if (live !== 200) { findings.push(`batch ${batches}: /v2/health/live gave ${live}`); console.log(`FINDING live ${live}\n${d.log().slice(-3000)}`); break; }
  if (batches % 200 === 0) console.log(`batch ${batches}, ${cases} cases, ${findings.length} findings`);
}
let r;
// attnd's access handler returned MHD_NO (nothing here sends a body far past its limit)
if (/internal error/.test(d.log())) findings.push(`libmicrohttpd closed connections: ${d.log().match(/.*internal error.*/g).join('; ')}`);
try { r = await d.stop('SIGTERM'); } catch (e) { findings.push(`stop: ${sanitizerReport(d.log()) || e.message.slice(0, 4000)}`); }
if (r && r.code !== 0) findings.push(`exit ${JSON.stringify(r)}`);
console.log(`fuzz_http: seed ${SEED}, ${batches} batches, ${cases} cases (their bytes' digest ${createHash('sha1').update(sent.join('')).digest('hex').slice(0, 12)}: the same for the same seed and batches), statuses ${JSON.stringify(seen)}, ${findings.length} findings${findings.length ? ':\n' + findings.join('\n') : ''}`);
process.exit(findings.length ? 1 : 0);
