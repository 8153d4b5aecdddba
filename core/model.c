/*
 * model.c - a weight set from a model folder: find the tensors of one of
 * three naming layouts (model_layout.c), infer and cross-check the sizes,
 * convert once to F32 in the seeds' orientation into one slab (each matrix in
 * column panels, attn.h's ATTN_PANELS: what a batch of decoder steps reads
 * fastest), unmap the file.
 *
 * Layouts (all under an optional name prefix):
 *   canonical  W_q (d_model, H*dk)  W_k (d_ctx, Hkv*dk)  W_v (d_ctx, Hkv*dv)
 *              W_o (H*dv, d_model)  b_q b_k b_v b_o
 *   PyTorch nn.MultiheadAttention  in_proj_weight (3D, D) or q_proj_weight
 *              (D, D) / k_proj_weight (D, kdim) / v_proj_weight (D, vdim);
 *              in_proj_bias (3D); out_proj.weight (D, D); out_proj.bias (D)
 *   q_proj     q_proj.weight (H*dk, d_model) k_proj.weight v_proj.weight
 *              o_proj.weight (d_model, H*dv) (out_proj.* accepted), .bias
 * PyTorch stores (out, in), so those are transposed at load.
 */
#include "model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_int.h"
#include "kernel.h"
#include "st.h"

struct model {
    attn_config cfg;
    attn_weights w;
    int causal;
    int layout;
    char *description;
    float *slab; /* all weights, each tensor 64-byte aligned */
    size_t slab_bytes;
};

/* fits_int: a size the engine takes as int. */
static int fits_int(uint64_t v)
{
    return v >= 1 && v <= INT_MAX;
}

/* shape_err: err (a weight's shape that does not fit) + what the layout's
 * names expect of a weight's orientation: a weight saved transposed is the
 * usual cause, and its message alone names only the shapes. */
static int shape_err(const model__ctx *c, char *err)
{
    static const char *const hint[] = {
        [L_CANON] = "; the canonical names hold (in, out) weights (Q = X "
                    "W_q): a PyTorch Linear's weight, (out, in), is W_q "
                    "transposed (name it q_proj.weight, or export with "
                    "tools/export_torch.py)",
        [L_MHA] = "; in_proj_weight and out_proj.weight hold PyTorch's (out, "
                  "in) weights: one saved (in, out) is transposed",
        [L_QPROJ] = "; q_proj.weight... hold PyTorch's (out, in) weights: "
                    "one saved (in, out) is transposed (the canonical W_q... "
                    "names take that orientation)",
    };
    if (err && c->layout >= L_CANON && c->layout <= L_QPROJ) {
        size_t n = strlen(err);
        snprintf(err + n, ATTN_ERRMAX - n, "%s", hint[c->layout]);
    }
    return ATTN_EFORMAT;
}

/* infer: sizes from the shapes, cross-checked with what the config says. */
static int infer(const model__ctx *c, const model__cfg *k, attn_config *cfg,
                 char *err)
{
    char d[QN], e[QN];
    const model__src *s = c->s;
    const char *f = c->file;
    for (int r = 0; r < N_ROLES; r++) {
        const st_tensor *t = s[r].t;
        if (t && t->dtype != ST_F32 && t->dtype != ST_F16 &&
            t->dtype != ST_BF16) {
            model__seterr(err,
                          "%s: tensor '%.80s' has dtype %s; attnd loads F32, "
                          "F16 or BF16 (convert the file, e.g. with "
                          "tools/export_torch.py)",
                          f, t->name, st_dtype_name(t->dtype));
            return ATTN_EFORMAT;
        }
    }
    uint64_t H = (uint64_t)k->n_heads, D = s[R_WQ].in, qo = s[R_WQ].out;
    model__desc(s[R_WQ].t, d, sizeof d);
    if (!fits_int(D) || !fits_int(qo) || qo % H) {
        model__seterr(err,
                      "%s: W_q (from %s) has %llu output%s, not a positive "
                      "multiple of n_heads %llu",
                      f, d, (unsigned long long)qo, model__s(qo),
                      (unsigned long long)H);
        return ATTN_EFORMAT;
    }
    uint64_t dk = qo / H;
    if (k->head_dim && (uint64_t)k->head_dim != dk) {
        model__seterr(err,
                      "%s: head_dim is %d in the config but W_q (from %s) "
                      "has %llu output%s / n_heads %llu = %llu",
                      f, k->head_dim, d, (unsigned long long)qo, model__s(qo),
                      (unsigned long long)H, (unsigned long long)dk);
        return ATTN_EFORMAT;
    }
    uint64_t Dc = s[R_WK].in, ko = s[R_WK].out;
    model__desc(s[R_WK].t, d, sizeof d);
    model__desc(s[R_WV].t, e, sizeof e);
    if (s[R_WV].in != Dc) {
        model__seterr(err,
                      "%s: W_k (from %s) takes %llu input%s but W_v (from "
                      "%s) takes %llu; keys and values read the same context",
                      f, d, (unsigned long long)Dc, model__s(Dc), e,
                      (unsigned long long)s[R_WV].in);
        return shape_err(c, err);
    }
    uint64_t Hkv;
    if (k->n_kv_heads) {
        Hkv = (uint64_t)k->n_kv_heads;
        if (ko != Hkv * dk) {
            model__seterr(err,
                          "%s: n_kv_heads is %d in the config but W_k (from "
                          "%s) has %llu output%s / head_dim %llu = %s%llu",
                          f, k->n_kv_heads, d, (unsigned long long)ko,
                          model__s(ko), (unsigned long long)dk,
                          ko % dk ? "~" : "", (unsigned long long)(ko / dk));
            return ATTN_EFORMAT;
        }
    } else {
        if (ko == 0 || ko % dk) {
            model__seterr(err,
                          "%s: W_k (from %s) has %llu output%s, not a "
                          "multiple of head_dim %llu",
                          f, d, (unsigned long long)ko, model__s(ko),
                          (unsigned long long)dk);
            return shape_err(c, err);
        }
        Hkv = ko / dk;
    }
    if (H % Hkv) {
        model__seterr(err,
                      "%s: %llu key/value heads (W_k from %s) do not divide "
                      "n_heads %llu",
                      f, (unsigned long long)Hkv, d, (unsigned long long)H);
        return shape_err(c, err);
    }
    uint64_t vo = s[R_WV].out;
    if (vo == 0 || vo % Hkv || !fits_int(Dc)) {
        model__seterr(err,
                      "%s: W_v (from %s) has %llu output%s, not a multiple "
                      "of n_kv_heads %llu",
                      f, e, (unsigned long long)vo, model__s(vo),
                      (unsigned long long)Hkv);
        return shape_err(c, err);
    }
    uint64_t dv = vo / Hkv;
    if (k->v_head_dim && (uint64_t)k->v_head_dim != dv) {
        model__seterr(err,
                      "%s: v_head_dim is %d in the config but W_v (from %s) "
                      "has %llu output%s / n_kv_heads %llu = %llu",
                      f, k->v_head_dim, e, (unsigned long long)vo, model__s(vo),
                      (unsigned long long)Hkv, (unsigned long long)dv);
        return ATTN_EFORMAT;
    }
    model__desc(s[R_WO].t, d, sizeof d);
    if (s[R_WO].in != H * dv || s[R_WO].out != D) {
        model__seterr(err,
                      "%s: W_o (from %s) is (%llu, %llu) but must be "
                      "(n_heads %llu x v_head_dim %llu, d_model %llu)",
                      f, d, (unsigned long long)s[R_WO].in,
                      (unsigned long long)s[R_WO].out, (unsigned long long)H,
                      (unsigned long long)dv, (unsigned long long)D);
        return shape_err(c, err);
    }
    const uint64_t blen[4] = {qo, ko, vo, D};
    for (int r = R_BQ; r <= R_BO; r++)
        if (s[r].t && s[r].out != blen[r - R_BQ]) {
            model__seterr(
                err,
                "%s: %s (from %s) has %llu element%s but must have "
                "%llu (the outputs of %s)",
                f, model__role_name[r], model__desc(s[r].t, d, sizeof d),
                (unsigned long long)s[r].out, model__s(s[r].out),
                (unsigned long long)blen[r - R_BQ], model__role_name[r - R_BQ]);
            return ATTN_EFORMAT;
        }
    if (k->rope_theta > 0 &&
        ((uint64_t)k->rope_dims > dk || (!k->rope_dims && dk % 2))) {
        model__seterr(err,
                      "%s: rope.dims %d must be even and at most head_dim "
                      "%llu (0 = all of an even head_dim)",
                      f, k->rope_dims, (unsigned long long)dk);
        return ATTN_EFORMAT;
    }
    int rot = k->rope_dims ? k->rope_dims : (int)dk;
    if (k->rope_theta > 0 && !attn__rope_finite(rot, k->rope_theta)) {
        model__seterr(err,
                      "%s: rope.theta %g makes RoPE's angles overflow "
                      "float32 over %d rotated dims (its highest frequency, "
                      "1/theta^(%d/%d) = %g, times a position up to 2^31), "
                      "whose cos and sin are NaN; use a larger theta",
                      f, (double)k->rope_theta, rot, rot - 2, rot,
                      (double)attn__rope_max_freq(rot, k->rope_theta));
        return ATTN_EFORMAT;
    }
    *cfg = (attn_config){
        .d_model = (int)D,
        .d_model_ctx = (int)Dc,
        .n_heads = (int)H,
        .n_kv_heads = (int)Hkv,
        .head_dim = (int)dk,
        .v_head_dim = (int)dv,
        .scale = k->scale,
        .rope_theta = k->rope_theta,
        .rope_dims = k->rope_dims,
    };
    char why[ATTN_ERRMAX];
    int rc = attn_config_check(cfg, why);
    if (rc < 0) { /* the checks above should have caught it: say what */
        model__seterr(err, "%s: %s", f, why);
        return rc;
    }
    return 0;
}

#define ALIGN_FLOATS 16 /* 64 bytes */

/* copy_in: each role's tensor from the file to its place in m's slab (off:
 * in floats), as F32 and checked finite. *tmp holds a scratch buffer while
 * one is allocated (fill frees it when a read faults). */
static int copy_in(model *m, const model__ctx *c, const size_t *off,
                   float *volatile *tmp, char *err)
{
    const float **dst[N_ROLES] = {&m->w.w_q, &m->w.w_k, &m->w.w_v, &m->w.w_o,
                                  &m->w.b_q, &m->w.b_k, &m->w.b_v, &m->w.b_o};
    for (int r = 0; r < N_ROLES; r++) {
        const model__src *s = &c->s[r];
        if (!s->t)
            continue;
        float *p = m->slab + off[r];
        size_t n = r < R_BQ ? (size_t)(s->in * s->out) : (size_t)s->out;
        if (r < R_BQ) {
            st_rows_to_f32(s->t, s->r0, s->nr, s->transpose, p);
        } else if (s->r0 == 0 && s->nr == s->t->count) {
            st_to_f32(s->t, p);
        } else { /* a third of in_proj_bias */
            if (!(*tmp = malloc((size_t)s->t->count * sizeof(float)))) {
                model__seterr(err, "%s: out of memory", c->file);
                return ATTN_ENOMEM;
            }
            st_to_f32(s->t, *tmp);
            memcpy(p, *tmp + s->r0, n * sizeof(float));
            free(*tmp);
            *tmp = NULL;
        }
        for (size_t i = 0; i < n; i++)
            if (!isfinite(p[i])) {
                char at[64];
                if (r < R_BQ)
                    snprintf(at, sizeof at, "[%zu][%zu]", i / (size_t)s->out,
                             i % (size_t)s->out);
                else
                    snprintf(at, sizeof at, "[%zu]", i);
                model__seterr(err,
                              "%s: %s (from '%.80s') has a non-finite value "
                              "(%s) at %s; weights must be finite",
                              c->file, model__role_name[r], s->t->name,
                              isnan(p[i]) ? "NaN" : "Inf", at);
                return ATTN_EFORMAT;
            }
        *dst[r] = p;
    }
    return 0;
}

/* fill: allocate the slab and convert every role into it, checking that
 * every value is finite. */
static int fill(model *m, const model__ctx *c, char *err)
{
    size_t off[N_ROLES], total = 0;
    for (int r = 0; r < N_ROLES; r++) {
        const model__src *s = &c->s[r];
        size_t n = 0;
        off[r] = total;
        if (!s->t)
            continue;
        if (r < R_BQ ? __builtin_mul_overflow((size_t)s->in, (size_t)s->out, &n)
                     : (n = (size_t)s->out, 0)) {
            model__seterr(err, "%s: %s is too large", c->file,
                          model__role_name[r]);
            return ATTN_EOVERFLOW;
        }
        n = (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
        if (__builtin_add_overflow(total, n, &total) ||
            total > SIZE_MAX / sizeof(float)) {
            model__seterr(err, "%s: weights too large", c->file);
            return ATTN_EOVERFLOW;
        }
    }
    m->slab_bytes = total * sizeof(float);
    m->slab = aligned_alloc(64, m->slab_bytes ? m->slab_bytes : 64);
    if (!m->slab) {
        model__seterr(err, "%s: out of memory for %zu bytes of weights",
                      c->file, m->slab_bytes);
        return ATTN_ENOMEM;
    }
    /* the reads of the file's mapping under a guard: a file truncated
     * meanwhile faults (SIGBUS), and the load fails instead of attnd */
    st_guard g;
    float *volatile tmp = NULL;
    int rc;
    if (ST_GUARD(g, c->f)) {
        free(tmp);
        model__seterr(err,
                      "%s: the file changed while it was read (it is "
                      "shorter now: written over in place?); write a new "
                      "file and rename it over the old one",
                      c->file);
        return ATTN_ECHANGED;
    }
    rc = copy_in(m, c, off, &tmp, err);
    st_guard_end(&g);
    if (rc < 0)
        return rc;
    float *const mats[4] = {m->slab + off[R_WQ], m->slab + off[R_WK],
                            m->slab + off[R_WV], m->slab + off[R_WO]};
    char why[ATTN_ERRMAX];
    if (attn_weights_to_panels(&m->cfg, mats, why)) {
        model__seterr(err, "%s: %s", c->file, why);
        return ATTN_ENOMEM;
    }
    m->w.layout = ATTN_PANELS;
    return 0;
}

/* build: everything after the file is open. */
static int build(model **out, const st_file *f, const char *cfg_label,
                 const char *config, size_t config_len, char *err)
{
    model__cfg k;
    model__ctx c;
    int rc;
    model *m = NULL;
    memset(&c, 0, sizeof c);
    c.f = f;
    c.file = st_label(f);
    if ((rc = model__cfg_read(&k, cfg_label, config, config_len, f, err)) < 0)
        goto fail;
    memcpy(c.prefix, k.prefix, sizeof c.prefix);
    if ((rc = model__layout(&c, k.has_prefix, err)) < 0)
        goto fail;
    rc = ATTN_ENOMEM;
    m = calloc(1, sizeof *m);
    if (!m || !(m->description = strdup(k.description))) {
        model__seterr(err, "%s: out of memory", c.file);
        goto fail;
    }
    if ((rc = infer(&c, &k, &m->cfg, err)) < 0 || (rc = fill(m, &c, err)) < 0)
        goto fail;
    m->causal = k.causal;
    m->layout = c.layout;
    *out = m;
    return 0;
fail:
    model_destroy(m);
    return rc;
}

/* unreadable: err says that the model folder dir is there but cannot be
 * read (errno e), and what to do; the code for it (attn_errno_code). */
static int unreadable(char *err, const char *dir, int e)
{
    const char *todo =
        e == EACCES || e == EPERM
            ? "give attnd's user read and search (r-x) permission on the "
              "folder"
        : e == ELOOP  ? "mend the symbolic link"
        : e == ENOMEM ? "retry shortly"
        : e == EMFILE || e == ENFILE
            ? "raise the descriptor limit (ulimit -n), or retry shortly"
            : "check the disk it is on";
    model__seterr(err, "%s: cannot read: %s; %s", dir, strerror(e), todo);
    return attn_errno_code(e);
}

int model_load(model **out, const char *dir, char *err)
{
    char stp[4096], cfp[4096];
    char *config = NULL;
    size_t config_len = 0;
    st_file *f = NULL;
    int rc;
    *out = NULL;
    if (strlen(dir) > sizeof stp - sizeof "/model.safetensors") {
        model__seterr(err, "%.200s...: path too long", dir);
        return ATTN_EINVAL;
    }
    snprintf(stp, sizeof stp, "%s/model.safetensors", dir);
    snprintf(cfp, sizeof cfp, "%s/config.json", dir);
    struct stat sb;
    int st_rc = stat(dir, &sb), st_errno = st_rc < 0 ? errno : 0;
    if (st_rc < 0 && st_errno != ENOENT && st_errno != ENOTDIR)
        /* there, maybe, but not attnd's to read (EACCES, ELOOP, EIO...):
         * "not a folder" would send the operator looking for the wrong
         * thing */
        return unreadable(err, dir, st_errno);
    if (st_rc < 0 || !S_ISDIR(sb.st_mode)) {
        /* nothing of the name (a name mistyped) is not "not a folder",
         * which sends the operator looking for a file of the name */
        model__seterr(err,
                      "%s: %s; a model is a folder holding "
                      "model.safetensors (+ optional config.json)",
                      dir,
                      st_errno == ENOENT ? "no such folder" : "not a folder");
        return ATTN_ENOTFOUND;
    }
    /* a folder attnd may not search: its files cannot be opened, and
     * "model.safetensors: cannot open" would blame the file */
    if (access(dir, X_OK) < 0)
        return unreadable(err, dir, errno);
    if ((rc = st_open(&f, stp, err)) < 0) {
        if (rc == ATTN_ENOTFOUND)
            model__seterr(err,
                          "%s: no model.safetensors; expected layout: "
                          "%s/model.safetensors (+ optional %s/config.json)",
                          dir, dir, dir);
        return rc;
    }
    rc = model__read_file(cfp, model__max_config_bytes(), &config, &config_len,
                          err);
    if (rc < 0 && rc != ATTN_ENOTFOUND)
        goto done;
    rc = build(out, f, cfp, config, config_len, err);
done:
    free(config);
    st_close(f);
    return rc;
}

int model_load_mem(model **out, const char *label, const char *config,
                   size_t config_len, const void *st, size_t st_len, char *err)
{
    char stl[512], cfl[512];
    st_file *f = NULL;
    int rc;
    *out = NULL;
    snprintf(stl, sizeof stl, "%.200s/model.safetensors", label);
    snprintf(cfl, sizeof cfl, "%.200s/config.json", label);
    if ((rc = st_parse(&f, st, st_len, stl, err)) < 0)
        return rc;
    rc = build(out, f, cfl, config, config_len, err);
    st_close(f);
    return rc;
}

void model_destroy(model *m)
{
    if (!m)
        return;
    free(m->slab);
    free(m->description);
    free(m);
}

const attn_config *model_config(const model *m)
{
    return &m->cfg;
}
const attn_weights *model_weights(const model *m)
{
    return &m->w;
}
int model_causal(const model *m)
{
    return m->causal;
}
const char *model_description(const model *m)
{
    return m->description;
}
size_t model_bytes(const model *m)
{
    return m->slab_bytes;
}
const char *model_layout(const model *m)
{
    return model__layout_name[m->layout];
}
