// conn_memory.test.mjs - what a REST connection holds before its request
// is counted: its own state (libmicrohttpd's 32 KiB pool, allocated whole
// at the accept) counts against --memory-budget from accept to close, and
// one that finds no room is answered 503 at once (README's memory budget),
// lingering in at most half the slots other closes linger in.
import assert from 'node:assert/strict';
import http from 'node:http';
import { connect } from 'node:net';
import { test } from 'node:test';
import { REST_CONN_COST, SLOW, start } from './helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function open(port) {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: '127.0.0.1' });
    s.on('connect', () => resolve(s));
    s.on('error', reject);
  });
}

/** ask(sock, path): one GET on an open keep-alive socket; its answer's
 * status and text (the head and a Content-Length body). */
function ask(sock, path, ms = 3000 * SLOW) {
  return new Promise((resolve, reject) => {
    let buf = '';
    const done = (err) => {
      clearTimeout(t);
      sock.off('data', data);
      sock.off('end', done);
      if (err) return reject(err);
      const m = /^HTTP\/1\.1 (\d+)/.exec(buf);
      resolve({ status: m ? Number(m[1]) : 0, text: buf });
    };
    const data = (d) => {
      buf += d;
      const h = buf.indexOf('\r\n\r\n');
      const cl = /content-length: (\d+)/i.exec(buf);
      if (h >= 0 && cl && buf.length >= h + 4 + Number(cl[1])) done();
    };
    const t = setTimeout(() => done(new Error(`no answer within ${ms} ms to GET ${path}`)), ms);
    sock.on('data', data);
    sock.on('end', done);
    sock.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
  });
}

const gauge = (m, n) => Number(new RegExp(`^${n} (\\d+)$`, 'm').exec(m)?.[1]);

/** fill(d, held): connections to d, each asked once, pushed on held until
 * one is refused; that one's answer (its socket closed). */
async function fill(d, held) {
  for (;;) {
    const s = await open(d.port);
    const r = await ask(s, '/v2/health/live');
    if (r.status !== 200) {
      s.destroy();
      return r;
    }
    held.push(s);
    assert.ok(held.length <= 8, 'more connections taken than the budget and its two past it hold');
  }
}

test('a REST connection holds 36 KiB of --memory-budget from its accept to its close, up to two connections past a full budget; one that finds no room is answered 503 at once, counted and logged; a body never takes those two', async (t) => {
  // the least budget: 100000 + 128 KiB holds 6 connections (6 x 36864 =
  // 221184 of 231072), none of them with a body, and connections may go
  // two past it (SRV_HTTP_CONN_RESERVE, for a health probe while requests
  // fill the budget): 8 x 36864 = 294912 <= 231072 + 73728
  const d = await start({ t, args: ['--memory-budget', '231072', '--max-body', '100000', '--max-json-body', '100000',
    '--request-memory', '100000', '--max-connections-per-ip', '0'] });
  const held = [];
  try {
    // connections until one is refused: eight fit, less any the helper's
    // own fetch still keeps open
    const r = await fill(d, held);
    // the one that found no room: 503 before its request is read, not served
    assert.equal(r.status, 503, r.text);
    assert.match(r.text, /\r\nretry-after: 1\r\n/i);
    assert.match(r.text, /\r\nconnection: close\r\n/i);
    assert.match(r.text, /\{"error": "server: the memory for request bodies, connections and unsent answers \(memory-budget\) is in use; this connection was not taken; retry shortly"\}$/);
    let m = (await ask(held[0], '/metrics')).text;
    assert.equal(gauge(m, 'attnd_http_open_connections'), 8, m.slice(-1500));
    assert.ok(held.length >= 7, `${held.length} connections taken`);
    assert.equal(gauge(m, 'attnd_memory_budget_used_bytes'), 8 * REST_CONN_COST, 'eight connections, nothing else');
    assert.equal(gauge(m, 'attnd_http_connections_refused_total'), 1);
    assert.match(await d.logged(/answered 503 at accept/), /http: 1 connection answered 503 at accept since the last such line: the memory for request bodies, connections and unsent answers \(231072 bytes, memory-budget\) is in use/);
    // the budget past full by connections: a request's body gets 503, as
    // it would with the budget full of bodies (the two past it are
    // connections' only); its connection closes with that answer
    const body = '{"inputs": []}';
    const refused = await new Promise((resolve) => {
      let buf = '';
      const s = held.pop();
      s.on('data', (c) => { buf += c; });
      s.on('close', () => resolve(buf));
      s.write(`POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
    assert.match(refused, /^HTTP\/1\.1 503 /, refused);
    assert.match(refused, /memory-budget/);
    // one closed gives its share back: a new connection is served (the
    // one refused its body above is closed too: 6 remain)
    held.pop().destroy();
    // (100 x 20 ms times SLOW: a bound for a hang, not a speed)
    for (let i = 0; i < 100 * SLOW && gauge(m, 'attnd_http_open_connections') !== 6; i++) {
      await sleep(20);
      m = (await ask(held[0], '/metrics')).text;
    }
    assert.equal(gauge(m, 'attnd_memory_budget_used_bytes'), 6 * REST_CONN_COST, m.slice(-1500));
    const next = await open(d.port);
    assert.equal((await ask(next, '/v2/health/live')).status, 200);
    next.destroy();
    // the others gone: their shares given back (the helper's own
    // keep-alive fetch may still hold one beside held[0])
    for (const s of held.splice(1)) s.destroy();
    for (let i = 0; i < 100 * SLOW && !(gauge(m, 'attnd_http_open_connections') <= 2); i++) {
      await sleep(20);
      m = (await ask(held[0], '/metrics')).text;
    }
    assert.ok(gauge(m, 'attnd_http_open_connections') <= 2, m.slice(-1500));
    assert.equal(gauge(m, 'attnd_memory_budget_used_bytes'), REST_CONN_COST * gauge(m, 'attnd_http_open_connections'));
  } finally {
    for (const s of held) s.destroy();
  }
  assert.equal((await d.stop()).code, 0);
});

// The 503 at accept is made at start (the request is not read): without
// CORS headers a page of another origin saw a CORS failure, not the 503.
// It carries them when one value serves every origin it goes to: "*", or
// the list's only entry; with several (and no "*") it cannot know which.
test('the 503 at accept carries CORS headers when --cors-origins lets it name one origin: "*" or its only entry; with several, none', async (t) => {
  for (const [list, acao] of [['*', '*'], ['http://page.example', 'http://page.example'],
    ['http://a.example, http://b.example', null], ['', null]]) {
    const d = await start({ t, args: ['--memory-budget', '231072', '--max-body', '100000', '--max-json-body', '100000',
      '--request-memory', '100000', '--max-connections-per-ip', '0', '--cors-origins', list] });
    const held = [];
    let r;
    try {
      r = await fill(d, held);
    } finally {
      for (const s of held) s.destroy();
    }
    assert.equal(r.status, 503, r.text);
    const h = r.text.slice(0, r.text.indexOf('\r\n\r\n') + 2);
    if (acao) {
      assert.match(h, new RegExp(`\r\nAccess-Control-Allow-Origin: ${acao.replace('*', '\\*')}\r\n`), `${list}: ${h}`);
      assert.match(h, /\r\nAccess-Control-Expose-Headers: Retry-After\r\n/, h);
    } else {
      assert.doesNotMatch(h, /Access-Control-/i, `${list}: ${h}`);
    }
    if (list) assert.match(h, /\r\nVary: Origin\r\n/, h);
    else assert.doesNotMatch(h, /\r\nVary:/i, h);
    assert.match(r.text, /\r\nretry-after: 1\r\n[^]*\r\n\r\n\{"error": "server: the memory for request bodies, connections and unsent answers \(memory-budget\) is in use; this connection was not taken; retry shortly"\}$/i);
    assert.equal((await d.stop()).code, 0);
  }
});

// A connection refused 503 at accept lingers as other closes do; a flood
// of them held every lingering slot (--max-connections), so a legitimate
// client's 413 from the head was closed at once, its unread body making
// the kernel send a reset: node:http, which reads its answer once its
// body is sent, got EPIPE, not the 413. They now take half the slots.
test('connections refused 503 at accept take at most half the lingering slots: a flood of them leaves room for a 413 from the head, which its client reads', async (t) => {
  const d = await start({ t, args: ['--memory-budget', '231072', '--max-body', '100000', '--max-json-body', '100000',
    '--request-memory', '100000', '--max-connections-per-ip', '0', '--max-connections', '8'] });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const get = (path) => new Promise((resolve, reject) => http.get({ host: '127.0.0.1', port: d.port, path, agent }, (r) => {
    let b = '';
    r.on('data', (c) => { b += c; });
    r.on('end', () => resolve(b));
  }).on('error', reject));
  const held = [];
  try {
    await get('/v2/health/live'); // the legitimate client's connection, kept
    assert.equal((await fill(d, held)).status, 503);
    // 20 more, each refused and kept open by its client: they linger
    for (let i = 0; i < 20; i++) {
      const s = await open(d.port);
      s.on('error', () => {});
      s.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n');
      held.push(s);
    }
    let m = '';
    for (let i = 0; i < 100 * SLOW && !(gauge(m, 'attnd_http_connections_refused_total') >= 21); i++) {
      await sleep(20);
      m = await get('/metrics');
    }
    assert.equal(gauge(m, 'attnd_http_connections_refused_total'), 21, m.slice(-1500));
    // (fill's own refused one may have held a slot while they came)
    const lingering = gauge(m, 'attnd_lingering_connections');
    assert.ok(lingering >= 3 && lingering <= 4, `${lingering} lingering: at most half of max-connections 8`);
    // an 8 MiB body over --max-body on the kept connection: 413 from its
    // head, the connection closed lingering while the body still comes
    const r = await new Promise((resolve) => {
      const req = http.request({ host: '127.0.0.1', port: d.port, method: 'POST', path: '/v2/models/sdpa/infer', agent,
        headers: { 'content-type': 'application/json', 'content-length': 8 << 20 } }, (res) => {
        let b = '';
        res.on('data', (c) => { b += c; });
        res.on('end', () => resolve(`${res.statusCode} ${b}`));
      });
      req.on('error', (e) => resolve(`error ${e.code}`));
      const chunk = Buffer.alloc(65536, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 8 << 20) {
          sent += chunk.length;
          if (!req.write(chunk)) return void req.once('drain', pump);
        }
        req.end();
      };
      pump();
    });
    assert.match(r, /^413 \{"error":"Content-Length: 8388608 bytes is over the limit/, r);
  } finally {
    for (const s of held) s.destroy();
    agent.destroy();
  }
  assert.equal((await d.stop()).code, 0);
});

test('a head that never completes a line (bare CRs) is answered 414 once it fills libmicrohttpd\'s pool, and below that closed at header-timeout as a silent connection is', async (t) => {
  const d = await start({ t, args: ['--header-timeout', '1'] });
  // 40000 bare CRs: past the 32 KiB pool at once
  const a = await open(d.port);
  const got = await new Promise((resolve) => {
    let buf = '';
    a.on('data', (c) => { buf += c; });
    a.on('close', () => resolve(buf));
    a.on('error', () => resolve(buf));
    a.write('\r'.repeat(40000));
  });
  assert.match(got, /^HTTP\/1\.1 414 /);
  // 100 of them: held until header-timeout (1 s), then closed, unanswered
  const b = await open(d.port);
  const t0 = Date.now();
  const closed = new Promise((resolve) => { b.on('close', resolve); b.on('error', resolve); b.resume(); });
  b.write('\r'.repeat(100));
  await closed;
  const dt = Date.now() - t0;
  assert.ok(dt >= 900, `closed after ${dt} ms, before header-timeout`);
  assert.match(await d.logged(/header-timeout/), /http: closed 1 connection whose request head did not arrive within 1 s \(header-timeout\)/);
  assert.equal((await d.stop()).code, 0);
});
