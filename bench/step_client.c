/*
 * step_client.c - the load generator of the decoder-step benchmarks: N
 * clients, each on its own thread and keep-alive connection, drive one
 * sequence each through an OIP server (attnd, or bench/fastapi_peer.py):
 * a start with a P-token prompt, then S one-token steps, every request
 * waiting for the answer to the one before (as a decoder does). Tensors go
 * in Triton's binary framing. Prints, all clients together:
 *
 *   tps=<steps/s> p50_ms=<step latency> p99_ms=<...> client_cpu_ms=<...>
 *
 * The prefill is not timed: the clock starts when every client has its
 * prompt answered. A client in C costs tens of microseconds a step, so the
 * figure is the server's; bench/decode_http.py's Python threads spent
 * about a millisecond of CPU a step under one GIL, on the same two cores
 * as the server.
 *
 *   step_client --port P --n N [--prompt 128] [--steps 32] [--model llama]
 *               [--d-model 2048] [--seq-base 1]
 *
 * Any answer other than 200, a short read or a timeout (60 s a request)
 * ends the run with a message and exit code 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int port, n_clients, prompt = 128, steps = 32, dm = 2048, seq_base = 1;
static const char *model = "llama";
static pthread_barrier_t started;

typedef struct client {
    pthread_t th;
    int id, fd, failed;
    uint64_t seed;
    char *buf;        /* request, then answer */
    size_t cap;
    double *lat_ms;   /* per step */
    double elapsed;   /* seconds for the steps */
} client;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float rnd(uint64_t *s) /* uniform in [-1, 1) */
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 23) - 1.0);
}

static int fail(client *c, const char *what)
{
    fprintf(stderr, "step_client: sequence %d: %s\n", seq_base + c->id, what);
    c->failed = 1;
    return -1;
}

static int connect_to(client *c)
{
    struct sockaddr_in a;
    struct timeval tv = {60, 0};
    int one = 1;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return fail(c, strerror(errno));
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0)
        return fail(c, strerror(errno));
    return 0;
}

static int reserve(client *c, size_t n)
{
    if (n <= c->cap)
        return 0;
    char *b = realloc(c->buf, n);
    if (!b)
        return fail(c, "out of memory");
    c->buf = b;
    c->cap = n;
    return 0;
}

/* call: one request of t new tokens (a start when start), answer read and
 * checked. */
static int call(client *c, int t, int start, const float *x)
{
    char hdr[512], head[256];
    size_t xb = (size_t)t * (size_t)dm * sizeof(float);
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"parameters\":{\"sequence_id\":%d%s,\"binary_data_output\":true},"
                      "\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,%d,%d],"
                      "\"parameters\":{\"binary_data_size\":%zu}}],"
                      "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}]}",
                      seq_base + c->id, start ? ",\"sequence_start\":true" : "", t, dm, xb);
    int rl = snprintf(head, sizeof head,
                      "POST /v2/models/%s/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/octet-stream\r\n"
                      "Inference-Header-Content-Length: %d\r\nContent-Length: %zu\r\n\r\n",
                      model, hl, (size_t)hl + xb);
    size_t total = (size_t)rl + (size_t)hl + xb, off = 0, got = 0, need = 0, body = 0;
    if (reserve(c, total + 1))
        return -1;
    memcpy(c->buf, head, (size_t)rl);
    memcpy(c->buf + rl, hdr, (size_t)hl);
    memcpy(c->buf + rl + hl, x, xb);
    while (off < total) {
        ssize_t k = send(c->fd, c->buf + off, total - off, MSG_NOSIGNAL);
        if (k <= 0)
            return fail(c, k < 0 ? strerror(errno) : "connection closed");
        off += (size_t)k;
    }
    for (;;) { /* the answer: headers, then Content-Length bytes */
        if (reserve(c, got + 65536 + 1))
            return -1;
        ssize_t k = recv(c->fd, c->buf + got, c->cap - got - 1, 0);
        if (k <= 0)
            return fail(c, k < 0 ? strerror(errno) : "connection closed mid-answer");
        got += (size_t)k;
        c->buf[got] = 0;
        if (!need) {
            char *end = strstr(c->buf, "\r\n\r\n"), *cl;
            if (!end)
                continue;
            *end = 0;
            if (strncmp(c->buf, "HTTP/1.1 200", 12) != 0) {
                char msg[400];
                snprintf(msg, sizeof msg, "answer %.300s", c->buf);
                return fail(c, msg);
            }
            cl = strcasestr(c->buf, "\r\nContent-Length:");
            if (!cl)
                return fail(c, "answer without Content-Length");
            body = (size_t)strtoull(cl + 17, NULL, 10);
            need = (size_t)(end + 4 - c->buf) + body;
            *end = '\r';
        }
        if (got >= need)
            return got == need ? 0 : fail(c, "more bytes than the answer");
    }
}

static void *run(void *arg)
{
    client *c = arg;
    size_t pn = (size_t)prompt * (size_t)dm;
    float *x = malloc(pn * sizeof(float));
    float *toks = malloc(4 * (size_t)dm * sizeof(float));
    int ok;
    c->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(seq_base + c->id);
    ok = x && toks && connect_to(c) == 0;
    for (size_t i = 0; ok && i < pn; i++)
        x[i] = rnd(&c->seed);
    /* the steps cycle through four tokens made before the clock starts */
    for (size_t i = 0; ok && i < 4 * (size_t)dm; i++)
        toks[i] = rnd(&c->seed);
    ok = ok && call(c, prompt, 1, x) == 0;
    if (!ok)
        c->failed = 1;
    pthread_barrier_wait(&started);
    if (ok) {
        /* the wait for the others' prompts may outlast the server's
         * keep-alive (attnd's --header-timeout): if it closed the idle
         * connection, open a new one (a peer with per-worker sequences
         * keeps its connections, so this never moves a sequence) */
        char b;
        if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            close(c->fd);
            ok = connect_to(c) == 0;
        }
    }
    if (ok) {
        double t0 = now_s();
        for (int s = 0; s < steps; s++) {
            double t = now_s();
            if (call(c, 1, 0, toks + (size_t)(s % 4) * dm) < 0)
                break;
            c->lat_ms[s] = 1e3 * (now_s() - t);
        }
        c->elapsed = now_s() - t0;
    }
    if (c->fd >= 0)
        close(c->fd);
    free(x);
    free(toks);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--port") && v)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && v)
            n_clients = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && v)
            prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && v)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && v)
            model = argv[++i];
        else if (!strcmp(argv[i], "--d-model") && v)
            dm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq-base") && v)
            seq_base = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s --port P --n N [--prompt 128] [--steps 32] "
                            "[--model llama] [--d-model 2048] [--seq-base 1]\n", argv[0]);
            return 2;
        }
    }
    if (port <= 0 || n_clients < 1 || n_clients > 4096 || prompt < 1 || steps < 1 || dm < 1) {
        fprintf(stderr, "step_client: need --port, --n in 1..4096, positive --prompt, "
                        "--steps, --d-model\n");
        return 2;
    }
    client *cl = calloc((size_t)n_clients, sizeof *cl);
    double *lat = calloc((size_t)n_clients * (size_t)steps, sizeof *lat);
    if (!cl || !lat)
        return 1;
    pthread_barrier_init(&started, NULL, (unsigned)n_clients);
    for (int i = 0; i < n_clients; i++) {
        cl[i].id = i;
        cl[i].fd = -1;
        cl[i].lat_ms = lat + (size_t)i * (size_t)steps;
        pthread_create(&cl[i].th, NULL, run, &cl[i]);
    }
    double worst = 0;
    int failed = 0;
    for (int i = 0; i < n_clients; i++) {
        pthread_join(cl[i].th, NULL);
        failed |= cl[i].failed;
        if (cl[i].elapsed > worst)
            worst = cl[i].elapsed;
        free(cl[i].buf);
    }
    if (failed || worst <= 0)
        return 1;
    size_t n = (size_t)n_clients * (size_t)steps;
    qsort(lat, n, sizeof *lat, cmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("tps=%.2f p50_ms=%.3f p99_ms=%.3f client_cpu_ms=%.0f\n", (double)n / worst,
           lat[n / 2], lat[n * 99 / 100],
           1e3 * ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) +
               1e-3 * ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec));
    free(cl);
    free(lat);
    return 0;
}
