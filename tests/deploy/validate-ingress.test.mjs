// validate-ingress.test.mjs - offline checks of deploy/k8s's Ingresses and
// deploy/nginx.conf (node:test), beside validate-k8s.test.mjs (k8s.mjs
// loads the manifests for both).
//
// 1. Sequences and retained maps across replicas: the ingress-nginx
//    variant (ingress.yaml) sends requests with an Attnd-Sequence-Id header
//    to a canary Ingress that hashes on that header, and requests under
//    /session/ to an Ingress that strips the prefix and hashes on
//    X-Attnd-Session, as deploy/nginx.conf does with both headers; gRPC
//    (ingress-grpc.yaml) has TLS on a host of its own, the pods' gRPC port
//    and the same sequence canary.
// 2. The proxies wait past the daemon's deadline and take its largest body
//    (with ATTND_BIN, the ConfigMap's settings over --help's defaults).
// Negative cases show each kind of check can fail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ROOT, byKind, matches, dep, ctr, cm, HELP, NO_BIN, helpSettings } from "./k8s.mjs";

// Sequences across replicas. The header a client sends with every request
// about a sequence (README "Sequences across replicas"), and the nginx
// variable that holds it.
const SEQ_HEADER = "Attnd-Sequence-Id";
const SEQ_VAR = "$http_" + SEQ_HEADER.toLowerCase().replaceAll("-", "_");
const A = "nginx.ingress.kubernetes.io/";

// The header a client that retains maps outside a sequence sends with the
// infer request and the map's fetches (deploy/nginx.conf, README "Several
// replicas behind nginx").
const SESSION_HEADER = "X-Attnd-Session";
const SESSION_VAR = "$http_" + SESSION_HEADER.toLowerCase().replaceAll("-", "_");
const ann = (i, k) => i.metadata.annotations?.[A + k];
const routes = (i) => i.spec.rules.flatMap((r) => r.http.paths.map((p) => ({
  key: `${r.host ?? "*"} ${p.path} ${p.pathType}`, host: r.host ?? "*", path: p.path, pathType: p.pathType, svc: p.backend.service })));

// The gRPC Ingresses (ingress-grpc.yaml): those with backend-protocol GRPC
// and the canaries on their rules; the REST ones are the rest.
const isGrpc = (i) => ann(i, "backend-protocol") === "GRPC";
const ruleKeys = (i) => routes(i).map((r) => r.key).sort().join(", ");
const restIngresses = (ings) => {
  const g = new Set(ings.filter(isGrpc).map(ruleKeys));
  return ings.filter((i) => !isGrpc(i) && !(ann(i, "canary") === "true" && g.has(ruleKeys(i))));
};

// ingressRoles: the main Ingress (neither canary nor hashing), the canary
// and the session door (an Ingress of its own that hashes) of the REST
// door; throws unless there is one of each.
function ingressRoles(allIngs) {
  const ings = restIngresses(allIngs);
  const canary = ings.filter((i) => ann(i, "canary") === "true");
  const rest = ings.filter((i) => ann(i, "canary") !== "true");
  const main = rest.filter((i) => ann(i, "upstream-hash-by") === undefined);
  const door = rest.filter((i) => ann(i, "upstream-hash-by") !== undefined);
  if (main.length !== 1 || canary.length !== 1 || door.length !== 1)
    throw new Error(`expected one main Ingress, one canary and one session door (an Ingress that hashes), got ${main.length}, ${canary.length} and ${door.length}`);
  return { main: main[0], canary: canary[0], door: door[0] };
}

// checkBackends: every path of i names a Service that exists, has that
// port and selects the attnd pods.
function checkBackends(i, svcs) {
  for (const { svc } of routes(i)) {
    const s = svcs.find((x) => x.metadata.name === svc?.name);
    if (!s) throw new Error(`Ingress ${i.metadata.name}: no Service ${svc?.name}`);
    const port = s.spec.ports.find((p) => (svc.port.name !== undefined ? p.name === svc.port.name : p.port === svc.port.number));
    if (!port) throw new Error(`Ingress ${i.metadata.name}: Service ${s.metadata.name} has no port ${JSON.stringify(svc.port)}`);
    if (!matches(s.spec.selector, dep.spec.template.metadata.labels))
      throw new Error(`Ingress ${i.metadata.name}: Service ${s.metadata.name} does not select the attnd pods`);
  }
}

// checkIngress: throws unless the Ingresses are the ingress-nginx variant:
// one main Ingress and one canary that mirrors its rules (ingress-nginx
// pairs them by host and path) onto another Service over the same pods;
// the canary takes every request with a non-empty Attnd-Sequence-Id and
// balances by a consistent hash of it; no 503 is passed to another pod.
function checkIngress(ings, svcs) {
  const { main: m, canary: c } = ingressRoles(ings);
  for (const i of [m, c]) checkBackends(i, svcs);
  const keys = (i) => routes(i).map((r) => r.key).sort().join(", ");
  if (keys(m) !== keys(c)) throw new Error(`the canary's rules (${keys(c)}) differ from the main Ingress's (${keys(m)})`);
  if (m.spec.ingressClassName !== c.spec.ingressClassName) throw new Error("the two Ingresses have different classes");
  const mainSvcs = new Set(routes(m).map((r) => r.svc.name));
  if (routes(c).some((r) => mainSvcs.has(r.svc.name))) throw new Error("the canary must name another Service than the main Ingress");
  if ((ann(c, "canary-by-header") ?? "").toLowerCase() !== SEQ_HEADER.toLowerCase())
    throw new Error(`canary-by-header is ${ann(c, "canary-by-header")}, not ${SEQ_HEADER}`);
  if (ann(c, "canary-by-header-value") !== undefined) throw new Error("canary-by-header-value would match a single id");
  const pattern = ann(c, "canary-by-header-pattern");
  if (pattern === undefined) throw new Error("no canary-by-header-pattern: only the values always/never would route");
  const re = new RegExp(pattern);
  for (const id of ["1", "42", "seq-7", "always", "never"])
    if (!re.test(id)) throw new Error(`canary-by-header-pattern ${pattern} does not match the id ${id}`);
  if (ann(c, "upstream-hash-by") !== SEQ_VAR)
    throw new Error(`the canary hashes by ${ann(c, "upstream-hash-by")}, not ${SEQ_VAR}`);
  const retry = ann(m, "proxy-next-upstream") ?? "error timeout";
  if (/http_503/.test(retry)) throw new Error(`proxy-next-upstream "${retry}" would send a sequence's 503 to a pod without it`);
  // A request with the main Ingress's affinity cookie ignores the canary.
  if (ann(m, "affinity") !== undefined) throw new Error(`affinity "${ann(m, "affinity")}" on the main Ingress would keep a sequence step that carries its cookie from the canary`);
}

// nginxRewrite: where a request for uri (path and query) goes through the
// Ingress i's path p, as ingress-nginx writes it: with use-regex,
// `location ~* "^<path>"` and `rewrite "(?i)<path>" <rewrite-target>
// break;` (the whole path becomes the target, $n its groups; the query is
// kept); without, a Prefix path matches whole segments. null: not matched.
function nginxRewrite(i, p, uri) {
  const [path, query] = uri.split(/\?(.*)/s);
  const q = query !== undefined ? `?${query}` : "";
  if (ann(i, "use-regex") !== "true") {
    const pre = p.path.replace(/\/$/, "");
    if (!(path === pre || path.startsWith(pre + "/"))) return null;
    return (ann(i, "rewrite-target") ?? path) + q;
  }
  if (!new RegExp("^" + p.path, "i").test(path)) return null;
  const target = ann(i, "rewrite-target");
  if (target === undefined) return path + q;
  const g = new RegExp(p.path, "i").exec(path);
  return target.replace(/\$(\d)/g, (_, n) => g[n] ?? "") + q;
}

// Where a client that retains maps outside a sequence sends its requests
// through the session door, and the paths attnd must see.
const SESSION_PATHS = [
  ["/session/v2/models/sdpa/infer", "/v2/models/sdpa/infer"],
  ["/session/v2/maps/m1-7cda4b", "/v2/maps/m1-7cda4b"],
  ["/session/v2/maps/m1-7cda4b/attention?b=0&h=mean&max=64", "/v2/maps/m1-7cda4b/attention?b=0&h=mean&max=64"],
  ["/session/v2/maps/m1-7cda4b?wait=2&timeout_ms=500", "/v2/maps/m1-7cda4b?wait=2&timeout_ms=500"],
  ["/session/v2/maps", "/v2/maps"],
  ["/session", "/"],
];

// checkSessionDoor: throws unless the session door keeps a client's
// retained maps on one pod: it hashes on X-Attnd-Session, over a Service
// of its own (ingress-nginx keeps one upstream-hash-by per Service port,
// the first Ingress's), for the main Ingress's hosts and class, with the
// /session prefix stripped from every path and the rest of the API left to
// the main Ingress; as a standalone Ingress it repeats the main one's body
// size and timeouts, and passes no 503 on.
function checkSessionDoor(ings, svcs) {
  const { main: m, canary: c, door: d } = ingressRoles(ings);
  checkBackends(d, svcs);
  if (ann(d, "upstream-hash-by") !== SESSION_VAR)
    throw new Error(`the session door hashes by ${ann(d, "upstream-hash-by")}, not ${SESSION_VAR}`);
  const others = new Set([...routes(m), ...routes(c)].map((r) => r.svc.name));
  if (routes(d).some((r) => others.has(r.svc.name)))
    throw new Error("the session door must name a Service of its own (ingress-nginx keeps one upstream-hash-by per Service port)");
  if (d.spec.ingressClassName !== m.spec.ingressClassName) throw new Error("the session door has another class than the main Ingress");
  const hosts = (i) => [...new Set(routes(i).map((r) => r.host))].sort().join(", ");
  if (hosts(d) !== hosts(m)) throw new Error(`the session door serves hosts ${hosts(d)}, the main Ingress ${hosts(m)}`);
  const through = (uri) => routes(d).map((p) => nginxRewrite(d, p, uri)).find((x) => x !== null) ?? null;
  for (const [uri, want] of SESSION_PATHS) {
    const got = through(uri);
    if (got !== want) throw new Error(`the session door sends ${uri} to attnd as ${got}, not ${want}`);
  }
  for (const uri of ["/v2/models/sdpa/infer", "/v2/maps/m1-7cda4b", "/sessions/v2/maps", "/v2/session"])
    if (through(uri) !== null) throw new Error(`the session door takes ${uri}, which is the main Ingress's`);
  for (const k of ["proxy-body-size", "proxy-read-timeout", "proxy-send-timeout"])
    if (ann(d, k) !== ann(m, k)) throw new Error(`the session door's ${k} is ${ann(d, k)}, the main Ingress's ${ann(m, k)}`);
  const retry = ann(d, "proxy-next-upstream") ?? "error timeout";
  if (/http_503/.test(retry)) throw new Error(`proxy-next-upstream "${retry}" on the session door would retain a map on another pod than the session's`);
}

test("Ingress: sequences by a consistent hash of Attnd-Sequence-Id, the rest spread", () => {
  checkIngress(byKind("Ingress"), byKind("Service"));
});

test("Ingress: a client's retained maps stay on one pod (X-Attnd-Session under /session)", () => {
  checkSessionDoor(byKind("Ingress"), byKind("Service"));
});

// ingress-nginx (1.12 and later: strict-validate-path-type, on by default)
// refuses an Exact or Prefix path with other characters than these; a
// regular expression needs ImplementationSpecific.
const STRICT_PATH = /^\/[A-Za-z0-9_\-/]*$/;

// checkGrpcIngress: throws unless gRPC reaches the pods through
// ingress-nginx: one main Ingress with backend-protocol GRPC on a host of
// its own (the REST Ingress holds / on every host) that TLS covers
// (ingress-nginx speaks HTTP/2 to clients only over TLS), over a Service
// port that reaches the container's gRPC port (ATTND_GRPC_PORT); a canary
// on the same rules that takes calls with attnd-sequence-id metadata to
// another Service and hashes on it; stream-long timeouts; the body limit.
function checkGrpcIngress(ings, svcs) {
  const main = ings.filter((i) => isGrpc(i) && ann(i, "canary") !== "true");
  if (main.length !== 1) throw new Error(`expected one gRPC Ingress (backend-protocol GRPC), got ${main.length}`);
  const m = main[0];
  if (routes(m).some((r) => r.host === "*")) throw new Error("the gRPC Ingress needs a host: without one its / is the REST Ingress's");
  const canary = ings.filter((i) => ann(i, "canary") === "true" && ruleKeys(i) === ruleKeys(m));
  if (canary.length !== 1) throw new Error(`expected one canary on the gRPC Ingress's rules (${ruleKeys(m)}), got ${canary.length}`);
  const c = canary[0];
  const grpcPort = Number(cm.data.ATTND_GRPC_PORT ?? 8001);
  for (const i of [m, c]) {
    checkBackends(i, svcs);
    for (const { svc } of routes(i)) {
      const s = svcs.find((x) => x.metadata.name === svc.name);
      const port = s.spec.ports.find((p) => (svc.port.name !== undefined ? p.name === svc.port.name : p.port === svc.port.number));
      const cp = ctr.ports.find((p) => p.name === port.targetPort || p.containerPort === port.targetPort);
      if (cp?.containerPort !== grpcPort)
        throw new Error(`Ingress ${i.metadata.name}: Service ${s.metadata.name} port ${port.name} reaches container port ${cp?.containerPort}, not ATTND_GRPC_PORT ${grpcPort}`);
    }
  }
  const restHosts = new Set(restIngresses(ings).flatMap((i) => routes(i).map((r) => r.host)));
  for (const r of routes(m)) {
    if (restHosts.has(r.host)) throw new Error(`the gRPC Ingress's host ${r.host} is a REST Ingress's too`);
    if (!(m.spec.tls ?? []).some((t) => t.secretName && (t.hosts ?? []).includes(r.host)))
      throw new Error(`no TLS for the gRPC host ${r.host}: ingress-nginx speaks HTTP/2 (gRPC) to clients only over TLS`);
  }
  if (c.spec.ingressClassName !== m.spec.ingressClassName) throw new Error("the gRPC canary has another class");
  const mainSvcs = new Set(routes(m).map((r) => r.svc.name));
  if (routes(c).some((r) => mainSvcs.has(r.svc.name))) throw new Error("the gRPC canary must name another Service than the gRPC Ingress");
  if ((ann(c, "canary-by-header") ?? "").toLowerCase() !== SEQ_HEADER.toLowerCase())
    throw new Error(`the gRPC canary-by-header is ${ann(c, "canary-by-header")}, not ${SEQ_HEADER.toLowerCase()}`);
  const pattern = ann(c, "canary-by-header-pattern");
  if (pattern === undefined || ann(c, "canary-by-header-value") !== undefined || !["1", "seq-7", "never"].every((id) => new RegExp(pattern).test(id)))
    throw new Error(`the gRPC canary's pattern ${pattern} does not take every sequence id`);
  if (ann(c, "upstream-hash-by") !== SEQ_VAR) throw new Error(`the gRPC canary hashes by ${ann(c, "upstream-hash-by")}, not ${SEQ_VAR}`);
  if (ann(m, "proxy-body-size") !== "64m") throw new Error(`the gRPC Ingress's proxy-body-size is ${ann(m, "proxy-body-size")}, not attnd's 64m`);
  for (const k of ["proxy-read-timeout", "proxy-send-timeout"])
    if (!(Number(ann(m, k) ?? 60) >= 3600)) throw new Error(`the gRPC Ingress's ${k} is ${ann(m, k) ?? "60 (the default)"}: a stream would be cut within the hour nginx.conf gives it`);
}

test("Ingress: gRPC over TLS to the pods' gRPC port, sequences by a hash of attnd-sequence-id", () => {
  checkGrpcIngress(byKind("Ingress"), byKind("Service"));
});

test("checkGrpcIngress rejects what would break gRPC through the Ingress", () => {
  const G = "attnd-grpc", GC = "attnd-grpc-sequences";
  const backend = (n) => (ings) => ingNamed(ings, n).spec.rules[0].http.paths[0].backend.service;
  const cases = [
    ["no gRPC Ingress", (ings) => ings.splice(ings.indexOf(ingNamed(ings, G)), 1), /one gRPC Ingress/],
    ["the REST port", (ings) => { backend(G)(ings).port.name = "http"; }, /not ATTND_GRPC_PORT 8001/],
    ["the canary on the REST port", (ings) => { backend(GC)(ings).port.name = "http"; }, /not ATTND_GRPC_PORT/],
    ["no TLS", (ings) => { delete ingNamed(ings, G).spec.tls; }, /TLS/],
    ["TLS for another host", (ings) => { ingNamed(ings, G).spec.tls[0].hosts = ["other.example.com"]; }, /TLS/],
    ["no host", (ings) => { for (const n of [G, GC]) delete ingNamed(ings, n).spec.rules[0].host; }, /needs a host/],
    ["no canary", (ings) => ings.splice(ings.indexOf(ingNamed(ings, GC)), 1), /one canary/],
    ["the main Service", (ings) => { backend(GC)(ings).name = "attnd"; }, /another Service/],
    ["hash by another header", (ings) => { ingNamed(ings, GC).metadata.annotations[A + "upstream-hash-by"] = "$http_x_attnd_session"; }, /hashes by/],
    ["a single id", (ings) => { const a = ingNamed(ings, GC).metadata.annotations; delete a[A + "canary-by-header-pattern"]; a[A + "canary-by-header-value"] = "1"; }, /pattern/],
    ["streams cut at 60 s", (ings) => { delete ingNamed(ings, G).metadata.annotations[A + "proxy-read-timeout"]; }, /proxy-read-timeout is 60/],
    ["the default body size", (ings) => { delete ingNamed(ings, G).metadata.annotations[A + "proxy-body-size"]; }, /proxy-body-size/],
  ];
  for (const [what, change, err] of cases) {
    const ings = structuredClone(byKind("Ingress"));
    change(ings);
    assert.throws(() => checkGrpcIngress(ings, byKind("Service")), err, what);
  }
});

test("Ingress: every Exact and Prefix path passes ingress-nginx's strict path check", () => {
  const bad = byKind("Ingress").flatMap((i) => routes(i).filter((r) => r.pathType !== "ImplementationSpecific" && !STRICT_PATH.test(r.path)).map((r) => `${i.metadata.name} ${r.path}`));
  assert.deepEqual(bad, []);
  assert.ok(!STRICT_PATH.test("/inference.GRPCInferenceService/"));
  assert.ok(!STRICT_PATH.test("/session(/|$)(.*)"));
});

const ingNamed = (ings, n) => ings.find((i) => i.metadata.name === n);

test("checkIngress rejects what would break a sequence's routing", () => {
  const C = "attnd-sequences";
  const cases = [
    ["hash by another header", (ings) => { ingNamed(ings, C).metadata.annotations[A + "upstream-hash-by"] = "$http_x_attnd_session"; }, /hashes by/],
    ["canary by another header", (ings) => { ingNamed(ings, C).metadata.annotations[A + "canary-by-header"] = "X-Sequence"; }, /canary-by-header/],
    ["no pattern", (ings) => { delete ingNamed(ings, C).metadata.annotations[A + "canary-by-header-pattern"]; }, /pattern/],
    ["a pattern that misses ids", (ings) => { ingNamed(ings, C).metadata.annotations[A + "canary-by-header-pattern"] = "^seq-"; }, /does not match/],
    ["the main Service", (ings) => { ingNamed(ings, C).spec.rules[0].http.paths[0].backend.service.name = "attnd"; }, /another Service/],
    ["a missing Service", (ings) => { ingNamed(ings, C).spec.rules[0].http.paths[0].backend.service.name = "nope"; }, /no Service nope/],
    ["another path", (ings) => { ingNamed(ings, C).spec.rules[0].http.paths[0].path = "/v2"; }, /differ/],
    ["retry on 503", (ings) => { ingNamed(ings, "attnd").metadata.annotations[A + "proxy-next-upstream"] = "error timeout http_503"; }, /503/],
    ["cookie affinity on the main Ingress", (ings) => { ingNamed(ings, "attnd").metadata.annotations[A + "affinity"] = "cookie"; }, /affinity/],
    ["no canary", (ings) => { ingNamed(ings, C).metadata.annotations[A + "canary"] = "false"; }, /one main Ingress, one canary/],
  ];
  for (const [what, change, err] of cases) {
    const ings = structuredClone(byKind("Ingress"));
    change(ings);
    assert.throws(() => checkIngress(ings, byKind("Service")), err, what);
  }
});

test("checkSessionDoor rejects what would lose a client's retained maps", () => {
  const D = "attnd-sessions";
  const set = (k, v) => (ings) => { const a = ingNamed(ings, D).metadata.annotations; if (v === undefined) delete a[A + k]; else a[A + k] = v; };
  const path = (v) => (ings) => { ingNamed(ings, D).spec.rules[0].http.paths[0].path = v; };
  const cases = [
    ["no session door", (ings) => ings.splice(ings.indexOf(ingNamed(ings, D)), 1), /session door/],
    ["hash by another header", set("upstream-hash-by", "$http_x_session"), /hashes by/],
    ["hash by the client address", set("upstream-hash-by", "$remote_addr"), /hashes by/],
    ["the main Service", (ings) => { ingNamed(ings, D).spec.rules[0].http.paths[0].backend.service.name = "attnd"; }, /Service of its own/],
    ["the canary's Service", (ings) => { ingNamed(ings, D).spec.rules[0].http.paths[0].backend.service.name = "attnd-sequences"; }, /Service of its own/],
    ["no rewrite", set("rewrite-target", undefined), /as \/session\/v2/],
    ["the wrong group", set("rewrite-target", "/$1"), /not \/v2\/models/],
    ["no use-regex", set("use-regex", undefined), /sends/],
    ["a prefix that takes the API", path("/(session/?)?(.*)"), /takes \/v2/],
    ["a prefix without its boundary", path("/session/?()(.*)"), /takes \/sessions/],
    ["a shorter read timeout", set("proxy-read-timeout", "60"), /proxy-read-timeout/],
    ["the default body size", set("proxy-body-size", undefined), /proxy-body-size/],
    ["retry on 503", set("proxy-next-upstream", "error timeout http_503"), /503/],
    ["another host", (ings) => { ingNamed(ings, D).spec.rules[0].host = "maps.example.com"; }, /hosts/],
  ];
  for (const [what, change, err] of cases) {
    const ings = structuredClone(byKind("Ingress"));
    change(ings);
    assert.throws(() => checkSessionDoor(ings, byKind("Service")), err, what);
  }
});

test("deploy/nginx.conf hashes on the same header, and passes no 503 on", () => {
  const conf = readFileSync(ROOT + "deploy/nginx.conf", "utf8").replace(/#.*$/gm, "");
  const ups = [...conf.matchAll(/upstream (\w+) \{([^}]*)\}/g)];
  const seq = ups.find(([, , body]) => body.includes(`hash ${SEQ_VAR} consistent;`));
  assert.ok(seq, `no upstream with hash ${SEQ_VAR} consistent`);
  const loc = new RegExp(`location (@?\\w+) \\{\\s*proxy_pass http://${seq[1]};([^}]*)\\}`).exec(conf);
  assert.ok(loc, `no location proxies to ${seq[1]}`);
  assert.match(loc[2], /proxy_next_upstream error timeout/);
  assert.doesNotMatch(loc[2], /http_503/);
  // Requests with the header, and only those, go there.
  assert.ok(conf.includes(`if (${SEQ_VAR}) {`), `no if (${SEQ_VAR})`);
  assert.ok(conf.includes(`error_page 418 = ${loc[1]};`), `no error_page 418 = ${loc[1]}`);
});

test("deploy/nginx.conf keeps a session on one replica by the header the session door hashes on, and passes no 503 on", () => {
  const conf = readFileSync(ROOT + "deploy/nginx.conf", "utf8").replace(/#.*$/gm, "");
  const ups = [...conf.matchAll(/upstream (\w+) \{([^}]*)\}/g)];
  const sess = ups.find(([, , body]) => body.includes(`hash ${SESSION_VAR} consistent;`));
  assert.ok(sess, `no upstream with hash ${SESSION_VAR} consistent`);
  const loc = new RegExp(`location (@?\\w+) \\{\\s*proxy_pass http://${sess[1]};([^}]*)\\}`).exec(conf);
  assert.ok(loc, `no location proxies to ${sess[1]}`);
  assert.match(loc[2], /proxy_next_upstream error timeout/);
  assert.doesNotMatch(loc[2], /http_503/);
  const code = new RegExp(`error_page (\\d+) = ${loc[1]};`).exec(conf);
  assert.ok(code, `no error_page = ${loc[1]}`);
  assert.match(conf, new RegExp(`if \\(\\${SESSION_VAR}\\) \\{\\s*return ${code[1]};`));
  assert.equal(ann(ingressRoles(byKind("Ingress")).door, "upstream-hash-by"), SESSION_VAR);
});

// proxiesShorterThanDaemon: what in the REST Ingresses (with the
// ConfigMap's settings over --help's defaults) and deploy/nginx.conf (the
// defaults: its replicas are started without settings) would answer before
// attnd does: a read or send timeout not past the request deadline (the
// proxy's 504 for a request attnd is still computing, its own 504 lost) or
// a body limit under attnd's (nginx's 413 for a body attnd takes).
const nginxSize = (v) => {
  const m = /^(\d+)([kKmMgG]?)$/.exec(String(v));
  return m ? Number(m[1]) * ({ k: 2 ** 10, m: 2 ** 20, g: 2 ** 30 }[m[2].toLowerCase()] ?? 1) : NaN;
};
function proxiesShorterThanDaemon(data, ings, conf, help) {
  const defaults = helpSettings(help);
  const v = (n, d = data) => Number(d[n] ?? defaults.get(n));
  const bad = [];
  const late = (where, k, s, deadlineMs) => {
    if (!(Number(s) * 1000 > deadlineMs)) bad.push(`${where} ${k} ${s} s is not past the deadline (ATTND_DEADLINE_MS ${deadlineMs})`);
  };
  const big = (where, size, maxBody) => {
    if (!(nginxSize(size) >= maxBody)) bad.push(`${where} body limit ${size} is under ATTND_MAX_BODY ${maxBody}`);
  };
  for (const i of ings.filter((x) => ann(x, "backend-protocol") !== "GRPC" && ann(x, "canary") !== "true")) {
    for (const k of ["proxy-read-timeout", "proxy-send-timeout"])
      late(`Ingress ${i.metadata.name}`, k, ann(i, k) ?? 60, v("ATTND_DEADLINE_MS"));
    big(`Ingress ${i.metadata.name}`, ann(i, "proxy-body-size") ?? "1m", v("ATTND_MAX_BODY"));
  }
  // every server block's (REST's proxy_*, gRPC's grpc_*; nginx's 60 s
  // and 1m where one sets none)
  const c = conf.replace(/#.*$/gm, "");
  const secs = { ms: 0.001, s: 1, m: 60, h: 3600 };
  const all = (k) => [...c.matchAll(new RegExp(`\\n\\s*${k} (\\d+)(ms|s|m|h)?;`, "g"))].map((m) => Number(m[1]) * secs[m[2] || "s"]);
  for (const [door, pre] of [["REST", "proxy"], ["gRPC", "grpc"]])
    for (const k of [`${pre}_read_timeout`, `${pre}_send_timeout`]) {
      const found = all(k);
      for (const s of found.length ? found : [60]) late(`deploy/nginx.conf (${door})`, k, s, v("ATTND_DEADLINE_MS", {}));
    }
  const sizes = [...c.matchAll(/\n\s*client_max_body_size (\w+);/g)].map((m) => m[1]);
  assert.equal(sizes.length, 2, "a client_max_body_size in each server block");
  for (const size of sizes) big("deploy/nginx.conf", size, v("ATTND_MAX_BODY", {}));
  return bad;
}

test("the Ingresses and deploy/nginx.conf wait past the daemon's deadline and take its largest body", { skip: NO_BIN }, () => {
  const conf = readFileSync(ROOT + "deploy/nginx.conf", "utf8");
  const ings = byKind("Ingress");
  assert.deepEqual(proxiesShorterThanDaemon(cm.data, ings, conf, HELP), []);
  // a ConfigMap that raises the deadline or the body limit past the
  // Ingress's, or an nginx.conf under the defaults, is caught
  assert.match(proxiesShorterThanDaemon({ ...cm.data, ATTND_DEADLINE_MS: "60000" }, ings, conf, HELP).join("\n"), /Ingress attnd proxy-read-timeout 35 s is not past the deadline \(ATTND_DEADLINE_MS 60000\)/);
  assert.match(proxiesShorterThanDaemon({ ...cm.data, ATTND_MAX_BODY: String(2 ** 28) }, ings, conf, HELP).join("\n"), /Ingress attnd body limit 64m is under ATTND_MAX_BODY 268435456/);
  assert.match(proxiesShorterThanDaemon(cm.data, ings, conf.replace("proxy_read_timeout 35s;", "proxy_read_timeout 30s;"), HELP).join("\n"), /nginx\.conf \(REST\) proxy_read_timeout 30 s/);
  assert.match(proxiesShorterThanDaemon(cm.data, ings, conf.replace(/(\n\s*client_max_body_size) 64m;/, "$1 1m;"), HELP).join("\n"), /nginx\.conf body limit 1m/);
  // the gRPC server block's too (its own timeouts and body limit)
  assert.match(proxiesShorterThanDaemon(cm.data, ings, conf.replace("grpc_read_timeout 35s;", "grpc_read_timeout 20s;"), HELP).join("\n"), /nginx\.conf \(gRPC\) grpc_read_timeout 20 s/);
  assert.match(proxiesShorterThanDaemon(cm.data, ings, conf.replace(/(listen 127\.0\.0\.1:8001 http2;[^]*?client_max_body_size) 64m;/, "$1 1m;"), HELP).join("\n"), /nginx\.conf body limit 1m/);
});
