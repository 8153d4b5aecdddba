/*
 * http_answer.c - a request's answer handed to libmicrohttpd (its status,
 * body and headers), and the answers made at start for when memory cannot
 * be found for one: the 503, the 500 for a request carried out whose
 * answer is lost, and the 204 to an allowed origin's CORS preflight; and
 * the 503 at the drain's cut to a request whose body is still coming,
 * written on its socket (srv_http_cut). Loop thread.
 */
#include "server/http_int.h"
#include "server/srv.h"
#include "server/web.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

/* The answer to a request whose answer, or the request itself, could not
 * be allocated. */
static const char OOM_ANSWER[] = "{\"error\": \"server: out of memory; retry shortly\"}";

/* the request headers a page may send (CORS preflight): X-Attnd-Session
 * is read by the proxies in deploy/ (a session's retained maps on one
 * replica), not by attnd */
#define CORS_ALLOW_HEADERS                                                     \
    "Content-Type, Authorization, Inference-Header-Content-Length, "           \
    "Attnd-Sequence-Id, X-Attnd-Session"

/* add_headers: MHD_add_response_header for each name, value pair of h (n
 * pairs); 0, or -1 when MHD could not store one (out of memory: MHD drops
 * that header and goes on, so the answer would go out without it). */
static int add_headers(struct MHD_Response *resp, const char *const *h, int n)
{
    int ok = 1;
    for (int i = 0; i < n; i++)
        ok &= MHD_add_response_header(resp, h[2 * i], h[2 * i + 1]) == MHD_YES;
    return ok ? 0 : -1;
}

/* cors_entry: the i-th entry (1-based) of --cors-origins list, its
 * spaces trimmed, in *p and *len; 0 when it has fewer. Empty entries
 * ("a,,b", a trailing comma) are not entries. */
static int cors_entry(const char *list, int i, const char **p, size_t *len)
{
    const char *e;
    for (*p = list; **p; *p = e + 1) {
        e = strchr(*p, ',');
        *len = e ? (size_t)(e - *p) : strlen(*p);
        while (*len && **p == ' ')
            ++*p, --*len;
        while (*len && (*p)[*len - 1] == ' ')
            --*len;
        if (*len && --i == 0)
            return 1;
        if (!e)
            break;
    }
    return 0;
}

int srv_cors_index(const srv *s, const char *origin)
{
    size_t n;
    if (!origin || !(n = strlen(origin)) || n >= SRV_ORIGIN_MAX)
        return 0; /* r->origin cannot hold it: no CORS */
    for (int i = 1; i < s->n_fixed; i++) {
        const struct srv_fixed *f = &s->fixed[i];
        if ((f->len == 1 && f->origin[0] == '*') ||
            (f->len == n && memcmp(f->origin, origin, n) == 0))
            return i;
    }
    return 0;
}

/* fixed_answer: an answer made at start, for when memory cannot be found
 * for one: body (static), with CORS for origin when not NULL (the entry of
 * cors-origins that allows the request's: the origin itself, or '*'),
 * Retry-After when retry; NULL when it cannot be made whole. */
static struct MHD_Response *fixed_answer(const char *body, size_t len,
                                         const char *origin, int retry)
{
    static const char *const base[] = {"Content-Type", "application/json",
                                       "Connection", "close", "Retry-After", "1"};
    const char *const acao[] = {"Access-Control-Allow-Origin", origin, "Vary",
                                "Origin", "Access-Control-Expose-Headers",
                                "Retry-After"};
    struct MHD_Response *f =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (f && (add_headers(f, base, retry ? 3 : 2) < 0 ||
              (origin && add_headers(f, acao, 3) < 0))) {
        MHD_destroy_response(f);
        f = NULL;
    }
    return f;
}

/* fixed_preflight: 204 to a CORS preflight from origin (as fixed_answer's)
 * when memory cannot be found for its own answer (every method), so that
 * the request it asks for is sent and gets an answer of its own (a 503
 * fails the preflight: the page would see a network error). */
static struct MHD_Response *fixed_preflight(const char *origin)
{
    const char *const h[] = {
        "Access-Control-Allow-Origin", origin, "Vary", "Origin",
        "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS",
        "Access-Control-Allow-Headers", CORS_ALLOW_HEADERS,
        "Access-Control-Max-Age", "600"};
    struct MHD_Response *f = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (f && add_headers(f, h, 5) < 0) {
        MHD_destroy_response(f);
        f = NULL;
    }
    return f;
}

/* The answer to a request that changed the server's state (a sequence's
 * step joined its cache, a model loaded) when libmicrohttpd has no memory
 * for its own answer: a 503 would say it did not, and the client would
 * send it again. */
static const char LOST_ANSWER[] =
    "{\"error\": \"server: the request was carried out, but there was no memory "
    "for its answer; do not send it again as it was (a sequence's step may be "
    "sent again with parameters.sequence_position, the length it was sent at; "
    "a sequence's length is in GET /v2/sequences/{id})\"}";

/* fixed_status: which answer made at start goes to a request or an answer
 * that memory cannot be found for now: 204 to an allowed origin's
 * preflight, else 503. queue_fixed queues it. */
static int fixed_status(int preflight, int cors)
{
    return cors && preflight ? 204 : 503;
}

static enum MHD_Result queue_fixed(srv *s, struct MHD_Connection *conn, int status,
                                   int cors)
{
    const struct srv_fixed *f = &s->fixed[cors];
    return MHD_queue_response(conn, (unsigned)status,
                              status == 204 ? f->preflight : f->oom);
}

enum MHD_Result srv_http__queue_fixed(srv *s, struct MHD_Connection *conn, int preflight,
                                      int cors)
{
    int status = fixed_status(preflight, cors);
    s->http.by_status[status]++;
    return queue_fixed(s, conn, status, cors);
}

/* add_answer_headers: the headers r's answer calls for
 * (Inference-Header-Content-Length, Retry-After, Allow, the web page's
 * caching/security headers, CORS, Keep-Alive); -1 when MHD had no memory
 * for one of them (it drops that one and goes on). */
static int add_answer_headers(srv_req *r, struct MHD_Response *resp)
{
    char num[24];
    int lost = 0;
#define ADD(name, value) (lost |= MHD_add_response_header(resp, name, value) != MHD_YES)
    if (r->ctype)
        ADD("Content-Type", r->ctype);
    if (r->resp_header_len) {
        ADD("Inference-Header-Content-Length", srv_fmt_u(num, r->resp_header_len));
    }
    if (r->retry_after > 0) {
        ADD("Retry-After", srv_fmt_u(num, (unsigned long long)r->retry_after));
    }
    if (r->status == 401)
        ADD("WWW-Authenticate", "Bearer");
    if (r->allow)
        ADD("Allow", r->allow);
    if (r->extra_hdr[0]) {
        char *colon = strchr(r->extra_hdr, ':');
        if (colon) {
            *colon = 0;
            ADD(r->extra_hdr, colon + 2);
        }
    }
    if (r->map_version[0])
        ADD("Map-Version", r->map_version);
    if (r->web_etag) {
        ADD("ETag", r->web_etag);
        ADD("Cache-Control", "no-cache");
        ADD("Content-Security-Policy", WEB_CSP);
        ADD("X-Content-Type-Options", "nosniff");
    }
    if (r->origin[0]) {
        ADD("Access-Control-Allow-Origin", r->origin);
        ADD("Vary", "Origin");
        ADD("Access-Control-Expose-Headers", "Inference-Header-Content-Length, Retry-After, Map-Shape, Map-Version");
        if (r->method == SRV_OPTIONS) {
            ADD("Access-Control-Allow-Methods", r->allow ? r->allow : "GET, POST, OPTIONS");
            ADD("Access-Control-Allow-Headers", CORS_ALLOW_HEADERS);
            ADD("Access-Control-Max-Age", "600");
        }
    } else if (r->s->n_fixed > 1) {
        /* not for this origin (or none), but for others: a cache must
         * not give this answer, without CORS, to a listed origin */
        ADD("Vary", "Origin");
    }
    if (r->s->draining || r->close) {
        ADD("Connection", "close");
    } else if (r->s->cfg.header_timeout_s && !r->client_closes) {
        /* clients keep idle connections for less than the server does
         * (undici and browsers honour it; a quarter of margin for a busy
         * client), so none sends a request on a connection header-timeout
         * is closing */
        static _Thread_local long long ka_of = -1; /* formatted once */
        static _Thread_local char ka_hdr[32];
        long long ka = r->s->cfg.header_timeout_s * 3 / 4;
        if (ka != ka_of) {
            snprintf(ka_hdr, sizeof ka_hdr, "timeout=%lld", ka > 0 ? ka : 1);
            ka_of = ka;
        }
        ADD("Keep-Alive", ka_hdr);
    }
#undef ADD
    return lost ? -1 : 0;
}

/* queue_response: hand r's answer (status, body, content type, headers)
 * to MHD, which takes r->resp. Once per request. When MHD has no memory
 * for the answer or one of its headers (an answer without its
 * Content-Type, its binary header's length or CORS would be read wrong):
 * the fixed 503, or, for a request that changed the server's state
 * (r->changed), the fixed 500 that says so (LOST_ANSWER), or, for an
 * allowed origin's preflight, the fixed 204. */
enum MHD_Result srv_http__queue(srv_req *r)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    int lost, cors = r->origin[0] ? r->cors : 0;
    if (r->resp_oom)
        resp = MHD_create_response_from_buffer(sizeof OOM_ANSWER - 1,
                                               (void *)OOM_ANSWER,
                                               MHD_RESPMEM_PERSISTENT);
    else if (r->resp_static)
        resp = MHD_create_response_from_buffer(r->resp_len,
                                               (void *)r->resp_static,
                                               MHD_RESPMEM_PERSISTENT);
    else
        resp = MHD_create_response_from_buffer(r->resp_len, r->resp,
                                               MHD_RESPMEM_MUST_FREE);
    if (resp && !r->resp_oom)
        r->resp = NULL; /* MHD owns it now */
    lost = !resp || add_answer_headers(r, resp) < 0;
    r->queued = 1;
    if (lost && r->changed && r->status < 400) {
        srv_log(r->s, "warn", "http: a request was carried out (%d), but "
                "libmicrohttpd had no memory for its answer: 500, connection "
                "closed", r->status);
        r->status = 500;
        ret = MHD_queue_response(r->conn, 500, r->s->fixed[cors].lost);
    } else if (lost) {
        r->status = fixed_status(r->method == SRV_OPTIONS && r->status == 204, cors);
        ret = queue_fixed(r->s, r->conn, r->status, cors);
    } else {
        ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
    }
    if (resp)
        MHD_destroy_response(resp);
    return ret;
}

/* ---- answers written before the body is whole ------------------------- */

/* srv_http__send_now (srv.h): libmicrohttpd 0.9.75 refuses an answer
 * queued while the body comes (MHD_queue_response says MHD_NO, and the
 * connection is then closed unanswered), so this one is written here, as
 * MHD would write it. Nothing else of r's exchange can be half written:
 * MHD writes no more than the 100 Continue before the body, and the answer
 * of the request before r on a kept connection went whole before r's head
 * was read. */
int srv_http__send_now(const srv_req *r, int fd)
{
    char head[512 + SRV_ORIGIN_MAX], date[64], num[24];
    const int oom = r->resp_oom || !r->resp;
    const char *reason = MHD_get_reason_phrase_for((unsigned)r->status);
    struct iovec v[2];
    struct msghdr m;
    struct tm tm;
    time_t now = time(NULL);
    ssize_t sent;
    int n;
    if (!gmtime_r(&now, &tm) ||
        !strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm))
        date[0] = 0;
    v[1].iov_base = oom ? (void *)OOM_ANSWER : r->resp;
    v[1].iov_len = oom ? sizeof OOM_ANSWER - 1 : r->resp_len;
    n = snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\n%s%s%s"
                 "Connection: close\r\nContent-Type: application/json\r\n"
                 "%s%s%s%s%s%s%s"
                 "Content-Length: %zu\r\n\r\n",
                 r->status, reason ? reason : "", date[0] ? "Date: " : "",
                 date, date[0] ? "\r\n" : "",
                 r->retry_after > 0 ? "Retry-After: " : "",
                 r->retry_after > 0
                     ? srv_fmt_u(num, (unsigned long long)r->retry_after)
                     : "",
                 r->retry_after > 0 ? "\r\n" : "",
                 r->origin[0] ? "Access-Control-Allow-Origin: " : "", r->origin,
                 r->origin[0] ? "\r\nAccess-Control-Expose-Headers: "
                                "Inference-Header-Content-Length, "
                                "Retry-After, Map-Shape\r\n" : "",
                 r->origin[0] || r->s->n_fixed > 1 ? "Vary: Origin\r\n" : "",
                 v[1].iov_len);
    if (n < 0 || (size_t)n >= sizeof head)
        return -1;
    v[0].iov_base = head;
    v[0].iov_len = (size_t)n;
    memset(&m, 0, sizeof m);
    m.msg_iov = v;
    m.msg_iovlen = 2;
    sent = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    return sent == (ssize_t)(v[0].iov_len + v[1].iov_len) ? 0 : -1;
}

/* srv_http_cut (srv.h): each REST request whose body is still coming (its
 * handler not run, no answer, not parked) gets its 503, as a gRPC call
 * whose message is not whole gets UNAVAILABLE (srv_grpc_finish): written
 * now (srv_http__send_now), then the end of the stream (shutdown SHUT_WR). Its
 * connection stays open for the stop's flush (n_cut_open counts it until
 * MHD completes it; n_answered, as unsent, one not written whole): what
 * more of the body comes is read and dropped (http.c), so the answer is
 * read, not lost to a reset, and MHD completes the request when its client
 * closes or its body ends. Loop thread. */
void srv_http_cut(srv *s)
{
    int lost = 0;
    for (srv_conn *c = s->conns; c; c = c->next) {
        srv_req *r = c->req;
        if (c->grpc || !r || c->closing || c->fd < 0 || r->dispatched ||
            r->have_resp || r->suspended)
            continue;
        srv_respond_error(r, 503, "server: draining (shutting down): the "
                          "drain was cut short before its body was whole; "
                          "not done");
        r->cut_sent = srv_http__send_now(r, c->fd) < 0 ? -1 : 1;
        shutdown(c->fd, SHUT_WR);
        if (r->cut_sent > 0) { /* sent: the flush waits, as for no unsent */
            s->n_answered--;
            s->n_cut_open++;
        } else {
            lost++;
        }
    }
    if (lost)
        srv_log(s, "warn", "http: the 503 of %d request%s whose body was still "
                "coming at the cut could not be written whole (its client "
                "reads too slowly)", lost, lost == 1 ? "" : "s");
}

void srv_http__answers_free(srv *s)
{
    for (int i = 0; s->fixed && i < s->n_fixed; i++) {
        struct srv_fixed *f = &s->fixed[i];
        if (f->oom)
            MHD_destroy_response(f->oom);
        if (f->lost)
            MHD_destroy_response(f->lost);
        if (f->preflight)
            MHD_destroy_response(f->preflight);
    }
    free(s->fixed);
    s->fixed = NULL;
    s->n_fixed = 0;
}

int srv_http__answers_make(srv *s)
{
    const char *list = s->cfg.cors_origins, *p;
    size_t len;
    int n = 1, ok = 1;
    while (cors_entry(list, n, &p, &len))
        n++;
    if (!(s->fixed = calloc((size_t)n, sizeof *s->fixed)))
        return -1;
    s->n_fixed = n;
    for (int i = 0; i < n && ok; i++) {
        struct srv_fixed *f = &s->fixed[i];
        const char *o = NULL;
        if (i) { /* the entry, for srv_cors_index and the headers */
            cors_entry(list, i, &p, &f->len);
            memcpy(f->origin, p, f->len < SRV_ORIGIN_MAX ? f->len : SRV_ORIGIN_MAX - 1);
            o = f->origin; /* one longer than SRV_ORIGIN_MAX - 1 is never matched */
        }
        f->oom = fixed_answer(OOM_ANSWER, sizeof OOM_ANSWER - 1, o, 1);
        f->lost = fixed_answer(LOST_ANSWER, sizeof LOST_ANSWER - 1, o, 0);
        f->preflight = i ? fixed_preflight(o) : NULL;
        ok = f->oom && f->lost && (!i || f->preflight);
    }
    if (ok)
        return 0;
    srv_http__answers_free(s);
    return -1;
}
