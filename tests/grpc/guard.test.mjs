// guard.test.mjs - the gRPC door against clients that hold resources:
// answers they do not read (memory-budget), connections that never send a
// call (header-timeout), messages that trickle in (min-body-rate: the
// call ends, the connection stays), calls ended early and then left
// silent (reset, so connection-timeout applies),
// connections past max-connections counted with REST's (eviction), streams
// opened and reset in a flood (rapid reset: GOAWAY), and a
// second attnd on the gRPC port (--reuse-port). Hand-built HTTP/2 with
// node:http2 and raw sockets with node:net.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http2 from 'node:http2';
import net from 'node:net';
import { test } from 'node:test';
import { ATTND, GRPC_CONN_COST, REFS, SLOW, fp32, infer, requestsUsed, start } from '../server/helper.mjs';
import { fields, frame, ld, packedI64, seedMsg, str } from './wire.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const X = REFS.causal;
const xreq = (id) => ({ id, inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
/** memory-budget held but the open connections' own (gRPC 80 KiB each,
 * REST 36 KiB): by bodies, calls and answers */
const used = async (d) => requestsUsed(await (await fetch(`${d.url}/metrics`)).text());
/** all of it, gRPC connections' included (REST ones', this fetch's, aside) */
const usedAll = async (d) => {
  const m = await (await fetch(`${d.url}/metrics`)).text();
  return requestsUsed(m) + GRPC_CONN_COST * Number(/\nattnd_grpc_open_connections (\d+)\n/.exec(m)[1]);
};

const INFER = '/inference.GRPCInferenceService/ModelInfer';
/** ModelInferRequest for sdpa: q, k, v [T, 1] raw, asking for the T x T attention */
function bigAnswerMsg(T) {
  const col = Buffer.from(new Float32Array(Array.from({ length: T }, (_, i) => (i % 8) / 8)).buffer);
  return Buffer.concat([
    str(1, 'sdpa'),
    ...['q', 'k', 'v'].map((n) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, [T, 1])]))),
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
/** waitFor(what, fn, ms): until fn() is true; ms times SLOW is a bound for
 * a hang (a sanitized attnd on a loaded machine), never a speed. */
async function waitFor(what, fn, ms = 15000) {
  const end = Date.now() + ms * SLOW;
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
  const lim = ['--memory-budget', '12000000', '--max-body', '1000000', '--max-json-body', '1000000', '--request-memory', String(12000000 - 131072)];
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

test('memory budget: a stream message that does not fit is answered once its id has come, while the rest of it is still skipped; the stream goes on', async () => {
  const d = await start({ grpc: true, args: ['--memory-budget', '9600000', '--max-body', '1000000',
    '--max-json-body', '1000000', '--request-memory', String(9600000 - 131072)] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  const other = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  try {
    unread(session, bigAnswerMsg(1500)); // 9 MB held: under 0.6 MB left
    await waitFor('the answer held', async () => (await used(d)) > 8000000);
    const st = other.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc', te: 'trailers' });
    st.on('error', () => {});
    let data = Buffer.alloc(0);
    const trailers = new Promise((res) => st.on('trailers', res));
    st.on('data', (c) => { data = Buffer.concat([data, c]); });
    // 999000 bytes: its id and model, then a field that runs on; only
    // the first 4000 bytes are sent
    const msg = Buffer.concat([str(1, 'sdpa'), str(3, 'early'), ld(9, Buffer.alloc(999000 - 17, 0x61))]);
    assert.equal(msg.length, 999000);
    st.write(frame(msg).subarray(0, 4000));
    await waitFor('the error answer before the rest of the message', async () => data.length >= 5, 5000);
    const ans = fields(data.subarray(5, 5 + data.readUInt32BE(1)));
    assert.match(ans[1][0].toString(), /memory-budget/);
    assert.equal(fields(ans[2][0])[3][0].toString(), 'early');
    // the rest is skipped as its message, and the next one is served
    data = Buffer.alloc(0);
    st.end(Buffer.concat([frame(msg).subarray(4000), frame(Buffer.concat([str(3, 'next'), seedMsg()]))]));
    const t = await trailers;
    assert.equal(t['grpc-status'], '0', decodeURIComponent(t['grpc-message'] || ''));
    const next = fields(data.subarray(5, 5 + data.readUInt32BE(1)));
    assert.equal(next[1], undefined, next[1] && next[1][0].toString());
    assert.equal(fields(next[2][0])[3][0].toString(), 'next');
  } finally {
    session.destroy();
    other.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('memory budget: a flood of empty stream messages behind a paused connection counts what it holds and stays within the budget; the stream ends UNAVAILABLE', async () => {
  // for calls, beside the connection's own 80 KiB and the REST one's 36
  // KiB that this test's fetches share (request-memory: what a start
  // takes, a request's 128 KiB beside it)
  const budget = 9100000;
  const d = await start({ grpc: true, args: ['--memory-budget', String(budget + 81920 + 36864), '--max-body', '1000000',
    '--max-json-body', '1000000', '--request-memory', String(budget + 81920 + 36864 - 131072), '--grpc-buffer', '65536'] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  // a connection window the unread stream cannot fill: only its own
  // window's worth is sent, and the stream beside it is answered
  session.on('connect', () => session.setLocalWindowSize(64 << 20));
  try {
    unread(session, bigAnswerMsg(1500)); // 9 MB unread: the connection pauses
    await waitFor('the answer held', async () => (await used(d)) > 8000000);
    const st = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc', te: 'trailers' });
    st.on('error', () => {});
    st.on('data', () => {});
    let t = {};
    st.on('response', (h) => { t = { ...t, ...h }; });
    st.on('trailers', (h) => { t = { ...t, ...h }; });
    const closed = new Promise((res) => st.on('close', res));
    st.write(Buffer.alloc(5 * 200000)); // 200000 empty messages: 1 MB, the stream's window
    await Promise.race([closed, sleep(5000)]);
    assert.equal(t['grpc-status'], '14');
    assert.match(decodeURIComponent(t['grpc-message']), /memory-budget/);
    // held messages and their refusals were each a few hundred bytes to
    // two kilobytes of the server's memory: counted, within the budget
    assert.ok((await used(d)) <= budget, `${await used(d)} bytes used`);
    session.destroy();
    await waitFor('the budget back to 0', async () => (await used(d)) === 0, 5000);
  } finally {
    session.destroy();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('memory budget: a stream\'s answered requests waiting in order behind one still running count what they hold', async () => {
  const d = await start({ grpc: true, args: ['--queue-size', '4000', '--batch-delay-us', '3000000'] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  try {
    const st = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc', te: 'trailers' });
    st.on('error', () => {});
    let n = 0;
    st.on('data', (c) => { n += c.length; });
    const closed = new Promise((res) => st.on('close', res));
    // a request the batch delay holds 3 s, then 3000 refused at once (no
    // model named): their answers wait in order behind it
    st.write(Buffer.concat([frame(seedMsg()), Buffer.alloc(5 * 3000)]));
    await waitFor('the 3000 answered', async () => (await used(d)) > 3000 * 1500, 2000);
    assert.equal(n, 0, 'none sent before the first');
    st.end();
    await closed;
    // the trailers' bytes count until attnd's write of them completes, a
    // loop turn after the client read them (grpc_conn.c's on_written)
    await waitFor('the budget back to 0', async () => (await used(d)) === 0, 5000);
  } finally {
    session.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

/** a raw TCP connection (no HTTP/2 preface: it never begins a call) */
function rawConn(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => resolve(s));
    s.on('error', reject);
  });
}
/** closedWithin(sock or session, ms): true when the server closes it in time */
/** closedWithin(x, ms): whether x closes within ms (callers pass ms times
 * SLOW: a bound for a close that never comes, not a speed). */
function closedWithin(x, ms) {
  return new Promise((resolve) => {
    if (x.destroyed || x.closed) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    const done = () => { clearTimeout(t); resolve(true); };
    x.on('close', done);
    if (x.resume) x.resume(); // a socket: read, so that its end is seen
  });
}
const openConns = async (d) => Number(/\nattnd_open_connections (\d+)\n/.exec(await (await fetch(`${d.url}/metrics`)).text())[1]);
/** a session that has made one good call (ServerLive) */
async function liveSession(port) {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on('error', () => {});
  const r = await new Promise((res, rej) => {
    const req = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ServerLive', 'content-type': 'application/grpc', te: 'trailers' });
    let head = {};
    req.on('response', (h) => { head = h; });
    req.on('trailers', (t) => { head = { ...head, ...t }; });
    req.on('data', () => {});
    req.on('error', rej);
    req.on('end', () => res(Number(head['grpc-status'])));
    req.end(frame(Buffer.alloc(0)));
  });
  assert.equal(r, 0);
  return session;
}

test('header-timeout: a gRPC connection that sends no call in time is closed; one between calls is not', async () => {
  const d = await start({ grpc: true, args: ['--header-timeout', '1'] });
  try {
    const silent = await rawConn(d.grpcPort); // not even the preface
    const idle = http2.connect(`http://127.0.0.1:${d.grpcPort}`); // preface and SETTINGS, no call
    idle.on('error', () => {});
    const served = await liveSession(d.grpcPort);
    assert.ok(await closedWithin(silent, 4000 * SLOW), 'a connection with no preface is closed');
    assert.ok(await closedWithin(idle, 4000 * SLOW), 'a session with no call is closed');
    await sleep(500);
    assert.ok(!served.closed && !served.destroyed, 'a served connection waits for its next call');
    served.close();
    const why = /grpc: closed \d connections? whose first call did not arrive within 1 s \(header-timeout\)/;
    await waitFor('the log line', () => why.test(d.log()), 3000).catch(() => {});
    assert.match(d.log(), why);
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});

/** a call that sends `bytes` and then nothing: {head (response headers and
 * trailers), closed (resolves to the stream's RST_STREAM code)} */
function stalled(session, bytes) {
  const req = session.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' });
  const out = { head: {} };
  req.on('response', (h) => { out.head = { ...out.head, ...h }; });
  req.on('trailers', (t) => { out.head = { ...out.head, ...t }; });
  req.on('data', () => {});
  req.on('error', () => {});
  out.closed = new Promise((res) => req.on('close', () => res(req.rstCode)));
  req.write(bytes);
  return out;
}

test('min-body-rate: a gRPC message that trickles in ends its call (RESOURCE_EXHAUSTED, stream reset); its connection serves on', async () => {
  const d = await start({ grpc: true, args: ['--header-timeout', '1', '--min-body-rate', '1000'] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  try {
    const h = Buffer.alloc(5);
    h.writeUInt32BE(100000, 1);
    const slow = stalled(session, Buffer.concat([h, Buffer.from('0123456789')])); // 15 of 100005 bytes, then nothing
    assert.equal((await call(session, bigAnswerMsg(8))).grpcStatus, 0, 'a call beside it is served');
    const rst = await Promise.race([slow.closed, sleep(5000 * SLOW).then(() => 'still open')]);
    assert.equal(rst, 0, 'reset (NO_ERROR) once header-timeout passed at under 1000 bytes/s');
    assert.equal(slow.head['grpc-status'], '8', JSON.stringify(slow.head));
    assert.match(decodeURIComponent(slow.head['grpc-message']), /^message: 15 bytes in \d+\.\d s, slower than 1000 bytes\/s \(min-body-rate\)$/);
    assert.ok(!session.closed && !session.destroyed, 'its connection stays');
    assert.equal((await call(session, bigAnswerMsg(8))).grpcStatus, 0, 'and serves the next call');
    const why = /grpc: ended 1 call whose message came slower than 1000 bytes\/s \(min-body-rate\)/;
    await waitFor('the log line', () => why.test(d.log()), 3000).catch(() => {});
    assert.match(d.log(), why);
  } finally {
    session.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('min-body-rate: a unary call whose message came whole but whose END_STREAM never does ends too (its message held until then)', async () => {
  const d = await start({ grpc: true, args: ['--header-timeout', '1', '--min-body-rate', '1000'] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  try {
    const held = stalled(session, frame(bigAnswerMsg(8))); // whole, no END_STREAM
    const rst = await Promise.race([held.closed, sleep(5000 * SLOW).then(() => 'still open')]);
    assert.equal(rst, 0, 'reset (NO_ERROR) once header-timeout passed at under 1000 bytes/s');
    assert.equal(held.head['grpc-status'], '8', JSON.stringify(held.head));
    assert.match(decodeURIComponent(held.head['grpc-message']), /slower than 1000 bytes\/s \(min-body-rate\)$/);
    // given back when the stream closed; the RST_STREAM's own bytes count
    // until attnd's write of them completes (grpc_conn.c's on_written)
    await waitFor('its message given back', async () => (await used(d)) === 0, 5000);
    assert.equal((await call(session, bigAnswerMsg(8))).grpcStatus, 0, 'the connection serves on');
  } finally {
    session.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('min-body-rate: a call that trickles on a connection paused for its unread answers (--grpc-buffer) ends too: only a call with no window left is spared', async () => {
  const d = await start({ grpc: true, args: ['--header-timeout', '1', '--min-body-rate', '1000', '--grpc-buffer', '65536', '--drain-ms', '1000'] }); // (the stop's drain: the unread answer)
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  try {
    // 160 KB unread against a 64 KiB window: past --grpc-buffer, paused
    unread(session, bigAnswerMsg(200));
    await waitFor('the unread answer made', async () => (await (await fetch(`${d.url}/v2/models/sdpa/stats`)).json())
      .model_stats[0].inference_stats.success.count === 1);
    const h = Buffer.alloc(5);
    h.writeUInt32BE(100000, 1);
    // 15 of 100005 bytes, then nothing, its window wide open: it was spared
    // for as long as the other answer went unread
    const slow = stalled(session, Buffer.concat([h, Buffer.from('0123456789')]));
    const rst = await Promise.race([slow.closed, sleep(5000 * SLOW).then(() => 'still open')]);
    assert.equal(rst, 0, 'reset (NO_ERROR) once header-timeout passed at under 1000 bytes/s');
    assert.equal(slow.head['grpc-status'], '8', JSON.stringify(slow.head));
    assert.match(decodeURIComponent(slow.head['grpc-message']), /^message: 15 bytes in \d+\.\d s, slower than 1000 bytes\/s \(min-body-rate\)$/);
  } finally {
    session.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('a call ended before its client finished sending is reset, so a client that then sends nothing cannot hold its connection', async () => {
  const d = await start({ grpc: true, args: ['--max-body', '2000', '--connection-timeout', '1'] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  session.on('error', () => {});
  try {
    const h = Buffer.alloc(5);
    h.writeUInt32BE(100000, 1); // over max-body: ended at its prefix
    const big = stalled(session, h);
    const rst = await Promise.race([big.closed, sleep(3000 * SLOW).then(() => 'still open')]);
    assert.equal(rst, 0, 'reset (NO_ERROR) after its trailers');
    assert.equal(big.head['grpc-status'], '8', JSON.stringify(big.head));
    assert.match(decodeURIComponent(big.head['grpc-message']), /over the limit of 2000 \(max-body\)/);
    assert.ok(await closedWithin(session, 4000 * SLOW), 'with no call left, connection-timeout (1 s) closes the connection');
  } finally {
    session.destroy();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('rapid reset (CVE-2023-44487): a client that opens and cancels streams in a flood gets GOAWAY; others are served, the drop is logged and counted', async () => {
  const d = await start({ grpc: true });
  const flood = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  const other = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  flood.on('error', () => {});
  other.on('error', () => {});
  try {
    let goaway = null;
    flood.on('goaway', (code) => { goaway = code; });
    let sent = 0;
    for (; sent < 5000 && goaway === null && !flood.destroyed; sent++) {
      const req = flood.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc' });
      req.on('error', () => {});
      req.close(http2.constants.NGHTTP2_CANCEL);
      if (sent % 100 === 99) await sleep(0); // let the session write
    }
    await waitFor('GOAWAY to the flooding client', () => goaway !== null || flood.destroyed, 5000);
    assert.ok(goaway !== null && goaway !== 0, `GOAWAY with an error after ${sent} reset streams (got ${goaway}): ` +
      'libnghttp2 must carry its stream-reset limit (1.57+, or Debian 12\'s 1.52.0-1+deb12u1 and later)');
    assert.equal((await call(other, bigAnswerMsg(8))).grpcStatus, 0, 'another connection is served');
    const m = await (await fetch(`${d.url}/metrics`)).text();
    assert.match(m, /\nattnd_grpc_connection_errors_total 1\n/);
    assert.match(m, /\nattnd_pool_jobs 0\n/);
    // the line goes through the log writer's thread: it reaches stderr a
    // moment after the counter moves
    const line = /warn attnd: grpc: ended 1 connection for HTTP\/2 errors since the last such line \(this one: GOAWAY [A-Z_]+\)/;
    await waitFor('the log line', () => line.test(d.log()), 5000).catch(() => {});
    assert.match(d.log(), line);
  } finally {
    flood.destroy();
    other.close();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('max-connections counts both doors: a new gRPC connection evicts the one waiting longest for its first request', async () => {
  const d = await start({ grpc: true, args: ['--max-connections', '3'] });
  const socks = [];
  try {
    const rest = await rawConn(d.port); // the oldest: a REST connection with no request yet
    await sleep(50);
    const g1 = await rawConn(d.grpcPort);
    await sleep(50);
    const g2 = await rawConn(d.grpcPort);
    socks.push(rest, g1, g2);
    await sleep(100);
    const s1 = await liveSession(d.grpcPort); // the fourth: served
    assert.ok(await closedWithin(rest, 3000 * SLOW), 'the REST connection waiting longest is evicted');
    const s2 = await liveSession(d.grpcPort);
    assert.ok(await closedWithin(g1, 3000 * SLOW), 'then the gRPC one waiting longest');
    assert.ok(!g2.destroyed && !s1.closed, 'the others stay');
    assert.ok((await openConns(d)) >= 3);
    // logged by the next sweep, from the log writer's thread: d.logged waits
    // 2 s times SLOW, a bound for a hang (it was 2 s unscaled), not a speed
    const over = /over max-connections \(3\): closed the ones? waiting longest/;
    assert.match(await d.logged(over, 2000), over);
    s1.close();
    s2.close();
  } finally {
    for (const s of socks) s.destroy();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('memory budget: each open gRPC connection holds 80 KiB of it; one that does not fit is closed at its accept, logged and counted, and the next one fits once another closed', async () => {
  // room for 3 connections' state (3 x 81920) and their calls, not for 4
  const d = await start({ grpc: true, args: ['--memory-budget', String(4 * 81920 - 1), '--max-body', '100000',
    '--max-json-body', '100000', '--request-memory', '100000'] });
  const metric = async (name) => Number(new RegExp(`\\n${name} (\\d+)\\n`).exec(await (await fetch(`${d.url}/metrics`)).text())[1]);
  const sessions = [];
  try {
    for (let i = 0; i < 3; i++) sessions.push(await liveSession(d.grpcPort));
    // (the last call's answer counts until attnd's write of it completes)
    await waitFor('three connections held, nothing else', async () => (await usedAll(d)) === 3 * 81920, 5000);
    // the fourth is closed before its SETTINGS: no HTTP/2 session is made
    const fourth = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
    let settings = false;
    fourth.on('remoteSettings', () => { settings = true; });
    fourth.on('error', () => {});
    assert.ok(await closedWithin(fourth, 3000 * SLOW), 'the fourth connection is closed');
    assert.ok(!settings, 'and never got a SETTINGS frame');
    assert.equal(await metric('attnd_grpc_connections_refused_total'), 1);
    assert.equal(await metric('attnd_grpc_open_connections'), 3);
    await waitFor('the refusal logged', async () => /grpc: 1 connection refused at accept since the last such line: .*memory-budget/.test(d.log()), 3000);
    assert.equal(await usedAll(d), 3 * 81920, 'the refused one held nothing');
    sessions.shift().close();
    await waitFor('its 80 KiB given back', async () => (await usedAll(d)) === 2 * 81920, 5000);
    sessions.push(await liveSession(d.grpcPort)); // fits again, and is served
    for (const s of sessions.splice(0)) s.close();
    await waitFor('the budget back to 0', async () => (await usedAll(d)) === 0, 5000);
  } finally {
    for (const s of sessions) s.destroy();
    assert.equal((await d.stop()).code, 0, d.log());
  }
});

test('a second attnd on a used gRPC port exits with "address in use" unless both run with --reuse-port 1', async () => {
  const a = await start({ grpc: true, args: ['--reuse-port', '1'] });
  try {
    const port = String(a.grpcPort);
    const b = spawnSync(ATTND, ['--port', '0', '--grpc-port', port, '--models', a.dir], { encoding: 'utf8', timeout: 30000 });
    assert.equal(b.status, 1, b.stderr);
    assert.match(b.stderr, new RegExp(`--grpc-port ${port}: address in use`));
    const c = await start({ grpc: true, args: ['--grpc-port', port, '--reuse-port', '1'] });
    assert.equal(c.grpcPort, a.grpcPort);
    assert.equal((await c.stop()).code, 0, c.log());
  } finally { assert.equal((await a.stop()).code, 0, a.log()); }
});
