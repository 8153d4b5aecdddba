// adversarial.test.mjs - a bounded randomized adversarial client. Sends
// ATTND_FUZZ_N (default 1500) mutated requests (seeded PRNG, seed printed,
// ATTND_FUZZ_SEED to replay; wall time capped at ATTND_FUZZ_SECONDS, 40 s)
// over raw TCP, and requires every answer to be a well-formed HTTP response
// with a status in {200, 400, 404, 405, 413, 414, 501, 503}, a JSON {"error": "..."}
// body for errors, and the status each generated case expects: every
// mutator states it (expect: the statuses, why: when more than one can be
// right, e.g. a flipped byte that leaves the JSON valid). Every 50
// mutations a known-good sdpa (seed example) and demo request must come back
// exact. At the end: /v2/health/live, SIGTERM exit 0, and no sanitizer or
// LeakSanitizer report in the daemon's stderr.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SANITIZER_REPORT, SLOW, mulberry32, start } from './helper.mjs';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'models', 'tiny');

const N = Number(process.env.ATTND_FUZZ_N || 1500);
const SECONDS = Number(process.env.ATTND_FUZZ_SECONDS || 40);
const WAVE = Number(process.env.ATTND_FUZZ_WAVE || 4);
const SEED = Number(process.env.ATTND_FUZZ_SEED || (Date.now() % 0x7fffffff));
const ALLOWED = new Set([200, 400, 404, 405, 413, 414, 501, 503]); // 414: a path over 1 KiB

const MAX_JSON = 200000, MAX_BODY = 400000;
let d;
before(async () => {
  d = await start({ args: ['--max-json-body', String(MAX_JSON), '--max-body', String(MAX_BODY)] });
});
after(async () => {
  if (!d) return;
  const r = await d.stop();
  assert.equal(r.code, 0, `exit ${JSON.stringify(r)}\n${d.log()}`);
  assert.doesNotMatch(d.log(), SANITIZER_REPORT, d.log());
});

/**
 * raw(port, bytes, {timeout, closeAfter}) -> {status, headers, body} or
 * {closed: true} / {timedOut: true}. Sends the bytes as they are (a full
 * HTTP request) and reads until the server closes or one whole response
 * (Content-Length or chunked) has arrived. closeAfter: hang up after that
 * many ms without waiting for an answer (slowloris-ish partial body).
 */
function raw(port, bytes, opts = {}) {
  const timeout = opts.timeout || 15000 * SLOW;
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let done = false;
    const finish = (r) => { if (done) return; done = true; clearTimeout(t); s.destroy(); resolve(r); };
    const t = setTimeout(() => finish(opts.closeAfter ? { closed: true } : { timedOut: true }),
      opts.closeAfter || timeout);
    s.on('error', () => finish(parse(buf) || { closed: true, bytes: buf.length }));
    s.on('data', (c) => { buf = Buffer.concat([buf, c]); const r = parse(buf); if (r) finish(r); });
    s.on('end', () => finish(parse(buf, true) || { closed: true, bytes: buf.length, text: buf.toString('latin1').slice(0, 200) }));
    s.write(bytes);
  });
}

/** One HTTP/1.1 response from buf, or null if incomplete; {malformed} if not HTTP. */
function parse(buf, eof = false) {
  const he = buf.indexOf('\r\n\r\n');
  if (he < 0) return eof && buf.length ? { malformed: buf.toString('latin1').slice(0, 200) } : null;
  const lines = buf.subarray(0, he).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3}) /.exec(lines[0] + ' ');
  if (!m) return { malformed: lines[0] };
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = buf.subarray(he + 4);
  if (headers['transfer-encoding'] === 'chunked') {
    const parts = [];
    let off = 0;
    for (;;) {
      const e = body.indexOf('\r\n', off);
      if (e < 0) return eof ? { malformed: 'truncated chunked body' } : null;
      const n = parseInt(body.subarray(off, e).toString(), 16);
      if (Number.isNaN(n)) return { malformed: 'bad chunk size' };
      if (n === 0) break;
      if (body.length < e + 2 + n + 2) return eof ? { malformed: 'truncated chunk' } : null;
      parts.push(body.subarray(e + 2, e + 2 + n));
      off = e + 2 + n + 2;
    }
    body = Buffer.concat(parts);
  } else if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    if (body.length < n) return eof ? { malformed: `body ${body.length} < Content-Length ${n}` } : null;
    body = body.subarray(0, n);
  } else if (!eof) {
    return null;
  }
  return { status: Number(m[1]), headers, body };
}

/** A full request: method, path, body (string or Buffer), extra header lines. */
function request(method, path, body, headers = {}) {
  const b = body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1');
  const h = { Host: '127.0.0.1', Connection: 'close', ...headers };
  if (body !== undefined && !('Content-Length' in h) && !('Transfer-Encoding' in h)) h['Content-Length'] = String(b.length);
  let head = `${method} ${path} HTTP/1.1\r\n`;
  for (const [k, v] of Object.entries(h)) if (v !== null) head += `${k}: ${v}\r\n`;
  return Buffer.concat([Buffer.from(head + '\r\n', 'latin1'), b]);
}

const f32 = (a) => Buffer.from(new Float32Array(a).buffer);

/** Every element of little-endian FP32/BF16/FP16 bytes finite (exponent not all ones). */
function finite(buf, dt) {
  const w = dt === 'FP32' ? 4 : 2;
  for (let i = 0; i + w <= buf.length; i += w) {
    const hi = buf.readUInt16LE(i + w - 2);
    if (dt === 'FP16' ? (hi & 0x7c00) === 0x7c00 : (hi & 0x7f80) === 0x7f80) return false;
  }
  return true;
}

// The seed's first worked example through sdpa (seeds/*.txt): its output.
const SEED_REQ = {
  inputs: [
    { name: 'q', datatype: 'FP32', shape: [2, 4], data: [2, 0, 2, 0, 0, 4, 0, 2] },
    { name: 'k', datatype: 'FP32', shape: [2, 4], data: [1, 0, 1, 0, 0, 1, 0, 0] },
    { name: 'v', datatype: 'FP32', shape: [2, 2], data: [1, 2, 3, 0] },
  ],
  outputs: [{ name: 'output' }],
};
const e2 = Math.exp(2), sa = e2 / (e2 + 1), sb = 1 / (e2 + 1);
const SEED_OUT = [sa + 3 * sb, 2 * sa, sb + 3 * sa, 2 * sb];

/** Check a known-good answer: 200 and within 1e-6 of the reference. */
function checkGood(r, ref, what) {
  assert.equal(r.status, 200, `${what}: ${JSON.stringify(r).slice(0, 400)}`);
  const j = JSON.parse(r.body.toString());
  const o = j.outputs[0];
  assert.equal(o.data.length, ref.length, what);
  for (let i = 0; i < ref.length; i++) assert.ok(Math.abs(o.data[i] - ref[i]) < 1e-6, `${what}: [${i}] ${o.data[i]} != ${ref[i]}`);
  return o.data;
}

/**
 * The contract of any answer to case m: a well-formed response, a status in
 * ALLOWED and in m.expect (503 also where 200 is expected: the queue may be
 * full), and a JSON {"error"} body for errors (except the HTTP library's own
 * framing errors, m.framing). Returns a problem string or null.
 */
function contract(r, m) {
  if (r.timedOut) return 'no answer (hang)';
  if (r.malformed) return `malformed HTTP response: ${r.malformed}`;
  if (r.closed) return `connection closed without a response (${r.bytes || 0} bytes)`;
  if (!ALLOWED.has(r.status)) return `status ${r.status}: ${r.body.toString().slice(0, 300)}`;
  const want = m.expect.includes(200) ? [...m.expect, 503] : m.expect;
  if (!want.includes(r.status))
    return `expected ${m.expect.join(' or ') || 'no answer'}${m.why ? ` (${m.why})` : ''}, got ${r.status}: ${r.body.toString().slice(0, 300)}`;
  if (r.status !== 200 && !m.framing) {
    let j;
    try { j = JSON.parse(r.body.toString()); } catch { return `error body is not JSON: ${r.body.toString().slice(0, 200)}`; }
    if (!j || typeof j.error !== 'string' || !j.error) return `error body without "error": ${r.body.toString().slice(0, 200)}`;
  }
  return null;
}

// --- the mutators. Each returns {bytes, expect, why?, what, closeAfter?}:
// expect lists the statuses the API's rules give that case (README, API.md),
// why says when several can be right. base is {model, json, bin?}. --------
const OK = [200], BAD = [400];
function mutators(rnd, ctx) {
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const int = (n) => Math.floor(rnd() * n);
  const clone = (o) => JSON.parse(JSON.stringify(o));
  const demoX = (T) => Array.from({ length: T * ctx.dModel }, () => Math.round((rnd() * 2 - 1) * 100) / 100);
  const bases = () => {
    if (rnd() < 0.5) {
      return { model: 'sdpa', json: clone(SEED_REQ) };
    }
    const T = 1 + int(4);
    return { model: 'demo', json: { inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, ctx.dModel], data: demoX(T) }] } };
  };
  const infer = (m) => `/v2/models/${m}/infer`;
  const post = (m, body, h) => request('POST', infer(m), body, { 'Content-Type': 'application/json', ...h });
  /** The binary form of a JSON request: header + raw FP32 tensors. */
  const toBinary = (json) => {
    const head = clone(json);
    const tensors = [];
    for (const i of head.inputs) {
      tensors.push(f32(i.data));
      i.parameters = { binary_data_size: i.data.length * 4 };
      delete i.data;
    }
    return { head, tensors };
  };
  const sendBinary = (m, head, tensors, hlenDelta = 0, hlenOverride) => {
    const h = Buffer.from(JSON.stringify(head));
    return request('POST', infer(m), Buffer.concat([h, ...tensors]), {
      'Content-Type': 'application/octet-stream',
      'Inference-Header-Content-Length': hlenOverride !== undefined ? hlenOverride : String(h.length + hlenDelta),
    });
  };
  const uploadReq = (st, cfg, what, expect, why) => ({
    bytes: request('POST', `/v2/repository/models/fz${int(4)}/load`,
      JSON.stringify({ parameters: { config: cfg, 'file:model.safetensors': st.toString('base64') } }), { 'Content-Type': 'application/json' }),
    expect, why, what: `upload ${what}`,
  });
  const BAD_SHAPES = [[], [0], [-1, 4], [0, 4], [2, 0], [2 ** 31, 4], [2 ** 32 + 2, 4], [2 ** 62, 2 ** 62],
    [65536, 65536, 65536, 65536], [1e30, 4], [2.5, 4], ['2', 4], [null, 4], [true, 4], 'x', null, 7, {},
    [9007199254740993, 4], [-9223372036854775808, 4], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4],
    [2, 4, 0, 0], [-2, -4], [2147483647, 2147483647]];
  // a shape of positive integers whose element count passes request-memory
  // (the default's 536870912 / 4 floats) is 413, as a request over it is;
  // one that overflows 64 bits, or is not such a shape, 400
  const shapeExpect = (shape) => {
    if (!Array.isArray(shape) || !shape.length || shape.some((d) => !Number.isInteger(d) || d <= 0 || d >= 1e21)) return BAD;
    const n = shape.reduce((a, d) => a * BigInt(d), 1n);
    return n >= 2n ** 64n || n <= 134217728n ? BAD : [413];
  };
  const BAD_TYPES = ['FP64', 'INT32', 'BOOL', 'BYTES', 'fp32', '', 'FP32\u0000', 5, null, [], 'UINT8', 'FP16'];
  const BAD_NUMS = ['NaN', 'Infinity', '-Infinity', 'nan', '1e999', '-1e999', '0x10', '01', '.5', '+1', '1e', '--1', 'undefined'];
  const huge = [2 ** 53, -1, 1e300, 2 ** 63, 2 ** 32, 0, '16', 1.5, null, -(2 ** 31)];

  return [
    // the unmutated request as JSON, with and without chunked transfer
    function valid() {
      const b = bases();
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: OK, what: 'valid json ' + b.model };
    },
    function chunked() {
      const b = bases();
      const body = Buffer.from(JSON.stringify(b.json));
      let chunks = '';
      let off = 0;
      const parts = [];
      while (off < body.length) {
        const n = 1 + int(200);
        const c = body.subarray(off, off + n);
        parts.push(Buffer.from(c.length.toString(16) + '\r\n'), c, Buffer.from('\r\n'));
        off += n;
      }
      parts.push(Buffer.from('0\r\n\r\n'));
      chunks = Buffer.concat(parts);
      return { bytes: post(b.model, chunks, { 'Transfer-Encoding': 'chunked' }), expect: OK, what: 'chunked ' + b.model };
    },
    function validBinary() {
      const b = bases();
      const { head, tensors } = toBinary(b.json);
      return { bytes: sendBinary(b.model, head, tensors), expect: OK, what: 'valid binary ' + b.model };
    },
    function truncate() {
      const b = bases();
      const s = JSON.stringify(b.json);
      return { bytes: post(b.model, s.slice(0, int(s.length))), expect: BAD, what: 'truncated json' };
    },
    function truncateBinary() {
      const b = bases();
      const { head, tensors } = toBinary(b.json);
      const full = sendBinary(b.model, head, tensors);
      const h = full.indexOf('\r\n\r\n') + 4;
      const body = full.subarray(h, h + int(full.length - h));
      const hl = Buffer.from(JSON.stringify(head)).length;
      return { bytes: request('POST', infer(b.model), body, { 'Inference-Header-Content-Length': String(hl) }), expect: BAD, what: 'truncated binary' };
    },
    function byteFlip() {
      const b = bases();
      const s = Buffer.from(JSON.stringify(b.json));
      for (let k = 1 + int(4); k > 0; k--) s[int(s.length)] = int(256);
      return { bytes: post(b.model, s), expect: [200, 400], why: 'a flip inside a number or a string can leave a valid request', what: 'byte flips' };
    },
    function badShape() {
      const b = bases();
      const i = pick(b.json.inputs);
      i.shape = pick(BAD_SHAPES);
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: shapeExpect(i.shape), what: `shape ${JSON.stringify(i.shape)}` };
    },
    function badShapeBinary() {
      const b = bases();
      const { head, tensors } = toBinary(b.json);
      const i = pick(head.inputs);
      i.shape = pick(BAD_SHAPES);
      return { bytes: sendBinary(b.model, head, tensors), expect: shapeExpect(i.shape), what: `binary shape ${JSON.stringify(i.shape)}` };
    },
    function badType() {
      const b = bases();
      const i = pick(b.json.inputs);
      i.datatype = pick(BAD_TYPES);
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: BAD, what: `datatype ${JSON.stringify(i.datatype)}` };
    },
    function countMismatch() {
      const b = bases();
      const i = pick(b.json.inputs);
      if (rnd() < 0.5) i.data = i.data.slice(0, int(i.data.length));
      else i.data = i.data.concat(Array.from({ length: 1 + int(50) }, () => 1));
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: BAD, what: 'data count mismatch' };
    },
    function nestedGarbage() {
      const b = bases();
      const i = pick(b.json.inputs);
      const g = pick([{ a: 1 }, 'str', null, true, [[1, [2, [3]]]], [null], ['1'], [{}], [[]], [true, false]]);
      if (rnd() < 0.5) i.data = g; else i.data[int(i.data.length)] = g;
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: BAD, what: `garbage data ${JSON.stringify(g)}` };
    },
    function deepNesting() {
      const inner = pick(['[', '{"a":']);
      const depth = pick([64, 1000, 20000, inner === '[' ? 90000 : 35000]); // under --max-json-body
      const s = `{"inputs":[{"name":"q","datatype":"FP32","shape":[1],"data":${inner.repeat(depth)}1${(inner === '[' ? ']' : '}').repeat(depth)}}]}`;
      // refused by the decoder's depth limit, or past --max-json-body first
      return { bytes: post(pick(['sdpa', 'demo']), s), expect: s.length > MAX_JSON ? [413] : BAD, what: `nesting ${depth} (${s.length} bytes)` };
    },
    function duplicateKeys() {
      const b = bases();
      const s = JSON.stringify(b.json);
      const dup = pick([
        s.replace('{"inputs":', '{"inputs":[],"inputs":'),
        s.replace('"shape":', '"shape":[99,99],"shape":'),
        s.replace('"name":', '"name":"zz","name":'),
      ]);
      // the decoder refuses duplicate keys (README, "Protocol details"): 400
      return { bytes: post(b.model, dup), expect: BAD, what: 'duplicate keys' };
    },
    function hugeBinarySize() {
      const b = bases();
      const { head, tensors } = toBinary(b.json);
      pick(head.inputs).parameters.binary_data_size = pick(huge);
      return { bytes: sendBinary(b.model, head, tensors), expect: BAD, what: 'binary_data_size' };
    },
    function headerLength() {
      const b = bases();
      const { head, tensors } = toBinary(b.json);
      const which = int(4);
      const ov = ['-1', '99999999999999999999', 'abc', '0', '', '1e3', ' 12', '18446744073709551617'][int(8)];
      // a header length past --max-json-body is 413 before the body is read
      const big = /^\d+$/.test(ov) && Number(ov) > MAX_JSON;
      return which === 0 ? { bytes: sendBinary(b.model, head, tensors, 1 + int(100000)), expect: BAD, what: 'header length past body' }
        : which === 1 ? { bytes: sendBinary(b.model, head, tensors, -1 - int(10)), expect: BAD, what: 'header length short' }
          : { bytes: sendBinary(b.model, head, tensors, 0, ov), expect: big ? [413] : BAD, what: `header length ${JSON.stringify(ov)}` };
    },
    function badUtf8() {
      const b = bases();
      const s = JSON.stringify(b.json);
      const at = s.indexOf('"name":"') + 8;
      const junk = pick([Buffer.from([0xff]), Buffer.from([0xc0, 0x80]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0xe2, 0x82]), Buffer.from('\\u0000')]);
      const body = Buffer.concat([Buffer.from(s.slice(0, at)), junk, Buffer.from(s.slice(at))]);
      return { bytes: post(b.model, body), expect: BAD, what: 'bad utf-8 in name' };
    },
    function nanLiteral() {
      const b = bases();
      const s = JSON.stringify(b.json);
      const lit = pick(BAD_NUMS);
      // not JSON numbers, or (1e999) not finite as float32: 400 either way
      return { bytes: post(b.model, s.replace(/"data":\[(-?[0-9.]+)/, `"data":[${lit}`)), expect: BAD, what: `number ${lit}` };
    },
    function unknownOutput() {
      const b = bases();
      b.json.outputs = pick([[{ name: 'zzz' }], 'output', [{}], [{ name: 5 }], [null], [{ name: 'y', parameters: 'x' }], {}, [{ name: '' }]]);
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: BAD, what: `outputs ${JSON.stringify(b.json.outputs)}` };
    },
    function badParameters() {
      const b = bases();
      b.json.parameters = pick([{ causal: 'yes' }, { causal: 3 }, 'x', [], { binary_data_output: 'x' }, { retain: 1 }, { tokens: 'x', retain: true }]);
      // each is the wrong type for its parameter (or parameters is no object)
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: BAD, what: `parameters ${JSON.stringify(b.json.parameters)}` };
    },
    function wrongMethod() {
      const b = bases();
      const m = pick(['GET', 'PUT', 'DELETE', 'PATCH', 'FOO']);
      // one HTTP defines: 405; one it does not: 501 (not implemented)
      return { bytes: request(m, infer(b.model), JSON.stringify(b.json)), expect: [m === 'FOO' ? 501 : 405], what: `method ${m}` };
    },
    function badPath() {
      // no such route or model: 404; a GET route posted to: 405; a model
      // name '..' on a load route: 400; a path over 1 KiB: 414
      const [p, status] = pick([['/v2/models/../infer', 404], ['/v2/models/%2e%2e/infer', 404], ['/v2/models/..%2f..%2fetc/infer', 404],
        ['/v2/models/%00/infer', 404], ['/v2/models//infer', 404], ['/v2/models/sdpa/versions/2/infer', 404],
        ['/v2/models/sdpa/versions/../infer', 404], ['/v2/models/' + 'a'.repeat(5000) + '/infer', 414],
        ['/v2/repository/models/..%2f/load', 404], ['/v2/repository/models/../load', 400], ['/v2/maps/%2e%2e/attention', 405],
        ['/v2/maps/-1/attention?b=-1&h=99999999999', 405], ['/v2/models/sdpa/infer/extra', 404], ['/v2//models/sdpa/infer', 404],
        ['/%ff%fe', 404], ['/v2/models/nope/infer', 404], ['/v2/models/%2e%2e%2fdemo/infer', 404]]);
      const b = bases();
      return { bytes: request('POST', p, JSON.stringify(b.json), { 'Content-Type': 'application/json' }), expect: [status], what: `path ${p.slice(0, 60)}` };
    },
    function oversize() {
      // Over --max-json-body / --max-body: an early 413. The daemon answers
      // before reading the rest and closes, so the kernel may reset the
      // connection before we read the answer: a hang-up is accepted here.
      const b = bases();
      const n = pick([200001, 400001, 1 << 20]);
      const s = JSON.stringify(b.json);
      return { bytes: post(b.model, s + ' '.repeat(Math.max(0, n - s.length))), expect: [413], early: true, what: `oversize ${n}` };
    },
    function lyingLength() {
      // Content-Length far past the limit with a small body: 413 at once;
      // one that is no number: the HTTP library's own 400.
      const b = bases();
      const n = pick(['400001', '99999999999', '18446744073709551615', '-1', 'abc']);
      return { bytes: post(b.model, JSON.stringify(b.json), { 'Content-Length': n }), expect: /^\d+$/.test(n) ? [413] : BAD, framing: true, closeAfter: 2000, what: `Content-Length ${n}` };
    },
    function demoExtras() {
      // context / lengths / context_lengths / mask with random, often wrong,
      // values; validity is worked out here from the API's rules.
      const T = 1 + int(3), S = 1 + int(3), B = 1 + int(2);
      let ok = true;
      let Sx = T; // the key length: S with a context, else T
      const inputs = [{ name: 'x', datatype: 'FP32', shape: [B, T, ctx.dModel], data: Array.from({ length: B * T * ctx.dModel }, () => rnd() - 0.5) }];
      if (rnd() < 0.5) {
        const sh = pick([[B, S, ctx.dModel], [B, S, ctx.dModel], [B, S, ctx.dModel + 1], [B + 1, S, ctx.dModel], [S, ctx.dModel]]);
        inputs.push({ name: 'context', datatype: 'FP32', shape: sh, data: Array.from({ length: sh.reduce((x, y) => x * y, 1) }, () => rnd()) });
        if (sh.join() !== [B, S, ctx.dModel].join()) ok = false;
        Sx = S;
      }
      const lens = (name, max) => {
        const data = Array.from({ length: rnd() < 0.9 ? B : B + 1 }, () => pick([max, max, 0, 1, -1, max + 1, 2 ** 31 - 1, -(2 ** 31), 1.5, '1', null]));
        const datatype = pick(['INT32', 'INT32', 'INT32', 'FP32']);
        if (datatype !== 'INT32' || data.length !== B || !data.every((v) => Number.isInteger(v) && v >= 0 && v <= max)) ok = false;
        inputs.push({ name, datatype, shape: [B], data });
      };
      if (rnd() < 0.5) lens('lengths', T);
      if (rnd() < 0.5) {
        lens('context_lengths', Sx);
        if (!inputs.some((i) => i.name === 'context')) ok = false; // only with a context
      }
      if (rnd() < 0.5) {
        const sh = pick([[B, T, Sx], [T, Sx], [B, T, Sx], [T, Sx], [Sx, T + 1], [1], [B, T, Sx, 1]]);
        const datatype = pick(['BOOL', 'BOOL', 'BOOL', 'INT32']);
        const data = Array.from({ length: sh.reduce((x, y) => x * y, 1) }, () => (rnd() < 0.95 ? rnd() < 0.7 : pick([0, 1, null])));
        const shOk = sh.join() === [B, T, Sx].join() || sh.join() === [T, Sx].join();
        if (!shOk || datatype !== 'BOOL' || !data.every((v) => typeof v === 'boolean')) ok = false;
        inputs.push({ name: 'mask', datatype, shape: sh, data });
      }
      if (rnd() < 0.1) { inputs.push(clone(inputs[0])); ok = false; } // a duplicate input name
      if (rnd() < 0.1) { inputs.push({ name: 'zzz', datatype: 'FP32', shape: [1], data: [1] }); ok = false; }
      const outputs = rnd() < 0.5 ? undefined : ['y', 'attention', 'scores', 'q', 'k', 'v'].filter(() => rnd() < 0.4).map((name) => ({ name, parameters: rnd() < 0.3 ? { binary_data: true } : undefined }));
      const causal = rnd() < 0.3;
      const body = { inputs, outputs, parameters: causal ? { causal: true } : undefined };
      // causal with S != T is top-left aligned (README, "Engine"): still valid
      return { bytes: post('demo', JSON.stringify(body)), expect: ok ? OK : BAD, what: `demo extras ${JSON.stringify(inputs.map((i) => [i.name, i.datatype, i.shape]))}` };
    },
    function sdpaExtras() {
      // batch dims, mismatched B/H/S/d between q, k, v, masks
      const dims = () => pick([[], [2], [2, 3], [1, 1], [3]]);
      const bq = dims(), bk = rnd() < 0.7 ? bq : dims(), bv = rnd() < 0.7 ? bk : dims();
      const T = 1 + int(4), S = 1 + int(4), dk = 1 + int(5), dv = 1 + int(5);
      const Sk = rnd() < 0.85 ? S : S + 1, dkk = rnd() < 0.85 ? dk : dk + 1;
      let ok = bq.join() === bk.join() && bq.length === bk.length && bk.join() === bv.join() && bk.length === bv.length && Sk === S && dkk === dk;
      const t = (name, sh) => ({ name, datatype: 'FP32', shape: sh, data: Array.from({ length: sh.reduce((a, b) => a * b, 1) }, () => rnd() * 4 - 2) });
      const inputs = [t('q', [...bq, T, dk]), t('k', [...bk, Sk, dkk]), t('v', [...bv, S, dv])];
      if (rnd() < 0.4) {
        const sh = pick([[T, S], [...bq, T, S], [S, T + 1], [T]]);
        if (sh.join() !== [T, S].join() && sh.join() !== [...bq, T, S].join()) ok = false;
        inputs.push({ name: 'mask', datatype: 'BOOL', shape: sh, data: Array.from({ length: sh.reduce((a, b) => a * b, 1) }, () => rnd() < 0.7) });
      }
      const outputs = ['output', 'attention', 'scores'].filter(() => rnd() < 0.5).map((name) => ({ name }));
      const causal = rnd() < 0.3;
      const body = { inputs: rnd() < 0.1 ? inputs.reverse() : inputs, outputs, parameters: { causal, binary_data_output: rnd() < 0.2 } };
      return { bytes: post('sdpa', JSON.stringify(body)), expect: ok ? OK : BAD, what: `sdpa extras ${JSON.stringify(inputs.map((i) => i.shape))}` };
    },
    function upload() {
      // a model upload with a mutated safetensors file or config
      const st = Buffer.from(ctx.tinySt);
      const k = int(5);
      if (k === 0) {
        // a header length that is not the header's: 0, past the file, ...
        st.writeBigUInt64LE(pick([0n, 1n, 2n ** 63n, 2n ** 64n - 1n, BigInt(st.length), BigInt(st.length - 7)]), 0);
        return uploadReq(st, ctx.tinyCfg, 'header length', BAD);
      }
      if (k === 1) {
        let changed = false;
        for (let j = 1 + int(3); j > 0; j--) {
          const at = 8 + int(Number(st.readBigUInt64LE(0))), v = int(256);
          changed ||= st[at] !== v;
          st[at] = v;
        }
        return uploadReq(st, ctx.tinyCfg, 'header bytes', changed ? [200, 400] : OK,
          changed ? 'a flip in the header\'s padding to another blank leaves it valid' : undefined);
      }
      if (k === 2) {
        const h = st.subarray(8, 8 + Number(st.readBigUInt64LE(0))).toString();
        const m = h.replace(/\d+/g, (x) => (rnd() < 0.3 ? String(pick([0, 1, 2 ** 31, 2 ** 53, 99999999999, Number(x) + 4])) : x));
        const hb = Buffer.from(m);
        const l = Buffer.alloc(8); l.writeBigUInt64LE(BigInt(hb.length));
        // any other shape or offset breaks dtype x shape = bytes or contiguity
        return uploadReq(Buffer.concat([l, hb, Buffer.from(ctx.tinySt).subarray(8 + h.length)]), ctx.tinyCfg, 'offsets/shapes', m === h ? OK : BAD);
      }
      if (k === 3) return uploadReq(st.subarray(0, int(st.length)), ctx.tinyCfg, 'truncated safetensors', BAD);
      // config.json: only the fixture's own is right for these weights
      const cfg = pick([ctx.tinyCfg, '{"n_heads": 0}', '{"n_heads": 3}', '{"n_heads": -1}', '{"n_heads": 99999999999}', '{"n_heads": 2, "n_kv_heads": 3}',
        '{"n_heads": 2, "rope": "x"}', '{"n_heads": 2, "causal": 1}', '[]', '{"n_heads": "2"}']);
      return uploadReq(st, cfg, `config ${cfg.slice(0, 30)}`, cfg === ctx.tinyCfg ? OK : BAD);
    },
    function mapsQuery() {
      // map ids are m<n>-<tag>: '1' and '0' never exist (404); a bad query
      // parameter is named before the map is looked up (400)
      const [p, status] = pick([['/v2/maps', 200], ['/v2/maps/0', 404], ['/v2/maps/999999999999999999999', 404], ['/v2/maps/abc/attention', 404],
        ['/v2/maps/1/attention?b=-1', 400], ['/v2/maps/1/attention?h=99999999999&b=0', 400], ['/v2/maps/1/attention?max=0', 400],
        ['/v2/maps/1/attention?max=-5&format=f32', 400], ['/v2/maps/1/attention?format=xyz', 400], ['/v2/maps/1/attention?b=1e3', 400],
        ['/v2/maps/1/attention?b=&h=', 400], ['/v2/models/sdpa/stats', 200], ['/v2/models/%2e%2e/stats', 404], ['/metrics', 200], ['/v2', 200],
        ['/v2/models/demo/ready', 200], ['/v2/models/../../etc/passwd', 404], ['/' + '%'.repeat(20), 404], ['/v2/maps/1/attention?b=0&h=0&max=1', 404]]);
      return { bytes: request('GET', p), expect: [status], what: `GET ${p}` };
    },
    function retain() {
      const b = bases();
      const tokens = pick([['a', 'b'], ['a', 'b', 'c', 'd', 'e', 'f'], [1, 2], 'ab', [null], ['\u0000', 'x'.repeat(10000)], []]);
      b.json.parameters = { retain: true, tokens };
      if (b.model === 'sdpa') b.json.outputs = [{ name: 'output' }, { name: 'attention' }];
      // labels: none ([]), or one string (no NUL, at most 255 bytes) per query token
      const T = b.model === 'sdpa' ? 2 : b.json.inputs[0].shape[1];
      const ok = Array.isArray(tokens) && (tokens.length === 0 || (tokens.length === T &&
        tokens.every((x) => typeof x === 'string' && !x.includes('\u0000') && Buffer.byteLength(x) <= 255)));
      return { bytes: post(b.model, JSON.stringify(b.json)), expect: ok ? OK : BAD, what: `retain tokens ${JSON.stringify(tokens).slice(0, 40)} T=${T}` };
    },
    function binaryTypes() {
      // binary FP16/BF16/BOOL/INT32 inputs with right and wrong byte counts
      const T = 1 + int(3), B = 1 + int(2);
      const n = B * T * ctx.dModel;
      const dt = pick(['FP16', 'BF16', 'FP32']);
      const size = (dt === 'FP32' ? 4 : 2) * n + pick([0, 0, 0, -2, 2, -1, 1]);
      const head = { inputs: [{ name: 'x', datatype: dt, shape: [B, T, ctx.dModel], parameters: { binary_data_size: size } }] };
      const tensors = [Buffer.from(Array.from({ length: Math.max(0, size) }, () => int(256)))];
      let ok = size === (dt === 'FP32' ? 4 : 2) * n && finite(tensors[0], dt); // NaN and Inf are refused
      if (rnd() < 0.5) {
        const mdt = pick(['BOOL', 'BOOL', 'INT32', 'FP32']);
        const ms = (mdt === 'BOOL' ? 1 : 4) * B * T * T + pick([0, 0, 1, -1]);
        head.inputs.push({ name: 'mask', datatype: mdt, shape: [B, T, T], parameters: { binary_data_size: ms } });
        const mb = Buffer.from(Array.from({ length: Math.max(0, ms) }, () => pick([0, 1, 1, 2, 255])));
        tensors.push(mb);
        ok &&= mdt === 'BOOL' && ms === B * T * T && mb.every((x) => x <= 1); // BOOL bytes are 0 or 1
      }
      if (rnd() < 0.5) {
        head.inputs.push({ name: 'lengths', datatype: 'INT32', shape: [B], parameters: { binary_data_size: 4 * B } });
        const l = Buffer.alloc(4 * B);
        for (let k = 0; k < B; k++) {
          const v = pick([T, 0, -1, T + 1, 2 ** 31 - 1]);
          l.writeInt32LE(v, 4 * k);
          ok &&= v >= 0 && v <= T;
        }
        tensors.push(l);
      }
      head.outputs = ['y', 'attention', 'q'].filter(() => rnd() < 0.5).map((name) => ({ name, parameters: { binary_data: rnd() < 0.7 } }));
      // finite FP32/BF16 values up to 3e38 can overflow float32 in q or the
      // scores (400, "the inputs overflow float32"); FP16's cannot
      return { bytes: sendBinary('demo', head, tensors), expect: !ok ? BAD : dt === 'FP16' ? OK : [200, 400],
        why: ok && dt !== 'FP16' ? 'finite inputs may overflow float32' : undefined, what: `binary ${dt} ${size}/${n}` };
    },
    function slowloris() {
      const b = bases();
      const s = JSON.stringify(b.json);
      const full = post(b.model, s);
      // no answer before we hang up: the server waits for the rest of the body
      return { bytes: full.subarray(0, full.length - 1 - int(s.length)), expect: [], closeAfter: 200 + int(800), slow: true, what: 'partial body, hang up' };
    },
    function badChunked() {
      const b = bases();
      const s = JSON.stringify(b.json);
      const k = int(5);
      const body = [`zz\r\n${s}\r\n0\r\n\r\n`, `${(s.length + 50).toString(16)}\r\n${s}\r\n0\r\n\r\n`, `ffffffffffffffffff\r\n${s}\r\n0\r\n\r\n`,
        `${s.length.toString(16)}\r\n${s}0\r\n\r\n`, `-1\r\n${s}\r\n0\r\n\r\n`][k];
      // A framing error libmicrohttpd answers itself (its own HTML body): a
      // chunk size of 72 bits 413, other bad sizes 400; or a chunk longer
      // than what was sent (k = 1): the server rightly waits for the rest,
      // so we hang up like slowloris (no answer expected).
      return { bytes: post(b.model, body, { 'Transfer-Encoding': 'chunked' }), expect: k === 1 ? [] : k === 2 ? [413] : BAD, framing: true,
        closeAfter: k === 1 ? 300 : undefined, what: `bad chunked framing ${k}` };
    },
  ];
}

// Finding 1 (the binaryTypes mutator: random FP32 bytes): finite but huge inputs
// overflow to Inf in q / scores; asking for those as JSON answered 500, and
// the attention of such rows came back silently as zeros. It is the client's
// input: 400 naming the cause, whatever the outputs and their form.
test('regression: inputs that overflow FP32 give 400, not 500 or silent zeros', async () => {
  const big = { inputs: [
    { name: 'q', datatype: 'FP32', shape: [1, 2], data: [1e30, 1e30] },
    { name: 'k', datatype: 'FP32', shape: [2, 2], data: [1e30, 1e30, -1e30, 1] },
    { name: 'v', datatype: 'FP32', shape: [2, 1], data: [1, 2] }], outputs: [{ name: 'scores' }] };
  const overflow = /^inputs: a projection, score or output of sequence 0 is not finite \(the inputs overflow float32\)/;
  let r = await raw(d.port, request('POST', '/v2/models/sdpa/infer', JSON.stringify(big), { 'Content-Type': 'application/json' }));
  assert.equal(r.status, 400, r.body.toString());
  assert.match(JSON.parse(r.body.toString()).error, overflow);
  // every score of the row is -Inf: it used to pass as a fully masked row
  big.inputs[1].data = [-1e30, -1e30, -1e30, -1e30];
  big.outputs = [{ name: 'attention' }];
  r = await raw(d.port, request('POST', '/v2/models/sdpa/infer', JSON.stringify(big), { 'Content-Type': 'application/json' }));
  assert.equal(r.status, 400, r.body.toString());
  assert.match(JSON.parse(r.body.toString()).error, overflow);
  // the overflowing score is at a key no query sees (causal, T < S): asked
  // for as binary, scores came back 200 with an Inf in them (as JSON, 400
  // advising binary_data); without scores, y needs none of it: PyTorch's v[0]
  const hidden = { inputs: [
    { name: 'q', datatype: 'FP32', shape: [1, 2], data: [1e30, 1e30] },
    { name: 'k', datatype: 'FP32', shape: [2, 2], data: [1, 1, 1e30, 1e30] },
    { name: 'v', datatype: 'FP32', shape: [2, 1], data: [1, 2] }], parameters: { causal: true } };
  for (const outputs of [[{ name: 'scores', parameters: { binary_data: true } }], [{ name: 'scores' }], undefined]) {
    if (outputs) hidden.outputs = outputs; else delete hidden.outputs;
    r = await raw(d.port, request('POST', '/v2/models/sdpa/infer', JSON.stringify(hidden), { 'Content-Type': 'application/json' }));
    const what = `${JSON.stringify(outputs)}: ${r.body.toString('latin1')}`;
    if (!outputs) {
      assert.equal(r.status, 200, what);
      assert.deepEqual(JSON.parse(r.body.toString()).outputs[0].data, [1]);
      continue;
    }
    assert.equal(r.status, 400, what);
    assert.match(JSON.parse(r.body.toString()).error, overflow);
  }
  const x = { inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1, 64], data: Array(64).fill(3e38) }], outputs: [{ name: 'attention' }] };
  // failed requests are not counted as inferences or executions (Triton's
  // statistics count successful ones), however many of x's rows
  const demoStats = async () => (await (await fetch(`http://127.0.0.1:${d.port}/v2/models/demo/stats`)).json()).model_stats[0];
  const s0 = await demoStats();
  r = await raw(d.port, request('POST', '/v2/models/demo/infer', JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 2, 64], data: Array(256).fill(3e38) }] }), { 'Content-Type': 'application/json' }));
  assert.equal(r.status, 400, r.body.toString());
  const s1 = await demoStats();
  assert.deepEqual([s1.inference_count, s1.execution_count, s1.inference_stats.fail.count],
    [s0.inference_count, s0.execution_count, s0.inference_stats.fail.count + 1], JSON.stringify(s1));
  for (const outputs of [[{ name: 'attention' }], [{ name: 'q' }], [{ name: 'q', parameters: { binary_data: true } }], undefined]) {
    if (outputs) x.outputs = outputs; else delete x.outputs;
    r = await raw(d.port, request('POST', '/v2/models/demo/infer', JSON.stringify(x), { 'Content-Type': 'application/json' }));
    assert.equal(r.status, 400, `${JSON.stringify(outputs)}: ${r.body.toString()}`);
    assert.match(JSON.parse(r.body.toString()).error, overflow);
  }
  // and the daemon still answers a sane request
  x.inputs[0].data = Array(64).fill(0.5);
  r = await raw(d.port, request('POST', '/v2/models/demo/infer', JSON.stringify(x), { 'Content-Type': 'application/json' }));
  assert.equal(r.status, 200, r.body.toString());
});

test(`adversarial client: ${N} mutated requests (seed ${SEED})`, { timeout: (SECONDS + 120) * 1000 * SLOW }, async () => {
  console.log(`# adversarial seed ${SEED} (replay: ATTND_FUZZ_SEED=${SEED})`);
  const rnd = mulberry32(SEED);
  const meta = JSON.parse((await raw(d.port, request('GET', '/v2/models/demo'))).body.toString());
  const ctx = { dModel: meta.parameters.d_model,
    tinySt: readFileSync(join(FIXTURES, 'model.safetensors')), tinyCfg: readFileSync(join(FIXTURES, 'config.json'), 'utf8') };
  // The demo reference: computed once at the start, before any mutation.
  const T = 3;
  const demoReq = { inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, ctx.dModel], data: Array.from({ length: T * ctx.dModel }, (_, i) => ((i * 37) % 17) / 8 - 1) }] };
  const goodSdpa = request('POST', '/v2/models/sdpa/infer', JSON.stringify(SEED_REQ), { 'Content-Type': 'application/json' });
  const goodDemo = request('POST', '/v2/models/demo/infer', JSON.stringify(demoReq), { 'Content-Type': 'application/json' });
  const first = await raw(d.port, goodDemo);
  assert.equal(first.status, 200);
  const demoRef = JSON.parse(first.body.toString()).outputs[0].data;
  checkGood(await raw(d.port, goodSdpa), SEED_OUT, 'sdpa seed example');

  const muts = mutators(rnd, ctx);
  const counts = {};
  const problems = [];
  const t0 = Date.now();
  let sent = 0;
  const slow = [];
  const statuses = {};
  // Waves of WAVE requests in flight at once, so that bad requests share
  // batches with good ones; every ~50 the two known-good requests join one.
  const judge = (m, key, n, r) => {
    const sk = r.status || (r.closed ? 'closed' : 'other');
    statuses[sk] = (statuses[sk] || 0) + 1;
    if (m.closeAfter && r.closed) return; // we hung up ourselves
    if (m.early && r.closed) return; // reset after an early 413
    // the HTTP library may also hang up on a framing error
    if (m.framing && r.closed) return;
    const p = contract(r, m);
    if (p) problems.push(`#${n} ${key} (${m.what}): ${p}`);
  };
  let nextGood = 50;
  while (sent < N && Date.now() - t0 < SECONDS * 1000 && problems.length <= 20) {
    const wave = [];
    for (let k = 0; k < WAVE && sent < N; k++, sent++) {
      const fi = Math.floor(rnd() * muts.length);
      const m = muts[fi]();
      const key = muts[fi].name;
      counts[key] = (counts[key] || 0) + 1;
      // partial bodies stay open while the next requests are served
      if (m.slow) slow.push(raw(d.port, m.bytes, m));
      else { const n = sent; wave.push(raw(d.port, m.bytes, m).then((r) => judge(m, key, n, r))); }
    }
    if (sent >= nextGood) {
      nextGood += 50;
      const n = sent;
      wave.push(raw(d.port, goodSdpa).then((r) => checkGood(r, SEED_OUT, `sdpa seed example after ${n} mutations`)));
      wave.push(raw(d.port, goodDemo).then((r) => checkGood(r, demoRef, `demo reference after ${n} mutations`)));
    }
    await Promise.all(wave);
  }
  for (const r of await Promise.all(slow)) if (!r.closed) problems.push(`partial body answered: ${r.status || JSON.stringify(r).slice(0, 200)}`);
  console.log(`# adversarial sent ${sent} in ${((Date.now() - t0) / 1000).toFixed(1)} s; statuses ${JSON.stringify(statuses)}`);
  console.log(`# adversarial mutators ${JSON.stringify(counts)}`);
  assert.deepEqual(problems, [], `seed ${SEED}:\n${problems.join('\n')}`);
  const live = await raw(d.port, request('GET', '/v2/health/live'));
  assert.equal(live.status, 200);
  checkGood(await raw(d.port, goodSdpa), SEED_OUT, 'sdpa seed example at the end');
  checkGood(await raw(d.port, goodDemo), demoRef, 'demo reference at the end');
  assert.doesNotMatch(d.log(), SANITIZER_REPORT, d.log());
});
