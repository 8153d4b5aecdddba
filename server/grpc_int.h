/*
 * grpc_int.h - the state grpc.c (calls: streams, framing, answers) and
 * grpc_conn.c (connections: sockets, writes, start and stop) share; not
 * part of the daemon's API. Loop thread only.
 */
#ifndef ATTND_GRPC_INT_H
#define ATTND_GRPC_INT_H

#include <nghttp2/nghttp2.h>
#include <string.h>

#include "proto/oip_pb.h"
#include "server/grpc.h"

#define READ_BUF 65536
/* a connection that has read this much since it last yielded sits out
 * the loop's next poll (its reads resume on the turn after): libuv reads
 * a readable socket up to 32 times a turn, 2 MB, and 2 MB of PRIORITY or
 * empty DATA frames (8 ns a byte in nghttp2) kept the loop 17 ms on one
 * connection while the others waited; now each reads once a turn */
#define TURN_READ READ_BUF
/* ... and begins at most this many calls (HEADERS frames) a turn: the
 * bytes from the next HEADERS on wait, held, for its next turn. One read
 * of small calls is up to 128 at once (MAX_STREAMS), each a parse and an
 * answer: one connection sending calls for a model attnd does not serve
 * kept a call beside it 1.0-1.6 ms (p50; 0.1-0.25 ms alone). grpc-core
 * bounds requests a read (max_requests_per_read) as this does */
#define TURN_CALLS 16
#define WRITE_HIGH (4u << 20)   /* stop pulling frames past this much unwritten */
#define STREAM_WINDOW (1 << 20) /* per-stream receive window */
#define CONN_WINDOW (16 << 20)  /* per-connection receive window */
#define MAX_STREAMS 128         /* concurrent calls per connection */
/* the header list one HEADERS block may carry (names, values and 32 bytes
 * each, RFC 9113 6.5.2), told the client in SETTINGS */
#define MAX_HEADER_LIST 65536
/* a connection is a flood once an eighth of the bytes it sent is over
 * what its calls carried (their header blocks and messages, and the
 * headers and messages of their answers) by more than this (nginx's
 * rule): frames that carry no call (PRIORITY, empty DATA, PINGs, unknown
 * types) cost up to 10 times a byte read and dropped, and nghttp2 ends no
 * connection for sending them */
#define FLOOD_SLACK (1u << 20)
/* a message's bookkeeping, counted against memory-budget with its bytes
 * (README): the ghold it may wait in and two allocations' headers fit (a
 * flood of empty messages held behind a paused connection cost 16 times
 * what it counted) */
#define MSG_COST 128
/* where a slot's msg holds its request's echo: past its words, the room
 * stream_msg moves them into and an infer_response field's header */
#define SLOT_ECHO_AT (16 + GRPC_ERRMAX + 3)
/* the bytes of a slot's big for an echo of n: the echo's field header may
 * take up to 11 bytes where an inline echo's takes 3 */
#define SLOT_ECHO_BIG(n) (SLOT_ECHO_AT + 8 + (n))

typedef struct gconn gconn;
typedef struct gcall gcall;

/* One framed message (or part of one) waiting to be written: the answer
 * of the slot it is part of (gslot.chunk), which lives until it is sent. */
typedef struct gchunk {
    struct gchunk *next;
    char *buf;      /* the slot's out, or its msg */
    size_t off, end;
} gchunk;

/* A stream's request message waiting for the connection to take more
 * work (its unsent answers are over --grpc-buffer). */
typedef struct ghold {
    struct ghold *next;
    char *msg;
    size_t len, mem;
    int late;       /* it began after SIGTERM (gcall.late) */
    uint64_t t0;    /* its first byte came (gcall.msg_t0) */
} ghold;
_Static_assert(sizeof(ghold) + 32 <= MSG_COST, "MSG_COST holds a ghold");

/* One request message and its answer. */
typedef struct gslot {
    struct gslot *next;
    gcall *call;
    srv_req *r;     /* NULL once freed */
    int done, code; /* answered: GRPC_OK with out, or an error with msg */
    char *out;      /* response message at out + OIP_PB_HEADROOM */
    size_t out_len;
    /* an error's words: held, not allocated, so an error always has them;
     * room after them to frame them in place (stream_msg). On a stream,
     * its request's echo (oip_pb_echo_encode, echo_len bytes) waits at
     * SLOT_ECHO_AT: the error answer's infer_response. */
    char msg[SLOT_ECHO_AT + OIP_PB_ECHO_MAX];
    size_t echo_len;
    /* an echo longer than OIP_PB_ECHO_MAX (an id over 255 bytes: a
     * request refused for it) waits at SLOT_ECHO_AT of big instead, room
     * for the whole error answer (SLOT_ECHO_BIG) */
    char *big;
    /* memory-budget it holds until queued (queue_chunk counts it then):
     * big's bytes, and the slot's own size (with its srv_req's, when it
     * has one) */
    size_t mem;
    /* its answer on the way out: queued without an allocation, so an
     * answer made (a sequence's step done) is sent, or its connection
     * closed, never replaced by an out-of-memory error. The slot lives
     * until the chunk is sent and is counted with it (queue_chunk). */
    gchunk chunk;
} gslot;

struct gcall {
    gconn *c;
    int32_t id;
    gcall *next, *prev;
    const grpc_method *m;
    char path[128];
    int http_status;     /* 405 for a method other than POST, 415 for a
                            content-type missing or not application/grpc,
                            else 0 */
    int has_ct;          /* content-type came */
    char method[16];     /* :method as sent, letters only (else "OTHER") */
    int auth_ok;
    int n_auth;          /* authorization lines: more than one is refused */
    long long timeout_ms;
    int has_timeout;     /* grpc-timeout lines (0 included): more than one
                            is refused (begin), neither taken */
    uint64_t t0_ns;      /* its HEADERS began (the log's total_us) */
    int answered;        /* ended by its one message's answer (logged) */
    int has_seq_hdr;     /* attnd-sequence-id metadata lines, for its
                            requests: the first's value; more than one is
                            refused (begin) */
    char seq_hdr[OIP_MAX_SEQ_ID + 1];
    uint64_t deadline_ns;
    /* incoming messages */
    unsigned char hdr[5];
    int hdr_got;
    char *msg;
    size_t msg_len, msg_got;
    int n_msgs, half_closed;
    char *unary;         /* a unary call's message, until END_STREAM */
    size_t unary_len;
    size_t msg_mem, unary_mem; /* their shares of memory-budget */
    int skipping;        /* a stream message refused unread: drop its bytes */
    struct gslot *skipped; /* its error, answered once head is full */
    char head[OIP_PB_ECHO_MAX]; /* its first bytes, for the echo (or
                                   all of a shorter one) */
    int late;            /* the message arriving began after SIGTERM, so
                            its request is refused (r->late): a unary
                            call's when its HEADERS did (REST: its head),
                            a stream's each when its first byte did */
    int counted;         /* its HEADERS came: one of its connection's calls */
    uint64_t t_msg_ns;   /* a message is arriving since (min-body-rate) */
    uint64_t msg_t0;     /* the last message's first byte came: a
                            sequence step's time (srv_req.t_msg_ns) */
    size_t msg_seen;     /* bytes of it so far */
    ghold *hhead, *htail; /* stream messages held: queue-size of its
                             requests in flight, or the connection paused */
    size_t unconsumed;   /* DATA bytes not yet given back to its window */
    /* answers */
    gslot *shead, *stail;
    int n_slots;
    gchunk *chead, *ctail;
    int headers_sent, deferred, ending, ended;
    int failing;         /* a stream whose framing broke (srv_grpc__call_fail):
                            it reads no more, and ends with code and
                            end_msg once its requests before are answered */
    int code;            /* the final status once ending (or failing) */
    char end_msg[GRPC_ERRMAX];
};
/* an open call's state, counted against memory-budget from its HEADERS
 * until its stream closes (README): its gcall, nghttp2's stream and the
 * allocations' headers. Uncounted, a client's idle ModelStreamInfer
 * streams (128 a connection, held for good) held 2.8 KB each. */
#define CALL_COST 3072
_Static_assert(sizeof(gcall) + 512 <= CALL_COST, "CALL_COST holds a gcall");

/* an open connection's own state, counted against memory-budget from its
 * accept until it closes (README): its gconn and nghttp2's session (its
 * frame buffers, both HPACK tables, the idle streams PRIORITY frames
 * make). Measured (RSS over 200 connections): 34 KB a connection that
 * sent its preface and SETTINGS, 42 KB one that filled its HPACK table,
 * 62-66 KB one that also sent 6000-20000 PRIORITY frames (nghttp2 caps
 * their idle streams), 45 KB one that closed 100 streams (closed streams
 * are not kept for the priority tree: nghttp2_option_set_no_closed_streams).
 * Its calls count on their own (CALL_COST). */
#define CONN_COST 81920
_Static_assert(1 + MSG_COST + CALL_COST + CONN_COST <= SRV_BODY_SLACK,
               "a message of max-body fits a budget of max-body + SRV_BODY_SLACK");

struct gconn {
    srv_conn guard;      /* on s->conns (guard.c): counted, timed, evictable */
    size_t mem;          /* memory-budget it holds (CONN_COST, and held_cap),
                            until its handles close */
    struct srv_grpc *g;
    uv_tcp_t tcp;
    uv_timer_t idle;     /* --connection-timeout with no call open */
    int handles;         /* tcp and idle, until closed; then c is freed */
    uv_shutdown_t shut;
    nghttp2_session *h2;
    gcall *calls, *calls_tail; /* in the order their HEADERS came, so
                                 answers made in one turn go in it */
    gconn *next, *prev;
    gconn *fnext;        /* flush list */
    gconn *ynext;        /* yielded list (TURN_READ) */
    size_t turn_read;    /* bytes read since it last yielded */
    int turn_heads;      /* HEADERS frames scanned this turn (TURN_CALLS) */
    uint8_t *held;       /* what it sent past them, for its next turn */
    size_t held_n, held_cap; /* (held_cap counted in mem) */
    int held_early;      /* held was read before SIGTERM: the calls and
                            stream messages it begins are served by the
                            drain (srv_grpc__late), which waits for them */
    int early;           /* the bytes being read are such held ones */
    int yielded;         /* its reads stopped until the next turn */
    int discarding;      /* the stop: its final GOAWAY and answers written,
                            its client's frames read and dropped until it
                            closes (srv_grpc_stop) */
    int shut_done;       /* then: its shutdown (FIN) was made */
    int in_flush, closing;
    size_t wpending;     /* bytes handed to uv_write, not yet written */
    uint64_t written;    /* bytes uv_write has written (to the kernel) */
    uint64_t took;       /* of them, its client had acknowledged as many
                            when the idle timer last ran (taking) */
    size_t queued;       /* answer bytes queued in its calls, not yet sent,
                            and their slots' (queue_chunk) */
    size_t unconsumed;   /* DATA bytes of streams gone, not yet given back */
    int paused;          /* queued + wpending over --grpc-buffer: no window
                            given back, stream messages held */
    size_t hlist;        /* the header list of the block being read */
    uint64_t rx;         /* bytes read from the client */
    uint64_t carried;    /* what its calls carried each way (FLOOD_SLACK) */
    uint64_t reset_credit; /* DATA its calls ended early may still be sent
                              (a stream window each), counted carried as
                              it comes on a stream with no call */
    uint8_t fh[9];       /* the frame header being read (scan_frames) */
    int fh_got;          /* its bytes so far */
    size_t preface_got;  /* bytes of the client's 24-byte preface read */
    size_t fskip;        /* bytes of the frame's payload still to come */
    int h2_error;        /* srv_grpc__h2_error counted it */
    int h2_nomem;        /* an allocation of nghttp2's failed: a frame (and
                            maybe its HPACK state) is lost, so flush closes
                            the connection; its GOAWAY is no client's fault */
};

typedef struct srv_grpc {
    srv *s;
    srv_accept accept;  /* the listener (accept.c; its handles' data: g) */
    gconn *spare;       /* the next connection's state, made before its
                           accept (room, grpc_conn.c) */
    uv_idle_t idle;
    int idle_on;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    gconn *conns, *flush;
    gconn *yielded;     /* connections whose reads resume next turn */
    int n_conns;
    int handles;  /* the idle handle and the listener's poll and retry
                     timer, until closed */
    int closing_conns; /* connections whose handles are closing */
    int stopped;  /* srv_grpc_stop ran: freed once everything closed */
    uv_timer_t stop_timer; /* then: closes the connections still open */
    int stop_timer_on;     /* it is open (closed with the last of them) */
    uint64_t stop_end_ns;  /* the flush's time ends: every one closes */
    void (*stop_done)(srv *); /* called as the last of them closes */
    srv_every h2_log;      /* srv_grpc__h2_error's log lines */
    srv_every refused_log; /* streams refused for memory-budget */
    srv_every conn_refused_log; /* connections refused for it */
    char rbuf[READ_BUF];
} srv_grpc;

typedef struct wreq {
    uv_write_t req;
    gconn *c;
    char *buf;
    size_t len;
} wreq;

/* grpc_conn.c: flush c on this loop turn (outside nghttp2's callbacks). */
void srv_grpc__schedule(gconn *c);
/* grpc_conn.c, for grpc_stop.c: write what c's session has to send now;
 * close c (once); its reading callbacks (a stopping one's reads are
 * dropped); a closed handle of g's, counted down (g freed after the
 * last). */
void srv_grpc__flush(gconn *c);
void srv_grpc__close_conn(gconn *c);
void srv_grpc__on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
void srv_grpc__on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);
void srv_grpc__handle_closed(uv_handle_t *h);
/* grpc.c: deliver a call's answered slots, send headers, data, trailers. */
void srv_grpc__pump(gcall *call);
/* grpc.c: end a call with its final status (trailers after what is
 * queued). Once. */
void srv_grpc__call_end(gcall *call, int code, const char *msg);
/* grpc.c: a call whose client broke the framing of its messages (or sent
 * one too slowly) ends with code and msg: at once, unless it is a stream
 * with requests before the broken one (in flight or held): those are
 * answered first, in order, while it reads no more (its later bytes and
 * the message begun are dropped), then it ends (pump). */
void srv_grpc__call_fail(gcall *call, int code, const char *msg);
/* grpc.c: one complete request message of a call (msg malloc'd, taken,
 * mem bytes of the budget; late: it began after SIGTERM; t0: its first
 * byte came) becomes a slot: an srv_req for the method. */
void srv_grpc__dispatch(gcall *call, char *msg, size_t len, size_t mem,
                        int late, uint64_t t0);
/* grpc.c: a stream request answered with an error before it became an
 * srv_req (its bytes were refused); it keeps its place in the order, and
 * echoes req (its message, len bytes; NULL: its bytes are still coming,
 * and srv_grpc__slot_echo answers it once the first OIP_PB_ECHO_MAX of
 * them, where its id is, have come). The slot, or NULL when there was no
 * memory for one (the call is ended). */
gslot *srv_grpc__slot_error(gcall *call, int code, const char *msg,
                            const char *req, size_t len);
/* grpc.c: a slot_error whose request's first bytes have come now echoes
 * req (len bytes: their start) and is answered. */
void srv_grpc__slot_echo(gslot *sl, const char *req, size_t len);
/* grpc.c: the echo of the message call is skipping (call->skipped), from
 * the part of it come so far (call->head); call->skipped then NULL. */
void srv_grpc__skipped_echo(gcall *call);
/* srv_grpc__is_infer: does m run an inference (ModelInfer,
 * ModelStreamInfer: REST's POST /v2/models/{m}/infer), a sequence's step
 * when it names one? */
static inline int srv_grpc__is_infer(const grpc_method *m)
{
    return m && m->rest_path &&
           strcmp(m->rest_path, "/v2/models/{}/infer") == 0;
}

/* srv_grpc__late: does a call (its HEADERS), or a stream's message (its
 * first byte), that c's bytes begin now begin after SIGTERM, so that its
 * request is refused (r->late)? Bytes attnd read before the signal and
 * held past TURN_CALLS (grpc_conn.c) begin theirs before it, whenever
 * their turn comes: the client sent them, and attnd read them, first. */
static inline int srv_grpc__late(const gconn *c)
{
    return c->g->s->draining && !c->early;
}

/* The longest message a gRPC prefix can announce (its 4-byte length). */
#define GRPC_MSG_MAX ((size_t)UINT32_MAX)
/* grpc.c: the 5-byte prefix of a message of len bytes at buf + at, written
 * in the 5 bytes before it; where the frame starts, or SIZE_MAX (nothing
 * written) when len is over GRPC_MSG_MAX. */
size_t srv_grpc__frame(char *buf, size_t at, size_t len);
/* grpc.c: does sl's answer fit the one gRPC message it goes out as (its
 * own, or within a stream's: stream)? If not, sl answers
 * RESOURCE_EXHAUSTED instead (saying the answer's size) and its request,
 * if it has one, is logged with the status that maps back to (413), not
 * the answer's; 0. Errors always fit. */
int srv_grpc__fits(gslot *sl, int stream);
/* grpc_conn.c: has a connection's client taken more of its answers than
 * *took (then raised to it)? What it took is what the kernel was given
 * (written: the uv_writes done; of wpending, those still pending, what
 * libuv has passed on: all but its write queue, wqueue) less what the
 * kernel still holds (q, SIOCOUTQ; below 0 unknown: 0): it only grows.
 * Its last bytes count too (q and wpending 0): their ACK is not its read
 * of them, and it may still be reading them (its kernel's receive buffer)
 * when the timer runs; its time is then srv_grpc__idle_left's. written
 * alone grows only as a whole uv_write (up to WRITE_HIGH) ends: while one
 * was partly in the kernel written - q wrapped, and a client reading X as
 * libuv refilled X of the same write left it as it was, and was sent away
 * as it read (test_grpc.c). */
int srv_grpc__taken(uint64_t written, size_t wpending, size_t wqueue, int q,
                    uint64_t *took);
/* grpc_conn.c: the ms left of a connection-timeout of timeout_ms for a
 * client that took bytes since the idle timer last ran, counted from its
 * last ACK ack_age_ms ago (srv_sock_ack_age_ms; below 0 unknown: all of
 * it); 0 once it has passed (GOAWAY). */
uint64_t srv_grpc__idle_left(uint64_t timeout_ms, long ack_age_ms);
/* grpc.c: free a call; its unanswered requests detach or are orphaned. */
void srv_grpc__call_free(gcall *call);
/* grpc_conn.c: the HTTP/2 layer ends c for an error (code: the GOAWAY's
 * error code it sent, or 0 with what: why it refused c's input). Counted
 * once per connection (attnd_grpc_connection_errors_total) and logged at
 * most once a second, with how many since the last line (those after a
 * burst's last line are only in the metric until the next one). */
void srv_grpc__h2_error(gconn *c, uint32_t code, const char *what);
/* grpc_h2.c: follow the frame headers of the n bytes at p c read, before
 * nghttp2 reads them (the flood rule's DATA after a reset); with bound,
 * stop before the HEADERS past TURN_CALLS this turn: the bytes it took. */
size_t srv_grpc__scan_frames(gconn *c, const uint8_t *p, size_t n, int bound);
/* grpc_h2.c: the session callbacks that build calls. */
void srv_grpc__callbacks(nghttp2_session_callbacks *cbs);

#endif
