/*
 * skinny.c - GEMMs of a few rows times a weight matrix (C = A B, A with
 * at most SKINNY_MAX_ROWS rows), the projections of a batch of decoder
 * steps or of one, without packing B.
 *
 * OpenBLAS copies ("packs") every block of B it multiplies into a buffer
 * first. For a tall A that copy is shared by many rows; for the 1 to 32
 * rows of a batch of one-token steps it is not, and a 32 x 2048 x 256
 * tile of the d_model 2048 layer ran at ~70 GFLOP/s (one thread) against
 * the ~130 the same kernels reach on large matrices; 4 rows at ~19.
 * Here B is read in place: a micro-kernel keeps a 12 x 32 block of C in
 * 24 AVX-512 registers and, for each k, loads 32 floats of B's row k,
 * broadcasts 12 values of A's column k and does 24 fused multiply-adds;
 * B's row k + PREFETCH_ROWS is asked for ahead. The same tile runs at
 * ~95 GFLOP/s, 4 rows at ~50. B's rows should be close together: the
 * engine's weights are column panels (attn.h, ATTN_PANELS), ldb the
 * panel's width; with ldb the width of a d_model 2048 matrix (8 KiB) all
 * of B's rows fall in the same L1 sets and the rows prefetched ahead
 * evict each other (48-53 GFLOP/s against 86-124 on 32 x 2048 x 5120).
 *
 * One row (a lone decoder step) takes a wide block instead: up to 256
 * columns of C, a whole panel, in 16 registers, the rows of B ahead
 * prefetched. OpenBLAS 0.3.21 multiplies one row as a GEMM too, packing
 * B: on the decode layer's 1 x 2048 x 256 panels 14 GB/s with its
 * Haswell kernels and 35-37 with its Cooperlake ones, 62-64 here.
 *
 * Each element of C is one chain of fused multiply-adds over k in order,
 * from 0, whatever the number of rows (one included) and the row's place
 * among them: a row's bits do not depend on the rows computed beside it.
 * Batch invariance (attn_batch_invariant: a request's outputs the same
 * alone and in any batch) relies on that: the blocks of small requests go
 * through attn__rows_fma (rows_fma.c), any number of rows, which comes
 * here when the shape fits (attn__skinny_rows) and otherwise computes the
 * same chains with AVX2 or plain C, the same bits.
 * Without AVX-512 (or when the shape does not fit) attn__skinny_gemm
 * declines and the caller uses cblas_sgemm. attn__avx512_off hides
 * AVX-512 from this file's and small_attn.c's kernels (tests).
 */
#include "kernel.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Rows of B ahead of the one being multiplied that are prefetched (~16
 * iterations of the micro-kernel, the memory latency; 4 and 48 were
 * slower on the 32 x 2048 x 256 tile, and on panels 4, 8 and 64 were
 * slower, 32 the same). */
#define PREFETCH_ROWS 16

/* One row (a lone decoder step): rows of B ahead that are prefetched
 * (8 and 16 ran alike, none at about half the speed). */
#define ROW_PREFETCH 8

/* Rows of the micro-kernel's C block (a multiple of 4 up to 12; the last
 * rows of A take the smaller kernels). 12 x 2 vectors = 24 accumulators,
 * the most that leave registers for B and the broadcasts. */
#define MR 12

#define TGT __attribute__((target("avx512f")))

/* C rows [0, mr) x 32 columns = A rows [0, mr) (k columns) x B (k x 32).
 * mr is a constant in each caller, so the loops unroll into registers. */
TGT __attribute__((always_inline)) static inline void
block(const int mr, int k, const float *a, size_t lda, const float *b,
      size_t ldb, float *c, size_t ldc)
{
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        const char *ahead = (const char *)(bp + PREFETCH_ROWS * ldb);
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + 64, _MM_HINT_T0);
        __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            __m512 av = _mm512_set1_ps(a[(size_t)i * lda + (size_t)p]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(c + (size_t)i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + (size_t)i * ldc + 16, acc[i][1]);
    }
}

typedef void block_fn(int k, const float *a, size_t lda, const float *b,
                      size_t ldb, float *c, size_t ldc);

#define BLOCK(R)                                                              \
    TGT static void block##R(int k, const float *a, size_t lda,               \
                             const float *b, size_t ldb, float *c, size_t ldc) \
    {                                                                         \
        block(R, k, a, lda, b, ldb, c, ldc);                                  \
    }
BLOCK(1)
BLOCK(2)
BLOCK(3)
BLOCK(4)
BLOCK(5)
BLOCK(6)
BLOCK(7)
BLOCK(8)
BLOCK(9)
BLOCK(10)
BLOCK(11)
BLOCK(12)

/* C (1 x 16 nv) = a (1 x k) B (k x 16 nv): one row of A, so the block is
 * wide instead (nv vectors of C, up to 256 columns, a whole panel) to give
 * the fused multiply-adds nv independent chains; each element is still one
 * chain over k in order, as in block(). */
TGT __attribute__((always_inline)) static inline void
row_block(const int nv, int k, const float *a, const float *b, size_t ldb,
          float *c)
{
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < nv; i++)
        acc[i] = _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        const char *ahead = (const char *)(bp + ROW_PREFETCH * ldb);
#pragma GCC unroll 16
        for (int i = 0; i < nv; i++)
            _mm_prefetch(ahead + 64 * i, _MM_HINT_T0);
        __m512 av = _mm512_set1_ps(a[p]);
#pragma GCC unroll 16
        for (int i = 0; i < nv; i++)
            acc[i] = _mm512_fmadd_ps(av, _mm512_loadu_ps(bp + 16 * i), acc[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < nv; i++)
        _mm512_storeu_ps(c + 16 * i, acc[i]);
}

#define ROW(NV)                                                               \
    TGT static void row##NV(int k, const float *a, const float *b,            \
                            size_t ldb, float *c)                             \
    {                                                                         \
        row_block(NV, k, a, b, ldb, c);                                       \
    }
ROW(2)
ROW(4)
ROW(8)
ROW(16)

static block_fn *const blocks[MR + 1] = {
    NULL,   block1, block2, block3,  block4,  block5, block6,
    block7, block8, block9, block10, block11, block12};

static int g_off; /* tests: attn__avx512_off() */

void attn__avx512_off(int on)
{
    __atomic_store_n(&g_off, on, __ATOMIC_RELAXED);
}

int attn__have_avx512(void)
{
    static int have = -1; /* a benign race: every thread computes the same */
    if (__atomic_load_n(&g_off, __ATOMIC_RELAXED))
        return 0;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512f") ? 1 : 0;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

int attn__skinny_fits(int n, int k)
{
    return k >= SKINNY_MIN_K && n >= 32 && n % 32 == 0 && attn__have_avx512();
}

int attn__skinny_gemm(int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc)
{
    if (m < SKINNY_MIN_ROWS || m > SKINNY_MAX_ROWS)
        return 0;
    return attn__skinny_rows(m, n, k, a, lda, b, ldb, c, ldc);
}

int attn__skinny_rows(int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc)
{
    if (m < 1 || !attn__skinny_fits(n, k))
        return 0;
    if (m == 1) { /* 256 columns at a time, then 128, 64, 32 */
        int j = 0;
        for (; n - j >= 256; j += 256)
            row16(k, a, b + j, (size_t)ldb, c + j);
        if (n - j >= 128)
            row8(k, a, b + j, (size_t)ldb, c + j), j += 128;
        if (n - j >= 64)
            row4(k, a, b + j, (size_t)ldb, c + j), j += 64;
        if (n - j >= 32)
            row2(k, a, b + j, (size_t)ldb, c + j);
        return 1;
    }
    for (int j = 0; j < n; j += 32)
        for (int i = 0; i < m; i += MR) {
            int r = m - i < MR ? m - i : MR;
            blocks[r](k, a + (size_t)i * (size_t)lda, (size_t)lda, b + j,
                      (size_t)ldb, c + (size_t)i * (size_t)ldc + j,
                      (size_t)ldc);
        }
    return 1;
}

#else

int attn__have_avx512(void) { return 0; }

void attn__avx512_off(int on) { (void)on; }

int attn__skinny_fits(int n, int k)
{
    (void)n, (void)k;
    return 0;
}

int attn__skinny_rows(int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)c, (void)ldc;
    return 0;
}

int attn__skinny_gemm(int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)c, (void)ldc;
    return 0;
}

#endif
