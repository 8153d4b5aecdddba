// seq_headers.test.mjs - a sequence's id as a hostile or careless client
// or proxy sends it: two Attnd-Sequence-Id lines, white space around its
// value, a path whose id no sequence can have. A proxy routes a
// sequence's steps on the header (README, "Sequences across replicas"),
// so attnd must not read a sequence out of it that the proxy did not
// route on.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { start } from './helper.mjs';
import { gqaModels, metric, stepBody, tokens } from './seq_helper.mjs';

/** raw(d, head, body): a request sent as it is (node's clients join or
 * refuse repeated header lines), its answer's status line and body. */
function raw(d, head, body = '') {
  return new Promise((res, rej) => {
    const c = connect(d.port, '127.0.0.1');
    let got = '';
    c.on('data', (b) => { got += b; });
    c.on('error', rej);
    c.on('close', () => res({ status: Number(got.slice(9, 12)), body: got.slice(got.indexOf('\r\n\r\n') + 4), got }));
    c.write(`${head}Host: x\r\nConnection: close\r\n${body ? `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` : ''}\r\n${body}`);
  });
}

test('two Attnd-Sequence-Id lines are refused (400) on a step, GET and DELETE /v2/sequences/{id}, whichever matches: nothing is stepped or deleted', async () => {
  // before: libmicrohttpd's first line was the id (a step of 'a' ran, GET
  // answered 'a', DELETE deleted it) while nginx (1.23 and later) joins
  // the lines ('a, b') into the value it hashes to pick a replica
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(2, 5);
    const begun = await raw(d, 'POST /v2/models/gqa/infer HTTP/1.1\r\n', JSON.stringify(stepBody('a', xs.slice(0, 16), { start: true })));
    assert.equal(begun.status, 200, begun.got.slice(0, 300));
    const step = JSON.stringify(stepBody('a', xs.slice(16, 32)));
    for (const lines of [['a', 'b'], ['b', 'a'], ['a', 'a']]) {
      const hdr = lines.map((v) => `Attnd-Sequence-Id: ${v}\r\n`).join('');
      const s = await raw(d, `POST /v2/models/gqa/infer HTTP/1.1\r\n${hdr}`, step);
      assert.equal(s.status, 400, `step with ${lines}: ${s.got.slice(0, 300)}`);
      assert.equal(JSON.parse(s.body).error, `Attnd-Sequence-Id: sent 2 times ('${lines.join(', ')}'); send one`);
      for (const m of ['GET', 'DELETE']) {
        const r = await raw(d, `${m} /v2/sequences/a HTTP/1.1\r\n${hdr}`);
        assert.equal(r.status, 400, `${m} with ${lines}: ${r.got.slice(0, 300)}`);
        assert.match(JSON.parse(r.body).error, /^Attnd-Sequence-Id: sent 2 times/);
      }
    }
    // 'a' is as its start left it: one token, live
    const a = await raw(d, 'GET /v2/sequences/a HTTP/1.1\r\nAttnd-Sequence-Id: a\r\n');
    assert.equal(a.status, 200, a.got);
    assert.equal(JSON.parse(a.body).length, 1);
    assert.equal(await metric(d, 'attnd_sequences_live'), 1);
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});

test('white space after the Attnd-Sequence-Id header\'s value is not part of the id (RFC 9110 5.5): a step, GET and DELETE take it', async () => {
  // before: libmicrohttpd 0.9.75 keeps it (it drops what comes before the
  // value), and 'a ' was no id: the step was 400 'is not a sequence id',
  // GET and DELETE 400 'header 'a ' and the path's sequence 'a' differ'
  const d = await start({ dir: gqaModels() });
  try {
    const xs = tokens(3, 6);
    const begun = await raw(d, 'POST /v2/models/gqa/infer HTTP/1.1\r\nAttnd-Sequence-Id: a \t \r\n',
      JSON.stringify(stepBody('a', xs.slice(0, 16), { start: true })));
    assert.equal(begun.status, 200, begun.got.slice(0, 300));
    const s = await raw(d, 'POST /v2/models/gqa/infer HTTP/1.1\r\nAttnd-Sequence-Id: a\t\r\n',
      JSON.stringify({ ...stepBody('a', xs.slice(16, 32)), parameters: {} }));
    assert.equal(s.status, 200, s.got.slice(0, 300));
    assert.equal(JSON.parse(s.body).parameters.sequence_length, 2, 'the header alone stepped a');
    const g = await raw(d, 'GET /v2/sequences/a HTTP/1.1\r\nAttnd-Sequence-Id: a  \r\n');
    assert.equal(g.status, 200, g.got.slice(0, 300));
    assert.equal(JSON.parse(g.body).length, 2);
    const del = await raw(d, 'DELETE /v2/sequences/a HTTP/1.1\r\nAttnd-Sequence-Id: a \r\n');
    assert.equal(del.status, 200, del.got.slice(0, 300));
    assert.equal(await metric(d, 'attnd_sequences_live'), 0);
    // white space inside it is still no id
    const bad = await raw(d, 'POST /v2/models/gqa/infer HTTP/1.1\r\nAttnd-Sequence-Id: a b \r\n',
      JSON.stringify(stepBody('a', xs.slice(0, 16), { start: true })));
    assert.equal(bad.status, 400);
    assert.equal(JSON.parse(bad.body).error, 'Attnd-Sequence-Id: \'a b\' is not a sequence id (1 to 128 bytes of printable ASCII other than space, \'/\', \'"\' and \'\\\')');
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});

test('GET and DELETE /v2/sequences/{id} with an id no sequence can have (a space, a byte past ASCII, 129 bytes) are 400 saying so, not 404 \'unknown sequence\'', async () => {
  // before: 404 "unknown sequence 'a b' (never started, ended, idle past
  // sequence-idle-ms, deleted, ...)": a client that built the path wrong
  // was told its sequence may have gone, and to start it again
  const d = await start({ dir: gqaModels() });
  try {
    for (const id of ['a b', 'é', 'a'.repeat(129), 'a"b', 'a\\b', '\u0001']) {
      for (const method of ['GET', 'DELETE']) {
        const r = await fetch(`${d.url}/v2/sequences/${encodeURIComponent(id)}`, { method });
        const body = await r.json();
        assert.equal(r.status, 400, `${method} ${JSON.stringify(id)}: ${body.error}`);
        assert.equal(body.error, `path: '${id}' is not a sequence id (1 to 128 bytes of printable ASCII other than space, '/', '"' and '\\')`);
      }
    }
    // an id that could be one is still 404 when it is not live
    for (const id of ['zz', 'a'.repeat(128), '0', '%']) {
      const r = await fetch(`${d.url}/v2/sequences/${encodeURIComponent(id)}`);
      assert.equal(r.status, 404, id);
      assert.match((await r.json()).error, /^unknown sequence /);
    }
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});
