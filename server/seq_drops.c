/*
 * seq_drops.c - sequences that go: drops (DELETE, idle, a model unloaded),
 * the sequences remembered as gone (tombstones: a step to one is told how
 * it went), the idle sweep, the listing, and the table's set-up. Loop
 * thread; seq.c has the steps.
 */
#include "server/seq_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/grpc.h"

const char *const srv_drop_name[SRV_DROP_N] = {"idle", "deleted", "unloaded",
                                              "restarted"};
/* what a sequence no one remembers may be */
#define UNKNOWN_WHY                                                            \
    "never started, ended, idle past sequence-idle-ms, deleted, its model "    \
    "reloaded, or held by another replica or a restarted server"
/* what a drop's reason means to a client */
const char *const srv__seq_drop_why[SRV_DROP_N] = {
    "idle past sequence-idle-ms", "deleted", "its model reloaded or unloaded",
    "restarted"};

/* srv__seq_unbury: l is no longer remembered as gone (live again, or
 * forgotten). */
void srv__seq_unbury(srv_seqs *q, srv_seq *l)
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
        srv__seq_unbury(q, l);
        srv__seq_gc(q, l);
    }
}

/* srv__seq_bury: remember that l, which held len tokens, went (GONE_*;
 * reason for a drop). */
void srv__seq_bury(srv_seqs *q, srv_seq *l, int gone, int reason, int len)
{
    srv__seq_unbury(q, l);
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

/* srv__seq_release_cache: l's pages back to its pool, its instance reference
 * dropped; l is no longer live. Never while a step of l runs. */
void srv__seq_release_cache(srv_seqs *q, srv_seq *l)
{
    if (!l->live)
        return;
    srv__seq_expect(l, 0);
    attn_kv_free(&l->kv);
    srv_inst_unref(l->inst);
    l->inst = NULL;
    l->live = 0;
    l->map_id[0] = 0;
    l->map_scores = 0;
    q->n_live--;
    l->e->seq_stats.live--;
}

/* srv__seq_drop: l goes away for reason (now, or when its running step
 * ends). */
void srv__seq_drop(srv_seqs *q, srv_seq *l, int reason)
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
    /* a restart on its way (kick let it in as no new sequence: l was
     * live) would make l live again once answered: from now on it is a
     * new one, and takes its place under max-sequences as one */
    if (l->active && l->active->start && !l->active->starting) {
        l->active->starting = 1;
        q->n_starting++;
    }
    l->e->seq_stats.dropped[reason]++;
    srv_log(q->s, "info", "sequence '%s' of model '%s' dropped (%s, %d token%s)",
            l->id, l->e->name, srv_drop_name[reason], len, len == 1 ? "" : "s");
    srv__seq_release_cache(q, l);
    srv__seq_bury(q, l, GONE_DROPPED, reason, len);
}

/* gone_what: how tombstone l went: "ended 1.5 s ago at 4 tokens: ...". */
static void gone_what(char *buf, size_t n, const srv_seq *l)
{
    double ago = (double)(srv_now_ns() - l->gone_ns) / 1e9;
    if (l->gone == GONE_ENDED)
        snprintf(buf, n, "ended %.1f s ago at %d token%s: a step with "
                 "sequence_end was answered", ago, l->gone_len,
                 l->gone_len == 1 ? "" : "s");
    else
        snprintf(buf, n, "dropped %.1f s ago at %d token%s: %s", ago,
                 l->gone_len, l->gone_len == 1 ? "" : "s",
                 srv__seq_drop_why[l->gone_reason]);
}

/* srv__seq_gone_msg: the 400 of a step whose sequence is not live (l: its
 * tombstone, or NULL), or the 409 of one sent again at a position its
 * ended sequence held; returns the status. */
int srv__seq_gone_msg(char *msg, size_t n, const char *id, const srv_seq *l,
                    const srv_step *st)
{
    char what[128], hint[256] = "";
    if (!l || !l->gone) {
        /* never seen here: perhaps another replica's, reached by a step
         * that had no header for a proxy to route it on */
        if (!st->hdr_id[0])
            snprintf(hint, sizeof hint,
                     "; behind a proxy, send the id in the %s too (this step "
                     "came without it): deploy/nginx.conf routes each step "
                     "to the replica that holds its sequence by it",
                     st->grpc ? "attnd-sequence-id metadata"
                              : "Attnd-Sequence-Id header");
        snprintf(msg, n, "parameters.sequence_id: unknown sequence '%s' (%s); "
                 "send sequence_start: true with the whole history to begin "
                 "it again%s", id, UNKNOWN_WHY, hint);
        return 400;
    }
    gone_what(what, sizeof what, l);
    if (l->gone == GONE_ENDED && st->has_pos && st->pos < l->gone_len) {
        snprintf(msg, n, "parameters.sequence_position: sequence '%s' %s; "
                 "position %d was in it (its steps were carried out), and an "
                 "ended sequence takes no step: its last one cannot be sent "
                 "again (for that, leave sequence_end off and DELETE "
                 "/v2/sequences/{id} when done)", id, what, st->pos);
        return 409;
    }
    snprintf(msg, n, "parameters.sequence_id: unknown sequence '%s' (%s); "
             "send sequence_start: true with the whole history to begin it "
             "again", id, what);
    return 400;
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
        srv__seq_drop(q, l, SRV_DROP_UNLOADED);
        srv__seq_gc(q, l);
    }
}

void srv_seq_drop_model(srv_entry *e)
{
    if (e->s->seqs)
        each_seq(e->s->seqs, drop_model_fn, e);
}

/* step_held: is a decoded step of l whose request's head came before
 * `before` waiting for earlier arrivals (held)? It came: it keeps l for
 * as long as it is held (those arrivals' decodes, or their deadlines). */
static int step_held(srv_seqs *q, const srv_seq *l, uint64_t before)
{
    const srv_step *st;
    for (st = q->held_head; st; st = st->next)
        if (st->t_head < before && strcmp(st->id, l->id) == 0)
            return 1;
    return 0;
}

/* step_coming: may a step of l whose request's head came before `before`
 * still be on its way to l: a REST body still coming to l's model's
 * infer, a gRPC infer message still coming (any model's: its model too is
 * in it), or a request being decoded, none with another id in its
 * Attnd-Sequence-Id header? (Until decoded, a request's sequence id is
 * not known.) */
static int step_coming(srv_seqs *q, const srv_seq *l, uint64_t before)
{
    const srv_step *st;
    const srv_conn *c;
    for (st = q->dec_head; st; st = st->next)
        if (st->t_head < before && st->e == l->e &&
            (!st->hdr_id[0] || strcmp(st->hdr_id, l->id) == 0))
            return 1;
    if (srv_grpc_step_coming(q->s, l->id, before))
        return 1;
    for (c = q->s->conns; c; c = c->next) {
        const srv_req *r = c->req;
        const char *hdr;
        if (c->grpc || !r || !r->conn || !r->route ||
            r->route->body != SRV_BODY_INFER || r->dispatched || r->have_resp ||
            r->t0_ns >= before || strcmp(r->arg[0], l->e->name) != 0)
            continue;
        hdr = r->has_seq_hdr ? r->seq_hdr : NULL; /* keep_seq_hdr */
        if (!hdr || strcmp(hdr, l->id) == 0)
            return 1;
    }
    return 0;
}

/* idle_fn: l goes once no step came for sequence-idle-ms, unless a step
 * that came before that (its request's head) is held behind earlier
 * arrivals (step_held), or may be still on its way (step_coming: its body
 * coming, decoding), for at most one more period. */
static void idle_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    uint64_t now = *(uint64_t *)arg;
    uint64_t idle = (uint64_t)q->s->cfg.sequence_idle_ms * 1000000u;
    if (l->live && !l->active && !l->qhead && now - l->last_ns >= idle &&
        !step_held(q, l, l->last_ns + idle) &&
        (now - l->last_ns >= 2 * idle ||
         !step_coming(q, l, l->last_ns + idle))) {
        srv__seq_drop(q, l, SRV_DROP_IDLE);
        srv__seq_gc(q, l);
    } else if (l->gone && now - l->gone_ns >= idle) {
        srv__seq_unbury(q, l); /* remembered long enough */
        srv__seq_gc(q, l);
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
    srv_seq *l = srv__seq_find(s->seqs, id);
    if (!l || !l->live || l->kill) /* being dropped: as GET and the list */
        return -1;
    snprintf(model_out, SRV_NAME_MAX, "%s", l->e->name);
    srv__seq_drop(s->seqs, l, SRV_DROP_DELETED);
    srv__seq_gc(s->seqs, l);
    return 0;
}

typedef struct list_arg {
    srv_seq_info *out;
    size_t cap, n;
    uint64_t now;
} list_arg;

/* fill_info: live l as listed at now (its map only while the store holds
 * it: other maps may have evicted it since its last step). */
static void fill_info(const srv_seq *l, uint64_t now, maps_store *maps,
                      srv_seq_info *o)
{
    maps_info mi;
    snprintf(o->id, sizeof o->id, "%s", l->id);
    snprintf(o->model, sizeof o->model, "%s", l->e->name);
    /* a rewound step's cache holds its position until it ends: the
     * sequence's length is still what it was */
    o->length = l->active && l->active->undo.held ? l->active->undo.len
                                                  : l->kv.len;
    o->bytes = attn_kv_bytes(&l->kv);
    o->idle_ms = l->active || l->qhead ? 0 : (now - l->last_ns) / 1000000u;
    o->idle_limit_ms = (uint64_t)l->e->s->cfg.sequence_idle_ms;
    o->idle_sweep_ms = l->e->s->seqs->sweep_ms;
    o->map_id[0] = 0;
    if (l->map_id[0] && maps && maps_info_get(maps, l->map_id, &mi) == 0)
        snprintf(o->map_id, sizeof o->map_id, "%s", l->map_id);
}

static void list_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    list_arg *a = arg;
    if (!l->live || l->kill)
        return;
    if (a->n < a->cap)
        fill_info(l, a->now, q->s->maps, &a->out[a->n]);
    a->n++;
}

int srv_seq_get(srv *s, const char *id, srv_seq_info *out, char *msg, size_t n)
{
    srv_seq *l = srv__seq_find(s->seqs, id);
    char what[128];
    if (l && l->live && !l->kill) {
        fill_info(l, srv_now_ns(), s->maps, out);
        return 0;
    }
    if (l && l->live) { /* dropped; it goes when its running step ends */
        snprintf(msg, n, "sequence '%s' is being dropped (%s): its cache "
                 "goes when its running step ends", id,
                 srv__seq_drop_why[l->kill_reason]);
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
        srv__seq_list_remove(head, tail, st);
        srv__seq_fail(st, 503, "server: shut down before this request ran");
    }
}

static void expire_fn(srv_seqs *q, srv_seq *l, void *arg)
{
    (void)arg;
    expire_list(&l->qhead, &l->qtail);
    srv__seq_gc(q, l);
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
    q->sweep_ms = period; /* told in the listing (idle_sweep_ms) */
    uv_timer_start(&q->idle, on_idle, period, period);
    q->timer_on = 1;
    return 0;
}

void srv_seq_stop(srv *s)
{
    if (s->seqs && s->seqs->n_live) /* what their clients must start again */
        srv_log(s, "info", "exit: %d live sequence%s dropped (their keys and "
                "values were memory state)", s->seqs->n_live,
                s->seqs->n_live == 1 ? "" : "s");
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
    srv__seq_release_cache(q, l);
    srv__seq_unbury(q, l);
    srv__seq_gc(q, l);
}

void srv_seq_free(srv *s)
{
    if (!s->seqs)
        return;
    each_seq(s->seqs, free_fn, NULL);
    free(s->seqs);
    s->seqs = NULL;
}
