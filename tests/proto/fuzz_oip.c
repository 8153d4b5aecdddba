/*
 * fuzz_oip.c - libFuzzer harness for proto/ (make fuzz; clang with
 * -fsanitize=fuzzer,address,undefined).
 *
 * Input: a request body. When it starts with 'B', the next two bytes give
 * Inference-Header-Content-Length (mod the rest's size + 1) and the rest is
 * the body with a binary part; otherwise the whole input is a JSON body.
 * Built with -DFUZZ_FRAMING (fuzz_framing, make fuzz-long) every input is
 * the two length bytes and a body with a binary part.
 * Properties checked beyond "no crash, no leak, no UB":
 *   - a failed decode leaves the request empty and gives a message whose
 *     error body is valid JSON;
 *   - every decoded float prints and parses back to the same bits, and the
 *     decoded tensors re-encode (JSON and binary) without error;
 *   - short inputs that lex as a JSON number parse exactly as strtof does,
 *     and an input that is an array of numbers reads as strtof reads each;
 *   - the skeleton read in jtree.c's one pass and through jansson gives the
 *     same answer (status, message, request), and a text the one pass
 *     calls a compact object is one jansson dumps compact as the same
 *     bytes;
 *   - oip_peek_sequence_id gives only ids the decoder would take.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "proto/oip_internal.h"
#include "core/json_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_number(const uint8_t *data, size_t size)
{
    char s[64];
    if (size == 0 || size >= sizeof s)
        return;
    memcpy(s, data, size);
    s[size] = 0;
    oip__num n;
    const char *end = oip__lex_number(s, s + size, &n);
    if (end != s + size)
        return;
    float a = oip__num_to_float(&n), b = strtof(s, NULL);
    if (memcmp(&a, &b, 4)) {
        fprintf(stderr, "parse mismatch on %s: %a vs strtof %a\n", s,
                (double)a, (double)b);
        abort();
    }
}

/* check_run: an input that is a JSON array of numbers (flat or nested,
 * as in "data") reads as strtof reads each of its numbers, eight at a time
 * or not (proto/numscan.c). */
static void check_run(const uint8_t *data, size_t size)
{
    enum { MAX = 8192 };
    static float got[MAX];
    static char s[65537];
    size_t count = 1;
    char err[OIP_ERRMAX];
    if (size == 0 || size >= sizeof s || data[0] != '[')
        return;
    memcpy(s, data, size);
    s[size] = 0;
    for (size_t i = 0; i < size; i++)
        count += s[i] == ',';
    if (count > MAX || oip__read_data(s, size, OIP_FP32, got, count, "data", err))
        return;
    const char *p = s;
    for (size_t i = 0; i < count; i++) {
        while (*p && *p != '-' && (*p < '0' || *p > '9'))
            p++;
        char *end;
        float want = strtof(p, &end);
        if (end == p || memcmp(&want, &got[i], 4)) {
            fprintf(stderr, "value %zu: %.*s read as %a, strtof %a\n", i,
                    (int)(end - p), p, (double)got[i], (double)want);
            abort();
        }
        p = end;
    }
}

/* check_compact: oip__json_compact_object against jansson */
static void check_compact(const uint8_t *data, size_t size)
{
    static char s[65537];
    if (size >= sizeof s || memchr(data, 0, size))
        return;
    memcpy(s, data, size);
    s[size] = 0;
    if (!oip__json_compact_object(s, size))
        return;
    json_error_t jerr;
    json_t *j = json_loadb(s, size, JSON_REJECT_DUPLICATES, &jerr);
    char *d = j && json_is_object(j) ? json_dumps(j, JSON_COMPACT) : NULL;
    if (!d || strcmp(d, s)) {
        fprintf(stderr, "compact object %s: jansson %s\n", s,
                d ? d : jerr.text);
        abort();
    }
    free(d);
    json_decref(j);
}

/* same_request: the two decodes of one body agree */
static void same_request(int rc, const char *err, const oip_request *a,
                         int rc2, const char *err2, const oip_request *b)
{
    int same = rc == rc2 && !strcmp(err, err2) && a->n_inputs == b->n_inputs &&
               a->n_outputs == b->n_outputs && !a->id == !b->id &&
               (!a->id || !strcmp(a->id, b->id)) &&
               a->params.n_tokens == b->params.n_tokens &&
               a->params.causal == b->params.causal &&
               a->params.has_seq_pos == b->params.has_seq_pos &&
               a->params.seq_pos == b->params.seq_pos &&
               !strcmp(a->params.seq_id, b->params.seq_id) && a->bytes == b->bytes;
    for (int i = 0; same && i < a->n_inputs; i++)
        same = !strcmp(a->inputs[i].name, b->inputs[i].name) &&
               a->inputs[i].count == b->inputs[i].count &&
               !memcmp(a->inputs[i].shape, b->inputs[i].shape, sizeof a->inputs[i].shape);
    for (int i = 0; same && i < a->params.n_tokens; i++)
        same = !strcmp(a->params.tokens[i], b->params.tokens[i]);
    for (int i = 0; same && i < a->n_outputs; i++)
        same = !strcmp(a->outputs[i].name, b->outputs[i].name) &&
               a->outputs[i].binary == b->outputs[i].binary;
    if (!same) {
        fprintf(stderr, "one pass: %d '%s'; jansson: %d '%s'\n", rc, err, rc2, err2);
        abort();
    }
}

static void check_request(const oip_request *r)
{
    oip_output outs[16];
    int n = r->n_inputs < 16 ? r->n_inputs : 16;
    for (int i = 0; i < n; i++) {
        const oip_tensor *t = &r->inputs[i];
        oip_dtype host = t->wire_dtype;
        if (host == OIP_FP16 || host == OIP_BF16)
            host = OIP_FP32;
        if (host == OIP_FP32) {
            const float *f = t->data;
            for (size_t j = 0; j < t->count; j++) {
                char buf[OIP__FLOAT_CHARS];
                size_t len = oip__fmt_float(f[j], buf);
                oip__num num;
                if (oip__lex_number(buf, buf + len, &num) != buf + len)
                    abort();
                float g = oip__num_to_float(&num);
                if (memcmp(&g, &f[j], 4))
                    abort();
            }
        }
        outs[i] = (oip_output){.name = t->name, .dtype = host,
                               .rank = t->rank, .data = t->data,
                               .binary = i & 1};
        memcpy(outs[i].shape, t->shape, sizeof t->shape);
    }
    char *body;
    size_t len, hl;
    char err[OIP_ERRMAX];
    if (oip_encode("fuzz", r->id, outs, n, NULL, &body, &len, &hl, err)) {
        fprintf(stderr, "re-encode failed: %s\n", err);
        abort();
    }
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
    size_t hl = 0;
#ifdef FUZZ_FRAMING
    /* the binary framing target (make fuzz-long): every input is two bytes
     * of Inference-Header-Content-Length, then the body */
    (void)check_number; /* the JSON target's */
    (void)check_run;
    (void)check_compact;
    if (size < 2)
        return 0;
    hl = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 2 + 1);
    data += 2;
    size -= 2;
#else
    check_number(data, size);
    check_run(data, size);
    check_compact(data, size);
    if (size >= 3 && data[0] == 'B') {
        hl = ((size_t)data[1] | (size_t)data[2] << 8) % (size - 3 + 1);
        data += 3;
        size -= 3;
    }
#endif
    oip_request r;
    char err[OIP_ERRMAX] = "", seq[OIP_MAX_SEQ_ID];
    /* the peek of a refused request's id takes only ids the decoder would */
    if (oip_peek_sequence_id((const char *)data, size, hl, seq) &&
        !oip_sequence_id_valid(seq, strlen(seq)))
        abort();
    int rc = oip_decode(&r, (const char *)data, size, hl, &lim, err);
    {
        oip_request r2;
        char err2[OIP_ERRMAX] = "";
        oip__jtree_slow = 1;
        int rc2 = oip_decode(&r2, (const char *)data, size, hl, &lim, err2);
        oip__jtree_slow = 0;
        same_request(rc, err, &r, rc2, err2, &r2);
        oip_request_free(&r2);
    }
    if (rc) {
        if (r.inputs || r.n_inputs || r.id || !err[0])
            abort();
        char *e = oip_error_body(err);
        json_error_t jerr;
        json_t *j = e ? json_loads(e, 0, &jerr) : NULL;
        if (!j) {
            fprintf(stderr, "bad error body: %s\n", e ? e : "(null)");
            abort();
        }
        json_decref(j);
        free(e);
        return 0;
    }
    check_request(&r);
    oip_request_free(&r);
    return 0;
}
