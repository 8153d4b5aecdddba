/*
 * model_cfg.c - the keys of a model's config.json and of its safetensors
 * __metadata__, read into one model__cfg. Layouts and shapes are in model.c.
 *
 * Uses jansson (duplicate keys rejected) for the same reason as st.c.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "json_mem.h"
#include "model_int.h"
#include "st.h"

#define MAX_CONFIG_BYTES (1u << 20) /* config.json larger than this: error */
#define MAX_TEXT 1024               /* prefix and description bytes */

void model__seterr(char *err, const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ATTN_ERRMAX, fmt, ap);
    va_end(ap);
}

static const char *const known[] = {
    "n_heads", "n_kv_heads", "head_dim", "v_head_dim", "causal",
    "rope",    "scale",      "prefix",   "description",
};
#define N_KNOWN (int)(sizeof known / sizeof known[0])
#define KNOWN_LIST                                                           \
    "n_heads, n_kv_heads, head_dim, v_head_dim, causal, rope, scale, "      \
    "prefix, description"

/* int_key: a positive integer (or absent). */
static int int_key(const json_t *v, const char *src, const char *key,
                   int *out, char *err)
{
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > 1 << 24) {
        model__seterr(err, "%s: %s must be a positive integer (at most %d)",
                      src, key, 1 << 24);
        return ATTN_EFORMAT;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

/* apply: one source's value of key into c (already checked not to
 * contradict another source). */
static int apply(model__cfg *c, const char *key, const json_t *v,
                 const char *src, char *err)
{
    int rc = 0;
    if (strcmp(key, "n_heads") == 0)
        rc = int_key(v, src, key, &c->n_heads, err);
    else if (strcmp(key, "n_kv_heads") == 0)
        rc = int_key(v, src, key, &c->n_kv_heads, err);
    else if (strcmp(key, "head_dim") == 0)
        rc = int_key(v, src, key, &c->head_dim, err);
    else if (strcmp(key, "v_head_dim") == 0)
        rc = int_key(v, src, key, &c->v_head_dim, err);
    else if (strcmp(key, "causal") == 0) {
        if (!json_is_boolean(v)) {
            model__seterr(err, "%s: causal must be true or false", src);
            return ATTN_EFORMAT;
        }
        c->causal = json_is_true(v);
    } else if (strcmp(key, "scale") == 0) {
        /* checked as the float it is kept as: 1e-50 is 0 there, which
         * means the default */
        float s = (float)json_number_value(v);
        if (!json_is_number(v) || !(s > 0) || !isfinite(s)) {
            model__seterr(err, "%s: scale must be a positive number that "
                          "a float holds (1.4e-45 to 3.4e38)", src);
            return ATTN_EFORMAT;
        }
        c->scale = s;
    } else if (strcmp(key, "rope") == 0) {
        if (json_is_null(v) || json_is_false(v))
            return 0;
        json_t *th = json_object_get(v, "theta"), *dm = json_object_get(v,
                                                                 "dims");
        float t = (float)json_number_value(th); /* 0 would be no RoPE */
        if (!json_is_object(v) || !json_is_number(th) || !(t > 0) ||
            !isfinite(t)) {
            model__seterr(err,
                          "%s: rope must be an object {\"theta\": "
                          "<positive number that a float holds>, \"dims\": "
                          "<even integer, optional>} or null",
                          src);
            return ATTN_EFORMAT;
        }
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
        {
            if (strcmp(k, "theta") && strcmp(k, "dims")) {
                model__seterr(err,
                              "%s: rope: unknown key '%.64s' (known: theta, "
                              "dims)",
                              src, k);
                return ATTN_EFORMAT;
            }
        }
        c->rope_theta = t;
        if (dm && (!json_is_integer(dm) || json_integer_value(dm) < 0 ||
                   json_integer_value(dm) % 2 ||
                   json_integer_value(dm) > 1 << 24)) {
            model__seterr(err,
                          "%s: rope.dims must be an even non-negative "
                          "integer (0 = all of head_dim)",
                          src);
            return ATTN_EFORMAT;
        }
        c->rope_dims = dm ? (int)json_integer_value(dm) : 0;
    } else if (strcmp(key, "prefix") == 0 ||
               strcmp(key, "description") == 0) {
        if (!json_is_string(v) || json_string_length(v) > MAX_TEXT) {
            model__seterr(err, "%s: %s must be a string of at most %d bytes",
                          src, key, MAX_TEXT);
            return ATTN_EFORMAT;
        }
        char *dst = key[0] == 'p' ? c->prefix : c->description;
        memcpy(dst, json_string_value(v), json_string_length(v) + 1);
        if (strlen(dst) != json_string_length(v)) {
            model__seterr(err, "%s: %s contains a NUL byte", src, key);
            return ATTN_EFORMAT;
        }
        if (key[0] == 'p')
            c->has_prefix = 1;
    }
    return rc;
}

/* same: two JSON values say the same thing (4 == 4.0). */
static int same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

/* metadata_value: a __metadata__ string as JSON ("4", "true",
 * "{\"theta\": 10000}"); prefix and description are taken as text.
 * NULL with *nomem set when memory ran out. */
static json_t *metadata_value(const char *key, const char *s, int *nomem)
{
    json_t *v;
    if (strcmp(key, "prefix") == 0 || strcmp(key, "description") == 0) {
        v = json_string(s);
        *nomem = !v;
        return v;
    }
    return attn_json_parse(s, strlen(s), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                           NULL, nomem);
}

static void text_of(const json_t *v, char *buf, size_t cap)
{
    char *s = attn_json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT, attn_json_mark());
    snprintf(buf, cap, "%s", s ? s : "?");
    free(s);
}

int model__cfg_read(model__cfg *c, const char *config_label,
                    const char *config, size_t config_len, const st_file *f,
                    char *err)
{
    int rc = ATTN_EFORMAT;
    json_t *root = NULL, *meta = NULL;
    memset(c, 0, sizeof *c);
    if (config) {
        json_error_t je;
        if (config_len > MAX_CONFIG_BYTES) {
            model__seterr(err, "%s: %zu bytes, more than the %u allowed",
                          config_label, config_len, MAX_CONFIG_BYTES);
            goto fail;
        }
        int nomem;
        root = attn_json_parse(config, config_len, JSON_REJECT_DUPLICATES, &je, &nomem);
        if (nomem) {
            model__seterr(err, "%s: out of memory reading it", config_label);
            rc = ATTN_ENOMEM;
            goto fail;
        }
        if (!root) {
            model__seterr(err,
                          "%s: not valid JSON: %s (line %d, column %d)",
                          config_label, je.text, je.line, je.column);
            goto fail;
        }
        if (!json_is_object(root)) {
            model__seterr(err, "%s: must be a JSON object", config_label);
            goto fail;
        }
        const char *k;
        json_t *v;
        json_object_foreach(root, k, v)
        {
            int ok = 0;
            for (int i = 0; i < N_KNOWN; i++)
                ok |= strcmp(k, known[i]) == 0;
            if (!ok) {
                model__seterr(err, "%s: unknown key '%.64s' (known: %s)",
                              config_label, k, KNOWN_LIST);
                goto fail;
            }
        }
    }
    /* __metadata__ values for known keys, parsed as JSON */
    meta = json_object();
    if (!meta) {
        model__seterr(err, "%s: out of memory reading it", config_label);
        rc = ATTN_ENOMEM;
        goto fail;
    }
    char mlabel[ATTN_ERRMAX / 2];
    snprintf(mlabel, sizeof mlabel, "%s __metadata__",
             f ? st_label(f) : "model.safetensors");
    for (size_t i = 0; f && i < st_meta_count(f); i++) {
        const char *k, *s;
        st_meta_at(f, i, &k, &s);
        int ok = 0;
        for (int j = 0; j < N_KNOWN; j++)
            ok |= strcmp(k, known[j]) == 0;
        if (!ok)
            continue; /* writers add their own keys ("format": "pt") */
        int nomem;
        json_t *v = metadata_value(k, s, &nomem);
        if (nomem || (v && json_object_set_new(meta, k, v))) {
            model__seterr(err, "%s: out of memory reading %s", mlabel, k);
            rc = ATTN_ENOMEM;
            goto fail;
        }
        if (!v) {
            model__seterr(err, "%s: %s: '%.64s' is not a JSON value", mlabel,
                          k, s);
            goto fail;
        }
    }
    for (int i = 0; i < N_KNOWN; i++) {
        const json_t *a = root ? json_object_get(root, known[i]) : NULL;
        const json_t *b = json_object_get(meta, known[i]);
        if (a && b && !same(a, b)) {
            char ta[64], tb[64];
            text_of(a, ta, sizeof ta);
            text_of(b, tb, sizeof tb);
            model__seterr(err, "%s: %s says %s but %s says %s", known[i],
                          config_label, ta, mlabel, tb);
            goto fail;
        }
        if (a && (rc = apply(c, known[i], a, config_label, err)) < 0)
            goto fail;
        if (!a && b && (rc = apply(c, known[i], b, mlabel, err)) < 0)
            goto fail;
        rc = ATTN_EFORMAT;
    }
    if (!c->n_heads) {
        if (config)
            model__seterr(err,
                          "%s: n_heads is required, e.g. {\"n_heads\": 8}",
                          config_label);
        else
            model__seterr(err,
                          "%s: missing, and %s has no n_heads; create it, "
                          "e.g. {\"n_heads\": 8}",
                          config_label, mlabel);
        rc = ATTN_ENOTFOUND;
        goto fail;
    }
    json_decref(root);
    json_decref(meta);
    return 0;
fail:
    json_decref(root);
    json_decref(meta);
    return rc;
}

int model__read_file(const char *path, size_t cap, char **out, size_t *len,
                     char *err)
{
    *out = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        model__seterr(err, "%s: cannot open: %s%s", path, strerror(e),
                      e == EACCES || e == EPERM
                          ? "; give attnd's user read permission on it"
                          : "");
        return attn_errno_code(e);
    }
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        model__seterr(err, "%s: out of memory", path);
        return ATTN_ENOMEM;
    }
    errno = 0;
    size_t n = fread(buf, 1, cap + 1, fp);
    int bad = ferror(fp), e = errno;
    fclose(fp);
    if (bad && e == EISDIR) { /* fopen opens a folder; reading it fails */
        free(buf);
        model__seterr(err, "%s: a folder, not a file", path);
        return ATTN_EFORMAT;
    }
    if (bad) {
        free(buf);
        model__seterr(err, "%s: cannot read: %s; check the disk it is on",
                      path, e ? strerror(e) : "read error");
        return ATTN_EIO;
    }
    if (n > cap) {
        free(buf);
        model__seterr(err, "%s: larger than %zu bytes", path, cap);
        return ATTN_EFORMAT;
    }
    *out = buf;
    *len = n;
    return 0;
}

size_t model__max_config_bytes(void) { return MAX_CONFIG_BYTES; }
