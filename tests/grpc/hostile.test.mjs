// hostile.test.mjs - the gRPC door against request heads and frame floods
// no gRPC client sends, built byte by byte (wire.mjs): `te` missing or
// other than "trailers", a pseudo-header or grpc-timeout sent twice, and
// connections that send frames carrying nothing (PRIORITY, empty DATA,
// unknown types) as fast as they can. Each is answered or ended, and a
// call beside it is served.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { start } from '../server/helper.mjs';
import { SEED_OUT, firstRawOutput, frame, h2frame, lit, litIndexed, seedMsg } from './wire.mjs';

const INFER = '/inference.GRPCInferenceService/ModelInfer';
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const HEADERS = 1, RST = 3, SETTINGS = 4, GOAWAY = 7;
const END_STREAM = 1, END_HEADERS = 4;

let d;
before(async () => { d = await start({ grpc: true }); });
after(async () => {
  const r = await d.stop();
  assert.equal(r.code, 0, d.log());
});

/** one call through node:http2: {status, grpcStatus, message, data} */
function call(headers = {}, body = frame(seedMsg())) {
  return new Promise((res, rej) => {
    const s = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
    s.on('error', rej);
    const req = s.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', ...headers });
    let head = {};
    const chunks = [];
    req.on('response', (h) => { head = h; });
    req.on('trailers', (t) => { head = { ...head, ...t }; });
    req.on('data', (c) => chunks.push(c));
    req.on('error', rej);
    req.on('end', () => {
      s.close();
      res({
        status: head[':status'], grpcStatus: head['grpc-status'] === undefined ? undefined : Number(head['grpc-status']),
        message: decodeURIComponent(head['grpc-message'] || ''), data: Buffer.concat(chunks),
      });
    });
    req.end(body);
  });
}

/** a raw HTTP/2 connection: send(frames), frames received ({type, flags,
 * id, payload}), until(pred, ms) waits for one that matches, closed */
function rawConn() {
  const sock = net.connect(d.grpcPort, '127.0.0.1');
  const c = { sock, frames: [], closed: false };
  let buf = Buffer.alloc(0);
  sock.on('error', () => {});
  sock.on('close', () => { c.closed = true; });
  sock.on('data', (b) => {
    buf = Buffer.concat([buf, b]);
    while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
      const n = buf.readUIntBE(0, 3);
      c.frames.push({ type: buf[3], flags: buf[4], id: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + n) });
      buf = buf.subarray(9 + n);
    }
  });
  c.send = (...f) => sock.write(Buffer.concat(f));
  c.until = async (pred, ms = 5000) => {
    for (const t = Date.now() + ms; Date.now() < t; await new Promise((r) => setTimeout(r, 10))) {
      const f = c.frames.find(pred);
      if (f) return f;
    }
    return null;
  };
  c.send(PREFACE, h2frame(SETTINGS, 0, 0));
  return c;
}
/** a call's header block: fields as [name, value] pairs */
const block = (fields) => Buffer.concat(fields.map(([k, v]) => lit(k, v)));
const inferFields = (extra = []) => [[':method', 'POST'], [':scheme', 'http'], [':path', INFER], [':authority', 'x'],
  ['content-type', 'application/grpc'], ...extra];
/** stream id's call, headers then its message */
const rawCall = (id, fields) => [h2frame(HEADERS, END_HEADERS, id, block(fields)), h2frame(0, END_STREAM, id, frame(seedMsg()))];
/** the server's answer on stream id: 'reset <code>' or 'answered' */
async function outcome(c, id) {
  const f = await c.until((x) => x.id === id && (x.type === RST || (x.type === HEADERS && (x.flags & END_STREAM))));
  if (!f) return 'nothing';
  return f.type === RST ? `reset ${f.payload.readUInt32BE(0)}` : 'answered';
}

test('te: a call without it is served (as grpc-go and grpc-java serve it); te other than "trailers" is a malformed request (RFC 9113 8.2.2): its stream reset, the next call on the connection served', async () => {
  const r = await call({});
  assert.equal(r.grpcStatus, 0, r.message);
  assert.deepEqual(firstRawOutput(r.data), SEED_OUT);
  const c = rawConn();
  c.send(...rawCall(1, inferFields([['te', 'gzip']])));
  assert.equal(await outcome(c, 1), 'reset 1'); // PROTOCOL_ERROR
  c.send(...rawCall(3, inferFields([['te', 'trailers']])));
  assert.equal(await outcome(c, 3), 'answered');
  c.sock.destroy();
});

test('a pseudo-header sent twice is a malformed request (RFC 9113 8.3): its stream reset, the connection serving', async () => {
  const c = rawConn();
  let id = 1;
  for (const dup of [[':path', INFER], [':method', 'POST'], [':scheme', 'http'], [':authority', 'y']]) {
    c.send(...rawCall(id, inferFields([dup, ['te', 'trailers']])));
    assert.equal(await outcome(c, id), 'reset 1', dup[0]);
    id += 2;
  }
  c.send(...rawCall(id, inferFields([['te', 'trailers']])));
  assert.equal(await outcome(c, id), 'answered');
  c.sock.destroy();
});

test('grpc-timeout sent twice is INVALID_ARGUMENT, whichever the two: the second took the first\'s place', async () => {
  // a malformed one behind a good one was served; a good one behind an
  // expired one ran with the second's deadline
  for (const pair of [['12x', '1S'], ['1S', '12x'], ['0m', '100S'], ['100S', '100S']]) {
    const r = await call({ te: 'trailers', 'grpc-timeout': pair });
    assert.equal(r.grpcStatus, 3, `${pair}: ${r.grpcStatus} ${r.message}`);
    assert.match(r.message, /^grpc-timeout: sent more than once/, String(pair));
  }
  const r = await call({ te: 'trailers', 'grpc-timeout': '100S' });
  assert.deepEqual(firstRawOutput(r.data), SEED_OUT);
});

/** HEADERS and 8 CONTINUATIONs (nghttp2 takes no more) on stream id:
 * fields, then one 4 KB field entered in the HPACK table and sent again
 * by its index, one byte each, for the rest of 147 KB: 590 MB of fields */
function bigBlock(id, fields, endStream) {
  const head = Buffer.concat([block(fields), litIndexed('x-a', 'a'.repeat(4000))]);
  const out = [h2frame(HEADERS, endStream ? END_STREAM : 0, id, Buffer.concat([head, Buffer.alloc(16384 - head.length, 0xbe)]))];
  for (let i = 1; i < 9; i++) out.push(h2frame(9, i === 8 ? END_HEADERS : 0, id, Buffer.alloc(16384, 0xbe)));
  return out;
}

test('a header list past the 64 KB SETTINGS allowed resets its stream at once: an indexed 4 KB field sent 143,000 times (590 MB from 147 KB) kept the loop 280 ms and was served', async () => {
  const c = rawConn();
  c.send(...bigBlock(1, inferFields([['te', 'trailers']]), false), h2frame(0, END_STREAM, 1, frame(seedMsg())));
  assert.equal(await outcome(c, 1), 'reset 2'); // INTERNAL_ERROR: nghttp2's for a refused header
  // the same in a call's trailers
  c.send(h2frame(HEADERS, END_HEADERS, 3, block(inferFields([['te', 'trailers']]))), h2frame(0, 0, 3, frame(seedMsg())),
    ...bigBlock(3, [], true));
  assert.equal(await outcome(c, 3), 'reset 2');
  // the table and the connection still right: the next call served
  c.send(...rawCall(5, inferFields([['te', 'trailers']])));
  assert.equal(await outcome(c, 5), 'answered');
  c.sock.destroy();
  const r = await call({ te: 'trailers' });
  assert.deepEqual(firstRawOutput(r.data), SEED_OUT);
});
