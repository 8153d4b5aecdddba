/*
 * maps.c - the retained-map store: a byte-bounded list of immutable,
 * reference-counted entries, newest at the head, oldest evicted first.
 * The HTTP rendering of its contents lives in maps_http.c.
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

static void entry_free(maps__entry *e)
{
    if (!e)
        return;
    free(e->attention);
    free(e->labels);
    free(e->label_off);
    free(e->t_valid);
    free(e->s_valid);
    free(e);
}

void maps__release(maps__entry *e)
{
    if (e && __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0)
        entry_free(e);
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
 * Check a's shape and labels and build an unlinked entry holding copies of
 * everything (refs = 1, id not yet assigned). 0 or a negative code with
 * err naming the field.
 */
static int entry_build(const maps_put_args *a, size_t max_bytes,
                       maps__entry **out, char *err)
{
    maps__entry *e = NULL;
    size_t cells, nbytes, lab_bytes = 0, total;
    int i, rc;

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
    if (a->n_tokens != 0 && a->n_tokens != a->t &&
        (a->n_tokens != a->t + a->s || a->s == a->t)) {
        snprintf(err, ATTN_ERRMAX,
                 "parameters.tokens: %d labels, expected %d (one per query "
                 "token)%s",
                 a->n_tokens, a->t, a->s != a->t ? " or T + S" : "");
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
    total = nbytes + lab_bytes + sizeof(*e) +
            (size_t)a->n_tokens * sizeof(size_t) +
            2 * (size_t)a->b * sizeof(int32_t);
    if (total < nbytes || total > max_bytes) {
        snprintf(err, ATTN_ERRMAX,
                 "parameters.retain: these maps need %zu bytes, more than "
                 "the whole retained-map store (%zu bytes, setting "
                 "maps_bytes); ask for fewer tokens or heads",
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
    e->attention = malloc(nbytes);
    e->t_valid = malloc((size_t)a->b * sizeof(int32_t));
    e->s_valid = malloc((size_t)a->b * sizeof(int32_t));
    if (!e->attention || !e->t_valid || !e->s_valid)
        goto nomem;
    memcpy(e->attention, a->attention, nbytes);
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
    }
    *out = e;
    return 0;
nomem:
    entry_free(e);
    snprintf(err, ATTN_ERRMAX, "parameters.retain: out of memory");
    return ATTN_ENOMEM;
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
    rc = entry_build(a, st->max_bytes, &e, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&st->lock);
    while (st->oldest && st->used + e->info.bytes > st->max_bytes) {
        unlink_entry(st, st->oldest);
        st->n_evicted++;
    }
    snprintf(e->info.id, sizeof(e->info.id), "m%llu-%06x",
             (unsigned long long)st->next_seq++, st->tag);
    e->older = st->newest;
    if (st->newest)
        st->newest->newer = e;
    else
        st->oldest = e;
    st->newest = e;
    st->used += e->info.bytes;
    st->n++;
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

size_t maps_list(maps_store *st, maps_info *out, size_t cap)
{
    size_t n = 0;
    maps__entry *e;

    pthread_mutex_lock(&st->lock);
    for (e = st->newest; e && n < cap; e = e->older)
        out[n++] = e->info;
    pthread_mutex_unlock(&st->lock);
    return n;
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
    for (r = 0; r < nr; r++) {
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

int maps_slice(maps_store *st, const char *id, int b, int h, int max_n,
               float **out, int *rows, int *cols, int *row_block,
               int *col_block, char *err)
{
    char scratch[ATTN_ERRMAX];
    maps__entry *e;
    float *mean = NULL, *res = NULL;
    const float *src;
    size_t ts, i;
    int k, rc = 0, nr, nc;

    if (!err)
        err = scratch;
    *out = NULL;
    e = maps__acquire(st, id);
    if (!e) {
        snprintf(err, ATTN_ERRMAX, "map %s: not retained (unknown or "
                 "evicted)", id ? id : "(null)");
        return ATTN_ENOTFOUND;
    }
    if (b < 0 || b >= e->info.b) {
        snprintf(err, ATTN_ERRMAX, "b: %d is out of range [0, %d)", b,
                 e->info.b);
        rc = ATTN_EINVAL;
        goto fail;
    }
    if (h < -1 || h >= e->info.h) {
        snprintf(err, ATTN_ERRMAX, "h: %d is out of range [0, %d)", h,
                 e->info.h);
        rc = ATTN_EINVAL;
        goto fail;
    }
    /* entry_build checked b*h*t*s*4 for overflow, so t*s is safe. */
    ts = (size_t)e->info.t * (size_t)e->info.s;
    if (h >= 0) {
        src = e->attention + ((size_t)b * (size_t)e->info.h + (size_t)h) * ts;
    } else {
        mean = calloc(ts, sizeof(float));
        if (!mean)
            goto nomem;
        for (k = 0; k < e->info.h; k++) {
            const float *hp =
                e->attention + ((size_t)b * (size_t)e->info.h + (size_t)k) * ts;
            for (i = 0; i < ts; i++)
                mean[i] += hp[i];
        }
        for (i = 0; i < ts; i++)
            mean[i] /= (float)e->info.h;
        src = mean;
    }
    nr = (e->info.t + block_for(e->info.t, max_n) - 1) /
         block_for(e->info.t, max_n);
    nc = (e->info.s + block_for(e->info.s, max_n) - 1) /
         block_for(e->info.s, max_n);
    res = malloc((size_t)nr * (size_t)nc * sizeof(float));
    if (!res)
        goto nomem;
    maps_pool_max(src, e->info.t, e->info.s, max_n, res, rows, cols,
                  row_block, col_block);
    free(mean);
    maps__release(e);
    *out = res;
    return 0;
nomem:
    snprintf(err, ATTN_ERRMAX, "out of memory");
    rc = ATTN_ENOMEM;
fail:
    free(mean);
    free(res);
    maps__release(e);
    return rc;
}
