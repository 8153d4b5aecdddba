// k8s.mjs - what validate-k8s.test.mjs and validate-ingress.test.mjs share:
// deploy/k8s/*.yaml loaded, the strict schema validator (validate-k8s's
// header says how it works), lookups by kind and name, the Deployment's
// pod, container and ConfigMap, and `attnd --help`'s settings (when
// ATTND_BIN names the binary).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const require = createRequire(import.meta.url);
export const ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const K8S = ROOT + "deploy/k8s/";

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
export function validate(doc) {
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

export const manifests = loadManifests();
export const byKind = (kind) => manifests.filter((m) => m.doc.kind === kind).map((m) => m.doc);
export const one = (kind) => {
  const all = byKind(kind);
  assert.equal(all.length, 1, `expected exactly one ${kind}`);
  return all[0];
};
export const named = (kind, name) => {
  const d = byKind(kind).find((x) => x.metadata.name === name);
  assert.ok(d, `no ${kind} ${name}`);
  return d;
};
export const matches = (selector, labels) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);
export const dep = one("Deployment");
export const pod = dep.spec.template.spec;
export const ctr = pod.containers[0];
export const cm = one("ConfigMap");
export const portNamed = (name) =>
  typeof name === "number"
    ? ctr.ports.some((p) => p.containerPort === name)
    : ctr.ports.some((p) => p.name === name);

export const HELP = process.env.ATTND_BIN ? execFileSync(process.env.ATTND_BIN, ["--help"], { encoding: "utf8" }) : null;
export const NO_BIN = !HELP && "ATTND_BIN not set";
export const helpSettings = (help) => new Map([...help.matchAll(/^--\S+\s+(ATTND_[A-Z0-9_]+)\s+(\S+)/gm)].map((m) => [m[1], m[2]]));
