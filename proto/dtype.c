/*
 * dtype.c - the datatypes' names and sizes, and what every oip_request
 * has: its free and its input lookup (moved whole from decode.c, which
 * the JSON decoder keeps; pb.c, encode.c and the server use these too).
 */
#include <stdlib.h>
#include <string.h>

#include "oip_internal.h"

static const struct {
    const char *name;
    oip_dtype t;
    size_t wire, host;
} dtypes[] = {
    {"BOOL", OIP_BOOL, 1, 1},   {"INT32", OIP_INT32, 4, 4},
    {"INT64", OIP_INT64, 8, 8}, {"FP16", OIP_FP16, 2, 4},
    {"BF16", OIP_BF16, 2, 4},   {"FP32", OIP_FP32, 4, 4},
    {"BYTES", OIP_BYTES, 0, 0},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

const char *oip_dtype_name(oip_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].t == t)
            return dtypes[i].name;
    return "INVALID";
}

oip_dtype oip_dtype_parse(const char *name)
{
    for (size_t i = 0; name && i < N_DTYPES; i++)
        if (!strcmp(dtypes[i].name, name))
            return dtypes[i].t;
    return OIP_INVALID;
}

size_t oip_dtype_wire_size(oip_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].t == t)
            return dtypes[i].wire;
    return 0;
}

size_t oip_dtype_host_size(oip_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].t == t)
            return dtypes[i].host;
    return 0;
}

void oip_request_free(oip_request *req)
{
    if (!req)
        return;
    for (int i = 0; i < req->n_inputs; i++)
        free(req->inputs[i].data);
    free(req->inputs);
    free(req->outputs);
    for (int i = 0; i < req->params.n_tokens; i++)
        free(req->params.tokens[i]);
    free(req->params.tokens);
    free(req->id);
    memset(req, 0, sizeof *req);
}

const oip_tensor *oip_find_input(const oip_request *req, const char *name)
{
    for (int i = 0; i < req->n_inputs; i++)
        if (!strcmp(req->inputs[i].name, name))
            return &req->inputs[i];
    return NULL;
}
