// validate-k8s.test.mjs - offline checks of deploy/k8s/*.yaml (node:test).
//
// 1. Every document is validated against the Kubernetes OpenAPI schemas
//    shipped in the npm package kubernetes-models (no cluster needed).
// 2. Strictly: those schemas accept unknown fields, which the API server
//    would drop (a typo like `readinesProbe` silently disables a probe). The
//    compiled validators read every field they know, so each object is
//    wrapped in a Proxy that records which keys were read; a key never read
//    (in an object whose keys were not enumerated, i.e. not a map) is an
//    unknown field.
// 3. The objects agree with each other and with the daemon: selectors match
//    the pod labels, ports and names resolve, probes hit the right health
//    endpoints, the grace period outlasts the drain, the HPA has CPU requests
//    to scale on and scales in one replica at a time, past the grace
//    period and a sequence's idle time (sequences go with a replica),
//    every ATTND_* variable is one `attnd --help` knows and the daemon's
//    memory budgets fit the memory limit (when ATTND_BIN names the
//    binary), which is requested whole; the replica count is the HPA's and
//    the PDB lets one replica go at a time; the models claim can be
//    filled; secrets come from a Secret; the Dockerfile's /models is the
//    daemon's user's.
// The Ingresses and deploy/nginx.conf (sequences and retained maps across
// replicas, the proxies' timeouts and body limits): validate-ingress.test.mjs.
// Negative cases show each kind of check can fail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { ROOT, K8S, validate, manifests, byKind, one, named, matches, dep, pod, ctr, cm, portNamed,
  HELP, NO_BIN, helpSettings } from "./k8s.mjs";

test("the manifests are there", () => {
  const kinds = manifests.map((m) => m.doc.kind).sort();
  for (const k of ["ConfigMap", "Deployment", "HorizontalPodAutoscaler",
    "PersistentVolumeClaim", "PodDisruptionBudget", "Service", "Ingress"]) {
    assert.ok(kinds.includes(k), `no ${k} in deploy/k8s`);
  }
});

for (const { file, doc } of manifests) {
  test(`schema: ${file} ${doc.kind}/${doc.metadata?.name}`, () => validate(doc));
}

test("the validator rejects a wrong type", () => {
  const d = structuredClone(one("Deployment"));
  d.spec.replicas = "two";
  assert.throws(() => validate(d), /replicas/);
});

test("the validator rejects an unknown (misspelt) field", () => {
  const d = structuredClone(one("Deployment"));
  const c = d.spec.template.spec.containers[0];
  c.readinesProbe = c.readinessProbe;
  delete c.readinessProbe;
  assert.throws(() => validate(d), /containers\.0\.readinesProbe/);
});

test("the validator rejects a missing required field", () => {
  const d = structuredClone(named("Service", "attnd"));
  delete d.spec.ports[0].port;
  assert.throws(() => validate(d), /port/);
});

test("the validator rejects an unknown kind", () => {
  assert.throws(() => validate({ apiVersion: "apps/v1", kind: "Deploymnet" }), /unknown kind/);
});

test("Deployment: selector matches its pods", () => {
  assert.ok(matches(dep.spec.selector.matchLabels, dep.spec.template.metadata.labels));
});

// With an HPA on the Deployment, a replica count in its manifest is reset
// by every `kubectl apply` of it (the three-way merge sets the field back):
// a replay of these files while the HPA had scaled to 6 cut the Deployment
// to 2 at once, 4 pods and their sequences and maps gone, until the HPA
// scaled out again. The count is the HPA's alone.
test("Deployment: leaves its replica count to the HPA", () => {
  const hpa = one("HorizontalPodAutoscaler");
  assert.equal(hpa.spec.scaleTargetRef.name, dep.metadata.name);
  assert.equal(dep.spec.replicas, undefined, `spec.replicas ${dep.spec.replicas}: each kubectl apply would set it back over the HPA's count`);
});

test("Deployment: probes on the health endpoints", () => {
  assert.equal(ctr.readinessProbe.httpGet.path, "/v2/health/ready");
  assert.equal(ctr.livenessProbe.httpGet.path, "/v2/health/live");
  for (const p of [ctr.readinessProbe, ctr.livenessProbe, ctr.startupProbe]) {
    if (p) assert.ok(portNamed(p.httpGet.port), `probe port ${p.httpGet.port} is no container port`);
  }
  // Not restarted for being busy: at least 30 s of failed probes first.
  const l = ctr.livenessProbe;
  assert.ok((l.periodSeconds ?? 10) * (l.failureThreshold ?? 3) >= 30);
  assert.ok((l.timeoutSeconds ?? 1) >= 2);
});

// graceShort: the kubelet SIGKILLs a pod once its grace period ends, so
// the preStop pause, the drain (ATTND_DRAIN_MS) and, after a drain cut
// short by it, the time the answers made get to reach slow readers
// (ATTND_STOP_FLUSH_MS) must fit in it: what does not, or null. The
// settings from data, else --help's defaults (without ATTND_BIN, or from
// a binary without the setting, those of this writing).
function graceShort(pod, ctr, data, help) {
  const defaults = new Map([["ATTND_DRAIN_MS", "30000"], ["ATTND_STOP_FLUSH_MS", "1000"], ...(help ? helpSettings(help) : [])]);
  const v = (n) => Number(data[n] ?? defaults.get(n));
  const pre = ctr.lifecycle?.preStop?.exec?.command ?? [];
  const preS = pre[0]?.endsWith("sleep") ? Number(pre[1]) : 0;
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  const drainMs = v("ATTND_DRAIN_MS"), flushMs = v("ATTND_STOP_FLUSH_MS");
  return grace * 1000 > preS * 1000 + drainMs + flushMs ? null
    : `terminationGracePeriodSeconds ${grace} <= preStop ${preS} s + drain ${drainMs} ms + flush ${flushMs} ms`;
}

test("Deployment: grace period outlasts preStop + drain + the flush after it", () => {
  assert.equal(graceShort(pod, ctr, cm.data, HELP), null);
  // each counts: 5 s + 30 s + 10 s, or + 40 s, is not under 45 s
  assert.match(graceShort(pod, ctr, { ...cm.data, ATTND_STOP_FLUSH_MS: "10000" }, HELP) ?? "",
    /terminationGracePeriodSeconds 45 <= preStop 5 s \+ drain 30000 ms \+ flush 10000 ms/);
  assert.match(graceShort(pod, ctr, { ...cm.data, ATTND_DRAIN_MS: "40000" }, HELP) ?? "", /drain 40000 ms/);
});

test("Deployment: no service links, which would put the Services' ATTND_* variables beside the daemon's", () => {
  // a Service named attnd injects ATTND_PORT=tcp://<ip>:<port> and more
  assert.ok(byKind("Service").some((s) => s.metadata.name.toUpperCase().replace(/-/g, "_").startsWith("ATTND")));
  assert.equal(pod.enableServiceLinks, false);
});

test("Deployment: non-root, requests and limits", () => {
  const sc = { ...pod.securityContext, ...ctr.securityContext };
  assert.equal(sc.runAsNonRoot, true);
  assert.ok(Number.isInteger(sc.runAsUser) && sc.runAsUser > 0);
  assert.equal(sc.allowPrivilegeEscalation, false);
  for (const k of ["requests", "limits"]) {
    for (const r of ["cpu", "memory"]) assert.ok(ctr.resources?.[k]?.[r], `resources.${k}.${r}`);
  }
});

// A replica may grow to its limit by its own budgets (the test below). A
// memory request under the limit lets the scheduler fill a node on the
// request's count, and when the node runs short the kubelet evicts first
// the pods above their request: a replica inside every budget, with its
// sequences and maps, would go. So the request is the limit.
test("Deployment: memory request equals the limit the daemon's budgets fill", () => {
  const { requests, limits } = ctr.resources;
  assert.equal(quantity(requests.memory), quantity(limits.memory),
    `requests.memory ${requests.memory} < limits.memory ${limits.memory}: a replica within its budgets is evicted first under node pressure`);
});

test("Deployment: no service account token in the pods (attnd never calls the API server)", () => {
  assert.equal(pod.automountServiceAccountToken, false);
});

test("Deployment: its ConfigMap and models volume exist", () => {
  const refs = (ctr.envFrom ?? []).map((e) => e.configMapRef?.name);
  assert.ok(refs.includes(cm.metadata.name));
  const mount = ctr.volumeMounts.find((m) => m.mountPath === cm.data.ATTND_MODELS);
  assert.ok(mount, `no volume mounted at ATTND_MODELS=${cm.data.ATTND_MODELS}`);
  const vol = pod.volumes.find((v) => v.name === mount.name);
  const pvcs = byKind("PersistentVolumeClaim").map((p) => p.metadata.name);
  assert.ok(pvcs.includes(vol.persistentVolumeClaim?.claimName));
});

// checkModelsClaim: throws unless the models claim can be filled and every
// replica reads it: replicas spread over nodes, so the claim needs a
// many-node mode; a ReadOnlyMany claim with no dataSource starts empty and
// nothing can write it (GKE's persistent disks mount it read-only
// everywhere), so the writable many-node mode, ReadWriteMany, and the
// replicas mount it read-only.
function checkModelsClaim(pvc, vol, mount) {
  const modes = pvc.spec.accessModes ?? [];
  if (!modes.some((m) => m === "ReadWriteMany" || m === "ReadOnlyMany"))
    throw new Error(`claim ${pvc.metadata.name}: ${modes.join(", ")}: replicas on several nodes cannot all mount it`);
  if (!modes.includes("ReadWriteMany") && !pvc.spec.dataSource && !pvc.spec.dataSourceRef)
    throw new Error(`claim ${pvc.metadata.name}: ${modes.join(", ")} with no dataSource starts empty, and nothing can write the models into it`);
  if (vol.persistentVolumeClaim.readOnly !== true || mount.readOnly !== true)
    throw new Error(`claim ${pvc.metadata.name}: the replicas mount it writable`);
}

test("models claim: can be filled, and the replicas read it", () => {
  const mount = ctr.volumeMounts.find((m) => m.mountPath === cm.data.ATTND_MODELS);
  const vol = pod.volumes.find((v) => v.name === mount.name);
  const pvc = named("PersistentVolumeClaim", vol.persistentVolumeClaim.claimName);
  checkModelsClaim(pvc, vol, mount);
  const with_ = (modes, extra = {}) => ({ ...pvc, spec: { ...pvc.spec, accessModes: modes, ...extra } });
  assert.throws(() => checkModelsClaim(with_(["ReadOnlyMany"]), vol, mount), /starts empty/);
  assert.throws(() => checkModelsClaim(with_(["ReadWriteOnce"]), vol, mount), /several nodes/);
  checkModelsClaim(with_(["ReadOnlyMany"], { dataSource: { kind: "VolumeSnapshot", name: "m", apiGroup: "snapshot.storage.k8s.io" } }), vol, mount);
  assert.throws(() => checkModelsClaim(pvc, vol, { ...mount, readOnly: false }), /writable/);
});

// An API key (ATTND_API_KEY) is a secret: the ConfigMap is plain text to
// anyone who may read ConfigMaps, and a setting added to the Deployment by
// hand (kubectl patch/set env) is undone by its next kubectl apply. So the
// Deployment reads an optional Secret after the ConfigMap (later entries
// win), which the operator creates when wanted.
test("Deployment: secret settings (ATTND_API_KEY) come from an optional Secret, never the ConfigMap", () => {
  const from = ctr.envFrom ?? [];
  const sec = from.findIndex((e) => e.secretRef);
  assert.ok(sec >= 0, "no secretRef in envFrom: an API key could only go in the ConfigMap");
  assert.equal(from[sec].secretRef.optional, true, "the Secret must be optional: without it no pod would start");
  assert.ok(sec > from.findIndex((e) => e.configMapRef), "the Secret must come after the ConfigMap, so that it wins");
  assert.equal(cm.data.ATTND_API_KEY, undefined);
});

test("ConfigMap: listens on every interface, on the container port", () => {
  assert.equal(cm.data.ATTND_HOST, "0.0.0.0");
  assert.ok(portNamed(Number(cm.data.ATTND_PORT)));
});

test("Services: each selects the pods and targets a container port", () => {
  for (const svc of byKind("Service")) {
    assert.ok(matches(svc.spec.selector, dep.spec.template.metadata.labels), svc.metadata.name);
    for (const p of svc.spec.ports) assert.ok(portNamed(p.targetPort), `${svc.metadata.name}: targetPort ${p.targetPort}`);
  }
});

test("HPA: scales the Deployment on CPU, which has a CPU request", () => {
  const hpa = one("HorizontalPodAutoscaler");
  assert.equal(hpa.spec.scaleTargetRef.kind, "Deployment");
  assert.equal(hpa.spec.scaleTargetRef.name, dep.metadata.name);
  assert.ok(hpa.spec.metrics.some((m) => m.resource?.name === "cpu"));
  assert.ok(ctr.resources.requests.cpu);
  assert.ok(hpa.spec.minReplicas >= 2, "at least 2 replicas, so that one can go");
});

// hpaScaleDownFault: what is wrong with an HPA's scale-in for replicas
// that hold sequences, or null. A replica removed takes its live sequences
// (and retained maps) with it: each one's next step gets 400 from the
// replica the hash now picks and is restarted there with its history
// (README "Sequences across replicas"), and CPU does not see sequences
// held between steps. So: at most one replica a period at any count from
// min to max (selectPolicy Max, the default, takes the largest policy), a
// period past the pod's grace period (the last one has gone and its
// sequences moved before the next goes), and a stabilization window past
// a sequence's idle time (a lull while paused clients' sequences are still
// held does not shed a replica). Disabled is fine: no scale-in at all.
function hpaScaleDownFault(spec, graceS, idleMs) {
  const down = spec.behavior?.scaleDown;
  if (!down) return "no behavior.scaleDown: the defaults remove up to 100% of the replicas every 15 s";
  if (down.selectPolicy === "Disabled") return null;
  const window = down.stabilizationWindowSeconds ?? 300;
  if (window * 1000 < idleMs) return `stabilizationWindowSeconds ${window} < ATTND_SEQUENCE_IDLE_MS ${idleMs} ms`;
  const policies = down.policies ?? [{ type: "Percent", value: 100, periodSeconds: 15 }];
  for (const p of policies)
    if (p.periodSeconds < graceS) return `scaleDown policy ${p.type} ${p.value} every ${p.periodSeconds} s: under the grace period ${graceS} s, a replica may go before the last one has`;
  for (let n = spec.minReplicas ?? 1; n <= spec.maxReplicas; n++) {
    const each = policies.map((p) => (p.type === "Pods" ? p.value : Math.ceil((n * p.value) / 100)));
    const allowed = down.selectPolicy === "Min" ? Math.min(...each) : Math.max(...each);
    if (allowed > 1) return `at ${n} replicas scaleDown may remove ${allowed} at once`;
  }
  return null;
}

test("HPA: scales in one replica at a time, each after the last has gone, not within a sequence's idle time", () => {
  const hpa = one("HorizontalPodAutoscaler");
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  const idleMs = Number(cm.data.ATTND_SEQUENCE_IDLE_MS ?? (HELP ? helpSettings(HELP).get("ATTND_SEQUENCE_IDLE_MS") : 60000));
  assert.equal(hpaScaleDownFault(hpa.spec, grace, idleMs), null);
  // each kind of fault is caught
  const spec = (down) => ({ ...hpa.spec, behavior: { scaleDown: down } });
  const down = hpa.spec.behavior.scaleDown;
  assert.match(hpaScaleDownFault({ ...hpa.spec, behavior: {} }, grace, idleMs), /no behavior.scaleDown/);
  assert.match(hpaScaleDownFault(spec({ ...down, stabilizationWindowSeconds: 30 }), grace, idleMs), /stabilizationWindowSeconds 30 </);
  assert.match(hpaScaleDownFault(spec({ ...down, policies: [{ type: "Pods", value: 1, periodSeconds: 30 }] }), grace, idleMs), /every 30 s: under the grace period/);
  assert.match(hpaScaleDownFault(spec({ ...down, policies: [{ type: "Pods", value: 2, periodSeconds: 60 }] }), grace, idleMs), /remove 2 at once/);
  assert.match(hpaScaleDownFault(spec({ ...down, policies: [...down.policies, { type: "Percent", value: 25, periodSeconds: 60 }] }), grace, idleMs), /at 5 replicas scaleDown may remove 2/);
  assert.equal(hpaScaleDownFault(spec({ ...down, policies: [...down.policies, { type: "Percent", value: 25, periodSeconds: 60 }], selectPolicy: "Min" }), grace, idleMs), null);
});

// pdbAllows: how many of n ready replicas voluntary disruptions (node
// drains) may take down at once under the budget's integer fields.
function pdbAllows(spec, n) {
  if (spec.maxUnavailable !== undefined) return Math.min(n, Number(spec.maxUnavailable));
  return Math.max(0, n - Number(spec.minAvailable ?? 0));
}

// A replica evicted takes its sequences and maps with it and its share of
// the load goes to the others: one at a time, at any size the HPA scales
// to (minAvailable 1 let a drain take 7 of 8 at once, the last one then
// carrying what the HPA had scaled out for).
test("PDB: selects the pods and lets drains take one replica at a time, at any scale", () => {
  const pdb = one("PodDisruptionBudget");
  const hpa = one("HorizontalPodAutoscaler");
  assert.ok(matches(pdb.spec.selector.matchLabels, dep.spec.template.metadata.labels));
  for (let n = hpa.spec.minReplicas; n <= hpa.spec.maxReplicas; n++)
    assert.equal(pdbAllows(pdb.spec, n), 1, `with ${n} replicas the budget lets ${pdbAllows(pdb.spec, n)} go at once`);
  assert.equal(pdbAllows({ minAvailable: 1 }, 8), 7);
});

// The daemon ignores an ATTND_* variable it does not know (a misspelt
// setting silently keeps its default), so every one the deployment files
// name must be a row of `attnd --help`.
const deployText = () => [ROOT + "Dockerfile", ROOT + "deploy/nginx.conf",
  ...readdirSync(K8S).filter((f) => f.endsWith(".yaml")).map((f) => K8S + f)]
  .map((f) => readFileSync(f, "utf8")).join("\n");
function unknownSettings(names, help) {
  const known = helpSettings(help);
  return [...new Set(names)].filter((n) => !known.has(n));
}

test("every ATTND_* variable is a daemon setting", { skip: NO_BIN }, () => {
  const names = [...Object.keys(cm.data), ...deployText().matchAll(/\bATTND_[A-Z0-9_]+/g)].map((x) => (Array.isArray(x) ? x[0] : x));
  assert.ok(names.length > 5);
  assert.deepEqual(unknownSettings(names, HELP), []);
  // A misspelt name, or the prefix of a real one, is caught.
  assert.deepEqual(unknownSettings(["ATTND_DRAIN_MSS", "ATTND_MAX_BATC", "ATTND_PORT"], HELP), ["ATTND_DRAIN_MSS", "ATTND_MAX_BATC"]);
});

// dockerfileModelsOwner: throws unless the image's /models (the volume a
// plain `docker run` makes, where uploads write) is the daemon's user's:
// created with that owner and every COPY into it --chown'ed to it.
function dockerfileModelsOwner(text) {
  const t = text.replace(/\\\n/g, " ");
  const user = /^USER\s+(\S+)/m.exec(t)?.[1];
  if (!user) throw new Error("no USER in the Dockerfile");
  const [uid, gid = uid] = user.split(":");
  const copies = [...t.matchAll(/^COPY\s+(.*)\s(\/models\/?)\s*$/gm)].map((m) => m[1]);
  if (!copies.length) throw new Error("no COPY into /models");
  for (const c of copies)
    if (!new RegExp(`--chown=${uid}:${gid}(\\s|$)`).test(c)) throw new Error(`COPY ${c} /models: not --chown=${uid}:${gid}, so root owns what the daemon (user ${user}) must write`);
  if (!new RegExp(`install -d -o ${uid} -g ${gid}\\b[^\\n]*\\s/models(\\s|$)`).test(t))
    throw new Error(`/models is not created owned by ${uid}:${gid} (install -d -o ${uid} -g ${gid} ... /models)`);
}

test("Dockerfile: the daemon's user owns /models, where an upload writes", () => {
  const text = readFileSync(ROOT + "Dockerfile", "utf8");
  dockerfileModelsOwner(text);
  assert.throws(() => dockerfileModelsOwner(text.replace(/--chown=\S+ /, "")), /not --chown/);
  assert.throws(() => dockerfileModelsOwner(text.replace(/install -d -o \d+ -g \d+/, "install -d")), /not created owned/);
});

// The memory the daemon may hold by its own budgets, with the ConfigMap's
// settings over --help's defaults, for one weight-set model (kv-bytes is per
// model): the bodies/requests/answers budget, the retained maps and the K/V
// cache, plus attnd's room for the code, threads, BLAS buffers and what
// malloc keeps after a free, 64 MiB + 64 a thread (server/memfit.c counts
// the same in its warning; measured with the ConfigMap's settings, every
// bound full: 94 MiB past the three at the peak, README "Kubernetes"),
// plus 64 MiB of weights. Past the container's memory limit the kernel
// OOM-kills the replica (every sequence and map on it lost) where attnd
// would have answered 503.
const MiB = 2 ** 20;
const WEIGHTS = 64 * MiB;
const room = (threads) => (64 + 64 * threads) * MiB;
function quantity(q) {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  assert.ok(m, `memory quantity ${q}`);
  const mult = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m[2]] ?? 1;
  return Number(m[1]) * mult;
}
function budgetOverLimit(data, limit, help) {
  const defaults = helpSettings(help);
  const v = (n) => Number(data[n] ?? defaults.get(n));
  const parts = { ATTND_MEMORY_BUDGET: v("ATTND_MEMORY_BUDGET"), ATTND_MAPS_BYTES: v("ATTND_MAPS_BYTES"), ATTND_KV_BYTES: v("ATTND_KV_BYTES") };
  for (const [n, x] of Object.entries(parts)) assert.ok(Number.isFinite(x), `${n}: ${x}`);
  const threads = v("ATTND_THREADS");
  assert.ok(threads > 0, `ATTND_THREADS ${threads}: set it, the room grows with it`);
  const headroom = room(threads) + WEIGHTS;
  const total = Object.values(parts).reduce((a, b) => a + b, 0) + headroom;
  const lim = quantity(limit);
  return total > lim ? `${Object.entries(parts).map(([n, x]) => `${n} ${x}`).join(" + ")} + room ${room(threads)} (${threads} threads) + weights ${WEIGHTS} = ${total} > limits.memory ${limit} (${lim})` : null;
}

test("Deployment: the daemon's memory budgets fit the container's memory limit", { skip: NO_BIN }, () => {
  assert.equal(budgetOverLimit(cm.data, ctr.resources.limits.memory, HELP), null);
  // The K/V default (4 GiB per model) alone is past a 2Gi limit.
  const d = { ...cm.data };
  delete d.ATTND_KV_BYTES;
  assert.match(budgetOverLimit(d, "2Gi", HELP) ?? "", /ATTND_KV_BYTES 4294967296/);
  // Four threads' arenas need 128 MiB more room than the ConfigMap leaves.
  assert.match(budgetOverLimit({ ...cm.data, ATTND_THREADS: "4" }, ctr.resources.limits.memory, HELP) ?? "", /room 335544320 \(4 threads\)/);
});

test("Service attnd: keeps a client on one replica", () => {
  assert.equal(named("Service", "attnd").spec.sessionAffinity, "ClientIP");
});

// Sequences across replicas. The header a client sends with every request
// about a sequence (README "Sequences across replicas"), and the nginx
