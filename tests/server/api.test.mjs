// api.test.mjs - every endpoint of API.md and its error codes.
import assert from 'node:assert/strict';
import { cpSync, mkdirSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { deflateSync, gzipSync } from 'node:zlib';
import { after, before, test } from 'node:test';
import { REFS, ROOT, SLOW, binaryRequest, fp32, infer, post, promtool, start } from './helper.mjs';
import { D, DK, H, HKV, gqaModels } from './seq_helper.mjs';
import { D16_ST, body } from './repo_helper.mjs';

let d;
before(async () => { d = await start(); });
after(async () => { const r = await d.stop(); assert.equal(r.code, 0, d.log()); });

const get = (p, h) => fetch(d.url + p, { headers: h });

test('health: live and ready answer 200 with an empty body', async () => {
  for (const p of ['/v2/health/live', '/v2/health/ready']) {
    const r = await get(p);
    assert.equal(r.status, 200, p);
    assert.equal(await r.text(), '');
  }
});

test('server metadata names attnd and its extensions', async () => {
  const r = await get('/v2');
  assert.equal(r.status, 200);
  const j = await r.json();
  assert.equal(j.name, 'attnd');
  assert.equal(typeof j.version, 'string');
  assert.deepEqual(j.extensions, ['binary_tensor_data', 'model_repository', 'statistics', 'attention_maps', 'sequences']);
});

test('model metadata: inputs, outputs and parameters of a loaded model', async () => {
  const r = await get('/v2/models/tiny');
  assert.equal(r.status, 200);
  const j = await r.json();
  assert.equal(j.name, 'tiny');
  assert.deepEqual(j.inputs.find((t) => t.name === 'x'), { name: 'x', datatype: 'FP32', shape: [-1, -1, 8] });
  assert.deepEqual(j.outputs.find((t) => t.name === 'attention').shape, [-1, 2, -1, -1]);
  assert.deepEqual(j.outputs.map((t) => t.name), ['y', 'attention', 'scores', 'q', 'k', 'v']);
  for (const [k, v] of Object.entries({ d_model: 8, n_heads: 2, n_kv_heads: 2, head_dim: 4, v_head_dim: 4, causal: false, rope: false }))
    assert.equal(j.parameters[k], v, k);
  const s = await (await get('/v2/models/sdpa')).json();
  assert.deepEqual(s.inputs.map((t) => t.name), ['q', 'k', 'v', 'mask']);
  assert.deepEqual(s.outputs.map((t) => t.name), ['output', 'attention', 'scores']);
  // one rank each (README: the protocol has none that varies); sdpa's
  // leading dimensions are said in its parameters
  for (const t of [...s.inputs, ...s.outputs]) assert.deepEqual(t.shape, [-1, -1], t.name);
  assert.equal(s.parameters.leading_dims, 'none, [B] or [B, H] before the last two dims of q, k, v');
  assert.deepEqual(j.inputs.find((t) => t.name === 'mask'), { name: 'mask', datatype: 'BOOL', shape: [-1, -1, -1] });
  assert.deepEqual(j.versions, ['1']);
  assert.deepEqual([j.platform, s.platform], ['attnd_attention', 'attnd_sdpa']);
});

test('model metadata: scale, the float q is multiplied by (config.json\'s, else 1/sqrt(head_dim) as a float); sdpa has none', async () => {
  assert.equal((await (await get('/v2/models/tiny')).json()).parameters.scale, 0.5, 'tiny: head_dim 4');
  // d_model 16: 2 heads of 8 (1/sqrt(8) is no float: rounded once), and
  // the same with a scale of its own (0.3 as a float)
  for (const [name, cfg, want] of [['scale_default', { n_heads: 2 }, Math.fround(1 / Math.sqrt(8))],
    ['scale_custom', { n_heads: 2, scale: 0.3 }, Math.fround(0.3)]]) {
    const r = await post(`${d.url}/v2/repository/models/${name}/load`, body(JSON.stringify(cfg), D16_ST));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const p = (await (await get(`/v2/models/${name}`)).json()).parameters;
    assert.equal(p.head_dim, 8, name);
    assert.equal(p.scale, want, name);
    // the scores it returns are q's with that scale, times k
    const x = Array.from({ length: 3 * 16 }, (_, i) => Math.sin(i) / 2);
    const o = await infer(d, name, { inputs: [fp32('x', [1, 3, 16], x)], parameters: { retain: true },
      outputs: [{ name: 'scores' }, { name: 'q' }, { name: 'k' }] });
    assert.equal(o.status, 200, JSON.stringify(o.json));
    const out = Object.fromEntries(o.json.outputs.map((t) => [t.name, t.data]));
    let dot = 0;
    for (let c = 0; c < 8; c++) dot += out.q[8 + c] * out.k[16 + c]; // head 0, row 1 . key 2
    assert.ok(Math.abs(out.scores[5] - dot * want) < 1e-6, `${name}: ${out.scores[5]} vs ${dot * want}`);
    // and a map it retained says so too, beside its d_k
    const m = await (await get(`/v2/maps/${o.json.parameters.map_id}`)).json();
    assert.deepEqual([m.d_k, m.scale], [8, want], name);
  }
  assert.equal((await (await get('/v2/models/sdpa')).json()).parameters.scale, undefined);
});

test('model configuration (Triton\'s, for tritonclient\'s get_model_config and perf_analyzer): the metadata\'s tensors and parameters', async () => {
  for (const name of ['tiny', 'sdpa']) {
    const meta = await (await get(`/v2/models/${name}`)).json();
    for (const path of [`/v2/models/${name}/config`, `/v2/models/${name}/versions/1/config`]) {
      const r = await get(path);
      assert.equal(r.status, 200, path);
      const c = await r.json();
      assert.equal(c.name, name);
      assert.equal(c.platform, meta.platform);
      assert.equal(c.max_batch_size, 0, 'the batch dimension is in dims');
      const tensors = (ts) => ts.map((t) => ({ name: t.name, data_type: `TYPE_${t.datatype}`, dims: t.shape }));
      assert.deepEqual(c.input, tensors(meta.inputs));
      assert.deepEqual(c.output, tensors(meta.outputs));
      assert.deepEqual(Object.keys(c.parameters).sort(), Object.keys(meta.parameters).sort());
      for (const [k, v] of Object.entries(meta.parameters))
        assert.deepEqual(c.parameters[k], { string_value: String(v) }, k);
    }
  }
  assert.deepEqual((await (await get('/v2/models/tiny/config')).json()).input[0], { name: 'x', data_type: 'TYPE_FP32', dims: [-1, -1, 8] });
  const r = await get('/v2/models/nope/config');
  assert.equal(r.status, 404);
  assert.match((await r.json()).error, /model 'nope': not found/);
});

test('model metadata has each model\'s own dimensions: a cross-attention model\'s context width, a GQA model\'s kv heads', async () => {
  // cross: tests/core/gen_model_fixtures.py's nn.MultiheadAttention(32, 4,
  // kdim = vdim = 24); gqa: seq_helper.mjs's D, H, HKV, DK
  const dir = gqaModels();
  mkdirSync(join(dir, 'cross'));
  for (const f of ['config.json', 'model.safetensors'])
    cpSync(join(ROOT, 'tests', 'core', 'model_fixtures', 'cross', f), join(dir, 'cross', f));
  const e = await start({ dir });
  try {
    const shapes = async (name) => {
      const j = await (await fetch(`${e.url}/v2/models/${name}`)).json();
      return Object.fromEntries([...j.inputs, ...j.outputs].map((t) => [t.name, t.shape]));
    };
    const c = await shapes('cross');
    assert.deepEqual(c.x, [-1, -1, 32]);
    assert.deepEqual(c.context, [-1, -1, 24]);
    assert.deepEqual(c.y, [-1, -1, 32]);
    assert.deepEqual(c.k, [-1, 4, -1, 8]);
    const g = await shapes('gqa');
    assert.deepEqual(g.context, [-1, -1, D]);
    assert.deepEqual(g.attention, [-1, H, -1, -1]);
    assert.deepEqual(g.q, [-1, H, -1, DK]);
    assert.deepEqual(g.k, [-1, HKV, -1, DK]);
    assert.deepEqual(g.v, [-1, HKV, -1, DK]);
  } finally { assert.equal((await e.stop()).code, 0, e.log()); }
});

test('versioned paths are aliases of version 1; other versions are 404', async () => {
  assert.equal((await get('/v2/models/tiny/versions/1')).status, 200);
  assert.equal((await get('/v2/models/tiny/versions/1/ready')).status, 200);
  const r = await get('/v2/models/tiny/versions/2');
  assert.equal(r.status, 404);
  assert.match((await r.json()).error, /version '2'/);
  const x = REFS.causal;
  const p = await post(`${d.url}/v2/models/tiny/versions/1/infer`, { inputs: [fp32('x', x.shape, x.x)] });
  assert.equal(p.status, 200);
  assert.equal(p.json.model_name, 'tiny');
  // the alias only right after the model's name
  for (const path of ['/v2/models/tiny/ready/versions/1', '/v2/models/tiny/config/versions/1', '/v2/models/tiny/stats/versions/1/x']) {
    const n = await get(path);
    assert.equal(n.status, 404, path);
    assert.match((await n.json()).error, /no endpoint/, path);
  }
  // the 404 and 405 name the path sent, not the one the alias folds it
  // to (they said "no endpoint /v2/models/tiny/infer/")
  const slash = await post(`${d.url}/v2/models/tiny/versions/1/infer/`, {});
  assert.equal(slash.status, 404);
  assert.equal(slash.json.error, 'path: no endpoint /v2/models/tiny/versions/1/infer/');
  const put = await fetch(`${d.url}/v2/models/tiny/versions/1/infer`, { method: 'PUT' });
  assert.equal(put.status, 405);
  assert.equal((await put.json()).error, 'method: PUT is not allowed on /v2/models/tiny/versions/1/infer (allowed: POST)');
});

test('model ready: 200 for loaded models, 404 for unknown ones', async () => {
  assert.equal((await get('/v2/models/tiny/ready')).status, 200);
  assert.equal((await get('/v2/models/sdpa/ready')).status, 200);
  const r = await get('/v2/models/nope/ready');
  assert.equal(r.status, 404);
  assert.match((await r.json()).error, /model 'nope'/);
});

test('unknown model and unknown path: 404 naming them', async () => {
  let r = await get('/v2/models/nope');
  assert.equal(r.status, 404);
  assert.match((await r.json()).error, /model 'nope': not found/);
  const p = await infer(d, 'nope', { inputs: [] });
  assert.equal(p.status, 404);
  assert.match(p.json.error, /model 'nope'/);
  // a mistyped name is told the names it could have meant (it said only
  // "not found"): the models served, as the index has them READY, on
  // infer, metadata, config, ready and stats alike
  const served = (await post(`${d.url}/v2/repository/index`, '')).json.filter((m) => m.state === 'READY').map((m) => m.name);
  assert.ok(served.includes('sdpa') && served.includes('tiny'), served.join());
  const want = `model 'dmeo': not found; served: ${served.join(', ')} (POST /v2/repository/index lists every model, loaded or not)`;
  assert.equal((await infer(d, 'dmeo', { inputs: [] })).json.error, want);
  for (const q of ['', '/config', '/ready', '/stats']) {
    r = await get(`/v2/models/dmeo${q}`);
    assert.equal(r.status, 404, q);
    assert.equal((await r.json()).error, want, q);
  }
  r = await get('/v3/whatever');
  assert.equal(r.status, 404);
  assert.match((await r.json()).error, /\/v3\/whatever/);
});

test('a %00 in a path or a query is never decoded: it cuts nothing off (404 / 400), where other %XX decode as before', async () => {
  // decoded, its NUL ended the string: /v2/health/live%00junk was served
  // as /v2/health/live
  for (const p of ['/v2/health/live%00', '/v2/health/live%00junk', '/v2/models/sdpa/ready%00/x', '/v2/models/sdpa%00x']) {
    const r = await get(p);
    assert.equal(r.status, 404, p);
    assert.match((await r.json()).error, /%00/, p);
  }
  const x = REFS.causal;
  const p = await post(`${d.url}/v2/models/tiny/infer%00/../x`, { inputs: [fp32('x', x.shape, x.x)] });
  assert.equal(p.status, 404, JSON.stringify(p.json));
  // decoded, format=f32%00 read as f32, and the unknown map was 404
  const q = await get('/v2/maps/m1-abc/attention?format=f32%00');
  assert.equal(q.status, 400);
  assert.equal((await q.json()).error, 'format: expected json, f32 or npy');
  assert.equal((await get('/v2/health/%6Cive')).status, 200, '%6C is l');
  assert.equal((await get('/v2/models/sdpa%2Dx/ready')).status, 404, '%2D is -: the model sdpa-x');
});

test('a request target in absolute form (http://host/path, RFC 9112 3.2.2) is served as its path', async () => {
  // review: 'GET http://host/v2/health/ready' answered 404 "no endpoint
  // http://host/v2/health/ready"; a server must accept the absolute form
  const answer = (req) => new Promise((res, rej) => {
    const s = connect(d.port, '127.0.0.1');
    let text = '';
    s.on('data', (b) => { text += b; });
    s.on('end', () => res(text));
    s.on('error', rej);
    s.write(req); // not end(): MHD takes a half-closed connection for a gone client
  });
  const host = `127.0.0.1:${d.port}`;
  let a = await answer(`GET http://${host}/v2/health/ready HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  assert.match(a, /^HTTP\/1\.1 200 /, a);
  a = await answer(`GET HTTP://${host}/v2/models/sdpa/versions/1?x=1 HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  assert.match(a, /^HTTP\/1\.1 200 /, a);
  assert.match(a, /"name":"sdpa"/, a);
  const body = JSON.stringify({ inputs: [fp32('q', [1, 2], [1, 0]), fp32('k', [1, 2], [1, 0]), fp32('v', [1, 2], [3, 4])] });
  a = await answer(`POST https://elsewhere.example:9/v2/models/sdpa/infer HTTP/1.1\r\nHost: ${host}\r\n` +
    `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  assert.match(a, /^HTTP\/1\.1 200 /, a);
  a = await answer(`GET http://${host} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  assert.match(a, /^HTTP\/1\.1 200 /, a); // nothing after the authority: "/", the page
  assert.match(a, /\r\nContent-Type: text\/html/, a);
  // a path that merely starts so is no absolute form
  assert.equal((await get('/http://x/v2/health/ready')).status, 404);
});

test('the page: a 304 says the 200\'s Content-Length and sends no body; the next request on the connection is read', async () => {
  // review: libmicrohttpd said Content-Length: 0 on an empty answer, and
  // RFC 9110 8.6 allows a 304 only the length its 200 would have
  for (const path of ['/', '/web/app.js']) {
    const ok = await get(path);
    const [etag, len] = [ok.headers.get('etag'), (await ok.arrayBuffer()).byteLength];
    for (const method of ['GET', 'HEAD']) {
      const got = await new Promise((res, rej) => {
        let buf = '';
        const sock = connect(d.port, '127.0.0.1', () => sock.write(
          `${method} ${path} HTTP/1.1\r\nHost: x\r\nIf-None-Match: ${etag}\r\n\r\n` +
          'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
        sock.on('data', (b) => { buf += b.toString('latin1'); });
        sock.on('close', () => res(buf));
        sock.on('error', rej);
      });
      const what = `${method} ${path}`;
      const first = got.slice(0, got.indexOf('\r\n\r\n') + 4);
      assert.match(first, /^HTTP\/1\.1 304 /, what);
      assert.match(first, new RegExp(`\r\nContent-Length: ${len}\r\n`, 'i'), `${what}: ${first}`);
      // no body: the next answer follows the 304's head at once
      assert.match(got.slice(first.length), /^HTTP\/1\.1 200 /, what);
    }
  }
});

test('the page: If-None-Match matches as RFC 9110 13.1.2 says (weakly, any tag of a list, *), 304; other tags 200', async () => {
  // review: only the exact single tag gave 304: a proxy that weakens ETags
  // (W/"...", as nginx's gzip does) or a list made every revalidation
  // download the page again
  const etag = (await get('/')).headers.get('etag');
  assert.match(etag, /^"[0-9a-f]+"$/);
  for (const inm of [etag, `W/${etag}`, `"a", ${etag}`, `"x,y",W/${etag} `, '*', ` ${etag}`]) {
    const r = await get('/', { 'If-None-Match': inm });
    assert.equal(r.status, 304, inm);
    assert.equal(r.headers.get('etag'), etag);
  }
  for (const inm of ['"a"', etag.slice(0, -2) + '"', `W/"a", "b"`, etag.slice(1, -1), '', '"']) {
    const r = await get('/', { 'If-None-Match': inm });
    assert.equal(r.status, 200, inm);
    assert.match(await r.text(), /^<!doctype html>/);
  }
});

test('sdpa: a d_k or d_v over 2^20 is 400 naming the input that has it', async () => {
  // binary zeros: 4-8 MB, inside the default --max-body
  const big = 2 ** 20 + 1;
  const send = async (shapes) => {
    const { body, headerLen } = binaryRequest({
      inputs: Object.entries(shapes).map(([name, shape]) => ({ name, datatype: 'FP32', shape, parameters: { binary_data_size: shape[0] * shape[1] * 4 } })),
    }, Object.values(shapes).map((shape) => Buffer.alloc(shape[0] * shape[1] * 4)));
    const r = await fetch(`${d.url}/v2/models/sdpa/infer`, { method: 'POST', body, headers: { 'Inference-Header-Content-Length': String(headerLen) } });
    return [r.status, (await r.json()).error];
  };
  assert.deepEqual(await send({ q: [1, 1], k: [1, 1], v: [1, big] }),
    [400, 'inputs[v].shape: dimensions too large (d_v at most 2^20)']);
  assert.deepEqual(await send({ q: [1, big], k: [1, big], v: [1, 1] }),
    [400, 'inputs[q].shape: dimensions too large (T at most 2^30, d_k 2^20)']);
});

test('wrong method: 405 with Allow', async () => {
  let r = await get('/v2/models/tiny/infer');
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  assert.match((await r.json()).error, /method: GET/);
  r = await fetch(d.url + '/v2/health/live', { method: 'POST' });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'GET, HEAD');
  r = await fetch(d.url + '/v2/models/tiny', { method: 'DELETE' });
  assert.equal(r.status, 405);
  assert.match((await r.json()).error, /method: DELETE is not allowed on \/v2\/models\/tiny/);
  // any other method is named as sent, in the answer and in the log
  r = await fetch(d.url + '/v2/models/tiny/infer', { method: 'PUT' });
  assert.equal(r.status, 405);
  assert.match((await r.json()).error, /method: PUT is not allowed on \/v2\/models\/tiny\/infer \(allowed: POST\)/);
  r = await fetch(d.url + '/v2/sequences/no-such-seq', { method: 'DELETE' });
  assert.equal(r.status, 404);
  const log = await d.logged(/ PUT \/v2\/models\/tiny\/infer 405/);
  assert.match(log, / PUT \/v2\/models\/tiny\/infer 405/);
  assert.match(await d.logged(/ DELETE \/v2\/sequences\/no-such-seq 404/), / DELETE \/v2\/sequences\/no-such-seq 404/);
  assert.match(await d.logged(/ DELETE \/v2\/models\/tiny 405/), / DELETE \/v2\/models\/tiny 405/);
});

test('a method the server does not recognise: 501 on any path, named as sent', async () => {
  // RFC 9110 9.1: 501 for a method the server does not recognise; 405
  // (above) is for one it knows, on a resource that does not allow it
  // (PATCH among them). Methods are case-sensitive: get is not GET.
  const implemented = /^method: (\S+) is not one this server implements \(it serves GET, HEAD, POST, DELETE and OPTIONS\)$/;
  const raw = (text) => new Promise((res, rej) => {
    let got = '';
    const sock = connect(d.port, '127.0.0.1', () => sock.write(text));
    sock.on('data', (b) => { got += b; });
    sock.on('close', () => res(got));
    sock.on('error', rej);
  });
  // (fetch sends get as GET)
  const lower = await raw('get /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.match(lower, /^HTTP\/1\.1 501 /);
  assert.equal(JSON.parse(lower.slice(lower.indexOf('\r\n\r\n') + 4)).error.match(implemented)?.[1], 'get');
  for (const [method, path] of [['FOO', '/v2/health/ready'], ['FOO', '/v2/no-such-path'],
    ['PROPFIND', '/v2/models/tiny/infer']]) {
    const r = await fetch(d.url + path, { method });
    assert.equal(r.status, 501, `${method} ${path}`);
    assert.equal(r.headers.get('allow'), null, `${method} ${path}`);
    assert.equal((await r.json()).error.match(implemented)?.[1], method, `${method} ${path}`);
  }
  const patch = await fetch(d.url + '/v2/health/ready', { method: 'PATCH' });
  assert.equal(patch.status, 405);
  assert.equal(patch.headers.get('allow'), 'GET, HEAD');
  // one with more than letters (or longer than 15) is named OTHER
  for (const method of ['M-SEARCH', 'VERYLONGMETHODNAME']) {
    const r = await fetch(d.url + '/v2/models/tiny/infer', { method });
    assert.equal(r.status, 501, method);
    assert.equal((await r.json()).error.match(implemented)?.[1], 'OTHER', method);
  }
  // with a body: answered from its head, its connection closed
  const c = await raw('FOO /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n');
  assert.match(c, /^HTTP\/1\.1 501 /);
  assert.match(c, /\r\nConnection: close\r\n/i);
  assert.match(await d.logged(/ FOO \/v2\/no-such-path 501/), / FOO \/v2\/no-such-path 501/);
  assert.match(await d.logged(/ OTHER \/v2\/models\/tiny\/infer 501/), / OTHER \/v2\/models\/tiny\/infer 501/);
});

test('Allow (405 and OPTIONS) names every method of the path, and only those', async () => {
  // /v2/sequences/{id} takes GET and DELETE: a 405 naming DELETE alone
  // sent a user who had PUT it away from the GET that works
  // (a GET route serves HEAD too: it is named with it)
  const cases = [['/v2/sequences/s1', 'GET, HEAD, DELETE'], ['/v2/sequences', 'GET, HEAD'],
    ['/v2/models/tiny/infer', 'POST'], ['/v2/repository/index', 'POST'], ['/v2/maps', 'GET, HEAD']];
  for (const [p, allow] of cases) {
    let r = await fetch(d.url + p, { method: 'PUT' });
    assert.equal(r.status, 405, p);
    assert.equal(r.headers.get('allow'), allow, p);
    assert.match((await r.json()).error, new RegExp(`\\(allowed: ${allow}\\)$`), p);
    r = await fetch(d.url + p, { method: 'OPTIONS' });
    assert.equal(r.status, 204, p);
    assert.equal(r.headers.get('allow'), `${allow}, OPTIONS`, p);
    if (allow.includes('HEAD')) {
      r = await fetch(d.url + p, { method: 'HEAD' });
      assert.notEqual(r.status, 405, `${p}: HEAD, as Allow says`);
    }
  }
});

test('repository index lists loaded models with their state', async () => {
  const r = await post(`${d.url}/v2/repository/index`, '');
  assert.equal(r.status, 200);
  const names = r.json.map((m) => m.name);
  assert.ok(names.includes('sdpa') && names.includes('tiny'), names.join());
  for (const m of r.json) {
    assert.equal(m.state, 'READY', m.name);
    assert.equal(m.reason, '');
  }
  const bad = await post(`${d.url}/v2/repository/index`, '{"ready": 3}');
  assert.equal(bad.status, 400);
  assert.match(bad.json.error, /ready/);
  for (const body of ['[]', '{"ready": tru']) {
    const nobj = await post(`${d.url}/v2/repository/index`, body);
    assert.equal(nobj.status, 400, body);
    assert.match(nobj.json.error, /^body: (not a JSON object \(.+\)|expected a JSON object, got an array)$/, body);
  }
});

test('statistics: Triton extension shape, counting requests', async () => {
  const x = REFS.causal;
  const before = (await (await get('/v2/models/tiny/stats')).json()).model_stats[0];
  assert.equal((await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)] })).status, 200);
  const j = await (await get('/v2/models/tiny/stats')).json();
  const s = j.model_stats[0];
  assert.equal(s.name, 'tiny');
  assert.equal(s.version, '1');
  assert.equal(s.inference_count, before.inference_count + 1);
  assert.equal(s.inference_stats.success.count, before.inference_stats.success.count + 1);
  for (const k of ['success', 'fail', 'queue', 'compute_input', 'compute_infer', 'compute_output', 'cache_hit', 'cache_miss']) {
    assert.equal(typeof s.inference_stats[k].count, 'number', k);
    assert.equal(typeof s.inference_stats[k].ns, 'number', k);
  }
  // no response cache: Triton's cache_hit and cache_miss at 0, but there
  // (perf_analyzer over HTTP reads both, as rapidjson members)
  assert.deepEqual([s.inference_stats.cache_hit, s.inference_stats.cache_miss], [{ count: 0, ns: 0 }, { count: 0, ns: 0 }]);
  assert.ok(s.last_inference > 0);
  const all = await (await get('/v2/models/stats')).json();
  assert.ok(all.model_stats.some((m) => m.name === 'sdpa'));
  assert.equal((await get('/v2/models/nope/stats')).status, 404);
});

test('metrics: Prometheus text that promtool accepts, with Triton-like names', async () => {
  await infer(d, 'sdpa', { inputs: [] }); // a failure, counted by reason
  const r = await get('/metrics');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const text = await r.text();
  for (const n of ['attnd_inference_request_success_total', 'attnd_inference_request_failure_total',
    'attnd_inference_count_total', 'attnd_inference_exec_count_total',
    'attnd_inference_queue_duration_seconds_total', 'attnd_inference_compute_infer_duration_seconds_total',
    'attnd_inference_pending_requests', 'attnd_inference_batch_size_bucket'])
    assert.match(text, new RegExp(`^${n}\\{model="tiny"`, 'm'), n);
  assert.match(text, /^attnd_inference_request_failure_total\{model="sdpa",version="1",reason="bad_request"\} [1-9]/m);
  const p = promtool(text);
  assert.equal(p.error, undefined, 'promtool must be installed (tools/install-deps.sh test)');
  assert.equal(p.status, 0, p.stdout + p.stderr);
  assert.equal(p.stdout + p.stderr, '');
});

test('request ids are echoed, also when they need escaping', async () => {
  const q = REFS.sdpa_causal;
  const r = await infer(d, 'sdpa', { id: 'a"b\\c', inputs: [fp32('q', q.q_shape, q.q), fp32('k', q.k_shape, q.k), fp32('v', q.v_shape, q.v)] });
  assert.equal(r.status, 200);
  assert.equal(r.json.id, 'a"b\\c');
  assert.equal(r.json.model_name, 'sdpa');
});

test('Triton\'s classification (tritonclient\'s class_count) is refused naming the output, not answered with the whole tensor', async () => {
  // it was ignored: y came back as its 16 FP32 values, which a client
  // asking for the top 2 classes (BYTES "value:index") reads as classes
  const x = REFS.causal;
  const r = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)],
    outputs: [{ name: 'y', parameters: { binary_data: false, classification: 2 } }] });
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.match(r.json.error, /^outputs\[0\]\.parameters\.classification: attnd does not serve Triton's classification extension/);
  const none = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)],
    outputs: [{ name: 'y', parameters: { classification: 0 } }] });
  assert.equal(none.status, 200, 'classification 0 asks for none');
});

test('a body with a Content-Encoding other than identity: 415 naming it, from its head, Accept-Encoding: identity', async () => {
  // attnd decompresses nothing: Triton's request_compression_algorithm
  // (tritonclient's deflate) got "expected a JSON object, got 'x..V'",
  // and a body marked br but sent plain was served as if unmarked
  const x = REFS.causal;
  const json = JSON.stringify({ inputs: [fp32('x', x.shape, x.x)] });
  const send = (enc, body) => fetch(`${d.url}/v2/models/tiny/infer`, { method: 'POST', body, headers: { 'Content-Encoding': enc } });
  for (const [enc, body] of [['deflate', deflateSync(json)], ['gzip', gzipSync(json)], ['br', json], ['identity, gzip', json]]) {
    const r = await send(enc, body);
    assert.equal(r.status, 415, enc);
    assert.equal(r.headers.get('accept-encoding'), 'identity', enc);
    assert.equal((await r.json()).error, `Content-Encoding: '${enc}' is not taken: attnd reads request bodies uncompressed; send the body as it is, without the header`);
  }
  for (const enc of ['identity', 'Identity']) assert.equal((await send(enc, json)).status, 200, enc);
  // the other routes with a body too; one without a body is unaffected
  const idx = await fetch(`${d.url}/v2/repository/index`, { method: 'POST', body: '{}', headers: { 'Content-Encoding': 'gzip' } });
  assert.equal(idx.status, 415);
  assert.equal((await get('/v2/models/tiny', { 'Content-Encoding': 'gzip' })).status, 200);
});

test('answers\' Content-Type: JSON, binary outputs behind Inference-Header-Content-Length; errors are {"error"} alone; maps listed newest first', async () => {
  const x = REFS.causal;
  const json = await fetch(`${d.url}/v2/models/tiny/infer`, { method: 'POST', body: JSON.stringify({ inputs: [fp32('x', x.shape, x.x)] }) });
  assert.equal(json.status, 200);
  assert.equal(json.headers.get('content-type'), 'application/json');
  assert.equal(json.headers.get('inference-header-content-length'), null, 'all JSON: no header length');
  const bin = await fetch(`${d.url}/v2/models/tiny/infer`, { method: 'POST',
    body: JSON.stringify({ inputs: [fp32('x', x.shape, x.x)], outputs: [{ name: 'y', parameters: { binary_data: true } }] }) });
  assert.equal(bin.status, 200);
  assert.equal(bin.headers.get('content-type'), 'application/octet-stream');
  const buf = Buffer.from(await bin.arrayBuffer());
  const hl = Number(bin.headers.get('inference-header-content-length'));
  const head = JSON.parse(buf.subarray(0, hl).toString());
  const n = x.shape.reduce((a, b) => a * b, 1);
  assert.deepEqual(head.outputs[0].parameters, { binary_data_size: 4 * n });
  assert.equal(buf.length, hl + 4 * n);
  for (const [method, path, status] of [['GET', '/v2/models/nope', 404], ['PUT', '/v2/models/tiny/infer', 405],
    ['POST', '/v2/models/tiny/infer', 400], ['GET', '/v2/nothing', 404]]) {
    const r = await fetch(d.url + path, { method, body: method === 'POST' ? '{}' : undefined });
    assert.equal(r.status, status, path);
    assert.equal(r.headers.get('content-type'), 'application/json', path);
    const j = await r.json();
    assert.deepEqual(Object.keys(j), ['error'], path);
    assert.equal(typeof j.error, 'string', path);
  }
  const ids = [];
  for (let i = 0; i < 2; i++) ids.push((await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)], parameters: { retain: true } })).json.parameters.map_id);
  const listed = (await (await get('/v2/maps')).json()).maps.map((m) => m.id);
  assert.deepEqual(listed.filter((id) => ids.includes(id)), [ids[1], ids[0]], 'newest first');
});

test('Triton\'s shared-memory parameters are refused naming the tensor and the parameter, on outputs and inputs', async () => {
  // tritonclient.http's set_shared_memory: an output's was ignored (y came
  // back in the body, 200, while the client read its region's stale
  // bytes); an input's was answered 'missing data', naming no region
  const x = REFS.causal;
  const r = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)],
    outputs: [{ name: 'y', parameters: { shared_memory_region: 'out0', shared_memory_byte_size: 128 } }] });
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.match(r.json.error, /^outputs\[0\]\.parameters\.shared_memory_region: attnd does not serve Triton's shared-memory extension \(system or CUDA; \/v2 does not list it\); ask for the output without it: it comes in the answer$/);
  const off = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)],
    outputs: [{ name: 'y' }, { name: 'attention', parameters: { shared_memory_offset: 0 } }] });
  assert.equal(off.status, 400, JSON.stringify(off.json));
  assert.match(off.json.error, /^outputs\[1\]\.parameters\.shared_memory_offset: /);
  const inp = await infer(d, 'tiny', { inputs: [{ name: 'x', datatype: 'FP32', shape: x.shape,
    parameters: { shared_memory_region: 'in0', shared_memory_byte_size: 4 * x.x.length } }] });
  assert.equal(inp.status, 400, JSON.stringify(inp.json));
  assert.equal(inp.json.error, 'inputs[0].parameters.shared_memory_region: attnd does not serve Triton\'s shared-memory extension (system or CUDA; /v2 does not list it); send the tensor in the request instead');
});

test('a versioned path\'s log line names the path as sent, /versions/1 and all', async () => {
  // it named the folded path (POST /v2/models/tiny/infer), so an
  // operator grepping the log for what a client sent did not find it
  const x = REFS.causal;
  const id = `versioned-${process.pid}`;
  const p = await post(`${d.url}/v2/models/tiny/versions/1/infer`, { id, inputs: [fp32('x', x.shape, x.x)] });
  assert.equal(p.status, 200);
  assert.equal((await get('/v2/models/tiny/versions/1/ready')).status, 200);
  assert.equal((await get('/v2/models/tiny/versions/1')).status, 200);
  const want = [` POST /v2/models/tiny/versions/1/infer 200 id=${id} model=tiny `,
    ' GET /v2/models/tiny/versions/1/ready 200 ', ' GET /v2/models/tiny/versions/1 200 '];
  // the writer thread logs after the answer: wait for the lines (a hang's bound)
  const until = Date.now() + 10000 * SLOW;
  while (!want.every((w) => d.log().includes(w)) && Date.now() < until)
    await new Promise((res) => setTimeout(res, 20));
  for (const w of want) assert.ok(d.log().includes(w), `${w}\n${d.log().slice(-2000)}`);
});

test('a parameter misspelling one attnd reads is refused naming the one meant; Triton\'s own and custom ones pass', async () => {
  // casual was ignored: the model's default (not causal) answered 200
  const x = REFS.causal;
  const bad = [
    [{ parameters: { casual: true } }, 'parameters.casual', 'causal'],
    [{ parameters: { Scale: 0.5 } }, 'parameters.Scale', 'scale'],
    [{ parameters: { sequence_id: 'typo-seq', sequence_start: true, sequence_edn: true } }, 'parameters.sequence_edn', 'sequence_end'],
    [{ outputs: [{ name: 'y', parameters: { binary_dat: true } }] }, 'outputs[0].parameters.binary_dat', 'binary_data'],
  ];
  for (const [extra, field, meant] of bad) {
    const r = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)], ...extra });
    assert.equal(r.status, 400, `${field}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error, `${field}: not a parameter attnd reads; did you mean '${meant}'? (others it does not know pass, as Triton passes them to its backend)`);
  }
  const ok = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)],
    parameters: { causal: true, priority: 1, timeout: 100000, my_backend_flag: 'on' } });
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
});

test('the shared-memory extension\'s routes are 404 saying attnd does not serve the extension', async () => {
  // tritonclient.http's get_system_shared_memory_status and
  // register_system_shared_memory / _cuda_ call these; the 404 said only
  // "path: no endpoint ...", not why
  for (const [method, path] of [['GET', '/v2/systemsharedmemory/status'], ['GET', '/v2/systemsharedmemory/region/r0/status'],
    ['POST', '/v2/systemsharedmemory/region/r0/register'], ['POST', '/v2/systemsharedmemory/unregister'],
    ['GET', '/v2/cudasharedmemory/status'], ['POST', '/v2/cudasharedmemory/region/r0/register']]) {
    const r = await fetch(d.url + path, method === 'POST' ? { method, body: '{"key":"/k","offset":0,"byte_size":64}' } : {});
    assert.equal(r.status, 404, path);
    assert.deepEqual(await r.json(), { error: `path: no endpoint ${path}: attnd does not serve Triton's shared-memory extension (system or CUDA; /v2 does not list it): send the tensors in the request, take the outputs from the answer` }, path);
  }
});

test('/v2/models/stats/versions/1 is the metadata of a model called stats, not every model\'s statistics', async () => {
  // the alias folded it to /v2/models/stats, and every model's
  // statistics answered 200; Triton reads it as model 'stats' version 1
  const r = await get('/v2/models/stats/versions/1');
  assert.equal(r.status, 404);
  assert.match((await r.json()).error, /^model 'stats': not found; served: /);
  assert.equal((await get('/v2/models/stats')).status, 200, 'the statistics route itself');
  assert.equal((await get('/v2/models/tiny/versions/1/stats')).status, 200);
});

test('--strict-parameters 1 refuses every parameter attnd does not read; by default they pass', async (t) => {
  const x = REFS.causal;
  const body = { inputs: [fp32('x', x.shape, x.x)], parameters: { causal: true, priority: 1 } };
  assert.equal((await infer(d, 'tiny', body)).status, 200, 'the default: priority passes');
  const s = await start({ t, args: ['--strict-parameters', '1'] });
  try {
    const r = await infer(s, 'tiny', body);
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(r.json.error, /^parameters\.priority: not a parameter attnd reads, refused under strict-parameters \(it reads causal, retain, /);
    const o = await infer(s, 'tiny', { inputs: [fp32('x', x.shape, x.x)], outputs: [{ name: 'y', parameters: { binary_data: false, precision: 'fp16' } }] });
    assert.equal(o.status, 400, JSON.stringify(o.json));
    assert.match(o.json.error, /^outputs\[0\]\.parameters\.precision: not a parameter attnd reads, refused under strict-parameters/);
    const ok = await infer(s, 'tiny', { inputs: [fp32('x', x.shape, x.x)], parameters: { causal: true, retain: false },
      outputs: [{ name: 'y', parameters: { binary_data: false } }] });
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
  } finally { assert.equal((await s.stop()).code, 0, s.log()); }
});
