/*
 * sched_int.h - internal to sched.c (a request's life) and batch.c (its
 * batch): the job, and the calls one makes of the other. Loop thread,
 * except srv__job_encode (the pool thread that owns the job).
 */
#ifndef ATTND_SCHED_INT_H
#define ATTND_SCHED_INT_H

#include <stdint.h>

#include "server/infer.h"
#include "server/seq.h"
#include "server/srv.h"

/* J_HELD: a sequence step waiting for its turn (seq.c's lists). */
enum { J_DECODE, J_HELD, J_QUEUED, J_RUN, J_DONE };

struct srv_job {
    srv *s;
    srv_req *req;      /* NULL once answered early or gone */
    srv_entry *e;
    srv_inst *inst;    /* reference held by the job */
    char *body;        /* request body, freed after decode */
    size_t len, header_len;
    size_t mem;        /* bytes it holds of memory-budget (guard.c) */
    int state;
    uv_work_t work;
    uv_timer_t deadline;
    oip_request in;
    srv_prep prep;
    int status;        /* error status from the pool, 0 = fine */
    char err[OIP_ERRMAX];
    char *resp;
    size_t resp_len, resp_hlen;
    char map_id[MAPS_ID_MAX]; /* its retained map, "" = none (the pool
                               * thread that encodes it writes it): dropped
                               * at its end unless it was answered 200 */
    int batch;         /* sequences in its batch */
    int seqs;          /* its own sequences (rows of x's batch) */
    int item0;         /* its first sequence's index in its batch's plan */
    int solo;          /* 1: decode+compute+encode in one pool job */
    int solo_ran;      /* solo job computed and encoded it */
    int solo_pooled;   /* loop: a solo job on the pool (solo_work to
                        * solo_done): its t_queued, t_run, t_ran, batch and
                        * seqs are that thread's until then */
    int undecoded;     /* answered before a pool thread took its body: not
                        * decoded (decode_job) */
    int solo_over;     /* solo beyond the model's instances (unbatched) */
    int inline_batch;  /* a lone client's step: its batch may run on the
                          loop, inside srv_h_infer (batch.c) */
    char id[OIP_MAX_ID]; /* the request's id for the log (solo_ran) */
    uint64_t t_arrive, t_queued, t_run, t_ran, decode_ns, encode_ns;
    uint64_t t_admit;  /* its deadline counts from here: its body whole */
    const srv_door *door; /* wire format, NULL = JSON (srv.h) */
    long long deadline_ms;
    int answered;      /* status its request was answered with, 0 = none */
    struct batch *in_batch; /* the tiled batch it runs in (J_RUN), or NULL */
    srv_step step;     /* sequence state (seq.h) */
    srv_job *next;     /* queue link */
};

/* Below this many flops (attn_plan_flops) a batch runs as one pool work
 * item (all stages, then the encoding of its requests): spreading a small
 * batch over the pool, stage by stage through the loop thread, costs more
 * hand-offs than it saves (demo T=16 is 0.6 MFLOP). */
#define SMALL_BATCH_FLOPS 8e6
/* An inline request's outputs are at most this long: their encoding holds
 * the loop (~6 ns a float). */
#define INLINE_OUT_BYTES (64u << 10)
/* The map an inline sequence step grows is at most this long: it is
 * copied whole every step (memcpy's rate, ~100 us a MiB here). */
#define INLINE_MAP_BYTES (1u << 20)

/* srv__job_answer: give the job's request its answer and detach it. */
void srv__job_answer(srv_job *j, int status, const char *msg);
/* srv__job_end: the pipeline is over (answers 500 if nothing did). */
void srv__job_end(srv_job *j);
/* srv__batch_job_gone: j's request went (deadline answered, client gone)
 * while j runs: when no job of its batch is left to answer and none is a
 * sequence step, the batch's remaining tiles are skipped. */
void srv__batch_job_gone(srv_job *j);
/* srv__job_late: run on the loop (inline), where its deadline timer could
 * not fire: past the deadline, the job's request is answered 504 now. */
void srv__job_late(srv_job *j);
/* srv__alone: the request being handled is the only one in progress and
 * its connection the only one open (a page's long poll on a map aside):
 * the sequence steps expected can only be its client's own, which cannot
 * come before its answer. */
int srv__alone(const srv *s);
/* srv__job_enqueue: j (decoded, j->e set) at the end of its model's
 * queue, its sequences counted in e->q_seqs. Loop thread. */
void srv__job_enqueue(srv_job *j);
/* srv__job_unqueue: take a queued job out of its model's queue. */
void srv__job_unqueue(srv_job *j);
/* srv__job_nonfinite: j's 400 for its sequence n, whose projections,
 * scores or output came out non-finite (pool thread, before encoding).
 * A step into FP16 K/V pages (--kv-dtype f16) may have passed FP16's
 * 65504 with inputs far inside float32's range, one into BF16 pages
 * 3.3962e38 (rounded to infinity, below FLT_MAX); its text says so. */
void srv__job_nonfinite(srv_job *j, int n);
/* srv__job_encode: the response of a computed job (pool thread). */
void srv__job_encode(srv_job *j);
/* srv__sched_expire_queue: the drain was cut short: e's queued requests
 * answer 503 (none of them starts). */
void srv__sched_expire_queue(srv_entry *e);
/* srv__pump: start batches while e may run more and its queue is ready. */
void srv__pump(srv_entry *e);
/* srv__pump_soon: pump e in the loop's next turn (not inside the caller). */
void srv__pump_soon(srv_entry *e);

#endif
