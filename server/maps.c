/*
 * maps.c - the retained-map store: a byte-bounded list of immutable,
 * reference-counted entries, newest at the head, oldest evicted first.
 * Reading an entry (slicing, pooling, values) lives in maps_slice.c, the
 * HTTP rendering of its contents in maps_http.c, the building of a
 * sequence's grown map in maps_grow.c.
 */
#include "maps.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/attn.h"
#include "server/maps_int.h"

struct maps_store {
    pthread_mutex_t lock;
    maps__entry *newest; /* doubly linked, newest -> oldest */
    maps__entry *oldest;
    size_t used;         /* sum of entry->info.bytes in the list */
    size_t max_bytes;
    size_t n;
    uint64_t next_seq;   /* ids are m<seq>-<tag> */
    uint64_t n_evicted;
    unsigned tag;        /* random per store: ids differ across replicas */
};

/* Multiply two sizes into *out; 0 on success, ATTN_EOVERFLOW if it wraps. */
static int mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return ATTN_EOVERFLOW;
    *out = a * b;
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int maps_store_create(maps_store **out, size_t max_bytes)
{
    maps_store *st;

    *out = NULL;
    if (max_bytes == 0)
        return ATTN_EINVAL;
    st = calloc(1, sizeof(*st));
    if (!st)
        return ATTN_ENOMEM;
    if (pthread_mutex_init(&st->lock, NULL) != 0) {
        free(st);
        return ATTN_ENOMEM;
    }
    st->max_bytes = max_bytes;
    st->next_seq = 1;
    if (getrandom(&st->tag, sizeof(st->tag), GRND_NONBLOCK) !=
        (ssize_t)sizeof(st->tag))
        st->tag = (unsigned)now_ms() ^ (unsigned)(uintptr_t)st;
    st->tag &= 0xffffffu;
    *out = st;
    return 0;
}

void maps__entry_free(maps__entry *e)
{
    if (!e)
        return;
    free(e->attention);
    free(e->labels);
    free(e->label_off);
    free(e->t_valid);
    free(e->s_valid);
    free(e->row_end);
    free(e->mask);
    free(e->scores);
    free(e->v);
    free(e->vnorm);
    free(e);
}

void maps__release(maps__entry *e)
{
    if (e && __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0)
        maps__entry_free(e);
}

void maps_store_destroy(maps_store *st)
{
    maps__entry *e, *next;

    if (!st)
        return;
    for (e = st->newest; e; e = next) {
        next = e->older;
        maps__release(e);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Unlink e from the list (lock held); the list's reference goes with it. */
static void unlink_entry(maps_store *st, maps__entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        st->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        st->oldest = e->newer;
    st->used -= e->info.bytes;
    st->n--;
    maps__release(e);
}

/*
 * extras_size: check the optional mask / scores / values of a and count
 * their bytes (mask as bits). 0, or ATTN_EINVAL / ATTN_EOVERFLOW with err
 * naming the field. Called after a's shape is known not to overflow.
 */
static int extras_size(const maps_put_args *a, size_t *mbits, size_t *mbytes,
                       size_t *sbytes, size_t *vbytes, size_t *nbytes,
                       char *err)
{
    size_t ts = (size_t)a->t * (size_t)a->s;

    *mbits = *mbytes = *sbytes = *vbytes = 0;
    /* b * h * s <= b * h * t * s, which fits: no overflow */
    *nbytes = a->vnorm ? (size_t)a->b * (size_t)a->h * (size_t)a->s *
                             sizeof(float)
                       : 0;
    if (a->vnorm && a->norm_of != MAPS_NORM_VO && a->norm_of != MAPS_NORM_V) {
        snprintf(err, ATTN_ERRMAX, "vnorm: norm_of %d is not MAPS_NORM_VO "
                 "or MAPS_NORM_V", a->norm_of);
        return ATTN_EINVAL;
    }
    if (a->mask) {
        if (a->mask_planes != 1 && a->mask_planes != a->b &&
            (long long)a->mask_planes != (long long)a->b * a->h) {
            snprintf(err, ATTN_ERRMAX, "inputs[mask]: %d plane%s; expected "
                     "1, %d or %d", a->mask_planes,
                     a->mask_planes == 1 ? "" : "s", a->b, a->b * a->h);
            return ATTN_EINVAL;
        }
        if (mul_size(ts, (size_t)a->mask_planes, mbits))
            goto overflow;
        *mbytes = (*mbits + 7) / 8;
    }
    if (a->scores && (mul_size(ts, (size_t)a->b * (size_t)a->h, sbytes) ||
                      mul_size(*sbytes, sizeof(float), sbytes)))
        goto overflow;
    if (a->v) {
        if (a->kv_h < 1 || a->h % a->kv_h != 0 || a->dv < 1) {
            snprintf(err, ATTN_ERRMAX, "outputs.v: %d kv head%s of width %d "
                     "do%s not fit %d head%s", a->kv_h, a->kv_h == 1 ? "" : "s",
                     a->dv, a->kv_h == 1 ? "es" : "", a->h, a->h == 1 ? "" : "s");
            return ATTN_EINVAL;
        }
        if (mul_size((size_t)a->b, (size_t)a->kv_h, vbytes) ||
            mul_size(*vbytes, (size_t)a->s, vbytes) ||
            mul_size(*vbytes, (size_t)a->dv, vbytes) ||
            mul_size(*vbytes, sizeof(float), vbytes))
            goto overflow;
    }
    return 0;
overflow:
    snprintf(err, ATTN_ERRMAX, "parameters.retain: mask, scores or values "
             "overflow size_t");
    return ATTN_EOVERFLOW;
}

/* copy_extras: copy a's optional mask (packed to bits), scores (or take
 * adopt_scores, a copy of them), values and value norms into e with the
 * sizes extras_size counted. 0, or -1 when out of memory (e keeps what it
 * got; maps__entry_free frees it). */
static int copy_extras(maps__entry *e, const maps_put_args *a,
                       float *adopt_scores, size_t mbits, size_t mbytes,
                       size_t sbytes, size_t vbytes, size_t nbytes)
{
    size_t k;

    if (a->vnorm) {
        if (!(e->vnorm = malloc(nbytes)))
            return -1;
        memcpy(e->vnorm, a->vnorm, nbytes);
        e->info.norm_of = a->norm_of;
    }

    if (a->mask) {
        e->mask = calloc(mbytes ? mbytes : 1, 1);
        if (!e->mask)
            return -1;
        for (k = 0; k < mbits; k++)
            if (a->mask[k])
                e->mask[k >> 3] |= (uint8_t)(1u << (k & 7));
        e->info.mask_planes = a->mask_planes;
    }
    if (a->scores) {
        e->scores = adopt_scores ? adopt_scores : malloc(sbytes);
        if (!e->scores)
            return -1;
        if (!adopt_scores)
            memcpy(e->scores, a->scores, sbytes);
        e->info.has_scores = 1;
    }
    if (a->v) {
        e->v = malloc(vbytes);
        if (!e->v)
            return -1;
        memcpy(e->v, a->v, vbytes);
        e->info.kv_h = a->kv_h;
        e->info.dv = a->dv;
    }
    e->info.dk = a->dk > 0 ? a->dk : 0;
    e->info.scale = a->scale > 0.0f ? a->scale : 0.0f;
    return 0;
}

/* maps__entry_build: see maps_int.h. */
int maps__entry_build(const maps_put_args *a, size_t max_bytes, float *adopt,
                      float *adopt_scores, maps__entry **out, char *err)
{
    maps__entry *e = NULL;
    size_t cells, nbytes, lab_bytes = 0, total, mbits = 0, mbytes = 0;
    size_t sbytes = 0, vbytes = 0, ebytes = 0, vnbytes = 0;
    int i, rc, per;

    *out = NULL;
    if (!a->model || !a->model[0] || strlen(a->model) >= MAPS_NAME_MAX) {
        snprintf(err, ATTN_ERRMAX, "model: name must be 1..%d bytes",
                 MAPS_NAME_MAX - 1);
        return ATTN_EINVAL;
    }
    if (a->b < 1 || a->h < 1 || a->t < 1 || a->s < 1 || !a->attention) {
        snprintf(err, ATTN_ERRMAX,
                 "attention: shape [%d, %d, %d, %d] must be positive", a->b,
                 a->h, a->t, a->s);
        return ATTN_EINVAL;
    }
    if ((rc = mul_size((size_t)a->b, (size_t)a->h, &cells)) ||
        (rc = mul_size(cells, (size_t)a->t, &cells)) ||
        (rc = mul_size(cells, (size_t)a->s, &cells)) ||
        (rc = mul_size(cells, sizeof(float), &nbytes))) {
        snprintf(err, ATTN_ERRMAX, "attention: shape overflows size_t");
        return rc;
    }
    per = a->token_items ? a->n_tokens / a->token_items : a->n_tokens;
    if (a->token_items && (a->token_items != a->b ||
                           per * a->token_items != a->n_tokens)) {
        snprintf(err, ATTN_ERRMAX, "parameters.tokens: %d list%s, expected "
                 "%d (one per batch item)", a->token_items,
                 a->token_items == 1 ? "" : "s", a->b);
        return ATTN_EINVAL;
    }
    if (per != 0 && per != a->t &&
        ((long long)per != (long long)a->t + a->s ||
         (a->s == a->t && !a->cross))) {
        snprintf(err, ATTN_ERRMAX,
                 "parameters.tokens%s: %d label%s, expected %d (one per query "
                 "token)%s", a->token_items ? "[0]" : "",
                 per, per == 1 ? "" : "s", a->t,
                 a->s != a->t || a->cross ? " or T + S" : "");
        return ATTN_EINVAL;
    }
    for (i = 0; i < a->n_tokens; i++) {
        if (!a->tokens || !a->tokens[i]) {
            snprintf(err, ATTN_ERRMAX, "parameters.tokens[%d]: missing", i);
            return ATTN_EINVAL;
        }
        lab_bytes += strlen(a->tokens[i]) + 1;
        if (lab_bytes > MAPS_MAX_TOKENS_BYTES) {
            snprintf(err, ATTN_ERRMAX,
                     "parameters.tokens: labels exceed %d bytes",
                     MAPS_MAX_TOKENS_BYTES);
            return ATTN_EINVAL;
        }
    }
    if ((rc = extras_size(a, &mbits, &mbytes, &sbytes, &vbytes, &vnbytes,
                          err)))
        return rc;
    if (a->row_end) { /* b * t <= b * h * t * s: no overflow */
        size_t k, n = (size_t)a->b * (size_t)a->t;
        ebytes = n * sizeof(int32_t);
        for (k = 0; k < n; k++)
            if (a->row_end[k] < 0 || a->row_end[k] > a->s) {
                snprintf(err, ATTN_ERRMAX, "row_end[%zu]: %d is out of "
                         "range [0, %d]", k, (int)a->row_end[k], a->s);
                return ATTN_EINVAL;
            }
    }
    total = nbytes + lab_bytes + sizeof(*e) +
            (size_t)a->n_tokens * sizeof(size_t) +
            2 * (size_t)a->b * sizeof(int32_t);
    if (total < nbytes ||
        __builtin_add_overflow(total, mbytes, &total) ||
        __builtin_add_overflow(total, sbytes, &total) ||
        __builtin_add_overflow(total, vbytes, &total) ||
        __builtin_add_overflow(total, vnbytes, &total) ||
        __builtin_add_overflow(total, ebytes, &total) || total > max_bytes) {
        snprintf(err, ATTN_ERRMAX,
                 "parameters.retain: these maps need %zu bytes, more than "
                 "the whole retained-map store (%zu bytes, maps-bytes); "
                 "ask for fewer tokens or heads, or raise --maps-bytes",
                 total, max_bytes);
        return ATTN_EINVAL;
    }
    for (i = 0; i < a->b; i++) {
        if ((a->t_valid && (a->t_valid[i] < 0 || a->t_valid[i] > a->t)) ||
            (a->s_valid && (a->s_valid[i] < 0 || a->s_valid[i] > a->s))) {
            snprintf(err, ATTN_ERRMAX, "lengths[%d]: out of range", i);
            return ATTN_EINVAL;
        }
    }

    e = calloc(1, sizeof(*e));
    if (!e)
        goto nomem;
    e->refs = 1;
    e->info.b = a->b;
    e->info.h = a->h;
    e->info.t = a->t;
    e->info.s = a->s;
    e->info.causal = a->causal ? 1 : 0;
    e->info.bytes = total;
    e->info.created_ms = now_ms();
    memcpy(e->info.model, a->model, strlen(a->model) + 1);
    e->attention = adopt ? adopt : malloc(nbytes);
    e->t_valid = malloc((size_t)a->b * sizeof(int32_t));
    e->s_valid = malloc((size_t)a->b * sizeof(int32_t));
    e->row_end = ebytes ? malloc(ebytes) : NULL;
    if (!e->attention || !e->t_valid || !e->s_valid ||
        (ebytes && !e->row_end))
        goto nomem;
    if (ebytes)
        memcpy(e->row_end, a->row_end, ebytes);
    if (!adopt)
        memcpy(e->attention, a->attention, nbytes);
    if (copy_extras(e, a, adopt_scores, mbits, mbytes, sbytes, vbytes,
                    vnbytes))
        goto nomem;
    for (i = 0; i < a->b; i++) {
        e->t_valid[i] = a->t_valid ? a->t_valid[i] : a->t;
        e->s_valid[i] = a->s_valid ? a->s_valid[i] : a->s;
    }
    if (a->n_tokens > 0) {
        size_t off = 0;
        e->labels = malloc(lab_bytes);
        e->label_off = malloc((size_t)a->n_tokens * sizeof(size_t));
        if (!e->labels || !e->label_off)
            goto nomem;
        for (i = 0; i < a->n_tokens; i++) {
            size_t n = strlen(a->tokens[i]) + 1;
            e->label_off[i] = off;
            memcpy(e->labels + off, a->tokens[i], n);
            off += n;
        }
        e->n_labels = a->n_tokens;
        e->label_items = a->token_items;
    }
    *out = e;
    return 0;
nomem:
    if (e && adopt && e->attention == adopt)
        e->attention = NULL; /* the caller's still */
    if (e && adopt_scores && e->scores == adopt_scores)
        e->scores = NULL;
    maps__entry_free(e);
    snprintf(err, ATTN_ERRMAX, "parameters.retain: out of memory");
    return ATTN_ENOMEM;
}

/* link_newest: e (id set) becomes the newest entry, evicting the oldest
 * others until it fits. Lock held. */
static void link_newest(maps_store *st, maps__entry *e)
{
    while (st->oldest && st->used + e->info.bytes > st->max_bytes) {
        unlink_entry(st, st->oldest);
        st->n_evicted++;
    }
    e->newer = NULL;
    e->older = st->newest;
    if (st->newest)
        st->newest->newer = e;
    else
        st->oldest = e;
    st->newest = e;
    st->used += e->info.bytes;
    st->n++;
}

int maps_grow_put(maps_store *st, maps_grown *g)
{
    maps__entry *p;
    pthread_mutex_lock(&st->lock);
    for (p = st->newest; p && strcmp(p->info.id, g->info.id) != 0; p = p->older)
        ;
    if (!p) { /* evicted meanwhile */
        pthread_mutex_unlock(&st->lock);
        maps__entry_free(g);
        return ATTN_ENOTFOUND;
    }
    g->info.version = p->info.version + 1;
    unlink_entry(st, p);
    link_newest(st, g);
    pthread_mutex_unlock(&st->lock);
    return 0;
}

void maps_drop(maps_store *st, const char *id)
{
    maps__entry *p;
    pthread_mutex_lock(&st->lock);
    for (p = st->newest; p && strcmp(p->info.id, id) != 0; p = p->older)
        ;
    if (p)
        unlink_entry(st, p);
    pthread_mutex_unlock(&st->lock);
}

int maps_put(maps_store *st, const maps_put_args *a, char *id_out,
             char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *e;
    int rc;

    if (!err)
        err = scratch;
    err[0] = '\0';
    rc = maps__entry_build(a, st->max_bytes, NULL, NULL, &e, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&st->lock);
    snprintf(e->info.id, sizeof(e->info.id), "m%llu-%06x",
             (unsigned long long)st->next_seq++, st->tag);
    link_newest(st, e);
    if (id_out)
        memcpy(id_out, e->info.id, sizeof(e->info.id));
    pthread_mutex_unlock(&st->lock);
    return 0;
}

void maps_stats(maps_store *st, size_t *used, size_t *max_bytes,
                size_t *n_entries, uint64_t *n_evicted)
{
    pthread_mutex_lock(&st->lock);
    if (used)
        *used = st->used;
    if (max_bytes)
        *max_bytes = st->max_bytes;
    if (n_entries)
        *n_entries = st->n;
    if (n_evicted)
        *n_evicted = st->n_evicted;
    pthread_mutex_unlock(&st->lock);
}

size_t maps_list_counted(maps_store *st, maps_info *out, size_t cap,
                         size_t *used, size_t *n_entries)
{
    size_t n = 0;
    maps__entry *e;

    pthread_mutex_lock(&st->lock);
    for (e = st->newest; e && n < cap; e = e->older)
        out[n++] = e->info;
    if (used)
        *used = st->used;
    if (n_entries)
        *n_entries = st->n;
    pthread_mutex_unlock(&st->lock);
    return n;
}

size_t maps_list(maps_store *st, maps_info *out, size_t cap)
{
    return maps_list_counted(st, out, cap, NULL, NULL);
}

maps__entry *maps__acquire(maps_store *st, const char *id)
{
    maps__entry *e;

    if (!id)
        return NULL;
    pthread_mutex_lock(&st->lock);
    for (e = st->newest; e; e = e->older)
        if (strcmp(e->info.id, id) == 0)
            break;
    if (e)
        __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&st->lock);
    return e;
}

int maps_info_get(maps_store *st, const char *id, maps_info *out)
{
    maps__entry *e = maps__acquire(st, id);

    if (!e)
        return ATTN_ENOTFOUND;
    *out = e->info;
    maps__release(e);
    return 0;
}
