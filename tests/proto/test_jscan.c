/* test_jscan.c - proto/jscan.c: the scanner's spans and counts, and the
 * data reader on its own. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "proto/oip_internal.h"
#include "tests/check_main.h"

static int scan(const char *js, oip__scan *sc, char *err)
{
    return oip__scan_json(js, strlen(js), 4, sc, err);
}

START_TEST(spans)
{
    const char *js = "{\"parameters\":{\"inputs\":[{\"data\":[9]}]},"
                     "\"inputs\":[{\"name\":\"a\",\"data\":[1, 2]},"
                     "{\"name\":\"b\"},{\"d\\u0061ta\" : [[3],[4]] ,"
                     "\"x\":{\"data\":1}}]}";
    oip__scan sc;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(scan(js, &sc, err), 0);
    ck_assert_int_eq(sc.n_inputs, 3);
    const char *d0 = strstr(js, "[1, 2]");
    ck_assert_uint_eq(sc.data[0].off, (size_t)(d0 - js));
    ck_assert_uint_eq(sc.data[0].len, 6);
    ck_assert_uint_eq(sc.data[1].len, 0);
    const char *d2 = strstr(js, "[[3],[4]]");
    ck_assert_uint_eq(sc.data[2].off, (size_t)(d2 - js));
    ck_assert_uint_eq(sc.data[2].len, 9);
    ck_assert_uint_eq(sc.data_bytes, 15);
    /* values and keys outside the two data spans:
     * root{1} parameters k+obj 2, inputs k+arr 2, obj 1, data k + arr + 9
     * = 3 -> 10; inputs k+arr 2 -> 12; in0: obj, name k+v, data k -> 4;
     * in1: obj, name k+v -> 3; in2: obj, data k, x k+obj, data k+1 -> 6 */
    ck_assert_uint_eq(sc.n_values, 1 + 2 + 2 + 1 + 3 + 2 + 4 + 3 + 6);
    free(sc.data);
}
END_TEST

/* The bulk skip (16 bytes at a time) finds a bracket, a quote or a nested
 * array at every offset of a long data array, and the span ends where the
 * byte-by-byte scan ends it. */
START_TEST(long_spans)
{
    static const char *const inner[] = {"", "[7]", "\"s]\"", "{\"k\":[1]}"};
    static const char digits[] = "1,2,3,4,5,6,7,8,9,1,2,3,4,5,6,7,8,9,1,2,3,4,5";
    char js[512], arr[300];
    oip__scan sc;
    char err[OIP_ERRMAX] = "";
    for (size_t k = 0; k < sizeof inner / sizeof inner[0]; k++)
        for (int at = 0; at < 40; at++) {
            int n = snprintf(arr, sizeof arr, "[%.*s%s", at, digits,
                             at && digits[at - 1] == ',' ? "0" : "");
            if (k)
                n += snprintf(arr + n, sizeof arr - (size_t)n, "%s%s, 0.5]",
                              at ? (at % 2 ? "," : ", ") : "", inner[k]);
            else
                n += snprintf(arr + n, sizeof arr - (size_t)n, "]");
            snprintf(js, sizeof js, "{\"inputs\":[{\"data\":%s , \"name\":\"x\"}]}", arr);
            ck_assert_msg(scan(js, &sc, err) == 0, "%s: %s", js, err);
            ck_assert_msg(sc.data[0].len == (size_t)n, "%s: span %zu, want %d", js,
                          sc.data[0].len, n);
            free(sc.data);
        }
}
END_TEST

START_TEST(scan_errors)
{
    static const struct {
        const char *js;
        int code;
        const char *msg;
    } cases[] = {
        {"{\"inputs\":[1,2,3,4,5]}", ATTN_EOVERFLOW,
         "inputs: more than 4 entries"},
        {"{\"a\":\"\\u12g4\"}", ATTN_EINVAL,
         "request body: invalid JSON at byte 10: bad \\u escape"},
        {"{\"a\":\"abc", ATTN_EINVAL,
         "request body: invalid JSON at byte 9: unterminated string"},
        {"{\"a\" 1}", ATTN_EINVAL,
         "request body: invalid JSON at byte 5: expected ':'"},
        {"{\"inputs\":[{\"data\":}]}", ATTN_EINVAL,
         "request body: invalid JSON at byte 19: expected a value"},
        {"{\"inputs\":[{\"data\":[1,2", ATTN_EINVAL,
         "request body: invalid JSON at byte 23: unterminated array"},
        {"{\"inputs\":[{\"data\":[\"]", ATTN_EINVAL,
         "request body: invalid JSON at byte 22: unterminated string"},
        {"{\"a\":nul}", ATTN_EINVAL,
         "request body: invalid JSON at byte 5: unexpected 'nul' (not a JSON "
         "value)"},
        /* what was sent is named: NaN and infinity (with a sign too) */
        {"{\"a\":NaN}", ATTN_EINVAL, "request body: invalid JSON at byte 5: "
                                    "unexpected 'NaN' (JSON has no NaN or infinity)"},
        {"{\"a\":[1,-Infinity]}", ATTN_EINVAL,
         "request body: invalid JSON at byte 8: unexpected '-Infinity' (JSON "
         "has no NaN or infinity)"},
        {"{\"a\":-x}", ATTN_EINVAL,
         "request body: invalid JSON at byte 5: unexpected character"},
        {"  ", ATTN_EINVAL, "request body: empty; expected a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oip__scan sc;
        char err[OIP_ERRMAX] = "";
        int rc = scan(cases[i].js, &sc, err);
        free(sc.data);
        if (rc != cases[i].code || strcmp(err, cases[i].msg))
            ck_abort_msg("%s: got %d '%s'", cases[i].js, rc, err);
    }
}
END_TEST

START_TEST(reader)
{
    char err[OIP_ERRMAX] = "";
    float f[4];
    const char *s = " [ [1.5 , -2 ] , [ 3e2 ] , [ ] , [ [ 0.25 ] ] ] ";
    ck_assert_int_eq(oip__read_data(s, strlen(s), OIP_FP32, f, 4, "d", err),
                     0);
    ck_assert(f[0] == 1.5f && f[1] == -2.0f && f[2] == 300.0f &&
              f[3] == 0.25f);
    /* Python's separators (", ") take the same values as ",", and an error
     * after one names the same element and byte (the first bad[] rows) */
    s = "[0.5, -1e-3, 7,2.5e1]";
    ck_assert_int_eq(oip__read_data(s, strlen(s), OIP_FP32, f, 4, "d", err), 0);
    ck_assert(f[0] == 0.5f && f[1] == -1e-3f && f[2] == 7.0f && f[3] == 25.0f);
    int64_t v[2];
    s = "[-9223372036854775808,9223372036854775807]";
    ck_assert_int_eq(oip__read_data(s, strlen(s), OIP_INT64, v, 2, "d", err),
                     0);
    ck_assert(v[0] == INT64_MIN && v[1] == INT64_MAX);
    uint8_t b[2];
    s = "[false,true]";
    ck_assert_int_eq(oip__read_data(s, strlen(s), OIP_BOOL, b, 2, "d", err),
                     0);
    ck_assert(b[0] == 0 && b[1] == 1);
    /* -0 is IEEE -0; below FP32's smallest subnormal rounds to 0 */
    s = "[-0, 1e-999]";
    ck_assert_int_eq(oip__read_data(s, strlen(s), OIP_FP32, f, 2, "d", err), 0);
    ck_assert(f[0] == 0.0f && signbit(f[0]) && f[1] == 0.0f && !signbit(f[1]));
    /* what is refused, as {data, its dtype, the count wanted, the error} */
    static const struct {
        const char *js;
        oip_dtype t;
        size_t n;
        const char *msg;
    } bad[] = {
        {"[0.5, -1e-3, 7,2, 2.5e1]", OIP_FP32, 4, "d: expected 4 values, got 5"},
        {"[0.5, 1.e3]", OIP_FP32, 2, "d: invalid JSON at byte 6: malformed number"},
        {"[0.5, 1e39]", OIP_FP32, 2, "d[1]: 1e39 is out of FP32 range"},
        {"[0.5,  -x]", OIP_FP32, 2, "d: invalid JSON at byte 7: malformed number"},
        /* a word, not the boolean its first letter starts */
        {"[tru]", OIP_BOOL, 1, "d[0]: expected true or false, got 'tru' (not a JSON value)"},
        {"[null]", OIP_BOOL, 1, "d[0]: expected true or false, got null"},
        {"[1,2,3]", OIP_FP32, 2, "d: expected 2 values, got 3"},
        {"[1,2] 3", OIP_FP32, 2, "d: invalid JSON at byte 6: data after the array"},
        {"[1,2", OIP_FP32, 2, "d: invalid JSON at byte 4: unterminated array"},
        {"[1.]", OIP_FP32, 1, "d: invalid JSON at byte 1: malformed number"},
        {"[x]", OIP_FP32, 1, "d[0]: expected a number, got 'x' (not a JSON value)"},
        {"[,]", OIP_FP32, 1, "d: invalid JSON at byte 1: unexpected character"},
        /* NaN and infinity are named as sent, not as null (a 'n' was taken
         * for null), in every spelling and after a flat run too */
        {"[nan]", OIP_FP32, 10, "d[0]: expected a number, got 'nan' (JSON has no NaN or infinity)"},
        {"[1, NaN]", OIP_FP32, 10, "d[1]: expected a number, got 'NaN' (JSON has no NaN or infinity)"},
        {"[1,2,3,4,5,6,7,8,9,-nan]", OIP_FP32, 10, "d[9]: expected a number, got '-nan' (JSON has no NaN or infinity)"},
        {"[Infinity]", OIP_FP32, 10, "d[0]: expected a number, got 'Infinity' (JSON has no NaN or infinity)"},
        {"[[-Infinity]]", OIP_FP32, 10, "d[0]: expected a number, got '-Infinity' (JSON has no NaN or infinity)"},
        {"[+inf]", OIP_FP32, 10, "d[0]: expected a number, got '+inf' (JSON has no NaN or infinity)"},
        {"[nullx]", OIP_FP32, 10, "d[0]: expected a number, got 'nullx' (not a JSON value)"},
        {"[null]", OIP_FP32, 10, "d[0]: expected a number, got null"},
        {"[true]", OIP_FP32, 10, "d[0]: expected a number, got a boolean"},
        {"[inf]", OIP_INT32, 10, "d[0]: expected an integer, got 'inf' (JSON has no NaN or infinity)"},
        {"[NaN]", OIP_BOOL, 10, "d[0]: expected true or false, got 'NaN' (JSON has no NaN or infinity)"},
        /* past FP32's range: refused, not rounded to infinity */
        {"[1e999]", OIP_FP32, 10, "d[0]: 1e999 is out of FP32 range"},
        {"[-1e999]", OIP_FP32, 10, "d[0]: -1e999 is out of FP32 range"},
        {"", OIP_FP32, 1, "d: expected an array, got nothing"},
        /* a long out-of-range number is cut in the message */
        {"[1000000000000000000000000000000000000000000000000000000]", OIP_FP32,
         1, "d[0]: 1000000000000000000000000000000000000000... is out of FP32 range"},
    };
    float big[10];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int rc = oip__read_data(bad[k].js, strlen(bad[k].js), bad[k].t, big,
                                bad[k].n, "d", err);
        ck_assert_msg(rc == ATTN_EINVAL, "%s: %d, want ATTN_EINVAL", bad[k].js, rc);
        ck_assert_str_eq(err, bad[k].msg);
    }
    char deep[100];
    memset(deep, '[', 65);
    deep[65] = 0;
    ck_assert_int_eq(oip__read_data(deep, 65, OIP_FP32, f, 1, "d", err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "d: invalid JSON at byte 64: nesting too deep");
}
END_TEST

static Suite *jscan_suite(void)
{
    Suite *s = suite_create("jscan");
    TCase *tc = tcase_create("jscan");
    tcase_add_test(tc, spans);
    tcase_add_test(tc, long_spans);
    tcase_add_test(tc, scan_errors);
    tcase_add_test(tc, reader);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(jscan_suite)
