// hostile.test.mjs - the gRPC door against request heads and frame floods
// no gRPC client sends, built byte by byte (wire.mjs): `te` missing or
// other than "trailers", a pseudo-header or grpc-timeout sent twice, and
// connections that send frames carrying nothing (PRIORITY, empty DATA,
// unknown types) as fast as they can, or 128 small calls at once. Each is
// answered or ended, and a call beside it is served.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { SLOW, queued, requestsUsed, start, waitFor } from '../server/helper.mjs';
import { SEED_OUT, firstRawOutput, frame, h2frame, lit, litIndexed, seedMsg, str } from './wire.mjs';

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
function call(headers = {}, body = frame(seedMsg()), port = d.grpcPort) {
  return new Promise((res, rej) => {
    const s = http2.connect(`http://127.0.0.1:${port}`);
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
 * id, payload}), until(pred, ms) waits for one that matches (up to ms,
 * times SLOW: a sanitized attnd on a loaded machine takes seconds past 5
 * to answer 64 calls of 64 KB), closed */
function rawConn(port = d.grpcPort) {
  const sock = net.connect(port, '127.0.0.1');
  const c = { sock, frames: [], closed: false };
  let buf = Buffer.alloc(0);
  sock.on('error', () => {});
  sock.on('close', () => { c.closed = true; });
  sock.on('data', (b) => {
    buf = Buffer.concat([buf, b]);
    while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
      const n = buf.readUIntBE(0, 3);
      c.frames.push({ type: buf[3], flags: buf[4], id: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + n) });
      // acked: until then nghttp2 holds streams to the 64 KB window
      if (buf[3] === SETTINGS && !(buf[4] & 1)) sock.write(h2frame(SETTINGS, 1, 0));
      buf = buf.subarray(9 + n);
    }
  });
  c.send = (...f) => sock.write(Buffer.concat(f));
  c.until = async (pred, ms = 5000) => {
    for (const t = Date.now() + ms * SLOW; Date.now() < t; await new Promise((r) => setTimeout(r, 10))) {
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
async function outcome(c, id, orGoaway = false) {
  const f = await c.until((x) => (orGoaway && x.type === GOAWAY) ||
    (x.id === id && (x.type === RST || (x.type === HEADERS && (x.flags & END_STREAM)))));
  if (!f) return 'nothing';
  if (f.type === GOAWAY) return 'goaway';
  return f.type === RST ? `reset ${f.payload.readUInt32BE(0)}` : 'answered';
}

// whether process pid is stopped (SIGSTOP taken effect, state T)
const stopped = (pid) => readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0] === 'T';

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

/** send frames (built by make) on c until it is closed or sent bytes in
 * all, a chunk at a time as the socket drains */
async function flood(c, make, bytes) {
  const chunk = Buffer.concat(Array.from({ length: 1024 }, make));
  for (let sent = 0; sent < bytes && !c.closed; sent += chunk.length)
    if (!c.sock.write(chunk)) await new Promise((r) => { c.sock.once('drain', r); c.sock.once('close', r); });
}

test('a connection sending frames that carry no call (PRIORITY, empty DATA, unknown types) is ended past 8 times what its calls carry and 8 MiB: GOAWAY ENHANCE_YOUR_CALM, counted and logged; a call beside it served', async () => {
  // each such frame is up to 10 times the work of a byte read and dropped
  // (nghttp2's PRIORITY tree, a stream's DATA bookkeeping), and none ended
  // the connection: one client kept the loop as busy as it could send
  // (a PING flood nghttp2 ends itself: more than 1000 acks waiting)
  const kinds = {
    PRIORITY: (_, i) => h2frame(2, 0, 2 * i + 101, Buffer.from([0, 0, 0, 0, 16])),
    'empty DATA': () => h2frame(0, 0, 1, Buffer.alloc(0)),
    unknown: () => h2frame(0x20, 0, 0, Buffer.alloc(100)),
  };
  const m0 = await fetch(`${d.url}/metrics`).then((r) => r.text());
  const errs = (m) => Number(/attnd_grpc_connection_errors_total (\d+)/.exec(m)[1]);
  for (const [kind, make] of Object.entries(kinds)) {
    const c = rawConn();
    // a stream open (no message yet) for the empty DATA to land on
    c.send(h2frame(HEADERS, END_HEADERS, 1, block(inferFields([['te', 'trailers']]))));
    await flood(c, make, 12 << 20);
    const g = await c.until((f) => f.type === GOAWAY, 10000);
    assert.ok(g, `${kind}: no GOAWAY after 12 MiB`);
    assert.equal(g.payload.readUInt32BE(4), 11, kind); // ENHANCE_YOUR_CALM
    // a bound for a connection never closed (a hang), times SLOW: no speed
    for (let t = Date.now(); !c.closed && Date.now() - t < 5000 * SLOW;) await new Promise((r) => setTimeout(r, 10));
    assert.ok(c.closed, `${kind}: closed`);
    const r = await call({ te: 'trailers' });
    assert.deepEqual(firstRawOutput(r.data), SEED_OUT, kind);
  }
  const m1 = await fetch(`${d.url}/metrics`).then((r) => r.text());
  assert.equal(errs(m1) - errs(m0), 3);
  assert.match(await d.logged(/frames carrying no call/), /grpc: ended \d+ connections? for HTTP\/2 errors .*\(this one: \d+ bytes of frames carrying no call's headers or messages/);
});

test('a stream the HTTP/2 layer resets before its HEADERS made a call (te wrong, a pseudo-header twice, a header list past 64 KB, a block never finished) is no call a client cancelled: attnd_grpc_calls_total{code="CANCELLED"} unchanged (each counted one)', async () => {
  // after the flood case, which reads its own log line: HTTP/2 errors
  // get one a second at most, so this case's GOAWAY just before held the
  // flood's back (counted into a line that never came)
  const cancelled = async () => Number(/^attnd_grpc_calls_total\{code="CANCELLED"\} (\d+)$/m
    .exec(await (await fetch(`${d.url}/metrics`)).text())?.[1] ?? 0);
  const before = await cancelled();
  const c = rawConn();
  c.send(...rawCall(1, inferFields([['te', 'gzip']])));
  assert.equal(await outcome(c, 1), 'reset 1');
  c.send(...rawCall(3, inferFields([[':path', INFER], ['te', 'trailers']])));
  assert.equal(await outcome(c, 3), 'reset 1');
  c.send(...bigBlock(5, inferFields([['te', 'trailers']]), true));
  assert.equal(await outcome(c, 5), 'reset 2');
  // its CONTINUATION never comes; the connection goes with it
  c.send(h2frame(HEADERS, 0, 7, block(inferFields()).subarray(0, 10)));
  c.send(...rawCall(9, inferFields([['te', 'trailers']]))); // (not a CONTINUATION: GOAWAY)
  assert.ok(await c.until((f) => f.type === GOAWAY), 'GOAWAY');
  for (const t = Date.now(); !c.closed && Date.now() - t < 5000 * SLOW;) await new Promise((r) => setTimeout(r, 10));
  assert.ok(c.closed, 'closed');
  // and a call its client does cancel still counts
  const c2 = rawConn();
  c2.send(h2frame(HEADERS, END_HEADERS, 1, block(inferFields([['te', 'trailers']]))), h2frame(RST, 0, 1, Buffer.from([0, 0, 0, 8])));
  const until = Date.now() + 5000 * SLOW;
  while ((await cancelled()) === before && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  assert.equal(await cancelled(), before + 1);
  c2.sock.destroy();
});

test('a client whose calls carry messages and answers is not taken for a flood, however many PINGs and WINDOW_UPDATEs come with them', async () => {
  // 20 MiB of messages, each call with a PING and a WINDOW_UPDATE: the
  // control frames stay far under an eighth of what the calls carry
  const c = rawConn();
  await c.until((f) => f.type === SETTINGS && !(f.flags & 1)); // acked: 1 MiB windows
  const big = frame(Buffer.concat([seedMsg(), Buffer.from([0x7a, 0x80, 0x80, 0x04]), Buffer.alloc(65536)])); // field 15, 64 KB, skipped
  let id = 1;
  for (let n = 0; n < 320; n++, id += 2) {
    const data = [];
    for (let at = 0; at < big.length; at += 16000)
      data.push(h2frame(0, at + 16000 >= big.length ? END_STREAM : 0, id, big.subarray(at, at + 16000)));
    c.send(h2frame(HEADERS, END_HEADERS, id, block(inferFields([['te', 'trailers']]))), ...data,
      h2frame(6, 0, 0, Buffer.alloc(8)), h2frame(8, 0, 0, Buffer.from([0, 0, 0, 1])));
    if (n % 64 === 63) assert.equal(await outcome(c, id), 'answered');
  }
  assert.ok(!c.frames.some((f) => f.type === GOAWAY), 'no GOAWAY');
  c.sock.destroy();
});

test('calls refused while their client still sends (a message over max-body) are no flood: the window of DATA each sends after its reset is allowed for', async () => {
  // such DATA reaches no call (its stream is gone, nghttp2 drops it): 12
  // such calls, 1 MiB each, were 12 MiB that carried nothing
  const c = rawConn();
  await c.until((f) => f.type === SETTINGS && !(f.flags & 1)); // acked: 1 MiB windows
  for (let n = 0, id = 1; n < 12; n++, id += 2) {
    const prefix = Buffer.from([0, 0x7f, 0xff, 0xff, 0xff]); // 2 GiB: over max-body
    c.send(h2frame(HEADERS, END_HEADERS, id, block(inferFields([['te', 'trailers']]))), h2frame(0, 0, id, prefix));
    const rest = [];
    for (let at = 5; at + 16000 <= (1 << 20) - 16000; at += 16000) rest.push(h2frame(0, 0, id, Buffer.alloc(16000)));
    c.send(...rest);
    assert.notEqual(await outcome(c, id), 'nothing', `call ${n}`);
  }
  c.send(...rawCall(25, inferFields([['te', 'trailers']])));
  assert.equal(await outcome(c, 25), 'answered');
  assert.ok(!c.frames.some((f) => f.type === GOAWAY), 'no GOAWAY');
  c.sock.destroy();
});

test('an open call counts against --memory-budget (3 KB) until its stream closes: past it a new stream is refused (REFUSED_STREAM), logged; idle streams held 2.8 KB each uncounted, 128 a connection', async (t) => {
  // 64 KiB for calls beside the connection's own 80 KiB, less the REST
  // connections' 36 KiB each that this test's fetches hold open (their
  // count read before the calls)
  const BUDGET = 65536 + 81920 + 2 * 36864;
  const e = await start({ grpc: true, t, args: ['--memory-budget', String(BUDGET), '--max-body', '16384', '--max-json-body', '16384',
    '--request-memory', '16384'] });
  const gauge = async () => requestsUsed(await fetch(`${e.url}/metrics`).then((r) => r.text()));
  const m0 = await fetch(`${e.url}/metrics`).then((r) => r.text());
  assert.equal(requestsUsed(m0), 0);
  const room = BUDGET - 81920 - 36864 * Number(/\nattnd_http_open_connections (\d+)\n/.exec(m0)[1]);
  const c = rawConn(e.grpcPort);
  await c.until((f) => f.type === SETTINGS && !(f.flags & 1));
  const STREAM = [[':method', 'POST'], [':scheme', 'http'], [':path', '/inference.GRPCInferenceService/ModelStreamInfer'],
    [':authority', 'x'], ['content-type', 'application/grpc'], ['te', 'trailers']];
  for (let id = 1; id < 80; id += 2) c.send(h2frame(HEADERS, END_HEADERS, id, block(STREAM)));
  const refused = await c.until((f) => f.type === RST);
  assert.ok(refused, 'a stream refused');
  assert.equal(refused.payload.readUInt32BE(0), 7); // REFUSED_STREAM
  assert.equal(refused.id, 1 + 2 * Math.floor(room / 3072), 'the first past the budget');
  // the calls' 3072 bytes each; the RST_STREAM's own bytes count until
  // attnd's write of them completes, a loop turn after this client read
  // them (grpc_conn.c's on_written): waited for, 5 s times SLOW a hang's bound
  const calls = 3072 * Math.floor(room / 3072);
  for (const t0 = Date.now(); (await gauge()) !== calls && Date.now() - t0 < 5000 * SLOW;) await new Promise((r) => setTimeout(r, 20));
  assert.equal(await gauge(), calls);
  assert.match(await e.logged(/streams? refused/), /grpc: \d+ streams? refused since the last such line: the memory for request bodies, open calls and unsent answers \(221184 bytes, memory-budget\) is in use/);
  c.sock.destroy();
  // a bound for memory never given back (a hang), times SLOW: no speed
  for (let t0 = Date.now(); (await gauge()) && Date.now() - t0 < 5000 * SLOW;) await new Promise((r) => setTimeout(r, 20));
  assert.equal(await gauge(), 0);
  const r = await call({ te: 'trailers' }, frame(seedMsg()), e.grpcPort);
  assert.deepEqual(firstRawOutput(r.data), SEED_OUT);
  assert.equal((await e.stop()).code, 0);
});

test('what nghttp2 holds a client to ends the connection (GOAWAY with its error, but a 9th CONTINUATION ends it at once), a call beside it served: WINDOW_UPDATE past 2^31-1, a stream id used again or even, more than 32 SETTINGS a frame, an HPACK table bigger than SETTINGS allow, more than 8 CONTINUATIONs', async () => {
  const GOAWAY_CODE = { PROTOCOL_ERROR: 1, FLOW_CONTROL_ERROR: 3, STREAM_CLOSED: 5, COMPRESSION_ERROR: 9, ENHANCE_YOUR_CALM: 11 };
  const head = block(inferFields([['te', 'trailers']]));
  const cases = [
    ['WINDOW_UPDATE overflow', () => [h2frame(8, 0, 0, Buffer.from([0x7f, 0xff, 0xff, 0xff]))], 'FLOW_CONTROL_ERROR'],
    ['stream id used again', () => [...rawCall(1, inferFields([['te', 'trailers']])), h2frame(HEADERS, END_HEADERS | END_STREAM, 1, head)],
      'STREAM_CLOSED'],
    ['even stream id', () => [h2frame(HEADERS, END_HEADERS, 2, head)], 'PROTOCOL_ERROR'],
    ['33 SETTINGS', () => [h2frame(SETTINGS, 0, 0, Buffer.concat(Array.from({ length: 33 }, () => Buffer.from([0, 3, 0, 0, 0, 100]))))],
      'ENHANCE_YOUR_CALM'],
    ['HPACK table size update past 4096', () => [h2frame(HEADERS, END_HEADERS, 1, Buffer.concat([Buffer.from([0x3f, 0xe1, 0x3f]), head]))],
      'COMPRESSION_ERROR'],
    ['9 CONTINUATIONs', () => [h2frame(HEADERS, 0, 1, head.subarray(0, 10)),
      ...Array.from({ length: 9 }, (_, i) => h2frame(9, 0, 1, i < 8 ? Buffer.alloc(0) : head.subarray(10)))], null],
  ];
  for (const [what, frames, code] of cases) {
    const c = rawConn();
    await c.until((f) => f.type === SETTINGS && !(f.flags & 1));
    c.send(...frames());
    if (code) {
      const g = await c.until((f) => f.type === GOAWAY);
      assert.ok(g, `${what}: GOAWAY`);
      assert.equal(g.payload.readUInt32BE(4), GOAWAY_CODE[code], `${what}: ${g.payload.subarray(8)}`);
    }
    // a bound for a connection never closed (a hang), times SLOW: no speed
    for (const t = Date.now(); !c.closed && Date.now() - t < 5000 * SLOW;) await new Promise((r) => setTimeout(r, 10));
    assert.ok(c.closed, `${what}: closed`);
    c.sock.destroy();
    const r = await call({ te: 'trailers' });
    assert.deepEqual(firstRawOutput(r.data), SEED_OUT, what);
  }
});

// pingsBehind: n raw connections each sent bytes then a PING, and a seed
// call on a connection of its own, all while attnd is stopped (SIGSTOP),
// so that every byte waits for it when it goes on; the call's answer is
// checked and how many of the n PINGs were acked before it came is
// counted (before). An ordering, not a speed.
async function pingsBehind(n, bytes) {
  const PING = 6, ACK = 1;
  const s = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  const probe = () => new Promise((res, rej) => {
    const req = s.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' });
    const chunks = [];
    req.on('error', rej);
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => res(Buffer.concat(chunks))).end(frame(seedMsg()));
  });
  assert.deepEqual(firstRawOutput(await probe()), SEED_OUT);
  const conns = [];
  for (let i = 0; i < n; i++) {
    const c = rawConn();
    assert.ok(await c.until((f) => f.type === SETTINGS && !(f.flags & ACK)), `connection ${i}: SETTINGS`);
    // its SETTINGS ACK read: attnd acked a PING sent after it (frames
    // are read in order); that ACK then dropped, so that only the PING
    // sent behind the bytes is counted
    c.send(h2frame(PING, 0, 0, Buffer.from('settings')));
    assert.ok(await c.until((f) => f.type === PING && (f.flags & ACK)), `connection ${i}: SETTINGS ACK read`);
    c.frames.length = 0;
    conns.push(c);
  }
  let answered;
  d.proc.kill('SIGSTOP');
  try {
    // (a SIGCONT sent before the stop took effect would cancel it)
    assert.ok(await waitFor(() => stopped(d.proc.pid)), 'attnd stopped');
    const at = s.socket.localPort, bw0 = s.socket.bytesWritten, rx0 = queued(d.grpcPort, at);
    answered = probe();
    for (const c of conns) c.send(bytes, h2frame(PING, 0, 0, Buffer.alloc(8)));
    // every byte in the kernel's buffers (loopback takes 1 MB a socket)
    for (let i = 0; i < 100 && conns.some((c) => c.sock.writableLength); i++) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(conns.map((c) => c.sock.writableLength), conns.map(() => 0), 'the bytes sent');
    // and the call beside them whole in attnd's socket: nghttp2 has
    // nothing left to send, and attnd's side holds every byte the
    // session wrote since attnd stopped
    const sent = () => s.socket.bytesWritten - bw0;
    assert.ok(await waitFor(() => s.state.outboundQueueSize === 0 && sent() > 0 && queued(d.grpcPort, at) - rx0 === sent()),
      `the call in attnd's socket: ${queued(d.grpcPort, at) - rx0} of ${sent()} bytes`);
  } finally {
    d.proc.kill('SIGCONT');
  }
  const answer = await answered;
  const before = conns.filter((c) => c.frames.some((f) => f.type === PING && (f.flags & ACK))).length;
  assert.deepEqual(firstRawOutput(answer), SEED_OUT);
  return { conns, before, s };
}

test('each connection reads 64 KB a loop turn, then yields: 32 connections with 1 MB of PRIORITY frames (within the flood rule) then a PING waiting at once; a call beside them is answered before any of those PINGs is acked', async () => {
  // libuv reads a readable socket up to 32 times (2 MB) a turn: without
  // the yield each connection's 1 MB and its PING went in one turn, every
  // PING acked before the call's answer (sent from a later turn, once the
  // pool has run it). With it a PING waits 16 turns of its connection, the
  // call a turn or two. attnd is stopped (SIGSTOP) while the bytes are
  // sent, so that all of them wait for it when it goes on: an ordering,
  // not a speed, which holds however slow the build or the machine.
  const PING = 6, ACK = 1;
  const junk = Buffer.concat(Array.from({ length: (1 << 20) / 14 }, (_, i) => h2frame(2, 0, 2 * i + 101, Buffer.from([0, 0, 0, 0, 16]))));
  const { conns, before, s } = await pingsBehind(32, junk);
  // then each connection is served to its end: its PING acked, not ended
  for (const [i, c] of conns.entries()) {
    assert.ok(await c.until((f) => f.type === PING && (f.flags & ACK), 20000), `connection ${i}: PING acked`);
    assert.ok(!c.frames.some((f) => f.type === GOAWAY), `connection ${i}: no GOAWAY`);
  }
  conns.forEach((c) => c.sock.destroy());
  s.close();
  // 32 of 32 acked before the answer with the yield off; 0 with it
  assert.equal(before, 0, `${before} of 32 PINGs acked before the call beside them was answered`);
});

test('each connection begins 16 calls a loop turn, then yields: 16 connections with 128 calls for a model attnd does not serve then a PING, all waiting at once; each PING is acked after the answers of the 112 calls read in the turns before it, and a call beside them is served', async () => {
  // 128 small calls fit one read (17 KB) and each is a parse and an
  // answer on the loop: one connection so took 128 calls' work a turn
  // while a call beside it waited (p50 1.2-1.5 ms a call against
  // 0.1-0.16 ms alone). Now the bytes past its 16th HEADERS wait, held,
  // for its next turn, so a PING behind 128 calls is read in its 8th turn,
  // after the answers of the 7 turns before were written: on its own
  // connection its ACK comes after 112 answers at least (read in one turn,
  // nghttp2 writes the ACK before any of them). Each connection's own
  // order, not a speed: whether the call beside them (answered from the
  // pool) came before the PINGs' ACKs was a race of the pool's thread
  // against 8 loop turns, lost once at load average 10.
  const PING = 6, ACK = 1;
  const nope = frame(str(1, 'nope'));
  const calls = Buffer.concat(Array.from({ length: 128 }, (_, i) =>
    Buffer.concat([h2frame(HEADERS, END_HEADERS, 2 * i + 1, block(inferFields([['te', 'trailers']]))), h2frame(0, END_STREAM, 2 * i + 1, nope)])));
  const { conns, s } = await pingsBehind(16, calls); // (its answer checked there)
  // then each connection is served to its end: 128 answers (NOT_FOUND)
  // and its PING acked, not ended
  for (const [i, c] of conns.entries()) {
    assert.ok(await c.until((f) => f.type === PING && (f.flags & ACK), 20000), `connection ${i}: PING acked`);
    const ends = c.frames.filter((f) => f.type === HEADERS && (f.flags & END_STREAM));
    assert.equal(ends.length, 128, `connection ${i}: every call answered`);
    assert.ok(!c.frames.some((f) => f.type === GOAWAY || f.type === RST), `connection ${i}: no GOAWAY nor reset`);
    const ack = c.frames.findIndex((f) => f.type === PING && (f.flags & ACK));
    const first = c.frames.slice(0, ack).filter((f) => f.type === HEADERS && (f.flags & END_STREAM)).length;
    assert.ok(first >= 128 - 16, `connection ${i}: ${first} of 128 calls answered before its PING's ACK`);
  }
  conns.forEach((c) => c.sock.destroy());
  s.close();
});

test('header lists earn no flood allowance past their bytes on the wire: a 4 KB field in the HPACK table named 16 times a 25-byte HEADERS counted 64 KB carried, 512 KB of PRIORITY frames allowed', async () => {
  const c = rawConn();
  await c.until((f) => f.type === SETTINGS && !(f.flags & 1));
  // the entry, on a call of its own (answered)
  c.send(h2frame(HEADERS, END_HEADERS, 1, Buffer.concat([block(inferFields([['te', 'trailers']])), litIndexed('x-a', 'a'.repeat(4000))])),
    h2frame(0, END_STREAM, 1, frame(seedMsg())));
  const prio = Buffer.concat(Array.from({ length: 1024 }, (_, i) => h2frame(2, 0, 2 * i + 1001, Buffer.from([0, 0, 0, 0, 16]))));
  for (let id = 3, sent = 0; sent < (16 << 20) && !c.closed; id += 2, sent += prio.length) {
    // 16 fields of 4 KB from 16 bytes, then no pseudo-header: its stream reset
    if (!c.sock.write(Buffer.concat([h2frame(HEADERS, END_HEADERS, id, Buffer.alloc(16, 0xbe)), prio])))
      await new Promise((r) => { c.sock.once('drain', r); c.sock.once('close', r); });
  }
  const g = await c.until((f) => f.type === GOAWAY, 10000);
  assert.ok(g, 'no GOAWAY after 16 MiB');
  assert.equal(g.payload.readUInt32BE(4), 11);
  c.sock.destroy();
});

test('calls ended while their client still sends earn no flood allowance but the DATA that client sends after the reset: a HEADERS answered UNIMPLEMENTED at once counted 1 MiB carried, 8 MiB of PRIORITY frames allowed', async () => {
  const c = rawConn();
  await c.until((f) => f.type === SETTINGS && !(f.flags & 1));
  const nope = [[':method', 'POST'], [':scheme', 'http'], [':path', '/inference.GRPCInferenceService/Nope'],
    [':authority', 'x'], ['content-type', 'application/grpc'], ['te', 'trailers']];
  const prio = Buffer.concat(Array.from({ length: 1024 }, (_, i) => h2frame(2, 0, 2 * i + 1001, Buffer.from([0, 0, 0, 0, 16]))));
  const goaway = () => c.frames.some((f) => f.type === GOAWAY);
  for (let id = 3, sent = 0; sent < (16 << 20) && !c.closed && !goaway(); id += 2) {
    // a call ended at once (its client not done): reset, then 1 MiB of
    // PRIORITY frames and no DATA on it
    c.send(h2frame(HEADERS, END_HEADERS, id, block(nope)));
    // its answer, or the GOAWAY: a HEADERS sent after it is ignored, and
    // waiting for its answer took the whole guard (5 s, 25 s sanitized)
    const o = await outcome(c, id, true);
    if (goaway()) break; // (its HEADERS came after the GOAWAY: ignored)
    assert.equal(o, 'answered', `call ${id}`);
    for (let k = 0; k < 74 && !c.closed; k++, sent += prio.length)
      if (!c.sock.write(prio))
        await new Promise((r) => { c.sock.once('drain', r); c.sock.once('close', r); });
  }
  const g = await c.until((f) => f.type === GOAWAY, 10000);
  assert.ok(g, 'no GOAWAY after 16 MiB');
  assert.equal(g.payload.readUInt32BE(4), 11);
  c.sock.destroy();
});

test('DATA of a call its client resets in the same write counts once toward the flood rule: it counted twice (the call\'s, then as DATA after a reset) while a reset\'s allowance lasted, so 1 MiB sent so bought 8 MiB more of frames carrying nothing', async () => {
  const c = rawConn();
  await c.until((f) => f.type === SETTINGS && !(f.flags & 1));
  // an allowance of 1 MiB: a call ended while its client could still send
  const nope = [[':method', 'POST'], [':scheme', 'http'], [':path', '/inference.GRPCInferenceService/Nope'],
    [':authority', 'x'], ['content-type', 'application/grpc'], ['te', 'trailers']];
  c.send(h2frame(HEADERS, END_HEADERS, 1, block(nope)));
  assert.equal(await outcome(c, 1), 'answered');
  await c.until((f) => f.type === RST && f.id === 1);
  // 64 calls of 16 KB each (a message begun, 1 MB announced), each reset
  // by its client in the write that carries its DATA
  const head = Buffer.alloc(5);
  head.writeUInt32BE(1000000, 1);
  const data = Buffer.concat([head, Buffer.alloc(16384 - 5)]);
  for (let i = 0, id = 3; i < 64; i++, id += 2) {
    c.send(h2frame(HEADERS, END_HEADERS, id, block(inferFields([['te', 'trailers']]))), h2frame(0, 0, id, data),
      h2frame(RST, 0, id, Buffer.from([0, 0, 0, 8]))); // CANCEL
    // read whole before the next write: handed to the kernel, in attnd's
    // socket (acked) and read from it
    assert.ok(await waitFor(() => !c.sock.writableLength && !queued(c.sock.localPort, d.grpcPort, 'tx') &&
      !queued(d.grpcPort, c.sock.localPort)), `call ${id}: read by attnd`);
  }
  // 1 MiB carried allows 15 MiB more of frames carrying nothing (8 times
  // 2 MiB, less what was sent); counted twice, up to 23 MiB
  await flood(c, () => h2frame(0x20, 0, 0, Buffer.alloc(1024 - 9)), 19 << 20); // 1 MiB a chunk
  const g = await c.until((f) => f.type === GOAWAY, 10000);
  assert.ok(g, 'no GOAWAY after 19 MiB of frames carrying nothing');
  assert.equal(g.payload.readUInt32BE(4), 11); // ENHANCE_YOUR_CALM
  c.sock.destroy();
});

test('a message whose 5-byte prefix says 4 GiB - 1 under a max-body past 4 GiB is refused for memory-budget, not received into a buffer of 0 bytes: its size plus one wrapped in 32 bits', async () => {
  // the budget holds a message of max-body (with its 1 + 128 bytes, its
  // call's 3072 and its connection's 80 KiB); a connection with a call
  // held open beside it takes 80 KiB + 3072 more, so one of 4 GiB - 1
  // does not fit
  const big = await start({ grpc: true, args: ['--max-body', String(2 ** 32), '--memory-budget', String(2 ** 32 + 131072)] });
  const hs = http2.connect(`http://127.0.0.1:${big.grpcPort}`);
  hs.on('error', () => {});
  try {
    const held = hs.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' });
    held.on('error', () => {});
    const gauge = async () => Number(/attnd_memory_budget_used_bytes (\d+)/.exec(await fetch(`${big.url}/metrics`).then((r) => r.text()))[1]);
    // 2 s times SLOW: a bound for a hang, not a speed
    for (const t0 = Date.now(); await gauge() < 81920 + 3072 && Date.now() - t0 < 2000 * SLOW;) await new Promise((r) => setTimeout(r, 20));
    assert.ok(await gauge() >= 81920 + 3072, 'the held connection and call are counted');
    const body = Buffer.concat([Buffer.from([0, 0xff, 0xff, 0xff, 0xff]), Buffer.alloc(16384, 7)]);
    const r = await call({ te: 'trailers' }, body, big.grpcPort);
    assert.equal(r.grpcStatus, 14, r.message);
    assert.match(r.message, /memory-budget/);
    const ok = await call({ te: 'trailers' }, frame(seedMsg()), big.grpcPort);
    assert.deepEqual(firstRawOutput(ok.data), SEED_OUT);
  } finally {
    hs.destroy();
    const e = await big.stop();
    assert.equal(e.code, 0, big.log());
  }
});

test('calls past the 16 a turn, read before SIGTERM, are served by the drain as calls begun before it: 40 calls in one write while attnd is stopped, then SIGTERM; every call answered with its output, the final GOAWAY names the last', async (t) => {
  // a connection begins 16 calls a turn and holds the rest of its read
  // for its next turns; those were begun after the signal (UNAVAILABLE
  // "draining") though the client sent them, and attnd read them, before
  // it. attnd is stopped while the bytes are sent and the signal comes,
  // so that the read (in the kernel first) comes before the signal: an
  // order, not a speed
  const e = await start({ grpc: true, t });
  const c = rawConn(e.grpcPort);
  t.after(() => c.sock.destroy());
  assert.ok(await c.until((f) => f.type === SETTINGS && !(f.flags & 1)), 'SETTINGS');
  const N = 40, ids = Array.from({ length: N }, (_, i) => 2 * i + 1);
  const calls = ids.flatMap((id) => rawCall(id, inferFields([['te', 'trailers']])));
  // (a SIGCONT sent before the stop took effect would cancel it, and the
  // signal could then be read first)
  const inAttnd = () => queued(e.grpcPort, c.sock.localPort);
  e.proc.kill('SIGSTOP');
  try {
    assert.ok(await waitFor(() => stopped(e.proc.pid)), 'attnd stopped');
    c.send(...calls);
    const bytes = Buffer.concat(calls).length;
    await waitFor(() => inAttnd() >= bytes);
    assert.ok(inAttnd() >= bytes, `the calls in attnd's socket: ${inAttnd()} of ${bytes} bytes`);
    e.proc.kill('SIGTERM');
  } finally {
    e.proc.kill('SIGCONT');
  }
  assert.deepEqual(await e.exit, { code: 0, sig: null }, e.log());
  const data = (id) => c.frames.filter((f) => f.type === 0 && f.id === id && f.payload.length);
  const goaways = c.frames.filter((f) => f.type === GOAWAY).map((f) => f.payload.readUInt32BE(0) & 0x7fffffff);
  const served = ids.filter((id) => data(id).length === 1 && String(firstRawOutput(data(id)[0].payload)) === String(SEED_OUT));
  // on the code before: the first 16 served, the 24 held answered
  // UNAVAILABLE (no message)
  assert.deepEqual(served, ids, `served: ${served.length} of ${N}`);
  assert.deepEqual(goaways, [2 ** 31 - 1, ids[N - 1]], 'the notice, then the final GOAWAY naming the last call');
});
