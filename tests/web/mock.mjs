// mock.mjs - a stand-in for attnd while developing the page (the browser
// tests start the real daemon; mock.test.mjs checks only that this serves
// the row entropy the page asks of it): serves server/web/ and answers the
// API calls the page makes with responses shaped as in API.md. sdpa is
// computed for real; "demo" is a toy with W_q = W_k = W_v = identity
// slices (d_model 16, 2 heads of 8). A retained map's planes: what=
// attention or entropy (each row's -sum p ln p; h=mean the mean of the
// heads' entropies; max= is 400, as attnd answers), b= and h= an index,
// all or mean, as FP32 whatever the format.
//   node tests/web/mock.mjs [port]      then open http://127.0.0.1:port/
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../server/web');
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
const maps = [];
let seq = 1;

function sdpa(q, k, v, T, S, dk, dv, causal) {
  const att = new Float64Array(T * S), sc = new Float64Array(T * S), out = new Float64Array(T * dv);
  for (let i = 0; i < T; i++) {
    let mx = -Infinity;
    for (let j = 0; j < S; j++) {
      let s = 0;
      for (let d = 0; d < dk; d++) s += q[i * dk + d] * k[j * dk + d];
      sc[i * S + j] = s / Math.sqrt(dk);
      if (!(causal && j > i)) mx = Math.max(mx, sc[i * S + j]);
    }
    let sum = 0;
    for (let j = 0; j < S; j++) if (!(causal && j > i)) { att[i * S + j] = Math.exp(sc[i * S + j] - mx); sum += att[i * S + j]; }
    for (let j = 0; j < S; j++) {
      att[i * S + j] /= sum;
      for (let d = 0; d < dv; d++) out[i * dv + d] += att[i * S + j] * v[j * dv + d];
    }
  }
  return { att, sc, out };
}

const demoMeta = {
  name: 'demo', platform: 'attnd_attention',
  inputs: [{ name: 'x', datatype: 'FP32', shape: [-1, -1, 16] }],
  outputs: [{ name: 'y', datatype: 'FP32', shape: [-1, -1, 16] }],
  parameters: { d_model: 16, n_heads: 2, n_kv_heads: 2, head_dim: 8, v_head_dim: 8, causal: false, rope: false },
};
const sdpaMeta = { name: 'sdpa', platform: 'attnd_sdpa', inputs: [], outputs: [], parameters: {} };

function send(res, status, obj) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(obj));
}

function retain(model, B, H, T, S, att, tokens, causal) {
  const id = `m${seq++}-abcdef`;
  maps.unshift({ id, model, shape: [B, H, T, S], created: new Date().toISOString(), att, tokens: tokens || [], causal });
  return id;
}

function infer(model, body) {
  const p = body.parameters || {};
  const inp = Object.fromEntries(body.inputs.map((t) => [t.name, t]));
  if (model === 'sdpa') {
    const q = inp.q, k = inp.k, v = inp.v;
    const T = q.shape.at(-2), dk = q.shape.at(-1), S = k.shape.at(-2), dv = v.shape.at(-1);
    const r = sdpa(q.data.flat(Infinity), k.data.flat(Infinity), v.data.flat(Infinity), T, S, dk, dv, !!p.causal);
    const lead = q.shape.slice(0, -2);
    const outs = [
      { name: 'output', datatype: 'FP32', shape: [...lead, T, dv], data: Array.from(r.out) },
      { name: 'attention', datatype: 'FP32', shape: [...lead, T, S], data: Array.from(r.att) },
      { name: 'scores', datatype: 'FP32', shape: [...lead, T, S], data: Array.from(r.sc) },
    ];
    const params = {};
    if (p.retain) params.map_id = retain('sdpa', 1, 1, T, S, r.att, p.tokens, !!p.causal);
    return { model_name: 'sdpa', outputs: outs, parameters: params };
  }
  const x = inp.x.data.flat(Infinity), [, T, D] = inp.x.shape, H = 2, dk = 8;
  const att = [], sc = [], q = [], v = [];
  for (let h = 0; h < H; h++) {
    const qh = [];
    for (let i = 0; i < T; i++) for (let d = 0; d < dk; d++) qh.push(x[i * D + h * dk + d]);
    const r = sdpa(qh, qh, qh, T, T, dk, dk, !!p.causal);
    att.push(...r.att); sc.push(...r.sc); q.push(...qh); v.push(...qh);
  }
  const params = {};
  if (p.retain) params.map_id = retain('demo', 1, H, T, T, Float64Array.from(att), p.tokens, !!p.causal);
  return {
    model_name: 'demo', parameters: params,
    outputs: [
      { name: 'attention', datatype: 'FP32', shape: [1, H, T, T], data: att },
      { name: 'scores', datatype: 'FP32', shape: [1, H, T, T], data: sc },
      { name: 'q', datatype: 'FP32', shape: [1, H, T, dk], data: q },
      { name: 'k', datatype: 'FP32', shape: [1, H, T, dk], data: q },
      { name: 'v', datatype: 'FP32', shape: [1, H, T, dk], data: v },
      { name: 'y', datatype: 'FP32', shape: [1, T, D], data: x },
    ],
  };
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    if (p === '/' || p.startsWith('/web/')) {
      const f = path.join(root, p === '/' ? 'index.html' : path.basename(p));
      if (!fs.existsSync(f)) return send(res, 404, { error: 'no such file' });
      res.writeHead(200, { 'Content-Type': types[path.extname(f)] || 'text/plain' });
      return res.end(fs.readFileSync(f));
    }
    if (p === '/v2/repository/index') return send(res, 200, [{ name: 'demo', state: 'READY' }, { name: 'sdpa', state: 'READY' }]);
    let m = p.match(/^\/v2\/models\/([^/]+)$/);
    if (m) return m[1] === 'demo' ? send(res, 200, demoMeta) : m[1] === 'sdpa' ? send(res, 200, sdpaMeta) : send(res, 404, { error: 'unknown model' });
    m = p.match(/^\/v2\/models\/([^/]+)\/infer$/);
    if (m) {
      try { return send(res, 200, infer(m[1], JSON.parse(body))); } catch (e) { return send(res, 400, { error: e.message }); }
    }
    if (p === '/v2/maps') return send(res, 200, { maps: maps.map(({ id, model, shape, created }) => ({ id, model, shape, created })) });
    m = p.match(/^\/v2\/maps\/([^/]+)(\/attention)?$/);
    if (m) {
      const e = maps.find((x) => x.id === m[1]);
      if (!e) return send(res, 404, { error: `map ${m[1]}: not retained` });
      if (!m[2]) return send(res, 200, { id: e.id, model: e.model, shape: e.shape, created: e.created, causal: e.causal, tokens: e.tokens, key_tokens: e.tokens, version: 0 });
      const [B, H, T, S] = e.shape, q = url.searchParams;
      const what = q.get('what') || 'attention', bq = q.get('b') || '0', hq = q.get('h') || 'mean';
      if (what !== 'attention' && what !== 'entropy')
        return send(res, 400, { error: 'what: the mock serves attention and entropy only' });
      if (what === 'entropy' && q.has('max'))
        return send(res, 400, { error: 'max: what=entropy is one value per query row, never pooled' });
      const items = bq === 'all' ? [...Array(B).keys()] : [Number(bq)];
      const heads = hq === 'all' || hq === 'mean' ? [...Array(H).keys()] : [Number(hq)];
      if (items.some((b) => !(b >= 0 && b < B)) || heads.some((h) => !(h >= 0 && h < H)))
        return send(res, 400, { error: `b, h: expected 0..${B - 1} / 0..${H - 1}, all or mean` });
      // a plane: the head's rows [T, S] (attention) or their entropies,
      // -sum p ln p over each row ([T]; 0 ln 0 = 0); h=mean the mean of
      // the heads' planes (of entropy: of the heads' entropies, as attnd)
      const plane = (b, h) => {
        const w = e.att.subarray((b * H + h) * T * S, (b * H + h + 1) * T * S);
        if (what === 'attention') return w;
        const out = new Float64Array(T);
        for (let i = 0; i < T; i++)
          for (let j = 0; j < S; j++) { const p = w[i * S + j]; if (p > 0) out[i] -= p * Math.log(p); }
        return out;
      };
      const n = what === 'entropy' ? T : T * S, outs = [];
      for (const b of items) {
        if (hq !== 'mean') { for (const h of heads) outs.push(plane(b, h)); continue; }
        const m = new Float64Array(n);
        for (const h of heads) plane(b, h).forEach((v, i) => { m[i] += v / H; });
        outs.push(m);
      }
      const f = new Float32Array(outs.length * n);
      outs.forEach((o, k) => f.set(o, k * n));
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Map-Version': '0',
        'Map-Shape': [...(bq === 'all' ? [B] : []), ...(hq === 'all' ? [H] : []), T, what === 'entropy' ? 1 : S].join(',') });
      return res.end(Buffer.from(f.buffer));
    }
    send(res, 404, { error: 'no such route' });
  });
});
server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => console.log(`mock on http://127.0.0.1:${server.address().port}/`));
