/*
 * test_json_mem.c - core/json_mem.c: a jansson parse or dump whose
 * allocation fails at any point reports out of memory, holds nothing
 * after, and never gives a document or a text with a part missing.
 *
 * tests/fail_alloc.h fails the k-th allocation (for jansson's calls too)
 * and counts the blocks held. Every k within a parse or a dump is tried. The
 * sanitizer builds replace malloc themselves: there the tests only check
 * the plain results.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_mem.h"
#include "tests/check_main.h"
#include "tests/fail_alloc.h"

/* Texts whose lexing grows jansson's token buffer (strings and numbers
 * past 16 bytes: where 2.14 drops a byte it cannot save), escapes, nesting,
 * many keys, a long array. */
static const char *const docs[] = {
    "{\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [1, 16, 64], "
    "\"data\": [], \"parameters\": {\"binary_data_size\": 4096}}], "
    "\"parameters\": {\"sequence_id\": \"a-sequence-id-longer-than-16\", "
    "\"sequence_start\": true}, \"id\": \"request \\u00e9\\n\\\"quoted\\\"\"}",
    "[12345678901234567890.5, -0.000000000000012345, 1e308, \"abcdefghijklmnopqrstuvwxyz\", "
    "[[[[[[]]]]]], {\"a\": {\"b\": {\"c\": {\"d\": null}}}}, true, false]",
    "{\"k01\":1,\"k02\":2,\"k03\":3,\"k04\":4,\"k05\":5,\"k06\":6,\"k07\":7,\"k08\":8,"
    "\"k09\":9,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,"
    "\"k16\":16,\"k17\":17,\"k18\":18,\"k19\":19,\"k20\":20,\"k21\":21}",
};

START_TEST(parse_fails_cleanly_at_every_allocation)
{
    attn_json_init();
    for (size_t d = 0; d < sizeof docs / sizeof *docs; d++) {
        const char *text = docs[d];
        json_error_t je;
        int nomem = -1;
        long n, k;
        fail_at = 0;
        calls = 0;
        json_t *want = attn_json_parse(text, strlen(text), JSON_REJECT_DUPLICATES, &je, &nomem);
        ck_assert_msg(want != NULL, "doc %zu: %s", d, je.text);
        ck_assert_int_eq(nomem, 0);
        /* how many allocations a whole parse makes */
        fail_at = -1;
        calls = 0;
        json_decref(attn_json_parse(text, strlen(text), JSON_REJECT_DUPLICATES, &je, &nomem));
        n = calls;
        ck_assert(!FAILING || n > 3);
        for (k = 1; FAILING && k <= n + 1; k++) {
            long before = held;
            fail_at = k;
            calls = 0;
            json_t *o = attn_json_parse(text, strlen(text), JSON_REJECT_DUPLICATES, &je, &nomem);
            fail_at = 0;
            if (k <= n) {
                ck_assert_msg(o == NULL && nomem == 1,
                              "doc %zu, allocation %ld of %ld failing: parsed %p, out of memory %d",
                              d, k, n, (void *)o, nomem);
                ck_assert_msg(held == before, "doc %zu, allocation %ld failing: %ld blocks left held",
                              d, k, held - before);
            } else {
                ck_assert(o && nomem == 0 && json_equal(o, want));
                json_decref(o);
                ck_assert_int_eq(held, before);
            }
        }
        json_decref(want);
    }
}
END_TEST

START_TEST(bad_json_is_not_memory)
{
    json_error_t je;
    int nomem = -1;
    attn_json_init();
    ck_assert(attn_json_parse("{\"a\": [1, 2,]}", 14, 0, &je, &nomem) == NULL);
    ck_assert_int_eq(nomem, 0);
    ck_assert(strlen(je.text) > 0);
    ck_assert(attn_json_parse("{\"a\": 1, \"a\": 2}", 16, JSON_REJECT_DUPLICATES, &je, &nomem) == NULL);
    ck_assert_int_eq(nomem, 0);
}
END_TEST

START_TEST(dump_is_whole_or_null)
{
    json_error_t je;
    int nomem;
    attn_json_init();
    json_t *o = attn_json_parse(docs[2], strlen(docs[2]), 0, &je, &nomem);
    char *whole = attn_json_dumps(o, JSON_COMPACT, attn_json_mark());
    ck_assert(whole != NULL);
    long n = 0, k, nulls = 0;
    if (FAILING) { /* how many allocations a dump makes */
        fail_at = -1;
        calls = 0;
        free(attn_json_dumps(o, JSON_COMPACT, attn_json_mark()));
        n = calls;
        fail_at = 0;
    }
    for (k = 1; k <= n; k++) {
        unsigned long mark = attn_json_mark();
        fail_at = k;
        calls = 0;
        char *t = attn_json_dumps(o, JSON_COMPACT, mark);
        fail_at = 0;
        ck_assert_msg(t == NULL || strcmp(t, whole) == 0,
                      "allocation %ld of %ld failing: %s", k, n, t);
        nulls += t == NULL;
        free(t);
    }
    ck_assert(!FAILING || nulls > 0);
    /* a document that lost a part while being built: no text for it */
    if (FAILING) {
        unsigned long mark = attn_json_mark();
        fail_at = 1;
        calls = 0;
        ck_assert_int_ne(json_object_set_new(o, "late", json_string("value")), 0);
        fail_at = 0;
        ck_assert(attn_json_dumps(o, JSON_COMPACT, mark) == NULL);
        char *t = attn_json_dumps(o, JSON_COMPACT, attn_json_mark()); /* a new mark */
        ck_assert_str_eq(t, whole);
        free(t);
    }
    free(whole);
    json_decref(o);
}
END_TEST

static Suite *json_mem_suite(void)
{
    Suite *s = suite_create("json_mem");
    TCase *tc = tcase_create("json_mem");
    tcase_add_test(tc, parse_fails_cleanly_at_every_allocation);
    tcase_add_test(tc, bad_json_is_not_memory);
    tcase_add_test(tc, dump_is_whole_or_null);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(json_mem_suite)
