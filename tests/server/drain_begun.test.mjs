// drain_begun.test.mjs - SIGTERM on the gRPC door, as on REST
// (hardening.test.mjs: a request whose head came before the signal is
// served): a call whose HEADERS came before the signal has begun, and is
// served even if its message ends after it; a call opened after the signal
// answers UNAVAILABLE. On a stream each message is a request: one whose
// first byte came before the signal is served, one begun after it answers
// UNAVAILABLE in its place, and the stream ends UNAVAILABLE once nothing
// begun before the signal is left. Once the drain is cut short nothing
// new starts, a call begun before the signal neither (the rest of the
// cut: drain_cut.test.mjs).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { SLOW, f32bytes, infer, requestsUsed, start } from './helper.mjs';
import { D, gqaModels, stepBody, tokens } from './seq_helper.mjs';
import { TINY, TINY_CONFIG, slowStart } from './repo_helper.mjs';
import { INFER, grpcCall, grpcSession } from './soak_grpc.mjs';
import { SEED_OUT, fields, frame, h2frame, ld, lit, packedI64, seedMsg, str } from '../grpc/wire.mjs';

const LOAD = '/inference.GRPCInferenceService/RepositoryModelLoad';
const STREAM = '/inference.GRPCInferenceService/ModelStreamInfer';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const session = grpcSession;

/** metric(d, name, ok): the value of /metrics' line name (a series, its
 * labels included) once ok(value), or what it is after 5 s; of
 * attnd_memory_budget_used_bytes, what the open connections' own (gRPC
 * 80 KiB each, REST 36 KiB) leave. */
async function metric(d, name, ok) {
  const get = async () => {
    const m = await (await fetch(`${d.url}/metrics`)).text();
    const line = (n) => {
      const at = m.indexOf(`\n${n} `);
      return at < 0 ? NaN : Number(m.slice(at + n.length + 2, m.indexOf('\n', at + 1)));
    };
    return name === 'attnd_memory_budget_used_bytes' ? requestsUsed(m) : line(name);
  };
  let v = await get();
  for (const until = Date.now() + 5000 * SLOW; !ok(v) && Date.now() < until; v = await get()) await sleep(20);
  return v;
}
/** used(d, n): attnd_memory_budget_used_bytes once it is n (a message's
 * prefix read reserves its length + 1 + MSG_COST, its bookkeeping; an open
 * call holds CALL_COST, its state). */
const MSG_COST = 128, CALL_COST = 3072;
const used = (d, n) => metric(d, 'attnd_memory_budget_used_bytes', (v) => v === n);

/** open(s, path): a call on s whose bytes the test writes itself:
 * {req, send(buf), end(buf), answer: {grpcStatus, message, msgs}}. */
function open(s, path) {
  const req = s.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
  let head = {};
  const chunks = [];
  req.on('response', (h) => { head = h; });
  req.on('trailers', (h) => { head = { ...head, ...h }; });
  req.on('data', (c) => chunks.push(c));
  const answer = new Promise((res) => {
    const done = (err) => {
      const all = Buffer.concat(chunks), msgs = [];
      for (let i = 0; i + 5 <= all.length; i += 5 + all.readUInt32BE(i + 1))
        msgs.push(all.subarray(i + 5, i + 5 + all.readUInt32BE(i + 1)));
      const g = head['grpc-status'];
      res({ grpcStatus: g === undefined ? null : Number(g), message: err ? err.code || err.message
        : decodeURIComponent(head['grpc-message'] || ''), msgs });
    };
    req.on('error', done);
    req.on('close', () => done(null));
  });
  return { req, answer, send: (b) => req.write(b), end: (b) => req.end(b) };
}

/**
 * rawConn(port): a raw HTTP/2 connection, for calls opened after the
 * drain's GOAWAY notice (node's client opens none then): head(id, path)
 * sends a call's HEADERS, data(id, bytes, end) its DATA. got(id) is its
 * answer so far: {data, the DATA payloads; ended, a frame with END_STREAM
 * came}; ended(id) resolves once it has.
 */
function rawConn(port) {
  const s = net.connect(port, '127.0.0.1');
  const calls = new Map(), waits = [];
  const got = (id) => {
    if (!calls.has(id)) calls.set(id, { data: Buffer.alloc(0), ended: false });
    return calls.get(id);
  };
  let buf = Buffer.alloc(0);
  s.on('data', (b) => {
    for (buf = Buffer.concat([buf, b]); buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3);) {
      const len = buf.readUIntBE(0, 3), type = buf[3], flags = buf[4], id = buf.readUInt32BE(5) & 0x7fffffff;
      const payload = buf.subarray(9, 9 + len);
      buf = buf.subarray(9 + len);
      if (type === 4 && !(flags & 1)) s.write(h2frame(4, 1, 0)); // SETTINGS: ACK
      if (id && type === 0) got(id).data = Buffer.concat([got(id).data, payload]); // (attnd pads none)
      if (id && (type === 0 || type === 1) && (flags & 1)) got(id).ended = true;
    }
    for (const w of waits.splice(0)) w();
  });
  s.on('error', () => {});
  s.on('close', () => { for (const w of waits.splice(0)) w(); });
  s.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), h2frame(4, 0, 0)]));
  const head = (id, path) => s.write(h2frame(1, 4, id, Buffer.concat([lit(':method', 'POST'), lit(':scheme', 'http'),
    lit(':path', path), lit(':authority', 'x'), lit('content-type', 'application/grpc'), lit('te', 'trailers')])));
  const data = (id, b, end = false) => s.write(h2frame(0, end ? 1 : 0, id, b));
  const ended = async (id) => {
    while (!got(id).ended && !s.destroyed) await new Promise((r) => waits.push(r));
    return got(id);
  };
  return { s, head, data, got, ended };
}

/** sdpa(t, d): a ModelInferRequest for sdpa, q = k = v of [t, d] in
 * raw_input_contents (12 t d bytes). */
function sdpa(t, dim) {
  const x = f32bytes(Array.from({ length: t * dim }, (_, i) => Math.sin(i * 0.37) * 0.5));
  return Buffer.concat([str(1, 'sdpa'),
    ...['q', 'k', 'v'].map((n) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, [t, dim])]))),
    ld(7, x), ld(7, x), ld(7, x)]);
}

/** sigterm(d): the first signal, once attnd has seen it. */
async function sigterm(d) {
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/SIGTERM: draining/), /SIGTERM: draining/);
}

test('gRPC: a ModelInfer whose HEADERS and part of its message came before SIGTERM is served (the same answer as before it); a call opened after it answers UNAVAILABLE; exit 0', async (t) => {
  const d = await start({ t, grpc: true });
  const msg = sdpa(1000, 64), all = frame(msg); // 768 KB
  const ref = await grpcCall(session(t, d), INFER, [msg]);
  assert.equal(ref.grpcStatus, 0, JSON.stringify(ref.message));
  assert.equal(ref.msgs.length, 1);
  const c = open(session(t, d), INFER);
  c.send(all.subarray(0, all.length >> 1));
  assert.equal(await used(d, msg.length + 1 + MSG_COST + CALL_COST), msg.length + 1 + MSG_COST + CALL_COST, 'its prefix was read: its message reserved');
  await sigterm(d);
  const late = await grpcCall(session(t, d), INFER, [msg]);
  assert.equal(late.grpcStatus, 14, JSON.stringify(late));
  assert.match(late.message, /^server: draining \(shutting down\)/);
  c.end(all.subarray(all.length >> 1));
  const r = await c.answer;
  assert.equal(r.grpcStatus, 0, JSON.stringify(r.message));
  assert.equal(r.msgs.length, 1);
  assert.ok(r.msgs[0].equals(ref.msgs[0]), 'the answer before the signal, byte for byte');
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: on one connection, the call whose HEADERS came before SIGTERM is served and one opened after it answers UNAVAILABLE', async (t) => {
  const d = await start({ t, grpc: true });
  const msg = sdpa(8, 4), all = frame(msg);
  const ref = await grpcCall(session(t, d), INFER, [msg]);
  assert.equal(ref.grpcStatus, 0, JSON.stringify(ref.message));
  const c = rawConn(d.grpcPort);
  t.after(() => c.s.destroy());
  c.head(1, INFER);
  c.data(1, all.subarray(0, all.length >> 1));
  assert.equal(await used(d, msg.length + 1 + MSG_COST + CALL_COST), msg.length + 1 + MSG_COST + CALL_COST, 'its prefix was read: its message reserved');
  await sigterm(d);
  const from = d.log().length;
  c.head(3, INFER);
  c.data(3, all, true);
  const late = await c.ended(3);
  assert.equal(late.data.length, 0, 'trailers only: a status, no answer');
  assert.match(await d.logged(/ModelInfer 503/, 5000, from), /ModelInfer 503/);
  c.data(1, all.subarray(all.length >> 1), true);
  const r = await c.ended(1);
  assert.ok(r.data.equals(frame(ref.msgs[0])), 'the answer before the signal, byte for byte');
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

/** upload(name): a RepositoryModelLoadRequest uploading tiny as name. */
function upload(name) {
  const param = (k, field, v) => ld(3, Buffer.concat([str(1, k), ld(2, ld(field, Buffer.from(v)))]));
  return Buffer.concat([str(2, name), param('config', 3, TINY_CONFIG),
    param('file:model.safetensors', 4, readFileSync(join(TINY, 'model.safetensors')))]);
}

test('gRPC: a RepositoryModelLoad whose upload was still coming at SIGTERM loads its model and answers OK', async (t) => {
  const d = await start({ t, grpc: true });
  const msg = upload('up'), all = frame(msg);
  const c = open(session(t, d), LOAD);
  c.send(all.subarray(0, all.length >> 1));
  assert.equal(await used(d, msg.length + 1 + MSG_COST + CALL_COST), msg.length + 1 + MSG_COST + CALL_COST, 'its prefix was read: its message reserved');
  await sigterm(d);
  c.end(all.subarray(all.length >> 1));
  const r = await c.answer;
  assert.equal(r.grpcStatus, 0, JSON.stringify(r.message));
  assert.match(await d.logged(/model 'up' loaded/), /model 'up' loaded/);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: a stream\'s message begun before SIGTERM is served; one begun after answers UNAVAILABLE in its place; then the stream ends UNAVAILABLE', async (t) => {
  const d = await start({ t, grpc: true });
  const msg = sdpa(400, 32), all = frame(msg); // 154 KB
  const ref = await grpcCall(session(t, d), INFER, [msg]);
  assert.equal(ref.grpcStatus, 0, JSON.stringify(ref.message));
  const c = open(session(t, d), STREAM);
  let n = 0;
  const first = new Promise((res) => c.req.on('data', () => { if (++n === 1) res(); }));
  c.send(frame(seedMsg())); // the stream is open and answering
  await first;
  c.send(all.subarray(0, all.length >> 1));
  assert.equal(await used(d, msg.length + 1 + MSG_COST + CALL_COST), msg.length + 1 + MSG_COST + CALL_COST, 'its prefix was read: its message reserved');
  await sigterm(d);
  // the rest and, in the same write, a message begun after the signal
  c.send(Buffer.concat([all.subarray(all.length >> 1), frame(seedMsg())]));
  const r = await c.answer;
  assert.equal(r.grpcStatus, 14, JSON.stringify(r));
  assert.match(r.message, /^server: draining \(shutting down\)/);
  const got = r.msgs.map(fields);
  assert.equal(got.length, 3, 'the seed, the message begun before the signal, the one after');
  assert.ok(got[1][2][0].equals(ref.msgs[0]), 'served: the answer before the signal, byte for byte');
  assert.match(got[2][1][0].toString(), /^server: draining \(shutting down\)/);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: a stream\'s messages whole before SIGTERM but held (queue-size of its requests in flight) are served after it', async (t) => {
  const d = await start({ t, grpc: true, args: ['--queue-size', '1', '--batch-delay-us', '10000000'] });
  const msg = seedMsg();
  const c = open(session(t, d), STREAM);
  // the first waits out the batch delay, the second is held behind it:
  // one DATA frame of 300 bytes, read at once, so the second is in once
  // the first is queued
  c.send(Buffer.concat([frame(msg), frame(msg)]));
  assert.equal(await metric(d, 'attnd_inference_pending_requests{model="sdpa",version="1"}', (v) => v === 1), 1);
  await sigterm(d);
  const r = await c.answer;
  assert.equal(r.grpcStatus, 14, JSON.stringify(r));
  const got = r.msgs.map(fields);
  assert.equal(got.length, 2, JSON.stringify(r));
  for (const g of got) {
    assert.equal(g[1], undefined, g[1] && g[1][0].toString());
    assert.deepEqual(Array.from(new Float32Array(new Uint8Array(fields(g[2][0])[6][0]).buffer)), SEED_OUT);
  }
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: a call begun before SIGTERM whose message ends after the cut answers UNAVAILABLE and starts nothing, an upload neither', async (t) => {
  // a load held running keeps the stop waiting meanwhile (as REST's test
  // in drain_cut.test.mjs)
  const { d, slow } = await slowStart(t, 'begun', { grpc: true });
  const s = session(t, d);
  const l = open(s, LOAD);
  l.end(frame(str(2, 'slow')));
  await slow.reading();
  const inf = frame(sdpa(8, 4)), up = frame(upload('up'));
  const u = await metric(d, 'attnd_memory_budget_used_bytes', () => true);
  const a = open(s, INFER), b = open(s, LOAD);
  a.send(inf.subarray(0, inf.length >> 1));
  b.send(up.subarray(0, up.length >> 1));
  // both reserved, their prefixes read, beside their calls' state
  const n = u + inf.length - 4 + up.length - 4 + 2 * MSG_COST + 2 * CALL_COST;
  assert.equal(await used(d, n), n);
  await sigterm(d);
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drain cut short/), /drain cut short/);
  a.end(inf.subarray(inf.length >> 1));
  b.end(up.subarray(up.length >> 1));
  // whole, and refused by its handler (sched.c, registry_queue.c), not
  // ended unwhole at the stop
  const ra = await a.answer, rb = await b.answer;
  assert.deepEqual([ra.grpcStatus, ra.message], [14, 'server: draining (shutting down); retry on another replica']);
  assert.deepEqual([rb.grpcStatus, rb.message], [14, 'server: draining (shutting down)']);
  assert.ok(slow.finish());
  assert.equal((await l.answer).grpcStatus, 0);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  assert.doesNotMatch(d.log(), /model 'up'/, 'the upload did not start a load');
  await d.stop();
});

test('gRPC: a step of a sequence live here that comes while the server drains is told its sequence ends with it (its message\'s sequence_id)', async (t) => {
  const d = await start({ t, grpc: true, dir: gqaModels() });
  const r0 = await infer(d, 'gqa', stepBody('dr', tokens(2, 5), { start: true, outputs: [{ name: 'y' }] }));
  assert.equal(r0.status, 200, JSON.stringify(r0.json));
  // a ModelInferRequest of one token of sequence 'dr' (or of another id)
  const step = (id) => Buffer.concat([str(1, 'gqa'), ld(4, Buffer.concat([str(1, 'sequence_id'), ld(2, str(3, id))])),
    ld(5, Buffer.concat([str(1, 'x'), str(2, 'FP32'), packedI64(3, [1, 1, D])])), ld(7, f32bytes(tokens(1, 6)))]);
  // a call begun before the signal, its message half sent, holds the drain
  const msg = sdpa(1000, 64), all = frame(msg);
  const c = open(session(t, d), INFER);
  c.send(all.subarray(0, all.length >> 1));
  assert.equal(await used(d, msg.length + 1 + MSG_COST + CALL_COST), msg.length + 1 + MSG_COST + CALL_COST);
  await sigterm(d);
  const late = await grpcCall(session(t, d), INFER, [step('dr')]);
  assert.deepEqual([late.grpcStatus, late.message], [14, "server: draining (shutting down); sequence 'dr' ends with it (its keys " +
    'and values are memory state): begin it again on another replica with sequence_start: true and the whole history']);
  const other = await grpcCall(session(t, d), INFER, [step('nope')]);
  assert.deepEqual([other.grpcStatus, other.message], [14, 'server: draining (shutting down); retry on another replica']);
  c.end(all.subarray(all.length >> 1));
  assert.equal((await c.answer).grpcStatus, 0);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});
