/*
 * fuzz_pb.c - libFuzzer harness for the gRPC message decoder, proto/pb.c
 * (make fuzz-pb; clang with -fsanitize=fuzzer,address,undefined).
 *
 * Input: a ModelInferRequest's bytes (the seed corpus in
 * tests/proto/fuzz_pb_corpus holds valid ones, raw and typed). Properties
 * checked beyond "no crash, no leak, no UB":
 *   - oip_pb_peek_model agrees with the full parse on model_name whenever
 *     both accept the message, and oip_pb_peek_echo with the decode on
 *     the id whenever the decode accepts it, and oip_pb_peek_seq_id on
 *     the sequence id (none included);
 *   - a failed decode leaves the request empty and names its cause;
 *   - a decoded request's tensors re-encode as a ModelInferResponse (raw
 *     and typed) that protobuf-c parses back with the same shapes and,
 *     raw, the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "proto/kserve.pb-c.h"
#include "proto/oip_pb.h"
#include "core/json_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_encode(const oip_request *r, int binary)
{
    oip_output outs[8];
    Inference__ModelInferResponse *m;
    char *body, err[OIP_ERRMAX];
    size_t len, hl;
    int i, n = r->n_inputs < 8 ? r->n_inputs : 8;
    for (i = 0; i < n; i++) {
        const oip_tensor *t = &r->inputs[i];
        oip_dtype host = t->wire_dtype == OIP_FP16 || t->wire_dtype == OIP_BF16
                             ? OIP_FP32 : t->wire_dtype;
        outs[i] = (oip_output){.name = t->name, .dtype = host, .rank = t->rank,
                               .data = t->data, .binary = binary};
        memcpy(outs[i].shape, t->shape, sizeof t->shape);
    }
    if (oip_pb_encode("fuzz", r->id, outs, n, "{\"map_id\":\"m1\"}", &body,
                      &len, &hl, err)) {
        fprintf(stderr, "re-encode failed: %s\n", err);
        abort();
    }
    m = inference__model_infer_response__unpack(NULL, len - hl,
                                                (const uint8_t *)body + hl);
    if (!m || (int)m->n_outputs != n || strcmp(m->model_name, "fuzz") != 0 ||
        (binary && (int)m->n_raw_output_contents != n))
        abort();
    for (i = 0; i < n; i++) {
        if ((int)m->outputs[i]->n_shape != r->inputs[i].rank ||
            memcmp(m->outputs[i]->shape, r->inputs[i].shape,
                   sizeof(int64_t) * (size_t)r->inputs[i].rank) != 0)
            abort();
        if (binary && (m->raw_output_contents[i].len !=
                           r->inputs[i].count * oip_dtype_host_size(outs[i].dtype) ||
                       memcmp(m->raw_output_contents[i].data, r->inputs[i].data,
                              m->raw_output_contents[i].len) != 0))
            abort();
    }
    inference__model_infer_response__free_unpacked(m, NULL);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int json_ready;
    if (!json_ready) { /* jansson through core/json_mem.c, as attnd runs it */
        json_ready = 1;
        attn_json_init();
    }
    static const oip_limits lim = {.max_elements = 1 << 16,
                                   .memory_budget = 1 << 21,
                                   .max_inputs = 8, .max_outputs = 8,
                                   .max_tokens = 64};
    oip_request r;
    char err[OIP_ERRMAX] = "", name[160], version[160];
    int peek = oip_pb_peek_model((const char *)data, size, name, version,
                                 sizeof name, err);
    int rc = oip_pb_decode(&r, (const char *)data, size, 0, &lim, err);
    char seq[OIP_MAX_SEQ_ID];
    int has_seq = oip_pb_peek_seq_id((const char *)data, size, 0, seq);
    if (has_seq != (seq[0] != 0) || (!rc && strcmp(seq, r.params.seq_id)))
        abort();
    if (rc) {
        if (r.inputs || r.n_inputs || r.id || !err[0])
            abort();
        oip_request_free(&r);
        return 0;
    }
    {
        oip_pb_echo e;
        oip_pb_peek_echo((const char *)data, size, &e);
        if (e.n[2] != (r.id ? strlen(r.id) : 0) ||
            (e.n[2] && memcmp(e.f[2], r.id, e.n[2]) != 0))
            abort();
    }
    if (peek == 0) {
        Inference__ModelInferRequest *m =
            inference__model_infer_request__unpack(NULL, size, data);
        if (!m || strcmp(m->model_name, name) != 0)
            abort();
        inference__model_infer_request__free_unpacked(m, NULL);
    }
    check_encode(&r, 1);
    check_encode(&r, 0);
    oip_request_free(&r);
    return 0;
}
