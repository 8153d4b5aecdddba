/*
 * bench_attn.c - the engine against PyTorch 1.13 on the same shapes and
 * thread count, one process per side and case (so each peak RSS is its
 * own). Prints one line per case:
 *   case=<name> path=<fused|maps> ms=<median> gflops=<x> torch_ms=<median>
 *   ratio=<torch/ours> rss_mb=<our peak> torch_rss_mb=<torch peak>
 * usage: bench_attn [--threads N] [--peer bench/torch_peer.py] [--no-peer]
 *                   [--only NAME] [--quick] [--rounds R]
 * The two sides alternate R rounds (default 2) and each reports its best
 * median, so load from other processes on a shared machine hurts both
 * sides alike. Measured, never asserted. Weights random, biases on, no maps
 * unless the case says path=maps (then attention [B, H, T, T] is written).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/exec.h"

typedef struct bcase {
    const char *name;
    int b, t, dm, h, hkv, causal, maps, reps, peer;
} bcase;

static const bcase cases[] = {
    {"b8_t512_d768_h12", 8, 512, 768, 12, 12, 0, 0, 7, 1},
    {"b8_t512_d768_h12", 8, 512, 768, 12, 12, 0, 1, 5, 1},
    {"b1_t2048_d768_h12_causal", 1, 2048, 768, 12, 12, 1, 0, 7, 1},
    {"b1_t16_d64_h4", 1, 16, 64, 4, 4, 0, 0, 2001, 1},
    {"gqa_b1_t1024_d2048_h32_kv8", 1, 1024, 2048, 32, 8, 0, 0, 7, 1},
    {"long_b1_t8192_d768_h12", 1, 8192, 768, 12, 12, 0, 0, 3, 0},
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *rnd(size_t n, float amp, unsigned *seed)
{
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = amp * ((float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return p;
}

/* Our side, in a child process: median ms of c->reps forwards. */
static double run_ours(const bcase *c, int threads, int reps)
{
    int dk = c->dm / c->h;
    attn_config cfg = {.d_model = c->dm,
                       .n_heads = c->h,
                       .n_kv_heads = c->hkv,
                       .head_dim = dk,
                       .v_head_dim = dk};
    unsigned seed = 1;
    float a = 1.0f / sqrtf((float)c->dm);
    size_t dm = (size_t)c->dm, hq = (size_t)c->h * dk, hk = (size_t)c->hkv * dk,
           bt = (size_t)c->b * c->t;
    attn_weights w = {rnd(dm * hq, a, &seed), rnd(dm * hk, a, &seed),
                      rnd(dm * hk, a, &seed), rnd(hq * dm, a, &seed),
                      rnd(hq, 0.1f, &seed),   rnd(hk, 0.1f, &seed),
                      rnd(hk, 0.1f, &seed),   rnd(dm, 0.1f, &seed),
                      ATTN_ROWS};
    float *x = rnd(bt * dm, 1.0f, &seed), *y = rnd(bt * dm, 0, &seed);
    float *att = NULL;
    size_t per = (size_t)c->h * c->t * c->t;
    if (c->maps)
        att = rnd(per * c->b, 0, &seed);
    attn_seq *seqs = calloc((size_t)c->b, sizeof(*seqs));
    for (int b = 0; b < c->b; b++)
        seqs[b] = (attn_seq){.t = c->t,
                             .s = c->t,
                             .t_valid = c->t,
                             .s_valid = c->t,
                             .causal = c->causal,
                             .x = x + b * c->t * dm,
                             .y = y + b * c->t * dm,
                             .attention = att ? att + b * per : NULL};
    attn_exec *ex;
    if (attn_exec_create(&ex, threads)) {
        fprintf(stderr, "bench: cannot start %d threads\n", threads);
        exit(2);
    }
    double *ts = calloc((size_t)reps, sizeof(double));
    char err[ATTN_ERRMAX];
    for (int r = -1; r < reps; r++) {
        double t0 = now_ms();
        if (attn_forward(&cfg, &w, seqs, c->b, ex, err)) {
            fprintf(stderr, "bench: %s\n", err);
            exit(2);
        }
        if (r >= 0)
            ts[r] = now_ms() - t0;
    }
    qsort(ts, (size_t)reps, sizeof(double), cmp_d);
    return ts[reps / 2];
}

/* Run fn in a child (ours) or exec the peer; read "ms=<x>" from its
 * stdout; *rss_mb gets the child's peak RSS. Returns NAN on failure. */
static double in_child(const bcase *c, int threads, int reps, const char *peer,
                       double *rss_mb)
{
    int fd[2];
    *rss_mb = NAN;
    if (pipe(fd))
        return NAN;
    pid_t pid = fork();
    if (pid < 0)
        return NAN;
    if (pid == 0) {
        close(fd[0]);
        if (!peer) {
            double ms = run_ours(c, threads, reps);
            dprintf(fd[1], "ms=%.3f\n", ms);
            _exit(0);
        }
        dup2(fd[1], 1);
        /* the peer keeps OPENBLAS_CORETYPE (same kernels) but not the one
         * thread attn_blas_reexec asked for: PyTorch threads its GEMMs
         * through OpenBLAS */
        unsetenv("OPENBLAS_NUM_THREADS");
        char a[10][16];
        int v[10] = {c->b,   c->t,      c->t,    c->dm, c->h,
                     c->hkv, c->causal, c->maps, reps,  threads};
        for (int i = 0; i < 10; i++)
            snprintf(a[i], sizeof a[i], "%d", v[i]);
        execl("/usr/bin/python3", "python3", peer, a[0], a[1], a[2], a[3], a[4],
              a[5], a[6], a[7], a[8], a[9], (char *)NULL);
        perror("bench: exec /usr/bin/python3");
        _exit(127);
    }
    close(fd[1]);
    char buf[256] = "";
    size_t got = 0;
    ssize_t k;
    while ((k = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = 0;
    close(fd[0]);
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return NAN;
    *rss_mb = ru.ru_maxrss / 1024.0;
    const char *m = strstr(buf, "ms=");
    return m ? atof(m + 3) : NAN;
}

/* Floating-point operations of one forward (attention pairs halved, about,
 * when causal). */
static double flops(const bcase *c)
{
    double t = c->t, dm = c->dm, dk = (double)c->dm / c->h;
    double proj =
        2 * t * dm * (c->h * dk + 2 * c->hkv * dk) + 2 * t * c->h * dk * dm;
    double pairs = c->causal ? t * (t + 1) / 2 : t * t;
    return c->b * (proj + 2 * c->h * pairs * 2 * dk);
}

int main(int argc, char **argv)
{
    int threads = 2, quick = 0, rounds = 2;
    const char *peer = "bench/torch_peer.py", *only = NULL;
    attn_blas_reexec(argv); /* one BLAS thread, kernels for this CPU */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc)
            peer = argv[++i];
        else if (!strcmp(argv[i], "--no-peer"))
            peer = NULL;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            int help = !strcmp(argv[i], "--help");
            fprintf(help ? stdout : stderr,
                    "usage: %s [--threads N] [--peer torch_peer.py] "
                    "[--no-peer] [--only NAME] [--quick] [--rounds R]\n"
                    "cases:",
                    argv[0]);
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
                fprintf(help ? stdout : stderr, " %s", cases[k].name);
            fprintf(help ? stdout : stderr, "\n");
            return help ? 0 : 2;
        }
    }
    if (threads < 1 || rounds < 1) {
        fprintf(stderr, "bench: --threads and --rounds must be >= 1\n");
        return 2;
    }
    printf("# %d threads each side; ms = best of %d rounds of the median "
           "forward; rss = peak RSS of the side's process; OpenBLAS kernels "
           "%s (both sides)\n", threads, rounds,
           attn_blas_core() ? attn_blas_core() : "(not OpenBLAS)");
    fflush(stdout);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bcase *c = &cases[i];
        if (only && strcmp(only, c->name))
            continue;
        int reps = quick ? (c->reps > 100 ? 101 : 1) : c->reps;
        double rss = NAN, trss = NAN, tms = NAN, ms = NAN;
        for (int r = 0; r < rounds; r++) {
            double x, xr;
            x = in_child(c, threads, reps, NULL, &xr);
            ms = isnan(ms) || x < ms ? x : ms;
            rss = isnan(rss) || xr > rss ? xr : rss;
            if (peer && c->peer) {
                x = in_child(c, threads, reps, peer, &xr);
                tms = isnan(tms) || x < tms ? x : tms;
                trss = isnan(trss) || xr > trss ? xr : trss;
            }
        }
        printf("case=%s path=%s ms=%.4f gflops=%.2f torch_ms=%.4f "
               "ratio=%.2f rss_mb=%.1f torch_rss_mb=%.1f\n",
               c->name, c->maps ? "maps" : "fused", ms, flops(c) / (ms * 1e6),
               tms, tms / ms, rss, trss);
        fflush(stdout);
    }
    return 0;
}
