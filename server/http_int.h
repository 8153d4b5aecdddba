/*
 * http_int.h - what http.c shares with the REST door's other parts: its
 * accept loop (http_accept.c; guard.c too, to tell a paused listener of
 * room), what a request's head decides (http_head.c) and how an answer is
 * queued (http_answer.c); not part of the daemon's API. Loop thread only.
 */
#ifndef ATTND_HTTP_INT_H
#define ATTND_HTTP_INT_H

#include "server/srv.h"

/* http_accept.c, for http.c. srv_http__accept_start: accept on s->accept
 * (listening) on the loop, each connection to MHD; srv_http__accept_stop:
 * stop and close it. Loop thread. */
void srv_http__accept_start(srv *s);
void srv_http__accept_stop(srv *s);
/* srv_http__accept_room: a REST connection closed, or a connection went
 * idle (it may be closed to make room): a listener paused for MHD's
 * connection limit asks room() again. */
void srv_http__accept_room(srv *s);

/* http_head.c, for http.c. srv_http__first_call: r's method name, route,
 * CORS origin, framing, API key, query and body limit from its head (when
 * one is wrong it answers: r->close set, at once; else at the next call). srv_http__method: SRV_GET... of a method.
 * srv_http__no_memory: 503 for a body that memory-budget cannot hold now. */
void srv_http__first_call(srv_req *r, const char *url, const char *method,
                          const char *version);
int srv_http__method(const char *m);
void srv_http__no_memory(srv_req *r);

/* http_answer.c, for http.c. srv_cors_index: which entry of
 * --cors-origins allows origin, 1-based; 0 when none does (the entries
 * srv_http__answers_make read at start).
 * srv_http__queue: hand r's answer to MHD (once); when MHD has no memory
 * for it or a header, an answer made at start instead.
 * srv_http__queue_fixed: the answer made at start for a request that could
 * not be allocated at all (a 204 to an allowed origin's preflight, else
 * 503; cors: srv_cors_index's). srv_http__answers_make: make those, for
 * every entry of cors-origins (-1: out of memory); srv_http__answers_free. */
int srv_cors_index(const srv *s, const char *origin);
enum MHD_Result srv_http__queue(srv_req *r);
/* srv_http__send_now: r's answer (an error: JSON, Connection: close,
 * Retry-After, CORS) written on its socket fd at once, without waiting,
 * while its body still comes; 0 when all of it went, else -1. */
int srv_http__send_now(const srv_req *r, int fd);
enum MHD_Result srv_http__queue_fixed(srv *s, struct MHD_Connection *conn, int preflight,
                                      int cors);
int srv_http__answers_make(srv *s);
void srv_http__answers_free(srv *s);

#endif
