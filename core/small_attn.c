/*
 * small_attn.c - the two products of a few query rows against one span of
 * keys (a decoder step's group of query heads against a K/V page): the
 * scores S = alpha Q K^T and the weighted values O += P V, without BLAS.
 *
 * A one-token step of the d_model 2048 layer attends as 8 groups of 4
 * query rows, each against 64-key pages. Through cblas_sgemm (its
 * small-matrix kernels) these ran at 10-20 GFLOP/s in cache and read cold
 * pages at ~3 GB/s: about a third of the pool's time with 32 decoder
 * clients at a few hundred positions. Here:
 * - scores: 16 keys at a time, read once for every row (and the next 16
 *   prefetched); per row, 16 registers accumulate its products with each
 *   key over d_k, and one transposing tree of shuffles and adds turns
 *   them into the 16 scores;
 * - P V: 4 rows x 64 output columns in 16 registers; for each key, its V
 *   row (4 registers, prefetched PV_AHEAD rows ahead) times each row's
 *   weight, broadcast.
 * Both need d_k (d_v) a multiple of 16 and at most SMALL_ROWS rows, and an
 * AVX-512 CPU; otherwise they decline and the caller uses cblas_sgemm.
 */
#include "kernel.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))

/* V rows ahead of the one being multiplied that are prefetched. */
#define PV_AHEAD 8
/* Keys ahead of the block being multiplied that are prefetched (a block). */
#define SC_AHEAD 16

/* The 16 horizontal sums of v[0..16), in order, in one register. */
TGT static inline __m512 sum16(__m512 v[16])
{
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3] */
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) { /* per lane: the partial sums of 4 keys */
        __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
        b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; i++) /* lanes 0+2 and 1+3 of two groups of 4 keys */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                         _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
}

TGT static void scores(int n, int kn, int dk, float alpha, const float *q,
                       size_t ldq, const float *k, size_t ldk, float *out,
                       size_t ldo)
{
    __m512 va = _mm512_set1_ps(alpha);
    int j = 0;
    for (; j + 16 <= kn; j += 16) {
        const float *kj = k + (size_t)j * ldk;
        /* the next 16 keys, while these are multiplied (from memory, a
         * page's rows arrive faster asked for than found missing) */
        for (int t = 0; t < 16 && j + SC_AHEAD + t < kn; t++)
            for (int d = 0; d < dk; d += 16)
                _mm_prefetch((const char *)(kj + (size_t)(SC_AHEAD + t) * ldk + d),
                             _MM_HINT_T0);
        for (int r = 0; r < n; r++) { /* the 16 keys stay in L1 */
            const float *qr = q + (size_t)r * ldq;
            __m512 acc[16];
            for (int t = 0; t < 16; t++)
                acc[t] = _mm512_setzero_ps();
            for (int d = 0; d < dk; d += 16) {
                __m512 qv = _mm512_loadu_ps(qr + d);
#pragma GCC unroll 16
                for (int t = 0; t < 16; t++)
                    acc[t] = _mm512_fmadd_ps(
                        qv, _mm512_loadu_ps(kj + (size_t)t * ldk + d), acc[t]);
            }
            _mm512_storeu_ps(out + (size_t)r * ldo + j, _mm512_mul_ps(sum16(acc), va));
        }
    }
    for (; j < kn; j++) {
        const float *kr = k + (size_t)j * ldk;
        for (int r = 0; r < n; r++) {
            const float *qr = q + (size_t)r * ldq;
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < dk; d += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + d), _mm512_loadu_ps(kr + d), acc);
            out[(size_t)r * ldo + j] = alpha * _mm512_reduce_add_ps(acc);
        }
    }
}

/* o rows [0, nr) columns [c, c + 64) += p rows x V columns [c, c + 64). */
TGT __attribute__((always_inline)) static inline void
pv_block(const int nr, int kn, const float *p, size_t ldp, const float *v,
         size_t ldv, float *o, size_t ldo)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        for (int x = 0; x < 4; x++)
            acc[r][x] = _mm512_loadu_ps(o + (size_t)r * ldo + 16 * x);
    for (int j = 0; j < kn; j++) {
        const float *vj = v + (size_t)j * ldv;
        if (j + PV_AHEAD < kn)
            for (int x = 0; x < 4; x++)
                _mm_prefetch((const char *)(vj + PV_AHEAD * ldv + 16 * x),
                             _MM_HINT_T0);
        __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
        __m512 v2 = _mm512_loadu_ps(vj + 32), v3 = _mm512_loadu_ps(vj + 48);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m512 w = _mm512_set1_ps(p[(size_t)r * ldp + j]);
            acc[r][0] = _mm512_fmadd_ps(w, v0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(w, v1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(w, v2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(w, v3, acc[r][3]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        for (int x = 0; x < 4; x++)
            _mm512_storeu_ps(o + (size_t)r * ldo + 16 * x, acc[r][x]);
}

/* o rows [0, nr) columns [c, c + 16) += p rows x V's 16 columns. */
TGT static void pv_cols16(int nr, int kn, const float *p, size_t ldp,
                          const float *v, size_t ldv, float *o, size_t ldo)
{
    for (int r = 0; r < nr; r++) {
        __m512 acc = _mm512_loadu_ps(o + (size_t)r * ldo);
        for (int j = 0; j < kn; j++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)r * ldp + j]),
                                  _mm512_loadu_ps(v + (size_t)j * ldv), acc);
        _mm512_storeu_ps(o + (size_t)r * ldo, acc);
    }
}

TGT static void pv(int n, int kn, int dv, const float *p, size_t ldp,
                   const float *v, size_t ldv, float *o, size_t ldo)
{
    for (int r = 0; r < n; r += 4) {
        int nr = n - r < 4 ? n - r : 4;
        const float *pr = p + (size_t)r * ldp;
        float *orow = o + (size_t)r * ldo;
        int c = 0;
        for (; c + 64 <= dv; c += 64) {
            switch (nr) {
            case 4: pv_block(4, kn, pr, ldp, v + c, ldv, orow + c, ldo); break;
            case 3: pv_block(3, kn, pr, ldp, v + c, ldv, orow + c, ldo); break;
            case 2: pv_block(2, kn, pr, ldp, v + c, ldv, orow + c, ldo); break;
            default: pv_block(1, kn, pr, ldp, v + c, ldv, orow + c, ldo); break;
            }
        }
        for (; c < dv; c += 16)
            pv_cols16(nr, kn, pr, ldp, v + c, ldv, orow + c, ldo);
    }
}

int attn__small_scores(int n, int kn, int dk, float alpha, const float *q,
                       size_t ldq, const float *k, size_t ldk, float *out,
                       size_t ldo)
{
    if (n < 1 || n > SMALL_ROWS || kn < 1 || dk < 16 || dk % 16 || !attn__have_avx512())
        return 0;
    scores(n, kn, dk, alpha, q, ldq, k, ldk, out, ldo);
    return 1;
}

int attn__small_pv(int n, int kn, int dv, const float *p, size_t ldp,
                   const float *v, size_t ldv, float *o, size_t ldo)
{
    if (n < 1 || n > SMALL_ROWS || kn < 1 || dv < 16 || dv % 16 || !attn__have_avx512())
        return 0;
    pv(n, kn, dv, p, ldp, v, ldv, o, ldo);
    return 1;
}

#else

int attn__small_scores(int n, int kn, int dk, float alpha, const float *q,
                       size_t ldq, const float *k, size_t ldk, float *out,
                       size_t ldo)
{
    (void)n, (void)kn, (void)dk, (void)alpha, (void)q, (void)ldq, (void)k;
    (void)ldk, (void)out, (void)ldo;
    return 0;
}

int attn__small_pv(int n, int kn, int dv, const float *p, size_t ldp,
                   const float *v, size_t ldv, float *o, size_t ldo)
{
    (void)n, (void)kn, (void)dv, (void)p, (void)ldp, (void)v, (void)ldv;
    (void)o, (void)ldo;
    return 0;
}

#endif
