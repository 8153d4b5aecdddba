/*
 * test_peek.c - proto/peek.c, a JSON body's sequence_id read without a
 * decode: it gives what oip_decode gives for the ids Triton's clients
 * send (a number, a string, white space anywhere JSON allows it), takes
 * no value the decoder would refuse (0, a negative, a fraction, past
 * 2^64 - 1, a string it would not take), nor a "sequence_id" that is a
 * value or inside a string, nor one past the JSON part of a binary body,
 * nor a number cut at the end of a body read so far.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "proto/oip.h"
#include "tests/check_main.h"

/* peek: oip_peek_sequence_id over the whole of js; "" when none. */
static const char *peek(const char *js, size_t header_len)
{
    static char id[OIP_MAX_SEQ_ID];
    int found = oip_peek_sequence_id(js, strlen(js), header_len, id);
    ck_assert_int_eq(found, id[0] != 0);
    return id;
}

/* as_decoded: the sequence_id oip_decode gives js (a valid request) */
static void as_decoded(const char *js)
{
    oip_request req;
    char err[OIP_ERRMAX];
    ck_assert_msg(oip_decode(&req, js, strlen(js), 0, NULL, err) == 0, "%s",
                  err);
    ck_assert_str_eq(peek(js, 0), req.params.seq_id);
    oip_request_free(&req);
}

#define X "\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1]," \
          "\"data\":[1]}]"

START_TEST(ids_as_decoded)
{
    as_decoded("{\"parameters\":{\"sequence_id\":42,\"sequence_start\":true},"
               X "}");
    as_decoded("{" X ",\"parameters\":{\"sequence_start\":true,"
               "\"sequence_id\":\"chat-7\"}}");
    as_decoded("{" X ", \"parameters\" : { \"sequence_id\"\n :\t"
               "18446744073709551615 } }");
    as_decoded("{" X ",\"parameters\":{\"sequence_id\":\"007\"}}");
    as_decoded("{" X ",\"parameters\":{\"causal\":true}}"); /* none: "" */
}
END_TEST

START_TEST(values_refused)
{
    static const char *const bad[] = {
        "{\"parameters\":{\"sequence_id\":0}}",
        "{\"parameters\":{\"sequence_id\":-3}}",
        "{\"parameters\":{\"sequence_id\":07}}",
        "{\"parameters\":{\"sequence_id\":4.5}}",
        "{\"parameters\":{\"sequence_id\":4e2}}",
        "{\"parameters\":{\"sequence_id\":18446744073709551616}}",
        "{\"parameters\":{\"sequence_id\":\"\"}}",
        "{\"parameters\":{\"sequence_id\":\"a b\"}}",
        "{\"parameters\":{\"sequence_id\":\"a\\u0062\"}}",
        "{\"parameters\":{\"sequence_id\":true}}",
        "{\"parameters\":{\"sequence_id\":\"unterminated}}",
        "{\"parameters\":{\"sequence_id\"}}",
        /* a value, not a key; inside a string */
        "{\"id\":\"sequence_id\",\"x\":[\"sequence_id\":5]}",
        "{\"id\":\"a \\\"sequence_id\\\": 5\"}",
    };
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!peek(bad[i], 0)[0], "%s", bad[i]);
    /* a string of 129 bytes is not an id, of 128 one */
    char js[300], s129[130];
    memset(s129, 'a', 129);
    s129[129] = 0;
    snprintf(js, sizeof js, "{\"parameters\":{\"sequence_id\":\"%s\"}}", s129);
    ck_assert_str_eq(peek(js, 0), "");
    s129[128] = 0;
    snprintf(js, sizeof js, "{\"parameters\":{\"sequence_id\":\"%s\"}}", s129);
    ck_assert_str_eq(peek(js, 0), s129);
}
END_TEST

START_TEST(first_taken_and_json_part_only)
{
    /* the first key with an id the decoder takes */
    ck_assert_str_eq(peek("{\"parameters\":{\"sequence_id\":0,"
                          "\"sequence_id\":9}}", 0), "9");
    /* a binary body: only its JSON part is read */
    const char *js = "{\"parameters\":{}}{\"sequence_id\":5}";
    ck_assert_str_eq(peek(js, 17), "");
    ck_assert_str_eq(peek(js, 0), "5");
    /* cut inside the key or its value */
    ck_assert_str_eq(peek(js, 26), "");
    ck_assert_str_eq(peek(js, 32), "");
    /* a body so far (refused while it came): a number cut at its end may
     * be the start of another */
    ck_assert_str_eq(peek("{\"parameters\":{\"sequence_id\":12", 0), "");
    ck_assert_str_eq(peek("{\"parameters\":{\"sequence_id\":12,", 0), "12");
    char id[OIP_MAX_SEQ_ID] = "x";
    ck_assert_int_eq(oip_peek_sequence_id(NULL, 0, 0, id), 0);
    ck_assert_str_eq(id, "");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("peek");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, ids_as_decoded);
    tcase_add_test(tc, values_refused);
    tcase_add_test(tc, first_taken_and_json_part_only);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)
