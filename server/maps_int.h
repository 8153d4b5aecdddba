/*
 * maps_int.h - the retained-map entry, shared by maps.c (the store),
 * maps_slice.c (reading an entry), maps_grow.c (a sequence's grown map)
 * and maps_http.c (the HTTP rendering). Not for use outside those files.
 */
#ifndef ATTN_MAPS_INT_H
#define ATTN_MAPS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "server/maps.h"

/* One retained request. Immutable after maps_put, except refs and the
 * list links (guarded by the store's lock). */
typedef struct maps__entry {
    maps_info info;
    int refs;          /* the list holds one; each reader one more */
    float *attention;  /* (b, h, t, s) */
    int32_t *t_valid;  /* (b) */
    int32_t *s_valid;  /* (b) */
    int32_t *row_end;  /* (b, t) keys 0 .. row_end - 1 each row attended (a
                          sequence's grown map), or NULL: info.causal says */
    uint8_t *mask;     /* bits of (info.mask_planes, t, s), 1 = may attend;
                          bit k is mask[k >> 3] >> (k & 7) & 1; or NULL */
    float *scores;     /* (b, h, t, s) or NULL */
    float *v;          /* (b, info.kv_h, s, info.dv) or NULL */
    float *vnorm;      /* (b, h, s) value norms (info.norm_of) or NULL */
    char *labels;      /* n_labels NUL-terminated strings back to back */
    size_t *label_off; /* (n_labels) offsets into labels */
    int n_labels;      /* 0, t, or t + s (label_items: that many per item) */
    int label_items;   /* 0: one list for every item; else b lists */
    struct maps__entry *newer, *older;
} maps__entry;

/* maps__acquire: the entry called id with a reference taken, or NULL.
 * maps__release drops a reference (NULL is fine); the last one frees. */
maps__entry *maps__acquire(maps_store *st, const char *id);
void maps__release(maps__entry *e);

/*
 * maps__entry_build: check a's shape and labels and build an unlinked
 * entry holding copies of everything (refs = 1, id not yet assigned), of
 * at most max_bytes. 0 or a negative code with err naming the field.
 * adopt, adopt_scores: malloc'd copies of a->attention and a->scores that
 * the entry takes instead of copying them (on success only), or NULL.
 * maps__entry_free frees an entry that was never put (NULL is fine). Any
 * thread.
 */
int maps__entry_build(const maps_put_args *a, size_t max_bytes, float *adopt,
                      float *adopt_scores, maps__entry **out, char *err);
void maps__entry_free(maps__entry *e);

/* maps__check: b and h in range for e (h == -1, the mean over heads, too
 * when allow_mean); 0, or ATTN_EINVAL with err naming the one that is
 * not. maps__slice_cut and maps__values_entry: maps_slice_of and
 * maps_values on an entry the caller holds a reference on, b and h
 * checked: a reader that also renders e->info (maps_http.c) reads one
 * version throughout, where looking id up twice could meet a sequence's
 * next version the second time. Any thread. */
int maps__check(const maps__entry *e, int b, int h, int allow_mean,
                char *err);
/* maps__slice_cut asks cut(cut_ctx) (NULL: never) before every 16th row
 * of the plane (the first too): when cut says its reader went, 0 with
 * *out NULL (nothing to free). It allocates the (pooled) plane it
 * returns and no more than maps__row_scratch's bytes beside it: the rows
 * are read from the stored ones and pooled as they come, the whole t x s
 * plane is never made. maps__slice_into does so into dst (room for the
 * pooled plane's rows x cols floats), and returns 1 when its reader
 * went. maps__row_scratch: the bytes of the one row a slice of (what,
 * h) computes beside its answer (a head mean, a mask; 0 for one head's
 * attention or scores, read in place). */
size_t maps__row_scratch(const maps_info *in, maps_what what, int h);
int maps__slice_into(const maps__entry *e, maps_what what, int b, int h,
                     int max_n, maps_cut_fn cut, void *cut_ctx, float *dst,
                     int *rows, int *cols, int *row_block, int *col_block,
                     char *err);
int maps__slice_cut(const maps__entry *e, maps_what what, int b, int h,
                    int max_n, maps_cut_fn cut, void *cut_ctx, float **out,
                    int *rows, int *cols, int *row_block, int *col_block,
                    char *err);
/* maps__norm_row: row i of what=norm for (b, h) of e into buf (s
 * floats): weight x its key's value norm, h == -1 the mean of the heads'
 * cells; e->vnorm must be kept. maps_norm.c. */
const float *maps__norm_row(const maps__entry *e, int b, int h, int i,
                            float *buf);
int maps__values_entry(const maps__entry *e, int b, int h, float **out,
                       int *rows, int *cols, char *err);

#endif
