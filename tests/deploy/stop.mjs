#!/usr/bin/env node
// stop.mjs - replicas that stop under a sequence's steps: three attnd
// replicas behind deploy/nginx.conf, sequences stepped through it, and
// what each client gets when its sequence's replica dies or drains, as
// README "Sequences across replicas" says.
//
//   ATTND_BIN=build/default/attnd node tests/deploy/stop.mjs
//
// NSEQ sequences (fixture model `tiny`, causal) are started with a token
// and stepped one token at a time; every 200 must carry the rows of a one-shot causal run over the
// sequence's history (computed on a replica directly) and its
// sequence_length. Then:
//   1. SIGKILL mid-request: the replica holding the most sequences is
//      stopped (SIGSTOP), one step of every sequence is sent, and once its
//      own steps sit unread in its sockets (/proc/net/tcp) it is SIGKILLed.
//      Its steps must come back 400 "unknown sequence" from the next
//      replica on the ring (nginx passes a reset attempt on), never a 502;
//      the others 200; its sequences' retained maps (every start retains)
//      answer 404, the others' 200. The lost ones are restarted there with
//      their history, and the restart's retain makes a new map (200); the
//      survivors' attnd_sequences_started_total and 400 counts rise by
//      the restarts and the lost steps; a DELETE of a lost one meets the
//      next replica's 404 "unknown sequence".
//      gRPC calls (a step of ids never started, attnd-sequence-id
//      metadata) sent to it as it is killed are answered HTTP 502
//      (UNAVAILABLE) or passed on (INVALID_ARGUMENT unknown sequence from
//      the next replica); sent again, the next replica's INVALID_ARGUMENT.
//   2. It comes back under the same address: the hash sends those ids to
//      it again, and their next step meets the same 400 (from it); they are
//      restarted again and go on exact. DELETE /v2/sequences/<id> with the
//      header reaches its sequence's replica (200, then 404).
//   2b. It is stopped again with every step unread in its sockets, and
//      SIGTERMed and continued: each of its steps is answered 200 (exact)
//      or 503 naming the sequence (or, come as it exits, passed on: 400 or
//      409 from the next replica), never 502; it exits 0, comes back once
//      more, and its sequences meet its 400 and are restarted.
//   3. A burst of SIGTERMs: two replicas at once, each drain held open by
//      a client slow to send its body. Their sequences' steps get 503
//      "draining ... sequence '<id>' ends with it", Retry-After 1; once
//      both have exited (the slow clients gone: exit 0), the same steps
//      sent again must reach the last replica and meet its 400 (with two
//      of three replicas gone, the ring's second choice of some ids is the
//      other dead one: nginx must go on round the ring, not answer 502),
//      then restart there and finish exact; or, where the last replica
//      still holds an old copy (its restart after 1.), its 409 naming the
//      position to send from (every step carries sequence_position).
//      And gRPC calls with attnd-sequence-id metadata and map fetches with
//      X-Attnd-Session for 16 ids never seen must reach the last replica
//      too (INVALID_ARGUMENT unknown sequence; 404), not nginx's 502.
// Everything listens on 127.0.0.1 on ports picked here; nginx runs as a
// non-daemon child (replicas.mjs). Settings (env): STOP_SEQUENCES (18),
// NGINX (nginx), STOP_KEEP=1 keeps the folder. Prints `stop: N passed, M
// failed` (steps answered as expected) and exits 1 if any step or check
// failed.
import { cpSync, readFileSync } from "node:fs";
import http2 from "node:http2";
import { createConnection } from "node:net";
import { join } from "node:path";
import { embed } from "../../server/web/embed.js";
import { frame, ld, packedI64, str } from "../grpc/wire.mjs";
import { ROOT, freePorts, harness, inferPost, rowsDiffer } from "./replicas.mjs";

const NSEQ = Number(process.env.STOP_SEQUENCES || 18);
const TOKENS = 10; // a sequence takes at most 7 before the last loop steps it to 10
const MODEL = "tiny", D = 8, HEADER = "Attnd-Sequence-Id";
const { BIN, T0, dir, say, check, failedChecks, start, waitReady, exitWithin, startReplicas, startNginx, logged, finish } = harness("stop");
cpSync(join(ROOT, "tests/server/fixtures/models"), join(dir, "models"), { recursive: true });
const SLOW = /sanitiz|thread|address|undefined/.test(BIN) ? 5 : 1;

const xInput = (words, pos0) => ({ name: "x", datatype: "FP32", shape: [1, words.length, D], data: Array.from(embed(words, D, pos0)) });
const wordsOf = (s) => Array.from({ length: TOKENS }, (_, k) => `t${s}w${k}${k % 2 ? "z" : ""}`);
const unknown = (r) => r.status === 400 && /unknown sequence/.test(r.json?.error ?? "");

// until(what, fn): fn() until it is truthy (every 50 ms; 30 s x SLOW).
async function until(what, fn) {
  const end = Date.now() + 30000 * SLOW;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${30 * SLOW} s`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

// unread(port): established TCP connections to 127.0.0.1:port holding
// bytes their server has not read (/proc/net/tcp's rx_queue).
function unread(port) {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1).filter((l) => {
    const f = l.trim().split(/\s+/);
    return f[1] === `0100007F:${hex}` && f[3] === "01" && parseInt(f[4].split(":")[1], 16) > 0;
  }).length;
}

async function main() {
  const [lbPort, lbGrpcPort, ...ports] = await freePorts(8);
  const replicaPorts = ports.slice(0, 3), grpcPorts = ports.slice(3, 6);
  const envOf = (i) => ({ ATTND_GRPC_PORT: String(grpcPorts[i]) });
  const replicas = await startReplicas(replicaPorts, envOf);
  const v2 = await (await fetch(`http://${replicas[0].addr}/v2`)).json();
  // every attnd lists it (server/routes.c): without it this would test nothing
  if (!(v2.extensions || []).includes("sequences")) {
    check(false, `/v2 lists the sequences extension: ${JSON.stringify(v2)}`);
    return false;
  }
  let conf = readFileSync(join(ROOT, "deploy", "nginx.conf"), "utf8");
  conf = conf.replace("listen 127.0.0.1:8080;", `listen 127.0.0.1:${lbPort};`).replace("listen 127.0.0.1:8001 http2;", `listen 127.0.0.1:${lbGrpcPort} http2;`);
  [8081, 8082, 8083].forEach((d, i) => { conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${replicaPorts[i]} `); });
  [9081, 9082, 9083].forEach((d, i) => { conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${grpcPorts[i]} `); });
  const base = await startNginx(conf, lbPort);

  // grpcOne(id): one ModelInfer call through nginx's gRPC port, a step of
  // one token with the attnd-sequence-id metadata only; "HTTP <status>
  // grpc-status <code> <message>".
  const gs = http2.connect(`http://127.0.0.1:${lbGrpcPort}`);
  gs.on("error", () => {});
  const msg = Buffer.concat([str(1, MODEL), ld(5, Buffer.concat([str(1, "x"), str(2, "FP32"), packedI64(3, [1, 1, D])])),
    ld(7, Buffer.from(embed(["w"], D, 3).buffer))]);
  const grpcOne = (id) => new Promise((resolve) => {
    const req = gs.request({ ":method": "POST", ":path": "/inference.GRPCInferenceService/ModelInfer",
      "content-type": "application/grpc", te: "trailers", "attnd-sequence-id": id });
    let http, status, message;
    req.on("response", (hd) => { http = hd[":status"]; status = hd["grpc-status"] ?? status; message = hd["grpc-message"] ?? message; });
    req.on("trailers", (hd) => { status = hd["grpc-status"]; message = hd["grpc-message"]; });
    req.on("data", () => {});
    req.on("error", (e) => resolve(`error ${e.message}`));
    req.on("end", () => resolve(`HTTP ${http} grpc-status ${status} ${decodeURIComponent(message ?? "")}`));
    req.end(frame(msg));
  });

  const refs = [];
  for (let s = 0; s < NSEQ; s++) {
    const r = await inferPost(`http://${replicas[0].addr}`, MODEL, { inputs: [xInput(wordsOf(s), 0)], parameters: { causal: true } });
    if (r.status !== 200) throw new Error(`reference ${s}: HTTP ${r.status}`);
    refs.push(r.json.outputs.find((o) => o.name === "y").data.flat(Infinity));
  }

  let passed = 0, failed = 0, sent = 0;
  const fails = [];
  const seqs = Array.from({ length: NSEQ }, (_, s) => ({ s, id: `stop-${s}-${T0.toString(36)}`, words: wordsOf(s), len: 0 }));
  const isStep = (l) => seqs.some((q) => q.id === l.seq);
  // send(q, start, at): q's next token (or, start, its whole history and
  // the next token; or, at, its tokens from position at on, the next one
  // last); the answer as it came.
  const send = (q, start = false, at = undefined) => {
    const from = start ? 0 : at ?? q.len;
    sent++;
    return inferPost(base, MODEL, { inputs: [xInput(q.words.slice(from, q.len + 1), from)],
      parameters: { sequence_id: q.id, causal: true, ...(start ? { sequence_start: true, retain: true } : { sequence_position: from }) } }, { [HEADER]: q.id });
  };
  // exact(q, r, start): r must be the 200 of q's next token; q.len moves on.
  function exact(q, r, start, when, at = undefined) {
    const from = start ? 0 : at ?? q.len, upto = q.len + 1;
    let why = null;
    if (r.status !== 200) why = `HTTP ${r.status} ${JSON.stringify(r.json ?? r.err).slice(0, 200)}`;
    else {
      const y = r.json.outputs?.find((o) => o.name === "y")?.data?.flat(Infinity);
      why = rowsDiffer(y, refs[q.s].slice(from * D, upto * D));
      if (!why && r.json.parameters?.sequence_length !== upto) why = `sequence_length ${r.json.parameters?.sequence_length}, want ${upto}`;
    }
    if (why) { failed++; fails.push(`${when}: ${q.id} [${from}, ${upto}): ${why}`); return false; }
    passed++;
    q.len = upto;
    if (start) q.map = r.json.parameters?.map_id;
    return true;
  }
  function want(ok, q, r, what, when) {
    if (ok) passed++;
    else { failed++; fails.push(`${when}: ${q.id}: want ${what}, got ${r.status} ${JSON.stringify(r.json ?? r.err).slice(0, 200)}`); }
    return ok;
  }
  // holders(): sequence id -> the replica that answered its last 200.
  async function holders() {
    const m = new Map();
    for (const l of await logged(isStep, sent, "the steps")) if (isStep(l) && l.status === 200) m.set(l.seq, l.upstreams.at(-1));
    return m;
  }

  // Started, then one step each.
  await Promise.all(seqs.map(async (q) => { q.len = 0; exact(q, await send(q, true), true, "start"); }));
  await Promise.all(seqs.map(async (q) => exact(q, await send(q), false, "step")));

  // mapStatus(q): the status of a fetch of q's retained map through nginx,
  // with its sequence's header (the map lives on the sequence's replica).
  const mapStatus = async (q) => {
    sent++;
    const r = await fetch(`${base}/v2/maps/${q.map}`, { headers: { [HEADER]: q.id }, signal: AbortSignal.timeout(30000) }).catch(() => null);
    if (r) await r.arrayBuffer();
    return r ? r.status : 0;
  };
  const maps200 = (await Promise.all(seqs.map(mapStatus))).filter((st) => st === 200).length;
  check(seqs.every((q) => q.map) && maps200 === NSEQ, `${maps200} of ${NSEQ} retained maps (started with retain) fetched through nginx with their Attnd-Sequence-Id`);

  // gRPC calls of 24 ids never started (all on other replicas than the
  // victim: odds (2/3)^24, 6e-5): where the hash sends each (its
  // replica answers INVALID_ARGUMENT unknown sequence).
  const gids = Array.from({ length: 24 }, (_, i) => `stop-g-${i}-${T0.toString(36)}`);
  const gfirst = await Promise.all(gids.map(grpcOne));
  check(gfirst.every((g) => /grpc-status 3 .*unknown sequence/.test(g)), `gRPC: ${gids.length} calls of ids never started answered INVALID_ARGUMENT unknown sequence`);
  const gat = new Map();
  for (const l of await logged((l) => gids.includes(l.seq), gids.length, "the gRPC calls")) if (gids.includes(l.seq)) gat.set(l.seq, l.upstreams.at(-1));

  // 1. SIGKILL with its steps in flight.
  let held = await holders();
  const count = (r) => seqs.filter((q) => held.get(q.id) === r.addr).length;
  const victim = replicas.reduce((a, b) => (count(b) > count(a) ? b : a));
  const mine = seqs.filter((q) => held.get(q.id) === victim.addr);
  const vgrpc = grpcPorts[replicas.indexOf(victim)];
  const gmine = gids.filter((id) => gat.get(id) === `127.0.0.1:${vgrpc}`);
  say(`sequences per replica: ${replicas.map(count).join(", ")}; SIGSTOP then SIGKILL ${victim.addr} under ${mine.length} steps`);
  check(mine.length >= 2, `the victim holds ${mine.length} sequences`);
  const survivors = replicas.filter((r) => r !== victim);
  // counters(): the survivors' sequences started and REST 400s, summed
  const counters = async () => {
    let started = 0, bad = 0;
    for (const r of survivors) {
      const t = await (await fetch(`http://${r.addr}/metrics`)).text();
      started += Number(/^attnd_sequences_started_total\{model="tiny",version="1"\} (\d+)/m.exec(t)?.[1] ?? NaN);
      bad += Number(/^attnd_http_responses_total\{code="400"\} (\d+)/m.exec(t)?.[1] ?? 0);
    }
    return { started, bad };
  };
  const c0 = await counters();
  victim.rec.child.kill("SIGSTOP");
  const pending = seqs.map((q) => send(q).then((r) => [q, r]));
  const gpending = Promise.all(gmine.map(grpcOne));
  await until(`${mine.length} steps unread on ${victim.addr}, ${gmine.length} calls on its gRPC port`,
    () => unread(victim.port) >= mine.length && unread(vgrpc) >= gmine.length);
  victim.rec.child.kill("SIGKILL");
  await victim.rec.exited;
  // gRPC: a call already sent is answered 502 (UNAVAILABLE) or passed on
  // (INVALID_ARGUMENT from the next replica); sent again, the next one's
  // INVALID_ARGUMENT
  const gk = await gpending;
  const gagain = await Promise.all(gmine.map(grpcOne));
  check(gmine.length > 0 && gk.every((g) => /^HTTP 502 /.test(g) || /grpc-status 3 .*unknown sequence/.test(g))
    && gagain.every((g) => /grpc-status 3 .*unknown sequence/.test(g)),
    `gRPC: ${gmine.length} calls under the SIGKILL: ${gk.map((g) => g.slice(0, 24)).join("; ")}; sent again: ${gagain.filter((g) => /grpc-status 3 /.test(g)).length} INVALID_ARGUMENT`);
  const lostOnce = [];
  for (const [q, r] of await Promise.all(pending)) {
    if (mine.includes(q)) {
      if (want(unknown(r), q, r, "400 unknown sequence (its replica killed under the step)", "SIGKILL")) lostOnce.push(q);
    } else exact(q, r, false, "SIGKILL, another replica's");
  }
  let lines = (await logged(isStep, sent, "the steps")).filter(isStep);
  const killed = lines.slice(-NSEQ).filter((l) => l.status === 400);
  check(killed.length === mine.length && killed.every((l) => l.upstreams.length === 2 && l.upstreams[0] === victim.addr),
    `each killed step was tried on ${victim.addr}, then answered by the next: ${killed.map((l) => l.upstreams.join(">")).join("; ")}`);
  // The killed replica's maps went with it (404 from the next replica);
  // the others' are still there.
  const mapsAfter = await Promise.all(seqs.map(async (q) => [q, await mapStatus(q)]));
  const mapsBad = mapsAfter.filter(([q, st]) => st !== (mine.includes(q) ? 404 : 200));
  check(mapsBad.length === 0, `after the SIGKILL its sequences' maps answer 404, the others' 200${mapsBad.length ? `: ${mapsBad.slice(0, 3).map(([q, st]) => `${q.id} ${st}`).join("; ")}` : ""}`);
  // A DELETE of a lost sequence (the header routes it) meets the next
  // replica's 404: nothing is left to free.
  const del = async (id) => {
    const r = await fetch(`${base}/v2/sequences/${id}`, { method: "DELETE", headers: { [HEADER]: id }, signal: AbortSignal.timeout(30000) }).catch((e) => ({ status: 0, text: async () => e.message }));
    return { status: r.status, text: (await r.text()).slice(0, 200) };
  };
  sent += lostOnce.length; // (their lines carry the sequences' ids: logged counts them)
  const gone = await Promise.all(lostOnce.map((q) => del(q.id)));
  check(gone.length > 0 && gone.every((d) => d.status === 404 && /unknown sequence/.test(d.text)),
    `DELETE of each lost sequence: ${gone.map((d) => d.status).join(", ")} (${gone[0]?.text ?? ""})`);
  await Promise.all(lostOnce.map(async (q) => exact(q, await send(q, true), true, "restart after SIGKILL")));
  // A sequence lost with its replica is counted nowhere: the survivors'
  // started and 400 counters rise as the clients restart (README).
  let c1;
  await until("the survivors' counters", async () => { c1 = await counters(); return c1.started - c0.started >= lostOnce.length && c1.bad - c0.bad >= mine.length; }).catch(() => {});
  check(c1.started - c0.started === lostOnce.length && c1.bad - c0.bad === mine.length,
    `the survivors' attnd_sequences_started_total rose ${c1.started - c0.started} (${lostOnce.length} restarts), their 400s ${c1.bad - c0.bad} (${mine.length} lost)`);
  const remade = (await Promise.all(lostOnce.map(mapStatus))).filter((st) => st === 200).length;
  check(remade === lostOnce.length, `the restarts' retain made new maps: ${remade} of ${lostOnce.length} fetched`);

  // 2. It comes back under the same address: the ids go to it again.
  let lives = 0;
  async function comeback() {
    const again = start(`attnd-again${++lives}`, BIN, [], { ATTND_HOST: "127.0.0.1", ATTND_PORT: String(victim.port), ATTND_MODELS: join(dir, "models"),
      ATTND_THREADS: "1", ATTND_DRAIN_MS: "5000", ...envOf(replicas.indexOf(victim)) });
    await waitReady(`http://${victim.addr}/v2/health/ready`, again);
    victim.rec = again;
  }
  await comeback();
  const back = await Promise.all(seqs.map(async (q) => [q, await send(q)]));
  const lostTwice = [];
  for (const [q, r] of back) {
    if (lostOnce.includes(q)) { if (want(unknown(r), q, r, "400 unknown sequence (its replica came back empty)", "comeback")) lostTwice.push(q); }
    else exact(q, r, false, "comeback, another replica's");
  }
  lines = (await logged(isStep, sent, "the steps")).filter(isStep);
  check(lines.slice(-NSEQ).filter((l) => l.status === 400).every((l) => l.upstreams.join() === victim.addr),
    `after the comeback the 400s came from ${victim.addr}, the ids' own replica again`);
  await Promise.all(lostTwice.map(async (q) => exact(q, await send(q, true), true, "restart after the comeback")));
  // DELETE through nginx with the header reaches the sequence's replica:
  // 6 sequences begun for it are each deleted (200), and again (404).
  {
    const ds = Array.from({ length: 6 }, (_, i) => ({ s: i, id: `stop-del-${i}-${T0.toString(36)}`, words: wordsOf(i), len: 0 }));
    const begun = await Promise.all(ds.map((q) => inferPost(base, MODEL, { inputs: [xInput(q.words.slice(0, 1), 0)], parameters: { sequence_id: q.id, sequence_start: true } }, { [HEADER]: q.id })));
    const first = await Promise.all(ds.map((q) => del(q.id)));
    const second = await Promise.all(ds.map((q) => del(q.id)));
    check(begun.every((r) => r.status === 200) && first.every((d) => d.status === 200) && second.every((d) => d.status === 404),
      `DELETE /v2/sequences/<id> with the header: begun ${begun.map((r) => r.status).join(",")}, deleted ${first.map((d) => d.status).join(",")}, again ${second.map((d) => d.status).join(",")}`);
  }

  // 2b. SIGTERM with its steps unread in its sockets (stopped, the steps
  // sent, SIGTERM, then SIGCONT): each is answered by it, 200, or refused
  // 503 naming the sequence (a drain answers every new request so), or,
  // come as it exits, passed on by nginx to the next replica: 400 there, or
  // the 409 of an old copy. Never a 502.
  {
    const ids = seqs.filter((q) => held.get(q.id) === victim.addr || lostTwice.includes(q));
    victim.rec.child.kill("SIGSTOP");
    const inflight = seqs.map((q) => send(q).then((r) => [q, r]));
    await until(`${ids.length} steps unread on ${victim.addr}`, () => unread(victim.port) >= ids.length);
    victim.rec.child.kill("SIGTERM");
    victim.rec.child.kill("SIGCONT");
    const seen = {};
    for (const [q, r] of await Promise.all(inflight)) {
      if (!ids.includes(q)) { exact(q, r, false, "SIGTERM, another replica's"); continue; }
      const kind = r.status === 200 ? "200" : r.status === 503 && r.json?.error?.includes(`draining (shutting down); sequence '${q.id}' ends with it`) ? "503"
        : unknown(r) ? "400" : r.status === 409 ? "409" : `other ${r.status}`;
      seen[kind] = (seen[kind] ?? 0) + 1;
      if (kind === "200") exact(q, r, false, "SIGTERM, answered");
      else want(kind !== "other", q, r, "200, 503 naming the sequence, 400 or 409", "SIGTERM with steps unread");
    }
    say(`SIGTERM with ${ids.length} steps unread: ${JSON.stringify(seen)}`);
    const ex = await exitWithin(victim.rec, 15000 * SLOW);
    check(ex?.code === 0, `${victim.addr} exit after SIGTERM: ${JSON.stringify(ex)}`);
    // back once more: its sequences, ended with it, meet its 400 again
    await comeback();
    const round = await Promise.all(seqs.map(async (q) => [q, await send(q)]));
    const restart = [];
    for (const [q, r] of round) {
      if (ids.includes(q)) { if (want(unknown(r), q, r, "400 unknown sequence (its replica drained and came back)", "second comeback")) restart.push(q); }
      else exact(q, r, false, "second comeback, another replica's");
    }
    await Promise.all(restart.map(async (q) => exact(q, await send(q, true), true, "restart after the second comeback")));
  }

  // 3. A burst of SIGTERMs: two replicas at once, each drain held open.
  held = await holders();
  const [A, B] = [...replicas].sort((a, b) => count(b) - count(a));
  const C = replicas.find((r) => r !== A && r !== B);
  const draining = seqs.filter((q) => [A.addr, B.addr].includes(held.get(q.id)));
  say(`sequences per replica: ${replicas.map(count).join(", ")}; SIGTERM ${A.addr} and ${B.addr} at once`);
  const slow = [];
  for (const r of [A, B]) {
    const sock = createConnection(r.port, "127.0.0.1");
    sock.on("error", () => {});
    sock.write(`POST /v2/models/${MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"inputs":`);
    slow.push(sock);
    // attnd_open_requests counts the slow one (and the /metrics asking)
    await until(`the slow request open on ${r.addr}`, async () => {
      const t = await (await fetch(`http://${r.addr}/metrics`)).text();
      return Number(/^attnd_open_requests (\d+)/m.exec(t)?.[1]) >= 2;
    });
  }
  A.rec.child.kill("SIGTERM");
  B.rec.child.kill("SIGTERM");
  for (const r of [A, B]) await until(`${r.addr} draining (ready 503)`, async () =>
    (await fetch(`http://${r.addr}/v2/health/ready`).catch(() => null))?.status === 503);
  const during = await Promise.all(seqs.map(async (q) => [q, await send(q)]));
  for (const [q, r] of during) {
    if (draining.includes(q)) {
      want(r.status === 503 && r.json?.error?.includes(`draining (shutting down); sequence '${q.id}' ends with it`),
        q, r, "503 draining, naming the sequence", "SIGTERM burst");
    } else exact(q, r, false, "SIGTERM burst, the last replica's");
  }
  // (inferPost drops headers: Retry-After of one such step, asked again)
  const one = draining[0];
  const ra = one && await fetch(`${base}/v2/models/${MODEL}/infer`, { method: "POST", headers: { [HEADER]: one.id, "Content-Type": "application/json" },
    body: JSON.stringify({ inputs: [xInput(one.words.slice(one.len, one.len + 1), one.len)], parameters: { sequence_id: one.id, causal: true, sequence_position: one.len } }) });
  if (ra) { sent++; await ra.arrayBuffer(); }
  check(ra?.status === 503 && ra.headers.get("retry-after") === "1", `a draining replica's 503: Retry-After ${ra?.headers.get("retry-after")}`);
  for (const s of slow) s.destroy();
  for (const r of [A, B]) {
    const ex = await exitWithin(r.rec, 15000 * SLOW);
    check(ex?.code === 0, `${r.addr} exit after SIGTERM: ${JSON.stringify(ex)}`);
  }
  // The client sends the refused steps again: the last replica's 400, or
  // its 409 where it still holds an old copy of the sequence (from the
  // restart after the SIGKILL: README "A ring can also change and change
  // back"), naming the position to send from.
  const after = await Promise.all(draining.map(async (q) => [q, await send(q)]));
  const restart = [], resend = [];
  for (const [q, r] of after) {
    const at = r.status === 409 ? Number(/send its tokens from position (\d+) first/.exec(r.json?.error ?? "")?.[1]) : NaN;
    if (at >= 0 && at < q.len) { passed++; resend.push([q, at]); continue; }
    if (want(unknown(r), q, r, "400 unknown sequence (or 409 from an old copy) from the last replica, both others gone", "after the burst")) restart.push(q);
  }
  lines = (await logged(isStep, sent, "the steps")).filter(isStep);
  check(lines.slice(-draining.length).every((l) => l.upstreams.at(-1) === C.addr),
    `after the burst every step reached ${C.addr}: ${lines.slice(-draining.length).map((l) => `${l.status} ${l.upstreams.join(">")}`).join("; ")}`);
  await Promise.all(restart.map(async (q) => exact(q, await send(q, true), true, "restart after the burst")));
  await Promise.all(resend.map(async ([q, at]) => exact(q, await send(q, false, at), false, "resent from the old copy's length", at)));
  while (seqs.some((q) => q.len < TOKENS)) await Promise.all(seqs.filter((q) => q.len < TOKENS).map(async (q) => {
    if (!exact(q, await send(q), false, "to the end")) q.len = TOKENS;
  }));

  // The same round the ring for the other two hashes: gRPC calls with the
  // attnd-sequence-id metadata, and a session's requests. 16 ids never
  // seen: each must reach the last replica (INVALID_ARGUMENT "unknown
  // sequence", 404 for a map it never held), where a third of them, whose
  // ring puts the two dead replicas first, met 502 with two tries.
  const ids = Array.from({ length: 16 }, (_, i) => `stop-ring-${i}-${T0.toString(36)}`);
  const gbad = [], sbad = [];
  for (const id of ids) {
    const g = await grpcOne(id);
    if (!/grpc-status 3 .*unknown sequence/.test(g)) gbad.push(`${id}: ${g.slice(0, 120)}`);
    const r = await fetch(`${base}/v2/maps/m1-000000`, { headers: { "X-Attnd-Session": id }, signal: AbortSignal.timeout(30000) }).catch((e) => ({ status: e.message }));
    if (r.arrayBuffer) await r.arrayBuffer();
    if (r.status !== 404) sbad.push(`${id}: ${r.status}`);
  }
  check(gbad.length === 0, `gRPC: ${ids.length} calls with attnd-sequence-id, both other replicas gone, each answered INVALID_ARGUMENT unknown sequence by the last${gbad.length ? `: ${gbad.slice(0, 3).join("; ")}` : ""}`);
  check(sbad.length === 0, `sessions: ${ids.length} map fetches with X-Attnd-Session, both other replicas gone, each answered 404 by the last${sbad.length ? `: ${sbad.slice(0, 3).join("; ")}` : ""}`);

  gs.close();
  for (const f of fails.slice(0, 12)) say(`  ${f}`);
  C.rec.child.kill("SIGTERM");
  check((await exitWithin(C.rec, 15000 * SLOW))?.code === 0, `${C.addr} exit after SIGTERM`);
  console.log(`stop: ${passed} passed, ${failed + failedChecks()} failed`);
  return failed === 0 && failedChecks() === 0;
}

finish(main);
