/*
 * srv.h - the daemon's internal types, shared by the files of server/.
 *
 * Threads: one libuv loop thread owns every struct here (the registry, the
 * queues, the requests, the metrics) and is the only thread that touches
 * libuv or libmicrohttpd. Pool threads (uv_queue_work) only see a job's own
 * buffers and a model instance's read-only weights, handed over and back by
 * uv_queue_work's work/after_work pair.
 *
 * Path of a request: http.c (MHD glue, body, route) -> routes.c (handlers)
 * -> sched.c (decode on the pool, queue, encode on the pool) and batch.c
 * (batch, run tiles) with infer.c (the pool-side decode/validate/encode of one request)
 * -> http.c (resume, answer, log). registry.c owns the models, metrics.c the
 * counters (stats.h), config.c the settings.
 */
#ifndef ATTND_SRV_H
#define ATTND_SRV_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "core/attn.h"
#include "core/model.h"
#include "proto/oip.h"
#include "server/config.h"
#include "server/linger.h"
#include "server/maps.h"
#include "server/stats.h"

#define ATTND_VERSION "0.1.0"
#define SRV_NAME_MAX 129 /* model names: 1..128 chars + NUL */
#define SRV_ORIGIN_MAX 256 /* longest CORS Origin echoed, with its NUL */
/* What the shared-memory extension's routes and RPCs are answered
 * (REST 404, gRPC UNIMPLEMENTED): attnd does not serve it. */
#define SRV_NO_SHM                                                             \
    "attnd does not serve Triton's shared-memory extension (system or "        \
    "CUDA; /v2 does not list it): send the tensors in the request, take "      \
    "the outputs from the answer"
/* What GET /v2/models (and /v2/models/) is answered, 404 as Triton's
 * "Not Found": neither Triton nor KServe's v2 protocol has a GET list of
 * the models; the list is the repository index, which the page reads too. */
#define SRV_NO_LIST                                                            \
    "the model list is POST /v2/repository/index, as on Triton (body {}: "     \
    "every model, loaded or not; {\"ready\":true}: the ready ones); a "        \
    "model's metadata is GET /v2/models/<name>"
/* libmicrohttpd messages told apart when they repeat (a malformed request
 * gives two, one after the other) */
#define SRV_MHD_MSGS 4

typedef struct srv srv;
typedef struct srv_req srv_req;
typedef struct srv_job srv_job;
typedef struct srv_entry srv_entry;
typedef struct srv_inst srv_inst;
typedef struct srv_conn srv_conn;

/* srv_every: events logged at most one line a second, with their count.
 * srv_every_due (log.c) counts one more at now; it returns the events since the
 * last line when a line is due (none in the last second: the caller
 * writes it now), else 0 (kept for the next line). */
typedef struct srv_every {
    uint64_t last_ns;
    unsigned long long n;
} srv_every;

/* srv_accept (accept.c; its calls: accept.h): a door's listening socket,
 * polled on the loop and accepted by attnd itself (not libmicrohttpd's
 * accept, not libuv's uv_listen). Its poll and retry timer carry the door's data. */
typedef struct srv_accept {
    srv *s;
    const char *door;         /* "http", "grpc": its log lines' prefix */
    int fd;                   /* the listening socket (-1 before and after) */
    uv_poll_t poll;           /* readable: accept what waits */
    uv_timer_t retry;         /* a paused listener polled again */
    /* the door's, given its handles' data: room: it can take one more
     * now (else it has paused the listener: srv_accept_pause); take: fd,
     * just accepted from peer (len bytes), is its now */
    int (*room)(void *data);
    void (*take)(void *data, int fd, const struct sockaddr_storage *peer,
                 socklen_t len);
    unsigned long long fails; /* in a row, since the last accept */
    srv_every log;            /* their log lines */
} srv_accept;

/* ---- registry.c -------------------------------------------------------- */

enum { SRV_UNAVAILABLE = 0, SRV_LOADING, SRV_READY };

/* One loaded weight set. Jobs hold references; the last one frees it, so an
 * unload or reload never pulls weights from under a running batch. */
struct srv_inst {
    model *m;    /* NULL for the built-in sdpa */
    struct attn_kv_pool *kv_pool; /* its sequences' K/V pages (kv-bytes),
                                     NULL for sdpa, kv-bytes 0, or a pool
                                     that could not be made (kv_why) */
    char kv_why[160]; /* why kv-bytes gave it no pool (a page of its keys
                         and values over 1 GiB, no memory); "" otherwise */
    /* what=norm's Gram matrices of its W_o (maps_norm.h), made by its
     * first retained request; NULL for sdpa */
    struct maps_grams *grams;
    int refs;    /* registry (while current) + jobs */
    int builtin; /* 1 for sdpa */
    /* replaced (a reload, an unload) while jobs or sequences still held
     * it: on its entry's retired list until freed, so that its K/V pages
     * still count in attnd_kv_bytes and its weights and pages in memfit's
     * sum */
    struct srv_entry *retired_of;
    struct srv_inst *rnext;
};

/* A model name the server knows. Entries live until the server stops. */
struct srv_entry {
    srv *s;
    char name[SRV_NAME_MAX];
    srv_inst *inst; /* current instance, NULL when not loaded */
    srv_inst *retired; /* earlier ones still held (srv_inst.retired_of) */
    int state;      /* SRV_UNAVAILABLE / LOADING / READY */
    int startup;    /* loaded at startup: counts for /v2/health/ready */
    /* registry_queue.c: its loads, uploads and unloads take effect one at a
     * time, in the order they came: busy while a load or upload of it
     * runs; the calls that came meanwhile wait (suspended), oldest first */
    int busy;
    srv_req *turn_head, *turn_tail;
    int n_turns;    /* calls waiting (at most repository-waiters); those
                       that joined one of them are not counted
                       (srv_registry_waiting counts them all) */
    int ever;       /* it has had an instance */
    int closing;    /* handles still closing, once dropped (registry.c) */
    char reason[ATTN_ERRMAX];
    /* scheduling (sched.c, batch.c) */
    srv_job *qhead, *qtail; /* decoded requests waiting for a batch */
    int64_t q_seqs;         /* sequences in the queue (a request may
                               bring max-tokens, 2^30: an int sum of a
                               few wrapped) */
    int pending;            /* jobs admitted and not yet finished */
    int running;            /* batches on the pool */
    int batch_fd;           /* timerfd: wakes the loop, to the microsecond, */
    uv_poll_t batch_poll;   /* when the oldest has waited batch_delay_us */
    uint64_t wake_at;       /* batch.c: batch_fd's deadline (srv_now_ns), 0: none */
    uv_idle_t pump_idle;    /* batch.c: pumps the queue in the loop's next turn */
    int pumping;            /* batch.c: in srv__pump (a pump from inside it,
                               a batch that ended at once, is its loop's) */
    uv_async_t helpers;     /* batch.c: a staged batch's next phase began */
    struct batch *staged;   /* batch.c: its batches run tile by tile */
    /* sequences answered 200 whose next step has not reached the queue
     * yet (seq.c); a flag of an older generation no longer counts */
    int seq_expected;
    uint64_t expect_gen;
    uint64_t last_run_ns; /* how long the last batch ran */
    srv_stats stats;
    srv_seq_stats seq_stats;
    srv_entry *next;
};

/* ---- http.c ------------------------------------------------------------- */

enum { SRV_GET = 1, SRV_POST = 2, SRV_OPTIONS = 4, SRV_HEAD = 8, SRV_OTHER = 16,
       SRV_DELETE = 32 };

typedef void (*srv_handler)(srv_req *r);

/* An infer request's wire format. sched.c calls decode and encode on the
 * pool; they have oip_decode's and oip_encode's contracts. A request with
 * door NULL is REST's JSON (oip_decode/oip_encode); grpc.c's requests use
 * protobuf (proto/oip_pb.h). */
typedef struct srv_door {
    int (*decode)(oip_request *req, const char *body, size_t len,
                  size_t header_len, const oip_limits *lim, char *err);
    oip_encode_fn *encode;
    /* a request's sequence id without its decode (oip_peek_sequence_id) */
    int (*peek_seq_id)(const char *body, size_t len, size_t header_len,
                       char *id);
} srv_door;
/* The body a route accepts, checked from the headers before a byte of it
 * is read (413 otherwise): */
enum {
    SRV_BODY_NONE = 0, /* none: Content-Length 0 or absent, not chunked */
    SRV_BODY_SMALL,    /* a small JSON object: up to max-small-body */
    SRV_BODY_INFER,    /* max-json-body, or max-body with a binary header */
    SRV_BODY_UPLOAD,   /* up to max-body (a model upload) */
};

/* One row of the route table (routes.c). "{}" matches one path segment,
 * captured into r->arg[]. */
typedef struct srv_route {
    int method;         /* SRV_GET, SRV_POST or SRV_DELETE */
    const char *path;   /* e.g. "/v2/models/{}/infer" */
    srv_handler fn;
    int auth;           /* 1: needs the API key when one is set */
    int body;           /* SRV_BODY_* */
    /* the query parameters it reads, space-separated ("" none): any other,
     * one given twice or one without '=' answers 400 (http_head.c); NULL
     * for the KServe and Triton routes, whose queries are not checked */
    const char *query;
    /* with Expect: 100-continue, the answer its head alone gets, which no
     * body would change (http_head.c's answered_early): 1 when it
     * answered r, 0 to send the 100 and read the body; NULL for none */
    int (*head)(srv_req *r);
} srv_route;

/* One HTTP request. Allocated on MHD's first call for it, freed in exactly
 * one place: the completion callback. Loop thread only. */
struct srv_req {
    srv *s;
    struct MHD_Connection *conn;
    int method;
    char method_name[16];  /* as sent, letters only (else "OTHER"): logs, 405 */
    char path[1024];       /* URL path, version alias removed */
    unsigned short vfold;  /* 1 + where "/versions/1" was cut from path
                              (the log names the path as sent), or 0 */
    const srv_route *route;
    char arg[2][SRV_NAME_MAX + 32]; /* path captures */
    char *body;            /* request body, grown up to body_limit */
    size_t body_len, body_cap, body_limit;
    const char *limit_name; /* the setting body_limit comes from */
    int too_large;         /* body passed body_limit; rest discarded */
    int close;             /* its connection closes after the answer (one made
                              from the head is then queued at once: http.c) */
    size_t body_seen;      /* bytes received, kept or not */
    size_t head_bytes;     /* its head's bytes (libmicrohttpd's count), 0
                              when not known or its body's framing differs
                              from its length (chunked): guard.c */
    size_t header_len;     /* Inference-Header-Content-Length, 0 = none */
    char origin[SRV_ORIGIN_MAX]; /* allowed CORS origin to echo, "" = none */
    int cors;              /* the cors-origins entry that allows it, 1-based */
    uint64_t t0_ns;        /* its head arrived */
    srv_conn *c;           /* its connection's guard (guard.c), or NULL */
    size_t mem;            /* bytes it holds of memory-budget */
    size_t resp_mem;       /* of which its answer's, until sent (http.c) */
    size_t expect;         /* Content-Length, 0 = unknown */
    int no_mem;            /* memory-budget ran out while buffering */
    int dispatched;        /* the body is complete: handler or answer */
    int late;              /* it began after SIGTERM (draining): its head
                              came after it (gRPC: its call's HEADERS, a
                              stream message's first byte) */
    int suspended;
    int queued;            /* response handed to MHD */
    int cut_sent;          /* its 503 was written at the drain's cut, its
                              body still coming (srv_http_cut): 1 whole, -1
                              not (counted in n_cut_open, n_answered); what
                              more comes is dropped, MHD never answers it */
    int changed;           /* its success changed the server's state (a
                              sequence's step, a load, an unload, a
                              sequence ended): its answer, if lost, must not
                              read as "nothing happened" (http.c) */
    /* the answer */
    int have_resp, status;
    int retry_after;       /* seconds; 0: 1 on a 503; -1: none */
    char *resp;            /* malloc'd, handed to MHD */
    const char *resp_static; /* or a body MHD must not free (its
                              resp_len bytes): srv_respond_static */
    int resp_oom;          /* resp could not be allocated: http.c's fixed
                              503 out-of-memory body instead */
    size_t resp_len, resp_header_len;
    const char *ctype;
    const char *allow;     /* Allow header for 405 and OPTIONS */
    char extra_hdr[96];    /* one more "Name: value" header, or "" */
    char map_version[24];  /* a map's cells' Map-Version header, or "" */
    const char *web_etag;  /* static; set for the visualiser's files */
    srv_job *job;          /* infer in progress, NULL otherwise */
    /* a long poll on a map (maps_wait.c), while waiting is set */
    int waiting;
    int wait_t;            /* the query rows the client has */
    long long wait_version; /* the map version it has, -1 = not given */
    uint64_t wait_until_ns;
    char wait_id[MAPS_ID_MAX];
    int wait_fd;           /* its socket, watched for the client's end */
    int went;              /* its client went while it waited, or before
                              its body was complete: logged and
                              counted 499 (as nginx), whatever it was sent */
    int client_closes;     /* its client asked to close after it: no
                              Keep-Alive in the answer */
    int too_slow;          /* its body came slower than min-body-rate and
                              the guard closed its connection: logged and
                              counted 408 (as nginx logs a body timeout) */
    srv_req *wait_prev, *wait_next;
    /* a repository call waiting for its model's turn (registry_queue.c) */
    srv_req *turn_next;    /* the next in its model's queue, or the next
                              call that joined the same one */
    int turn_unload;       /* it is an unload (else a load or upload) */
    srv_req *joined;       /* the calls identical to it that came while it
                              waited, answered with it (turn_next links
                              them, oldest first; joined_last the newest),
                              and their count */
    srv_req *joined_last;
    int n_joined;
    /* for the log line */
    char model[SRV_NAME_MAX];
    char id[OIP_MAX_ID]; /* whole: ids of up to OIP_MAX_ID - 1 bytes */
    int batch;
    uint64_t queue_us, compute_us;
    /* A request that came in by another door (grpc.c) has conn NULL:
     * srv_suspend only counts it (n_suspended: the stop waits for it as
     * for a parked connection) and srv_respond calls on_answer, which owns
     * r from then on (the door frees it). */
    const srv_door *door;            /* infer wire format; NULL = JSON */
    void (*on_answer)(srv_req *r);
    void *door_ctx;
    long long deadline_ms; /* shorter deadline than --deadline-ms, or 0 */
    int expired;           /* its client's deadline had passed when it
                              came (gRPC): srv_h_infer answers 504 once
                              its model is known, counted as a timeout */
    /* the door's attnd-sequence-id metadata, or REST's Attnd-Sequence-Id
     * header without the white space after it (http_head.c's
     * keep_seq_hdr); one too long to be an id is cut past
     * OIP_MAX_SEQ_ID - 1 bytes */
    int has_seq_hdr;
    char seq_hdr[OIP_MAX_SEQ_ID + 1];
    /* its message's first byte came (gRPC; REST's is t0_ns, its head): a
     * sequence step's time for the idle sweep (seq.h, t_head) */
    uint64_t t_msg_ns;
};

/* srv_respond: set r's answer and, if r is suspended, resume it. Takes
 * ownership of body (malloc'd, may be NULL). Loop thread. */
void srv_respond(srv_req *r, int status, const char *ctype, char *body,
                 size_t len);
/* srv_respond_static: the same with a body that outlives r (compiled in),
 * neither copied nor freed; a 304 given its 200's body says that length
 * and sends none (REST only). Loop thread. */
void srv_respond_static(srv_req *r, int status, const char *ctype,
                        const char *body, size_t len);
/* srv_key_ok: an Authorization value (len bytes; NULL: none) names the API
 * key: "Bearer", any case, spaces, then the key (white space after it
 * dropped: not part of a REST field's value; HTTP/2 resets a stream whose
 * field has it); compared in constant time.
 * REST and gRPC both. */
int srv_key_ok(const char *key, const char *v, size_t len);
/* srv_respond_error: {"error": msg} with status (503 adds Retry-After). */
void srv_respond_error(srv_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void srv_respond_json(srv_req *r, int status, const char *json);
/* srv_respond_dump: o (taken) as r's 200, or 503 fmt when out of memory. */
void srv_respond_dump(srv_req *r, json_t *o, unsigned long mark,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* srv_suspend: r's handler keeps it until srv_respond: its connection is
 * parked (REST), and it counts in n_suspended (both doors). */
void srv_suspend(srv_req *r);
/* srv_kick: run MHD soon (after a resume). */
void srv_kick(srv *s);
/* srv_client_went: has the client of socket fd closed its end (FIN:
 * closed or half-closed) or reset it? Bytes it sent (a pipelined request)
 * are not an end; a FIN behind them is. One poll(2), no wait. MHD does not
 * read a suspended connection, so this is how a request parked on the loop
 * (a long poll, work queued or running) learns that its client went. */
int srv_client_went(int fd);
/* clock.c: CLOCK_MONOTONIC in ns, every layer's clock. Any thread. */
uint64_t srv_now_ns(void);

/* ---- the server --------------------------------------------------------- */

struct srv {
    srv_config cfg;
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;
    /* http.c's answers made at start, [0] without CORS and [i] with the
     * i-th entry of cors-origins (n_fixed of them): 503 when a request or
     * its answer cannot be allocated; 500 when a request was carried out
     * but libmicrohttpd has no memory for its answer; 204 to an allowed
     * origin's CORS preflight then (none at [0]) */
    struct srv_fixed {
        struct MHD_Response *oom, *lost, *preflight;
        char origin[SRV_ORIGIN_MAX]; /* the entry (cut; len is whole) */
        size_t len;
    } *fixed;
    int n_fixed;
    uv_poll_t mhd_poll;
    uv_timer_t mhd_timer;
    uv_idle_t mhd_idle;   /* MHD's timeout of 0 once the loop must poll */
    uv_timer_t http_stop_timer; /* the stop's wait (srv_http_stop) */
    uint64_t http_stop_end_ns;
    void (*http_stop_done)(srv *); /* set while it waits */
    int mhd_runs_at_once; /* MHD runs at timeout 0 since the loop polled */
    int mhd_still_runs;   /* runs at timeout 0 in a row with nothing
                             moved (http.c run_mhd) */
    uint64_t mhd_calls;   /* MHD's calls of on_request */
    int mhd_quiet;        /* MHD's next "Application reported internal
                             error" line is not logged: on_request ended a
                             request answered at the cut (srv_http_cut) */
    /* http_accept.c: the REST listener (accept.c) */
    srv_accept accept;
    int accept_full;                    /* paused: MHD at its limit */
    srv_every accept_full_log;          /* http_accept.c: its lines */
    srv_every conn_refused_log;         /* http_accept.c: no memory-budget */
    char refused[512 + SRV_ORIGIN_MAX]; /* http_accept.c: its 503 */
    size_t refused_len;
    int n_http_conns;     /* REST connections holding SRV_HTTP_CONN_COST */
    int conn_mem_pending; /* http_accept.c: SRV_HTTP_CONN_COST taken for the
                             connection MHD_add_connection is adding, not
                             yet handed to its srv_conn (srv_guard_notify) */
    /* http.c: libmicrohttpd's last messages, each with when its last line
     * was and how often it came again since (not logged yet) */
    struct srv_mhd_msg {
        char text[256];
        uint64_t last_ns;
        unsigned long long repeats;
    } mhd_msgs[SRV_MHD_MSGS];
    uv_async_t sig_async;  /* main.c: SIGTERM/SIGINT reach the loop */
    uv_timer_t drain_timer;
    uv_timer_t stop_timer;
    uv_timer_cb on_stop;   /* main.c: its callback, set at start */
    int threads;           /* pool size */
    int port;              /* bound port */
    int draining;          /* SIGTERM seen */
    int drain_expired;     /* drain timeout passed: fail what is left */
    int start_failed;      /* the start failed: its stop drains nothing */
    int flushing;          /* since: nothing runs any more, the answers
                              made go out (main.c, --stop-flush-ms) */
    int flush_expired;     /* that flush's time is up: stop, cut the rest */
    uint64_t flush_t0_ns;  /* that flush began */
    int stopping;          /* everything finished: closing handles */
    int stop_waits;        /* main.c: doors whose connections still wait
                              for their clients at the stop, and one */
    int stop_cut_rest, stop_cut_grpc; /* of them, closed at the flush's
                              end with answers not yet acknowledged */
    int stop_cut_heads; /* REST ones closed then whose request head had
                           not come whole (srv_guard_head_coming) */
    int startup_loads;     /* startup loads still running */
    int live_reqs;         /* srv_req alive */
    int live_jobs;         /* srv_job alive */
    int n_suspended;       /* requests parked by srv_suspend (either door) */
    int n_answered;        /* REST requests answered, not yet completed
                              (their answers not yet sent whole) */
    int n_cut_open;        /* REST requests answered 503 on their sockets
                              at the cut (srv_http_cut), their answers
                              written whole, not yet completed: the flush
                              gives their clients time to read and close */
    int json_log;
    struct srv_logq *logq; /* log.c: the writer thread's buffer, NULL before and after */
    srv_entry *models;     /* registry, in load order */
    oip_limits limits;
    maps_store *maps;      /* retained attention maps, NULL when off */
    struct srv_seqs *seqs; /* sequences' state (seq.c) */
    srv_req *waiters;      /* long polls on maps (maps_wait.c) */
    int n_waiters;
    uv_timer_t maps_wait_timer; /* runs while there are waiters */
    srv_http_stats http;
    /* guard.c */
    srv_conn *conns;       /* open connections; those with no request or
                              call in progress stand newest first by
                              t_wait_ns (guard.c's evict and
                              srv_conns_at_most rely on it) */
    srv_conn *conns_tail;  /* its last: the oldest end */
    int n_conns;
    int n_busy;            /* of them with a request or call in progress */
    int n_evicted;         /* since the last sweep (logged there) */
    int n_ip_refused;      /* connections past max-connections-per-ip, not
                              logged yet (a line a second at most) */
    uint64_t ip_refused_ns; /* when their last line was */
    struct sockaddr_storage ip_refused; /* the last one's address */
    struct srv_ip *ips;    /* open, not closing connections per client
                              address (max-connections-per-ip): an open-
                              addressing table, at most half full, made by
                              srv_guard_start; NULL before and after, and
                              when max-connections-per-ip is 0 */
    size_t ips_mask;       /* its slots - 1 (a power of two - 1) */
    size_t ips_used;       /* its addresses */
    uint64_t ips_seed;     /* its hash's key, random at start */
    uv_timer_t guard_timer;
    struct srv_linger *linger; /* linger.c; NULL when linger-ms is 0 */
    size_t mem_used;       /* of memory-budget */
    /* memtrim.c: freed memory back to the kernel after a burst */
    uv_timer_t trim_timer;
    uv_work_t trim_work;
    size_t mem_tick_peak;  /* the most mem_used since the last tick */
    size_t others_last;    /* retained maps' bytes at the last tick */
    size_t held_peak;      /* the most held since the last trim */
    int shed_ticks, trim_wait;
    int trimming;          /* a trim queued on the pool or running */
    uint64_t trims, trim_ns, trim_ns_total;
    uint64_t trim_checks;  /* the trim's ticks run (each reads the pools) */
    long long mem_limit;   /* memfit.c: the cgroup's memory limit, 0 = none */
    char mem_limit_file[256]; /* the file it was read from */
    struct srv_grpc *grpc; /* grpc.c, NULL when off */
    struct srv_grpc *grpc_stopping; /* after srv_grpc_stop, while some of
                                       its connections are still open */
    int grpc_port;         /* bound gRPC port */
    /* busy_poll.c */
    int pool_jobs;         /* request work queued on the pool or running */
    int cores;             /* online CPUs (main.c) */
    uv_idle_t busy_idle;   /* active: the loop polls without sleeping */
    _Atomic uint64_t busy_at; /* srv_now_ns of the last activity */
    struct srv_warm *warm; /* (threads) jobs that keep idle pool threads awake */
    int warm_live;         /* loop: warm jobs queued or running */
    int inline_last;       /* loop: the last infer request ran inline (sched.c) */
    _Atomic int warm_want; /* request work queued for warm threads to take */
    _Atomic int pool_sched_errno; /* a pool thread's SCHED_BATCH failed (-1: logged) */
    /* routes.c: maps' cells rendered on the pool, one at a time: the
     * head renders, the rest wait their turn */
    struct maps_job *maps_head, *maps_tail;
    uint64_t maps_skipped; /* renders not done: their client went first */
    uint64_t maps_cut;     /* renders stopped: their client went during */
};

/* MHD accepts this many connections past max-connections; guard.c then
 * closes the longest-waiting idle or slow one. */
#define SRV_CONN_HEADROOM 64
/* a REST connection's own state, counted against memory-budget from its
 * accept until libmicrohttpd closes it (README): MHD's memory pool (32
 * KiB, its MHD_OPTION_CONNECTION_MEMORY_LIMIT default, allocated and
 * written whole at the accept: the read buffer and the head's fields
 * live in it), its struct MHD_Connection and the srv_conn here. Measured
 * (RSS over 2000 connections): 33.6 KB a connection that sent nothing,
 * 33.6-33.7 KB one inside its head, 33.9 KB an idle keep-alive one that
 * was served; the same whatever it sends, as the pool never grows (a
 * head past it is 431). A request's srv_req and body count on their own. */
#define SRV_HTTP_CONN_COST 36864
/* REST connections may take their share up to this far past a budget that
 * bodies, requests and answers have filled (they never may), so that a
 * health probe's connection (kubelet's liveness and readiness) is served
 * while requests hold the whole budget: two connections' worth. */
#define SRV_HTTP_CONN_RESERVE (2 * SRV_HTTP_CONN_COST)

/* guard.c: connection deadlines and the memory budget (see its header).
 * srv_mem_take: reserve n bytes of memory-budget; -1 (nothing taken) when
 * they do not fit. srv_mem_take_past: the same, allowed up to `past` bytes
 * over the budget (SRV_HTTP_CONN_RESERVE). srv_mem_hold: count n bytes that exist already (an
 * encoded answer until it is sent): they may take the total past the
 * budget, and then every srv_mem_take fails until they are given back. */
int srv_mem_take(srv *s, size_t n);
int srv_mem_take_past(srv *s, size_t n, size_t past);
void srv_mem_hold(srv *s, size_t n);
void srv_mem_give(srv *s, size_t n);

/* memtrim.c: every second, K/V pages kept unused are freed and, once a
 * burst is over, malloc_trim gives what was freed back to the kernel.
 * srv_memtrim_note: bytes freed that the budget, maps and K/V counts do
 * not show (an instance's weights); any thread. */
void srv_memtrim_start(srv *s);
void srv_memtrim_stop(srv *s);
void srv_memtrim_note(size_t bytes);
/* One open connection of either door, on s->conns. */
struct srv_conn {
    int fd;
    int closing;        /* shut down by the sweep or an eviction */
    int ip_counted;     /* counted in s->ips: linked, not closing */
    int owned;          /* allocated by srv_guard_notify (a REST one) */
    int linked;         /* on s->conns */
    int grpc;           /* a gRPC connection (grpc_conn.c) */
    int calls;          /* gRPC: calls open (their HEADERS complete) */
    size_t mem;         /* REST: memory-budget it holds (SRV_HTTP_CONN_COST)
                           from its accept until MHD closes it */
    uint64_t t_wait_ns; /* since when it waits for a request head */
    uint64_t t_read_ns; /* REST: when the sweep last saw its client take
                           more of its answers (guard.c, delivering) */
    int unacked;        /* REST: their bytes its client had not
                           acknowledged then (SIOCOUTQ) */
    uint64_t rx_idle;   /* REST: bytes of its client's requests up to the
                           end of its last one: their heads and bodies
                           (srv_req.head_bytes, body_seen), or, not known,
                           all it had sent then (TCP_INFO) (guard.c,
                           head_coming) */
    struct MHD_Connection *mhd; /* REST: its libmicrohttpd connection */
    srv_req *req;       /* REST: the request being received or served */
    unsigned long long body_unread; /* REST: a Content-Length over its
                                       limit, answered 413 from the head:
                                       a lingering close reads up to it */
    int served;         /* requests (calls) it began */
    struct sockaddr_storage peer; /* its client, for max-connections-per-ip */
    /* gRPC: ends the calls whose message comes slower than min-body-rate
     * once grace has passed since its first byte; returns how many */
    int (*slow)(srv_conn *c, uint64_t now, uint64_t grace);
    /* gRPC: has it answer bytes attnd has not handed to the kernel yet
     * (libuv's write queue)? Delivering, as with bytes in SIOCOUTQ */
    int (*unsent)(const srv_conn *c);
    srv *s;             /* set by srv_guard_add */
    srv_conn *prev, *next;
};
/* srv_guard_head_coming: has REST connection c, no request in progress,
 * received bytes past its requests so far (srv_conn.rx_idle; in its
 * socket or read by libmicrohttpd with the last one, pipelined): a
 * request head partly sent? */
int srv_guard_head_coming(const srv_conn *c);
/* srv_guard_add: count c (fd set) and start its header-timeout; past
 * max-connections evict a waiting one. srv_guard_remove: c closed. */
void srv_guard_add(srv *s, srv_conn *c);
/* srv_guard_per_ip_full: a connection just accepted from peer would take
 * its address past max-connections-per-ip (both doors' connections count
 * together; the caller closes it; counted and logged by the sweep). */
int srv_guard_per_ip_full(srv *s, const struct sockaddr_storage *peer);
/* srv_guard_same_client: a and b are one client address (port aside) as
 * max-connections-per-ip counts them; 0 for a family it does not count */
int srv_guard_same_client(const struct sockaddr_storage *a,
                          const struct sockaddr_storage *b);
/* srv_guard__ip_count: peer's open, not closing connections (tests);
 * srv_guard__ip_home: the slot of s->ips its search starts at (tests force
 * collisions with it). */
long long srv_guard__ip_count(const srv *s, const struct sockaddr_storage *peer);
size_t srv_guard__ip_home(const srv *s, const struct sockaddr_storage *peer);
void srv_guard_remove(srv *s, srv_conn *c);
/* srv_guard_make_room: past max-connections, close (shutdown) the served
 * idle keep-alive connection that has waited longest, as an accept past
 * it would; 1 if one was. */
int srv_guard_make_room(srv *s);
/* srv_guard_shut_idle: the stop (srv_http_stop's wait): close (shutdown)
 * every REST connection with no request in progress whose client has
 * acknowledged every byte of its answers and sent nothing unread (an idle
 * keep-alive one): MHD would keep it open until the wait's end. How many. */
int srv_guard_shut_idle(srv *s);
/* a gRPC call's HEADERS are complete / the call is gone */
void srv_guard_call_begin(srv_conn *c);
void srv_guard_call_end(srv_conn *c);
/* srv_conns_at_most: at most max open connections that may send a request
 * soon (not a parked maps long poll, nor one idle for inline-idle-ms)? */
int srv_conns_at_most(const srv *s, int max);
void srv_guard_notify(void *cls, struct MHD_Connection *conn, void **ctx,
                      enum MHD_ConnectionNotificationCode toe);
void srv_guard_begin(srv_req *r); /* r's head arrived */
void srv_guard_end(srv_req *r);   /* r is over: the connection waits again */
/* srv_guard_start: the sweep timer and the per-address table (sized from
 * max-connections); -1 (nothing started) when the table finds no memory.
 * srv_guard_stop: forget every connection, free the table. */
int srv_guard_start(srv *s);
void srv_guard_stop(srv *s);

/* maps_wait.c: GET /v2/maps/{id}?wait=N[&version=V] (follow mode).
 * srv_maps_wait answers r at once or parks it until the map's rows differ
 * from N (or its version from V), it goes away, its client goes, or the
 * timeout (timeout_ms, at most maps-wait-ms) passes; at most
 * maps-waiters wait at once (503 past that). srv_maps_wait_drain answers
 * every waiter (SIGTERM); srv_maps_wait_cancel forgets r (completion). */
void srv_maps_wait(srv_req *r, const char *id, const char *wait,
                   const char *version, const char *timeout_ms);
void srv_maps_wait_drain(srv *s);
void srv_maps_wait_cancel(srv_req *r);

/* srv_check_stop: once draining, stop when nothing is left in flight
 * (main.c's on_stop, deferred to a timer so that it never runs inside an
 * MHD callback). Every layer whose work ends calls it; none names main.c. */
static inline void srv_check_stop(srv *s)
{
    if (s->draining && !s->stopping)
        uv_timer_start(&s->stop_timer, s->on_stop, 0, 0);
}

/* busy_poll.c: the loop polls instead of sleeping for --busy-poll-us after
 * activity (srv_busy_poll_touch: a network event, a finished pool job)
 * while the pool leaves a core free. Request work goes to the pool
 * through srv_pool_queue, and its after-work callback calls srv_pool_done
 * first. Loop thread. */
void srv_busy_poll_init(srv *s);
void srv_busy_poll_touch(srv *s);
void srv_busy_poll_close(srv *s);
void srv_busy_poll_free(srv *s);
void srv_pool_queue(srv *s, uv_work_t *w, uv_work_cb work, uv_after_work_cb done);
void srv_pool_done(srv *s);
/* srv_pool_job: a pool job begins what (for model name, may be NULL; what
 * NULL: a warm job's wait, no job) as far as a crash report goes; the
 * first call on a pool thread names it (attnd-pool). Every pool job calls
 * it first, or srv_pool_thread_enter, which calls it and, the first time
 * on a thread, makes it a SCHED_BATCH thread: request work (not loads).
 * Pool thread. */
void srv_pool_job(const char *what, const char *name);
void srv_pool_thread_enter(srv *s, const char *what, const char *name);
/* srv_spin_pause: a few microseconds of a spinning thread's wait (64 CPU
 * pause hints). Any thread. */
void srv_spin_pause(void);

/* crash.c: a report on stderr when a thread faults or aborts (see its
 * header). srv_crash_init: installs it; at start, on the loop thread,
 * after st_guard_install (whose handler it calls first).
 * srv_crash_role: how a report names this thread (a string that lasts);
 * the first call on a thread also gives it a stack for the handler and
 * unblocks the fault signals.
 * srv_crash_job: the work this thread begins (what: a string that lasts;
 * name copied, may be NULL); what NULL: none. Any thread. */
void srv_crash_init(srv *s);
void srv_crash_role(const char *role);
void srv_crash_job(const char *what, const char *name);

/* registry.c */
/* srv_registry_start: sdpa + every repo folder; -1 with err (SRV_ERRMAX). */
int srv_registry_start(srv *s, char *err);
srv_entry *srv_registry_find(srv *s, const char *name);
void srv_respond_no_model(srv_req *r, const char *name, const srv_entry *e);
void srv_inst_unref(srv_inst *in);
int srv_registry_ready(const srv *s);
void srv_registry_free(srv *s);
void srv_h_index(srv_req *r);
/* registry_queue.c: the load and unload calls, one at a time per model */
void srv_h_load(srv_req *r);
void srv_h_unload(srv_req *r);
/* srv_registry_unload_refused: r, an unload, answered (1) when
 * srv_h_unload would answer it now 400 (its name) or 404 (not loaded, no
 * load of it running), which no body changes */
int srv_registry_unload_refused(srv_req *r);
/* srv_registry_expire: the drain timeout passed: the repository calls
 * still waiting for their turn, and those that joined them, answer 503,
 * not carried out. */
void srv_registry_expire(srv *s);
/* srv_registry_waiting: e's repository calls waiting for its turn, those
 * that joined one of them included (the metrics' gauge). */
int srv_registry_waiting(const srv_entry *e);

/* sched.c */
int srv_sched_entry_init(srv_entry *e); /* its batch timer; -1 on failure */
void srv_sched_entry_free(srv_entry *e); /* after its handle was closed */
void srv_h_infer(srv_req *r);
/* srv_sched_head_refused: r answered (1) when srv_h_infer would answer it
 * now whatever its body: 400 for its Attnd-Sequence-Id, 503 for a model
 * still loading, 404 for a model neither loaded nor loading, 503 for a
 * full queue when its Attnd-Sequence-Id names its sequence, if any
 * (counted as srv_h_infer counts it; without the header the body is read:
 * its sequence_id keeps a step's sequence from the idle sweep) */
int srv_sched_head_refused(srv_req *r);
/* srv_sched_refused: infer request r is refused before its decode (503,
 * retry; 504): a step it may be still counts for its sequence's idle
 * sweep. */
void srv_sched_refused(srv_req *r);
/* srv_sched_refuse_draining: infer request r came after the signal: its
 * 503. A step of a sequence live here (its Attnd-Sequence-Id header, or
 * with body, its body's sequence_id too) is told that its sequence ends
 * with the server, where "retry on another replica" alone sends it to a
 * replica that does not know it. */
void srv_sched_refuse_draining(srv_req *r, int body);
void srv_sched_detach(srv_req *r); /* the request goes away (completion) */
/* srv_sched_client_went: r's client went while its job waits or runs
 * (guard.c's sweep): answered 499, its job dropped as at a deadline. */
void srv_sched_client_went(srv_req *r);
void srv_sched_drain(srv *s);      /* SIGTERM: flush queues now */
void srv_sched_expire(srv *s);     /* drain timeout: fail the queued */

/* metrics.c */
void srv_h_metrics(srv_req *r);
void srv_h_stats(srv_req *r);

/* routes.c */
extern const srv_route srv_routes[];
extern const size_t srv_n_routes;

/* log.c */
typedef struct srv_logq srv_logq;
int srv_log_start(srv *s); /* -1: lines stay written at once */
void srv_log_stop(srv *s); /* writes what is left, joins the writer */
uint64_t srv_log_dropped(srv *s);
/* srv_log_crash_lines: for crash.c's signal handler (no lock taken, nothing
 * written): the lines the writer has taken and not yet written whole
 * (*hand, *n_hand: from the start of the first line not written whole;
 * the writer may be writing them as the handler reads), then the lines
 * waiting for it (*queued, *n_queued); NULL, 0 when none. */
void srv_log_crash_lines(srv *s, const char **hand, size_t *n_hand,
                         const char **queued, size_t *n_queued);
void srv_log_request(srv *s, const srv_req *r);
void srv_log(srv *s, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* srv_every_due: srv_every (above), one event more; the count to log or 0. */
unsigned long long srv_every_due(srv_every *e, uint64_t now);

/* memfit.c: do the memory bounds fit the cgroup's memory limit? _start
 * reads the limit (before the startup loads) and warns when
 * --memory-budget + --maps-bytes pass it; _loaded, after entry's load,
 * warns when they with every loaded model's weights and K/V budget do.
 * Loop thread. */
void srv_memfit_start(srv *s);
void srv_memfit_loaded(srv *s, const srv_entry *entry);

/* text.c: for the request path, without printf's format machinery
 * (~1,000 instructions a call): srv_copy puts src in dst (cap bytes), cut
 * to fit and terminated, as snprintf "%s" does; srv_fmt_u writes v in
 * decimal at the end of d and returns where its digits start
 * (terminated). Any thread. */
void srv_copy(char *dst, size_t cap, const char *src);
const char *srv_fmt_u(char d[24], unsigned long long v);

/* http.c */
int srv_http_start(srv *s, char *err); /* -1 with err (SRV_ERRMAX) */
/* srv_http_stop: close the listener and every REST connection: at once
 * those whose clients have acknowledged every byte of their answers
 * (idle ones); the others, MHD's and the lingering ones (linger.c), once
 * they have, their client closes, or ms (the flush's time left) have
 * passed (MHD shuts its connections down both ways when it stops: a byte
 * the client sends after that, a request pipelined as it reads, is
 * answered with a reset, which drops the rest of the answers the kernel
 * still held). A request read meanwhile is answered 503 from its head,
 * Connection: close (http_head.c). 1 when some are left open: done(s)
 * runs once the last of them has closed; 0 when none are.
 * gRPC sockets lingering since before the stop (linger.c) wait with them,
 * and count as gRPC's. srv_http_stop_cut: close them at once (a signal
 * during the stop); how many REST ones were still open with answers not
 * taken, *heads the REST ones whose request head had not come whole
 * (srv_guard_head_coming), *grpc the lingering gRPC ones. */
int srv_http_stop(srv *s, uint64_t ms, void (*done)(srv *));
int srv_http_stop_cut(srv *s, int *grpc, int *heads);
/* srv_http_cut: the drain was cut short: each REST request whose body is
 * still coming is answered 503 on its socket at once (http_answer.c). */
void srv_http_cut(srv *s);
/* srv_http_log_flush: log how often each of libmicrohttpd's last messages
 * came again unlogged, once a second has passed since its line (now_too:
 * at once). Loop thread (guard.c's sweep; at stop). */
void srv_http_log_flush(srv *s, int now_too);

/* healthcheck.c */
int srv_health_check(const char *url, char *err); /* err: SRV_ERRMAX */

#endif
