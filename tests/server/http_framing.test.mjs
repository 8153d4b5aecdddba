// http_framing.test.mjs - how a request's bytes are framed, and what a
// client that frames them two ways, or in ways libmicrohttpd reads
// loosely, must not get through: a body's length given twice, white space
// or a bare CR in a header, codings other than chunked alone (each 400, the
// connection closed, no smuggled request run); Expect: 100-continue with a
// pipelined request; lines that end in a bare LF. (Split out of
// hardening.test.mjs, which has the rest of issue 11's hostile clients.)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { start, untilClosed } from './helper.mjs';

// UNLOAD: a request that unloads tiny, sent behind one that should end
// its connection: it must not run
const UNLOAD = 'POST /v2/repository/models/tiny/unload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n';

/** refused(d, text, want, what): text then UNLOAD on one connection get
 * one answer, and the connection closes: 404 for a null want (answered by
 * its route), else 400 with want in it (a string: its JSON error; a
 * RegExp: matched in the answer); tiny is still served. The answer. */
async function refused(d, text, want, what = JSON.stringify(text.split('\r\n\r\n')[0])) {
  const got = await untilClosed(d.port, text + UNLOAD).catch((e) => assert.fail(`${what}: ${e.message}`));
  assert.equal((got.match(/HTTP\/1\.1 \d{3}/g) || []).length, 1, `${what}: ${got}`);
  assert.match(got, /\r\nConnection: close\r\n/i, what);
  assert.match(got, want ? /^HTTP\/1\.1 400 / : /^HTTP\/1\.1 404 /, `${what}: ${got}`);
  if (typeof want === 'string') assert.equal(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4)).error, want, what);
  else if (want) assert.match(got, want, what);
  assert.equal((await fetch(`${d.url}/v2/models/tiny/ready`)).status, 200, `${what}: the smuggled unload ran`);
  return got;
}

test('a body framed two ways (two Content-Lengths, or one beside Transfer-Encoding) is 400 and the connection closes: no smuggled request runs', async () => {
  const d = await start();
  try {
    // what follows the first length's body would be read as a second
    // request: an unload of tiny
    const twice = /the body's length is given (more than once|twice); send one Content-Length or Transfer-Encoding: chunked/;
    await refused(d, `POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: ${2 + UNLOAD.length}\r\n\r\n{}`, twice);
    await refused(d, 'POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}', twice);
    await refused(d, 'POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n', twice);
    // answered by its route (404), and closed all the same
    await refused(d, 'POST /no/such/route HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n', null);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a header field name with white space before its colon (or in it) is 400 and the connection closes: no smuggled request runs', async () => {
  // review: libmicrohttpd kept 'Transfer-Encoding ' (its space) as another
  // name, so the body was framed by Content-Length alone, where a proxy in
  // front that trims the space frames it chunked (RFC 9112 5.1: a server
  // must answer 400); 'Content-Length : 2' left the body to be read as the
  // next request
  const d = await start();
  try {
    for (const [text, name] of [
      [`POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: ${5 + UNLOAD.length}\r\n\r\n0\r\n\r\n`, 'Transfer-Encoding '],
      [`POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length : ${UNLOAD.length}\r\n\r\n`, 'Content-Length '],
      ['GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX\tY: 1\r\n\r\n', 'X\tY'],
      // answered by its route (404), and closed all the same
      [`POST /no/such/route HTTP/1.1\r\nHost: x\r\nContent-Length : ${UNLOAD.length}\r\n\r\n`, null]]) {
      await refused(d, text, name && `header: field name '${name}' is not a token (white space before its colon, ` +
        'or in it: RFC 9112 5.1); the request cannot be framed safely');
    }
    // a plain header still passes
    assert.equal((await fetch(`${d.url}/v2/health/live`, { headers: { 'x-a_b.c~1': 'v' } })).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a bare CR in a header value is 400 and the connection closes: no smuggled request runs', async () => {
  // libmicrohttpd 0.9.75 ends a line at CR LF or a bare LF, and keeps a
  // bare CR in the value: "Host: x<CR>Content-Length: n" had no
  // Content-Length, so the body ran as the next request, where a proxy in
  // front that ends lines at the CR forwards it as the body (RFC 9112 2.2:
  // such an element is invalid, or its CR is read as a space)
  const d = await start();
  try {
    for (const [text, name] of [
      [`POST /v2/repository/index HTTP/1.1\r\nHost: x\rContent-Length: ${UNLOAD.length}\r\n\r\n`, 'Host'],
      ['GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-A: a\r\r\n\r\n', 'X-A'],
      // answered by its route (404), and closed all the same
      ['GET /no/such/route HTTP/1.1\r\nHost: x\rY: 1\r\n\r\n', null]]) {
      await refused(d, text, name && `header: the value of '${name}' ` +
        'holds a bare CR (a line ends in CR LF: RFC 9112 2.2); the request cannot be framed safely');
    }
    // a folded line (obs-fold: CR LF then a space) holds no bare CR
    const folded = await untilClosed(d.port, 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n' +
      'Connection: close\r\n\r\n');
    assert.match(folded, /^HTTP\/1\.1 200 /, folded);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a Transfer-Encoding other than chunked alone is 400 and the connection closes, not a request read until the client goes', async () => {
  const d = await start();
  try {
    // libmicrohttpd reads such a body until the connection closes: no
    // answer would ever come (RFC 9112 6.3: 400, then close)
    for (const te of ['gzip', 'gzip, chunked', 'chunked, gzip', 'identity', 'chunked ', 'chunked;q=1', '']) {
      for (const body of ['2\r\n{}\r\n0\r\n\r\n', '{}']) {
        await refused(d, `POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ${te}\r\n\r\n${body}`,
          /is not chunked; send one Content-Length or Transfer-Encoding: chunked/, `Transfer-Encoding: '${te}', body ${JSON.stringify(body)}`);
      }
    }
    const ok = await untilClosed(d.port, 'POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n');
    assert.match(ok, /^HTTP\/1\.1 200 /, 'chunked, in any case, is served');
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('chunked more than once (two Transfer-Encoding lines, or "chunked, chunked") or beside another coding is 400 and the connection closes', async () => {
  const d = await start();
  try {
    // RFC 9112 6.1: chunked is applied at most once, and two lines are one
    // list. libmicrohttpd looks at the first line only: two "chunked" lines
    // (or "chunked" then "gzip") were served, the body decoded once
    const once = '2\r\n{}\r\n0\r\n\r\n';
    const twice = `${once.length.toString(16)}\r\n${once}\r\n0\r\n\r\n`;
    const cases = [
      [['chunked', 'chunked'], /'chunked, chunked' \(its lines joined\) applies chunked more than once, which cannot be decoded/],
      [['Chunked', 'chunked'], /'Chunked, chunked' \(its lines joined\) applies chunked more than once/],
      [['chunked, chunked'], /'chunked, chunked' applies chunked more than once/],
      [['chunked', 'gzip'], /'chunked, gzip' \(its lines joined\) is not chunked/],
      [['gzip', 'chunked'], /'gzip, chunked' \(its lines joined\) is not chunked/],
    ];
    for (const [lines, re] of cases) {
      for (const body of [once, twice]) {
        const what = `${lines.map((l) => `Transfer-Encoding: ${l}`).join(' / ')}, body chunked ${body === once ? 'once' : 'twice'}`;
        const te = lines.map((l) => `Transfer-Encoding: ${l}\r\n`).join('');
        const got = await refused(d, `POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n${te}\r\n${body}`, re, what);
        assert.match(got, /send one Content-Length or Transfer-Encoding: chunked/, what);
      }
    }
    // one chunked line: served, and the connection goes on to the next request
    const ok = await untilClosed(d.port, `POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${once}` +
      'GET /v2/models/tiny/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.deepEqual(ok.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 200', 'HTTP/1.1 200'], ok);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a request with Expect: 100-continue and no body, the next one pipelined behind it: both answered', async () => {
  // libmicrohttpd 0.9.75 sends 100 Continue, then calls with the next
  // request in upload and 0 bytes; taken for the last call, the request
  // was carried out (an unload) and its connection closed, unanswered
  const d = await start({ args: ['--api-key', 'k'] });
  try {
    const next = 'GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    for (const [req, status] of [['GET /v2/health/live', 200], ['GET /v2/nope', 404],
      ['DELETE /v2/sequences/none HTTP/1.1\r\nAuthorization: Bearer k', 404], ['POST /v2/repository/models/tiny/unload', 401],
      ['POST /v2/repository/models/tiny/unload HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: 0', 200]]) {
      const line = req.includes('\r\n') ? req : `${req} HTTP/1.1`;
      const c = await untilClosed(d.port, `${line}\r\nHost: x\r\nExpect: 100-continue\r\n\r\n${next}`);
      const finals = c.match(/HTTP\/1\.1 [2-5]\d\d /g) || [];
      assert.deepEqual(finals, [`HTTP/1.1 ${status} `, 'HTTP/1.1 200 '], `${req}: ${c}`);
    }
    assert.doesNotMatch(d.log(), /internal error/, 'libmicrohttpd closed a connection');
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('lines that end in a bare LF are read as lines: answered at once, the connection kept, a pipelined request too', async () => {
  // RFC 9112 2.2 lets a recipient take a bare LF for a line's end;
  // libmicrohttpd 0.9.75 does (a request so sent was thought to wait for
  // header-timeout: its answer came at once, on a connection kept open,
  // which a client reading to the close waits out). Pinned here: a later
  // libmicrohttpd that waits for CR LF would hang such clients.
  const d = await start({ args: ['--header-timeout', '30'] });
  try {
    // (untilClosed fails past 5 s: header-timeout is 30)
    const c = await untilClosed(d.port, 'GET /v2/health/ready HTTP/1.1\nHost: x\n\n' +
      'POST /v2/repository/index HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}' +
      'POST /v2/repository/index HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\nConnection: close\n\n2\n{}\n0\n\n');
    assert.deepEqual(c.match(/HTTP\/1\.1 \d\d\d /g), ['HTTP/1.1 200 ', 'HTTP/1.1 200 ', 'HTTP/1.1 200 '], c);
  } finally { assert.equal((await d.stop()).code, 0); }
});
