/*
 * maps_grow.c - a sequence's retained map grown by the rows of its next
 * step (maps_grow_make; maps_grow_put, in maps.c, puts it in the store
 * once the step has been answered). See maps.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "server/maps.h"
#include "server/maps_int.h"

/* What a grown map's arguments point into (malloc'd; the entry adopts att
 * and sc, the rest are freed once it is built). */
typedef struct grown_bufs {
    float *att;          /* (h, T, S) */
    float *sc;           /* (h, T, S) scores, when old keeps them; or NULL */
    int32_t *ends;       /* (T) keys 0 .. ends[i] - 1 row i attended */
    const char **labels; /* (T) into old's labels and a's, or NULL */
} grown_bufs;

/* old_end: the keys 0 .. old_end - 1 row i of old attended. */
static int old_end(const maps__entry *old, int i)
{
    if (old->row_end)
        return old->row_end[i];
    return old->info.causal ? i + 1 : old->info.s;
}

/* keep_rows: head k of (old's plane from, a's rows new) into dst (h, T,
 * S): the first t0 rows of old on keys 0 .. t0-1 (keys past t0 are the
 * tokens a step that rewound the sequence replaced, or, growing, keys the
 * rows never saw: they read 0, dst being zeroed), then a's rows. */
static void keep_rows(float *dst, const float *from, const float *new_rows,
                      const maps__entry *old, int t0, const maps_put_args *a,
                      int k)
{
    size_t S = (size_t)a->s, T = (size_t)t0 + (size_t)a->t;
    int i, os = old->info.s;
    const float *src = from + (size_t)k * (size_t)old->info.t * (size_t)os;
    dst += (size_t)k * T * S;
    for (i = 0; i < t0; i++)
        memcpy(dst + (size_t)i * S, src + (size_t)i * (size_t)os,
               (size_t)(os < t0 ? os : t0) * sizeof(float));
    if (a->t)
        memcpy(dst + (size_t)t0 * S, new_rows + (size_t)k * (size_t)a->t * S,
               (size_t)a->t * S * sizeof(float));
}

/* grown_args: the whole map after a step, into g and buf: the first t0
 * rows of old (widened to a->s keys) then a's rows, weights and (when old
 * keeps them) scores; each row's end. 0, ATTN_EINVAL with err (map id)
 * when it is too big for a store of max_bytes, or ATTN_ENOMEM (buf holds
 * what was allocated). Too big is said before the grown map is
 * allocated: a step past physical memory ended its map "out of memory",
 * and one below it allocated and filled the map first (maps__entry_build
 * refused it after). need is what maps__entry_build counts, but a byte a
 * label: it refuses the rest. */
static int grown_args(const maps__entry *old, int t0, const maps_put_args *a,
                      size_t max_bytes, const char *id, maps_put_args *g,
                      grown_bufs *buf, char *err)
{
    size_t S = (size_t)a->s, T = (size_t)t0 + (size_t)a->t, n, need;
    int k, i;
    int labels = old->n_labels == old->info.t || (a->t && a->n_tokens == a->t);
    memset(buf, 0, sizeof *buf);
    if (__builtin_mul_overflow(T, S, &n) ||
        __builtin_mul_overflow(n, (size_t)a->h, &n) ||
        __builtin_mul_overflow(n, sizeof(float), &n) ||
        __builtin_mul_overflow(n, (size_t)(old->scores ? 2 : 1), &need) ||
        __builtin_add_overflow(need, T * sizeof(int32_t) + sizeof(maps__entry) +
                                         2 * sizeof(int32_t) +
                                         (labels ? T * (sizeof(size_t) + 1) : 0),
                               &need) ||
        need > max_bytes) {
        snprintf(err, ATTN_ERRMAX, "map %s: %zu rows over %d keys (%d "
                 "head%s%s) need more than the whole retained-map store "
                 "(%zu bytes, maps-bytes); raise --maps-bytes to keep "
                 "maps this long", id, T, a->s, a->h, a->h == 1 ? "" : "s",
                 old->scores ? ", with scores" : "", max_bytes);
        return ATTN_EINVAL;
    }
    buf->att = calloc(1, n ? n : 1);
    buf->sc = old->scores ? calloc(1, n ? n : 1) : NULL;
    buf->ends = malloc(T ? T * sizeof(int32_t) : 1);
    if (!buf->att || (old->scores && !buf->sc) || !buf->ends)
        return ATTN_ENOMEM;
    for (k = 0; k < a->h; k++) {
        keep_rows(buf->att, old->attention, a->attention, old, t0, a, k);
        if (buf->sc)
            keep_rows(buf->sc, old->scores, a->scores, old, t0, a, k);
    }
    /* a kept row attended what it did, on keys that are still the same
     * tokens; a new row at position t0 + i the keys up to itself
     * (causal) or every key */
    for (i = 0; i < t0; i++)
        buf->ends[i] = old_end(old, i) < t0 ? old_end(old, i) : t0;
    for (i = 0; i < a->t; i++)
        buf->ends[t0 + i] = a->causal ? t0 + i + 1 : a->s;
    memset(g, 0, sizeof *g);
    g->model = old->info.model;
    g->b = 1;
    g->h = a->h;
    g->t = (int)T;
    g->s = a->s;
    g->attention = buf->att;
    g->scores = buf->sc;
    g->row_end = buf->ends;
    g->causal = old->info.causal;
    g->dk = old->info.dk;
    g->scale = old->info.scale;
    if (labels) {
        buf->labels = malloc(T * sizeof(char *));
        if (!buf->labels)
            return ATTN_ENOMEM;
        for (i = 0; i < (int)T; i++)
            buf->labels[i] = i < t0 ? (old->n_labels ? old->labels + old->label_off[i] : "")
                                    : (a->n_tokens ? a->tokens[i - t0] : "");
        g->tokens = buf->labels;
        g->n_tokens = (int)T;
    }
    return 0;
}

int maps_grow_make(maps_store *st, const char *id, int t0,
                   const maps_put_args *a, maps_grown **out, char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *old, *e = NULL;
    maps_put_args g;
    grown_bufs buf;
    size_t max_bytes;
    int rc;

    *out = NULL;
    if (!err)
        err = scratch;
    old = maps__acquire(st, id);
    if (!old) {
        snprintf(err, ATTN_ERRMAX, "map %s: evicted", id ? id : "(null)");
        return ATTN_ENOTFOUND;
    }
    if (old->info.b != 1 || old->info.h != a->h || t0 < 0 ||
        t0 > old->info.t || a->b != 1 || a->t < 0 ||
        (long long)a->s != (long long)t0 + a->t || (a->t && !a->attention) ||
        (a->n_tokens != 0 && a->n_tokens != a->t)) {
        snprintf(err, ATTN_ERRMAX, "map %s: rows [%d, %d) x %d key%s do "
                 "not extend a [%d, %d, %d, %d] map", id, t0, t0 + a->t, a->s,
                 a->s == 1 ? "" : "s", old->info.b, old->info.h, old->info.t,
                 old->info.s);
        maps__release(old);
        return ATTN_EINVAL;
    }
    if (old->scores && a->t && !a->scores) {
        snprintf(err, ATTN_ERRMAX, "map %s keeps scores: rows [%d, %d) "
                 "came without them", id, t0, t0 + a->t);
        maps__release(old);
        return ATTN_EINVAL;
    }
    maps_stats(st, NULL, &max_bytes, NULL, NULL);
    rc = grown_args(old, t0, a, max_bytes, id, &g, &buf, err);
    if (!rc)
        rc = maps__entry_build(&g, max_bytes, buf.att, buf.sc, &e, err);
    else if (rc == ATTN_ENOMEM)
        snprintf(err, ATTN_ERRMAX, "map %s: out of memory", id);
    if (rc) { /* else the entry holds them */
        free(buf.att);
        free(buf.sc);
    }
    free(buf.ends);
    free(buf.labels);
    if (!rc) {
        e->info.created_ms = old->info.created_ms;
        memcpy(e->info.id, old->info.id, sizeof e->info.id);
        *out = e;
    }
    maps__release(old);
    return rc;
}

void maps_grown_free(maps_grown *g)
{
    if (g)
        maps__entry_free(g);
}
