/*
 * attn.c - the plan: checks, one scratch slab, the stages of independent
 * tiles (plan.h), and running them. Argument checks live in check.c, the
 * tiles in tiles.c, the per-head maths in kernel.c.
 */
#include "attn.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec.h"
#include "kernel.h"
#include "kv.h"
#include "plan.h"

/* Token rows per projection tile: large enough that packing a weight
 * matrix is a small share of the GEMM, small enough to spread T = 512 over
 * several threads. */
#define PROJ_ROWS 256

/* attn_plan_run runs plans under this many flops on the calling thread:
 * waking the executor's workers costs more than such a pass (the
 * b1_t16_d64_h4 bench case, 0.6 MFLOP, takes ~12 us inline, ~28 us on a
 * 2-thread executor). */
#define INLINE_FLOPS 2e6

/* Number of blocks of `per` rows that cover `rows` rows. */
static size_t blocks(int rows, int per)
{
    return (size_t)(rows / per + (rows % per != 0)); /* no int overflow */
}

/* Append the row blocks of one (item, head) to t. Causal attention blocks
 * go last-first: later query rows see more keys, and running the longest
 * tiles first leaves short ones to even out the end of the stage. */
static void put_blocks(tile *t, size_t *k, int kind, int item, int head,
                       int rows, int per, int longest_last)
{
    int nb = (int)blocks(rows, per);
    for (int b = 0; b < nb; b++) {
        int r = (longest_last ? nb - 1 - b : b) * per;
        tile *x = &t[(*k)++];
        x->kind = kind;
        x->item = item;
        x->head = head;
        x->r0 = r;
        x->r1 = rows - r < per ? rows : r + per;
    }
}

/* Context rows of sequence q (its rows in C): a step's own, else its s. */
static int ctx_rows(const attn_seq *q)
{
    return q->kv ? q->t : q->s;
}

/* Rows of sequence q in X (ctx 0) or in C (ctx 1). */
static int seq_rows(const attn_seq *q, int ctx)
{
    return ctx ? ctx_rows(q) : q->t;
}

/* attn_batch_invariant's switch (attn.h), read once by each plan */
static atomic_int batch_inv;

void attn_batch_invariant(int on)
{
    atomic_store_explicit(&batch_inv, !!on, memory_order_relaxed);
}

/* put_grid: append to t[*k] on the (row block x column block) tiles of a
 * GEMM over the rows of every sequence (X's rows, or C's when ctx), width
 * columns in blocks of cb; with t NULL only count them into *k.
 *
 * Without inv, blocks of PROJ_ROWS rows over the whole batch, whatever
 * request they come from: each weight read once per block, and a block
 * of 1 to SKINNY_MAX_ROWS rows to the skinny kernel, a larger one to
 * OpenBLAS (attn__gemm), so a request's rows can meet another kernel, or
 * OpenBLAS with another row count, in a batch than alone: its last bits
 * can change with the batch.
 *
 * With inv (batch invariance, README): the row blocks make a request's
 * rows meet the same summation order alone and in any batch, without
 * losing batching. OpenBLAS's rows change bits with the number of rows a
 * call has, so
 * - runs of consecutive small sequences (at most SKINNY_MAX_ROWS rows
 *   each; alone, one is such a run) share blocks of up to
 *   PROJ_ROWS rows, so that a batch of decode steps reads each weight
 *   once, and they all go through attn__rows_fma whatever the block's
 *   rows (each output one FMA chain in order, the same bits from the
 *   skinny kernel, AVX2 or plain C): invariant on every CPU and shape;
 * - every other sequence has blocks of its own, PROJ_ROWS rows from its
 *   first row: the same GEMM calls as alone, invariant everywhere. */
static void put_grid(tile *t, size_t *k, int kind, int mat,
                     const attn_seq *seqs, int n, int ctx, int width, int cb,
                     int inv)
{
    int r = 0;
    for (int i = 0; i < n;) {
        int end = r + seq_rows(&seqs[i], ctx);
        int run = !inv || end - r <= SKINNY_MAX_ROWS;
        for (i++; run && i < n &&
                  (!inv || seq_rows(&seqs[i], ctx) <= SKINNY_MAX_ROWS);
             i++)
            end += seq_rows(&seqs[i], ctx);
        for (int b = r; b < end; b += PROJ_ROWS)
            for (int c = 0; c < width; c += cb, (*k)++) {
                if (!t)
                    continue;
                tile *x = &t[*k];
                x->kind = kind;
                x->item = mat;
                x->r0 = b;
                x->r1 = end - b < PROJ_ROWS ? end : b + PROJ_ROWS;
                x->c0 = c;
                x->c1 = width - c < cb ? width : c + cb;
                x->fma_rows = inv && run;
            }
        r = end;
    }
}

/* 1/sqrt(d_k) rounded once, the float PyTorch multiplies q by
 * (head_dim ** -0.5); 1.0f / sqrtf() rounds twice and is 1 ulp off for
 * 242 head_dims up to 1024 (6, 24, 96, ...). */
float attn_config_scale(const attn_config *cfg)
{
    if (cfg->scale != 0.0f)
        return cfg->scale;
    return (float)(1.0 / sqrt((double)cfg->head_dim));
}

static attn_plan *plan_alloc(const attn_config *cfg, int n_items)
{
    attn_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->cfg = *cfg;
    p->cfg.scale = attn_config_scale(cfg);
    p->n_items = n_items;
    p->bad = calloc((size_t)n_items, sizeof(*p->bad));
    if (!p->bad) {
        free(p);
        return NULL;
    }
    return p;
}

/* A one-token decoder step attends as kv-head groups (tile_group). */
static int group_step(const attn_seq *q)
{
    return q->kv && q->t == 1;
}

/* A sequence's RoPE positions [lo, hi) and the table row of lo. */
typedef struct span {
    int lo, hi, seq;
    size_t row;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* rope_spans: sorts sp[0..n) by lo and gives each its table row, spans
 * that overlap or touch sharing rows (decoder steps of many sequences sit
 * at a few positions, stateless requests all start at 0): the table holds
 * the positions the batch has, not every one below its longest. Returns
 * the table's rows. */
static size_t rope_spans(span *sp, int n)
{
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    size_t base = 0;
    int lo = sp[0].lo, hi = sp[0].hi;
    for (int i = 0; i < n; i++) {
        if (sp[i].lo > hi) { /* a gap: a new run of rows */
            base += (size_t)(hi - lo);
            lo = sp[i].lo;
            hi = sp[i].hi;
        } else if (sp[i].hi > hi)
            hi = sp[i].hi;
        sp[i].row = base + (size_t)(sp[i].lo - lo);
    }
    return base + (size_t)(hi - lo);
}

/* rope_fill: writes the table's rows for sorted spans sp[0..n) (each run
 * of positions once, from its first span's row). */
static void rope_fill(float *cs, const span *sp, int n, int rot, float theta)
{
    for (int i = 0; i < n;) {
        int lo = sp[i].lo, hi = sp[i].hi;
        size_t row = sp[i].row;
        for (i++; i < n && sp[i].lo <= hi; i++)
            if (sp[i].hi > hi)
                hi = sp[i].hi;
        attn__rope_rows_table(cs + row * (size_t)rot, lo, hi, rot, theta);
    }
}

/* Carve n floats (64-byte aligned) off the slab at *f. */
static float *carve(float **f, size_t n)
{
    float *r = *f;
    *f += (n + 15) / 16 * 16;
    return r;
}

/*
 * attn_plan_create: see attn.h and plan.h. Lays out the batch matrices
 * (one slab), the RoPE table and the tile tables; nothing is allocated on
 * failure.
 */
int attn_plan_create(attn_plan **out, const attn_config *cfg,
                     const attn_weights *w, const attn_seq *seqs, int n_seqs,
                     char *err)
{
    if (!out)
        return attn__fail(err, ATTN_EINVAL, "out is NULL");
    *out = NULL;
    int rc = attn_config_check(cfg, err);
    if (rc)
        return rc;
    if (!w)
        return attn__fail(err, ATTN_EINVAL, "weights are NULL");
    if (!w->w_q || !w->w_k || !w->w_v || !w->w_o)
        return attn__fail(err, ATTN_EINVAL, "weights.%s is NULL",
                          !w->w_q   ? "w_q"
                          : !w->w_k ? "w_k"
                          : !w->w_v ? "w_v"
                                    : "w_o");
    if (w->layout != ATTN_ROWS && w->layout != ATTN_PANELS)
        return attn__fail(err, ATTN_EINVAL,
                          "weights.layout is %d (ATTN_ROWS or ATTN_PANELS)",
                          w->layout);
    if (!seqs || n_seqs < 1)
        return attn__fail(err, ATTN_EINVAL,
                          "need at least one sequence (n_seqs = %d)", n_seqs);
    size_t floats = 0, T = 0, Cn = 0;
    int cross = 0;
    for (int i = 0; i < n_seqs; i++) {
        if ((rc = attn__seq_check(cfg, &seqs[i], i, &floats, err)))
            return rc;
        for (int j = 0; seqs[i].kv && j < i; j++)
            if (seqs[j].kv == seqs[i].kv)
                return attn__fail(err, ATTN_EINVAL,
                                  "seqs[%d].kv is also seqs[%d].kv", i, j);
        T += (size_t)seqs[i].t;
        Cn += (size_t)ctx_rows(&seqs[i]);
        cross |= seqs[i].context != NULL;
    }
    int dm = cfg->d_model, dmc = cfg->d_model_ctx ? cfg->d_model_ctx : dm;
    int rot = cfg->rope_theta > 0
                  ? (cfg->rope_dims ? cfg->rope_dims : cfg->head_dim)
                  : 0;
    /* The RoPE table's rows: the positions [past, past + rows) of each
     * sequence, merged (rope_spans); a step at position 100000 needs its
     * row, not the 100000 below it, and neither does a new sequence's
     * first step beside it. Spans on the stack for most batches. */
    span local[16], *sp = NULL;
    size_t rope_rows = 0;
    if (rot) {
        sp = n_seqs <= 16 ? local : malloc(sizeof *sp * (size_t)n_seqs);
        if (!sp)
            return attn__fail(err, ATTN_ENOMEM,
                              "out of memory for %d sequences", n_seqs);
        for (int i = 0; i < n_seqs; i++) {
            const attn_seq *q = &seqs[i];
            int past = q->kv ? q->kv->len : 0, c = ctx_rows(q);
            sp[i] = (span){past, past + (q->t > c ? q->t : c), i, 0};
        }
        rope_rows = rope_spans(sp, n_seqs);
    }
    /* Beyond what attn__seq_check counted (Q, K, V, O and a float per row
     * per sequence): gathered X and C, the batch's Y, four ints per row,
     * the RoPE table and the 64-byte rounding of every carve. */
    size_t extra = 0, n, rope_floats = 0;
    int gather = n_seqs > 1;
    if (T > INT32_MAX || Cn > INT32_MAX || rope_rows > INT32_MAX ||
        (gather && (!attn__mul_ok(T, (size_t)dm, &n) ||
                    !attn__add_ok(&extra, 2 * n) ||
                    (cross && (!attn__mul_ok(Cn, (size_t)dmc, &n) ||
                               !attn__add_ok(&extra, n))))) ||
        !attn__add_ok(&extra, 2 * (T + Cn) + 256) ||
        (rot && (!attn__mul_ok(rope_rows, (size_t)rot, &rope_floats) ||
                 !attn__add_ok(&extra, rope_floats))) ||
        !attn__add_ok(&floats, extra) ||
        !attn__mul_ok(floats, sizeof(float), &n)) {
        if (sp != local)
            free(sp);
        return attn__fail(err, ATTN_EOVERFLOW,
                          "the batch's scratch (%zu rows) overflows size_t", T);
    }
    int H = cfg->n_heads, Hkv = cfg->n_kv_heads;
    int dk = cfg->head_dim, dv = cfg->v_head_dim;
    int cbq = attn_panel_cols(cfg, ATTN_W_Q), cbk = attn_panel_cols(cfg, ATTN_W_K),
        cbv = attn_panel_cols(cfg, ATTN_W_V), cbo = attn_panel_cols(cfg, ATTN_W_O);
    size_t n0 = 0, n1, n2 = 0, n3;
    /* read once: the counting and the filling cut the same blocks */
    int inv = atomic_load_explicit(&batch_inv, memory_order_relaxed);
    for (int i = 0; gather && i < n_seqs; i++)
        n0 += blocks(seqs[i].t, PROJ_ROWS) +
              (cross ? blocks(ctx_rows(&seqs[i]), PROJ_ROWS) : 0);
    n1 = 0;
    put_grid(NULL, &n1, TILE_PROJ, MAT_Q, seqs, n_seqs, 0, H * dk, cbq, inv);
    put_grid(NULL, &n1, TILE_PROJ, MAT_K, seqs, n_seqs, 1, Hkv * dk, cbk, inv);
    put_grid(NULL, &n1, TILE_PROJ, MAT_V, seqs, n_seqs, 1, Hkv * dv, cbv, inv);
    double fl = 0;
    for (int i = 0; i < n_seqs; i++) {
        const attn_seq *q = &seqs[i];
        double t = q->t, s = q->s, c = ctx_rows(q);
        double hk = (double)H * dk, hv = (double)H * dv;
        double kv = (double)Hkv * (dk + dv);
        fl += 2 * t * dm * hk + 2 * c * dmc * kv + 2 * t * s * (hk + hv) +
              2 * t * hv * dm;
        n2 += group_step(q) ? (size_t)Hkv
                            : (size_t)H * blocks(q->t, ATTN__BQ);
    }
    n3 = 0;
    put_grid(NULL, &n3, TILE_OUT, 0, seqs, n_seqs, 0, dm, cbo, inv);
    attn_plan *p = plan_alloc(cfg, n_seqs);
    if (!p)
        goto nomem;
    p->w = *w;
    p->seqs = seqs;
    p->flops = fl;
    p->cfg.d_model_ctx = dmc;
    p->cfg.rope_dims = rot;
    p->T = (int)T;
    p->Cn = (int)Cn;
    p->buf = calloc((size_t)n_seqs, sizeof(*p->buf));
    int st = 0;
    tile *tt[PLAN_MAX_STAGES] = {0};
    size_t want[PLAN_MAX_STAGES] = {0};
    if (gather)
        want[st++] = n0;
    want[st++] = n1;
    want[st++] = n2;
    want[st++] = n3;
    p->n_stages = st;
    for (int k = 0; k < st; k++)
        p->tiles[k] = tt[k] = calloc(want[k] ? want[k] : 1, sizeof(tile));
    p->scratch_bytes = floats * sizeof(float);
    p->slab = aligned_alloc(64, (p->scratch_bytes + 63) / 64 * 64);
    if (!p->buf || !p->slab)
        goto nomem;
    for (int k = 0; k < st; k++)
        if (!tt[k])
            goto nomem;
    float *f = p->slab;
    if (gather) {
        p->X = p->Xg = carve(&f, T * (size_t)dm);
        p->Y = carve(&f, T * (size_t)dm);
        p->C = cross ? (p->Cg = carve(&f, Cn * (size_t)dmc)) : p->X;
    } else {
        p->X = seqs[0].x;
        p->C = seqs[0].context ? seqs[0].context : seqs[0].x;
        p->Y = seqs[0].y;
    }
    p->Q = carve(&f, T * (size_t)H * dk);
    p->K = carve(&f, Cn * (size_t)Hkv * dk);
    p->V = carve(&f, Cn * (size_t)Hkv * dv);
    p->O = carve(&f, T * (size_t)H * dv);
    p->qpos = (int *)carve(&f, T);
    p->kpos = (int *)carve(&f, Cn);
    p->qseq = (int *)carve(&f, T);
    p->kseq = (int *)carve(&f, Cn);
    p->live = (uint8_t *)carve(&f, T / sizeof(float) + 1);
    if (rot) {
        p->rope = carve(&f, rope_floats);
        rope_fill(p->rope, sp, n_seqs, rot, cfg->rope_theta);
    }
    /* Rows of each sequence in the batch matrices, their positions and
     * their tiles. */
    int xoff = 0, coff = 0, g = gather ? 1 : 0;
    for (int i = 0; i < n_seqs; i++) {
        const attn_seq *q = &seqs[i];
        seqbuf *b = &p->buf[i];
        b->xoff = xoff;
        b->coff = coff;
        b->past = q->kv ? q->kv->len : 0;
        b->crows = ctx_rows(q);
        b->ctx = q->context ? q->context : q->x;
        for (int r = 0; r < q->t; r++)
            p->qseq[xoff + r] = i;
        for (int r = 0; r < b->crows; r++)
            p->kseq[coff + r] = i;
        if (gather) {
            put_blocks(tt[0], &p->n_tiles[0], TILE_GATHER, i, 0, q->t,
                       PROJ_ROWS, 0);
            if (cross)
                put_blocks(tt[0], &p->n_tiles[0], TILE_GATHER, i, 1, b->crows,
                           PROJ_ROWS, 0);
        }
        if (group_step(q)) {
            for (int h = 0; h < Hkv; h++) {
                tile *x = &tt[g + 1][p->n_tiles[g + 1]++];
                x->kind = TILE_GROUP;
                x->item = i;
                x->head = h * (H / Hkv);
                x->r1 = 1;
            }
        } else {
            for (int h = 0; h < H; h++)
                put_blocks(tt[g + 1], &p->n_tiles[g + 1], TILE_ATT, i, h, q->t,
                           ATTN__BQ, q->causal);
        }
        xoff += q->t;
        coff += b->crows;
    }
    put_grid(tt[g], &p->n_tiles[g], TILE_PROJ, MAT_Q, seqs, n_seqs, 0, H * dk,
             cbq, inv);
    put_grid(tt[g], &p->n_tiles[g], TILE_PROJ, MAT_K, seqs, n_seqs, 1,
             Hkv * dk, cbk, inv);
    put_grid(tt[g], &p->n_tiles[g], TILE_PROJ, MAT_V, seqs, n_seqs, 1,
             Hkv * dv, cbv, inv);
    put_grid(tt[g + 2], &p->n_tiles[g + 2], TILE_OUT, 0, seqs, n_seqs, 0, dm,
             cbo, inv);
    /* Each row's RoPE table row: its span's row, plus its place in it */
    for (int k = 0; rot && k < n_seqs; k++) {
        const seqbuf *b = &p->buf[sp[k].seq];
        int t = seqs[sp[k].seq].t;
        for (int r = 0; r < t; r++)
            p->qpos[b->xoff + r] = (int)sp[k].row + r;
        for (int r = 0; r < b->crows; r++)
            p->kpos[b->coff + r] = (int)sp[k].row + r;
    }
    if (sp != local)
        free(sp);
    attn__blas_single();
    *out = p;
    return 0;
nomem:
    if (sp != local)
        free(sp);
    attn_plan_destroy(p);
    return attn__fail(err, ATTN_ENOMEM,
                      "out of memory allocating %zu bytes of scratch",
                      floats * sizeof(float));
}

/*
 * attn_plan_create_raw: one stage of item x head x query-block tiles; the
 * scratch is each item's q times scale (tile_raw writes its rows), the
 * kernels use the stack and the caller's output buffers.
 */
int attn_plan_create_raw(attn_plan **out, const attn_config *cfg,
                         const attn_raw *items, int n_items, char *err)
{
    if (!out)
        return attn__fail(err, ATTN_EINVAL, "out is NULL");
    *out = NULL;
    int rc = attn__raw_config_check(cfg, err);
    if (rc)
        return rc;
    if (!items || n_items < 1)
        return attn__fail(err, ATTN_EINVAL,
                          "need at least one item (n_items = %d)", n_items);
    size_t n0 = 0, floats = 0, n;
    for (int i = 0; i < n_items; i++) {
        if ((rc = attn__raw_check(cfg, &items[i], i, err)))
            return rc;
        n0 += (size_t)cfg->n_heads * blocks(items[i].t, ATTN__BQ);
        if (!attn__mul_ok((size_t)cfg->n_heads * (size_t)items[i].t,
                          (size_t)cfg->head_dim, &n) ||
            !attn__add_ok(&floats, (n + 15) / 16 * 16) ||
            !attn__mul_ok(floats, sizeof(float), &n))
            return attn__fail(err, ATTN_EOVERFLOW,
                              "the scaled q of %d items overflows size_t",
                              n_items);
    }
    double fl = 0;
    for (int i = 0; i < n_items; i++)
        fl += 2.0 * cfg->n_heads * items[i].t * items[i].s *
              (cfg->head_dim + cfg->v_head_dim);
    attn_plan *p = plan_alloc(cfg, n_items);
    if (!p)
        goto nomem;
    p->raw = items;
    p->flops = fl;
    p->n_stages = 1;
    p->tiles[0] = calloc(n0, sizeof(tile));
    p->rawq = malloc(sizeof(*p->rawq) * (size_t)n_items);
    p->scratch_bytes = floats * sizeof(float);
    p->slab = aligned_alloc(64, (p->scratch_bytes + 63) / 64 * 64);
    if (!p->tiles[0] || !p->rawq || !p->slab)
        goto nomem;
    float *f = p->slab;
    for (int i = 0; i < n_items; i++)
        p->rawq[i] = carve(&f, (size_t)cfg->n_heads * (size_t)items[i].t *
                                   (size_t)cfg->head_dim);
    for (int i = 0; i < n_items; i++)
        for (int h = 0; h < cfg->n_heads; h++)
            put_blocks(p->tiles[0], &p->n_tiles[0], TILE_RAW, i, h, items[i].t,
                       ATTN__BQ, items[i].causal);
    attn__blas_single();
    *out = p;
    return 0;
nomem:
    attn_plan_destroy(p);
    return attn__fail(err, ATTN_ENOMEM, "out of memory for the plan");
}

void attn_plan_destroy(attn_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < PLAN_MAX_STAGES; i++)
        free(p->tiles[i]);
    free(p->buf);
    free(p->rawq);
    free(p->slab);
    free(p->bad);
    free(p);
}

int attn_plan_n_stages(const attn_plan *p)
{
    return p ? p->n_stages : 0;
}

size_t attn_plan_n_tiles(const attn_plan *p, int stage)
{
    if (!p || stage < 0 || stage >= p->n_stages)
        return 0;
    return p->n_tiles[stage];
}

size_t attn_plan_scratch_bytes(const attn_plan *p)
{
    return p ? p->scratch_bytes : 0;
}

size_t attn_plan_item_bytes(const attn_config *cfg, int t, int s, int raw)
{
    size_t tiles, n = 0, b;
    if (!cfg || t < 0 || s < 0 || cfg->n_heads < 1 || cfg->head_dim < 0)
        return SIZE_MAX;
    if (!attn__mul_ok((size_t)cfg->n_heads, blocks(t, ATTN__BQ), &tiles))
        return SIZE_MAX;
    if (raw) {
        /* its flag, its q's place in the slab, its tiles and its q times
         * scale (carved: rounded up to 16 floats) */
        b = sizeof(int) + sizeof(float *);
        if (!attn__mul_ok((size_t)cfg->n_heads * (size_t)t,
                          (size_t)cfg->head_dim, &n) ||
            !attn__add_ok(&n, 15) ||
            !attn__mul_ok(n / 16 * 16, sizeof(float), &n) ||
            !attn__add_ok(&b, n))
            return SIZE_MAX;
    } else {
        /* its flag, its rows (seqbuf), its RoPE span, its attention tiles
         * (a decoder step's kv-head groups are fewer) and its gather
         * tiles, of x's rows and of the context's */
        b = sizeof(int) + sizeof(seqbuf) + sizeof(span);
        if (!attn__add_ok(&tiles, blocks(t, PROJ_ROWS) + blocks(s, PROJ_ROWS)))
            return SIZE_MAX;
    }
    if (!attn__mul_ok(tiles, sizeof(tile), &n) || !attn__add_ok(&b, n))
        return SIZE_MAX;
    return b;
}

double attn_plan_flops(const attn_plan *p)
{
    return p ? p->flops : 0;
}

void attn_plan_run_tile(attn_plan *p, int stage, size_t i)
{
    if (!p || stage < 0 || stage >= p->n_stages || i >= p->n_tiles[stage])
        return;
    attn__run_tile(p, &p->tiles[stage][i]);
}

typedef struct stage_ctx {
    attn_plan *p;
    int stage;
} stage_ctx;

static void run_cb(void *arg, size_t i)
{
    stage_ctx *s = arg;
    attn_plan_run_tile(s->p, s->stage, i);
}

void attn_plan_run(attn_plan *p, attn_exec *ex)
{
    if (!p)
        return;
    if (p->flops < INLINE_FLOPS)
        ex = NULL;
    for (int st = 0; st < p->n_stages; st++) {
        stage_ctx s = {p, st};
        attn_exec_run(ex, p->n_tiles[st], run_cb, &s);
    }
}

int attn_plan_nonfinite(const attn_plan *p, int item)
{
    if (!p || item < 0 || item >= p->n_items)
        return 0;
    return __atomic_load_n(&p->bad[item], __ATOMIC_RELAXED);
}

/* run_once: run p, destroy it, and return ATTN_ERANGE naming the first
 * item whose results overflowed float32 (or, a step into FP16 or BF16
 * pages, whose keys or values overflowed those), else 0 (attn_forward*). */
static int run_once(attn_plan *p, attn_exec *ex, char *err)
{
    int rc = 0;
    attn_plan_run(p, ex);
    for (int i = 0; i < p->n_items && !rc; i++) {
        if (!attn_plan_nonfinite(p, i))
            continue;
        const attn_kv *kv = p->seqs ? p->seqs[i].kv : NULL;
        attn_kv_dtype dt = kv ? attn_kv_pool_dtype(kv->pool) : ATTN_KV_F32;
        rc = attn__fail(err, ATTN_ERANGE,
                        "item %d: a projection, score or output is not "
                        "finite (%s)", i,
                        dt == ATTN_KV_F16
                            ? "a key or value of 65520 or more, which FP16 "
                              "rounds to infinity (FP16 K/V pages), or "
                              "inputs that overflow float32"
                        : dt == ATTN_KV_BF16
                            ? "a key or value of 3.3962e38 or more, which "
                              "BF16 rounds to infinity (BF16 K/V pages), or "
                              "inputs that overflow float32"
                            : "the inputs overflow float32");
    }
    attn_plan_destroy(p);
    return rc;
}

int attn_forward(const attn_config *cfg, const attn_weights *w,
                 const attn_seq *seqs, int n_seqs, attn_exec *ex, char *err)
{
    attn_plan *p;
    int rc = attn_plan_create(&p, cfg, w, seqs, n_seqs, err);
    return rc ? rc : run_once(p, ex, err);
}

int attn_forward_raw(const attn_config *cfg, const attn_raw *items, int n_items,
                     attn_exec *ex, char *err)
{
    attn_plan *p;
    int rc = attn_plan_create_raw(&p, cfg, items, n_items, err);
    return rc ? rc : run_once(p, ex, err);
}
