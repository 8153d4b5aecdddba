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
// 4. Sequences and retained maps across replicas: the ingress-nginx
//    variant (ingress.yaml) sends requests with an Attnd-Sequence-Id header
//    to a canary Ingress that hashes on that header, and requests under
//    /session/ to an Ingress that strips the prefix and hashes on
//    X-Attnd-Session, as deploy/nginx.conf does with both headers; gRPC
//    (ingress-grpc.yaml) has TLS on a host of its own, the pods' gRPC port
//    and the same sequence canary.
// Negative cases show each kind of check can fail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const require = createRequire(import.meta.url);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const K8S = ROOT + "deploy/k8s/";

function loadManifests() {
  const out = [];
  for (const file of readdirSync(K8S).filter((f) => f.endsWith(".yaml")).sort()) {
    for (const d of parseAllDocuments(readFileSync(K8S + file, "utf8"))) {
      if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
      const doc = d.toJS();
      if (doc !== null) out.push({ file, doc });
    }
  }
  return out;
}

function modelClass(doc) {
  let mod;
  try {
    mod = require(`kubernetes-models/${doc.apiVersion}`);
  } catch {
    throw new Error(`unknown apiVersion ${doc.apiVersion}`);
  }
  const cls = mod[doc.kind];
  if (!cls) throw new Error(`unknown kind ${doc.kind} in ${doc.apiVersion}`);
  return cls;
}

function track(value, path, objects) {
  if (value === null || typeof value !== "object") return value;
  const rec = { path, value, seen: new Set(), enumerated: false };
  objects.push(rec);
  const kids = new Map();
  return new Proxy(value, {
    get(t, p, r) {
      const v = Reflect.get(t, p, r);
      if (typeof p !== "string") return v;
      rec.seen.add(p);
      if (v === null || typeof v !== "object") return v;
      if (!kids.has(p)) kids.set(p, track(v, `${path}.${p}`, objects));
      return kids.get(p);
    },
    has(t, p) {
      if (typeof p === "string") rec.seen.add(p);
      return Reflect.has(t, p);
    },
    ownKeys(t) {
      rec.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

// validate: throws with the schema's message, or with the unknown fields.
function validate(doc) {
  const cls = modelClass(doc);
  new cls(doc).validate();
  const objects = [];
  cls.prototype.validate.call(track(doc, "", objects));
  const unknown = [];
  for (const o of objects) {
    if (Array.isArray(o.value) || o.enumerated) continue;
    for (const k of Object.keys(o.value)) {
      if (!o.seen.has(k)) unknown.push(`${o.path}.${k}`.replace(/^\./, ""));
    }
  }
  if (unknown.length) throw new Error(`unknown field(s): ${unknown.join(", ")}`);
}

const manifests = loadManifests();
const byKind = (kind) => manifests.filter((m) => m.doc.kind === kind).map((m) => m.doc);
const one = (kind) => {
  const all = byKind(kind);
  assert.equal(all.length, 1, `expected exactly one ${kind}`);
  return all[0];
};
const named = (kind, name) => {
  const d = byKind(kind).find((x) => x.metadata.name === name);
  assert.ok(d, `no ${kind} ${name}`);
  return d;
};
const matches = (selector, labels) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

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

const dep = one("Deployment");
const pod = dep.spec.template.spec;
const ctr = pod.containers[0];
const cm = one("ConfigMap");
const portNamed = (name) =>
  typeof name === "number"
    ? ctr.ports.some((p) => p.containerPort === name)
    : ctr.ports.some((p) => p.name === name);

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
const HELP = process.env.ATTND_BIN ? execFileSync(process.env.ATTND_BIN, ["--help"], { encoding: "utf8" }) : null;
const NO_BIN = !HELP && "ATTND_BIN not set";
const helpSettings = (help) => new Map([...help.matchAll(/^--\S+\s+(ATTND_[A-Z0-9_]+)\s+(\S+)/gm)].map((m) => [m[1], m[2]]));
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
