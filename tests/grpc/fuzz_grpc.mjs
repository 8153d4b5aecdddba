// fuzz_grpc.mjs - a bounded, seeded fuzzer for attnd's gRPC door at the
// HTTP/2 frame level; not part of `make test` (CI runs it: make fuzz-grpc,
// the ASan build, seed 7, 60 s). fuzz_http.mjs does the same for the REST
// door; framing.test.mjs mutates one message's protobuf bytes behind a
// well-behaved HTTP/2 client, where this builds the frames itself.
//
// It starts one attnd (ATTND_BIN, e.g. build/address+undefined/attnd; --api-key set,
// the gqa model of seq_helper.mjs loaded) and, for ATTND_FUZZ_N batches
// (default no limit) or ATTND_FUZZ_SECONDS (default 600), whichever ends
// first, runs cases four at a time, each on its own connection: the client
// preface, a SETTINGS frame (sometimes with odd values), then one to six
// streams of the door's RPCs (unary and ModelStreamInfer, whose messages
// carry sequence steps), their HEADERS sometimes split into CONTINUATION,
// padded or with a priority, their messages split across DATA frames, with
// PING, WINDOW_UPDATE, PRIORITY, RST_STREAM, SETTINGS, GOAWAY, PUSH_PROMISE
// and unknown frames between; some cases break the protocol on purpose
// (stream 0 or even ids, ids reused, frames past the peer's limits, a flipped
// byte, the socket cut or reset half-way, a zero window never opened).
//
// Oracles: in a case that keeps the protocol (no byte flipped, no frame
// against the rules, a window large enough), every stream the client ended
// must be ended by the server (END_STREAM or RST_STREAM) within
// ATTND_FUZZ_HANG_MS (default 10000), or be past the last stream id of a
// GOAWAY; once a case with no byte flipped, no cut and a window that opens
// is done, the seed example on its connection (a stream past its ids) must
// come back exact unless a GOAWAY or REFUSED_STREAM refused it.
// ATTND_FUZZ_CALLS (default 0.25) of the cases are call-level instead
// (fuzz_calls.mjs: typed contents, attnd-sequence-id metadata, uploads by
// RepositoryModelLoad, messages around --request-memory, each status
// checked, the seed example after each call on its connection). After
// each batch a known-good ModelInfer on a new connection must come back
// exact and /v2/health/live answer 200; at the end memory-budget's gauge must
// be back to 0, SIGTERM must give exit 0 and no sanitizer report. Each case
// draws from a generator seeded from the seed and its place, so a seed
// sends the same bytes in every run (the summary prints their digest).
//   ATTND_BIN=build/address+undefined/attnd ATTND_FUZZ_SEED=7 node tests/grpc/fuzz_grpc.mjs
import { createHash } from 'node:crypto';
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { SEQ_MODEL, buildCallCase, call, padded, runCallCase, sized, sizedBool, sizedInt64, statuses, typedInfer, uploadMsg } from './fuzz_calls.mjs';
import { mulberry32, requestsUsed, sanitizerReport, start } from '../server/helper.mjs';
import { D, gqaModels } from '../server/seq_helper.mjs';
import { SEED_OUT, firstRawOutput, frame as grpcMsg, h2frame, ld, lit as hpackLit, packedI64, seedMsg, str, varint } from './wire.mjs';

const env = process.env;
const SEED = Number(env.ATTND_FUZZ_SEED || Date.now() % 1e9);
const N = Number(env.ATTND_FUZZ_N || 1e6);
const UNTIL = Date.now() + 1000 * Number(env.ATTND_FUZZ_SECONDS || 600);
const HANG = Number(env.ATTND_FUZZ_HANG_MS || 10000);
const KEY = 'fuzz-key-1';
const CALL_SHARE = Number(env.ATTND_FUZZ_CALLS ?? 0.25); // the share of call-level cases
const REQUEST_MEMORY = 262144;
const SVC = '/inference.GRPCInferenceService/';
let rnd = mulberry32(SEED);
const int = (n) => Math.floor(rnd() * n), pick = (a) => a[int(a.length)];
const findings = [];
console.log(`fuzz_grpc: seed ${SEED}, up to ${N} batches, ${env.ATTND_BIN || 'build/default/attnd'}`);

// ---- messages (field numbers: proto/kserve.proto) ----------------------------
const vec = (n) => Array.from({ length: n }, () => Math.round((rnd() * 2 - 1) * 100) / 100);
const boolField = (f, b) => Buffer.concat([varint((f << 3) | 0), varint(b ? 1 : 0)]);
// InferParameter: bool_param 1, int64_param 2, string_param 3; a map entry: key 1, value 2
const param = (k, v) => ld(4, Buffer.concat([str(1, k), ld(2,
  typeof v === 'boolean' ? boolField(1, v) : typeof v === 'number' ? Buffer.concat([varint(2 << 3), varint(v)]) : str(3, v))]));
const tensor = (name, shape) => ld(5, Buffer.concat([str(1, name), str(2, 'FP32'), packedI64(3, shape)]));
const raw = (a) => ld(7, Buffer.from(new Float32Array(a).buffer));
const seqIds = ['s1', 's2', 'g7'];
function gqaStep() {
  const t = 1 + int(3);
  const p = [param('sequence_id', pick(seqIds))];
  const o = int(6);
  if (o === 0) p.push(param('sequence_start', true));
  if (o === 1) p.push(param('sequence_end', true));
  if (o === 2) p.push(param('sequence_position', int(6)));
  if (o === 3) p.push(param('sequence_start', true), param('sequence_end', true));
  return Buffer.concat([str(1, 'gqa'), ...p, tensor('x', [1, t, D]), raw(vec(t * D))]);
}
const tinyInfer = () => Buffer.concat([str(1, pick(['tiny', 'gqa', 'nosuch', ''])), tensor('x', [1, 2, D]), raw(vec(2 * D)),
  ...(rnd() < 0.3 ? [param('retain', true)] : [])]);
// each RPC and a valid message for it
const RPCS = [
  ['ServerLive', () => Buffer.alloc(0)], ['ServerReady', () => Buffer.alloc(0)], ['ServerMetadata', () => Buffer.alloc(0)],
  ['ModelReady', () => str(1, pick(['gqa', 'sdpa', 'nosuch']))], ['ModelMetadata', () => str(1, pick(['gqa', 'sdpa', 'tiny']))],
  ['ModelConfig', () => str(1, pick(['gqa', 'sdpa']))], ['ModelStatistics', () => str(1, pick(['', 'gqa']))],
  ['RepositoryIndex', () => Buffer.alloc(0)],
  ['RepositoryModelLoad', () => str(2, pick(['gqa', 'nosuch']))], ['RepositoryModelUnload', () => str(2, pick(['gqa', 'nosuch']))],
  ['ModelInfer', seedMsg], ['ModelInfer', gqaStep], ['ModelInfer', tinyInfer],
  ['ModelStreamInfer', gqaStep], ['ModelStreamInfer', seedMsg],
  ['ModelInfer', () => typedInfer(() => rnd(), int, pick).msg], ['ModelStreamInfer', () => typedInfer(() => rnd(), int, pick).msg],
  ['RepositoryModelLoad', () => uploadMsg(pick(['fzraw', 'gqa']), FILES)],
];

/** a message's bytes mutated: bytes set, cut, a huge varint put in, a tail repeated */
function mutateMsg(m) {
  let msg = Buffer.from(m);
  for (let k = 1 + int(3); k > 0 && msg.length; k--) {
    const at = int(msg.length), op = rnd();
    if (op < 0.5) msg[at] = int(256);
    else if (op < 0.7) msg = msg.subarray(0, at);
    else if (op < 0.85) msg = Buffer.concat([msg.subarray(0, at), Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f]), msg.subarray(at)]);
    else msg = Buffer.concat([msg, msg.subarray(at)]);
  }
  return msg;
}

// ---- HTTP/2 frames (RFC 9113) and HPACK literals (RFC 7541, no Huffman) ------
const DATA = 0, HEADERS = 1, PRIORITY = 2, RST = 3, SETTINGS = 4, PUSH = 5, PING = 6, GOAWAY = 7, WINDOW = 8, CONT = 9;
const END_STREAM = 1, END_HEADERS = 4, PADDED = 8, PRIO = 0x20;
const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32BE(n >>> 0); return b; };
const settings = (pairs) => h2frame(SETTINGS, 0, 0, Buffer.concat(pairs.map(([k, v]) => { const b = Buffer.alloc(6); b.writeUInt16BE(k); b.writeUInt32BE(v >>> 0, 2); return b; })));
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** the header list of a call to rpc; ok: 0 when it breaks the rules */
function headerList(rpc, breaking) {
  const h = [[':method', 'POST'], [':scheme', 'http'], [':path', SVC + rpc], [':authority', 'x'],
    ['content-type', 'application/grpc'], ['te', 'trailers']];
  if (rnd() < 0.9) h.push(['authorization', `Bearer ${KEY}`]);
  if (rnd() < 0.15) h.push(['attnd-sequence-id', pick([...seqIds, 'fz.raw', '', 'a b', 'a'.repeat(129 + int(4000))])]);
  if (rnd() < 0.2) h.push(['grpc-timeout', pick(['1S', '100m', '0n', '99999999H', '5u', '12x', '', '1000000000m'])]);
  let ok = 1;
  const r = rnd();
  if (r < 0.05) h[2][1] = pick(['/', SVC, SVC + 'Nope', '/grpc.health.v1.Health/Check', SVC + rpc + '?a=b', '*']);
  else if (r < 0.1) h[4][1] = pick(['application/json', 'application/grpc+proto', 'application/grpc; charset=x', '']);
  else if (r < 0.13) h.push(['grpc-encoding', pick(['gzip', 'identity', 'x'])]);
  else if (r < 0.16) h.push(['x-big', 'a'.repeat(1 + int(20000))]);
  else if (!breaking) { /* the rest break the rules */ }
  else if (r < 0.2) { ok = 0; h.splice(int(4), 1); } // a pseudo-header missing
  else if (r < 0.23) { ok = 0; h.push([':path', SVC + rpc]); } // twice
  else if (r < 0.26) { ok = 0; h.push(['X-Upper', '1']); } // upper case: malformed in HTTP/2
  else if (r < 0.28) { ok = 0; h.push(['connection', 'keep-alive']); }
  else if (r < 0.3) { ok = 0; h.unshift(['x-first', '1']); } // a field before the pseudo-headers
  return { block: Buffer.concat(h.map(([k, v]) => hpackLit(k, v))), ok };
}

/** HEADERS (and CONTINUATION) frames carrying block on stream id */
function headersFrames(id, block, endStream) {
  const out = [];
  let flags = endStream ? END_STREAM : 0, pre = Buffer.alloc(0), pad = Buffer.alloc(0);
  if (rnd() < 0.15) { flags |= PADDED; pad = Buffer.alloc(int(40)); pre = Buffer.from([pad.length]); }
  if (rnd() < 0.15) { flags |= PRIO; pre = Buffer.concat([pre, u32(int(2) ? 0 : id + 2), Buffer.from([int(256)])]); }
  const parts = [];
  if ((rnd() < 0.25 && block.length > 2) || block.length > 16000) { // one frame must stay under 16384
    // at most 4 frames (nghttp2 ends a connection past 8 CONTINUATIONs)
    const size = Math.min(16000, Math.max(1 + int(block.length), Math.ceil(block.length / 4)));
    for (let at = 0; at < block.length; at += size) parts.push(block.subarray(at, at + size));
  } else parts.push(block);
  parts.forEach((p, i) => {
    const last = i === parts.length - 1 ? END_HEADERS : 0;
    out.push(i === 0 ? h2frame(HEADERS, flags | last, id, Buffer.concat([pre, p, pad])) : h2frame(CONT, last, id, p));
  });
  return out;
}

/** DATA frames carrying bytes, the last one ending the stream when end */
function dataFrames(id, bytes, end) {
  const out = [];
  let at = 0;
  do {
    const n = rnd() < 0.3 ? Math.min(bytes.length - at, 1 + int(64)) : bytes.length - at;
    let flags = 0, body = bytes.subarray(at, at + n);
    at += n;
    if (rnd() < 0.1) { const pad = int(30); flags |= PADDED; body = Buffer.concat([Buffer.from([pad]), body, Buffer.alloc(pad)]); }
    if (end && at >= bytes.length) flags |= END_STREAM;
    out.push(h2frame(DATA, flags, id, body));
  } while (at < bytes.length);
  if (end && !bytes.length && !out.length) out.push(h2frame(DATA, END_STREAM, id));
  return out;
}

/** a frame between streams' frames: ok 0 when it breaks the rules */
function noise(lastId, breaking) {
  const all = [
    () => ({ f: h2frame(PING, 0, 0, Buffer.alloc(8, int(256))), ok: 1 }),
    () => ({ f: h2frame(WINDOW, 0, 0, u32(1 + int(100000))), ok: 1 }),
    () => ({ f: h2frame(WINDOW, 0, lastId, u32(1 + int(100000))), ok: 1 }),
    () => ({ f: h2frame(PRIORITY, 0, lastId + 2, Buffer.concat([u32(lastId), Buffer.from([int(256)])])), ok: 1 }),
    () => ({ f: h2frame(0xfa, int(256), int(3), Buffer.alloc(int(50), 7)), ok: 1 }), // unknown: ignored
    () => ({ f: settings([[0x1, int(8192)], [0x6, 4096 + int(100000)]]), ok: 1 }),
  ], rules = [
    () => ({ f: h2frame(SETTINGS, 1, 0), ok: 0 }), // an ACK of nothing
    () => ({ f: h2frame(WINDOW, 0, 0, u32(0)), ok: 0 }),
    () => ({ f: h2frame(WINDOW, 0, 0, u32(0x7fffffff)), ok: 0 }), // overflows the window
    () => ({ f: h2frame(PING, 0, 0, Buffer.alloc(int(8))), ok: 0 }),
    () => ({ f: h2frame(PUSH, END_HEADERS, lastId || 1, Buffer.concat([u32(2), hpackLit(':path', '/')])), ok: 0 }),
    () => ({ f: h2frame(DATA, 0, 0, Buffer.alloc(4)), ok: 0 }),
    () => ({ f: h2frame(HEADERS, END_HEADERS, 2, hpackLit(':path', '/')), ok: 0 }), // an even id
    () => ({ f: h2frame(PRIORITY, 0, lastId || 1, Buffer.concat([u32(lastId || 1), Buffer.from([1])])), ok: 0 }), // on itself
    () => ({ f: h2frame(GOAWAY, 0, 0, Buffer.concat([u32(lastId), u32(int(14))])), ok: 0 }),
    () => ({ f: h2frame(RST, 0, 0, u32(8)), ok: 0 }),
  ];
  return pick(breaking ? [...all, ...rules] : all)();
}

/** one case: {bytes (parts to write), ended (stream ids the client ended), ok, stall, cut} */
function buildCase() {
  const parts = [PREFACE];
  let ok = 1, stall = 0, bye = 0;
  const breaking = rnd() < 0.4; // a case that may break the protocol; the others keep it
  const s = [];
  if (rnd() < 0.2) {
    const v = pick([[0x4, 0], [0x4, 1], [0x4, 0x7fffffff], [0x4, 0x80000000], [0x5, 16384], [0x5, 1 << 20], [0x5, 100], [0x2, 0], [0x2, 2], [0x1, 0], [0x3, 1], [0x99, 5]]);
    s.push(v);
    if (v[0] === 0x4 && v[1] < 4096) stall = 1; // its answers cannot all come: nothing opens the window
    if ((v[0] === 0x4 && v[1] > 0x7fffffff) || (v[0] === 0x5 && (v[1] < 16384 || v[1] > 16777215)) || (v[0] === 0x2 && v[1] > 1)) ok = 0;
  }
  parts.push(settings(s));
  const ended = [];
  let id = 1;
  const n = 1 + int(6);
  for (let k = 0; k < n; k++) {
    const [rpc, make] = pick(RPCS);
    const { block, ok: hok } = headerList(rpc, breaking);
    ok &= hok;
    let sid = id;
    const idr = rnd();
    if (!breaking) { /* in order */ } else if (idr < 0.03) { sid = 0; ok = 0; } else if (idr < 0.06) { sid = id + 1; ok = 0; } else if (idr < 0.09 && id > 1) { sid = id - 2; ok = 0; }
    id += 2;
    const msgs = rpc === 'ModelStreamInfer' ? Array.from({ length: 1 + int(4) }, make) : [make()];
    let body = Buffer.concat(msgs.map((m) => {
      const r = rnd();
      if (r < 0.15) return grpcMsg(mutateMsg(m));
      if (r < 0.18) return grpcMsg(m, pick([1, 2, 0x80]));
      if (r < 0.21) { const f = grpcMsg(m); f.writeUInt32BE(pick([0, f.length, 0x7fffffff, 0xffffffff, m.length + 1]), 1); return f; }
      return grpcMsg(m);
    }));
    if (rnd() < 0.05) body = body.subarray(0, int(body.length));
    const endHow = rnd();
    const hf = headersFrames(sid, block, false);
    if (endHow < 0.04) { parts.push(...headersFrames(sid, block, true)); if (sid) ended.push(sid); } // no message at all
    else {
      parts.push(...hf, ...dataFrames(sid, body, endHow >= 0.12));
      if (endHow < 0.08) { parts.push(...headersFrames(sid, hpackLit('x-trailer', '1'), true)); if (sid) ended.push(sid); } // trailers
      else if (endHow < 0.12) { /* left open: its call waits for the rest */ }
      else if (sid) ended.push(sid);
    }
    if (rnd() < 0.1) { parts.push(h2frame(RST, 0, sid || 1, u32(int(14)))); if (ended[ended.length - 1] === sid) ended.pop(); }
    if (rnd() < 0.2) { const x = noise(sid, breaking); parts.push(x.f); ok &= x.ok; bye |= x.f[3] === GOAWAY; }
  }
  let flip = 0;
  if (breaking && rnd() < 0.25) {
    const all = Buffer.concat(parts);
    for (let k = 1 + int(3); k > 0; k--) all[PREFACE.length + int(all.length - PREFACE.length)] = int(256);
    parts.length = 0;
    parts.push(all);
    flip = 1;
  }
  const cut = rnd() < 0.08 ? pick(['end', 'reset']) : null;
  let chunks = parts;
  if (rnd() < 0.3) chunks = Buffer.concat(parts).toString('latin1').match(/[\s\S]{1,97}/g).map((x) => Buffer.from(x, 'latin1'));
  // the seed example on the same connection once the case is done: its
  // answer must be exact, unless a GOAWAY (or REFUSED_STREAM) refused it;
  // not after the client's own GOAWAY (the server may close once its
  // streams are done)
  const probe = !flip && !cut && !stall && !bye ? id : 0;
  return { chunks, ended, ok: ok && !flip && !cut && !stall, cut, pace: rnd() < 0.2 ? 15 : 0, probe };
}

/** the server's frames: streams it ended, GOAWAY's last id and code */
function serverFrames(buf, st) {
  let at = st.at;
  while (buf.length - at >= 9) {
    const len = buf.readUIntBE(at, 3), type = buf[at + 3], flags = buf[at + 4], id = buf.readUInt32BE(at + 5) & 0x7fffffff;
    if (buf.length - at < 9 + len) break;
    const p = buf.subarray(at + 9, at + 9 + len);
    if ((type === DATA || type === HEADERS) && flags & END_STREAM) st.done.add(id);
    if (type === DATA && id === st.probe) st.data.push(flags & PADDED ? p.subarray(1, p.length - p[0]) : p);
    if (type === RST) { st.done.add(id); st.rst[id] = p.readUInt32BE(0); }
    if (type === GOAWAY) { st.goaway = p.readUInt32BE(0) & 0x7fffffff; st.goawayCode = p.readUInt32BE(4); }
    if (type === SETTINGS && !(flags & 1)) st.acks.push(h2frame(SETTINGS, 1, 0));
    if (type === PING && !(flags & 1)) st.acks.push(h2frame(PING, 1, 0, p));
    at += 9 + len;
  }
  st.at = at;
}

function exchange(c, rand) {
  return new Promise((resolve) => {
    const sock = net.connect(PORT, '127.0.0.1');
    let buf = Buffer.alloc(0), closed = false, timer = null, wrote = false;
    const st = { at: 0, done: new Set(), goaway: null, goawayCode: null, acks: [], probe: 0, data: [], rst: {} };
    const allDone = () => c.ended.every((id) => st.done.has(id) || (st.goaway !== null && id > st.goaway));
    // ACKs go between whole frames: once the case's bytes are all written
    const ack = () => { if (wrote && st.acks.length && !closed && !c.cut) { for (const a of st.acks) sock.write(a); st.acks.length = 0; } };
    let hung = false;
    const done = () => { clearTimeout(timer); sock.destroy(); resolve({ st, closed, hung, harm: st.probe ? harmed(st, closed) : null }); };
    const finish = () => {
      if (st.probe) return done();
      hung = c.ok && !allDone();
      if (!c.probe || closed || st.goaway !== null) return done();
      st.probe = c.probe; // the good call, on a stream id past every one the case used
      clearTimeout(timer);
      sock.write(Buffer.concat([h2frame(HEADERS, END_HEADERS, st.probe, GOOD_BLOCK), h2frame(WINDOW, 0, 0, u32(1 << 20)),
        h2frame(DATA, END_STREAM, st.probe, grpcMsg(seedMsg()))]));
      timer = setTimeout(done, HANG);
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      serverFrames(buf, st);
      ack();
      if (st.probe) { if (st.done.has(st.probe) || (st.goaway !== null && st.probe > st.goaway)) { clearTimeout(timer); timer = setTimeout(done, 20); } }
      else if (wrote && allDone() && !c.cut) { clearTimeout(timer); timer = setTimeout(finish, 50); }
    });
    sock.on('error', () => {});
    sock.on('close', () => { closed = true; if (st.probe) done(); else finish(); });
    sock.on('connect', async () => {
      for (const p of c.chunks) {
        if (closed) break;
        sock.write(p);
        if (c.pace) await new Promise((r) => setTimeout(r, Math.floor(rand() * c.pace)));
      }
      wrote = true;
      ack();
      if (c.cut) { const reset = c.cut === 'reset'; setTimeout(() => (reset ? sock.resetAndDestroy() : sock.end()), Math.floor(rand() * 30)); }
      timer = setTimeout(finish, c.cut ? 200 : c.ok ? HANG : 300 + Math.floor(rand() * 300));
      if (allDone() && !c.cut) { clearTimeout(timer); timer = setTimeout(finish, 50); }
    });
  });
}

const GOOD_BLOCK = Buffer.concat([[':method', 'POST'], [':scheme', 'http'], [':path', SVC + 'ModelInfer'], [':authority', 'x'],
  ['content-type', 'application/grpc'], ['te', 'trailers'], ['authorization', `Bearer ${KEY}`]].map(([k, v]) => hpackLit(k, v)));
/** what became of the good call after a case: null when it came back exact or was rightly refused */
function harmed(st, closed) {
  if (st.goaway !== null && st.probe > st.goaway) return null; // a GOAWAY refused it
  if (st.rst[st.probe] === 7) return null; // REFUSED_STREAM: no memory for it
  if (!st.done.has(st.probe)) return closed ? 'its connection closed with no GOAWAY refusing it' : `not answered in ${HANG} ms`;
  const data = Buffer.concat(st.data);
  let out = null;
  try { out = data.length ? firstRawOutput(data) : null; } catch { /* below */ }
  return JSON.stringify(out) === JSON.stringify(SEED_OUT) ? null
    : `answered ${st.rst[st.probe] !== undefined ? `RST_STREAM ${st.rst[st.probe]}` : `${data.length} bytes, output ${JSON.stringify(out)}`}`;
}

const sent = [];
const seen = { goaway: {}, cases: { ok: 0, broken: 0, calls: 0 }, probes: 0 };
async function runCase(place) {
  rnd = mulberry32((SEED ^ Math.imul(place + 1, 0x9e3779b1)) >>> 0);
  const rand = rnd;
  if (rnd() < CALL_SHARE) { // a call-level case (fuzz_calls.mjs)
    const c = buildCallCase(rnd, `${SEED}.${place}`, Math.floor((place % 20) / 5), FILES, LIM);
    sent[place] = createHash('sha1').update(c.bytes).digest('hex');
    seen.cases.calls++;
    for (const f of await runCallCase(PORT, KEY, c, HANG)) {
      findings.push(`case ${place} (batch ${Math.floor(place / 20)}): ${f}`);
      console.log(`FINDING case ${place} (batch ${Math.floor(place / 20)}): ${f}`);
    }
    return;
  }
  const c = buildCase();
  sent[place] = createHash('sha1').update(Buffer.concat(c.chunks)).digest('hex');
  const { st, hung, harm } = await exchange(c, rand);
  if (st.probe) seen.probes++;
  if (harm) report(place, `the good call on the same connection after the case: ${harm}`, c);
  seen.cases[c.ok ? 'ok' : 'broken']++;
  if (st.goawayCode !== null) seen.goaway[st.goawayCode] = (seen.goaway[st.goawayCode] || 0) + 1;
  if (c.ok && st.goawayCode) report(place, `GOAWAY code ${st.goawayCode} to a case that kept the protocol`, c);
  if (hung) report(place, `streams ${c.ended.filter((id) => !st.done.has(id)).join(',')} not ended in ${HANG} ms (ended: ${[...st.done].join(',')})`, c);
}
function report(place, what, c) {
  const f = `case ${place} (batch ${Math.floor(place / 20)}): ${what}`;
  findings.push(f);
  console.log(`FINDING ${f}; sent (base64) ${Buffer.concat(c.chunks).toString('base64').slice(0, 3000)}`);
}

/** the seed example through node:http2: its output must be exact */
function knownGood() {
  return new Promise((resolve) => {
    const session = http2.connect(`http://127.0.0.1:${PORT}`);
    session.on('error', (e) => resolve(`session: ${e.message}`));
    const req = session.request({ ':method': 'POST', ':path': `${SVC}ModelInfer`, 'content-type': 'application/grpc', te: 'trailers', authorization: `Bearer ${KEY}` });
    const chunks = [];
    let trailers = {};
    req.on('data', (x) => chunks.push(x));
    req.on('trailers', (t) => { trailers = t; });
    req.on('error', (e) => { session.close(); resolve(`call: ${e.message}`); });
    req.on('end', () => {
      session.close();
      const data = Buffer.concat(chunks);
      if (trailers['grpc-status'] !== '0') return resolve(`grpc-status ${trailers['grpc-status']} ${trailers['grpc-message']}`);
      let out;
      try { out = firstRawOutput(data); } catch (e) { return resolve(`answer: ${e.message}`); }
      resolve(JSON.stringify(out) === JSON.stringify(SEED_OUT) ? null : `output ${JSON.stringify(out)}`);
    });
    req.end(grpcMsg(seedMsg()));
  });
}

const dir = gqaModels();
const FILES = { config: readFileSync(join(dir, 'gqa', 'config.json')), weights: readFileSync(join(dir, 'gqa', 'model.safetensors')) };
const d = await start({ grpc: true, dir, args: ['--api-key', KEY, '--max-body', '400000', '--request-memory', String(REQUEST_MEMORY)] });
const PORT = d.grpcPort;
const auth = { Authorization: `Bearer ${KEY}` };
// the least ModelInfer (sdpa, n rows of k and v) and RepositoryModelLoad
// (n bytes) --request-memory refuses, by bisection: the cases send one
// step under and at or past them
async function least(make, lo, hi) { // status of make(lo) is not 8, of make(hi) 8
  const session = http2.connect(`http://127.0.0.1:${PORT}`);
  session.on('error', () => {});
  const st = async (n) => (await call(session, KEY, make === padded ? 'RepositoryModelLoad' : 'ModelInfer', make(n))).status;
  if (await st(lo) === 8 || await st(hi) !== 8) throw new Error(`${make.name}: no bound between ${lo} and ${hi}`);
  while (hi - lo > 1) { const m = Math.floor((lo + hi) / 2); if (await st(m) === 8) hi = m; else lo = m; }
  session.close();
  return hi;
}
const s0 = http2.connect(`http://127.0.0.1:${PORT}`).on('error', () => {});
const up = await call(s0, KEY, 'RepositoryModelLoad', uploadMsg(SEQ_MODEL, FILES));
s0.close();
if (up.status !== 0) throw new Error(`uploading ${SEQ_MODEL}: ${JSON.stringify(up)}`);
const [li, l64, lb, ll] = await Promise.all([least(sized, 1, 8192), least(sizedInt64, 1, 8192), least(sizedBool, 1, 16384),
  least(padded, REQUEST_MEMORY / 2, REQUEST_MEMORY + 4096)]);
const LIM = { infer: li, int64: l64, bool: lb, load: ll };
console.log(`fuzz_grpc: request-memory ${REQUEST_MEMORY} refuses ModelInfer from ${LIM.infer} rows of k and v (typed INT64 ${LIM.int64}, BOOL ${LIM.bool}), RepositoryModelLoad from ${LIM.load} bytes`);
let batches = 0, cases = 0;
if (env.ATTND_FUZZ_ONLY) { // replay one case: its place, as a finding prints it
  const place = Number(env.ATTND_FUZZ_ONLY);
  rnd = mulberry32((SEED ^ Math.imul(place + 1, 0x9e3779b1)) >>> 0);
  if (rnd() < CALL_SHARE) { // a call-level case: its calls
    for (const k of buildCallCase(rnd, `${SEED}.${place}`, Math.floor((place % 20) / 5), FILES, LIM).calls)
      console.log(`${k.rpc} (${k.what}; expects ${k.expect.join(' or ')}) metadata ${JSON.stringify(k.headers || {}).slice(0, 200)}: ${k.msg.length} bytes ${k.msg.subarray(0, 200).toString('hex')}`);
  } else for (let c = buildCase(), b = Buffer.concat(c.chunks), at = PREFACE.length; at + 9 <= b.length; at += 9 + b.readUIntBE(at, 3))
    console.log(`frame type ${b[at + 3]} flags ${b[at + 4]} stream ${b.readUInt32BE(at + 5)} length ${b.readUIntBE(at, 3)}: ${b.subarray(at + 9, at + 9 + Math.min(60, b.readUIntBE(at, 3))).toString('latin1').replace(/[^ -~]/g, '.')} ${b[at + 3] === 1 ? b.subarray(at + 9, at + 9 + b.readUIntBE(at, 3)).toString('hex') : ''}`);
  await runCase(Number(env.ATTND_FUZZ_ONLY));
  console.log(d.log().slice(-3000));
  batches = N;
}
for (; batches < N && Date.now() < UNTIL; batches++) {
  await Promise.all(Array.from({ length: 4 }, async (_, c) => { for (let k = 0; k < 5; k++, cases++) await runCase(batches * 20 + c * 5 + k); }));
  const bad = await knownGood();
  const live = await fetch(`${d.url}/v2/health/live`).then((r) => r.status, (e) => String(e));
  if (bad || live !== 200) {
    findings.push(`batch ${batches}: known-good call: ${bad || 'ok'}; /v2/health/live: ${live}`);
    console.log(`FINDING batch ${batches}: ${bad} / live ${live}\n${d.log().slice(-3000)}`);
    break;
  }
  if (batches % 100 === 0) console.log(`batch ${batches}, ${cases} cases, ${findings.length} findings`);
}
// every reservation given back once the connections are gone
let used = -1;
for (let k = 0; k < 100 && used !== 0; k++) {
  const m = await fetch(`${d.url}/metrics`, { headers: auth }).then((r) => r.text(), () => '');
  used = m ? requestsUsed(m) : NaN; // (the connections' own aside)
  if (used !== 0) await new Promise((r) => setTimeout(r, 100));
}
if (used !== 0) findings.push(`memory-budget in use after the last case: ${used} bytes`);
let r;
try { r = await d.stop('SIGTERM'); } catch (e) { findings.push(`stop: ${sanitizerReport(d.log()) || e.message.slice(0, 4000)}`); }
if (r && r.code !== 0) findings.push(`exit ${JSON.stringify(r)}`);
console.log(`fuzz_grpc: seed ${SEED}, ${batches} batches, ${cases} cases (${seen.cases.ok} keeping the protocol, ${seen.cases.calls} call-level; ${seen.probes} good calls on a case's connection; their bytes' digest ${createHash('sha1').update(sent.join('')).digest('hex').slice(0, 12)}: the same for the same seed and batches), GOAWAY codes ${JSON.stringify(seen.goaway)}, ${findings.length} findings${findings.length ? ':\n' + findings.join('\n') : ''}`);
if (env.ATTND_FUZZ_STATS) console.log(`call-level statuses: ${JSON.stringify(statuses, null, 1)}`);
process.exit(findings.length ? 1 : 0);
