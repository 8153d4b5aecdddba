/*
 * http.c - libmicrohttpd on the libuv loop: one thread for both.
 *
 * MHD runs with MHD_USE_EPOLL, no thread and no listener of its own
 * (http_accept.c accepts and hands it each connection); its epoll fd is
 * polled by a uv_poll handle and MHD_run() is called from the loop whenever
 * it is readable, when MHD's timeout falls due, and right after a suspended
 * connection was resumed (srv_kick). Each request gets one srv_req, created
 * on MHD's first call and freed in the completion callback; the body is
 * buffered up to a limit (413 before reading on a Content-Length over it,
 * and a chunked body is cut at the limit). Then the route's handler runs and
 * either answers at once or suspends the connection until srv_respond.
 */
#include "server/srv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void on_mhd_timer(uv_timer_t *t);
static void on_mhd_idle(uv_idle_t *h);

/* MHD runs again at once (its timeout 0) at most this many times in a row
 * before the loop polls for I/O. */
#define MHD_RUNS_AT_ONCE 64
#define MHD_STILL_RUNS 4096 /* then a stuck connection: MHD_STUCK_MS apart */
#define MHD_STUCK_MS 1

/* run_mhd: let MHD do its work, then re-arm its timeout. Loop thread.
 * A timeout of 0 (more to do at once: the next of pipelined requests, a
 * resumed connection) runs MHD again from the timer, in the same turn of
 * the loop, up to MHD_RUNS_AT_ONCE times in a row; then from an idle
 * handle, in the next turn, after the loop has polled for I/O. libuv 1.44
 * (Debian 12) runs a timer re-armed at 0 from its own callback again
 * before it polls (libuv issue 4245), and MHD 0.9.75 says 0 for as long
 * as a connection it cannot move stays ready (a chunk-size line longer
 * than its buffer): with the timer alone, the loop served nothing else,
 * signals and the guard's sweep included, until that connection's
 * connection-timeout. Even so the loop spun, a core's worth, until
 * min-body-rate closed that connection (header-timeout, 20 s, after its
 * head): after MHD_STILL_RUNS runs at 0 in a row with no I/O event, no
 * call of a handler and no kick (nothing moved; ~0.1 s here), MHD runs
 * MHD_STUCK_MS apart until something does. */
static void run_mhd(srv *s)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    uint64_t calls;
    if (!s->mhd)
        return;
    calls = s->mhd_calls;
    MHD_run(s->mhd);
    if (MHD_get_timeout(s->mhd, &ms) != MHD_YES || ms > 1000)
        ms = 1000;
    if (ms || s->mhd_calls != calls)
        s->mhd_still_runs = 0;
    else if (++s->mhd_still_runs >= MHD_STILL_RUNS)
        ms = MHD_STUCK_MS; /* nothing moved: a stuck connection */
    if (ms == 0 && s->mhd_runs_at_once >= MHD_RUNS_AT_ONCE) {
        uv_timer_stop(&s->mhd_timer);
        uv_idle_start(&s->mhd_idle, on_mhd_idle); /* no-op when active */
        return;
    }
    s->mhd_runs_at_once = ms == 0 ? s->mhd_runs_at_once + 1 : 0;
    uv_timer_start(&s->mhd_timer, on_mhd_timer, ms, 0);
}

static void on_mhd_timer(uv_timer_t *t) { run_mhd(t->data); }

/* on_mhd_idle: the loop has polled since MHD_RUNS_AT_ONCE runs in a row. */
static void on_mhd_idle(uv_idle_t *h)
{
    srv *s = h->data;
    uv_idle_stop(h);
    s->mhd_runs_at_once = 0;
    run_mhd(s);
}

static void on_mhd_poll(uv_poll_t *p, int status, int events)
{
    srv *s = p->data;
    (void)status;
    (void)events;
    srv_busy_poll_touch(s);
    s->mhd_runs_at_once = 0; /* the loop polled */
    s->mhd_still_runs = 0;   /* and I/O came */
    run_mhd(s);
}

void srv_kick(srv *s)
{
    s->mhd_still_runs = 0;
    if (s->mhd)
        uv_timer_start(&s->mhd_timer, on_mhd_timer, 0, 0);
}

int srv_client_went(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (fd < 0 || poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void srv_suspend(srv_req *r)
{
    if (r->conn && !r->suspended) {
        MHD_suspend_connection(r->conn);
        r->suspended = 1;
        r->s->n_suspended++;
    }
}

void srv_respond(srv_req *r, int status, const char *ctype, char *body,
                 size_t len)
{
    if (r->have_resp) { /* answered already (e.g. deadline): drop */
        free(body);
        return;
    }
    r->have_resp = 1;
    r->status = status;
    r->ctype = ctype;
    r->resp = body;
    r->resp_len = len;
    if (body && len) { /* held until sent (guard.c) */
        r->resp_mem = len;
        srv_mem_hold(r->s, len);
    }
    if (r->on_answer) {
        r->on_answer(r);
        return;
    }
    if (r->suspended) {
        r->suspended = 0;
        r->s->n_suspended--;
        MHD_resume_connection(r->conn);
        srv_kick(r->s);
    }
}

/* respond_body: a JSON answer with body b, or, when b could not be
 * allocated, 503 with the fixed out-of-memory body (http_answer.c). */
static void respond_body(srv_req *r, int status, char *b)
{
    if (!b && !r->have_resp) { /* (a second answer srv_respond drops) */
        status = 503;
        r->retry_after = 1;
        r->resp_oom = 1;
    }
    srv_respond(r, status, "application/json", b, b ? strlen(b) : 0);
}

void srv_respond_json(srv_req *r, int status, const char *json)
{
    respond_body(r, status, strdup(json));
}

void srv_respond_error(srv_req *r, int status, const char *fmt, ...)
{
    char msg[1024];
    char *body;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status == 503 && !r->retry_after)
        r->retry_after = 1;
    body = oip_error_body(msg);
    respond_body(r, status, body);
}

/* ---- CORS and auth ------------------------------------------------------ */

/* cors_match: copy origin into r->origin when the settings allow it, and
 * note which of their entries does (r->cors). */
static void cors_match(srv_req *r, const char *origin)
{
    int i;
    if ((i = srv_cors_index(r->s, origin))) {
        memcpy(r->origin, origin, strlen(origin) + 1);
        r->cors = i;
    }
}

int srv_key_ok(const char *key, const char *v, size_t len)
{
    size_t i, n = strlen(key);
    unsigned char d = 0;
    /* the scheme name is case-insensitive (RFC 9110 11.1) */
    if (!v || len < 7 || strncasecmp(v, "Bearer ", 7) != 0)
        return 0;
    v += 7;
    len -= 7;
    while (len && *v == ' ')
        v++, len--;
    for (i = 0; i < n; i++)
        d |= (unsigned char)(key[i] ^ (i < len ? v[i] : 0));
    return d == 0 && len == n;
}

/* ---- routing ------------------------------------------------------------ */

/* name_method: m into out (16 bytes) for logs and messages: its letters,
 * or "OTHER" when it has anything else or is longer. */
static void name_method(char *out, const char *m)
{
    size_t n = strspn(m, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
    if (n && !m[n] && n < 16)
        memcpy(out, m, n + 1);
    else
        memcpy(out, "OTHER", 6);
}

static int parse_method(const char *m)
{
    if (strcmp(m, "GET") == 0)
        return SRV_GET;
    if (strcmp(m, "POST") == 0)
        return SRV_POST;
    if (strcmp(m, "OPTIONS") == 0)
        return SRV_OPTIONS;
    if (strcmp(m, "HEAD") == 0)
        return SRV_HEAD;
    if (strcmp(m, "DELETE") == 0)
        return SRV_DELETE;
    return SRV_OTHER;
}

/* match: path against pattern; captures "{}" segments into arg. */
static int match(const char *pat, const char *path, char arg[2][SRV_NAME_MAX + 32])
{
    int n = 0;
    while (*pat && *path) {
        if (pat[0] == '{' && pat[1] == '}') {
            size_t len = strcspn(path, "/");
            if (len == 0 || len >= SRV_NAME_MAX + 32 || n >= 2)
                return 0;
            memcpy(arg[n], path, len);
            arg[n++][len] = 0;
            path += len;
            pat += 2;
        } else if (*pat++ != *path++) {
            return 0;
        }
    }
    return *pat == 0 && *path == 0;
}

/* route: find r's route; on failure answer 404/405 and return -1. The
 * versioned alias /v2/models/{m}/versions/1/... is folded first. */
static int route(srv_req *r, const char *url)
{
    size_t i;
    int allowed = 0;
    const char *v;
    /* url is MHD's path: the query already taken off and the rest
     * %-decoded, so a '?' in it came as %3F (a sequence id may hold one) */
    size_t len = strlen(url);
    if (len >= sizeof r->path) {
        /* logged cut, with its length */
        snprintf(r->path, sizeof r->path, "%.200s... (%zu bytes)", url, len);
        srv_respond_error(r, 414, "path: %zu bytes, over the limit of %zu",
                          len, sizeof r->path - 1);
        return -1;
    }
    memcpy(r->path, url, len);
    r->path[len] = 0;
    if (strncmp(r->path, "/v2/models/", 11) == 0 &&
        (v = strstr(r->path + 11, "/versions/")) != NULL) {
        char *vs = (char *)v + 10;
        size_t vlen = strcspn(vs, "/");
        if (vlen != 1 || vs[0] != '1') {
            srv_respond_error(r, 404, "version '%.*s' not found: only version 1 exists",
                              (int)vlen, vs);
            return -1;
        }
        memmove((char *)v, vs + vlen, strlen(vs + vlen) + 1);
    }
    for (i = 0; i < srv_n_routes; i++) {
        char arg[2][SRV_NAME_MAX + 32] = {{0}, {0}};
        if (!match(srv_routes[i].path, r->path, arg))
            continue;
        allowed |= srv_routes[i].method;
        if (srv_routes[i].method == r->method ||
            (r->method == SRV_HEAD && srv_routes[i].method == SRV_GET)) {
            r->route = &srv_routes[i];
            memcpy(r->arg, arg, sizeof arg);
            return 0;
        }
    }
    if (!allowed) {
        srv_respond_error(r, 404, "path: no endpoint %s", r->path);
        return -1;
    }
    if (r->method == SRV_OPTIONS) { /* CORS preflight */
        r->allow = allowed & SRV_DELETE ? "DELETE, OPTIONS"
                   : allowed & SRV_POST ? "GET, POST, OPTIONS" : "GET, OPTIONS";
        srv_respond(r, 204, NULL, NULL, 0);
        return -1;
    }
    r->allow = allowed & SRV_DELETE ? "DELETE"
               : allowed & SRV_POST ? (allowed & SRV_GET ? "GET, POST" : "POST") : "GET";
    srv_respond_error(r, 405, "method: %s is not allowed on %s (allowed: %s)",
                      r->method_name, r->path, r->allow);
    return -1;
}

/* ---- MHD callbacks ------------------------------------------------------ */

/* no_memory: 503 for a body that memory-budget cannot hold now. */
static void no_memory(srv_req *r)
{
    srv_respond_error(r, 503, "server: the memory for request bodies, "
                      "decoded requests and unsent answers (%lld bytes, "
                      "memory-budget) is in use; retry shortly",
                      r->s->cfg.memory_budget);
}

/* Header lines of one name: how many, and their values joined by ", "
 * (cut at all's size), the one field RFC 9110 5.3 makes of them. */
typedef struct fields {
    const char *name;
    int n;
    char all[128];
} fields;

/* add_field: MHD_get_connection_values' iterator filling the fields *cls. */
static enum MHD_Result add_field(void *cls, enum MHD_ValueKind kind,
                                 const char *key, const char *value)
{
    fields *f = cls;
    size_t len = strlen(f->all);
    (void)kind;
    if (strcasecmp(key, f->name) == 0)
        snprintf(f->all + len, sizeof f->all - len, "%s%s", f->n++ ? ", " : "",
                 value ? value : "");
    return MHD_YES;
}

/* get_fields: r's header lines called name into *f. */
static void get_fields(srv_req *r, const char *name, fields *f)
{
    f->name = name;
    f->n = 0;
    f->all[0] = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_field, f);
}

/* chunked_only: the number of codings in the list te ("chunked, chunked"
 * is 2) when every one is chunked, else 0. */
static int chunked_only(const char *te)
{
    int n = 0;
    for (;;) {
        size_t len;
        while (*te == ' ' || *te == '\t')
            te++;
        len = strcspn(te, ",");
        while (len && (te[len - 1] == ' ' || te[len - 1] == '\t'))
            len--;
        if (len != 7 || strncasecmp(te, "chunked", 7) != 0)
            return 0;
        n++;
        te += strcspn(te, ",");
        if (!*te++)
            return n;
    }
}

/* framed_twice: does r give its body's length two ways (RFC 9112 6.1,
 * 6.3)? 1: Content-Length more than once, 2: beside Transfer-Encoding;
 * 0: no. What follows the body as MHD reads it could be read as another
 * request (request smuggling). 3: a Transfer-Encoding other than chunked
 * alone ("gzip", "gzip, chunked", "chunked " with a space, "", or a line
 * "chunked" and one "gzip"): MHD reads such a body until the connection
 * closes, or decodes it as chunked though another coding comes last, so
 * the request would never be answered or be misread (RFC 9112 6.3 asks
 * for a 400 and a close). 4: chunked more than once ("chunked, chunked",
 * or two lines "chunked"; RFC 9112 6.1 forbids it): MHD would undo one
 * and take the other for the body. te gets the Transfer-Encoding lines. */
static int framed_twice(srv_req *r, fields *te)
{
    fields cl;
    get_fields(r, "Transfer-Encoding", te);
    if (te->n && chunked_only(te->all) > 1)
        return 4;
    if (te->n && strcasecmp(te->all, "chunked") != 0)
        return 3;
    if (!MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length"))
        return 0;
    if (te->n)
        return 2;
    get_fields(r, "Content-Length", &cl);
    return cl.n > 1;
}

/* parse_count: a header's byte count, 1*DIGIT as Content-Length's (RFC
 * 9110 8.6): no sign, space, "0x" or exponent, which strtoull would let
 * through or read otherwise ("+12", " -1" as 2^64 - 1). Saturates at
 * ULLONG_MAX (over any limit). 0, or -1 when v is not that. */
static int parse_count(const char *v, unsigned long long *out)
{
    unsigned long long n = 0;
    if (!*v)
        return -1;
    for (; *v; v++) {
        unsigned d = (unsigned)(*v - '0');
        if (d > 9)
            return -1;
        n = n > (ULLONG_MAX - d) / 10 ? ULLONG_MAX : n * 10 + d;
    }
    *out = n;
    return 0;
}

/* body_check: the body r's route accepts (srv.h SRV_BODY_*) against the
 * headers, before any of it is read: sets r->body_limit and r->limit_name,
 * or answers 400/413 (then MHD never reads the body) and returns -1. */
static int body_check(srv_req *r)
{
    srv *s = r->s;
    const char *v, *te;
    unsigned long long cl = 0;
    int has_cl;
    v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Transfer-Encoding");
    has_cl = v != NULL;
    if (v)
        cl = strtoull(v, NULL, 10); /* MHD checked its syntax */
    r->expect = (size_t)cl;
    switch (r->route->body) {
    case SRV_BODY_NONE:
        if ((has_cl && cl > 0) || te) {
            srv_respond_error(r, 413, "body: %s %s takes no body",
                              r->method == SRV_POST ? "POST" : "GET", r->path);
            return -1;
        }
        r->body_limit = 0;
        return 0;
    case SRV_BODY_SMALL:
        r->body_limit = (size_t)s->cfg.max_small_body;
        r->limit_name = "max-small-body";
        break;
    case SRV_BODY_UPLOAD:
        r->body_limit = (size_t)s->cfg.max_body;
        r->limit_name = "max-body";
        break;
    default: /* SRV_BODY_INFER */
        r->body_limit = (size_t)s->cfg.max_json_body; /* all JSON */
        r->limit_name = "max-json-body";
        v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                        "Inference-Header-Content-Length");
        if (v) {
            unsigned long long h;
            fields ih;
            get_fields(r, "Inference-Header-Content-Length", &ih);
            if (ih.n > 1) {
                srv_respond_error(r, 400, "Inference-Header-Content-Length: given "
                                  "%d times ('%.96s'); send it once", ih.n, ih.all);
                return -1;
            }
            if (parse_count(v, &h) < 0) {
                srv_respond_error(r, 400, "Inference-Header-Content-Length: '%.64s' "
                                          "is not a byte count (decimal digits "
                                          "only)", v);
                return -1;
            }
            if (h > (unsigned long long)s->cfg.max_json_body) {
                srv_respond_error(r, 413, "Inference-Header-Content-Length: %.64s "
                                  "bytes of JSON is over the limit of %lld "
                                  "(max-json-body)", v, s->cfg.max_json_body);
                return -1;
            }
            r->header_len = (size_t)h;
            r->body_limit = (size_t)s->cfg.max_body;
            r->limit_name = "max-body";
        }
        break;
    }
    if (has_cl && cl > r->body_limit) {
        srv_respond_error(r, 413, "Content-Length: %llu bytes is over the limit "
                          "of %zu (%s)", cl, r->body_limit, r->limit_name);
        return -1;
    }
    /* the whole announced body is reserved before a byte of it is read */
    if (cl && srv_mem_take(s, (size_t)cl + 1) < 0) {
        no_memory(r);
        return -1;
    }
    if (cl)
        r->mem = (size_t)cl + 1;
    return 0;
}

/* has_token: does one of conn's fields named key hold token among its
 * comma-separated values (case aside, RFC 9110 5.6.1)? */
struct token_find {
    const char *key, *token;
    int found;
};

static enum MHD_Result find_token(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value)
{
    struct token_find *f = cls;
    size_t n = strlen(f->token);
    (void)kind;
    if (strcasecmp(key, f->key) != 0 || !value)
        return MHD_YES;
    for (const char *p = value; *p;) {
        size_t len;
        p += strspn(p, " \t,");
        len = strcspn(p, " \t,");
        if (len == n && strncasecmp(p, f->token, n) == 0) {
            f->found = 1;
            return MHD_NO;
        }
        p += len;
    }
    return MHD_YES;
}

static int has_token(struct MHD_Connection *conn, const char *key, const char *token)
{
    struct token_find f = {key, token, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, find_token, &f);
    return f.found;
}

/* client_closes: will MHD close the connection after this request
 * whatever it is answered, as its client asked (RFC 9112 9.3)? HTTP/1.1
 * with Connection: close; HTTP/1.0 without Connection: keep-alive. */
static int client_closes(struct MHD_Connection *conn, const char *version)
{
    if (has_token(conn, "Connection", "close"))
        return 1;
    return version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0 &&
           !has_token(conn, "Connection", "keep-alive");
}

/* first_call: set up r, route it, check auth, then the body its route
 * accepts. May answer at once (the body is then never read). */
static void first_call(srv_req *r, const char *url)
{
    srv *s = r->s;
    const char *auth;
    fields te;
    int twice;
    cors_match(r, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin"));
    twice = framed_twice(r, &te);
    r->close = twice != 0; /* whatever it is answered */
    if (route(r, url) < 0)
        return;
    if (twice >= 3) {
        srv_respond_error(r, 400, "Transfer-Encoding: '%.64s'%s %s; send one "
                          "Content-Length or Transfer-Encoding: chunked", te.all,
                          te.n > 1 ? " (its lines joined)" : "",
                          twice == 4 ? "applies chunked more than once, which "
                                       "cannot be decoded" : "is not chunked");
        return;
    }
    if (twice) {
        srv_respond_error(r, 400, "%s: the body's length is given %s; send "
                          "one Content-Length or Transfer-Encoding: chunked",
                          twice == 2 ? "Content-Length and Transfer-Encoding"
                                     : "Content-Length",
                          twice == 2 ? "twice" : "more than once");
        return;
    }
    auth = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (r->route->auth && s->cfg.api_key[0] &&
        !srv_key_ok(s->cfg.api_key, auth, auth ? strlen(auth) : 0)) {
        srv_respond_error(r, 401, "Authorization: missing or wrong API key "
                                  "(send 'Authorization: Bearer <key>')");
        return;
    }
    if (body_check(r) < 0)
        return;
}

/* add_body: buffer a chunk, up to body_limit; past it the rest is counted
 * and dropped, and the request answers 413 when the body ends. */
static void add_body(srv_req *r, const char *data, size_t n)
{
    if (r->too_large || r->no_mem)
        return;
    if (n > r->body_limit - r->body_len) {
        r->too_large = 1;
        return;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        /* a known length is allocated (and was reserved) at once */
        size_t cap = r->body_cap ? r->body_cap : r->expect ? r->expect + 1 : 16384;
        char *nb;
        while (cap < r->body_len + n + 1)
            cap = cap > r->body_limit / 2 ? r->body_limit + 1 : cap * 2;
        if (cap > r->mem) { /* a chunked body grows: reserve as it does */
            if (srv_mem_take(r->s, cap - r->mem) < 0) {
                r->no_mem = 1;
                return;
            }
            r->mem = cap;
        }
        nb = realloc(r->body, cap);
        if (!nb) {
            r->no_mem = 1;
            return;
        }
        r->body = nb;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = 0;
}

/* on_request: MHD's access handler, called repeatedly per request (loop
 * thread). The first call allocates r (first_call: route, auth; may answer
 * at once); the next ones collect the body (past its limit it is
 * discarded and the answer is 413); the last one runs the route's handler,
 * which answers or suspends the connection. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    s->mhd_calls++;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) /* no request to log: an answer made at start */
            return srv_http__queue_fixed(s, conn, parse_method(method) == SRV_OPTIONS,
                                         srv_cors_index(s, MHD_lookup_connection_value(
                                                               conn, MHD_HEADER_KIND, "Origin")));
        r->s = s;
        r->conn = conn;
        r->t0_ns = srv_now_ns();
        r->method = parse_method(method);
        name_method(r->method_name, method);
        r->late = s->draining;
        r->client_closes = client_closes(conn, version);
        *con_cls = r;
        s->live_reqs++;
        srv_guard_begin(r);
        first_call(r, url);
        return r->have_resp ? srv_http__queue(r) : MHD_YES;
    }
    if (r->queued)
        return MHD_YES;
    if (r->have_resp)
        return srv_http__queue(r);
    if (*upload_size) {
        add_body(r, upload, *upload_size);
        r->body_seen += *upload_size;
        *upload_size = 0;
        /* a client that keeps sending far past the limit is cut off */
        return (r->too_large || r->no_mem) && r->body_seen / 2 > r->body_limit + 4096
                   ? MHD_NO : MHD_YES;
    }
    if (r->suspended)
        return MHD_YES;
    r->dispatched = 1;
    if (r->no_mem) {
        no_memory(r);
        return srv_http__queue(r);
    }
    if (r->too_large) {
        if (r->body_limit == 0)
            srv_respond_error(r, 413, "body: %s takes no body", r->path);
        else
            srv_respond_error(r, 413, "body: over the limit of %zu bytes (%s)",
                              r->body_limit, r->limit_name);
        return srv_http__queue(r);
    }
    r->route->fn(r);
    return r->have_resp ? srv_http__queue(r) : MHD_YES;
}

/* on_completed: the one place an srv_req is freed: detaches a running
 * infer job, counts the status, writes the log line, frees r. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    (void)conn;
    if (!r)
        return;
    *con_cls = NULL;
    if (r->changed && r->status && r->status < 400 &&
        code != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        srv_log(s, "warn", "http: %s %s was carried out (%d), but its client "
                "went before the answer was sent (libmicrohttpd takes a "
                "half-closed connection for one that went)",
                r->method_name, r->path, r->status);
    if (r->job)
        srv_sched_detach(r);
    srv_guard_end(r);
    srv_mem_give(s, r->mem + r->resp_mem);
    if (r->waiting)
        srv_maps_wait_cancel(r);
    if (r->too_slow) /* the guard closed it: its body came too slowly */
        r->status = 408;
    else if (r->went || (code == MHD_REQUEST_TERMINATED_CLIENT_ABORT &&
                         !r->dispatched && !r->have_resp))
        r->status = 499; /* its client went, before its body was complete
                            (MHD saw the end, or the guard's sweep did) or
                            while it waited or ran */
    if (r->status >= 100 && r->status < 600)
        s->http.by_status[r->status]++;
    if (r->route || r->status)
        srv_log_request(s, r);
    free(r->body);
    free(r->resp);
    free(r);
    s->live_reqs--;
    srv_check_stop(s);
}

/* repeats_line: m's count of unlogged repeats, logged. */
static void repeats_line(srv *s, struct srv_mhd_msg *m, uint64_t now)
{
    if (!m->repeats)
        return;
    srv_log(s, "warn", "http: %s (%llu more times in %.1f s)", m->text,
            m->repeats, (double)(now - m->last_ns) / 1e9);
    m->repeats = 0;
    m->last_ns = now;
}

/* mhd_logger: libmicrohttpd's messages, as warnings. One that repeats
 * within a second of its last line is counted instead (a client sending
 * malformed requests in a loop got two lines each, thousands a second:
 * "Failed to parse `Content-Length' header", then "Error processing
 * request"); srv_http_log_flush writes the counts. The last SRV_MHD_MSGS
 * different messages are told apart; a new one takes the place of the
 * one logged longest ago, whose count is logged first. Loop thread. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    srv *s = cls;
    struct srv_mhd_msg *m = s->mhd_msgs, *old = m;
    char msg[sizeof m->text];
    uint64_t now = srv_now_ns();
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = 0;
    for (; m < s->mhd_msgs + SRV_MHD_MSGS; m++) {
        if (strcmp(msg, m->text) == 0) {
            if (now - m->last_ns < 1000000000ull) {
                m->repeats++;
                return;
            }
            old = m;
            break;
        }
        if (m->last_ns < old->last_ns)
            old = m;
    }
    repeats_line(s, old, now);
    srv_log(s, "warn", "http: %s", msg);
    memcpy(old->text, msg, sizeof msg);
    old->last_ns = now;
}

void srv_http_log_flush(srv *s, int now_too)
{
    uint64_t now = srv_now_ns();
    for (int i = 0; i < SRV_MHD_MSGS; i++)
        if (now_too || now - s->mhd_msgs[i].last_ns >= 1000000000ull)
            repeats_line(s, &s->mhd_msgs[i], now);
}

void srv_listen_err(const srv *s, char *err, const char *flag, long long port,
                    int in_use, const char *why)
{
    if (in_use)
        snprintf(err, SRV_ERRMAX, "--host %s --%s %lld: address in use (another "
                 "server listens there; --reuse-port 1 shares the port on "
                 "purpose)", s->cfg.host, flag, port);
    else
        snprintf(err, SRV_ERRMAX, "--host %s --%s %lld: cannot listen (%s; in "
                 "use, or not an address of this machine)", s->cfg.host, flag,
                 port, why);
}

/*
 * srv_http_start: bind host:port (http_accept.c accepts on it), start MHD
 * in external-epoll mode with no listener of its own and hook its fd into
 * the loop. Prints the bound address. 0 or -1 with err.
 */
int srv_http_start(srv *s, char *err)
{
    struct addrinfo hints, *ai = NULL;
    const union MHD_DaemonInfo *info;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET;
    char portstr[16];
    int rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(portstr, sizeof portstr, "%lld", s->cfg.port);
    rc = getaddrinfo(s->cfg.host, portstr, &hints, &ai);
    if (rc != 0 || !ai) {
        snprintf(err, SRV_ERRMAX, "--host %s: cannot resolve (%s)", s->cfg.host,
                 gai_strerror(rc));
        return -1;
    }
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    rc = srv_accept_listen(&s->accept, ai->ai_addr, ai->ai_addrlen,
                           1 /* as libmicrohttpd did: IPv6 only */, &s->port);
    freeaddrinfo(ai);
    if (rc < 0) {
        srv_listen_err(s, err, "port", s->cfg.port, rc == -EADDRINUSE, strerror(-rc));
        return -1;
    }
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(s->cfg.max_connections + SRV_CONN_HEADROOM),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, srv_guard_notify, s, MHD_OPTION_END);
    info = s->mhd ? MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!info) {
        snprintf(err, SRV_ERRMAX, "libmicrohttpd did not start (%s)",
                 s->mhd ? "no epoll support" : strerror(errno));
        goto fail;
    }
    if (srv_http__answers_make(s) < 0) {
        snprintf(err, SRV_ERRMAX, "out of memory for the fixed answers");
        goto fail;
    }
    uv_timer_init(s->loop, &s->mhd_timer);
    s->mhd_timer.data = s;
    uv_idle_init(s->loop, &s->mhd_idle);
    s->mhd_idle.data = s;
    srv_guard_start(s);
    uv_poll_init(s->loop, &s->mhd_poll, info->epoll_fd);
    s->mhd_poll.data = s;
    uv_poll_start(&s->mhd_poll, UV_READABLE, on_mhd_poll);
    srv_http__accept_start(s);
    srv_kick(s);
    srv_log(s, "info", "listening on http://%s%s%s:%d", strchr(s->cfg.host, ':') ? "[" : "",
            s->cfg.host, strchr(s->cfg.host, ':') ? "]" : "", s->port);
    return 0;
fail:
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    close(s->accept.fd);
    s->accept.fd = -1;
    return -1;
}

/* srv_http_stop: close the listener and every connection. Every suspended
 * connection must have been resumed (the scheduler is idle). */
void srv_http_stop(srv *s)
{
    if (!s->mhd)
        return;
    srv_http__accept_stop(s);
    uv_poll_stop(&s->mhd_poll);
    uv_close((uv_handle_t *)&s->mhd_poll, NULL);
    uv_close((uv_handle_t *)&s->mhd_timer, NULL);
    uv_close((uv_handle_t *)&s->mhd_idle, NULL);
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    srv_http_log_flush(s, 1);
    srv_http__answers_free(s);
    srv_guard_stop(s);
}
