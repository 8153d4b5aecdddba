// guard.test.mjs - the gRPC door against clients that hold resources:
// answers it does not read (memory-budget). Hand-built HTTP/2 with
// node:http2.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { test } from 'node:test';
import { REFS, fp32, infer, start } from '../server/helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const X = REFS.causal;
const xreq = (id) => ({ id, inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
const used = async (d) => Number(/\nattnd_memory_budget_used_bytes (\d+)\n/.exec(await (await fetch(`${d.url}/metrics`)).text())[1]);

// ---- a protobuf writer (as framing.test.mjs)
const varint = (n) => {
  const b = [];
  let v = n;
  do {
    let x = v & 0x7f;
    v = Math.floor(v / 128);
    if (v) x |= 0x80;
    b.push(x);
  } while (v);
  return Buffer.from(b);
};
const ld = (field, bytes) => Buffer.concat([varint((field << 3) | 2), varint(bytes.length), bytes]);
const str = (field, s) => ld(field, Buffer.from(s));
const packed = (field, a) => ld(field, Buffer.concat(a.map(varint)));
const frame = (msg) => {
  const h = Buffer.alloc(5);
  h.writeUInt32BE(msg.length, 1);
  return Buffer.concat([h, msg]);
};
const INFER = '/inference.GRPCInferenceService/ModelInfer';
/** ModelInferRequest for sdpa: q, k, v [T, 1] raw, asking for the T x T attention */
function bigAnswerMsg(T) {
  const col = Buffer.from(new Float32Array(Array.from({ length: T }, (_, i) => (i % 8) / 8)).buffer);
  return Buffer.concat([
    str(1, 'sdpa'),
    ...['q', 'k', 'v'].map((n) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packed(3, [T, 1])]))),
    ld(6, str(1, 'attention')),
    ld(7, col), ld(7, col), ld(7, col),
  ]);
}
/** a call whose answer is never read: its stream is paused at once */
function unread(session, msg) {
  const req = session.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' });
  req.pause();
  req.on('error', () => {});
  req.end(frame(msg));
  return req;
}
async function waitFor(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** one call read to its end: {grpcStatus, message} */
function call(session, msg) {
  return new Promise((res, rej) => {
    const req = session.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' });
    let head = {};
    req.on('response', (h) => { head = h; });
    req.on('trailers', (t) => { head = { ...head, ...t }; });
    req.on('data', () => {});
    req.on('error', rej);
    req.on('end', () => res({ grpcStatus: Number(head['grpc-status']), message: decodeURIComponent(head['grpc-message'] || '') }));
    req.end(frame(msg));
  });
}

test('memory budget: a gRPC answer its client does not read counts until sent; a request that does not fit beside it gets UNAVAILABLE / 503', async () => {
  const lim = ['--memory-budget', '12000000', '--max-body', '1000000', '--max-json-body', '1000000', '--request-memory', '12000000'];
  const d = await start({ grpc: true, args: lim });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  const other = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  try {
    // a 9 MB answer (1500 x 1500 floats) waits behind the client's window
    unread(session, bigAnswerMsg(1500));
    await waitFor('the answer held', async () => (await used(d)) > 8000000);
    await sleep(200);
    assert.ok((await used(d)) > 8000000, 'still held: the client reads nothing');
    // the same request (9 MB of outputs) no longer fits, on either door
    const r = await call(other, bigAnswerMsg(1500));
    assert.equal(r.grpcStatus, 14, r.message);
    assert.match(r.message, /unsent answers .*memory-budget/);
    const T = 1500;
    const col = Array.from({ length: T }, (_, i) => (i % 8) / 8);
    const big = { inputs: [fp32('q', [T, 1], col), fp32('k', [T, 1], col), fp32('v', [T, 1], col)], outputs: [{ name: 'attention' }] };
    const rest = await infer(d, 'sdpa', big);
    assert.equal(rest.status, 503);
    assert.ok(Number(rest.headers.get('retry-after')) >= 1);
    assert.match(rest.json.error, /unsent answers .*memory-budget/);
    assert.equal((await infer(d, 'tiny', xreq('small'))).status, 200, 'a small one still fits');
    session.destroy(); // the answer goes with its connection
    await waitFor('the budget back to 0', async () => (await used(d)) === 0, 5000);
    assert.equal((await call(other, bigAnswerMsg(1500))).grpcStatus, 0);
  } finally {
    session.destroy();
    other.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});
