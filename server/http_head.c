/*
 * http_head.c - what a REST request's head asks, checked before its body
 * is read: its method and route, CORS origin, API key, how its body is
 * framed (RFC 9112: one Content-Length or Transfer-Encoding: chunked, else
 * 400 and a close), the query of our extension's routes (only the
 * parameters each reads, each once), an infer or load begun while
 * draining (503), the body's limit, an infer or unload that waits for 100
 * Continue whose answer no body changes (answered_early), the body's
 * memory-budget reservation, and
 * whether its client will close after the answer.
 * http.c calls srv_http__first_call on MHD's first call for each request;
 * it may answer from the head: at once, with Connection: close, for a
 * request with a body (which is then never read), at MHD's next call for
 * one without (the connection stays). Loop thread.
 */
#include "server/http_int.h"
#include "server/srv.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    /* white space after a field's value is not part of it (RFC 9110 5.5);
     * libmicrohttpd 0.9.75 keeps it */
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
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

int srv_http__method(const char *m)
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

/* allow_list: the Allow header of a path whose routes take the methods
 * in allowed (SRV_GET | SRV_POST | SRV_DELETE; a GET route serves HEAD
 * too), OPTIONS added for a preflight's answer. A static string. */
static const char *allow_list(int allowed, int options)
{
    static const char *const lists[2][8] = {
        {"", "GET, HEAD", "POST", "GET, HEAD, POST", "DELETE", "GET, HEAD, DELETE",
         "POST, DELETE", "GET, HEAD, POST, DELETE"},
        {"OPTIONS", "GET, HEAD, OPTIONS", "POST, OPTIONS", "GET, HEAD, POST, OPTIONS",
         "DELETE, OPTIONS", "GET, HEAD, DELETE, OPTIONS", "POST, DELETE, OPTIONS",
         "GET, HEAD, POST, DELETE, OPTIONS"}};
    int i = (allowed & SRV_GET ? 1 : 0) | (allowed & SRV_POST ? 2 : 0) |
            (allowed & SRV_DELETE ? 4 : 0);
    return lists[options ? 1 : 0][i];
}

/* origin_form: the path of a request target: url itself, or, for one in
 * absolute form ("http://host:port/path", what a client sends a proxy;
 * RFC 9112 3.2.2: a server must accept it), what follows its authority
 * ("/" when nothing does). The authority is not checked against Host:
 * attnd serves one origin whatever a client calls it. */
static const char *origin_form(const char *url)
{
    size_t n = strncasecmp(url, "http://", 7) == 0    ? 7
               : strncasecmp(url, "https://", 8) == 0 ? 8
                                                      : 0;
    if (!n)
        return url;
    url += n + strcspn(url + n, "/");
    return *url ? url : "/";
}

/* known_method: is m (r->method_name) a method HTTP defines that attnd
 * serves nowhere (RFC 9110 9.3, and PATCH, RFC 5789)? Such a method on a
 * path that exists is 405 with Allow; any other (FOO, M-SEARCH, get:
 * methods are case-sensitive) is one the server does not recognise, 501
 * on every path (RFC 9110 9.1, 15.6.2). */
static int known_method(const char *m)
{
    static const char *const known[] = {"PUT", "PATCH", "CONNECT", "TRACE"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(m, known[i]) == 0)
            return 1;
    return 0;
}

/* route: find r's route; on failure answer 404/405/501 and return -1. The
 * versioned alias /v2/models/{m}/versions/1/... is folded first (right
 * after the model's name only: /v2/models/{m}/ready/versions/1 is no
 * endpoint). The 404 and 405 name the path as sent, not as folded. */
static int route(srv_req *r, const char *url)
{
    size_t i;
    int allowed = 0;
    const char *v;
    /* url is MHD's path: the query already taken off and the rest
     * %-decoded, so a '?' in it came as %3F (a sequence id may hold one) */
    size_t len;
    url = origin_form(url);
    len = strlen(url);
    if (len >= sizeof r->path) {
        /* logged cut, with its length (no space: a text log line's
         * fields have none, log.c) */
        snprintf(r->path, sizeof r->path, "%.200s...(%zu-bytes)", url, len);
        srv_respond_error(r, 414, "path: %zu bytes, over the limit of %zu",
                          len, sizeof r->path - 1);
        return -1;
    }
    memcpy(r->path, url, len);
    r->path[len] = 0;
    if (r->method == SRV_OTHER && !known_method(r->method_name)) {
        srv_respond_error(r, 501, "method: %s is not one this server "
                          "implements (it serves GET, HEAD, POST, DELETE "
                          "and OPTIONS)", r->method_name);
        return -1;
    }
    if (strncmp(r->path, "/v2/models/", 11) == 0 &&
        (v = strchr(r->path + 11, '/')) != NULL &&
        strncmp(v, "/versions/", 10) == 0) {
        char *vs = (char *)v + 10;
        size_t vlen = strcspn(vs, "/");
        if (vlen != 1 || vs[0] != '1') {
            srv_respond_error(r, 404, "version '%.*s' not found: only version 1 exists",
                              (int)vlen, vs);
            return -1;
        }
        r->vfold = (unsigned short)(v - r->path + 1);
        memmove((char *)v, vs + vlen, strlen(vs + vlen) + 1);
    }
    for (i = 0; i < srv_n_routes; i++) {
        char arg[2][SRV_NAME_MAX + 32] = {{0}, {0}};
        /* /v2/models/stats/versions/1 is model 'stats''s metadata (as
         * Triton's), not every model's statistics it folds to */
        if (r->vfold && strcmp(srv_routes[i].path, "/v2/models/stats") == 0)
            continue;
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
    if (!allowed && (strncmp(r->path, "/v2/systemsharedmemory", 22) == 0 ||
                     strncmp(r->path, "/v2/cudasharedmemory", 20) == 0)) {
        srv_respond_error(r, 404, "path: no endpoint %s: " SRV_NO_SHM, url);
        return -1;
    }
    if (!allowed && (strcmp(r->path, "/v2/models") == 0 ||
                     strcmp(r->path, "/v2/models/") == 0)) {
        srv_respond_error(r, 404, "path: no endpoint %s: " SRV_NO_LIST, url);
        return -1;
    }
    if (!allowed) {
        srv_respond_error(r, 404, "path: no endpoint %s", url);
        return -1;
    }
    r->allow = allow_list(allowed, r->method == SRV_OPTIONS);
    if (r->method == SRV_OPTIONS) { /* CORS preflight */
        srv_respond(r, 204, NULL, NULL, 0);
        return -1;
    }
    srv_respond_error(r, 405, "method: %s is not allowed on %s (allowed: %s)",
                      r->method_name, url, r->allow);
    return -1;
}

/* ---- MHD callbacks ------------------------------------------------------ */

void srv_http__no_memory(srv_req *r)
{
    if (r->route && r->route->body == SRV_BODY_INFER) /* a step counts */
        srv_sched_refused(r);
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

/* list_item: the item of a comma-separated field value (RFC 9110 5.6.1)
 * that starts at *p, the spaces around it dropped: its start returned, its
 * length in *len (0 for an empty one); *p moves past its comma, or becomes
 * NULL after the last item. */
static const char *list_item(const char **p, size_t *len)
{
    const char *item = *p + strspn(*p, " \t");
    size_t n = strcspn(item, ",");
    *p = item[n] ? item + n + 1 : NULL;
    while (n && (item[n - 1] == ' ' || item[n - 1] == '\t'))
        n--;
    *len = n;
    return item;
}

/* list_has: is token (case aside) one of list's items? */
static int list_has(const char *list, const char *token)
{
    size_t n = strlen(token), len;
    while (list) {
        const char *item = list_item(&list, &len);
        if (len == n && strncasecmp(item, token, n) == 0)
            return 1;
    }
    return 0;
}

/* coded: is r's body coded (Content-Encoding, its lines one list, RFC
 * 9110 8.4) other than identity? attnd decompresses nothing: read as
 * JSON, a deflate body was refused as "expected a JSON object, got
 * 'x..V'", and one marked br but sent plain was served, where the
 * client meant what the header says. Its value into *ce. */
static int coded(srv_req *r, fields *ce)
{
    const char *list;
    get_fields(r, "Content-Encoding", ce);
    for (list = ce->all; list;) {
        size_t len;
        const char *item = list_item(&list, &len);
        if (len && !(len == 8 && strncasecmp(item, "identity", 8) == 0))
            return 1;
    }
    return 0;
}

/* chunked_only: the number of codings in the list te ("chunked, chunked"
 * is 2) when every one is chunked, else 0. */
static int chunked_only(const char *te)
{
    int n = 0;
    while (te) {
        size_t len;
        const char *item = list_item(&te, &len);
        if (len != 7 || strncasecmp(item, "chunked", 7) != 0)
            return 0;
        n++;
    }
    return n;
}

/* bad_name: MHD_get_connection_values' iterator: stops at the first
 * header field name that is not a token (RFC 9110 5.1, 5.6.2), its name
 * into *cls. libmicrohttpd keeps "Transfer-Encoding " (a space before
 * the colon) as a name of its own, so the body would be framed by the
 * other header, where a proxy that trims the space frames it chunked
 * (request smuggling; RFC 9112 5.1 asks for a 400). */
static enum MHD_Result bad_name(void *cls, enum MHD_ValueKind kind,
                                const char *key, const char *value)
{
    (void)kind, (void)value;
    if (!*key || key[strspn(key, "!#$%&'*+-.^_`|~0123456789"
                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "abcdefghijklmnopqrstuvwxyz")]) {
        *(const char **)cls = key;
        return MHD_NO;
    }
    return MHD_YES;
}

/* bare_cr: MHD_get_connection_values' iterator: stops at the first
 * header field whose value holds a CR, its name into *cls. MHD ends a
 * line at CR LF (or a bare LF) and keeps a bare CR in the value, so
 * "Host: x<CR>Content-Length: 5" has no Content-Length here, where a
 * proxy that ends lines at a bare CR sees one (request smuggling; RFC
 * 9112 2.2: such an element is invalid, or its CR is read as a space). */
static enum MHD_Result bare_cr(void *cls, enum MHD_ValueKind kind,
                               const char *key, const char *value)
{
    (void)kind;
    if (value && strchr(value, '\r')) {
        *(const char **)cls = key;
        return MHD_NO;
    }
    return MHD_YES;
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

/* answered_early: r waits for 100 Continue before it sends its body
 * (Expect: 100-continue), and its answer is known from its head: an
 * infer's 400 for its Attnd-Sequence-Id, 404 for a model neither loaded
 * nor loading or 503 for one still loading or a full queue (a transient
 * refusal: it would be the same after an upload, which its client then
 * sent for nothing), an unload's 400 for its name or 404 for a model not loaded
 * (no load of it running), as srv_h_infer and srv_h_unload would answer
 * it after the body: its route's head (routes.c). It is answered now (RFC 9110 10.1.1: a final status
 * instead of the 100), its body never read (the connection closes: its
 * client may send the body all the same, after a wait of its own), and
 * holding no memory for it. Asked after the 413 for its declared length,
 * which it would get without the expectation. Without the
 * expectation the body is on its way and is read, and the connection
 * stays. 1 when answered. */
static int answered_early(srv_req *r)
{
    const char *ex = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Expect");
    if (!ex || strcasecmp(ex, "100-continue") != 0)
        return 0;
    return r->route->head ? r->route->head(r) : 0;
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
                              r->method_name, r->path);
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
        /* its client may read this only once its body is sent (node:http,
         * Python's requests): the lingering close reads all of it, not
         * max-body alone, within linger-ms (linger.c) */
        if (r->c)
            r->c->body_unread = cl;
        srv_respond_error(r, 413, "Content-Length: %llu bytes is over the limit "
                          "of %zu (%s)", cl, r->body_limit, r->limit_name);
        return -1;
    }
    if (answered_early(r))
        return -1;
    /* the whole announced body is reserved before a byte of it is read */
    if (cl && srv_mem_take(s, (size_t)cl + 1) < 0) {
        srv_http__no_memory(r);
        return -1;
    }
    if (cl)
        r->mem = (size_t)cl + 1;
    return 0;
}

/* ---- the query ---------------------------------------------------------- */

/* What query_pair found: the first parameter the route refuses, and why. */
typedef struct query_scan {
    const char *accepted; /* the route's list, space-separated */
    unsigned seen;        /* bit i: its i-th name was given */
    const char *key;      /* the refused one (NULL: none yet) */
    int why;              /* 1 unknown, 2 given twice, 3 without a value */
} query_scan;

/* accepted_index: key's place in the space-separated list, or -1. */
static int accepted_index(const char *list, const char *key)
{
    size_t n = strlen(key), len;
    int i;
    for (i = 0; *list; i++) {
        len = strcspn(list, " ");
        if (len == n && n && strncmp(list, key, n) == 0)
            return i;
        list += len;
        list += *list == ' ';
    }
    return -1;
}

/* query_pair: MHD_get_connection_values' iterator over the query's pairs,
 * in their order; stops at the first the route refuses. */
static enum MHD_Result query_pair(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value)
{
    query_scan *q = cls;
    int i;
    (void)kind;
    key = key ? key : "";
    i = accepted_index(q->accepted, key);
    if (i < 0 || i >= 32)
        q->why = 1;
    else if (q->seen & 1u << i)
        q->why = 2;
    else if (!value) /* "?h", not "?h=" */
        q->why = 3;
    else {
        q->seen |= 1u << i;
        return MHD_YES;
    }
    q->key = key;
    return MHD_NO;
}

/* query_check: our extension's routes (r->route->query set) read their
 * query strictly: a parameter they do not read, one given twice or one
 * without '=' answers 400 naming it (and, for the first, the ones the
 * route reads), so that a mistyped ?head=1 is not quietly head 0. -1 when
 * answered. The KServe and Triton routes' queries are not looked at. */
static int query_check(srv_req *r)
{
    query_scan q = {r->route->query, 0, NULL, 0};
    char list[128];
    size_t i, n = 0;
    if (!q.accepted)
        return 0;
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, query_pair, &q);
    if (!q.key)
        return 0;
    if (q.why == 2) {
        srv_respond_error(r, 400, "query: '%.64s' given twice; give each "
                                  "parameter once", q.key);
        return -1;
    }
    if (q.why == 3) {
        srv_respond_error(r, 400, "query: '%.64s' has no value (%.64s=...)",
                          q.key, q.key);
        return -1;
    }
    for (i = 0; q.accepted[i] && n + 3 < sizeof list; i++) {
        if (q.accepted[i] == ' ')
            list[n++] = ',';
        list[n++] = q.accepted[i];
    }
    list[n] = 0;
    if (n)
        srv_respond_error(r, 400, "query: unknown parameter '%.64s'; %.200s "
                                  "takes %s", q.key, r->path, list);
    else
        srv_respond_error(r, 400, "query: unknown parameter '%.64s'; %.200s "
                                  "takes no parameters", q.key, r->path);
    return -1;
}

/* client_closes: will MHD close the connection after this request
 * whatever it is answered, as its client asked (RFC 9112 9.3)? HTTP/1.1
 * with Connection: close; HTTP/1.0 without Connection: keep-alive. */
static int client_closes(srv_req *r, const char *version)
{
    fields conn;
    get_fields(r, "Connection", &conn);
    if (list_has(conn.all, "close"))
        return 1;
    return version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0 &&
           !list_has(conn.all, "keep-alive");
}

/* bodyless: does r come without a body (no Transfer-Encoding, no or a
 * zero Content-Length)? */
static int bodyless(srv_req *r)
{
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    unsigned long long n = 0;
    return !MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Transfer-Encoding") &&
           (!cl || (parse_count(cl, &n) == 0 && n == 0));
}

/* late_refused: r began after the signal (r->late), with a body, on a
 * route that refuses such a request (infer and load: sched.c and
 * registry_queue.c answer it 503 once its body is whole): 503 now, from
 * its head, with their message and count, its body never read, so that
 * the exit does not wait for a slow body or an upload to be read whole
 * only to refuse it. 1 when answered. */
static int late_refused(srv_req *r)
{
    int infer = r->route->body == SRV_BODY_INFER;
    srv_entry *e;
    if (!r->late || bodyless(r) ||
        (!infer && r->route->body != SRV_BODY_UPLOAD))
        return 0;
    snprintf(r->model, sizeof r->model, "%.128s", r->arg[0]);
    if (infer && (e = srv_registry_find(r->s, r->arg[0])) && e->inst)
        e->stats.fail_rejected++;
    if (infer)
        srv_sched_refuse_draining(r, 0); /* its body unread: the header's id */
    else
        srv_respond_error(r, 503, "server: draining (shutting down)");
    return 1;
}

/* keep_seq_hdr: r's one Attnd-Sequence-Id line into r->seq_hdr, where
 * the scheduler, the sequences routes and the idle sweep read it (as a
 * gRPC call's metadata), without the white space after it: it is not part
 * of the value (RFC 9110 5.5), and libmicrohttpd 0.9.75 keeps it (what
 * it drops before it, a proxy may add after it). One longer than an id
 * is cut to one byte past the longest: still no id. */
static void keep_seq_hdr(srv_req *r)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                "Attnd-Sequence-Id");
    size_t n = v ? strlen(v) : 0;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n > sizeof r->seq_hdr - 1)
        n = sizeof r->seq_hdr - 1;
    if (n)
        memcpy(r->seq_hdr, v, n);
    r->seq_hdr[n] = 0;
    r->has_seq_hdr = 1;
}

void srv_http__first_call(srv_req *r, const char *url, const char *method,
                          const char *version)
{
    srv *s = r->s;
    const char *auth;
    const char *name = NULL, *cr = NULL;
    fields te;
    int twice;
    name_method(r->method_name, method);
    r->client_closes = client_closes(r, version);
    cors_match(r, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin"));
    twice = framed_twice(r, &te);
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, bad_name, &name);
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, bare_cr, &cr);
    /* an answer made here, from the head alone: for a request with a body,
     * MHD would close its connection after one queued before that body, so
     * it is queued now and says Connection: close; for one without (no
     * Transfer-Encoding, no or a zero Content-Length), on_request queues
     * it at the next call, once MHD has the whole request, and the
     * connection stays. A body framed twice, or a header name that is
     * not one, or a bare CR, closes whatever is answered. */
    r->close = twice || name || cr || !bodyless(r);
    if (route(r, url) < 0)
        return;
    if (s->stopping) {
        /* read while the stop waits for clients to take their answers
         * (srv_http_stop: a request pipelined behind one): nothing runs
         * any more; 503 from its head, and the connection closes after it */
        r->close = 1;
        srv_respond_error(r, 503, "server: draining (shutting down)");
        return;
    }
    if (name) {
        srv_respond_error(r, 400, "header: field name '%.64s' is not a token "
                          "(white space before its colon, or in it: RFC 9112 "
                          "5.1); the request cannot be framed safely", name);
        return;
    }
    if (cr) {
        srv_respond_error(r, 400, "header: the value of '%.64s' holds a bare "
                          "CR (a line ends in CR LF: RFC 9112 2.2); the "
                          "request cannot be framed safely", cr);
        return;
    }
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
    if (r->route->auth && s->cfg.api_key[0] && auth) {
        /* two lines are refused: MHD reads the first, a proxy may have
         * added the other; the gRPC door refuses them too */
        fields au;
        get_fields(r, "Authorization", &au);
        if (au.n > 1) {
            srv_respond_error(r, 401, "Authorization: sent %d times; send "
                              "one ('Authorization: Bearer <key>')", au.n);
            return;
        }
    }
    if (r->route->auth && s->cfg.api_key[0] &&
        !srv_key_ok(s->cfg.api_key, auth, auth ? strlen(auth) : 0)) {
        srv_respond_error(r, 401, "Authorization: missing or wrong API key "
                                  "(send 'Authorization: Bearer <key>')");
        return;
    }
    if (r->route->body == SRV_BODY_INFER ||
        strncmp(r->route->path, "/v2/sequences/", 14) == 0) {
        /* the routes that read it: two lines are refused, as two
         * Authorization ones (MHD reads the first; a proxy may have
         * routed the request on the other) */
        fields id;
        get_fields(r, "Attnd-Sequence-Id", &id);
        if (id.n > 1) {
            srv_respond_error(r, 400, "Attnd-Sequence-Id: sent %d times "
                              "('%.100s'); send one", id.n, id.all);
            return;
        }
        if (id.n)
            keep_seq_hdr(r);
    }
    if (!bodyless(r) && coded(r, &te)) {
        /* RFC 9110 15.5.16: 415, saying the codings taken */
        snprintf(r->extra_hdr, sizeof r->extra_hdr, "Accept-Encoding: identity");
        srv_respond_error(r, 415, "Content-Encoding: '%.64s' is not taken: "
                          "attnd reads request bodies uncompressed; send "
                          "the body as it is, without the header", te.all);
        return;
    }
    if (query_check(r) < 0 || late_refused(r))
        return;
    if (body_check(r) < 0)
        return;
    r->close = 0; /* answered after its body: the connection stays */
}
