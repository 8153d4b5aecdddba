/*
 * pb.c - ModelInferRequest (gRPC, protobuf-c) to oip_request; the
 * response is pb_encode.c's, the reads without a parse pb_wire.c's. See
 * oip_pb.h for the contract; the rules and messages follow decode.c so
 * both bindings answer a bad request alike.
 */
#include "proto/oip_pb.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "oip_internal.h"
#include "core/json_mem.h"
#include "proto/kserve.pb-c.h"

typedef Inference__ModelInferRequest Req;
typedef Inference__ModelInferRequest__InferInputTensor InTensor;
typedef Inference__InferParameter Param;
typedef Inference__InferTensorContents Contents;

/* ---- an allocator with a budget ----------------------------------------- */

/* protobuf-c allocates the whole message tree while it parses; a small
 * message of many tiny submessages could cost far more than its size, so
 * the parse runs under the request's memory budget. */
typedef struct budget {
    size_t used, cap;
    int over;  /* the budget refused an allocation */
    int nomem; /* malloc did */
} budget;

#define HDR 16 /* keeps max_align_t alignment */

static void *b_alloc(void *ud, size_t n)
{
    budget *b = ud;
    size_t *p;
    if (n > SIZE_MAX - HDR || n + HDR > b->cap - b->used) {
        b->over = 1;
        return NULL;
    }
    p = malloc(n + HDR);
    if (!p) {
        b->nomem = 1;
        return NULL;
    }
    p[0] = n + HDR;
    b->used += n + HDR;
    return (char *)p + HDR;
}

static void b_free(void *ud, void *ptr)
{
    budget *b = ud;
    size_t *p;
    if (!ptr)
        return;
    p = (size_t *)(void *)((char *)ptr - HDR);
    b->used -= p[0];
    free(p);
}

/* ---- decode --------------------------------------------------------------- */

/* get_bool: a bool_param into *out; any other kind is refused. */
static int get_bool(const Param *v, const char *field, int *out, char *err)
{
    if (!v || v->parameter_choice_case !=
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
        return oip__fail(err, ATTN_EINVAL, "%s: expected true or false "
                         "(bool_param)", field);
    *out = v->bool_param != 0;
    return 0;
}

/* kind of a jansson array's entry (oip__tokens_kind) */
static json_t *js_entry(json_t *t, size_t i, long j)
{
    json_t *v = json_array_get(t, i);
    return j < 0 ? v : json_array_get(v, (size_t)j);
}

static int js_kind(void *ctx, size_t i, long j, size_t *len)
{
    json_t *v = js_entry(ctx, i, j);

    if (json_is_string(v)) {
        *len = json_string_length(v);
        return 0;
    }
    if (json_is_array(v)) {
        *len = json_array_size(v);
        return 1;
    }
    return -1;
}

/* tokens: a string_param holding a JSON array of strings, or of arrays of
 * strings, one per batch item (InferParameter has no list kind): the
 * rules of oip__tokens_shape, as the JSON decoder's. */
static int get_tokens(oip_request *req, const Param *v, int max_tokens,
                      size_t *bytes, char *err)
{
    oip_params *pr = &req->params;
    json_t *t;
    json_error_t je;
    size_t i, n, per;
    int rc = 0, nomem, items;
    if (!v || v->parameter_choice_case !=
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
        return oip__fail(err, ATTN_EINVAL, "parameters.tokens: expected a "
                         "string_param holding a JSON array of strings");
    t = attn_json_parse(v->string_param, strlen(v->string_param),
                       JSON_REJECT_DUPLICATES, &je, &nomem);
    if (nomem)
        return oip__fail(err, ATTN_ENOMEM, "parameters.tokens: out of memory");
    if (!json_is_array(t)) {
        json_decref(t);
        return oip__fail(err, ATTN_EINVAL,
                         "parameters.tokens: expected an array of strings");
    }
    if ((rc = oip__tokens_shape(js_kind, t, json_array_size(t), max_tokens,
                                &items, &n, err)))
        goto done;
    if (n && !(pr->tokens = calloc(n, sizeof *pr->tokens))) {
        rc = oip__fail(err, ATTN_ENOMEM, "parameters.tokens: out of memory");
        goto done;
    }
    per = items ? n / (size_t)items : n;
    for (i = 0; i < n; i++) {
        json_t *s = items ? js_entry(t, i / per, (long)(i % per))
                          : json_array_get(t, i);
        size_t len = json_string_length(s);
        if (!(pr->tokens[i] = malloc(len + 1))) {
            rc = oip__fail(err, ATTN_ENOMEM,
                           "parameters.tokens: out of memory");
            goto done;
        }
        memcpy(pr->tokens[i], json_string_value(s), len + 1);
        pr->n_tokens = (int)i + 1;
        *bytes += len + 1 + sizeof(char *);
    }
    if (n)
        pr->token_items = items;
done:
    json_decref(t);
    return rc;
}

/* get_seq_id: Triton's sequence_id: an int64/uint64 param >= 1 (0 means
 * no sequence there) or a string (oip_sequence_id_valid), as text. */
static int get_seq_id(const Param *v, char *out, char *err)
{
    const char *f = "parameters.sequence_id";
    switch (v ? v->parameter_choice_case : 0) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
        if (v->int64_param < 1)
            return oip__fail(err, ATTN_EINVAL, "%s: %lld; expected >= 1", f,
                             (long long)v->int64_param);
        snprintf(out, OIP_MAX_SEQ_ID, "%lld", (long long)v->int64_param);
        return 0;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        if (v->uint64_param < 1)
            return oip__fail(err, ATTN_EINVAL, "%s: 0; expected >= 1", f);
        snprintf(out, OIP_MAX_SEQ_ID, "%llu", (unsigned long long)v->uint64_param);
        return 0;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
        if (oip_sequence_id_error(v->string_param, strlen(v->string_param), f,
                                  0, err))
            return ATTN_EINVAL;
        snprintf(out, OIP_MAX_SEQ_ID, "%s", v->string_param);
        return 0;
    default:
        return oip__fail(err, ATTN_EINVAL, "%s: expected an int64, uint64 or "
                         "string param", f);
    }
}

/* get_seq_pos: parameters.sequence_position, an int64 or uint64 param
 * 0 .. INT32_MAX. */
static int get_seq_pos(const Param *v, oip_params *pr, char *err)
{
    long long n = -1;
    if (v && v->parameter_choice_case ==
                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
        n = v->int64_param;
    else if (v && v->parameter_choice_case ==
                      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM)
        n = v->uint64_param > INT32_MAX ? -1 : (long long)v->uint64_param;
    if (n < 0 || n > INT32_MAX)
        return oip__fail(err, ATTN_EINVAL, "parameters.sequence_position: "
                         "expected an int64 or uint64 param 0 .. %d (the "
                         "tokens the sequence holds before this step)",
                         INT32_MAX);
    pr->has_seq_pos = 1;
    pr->seq_pos = (int)n;
    return 0;
}

/* get_scale: parameters.scale, a double, int64 or uint64 param. */
static int get_scale(const Param *v, oip_params *pr, char *err)
{
    int c = v ? (int)v->parameter_choice_case : 0;
    double x = c == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM
                   ? v->double_param
               : c == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM
                   ? (double)v->int64_param
               : c == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM
                   ? (double)v->uint64_param : -1;
    return oip__scale_valid(x, &pr->scale)
               ? oip__fail(err, ATTN_EINVAL, OIP_SCALE_MSG) : 0;
}

/* params: the request parameters attnd knows; one misspelling one of them
 * (oip__misspelt) is refused, others are ignored. *bin
 * is set when binary_data_output was given. */
static int decode_params(oip_request *req, const Req *m, int max_tokens,
                         int strict, size_t *bytes, int *bin_given, char *err)
{
    oip_params *pr = &req->params;
    size_t i;
    int rc = 0;
    pr->causal = -1;
    for (i = 0; i < m->n_parameters && !rc; i++) {
        const char *k = m->parameters[i]->key;
        const Param *v = m->parameters[i]->value;
        if (!strcmp(k, "causal"))
            rc = get_bool(v, "parameters.causal", &pr->causal, err);
        else if (!strcmp(k, "retain"))
            rc = get_bool(v, "parameters.retain", &pr->retain, err);
        else if (!strcmp(k, "binary_data_output")) {
            rc = get_bool(v, "parameters.binary_data_output",
                          &pr->binary_data_output, err);
            *bin_given = 1;
        } else if (!strcmp(k, "sequence_start")) {
            rc = get_bool(v, "parameters.sequence_start", &pr->seq_start, err);
        } else if (!strcmp(k, "sequence_end")) {
            rc = get_bool(v, "parameters.sequence_end", &pr->seq_end, err);
        } else if (!strcmp(k, "sequence_id")) {
            rc = get_seq_id(v, pr->seq_id, err);
        } else if (!strcmp(k, "sequence_position")) {
            rc = get_seq_pos(v, pr, err);
        } else if (!strcmp(k, "scale")) {
            rc = get_scale(v, pr, err);
        } else if (!strcmp(k, "tokens")) {
            if (pr->tokens || pr->n_tokens)
                return oip__fail(err, ATTN_EINVAL,
                                 "parameters.tokens: given twice");
            rc = get_tokens(req, v, max_tokens, bytes, err);
        } else {
            rc = oip__param_check("parameters", k, oip__request_params,
                                  strict, err);
        }
    }
    return rc;
}

static int decode_outputs(oip_request *req, const Req *m, int max_outputs,
                          int strict, char *err)
{
    int rc;
    size_t i, j, n = m->n_outputs;
    if (n > (size_t)max_outputs)
        return oip__fail(err, ATTN_EOVERFLOW, "outputs: %zu entries, at most %d",
                         n, max_outputs);
    if (n == 0)
        return 0;
    req->outputs = calloc(n, sizeof *req->outputs);
    if (!req->outputs)
        return oip__fail(err, ATTN_ENOMEM, "outputs: out of memory");
    for (i = 0; i < n; i++) {
        const Inference__ModelInferRequest__InferRequestedOutputTensor *o =
            m->outputs[i];
        oip_output_req *r = &req->outputs[i];
        size_t len = strlen(o->name);
        if (len == 0 || len >= OIP_MAX_NAME)
            return oip__fail(err, ATTN_EINVAL, "outputs[%zu].name: must be 1 "
                             "to %d bytes", i, OIP_MAX_NAME - 1);
        memcpy(r->name, o->name, len + 1);
        for (j = 0; j < i; j++)
            if (!strcmp(req->outputs[j].name, r->name))
                return oip__fail(err, ATTN_EINVAL,
                                 "outputs[%zu].name: duplicate output \"%s\"",
                                 i, r->name);
        r->binary = -1;
        for (j = 0; j < o->n_parameters; j++) {
            const Inference__InferParameter *v = o->parameters[j]->value;
            if (!strcmp(o->parameters[j]->key, "classification") &&
                !(v && v->parameter_choice_case ==
                           INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
                  v->int64_param == 0)) /* as decode.c's */
                return oip__fail(err, ATTN_EINVAL, OIP_NO_CLASSIFICATION, i);
            if ((rc = oip__tensor_param(1, i, o->parameters[j]->key, strict,
                                        err)))
                return rc;
            if (!strcmp(o->parameters[j]->key, "binary_data")) {
                char field[64];
                snprintf(field, sizeof field,
                         "outputs[%zu].parameters.binary_data", i);
                if ((rc = get_bool(o->parameters[j]->value, field, &r->binary,
                                   err)))
                    return rc;
            }
        }
        req->n_outputs = (int)i + 1;
    }
    return 0;
}

/* typed: the contents field a datatype's values must use, its length, and
 * whether any other field holds values. */
static size_t typed_count(const Contents *c, oip_dtype t, int *other)
{
    size_t n[4] = {c->n_fp32_contents, c->n_int_contents,
                   c->n_int64_contents, c->n_bool_contents};
    size_t mine = t == OIP_FP32 ? 0 : t == OIP_INT32 ? 1 : t == OIP_INT64 ? 2 : 3;
    size_t i, total = c->n_uint_contents + c->n_uint64_contents +
                      c->n_fp64_contents + c->n_bytes_contents;
    for (i = 0; i < 4; i++)
        if (i != mine)
            total += n[i];
    *other = total != 0;
    return n[mine];
}

static const char *typed_field(oip_dtype t)
{
    switch (t) {
    case OIP_FP32: return "fp32_contents";
    case OIP_INT32: return "int_contents";
    case OIP_INT64: return "int64_contents";
    default: return "bool_contents";
    }
}

/* input_meta: name, datatype, shape and the size checks of one input. */
static int input_meta(const InTensor *in, int i, const oip_limits *L,
                      oip_tensor *t, char *err)
{
    size_t len = strlen(in->name), count = 1, d;
    if (len == 0 || len >= OIP_MAX_NAME)
        return oip__fail(err, ATTN_EINVAL, "inputs[%d].name: must be 1 to %d "
                         "bytes", i, OIP_MAX_NAME - 1);
    memcpy(t->name, in->name, len + 1);
    if (!in->datatype[0])
        return oip__fail(err, ATTN_EINVAL, "inputs[%d].datatype: missing", i);
    t->wire_dtype = oip_dtype_parse(in->datatype);
    if (t->wire_dtype == OIP_INVALID || t->wire_dtype == OIP_BYTES)
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].datatype: \"%.32s\" is not supported "
                         "(BOOL, INT32, INT64, FP16, BF16 or FP32)", i,
                         in->datatype);
    if (in->n_shape == 0 || in->n_shape > OIP_MAX_RANK)
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].shape: rank %zu, must be 1 to %d", i,
                         in->n_shape, OIP_MAX_RANK);
    t->rank = (int)in->n_shape;
    for (d = 0; d < in->n_shape; d++) {
        int64_t dim = in->shape[d];
        if (dim < 1)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].shape: dimension %zu is %lld, must "
                             "be >= 1", i, d, (long long)dim);
        t->shape[d] = dim;
        if ((uint64_t)dim > SIZE_MAX ||
            __builtin_mul_overflow(count, (size_t)dim, &count))
            return oip__fail(err, ATTN_EOVERFLOW,
                             "inputs[%d].shape: element count overflows", i);
    }
    if (count > L->max_elements)
        return oip__fail(err, ATTN_EFULL,
                         "inputs[%d].shape: %zu elements, at most %zu", i,
                         count, L->max_elements);
    t->count = count;
    return 0;
}

/* input_data: t->data from raw bytes or typed contents. */
static int input_data(const Req *m, const InTensor *in, int i, int raw,
                      oip_tensor *t, char *err)
{
    const char *dname = oip_dtype_name(t->wire_dtype);
    size_t j, n = t->count;
    if (raw) {
        const ProtobufCBinaryData *b = &m->raw_input_contents[i];
        size_t want = n * oip_dtype_wire_size(t->wire_dtype);
        if (b->len != want)
            return oip__fail(err, ATTN_EINVAL,
                             "raw_input_contents[%d]: %zu byte%s, expected %zu "
                             "(%zu %s value%s)", i, b->len,
                             b->len == 1 ? "" : "s", want, n, dname,
                             n == 1 ? "" : "s");
        return oip__decode_binary(t, b->data, i, err);
    }
    if (t->wire_dtype == OIP_FP16 || t->wire_dtype == OIP_BF16)
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].contents: %s values must be sent as "
                         "raw_input_contents", i, dname);
    if (!in->contents)
        return oip__fail(err, ATTN_EINVAL, "inputs[%d]: missing contents (or "
                         "raw_input_contents)", i);
    {
        int other;
        size_t got = typed_count(in->contents, t->wire_dtype, &other);
        if (other)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].contents: %s values go in %s only", i,
                             dname, typed_field(t->wire_dtype));
        if (got != n)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].contents: expected %zu value%s, got "
                             "%zu", i, n, n == 1 ? "" : "s", got);
    }
    switch (t->wire_dtype) {
    case OIP_FP32:
        for (j = 0; j < n; j++)
            if (!isfinite(in->contents->fp32_contents[j]))
                return oip__fail(err, ATTN_EINVAL,
                                 "inputs[%d].contents: element %zu is not "
                                 "finite (NaN or Inf)", i, j);
        memcpy(t->data, in->contents->fp32_contents, n * sizeof(float));
        break;
    case OIP_INT32:
        memcpy(t->data, in->contents->int_contents, n * sizeof(int32_t));
        break;
    case OIP_INT64:
        memcpy(t->data, in->contents->int64_contents, n * sizeof(int64_t));
        break;
    default: /* BOOL */
        for (j = 0; j < n; j++)
            ((uint8_t *)t->data)[j] = in->contents->bool_contents[j] != 0;
        break;
    }
    return 0;
}

int oip_pb_decode(oip_request *req, const char *body, size_t len,
                  size_t header_len, const oip_limits *lim, char *err)
{
    oip_limits L;
    budget bd = {0, 0, 0, 0};
    ProtobufCAllocator al = {b_alloc, b_free, &bd};
    Req *m = NULL;
    size_t i, j, bytes = 0, tensor_bytes = 0, tree;
    int rc, raw, bin_given = 0;
    (void)header_len;

    memset(req, 0, sizeof *req);
    oip__resolve_limits(&L, lim);
    bd.cap = L.memory_budget;
    if (!body && len)
        return oip__fail(err, ATTN_EINVAL, "request body: NULL");
    if ((rc = oip_pb_check_strings(&inference__model_infer_request__descriptor,
                                   body, len, err)))
        return rc;
    m = inference__model_infer_request__unpack(&al, len, (const uint8_t *)body);
    if (!m && bd.nomem)
        return oip__fail(err, ATTN_ENOMEM, "request: out of memory");
    if (!m)
        return bd.over ? oip__fail(err, ATTN_EFULL,
                                   "request: parsing the message takes more "
                                   "than the memory budget of %zu bytes",
                                   L.memory_budget)
                       : oip__fail(err, ATTN_EINVAL, "request: not a valid "
                                   "ModelInferRequest (protobuf wire format)");
    tree = bd.used; /* the parsed message: freed at the end, but held
                       while the tensors are made, as REST's JSON tree is */

    /* id, parameters, outputs */
    if (m->id[0]) {
        size_t n = strlen(m->id);
        if (n >= OIP_MAX_ID) {
            rc = oip__fail(err, ATTN_EINVAL, "id: longer than %d bytes",
                           OIP_MAX_ID - 1);
            goto fail;
        }
        if (!oip__utf8_valid(m->id, n)) { /* it is echoed in the answer */
            rc = oip__fail(err, ATTN_EINVAL, "id: not valid UTF-8 (a "
                           "protobuf string must be)");
            goto fail;
        }
        if (!(req->id = strdup(m->id))) {
            rc = oip__fail(err, ATTN_ENOMEM, "id: out of memory");
            goto fail;
        }
    }
    if ((rc = decode_params(req, m, L.max_tokens, L.strict_params, &bytes,
                            &bin_given, err)) ||
        (rc = decode_outputs(req, m, L.max_outputs, L.strict_params, err)))
        goto fail;

    /* every input's metadata before any tensor is allocated */
    if (m->n_inputs == 0) {
        rc = oip__fail(err, ATTN_EINVAL, "inputs: empty");
        goto fail;
    }
    if (m->n_inputs > (size_t)L.max_inputs) {
        rc = oip__fail(err, ATTN_EOVERFLOW, "inputs: more than %d entries",
                       L.max_inputs);
        goto fail;
    }
    /* before the count of raw_input_contents, which a tensor in a
     * shared-memory region has none of */
    for (i = 0; i < m->n_inputs; i++)
        for (j = 0; j < m->inputs[i]->n_parameters; j++) {
            rc = oip__tensor_param(0, i, m->inputs[i]->parameters[j]->key,
                                   L.strict_params, err);
            if (rc)
                goto fail;
        }
    raw = m->n_raw_input_contents != 0;
    if (raw && m->n_raw_input_contents != m->n_inputs) {
        rc = oip__fail(err, ATTN_EINVAL, "raw_input_contents: %zu entr%s for "
                       "%zu input%s (one per input, in order)",
                       m->n_raw_input_contents,
                       m->n_raw_input_contents == 1 ? "y" : "ies", m->n_inputs,
                       m->n_inputs == 1 ? "" : "s");
        goto fail;
    }
    if (!(req->inputs = calloc(m->n_inputs, sizeof *req->inputs))) {
        rc = oip__fail(err, ATTN_ENOMEM, "inputs: out of memory");
        goto fail;
    }
    for (i = 0; i < m->n_inputs; i++) {
        oip_tensor *t = &req->inputs[i];
        size_t nb;
        if ((rc = input_meta(m->inputs[i], (int)i, &L, t, err)))
            goto fail;
        if (raw && m->inputs[i]->contents) {
            rc = oip__fail(err, ATTN_EINVAL, "inputs[%zu]: both contents and "
                           "raw_input_contents given", i);
            goto fail;
        }
        for (j = 0; j < i; j++)
            if (!strcmp(req->inputs[j].name, t->name)) {
                rc = oip__fail(err, ATTN_EINVAL,
                               "inputs[%zu].name: duplicate input \"%s\"", i,
                               t->name);
                goto fail;
            }
        if (__builtin_mul_overflow(t->count, oip_dtype_host_size(t->wire_dtype),
                                   &nb) ||
            __builtin_add_overflow(tensor_bytes, nb, &tensor_bytes)) {
            rc = oip__fail(err, ATTN_EOVERFLOW,
                           "inputs[%zu].shape: size overflows", i);
            goto fail;
        }
    }
    if (tensor_bytes > L.memory_budget ||
        bytes + tree > L.memory_budget - tensor_bytes) {
        rc = oip__fail(err, ATTN_EFULL,
                       "request: decoded tensors need %zu bytes, over the "
                       "memory budget of %zu bytes", tensor_bytes,
                       L.memory_budget);
        goto fail;
    }

    /* allocate and convert */
    req->n_inputs = (int)m->n_inputs;
    for (i = 0; i < m->n_inputs; i++) {
        oip_tensor *t = &req->inputs[i];
        t->data = malloc(t->count * oip_dtype_host_size(t->wire_dtype));
        if (!t->data) {
            rc = oip__fail(err, ATTN_ENOMEM, "inputs[%zu]: out of memory", i);
            goto fail;
        }
        if ((rc = input_data(m, m->inputs[i], (int)i, raw, t, err)))
            goto fail;
    }
    /* answer in the form the request came in unless it asked */
    if (!bin_given)
        req->params.binary_data_output = raw;
    req->bytes = tensor_bytes + bytes;
    inference__model_infer_request__free_unpacked(m, &al);
    return 0;

fail:
    inference__model_infer_request__free_unpacked(m, &al);
    oip_request_free(req);
    return rc;
}
