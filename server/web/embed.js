// embed.js - the documented, deterministic sample-embedding generator
// shared by the page, the demo model and the tests (README "The sample
// embeddings"). For a model of width D (divisible by 4), half = D/2,
// quarter = D/4:
//   content(word): FNV-1a 32 of the lower-cased UTF-8 bytes seeds a
//     xorshift32 (13, 17, 5); c_k = x / 2^32 * 2 - 1 for k < half; then
//     scaled to unit length.
//   position(i): p[2k] = sin(i w_k), p[2k+1] = cos(i w_k), w_k =
//     10000^(-2k/half), k < quarter; times 1/sqrt(quarter).
//   embedding(word, i) = concat(content, position), in double, rounded
//   to float32.

export function fnv1a32(word) {
  const bytes = new TextEncoder().encode(word.toLowerCase());
  let h = 2166136261;
  for (const b of bytes) h = Math.imul((h ^ b) >>> 0, 16777619) >>> 0;
  return h >>> 0;
}

export function content(word, half) {
  let x = fnv1a32(word);
  if (x === 0) x = 1;
  const c = new Float64Array(half);
  let norm = 0;
  for (let k = 0; k < half; k++) {
    x = (x ^ (x << 13)) >>> 0;
    x = (x ^ (x >>> 17)) >>> 0;
    x = (x ^ (x << 5)) >>> 0;
    c[k] = (x / 4294967296) * 2 - 1;
    norm += c[k] * c[k];
  }
  norm = Math.sqrt(norm);
  for (let k = 0; k < half; k++) c[k] /= norm;
  return c;
}

export function position(i, half) {
  const quarter = half / 2;
  const p = new Float64Array(half);
  const s = 1 / Math.sqrt(quarter);
  for (let k = 0; k < quarter; k++) {
    const w = Math.pow(10000, (-2 * k) / half);
    p[2 * k] = Math.sin(i * w) * s;
    p[2 * k + 1] = Math.cos(i * w) * s;
  }
  return p;
}

// embed(words, d, pos0): Float32Array (T, d) row-major; word i sits at
// position pos0 + i (a sequence's step continues where it left off).
export function embed(words, d, pos0 = 0) {
  if (!(d > 0) || d % 4 !== 0)
    throw new Error(`d_model ${d}: the sample generator needs a multiple of 4`);
  const half = d / 2;
  const out = new Float32Array(words.length * d);
  words.forEach((w, i) => {
    out.set(content(w, half), i * d);
    out.set(position(pos0 + i, half), i * d + half);
  });
  return out;
}

// Words of a sentence: runs of non-space characters.
export function tokenize(text) {
  return text.split(/\s+/).filter((w) => w.length > 0);
}
