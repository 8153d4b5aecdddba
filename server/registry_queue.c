/*
 * registry_queue.c - the repository calls (/v2/repository/models/{m}/load
 * and unload, and gRPC's RepositoryModelLoad and Unload, which come
 * through them) of one model, one at a time.
 *
 * The loads (plain or uploads) and unloads of one model take effect one at
 * a time, in the order they came, as Triton applies them: a call that
 * comes while a load of its model runs waits (its connection suspended)
 * until that load and the calls before it have ended, then runs. So once
 * every call is answered, what is served is what the last one made it:
 * the model its folder holds, or none after an unload; never weights read
 * before an upload published others, and never a load ending after an
 * unload that came later. Calls for other names do not wait.
 *
 * A call the same as the last one waiting (a client's retry, its first
 * try still waiting) joins it rather than queue behind it: it is answered
 * what that one is when it runs, takes no place of repository-waiters, and
 * the folder is not read again for it. The loading itself (the pool, the
 * instances) is registry.c's. Loop thread.
 */
#include "server/srv.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/json_mem.h"
#include "server/registry_int.h"
#include "server/upload.h"

/* ---- answers ------------------------------------------------------------ */

/* answer_one: r's answer: {"error": msg} with status, or 200 without a
 * body when msg is NULL (the call changed the model). */
static void answer_one(srv_req *r, int status, const char *msg)
{
    if (msg) {
        srv_respond_error(r, status, "%s", msg);
        return;
    }
    r->changed = 1;
    srv_respond(r, status, NULL, NULL, 0);
}

/* srv_registry__answer (registry_int.h): answer_one to r and to each
 * call that joined it (join_tail), in the order they came; they take r's
 * choice of Retry-After.
 * Each next call is read before the answer of the one before: a gRPC
 * request may be freed by its answer (grpc.c's on_answer, once its call
 * is gone), and r's list is emptied first, so that none is answered
 * twice. */
void srv_registry__answer(srv_req *r, int status, const char *msg)
{
    srv_req *j = r->joined, *next;
    int retry_after = r->retry_after;
    r->joined = r->joined_last = NULL;
    r->n_joined = 0;
    answer_one(r, status, msg);
    for (; j; j = next) {
        next = j->turn_next;
        j->turn_next = NULL;
        j->retry_after = retry_after;
        answer_one(j, status, msg);
    }
}

/* turn_error: srv_registry__answer with the message of fmt. */
static void turn_error(srv_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void turn_error(srv_req *r, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_registry__answer(r, status, msg);
}

/* ---- one call at a time per model -------------------------------------- */

/* plain_load: r, a load, reads its model's folder: it has no body, or one
 * without upload parameters (load_work's test), small enough to be read on
 * the loop thread (max-small-body, an unload's limit): a bigger one has an
 * upload's size. */
static int plain_load(const srv_req *r)
{
    return !r->body_len ||
           (r->body_len <= (size_t)r->s->cfg.max_small_body &&
            srv_upload_is_plain(r->body, r->body_len));
}

/* same_params: do a's and b's bodies hold the same parameters? The same
 * bytes, or the same JSON value (jansson's json_equal: the same keys with
 * equal values, in any order or spacing; no body reads as {}): what
 * attnd reads of a plain load's body. A body that is not a
 * JSON object, holds a key twice or is past max-small-body matches only
 * its own bytes; 0 when memory runs out. */
static int same_params(const srv_req *a, const srv_req *b)
{
    size_t cap = (size_t)a->s->cfg.max_small_body;
    json_t *ja, *jb;
    int same, nomem;
    if (a->body_len == b->body_len &&
        (!a->body_len || memcmp(a->body, b->body, a->body_len) == 0))
        return 1;
    if (a->body_len > cap || b->body_len > cap)
        return 0;
    ja = a->body_len ? attn_json_parse(a->body, a->body_len,
                                       JSON_REJECT_DUPLICATES, NULL, &nomem)
                     : json_object();
    jb = b->body_len ? attn_json_parse(b->body, b->body_len,
                                       JSON_REJECT_DUPLICATES, NULL, &nomem)
                     : json_object();
    same = json_is_object(ja) && json_is_object(jb) && json_equal(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return same;
}

/* ordinal: "st", "nd", "rd" or "th" after n. */
static const char *ordinal(int n)
{
    if (n % 100 >= 11 && n % 100 <= 13)
        return "th";
    return n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
}

/* join_tail: when r, a call of e that came while e's calls wait, is the
 * same as the last of them (the tail): both unloads (whatever their
 * bodies: attnd reads nothing of an unload's), or both loads of the folder
 * (never an upload: each publishes its own body) with the same
 * parameters, r takes no place in the queue (nor one of
 * repository-waiters): it waits, suspended, to be answered what the tail
 * is (srv_registry__answer), and 1 is returned; else 0, r untouched. Only
 * the tail: a call joined to an earlier one would run before the calls
 * between them; and never the call that runs, which may have read the
 * folder before r's client changed it. */
static int join_tail(srv_req *r, srv_entry *e, int unload)
{
    srv_req *t = e->turn_tail;
    if (!t || t->turn_unload != unload ||
        (!unload && (!plain_load(t) || !plain_load(r) || !same_params(t, r))))
        return 0;
    r->turn_unload = unload;
    r->turn_next = NULL; /* answered after t, in the order they came */
    if (t->joined)
        t->joined_last->turn_next = r;
    else
        t->joined = r;
    t->joined_last = r;
    t->n_joined++;
    srv_log(r->s, "info", "model '%s': %s joins the identical one waiting "
            "(its %d%s caller)", e->name, unload ? "unload" : "load",
            t->n_joined + 1, ordinal(t->n_joined + 1));
    srv_suspend(r);
    return 1;
}

/* wait_turn: r, a load (unload 0) or an unload of e, came while a load of
 * e runs: it joins the last call waiting when it is the same (join_tail),
 * or waits, suspended, for its turn (srv_registry__next_turn), or answers
 * 503 when repository-waiters calls wait already or the drain timeout has
 * passed. */
static void wait_turn(srv_req *r, srv_entry *e, int unload)
{
    srv *s = r->s;
    if (s->drain_expired) { /* nothing runs any more: it would wait for good */
        srv_respond_error(r, 503, "server: draining (shutting down)");
        return;
    }
    if (join_tail(r, e, unload))
        return;
    if (e->n_turns >= s->cfg.repository_waiters) {
        srv_respond_error(r, 503, "model '%s': %d repository calls wait already "
                          "for the load of it that runs (repository-waiters); "
                          "retry once they are answered", e->name, e->n_turns);
        return;
    }
    r->turn_unload = unload;
    r->turn_next = NULL;
    if (e->turn_tail)
        e->turn_tail->turn_next = r;
    else
        e->turn_head = r;
    e->turn_tail = r;
    e->n_turns++;
    srv_log(s, "info", "model '%s': %s waits for its turn (%d call%s before it)",
            e->name, unload ? "unload" : r->body_len ? "load with a body" : "load",
            e->n_turns, e->n_turns == 1 ? "" : "s");
    srv_suspend(r);
}

/* unload_now: r unloads e (no load of it runs): the model stops taking
 * requests at once; those already admitted finish on its weights. r and
 * the calls that joined it are answered. */
static void unload_now(srv_req *r, srv_entry *e)
{
    if (!e->inst) {
        turn_error(r, 404, "model '%s': not loaded", e->name);
        return;
    }
    srv_registry__unload(e);
    srv_registry__answer(r, 200, NULL);
}

/* load_now: r loads (or uploads) name (no load of it runs); suspended
 * until the load ends (registry.c's load_done), which answers it and the
 * calls that joined it. */
static void load_now(srv_req *r, const char *name)
{
    int rc = srv_registry__start_load(r->s, name, r);
    if (rc < 0) {
        turn_error(r, 503, "load of model '%s': %s", name,
                   srv_registry__start_error(-rc));
        return;
    }
    srv_suspend(r);
}

/* pop_turn: the call that has waited longest for e's turn, off the
 * queue, with the calls that joined it; NULL when none waits. */
static srv_req *pop_turn(srv_entry *e)
{
    srv_req *r = e->turn_head;
    if (!r)
        return NULL;
    e->turn_head = r->turn_next;
    if (!e->turn_head)
        e->turn_tail = NULL;
    r->turn_next = NULL;
    e->n_turns--;
    return r;
}

int srv_registry_waiting(const srv_entry *e)
{
    const srv_req *r;
    int n = 0;
    for (r = e->turn_head; r; r = r->turn_next)
        n += 1 + r->n_joined;
    return n;
}

void srv_registry__next_turn(srv_entry *e)
{
    srv_req *r;
    while (!e->busy && (r = pop_turn(e))) {
        if (r->turn_unload)
            unload_now(r, e);
        else
            load_now(r, e->name);
    }
}

void srv_registry_expire(srv *s)
{
    srv_entry *e;
    srv_req *r;
    for (e = s->models; e; e = e->next)
        while ((r = pop_turn(e)))
            turn_error(r, 503, "server: draining (shutting down): the drain "
                       "was cut short before its turn; not done");
}

/* name_ok: r's model name may be loaded or unloaded; else r is answered
 * 400 saying why. */
static int name_ok(srv_req *r)
{
    if (!model_name_valid(r->arg[0])) {
        srv_respond_error(r, 400, "model name '%s': use 1-128 characters of "
                          "[A-Za-z0-9._-], not starting with '.', without '..'",
                          r->arg[0]);
        return 0;
    }
    if (strcmp(r->arg[0], "sdpa") == 0) {
        srv_respond_error(r, 400, "model 'sdpa': built in; it cannot be "
                                  "loaded or unloaded");
        return 0;
    }
    return 1;
}

/* POST /v2/repository/models/{m}/load: from the folder, or an upload in the
 * body (parameters.config, parameters["file:model.safetensors"]); after
 * the calls of the model before it (wait_turn). */
void srv_h_load(srv_req *r)
{
    srv_entry *e;
    if (!name_ok(r))
        return;
    /* one begun before the signal is served, until the drain is cut short:
     * from then on nothing new runs (the stop would wait for it) */
    if (r->s->draining && (r->late || r->s->drain_expired)) {
        srv_respond_error(r, 503, "server: draining (shutting down)");
        return;
    }
    snprintf(r->model, sizeof r->model, "%.128s", r->arg[0]);
    e = srv_registry_find(r->s, r->arg[0]);
    if (e && e->busy)
        wait_turn(r, e, 0);
    else
        load_now(r, r->arg[0]);
}

/* POST /v2/repository/models/{m}/unload: after the calls of the model
 * before it (wait_turn), the model stops taking requests; those already
 * admitted finish on its weights. */
void srv_h_unload(srv_req *r)
{
    srv_entry *e;
    if (srv_registry_unload_refused(r))
        return;
    e = srv_registry_find(r->s, r->arg[0]);
    snprintf(r->model, sizeof r->model, "%s", e->name);
    if (e->busy)
        wait_turn(r, e, 1);
    else
        unload_now(r, e);
}

/* srv_registry_unload_refused (srv.h): also asked from an unload's head
 * when it waits for 100 Continue (http_head.c), its body never read; an
 * unload reads nothing of its body, so its answer is the same. */
int srv_registry_unload_refused(srv_req *r)
{
    srv_entry *e;
    if (!name_ok(r))
        return 1;
    e = srv_registry_find(r->s, r->arg[0]);
    if (!e) {
        srv_respond_error(r, 404, "model '%s': not loaded", r->arg[0]);
        return 1;
    }
    if (e->busy || e->inst)
        return 0;
    snprintf(r->model, sizeof r->model, "%s", e->name);
    srv_respond_error(r, 404, "model '%s': not loaded", e->name);
    return 1;
}
