/* test_maps.c - the retained-map store (server/maps.c) and its HTTP
 * rendering (server/maps_http.c). Expected values are worked by hand in
 * the comments, never produced by the code under test. */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/attn.h"
#include "server/maps.h"
#include "server/maps_int.h"
#include "tests/check_main.h"

/* A map whose every cell is distinct: value = base + b*1000 + h*100 +
 * i*S + j (exact in float for the sizes used here). */
static float *pattern(int b, int h, int t, int s, float base)
{
    float *m = malloc((size_t)b * h * t * s * sizeof(float));
    int x, y, i, j;

    for (x = 0; x < b; x++)
        for (y = 0; y < h; y++)
            for (i = 0; i < t; i++)
                for (j = 0; j < s; j++)
                    m[(((size_t)x * h + y) * t + i) * s + j] =
                        base + (float)(x * 1000 + y * 100 + i * s + j);
    return m;
}

static int put(maps_store *st, const char *model, const float *a, int b,
               int h, int t, int s, char *id)
{
    maps_put_args args = {.model = model, .b = b, .h = h, .t = t, .s = s,
                          .attention = a};
    char err[ATTN_ERRMAX];
    return maps_put(st, &args, id, err);
}

/* The bytes one [1, 1, 4, 4] entry without labels counts. */
static size_t entry_bytes(void)
{
    return 16 * sizeof(float) + sizeof(maps__entry) + 2 * sizeof(int32_t);
}

START_TEST(test_roundtrip_exact)
{
    maps_store *st;
    float *a = pattern(2, 3, 4, 5, 0.5f), *out;
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX];
    int rows, cols, rb, cb, b, h, i;
    maps_info info;

    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(put(st, "demo", a, 2, 3, 4, 5, id), 0);
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_str_eq(info.model, "demo");
    ck_assert_int_eq(info.b, 2);
    ck_assert_int_eq(info.h, 3);
    ck_assert_int_eq(info.t, 4);
    ck_assert_int_eq(info.s, 5);
    for (b = 0; b < 2; b++)
        for (h = 0; h < 3; h++) {
            ck_assert_int_eq(maps_slice(st, id, b, h, 0, &out, &rows, &cols,
                                        &rb, &cb, err), 0);
            ck_assert_int_eq(rows, 4);
            ck_assert_int_eq(cols, 5);
            ck_assert_int_eq(rb, 1);
            ck_assert_int_eq(cb, 1);
            for (i = 0; i < 20; i++)
                ck_assert_float_eq(out[i],
                                   0.5f + (float)(b * 1000 + h * 100 + i));
            free(out);
        }
    /* Mean over heads of b=1, cell 7: (1000+7 + 1100+7 + 1200+7)/3 + 0.5 */
    ck_assert_int_eq(maps_slice(st, id, 1, -1, 0, &out, &rows, &cols, NULL,
                                NULL, err), 0);
    ck_assert_float_eq_tol(out[7], 1107.5f, 1e-3f);
    free(out);
    /* Out of range b and h are refused, naming the parameter. */
    ck_assert_int_eq(maps_slice(st, id, 2, 0, 0, &out, &rows, &cols, NULL,
                                NULL, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "b:"));
    ck_assert_int_eq(maps_slice(st, id, 0, 3, 0, &out, &rows, &cols, NULL,
                                NULL, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "h:"));
    maps_store_destroy(st);
    free(a);
}
END_TEST

START_TEST(test_evict_oldest_by_bytes)
{
    maps_store *st;
    float *a = pattern(1, 1, 4, 4, 0.0f), *out;
    char id1[MAPS_ID_MAX], id2[MAPS_ID_MAX], id3[MAPS_ID_MAX];
    char err[ATTN_ERRMAX];
    maps_info list[8];
    size_t used, n;
    uint64_t evicted;
    int rows, cols;

    /* Room for exactly two entries. */
    ck_assert_int_eq(maps_store_create(&st, 2 * entry_bytes()), 0);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id1), 0);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id2), 0);
    maps_stats(st, &used, NULL, &n, &evicted);
    ck_assert_uint_eq(used, 2 * entry_bytes());
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(evicted, 0);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id3), 0);
    maps_stats(st, &used, NULL, &n, &evicted);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(evicted, 1);
    /* The oldest went; the two newest remain, listed newest first. */
    ck_assert_int_eq(maps_info_get(st, id1, &list[0]), ATTN_ENOTFOUND);
    ck_assert_int_eq(maps_slice(st, id1, 0, 0, 0, &out, &rows, &cols, NULL,
                                NULL, err), ATTN_ENOTFOUND);
    ck_assert_uint_eq(maps_list(st, list, 8), 2);
    ck_assert_str_eq(list[0].id, id3);
    ck_assert_str_eq(list[1].id, id2);
    ck_assert_str_ne(id1, id2);
    ck_assert_str_ne(id2, id3);
    maps_store_destroy(st);
    free(a);
}
END_TEST

START_TEST(test_too_large_refused)
{
    maps_store *st;
    float *a = pattern(1, 2, 8, 8, 0.0f);
    char id[MAPS_ID_MAX], id2[MAPS_ID_MAX], err[ATTN_ERRMAX];
    maps_put_args args = {.model = "m", .b = 1, .h = 2, .t = 8, .s = 8,
                          .attention = a};
    size_t n;

    ck_assert_int_eq(maps_store_create(&st, 2 * entry_bytes()), 0);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id), 0);
    /* 2*8*8 floats = 512 bytes > the whole store: refused, nothing
     * evicted. */
    ck_assert_int_eq(maps_put(st, &args, id2, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "bytes, maps-bytes)"));
    maps_stats(st, NULL, NULL, &n, NULL);
    ck_assert_uint_eq(n, 1);
    /* Bad shapes and label counts name the field. */
    args.h = 0;
    ck_assert_int_eq(maps_put(st, &args, id2, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "attention"));
    args.h = 1;
    args.t = 2;
    args.s = 2;
    {
        const char *tok[3] = {"a", "b", "c"};
        args.tokens = tok;
        args.n_tokens = 3;
        ck_assert_int_eq(maps_put(st, &args, id2, err), ATTN_EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "parameters.tokens"));
    }
    maps_store_destroy(st);
    free(a);
}
END_TEST

START_TEST(test_pool_max_exact)
{
    /* 5 x 7 map, cell (i, j) = i*7 + j. max=2 gives blocks of
     * ceil(5/2)=3 rows by ceil(7/2)=4 columns, so a 2 x 2 result:
     *   rows 0-2, cols 0-3 -> max at (2,3) = 17
     *   rows 0-2, cols 4-6 -> (2,6) = 20
     *   rows 3-4, cols 0-3 -> (4,3) = 31
     *   rows 3-4, cols 4-6 -> (4,6) = 34 */
    float in[35], out[4];
    int i, rows, cols, rb, cb;

    for (i = 0; i < 35; i++)
        in[i] = (float)i;
    ck_assert_int_eq(maps_pool_max(in, 5, 7, 2, out, &rows, &cols, &rb,
                                   &cb), 0);
    ck_assert_int_eq(rows, 2);
    ck_assert_int_eq(cols, 2);
    ck_assert_int_eq(rb, 3);
    ck_assert_int_eq(cb, 4);
    ck_assert_float_eq(out[0], 17.0f);
    ck_assert_float_eq(out[1], 20.0f);
    ck_assert_float_eq(out[2], 31.0f);
    ck_assert_float_eq(out[3], 34.0f);
    /* A max in the middle of a block wins over its corners: negate all
     * but cell (1, 5) = 12, which lies in block (0, 1). */
    for (i = 0; i < 35; i++)
        in[i] = -(float)i;
    in[12] = 0.25f;
    maps_pool_max(in, 5, 7, 2, out, &rows, &cols, NULL, NULL);
    ck_assert_float_eq(out[0], 0.0f);  /* cell (0,0) = -0 */
    ck_assert_float_eq(out[1], 0.25f);
    ck_assert_float_eq(out[2], -21.0f); /* cell (3,0) */
    ck_assert_float_eq(out[3], -25.0f); /* cell (3,4) */
}
END_TEST

START_TEST(test_pool_identity_4096)
{
    /* An identity map at T = 4096 pooled to max=64: 64-row blocks, so
     * the 64 x 64 overview is the identity again, exactly. */
    enum { T = 4096, N = 64 };
    maps_store *st;
    float *a = calloc((size_t)T * T, sizeof(float)), *out;
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX];
    int i, j, rows, cols, rb, cb;

    for (i = 0; i < T; i++)
        a[(size_t)i * T + i] = 1.0f;
    ck_assert_int_eq(maps_store_create(&st, (size_t)80 << 20), 0);
    ck_assert_int_eq(put(st, "sdpa", a, 1, 1, T, T, id), 0);
    ck_assert_int_eq(maps_slice(st, id, 0, 0, N, &out, &rows, &cols, &rb,
                                &cb, err), 0);
    ck_assert_int_eq(rows, N);
    ck_assert_int_eq(cols, N);
    ck_assert_int_eq(rb, T / N);
    for (i = 0; i < N; i++)
        for (j = 0; j < N; j++)
            ck_assert_float_eq(out[i * N + j], i == j ? 1.0f : 0.0f);
    free(out);
    /* max=1000 does not divide 4096: blocks of 5 -> 820 x 820 cells. */
    ck_assert_int_eq(maps_slice(st, id, 0, 0, 1000, &out, &rows, &cols,
                                &rb, &cb, err), 0);
    ck_assert_int_eq(rb, 5);
    ck_assert_int_eq(rows, 820);
    ck_assert_float_eq(out[819 * 820 + 819], 1.0f); /* rows 4095.. */
    ck_assert_float_eq(out[819 * 820 + 818], 0.0f);
    free(out);
    maps_store_destroy(st);
    free(a);
}
END_TEST

START_TEST(test_reader_outlives_eviction)
{
    maps_store *st;
    float *a = pattern(1, 1, 4, 4, 3.0f);
    char id1[MAPS_ID_MAX], id2[MAPS_ID_MAX], id3[MAPS_ID_MAX];
    maps__entry *e;

    ck_assert_int_eq(maps_store_create(&st, 2 * entry_bytes()), 0);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id1), 0);
    e = maps__acquire(st, id1);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id2), 0);
    ck_assert_int_eq(put(st, "m", a, 1, 1, 4, 4, id3), 0);
    /* Evicted from the list, still readable by its holder (ASan checks). */
    ck_assert_ptr_null(maps__acquire(st, id1));
    ck_assert_float_eq(e->attention[15], 18.0f);
    maps__release(e);
    maps_store_destroy(st);
    free(a);
}
END_TEST

static json_t *get_json(maps_store *st, const char *path, const char **kv,
                        int want_status)
{
    maps_reply r;
    json_error_t jerr;
    json_t *o;

    ck_assert_int_eq(maps_http_get(st, path, tu_kv, kv, &r), 0);
    ck_assert_int_eq(r.status, want_status);
    ck_assert_str_eq(r.content_type, "application/json");
    o = json_loadb(r.body, r.len, 0, &jerr);
    ck_assert_msg(o != NULL, "bad JSON: %s", jerr.text);
    free(r.body);
    return o;
}

START_TEST(test_http_routes)
{
    maps_store *st;
    float *a = pattern(1, 2, 3, 3, 0.0f);
    const char *tok[3] = {"the", "cat", "\"sat\""};
    maps_put_args args = {.model = "demo", .b = 1, .h = 2, .t = 3, .s = 3,
                          .attention = a, .causal = 1, .tokens = tok,
                          .n_tokens = 3};
    char id[MAPS_ID_MAX], id2[MAPS_ID_MAX], err[ATTN_ERRMAX], path[96];
    const char *none[] = {NULL};
    json_t *o, *data;
    maps_reply r;
    size_t i;

    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &args, id, err), 0);
    ck_assert_int_eq(put(st, "sdpa", a, 1, 1, 3, 3, id2), 0);

    o = get_json(st, "/v2/maps", none, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "maps")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "count")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(o, "maps"), 0),
                         "id")), id2);
    json_decref(o);

    snprintf(path, sizeof(path), "/v2/maps/%s", id);
    o = get_json(st, path, none, 200);
    ck_assert_str_eq(json_string_value(json_object_get(o, "model")), "demo");
    ck_assert_int_eq(json_integer_value(json_array_get(
                         json_object_get(o, "shape"), 1)), 2);
    ck_assert_str_eq(json_string_value(json_array_get(
                         json_object_get(o, "tokens"), 2)), "\"sat\"");
    ck_assert_str_eq(json_string_value(json_array_get(
                         json_object_get(o, "key_tokens"), 0)), "the");
    ck_assert(json_is_true(json_object_get(o, "causal")));
    json_decref(o);

    /* Head 1 of b=0: cell (i, j) = 100 + 3i + j. */
    snprintf(path, sizeof(path), "/v2/maps/%s/attention", id);
    {
        const char *kv[] = {"b", "0", "h", "1", NULL};
        o = get_json(st, path, kv, 200);
    }
    data = json_object_get(o, "data");
    ck_assert_uint_eq(json_array_size(data), 9);
    for (i = 0; i < 9; i++)
        ck_assert_float_eq(json_number_value(json_array_get(data, i)),
                           100.0 + (double)i);
    json_decref(o);

    /* format=f32 and max=2: blocks of 2, cell (0,0) = max(100,101,103,104)
     * = 104, (0,1) = 105, (1,0) = 107, (1,1) = 108. */
    {
        const char *kv[] = {"h", "1", "max", "2", "format", "f32", NULL};
        float want[4] = {104, 105, 107, 108};
        ck_assert_int_eq(maps_http_get(st, path, tu_kv, kv, &r), 0);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.content_type, "application/octet-stream");
        ck_assert_str_eq(r.shape, "2,2");
        ck_assert_uint_eq(r.len, 16);
        ck_assert_mem_eq(r.body, want, 16);
        free(r.body);
    }
    /* Bad parameters: 400 naming them. Unknown ids: 404. */
    {
        const char *bad[][3] = {{"b", "x", "b:"},  {"b", "1", "b:"},
                                {"h", "-1", "h:"}, {"h", "2", "h:"},
                                {"max", "0", "max:"},
                                {"format", "npz", "format:"},
                                {"b", "al", "b:"}, {"h", "alL", "h:"}};
        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            const char *kv[] = {bad[i][0], bad[i][1], NULL};
            o = get_json(st, path, kv, 400);
            ck_assert_msg(strstr(json_string_value(json_object_get(
                                     o, "error")), bad[i][2]) != NULL,
                          "case %zu", i);
            json_decref(o);
        }
    }
    o = get_json(st, "/v2/maps/m999-000000", none, 404);
    json_decref(o);
    o = get_json(st, "/v2/maps/m999-000000/attention", none, 404);
    json_decref(o);
    o = get_json(st, "/v2/maps/..%2f/attention", none, 404);
    json_decref(o);
    snprintf(path, sizeof(path), "/v2/maps/%s/scores", id);
    o = get_json(st, path, none, 404);
    json_decref(o);
    maps_store_destroy(st);
    free(a);
}
END_TEST

/* Many threads put and read concurrently through a small store; every
 * read that succeeds must see exactly the pattern its writer stored. */
typedef struct worker_arg {
    maps_store *st;
    int seed;
    int bad;
    int checked; /* slices compared (an evicted map is skipped) */
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX];
    int it, i, rows, cols;

    for (it = 0; it < 200; it++) {
        float base = (float)(w->seed * 10000 + it);
        float *a = pattern(1, 1, 8, 8, base), *out;
        if (put(w->st, "m", a, 1, 1, 8, 8, id) != 0)
            w->bad++;
        if (maps_slice(w->st, id, 0, 0, 0, &out, &rows, &cols, NULL, NULL,
                       err) == 0) {
            for (i = 0; i < 64; i++)
                if (out[i] != base + (float)i)
                    w->bad++;
            w->checked++;
            free(out);
        }
        free(a);
    }
    return NULL;
}

/* A reader that goes after `after` askings (0: never). */
typedef struct {
    int asked, after;
} reader;

static int reader_went(void *ctx)
{
    reader *rd = ctx;
    return ++rd->asked == rd->after;
}

/* maps_http_render asks its cut before every 16th row of a plane (the
 * first too) and before printing: a reader that went stops the render there (no
 * body, r.cut), one that stays gets maps_http_get's bytes. */
START_TEST(test_render_cut)
{
    maps_store *st;
    float *a = pattern(1, 3, 40, 40, 0.0f);
    char id[MAPS_ID_MAX], path[96];
    const char *mean[] = {"h", "mean", NULL}, *mask[] = {"h", "mean", "what",
                                                         "mask", NULL};
    maps_reply r, whole;
    reader rd = {0, 0};

    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(put(st, "demo", a, 1, 3, 40, 40, id), 0);
    snprintf(path, sizeof path, "/v2/maps/%s/attention", id);
    ck_assert_int_eq(maps_http_get(st, path, tu_kv, mean, &whole), 0);
    ck_assert_int_eq(maps_http_render(st, path, tu_kv, mean, reader_went, &rd, 0,
                                      &r), 0);
    ck_assert_int_eq(r.cut, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, whole.len);
    ck_assert(memcmp(r.body, whole.body, r.len) == 0);
    ck_assert_int_eq(rd.asked, 3 + 1); /* rows 0, 16, 32, printing */
    free(r.body);
    free(whole.body);
    /* gone at row 16, or before printing: nothing rendered after */
    for (int after = 1; after <= 4; after++) {
        rd = (reader){0, after};
        ck_assert_int_eq(maps_http_render(st, path, tu_kv, mean, reader_went,
                                          &rd, 0, &r), 0);
        ck_assert_int_eq(r.cut, 1);
        ck_assert_ptr_null(r.body);
        ck_assert_int_eq(rd.asked, after);
    }
    /* a mask's cells: asked every 16 rows too (the third at row 32) */
    rd = (reader){0, 3};
    ck_assert_int_eq(maps_http_render(st, path, tu_kv, mask, reader_went, &rd, 0,
                                      &r), 0);
    ck_assert_int_eq(r.cut, 1);
    ck_assert_ptr_null(r.body);
    ck_assert_int_eq(rd.asked, 3);
    /* b=all&h=all: asked before each plane and within it (rows 0, 16
     * and 32 of each head's), and before printing: 3 x (1 + 3) + 1 when
     * the reader stays */
    {
        const char *every[] = {"b", "all", "h", "all", NULL};
        rd = (reader){0, 0};
        ck_assert_int_eq(maps_http_render(st, path, tu_kv, every, reader_went,
                                          &rd, 0, &r), 0);
        ck_assert_int_eq(r.cut, 0);
        ck_assert_int_eq(r.status, 200);
        ck_assert_int_eq(rd.asked, 3 * 4 + 1);
        free(r.body);
        for (int after = 1; after <= 13; after++) {
            rd = (reader){0, after};
            ck_assert_int_eq(maps_http_render(st, path, tu_kv, every,
                                              reader_went, &rd, 0, &r), 0);
            ck_assert_int_eq(r.cut, 1);
            ck_assert_ptr_null(r.body);
            ck_assert_int_eq(rd.asked, after);
        }
    }
    maps_store_destroy(st);
    free(a);
}
END_TEST

START_TEST(test_threads)
{
    maps_store *st;
    pthread_t th[4];
    worker_arg wa[4];
    maps_info list[64];
    int i;

    ck_assert_int_eq(maps_store_create(&st, 6 * (64 * sizeof(float) +
                                                 sizeof(maps__entry) + 8)),
                     0);
    for (i = 0; i < 4; i++) {
        wa[i] = (worker_arg){.st = st, .seed = i + 1};
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &wa[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(wa[i].bad, 0);
        /* a thread whose every slice failed would have compared nothing */
        ck_assert_int_gt(wa[i].checked, 0);
    }
    ck_assert_uint_le(maps_list(st, list, 64), 6);
    maps_store_destroy(st);
}
END_TEST

/* Mask, scores and values kept for the page's masked cells and step view:
 * B = 2, H = 2 (one kv head), T = S = 3, two mask planes (one per batch
 * item), item 1 with 2 valid rows; causal off. */
START_TEST(test_mask_scores_values)
{
    maps_store *st;
    float *a = pattern(2, 2, 3, 3, 0.0f), *sc = pattern(2, 2, 3, 3, 0.25f);
    float v[2 * 1 * 3 * 2] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    /* plane 0: the anti-diagonal masked; plane 1: column 0 masked. */
    const uint8_t mask[2 * 9] = {1, 1, 0, 1, 0, 1, 0, 1, 1,
                                 0, 1, 1, 0, 1, 1, 0, 1, 1};
    const int32_t tv[2] = {3, 2}, sv[2] = {3, 3};
    /* b=0, h=0: a masked score, one in exponent form, one negative */
    sc[1] = -INFINITY;
    sc[2] = 1.25e-7f;
    sc[3] = -0.7f;
    maps_put_args args = {.model = "demo", .b = 2, .h = 2, .t = 3, .s = 3,
                          .attention = a, .t_valid = tv, .s_valid = sv,
                          .mask = mask, .mask_planes = 2, .scores = sc,
                          .v = v, .kv_h = 1, .dv = 2, .dk = 8};
    /* Expected allowed cells, worked by hand: item 0 = plane 0; item 1 =
     * plane 1 with row 2 gone (lengths). */
    const float want0[9] = {1, 1, 0, 1, 0, 1, 0, 1, 1};
    const float want1[9] = {0, 1, 1, 0, 1, 1, 0, 0, 0};
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX], path[96];
    int rows, cols, rb, cb, i;
    float *out;
    maps_info info;
    json_t *o, *kept, *data;

    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &args, id, err), 0);
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    /* Counted: weights + scores (2 x 36 floats), v (12 floats), 18 mask
     * bits (3 bytes), the entry and 2 x 2 lengths. */
    ck_assert_uint_eq(info.bytes, 2 * 36 * sizeof(float) +
                                      12 * sizeof(float) + 3 +
                                      sizeof(maps__entry) +
                                      4 * sizeof(int32_t));
    ck_assert_int_eq(maps_slice_of(st, id, MAPS_ALLOWED, 0, 1, 0, &out, &rows,
                                   &cols, NULL, NULL, err), 0);
    for (i = 0; i < 9; i++)
        ck_assert_float_eq(out[i], want0[i]);
    free(out);
    ck_assert_int_eq(maps_slice_of(st, id, MAPS_ALLOWED, 1, 0, 0, &out, &rows,
                                   &cols, NULL, NULL, err), 0);
    for (i = 0; i < 9; i++)
        ck_assert_float_eq(out[i], want1[i]);
    free(out);
    /* Pooled 2x2 blocks of item 1: (0..1, 0..1) has 1 allowed -> 1;
     * (2, 0..1) none -> 0. */
    ck_assert_int_eq(maps_slice_of(st, id, MAPS_ALLOWED, 1, 0, 2, &out, &rows,
                                   &cols, &rb, &cb, err), 0);
    ck_assert_int_eq(rows, 2);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[2], 0.0f);
    free(out);
    /* Scores of b=1, h=1, cell 4: 0.25 + 1000 + 100 + 4. */
    ck_assert_int_eq(maps_slice_of(st, id, MAPS_SCORES, 1, 1, 0, &out, &rows,
                                   &cols, NULL, NULL, err), 0);
    ck_assert_float_eq(out[4], 1104.25f);
    free(out);
    /* Values of b=1 for head 1 (kv head 0): rows 7..12. */
    ck_assert_int_eq(maps_values(st, id, 1, 1, &out, &rows, &cols, err), 0);
    ck_assert_int_eq(rows, 3);
    ck_assert_int_eq(cols, 2);
    ck_assert_float_eq(out[0], 7.0f);
    ck_assert_float_eq(out[5], 12.0f);
    free(out);

    snprintf(path, sizeof(path), "/v2/maps/%s", id);
    o = get_json(st, path, (const char *[]){NULL}, 200);
    ck_assert(json_is_true(json_object_get(o, "mask")));
    kept = json_object_get(o, "retained");
    ck_assert_uint_eq(json_array_size(kept), 4);
    ck_assert_str_eq(json_string_value(json_array_get(kept, 2)), "scores");
    ck_assert_str_eq(json_string_value(json_array_get(kept, 3)), "v");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "d_k")), 8);
    ck_assert_int_eq(json_integer_value(json_array_get(
                         json_object_get(o, "v_shape"), 3)), 2);
    json_decref(o);
    snprintf(path, sizeof(path), "/v2/maps/%s/attention", id);
    o = get_json(st, path, (const char *[]){"b", "1", "what", "mask", NULL},
                 200);
    data = json_object_get(o, "data");
    for (i = 0; i < 9; i++)
        ck_assert_float_eq((float)json_number_value(json_array_get(data, i)),
                           want1[i]);
    json_decref(o);
    /* Scores as JSON: each float reads back as itself, -inf as null. */
    o = get_json(st, path, (const char *[]){"b", "0", "h", "0", "what",
                                            "scores", NULL}, 200);
    data = json_object_get(o, "data");
    ck_assert_uint_eq(json_array_size(data), 9);
    ck_assert(json_is_null(json_array_get(data, 1)));
    for (i = 0; i < 9; i++)
        if (i != 1)
            ck_assert_float_eq((float)json_number_value(json_array_get(data, i)),
                               sc[i]);
    json_decref(o);
    o = get_json(st, path, (const char *[]){"b", "0", "h", "1", "what", "v",
                                            NULL}, 200);
    ck_assert_float_eq((float)json_number_value(json_array_get(
                           json_object_get(o, "data"), 1)), 2.0f);
    json_decref(o);
    /* Bad what, v with max, v of the mean: 400 naming the parameter. */
    o = get_json(st, path, (const char *[]){"what", "q", NULL}, 400);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o, "error")),
                                 "what"));
    json_decref(o);
    o = get_json(st, path, (const char *[]){"what", "v", "max", "2", NULL}, 400);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o, "error")),
                                 "max"));
    json_decref(o);
    o = get_json(st, path, (const char *[]){"what", "v", "h", "mean", NULL},
                 400);
    json_decref(o);

    /* A map without scores or values refuses them, naming `what`. */
    ck_assert_int_eq(put(st, "sdpa", a, 1, 1, 3, 3, id), 0);
    ck_assert_int_eq(maps_slice_of(st, id, MAPS_SCORES, 0, 0, 0, &out, &rows,
                                   &cols, NULL, NULL, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "what"));
    ck_assert_int_eq(maps_values(st, id, 0, 0, &out, &rows, &cols, err),
                     ATTN_EINVAL);
    /* Bad plane counts and kv heads are refused. */
    args.mask_planes = 3;
    ck_assert_int_eq(maps_put(st, &args, id, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "mask"));
    args.mask_planes = 4, args.kv_h = 3;
    ck_assert_int_eq(maps_put(st, &args, id, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "v"));
    free(a);
    free(sc);
    maps_store_destroy(st);
}
END_TEST

/* what=v as JSON is limited by its own cells, the value rows [S, d_v],
 * not by the weights' [T, S]: 1025 x 1025 weights with values [1025, 1]
 * are 1025 cells of JSON (before: 400, "ask for max=1024", which what=v
 * refuses); 1 x 1100 weights with values [1100, 1000] are 1.1M cells,
 * past the 1M a JSON map may have (before: printed, ~19 MB). */
START_TEST(test_values_json_limit)
{
    const int n = 1025, s2 = 1100, dv2 = 1000;
    float *a = calloc((size_t)n * n, sizeof(float));
    float *v = calloc((size_t)s2 * dv2, sizeof(float));
    maps_put_args args = {.model = "sdpa", .b = 1, .h = 1, .t = n, .s = n,
                          .attention = a, .v = v, .kv_h = 1, .dv = 1};
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX], path[96];
    const char *kv[] = {"h", "0", "what", "v", NULL};
    maps_store *st;
    json_t *o;
    const char *msg;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(v);
    v[n - 1] = 7.0f;
    ck_assert_int_eq(maps_store_create(&st, 64 << 20), 0);
    ck_assert_int_eq(maps_put(st, &args, id, err), 0);
    snprintf(path, sizeof(path), "/v2/maps/%s/attention", id);
    o = get_json(st, path, kv, 200);
    ck_assert_int_eq(json_integer_value(json_array_get(
                         json_object_get(o, "shape"), 0)), n);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "data")), (size_t)n);
    ck_assert_float_eq(json_number_value(json_array_get(
                           json_object_get(o, "data"), n - 1)), 7.0);
    json_decref(o);

    args.t = 1, args.s = s2, args.dv = dv2;
    ck_assert_int_eq(maps_put(st, &args, id, err), 0);
    snprintf(path, sizeof(path), "/v2/maps/%s/attention", id);
    o = get_json(st, path, kv, 400);
    msg = json_string_value(json_object_get(o, "error"));
    ck_assert_ptr_nonnull(strstr(msg, "format=f32"));
    ck_assert_ptr_null(strstr(msg, "max="));
    json_decref(o);
    free(a);
    free(v);
    maps_store_destroy(st);
}
END_TEST

/* GET /v2/maps is one moment of the store: it read the bytes in use, then
 * the list, then the count, each under its own lock, so that a put or an
 * eviction between them answered a count or bytes_used that the listed
 * maps did not add up to. A thread puts maps of two sizes into a small
 * store while this one lists: count is the number listed, bytes_used
 * their sum. */
typedef struct putter {
    maps_store *st;
    int stop; /* atomic */
} putter;

static void *put_many(void *arg)
{
    putter *p = arg;
    float cells[64];
    char id[MAPS_ID_MAX];
    int i;
    for (i = 0; i < 64; i++)
        cells[i] = 1.0f / 64;
    /* an 8 x 8 map, then four 4 x 4: the store holds 3 or 4 maps, and
     * its bytes change at each put */
    for (i = 0; !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE); i++)
        if (put(p->st, "m", cells, 1, 1, i % 5 ? 4 : 8, i % 5 ? 4 : 8,
                id) != 0)
            break;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(test_list_one_moment)
{
    maps_store *st;
    putter p;
    pthread_t th;
    int reads = 0, torn = 0;

    double t_end = now_s() + 1.5;

    ck_assert_int_eq(maps_store_create(&st, 4 * entry_bytes()), 0);
    p = (putter){st, 0};
    ck_assert_int_eq(pthread_create(&th, NULL, put_many, &p), 0);
    /* 20,000 listings, or a second and a half (sanitized builds) */
    for (; reads < 20000 && (reads % 256 || now_s() < t_end); reads++) {
        maps_reply r;
        json_t *o, *list;
        json_int_t sum = 0;
        size_t i;
        ck_assert_int_eq(maps_http_get(st, "/v2/maps", NULL, NULL, &r), 0);
        ck_assert_int_eq(r.status, 200);
        o = json_loads(r.body, 0, NULL);
        ck_assert_ptr_nonnull(o);
        list = json_object_get(o, "maps");
        for (i = 0; i < json_array_size(list); i++)
            sum += json_integer_value(
                json_object_get(json_array_get(list, i), "bytes"));
        torn += json_integer_value(json_object_get(o, "count")) !=
                    (json_int_t)json_array_size(list) ||
                json_integer_value(json_object_get(o, "bytes_used")) != sum;
        json_decref(o);
        free(r.body);
    }
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    ck_assert_msg(torn == 0, "%d of %d listings did not add up", torn, reads);
    maps_store_destroy(st);
}
END_TEST

static Suite *maps_suite(void)
{
    Suite *s = suite_create("maps");
    TCase *tc = tcase_create("store");

    tcase_add_test(tc, test_roundtrip_exact);
    tcase_add_test(tc, test_evict_oldest_by_bytes);
    tcase_add_test(tc, test_too_large_refused);
    tcase_add_test(tc, test_pool_max_exact);
    tcase_add_test(tc, test_pool_identity_4096);
    tcase_add_test(tc, test_reader_outlives_eviction);
    tcase_add_test(tc, test_http_routes);
    tcase_add_test(tc, test_render_cut);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_mask_scores_values);
    tcase_add_test(tc, test_values_json_limit);
    tcase_add_test(tc, test_list_one_moment);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(maps_suite)
