/*
 * maps.c - the retained-map store: a byte-bounded list of immutable,
 * reference-counted entries, newest at the head, oldest evicted first.
 * The HTTP rendering of its contents lives in maps_http.c, the building
 * of a sequence's grown map in maps_grow.c.
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
                       size_t *sbytes, size_t *vbytes, char *err)
{
    size_t ts = (size_t)a->t * (size_t)a->s;

    *mbits = *mbytes = *sbytes = *vbytes = 0;
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
 * adopt_scores, a copy of them) and values into e with the sizes
 * extras_size counted. 0, or -1 when out of memory (e keeps what it got;
 * maps__entry_free frees it). */
static int copy_extras(maps__entry *e, const maps_put_args *a,
                       float *adopt_scores, size_t mbits, size_t mbytes,
                       size_t sbytes, size_t vbytes)
{
    size_t k;

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
    size_t sbytes = 0, vbytes = 0, ebytes = 0;
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
    if ((rc = extras_size(a, &mbits, &mbytes, &sbytes, &vbytes, err)))
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
    if (copy_extras(e, a, adopt_scores, mbits, mbytes, sbytes, vbytes))
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

/* Block size so that ceil(n / block) <= max_n. */
static int block_for(int n, int max_n)
{
    if (max_n <= 0 || n <= max_n)
        return 1;
    return (n + max_n - 1) / max_n;
}

int maps_pool_max(const float *in, int t, int s, int max_n, float *out,
                  int *rows, int *cols, int *row_block, int *col_block)
{
    int bt, bs, nr, nc, i, j, r, c;

    if (!in || !out || t < 1 || s < 1)
        return ATTN_EINVAL;
    bt = block_for(t, max_n);
    bs = block_for(s, max_n);
    nr = (t + bt - 1) / bt;
    nc = (s + bs - 1) / bs;
    if (bt == 1 && bs == 1) /* no pooling: a copy */
        memcpy(out, in, (size_t)t * (size_t)s * sizeof(float));
    for (r = 0; bt * bs > 1 && r < nr; r++) {
        float *orow = out + (size_t)r * (size_t)nc;
        for (c = 0; c < nc; c++)
            orow[c] = in[(size_t)r * (size_t)bt * (size_t)s +
                         (size_t)c * (size_t)bs];
        for (i = r * bt; i < t && i < (r + 1) * bt; i++) {
            const float *irow = in + (size_t)i * (size_t)s;
            for (j = 0; j < s; j++) {
                float *o = &orow[j / bs];
                if (irow[j] > *o)
                    *o = irow[j];
            }
        }
    }
    if (rows)
        *rows = nr;
    if (cols)
        *cols = nc;
    if (row_block)
        *row_block = bt;
    if (col_block)
        *col_block = bs;
    return 0;
}

/* allowed: 1 when query i attended key j in (b, h) of e (its row's end or
 * the causal flag, lengths and the explicit mask all agree), else 0. */
static int allowed(const maps__entry *e, int b, int h, int i, int j)
{
    const maps_info *in = &e->info;
    size_t plane, k;

    if (i >= e->t_valid[b] || j >= e->s_valid[b])
        return 0;
    if (e->row_end ? j >= e->row_end[(size_t)b * (size_t)in->t + (size_t)i]
                   : in->causal && j > i)
        return 0;
    if (!e->mask)
        return 1;
    plane = in->mask_planes == 1 ? 0
            : in->mask_planes == in->b ? (size_t)b
                                       : (size_t)b * (size_t)in->h + (size_t)h;
    k = (plane * (size_t)in->t + (size_t)i) * (size_t)in->s + (size_t)j;
    return (e->mask[k >> 3] >> (k & 7)) & 1;
}

/* row_of: row i of what for (b, h) of e (h == -1: the mean over heads,
 * or for MAPS_ALLOWED allowed by any head): the stored row itself for one
 * head's attention or scores, else computed into buf (s floats; the
 * mean sums the heads in order and divides, as the whole plane did). */
static const float *row_of(const maps__entry *e, maps_what what, int b,
                           int h, int i, float *buf)
{
    size_t ts = (size_t)e->info.t * (size_t)e->info.s;
    size_t off = (size_t)i * (size_t)e->info.s;
    int k, j, h0 = h < 0 ? 0 : h, h1 = h < 0 ? e->info.h : h + 1;
    const float *base = what == MAPS_SCORES ? e->scores : e->attention;

    if (what != MAPS_ALLOWED && h >= 0)
        return base + ((size_t)b * (size_t)e->info.h + (size_t)h) * ts + off;
    for (j = 0; j < e->info.s; j++)
        buf[j] = 0.0f;
    for (k = h0; k < h1; k++) {
        if (what == MAPS_ALLOWED) {
            for (j = 0; j < e->info.s; j++)
                if (allowed(e, b, k, i, j))
                    buf[j] = 1.0f;
            continue;
        }
        const float *src =
            base + ((size_t)b * (size_t)e->info.h + (size_t)k) * ts + off;
        for (j = 0; j < e->info.s; j++)
            buf[j] += src[j];
    }
    if (what != MAPS_ALLOWED)
        for (j = 0; j < e->info.s; j++)
            buf[j] /= (float)e->info.h;
    return buf;
}

size_t maps__row_scratch(const maps_info *in, maps_what what, int h)
{
    return what == MAPS_ALLOWED || h < 0 ? (size_t)in->s * sizeof(float)
                                         : 0;
}

int maps__slice_into(const maps__entry *e, maps_what what, int b, int h,
                     int max_n, maps_cut_fn cut, void *cut_ctx, float *dst,
                     int *rows, int *cols, int *row_block, int *col_block,
                     char *err)
{
    int t = e->info.t, s = e->info.s, bt, bs, nc, i, j;
    float *buf = NULL, *orow;
    const float *row;

    if (what == MAPS_SCORES && !e->scores) {
        snprintf(err, ATTN_ERRMAX, "what: map %s was retained without "
                 "scores (kept only when the retaining request asked for "
                 "the scores output; a sequence's map, when its "
                 "sequence_start step did)", e->info.id);
        return ATTN_EINVAL;
    }
    bt = block_for(t, max_n);
    bs = block_for(s, max_n);
    nc = (s + bs - 1) / bs;
    if (maps__row_scratch(&e->info, what, h) &&
        !(buf = malloc((size_t)s * sizeof(float)))) {
        snprintf(err, ATTN_ERRMAX, "out of memory");
        return ATTN_ENOMEM;
    }
    for (i = 0; i < t; i++) {
        if (cut && (i & 15) == 0 && cut(cut_ctx)) {
            free(buf); /* its reader went */
            return 1;
        }
        row = row_of(e, what, b, h, i, buf);
        orow = dst + (size_t)(i / bt) * (size_t)nc;
        if (bt == 1 && bs == 1) { /* no pooling: the row itself */
            memcpy(orow, row, (size_t)s * sizeof(float));
            continue;
        }
        /* maps_pool_max's order: each block from its first cell, then
         * the max of its rows' cells in turn */
        if (i % bt == 0)
            for (j = 0; j < nc; j++)
                orow[j] = row[(size_t)j * (size_t)bs];
        for (j = 0; j < s; j++)
            if (row[j] > orow[j / bs])
                orow[j / bs] = row[j];
    }
    free(buf);
    if (rows)
        *rows = (t + bt - 1) / bt;
    if (cols)
        *cols = nc;
    if (row_block)
        *row_block = bt;
    if (col_block)
        *col_block = bs;
    return 0;
}

int maps__check(const maps__entry *e, int b, int h, int allow_mean,
                char *err)
{
    if (b < 0 || b >= e->info.b) {
        snprintf(err, ATTN_ERRMAX, "b: %d is out of range [0, %d)", b,
                 e->info.b);
        return ATTN_EINVAL;
    }
    if (h < (allow_mean ? -1 : 0) || h >= e->info.h) {
        snprintf(err, ATTN_ERRMAX, "h: %d is out of range [0, %d)", h,
                 e->info.h);
        return ATTN_EINVAL;
    }
    return 0;
}

/* Take a reference on id and check b and h; on failure err names the
 * problem and *out is NULL. */
static int acquire_checked(maps_store *st, const char *id, int b, int h,
                           int allow_mean, maps__entry **out, char *err)
{
    maps__entry *e = maps__acquire(st, id);
    int rc;

    *out = NULL;
    if (!e) {
        snprintf(err, ATTN_ERRMAX, "map %s: not retained (unknown or "
                 "evicted)", id ? id : "(null)");
        return ATTN_ENOTFOUND;
    }
    if ((rc = maps__check(e, b, h, allow_mean, err))) {
        maps__release(e);
        return rc;
    }
    *out = e;
    return 0;
}

int maps__slice_cut(const maps__entry *e, maps_what what, int b, int h,
                    int max_n, maps_cut_fn cut, void *cut_ctx, float **out,
                    int *rows, int *cols, int *row_block, int *col_block,
                    char *err)
{
    float *res;
    size_t nr, nc;
    int rc;

    *out = NULL;
    /* the pooled plane only: its rows are read from the stored ones */
    nr = (size_t)((e->info.t + block_for(e->info.t, max_n) - 1) /
                  block_for(e->info.t, max_n));
    nc = (size_t)((e->info.s + block_for(e->info.s, max_n) - 1) /
                  block_for(e->info.s, max_n));
    res = malloc(nr * nc * sizeof(float));
    if (!res) {
        snprintf(err, ATTN_ERRMAX, "out of memory");
        return ATTN_ENOMEM;
    }
    rc = maps__slice_into(e, what, b, h, max_n, cut, cut_ctx, res, rows,
                          cols, row_block, col_block, err);
    if (rc) {
        free(res);
        return rc > 0 ? 0 : rc; /* > 0: its reader went */
    }
    *out = res;
    return 0;
}

int maps_slice_of(maps_store *st, const char *id, maps_what what, int b,
                  int h, int max_n, float **out, int *rows, int *cols,
                  int *row_block, int *col_block, char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *e;
    int rc;

    if (!err)
        err = scratch;
    *out = NULL;
    if ((rc = acquire_checked(st, id, b, h, 1, &e, err)))
        return rc;
    rc = maps__slice_cut(e, what, b, h, max_n, NULL, NULL, out, rows, cols,
                         row_block, col_block, err);
    maps__release(e);
    return rc;
}

int maps_slice(maps_store *st, const char *id, int b, int h, int max_n,
               float **out, int *rows, int *cols, int *row_block,
               int *col_block, char *err)
{
    return maps_slice_of(st, id, MAPS_WEIGHTS, b, h, max_n, out, rows, cols,
                         row_block, col_block, err);
}

int maps__values_entry(const maps__entry *e, int b, int h, float **out,
                       int *rows, int *cols, char *err)
{
    size_t n;
    int kvh;

    *out = NULL;
    if (!e->v) {
        snprintf(err, ATTN_ERRMAX, "what: map %s was retained without "
                 "values (kept only when the retaining request computed "
                 "them)", e->info.id);
        return ATTN_EINVAL;
    }
    kvh = h / (e->info.h / e->info.kv_h);
    n = (size_t)e->info.s * (size_t)e->info.dv; /* counted in maps__entry_build */
    *out = malloc(n * sizeof(float));
    if (!*out) {
        snprintf(err, ATTN_ERRMAX, "out of memory");
        return ATTN_ENOMEM;
    }
    memcpy(*out, e->v + ((size_t)b * (size_t)e->info.kv_h + (size_t)kvh) * n,
           n * sizeof(float));
    *rows = e->info.s;
    *cols = e->info.dv;
    return 0;
}

int maps_values(maps_store *st, const char *id, int b, int h, float **out,
                int *rows, int *cols, char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *e;
    int rc;

    if (!err)
        err = scratch;
    *out = NULL;
    if ((rc = acquire_checked(st, id, b, h, 0, &e, err)))
        return rc;
    rc = maps__values_entry(e, b, h, out, rows, cols, err);
    maps__release(e);
    return rc;
}
