/*
 * attn.c - the plan (stages of independent tiles, one scratch slab) and the
 * tiles of one multi-head attention forward pass. Argument checks live in
 * check.c, the per-head maths in kernel.c.
 */
#include "attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec.h"
#include "kernel.h"

/* Token rows per projection tile: large enough that packing a weight
 * matrix is a small share of the GEMM, small enough to spread T = 512 over
 * several threads. */
#define PROJ_ROWS 256

/* attn_plan_run runs plans under this many flops on the calling thread:
 * waking the executor's workers costs more than such a pass (the
 * b1_t16_d64_h4 bench case, 0.6 MFLOP, takes ~12 us inline, ~28 us on a
 * 2-thread executor). */
#define INLINE_FLOPS 2e6

enum { TILE_Q, TILE_K, TILE_V, TILE_ATT, TILE_OUT, TILE_RAW };

typedef struct tile {
    int kind;   /* TILE_* */
    int item;   /* sequence (or raw item) index */
    int head;   /* query head, attention tiles only */
    int r0, r1; /* rows [r0, r1) */
} tile;

/* Scratch of one sequence; all inside the plan's slab. */
typedef struct seqbuf {
    const float *ctx; /* (s, d_model_ctx): context or x */
    float *q;         /* (t, n_heads * head_dim) after bias and RoPE */
    float *k;         /* (s, n_kv_heads * head_dim) after bias and RoPE */
    float *v;         /* (s, n_kv_heads * v_head_dim) */
    float *o;         /* (t, n_heads * v_head_dim) concatenated heads */
    uint8_t *live;    /* (t) 1 when the query row sees at least one key */
} seqbuf;

#define MAX_STAGES 3

struct attn_plan {
    attn_config cfg; /* resolved: scale, rope_dims, d_model_ctx set */
    attn_weights w;
    const attn_seq *seqs; /* (n_items) full layer, or NULL */
    const attn_raw *raw;  /* (n_items) raw SDPA, or NULL */
    int n_items;
    seqbuf *buf; /* (n_items) full layer only */
    float *rope; /* (n_pos, rope_dims): cos | sin, or NULL */
    int n_stages;
    tile *tiles[MAX_STAGES];
    size_t n_tiles[MAX_STAGES];
    void *slab; /* every float of scratch */
    size_t scratch_bytes;
    double flops; /* floating-point operations of the pass (about) */
    int *bad;     /* (n_items) 1 once a value of the item is not finite */
};

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

static attn_plan *plan_alloc(const attn_config *cfg, int n_items)
{
    attn_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->cfg = *cfg;
    if (p->cfg.scale == 0.0f)
        p->cfg.scale = 1.0f / sqrtf((float)cfg->head_dim);
    p->n_items = n_items;
    p->bad = calloc((size_t)n_items, sizeof(*p->bad));
    if (!p->bad) {
        free(p);
        return NULL;
    }
    return p;
}

/*
 * attn_plan_create: stage 0 projects Q (x row blocks), K and V (context
 * row blocks, one tile each), stage 1 runs sequence x head x query-block
 * attention tiles, stage 2 projects the concatenated heads through W_o. One
 * slab holds all scratch: per sequence Q, K, V, O and the live-row flags, plus
 * the RoPE table. Nothing is allocated on failure.
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
    if (!seqs || n_seqs < 1)
        return attn__fail(err, ATTN_EINVAL,
                          "need at least one sequence (n_seqs = %d)", n_seqs);
    size_t floats = 0;
    int n_pos = 0;
    for (int i = 0; i < n_seqs; i++)
        if ((rc = attn__seq_check(cfg, &seqs[i], i, &floats, &n_pos, err)))
            return rc;
    int rot = cfg->rope_theta > 0
                  ? (cfg->rope_dims ? cfg->rope_dims : cfg->head_dim)
                  : 0;
    size_t rope_floats = 0;
    if (rot &&
        (!attn__mul_ok((size_t)n_pos, (size_t)rot, &rope_floats) ||
         !attn__add_ok(&floats, rope_floats) || !attn__add_ok(&floats, 16)))
        return attn__fail(err, ATTN_EOVERFLOW, "RoPE table overflows size_t");
    /* Live flags are bytes; floats counted one per row is plenty. */
    size_t n0 = 0, n1 = 0, n2 = 0;
    double fl = 0;
    for (int i = 0; i < n_seqs; i++) {
        double t = seqs[i].t, s = seqs[i].s;
        double dc = cfg->d_model_ctx ? cfg->d_model_ctx : cfg->d_model;
        double hk = (double)cfg->n_heads * cfg->head_dim;
        double hv = (double)cfg->n_heads * cfg->v_head_dim;
        double kv = (double)cfg->n_kv_heads * (cfg->head_dim + cfg->v_head_dim);
        fl += 2 * t * cfg->d_model * hk + 2 * s * dc * kv +
              2 * t * s * (hk + hv) + 2 * t * hv * cfg->d_model;
        n0 += blocks(seqs[i].t, PROJ_ROWS) + 2 * blocks(seqs[i].s, PROJ_ROWS);
        n1 += (size_t)cfg->n_heads * blocks(seqs[i].t, ATTN__BQ);
        n2 += blocks(seqs[i].t, PROJ_ROWS);
    }
    attn_plan *p = plan_alloc(cfg, n_seqs);
    if (!p)
        goto nomem;
    p->w = *w;
    p->seqs = seqs;
    p->flops = fl;
    if (!p->cfg.d_model_ctx)
        p->cfg.d_model_ctx = cfg->d_model;
    p->cfg.rope_dims = rot;
    p->n_stages = 3;
    p->buf = calloc((size_t)n_seqs, sizeof(*p->buf));
    p->tiles[0] = calloc(n0, sizeof(tile));
    p->tiles[1] = calloc(n1, sizeof(tile));
    p->tiles[2] = calloc(n2, sizeof(tile));
    p->scratch_bytes = floats * sizeof(float);
    p->slab = aligned_alloc(64, (p->scratch_bytes + 63) / 64 * 64);
    if (!p->buf || !p->tiles[0] || !p->tiles[1] || !p->tiles[2] || !p->slab)
        goto nomem;
    float *f = p->slab;
    size_t hq = (size_t)cfg->n_heads, hk = (size_t)cfg->n_kv_heads;
    size_t dk = (size_t)cfg->head_dim, dv = (size_t)cfg->v_head_dim;
    for (int i = 0; i < n_seqs; i++) {
        const attn_seq *q = &seqs[i];
        seqbuf *b = &p->buf[i];
        size_t t = (size_t)q->t, s = (size_t)q->s;
        b->ctx = q->context ? q->context : q->x;
        b->q = f, f += t * hq * dk;
        b->k = f, f += s * hk * dk;
        b->v = f, f += s * hk * dv;
        b->o = f, f += t * hq * dv;
        b->live = (uint8_t *)f, f += t;
        put_blocks(p->tiles[0], &p->n_tiles[0], TILE_Q, i, 0, q->t, PROJ_ROWS,
                   0);
        put_blocks(p->tiles[0], &p->n_tiles[0], TILE_K, i, 0, q->s, PROJ_ROWS,
                   0);
        put_blocks(p->tiles[0], &p->n_tiles[0], TILE_V, i, 0, q->s, PROJ_ROWS,
                   0);
        for (int h = 0; h < cfg->n_heads; h++)
            put_blocks(p->tiles[1], &p->n_tiles[1], TILE_ATT, i, h, q->t,
                       ATTN__BQ, q->causal);
        put_blocks(p->tiles[2], &p->n_tiles[2], TILE_OUT, i, 0, q->t, PROJ_ROWS,
                   0);
    }
    if (rot) {
        /* Align the table to 16 floats for clean rows. */
        size_t off = (size_t)(f - (float *)p->slab);
        f += (16 - off % 16) % 16;
        p->rope = f;
        attn__rope_table(p->rope, n_pos, rot, cfg->rope_theta);
    }
    attn__blas_single();
    *out = p;
    return 0;
nomem:
    attn_plan_destroy(p);
    return attn__fail(err, ATTN_ENOMEM,
                      "out of memory allocating %zu bytes of scratch",
                      floats * sizeof(float));
}

/*
 * attn_plan_create_raw: one stage of item x head x query-block tiles; no
 * scratch beyond the tile table (the kernels use the stack and the caller's
 * output buffers).
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
    size_t n0 = 0;
    for (int i = 0; i < n_items; i++) {
        if ((rc = attn__raw_check(cfg, &items[i], i, err)))
            return rc;
        n0 += (size_t)cfg->n_heads * blocks(items[i].t, ATTN__BQ);
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
    if (!p->tiles[0])
        goto nomem;
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
    for (int i = 0; i < MAX_STAGES; i++)
        free(p->tiles[i]);
    free(p->buf);
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

double attn_plan_flops(const attn_plan *p)
{
    return p ? p->flops : 0;
}

/* rows [r0, r1) of y (ld n) = x (ld k) w (k, n) + b. */
static void linear_rows(const float *x, int k, const float *w,
                        const float *restrict b, int n, float *y, int r0,
                        int r1)
{
    attn__gemm(0, r1 - r0, n, k, 1.0f, x + (size_t)r0 * k, k, w, n, 0.0f,
               y + (size_t)r0 * n, n);
    if (b)
        for (int r = r0; r < r1; r++) {
            float *restrict row = y + (size_t)r * n; /* never aliases b */
            for (int j = 0; j < n; j++)
                row[j] += b[j];
        }
}

/* Flag item when rows [r0, r1) of m (rows of n) hold a non-finite value:
 * finite inputs whose projection overflowed float32. */
static void check_rows(attn_plan *p, int item, const float *m, size_t n,
                       int r0, int r1)
{
    if (!attn__all_finite(m + (size_t)r0 * n, (size_t)(r1 - r0) * n))
        __atomic_store_n(&p->bad[item], 1, __ATOMIC_RELAXED);
}

/* Copy rows [r0, r1) of m (rows, heads * d) into out (heads, rows, d). */
static void split_heads(const float *m, int rows, int heads, int d, float *out,
                        int r0, int r1)
{
    for (int r = r0; r < r1; r++)
        for (int h = 0; h < heads; h++)
            memcpy(out + ((size_t)h * rows + r) * d,
                   m + ((size_t)r * heads + h) * d, (size_t)d * sizeof(float));
}

/* Query row i sees at least one key (the mask rule of attn_seq). */
static int row_live(const attn_seq *q, int i)
{
    if (i >= q->t_valid)
        return 0;
    int lim =
        q->causal ? (q->s_valid < i + 1 ? q->s_valid : i + 1) : q->s_valid;
    if (!q->mask)
        return lim > 0;
    const uint8_t *m = q->mask + (size_t)i * q->s;
    for (int j = 0; j < lim; j++)
        if (m[j])
            return 1;
    return 0;
}

static void tile_q(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_seq *q = &p->seqs[tl->item];
    seqbuf *b = &p->buf[tl->item];
    int w = c->n_heads * c->head_dim;
    linear_rows(q->x, c->d_model, p->w.w_q, p->w.b_q, w, b->q, tl->r0, tl->r1);
    if (p->rope)
        attn__rope_rows(b->q, (size_t)w, tl->r0, tl->r1, c->n_heads,
                        c->head_dim, c->rope_dims, p->rope);
    check_rows(p, tl->item, b->q, (size_t)w, tl->r0, tl->r1);
    if (q->q)
        split_heads(b->q, q->t, c->n_heads, c->head_dim, q->q, tl->r0, tl->r1);
    for (int i = tl->r0; i < tl->r1; i++)
        b->live[i] = (uint8_t)row_live(q, i);
}

static void tile_k(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_seq *q = &p->seqs[tl->item];
    seqbuf *b = &p->buf[tl->item];
    int wk = c->n_kv_heads * c->head_dim;
    linear_rows(b->ctx, c->d_model_ctx, p->w.w_k, p->w.b_k, wk, b->k, tl->r0,
                tl->r1);
    if (p->rope)
        attn__rope_rows(b->k, (size_t)wk, tl->r0, tl->r1, c->n_kv_heads,
                        c->head_dim, c->rope_dims, p->rope);
    check_rows(p, tl->item, b->k, (size_t)wk, tl->r0, tl->r1);
    if (q->k)
        split_heads(b->k, q->s, c->n_kv_heads, c->head_dim, q->k, tl->r0,
                    tl->r1);
}

static void tile_v(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_seq *q = &p->seqs[tl->item];
    seqbuf *b = &p->buf[tl->item];
    int wv = c->n_kv_heads * c->v_head_dim;
    linear_rows(b->ctx, c->d_model_ctx, p->w.w_v, p->w.b_v, wv, b->v, tl->r0,
                tl->r1);
    check_rows(p, tl->item, b->v, (size_t)wv, tl->r0, tl->r1);
    if (q->v)
        split_heads(b->v, q->s, c->n_kv_heads, c->v_head_dim, q->v, tl->r0,
                    tl->r1);
}

/* tile_att: query rows [r0, r1) of head tl->head of sequence tl->item:
 * scores, softmax and the weighted values into the head's columns of o
 * (and its attention/scores maps when asked). Reads q, k, v of the earlier
 * stages; writes only its own rows of its own head. Pool thread. */
static void tile_att(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_seq *q = &p->seqs[tl->item];
    seqbuf *b = &p->buf[tl->item];
    int h = tl->head, kvh = h / (c->n_heads / c->n_kv_heads);
    size_t ts = (size_t)q->t * (size_t)q->s;
    attn__head hd = {
        .t = q->t,
        .s = q->s,
        .t_valid = q->t_valid,
        .s_valid = q->s_valid,
        .causal = q->causal,
        .dk = c->head_dim,
        .dv = c->v_head_dim,
        .scale = c->scale,
        .mask = q->mask,
        .q = b->q + (size_t)h * c->head_dim,
        .k = b->k + (size_t)kvh * c->head_dim,
        .v = b->v + (size_t)kvh * c->v_head_dim,
        .o = b->o + (size_t)h * c->v_head_dim,
        .ldq = (size_t)c->n_heads * c->head_dim,
        .ldk = (size_t)c->n_kv_heads * c->head_dim,
        .ldv = (size_t)c->n_kv_heads * c->v_head_dim,
        .ldo = (size_t)c->n_heads * c->v_head_dim,
        .att = q->attention ? q->attention + (size_t)h * ts : NULL,
        .sc = q->scores ? q->scores + (size_t)h * ts : NULL,
        .bad = &p->bad[tl->item],
    };
    attn__head_block(&hd, tl->r0, tl->r1);
}

static void tile_out(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_seq *q = &p->seqs[tl->item];
    seqbuf *b = &p->buf[tl->item];
    linear_rows(b->o, c->n_heads * c->v_head_dim, p->w.w_o, p->w.b_o,
                c->d_model, q->y, tl->r0, tl->r1);
    check_rows(p, tl->item, q->y, (size_t)c->d_model, tl->r0, tl->r1);
    /* Padded and fully-masked query rows: y is 0, not b_o. */
    for (int i = tl->r0; i < tl->r1; i++)
        if (!b->live[i])
            memset(q->y + (size_t)i * c->d_model, 0,
                   (size_t)c->d_model * sizeof(float));
}

/* tile_raw: the same for raw item tl->item, whose q, k, v, y are per head
 * (H, T|S, d) blocks given by the caller (t_valid = t, s_valid = s). */
static void tile_raw(attn_plan *p, const tile *tl)
{
    const attn_config *c = &p->cfg;
    const attn_raw *r = &p->raw[tl->item];
    size_t h = (size_t)tl->head, t = (size_t)r->t, s = (size_t)r->s;
    size_t dk = (size_t)c->head_dim, dv = (size_t)c->v_head_dim;
    attn__head hd = {
        .t = r->t,
        .s = r->s,
        .t_valid = r->t,
        .s_valid = r->s,
        .causal = r->causal,
        .dk = c->head_dim,
        .dv = c->v_head_dim,
        .scale = c->scale,
        .mask = r->mask,
        .q = r->q + h * t * dk,
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
    check_rows(p, tl->item, r->y + h * t * dv, dv, tl->r0, tl->r1);
}

void attn_plan_run_tile(attn_plan *p, int stage, size_t i)
{
    if (!p || stage < 0 || stage >= p->n_stages || i >= p->n_tiles[stage])
        return;
    const tile *tl = &p->tiles[stage][i];
    switch (tl->kind) {
    case TILE_Q:
        tile_q(p, tl);
        break;
    case TILE_K:
        tile_k(p, tl);
        break;
    case TILE_V:
        tile_v(p, tl);
        break;
    case TILE_ATT:
        tile_att(p, tl);
        break;
    case TILE_OUT:
        tile_out(p, tl);
        break;
    case TILE_RAW:
        tile_raw(p, tl);
        break;
    }
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
 * item whose results overflowed float32, else 0 (attn_forward*). */
static int run_once(attn_plan *p, attn_exec *ex, char *err)
{
    int rc = 0;
    attn_plan_run(p, ex);
    for (int i = 0; i < p->n_items && !rc; i++)
        if (attn_plan_nonfinite(p, i))
            rc = attn__fail(err, ATTN_ERANGE,
                            "item %d: a projection, score or output is not "
                            "finite (the inputs overflow float32)",
                            i);
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
