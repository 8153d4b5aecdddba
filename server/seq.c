/*
 * seq.c - the life of sequences on the loop thread: ids, the arrival order
 * of steps, start / restart / end, the K/V pages around each step, idle
 * expiry and drops. See seq.h for the path of a step.
 */
#include "server/seq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 1024

/* How a sequence that is no longer live went (its tombstone). */
enum { GONE_NONE, GONE_ENDED, GONE_DROPPED };

/* One sequence id. It lives in the table while it is live, has steps or
 * is remembered as gone (a tombstone: at most max-sequences of them, each
 * for sequence-idle-ms, so that a step to it is told how it went); its
 * cache belongs to the instance it holds a reference on. */
struct srv_seq {
    char id[OIP_MAX_SEQ_ID];
    srv_entry *e;        /* model of its cache */
    srv_inst *inst;      /* reference held while live */
    attn_kv kv;
    int live;            /* started, not ended or dropped */
    int kill;            /* dropped while a step ran: drop when it ends */
    int kill_reason;
    srv_step *active;    /* on the model queue or in a batch */
    srv_step *qhead, *qtail; /* waiting steps, arrival order */
    uint64_t last_ns;    /* end of its last step (or start) */
    char map_id[MAPS_ID_MAX]; /* its growing map, "" = none (or evicted) */
    int retained;        /* started with retain: true */
    int expected;        /* counted in e->seq_expected (if still expect_gen) */
    uint64_t expect_gen;
    int gone;            /* GONE_*: a tombstone, in the tombs list */
    int gone_reason;     /* GONE_DROPPED: SRV_DROP_* */
    int gone_len;        /* tokens it held then */
    uint64_t gone_ns;
    srv_seq *tprev, *tnext; /* the tombs list, oldest first */
    srv_seq *hnext;
};

struct srv_seqs {
    srv *s;
    srv_seq *bucket[N_BUCKETS];
    uint64_t next_ticket;
    srv_step *dec_head, *dec_tail;  /* decoding, ticket order */
    srv_step *held_head, *held_tail; /* decoded steps, ticket order */
    int n_live, n_starting;
    srv_seq *tomb_head, *tomb_tail;
    int n_tombs;
    int walking;         /* in each_seq: tombs over the cap wait for its end */
    uv_timer_t idle;
    int timer_on;
};

const char *const srv_drop_name[SRV_DROP_N] = {"idle", "deleted", "unloaded",
                                              "restarted"};
/* what a sequence no one remembers may be */
#define UNKNOWN_WHY                                                            \
    "never started, ended, idle past sequence-idle-ms, deleted, its model "    \
    "reloaded, or held by another replica or a restarted server"
/* what a drop's reason means to a client */
static const char *drop_why[SRV_DROP_N] = {
    "idle past sequence-idle-ms", "deleted", "its model reloaded or unloaded",
    "restarted"};

static unsigned hash(const char *id)
{
    unsigned h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h % N_BUCKETS;
}

static srv_seq *find(srv_seqs *q, const char *id)
{
    srv_seq *l;
    for (l = q->bucket[hash(id)]; l; l = l->hnext)
        if (strcmp(l->id, id) == 0)
            return l;
    return NULL;
}

/* gc: forget l when nothing refers to it any more. */
static void gc(srv_seqs *q, srv_seq *l)
{
    srv_seq **pp;
    if (l->live || l->active || l->qhead || l->gone)
        return;
    for (pp = &q->bucket[hash(l->id)]; *pp; pp = &(*pp)->hnext)
        if (*pp == l) {
            *pp = l->hnext;
            break;
        }
    free(l);
}

/* unbury: l is no longer remembered as gone (live again, or forgotten). */
static void unbury(srv_seqs *q, srv_seq *l)
{
    if (!l->gone)
        return;
    if (l->tprev)
        l->tprev->tnext = l->tnext;
    else
        q->tomb_head = l->tnext;
    if (l->tnext)
        l->tnext->tprev = l->tprev;
    else
        q->tomb_tail = l->tprev;
    l->tprev = l->tnext = NULL;
    l->gone = GONE_NONE;
    q->n_tombs--;
}

/* trim_tombs: forget the oldest tombstones past max-sequences (not while
 * each_seq walks the table: it may hold the next one). */
static void trim_tombs(srv_seqs *q)
{
    while (!q->walking && q->tomb_head &&
           q->n_tombs > (int)q->s->cfg.max_sequences) {
        srv_seq *l = q->tomb_head;
        unbury(q, l);
        gc(q, l);
    }
}

/* bury: remember that l, which held len tokens, went (GONE_*; reason for
 * a drop). */
static void bury(srv_seqs *q, srv_seq *l, int gone, int reason, int len)
{
    unbury(q, l);
    if (q->s->cfg.max_sequences < 1)
        return; /* none kept: trim_tombs would free l under its caller */
    l->gone = gone;
    l->gone_reason = reason;
    l->gone_len = len;
    l->gone_ns = srv_now_ns();
    l->tprev = q->tomb_tail;
    if (q->tomb_tail)
        q->tomb_tail->tnext = l;
    else
        q->tomb_head = l;
    q->tomb_tail = l;
    q->n_tombs++;
    trim_tombs(q);
}

/* expect: l's next step is (on) or is no longer (off) expected soon: its
 * last one was just answered. The batcher waits a little for expected
 * steps (batch.c, --sequence-wait-us); it forgets them all at once by
 * moving to a new generation, so a flag of an old one counts no more. */
static void expect(srv_seq *l, int on)
{
    srv_entry *e = l->e;
    if (l->expected && l->expect_gen == e->expect_gen && e->seq_expected > 0)
        e->seq_expected--;
    l->expected = on;
    l->expect_gen = e->expect_gen;
    if (on)
        e->seq_expected++;
}

/* release_cache: l's pages back to its pool, its instance reference
 * dropped; l is no longer live. Never while a step of l runs. */
static void release_cache(srv_seqs *q, srv_seq *l)
{
    if (!l->live)
        return;
    expect(l, 0);
    attn_kv_free(&l->kv);
    srv_inst_unref(l->inst);
    l->inst = NULL;
    l->live = 0;
    l->map_id[0] = 0;
    q->n_live--;
    l->e->seq_stats.live--;
}

/* drop: l goes away for reason (now, or when its running step ends). */
static void drop(srv_seqs *q, srv_seq *l, int reason)
{
    int len = l->kv.len;
    if (!l->live)
        return;
    if (l->active && l->active->kv == &l->kv && l->active->bound) {
        if (!l->kill) /* the first reason stands */
            l->kill_reason = reason;
        l->kill = 1; /* its pages are in a running plan */
        return;
    }
    l->e->seq_stats.dropped[reason]++;
    srv_log(q->s, "info", "sequence '%s' of model '%s' dropped (%s, %d tokens)",
            l->id, l->e->name, srv_drop_name[reason], len);
    release_cache(q, l);
    bury(q, l, GONE_DROPPED, reason, len);
}

/* ---- the lists ------------------------------------------------------------ */

static void list_remove(srv_step **head, srv_step **tail, srv_step *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        *head = st->next;
    if (st->next)
        st->next->prev = st->prev;
    else
        *tail = st->prev;
    st->prev = st->next = NULL;
}

static void list_append(srv_step **head, srv_step **tail, srv_step *st)
{
    st->next = NULL;
    st->prev = *tail;
    if (*tail)
        (*tail)->next = st;
    else
        *head = st;
    *tail = st;
}

/* fail: st leaves the machinery and its job answers status. */
static void fail(srv_step *st, int status, const char *msg)
{
    st->where = SRV_STEP_NONE;
    srv__sched_fail(st->job, status, msg);
}

/* gone_what: how tombstone l went: "ended 1.5 s ago at 4 tokens: ...". */
static void gone_what(char *buf, size_t n, const srv_seq *l)
{
    double ago = (double)(srv_now_ns() - l->gone_ns) / 1e9;
    if (l->gone == GONE_ENDED)
        snprintf(buf, n, "ended %.1f s ago at %d tokens: a step with "
                 "sequence_end was answered", ago, l->gone_len);
    else
        snprintf(buf, n, "dropped %.1f s ago at %d tokens: %s", ago,
                 l->gone_len, drop_why[l->gone_reason]);
}

/* gone_msg: the 400 of a step whose sequence is not live (l: its
 * tombstone, or NULL), or the 409 of one sent again at a position its
 * ended sequence held; returns the status. */
static int gone_msg(char *msg, size_t n, const char *id, const srv_seq *l,
                    const srv_step *st)
{
    char what[128];
    if (!l || !l->gone) {
        snprintf(msg, n, "parameters.sequence_id: unknown sequence '%s' (%s); "
                 "send sequence_start: true with the whole history to begin "
                 "it again", id, UNKNOWN_WHY);
        return 400;
    }
    gone_what(what, sizeof what, l);
    if (l->gone == GONE_ENDED && st->has_pos && st->pos < l->gone_len) {
        snprintf(msg, n, "parameters.sequence_position: sequence '%s' %s; the "
                 "step at %d was carried out, and an ended sequence takes no "
                 "step: its last one cannot be sent again (for that, leave "
                 "sequence_end off and DELETE /v2/sequences/{id} when done)",
                 id, what, st->pos);
        return 409;
    }
    snprintf(msg, n, "parameters.sequence_id: unknown sequence '%s' (%s); "
             "send sequence_start: true with the whole history to begin it "
             "again", id, what);
    return 400;
}

/* kick: make l's next waiting step active (checked against l's state now
 * that every earlier step of l has ended), or fail it and try the next. */
static void kick(srv_seqs *q, srv_seq *l)
{
    char msg[512];
    while (!l->active && l->qhead) {
        srv_step *st = l->qhead;
        list_remove(&l->qhead, &l->qtail, st);
        st->where = SRV_STEP_NONE;
        st->seq = l;
        if (st->start) {
            if (!st->inst->kv_pool) {
                snprintf(msg, sizeof msg, "sequences: model '%s' keeps no "
                         "K/V cache (kv-bytes 0)", st->e->name);
                fail(st, 400, msg);
                continue;
            }
            if (!l->live && q->n_live + q->n_starting >=
                                (int)q->s->cfg.max_sequences) {
                snprintf(msg, sizeof msg, "sequences: %d live or starting "
                         "(max-sequences %lld); end some or retry later",
                         q->n_live + q->n_starting, q->s->cfg.max_sequences);
                fail(st, 503, msg);
                continue;
            }
            st->starting = !l->live;
            q->n_starting += st->starting;
            attn_kv_init(&st->fresh, st->inst->kv_pool);
            st->kv = &st->fresh;
            st->map_id[0] = 0;
        } else {
            if (!l->live) {
                fail(st, gone_msg(msg, sizeof msg, st->id, l, st), msg);
                continue;
            }
            if (l->e != st->e || l->inst != st->inst) {
                snprintf(msg, sizeof msg, "parameters.sequence_id: sequence "
                         "'%s' belongs to model '%s'%s; send sequence_start: "
                         "true to begin it on '%s'", st->id, l->e->name,
                         l->e == st->e ? " as it was before a reload" : "",
                         st->e->name);
                fail(st, 400, msg);
                continue;
            }
            if (st->retain && !l->retained) {
                snprintf(msg, sizeof msg, "parameters.retain: sequence '%s' "
                         "keeps no map (retain is decided by its "
                         "sequence_start step)", st->id);
                fail(st, 400, msg);
                continue;
            }
            if (st->has_pos && st->pos > l->kv.len) {
                snprintf(msg, sizeof msg, "parameters.sequence_position: %d "
                         "is past the end of sequence '%s', which holds %d "
                         "tokens; send its tokens from position %d first (a "
                         "step at the length appends, one below it replaces "
                         "the tokens from there on)", st->pos, st->id,
                         l->kv.len, l->kv.len);
                fail(st, 409, msg);
                continue;
            }
            st->kv = &l->kv;
            snprintf(st->map_id, sizeof st->map_id, "%s", l->map_id);
        }
        st->t0 = st->kv->len;
        l->active = st;
        st->where = SRV_STEP_ACTIVE;
        srv__sched_queue(st->job);
    }
}

/* route: a released step joins its sequence's queue (the sequence is
 * created, not yet live, for a start). */
static void route(srv_seqs *q, srv_step *st)
{
    srv_seq *l = find(q, st->id);
    char msg[512];
    if (!l && !st->start) {
        fail(st, gone_msg(msg, sizeof msg, st->id, NULL, st), msg);
        return;
    }
    if (!l) {
        unsigned h = hash(st->id);
        l = calloc(1, sizeof *l);
        if (!l) {
            fail(st, 503, "sequences: out of memory");
            return;
        }
        snprintf(l->id, sizeof l->id, "%s", st->id);
        l->e = st->e;
        l->hnext = q->bucket[h];
        q->bucket[h] = l;
    }
    expect(l, 0); /* it came */
    st->where = SRV_STEP_WAITING;
    st->seq = l;
    list_append(&l->qhead, &l->qtail, st);
    kick(q, l);
    gc(q, l); /* a start refused at once leaves nothing behind */
}

/* release: every held step with no earlier arrival still decoding goes
 * to its sequence, in arrival order. */
static void release(srv_seqs *q)
{
    while (q->held_head &&
           (!q->dec_head || q->held_head->ticket < q->dec_head->ticket)) {
        srv_step *st = q->held_head;
        list_remove(&q->held_head, &q->held_tail, st);
        st->where = SRV_STEP_NONE;
        route(q, st);
    }
}

void srv_seq_arrive(srv *s, srv_step *st)
{
    srv_seqs *q = s->seqs;
    st->ticket = ++q->next_ticket;
    st->where = SRV_STEP_DECODING;
    list_append(&q->dec_head, &q->dec_tail, st);
}

void srv_seq_abandon(srv *s, srv_step *st)
{
    srv_seqs *q = s->seqs;
    if (st->where != SRV_STEP_DECODING)
        return;
    list_remove(&q->dec_head, &q->dec_tail, st);
    st->where = SRV_STEP_NONE;
    release(q);
}

void srv_seq_decoded(srv *s, srv_step *st, int take)
{
    srv_seqs *q = s->seqs;
    srv_step *p;
    if (st->where == SRV_STEP_DECODING)
        list_remove(&q->dec_head, &q->dec_tail, st);
    st->where = SRV_STEP_NONE;
    if (take) {
        /* keep the held list in ticket order */
        for (p = q->held_tail; p && p->ticket > st->ticket; p = p->prev)
            ;
        st->prev = p;
        st->next = p ? p->next : q->held_head;
        if (st->next)
            st->next->prev = st;
        else
            q->held_tail = st;
        if (p)
            p->next = st;
        else
            q->held_head = st;
        st->where = SRV_STEP_HELD;
    }
    release(q);
}

/* ---- binding and ending ----------------------------------------------------- */

/* end_rewind: a rewound step's rewind is over: kept (its pages past the
 * new end given back) or undone (the cache's rows and length as they
 * were); its saved rows freed. A no-op for any other step. */
static void end_rewind(srv_step *st, int keep)
{
    if (keep && st->undo.held) {
        attn_kv_trim(st->kv);
        memset(&st->undo, 0, sizeof st->undo);
    }
    attn_kv_rewind_undo(st->kv, &st->undo);
    free(st->saved);
    st->saved = NULL;
}

int srv_seq_bind(srv_step *st, size_t *mem, char *err)
{
    srv *s = st->e->s;
    attn_seq *a = &st->prep->seqs[0];
    size_t memory = (size_t)s->cfg.request_memory, nb = 0, need;
    char kerr[ATTN_ERRMAX];
    int rc, status = 0, reserved = 0;
    if (!st->start && !st->seq->live) { /* dropped while it queued */
        snprintf(err, OIP_ERRMAX, "parameters.sequence_id: sequence '%s' was "
                 "dropped (%s) before this step ran; send sequence_start: true "
                 "with the whole history to begin it again", st->id,
                 st->seq->gone == GONE_DROPPED ? drop_why[st->seq->gone_reason]
                                               : "deleted, idle or model unloaded");
        return 400;
    }
    /* a step at a position other than the length (kick refused one past
     * it) replaces the tokens from there on: the cache is rewound, what
     * the pass overwrites kept (within request-memory) to be put back if
     * the step fails */
    if (st->has_pos && !st->start && st->pos != st->kv->len) {
        nb = attn_kv_rewind_bytes(st->kv, st->pos, a->t);
        if (st->in->bytes + st->prep->bytes + nb > memory) {
            snprintf(err, OIP_ERRMAX, "parameters.sequence_position: this "
                     "step replaces tokens whose %zu bytes of K/V are kept "
                     "until it is answered, more than request-memory (%zu) "
                     "allows with the request; send fewer tokens", nb, memory);
            return 413;
        }
        if (nb && !(st->saved = malloc(nb))) {
            snprintf(err, OIP_ERRMAX, "sequences: out of memory to keep the "
                     "%zu bytes of K/V a step at sequence_position %d "
                     "replaces", nb, st->pos);
            return 503;
        }
        if ((rc = attn_kv_rewind(st->kv, st->pos, a->t, st->saved, &st->undo,
                                 kerr))) {
            snprintf(err, OIP_ERRMAX, "parameters.sequence_position: %.400s",
                     kerr);
            status = 400;
            goto fail;
        }
    }
    rc = attn_kv_reserve(st->kv, a->t, kerr);
    if (rc == ATTN_EFULL) {
        snprintf(err, OIP_ERRMAX, "sequences: the K/V cache of model '%s' is "
                 "full (%zu of %lld bytes, kv-bytes) and cannot take %d more "
                 "tokens of sequence '%s'; end sequences or retry later",
                 st->e->name, attn_kv_pool_used(st->kv->pool),
                 s->cfg.kv_bytes, a->t, st->id);
        status = 503;
        goto fail;
    }
    if (rc < 0) {
        snprintf(err, OIP_ERRMAX, "sequences: %.400s", kerr);
        status = rc == ATTN_ENOMEM ? 503 : 400;
        goto fail;
    }
    reserved = 1;
    st->t0 = st->kv->len;
    status = srv_seq_alloc_maps(st->prep, st->in, st->t0 + a->t, nb,
                                st->start ? st->retain : st->map_id[0] != 0,
                                memory, err);
    if (status)
        goto fail;
    /* what it holds now counts against memory-budget: *mem is its decoded
     * request and outputs as its decode left them (sched.c) */
    need = st->in->bytes + st->prep->bytes + nb;
    if (need <= *mem) {
        srv_mem_give(s, *mem - need);
    } else if (srv_mem_take(s, need - *mem) < 0) {
        snprintf(err, OIP_ERRMAX, "server: the memory for decoded requests "
                 "and unsent answers (%lld bytes, memory-budget) is in use "
                 "and cannot take this step's %zu (its request, its outputs "
                 "and the K/V rows it replaces); retry shortly",
                 s->cfg.memory_budget, need);
        status = 503;
        goto fail;
    }
    *mem = need;
    a->s = a->s_valid = st->t0 + a->t;
    a->kv = st->kv;
    st->t = a->t;
    st->bound = 1;
    return 0;
fail:
    end_rewind(st, 0);
    if (reserved)
        attn_kv_trim(st->kv);
    return status;
}

void srv_seq_step_end(srv_step *st, int ok)
{
    srv_seqs *q;
    srv_seq *l = st->seq;
    if (!st->e)
        return;
    q = st->e->s->seqs;
    switch (st->where) {
    case SRV_STEP_DECODING:
        list_remove(&q->dec_head, &q->dec_tail, st);
        st->where = SRV_STEP_NONE;
        release(q);
        return;
    case SRV_STEP_HELD:
        list_remove(&q->held_head, &q->held_tail, st);
        st->where = SRV_STEP_NONE;
        return;
    case SRV_STEP_WAITING:
        list_remove(&l->qhead, &l->qtail, st);
        st->where = SRV_STEP_NONE;
        gc(q, l);
        return;
    case SRV_STEP_ACTIVE:
        break;
    default:
        return;
    }
    st->where = SRV_STEP_NONE;
    l->active = NULL;
    q->n_starting -= st->starting;
    st->starting = 0;
    if (!ok || !st->bound) {
        int rewound = st->undo.held;
        if (st->start) {
            attn_kv_free(&st->fresh);
        } else if (st->bound) {
            end_rewind(st, 0);
            attn_kv_trim(st->kv);
        }
        /* a step that failed after its encoding grew the map (a deadline
         * that came when it was encoded; one that came before keeps the
         * encoding from growing it, st->late; a failure before encoding,
         * such as a non-finite output, never grows it): the map loses its
         * rows too, so a page following it shows only steps that were
         * answered */
        if (st->bound && st->map_id[0] && q->s->maps) {
            if (st->start) {
                maps_drop(q->s->maps, st->map_id);
            } else if (!rewound) {
                maps_cut(q->s->maps, st->map_id, st->t0);
            } else if (st->grew) {
                /* its encoding grew the map over the rows it replaced,
                 * which the map does not keep: the sequence goes on
                 * without one, as after an eviction */
                maps_drop(q->s->maps, st->map_id);
                l->map_id[0] = 0;
            }
        }
    } else {
        attn_kv_advance(st->kv, st->t);
        if (st->undo.held) { /* the tokens past the new end are gone */
            l->e->seq_stats.rewound++;
            l->e->seq_stats.rewound_tokens += (uint64_t)(st->undo.len - st->t0);
        }
        end_rewind(st, 1);
        if (st->start) {
            if (l->live) {
                l->e->seq_stats.dropped[SRV_DROP_RESTARTED]++;
                release_cache(q, l);
            }
            l->kv = st->fresh; /* the page table moves; no page is copied */
            memset(&st->fresh, 0, sizeof st->fresh);
            l->e = st->e;
            l->inst = st->inst;
            l->inst->refs++;
            l->live = 1;
            unbury(q, l);
            l->retained = st->retain;
            q->n_live++;
            l->e->seq_stats.live++;
            l->e->seq_stats.started++;
        }
        snprintf(l->map_id, sizeof l->map_id, "%s", st->map_id);
        l->last_ns = srv_now_ns();
        if (st->end) {
            int len = l->kv.len;
            l->e->seq_stats.ended++;
            release_cache(q, l);
            bury(q, l, GONE_ENDED, 0, len);
        } else if (l->inst != l->e->inst) { /* reloaded while it ran */
            if (!l->kill)
                l->kill_reason = SRV_DROP_UNLOADED;
            l->kill = 1;
        }
    }
    st->bound = 0;
    if (l->kill) {
        l->kill = 0;
        drop(q, l, l->kill_reason);
    }
    /* answered and going on: its client is likely to send the next step
     * soon (unless it already did) */
    if (ok && l->live && !l->qhead)
        expect(l, 1);
    kick(q, l);
    gc(q, l);
}

/* ---- drops, expiry, listing ------------------------------------------------- */

static void each_seq(srv_seqs *q, void (*fn)(srv_seqs *, srv_seq *, void *),
                     void *arg)
{
    int b;
    q->walking = 1;
    for (b = 0; b < N_BUCKETS; b++) {
        srv_seq *l = q->bucket[b], *next;
        for (; l; l = next) {
            next = l->hnext;
            fn(q, l, arg);
        }
    }
    q->walking = 0;
    trim_tombs(q);
}

static void drop_model_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    if (l->e == arg && l->live) {
        drop(q, l, SRV_DROP_UNLOADED);
        gc(q, l);
    }
}

void srv_seq_drop_model(srv_entry *e)
{
    if (e->s->seqs)
        each_seq(e->s->seqs, drop_model_fn, e);
}

static void idle_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    uint64_t now = *(uint64_t *)arg;
    uint64_t idle = (uint64_t)q->s->cfg.sequence_idle_ms * 1000000u;
    if (l->live && !l->active && !l->qhead && now - l->last_ns >= idle) {
        drop(q, l, SRV_DROP_IDLE);
        gc(q, l);
    } else if (l->gone && now - l->gone_ns >= idle) {
        unbury(q, l); /* remembered long enough */
        gc(q, l);
    }
}

static void on_idle(uv_timer_t *t)
{
    srv_seqs *q = t->data;
    uint64_t now = srv_now_ns();
    if (q->n_live || q->n_tombs)
        each_seq(q, idle_fn, &now);
}

int srv_seq_delete(srv *s, const char *id, char *model_out)
{
    srv_seq *l = find(s->seqs, id);
    if (!l || !l->live)
        return -1;
    snprintf(model_out, SRV_NAME_MAX, "%s", l->e->name);
    drop(s->seqs, l, SRV_DROP_DELETED);
    gc(s->seqs, l);
    return 0;
}

typedef struct list_arg {
    srv_seq_info *out;
    size_t cap, n;
    uint64_t now;
} list_arg;

/* fill_info: live l as listed at now. */
static void fill_info(const srv_seq *l, uint64_t now, srv_seq_info *o)
{
    snprintf(o->id, sizeof o->id, "%s", l->id);
    snprintf(o->model, sizeof o->model, "%s", l->e->name);
    /* a rewound step's cache holds its position until it ends: the
     * sequence's length is still what it was */
    o->length = l->active && l->active->undo.held ? l->active->undo.len
                                                  : l->kv.len;
    o->bytes = attn_kv_bytes(&l->kv);
    o->idle_ms = l->active || l->qhead ? 0 : (now - l->last_ns) / 1000000u;
    snprintf(o->map_id, sizeof o->map_id, "%s", l->map_id);
}

static void list_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    list_arg *a = arg;
    (void)q;
    if (!l->live || l->kill)
        return;
    if (a->n < a->cap)
        fill_info(l, a->now, &a->out[a->n]);
    a->n++;
}

int srv_seq_get(srv *s, const char *id, srv_seq_info *out, char *msg, size_t n)
{
    srv_seq *l = find(s->seqs, id);
    char what[128];
    if (l && l->live && !l->kill) {
        fill_info(l, srv_now_ns(), out);
        return 0;
    }
    if (l && l->live) { /* dropped; it goes when its running step ends */
        snprintf(msg, n, "sequence '%s' is being dropped (%s): its cache "
                 "goes when its running step ends", id, drop_why[l->kill_reason]);
    } else if (l && l->gone) {
        gone_what(what, sizeof what, l);
        snprintf(msg, n, "sequence '%s' %s", id, what);
    } else {
        snprintf(msg, n, "unknown sequence '%s' (%s)", id, UNKNOWN_WHY);
    }
    return -1;
}

size_t srv_seq_list(srv *s, srv_seq_info *out, size_t cap)
{
    list_arg a = {out, cap, 0, srv_now_ns()};
    each_seq(s->seqs, list_fn, &a);
    return a.n;
}

static void expire_list(srv_step **head, srv_step **tail)
{
    while (*head) {
        srv_step *st = *head;
        list_remove(head, tail, st);
        fail(st, 503, "server: shut down before this request ran");
    }
}

static void expire_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    (void)arg;
    expire_list(&l->qhead, &l->qtail);
    gc(q, l);
}

void srv_seq_expire(srv *s)
{
    srv_seqs *q = s->seqs;
    expire_list(&q->held_head, &q->held_tail);
    each_seq(q, expire_fn, NULL);
}

/* ---- set-up --------------------------------------------------------------- */

int srv_seq_init(srv *s)
{
    srv_seqs *q = calloc(1, sizeof *q);
    uint64_t period;
    if (!q)
        return -1;
    q->s = s;
    s->seqs = q;
    uv_timer_init(s->loop, &q->idle);
    q->idle.data = q;
    /* sweep four times per idle period (at most once a second, at least
     * every 10 ms): a sequence goes within 1.25 periods of its last step */
    period = (uint64_t)s->cfg.sequence_idle_ms / 4;
    period = period < 10 ? 10 : period > 1000 ? 1000 : period;
    uv_timer_start(&q->idle, on_idle, period, period);
    q->timer_on = 1;
    return 0;
}

void srv_seq_stop(srv *s)
{
    if (s->seqs && s->seqs->timer_on) {
        s->seqs->timer_on = 0;
        uv_close((uv_handle_t *)&s->seqs->idle, NULL);
    }
}

static void free_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    (void)arg;
    l->active = NULL;
    l->qhead = l->qtail = NULL;
    release_cache(q, l);
    unbury(q, l);
    gc(q, l);
}

void srv_seq_free(srv *s)
{
    if (!s->seqs)
        return;
    each_seq(s->seqs, free_fn, NULL);
    free(s->seqs);
    s->seqs = NULL;
}
