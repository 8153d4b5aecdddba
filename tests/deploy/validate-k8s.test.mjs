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
//    to scale on, every ATTND_* variable is one `attnd --help` knows
//    (when ATTND_BIN names the binary).
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
const matches = (selector, labels) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

test("the manifests are there", () => {
  const kinds = manifests.map((m) => m.doc.kind).sort();
  for (const k of ["ConfigMap", "Deployment", "HorizontalPodAutoscaler",
    "PersistentVolumeClaim", "PodDisruptionBudget", "Service"]) {
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
  const d = structuredClone(one("Service"));
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

test("Deployment: 2 replicas, selector matches its pods", () => {
  assert.equal(dep.spec.replicas, 2);
  assert.ok(matches(dep.spec.selector.matchLabels, dep.spec.template.metadata.labels));
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

test("Deployment: grace period outlasts preStop + drain", () => {
  const drainMs = Number(cm.data.ATTND_DRAIN_MS ?? 30000);
  const pre = ctr.lifecycle?.preStop?.exec?.command ?? [];
  const preS = pre[0]?.endsWith("sleep") ? Number(pre[1]) : 0;
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  assert.ok(grace * 1000 > drainMs + preS * 1000,
    `terminationGracePeriodSeconds ${grace} <= drain ${drainMs} ms + preStop ${preS} s`);
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

test("Deployment: its ConfigMap and models volume exist", () => {
  const refs = (ctr.envFrom ?? []).map((e) => e.configMapRef?.name);
  assert.ok(refs.includes(cm.metadata.name));
  const mount = ctr.volumeMounts.find((m) => m.mountPath === cm.data.ATTND_MODELS);
  assert.ok(mount, `no volume mounted at ATTND_MODELS=${cm.data.ATTND_MODELS}`);
  const vol = pod.volumes.find((v) => v.name === mount.name);
  const pvcs = byKind("PersistentVolumeClaim").map((p) => p.metadata.name);
  assert.ok(pvcs.includes(vol.persistentVolumeClaim?.claimName));
});

test("ConfigMap: listens on every interface, on the container port", () => {
  assert.equal(cm.data.ATTND_HOST, "0.0.0.0");
  assert.ok(portNamed(Number(cm.data.ATTND_PORT)));
});

test("Service: selects the pods, keeps a client on one replica", () => {
  const svc = one("Service");
  assert.ok(matches(svc.spec.selector, dep.spec.template.metadata.labels));
  for (const p of svc.spec.ports) assert.ok(portNamed(p.targetPort), `targetPort ${p.targetPort}`);
  assert.equal(svc.spec.sessionAffinity, "ClientIP");
});

test("HPA: scales the Deployment on CPU, which has a CPU request", () => {
  const hpa = one("HorizontalPodAutoscaler");
  assert.equal(hpa.spec.scaleTargetRef.kind, "Deployment");
  assert.equal(hpa.spec.scaleTargetRef.name, dep.metadata.name);
  assert.ok(hpa.spec.metrics.some((m) => m.resource?.name === "cpu"));
  assert.ok(ctr.resources.requests.cpu);
  assert.ok(hpa.spec.minReplicas >= dep.spec.replicas);
});

test("PDB: selects the pods and leaves room for a disruption", () => {
  const pdb = one("PodDisruptionBudget");
  assert.ok(matches(pdb.spec.selector.matchLabels, dep.spec.template.metadata.labels));
  assert.ok(pdb.spec.minAvailable < one("HorizontalPodAutoscaler").spec.minReplicas);
});

test("every ATTND_* variable is a daemon setting", { skip: !process.env.ATTND_BIN && "ATTND_BIN not set" }, () => {
  const help = execFileSync(process.env.ATTND_BIN, ["--help"], { encoding: "utf8" });
  const dockerfile = readFileSync(ROOT + "Dockerfile", "utf8");
  const names = new Set([...Object.keys(cm.data), ...dockerfile.matchAll(/\b(ATTND_[A-Z_]+)=/g)].map((x) => (Array.isArray(x) ? x[1] : x)));
  for (const n of names) {
    if (n.startsWith("ATTND_")) assert.ok(help.includes(n), `${n} is not in attnd --help`);
  }
});
