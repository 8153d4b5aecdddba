/*
 * kvpage.h - internal: the layout of a K/V page (kv.h), shared by kv.c and
 * the engine's paged attention. Not part of the public API.
 */
#ifndef ATTN_KVPAGE_H
#define ATTN_KVPAGE_H

#include <stddef.h>

#include "kv.h"

/* How a pool lays out its pages: K (n_kv, page, dk) then V (n_kv, page,
 * dv), elements of dtype. */
typedef struct attn_kv_page_fmt {
    attn_kv_dtype dtype;
    int page;         /* tokens per page */
    int n_kv, dk, dv; /* kv heads, key and value widths per head */
    size_t bytes;     /* one page */
} attn_kv_page_fmt;

/* The layout of kv's pool. */
const attn_kv_page_fmt *attn__kv_fmt(const attn_kv *kv);

/* attn__kv_row: address of row `row` of kv head h in pages, keys (which 0)
 * or values (which 1). Rows of one head inside one page are contiguous. */
void *attn__kv_row(const attn_kv_page_fmt *f, void *const *pages, int which,
                   int h, int row);

/* attn__kv_put: store one FP32 row x (dk or dv floats) at row `row`,
 * converting to the pool's dtype. attn__kv_get: n FP32 rows from `row` on
 * into out (n, dk or dv), widening. */
void attn__kv_put(const attn_kv_page_fmt *f, void *const *pages, int which,
                  int h, int row, const float *x);
void attn__kv_get(const attn_kv_page_fmt *f, void *const *pages, int which,
                  int h, int row, int n, float *out);

#endif
