/*
 * pb_encode.c - oip_output to a ModelInferResponse (gRPC, protobuf-c): the
 * answer half of oip_pb.h (pb.c decodes the request).
 */
#include "proto/oip_pb.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "oip_internal.h"
#include "core/json_mem.h"
#include "proto/kserve.pb-c.h"

typedef Inference__InferParameter Param;
typedef Inference__InferTensorContents Contents;
typedef Inference__ModelInferResponse Resp;
typedef Inference__ModelInferResponse__InferOutputTensor OutTensor;
typedef Inference__ModelInferResponse__ParametersEntry RespParam;

/* resp_params: extra_params (a JSON object of scalars) as response
 * parameters, allocated in one block *blk. */
static int resp_params(Resp *r, const char *extra, void **blk, char *err)
{
    json_t *o;
    json_error_t je;
    const char *k;
    json_t *v;
    size_t n, i = 0, strbytes = 0;
    int nomem;
    RespParam **ptrs, *ents;
    Param *vals;
    char *sp;
    if (!extra)
        return 0;
    o = attn_json_parse(extra, strlen(extra), JSON_REJECT_DUPLICATES, &je, &nomem);
    if (nomem)
        return oip__fail(err, ATTN_ENOMEM, "oip_pb_encode: out of memory");
    if (!json_is_object(o)) {
        json_decref(o);
        return oip__fail(err, ATTN_EINVAL,
                         "oip_pb_encode: extra_params is not a JSON object");
    }
    n = json_object_size(o);
    json_object_foreach(o, k, v) strbytes += strlen(k) + 1 +
        (json_is_string(v) ? json_string_length(v) + 1 : 0);
    *blk = malloc(n * (sizeof *ptrs + sizeof *ents + sizeof *vals) + strbytes + 1);
    if (!*blk) {
        json_decref(o);
        return oip__fail(err, ATTN_ENOMEM, "oip_pb_encode: out of memory");
    }
    ents = *blk;
    vals = (Param *)(ents + n);
    ptrs = (RespParam **)(vals + n);
    sp = (char *)(ptrs + n);
    json_object_foreach(o, k, v) {
        RespParam e = INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
        Param pv = INFERENCE__INFER_PARAMETER__INIT;
        if (json_is_string(v)) {
            pv.parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
            pv.string_param = sp;
            memcpy(sp, json_string_value(v), json_string_length(v) + 1);
            sp += json_string_length(v) + 1;
        } else if (json_is_boolean(v)) {
            pv.parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
            pv.bool_param = json_is_true(v);
        } else if (json_is_integer(v)) {
            pv.parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
            pv.int64_param = json_integer_value(v);
        } else if (json_is_real(v)) {
            pv.parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
            pv.double_param = json_real_value(v);
        } else {
            continue; /* objects, arrays, null: no InferParameter kind */
        }
        e.key = sp;
        memcpy(sp, k, strlen(k) + 1);
        sp += strlen(k) + 1;
        vals[i] = pv;
        ents[i] = e;
        ents[i].value = &vals[i];
        ptrs[i] = &ents[i];
        i++;
    }
    json_decref(o);
    r->n_parameters = i;
    r->parameters = ptrs;
    return 0;
}

int oip_pb_encode(const char *model_name, const char *id,
                  const oip_output *outs, int n_outs, const char *extra_params,
                  char **body, size_t *len, size_t *header_len, char *err)
{
    Resp r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    OutTensor *ot = NULL, **otp = NULL;
    Contents *ct = NULL;
    ProtobufCBinaryData *raw = NULL;
    protobuf_c_boolean **bools = NULL;
    void *pblk = NULL;
    size_t size;
    int i, d, any_binary = 0, rc;

    *body = NULL;
    *len = *header_len = 0;
    if (!model_name || n_outs < 0 || (n_outs && !outs))
        return oip__fail(err, ATTN_EINVAL, "oip_pb_encode: bad arguments");
    for (i = 0; i < n_outs; i++)
        any_binary |= outs[i].binary;
    r.model_name = (char *)model_name;
    r.model_version = "1";
    r.id = id ? (char *)id : "";
    if ((rc = resp_params(&r, extra_params, &pblk, err)))
        return rc;
    if (n_outs) {
        ot = calloc((size_t)n_outs, sizeof *ot);
        otp = calloc((size_t)n_outs, sizeof *otp);
        ct = calloc((size_t)n_outs, sizeof *ct);
        raw = calloc((size_t)n_outs, sizeof *raw);
        bools = calloc((size_t)n_outs, sizeof *bools);
        if (!ot || !otp || !ct || !raw || !bools) {
            rc = oip__fail(err, ATTN_ENOMEM, "response: out of memory");
            goto done;
        }
    }
    for (i = 0; i < n_outs; i++) {
        const oip_output *o = &outs[i];
        OutTensor t = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
        Contents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
        size_t count = 1, k;
        if (!o->name || o->rank < 0 || o->rank > OIP_MAX_RANK ||
            !oip_dtype_wire_size(o->dtype) || o->dtype == OIP_FP16 ||
            o->dtype == OIP_BF16) {
            rc = oip__fail(err, ATTN_EINVAL, "output %d: bad name, datatype "
                           "or rank", i);
            goto done;
        }
        for (d = 0; d < o->rank; d++)
            if (o->shape[d] < 0 ||
                __builtin_mul_overflow(count, (size_t)o->shape[d], &count)) {
                rc = oip__fail(err, ATTN_EOVERFLOW,
                               "output %s: bad or overflowing shape", o->name);
                goto done;
            }
        if (count && !o->data) {
            rc = oip__fail(err, ATTN_EINVAL, "output %s: NULL data", o->name);
            goto done;
        }
        t.name = (char *)o->name;
        t.datatype = (char *)oip_dtype_name(o->dtype);
        t.n_shape = (size_t)o->rank;
        t.shape = (int64_t *)o->shape;
        if (any_binary) {
            raw[i].data = (uint8_t *)o->data;
            raw[i].len = count * oip_dtype_wire_size(o->dtype);
        } else {
            switch (o->dtype) {
            case OIP_FP32:
                c.n_fp32_contents = count;
                c.fp32_contents = (float *)o->data;
                break;
            case OIP_INT32:
                c.n_int_contents = count;
                c.int_contents = (int32_t *)o->data;
                break;
            case OIP_INT64:
                c.n_int64_contents = count;
                c.int64_contents = (int64_t *)o->data;
                break;
            default: /* BOOL: protobuf-c's bool is an int */
                bools[i] = malloc((count ? count : 1) * sizeof **bools);
                if (!bools[i]) {
                    rc = oip__fail(err, ATTN_ENOMEM, "response: out of memory");
                    goto done;
                }
                for (k = 0; k < count; k++)
                    bools[i][k] = ((const uint8_t *)o->data)[k] != 0;
                c.n_bool_contents = count;
                c.bool_contents = bools[i];
                break;
            }
            ct[i] = c;
            t.contents = &ct[i];
        }
        ot[i] = t;
        otp[i] = &ot[i];
    }
    r.n_outputs = (size_t)n_outs;
    r.outputs = otp;
    if (any_binary) {
        r.n_raw_output_contents = (size_t)n_outs;
        r.raw_output_contents = raw;
    }
    size = inference__model_infer_response__get_packed_size(&r);
    if (size > SIZE_MAX - OIP_PB_HEADROOM ||
        !(*body = malloc(size + OIP_PB_HEADROOM))) {
        rc = oip__fail(err, ATTN_ENOMEM, "response: out of memory (%zu bytes)",
                       size);
        goto done;
    }
    inference__model_infer_response__pack(&r, (uint8_t *)*body + OIP_PB_HEADROOM);
    *len = size + OIP_PB_HEADROOM;
    *header_len = OIP_PB_HEADROOM;
    rc = 0;
done:
    if (bools)
        for (i = 0; i < n_outs; i++)
            free(bools[i]);
    free(bools);
    free(ot);
    free(otp);
    free(ct);
    free(raw);
    free(pblk);
    return rc;
}

size_t oip_pb_put_varint(unsigned char *out, uint64_t v)
{
    size_t n = 0;
    for (; v > 0x7f; v >>= 7)
        out[n++] = (unsigned char)(v | 0x80);
    out[n++] = (unsigned char)v;
    return n;
}

/* varint_len: the bytes of v as a protobuf varint. */
static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    for (; v > 0x7f; v >>= 7)
        n++;
    return n;
}

size_t oip_pb_echo_size(const oip_pb_echo *e)
{
    size_t at = 0, i;
    for (i = 0; i < 3; i++)
        if (e->n[i])
            at += 1 + varint_len(e->n[i]) + e->n[i];
    return at;
}

size_t oip_pb_echo_encode(const oip_pb_echo *e, char *out)
{
    size_t at = 0, i;
    for (i = 0; i < 3; i++) {
        if (!e->n[i])
            continue;
        out[at++] = (char)((i + 1) << 3 | 2); /* field i + 1, length-delimited */
        at += oip_pb_put_varint((unsigned char *)out + at, e->n[i]);
        memcpy(out + at, e->f[i], e->n[i]);
        at += e->n[i];
    }
    return at;
}
