#!/usr/bin/env node
// affinity.mjs - sequences across replicas: three attnd replicas behind
// deploy/nginx.conf (hash on the Attnd-Sequence-Id header), 24 sequences
// stepped in interleaved order, one replica SIGKILLed mid-way.
//
//   ATTND_BIN=build/default/attnd node tests/deploy/affinity.mjs
//
// Each sequence (on the fixture model `tiny`, causal) starts with a
// two-token prompt and then takes one token per round; every round steps
// all live sequences at once. Every step's output rows must equal the rows
// of a one-shot causal run over the sequence's whole history (computed up
// front on a replica directly, not through nginx). Checked:
//   - all steps of a sequence reach one replica (nginx's access log),
//   - after the kill, the killed replica's sequences get 400 "unknown
//     sequence" from the replica they now reach (a survivor); each is then
//     restarted there with its history, as README "Sequences across
//     replicas" says, and finishes exact,
//   - the other sequences finish exact, on their own replicas;
//   - first, sequences stepped over gRPC (unary ModelInfer through nginx's
//     gRPC port, the id in the attnd-sequence-id metadata) keep to one
//     replica too;
//   - and retained maps through the Kubernetes session door
//     (deploy/k8s/ingress.yaml's `attnd-sessions`, rendered as
//     ingress-nginx writes its location: the regex path, the rewrite, a
//     hash on its upstream-hash-by; nginx's own consistent hash stands in
//     for ingress-nginx's Lua one) are found again by every fetch, where
//     through a round-robin location most fetches miss;
//   - and deploy/nginx.conf passes a session's 503 (its replica's one map
//     waiter place taken: ATTND_MAPS_WAITERS 1) back to the client, not to
//     a replica that never saw the map.
// Everything listens on 127.0.0.1 on ports picked here; nginx runs as a
// non-daemon child with its prefix under a temp folder (replicas.mjs starts
// them all). Settings (env): AFFINITY_SEQUENCES (24), AFFINITY_ROUNDS (8),
// NGINX (nginx), AFFINITY_KEEP=1 keeps the folder. Prints `affinity: N passed, M failed`
// (N: steps answered as expected, exact outputs or the expected 400) and
// exits 1 if any step or check failed.
import { cpSync, readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import http2 from "node:http2";
import { join } from "node:path";
import { embed } from "../../server/web/embed.js";
import { ROOT, freePorts, grpcSeqStep, harness, inferPost, rowsDiffer } from "./replicas.mjs";

const NSEQ = Number(process.env.AFFINITY_SEQUENCES || 24);
const ROUNDS = Number(process.env.AFFINITY_ROUNDS || 8);
const KILL_AFTER = Math.floor(ROUNDS / 2); // rounds done before the kill
const PROMPT = 2;
const MODEL = "tiny";
const D = 8; // the fixture's d_model
const HEADER = "Attnd-Sequence-Id";
const post = (base, body, headers) => inferPost(base, MODEL, body, headers);
const { T0, dir, say, check, failedChecks, exitWithin, startReplicas, startNginx, logged, finish } = harness("affinity");
cpSync(join(ROOT, "tests/server/fixtures/models"), join(dir, "models"), { recursive: true });


const xInput = (words, pos0) => ({ name: "x", datatype: "FP32", shape: [1, words.length, D], data: Array.from(embed(words, D, pos0)) });

// The words of sequence s: its prompt and one per round (distinct words,
// so that no two sequences compute the same numbers).
const wordsOf = (s) => Array.from({ length: PROMPT + ROUNDS }, (_, k) => `s${s}w${k}${k % 3 ? "" : "x"}`);

// closeRows: the step's y rows equal rows [from, from + n) of the reference.
const closeRows = (got, ref, from, n) => rowsDiffer(got, ref.slice(from * D, (from + n) * D));

// grpcStep: one ModelInfer call through nginx's gRPC port (grpcSeqStep),
// the sequence id in the attnd-sequence-id metadata only; {status, length}
// (grpc-status, the answer's sequence_length) or {err}.
async function grpcStep(session, id, words, pos0, start) {
  const r = await grpcSeqStep(session, MODEL, D, id, words, pos0, start);
  if (r.err) return { err: r.err };
  if (r.status !== "0" || !r.answered) return { err: `grpc-status ${r.status}: ${r.message}` };
  return { status: r.status, length: r.length };
}

// sessionDoor: an nginx server on port with the Ingress attnd-sessions as
// ingress-nginx renders it (location ~* "^<path>", rewrite "(?i)<path>"
// <rewrite-target> break, the upstream balanced by upstream-hash-by), and
// beside it the main Ingress's path / balanced round robin (its default).
// The upstreams' servers are 8081-8083, filled in with the rest.
function sessionDoor(port) {
  const A = "nginx.ingress.kubernetes.io/";
  const ings = parseAllDocuments(readFileSync(join(ROOT, "deploy/k8s/ingress.yaml"), "utf8")).map((d) => d.toJS());
  const door = ings.find((i) => i.metadata.name === "attnd-sessions");
  if (!door) throw new Error("deploy/k8s/ingress.yaml has no Ingress attnd-sessions");
  const a = (k) => door.metadata.annotations?.[A + k];
  if (a("use-regex") !== "true" || !a("rewrite-target") || !a("upstream-hash-by"))
    throw new Error("attnd-sessions no longer has use-regex, rewrite-target and upstream-hash-by");
  const servers = [8081, 8082, 8083].map((p) => `        server 127.0.0.1:${p} max_fails=1 fail_timeout=10s;\n`).join("");
  const locs = door.spec.rules.flatMap((r) => r.http.paths).map((p) => `
        location ~* "^${p.path}" {
            rewrite "(?i)${p.path}" ${a("rewrite-target")} break;
            proxy_pass http://ingress_sessions;
        }`).join("");
  return `
    upstream ingress_sessions {
        hash ${a("upstream-hash-by")} consistent;
${servers}    }
    upstream ingress_spread {
${servers}    }
    server {
        listen 127.0.0.1:${port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
${locs}
        location / {
            proxy_pass http://ingress_spread;
        }
    }
`;
}

// sdpaRetain: the README's retained-map example through base (with
// headers); the map's id, or null.
async function sdpaRetain(base, headers) {
  const body = { inputs: [
    { name: "q", datatype: "FP32", shape: [2, 4], data: [2, 0, 2, 0, 0, 4, 0, 2] },
    { name: "k", datatype: "FP32", shape: [2, 4], data: [1, 0, 1, 0, 0, 1, 0, 0] },
    { name: "v", datatype: "FP32", shape: [2, 2], data: [1, 2, 3, 0] }],
  parameters: { retain: true } };
  const r = await fetch(`${base}/v2/models/sdpa/infer`, { method: "POST", headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body), signal: AbortSignal.timeout(30000) }).catch(() => null);
  if (!r || r.status !== 200) return null;
  return (await r.json()).parameters?.map_id ?? null;
}

// fetchStatus: GET url's status (0 when it could not be sent).
const fetchStatus = async (url, headers) => {
  const r = await fetch(url, { headers, signal: AbortSignal.timeout(30000) }).catch(() => null);
  if (r) await r.arrayBuffer();
  return r ? r.status : 0;
};

async function main() {
  const [lbPort, lbGrpcPort, ...ports] = await freePorts(9);
  const replicaPorts = ports.slice(0, 3), grpcPorts = ports.slice(3, 6);
  // one map waiter a replica: a second wait answers 503 (the session test)
  const replicas = await startReplicas(replicaPorts, (i) => ({ ATTND_GRPC_PORT: String(grpcPorts[i]), ATTND_MAPS_WAITERS: "1" }));
  const v2 = await (await fetch(`http://${replicas[0].addr}/v2`)).json();
  // every attnd lists it (server/routes.c): without it this would test nothing
  if (!(v2.extensions || []).includes("sequences")) {
    check(false, `/v2 lists the sequences extension: ${JSON.stringify(v2)}`);
    return false;
  }

  let conf = readFileSync(join(ROOT, "deploy", "nginx.conf"), "utf8");
  if (!conf.includes("hash $http_attnd_sequence_id consistent;") || !/listen 127\.0\.0\.1:8080;/.test(conf))
    throw new Error("deploy/nginx.conf no longer hashes on $http_attnd_sequence_id or listens on 127.0.0.1:8080");
  conf = conf.replace("listen 127.0.0.1:8080;", `listen 127.0.0.1:${lbPort};`);
  const doorPort = ports[6];
  conf = conf.replace(/\}\s*$/, `${sessionDoor(doorPort)}}\n`);
  // the gRPC server block's port too (8001 may be any attnd's default)
  conf = conf.replace("listen 127.0.0.1:8001 http2;", `listen 127.0.0.1:${lbGrpcPort} http2;`);
  [8081, 8082, 8083].forEach((d, i) => { conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${replicaPorts[i]} `); });
  [9081, 9082, 9083].forEach((d, i) => { conf = conf.replaceAll(`server 127.0.0.1:${d} `, `server 127.0.0.1:${grpcPorts[i]} `); });
  const base = await startNginx(conf, lbPort);

  // gRPC: sequences stepped by unary calls carrying only the
  // attnd-sequence-id metadata reach their replica every time (a step on
  // any other answers "unknown sequence"): nginx hashes the metadata.
  {
    const session = http2.connect(`http://127.0.0.1:${lbGrpcPort}`);
    session.on("error", () => {});
    const G = 12, STEPS = 4; // 12: all on one replica by chance has odds ~1e-5
    const ids = Array.from({ length: G }, (_, g) => `aff-grpc-${g}-${T0.toString(36)}`);
    const bad = [];
    for (let k = 0; k <= STEPS; k++) {
      // each round in another order: least_conn (no hash) would then give a
      // sequence another replica than its last
      const order = ids.map((_, i) => (i * 5 + k * 7) % G);
      const got = Array(G);
      await Promise.all(order.map(async (g) => {
        const id = ids[g];
        const words = wordsOf(100 + g);
        got[g] = await (k === 0 ? grpcStep(session, id, words.slice(0, PROMPT), 0, true)
          : grpcStep(session, id, words.slice(PROMPT + k - 1, PROMPT + k), PROMPT + k - 1, false));
      }));
      got.forEach((r, g) => { if (r.err || r.length !== PROMPT + k) bad.push(`${ids[g]} step ${k}: ${r.err ?? `sequence_length ${r.length}`}`); });
    }
    session.close();
    check(bad.length === 0, `gRPC: ${G} sequences x ${STEPS + 1} calls with attnd-sequence-id through nginx, every one answered on its sequence${bad.length ? `: ${bad.slice(0, 3).join("; ")}` : ""}`);
    const at = new Map(); // sequence id -> the replicas that answered it
    for (const l of await logged((l) => ids.includes(l.seq), G * (STEPS + 1), "the gRPC calls")) if (ids.includes(l.seq)) at.set(l.seq, (at.get(l.seq) ?? new Set()).add(l.upstreams.at(-1)));
    const used = new Set([...at.values()].flatMap((set) => [...set]));
    // spread over the replicas (least_conn sent them all to one), each on one
    check(at.size === G && [...at.values()].every((set) => set.size === 1) && used.size > 1,
      `gRPC: each sequence's calls reached one replica, the sequences ${used.size} replicas`);
  }

  // Retained maps through the session door: each client's infer and every
  // fetch of its map under /session with one X-Attnd-Session value reach
  // the replica that holds the map (ids carry a per-process tag, so any
  // other answers 404). The control, the same through the round-robin /,
  // shows the fetches would miss without it.
  {
    const door = `http://127.0.0.1:${doorPort}`;
    const N = 12, FETCHES = 3; // 12: all on one replica by chance ~2e-5
    const miss = [];
    let found = 0, sent = 0; // sent: requests with the header (their log lines)
    for (let c = 0; c < N; c++) {
      const h = { "X-Attnd-Session": `aff-session-${c}-${T0.toString(36)}` };
      const id = await sdpaRetain(`${door}/session`, h);
      sent++;
      if (!id) { miss.push(`client ${c}: no map id`); continue; }
      for (let f = 0; f < FETCHES; f++) {
        for (const path of [`/v2/maps/${id}`, `/v2/maps/${id}/attention?b=0&h=0&max=64`]) {
          const st = await fetchStatus(`${door}/session${path}`, h);
          sent++;
          if (st === 200) found++; else miss.push(`client ${c}: ${path} -> ${st}`);
        }
      }
    }
    check(miss.length === 0, `session door: ${N} clients' maps fetched ${found} times under /session with X-Attnd-Session${miss.length ? `; missed: ${miss.slice(0, 3).join("; ")}` : ""}`);
    const at = new Map(); // session -> the replicas that answered it
    for (const l of await logged((l) => l.session?.startsWith("aff-session-"), sent, "the session door's requests")) if (l.session?.startsWith("aff-session-")) at.set(l.session, (at.get(l.session) ?? new Set()).add(l.upstreams.at(-1)));
    const used = new Set([...at.values()].flatMap((set) => [...set]));
    check(at.size === N && [...at.values()].every((set) => set.size === 1) && used.size > 1,
      `session door: each client's requests reached one replica, the clients ${used.size} replicas`);
    let control404 = 0;
    for (let c = 0; c < N; c++) {
      const id = await sdpaRetain(door, {});
      for (let f = 0; f < FETCHES; f++) if (id && (await fetchStatus(`${door}/v2/maps/${id}`, {})) === 404) control404++;
    }
    check(control404 > 0, `control: through / (round robin) ${control404} of ${N * FETCHES} fetches of a map missed it`);
  }

  // deploy/nginx.conf's sessions: a 503 from the session's replica (its one
  // map waiter place taken) reaches the client as it is, with Retry-After;
  // passed on to another replica, which never saw the map, it became a 404
  // (the map gone: a follower stops).
  {
    const h = { "X-Attnd-Session": `aff-wait-${T0.toString(36)}` };
    const id = await sdpaRetain(base, h);
    const ctl = new AbortController();
    // the map has 2 query rows: wait=2 waits for more, until its timeout
    const held = fetch(`${base}/v2/maps/${id}?wait=2&timeout_ms=5000`, { headers: h, signal: ctl.signal }).then((r) => r.arrayBuffer()).catch(() => null);
    await new Promise((res) => setTimeout(res, 300));
    const r = await fetch(`${base}/v2/maps/${id}?wait=2&timeout_ms=1000`, { headers: h, signal: AbortSignal.timeout(10000) }).catch(() => null);
    if (r) await r.arrayBuffer();
    ctl.abort();
    await held;
    check(id && r?.status === 503 && r.headers.get("retry-after") !== null,
      `nginx.conf session: a second wait on the session's replica -> ${r?.status} (Retry-After ${r?.headers.get("retry-after")}), its 503, not another replica's answer`);
    const m = await fetchStatus(`${base}/v2/maps/${id}`, h);
    check(m === 200, `nginx.conf session: the map is still found after it -> ${m}`);
  }

  // References: one-shot causal runs over each sequence's whole history, on
  // the first replica directly.
  const refs = [];
  for (let s = 0; s < NSEQ; s++) {
    const words = wordsOf(s);
    const r = await post(`http://${replicas[0].addr}`, { inputs: [xInput(words, 0)], parameters: { causal: true } });
    if (r.status !== 200) throw new Error(`reference ${s}: HTTP ${r.status} ${JSON.stringify(r.json ?? r.err)}`);
    refs.push(r.json.outputs.find((o) => o.name === "y").data.flat(Infinity));
  }
  say(`${NSEQ} references computed`);

  let passed = 0, failed = 0, sent = 0; // sent: steps sent (their log lines)
  const fails = [];
  const seqs = Array.from({ length: NSEQ }, (_, s) => ({ s, id: `aff-${s}-${T0.toString(36)}`, words: wordsOf(s), len: 0, lost: false, restarted: false }));
  // step: seq's next token(s) (start: the prompt, or its whole history);
  // expect: "ok" (exact rows) or "unknown" (the 400 of a lost sequence).
  async function step(q, { start = false, upto, expect = "ok" }) {
    const from = start ? 0 : q.len;
    const words = q.words.slice(from, upto);
    const params = { sequence_id: q.id, causal: true, ...(start ? { sequence_start: true } : {}) };
    sent++;
    const r = await post(base, { inputs: [xInput(words, from)], parameters: params }, { [HEADER]: q.id });
    let why = null;
    if (expect === "unknown") {
      if (r.status !== 400 || !/unknown sequence/.test(r.json?.error ?? "")) why = `want 400 "unknown sequence", got ${r.status} ${JSON.stringify(r.json ?? r.err).slice(0, 200)}`;
    } else if (r.status !== 200) {
      why = `HTTP ${r.status} ${JSON.stringify(r.json ?? r.err).slice(0, 300)}`;
    } else {
      const y = r.json.outputs?.find((o) => o.name === "y")?.data?.flat(Infinity);
      why = closeRows(y, refs[q.s], from, words.length);
      if (!why && r.json.parameters?.sequence_length !== upto) why = `sequence_length ${r.json.parameters?.sequence_length}, want ${upto}`;
      if (!why) q.len = upto;
    }
    if (why) { failed++; fails.push(`${q.id} [${from}, ${upto}): ${why}`); } else passed++;
    return !why;
  }

  // Starts, then rounds; a round steps every sequence at once.
  await Promise.all(seqs.map((q) => step(q, { start: true, upto: PROMPT })));
  say(`${NSEQ} sequences started`);
  for (let k = 0; k < KILL_AFTER; k++) await Promise.all(seqs.map((q) => step(q, { upto: q.len + 1 })));
  const holder = new Map(); // sequence id -> replica address
  const isStep = (l) => seqs.some((q) => q.id === l.seq);
  const before = await logged(isStep, sent, "the steps before the kill");
  for (const l of before) if (isStep(l) && l.status === 200) {
    const a = l.upstreams.at(-1);
    if (holder.has(l.seq) && holder.get(l.seq) !== a) holder.set(l.seq, "several");
    else holder.set(l.seq, a);
  }
  check(seqs.every((q) => holder.get(q.id) && holder.get(q.id) !== "several"), "before the kill, every sequence's steps reached one replica");
  const per = Object.fromEntries(replicas.map((r) => [r.addr, seqs.filter((q) => holder.get(q.id) === r.addr).length]));
  say(`sequences per replica: ${JSON.stringify(per)}`);
  const victim = replicas.reduce((a, b) => (per[b.addr] > per[a.addr] ? b : a));
  const survivors = replicas.filter((r) => r !== victim).map((r) => r.addr);
  victim.rec.child.kill("SIGKILL");
  await victim.rec.exited;
  for (const q of seqs) q.lost = holder.get(q.id) === victim.addr;
  const lost = seqs.filter((q) => q.lost);
  say(`SIGKILLed ${victim.addr}, which held ${lost.length} sequences, after ${KILL_AFTER} of ${ROUNDS} rounds`);
  check(lost.length > 0, "the killed replica held sequences");

  const logBefore = before.length;
  for (let k = KILL_AFTER; k < ROUNDS; k++) {
    await Promise.all(seqs.map(async (q) => {
      if (q.lost && !q.restarted) {
        // Its replica is gone: the next step meets the clear 400 ...
        if (await step(q, { upto: q.len + 1, expect: "unknown" })) {
          // ... and the client restarts it with its whole history.
          q.restarted = true;
          await step(q, { start: true, upto: q.len + 1 });
        }
        return;
      }
      await step(q, { upto: q.len + 1 });
    }));
  }
  const after = (await logged(isStep, sent, "the steps after the kill")).slice(logBefore).filter(isStep);
  const answered400 = after.filter((l) => l.status === 400);
  check(answered400.length === lost.length && answered400.every((l) => survivors.includes(l.upstreams.at(-1))),
    `each lost sequence got its 400 from a survivor (${answered400.map((l) => l.upstreams.join(">")).join("; ")})`);
  check(after.every((l) => l.status !== 200 || survivors.includes(l.upstreams.at(-1))), "after the kill, survivors answered every step");
  const moved = new Map();
  for (const l of after) if (l.status === 200 && l.seq) moved.set(l.seq, (moved.get(l.seq) ?? new Set()).add(l.upstreams.at(-1)));
  check([...moved.values()].every((set) => set.size === 1), "after the kill, every sequence's steps still reached one replica");
  check(seqs.every((q) => q.len === PROMPT + ROUNDS), `every sequence finished all ${PROMPT + ROUNDS} tokens (restarted: ${lost.filter((q) => q.restarted).length} of ${lost.length})`);
  for (const f of fails.slice(0, 10)) say(`  ${f}`);

  for (const r of replicas) if (r !== victim) r.rec.child.kill("SIGTERM");
  for (const r of replicas) if (r !== victim) {
    const ex = await exitWithin(r.rec, 15000);
    check(ex && ex.code === 0, `${r.addr} exit after SIGTERM: ${JSON.stringify(ex)}`);
  }
  console.log(`affinity: ${passed} passed, ${failed + failedChecks()} failed`);
  return failed === 0 && failedChecks() === 0;
}

finish(main);
