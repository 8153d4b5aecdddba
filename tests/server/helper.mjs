// helper.mjs - start and stop an attnd for a test. Builds nothing: runs
// $ATTND_BIN (default build/default/attnd) on 127.0.0.1 with --port 0 and a
// temporary models folder (models/demo when it exists + tests/server
// fixtures), waits until it is ready, and kills it at the end: stop() in the
// test, and whatever happens (a failed assertion, a test that hangs until
// node's --test-timeout stops the file with SIGTERM, Ctrl-C) every daemon
// still running is SIGKILLed and its folder removed when this process ends.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import { closeSync, constants, cpSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SANITIZER_REPORT } from '../sanitizer.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(here, '..', '..');
export const ATTND = resolve(ROOT, process.env.ATTND_BIN || 'build/default/attnd');
export const REFS = JSON.parse(readFileSync(join(here, 'fixtures', 'refs.json'), 'utf8'));
// Sanitized builds are slower: scale waits, never assertions on speed.
export const SLOW = /sanitiz|thread|address|undefined/.test(process.env.ATTND_BIN || '') ? 5 : 1;

// Every models folder modelsDir() made: removed when this process ends,
// whoever started (or forgot) its daemon and however that daemon ended.
const made = new Set();

/** A fresh models folder: the fixtures plus models/demo when present;
 * removed at the latest when the test file's process ends. */
export function modelsDir() {
  const dir = mkdtempSync(join(tmpdir(), 'attnd-test-'));
  made.add(dir);
  cpSync(join(here, 'fixtures', 'models'), dir, { recursive: true });
  const demo = join(ROOT, 'models', 'demo');
  if (existsSync(join(demo, 'model.safetensors'))) cpSync(demo, join(dir, 'demo'), { recursive: true });
  return dir;
}

export { SANITIZER_REPORT, sanitizerReport } from '../sanitizer.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every daemon started and not yet exited, with its models folder when the
// helper made it: the exit and signal hooks below end them.
const live = new Map();
function killAll(why) {
  for (const [proc, info] of live) {
    try { proc.kill('SIGKILL'); } catch { /* already gone */ }
    if (why !== 'exit') process.stderr.write(`helper: ${why}: killed attnd ${info.args.join(' ')}; its log ends:\n${info.log().slice(-2000)}\n`);
    if (info.dir) rmSync(info.dir, { recursive: true, force: true });
  }
  live.clear();
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
  made.clear();
}
process.on('exit', () => killAll('exit'));
/** track(proc, {args, dir, log}): end a daemon a test spawned itself like the others. */
export function track(proc, info) {
  live.set(proc, { args: info.args || [], dir: info.dir || null, log: info.log || (() => '') });
  proc.on('exit', () => live.delete(proc));
}
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'])
  process.on(sig, () => { killAll(`${sig} (the test runner's timeout?)`); process.exit(1); });

/**
 * start({args, env, dir, ready, t, grpc, wrap}) -> {url, port, grpcPort, proc, dir, log(), stop()}
 * args are extra flags; dir reuses a models folder (for restarts); wrap, a
 * command and its arguments that run attnd (e.g. ['prlimit',
 * '--nofile=64']: it must exec it, so that proc.pid is attnd's); t, a
 * test context: t.after stops the daemon (SIGKILL) if the test did not.
 * gRPC is off (--grpc-port 0: parallel suites must not fight over 8001)
 * unless grpc is true (a free port, d.grpcPort).
 */
export async function start(opts = {}) {
  const dir = opts.dir || modelsDir();
  const args = ['--port', '0', '--host', '127.0.0.1', '--models', dir,
    '--grpc-port', opts.grpc ? '-1' : '0', ...(opts.args || [])];
  const cmd = opts.wrap ? [...opts.wrap, ATTND, ...args] : [ATTND, ...args];
  const proc = spawn(cmd[0], cmd.slice(1), {
    // the harness's own variables are no settings (attnd would say so)
    env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'ATTND_BIN' && !k.startsWith('ATTND_FUZZ_'))), ...(opts.env || {}) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  let exited = null;
  live.set(proc, { args, dir: opts.dir ? null : dir, log: () => log });
  const exit = new Promise((res) => proc.on('exit', (code, sig) => { exited = { code, sig }; live.delete(proc); res(exited); }));
  proc.stderr.on('data', (d) => { log += d; });
  const deadline = Date.now() + 20000 * SLOW;
  let port = 0;
  let grpcPort = 0;
  let host = '127.0.0.1';
  while (!port || (opts.grpc && !grpcPort)) {
    const m = /listening on http:\/\/(127\.0\.0\.1|\[::1\]):(\d+)/.exec(log); // [::1]: --host ::1
    const g = /listening on grpc:\/\/127\.0\.0\.1:(\d+)/.exec(log);
    if (m && (g || !opts.grpc)) {
      host = m[1];
      port = Number(m[2]);
      grpcPort = g ? Number(g[1]) : 0;
    } else if (exited) throw new Error(`attnd exited ${JSON.stringify(exited)}:\n${log}`);
    else if (Date.now() > deadline) { proc.kill('SIGKILL'); throw new Error(`attnd did not start:\n${log}`); }
    else await sleep(20);
  }
  const url = `http://${host}:${port}`;
  const d = {
    url, port, grpcPort, proc, dir, exit,
    log: () => log,
    /**
     * logged(re, ms, from): the log once it matches re, waiting up to ms:
     * request lines reach stderr up to --log-flush-ms after the request
     * ends, daemon messages a moment after they are made (a writer
     * thread), and anything written to stderr (a preloaded library's
     * line) may come after the answer it belongs to. With from (a
     * d.log().length taken before a request), only the log past it: a
     * line of an earlier request does not count.
     */
    async logged(re, ms = 5000, from = 0) {
      const until = Date.now() + ms * SLOW;
      while (!re.test(log.slice(from)) && Date.now() < until) await sleep(20);
      return log.slice(from);
    },
    /**
     * stop(signal): send it, wait for exit, return {code, sig}. Throws when
     * the daemon's stderr holds a sanitizer report (ASan, LeakSanitizer at
     * exit, UBSan, TSan), so every suite fails on one, whatever it asserts.
     */
    async stop(signal = 'SIGTERM', keepDir = false) {
      if (!exited) proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 30000 * SLOW);
      const r = await exit;
      clearTimeout(t);
      if (!keepDir && !opts.dir) rmSync(dir, { recursive: true, force: true });
      if (SANITIZER_REPORT.test(log)) throw new Error(`attnd sanitizer report (exit ${JSON.stringify(r)}):\n${log}`);
      return r;
    },
  };
  if (opts.t) opts.t.after(() => { if (!exited) return d.stop('SIGKILL').catch(() => {}); });
  if (opts.ready !== false)
    await waitReady(d, async () => (await fetch(`${url}/v2/health/ready`).catch(() => null))?.status === 200);
  return d;
}

/**
 * waitReady(d, probe): poll probe() (true once the daemon is ready) every
 * 20 ms, for up to 20 s; past that, kill d and throw with its log. start()
 * waits with fetch; a test that must hold the daemon's only connection
 * starts it with ready: false and waits through that connection.
 */
export async function waitReady(d, probe) {
  const until = Date.now() + 20000 * SLOW;
  while (!(await probe())) {
    if (Date.now() > until) { await d.stop('SIGKILL'); throw new Error(`attnd not ready:\n${d.log()}`); }
    await sleep(20);
  }
}

/** POST JSON, return {status, headers, json}. */
export async function post(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = text; }
  return { status: r.status, headers: r.headers, json };
}

export function infer(d, model, body, headers) {
  return post(`${d.url}/v2/models/${model}/infer`, body, headers);
}

/** Largest |a - b| over two arrays of the same length. */
/** mulberry32: a small seeded generator; each call gives a float in [0, 1). */
export function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function maxDiff(a, b) {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

export function fp32(name, shape, data) {
  return { name, datatype: 'FP32', shape, data };
}

/** Build a binary (Triton extension) request: JSON header + tensors. */
export function binaryRequest(header, tensors) {
  const json = Buffer.from(JSON.stringify(header));
  return { body: Buffer.concat([json, ...tensors]), headerLen: json.length };
}

/** sdpaBinary(T, D, parameters): a binary request of the built-in sdpa
 * model: q, k and v [T, D] with the same rows (values in [-0.5, 0.5)),
 * its output asked in binary, and the request's parameters when given;
 * { body, headerLen } as binaryRequest's. */
export function sdpaBinary(T, D, parameters) {
  const rows = Buffer.alloc(T * D * 4);
  for (let i = 0; i < T * D; i++) rows.writeFloatLE(((i * 7919) % 1000) / 1000 - 0.5, i * 4);
  return binaryRequest({
    inputs: ['q', 'k', 'v'].map((name) => ({ name, datatype: 'FP32', shape: [T, D], parameters: { binary_data_size: T * D * 4 } })),
    outputs: [{ name: 'output', parameters: { binary_data: true } }],
    ...(parameters ? { parameters } : {}),
  }, [rows, rows, rows]);
}

/** postSdpa(url, { body, headerLen }, signal): POST a binaryRequest's body
 * to the daemon at url's sdpa model; fetch's promise. */
export const postSdpa = (url, { body, headerLen }, signal) => fetch(`${url}/v2/models/sdpa/infer`, {
  method: 'POST', body, signal,
  headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(headerLen) },
});

/** Split a binary response into its JSON header and raw outputs by name. */
export function parseBinary(buf, headerLen) {
  const head = JSON.parse(buf.subarray(0, headerLen).toString());
  let off = headerLen;
  const raw = {};
  for (const o of head.outputs) {
    const n = o.parameters && o.parameters.binary_data_size;
    if (n !== undefined) {
      const b = buf.subarray(off, off + n);
      raw[o.name] = Array.from(new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + n)));
      off += n;
    }
  }
  return { head, raw, rest: buf.length - off };
}

export function f32bytes(arr) {
  return Buffer.from(new Float32Array(arr).buffer);
}

/** A safetensors file of F32 tensors {name: [shape, data]}. */
export function safetensors(tensors) {
  const header = {};
  const bufs = [];
  let off = 0;
  for (const [name, [shape, data]] of Object.entries(tensors)) {
    header[name] = { dtype: 'F32', shape, data_offsets: [off, off + data.length * 4] };
    bufs.push(f32bytes(data));
    off += data.length * 4;
  }
  let h = JSON.stringify(header);
  while (h.length % 8) h += ' ';
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  return Buffer.concat([len, Buffer.from(h), ...bufs]);
}

export function promtool(text) {
  return spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
}

/** What each open connection holds of --memory-budget from its accept to
 * its close (README): a REST one (libmicrohttpd's pool and attnd's state),
 * a gRPC one (its HTTP/2 session). */
export const REST_CONN_COST = 36864, GRPC_CONN_COST = 81920;
/** requestsUsed(metricsText): attnd_memory_budget_used_bytes less the open
 * connections' own (REST and gRPC): what bodies, decoded requests and
 * unsent answers hold. A test's own GET /metrics holds a connection. */
export function requestsUsed(m) {
  const g = (n) => Number(new RegExp(`^${n} (\\d+)$`, 'm').exec(m)[1]);
  return g('attnd_memory_budget_used_bytes') - REST_CONN_COST * g('attnd_http_open_connections') -
    GRPC_CONN_COST * g('attnd_grpc_open_connections');
}

/** restAttention(t): an sdpa REST request (HTTP/1.1, raw) over t tokens
 * (d 1) asking for the attention map as a binary output: a t x t FP32
 * answer (t 600: 1.44 MB). */
export function restAttention(t) {
  const x = Array.from({ length: t }, (_, i) => (i % 7) * 0.1);
  const body = JSON.stringify({
    inputs: ['q', 'k', 'v'].map((n) => ({ name: n, datatype: 'FP32', shape: [t, 1], data: x })),
    outputs: [{ name: 'attention', parameters: { binary_data: true } }],
  });
  return `POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** answers(buf): the HTTP/1.1 answers in buf, each {head, body}, and
 * what is left past the last whole one. */
export function answers(buf) {
  const out = [];
  let at = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', at);
    if (end < 0) break;
    const head = buf.subarray(at, end).toString();
    const m = /\r\ncontent-length: (\d+)/i.exec(head);
    const len = m ? Number(m[1]) : 0;
    if (end + 4 + len > buf.length) break;
    out.push({ head, body: buf.subarray(end + 4, end + 4 + len) });
    at = end + 4 + len;
  }
  return { all: out, rest: buf.length - at };
}

/** jsonLen(head): the JSON part's length of a binary answer's head. */
export const jsonLen = (head) => Number(/\r\ninference-header-content-length: (\d+)/i.exec(head)[1]);

/** NEXT: a small raw request to pipeline behind a large answer. */
export const NEXT = 'GET /v2/models/sdpa HTTP/1.1\r\nHost: x\r\n\r\n';

// waitFor(pred, ms): pred's value once truthy (it may be async), polled;
// ms times SLOW is a bound for a hang, not a speed (the caller asserts
// what it got)
export async function waitFor(pred, ms = 5000) {
  let v;
  for (const t0 = Date.now(); !(v = await pred()) && Date.now() - t0 < ms * SLOW;) await new Promise((r) => setTimeout(r, 10));
  return v;
}

// queued(at, to, which): the kernel's side of a loopback connection
// (/proc/net/tcp): the bytes queued in the socket of local port `at`
// connected to port `to`, rx (not yet read by its owner) or tx (sent, not
// yet acked by its peer); 0 once the socket is gone
const hex4 = (n) => n.toString(16).toUpperCase().padStart(4, '0');
export function queued(at, to, which = 'rx') {
  const f = readFileSync('/proc/net/tcp', 'utf8').split('\n').map((l) => l.trim().split(/\s+/))
    .find((x) => x[1]?.endsWith(`:${hex4(at)}`) && x[2]?.endsWith(`:${hex4(to)}`));
  return f ? parseInt(f[4].split(':')[which === 'rx' ? 1 : 0], 16) : 0;
}

/**
 * smallRcvbuf(t, port[, rcvbuf]): a slow reader's client, in a python3
 * process (small_rcvbuf.py: node cannot set SO_RCVBUF, and its kernel's
 * autotuned buffer, up to megabytes, takes a large answer ahead of a client
 * meaning to read it slowly, so that the server sees it all acknowledged):
 * its socket to 127.0.0.1:port has a 16 KiB receive buffer, set before it
 * connects. Resolves once connected, to { localPort, chunks, got(),
 * ended(), error() (an errno's name, or null), send(buf), take(n) (up to n
 * bytes of what has come, not waiting for more), drain() (all of it until
 * the peer's end or an error, then its own end), shut(), close() }; each
 * of them resolves when the client has done it. Killed at the test's end.
 */
export async function smallRcvbuf(t, port, rcvbuf = 16384) {
  const py = spawn('python3', [join(here, 'small_rcvbuf.py'), String(port), String(rcvbuf)],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => py.kill());
  const lines = [], waiting = [];
  let part = '', gone = false;
  const took = (l) => (waiting.length ? waiting.shift()(l) : lines.push(l));
  py.stdout.setEncoding('latin1');
  py.stdout.on('data', (x) => {
    const all = (part + x).split('\n');
    part = all.pop();
    for (const l of all) took(l);
  });
  py.on('close', () => { gone = true; while (waiting.length) waiting.shift()('error gone'); });
  const next = () => (lines.length ? Promise.resolve(lines.shift()) : gone ? Promise.resolve('error gone')
    : new Promise((res) => waiting.push(res)));
  const chunks = [];
  let ended = false, error = null;
  const say = async (cmd) => {
    if (!gone) py.stdin.write(cmd + '\n');
    const l = await next();
    if (l.startsWith('error ')) error ??= l.slice(6);
    else if (l === 'end') ended = true;
    else if (l.startsWith('data ')) chunks.push(Buffer.from(l.slice(5), 'hex'));
    return l;
  };
  const first = await next();
  if (!/^port \d+$/.test(first)) throw new Error(`small_rcvbuf.py did not connect: ${first}`);
  const c = {
    localPort: Number(first.slice(5)), chunks,
    got: () => chunks.reduce((n, b) => n + b.length, 0),
    ended: () => ended,
    error: () => error,
    send: (buf) => say(`send ${Buffer.from(buf).toString('hex')}`),
    take: (n) => (ended || error ? Promise.resolve() : say(`read ${n}`)),
    async drain(ms = 20000) {
      for (const until = Date.now() + ms * SLOW; !ended && !error && Date.now() < until;) {
        const l = await say(`read ${1 << 20}`);
        if (l === 'data ') await new Promise((r) => setTimeout(r, 20));
      }
      if (ended) await say('shut');
    },
    shut: () => say('shut'),
    close: () => say('close'),
  };
  return c;
}

/**
 * holdLoad(t, modelDir): the model's next load holds on, its pool job
 * waiting, until release(): its config.json becomes a FIFO (with the
 * same text), so the load blocks in reading it (model__read_file: fopen
 * waits for a writer, fread for the end). waiting() resolves to true once
 * attnd has it open (the load's pool job is there; a writer's
 * non-blocking open fails, ENXIO, until a reader has it), false after ms
 * (x SLOW: a hang's bound). release() writes the text and ends it, and
 * puts the regular file back: the load goes on, and later loads read the
 * file. Released at the test's end if the test did not.
 */
export function holdLoad(t, modelDir) {
  const path = join(modelDir, 'config.json'), text = readFileSync(path);
  rmSync(path);
  const mk = spawnSync('mkfifo', [path]);
  if (mk.status !== 0) throw new Error(`mkfifo ${path}: ${mk.stderr}`);
  let fd = null, done = false;
  const open = () => {
    try {
      fd = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK);
    } catch (e) {
      if (e.code !== 'ENXIO') throw e;
    }
    return fd !== null;
  };
  const release = () => {
    if (done) return;
    done = true;
    if (fd !== null || open()) {
      writeSync(fd, text); // a config's few hundred bytes: within the pipe's buffer
      closeSync(fd);
    }
    rmSync(path); // (the reader keeps what it opened)
    writeFileSync(path, text);
  };
  t.after(release);
  return {
    waiting: async (ms = 20000) => {
      for (const t0 = Date.now(); !open() && Date.now() - t0 < ms * SLOW;) await new Promise((r) => setTimeout(r, 5));
      return fd !== null;
    },
    release,
  };
}

/**
 * mapFloats(d, id, q, shape): GET /v2/maps/{id}/attention?q as float32s,
 * its status 200 and its Map-Shape header `shape` asserted; format=npy's
 * header checked and skipped.
 */
export async function mapFloats(d, id, q, shape) {
  const r = await fetch(`${d.url}/v2/maps/${id}/attention?${q}`);
  const buf = Buffer.from(await r.arrayBuffer());
  assert.equal(r.status, 200, `${q}: ${buf.toString().slice(0, 300)}`);
  assert.equal(r.headers.get('map-shape'), shape.join(','), q);
  const off = q.includes('format=npy') ? buf.length - 4 * shape.reduce((a, x) => a * x, 1) : 0;
  if (off) assert.equal(buf.subarray(0, 6).toString('latin1'), '\x93NUMPY', q);
  return Array.from(new Float32Array(buf.buffer.slice(buf.byteOffset + off, buf.byteOffset + buf.length)));
}

/**
 * untilClosed(port, text, ms): everything the server sends on one
 * connection, text written on it, until it closes it (rejects when it
 * keeps it open past ms).
 */
export function untilClosed(port, text, ms = 5000) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1' });
    let buf = '';
    const t = setTimeout(() => { sock.destroy(); reject(new Error(`kept open past ${ms} ms: ${buf.slice(0, 300)}`)); }, ms);
    sock.on('data', (d) => { buf += d; });
    sock.on('error', () => {});
    sock.on('close', () => { clearTimeout(t); resolve(buf); });
    sock.write(text);
  });
}
