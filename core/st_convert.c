/*
 * st_convert.c - safetensors elements to F32: one half or bfloat16
 * (st_f16_to_f32, st_bf16_to_f32), a whole tensor (st_to_f32) and rows of a
 * matrix, transposed or not (st_rows_to_f32). F16 runs eight at a time with
 * F16C where the CPU has it. See st.h.
 */
#include "st.h"

#include <stdint.h>
#include <string.h>

#include "attn.h"

float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    float f;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in float */
        f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    if (e == 31)
        bits = sign | 0x7f800000u | (m << 13);
    else
        bits = sign | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &bits, sizeof f);
    return f;
}

float st_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* f16_bits: IEEE half -> single bits without branches on the common path
 * (normals: rebias the exponent; Inf/NaN: exponent all ones; zero and
 * subnormals: m * 2^-24, exact). Equals st_f16_to_f32 for every input. */
static inline uint32_t f16_bits(uint32_t h)
{
    uint32_t em = h & 0x7fffu, s = (h & 0x8000u) << 16;
    uint32_t r = (em << 13) + 0x38000000u;
    r += em >= 0x7c00u ? 0x38000000u : 0;
    float sub = (float)em * 0x1p-24f;
    uint32_t sb;
    memcpy(&sb, &sub, sizeof sb);
    return (em < 0x400u ? sb : r) | s;
}

void st__f16_scalar(const unsigned char *p, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        uint32_t b = f16_bits(u);
        memcpy(dst + i, &b, 4);
    }
}

/* clang before 15 has no "f16c" for __builtin_cpu_supports (the fuzzers,
 * make fuzz-long, build with Debian 12's clang 14): scalar path there. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !(defined(__clang__) && __clang_major__ < 15)
#include <immintrin.h>
#define HAVE_F16C_PATH 1
/* f16_f16c: 8 halves at a time with the F16C instruction (x86-64 CPUs
 * since 2012; checked at run time). Exact, like f16_bits, except that a
 * signalling NaN comes out quiet (weights must be finite anyway). */
__attribute__((target("avx,f16c"))) static size_t
f16_f16c(const unsigned char *p, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    return i;
}
#endif

/* convert: n elements of dtype dt at p (unaligned) to floats. */
static void convert(st_dtype dt, const unsigned char *p, size_t n, float *dst)
{
    uint16_t u;
    uint32_t b;
    size_t i0 = 0;
    switch (dt) {
    case ST_F32:
        memcpy(dst, p, n * sizeof(float));
        break;
    case ST_F16:
#ifdef HAVE_F16C_PATH
        if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"))
            i0 = f16_f16c(p, n, dst);
#endif
        st__f16_scalar(p + 2 * i0, n - i0, dst + i0);
        break;
    case ST_BF16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&u, p + 2 * i, 2);
            b = (uint32_t)u << 16;
            memcpy(dst + i, &b, 4);
        }
        break;
    default:
        break;
    }
}

static int convertible(st_dtype dt)
{
    return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16;
}

int st_to_f32(const st_tensor *t, float *dst)
{
    if (!convertible(t->dtype))
        return ATTN_EFORMAT;
    convert(t->dtype, t->data, (size_t)t->count, dst);
    return 0;
}

#define TB 64 /* transpose tile edge (16 KiB of stack for the tile) */

int st_rows_to_f32(const st_tensor *t, uint64_t r0, uint64_t nr,
                   int transpose, float *dst)
{
    if (!convertible(t->dtype) || t->rank != 2 || r0 > t->shape[0] ||
        nr > t->shape[0] - r0)
        return ATTN_EINVAL;
    size_t cols = (size_t)t->shape[1], es = st_dtype_size(t->dtype);
    const unsigned char *src = t->data + (size_t)r0 * cols * es;
    if (!transpose) {
        convert(t->dtype, src, (size_t)nr * cols, dst);
        return 0;
    }
    /* tiles of TB x TB: convert each tile row to a buffer, then scatter the
     * buffer into TB columns of dst so reads and writes stay in cache */
    float buf[TB][TB];
    for (size_t rb = 0; rb < nr; rb += TB) {
        size_t rn = nr - rb < TB ? nr - rb : TB;
        for (size_t cb = 0; cb < cols; cb += TB) {
            size_t cn = cols - cb < TB ? cols - cb : TB;
            for (size_t r = 0; r < rn; r++)
                convert(t->dtype, src + ((rb + r) * cols + cb) * es, cn,
                        buf[r]);
            for (size_t c = 0; c < cn; c++)
                for (size_t r = 0; r < rn; r++)
                    dst[(cb + c) * (size_t)nr + rb + r] = buf[r][c];
        }
    }
    return 0;
}
