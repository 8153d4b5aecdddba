/*
 * grpc.h - the daemon's second door: gRPC (inference.GRPCInferenceService,
 * proto/kserve.proto) over HTTP/2 cleartext on --grpc-port, on the same
 * loop thread and the same scheduler as REST.
 *
 * Library: libnghttp2 for HTTP/2 and protobuf-c for the messages, not
 * gRPC's C core. nghttp2 is a callback state machine with no thread or
 * socket of its own: bytes read by a uv_tcp_t on the loop go in, frames to
 * write come out, so one loop thread owns every connection, stream and
 * request as it owns MHD's, and a call reaches sched.c exactly as a REST
 * request does. gRPC's core brings its own threads and completion queues:
 * each answer would cross threads twice (pool -> loop -> a completion
 * queue thread), and its server cannot be driven from a libuv loop.
 *
 * Every RPC becomes an srv_req with no MHD connection (srv.h: door,
 * on_answer) and runs the REST handler of the same operation (route table
 * entries), so the checks, messages, limits, statistics and metrics are
 * the REST ones; grpc_rpc.c and grpc_meta.c turn the message into the
 * handler's input and the handler's answer into the response message.
 */
#ifndef ATTND_GRPC_H
#define ATTND_GRPC_H

#include "server/srv.h"

/* srv_grpc_start: listen on host:grpc-port (nothing when it is 0). Prints
 * the bound address. 0 or -1 with err (SRV_ERRMAX). Loop thread. */
int srv_grpc_start(srv *s, char *err);
/* srv_grpc_open_conns: gRPC connections open (each holding CONN_COST of
 * memory-budget); 0 with the door off. */
int srv_grpc_open_conns(const srv *s);
/* srv_grpc_drain: SIGTERM: tell clients (GOAWAY notice) and refuse new
 * calls; calls begun (their HEADERS came before it) finish, their
 * messages still coming included, and so do a stream's messages begun
 * (their first byte came); a stream with none in flight ends with
 * UNAVAILABLE. */
void srv_grpc_drain(srv *s);
/* srv_grpc_busy: a connection has a call open, bytes not yet written
 * (the drain waits for them: an answer made is an answer sent) or bytes
 * read before the signal and held past its turn's calls (their calls are
 * begun before it, and served). */
int srv_grpc_busy(const srv *s);
/* srv_grpc_finish: the drain was cut short (a second signal, drain-ms)
 * and nothing runs any more: every call still open without an answer (its
 * message not whole yet) ends UNAVAILABLE, and each connection gets its
 * final GOAWAY (the last call it took: nghttp2 ignores later ones, and
 * the connection closes once its calls are done). The answers then go
 * out; srv_grpc_unsent says while some are left. */
void srv_grpc_finish(srv *s);
/* srv_grpc_unsent: the calls whose answer (or status) nghttp2 has not
 * taken whole yet; *conns, the connections with such calls or with bytes
 * not yet written; *bytes, those bytes (answers queued, frames unwritten). */
int srv_grpc_unsent(const srv *s, int *conns, size_t *bytes);
/* srv_grpc_step_coming: may an infer request whose first byte came before
 * `before` still be on its way to a step of sequence id: its message
 * still coming, or whole but not yet dispatched (a unary call's before
 * its END_STREAM, a stream's held), its call without attnd-sequence-id
 * metadata naming another id (its model and id are unknown until then)?
 * For the idle sweep (seq_drops.c). Loop thread. */
int srv_grpc_step_coming(const srv *s, const char *id, uint64_t before);
/* srv_grpc_stop: final GOAWAY, close the listener and every connection:
 * at once one whose writes are stuck (a client that does not read) or
 * that has nothing left to deliver; the others (their input read and
 * dropped meanwhile) once their kernel holds no byte the client has not
 * acknowledged, their client closes, or ms (the flush's time left) have
 * passed: closed with bytes unread, or met by one after, a socket is
 * reset, and the kernel drops what of the answers it still holds (a
 * client sends as it reads: its WINDOW_UPDATEs). 1 when some are left
 * open: done(s) runs as the last of them closes; 0 when none are. */
int srv_grpc_stop(srv *s, uint64_t ms, void (*done)(srv *));
/* srv_grpc_stop_cut: close at once the connections srv_grpc_stop left
 * open (a signal during the stop); how many were. */
int srv_grpc_stop_cut(srv *s);

/* ---- grpc_rpc.c, grpc_meta.c: the methods --------------------------------- */

/* gRPC status codes used here. */
enum {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_UNAUTHENTICATED = 16,
    GRPC_N_CODES = 17
};

/* Out of memory, whatever ran out: UNAVAILABLE with this message, as
 * REST's 503 (the client may send it again). */
#define GRPC_OOM_MSG "server: out of memory; retry shortly"

typedef struct grpc_method {
    const char *name; /* "ModelInfer": the path is /inference.GRPCInferenceService/<name> */
    int auth;         /* needs the API key when one is set */
    int stream;       /* ModelStreamInfer: many requests, many responses */
    int rest_method;       /* the REST route that serves it: SRV_GET, ... */
    const char *rest_path; /* its pattern in the route table (routes.c) */
    /* start: r's route arguments and body from the request message msg
     * (malloc'd; start takes it): 0, or -1 with *code and err when the
     * message is bad. NULL: the message carries nothing (it is freed). */
    int (*start)(srv_req *r, char *msg, size_t len, int *code, char *err);
    /* reply: from r's answer (any status), the response message, malloc'd
     * with OIP_PB_HEADROOM free bytes before it (NULL, *len OIP_PB_HEADROOM:
     * an empty message): GRPC_OK, or a status code with err (the REST
     * error's message). */
    int (*reply)(srv_req *r, char **out, size_t *len, char *err);
} grpc_method;

#define GRPC_ERRMAX 1024

/* srv_grpc_method: the method of a :path, or NULL. */
const grpc_method *srv_grpc_method(const char *path);
/* srv_grpc_handler: m's start on msg (taken), then the REST handler of m's
 * route; NULL with *code and err when the message is bad. */
srv_handler srv_grpc_handler(const grpc_method *m, srv_req *r, char *msg,
                             size_t len, int *code, char *err);
/* srv_grpc_code: the gRPC status of an HTTP status. */
int srv_grpc_code(int http_status);
/* srv_grpc_http_status: back the other way, for the log line of a call
 * that ends with no request's status to log (CANCELLED: 499, as nginx). */
int srv_grpc_http_status(int code);
/* srv_grpc_code_name: "INVALID_ARGUMENT", ... */
const char *srv_grpc_code_name(int code);
/* srv_grpc_error_text: the message of r's JSON error body into err; 1
 * when it was lost to out of memory (err then says so), else 0. */
int srv_grpc_error_text(const srv_req *r, char *err);

#endif
