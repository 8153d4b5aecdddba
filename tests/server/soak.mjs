// soak.mjs - make soak (CI: make soak-ci): mixed traffic against one attnd for
// SOAK_SECONDS (default 300), sampling its RSS and open fds every
// SOAK_SAMPLE_MS (2000). Traffic: small and large infers (JSON and binary),
// retains with map reads (a 4 MiB store, so it fills early), uploads and
// unloads, bad requests, slow clients (cut by --header-timeout) and clients
// that vanish mid-body; sequences on the `gqa` model (seq_helper.mjs): a
// start, 1-token and several-token steps (REST JSON, REST binary, gRPC),
// steps sent again at their sequence_position or further back (rewinds),
// steps whose client vanishes with half the body sent or right after the
// whole of it, or gives up after a few ms (each sent again at its position,
// which README says is right either way), gRPC steps with a 1-3 ms
// grpc-timeout (DEADLINE_EXCEEDED changes nothing: the next step that
// appends goes without sequence_position), then an end, a DELETE, an
// abandon (it must expire: --sequence-idle-ms SOAK_SEQ_IDLE_MS, 4000) or
// an end followed by a step to the ended sequence (must be 400 or 409);
// races (README, Sequences, "Races"): a DELETE (sometimes two) against a
// step of its sequence in flight, and a reload (or an unload and a load)
// of gqar, a copy of gqa only that race uses, against steps of its
// sequences and a start, each step's answer and the sequence's end
// (GET, a further step: how it went, at how many tokens) checked;
// retained sequences stepped slowly while a page-like follower long-polls
// their map (?wait=N, sometimes &version=V, then a pooled /attention),
// some followers leaving mid-wait; gRPC calls (soak_grpc.mjs: ModelInfer,
// checked against the seed's answer; calls cancelled with RST_STREAM
// mid-call; connections destroyed mid-message; ModelStreamInfer streams,
// some cancelled; short grpc-timeouts). SOAK_SEED (printed) seeds the
// choices.
// Passes when: no answer is a 5xx other than 503 (and no connection of a
// well-formed request fails; over gRPC: no INTERNAL, UNKNOWN or DATA_LOSS,
// no call without a status), every answered step's sequence_length is the
// one the client expects (and a quarter of the steps' y match a stateless
// causal request over the client's history within 1e-4), the daemon exits
// 0 without a sanitizer report (run it on build/address+undefined/attnd: make
// SANITIZER=address+undefined soak), every sequence the soak left running is listed
// by GET /v2/sequences at its expected length (or went idle: its last step
// sent sequence-idle-ms before the list, GET /v2/sequences/{id} saying so)
// and nothing else is but abandoned ones, which are gone within
// SOAK_SEQ_IDLE_MS + a sweep once the soak deleted its own, and
// attnd_memory_budget_used_bytes is back to 0 once the traffic stopped
// (gqa's and gqar's K/V and live sequences too), started = ended +
// dropped for both models, the "deleted" and "unloaded" drops are those
// the soak saw (and every count of gqar's is); open
// fds once the traffic stopped equal those before it (+- SOAK_FD_TOL, 4;
// taken again for up to SOAK_FD_SETTLE_MS, 5000, while they do not),
// and RSS is flat: the largest sample of the last quarter is at most the
// largest of the first quarter (after warm-up) times 1 + SOAK_RSS_PCT/100
// (10) plus SOAK_RSS_MB (16) MiB. Prints the samples and a summary.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { cpSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REFS, ROOT, SLOW, binaryRequest, f32bytes, fp32, maxDiff, mulberry32, parseBinary, requestsUsed, sanitizerReport, start } from './helper.mjs';
import { D as SD, gqaModels, tokens } from './seq_helper.mjs';
import { ld, packedI64, str } from '../grpc/wire.mjs';
import { INFER, grpcCall, grpcSoak, pbAnswer, pbParam } from './soak_grpc.mjs';

const SECONDS = Number(process.env.SOAK_SECONDS || 300);
const SAMPLE_MS = Number(process.env.SOAK_SAMPLE_MS || 2000);
const FD_TOL = Number(process.env.SOAK_FD_TOL || 4);
const FD_SETTLE_MS = Number(process.env.SOAK_FD_SETTLE_MS || 5000);
const RSS_PCT = Number(process.env.SOAK_RSS_PCT || 10);
const RSS_MB = Number(process.env.SOAK_RSS_MB || 16);
const IDLE_MS = Number(process.env.SOAK_SEQ_IDLE_MS || 4000);
const SEED = Number(process.env.SOAK_SEED || Date.now() % 2 ** 31);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rnd = mulberry32(SEED);
const pick = (n) => Math.floor(rnd() * n);
const chance = (p) => rnd() < p;

// Every client here is 127.0.0.1 (undici's pool grows with the load):
// --max-connections-per-ip 0, as behind a proxy. SOAK_ARGS adds flags. The
// models folder: the fixtures, demo and gqa (seq_helper.mjs), and RM, a
// copy of gqa that only the reload race uses (reloading gqa would drop
// every other client's sequences).
const dir = gqaModels();
const RM = 'gqar';
cpSync(join(dir, 'gqa'), join(dir, RM), { recursive: true });
const d = await start({ dir, grpc: true, args: ['--header-timeout', '5', '--min-body-rate', '1000', '--batch-delay-us', '500',
  '--maps-bytes', '4194304', '--max-connections-per-ip', '0', '--sequence-idle-ms', String(IDLE_MS),
  ...(process.env.SOAK_ARGS || '').split(' ').filter(Boolean)] });
const pid = d.proc.pid;
const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
const fds = () => readdirSync(`/proc/${pid}/fd`).length;

const status = new Map();
const kinds = new Map();
const failures = [];
function note(kind) { kinds.set(kind, (kinds.get(kind) || 0) + 1); }
function count(kind, st, deadline = false) { // deadline: the client asked for a short one, 504 is its answer
  status.set(st, (status.get(st) || 0) + 1);
  note(kind);
  if (st >= 500 && st !== 503 && !(deadline && st === 504)) failures.push(`${kind}: ${st}`);
}
async function req(kind, path, init = {}) {
  try {
    const r = await fetch(d.url + path, { ...init, signal: AbortSignal.timeout(30000 * SLOW) });
    const body = Buffer.from(await r.arrayBuffer());
    count(kind, r.status);
    return { status: r.status, body };
  } catch (e) {
    count(kind, 0);
    failures.push(`${kind}: ${e.cause?.code || e.message} at ${new Date().toISOString()}`);
    return { status: 0, body: Buffer.alloc(0) };
  }
}
const json = (o) => ({ method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(o) });

const X = REFS.causal;
const tinyDir = join(ROOT, 'tests', 'server', 'fixtures', 'models', 'tiny');
const upload = JSON.stringify({ parameters: {
  config: readFileSync(join(tinyDir, 'config.json'), 'utf8'),
  'file:model.safetensors': readFileSync(join(tinyDir, 'model.safetensors')).toString('base64'),
} });
const T = 256;
const bigX = f32bytes(Array.from({ length: T * 64 }, (_, i) => Math.sin(i) * 0.5));
const bigReq = binaryRequest({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, 64], parameters: { binary_data_size: bigX.length } }],
  outputs: [{ name: 'y', parameters: { binary_data: true } }, { name: 'attention', parameters: { binary_data: true } }] }, [bigX]);
const sdpa = (n) => ({ inputs: [fp32('q', [n, 4], Array(n * 4).fill(0.5)), fp32('k', [n, 4], Array(n * 4).fill(0.25)), fp32('v', [n, 4], Array(n * 4).fill(1))] });

// ---- sequences on gqa (d_model SD = 16) ----------------------------------
// A sequence as the soak holds it: its id, the length it expects and the
// rows it sent (the history a stateless request checks a step's y against).
const seqLive = new Map(); // id -> sequence the soak believes live
const seqLeft = new Map(); // id -> length: abandoned, left to expire
let seqN = 0, ySeen = 0, yWorst = 0;
const fail = (what) => failures.push(`${what} at ${new Date().toISOString()}`);

/** The step's request: all three parameters as tritonclient sends them,
 * sequence_position on every step (0 or absent on a start). */
function stepParams(s, pos, o) {
  const p = { sequence_id: s.id, sequence_start: !!o.start, sequence_end: !!o.end };
  if ((!o.start || s.n % 2) && !o.noPos) p.sequence_position = pos;
  if (o.retain) p.retain = true;
  return p;
}
function stepJson(s, pos, xs, o) {
  return JSON.stringify({ inputs: [fp32('x', [1, xs.length / SD, SD], xs)], outputs: [{ name: 'y' }], parameters: stepParams(s, pos, o) });
}
const stepHeaders = (s) => ({ 'Content-Type': 'application/json', ...(s.header ? { 'Attnd-Sequence-Id': String(s.id) } : {}) });

// gRPC (soak_grpc.mjs): sequence steps over it use its calls and sessions,
// its clients are a traffic kind of their own.
const { grpcCount, grpcSession, grpcClient, close: grpcClose } = grpcSoak({ d, count, note, fail, pick, chance, sleep });
let seqSession = null;

/**
 * send(s, pos, xs, o, how): one step of s at pos with rows xs, over 'json',
 * 'binary', 'grpc' or 'grpcshort' (a 1-3 ms grpc-timeout; REST's status
 * either way), or 'vanish' (the whole
 * body, then the socket destroyed at once), 'half' (half the body, then
 * destroyed) or 'short' (a client deadline of a few ms): -1 when the
 * client went first. {status, len, y, message}.
 */
async function send(s, pos, xs, o, how) {
  const kind = `seq ${how}`;
  s.maxSent = Math.max(s.maxSent || 0, pos + xs.length / SD);
  s.sentAt = Date.now();
  if (how === 'vanish' || how === 'half') {
    const body = Buffer.from(stepJson(s, pos, xs, o));
    await new Promise((res) => {
      const c = connect(d.port, '127.0.0.1');
      c.on('error', () => {});
      c.on('close', res);
      c.on('connect', () => {
        c.write(`POST /v2/models/${s.model}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
        c.write(how === 'half' ? body.subarray(0, body.length >> 1) : body, () => setTimeout(() => c.destroy(), how === 'half' ? 20 : pick(3)));
      });
    });
    note(kind);
    return { status: -1 };
  }
  if (how === 'grpc' || how === 'grpcshort') {
    const p = stepParams(s, pos, o);
    const msg = Buffer.concat([str(1, s.model), ...Object.entries(p).map(([k, v]) => pbParam(k, v)),
      ld(5, Buffer.concat([str(1, 'x'), str(2, 'FP32'), packedI64(3, [1, xs.length / SD, SD])])),
      ld(6, str(1, 'y')), ld(7, f32bytes(xs))]);
    seqSession = grpcSession(seqSession);
    const r = await grpcCall(seqSession, INFER, [msg],
      { timeout: how === 'grpc' ? `${30 * SLOW}S` : `${1 + pick(3)}m` });
    const st = grpcCount(kind, r, { deadline: how === 'grpcshort' });
    if (st !== 200) return { status: st, message: r.message };
    const a = pbAnswer(r.msgs[0]);
    return { status: 200, len: a.params.sequence_length, y: a.raw && Array.from(new Float32Array(a.raw.buffer.slice(a.raw.byteOffset, a.raw.byteOffset + a.raw.length))) };
  }
  const init = how === 'binary'
    ? (() => {
      const b = binaryRequest({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, xs.length / SD, SD], parameters: { binary_data_size: xs.length * 4 } }],
        outputs: [{ name: 'y', parameters: { binary_data: true } }], parameters: stepParams(s, pos, o) }, [f32bytes(xs)]);
      return { body: b.body, headers: { 'Inference-Header-Content-Length': String(b.headerLen), ...(s.header ? { 'Attnd-Sequence-Id': String(s.id) } : {}) } };
    })()
    : { body: stepJson(s, pos, xs, o), headers: stepHeaders(s) };
  try {
    const r = await fetch(`${d.url}/v2/models/${s.model}/infer`, { method: 'POST', ...init,
      signal: AbortSignal.timeout(how === 'short' ? 1 + pick(8) : 30000 * SLOW) });
    const buf = Buffer.from(await r.arrayBuffer());
    count(kind, r.status);
    if (r.status !== 200) return { status: r.status, message: buf.toString().slice(0, 300) };
    const hl = r.headers.get('inference-header-content-length');
    if (hl) {
      const { head, raw } = parseBinary(buf, Number(hl));
      return { status: 200, len: head.parameters.sequence_length, y: raw.y };
    }
    const j = JSON.parse(buf);
    return { status: 200, len: j.parameters.sequence_length, y: j.outputs.find((x) => x.name === 'y').data, mapId: j.parameters.map_id };
  } catch (e) {
    if (how === 'short' && e.name === 'TimeoutError') { note('seq short gave up'); return { status: -1 }; }
    count(kind, 0);
    fail(`${kind}: ${e.cause?.code || e.message}`);
    return { status: 0 };
  }
}

/** A stateless causal request over rows: the y a step's rows must match. */
async function checkY(s, pos, t, y) {
  const n = s.hist.length / SD;
  const r = await req('seq reference', `/v2/models/${s.model}/infer`, json({ inputs: [fp32('x', [1, n, SD], s.hist)], parameters: { causal: true } }));
  if (r.status !== 200) return;
  const ref = JSON.parse(r.body).outputs[0].data.slice(pos * SD, (pos + t) * SD);
  const diff = maxDiff(y, ref);
  ySeen++;
  yWorst = Math.max(yWorst, diff);
  if (!(diff <= 1e-4)) fail(`sequence '${s.id}' step at ${pos} (+${t}): y differs from a stateless request over its ${n} tokens by ${diff}`);
}

/**
 * step(s, pos, t, o, how): send a step and settle what the soak knows of s.
 * A step whose client went (vanish, short) is sent again, whole, at its
 * position: right whether or not it was carried out (README, "Sending a
 * step again"); half a body changes nothing, so the sequence stays as it
 * was. A 503 or 504 changes nothing either: sent again after a moment, up
 * to 5 times; but a step its gRPC deadline cut (504) is left, and the
 * next step that appends goes without sequence_position, so that a step
 * the deadline did not undo shows as a wrong length. Returns true while s
 * lives (false: ended, or given up).
 */
async function step(s, pos, t, o = {}, how = 'json') {
  const xs = tokens(t, SEED + ++s.k * 7919 + s.n);
  if (s.noPos && pos === s.len && (how === 'json' || how === 'binary')) o = { ...o, noPos: true };
  if (how !== 'grpcshort') s.noPos = false;
  let r = await send(s, pos, xs, o, how);
  if (how === 'half') return true;
  if (how === 'grpcshort' && r.status === 504) { s.noPos = true; note('seq deadline: left as it was'); return true; }
  o = { ...o, noPos: false };
  for (let tries = 0; r.status === -1 || ((r.status === 503 || r.status === 504) && tries < 5); tries++) {
    await sleep(r.status === -1 ? 20 : 200);
    r = await send(s, pos, xs, o, chance(0.5) ? 'json' : 'binary');
    // an end sent again after the first was carried out: it was done
    if (r.status === -1 || !o.end || !(r.status === 400 || r.status === 409) || !/ended/.test(r.message)) continue;
    note('seq end already carried out');
    seen(s).ended++;
    return drop(s);
  }
  if (r.status !== 200) {
    if (r.status) fail(`sequence '${s.id}' step at ${pos} (+${t}${o.start ? ', start' : ''}${o.end ? ', end' : ''}, ${how}): ${r.status} ${r.message || ''}`);
    if (!o.start || seqLive.has(String(s.id))) await del(s);
    return drop(s);
  }
  if (r.len !== pos + t) fail(`sequence '${s.id}' step at ${pos} (+${t}, ${how}): sequence_length ${r.len}, expected ${pos + t}`);
  s.len = pos + t;
  s.hist = [...s.hist.slice(0, pos * SD), ...xs];
  s.last = { pos, t };
  s.at = s.sentAt; // the server saw it no earlier: idle for less than now - s.at
  if (r.mapId) s.mapId = r.mapId;
  if (o.start) seen(s).started++;
  if (o.end) { seen(s).ended++; return drop(s); }
  seqLive.set(String(s.id), s);
  if (r.y && chance(0.25)) await checkY(s, pos, t, r.y);
  return true;
}
function drop(s) { seqLive.delete(String(s.id)); s.gone = true; return false; }

/** A new sequence's record: numbers and strings as ids, sometimes also
 * in the Attnd-Sequence-Id header; on gqa unless told. */
function newSeq(model = 'gqa') {
  const n = ++seqN;
  return { n, id: n % 3 ? `soak-${SEED}-${n}` : SEED * 1000 + n, model, len: 0, hist: [], k: 0, header: chance(0.2) };
}

/** What the soak saw happen to its sequences, per model, to hold
 * attnd_sequences_*_total to at the end: starts and ends answered 200,
 * drops it knows the reason of (a DELETE answered 200 is one "deleted"
 * drop, but for a racing end step carried out first: see seqdelete). */
const SEEN = new Map();
const seen = (s) => {
  if (!SEEN.has(s.model)) SEEN.set(s.model, { started: 0, ended: 0, deleted: 0, unloaded: 0 });
  return SEEN.get(s.model);
};
async function del(s, kind = 'seq delete') {
  const x = await req(kind, `/v2/sequences/${encodeURIComponent(s.id)}`, { method: 'DELETE' });
  if (x.status === 200) seen(s).deleted++;
  return x;
}

/** Steps: mostly one token, sometimes several; sometimes over gRPC or the
 * binary framing, sent again (at the last step's position or further
 * back), with a vanishing client or a short client deadline. */
async function stepSome(s, steps, o = {}) {
  for (let k = 0; k < steps && !s.gone && Date.now() < end; k++) {
    const t = chance(0.8) ? 1 : 2 + pick(6), r = rnd();
    if (r < 0.1) await step(s, s.last.pos, chance(0.5) ? s.last.t : t, o, 'json'); // the last step again
    else if (r < 0.15 && s.len > 1) await step(s, 1 + pick(s.len - 1), t, o, 'json'); // back further
    else if (r < 0.2) await step(s, s.len, t, o, 'vanish');
    else if (r < 0.25) await step(s, s.len, t, o, 'half');
    else if (r < 0.3) await step(s, s.len, t, o, 'short');
    else if (r < 0.37) await step(s, s.len, t, o, 'grpc');
    else if (r < 0.42) await step(s, s.len, t, o, 'grpcshort');
    else await step(s, s.len, t, o, chance(0.7) ? 'json' : 'binary');
    if (o.gap) await sleep(o.gap());
  }
}

/** How a sequence ends: a step with sequence_end, a DELETE, abandoned (it
 * must expire), or ended and then stepped again (must be 400 or 409). */
async function finish(s) {
  if (s.gone || Date.now() >= end) return; // at the end: left live, accounted for
  const r = rnd();
  if (r < 0.25) { await step(s, s.len, 1, { end: true }, ['json', 'binary', 'vanish', 'short'][pick(4)]); return; }
  if (r < 0.5) {
    const x = await del(s);
    if (x.status !== 200) fail(`DELETE of live sequence '${s.id}': ${x.status}`);
    drop(s);
    return;
  }
  if (r < 0.75) { seqLeft.set(String(s.id), s.len); drop(s); note('seq abandoned'); return; }
  await step(s, s.len, 1, { end: true }, 'json');
  if (!s.gone) return;
  const pos = chance(0.5) ? s.len : s.last.pos;
  const x = await req('seq step after end', `/v2/models/${s.model}/infer`,
    { method: 'POST', headers: stepHeaders(s), body: stepJson(s, pos, tokens(1, s.n), {}) });
  if (x.status !== 400 && x.status !== 409) fail(`a step to ended sequence '${s.id}' at ${pos}: ${x.status}, expected 400 or 409`);
}

// ---- races: a DELETE, and a reload, against steps in flight -------------
// README, "Sequences", Races: what a client may see. Every outcome is
// tallied in RACES (printed in the summary).
const RACES = { del: 0, delRan: 0, delBefore: 0, delEnded: 0, delEnded404: 0, del503: 0,
  reload: 0, unload: 0, relRan: 0, relBefore: 0, relAway: 0, freshOld: 0, freshNew: 0, freshAway: 0 };
const stepHow = () => ['json', 'binary', 'grpc'][pick(3)];
const UNLOADED = 'its model reloaded or unloaded';
const ENDED = 'a step with sequence_end was answered';

/** After a race: s is gone, remembered at n tokens for why (a drop's
 * reason as the daemon words it, or ENDED): GET /v2/sequences/{id} is 404
 * and a further step at n is 400, both saying so. */
async function goneAs(s, n, why, what) {
  const at = new RegExp(`at ${n} tokens?: ${why}`); // '1 token' since 4ed44c1
  const g = await req('seq race get', `/v2/sequences/${encodeURIComponent(s.id)}`);
  if (g.status !== 404 || !at.test(g.body)) fail(`${what}: GET /v2/sequences/${s.id}: ${g.status} ${g.body.toString().slice(0, 200)}, expected 404 '... at ${n} tokens: ${why}'`);
  const x = await send(s, n, tokens(1, s.n), {}, stepHow());
  if (x.status !== 400 || !at.test(x.message)) fail(`${what}: a further step at ${n}: ${x.status} ${x.message}, expected 400 '... at ${n} tokens: ${why}'`);
  drop(s);
}

/**
 * A DELETE racing a step of its sequence: a sequence of a few steps,
 * then a step (t tokens at its length, sometimes further back, a quarter
 * of them with sequence_end) and a DELETE sent 0-3 ms apart, either
 * first. The DELETE is 200, or 404 once an end step was carried out; the
 * step 200 at pos + t (it ran before the DELETE came, or while it came),
 * 400 saying "deleted" (it came to its sequence after the DELETE) or 503
 * (it changed nothing). Then the sequence is gone at pos + t tokens if
 * the step was carried out, else at the length before: "deleted", or
 * "ended" when the step that was carried out had sequence_end (a DELETE
 * that came while it ran is then 200 and changes nothing).
 */
async function deleteRace() {
  const s = newSeq();
  if (!await step(s, 0, 1 + pick(8), { start: true }, 'json')) return;
  for (let k = pick(3); k > 0 && !s.gone; k--) await step(s, s.len, 1 + pick(3), {}, stepHow());
  if (s.gone || Date.now() >= end) return;
  const L = s.len, t = 1 + pick(8), pos = chance(0.3) && L > 1 ? 1 + pick(L - 1) : L, endIt = chance(0.25);
  const xs = tokens(t, SEED + ++s.k * 7919 + s.n), lead = pick(6) - 2; // ms the DELETE follows the step (< 0: precedes)
  const deleting = (ms) => (async () => { await sleep(ms); return req('seq race delete', `/v2/sequences/${encodeURIComponent(s.id)}`, { method: 'DELETE' }); })();
  const [r, x, x2] = await Promise.all([
    (async () => { if (lead < 0) await sleep(-lead); return send(s, pos, xs, { end: endIt }, stepHow()); })(),
    deleting(Math.max(0, lead)),
    chance(0.3) ? deleting(Math.max(0, lead) + pick(3)) : { status: 404 }, // a second DELETE: 404 (gone, or being dropped)
  ]);
  const what = `DELETE racing a step at ${pos} (+${t}${endIt ? ', end' : ''}) of '${s.id}' (${L} tokens)`;
  const ran = r.status === 200, ended = ran && endIt, oks = [x, x2].filter((y) => y.status === 200).length;
  if (ran && r.len !== pos + t) fail(`${what}: sequence_length ${r.len}, expected ${pos + t}`);
  if (!ran && !(r.status === 400 && /deleted/.test(r.message)) && r.status !== 503) fail(`${what}: the step ${r.status} ${r.message}`);
  if ([x, x2].some((y) => y.status !== 200 && y.status !== 404) || oks > 1 || (oks === 0 && !ended)) fail(`${what}: the DELETEs ${x.status} ${x.body}, ${x2.status} ${x2.body || ''}`);
  RACES.del++;
  RACES[ended ? (oks ? 'delEnded' : 'delEnded404') : ran ? 'delRan' : r.status === 503 ? 'del503' : 'delBefore']++;
  if (ended) seen(s).ended++;
  else seen(s).deleted++;
  if (ran) {
    s.hist = [...s.hist.slice(0, pos * SD), ...xs];
    if (r.y && chance(0.25)) await checkY(s, pos, t, r.y);
  }
  await goneAs(s, ran ? pos + t : L, ended ? ENDED : 'deleted', what);
}

/** Is r the answer of a request that came while RM was unloaded (404) or
 * loading again (503)? */
const away = (r) => (r.status === 404 && /not loaded/.test(r.message)) || (r.status === 503 && /still loading/.test(r.message));

/**
 * A model reloaded (or unloaded, then loaded) while steps of its
 * sequences are in flight, on RM, which no other client uses (so every
 * count of its sequences is known): 2-6 sequences started and stepped a
 * little; then each sends a step (at its length, sometimes further
 * back), sometimes a new sequence its start, and the model is reloaded,
 * all 0-3 ms apart. A step is 200 at pos + t (it ran on the old weights
 * before the reload, or while it came), 400 saying "its model reloaded or
 * unloaded" (it came to its sequence after), 503 (it changed nothing),
 * or, with an unload, 404 "not loaded" or 503 "still loading" (it came
 * while there was no model); every such sequence is then gone,
 * "unloaded", at pos + t tokens or at its length before. The new start
 * is 200 (or 404 / 503 so), and a further step says whether it began on
 * the old weights (400: gone, "unloaded", at its tokens) or the new
 * (200). Some gone sequences begin again (sequence_start); every live one
 * then ends or is deleted.
 */
async function reloadRace() {
  const ss = Array.from({ length: 2 + pick(5) }, () => newSeq(RM));
  await Promise.all(ss.map(async (s) => {
    if (!await step(s, 0, 1 + pick(8), { start: true }, stepHow())) return;
    for (let k = pick(3); k > 0 && !s.gone; k--) await step(s, s.len, 1 + pick(3), {}, stepHow());
  }));
  const live = ss.filter((s) => !s.gone), unload = chance(0.4), fresh = chance(0.5) ? newSeq(RM) : null;
  const racing = live.map(async (s) => {
    const L = s.len, t = 1 + pick(8), pos = chance(0.3) && L > 1 ? 1 + pick(L - 1) : L;
    const xs = tokens(t, SEED + ++s.k * 7919 + s.n);
    await sleep(pick(4));
    return { s, L, t, pos, xs, r: await send(s, pos, xs, {}, stepHow()) };
  });
  const starting = fresh && (async () => {
    const t = 1 + pick(8), xs = tokens(t, SEED + ++fresh.k * 7919 + fresh.n);
    await sleep(pick(4));
    return { t, xs, r: await send(fresh, 0, xs, { start: true }, stepHow()) };
  })();
  const reloading = (async () => {
    await sleep(pick(4));
    if (unload) {
      const u = await req('seq race unload', `/v2/repository/models/${RM}/unload`, { method: 'POST' });
      if (u.status !== 200) fail(`unload of ${RM} mid-sequence: ${u.status} ${u.body}`);
      await sleep(pick(3));
    }
    const l = await req('seq race load', `/v2/repository/models/${RM}/load`, { method: 'POST' });
    if (l.status !== 200) fail(`load of ${RM} mid-sequence: ${l.status} ${l.body}`);
    // its sequences are gone, or being dropped behind a running step: a
    // DELETE now is 404 (one used to be 200 then, and dropped nothing)
    if (live.length && chance(0.5)) {
      const s = live[pick(live.length)], x = await req('seq race delete', `/v2/sequences/${encodeURIComponent(s.id)}`, { method: 'DELETE' });
      if (x.status !== 404 || !x.body.includes(UNLOADED)) fail(`DELETE of '${s.id}' once ${RM} was ${unload ? 'unloaded and loaded' : 'reloaded'}: ${x.status} ${x.body}`);
    }
  })();
  const raced = await Promise.all(racing), f = fresh && await starting;
  await reloading;
  RACES[unload ? 'unload' : 'reload']++;
  const how = unload ? 'unload and load' : 'reload';
  for (const { s, L, t, pos, xs, r } of raced) {
    const what = `${how} of ${RM} racing a step at ${pos} (+${t}) of '${s.id}' (${L} tokens)`;
    const ran = r.status === 200, gap = unload && away(r);
    if (ran && r.len !== pos + t) fail(`${what}: sequence_length ${r.len}, expected ${pos + t}`);
    if (!ran && !gap && !(r.status === 400 && r.message.includes(UNLOADED)) && r.status !== 503) fail(`${what}: ${r.status} ${r.message}`);
    if (ran) s.hist = [...s.hist.slice(0, pos * SD), ...xs];
    RACES[ran ? 'relRan' : gap ? 'relAway' : 'relBefore']++;
    seen(s).unloaded++;
    await goneAs(s, ran ? pos + t : L, UNLOADED, what);
  }
  const back = [];
  if (f) {
    const what = `a start of '${fresh.id}' racing the ${how} of ${RM}`;
    if (f.r.status === 200) {
      if (f.r.len !== f.t) fail(`${what}: sequence_length ${f.r.len}, expected ${f.t}`);
      seen(fresh).started++;
      Object.assign(fresh, { len: f.t, hist: f.xs, last: { pos: 0, t: f.t }, at: Date.now() });
      const xs = tokens(1, SEED + ++fresh.k * 7919 + fresh.n), x = await send(fresh, f.t, xs, {}, stepHow());
      if (x.status === 200 && x.len === f.t + 1) {
        RACES.freshNew++;
        Object.assign(fresh, { len: f.t + 1, hist: [...f.xs, ...xs], last: { pos: f.t, t: 1 } });
        seqLive.set(String(fresh.id), fresh);
        back.push(fresh);
      } else if (x.status === 400 && new RegExp(`at ${f.t} tokens?: ${UNLOADED}`).test(x.message)) {
        RACES.freshOld++;
        seen(fresh).unloaded++;
        drop(fresh);
      } else {
        fail(`${what}: 200, then a step at ${f.t}: ${x.status} ${x.message || `sequence_length ${x.len}`}`);
      }
    } else if (!(unload && away(f.r)) && f.r.status !== 503) {
      fail(`${what}: ${f.r.status} ${f.r.message}`);
    } else {
      RACES.freshAway++;
    }
  }
  for (const { s } of raced) {
    if (!chance(0.3)) continue;
    Object.assign(s, { gone: false, len: 0, hist: [] }); // begun again on the new weights
    if (await step(s, 0, 1 + pick(8), { start: true }, stepHow())) back.push(s);
  }
  for (const s of back) {
    if (chance(0.5)) await step(s, s.len, 1, { end: true }, stepHow());
    else if ((await del(s)).status !== 200) fail(`DELETE of live sequence '${s.id}' of ${RM}: not 200`);
    else drop(s);
  }
}

/** A page following a retained sequence's map: one long poll at a time
 * (?wait=rows, or &version=V), the focused head pooled after each change;
 * sometimes it leaves mid-wait (its socket destroyed). */
async function follow(s, stop) {
  let rows = 0, version = -1;
  const leave = chance(0.25) ? Date.now() + pick(3000) : Infinity;
  while (!stop.done && Date.now() < leave) {
    if (!s.mapId) { await sleep(20); continue; }
    const q = version >= 0 && chance(0.3) ? `wait=${rows}&version=${version}` : `wait=${rows}`;
    const ac = new AbortController();
    const cut = leave < Infinity ? setTimeout(() => ac.abort(), Math.max(0, leave - Date.now())) : null;
    let r;
    try {
      r = await fetch(`${d.url}/v2/maps/${s.mapId}?${q}&timeout_ms=${300 + pick(1000)}`, { signal: ac.signal });
    } catch (e) {
      if (ac.signal.aborted) { note('map follower left mid-wait'); return; }
      count('map wait', 0);
      fail(`map wait: ${e.cause?.code || e.message}`);
      return;
    } finally { if (cut) clearTimeout(cut); }
    const body = await r.text();
    count('map wait', r.status);
    if (r.status === 404) return; // evicted (a 4 MiB store), or it could no longer grow
    if (r.status !== 200) { await sleep(100); continue; }
    const m = JSON.parse(body);
    if (m.shape[2] > s.maxSent) fail(`map ${s.mapId} of '${s.id}': ${m.shape[2]} rows, the sequence was sent at most ${s.maxSent}`);
    if (m.shape[2] !== rows || m.version !== version) await req('map render', `/v2/maps/${s.mapId}/attention?h=${pick(4)}&max=16`);
    rows = m.shape[2];
    version = m.version;
  }
}

const workers = {
  async small() { await req('small infer', '/v2/models/tiny/infer', json({ inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } })); },
  async large() {
    await req('large infer', '/v2/models/demo/infer', { method: 'POST', body: bigReq.body, headers: { 'Inference-Header-Content-Length': String(bigReq.headerLen) } });
  },
  async retain() {
    const r = await req('retain', '/v2/models/sdpa/infer', json({ ...sdpa(32), parameters: { retain: true } }));
    if (r.status !== 200) return;
    const id = JSON.parse(r.body).parameters.map_id;
    await req('map read', `/v2/maps/${id}/attention?h=0&max=16`);
    await req('map list', '/v2/maps');
  },
  async upload(i) {
    const name = `soak${i % 3}`;
    await req('upload', `/v2/repository/models/${name}/load`, { method: 'POST', body: upload });
    await req('infer uploaded', `/v2/models/${name}/infer`, json({ inputs: [fp32('x', X.shape, X.x)] }));
    await req('unload', `/v2/repository/models/${name}/unload`, { method: 'POST' });
    await req('index', '/v2/repository/index', { method: 'POST', body: '{}' });
  },
  async bad(i) {
    const cases = [
      ['bad json', '/v2/models/tiny/infer', { method: 'POST', body: '{"inputs": [' }],
      ['bad shape', '/v2/models/tiny/infer', json({ inputs: [fp32('x', [1, 2, 3], [1, 2, 3, 4, 5, 6])] })],
      ['no route', '/v2/nowhere', {}],
      ['body on GET route', '/v2/health/live', { method: 'POST', body: 'x' }],
      ['bad upload', '/v2/repository/models/.x/load', { method: 'POST', body: '{}' }],
      ['bad map query', '/v2/maps/m1-000000/attention?h=zz', {}],
      ['long path', '/v2/models/' + 'a'.repeat(3000), {}],
    ];
    const [k, p, init] = cases[i % cases.length];
    await req(k, p, init);
  },
  async slow() { // a head that never ends: cut by --header-timeout
    await new Promise((res) => {
      const s = connect(d.port, '127.0.0.1');
      s.on('error', () => {});
      s.on('connect', () => s.write('GET /v2/health/live HTTP/1.1\r\nX-Slow: '));
      const t = setInterval(() => s.write('a'), 500);
      s.on('close', () => { clearInterval(t); note('slow client cut'); res(); });
    });
  },
  async vanish() { // half a body, then gone
    await new Promise((res) => {
      const s = connect(d.port, '127.0.0.1');
      s.on('error', () => {});
      s.on('connect', () => {
        s.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"inputs":');
        setTimeout(() => { s.destroy(); note('vanished'); res(); }, 50);
      });
    });
  },
  async seq() { // one sequence, start to finish
    const s = newSeq();
    if (!await step(s, 0, 1 + pick(8), { start: true }, ['json', 'binary', 'grpc', 'vanish', 'short'][pick(5)])) return;
    await stepSome(s, 1 + pick(12));
    await finish(s);
  },
  async seqmap() { // a retained sequence stepped at a decoder's pace, a page following its map
    const s = newSeq(), stop = { done: false };
    if (!await step(s, 0, 1 + pick(8), { start: true, retain: true }, 'json')) return;
    const f = follow(s, stop);
    await stepSome(s, 3 + pick(10), { gap: () => 20 + pick(200) });
    stop.done = true;
    await f;
    await finish(s);
  },
  grpc: grpcClient,
  seqdelete: deleteRace,
  seqreload: reloadRace,
};

const fd0 = fds();
const samples = [];
const t0 = Date.now();
const end = t0 + SECONDS * 1000;
const sampler = setInterval(() => { samples.push({ t: (Date.now() - t0) / 1000, rss: rss(), fds: fds() }); }, SAMPLE_MS);
const loops = Object.entries({ small: 3, large: 1, retain: 2, upload: 1, bad: 1, slow: 2, vanish: 1, seq: 3, seqmap: 1, seqdelete: 1, seqreload: 1, grpc: 2 }).map(([name, n]) =>
  [name, Array.from({ length: n }, async (_, w) => {
    for (let i = w; Date.now() < end; i += n) await workers[name](i);
  })]);
await Promise.all(loops.filter(([name]) => name.startsWith('seq')).flatMap(([, l]) => l));

// ---- what the traffic left: sequences, memory ---------------------------
// As soon as the sequence clients stopped (the last slow clients take up
// to header-timeout more): every sequence the soak holds is listed at its
// length (or, sent its last step at least sequence-idle-ms ago, is gone
// for that), nothing else is but abandoned ones; once the soak deleted its
// own, the abandoned ones expire (idle past --sequence-idle-ms, a sweep
// every quarter of it) and memory-budget, K/V and live sequences go back
// to 0 once every client stopped.
seqSession?.close();
const listed = async () => JSON.parse((await req('seq list', '/v2/sequences')).body || '{"sequences":[]}').sequences;
const gauge = async (re) => Number(re.exec((await req('metrics', '/metrics')).body.toString())?.[1]);
const atEnd = { live: seqLive.size, abandoned: 0, expired: 0 };
const first = await listed(), listedAt = Date.now();
for (const x of first) {
  const s = seqLive.get(x.id), a = seqLeft.get(x.id);
  if (s && x.length !== s.len) fail(`sequence '${x.id}' at the end: length ${x.length}, the soak expects ${s.len}`);
  else if (!s && a === undefined) fail(`sequence '${x.id}' (length ${x.length}) at the end: the soak holds no such sequence`);
  else if (a !== undefined && x.length !== a) fail(`abandoned sequence '${x.id}': length ${x.length}, left at ${a}`);
  if (a !== undefined) atEnd.abandoned++;
}
const ids = new Set(first.map((x) => x.id));
for (const [id, s] of seqLive) {
  if (!ids.has(id)) {
    const g = await req('seq get', `/v2/sequences/${encodeURIComponent(id)}`);
    if (listedAt - s.at >= IDLE_MS && g.status === 404 && /idle/.test(g.body)) { atEnd.expired++; continue; }
    fail(`sequence '${id}' (length ${s.len}, last step sent ${listedAt - s.at} ms before the list) the soak holds is not listed at the end: ${g.status} ${g.body}`);
  }
  const x = await del(s);
  if (x.status !== 200 && ids.has(id)) fail(`DELETE of live sequence '${id}' at the end: ${x.status}`);
}
await Promise.all(loops.flatMap(([, l]) => l));
clearInterval(sampler);
grpcClose();
const expiry = Date.now() + IDLE_MS * 1.25 + 5000 * SLOW;
let stuck;
while ((stuck = await listed()).length && Date.now() < expiry) await sleep(250);
if (stuck.length) fail(`${stuck.length} sequences still listed ${IDLE_MS * 1.25 + 5000 * SLOW} ms after the traffic: ${JSON.stringify(stuck.slice(0, 5))}`);
let used, kv, liveSeqs, text;
const metric = (name, model, reason) => Number(new RegExp(`^${name}\\{model="${model}",version="1"${reason ? `,reason="${reason}"` : ''}\\} (\\d+)$`, 'm').exec(text)?.[1]);
const kvOf = (m) => `${metric('attnd_kv_bytes', m)}/${metric('attnd_sequences_live', m)}`;
for (let k = 0; k < 100; k++) {
  text = (await req('metrics', '/metrics')).body.toString();
  used = requestsUsed(text); // (the connections' own aside)
  kv = metric('attnd_kv_bytes', 'gqa') + metric('attnd_kv_bytes', RM);
  liveSeqs = metric('attnd_sequences_live', 'gqa') + metric('attnd_sequences_live', RM);
  if (!used && !kv && !liveSeqs) break;
  await sleep(100);
}
if (used !== 0) fail(`attnd_memory_budget_used_bytes ${used} once the traffic stopped`);
if (kv !== 0 || liveSeqs !== 0) fail(`attnd_kv_bytes/attnd_sequences_live: gqa ${kvOf('gqa')}, ${RM} ${kvOf(RM)} once every sequence went`);
// Every sequence went one way: started = ended + dropped (any reason) per
// model; the DELETEs answered 200 are the "deleted" drops, but for those
// that came while an end step ran (then it ended); no gqa sequence was
// unloaded; RM's counts are all the soak's (only the reload race used it).
const counts = {};
for (const m of ['gqa', RM]) {
  const c = counts[m] = { started: metric('attnd_sequences_started_total', m), ended: metric('attnd_sequences_ended_total', m) };
  for (const why of ['idle', 'deleted', 'unloaded', 'restarted']) c[why] = metric('attnd_sequences_dropped_total', m, why);
  const v = SEEN.get(m) || { started: 0, ended: 0, deleted: 0, unloaded: 0 };
  if (c.started !== c.ended + c.idle + c.deleted + c.unloaded + c.restarted) fail(`${m}: ${JSON.stringify(c)}: started is not ended + dropped`);
  if (c.deleted !== v.deleted || c.unloaded !== v.unloaded) fail(`${m}: ${JSON.stringify(c)}, the soak saw ${v.deleted} deleted, ${v.unloaded} unloaded`);
  if (m === RM && (c.started !== v.started || c.ended !== v.ended || c.idle || c.restarted)) fail(`${m}: ${JSON.stringify(c)}, the soak saw ${JSON.stringify(v)}`);
}
await sleep(8000); // the last slow clients are cut (header-timeout 5 s), keep-alives idle
// A connection attnd closed while its client could still send may keep its
// fd a little longer (a lingering close, up to --linger-ms): out of
// tolerance, the count is taken again every 250 ms for up to
// SOAK_FD_SETTLE_MS before it is judged.
let fd1 = fds();
for (const until = Date.now() + FD_SETTLE_MS; Math.abs(fd1 - fd0) > FD_TOL && Date.now() < until; fd1 = fds()) await sleep(250);
samples.push({ t: (Date.now() - t0) / 1000, rss: rss(), fds: fd1 });
// a sanitizer report fails the soak after its summary, the report itself
// shown (not attnd's whole log: a line per request)
let e, report = '';
try { e = await d.stop(); } catch (x) { report = sanitizerReport(d.log()) || x.message.slice(0, 8000); }
rmSync(dir, { recursive: true, force: true });

if (process.env.SOAK_LOG) writeFileSync(process.env.SOAK_LOG, d.log()); // attnd's whole log
const mb = (b) => (b / 1048576).toFixed(1);
console.log('t(s)   RSS(MiB)  fds');
for (const s of samples) console.log(`${s.t.toFixed(0).padStart(5)}  ${mb(s.rss).padStart(8)}  ${s.fds}`);
const q = Math.max(1, Math.floor(samples.length / 4));
const firstMax = Math.max(...samples.slice(0, q).map((s) => s.rss));
const lastMax = Math.max(...samples.slice(-q).map((s) => s.rss));
const limit = firstMax * (1 + RSS_PCT / 100) + RSS_MB * 1048576;
console.log(`soak: ${SECONDS} s, ${[...kinds.values()].reduce((a, b) => a + b, 0)} operations: ` +
  [...kinds].map(([k, n]) => `${k} ${n}`).join(', '));
console.log(`soak: ${seqN} sequences; at the end ${atEnd.live} live (listed at their lengths, then deleted; ${atEnd.expired} of them idle past sequence-idle-ms, gone), ${atEnd.abandoned} abandoned ones not yet expired (gone within ${IDLE_MS * 1.25} ms); ` +
  `${ySeen} steps' y checked against a stateless request (worst |diff| ${yWorst.toExponential(1)}); memory-budget used ${used}, gqa and ${RM} K/V ${kv}`);
console.log(`soak: races: ${RACES.del} DELETEs racing a step (the step carried out ${RACES.delRan}, an end step carried out ${RACES.delEnded} with the DELETE 200 and ${RACES.delEnded404} with it 404, ` +
  `the step after the DELETE ${RACES.delBefore}, 503 ${RACES.del503}); ${RACES.reload} reloads and ${RACES.unload} unloads + loads of ${RM} racing steps (carried out ${RACES.relRan}, ` +
  `after the drop ${RACES.relBefore}, while it was not loaded ${RACES.relAway}) and starts (on the old weights ${RACES.freshOld}, the new ${RACES.freshNew}, while not loaded ${RACES.freshAway}); ` +
  `counts ${JSON.stringify(counts)}`);
console.log(`soak: seed ${SEED}; statuses ${[...status].sort((a, b) => a[0] - b[0]).map(([k, n]) => `${k}:${n}`).join(' ')}`);
console.log(`soak: RSS first quarter max ${mb(firstMax)} MiB, last quarter max ${mb(lastMax)} MiB (limit ${mb(limit)}); fds before ${fd0}, after ${fd1} (tolerance ${FD_TOL})`);
if (failures.length) console.log(`soak: ${failures.length} failures; attnd's warnings:\n${d.log().split('\n').filter((l) => / (warn|error) /.test(l)).slice(-30).join('\n')}`);
if (report) console.log(`soak: attnd's sanitizer report:\n${report}`);
assert.ok(!report, "no sanitizer report (attnd's, above)");
assert.equal(e.code, 0, d.log().slice(-3000));
assert.deepEqual(failures.slice(0, 20), [], 'no 5xx but 503, no failed connection');
assert.ok(Math.abs(fd1 - fd0) <= FD_TOL, `fds: ${fd0} before, ${fd1} after`);
const cut = (re) => (d.log().match(re) || []).length;
console.log(`soak: attnd closed slow connections ${cut(/\(header-timeout\)/g)} times, slow bodies ${cut(/\(min-body-rate\)/g)} times`);
// A sanitizer's allocator (ASan's quarantine) holds freed memory on purpose:
// RSS says nothing there, fds and statuses still do.
if (SLOW > 1) console.log('soak: sanitized build: RSS not judged');
else assert.ok(lastMax <= limit, `RSS grew: ${mb(firstMax)} -> ${mb(lastMax)} MiB`);
console.log('soak: pass');
