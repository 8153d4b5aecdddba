/*
 * sched.c - the life of an infer request, on the loop thread.
 *
 *   admit (queue bound, deadline timer) -> decode+check on the pool ->
 *   model queue -> batch (max_batch sequences, or the oldest waited
 *   batch_delay_us) -> the batch (batch.c: its attn_plan stage by stage on
 *   the pool) -> encode on the pool -> answer.
 *
 * Solo: a request that finds its model's queue empty and an instance free
 * (and no batch delay to wait for company) is decoded, computed and encoded
 * by one pool job: one loop <-> pool hand-off instead of two. It holds an
 * instance from admission, so requests arriving meanwhile queue and batch
 * as above, unless the model is unbatched (weights under solo-max-weights:
 * a batch would save less than its hand-offs cost), whose requests run
 * solo beyond its instances while its queue is empty; when one turns out
 * too large for one job (SMALL_BATCH_FLOPS) it joins the queue after its
 * decode like any other request.
 *
 * Inline: while at most --inline-conns connections are open (1: a lone
 * client; a page following a map in a long poll is not counted, nor a
 * connection idle for --inline-idle-ms, srv_conns_at_most) and no
 * other request is in progress (a gRPC connection's concurrent streams go
 * to the pool), a solo request runs on the loop
 * thread itself, inside its handler: no hand-off at all, and its
 * connection is never suspended, so the answer goes out in the same
 * MHD_run. Nothing else is waiting on the loop then, and the bounds of a
 * solo job (body, plan) and INLINE_OUT_BYTES keep it short. It leaves the
 * same way a solo job does (too large: it queues, and its connection is
 * suspended then). A sequence step leaves after its decode too, but its
 * turn comes at once (no other request is in progress), and its batch of
 * one, when small, runs inline as well (batch.c, j->inline_batch). The
 * steps a lone client's own sequences are expected to send do not hold
 * its requests back (solo_ok). The deadline timer cannot fire meanwhile:
 * the deadline is checked when the work is done (srv__job_late).
 *
 * A job is freed when its pipeline is over and its HTTP request is gone or
 * answered; a deadline answers 504 at once and detaches the request, the
 * pipeline then ends on its own (a queued job leaves the queue at once; a
 * running batch is never interrupted inside a tile, but one left with no
 * request to answer and no sequence step skips its remaining tiles:
 * batch.c, srv__batch_job_gone).
 */
#include "server/srv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/infer.h"
#include "server/sched_int.h"
#include "server/seq.h"

/* A solo job's body is at most this long: a longer one would hold an
 * instance through a long decode. */
#define SOLO_BODY_BYTES (64u << 10)


static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- answering and ending ------------------------------------------------ */

/* count_failure: j's request failed with status (not 200), dt ns after it
 * arrived: its model's failure by reason (400, 409 and 413 bad_request, 503
 * rejected, 504 timeout, anything else, a client that went among them,
 * other) and the statistics' fail duration. */
static void count_failure(srv_job *j, int status, uint64_t dt)
{
    srv_stats *st = &j->e->stats;
    st->fail_ns += dt;
    if (status == 400 || status == 409 || status == 413)
        st->fail_bad++;
    else if (status == 503)
        st->fail_rejected++;
    else if (status == 504)
        st->fail_timeout++;
    else
        st->fail_other++;
}

/* answer: give the job's request its answer and detach it. */
void srv__job_answer(srv_job *j, int status, const char *msg)
{
    srv_req *r = j->req;
    srv_stats *st = &j->e->stats;
    uint64_t dt = srv_now_ns() - j->t_arrive;
    if (!r)
        return;
    j->answered = status;
    r->job = NULL;
    j->req = NULL;
    /* a solo job's pool thread writes its times and batch while it runs
     * (solo_run): answered meanwhile (a deadline, a client that went), it
     * has neither queued nor run as far as the log knows */
    if (!j->solo_pooled) {
        r->batch = j->batch;
        if (j->t_run)
            r->queue_us = (j->t_run - j->t_queued) / 1000;
        else if (j->t_queued) /* still queued (deadline, drain timeout) */
            r->queue_us = (srv_now_ns() - j->t_queued) / 1000;
        if (j->t_ran)
            r->compute_us = (j->t_ran - j->t_run) / 1000;
    }
    if (status == 200) {
        r->resp_header_len = j->resp_hlen;
        r->changed = j->step.is_step;
        srv_respond(r, 200, j->resp_hlen ? "application/octet-stream"
                                         : "application/json",
                    j->resp, j->resp_len);
        j->resp = NULL;
        st->success++;
        st->success_ns += dt;
        st->queue_ns += j->t_run - j->t_queued;
        st->input_ns += j->decode_ns;
        st->output_ns += j->encode_ns;
        if (j->t_ran > j->t_run) /* its batch's compute, shared or not */
            st->req_infer_ns += j->t_ran - j->t_run;
        st->last_inference_ms = wall_ms();
        return;
    }
    srv_respond_error(r, status, "%s", msg);
    count_failure(j, status, dt);
}

static void job_closed(uv_handle_t *h)
{
    srv_job *j = h->data;
    srv *s = j->s;
    free(j);
    s->live_jobs--;
    srv_check_stop(s);
}

/* job_end: the pipeline is over (any encoding of it done). Loop thread. */
void srv__job_end(srv_job *j)
{
    srv_entry *e = j->e;
    if (j->req)
        srv__job_answer(j, 500, "internal: request ended without an answer");
    srv_seq_step_end(&j->step, j->answered == 200);
    /* a map whose id no answer carried (a deadline or a client gone while
     * it ran, an answer other than its encoding's) leaves the store, as a
     * failed sequence start's does (seq.c): no one can read it, and it
     * would hold maps-bytes and evict others' maps */
    if (j->map_id[0] && j->answered != 200)
        maps_drop(j->s->maps, j->map_id);
    j->state = J_DONE;
    e->pending--;
    srv_inst_unref(j->inst);
    oip_request_free(&j->in);
    srv_prep_free(&j->prep);
    free(j->body);
    free(j->resp);
    srv_mem_give(j->s, j->mem);
    j->mem = 0;
    uv_timer_stop(&j->deadline);
    uv_close((uv_handle_t *)&j->deadline, job_closed);
}

/* unqueue: take queued job j out of its model's queue. Loop thread. */
void srv__job_unqueue(srv_job *j)
{
    srv_entry *e = j->e;
    srv_job **pp, *prev = NULL;
    for (pp = &e->qhead; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            if (e->qtail == j)
                e->qtail = prev;
            break;
        }
    e->q_seqs -= j->prep.n;
    j->next = NULL;
}

/* cut: j's request was answered early (a deadline, a client that went) or
 * is gone: its pipeline ends on its own, without it. A queued or held job
 * ends now; one being decoded lets the steps after it go (seq.c); a
 * running one's batch skips its rest when no one else waits for it
 * (batch.c); a step answered so grows no map and leaves its K/V as they
 * were. */
static void cut(srv_job *j)
{
    atomic_store(&j->step.late, 1);
    if (j->state == J_QUEUED) {
        srv__job_unqueue(j);
        srv__job_end(j);
    } else if (j->state == J_HELD) {
        srv__job_end(j);
    } else if (j->state == J_DECODE) {
        srv_seq_abandon(j->s, &j->step);
    } else if (j->state == J_RUN) {
        srv__batch_job_gone(j);
    }
}

static void on_deadline(uv_timer_t *t)
{
    srv_job *j = t->data;
    char msg[160];
    snprintf(msg, sizeof msg, "deadline: no answer within %lld ms (%s)",
             j->deadline_ms, j->deadline_ms < j->s->cfg.deadline_ms
                                 ? "the client's deadline" : "deadline-ms");
    srv__job_answer(j, 504, msg);
    cut(j);
}

void srv__job_late(srv_job *j)
{
    if (j->req && srv_now_ns() - j->t_admit >= (uint64_t)j->deadline_ms * 1000000u)
        on_deadline(&j->deadline);
}

/* srv_sched_detach: r is being freed while its job runs, unanswered (its
 * gRPC call was cancelled, its connection went away): the job finishes
 * without it. Its request failed as one whose client went (499) does. */
void srv_sched_detach(srv_req *r)
{
    srv_job *j = r->job;
    r->job = NULL;
    j->req = NULL;
    count_failure(j, 499, srv_now_ns() - j->t_arrive);
    cut(j);
}

void srv_sched_client_went(srv_req *r)
{
    srv_job *j = r->job;
    r->went = 1; /* logged and counted 499 (http.c), as nginx logs it */
    srv__job_answer(j, 499, "client: closed its connection before the answer");
    cut(j);
}

/* ---- encode --------------------------------------------------------------- */

/* encode_job: the response of a computed job, unless check_finite already
 * turned it into a 400. Pool thread. */
void srv__job_encode(srv_job *j)
{
    uint64_t t0 = srv_now_ns();
    if (!j->status && j->step.is_step)
        j->status = srv_seq_encode(&j->step, j->e->name, j->s->maps,
                                   j->door ? j->door->encode : NULL, &j->resp,
                                   &j->resp_len, &j->resp_hlen, j->err);
    else if (!j->status)
        j->status = srv_infer_encode(&j->prep, &j->in, j->e->name,
                                     j->inst->grams, j->s->maps,
                                     j->door ? j->door->encode : NULL,
                                     &j->resp, &j->resp_len, &j->resp_hlen,
                                     j->map_id, j->err);
    srv_prep_free(&j->prep);
    oip_request_free(&j->in);
    j->encode_ns = srv_now_ns() - t0;
}


/* ---- admission and decode ------------------------------------------------- */

/* decode_job: decodes the body (then frees it) and checks and lays out
 * the request for its model; sets j->status on failure. A pool thread, or
 * the loop for an inline request. */
static void decode_job(srv_job *j)
{
    srv *s = j->s;
    uint64_t t0 = srv_now_ns();
    srv_infer_limits lim = {(size_t)s->cfg.request_memory, s->cfg.max_tokens,
                            s->maps};
    int rc;
    if (atomic_load(&j->step.late)) {
        /* answered already (its deadline, its client gone) while it waited
         * for a pool thread: a body no one will see the answer to is not
         * decoded; decoded() ends the job (a status, no request: nothing
         * more is said) */
        free(j->body);
        j->body = NULL;
        j->undecoded = 1;
        j->status = 499;
        return;
    }
    rc = (j->door ? j->door->decode : oip_decode)(
        &j->in, j->body, j->len, j->header_len, &s->limits, j->err);
    free(j->body);
    j->body = NULL;
    if (rc < 0) {
        /* ATTN_EFULL: over request-memory, as a request's outputs are */
        j->status = rc == ATTN_ENOMEM ? 503 : rc == ATTN_EFULL ? 413 : 400;
        if (rc == ATTN_EFULL && strlen(j->err) + 20 < sizeof j->err)
            strcat(j->err, " (request-memory)");
    } else if (srv_seq_wants(&j->step, &j->in)) {
        j->status = srv_seq_prepare(&j->step, &j->prep, &j->in, j->e->name,
                                    j->inst->builtin ? NULL : model_config(j->inst->m),
                                    j->inst->builtin ? 0 : model_causal(j->inst->m),
                                    j->inst->builtin, &lim, j->err);
        if (j->status)
            srv_prep_free(&j->prep);
    } else if (j->inst->builtin) {
        j->status = srv_infer_prepare(&j->prep, &j->in, j->e->name, NULL, 0, 1,
                                      &lim, j->err);
    } else {
        j->status = srv_infer_prepare(&j->prep, &j->in, j->e->name,
                                      model_config(j->inst->m),
                                      model_causal(j->inst->m), 0, &lim, j->err);
    }
    j->decode_ns = srv_now_ns() - t0;
}

/* decode_work: pool thread. */
static void decode_work(uv_work_t *w)
{
    srv_job *j = w->data;
    srv_pool_thread_enter(j->s, "decoding a request", j->e->name);
    decode_job(j);
}

/* srv__job_enqueue: j at the end of its model's queue. Loop thread. */
void srv__job_enqueue(srv_job *j)
{
    srv_entry *e = j->e;
    j->state = J_QUEUED;
    j->t_queued = srv_now_ns();
    j->next = NULL;
    if (e->qtail)
        e->qtail->next = j;
    else
        e->qhead = j;
    e->qtail = j;
    e->q_seqs += j->prep.n;
}

/* decoded: loop thread. Answers a failed or abandoned request and ends
 * its job; otherwise appends it to the model's queue and pumps. */
static void decoded(srv_job *j)
{
    srv_entry *e = j->e;
    e->stats.undecoded += (uint64_t)j->undecoded;
    if (j->req && j->in.id)
        srv_copy(j->req->id, sizeof j->req->id, j->in.id);
    if (!j->status && j->req) {
        /* the body is gone: the decoded request and its outputs are held
         * now (a step's attention and scores join them at its turn,
         * srv_seq_bind, when their size is known) */
        srv_mem_give(j->s, j->mem);
        j->mem = 0;
        if (srv_mem_take(j->s, j->in.bytes + j->prep.bytes + j->prep.extra) < 0) {
            snprintf(j->err, sizeof j->err, "server: the memory for decoded "
                     "requests and unsent answers (%lld bytes, memory-budget) "
                     "is in use; retry shortly", j->s->cfg.memory_budget);
            j->status = 503;
        } else {
            j->mem = j->in.bytes + j->prep.bytes + j->prep.extra;
        }
    }
    if (!j->status && j->req && j->step.is_step) {
        j->state = J_HELD; /* a sequence step: seq.c queues it in its turn */
        srv_seq_decoded(j->s, &j->step, 1);
        return;
    }
    srv_seq_decoded(j->s, &j->step, 0);
    if (j->status || !j->req) {
        /* a step whose sequence is gone is told so first (its check ran
         * on the pool, which cannot see the sequence table) */
        char gone[512 + OIP_ERRMAX];
        int st = j->status && j->req
                     ? srv_seq_check_failed(j->s, &j->step, j->err, gone,
                                            sizeof gone) : 0;
        if (st) {
            j->status = st;
            srv__job_answer(j, st, gone);
            srv__job_end(j);
            return;
        }
        srv__job_answer(j, j->status ? j->status : 500, j->err);
        srv__job_end(j);
        return;
    }
    srv__job_enqueue(j);
    srv__pump(e);
}

static void decode_done(uv_work_t *w, int status)
{
    srv_job *j = w->data;
    (void)status;
    srv_pool_done(j->s);
    decoded(j);
}

/* solo_run: decode_job, then, when the request is small enough for one
 * job (a plan under SMALL_BATCH_FLOPS, outputs of at most max_out bytes),
 * its plan, every stage, the finite check and the encoding, all on this
 * thread (j->solo_ran). A pool thread, or the loop (inline). */
static void solo_run(srv_job *j, size_t max_out)
{
    attn_plan *plan = NULL;
    char err[ATTN_ERRMAX];
    int rc, st, n;
    decode_job(j);
    if (j->status || j->step.is_step) /* a step takes its turn (seq.c) */
        return;
    if (j->prep.bytes > max_out)
        return;
    if (j->prep.raw)
        rc = attn_plan_create_raw(&plan, &j->prep.cfg, j->prep.raws, j->prep.n, err);
    else
        rc = attn_plan_create(&plan, model_config(j->inst->m),
                              model_weights(j->inst->m), j->prep.seqs, j->prep.n, err);
    if (rc < 0) /* the batch path reports it */
        return;
    if (attn_plan_flops(plan) >= SMALL_BATCH_FLOPS) {
        attn_plan_destroy(plan);
        return;
    }
    j->t_queued = j->t_run = srv_now_ns();
    for (st = 0; st < attn_plan_n_stages(plan); st++) {
        size_t t, nt = attn_plan_n_tiles(plan, st);
        for (t = 0; t < nt; t++)
            attn_plan_run_tile(plan, st, t);
    }
    j->t_ran = srv_now_ns();
    for (n = 0; n < j->prep.n; n++)
        if (attn_plan_nonfinite(plan, n)) {
            srv__job_nonfinite(j, n);
            break;
        }
    attn_plan_destroy(plan);
    j->batch = j->seqs = j->prep.n;
    if (j->in.id) /* the log's copy: encoding frees the request */
        srv_copy(j->id, sizeof j->id, j->in.id);
    srv__job_encode(j);
    j->solo_ran = 1;
}

/* solo_work: pool thread. */
static void solo_work(uv_work_t *w)
{
    srv_job *j = w->data;
    srv_pool_thread_enter(j->s, "running a request", j->e->name);
    /* one beyond the model's instances keeps to small outputs: its
     * decoded request and outputs are not counted against memory-budget
     * (larger ones go back through decoded(), which counts them) */
    solo_run(j, j->solo_over ? INLINE_OUT_BYTES : SIZE_MAX);
}

/* solo_finish: loop thread. Gives the instance back; a computed job is
 * answered, a failed or abandoned one too, and one too large for a solo
 * run joins the queue as a decoded request does. */
static void solo_finish(srv_job *j)
{
    srv_entry *e = j->e;
    e->running--;
    if (j->solo_ran) {
        srv_stats_batch(&e->stats, j->batch, j->status ? 0 : j->seqs,
                        j->t_ran - j->t_run);
        if (j->req)
            memcpy(j->req->id, j->id, sizeof j->id);
        srv__job_answer(j, j->status ? j->status : 200, j->err);
        srv__job_end(j);
        srv__pump(e);
        return;
    }
    decoded(j);
    srv__pump(e); /* the instance it held is free (decoded pumps only when it
                queued) */
}

/* solo_done: loop thread, after solo_work. */
static void solo_done(uv_work_t *w, int status)
{
    srv_job *j = w->data;
    (void)status;
    srv_pool_done(j->s);
    j->solo_pooled = 0;
    solo_finish(j);
}

/* lone: at most conns connections that may send a request soon
 * (srv_conns_at_most) and no other request in progress, a page's long
 * poll on a map aside (it sends nothing until answered) */
static int lone(const srv *s, int conns)
{
    return s->live_reqs - s->n_waiters <= 1 && srv_conns_at_most(s, conns);
}

int srv__alone(const srv *s) { return lone(s, 1); }

/* unbatched: are e's weights small enough (solo-max-weights; the
 * built-in sdpa has none) that a batch would save less by reading them
 * once than its extra hand-offs cost? Loop thread. */
static int unbatched(const srv_entry *e)
{
    long long max = e->s->cfg.solo_max_weights;
    return max > 0 && (e->inst->builtin || model_bytes(e->inst->m) <= (size_t)max);
}

/* solo_ok: may a job of len body bytes for e run solo? Not while requests
 * queue for a batch, nor, unless e is unbatched, while every instance is
 * busy (those that come meanwhile queue and batch). A request waits for
 * the sequence steps expected (batch.c), unless it is alone (srv__alone:
 * they are its own). Loop thread. */
static int solo_ok(const srv_entry *e, size_t len, int alone)
{
    const srv *s = e->s;
    return !e->qhead && (e->running < (int)s->cfg.instances || unbatched(e)) &&
           s->cfg.batch_delay_us == 0 && len <= SOLO_BODY_BYTES &&
           (alone || e->seq_expected <= 0);
}

/* seq_hdr_id: r's Attnd-Sequence-Id header (REST: http_head.c's
 * keep_seq_hdr) or metadata, or NULL */
static const char *seq_hdr_id(const srv_req *r)
{
    return r->has_seq_hdr ? r->seq_hdr : NULL;
}

/* step_id: the sequence id undecoded request r names (its header or
 * metadata, else, with body, its body's first sequence_id) into id; 0 for
 * none. */
static int step_id(const srv_req *r, int body, char id[OIP_MAX_SEQ_ID])
{
    const char *hdr_id = seq_hdr_id(r);
    if (hdr_id) { /* one too long is no id (no live one's prefix) */
        size_t n = strlen(hdr_id);
        if (n >= OIP_MAX_SEQ_ID)
            return 0;
        memcpy(id, hdr_id, n + 1);
        return 1;
    }
    return body && (r->door ? r->door->peek_seq_id : oip_peek_sequence_id)(
                       r->body, r->body_len, r->header_len, id);
}

/* srv_sched_refused: infer request r was refused before its decode (503:
 * retry), its body whole or not (memory-budget could not hold it, a full
 * queue; or 504, a gRPC client's deadline past when its message came): a
 * step of a live sequence, retried as told, keeps it from the idle sweep,
 * as one refused after its decode does. Its id is its
 * Attnd-Sequence-Id header, or else its body's sequence_id so far, read
 * off without a decode: one pass over the JSON (the loop copied it in
 * already), a walk of a gRPC message's top-level fields. Loop thread. */
void srv_sched_refused(srv_req *r)
{
    char id[OIP_MAX_SEQ_ID];
    if (step_id(r, 1, id))
        srv_seq_touch(r->s, id);
}

void srv_sched_refuse_draining(srv_req *r, int body)
{
    char id[OIP_MAX_SEQ_ID];
    if (step_id(r, body, id) && srv_seq_live(r->s, id))
        srv_respond_error(r, 503, "server: draining (shutting down); sequence "
                          "'%s' ends with it (its keys and values are memory "
                          "state): begin it again on another replica with "
                          "sequence_start: true and the whole history", id);
    else
        srv_respond_error(r, 503, "server: draining (shutting down); retry "
                                  "on another replica");
}

/* bad_seq_hdr: is r's Attnd-Sequence-Id given and not a sequence id?
 * Answered 400 then, whatever its model and body: srv_h_infer's first
 * check. */
static int bad_seq_hdr(srv_req *r, const char *hdr_id)
{
    char err[OIP_ERRMAX];
    if (!hdr_id || !oip_sequence_id_error(hdr_id, strlen(hdr_id),
                                          "Attnd-Sequence-Id", 1, err))
        return 0;
    srv_respond_error(r, 400, "%s", err);
    return 1;
}

/* not_served: does srv_h_infer answer r 404 (its model neither loaded
 * nor loading)? Answered then. */
static int not_served(srv_req *r, const srv_entry *e)
{
    if (e && (e->inst || e->state == SRV_LOADING))
        return 0;
    snprintf(r->model, sizeof r->model, "%.128s", r->arg[0]);
    srv_respond_no_model(r, r->arg[0], e);
    return 1;
}

/* still_loading: does srv_h_infer answer r 503 (its model's first load
 * still runs)? Answered then. */
static int still_loading(srv_req *r, const srv_entry *e)
{
    if (!e || e->inst || e->state != SRV_LOADING)
        return 0;
    srv_respond_error(r, 503, "model '%s': still loading; retry shortly",
                      r->arg[0]);
    return 1;
}

/* queue_full: does srv_h_infer answer r 503 (e's queue-size requests in
 * progress)? Answered then, a step it may be kept from the idle sweep
 * (srv_sched_refused: with its body unread, its header's id). */
static int queue_full(srv_req *r, srv_entry *e)
{
    if (e->pending < (int)r->s->cfg.queue_size)
        return 0;
    srv_sched_refused(r); /* (before the answer, which may free r) */
    srv_respond_error(r, 503, "queue: model '%s' has %d request%s in "
                      "progress (queue-size); retry later", e->name, e->pending,
                      e->pending == 1 ? "" : "s");
    e->stats.fail_rejected++;
    return 1;
}

int srv_sched_head_refused(srv_req *r)
{
    srv_entry *e = srv_registry_find(r->s, r->arg[0]);
    snprintf(r->model, sizeof r->model, "%.128s", r->arg[0]); /* its log's */
    const char *hdr_id = seq_hdr_id(r);
    /* a full queue's 503 keeps the step it refuses from the idle sweep:
     * from the head only when the header names it (else its body may) */
    return bad_seq_hdr(r, hdr_id) || still_loading(r, e) ||
           not_served(r, e) || (hdr_id && queue_full(r, e));
}

/* srv_h_infer: POST /v2/models/{m}/infer. Admits the request (or answers
 * 404/503 at once), then decodes it on the pool. */
void srv_h_infer(srv_req *r)
{
    srv *s = r->s;
    srv_entry *e = srv_registry_find(s, r->arg[0]);
    srv_job *j;
    const char *hdr_id = seq_hdr_id(r);
    size_t mlen = strnlen(r->arg[0], sizeof r->model - 1); /* "%.128s" */
    memcpy(r->model, r->arg[0], mlen);
    r->model[mlen] = 0;
    if (bad_seq_hdr(r, hdr_id) || still_loading(r, e) || not_served(r, e))
        return;
    /* a gRPC call whose deadline had passed when its message came: the
     * model's timeout, as one that passes while it waits */
    if (r->expired) {
        srv_sched_refused(r); /* a step all the same, as one answered 504 */
        srv_respond_error(r, 504, "deadline: the client's deadline passed");
        e->stats.fail_timeout++;
        return;
    }
    /* one begun before the signal is served, until the drain is cut short:
     * from then on nothing new runs (the stop would wait for it) */
    if (s->draining && (r->late || s->drain_expired)) {
        srv_sched_refuse_draining(r, 1);
        e->stats.fail_rejected++;
        return;
    }
    if (queue_full(r, e))
        return;
    j = calloc(1, sizeof *j);
    if (!j) {
        srv_sched_refused(r);
        srv_respond_error(r, 503, "server: out of memory");
        return;
    }
    j->s = s;
    j->req = r;
    j->e = e;
    j->inst = e->inst;
    j->inst->refs++;
    j->body = r->body;
    j->len = r->body_len;
    j->header_len = r->header_len;
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    j->mem = r->mem; /* the body's reservation goes with it */
    r->mem = 0;
    j->t_arrive = r->t0_ns;
    j->door = r->door;
    j->deadline_ms = r->deadline_ms && r->deadline_ms < s->cfg.deadline_ms
                         ? r->deadline_ms : s->cfg.deadline_ms;
    j->state = J_DECODE;
    j->solo = solo_ok(e, j->len, srv__alone(s));
    r->job = j;
    e->pending++;
    s->live_jobs++;
    uv_timer_init(s->loop, &j->deadline);
    j->deadline.data = j;
    /* from the body whole, as the timer: a body that was slow to come
     * counts on neither path (the slow-client guards bound it) */
    j->t_admit = srv_now_ns();
    uv_timer_start(&j->deadline, on_deadline, (uint64_t)j->deadline_ms, 0);
    j->step.job = j;
    j->step.e = e;
    j->step.inst = j->inst;
    j->step.prep = &j->prep;
    j->step.in = &j->in;
    j->step.t_head = r->t_msg_ns ? r->t_msg_ns : r->t0_ns;
    srv_copy(j->step.hdr_id, sizeof j->step.hdr_id, hdr_id ? hdr_id : "");
    j->step.grpc = r->door != NULL;
    srv_seq_arrive(s, &j->step);
    j->work.data = j;
    if (j->solo && lone(s, (int)s->cfg.inline_conns)) {
        /* inline: the only connection's request, on this thread */
        e->running++;
        srv_crash_job("running a request inline", e->name);
        solo_run(j, INLINE_OUT_BYTES);
        s->inline_last = j->solo_ran;
        e->stats.inline_count += (uint64_t)j->solo_ran;
        srv__job_late(j); /* its deadline timer cannot fire inside this call */
        /* a sequence step whose turn comes now (solo_finish pumps its
         * model) runs here too when its batch is small (batch.c) */
        j->inline_batch = 1;
        solo_finish(j);
        if (r->job == j)
            j->inline_batch = 0;
        srv_crash_job(NULL, NULL);
        if (!r->have_resp) /* a larger plan or step: it queued */
            srv_suspend(r);
        return;
    }
    s->inline_last = 0;
    srv_suspend(r);
    if (j->solo) {
        j->solo_over = e->running >= (int)s->cfg.instances;
        e->running++;
        j->solo_pooled = 1;
        srv_pool_queue(s, &j->work, solo_work, solo_done);
        return;
    }
    srv_pool_queue(s, &j->work, decode_work, decode_done);
}

/* srv__sched_queue: a sequence step's turn: onto its model's queue; the
 * model is pumped from the loop soon (never inside the caller, which may
 * be forming or finishing a batch). */
void srv__sched_queue(srv_job *j)
{
    srv__job_enqueue(j);
    srv__pump_soon(j->e);
}

/* srv__sched_fail: a sequence step that cannot run answers status now. */
void srv__sched_fail(srv_job *j, int status, const char *msg)
{
    srv__job_answer(j, status, msg);
    srv__job_end(j);
}

/* ---- shutdown ------------------------------------------------------------- */

/* srv_sched_drain: SIGTERM: what is queued runs now, without batch delay. */
void srv_sched_drain(srv *s)
{
    srv_entry *e;
    for (e = s->models; e; e = e->next)
        srv__pump(e);
}

/* srv__sched_expire_queue: the drain was cut short: every request in e's
 * queue gets 503 now (the pump sends those that reach it later here too:
 * decoded after the cut, or a sequence step whose turn came). */
void srv__sched_expire_queue(srv_entry *e)
{
    while (e->qhead) {
        srv_job *j = e->qhead;
        srv__job_unqueue(j);
        srv__job_answer(j, 503, "server: shut down before this request ran");
        srv__job_end(j);
    }
}

/* srv_sched_expire: the drain timeout passed: every request still waiting
 * gets 503 now; running batches finish unobserved. */
void srv_sched_expire(srv *s)
{
    srv_entry *e;
    srv_seq_expire(s);
    for (e = s->models; e; e = e->next)
        srv__sched_expire_queue(e);
}
