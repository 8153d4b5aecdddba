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
