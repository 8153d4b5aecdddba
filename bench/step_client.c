/*
 * step_client.c - the load generator of the decoder-step benchmarks: N
 * clients, each on its own keep-alive connection, drive one sequence each
 * through an OIP server (attnd, or bench/fastapi_peer.py): a start with a
 * P-token prompt, then S one-token steps, every request waiting for the
 * answer to the one before (as a decoder does). Tensors go in Triton's
 * binary framing. Prints, all clients together:
 *
 *   tps=<steps/s> p50_ms=<step latency> p99_ms=<...> client_cpu_ms=<...>
 *
 * The prefill is not timed: the clock starts when every client has its
 * prompt answered. All N connections are driven by one thread and epoll,
 * as wrk drives its connections: the answers to a batch of steps arrive
 * together, and one thread woken once sends the next steps of all of
 * them. With a thread per client (as before), each answer woke its own
 * thread, ~100 us of CPU a step at 32 clients on the server's two cores;
 * now it costs tens of microseconds, so the figure is the server's.
 *
 *   step_client --port P --n N [--prompt 128] [--steps 32] [--model llama]
 *               [--d-model 2048] [--seq-base 1] [--resend]
 *
 * --resend: each step carries its sequence_position and is sent twice (as
 * a client whose answer was lost sends it again): the second replaces the
 * first on the server, and --steps counts both (tps is requests/s).
 *
 * Any answer other than 200, a short read or a timeout (60 s a request)
 * ends the run with a message and exit code 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_S 60.0

static int port, n_clients, prompt = 128, steps = 32, dm = 2048, seq_base = 1,
           resend;
static const char *model = "llama";

typedef struct client {
    int id, fd;
    uint64_t seed;
    char *buf;        /* the request, then the answer */
    size_t cap;
    size_t total, off; /* request bytes, sent */
    size_t got, need;  /* answer bytes read, expected (0: head not in yet) */
    int sending, done; /* done: with this phase (the prompt, the steps) */
    int step;          /* the step out or last answered, -1 before the first */
    double t_sent;
    float *toks;      /* four tokens the steps cycle through */
    double *lat_ms;   /* per step */
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

static int fail(const client *c, const char *what)
{
    fprintf(stderr, "step_client: sequence %d: %s\n", seq_base + c->id, what);
    return -1;
}

static int connect_to(client *c)
{
    struct sockaddr_in a;
    int one = 1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        return fail(c, strerror(errno));
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
        return fail(c, strerror(errno));
    return 0; /* the first send waits for EPOLLOUT */
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

/* request: c's next request (t new tokens x, a start when start; at
 * sequence_position pos when pos >= 0) in c->buf. */
static int request(client *c, int t, int start, const float *x, int pos)
{
    char hdr[512], head[256], at[48] = "";
    size_t xb = (size_t)t * (size_t)dm * sizeof(float);
    if (pos >= 0)
        snprintf(at, sizeof at, ",\"sequence_position\":%d", pos);
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"parameters\":{\"sequence_id\":%d%s%s,\"binary_data_output\":true},"
                      "\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,%d,%d],"
                      "\"parameters\":{\"binary_data_size\":%zu}}],"
                      "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}]}",
                      seq_base + c->id, start ? ",\"sequence_start\":true" : "", at, t, dm, xb);
    int rl = snprintf(head, sizeof head,
                      "POST /v2/models/%s/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/octet-stream\r\n"
                      "Inference-Header-Content-Length: %d\r\nContent-Length: %zu\r\n\r\n",
                      model, hl, (size_t)hl + xb);
    c->total = (size_t)rl + (size_t)hl + xb;
    if (reserve(c, c->total + 1))
        return -1;
    memcpy(c->buf, head, (size_t)rl);
    memcpy(c->buf + rl, hdr, (size_t)hl);
    memcpy(c->buf + rl + hl, x, xb);
    c->off = c->got = c->need = 0;
    c->sending = 1;
    c->t_sent = now_s();
    return 0;
}

/* pump: send what is left of the request, then read the answer. Returns
 * 1 when the answer is complete, 0 when it waits for the socket, -1 on a
 * failure (reported). */
static int pump(client *c)
{
    while (c->sending) {
        ssize_t k = send(c->fd, c->buf + c->off, c->total - c->off, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (k <= 0)
            return fail(c, k < 0 ? strerror(errno) : "connection closed");
        c->off += (size_t)k;
        if (c->off == c->total)
            c->sending = 0;
    }
    for (;;) { /* the answer: headers, then Content-Length bytes */
        if (reserve(c, c->got + 65536 + 1))
            return -1;
        ssize_t k = recv(c->fd, c->buf + c->got, c->cap - c->got - 1, 0);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (k <= 0)
            return fail(c, k < 0 ? strerror(errno) : "connection closed mid-answer");
        c->got += (size_t)k;
        c->buf[c->got] = 0;
        if (!c->need) {
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
            c->need = (size_t)(end + 4 - c->buf) + (size_t)strtoull(cl + 17, NULL, 10);
            *end = '\r';
        }
        if (c->got >= c->need)
            return c->got == c->need ? 1 : fail(c, "more bytes than the answer");
    }
}

static int watch(int ep, client *c)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
        return fail(c, strerror(errno));
    return 0;
}

/* next: c's answer is in: time it and send c's next step, if any.
 * Returns 1 when c is done with this phase, 0 when a request is out. */
static int next(client *c, int stepping)
{
    if (stepping && c->step >= 0)
        c->lat_ms[c->step] = 1e3 * (now_s() - c->t_sent);
    if (!stepping || ++c->step >= steps)
        return 1;
    int k = resend ? c->step / 2 : c->step; /* the token this step sends */
    return request(c, 1, 0, c->toks + (size_t)(k % 4) * dm,
                   resend ? prompt + k : -1) < 0 ? -1 : 0;
}

/* drive: c's requests as far as its socket lets them go: 1 when c is
 * done with this phase, 0 when it waits for the socket, -1 on failure. */
static int drive(client *c, int stepping)
{
    int r;
    while ((r = pump(c)) == 1 && (r = next(c, stepping)) == 0)
        ;
    c->done = r == 1;
    return r;
}

/* run_phase: drive every client's outstanding request, and (stepping)
 * its next steps, until all are done. */
static int run_phase(int ep, client *cl, int stepping)
{
    int left = n_clients;
    struct epoll_event evs[256];
    for (int i = 0; i < n_clients; i++) {
        int r = drive(&cl[i], stepping);
        if (r < 0)
            return -1;
        left -= r;
    }
    while (left) {
        int n = epoll_wait(ep, evs, 256, 1000);
        if (n < 0 && errno != EINTR) {
            perror("step_client: epoll_wait");
            return -1;
        }
        for (int e = 0; e < n; e++) {
            client *c = evs[e].data.ptr;
            if (c->done)
                continue;
            int r = drive(c, stepping);
            if (r < 0)
                return -1;
            left -= r;
        }
        double t = now_s();
        for (int i = 0; i < n_clients; i++)
            if (!cl[i].done && t - cl[i].t_sent > TIMEOUT_S)
                return fail(&cl[i], "no answer within 60 s");
    }
    return 0;
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
        else if (!strcmp(argv[i], "--resend"))
            resend = 1;
        else {
            fprintf(stderr, "usage: %s --port P --n N [--prompt 128] [--steps 32] "
                            "[--model llama] [--d-model 2048] [--seq-base 1] [--resend]\n",
                    argv[0]);
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
    size_t pn = (size_t)prompt * (size_t)dm;
    float *x = malloc(pn * sizeof(float));
    int ep = epoll_create1(0), rc = 1;
    if (!cl || !lat || !x || ep < 0)
        return 1;
    for (int i = 0; i < n_clients; i++) {
        client *c = &cl[i];
        c->id = i;
        c->fd = -1;
        c->step = -1;
        c->lat_ms = lat + (size_t)i * (size_t)steps;
        c->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(seq_base + i);
        c->toks = malloc(4 * (size_t)dm * sizeof(float));
        if (!c->toks)
            goto out;
        for (size_t k = 0; k < pn; k++)
            x[k] = rnd(&c->seed);
        /* the steps cycle through four tokens made before the clock starts */
        for (size_t k = 0; k < 4 * (size_t)dm; k++)
            c->toks[k] = rnd(&c->seed);
        if (connect_to(c) < 0 || watch(ep, c) < 0 ||
            request(c, prompt, 1, x, resend ? 0 : -1) < 0)
            goto out;
    }
    if (run_phase(ep, cl, 0) < 0)
        goto out;
    for (int i = 0; i < n_clients; i++) {
        /* the wait for the others' prompts may outlast the server's
         * keep-alive (attnd's --header-timeout): if it closed the idle
         * connection, open a new one (a peer with per-worker sequences
         * keeps its connections, so this never moves a sequence) */
        client *c = &cl[i];
        char b;
        if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            close(c->fd);
            if (connect_to(c) < 0 || watch(ep, c) < 0)
                goto out;
        }
        c->done = 0;
    }
    double t0 = now_s();
    for (int i = 0; i < n_clients; i++)
        if (next(&cl[i], 1) < 0) /* step 0 */
            goto out;
    if (run_phase(ep, cl, 1) < 0)
        goto out;
    double elapsed = now_s() - t0;
    size_t n = (size_t)n_clients * (size_t)steps;
    qsort(lat, n, sizeof *lat, cmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("tps=%.2f p50_ms=%.3f p99_ms=%.3f client_cpu_ms=%.0f\n", (double)n / elapsed,
           lat[n / 2], lat[n * 99 / 100],
           1e3 * ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) +
               1e-3 * ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec));
    rc = 0;
out:
    for (int i = 0; i < n_clients; i++) {
        if (cl[i].fd >= 0)
            close(cl[i].fd);
        free(cl[i].buf);
        free(cl[i].toks);
    }
    close(ep);
    free(cl);
    free(lat);
    free(x);
    return rc;
}
