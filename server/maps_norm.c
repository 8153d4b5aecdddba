/*
 * maps_norm.c - what=norm of a retained map (maps_norm.h): the value
 * norms computed when a map is retained (with the Gram matrices an
 * instance keeps: maps_grams), and its rows weighed by them as they are
 * read (maps_slice.c's row_of asks maps__norm_row).
 */
#include "server/maps_norm.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/maps_int.h"

/* wo_block: head h's rows of W_o (n_heads * v_head_dim, d_model) in
 * panel p of w's layout: row-major (one panel of d_model columns), or
 * column panels (attn.h, ATTN_PANELS) of pw columns, where panel p holds
 * rows h * dv .. h * dv + dv - 1 as one (dv, width_p) block at p * pw *
 * rows + h * dv * width_p. The block, its width in *wp; NULL past the
 * last panel. */
static const float *wo_block(const attn_config *c, const attn_weights *w,
                             int h, int p, int *wp)
{
    size_t rows = (size_t)c->n_heads * (size_t)c->v_head_dim;
    int d = c->d_model, pw = d;

    if (w->layout == ATTN_PANELS)
        pw = attn_panel_cols(c, ATTN_W_O);
    if ((long long)p * pw >= d)
        return NULL;
    *wp = d - p * pw < pw ? d - p * pw : pw;
    return w->w_o + (size_t)p * (size_t)pw * rows +
           (size_t)h * (size_t)c->v_head_dim * (size_t)*wp;
}

/* gram: g[k * dv + l] = W_O^h's rows k and l dotted (k <= l; the
 * d_v x d_v Gram matrix W_O^h W_O^h^T, its upper half), in double, over
 * W_o's panels (wo_block). */
static void gram(const attn_config *c, const attn_weights *w, int h,
                 double *g)
{
    int dv = c->v_head_dim, p, k, l, q, wp;
    const float *blk;

    memset(g, 0, (size_t)dv * (size_t)dv * sizeof(double));
    for (p = 0; (blk = wo_block(c, w, h, p, &wp)); p++) {
        for (k = 0; k < dv; k++)
            for (l = k; l < dv; l++) {
                const float *rk = blk + (size_t)k * (size_t)wp;
                const float *rl = blk + (size_t)l * (size_t)wp;
                double sum = 0.0;
                for (q = 0; q < wp; q++)
                    sum += (double)rk[q] * (double)rl[q];
                g[(size_t)k * (size_t)dv + (size_t)l] += sum;
            }
    }
}

/* gram_sq: |u W_O^h|^2 of one value row u, as u G u^T from head h's Gram
 * matrix G (gram's upper half; at): d_v^2 multiply-adds. */
static double gram_sq(const attn_config *c, const void *at, int h,
                      const float *u)
{
    const double *g = at;
    int dv = c->v_head_dim, k, l;
    double sum = 0.0;

    (void)h;
    for (k = 0; k < dv; k++) {
        const double *gk = g + (size_t)k * (size_t)dv;
        double row = 0.0;
        for (l = k + 1; l < dv; l++)
            row += gk[l] * (double)u[l];
        sum += (double)u[k] * (gk[k] * (double)u[k] + 2.0 * row);
    }
    return sum;
}

/* direct_sq: |u W_O^h|^2 of one value row u, from W_o itself (at: the
 * attn_weights; wo_block): each of u W_O^h's d_model entries summed over
 * d_v, in double; d_v x d_model multiply-adds. */
static double direct_sq(const attn_config *c, const void *at, int h,
                        const float *u)
{
    int dv = c->v_head_dim, k, p, q, wp;
    const float *blk;
    double sum = 0.0;

    for (p = 0; (blk = wo_block(c, at, h, p, &wp)); p++)
        for (q = 0; q < wp; q++) {
            double x = 0.0;
            for (k = 0; k < dv; k++)
                x += (double)u[k] *
                     (double)blk[(size_t)k * (size_t)wp + (size_t)q];
            sum += x * x;
        }
    return sum;
}

/* head_norms: head h's norms (maps_vo_norms' out rows of h), each key's
 * square from sq (gram_sq with its Gram matrix, or direct_sq). */
static void head_norms(const attn_config *c,
                       double (*sq)(const attn_config *, const void *, int,
                                    const float *),
                       const void *at, int h, const float *v, int n_items,
                       int s, const int32_t *s_valid, float *out)
{
    int H = c->n_heads, kvh = c->n_kv_heads, dv = c->v_head_dim;
    int b, j;

    for (b = 0; b < n_items; b++) {
        const float *vh = v + ((size_t)b * (size_t)kvh +
                               (size_t)(h / (H / kvh))) *
                                  (size_t)s * (size_t)dv;
        float *o = out + ((size_t)b * (size_t)H + (size_t)h) * (size_t)s;
        for (j = 0; j < s; j++) {
            double sum;
            if (s_valid && j >= s_valid[b]) {
                o[j] = 0.0f;
                continue;
            }
            sum = sq(c, at, h, vh + (size_t)j * (size_t)dv);
            o[j] = (float)sqrt(sum > 0.0 ? sum : 0.0);
        }
    }
}

/* wide: are c's value heads wider than its model (d_v > d_model)? The
 * Gram matrices then cost more than they save: d_v^2 doubles a head
 * (an upload's d_v is as wide as its file allows: 2^15 takes 8 GiB for a
 * 256 KiB W_v and W_o) and d_v^2 multiply-adds a key, where |u W_O^h|
 * itself takes d_v x d_model and no memory (direct_sq). */
static int wide(const attn_config *c)
{
    return c->v_head_dim > c->d_model;
}

int maps_vo_norms(const attn_config *c, const attn_weights *w,
                  const float *v, int n_items, int s,
                  const int32_t *s_valid, float *out)
{
    int h, dv = c->v_head_dim;
    double *g;

    if (wide(c)) {
        for (h = 0; h < c->n_heads; h++)
            head_norms(c, direct_sq, w, h, v, n_items, s, s_valid, out);
        return 0;
    }
    /* |u W_O^h|^2 = u G u^T with G = W_O^h W_O^h^T: d_v^2 a key instead
     * of d_v x d_model, G made once a head */
    g = malloc((size_t)dv * (size_t)dv * sizeof(double));
    if (!g)
        return ATTN_ENOMEM;
    for (h = 0; h < c->n_heads; h++) {
        gram(c, w, h, g);
        head_norms(c, gram_sq, g, h, v, n_items, s, s_valid, out);
    }
    free(g);
    return 0;
}

/* ---- the Gram matrices kept for an instance ---------------------------- */

struct maps_grams {
    const attn_config *c;
    const attn_weights *w;
    pthread_mutex_t mu;      /* held while they are made */
    _Atomic(double *) g;     /* (n_heads, d_v, d_v), NULL until made */
    int made;                /* times made (under mu): 0 or 1 */
};

size_t maps_grams_bytes(const attn_config *c)
{
    size_t n;

    if (wide(c)) /* never made (maps_vo_norms' direct_sq) */
        return 0;
    if (__builtin_mul_overflow((size_t)c->v_head_dim,
                               (size_t)c->v_head_dim, &n) ||
        __builtin_mul_overflow(n, (size_t)c->n_heads, &n) ||
        __builtin_mul_overflow(n, sizeof(double), &n))
        return SIZE_MAX;
    return n;
}

int maps_grams_create(maps_grams **out, const attn_config *c,
                      const attn_weights *w)
{
    maps_grams *gs = calloc(1, sizeof *gs);

    *out = NULL;
    if (!gs)
        return ATTN_ENOMEM;
    if (pthread_mutex_init(&gs->mu, NULL) != 0) {
        free(gs);
        return ATTN_ENOMEM;
    }
    gs->c = c;
    gs->w = w;
    atomic_init(&gs->g, NULL);
    *out = gs;
    return 0;
}

void maps_grams_destroy(maps_grams *gs)
{
    if (!gs)
        return;
    free(atomic_load_explicit(&gs->g, memory_order_relaxed));
    pthread_mutex_destroy(&gs->mu);
    free(gs);
}

size_t maps_grams_held(maps_grams *gs)
{
    return gs && atomic_load_explicit(&gs->g, memory_order_acquire)
               ? maps_grams_bytes(gs->c)
               : 0;
}

int maps__grams_made(maps_grams *gs)
{
    int n;

    pthread_mutex_lock(&gs->mu);
    n = gs->made;
    pthread_mutex_unlock(&gs->mu);
    return n;
}

/* grams_get: gs's matrices, made by the first call (the others wait on
 * mu, then read them); NULL when they cannot be allocated (a later call
 * tries again). */
static const double *grams_get(maps_grams *gs)
{
    const attn_config *c = gs->c;
    size_t n = maps_grams_bytes(c), per;
    double *g = atomic_load_explicit(&gs->g, memory_order_acquire);
    int h;

    if (g)
        return g;
    pthread_mutex_lock(&gs->mu);
    g = atomic_load_explicit(&gs->g, memory_order_relaxed);
    if (!g && n != SIZE_MAX && (g = malloc(n))) {
        per = (size_t)c->v_head_dim * (size_t)c->v_head_dim;
        for (h = 0; h < c->n_heads; h++)
            gram(c, gs->w, h, g + (size_t)h * per);
        gs->made++;
        atomic_store_explicit(&gs->g, g, memory_order_release);
    }
    pthread_mutex_unlock(&gs->mu);
    return g;
}

int maps_grams_norms(maps_grams *gs, const float *v, int n_items, int s,
                     const int32_t *s_valid, float *out)
{
    const attn_config *c = gs->c;
    const double *g = wide(c) ? NULL : grams_get(gs);
    size_t per = (size_t)c->v_head_dim * (size_t)c->v_head_dim;
    int h;

    if (!g) /* wide, or no room to keep them: made for this call alone */
        return maps_vo_norms(c, gs->w, v, n_items, s, s_valid, out);
    for (h = 0; h < c->n_heads; h++)
        head_norms(c, gram_sq, g + (size_t)h * per, h, v, n_items, s,
                   s_valid, out);
    return 0;
}

void maps_v_norms(const float *v, size_t n, int dv, float *out)
{
    size_t r;
    int k;

    for (r = 0; r < n; r++) {
        double sum = 0.0;
        for (k = 0; k < dv; k++) {
            double u = v[r * (size_t)dv + (size_t)k];
            sum += u * u;
        }
        out[r] = (float)sqrt(sum);
    }
}

const float *maps__norm_row(const maps__entry *e, int b, int h, int i,
                            float *buf)
{
    size_t ts = (size_t)e->info.t * (size_t)e->info.s;
    int h0 = h < 0 ? 0 : h, h1 = h < 0 ? e->info.h : h + 1, j, k;

    for (j = 0; j < e->info.s; j++) {
        double sum = 0.0;
        for (k = h0; k < h1; k++) {
            size_t bh = (size_t)b * (size_t)e->info.h + (size_t)k;
            float p = e->attention[bh * ts + (size_t)i * (size_t)e->info.s +
                                   (size_t)j];
            if (p != 0.0f) /* a masked key adds nothing, whatever its norm */
                sum += (double)p * (double)e->vnorm[bh * (size_t)e->info.s +
                                                    (size_t)j];
        }
        buf[j] = (float)(sum / (double)(h1 - h0));
    }
    return buf;
}
