/*
 * kv.c - the K/V page pool and a sequence's page table (see kv.h), and the
 * FP16/BF16 conversions of stored keys and values.
 */
#include "kv.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kvpage.h"

/* Free pages kept for reuse beyond what sequences hold: enough to absorb a
 * sequence ending and another starting without a trip through malloc,
 * bounded so that an idle pool does not sit on a large budget. */
#define FREE_KEEP 256

struct attn_kv_pool {
    pthread_mutex_t mu;
    attn_kv_page_fmt fmt; /* page layout */
    size_t budget;        /* bytes of pages sequences may hold */
    size_t used;          /* bytes of pages sequences hold */
    void **free;          /* (FREE_KEEP) pages kept for reuse, the
                             longest-kept first */
    int n_free;
    int low;              /* the least n_free since the last shed: the
                             pages free[0 .. low) were not wanted since */
    size_t peak;          /* the most used + kept since the last
                             attn_kv_pool_held (it rises only as pages are
                             allocated) */
};

static size_t elem_bytes(attn_kv_dtype d)
{
    return d == ATTN_KV_F32 ? 4 : 2;
}

size_t attn_kv_token_bytes(const attn_config *cfg, attn_kv_dtype dtype)
{
    return (size_t)cfg->n_kv_heads *
           ((size_t)cfg->head_dim + (size_t)cfg->v_head_dim) * elem_bytes(dtype);
}

const char *attn_kv_dtype_name(attn_kv_dtype d)
{
    return d == ATTN_KV_F16 ? "f16" : d == ATTN_KV_BF16 ? "bf16" : "f32";
}

int attn_kv_dtype_parse(const char *name, attn_kv_dtype *out)
{
    static const attn_kv_dtype all[] = {ATTN_KV_F32, ATTN_KV_F16,
                                        ATTN_KV_BF16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, attn_kv_dtype_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return ATTN_EINVAL;
}

int attn_kv_pool_create(attn_kv_pool **out, const attn_config *cfg,
                        attn_kv_dtype dtype, int page_tokens, size_t max_bytes,
                        char *err)
{
    if (!out)
        return attn__fail(err, ATTN_EINVAL, "out is NULL");
    *out = NULL;
    int rc = attn_config_check(cfg, err);
    if (rc)
        return rc;
    if (dtype != ATTN_KV_F32 && dtype != ATTN_KV_F16 && dtype != ATTN_KV_BF16)
        return attn__fail(err, ATTN_EINVAL, "kv dtype %d is not f32/f16/bf16",
                          (int)dtype);
    if (page_tokens == 0)
        page_tokens = ATTN_KV_PAGE_TOKENS;
    if (page_tokens < 1 || page_tokens > 65536)
        return attn__fail(err, ATTN_EINVAL,
                          "page_tokens = %d must be in 1..65536", page_tokens);
    size_t tok = attn_kv_token_bytes(cfg, dtype), page;
    if (!attn__mul_ok(tok, (size_t)page_tokens, &page) || page > (1u << 30))
        return attn__fail(err, ATTN_EOVERFLOW,
                          "a K/V page of %d tokens is over 1 GiB", page_tokens);
    attn_kv_pool *p = calloc(1, sizeof *p);
    void **fr = calloc(FREE_KEEP, sizeof *fr);
    if (!p || !fr) {
        free(p);
        free(fr);
        return attn__fail(err, ATTN_ENOMEM, "out of memory for the K/V pool");
    }
    pthread_mutex_init(&p->mu, NULL);
    p->fmt.dtype = dtype;
    p->fmt.page = page_tokens;
    p->fmt.n_kv = cfg->n_kv_heads;
    p->fmt.dk = cfg->head_dim;
    p->fmt.dv = cfg->v_head_dim;
    p->fmt.bytes = page;
    p->budget = max_bytes;
    p->free = fr;
    *out = p;
    return 0;
}

void attn_kv_pool_destroy(attn_kv_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_free; i++)
        free(p->free[i]);
    free(p->free);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

size_t attn_kv_pool_used(const attn_kv_pool *p)
{
    attn_kv_pool *m = (attn_kv_pool *)p; /* the lock is not the state */
    pthread_mutex_lock(&m->mu);
    size_t u = p->used;
    pthread_mutex_unlock(&m->mu);
    return u;
}

size_t attn_kv_pool_kept(const attn_kv_pool *p)
{
    attn_kv_pool *m = (attn_kv_pool *)p;
    pthread_mutex_lock(&m->mu);
    size_t k = (size_t)p->n_free * p->fmt.bytes;
    pthread_mutex_unlock(&m->mu);
    return k;
}

size_t attn_kv_pool_held(attn_kv_pool *p, size_t *peak)
{
    pthread_mutex_lock(&p->mu);
    size_t h = p->used + (size_t)p->n_free * p->fmt.bytes;
    *peak = p->peak > h ? p->peak : h;
    p->peak = h;
    pthread_mutex_unlock(&p->mu);
    return h;
}

size_t attn_kv_pool_shed(attn_kv_pool *p)
{
    void *gone[FREE_KEEP];
    pthread_mutex_lock(&p->mu);
    int n = p->low;
    memcpy(gone, p->free, (size_t)n * sizeof *gone);
    memmove(p->free, p->free + n, (size_t)(p->n_free - n) * sizeof *p->free);
    p->n_free -= n;
    p->low = p->n_free;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n; i++) /* outside the lock: steps go on */
        free(gone[i]);
    return (size_t)n * p->fmt.bytes;
}

size_t attn_kv_pool_budget(const attn_kv_pool *p)
{
    return p->budget;
}

size_t attn_kv_page_bytes(const attn_kv_pool *p)
{
    return p->fmt.bytes;
}

int attn_kv_page_tokens(const attn_kv_pool *p)
{
    return p->fmt.page;
}

attn_kv_dtype attn_kv_pool_dtype(const attn_kv_pool *p)
{
    return p->fmt.dtype;
}

const attn_kv_page_fmt *attn__kv_fmt(const attn_kv *kv)
{
    return &kv->pool->fmt;
}

void attn_kv_init(attn_kv *kv, attn_kv_pool *pool)
{
    memset(kv, 0, sizeof *kv);
    kv->pool = pool;
}

/* Give pages[from .. n_pages) back to the pool. */
static void give_back(attn_kv *kv, int from)
{
    attn_kv_pool *p = kv->pool;
    pthread_mutex_lock(&p->mu);
    for (int i = from; i < kv->n_pages; i++) {
        p->used -= p->fmt.bytes;
        if (p->n_free < FREE_KEEP)
            p->free[p->n_free++] = kv->pages[i];
        else
            free(kv->pages[i]);
        kv->pages[i] = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    kv->n_pages = from < kv->n_pages ? from : kv->n_pages;
}

int attn_kv_reserve(attn_kv *kv, int t, char *err)
{
    attn_kv_pool *p = kv->pool;
    int page = p->fmt.page;
    if (t < 0 || kv->len > INT32_MAX - t)
        return attn__fail(err, ATTN_EOVERFLOW,
                          "sequence length %d + %d overflows", kv->len, t);
    long long need = ((long long)kv->len + t + page - 1) / page;
    if (need <= kv->n_pages)
        return 0;
    if (need > kv->cap) {
        long long cap = kv->cap ? kv->cap : 4;
        while (cap < need)
            cap *= 2;
        void **np = realloc(kv->pages, (size_t)cap * sizeof *np);
        if (!np)
            return attn__fail(err, ATTN_ENOMEM,
                              "out of memory for a page table of %lld pages",
                              cap);
        kv->pages = np;
        kv->cap = (int)cap;
    }
    int had = kv->n_pages;
    size_t more = (size_t)(need - had) * p->fmt.bytes;
    pthread_mutex_lock(&p->mu);
    if (more > p->budget - p->used) {
        size_t used = p->used;
        pthread_mutex_unlock(&p->mu);
        return attn__fail(err, ATTN_EFULL,
                          "the K/V budget (kv-bytes = %zu) holds %zu bytes; "
                          "%d more token%s need%s %zu more",
                          p->budget, used, t, t == 1 ? "" : "s",
                          t == 1 ? "s" : "", more);
    }
    p->used += more;
    while (kv->n_pages < need && p->n_free > 0)
        kv->pages[kv->n_pages++] = p->free[--p->n_free];
    if (p->n_free < p->low)
        p->low = p->n_free;
    /* the pages still missing are allocated below, counted in used now */
    size_t held = p->used + (size_t)p->n_free * p->fmt.bytes;
    if (held > p->peak)
        p->peak = held;
    pthread_mutex_unlock(&p->mu);
    while (kv->n_pages < need) {
        void *pg = aligned_alloc(64, (p->fmt.bytes + 63) / 64 * 64);
        if (!pg) {
            /* the bytes were counted for every page still missing */
            pthread_mutex_lock(&p->mu);
            p->used -= (size_t)(need - kv->n_pages) * p->fmt.bytes;
            pthread_mutex_unlock(&p->mu);
            give_back(kv, had);
            return attn__fail(err, ATTN_ENOMEM,
                              "out of memory for a K/V page of %zu bytes",
                              p->fmt.bytes);
        }
        kv->pages[kv->n_pages++] = pg;
    }
    return 0;
}

void attn_kv_advance(attn_kv *kv, int t)
{
    kv->len += t;
}

void attn_kv_trim(attn_kv *kv)
{
    int page = kv->pool->fmt.page;
    give_back(kv, (kv->len + page - 1) / page);
}

/* copy_rows: rows [r0, r1) of kv's pages to buf (out) or back (in). */
static void copy_rows(const attn_kv *kv, int r0, int r1, char *buf, int out)
{
    const attn_kv_page_fmt *f = &kv->pool->fmt;
    size_t e = elem_bytes(f->dtype);
    for (int r = r0; r < r1; r++)
        for (int h = 0; h < f->n_kv; h++)
            for (int which = 0; which < 2; which++) {
                size_t n = (size_t)(which ? f->dv : f->dk) * e;
                char *row = attn__kv_row(f, kv->pages, which, h, r);
                memcpy(out ? buf : row, out ? row : buf, n);
                buf += n;
            }
}

/* rewound_rows: the end of the rows a pass of t tokens from n overwrites. */
static int rewound_rows(const attn_kv *kv, int n, int t)
{
    return t > kv->len - n ? kv->len : n + t;
}

size_t attn_kv_rewind_bytes(const attn_kv *kv, int n, int t)
{
    const attn_kv_page_fmt *f = &kv->pool->fmt;
    if (n < 0 || n > kv->len || t < 0)
        return 0;
    return (size_t)(rewound_rows(kv, n, t) - n) * (f->bytes / (size_t)f->page);
}

int attn_kv_rewind(attn_kv *kv, int n, int t, void *save, attn_kv_undo *u,
                   char *err)
{
    memset(u, 0, sizeof *u);
    if (n < 0 || n > kv->len || t < 0)
        return attn__fail(err, ATTN_EINVAL, "rewind to %d of %d token%s", n,
                          kv->len, kv->len == 1 ? "" : "s");
    int r1 = rewound_rows(kv, n, t);
    if (r1 > n && !save)
        return attn__fail(err, ATTN_EINVAL, "no room to save %d token%s",
                          r1 - n, r1 - n == 1 ? "" : "s");
    if (r1 > n)
        copy_rows(kv, n, r1, save, 1);
    *u = (attn_kv_undo){.held = 1, .len = kv->len, .r0 = n, .r1 = r1,
                        .rows = save};
    kv->len = n;
    return 0;
}

void attn_kv_rewind_undo(attn_kv *kv, attn_kv_undo *u)
{
    if (!u->held)
        return;
    if (u->r1 > u->r0)
        copy_rows(kv, u->r0, u->r1, u->rows, 0);
    kv->len = u->len;
    memset(u, 0, sizeof *u);
}

void attn_kv_free(attn_kv *kv)
{
    attn_kv_pool *p = kv->pool;
    give_back(kv, 0);
    free(kv->pages);
    attn_kv_init(kv, p);
}

size_t attn_kv_bytes(const attn_kv *kv)
{
    return (size_t)kv->n_pages * kv->pool->fmt.bytes;
}

void attn_kv_read(const attn_kv *kv, int h, int r0, int r1, float *k, float *v)
{
    const attn_kv_page_fmt *f = &kv->pool->fmt;
    for (int r = r0; r < r1; r++) {
        if (k)
            attn__kv_get(f, kv->pages, 0, h, r, 1,
                         k + (size_t)(r - r0) * (size_t)f->dk);
        if (v)
            attn__kv_get(f, kv->pages, 1, h, r, 1,
                         v + (size_t)(r - r0) * (size_t)f->dv);
    }
}

/* ---- page layout and conversions ------------------------------------- */

/* FP32 -> FP16, round to nearest even; overflow to Inf, NaN kept NaN. */
static uint16_t to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* Inf, NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* subnormal half (or zero) */
        if (ax < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - e); /* 14 .. 24 (2^-14 .. 2^-25) */
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1),
                 half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
             m = h & 0x3ffu, x;
    if (e == 0) {
        if (!m) {
            x = sign;
        } else { /* subnormal: normalise */
            e = 113;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            x = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static float from_bf16(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

void *attn__kv_row(const attn_kv_page_fmt *f, void *const *pages, int which,
                   int h, int row)
{
    size_t e = elem_bytes(f->dtype), P = (size_t)f->page;
    size_t koff = (size_t)f->n_kv * P * (size_t)f->dk;
    size_t d = which ? (size_t)f->dv : (size_t)f->dk;
    size_t off = (which ? koff : 0) + ((size_t)h * P + (size_t)(row % f->page)) * d;
    return (char *)pages[row / f->page] + off * e;
}

void attn__kv_put(const attn_kv_page_fmt *f, void *const *pages, int which,
                  int h, int row, const float *x)
{
    int d = which ? f->dv : f->dk;
    void *dst = attn__kv_row(f, pages, which, h, row);
    if (f->dtype == ATTN_KV_F32) {
        memcpy(dst, x, (size_t)d * sizeof(float));
        return;
    }
    uint16_t *o = dst;
    for (int i = 0; i < d; i++)
        o[i] = f->dtype == ATTN_KV_F16 ? to_f16(x[i]) : to_bf16(x[i]);
}

void attn__kv_get(const attn_kv_page_fmt *f, void *const *pages, int which,
                  int h, int row, int n, float *out)
{
    int d = which ? f->dv : f->dk;
    for (int r = 0; r < n; r++) {
        const void *src = attn__kv_row(f, pages, which, h, row + r);
        float *o = out + (size_t)r * (size_t)d;
        if (f->dtype == ATTN_KV_F32) {
            memcpy(o, src, (size_t)d * sizeof(float));
            continue;
        }
        const uint16_t *s = src;
        if (f->dtype == ATTN_KV_F16)
            for (int i = 0; i < d; i++)
                o[i] = from_f16(s[i]);
        else
            for (int i = 0; i < d; i++)
                o[i] = from_bf16(s[i]);
    }
}
