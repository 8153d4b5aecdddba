/*
 * panels.c - weight matrices as column panels (attn.h, ATTN_PANELS): the
 * panels' widths, which are also the column blocks of a batch's projection
 * tiles (attn.c), and the conversion from row-major.
 */
#include "attn.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Columns per panel, and per projection tile (rounded to whole heads): a
 * weight matrix is cut into column blocks, so a batch of one-token steps
 * (few rows) still spreads over every thread while each tile reads only
 * its own columns: the whole matrix is read once per batch. */
#define PANEL_COLS 256

static int whole_heads(int width, int dh)
{
    int c = dh >= PANEL_COLS ? dh : PANEL_COLS / dh * dh;
    return c < width ? c : width;
}

int attn_panel_cols(const attn_config *c, int which)
{
    int dk = c->head_dim, dv = c->v_head_dim;
    switch (which) {
    case ATTN_W_Q:
        return whole_heads(c->n_heads * dk, dk);
    case ATTN_W_K:
        return whole_heads(c->n_kv_heads * dk, dk);
    case ATTN_W_V:
        return whole_heads(c->n_kv_heads * dv, dv);
    default:
        return whole_heads(c->d_model, 1);
    }
}

int attn_weights_to_panels(const attn_config *c, float *const m[4],
                           char *err)
{
    size_t ctx = (size_t)(c->d_model_ctx ? c->d_model_ctx : c->d_model);
    size_t rows[4] = {(size_t)c->d_model, ctx, ctx,
                      (size_t)c->n_heads * (size_t)c->v_head_dim};
    size_t width[4] = {(size_t)c->n_heads * (size_t)c->head_dim,
                       (size_t)c->n_kv_heads * (size_t)c->head_dim,
                       (size_t)c->n_kv_heads * (size_t)c->v_head_dim,
                       (size_t)c->d_model};
    size_t most = 0;
    for (int k = 0; k < 4; k++)
        if (rows[k] * width[k] > most)
            most = rows[k] * width[k];
    float *tmp = malloc(most * sizeof(float));
    if (!tmp)
        return attn__fail(err, ATTN_ENOMEM,
                          "out of memory for %zu bytes (weights to panels)",
                          most * sizeof(float));
    for (int k = 0; k < 4; k++)
        attn_to_panels(m[k], rows[k], width[k],
                       (size_t)attn_panel_cols(c, ATTN_W_Q + k), tmp);
    free(tmp);
    return 0;
}

void attn_to_panels(float *m, size_t rows, size_t width, size_t pw,
                    float *tmp)
{
    if (pw == 0 || pw >= width)
        return; /* one panel: the row-major matrix itself (0: not a width) */
    memcpy(tmp, m, rows * width * sizeof(float));
    float *out = m;
    for (size_t j0 = 0; j0 < width; j0 += pw) {
        size_t w = width - j0 < pw ? width - j0 : pw;
        for (size_t i = 0; i < rows; i++, out += w)
            memcpy(out, tmp + i * width + j0, w * sizeof(float));
    }
}
