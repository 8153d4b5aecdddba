// api.js - the daemon's own HTTP API, nothing else: model metadata,
// inference, retained maps. Every function throws an Error whose message
// is the daemon's {"error": ...} text (or the HTTP status) on failure.
//
// A "run" is what the page shows, whatever its source:
//   { source: 'model'|'sdpa'|'map', model, B, H, T, S,
//     tokens[T], keyTokens[S], causal, tValid[B], sValid[B],
//     attention: Float32Array (B, H, T, S),
//     scores?: Float32Array (B, H, T, S)   scaled, before masks
//     q?: (B, H, T, dk)  k?: (B, Hkv, S, dk)  v?: (B, Hkv, S, dv)
//     headDim, vHeadDim, nKvHeads, mapId?, block?: [rows, cols] pooling }

import { embed } from './embed.js';

async function fail(res) {
  let msg = `HTTP ${res.status}`;
  try {
    const j = await res.json();
    if (j && j.error) msg = `${j.error} (HTTP ${res.status})`;
  } catch (_) { /* not JSON */ }
  throw new Error(msg);
}

export async function getJSON(url) {
  const res = await fetch(url, { headers: { Accept: 'application/json' } });
  if (!res.ok) await fail(res);
  return res.json();
}

async function postJSON(url, body) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) await fail(res);
  return res.json();
}

// listModels: names of the loaded models (repository index), sdpa first.
export async function listModels() {
  let names = [];
  try {
    const idx = await postJSON('/v2/repository/index', {});
    names = idx.filter((m) => !m.state || m.state === 'READY').map((m) => m.name);
  } catch (_) { /* fall back below */ }
  if (!names.includes('sdpa')) names.unshift('sdpa');
  for (const n of ['demo']) if (!names.includes(n)) names.push(n);
  return [...new Set(names)];
}

export const modelMeta = (m) => getJSON(`/v2/models/${encodeURIComponent(m)}`);

// Flatten nested JSON arrays (OIP data may be flat or nested).
function flat(data) {
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

// Run the attention model `model` on words with the sample generator.
export async function inferWords(meta, words, { causal, retain }) {
  const p = meta.parameters || {};
  const d = p.d_model;
  const x = embed(words, d);
  return inferX(meta, [1, words.length, d], x, words, { causal, retain });
}

// Run an attention model on an explicit x of shape [B, T, d_model].
export async function inferX(meta, shape, x, tokens, { causal, retain }) {
  const p = meta.parameters || {};
  const params = { causal: !!causal };
  if (retain) { params.retain = true; params.tokens = tokens; }
  const body = {
    inputs: [{ name: 'x', datatype: 'FP32', shape, data: Array.from(x) }],
    outputs: ['attention', 'scores', 'q', 'k', 'v', 'y'].map((name) => ({ name })),
    parameters: params,
  };
  const resp = await postJSON(`/v2/models/${encodeURIComponent(meta.name)}/infer`, body);
  const o = outputsByName(resp);
  if (!o.attention) throw new Error('response has no attention output');
  const [B, H, T, S] = o.attention.shape;
  return {
    source: 'model', model: meta.name, B, H, T, S,
    tokens: tokens.slice(0, T), keyTokens: tokens.slice(0, S),
    causal: !!causal, tValid: Array(B).fill(T), sValid: Array(B).fill(S),
    attention: o.attention.data, scores: o.scores && o.scores.data,
    q: o.q && o.q.data, k: o.k && o.k.data, v: o.v && o.v.data,
    y: o.y && o.y.data,
    headDim: p.head_dim, vHeadDim: p.v_head_dim || p.head_dim,
    nKvHeads: p.n_kv_heads || H, mapId: resp.parameters && resp.parameters.map_id,
  };
}

// Run the built-in sdpa model on q [T,dk] / [B,T,dk] / [B,H,T,dk] etc.
export async function inferSdpa(spec, { causal, retain }) {
  const qs = shapeOf(spec.q, 'q'), ks = shapeOf(spec.k, 'k'), vs = shapeOf(spec.v, 'v');
  if (qs.length < 2 || qs.length > 4) throw new Error('q: expected [T, d_k], [B, T, d_k] or [B, H, T, d_k]');
  if (ks.length !== qs.length || vs.length !== qs.length)
    throw new Error('k, v: must have the rank of q');
  const lead = qs.slice(0, -2);
  const T = qs[qs.length - 2], S = ks[ks.length - 2], dk = qs[qs.length - 1];
  const dv = vs[vs.length - 1];
  const B = lead.length >= 1 ? lead[0] : 1, H = lead.length === 2 ? lead[1] : 1;
  const tok = spec.tokens || Array.from({ length: T }, (_, i) => `q${i}`);
  const keyTok = spec.key_tokens || (S === T && spec.tokens ? spec.tokens : Array.from({ length: S }, (_, j) => `k${j}`));
  const params = { causal: !!causal };
  if (retain) { params.retain = true; params.tokens = S === T ? tok : tok.concat(keyTok); }
  const input = (name, shape, a) => ({ name, datatype: 'FP32', shape, data: a.flat(Infinity) });
  const resp = await postJSON('/v2/models/sdpa/infer', {
    inputs: [input('q', qs, spec.q), input('k', ks, spec.k), input('v', vs, spec.v)],
    outputs: ['output', 'attention', 'scores'].map((name) => ({ name })),
    parameters: params,
  });
  const o = outputsByName(resp);
  if (!o.attention) throw new Error('response has no attention output');
  return {
    source: 'sdpa', model: 'sdpa', B, H, T, S, tokens: tok, keyTokens: keyTok,
    causal: !!causal, tValid: Array(B).fill(T), sValid: Array(B).fill(S),
    attention: o.attention.data, scores: o.scores && o.scores.data,
    q: Float32Array.from(spec.q.flat(Infinity)), k: Float32Array.from(spec.k.flat(Infinity)),
    v: Float32Array.from(spec.v.flat(Infinity)), y: o.output && o.output.data,
    headDim: dk, vHeadDim: dv, nKvHeads: H,
    mapId: resp.parameters && resp.parameters.map_id,
  };
}

export const listMaps = () => getJSON('/v2/maps');

// Cells above which a retained map is fetched max-pooled, not whole.
export const FULL_MAP_CELLS = 1 << 20;
const POOL_N = 512;

// openMap: a retained map as a run (attention only; every head fetched as
// raw FP32, max-pooled to 512 x 512 when T x S is large).
export async function openMap(id) {
  const meta = await getJSON(`/v2/maps/${encodeURIComponent(id)}`);
  const [B, H, T, S] = meta.shape;
  const pooled = T * S > FULL_MAP_CELLS;
  const q = pooled ? `&max=${POOL_N}` : '';
  const fetchHead = async (b, h) => {
    const res = await fetch(`/v2/maps/${encodeURIComponent(id)}/attention?b=${b}&h=${h}&format=f32${q}`);
    if (!res.ok) await fail(res);
    return new Float32Array(await res.arrayBuffer());
  };
  let rows = T, cols = S;
  if (pooled) {
    const bt = Math.ceil(T / POOL_N), bs = Math.ceil(S / POOL_N);
    rows = Math.ceil(T / bt); cols = Math.ceil(S / bs);
  }
  const att = new Float32Array(B * H * rows * cols);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H; h++) {
      const m = await fetchHead(b, h);
      if (m.length !== rows * cols) throw new Error(`map ${id}: unexpected size`);
      att.set(m, (b * H + h) * rows * cols);
    }
  const label = (arr, n, p) => (arr && arr.length === n ? arr : Array.from({ length: n }, (_, i) => `${p}${i}`));
  let tokens = label(meta.tokens, T, 't'), keyTokens = label(meta.key_tokens, S, 't');
  if (pooled) {
    const bt = Math.ceil(T / rows), bs = Math.ceil(S / cols);
    tokens = Array.from({ length: rows }, (_, i) => `${i * bt}..${Math.min(T, (i + 1) * bt) - 1}`);
    keyTokens = Array.from({ length: cols }, (_, j) => `${j * bs}..${Math.min(S, (j + 1) * bs) - 1}`);
  }
  return {
    source: 'map', model: meta.model, B, H, T: rows, S: cols, tokens, keyTokens,
    causal: !!meta.causal && !pooled,
    tValid: pooled ? Array(B).fill(rows) : meta.lengths || Array(B).fill(T),
    sValid: pooled ? Array(B).fill(cols) : meta.context_lengths || Array(B).fill(S),
    attention: att, mapId: id, created: meta.created,
    block: pooled ? [Math.ceil(T / rows), Math.ceil(S / cols)] : null,
    sourceShape: [T, S],
  };
}
