/* upload.c - models uploaded through /v2/repository/models/{m}/load. */
#include "server/upload.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_PREFIX "file:"

int srv_upload_is_plain(const char *body, size_t len)
{
    json_t *o = json_loadb(body, len, 0, NULL), *p;
    const char *key;
    json_t *v;
    int plain = 1;
    if (!json_is_object(o)) {
        json_decref(o);
        return 0;
    }
    p = json_object_get(o, "parameters");
    if (p && !json_is_object(p))
        plain = 0;
    else if (p)
        json_object_foreach(p, key, v) {
            (void)v;
            if (strcmp(key, "config") == 0 || strncmp(key, FILE_PREFIX, 5) == 0)
                plain = 0;
        }
    json_decref(o);
    return plain;
}

static int b64_val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* b64_decode: standard or URL-safe base64, padding optional, no spaces.
 * Returns a malloc'd buffer and its length, or NULL when malformed. */
static unsigned char *b64_decode(const char *in, size_t n, size_t *out_len)
{
    unsigned char *out;
    size_t i, o = 0;
    uint32_t acc = 0;
    int bits = 0;
    while (n && in[n - 1] == '=')
        n--;
    out = malloc(n / 4 * 3 + 3);
    if (!out)
        return NULL;
    for (i = 0; i < n; i++) {
        int v = b64_val((unsigned char)in[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    if (n % 4 == 1) {
        free(out);
        return NULL;
    }
    *out_len = o;
    return out;
}

/* write_file: path gets data via a temp file, fsync and rename. */
static int write_file(const char *path, const void *data, size_t n)
{
    char tmp[4200];
    int fd;
    const char *p = data;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        p += w;
        n -= (size_t)w;
    }
    if (fsync(fd) < 0)
        goto fail;
    close(fd);
    return rename(tmp, path);
fail:
    close(fd);
    unlink(tmp);
    return -1;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

static void rm_staging(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    rmdir(dir);
}

int srv_upload_install(const char *repo, const char *name, const char *body,
                       size_t len, model **out, char *err, size_t errlen)
{
    static atomic_uint seq;
    json_t *o = NULL, *p, *v;
    json_error_t je;
    const char *key, *cfg = NULL;
    unsigned char *st = NULL;
    size_t st_len = 0;
    char stage[4096], dst[4096], a[4200], b[4200], merr[ATTN_ERRMAX];
    int status = 400, staged = 0;
    *out = NULL;
    o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        snprintf(err, errlen, "body: not a JSON object (%s)", je.text);
        goto fail;
    }
    p = json_object_get(o, "parameters");
    if (!json_is_object(p)) {
        snprintf(err, errlen, "parameters: must be an object");
        goto fail;
    }
    json_object_foreach(p, key, v) {
        if (strcmp(key, "config") == 0) {
            json_t *c;
            if (!json_is_string(v)) {
                snprintf(err, errlen, "parameters.config: must be a JSON string");
                goto fail;
            }
            cfg = json_string_value(v);
            c = json_loads(cfg, JSON_REJECT_DUPLICATES, &je);
            if (!json_is_object(c)) {
                json_decref(c);
                snprintf(err, errlen, "parameters.config: not a JSON object (%s)",
                         je.text);
                goto fail;
            }
            json_decref(c);
        } else if (strcmp(key, "file:model.safetensors") == 0) {
            if (!json_is_string(v)) {
                snprintf(err, errlen, "parameters[\"file:model.safetensors\"]: "
                                      "must be a base64 string");
                goto fail;
            }
            st = b64_decode(json_string_value(v), json_string_length(v), &st_len);
            if (!st) {
                snprintf(err, errlen, "parameters[\"file:model.safetensors\"]: "
                                      "not valid base64");
                goto fail;
            }
        } else if (strncmp(key, FILE_PREFIX, 5) == 0) {
            snprintf(err, errlen, "parameters[\"%.64s\"]: unknown file; only "
                     "file:model.safetensors is accepted (config goes in "
                     "parameters.config)", key);
            goto fail;
        }
    }
    if (!st) {
        snprintf(err, errlen, "parameters[\"file:model.safetensors\"]: missing "
                              "(an upload needs the weights)");
        goto fail;
    }
    /* stage: write and validate outside the model's folder */
    status = 500;
    snprintf(stage, sizeof stage, "%s/.upload-%s-%ld-%u", repo, name,
             (long)getpid(), atomic_fetch_add(&seq, 1u));
    if (mkdir(repo, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "repository %s: cannot create (%s)", repo,
                 strerror(errno));
        goto fail;
    }
    if (mkdir(stage, 0755) < 0) {
        snprintf(err, errlen, "repository %s: cannot write (%s)", repo,
                 strerror(errno));
        goto fail;
    }
    staged = 1;
    snprintf(a, sizeof a, "%s/model.safetensors", stage);
    if (write_file(a, st, st_len) < 0) {
        snprintf(err, errlen, "%s: write failed (%s)", a, strerror(errno));
        goto fail;
    }
    snprintf(a, sizeof a, "%s/config.json", stage);
    if (cfg && write_file(a, cfg, strlen(cfg)) < 0) {
        snprintf(err, errlen, "%s: write failed (%s)", a, strerror(errno));
        goto fail;
    }
    if (model_load(out, stage, merr) < 0) {
        status = 400;
        snprintf(err, errlen, "upload of model '%s': %s", name, merr);
        goto fail;
    }
    /* publish: one rename per file, then make the folder durable */
    snprintf(dst, sizeof dst, "%s/%s", repo, name);
    if (mkdir(dst, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: cannot create (%s)", dst, strerror(errno));
        goto fail;
    }
    snprintf(a, sizeof a, "%s/config.json", stage);
    snprintf(b, sizeof b, "%s/config.json", dst);
    if (cfg ? rename(a, b) < 0 : (unlink(b) < 0 && errno != ENOENT)) {
        snprintf(err, errlen, "%s: cannot replace (%s)", b, strerror(errno));
        goto fail;
    }
    snprintf(a, sizeof a, "%s/model.safetensors", stage);
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    if (rename(a, b) < 0) {
        snprintf(err, errlen, "%s: cannot replace (%s)", b, strerror(errno));
        goto fail;
    }
    fsync_dir(dst);
    rm_staging(stage);
    fsync_dir(repo);
    free(st);
    json_decref(o);
    return 0;
fail:
    if (staged)
        rm_staging(stage);
    model_destroy(*out);
    *out = NULL;
    free(st);
    json_decref(o);
    return status;
}
