// soak_grpc.mjs - soak.mjs's gRPC side: calls written by hand on
// node:http2 streams (tests/grpc/wire.mjs spells out the bytes; no protoc,
// no grpc-js), their statuses as the soak counts them, and the gRPC
// clients among its traffic kinds (grpcClient: unary calls checked against
// the seed's answer, calls cancelled mid-call, connections destroyed
// mid-message, ModelStreamInfer streams, some cancelled, 1-3 ms
// grpc-timeouts). soak.mjs's sequence steps over gRPC (its send(), 'grpc'
// and 'grpcshort') use the calls, statuses and sessions made here too.
import http2 from 'node:http2';
import { f32bytes } from './helper.mjs';
import { fields, frame, ld, packedI64, str, varint } from '../grpc/wire.mjs';

/** A protobuf InferParameter map entry (field 4 of a request). */
export function pbParam(key, v) {
  const val = typeof v === 'boolean' ? Buffer.concat([varint(1 << 3), varint(v ? 1 : 0)])
    : typeof v === 'string' ? str(3, v) : Buffer.concat([varint(2 << 3), varint(v)]);
  return ld(4, Buffer.concat([str(1, key), ld(2, val)]));
}
/** A ModelInferResponse's int64 parameter and first raw output. */
export function pbAnswer(msg) {
  const f = fields(msg);
  const out = { params: {}, raw: f[6] ? f[6][0] : null };
  for (const e of f[4] || []) {
    const kv = fields(e), v = fields(kv[2][0]);
    out.params[kv[1][0].toString()] = v[2] ? Number(v[2][0]) : v[5] ? Number(v[5][0]) : v[3] ? v[3][0].toString() : v[1] ? Number(v[1][0]) : null;
  }
  return out;
}
/** grpcSession(t, d): an HTTP/2 connection to d's gRPC port, destroyed
 * after the test t; the server's close at its exit is not an error. */
export function grpcSession(t, d) {
  const s = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  s.on('error', () => {});
  t.after(() => s.destroy());
  return s;
}
const GRPC_STATUS = { 0: 200, 3: 400, 4: 504, 5: 404, 8: 413, 9: 409, 14: 503, 16: 401 };

/** One gRPC call on session: messages written, then the stream's answers.
 * {grpcStatus, message, msgs: [Buffer]}; grpcStatus null when the call
 * ended without one (cancelled, its connection gone). cancelMs cancels it
 * (RST_STREAM CANCEL) that long after it was sent. */
export function grpcCall(session, path, msgs, { timeout, cancelMs, half } = {}) {
  return new Promise((res) => {
    let req;
    try {
      req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers',
        ...(timeout ? { 'grpc-timeout': timeout } : {}) });
    } catch (e) { res({ grpcStatus: null, message: e.code || e.message, msgs: [] }); return; }
    let head = {};
    const chunks = [];
    req.on('response', (h) => { head = h; });
    req.on('trailers', (t) => { head = { ...head, ...t }; });
    req.on('data', (c) => chunks.push(c));
    const done = (err) => {
      const body = Buffer.concat(chunks), out = [];
      for (let i = 0; i + 5 <= body.length && i + 5 + body.readUInt32BE(i + 1) <= body.length; i += 5 + body.readUInt32BE(i + 1))
        out.push(body.subarray(i + 5, i + 5 + body.readUInt32BE(i + 1)));
      const g = head['grpc-status'];
      res({ grpcStatus: g === undefined ? null : Number(g), message: err ? err.code || err.message : decodeURIComponent(head['grpc-message'] || ''), msgs: out });
    };
    req.on('error', done);
    req.on('close', () => done(null));
    const all = Buffer.concat(msgs.map((m) => frame(m)));
    if (half) req.write(all.subarray(0, all.length >> 1));
    else req.end(all);
    if (cancelMs !== undefined) setTimeout(() => { if (!req.closed) req.close(http2.constants.NGHTTP2_CANCEL); }, cancelMs);
  });
}

export const INFER = '/inference.GRPCInferenceService/ModelInfer';
const STREAM = '/inference.GRPCInferenceService/ModelStreamInfer';
const seedT = [['q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]], ['k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]], ['v', [2, 2], [1, 2, 3, 0]]];
const seedMsg = Buffer.concat([str(1, 'sdpa'),
  ...seedT.map(([n, s]) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, s)]))),
  ...seedT.map(([, , v]) => ld(7, f32bytes(v)))]);
const SEED_OUT = f32bytes([1.2384058237075806, 1.7615940570831299, 2.761593818664551, 0.23840582370758057]);
// demo over t tokens (long enough enough to be cancelled while it runs)
const demoMsg = (t) => Buffer.concat([str(1, 'demo'), ld(5, Buffer.concat([str(1, 'x'), str(2, 'FP32'), packedI64(3, [1, t, 64])])),
  ld(6, str(1, 'attention')), ld(7, f32bytes(Array.from({ length: t * 64 }, (_, i) => Math.cos(i) * 0.5)))]);

/**
 * grpcSoak({d, count, note, fail, pick, chance, sleep}): the soak's gRPC
 * traffic against d (its gRPC port), tallied and failed through the
 * soak's own count, note and fail, its choices made with the soak's
 * seeded pick and chance. Returns {grpcCount, grpcSession, grpcClient,
 * close}: grpcCount(kind, r, {cancelled, deadline}) counts a call's answer
 * as the REST status it stands for (returns it); grpcSession(old) is old
 * while it is open, else a new connection; grpcClient(i) is one client of
 * kind i % 6; close() closes grpcClient's connection.
 */
export function grpcSoak({ d, count, note, fail, pick, chance, sleep }) {
  function grpcCount(kind, r, { cancelled = false, deadline = false } = {}) {
    const st = r.grpcStatus === null ? (cancelled ? 499 : 0) : GRPC_STATUS[r.grpcStatus] ?? 500 + r.grpcStatus;
    count(kind, st, deadline);
    if (st === 0) fail(`${kind}: no gRPC status (${r.message})`);
    return st;
  }
  const grpcSession = (old) => {
    if (old && !old.closed && !old.destroyed) return old;
    const s = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
    s.on('error', () => {});
    return s;
  };
  const seedOk = (kind, m) => { if (!m || !pbAnswer(m).raw?.equals(SEED_OUT)) fail(`${kind}: not the seed's answer`); };

  /** gRPC clients, one kind after another: a unary call checked against the
   * seed's answer; a demo call cancelled (RST_STREAM) 0-20 ms after it was
   * sent; a connection destroyed with half a message sent, or right after a
   * whole one; a stream of 2-6 calls whose answers all come, in order; a
   * stream cancelled after its first answer; a call with a 1-3 ms
   * grpc-timeout (its answer or DEADLINE_EXCEEDED). */
  let gSession = null;
  async function grpcClient(i) {
    gSession = grpcSession(gSession);
    switch (i % 6) {
      case 0: {
        const r = await grpcCall(gSession, INFER, [seedMsg]);
        if (grpcCount('grpc infer', r) === 200) seedOk('grpc infer', r.msgs[0]);
        break;
      }
      case 1: grpcCount('grpc cancelled', await grpcCall(gSession, INFER, [demoMsg(64 + pick(192))], { cancelMs: pick(20) }), { cancelled: true }); break;
      case 2: {
        const s = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
        s.on('error', () => {});
        const half = chance(0.5), p = grpcCall(s, chance(0.5) ? INFER : STREAM, [demoMsg(128)], { half });
        await sleep(half ? 20 : pick(5));
        s.destroy();
        await p;
        note('grpc connection destroyed');
        break;
      }
      case 3: {
        const n = 2 + pick(5), r = await grpcCall(gSession, STREAM, Array.from({ length: n }, () => seedMsg));
        if (grpcCount('grpc stream', r) !== 200) break;
        if (r.msgs.length !== n) fail(`grpc stream: ${r.msgs.length} answers to ${n} requests`);
        for (const m of r.msgs) {
          const f = fields(m);
          const err = f[1] ? f[1][0].toString() : '';
          if (err && !/memory|queue/.test(err)) fail(`grpc stream: '${err}'`);
          else if (!err) seedOk('grpc stream', f[2][0]);
        }
        break;
      }
      case 4: grpcCount('grpc stream cancelled', await grpcCall(gSession, STREAM, [seedMsg, demoMsg(256), seedMsg], { cancelMs: 1 + pick(10) }), { cancelled: true }); break;
      default: {
        const r = await grpcCall(gSession, INFER, [demoMsg(256)], { timeout: `${1 + pick(3)}m` });
        grpcCount('grpc short deadline', r, { deadline: true });
      }
    }
  }
  return { grpcCount, grpcSession, grpcClient, close: () => gSession?.close() };
}
