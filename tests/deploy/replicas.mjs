// replicas.mjs - what failover.mjs and affinity.mjs share: a run of attnd
// replicas behind deploy/nginx.conf, everything on 127.0.0.1.
//
//   const run = harness("failover");   // exits 2 when ATTND_BIN is not set
//   run.finish(main);                  // runs main, stops every child, exits
//
// harness(name) makes a temp folder (nginx's prefix; children's output in
// logs/<name>.log) and gives:
//   say(msg)            a line prefixed with name and the seconds so far;
//   check(ok, what)     says ok/FAIL; failedChecks() counts the FAILs;
//   start(name, cmd, args, env)  a child: {name, child, exit, exited};
//   waitReady(url, rec) until url answers 200 (30 s; throws if rec exits);
//   exitWithin(rec, ms) rec's {code, signal}, or null after ms;
//   startReplicas(ports, envOf)  attnd on each port (models from
//                       <dir>/models, 1 thread, drain 5 s, envOf(i) on top),
//                       ready; [{port, addr, rec}];
//   startNginx(conf, port)  conf written and nginx started in the
//                       foreground, ready; its base URL;
//   accessLog()         nginx's lines: {line, status, upstreams[], seq,
//                       session, req} (deploy/nginx.conf's log format);
//   logged(pred, n, what)  nginx's lines once n of them match pred: nginx
//                       writes a request's line after its answer went out,
//                       so a client holding its answers may read the log
//                       before their lines (30 s, 150 under a sanitizer; throws, naming
//                       what, when they do not come);
//   finish(main)        main() (true = passed); SIGINT/SIGTERM stop the
//                       children; then nginx gets SIGTERM (a SIGKILLed
//                       master would orphan its workers), the replicas
//                       SIGKILL, what runs 5 s later SIGKILL; the folder is
//                       removed after a pass unless <NAME>_KEEP is set.
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { embed } from "../../server/web/embed.js";
import { fields, frame, ld, packedI64, str, varint } from "../grpc/wire.mjs";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

// freePorts: n distinct ports the system had free a moment ago.
export async function freePorts(n) {
  const one = () => new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
  const ports = [];
  while (ports.length < n) {
    const p = await one();
    if (!ports.includes(p)) ports.push(p);
  }
  return ports;
}

export function harness(name) {
  const BIN = process.env.ATTND_BIN;
  if (!BIN) {
    console.error(`${name}: set ATTND_BIN to the attnd binary`);
    process.exit(2);
  }
  const T0 = Date.now();
  const NGINX = process.env.NGINX || "nginx";
  const say = (msg) => console.log(`${name}: [${((Date.now() - T0) / 1000).toFixed(1)}s] ${msg}`);
  const dir = mkdtempSync(join(tmpdir(), `attnd-${name}-`));
  // nginx workers run as nobody when the master is root: they need to reach
  // the temp folders nginx creates (and chowns) under the prefix.
  chmodSync(dir, 0o755);
  mkdirSync(join(dir, "logs"));
  const children = [];
  let checksFailed = 0;

  const check = (ok, what) => {
    if (!ok) checksFailed++;
    say(`${ok ? "ok  " : "FAIL"} ${what}`);
  };

  function start(cname, cmd, args, env) {
    const out = openSync(join(dir, "logs", `${cname}.log`), "a");
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", out, out] });
    const rec = { name: cname, child, exit: null };
    rec.exited = new Promise((resolve) =>
      child.on("exit", (code, signal) => resolve((rec.exit = { code, signal }))));
    child.on("error", (e) => say(`${cname}: ${e.message}`));
    children.push(rec);
    return rec;
  }

  async function waitReady(url, rec) {
    const until = Date.now() + 30000;
    while (Date.now() < until) {
      if (rec.exit) throw new Error(`${rec.name} exited (${JSON.stringify(rec.exit)}); see ${dir}/logs`);
      const r = await fetch(url, { signal: AbortSignal.timeout(5000) }).catch(() => null);
      if (r && r.status === 200) return;
      await new Promise((res) => setTimeout(res, 100));
    }
    throw new Error(`${url} not ready within 30 s; see ${dir}/logs`);
  }

  const exitWithin = (rec, ms) =>
    Promise.race([rec.exited, new Promise((res) => setTimeout(() => res(null), ms))]);

  async function startReplicas(ports, envOf = () => ({})) {
    const replicas = ports.map((port, i) => ({
      port,
      addr: `127.0.0.1:${port}`,
      rec: start(`attnd${i}`, BIN, [], {
        ATTND_HOST: "127.0.0.1",
        ATTND_PORT: String(port),
        ATTND_MODELS: join(dir, "models"),
        ATTND_THREADS: "1",
        ATTND_DRAIN_MS: "5000",
        ...envOf(i),
      }),
    }));
    for (const r of replicas) await waitReady(`http://${r.addr}/v2/health/ready`, r.rec);
    say(`${replicas.length} replicas ready on ${ports.join(", ")}`);
    return replicas;
  }

  async function startNginx(conf, port) {
    writeFileSync(join(dir, "nginx.conf"), conf);
    const rec = start("nginx", NGINX, ["-p", dir + "/", "-c", join(dir, "nginx.conf"), "-e", join(dir, "logs", "error.log"), "-g", "daemon off;"], {});
    const base = `http://127.0.0.1:${port}`;
    await waitReady(`${base}/v2/health/ready`, rec);
    say(`nginx ready on ${port} (prefix ${dir})`);
    return base;
  }

  function accessLog() {
    return readFileSync(join(dir, "logs", "access.log"), "utf8").split("\n").filter(Boolean).map((line) => ({
      line,
      status: Number(/" (\d{3}) rt=/.exec(line)?.[1]),
      upstreams: (/upstream=(.*?) ustatus=/.exec(line)?.[1] ?? "").split(/[,:] /).map((s) => s.trim()).filter((s) => s && s !== "-"),
      seq: /seq=(\S*)/.exec(line)?.[1],
      session: /session=(\S*)/.exec(line)?.[1],
      req: /req=(\S*)/.exec(line)?.[1],
    }));
  }

  async function logged(pred, n, what) {
    const until = Date.now() + 30000 * (/sanitiz|thread|address|undefined/.test(BIN) ? 5 : 1);
    for (;;) {
      const lines = accessLog();
      const have = lines.filter(pred).length;
      if (have >= n) return lines;
      if (Date.now() > until) throw new Error(`nginx's access log has ${have} of ${n} lines of ${what}; see ${dir}/logs`);
      await new Promise((res) => setTimeout(res, 50));
    }
  }

  async function finish(main) {
    // Interrupted (timeout, Ctrl-C): take the replicas and nginx down too.
    for (const sig of ["SIGINT", "SIGTERM"]) {
      process.on(sig, () => {
        for (const c of children) if (!c.exit) c.child.kill("SIGTERM");
        say(`${sig}: stopped; logs in ${dir}`);
        process.exit(1);
      });
    }
    let ok = false;
    try {
      ok = await main();
    } catch (e) {
      say(`FAIL ${e.message}`);
    }
    for (const c of children) if (!c.exit) c.child.kill(c.name === "nginx" ? "SIGTERM" : "SIGKILL");
    const grace = setTimeout(() => children.forEach((c) => c.exit || c.child.kill("SIGKILL")), 5000);
    await Promise.all(children.map((c) => c.exited));
    clearTimeout(grace);
    if (ok && !process.env[`${name.toUpperCase()}_KEEP`]) rmSync(dir, { recursive: true, force: true });
    else say(`logs kept in ${dir}`);
    process.exit(ok ? 0 : 1);
  }

  return {
    BIN, T0, dir, say, check, failedChecks: () => checksFailed, start, waitReady,
    exitWithin, startReplicas, startNginx, accessLog, logged, finish,
  };
}

// rowsDiffer: why y (a step's output values, flattened) is not want
// (the reference's rows, flattened): its length, or its first value off
// by more than 1e-5 relative (1e-5 absolute below 1); null when equal.
export function rowsDiffer(y, want) {
  if (!Array.isArray(y) || y.length !== want.length) return `y has ${y?.length} values, want ${want.length}`;
  for (let i = 0; i < want.length; i++)
    if (!(Math.abs(y[i] - want[i]) <= 1e-5 * Math.max(1, Math.abs(want[i])))) return `y[${i}] = ${y[i]}, want ${want[i]}`;
  return null;
}

// inferPost: one infer request of model, its body as JSON, through base
// (a replica or nginx); {status, json} (a body that is not JSON as
// {error: its first 200 characters}) or {status: 0, err} when no answer
// came within 30 s.
export async function inferPost(base, model, body, headers = {}) {
  try {
    const r = await fetch(`${base}/v2/models/${model}/infer`, {
      method: "POST",
      headers: { "Content-Type": "application/json", ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30000),
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { json = { error: text.slice(0, 200) }; }
    return { status: r.status, json };
  } catch (e) {
    return { status: 0, err: e.cause?.code || e.message };
  }
}

// grpcSeqStep: one ModelInfer call of model (d_model d) on session, an
// HTTP/2 session with nginx's gRPC port (protobuf written by hand,
// tests/grpc/wire.mjs): causal, words embedded from pos0, sequence_start
// when start, the sequence id in the attnd-sequence-id metadata only.
// Resolves {http, status, message, answered, length} (the HTTP status,
// grpc-status, grpc-message decoded, whether a message came, the answer's
// sequence_length when status is "0") or {err} when the stream failed.
export function grpcSeqStep(session, model, d, id, words, pos0, start) {
  const param = (key, value) => ld(4, Buffer.concat([str(1, key), ld(2, value)]));
  const msg = Buffer.concat([str(1, model),
    param("causal", Buffer.concat([varint(1 << 3), varint(1)])),
    ...(start ? [param("sequence_start", Buffer.concat([varint(1 << 3), varint(1)]))] : []),
    ld(5, Buffer.concat([str(1, "x"), str(2, "FP32"), packedI64(3, [1, words.length, d])])),
    ld(7, Buffer.from(embed(words, d, pos0).buffer))]);
  return new Promise((resolve) => {
    const req = session.request({ ":method": "POST", ":path": "/inference.GRPCInferenceService/ModelInfer",
      "content-type": "application/grpc", te: "trailers", "attnd-sequence-id": id });
    let status, message, http;
    const chunks = [];
    req.on("response", (h) => { http = h[":status"]; status = h["grpc-status"] ?? status; message = h["grpc-message"] ?? message; });
    req.on("trailers", (h) => { status = h["grpc-status"]; message = h["grpc-message"]; });
    req.on("data", (c) => chunks.push(c));
    req.on("error", (e) => resolve({ err: e.message }));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const answered = body.length >= 5;
      let length;
      if (status === "0" && answered)
        for (const e of fields(body.subarray(5))[4] || []) { // parameters: {key 1, value 2}
          const f = fields(e);
          if (f[1][0].toString() === "sequence_length") length = Number(fields(f[2][0])[2][0]); // int64_param
        }
      resolve({ http, status, message: decodeURIComponent(message ?? ""), answered, length });
    });
    req.end(frame(msg));
  });
}
