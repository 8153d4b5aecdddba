/* test_decode.c - proto/decode.c (with jscan.c, jtree.c): request fields,
 * parameters, nested/flat data, limits (every malformed request case with
 * its exact message: test_decode_bad.c; binary framing:
 * test_decode_binary.c). Every case runs twice (decode_helper.h). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "tests/check_main.h"
#include "tests/proto/decode_helper.h"

/* strict_params (--strict-parameters 1): every parameter attnd does not
 * read is refused, Triton's priority too; without it they pass. */
START_TEST(strict_params)
{
    oip_limits lim = {.strict_params = 1};
    oip_request r;
    char err[OIP_ERRMAX] = "";
    const char *pri = "{'parameters':{'causal':true,'priority':1},"
                      "'inputs':[" X2 "]}";
    ck_assert_int_eq(dec_lim(&r, pri, NULL, err), 0);
    oip_request_free(&r);
    ck_assert_int_eq(dec_lim(&r, pri, &lim, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "parameters.priority: not a parameter attnd reads, "
                          "refused under strict-parameters (it reads causal, "
                          "retain, binary_data_output, sequence_id, "
                          "sequence_start, sequence_end, sequence_position, "
                          "scale, tokens)");
    ck_assert_int_eq(dec_lim(&r, "{'outputs':[{'name':'y','parameters':"
                                 "{'binary_data':true,'precision':'fp16'}}],"
                                 "'inputs':[" X2 "]}", &lim, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "outputs[0].parameters.precision: not a parameter "
                          "attnd reads, refused under strict-parameters (it "
                          "reads binary_data, classification)");
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32',"
                                 "'shape':[2],'data':[1,2],'parameters':"
                                 "{'note':1}}]}", &lim, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0].parameters.note: not a parameter attnd "
                          "reads, refused under strict-parameters (it reads "
                          "binary_data_size)");
    /* what it reads passes */
    ck_assert_msg(dec_lim(&r, "{'parameters':{'causal':true,'retain':false,"
                              "'scale':0.5},'outputs':[{'name':'y','parameters':"
                              "{'binary_data':false,'classification':0}}],"
                              "'inputs':[" X2 "]}", &lim, err) == 0, "%s", err);
    oip_request_free(&r);
}
END_TEST

START_TEST(limits_from_struct)
{
    oip_limits lim = {.max_inputs = 2, .max_outputs = 1, .max_tokens = 2,
                      .max_elements = 4};
    oip_request r;
    char err[OIP_ERRMAX];
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "," X2 "," X2 "]}", &lim,
                             err), ATTN_EOVERFLOW);
    ck_assert_str_eq(err, "inputs: more than 2 entries");
    ck_assert_int_eq(dec_lim(&r, "{'outputs':[{'name':'a'},{'name':'b'}],"
                                 "'inputs':[" X2 "]}", &lim, err),
                     ATTN_EOVERFLOW);
    ck_assert_str_eq(err, "outputs: 2 entries, at most 1");
    ck_assert_int_eq(dec_lim(&r, "{'parameters':{'tokens':['a','b','c']},"
                                 "'inputs':[" X2 "]}", &lim, err),
                     ATTN_EOVERFLOW);
    ck_assert_str_eq(err, "parameters.tokens: 3 entries, at most 2");
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32',"
                                 "'shape':[5],'data':[1,2,3,4,5]}]}", &lim,
                             err), ATTN_EFULL);
    ck_assert_str_eq(err, "inputs[0].shape: 5 elements, at most 4");
}
END_TEST

START_TEST(long_strings)
{
    oip_request r;
    char err[OIP_ERRMAX];
    char js[2048];
    char id[300];
    memset(id, 'a', 256);
    id[256] = 0;
    snprintf(js, sizeof js, "{'id':'%s','inputs':[" X2 "]}", id);
    ck_assert_int_eq(dec_lim(&r, js, NULL, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "id: longer than 255 bytes");
    id[255] = 0; /* 255 bytes: fine */
    snprintf(js, sizeof js, "{'id':'%s','inputs':[" X2 "]}", id);
    ck_assert_int_eq(dec_lim(&r, js, NULL, err), 0);
    ck_assert_uint_eq(strlen(r.id), 255);
    oip_request_free(&r);
    id[255] = 'a'; /* 256 bytes again */
    snprintf(js, sizeof js, "{'parameters':{'tokens':['ok','%s']},"
             "'inputs':[" X2 "]}", id);
    ck_assert_int_eq(dec_lim(&r, js, NULL, err), ATTN_EINVAL);
    ck_assert_str_eq(err, "parameters.tokens[1]: longer than 255 bytes");
}
END_TEST

START_TEST(nesting_depth)
{
    char js[512] = "{\"a\":";
    for (int i = 0; i < 70; i++)
        strcat(js, "[");
    oip_request r;
    char err[OIP_ERRMAX];
    ck_assert_int_eq(oip_decode(&r, js, strlen(js), 0, NULL, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "request body: invalid JSON at byte 68: nesting "
                          "too deep");
    /* inside data the reader's own bound applies */
    strcpy(js, "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\","
               "\"shape\":[1],\"data\":");
    for (int i = 0; i < 70; i++)
        strcat(js, "[");
    ck_assert_int_eq(oip_decode(&r, js, strlen(js), 0, NULL, err),
                     ATTN_EINVAL);
    ck_assert_str_eq(err, "request body: invalid JSON at byte 124: nesting "
                          "too deep");
}
END_TEST

START_TEST(valid_request_fields)
{
    oip_request r;
    char err[OIP_ERRMAX] = "";
    int rc = dec_lim(&r,
        "{'id':'req-1','unknown':{'deep':[1,2,{'data':[1]}]},"
        "'parameters':{'causal':true,'retain':true,'binary_data_output':false,"
        "'tokens':['the','cat'],'other':[1],'priority':1,'timeout':100,"
        "'triton_enable_empty_final_response':true,'causal_mask':1,"
        "'my_scale':2,'sequence':'s','sequence_len':3,'retained':1},"
        "'inputs':[{'name':'x','datatype':'FP32','shape':[2,3],"
        "'data':[[1.5,-2,3e-3],[0,-0.0,1e10]],'extra':{'data':5}},"
        "{'name':'lengths','datatype':'INT32','shape':[2],'data':[3,-7]},"
        "{'name':'mask','datatype':'BOOL','shape':[1,2],'data':[[true,false]]},"
        "{'name':'big','datatype':'INT64','shape':[1],"
        "'data':[-9223372036854775808]}],"
        "'outputs':[{'name':'y','parameters':{'classification':0}},"
        "{'name':'attention','parameters':{'binary_data':true}}]}", NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(r.id, "req-1");
    ck_assert_int_eq(r.params.causal, 1);
    ck_assert_int_eq(r.params.retain, 1);
    ck_assert_int_eq(r.params.binary_data_output, 0);
    ck_assert_int_eq(r.params.n_tokens, 2);
    ck_assert_str_eq(r.params.tokens[1], "cat");
    ck_assert_int_eq(r.n_inputs, 4);
    const oip_tensor *x = oip_find_input(&r, "x");
    ck_assert_ptr_eq(x, &r.inputs[0]);
    ck_assert_int_eq(x->wire_dtype, OIP_FP32);
    ck_assert_int_eq(x->rank, 2);
    ck_assert_int_eq(x->shape[0], 2);
    ck_assert_int_eq(x->shape[1], 3);
    ck_assert_uint_eq(x->count, 6);
    const float *xf = x->data;
    ck_assert(xf[0] == 1.5f && xf[1] == -2.0f && xf[2] == 3e-3f);
    ck_assert(xf[3] == 0.0f && signbit(xf[4]) && xf[5] == 1e10f);
    const int32_t *len = r.inputs[1].data;
    ck_assert(len[0] == 3 && len[1] == -7);
    const uint8_t *m = r.inputs[2].data;
    ck_assert(m[0] == 1 && m[1] == 0);
    ck_assert(*(const int64_t *)r.inputs[3].data == INT64_MIN);
    ck_assert_ptr_null(oip_find_input(&r, "nope"));
    ck_assert_int_eq(r.n_outputs, 2);
    ck_assert_str_eq(r.outputs[0].name, "y");
    ck_assert_int_eq(r.outputs[0].binary, -1);
    ck_assert_int_eq(r.outputs[1].binary, 1);
    ck_assert_uint_eq(r.bytes, 6 * 4 + 2 * 4 + 2 + 8 + 6 + 2 * sizeof(char *)
                                   + 4 + 4);
    oip_request_free(&r);
    ck_assert_ptr_null(r.inputs);
    oip_request_free(&r); /* twice is fine */
}
END_TEST

START_TEST(defaults_when_absent)
{
    oip_request r;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "],'outputs':[]}", NULL,
                             err), 0);
    ck_assert_ptr_null(r.id);
    ck_assert_int_eq(r.params.causal, -1);
    ck_assert_int_eq(r.params.retain, 0);
    ck_assert_ptr_null(r.params.tokens);
    ck_assert_int_eq(r.n_outputs, 0);
    ck_assert_ptr_null(r.outputs);
    oip_request_free(&r);
}
END_TEST

/* Triton's sequence parameters, as tritonclient.http sends them: a number
 * or a string id, start and end as booleans. */
START_TEST(sequence_params)
{
    oip_request r;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "],'parameters':{"
                     "'sequence_id':9223372036854775807,'sequence_start':true,"
                     "'sequence_end':false}}", NULL, err), 0);
    ck_assert_str_eq(r.params.seq_id, "9223372036854775807");
    ck_assert_int_eq(r.params.seq_start, 1);
    ck_assert_int_eq(r.params.seq_end, 0);
    oip_request_free(&r);
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "],'parameters':{"
                     "'sequence_id':'chat-42','sequence_end':true}}", NULL,
                     err), 0);
    ck_assert_str_eq(r.params.seq_id, "chat-42");
    ck_assert_int_eq(r.params.seq_start, 0);
    ck_assert_int_eq(r.params.seq_end, 1);
    oip_request_free(&r);
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "]}", NULL, err), 0);
    ck_assert_str_eq(r.params.seq_id, "");
    ck_assert_int_eq(r.params.has_seq_pos, 0);
    oip_request_free(&r);
    /* attnd's sequence_position: 0 .. INT32_MAX */
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "],'parameters':{"
                     "'sequence_id':3,'sequence_position':2147483647}}", NULL,
                     err), 0);
    ck_assert_int_eq(r.params.has_seq_pos, 1);
    ck_assert_int_eq(r.params.seq_pos, 2147483647);
    oip_request_free(&r);
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "],'parameters':{"
                     "'sequence_position':0}}", NULL, err), 0);
    ck_assert_int_eq(r.params.has_seq_pos, 1);
    ck_assert_int_eq(r.params.seq_pos, 0);
    oip_request_free(&r);
    /* uint64 past INT64_MAX (jansson's integers stop there), before or
     * after the inputs' data, which still decodes */
    ck_assert_int_eq(dec_lim(&r, "{'parameters':{'sequence_id':18446744073709551615},"
                     "'inputs':[" X2 "," X2B "]}", NULL, err), 0);
    ck_assert_str_eq(r.params.seq_id, "18446744073709551615");
    ck_assert(((const float *)r.inputs[1].data)[1] == 4.0f);
    oip_request_free(&r);
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "],'parameters':{"
                     "'sequence_id':9223372036854775808,'sequence_start':true}}",
                     NULL, err), 0);
    ck_assert_str_eq(r.params.seq_id, "9223372036854775808");
    ck_assert(((const float *)r.inputs[0].data)[1] == 2.0f);
    oip_request_free(&r);
    static const char *bad_ids[] = {
        "'sequence_id':0", "'sequence_id':-3", "'sequence_id':1.5",
        "'sequence_id':18446744073709551616", "'sequence_id':1e3",
        "'sequence_id':''", "'sequence_id':'a/b'", "'sequence_id':'a b'",
        "'sequence_id':true", "'sequence_id':7,'sequence_start':1",
        "'sequence_id':7,'sequence_end':'yes'",
        "'sequence_position':-1", "'sequence_position':2147483648",
        "'sequence_position':1.5", "'sequence_position':'3'",
        "'sequence_position':null",
    };
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{'inputs':[" X2 "],'parameters':{%s}}",
                 bad_ids[i]);
        err[0] = 0;
        ck_assert_int_eq(dec_lim(&r, body, NULL, err), ATTN_EINVAL);
        ck_assert_msg(strstr(err, "parameters.sequence_") != NULL, "%s: %s",
                      bad_ids[i], err);
        oip_request_free(&r);
    }
    ck_assert_int_eq(oip_sequence_id_valid("x", 1), 1);
    ck_assert_int_eq(oip_sequence_id_valid("x\\y", 3), 0);
    ck_assert_int_eq(oip_sequence_id_valid(".", 1), 0);
    ck_assert_int_eq(oip_sequence_id_valid("..", 2), 0);
    ck_assert_int_eq(oip_sequence_id_valid("...", 3), 1);
    ck_assert_int_eq(oip_sequence_id_valid(".a", 2), 1);
    ck_assert_int_eq(oip_sequence_id_valid("a.", 2), 1);
}
END_TEST

/* attnd's parameters.scale (sdpa's): a number whose float is positive and
 * finite, kept as that float; 0 when absent. */
START_TEST(scale_param)
{
    static const struct { const char *v; float want; } ok[] = {
        {"0.125", 0.125f}, {"2", 2.0f}, {"1e-45", 1e-45f}, {"3.4e38", 3.4e38f},
        {"0.2", 0.2f},
    };
    static const char *bad_scales[] = {"0", "-1", "0.0", "1e-50", "1e39",
                                       "'0.5'", "true", "null", "[0.5]"};
    oip_request r;
    char err[OIP_ERRMAX] = "", body[256];
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[" X2 "]}", NULL, err), 0);
    ck_assert(r.params.scale == 0.0f);
    oip_request_free(&r);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(body, sizeof body, "{'inputs':[" X2 "],'parameters':"
                 "{'scale':%s}}", ok[i].v);
        ck_assert_msg(dec_lim(&r, body, NULL, err) == 0, "%s: %s", ok[i].v,
                      err);
        ck_assert_msg(r.params.scale == ok[i].want, "%s: %g", ok[i].v,
                      (double)r.params.scale);
        oip_request_free(&r);
    }
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        snprintf(body, sizeof body, "{'inputs':[" X2 "],'parameters':"
                 "{'scale':%s}}", bad_scales[i]);
        err[0] = 0;
        ck_assert_int_eq(dec_lim(&r, body, NULL, err), ATTN_EINVAL);
        ck_assert_msg(strcmp(err, OIP_SCALE_MSG) == 0, "%s: %s",
                      bad_scales[i], err);
        oip_request_free(&r);
    }
}
END_TEST

START_TEST(nested_equals_flat)
{
    oip_request a, b, c;
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(dec_lim(&a, "{'inputs':[{'name':'x','datatype':'FP32',"
        "'shape':[2,2,2],'data':[1,2,3,4,5,6,7,8]}]}", NULL, err), 0);
    ck_assert_int_eq(dec_lim(&b, "{'inputs':[{'name':'x','datatype':'FP32',"
        "'shape':[2,2,2],'data':[[[1,2],[3,4]],[[5,6],[7,8]]]}]}", NULL, err),
        0);
    ck_assert_int_eq(dec_lim(&c, " { 'inputs' : [ { 'name' : 'x' , "
        "'datatype' : 'FP32' , 'shape' : [ 2 , 2 , 2 ] , 'd\\u0061ta' :\n"
        "[ [ 1 , 2 , 3 , 4 ] ,\t[ 5 , 6 ] , [ 7 , 8 ] ] } ] } ", NULL, err),
        0);
    ck_assert(!memcmp(a.inputs[0].data, b.inputs[0].data, 32));
    ck_assert(!memcmp(a.inputs[0].data, c.inputs[0].data, 32));
    ck_assert(((float *)a.inputs[0].data)[7] == 8.0f);
    oip_request_free(&a);
    oip_request_free(&b);
    oip_request_free(&c);
}
END_TEST

START_TEST(memory_budget)
{
    oip_request r;
    char err[OIP_ERRMAX] = "";
    oip_limits lim = {.memory_budget = 3000};
    /* a shape that claims 1000 floats (4000 bytes) is refused before any
     * data is read (the data here is short) */
    ck_assert_int_eq(dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32',"
                                 "'shape':[10,100],'data':[1]}]}", &lim, err),
                     ATTN_EFULL);
    ck_assert_str_eq(err, "request: decoded tensors need 4000 bytes, over the "
                          "memory budget of 3000 bytes");
    /* a skeleton with many values outside data is refused before jansson */
    char *js = malloc(40000);
    strcpy(js, "{'junk':[0");
    for (int i = 0; i < 5000; i++)
        strcat(js + strlen(js) - 2, ",0");
    strcat(js, "],'inputs':[" X2 "]}");
    ck_assert_int_eq(dec_lim(&r, js, &lim, err), ATTN_EFULL);
    ck_assert_str_eq(err, "request body: 5015 JSON values outside "
                          "inputs[].data exceed the memory budget of 3000 "
                          "bytes");
    /* data itself is not counted as JSON values: 500 floats (2000 bytes)
     * plus a small skeleton fit 4000 */
    lim.memory_budget = 4000;
    strcpy(js, "{'inputs':[{'name':'x','datatype':'FP32','shape':[500],"
               "'data':[0");
    for (int i = 1; i < 500; i++)
        strcat(js + strlen(js) - 2, ",1");
    strcat(js, "]}]}");
    ck_assert_int_eq(dec_lim(&r, js, &lim, err), 0);
    ck_assert_uint_eq(r.bytes, 2000);
    oip_request_free(&r);
    free(js);
}
END_TEST

START_TEST(dtype_names)
{
    static const char *names[] = {"BOOL", "INT32", "INT64", "FP16",
                                  "BF16", "FP32", "BYTES"};
    for (int i = 0; i < 7; i++) {
        oip_dtype t = oip_dtype_parse(names[i]);
        ck_assert_int_ne(t, OIP_INVALID);
        ck_assert_str_eq(oip_dtype_name(t), names[i]);
    }
    ck_assert_int_eq(oip_dtype_parse("fp32"), OIP_INVALID);
    ck_assert_int_eq(oip_dtype_parse(NULL), OIP_INVALID);
    ck_assert_uint_eq(oip_dtype_wire_size(OIP_BF16), 2);
    ck_assert_uint_eq(oip_dtype_host_size(OIP_BF16), 4);
    ck_assert_uint_eq(oip_dtype_wire_size(OIP_INT64), 8);
    ck_assert_uint_eq(oip_dtype_wire_size(OIP_BYTES), 0);
}
END_TEST

/* Skeletons at the edge of jtree.c's one pass: what it leaves to jansson
 * (escapes, non-ASCII, reals, long integers, duplicates among more than
 * eight members) decodes as jansson reads it, and a duplicate found by
 * either way gets jansson's message. */
START_TEST(skeleton_edges)
{
    oip_request r;
    char err[OIP_ERRMAX] = "";
    int rc = dec_lim(&r,
        "{'id':'caf\\u00e9 \\\\ \\'q\\'','parameters':{'c\\u0061usal':true,"
        "'temperature':0.5,'big':9223372036854775807,'n':-1234567890123456789,"
        "'tokens':['\\u00fcber','\\ud83d\\ude00','a\\nb']},"
        "'x':{'k0':0,'k1':1,'k2':2,'k3':3,'k4':4,'k5':5,'k6':6,'k7':7,'k8':8,"
        "'k9':[null,false,{}]},"
        "'inputs':[" X2 "],'outputs':[{'name':'\\u0079'}]}", NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(r.id, "caf\xc3\xa9 \\ \"q\"");
    ck_assert_int_eq(r.params.causal, 1);
    ck_assert_int_eq(r.params.n_tokens, 3);
    ck_assert_str_eq(r.params.tokens[0], "\xc3\xbc" "ber");
    ck_assert_str_eq(r.params.tokens[1], "\xf0\x9f\x98\x80");
    ck_assert_str_eq(r.params.tokens[2], "a\nb");
    ck_assert_int_eq(r.params.token_items, 0);
    ck_assert_str_eq(r.outputs[0].name, "y");
    oip_request_free(&r);
    /* one list per batch item: back to back, token_items of them */
    rc = dec_lim(&r, "{'parameters':{'tokens':[['a','b'],['c','d']]},"
                 "'inputs':[" X2 "]}", NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(r.params.n_tokens, 4);
    ck_assert_int_eq(r.params.token_items, 2);
    ck_assert_str_eq(r.params.tokens[2], "c");
    oip_request_free(&r);
    /* one escape alone in a request, each way it could be misread */
    rc = dec_lim(&r, "{'parameters':{'c\\u0061usal':true},'inputs':[" X2 "]}",
                 NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(r.params.causal, 1);
    oip_request_free(&r);
    rc = dec_lim(&r, "{'parameters':{'tokens':['a\\nb','\\u00fc']},'inputs':["
                     X2 "]}", NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(r.params.tokens[0], "a\nb");
    ck_assert_str_eq(r.params.tokens[1], "\xc3\xbc");
    oip_request_free(&r);
    rc = dec_lim(&r, "{'id':'\xc3\xa9','inputs':[" X2 "]}", NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(r.id, "\xc3\xa9");
    oip_request_free(&r);
    rc = dec_lim(&r, "{'id':'\xff','inputs':[" X2 "]}", NULL, err);
    ck_assert_int_eq(rc, ATTN_EINVAL); /* not UTF-8: jansson refuses it */
    ck_assert_msg(!strncmp(err, "request body: invalid JSON: unable to decode "
                                "byte 0xff", 50), "%s", err);

    /* ten members, the duplicate last: found by sorting, told by jansson */
    rc = dec_lim(&r, "{'x':{'k0':0,'k1':1,'k2':2,'k3':3,'k4':4,'k5':5,'k6':6,"
                     "'k7':7,'k8':8,'k3':9},'inputs':[" X2 "]}", NULL, err);
    ck_assert_int_eq(rc, ATTN_EINVAL);
    ck_assert_str_eq(err, "request body: invalid JSON: duplicate object key "
                          "near '\"k3\"'");
    /* keys that share a start are not duplicates */
    rc = dec_lim(&r, "{'x':{'k':0,'k0':1,'k00':2,'':3},'inputs':[" X2 "],"
                     "'parameters':{'sequence_position':7,'sequence_id':'s'}}",
                 NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(r.params.seq_pos, 7);
    ck_assert_str_eq(r.params.seq_id, "s");
    oip_request_free(&r);
    /* 18 digits in the one pass, 19 through jansson: the same integers */
    rc = dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32','shape':"
                     "[000000000000000001],'data':[1]}]}", NULL, err);
    ck_assert_int_eq(rc, ATTN_EINVAL); /* the scanner refuses leading zeros */
    rc = dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32','shape':[2],"
                     "'parameters':{'binary_data_size':-999999999999999999}}]}",
                 NULL, err);
    ck_assert_int_eq(rc, ATTN_EINVAL);
    ck_assert_str_eq(err, "inputs[0].parameters.binary_data_size: expected a "
                          "non-negative integer");
    rc = dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32','shape':"
                     "[1000000000000000000],'data':[1]}]}", NULL, err);
    ck_assert_int_eq(rc, ATTN_EFULL);
    ck_assert_str_eq(err, "inputs[0].shape: 1000000000000000000 elements, at "
                          "most 67108864");
    rc = dec_lim(&r, "{'inputs':[{'name':'x','datatype':'FP32','shape':"
                     "[100000000000000000],'data':[1]}]}", NULL, err);
    ck_assert_int_eq(rc, ATTN_EFULL);
    ck_assert_str_eq(err, "inputs[0].shape: 100000000000000000 elements, at "
                          "most 67108864");
}
END_TEST

static void add_cases(TCase *tc)
{
    tcase_add_test(tc, limits_from_struct);
    tcase_add_test(tc, scale_param);
    tcase_add_test(tc, long_strings);
    tcase_add_test(tc, nesting_depth);
    tcase_add_test(tc, valid_request_fields);
    tcase_add_test(tc, strict_params);
    tcase_add_test(tc, defaults_when_absent);
    tcase_add_test(tc, sequence_params);
    tcase_add_test(tc, nested_equals_flat);
    tcase_add_test(tc, memory_budget);
    tcase_add_test(tc, dtype_names);
    tcase_add_test(tc, skeleton_edges);
}

static Suite *decode_suite(void) { return decode_suite_twice("decode", add_cases); }

TU_MAIN(decode_suite)
