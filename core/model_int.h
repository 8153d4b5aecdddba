/*
 * model_int.h - internals shared by model.c, model_cfg.c and model_layout.c
 * (not a public header: the server uses model.h).
 */
#ifndef ATTN_MODEL_INT_H
#define ATTN_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "st.h"

/* What config.json and the safetensors __metadata__ say; 0 = not given. */
typedef struct model__cfg {
    int n_heads, n_kv_heads, head_dim, v_head_dim;
    int causal;
    float scale, rope_theta;
    int rope_dims;
    int has_prefix;
    char prefix[1025];
    char description[1025];
} model__cfg;

/* model__cfg_read: parse config (config_len bytes of JSON, or NULL when the
 * model has no config.json; config_label names it in messages) and f's
 * __metadata__ into c. A key given in both with different values is an
 * error naming both. Unknown config.json keys are errors; unknown metadata
 * keys are ignored. n_heads is required. 0 or ATTN_E* with err set. */
int model__cfg_read(model__cfg *c, const char *config_label, const char *config,
                    size_t config_len, const st_file *f, char *err);

/* model__read_file: the whole file into a malloc'd buffer of at most cap
 * bytes (larger: ATTN_EFORMAT). */
int model__read_file(const char *path, size_t cap, char **out, size_t *len,
                     char *err);
size_t model__max_config_bytes(void);

void model__seterr(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- which tensor holds each role (model_layout.c) ---------------------- */

enum { R_WQ, R_WK, R_WV, R_WO, R_BQ, R_BK, R_BV, R_BO, N_ROLES };
enum { L_CANON, L_MHA, L_QPROJ };
extern const char *const model__role_name[N_ROLES];
extern const char *const model__layout_name[];

/* Where one role's values come from: rows [r0, r0 + nr) of t (elements for
 * a bias), transposed or not; (in, out) is the oriented shape of a weight,
 * out the length of a bias. */
typedef struct model__src {
    const st_tensor *t;
    uint64_t r0, nr;
    int transpose;
    uint64_t in, out;
} model__src;

typedef struct model__ctx {
    const st_file *f;
    const char *file; /* label for messages */
    char prefix[1025];
    int layout;
    model__src s[N_ROLES];
} model__ctx;

#define QN 120 /* room for model__desc */

/* model__s: the plural ending of a count in a message ("1 output", "2
 * outputs"). */
const char *model__s(uint64_t n);
/* model__desc: "'in_proj_weight' [192, 64]" for messages, in buf. */
const char *model__desc(const st_tensor *t, char *buf, size_t cap);
/* model__layout: choose c's layout under its prefix (prefix_given: the
 * config set one) and fill c->s; every tensor under the prefix must belong
 * to it, and each weight have one. 0, or ATTN_EFORMAT or ATTN_ENOTFOUND
 * with err. */
int model__layout(model__ctx *c, int prefix_given, char *err);

#endif
