// colormap.js - viridis, the perceptually uniform colour map of matplotlib
// (Stefan van der Walt and Nathaniel Smith), as data: its colours at ten
// equally spaced points (the same ones R's viridisLite::viridis(10) gives),
// interpolated linearly in sRGB into a 256-entry table.

export const VIRIDIS_STOPS = [
  '#440154', '#482878', '#3e4a89', '#31688e', '#26828e',
  '#1f9e89', '#35b779', '#6dcd59', '#b4de2c', '#fde725',
];

function hexToRgb(h) {
  const n = parseInt(h.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

// colorAt(t) for t in [0, 1]: [r, g, b] bytes, linear between the stops.
export function colorAt(t) {
  if (!(t >= 0)) t = 0; // also catches NaN
  if (t > 1) t = 1;
  const stops = VIRIDIS_STOPS.map(hexToRgb);
  const x = t * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  return stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * f));
}

// 256-entry lookup table, Uint8Array of r,g,b triples; entry k is
// colorAt(k / 255).
export const LUT = (() => {
  const lut = new Uint8Array(256 * 3);
  for (let k = 0; k < 256; k++) lut.set(colorAt(k / 255), 3 * k);
  return lut;
})();

// The colour of a masked cell (never a colour of the map: a neutral grey
// drawn with hatching, so a mask never reads as a small weight).
export const MASK_RGB = [58, 58, 64];
export const MASK_STRIPE_RGB = [120, 120, 128];

// Scales turn a weight into a position on the colour map.
//   linear: w / vmax          (vmax = 1 unless auto-ranged)
//   log:    log10(w) mapped from [log10(floor), log10(vmax)] to [0, 1]
export function makeScale(kind, vmax, floor = 1e-4) {
  vmax = vmax > 0 ? vmax : 1;
  if (kind === 'log') {
    const lo = Math.log10(floor), hi = Math.log10(vmax);
    return {
      kind, vmax, floor,
      pos: (w) => (w <= floor ? 0 : Math.min(1, (Math.log10(w) - lo) / (hi - lo))),
      ticks: () => {
        const out = [];
        for (let e = Math.ceil(lo); e <= Math.floor(hi) + 1e-9; e++)
          out.push([10 ** e, (e - lo) / (hi - lo)]);
        return out;
      },
    };
  }
  return {
    kind: 'linear', vmax, floor,
    pos: (w) => Math.min(1, Math.max(0, w / vmax)),
    ticks: () => [0, 0.25, 0.5, 0.75, 1].map((f) => [f * vmax, f]),
  };
}

// rgbFor(scale, w): the bytes drawn for weight w (the LUT entry of its
// position, rounded to the nearest of 256).
export function rgbFor(scale, w) {
  const k = Math.round(scale.pos(w) * 255);
  return [LUT[3 * k], LUT[3 * k + 1], LUT[3 * k + 2]];
}
