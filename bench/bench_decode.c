/*
 * bench_decode.c - decoder steps over the K/V cache against the machine's
 * memory bandwidth, a PyTorch peer, and resending the history.
 *
 *   bench_decode [--threads T] [--peer bench/torch_decode_peer.py|--no-peer]
 *                [--n 1,8,32] [--prompt 1024] [--steps 64] [--http-tps CMD]
 *                [--rows]
 *
 * A Llama-like layer (d_model 2048, 32 heads, 8 kv heads of 64, RoPE, no
 * biases), its weights in column panels as attnd holds them (--rows: the
 * row-major layout instead). For each N: N sequences are prefilled with `prompt` tokens, then
 * `steps` one-token steps run, each step one batch of the N sequences.
 * Prints one line per N:
 *   decode n=<N> engine_tps=<tokens/s> engine_gbps=<GB/s read>
 *     memcpy_gbps=<GB/s> torch_tps=<tokens/s> resend_tps=<tokens/s>
 *     http_tps=<tokens/s> [bw_frac=.. torch_ratio=.. resend_ratio=..
 *     http_frac=.. step_gflops=.. sgemm_gflops=.. rss_mb=..]
 * engine_gbps counts the bytes a step must read: every weight matrix once
 * plus every sequence's cached K and V, summed over the steps, over the
 * steps' time. memcpy_gbps copies the same number of bytes (one step's
 * worth, averaged) with the same thread count: the rate this machine moves
 * memory at, so bw_frac = engine_gbps / memcpy_gbps is the share of the
 * physical limit. A step is also compute: step_gflops is its rate next to
 * sgemm_gflops, a 1024^3 SGEMM on every thread at once (this machine's
 * GEMM limit; the projections of 32 one-token steps are GEMMs of 32 rows).
 * resend_tps is today's way without a cache: each step
 * sends the whole history as one causal request (timed over 1-2 steps,
 * they are slow). torch_tps runs the peer in its own process. http_tps is
 * measured by bench/decode_http.py against a running attnd when
 * make bench-decode passes --http (else "nan").
 * Measured, never asserted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/attn.h"
#include "core/exec.h"
#include "core/kv.h"

#include <cblas.h>

/* C (1024 x 1024) = A[0:1M] (1024 x 1024) A[1M:2M]. */
static void gemm1024(const float *a, float *c)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, 1024, 1024,
                1.0f, a, 1024, a + 1024 * 1024, 1024, 0.0f, c, 1024);
}

#define DM 2048
#define HQ 32
#define HKV 8
#define DK 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static float *rnd(size_t n, float amp, unsigned *seed)
{
    /* 64-byte aligned, as attnd's weights are (core/model.c): malloc's
     * 16-byte offset splits every 32-float row block across three cache
     * lines, which cost the skinny GEMMs (core/skinny.c) a fifth */
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_decode: out of memory (%zu floats)\n", n);
        exit(2);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = amp * ((float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return p;
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_decode: %s: %s\n", what, err);
    exit(2);
}

/* memcpy of `bytes` with the executor's threads, each its own slice. */
typedef struct cp {
    char *dst;
    const char *src;
    size_t bytes;
    size_t parts;
} cp;

static void cp_part(void *arg, size_t i)
{
    cp *c = arg;
    size_t per = c->bytes / c->parts, off = i * per;
    size_t n = i + 1 == c->parts ? c->bytes - off : per;
    memcpy(c->dst + off, c->src + off, n);
}

static double memcpy_gbps(attn_exec *ex, int threads, size_t bytes)
{
    cp c = {malloc(bytes), malloc(bytes), bytes, (size_t)threads};
    if (!c.dst || !c.src)
        die("memcpy", "out of memory");
    memset(c.dst, 1, bytes);
    memset((char *)c.src, 2, bytes);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        attn_exec_run(ex, c.parts, cp_part, &c);
        double gb = bytes / (now_s() - t0) / 1e9;
        best = gb > best ? gb : best;
    }
    free(c.dst);
    free((char *)c.src);
    return best;
}

/* The machine's sgemm rate: a 1024^3 SGEMM per thread, all at once. */
typedef struct sg {
    float *a[16], *c[16];
} sg;

static void sg_part(void *arg, size_t i)
{
    sg *g = arg;
    gemm1024(g->a[i], g->c[i]);
}

static double sgemm_gflops(attn_exec *ex, int threads)
{
    sg g;
    size_t n = 1024 * 1024;
    if (threads > 16)
        threads = 16;
    unsigned seed = 3;
    for (int i = 0; i < threads; i++) {
        g.a[i] = rnd(2 * n, 1.0f, &seed);
        g.c[i] = rnd(n, 0.0f, &seed);
    }
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        attn_exec_run(ex, (size_t)threads, sg_part, &g);
        double gf = 2.0 * 1024 * 1024 * 1024 * threads / (now_s() - t0) / 1e9;
        best = gf > best ? gf : best;
    }
    for (int i = 0; i < threads; i++)
        free(g.a[i]), free(g.c[i]);
    return best;
}

static double torch_tps(const char *peer, int n, int prompt, int steps,
                        int threads)
{
    if (!peer)
        return NAN;
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_NUM_THREADS /usr/bin/python3 %s %d %d %d %d %d "
             "%d %d %d",
             peer, n, prompt, steps, DM, HQ, HKV, DK, threads);
    FILE *f = popen(cmd, "r");
    if (!f)
        return NAN;
    char line[256] = "";
    double tps = NAN;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "tps=", 4))
            tps = atof(line + 4);
    pclose(f);
    return tps;
}

int main(int argc, char **argv)
{
    int threads = 2, prompt = 1024, steps = 64;
    const char *peer = "bench/torch_decode_peer.py", *ns = "1,8,32";
    attn_blas_reexec(argv); /* one BLAS thread, kernels for this CPU (the
                               peer inherits the kernels) */
    const char *http = NULL;
    int rows = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc)
            peer = argv[++i];
        else if (!strcmp(argv[i], "--no-peer"))
            peer = NULL;
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            ns = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--http-tps") && i + 1 < argc)
            http = argv[++i];
        else if (!strcmp(argv[i], "--rows"))
            rows = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--threads T] [--peer PY|--no-peer] "
                    "[--n 1,8,32] [--prompt P] [--steps S] [--http-tps CMD] "
                    "[--rows]\n"
                    "  CMD is run with N appended and prints tps=<x>\n",
                    argv[0]);
            return 2;
        }
    }
    if (threads < 1 || prompt < 1 || steps < 1)
        die("arguments", "--threads, --prompt and --steps must be >= 1");
    attn_config c = {.d_model = DM, .n_heads = HQ, .n_kv_heads = HKV,
                     .head_dim = DK, .v_head_dim = DK,
                     .rope_theta = 10000.0f};
    unsigned seed = 7;
    float a = 1.0f / sqrtf((float)DM);
    attn_weights w = {rnd((size_t)DM * HQ * DK, a, &seed),
                      rnd((size_t)DM * HKV * DK, a, &seed),
                      rnd((size_t)DM * HKV * DK, a, &seed),
                      rnd((size_t)HQ * DK * DM, a, &seed),
                      NULL, NULL, NULL, NULL, ATTN_ROWS};
    if (!rows) { /* as core/model.c loads them */
        float *const m[4] = {(float *)w.w_q, (float *)w.w_k, (float *)w.w_v,
                             (float *)w.w_o};
        char perr[ATTN_ERRMAX];
        if (attn_weights_to_panels(&c, m, perr))
            die("panels", perr);
        w.layout = ATTN_PANELS;
    }
    size_t wbytes = ((size_t)DM * HQ * DK * 2 + (size_t)DM * HKV * DK * 2) * 4;
    size_t tokb = attn_kv_token_bytes(&c, ATTN_KV_F32);
    attn_exec *ex;
    if (attn_exec_create(&ex, threads))
        die("threads", "cannot start the executor");
    char err[ATTN_ERRMAX];
    printf("# layer d_model %d, %d heads, %d kv heads of %d, RoPE; %d-token "
           "prompts, %d one-token steps; %d threads each side; K/V %zu "
           "bytes/token/sequence, weights %.1f MB in %s; OpenBLAS kernels %s (both sides)\n",
           DM, HQ, HKV, DK, prompt, steps, threads, tokb, wbytes / 1e6,
           rows ? "rows (--rows)" : "column panels",
           attn_blas_core() ? attn_blas_core() : "(not OpenBLAS)");
    fflush(stdout);
    for (const char *p = ns; *p;) {
        int n = atoi(p);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        if (n < 1)
            continue;
        attn_kv_pool *pool;
        size_t budget = (size_t)n * (size_t)(prompt + steps + 128) * tokb;
        if (attn_kv_pool_create(&pool, &c, ATTN_KV_F32, 0, budget, err))
            die("pool", err);
        attn_kv *kv = calloc((size_t)n, sizeof *kv);
        attn_seq *sq = calloc((size_t)n, sizeof *sq);
        float *xp = rnd((size_t)prompt * DM, 1.0f, &seed);
        float *yp = malloc((size_t)prompt * DM * sizeof(float));
        float *xs = rnd((size_t)n * DM, 1.0f, &seed);
        float *ys = malloc((size_t)n * DM * sizeof(float));
        if (!kv || !sq || !yp || !ys)
            die("buffers", "out of memory");
        /* prefill, one sequence at a time (not the point here) */
        for (int i = 0; i < n; i++) {
            attn_kv_init(&kv[i], pool);
            attn_seq s = {.t = prompt, .s = prompt, .t_valid = prompt,
                          .s_valid = prompt, .causal = 1, .x = xp, .y = yp,
                          .kv = &kv[i]};
            if (attn_kv_reserve(&kv[i], prompt, err) ||
                attn_forward(&c, &w, &s, 1, ex, err))
                die("prefill", err);
            attn_kv_advance(&kv[i], prompt);
        }
        double bytes = 0, flops = 0, t0 = now_s();
        for (int k = 0; k < steps; k++) {
            for (int i = 0; i < n; i++) {
                if (attn_kv_reserve(&kv[i], 1, err))
                    die("reserve", err);
                sq[i] = (attn_seq){.t = 1, .s = kv[i].len + 1, .t_valid = 1,
                                   .s_valid = kv[i].len + 1, .causal = 1,
                                   .x = xs + (size_t)i * DM,
                                   .y = ys + (size_t)i * DM, .kv = &kv[i]};
                bytes += (double)(kv[i].len + 1) * (double)tokb;
                flops += 2.0 * DM * (HQ + 2 * HKV) * DK + 2.0 * HQ * DK * DM +
                         4.0 * (kv[i].len + 1) * HQ * DK;
            }
            bytes += (double)wbytes;
            if (attn_forward(&c, &w, sq, n, ex, err))
                die("step", err);
            for (int i = 0; i < n; i++)
                attn_kv_advance(&kv[i], 1);
        }
        double dt = now_s() - t0;
        double tps = (double)n * steps / dt, gbps = bytes / dt / 1e9;
        double mgbps = memcpy_gbps(ex, threads, (size_t)(bytes / steps));
        double sgf = sgemm_gflops(ex, threads);
        for (int i = 0; i < n; i++)
            attn_kv_free(&kv[i]);
        attn_kv_pool_destroy(pool);
        /* resend: the whole history as one causal request per sequence,
         * all N in one batch, for 1 step (2 when N = 1) */
        int rs = n == 1 ? 2 : 1, len = prompt + steps / 2;
        float *xr = rnd((size_t)len * DM, 1.0f, &seed);
        float *yr = malloc((size_t)n * len * DM * sizeof(float));
        if (!yr)
            die("resend", "out of memory");
        for (int i = 0; i < n; i++)
            sq[i] = (attn_seq){.t = len, .s = len, .t_valid = len,
                               .s_valid = len, .causal = 1, .x = xr,
                               .y = yr + (size_t)i * len * DM};
        t0 = now_s();
        for (int k = 0; k < rs; k++)
            if (attn_forward(&c, &w, sq, n, ex, err))
                die("resend", err);
        double rtps = (double)n * rs / (now_s() - t0);
        free(xr), free(yr);
        double ttps = torch_tps(peer, n, prompt, steps, threads);
        double htps = NAN;
        if (http) {
            char cmd[1024];
            snprintf(cmd, sizeof cmd, "%s %d", http, n);
            FILE *f = popen(cmd, "r");
            char line[256];
            while (f && fgets(line, sizeof line, f))
                if (!strncmp(line, "tps=", 4))
                    htps = atof(line + 4);
            if (f)
                pclose(f);
        }
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("decode n=%d engine_tps=%.1f engine_gbps=%.2f memcpy_gbps=%.2f "
               "torch_tps=%.1f resend_tps=%.2f http_tps=%.1f bw_frac=%.2f "
               "torch_ratio=%.2f resend_ratio=%.1f http_frac=%.2f "
               "step_gflops=%.1f sgemm_gflops=%.1f rss_mb=%.0f\n",
               n, tps, gbps, mgbps, ttps, rtps, htps, gbps / mgbps,
               tps / ttps, tps / rtps, htps / tps, flops / dt / 1e9, sgf,
               ru.ru_maxrss / 1024.0);
        fflush(stdout);
        free(kv), free(sq), free(xp), free(yp), free(xs), free(ys);
    }
    attn_exec_destroy(ex);
    free((void *)w.w_q), free((void *)w.w_k), free((void *)w.w_v);
    free((void *)w.w_o);
    return 0;
}
