/*
 * test_maps_nomem.c - a sequence's retained map grown when memory runs
 * out (server/maps_grow.c): whichever allocation of the grown copy fails,
 * maps_grow_make says out of memory and makes nothing, no block is left
 * behind, and the map in the store is the one before the step, whole (the
 * step goes on without it: seq.c ends the map, the step is answered).
 *
 * tests/fail_alloc.h fails the k-th allocation since calls was set to 0
 * and counts the blocks held; every k of one grow is tried. The sanitizer
 * builds replace malloc themselves: there the grow only runs through.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "server/maps.h"
#include "tests/check_main.h"
#include "tests/fail_alloc.h"

/* A map of 2 heads, 2 tokens with scores and labels; its step adds 1 row
 * of 3 keys, with scores and a label (weights, scores, row ends, labels
 * and the new entry's own blocks are allocated). */
START_TEST(grow_when_memory_runs_out)
{
    maps_store *st;
    char id[MAPS_ID_MAX], err[ATTN_ERRMAX];
    float att[2 * 2 * 2], sc[2 * 2 * 2], natt[2 * 1 * 3], nsc[2 * 1 * 3];
    float *vals = NULL;
    const char *lab0[] = {"a", "b"}, *lab1[] = {"c"};
    maps_put_args a = {.model = "m", .b = 1, .h = 2, .t = 2, .s = 2,
                       .attention = att, .scores = sc, .causal = 1,
                       .tokens = lab0, .n_tokens = 2};
    maps_put_args step = {.model = "m", .b = 1, .h = 2, .t = 1, .s = 3,
                          .attention = natt, .scores = nsc, .causal = 1,
                          .tokens = lab1, .n_tokens = 1};
    maps_grown *g;
    maps_info info;
    long k, n, failed = 0, before;
    int i, rc, rows, cols;
    for (i = 0; i < 8; i++)
        att[i] = (float)(i + 1) / 8.0f, sc[i] = (float)i;
    for (i = 0; i < 6; i++)
        natt[i] = 0.25f, nsc[i] = 2.0f;
    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &a, id, err), 0);

    calls = 0;
    fail_at = -1; /* count, fail none */
    rc = maps_grow_make(st, id, 2, &step, &g, err);
    fail_at = 0;
    n = calls;
    ck_assert_msg(rc == 0, "%s", err);
    maps_grown_free(g);
    ck_assert(!FAILING || n >= 5);
    for (k = 1; FAILING && k <= n; k++) {
        before = held;
        g = (maps_grown *)&g; /* not NULL: a failure must say so */
        memset(err, 0, sizeof err);
        calls = 0;
        fail_at = k;
        rc = maps_grow_make(st, id, 2, &step, &g, err);
        fail_at = 0;
        if (rc) {
            failed++;
            ck_assert_msg(rc == ATTN_ENOMEM, "allocation %ld: %d %s", k, rc, err);
            ck_assert_msg(strstr(err, "out of memory"), "allocation %ld: '%s'",
                          k, err);
            ck_assert_ptr_null(g);
            ck_assert_msg(held == before, "allocation %ld: %ld blocks left", k,
                          held - before);
        } else {
            maps_grown_free(g);
        }
        /* the map as it was put */
        ck_assert_int_eq(maps_info_get(st, id, &info), 0);
        ck_assert_int_eq(info.t, 2);
        ck_assert_int_eq(info.s, 2);
        ck_assert_int_eq(info.version, 0);
        ck_assert_int_eq(maps_slice(st, id, 0, 1, 0, &vals, &rows, &cols, NULL,
                                    NULL, err), 0);
        ck_assert_int_eq(rows, 2);
        ck_assert_int_eq(cols, 2);
        ck_assert_float_eq(vals[3], 8.0f / 8.0f); /* head 1, (1, 1) */
        free(vals);
        vals = NULL;
    }
    ck_assert(!FAILING || failed >= 5);
    /* and the step grows it afterwards */
    ck_assert_int_eq(maps_grow_make(st, id, 2, &step, &g, err), 0);
    ck_assert_int_eq(maps_grow_put(st, g), 0);
    ck_assert_int_eq(maps_info_get(st, id, &info), 0);
    ck_assert_int_eq(info.t, 3);
    ck_assert_int_eq(info.s, 3);
    maps_store_destroy(st);
}
END_TEST

static Suite *maps_nomem_suite(void)
{
    Suite *s = suite_create("maps_nomem");
    TCase *tc = tcase_create("maps_nomem");
    tcase_add_test(tc, grow_when_memory_runs_out);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(maps_nomem_suite)
