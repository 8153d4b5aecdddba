// api.js - the daemon's own HTTP API, nothing else: model metadata,
// inference, retained maps. Every function throws an Error whose message
// is the daemon's {"error": ...} text (or the HTTP status) on failure,
// or says that the server did not answer at all (send).
//
// A "run" is what the page shows, whatever its source:
//   { source: 'model'|'sdpa'|'map', model, B, H, T, S,
//     tokens[T], keyTokens[S] (item b's when itemTokens[B][T] and
//     itemKeyTokens[B][S] say them), causal, tValid[B], sValid[B],
//     attention: Float32Array (B, H, T, S),
//     scores?: Float32Array (B, H, T, S)   scaled, before masks
//     q?: (B, H, T, dk)  k?: (B, Hkv, S, dk)  v?: (B, Hkv, S, dv)
//     headDim, vHeadDim, nKvHeads, mapId?, block?: [rows, cols] pooling,
//     meanPooled?: Float32Array (B, T, S) a pooled map's mean over heads,
//     scale?: what q was multiplied by (the model's; absent: 1/√d_k),
//     normOf?: a retained map's what=norm is of "v W_o" or "v" (its metadata's),
//     mask?: { planes, data: Uint8Array (planes, T, S) 1 = may attend },
//       planes 1 (shared), B (per item) or B*H (per item and head),
//     missing?: why scores / values are absent (retained maps) }

import { embed } from './embed.js';

// The daemon's API key (--api-key), when it has one: kept for this tab
// only (sessionStorage) and sent as a bearer token.
const KEY_ITEM = 'attnd.apiKey';
let apiKey = '';
try { apiKey = sessionStorage.getItem(KEY_ITEM) || ''; } catch (_) { /* storage off */ }

export function setApiKey(k) {
  apiKey = k;
  try { if (k) sessionStorage.setItem(KEY_ITEM, k); else sessionStorage.removeItem(KEY_ITEM); } catch (_) { /* */ }
}

// Behind several replicas (deploy/nginx.conf, the Kubernetes Ingress:
// README "Several replicas behind nginx", "Sequences across replicas") a
// retained map lives on the one that computed it. The proxies keep a
// client on one replica by its X-Attnd-Session header: the page sends one
// value, random and kept for this tab, with every request. (Random bytes
// by getRandomValues: randomUUID exists only on https and localhost.)
export const SESSION_HEADER = 'X-Attnd-Session';
const SESSION_ITEM = 'attnd.session';
const SESSION = (() => {
  let s = '';
  try { s = sessionStorage.getItem(SESSION_ITEM) || ''; } catch (_) { /* storage off */ }
  if (/^[0-9a-f]{32}$/.test(s)) return s;
  s = Array.from(crypto.getRandomValues(new Uint8Array(16)),
    (x) => x.toString(16).padStart(2, '0')).join('');
  try { sessionStorage.setItem(SESSION_ITEM, s); } catch (_) { /* */ }
  return s;
})();

// ROOT: the API's root, where the page was served from: the daemon serves
// it at / (its /web/index.html leads there), so "/"; "/session/" for the
// page at /session/ or /session (the Ingress's session door, which strips
// that prefix): every request goes through the door the page came in by,
// as index.html's relative web/... paths take the page's own files.
export const ROOT = ((p) => (p.endsWith('/') ? p : `${p}/`))(location.pathname);
export const url = (path) => `${ROOT}${path}`;

// The sequence (id) whose retained map each map id is, for the maps of
// the sequences this page steps: their fetches carry its Attnd-Sequence-Id
// (the proxies' route to the replica holding it).
const mapSeq = new Map();

function headers(h = {}) {
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  h[SESSION_HEADER] = SESSION;
  return h;
}

// sequenceOfMap: the sequence map id is known to belong to (this page's
// steps, or a link's seq=), or null. noteSequenceMap: a link says so (an
// id that is none is ignored: the server's rule, oip_sequence_id_valid,
// 1 to 128 bytes of printable ASCII other than space, '/', '"' and '\\',
// and not '.' or '..', which a path drops: the server refuses them).
export const sequenceOfMap = (id) => mapSeq.get(id) || null;
export function noteSequenceMap(id, seqId) {
  if (/^[!-~]{1,128}$/.test(seqId) && !/["/\\]/.test(seqId) && seqId !== '.' && seqId !== '..')
    mapSeq.set(id, seqId);
}

// mapHeaders: headers for a request about retained map id.
export function mapHeaders(id, h = {}) {
  if (mapSeq.has(id)) h[SEQ_HEADER] = mapSeq.get(id);
  return headers(h);
}

// send: fetch, with a request that got no answer at all (refused,
// reset, no network: fetch's bare "Failed to fetch") said as such, with
// status 0. An abort stays an AbortError.
export async function send(url, opts) {
  try {
    return await fetch(url, opts);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    const err = new Error(`no answer from the server (${e.message}): it stopped or restarted, ` +
      'or the network to it is down');
    err.status = 0;
    throw err;
  }
}

// readJSON: res's body as JSON; an answer that is not (a proxy's login
// or error page in the way) throws an error that says what came instead.
async function readJSON(res) {
  let text;
  try { text = await res.text(); } catch (e) {
    const n = Number(res.headers.get('Content-Length'));
    throw new Error(`the server's answer${n ? ` (${mb(n)})` : ''} could not be read whole (${e.message}): ` +
      'more than the browser holds as one string, or the connection broke');
  }
  try {
    return JSON.parse(text);
  } catch (_) {
    throw new Error(`${cameInstead(res, text)}; a proxy or login page in the way?`);
  }
}

// cameInstead: what res (its body text) is, said for an answer that is
// not attnd's JSON (or, wanted, not what was asked for): where it came
// from, its status and content type, and the start of its text with any
// HTML tags stripped (and what no one reads: comments, style sheets and
// scripts, with which a portal's page often begins).
export function cameInstead(res, text, wanted = 'JSON') {
  const type = res.headers.get('Content-Type') || 'no Content-Type';
  const start = text.replace(/<!--[\s\S]*?(-->|$)|<(style|script)\b[\s\S]*?(<\/\2\s*>|$)/gi, ' ')
    .replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 80);
  const where = res.url ? new URL(res.url).pathname : 'the server';
  return `${where}: the answer (HTTP ${res.status}, ${type}) is not ${wanted}${start ? `: “${start}”` : ''}`;
}

export const mb = (n) => (n < 1e6 ? `${Math.ceil(n / 1e3)} kB` : `${Math.round(n / 1e6)} MB`);

// fail: throw the daemon's error; err.status is the HTTP status (401 asks
// the page for a key). attnd answers every error as JSON {"error": ...}:
// one that is not (an nginx 502/503/504 page, text/html) came from a proxy
// between the page and attnd, and is said as such (cameInstead); a 400,
// 414 or 431 may also be libmicrohttpd's own HTML (README: a malformed
// request, a head past its memory). size
// (optional, the request's: too413) turns a 413 into what to do about it.
export async function fail(res, size) {
  let msg = `HTTP ${res.status}`;
  let text = null;
  try { text = await res.text(); } catch (_) { /* the connection broke: the status alone */ }
  if (text !== null) {
    let j, json = true;
    try { j = JSON.parse(text); } catch (_) { json = false; }
    if (j && j.error) msg = `${j.error} (HTTP ${res.status})`;
    else if (!json) msg = `${cameInstead(res, text)}; ` + ([400, 414, 431].includes(res.status)
      ? 'not attnd\'s own answer (its errors are JSON): a proxy between this page and attnd, or the ' +
        'HTTP library under attnd refusing a malformed request or one whose head is too large'
      : 'the proxy between this page and attnd answered, not attnd (its errors are JSON); attnd may be ' +
        'down, restarting or slow, or the proxy misrouted the request');
  }
  if (res.status === 413 && size) msg += too413(msg, size);
  if (res.status === 400 && size) msg += tooBigToKeep(msg, size);
  const e = new Error(msg);
  e.status = res.status;
  throw e;
}

// too413: what a user of the page can do about a 413, the request (its
// body, or the outputs it asks for) past one of the server's limits, which
// the server's message names: send fewer tokens (about as many as fit:
// the body grows with them, the maps with their square), or start attnd
// with that limit raised. size: { n, unit ('words', 'query rows'), bytes
// (the body sent), outBytes (the outputs it asks the server for) }.
function too413(text, { n, unit, bytes, outBytes }) {
  const name = (/\b(max-json-body|max-body|request-memory)\b/.exec(text) || [])[1];
  const lim = Number((/(?:limit of|more than|\() ?(\d+)/.exec(text) || [])[1]);
  let fit = 0;
  if (lim > 0 && name === 'request-memory' && outBytes > lim) fit = Math.floor(n * Math.sqrt(lim / outBytes));
  else if (lim > 0 && name && bytes > lim) fit = Math.floor((n * lim) / bytes);
  return `: too large for this server. Send fewer ${unit}${fit > 0 && fit < n ? ` (about ${fit} fit)` : ''}` +
    `${name ? `, or start attnd with a larger --${name}` : ''}.`;
}

// tooBigToKeep: a run whose maps are larger than the whole retained-map
// store (400 "parameters.retain: these maps need N bytes, more than the
// whole retained-map store (M bytes, maps-bytes)"): about how many of its
// words or rows fit. The maps' floats (outBytes, the outputs asked for;
// at most N) grow with the square of the words, the rest of N (labels,
// bookkeeping) is taken to grow with the words: the largest f whose
// a f² + b f is at most M (4096 words on a 4-head model need 48 KiB past
// the default 256 MiB: 4095 fit). '' for another 400.
function tooBigToKeep(text, { n, unit, outBytes }) {
  const m = /these maps need (\d+) bytes, more than the whole retained-map store \((\d+) bytes/.exec(text);
  if (!m || !(n > 0)) return '';
  const need = Number(m[1]), have = Number(m[2]);
  const floats = Math.min(outBytes > 0 ? outBytes : need, need);
  const a = floats / (n * n), b = (need - floats) / n;
  const fit = Math.floor((-b + Math.sqrt(b * b + 4 * a * have)) / (2 * a));
  return fit > 0 && fit < n ? `: send at most about ${fit} ${unit}.` : '';
}

// RUN_MAX_CELLS: the most weights (B x H x T x S) a run's answer may carry.
// They come as binary FP32 (postInfer), 4 bytes a weight (2^24: 64 MiB),
// which the browser holds whole, beside the drawn maps. A larger run is
// refused before it is sent (bigRun), unless it is retained: its answer
// then carries no map, which the page reads from the store max-pooled
// (openMap).
export const RUN_MAX_CELLS = 1 << 24;

// bigRun: whether a run of B x H x T x S weights is past RUN_MAX_CELLS
// (retained: to be read from the store); throws, saying how many fit,
// when it is and is not retained.
function bigRun(B, H, T, S, unit, retain) {
  const cells = B * H * T * S;
  if (cells <= RUN_MAX_CELLS) return false;
  if (retain) return true;
  const fit = S === T ? Math.floor(Math.sqrt(RUN_MAX_CELLS / (B * H))) : Math.floor(RUN_MAX_CELLS / (B * H * S));
  const en = (x) => x.toLocaleString('en');
  throw new Error(`${T} ${unit} make ${B > 1 ? `${B} items × ` : ''}${H} head${H === 1 ? '' : 's'} of ` +
    `${T} × ${S} weights (${en(cells)}, ${mb(cells * 4)} as FP32): more than this page takes in one ` +
    `answer (${en(RUN_MAX_CELLS)} weights). Use at most ${fit} ${unit}, or tick “retain on the server”: ` +
    'the map then stays on the server and the page reads it max-pooled.');
}

export async function getJSON(u, h = headers(), signal = undefined) {
  const res = await send(u, { headers: { ...h, Accept: 'application/json' }, signal });
  if (!res.ok) await fail(res);
  return readJSON(res);
}

// postJSON: POST body as JSON; size (optional: fail) for a 413's advice.
async function postJSON(u, body, size) {
  const text = JSON.stringify(body);
  const res = await send(u, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json', Accept: 'application/json' }),
    body: text,
  });
  if (!res.ok) await fail(res, size && { ...size, bytes: text.length });
  return readJSON(res);
}

// postInfer: an inference request (body as JSON) whose outputs come back
// as binary tensors (the Triton extension, README "Protocol details"):
// a JSON header of Inference-Header-Content-Length bytes, then each
// output's raw little-endian FP32 in order, its parameters.binary_data_size
// bytes. Returns the header with each output's data a Float32Array:
// no text of numbers to parse (JSON: ~11 bytes a weight, held whole as
// one string). An answer that is all JSON (a server without the
// extension) is read as such; one whose sizes do not add up throws.
// signal (optional) aborts it: a Run overtaken by the next one.
async function postInfer(u, body, size, signal) {
  const text = JSON.stringify({ ...body, parameters: { ...body.parameters, binary_data_output: true } });
  const res = await send(u, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json', Accept: 'application/octet-stream, application/json' }),
    body: text,
    signal,
  });
  if (!res.ok) await fail(res, size && { ...size, bytes: text.length });
  return readInfer(res);
}

// readInfer: an inference answer, binary (postInfer) or all JSON.
async function readInfer(res) {
  if (!res.headers.has('Inference-Header-Content-Length')) return readJSON(res);
  let buf;
  try { buf = await res.arrayBuffer(); } catch (e) {
    throw new Error(`the server's answer could not be read whole (${e.message}): the connection broke?`);
  }
  const bad = (why) => new Error(`the server's binary answer is not what this page expects (${why}); ` +
    'reload the page, or check what is between it and attnd');
  const hlen = Number(res.headers.get('Inference-Header-Content-Length'));
  if (!Number.isInteger(hlen) || hlen <= 0 || hlen > buf.byteLength) throw bad(`a header of ${hlen} bytes in ${buf.byteLength}`);
  let head;
  try { head = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 0, hlen))); } catch (_) { throw bad('its header is not JSON'); }
  let off = hlen;
  for (const t of head.outputs || []) {
    const n = t.parameters && t.parameters.binary_data_size;
    if (n === undefined) continue; // this one came as JSON
    const count = (t.shape || []).reduce((a, b) => a * b, 1);
    if (t.datatype !== 'FP32' || n !== 4 * count || off + n > buf.byteLength)
      throw bad(`${t.name}: ${t.datatype} [${t.shape}] in ${n} bytes at ${off} of ${buf.byteLength}`);
    t.data = new Float32Array(buf.slice(off, off + n)); // a copy: off may not be 4-aligned
    off += n;
  }
  if (off !== buf.byteLength) throw bad(`${buf.byteLength - off} bytes left over`);
  return head;
}

// listModels: { names, error }: names of the loaded models (repository
// index), sdpa first; error, when the server could not list them (no
// answer, a 503 while it shuts down), is why only sdpa, built in, is
// named (a 401 throws). {ready: true}: the ready ones alone, listed even
// when the repository folder cannot be read (the full index then
// answers 503).
export async function listModels() {
  let names = [], error = null;
  try {
    const idx = await postJSON(url('v2/repository/index'), { ready: true });
    names = idx.filter((m) => !m.state || m.state === 'READY').map((m) => m.name);
  } catch (e) {
    if (e.status === 401) throw e;
    error = e;
  }
  if (!names.includes('sdpa')) names.unshift('sdpa');
  return { names: [...new Set(names)], error };
}

export const modelMeta = (m) => getJSON(url(`v2/models/${encodeURIComponent(m)}`));

// Flatten nested JSON arrays (OIP data may be flat or nested).
function flat(data) {
  if (data instanceof Float32Array) return data; // a binary output (postInfer)
  return Float32Array.from(Array.isArray(data) ? data.flat(Infinity) : []);
}

function outputsByName(resp) {
  const o = {};
  for (const t of resp.outputs || []) o[t.name] = { shape: t.shape, data: flat(t.data) };
  return o;
}

// Shape of a nested array: [[1,2],[3,4]] -> [2, 2]; throws if ragged.
export function shapeOf(a, field) {
  const shape = [];
  for (let x = a; Array.isArray(x); x = x[0]) shape.push(x.length);
  const check = (x, d) => {
    if (d === shape.length) {
      if (typeof x !== 'number' || !Number.isFinite(x))
        throw new Error(`${field}: expected finite numbers`);
      return;
    }
    if (!Array.isArray(x) || x.length !== shape[d])
      throw new Error(`${field}: ragged at depth ${d}`);
    x.forEach((y) => check(y, d + 1));
  };
  check(a, 0);
  return shape;
}

// labels: pasted labels (tokens, key_tokens) for n rows or keys ([one,
// many]: what they label), as strings; absent: dflt(i) for each. Labels that do not fit are refused,
// naming the field, rather than drawn as "undefined" or cut.
export function labels(a, n, field, [one, many], dflt) {
  if (a === undefined || a === null) return Array.from({ length: n }, (_, i) => dflt(i));
  if (!Array.isArray(a)) throw new Error(`${field}: expected a list of ${n} labels, one per ${one}`);
  if (a.length !== n)
    throw new Error(`${field}: ${a.length} label${a.length === 1 ? '' : 's'} for ${n} ${n === 1 ? one : many}`);
  return a.map(String);
}

// parseMask: a pasted "mask" (nested true/false or 1/0) checked against
// the shapes the daemon takes: [T, S], or lead + [T, S] where lead is
// [B] for attention models and q's leading dimensions for sdpa. Returns
// null (no mask) or { input (the OIP BOOL tensor), mask (see run.mask) }.
export function parseMask(m, lead, T, S) {
  if (m === undefined || m === null) return null;
  const shape = shapeOfMask(m);
  const ok = (shape.length === 2 || (shape.length === lead.length + 2 &&
    lead.every((d, k) => shape[k] === d))) &&
    shape[shape.length - 2] === T && shape[shape.length - 1] === S;
  if (!ok) {
    const want = [`[${T}, ${S}]`];
    if (lead.length) want.push(`[${[...lead, T, S].join(', ')}]`);
    throw new Error(`mask: shape [${shape.join(', ')}]; expected ${want.join(' or ')}`);
  }
  const flatM = m.flat(Infinity).map((x) => x === true || x === 1);
  const planes = flatM.length / (T * S);
  return {
    input: { name: 'mask', datatype: 'BOOL', shape, data: flatM },
    mask: { planes, data: Uint8Array.from(flatM, (x) => (x ? 1 : 0)) },
  };
}

function shapeOfMask(a) {
  const shape = [];
  for (let x = a; Array.isArray(x); x = x[0]) shape.push(x.length);
  if (shape.length < 2) throw new Error('mask: expected a [T, S] array of true/false');
  const check = (x, d) => {
    if (d === shape.length) {
      if (x !== true && x !== false && x !== 0 && x !== 1)
        throw new Error('mask: expected true/false (or 1/0) elements');
      return;
    }
    if (!Array.isArray(x) || x.length !== shape[d]) throw new Error(`mask: ragged at depth ${d}`);
    x.forEach((y) => check(y, d + 1));
  };
  check(a, 0);
  return shape;
}

// Run the attention model `model` on words with the sample generator.
export async function inferWords(meta, words, opts) {
  const p = meta.parameters || {};
  const d = p.d_model;
  const x = embed(words, d);
  return inferX(meta, [1, words.length, d], x, words, opts, null, undefined, 'words');
}

// Run an attention model on an explicit x of shape [B, T, d_model] (and,
// for cross-attention, ctx = { shape: [B, S, d_ctx], data, tokens }).
// unit: what its T counts, for messages. A retained run past
// RUN_MAX_CELLS returns { mapOnly: true, mapId }: open the map.
export async function inferX(meta, shape, x, tokens, { causal, retain, signal }, ctx = null, maskIn = undefined,
  unit = 'query rows') {
  const p = meta.parameters || {};
  const n = shape[1], cells = [shape[0], p.n_heads || 1, n, ctx ? ctx.shape[1] : n];
  const mapOnly = bigRun(...cells, unit, retain);
  const mk = parseMask(maskIn, [shape[0]], shape[1], ctx ? ctx.shape[1] : shape[1]);
  const params = { causal: !!causal };
  const keyTokens = ctx ? ctx.tokens : tokens;
  if (retain) {
    params.retain = true;
    params.tokens = ctx ? tokens.concat(keyTokens) : tokens; // a context's keys have labels of their own
  }
  const inputs = [{ name: 'x', datatype: 'FP32', shape, data: Array.from(x) }];
  if (ctx) inputs.push({ name: 'context', datatype: 'FP32', shape: ctx.shape, data: Array.from(ctx.data) });
  if (mk) inputs.push(mk.input);
  const body = {
    inputs,
    // Scores only for the store (a retained map has no q, k): the page
    // works them out from q and k, and they were as large as the weights.
    outputs: (mapOnly ? ['y'] : ['attention', ...(retain ? ['scores'] : []), 'q', 'k', 'v', 'y']).map((name) => ({ name })),
    parameters: params,
  };
  const resp = await postInfer(url(`v2/models/${encodeURIComponent(meta.name)}/infer`), body,
    { n, unit, outBytes: 4 * cells.reduce((a, b) => a * b) * (retain ? 2 : 1) }, signal);
  if (mapOnly) return { mapOnly, mapId: resp.parameters && resp.parameters.map_id };
  const o = outputsByName(resp);
  if (!o.attention) throw new Error('response has no attention output');
  const [B, H, T, S] = o.attention.shape;
  return {
    source: 'model', model: meta.name, B, H, T, S,
    tokens: tokens.slice(0, T), keyTokens: keyTokens.slice(0, S),
    causal: !!causal, tValid: Array(B).fill(T), sValid: Array(B).fill(S),
    attention: o.attention.data, scores: o.scores && o.scores.data,
    q: o.q && o.q.data, k: o.k && o.k.data, v: o.v && o.v.data,
    y: o.y && o.y.data,
    headDim: p.head_dim, vHeadDim: p.v_head_dim || p.head_dim, scale: p.scale || null,
    nKvHeads: p.n_kv_heads || H, mapId: resp.parameters && resp.parameters.map_id,
    mask: mk ? mk.mask : null,
  };
}

// Run the built-in sdpa model on q [T,dk] / [B,T,dk] / [B,H,T,dk] etc.
export async function inferSdpa(spec, { causal, retain, signal, scale }) {
  const qs = shapeOf(spec.q, 'q'), ks = shapeOf(spec.k, 'k'), vs = shapeOf(spec.v, 'v');
  if (qs.length < 2 || qs.length > 4) throw new Error('q: expected [T, d_k], [B, T, d_k] or [B, H, T, d_k]');
  if (ks.length !== qs.length || vs.length !== qs.length)
    throw new Error('k, v: must have the rank of q');
  const lead = qs.slice(0, -2);
  const T = qs[qs.length - 2], S = ks[ks.length - 2], dk = qs[qs.length - 1];
  const dv = vs[vs.length - 1];
  const B = lead.length >= 1 ? lead[0] : 1, H = lead.length === 2 ? lead[1] : 1;
  const tok = labels(spec.tokens, T, 'tokens', ['query', 'queries'], (i) => `q${i}`);
  const keyTok = spec.key_tokens !== undefined || !(S === T && spec.tokens)
    ? labels(spec.key_tokens, S, 'key_tokens', ['key', 'keys'], (j) => `k${j}`) : tok;
  const params = { causal: !!causal };
  if (scale !== undefined) params.scale = scale;
  if (retain) { params.retain = true; params.tokens = keyTok === tok ? tok : tok.concat(keyTok); }
  const mk = parseMask(spec.mask, lead, T, S);
  const mapOnly = bigRun(B, H, T, S, 'query rows', retain);
  const input = (name, shape, a) => ({ name, datatype: 'FP32', shape, data: a.flat(Infinity) });
  const inputs = [input('q', qs, spec.q), input('k', ks, spec.k), input('v', vs, spec.v)];
  if (mk) inputs.push(mk.input);
  const resp = await postInfer(url('v2/models/sdpa/infer'), {
    inputs,
    outputs: (mapOnly ? ['output'] : ['output', 'attention', ...(retain ? ['scores'] : [])]).map((name) => ({ name })),
    parameters: params,
  }, { n: T, unit: 'query rows', outBytes: 4 * B * H * T * S * (retain ? 2 : 1) }, signal);
  if (mapOnly) return { mapOnly, mapId: resp.parameters && resp.parameters.map_id };
  const o = outputsByName(resp);
  if (!o.attention) throw new Error('response has no attention output');
  return {
    source: 'sdpa', model: 'sdpa', B, H, T, S, tokens: tok, keyTokens: keyTok,
    causal: !!causal, tValid: Array(B).fill(T), sValid: Array(B).fill(S),
    attention: o.attention.data, scores: o.scores && o.scores.data,
    q: Float32Array.from(spec.q.flat(Infinity)), k: Float32Array.from(spec.k.flat(Infinity)),
    v: Float32Array.from(spec.v.flat(Infinity)), y: o.output && o.output.data,
    headDim: dk, vHeadDim: dv, nKvHeads: H,
    // the float q was multiplied by (the answer does not say it; a map
    // retained from it does): null, 1/√d_k
    scale: scale !== undefined ? Math.fround(scale) : null,
    mapId: resp.parameters && resp.parameters.map_id,
    mask: mk ? mk.mask : null,
  };
}

export const listMaps = () => getJSON(url('v2/maps'));

// Cells above which a retained map is fetched max-pooled, not whole.
export const FULL_MAP_CELLS = 1 << 20;
export const POOL_N = 512; // a pooled map's cells: blocks of it at most 512 x 512 (norm.js asks the same)

// openMap: a retained map as a run: every head's weights fetched as raw
// FP32, max-pooled to 512 x 512 when T x S is large; the masked cells
// (what=mask) when the request sent an explicit mask or the map is a
// sequence's that grew (version > 0: each row attended the keys its own
// step held, which the start's causal flag cannot say); its scores and
// values (what=scores, what=v) when they were retained and the map is
// not pooled, for the step view. A sequence's map may be stepped while
// its planes are read (a request for each kind): each answer's Map-Version
// header says the version its cells are from, and when one is not the
// metadata's (or a proxy dropped the header) the metadata is read again,
// and the map read anew when the version changed (a map's version only
// grows, so an unchanged one means every plane came from it), rather
// than drawing heads of two versions or failing on a plane of the new
// size. progress (optional) hears "n of N planes" after each
// answer: every item's and head's planes of one kind come in one
// (b=all&h=all), one at a time only when the whole is past the server's
// --request-memory. signal
// (optional) aborts the reads: the map is no longer wanted.
const OPEN_TRIES = 4;
export async function openMap(id, progress, signal) {
  const metaUrl = url(`v2/maps/${encodeURIComponent(id)}`);
  let meta = await getJSON(metaUrl, mapHeaders(id), signal);
  for (let k = 1; ; k++) {
    let run = null, err = null;
    const seen = new Set(); // the Map-Version of every answer
    try { run = await readMap(id, meta, progress, signal, seen); } catch (e) { err = e; }
    if (err && err.name === 'AbortError') throw err;
    if (!err && seen.size === 1 && seen.has(String(meta.version))) return run;
    const now = await getJSON(metaUrl, mapHeaders(id), signal);
    if (now.version === meta.version && String(now.shape) === String(meta.shape)) {
      if (err) throw err;
      return run;
    }
    if (k === OPEN_TRIES)
      throw new Error(`map ${id}: it changed ${k} times while it was read (a sequence stepping fast); open it again`);
    meta = now;
  }
}

// readMap: openMap's reads for the map that meta describes.
async function readMap(id, meta, progress, signal, seen) {
  const [B, H, T, S] = meta.shape;
  const kept = meta.retained || ['attention'];
  const pooled = T * S > FULL_MAP_CELLS;
  const grown = meta.version > 0;
  const q = pooled ? `&max=${POOL_N}` : '';
  const withV = !pooled && kept.includes('v') && Array.isArray(meta.v_shape);
  const meanPlanes = pooled && H > 1;
  const planes = B * H * (1 + (meta.mask || grown ? 1 : 0) + (!pooled && kept.includes('scores') ? 1 : 0)) +
    (withV ? B * meta.v_shape[1] : 0) + (meanPlanes ? B : 0);
  let read = 0;
  // fetchF32: count planes of n FP32 values each (count > 1: b=all
  // and/or h=all, one answer). attnd answers it application/octet-stream,
  // count x n x 4 bytes: anything else (a proxy's or a login page's HTML
  // answered 200, a misrouted request) says what came.
  const fetchF32 = async (b, h, what, n, count = 1) => {
    const res = await send(url(`v2/maps/${encodeURIComponent(id)}/attention?b=${b}&h=${h}&what=${what}&format=f32${what === 'v' ? '' : q}`),
      { headers: mapHeaders(id), signal });
    if (!res.ok) await fail(res);
    seen.add(res.headers.get('Map-Version'));
    let buf;
    try { buf = await res.arrayBuffer(); } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new Error(`map ${id}: its ${what} plane could not be read whole (${e.message}): the connection broke?`);
    }
    const binary = /^application\/octet-stream\b/i.test(res.headers.get('Content-Type') || '');
    if (!binary) {
      const text = new TextDecoder().decode(new Uint8Array(buf, 0, Math.min(buf.byteLength, 4096)));
      throw new Error(`map ${id}: ${cameInstead(res, text, `its ${what} plane as FP32`)}; a proxy or login page in the way?`);
    }
    if (buf.byteLength !== 4 * n * count)
      throw new Error(`map ${id}: its ${what} plane${count > 1 ? 's' : ''} (item ${b}, head ${h}) came as ${buf.byteLength} bytes, ` +
        `not the ${4 * n * count} of its shape; reload the page, or check what is between it and attnd`);
    read += count;
    if (progress) progress(`${read} of ${planes} planes`);
    return new Float32Array(buf);
  };
  let rows = T, cols = S;
  if (pooled) {
    const bt = Math.ceil(T / POOL_N), bs = Math.ceil(S / POOL_N);
    rows = Math.ceil(T / bt); cols = Math.ceil(S / bs);
  }
  // perHead: every item's and head's plane of what, [B, H, rows, cols]:
  // one request (b=all&h=all: one version of the map, one round trip)
  // unless it is a single plane, or the whole is past the server's
  // --request-memory (413) where one plane at a time may fit.
  const allOr = async (n, whole, each) => {
    if (n > 1) {
      try { return await whole(); } catch (e) { if (e.status !== 413) throw e; }
    }
    return each();
  };
  const perHead = (what, Arr) => allOr(B * H, async () => {
    const out = new Arr(B * H * rows * cols);
    out.set(await fetchF32('all', 'all', what, rows * cols, B * H));
    return out;
  }, async () => {
    const out = new Arr(B * H * rows * cols);
    for (let b = 0; b < B; b++)
      for (let h = 0; h < H; h++) {
        out.set(await fetchF32(b, h, what, rows * cols), (b * H + h) * rows * cols);
      }
    return out;
  });
  const att = await perHead('attention', Float32Array);
  // A pooled map's mean over heads is the server's (h=mean): each cell the
  // largest of its block of the mean, as the readout says. The mean of the
  // heads' pooled planes (each head's own largest) is not: one head on key
  // 0 and one on key 1 made 1 of two weights of 0.5.
  let meanPooled = null;
  if (meanPlanes) {
    meanPooled = await allOr(B, () => fetchF32('all', 'mean', 'attention', rows * cols, B), async () => {
      const out = new Float32Array(B * rows * cols);
      for (let b = 0; b < B; b++) out.set(await fetchF32(b, 'mean', 'attention', rows * cols), b * rows * cols);
      return out;
    });
  }
  // An explicit mask may differ per item and head, and a grown sequence
  // map's rows each have their own: ask the server which cells it masked
  // (causal and lengths included).
  const mask = meta.mask || grown ? { planes: B * H, data: await perHead('mask', Uint8Array) } : null;
  let scores = null, v = null, missing = null;
  const dk = meta.d_k || null;
  let dv = null, hkv = H;
  if (pooled) missing = 'this map is max-pooled for the browser, and steps need single cells';
  else {
    if (kept.includes('scores')) scores = await perHead('scores', Float32Array);
    if (withV) {
      [, hkv, , dv] = meta.v_shape;
      // (h=all gives each query head's rows: kv heads shared by a group
      // come once per head, so only where every head has its own)
      v = await allOr(hkv === H ? B * H : 1, () => fetchF32('all', 'all', 'v', S * dv, B * H), async () => {
        const out = new Float32Array(B * hkv * S * dv);
        for (let b = 0; b < B; b++)
          for (let g = 0; g < hkv; g++) // head g * (H / hkv) reads kv head g
            out.set(await fetchF32(b, g * (H / hkv), 'v', S * dv), (b * hkv + g) * S * dv);
        return out;
      });
    }
    // The store keeps scores and values only when the retaining request
    // computed them (it asked for those outputs).
    if (!scores) missing = grown ? 'the server kept only its weights (a sequence\'s map keeps scores when its start asked for them)'
      : 'the server kept only its weights';
    else if (!v) missing = 'the server kept no value rows';
  }
  const label = (arr, n, p) => (arr && arr.length === n ? arr : Array.from({ length: n }, (_, i) => `${p}${i}`));
  let tokens = label(meta.tokens, T, 't'), keyTokens = label(meta.key_tokens, S, 't');
  if (pooled) {
    const bt = Math.ceil(T / rows), bs = Math.ceil(S / cols);
    tokens = Array.from({ length: rows }, (_, i) => `${i * bt}..${Math.min(T, (i + 1) * bt) - 1}`);
    keyTokens = Array.from({ length: cols }, (_, j) => `${j * bs}..${Math.min(S, (j + 1) * bs) - 1}`);
  }
  // labels sent one list per batch item (item_tokens): item b's rows and
  // keys, which the page puts in tokens / keyTokens when it shows item b
  const perItem = !pooled && Array.isArray(meta.item_tokens) && meta.item_tokens.length === B;
  const itemTokens = perItem ? meta.item_tokens.map((l) => label(l, T, 't')) : null;
  const itemKeyTokens = perItem ? (meta.item_key_tokens || []).map((l) => label(l, S, 't')) : null;
  return {
    source: 'map', model: meta.model, B, H, T: rows, S: cols, tokens, keyTokens, itemTokens, itemKeyTokens,
    // its rows carry the labels the steps sent (a sequence's words as the
    // server holds them, whoever stepped it), not t0, t1, ...
    labelled: !pooled && Array.isArray(meta.tokens) && meta.tokens.length === T,
    causal: !!meta.causal && !grown, // a grown map's mask says it per row
    tValid: meta.lengths || Array(B).fill(T),
    sValid: meta.context_lengths || Array(B).fill(S),
    // A pooled cell is masked when every pair in its block is.
    poolMask: pooled ? { bt: Math.ceil(T / rows), bs: Math.ceil(S / cols), T, S } : null,
    attention: att, meanPooled, mask, scores, v, headDim: dk, vHeadDim: dv, nKvHeads: hkv, missing,
    scale: meta.scale || null, normOf: meta.norm_of || null, // what=norm's: "v W_o" or "v"
    mapId: id, created: meta.created, version: meta.version,
    block: pooled ? [Math.ceil(T / rows), Math.ceil(S / cols)] : null,
    sourceShape: [T, S], shape: meta.shape,
  };
}

// ---- sequences (API.md "Sequences") and following a map ---------------

// The header proxies route a sequence's requests on (README "Sequences
// across replicas"); sent with every request about the sequence.
export const SEQ_HEADER = 'Attnd-Sequence-Id';

// seqStep: one step of sequence id on an attention model: words embedded
// by the sample generator at their true positions pos0, pos0 + 1, ...,
// sent with sequence_position pos0 (a step below the sequence's length
// replaces the words from pos0 on; one sent again is not applied twice);
// start begins it (retained, so its map grows with every step; a prompt
// whose map the page draws cell by cell, T x T <= FULL_MAP_CELLS, asks
// for its scores too, as binary, so that the map keeps every row's and
// the step view can show q·k and the softmax; a larger one is read
// max-pooled, where the step view has no single cells anyway). Returns
// { length (the sequence's tokens now), mapId, scores (asked for) };
// scores: false asks a start for y alone. A failure throws the
// daemon's error with err.status (400 for an unknown sequence, 503 with
// err.retryAfter when the K/V budget is full).
export async function seqStep(meta, id, words, pos0, { start = false, causal, scores: want = true } = {}) {
  const d = (meta.parameters || {}).d_model;
  const x = embed(words, d, pos0);
  const params = { sequence_id: id, retain: true, tokens: words, sequence_position: pos0 };
  const scores = start && want && words.length ** 2 <= FULL_MAP_CELLS;
  if (start) params.sequence_start = true;
  if (scores) params.binary_data_output = true;
  if (causal !== undefined) params.causal = !!causal;
  const body = JSON.stringify({
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, words.length, d], data: Array.from(x) }],
    // The smallest output: the map is kept (retain) and read from the
    // store, max-pooled when large; the answer need not carry it. A map
    // keeps scores when its start asked for them (README "Retained
    // attention maps"): the start does, and its later steps add theirs.
    outputs: scores ? [{ name: 'y' }, { name: 'scores' }] : [{ name: 'y' }],
    parameters: params,
  });
  const res = await send(url(`v2/models/${encodeURIComponent(meta.name)}/infer`), {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json', Accept: 'application/octet-stream, application/json', [SEQ_HEADER]: id }),
    body,
  });
  if (!res.ok) {
    const ra = Number(res.headers.get('Retry-After'));
    const size = { n: words.length, unit: 'words', bytes: body.length, // the map's new rows (and scores):
      outBytes: (scores ? 8 : 4) * ((meta.parameters || {}).n_heads || 1) * words.length * (pos0 + words.length) };
    try { await fail(res, size); } catch (e) { if (ra > 0) e.retryAfter = ra; throw e; }
  }
  const j = await readInfer(res);
  const p = j.parameters || {};
  if (p.map_id) mapSeq.set(p.map_id, id);
  return { length: p.sequence_length, bytes: p.sequence_bytes, mapId: p.map_id, scores };
}

// endSequence: DELETE /v2/sequences/{id} (frees its keys and values).
// keepalive: the request outlives the page (sent as it goes away).
export async function endSequence(id, keepalive = false) {
  const res = await send(url(`v2/sequences/${encodeURIComponent(id)}`), {
    method: 'DELETE', headers: headers({ [SEQ_HEADER]: id }), keepalive,
  });
  if (!res.ok) await fail(res);
}

// sequenceInfo: the live sequence id as GET /v2/sequences/{id} gives it
// ({ id, model, length, bytes, ... }: that one alone, not the list of
// every live one, which holds the first 4096), or null when it is not
// live (404), the daemon has no sequences or cannot tell now.
export async function sequenceInfo(id) {
  let j;
  try {
    j = await getJSON(url(`v2/sequences/${encodeURIComponent(id)}`), headers({ [SEQ_HEADER]: id }));
  } catch (e) { if (e.status === 401) throw e; return null; }
  return j && String(j.id) === String(id) ? j : null;
}

// sequenceState: GET /v2/sequences/{id}: { info } (as sequenceInfo's)
// while the server holds the sequence; { gone: its 404's error } (how it
// went, when the server remembers it) once it does not. Throws when it
// cannot be told now (no connection, a 5xx, a 401): ask again later.
export async function sequenceState(id) {
  try {
    return { info: await getJSON(url(`v2/sequences/${encodeURIComponent(id)}`), headers({ [SEQ_HEADER]: id })) };
  } catch (e) {
    if (e.status === 404) return { gone: e.message };
    throw e;
  }
}

// liveSequenceOfMap: the live sequence whose retained map is mapId, or
// null; undefined when the daemon lists no sequences (cannot tell). With
// known, the id of the sequence that wrote it, that one alone is asked
// (the list holds the first 4096 of them). Throws when it cannot be told
// now (the daemon busy or gone, a list cut short): ask again later.
export async function liveSequenceOfMap(mapId, known) {
  let j;
  try {
    j = await getJSON(url(known ? `v2/sequences/${encodeURIComponent(known)}` : 'v2/sequences'), mapHeaders(mapId));
  } catch (e) {
    if (known && e.status === 404) return null; // not live: says how it went
    if (!known && [404, 405, 501].includes(e.status)) return undefined;
    throw e;
  }
  if (known) return j?.map_id === mapId ? j : null;
  const list = Array.isArray(j) ? j : j.sequences || [];
  const s = list.find((q) => q.map_id === mapId);
  if (s) return s;
  if (Number.isInteger(j.count) && j.count > list.length) throw new Error('the list of sequences is cut short');
  return null;
}

// waitMap: GET /v2/maps/{id}?wait=rows[&version=] - the long poll of follow
// mode: resolves to { status, meta, retryAfter, notJSON } once the map's query rows
// differ from rows or its version from version (when given: a step that
// replaced rows), it is gone (404), the server's wait times out (200,
// unchanged) or it is busy (503). timeoutMs (optional) asks the server
// to answer an unchanged map sooner than its --maps-wait-ms. signal
// aborts it. An answer that is not JSON has meta null and notJSON saying
// what came (readJSON's message).
export async function waitMap(id, rows, signal, version, timeoutMs) {
  let v = Number.isInteger(version) ? `&version=${version}` : '';
  if (timeoutMs > 0) v += `&timeout_ms=${timeoutMs}`;
  const res = await send(url(`v2/maps/${encodeURIComponent(id)}?wait=${rows}${v}`),
    { headers: mapHeaders(id, { Accept: 'application/json' }), signal });
  let body = null, notJSON = null;
  try { body = await readJSON(res); } catch (e) { notJSON = e.message; }
  return { status: res.status, meta: body, notJSON, retryAfter: Number(res.headers.get('Retry-After')) || 1 };
}
