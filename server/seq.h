/*
 * seq.h - sequences: the keys and values a decoder's sequence keeps in the
 * server between its steps (API extension `sequences`, Triton's
 * sequence_id / sequence_start / sequence_end).
 *
 * Who does what:
 *   core/kv.h     the pages of one sequence's cache and the pool (per
 *                 weight-set instance, --kv-bytes) they come from;
 *   seq_prep.c    pool side: check a step request and lay it out, encode
 *                 its answer (sequence_length, the growing map);
 *   seq.c         loop side: ids, the order of steps, start / end /
 *                 restart, reserve-advance-trim around each step;
 *   seq_drops.c   loop side: drops on unload, DELETE and idle expiry, the
 *                 sequences remembered as gone, the listing, set-up;
 *   seq_int.h     the table the two share;
 *   seq_http.c    GET /v2/sequences[/{id}], DELETE /v2/sequences/{id},
 *                 metrics.
 *
 * The life of a step (every infer job carries an srv_step; only the ones
 * whose request names a sequence become steps):
 *   arrive     srv_h_infer: the job gets an arrival ticket and joins the
 *              list of jobs being decoded (requests decode in parallel on
 *              the pool and finish in any order);
 *   held       decoded: a step waits until no job that arrived before it is
 *              still decoding, so steps leave in arrival order;
 *   waiting    in its sequence's queue, behind that sequence's earlier
 *              steps (one step of a sequence is in a batch at a time);
 *   active     checked against the sequence (unknown id, max-sequences,
 *              a sequence_position past its length), put on its model's
 *              queue; at launch (srv_seq_bind) a step at a position other
 *              than the length (below it) rewinds the cache to it (the
 *              rows it replaces saved), its pages are reserved and the
 *              outputs that depend on the sequence length allocated; it
 *              batches with anything;
 *   end        srv_seq_step_end from job_end: answered 200 -> the cache
 *              advances (a start replaces the old cache, an end frees
 *              it, a rewound one gives back the pages past its new end);
 *              a sequence that ends or is dropped is remembered without
 *              its cache (a tombstone) so that a later step is told how
 *              it went;
 *              anything else -> the replaced rows go back, then the
 *              reserved pages (attn_kv_trim): the sequence is exactly as
 *              before.
 *
 * Threads: everything here runs on the loop thread, except that
 * srv_seq_prepare and srv_seq_encode run on a pool thread on their own job
 * (they touch only the step's fields that the loop leaves alone then).
 */
#ifndef ATTND_SEQ_H
#define ATTND_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/kv.h"
#include "server/infer.h"
#include "server/srv.h"

typedef struct srv_seq srv_seq;   /* one sequence id (seq_int.h) */
typedef struct srv_seqs srv_seqs; /* the server's sequences (seq_int.h) */

enum {
    SRV_STEP_NONE = 0, /* not (or no longer) in any list */
    SRV_STEP_DECODING, /* in the decoding list */
    SRV_STEP_HELD,     /* decoded, waiting for earlier arrivals */
    SRV_STEP_WAITING,  /* in its sequence's queue */
    SRV_STEP_ACTIVE,   /* the sequence's step on the model queue or running */
};

/* One infer job's sequence state; embedded in the job, zeroed with it. */
typedef struct srv_step {
    srv_job *job;
    srv_entry *e;            /* the job's model */
    srv_inst *inst;          /* the job's instance (the job holds the ref) */
    srv_prep *prep;          /* the job's laid-out request */
    const oip_request *in;   /* the job's decoded request */
    uint64_t ticket;         /* arrival order */
    uint64_t t_head;         /* its request's head came (REST; gRPC: its
                                message's first byte): the idle sweep's
                                step time */
    int where;               /* SRV_STEP_* */
    /* set by srv_seq_prepare (pool), read by the loop afterwards */
    int is_step;
    char hdr_id[OIP_MAX_SEQ_ID]; /* Attnd-Sequence-Id header, "" = none */
    int grpc;                /* came by the gRPC door (its header is the
                                attnd-sequence-id metadata) */
    char id[OIP_MAX_SEQ_ID];
    int start, end, retain;
    int has_pos, pos;        /* parameters.sequence_position */
    /* set on the loop when the step becomes active / is bound */
    srv_seq *seq;
    attn_kv fresh;           /* a start's new cache */
    attn_kv *kv;             /* the cache this step writes */
    int bound;               /* pages reserved, outputs allocated */
    int t;                   /* new tokens (kept past the prep's free) */
    int starting;            /* counted in n_starting (a new sequence) */
    int t0;                  /* tokens held before this step */
    attn_kv_undo undo;       /* a rewound step's rewind (bound) */
    void *saved;             /* the rows it replaces, as stored */
    char map_id[MAPS_ID_MAX]; /* the sequence's map; after encode, its id */
    int map_scores;          /* the map keeps scores (a start: after encode,
                                it asked for them and kept them) */
    atomic_int late;         /* answered 504 or its client gone (loop):
                                its encoding (pool) grows no map */
    maps_grown *grown;       /* its encoding's (pool) grown map, put in
                                the store once it is answered (loop) */
    int map_ends;            /* its encoding could not grow the map (too
                                big for maps-bytes or the labels' cap, out
                                of memory): the map ends once the step is
                                answered, and the log says why */
    char map_end_why[160];
    struct srv_step *prev, *next;
} srv_step;

/* seq.c and seq_drops.c (loop thread) */
int srv_seq_init(srv *s);  /* the table and the idle timer; -1 on failure */
void srv_seq_stop(srv *s); /* close the idle timer, log the live ones (stopping) */
void srv_seq_free(srv *s); /* every sequence's pages back; after the loop */
/* srv_seq_arrive: a new infer job (ticket, decoding list). */
void srv_seq_arrive(srv *s, srv_step *st);
/* srv_seq_decoded: st's job finished decoding; take != 0 when it is a good
 * step (the job is then the sequence machinery's until it is queued or
 * failed); a step not taken (failed after its decode, its check or, with
 * the Attnd-Sequence-Id header, its decode) still counts as a step of its
 * live sequence for the idle sweep. Releases the held steps
 * that may go. */
void srv_seq_decoded(srv *s, srv_step *st, int take);
/* srv_seq_touch: a step of sequence id failed before its turn (after its
 * decode, or refused before it: the id from its Attnd-Sequence-Id header
 * or read off its body, sched.c): its live sequence is not idle (a step
 * counts whatever its answer). */
void srv_seq_touch(srv *s, const char *id);
/* srv_seq_live: is sequence id live here (not being dropped)? */
int srv_seq_live(srv *s, const char *id);
/* srv_seq_check_failed: st's request names sequence st->id (not as a
 * start) and failed its check on the pool (srv_seq_prepare's err, e.g. an
 * x of the shape of a model since replaced). When that sequence is
 * remembered as gone (ended, or dropped: deleted, idle, its model
 * reloaded) msg (n bytes) is the 400 that says how it went, err after it:
 * the client must start again whatever it fixes, and err alone would not
 * tell it. Returns that status, or 0 (msg untouched) otherwise, and
 * while a step that may make it live again is on its way: in its queue,
 * a held step of that id, or any request that arrived before st still
 * decoding (the plain check error then). */
int srv_seq_check_failed(srv *s, const srv_step *st, const char *err,
                         char *msg, size_t n);
/* srv_seq_abandon: st's job was answered (deadline) or lost its client
 * while decoding: it will never be a step, so the steps that arrived after
 * it need not wait for its decode. */
void srv_seq_abandon(srv *s, srv_step *st);
/* srv_seq_bind: at launch, before the plan: reserve st's pages and
 * allocate its sequence-length outputs. *mem is the job's share of
 * memory-budget (its decoded request and outputs so far): it becomes what
 * the step holds (with its attention, scores and the rows it replaces).
 * 0, or an HTTP status with err (nothing reserved then, *mem as it was). */
int srv_seq_bind(srv_step *st, size_t *mem, char *err);
/* srv_seq_step_end: st's job ends; ok = it was answered 200. */
void srv_seq_step_end(srv_step *st, int ok);
/* srv_seq_expire: drain timeout: fail every held or waiting step. */
void srv_seq_expire(srv *s);
/* srv_seq_drop_model: e's instance changes (unload, reload): its sequences
 * are dropped ("unloaded"). */
void srv_seq_drop_model(srv_entry *e);
/* srv_seq_delete: DELETE /v2/sequences/{id}: 0, or -1 when not live (nor
 * when already being dropped behind its running step: the first reason
 * stands, this DELETE would drop nothing; srv_seq_get says how it went). */
int srv_seq_delete(srv *s, const char *id, char *model_out);

/* One live sequence for listings. */
typedef struct srv_seq_info {
    char id[OIP_MAX_SEQ_ID];
    char model[SRV_NAME_MAX];
    int length;
    size_t bytes;
    uint64_t idle_ms;       /* since its last step ended (0 while one runs) */
    uint64_t idle_limit_ms; /* sequence-idle-ms: dropped once idle_ms reaches it */
    uint64_t idle_sweep_ms; /* the idle sweep's period: dropped at the sweep
                               after idle_ms reaches the limit */
    char map_id[MAPS_ID_MAX];
} srv_seq_info;
/* srv_seq_get: live sequence id's info (0), or -1 with msg saying how it
 * went (remembered) or that it is unknown. */
int srv_seq_get(srv *s, const char *id, srv_seq_info *out, char *msg, size_t n);
/* srv_seq_list: up to cap live sequences; returns the number of live ones
 * (may exceed cap). */
size_t srv_seq_list(srv *s, srv_seq_info *out, size_t cap);

/* sched.c hooks the sequence machinery calls (loop thread). */
void srv__sched_queue(srv_job *j);                   /* onto its model queue */
void srv__sched_fail(srv_job *j, int status, const char *msg); /* answer, end */

/* seq_prep.c (pool thread, the job's own data) */
/* srv_seq_wants: does req (with st->hdr_id) name a sequence? */
int srv_seq_wants(const srv_step *st, const oip_request *req);
/* srv_seq_prepare: check a step request against its model and lay it out
 * (y and q allocated; attention/scores wait for srv_seq_bind). 0 or an
 * HTTP status with err. */
int srv_seq_prepare(srv_step *st, srv_prep *p, const oip_request *req,
                    const char *model_name, const attn_config *cfg,
                    int causal, int builtin, const srv_infer_limits *lim,
                    char *err);
/* srv_seq_alloc_maps: (loop, at bind) attention/scores for s keys, within
 * memory with kept bytes already taken (a rewound step's saved rows):
 * attention when asked for or retain (the step starts or grows a map),
 * scores when asked for or retain_scores (the map it grows keeps them). */
int srv_seq_alloc_maps(srv_prep *p, const oip_request *req, int s, size_t kept,
                       int retain, int retain_scores, size_t memory, char *err);
/* srv_seq_map_bytes: (after bind) the bytes of the map st's encoding
 * writes: a retained sequence's whole map, copied to grow it; 0 for none,
 * SIZE_MAX past size_t. */
size_t srv_seq_map_bytes(const srv_step *st);
/* srv_seq_encode: a computed step's answer: its outputs, parameters
 * sequence_length and (retained) map_id; grows or starts the map. */
int srv_seq_encode(srv_step *st, const char *model_name, maps_store *maps,
                   oip_encode_fn *enc, char **body, size_t *len,
                   size_t *header_len, char *err);

/* seq_http.c */
void srv_seq_h_list(srv_req *r);
void srv_seq_h_get(srv_req *r);
void srv_seq_h_delete(srv_req *r);
char *srv_seq_metrics_text(srv *s); /* malloc'd Prometheus text, or NULL */

#endif
