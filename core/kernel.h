/*
 * kernel.h - internal: the per-tile attention kernels and RoPE, shared by
 * attn.c and the tests. Not part of the public API (double-underscore
 * prefix); callers outside core/ use attn.h.
 */
#ifndef ATTN_KERNEL_H
#define ATTN_KERNEL_H

#include <stddef.h>
#include <stdint.h>

/* Query rows per attention tile and keys per streamed K/V block. */
#define ATTN__BQ 128
#define ATTN__BK 256

/*
 * One head over one block of query rows [i0, i1). Row i of Q is q + i*ldq,
 * already multiplied by the score scale (the caller scales q, so a score
 * is q_i . k_j: see attn.h),
 * key row j of K is k + j*ldk, of V v + j*ldv; output row i is o + i*ldo.
 * Visibility of key j to query i: i < t_valid, j < s_valid,
 * (!causal || j <= past + i), (!mask || mask[i*s + j]). Rows with no
 * visible key (padded or fully masked) get zero output, zero weights.
 * att and sc, when non-NULL, point at this head's (t, s) maps (row stride
 * s); only rows [i0, i1) are written.
 *
 * Paged K/V (kvf non-NULL): key row j of kv head kvh is read from pages
 * (kvpage.h; widened from FP16/BF16 when stored so) instead of k/v.
 * one_query: every row is query 0 for visibility and mask (a decode step
 * whose rows are the heads sharing one kv head).
 */
typedef struct attn__head {
    int t, s;             /* query rows, key rows of the whole sequence */
    int t_valid, s_valid; /* visible limits (see above) */
    int causal;
    int dk, dv;          /* head widths */
    const uint8_t *mask; /* (t, s) or NULL */
    const float *q;      /* (t, dk) rows at stride ldq, scaled */
    const float *k;      /* (s, dk) rows at stride ldk */
    const float *v;      /* (s, dv) rows at stride ldv */
    float *o;            /* (t, dv) rows at stride ldo */
    size_t ldq, ldk, ldv, ldo;
    float *att; /* (t, s) softmax weights or NULL */
    float *sc;  /* (t, s) scores (of scaled q) before masks or NULL */
    int *bad;   /* set to 1 (relaxed atomic) when a score row overflows */
    int past;   /* causal offset (tokens a K/V cache held before) */
    int one_query;
    const struct attn_kv_page_fmt *kvf; /* paged K/V, or NULL */
    void *const *pages;                 /* (pages of kvf) */
    int kvh;                            /* kv head inside the pages */
} attn__head;

/* attn__head_block: compute rows [i0, i1) of one head. When h->att is set
 * the weights are materialised into it and reused for A V; otherwise the
 * fused online-softmax kernel streams K/V in blocks of ATTN__BK and never
 * holds more than ATTN__BQ x ATTN__BK scores (on the stack). Scores, when
 * asked, are one extra GEMM. Any thread; writes only its own rows. */
void attn__head_block(const attn__head *h, int i0, int i1);

/* attn__all_finite: 1 when x[0..n) holds no Inf or NaN. */
int attn__all_finite(const float *x, size_t n);

/* attn__rope_rows_table: fills p1 - p0 rows of cs, row r being position
 * p0 + r's (rot/2 cos, rot/2 sin) for freq_i = theta^(-2i/rot), angle =
 * position * freq_i, in float32 as HF Llama computes them (see kernel.c). */
void attn__rope_rows_table(float *cs, int p0, int p1, int rot, float theta);

/* attn__rope_max_freq: the largest freq_i of the table above (i = 0 for
 * theta >= 1, else i = rot/2 - 1), computed as the table computes it.
 * attn__rope_finite: 1 when every angle of that table is finite for
 * positions 0 .. INT_MAX (the highest frequency at 2^31: the product grows
 * with both), else 0: then cos and sin are NaN, from position 0 when the
 * frequency itself overflows (0 x Inf). */
float attn__rope_max_freq(int rot, float theta);
int attn__rope_finite(int rot, float theta);

/* attn__rope_rows: rotate rows [r0, r1) of a (rows, n_heads * dk) matrix
 * at stride ld in place, each head's first rot dims, position pos[r] (the
 * row index r when pos is NULL), pairing (i, i + rot/2) (rotate_half):
 *   x'[i]       = x[i] cos - x[i + rot/2] sin
 *   x'[i+rot/2] = x[i + rot/2] cos + x[i] sin                            */
void attn__rope_rows(float *x, size_t ld, int r0, int r1, int n_heads, int dk,
                     int rot, const float *cs, const int *pos);

/* attn__gemm: C (m, n) = alpha A (m, k) B + beta C, row-major, B (k, n) or,
 * when trans_b, B^T with B (n, k), through cblas_sgemm (OpenBLAS's own
 * small-matrix kernels beat plain loops even at 16 x 16 x 16), or through
 * attn__skinny_gemm when it takes the shape (C = A B with few rows). */
void attn__gemm(int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c,
                int ldc);

/* attn__row_max: largest of x[0..n) (-inf for n == 0 or all -inf).
 * attn__row_expsum: x[j] = exp(x[j] - m) in place (-inf -> exactly 0),
 * returns the sum. m must be >= every x[j] and finite. AVX2+FMA when the
 * CPU has it (rowops.c), else libm. */
float attn__row_max(const float *x, int n);
float attn__row_expsum(float *x, int n, float m);
/* attn__have_avx2_fma: 1 when this CPU runs AVX2 and FMA (rowops.c's and
 * rows_fma.c's kernels, chosen at run time), 0 elsewhere or while
 * attn__avx2_off is on. attn__avx2_off: nonzero makes those kernels
 * decline, their plain C running instead (tests). Any thread. */
int attn__have_avx2_fma(void);
void attn__avx2_off(int on);

/* attn__blas_single: ask OpenBLAS (when linked) for one thread, so GEMMs
 * inside tiles never oversubscribe the pool. Idempotent, any thread. */
void attn__blas_single(void);

/* attn__skinny_gemm (skinny.c): C (m, n) = A (m, k) B (k, n), row-major,
 * without packing B, for SKINNY_MIN_ROWS <= m <= SKINNY_MAX_ROWS,
 * k >= SKINNY_MIN_K and n a multiple of 32, on a CPU with AVX-512.
 * Returns 1 when it computed C, 0 (touching nothing) when the shape or
 * the CPU is not its own. From 2 to 48 rows it beat OpenBLAS's SkylakeX
 * kernels on the decode layer's tiles (x 2048 x 256), at 64 it lost; one
 * row ran at 62-64 GB/s against OpenBLAS's 14 (Haswell) and 35-37
 * (Cooperlake). With k down to 16 (the demo layer's 16 x 64 x 64 and
 * below) it matched OpenBLAS's SkylakeX kernels and ran 2.5-4x faster
 * than its Haswell ones. */
/* attn__have_avx512: 1 when this CPU runs AVX-512F (skinny.c's and
 * small_attn.c's kernels), 0 elsewhere or while attn__avx512_off is on.
 * attn__avx512_off: nonzero makes this CPU look like one without AVX-512
 * to those kernels (they decline; tests and benches of the other paths
 * on an AVX-512 host). Any thread. */
int attn__have_avx512(void);
void attn__avx512_off(int on);
#define SKINNY_MIN_ROWS 1
#define SKINNY_MAX_ROWS 48
#define SKINNY_MIN_K 16
int attn__skinny_gemm(int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc);
/* attn__skinny_fits: 1 when the skinny kernel takes a product of n columns
 * over k on this CPU (AVX-512, n a multiple of 32, k >= SKINNY_MIN_K),
 * whatever its rows. attn__skinny_rows: attn__skinny_gemm for any m >= 1
 * (slower than OpenBLAS past SKINNY_MAX_ROWS rows); 0 when it does not
 * fit. Each element of C is one chain of fused multiply-adds over k in
 * order, from 0, so row i of C has the same bits whatever m is and
 * wherever row i sits (tests/core/test_kernel.c); OpenBLAS's rows do
 * not (they change with the call's row count: README, "Batch
 * invariance"). */
int attn__skinny_fits(int n, int k);
int attn__skinny_rows(int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc);

/* attn__rows_fma (rows_fma.c): C (m, n) = A (m, k) B (k, n), row-major,
 * for any m, n, k >= 1 on any CPU, each element one chain of fused
 * multiply-adds over k in order, from 0.0f: the bits of
 * attn__skinny_rows wherever that takes the shape, and row i's bits the
 * same whatever m is and wherever row i sits (tests/core/test_rows_fma.c).
 * Through attn__skinny_rows when it takes the shape (its columns of whole
 * 32-column blocks), else AVX2+FMA when the CPU has it, else plain C.
 * Batch invariance's GEMM for the blocks of small requests (attn.c's
 * put_grid). attn__avx2_off (above) forces its plain C where AVX2+FMA
 * would run (tests). */
void attn__rows_fma(int m, int n, int k, const float *a, int lda,
                    const float *b, int ldb, float *c, int ldc);

/* small_attn.c: a few query rows (at most SMALL_ROWS) against one span of
 * keys, without BLAS, on a CPU with AVX-512 and d_k (d_v) a multiple of
 * 16. attn__small_scores: out[r][j] = alpha q_r . k_j for r < n, j < kn
 * (rows ldq, ldk, ldo floats apart). attn__small_pv: o[r] += sum over
 * j < kn of p[r][j] v_j. Each returns 1 when it computed, 0 (touching
 * nothing) when the shape or the CPU is not its own. */
#define SMALL_ROWS 8
int attn__small_scores(int n, int kn, int dk, float alpha, const float *q,
                       size_t ldq, const float *k, size_t ldk, float *out,
                       size_t ldo);
int attn__small_pv(int n, int kn, int dv, const float *p, size_t ldp,
                   const float *v, size_t ldv, float *o, size_t ldo);

#endif
