/*
 * model_int.h - internals shared by model.c and model_cfg.c (not a public
 * header: the server uses model.h).
 */
#ifndef ATTN_MODEL_INT_H
#define ATTN_MODEL_INT_H

#include <stddef.h>

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
int model__cfg_read(model__cfg *c, const char *config_label,
                    const char *config, size_t config_len, const st_file *f,
                    char *err);

/* model__read_file: the whole file into a malloc'd buffer of at most cap
 * bytes (larger: ATTN_EFORMAT). */
int model__read_file(const char *path, size_t cap, char **out, size_t *len,
                     char *err);
size_t model__max_config_bytes(void);

void model__seterr(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
