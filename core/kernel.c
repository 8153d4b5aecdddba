/*
 * kernel.c - the per-tile attention kernels (materialised and fused online
 * softmax) and RoPE. See kernel.h for the contracts.
 */
#include "kernel.h"
#include "kvpage.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

static int imin(int a, int b)
{
    return a < b ? a : b;
}

static int imax(int a, int b)
{
    return a > b ? a : b;
}

void attn__gemm(int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (!trans_b && alpha == 1.0f && beta == 0.0f &&
        attn__skinny_gemm(m, n, k, a, lda, b, ldb, c, ldc))
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
}

/* The query row that decides visibility and mask for row i. */
static int qrow(const attn__head *h, int i)
{
    return h->one_query ? 0 : i;
}

/* Keys [0, lim) may be visible to row i before the explicit mask. */
static int key_limit(const attn__head *h, int i)
{
    i = qrow(h, i);
    if (i >= h->t_valid)
        return 0;
    return h->causal ? imin(h->s_valid, h->past + i + 1) : h->s_valid;
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

/* Floats of one widened span of FP16/BF16 keys (or values) on the stack. */
#define SPAN_FLOATS 4096

/* A run of keys [j0, j0 + n) whose K and V rows are contiguous in memory
 * (one block of a contiguous K/V, or one page's rows; widened into the
 * caller's buffers for half-precision pages). */
typedef struct span {
    int n;
    const float *k, *v;
    size_t ldk, ldv;
} span;

/* get_span: the span starting at key j0, at most max keys (and never past
 * ATTN__BK); want_k / want_v say which half-precision rows to widen into
 * kbuf / vbuf (SPAN_FLOATS each). */
static span get_span(const attn__head *h, int j0, int max, int want_k,
                     int want_v, float *kbuf, float *vbuf)
{
    span sp;
    int n = imin(max, ATTN__BK);
    if (!h->kvf) {
        sp.n = n;
        sp.k = h->k + (size_t)j0 * h->ldk;
        sp.v = h->v + (size_t)j0 * h->ldv;
        sp.ldk = h->ldk;
        sp.ldv = h->ldv;
        return sp;
    }
    const attn_kv_page_fmt *f = h->kvf;
    n = imin(n, f->page - j0 % f->page);
    sp.ldk = (size_t)f->dk;
    sp.ldv = (size_t)f->dv;
    if (f->dtype == ATTN_KV_F32) {
        sp.n = n;
        sp.k = attn__kv_row(f, h->pages, 0, h->kvh, j0);
        sp.v = attn__kv_row(f, h->pages, 1, h->kvh, j0);
        return sp;
    }
    int wide = f->dk > f->dv ? f->dk : f->dv;
    n = imin(n, SPAN_FLOATS / wide > 0 ? SPAN_FLOATS / wide : 1);
    sp.n = n;
    sp.k = kbuf;
    sp.v = vbuf;
    if (want_k)
        attn__kv_get(f, h->pages, 0, h->kvh, j0, n, kbuf);
    if (want_v)
        attn__kv_get(f, h->pages, 1, h->kvh, j0, n, vbuf);
    return sp;
}

/* The scores of n rows of (scaled) q against span sp into out (row
 * stride ld): small_attn.c's kernel for a few rows, else BLAS. */
static void span_scores(const attn__head *h, int n, const float *q,
                        const span *sp, float *out, size_t ld)
{
    if (!attn__small_scores(n, sp->n, h->dk, 1.0f, q, h->ldq, sp->k,
                            sp->ldk, out, ld))
        attn__gemm(1, n, sp->n, h->dk, 1.0f, q, (int)h->ldq, sp->k,
                   (int)sp->ldk, 0.0f, out, (int)ld);
}

/* o (n rows, stride ldo) += p (n x sp->n, stride ldp) times span sp's V. */
static void span_pv(const attn__head *h, int n, const float *p, size_t ldp,
                    const span *sp, float *o)
{
    if (!attn__small_pv(n, sp->n, h->dv, p, ldp, sp->v, sp->ldv, o, h->ldo))
        attn__gemm(0, n, h->dv, sp->n, 1.0f, p, (int)ldp, sp->v, (int)sp->ldv,
                   1.0f, o, (int)h->ldo);
}

/* Scores of rows [i0, i0 + n) against keys [0, kend) into out (row
 * stride ld), span by span. */
static void scores_rows(const attn__head *h, int i0, int n, int kend,
                        float *out, size_t ld, float *kbuf, float *vbuf)
{
    int kn;
    for (int kb = 0; kb < kend; kb += kn) {
        span sp = get_span(h, kb, kend - kb, 1, 0, kbuf, vbuf);
        kn = sp.n;
        span_scores(h, n, h->q + (size_t)i0 * h->ldq, &sp, out + kb, ld);
    }
}

/* Softmax of one materialised row p[0..s) in place over the visible keys of
 * row i; invisible entries become exactly 0. Returns 0 for a dead row. */
static int softmax_row(const attn__head *h, int i, float *p)
{
    int lim = key_limit(h, i);
    const uint8_t *mrow =
        h->mask ? h->mask + (size_t)qrow(h, i) * h->s : NULL;
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
    float kbuf[SPAN_FLOATS], vbuf[SPAN_FLOATS];
    int n = i1 - i0;
    float *p = h->att + (size_t)i0 * h->s;
    scores_rows(h, i0, n, h->s, p, (size_t)h->s, kbuf, vbuf);
    if (h->sc)
        memcpy(h->sc + (size_t)i0 * h->s, p,
               (size_t)n * (size_t)h->s * sizeof(float));
    check_scores(h, p, (size_t)n * (size_t)h->s);
    int live = 0, kend = 0;
    for (int r = 0; r < n; r++) {
        live += softmax_row(h, i0 + r, p + (size_t)r * h->s);
        kend = imax(kend, key_limit(h, i0 + r)); /* no row sees past it */
    }
    float *o = h->o + (size_t)i0 * h->ldo;
    if (live == 0 || kend == 0) {
        zero_rows(h->o, h->ldo, i0, i1, h->dv);
        return;
    }
    int kn;
    zero_rows(h->o, h->ldo, i0, i1, h->dv);
    for (int kb = 0; kb < kend; kb += kn) {
        span sp = get_span(h, kb, kend - kb, 0, 1, kbuf, vbuf);
        kn = sp.n;
        span_pv(h, n, p + kb, (size_t)h->s, &sp, o);
    }
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

/* Scores of keys [kb, kb + kn) in row (of query row i) that i may not
 * see become -inf; per-key checks only where some key may be hidden. */
static void hide_keys(const attn__head *h, int i, int kb, int kn, float *row)
{
    int jl = imin(kn, key_limit(h, i) - kb);
    const uint8_t *mr =
        h->mask ? h->mask + (size_t)qrow(h, i) * h->s + kb : NULL;
    if (jl < kn || mr)
        for (int j = 0; j < kn; j++)
            if (j >= jl || (mr && !mr[j]))
                row[j] = -INFINITY;
}

/* renorm_row: output row i again (into orow), for a fused row whose
 * running sum of exp(s - m) v overflowed float32 although each weighted
 * value fits (V near FLT_MAX: l keys of 3e38 sum to l x 3e38). With the
 * row's final max m and sum l known, each weight is normalised before it
 * multiplies V, as the materialised path does, so the sum stays within
 * the largest |v|. p: ATTN__BK floats. */
static void renorm_row(const attn__head *h, int i, float m, float l,
                       float *orow, float *p, float *kbuf, float *vbuf)
{
    int kend = key_limit(h, i), kn;
    float inv = 1.0f / l;
    memset(orow, 0, (size_t)h->dv * sizeof(float));
    for (int kb = 0; kb < kend; kb += kn) {
        span sp = get_span(h, kb, kend - kb, 1, 1, kbuf, vbuf);
        kn = sp.n;
        span_scores(h, 1, h->q + (size_t)i * h->ldq, &sp, p, ATTN__BK);
        hide_keys(h, i, kb, kn, p);
        attn__row_expsum(p, kn, m);
        for (int j = 0; j < kn; j++)
            p[j] *= inv;
        span_pv(h, 1, p, ATTN__BK, &sp, orow);
    }
}

/* Fused path: stream K/V in spans with a running max m and sum l per row
 * (online softmax); the output rows are the accumulator. */
static void block_fused(const attn__head *h, int i0, int i1)
{
    float sblk[ATTN__BQ * ATTN__BK]; /* (rows, ATTN__BK) scores, then p */
    float kbuf[SPAN_FLOATS], vbuf[SPAN_FLOATS];
    float m[ATTN__BQ], l[ATTN__BQ];
    int iv = i1; /* rows [iv, i1) are padding */
    while (iv > i0 && qrow(h, iv - 1) >= h->t_valid)
        iv--;
    zero_rows(h->o, h->ldo, i0, i1, h->dv);
    if (iv == i0)
        return;
    int n = iv - i0, kend = 0;
    for (int r = i0; r < iv; r++)
        kend = imax(kend, key_limit(h, r));
    float *o = h->o + (size_t)i0 * h->ldo;
    for (int r = 0; r < n; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    int kn;
    for (int kb = 0; kb < kend; kb += kn) {
        span sp = get_span(h, kb, kend - kb, 1, 1, kbuf, vbuf);
        kn = sp.n;
        span_scores(h, n, h->q + (size_t)i0 * h->ldq, &sp, sblk, ATTN__BK);
        for (int r = 0; r < n; r++) {
            int i = i0 + r;
            float *row = sblk + (size_t)r * ATTN__BK;
            check_scores(h, row, (size_t)kn);
            hide_keys(h, i, kb, kn, row);
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
        span_pv(h, n, sblk, ATTN__BK, &sp, o);
    }
    for (int r = 0; r < n; r++) {
        float *orow = o + (size_t)r * h->ldo;
        if (l[r] > 0.0f) {
            float inv = 1.0f / l[r];
            for (int d = 0; d < h->dv; d++)
                orow[d] *= inv;
            if (isfinite(m[r]) && !attn__all_finite(orow, (size_t)h->dv))
                renorm_row(h, i0 + r, m[r], l[r], orow, sblk, kbuf, vbuf);
        } else {
            memset(orow, 0, (size_t)h->dv * sizeof(float));
        }
    }
}

/* Scores only (the fused path asked for scores but not weights), checked
 * as the materialised path checks them: the fused kernel checks only the
 * keys some row of its block may see, and a score that overflows at a
 * key none sees (causal with t < s, padding) would otherwise go out as
 * an Inf in the scores output. */
static __attribute__((noinline)) void block_scores(const attn__head *h, int i0,
                                                   int i1)
{
    float kbuf[SPAN_FLOATS], vbuf[SPAN_FLOATS];
    float *sc = h->sc + (size_t)i0 * h->s;
    scores_rows(h, i0, i1 - i0, h->s, sc, (size_t)h->s, kbuf, vbuf);
    check_scores(h, sc, (size_t)(i1 - i0) * (size_t)h->s);
}

void attn__head_block(const attn__head *h, int i0, int i1)
{
    if (h->att) {
        block_maps(h, i0, i1);
        return;
    }
    if (h->sc)
        block_scores(h, i0, i1);
    for (int r = i0; r < i1; r += ATTN__BQ)
        block_fused(h, r, imin(i1, r + ATTN__BQ));
}

/* HF Llama's recipe (LlamaRotaryEmbedding; vLLM's and Meta's reference
 * code are the same), each step rounded to float as theirs is:
 * inv_freq_i = 1 / powf(theta, (float)2i / rot), angle = (float)position
 * * inv_freq_i; then the cos and sin of that float angle, rounded once.
 * Exact angles (in double) drift from theirs with the position, by up to
 * 3.4e-3 in cos at position 131072 (head_dim 128, theta 10000): a layer
 * served here would not give the numbers users compare it with. */
void attn__rope_rows_table(float *cs, int p0, int p1, int rot, float theta)
{
    int half = rot / 2;
    for (int p = p0; p < p1; p++) {
        float *c = cs + (size_t)(p - p0) * (size_t)rot;
        for (int i = 0; i < half; i++) {
            float inv = 1.0f / powf(theta, (float)(2 * i) / (float)rot);
            float a = (float)p * inv;
            c[i] = (float)cos((double)a);
            c[half + i] = (float)sin((double)a);
        }
    }
}

float attn__rope_max_freq(int rot, float theta)
{
    int i = theta >= 1.0f ? 0 : rot / 2 - 1; /* powf is monotonic */
    return 1.0f / powf(theta, (float)(2 * i) / (float)rot);
}

int attn__rope_finite(int rot, float theta)
{
    float inv = attn__rope_max_freq(rot, theta);
    return isfinite(inv) && isfinite((float)INT_MAX * inv);
}

void attn__rope_rows(float *x, size_t ld, int r0, int r1, int n_heads, int dk,
                     int rot, const float *cs, const int *pos)
{
    int half = rot / 2;
    for (int r = r0; r < r1; r++) {
        const float *c = cs + (size_t)(pos ? pos[r] : r) * (size_t)rot;
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
