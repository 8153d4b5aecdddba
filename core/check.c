/*
 * check.c - argument checks of the engine: configuration, sequences and raw
 * items, every size product checked for overflow before anything is
 * allocated. Messages name the offending field.
 */
#include "check.h"
#include "kernel.h"
#include "kvpage.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

int attn__fail(char *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, ATTN_ERRMAX, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* *out = a * b, or 0 when it overflows size_t. */
int attn__mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static int mul3_ok(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    return attn__mul_ok(a, b, &ab) && attn__mul_ok(ab, c, out);
}

int attn__add_ok(size_t *acc, size_t b)
{
    if (b > SIZE_MAX - *acc)
        return 0;
    *acc += b;
    return 1;
}

/* Heads-wide widths are BLAS leading dimensions: they must fit an int. */
static int width_ok(int a, int b)
{
    return (long long)a * b <= INT_MAX;
}

/*
 * attn_config_check: every size positive (d_model_ctx 0 means d_model),
 * H_kv divides H, rope_dims even and <= head_dim, scale and rope_theta
 * finite, RoPE's angles finite at every position (attn__rope_finite),
 * head-wide widths within int (BLAS leading dimensions) and weight sizes
 * within size_t.
 */
int attn_config_check(const attn_config *c, char *err)
{
    if (!c)
        return attn__fail(err, ATTN_EINVAL, "config is NULL");
    if (c->d_model < 1)
        return attn__fail(err, ATTN_EINVAL, "d_model = %d must be >= 1",
                          c->d_model);
    if (c->d_model_ctx < 0)
        return attn__fail(err, ATTN_EINVAL,
                          "d_model_ctx = %d must be >= 1 (0 = d_model)",
                          c->d_model_ctx);
    /* n_heads, head_dim, v_head_dim, scale: what the raw path checks too */
    int rc = attn__raw_config_check(c, err);
    if (rc)
        return rc;
    if (c->n_kv_heads < 1)
        return attn__fail(err, ATTN_EINVAL, "n_kv_heads = %d must be >= 1",
                          c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return attn__fail(err, ATTN_EINVAL,
                          "n_kv_heads = %d does not divide n_heads = %d",
                          c->n_kv_heads, c->n_heads);
    if (!isfinite(c->rope_theta) || c->rope_theta < 0)
        return attn__fail(err, ATTN_EINVAL,
                          "rope_theta must be finite and >= 0 (0 = no RoPE)");
    if (c->rope_dims < 0 || c->rope_dims > c->head_dim || c->rope_dims % 2)
        return attn__fail(err, ATTN_EINVAL,
                          "rope_dims = %d must be even and in [0, head_dim = "
                          "%d] (0 = head_dim)",
                          c->rope_dims, c->head_dim);
    if (c->rope_theta > 0 && c->rope_dims == 0 && c->head_dim % 2)
        return attn__fail(err, ATTN_EINVAL,
                          "RoPE over all of head_dim = %d needs an even "
                          "head_dim; set rope_dims",
                          c->head_dim);
    int rot = c->rope_dims ? c->rope_dims : c->head_dim;
    if (c->rope_theta > 0 && !attn__rope_finite(rot, c->rope_theta))
        return attn__fail(err, ATTN_EINVAL,
                          "rope_theta = %g makes RoPE's angles overflow "
                          "float32 (its highest frequency, %g, times a "
                          "position up to 2^31), whose cos and sin are NaN; "
                          "use a larger theta",
                          (double)c->rope_theta,
                          (double)attn__rope_max_freq(rot, c->rope_theta));
    int dctx = c->d_model_ctx ? c->d_model_ctx : c->d_model;
    if (!width_ok(c->n_heads, c->head_dim) ||
        !width_ok(c->n_heads, c->v_head_dim))
        return attn__fail(err, ATTN_EOVERFLOW,
                          "n_heads * head_dim or n_heads * v_head_dim "
                          "exceeds %d",
                          INT_MAX);
    size_t a, b, d, e;
    if (!mul3_ok((size_t)c->d_model, (size_t)c->n_heads, (size_t)c->head_dim,
                 &a) ||
        !mul3_ok((size_t)dctx, (size_t)c->n_kv_heads, (size_t)c->head_dim,
                 &b) ||
        !mul3_ok((size_t)dctx, (size_t)c->n_kv_heads, (size_t)c->v_head_dim,
                 &d) ||
        !mul3_ok((size_t)c->n_heads, (size_t)c->v_head_dim, (size_t)c->d_model,
                 &e) ||
        !attn__mul_ok(a, sizeof(float), &a) ||
        !attn__mul_ok(e, sizeof(float), &e))
        return attn__fail(err, ATTN_EOVERFLOW, "weight sizes overflow size_t");
    return 0;
}

/* attn__raw_config_check: the fields the raw path uses; attn_config_check
 * starts with them too. */
int attn__raw_config_check(const attn_config *c, char *err)
{
    if (!c)
        return attn__fail(err, ATTN_EINVAL, "config is NULL");
    if (c->n_heads < 1)
        return attn__fail(err, ATTN_EINVAL, "n_heads = %d must be >= 1",
                          c->n_heads);
    if (c->head_dim < 1)
        return attn__fail(err, ATTN_EINVAL, "head_dim = %d must be >= 1",
                          c->head_dim);
    if (c->v_head_dim < 1)
        return attn__fail(err, ATTN_EINVAL, "v_head_dim = %d must be >= 1",
                          c->v_head_dim);
    if (!isfinite(c->scale))
        return attn__fail(err, ATTN_EINVAL, "scale must be finite");
    return 0;
}

/* A decoder step (q->kv): the rules of attn_seq.kv in attn.h. */
static int kv_check(const attn_config *c, const attn_seq *q, int i, char *err)
{
    const attn_kv *kv = q->kv;
    if (!kv->pool)
        return attn__fail(err, ATTN_EINVAL, "seqs[%d].kv has no pool", i);
    const attn_kv_page_fmt *f = attn__kv_fmt(kv);
    if (f->n_kv != c->n_kv_heads || f->dk != c->head_dim ||
        f->dv != c->v_head_dim)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].kv: its pool holds %d kv head%s of %d/%d, "
                          "the layer has %d of %d/%d",
                          i, f->n_kv, f->n_kv == 1 ? "" : "s", f->dk, f->dv,
                          c->n_kv_heads,
                          c->head_dim, c->v_head_dim);
    if (q->context)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d]: a decoder step (kv) takes no context", i);
    if (kv->len < 0 || q->s != kv->len + q->t)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].s = %d must be kv->len + t = %d + %d", i,
                          q->s, kv->len, q->t);
    if (q->t_valid != q->t || q->s_valid != q->s)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d]: a decoder step has no padding (t_valid "
                          "= t, s_valid = s)",
                          i);
    if (q->k || q->v)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d]: k and v outputs are not produced for a "
                          "decoder step (read the cache: attn_kv_read)",
                          i);
    if ((long long)kv->n_pages * f->page < (long long)q->s)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].kv has room for %lld tokens, the step "
                          "needs %d: attn_kv_reserve first",
                          i, (long long)kv->n_pages * f->page, q->s);
    return 0;
}

int attn__seq_check(const attn_config *c, const attn_seq *q, int i,
                    size_t *floats, char *err)
{
    if (q->t < 1)
        return attn__fail(err, ATTN_EINVAL, "seqs[%d].t = %d must be >= 1", i,
                          q->t);
    if (q->s < 1)
        return attn__fail(err, ATTN_EINVAL, "seqs[%d].s = %d must be >= 1", i,
                          q->s);
    int rc;
    if (!q->context && !q->kv && q->s != q->t)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].s = %d must equal t = %d for "
                          "self-attention (context is NULL)",
                          i, q->s, q->t);
    if (!q->context && c->d_model_ctx && c->d_model_ctx != c->d_model)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].context is NULL but d_model_ctx = %d "
                          "differs from d_model = %d",
                          i, c->d_model_ctx, c->d_model);
    if (q->t_valid < 0 || q->t_valid > q->t)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].t_valid = %d is outside [0, t = %d]", i,
                          q->t_valid, q->t);
    if (q->s_valid < 0 || q->s_valid > q->s)
        return attn__fail(err, ATTN_EINVAL,
                          "seqs[%d].s_valid = %d is outside [0, s = %d]", i,
                          q->s_valid, q->s);
    if (q->kv && (rc = kv_check(c, q, i, err)))
        return rc;
    if (!q->x)
        return attn__fail(err, ATTN_EINVAL, "seqs[%d].x is NULL", i);
    if (!q->y)
        return attn__fail(err, ATTN_EINVAL, "seqs[%d].y is NULL", i);
    size_t t = (size_t)q->t, s = (size_t)q->s, sum = 0, n;
    size_t hq = (size_t)c->n_heads, hk = (size_t)c->n_kv_heads;
    size_t dk = (size_t)c->head_dim, dv = (size_t)c->v_head_dim;
    size_t dm = (size_t)c->d_model;
    size_t c_rows = q->kv ? t : s; /* K, V rows projected by this pass */
    if (!mul3_ok(hq, t, s, &n) || !attn__mul_ok(n, sizeof(float), &n) ||
        !attn__mul_ok(t, dm, &n) || !mul3_ok(t, hq, dk, &n) ||
        !attn__add_ok(&sum, n) || !mul3_ok(c_rows, hk, dk, &n) ||
        !attn__add_ok(&sum, n) || !mul3_ok(c_rows, hk, dv, &n) ||
        !attn__add_ok(&sum, n) || !mul3_ok(t, hq, dv, &n) ||
        !attn__add_ok(&sum, n) || !attn__add_ok(&sum, t) ||
        !attn__add_ok(floats, sum) || !attn__mul_ok(*floats, sizeof(float), &n))
        return attn__fail(err, ATTN_EOVERFLOW,
                          "seqs[%d]: sizes (t = %d, s = %d) overflow size_t", i,
                          q->t, q->s);
    return 0;
}

int attn__raw_check(const attn_config *c, const attn_raw *r, int i, char *err)
{
    if (r->t < 1)
        return attn__fail(err, ATTN_EINVAL, "items[%d].t = %d must be >= 1", i,
                          r->t);
    if (r->s < 1)
        return attn__fail(err, ATTN_EINVAL, "items[%d].s = %d must be >= 1", i,
                          r->s);
    if (!r->q || !r->k || !r->v)
        return attn__fail(err, ATTN_EINVAL, "items[%d].%s is NULL", i,
                          !r->q   ? "q"
                          : !r->k ? "k"
                                  : "v");
    if (!r->y)
        return attn__fail(err, ATTN_EINVAL, "items[%d].y is NULL", i);
    size_t n, hq = (size_t)c->n_heads;
    if (!mul3_ok(hq, (size_t)r->t, (size_t)r->s, &n) ||
        !attn__mul_ok(n, sizeof(float), &n) ||
        !mul3_ok(hq, (size_t)r->t, (size_t)c->head_dim, &n) ||
        !mul3_ok(hq, (size_t)r->s, (size_t)c->head_dim, &n) ||
        !mul3_ok(hq, (size_t)r->s, (size_t)c->v_head_dim, &n) ||
        !mul3_ok(hq, (size_t)r->t, (size_t)c->v_head_dim, &n) ||
        !attn__mul_ok(n, sizeof(float), &n))
        return attn__fail(err, ATTN_EOVERFLOW,
                          "items[%d]: sizes (t = %d, s = %d) overflow size_t",
                          i, r->t, r->s);
    return 0;
}
