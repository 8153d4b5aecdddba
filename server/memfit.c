/*
 * memfit.c - do attnd's memory bounds fit the memory it runs in?
 *
 * Under a container's memory limit (a Kubernetes pod's limits.memory, a
 * cgroup's memory.max) the kernel OOM-kills a process that passes it: for
 * attnd every live sequence and retained map goes with it, where its own
 * bounds (--memory-budget, --maps-bytes, --kv-bytes) would have answered
 * 503 with Retry-After. Those bounds are only worth anything when their sum
 * fits under the limit, and nothing else says when it does not (a K/V
 * default of 4 GiB under a 2 GiB pod filled only under load, hours later).
 * So attnd reads its cgroup's limit at start and warns:
 *
 *   - at start, when --memory-budget + --maps-bytes alone pass it;
 *   - after each model load, when the bounds with every loaded model's
 *     weights and K/V budget (--kv-bytes, each weight-set model its own)
 *     pass it, naming the model whose load did. A weight set's weights
 *     count with the Gram matrices its first retained request makes for
 *     what=norm (maps_norm.h: n_heads * d_v^2 doubles, when --maps-bytes
 *     is not 0).
 *
 * What attnd holds besides the bounds and the weights (code, thread
 * stacks, OpenBLAS's buffer, glibc's arenas and the memory main.c's
 * malloc_keep keeps at the top of each, up to 64 MiB) is counted as a
 * room of 64 MiB + 64 MiB a pool thread (each has its arena; measured with
 * deploy/k8s's settings, 2 threads: 94 MiB past the bounds at the peak,
 * README "Kubernetes"): the warning comes when the bounds + the weights +
 * that room pass the limit, and names the room. The weights, Gram
 * matrices (once made) and K/V pages of an instance a reload or unload
 * replaced that jobs or sequences still hold (srv_inst.retired_of: freed
 * when they end) count too, at the load.
 *
 * The limit: the least of the cgroup of /proc/self/cgroup and its
 * ancestors', v2 ("0::<path>": /sys/fs/cgroup<path>/memory.max, each
 * parent's, up to /sys/fs/cgroup/memory.max, which a container with its
 * own cgroup namespace sees) or v1 (the memory controller's line: the
 * same walk of /sys/fs/cgroup/memory<path>/memory.limit_in_bytes). "max", or v1's
 * page-rounded LONG_MAX, is no limit. Read with open(2) and read(2), so a
 * test's preloaded shim (tests/server/cgroupfake.c) can point them at
 * files of its own. Loop thread.
 */
#include "server/srv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/kv.h"
#include "server/maps_norm.h"

#define MiB (1024.0 * 1024.0)

/* threads_of: the pool threads the room counts. */
static int threads_of(const srv *s)
{
    return s->threads > 0 ? s->threads : 1;
}

/* room: MiB to leave besides the bounds and the weights (above). */
static double room(const srv *s)
{
    return 64.0 + 64.0 * (double)threads_of(s);
}

/* grams_bound: the bytes in's what=norm Gram matrices take once its
 * first retained request makes them (maps_norm.h), counted with its
 * weights from its load on: 0 when they never will be (--maps-bytes 0:
 * nothing is retained) or cannot (past size_t). */
static double grams_bound(const srv *s, const srv_inst *in)
{
    size_t n = maps_grams_bytes(model_config(in->m));
    return s->cfg.maps_bytes && in->grams && n != SIZE_MAX ? (double)n : 0;
}

/* read_small: up to n - 1 bytes of path, terminated; its length or -1. */
static ssize_t read_small(const char *path, char *buf, size_t n)
{
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (got + 1 < n) {
        ssize_t k = read(fd, buf + got, n - 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = 0;
    return (ssize_t)got;
}

/* read_limit: path's limit in bytes, 0 for none ("max", or past 2^62:
 * v1's "unlimited"); -1 when it cannot be read or parsed. */
static long long read_limit(const char *path)
{
    char buf[64], *end;
    unsigned long long v;
    if (read_small(path, buf, sizeof buf) <= 0)
        return -1;
    if (strncmp(buf, "max", 3) == 0)
        return 0;
    errno = 0;
    v = strtoull(buf, &end, 10);
    if (errno || end == buf || (*end && *end != '\n'))
        return -1;
    return v >= (1ULL << 62) ? 0 : (long long)v;
}

/* try: the least limit of dir<path>/file and of each ancestor's up to
 * dir/file (a limit on a parent binds too: a systemd slice's, a pod's
 * cgroup above its container's; a cgroup namespace's view has only
 * dir/file, the container's own) into *limit, 0 for none, and its file's
 * name into s->mem_limit_file. 1 when any was read. */
static int try(srv *s, const char *dir, const char *path, const char *file,
               long long *limit)
{
    char sub[sizeof s->mem_limit_file], p[sizeof s->mem_limit_file];
    int found = 0;
    *limit = 0;
    size_t n;
    if (snprintf(sub, sizeof sub, "%s", path) >= (int)sizeof sub)
        sub[0] = 0; /* too long for any file's name: the root's alone */
    for (n = strlen(sub); n && sub[n - 1] == '/';)
        sub[--n] = 0; /* "/" is the root */
    for (;;) {
        char *slash = strrchr(sub, '/');
        long long v;
        if (snprintf(p, sizeof p, "%s%s/%s", dir, sub, file) < (int)sizeof p &&
            (v = read_limit(p)) >= 0) {
            found = 1;
            if (v && (!*limit || v < *limit)) {
                *limit = v;
                snprintf(s->mem_limit_file, sizeof s->mem_limit_file, "%s", p);
            }
        }
        if (!sub[0])
            return found;
        *(slash ? slash : sub) = 0; /* the parent; "/x" and "x" to the root */
    }
}

/* cgroup_limit: the memory limit of attnd's cgroup in bytes, 0 for none
 * (or none found); the file it came from in s->mem_limit_file. */
static long long cgroup_limit(srv *s)
{
    char buf[4096], *line, *save = NULL;
    long long limit = 0;
    if (read_small("/proc/self/cgroup", buf, sizeof buf) < 0)
        return 0;
    /* a v2 line "0::<path>", or v1's memory controller's line (a hybrid
     * host has both; its v2 hierarchy has no memory.max) */
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        char *ctl, *path, *tok, *save2 = NULL;
        if (!c2)
            continue;
        *c1 = *c2 = 0;
        ctl = c1 + 1;
        path = c2 + 1;
        if (strcmp(line, "0") == 0 && !*ctl) { /* "0::<path>" */
            if (try(s, "/sys/fs/cgroup", path, "memory.max", &limit) && limit)
                return limit;
            continue;
        }
        /* "N:a,memory,b:<path>" */
        for (tok = strtok_r(ctl, ",", &save2); tok; tok = strtok_r(NULL, ",", &save2))
            if (strcmp(tok, "memory") == 0 &&
                try(s, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                    &limit) && limit)
                return limit;
    }
    s->mem_limit_file[0] = 0;
    return 0;
}

void srv_memfit_start(srv *s)
{
    double budget = (double)s->cfg.memory_budget, maps = (double)s->cfg.maps_bytes;
    double r = room(s);
    s->mem_limit = cgroup_limit(s);
    if (!s->mem_limit)
        return;
    if (!s->cfg.memory_budget)
        srv_log(s, "warn", "memory: --memory-budget 0 puts no bound on the "
                "requests in flight, under a memory limit of %.0f MiB (%s): "
                "past it the kernel OOM-kills attnd with its sequences and "
                "retained maps, where a budget answers 503; set one",
                (double)s->mem_limit / MiB, s->mem_limit_file);
    else if (budget + maps + r * MiB > (double)s->mem_limit)
        srv_log(s, "warn", "memory: --memory-budget %.0f MiB + --maps-bytes "
                "%.0f MiB + %.0f MiB for code, threads and the allocator "
                "(64 + 64 a thread of --threads %d) = %.0f MiB, past the memory "
                "limit of "
                "%.0f MiB (%s) before any model is loaded: filled, they get "
                "attnd OOM-killed with its sequences and retained maps, "
                "where it would answer 503; lower them or --threads, or raise "
                "the limit",
                budget / MiB, maps / MiB, r, threads_of(s),
                (budget + maps) / MiB + r,
                (double)s->mem_limit / MiB, s->mem_limit_file);
}

void srv_memfit_loaded(srv *s, const srv_entry *loaded)
{
    double budget = (double)s->cfg.memory_budget, maps = (double)s->cfg.maps_bytes;
    double kv = 0, weights = 0, old = 0, sum, r = room(s);
    int n_kv = 0, n_old = 0;
    char names[256] = "";
    size_t at = 0;
    if (!s->mem_limit || !s->cfg.memory_budget)
        return;
    for (const srv_entry *e = s->models; e; e = e->next) {
        if (!e->inst)
            continue;
        if (e->inst->m) /* the built-in sdpa has none */
            weights += (double)model_bytes(e->inst->m) + grams_bound(s, e->inst);
        if (e->inst->kv_pool) {
            kv += (double)s->cfg.kv_bytes;
            if (at < sizeof names) {
                int k = snprintf(names + at, sizeof names - at, "%s'%s'",
                                 n_kv ? ", " : "", e->name);
                at = k < 0 ? sizeof names : at + (size_t)k;
            }
            n_kv++;
        }
    }
    /* instances replaced while jobs or sequences held them: their
     * weights and K/V pages stay until those end */
    for (const srv_entry *e = s->models; e; e = e->next)
        for (const srv_inst *in = e->retired; in; in = in->rnext, n_old++)
            old += (in->m ? (double)model_bytes(in->m) : 0) +
                   (double)maps_grams_held(in->grams) +
                   (in->kv_pool ? (double)(attn_kv_pool_used(in->kv_pool) +
                                           attn_kv_pool_kept(in->kv_pool)) : 0);
    sum = budget + maps + kv + weights + old + r * MiB;
    if (sum <= (double)s->mem_limit)
        return;
    char held[128] = "";
    if (n_old)
        snprintf(held, sizeof held, " + %.1f MiB held by %d replaced "
                 "instance%s until their jobs and sequences end", old / MiB,
                 n_old, n_old == 1 ? "" : "s");
    srv_log(s, "warn", "memory: with model '%s' loaded, --memory-budget "
            "%.0f MiB + --maps-bytes %.0f MiB + --kv-bytes %.0f MiB x %d "
            "weight-set model%s%s%s%s + %.1f MiB of weights%s + %.0f MiB for "
            "code, threads and the allocator (64 + 64 a thread of --threads "
            "%d) = %.0f MiB, "
            "past the memory limit of %.0f MiB (%s): a full K/V cache, maps "
            "store and budget get attnd OOM-killed with every sequence and "
            "retained map, where it would answer 503; lower --kv-bytes "
            "(each weight-set model has its own), --memory-budget or "
            "--maps-bytes or --threads, load fewer models, or raise the "
            "limit",
            loaded->name, budget / MiB, maps / MiB,
            (double)s->cfg.kv_bytes / MiB, n_kv, n_kv == 1 ? "" : "s",
            n_kv ? " (" : "", names, n_kv ? ")" : "", weights / MiB, held, r,
            threads_of(s), sum / MiB, (double)s->mem_limit / MiB, s->mem_limit_file);
}
