/*
 * bench_proto.c - proto/ throughput on the B=8, T=512, d_model=768 tensor
 * (3,145,728 floats), next to its peers in the same run:
 *   decode JSON (9-digit text, as attnd prints; 17-digit text, as Python's
 *     json.dumps sends)  vs  jansson json_loadb + reading every number
 *   decode binary  vs  memcpy of the same bytes
 *   encode JSON  vs  jansson (json_real per number + json_dumps)
 *   encode binary  vs  memcpy
 * Each case runs in its own child process (fork), best of REPS, so its
 * peak RSS (ru_maxrss from wait4) is its own. MB/s counts body bytes.
 * Usage: bench_proto [reps]   (default 3)
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/oip.h"

#define B 8
#define T 512
#define D 768
#define N ((size_t)B * T * D)

static float *x;             /* (B, T, D) values in [-3, 3) */
static char *json9, *json17; /* request bodies */
static size_t json9_len, json17_len;
static char *bin;            /* header + binary body */
static size_t bin_len, bin_hlen;
static int reps = 3;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *HDR = "{\"id\":\"bench\",\"inputs\":[{\"name\":\"x\","
                         "\"datatype\":\"FP32\",\"shape\":[8,512,768],";

/* A JSON request with %.*g numbers (made once, outside the timings). */
static char *make_json(int digits, size_t *len)
{
    size_t cap = N * 26 + 256;
    char *s = malloc(cap);
    size_t n = (size_t)sprintf(s, "%s\"data\":[", HDR);
    for (size_t i = 0; i < N; i++)
        n += (size_t)sprintf(s + n, "%s%.*g", i ? "," : "", digits,
                             (double)x[i]);
    n += (size_t)sprintf(s + n, "]}]}");
    *len = n;
    return s;
}

static volatile double sink;

typedef double (*bench_fn)(void); /* returns bytes processed per run */

static double our_decode_json9(void)
{
    oip_request r;
    char err[OIP_ERRMAX];
    if (oip_decode(&r, json9, json9_len, 0, NULL, err)) {
        fprintf(stderr, "decode: %s\n", err);
        exit(1);
    }
    sink = ((float *)r.inputs[0].data)[N - 1];
    oip_request_free(&r);
    return (double)json9_len;
}

static double our_decode_json17(void)
{
    oip_request r;
    char err[OIP_ERRMAX];
    if (oip_decode(&r, json17, json17_len, 0, NULL, err)) {
        fprintf(stderr, "decode: %s\n", err);
        exit(1);
    }
    sink = ((float *)r.inputs[0].data)[N - 1];
    oip_request_free(&r);
    return (double)json17_len;
}

static double jansson_decode(const char *s, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(s, len, 0, &jerr);
    if (!root) {
        fprintf(stderr, "jansson: %s\n", jerr.text);
        exit(1);
    }
    json_t *data = json_object_get(
        json_array_get(json_object_get(root, "inputs"), 0), "data");
    float *out = malloc(N * sizeof *out);
    for (size_t i = 0; i < N; i++)
        out[i] = (float)json_number_value(json_array_get(data, i));
    sink = out[N - 1];
    free(out);
    json_decref(root);
    return (double)len;
}

static double peer_decode_json9(void)
{
    return jansson_decode(json9, json9_len);
}

static double peer_decode_json17(void)
{
    return jansson_decode(json17, json17_len);
}

static double our_decode_bin(void)
{
    oip_request r;
    char err[OIP_ERRMAX];
    if (oip_decode(&r, bin, bin_len, bin_hlen, NULL, err)) {
        fprintf(stderr, "decode: %s\n", err);
        exit(1);
    }
    sink = ((float *)r.inputs[0].data)[N - 1];
    oip_request_free(&r);
    return (double)bin_len;
}

static double peer_memcpy_in(void)
{
    float *out = malloc(N * sizeof *out);
    memcpy(out, bin + bin_hlen, N * sizeof *out);
    sink = out[N - 1];
    free(out);
    return (double)bin_len;
}

static double encode(int binary)
{
    oip_output o = {.name = "y", .dtype = OIP_FP32, .rank = 3,
                    .shape = {B, T, D}, .data = x, .binary = binary};
    char *body, err[OIP_ERRMAX];
    size_t len, hl;
    if (oip_encode("demo", "bench", &o, 1, NULL, &body, &len, &hl, err)) {
        fprintf(stderr, "encode: %s\n", err);
        exit(1);
    }
    sink = body[len - 1];
    free(body);
    return (double)len;
}

static double our_encode_json(void)
{
    return encode(0);
}

static double our_encode_bin(void)
{
    return encode(1);
}

static double peer_encode_json(void)
{
    json_t *data = json_array();
    for (size_t i = 0; i < N; i++)
        json_array_append_new(data, json_real(x[i]));
    json_t *root = json_pack("{s:s,s:s,s:s,s:[{s:s,s:s,s:[i,i,i],s:o}]}",
                             "model_name", "demo", "model_version", "1", "id",
                             "bench", "outputs", "name", "y", "datatype",
                             "FP32", "shape", B, T, D, "data", data);
    char *s = json_dumps(root, JSON_COMPACT);
    size_t len = strlen(s);
    sink = s[len - 1];
    free(s);
    json_decref(root);
    return (double)len;
}

static double peer_memcpy_out(void)
{
    char *out = malloc(N * 4 + 256);
    memcpy(out + 256, x, N * 4);
    sink = out[N * 4];
    free(out);
    return (double)(N * 4 + 200);
}

static double noop(void)
{
    return 1;
}

typedef struct result {
    double mbps, ms;
    long rss_kb;
} result;

/* Runs fn reps times in a child; best time; the child's peak RSS. */
static result run(bench_fn fn)
{
    int fd[2];
    result r = {0, 0, 0};
    if (pipe(fd))
        return r;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        double best = 1e30, bytes = 0;
        for (int i = 0; i < reps; i++) {
            double t0 = now();
            bytes = fn();
            double t = now() - t0;
            if (t < best)
                best = t;
        }
        double out[2] = {bytes / best / 1e6, best * 1e3};
        if (write(fd[1], out, sizeof out) != sizeof out)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    double in[2] = {0, 0};
    if (read(fd[0], in, sizeof in) != sizeof in)
        fprintf(stderr, "bench child failed\n");
    close(fd[0]);
    int status;
    struct rusage ru;
    wait4(pid, &status, 0, &ru);
    r.mbps = in[0];
    r.ms = in[1];
    r.rss_kb = ru.ru_maxrss;
    return r;
}

static long base_kb; /* a child that does nothing: the inputs it shares */

static void row(const char *what, bench_fn ours, bench_fn peer,
                const char *peer_name)
{
    result a = run(ours), b = run(peer);
    printf("%-22s %6.0f MB/s %7.1f ms %+5ld MiB | %-8s %6.0f MB/s %7.1f ms "
           "%+5ld MiB | x%.2f\n",
           what, a.mbps, a.ms, (a.rss_kb - base_kb) / 1024, peer_name, b.mbps,
           b.ms, (b.rss_kb - base_kb) / 1024, b.ms > 0 ? b.ms / a.ms : 0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        reps = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
    x = malloc(N * sizeof *x);
    uint64_t s = 42;
    for (size_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 6.0 - 3.0);
    }
    json9 = make_json(9, &json9_len);
    json17 = make_json(17, &json17_len);
    bin_hlen = (size_t)snprintf(NULL, 0, "%s\"parameters\":"
                                "{\"binary_data_size\":%zu}}]}", HDR, N * 4);
    bin_len = bin_hlen + N * 4;
    bin = malloc(bin_len + 1);
    snprintf(bin, bin_hlen + 1, "%s\"parameters\":{\"binary_data_size\":%zu}}]}",
             HDR, N * 4);
    memcpy(bin + bin_hlen, x, N * 4);

    base_kb = run(noop).rss_kb;
    printf("bench_proto: B=%d T=%d d_model=%d (%zu floats); JSON bodies "
           "%.1f MB (9 digits), %.1f MB (17 digits); binary %.1f MB; best of "
           "%d\n", B, T, D, N, json9_len / 1e6, json17_len / 1e6,
           bin_len / 1e6, reps);
    printf("MB/s = body bytes per second; MiB = child peak RSS above the %ld "
           "MiB a do-nothing child shows (the shared inputs)\n",
           base_kb / 1024);
    printf("%-22s %28s | %-8s %28s | peer time / ours\n", "case (ours)",
           "", "peer", "");
    row("decode JSON 9-digit", our_decode_json9, peer_decode_json9,
        "jansson");
    row("decode JSON 17-digit", our_decode_json17, peer_decode_json17,
        "jansson");
    row("decode binary FP32", our_decode_bin, peer_memcpy_in, "memcpy");
    row("encode JSON", our_encode_json, peer_encode_json, "jansson");
    row("encode binary", our_encode_bin, peer_memcpy_out, "memcpy");
    return 0;
}
