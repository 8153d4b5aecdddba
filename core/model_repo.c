/*
 * model_repo.c - the model repository: a folder of model folders. Names are
 * checked so that no request names a path outside the repository.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "model_int.h"

#define MAX_NAME 128

int model_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > MAX_NAME || name[0] == '.' || strstr(name, "..") != NULL)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
              ch == '-'))
            return 0;
    }
    return 1;
}

/* repo_failed: err says that repo cannot be read (errno e) and what the
 * operator does about it; the code for it: ATTN_ENOTFOUND when there is no
 * repository (missing, or a file: nothing in it to load), else as
 * attn_errno_code (EACCES, EIO...: ATTN_EIO). */
static int repo_failed(char *err, const char *repo, int e)
{
    const char *todo =
        e == ENOENT    ? "create it, or point --models at the repository (an "
                         "upload creates it)"
        : e == ENOTDIR ? "point --models at a folder of model folders"
        : e == EACCES || e == EPERM
            ? "give attnd's user read and search (r-x) permission on it, or "
              "point --models elsewhere"
        : e == ENOMEM ? "retry shortly"
        : e == EMFILE || e == ENFILE
            ? "raise the descriptor limit (ulimit -n), or retry shortly"
            : "check the disk it is on and --models";
    model__seterr(err, "%s: cannot read the model repository: %s; %s", repo,
                  strerror(e), todo);
    return e == ENOENT || e == ENOTDIR ? ATTN_ENOTFOUND : attn_errno_code(e);
}

int model_load_repo(model **out, const char *repo, const char *name,
                    char *err)
{
    *out = NULL;
    if (!model_name_valid(name)) {
        model__seterr(err,
                      "invalid model name: use 1-%d characters of "
                      "[A-Za-z0-9._-], not starting with '.', without \"..\"",
                      MAX_NAME);
        return ATTN_EINVAL;
    }
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s/%s", repo, name) >= sizeof dir) {
        model__seterr(err, "%s: repository path too long", repo);
        return ATTN_EINVAL;
    }
    /* a repository that is missing, a file, or that attnd may not search
     * (no x permission: nothing in it can be opened): say so, as the
     * listing does, rather than "<repo>/<name>: not a folder" or
     * "<repo>/<name>: cannot read" */
    struct stat sb;
    int e = stat(repo, &sb) < 0      ? errno
            : !S_ISDIR(sb.st_mode)   ? ENOTDIR
            : access(repo, X_OK) < 0 ? errno
                                     : 0;
    if (e)
        return repo_failed(err, repo, e);
    return model_load(out, dir, err);
}

void model_summary(const model *m, char *buf, size_t cap)
{
    const attn_config *c = model_config(m);
    int n = snprintf(buf, cap, "d_model %d", c->d_model);
    if (c->d_model_ctx != c->d_model && n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", d_model_ctx %d",
                      c->d_model_ctx);
    if (n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n,
                      ", %d head%s x %d, %d kv head%s, v_head_dim %d",
                      c->n_heads, c->n_heads == 1 ? "" : "s", c->head_dim,
                      c->n_kv_heads, c->n_kv_heads == 1 ? "" : "s",
                      c->v_head_dim);
    if (c->rope_theta > 0 && n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", rope %g/%d", c->rope_theta,
                      c->rope_dims ? c->rope_dims : c->head_dim);
    if (model_causal(m) && n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", causal");
    if (n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", %s, %.1f KiB", model_layout(m),
                 (double)model_bytes(m) / 1024.0);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void model_repo_list_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

DIR *model_opendir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (fd >= 0 && !d) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

int model_repo_list(const char *repo, char ***names, char *err)
{
    *names = NULL;
    DIR *d = model_opendir(repo);
    if (!d)
        return repo_failed(err, repo, errno);
    /* readable but not searchable (mode 0600): its names can be read, but
     * not one of its folders, and each would look like a stray file */
    if (access(repo, X_OK) < 0) {
        int e = errno;
        closedir(d);
        return repo_failed(err, repo, e);
    }
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    for (errno = 0; (de = readdir(d)) != NULL; errno = 0) {
        if (de->d_name[0] == '.')
            continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", repo, de->d_name);
        if (stat(path, &sb) < 0 || !S_ISDIR(sb.st_mode))
            continue; /* stray files (README, ...) are not models */
        if (n == cap) { /* as many as the folder holds: no cap of ours */
            if (cap > INT_MAX / 2)
                goto nomem;
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv)
                goto nomem;
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name)))
            goto nomem;
        n++;
    }
    if (errno) { /* the folder failed part way (EIO): not a shorter list */
        int e = errno;
        closedir(d);
        model_repo_list_free(v, n);
        return repo_failed(err, repo, e);
    }
    closedir(d);
    if (n > 1) /* an empty repository has no array to sort */
        qsort(v, (size_t)n, sizeof *v, by_name);
    *names = v;
    return n;
nomem:
    model__seterr(err, "%s: out of memory", repo);
    closedir(d);
    model_repo_list_free(v, n);
    return ATTN_ENOMEM;
}

int model_check_repo(const char *repo, FILE *out, const char *builtin)
{
    char err[ATTN_ERRMAX];
    char **names;
    int n = model_repo_list(repo, &names, err);
    if (n < 0) {
        fprintf(out, "%s\n", err);
        return n;
    }
    int broken = 0;
    for (int i = 0; i < n; i++) {
        model *m;
        if (builtin && strcmp(names[i], builtin) == 0) {
            fprintf(out, "%s: not served: '%s' is the built-in model (rename "
                         "the folder to serve it)\n", names[i], builtin);
            broken++;
            continue;
        }
        if (model_load_repo(&m, repo, names[i], err) < 0) {
            fprintf(out, "%s: %s\n", names[i], err);
            broken++;
            continue;
        }
        char sum[256];
        model_summary(m, sum, sizeof sum);
        fprintf(out, "%s: ok (%s)\n", names[i], sum);
        model_destroy(m);
    }
    model_repo_list_free(names, n);
    return broken;
}
