// slow_clients.mjs - a worker thread (node:worker_threads) of slow clients
// for hardening.test.mjs: n of them on 127.0.0.1:port (workerData {port,
// n}), from 40 source addresses (n/40 each: under max-connections-per-ip,
// 64). Each sends a request head's first line and then a header byte every
// 2 s, and reconnects 20 ms after it is closed. It posts {opened}
// (connections made so far) every 50 ms, and on any message from the test
// closes every connection and exits.
//
// A thread of their own: in the test's own thread, thousands of
// reconnections a second (a server that evicts as fast as they come) delay
// the legitimate client's writes by 100 ms and more, so that its connection,
// accepted with no request in it yet, is the one waiting longest: the
// harness, not the server, would lock it out.
import { connect } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';

const { port, n } = workerData;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const socks = new Set();
let stop = false;
let opened = 0;

function open(opts) {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: '127.0.0.1', ...opts });
    s.on('connect', () => resolve(s));
    s.on('error', reject);
  });
}

function closed(s) {
  return new Promise((resolve) => {
    if (s.destroyed || s.readableEnded) return resolve();
    s.on('close', resolve);
    s.on('end', resolve);
    s.on('error', resolve);
  });
}

async function client(i) {
  while (!stop) {
    const s = await open({ localAddress: `127.0.1.${1 + (i % 40)}` }).catch(() => null);
    if (!s) { await sleep(50); continue; }
    // connected after the end below destroyed the others: nobody would
    // close it before header-timeout
    if (stop) { s.destroy(); break; }
    opened++;
    socks.add(s);
    s.on('error', () => {});
    s.write('GET /v2/health/live HTTP/1.1\r\nX-Slow: ');
    const t = setInterval(() => { if (!s.destroyed) s.write('a'); }, 2000);
    await closed(s);
    clearInterval(t);
    socks.delete(s);
    s.destroy();
    if (!stop) await sleep(20);
  }
}

const tell = setInterval(() => parentPort.postMessage({ opened }), 50);
const all = Array.from({ length: n }, (_, i) => client(i));
parentPort.once('message', async () => {
  stop = true;
  for (const s of socks) s.destroy();
  await Promise.all(all);
  clearInterval(tell);
  parentPort.close();
});
