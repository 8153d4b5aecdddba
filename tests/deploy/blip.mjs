#!/usr/bin/env node
// blip.mjs - a replica that fails one request and stays alive: the
// sequences it holds must not leave it and come back to their old copies.
//
//   ATTND_BIN=build/default/attnd node tests/deploy/blip.mjs
//
// Three attnd replicas behind deploy/nginx.conf, each reached through a TCP
// relay of this script's, so that one replica can be cut off (every
// connection to it reset, new ones too) for a moment while it keeps its
// memory, as a replica past its connection limits, or one whose keep-alive
// connection nginx reused as it closed, is. NSEQ sequences (fixture model
// `tiny`, causal, no sequence_position: a Triton client's steps) are
// started and stepped through nginx; then the replica holding the most is
// cut off for one step of one of its sequences (the next replica on the
// ring answers 400 "unknown sequence", as for a dead replica, and the
// client restarts the sequence with its history, README "Sequences across
// replicas"); then every sequence is stepped once right away and again
// after nginx's fail_timeout (10 s) has passed. Every 200 must carry the
// rows of a one-shot causal run over the sequence's history and its
// sequence_length. A replica taken out of the hash for fail_timeout by the
// one failure moves all its sequences to other replicas (each restarted
// there) and then back to its own stale copies, which append the step at
// the wrong position and answer 200 with other rows. The same for G
// sequences stepped by unary gRPC calls through nginx's gRPC port (the id
// in the attnd-sequence-id metadata; each replica's gRPC port behind a
// relay too): after their replica is cut off for one call (nginx answers
// it 502, which gRPC clients read as UNAVAILABLE, when the call had been
// sent: grpc_pass does not buffer a call to send it again; the client
// sends it again), every call must answer its sequence_length, also past
// fail_timeout.
// Sessions too (attnd_sticky, hashed on X-Attnd-Session): NSESS clients
// each retain a map through nginx; then one fetch of a map of the replica
// holding the most is cut off (passed on, 404 from the next replica), and
// right after it every one of that replica's clients fetches its map again
// on the same connection to nginx (the same worker, which saw the
// failure): each must be 200. A replica taken out of the hash for
// fail_timeout by the one failure sends them all to a replica that never
// saw their maps (404).
// Settings (env): BLIP_SEQUENCES (12), BLIP_SESSIONS (12), BLIP_GRPC_SEQUENCES (6), NGINX (nginx), BLIP_KEEP=1 keeps the
// folder. Prints `blip: N passed, M failed` (steps answered as expected).
import { cpSync, readFileSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";
import { embed } from "../../server/web/embed.js";
import { ROOT, freePorts, grpcSeqStep, harness, inferPost, rowsDiffer } from "./replicas.mjs";

const NSEQ = Number(process.env.BLIP_SEQUENCES || 12);
const NSESS = Number(process.env.BLIP_SESSIONS || 12);
const G = Number(process.env.BLIP_GRPC_SEQUENCES || 6);
const PROMPT = 2, ROUNDS = 5;
const MODEL = "tiny", D = 8, HEADER = "Attnd-Sequence-Id";
const post = (base, body, headers) => inferPost(base, MODEL, body, headers);
const { T0, dir, say, check, failedChecks, startReplicas, startNginx, logged, finish } = harness("blip");
cpSync(join(ROOT, "tests/server/fixtures/models"), join(dir, "models"), { recursive: true });


const xInput = (words, pos0) => ({ name: "x", datatype: "FP32", shape: [1, words.length, D], data: Array.from(embed(words, D, pos0)) });
const wordsOf = (s) => Array.from({ length: PROMPT + ROUNDS }, (_, k) => `b${s}w${k}${k % 2 ? "" : "y"}`);

// grpcStep: one ModelInfer call through nginx's gRPC port (grpcSeqStep),
// the id in the attnd-sequence-id metadata only; {status, message,
// length, http} (grpc-status, grpc-message, the answer's sequence_length,
// the HTTP status).
async function grpcStep(session, id, words, pos0, start) {
  const r = await grpcSeqStep(session, MODEL, D, id, words, pos0, start);
  return r.err ? { status: "error", message: r.err } : { status: r.status, message: r.message, length: r.length, http: r.http };
}

// relay: a TCP relay to port; cut(true) resets every connection through it
// and each new one at once, cut(false) relays again.
function relay(port) {
  let cutOff = false;
  const socks = new Set();
  const server = createServer((c) => {
    if (cutOff) return c.resetAndDestroy();
    const u = createConnection(port, "127.0.0.1");
    socks.add(c).add(u);
    c.pipe(u); u.pipe(c);
    const end = () => { c.destroy(); u.destroy(); socks.delete(c); socks.delete(u); };
    c.on("error", end); u.on("error", end); c.on("close", end); u.on("close", end);
  });
  return {
    server,
    listen: (p) => new Promise((res) => server.listen(p, "127.0.0.1", res)),
    cut(on) {
      cutOff = on;
      if (on) for (const s of socks) s.resetAndDestroy();
    },
  };
}

async function main() {
  const [lbPort, lbGrpcPort, ...ports] = await freePorts(14);
  const replicaPorts = ports.slice(0, 3), relayPorts = ports.slice(3, 6);
  const grpcPorts = ports.slice(6, 9), grpcRelayPorts = ports.slice(9, 12);
  const replicas = await startReplicas(replicaPorts, (i) => ({ ATTND_GRPC_PORT: String(grpcPorts[i]) }));
  const v2 = await (await fetch(`http://${replicas[0].addr}/v2`)).json();
  // every attnd lists it (server/routes.c): without it this would test nothing
  if (!(v2.extensions || []).includes("sequences")) {
    check(false, `/v2 lists the sequences extension: ${JSON.stringify(v2)}`);
    return false;
  }
  const relays = [], grpcRelays = [];
  for (let i = 0; i < 3; i++) {
    relays.push(relay(replicaPorts[i]));
    await relays[i].listen(relayPorts[i]);
    grpcRelays.push(relay(grpcPorts[i]));
    await grpcRelays[i].listen(grpcRelayPorts[i]);
  }

  let conf = readFileSync(join(ROOT, "deploy", "nginx.conf"), "utf8");
  if (!/listen 127\.0\.0\.1:8080;/.test(conf)) throw new Error("deploy/nginx.conf no longer listens on 127.0.0.1:8080");
  conf = conf.replace("listen 127.0.0.1:8080;", `listen 127.0.0.1:${lbPort};`);
  conf = conf.replace("listen 127.0.0.1:8001 http2;", `listen 127.0.0.1:${lbGrpcPort} http2;`);
  [8081, 8082, 8083].forEach((d, i) => { conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${relayPorts[i]} `); });
  [9081, 9082, 9083].forEach((d, i) => { conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${grpcRelayPorts[i]} `); });
  const base = await startNginx(conf, lbPort);

  const refs = [];
  for (let s = 0; s < NSEQ; s++) {
    const r = await post(`http://${replicas[0].addr}`, { inputs: [xInput(wordsOf(s), 0)], parameters: { causal: true } });
    if (r.status !== 200) throw new Error(`reference ${s}: HTTP ${r.status} ${JSON.stringify(r.json ?? r.err)}`);
    refs.push(r.json.outputs.find((o) => o.name === "y").data.flat(Infinity));
  }

  let passed = 0, failed = 0;
  const fails = [];
  const seqs = Array.from({ length: NSEQ }, (_, s) => ({ s, id: `blip-${s}-${T0.toString(36)}`, words: wordsOf(s), len: 0 }));
  // step: q's next token, or (start) its whole history up to upto; a 400
  // "unknown sequence" is answered by the restart the README asks for.
  async function step(q, { start = false, upto = q.len + 1 } = {}) {
    const from = start ? 0 : q.len;
    const words = q.words.slice(from, upto);
    const params = { sequence_id: q.id, causal: true, ...(start ? { sequence_start: true } : {}) };
    const r = await post(base, { inputs: [xInput(words, from)], parameters: params }, { [HEADER]: q.id });
    if (!start && r.status === 400 && /unknown sequence/.test(r.json?.error ?? "")) {
      passed++;
      return step(q, { start: true, upto });
    }
    let why = null;
    if (r.status !== 200) why = `HTTP ${r.status} ${JSON.stringify(r.json ?? r.err).slice(0, 300)}`;
    else {
      const y = r.json.outputs?.find((o) => o.name === "y")?.data?.flat(Infinity);
      why = rowsDiffer(y, refs[q.s].slice(from * D, upto * D));
      if (r.json.parameters?.sequence_length !== upto) why = `sequence_length ${r.json.parameters?.sequence_length}, want ${upto}${why ? `; ${why}` : ""}`;
    }
    q.len = upto; // the client's count, whatever the answer
    if (why) { failed++; fails.push(`${q.id} [${from}, ${upto}): ${why}`); } else passed++;
  }

  // gRPC: gstep(q) sends q's next token (or its history, start), restarts
  // on "unknown sequence", and checks the answer's sequence_length.
  const session = http2.connect(`http://127.0.0.1:${lbGrpcPort}`);
  session.on("error", () => {});
  const gseqs = Array.from({ length: G }, (_, g) => ({ s: g, id: `blip-grpc-${g}-${T0.toString(36)}`, words: wordsOf(100 + g), len: 0 }));
  async function gstep(q, { start = false, upto = q.len + 1 } = {}) {
    const from = start ? 0 : q.len;
    const r = await grpcStep(session, q.id, q.words.slice(from, upto), from, start);
    if (!start && r.status === "3" && /unknown sequence/.test(r.message)) {
      passed++;
      return gstep(q, { start: true, upto });
    }
    q.len = upto;
    if (r.status === "0" && r.length === upto) passed++;
    else { failed++; fails.push(`${q.id} (gRPC) [${from}, ${upto}): grpc-status ${r.status} ${r.message.slice(0, 200)}, sequence_length ${r.length}, want ${upto}`); }
  }

  await Promise.all(seqs.map((q) => step(q, { start: true, upto: PROMPT })));
  await Promise.all(seqs.map((q) => step(q)));
  await Promise.all(gseqs.map((q) => gstep(q, { start: true, upto: PROMPT })));
  await Promise.all(gseqs.map((q) => gstep(q)));
  const holder = new Map();
  // their lines: a start and a step of each (nothing was cut off yet)
  for (const l of await logged((l) => l.seq?.startsWith("blip-"), 2 * (NSEQ + G), "the first steps")) if (l.seq && l.status === 200) holder.set(l.seq, l.upstreams.at(-1));
  const per = relayPorts.map((p) => seqs.filter((q) => holder.get(q.id) === `127.0.0.1:${p}`).length);
  const v = per.indexOf(Math.max(...per));
  const mine = seqs.filter((q) => holder.get(q.id) === `127.0.0.1:${relayPorts[v]}`);
  say(`sequences per replica: ${per.join(", ")}; cutting off replica ${v} for one step`);
  check(mine.length >= 2, `replica ${v} holds ${mine.length} sequences`);

  relays[v].cut(true);
  const first = await post(base, { inputs: [xInput(mine[0].words.slice(mine[0].len, mine[0].len + 1), mine[0].len)], parameters: { sequence_id: mine[0].id, causal: true } }, { [HEADER]: mine[0].id });
  relays[v].cut(false);
  check(first.status === 400 && /unknown sequence/.test(first.json?.error ?? ""), `the step that met the cut: ${first.status} from the next replica (${(first.json?.error ?? first.err ?? "").slice(0, 80)})`);
  // the client restarts it with its history, as told
  await step(mine[0], { start: true, upto: mine[0].len + 1 });
  await Promise.all(seqs.map((q) => step(q)));

  const gper = grpcRelayPorts.map((p) => gseqs.filter((q) => holder.get(q.id) === `127.0.0.1:${p}`).length);
  const gv = gper.indexOf(Math.max(...gper));
  const gmine = gseqs.filter((q) => holder.get(q.id) === `127.0.0.1:${grpcRelayPorts[gv]}`);
  say(`gRPC sequences per replica: ${gper.join(", ")}; cutting off replica ${gv}'s gRPC port for one call`);
  check(gmine.length >= 1, `replica ${gv} holds ${gmine.length} gRPC sequences`);
  grpcRelays[gv].cut(true);
  const g0 = gmine[0];
  const gfirst = await grpcStep(session, g0.id, g0.words.slice(g0.len, g0.len + 1), g0.len, false);
  grpcRelays[gv].cut(false);
  const unknown = gfirst.status === "3" && /unknown sequence/.test(gfirst.message);
  check(unknown || gfirst.http === 502, `the gRPC call that met the cut: HTTP ${gfirst.http}, grpc-status ${gfirst.status} (${gfirst.message.slice(0, 80)})`);
  // restarted after the 400's twin, sent again after the 502
  await gstep(g0, { start: unknown, upto: g0.len + 1 });
  await Promise.all(gseqs.map((q) => gstep(q)));
  // Sessions: one keep-alive connection to nginx, so every request of
  // this part goes through the worker that saw the cut (nginx's peers'
  // failures are counted per worker).
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const one = (method, path, headers, body) => new Promise((res) => {
    const req = http.request(`${base}${path}`, { method, agent, headers: { ...headers, ...(body ? { "Content-Type": "application/json" } : {}) } }, (r) => {
      const chunks = [];
      r.on("data", (c) => chunks.push(c));
      r.on("end", () => { let json = null; try { json = JSON.parse(Buffer.concat(chunks)); } catch {} res({ status: r.statusCode, json }); });
    });
    req.on("error", (e) => res({ status: 0, json: { error: e.message } }));
    req.end(body ? JSON.stringify(body) : undefined);
  });
  const sessions = [];
  for (let c = 0; c < NSESS; c++) {
    const h = { "X-Attnd-Session": `blip-session-${c}-${T0.toString(36)}` };
    const r = await one("POST", `/v2/models/${MODEL}/infer`, h, { inputs: [xInput(wordsOf(200 + c).slice(0, 3), 0)], parameters: { retain: true } });
    const id = r.json?.parameters?.map_id;
    check(r.status === 200 && id, `session ${c}'s retaining infer: ${r.status} ${id ?? JSON.stringify(r.json).slice(0, 200)}`);
    sessions.push({ h, id, name: h["X-Attnd-Session"] });
  }
  const sholder = new Map();
  for (const l of await logged((l) => l.session?.startsWith("blip-session-"), NSESS, "the retaining infers")) if (l.session?.startsWith("blip-session-") && l.status === 200) sholder.set(l.session, l.upstreams.at(-1));
  const sper = relayPorts.map((p) => sessions.filter((q) => sholder.get(q.name) === `127.0.0.1:${p}`).length);
  const sv = sper.indexOf(Math.max(...sper));
  const smine = sessions.filter((q) => sholder.get(q.name) === `127.0.0.1:${relayPorts[sv]}`);
  say(`sessions per replica: ${sper.join(", ")}; cutting off replica ${sv} for one map fetch`);
  check(smine.length >= 2, `replica ${sv} holds ${smine.length} sessions`);
  relays[sv].cut(true);
  const sfirst = await one("GET", `/v2/maps/${smine[0].id}`, smine[0].h);
  relays[sv].cut(false);
  say(`the fetch that met the cut: ${sfirst.status} from the next replica`);
  const smiss = [];
  for (const q of smine) {
    const r = await one("GET", `/v2/maps/${q.id}`, q.h);
    if (r.status !== 200) smiss.push(`${q.name}: ${r.status} ${JSON.stringify(r.json).slice(0, 120)}`);
  }
  for (const m of smiss.slice(0, 4)) say(`  ${m}`);
  check(smiss.length === 0, `after the cut, replica ${sv}'s ${smine.length} sessions fetched their maps from it (${smiss.length} did not)`);
  agent.destroy();

  say("waiting past nginx's fail_timeout (10 s)");
  await new Promise((res) => setTimeout(res, 11000));
  for (let k = 0; k < 2; k++) await Promise.all([...seqs.map((q) => step(q)), ...gseqs.map((q) => gstep(q))]);
  session.close();
  for (const f of fails.slice(0, 8)) say(`  ${f}`);
  check(failed === 0, `every step answered 200 was its sequence's (rows and sequence_length; ${failed} were not)`);
  console.log(`blip: ${passed} passed, ${failed + failedChecks()} failed`);
  for (const r of [...relays, ...grpcRelays]) r.server.close();
  return failed === 0 && failedChecks() === 0;
}

finish(main);
