/* test_maps_grow.c - a sequence's retained map grown step by step
 * (server/maps_grow.c, and maps_grow_put in server/maps.c), and the bound
 * on a map's answers (request-memory's 413). Expected values
 * are worked by hand in the comments, never produced by the code under
 * test. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "server/maps.h"
#include "server/maps_int.h"
#include "tests/check_main.h"

static int put(maps_store *st, const char *model, const float *a, int b,
               int h, int t, int s, char *id)
{
    maps_put_args args = {.model = model, .b = b, .h = h, .t = t, .s = s,
                          .attention = a};
    char err[ATTN_ERRMAX];
    return maps_put(st, &args, id, err);
}

/* grow: a sequence map's next step made and put at once. */
static int grow(maps_store *st, const char *id, int t0, const maps_put_args *a,
                char *err)
{
    maps_grown *g;
    int rc = maps_grow_make(st, id, t0, a, &g, err);
    return rc ? rc : maps_grow_put(st, g);
}

/* A sequence's map grows: a start of 2 tokens, then 1, then a step whose
 * rows were grown but that failed (dropped by the next grow at t0 = 3),
 * then 2 more at t0 = 3. Every row keeps its values, later keys are 0,
 * the id stays, labels are kept ("" where a step sent none), the entry is
 * the newest, and a reader holding the old version still sees it whole. */
START_TEST(test_grow_sequence_map)
{
    maps_store *st;
    char id[MAPS_ID_MAX], id2[MAPS_ID_MAX], err[ATTN_ERRMAX];
    /* head 0 cell (i, j) = 10 i + j + 1, head 1 = -(10 i + j + 1) */
    float start[2 * 2 * 2], step1[2 * 1 * 3], bad[2 * 1 * 4], step3[2 * 2 * 5];
    const char *lab0[] = {"a", "b"}, *lab3[] = {"d", "e"};
    maps_put_args a = {.model = "m", .b = 1, .h = 2, .t = 2, .s = 2,
                       .attention = start, .causal = 1, .tokens = lab0,
                       .n_tokens = 2};
    maps_info info;
    maps__entry *old;
    float *out;
    int rows, cols, i, j, k;

#define CELL(k, i, j) ((k) ? -1.0f : 1.0f) * (float)(10 * (i) + (j) + 1)
    for (k = 0; k < 2; k++)
        for (i = 0; i < 2; i++)
            for (j = 0; j < 2; j++)
                start[(k * 2 + i) * 2 + j] = CELL(k, i, j);
    for (k = 0; k < 2; k++)
        for (j = 0; j < 3; j++)
            step1[k * 3 + j] = CELL(k, 2, j);
    for (k = 0; k < 8; k++)
        bad[k] = 99.0f;
    for (k = 0; k < 2; k++)
        for (i = 3; i < 5; i++)
            for (j = 0; j < 5; j++)
                step3[(k * 2 + i - 3) * 5 + j] = CELL(k, i, j);
    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &a, id, err), 0);
    ck_assert_int_eq(put(st, "other", start, 1, 1, 2, 2, id2), 0);
    old = maps__acquire(st, id);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 1, .s = 3,
                        .attention = step1};
    ck_assert_int_eq(grow(st, id, 2, &a, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 1, .s = 4,
                        .attention = bad};
    ck_assert_int_eq(grow(st, id, 3, &a, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 5,
                        .attention = step3, .tokens = lab3, .n_tokens = 2};
    ck_assert_int_eq(grow(st, id, 3, &a, err), 0);
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_int_eq(info.t, 5);
    ck_assert_int_eq(info.s, 5);
    ck_assert_int_eq(info.causal, 1);
    for (k = 0; k < 2; k++) {
        ck_assert_int_eq(maps_slice(st, id, 0, k, 0, &out, &rows, &cols, NULL,
                                    NULL, err), 0);
        ck_assert_int_eq(rows, 5);
        ck_assert_int_eq(cols, 5);
        for (i = 0; i < 5; i++)
            for (j = 0; j < 5; j++) {
                int seen = i < 2 ? j < 2 : i == 2 ? j < 3 : 1;
                ck_assert_float_eq(out[i * 5 + j], seen ? CELL(k, i, j) : 0.0f);
            }
        free(out);
    }
    { /* labels: a, b, "", d, e; the newest entry is the grown one */
        maps__entry *e = maps__acquire(st, id);
        maps_info list[4];
        ck_assert_int_eq(e->n_labels, 5);
        ck_assert_str_eq(e->labels + e->label_off[1], "b");
        ck_assert_str_eq(e->labels + e->label_off[2], "");
        ck_assert_str_eq(e->labels + e->label_off[4], "e");
        maps__release(e);
        ck_assert_uint_eq(maps_list(st, list, 4), 2);
        ck_assert_str_eq(list[0].id, id);
    }
    /* the reader of the first version still has it, whole */
    ck_assert_int_eq(old->info.t, 2);
    ck_assert_float_eq(old->attention[3], CELL(0, 1, 1));
    maps__release(old);
    /* mismatched steps are refused and change nothing */
    a = (maps_put_args){.model = "m", .b = 1, .h = 3, .t = 1, .s = 6,
                        .attention = step3};
    ck_assert_int_eq(grow(st, id, 5, &a, err), ATTN_EINVAL);
    a.h = 2, a.s = 7;
    ck_assert_int_eq(grow(st, id, 5, &a, err), ATTN_EINVAL);
    a.s = 7;
    ck_assert_int_eq(grow(st, id, 6, &a, err), ATTN_EINVAL);
    ck_assert_int_eq(grow(st, "m999-000000", 0, &a, err), ATTN_ENOTFOUND);
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_int_eq(info.t, 5);
    /* in two parts: a step's grown map (here one that rewound to 3 and
     * brings row 3 anew) changes nothing until it is put; freed instead
     * (the step failed), the map stays as it was */
    {
        float row3[8];
        maps_grown *g;
        uint64_t v0 = info.version;
        for (k = 0; k < 2; k++)
            for (j = 0; j < 4; j++)
                row3[k * 4 + j] = 100.0f + (float)(10 * k + j);
        a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 1, .s = 4,
                            .attention = row3};
        ck_assert_int_eq(maps_grow_make(st, id, 3, &a, &g, err), 0);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(maps_info_get(st, id, &info), 0);
        ck_assert_int_eq(info.t, 5);
        ck_assert_uint_eq(info.version, v0);
        maps_grown_free(g);
        maps_grown_free(NULL);
        ck_assert_int_eq(maps_info_get(st, id, &info), 0);
        ck_assert_int_eq(info.t, 5);
        ck_assert_uint_eq(info.version, v0);
        /* put (the step answered): rows 0-2 as they were on keys 0-2,
         * row 3 the new one, labels a, b, "" and none */
        ck_assert_int_eq(maps_grow_make(st, id, 3, &a, &g, err), 0);
        ck_assert_int_eq(maps_grow_put(st, g), 0);
        ck_assert_int_eq(maps_info_get(st, id, &info), 0);
        ck_assert_int_eq(info.t, 4);
        ck_assert_int_eq(info.s, 4);
        ck_assert_uint_eq(info.version, v0 + 1);
        for (k = 0; k < 2; k++) {
            ck_assert_int_eq(maps_slice(st, id, 0, k, 0, &out, &rows, &cols,
                                        NULL, NULL, err), 0);
            ck_assert_int_eq(rows, 4);
            ck_assert_int_eq(cols, 4);
            for (i = 0; i < 3; i++)
                for (j = 0; j < 4; j++)
                    ck_assert_float_eq(out[i * 4 + j],
                                       j <= (i < 2 ? 1 : 2) ? CELL(k, i, j) : 0.0f);
            for (j = 0; j < 4; j++)
                ck_assert_float_eq(out[12 + j], row3[k * 4 + j]);
            free(out);
        }
        {
            maps__entry *e = maps__acquire(st, id);
            ck_assert_int_eq(e->n_labels, 4);
            ck_assert_str_eq(e->labels + e->label_off[0], "a");
            ck_assert_str_eq(e->labels + e->label_off[3], "");
            maps__release(e);
        }
        /* a grown map whose map was evicted before it is put is freed
         * (ASan: no leak) and says so */
        ck_assert_int_eq(maps_grow_make(st, id, 4, &(maps_put_args){
                             .model = "m", .b = 1, .h = 2, .t = 0, .s = 4},
                                        &g, err), 0);
        maps_drop(st, id);
        ck_assert_int_eq(maps_grow_put(st, g), ATTN_ENOTFOUND);
        ck_assert_int_eq(maps_info_get(st, id, &info), ATTN_ENOTFOUND);
        ck_assert_int_eq(maps_grow_make(st, id, 0, &a, &g, err), ATTN_ENOTFOUND);
        ck_assert_ptr_null(g);
    }
    /* a failed start's map leaves the store; the other map stays */
    maps_drop(st, id);
    maps_drop(st, id);
    ck_assert_int_eq(maps_info_get(st, id, &info), ATTN_ENOTFOUND);
    ck_assert_int_eq(maps_info_get(st, id2, &info), 0);
#undef CELL
    maps_store_destroy(st);
}
END_TEST

/* check_allowed: what=mask of every head of id, and of their mean, is 1
 * exactly on the keys j < ends[i] of each row i (n x n). */
static void check_allowed(maps_store *st, const char *id, int h, int n,
                          const int *ends)
{
    char err[ATTN_ERRMAX];
    float *out;
    int rows, cols, i, j, k;

    for (k = -1; k < h; k++) {
        ck_assert_int_eq(maps_slice_of(st, id, MAPS_ALLOWED, 0, k, 0, &out,
                                       &rows, &cols, NULL, NULL, err), 0);
        ck_assert_int_eq(rows, n);
        ck_assert_int_eq(cols, n);
        for (i = 0; i < n; i++)
            for (j = 0; j < n; j++)
                ck_assert_msg(out[i * n + j] == (j < ends[i] ? 1.0f : 0.0f),
                              "head %d cell (%d, %d): %g", k, i, j,
                              (double)out[i * n + j]);
        free(out);
    }
}

/* The mask of a sequence's map says, per row, which keys that row
 * attended. A causal start of 2 rows (row i saw keys 0..i), a non-causal
 * step of 2 (rows 2-3 saw keys 0-3), a causal step of 1 (row 4 saw 0-4):
 * rows end at 1, 2, 4, 4, 5. A non-causal step that rewinds to 3 with 2
 * rows cuts row 2 at 3 (key 3 is another token now): 1, 2, 3, 5, 5. The
 * flag of the start alone (causal: j > i) would say 1, 2, 3, 4, 5 both
 * times. Each row's end counts against the store: 4 bytes a row. */
START_TEST(test_grow_mask_per_row)
{
    maps_store *st;
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX];
    float w[2 * 2 * 5];
    const int ends1[5] = {1, 2, 4, 4, 5}, ends2[5] = {1, 2, 3, 5, 5};
    maps_put_args a = {.model = "m", .b = 1, .h = 2, .t = 2, .s = 2,
                       .attention = w, .causal = 1};
    maps_info info;
    size_t used;
    int k;

    for (k = 0; k < 20; k++)
        w[k] = 0.25f;
    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &a, id, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 4,
                        .attention = w, .causal = 0};
    ck_assert_int_eq(grow(st, id, 2, &a, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 1, .s = 5,
                        .attention = w, .causal = 1};
    ck_assert_int_eq(grow(st, id, 4, &a, err), 0);
    check_allowed(st, id, 2, 5, ends1);
    /* 2 heads of 5 x 5 floats, the entry, its 2 lengths, 5 row ends */
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_uint_eq(info.bytes, 2 * 25 * sizeof(float) + sizeof(maps__entry) +
                                      2 * sizeof(int32_t) +
                                      5 * sizeof(int32_t));
    maps_stats(st, &used, NULL, NULL, NULL);
    ck_assert_uint_eq(used, info.bytes);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 5,
                        .attention = w, .causal = 0};
    ck_assert_int_eq(grow(st, id, 3, &a, err), 0);
    check_allowed(st, id, 2, 5, ends2);
    maps_store_destroy(st);
}
END_TEST

/* A sequence's map keeps the scores its start retained and grows them
 * with each step's: a start of 2 rows over 2 keys, a step of 2 rows over
 * 4 keys, then a step that rewinds to 3 with 1 row over 4 keys. Scores of
 * head k, row i, key j are k * 100 + 10 i + j + 1 + 0.5 * (the step's
 * number); rows 0-1 keep theirs on keys 0-1 (keys 2-3 came later: 0), row
 * 2 its own on keys 0-2 (key 3 was replaced: 0), row 3 is the last step's.
 * Weights and scores both count. A step without scores cannot grow such a
 * map (refused, nothing changes); a map without scores grows without
 * them whatever the step gives. */
START_TEST(test_grow_scores)
{
    maps_store *st;
    char id[MAPS_ID_MAX], id2[MAPS_ID_MAX], err[ATTN_ERRMAX];
    float w[2 * 2 * 4], sc[3][2 * 2 * 4], *out;
    const int t_of[3] = {2, 2, 1}, s_of[3] = {2, 4, 4}, row0[3] = {0, 2, 3};
    maps_put_args a;
    maps_info info;
    int n, k, i, j, rows, cols;

    for (k = 0; k < 16; k++)
        w[k] = 0.25f;
    for (n = 0; n < 3; n++)
        for (k = 0; k < 2; k++)
            for (i = 0; i < t_of[n]; i++)
                for (j = 0; j < s_of[n]; j++)
                    sc[n][(k * t_of[n] + i) * s_of[n] + j] =
                        (float)(k * 100 + 10 * (row0[n] + i) + j + 1) + 0.5f * (float)n;
    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 2,
                        .attention = w, .scores = sc[0]};
    ck_assert_int_eq(maps_put(st, &a, id, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 4,
                        .attention = w, .scores = sc[1]};
    ck_assert_int_eq(grow(st, id, 2, &a, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 1, .s = 4,
                        .attention = w, .scores = sc[2]};
    ck_assert_int_eq(grow(st, id, 3, &a, err), 0);
    for (k = 0; k < 2; k++) {
        ck_assert_int_eq(maps_slice_of(st, id, MAPS_SCORES, 0, k, 0, &out,
                                       &rows, &cols, NULL, NULL, err), 0);
        ck_assert_int_eq(rows, 4);
        ck_assert_int_eq(cols, 4);
        for (i = 0; i < 4; i++)
            for (j = 0; j < 4; j++) {
                /* the step row i came from, and the keys it keeps */
                int from = i < 2 ? 0 : i < 3 ? 1 : 2, upto = i < 2 ? 2 : i < 3 ? 3 : 4;
                float want = j < upto ? (float)(k * 100 + 10 * i + j + 1) +
                                            0.5f * (float)from
                                      : 0.0f;
                ck_assert_msg(out[i * 4 + j] == want, "head %d (%d, %d): %g, "
                              "expected %g", k, i, j, (double)out[i * 4 + j],
                              (double)want);
            }
        free(out);
    }
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_int_eq(info.has_scores, 1);
    ck_assert_uint_eq(info.bytes, 2 * 2 * 16 * sizeof(float) +
                                      sizeof(maps__entry) +
                                      2 * sizeof(int32_t) +
                                      4 * sizeof(int32_t));
    /* a step without scores: refused, naming them; nothing changes */
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 1, .s = 5,
                        .attention = w};
    ck_assert_int_eq(grow(st, id, 4, &a, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "scores"));
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_int_eq(info.t, 4);
    /* a map without scores grows without them */
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 2,
                        .attention = w};
    ck_assert_int_eq(maps_put(st, &a, id2, err), 0);
    a = (maps_put_args){.model = "m", .b = 1, .h = 2, .t = 2, .s = 4,
                        .attention = w, .scores = sc[1]};
    ck_assert_int_eq(grow(st, id2, 2, &a, err), 0);
    ck_assert_int_eq(maps_info_get(st, id2, &info), 0);
    ck_assert_int_eq(info.t, 4);
    ck_assert_int_eq(info.has_scores, 0);
    maps_store_destroy(st);
}
END_TEST

/* A map read while its sequence grows is one version throughout: GET
 * /v2/maps/{id}/attention took the metadata (source_shape, the JSON size
 * check) under one lookup and the cells under another, so a step put in
 * between answered the new cells with the old version's source_shape. A
 * thread steps a one-head map between 8 and 9 rows (a step, then one
 * sent again at the position before it) while this one reads it
 * unpooled: shape and source_shape must always agree. */
typedef struct grower {
    maps_store *st;
    const char *id;
    int steps;
    int done; /* atomic */
} grower;

static void *grow_rows(void *arg)
{
    grower *g = arg;
    float row[16];
    char err[ATTN_ERRMAX];
    int i;
    for (i = 0; i < 16; i++)
        row[i] = 1.0f / 9;
    for (i = 0; i < g->steps; i++) {
        int t0 = i % 2 ? 7 : 8; /* 8 rows -> 9, then 9 -> 8 */
        maps_put_args a = {.model = "m", .b = 1, .h = 1, .t = 1, .s = t0 + 1,
                           .attention = row, .causal = 1};
        if (grow(g->st, g->id, t0, &a, err) != 0)
            break;
    }
    __atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

START_TEST(test_read_while_growing)
{
    maps_store *st;
    char id[MAPS_ID_MAX], path[64];
    float eight[64];
    grower g;
    pthread_t th;
    int reads = 0, torn = 0, i;

    for (i = 0; i < 64; i++)
        eight[i] = 1.0f / 8;
    ck_assert_int_eq(maps_store_create(&st, (size_t)1 << 20), 0);
    ck_assert_int_eq(put(st, "m", eight, 1, 1, 8, 8, id), 0);
    snprintf(path, sizeof path, "/v2/maps/%s/attention", id);
    g = (grower){st, id, 200000, 0};
    ck_assert_int_eq(pthread_create(&th, NULL, grow_rows, &g), 0);
    while (!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE)) {
        maps_reply r;
        int sr, sc, r0, c0;
        const char *p, *q;
        ck_assert_int_eq(maps_http_get(st, path, NULL, NULL, &r), 0);
        ck_assert_int_eq(r.status, 200);
        p = strstr(r.body, "\"shape\":[");
        q = strstr(r.body, "\"source_shape\":[");
        ck_assert(p && q);
        ck_assert_int_eq(sscanf(p, "\"shape\":[%d,%d]", &sr, &sc), 2);
        ck_assert_int_eq(sscanf(q, "\"source_shape\":[%d,%d]", &r0, &c0), 2);
        torn += sr != r0 || sc != c0;
        reads++;
        free(r.body);
    }
    pthread_join(th, NULL);
    ck_assert_msg(torn == 0, "%d of %d reads mixed two versions", torn, reads);
    maps_store_destroy(st);
}
END_TEST

/* A map grown past the whole store is refused before it is allocated,
 * naming maps-bytes: a step of 2^22 rows on a 1-row map asked calloc
 * for 64 TiB and ended the map "out of memory" (the rows' own buffer is
 * never read: the map is refused first). */
START_TEST(test_grow_past_the_store)
{
    maps_store *st;
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX];
    float one = 1.0f, rows[2 * 3];
    maps_grown *g = NULL;
    int t = 1 << 22;
    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(put(st, "m", &one, 1, 1, 1, 1, id), 0);
    ck_assert_int_eq(maps_grow_make(st, id, 1, &(maps_put_args){
                         .model = "m", .b = 1, .h = 1, .t = t, .s = t + 1,
                         .attention = &one, .causal = 1}, &g, err),
                     ATTN_EINVAL);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err, "4194305 rows over 4194305 keys (1 head) need "
                          "more than the whole retained-map store (1048576 "
                          "bytes, maps-bytes); raise --maps-bytes"), "%s", err);
    /* one that fits still grows */
    maps_store_destroy(st);
    ck_assert_int_eq(maps_store_create(&st, 8192), 0);
    ck_assert_int_eq(put(st, "m", &one, 1, 1, 1, 1, id), 0);
    memset(rows, 0, sizeof rows);
    ck_assert_int_eq(maps_grow_make(st, id, 1, &(maps_put_args){
                         .model = "m", .b = 1, .h = 1, .t = 2, .s = 3,
                         .attention = rows, .causal = 1}, &g, err), 0);
    maps_grown_free(g);
    maps_store_destroy(st);
}
END_TEST

/* request-memory's 413 names only what would fit: a map's value planes
 * (B = 2, H = 2 over one kv head, S = 3, d_v = 2: 24 bytes a plane) are
 * never pooled, so no max=; the whole [2,2,3,2] as f32 (96 bytes and one
 * plane's copy as it is filled) past 100 bytes can be read a plane at a
 * time; one plane past 20 bytes only under a larger bound, and at 24
 * bytes (its own body, counted once) it is served. */
START_TEST(test_answer_bound_advice)
{
    maps_store *st;
    float a[2 * 2 * 3 * 3] = {0}, v[2 * 1 * 3 * 2] = {1, 2, 3, 4, 5, 6,
                                                      7, 8, 9, 10, 11, 12};
    const int32_t tv[2] = {3, 3}, sv[2] = {3, 3};
    maps_put_args args = {.model = "demo", .b = 2, .h = 2, .t = 3, .s = 3,
                          .attention = a, .t_valid = tv, .s_valid = sv,
                          .v = v, .kv_h = 1, .dv = 2, .dk = 8};
    const char *every[] = {"b", "all", "h", "all", "what", "v", "format",
                           "f32", NULL};
    const char *one[] = {"b", "1", "h", "1", "what", "v", "format", "f32",
                         NULL};
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX], path[96];
    maps_reply r;

    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &args, id, err), 0);
    snprintf(path, sizeof path, "/v2/maps/%s/attention", id);
    ck_assert_int_eq(maps_http_render(st, path, tu_kv, every, NULL, NULL,
                                      100, &r), 0);
    ck_assert_int_eq(r.status, 413);
    ck_assert_ptr_nonnull(strstr(r.body, "\"b, h: the [2,2,3,2] map as f32 "
        "takes 120 bytes, more than one request may (100 bytes, "
        "request-memory); ask for one b and h at a time, or raise "
        "--request-memory\""));
    free(r.body);
    ck_assert_int_eq(maps_http_render(st, path, tu_kv, one, NULL, NULL, 20,
                                      &r), 0);
    ck_assert_int_eq(r.status, 413);
    ck_assert_ptr_nonnull(strstr(r.body, "\"what: the [3,2] map as f32 "
        "takes 24 bytes, more than one request may (20 bytes, "
        "request-memory), and no smaller answer of it fits (one value "
        "plane alone is 24 bytes): raise --request-memory\""));
    free(r.body);
    ck_assert_int_eq(maps_http_render(st, path, tu_kv, one, NULL, NULL, 24,
                                      &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 24);
    ck_assert(memcmp(r.body, v + 6, 24) == 0); /* item 1's value rows */
    free(r.body);
    maps_store_destroy(st);
}
END_TEST

static Suite *maps_grow_suite(void)
{
    Suite *s = suite_create("maps_grow");
    TCase *tc = tcase_create("grow");

    tcase_add_test(tc, test_grow_sequence_map);
    tcase_add_test(tc, test_grow_mask_per_row);
    tcase_add_test(tc, test_grow_scores);
    tcase_add_test(tc, test_read_while_growing);
    tcase_add_test(tc, test_grow_past_the_store);
    tcase_add_test(tc, test_answer_bound_advice);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(maps_grow_suite)
