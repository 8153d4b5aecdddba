// seq_helper.mjs - what the sequence tests share: a seeded GQA + RoPE model
// with biases, seeded tokens, the reference (one stateless causal request
// over a sequence's whole history) and the check of a step's answer
// against its rows.
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { frame } from '../grpc/wire.mjs';
import { fp32, infer, maxDiff, modelsDir, mulberry32, safetensors } from './helper.mjs';

export const D = 16, H = 4, HKV = 2, DK = 4;

/** A seeded generator of floats in [-1, 1) (mulberry32's, exactly doubled
 * and shifted). */
export function rng(seed) {
  const u = mulberry32(seed);
  return () => 2 * u() - 1;
}

/** A models folder with `gqa`: d_model 16, 4 query heads, 2 kv heads of 4,
 * RoPE on all dims, biases, causal by default. */
export function gqaModels() {
  const dir = modelsDir();
  const r = rng(20261130);
  const m = (rows, cols, s = 0.5) => [[rows, cols], Array.from({ length: rows * cols }, () => r() * s)];
  const v = (n) => [[n], Array.from({ length: n }, () => r() * 0.1)];
  mkdirSync(join(dir, 'gqa'));
  writeFileSync(join(dir, 'gqa', 'model.safetensors'), safetensors({
    W_q: m(D, H * DK), W_k: m(D, HKV * DK), W_v: m(D, HKV * DK), W_o: m(H * DK, D),
    b_q: v(H * DK), b_k: v(HKV * DK), b_v: v(HKV * DK), b_o: v(D),
  }));
  writeFileSync(join(dir, 'gqa', 'config.json'), JSON.stringify({
    n_heads: H, n_kv_heads: HKV, causal: true, rope: { theta: 10000 },
    description: 'seq_helper.mjs: GQA + RoPE + biases, seeded',
  }));
  return dir;
}

/** n tokens of d_model values from seed. */
export function tokens(n, seed) {
  const r = rng(seed);
  return Array.from({ length: n * D }, () => r());
}

export const ALL = [{ name: 'y' }, { name: 'attention' }, { name: 'scores' }];

/** One stateless causal request over every token: {y, attention, scores}. */
export async function full(d, xs, model = 'gqa') {
  const n = xs.length / D;
  const r = await infer(d, model, { inputs: [fp32('x', [1, n, D], xs)], outputs: ALL, parameters: { causal: true } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const o = Object.fromEntries(r.json.outputs.map((x) => [x.name, x.data]));
  return { n, ...o };
}

/** A step as tritonclient.http sends it: all three sequence parameters. */
export function stepBody(id, xs, { start = false, end = false, outputs = ALL, extra = {} } = {}) {
  return {
    inputs: [fp32('x', [1, xs.length / D, D], xs)], outputs,
    parameters: { sequence_id: id, sequence_start: start, sequence_end: end, ...extra },
  };
}

/** Rows t0.. of the full reference for a step of t tokens over s keys. */
export function expectRows(ref, t0, t) {
  const s = t0 + t;
  const y = ref.y.slice(t0 * D, s * D);
  const att = [], sc = [];
  for (let h = 0; h < H; h++)
    for (let i = t0; i < s; i++)
      for (let j = 0; j < s; j++) {
        att.push(ref.attention[(h * ref.n + i) * ref.n + j]);
        sc.push(ref.scores[(h * ref.n + i) * ref.n + j]);
      }
  return { y, attention: att, scores: sc };
}

/** Check a step's JSON answer against the reference rows. */
export function checkStep(r, ref, t0, t, what = '') {
  assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.json)}`);
  assert.equal(r.json.parameters.sequence_length, t0 + t, what);
  const e = expectRows(ref, t0, t);
  // every step asks for at least y: an answer without outputs must not
  // pass the loop below by checking nothing
  assert.ok(r.json.outputs.length > 0, `${what}: no outputs`);
  for (const o of r.json.outputs) {
    if (o.name === 'attention' || o.name === 'scores') assert.deepEqual(o.shape, [1, H, t, t0 + t], what);
    if (o.name === 'y') assert.deepEqual(o.shape, [1, t, D], what);
    const diff = maxDiff(o.data, e[o.name]);
    assert.ok(diff <= 1e-5, `${what} ${o.name}: max |diff| ${diff}`);
  }
}

export async function metric(d, name, model = 'gqa', extra = '') {
  const text = await (await fetch(`${d.url}/metrics`)).text();
  const re = new RegExp(`^${name}\\{model="${model}",version="1"${extra}\\} (\\d+)$`, 'm');
  const m = re.exec(text);
  assert.ok(m, `${name} for ${model} in /metrics`);
  return Number(m[1]);
}

/** Feed xs in chunks as sequence id; check every step; returns answers. */
export async function feed(d, id, xs, chunks, ref, opts = {}) {
  let t0 = 0;
  const out = [];
  for (let k = 0; k < chunks.length; k++) {
    const t = chunks[k];
    const r = await infer(d, 'gqa', stepBody(id, xs.slice(t0 * D, (t0 + t) * D),
      { start: k === 0, end: opts.end !== false && k === chunks.length - 1, extra: opts.extra || {} }));
    checkStep(r, ref, t0, t, `${id} chunk ${k} (${chunks})`);
    out.push(r);
    t0 += t;
  }
  return out;
}

/** grpcCall(session, msg[, headers]): a unary ModelInfer on an http2
 * session (headers added to its request's), its status and message. */
export function grpcCall(session, msg, headers = {}) {
  return new Promise((res, rej) => {
    const req = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelInfer',
      'content-type': 'application/grpc', te: 'trailers', ...headers });
    let trailers = {};
    req.on('response', (h) => { if (h['grpc-status']) trailers = h; }); // trailers-only
    req.on('trailers', (t) => { trailers = t; });
    req.on('error', rej);
    req.on('close', () => res({ code: Number(trailers['grpc-status']), msg: decodeURIComponent(trailers['grpc-message'] || '') }));
    req.resume();
    req.end(frame(msg));
  });
}

/** POST one step with node:http on its own connection; the promise of
 * its answer. */
export function send(url, body) {
  const u = new URL(url);
  return new Promise((done) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => done({ status: res.statusCode, json: JSON.parse(text) }));
    });
    req.on('error', (e) => done({ status: 0, json: { error: String(e) } }));
    req.end(body);
  });
}
