/*
 * bench_maps.c - the retained-map store's costs on a long sequence, each
 * against a peer run in the same process (or, for pooling, numpy):
 *
 *   put         maps_put of a [1, 1, T, T] map    vs malloc + memcpy of it
 *   slice f32   maps_slice, no pooling            vs malloc + memcpy
 *   pool max    maps_slice max=N                  vs numpy reshape().max()
 *   JSON        maps_http_get max=J (JSON text)   vs jansson json_dumps of
 *                                                    the same pooled map
 *
 *   build/default/bench/bench_maps [--t T] [--max N] [--json J] [--reps R]
 *                                  [--peer /usr/bin/python3]
 *
 * Defaults: T 4096, N 512, J 1024, R 5. Prints the best of R in ms, the
 * ratio to the peer (ours / peer: below 1 is faster) and peak RSS. The
 * numpy peer is skipped (with a note) when python3 or numpy is missing.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/attn.h"
#include "server/maps.h"

static volatile float sink; /* results the compiler must not drop */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static long peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

static void row(const char *what, double ours, double peer, const char *peer_name)
{
    if (peer > 0)
        printf("%-10s %9.2f ms   peer %-24s %9.2f ms   ratio %.2f\n", what,
               ours, peer_name, peer, ours / peer);
    else
        printf("%-10s %9.2f ms   peer %-24s   (not run)\n", what, ours,
               peer_name);
}

static const char *arg_fn(void *ctx, const char *key)
{
    const char **kv = ctx;
    for (; kv[0]; kv += 2)
        if (strcmp(kv[0], key) == 0)
            return kv[1];
    return NULL;
}

/* numpy's max-pool of a random (t, t) float32 map into n x n blocks (t a
 * multiple of n), best of reps, in ms; -1 when it cannot run. */
static double numpy_pool(const char *python, int t, int n, int reps)
{
    char cmd[1024], out[64];
    FILE *p;
    double ms = -1;

    snprintf(cmd, sizeof cmd,
             "%s -c 'import time,numpy as np\n"
             "t,n,r=%d,%d,%d\n"
             "a=np.random.default_rng(1).random((t,t),dtype=np.float32)\n"
             "b=t//n;best=1e9\n"
             "for _ in range(r):\n"
             "  s=time.perf_counter();m=a.reshape(n,b,n,b).max(axis=(1,3));"
             "best=min(best,time.perf_counter()-s)\n"
             "print(best*1e3)' 2>/dev/null",
             python, t, n, reps);
    p = popen(cmd, "r");
    if (!p)
        return -1;
    if (fgets(out, sizeof out, p))
        ms = atof(out);
    if (pclose(p) != 0)
        ms = -1;
    return ms;
}

int main(int argc, char **argv)
{
    int t = 4096, max_n = 512, json_n = 1024, reps = 5, i, r;
    const char *python = "/usr/bin/python3";
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX], maxs[16];
    double best, peer, t0;
    maps_store *st;
    float *a, *out;
    size_t cells, bytes;
    int rows, cols;

    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--t"))
            t = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max"))
            max_n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--json"))
            json_n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--peer"))
            python = argv[i + 1];
        else
            break;
    }
    if (i < argc || t < 1 || t > 16384 || max_n < 1 || json_n < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_maps [--t T<=16384] [--max N] [--json J] "
                        "[--reps R] [--peer PYTHON]\n");
        return 2;
    }
    cells = (size_t)t * (size_t)t;
    bytes = cells * sizeof(float);
    a = malloc(bytes);
    if (!a || maps_store_create(&st, bytes * 2 + (1 << 20)) < 0) {
        fprintf(stderr, "bench_maps: out of memory\n");
        return 1;
    }
    srand(1);
    for (size_t k = 0; k < cells; k++)
        a[k] = (float)rand() / (float)RAND_MAX;
    printf("bench_maps: one [1, 1, %d, %d] map (%zu MB), best of %d\n", t, t,
           bytes >> 20, reps);

    /* put vs memcpy */
    {
        maps_put_args pa = {.model = "bench", .b = 1, .h = 1, .t = t, .s = t,
                            .attention = a};
        best = 1e30;
        for (r = 0; r < reps; r++) {
            t0 = now_ms();
            if (maps_put(st, &pa, id, err) < 0) {
                fprintf(stderr, "bench_maps: %s\n", err);
                return 1;
            }
            { double dt = now_ms() - t0; if (dt < best) best = dt; }
        }
        /* The floor for keeping a copy: fresh memory, then memcpy. */
        peer = 1e30;
        for (r = 0; r < reps; r++) {
            float *fresh;
            t0 = now_ms();
            fresh = malloc(bytes);
            if (!fresh)
                return 1;
            memcpy(fresh, a, bytes);
            { double dt = now_ms() - t0; if (dt < peer) peer = dt; }
            sink += fresh[cells - 1] + fresh[cells / 2]; /* keep the copy */
            free(fresh);
        }
        row("put", best, peer, "malloc + memcpy");
    }
    /* slice (whole map, as format=f32 sends it) vs memcpy */
    best = 1e30;
    for (r = 0; r < reps; r++) {
        t0 = now_ms();
        maps_slice(st, id, 0, 0, 0, &out, &rows, &cols, NULL, NULL, err);
        { double dt = now_ms() - t0; if (dt < best) best = dt; }
        free(out);
    }
    row("slice f32", best, peer, "malloc + memcpy");
    /* max-pool vs numpy */
    best = 1e30;
    for (r = 0; r < reps; r++) {
        t0 = now_ms();
        maps_slice(st, id, 0, 0, max_n, &out, &rows, &cols, NULL, NULL, err);
        { double dt = now_ms() - t0; if (dt < best) best = dt; }
        free(out);
    }
    peer = t % max_n == 0 ? numpy_pool(python, t, max_n, reps) : -1;
    row("pool max", best, peer, "numpy reshape().max()");
    /* JSON rendering vs jansson */
    snprintf(maxs, sizeof maxs, "%d", json_n);
    {
        const char *kv[] = {"max", maxs, NULL};
        char path[64];
        maps_reply rep;
        json_t *arr;
        char *s;

        snprintf(path, sizeof path, "/v2/maps/%s/attention", id);
        best = 1e30;
        for (r = 0; r < reps; r++) {
            t0 = now_ms();
            if (maps_http_get(st, path, arg_fn, kv, &rep) < 0 || rep.status != 200) {
                fprintf(stderr, "bench_maps: JSON render failed (%d)\n", rep.status);
                return 1;
            }
            { double dt = now_ms() - t0; if (dt < best) best = dt; }
            free(rep.body);
        }
        maps_slice(st, id, 0, 0, json_n, &out, &rows, &cols, NULL, NULL, err);
        peer = 1e30;
        for (r = 0; r < reps; r++) {
            t0 = now_ms();
            arr = json_array();
            for (size_t k = 0; k < (size_t)rows * (size_t)cols; k++)
                json_array_append_new(arr, json_real(out[k]));
            s = json_dumps(arr, JSON_COMPACT | JSON_REAL_PRECISION(9));
            { double dt = now_ms() - t0; if (dt < peer) peer = dt; }
            free(s);
            json_decref(arr);
        }
        free(out);
        row("JSON", best, peer, "jansson json_dumps");
        printf("(JSON of %d x %d cells)\n", rows, cols);
    }
    printf("peak RSS %ld MB\n", peak_rss_mb());
    maps_store_destroy(st);
    free(a);
    return 0;
}
