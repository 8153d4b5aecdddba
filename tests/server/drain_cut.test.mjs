// drain_cut.test.mjs - the drain cut short (a second signal, or
// --drain-ms passed): every call that has an answer, or gets one from the
// cut itself (503 / UNAVAILABLE "draining"), has it written before its
// connection closes, on both doors, within a short flush; a call still
// running (a model load) holds the stop until it ends, and then answers;
// nothing new starts after the cut. A client that does not read cannot
// hold the exit past the flush.
// Loads are held half-way with a FIFO config.json (repo_helper.mjs).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { NEXT, SLOW, answers, f32bytes, jsonLen, post, queued, requestsUsed, restAttention, smallRcvbuf, start, waitFor } from './helper.mjs';
import { TINY, TINY_CONFIG, body, slowStart, tracked } from './repo_helper.mjs';
import { INFER, grpcCall, grpcSession } from './soak_grpc.mjs';
import { frame, h2frame, ld, lit, packedI64, str } from '../grpc/wire.mjs';

const LOAD = '/inference.GRPCInferenceService/RepositoryModelLoad';
const INDEX = '/inference.GRPCInferenceService/RepositoryIndex';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// a slow reader's pause across the cut: past the 1 s the answers get
// after it by default (--stop-flush-ms), which cut them; the slow readers'
// attnd gives them FLUSH_MS instead, a bound for a hang (times SLOW), so
// that under load too the reading, not a race with 1 s, decides
const PAUSE_MS = 1500;
const FLUSH_MS = String(Math.min(600000, 60000 * SLOW));

const session = grpcSession;

/** cut(d): SIGTERM, then a second one once the drain has begun. */
async function cut(d) {
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/draining/), /draining/);
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/SIGTERM again: drain cut short with \d+ requests? in flight/), /drain cut short/);
}

test('gRPC: a load running when the drain is cut short holds the stop, and its call answers OK when it ends; exit 0', async (t) => {
  const { d, slow } = await slowStart(t, 'cut', { grpc: true });
  const l = tracked(grpcCall(session(t, d), LOAD, [str(2, 'slow')]));
  await slow.reading();
  await cut(d);
  await sleep(300 * SLOW);
  assert.equal(l.done, false, "the held load's call ended before its load");
  assert.doesNotMatch(d.log(), /stopping/);
  assert.ok(slow.finish());
  const r = await l.p;
  assert.equal(r.grpcStatus, 0, JSON.stringify(r));
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: a load waiting for its turn answers UNAVAILABLE "not done" at the cut, not a torn connection; the running one still answers OK', async (t) => {
  const { d, slow } = await slowStart(t, 'cut', { grpc: true });
  const s = session(t, d);
  const l = tracked(grpcCall(s, LOAD, [str(2, 'slow')]));
  await slow.reading();
  const w = tracked(grpcCall(s, LOAD, [str(2, 'slow')]));
  assert.match(await d.logged(/model 'slow': load waits for its turn/), /waits for its turn/);
  await cut(d);
  const r = await w.p;
  assert.equal(r.grpcStatus, 14, JSON.stringify(r));
  assert.equal(r.message, 'server: draining (shutting down): the drain was cut short before its turn; not done');
  assert.equal(l.done, false, 'the running load is not cut short');
  assert.ok(slow.finish());
  assert.equal((await l.p).grpcStatus, 0, JSON.stringify(await l.p));
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('an index asked after the cut answers 503 / UNAVAILABLE: it lists no folder on the pool for the stop to wait for; {"ready": true} is still answered', async (t) => {
  // review: the index was the one request that still started pool work
  // after the cut (parked by srv_suspend, so the stop waited for it; a
  // gRPC one too since gRPC requests count in n_suspended): a client
  // polling it held the stop, and a slow repository volume for as long
  // as each listing took. A held load keeps the stop waiting meanwhile.
  const { d, slow } = await slowStart(t, 'cut', { grpc: true });
  const l = tracked(post(`${d.url}/v2/repository/models/slow/load`, ''));
  await slow.reading();
  await cut(d);
  const r = await post(`${d.url}/v2/repository/index`, '');
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.equal(r.json.error, 'server: draining (shutting down)');
  const g = await grpcCall(session(t, d), INDEX, [Buffer.alloc(0)]);
  assert.equal(g.grpcStatus, 14, JSON.stringify(g));
  assert.equal(g.message, 'server: draining (shutting down)');
  // the loaded models alone, from memory at once: nothing to wait for
  const ready = await post(`${d.url}/v2/repository/index`, '{"ready": true}');
  assert.equal(ready.status, 200, JSON.stringify(ready.json));
  assert.equal(l.done, false);
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

/**
 * deaf(port, path, msg, window): a raw HTTP/2 client that sends one gRPC
 * call (msg, framed, in DATA frames of 16 KiB) with window as its stream
 * and connection receive windows, then reads nothing: its socket is
 * paused, and no WINDOW_UPDATE or SETTINGS ACK ever comes from it.
 */
function deaf(port, path, msg, window) {
  const s = net.connect(port, '127.0.0.1');
  const settings = Buffer.alloc(6);
  settings.writeUInt16BE(4, 0); // SETTINGS_INITIAL_WINDOW_SIZE
  settings.writeUInt32BE(window, 2);
  const more = Buffer.alloc(4); // the connection's window, past its 65535
  more.writeUInt32BE(Math.max(window - 65535, 1), 0);
  const head = Buffer.concat([lit(':method', 'POST'), lit(':scheme', 'http'), lit(':path', path),
    lit(':authority', 'x'), lit('content-type', 'application/grpc'), lit('te', 'trailers')]);
  const body = frame(msg), data = [];
  for (let i = 0; i < body.length; i += 16384)
    data.push(h2frame(0, i + 16384 >= body.length ? 1 : 0, 1, body.subarray(i, i + 16384)));
  s.on('connect', () => s.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
    h2frame(4, 0, 0, settings), ...(window > 65535 ? [h2frame(8, 0, 0, more)] : []),
    h2frame(1, 4, 1, head), ...data])));
  s.pause();
  s.on('error', () => {});
  return s;
}

/** attention(t): an sdpa ModelInferRequest over t tokens (d 1) asking
 * for the attention map: a t x t FP32 answer. */
function attention(t) {
  const x = f32bytes(Array.from({ length: t }, (_, i) => (i % 7) * 0.1));
  return Buffer.concat([str(1, 'sdpa'),
    ...['q', 'k', 'v'].map((n) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, [t, 1])]))),
    ld(6, str(1, 'attention')), ld(7, x), ld(7, x), ld(7, x)]);
}

test('gRPC and REST: clients that read nothing of their answers hold the exit no longer than the flush (--stop-flush-ms) after the cut; the log says what was cut', async (t) => {
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', '500'] });
  // one with a 1-byte window: its answer cannot go out
  const small = deaf(d.grpcPort, INFER, attention(50), 1);
  t.after(() => small.destroy());
  assert.match(await d.logged(/ModelInfer 200/), /ModelInfer 200/);
  // one that reads nothing of 9 MB: more than the socket buffers hold, so
  // some of it waits in attnd's own writes
  const big = deaf(d.grpcPort, INFER, attention(1500), 0x7fffffff);
  t.after(() => big.destroy());
  const from = d.log().length;
  assert.match(await d.logged(/ModelInfer 200/, 5000, from), /ModelInfer 200/);
  // and a REST client that reads nothing of its 9 MB
  const rest = net.connect(d.port, '127.0.0.1');
  rest.on('error', () => {});
  t.after(() => rest.destroy());
  rest.write(restAttention(1500));
  await new Promise((res) => rest.once('data', () => { rest.pause(); res(); }));
  await sleep(200 * SLOW); // the writes fill the buffers
  await cut(d);
  // the stop waits for them until the flush's 500 ms have passed (this
  // line is written then, and only then), then exits: the line is the
  // event, and 10 s (x SLOW) a hang's bound only
  const cutLine = /stop: 500 ms after the drain was cut short and its work ended, answers are still unsent \(their clients read too slowly or not at all; stop-flush-ms\); cut: gRPC 2 calls and \d+ bytes on 2 connections, REST 1 request\n/;
  assert.match(await d.logged(cutLine, 10000), cutLine);
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, `no exit after the flush:\n${d.log()}`);
  assert.ok(cutLine.exec(d.log()).index < d.log().indexOf('stopping (the drain was cut short)'), d.log());
  // that line says it all: the doors' waits after it are over at once (the
  // flush's time left was counted on another clock than its timer's, and
  // could still be 1 ms: the REST door waited it and logged 'stop:
  // stop-flush-ms (500 ms) passed: closed 1 REST connection' of the same
  // client, 1 run in 3)
  assert.doesNotMatch(d.log(), /stop-flush-ms \(500 ms\) passed/);
  await d.stop();
});

test('gRPC: a client that reads its large answer slowly across the cut gets it whole, with its status', async (t) => {
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', FLUSH_MS] });
  const s = session(t, d);
  const goaways = [];
  s.on('goaway', (code, last) => goaways.push([code, last]));
  const req = s.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' });
  req.end(frame(attention(300))); // 360 KB of answer
  let head = {}, got = 0, len = 0;
  req.on('response', (h) => { head = h; });
  req.on('trailers', (h) => { head = { ...head, ...h }; });
  const begun = new Promise((res) => req.once('data', (c) => {
    got += c.length;
    len = 5 + c.readUInt32BE(1); // the message's prefix
    req.pause();
    res();
  }));
  const ended = new Promise((res) => { req.on('close', res); req.on('error', res); });
  await begun; // paused: its window closes after the first 64 KiB
  await cut(d);
  await sleep(PAUSE_MS);
  req.on('data', (c) => { got += c.length; });
  req.resume();
  await ended;
  assert.equal(head['grpc-status'], '0', JSON.stringify(head));
  assert.ok(len > 300 * 300 * 4, `a message of ${len} bytes`);
  assert.equal(got, len, 'the answer came whole');
  // the drain's notice (last stream 2^31-1), then the final one: stream 1
  // (this call) was taken, none after it
  assert.deepEqual(goaways.slice(0, 2), [[0, 2 ** 31 - 1], [0, 1]]);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: a client that reads its answer slowly across the stop, sending as it reads (a WINDOW_UPDATE, a PING), gets it whole with the GOAWAY: attnd reads and drops what comes until the client closes', async (t) => {
  // a 1.4 MB answer under a 2^31-1 window: all of it written to the
  // kernel, so the drain ends (nothing unsent in attnd) while the client
  // has read 64 KB. attnd closed its socket then, and the client's next
  // frame met a closed socket: a reset, which dropped the answer's rest
  // still queued in attnd's kernel (got 115 KB of 1.4 MB, no trailers)
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', FLUSH_MS] });
  const s = deaf(d.grpcPort, INFER, attention(600), 0x7fffffff);
  t.after(() => s.destroy());
  const chunks = [];
  await new Promise((res) => s.once('readable', res));
  assert.match(await d.logged(/ModelInfer 200/), /ModelInfer 200/);
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  const ended = new Promise((res) => s.on('close', res));
  s.write(h2frame(6, 0, 0, Buffer.alloc(8))); // PING, as a reader's frames
  s.on('data', (c) => {
    chunks.push(c);
    const all = Buffer.concat(chunks);
    if (all.includes(Buffer.from([0, 0, 8, 7, 0, 0, 0, 0, 0]))) s.end(); // GOAWAY: done
  });
  s.resume();
  await ended;
  const all = Buffer.concat(chunks), frames = [];
  for (let i = 24 * 0; i + 9 <= all.length && i + 9 + all.readUIntBE(i, 3) <= all.length; i += 9 + all.readUIntBE(i, 3))
    frames.push({ type: all[i + 3], flags: all[i + 4], len: all.readUIntBE(i, 3) });
  const data = frames.filter((f) => f.type === 0).reduce((n, f) => n + f.len, 0);
  assert.equal(data, 5 + 600 * 600 * 4 + 38, `DATA bytes (frames: ${frames.length})`);
  assert.ok(frames.some((f) => f.type === 1 && (f.flags & 1)), 'trailers');
  assert.ok(frames.some((f) => f.type === 7), 'GOAWAY');
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

/** exited(d, ms): d's exit, or 'still running' after ms (a hang's bound:
 * the flush these attnds are given is far longer). */
function exited(d, ms) {
  let id;
  const late = new Promise((res) => { id = setTimeout(() => res('still running'), ms); });
  return Promise.race([d.exit, late]).finally(() => clearTimeout(id));
}

test('gRPC: a connection idle at the stop (nothing left to deliver: a keep-alive client, a health checker ignoring the GOAWAY) gets its GOAWAY and does not hold the exit for --stop-flush-ms', async (t) => {
  // review: every connection waited for its client to close, up to the
  // whole flush (60 s here), an idle one too, its client holding nothing
  // it could lose
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', FLUSH_MS] });
  // allowHalfOpen: attnd's end (its shutdown) does not end this side
  const s = net.connect({ port: d.grpcPort, host: '127.0.0.1', allowHalfOpen: true });
  s.on('error', () => {});
  t.after(() => s.destroy());
  const got = [];
  s.on('data', (c) => got.push(c));
  await new Promise((res) => s.on('connect', res));
  s.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), h2frame(4, 0, 0, Buffer.alloc(0))]));
  for (const until = Date.now() + 5000 * SLOW; !got.length && Date.now() < until;) await sleep(20);
  assert.ok(got.length, "attnd's SETTINGS came");
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  const all = Buffer.concat(got);
  assert.ok(all.includes(Buffer.from([0, 0, 8, 7, 0, 0, 0, 0, 0])), 'GOAWAY');
  assert.match(d.log(), /drained; stopping/);
  await d.stop();
});

/** secondSignalCuts(d, door): SIGTERM with an answer d's kernel holds
 * unread by its client on door ('REST' or 'gRPC'): the stop waits for
 * it, and a second SIGTERM closes that connection at once, exit 0, the
 * log naming it. */
async function secondSignalCuts(d, door) {
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  await sleep(200 * SLOW);
  assert.equal(await exited(d, 0), 'still running', 'the stop waits for the client');
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.match(d.log(), new RegExp(`SIGTERM: stop cut short: closed 1 ${door} connection whose client had not read its answers yet`));
  await d.stop();
}

test('gRPC: a signal while the stop waits for a client that does not read its answer closes it at once; exit 0', async (t) => {
  // review: from the stop on the signals were ignored, and only the end
  // of --stop-flush-ms (60 s here) let attnd exit
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', FLUSH_MS] });
  const s = deaf(d.grpcPort, INFER, attention(600), 0x7fffffff);
  t.after(() => s.destroy());
  await new Promise((res) => s.once('readable', res));
  assert.match(await d.logged(/ModelInfer 200/), /ModelInfer 200/);
  await secondSignalCuts(d, 'gRPC');
});

test('REST: a client that reads its large answer slowly across the cut gets it whole', async (t) => {
  // 9 MB: more than the socket buffers hold, so part of it waits in attnd
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const sock = net.connect(d.port, '127.0.0.1');
  sock.on('error', () => {});
  t.after(() => sock.destroy());
  sock.write(restAttention(1500));
  const chunks = [];
  await new Promise((res) => sock.once('data', (c) => { chunks.push(c); sock.pause(); res(); }));
  const ended = new Promise((res) => sock.on('close', res));
  await cut(d);
  await sleep(PAUSE_MS);
  sock.on('data', (c) => chunks.push(c));
  sock.resume();
  await ended;
  const all = Buffer.concat(chunks), at = all.indexOf('\r\n\r\n');
  const headers = all.subarray(0, at).toString();
  assert.match(headers, /^HTTP\/1\.1 200/);
  const len = Number(/^content-length: (\d+)/im.exec(headers)[1]);
  assert.ok(len > 1500 * 1500 * 4, headers);
  assert.equal(all.length - at - 4, len, 'the answer came whole');
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

/** halfSent(d, path, text): a REST request whose head and half its body
 * are sent; {rest(): sends the other half, answer: its raw answer}. */
async function halfSent(t, d, path, text) {
  const sock = net.connect(d.port, '127.0.0.1');
  sock.on('error', () => {});
  t.after(() => sock.destroy());
  await new Promise((res) => sock.on('connect', res));
  const b = Buffer.from(text), half = b.length >> 1;
  sock.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n`);
  sock.write(b.subarray(0, half));
  const chunks = [];
  sock.on('data', (c) => chunks.push(c));
  const answer = new Promise((res) => sock.on('close', () => res(Buffer.concat(chunks).toString())));
  return { rest: () => sock.write(b.subarray(half)), answer };
}

test('REST: a request whose body ends after the cut (its head came before the signal) answers 503 and starts nothing, an upload neither', async (t) => {
  // a load held running keeps the stop waiting meanwhile
  const { d, slow } = await slowStart(t, 'cut');
  const l = tracked(post(`${d.url}/v2/repository/models/slow/load`, ''));
  await slow.reading();
  const x = Array.from({ length: 8 }, (_, i) => i * 0.1);
  const inf = await halfSent(t, d, '/v2/models/sdpa/infer', JSON.stringify({
    inputs: ['q', 'k', 'v'].map((n) => ({ name: n, datatype: 'FP32', shape: [2, 4], data: x })) }));
  const up = await halfSent(t, d, '/v2/repository/models/up/load',
    JSON.stringify(body(TINY_CONFIG, readFileSync(join(TINY, 'model.safetensors')))));
  await sleep(100 * SLOW);
  await cut(d);
  inf.rest();
  up.rest();
  for (const a of [await inf.answer, await up.answer]) {
    assert.match(a, /^HTTP\/1\.1 503/, a);
    assert.match(a, /"error":"server: draining \(shutting down\)/, a);
  }
  assert.doesNotMatch(d.log(), /model 'up'/, 'the upload did not start a load');
  assert.equal(l.done, false);
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('REST: a request whose body is still coming at the cut answers 503 "not done" at once, as gRPC answers UNAVAILABLE; a client still sending its body reads it too; exit 0', async (t) => {
  // review: nothing else held the stop, so the cut closed both
  // connections at once without a byte of answer
  const d = await start({ t, args: ['--cors-origins', 'http://page.example'] });
  const x = Array.from({ length: 8 }, (_, i) => i * 0.1);
  const stalled = await halfSent(t, d, '/v2/models/sdpa/infer', JSON.stringify({
    inputs: ['q', 'k', 'v'].map((n) => ({ name: n, datatype: 'FP32', shape: [2, 4], data: x })) }));
  // a chunked upload that goes on sending after the cut, 4 KiB every 10 ms
  const sending = net.connect(d.port, '127.0.0.1');
  sending.on('error', () => {});
  t.after(() => sending.destroy());
  await new Promise((res) => sending.on('connect', res));
  sending.write('POST /v2/repository/models/up/load HTTP/1.1\r\nHost: x\r\n' +
    'Origin: http://page.example\r\nTransfer-Encoding: chunked\r\n\r\n');
  const chunk = `1000\r\n${'x'.repeat(4096)}\r\n`;
  const pump = setInterval(() => sending.write(chunk), 10);
  t.after(() => clearInterval(pump));
  const got = [];
  sending.on('data', (c) => got.push(c));
  const sent = new Promise((res) => sending.on('close', () => res(Buffer.concat(got).toString())));
  await sleep(200 * SLOW);
  const t0 = Date.now();
  await cut(d);
  for (const a of [await stalled.answer, await sent]) {
    assert.match(a, /^HTTP\/1\.1 503 Service Unavailable\r\n/, a);
    assert.match(a, /\r\nConnection: close\r\n/i, a);
    assert.match(a, /\r\nRetry-After: 1\r\n/i, a);
    const at = a.indexOf('\r\n\r\n'), len = Number(/\r\ncontent-length: (\d+)/i.exec(a)[1]);
    assert.equal(Buffer.byteLength(a) - at - 4, len, a);
    assert.deepEqual(JSON.parse(a.slice(at + 4)), { error: 'server: draining (shutting down): ' +
      'the drain was cut short before its body was whole; not done' });
  }
  assert.match(await sent, /\r\nAccess-Control-Allow-Origin: http:\/\/page\.example\r\n/);
  assert.doesNotMatch(await stalled.answer, /Access-Control-Allow-Origin/);
  clearInterval(pump);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  assert.doesNotMatch(d.log(), /internal error|answers are still unsent/);
  assert.ok(Date.now() - t0 < 3000 * SLOW, `exit ${Date.now() - t0} ms after the cut`);
  assert.match(d.log(), /POST \/v2\/models\/sdpa\/infer 503/);
  await d.stop();
});

/**
 * slowReader(t, d, request): a raw REST client that sends request, takes
 * the first chunk of its answer and then reads nothing (paused):
 * {sock, chunks, ended (its close), resume()}. allowHalfOpen: attnd's end
 * of the stream does not end this side, so the client can still send.
 */
async function slowReader(t, d, request, { wait = true } = {}) {
  const sock = net.connect({ port: d.port, host: '127.0.0.1', allowHalfOpen: true });
  const chunks = [];
  let error = null;
  sock.on('error', (e) => { error = e.code || e.message; });
  t.after(() => sock.destroy());
  const ended = new Promise((res) => sock.on('close', () => res(error)));
  const begun = new Promise((res) => sock.once('data', (c) => { chunks.push(c); sock.pause(); res(); }));
  sock.on('end', () => sock.end());
  sock.write(request);
  if (wait) await begun;
  return {
    sock, chunks, ended, begun,
    resume: () => { sock.on('data', (c) => chunks.push(c)); sock.resume(); },
  };
}

/** untilUsed(d, n): what bodies, decoded requests and unsent answers hold
 * of the memory budget (requestsUsed), once it is n, or after 5 s. */
async function untilUsed(d, n) {
  const used = async () => requestsUsed(await (await fetch(`${d.url}/metrics`)).text());
  let u = await used();
  for (const until = Date.now() + 5000 * SLOW; u !== n && Date.now() < until; u = await used()) await sleep(20);
  return u;
}

test('REST: a client that reads its answer slowly across the stop and pipelines its next request as it reads gets the answer whole, then 503 Connection: close for that request, not a reset', async (t) => {
  // the answer (1.4 MB) was made before the signal and is all in the
  // kernels, so the drain has nothing to wait for: attnd closed the
  // socket at once (libmicrohttpd shuts it down both ways), the client's
  // next request met it, and the reset dropped the answer's rest: 195 KB
  // of 1.4 MB came, then ECONNRESET
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const c = await slowReader(t, d, restAttention(600));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  c.sock.write(NEXT);
  c.resume();
  assert.equal(await c.ended, null, 'no reset');
  const got = answers(Buffer.concat(c.chunks));
  assert.equal(got.all.length, 2, `answers: ${got.all.map((a) => a.head.split('\r\n')[0])}, ${got.rest} bytes past them`);
  assert.match(got.all[0].head, /^HTTP\/1\.1 200/);
  assert.equal(got.all[0].body.length - jsonLen(got.all[0].head), 600 * 600 * 4, 'the answer came whole');
  assert.match(got.all[1].head, /^HTTP\/1\.1 503 /);
  assert.match(got.all[1].head, /\r\nConnection: close\r\n/i);
  assert.match(got.all[1].head, /\r\nRetry-After: 1\r\n/i);
  assert.deepEqual(JSON.parse(got.all[1].body), { error: 'server: draining (shutting down)' });
  assert.equal(got.rest, 0);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  assert.match(d.log(), /GET \/v2\/models\/sdpa 503/);
  await d.stop();
});

test('REST: an answer made during the drain (Connection: close, its socket lingering) and read slowly across the stop by a client that sends more as it reads comes whole', async (t) => {
  // attnd closed the connection lingering after the answer, reading what
  // came, but the stop closed every lingering socket at once: the bytes
  // the client sent next met a closed socket, and the reset dropped the
  // rest of the answer
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const req = restAttention(600), head = req.indexOf('\r\n\r\n') + 4;
  const len = Buffer.byteLength(req) - head;
  // its head and the start of its body before the signal: it has begun
  const c = await slowReader(t, d, req.slice(0, head + 100), { wait: false });
  assert.equal(await untilUsed(d, len + 1), len + 1, 'its head was read: its body reserved');
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/draining/), /draining/);
  c.sock.write(req.slice(head + 100));
  await c.begun; // the answer's first bytes: the rest waits in the kernels
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  c.sock.write(NEXT);
  c.resume();
  assert.equal(await c.ended, null, 'no reset');
  const got = answers(Buffer.concat(c.chunks));
  assert.equal(got.all.length, 1, `answers: ${got.all.map((a) => a.head.split('\r\n')[0])}, ${got.rest} bytes past them`);
  assert.match(got.all[0].head, /^HTTP\/1\.1 200/);
  assert.match(got.all[0].head, /\r\nConnection: close\r\n/i);
  assert.equal(got.all[0].body.length - jsonLen(got.all[0].head), 600 * 600 * 4, 'the answer came whole');
  assert.equal(got.rest, 0);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('REST: a keep-alive connection idle at the stop (its answers all taken) does not hold the exit for --stop-flush-ms', async (t) => {
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const c = await slowReader(t, d, NEXT);
  c.resume();
  const got = () => answers(Buffer.concat(c.chunks)).all.length;
  for (const until = Date.now() + 5000 * SLOW; !got() && Date.now() < until;) await sleep(20);
  assert.equal(got(), 1, 'its answer came');
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.equal(await c.ended, null, 'closed by attnd, no reset');
  await d.stop();
});

test('REST: a signal while the stop waits for a client that does not read its answer closes it at once; exit 0', async (t) => {
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  await slowReader(t, d, restAttention(600));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  await secondSignalCuts(d, 'REST');
});

test('REST and gRPC: clients that read nothing of answers the kernels hold hold the stop for --stop-flush-ms at most; the log says so', async (t) => {
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', '500'] });
  await slowReader(t, d, restAttention(600));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  const g = deaf(d.grpcPort, INFER, attention(600), 0x7fffffff);
  t.after(() => g.destroy());
  await new Promise((res) => g.once('readable', res));
  assert.match(await d.logged(/ModelInfer 200/), /ModelInfer 200/);
  d.proc.kill('SIGTERM');
  // the line comes when the flush's time has passed (500 ms), the exit
  // after it; the bound is a hang's
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  // (the gRPC connection was closed at the flush's end without a word)
  const line = /stop: stop-flush-ms \(500 ms\) passed: closed 1 REST and 1 gRPC connections whose clients had not acknowledged all of their answers \(they read too slowly or not at all; what they had not received is lost\)\n/.exec(d.log());
  assert.ok(line && line.index > d.log().indexOf('drained; stopping'), d.log());
  await d.stop();
});

/** read1000(c): c (helper.mjs's smallRcvbuf: a 16 KiB receive buffer, so
 * that its kernel takes little of an answer and attnd's keeps the rest
 * unacknowledged) reads 1000 bytes of its answer (then nothing more). */
async function read1000(c) {
  for (const until = Date.now() + 10000 * SLOW; c.got() < 1000 && !c.ended() && !c.error() && Date.now() < until;) {
    await c.take(1000 - c.got());
    if (c.got() < 1000) await sleep(20);
  }
  return c.got();
}

test('REST: an answer made during the drain that its client stops reading (its socket lingering) is named in the flush\'s end line when --stop-flush-ms passes', async (t) => {
  // review: the lingering sockets' own timer was armed for the stop's end
  // too, and when it ran first it closed the socket as linger-ms's: the
  // stop found nothing left and logged no line (3 runs in 8)
  const d = await start({ t, args: ['--stop-flush-ms', '500'] });
  const req = restAttention(600), head = req.indexOf('\r\n\r\n') + 4;
  const len = Buffer.byteLength(req) - head;
  const py = await smallRcvbuf(t, d.port);
  await py.send(Buffer.from(req.slice(0, head + 100)));
  assert.equal(await untilUsed(d, len + 1), len + 1, 'its head was read: its body reserved');
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/draining/), /draining/);
  await py.send(Buffer.from(req.slice(head + 100)));
  assert.equal(await read1000(py), 1000);
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.match(d.log(), /drained; stopping/);
  assert.match(d.log(), /stop: stop-flush-ms \(500 ms\) passed: closed 1 REST connection whose client had not acknowledged all of its answers \(it reads too slowly or not at all; what it had not received is lost\)\n/);
  await py.close();
  await d.stop();
});

test('gRPC: a connection closed before the stop, lingering with answer bytes its client has not acknowledged, is named as gRPC\'s in the flush\'s end line', async (t) => {
  // review: the stop gave the lingering sockets its rule, gRPC ones too,
  // in the REST door's set, and counted them as REST connections
  const d = await start({ t, grpc: true, args: ['--stop-flush-ms', '500', '--linger-ms', FLUSH_MS] });
  const settings = Buffer.alloc(6);
  settings.writeUInt16BE(4, 0); // SETTINGS_INITIAL_WINDOW_SIZE
  settings.writeUInt32BE(0x7fffffff, 2);
  const more = Buffer.alloc(4);
  more.writeUInt32BE(0x7fffffff - 65535, 0);
  const head = Buffer.concat([lit(':method', 'POST'), lit(':scheme', 'http'), lit(':path', INFER),
    lit(':authority', 'x'), lit('content-type', 'application/grpc'), lit('te', 'trailers')]);
  const body = frame(attention(600)), data = [];
  for (let i = 0; i < body.length; i += 16384)
    data.push(h2frame(0, i + 16384 >= body.length ? 1 : 0, 1, body.subarray(i, i + 16384)));
  const call = Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), h2frame(4, 0, 0, settings),
    h2frame(8, 0, 0, more), h2frame(1, 4, 1, head), ...data]);
  // then a DATA frame on stream 0: a connection error, GOAWAY, and attnd
  // closes the connection, lingering (its client has not ended its side)
  const py = await smallRcvbuf(t, d.grpcPort);
  await py.send(call);
  assert.match(await d.logged(/ModelInfer 200/), /ModelInfer 200/);
  assert.equal(await untilUsed(d, 0), 0, 'its answer is all in the kernel');
  await py.send(h2frame(0, 0, 0, Buffer.alloc(1)));
  assert.equal(await read1000(py), 1000);
  const lingering = async () => /^attnd_lingering_connections (\d+)/m.exec(await (await fetch(`${d.url}/metrics`)).text())[1];
  let n = await lingering();
  for (const until = Date.now() + 5000 * SLOW; n !== '1' && Date.now() < until; n = await lingering()) await sleep(20);
  assert.equal(n, '1', 'the gRPC connection lingers');
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.match(d.log(), /stop: stop-flush-ms \(500 ms\) passed: closed 1 gRPC connection whose client had not acknowledged all of its answers/);
  await py.close();
  await d.stop();
});

test('REST: a keep-alive connection idle at the stop is closed at once while the stop waits for another client', async (t) => {
  // review: libmicrohttpd closes its connections only when it stops, so
  // an idle keep-alive one stayed open for the whole wait (3.00 s under
  // --stop-flush-ms 3000) while a slow reader held it
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  await slowReader(t, d, restAttention(600));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  const idle = net.connect({ port: d.port, host: '127.0.0.1', allowHalfOpen: true });
  let error = null, got = '';
  idle.on('error', (e) => { error = e.code || e.message; });
  t.after(() => idle.destroy());
  const ended = new Promise((res) => idle.on('end', res));
  idle.on('data', (c) => { got += c; });
  idle.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n');
  for (const until = Date.now() + 5000 * SLOW; !answers(Buffer.from(got)).all.length && Date.now() < until;) await sleep(20);
  assert.match(got, /^HTTP\/1\.1 200/, 'its answer came');
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  // its end comes while the stop still waits for the slow reader (60 s
  // here): 10 s (x SLOW) is a hang's bound
  let id;
  const late = new Promise((res) => { id = setTimeout(() => res('no end'), 10000 * SLOW); });
  assert.equal(await Promise.race([ended, late]).finally(() => clearTimeout(id)), undefined, 'the idle connection was closed');
  assert.equal(error, null, 'an end, not a reset');
  assert.equal(await exited(d, 0), 'still running', 'the stop still waits for the slow reader');
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.match(d.log(), /SIGTERM: stop cut short: closed 1 REST connection whose client had not read its answers yet/);
  await d.stop();
});

/** headClient(t, d): a raw REST client; got() what came, ended (null, or
 * the error) once its socket closed. */
function headClient(t, d) {
  const c = net.connect({ port: d.port, host: '127.0.0.1', allowHalfOpen: true });
  let error = null, got = '';
  c.on('error', (e) => { error = e.code || e.message; });
  c.on('data', (x) => { got += x; });
  c.on('end', () => c.end());
  t.after(() => c.destroy());
  return { c, got: () => got, ended: new Promise((res) => c.on('close', () => res(error))) };
}

test('REST: a request head partly sent when the stop begins is let finish within --stop-flush-ms, then answered 503 draining with Connection: close, not cut', async (t) => {
  // before: the connection (no request in progress for libmicrohttpd,
  // its answers all taken) was counted idle and closed at once: the rest
  // of the head met a closed socket, no answer, and attnd exited
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const h = headClient(t, d);
  h.c.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n'); // served: a keep-alive client
  for (const until = Date.now() + 5000 * SLOW; !answers(Buffer.from(h.got())).all.length && Date.now() < until;) await sleep(20);
  assert.match(h.got(), /^HTTP\/1\.1 200/, 'its first answer came');
  h.c.write('GET /v2/health/live HTTP/1.1\r\nHo'); // its next head, in part
  await new Promise((res) => h.c.write('', res));
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  h.c.write('st: x\r\n\r\n');
  assert.equal(await h.ended, null, 'an end, not a reset');
  const all = answers(Buffer.from(h.got(), 'latin1')).all;
  assert.equal(all.length, 2, h.got());
  assert.match(all[1].head, /^HTTP\/1\.1 503/);
  assert.match(all[1].head, /\r\nConnection: close/i);
  assert.match(String(all[1].body), /server: draining/);
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  await d.stop();
});

test('REST: a request head that never completes holds the stop no longer than --stop-flush-ms; it is closed then, exit 0', async (t) => {
  const d = await start({ t, args: ['--stop-flush-ms', '500'] });
  const h = headClient(t, d);
  h.c.write('GET /v2/health/live HTTP/1.1\r\nHo');
  await new Promise((res) => h.c.write('', res));
  // attnd has accepted the connection and read the part: one still in the
  // listen socket's queue when the stop closes it is reset by the kernel
  // (CI once, a sanitized attnd slow to accept), which is not this case
  const port = h.c.localPort;
  assert.ok(await waitFor(() => queued(d.port, port, 'rx') === 0), 'attnd never read the part of a head');
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.equal(await h.ended, null, 'an end, not a reset');
  assert.equal(h.got(), '', 'no answer');
  assert.match(d.log(), /stop: stop-flush-ms \(500 ms\) passed: closed 1 REST connection whose request head had not come whole\n/);
  assert.doesNotMatch(d.log(), /had not acknowledged/);
  await d.stop();
});

test('REST: a second signal while the stop waits for a request head that has not come whole closes it at once and names it as a head, not as a client that had not read its answers; exit 0', async (t) => {
  // before: the cut counted it with the connections whose clients had
  // not read their answers ("closed 1 REST connection whose client had
  // not read its answers yet"), where the flush's end names it a head
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const h = headClient(t, d);
  h.c.write('GET /v2/health/live HTTP/1.1\r\nHo');
  await new Promise((res) => h.c.write('', res));
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  await sleep(200 * SLOW);
  assert.equal(await exited(d, 0), 'still running', 'the stop waits for the head');
  d.proc.kill('SIGTERM');
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.match(d.log(), /SIGTERM: stop cut short: closed 1 REST connection whose request head had not come whole\n/);
  assert.doesNotMatch(d.log(), /had not read (its|their) answers/);
  assert.equal(h.got(), '', 'no answer');
  await d.stop();
});

test('REST: a request head partly sent when the stop begins, pipelined behind the request before it (attnd read it with that one), is let finish within --stop-flush-ms too: 503 draining, Connection: close', async (t) => {
  // before: the part of the head came in the same write as the request
  // before it, so attnd had read it before that request ended: the
  // bytes its client had sent then (TCP_INFO) counted it, and the
  // connection was idle at the stop, closed at once (the rest of the
  // head met a closed socket, no answer)
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const h = headClient(t, d);
  h.c.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/health/live HTTP/1.1\r\nHo');
  for (const until = Date.now() + 5000 * SLOW; !answers(Buffer.from(h.got())).all.length && Date.now() < until;) await sleep(20);
  assert.match(h.got(), /^HTTP\/1\.1 200/, 'its first answer came');
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drained; stopping/), /drained; stopping/);
  h.c.write('st: x\r\n\r\n');
  assert.equal(await h.ended, null, 'an end, not a reset');
  const all = answers(Buffer.from(h.got(), 'latin1')).all;
  assert.equal(all.length, 2, `${h.got()}\n${d.log().slice(-600)}`);
  assert.match(all[1].head, /^HTTP\/1\.1 503/);
  assert.match(all[1].head, /\r\nConnection: close/i);
  assert.match(String(all[1].body), /server: draining/);
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.doesNotMatch(d.log(), /had not come whole/);
  await d.stop();
});

test('REST: a keep-alive connection whose client sent an empty line after its request (RFC 9112 2.2; old clients after a POST body) is idle at the stop: closed at once, the exit not held for --stop-flush-ms', async (t) => {
  // review: libmicrohttpd skips the empty line and counts it in no head,
  // so the bytes its client had sent (TCP_INFO) stayed 2 past those of
  // its requests: a head coming for good, the connection kept open for
  // the whole --stop-flush-ms (4.00 s under 4000; 9615dae: at once)
  const d = await start({ t, args: ['--stop-flush-ms', FLUSH_MS] });
  const h = headClient(t, d);
  h.c.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n\r\n');
  for (const until = Date.now() + 5000 * SLOW; !answers(Buffer.from(h.got())).all.length && Date.now() < until;) await sleep(20);
  assert.match(h.got(), /^HTTP\/1\.1 200/, 'its answer came');
  d.proc.kill('SIGTERM');
  // FLUSH_MS is 60 s (x SLOW): an exit within 10 s (x SLOW, a hang's
  // bound) is one the connection did not hold
  assert.deepEqual(await exited(d, 10000 * SLOW), { code: 0, sig: null }, d.log());
  assert.equal(await h.ended, null, 'closed by attnd, no reset');
  assert.doesNotMatch(d.log(), /had not come whole|passed: closed/);
  await d.stop();
});
