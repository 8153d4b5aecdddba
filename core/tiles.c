/*
 * tiles.c - the tiles of one forward pass (see plan.h for the stages and
 * the batch matrices): gathering rows, the projections with their bias,
 * RoPE, checks and K/V page writes, attention per head or per kv-head
 * group, and the output projection. Every tile writes only its own rows
 * and columns; any thread.
 */
#include <string.h>

#include "kernel.h"
#include "kv.h"
#include "plan.h"

/* Flag item as non-finite (relaxed: read after the stage barrier). */
static void flag(attn_plan *p, int item)
{
    __atomic_store_n(&p->bad[item], 1, __ATOMIC_RELAXED);
}

/* Query row i of q sees at least one key (the mask rule of attn_seq). */
static int row_live(const attn_seq *q, int past, int i)
{
    if (i >= q->t_valid)
        return 0;
    int lim = q->causal ? (q->s_valid < past + i + 1 ? q->s_valid : past + i + 1)
                        : q->s_valid;
    if (!q->mask)
        return lim > 0;
    const uint8_t *m = q->mask + (size_t)i * q->s;
    for (int j = 0; j < lim; j++)
        if (m[j])
            return 1;
    return 0;
}

/* scale_q: dst[0..n) = x[0..n) times the layer's scale (dst may be x:
 * in place); 1 when every product is finite (the projection's check, in
 * the same pass). q is scaled before Q K^T, as PyTorch does (q * scale,
 * or q / sqrt(E), then the product: F._scaled_dot_product_attention,
 * nn.MultiheadAttention), so the float rounding is theirs and a q . k
 * past FLT_MAX whose scaled score fits is no overflow. One product per
 * element of Q, not one per score. */
static int scale_q(const attn_plan *p, float *dst, const float *x, size_t n)
{
    float s = p->cfg.scale;
    uint32_t bad = 0;
    for (size_t j = 0; j < n; j++) {
        float v = x[j] * s;
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        dst[j] = v;
    }
    return !bad;
}

/* Gather rows [r0, r1) of sequence tl->item's x (head 0) or context rows
 * (head 1) into the batch matrix. */
static void tile_gather(attn_plan *p, const tile *tl)
{
    const seqbuf *b = &p->buf[tl->item];
    const attn_seq *q = &p->seqs[tl->item];
    if (tl->head == 0) {
        size_t w = (size_t)p->cfg.d_model;
        memcpy(p->Xg + ((size_t)b->xoff + (size_t)tl->r0) * w,
               q->x + (size_t)tl->r0 * w,
               (size_t)(tl->r1 - tl->r0) * w * sizeof(float));
    } else {
        size_t w = (size_t)p->cfg.d_model_ctx;
        memcpy(p->Cg + ((size_t)b->coff + (size_t)tl->r0) * w,
               b->ctx + (size_t)tl->r0 * w,
               (size_t)(tl->r1 - tl->r0) * w * sizeof(float));
    }
}

/* Columns [c0, c1) of weight matrix w ((k, width), laid out as p->w says):
 * a tile's columns are exactly one panel (attn_panel_cols). Sets *ldb. */
static const float *wcols(const attn_plan *p, const float *w, int k,
                          int width, int c0, int c1, int *ldb)
{
    if (p->w.layout == ATTN_PANELS) {
        *ldb = c1 - c0;
        return w + (size_t)c0 * (size_t)k;
    }
    *ldb = width;
    return w + c0;
}

/* C = A B for the rows and columns of projection or output tile tl (A
 * its first row, k wide; B its columns; C its first element): through
 * the row-invariant attn__rows_fma whatever the rows when the tile holds
 * small requests (attn.c's put_grid: batch invariance), else attn__gemm. */
static void rows_gemm(const tile *tl, int k, const float *a, const float *b,
                      int ldb, float *c, int ldc)
{
    int m = tl->r1 - tl->r0, n = tl->c1 - tl->c0;
    if (tl->fma_rows)
        attn__rows_fma(m, n, k, a, k, b, ldb, c, ldc);
    else
        attn__gemm(0, m, n, k, 1.0f, a, k, b, ldb, 0.0f, c, ldc);
}

/* The projection tile: rows [r0, r1) x columns [c0, c1) of Q, K or V
 * (columns are whole heads), then bias, RoPE, the per-head copies the
 * caller asked for, Q's scale (after its copies: the q output is before
 * it), the finite check, and decoder steps' K/V pages. */
static void tile_proj(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    int m = tl->item, r0 = tl->r0, r1 = tl->r1, c0 = tl->c0, c1 = tl->c1;
    int dh = m == MAT_V ? c->v_head_dim : c->head_dim;
    int heads = m == MAT_Q ? c->n_heads : c->n_kv_heads;
    int width = heads * dh, k = m == MAT_Q ? c->d_model : c->d_model_ctx;
    const float *in = m == MAT_Q ? p->X : p->C;
    const float *w = m == MAT_Q ? p->w.w_q : m == MAT_K ? p->w.w_k : p->w.w_v;
    const float *bias = m == MAT_Q ? p->w.b_q : m == MAT_K ? p->w.b_k : p->w.b_v;
    float *out = m == MAT_Q ? p->Q : m == MAT_K ? p->K : p->V;
    const int *rseq = m == MAT_Q ? p->qseq : p->kseq;
    size_t ld = (size_t)width, n = (size_t)(c1 - c0);
    int ldw;
    const float *wc = wcols(p, w, k, width, c0, c1, &ldw);
    rows_gemm(tl, k, in + (size_t)r0 * (size_t)k, wc, ldw,
              out + (size_t)r0 * ld + c0, width);
    if (bias)
        for (int r = r0; r < r1; r++) {
            float *restrict row = out + (size_t)r * ld + c0;
            for (size_t j = 0; j < n; j++)
                row[j] += bias[c0 + j];
        }
    int h0 = c0 / dh, h1 = c1 / dh;
    if (p->rope && m != MAT_V)
        attn__rope_rows(out + c0, ld, r0, r1, h1 - h0, dh, c->rope_dims,
                        p->rope, m == MAT_Q ? p->qpos : p->kpos);
    for (int r = r0; r < r1; r++) {
        int item = rseq[r];
        const attn_seq *q = &p->seqs[item];
        const seqbuf *b = &p->buf[item];
        float *row = out + (size_t)r * ld;
        if (m == MAT_Q) {
            int i = r - b->xoff;
            if (c0 == 0)
                p->live[r] = (uint8_t)row_live(q, b->past, i);
            if (q->q)
                for (int h = h0; h < h1; h++)
                    memcpy(q->q + ((size_t)h * (size_t)q->t + (size_t)i) * dh,
                           row + (size_t)h * dh, (size_t)dh * sizeof(float));
            if (!scale_q(p, row + c0, row + c0, n))
                flag(p, item);
            continue;
        }
        if (!attn__all_finite(row + c0, n))
            flag(p, item);
        int i = r - b->coff;
        float *dst = m == MAT_K ? q->k : q->v;
        if (q->kv) {
            const attn_kv_page_fmt *f = attn__kv_fmt(q->kv);
            for (int h = h0; h < h1; h++)
                attn__kv_put(f, q->kv->pages, m == MAT_V, h, b->past + i,
                             row + (size_t)h * dh);
        } else if (dst) {
            for (int h = h0; h < h1; h++)
                memcpy(dst + ((size_t)h * (size_t)q->s + (size_t)i) * dh,
                       row + (size_t)h * dh, (size_t)dh * sizeof(float));
        }
    }
}

/* The kernel's view of head h of sequence item: its Q, K, V and O columns
 * in the batch matrices, or its K/V pages for a decoder step. */
static attn__head head_of(attn_plan *p, int item, int h)
{
    const attn_config *c = &p->cfg;
    const attn_seq *q = &p->seqs[item];
    const seqbuf *b = &p->buf[item];
    int kvh = h / (c->n_heads / c->n_kv_heads);
    size_t ts = (size_t)q->t * (size_t)q->s;
    size_t ldq = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t ldk = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t ldv = (size_t)c->n_kv_heads * (size_t)c->v_head_dim;
    size_t ldo = (size_t)c->n_heads * (size_t)c->v_head_dim;
    attn__head hd = {
        .t = q->t,
        .s = q->s,
        .t_valid = q->t_valid,
        .s_valid = q->s_valid,
        .causal = q->causal,
        .dk = c->head_dim,
        .dv = c->v_head_dim,
        .mask = q->mask,
        .q = p->Q + (size_t)b->xoff * ldq + (size_t)h * (size_t)c->head_dim,
        .k = p->K + (size_t)b->coff * ldk + (size_t)kvh * (size_t)c->head_dim,
        .v = p->V + (size_t)b->coff * ldv + (size_t)kvh * (size_t)c->v_head_dim,
        .o = p->O + (size_t)b->xoff * ldo + (size_t)h * (size_t)c->v_head_dim,
        .ldq = ldq,
        .ldk = ldk,
        .ldv = ldv,
        .ldo = ldo,
        .att = q->attention ? q->attention + (size_t)h * ts : NULL,
        .sc = q->scores ? q->scores + (size_t)h * ts : NULL,
        .bad = &p->bad[item],
        .past = b->past,
        .kvh = kvh,
    };
    if (q->kv) {
        hd.kvf = attn__kv_fmt(q->kv);
        hd.pages = q->kv->pages;
    }
    return hd;
}

/* tile_att: query rows [r0, r1) of head tl->head of sequence tl->item:
 * scores, softmax and the weighted values into the head's columns of O
 * (and its attention/scores maps when asked). */
static void tile_att(attn_plan *p, const tile *tl)
{
    attn__head hd = head_of(p, tl->item, tl->head);
    attn__head_block(&hd, tl->r0, tl->r1);
}

/* tile_group: a one-token decoder step, every query head sharing kv head
 * tl->head / group at once: their q rows are consecutive (stride head_dim)
 * and so are their O rows and map rows, so the group is one block of rows
 * that reads each K/V page once. */
static void tile_group(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    int g = c->n_heads / c->n_kv_heads;
    attn__head hd = head_of(p, tl->item, tl->head);
    hd.t = g;
    hd.one_query = 1;
    hd.ldq = (size_t)c->head_dim;
    hd.ldo = (size_t)c->v_head_dim;
    attn__head_block(&hd, 0, g);
}

/* The output tile: rows [r0, r1) x columns [c0, c1) of Y = O W_o + b_o;
 * rows that see no key are 0 (not b_o); copied to each sequence's y when
 * Y is the batch's scratch. */
static void tile_out(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    int r0 = tl->r0, r1 = tl->r1, c0 = tl->c0, c1 = tl->c1;
    int k = c->n_heads * c->v_head_dim, dm = c->d_model;
    size_t n = (size_t)(c1 - c0);
    int ldw;
    const float *wc = wcols(p, p->w.w_o, k, dm, c0, c1, &ldw);
    rows_gemm(tl, k, p->O + (size_t)r0 * (size_t)k, wc, ldw,
              p->Y + (size_t)r0 * (size_t)dm + c0, dm);
    for (int r = r0; r < r1; r++) {
        int item = p->qseq[r];
        float *row = p->Y + (size_t)r * (size_t)dm + c0;
        if (!p->live[r]) {
            memset(row, 0, n * sizeof(float));
        } else {
            if (p->w.b_o)
                for (size_t j = 0; j < n; j++)
                    row[j] += p->w.b_o[c0 + j];
            if (!attn__all_finite(row, n))
                flag(p, item);
        }
        const attn_seq *q = &p->seqs[item];
        if (q->y != p->Y)
            memcpy(q->y + (size_t)(r - p->buf[item].xoff) * (size_t)dm + c0,
                   row, n * sizeof(float));
    }
}

/* tile_raw: raw item tl->item, whose q, k, v, y are per head (H, T|S, d)
 * blocks given by the caller (t_valid = t, s_valid = s); its q rows are
 * scaled into the plan's copy first. */
static void tile_raw(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_raw *r = &p->raw[tl->item];
    size_t h = (size_t)tl->head, t = (size_t)r->t, s = (size_t)r->s;
    size_t dk = (size_t)c->head_dim, dv = (size_t)c->v_head_dim;
    size_t q0 = (h * t + (size_t)tl->r0) * dk;
    size_t qn = (size_t)(tl->r1 - tl->r0) * dk;
    float *qs = p->rawq[tl->item] + h * t * dk;
    /* (an overflow shows in y, checked below) */
    (void)scale_q(p, qs + (size_t)tl->r0 * dk, r->q + q0, qn);
    attn__head hd = {
        .t = r->t,
        .s = r->s,
        .t_valid = r->t,
        .s_valid = r->s,
        .causal = r->causal,
        .dk = c->head_dim,
        .dv = c->v_head_dim,
        .mask = r->mask,
        .q = qs,
        .k = r->k + h * s * dk,
        .v = r->v + h * s * dv,
        .o = r->y + h * t * dv,
        .ldq = dk,
        .ldk = dk,
        .ldv = dv,
        .ldo = dv,
        .att = r->attention ? r->attention + h * t * s : NULL,
        .sc = r->scores ? r->scores + h * t * s : NULL,
        .bad = &p->bad[tl->item],
    };
    attn__head_block(&hd, tl->r0, tl->r1);
    const float *y = r->y + h * t * dv;
    if (!attn__all_finite(y + (size_t)tl->r0 * dv,
                          (size_t)(tl->r1 - tl->r0) * dv))
        flag(p, tl->item);
}

void attn__run_tile(attn_plan *p, const tile *tl)
{
    switch (tl->kind) {
    case TILE_GATHER:
        tile_gather(p, tl);
        break;
    case TILE_PROJ:
        tile_proj(p, tl);
        break;
    case TILE_ATT:
        tile_att(p, tl);
        break;
    case TILE_GROUP:
        tile_group(p, tl);
        break;
    case TILE_OUT:
        tile_out(p, tl);
        break;
    case TILE_RAW:
        tile_raw(p, tl);
        break;
    }
}
