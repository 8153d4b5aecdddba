// framing.test.mjs - the gRPC door against what no generated client sends:
// HTTP/2 requests built by hand with node:http2 (wrong content-type,
// compressed or broken message prefixes, truncated and extra messages, bad
// grpc-timeout, cancelled calls), garbage instead of the HTTP/2 preface,
// and seeded mutations of a valid ModelInferRequest's protobuf bytes with
// known-good requests in between that must come back exact. Every answer
// is a gRPC status; the server keeps serving and exits 0 (no sanitizer
// report: helper.stop checks).
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { SLOW, requestsUsed, start } from '../server/helper.mjs';
import { SEED_OUT, fields, firstRawOutput, frame, h2frame, ld, lit, packedF32, packedI64, seedMsg, str } from './wire.mjs';

let d, session;
before(async () => {
  d = await start({ grpc: true, args: ['--max-body', '100000'] });
  session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
});
after(async () => {
  session.close();
  const r = await d.stop();
  assert.equal(r.code, 0, d.log());
});

/** the same with typed contents (InferTensorContents.fp32_contents) */
function seedTyped() {
  const t = [['q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]], ['k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]], ['v', [2, 2], [1, 2, 3, 0]]];
  return Buffer.concat([
    str(1, 'sdpa'),
    ...t.map(([n, s, v]) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, s), ld(5, packedF32(6, v))]))),
  ]);
}

/** one raw call: {status (HTTP), grpcStatus, message, data} */
function raw(path, body, headers = {}) {
  return new Promise((res, rej) => {
    const req = session.request({
      ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers', ...headers,
    });
    let head = {};
    const chunks = [];
    req.on('response', (h) => { head = h; });
    req.on('data', (c) => chunks.push(c));
    req.on('error', rej);
    req.on('trailers', (t) => { head = { ...head, ...t }; });
    req.on('end', () => res({
      status: head[':status'], grpcStatus: head['grpc-status'] === undefined ? undefined : Number(head['grpc-status']),
      message: decodeURIComponent(head['grpc-message'] || ''), data: Buffer.concat(chunks),
    }));
    if (body !== null) req.end(body);
  });
}
const INFER = '/inference.GRPCInferenceService/ModelInfer';


test('a hand-built request works, raw and typed', async () => {
  let r = await raw(INFER, frame(seedMsg()));
  assert.equal(r.grpcStatus, 0, r.message);
  assert.deepEqual(firstRawOutput(r.data), SEED_OUT);
  r = await raw(INFER, frame(seedTyped()));
  assert.equal(r.grpcStatus, 0, r.message);
});

test('a grpc-timeout of centuries (up to 8 digits of hours, as gRPC allows) is served, not expired', async () => {
  // in ns, added to the monotonic clock, each of the first two passed
  // 2^64: the deadline wrapped to 547 s (10248191H) or 2074 s (5124095H)
  // before now, DEADLINE_EXCEEDED at once on a host up longer than that
  for (const t of ['10248191H', '5124095H', '99999999H', '99999999S']) {
    const r = await raw(INFER, frame(seedMsg()), { 'grpc-timeout': t });
    assert.equal(r.grpcStatus, 0, `${t}: ${r.message}`);
    assert.deepEqual(firstRawOutput(r.data), SEED_OUT, t);
  }
});

// gRPC's PROTOCOL-HTTP2.md units: H, M (minutes), S, m, u (microseconds), n;
// the long ones are served, 0 of each is a deadline already past (a
// unit attnd did not know would be INVALID_ARGUMENT, 3)
test('a grpc-timeout in each unit gRPC defines is taken: ample ones served, zero ones past', async () => {
  for (const t of ['1H', '1M', '30S', '30000m', '30000000u']) {
    const r = await raw(INFER, frame(seedMsg()), { 'grpc-timeout': t });
    assert.equal(r.grpcStatus, 0, `${t}: ${r.message}`);
    assert.deepEqual(firstRawOutput(r.data), SEED_OUT, t);
  }
  for (const t of ['0H', '0M', '0S', '0u']) {
    const r = await raw(INFER, frame(seedMsg()), { 'grpc-timeout': t });
    assert.equal(r.grpcStatus, 4, `${t}: ${r.message}`);
    assert.match(r.message, /deadline: the client's deadline passed/, t);
  }
});

test('HTTP/2 and gRPC framing errors', async () => {
  const cases = [
    ['wrong content-type', frame(seedMsg()), { 'content-type': 'application/json' }, null, /content-type/, 415],
    // another codec's messages would be read as protobuf: they were
    ['JSON codec', frame(Buffer.from('{"model_name":"sdpa"}')), { 'content-type': 'application/grpc+json' }, null,
      /content-type: expected application\/grpc \(or application\/grpc\+proto\)/, 415],
    // as a wrong one (PROTOCOL-HTTP2.md): it was served
    ['no content-type', frame(seedMsg()), { 'content-type': undefined }, null, /content-type: missing; expected application\/grpc/, 415],
    // a method no gRPC client sends (grpc-core refuses it too): was served
    ['PUT', frame(seedMsg()), { ':method': 'PUT' }, null, /:method PUT: gRPC calls are POST/, 405],
    ['compressed message', frame(seedMsg(), 1), { 'grpc-encoding': 'gzip' }, 12, /compressed messages are not supported/],
    ['bad flag byte', frame(seedMsg(), 7), {}, 13, /bad compressed-flag byte/],
    ['truncated message', frame(seedMsg()).subarray(0, 20), {}, 3, /ended inside a message/],
    ['truncated prefix', Buffer.from([0, 0]), {}, 3, /ended inside a message/],
    ['no message', Buffer.alloc(0), {}, 3, /takes one message, got none/],
    ['two messages', Buffer.concat([frame(seedMsg()), frame(seedMsg())]), {}, 3, /takes one message/],
    ['over max-body', Buffer.concat([Buffer.from([0, 0, 2, 0, 0])]), {}, 8, /131072 bytes is over the limit of 100000 \(max-body\)/],
    ['bad grpc-timeout', frame(seedMsg()), { 'grpc-timeout': '12x' }, 3, /grpc-timeout/],
    ['zero grpc-timeout (already past)', frame(seedMsg()), { 'grpc-timeout': '0m' }, 4, /deadline: the client's deadline passed/],
    ['zero grpc-timeout in ns', frame(seedMsg()), { 'grpc-timeout': '0n' }, 4, /deadline: the client's deadline passed/],
    ['unknown method', frame(seedMsg()), {}, 12, /not served/, 200, '/inference.GRPCInferenceService/TraceSetting'],
    ['unknown service', frame(Buffer.alloc(0)), {}, 12, /not served/, 200, '/grpc.health.v1.Health/Check'],
    // a path longer than any method is named by its start (was 'method :')
    ['long path', frame(Buffer.alloc(0)), {}, 12, /^method \/inference\.GRPCInferenceService\/x{80}x*\.\.\.: not served/, 200,
      `/inference.GRPCInferenceService/${'x'.repeat(200)}`],
  ];
  for (const [what, body, headers, grpcStatus, pattern, http = 200, path = INFER] of cases) {
    const r = await raw(path, body, headers);
    assert.equal(r.status, http, what);
    if (grpcStatus !== null) assert.equal(r.grpcStatus, grpcStatus, `${what}: ${r.grpcStatus} ${r.message}`);
    assert.match(r.message, pattern, what);
  }
  // README: a call ended before its message became a request has its log
  // line, with the status its code maps back to: the five INVALID_ARGUMENT
  // ones above (no 400 was logged before them) are 400s, as over REST
  const line = /info POST \/inference\.GRPCInferenceService\/ModelInfer 400 /g;
  // (lines reach stderr up to --log-flush-ms after each call ends, from a
  // writer thread; 3 s times SLOW is a bound for a hang, not a speed)
  for (let until = Date.now() + 3000 * SLOW; (d.log().match(line) || []).length < 5 && Date.now() < until;)
    await new Promise((res) => setTimeout(res, 20));
  assert.equal((d.log().match(line) || []).length, 5, d.log().slice(-3000));
  const ok = await raw(INFER, frame(seedMsg()));
  assert.deepEqual(firstRawOutput(ok.data), SEED_OUT, 'still serving');
  for (const ct of ['application/grpc+proto', 'application/grpc+PROTO', 'application/grpc;charset=utf-8', 'application/grpc+proto; x=y'])
    assert.deepEqual(firstRawOutput((await raw(INFER, frame(seedMsg()), { 'content-type': ct })).data), SEED_OUT, ct);
  // each logged with its HTTP status and method, as REST logs a 405
  assert.match(d.log(), /info PUT \/inference\.GRPCInferenceService\/ModelInfer 405 /);
  assert.match(d.log(), /info POST \/inference\.GRPCInferenceService\/ModelInfer 415 /);
});

test('a stream whose framing breaks after whole requests answers those first, then ends with the break\'s status: they were cut unanswered (their jobs dropped, a sequence\'s steps run or not by how far the pool had come)', async () => {
  const STREAM = '/inference.GRPCInferenceService/ModelStreamInfer';
  const three = [frame(seedMsg()), frame(seedMsg()), frame(seedMsg())];
  const cases = [
    ['a compressed message', frame(seedMsg(), 1), 12, /compressed messages are not supported/],
    ['a bad flag byte', frame(seedMsg(), 7), 13, /bad compressed-flag byte/],
    ['a message over max-body', Buffer.from([0, 0, 2, 0, 0]), 8, /over the limit of 100000 \(max-body\)/],
    ['the stream ended inside a message', frame(seedMsg()).subarray(0, 20), 3, /ended inside a message/],
  ];
  for (const [what, tail, grpcStatus, pattern] of cases) {
    // one write: the three requests and the break in one DATA frame
    const r = await raw(STREAM, Buffer.concat([...three, tail]));
    assert.equal(r.grpcStatus, grpcStatus, `${what}: ${r.grpcStatus} ${r.message}`);
    assert.match(r.message, pattern, what);
    const outs = [];
    for (let i = 0; i + 5 <= r.data.length; i += 5 + r.data.readUInt32BE(i + 1)) {
      const f = fields(r.data.subarray(i + 5, i + 5 + r.data.readUInt32BE(i + 1)));
      assert.equal(f[1], undefined, `${what}: no error_message: ${f[1]}`);
      const raw0 = fields(f[2][0])[6][0]; // raw_output_contents[0]
      outs.push(Array.from(new Float32Array(raw0.buffer.slice(raw0.byteOffset, raw0.byteOffset + raw0.length))));
    }
    assert.deepEqual(outs, [SEED_OUT, SEED_OUT, SEED_OUT], `${what}: each request before the break answered`);
  }
});

test('a GET carrying a gRPC message is refused (405), not served', async () => {
  const r = await new Promise((res, rej) => {
    const req = session.request({ ':method': 'GET', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers' },
      { endStream: false });
    let head = {};
    req.on('response', (h) => { head = h; });
    req.on('trailers', (t) => { head = { ...head, ...t }; });
    req.on('error', rej);
    req.resume();
    req.on('end', () => res(head));
    req.end(frame(seedMsg()));
  });
  assert.equal(r[':status'], 405);
  assert.notEqual(r['grpc-status'], '0');
  assert.match(decodeURIComponent(r['grpc-message'] || ''), /:method GET: gRPC calls are POST/);
});

test('calls answered in one loop turn go out in the order they came', async () => {
  // five calls written together, each answered at its dispatch (an
  // unknown model): one read, one flush; the answers went out newest
  // first (the connection's calls were walked from its newest), as did
  // joined repository calls answered together
  const names = ['nope0', 'nope1', 'nope2', 'nope3', 'nope4'];
  for (let round = 0; round < 3; round++) {
    const order = [];
    await Promise.all(names.map((n) => new Promise((res, rej) => {
      const req = session.request({
        ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc', te: 'trailers',
      });
      req.on('response', (h) => order.push(/'(nope\d)'/.exec(decodeURIComponent(h['grpc-message'] || ''))?.[1]));
      req.on('error', rej);
      req.on('end', res);
      req.resume();
      req.end(frame(Buffer.concat([str(1, n), seedMsg().subarray(6)])));
    })));
    assert.deepEqual(order, names, `round ${round}`);
  }
});

test('a call whose grpc-timeout passed before it came is its model\'s timeout in /metrics and stats, as REST counts one', async () => {
  const timeouts = async () => Number(/\nattnd_inference_request_failure_total\{model="sdpa",version="1",reason="timeout"\} (\d+)\n/
    .exec(await (await fetch(`${d.url}/metrics`)).text())[1]);
  const fails = async () => (await (await fetch(`${d.url}/v2/models/sdpa/stats`)).json())
    .model_stats[0].inference_stats.fail.count;
  const [t0, f0] = [await timeouts(), await fails()];
  let r = await raw(INFER, frame(seedMsg()), { 'grpc-timeout': '0m' });
  assert.equal(r.grpcStatus, 4, r.message);
  // on a stream, each of its messages once the stream's deadline passed
  r = await raw('/inference.GRPCInferenceService/ModelStreamInfer', Buffer.concat([frame(seedMsg()), frame(seedMsg())]),
    { 'grpc-timeout': '0n' });
  assert.equal(r.grpcStatus, 0, r.message);
  assert.equal((r.data.toString().match(/the client's deadline passed/g) || []).length, 2);
  assert.equal(await timeouts(), t0 + 3);
  assert.equal(await fails(), f0 + 3);
  // an unknown model is REST's 404, counted in no model
  r = await raw(INFER, frame(Buffer.concat([str(1, 'nope'), seedMsg().subarray(6)])), { 'grpc-timeout': '0m' });
  assert.equal(r.grpcStatus, 5, r.message);
});

test('seeded mutations of a ModelInferRequest: every answer a status, known-good exact', async () => {
  let seed = Number(process.env.ATTND_FUZZ_SEED || 20261130) >>> 0;
  const rnd = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 2 ** 32; };
  const base = [seedMsg(), seedTyped()];
  const seen = {};
  for (let i = 0; i < 300; i++) {
    const m = Buffer.from(base[i % 2]);
    const n = 1 + Math.floor(rnd() * 4);
    let msg = m;
    for (let k = 0; k < n; k++) {
      const at = Math.floor(rnd() * msg.length);
      const op = rnd();
      if (op < 0.5) msg[at] = Math.floor(rnd() * 256);
      else if (op < 0.7) msg = msg.subarray(0, at);
      else if (op < 0.85) msg = Buffer.concat([msg.subarray(0, at), Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f]), msg.subarray(at)]);
      else msg = Buffer.concat([msg, msg.subarray(at)]);
    }
    const r = await raw(INFER, frame(msg));
    seen[r.grpcStatus] = (seen[r.grpcStatus] || 0) + 1;
    assert.ok([0, 3, 5].includes(r.grpcStatus), `mutation ${i}: status ${r.grpcStatus} ${r.message}`);
    if (r.grpcStatus !== 0) assert.ok(r.message.length > 0, `mutation ${i}: an error names its cause`);
    if (i % 10 === 0) {
      const ok = await raw(INFER, frame(seedMsg()));
      assert.deepEqual(firstRawOutput(ok.data), SEED_OUT, `known-good after mutation ${i}`);
    }
  }
  assert.ok(seen[3] > 50, `most mutations are refused: ${JSON.stringify(seen)}`);
});

test('cancelled calls and garbage connections leave the server serving', async () => {
  for (let i = 0; i < 20; i++) {
    const req = session.request({ ':method': 'POST', ':path': INFER, 'content-type': 'application/grpc' });
    req.on('error', () => {});
    req.write(frame(seedMsg()).subarray(0, i % 2 ? 10 : 100));
    if (i % 2) req.close(http2.constants.NGHTTP2_CANCEL);
    else { req.end(); req.close(http2.constants.NGHTTP2_CANCEL); }
  }
  for (const junk of ['GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x09\x00\x00\x00\x00\x00garbage']) {
    await new Promise((res) => {
      const s = net.connect(d.grpcPort, '127.0.0.1', () => s.end(junk));
      s.on('data', () => {});
      s.on('error', res);
      s.on('close', res);
    });
  }
  const ok = await raw(INFER, frame(seedMsg()));
  assert.deepEqual(firstRawOutput(ok.data), SEED_OUT);
});

test('a stream message answered at once (garbage, past its deadline), its call then cancelled, is freed: memory-budget and open requests back to 0', async () => {
  const gauge = async (name) => {
    const m = await (await fetch(`${d.url}/metrics`)).text();
    const g = (n) => Number(new RegExp(`\\n${n} (\\d+)\\n`).exec(m)[1]);
    // memory-budget: but the open connections' own (REST's and gRPC's)
    return name === 'attnd_memory_budget_used_bytes' ? requestsUsed(m) : g(name);
  };
  const garbage = frame(Buffer.concat([Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f]), Buffer.alloc(50000)]));
  for (let i = 0; i < 20; i++) {
    // odd: a good message whose 1 ms grpc-timeout passed before it came
    const s = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc', te: 'trailers', ...(i % 2 ? { 'grpc-timeout': '1m' } : {}) });
    s.on('error', () => {});
    s.on('data', () => {});
    await new Promise((res) => setTimeout(res, 10));
    s.write(i % 2 ? frame(seedMsg()) : garbage);
    s.close(http2.constants.NGHTTP2_CANCEL);
  }
  let used, open;
  // until both are back; 5 s times SLOW is a bound for a hang, not a speed
  for (const until = Date.now() + 5000 * SLOW; ;) {
    [used, open] = [await gauge('attnd_memory_budget_used_bytes'), await gauge('attnd_open_requests')];
    if ((!used && open <= 1) || Date.now() > until) break; // (this GET /metrics is one)
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(used, 0, 'memory-budget held by cancelled calls\' messages');
  assert.ok(open <= 1, `${open} requests open`);
  const ok = await raw(INFER, frame(seedMsg()));
  assert.deepEqual(firstRawOutput(ok.data), SEED_OUT);
});

test('--connection-timeout: an idle connection gets GOAWAY and closes; an open stream keeps its connection', async () => {
  const e = await start({ grpc: true, args: ['--connection-timeout', '1'] });
  try {
    // a bare HTTP/2 connection: preface and SETTINGS, then nothing
    const t0 = Date.now();
    const got = await new Promise((res) => {
      const chunks = [];
      const s = net.connect(e.grpcPort, '127.0.0.1', () => s.write(Buffer.concat([
        Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])])));
      s.on('data', (c) => chunks.push(c));
      s.on('error', () => {});
      s.on('close', () => res(Buffer.concat(chunks)));
      setTimeout(() => s.destroy(), 10000 * SLOW);
    });
    const waited = Date.now() - t0;
    // not before its 1 s; the upper bound only tells a connection the
    // timeout never closed (a hang) from a late one, so it scales with the
    // build (SLOW: sanitized attnd on a loaded machine) and is no speed
    assert.ok(waited >= 900 && waited < 5000 * SLOW, `closed after ${waited} ms`);
    // frames: 9-byte header (length, type, flags, stream); GOAWAY is type 7
    const types = [];
    for (let i = 0; i + 9 <= got.length; i += 9 + got.readUIntBE(i, 3)) types.push(got[i + 3]);
    assert.ok(types.includes(7), `GOAWAY among the frames: ${types}`);
    // a stream that stays open across the timeout keeps working
    const sess = http2.connect(`http://127.0.0.1:${e.grpcPort}`);
    const req = sess.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc', te: 'trailers' });
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    const ended = new Promise((res) => req.on('end', res));
    req.write(frame(seedMsg()));
    await new Promise((r) => setTimeout(r, 2500));
    req.end(frame(seedMsg()));
    await ended;
    const body = Buffer.concat(chunks);
    let n = 0;
    for (let i = 0; i + 5 <= body.length; i += 5 + body.readUInt32BE(i + 1)) n++;
    assert.equal(n, 2, 'both steps answered across the idle time');
    sess.close();
  } finally {
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

test('--connection-timeout: a header block whose CONTINUATION never comes, or a call answered whose client never opens its window, holds no call open: GOAWAY and closed (each held its connection for good, no key asked)', async () => {
  const e = await start({ grpc: true, args: ['--connection-timeout', '1', '--api-key', 'k'] });
  try {
    const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    const HEADERS = 1, SETTINGS = 4, GOAWAY = 7, END_STREAM = 1, END_HEADERS = 4;
    // ServerLive: open without the key
    const head = Buffer.concat([[':method', 'POST'], [':scheme', 'http'], [':authority', 'x'],
      [':path', '/inference.GRPCInferenceService/ServerLive'], ['content-type', 'application/grpc']].map(([k, v]) => lit(k, v)));
    const live = (id) => [h2frame(HEADERS, END_HEADERS, id, head), h2frame(0, END_STREAM, id, frame(Buffer.alloc(0)))];
    const window0 = Buffer.from([0, 4, 0, 0, 0, 0]); // SETTINGS_INITIAL_WINDOW_SIZE 0
    const cases = [
      // served once first: header-timeout is for a connection's first call
      ['a header block never finished', Buffer.alloc(0), [...live(1), h2frame(HEADERS, 0, 3, head.subarray(0, 10))]],
      ['an answer its client never opens its window for', window0, live(1)],
    ];
    for (const [what, settings, frames] of cases) {
      const t0 = Date.now();
      const got = await new Promise((res) => {
        const chunks = [];
        const s = net.connect(e.grpcPort, '127.0.0.1', () => s.write(Buffer.concat([PREFACE, h2frame(SETTINGS, 0, 0, settings), ...frames])));
        s.on('data', (c) => chunks.push(c));
        s.on('error', () => {});
        s.on('close', () => res(Buffer.concat(chunks)));
        // a bound for a connection never closed (a hang), times SLOW: no speed
        setTimeout(() => s.destroy(), 10000 * SLOW);
      });
      const waited = Date.now() - t0;
      const frames2 = [];
      for (let i = 0; i + 9 <= got.length; i += 9 + got.readUIntBE(i, 3)) frames2.push({ type: got[i + 3], flags: got[i + 4], id: got.readUInt32BE(i + 5) });
      // the call was answered (its HEADERS came): the connection then held it
      assert.ok(frames2.some((f) => f.type === HEADERS && f.id === 1), `${what}: the call answered: ${JSON.stringify(frames2)}`);
      assert.ok(frames2.some((f) => f.type === GOAWAY), `${what}: GOAWAY among ${JSON.stringify(frames2)} (closed after ${waited} ms)`);
      assert.ok(waited >= 900 && waited < 10000 * SLOW, `${what}: closed after ${waited} ms`);
    }
  } finally {
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

test('--grpc-buffer: a stream whose client stops reading stops being served, then catches up', async () => {
  const buffer = process.env.GRPC_TEST_BUFFER || '1048576';
  const e = await start({ grpc: true, args: ['--grpc-buffer', buffer, '--queue-size', '8'] });
  const sess = http2.connect(`http://127.0.0.1:${e.grpcPort}`);
  try {
    // sdpa over 200 x 8, asking for the [200, 200] attention: ~19 KB in, ~170 KB out
    const t = [['q', [200, 8]], ['k', [200, 8]], ['v', [200, 8]]];
    const msg = Buffer.concat([str(1, 'sdpa'),
      ...t.map(([n, s]) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, s)]))),
      ld(6, str(1, 'attention')), ld(6, str(1, 'output')),
      ...t.map(() => ld(7, Buffer.from(new Float32Array(1600).fill(0.25).buffer)))]);
    const req = sess.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc', te: 'trailers' });
    req.pause(); // read nothing for now
    const N = 200;
    for (let i = 0; i < N; i++) req.write(frame(msg));
    // a stream has at most queue-size requests in flight and its unread
    // answers pile up to about --grpc-buffer; then the server holds the
    // stream's further requests and gives no more window, so the count
    // served stops short of N and stays put
    const served = async () => (await (await fetch(`${e.url}/v2/models/sdpa/stats`)).json())
      .model_stats[0].inference_stats.success.count;
    await new Promise((r) => setTimeout(r, 3000));
    const s1 = await served();
    await new Promise((r) => setTimeout(r, 1000));
    const s2 = await served();
    assert.ok(s1 < N / 2, `${s1} of ${N} served while the client read nothing`);
    assert.equal(s2, s1, 'nothing more is served while the client reads nothing');
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    const ended = new Promise((res) => req.on('end', res));
    req.end();
    req.resume();
    await ended;
    const body = Buffer.concat(chunks);
    let n = 0;
    for (let i = 0; i + 5 <= body.length; i += 5 + body.readUInt32BE(i + 1)) n++;
    assert.equal(n, N, 'every request answered once the client reads');
  } finally {
    sess.close();
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

// The raw connections below come from 127.0.0.2: the helper's readiness
// probe (fetch) keeps a connection of 127.0.0.1's open, which counts too.
/** openGrpc(port): a raw connection that sends the HTTP/2 preface: resolves
 * to whether the server answered with its SETTINGS (1) or closed it
 * unanswered (0). */
const openGrpc = (port) => new Promise((res) => {
  const s = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' }, () => s.write(Buffer.concat([
    Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])])));
  s.on('data', () => res({ s, ok: 1 }));
  s.on('error', () => res({ s, ok: 0 }));
  s.on('close', () => res({ s, ok: 0 }));
});

/** openRest(port): a raw REST connection that sends half a request head:
 * resolves after 300 ms to whether it is still open (1) or was closed (0). */
const openRest = (port) => new Promise((res) => {
  const s = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' }, () => s.write('GET /v2/health/live HTTP/1.1\r\n'));
  let closed = 0;
  s.on('error', () => { closed = 1; });
  s.on('close', () => { closed = 1; });
  s.on('end', () => { closed = 1; });
  setTimeout(() => res({ s, ok: closed ? 0 : 1 }), 300);
});

test('--max-connections-per-ip counts gRPC connections too', async () => {
  const e = await start({ grpc: true, args: ['--max-connections-per-ip', '2'] });
  const open = () => openGrpc(e.grpcPort);
  try {
    const a = await open();
    const b = await open();
    const c = await open();
    assert.deepEqual([a.ok, b.ok, c.ok], [1, 1, 0], 'the third connection from one address is refused');
    a.s.destroy();
    await new Promise((r) => setTimeout(r, 200));
    const d2 = await open();
    assert.equal(d2.ok, 1, 'a place freed is taken again');
    for (const x of [b, c, d2]) x.s.destroy();
  } finally {
    assert.equal((await e.stop()).code, 0, e.log());
  }
});

test('--max-connections-per-ip counts REST and gRPC connections together', async () => {
  const e = await start({ grpc: true, args: ['--max-connections-per-ip', '3'] });
  const held = [];
  try {
    // REST, gRPC, REST: the address's three; a fourth of either door is closed
    for (const [door, want] of [['rest', 1], ['grpc', 1], ['rest', 1], ['grpc', 0], ['rest', 0]]) {
      const c = door === 'rest' ? await openRest(e.port) : await openGrpc(e.grpcPort);
      held.push(c.s);
      assert.equal(c.ok, want, `${door} connection ${held.length}: ${want ? 'open' : 'closed'} expected`);
    }
    assert.match(await e.logged(/new connections? closed at once/), /\d+ new connections? closed at once: (its|their) address held max-connections-per-ip \(3\) already, REST and gRPC together \(the last from 127\.0\.0\.2;/);
    // 12 more, all closed: counted, a line a second at most
    const t0 = Date.now();
    for (let i = 0; i < 12; i++) {
      const c = await openRest(e.port);
      held.push(c.s);
      assert.equal(c.ok, 0, `refused connection ${i}`);
    }
    const seconds = Math.ceil((Date.now() - t0) / 1000);
    const refusals = () => e.log().split('\n').map((l) => /(\d+) new connections? closed at once/.exec(l)).filter(Boolean).map((m) => Number(m[1]));
    // (a hang guard, scaled for sanitized builds: the lines come a second
    // apart at most, and a loaded ThreadSanitizer build writes them late)
    for (let until = Date.now() + 5000 * SLOW; refusals().reduce((x, y) => x + y, 0) < 14 && Date.now() < until;) await new Promise((r) => setTimeout(r, 50));
    assert.equal(refusals().reduce((x, y) => x + y, 0), 14, `every refusal counted: ${refusals()}`);
    assert.ok(refusals().length <= seconds + 2, `${refusals().length} lines in ${seconds} s`);
    held[1].destroy(); // the gRPC one goes: a REST one takes its place
    // once attnd has seen it go (its gauge; /metrics is asked from
    // 127.0.0.1, not the held address), not after a fixed 200 ms, which a
    // loaded ThreadSanitizer build outlasted
    const grpcOpen = async () => Number(/\nattnd_grpc_open_connections (\d+)\n/.exec(await (await fetch(`${e.url}/metrics`)).text())[1]);
    for (let until = Date.now() + 5000 * SLOW; (await grpcOpen()) !== 0 && Date.now() < until;) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await grpcOpen(), 0, 'the gRPC connection closed');
    const again = await openRest(e.port);
    held.push(again.s);
    assert.equal(again.ok, 1, 'a place freed by one door is taken by the other');
  } finally {
    for (const x of held) x.destroy();
    assert.equal((await e.stop()).code, 0, e.log());
  }
});
