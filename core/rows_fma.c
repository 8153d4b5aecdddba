/*
 * rows_fma.c - C = A B for any shape on any CPU with each element of C one
 * chain of fused multiply-adds over k in order, from 0: the row-invariant
 * GEMM of batch invariance (attn_batch_invariant, attn.c's put_grid) where
 * the AVX-512 skinny kernel (skinny.c) does not take the shape or the CPU.
 *
 * c[i][j] = fma(a[i][k-1], b[k-1][j], ... fma(a[i][0], b[0][j], 0.0f))
 * is the same float whoever computes it: every fused multiply-add is
 * correctly rounded, so a vector lane of 16 (skinny.c), 8 (here) or a
 * scalar fmaf() gives the same bits, and a row's bits depend on neither
 * the rows beside it nor the kernel that took its block
 * (tests/core/test_rows_fma.c checks each way against fmaf()). Three
 * ways, chosen per call:
 * - the skinny kernel, when it takes the shape (AVX-512, k >= 16), for
 *   the columns of whole 32-column blocks (a head of 80's 240-column
 *   panels: 224 there, 16 below);
 * - AVX2+FMA (every x86-64 since 2013-2015; chosen at run time, the build
 *   targets baseline x86-64): B read in place, a block of up to MR rows x
 *   NV 8-float vectors of C in registers (12 accumulators, 2 rows of B, a
 *   broadcast of A), for each k the B vectors loaded once and MR
 *   broadcasts of A's column k; one row takes ROW_NV vectors instead. B's
 *   row k + PREFETCH_ROWS is asked for ahead (weights read in place at a
 *   stride of a panel's width or a whole matrix's: skinny.c), and k goes
 *   in passes of KC rows of B. The last n % 8 columns take the loop
 *   below, its fmaf() one instruction here. One thread: 80-87 GFLOP/s on
 *   16 x 2048 x 256, 98-100 on 48 x 2048 x 256 (OpenBLAS's Haswell
 *   kernels 70-78 and 93-95), 9.6-9.8 on 1 x 2048 x 2048 (4.3-6.2);
 * - plain C: on x86-64 fma_double (below; ~1.5 GFLOP/s, glibc's fmaf()
 *   without FMA 0.09), elsewhere fmaf() (an instruction on aarch64).
 * The build must not let the compiler fuse or reorder float arithmetic on
 * its own (-std=c11 keeps GCC's -ffp-contract=off; no -ffast-math): this
 * file writes every fused multiply-add itself and no plain a * b + c.
 */
#include "kernel.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* fma_double: fmaf(a, b, c) with double arithmetic, for an x86-64
 * without FMA, where glibc's fmaf() emulates it ~10x slower. The product
 * of two floats is exact in a double; the double sum s is rounded once,
 * and rounding s to float gives the float nearest the exact a b + c
 * unless s fell exactly on a midpoint between two floats (every such
 * midpoint is a double, so the first rounding cannot carry s across one,
 * only onto it: the 29 bits a float drops of s are then 1 and 28 zeros).
 * Then the part of the sum that was rounded off (Knuth's two-sum, exact)
 * says on which side of the midpoint the exact sum lies, and s moves one
 * double ulp that way first. Results below FLT_MIN (a float subnormal's
 * midpoints drop more bits), Inf and NaN go to fmaf(). */
__attribute__((always_inline)) static inline float fma_double(float a, float b,
                                                              float c)
{
    double p = (double)a * (double)b, s = p + (double)c;
    uint64_t u;
    memcpy(&u, &s, sizeof u);
    unsigned e = (unsigned)(u >> 52) & 0x7ffu;
    if (e == 0x7ffu || (e < 1023u - 126u && s != 0.0))
        return fmaf(a, b, c);
    if ((u & 0x1fffffffu) != 0x10000000u)
        return (float)s;
    double bv = s - p, av = s - bv;
    double err = (p - av) + ((double)c - bv);
    if (err != 0.0) {
        u += (err > 0.0) == (s > 0.0) ? 1 : (uint64_t)-1;
        memcpy(&s, &u, sizeof s);
    }
    return (float)s;
}

/* C (m, n) = A (m, k) B (k, n), columns [j0, n) only, one chain per
 * element: C's rows are the running sums, B read a row at a time. FMA is
 * fmaf() (inlined into the AVX2 path, where it is one instruction) or
 * fma_double(). */
#define COLS_FMA(NAME, FMA)                                                    \
    __attribute__((always_inline)) static inline void NAME(                    \
        int m, int j0, int n, int k, const float *restrict a, size_t lda,      \
        const float *restrict b, size_t ldb, float *restrict c, size_t ldc)    \
    {                                                                          \
        for (int i = 0; i < m; i++) {                                          \
            const float *ai = a + (size_t)i * lda;                             \
            float *ci = c + (size_t)i * ldc;                                   \
            for (int j = j0; j < n; j++)                                       \
                ci[j] = 0.0f;                                                  \
            for (int p = 0; p < k; p++) {                                      \
                const float *bp = b + (size_t)p * ldb;                         \
                float av = ai[p];                                              \
                for (int j = j0; j < n; j++)                                   \
                    ci[j] = FMA(av, bp[j], ci[j]);                             \
            }                                                                  \
        }                                                                      \
    }
COLS_FMA(cols_fma, fmaf)
COLS_FMA(cols_fma_double, fma_double)

/* The plain C path: fma_double on x86-64 (with or without FMA: this file
 * is built for baseline x86-64, where fmaf() is a call), fmaf()
 * elsewhere (one instruction on aarch64). */
static void rows_c(int m, int n, int k, const float *a, size_t lda,
                   const float *b, size_t ldb, float *c, size_t ldc)
{
#if defined(__x86_64__)
    cols_fma_double(m, 0, n, k, a, lda, b, ldb, c, ldc);
#else
    cols_fma(m, 0, n, k, a, lda, b, ldb, c, ldc);
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

/* Rows x vectors of the block (12 accumulators, 2 rows of B, 1 of A:
 * 15 of the 16 registers), and one row's vectors (64 columns). */
#define MR 6
#define NV 2
#define ROW_NV 8

/* Rows of B ahead of the one multiplied that are prefetched (skinny.c's
 * figure; with it 48 x 2048 x 256 ran ~10% faster than without). */
#define PREFETCH_ROWS 16

/* Rows of B (and columns of A) per pass over C: KC rows of B's columns
 * stay in L2 while every block of rows reads them, even when ldb is a
 * power of two (B's rows then fall in few cache sets); C holds the
 * chains between passes (a float stored and loaded is the same float). */
#define KC 256

/* C rows [0, mr) x nv vectors = A rows [0, mr) (k columns) x B (k x 8 nv).
 * mr and nv are constants in each caller, so the loops unroll into
 * registers. */
AVX2 __attribute__((always_inline)) static inline void
block(const int mr, const int nv, int k, const float *a, size_t lda,
      const float *b, size_t ldb, float *c, size_t ldc, int more)
{
    __m256 acc[MR][ROW_NV];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[i][v] = more ? _mm256_loadu_ps(c + (size_t)i * ldc + 8 * v)
                             : _mm256_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        const char *ahead = (const char *)(bp + PREFETCH_ROWS * ldb);
#pragma GCC unroll 8
        for (int v = 0; v < nv; v += 2)
            _mm_prefetch(ahead + 32 * v, _MM_HINT_T0);
        __m256 bv[ROW_NV];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            bv[v] = _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m256 av = _mm256_broadcast_ss(a + (size_t)i * lda + (size_t)p);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            _mm256_storeu_ps(c + (size_t)i * ldc + 8 * v, acc[i][v]);
}

typedef void block_fn(int k, const float *a, size_t lda, const float *b,
                      size_t ldb, float *c, size_t ldc, int more);

#define BLOCK(R, V)                                                            \
    AVX2 static void block##R##x##V(int k, const float *a, size_t lda,         \
                                    const float *b, size_t ldb, float *c,      \
                                    size_t ldc, int more)                      \
    {                                                                          \
        block(R, V, k, a, lda, b, ldb, c, ldc, more);                          \
    }
BLOCK(1, 1)
BLOCK(2, 1)
BLOCK(3, 1)
BLOCK(4, 1)
BLOCK(5, 1)
BLOCK(6, 1)
BLOCK(1, 2)
BLOCK(2, 2)
BLOCK(3, 2)
BLOCK(4, 2)
BLOCK(5, 2)
BLOCK(6, 2)
BLOCK(1, 4)
BLOCK(1, 8)

/* [rows][vectors]: the blocks of 1 to MR rows, 1 or 2 vectors */
static block_fn *const blocks[MR + 1][NV + 1] = {
    {NULL, NULL, NULL},         {NULL, block1x1, block1x2},
    {NULL, block2x1, block2x2}, {NULL, block3x1, block3x2},
    {NULL, block4x1, block4x2}, {NULL, block5x1, block5x2},
    {NULL, block6x1, block6x2}};

/* Columns [j, n - n % 8) of k rows of A and B from row p0 on: the
 * chains continue from C when more, else start at 0. */
AVX2 static void part_avx2(int m, int j, int n, int k, const float *a,
                           size_t lda, const float *b, size_t ldb, float *c,
                           size_t ldc, int more)
{
    for (; n - j >= 8 * NV; j += 8 * NV)
        for (int i = 0; i < m; i += MR) {
            int r = m - i < MR ? m - i : MR;
            blocks[r][NV](k, a + (size_t)i * lda, lda, b + j, ldb,
                          c + (size_t)i * ldc + j, ldc, more);
        }
    if (n - j >= 8)
        for (int i = 0; i < m; i += MR) {
            int r = m - i < MR ? m - i : MR;
            blocks[r][1](k, a + (size_t)i * lda, lda, b + j, ldb,
                         c + (size_t)i * ldc + j, ldc, more);
        }
}

AVX2 static void rows_avx2(int m, int n, int k, const float *a, size_t lda,
                           const float *b, size_t ldb, float *c, size_t ldc)
{
    int j = 0;
    if (m == 1) { /* one row: 64 columns at a time, then 32 */
        for (; n - j >= 64; j += 64)
            block1x8(k, a, lda, b + j, ldb, c + j, ldc, 0);
        if (n - j >= 32)
            block1x4(k, a, lda, b + j, ldb, c + j, ldc, 0), j += 32;
    }
    int p = 0;
    do { /* once at least: k == 0 gives zeros */
        int kc = k - p < KC ? k - p : KC;
        part_avx2(m, j, n, kc, a + p, lda, b + (size_t)p * ldb, ldb, c, ldc,
                  p > 0);
    } while ((p += KC) < k);
    j = n - n % 8;
    if (j < n)
        cols_fma(m, j, n, k, a, lda, b, ldb, c, ldc);
}

#else

static void rows_avx2(int m, int n, int k, const float *a, size_t lda,
                      const float *b, size_t ldb, float *c, size_t ldc)
{
    rows_c(m, n, k, a, lda, b, ldb, c, ldc);
}

#endif

void attn__rows_fma(int m, int n, int k, const float *a, int lda,
                    const float *b, int ldb, float *c, int ldc)
{
    /* the skinny kernel takes whole 32-column blocks: the rest here */
    int n32 = n - n % 32;
    if (n32 > 0 && attn__skinny_rows(m, n32, k, a, lda, b, ldb, c, ldc)) {
        if (n32 == n)
            return;
        b += n32, c += n32, n -= n32;
    }
    if (attn__have_avx2_fma())
        rows_avx2(m, n, k, a, (size_t)lda, b, (size_t)ldb, c, (size_t)ldc);
    else
        rows_c(m, n, k, a, (size_t)lda, b, (size_t)ldb, c, (size_t)ldc);
}
