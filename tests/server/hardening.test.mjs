// hardening.test.mjs - what hostile clients and crashes must not get
// through (issue 11): upload staging and names, body declarations per route,
// auth before any body, port sharing, slow clients, drain, memory budget.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REFS, fp32, infer, maxDiff, modelsDir, post, start } from './helper.mjs';

const X = REFS.causal;
const xreq = (id) => ({ id, inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('upload leftovers of a crash are swept at start; names starting with . are refused', async () => {
  const dir = modelsDir();
  // what attnd 0.1.0 left when killed during an upload, and a staging
  // folder of the current layout whose process is gone
  const old = join(dir, '.upload-evil-999999999-0');
  mkdirSync(old);
  cpSync(join(dir, 'tiny'), old, { recursive: true });
  mkdirSync(join(dir, '.attnd-staging', 'tiny~999999999~3'), { recursive: true });
  writeFileSync(join(dir, '.attnd-staging', 'tiny~999999999~3', 'model.safetensors'), 'partial');
  const d = await start({ dir });
  try {
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('.')), [], 'staging leftovers removed');
    assert.match(d.log(), /removed 2 staging folders left by an interrupted upload/);
    let r = await post(`${d.url}/v2/repository/models/.upload-evil-999999999-0/load`, '');
    assert.equal(r.status, 400);
    assert.match(r.json.error, /not starting with '\.'/);
    r = await post(`${d.url}/v2/repository/models/.hidden/load`, {
      parameters: { 'file:model.safetensors': 'AAAA' },
    });
    assert.equal(r.status, 400);
    assert.equal(existsSync(join(dir, '.hidden')), false);
    const idx = await post(`${d.url}/v2/repository/index`, '');
    assert.equal(idx.json.find((m) => m.name.startsWith('.')), undefined);
  } finally {
    assert.equal((await d.stop()).code, 0);
    rmSync(dir, { recursive: true, force: true });
  }
});
