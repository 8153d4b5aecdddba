// wire.mjs - a protobuf and gRPC-message writer for the hand-built tests
// (framing.test.mjs, guard.test.mjs), small and independent of protoc and
// protobufjs: what the bytes are is spelled out here, not generated.

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
