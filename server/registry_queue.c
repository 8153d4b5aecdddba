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
 * The loading itself (the pool, the instances) is registry.c's. Loop
 * thread.
 */
#include "server/srv.h"

#include <stdio.h>
#include <string.h>

#include "server/registry_int.h"

/* ---- one call at a time per model -------------------------------------- */

/* wait_turn: r, a load (unload 0) or an unload of e, came while a load of
 * e runs: it waits, suspended, for its turn (srv_registry__next_turn), or
 * answers 503 when repository-waiters calls wait already or the drain
 * timeout has passed. */
static void wait_turn(srv_req *r, srv_entry *e, int unload)
{
    srv *s = r->s;
    if (s->drain_expired) { /* nothing runs any more: it would wait for good */
        srv_respond_error(r, 503, "server: draining (shutting down)");
        return;
    }
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
 * requests at once; those already admitted finish on its weights. */
static void unload_now(srv_req *r, srv_entry *e)
{
    if (!e->inst) {
        srv_respond_error(r, 404, "model '%s': not loaded", e->name);
        return;
    }
    srv_registry__unload(e);
    r->changed = 1;
    srv_respond(r, 200, NULL, NULL, 0);
}

/* load_now: r loads (or uploads) name (no load of it runs); suspended
 * until the load ends (registry.c's load_done), which answers it. */
static void load_now(srv_req *r, const char *name)
{
    int rc = srv_registry__start_load(r->s, name, r);
    if (rc < 0) {
        srv_respond_error(r, 503, "load of model '%s': %s", name,
                          srv_registry__start_error(-rc));
        return;
    }
    srv_suspend(r);
}

/* pop_turn: the call that has waited longest for e's turn, off the
 * queue; NULL when none waits. */
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
            srv_respond_error(r, 503, "server: draining (shutting down): the "
                              "drain timeout passed before its turn; not done");
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
    if (r->s->draining && r->late) { /* begun before the signal: served */
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
    if (!name_ok(r))
        return;
    e = srv_registry_find(r->s, r->arg[0]);
    if (!e) {
        srv_respond_error(r, 404, "model '%s': not loaded", r->arg[0]);
        return;
    }
    snprintf(r->model, sizeof r->model, "%s", e->name);
    if (e->busy)
        wait_turn(r, e, 1);
    else
        unload_now(r, e);
}
