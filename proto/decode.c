/*
 * decode.c - an infer request body (JSON, or JSON header + binary tensors)
 * to an oip_request. See oip.h for the contract, jscan.c for why the
 * data arrays are cut out before the rest is parsed and jtree.c for how
 * that rest (the skeleton) is parsed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "oip_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "proto/ assumes a little-endian host (binary tensors are little-endian)"
#endif

/* Bytes a value of the skeleton costs once parsed, beyond its text (a
 * jansson json_t with its hashtable or array slot and malloc overhead;
 * jtree.c's node, slot and key take less): the estimate that bounds the
 * skeleton before it is parsed. */
#define JSON_VALUE_COST 96

/* Per-input facts gathered before anything big is allocated. */
typedef struct in_meta {
    oip__span span;  /* JSON data, or len 0 */
    int binary;      /* has parameters.binary_data_size */
    size_t bin_off;  /* offset of its bytes after the JSON header */
} in_meta;

static int is(const oip__jv *v, oip__jtype t) { return v && v->type == t; }

static int add_size(size_t *acc, size_t v)
{
    if (*acc > SIZE_MAX - v)
        return -1;
    *acc += v;
    return 0;
}

static int mul_size(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

/* get_name: o's "name", a string of 1 to OIP_MAX_NAME - 1 bytes, into dst
 * (OIP_MAX_NAME bytes); list[i] ("inputs[2]") starts the messages. */
static int get_name(const oip__jv *o, const char *list, size_t i, char *dst,
                    char *err)
{
    const oip__jv *name = oip__jget(o, "name");
    if (!name)
        return oip__fail(err, ATTN_EINVAL, "%s[%zu].name: missing", list, i);
    if (!is(name, OIP__JSTR))
        return oip__fail(err, ATTN_EINVAL, "%s[%zu].name: expected a string",
                         list, i);
    size_t len = name->len;
    if (len == 0 || len >= OIP_MAX_NAME)
        return oip__fail(err, ATTN_EINVAL, "%s[%zu].name: must be 1 to %d bytes",
                         list, i, OIP_MAX_NAME - 1);
    memcpy(dst, name->str, len + 1);
    return 0;
}

static int get_bool(const oip__jv *obj, const char *key, const char *field, int *out,
                    char *err)
{
    const oip__jv *v = oip__jget(obj, key);
    if (!v)
        return 0;
    if (!(is(v, OIP__JTRUE) || is(v, OIP__JFALSE)))
        return oip__fail(err, ATTN_EINVAL, "%s: expected true or false",
                         field);
    *out = is(v, OIP__JTRUE);
    return 0;
}

/* tensor_params: p, the parameters of outputs[i] (output) or inputs[i]:
 * its first key oip__tensor_param refuses. */
static int tensor_params(const oip__jv *p, int output, size_t i, int strict,
                         char *err)
{
    int rc = 0;
    for (size_t k = 0; is(p, OIP__JOBJ) && k < p->len && !rc; k++)
        rc = oip__tensor_param(output, i, p->kids[k]->key, strict, err);
    return rc;
}

/* misspelt: p's first key refused by oip__param_check (a misspelling of
 * one of known, or strict any other), as where's ("parameters",
 * "outputs[1].parameters"). */
static int misspelt(const oip__jv *p, const char *where,
                    const char *const *known, int strict, char *err)
{
    int rc = 0;
    for (size_t k = 0; is(p, OIP__JOBJ) && k < p->len && !rc; k++)
        rc = oip__param_check(where, p->kids[k]->key, known, strict, err);
    return rc;
}

int oip_sequence_id_dots(const char *s, size_t len)
{
    return s && (len == 1 || len == 2) && s[0] == '.' && s[len - 1] == '.';
}

int oip_sequence_id_valid(const char *s, size_t len)
{
    if (!s || len == 0 || len >= OIP_MAX_SEQ_ID || oip_sequence_id_dots(s, len))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '/' || s[i] == '"' ||
            s[i] == '\\')
            return 0;
    return 1;
}

#define SEQ_ID_RULE                                                            \
    "1 to %d bytes of printable ASCII other than space, '/', '\"' and '\\'"

int oip_sequence_id_error(const char *s, size_t len, const char *where,
                          int quote, char *err)
{
    if (oip_sequence_id_valid(s, len))
        return 0;
    if (oip_sequence_id_dots(s, len))
        return oip__fail(err, ATTN_EINVAL, "%s: '%.*s': " OIP_SEQ_ID_DOTS_WHY,
                         where, (int)len, s);
    if (quote)
        return oip__fail(err, ATTN_EINVAL, "%s: '%.*s' is not a sequence id ("
                         SEQ_ID_RULE ")", where, (int)(len > 200 ? 200 : len),
                         s ? s : "", OIP_MAX_SEQ_ID - 1);
    return oip__fail(err, ATTN_EINVAL, "%s: a string id is " SEQ_ID_RULE, where,
                     OIP_MAX_SEQ_ID - 1);
}

/* get_seq_id: parameters.sequence_id (see oip_params) into out; a number
 * is read from its text num (the skeleton holds 0 in its place). */
static int get_seq_id(const oip__jv *p, const char *num, size_t num_len, char *out,
                      char *err)
{
    const oip__jv *v = oip__jget(p, "sequence_id");
    const char *f = "parameters.sequence_id";
    if (!v)
        return 0;
    if (num_len) {
        uint64_t n = 0;
        size_t i;
        int ok = num[0] != '-' && num[0] != '0';
        for (i = 0; ok && i < num_len; i++)
            ok = num[i] >= '0' && num[i] <= '9' &&
                 !__builtin_mul_overflow(n, 10u, &n) &&
                 !__builtin_add_overflow(n, (uint64_t)(num[i] - '0'), &n);
        if (!ok || n < 1)
            return oip__fail(err, ATTN_EINVAL, "%s: %.*s; expected an integer "
                             "1 .. 18446744073709551615 or a non-empty string "
                             "(0 means no sequence in Triton)", f,
                             (int)(num_len > 40 ? 40 : num_len), num);
        char d[24], *q = d + sizeof d; /* "%llu", without printf */
        *--q = 0;
        do
            *--q = (char)('0' + n % 10);
        while (n /= 10);
        memcpy(out, q, (size_t)(d + sizeof d - q));
        return 0;
    }
    if (!is(v, OIP__JSTR))
        return oip__fail(err, ATTN_EINVAL, "%s: expected an unsigned "
                         "integer or a string", f);
    size_t len = v->len;
    const char *s = v->str;
    if (oip_sequence_id_error(s, len, f, 0, err))
        return ATTN_EINVAL;
    memcpy(out, s, len + 1);
    return 0;
}

/* get_seq_pos: parameters.sequence_position, an integer 0 .. INT32_MAX. */
static int get_seq_pos(const oip__jv *p, oip_params *pr, char *err)
{
    const oip__jv *v = oip__jget(p, "sequence_position");
    if (!v)
        return 0;
    if (!is(v, OIP__JINT) || v->num < 0 ||
        v->num > INT32_MAX)
        return oip__fail(err, ATTN_EINVAL, "parameters.sequence_position: "
                         "expected an integer 0 .. %d (the tokens the "
                         "sequence holds before this step)", INT32_MAX);
    pr->has_seq_pos = 1;
    pr->seq_pos = (int)v->num;
    return 0;
}

/* get_scale: parameters.scale, a JSON number (see oip_params). */
static int get_scale(const oip__jv *p, oip_params *pr, char *err)
{
    const oip__jv *v = oip__jget(p, "scale");
    if (!v)
        return 0;
    if ((!is(v, OIP__JINT) && !is(v, OIP__JREAL)) ||
        oip__scale_valid(is(v, OIP__JINT) ? (double)v->num : v->real,
                        &pr->scale))
        return oip__fail(err, ATTN_EINVAL, OIP_SCALE_MSG);
    return 0;
}

/* parameters: causal, retain, binary_data_output (booleans), Triton's
 * sequence_id / sequence_start / sequence_end, sequence_position, scale
 * and tokens (oip__tokens_jv: one list of strings or one per batch item,
 * at most max_tokens strings, each < OIP_MAX_TOKEN bytes, copied into
 * req); a key misspelling one of them (oip__misspelt) is refused,
 * others are ignored. *bytes grows by what the copies
 * take. */
static int decode_params(oip_request *req, const oip__jv *root, int max_tokens,
                         int strict,
                         const char *num, size_t num_len, size_t *bytes,
                         char *err)
{
    oip_params *pr = &req->params;
    int rc;
    pr->causal = -1;
    const oip__jv *p = oip__jget(root, "parameters");
    if (!p)
        return 0;
    if (!is(p, OIP__JOBJ))
        return oip__fail(err, ATTN_EINVAL, "parameters: expected an object");
    if ((rc = misspelt(p, "parameters", oip__request_params, strict, err)))
        return rc;
    if ((rc = get_bool(p, "causal", "parameters.causal", &pr->causal, err)) ||
        (rc = get_bool(p, "retain", "parameters.retain", &pr->retain, err)) ||
        (rc = get_bool(p, "binary_data_output",
                       "parameters.binary_data_output",
                       &pr->binary_data_output, err)) ||
        (rc = get_bool(p, "sequence_start", "parameters.sequence_start",
                       &pr->seq_start, err)) ||
        (rc = get_bool(p, "sequence_end", "parameters.sequence_end",
                       &pr->seq_end, err)) ||
        (rc = get_seq_id(p, num, num_len, pr->seq_id, err)) ||
        (rc = get_seq_pos(p, pr, err)) || (rc = get_scale(p, pr, err)))
        return rc;
    const oip__jv *t = oip__jget(p, "tokens");
    return t ? oip__tokens_jv(pr, t, max_tokens, bytes, err) : 0;
}

/* outputs: [{name, parameters.binary_data}], names unique; an absent or
 * empty list leaves req->outputs NULL (the model's default outputs). */
static int decode_outputs(oip_request *req, const oip__jv *root, int max_outputs,
                          int strict, char *err)
{
    const oip__jv *outs = oip__jget(root, "outputs");
    if (!outs)
        return 0;
    if (!is(outs, OIP__JARR))
        return oip__fail(err, ATTN_EINVAL, "outputs: expected an array");
    size_t n = outs->len;
    if (n > (size_t)max_outputs)
        return oip__fail(err, ATTN_EOVERFLOW,
                         "outputs: %zu entries, at most %d", n, max_outputs);
    if (n == 0)
        return 0; /* an empty list means the defaults, like no list */
    req->outputs = calloc(n, sizeof *req->outputs);
    if (!req->outputs)
        return oip__fail(err, ATTN_ENOMEM, "outputs: out of memory");
    for (size_t i = 0; i < n; i++) {
        const oip__jv *o = oip__jat(outs, i);
        oip_output_req *r = &req->outputs[i];
        if (!is(o, OIP__JOBJ))
            return oip__fail(err, ATTN_EINVAL,
                             "outputs[%zu]: expected an object", i);
        int rc = get_name(o, "outputs", i, r->name, err);
        if (rc)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(req->outputs[j].name, r->name))
                return oip__fail(err, ATTN_EINVAL,
                                 "outputs[%zu].name: duplicate output \"%s\"",
                                 i, r->name);
        r->binary = -1;
        const oip__jv *p = oip__jget(o, "parameters");
        if (p && !is(p, OIP__JOBJ))
            return oip__fail(err, ATTN_EINVAL,
                             "outputs[%zu].parameters: expected an object", i);
        if (p) {
            const oip__jv *b = oip__jget(p, "binary_data");
            if (b && !is(b, OIP__JTRUE) && !is(b, OIP__JFALSE))
                return oip__fail(err, ATTN_EINVAL, "outputs[%zu].parameters."
                                 "binary_data: expected true or false", i);
            if (b)
                r->binary = is(b, OIP__JTRUE);
            /* Triton's classification extension (tritonclient's
             * class_count) would answer the top classes as BYTES; served
             * as the whole FP32 tensor instead, a client would read it as
             * its classes. 0 asks for none. */
            const oip__jv *c = oip__jget(p, "classification");
            if (c && !(is(c, OIP__JINT) && c->num == 0))
                return oip__fail(err, ATTN_EINVAL, OIP_NO_CLASSIFICATION, i);
            if ((rc = tensor_params(p, 1, i, strict, err)))
                return rc;
        }
        req->n_outputs = (int)i + 1;
    }
    return 0;
}

/*
 * input_meta: name, datatype, shape, data/binary_data_size of inputs[i],
 * checked against the limits; fills t (without data) and m. *bin_total
 * accumulates binary sizes.
 */
static int input_meta(const oip__jv *in, int i, const oip__scan *sc, int has_binary,
                      const oip_limits *lim, oip_tensor *t, in_meta *m,
                      size_t *bin_total, char *err)
{
    if (!is(in, OIP__JOBJ))
        return oip__fail(err, ATTN_EINVAL, "inputs[%d]: expected an object",
                         i);
    /* name */
    int rc = get_name(in, "inputs", (size_t)i, t->name, err);
    if (rc)
        return rc;

    /* datatype */
    const oip__jv *dt = oip__jget(in, "datatype");
    if (!dt)
        return oip__fail(err, ATTN_EINVAL, "inputs[%d].datatype: missing", i);
    if (!is(dt, OIP__JSTR))
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].datatype: expected a string", i);
    t->wire_dtype = oip_dtype_parse(dt->str);
    if (t->wire_dtype == OIP_INVALID || t->wire_dtype == OIP_BYTES)
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].datatype: \"%.32s\" is not supported "
                         "(BOOL, INT32, INT64, FP16, BF16 or FP32)",
                         i, dt->str);

    /* shape */
    const oip__jv *shape = oip__jget(in, "shape");
    if (!shape)
        return oip__fail(err, ATTN_EINVAL, "inputs[%d].shape: missing", i);
    if (!is(shape, OIP__JARR))
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].shape: expected an array of integers", i);
    size_t rank = shape->len;
    if (rank == 0 || rank > OIP_MAX_RANK)
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].shape: rank %zu, must be 1 to %d", i,
                         rank, OIP_MAX_RANK);
    t->rank = (int)rank;
    size_t count = 1;
    for (size_t d = 0; d < rank; d++) {
        const oip__jv *v = oip__jat(shape, d);
        if (!is(v, OIP__JINT))
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].shape: dimension %zu is not an "
                             "integer", i, d);
        long long dim = v->num;
        if (dim < 1)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].shape: dimension %zu is %lld, must "
                             "be >= 1", i, d, (long long)dim);
        t->shape[d] = dim;
        if ((uint64_t)dim > SIZE_MAX || mul_size(count, (size_t)dim, &count))
            return oip__fail(err, ATTN_EOVERFLOW,
                             "inputs[%d].shape: element count overflows", i);
    }
    if (count > lim->max_elements)
        return oip__fail(err, ATTN_EFULL,
                         "inputs[%d].shape: %zu elements, at most %zu", i,
                         count, lim->max_elements);
    t->count = count;

    /* data or parameters.binary_data_size */
    m->span = sc->data[i];
    const oip__jv *p = oip__jget(in, "parameters");
    if (p && !is(p, OIP__JOBJ))
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].parameters: expected an object", i);
    if ((rc = tensor_params(p, 0, (size_t)i, lim->strict_params, err)))
        return rc;
    const oip__jv *bs = p ? oip__jget(p, "binary_data_size") : NULL;
    const char *dname = oip_dtype_name(t->wire_dtype);
    if (bs) {
        if (!is(bs, OIP__JINT) || bs->num < 0)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].parameters.binary_data_size: "
                             "expected a non-negative integer", i);
        if (m->span.len)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d]: both data and "
                             "parameters.binary_data_size given", i);
        if (!has_binary)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].parameters.binary_data_size: the "
                             "request has no binary part "
                             "(Inference-Header-Content-Length missing, "
                             "or 0: all JSON)", i);
        size_t want = 0;
        uint64_t got = (uint64_t)bs->num;
        if (mul_size(count, oip_dtype_wire_size(t->wire_dtype), &want) ||
            got != want)
            return oip__fail(err, ATTN_EINVAL,
                             "inputs[%d].parameters.binary_data_size: %llu "
                             "byte%s, expected %zu (%zu %s value%s)",
                             i, (unsigned long long)got, got == 1 ? "" : "s",
                             want, count, dname, count == 1 ? "" : "s");
        m->binary = 1;
        m->bin_off = *bin_total;
        if (add_size(bin_total, want))
            return oip__fail(err, ATTN_EOVERFLOW,
                             "inputs[%d].parameters.binary_data_size: total "
                             "overflows", i);
    } else if (!m->span.len) {
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d]: missing data (or "
                         "parameters.binary_data_size)", i);
    } else if (t->wire_dtype == OIP_FP16 || t->wire_dtype == OIP_BF16) {
        return oip__fail(err, ATTN_EINVAL,
                         "inputs[%d].data: %s values must be sent as binary "
                         "data (parameters.binary_data_size)", i, dname);
    }
    return 0;
}

/* oip__decode_binary: see oip_internal.h. */
int oip__decode_binary(const oip_tensor *t, const unsigned char *src, int i,
                       char *err)
{
    size_t n = t->count;
    switch (t->wire_dtype) {
    case OIP_FP32: {
        float *dst = t->data;
        memcpy(dst, src, n * 4);
        for (size_t j = 0; j < n; j++)
            if (!isfinite(dst[j]))
                goto not_finite_fp32;
        return 0;
    not_finite_fp32:
        for (size_t j = 0; j < n; j++)
            if (!isfinite(dst[j]))
                return oip__fail(err, ATTN_EINVAL,
                                 "inputs[%d]: binary element %zu is not "
                                 "finite (NaN or Inf)", i, j);
        return 0;
    }
    case OIP_FP16:
    case OIP_BF16: {
        float *dst = t->data;
        int half = t->wire_dtype == OIP_FP16;
        uint16_t expmask = half ? 0x7c00u : 0x7f80u;
        for (size_t j = 0; j < n; j++) {
            uint16_t h = (uint16_t)(src[2 * j] | (src[2 * j + 1] << 8));
            if ((h & expmask) == expmask)
                return oip__fail(err, ATTN_EINVAL,
                                 "inputs[%d]: binary element %zu is not "
                                 "finite (NaN or Inf)", i, j);
            dst[j] = half ? oip_fp16_to_float(h) : oip_bf16_to_float(h);
        }
        return 0;
    }
    case OIP_BOOL:
        for (size_t j = 0; j < n; j++)
            if (src[j] > 1)
                return oip__fail(err, ATTN_EINVAL,
                                 "inputs[%d]: binary BOOL element %zu is %u, "
                                 "must be 0 or 1", i, j, src[j]);
        memcpy(t->data, src, n);
        return 0;
    case OIP_INT32:
    case OIP_INT64:
        memcpy(t->data, src, n * oip_dtype_wire_size(t->wire_dtype));
        return 0;
    default:
        return oip__fail(err, ATTN_EINVAL, "inputs[%d]: bad datatype", i);
    }
}

/* Skeleton: the JSON text with every data span, and a numeric
 * parameters.sequence_id, replaced by "0". */
static char *skeleton(const char *js, size_t len, const oip__scan *sc,
                      size_t *out_len)
{
    size_t cap = len - sc->data_bytes + 2 + (size_t)sc->n_inputs;
    char *s = malloc(cap);
    int seq = sc->seq_id.len > 0; /* still to replace */
    if (!s)
        return NULL;
    size_t at = 0, w = 0;
    /* spans are in text order: inputs[i] follow each other; the id's span
     * lies before, between or after them, never inside one */
    for (int i = 0; i <= sc->n_inputs; i++) {
        const oip__span *sp = i < sc->n_inputs ? &sc->data[i] : NULL;
        if (sp && !sp->len)
            continue;
        if (seq && (!sp || sc->seq_id.off < sp->off)) {
            memcpy(s + w, js + at, sc->seq_id.off - at);
            w += sc->seq_id.off - at;
            s[w++] = '0';
            at = sc->seq_id.off + sc->seq_id.len;
            seq = 0;
        }
        if (!sp)
            break;
        memcpy(s + w, js + at, sp->off - at);
        w += sp->off - at;
        s[w++] = '0';
        at = sp->off + sp->len;
    }
    memcpy(s + w, js + at, len - at);
    w += len - at;
    *out_len = w;
    return s;
}

void oip__resolve_limits(oip_limits *L, const oip_limits *lim)
{
    memset(L, 0, sizeof *L);
    if (lim)
        *L = *lim;
    if (!L->max_elements)
        L->max_elements = OIP_DEFAULT_MAX_ELEMENTS;
    if (!L->memory_budget)
        L->memory_budget = OIP_DEFAULT_MEMORY_BUDGET;
    if (L->max_inputs <= 0)
        L->max_inputs = OIP_DEFAULT_MAX_INPUTS;
    if (L->max_outputs <= 0)
        L->max_outputs = OIP_DEFAULT_MAX_OUTPUTS;
    if (L->max_tokens <= 0)
        L->max_tokens = OIP_DEFAULT_MAX_TOKENS;
}

/*
 * oip_decode: see oip.h. Steps: scan the JSON part (grammar, data spans);
 * bound the skeleton by the budget; parse it (jtree.c; duplicate keys
 * rejected); check id, parameters, outputs and every input's metadata;
 * check binary sizes against the body and the decoded total against the
 * budget; only then allocate and decode the tensors.
 */
/* binary_tail: does the data after a JSON object (body[end..len)) look
 * like binary tensors sent without Inference-Header-Content-Length: the
 * JSON names a binary_data_size, or the data's first bytes are not text?
 * (A stray '}' or a second object is a JSON mistake, not that.) */
static int binary_tail(const char *body, size_t len, size_t end)
{
    static const char key[] = "\"binary_data_size\"";
    if (memmem(body, end, key, sizeof key - 1))
        return 1;
    for (size_t i = end; i < len && i < end + 64; i++) {
        unsigned char c = (unsigned char)body[i];
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c > 0x7e)
            return 1;
    }
    return 0;
}

int oip_decode(oip_request *req, const char *body, size_t len,
               size_t header_len, const oip_limits *lim, char *err)
{
    oip_limits L;
    oip__scan sc = {0};
    oip__jtree tree = {0};
    const oip__jv *root = NULL;
    in_meta *meta = NULL;
    char *skel = NULL;
    int rc;

    memset(req, 0, sizeof *req);
    oip__resolve_limits(&L, lim);
    if (!body && len)
        return oip__fail(err, ATTN_EINVAL, "request body: NULL");
    size_t jlen = len;
    if (header_len) {
        if (header_len > len)
            return oip__fail(err, ATTN_EINVAL,
                             "Inference-Header-Content-Length: %zu is larger "
                             "than the body (%zu byte%s)", header_len, len,
                             len == 1 ? "" : "s");
        jlen = header_len;
    }

    /* 1. grammar and data spans; the skeleton's size against the budget */
    if ((rc = oip__scan_json(body, jlen, L.max_inputs, &sc, err))) {
        if (!header_len && sc.json_end && binary_tail(body, jlen, sc.json_end))
            rc = oip__fail(err, ATTN_EINVAL,
                           "request body: data after the JSON object, which ends "
                           "at byte %zu (binary tensors after a JSON header need "
                           "the Inference-Header-Content-Length header: %zu for "
                           "this one; missing or 0, the body is all JSON)",
                           sc.json_end, sc.json_end);
        else if (header_len && rc == ATTN_EINVAL && sc.json_end)
            rc = oip__fail(err, ATTN_EINVAL,
                           "Inference-Header-Content-Length: %zu, but the "
                           "JSON object ends at byte %zu (the header counts "
                           "the JSON part only: %zu for this one)",
                           header_len, sc.json_end, sc.json_end);
        else if (header_len && rc == ATTN_EINVAL && sc.truncated)
            rc = oip__fail(err, ATTN_EINVAL,
                           "Inference-Header-Content-Length: %zu ends inside "
                           "the JSON object (the header counts the whole JSON "
                           "part, which comes first)", header_len);
        goto fail;
    }
    size_t est;
    if (mul_size(sc.n_values, JSON_VALUE_COST, &est) ||
        add_size(&est, jlen - sc.data_bytes) || est > L.memory_budget) {
        rc = oip__fail(err, ATTN_EFULL,
                       "request body: %zu JSON values outside inputs[].data "
                       "exceed the memory budget of %zu bytes",
                       sc.n_values, L.memory_budget);
        goto fail;
    }

    /* 2. the skeleton as a tree (jtree.c) */
    size_t skel_len;
    if (!(skel = skeleton(body, jlen, &sc, &skel_len))) {
        rc = oip__fail(err, ATTN_ENOMEM, "request body: out of memory");
        goto fail;
    }
    rc = oip__jtree_parse(&tree, skel, skel_len, err);
    free(skel);
    skel = NULL;
    if (rc)
        goto fail;
    root = tree.root;

    /* 3. id, parameters, outputs */
    size_t bytes = 0;
    const oip__jv *id = oip__jget(root, "id");
    if (id) {
        if (!is(id, OIP__JSTR)) {
            rc = oip__fail(err, ATTN_EINVAL, "id: expected a string");
            goto fail;
        }
        size_t n = id->len;
        if (n >= OIP_MAX_ID) {
            rc = oip__fail(err, ATTN_EINVAL, "id: longer than %d bytes",
                           OIP_MAX_ID - 1);
            goto fail;
        }
        if (!(req->id = malloc(n + 1))) {
            rc = oip__fail(err, ATTN_ENOMEM, "id: out of memory");
            goto fail;
        }
        memcpy(req->id, id->str, n + 1);
        bytes += n + 1;
    }
    if ((rc = decode_params(req, root, L.max_tokens, L.strict_params, body + sc.seq_id.off,
                            sc.seq_id.len, &bytes, err)) ||
        (rc = decode_outputs(req, root, L.max_outputs, L.strict_params, err)))
        goto fail;

    /* 4. every input's metadata, before any tensor is allocated */
    const oip__jv *inputs = oip__jget(root, "inputs");
    if (!inputs || !is(inputs, OIP__JARR)) {
        rc = oip__fail(err, ATTN_EINVAL, "inputs: %s",
                       inputs ? "expected an array" : "missing");
        goto fail;
    }
    size_t n_in = inputs->len;
    if (n_in == 0) {
        rc = oip__fail(err, ATTN_EINVAL, "inputs: empty");
        goto fail;
    }
    /* the scanner bounded n_in by max_inputs and saw the same array */
    if (n_in != (size_t)sc.n_inputs) {
        rc = oip__fail(err, ATTN_EINVAL, "inputs: could not be located");
        goto fail;
    }
    req->inputs = calloc(n_in, sizeof *req->inputs);
    meta = calloc(n_in, sizeof *meta);
    if (!req->inputs || !meta) {
        rc = oip__fail(err, ATTN_ENOMEM, "inputs: out of memory");
        goto fail;
    }
    size_t bin_total = 0, tensor_bytes = 0;
    for (size_t i = 0; i < n_in; i++) {
        oip_tensor *t = &req->inputs[i];
        if ((rc = input_meta(oip__jat(inputs, i), (int)i, &sc,
                             header_len != 0, &L, t, &meta[i], &bin_total,
                             err)))
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(req->inputs[j].name, t->name)) {
                rc = oip__fail(err, ATTN_EINVAL,
                               "inputs[%zu].name: duplicate input \"%s\"", i,
                               t->name);
                goto fail;
            }
        size_t nb;
        if (mul_size(t->count, oip_dtype_host_size(t->wire_dtype), &nb) ||
            add_size(&tensor_bytes, nb)) {
            rc = oip__fail(err, ATTN_EOVERFLOW,
                           "inputs[%zu].shape: size overflows", i);
            goto fail;
        }
    }
    if (bin_total != len - jlen) {
        rc = oip__fail(err, ATTN_EINVAL,
                       "binary data: inputs declare %zu byte%s, the body has "
                       "%zu after the JSON header", bin_total,
                       bin_total == 1 ? "" : "s", len - jlen);
        goto fail;
    }
    size_t need = tensor_bytes;
    if (add_size(&need, bytes) || add_size(&need, est) ||
        need > L.memory_budget) {
        rc = oip__fail(err, ATTN_EFULL,
                       "request: decoded tensors need %zu bytes, over the "
                       "memory budget of %zu bytes", tensor_bytes,
                       L.memory_budget);
        goto fail;
    }

    /* 5. allocate and decode */
    req->n_inputs = (int)n_in;
    for (size_t i = 0; i < n_in; i++) {
        oip_tensor *t = &req->inputs[i];
        t->data = malloc(t->count * oip_dtype_host_size(t->wire_dtype));
        if (!t->data) {
            rc = oip__fail(err, ATTN_ENOMEM, "inputs[%zu]: out of memory", i);
            goto fail;
        }
        if (meta[i].binary) {
            rc = oip__decode_binary(t, (const unsigned char *)body + jlen +
                                      meta[i].bin_off, (int)i, err);
        } else {
            char field[48];
            snprintf(field, sizeof field, "inputs[%zu].data", i);
            oip_dtype host = t->wire_dtype;
            rc = oip__read_data(body + meta[i].span.off, meta[i].span.len,
                                host, t->data, t->count, field, err);
        }
        if (rc)
            goto fail;
    }
    req->bytes = tensor_bytes + bytes;
    oip__jtree_free(&tree);
    free(meta);
    free(sc.data);
    return 0;

fail:
    free(skel);
    oip__jtree_free(&tree);
    free(meta);
    free(sc.data);
    oip_request_free(req);
    return rc;
}
