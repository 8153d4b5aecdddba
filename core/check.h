/*
 * check.h - internal: the engine's argument checks (check.c), used by
 * attn.c. Every function returns 0 or a negative ATTN_E* code with a
 * message in err (ATTN_ERRMAX bytes, may be NULL) naming the field.
 */
#ifndef ATTN_CHECK_H
#define ATTN_CHECK_H

#include <stddef.h>

#include "attn.h"

/* attn__fail: format the message into err (when non-NULL), return code. */
int attn__fail(char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* *out = a * b, or 0 when it overflows size_t (1 on success). */
int attn__mul_ok(size_t a, size_t b, size_t *out);
/* *acc += b, or 0 when it overflows size_t (1 on success). */
int attn__add_ok(size_t *acc, size_t b);

/* The fields the raw path uses: n_heads, head_dim, v_head_dim, scale. */
int attn__raw_config_check(const attn_config *c, char *err);

/* seqs[i] against c: sizes, lengths, NULL buffers, overflow. Adds its
 * scratch floats to *floats. */
int attn__seq_check(const attn_config *c, const attn_seq *q, int i,
                    size_t *floats, char *err);

/* items[i] against c: sizes, NULL buffers, overflow. */
int attn__raw_check(const attn_config *c, const attn_raw *r, int i, char *err);

#endif
