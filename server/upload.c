/*
 * upload.c - models uploaded through /v2/repository/models/{m}/load.
 *
 * An upload is written as a complete folder under <repo>/.attnd-staging
 * (outside the names a model can have), loaded from there to validate it,
 * and published by one rename (an exchange when the model exists). A crash
 * leaves at most a staging folder, which the next start removes
 * (srv_upload_sweep); the model's name shows the old or the new folder,
 * never a mix.
 */
#include "server/upload.h"
#include "core/json_mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
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
    int nomem;
    /* a key twice is not plain: srv_upload_parse refuses it (the last
     * "parameters" would otherwise decide, and drop an upload before it) */
    json_t *o = attn_json_parse(body, len, JSON_REJECT_DUPLICATES, NULL,
                                &nomem), *p;
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

/* b64_decode: standard or URL-safe base64 (one alphabet, not both), no
 * spaces, padded to a multiple of 4 with the '=' it needs or not at all,
 * the bits past the data 0 (RFC 4648 3.5): one text per byte string. Into
 * *out (malloc'd) and *out_len: 0; -2 when out of memory; -1 when malformed,
 * why (whylen bytes) then says where ("character 7 ('*') is not ..."). */
static int b64_decode(const char *in, size_t n, unsigned char **out,
                      size_t *out_len, char *why, size_t whylen)
{
    unsigned char *b;
    size_t i, o = 0, pad = 0;
    uint32_t acc = 0;
    int bits = 0, url = 0, std = 0;
    while (pad < n && in[n - 1 - pad] == '=')
        pad++;
    n -= pad;
    if (n % 4 == 1) {
        snprintf(why, whylen, "%zu character%s of data (not counting '=') "
                 "cannot be base64: one is left over (a length of 4k+1)", n,
                 n == 1 ? "" : "s");
        return -1;
    }
    if (pad && (n % 4 == 0 || (n + pad) % 4 != 0)) {
        snprintf(why, whylen, "%zu '=' after %zu characters of data; padding "
                 "is %s", pad, n, n % 4 == 0 ? "none after a multiple of 4"
                 : n % 4 == 2 ? "'==' (or none) after 4k+2" : "'=' (or none) after 4k+3");
        return -1;
    }
    b = malloc(n / 4 * 3 + 3);
    if (!b)
        return -2;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        int v = b64_val(c);
        if (v < 0) {
            if (c == '=')
                snprintf(why, whylen, "character %zu is '=' (padding) before "
                         "the end of the data", i);
            else if (c > ' ' && c < 127)
                snprintf(why, whylen, "character %zu ('%c') is not in the "
                         "base64 alphabet", i, c);
            else
                snprintf(why, whylen, "character %zu (byte 0x%02x) is not in "
                         "the base64 alphabet", i, c);
            goto bad;
        }
        url |= c == '-' || c == '_';
        std |= c == '+' || c == '/';
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            b[o++] = (unsigned char)(acc >> bits);
        }
    }
    if (url && std) {
        snprintf(why, whylen, "mixes the standard ('+', '/') and the URL-safe "
                 "('-', '_') alphabets");
        goto bad;
    }
    if (acc & ((1u << bits) - 1)) { /* the last character's spare bits */
        snprintf(why, whylen, "its last character ('%c') has bits set past "
                 "the data (not the base64 of any bytes)", in[n - 1]);
        goto bad;
    }
    *out = b;
    *out_len = o;
    return 0;
bad:
    free(b);
    return -1;
}

/* write_file: path gets data (created exclusively, fsync'd). */
static int write_file(const char *path, const void *data, size_t n)
{
    int fd;
    const char *p = data;
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
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
    return close(fd);
fail: {
    int e = errno; /* the write's or fsync's, for the message */
    close(fd);
    unlink(path);
    errno = e;
    return -1;
}
}

/* fsync_dir: dir's entries to disk. 0, or -1 with errno; a filesystem
 * that cannot sync a folder at all (EINVAL) counts as done, as there is
 * nothing more to do on it. */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc, e;
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    e = errno;
    close(fd);
    if (rc < 0 && e == EINVAL)
        return 0;
    errno = e;
    return rc;
}

/* rm_tree: remove dir and what it holds (a model folder is flat; a few
 * levels are followed, symbolic links are removed, never followed). dir
 * itself may be no folder: what an upload exchanged out of the name, a
 * link (whose target is not the repository's to remove) or a stray file,
 * goes as the file it is. 0 when dir is gone, else -1 with errno (the
 * first failure's: a read-only repository's EROFS rather than rmdir's
 * ENOTEMPTY). */
static int rm_tree(const char *dir, int depth)
{
    int first = 0;
    DIR *d;
    struct dirent *de;
    struct stat lk;
    char p[4200];
    if (lstat(dir, &lk) == 0 && !S_ISDIR(lk.st_mode))
        return unlink(dir);
    d = model_opendir(dir); /* on the pool too */
    if (d) {
        while ((de = readdir(d)) != NULL) {
            struct stat sb;
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && depth < 4) {
                if (rm_tree(p, depth + 1) < 0 && !first)
                    first = errno;
            } else if (unlink(p) < 0 && !first) {
                first = errno;
            }
        }
        closedir(d);
    }
    if (rmdir(dir) == 0)
        return 0;
    if (first)
        errno = first;
    return -1;
}

/* Publishing is serialised in the process: the two-rename publish (below)
 * is not safe against another publish of the same name at the same time.
 * (The registry never runs two uploads of one name at once; nothing here
 * relies on that.) */
static pthread_mutex_t publish_mu = PTHREAD_MUTEX_INITIALIZER;

/* publish: make stage (a complete model folder) repo/name in one step. An
 * existing folder is exchanged with it (renameat2 RENAME_EXCHANGE) and then
 * removed from the staging area, so the name always shows one complete
 * folder, old or new, also after a crash. Filesystems without
 * RENAME_EXCHANGE get two renames; a crash between them leaves the old
 * folder as "<stage>~old", which srv_upload_sweep puts back. 0 or -1 with
 * errno. */
static int publish(const char *stage, const char *dst)
{
    char old[4500];
    int rc = -1, tries;
    pthread_mutex_lock(&publish_mu);
    for (tries = 0; tries < 8; tries++) {
        if (renameat2(AT_FDCWD, stage, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
            rm_tree(stage, 0); /* the old folder, now at the stage path */
            rc = 0;
            break;
        }
        if (errno == ENOENT) { /* no folder yet */
            if (renameat2(AT_FDCWD, stage, AT_FDCWD, dst, RENAME_NOREPLACE) == 0) {
                rc = 0;
                break;
            }
            if (errno == EEXIST || errno == ENOTEMPTY)
                continue; /* created meanwhile (another process): exchange */
            if (errno != EINVAL && errno != ENOSYS)
                break;
            if (rename(stage, dst) == 0) {
                rc = 0;
                break;
            }
            if (errno == EEXIST || errno == ENOTEMPTY)
                continue;
            break;
        }
        if (errno != EINVAL && errno != ENOSYS)
            break;
        /* no RENAME_EXCHANGE here: old aside, new in, old removed */
        snprintf(old, sizeof old, "%s~old", stage);
        if (rename(dst, old) < 0)
            continue; /* vanished meanwhile: try again */
        if (rename(stage, dst) < 0) {
            int e = errno;
            rename(old, dst);
            errno = e;
            break;
        }
        rm_tree(old, 0);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&publish_mu);
    return rc;
}

/* staging_root: "<repo>/.attnd-staging", the one place uploads are
 * written before they are published. Model names never start with '.', so
 * nothing in it can be loaded or listed. */
static void staging_root(const char *repo, char *out, size_t n)
{
    snprintf(out, n, "%s/" SRV_STAGING_DIR, repo);
}

/* pid_alive: 1 when the process pid (of a stage name) may still run. */
static int pid_alive(long pid)
{
    if (pid <= 0 || pid > INT32_MAX || pid == (long)getpid())
        return 0; /* our own pid: a previous life's (containers reuse it) */
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

int srv_upload_sweep(const char *repo, char *note, size_t notelen)
{
    char root[4200], p[4600], dst[4600];
    DIR *d;
    struct dirent *de;
    int n = 0, failed = 0, why = 0;
    note[0] = 0;
    /* attnd 0.1.0 staged in the repository itself: .upload-<name>-<pid>-<n> */
    if ((d = opendir(repo)) != NULL) {
        while ((de = readdir(d)) != NULL) {
            long pid;
            const char *dash;
            if (strncmp(de->d_name, ".upload-", 8) != 0)
                continue;
            dash = strrchr(de->d_name, '-');
            pid = 0;
            if (dash && dash > de->d_name + 8) {
                const char *q = dash - 1;
                while (q > de->d_name + 8 && *q != '-')
                    q--;
                pid = strtol(q + 1, NULL, 10);
            }
            if (pid_alive(pid))
                continue;
            snprintf(p, sizeof p, "%s/%s", repo, de->d_name);
            if (rm_tree(p, 0) == 0)
                n++;
            else if (!failed++)
                why = errno;
        }
        closedir(d);
    }
    staging_root(repo, root, sizeof root);
    if ((d = opendir(root)) != NULL) {
        while ((de = readdir(d)) != NULL) {
            /* <name>~<pid>~<n>[~old] */
            char name[SRV_UPLOAD_NAME_MAX + 1];
            const char *dot1, *dot2;
            size_t nl;
            long pid;
            char *end;
            if (de->d_name[0] == '.')
                continue;
            dot1 = strchr(de->d_name, '~');
            if (!dot1)
                continue;
            nl = (size_t)(dot1 - de->d_name);
            pid = strtol(dot1 + 1, &end, 10);
            if (pid_alive(pid))
                continue;
            snprintf(p, sizeof p, "%s/%s", root, de->d_name);
            dot2 = strstr(end, "~old");
            if (dot2 && nl <= SRV_UPLOAD_NAME_MAX) {
                /* a crash inside the two-rename publish: put the old
                 * folder back if nothing replaced it */
                memcpy(name, de->d_name, nl);
                name[nl] = 0;
                snprintf(dst, sizeof dst, "%s/%s", repo, name);
                if (model_name_valid(name) && rename(p, dst) == 0) {
                    n++;
                    continue;
                }
            }
            if (rm_tree(p, 0) == 0)
                n++;
            else if (!failed++)
                why = errno;
        }
        closedir(d);
        rmdir(root); /* when empty */
    }
    if (failed)
        snprintf(note, notelen, "%s: could not remove %d staging folder%s "
                 "left by an interrupted upload (%s; removed %d): remove %s "
                 "by hand", repo, failed, failed == 1 ? "" : "s",
                 strerror(why), n, root);
    else if (n)
        snprintf(note, notelen, "%s: removed %d staging folder%s left by an "
                 "interrupted upload", repo, n, n == 1 ? "" : "s");
    fsync_dir(repo);
    return n + failed;
}

/* key_at: the JSON string s[a, b] (quotes included) decoded into out, or
 * its text as written when it does not decode (a NUL in it). */
static void key_at(const char *s, size_t a, size_t b, char *out, size_t cap)
{
    int nomem;
    json_t *k = attn_json_parse(s + a, b + 1 - a, JSON_DECODE_ANY, NULL, &nomem);
    if (json_is_string(k))
        snprintf(out, cap, "%s", json_string_value(k));
    else
        snprintf(out, cap, "%.*s", (int)(b - a - 1), s + a + 1);
    json_decref(k);
}

/* dup_key: err for the key a JSON_REJECT_DUPLICATES parse of s found twice
 * (je->position is just past the key's closing quote), worded as the infer
 * path's: 'request body: duplicate key "k"' at the top, 'parameters: ...'
 * inside "parameters", jansson's text elsewhere. */
static void dup_key(const char *s, size_t len, const json_error_t *je,
                    char *err, size_t errlen)
{
    size_t pos = (size_t)je->position, i, a = 0, b = 0;
    int depth = 0, in = 0, esc = 0, params = 0;
    char key[128], parent[16];
    if (pos < 2 || pos > len || s[pos - 1] != '"') {
        snprintf(err, errlen, "request body: invalid JSON: %s", je->text);
        return;
    }
    for (i = 0; i < pos; i++) { /* depth, and the string last closed */
        if (in) {
            if (esc)
                esc = 0;
            else if (s[i] == '\\')
                esc = 1;
            else if (s[i] == '"')
                in = 0, b = i;
        } else if (s[i] == '"') {
            in = 1, a = i;
        } else if (s[i] == '{' || s[i] == '[') {
            if (++depth == 2) { /* b > a: a key was read before it */
                parent[0] = 0;
                if (s[i] == '{' && b > a)
                    key_at(s, a, b, parent, sizeof parent);
                params = strcmp(parent, "parameters") == 0;
            }
        } else if (s[i] == '}' || s[i] == ']') {
            depth--;
        }
    }
    key_at(s, a, b, key, sizeof key);
    if (depth == 1 || (depth == 2 && params))
        snprintf(err, errlen, "%s: duplicate key \"%s\"",
                 depth == 1 ? "request body" : "parameters", key);
    else
        snprintf(err, errlen, "request body: invalid JSON: %s", je->text);
}

int srv_upload_parse(srv_upload *u, const char *body, size_t len, char *err,
                     size_t errlen)
{
    json_t *o, *p, *v;
    json_error_t je;
    const char *key;
    int status = 400, nomem;
    memset(u, 0, sizeof *u);
    o = attn_json_parse(body, len, JSON_REJECT_DUPLICATES, &je, &nomem);
    if (nomem) {
        snprintf(err, errlen, "server: out of memory");
        status = 503;
        goto fail;
    }
    if (!o && json_error_code(&je) == json_error_duplicate_key) {
        dup_key(body, len, &je, err, errlen);
        goto fail;
    }
    if (!json_is_object(o)) {
        if (o) /* JSON, of another kind: je says nothing of it */
            snprintf(err, errlen, "body: expected a JSON object, got %s",
                     attn_json_kind(o));
        else
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
            c = attn_json_parse(json_string_value(v), json_string_length(v),
                               JSON_REJECT_DUPLICATES, &je, &nomem);
            if (nomem) {
                snprintf(err, errlen, "server: out of memory");
                status = 503;
                goto fail;
            }
            if (!json_is_object(c)) {
                if (c)
                    snprintf(err, errlen, "parameters.config: expected a JSON "
                             "object, got %s", attn_json_kind(c));
                else
                    snprintf(err, errlen, "parameters.config: not a JSON "
                             "object (%s)", je.text);
                json_decref(c);
                goto fail;
            }
            json_decref(c);
            u->config_len = json_string_length(v);
            u->config = malloc(u->config_len + 1);
            if (!u->config) {
                snprintf(err, errlen, "parameters.config: out of memory");
                status = 503;
                goto fail;
            }
            memcpy(u->config, json_string_value(v), u->config_len + 1);
        } else if (strcmp(key, "file:model.safetensors") == 0) {
            if (!json_is_string(v)) {
                snprintf(err, errlen, "parameters[\"file:model.safetensors\"]: "
                                      "must be a base64 string");
                goto fail;
            }
            char why[160] = "";
            int rc = b64_decode(json_string_value(v), json_string_length(v),
                                &u->st, &u->st_len, why, sizeof why);
            if (rc < 0) {
                snprintf(err, errlen, "parameters[\"file:model.safetensors\"]: %s%s",
                         rc == -2 ? "out of memory" : "not valid base64: ",
                         rc == -2 ? "" : why);
                status = rc == -2 ? 503 : 400;
                goto fail;
            }
        } else if (strncmp(key, FILE_PREFIX, 5) == 0) {
            snprintf(err, errlen, "parameters[\"%.64s\"]: unknown file; only "
                     "file:model.safetensors is accepted (config goes in "
                     "parameters.config)", key);
            goto fail;
        }
    }
    if (!u->st) {
        snprintf(err, errlen, "parameters[\"file:model.safetensors\"]: missing "
                              "(an upload needs the weights)");
        goto fail;
    }
    json_decref(o);
    return 0;
fail:
    json_decref(o);
    srv_upload_free(u);
    return status;
}

void srv_upload_free(srv_upload *u)
{
    free(u->config);
    free(u->st);
    memset(u, 0, sizeof *u);
}

/* as_sent: msg (a load's message about the staging folder stage) in the
 * terms of the upload's request: its files are the parameters they came
 * in, and the folder, a name the client never chose, is left out. */
static void as_sent(char *msg, size_t cap, const char *stage)
{
    static const char *const from[] = {"/config.json", "/model.safetensors", "/", ""};
    static const char *const to[] = {"parameters.config",
                                     "parameters[\"file:model.safetensors\"]", "",
                                     "the upload"};
    char out[ATTN_ERRMAX];
    size_t n = strlen(stage), at = 0, i;
    const char *p = msg;
    while (*p && at + 1 < sizeof out) {
        if (strncmp(p, stage, n) == 0) {
            for (i = 0; strncmp(p + n, from[i], strlen(from[i])) != 0; i++)
                ; /* "" matches: the folder itself */
            at += (size_t)snprintf(out + at, sizeof out - at, "%s", to[i]);
            p += n + strlen(from[i]);
        } else {
            out[at++] = *p++;
        }
        if (at >= sizeof out)
            at = sizeof out - 1;
    }
    out[at] = 0;
    snprintf(msg, cap, "%s", out);
}

/* disk_todo: what the operator does about errno e from the repository's
 * disk. */
static const char *disk_todo(int e)
{
    switch (e) {
    case ENOSPC:
        return "free space on the repository's disk";
    case EDQUOT:
        return "free space under attnd's user's disk quota, or raise it";
    case EROFS:
        return "check the repository's mount (remount it read-write), or "
               "point --models at a writable folder";
    case EACCES:
    case EPERM:
        return "give attnd's user write and search (rwx) permission on the "
               "repository";
    case EIO:
        return "the disk reported an error: check it (dmesg) before "
               "uploading again";
    case EMFILE:
    case ENFILE:
        return "raise the descriptor limit (ulimit -n), or retry shortly";
    case ENOMEM:
    case EAGAIN:
    case EINTR:
        return "retry shortly";
    case ENOENT:
        return "create the repository's parent folder, or correct --models";
    case ENOTDIR:
        return "point --models at a folder of model folders";
    default:
        return "check the repository's disk and --models";
    }
}

/* disk_failed: err says what failed on the repository's disk, errno why,
 * and what to do about it; *lasting when that is the disk's state (full,
 * read-only, not attnd's to write), which no retry changes until someone
 * acts, rather than a want of descriptors or memory. */
static void disk_failed(char *err, size_t errlen, int *lasting,
                        const char *what, const char *path, const char *how)
{
    int e = errno;
    snprintf(err, errlen, "%s%s: %s (%s); %s", what, path, how, strerror(e),
             disk_todo(e));
    *lasting = e != EMFILE && e != ENFILE && e != ENOMEM && e != EAGAIN &&
               e != EINTR;
}

int srv_upload_install(const char *repo, const char *name, const char *body,
                       size_t len, model **out, int *lasting, char *err,
                       size_t errlen)
{
    static atomic_uint seq;
    srv_upload u;
    char root[4200], stage[4400], dst[4400], a[4500], merr[ATTN_ERRMAX];
    int status, staged = 0, tries, rc;
    *out = NULL;
    *lasting = 0;
    err[0] = 0;
    if (!model_name_valid(name) || name[0] == '.') {
        snprintf(err, errlen, "model name '%.128s': not a valid name", name);
        return 400;
    }
    status = srv_upload_parse(&u, body, len, err, errlen);
    if (status)
        return status;
    /* stage: a complete folder in the staging area, validated there. A
     * failure of the repository's disk (full, read-only, not attnd's to
     * write) or of descriptors is the server's state, not a bug (500):
     * 503, the message naming it */
    status = 503;
    staging_root(repo, root, sizeof root);
    snprintf(stage, sizeof stage, "%s/%s~%ld~%u", root, name, (long)getpid(),
             atomic_fetch_add(&seq, 1u));
    for (tries = 0;; tries++) { /* another upload may remove an empty root */
        if ((mkdir(repo, 0755) < 0 && errno != EEXIST) ||
            (mkdir(root, 0755) < 0 && errno != EEXIST)) {
            disk_failed(err, errlen, lasting, "repository ", root, "cannot create");
            goto fail;
        }
        if (mkdir(stage, 0755) == 0)
            break;
        if (errno != ENOENT || tries == 8) {
            disk_failed(err, errlen, lasting, "repository ", repo, "cannot write");
            goto fail;
        }
    }
    staged = 1;
    snprintf(a, sizeof a, "%s/model.safetensors", stage);
    if (write_file(a, u.st, u.st_len) < 0) {
        disk_failed(err, errlen, lasting, "", a, "write failed");
        goto fail;
    }
    snprintf(a, sizeof a, "%s/config.json", stage);
    if (u.config && write_file(a, u.config, u.config_len) < 0) {
        disk_failed(err, errlen, lasting, "", a, "write failed");
        goto fail;
    }
    if ((rc = model_load(out, stage, merr)) < 0) {
        status = rc == ATTN_ENOMEM || rc == ATTN_ECHANGED ? 503 : 400;
        as_sent(merr, sizeof merr, stage);
        snprintf(err, errlen, "upload of model '%s': %s", name, merr);
        goto fail;
    }
    /* the files' entries in the folder: without them on disk a crash
     * could leave the published name without its files */
    if (fsync_dir(stage) < 0) {
        disk_failed(err, errlen, lasting, "", stage, "cannot sync the folder");
        goto fail;
    }
    /* publish: one atomic step, then make the repository durable */
    snprintf(dst, sizeof dst, "%s/%s", repo, name);
    if (publish(stage, dst) < 0) {
        disk_failed(err, errlen, lasting, "", dst, "cannot replace");
        goto fail;
    }
    rmdir(root); /* when no other upload is staged */
    if (fsync_dir(repo) < 0) { /* published and loaded: a note, not a failure */
        int e = errno;
        snprintf(err, errlen, "upload of model '%s': published, but the "
                 "repository %s could not be synced (%s): after a crash of "
                 "the host the folder may be missing or old; %s", name, repo,
                 strerror(e), disk_todo(e));
    }
    srv_upload_free(&u);
    return 0;
fail:
    if (staged) {
        rm_tree(stage, 0);
        rmdir(root);
    }
    model_destroy(*out);
    *out = NULL;
    srv_upload_free(&u);
    return status;
}
