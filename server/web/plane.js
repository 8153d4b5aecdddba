// plane.js - one FP32 answer of a retained map's planes (what=entropy,
// what=norm: entropy.js, norm.js) read for the map version drawn.

import { cameInstead } from './api.js';

// readPlane(res, version, n, what): res's n floats as a Float32Array in
// values, or in note why not: the map is at another version now (a step
// landed since it was drawn: the map drawn next asks again), or another
// length came. An answer that is not FP32 (a proxy's or a login page's
// HTML) throws, saying what came.
export async function readPlane(res, version, n, what) {
  const ver = res.headers.get('Map-Version');
  const buf = await res.arrayBuffer();
  if (!/^application\/octet-stream\b/i.test(res.headers.get('Content-Type') || ''))
    throw new Error(cameInstead(res, new TextDecoder().decode(new Uint8Array(buf, 0, Math.min(buf.byteLength, 4096))), 'FP32'));
  if (ver !== String(version ?? 0)) return { note: `the map is at version ${ver} now, not the ${version ?? 0} drawn` };
  if (buf.byteLength !== 4 * n) return { note: `${buf.byteLength} bytes came, not the ${4 * n} of ${what}` };
  return { values: new Float32Array(buf), note: '' };
}
