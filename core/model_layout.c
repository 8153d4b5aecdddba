/*
 * model_layout.c - which tensor of a weight set's safetensors file holds
 * each role (W_q ... b_o): the three naming layouts, under an optional name
 * prefix (model.c's header lists them), chosen from the names the file
 * holds; two names for one role, or a tensor the layout does not use, are
 * errors naming them. model.c then checks the sizes and converts.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "model_int.h"
#include "st.h"

const char *const model__role_name[N_ROLES] = {
    "W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o",
};
const char *const model__layout_name[] = {
    "canonical",
    "nn.MultiheadAttention",
    "q_proj",
};

/* s_: the plural ending of a count in a message ("1 output", "2 outputs"). */
const char *model__s(uint64_t n)
{
    return n == 1 ? "" : "s";
}

static const st_tensor *get(const model__ctx *c, const char *name)
{
    char full[1200];
    snprintf(full, sizeof full, "%s%s", c->prefix, name);
    return st_find(c->f, full);
}

/* desc: "'in_proj_weight' [192, 64]" for messages. */
const char *model__desc(const st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "'%.80s' ", t->name);
    if (n < cap)
        st_shape_str(t, buf + n, cap - n);
    return buf;
}

/* weight: role r from t, stored (in, out) when !transpose, else (out, in);
 * rows [r0, r0 + nr) of the stored matrix (nr 0 = all). */
static int weight(model__ctx *c, int r, const st_tensor *t, int transpose,
                  uint64_t r0, uint64_t nr, char *err)
{
    char d[QN];
    if (!t)
        return 0;
    if (t->rank != 2) {
        model__seterr(err, "%s: tensor %s must have 2 dimensions for %s",
                      c->file, model__desc(t, d, sizeof d),
                      model__role_name[r]);
        return ATTN_EFORMAT;
    }
    if (!nr)
        nr = t->shape[0];
    c->s[r] = (model__src){t,
                           r0,
                           nr,
                           transpose,
                           transpose ? t->shape[1] : nr,
                           transpose ? nr : t->shape[1]};
    return 0;
}

static int bias(model__ctx *c, int r, const st_tensor *t, uint64_t r0,
                uint64_t nr, char *err)
{
    char d[QN];
    if (!t)
        return 0;
    if (t->rank != 1) {
        model__seterr(err, "%s: tensor %s must have 1 dimension for %s",
                      c->file, model__desc(t, d, sizeof d),
                      model__role_name[r]);
        return ATTN_EFORMAT;
    }
    if (!nr)
        nr = t->shape[0];
    c->s[r] = (model__src){t, r0, nr, 0, 0, nr};
    return 0;
}

/* names of each layout (after the prefix), for detection and for the
 * unexpected-tensor check */
static const char *const names_canon[] = {"W_q", "W_k", "W_v", "W_o", "b_q",
                                          "b_k", "b_v", "b_o", NULL};
static const char *const names_mha[] = {
    "in_proj_weight", "in_proj_bias",    "q_proj_weight", "k_proj_weight",
    "v_proj_weight",  "out_proj.weight", "out_proj.bias", NULL};
static const char *const names_qproj[] = {"q_proj.weight",
                                          "k_proj.weight",
                                          "v_proj.weight",
                                          "o_proj.weight",
                                          "out_proj.weight",
                                          "q_proj.bias",
                                          "k_proj.bias",
                                          "v_proj.bias",
                                          "o_proj.bias",
                                          "out_proj.bias",
                                          NULL};
static const char *const *const layout_names[] = {names_canon, names_mha,
                                                  names_qproj};
static const char *const layout_help[] = {
    "W_q, W_k, W_v, W_o (+ optional b_q, b_k, b_v, b_o)",
    "in_proj_weight or q_proj_weight/k_proj_weight/v_proj_weight, "
    "out_proj.weight (+ optional in_proj_bias, out_proj.bias)",
    "q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight (+ optional "
    ".bias of each)",
};

static int has_any(const model__ctx *c, const char *const *names, int n)
{
    for (int i = 0; names[i] && i < n; i++)
        if (get(c, names[i]))
            return 1;
    return 0;
}

/* find_prefix: when no layout matches at the given (empty) prefix, look for
 * one layer of a bigger checkpoint: a unique P with P + "W_q",
 * P + "in_proj_weight", P + "q_proj_weight" or P + "q_proj.weight". Sets
 * c->prefix, or says which prefixes there are (set "prefix" to pick one). */
static int find_prefix(model__ctx *c, char *err)
{
    static const char *const marks[] = {"W_q", "in_proj_weight",
                                        "q_proj_weight", "q_proj.weight"};
    size_t n = 0;
    char first[3][200];
    for (size_t i = 0; i < st_count(c->f); i++) {
        const char *name = st_tensor_at(c->f, i)->name;
        size_t ln = strlen(name);
        for (int m = 0; m < 4; m++) {
            size_t lm = strlen(marks[m]);
            if (ln > lm && strcmp(name + ln - lm, marks[m]) == 0 &&
                ln - lm < sizeof c->prefix) {
                if (n > 0 && strlen(c->prefix) == ln - lm &&
                    strncmp(c->prefix, name, ln - lm) == 0)
                    continue; /* the same layer under another layout */
                if (n < 3)
                    snprintf(first[n], sizeof first[n], "%.*s", (int)(ln - lm),
                             name);
                if (n == 0) {
                    memcpy(c->prefix, name, ln - lm);
                    c->prefix[ln - lm] = 0;
                }
                n++;
            }
        }
    }
    if (n == 1)
        return 0;
    c->prefix[0] = 0;
    if (n == 0)
        model__seterr(err,
                      "%s: no attention weights found; expected one of: %s; "
                      "or %s (nn.MultiheadAttention); or %s",
                      c->file, layout_help[0], layout_help[1], layout_help[2]);
    else
        model__seterr(err,
                      "%s: no attention weights at the top level but %zu "
                      "layers inside (prefixes '%s', '%s'%s); set \"prefix\" "
                      "in config.json to the one to serve, e.g. {\"prefix\": "
                      "\"%s\"}",
                      c->file, n, first[0], first[1], n > 2 ? ", ..." : "",
                      first[0]);
    return ATTN_ENOTFOUND;
}

/* detect_mha: nn.MultiheadAttention's state dict: packed in_proj_weight
 * (3D, D) split in three, or q/k/v_proj_weight when kdim/vdim differ. */
static int detect_mha(model__ctx *c, char *err)
{
    char d[QN];
    int rc;
    const st_tensor *in = get(c, "in_proj_weight"),
                    *ib = get(c, "in_proj_bias"),
                    *ow = get(c, "out_proj.weight"),
                    *ob = get(c, "out_proj.bias");
    if (get(c, "bias_k") || get(c, "bias_v")) {
        model__seterr(err,
                      "%s: tensors bias_k/bias_v found: nn.MultiheadAttention "
                      "with add_bias_kv=True is not supported",
                      c->file);
        return ATTN_EFORMAT;
    }
    if (!ib != !ob) { /* read as a zero bias, it served a wrong answer */
        model__seterr(err,
                      "%s: '%.80s%s' without '%.80s%s': an "
                      "nn.MultiheadAttention has both biases (bias=True) or "
                      "neither; save its whole state_dict(), or, for a layer "
                      "with some biases only, use the q_proj.weight... names",
                      c->file, c->prefix, ib ? "in_proj_bias" : "out_proj.bias",
                      c->prefix, ib ? "out_proj.bias" : "in_proj_bias");
        return ATTN_EFORMAT;
    }
    if (!ow) {
        model__seterr(err,
                      "%s: missing tensor '%.80sout_proj.weight' (the "
                      "nn.MultiheadAttention layout needs %s)",
                      c->file, c->prefix, layout_help[L_MHA]);
        return ATTN_ENOTFOUND;
    }
    if (in) {
        if (in->rank != 2 || in->shape[0] != 3 * in->shape[1]) {
            model__seterr(err,
                          "%s: tensor %s must be (3 * embed_dim, embed_dim)",
                          c->file, model__desc(in, d, sizeof d));
            return ATTN_EFORMAT;
        }
        uint64_t D = in->shape[1];
        for (int r = 0; r < 3; r++)
            if ((rc = weight(c, r, in, 1, r * D, D, err)) < 0)
                return rc;
    } else {
        static const char *const w[] = {"q_proj_weight", "k_proj_weight",
                                        "v_proj_weight"};
        for (int r = 0; r < 3; r++)
            if ((rc = weight(c, r, get(c, w[r]), 1, 0, 0, err)) < 0)
                return rc;
    }
    if ((rc = weight(c, R_WO, ow, 1, 0, 0, err)) < 0 ||
        (rc = bias(c, R_BO, ob, 0, 0, err)) < 0)
        return rc;
    if (ib) {
        uint64_t D = ow->rank == 2 ? ow->shape[0] : 0;
        if (ib->rank != 1 || ib->shape[0] != 3 * D) {
            model__seterr(err,
                          "%s: tensor %s must have 3 * embed_dim = %llu "
                          "elements",
                          c->file, model__desc(ib, d, sizeof d),
                          (unsigned long long)(3 * D));
            return ATTN_EFORMAT;
        }
        for (int r = 0; r < 3; r++)
            if ((rc = bias(c, R_BQ + r, ib, r * D, D, err)) < 0)
                return rc;
    }
    return 0;
}

/* twins: two names of one layout for the same role. Both are allowed names,
 * so check_unexpected passes them, and detect would serve one and silently
 * ignore the other; check_twins refuses the pair instead. */
#define MHA_KEEP                                                               \
    "layout: the packed in_proj_weight, or q_proj_weight, k_proj_weight and "  \
    "v_proj_weight"
static const struct {
    int layout, role;
    const char *a, *b, *keep;
} twins[] = {
    {L_MHA, R_WQ, "in_proj_weight", "q_proj_weight", MHA_KEEP},
    {L_MHA, R_WK, "in_proj_weight", "k_proj_weight", MHA_KEEP},
    {L_MHA, R_WV, "in_proj_weight", "v_proj_weight", MHA_KEEP},
    {L_QPROJ, R_WO, "o_proj.weight", "out_proj.weight",
     "name: o_proj.weight or out_proj.weight"},
    {L_QPROJ, R_BO, "o_proj.bias", "out_proj.bias",
     "name: o_proj.bias or out_proj.bias"},
};

/* check_twins: 0, or ATTN_EFORMAT naming both tensors and what to keep. */
static int check_twins(const model__ctx *c, char *err)
{
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
        const st_tensor *a, *b;
        if (twins[i].layout != c->layout || !(a = get(c, twins[i].a)) ||
            !(b = get(c, twins[i].b)))
            continue;
        model__seterr(err,
                      "%s: both '%.80s' and '%.80s' given for %s; keep "
                      "one %s",
                      c->file, a->name, b->name,
                      model__role_name[twins[i].role], twins[i].keep);
        return ATTN_EFORMAT;
    }
    return 0;
}

/* detect: choose the layout and fill c->s. */
static int detect(model__ctx *c, int prefix_given, char *err)
{
    int rc;
    int canon = has_any(c, names_canon, 99);
    int mha = has_any(c, names_mha, 5); /* without out_proj.* */
    int qp = has_any(c, names_qproj, 4);
    if (!canon && !mha && !qp && get(c, "out_proj.weight"))
        mha = 1;
    if (!canon && !mha && !qp) {
        if (prefix_given) {
            model__seterr(err,
                          "%s: no attention weights under prefix '%.80s'; "
                          "expected %s, %s or %s after it",
                          c->file, c->prefix, "W_q...", "in_proj_weight...",
                          "q_proj.weight...");
            return ATTN_ENOTFOUND;
        }
        if ((rc = find_prefix(c, err)) < 0)
            return rc;
        return detect(c, 1, err);
    }
    if (canon + mha + qp > 1) {
        model__seterr(err,
                      "%s: tensors of more than one naming layout (%s%s%s); "
                      "a weight set uses one",
                      c->file, canon ? "W_q... " : "",
                      mha ? "in_proj_weight... " : "",
                      qp ? "q_proj.weight..." : "");
        return ATTN_EFORMAT;
    }
    c->layout = canon ? L_CANON : mha ? L_MHA : L_QPROJ;
    if ((rc = check_twins(c, err)) < 0)
        return rc;
    if (canon) {
        for (int r = 0; r < 4; r++)
            if ((rc = weight(c, r, get(c, model__role_name[r]), 0, 0, 0, err)) <
                0)
                return rc;
        for (int r = 4; r < N_ROLES; r++)
            if ((rc = bias(c, r, get(c, model__role_name[r]), 0, 0, err)) < 0)
                return rc;
    } else if (qp) {
        static const char *const w[] = {"q_proj.weight", "k_proj.weight",
                                        "v_proj.weight", "o_proj.weight"};
        static const char *const b[] = {"q_proj.bias", "k_proj.bias",
                                        "v_proj.bias", "o_proj.bias"};
        for (int r = 0; r < 4; r++) {
            const st_tensor *t = get(c, w[r]), *tb = get(c, b[r]);
            if (r == 3 && !t)
                t = get(c, "out_proj.weight");
            if (r == 3 && !tb)
                tb = get(c, "out_proj.bias");
            if ((rc = weight(c, r, t, 1, 0, 0, err)) < 0 ||
                (rc = bias(c, 4 + r, tb, 0, 0, err)) < 0)
                return rc;
        }
    } else {
        return detect_mha(c, err);
    }
    return 0;
}

/* check_unexpected: every tensor under the prefix belongs to the layout
 * (with no prefix: every tensor of the file). A stray tensor would silently
 * change nothing while its author meant something, so it is an error.
 * Rotary caches (names ending in "inv_freq") are ignored. */
static int check_unexpected(const model__ctx *c, char *err)
{
    size_t lp = strlen(c->prefix);
    for (size_t i = 0; i < st_count(c->f); i++) {
        const char *name = st_tensor_at(c->f, i)->name;
        if (strncmp(name, c->prefix, lp) != 0)
            continue;
        size_t ln = strlen(name);
        if (ln >= 8 && strcmp(name + ln - 8, "inv_freq") == 0)
            continue;
        int ok = 0;
        for (const char *const *n = layout_names[c->layout]; *n; n++)
            ok |= strcmp(name + lp, *n) == 0;
        if (!ok) {
            model__seterr(err,
                          "%s: unexpected tensor '%.80s' (the %s layout "
                          "uses %s); remove it, or set \"prefix\" to "
                          "serve one layer of a bigger file",
                          c->file, name, model__layout_name[c->layout],
                          layout_help[c->layout]);
            return ATTN_EFORMAT;
        }
    }
    return 0;
}

int model__layout(model__ctx *c, int prefix_given, char *err)
{
    int rc;
    if ((rc = detect(c, prefix_given, err)) < 0 ||
        (rc = check_unexpected(c, err)) < 0)
        return rc;
    for (int r = 0; r < 4; r++)
        if (!c->s[r].t) {
            model__seterr(err,
                          "%s: missing tensor for %s; the %s layout needs "
                          "%s%s%s",
                          c->file, model__role_name[r],
                          model__layout_name[c->layout], layout_help[c->layout],
                          c->prefix[0] ? " under the prefix " : "", c->prefix);
            return ATTN_ENOTFOUND;
        }
    return 0;
}
