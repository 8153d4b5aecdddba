/*
 * test_pb.c - proto/pb.c, the gRPC binding's ModelInferRequest decoder:
 * what a client can get wrong that the gRPC suites (tests/grpc) do not
 * send, each refused with the field named and the request left empty:
 *   - inputs: contents and raw_input_contents both, a name twice, empty
 *     or too long names, element counts that overflow or pass
 *     max-elements, more inputs than max-inputs, tensors over the memory
 *     budget, values in another datatype's contents field;
 *   - outputs: a name twice, an empty name, more than max-outputs,
 *     binary_data that is not a bool;
 *   - parameters: sequence_id as uint64 (Triton's clients send it so) and
 *     of no id kind, tokens in each wrong form, an id too long;
 *   - oip_pb_peek_model on a message cut inside a fixed-width field;
 *   - oip_pb_peek_seq_id: the id the decode gives, none where it refuses;
 *   - a NUL byte inside a string (a nested one too), which protobuf-c
 *     would hand over cut there; not in bytes nor unknown fields;
 *   - oip_pb_peek_echo (a stream error's echo of its request): the last
 *     of a field, none for one no string could hold (not UTF-8), a NUL
 *     byte and an id of any length whole, what came before a break;
 *     oip_pb_echo_encode of it, read back by protobuf-c.
 * And INT64 typed contents and per-output binary_data decode as sent.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "proto/kserve.pb-c.h"
#include "proto/oip_pb.h"
#include "tests/check_main.h"

typedef Inference__ModelInferRequest Req;
typedef Inference__ModelInferRequest__InferInputTensor In;
typedef Inference__ModelInferRequest__InferRequestedOutputTensor Out;
typedef Inference__ModelInferRequest__ParametersEntry PEntry;
typedef Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry
    OEntry;
typedef Inference__InferParameter Param;
typedef Inference__InferTensorContents Contents;

enum { N = 4 };

/* msg: one request under construction, every part in fixed slots. */
typedef struct msg {
    Req m;
    In in[N], *inp[N];
    int64_t shape[N][2];
    Contents c[N];
    float f[N][4];
    int64_t i64[N][4];
    int32_t i32[N][4];
    ProtobufCBinaryData raw[N];
    Out out[N], *outp[N];
    OEntry oe[N], *oep[N];
    Param ov[N];
    PEntry pe[N], *pep[N];
    Param pv[N];
} msg;

static void msg_init(msg *g)
{
    memset(g, 0, sizeof *g);
    inference__model_infer_request__init(&g->m);
    g->m.model_name = "m";
    g->m.inputs = g->inp;
    g->m.outputs = g->outp;
    g->m.parameters = g->pep;
}

/* add_fp32: an FP32 [n] input called name with typed contents 1..n. */
static In *add_fp32(msg *g, const char *name, int n)
{
    size_t i = g->m.n_inputs++;
    In *t = &g->in[i];
    inference__model_infer_request__infer_input_tensor__init(t);
    inference__infer_tensor_contents__init(&g->c[i]);
    t->name = (char *)name;
    t->datatype = "FP32";
    g->shape[i][0] = n;
    t->shape = g->shape[i];
    t->n_shape = 1;
    for (int k = 0; k < n && k < 4; k++)
        g->f[i][k] = (float)(k + 1);
    g->c[i].fp32_contents = g->f[i];
    g->c[i].n_fp32_contents = (size_t)n;
    t->contents = &g->c[i];
    g->inp[i] = t;
    return t;
}

static void add_output(msg *g, const char *name)
{
    size_t i = g->m.n_outputs++;
    inference__model_infer_request__infer_requested_output_tensor__init(&g->out[i]);
    g->out[i].name = (char *)name;
    g->outp[i] = &g->out[i];
}

/* add_param: request parameter key; returns its value to fill in. */
static Param *add_param(msg *g, const char *key)
{
    size_t i = g->m.n_parameters++;
    inference__model_infer_request__parameters_entry__init(&g->pe[i]);
    inference__infer_parameter__init(&g->pv[i]);
    g->pe[i].key = (char *)key;
    g->pe[i].value = &g->pv[i];
    g->pep[i] = &g->pe[i];
    return &g->pv[i];
}

/* out_binary_data: output o's one parameter, binary_data; returns its value
 * to fill in. */
static Param *out_binary_data(msg *g, int o)
{
    inference__model_infer_request__infer_requested_output_tensor__parameters_entry__init(
        &g->oe[0]);
    inference__infer_parameter__init(&g->ov[0]);
    g->oe[0].key = "binary_data";
    g->oe[0].value = &g->ov[0];
    g->oep[0] = &g->oe[0];
    g->out[o].parameters = g->oep;
    g->out[o].n_parameters = 1;
    return &g->ov[0];
}

/* one_output_param: g anew, input x (1 FP32) and output y whose one
 * parameter is key, of kind choice; returns its value to fill in. */
static Param *one_output_param(msg *g, char *key,
                               Inference__InferParameter__ParameterChoiceCase choice)
{
    msg_init(g);
    add_fp32(g, "x", 1);
    add_output(g, "y");
    Param *p = out_binary_data(g, 0);
    g->oe[0].key = key;
    p->parameter_choice_case = choice;
    return p;
}

static void str_param(Param *p, const char *s)
{
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    p->string_param = (char *)s;
}

/* dec: g packed and decoded under lim; a failure must leave r empty. */
static int dec(msg *g, const oip_limits *lim, oip_request *r, char *err)
{
    size_t n = inference__model_infer_request__get_packed_size(&g->m);
    uint8_t *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(inference__model_infer_request__pack(&g->m, b), n);
    err[0] = 0;
    int rc = oip_pb_decode(r, (const char *)b, n, 0, lim, err);
    char id[OIP_MAX_SEQ_ID];
    int found = oip_pb_peek_seq_id((const char *)b, n, 0, id);
    free(b);
    /* the peek gives what the decode gives */
    ck_assert_int_eq(found, id[0] != 0);
    if (!rc)
        ck_assert_str_eq(id, r->params.seq_id);
    if (rc) {
        ck_assert_int_eq(r->n_inputs, 0);
        ck_assert_ptr_null(r->inputs);
        ck_assert_msg(err[0], "failed (%d) without a message", rc);
    }
    return rc;
}

/* peeked: oip_pb_peek_seq_id of g packed ("" for none) */
static const char *peeked(msg *g)
{
    static char id[OIP_MAX_SEQ_ID];
    size_t n = inference__model_infer_request__get_packed_size(&g->m);
    uint8_t *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    inference__model_infer_request__pack(&g->m, b);
    oip_pb_peek_seq_id((const char *)b, n, 0, id);
    free(b);
    return id;
}

/* refused: g fails with code and an error starting with want. */
static void refused(msg *g, const oip_limits *lim, int code, const char *want)
{
    oip_request r;
    char err[OIP_ERRMAX];
    int rc = dec(g, lim, &r, err);
    ck_assert_msg(rc == code, "rc %d (want %d): %s", rc, code, err);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error '%s', want '%s...'",
                  err, want);
    oip_request_free(&r);
}

START_TEST(inputs_refused)
{
    msg g;
    oip_limits lim;
    uint8_t four[16] = {0};

    /* raw_input_contents for every input, and contents on one as well */
    msg_init(&g);
    add_fp32(&g, "x", 4);
    g.raw[0].data = four;
    g.raw[0].len = sizeof four;
    g.m.raw_input_contents = g.raw;
    g.m.n_raw_input_contents = 1;
    refused(&g, NULL, ATTN_EINVAL,
            "inputs[0]: both contents and raw_input_contents given");

    msg_init(&g);
    add_fp32(&g, "x", 2);
    add_fp32(&g, "x", 2);
    refused(&g, NULL, ATTN_EINVAL, "inputs[1].name: duplicate input \"x\"");

    msg_init(&g);
    add_fp32(&g, "", 2);
    refused(&g, NULL, ATTN_EINVAL, "inputs[0].name: must be 1 to 63 bytes");
    msg_init(&g);
    add_fp32(&g, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn", 2);
    refused(&g, NULL, ATTN_EINVAL, "inputs[0].name: must be 1 to 63 bytes");

    /* 2^40 x 2^40 elements: the product overflows size_t */
    msg_init(&g);
    In *t = add_fp32(&g, "x", 1);
    g.shape[0][0] = g.shape[0][1] = (int64_t)1 << 40;
    t->n_shape = 2;
    refused(&g, NULL, ATTN_EOVERFLOW, "inputs[0].shape: element count overflows");

    memset(&lim, 0, sizeof lim);
    lim.max_elements = 3;
    msg_init(&g);
    add_fp32(&g, "x", 4);
    refused(&g, &lim, ATTN_EFULL, "inputs[0].shape: 4 elements, at most 3");

    memset(&lim, 0, sizeof lim);
    lim.max_inputs = 2;
    msg_init(&g);
    add_fp32(&g, "a", 1);
    add_fp32(&g, "b", 1);
    add_fp32(&g, "c", 1);
    refused(&g, &lim, ATTN_EOVERFLOW, "inputs: more than 2 entries");

    /* a shape of 100000 floats sent with no values: the decoded size is
     * refused against the budget before anything is allocated for it */
    memset(&lim, 0, sizeof lim);
    lim.memory_budget = 65536;
    msg_init(&g);
    t = add_fp32(&g, "x", 1);
    g.shape[0][0] = 100000;
    t->contents = NULL;
    refused(&g, &lim, ATTN_EFULL, "request: decoded tensors need 400000 bytes");

    /* FP32 declared, the values in int_contents */
    msg_init(&g);
    t = add_fp32(&g, "x", 2);
    g.c[0].n_fp32_contents = 0;
    g.c[0].int_contents = g.i32[0];
    g.c[0].n_int_contents = 2;
    refused(&g, NULL, ATTN_EINVAL,
            "inputs[0].contents: FP32 values go in fp32_contents only");
}
END_TEST

START_TEST(outputs_refused)
{
    msg g;
    oip_limits lim;

    msg_init(&g);
    add_fp32(&g, "x", 1);
    add_output(&g, "y");
    add_output(&g, "y");
    refused(&g, NULL, ATTN_EINVAL, "outputs[1].name: duplicate output \"y\"");

    msg_init(&g);
    add_fp32(&g, "x", 1);
    add_output(&g, "");
    refused(&g, NULL, ATTN_EINVAL, "outputs[0].name: must be 1 to 63 bytes");

    memset(&lim, 0, sizeof lim);
    lim.max_outputs = 1;
    msg_init(&g);
    add_fp32(&g, "x", 1);
    add_output(&g, "y");
    add_output(&g, "attention");
    refused(&g, &lim, ATTN_EOVERFLOW, "outputs: 2 entries, at most 1");

    /* binary_data as an int64: refused, not read as true */
    Param *bd = one_output_param(&g, "binary_data",
                                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM);
    bd->int64_param = 1;
    refused(&g, NULL, ATTN_EINVAL,
            "outputs[0].parameters.binary_data: expected true or false");

    /* Triton's classification (tritonclient.grpc's class_count, an
     * int64): refused as the JSON door refuses it, not answered with the
     * whole tensor; 0 asks for none */
    Param *cl = one_output_param(&g, "classification",
                                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM);
    cl->int64_param = 3;
    refused(&g, NULL, ATTN_EINVAL,
            "outputs[0].parameters.classification: attnd does not serve "
            "Triton's classification extension (the top classes as BYTES); "
            "ask for the output without it and take its largest values "
            "yourself");
    cl->int64_param = 0;
    oip_request r;
    char err[OIP_ERRMAX] = "";
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    oip_request_free(&r);

    /* Triton's shared-memory extension (tritonclient.grpc's
     * InferRequestedOutput.set_shared_memory): refused, not answered in
     * the message while the client reads its region's stale bytes */
    Param *sm = one_output_param(&g, "shared_memory_region",
                                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM);
    sm->string_param = "out0";
    refused(&g, NULL, ATTN_EINVAL,
            "outputs[0].parameters.shared_memory_region: attnd does not "
            "serve Triton's shared-memory extension (system or CUDA; /v2 "
            "does not list it); ask for the output without it: it comes in "
            "the answer");
}
END_TEST

/* A request parameter misspelling one attnd reads is refused (casual
 * left the model's default); Triton's own (priority, timeout) and others
 * far from every name pass. */
START_TEST(misspelt_params_refused)
{
    msg g;
    oip_request r;
    char err[OIP_ERRMAX] = "";

    msg_init(&g);
    add_fp32(&g, "x", 1);
    add_param(&g, "priority")->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    add_param(&g, "timeout")->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    add_param(&g, "causal_mask")->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    oip_request_free(&r);
    Param *c = add_param(&g, "casual");
    c->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    c->bool_param = 1;
    refused(&g, NULL, ATTN_EINVAL,
            "parameters.casual: not a parameter attnd reads; did you mean "
            "'causal'? (others it does not know pass, as Triton passes them "
            "to its backend)");

    one_output_param(&g, "binarydata",
                     INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM);
    refused(&g, NULL, ATTN_EINVAL,
            "outputs[0].parameters.binarydata: not a parameter attnd reads; "
            "did you mean 'binary_data'?");

    /* strict_params (--strict-parameters 1): Triton's priority too */
    oip_limits lim = {.strict_params = 1};
    msg_init(&g);
    add_fp32(&g, "x", 1);
    add_param(&g, "causal")->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    ck_assert_msg(dec(&g, &lim, &r, err) == 0, "%s", err);
    oip_request_free(&r);
    add_param(&g, "priority")->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    refused(&g, &lim, ATTN_EINVAL,
            "parameters.priority: not a parameter attnd reads, refused "
            "under strict-parameters (it reads causal, retain, ");
}
END_TEST

/* An input in a shared-memory region (tritonclient.grpc's
 * InferInput.set_shared_memory: no contents and no raw_input_contents
 * entry of its own) is refused naming the parameter, not by the count of
 * raw_input_contents. */
START_TEST(input_shm_refused)
{
    msg g;
    Inference__ModelInferRequest__InferInputTensor__ParametersEntry e, *ep = &e;
    Param v;

    msg_init(&g);
    add_fp32(&g, "q", 2);
    add_fp32(&g, "k", 2);
    g.in[0].contents = g.in[1].contents = NULL;
    g.raw[0].data = (uint8_t *)g.f[0];
    g.raw[0].len = 8;
    g.m.raw_input_contents = g.raw;
    g.m.n_raw_input_contents = 1;
    inference__model_infer_request__infer_input_tensor__parameters_entry__init(&e);
    inference__infer_parameter__init(&v);
    e.key = "shared_memory_region";
    e.value = &v;
    v.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    v.string_param = "in1";
    g.in[1].parameters = &ep;
    g.in[1].n_parameters = 1;
    refused(&g, NULL, ATTN_EINVAL,
            "inputs[1].parameters.shared_memory_region: attnd does not "
            "serve Triton's shared-memory extension (system or CUDA; /v2 "
            "does not list it); send the tensor in the request instead");
}
END_TEST

/* binary_data per output and INT64 typed contents decode as sent. */
START_TEST(outputs_and_int64_decode)
{
    msg g;
    oip_request r;
    char err[OIP_ERRMAX];
    msg_init(&g);
    add_fp32(&g, "x", 2);
    In *t = add_fp32(&g, "lengths", 2);
    t->datatype = "INT64";
    g.c[1].n_fp32_contents = 0;
    g.i64[1][0] = 5;
    g.i64[1][1] = INT64_MAX;
    g.c[1].int64_contents = g.i64[1];
    g.c[1].n_int64_contents = 2;
    add_output(&g, "y");
    add_output(&g, "attention");
    Param *bd = out_binary_data(&g, 1);
    bd->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    bd->bool_param = 1;
    Param *p = add_param(&g, "binary_data_output");
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    p->bool_param = 0;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert_int_eq(r.n_outputs, 2);
    ck_assert_int_eq(r.outputs[0].binary, -1); /* the request's default */
    ck_assert_int_eq(r.outputs[1].binary, 1);
    ck_assert_int_eq(r.params.binary_data_output, 0);
    const oip_tensor *l = oip_find_input(&r, "lengths");
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->wire_dtype, OIP_INT64);
    ck_assert(((const int64_t *)l->data)[0] == 5);
    ck_assert(((const int64_t *)l->data)[1] == INT64_MAX);
    oip_request_free(&r);
}
END_TEST

START_TEST(sequence_id_kinds)
{
    msg g;
    oip_request r;
    char err[OIP_ERRMAX];
    Param *p;

    msg_init(&g);
    add_fp32(&g, "x", 1);
    p = add_param(&g, "sequence_id");
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    p->uint64_param = UINT64_MAX;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert_str_eq(r.params.seq_id, "18446744073709551615");
    oip_request_free(&r);

    p->uint64_param = 7; /* the same sequence as int64 7 and "7" */
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert_str_eq(r.params.seq_id, "7");
    oip_request_free(&r);

    p->uint64_param = 0;
    refused(&g, NULL, ATTN_EINVAL, "parameters.sequence_id: 0; expected >= 1");
    ck_assert_str_eq(peeked(&g), "");

    /* int64 and string ids (dec checks the peek against the decode) */
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    p->int64_param = 42;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    oip_request_free(&r);
    p->int64_param = -1;
    refused(&g, NULL, ATTN_EINVAL, "parameters.sequence_id: -1; expected >= 1");
    ck_assert_str_eq(peeked(&g), "");
    str_param(p, "chat-7");
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert_str_eq(r.params.seq_id, "chat-7");
    oip_request_free(&r);
    str_param(p, "a b");
    refused(&g, NULL, ATTN_EINVAL, "parameters.sequence_id: a string id");
    ck_assert_str_eq(peeked(&g), "");

    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
    p->double_param = 7.0;
    refused(&g, NULL, ATTN_EINVAL,
            "parameters.sequence_id: expected an int64, uint64 or string param");
    ck_assert_str_eq(peeked(&g), "");
    /* another key's value is not the id; none at all */
    str_param(add_param(&g, "other"), "5");
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    ck_assert_str_eq(peeked(&g), "");
    g.m.n_parameters = 0;
    ck_assert_str_eq(peeked(&g), "");

    /* an id of 256 bytes (at most 255) */
    char id[257];
    memset(id, 'i', 256);
    id[256] = 0;
    msg_init(&g);
    add_fp32(&g, "x", 1);
    g.m.id = id;
    refused(&g, NULL, ATTN_EINVAL, "id: longer than 255 bytes");
}
END_TEST

/* attnd's parameters.scale (sdpa's) over gRPC: a double, int64 or uint64
 * param whose float is positive and finite. */
START_TEST(scale_kinds)
{
    msg g;
    oip_request r;
    char err[OIP_ERRMAX];
    Param *p;

    msg_init(&g);
    add_fp32(&g, "q", 1);
    p = add_param(&g, "scale");
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
    p->double_param = 0.125;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert(r.params.scale == 0.125f);
    oip_request_free(&r);
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    p->int64_param = 3;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert(r.params.scale == 3.0f);
    oip_request_free(&r);
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    p->uint64_param = 2;
    ck_assert_msg(dec(&g, NULL, &r, err) == 0, "%s", err);
    ck_assert(r.params.scale == 2.0f);
    oip_request_free(&r);
    p->uint64_param = 0;
    refused(&g, NULL, ATTN_EINVAL, OIP_SCALE_MSG);
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    p->int64_param = -2;
    refused(&g, NULL, ATTN_EINVAL, OIP_SCALE_MSG);
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
    p->double_param = 1e39;
    refused(&g, NULL, ATTN_EINVAL, OIP_SCALE_MSG);
    p->double_param = 1e-50;
    refused(&g, NULL, ATTN_EINVAL, OIP_SCALE_MSG);
    str_param(p, "0.5");
    refused(&g, NULL, ATTN_EINVAL, OIP_SCALE_MSG);
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    p->bool_param = 1;
    refused(&g, NULL, ATTN_EINVAL, OIP_SCALE_MSG);
}
END_TEST

/* An entry's value given twice is merged by the parse (each member set
 * replaces the oneof's), and of entries of one key the last counts: the
 * peek reads them so (tests/proto/fuzz_pb_corpus/seq_step's bytes: ids 7
 * as int64, 2^64 - 1 as uint64, then a bool_param merged with "chat-7"). */
START_TEST(peek_seq_id_merged)
{
    static const unsigned char m[] = {
        0x0a, 0x03, 0x67, 0x71, 0x61, 0x22, 0x11, 0x0a, 0x0b, 0x73, 0x65, 0x71,
        0x75, 0x65, 0x6e, 0x63, 0x65, 0x5f, 0x69, 0x64, 0x12, 0x02, 0x10, 0x07,
        0x22, 0x1a, 0x0a, 0x0b, 0x73, 0x65, 0x71, 0x75, 0x65, 0x6e, 0x63, 0x65,
        0x5f, 0x69, 0x64, 0x12, 0x0b, 0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0x01, 0x22, 0x1b, 0x0a, 0x0b, 0x73, 0x65, 0x71, 0x75,
        0x65, 0x6e, 0x63, 0x65, 0x5f, 0x69, 0x64, 0x12, 0x02, 0x08, 0x01, 0x12,
        0x08, 0x1a, 0x06, 0x63, 0x68, 0x61, 0x74, 0x2d, 0x37, 0x22, 0x14, 0x0a,
        0x0e, 0x73, 0x65, 0x71, 0x75, 0x65, 0x6e, 0x63, 0x65, 0x5f, 0x73, 0x74,
        0x61, 0x72, 0x74, 0x12, 0x02, 0x08, 0x01, 0x2a, 0x1a, 0x0a, 0x01, 0x78,
        0x12, 0x04, 0x46, 0x50, 0x33, 0x32, 0x1a, 0x03, 0x01, 0x01, 0x02, 0x2a,
        0x0a, 0x32, 0x08, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0xbf};
    oip_request r;
    char err[OIP_ERRMAX], id[OIP_MAX_SEQ_ID];
    int rc = oip_pb_decode(&r, (const char *)m, sizeof m, 0, NULL, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(r.params.seq_id, "chat-7");
    oip_request_free(&r);
    ck_assert_int_eq(oip_pb_peek_seq_id((const char *)m, sizeof m, 0, id), 1);
    ck_assert_str_eq(id, "chat-7");
    /* the first entry alone (7 as int64), the first two (the uint64) */
    ck_assert_int_eq(oip_pb_peek_seq_id((const char *)m, 24, 0, id), 1);
    ck_assert_str_eq(id, "7");
    ck_assert_int_eq(oip_pb_peek_seq_id((const char *)m, 52, 0, id), 1);
    ck_assert_str_eq(id, "18446744073709551615");
}
END_TEST

START_TEST(tokens_refused)
{
    msg g;
    oip_limits lim;
    oip_request r;
    char err[OIP_ERRMAX], longtok[300];
    Param *p;

    msg_init(&g);
    add_fp32(&g, "x", 1);
    p = add_param(&g, "tokens");
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    p->bool_param = 1;
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens: expected a string_param");

    str_param(p, "{\"a\": \"b\"}");
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens: expected an array of strings");
    str_param(p, "not json");
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens: expected an array of strings");
    str_param(p, "[\"a\", 1]");
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens[1]: expected a string");

    snprintf(longtok, sizeof longtok, "[\"%0256d\"]", 0);
    str_param(p, longtok);
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens[0]: longer than 255 bytes");

    memset(&lim, 0, sizeof lim);
    lim.max_tokens = 2;
    str_param(p, "[\"a\", \"b\", \"c\"]");
    refused(&g, &lim, ATTN_EOVERFLOW, "parameters.tokens: 3 entries, at most 2");

    /* within the limit it decodes; the same key again is refused */
    str_param(p, "[\"a\", \"b\"]");
    ck_assert_msg(dec(&g, &lim, &r, err) == 0, "%s", err);
    ck_assert_int_eq(r.params.n_tokens, 2);
    ck_assert_int_eq(r.params.token_items, 0);
    ck_assert_str_eq(r.params.tokens[1], "b");
    oip_request_free(&r);
    /* one list per batch item, back to back; JSON's rules (test_decode) */
    str_param(p, "[[\"a\"], [\"b\", \"c\"]]");
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens[1]: 2 labels, tokens[0] has 1 (every batch item's list is as long)");
    str_param(p, "[[\"a\"], [\"b\"]]");
    ck_assert_msg(dec(&g, &lim, &r, err) == 0, "%s", err);
    ck_assert_int_eq(r.params.token_items, 2);
    ck_assert_str_eq(r.params.tokens[1], "b");
    oip_request_free(&r);
    str_param(add_param(&g, "tokens"), "[\"c\"]");
    refused(&g, NULL, ATTN_EINVAL, "parameters.tokens: given twice");
}
END_TEST

/* A message cut inside a fixed64 or fixed32 field is broken for the peek
 * (it reads only the top level, before the whole message is parsed). */
START_TEST(peek_cut_fixed)
{
    char name[64], version[64], err[OIP_ERRMAX];
    /* field 1 "m", then field 3 as fixed64 with 7 of its 8 bytes */
    const char f64[] = {0x0a, 0x01, 'm', 0x19, 1, 2, 3, 4, 5, 6, 7};
    const char f32[] = {0x0a, 0x01, 'm', 0x1d, 1, 2, 3};
    const char f32ok[] = {0x0a, 0x01, 'm', 0x1d, 1, 2, 3, 4};
    ck_assert_int_eq(oip_pb_peek_model(f64, sizeof f64, name, version, 64, err),
                     ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not a valid ModelInferRequest"));
    ck_assert_int_eq(oip_pb_peek_model(f32, sizeof f32, name, version, 64, err),
                     ATTN_EINVAL);
    ck_assert_int_eq(oip_pb_peek_model(f32ok, sizeof f32ok, name, version, 64, err),
                     0);
    ck_assert_str_eq(name, "m");
}
END_TEST

/* A string holding a NUL byte is refused by its field's path (protobuf-c
 * would hand "x\0y" over as "x"); bytes and unknown fields may hold one. */
START_TEST(nul_in_strings)
{
    char name[64], version[64], err[OIP_ERRMAX];
    oip_request r;
    /* model_name "m", inputs[0] {name "x\0y", datatype "FP32"} */
    const char in[] = {0x0a, 1, 'm', 0x2a, 11, 0x0a, 3, 'x', 0, 'y',
                       0x12, 4, 'F', 'P', '3', '2'};
    const char name_nul[] = {0x0a, 3, 'm', 0, 'x'};
    const char ver_nul[] = {0x0a, 1, 'm', 0x12, 2, '1', 0};
    /* raw_input_contents (bytes) and an unknown field 15 with NUL bytes */
    const char ok[] = {0x0a, 1, 'm', 0x3a, 2, 0, 0, 0x7a, 2, 'a', 0};
    ck_assert_int_eq(oip_pb_decode(&r, in, sizeof in, 0, NULL, err), ATTN_EINVAL);
    ck_assert_msg(!strncmp(err, "inputs.name: contains a NUL byte", 32), "%s", err);
    ck_assert_ptr_null(r.inputs);
    ck_assert_int_eq(oip_pb_check_strings(&inference__model_infer_request__descriptor,
                                          in, sizeof in, err), ATTN_EINVAL);
    ck_assert_int_eq(oip_pb_peek_model(name_nul, sizeof name_nul, name, version, 64, err),
                     ATTN_EINVAL);
    ck_assert_msg(!strncmp(err, "model_name: contains a NUL byte", 31), "%s", err);
    ck_assert_int_eq(oip_pb_peek_model(ver_nul, sizeof ver_nul, name, version, 64, err),
                     ATTN_EINVAL);
    ck_assert_msg(!strncmp(err, "model_version: contains a NUL byte", 34), "%s", err);
    ck_assert_int_eq(oip_pb_check_strings(&inference__model_infer_request__descriptor,
                                          ok, sizeof ok, err), 0);
    ck_assert_int_eq(oip_pb_peek_model(ok, sizeof ok, name, version, 64, err), 0);
}
END_TEST

/* The echo of a stream's failed request: id, model_name, model_version as
 * the request's top level holds them, read without a parse. */
static int echoed(const oip_pb_echo *e, int i, const char *want, size_t n)
{
    return e->n[i] == n && (!n || !memcmp(e->f[i], want, n));
}

START_TEST(peek_echo)
{
    oip_pb_echo e;
    char out[OIP_PB_ECHO_MAX], *big, *out_big;
    Inference__ModelInferResponse *m;
    size_t n, id_len = 100000;
    /* model_name "m", id "a" then id "b" (the last counts), version "1",
     * an input (skipped), then a field cut short */
    const char two[] = {0x0a, 1, 'm', 0x1a, 1, 'a', 0x1a, 1, 'b', 0x12, 1, '1',
                        0x2a, 2, 0x0a, 0, 0x1a, 5, 'z'};
    /* a version that is not UTF-8: none; an id with a NUL byte: whole (a
     * protobuf string may hold one) */
    const char bad[] = {0x0a, 1, 'm', 0x12, 1, (char)0xff, 0x1a, 3, 'x', 0, 'y'};
    oip_pb_peek_echo(two, sizeof two, &e);
    ck_assert(echoed(&e, 0, "m", 1));
    ck_assert(echoed(&e, 1, "1", 1));
    ck_assert(echoed(&e, 2, "b", 1));
    oip_pb_peek_echo(bad, sizeof bad, &e);
    ck_assert(echoed(&e, 0, "m", 1));
    ck_assert(echoed(&e, 1, "", 0));
    ck_assert(echoed(&e, 2, "x\0y", 3));
    n = oip_pb_echo_encode(&e, out);
    ck_assert_uint_eq(n, oip_pb_echo_size(&e));
    m = inference__model_infer_response__unpack(NULL, n, (const uint8_t *)out);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->model_version, "");
    ck_assert_str_eq(m->id, "x"); /* protobuf-c hands it over cut */
    inference__model_infer_response__free_unpacked(m, NULL);
    oip_pb_peek_echo(NULL, 0, &e);
    ck_assert(echoed(&e, 2, "", 0));
    /* an id far over OIP_MAX_ID bytes (refused by the decode) whole, and
     * the names up to the server's longest: the echo reads back */
    big = malloc(3 * 3 + 2 * 128 + id_len + 8);
    out_big = malloc(3 * 3 + 2 * 128 + id_len + 8);
    ck_assert(big && out_big);
    n = 0;
    big[n++] = 0x0a, big[n++] = (char)0x80, big[n++] = 1; /* 128 */
    memset(big + n, 'n', 128), n += 128;
    big[n++] = 0x12, big[n++] = (char)0x80, big[n++] = 1;
    memset(big + n, 'v', 128), n += 128;
    big[n++] = 0x1a;
    n += oip_pb_put_varint((unsigned char *)big + n, id_len);
    memset(big + n, 'i', id_len), n += id_len;
    oip_pb_peek_echo(big, n, &e);
    ck_assert_uint_eq(e.n[2], id_len);
    ck_assert_uint_eq(oip_pb_echo_size(&e), n);
    ck_assert_uint_eq(oip_pb_echo_encode(&e, out_big), n);
    ck_assert(!memcmp(out_big, big, n)); /* as a request holding them first */
    m = inference__model_infer_response__unpack(NULL, n, (const uint8_t *)out_big);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(strlen(m->model_name), 128);
    ck_assert_uint_eq(strlen(m->model_version), 128);
    ck_assert_uint_eq(strlen(m->id), id_len);
    inference__model_infer_response__free_unpacked(m, NULL);
    /* the same cut inside its id: the names, no id */
    oip_pb_peek_echo(big, OIP_PB_ECHO_MAX, &e);
    ck_assert_uint_eq(e.n[0] + e.n[1], 256);
    ck_assert_uint_eq(e.n[2], 0);
    /* the echo of any request attnd could serve fits OIP_PB_ECHO_MAX */
    e.n[2] = OIP_MAX_ID - 1;
    ck_assert_uint_eq(oip_pb_echo_size(&e), OIP_PB_ECHO_MAX);
    free(big);
    free(out_big);
    memset(&e, 0, sizeof e);
    ck_assert_uint_eq(oip_pb_echo_encode(&e, out), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pb");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, inputs_refused);
    tcase_add_test(tc, outputs_refused);
    tcase_add_test(tc, input_shm_refused);
    tcase_add_test(tc, misspelt_params_refused);
    tcase_add_test(tc, outputs_and_int64_decode);
    tcase_add_test(tc, scale_kinds);
    tcase_add_test(tc, sequence_id_kinds);
    tcase_add_test(tc, peek_seq_id_merged);
    tcase_add_test(tc, tokens_refused);
    tcase_add_test(tc, peek_cut_fixed);
    tcase_add_test(tc, nul_in_strings);
    tcase_add_test(tc, peek_echo);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)
