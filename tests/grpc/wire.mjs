// wire.mjs - a protobuf, gRPC-message and HTTP/2-frame writer for the
// hand-built tests (framing.test.mjs, guard.test.mjs, the raw clients of
// tests/server), small and independent of protoc and protobufjs: what the
// bytes are is spelled out here, not generated.

/** A base-128 varint of n (up to 2^64 - 1; negative numbers as uint64). */
export const varint = (n) => {
  const b = [];
  let v = BigInt.asUintN(64, BigInt(n));
  do {
    let x = Number(v & 0x7fn);
    v >>= 7n;
    if (v) x |= 0x80;
    b.push(x);
  } while (v);
  return Buffer.from(b);
};
/** A length-delimited field (wire type 2). */
export const ld = (field, bytes) => Buffer.concat([varint((field << 3) | 2), varint(bytes.length), bytes]);
export const str = (field, s) => ld(field, Buffer.from(s));
/** A packed repeated int64 / float field. */
export const packedI64 = (field, a) => ld(field, Buffer.concat(a.map(varint)));
export const packedF32 = (field, a) => ld(field, Buffer.from(new Float32Array(a).buffer));
/** A gRPC message: compressed flag, 4-byte big-endian length, the bytes. */
export const frame = (msg, flag = 0) => {
  const h = Buffer.alloc(5);
  h[0] = flag;
  h.writeUInt32BE(msg.length, 1);
  return Buffer.concat([h, msg]);
};

/** h2frame(type, flags, stream, payload): one HTTP/2 frame (RFC 9113),
 * for the raw HTTP/2 clients (tests/server/drain_cut.test.mjs,
 * drain_begun.test.mjs, fuzz_grpc.mjs: its stream id as 32 bits, the
 * reserved one too). */
export function h2frame(type, flags, id, payload = Buffer.alloc(0)) {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id >>> 0, 5);
  return Buffer.concat([h, payload]);
}
/** hpackInt(n, prefixBits, first): an HPACK integer (RFC 7541 5.1), its
 * first byte's high bits from first. */
function hpackInt(n, prefixBits, first) {
  const max = (1 << prefixBits) - 1;
  if (n < max) return [first | n];
  const b = [first | max];
  for (n -= max; n >= 128; n = Math.floor(n / 128)) b.push((n % 128) | 128);
  b.push(n);
  return b;
}
/** HPACK: a literal header field without indexing, new name, no Huffman. */
export const lit = (k, v) => Buffer.concat([Buffer.from([0]), Buffer.from(hpackInt(Buffer.byteLength(k), 7, 0)), Buffer.from(k),
  Buffer.from(hpackInt(Buffer.byteLength(v), 7, 0)), Buffer.from(v)]);

/** HPACK: a literal header field entered in the dynamic table (RFC 7541
 * 6.2.1), new name, no Huffman; while it is the newest entry the byte
 * 0xbe (index 62) sends it again. */
export const litIndexed = (k, v) => Buffer.concat([Buffer.from([0x40]), lit(k, v).subarray(1)]);

/** A message's fields as {number: [value, ...]}: a varint as a BigInt, a
 * length-delimited field as a Buffer (fixed32/64 as 4/8-byte Buffers). */
export const fields = (buf) => {
  const out = {};
  let i = 0;
  const next = () => {
    let v = 0n, s = 0n, b;
    do {
      if (i >= buf.length) throw new Error('message ends inside a varint');
      b = buf[i++];
      v |= BigInt(b & 0x7f) << s;
      s += 7n;
    } while (b & 0x80);
    return v;
  };
  while (i < buf.length) {
    const key = Number(next()), n = key >> 3, wt = key & 7;
    let v;
    if (wt === 0) v = next();
    else if (wt === 1 || wt === 2 || wt === 5) {
      const len = wt === 2 ? Number(next()) : wt === 1 ? 8 : 4;
      if (i + len > buf.length) throw new Error(`field ${n} runs past the message`);
      v = buf.subarray(i, i + len);
      i += len;
    } else throw new Error(`field ${n}: wire type ${wt}`);
    (out[n] ||= []).push(v);
  }
  return out;
};
/** A packed repeated int64 field's numbers (signed). */
export const unpackI64 = (buf) => {
  const a = [];
  let v = 0n, s = 0n;
  for (const b of buf) {
    v |= BigInt(b & 0x7f) << s;
    s += 7n;
    if (!(b & 0x80)) {
      a.push(Number(BigInt.asIntN(64, v)));
      v = 0n;
      s = 0n;
    }
  }
  return a;
};

/** ModelInferRequest for sdpa: the seed example, raw_input_contents */
export function seedMsg() {
  const t = [['q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]], ['k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]], ['v', [2, 2], [1, 2, 3, 0]]];
  return Buffer.concat([
    str(1, 'sdpa'),
    ...t.map(([n, s]) => ld(5, Buffer.concat([str(1, n), str(2, 'FP32'), packedI64(3, s)]))),
    ...t.map(([, , v]) => ld(7, Buffer.from(new Float32Array(v).buffer))),
  ]);
}
/** its output (the seed's worked numbers, float32) */
export const SEED_OUT = [1.2384058237075806, 1.7615940570831299, 2.761593818664551, 0.23840582370758057];

/** the output floats of a framed ModelInferResponse (raw_output_contents[0]) */
export function firstRawOutput(data) {
  const msg = data.subarray(5, 5 + data.readUInt32BE(1));
  for (let i = 0; i < msg.length;) {
    let key = 0, shift = 0, b;
    do { b = msg[i++]; key |= (b & 0x7f) << shift; shift += 7; } while (b & 0x80);
    let len = 0; shift = 0;
    do { b = msg[i++]; len |= (b & 0x7f) << shift; shift += 7; } while (b & 0x80);
    if (key === ((6 << 3) | 2)) return Array.from(new Float32Array(msg.buffer.slice(msg.byteOffset + i, msg.byteOffset + i + len)));
    i += len;
  }
  return null;
}
