// fuzz_calls.mjs - fuzz_grpc.mjs's call-level cases: well-framed calls
// (node:http2, one connection per case) whose messages and metadata are
// hostile in what they mean, each answer's grpc-status checked against
// what README says it must be, and after each call the seed example on the
// same connection, which must come back exact:
//   - ModelInfer with typed contents (every field of InferTensorContents,
//     every datatype, right and wrong lengths, a field not the datatype's,
//     contents beside raw_input_contents);
//   - sequence steps with attnd-sequence-id metadata (a sequence begun,
//     continued and ended by it; its id invalid, unknown, ended, past 128
//     bytes, sent twice, or other than the step's sequence_id);
//   - RepositoryModelLoad with `config` and `file:` parameters (a model
//     uploaded whole, a config or file broken, of the wrong type, a file
//     name with a path, a model name not a name), then an infer on it;
//   - messages around --request-memory: ModelInfer and RepositoryModelLoad
//     one step under and at the least size refused (found at start-up by
//     bisection, fuzz_grpc.mjs's limits()).
// Each case is drawn from rnd alone (its bytes the same for a seed); what
// a step expects may depend on the step before (a sequence not begun
// cannot go on).
import http2 from 'node:http2';
import { SEED_OUT, fields, firstRawOutput, frame as grpcMsg, ld, packedI64, seedMsg, str, varint } from './wire.mjs';
import { D } from '../server/seq_helper.mjs';

const OK = 0, INVALID = 3, NOT_FOUND = 5, FAILED_PRECONDITION = 9, EXHAUSTED = 8, UNAVAILABLE = 14;

const boolField = (f, b) => Buffer.concat([varint((f << 3) | 0), varint(b ? 1 : 0)]);
// InferParameter: bool_param 1, int64_param 2, string_param 3
const param = (k, v) => ld(4, Buffer.concat([str(1, k), ld(2,
  typeof v === 'boolean' ? boolField(1, v) : typeof v === 'number' ? Buffer.concat([varint(2 << 3), varint(v)]) : str(3, v))]));
// ModelRepositoryParameter: bool_param 1, int64_param 2, string_param 3, bytes_param 4; the map is field 3
const repoParam = (k, kind, v) => ld(3, Buffer.concat([str(1, k), ld(2,
  kind === 'bool' ? boolField(1, v) : kind === 'int' ? Buffer.concat([varint(2 << 3), varint(v)]) : ld(kind === 'string' ? 3 : 4, Buffer.from(v)))]));

// InferTensorContents' fields, packed as protobuf packs them
const CONTENTS = {
  bool: [1, (a) => Buffer.concat(a.map((x) => varint(x ? 1 : 0)))],
  int: [2, (a) => Buffer.concat(a.map((x) => varint(Math.trunc(x))))], // int32: negatives as 10 bytes
  int64: [3, (a) => Buffer.concat(a.map((x) => varint(Math.trunc(x))))],
  uint: [4, (a) => Buffer.concat(a.map((x) => varint(Math.abs(Math.trunc(x)))))],
  uint64: [5, (a) => Buffer.concat(a.map((x) => varint(Math.abs(Math.trunc(x)))))],
  fp32: [6, (a) => Buffer.from(new Float32Array(a).buffer)],
  fp64: [7, (a) => Buffer.from(new Float64Array(a).buffer)],
  bytes: [8, null],
};
const contents = (kind, a) => {
  const [f, pack] = CONTENTS[kind];
  return pack ? ld(f, pack(a)) : Buffer.concat(a.map((x) => str(f, String(x))));
};
// the field each datatype attnd takes must use (proto/pb.c typed_count)
const OWN = { FP32: 'fp32', INT32: 'int', INT64: 'int64', BOOL: 'bool' };
const SDPA = [['q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]], ['k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]], ['v', [2, 2], [1, 2, 3, 0]]];
const tensorHead = (name, dt, shape) => Buffer.concat([str(1, name), str(2, dt), packedI64(3, shape)]);

// InferParameter values: double_param 4 (fixed64), int64_param 2,
// uint64_param 5, bool_param 1, string_param 3; none at all
const dbl = (x) => { const b = Buffer.alloc(9); b[0] = (4 << 3) | 1; b.writeDoubleLE(x, 1); return b; };
const i64 = (x) => Buffer.concat([varint(2 << 3), varint(x)]);
const u64 = (x) => Buffer.concat([varint(5 << 3), varint(x)]);
// [value, taken, the default's own output]
const SCALES = [[dbl(0.5), 1, 1], [dbl(0.25), 1, 0], [i64(1), 1, 0], [u64(2), 1, 0], [dbl(1.5e-45), 1, 0],
  [dbl(0), 0], [dbl(-0.5), 0], [dbl(NaN), 0], [dbl(Infinity), 0], [dbl(1e-50), 0], [dbl(1e39), 0], [i64(0), 0], [i64(-3), 0],
  [boolField(1, true), 0], [str(3, '0.5'), 0], [Buffer.alloc(0), 0]];
const CLASSIFICATION = [[i64(0), 1], [i64(2), 0], [i64(-1), 0], [u64(0), 0], [str(3, '2'), 0], [Buffer.alloc(0), 0]];

/** ModelInfer of sdpa with typed contents: {msg, expect, exact} */
export function typedInfer(rnd, int, pick) {
  const dts = ['FP32', 'INT32', 'INT64', 'BOOL', 'UINT32', 'UINT64', 'FP64', 'BYTES', 'FP16', 'BF16', 'INT8', 'fp32'];
  const kinds = Object.keys(CONTENTS);
  let bad = 0, allFp32 = 1;
  const inputs = SDPA.map(([name, shape, vals]) => {
    const r = rnd();
    const dt = r < 0.5 ? 'FP32' : r < 0.75 ? pick(['INT32', 'INT64', 'BOOL']) : pick(dts);
    let kind = OWN[dt] || pick(kinds);
    if (rnd() < 0.2) kind = pick(kinds); // a field not the datatype's, often
    let a = vals;
    const l = rnd();
    if (l < 0.1) a = vals.slice(0, vals.length - 1 - int(vals.length - 1));
    else if (l < 0.2) a = [...vals, ...vals.slice(0, 1 + int(vals.length))];
    else if (l < 0.23) a = [];
    const parts = [tensorHead(name, dt, shape)];
    let c = a.length || rnd() < 0.5 ? contents(kind, a) : null;
    if (c && rnd() < 0.08) { c = Buffer.concat([c, contents(pick(kinds.filter((k) => k !== kind)), vals.slice(0, 1))]); bad = 1; } // two fields
    if (c) parts.push(ld(5, c));
    if (!OWN[dt] || kind !== OWN[dt] || a.length !== vals.length || !c) bad = 1;
    if (dt !== 'FP32') allFp32 = 0;
    return ld(5, Buffer.concat(parts));
  });
  const msg = [str(1, 'sdpa'), ...inputs];
  if (rnd() < 0.08) { msg.push(...SDPA.map(([, , v]) => ld(7, Buffer.from(new Float32Array(v).buffer)))); bad = 1; } // and raw too
  // parameters.scale (a double, int64 or uint64 param): d_k is 4, so 0.5
  // is sdpa's own 1/sqrt(d_k), the same exact output; another positive
  // one is served (its output not held here); one whose float is not
  // positive and finite, or of another kind, INVALID_ARGUMENT
  let scaled = 0;
  if (rnd() < 0.15) {
    const [v, ok, same] = pick(SCALES);
    msg.push(ld(4, Buffer.concat([str(1, 'scale'), ld(2, v)])));
    if (!ok) bad = 1;
    else if (!same) scaled = 1;
  }
  // an output's parameters.classification (Triton's extension, not
  // served): 0 asks for none, any other value or kind is refused
  if (rnd() < 0.1) {
    const [v, ok] = pick(CLASSIFICATION);
    msg.push(ld(6, Buffer.concat([str(1, 'output'), ld(2, Buffer.concat([str(1, 'classification'), ld(2, v)]))])));
    if (!ok) bad = 1;
  }
  // what attnd must answer: a bad one INVALID_ARGUMENT, as a good one in
  // another datatype than FP32, which sdpa's inputs refuse once decoded
  // ('inputs[k].datatype: INT64; expected FP32'); all FP32: OK, exact
  return { rpc: 'ModelInfer', msg: Buffer.concat(msg), expect: bad || !allFp32 ? [INVALID] : [OK], exact: !bad && allFp32 && !scaled, what: 'typed contents' };
}

// the sequences' model: gqa uploaded under a name the frame-level cases
// leave alone (they load and unload gqa)
export const SEQ_MODEL = 'fzgqa';
export const uploadMsg = (name, { config, weights }) => Buffer.concat([str(2, name), repoParam('config', 'string', config),
  repoParam('file:model.safetensors', 'bytes', weights)]);

/** a step of SEQ_MODEL: x of t tokens, the sequence's parameters, its metadata */
function step(rnd, int, { id, meta, start, end, pos, meta2 }) {
  const t = 1 + int(3);
  const p = [];
  if (id !== undefined) p.push(param('sequence_id', id));
  if (start) p.push(param('sequence_start', true));
  if (end) p.push(param('sequence_end', true));
  if (pos !== undefined) p.push(param('sequence_position', pos));
  const x = Array.from({ length: t * D }, () => Math.round((rnd() * 2 - 1) * 100) / 100);
  const msg = Buffer.concat([str(1, SEQ_MODEL), ...p, ld(5, tensorHead('x', 'FP32', [1, t, D])), ld(7, Buffer.from(new Float32Array(x).buffer))]);
  const headers = {};
  if (meta !== undefined) headers['attnd-sequence-id'] = meta2 !== undefined ? [meta, meta2] : meta;
  return { rpc: 'ModelInfer', msg, headers };
}

/** sequence steps carried by attnd-sequence-id metadata: a list of calls */
function sequenceCalls(rnd, int, pick, tag) {
  const id = `fz.${tag}`;
  const kind = int(7);
  // begun by metadata (its parameter too, or not), continued by it alone, ended
  if (kind <= 1) {
    const calls = [{ ...step(rnd, int, { id: kind ? id : undefined, meta: id, start: true }), expect: [OK, UNAVAILABLE], what: 'sequence begun by its metadata', begins: 1 }];
    for (let k = int(3); k > 0; k--) calls.push({ ...step(rnd, int, { meta: id }), expect: [OK], what: 'a step by metadata alone', after: 1 });
    calls.push({ ...step(rnd, int, { meta: id, id: rnd() < 0.5 ? id : undefined, end: true }), expect: [OK], what: 'the end by metadata', after: 1 });
    calls.push({ ...step(rnd, int, { meta: id, pos: rnd() < 0.5 ? int(9) : undefined }), expect: [INVALID, FAILED_PRECONDITION], what: 'a step after its end' });
    return calls;
  }
  if (kind === 2) return [{ ...step(rnd, int, { meta: id }), expect: [INVALID], what: 'an unknown sequence by metadata' }];
  if (kind === 3) { // metadata and parameter differ
    const other = pick([`${id}x`, id.slice(0, -1), id.toUpperCase(), `${id} `.trim() + '.']);
    return [{ ...step(rnd, int, { meta: id, id: other, start: rnd() < 0.5 }), expect: [INVALID], what: 'metadata and sequence_id differ' }];
  }
  if (kind === 4) { // not an id: empty, too long, a space, a slash, quotes
    const bad = pick(['', 'a'.repeat(129), 'a'.repeat(128 + int(8000)), 'a b', 'a\tb', 'a/b', '"q"', 'a\\b', 'é']);
    return [{ ...step(rnd, int, { meta: bad, start: rnd() < 0.5, id: rnd() < 0.3 ? bad : undefined }), expect: [INVALID], what: `metadata '${bad.slice(0, 20)}'(${bad.length})` }];
  }
  if (kind === 5) { // the longest id there is, begun and ended
    const long = `${id}.`.padEnd(128, 'z');
    return [{ ...step(rnd, int, { meta: long, id: long, start: true, end: true }), expect: [OK, UNAVAILABLE], what: 'a 128-byte id' }];
  }
  // sent twice: refused, as REST refuses two lines
  return [{ ...step(rnd, int, { meta: id, meta2: `${id}.2`, id, start: true, end: true }), expect: [UNAVAILABLE, INVALID], what: 'metadata sent twice' }];
}

/** RepositoryModelLoad with config and file: parameters, then an infer on it */
function loadCalls(rnd, int, pick, model, files) {
  const { config, weights } = files;
  const name = `fz${model}`;
  let cfg = config, file = weights, extra = [], bad = 0, mname = name, maybe = 0;
  const r = rnd();
  if (r < 0.15) { cfg = pick(['{', 'null', '[]', '"x"', '{"n_heads": -1}', '{"n_heads": 1e99}', '{"n_heads": 3, "n_kv_heads": 2}', '\u00ff']); bad = 1; }
  else if (r < 0.3) {
    const w = Buffer.from(weights);
    const m = int(4);
    if (m === 0) file = w.subarray(0, int(w.length));
    else if (m === 1) { w.writeBigUInt64LE(BigInt(pick([0, 1, w.length, 1e12, 2 ** 53])), 0); file = w; }
    else if (m === 2) { for (let k = 1 + int(4); k > 0; k--) w[8 + int(w.length - 8)] = int(256); file = w; maybe = 1; }
    else file = Buffer.from(Array.from({ length: int(300) }, () => int(256)));
    bad = 1;
  } else if (r < 0.4) { extra.push(repoParam(pick(['file:../x', 'file:', 'file:/tmp/x', 'file:a/b', 'file:.', 'file:..']), 'bytes', 'x')); bad = 1; }
  else if (r < 0.45) { extra.push(repoParam('config', 'bytes', cfg)); cfg = null; maybe = 1; } // bytes for a string
  else if (r < 0.5) { extra.push(pick([repoParam('config', 'int', 7), repoParam('file:model.safetensors', 'string', 'abc'), repoParam('config', 'bool', true)])); cfg = null; bad = 1; }
  else if (r < 0.58) { mname = pick(['', '..', 'a/b', '.hidden', 'x'.repeat(300), 'sdpa\u0000x']); bad = 1; }
  else if (r < 0.64) { file = null; bad = 1; } // a config without its weights
  else if (r < 0.7) { extra.push(repoParam('file:config.json', 'bytes', config)); maybe = 1; }
  const p = [];
  if (cfg !== null) p.push(repoParam('config', 'string', cfg));
  if (file) p.push(repoParam('file:model.safetensors', 'bytes', file));
  p.push(...extra);
  const load = { rpc: 'RepositoryModelLoad', msg: Buffer.concat([str(2, mname), ...p]), what: 'load with config and file' };
  // a model that could not load is not served: NOT_FOUND with why
  if (bad && !maybe) return [{ ...load, expect: [INVALID] }, { rpc: 'ModelInfer', msg: stepOn(name, rnd, int), expect: [OK, NOT_FOUND], what: 'infer on it after' }];
  return [{ ...load, expect: maybe ? [OK, INVALID] : [OK], begins: 1 },
    { rpc: 'ModelInfer', msg: stepOn(name, rnd, int), expect: [OK], after: 1, orElse: [OK, NOT_FOUND], what: 'infer on the uploaded model' },
    ...(rnd() < 0.5 ? [{ rpc: 'RepositoryModelUnload', msg: str(2, name), expect: [OK], after: 1, orElse: [OK, NOT_FOUND], what: 'its unload' }] : [])];
}
function stepOn(model, rnd, int) {
  const t = 1 + int(3);
  const x = Array.from({ length: t * D }, () => Math.round((rnd() * 2 - 1) * 100) / 100);
  return Buffer.concat([str(1, model), ld(5, tensorHead('x', 'FP32', [1, t, D])), ld(7, Buffer.from(new Float32Array(x).buffer))]);
}

/** a ModelInfer of sdpa with n rows of k and v (its request-memory grows with n) */
export function sized(n) {
  const k = Array.from({ length: 4 * n }, (_, i) => (i % 5) / 5), v = Array.from({ length: 2 * n }, (_, i) => (i % 3) / 3);
  return Buffer.concat([str(1, 'sdpa'), ld(5, tensorHead('q', 'FP32', [2, 4])), ld(5, tensorHead('k', 'FP32', [n, 4])), ld(5, tensorHead('v', 'FP32', [n, 2])),
    ld(7, Buffer.from(new Float32Array(SDPA[0][2]).buffer)), ld(7, Buffer.from(new Float32Array(k).buffer)), ld(7, Buffer.from(new Float32Array(v).buffer))]);
}
/** the same with typed contents: q fp32_contents, k and v of datatype dt
 * (INT64 or BOOL: a 1-byte varint each, 8 or 4 bytes once decoded;
 * sdpa refuses them after the decode, INVALID_ARGUMENT, unless the
 * decode took more than --request-memory first) */
export function sizedTyped(n, dt = 'INT64') {
  const kind = OWN[dt], k = Array.from({ length: 4 * n }, (_, i) => i % 2), v = Array.from({ length: 2 * n }, (_, i) => (i + 1) % 2);
  return Buffer.concat([str(1, 'sdpa'), ld(5, Buffer.concat([tensorHead('q', 'FP32', [2, 4]), ld(5, contents('fp32', SDPA[0][2]))])),
    ld(5, Buffer.concat([tensorHead('k', dt, [n, 4]), ld(5, contents(kind, k))])), ld(5, Buffer.concat([tensorHead('v', dt, [n, 2]), ld(5, contents(kind, v))]))]);
}
export const sizedInt64 = (n) => sizedTyped(n, 'INT64'), sizedBool = (n) => sizedTyped(n, 'BOOL');
/** a RepositoryModelLoad whose message is about n bytes (a parameter nothing reads) */
export const padded = (n) => Buffer.concat([str(2, 'fzpad'), repoParam('x-pad', 'bytes', Buffer.alloc(Math.max(0, n), 0x61))]);

/** calls near the limits lim ({infer: least n refused, load: least n refused}) */
function nearCalls(rnd, int, pick, lim) {
  const calls = [];
  for (let k = 1 + int(2); k > 0; k--) {
    const d = pick([1, 1, 2, 3, 17]), r = rnd();
    if (r < 0.25) {
      const under = rnd() < 0.5, dt = pick(['INT64', 'BOOL']), at = dt === 'BOOL' ? lim.bool : lim.int64;
      calls.push({ rpc: 'ModelInfer', msg: sizedTyped(under ? at - d : at + d - 1, dt), expect: under ? [INVALID, UNAVAILABLE] : [EXHAUSTED], what: `typed ${dt} ModelInfer ${under ? 'under' : 'at or over'} request-memory` });
    } else if (r < 0.6) {
      const under = rnd() < 0.5;
      calls.push({ rpc: 'ModelInfer', msg: sized(under ? lim.infer - d : lim.infer + d - 1), expect: under ? [OK, UNAVAILABLE] : [EXHAUSTED], what: `ModelInfer ${under ? 'under' : 'at or over'} request-memory` });
    } else {
      const under = rnd() < 0.5;
      calls.push({ rpc: 'RepositoryModelLoad', msg: padded(under ? lim.load - d : lim.load + d - 1), expect: under ? [NOT_FOUND, INVALID, UNAVAILABLE] : [EXHAUSTED], what: `RepositoryModelLoad ${under ? 'under' : 'at or over'} its parse limit` });
    }
  }
  return calls;
}

/** one call-level case: {calls, bytes}; tag and worker name its sequences and models */
export function buildCallCase(rnd, tag, worker, files, lim) {
  const int = (n) => Math.floor(rnd() * n), pick = (a) => a[int(a.length)];
  const r = rnd();
  let calls;
  if (r < 0.3) calls = Array.from({ length: 1 + int(3) }, () => typedInfer(rnd, int, pick));
  else if (r < 0.6) calls = sequenceCalls(rnd, int, pick, tag);
  else if (r < 0.85) calls = loadCalls(rnd, int, pick, `${worker}${int(2)}`, files);
  else calls = nearCalls(rnd, int, pick, lim);
  return { calls, bytes: Buffer.concat(calls.flatMap((c) => [Buffer.from(c.rpc), c.msg, Buffer.from(JSON.stringify(c.headers || {}))])) };
}

/** one call on session: {status, message, data} or {error} */
export function call(session, key, rpc, msg, headers = {}, hang = 10000) {
  return new Promise((resolve) => {
    let req;
    try {
      req = session.request({ ':method': 'POST', ':path': `/inference.GRPCInferenceService/${rpc}`, 'content-type': 'application/grpc',
        te: 'trailers', authorization: `Bearer ${key}`, ...headers });
    } catch (e) { resolve({ error: `request: ${e.message}` }); return; }
    const chunks = [];
    let head = {}, trailers = {};
    const timer = setTimeout(() => { req.close(http2.constants.NGHTTP2_CANCEL); resolve({ error: `no answer in ${hang} ms` }); }, hang);
    req.on('response', (h) => { head = h; });
    req.on('trailers', (t) => { trailers = t; });
    req.on('data', (x) => chunks.push(x));
    req.on('error', (e) => { clearTimeout(timer); resolve({ error: `call: ${e.message} (rst ${req.rstCode})` }); });
    req.on('close', () => {
      clearTimeout(timer);
      const s = trailers['grpc-status'] ?? head['grpc-status'];
      if (s === undefined) resolve({ error: `no grpc-status (rst ${req.rstCode}, :status ${head[':status']})` });
      else resolve({ status: Number(s), message: trailers['grpc-message'] ?? head['grpc-message'] ?? '', data: Buffer.concat(chunks) });
    });
    req.end(grpcMsg(msg));
  });
}

/** the output floats of a typed answer (outputs[0].contents.fp32_contents) */
function typedOutput(data) {
  const msg = data.subarray(5, 5 + data.readUInt32BE(1));
  const out = fields(msg)[5]?.[0];
  const c = out && fields(out)[5]?.[0];
  const f = c && fields(c)[6]?.[0];
  return f ? Array.from(new Float32Array(f.buffer.slice(f.byteOffset, f.byteOffset + f.length))) : null;
}

/** runs a case's calls on one connection, the seed example after each: findings */
export const statuses = {}; // what each kind of call was answered: {what: {status: n}}
export async function runCallCase(port, key, c, hang) {
  const found = [];
  const session = http2.connect(`http://127.0.0.1:${port}`);
  let goaway = null;
  session.on('error', () => {});
  session.on('goaway', (code) => { goaway = code; });
  let begun = 1;
  for (const k of c.calls) {
    const r = await call(session, key, k.rpc, k.msg, k.headers, hang);
    const expect = k.after && !begun ? (k.orElse || [INVALID, NOT_FOUND, OK]) : k.expect;
    const w = (statuses[k.what.replace(/ '.*/, '')] ||= {});
    w[r.error ? 'error' : r.status] = (w[r.error ? 'error' : r.status] || 0) + 1;
    if (r.error) found.push(`${k.what}: ${r.error}`);
    else if (!expect.includes(r.status)) found.push(`${k.what}: grpc-status ${r.status} '${r.message.slice(0, 300)}', expected ${expect.join(' or ')}`);
    else if (k.exact && r.status === OK) {
      let out;
      try { out = typedOutput(r.data); } catch (e) { out = e.message; }
      if (JSON.stringify(out) !== JSON.stringify(SEED_OUT)) found.push(`${k.what}: output ${JSON.stringify(out)}`);
    }
    if (k.begins) begun = !r.error && r.status === OK;
    // the same connection still serves a good call, unless it was rightly closed
    if (goaway !== null || session.destroyed) { found.push(`${k.what}: the connection closed (GOAWAY ${goaway})`); break; }
    const g = await call(session, key, 'ModelInfer', seedMsg(), {}, hang);
    let out = null;
    if (!g.error && g.status === OK) try { out = firstRawOutput(g.data); } catch { /* below */ }
    if (JSON.stringify(out) !== JSON.stringify(SEED_OUT)) { found.push(`after ${k.what}: the good call on its connection: ${g.error || `grpc-status ${g.status} ${g.message}`}`); break; }
  }
  session.close();
  return found;
}
