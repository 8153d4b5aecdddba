/*
 * bench_grpc.c - a closed-loop gRPC load generator (nghttp2 client, one
 * thread and one HTTP/2 connection per client), for bench/grpc_bench.py.
 *
 *   bench_grpc --port P --msg FILE [--conns 16] [--seconds 5]
 *              [--mode unary|stream|rest] [--path /inference.GRPCInferenceService/ModelInfer]
 *              [--first FILE --restart N]
 *
 * FILE holds one request message (protobuf, no gRPC prefix). unary: each
 * client sends it as one call after another (one call in flight per
 * connection, as wrk keeps one request per connection); stream: each client
 * opens one ModelStreamInfer call and sends the message, waits for its
 * response message, sends the next. Prints one JSON line: calls (or stream
 * steps) answered OK, errors, calls/s and the latency p50/p99 in ms.
 * --first FILE --restart N: in stream mode, every N-th step (the 0th too)
 * sends FILE's message instead (a sequence's start: decoder steps over a
 * server-held K/V cache, restarted every N tokens).
 * --mode rest: the same closed loop over HTTP/1.1 keep-alive, FILE a JSON
 * body POSTed to --path (the REST side of a comparison, with the same
 * client machinery; --first/--restart as for stream).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct client {
    int fd;
    nghttp2_session *h2;
    const unsigned char *frame; /* 5-byte prefix + message */
    size_t frame_len, sent;
    int sending, eof;           /* a frame to send; end the request */
    int32_t sid;
    int closed;                 /* the current stream closed */
    size_t got;                 /* response bytes of the current message */
    size_t want;                /* its framed length once the prefix is in */
    unsigned char pre[5];
    int pre_got;
    int replies;                /* response messages completed */
    int status;                 /* grpc-status seen, -1 none */
    double *lat;
    size_t n, cap;
    long errors;
} client;

static const char *g_path = "/inference.GRPCInferenceService/ModelInfer";
static int g_port, g_stream, g_rest;
static double g_seconds = 5;
static unsigned char *g_frame, *g_first;
static size_t g_frame_len, g_first_len;
static long g_restart;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ssize_t read_body(nghttp2_session *h2, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    client *c = ud;
    size_t n;
    (void)h2, (void)id, (void)src;
    if (!c->sending) {
        if (c->eof) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        return NGHTTP2_ERR_DEFERRED;
    }
    n = c->frame_len - c->sent;
    if (n > length)
        n = length;
    memcpy(buf, c->frame + c->sent, n);
    c->sent += n;
    if (c->sent == c->frame_len) {
        c->sending = 0;
        if (!g_stream)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return (ssize_t)n;
}

/* response messages: count them by their 5-byte prefixes */
static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *ud)
{
    client *c = ud;
    (void)h2, (void)flags, (void)id;
    while (len) {
        if (c->pre_got < 5) {
            c->pre[c->pre_got++] = *data++;
            len--;
            if (c->pre_got == 5) {
                c->want = (size_t)c->pre[1] << 24 | (size_t)c->pre[2] << 16 |
                          (size_t)c->pre[3] << 8 | c->pre[4];
                c->got = 0;
            }
        } else {
            size_t take = c->want - c->got < len ? c->want - c->got : len;
            c->got += take;
            data += take;
            len -= take;
        }
        if (c->pre_got == 5 && c->got == c->want) {
            c->replies++;
            c->pre_got = 0;
        }
    }
    return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *ud)
{
    client *c = ud;
    (void)h2, (void)f, (void)flags, (void)vlen;
    if (nlen == 11 && !memcmp(name, "grpc-status", 11))
        c->status = atoi((const char *)value);
    return 0;
}

static int on_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud)
{
    client *c = ud;
    (void)h2, (void)id;
    if (code)
        c->status = 99;
    c->closed = 1;
    return 0;
}

/* pump: write what nghttp2 has, then read once; -1 on a dead connection */
static int pump(client *c)
{
    unsigned char buf[65536];
    ssize_t n;
    for (;;) {
        const uint8_t *d;
        ssize_t m = nghttp2_session_mem_send(c->h2, &d);
        if (m < 0)
            return -1;
        if (m == 0)
            break;
        while (m > 0) {
            ssize_t w = write(c->fd, d, (size_t)m);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return -1;
            d += w;
            m -= w;
        }
    }
    n = read(c->fd, buf, sizeof buf);
    if (n <= 0)
        return -1;
    return nghttp2_session_mem_recv(c->h2, buf, (size_t)n) < 0 ? -1 : 0;
}

static int32_t submit(client *c)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"127.0.0.1", 10, 9, 0},
        {(uint8_t *)":path", (uint8_t *)g_path, 5, strlen(g_path), 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
        {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0},
    };
    nghttp2_data_provider prd = {{0}, read_body};
    c->closed = 0;
    c->status = -1;
    return nghttp2_submit_request(c->h2, NULL, nv, 6, &prd, c);
}

static void record(client *c, double dt)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 4096;
        c->lat = realloc(c->lat, c->cap * sizeof *c->lat);
    }
    c->lat[c->n++] = dt;
}

/* rest_call: one POST of body over c->fd, its answer read whole; 0 when
 * it was a 200, 1 another status, -1 a dead connection. */
static int rest_call(client *c, const unsigned char *body, size_t len)
{
    char head[512], buf[65536];
    size_t have = 0, need;
    char *end, *cl;
    int n = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     g_path, len);
    if (write(c->fd, head, (size_t)n) != n || write(c->fd, body, len) != (ssize_t)len)
        return -1;
    for (;;) {
        ssize_t r = read(c->fd, buf + have, sizeof buf - 1 - have);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        buf[have] = 0;
        if ((end = strstr(buf, "\r\n\r\n")))
            break;
        if (have == sizeof buf - 1)
            return -1;
    }
    cl = strcasestr(buf, "content-length:");
    need = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
    while (have < need) {
        ssize_t r = read(c->fd, buf, sizeof buf < need - have ? sizeof buf : need - have);
        if (r <= 0)
            return -1;
        have += (size_t)r;
    }
    return strncmp(buf + 9, "200", 3) != 0;
}

static void *run(void *arg)
{
    client *c = arg;
    nghttp2_session_callbacks *cb;
    struct sockaddr_in a;
    int one = 1;
    double end = now() + g_seconds;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("connect");
        exit(1);
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (g_rest) {
        long k;
        for (k = 0; now() < end; k++) {
            double t0 = now();
            int first = g_first && k % g_restart == 0, rc;
            rc = first ? rest_call(c, g_first + 5, g_first_len - 5)
                       : rest_call(c, g_frame + 5, g_frame_len - 5);
            if (rc < 0) {
                c->errors++;
                break;
            }
            if (rc)
                c->errors++;
            else
                record(c, now() - t0);
        }
        close(c->fd);
        return NULL;
    }
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    nghttp2_session_client_new(&c->h2, cb, c);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, NULL, 0);
    c->frame = g_frame;
    c->frame_len = g_frame_len;
    if (g_stream) {
        c->sid = submit(c);
        long k;
        for (k = 0; now() < end; k++) {
            double t0 = now();
            int before = c->replies;
            int first = g_first && k % g_restart == 0;
            c->frame = first ? g_first : g_frame;
            c->frame_len = first ? g_first_len : g_frame_len;
            c->sent = 0;
            c->sending = 1;
            nghttp2_session_resume_data(c->h2, c->sid);
            while (c->replies == before && !c->closed)
                if (pump(c) < 0)
                    goto dead;
            if (c->closed)
                goto dead;
            record(c, now() - t0);
        }
        c->eof = 1;
        nghttp2_session_resume_data(c->h2, c->sid);
        while (!c->closed)
            if (pump(c) < 0)
                break;
    } else {
        while (now() < end) {
            double t0 = now();
            c->sent = 0;
            c->sending = 1;
            c->sid = submit(c);
            while (!c->closed)
                if (pump(c) < 0)
                    goto dead;
            if (c->status == 0)
                record(c, now() - t0);
            else
                c->errors++;
        }
    }
    nghttp2_session_del(c->h2);
    close(c->fd);
    return NULL;
dead:
    c->errors++;
    nghttp2_session_del(c->h2);
    close(c->fd);
    return NULL;
}

/* load: FILE's message with its 5-byte gRPC prefix; NULL when unreadable */
static unsigned char *load(const char *path, size_t *out)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long len;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    b = malloc((size_t)len + 5);
    if (!b || fread(b + 5, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    b[0] = 0;
    b[1] = (unsigned char)(len >> 24);
    b[2] = (unsigned char)(len >> 16);
    b[3] = (unsigned char)(len >> 8);
    b[4] = (unsigned char)len;
    *out = (size_t)len + 5;
    return b;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int conns = 16, i;
    const char *msg = NULL, *first = NULL;
    client *cs;
    pthread_t *th;
    double *all, t0, dt;
    size_t n = 0;
    long errors = 0;
    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            g_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conns"))
            conns = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            g_seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--mode")) {
            g_stream = !strcmp(argv[i + 1], "stream");
            g_rest = !strcmp(argv[i + 1], "rest");
        }
        else if (!strcmp(argv[i], "--path"))
            g_path = argv[i + 1];
        else if (!strcmp(argv[i], "--msg"))
            msg = argv[i + 1];
        else if (!strcmp(argv[i], "--first"))
            first = argv[i + 1];
        else if (!strcmp(argv[i], "--restart"))
            g_restart = atol(argv[i + 1]);
    }
    if (!g_port || !msg || conns < 1 || !(g_frame = load(msg, &g_frame_len)) ||
        (first && (g_restart < 1 || !(g_first = load(first, &g_first_len))))) {
        fprintf(stderr, "usage: %s --port P --msg FILE [--conns N] [--seconds S] "
                        "[--mode unary|stream|rest] [--path P] [--first FILE --restart N]\n",
                argv[0]);
        return 2;
    }
    if (g_stream)
        g_path = "/inference.GRPCInferenceService/ModelStreamInfer";
    else if (g_rest && !strcmp(g_path, "/inference.GRPCInferenceService/ModelInfer"))
        g_path = "/v2/models/demo/infer";
    cs = calloc((size_t)conns, sizeof *cs);
    th = calloc((size_t)conns, sizeof *th);
    t0 = now();
    for (i = 0; i < conns; i++)
        pthread_create(&th[i], NULL, run, &cs[i]);
    for (i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    dt = now() - t0;
    for (i = 0; i < conns; i++)
        n += cs[i].n, errors += cs[i].errors;
    all = malloc((n ? n : 1) * sizeof *all);
    n = 0;
    for (i = 0; i < conns; i++) {
        memcpy(all + n, cs[i].lat, cs[i].n * sizeof *all);
        n += cs[i].n;
        free(cs[i].lat);
    }
    qsort(all, n, sizeof *all, cmp);
    {
        double sum = 0;
        size_t k;
        for (k = 0; k < n; k++)
            sum += all[k];
        printf("{\"ok\": %zu, \"errors\": %ld, \"rps\": %.1f, \"p50_ms\": %.3f, "
               "\"p99_ms\": %.3f, \"p999_ms\": %.3f, \"mean_ms\": %.3f}\n", n, errors,
               (double)n / dt, n ? all[n / 2] * 1e3 : 0.0,
               n ? all[(size_t)((double)n * 0.99)] * 1e3 : 0.0,
               n ? all[(size_t)((double)n * 0.999)] * 1e3 : 0.0, n ? sum / (double)n * 1e3 : 0.0);
    }
    free(all);
    free(cs);
    free(th);
    free(g_frame);
    free(g_first);
    return errors ? 1 : 0;
}
