/*
 * maps_norm.h - the value norms a retained map keeps for what=norm, the
 * norm-based attention of Kobayashi et al. 2020 ("Attention is Not Only a
 * Weight: Analyzing Transformers with Vector Norms"): cell (i, j) of head
 * h is alpha_ij^h |v_j^h W_O^h|_2, the length of what key j adds to query
 * i's output through head h (before b_o). A map keeps the [B, H, S] norms
 * (computed when it is retained, from the weights of the instance that
 * answered), the cells are weighed as they are read (maps_norm.c:
 * maps__norm_row).
 */
#ifndef ATTN_MAPS_NORM_H
#define ATTN_MAPS_NORM_H

#include <stddef.h>
#include <stdint.h>

#include "core/attn.h"

/*
 * maps_vo_norms: out[(b * n_heads + h) * s + j] = |v_j^h W_O^h|_2 for
 * item b < n_items, query head h, key j < s_valid[b] (0 for keys past it:
 * their weight is 0); v is the engine's (n_items, n_kv_heads, s,
 * v_head_dim) value rows (query head h reads kv head h / (n_heads /
 * n_kv_heads)), W_O^h rows h * v_head_dim .. + v_head_dim of w->w_o (row
 * or panel layout, attn.h), as |u W|^2 = u (W W^T) u^T: each head's
 * d_v x d_v Gram matrix once (n_heads * d_v^2 / 2 * d_model
 * multiply-adds), then d_v^2 a key (n_items * s * n_heads * d_v^2), in
 * double, each norm rounded to float once. c must have passed
 * attn_config_check. 0, or ATTN_ENOMEM (its d_v^2 doubles of scratch).
 * Any thread.
 */
int maps_vo_norms(const attn_config *c, const attn_weights *w,
                  const float *v, int n_items, int s,
                  const int32_t *s_valid, float *out);

/* maps_v_norms: out[r] = |row r of v|_2 for the n rows of width dv (sdpa,
 * which has no W_o), in double, rounded once. Any thread. */
void maps_v_norms(const float *v, size_t n, int dv, float *out);

#endif
