/*
 * registry.c - the models the daemon serves: the built-in sdpa plus every
 * folder of the repository, loaded at start and at runtime
 * (/v2/repository/...). Loading (file I/O, conversion) runs on the pool; the
 * registry itself is loop-thread state. Instances are reference counted so
 * an unload or reload lets in-flight requests finish on the old weights.
 * The load and unload calls themselves, one at a time per model, are
 * registry_queue.c's.
 */
#include "server/srv.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "core/json_mem.h"
#include "server/maps_norm.h"
#include "server/registry_int.h"
#include "server/seq.h"
#include "server/upload.h"

srv_entry *srv_registry_find(srv *s, const char *name)
{
    srv_entry *e;
    for (e = s->models; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* srv_respond_no_model: the 404 of a request naming a model not served, e
 * its entry (NULL: a name attnd does not know), saying what to do: an
 * unknown name lists the models served (a mistyped name's fix), one not
 * loaded its reason and the call that loads it. */
void srv_respond_no_model(srv_req *r, const char *name, const srv_entry *e)
{
    char list[400];
    size_t n = 0;
    const srv_entry *m;
    if (e) {
        srv_respond_error(r, 404, "model '%s': not loaded (%s); load it with "
                          "POST /v2/repository/models/%s/load", name,
                          e->reason[0] ? e->reason : "unloaded", name);
        return;
    }
    list[0] = 0;
    for (m = r->s->models; m; m = m->next) {
        size_t len = strlen(m->name);
        if (!m->inst)
            continue;
        if (n + len + 7 >= sizeof list) { /* ", " name, or ", ..." */
            snprintf(list + n, sizeof list - n, "%s...", n ? ", " : "");
            break;
        }
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "",
                              m->name);
    }
    srv_respond_error(r, 404, "model '%s': not found; served: %s (POST "
                      "/v2/repository/index lists every model, loaded or not)",
                      name, n ? list : "none");
}

/* add_entry: the entry for name, created UNAVAILABLE if new. NULL with
 * errno when it cannot be made: ENOMEM, or EMFILE/ENFILE (its batch timer
 * is a timerfd). */
static srv_entry *add_entry(srv *s, const char *name)
{
    srv_entry *e = srv_registry_find(s, name), **tail;
    if (e)
        return e;
    e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->s = s;
    snprintf(e->name, sizeof e->name, "%s", name);
    if (srv_sched_entry_init(e) < 0) {
        int err = errno;
        free(e);
        errno = err;
        return NULL;
    }
    for (tail = &s->models; *tail; tail = &(*tail)->next)
        ;
    *tail = e;
    return e;
}

/* entry_closed: one of a dropped entry's handles closed; the last frees
 * it. */
static void entry_closed(uv_handle_t *h)
{
    srv_entry *e = h->data;
    if (--e->closing == 0) {
        srv_sched_entry_free(e); /* its timerfd, once its poll is closed */
        srv_stats_free(&e->stats);
        free(e);
    }
}

/* drop_entry: e, which never had an instance (so no job, sequence or
 * statistic refers to it), leaves the registry. */
static void drop_entry(srv *s, srv_entry *e)
{
    srv_entry **p;
    for (p = &s->models; *p && *p != e; p = &(*p)->next)
        ;
    if (*p)
        *p = e->next;
    e->closing = 3;
    uv_close((uv_handle_t *)&e->batch_poll, entry_closed);
    uv_close((uv_handle_t *)&e->pump_idle, entry_closed);
    uv_close((uv_handle_t *)&e->helpers, entry_closed);
}

void srv_inst_unref(srv_inst *in)
{
    srv_inst **pp;
    if (in && --in->refs == 0) {
        if (in->retired_of) /* off its entry's retired list */
            for (pp = &in->retired_of->retired; *pp; pp = &(*pp)->rnext)
                if (*pp == in) {
                    *pp = in->rnext;
                    break;
                }
        attn_kv_pool_destroy(in->kv_pool); /* its sequences hold refs */
        if (in->m) /* its weights back to the kernel soon (memtrim.c) */
            srv_memtrim_note(model_bytes(in->m) + maps_grams_held(in->grams));
        maps_grams_destroy(in->grams);
        model_destroy(in->m);
        free(in);
    }
}

/* set_inst: make in (NULL = none) the entry's current instance. The old
 * instance's sequences are dropped ("unloaded"). */
static void set_inst(srv_entry *e, srv_inst *in, int state, const char *reason)
{
    srv_inst *old = e->inst;
    if (old)
        srv_seq_drop_model(e);
    if (old && old->refs > 1) { /* its pages and weights still held */
        old->retired_of = e;
        old->rnext = e->retired;
        e->retired = old;
    }
    e->ever |= in != NULL;
    e->inst = in;
    e->state = state;
    snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
    srv_inst_unref(old);
}

void srv_registry__unload(srv_entry *e)
{
    e->startup = 0;
    set_inst(e, NULL, SRV_UNAVAILABLE, "unloaded");
}

int srv_registry_ready(const srv *s)
{
    const srv_entry *e;
    if (s->startup_loads)
        return 0;
    for (e = s->models; e; e = e->next)
        if (e->startup && e->state != SRV_READY)
            return 0;
    return 1;
}

/* ---- loading on the pool ------------------------------------------------ */

typedef struct load_job {
    uv_work_t work;
    srv *s;
    srv_req *req;       /* NULL at startup */
    char name[SRV_NAME_MAX];
    char *repo;
    char *body;         /* load request body (owned), may be NULL; {} or
                           one without upload parameters loads the folder */
    size_t body_len;
    model *m;           /* result */
    size_t mem;         /* the body's share of memory-budget */
    int rc;             /* 0, or the HTTP status of the failure */
    int in_repo;        /* failed, but repo/name is a folder */
    int lasting;        /* the failure is the repository disk's state: no
                           Retry-After (srv_upload_install) */
    char err[ATTN_ERRMAX + 128];
} load_job;

/* in_repo: is repo/name a folder? Pool thread. */
static int in_repo(const char *repo, const char *name)
{
    char path[4096];
    struct stat st;
    return snprintf(path, sizeof path, "%s/%s", repo, name) < (int)sizeof path &&
           stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* load_work: pool thread. An upload body installs the model into the
 * repository (srv_upload_install); no body, or one without upload
 * parameters, loads repo/name. Sets lj->m, or lj->rc and lj->err. */
static void load_work(uv_work_t *w)
{
    load_job *lj = w->data;
    char err[ATTN_ERRMAX];
    int rc;
    srv_pool_job("loading", lj->name);
    if (lj->body_len && !srv_upload_is_plain(lj->body, lj->body_len)) {
        rc = srv_upload_install(lj->repo, lj->name, lj->body, lj->body_len,
                                &lj->m, &lj->lasting, lj->err, sizeof lj->err);
        lj->rc = rc;
        lj->in_repo = rc && in_repo(lj->repo, lj->name);
        return;
    }
    rc = model_load_repo(&lj->m, lj->repo, lj->name, err);
    if (rc < 0) {
        /* not there: 404; there but not attnd's to read, or a failing
         * disk (ATTN_EIO): 503 without Retry-After, as an upload to a
         * repository attnd may not write, until someone acts */
        lj->rc = rc == ATTN_ENOTFOUND ? 404
                 : rc == ATTN_ENOMEM || rc == ATTN_ECHANGED || rc == ATTN_EIO
                     ? 503
                     : 400;
        lj->lasting = rc == ATTN_EIO;
        snprintf(lj->err, sizeof lj->err, "model '%s': %.480s", lj->name, err);
        lj->in_repo = in_repo(lj->repo, lj->name);
    }
}

/* kv_pool: in's K/V page pool for sequences (kv-bytes, kv-dtype); without
 * one (kv-bytes 0, or it cannot be made) sequence starts answer 400. */
static void kv_pool(srv *s, srv_inst *in, const char *name)
{
    attn_kv_dtype dt = ATTN_KV_F32;
    char err[ATTN_ERRMAX];
    if (!s->cfg.kv_bytes)
        return;
    attn_kv_dtype_parse(s->cfg.kv_dtype, &dt);
    if (attn_kv_pool_create(&in->kv_pool, model_config(in->m), dt, 0,
                            (size_t)s->cfg.kv_bytes, err) < 0) {
        in->kv_pool = NULL;
        srv_copy(in->kv_why, sizeof in->kv_why, err); /* its starts say it */
        srv_log(s, "warn", "model '%s': no K/V cache for sequences: %s", name, err);
    } else if (attn_kv_pool_budget(in->kv_pool) <
               attn_kv_page_bytes(in->kv_pool)) {
        /* every start would be 400: said once here, not only to clients */
        srv_log(s, "warn", "model '%s': --kv-bytes %lld is less than one page "
                "of its keys and values (%d tokens, %zu bytes): it holds no "
                "sequence; raise --kv-bytes to at least %zu", name,
                s->cfg.kv_bytes, attn_kv_page_tokens(in->kv_pool),
                attn_kv_page_bytes(in->kv_pool),
                attn_kv_page_bytes(in->kv_pool));
    }
}

/* set_reason: e's reason from a load's error, without the model's name
 * the error opens with ("model 'x': ", "upload of model 'x': "): the index
 * row and "model 'x': not loaded (...)" name it already. */
static void set_reason(srv_entry *e, const char *err)
{
    char pre[SRV_NAME_MAX + 32];
    size_t n;
    snprintf(pre, sizeof pre, "model '%s': ", e->name);
    n = strlen(pre);
    if (strncmp(err, pre, n) == 0) {
        snprintf(e->reason, sizeof e->reason, "%.500s", err + n);
        return;
    }
    snprintf(pre, sizeof pre, "upload of model '%s': ", e->name);
    n = strlen(pre);
    if (strncmp(err, pre, n) == 0)
        snprintf(e->reason, sizeof e->reason, "upload: %.500s", err + n);
    else
        snprintf(e->reason, sizeof e->reason, "%.500s", err);
}

/* load_done: loop thread. Makes the loaded model the entry's current
 * instance (the old one goes when its last job ends), or records why it
 * failed; answers the load request if there is one, and the calls that
 * joined it (srv_registry__answer); frees lj. Then the calls of the model
 * that waited for it run (srv_registry__next_turn). */
static void load_done(uv_work_t *w, int status)
{
    load_job *lj = w->data;
    srv *s = lj->s;
    srv_entry *e = srv_registry_find(s, lj->name); /* its start made it */
    int drop = 0;
    (void)status;
    if (!lj->req)
        s->startup_loads--;
    e->busy = 0;
    if (!lj->rc && lj->err[0]) /* an upload's note (srv_upload_install) */
        srv_log(s, "warn", "load: %s", lj->err);
    if (lj->rc) {
        if (e->state == SRV_LOADING)
            e->state = e->inst ? SRV_READY : SRV_UNAVAILABLE;
        if (!e->inst)
            set_reason(e, lj->err);
        srv_log(s, "error", "load: %s", lj->err);
        if (lj->req) {
            if (lj->lasting) /* a retry in a second would fail the same */
                lj->req->retry_after = -1;
            srv_registry__answer(lj->req, lj->rc, lj->err);
        }
        model_destroy(lj->m);
        /* a name that never loaded and has no folder in the repository
         * (a load of a name that is not there, a failed upload) leaves
         * nothing behind: such names would pile up in the index and in
         * /metrics. A folder that failed keeps its entry, and the index
         * its reason. Not while calls wait for it: they run first */
        drop = !lj->in_repo;
    } else {
        srv_inst *in = calloc(1, sizeof *in);
        /* its what=norm cache (empty: made at its first retained request)
         * is part of it, like its own struct */
        if (!in || maps_grams_create(&in->grams, model_config(lj->m),
                                     model_weights(lj->m))) {
            free(in);
            model_destroy(lj->m);
            e->state = e->inst ? SRV_READY : SRV_UNAVAILABLE;
            if (lj->req) {
                char msg[SRV_NAME_MAX + 32];
                snprintf(msg, sizeof msg, "model '%s': out of memory", lj->name);
                srv_registry__answer(lj->req, 503, msg);
            }
        } else {
            in->m = lj->m;
            in->refs = 1;
            kv_pool(s, in, e->name);
            set_inst(e, in, SRV_READY, NULL);
            srv_log(s, "info", "model '%s' loaded (%zu weight bytes)", e->name,
                    model_bytes(lj->m));
            srv_memfit_loaded(s, e);
            if (lj->req)
                srv_registry__answer(lj->req, 200, NULL);
        }
    }
    srv_mem_give(s, lj->mem);
    free(lj->body);
    free(lj);
    srv_registry__next_turn(e);
    if (drop && !e->ever && !e->startup && !e->busy && !s->stopping)
        drop_entry(s, e); /* stopping closed its handles: freed at exit */
}

const char *srv_registry__start_error(int e)
{
    return e == EMFILE || e == ENFILE
               ? "cannot start: out of file descriptors (raise ulimit -n)"
               : e == ENOMEM ? "out of memory" : strerror(e);
}

int srv_registry__start_load(srv *s, const char *name, srv_req *req)
{
    load_job *lj = calloc(1, sizeof *lj);
    srv_entry *e = lj ? add_entry(s, name) : NULL;
    if (!e) {
        int err = lj ? errno : ENOMEM;
        free(lj);
        return -err;
    }
    lj->work.data = lj;
    lj->s = s;
    lj->req = req;
    lj->repo = s->cfg.models;
    snprintf(lj->name, sizeof lj->name, "%s", name);
    if (req && req->body_len) {
        lj->body = req->body; /* the job takes the body */
        lj->body_len = req->body_len;
        req->body = NULL;
        req->body_len = req->body_cap = 0;
        lj->mem = req->mem; /* and its share of memory-budget */
        req->mem = 0;
    }
    e->busy = 1;
    if (e->state != SRV_READY)
        e->state = SRV_LOADING;
    if (!req) {
        e->startup = 1;
        s->startup_loads++;
    }
    uv_queue_work(s->loop, &lj->work, load_work, load_done);
    return 0;
}

int srv_registry_start(srv *s, char *err)
{
    srv_entry *e = add_entry(s, "sdpa");
    srv_inst *in = calloc(1, sizeof *in);
    char **names, lerr[ATTN_ERRMAX];
    int i, n, rc = 0;
    if (!e || !in) {
        free(in);
        snprintf(err, SRV_ERRMAX, "out of memory");
        return -1;
    }
    in->builtin = 1;
    in->refs = 1;
    set_inst(e, in, SRV_READY, NULL);
    if (srv_upload_sweep(s->cfg.models, lerr, sizeof lerr) > 0)
        srv_log(s, "warn", "%s", lerr);
    n = model_repo_list(s->cfg.models, &names, lerr);
    if (n == ATTN_ENOMEM) { /* not "no folder": ready without its models */
        snprintf(err, SRV_ERRMAX, "--models: %.400s", lerr);
        return -1;
    }
    if (n < 0) {
        srv_log(s, "warn", "--models: %s; serving only sdpa", lerr);
        return 0;
    }
    for (i = 0; i < n && rc == 0; i++) {
        if (!model_name_valid(names[i]))
            continue;
        if (strcmp(names[i], "sdpa") == 0) {
            srv_log(s, "warn", "%s/sdpa: 'sdpa' is the built-in model; folder "
                    "ignored (rename it to serve it)", s->cfg.models);
            continue;
        }
        if ((rc = srv_registry__start_load(s, names[i], NULL)) < 0) {
            snprintf(err, SRV_ERRMAX, "model '%s': %s", names[i],
                     srv_registry__start_error(-rc));
            rc = -1;
        }
    }
    model_repo_list_free(names, n);
    return rc;
}

void srv_registry_free(srv *s)
{
    srv_entry *e = s->models, *n;
    for (; e; e = n) {
        n = e->next;
        srv_sched_entry_free(e);
        srv_inst_unref(e->inst);
        for (; e->retired; e->retired = e->retired->rnext)
            e->retired->retired_of = NULL; /* (none is left at exit) */
        srv_stats_free(&e->stats);
        free(e);
    }
    s->models = NULL;
}

/* ---- handlers ----------------------------------------------------------- */

static const char *state_name(int st)
{
    return st == SRV_READY ? "READY" : st == SRV_LOADING ? "LOADING" : "UNAVAILABLE";
}

/* An index request listing the repository's folders on the pool. */
typedef struct index_job {
    uv_work_t work;
    srv_req *req;
    const char *repo;
    char **names; /* folders, sorted (model_repo_list) */
    int n;        /* their count, or negative: none could be listed */
    char err[ATTN_ERRMAX]; /* why, when n < 0 */
} index_job;

static void index_work(uv_work_t *w)
{
    index_job *ij = w->data;
    srv_pool_job("listing the model repository", NULL);
    ij->n = model_repo_list(ij->repo, &ij->names, ij->err);
}

/* index_row: {"name", "version": "1", "state", "reason"}. A reason cut at
 * a byte count (a load error quoting a file's text) may split a UTF-8
 * character, and jansson refuses a string that is not UTF-8: the reason
 * is mended rather than the model left out of the list. */
static json_t *index_row(const char *name, const char *state, const char *reason)
{
    char mended[sizeof ((srv_entry *)0)->reason];
    json_t *row = json_pack("{s:s,s:s,s:s,s:s}", "name", name, "version", "1",
                            "state", state, "reason", reason);
    if (row)
        return row;
    snprintf(mended, sizeof mended, "%s", reason);
    oip_utf8_mend(mended);
    return json_pack("{s:s,s:s,s:s,s:s}", "name", name, "version", "1", "state",
                     state, "reason", mended);
}

/* by_name: bsearch's order of the folder names (model_repo_list sorts
 * them with strcmp). */
static int by_name(const void *key, const void *name)
{
    return strcmp(key, *(char *const *)name);
}

/* index_answer: the registry's models (only the ready ones when
 * only_ready), then the n folders of names that are valid model names and
 * not in the registry, as UNAVAILABLE "not loaded". As Triton's index, it
 * lists what the repository holds: a model that is neither loaded nor
 * loading (unloaded, or its load failed) is left out when its folder is
 * not among the n listed (removed since). Loop thread. */
static void index_answer(srv_req *r, int only_ready, char **names, int n)
{
    unsigned long mark = attn_json_mark();
    json_t *arr = json_array();
    srv_entry *e;
    int i;
    for (e = r->s->models; e; e = e->next) {
        if (only_ready && e->state != SRV_READY)
            continue;
        if (!only_ready && e->state == SRV_UNAVAILABLE &&
            !(n > 0 && bsearch(e->name, names, (size_t)n, sizeof *names, by_name)))
            continue;
        json_array_append_new(arr, index_row(e->name, state_name(e->state),
                                             e->state == SRV_READY ? "" : e->reason));
    }
    for (i = 0; i < n; i++) {
        if (!model_name_valid(names[i]) || srv_registry_find(r->s, names[i]))
            continue;
        json_array_append_new(arr, index_row(names[i], "UNAVAILABLE", "not loaded"));
    }
    srv_respond_dump(r, arr, mark, "index: out of memory");
}

/* index_done: loop thread. A repository that is missing or a file holds
 * no folder: the index lists what is loaded. One that is there but cannot
 * be read (not attnd's to read, a failing disk) answers 503 saying why and
 * what to do (without Retry-After: it stays so until someone acts; with it
 * when memory or descriptors ran out), as Triton's index fails when a
 * repository cannot be listed: a list of the loaded models alone would
 * say the repository holds nothing else. */
static void index_done(uv_work_t *w, int status)
{
    index_job *ij = w->data;
    (void)status;
    if (ij->n == ATTN_ENOTFOUND) {
        index_answer(ij->req, 0, NULL, 0);
    } else if (ij->n < 0) {
        if (ij->n != ATTN_ENOMEM)
            ij->req->retry_after = -1;
        srv_respond_error(ij->req, 503, "index: %s", ij->err);
    } else {
        index_answer(ij->req, 0, ij->names, ij->n);
        model_repo_list_free(ij->names, ij->n);
    }
    free(ij);
}

/* POST /v2/repository/index: loaded models plus the repository's other
 * folders (read on the pool: the folder may be on a slow volume);
 * {"ready": true} lists only the ready ones, at once. Once the drain is
 * cut short the folder is not read: 503. */
void srv_h_index(srv_req *r)
{
    json_t *req, *v;
    json_error_t je;
    index_job *ij;
    int only_ready = 0;
    if (r->body_len) {
        int nomem;
        req = attn_json_parse(r->body, r->body_len, JSON_REJECT_DUPLICATES, &je,
                             &nomem);
        if (nomem) {
            srv_respond_error(r, 503, "server: out of memory");
            return;
        }
        if (!json_is_object(req)) {
            if (req) /* JSON, of another kind: je says nothing of it */
                srv_respond_error(r, 400, "body: expected a JSON object, "
                                  "got %s", attn_json_kind(req));
            else
                srv_respond_error(r, 400, "body: not a JSON object (%s)",
                                  je.text);
            json_decref(req);
            return;
        }
        v = json_object_get(req, "ready");
        if (v && !json_is_boolean(v)) {
            json_decref(req);
            srv_respond_error(r, 400, "ready: must be a boolean");
            return;
        }
        only_ready = json_is_true(v);
        json_decref(req);
    }
    if (only_ready) {
        index_answer(r, 1, NULL, 0);
        return;
    }
    /* after the drain is cut short nothing new runs on the pool (the stop
     * would wait for the listing) */
    if (r->s->drain_expired) {
        srv_respond_error(r, 503, "server: draining (shutting down)");
        return;
    }
    ij = calloc(1, sizeof *ij);
    if (!ij) {
        srv_respond_error(r, 503, "index: out of memory");
        return;
    }
    ij->work.data = ij;
    ij->req = r;
    ij->repo = r->s->cfg.models;
    srv_suspend(r);
    uv_queue_work(r->s->loop, &ij->work, index_work, index_done);
}
