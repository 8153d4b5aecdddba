#!/usr/bin/env node
// failover.mjs - three attnd replicas behind nginx (deploy/nginx.conf), a
// bounded load through nginx, one replica killed (SIGKILL) in the middle.
//
//   ATTND_BIN=build/default/attnd node tests/deploy/failover.mjs
//
// Everything listens on 127.0.0.1, on ports picked here; nginx runs as a
// non-daemon child with its prefix, logs and temp files under a temp folder
// (replicas.mjs starts them all).
// Every load request is the seed-000 worked example with V scaled by a
// per-request factor s (so output = s * the seed's output and a response
// mixed up between requests is caught); each answer is checked. Then:
//   - every request passed (nginx retried the ones the kill interrupted),
//   - requests that started after the kill were all answered by the two
//     survivors, both of them, as nginx's access log shows,
//   - a client with an X-Attnd-Session header stays on one replica, so a
//     retained map fetched through nginx is found,
//   - gRPC calls through nginx's grpc_pass (the seed over ModelInfer) all
//     answer right after the kill,
//   - the survivors exit 0 on SIGTERM.
// Settings (env): FAILOVER_REQUESTS (600), FAILOVER_CONCURRENCY (8),
// FAILOVER_TIME_CAP_S (120), NGINX (nginx), FAILOVER_KEEP=1 keeps the folder.
// Prints `failover: N passed, M failed` (the load requests) and exits 1 if
// any request or check failed.
import http2 from "node:http2";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, freePorts, harness } from "./replicas.mjs";

const REQUESTS = Number(process.env.FAILOVER_REQUESTS || 600);
const CONCURRENCY = Number(process.env.FAILOVER_CONCURRENCY || 8);
const TIME_CAP_MS = 1000 * Number(process.env.FAILOVER_TIME_CAP_S || 120);
const KILL_AT = Math.floor(REQUESTS / 3);
const { T0, dir, say, check, failedChecks, exitWithin, startReplicas, startNginx, logged, finish } = harness("failover");
mkdirSync(join(dir, "models"));

// Seed 000 worked example (T=2, d_k=4, d_v=2): weights and output.
const Q = [2, 0, 2, 0, 0, 4, 0, 2];
const K = [1, 0, 1, 0, 0, 1, 0, 0];
const V = [1, 2, 3, 0];
const WANT_ATTENTION = [0.880797, 0.119203, 0.119203, 0.880797];
const WANT_OUTPUT = [1.238404, 1.761594, 2.761594, 0.238405];

async function get(url, headers = {}) {
  try {
    const r = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
    return { status: r.status, body: Buffer.from(await r.arrayBuffer()) };
  } catch (e) {
    return { status: 0, body: Buffer.from(String(e.cause?.code || e.message)) };
  }
}

function inferBody(scale, parameters) {
  return JSON.stringify({
    inputs: [
      { name: "q", datatype: "FP32", shape: [2, 4], data: Q },
      { name: "k", datatype: "FP32", shape: [2, 4], data: K },
      { name: "v", datatype: "FP32", shape: [2, 2], data: V.map((x) => x * scale) },
    ],
    outputs: [{ name: "output" }, { name: "attention" }],
    ...(parameters ? { parameters } : {}),
  });
}

// infer: one request through nginx; resolves to null when the answer is
// right, else to the reason it is not.
async function infer(base, seq, scale, headers = {}, parameters) {
  let r;
  try {
    r = await fetch(`${base}/v2/models/sdpa/infer`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Request-Id": String(seq), ...headers },
      body: inferBody(scale, parameters),
      signal: AbortSignal.timeout(30000),
    });
  } catch (e) {
    return { err: `request ${seq}: ${e.cause?.code || e.message}` };
  }
  const text = await r.text();
  if (r.status !== 200) return { err: `request ${seq}: HTTP ${r.status} ${text.slice(0, 200)}` };
  let resp;
  try {
    resp = JSON.parse(text);
  } catch {
    return { err: `request ${seq}: not JSON: ${text.slice(0, 100)}` };
  }
  const outs = Object.fromEntries((resp.outputs || []).map((o) => [o.name, (o.data || []).flat(Infinity)]));
  const close = (got, want) =>
    Array.isArray(got) && got.length === want.length && got.every((g, i) => Math.abs(g - want[i]) <= 1e-5 * Math.max(1, Math.abs(want[i])));
  if (!close(outs.output, WANT_OUTPUT.map((x) => x * scale))) return { err: `request ${seq}: output ${JSON.stringify(outs.output)} != ${scale} x seed` };
  if (!close(outs.attention, WANT_ATTENTION)) return { err: `request ${seq}: attention ${JSON.stringify(outs.attention)}` };
  return { resp };
}

// grpcInfers: n ModelInfer calls (the seed, raw_input_contents, protobuf
// written by hand) over one HTTP/2 connection to nginx's gRPC port; counts
// the answers with grpc-status 0 and the seed's output.
async function grpcInfers(port, n) {
  const varint = (v) => { const b = []; do { b.push((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>>= 7; } while (v); return Buffer.from(b); };
  const ld = (f, bytes) => Buffer.concat([varint((f << 3) | 2), varint(bytes.length), bytes]);
  const t = [["q", [2, 4], Q], ["k", [2, 4], K], ["v", [2, 2], V]];
  const msg = Buffer.concat([ld(1, Buffer.from("sdpa")),
    ...t.map(([name, s]) => ld(5, Buffer.concat([ld(1, Buffer.from(name)), ld(2, Buffer.from("FP32")), ld(3, Buffer.concat(s.map(varint)))]))),
    ...t.map(([, , v]) => ld(7, Buffer.from(new Float32Array(v).buffer)))]);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  let ok = 0, err;
  for (let i = 0; i < n; i++) {
    const r = await new Promise((resolve) => {
      const req = session.request({ ":method": "POST", ":path": "/inference.GRPCInferenceService/ModelInfer", "content-type": "application/grpc", te: "trailers" });
      let status;
      const chunks = [];
      req.on("response", (h) => { status = h["grpc-status"] ?? status; });
      req.on("trailers", (h) => { status = h["grpc-status"]; });
      req.on("data", (c) => chunks.push(c));
      req.on("error", (e) => resolve({ err: e.message }));
      req.on("end", () => resolve({ status, body: Buffer.concat(chunks) }));
      req.end(Buffer.concat([head, msg]));
    });
    if (r.status !== "0") { err = r.err ?? `grpc-status ${r.status}`; continue; }
    // raw_output_contents (field 6) is the last field: 16 bytes of floats
    const out = Array.from(new Float32Array(r.body.buffer.slice(r.body.byteOffset + r.body.length - 16, r.body.byteOffset + r.body.length)));
    if (out.every((x, j) => Math.abs(x - WANT_OUTPUT[j]) < 1e-5)) ok++;
    else err = `output ${out}`;
  }
  session.close();
  return { ok, err };
}

async function main() {
  const ports = await freePorts(8);
  const [lbPort, lbGrpcPort] = ports;
  const replicaPorts = ports.slice(2, 5);
  const grpcPorts = ports.slice(5, 8);
  const replicas = await startReplicas(replicaPorts, (i) => ({ ATTND_GRPC_PORT: String(grpcPorts[i]) }));

  // deploy/nginx.conf as committed, with this run's ports.
  let conf = readFileSync(join(ROOT, "deploy", "nginx.conf"), "utf8");
  const defaults = [8081, 8082, 8083];
  const nServers = (conf.match(/^\s*server 127\.0\.0\.1:808[123]\b/gm) || []).length;
  if (nServers !== 9 || !/listen 127\.0\.0\.1:8080;/.test(conf))
    throw new Error("deploy/nginx.conf no longer has the listen line and the 3 x 3 server lines this test fills in");
  conf = conf.replace("listen 127.0.0.1:8080;", `listen 127.0.0.1:${lbPort};`);
  defaults.forEach((d, i) => {
    conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${replicaPorts[i]} `);
  });
  if (!conf.includes("listen 127.0.0.1:8001 http2;") || (conf.match(/server 127\.0\.0\.1:908[123] /g) || []).length !== 6)
    throw new Error("deploy/nginx.conf no longer has the gRPC listen line and the 2 x 3 gRPC server lines this test fills in");
  conf = conf.replace("listen 127.0.0.1:8001 http2;", `listen 127.0.0.1:${lbGrpcPort} http2;`);
  [9081, 9082, 9083].forEach((d, i) => {
    conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${grpcPorts[i]} `);
  });
  const base = await startNginx(conf, lbPort);

  // Sticky sessions: one replica per X-Attnd-Session, so retained maps are
  // found through nginx.
  const session = { "X-Attnd-Session": "failover-test" };
  const kept = await infer(base, "sticky-0", 1, session, { retain: true, tokens: ["t0", "t1"] });
  const mapId = kept.resp?.parameters?.map_id;
  check(mapId !== undefined, `retained map through nginx: map_id ${mapId} ${kept.err ?? ""}`);
  for (let i = 1; i <= 6; i++) {
    const r = await infer(base, `sticky-${i}`, 1, session);
    if (r.err) check(false, r.err);
  }
  if (mapId !== undefined) {
    const m = await get(`${base}/v2/maps/${mapId}`, session);
    check(m.status === 200, `GET /v2/maps/${mapId} with the same session -> ${m.status}`);
  }
  // 8 requests: the retaining infer, 6 more, the fetch (nginx writes a
  // line after its answer went out: wait for all 8)
  const stickyUps = new Set((await logged((l) => l.session === "failover-test", mapId !== undefined ? 8 : 7, "the session's requests"))
    .filter((l) => l.session === "failover-test").map((l) => l.upstreams.at(-1)));
  check(stickyUps.size === 1, `session requests all went to one replica (${[...stickyUps].join(", ")})`);

  // load: `count` requests (sequence numbers from seqBase), CONCURRENCY at
  // a time, under the time cap; once `at` of them have completed, act()
  // runs once. Returns the passed count, the errors, and the sequence
  // numbers of requests started after act().
  async function load(count, seqBase, at, act) {
    let next = 0;
    let done = 0;
    let passed = 0;
    let acted = false;
    const after = new Set();
    const errors = [];
    const deadline = Date.now() + TIME_CAP_MS;
    async function worker() {
      while (next < count && Date.now() < deadline) {
        const seq = seqBase + next++;
        if (acted) after.add(String(seq));
        const r = await infer(base, seq, 1 + (seq % 7));
        done++;
        if (r.err) errors.push(r.err);
        else passed++;
        if (done === at && !acted) {
          acted = true;
          act(next - done);
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    if (next < count) errors.push(`${count - next} requests not sent before the ${TIME_CAP_MS / 1000}s cap`);
    for (const e of errors.slice(0, 10)) say(`  ${e}`);
    return { passed, failed: count - passed, after, acted, sent: next };
  }
  // the load's lines (X-Request-Id: its sequence number), once the first
  // n of them are all there
  const isLoad = (l) => /^\d+$/.test(l.req ?? "");
  let loadLines = [];
  const waitLoad = async (n, what) => { loadLines = (await logged(isLoad, n, what)).filter(isLoad); };
  const log = () => loadLines;
  const count = (lines) => Object.fromEntries(replicas.map((r) => [r.addr, lines.filter((l) => l.status === 200 && l.upstreams.at(-1) === r.addr).length]));

  // Phase 1: the second replica is SIGKILLed a third of the way in (a
  // crash: in-flight requests on it are cut off and nginx must retry them).
  const victim = replicas[1];
  const survivors = [replicas[0], replicas[2]];
  say(`load: ${REQUESTS} requests, ${CONCURRENCY} concurrent, cap ${TIME_CAP_MS / 1000}s; SIGKILL ${victim.addr} after ${KILL_AT}`);
  const p1 = await load(REQUESTS, 0, KILL_AT, (inFlight) => {
    victim.rec.child.kill("SIGKILL");
    say(`killed ${victim.addr} (pid ${victim.rec.child.pid}) with ${inFlight} requests in flight`);
  });
  await waitLoad(p1.sent, "phase 1's requests");
  const after1 = log().filter((l) => p1.after.has(l.req));
  say(`answered per replica, all: ${JSON.stringify(count(log()))}`);
  say(`answered per replica, started after the kill: ${JSON.stringify(count(after1))}`);
  say(`requests nginx retried on another replica: ${log().filter((l) => l.upstreams.length > 1).length}`);
  say(`phase 1: ${p1.passed} of ${REQUESTS} answered right`);
  check(p1.acted, "a replica was killed mid-run");
  check(count(after1)[victim.addr] === 0, "no request started after the kill was answered by the killed replica");
  check(survivors.every((r) => count(after1)[r.addr] > 0), "both survivors answered requests after the kill");
  const g = await grpcInfers(lbGrpcPort, 12);
  check(g.ok === 12, `gRPC through nginx after the kill: ${g.ok} of 12 seed ModelInfer calls right ${g.err ?? ""}`);

  // Phase 2: a rolling restart's half: one survivor gets SIGTERM under load
  // (it drains: finishes what it admitted, refuses the rest, exits 0) and
  // the last replica takes over without a failed request.
  const [drained, last] = survivors;
  const n2 = Math.ceil(REQUESTS / 3);
  say(`load: ${n2} requests; SIGTERM ${drained.addr} after ${Math.floor(n2 / 4)}`);
  const p2 = await load(n2, REQUESTS, Math.floor(n2 / 4), (inFlight) => {
    drained.rec.child.kill("SIGTERM");
    say(`SIGTERM to ${drained.addr} with ${inFlight} requests in flight`);
  });
  const ex = await exitWithin(drained.rec, 15000);
  check(ex && ex.code === 0, `${drained.addr} exit after SIGTERM under load: ${JSON.stringify(ex)}`);
  // Requests that started once the drain had taken hold (a whole
  // concurrency window later) all went to the last replica.
  await waitLoad(p1.sent + p2.sent, "phase 2's requests");
  const after2 = log().filter((l) => p2.after.has(l.req) && Number(l.req) >= REQUESTS + Math.floor(n2 / 4) + 2 * CONCURRENCY);
  say(`answered per replica, phase 2 after the drain: ${JSON.stringify(count(after2))}`);
  say(`phase 2: ${p2.passed} of ${n2} answered right`);
  check(after2.length > 0 && count(after2)[last.addr] === after2.length, "the last replica answered everything after the drain");

  last.rec.child.kill("SIGTERM");
  const ex2 = await exitWithin(last.rec, 15000);
  check(ex2 && ex2.code === 0, `${last.addr} exit after SIGTERM: ${JSON.stringify(ex2)}`);
  const passed = p1.passed + p2.passed;
  const failed = p1.failed + p2.failed;
  say(`${REQUESTS + n2} requests in ${((Date.now() - T0) / 1000).toFixed(1)} s`);
  console.log(`failover: ${passed} passed, ${failed + failedChecks()} failed`);
  return failed === 0 && failedChecks() === 0;
}

finish(main);
