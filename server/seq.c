/*
 * seq.c - the life of sequences on the loop thread: ids, the arrival order
 * of steps, start / restart / end, the K/V pages around each step (drops,
 * the sequences remembered as gone, idle expiry and listing: seq_drops.c).
 * See seq.h for the path of a step.
 */
#include "server/seq_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned hash(const char *id)
{
    unsigned h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h % N_BUCKETS;
}

srv_seq *srv__seq_find(srv_seqs *q, const char *id)
{
    srv_seq *l;
    for (l = q->bucket[hash(id)]; l; l = l->hnext)
        if (strcmp(l->id, id) == 0)
            return l;
    return NULL;
}

/* srv__seq_gc: forget l when nothing refers to it any more. */
void srv__seq_gc(srv_seqs *q, srv_seq *l)
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

/* srv__seq_expect: l's next step is (on) or is no longer (off) expected
 * soon: its last one was just answered. The batcher waits a little for expected
 * steps (batch.c, --sequence-wait-us); it forgets them all at once by
 * moving to a new generation, so a flag of an old one counts no more. */
void srv__seq_expect(srv_seq *l, int on)
{
    srv_entry *e = l->e;
    if (l->expected && l->expect_gen == e->expect_gen && e->seq_expected > 0)
        e->seq_expected--;
    l->expected = on;
    l->expect_gen = e->expect_gen;
    if (on)
        e->seq_expected++;
}

/* ---- the lists ------------------------------------------------------------ */

void srv__seq_list_remove(srv_step **head, srv_step **tail, srv_step *st)
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

/* srv__seq_fail: st leaves the machinery and its job answers status. */
void srv__seq_fail(srv_step *st, int status, const char *msg)
{
    st->where = SRV_STEP_NONE;
    srv__sched_fail(st->job, status, msg);
}

/* fail_gone: st's sequence is not live (l: its tombstone, or NULL): the
 * 400 that says how it went, or the 409 of an ended one's step sent again. */
static void fail_gone(srv_step *st, const srv_seq *l)
{
    char msg[512];
    srv__seq_fail(st, srv__seq_gone_msg(msg, sizeof msg, st->id, l, st), msg);
}

/* kick: make l's next waiting step active (checked against l's state now
 * that every earlier step of l has ended), or fail it and try the next. */
static void kick(srv_seqs *q, srv_seq *l)
{
    char msg[512];
    while (!l->active && l->qhead) {
        srv_step *st = l->qhead;
        srv__seq_list_remove(&l->qhead, &l->qtail, st);
        st->where = SRV_STEP_NONE;
        st->seq = l;
        if (st->start) {
            if (!st->inst->kv_pool || q->s->cfg.max_sequences < 1) {
                /* off: a retry would never do better, so not a 503 */
                if (st->inst->kv_pool)
                    snprintf(msg, sizeof msg, "sequences: off (max-sequences 0)");
                else if (st->inst->kv_why[0]) /* kv-bytes set, no pool */
                    snprintf(msg, sizeof msg, "sequences: model '%s' keeps no "
                             "K/V cache: %s (at its load, whatever "
                             "--kv-bytes)", st->e->name, st->inst->kv_why);
                else
                    snprintf(msg, sizeof msg, "sequences: model '%s' keeps no "
                             "K/V cache (kv-bytes 0)", st->e->name);
                srv__seq_fail(st, 400, msg);
                continue;
            }
            if (!l->live && q->n_live + q->n_starting >=
                                (int)q->s->cfg.max_sequences) {
                snprintf(msg, sizeof msg, "sequences: %d live or starting "
                         "(max-sequences %lld); end some or retry later",
                         q->n_live + q->n_starting, q->s->cfg.max_sequences);
                st->e->seq_stats.refused[SRV_REFUSE_MAX_SEQUENCES]++;
                srv__seq_fail(st, 503, msg);
                continue;
            }
            st->starting = !l->live;
            q->n_starting += st->starting;
            attn_kv_init(&st->fresh, st->inst->kv_pool);
            st->kv = &st->fresh;
            st->map_id[0] = 0;
            st->map_scores = 0;
        } else {
            if (!l->live) {
                fail_gone(st, l);
                continue;
            }
            if (l->e != st->e || l->inst != st->inst) {
                snprintf(msg, sizeof msg, "parameters.sequence_id: sequence "
                         "'%s' belongs to model '%s'%s; send sequence_start: "
                         "true to begin it on '%s'", st->id, l->e->name,
                         l->e == st->e ? " as it was before a reload" : "",
                         st->e->name);
                srv__seq_fail(st, 400, msg);
                continue;
            }
            if (st->retain && !l->retained) {
                snprintf(msg, sizeof msg, "parameters.retain: sequence '%s' "
                         "keeps no map (retain is decided by its "
                         "sequence_start step)", st->id);
                srv__seq_fail(st, 400, msg);
                continue;
            }
            if (st->has_pos && st->pos > l->kv.len) {
                snprintf(msg, sizeof msg, "parameters.sequence_position: %d "
                         "is past the end of sequence '%s', which holds %d "
                         "token%s; send its tokens from position %d first (a "
                         "step at the length appends, one below it replaces "
                         "the tokens from there on)", st->pos, st->id,
                         l->kv.len, l->kv.len == 1 ? "" : "s", l->kv.len);
                srv__seq_fail(st, 409, msg);
                continue;
            }
            st->kv = &l->kv;
            srv_copy(st->map_id, sizeof st->map_id, l->map_id);
            st->map_scores = l->map_scores;
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
    srv_seq *l = srv__seq_find(q, st->id);
    if (!l && !st->start) {
        fail_gone(st, NULL);
        return;
    }
    if (!l) {
        unsigned h = hash(st->id);
        l = calloc(1, sizeof *l);
        if (!l) {
            srv__seq_fail(st, 503, "sequences: out of memory");
            return;
        }
        srv_copy(l->id, sizeof l->id, st->id);
        l->e = st->e;
        l->hnext = q->bucket[h];
        q->bucket[h] = l;
    }
    srv__seq_expect(l, 0); /* it came */
    if (l->live) /* a step came: not idle, whatever its answer will be */
        l->last_ns = srv_now_ns();
    st->where = SRV_STEP_WAITING;
    st->seq = l;
    list_append(&l->qhead, &l->qtail, st);
    kick(q, l);
    srv__seq_gc(q, l); /* a start refused at once leaves nothing behind */
}

/* release: every held step with no earlier arrival still decoding goes
 * to its sequence, in arrival order. */
static void release(srv_seqs *q)
{
    while (q->held_head &&
           (!q->dec_head || q->held_head->ticket < q->dec_head->ticket)) {
        srv_step *st = q->held_head;
        srv__seq_list_remove(&q->held_head, &q->held_tail, st);
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
    srv__seq_list_remove(&q->dec_head, &q->dec_tail, st);
    st->where = SRV_STEP_NONE;
    release(q);
}

void srv_seq_decoded(srv *s, srv_step *st, int take)
{
    srv_seqs *q = s->seqs;
    srv_step *p;
    if (st->where == SRV_STEP_DECODING)
        srv__seq_list_remove(&q->dec_head, &q->dec_tail, st);
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
    } else if (st->id[0] || st->hdr_id[0]) {
        /* a step that failed after its decode (no memory-budget for it:
         * 503 "retry shortly"; or answered already), or failed its check
         * on the pool (a wrong shape or parameter: 400), or its decode
         * with the Attnd-Sequence-Id header: a step all the same, its
         * client is there (README's Lifetime) */
        srv_seq_touch(s, st->id[0] ? st->id : st->hdr_id);
    }
    release(q);
}

int srv_seq_live(srv *s, const char *id)
{
    const srv_seq *l = s->seqs ? srv__seq_find(s->seqs, id) : NULL;
    return l && l->live && !l->kill;
}

void srv_seq_touch(srv *s, const char *id)
{
    srv_seq *l = s->seqs ? srv__seq_find(s->seqs, id) : NULL;
    if (l && l->live) /* a step all the same: not idle (route's rule) */
        l->last_ns = srv_now_ns();
}

int srv_seq_check_failed(srv *s, const srv_step *st, const char *err,
                         char *msg, size_t n)
{
    srv_seqs *q = s->seqs;
    const srv_seq *l;
    const srv_step *h;
    char gone[512];
    int rc;
    if (!st->id[0] || st->start || st->is_step || !q)
        return 0;
    l = srv__seq_find(q, st->id);
    /* remembered as gone, and no step of it on its way to make it live
     * again (a start queued behind a running step) */
    if (!l || !l->gone || l->live || l->active || l->qhead)
        return 0;
    /* nor one that came before this one and is not in l's queue yet: a
     * start of it held (decoded, waiting for an earlier arrival: its id
     * is the loop's to read now, as step_held's), or any request that
     * arrived earlier and is still decoding (its id is the pool's until
     * it is decoded: any of them may be a start of it). The plain check
     * error then, as for a step of a live sequence. (The decoding list
     * is in ticket order; st has left it.) */
    if (q->dec_head && q->dec_head->ticket < st->ticket)
        return 0;
    for (h = q->held_head; h; h = h->next)
        if (strcmp(h->id, st->id) == 0)
            return 0;
    rc = srv__seq_gone_msg(gone, sizeof gone, st->id, l, st);
    /* "for the model as it is now" only where the model changed under
     * it; the check may have failed on a parameter as well (the 400 of
     * an ended sequence too: a step that fails its check was never
     * carried out, so it is no repeat of one that was, the 409) */
    snprintf(msg, n, "%s; this step is also wrong%s: %s", gone,
             l->gone == GONE_DROPPED && l->gone_reason == SRV_DROP_UNLOADED
                 ? " for the model as it is now" : "", err);
    return rc;
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

/* kv_need: the bytes of pages kv holds once t more tokens are in it. */
static size_t kv_need(const attn_kv *kv, int t)
{
    size_t page = (size_t)attn_kv_page_tokens(kv->pool);
    return ((size_t)kv->len + (size_t)t + page - 1) / page *
           attn_kv_page_bytes(kv->pool);
}

/* restart_held: the bytes of K/V a restart (a start of a live sequence)
 * leaves held in its own pool until it is answered: the old cache's, in
 * the pool the new one comes from; 0 for any other step. */
static size_t restart_held(const srv_step *st)
{
    const srv_seq *l = st->seq;
    return st->start && l->live && l->kv.pool == st->kv->pool
               ? attn_kv_bytes(&l->kv)
               : 0;
}

/* whole_cache_msg: the 400 of a step of t tokens whose sequence would
 * need more than the whole K/V cache (need bytes), saying what can be
 * done: fewer tokens while some still fit; at the cache's length, an end
 * or a step lower down (a decoder's one token cannot be fewer); for a
 * restart, whose new cache is built beside the old one, the tokens that
 * fit beside it, or all of them once it is deleted or replaced in place
 * (at sequence_position 0); and, for a cache smaller than one page, the
 * setting: no sequence fits. */
static void whole_cache_msg(char *err, const srv_step *st, int t, size_t need)
{
    const attn_kv_pool *pool = st->kv->pool;
    size_t budget = attn_kv_pool_budget(pool), page = attn_kv_page_bytes(pool);
    long long cap = (long long)(budget / page) * attn_kv_page_tokens(pool);
    size_t held = restart_held(st);
    int len = st->kv->len;
    int k;
    if (cap == 0) {
        snprintf(err, OIP_ERRMAX, "sequences: the whole K/V cache of model "
                 "'%s' (%zu bytes, kv-bytes) is less than one page of its "
                 "keys and values (%d tokens, %zu bytes): it holds no "
                 "sequence; raise --kv-bytes to at least %zu", st->e->name,
                 budget, attn_kv_page_tokens(pool), page, page);
        return;
    }
    if (held) { /* a restart: its old pages stay beside the new ones */
        long long room = cap - (long long)(held / page) *
                                   attn_kv_page_tokens(pool);
        /* (60-byte id and name, every number at its most: 511 bytes) */
        k = snprintf(err, OIP_ERRMAX, "sequences: the restart of sequence "
                     "'%.60s' with %d token%s exceeds the whole K/V cache of "
                     "model '%.60s' (%zu bytes, kv-bytes: %lld tokens): no "
                     "retry can take it; ", st->id, t, t == 1 ? "" : "s",
                     st->e->name, budget, cap);
        if (k < 0 || k >= OIP_ERRMAX)
            return;
        if (room > 0)
            snprintf(err + k, OIP_ERRMAX - (size_t)k, "its old tokens stay "
                     "until answered: send at most %lld with sequence_start, "
                     "or as many as the cache holds after DELETE "
                     "/v2/sequences/{id} or without sequence_start at "
                     "sequence_position 0", room);
        else
            snprintf(err + k, OIP_ERRMAX - (size_t)k, "its old tokens fill "
                     "the cache until it is answered: send at most %lld "
                     "after DELETE /v2/sequences/{id}, or without "
                     "sequence_start at sequence_position 0", cap);
        return;
    }
    /* the id and the name to their first 60 bytes: whole (up to 128
     * each) they pushed the advice past OIP_ERRMAX; so, with every number
     * at its type's most, the message is 504 bytes */
    k = snprintf(err, OIP_ERRMAX, "sequences: sequence '%.60s' from %d to %d "
                 "token%s would need %zu bytes of K/V, more than the whole "
                 "K/V cache of model '%.60s' (%zu bytes, kv-bytes: %lld tokens)",
                 st->id, len, len + t, len + t == 1 ? "" : "s", need,
                 st->e->name, budget, cap);
    if (k < 0 || k >= OIP_ERRMAX)
        return;
    if (len < cap)
        snprintf(err + k, OIP_ERRMAX - (size_t)k, ": no retry can take it; "
                 "send at most %lld token%s", cap - len,
                 cap - len == 1 ? "" : "s");
    else
        snprintf(err + k, OIP_ERRMAX - (size_t)k, ", which its %d tokens "
                 "fill: no retry can take a token more; end it, or send a "
                 "step at a sequence_position below %d to replace tokens (or "
                 "raise --kv-bytes)", len, len);
}

int srv_seq_bind(srv_step *st, size_t *mem, char *err)
{
    srv *s = st->e->s;
    attn_seq *a = &st->prep->seqs[0];
    size_t memory = (size_t)s->cfg.request_memory, nb = 0, need;
    char kerr[ATTN_ERRMAX];
    int rc, status = 0, reserved = 0;
    if (!st->start && !st->seq->live) { /* dropped while it queued */
        const srv_seq *l = st->seq;
        snprintf(err, OIP_ERRMAX, "parameters.sequence_id: sequence '%s' was "
                 "dropped (%s) before this step ran; send sequence_start: true "
                 "with the whole history to begin it again", st->id,
                 l->gone == GONE_DROPPED ? srv__seq_drop_why[l->gone_reason]
                                         : "deleted, idle or model unloaded");
        return 400;
    }
    /* a step at a position other than the length (kick refused one past
     * it) replaces the tokens from there on: the cache is rewound, what
     * the pass overwrites kept (within request-memory) to be put back if
     * the step fails */
    if (st->has_pos && !st->start && st->pos != st->kv->len) {
        nb = attn_kv_rewind_bytes(st->kv, st->pos, a->t);
        if (st->in->bytes + st->prep->bytes + st->prep->extra + nb > memory) {
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
    if (rc == ATTN_EFULL && (need = kv_need(st->kv, a->t)) >
                                attn_kv_pool_budget(st->kv->pool)) {
        /* more than the whole cache: no sequence's end makes room */
        whole_cache_msg(err, st, a->t, need);
        status = 400;
        goto fail;
    }
    if (rc == ATTN_EFULL && restart_held(st) >
                                attn_kv_pool_budget(st->kv->pool) - need) {
        /* a restart beside its own old cache, which it keeps until it is
         * answered: no other sequence's end makes room either */
        snprintf(err, OIP_ERRMAX, "sequences: the restart of sequence "
                 "'%.60s' needs %zu bytes of K/V beside the %zu its old "
                 "tokens hold until it is answered, more than the whole K/V "
                 "cache of model '%.60s' (%zu bytes, kv-bytes): no retry can "
                 "take it; DELETE /v2/sequences/{id} first, or send its "
                 "tokens without sequence_start at sequence_position 0 (they "
                 "replace the old ones in place)", st->id, need,
                 restart_held(st), st->e->name,
                 attn_kv_pool_budget(st->kv->pool));
        status = 400;
        goto fail;
    }
    if (rc == ATTN_EFULL) {
        snprintf(err, OIP_ERRMAX, "sequences: the K/V cache of model '%s' is "
                 "full (%zu of %lld bytes, kv-bytes) and cannot take sequence "
                 "'%s' from %d to %d token%s; end sequences or retry later",
                 st->e->name, attn_kv_pool_used(st->kv->pool),
                 s->cfg.kv_bytes, st->id, st->kv->len, st->kv->len + a->t,
                 st->kv->len + a->t == 1 ? "" : "s");
        st->e->seq_stats.refused[SRV_REFUSE_KV_FULL]++;
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
                                st->map_scores, /* 0 on a start (kick) */
                                memory, err);
    if (status)
        goto fail;
    /* what it holds now counts against memory-budget: *mem is its decoded
     * request and outputs as its decode left them (sched.c) */
    need = st->in->bytes + st->prep->bytes + st->prep->extra + nb;
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
        srv__seq_list_remove(&q->dec_head, &q->dec_tail, st);
        st->where = SRV_STEP_NONE;
        release(q);
        return;
    case SRV_STEP_HELD:
        srv__seq_list_remove(&q->held_head, &q->held_tail, st);
        st->where = SRV_STEP_NONE;
        return;
    case SRV_STEP_WAITING:
        srv__seq_list_remove(&l->qhead, &l->qtail, st);
        st->where = SRV_STEP_NONE;
        srv__seq_gc(q, l);
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
    /* the sequence is idle from its last step's end, answered 200 or not
     * (a client retrying a 503 as told is not idle) */
    l->last_ns = srv_now_ns();
    if (!ok || !st->bound) {
        if (st->start) {
            attn_kv_free(&st->fresh);
        } else if (st->bound) {
            end_rewind(st, 0);
            attn_kv_trim(st->kv);
        }
        /* a failed start's new map goes; a step's grown map was never put
         * in the store (below), so a page following the map shows only
         * steps that were answered */
        if (st->bound && st->start && st->map_id[0] && q->s->maps)
            maps_drop(q->s->maps, st->map_id);
        maps_grown_free(st->grown);
        st->grown = NULL;
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
                srv__seq_release_cache(q, l);
            }
            l->kv = st->fresh; /* the page table moves; no page is copied */
            memset(&st->fresh, 0, sizeof st->fresh);
            l->e = st->e;
            l->inst = st->inst;
            l->inst->refs++;
            l->live = 1;
            srv__seq_unbury(q, l);
            l->retained = st->retain;
            q->n_live++;
            l->e->seq_stats.live++;
            l->e->seq_stats.started++;
        }
        /* answered: its grown map replaces the map (before any reader
         * that its answer sends can look); a map that could not take its
         * rows ends (404 from now on, its waiters answered): it goes on
         * without one */
        if (st->grown && maps_grow_put(q->s->maps, st->grown) < 0)
            st->map_id[0] = 0; /* evicted meanwhile */
        st->grown = NULL;
        if (st->map_ends && st->map_id[0]) {
            srv_log(q->s, "info", "sequence '%s': its map %s ends: %s", st->id,
                    st->map_id, st->map_end_why);
            maps_drop(q->s->maps, st->map_id);
            st->map_id[0] = 0;
        }
        srv_copy(l->map_id, sizeof l->map_id, st->map_id);
        l->map_scores = st->map_id[0] && st->map_scores;
        if (st->end) {
            int len = l->kv.len;
            l->e->seq_stats.ended++;
            srv__seq_release_cache(q, l);
            srv__seq_bury(q, l, GONE_ENDED, 0, len);
        } else if (l->inst != l->e->inst) { /* reloaded while it ran */
            if (!l->kill)
                l->kill_reason = SRV_DROP_UNLOADED;
            l->kill = 1;
        }
    }
    st->bound = 0;
    if (l->kill) {
        l->kill = 0;
        srv__seq_drop(q, l, l->kill_reason);
    }
    /* answered and going on: its client is likely to send the next step
     * soon (unless it already did) */
    if (ok && l->live && !l->qhead)
        srv__seq_expect(l, 1);
    kick(q, l);
    srv__seq_gc(q, l);
}
