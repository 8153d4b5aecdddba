/*
 * maps_slice.c - reading a retained map's entry: its planes sliced (one
 * item, one head or the heads' mean, what = weights, scores, allowed
 * cells) and max-pooled row by row, and its value rows. The store itself
 * (put, evict, acquire) is maps.c; the HTTP rendering maps_http.c.
 */
#include "maps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "server/maps_int.h"

/* Block size so that ceil(n / block) <= max_n. */
static int block_for(int n, int max_n)
{
    if (max_n <= 0 || n <= max_n)
        return 1;
    return (n + max_n - 1) / max_n;
}

int maps_pool_max(const float *in, int t, int s, int max_n, float *out,
                  int *rows, int *cols, int *row_block, int *col_block)
{
    int bt, bs, nr, nc, i, j, r, c;

    if (!in || !out || t < 1 || s < 1)
        return ATTN_EINVAL;
    bt = block_for(t, max_n);
    bs = block_for(s, max_n);
    nr = (t + bt - 1) / bt;
    nc = (s + bs - 1) / bs;
    if (bt == 1 && bs == 1) /* no pooling: a copy */
        memcpy(out, in, (size_t)t * (size_t)s * sizeof(float));
    for (r = 0; bt * bs > 1 && r < nr; r++) {
        float *orow = out + (size_t)r * (size_t)nc;
        for (c = 0; c < nc; c++)
            orow[c] = in[(size_t)r * (size_t)bt * (size_t)s +
                         (size_t)c * (size_t)bs];
        for (i = r * bt; i < t && i < (r + 1) * bt; i++) {
            const float *irow = in + (size_t)i * (size_t)s;
            for (j = 0; j < s; j++) {
                float *o = &orow[j / bs];
                if (irow[j] > *o)
                    *o = irow[j];
            }
        }
    }
    if (rows)
        *rows = nr;
    if (cols)
        *cols = nc;
    if (row_block)
        *row_block = bt;
    if (col_block)
        *col_block = bs;
    return 0;
}

/* allowed: 1 when query i attended key j in (b, h) of e (its row's end or
 * the causal flag, lengths and the explicit mask all agree), else 0. */
static int allowed(const maps__entry *e, int b, int h, int i, int j)
{
    const maps_info *in = &e->info;
    size_t plane, k;

    if (i >= e->t_valid[b] || j >= e->s_valid[b])
        return 0;
    if (e->row_end ? j >= e->row_end[(size_t)b * (size_t)in->t + (size_t)i]
                   : in->causal && j > i)
        return 0;
    if (!e->mask)
        return 1;
    plane = in->mask_planes == 1 ? 0
            : in->mask_planes == in->b ? (size_t)b
                                       : (size_t)b * (size_t)in->h + (size_t)h;
    k = (plane * (size_t)in->t + (size_t)i) * (size_t)in->s + (size_t)j;
    return (e->mask[k >> 3] >> (k & 7)) & 1;
}

/* row_of: row i of what for (b, h) of e (h == -1: the mean over heads,
 * or for MAPS_ALLOWED allowed by any head): the stored row itself for one
 * head's attention or scores, else computed into buf (s floats; the
 * mean sums the heads in order and divides, as the whole plane did). */
static const float *row_of(const maps__entry *e, maps_what what, int b,
                           int h, int i, float *buf)
{
    size_t ts = (size_t)e->info.t * (size_t)e->info.s;
    size_t off = (size_t)i * (size_t)e->info.s;
    int k, j, h0 = h < 0 ? 0 : h, h1 = h < 0 ? e->info.h : h + 1;
    const float *base = what == MAPS_SCORES ? e->scores : e->attention;

    if (what == MAPS_NORM)
        return maps__norm_row(e, b, h, i, buf);
    if (what != MAPS_ALLOWED && h >= 0)
        return base + ((size_t)b * (size_t)e->info.h + (size_t)h) * ts + off;
    for (j = 0; j < e->info.s; j++)
        buf[j] = 0.0f;
    for (k = h0; k < h1; k++) {
        if (what == MAPS_ALLOWED) {
            for (j = 0; j < e->info.s; j++)
                if (allowed(e, b, k, i, j))
                    buf[j] = 1.0f;
            continue;
        }
        const float *src =
            base + ((size_t)b * (size_t)e->info.h + (size_t)k) * ts + off;
        for (j = 0; j < e->info.s; j++)
            buf[j] += src[j];
    }
    if (what != MAPS_ALLOWED)
        for (j = 0; j < e->info.s; j++)
            buf[j] /= (float)e->info.h;
    return buf;
}

size_t maps__row_scratch(const maps_info *in, maps_what what, int h)
{
    return what == MAPS_ALLOWED || what == MAPS_NORM || h < 0
               ? (size_t)in->s * sizeof(float)
                                         : 0;
}

int maps__slice_into(const maps__entry *e, maps_what what, int b, int h,
                     int max_n, maps_cut_fn cut, void *cut_ctx, float *dst,
                     int *rows, int *cols, int *row_block, int *col_block,
                     char *err)
{
    int t = e->info.t, s = e->info.s, bt, bs, nc, i, j;
    float *buf = NULL, *orow;
    const float *row;

    if (what == MAPS_SCORES && !e->scores) {
        snprintf(err, ATTN_ERRMAX, "what: map %s was retained without "
                 "scores (kept only when the retaining request asked for "
                 "the scores output; a sequence's map, when its "
                 "sequence_start step did)", e->info.id);
        return ATTN_EINVAL;
    }
    if (what == MAPS_NORM && !e->vnorm) {
        snprintf(err, ATTN_ERRMAX, "what: map %s keeps no value norms "
                 "(what=norm: a sequence's map keeps none, its values "
                 "change with each step; a stateless request's map keeps "
                 "them)", e->info.id);
        return ATTN_EINVAL;
    }
    bt = block_for(t, max_n);
    bs = block_for(s, max_n);
    nc = (s + bs - 1) / bs;
    if (maps__row_scratch(&e->info, what, h) &&
        !(buf = malloc((size_t)s * sizeof(float)))) {
        snprintf(err, ATTN_ERRMAX, "out of memory");
        return ATTN_ENOMEM;
    }
    for (i = 0; i < t; i++) {
        if (cut && (i & 15) == 0 && cut(cut_ctx)) {
            free(buf); /* its reader went */
            return 1;
        }
        row = row_of(e, what, b, h, i, buf);
        orow = dst + (size_t)(i / bt) * (size_t)nc;
        if (bt == 1 && bs == 1) { /* no pooling: the row itself */
            memcpy(orow, row, (size_t)s * sizeof(float));
            continue;
        }
        /* maps_pool_max's order: each block from its first cell, then
         * the max of its rows' cells in turn */
        if (i % bt == 0)
            for (j = 0; j < nc; j++)
                orow[j] = row[(size_t)j * (size_t)bs];
        for (j = 0; j < s; j++)
            if (row[j] > orow[j / bs])
                orow[j / bs] = row[j];
    }
    free(buf);
    if (rows)
        *rows = (t + bt - 1) / bt;
    if (cols)
        *cols = nc;
    if (row_block)
        *row_block = bt;
    if (col_block)
        *col_block = bs;
    return 0;
}

int maps__check(const maps__entry *e, int b, int h, int allow_mean,
                char *err)
{
    if (b < 0 || b >= e->info.b) {
        snprintf(err, ATTN_ERRMAX, "b: %d is out of range [0, %d)", b,
                 e->info.b);
        return ATTN_EINVAL;
    }
    if (h < (allow_mean ? -1 : 0) || h >= e->info.h) {
        snprintf(err, ATTN_ERRMAX, "h: %d is out of range [0, %d)", h,
                 e->info.h);
        return ATTN_EINVAL;
    }
    return 0;
}

/* Take a reference on id and check b and h; on failure err names the
 * problem and *out is NULL. */
static int acquire_checked(maps_store *st, const char *id, int b, int h,
                           int allow_mean, maps__entry **out, char *err)
{
    maps__entry *e = maps__acquire(st, id);
    int rc;

    *out = NULL;
    if (!e) {
        snprintf(err, ATTN_ERRMAX, "map %s: not retained (unknown or "
                 "evicted)", id ? id : "(null)");
        return ATTN_ENOTFOUND;
    }
    if ((rc = maps__check(e, b, h, allow_mean, err))) {
        maps__release(e);
        return rc;
    }
    *out = e;
    return 0;
}

int maps__slice_cut(const maps__entry *e, maps_what what, int b, int h,
                    int max_n, maps_cut_fn cut, void *cut_ctx, float **out,
                    int *rows, int *cols, int *row_block, int *col_block,
                    char *err)
{
    float *res;
    size_t nr, nc;
    int rc;

    *out = NULL;
    /* the pooled plane only: its rows are read from the stored ones */
    nr = (size_t)((e->info.t + block_for(e->info.t, max_n) - 1) /
                  block_for(e->info.t, max_n));
    nc = (size_t)((e->info.s + block_for(e->info.s, max_n) - 1) /
                  block_for(e->info.s, max_n));
    res = malloc(nr * nc * sizeof(float));
    if (!res) {
        snprintf(err, ATTN_ERRMAX, "out of memory");
        return ATTN_ENOMEM;
    }
    rc = maps__slice_into(e, what, b, h, max_n, cut, cut_ctx, res, rows,
                          cols, row_block, col_block, err);
    if (rc) {
        free(res);
        return rc > 0 ? 0 : rc; /* > 0: its reader went */
    }
    *out = res;
    return 0;
}

int maps_slice_of(maps_store *st, const char *id, maps_what what, int b,
                  int h, int max_n, float **out, int *rows, int *cols,
                  int *row_block, int *col_block, char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *e;
    int rc;

    if (!err)
        err = scratch;
    *out = NULL;
    if ((rc = acquire_checked(st, id, b, h, 1, &e, err)))
        return rc;
    rc = maps__slice_cut(e, what, b, h, max_n, NULL, NULL, out, rows, cols,
                         row_block, col_block, err);
    maps__release(e);
    return rc;
}

int maps_slice(maps_store *st, const char *id, int b, int h, int max_n,
               float **out, int *rows, int *cols, int *row_block,
               int *col_block, char *err)
{
    return maps_slice_of(st, id, MAPS_WEIGHTS, b, h, max_n, out, rows, cols,
                         row_block, col_block, err);
}

int maps__values_entry(const maps__entry *e, int b, int h, float **out,
                       int *rows, int *cols, char *err)
{
    size_t n;
    int kvh;

    *out = NULL;
    if (!e->v) {
        snprintf(err, ATTN_ERRMAX, "what: map %s was retained without "
                 "values (kept only when the retaining request computed "
                 "them)", e->info.id);
        return ATTN_EINVAL;
    }
    kvh = h / (e->info.h / e->info.kv_h);
    n = (size_t)e->info.s * (size_t)e->info.dv; /* counted in maps__entry_build */
    *out = malloc(n * sizeof(float));
    if (!*out) {
        snprintf(err, ATTN_ERRMAX, "out of memory");
        return ATTN_ENOMEM;
    }
    memcpy(*out, e->v + ((size_t)b * (size_t)e->info.kv_h + (size_t)kvh) * n,
           n * sizeof(float));
    *rows = e->info.s;
    *cols = e->info.dv;
    return 0;
}

int maps_values(maps_store *st, const char *id, int b, int h, float **out,
                int *rows, int *cols, char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *e;
    int rc;

    if (!err)
        err = scratch;
    *out = NULL;
    if ((rc = acquire_checked(st, id, b, h, 0, &e, err)))
        return rc;
    rc = maps__values_entry(e, b, h, out, rows, cols, err);
    maps__release(e);
    return rc;
}
