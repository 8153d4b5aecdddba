/*
 * kernel.c - the per-tile attention kernels (materialised and fused online
 * softmax) and RoPE. See kernel.h for the contracts.
 */
#include "kernel.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* OpenBLAS's thread setter, if the CBLAS we link is OpenBLAS. Declared weak
 * so any other CBLAS links too. */
extern void openblas_set_num_threads(int n) __attribute__((weak));

void attn__blas_single(void)
{
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
}

static int imin(int a, int b)
{
    return a < b ? a : b;
}

void attn__gemm(int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
}

/* Keys [0, lim) may be visible to query i before the explicit mask. */
static int key_limit(const attn__head *h, int i)
{
    if (i >= h->t_valid)
        return 0;
    return h->causal ? imin(h->s_valid, i + 1) : h->s_valid;
}

static void zero_rows(float *o, size_t ld, int r0, int r1, int w)
{
    for (int i = r0; i < r1; i++)
        memset(o + (size_t)i * ld, 0, (size_t)w * sizeof(float));
}

int attn__all_finite(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad;
}

/* Scores that overflowed float32 (finite q and k whose product does not
 * fit, or q/k already Inf) flag the item: its results mean nothing. */
static void check_scores(const attn__head *h, const float *x, size_t n)
{
    if (h->bad && !attn__all_finite(x, n))
        __atomic_store_n(h->bad, 1, __ATOMIC_RELAXED);
}

/* Softmax of one materialised row p[0..s) in place over the visible keys of
 * query i; invisible entries become exactly 0. Returns 0 for a dead row. */
static int softmax_row(const attn__head *h, int i, float *p)
{
    int lim = key_limit(h, i);
    const uint8_t *mrow = h->mask ? h->mask + (size_t)i * h->s : NULL;
    if (mrow)
        for (int j = 0; j < lim; j++)
            if (!mrow[j])
                p[j] = -INFINITY;
    float mx = attn__row_max(p, lim);
    if (mx == -INFINITY) {
        memset(p, 0, (size_t)h->s * sizeof(float));
        return 0;
    }
    float sum = attn__row_expsum(p, lim, mx);
    if (lim < h->s)
        memset(p + lim, 0, (size_t)(h->s - lim) * sizeof(float));
    float inv = 1.0f / sum;
    for (int j = 0; j < lim; j++)
        p[j] *= inv;
    return 1;
}

/* Materialised path: weights into h->att, then O = A V. */
static void block_maps(const attn__head *h, int i0, int i1)
{
    int n = i1 - i0;
    float *p = h->att + (size_t)i0 * h->s;
    attn__gemm(1, n, h->s, h->dk, h->scale, h->q + (size_t)i0 * h->ldq,
               (int)h->ldq, h->k, (int)h->ldk, 0.0f, p, h->s);
    if (h->sc)
        memcpy(h->sc + (size_t)i0 * h->s, p,
               (size_t)n * (size_t)h->s * sizeof(float));
    check_scores(h, p, (size_t)n * (size_t)h->s);
    int live = 0;
    for (int r = 0; r < n; r++)
        live += softmax_row(h, i0 + r, p + (size_t)r * h->s);
    /* Keys past kend are never visible to any row of the block. */
    int kend = key_limit(h, imin(i1, h->t_valid) - 1);
    if (i0 >= h->t_valid)
        kend = 0;
    float *o = h->o + (size_t)i0 * h->ldo;
    if (live == 0 || kend == 0) {
        zero_rows(h->o, h->ldo, i0, i1, h->dv);
        return;
    }
    attn__gemm(0, n, h->dv, kend, 1.0f, p, h->s, h->v, (int)h->ldv, 0.0f, o,
               (int)h->ldo);
    /* Dead rows have all-zero weights; make their output exactly 0 even if
     * V holds non-finite values. */
    for (int r = 0; r < n; r++) {
        const float *pr = p + (size_t)r * h->s;
        int any = 0;
        for (int j = 0; j < kend && !any; j++)
            any = pr[j] != 0.0f;
        if (!any)
            memset(o + (size_t)r * h->ldo, 0, (size_t)h->dv * sizeof(float));
    }
}

/* Fused path: stream K/V in blocks with a running max m and sum l per row
 * (online softmax); the output rows are the accumulator. */
static void block_fused(const attn__head *h, int i0, int i1)
{
    float sblk[ATTN__BQ * ATTN__BK]; /* (rows, ATTN__BK) scores, then p */
    float m[ATTN__BQ], l[ATTN__BQ];
    int iv = imin(i1, h->t_valid); /* rows [iv, i1) are padding */
    if (iv < i0)
        iv = i0;
    zero_rows(h->o, h->ldo, i0, i1, h->dv);
    if (iv == i0)
        return;
    int n = iv - i0;
    int kend = key_limit(h, iv - 1);
    float *o = h->o + (size_t)i0 * h->ldo;
    for (int r = 0; r < n; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int kb = 0; kb < kend; kb += ATTN__BK) {
        int kn = imin(ATTN__BK, kend - kb);
        attn__gemm(1, n, kn, h->dk, h->scale, h->q + (size_t)i0 * h->ldq,
                   (int)h->ldq, h->k + (size_t)kb * h->ldk, (int)h->ldk, 0.0f,
                   sblk, ATTN__BK);
        /* Per-key checks only where some key of the block may be hidden. */
        int need = h->mask || (h->causal && kb + kn - 1 > i0);
        for (int r = 0; r < n; r++) {
            int i = i0 + r;
            float *row = sblk + (size_t)r * ATTN__BK;
            check_scores(h, row, (size_t)kn);
            if (need) {
                int jl = h->causal ? imin(kn, i + 1 - kb) : kn;
                const uint8_t *mr =
                    h->mask ? h->mask + (size_t)i * h->s + kb : NULL;
                for (int j = 0; j < kn; j++)
                    if (j >= jl || (mr && !mr[j]))
                        row[j] = -INFINITY;
            }
            float mx = attn__row_max(row, kn);
            if (mx == -INFINITY) {
                memset(row, 0, (size_t)kn * sizeof(float));
                continue;
            }
            float mnew = m[r] > mx ? m[r] : mx;
            float alpha = expf(m[r] - mnew); /* 0 when m was -inf */
            float sum = attn__row_expsum(row, kn, mnew);
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            if (alpha != 1.0f) {
                float *orow = o + (size_t)r * h->ldo;
                for (int d = 0; d < h->dv; d++)
                    orow[d] *= alpha;
            }
        }
        attn__gemm(0, n, h->dv, kn, 1.0f, sblk, ATTN__BK,
                   h->v + (size_t)kb * h->ldv, (int)h->ldv, 1.0f, o,
                   (int)h->ldo);
    }
    for (int r = 0; r < n; r++) {
        float *orow = o + (size_t)r * h->ldo;
        if (l[r] > 0.0f) {
            float inv = 1.0f / l[r];
            for (int d = 0; d < h->dv; d++)
                orow[d] *= inv;
        } else {
            memset(orow, 0, (size_t)h->dv * sizeof(float));
        }
    }
}

void attn__head_block(const attn__head *h, int i0, int i1)
{
    if (h->att) {
        block_maps(h, i0, i1);
        return;
    }
    if (h->sc)
        attn__gemm(1, i1 - i0, h->s, h->dk, h->scale,
                   h->q + (size_t)i0 * h->ldq, (int)h->ldq, h->k, (int)h->ldk,
                   0.0f, h->sc + (size_t)i0 * h->s, h->s);
    for (int r = i0; r < i1; r += ATTN__BQ)
        block_fused(h, r, imin(i1, r + ATTN__BQ));
}

void attn__rope_table(float *cs, int n_pos, int rot, double theta)
{
    int half = rot / 2;
    for (int p = 0; p < n_pos; p++) {
        float *c = cs + (size_t)p * (size_t)rot;
        for (int i = 0; i < half; i++) {
            double freq = pow(theta, -2.0 * i / rot);
            double a = (double)p * freq;
            c[i] = (float)cos(a);
            c[half + i] = (float)sin(a);
        }
    }
}

void attn__rope_rows(float *x, size_t ld, int r0, int r1, int n_heads, int dk,
                     int rot, const float *cs)
{
    int half = rot / 2;
    for (int r = r0; r < r1; r++) {
        const float *c = cs + (size_t)r * (size_t)rot;
        const float *sn = c + half;
        for (int hd = 0; hd < n_heads; hd++) {
            float *v = x + (size_t)r * ld + (size_t)hd * (size_t)dk;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * sn[i];
                v[i + half] = b * c[i] + a * sn[i];
            }
        }
    }
}
