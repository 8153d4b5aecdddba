// sequences.test.mjs - the `sequences` extension: Triton's sequence_id /
// sequence_start / sequence_end on a weight-set model whose keys and values
// the server keeps. The property every test leans on: a sequence's step
// gives exactly (1e-5) the rows that one stateless causal request over the
// sequence's whole history gives (y, attention, scores), whatever the
// chunking. The model is a GQA + RoPE layer with biases written here
// (seeded), so the engine's cache path and its stateless path are compared,
// not the code with itself.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { SLOW, binaryRequest, f32bytes, fp32, infer, maxDiff, parseBinary, requestsUsed, start } from './helper.mjs';
import { ALL, D, checkStep, expectRows, feed, full, gqaModels, metric, send, stepBody, tokens } from './seq_helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('a sequence in any chunking equals one causal request over its tokens', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(9, 1);
    const ref = await full(d, xs);
    await feed(d, 7, xs, [1, 1, 1, 1, 1, 1, 1, 1, 1], ref);
    await feed(d, 'chat-5-1-3', xs, [5, 1, 3], ref);
    await feed(d, '18446744073', xs, [9], ref);
    // 0 bytes of K/V are left once every sequence ended
    assert.equal(await metric(d, 'attnd_kv_bytes'), 0);
    assert.equal(await metric(d, 'attnd_sequences_live'), 0);
    assert.equal(await metric(d, 'attnd_sequences_started_total'), 3);
    assert.equal(await metric(d, 'attnd_sequences_ended_total'), 3);
    const list = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.deepEqual(list, { sequences: [], count: 0 });
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('Triton binary form (as tritonclient.http sends it), ids in the header', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(6, 2);
    const ref = await full(d, xs);
    let t0 = 0;
    for (const [k, t] of [[0, 4], [1, 2]]) {
      const part = xs.slice(t0 * D, (t0 + t) * D);
      const header = {
        id: `req-${k}`,
        inputs: [{ name: 'x', shape: [1, t, D], datatype: 'FP32', parameters: { binary_data_size: part.length * 4 } }],
        outputs: [{ name: 'y', parameters: { binary_data: true } }, { name: 'attention', parameters: { binary_data: true } }],
        parameters: { sequence_id: 99, sequence_start: k === 0, sequence_end: k === 1 },
      };
      const { body, headerLen } = binaryRequest(header, [f32bytes(part)]);
      const res = await fetch(`${d.url}/v2/models/gqa/infer`, {
        method: 'POST', body,
        headers: { 'Inference-Header-Content-Length': String(headerLen), 'Attnd-Sequence-Id': '99' },
      });
      assert.equal(res.status, 200, await res.clone().text());
      const buf = Buffer.from(await res.arrayBuffer());
      const { head, raw } = parseBinary(buf, Number(res.headers.get('inference-header-content-length')));
      assert.equal(head.id, `req-${k}`);
      assert.equal(head.parameters.sequence_length, t0 + t);
      const e = expectRows(ref, t0, t);
      assert.ok(maxDiff(raw.y, e.y) <= 1e-5);
      assert.ok(maxDiff(raw.attention, e.attention) <= 1e-5);
      t0 += t;
    }
    // the header alone names the sequence
    const a = await infer(d, 'gqa', { inputs: [fp32('x', [1, 2, D], xs.slice(0, 2 * D))], outputs: ALL,
      parameters: { sequence_start: true } }, { 'Attnd-Sequence-Id': 'hdr-only' });
    checkStep(a, ref, 0, 2, 'header only');
    const b = await infer(d, 'gqa', { inputs: [fp32('x', [1, 1, D], xs.slice(2 * D, 3 * D))], outputs: ALL },
      { 'Attnd-Sequence-Id': 'hdr-only' });
    checkStep(b, ref, 2, 1, 'header only, step');
    // header and parameter must agree
    const c = await infer(d, 'gqa', stepBody('hdr-only', xs.slice(0, D)), { 'Attnd-Sequence-Id': 'other' });
    assert.equal(c.status, 400);
    assert.match(c.json.error, /Attnd-Sequence-Id.*'other'.*'hdr-only'/);
    const bad = await infer(d, 'gqa', stepBody('x', xs.slice(0, D)), { 'Attnd-Sequence-Id': 'a/b' });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error, /Attnd-Sequence-Id/);
    // and the id of GET and DELETE /v2/sequences/{id}, which README says
    // to send the header with: a proxy routed it by the header, so a
    // disagreeing one is 400, nothing deleted
    for (const method of ['GET', 'DELETE']) {
      const r = await fetch(`${d.url}/v2/sequences/hdr-only`, { method, headers: { 'Attnd-Sequence-Id': 'other' } });
      assert.equal(r.status, 400, method);
      assert.match((await r.json()).error, /^Attnd-Sequence-Id: header 'other' and the path's sequence 'hdr-only' differ; send the same id in both, or only one$/);
    }
    const same = await fetch(`${d.url}/v2/sequences/hdr-only`, { headers: { 'Attnd-Sequence-Id': 'hdr-only' } });
    assert.equal((await same.json()).length, 3);
    const del = await fetch(`${d.url}/v2/sequences/hdr-only`, { method: 'DELETE', headers: { 'Attnd-Sequence-Id': 'hdr-only' } });
    assert.equal(del.status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('two interleaved sequences never see each other; restart; unknown ids', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xa = tokens(5, 3), xb = tokens(5, 4);
    const ra = await full(d, xa), rb = await full(d, xb);
    for (let i = 0; i < 5; i++) {
      checkStep(await infer(d, 'gqa', stepBody('A', xa.slice(i * D, (i + 1) * D), { start: i === 0 })), ra, i, 1, `A ${i}`);
      checkStep(await infer(d, 'gqa', stepBody('B', xb.slice(i * D, (i + 1) * D), { start: i === 0 })), rb, i, 1, `B ${i}`);
    }
    const list = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.equal(list.count, 2);
    for (const s of list.sequences) {
      assert.equal(s.model, 'gqa');
      assert.equal(s.length, 5);
      assert.ok(s.bytes > 0 && s.idle_ms >= 0);
    }
    assert.ok(await metric(d, 'attnd_kv_bytes') > 0);
    // a start on a live id begins it again with only its own tokens
    checkStep(await infer(d, 'gqa', stepBody('A', xb.slice(0, 2 * D), { start: true })), rb, 0, 2, 'restart');
    checkStep(await infer(d, 'gqa', stepBody('A', xb.slice(2 * D, 3 * D))), rb, 2, 1, 'after restart');
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="restarted"'), 1);
    // unknown id without a start: 400 naming the id and what to do
    const u = await infer(d, 'gqa', stepBody(12345, xa.slice(0, D)));
    assert.equal(u.status, 400);
    assert.match(u.json.error, /'12345'.*sequence_start/);
    // delete: 200, then the id is unknown; again: 404
    assert.equal((await fetch(`${d.url}/v2/sequences/B`, { method: 'DELETE' })).status, 200);
    const g = await infer(d, 'gqa', stepBody('B', xb.slice(0, D)));
    assert.equal(g.status, 400);
    assert.match(g.json.error, /'B'.*sequence_start/);
    assert.equal((await fetch(`${d.url}/v2/sequences/B`, { method: 'DELETE' })).status, 404);
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="deleted"'), 1);
    // an id with '?', '#' or '%' (printable ASCII: allowed) is addressed
    // percent-encoded in the path
    for (const id of ['a?b', 'c#d', 'e%f']) {
      assert.equal((await infer(d, 'gqa', stepBody(id, xa.slice(0, D), { start: true }))).status, 200, id);
      const p = `${d.url}/v2/sequences/${encodeURIComponent(id)}`;
      const one = await fetch(p);
      assert.equal(one.status, 200, `GET ${id}`);
      assert.equal((await one.json()).id, id);
      assert.equal((await fetch(p, { method: 'DELETE' })).status, 200, `DELETE ${id}`);
    }
    // a string id is 1 to 128 bytes (README)
    const id128 = 'i'.repeat(128);
    assert.equal((await infer(d, 'gqa', stepBody(id128, xa.slice(0, D), { start: true }))).status, 200);
    assert.equal((await fetch(`${d.url}/v2/sequences/${id128}`, { method: 'DELETE' })).status, 200);
    for (const id of [`${id128}i`, '']) {
      const r = await infer(d, 'gqa', stepBody(id, xa.slice(0, D), { start: true }));
      assert.equal(r.status, 400, `${id.length} bytes`);
      assert.match(r.json.error, /^parameters\.sequence_id: a string id is 1 to 128 bytes of printable ASCII/);
    }
    // unloading the model drops its sequences
    assert.equal((await fetch(`${d.url}/v2/repository/models/gqa/unload`, { method: 'POST' })).status, 200);
    assert.equal((await (await fetch(`${d.url}/v2/sequences`)).json()).count, 0);
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="unloaded"'), 1);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('rules: B = 1, weight-set models only, only x, no k/v outputs', async () => {
  const d = await start({ dir: gqaModels(), args: ['--cors-origins', '*'] });
  try {
    // the model says what a token costs: 2 x 2 kv heads x 4 dims x 4 bytes
    const meta0 = await (await fetch(`${d.url}/v2/models/gqa`)).json();
    assert.equal(meta0.parameters.kv_bytes_per_token, 64);
    assert.equal(meta0.parameters.kv_bytes_limit, 4096 * 1024 * 1024);
    // browsers may send the routing header and DELETE cross-origin
    const pre = await fetch(`${d.url}/v2/sequences/x`, { method: 'OPTIONS',
      headers: { Origin: 'http://example.test', 'Access-Control-Request-Method': 'DELETE' } });
    assert.equal(pre.status, 204);
    assert.match(pre.headers.get('access-control-allow-methods'), /DELETE/);
    assert.match(pre.headers.get('access-control-allow-headers'), /Attnd-Sequence-Id/);
    const unknown = await fetch(`${d.url}/v2/sequences/x`);
    assert.equal(unknown.status, 404);
    assert.match((await unknown.json()).error, /^unknown sequence 'x'/);
    assert.equal((await fetch(`${d.url}/v2/sequences/x`, { method: 'POST' })).status, 405);
    const xs = tokens(4, 5);
    const b2 = await infer(d, 'gqa', { inputs: [fp32('x', [2, 2, D], xs)],
      parameters: { sequence_id: 1, sequence_start: true, sequence_end: false } });
    assert.equal(b2.status, 400);
    assert.match(b2.json.error, /B = 1/);
    const sd = await infer(d, 'sdpa', { inputs: [fp32('q', [2, 4], Array(8).fill(1)), fp32('k', [2, 4], Array(8).fill(1)),
      fp32('v', [2, 2], Array(4).fill(1))], parameters: { sequence_id: 1, sequence_start: true } });
    assert.equal(sd.status, 400);
    assert.match(sd.json.error, /sdpa.*weight-set/);
    const kv = await infer(d, 'gqa', stepBody(1, xs, { start: true, outputs: [{ name: 'k' }] }));
    assert.equal(kv.status, 400);
    assert.match(kv.json.error, /'k'/);
    const ln = await infer(d, 'gqa', { inputs: [fp32('x', [1, 4, D], xs), { name: 'lengths', datatype: 'INT32', shape: [1], data: [4] }],
      parameters: { sequence_id: 1, sequence_start: true } });
    assert.equal(ln.status, 400);
    assert.match(ln.json.error, /lengths/);
    const st = await infer(d, 'gqa', { inputs: [fp32('x', [1, 4, D], xs)], parameters: { sequence_start: true } });
    assert.equal(st.status, 400);
    assert.match(st.json.error, /sequence_start.*sequence_id/);
    // Triton's "no sequence" (README: refused, not served stateless)
    for (const id of [0, '']) {
      const zero = await infer(d, 'gqa', { inputs: [fp32('x', [1, 4, D], xs)], parameters: { sequence_id: id } });
      assert.equal(zero.status, 400, JSON.stringify(id));
      assert.match(zero.json.error, /^parameters\.sequence_id: /, JSON.stringify(id));
    }
    assert.equal((await (await fetch(`${d.url}/v2/sequences`)).json()).count, 0);
    // a uint64 id past 2^63 - 1 as a JSON number (JSON.stringify cannot
    // write it: the text is patched)
    const big = JSON.stringify(stepBody(1, xs.slice(0, D), { start: true })).replace('"sequence_id":1', '"sequence_id":18446744073709551615');
    assert.equal((await infer(d, 'gqa', big)).status, 200);
    const listed = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.deepEqual(listed.sequences.map((q) => q.id), ['18446744073709551615']);
    assert.equal((await fetch(`${d.url}/v2/sequences/18446744073709551615`, { method: 'DELETE' })).status, 200);
    const meta = await (await fetch(`${d.url}/v2`)).json();
    assert.ok(meta.extensions.includes('sequences'));
  } finally { assert.equal((await d.stop()).code, 0); }
});

// A step's x is read as FP32 [1, T, d_model] straight into the K/V cache:
// another datatype or width would be misread (or read past its end).
test('a step with a wrong x, an unknown output or retain without maps is 400 naming it; the sequence is as it was', async () => {
  const d = await start({ dir: gqaModels(), args: ['--maps-bytes', '0'] });
  try {
    const xs = tokens(5, 11);
    const ref = await full(d, xs);
    checkStep(await infer(d, 'gqa', stepBody('w', xs.slice(0, 3 * D), { start: true })), ref, 0, 3, 'start');
    const one = xs.slice(3 * D, 4 * D);
    const bad = [
      [{ inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 1, D], data: one.map(() => 1) }] }, /^inputs\[x\]\.datatype: INT32; expected FP32/],
      [{ inputs: [{ name: 'x', datatype: 'BOOL', shape: [1, 1, D], data: one.map(() => true) }] }, /^inputs\[x\]\.datatype: BOOL; expected FP32/],
      [{ inputs: [fp32('x', [1, 2, D / 2], one)] }, new RegExp(`^inputs\\[x\\]\\.shape: expected \\[1, T, ${D}\\] for model 'gqa'$`)],
      [{ inputs: [fp32('x', [1, D], one)] }, /^inputs\[x\]\.shape: expected \[1, T, 16\]/],
      [{ inputs: [fp32('x', [1, 1, D], one)], outputs: [{ name: 'nope' }] }, /^outputs\[0\]\.name: model 'gqa' has no output 'nope' \(a sequence step gives y, attention, scores, q\)$/],
      [{ inputs: [fp32('x', [1, 1, D], one)], extra: { retain: true } }, /^parameters\.retain: this server keeps no maps \(maps-bytes 0\)$/],
    ];
    for (const [b, re] of bad) {
      const body = { inputs: b.inputs, outputs: b.outputs || ALL, parameters: { sequence_id: 'w', ...(b.extra || {}) } };
      const r = await infer(d, 'gqa', body);
      assert.equal(r.status, 400, JSON.stringify(r.json));
      assert.match(r.json.error, re);
    }
    const seq = await (await fetch(`${d.url}/v2/sequences/w`)).json();
    assert.equal(seq.length, 3);
    checkStep(await infer(d, 'gqa', stepBody('w', xs.slice(3 * D), { end: true })), ref, 3, 2, 'after the refused steps');
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});

test('steps of one sequence run in arrival order while several are in flight', async () => {
  const d = await start({ dir: gqaModels(), args: ['--max-batch', '8'] });
  try {
    const n = 12;
    const xs = tokens(n + 1, 6);
    const ref = await full(d, xs);
    checkStep(await infer(d, 'gqa', stepBody('ord', xs.slice(0, D), { start: true })), ref, 0, 1, 'start');
    // Each step is sent once the previous one has arrived (the server
    // counts it pending) or been answered, so arrival order is send order.
    // Step 1 carries 400k ignored JSON numbers: it is still decoding when
    // the later ones arrive and finish decoding.
    const answers = [];
    let answered = 0;
    for (let i = 1; i <= n; i++) {
      const extra = i === 1 ? { pad: Array.from({ length: 400000 }, (_, k) => k) } : {};
      const body = JSON.stringify(stepBody('ord', xs.slice(i * D, (i + 1) * D), { extra }));
      let done = false;
      const a = send(`${d.url}/v2/models/gqa/infer`, body).then((r) => { done = true; answered++; return r; });
      answers.push(a);
      while (!done) {
        const text = await (await fetch(`${d.url}/metrics`)).text();
        const m = /^attnd_inference_pending_requests\{model="gqa",version="1"\} (\d+)$/m.exec(text);
        if (m && Number(m[1]) >= i - answered) break;
      }
    }
    const got = await Promise.all(answers);
    got.forEach((r, k) => checkStep(r, ref, k + 1, 1, `step ${k + 1}`));
    // and a stateless request in between batches with them
    const s = await full(d, xs.slice(0, 3 * D));
    assert.equal(s.n, 3);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('the K/V budget: 503 with Retry-After naming it (400 past the whole budget), the sequence intact', async () => {
  // a page is 64 tokens x 2 kv heads x (4 + 4) floats = 4096 bytes
  const d = await start({ dir: gqaModels(), args: ['--kv-bytes', '8192', '--max-sequences', '2'] });
  try {
    const xs = tokens(130, 7);
    const ref = await full(d, xs.slice(0, 120 * D));
    checkStep(await infer(d, 'gqa', stepBody('big', xs.slice(0, 100 * D), { start: true, outputs: [{ name: 'y' }] })), ref, 0, 100, 'start');
    // 130 tokens need 3 pages, more than the whole budget: no retry (503)
    // could ever take them, so 400 without Retry-After
    const full3 = await infer(d, 'gqa', stepBody('big', xs.slice(100 * D, 130 * D), { outputs: [{ name: 'y' }] }));
    assert.equal(full3.status, 400);
    assert.equal(full3.headers.get('retry-after'), null);
    assert.match(full3.json.error, /^sequences: sequence 'big' from 100 to 130 tokens would need 12288 bytes of K\/V, more than the whole K\/V cache of model 'gqa' \(8192 bytes, kv-bytes: 128 tokens\): no retry can take it; send at most 28 tokens$/);
    const other = await infer(d, 'gqa', stepBody('other', xs.slice(0, D), { start: true }));
    assert.equal(other.status, 503);
    assert.match(other.json.error, /kv-bytes/);
    const ra = await fetch(`${d.url}/v2/models/gqa/infer`, { method: 'POST', body: JSON.stringify(stepBody('other', xs.slice(0, D), { start: true })) });
    assert.equal(ra.status, 503);
    assert.ok(Number(ra.headers.get('retry-after')) >= 1);
    // the sequence is as it was: 20 more tokens continue it exactly
    checkStep(await infer(d, 'gqa', stepBody('big', xs.slice(100 * D, 120 * D), { outputs: [{ name: 'y' }] })), ref, 100, 20, 'after 503');
    assert.equal(await metric(d, 'attnd_kv_bytes'), 8192);
    assert.equal(await metric(d, 'attnd_kv_bytes_limit'), 8192);
    // a failed step (outputs overflow float32) leaves it as it was too
    const huge = await infer(d, 'gqa', stepBody('big', Array(D).fill(3e37), { outputs: [{ name: 'y' }] }));
    assert.equal(huge.status, 400);
    assert.match(huge.json.error, /not finite/);
    const end = await infer(d, 'gqa', stepBody('big', xs.slice(0, D), { end: true, outputs: [{ name: 'y' }] }));
    assert.equal(end.status, 200);
    assert.equal(end.json.parameters.sequence_length, 121);
    assert.equal(await metric(d, 'attnd_kv_bytes'), 0);
    // --max-sequences: two live, the third start is refused
    for (const id of ['s1', 's2'])
      assert.equal((await infer(d, 'gqa', stepBody(id, xs.slice(0, D), { start: true }))).status, 200);
    const third = await infer(d, 'gqa', stepBody('s3', xs.slice(0, D), { start: true }));
    assert.equal(third.status, 503);
    assert.match(third.json.error, /max-sequences/);
    // the three 503s (kv-bytes at starts, max-sequences) count as
    // rejected, the step past the whole budget and the non-finite one as
    // bad requests
    assert.equal(await metric(d, 'attnd_inference_request_failure_total', 'gqa', ',reason="rejected"'), 3);
    assert.equal(await metric(d, 'attnd_inference_request_failure_total', 'gqa', ',reason="bad_request"'), 2);
    assert.equal(await metric(d, 'attnd_inference_request_failure_total', 'gqa', ',reason="other"'), 0);
    // and apart from a full queue's or a drain's 503s, by why
    assert.equal(await metric(d, 'attnd_sequence_steps_refused_total', 'gqa', ',reason="kv_full"'), 2);
    assert.equal(await metric(d, 'attnd_sequence_steps_refused_total', 'gqa', ',reason="sequences_full"'), 1);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a sequence that fills the whole K/V cache: its next token is told to end it or go back, not to send fewer, its restart to go to 0 or DELETE first; a cache under one page names the setting', async () => {
  // a page is 4096 bytes (64 tokens): 8192 bytes hold a sequence of 128
  const d = await start({ dir: gqaModels(), args: ['--kv-bytes', '8192'] });
  try {
    const xs = tokens(129, 11);
    const ref = await full(d, xs.slice(0, 128 * D));
    checkStep(await infer(d, 'gqa', stepBody('cap', xs.slice(0, 128 * D), { start: true, outputs: [{ name: 'y' }] })), ref, 0, 128, 'start');
    // a decoder's one token cannot be fewer: end it, or replace tokens
    const more = await infer(d, 'gqa', stepBody('cap', xs.slice(128 * D), { outputs: [{ name: 'y' }] }));
    assert.equal(more.status, 400);
    assert.equal(more.headers.get('retry-after'), null);
    assert.match(more.json.error, /^sequences: sequence 'cap' from 128 to 129 tokens would need 12288 bytes of K\/V, more than the whole K\/V cache of model 'gqa' \(8192 bytes, kv-bytes: 128 tokens\), which its 128 tokens fill: no retry can take a token more; end it, or send a step at a sequence_position below 128 to replace tokens \(or raise --kv-bytes\)$/);
    // as it says: a step at 127 replaces the last token (the same one:
    // the same rows), and the sequence still holds 128
    checkStep(await infer(d, 'gqa', stepBody('cap', xs.slice(127 * D, 128 * D), { outputs: [{ name: 'y' }], extra: { sequence_position: 127 } })), ref, 127, 1, 'at 127');
    assert.equal(await metric(d, 'attnd_kv_bytes'), 8192);
    // a restart's new cache is built beside the old one, which stays
    // until it is answered: here the two never fit, whoever else ends,
    // so 400 saying what does, not a 503 to retry forever
    const ys = tokens(10, 13);
    const again = await infer(d, 'gqa', stepBody('cap', ys, { start: true, outputs: [{ name: 'y' }] }));
    assert.equal(again.status, 400, JSON.stringify(again.json));
    assert.equal(again.headers.get('retry-after'), null);
    assert.match(again.json.error, /^sequences: the restart of sequence 'cap' needs 4096 bytes of K\/V beside the 8192 its old tokens hold until it is answered, more than the whole K\/V cache of model 'gqa' \(8192 bytes, kv-bytes\): no retry can take it; DELETE \/v2\/sequences\/\{id\} first, or send its tokens without sequence_start at sequence_position 0 \(they replace the old ones in place\)$/);
    assert.equal((await (await fetch(`${d.url}/v2/sequences/cap`)).json()).length, 128);
    // as it says: the same tokens at position 0 begin it again in place
    const ref2 = await full(d, ys);
    checkStep(await infer(d, 'gqa', stepBody('cap', ys, { outputs: [{ name: 'y' }], extra: { sequence_position: 0 } })), ref2, 0, 10, 'at 0');
    assert.equal(await metric(d, 'attnd_kv_bytes'), 4096);
  } finally { assert.equal((await d.stop()).code, 0); }
  // 4095 bytes hold no page: no sequence fits, whatever its tokens
  const e = await start({ dir: gqaModels(), args: ['--kv-bytes', '4095'] });
  try {
    // said at the load too, not only to the clients
    const warn = /warn attnd: model 'gqa': --kv-bytes 4095 is less than one page of its keys and values \(64 tokens, 4096 bytes\): it holds no sequence; raise --kv-bytes to at least 4096/;
    assert.match(await e.logged(warn), warn);
    const one = await infer(e, 'gqa', stepBody('one', tokens(1, 12), { start: true, outputs: [{ name: 'y' }] }));
    assert.equal(one.status, 400);
    assert.match(one.json.error, /^sequences: the whole K\/V cache of model 'gqa' \(4095 bytes, kv-bytes\) is less than one page of its keys and values \(64 tokens, 4096 bytes\): it holds no sequence; raise --kv-bytes to at least 4096$/);
  } finally { assert.equal((await e.stop()).code, 0); }
});

test('--max-sequences 0 and --kv-bytes 0 turn sequences off: a start is 400 (a retry would not help), stateless requests work', async () => {
  for (const [flag, why] of [['--max-sequences', /^sequences: off \(max-sequences 0\)$/], ['--kv-bytes', /keeps no K\/V cache \(kv-bytes 0\)/]]) {
    const d = await start({ dir: gqaModels(), args: [flag, '0'] });
    try {
      const x = tokens(2, 1);
      const r = await infer(d, 'gqa', stepBody('off', x, { start: true }));
      assert.equal(r.status, 400, flag);
      assert.match(r.json.error, why, flag);
      assert.equal(r.headers.get('retry-after'), null, flag);
      assert.equal((await full(d, x)).n, 2, `${flag}: stateless`);
    } finally { assert.equal((await d.stop()).code, 0); }
  }
});

test('a model whose K/V page cannot be made (over 1 GiB) refuses a start saying why, not "kv-bytes 0" (the default --kv-bytes is set)', async () => {
  // d_model 1, one head: head_dim 1, v_head_dim 2^22 + 1, so one token's
  // keys and values take 4 x (1 + 2^22 + 1) bytes and 64 of them over 1 GiB
  const dir = gqaModels(), DV = (1 << 22) + 1;
  const tensors = [['W_q', 'F32', [1, 1], 4], ['W_k', 'F32', [1, 1], 4],
    ['W_v', 'F16', [1, DV], 2 * DV], ['W_o', 'F16', [DV, 1], 2 * DV]];
  const header = {};
  let off = 0;
  for (const [name, dtype, shape, n] of tensors) header[name] = { dtype, shape, data_offsets: [off, (off += n)] };
  let h = JSON.stringify(header);
  while (h.length % 8) h += ' ';
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  mkdirSync(join(dir, 'wide'));
  writeFileSync(join(dir, 'wide', 'model.safetensors'), Buffer.concat([len, Buffer.from(h), f32bytes([0.5, 0.5]), Buffer.alloc(4 * DV)]));
  writeFileSync(join(dir, 'wide', 'config.json'), JSON.stringify({ n_heads: 1 }));
  const d = await start({ dir });
  try {
    const r = await infer(d, 'wide', { inputs: [fp32('x', [1, 1, 1], [0.5])], parameters: { sequence_id: 'w', sequence_start: true } });
    assert.equal(r.status, 400);
    assert.equal(r.json.error, "sequences: model 'wide' keeps no K/V cache: a K/V page of 64 tokens is over 1 GiB (at its load, whatever --kv-bytes)");
    assert.equal(r.headers.get('retry-after'), null);
    // its budget reads 0, not --kv-bytes; a model beside it keeps its own
    assert.equal(await metric(d, 'attnd_kv_bytes_limit', 'wide'), 0);
    assert.equal(await metric(d, 'attnd_kv_bytes_limit', 'gqa'), 4096 * 1024 * 1024);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a step\'s tokens label its new rows: one per row of x or none, as a stateless request\'s (400 otherwise, not dropped)', async () => {
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(3, 9);
    for (const [extra, start] of [[{ retain: true, tokens: ['a', 'b'] }, true], [{ tokens: ['a', 'b', 'c', 'd'] }, true]]) {
      const r = await infer(d, 'gqa', stepBody('lab', xs.slice(0, 3 * D), { start, extra }));
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.match(r.json.error, new RegExp(`^parameters\\.tokens: ${extra.tokens.length} labels for 3 new tokens`));
    }
    let r = await infer(d, 'gqa', stepBody('lab', xs.slice(0, 2 * D), { start: true, extra: { retain: true, tokens: ['a', 'b'] } }));
    assert.equal(r.status, 200);
    r = await infer(d, 'gqa', stepBody('lab', xs.slice(2 * D), { extra: { tokens: ['c', 'd'] } }));
    assert.equal(r.status, 400, 'a later step too');
    r = await infer(d, 'gqa', stepBody('lab', xs.slice(2 * D), { extra: { tokens: ['c'] } }));
    assert.equal(r.status, 200);
    const m = await (await fetch(`${d.url}/v2/maps/${r.json.parameters.map_id}`)).json();
    assert.deepEqual(m.tokens, ['a', 'b', 'c']);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a retained start over request-memory names the map\'s part it did not ask for', async () => {
  const d = await start({ dir: gqaModels(), args: ['--request-memory', '6000'] });
  try {
    const r = await infer(d, 'gqa', stepBody('big', tokens(16, 4), { start: true, outputs: [{ name: 'y' }], extra: { retain: true } }));
    assert.equal(r.status, 413);
    assert.match(r.json.error, /^outputs\.attention \(computed for the retained map\): this step needs more than 6000 bytes/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

// A stateless request and a sequence step count the same sum against
// --request-memory (the request, its layout for the engine, its outputs),
// and their layout's 413 is one message that says the bytes and what to
// send instead (test_infer.c pins it for one sequence of each kind; a
// step's is not reached here: its decode's own estimate binds first). At
// the edge the whole sum is answered 200 and a byte less 413, its y named;
// 64 one-token sequences reach the layout's 413 between the decode's and
// the outputs'.
test('request-memory at its edge: a stateless request and a sequence step, 200 with exactly enough, 413 a byte less; the layout\'s 413 says its bytes and what to send', async () => {
  const T = 64, xs = tokens(T, 21);
  const at = async (body, mem) => {
    const d = await start({ dir: gqaModels(), args: ['--request-memory', String(mem)] });
    try { return await infer(d, 'gqa', body); } finally { assert.equal((await d.stop()).code, 0); }
  };
  // the least request-memory for which goes() holds (what an answer at
  // each side is: monotone in it)
  const least = async (body, goes) => {
    let lo = 1024, hi = 1 << 17;
    while (lo < hi) {
      const mem = Math.floor((lo + hi) / 2);
      if (goes(await at(body, mem))) hi = mem; else lo = mem + 1;
    }
    return lo;
  };
  const ok = (r) => r.status === 200;
  for (const [kind, body] of [['request', { inputs: [fp32('x', [1, T, D], xs)] }],
    ['step', stepBody('edge', xs, { start: true, outputs: [{ name: 'y' }] })]]) {
    const need = await least(body, ok);
    let r = await at(body, need);
    assert.equal(r.status, 200, `${kind} at ${need}: ${JSON.stringify(r.json)}`);
    r = await at(body, need - 1);
    assert.equal(r.status, 413, kind);
    assert.equal(r.json.error, `outputs.y: this ${kind} needs more than ${need - 1} bytes with its outputs (request-memory); ask for fewer outputs, send fewer tokens, or raise --request-memory`);
  }
  // 64 sequences of one token: past the decode's estimate, the layout's
  // 413 (the request's bytes and the layout's, in all)
  const many = { inputs: [fp32('x', [64, 1, D], xs)] };
  const past = await least(many, (r) => !(r.status === 413 && /\(request-memory\)$/.test(r.json.error) && !/^outputs\./.test(r.json.error)));
  const r = await at(many, past);
  assert.equal(r.status, 413);
  const m = /^inputs\[x\]\.shape: its 64 sequences take (\d+) bytes each to lay out for the engine beside the request's (\d+) \((\d+) in all\), more than request-memory \((\d+)\) allows; send fewer or shorter sequences a request, or raise --request-memory$/.exec(r.json.error);
  assert.ok(m, r.json.error);
  assert.equal(Number(m[3]), 64 * Number(m[1]) + Number(m[2]));
  assert.equal(Number(m[4]), past);
  assert.ok(Number(m[3]) > past);
});

test('an idle sequence is dropped after --sequence-idle-ms', async () => {
  const d = await start({ dir: gqaModels(), args: ['--sequence-idle-ms', '200'] });
  try {
    const xs = tokens(2, 8);
    assert.equal((await infer(d, 'gqa', stepBody('sleepy', xs.slice(0, D), { start: true }))).status, 200);
    assert.equal((await (await fetch(`${d.url}/v2/sequences`)).json()).count, 1);
    await sleep(800 * SLOW);
    const r = await infer(d, 'gqa', stepBody('sleepy', xs.slice(D)));
    assert.equal(r.status, 400);
    assert.match(r.json.error, /'sleepy'.*sequence_start/);
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 1);
    assert.equal(await metric(d, 'attnd_kv_bytes'), 0);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('SIGTERM finishes the steps in flight, then the sequences are gone', async () => {
  const d = await start({ dir: gqaModels() });
  // the in-flight steps all send the same token, so their history is the
  // same whatever order they arrived in
  const xs = tokens(6, 11);
  for (let i = 3; i < 6; i++) xs.splice(i * D, D, ...xs.slice(2 * D, 3 * D));
  const ref = await full(d, xs);
  checkStep(await infer(d, 'gqa', stepBody('drain', xs.slice(0, 2 * D), { start: true })), ref, 0, 2, 'start');
  const inflight = [2, 3, 4, 5].map((i) => infer(d, 'gqa', stepBody('drain', xs.slice(i * D, (i + 1) * D))));
  await sleep(5);
  d.proc.kill('SIGTERM');
  const got = await Promise.all(inflight.map((p) => p.catch((e) => ({ status: 0, json: { error: String(e) } }))));
  // each step either ran (200, exact, lengths 3, 4, ... without gaps) or
  // was refused as the drain began (503): never one half-applied
  const ran = got.filter((r) => r.status === 200).sort((a, b) => a.json.parameters.sequence_length - b.json.parameters.sequence_length);
  ran.forEach((r, k) => checkStep(r, ref, 2 + k, 1, `drain step ${k}`));
  for (const r of got) assert.ok([200, 503, 0].includes(r.status), JSON.stringify(r.json));
  // wait for the exit the one SIGTERM brings: stop() would send a second
  // one, which a daemon still draining (slowly, under TSan) may take as the
  // last straw (stop() then only checks the log for sanitizer reports)
  await d.exit;
  const ex = await d.stop();
  assert.equal(ex.code, 0, JSON.stringify(ex) + '\n' + d.log().slice(-3000));
});

test('a step that comes while the server drains, its sequence in the Attnd-Sequence-Id header, is told its sequence ends with it, not just to retry elsewhere (where it is unknown)', async () => {
  const d = await start({ dir: gqaModels() });
  const xs = tokens(3, 13);
  const ref = await full(d, xs);
  checkStep(await infer(d, 'gqa', stepBody('dr', xs.slice(0, 2 * D), { start: true })), ref, 0, 2, 'start');
  // a step begun before the signal (half its body sent) keeps the drain open
  const body = Buffer.from(JSON.stringify(stepBody('dr', xs.slice(2 * D))));
  const sock = net.connect(d.port, '127.0.0.1');
  const answer = new Promise((res) => { let got = ''; sock.on('data', (b) => { got += b; if (/\r\n\r\n[\s\S]*\}$/.test(got)) res(got); }); });
  sock.write(`POST /v2/models/gqa/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n`);
  sock.write(body.subarray(0, 10));
  // (its head read: its body's bytes are reserved in the memory budget)
  let held = 0;
  for (const until = Date.now() + 5000 * SLOW; held < body.length && Date.now() < until; await sleep(20))
    held = requestsUsed(await (await fetch(`${d.url}/metrics`)).text());
  assert.ok(held >= body.length, `the begun step's body reserved (${held} of ${body.length} bytes)`);
  d.proc.kill('SIGTERM');
  await d.logged(/SIGTERM: draining/);
  // a step that names its sequence in the header (as behind the proxies)
  // is refused from its head, its body never read: told the sequence ends
  const late = await infer(d, 'gqa', stepBody('dr', xs.slice(2 * D)), { 'Attnd-Sequence-Id': 'dr' });
  assert.equal(late.status, 503);
  assert.equal(late.headers.get('retry-after'), '1');
  assert.equal(late.json.error, "server: draining (shutting down); sequence 'dr' ends with it (its keys and values are memory state): begin it again on another replica with sequence_start: true and the whole history");
  // without the header (its body unread), an id not live here, a
  // stateless request: retry elsewhere, as before (a step then meets the
  // 400 of an unknown sequence there)
  for (const [b, h] of [[stepBody('dr', xs.slice(2 * D)), undefined], [stepBody('nope', xs.slice(2 * D)), { 'Attnd-Sequence-Id': 'nope' }],
    [{ inputs: stepBody('x', xs.slice(2 * D)).inputs }, undefined]])
    assert.equal((await infer(d, 'gqa', b, h)).json.error, 'server: draining (shutting down); retry on another replica');
  sock.write(body.subarray(10));
  const a = await answer;
  assert.match(a, /^HTTP\/1\.1 200/);
  checkStep({ status: 200, json: JSON.parse(a.slice(a.indexOf('\r\n\r\n') + 4)) }, ref, 2, 1, 'begun before');
  sock.destroy();
  await d.exit;
  assert.equal((await d.stop()).code, 0);
  assert.match(d.log(), /exit: 1 live sequence dropped/);
});

test('a step of a sequence never seen here is told to send the Attnd-Sequence-Id header when it came without it', async () => {
  // Behind deploy/nginx.conf a step without the header is not routed to
  // the sequence's replica: the 400 says what a proxy routes on.
  const d = await start({ dir: gqaModels() });
  try {
    const x = tokens(1, 7);
    const hint = /; behind a proxy, send the id in the Attnd-Sequence-Id header too \(this step came without it\): deploy\/nginx\.conf routes each step to the replica that holds its sequence by it$/;
    const bare = await infer(d, 'gqa', stepBody('elsewhere', x));
    assert.equal(bare.status, 400);
    assert.match(bare.json.error, /^parameters\.sequence_id: unknown sequence 'elsewhere' \(never started, .*held by another replica or a restarted server\); send sequence_start: true with the whole history to begin it again; behind a proxy/);
    assert.match(bare.json.error, hint);
    // with the header (alone or beside the body's id) there is nothing to add
    for (const body of [stepBody('elsewhere', x), { inputs: [fp32('x', [1, 1, D], x)] }]) {
      const h = await infer(d, 'gqa', body, { 'Attnd-Sequence-Id': 'elsewhere' });
      assert.equal(h.status, 400);
      assert.match(h.json.error, /send sequence_start: true with the whole history to begin it again$/);
    }
    // a sequence this server ended says how it went: it was routed here
    assert.equal((await infer(d, 'gqa', stepBody('here', x, { start: true, end: true }))).status, 200);
    const ended = await infer(d, 'gqa', stepBody('here', x));
    assert.equal(ended.status, 400);
    assert.match(ended.json.error, /unknown sequence 'here' \(ended .*to begin it again$/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a step past its deadline (504) leaves the sequence as it was', async () => {
  // A step of T = 24576 tokens (non-causal: ~39 GFLOP, more than a
  // tenth of a second on any two cores) cannot be answered within the
  // 100 ms deadline: 504 by its size, whatever the machine's speed or
  // load. Whether its deadline passes while it is decoded, queued or
  // running (a batch with a sequence step runs to its end, past the
  // 504), its sequence must stay as it was. Three small steps sent behind
  // it wait in the sequence's queue meanwhile: each 504 or 200 (as their
  // deadline falls), and only those answered 200 may have joined it.
  // (A fixed 'hold' sequence whose batch had to start within the
  // deadline, under a load of 15-20, was 504'd before it ran and the
  // test failed; one of 17 GFLOP had once ended before the steps came.)
  // (--solo-max-weights 0: gqa's weights are small enough that a stateless
  // request would run beside the busy instance, and the probe for its
  // return below would answer at once)
  const d = await start({
    dir: gqaModels(),
    args: ['--deadline-ms', String(100 * SLOW), '--instances', '1', '--solo-max-weights', '0',
      '--threads', '2'],
  });
  try {
    // token 0, then the same token r at every later position, so the
    // history is the same whichever of the small steps ran
    const x0 = tokens(1, 12), r = tokens(1, 13);
    const hist = (n) => x0.concat(...Array(n - 1).fill(r));
    // Requests other than the four under test are sent again when a
    // loaded machine makes them miss the short deadline (a 504 changed
    // nothing: a stateless request, or a step, as this test shows).
    const patient = async (body) => {
      let g;
      for (let i = 0; i < 50 && (g = await infer(d, 'gqa', body)).status === 504; i++);
      return g;
    };
    // the references first: the instance is busy later (full()'s request)
    const refs = [];
    for (let n = 2; n <= 5; n++) {
      const g = await patient({ inputs: [fp32('x', [1, n, D], hist(n))], outputs: ALL, parameters: { causal: true } });
      assert.equal(g.status, 200, JSON.stringify(g.json));
      refs[n] = { n, ...Object.fromEntries(g.json.outputs.map((o) => [o.name, o.data])) };
    }
    checkStep(await patient(stepBody('dl', x0, { start: true })), refs[2], 0, 1, 'start');
    const T = 24576;
    let bigDone = false;
    // binary (its decode a copy): it reaches its batch within the
    // deadline more often than a JSON one, even on a loaded machine
    const { body, headerLen } = binaryRequest({
      inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, D], parameters: { binary_data_size: T * D * 4 } }],
      outputs: [{ name: 'y' }],
      parameters: { sequence_id: 'dl', causal: false },
    }, [f32bytes(Array.from({ length: T * D }, (_, k) => ((k * 7919) % 200) / 100 - 1))]);
    const big = fetch(`${d.url}/v2/models/gqa/infer`, { method: 'POST', body,
      headers: { 'Inference-Header-Content-Length': String(headerLen) } })
      .then(async (res) => { bigDone = true; return { status: res.status, json: await res.json() }; });
    // the small steps go once attnd has read the big one (its decode or
    // its batch on the pool), or it was answered: they arrive after it
    const busy = async () => /^attnd_pool_jobs [1-9]/m.test(await (await fetch(`${d.url}/metrics`)).text());
    for (let i = 0; i < 4000 && !bigDone && !(await busy()); i++) await sleep(5);
    const got = await Promise.all([1, 2, 3].map(() => infer(d, 'gqa', stepBody('dl', r))));
    const b = await big;
    assert.equal(b.status, 504, JSON.stringify(b.json));
    assert.match(b.json.error, /deadline/);
    let ran = 0;
    for (const g of got) {
      assert.ok(g.status === 200 || g.status === 504, JSON.stringify(g.json));
      if (g.status === 200) ran++;
      else assert.match(g.json.error, /deadline/);
    }
    // wait for the long batch to give the instance back: the sequence
    // has no step running or queued (idle_ms > 0) and the pool is empty.
    // (Probing with tiny stateless requests until one answered 200 gave
    // up after 600 tries, 6 min under TSan on a loaded machine, before
    // the batch ended, and each probe, 504 while its decode waited behind
    // the batch on the pool, held a place in the queue: the step after
    // was 503 queue-size. A GET is answered on the loop.)
    const done = async () => (await (await fetch(`${d.url}/v2/sequences/dl`)).json()).idle_ms > 0 && !(await busy());
    for (let i = 0; i < 12000 * SLOW && !(await done()); i++) await sleep(50);
    // nothing of a timed-out step stayed: the sequence holds 1 + ran
    // tokens, and the next step is at 1 + ran
    const n = 2 + ran;
    const held = await (await fetch(`${d.url}/v2/sequences/dl`)).json();
    assert.equal(held.length, n - 1, JSON.stringify(held));
    checkStep(await patient(stepBody('dl', r)), refs[n], n - 1, 1, 'after the deadline');
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('continuous batching: steps of different sequences and stateless requests share a batch, two of one never', async () => {
  const delay = 300000 * SLOW; // us: long enough for every request below to arrive
  const d = await start({ dir: gqaModels(), args: ['--batch-delay-us', String(delay), '--max-batch', '8'] });
  try {
    const xs = tokens(4, 14);
    const stats = async () => {
      const j = await (await fetch(`${d.url}/v2/models/gqa/stats`)).json();
      return Object.fromEntries(j.model_stats[0].batch_stats.map((b) => [b.batch_size, b.compute_infer.count]));
    };
    // four sequences start together: one batch of 4
    const starts = await Promise.all(['A', 'B', 'C', 'D'].map((id) => infer(d, 'gqa', stepBody(id, xs.slice(0, D), { start: true, outputs: [{ name: 'y' }] }))));
    for (const r of starts) assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(await stats(), { 4: 1 });
    // a step of each, a second step of A and a stateless request: A's
    // second step waits for its first, the other five run as one batch
    const reqs = ['A', 'B', 'C', 'D', 'A'].map((id) => infer(d, 'gqa', stepBody(id, xs.slice(D, 2 * D), { outputs: [{ name: 'y' }] })));
    reqs.push(infer(d, 'gqa', { inputs: [fp32('x', [1, 2, D], xs.slice(0, 2 * D))] }));
    const got = await Promise.all(reqs);
    for (const r of got) assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual([got[0], got[4]].map((r) => r.json.parameters.sequence_length).sort(), [2, 3]);
    assert.deepEqual(await stats(), { 4: 1, 5: 1, 1: 1 });
  } finally { assert.equal((await d.stop()).code, 0); }
});

// README, "Batching steps": a sequence answered 200 is expected back; the
// queue waits for expected sequences (at most --sequence-wait-us and the
// last batch's run time), so lockstep clients' steps share a batch instead
// of the first one back running alone.
test('steps of sequences answered together wait for each other (sequence-wait-us), not with 0', async (t) => {
  // long prompts: the batch that answers the last start runs for ~0.1-0.5 s
  // (more under sanitizers), and b's step comes a quarter of that (or of
  // the wait's 5 s cap, if less: TSan on a busy machine ran 27 s) after
  // a's: well within the wait (that batch's run time, read from its log
  // line), far longer than a alone takes to be decoded and launched.
  //
  // The two starts, sent together, mostly run as two batches (the first one
  // decoded runs at once). The second then waits for the first's next step,
  // which this client sends only when both are answered, and as it does not
  // come, the first is no longer expected ("until answered again"). So a is
  // the step of the start answered first: it waits for the other, which is
  // expected. A step of the start answered second finds no other expected
  // and runs at once, whatever the gap: CI under UBSan saw two batches so,
  // with the wait, when wb's start happened to be decoded first.
  const P = 9000;
  const CAP_US = 5000000;
  for (const [wait, batches] of [[CAP_US, 1], [0, 2]]) {
    const d = await start({ t, dir: gqaModels(), args: ['--sequence-wait-us', String(wait), '--instances', '1'] });
    const answered = [];
    const starts = await Promise.all(['wa', 'wb'].map((id, k) =>
      infer(d, 'gqa', stepBody(id, tokens(P, 900 + k), { start: true, outputs: [{ name: 'y' }] }))
        .then((r) => { answered.push(id); return r; })));
    for (const r of starts) assert.equal(r.status, 200, JSON.stringify(r.json));
    const runs = (await d.logged(/(POST \/v2\/models\/gqa\/infer 200 [^\n]*compute_us=\d+[^]*){2}/))
      .match(/(?<=POST \/v2\/models\/gqa\/infer 200 [^\n]*compute_us=)\d+/g).map((us) => us / 1000);
    const gap = Math.min(runs.at(-1), CAP_US / 1000) / 4;
    const n0 = await metric(d, 'attnd_inference_batch_size_count');
    const a = infer(d, 'gqa', stepBody(answered[0], tokens(1, 910), { outputs: [{ name: 'y' }] }));
    await sleep(gap);
    const b = infer(d, 'gqa', stepBody(answered[1], tokens(1, 911), { outputs: [{ name: 'y' }] }));
    for (const r of await Promise.all([a, b])) {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json.parameters.sequence_length, P + 1);
    }
    assert.equal(await metric(d, 'attnd_inference_batch_size_count') - n0, batches,
      `--sequence-wait-us ${wait}: the two steps ran in ${batches === 1 ? 'one batch' : 'two batches'} ` +
      `(the starts ran ${runs.map((ms) => ms.toFixed(0)).join(' and ')} ms, answered ${answered}; ` +
      `${answered[1]}'s step came ${gap.toFixed(0)} ms after ${answered[0]}'s)`);
    await d.stop();
  }
});
