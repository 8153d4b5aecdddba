// grpc.test.mjs - gRPC door, client 2 of 2: Node's @grpc/grpc-js loading
// proto/kserve.proto at run time with @grpc/proto-loader (an implementation
// independent of test_grpc*.py's grpcio + protoc stubs). Every RPC and
// status code, the seeds and the PyTorch vectors, streams, batching with
// REST clients, auth, queue full, deadlines.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import { REFS, ROOT, infer, maxDiff, start, waitReady } from '../server/helper.mjs';
import { fields, frame, ld, packedI64, seedMsg, str, unpackI64 } from './wire.mjs';
import { D as SD, full, gqaModels, stepBody, tokens } from '../server/seq_helper.mjs';

const def = protoLoader.loadSync(join(ROOT, 'proto', 'kserve.proto'), {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const Service = grpc.loadPackageDefinition(def).inference.GRPCInferenceService;
const S = grpc.status;

const connect = (d) => new Service(`127.0.0.1:${d.grpcPort}`, grpc.credentials.createInsecure());
/** call(client, 'ModelInfer', req, {metadata, deadline}) -> response (rejects with the grpc error) */
function call(c, method, req, o = {}) {
  return new Promise((res, rej) => {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(o.metadata || {})) md.set(k, v);
    c[method](req, md, o.deadline ? { deadline: o.deadline } : {}, (err, r) => (err ? rej(err) : res(r)));
  });
}
async function code(p, status, pattern) {
  await assert.rejects(p, (e) => {
    assert.equal(e.code, status, `${e.code} ${e.details}`);
    if (pattern) assert.match(e.details, pattern);
    return true;
  });
}
/** A ModelStreamInfer call: send all of reqs, end, collect the responses. */
function stream(c, reqs, o = {}) {
  return new Promise((res, rej) => {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(o.metadata || {})) md.set(k, v);
    const s = c.ModelStreamInfer(md);
    const got = [];
    s.on('data', (m) => got.push(m));
    s.on('error', rej);
    s.on('end', () => res(got));
    for (const r of reqs) s.write(r);
    s.end();
  });
}

const f32 = (a) => Buffer.from(new Float32Array(a).buffer);
const unf32 = (b) => Array.from(new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length)));
const typed = (name, shape, data, dt = 'FP32') => {
  const field = { FP32: 'fp32_contents', INT32: 'int_contents', BOOL: 'bool_contents' }[dt];
  return { name, datatype: dt, shape, contents: { [field]: data } };
};
/** output name of a response as {shape, data}, raw or typed */
function out(r, name) {
  const i = r.outputs.findIndex((o) => o.name === name);
  assert.ok(i >= 0, `no output ${name}`);
  const o = r.outputs[i];
  return { shape: o.shape, data: r.raw_output_contents.length ? unf32(r.raw_output_contents[i]) : o.contents.fp32_contents };
}
const seed = (raw = false) => {
  const t = [['q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]], ['k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]], ['v', [2, 2], [1, 2, 3, 0]]];
  return raw
    ? { model_name: 'sdpa', id: 'seed', inputs: t.map(([n, s]) => ({ name: n, datatype: 'FP32', shape: s })), raw_input_contents: t.map(([, , v]) => f32(v)) }
    : { model_name: 'sdpa', id: 'seed', inputs: t.map(([n, s, v]) => typed(n, s, v)) };
};
const tiny = (c, raw = false) => (raw
  ? { model_name: 'tiny', inputs: [{ name: 'x', datatype: 'FP32', shape: c.shape }], raw_input_contents: [f32(c.x)] }
  : { model_name: 'tiny', inputs: [typed('x', c.shape, c.x)] });

let d, c;
before(async () => {
  d = await start({ grpc: true, args: ['--max-body', '400000'] });
  c = connect(d);
});
after(async () => {
  c.close();
  const r = await d.stop();
  assert.equal(r.code, 0, d.log());
});

test('health and metadata RPCs', async () => {
  assert.equal((await call(c, 'ServerLive', {})).live, true);
  assert.equal((await call(c, 'ServerReady', {})).ready, true);
  const m = await call(c, 'ServerMetadata', {});
  assert.equal(m.name, 'attnd');
  assert.ok(m.extensions.includes('statistics'));
  assert.equal((await call(c, 'ModelReady', { name: 'tiny' })).ready, true);
  await code(call(c, 'ModelReady', { name: 'nope' }), S.NOT_FOUND, /model 'nope': not found/);
  const mm = await call(c, 'ModelMetadata', { name: 'sdpa' });
  assert.deepEqual(mm.inputs.map((t) => t.name), ['q', 'k', 'v', 'mask']);
  assert.deepEqual(mm.inputs[0].shape, [-1, -1]);
  assert.deepEqual(mm.versions, ['1']);
  await code(call(c, 'ModelMetadata', { name: 'sdpa', version: '3' }), S.NOT_FOUND, /only version 1 exists/);
});

/** A unary call's response bytes, made and read without kserve.proto. */
function rawCall(method, msg) {
  const raw = new grpc.Client(`127.0.0.1:${d.grpcPort}`, grpc.credentials.createInsecure());
  return new Promise((res, rej) => raw.makeUnaryRequest(`/inference.GRPCInferenceService/${method}`, (x) => x, (x) => x,
    msg, (e, r) => (e ? rej(e) : res(r)))).finally(() => raw.close());
}

test('ModelConfig: REST\'s /config as Triton\'s ModelConfig message (the wire read with the numbers of Triton\'s model_config.proto)', async () => {
  // model_config.proto: DataType TYPE_BOOL 1, TYPE_INT32 8, TYPE_FP32 11;
  // ModelConfig name 1, platform 2, version_policy 3 (latest 1: num_versions 1),
  // max_batch_size 4, input 5 (name 1, data_type 2, dims 4), output 6 (name 1,
  // data_type 2, dims 3), parameters 14 (map entry key 1, value 2: string_value 1),
  // backend 17; ModelConfigResponse config 1; ModelConfigRequest name 1, version 2
  const TYPE = { TYPE_BOOL: 1n, TYPE_INT32: 8n, TYPE_FP32: 11n };
  const text = (b) => (b ? b[0].toString() : '');
  for (const [name, version] of [['tiny', ''], ['sdpa', '1']]) {
    const rest = await (await fetch(`${d.url}/v2/models/${name}/config`)).json();
    const req = Buffer.concat([str(1, name), version ? str(2, version) : Buffer.alloc(0)]);
    const resp = fields(await rawCall('ModelConfig', req));
    assert.deepEqual(Object.keys(resp), ['1'], 'ModelConfigResponse holds config only');
    const cfg = fields(resp[1][0]);
    assert.equal(text(cfg[1]), name);
    assert.equal(text(cfg[2]), rest.platform);
    assert.equal(text(cfg[17]), 'attnd');
    assert.equal(cfg[4], undefined, 'max_batch_size 0: the batch dimension is in dims');
    assert.equal(fields(fields(cfg[3][0])[1][0])[1][0], 1n, 'version_policy latest num_versions 1');
    const tensors = (list, dimsField) => (list || []).map((b) => {
      const t = fields(b);
      return { name: text(t[1]), data_type: t[2][0], dims: unpackI64(t[dimsField][0]) };
    });
    const want = (ts) => ts.map((t) => ({ name: t.name, data_type: TYPE[t.data_type], dims: t.dims }));
    assert.deepEqual(tensors(cfg[5], 4), want(rest.input));
    assert.deepEqual(tensors(cfg[6], 3), want(rest.output));
    const params = Object.fromEntries((cfg[14] || []).map((b) => {
      const e = fields(b);
      return [text(e[1]), { string_value: text(fields(e[2][0])[1]) }];
    }));
    assert.deepEqual(params, rest.parameters);
  }
  await code(call(c, 'ModelConfig', { name: 'nope' }), S.NOT_FOUND, /model 'nope': not found/);
  await code(call(c, 'ModelConfig', { name: 'tiny', version: '2' }), S.NOT_FOUND, /only version 1 exists/);
  await code(rawCall('ModelConfig', Buffer.from([0x0a, 0xff])), S.INVALID_ARGUMENT, /not a valid ModelConfigRequest/);
});

test('the seed example through sdpa, typed and raw', async () => {
  for (const raw of [false, true]) {
    const r = await call(c, 'ModelInfer', { ...seed(raw), outputs: [{ name: 'output' }, { name: 'attention' }] });
    assert.equal(r.id, 'seed');
    assert.equal(r.raw_output_contents.length > 0, raw);
    assert.deepEqual(out(r, 'output').data.map((v) => Math.round(v * 1e4) / 1e4), [1.2384, 1.7616, 2.7616, 0.2384]);
    const e2 = Math.exp(2);
    assert.ok(maxDiff(out(r, 'attention').data, [e2 / (e2 + 1), 1 / (e2 + 1), 1 / (e2 + 1), e2 / (e2 + 1)]) < 1e-6);
  }
});

test('PyTorch vectors: sdpa [B, H, T, d] and the tiny weight set', async () => {
  const s = REFS.sdpa;
  let r = await call(c, 'ModelInfer', {
    model_name: 'sdpa', inputs: ['q', 'k', 'v'].map((n) => typed(n, s[`${n}_shape`], s[n])), outputs: [{ name: 'output' }],
  });
  assert.deepEqual(out(r, 'output').shape, [2, 3, 4, 7]);
  assert.ok(maxDiff(out(r, 'output').data, s.output) < 1e-5);
  const x = REFS.self;
  r = await call(c, 'ModelInfer', { ...tiny(x, true), outputs: [{ name: 'y' }, { name: 'attention' }] });
  assert.ok(maxDiff(out(r, 'y').data, x.y) < 1e-5);
  assert.ok(maxDiff(out(r, 'attention').data, x.attention) < 1e-6);
  const k = REFS.causal;
  r = await call(c, 'ModelInfer', { ...tiny(k), parameters: { causal: { bool_param: true } } });
  assert.ok(maxDiff(out(r, 'y').data, k.y) < 1e-5);
  const b = REFS.bf16;
  r = await call(c, 'ModelInfer', {
    model_name: 'tiny', inputs: [{ name: 'x', datatype: 'BF16', shape: b.shape }], raw_input_contents: [Buffer.from(b.x_b64, 'base64')],
  });
  assert.ok(maxDiff(out(r, 'y').data, b.y) < 1e-5);
});

test('INVALID_ARGUMENT carries REST\'s message; NOT_FOUND, UNIMPLEMENTED, RESOURCE_EXHAUSTED', async () => {
  const bad = { model_name: 'tiny', inputs: [typed('x', [2, -3], [])] };
  await code(call(c, 'ModelInfer', bad), S.INVALID_ARGUMENT, /^inputs\[0\]\.shape: dimension 1 is -3, must be >= 1$/);
  const rest = await infer(d, 'tiny', { inputs: [{ name: 'x', datatype: 'FP32', shape: [2, -3], data: [1] }] });
  assert.equal(rest.status, 400);
  assert.equal(rest.json.error, 'inputs[0].shape: dimension 1 is -3, must be >= 1');
  await code(call(c, 'ModelInfer', { ...tiny(REFS.self), inputs: [{ ...typed('x', [1, 1, 8], [1]) }] }),
    S.INVALID_ARGUMENT, /inputs\[0\]\.contents: expected 8 values, got 1/);
  await code(call(c, 'ModelInfer', { ...seed(true), raw_input_contents: [f32([1])] }), S.INVALID_ARGUMENT,
    /raw_input_contents: 1 entry for 3 inputs/);
  await code(call(c, 'ModelInfer', { model_name: 'nope', inputs: [] }), S.NOT_FOUND, /model 'nope': not found/);
  const raw = new grpc.Client(`127.0.0.1:${d.grpcPort}`, grpc.credentials.createInsecure());
  await code(new Promise((res, rej) => raw.makeUnaryRequest('/inference.GRPCInferenceService/Trace', (x) => x, (x) => x,
    Buffer.alloc(0), (e, r) => (e ? rej(e) : res(r)))), S.UNIMPLEMENTED, /not served by attnd/);
  raw.close();
  await code(call(c, 'ModelInfer', {
    model_name: 'sdpa', inputs: [{ name: 'q', datatype: 'FP32', shape: [100000] }], raw_input_contents: [Buffer.alloc(400000)],
  }), S.RESOURCE_EXHAUSTED, /over the limit of 400000 \(max-body\)/);
  assert.equal((await call(c, 'ServerLive', {})).live, true);
});

// REST's 413 (a request past --request-memory) is RESOURCE_EXHAUSTED, as
// every other memory limit on this door and grpc-core's own message size
// limit: it was INVALID_ARGUMENT, which says the request itself is wrong
test('a ModelInfer past --request-memory is RESOURCE_EXHAUSTED (REST\'s 413), in its parse or its outputs, logged 413', async (t) => {
  const e = await start({ grpc: true, t, args: ['--request-memory', '65536'] });
  const g = connect(e);
  try {
    // 20000 typed floats decode to 80000 bytes: over in the parse
    const big = { model_name: 'sdpa', id: 'big', inputs: [typed('q', [2000, 10], new Array(20000).fill(0.5)),
      typed('k', [1, 10], new Array(10).fill(0)), typed('v', [1, 1], [0])] };
    await code(call(g, 'ModelInfer', big), S.RESOURCE_EXHAUSTED, /\(request-memory\)$/);
    const rest = await infer(e, 'sdpa', { inputs: [{ name: 'q', datatype: 'FP32', shape: [2000, 10], data: new Array(20000).fill(0.5) },
      { name: 'k', datatype: 'FP32', shape: [1, 10], data: new Array(10).fill(0) }, { name: 'v', datatype: 'FP32', shape: [1, 1], data: [0] }] });
    assert.equal(rest.status, 413, JSON.stringify(rest.json));
    // 130 tokens of tiny ask 4 bytes x heads x 130 x 130 of attention map:
    // over in the outputs, the request itself (4 KiB) well within it
    const x = new Array(130 * 8).fill(0.25);
    await code(call(g, 'ModelInfer', { model_name: 'tiny', inputs: [typed('x', [1, 130, 8], x)], outputs: [{ name: 'attention' }] }),
      S.RESOURCE_EXHAUSTED, /^outputs\.attention: this request needs more than 65536 bytes with its outputs \(request-memory\)/);
    // logged with REST's status, as the RepositoryModelLoad parse limit is
    assert.match(await e.logged(/POST \/inference\.GRPCInferenceService\/ModelInfer 413 .*\n[^]*ModelInfer 413 /), /ModelInfer 413 /);
    assert.deepEqual(out(await call(g, 'ModelInfer', seed(true)), 'output').shape, [2, 2], 'the connection serves on');
  } finally {
    g.close();
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

test('ModelStreamInfer: in order, an error answers its request only', async () => {
  const x = REFS.self;
  const reqs = [];
  for (let i = 0; i < 10; i++)
    reqs.push(i === 3 ? { model_name: 'tiny', id: 'bad', inputs: [typed('x', [1, 1, 3], [1, 2, 3])] } : { ...tiny(x, i % 2 === 0), id: `r${i}` });
  const got = await stream(c, reqs);
  assert.equal(got.length, 10);
  got.forEach((g, i) => {
    if (i === 3) {
      assert.match(g.error_message, /inputs\[x\]\.shape|d_model|8/);
      return;
    }
    assert.equal(g.error_message, '');
    assert.equal(g.infer_response.id, `r${i}`);
    assert.ok(maxDiff(out(g.infer_response, 'y').data, x.y) < 1e-5);
  });
});

/** One call on session h2 whose request messages go in a single write,
 * so that they reach attnd together (grpc-js's stream writes may arrive
 * one by one, each answered before the next comes): {status, msgs}, msgs
 * the fields of each response message. */
function rawCall2(h2, method, msgs) {
  return new Promise((res, rej) => {
    const req = h2.request({ ':method': 'POST', ':path': `/inference.GRPCInferenceService/${method}`,
      'content-type': 'application/grpc', te: 'trailers' });
    const chunks = [];
    let status;
    req.on('data', (b) => chunks.push(b));
    req.on('trailers', (t) => { status = Number(t['grpc-status']); });
    req.on('error', rej);
    req.on('end', () => {
      const all = Buffer.concat(chunks), got = [];
      for (let i = 0; i + 5 <= all.length; i += 5 + all.readUInt32BE(i + 1))
        got.push(fields(all.subarray(i + 5, i + 5 + all.readUInt32BE(i + 1))));
      res({ status, msgs: got });
    });
    req.end(Buffer.concat(msgs.map((m) => frame(m))));
  });
}
/** A raw ModelInferRequest for tiny: x as raw_input_contents. */
const tinyRaw = (x, id) => Buffer.concat([str(1, 'tiny'), str(3, id),
  ld(5, Buffer.concat([str(1, 'x'), str(2, 'FP32'), packedI64(3, x.shape)])), ld(7, f32(x.x))]);
/** y of a raw ModelInferResponse's fields (raw_output_contents[0]) */
const rawY = (f) => unf32(f[6][0]);

test('a lone channel\'s calls in flight together go to the pool, not one by one inline', async (t) => {
  // its own daemon, whose only connection is this HTTP/2 session (start's
  // ready check would leave a REST connection open)
  const e = await start({ grpc: true, ready: false, t });
  const h2 = http2.connect(`http://127.0.0.1:${e.grpcPort}`);
  h2.on('error', () => {});
  try {
    await waitReady(e, async () => {
      const r = await rawCall2(h2, 'ServerReady', [Buffer.alloc(0)]).catch(() => null);
      return r?.status === 0 && r.msgs[0]?.[1]?.[0] === 1n;
    });
    const x = REFS.self;
    // 32 stream requests in one write: in flight together
    const got = await rawCall2(h2, 'ModelStreamInfer', Array.from({ length: 32 }, (_, i) => tinyRaw(x, `s${i}`)));
    assert.equal(got.status, 0);
    assert.equal(got.msgs.length, 32);
    got.msgs.forEach((m, i) => {
      assert.equal(m[1], undefined, m[1] && m[1][0].toString());
      const r = fields(m[2][0]);
      assert.equal(r[3][0].toString(), `s${i}`);
      assert.ok(maxDiff(rawY(r), x.y) < 1e-5);
    });
    // one call alone on the channel runs inline
    const one = await rawCall2(h2, 'ModelInfer', [tinyRaw(x, 'one')]);
    assert.equal(one.status, 0);
    assert.ok(maxDiff(rawY(one.msgs[0]), x.y) < 1e-5);
    const m = await (await fetch(`${e.url}/metrics`)).text();
    const n = Number(/^attnd_inference_inline_count_total\{model="tiny",version="1"\} (\d+)$/m.exec(m)[1]);
    assert.ok(n >= 1 && n < 33, `${n} of 33 calls ran inline`);
  } finally {
    h2.close();
    assert.equal((await e.stop()).code, 0);
  }
});

test('stream steps batch with REST requests (one scheduler)', async () => {
  const e = await start({ grpc: true, args: ['--batch-delay-us', '400000', '--max-batch', '2'] });
  const cc = connect(e);
  try {
    const [g, r] = await Promise.all([stream(cc, [seed()]), infer(e, 'sdpa', {
      inputs: [{ name: 'q', datatype: 'FP32', shape: [2, 4], data: [2, 0, 2, 0, 0, 4, 0, 2] },
        { name: 'k', datatype: 'FP32', shape: [2, 4], data: [1, 0, 1, 0, 0, 1, 0, 0] },
        { name: 'v', datatype: 'FP32', shape: [2, 2], data: [1, 2, 3, 0] }],
    })]);
    assert.equal(r.status, 200);
    // the same float32s (REST prints 9 digits that parse back to them)
    assert.deepEqual(out(g[0].infer_response, 'output').data, r.json.outputs[0].data.map(Math.fround));
    const st = (await call(cc, 'ModelStatistics', { name: 'sdpa' })).model_stats[0];
    assert.deepEqual(st.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]), [[2, 1]]);
    assert.equal(st.inference_stats.success.count, 2);
    const streamLine = /POST \/inference\.GRPCInferenceService\/ModelStreamInfer 200 .*batch=2/;
    assert.match(await e.logged(streamLine), streamLine);
  } finally {
    cc.close();
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

test('the Attnd-Sequence-Id metadata is the sequence id, as REST\'s header: alone, beside the same parameter, or refused when they differ or it comes twice', async () => {
  const x = (t) => ({ name: 'x', datatype: 'FP32', shape: [1, t, 8], contents: { fp32_contents: Array.from({ length: t * 8 }, (_, i) => (i % 5) * 0.1) } });
  const step = (t, params, md = {}) => call(c, 'ModelInfer', { model_name: 'tiny', inputs: [x(t)], parameters: params }, { metadata: md });
  const len = (r) => Number(r.parameters.sequence_length.int64_param);
  // the metadata alone makes a step of sequence md-a
  let r = await step(2, { sequence_start: { bool_param: true } }, { 'attnd-sequence-id': 'md-a' });
  assert.equal(len(r), 2);
  r = await step(1, { sequence_id: { string_param: 'md-a' } }, { 'attnd-sequence-id': 'md-a' });
  assert.equal(len(r), 3, 'the same id in both');
  r = await step(1, {}, { 'attnd-sequence-id': 'md-a' });
  assert.equal(len(r), 4, 'the metadata alone steps it');
  await code(step(1, { sequence_id: { string_param: 'md-b' } }, { 'attnd-sequence-id': 'md-a' }), S.INVALID_ARGUMENT,
    /^Attnd-Sequence-Id: header 'md-a' and parameters\.sequence_id 'md-b' differ/);
  await code(step(1, {}, { 'attnd-sequence-id': 'a b' }), S.INVALID_ARGUMENT, /^Attnd-Sequence-Id: 'a b' is not a sequence id/);
  await code(step(1, {}, { 'attnd-sequence-id': 'm'.repeat(300) }), S.INVALID_ARGUMENT, /is not a sequence id \(1 to 128 bytes/);
  // sent twice: refused, as REST refuses two header lines (a proxy may
  // have routed the call on the other, or on both joined), whichever
  // matches; md-a is not stepped (before: the first was read, md-a stepped)
  for (const two of [['md-a', 'md-z'], ['md-z', 'md-a'], ['md-a', 'md-a']]) {
    const md = new grpc.Metadata();
    for (const v of two) md.add('attnd-sequence-id', v);
    await code(new Promise((res, rej) => c.ModelInfer({ model_name: 'tiny', inputs: [x(1)] }, md, (e, v) => (e ? rej(e) : res(v)))),
      S.INVALID_ARGUMENT, /^attnd-sequence-id: sent more than once; send one/);
  }
  r = await step(1, { sequence_end: { bool_param: true } }, { 'attnd-sequence-id': 'md-a' });
  assert.equal(len(r), 5, 'md-a as the last step left it');
});

test('statistics and repository RPCs', async () => {
  const idx = await call(c, 'RepositoryIndex', {});
  assert.ok(idx.models.some((m) => m.name === 'tiny' && m.state === 'READY'));
  await call(c, 'RepositoryModelUnload', { model_name: 'tiny' });
  assert.equal((await call(c, 'ModelReady', { name: 'tiny' })).ready, false);
  await code(call(c, 'ModelInfer', tiny(REFS.self)), S.NOT_FOUND, /model 'tiny': not loaded/);
  await call(c, 'RepositoryModelLoad', { model_name: 'tiny' });
  assert.equal((await call(c, 'ModelReady', { name: 'tiny' })).ready, true);
  const all = await call(c, 'ModelStatistics', {});
  assert.ok(all.model_stats.some((m) => m.name === 'sdpa' && m.inference_stats.success.count > 0));
  await code(call(c, 'ModelStatistics', { name: 'nope' }), S.NOT_FOUND);
});

test('UNAUTHENTICATED without the key; health stays open', async () => {
  const e = await start({ grpc: true, args: ['--api-key', 'k3y'] });
  const cc = connect(e);
  try {
    assert.equal((await call(cc, 'ServerReady', {})).ready, true);
    await code(call(cc, 'ModelInfer', seed()), S.UNAUTHENTICATED, /authorization: missing or wrong API key/);
    await code(call(cc, 'ModelInfer', seed(), { metadata: { authorization: 'Bearer nope' } }), S.UNAUTHENTICATED);
    await code(call(cc, 'RepositoryModelUnload', { model_name: 'tiny' }), S.UNAUTHENTICATED);
    await code(stream(cc, [seed()]), S.UNAUTHENTICATED);
    assert.equal((await call(cc, 'ModelInfer', seed(), { metadata: { authorization: 'Bearer k3y' } })).id, 'seed');
  } finally {
    cc.close();
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

test('UNAVAILABLE on a full queue, DEADLINE_EXCEEDED from either deadline', async () => {
  const e = await start({ grpc: true, args: ['--queue-size', '1', '--batch-delay-us', '1000000', '--deadline-ms', '2500'] });
  const cc = connect(e);
  try {
    const first = call(cc, 'ModelInfer', seed());
    await new Promise((r) => setTimeout(r, 200));
    await code(call(cc, 'ModelInfer', seed()), S.UNAVAILABLE, /queue: model 'sdpa' has 1 request in progress \(queue-size\)/);
    assert.equal((await first).id, 'seed');
    // the client's deadline (grpc-timeout) is shorter than --deadline-ms
    await code(call(cc, 'ModelInfer', seed(), { deadline: Date.now() + 300 }), S.DEADLINE_EXCEEDED);
    // grpc-js ends that call at its own deadline whatever attnd does, so
    // which deadline attnd kept is read from its answer to a raw call (not
    // from the time taken, which no build or load bounds)
    const h2 = http2.connect(`http://127.0.0.1:${e.grpcPort}`);
    const t = await new Promise((res, rej) => {
      const req = h2.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelInfer',
        'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': '300m' });
      let head = {};
      req.on('response', (h) => { head = h; });
      req.on('trailers', (h) => { head = { ...head, ...h }; });
      req.on('error', rej);
      req.on('end', () => res(head)).resume().end(frame(seedMsg()));
    }).finally(() => h2.close());
    assert.equal(t['grpc-status'], String(S.DEADLINE_EXCEEDED), JSON.stringify(t));
    // the ms left of the 300 when attnd admitted it (299 here): not 2500
    const m = /^deadline: no answer within (\d+) ms \(the client's deadline\)$/.exec(decodeURIComponent(t['grpc-message']));
    assert.ok(m && Number(m[1]) <= 300, t['grpc-message']);
    assert.equal((await call(cc, 'ServerLive', {})).live, true);
  } finally {
    cc.close();
    assert.equal((await e.stop()).code, 0, e.log());
  }
  const f = await start({ grpc: true, args: ['--deadline-ms', '200', '--batch-delay-us', '5000000', '--max-batch', '4'] });
  const cf = connect(f);
  try {
    await code(call(cf, 'ModelInfer', seed()), S.DEADLINE_EXCEEDED, /deadline: no answer within 200 ms \(deadline-ms\)/);
  } finally {
    cf.close();
    assert.equal((await f.stop()).code, 0, f.log());
  }
});

test('steps of one sequence in flight at once over REST and gRPC (ids 7, "7", int64 7) each run once, with one causal request\'s rows over the order they ran in', async () => {
  const e = await start({ dir: gqaModels(), grpc: true });
  const cc = connect(e);
  try {
    const p = tokens(5, 1);
    assert.equal((await infer(e, 'gqa', stepBody(7, p, { start: true, outputs: [{ name: 'y' }] }))).status, 200);
    const N = 24, xs = Array.from({ length: N }, (_, i) => tokens(1, 100 + i));
    const outs = await Promise.all(xs.map(async (x, i) => {
      if (i % 2) { // gRPC, the id as an int64 or a string param
        const r = await call(cc, 'ModelInfer', {
          model_name: 'gqa', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1, SD] }], raw_input_contents: [f32(x)],
          outputs: [{ name: 'y' }], parameters: { sequence_id: i % 4 === 1 ? { int64_param: 7 } : { string_param: '7' } },
        });
        return { i, len: Number(r.parameters.sequence_length.int64_param), y: unf32(r.raw_output_contents[0]) };
      }
      const r = await infer(e, 'gqa', stepBody(7, x, { outputs: [{ name: 'y' }] }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return { i, len: r.json.parameters.sequence_length, y: r.json.outputs[0].data };
    }));
    // each step at its own position: the lengths 6 .. 29, once each
    assert.deepEqual(outs.map((o) => o.len).sort((a, b) => a - b), Array.from({ length: N }, (_, k) => 6 + k));
    const byLen = new Map(outs.map((o) => [o.len, o]));
    const hist = p.concat(...Array.from({ length: N }, (_, k) => xs[byLen.get(6 + k).i]));
    const ref = await full(e, hist);
    for (const o of outs)
      assert.ok(maxDiff(o.y, ref.y.slice((o.len - 1) * SD, o.len * SD)) < 1e-5, `step ${o.i} at ${o.len}`);
    assert.equal((await (await fetch(`${e.url}/v2/sequences/7`)).json()).length, 5 + N);
  } finally {
    cc.close();
    assert.equal((await e.stop()).code, 0, e.log());
  }
});
