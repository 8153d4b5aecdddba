/* test_decode_binary.c - proto/decode.c: binary tensor data after the JSON
 * header (binary_data_size), equal to the same data in JSON, and its
 * errors. Every case runs twice (decode_helper.h). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "tests/check_main.h"
#include "tests/proto/decode_helper.h"

/* A body: JSON header (with ' for ") followed by n raw bytes. */
static char *bin_body(const char *json, const void *bytes, size_t n,
                      size_t *len, size_t *hlen)
{
    char *j = q(json);
    *hlen = strlen(j);
    *len = *hlen + n;
    char *b = malloc(*len ? *len : 1);
    memcpy(b, j, *hlen);
    if (n)
        memcpy(b + *hlen, bytes, n);
    free(j);
    return b;
}

static int bin_dec(oip_request *r, const char *json, const void *bytes,
                   size_t n, char *err)
{
    size_t len, hlen;
    char *b = bin_body(json, bytes, n, &len, &hlen);
    int rc = oip_decode(r, b, len, hlen, NULL, err);
    free(b);
    return rc;
}

START_TEST(binary_inputs)
{
    unsigned char buf[64];
    size_t at = 0;
    float f32[3] = {1.5f, -0.0f, FLT_MAX};
    memcpy(buf, f32, 12);
    at = 12;
    /* FP16: 1.0, -2.0, 65504, smallest subnormal (little-endian) */
    const unsigned char f16[] = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b,
                                 0x01, 0x00};
    memcpy(buf + at, f16, 8);
    at += 8;
    const unsigned char bf16[] = {0x80, 0x3f, 0x49, 0xc0}; /* 1, -3.140625 */
    memcpy(buf + at, bf16, 4);
    at += 4;
    int32_t i32[2] = {INT32_MIN, 7};
    memcpy(buf + at, i32, 8);
    at += 8;
    const unsigned char bl[] = {1, 0, 1};
    memcpy(buf + at, bl, 3);
    at += 3;
    oip_request r;
    char err[OIP_ERRMAX] = "";
    int rc = bin_dec(&r,
        "{'inputs':[{'name':'a','datatype':'FP32','shape':[3],"
        "'parameters':{'binary_data_size':12}},"
        "{'name':'j','datatype':'FP32','shape':[1],'data':[2.5]},"
        "{'name':'h','datatype':'FP16','shape':[2,2],"
        "'parameters':{'binary_data_size':8}},"
        "{'name':'b','datatype':'BF16','shape':[2],"
        "'parameters':{'binary_data_size':4}},"
        "{'name':'i','datatype':'INT32','shape':[2],"
        "'parameters':{'binary_data_size':8}},"
        "{'name':'m','datatype':'BOOL','shape':[3],"
        "'parameters':{'binary_data_size':3}}]}",
        buf, at, err);
    ck_assert_msg(rc == 0, "%s", err);
    const float *a = r.inputs[0].data;
    ck_assert(a[0] == 1.5f && signbit(a[1]) && a[2] == FLT_MAX);
    ck_assert(*(const float *)r.inputs[1].data == 2.5f);
    const float *h = r.inputs[2].data;
    ck_assert(h[0] == 1.0f && h[1] == -2.0f && h[2] == 65504.0f &&
              h[3] == 0x1p-24f);
    const float *b = r.inputs[3].data;
    ck_assert(b[0] == 1.0f && b[1] == -3.140625f);
    const int32_t *i = r.inputs[4].data;
    ck_assert(i[0] == INT32_MIN && i[1] == 7);
    ck_assert(!memcmp(r.inputs[5].data, bl, 3));
    ck_assert_int_eq(r.inputs[2].wire_dtype, OIP_FP16);
    oip_request_free(&r);
}
END_TEST

/* The same floats sent as JSON (Python's 17-digit reprs and 9-digit text)
 * and as binary decode to identical bits. */
START_TEST(json_equals_binary)
{
    enum { n = 1000 };
    float f[n];
    uint64_t s = 7;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t u = (uint32_t)(s >> 32);
        memcpy(&f[i], &u, 4);
        if (!isfinite(f[i]))
            f[i] = (float)i;
    }
    f[0] = -0.0f;
    f[1] = 0x1p-149f;
    f[2] = FLT_MAX;
    char *js = malloc(n * 30 + 200);
    for (int digits = 9; digits <= 17; digits += 8) {
        size_t at = (size_t)sprintf(js, "{'inputs':[{'name':'x','datatype':"
                                        "'FP32','shape':[%d],'data':[", n);
        for (int i = 0; i < n; i++)
            at += (size_t)sprintf(js + at, "%s%.*g", i ? "," : "", digits,
                                  (double)f[i]);
        strcpy(js + at, "]}]}");
        oip_request a, b;
        char err[OIP_ERRMAX] = "";
        ck_assert_int_eq(dec_lim(&a, js, NULL, err), 0);
        char hdr[200];
        snprintf(hdr, sizeof hdr, "{'inputs':[{'name':'x','datatype':'FP32',"
                 "'shape':[%d],'parameters':{'binary_data_size':%d}}]}", n,
                 4 * n);
        ck_assert_int_eq(bin_dec(&b, hdr, f, sizeof f, err), 0);
        ck_assert(!memcmp(a.inputs[0].data, f, sizeof f));
        ck_assert(!memcmp(b.inputs[0].data, f, sizeof f));
        oip_request_free(&a);
        oip_request_free(&b);
    }
    free(js);
}
END_TEST

START_TEST(binary_errors)
{
    oip_request r;
    char err[OIP_ERRMAX] = "";
    float f[4] = {1, 2, NAN, 4};
    const char *one = "{'inputs':[{'name':'x','datatype':'FP32','shape':[3],"
                      "'parameters':{'binary_data_size':12}}]}";
    ck_assert_int_eq(bin_dec(&r, one, f, 8, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "binary data: inputs declare 12 bytes, the body has "
                          "8 after the JSON header");
    ck_assert_int_eq(bin_dec(&r, one, f, 16, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "binary data: inputs declare 12 bytes, the body has "
                          "16 after the JSON header");
    ck_assert_int_eq(bin_dec(&r, one, f, 12, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0]: binary element 2 is not finite (NaN or "
                          "Inf)");
    ck_assert_int_eq(bin_dec(&r,
        "{'inputs':[{'name':'x','datatype':'FP32','shape':[3,4],"
        "'parameters':{'binary_data_size':44}}]}", f, 16, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0].parameters.binary_data_size: 44 bytes, "
                          "expected 48 (12 FP32 values)");
    const unsigned char inf16[] = {0x00, 0x3c, 0x00, 0x7c};
    ck_assert_int_eq(bin_dec(&r,
        "{'inputs':[{'name':'x','datatype':'FP16','shape':[2],"
        "'parameters':{'binary_data_size':4}}]}", inf16, 4, err),
        ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0]: binary element 1 is not finite (NaN or "
                          "Inf)");
    const unsigned char nanbf[] = {0xc1, 0x7f};
    ck_assert_int_eq(bin_dec(&r,
        "{'inputs':[{'name':'x','datatype':'BF16','shape':[1],"
        "'parameters':{'binary_data_size':2}}]}", nanbf, 2, err),
        ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0]: binary element 0 is not finite (NaN or "
                          "Inf)");
    const unsigned char b2[] = {1, 2};
    ck_assert_int_eq(bin_dec(&r,
        "{'inputs':[{'name':'x','datatype':'BOOL','shape':[2],"
        "'parameters':{'binary_data_size':2}}]}", b2, 2, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0]: binary BOOL element 1 is 2, must be 0 "
                          "or 1");
    /* header length beyond the body */
    char *body = q("{'inputs':[]}");
    ck_assert_int_eq(oip_decode(&r, body, strlen(body), 500, NULL, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "Inference-Header-Content-Length: 500 is larger "
                          "than the body (13 bytes)");
    /* header length cutting the JSON short: the length, not the JSON */
    ck_assert_int_eq(oip_decode(&r, body, strlen(body), 5, NULL, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "Inference-Header-Content-Length: 5 ends inside "
                          "the JSON object (the header counts the whole "
                          "JSON part, which comes first)");
    free(body);
    /* header length past the JSON, into the binary part */
    body = q("{'inputs':[]}\x01\x02\x03");
    ck_assert_int_eq(oip_decode(&r, body, strlen(body), 15, NULL, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "Inference-Header-Content-Length: 15, but the JSON "
                          "object ends at byte 13 (the header counts the JSON "
                          "part only: 13 for this one)");
    free(body);
    /* a JSON-only request with a header that says so is fine */
    body = q("{'inputs':[" X2 "]}");
    ck_assert_int_eq(oip_decode(&r, body, strlen(body), strlen(body), NULL,
                                err), 0);
    oip_request_free(&r);
    free(body);
    ck_assert_int_eq(r.n_inputs, 0);
}
END_TEST

static void add_cases(TCase *tc)
{
    tcase_add_test(tc, binary_inputs);
    tcase_add_test(tc, json_equals_binary);
    tcase_add_test(tc, binary_errors);
}

static Suite *decode_binary_suite(void) { return decode_suite_twice("decode_binary", add_cases); }

TU_MAIN(decode_binary_suite)
