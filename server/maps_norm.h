/*
 * maps_norm.h - the value norms a retained map keeps for what=norm, the
 * norm-based attention of Kobayashi et al. 2020 ("Attention is Not Only a
 * Weight: Analyzing Transformers with Vector Norms"): cell (i, j) of head
 * h is alpha_ij^h |v_j^h W_O^h|_2, the length of what key j adds to query
 * i's output through head h (before b_o). A map keeps the [B, H, S] norms
 * (computed when it is retained, from the weights of the instance that
 * answered, through the Gram matrices that instance keeps: maps_grams),
 * the cells are weighed as they are read (maps_norm.c: maps__norm_row).
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
 * d_v x d_v Gram matrix once a call (n_heads * d_v^2 / 2 * d_model
 * multiply-adds; maps_grams keeps them across calls), then d_v^2 a key
 * (n_items * s * n_heads * d_v^2), in
 * double, each norm rounded to float once; for heads wider than the
 * model (d_v > d_model, where the matrices would cost more than they
 * save) u W_O^h itself, d_v x d_model a key, no scratch. c must have
 * passed attn_config_check. 0, or ATTN_ENOMEM (its d_v^2 doubles of
 * scratch). Any thread.
 */
int maps_vo_norms(const attn_config *c, const attn_weights *w,
                  const float *v, int n_items, int s,
                  const int32_t *s_valid, float *out);

/*
 * maps_grams: one weight set's Gram matrices W_O^h W_O^h^T (n_heads x
 * d_v x d_v doubles, maps_grams_bytes), kept so that each retained
 * request pays d_v^2 a key and head, not the n_heads * d_v^2 / 2 *
 * d_model multiply-adds of the matrices again: a server instance's
 * (srv_inst.grams), made by its first retained request (an instance
 * nobody retains on pays neither their time nor their memory) and freed
 * with it; a reload's new instance has its own.
 *
 * maps_grams_create: an empty cache for c and w, which must outlive it
 * (a model's own). 0, or ATTN_ENOMEM (nothing made). Any thread.
 * maps_grams_destroy: frees it and its matrices (NULL: nothing); no call
 * on it may run.
 * maps_grams_norms: maps_vo_norms(c, w, ...) of its c and w, bit for
 * bit (the same sums in the same order), from the matrices made by the
 * first call (under a mutex: calls from any number of threads at once
 * make them once, the others wait for them). When they cannot be
 * allocated each head's is made for the call alone, as maps_vo_norms
 * does, and a later call tries again. 0, or ATTN_ENOMEM (not even
 * maps_vo_norms' scratch). Any thread.
 * maps_grams_bytes: the bytes c's matrices take (SIZE_MAX past size_t:
 * never made; 0 when d_v > d_model: none are made, each call computes
 * its norms directly as maps_vo_norms does); maps_grams_held: those gs
 * holds now, 0 before they are made or for NULL. Any thread.
 */
typedef struct maps_grams maps_grams;

int maps_grams_create(maps_grams **out, const attn_config *c,
                      const attn_weights *w);
void maps_grams_destroy(maps_grams *gs);
int maps_grams_norms(maps_grams *gs, const float *v, int n_items, int s,
                     const int32_t *s_valid, float *out);
size_t maps_grams_bytes(const attn_config *c);
size_t maps_grams_held(maps_grams *gs);
/* maps__grams_made: how many times gs's matrices were made (0 or 1), for
 * tests. */
int maps__grams_made(maps_grams *gs);

/* maps_v_norms: out[r] = |row r of v|_2 for the n rows of width dv (sdpa,
 * which has no W_o), in double, rounded once. Any thread. */
void maps_v_norms(const float *v, size_t n, int dv, float *out);

#endif
