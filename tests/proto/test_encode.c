/* test_encode.c - proto/encode.c: exact response text, escaping, binary
 * outputs, and encode -> decode round trips (bit-exact floats). */
#include <check.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "proto/oip.h"
#include "proto/oip_internal.h"
#include "bits.h"
#include "tests/check_main.h"

START_TEST(json_response_text)
{
    float y[4] = {1.0f, 0.5f, -0.0f, 0.1f};
    int32_t len[2] = {3, -2147483647 - 1};
    uint8_t m[3] = {1, 0, 1};
    int64_t big[1] = {INT64_MAX};
    oip_output outs[4] = {
        {.name = "y", .dtype = OIP_FP32, .rank = 2, .shape = {2, 2},
         .data = y},
        {.name = "lengths", .dtype = OIP_INT32, .rank = 1, .shape = {2},
         .data = len},
        {.name = "mask", .dtype = OIP_BOOL, .rank = 2, .shape = {1, 3},
         .data = m},
        {.name = "n", .dtype = OIP_INT64, .rank = 1, .shape = {1},
         .data = big},
    };
    char *body;
    size_t n, hl;
    char err[OIP_ERRMAX] = "";
    int rc = oip_encode("demo", "r1", outs, 4, "{\"map_id\": \"m1\"}", &body,
                        &n, &hl, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(hl, 0);
    ck_assert_str_eq(body,
        "{\"model_name\":\"demo\",\"model_version\":\"1\",\"id\":\"r1\","
        "\"parameters\":{\"map_id\":\"m1\"},\"outputs\":["
        "{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[2,2],"
        "\"data\":[1,0.5,-0,0.100000001]},"
        "{\"name\":\"lengths\",\"datatype\":\"INT32\",\"shape\":[2],"
        "\"data\":[3,-2147483648]},"
        "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],"
        "\"data\":[true,false,true]},"
        "{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[1],"
        "\"data\":[9223372036854775807]}]}");
    ck_assert_uint_eq(n, strlen(body));
    free(body);

    /* no id, no parameters, no outputs */
    rc = oip_encode("m", NULL, NULL, 0, NULL, &body, &n, &hl, err);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(body, "{\"model_name\":\"m\",\"model_version\":\"1\","
                           "\"outputs\":[]}");
    free(body);
}
END_TEST

START_TEST(binary_outputs)
{
    float y[3] = {1.0f, -2.0f, 3.5f};
    float a[2] = {0.25f, 0.75f};
    oip_output outs[2] = {
        {.name = "y", .dtype = OIP_FP32, .rank = 1, .shape = {3}, .data = y,
         .binary = 1},
        {.name = "attention", .dtype = OIP_FP32, .rank = 2, .shape = {1, 2},
         .data = a, .binary = 0},
    };
    char *body;
    size_t n, hl;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(oip_encode("demo", NULL, outs, 2, NULL, &body, &n, &hl,
                                err), 0);
    const char *want =
        "{\"model_name\":\"demo\",\"model_version\":\"1\",\"outputs\":["
        "{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[3],"
        "\"parameters\":{\"binary_data_size\":12}},"
        "{\"name\":\"attention\",\"datatype\":\"FP32\",\"shape\":[1,2],"
        "\"data\":[0.25,0.75]}]}";
    ck_assert_uint_eq(hl, strlen(want));
    ck_assert_uint_eq(n, hl + 12);
    ck_assert(!memcmp(body, want, hl));
    ck_assert(!memcmp(body + hl, y, 12));
    free(body);
}
END_TEST

START_TEST(escaping)
{
    char *e = oip_error_body("inputs[0].name: duplicate input \"x\"\\\n\t\x01"
                             "\xff caf\xc3\xa9 \xe2\x82");
    ck_assert_str_eq(e, "{\"error\":\"inputs[0].name: duplicate input "
                        "\\\"x\\\"\\\\\\n\\t\\u0001\\ufffd caf\xc3\xa9 "
                        "\\ufffd\\ufffd\"}");
    free(e);
    /* what jansson reads back is the message (valid UTF-8 case) */
    const char *msg = "a \"quoted\" \\ back\nslash \x1f \xf0\x9f\x98\x80";
    e = oip_error_body(msg);
    json_error_t jerr;
    json_t *j = json_loads(e, 0, &jerr);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "error")), msg);
    json_decref(j);
    free(e);
    e = oip_error_body(NULL);
    ck_assert_str_eq(e, "{\"error\":\"\"}");
    free(e);
    /* overlong and surrogate encodings are not valid UTF-8 */
    e = oip_error_body("\xc0\xaf\xed\xa0\x80");
    ck_assert_str_eq(e, "{\"error\":\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"}");
    free(e);

    /* id and model name are escaped too */
    char *body;
    size_t n, hl;
    ck_assert_int_eq(oip_encode("m\"", "i\n", NULL, 0, NULL, &body, &n, &hl,
                                NULL), 0);
    ck_assert_str_eq(body, "{\"model_name\":\"m\\\"\",\"model_version\":\"1\","
                           "\"id\":\"i\\n\",\"outputs\":[]}");
    free(body);
}
END_TEST

START_TEST(encode_errors)
{
    float y[2] = {1.0f, NAN};
    oip_output o = {.name = "y", .dtype = OIP_FP32, .rank = 1, .shape = {2},
                    .data = y};
    char *body = (char *)1;
    size_t n = 9, hl = 9;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, NULL, &body, &n, &hl, err),
                     ATTN_EFORMAT);
    ck_assert_str_eq(err, "output y: element 1 is not finite (the inputs "
                          "overflow FP32) and cannot be sent as JSON; ask for "
                          "it with binary_data");
    ck_assert_ptr_null(body);
    ck_assert_uint_eq(n, 0);
    /* the same output as binary is fine: raw bits travel as they are */
    o.binary = 1;
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, NULL, &body, &n, &hl, err),
                     0);
    free(body);
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, "[1]", &body, &n, &hl, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "oip_encode: extra_params is not a JSON object");
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, "{", &body, &n, &hl, err),
                     ATTN_EINVAL);
    o.shape[0] = -1;
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, NULL, &body, &n, &hl, err),
                     ATTN_EOVERFLOW);
    ck_assert_str_eq(err, "output y: bad or overflowing shape");
    o.shape[0] = INT64_MAX;
    o.rank = 2;
    o.shape[1] = 4;
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, NULL, &body, &n, &hl, err),
                     ATTN_EOVERFLOW);
    o.rank = 1;
    o.shape[0] = 2;
    o.dtype = OIP_FP16;
    ck_assert_int_eq(oip_encode("m", NULL, &o, 1, NULL, &body, &n, &hl, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "output 0: bad name, datatype or rank");
}
END_TEST

static uint64_t rng = 12345;
static uint32_t next32(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 32);
}

/* Random finite floats with all the edge cases mixed in. */
static void fill_floats(float *f, size_t n)
{
    static const float edges[] = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN,
                                  0x1p-149f, -0x1p-149f, 0x1.fffffcp-127f,
                                  1.0f, 0.1f, 16777216.0f, 1e-5f, 1e9f};
    for (size_t i = 0; i < n; i++) {
        if (i < sizeof edges / sizeof edges[0]) {
            f[i] = edges[i];
            continue;
        }
        uint32_t u = next32();
        if (i % 7 == 0)
            u &= 0x807fffffu; /* denormal */
        memcpy(&f[i], &u, 4);
        if (!isfinite(f[i]))
            f[i] = (float)(int32_t)u;
    }
}

/* The "data" text of the first output: between "data": and the ']'. */
static char *data_text(const char *body)
{
    const char *s = strstr(body, "\"data\":");
    ck_assert_ptr_nonnull(s);
    s += 7;
    const char *e = strchr(s, ']');
    char *t = malloc((size_t)(e - s) + 2);
    memcpy(t, s, (size_t)(e - s) + 1);
    t[e - s + 1] = 0;
    return t;
}

START_TEST(round_trip_json)
{
    size_t n = 200000;
    float *y = malloc(n * 4);
    fill_floats(y, n);
    oip_output o = {.name = "y", .dtype = OIP_FP32, .rank = 2,
                    .shape = {400, 500}, .data = y};
    char *body;
    size_t len, hl;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(oip_encode("m", "id", &o, 1, NULL, &body, &len, &hl, err),
                     0);
    /* jansson (strtod) reads the response: every float identical */
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    ck_assert_msg(j != NULL, "%s", jerr.text);
    json_t *data = json_object_get(json_array_get(json_object_get(j,
                                   "outputs"), 0), "data");
    ck_assert_uint_eq(json_array_size(data), n);
    for (size_t i = 0; i < n; i++) {
        float g = (float)json_number_value(json_array_get(data, i));
        if (g == 0 && y[i] == 0)
            continue; /* jansson reads "-0" as the integer 0; the sign of
                         zero is checked by our decoder below */
        if (fbits(g) != fbits(y[i]))
            ck_abort_msg("element %zu: %a read back as %a", i, (double)y[i],
                         (double)g);
    }
    json_decref(j);

    /* and our decoder reads the same text as an input */
    char *dt = data_text(body);
    char *req = malloc(strlen(dt) + 200);
    sprintf(req, "{\"inputs\":[{\"name\":\"y\",\"datatype\":\"FP32\","
                 "\"shape\":[400,500],\"data\":%s}]}", dt);
    oip_request r;
    ck_assert_int_eq(oip_decode(&r, req, strlen(req), 0, NULL, err), 0);
    ck_assert_msg(!memcmp(r.inputs[0].data, y, n * 4), "decode differs");
    oip_request_free(&r);
    free(req);
    free(dt);
    free(body);
    free(y);
}
END_TEST

START_TEST(round_trip_binary)
{
    size_t n = 4096;
    float *y = malloc(n * 4);
    fill_floats(y, n);
    y[0] = 1.0f;
    int32_t len[3] = {5, -1, 7};
    oip_output o[2] = {
        {.name = "x", .dtype = OIP_FP32, .rank = 3, .shape = {2, 32, 64},
         .data = y, .binary = 1},
        {.name = "lengths", .dtype = OIP_INT32, .rank = 1, .shape = {3},
         .data = len, .binary = 1},
    };
    char *body;
    size_t blen, hl;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(oip_encode("m", NULL, o, 2, NULL, &body, &blen, &hl,
                                err), 0);
    /* independent of our decoder: the binary part is the outputs' bytes in
     * order, little-endian (1.0f is 00 00 80 3f, -1 is ff ff ff ff), each
     * output's binary_data_size in the header */
    static const unsigned char one_le[4] = {0x00, 0x00, 0x80, 0x3f};
    static const unsigned char len_le[12] = {5, 0, 0, 0, 0xff, 0xff, 0xff,
                                             0xff, 7, 0, 0, 0};
    ck_assert_uint_eq(blen - hl, n * 4 + 12);
    ck_assert(!memcmp(body + hl, one_le, 4));
    ck_assert(!memcmp(body + hl, y, n * 4));
    ck_assert(!memcmp(body + hl + n * 4, len_le, 12));
    json_error_t jerr;
    json_t *h = json_loadb(body, hl, 0, &jerr);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(
                         json_array_get(json_object_get(h, "outputs"), 0),
                         "parameters"), "binary_data_size")),
                     (json_int_t)(n * 4));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(
                         json_array_get(json_object_get(h, "outputs"), 1),
                         "parameters"), "binary_data_size")),
                     12);
    /* rewrite the response header as a request header: the binary part
     * stays as it is */
    json_t *outs = json_object_get(h, "outputs");
    json_t *req = json_pack("{s:O}", "inputs", outs);
    char *rh = json_dumps(req, JSON_COMPACT);
    size_t rhl = strlen(rh);
    char *rb = malloc(rhl + blen - hl);
    memcpy(rb, rh, rhl);
    memcpy(rb + rhl, body + hl, blen - hl);
    oip_request r;
    int rc = oip_decode(&r, rb, rhl + blen - hl, rhl, NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert(!memcmp(r.inputs[0].data, y, n * 4));
    ck_assert(!memcmp(r.inputs[1].data, len, 12));
    ck_assert_int_eq(r.inputs[0].shape[2], 64);
    oip_request_free(&r);
    free(rb);
    free(rh);
    json_decref(req);
    json_decref(h);
    free(body);
    free(y);
}
END_TEST

/* extra_params: a compact object goes out as it came (the one pass of
 * jtree.c); anything else as jansson dumps it compact, and a text that
 * is not one object is refused whichever way reads it. */
START_TEST(extra_params_text)
{
    float y[1] = {1.0f};
    oip_output o = {.name = "y", .dtype = OIP_FP32, .rank = 1, .shape = {1},
                    .data = y};
    static const struct {
        const char *in, *out; /* out NULL: refused */
    } c[] = {
        {"{\"sequence_length\":7,\"map_id\":\"m-1\"}",
         "{\"sequence_length\":7,\"map_id\":\"m-1\"}"},
        {"{}", "{}"},
        {"{\"a\":[1,-2,{\"b\":true,\"c\":null}],\"d\":false}",
         "{\"a\":[1,-2,{\"b\":true,\"c\":null}],\"d\":false}"},
        {"{ \"a\" : 1 }", "{\"a\":1}"},
        {"{\"a\":\"x y\",\"b\":[ ]}", "{\"a\":\"x y\",\"b\":[]}"},
        {"{\"a\":\"\\u0041/\"}", "{\"a\":\"A/\"}"},
        {"{\"a\":1.5}", "{\"a\":1.5}"},
        {"{\"a\":[-0,-1,0]}", "{\"a\":[0,-1,0]}"},
        {"{\"a\":1,}", NULL},
        {"{\"a\" 1}", NULL},
        {"{\"a\":1 \"b\":2}", NULL},
        {"{\"a\":1\"b\":2}", NULL},
        {"{\"a\"x1}", NULL},
        {"{\"a\":1}x", NULL},
        {"{\"a\":01}", NULL},
        {"{\"a\":-}", NULL},
        {"{\"a\":tru}", NULL},
        {"{\"a\":1,\"a\":2}", NULL},
        {"{\"a\":[1,]}", NULL},
        {"[1]", NULL},
        {"7", NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char *body = NULL, err[OIP_ERRMAX] = "", want[256];
        size_t n, hl;
        int rc = oip_encode("m", NULL, &o, 1, c[i].in, &body, &n, &hl, err);
        if (!c[i].out) {
            ck_assert_msg(rc == ATTN_EINVAL, "%s: %d", c[i].in, rc);
            ck_assert_str_eq(err, "oip_encode: extra_params is not a JSON object");
            continue;
        }
        ck_assert_msg(rc == 0, "%s: %s", c[i].in, err);
        snprintf(want, sizeof want, ",\"parameters\":%s,\"outputs\"", c[i].out);
        ck_assert_msg(strstr(body, want), "%s: %s", c[i].in, body);
        free(body);
    }
}
END_TEST

/* the UTF-8 rules (RFC 3629): what a protobuf string may hold */
START_TEST(utf8_valid)
{
    static const struct { const char *s; int ok; } cases[] = {
        {"", 1}, {"plain", 1}, {"\xc3\xa9", 1}, {"\xe2\x82\xac", 1},
        {"\xf0\x9f\x98\x80", 1}, {"\xf4\x8f\xbf\xbf", 1},
        {"\xc3\x28", 0},          /* a lead byte without its continuation */
        {"ok\xff", 0},             /* never in UTF-8 */
        {"\xc0\xaf", 0},          /* overlong '/' */
        {"\xe0\x80\xaf", 0},      /* overlong, three bytes */
        {"\xed\xa0\x80", 0},      /* a surrogate, U+D800 */
        {"\xf4\x90\x80\x80", 0},  /* past U+10FFFF */
        {"\xe2\x82", 0},          /* cut short */
        {"\x80", 0},               /* a lone continuation byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(oip__utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok,
                      "case %zu", i);
    ck_assert(oip__utf8_valid("a\0b", 3)); /* NUL is a character */
}
END_TEST

static Suite *encode_suite(void)
{
    Suite *s = suite_create("encode");
    TCase *tc = tcase_create("encode");
    tu_timeout(tc, 120);
    tcase_add_test(tc, json_response_text);
    tcase_add_test(tc, binary_outputs);
    tcase_add_test(tc, escaping);
    tcase_add_test(tc, encode_errors);
    tcase_add_test(tc, extra_params_text);
    tcase_add_test(tc, round_trip_json);
    tcase_add_test(tc, round_trip_binary);
    tcase_add_test(tc, utf8_valid);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(encode_suite)
