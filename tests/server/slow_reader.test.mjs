// A REST client reading a large answer slowly. header-timeout is the time
// a client gets to send its next request head once it has its previous
// answer: not a bound on how long it takes to read that answer. attnd
// hands an answer to the kernel (libmicrohttpd's request is complete) long
// before a slow client has read it; the guard's clock started there, so it
// closed (shutdown both ways) the connection of a client still reading,
// and a request the client pipelined as it read met a closed socket: the
// kernel's reset dropped the answer's tail. A client that stops reading is
// still closed, header-timeout after it last read anything.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { NEXT, SLOW, answers, jsonLen, restAttention, start } from './helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const T = 600; // a 600 x 600 FP32 map: 1.44 MB, all of it in the kernels at once

/** reader(d): a raw client, paused: it reads only what take(n) asks. */
function reader(t, d) {
  const sock = net.connect({ port: d.port, host: '127.0.0.1', allowHalfOpen: true, readableHighWaterMark: 16384 });
  const chunks = [];
  let error = null, ended = false;
  sock.on('error', (e) => { error = e.code || e.message; });
  sock.on('end', () => { ended = true; });
  t.after(() => sock.destroy());
  const closed = new Promise((res) => sock.on('close', () => res(error)));
  return {
    sock, chunks, closed,
    got: () => chunks.reduce((n, c) => n + c.length, 0),
    ended: () => ended,
    error: () => error,
    take(n) { // up to n bytes of what has come (at its end: 'end')
      let c;
      if (!sock.readableLength) sock.read(0);
      while (n > 0 && sock.readableLength && (c = sock.read(Math.min(n, sock.readableLength))) !== null) {
        chunks.push(c);
        n -= c.length;
      }
    },
  };
}

test('REST: a client reading its large answer at a slow, steady pace for longer than header-timeout, pipelining its next request as it reads, gets the answer whole and the next one: the connection is not closed under it', async (t) => {
  // before: the guard closed the connection 2 s after libmicrohttpd had
  // handed the whole answer to the kernel; the request pipelined after
  // that met a closed socket, and the kernel's reset dropped the answer's
  // tail (the connection was reset, ECONNRESET, part of the answer read)
  await pipelined(t, ['--header-timeout', '2']);
});

test('REST: the same slow reader is not cut by connection-timeout either: libmicrohttpd\'s, counted from its last write, restarts as the client reads', async (t) => {
  // before: libmicrohttpd closed the connection 2 s after it had written
  // the last of the answer to the kernel (the socket lingered: the
  // answer came whole, the pipelined request was read and dropped,
  // unanswered: one answer of two, then the end)
  await pipelined(t, ['--header-timeout', '10', '--connection-timeout', '2']);
});

/** pipelined(t, args): a client reads the answer at a slow, steady pace,
 * pipelines its next request at 3/4 of it, and gets both whole. */
async function pipelined(t, args) {
  const d = await start({ t, args });
  const c = reader(t, d);
  c.sock.write(restAttention(T));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  // 32 KB every 100 ms: ~4.5 s for the 1.44 MB, twice header-timeout (a
  // pace, not a measure: the test asserts no speed; a stall of this
  // client under load shorter than header-timeout is no harm)
  let sent = false;
  const until = Date.now() + 60000 * SLOW; // a hang's bound
  while (Date.now() < until && !c.ended() && !c.error() && answers(Buffer.concat(c.chunks)).all.length < 2) {
    await sleep(100);
    c.take(32768);
    if (!sent && c.got() > (T * T * 4) * 3 / 4) { // 3/4 of it: the next request
      c.sock.write(NEXT);
      sent = true;
    }
    if (sent && answers(Buffer.concat(c.chunks)).all.length >= 1) c.take(1 << 20);
  }
  const got = answers(Buffer.concat(c.chunks));
  assert.equal(c.error(), null, `no reset: ${c.got()} bytes came`);
  assert.equal(got.all.length, 2, `answers: ${got.all.map((a) => a.head.split('\r\n')[0])}, ${got.rest} bytes past them, ended ${c.ended()}\n${d.log().slice(-600)}`);
  assert.match(got.all[0].head, /^HTTP\/1\.1 200/);
  assert.equal(got.all[0].body.length - jsonLen(got.all[0].head), T * T * 4, 'the answer came whole');
  assert.match(got.all[1].head, /^HTTP\/1\.1 200/);
  assert.equal(JSON.parse(got.all[1].body).name, 'sdpa');
  assert.doesNotMatch(d.log(), /header-timeout/);
  await d.stop();
}

test('REST: a client that reads its large answer slowly and then sends its next request on the connection (keep-alive) has it answered: header-timeout counts from when the answer was read', async (t) => {
  // before: closed 2 s after the answer was handed to the kernel, the
  // client still reading it; its next request got no answer
  const d = await start({ t, args: ['--header-timeout', '2'] });
  const c = reader(t, d);
  c.sock.write(restAttention(T));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  const until = Date.now() + 60000 * SLOW; // a hang's bound
  while (Date.now() < until && !c.ended() && !c.error() && answers(Buffer.concat(c.chunks)).all.length < 1) {
    await sleep(100);
    c.take(32768);
  }
  assert.equal(c.ended(), false, `the connection stayed open: ${c.got()} bytes came`);
  c.sock.write(NEXT);
  while (Date.now() < until && !c.ended() && !c.error() && answers(Buffer.concat(c.chunks)).all.length < 2) {
    await sleep(20);
    c.take(1 << 20);
  }
  const got = answers(Buffer.concat(c.chunks));
  assert.equal(c.error(), null, 'no reset');
  assert.equal(got.all.length, 2, `answers: ${got.all.map((a) => a.head.split('\r\n')[0])}\n${d.log().slice(-600)}`);
  assert.equal(got.all[0].body.length - jsonLen(got.all[0].head), T * T * 4, 'the answer came whole');
  assert.match(got.all[1].head, /^HTTP\/1\.1 200/);
  await d.stop();
});

test('REST: a client that stops reading its answer is closed header-timeout after it last read any of it (the bound: it holds no connection for ever)', { timeout: 60000 * SLOW }, async (t) => {
  const d = await start({ t, args: ['--header-timeout', '1'] });
  const c = reader(t, d);
  c.sock.write(restAttention(T));
  assert.match(await d.logged(/infer 200/), /infer 200/);
  // a little of it, then nothing
  while (c.got() === 0 && !c.ended()) {
    await sleep(50);
    c.take(16384);
  }
  assert.match(await d.logged(/header-timeout/, 10000 * SLOW),
    /http: closed 1 connection whose client read none of its answer for 1 s \(header-timeout\)/);
  // what it does read after that still comes, then the end
  c.sock.on('end', () => c.sock.end());
  c.sock.on('data', (x) => c.chunks.push(x));
  c.sock.resume();
  assert.equal(await c.closed, null, 'an end, not a reset');
  assert.ok(c.ended());
  const got = answers(Buffer.concat(c.chunks));
  assert.equal(got.all.length, 1, `${c.got()} bytes came`);
  assert.equal(got.all[0].body.length - jsonLen(got.all[0].head), T * T * 4, 'what the kernel held came whole');
  await d.stop();
});
