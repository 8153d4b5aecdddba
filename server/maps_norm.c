/*
 * maps_norm.c - what=norm of a retained map (maps_norm.h): the value
 * norms computed when a map is retained, and its rows weighed by them as
 * they are read (maps_slice.c's row_of asks maps__norm_row).
 */
#include "server/maps_norm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/maps_int.h"

/* gram: g[k * dv + l] = W_O^h's rows k and l dotted (k <= l; the
 * d_v x d_v Gram matrix W_O^h W_O^h^T, its upper half), in double, over
 * W_o (n_heads * v_head_dim, d_model) in w's layout: row-major, or column
 * panels (attn.h, ATTN_PANELS) of pw columns, where panel p holds rows
 * h * dv .. h * dv + dv - 1 as one (dv, width_p) block at p * pw * rows
 * + h * dv * width_p. */
static void gram(const attn_config *c, const attn_weights *w, int h,
                 double *g)
{
    size_t rows = (size_t)c->n_heads * (size_t)c->v_head_dim;
    int d = c->d_model, dv = c->v_head_dim, pw = d, p, k, l, q;

    if (w->layout == ATTN_PANELS)
        pw = attn_panel_cols(c, ATTN_W_O);
    memset(g, 0, (size_t)dv * (size_t)dv * sizeof(double));
    for (p = 0; p * pw < d; p++) {
        int wp = d - p * pw < pw ? d - p * pw : pw;
        const float *blk = w->w_o + (size_t)p * (size_t)pw * rows +
                           (size_t)h * (size_t)dv * (size_t)wp;
        for (k = 0; k < dv; k++)
            for (l = k; l < dv; l++) {
                const float *rk = blk + (size_t)k * (size_t)wp;
                const float *rl = blk + (size_t)l * (size_t)wp;
                double sum = 0.0;
                for (q = 0; q < wp; q++)
                    sum += (double)rk[q] * (double)rl[q];
                g[k * dv + l] += sum;
            }
    }
}

int maps_vo_norms(const attn_config *c, const attn_weights *w,
                  const float *v, int n_items, int s,
                  const int32_t *s_valid, float *out)
{
    int H = c->n_heads, kvh = c->n_kv_heads, dv = c->v_head_dim;
    int b, h, j, k, l;
    /* |u W_O^h|^2 = u G u^T with G = W_O^h W_O^h^T: d_v^2 a key instead
     * of d_v x d_model, G made once a head */
    double *g = malloc((size_t)dv * (size_t)dv * sizeof(double));

    if (!g)
        return ATTN_ENOMEM;
    for (h = 0; h < H; h++) {
        gram(c, w, h, g);
        for (b = 0; b < n_items; b++) {
            const float *vh = v + ((size_t)b * (size_t)kvh +
                                   (size_t)(h / (H / kvh))) *
                                      (size_t)s * (size_t)dv;
            float *o = out + ((size_t)b * (size_t)H + (size_t)h) * (size_t)s;
            for (j = 0; j < s; j++) {
                const float *u = vh + (size_t)j * (size_t)dv;
                double sum = 0.0;
                if (s_valid && j >= s_valid[b]) {
                    o[j] = 0.0f;
                    continue;
                }
                for (k = 0; k < dv; k++) {
                    double row = 0.0;
                    for (l = k + 1; l < dv; l++)
                        row += g[k * dv + l] * (double)u[l];
                    sum += (double)u[k] *
                           (g[k * dv + k] * (double)u[k] + 2.0 * row);
                }
                o[j] = (float)sqrt(sum > 0.0 ? sum : 0.0);
            }
        }
    }
    free(g);
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
