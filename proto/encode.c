/*
 * encode.c - infer responses (Triton's format, JSON or JSON header +
 * binary outputs) and error bodies.
 *
 * The response is written by hand into one buffer sized up front from an
 * upper bound (no jansson object per number): a B=8, T=512, d=768 output is
 * 3M floats.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "oip_internal.h"
#include "core/json_mem.h"

static void put(oip__buf *b, const char *s, size_t n)
{
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(oip__buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* Length of a valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, min = 0x10000;
    else
        return 0;
    if (n < k)
        return 0;
    unsigned v = c & (0x7fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3fu);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    return k;
}

int oip__utf8_valid(const char *s, size_t n)
{
    size_t i = 0, k;
    while (i < n && (k = utf8_len((const unsigned char *)s + i, n - i)))
        i += k;
    return i == n;
}

size_t oip_utf8_seq(const char *s, size_t n)
{
    return n ? utf8_len((const unsigned char *)s, n) : 0;
}

void oip_utf8_mend(char *s)
{
    unsigned char *u = (unsigned char *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t k = utf8_len(u + i, n - i);
        if (k)
            i += k;
        else
            u[i++] = '?';
    }
}

/* json_escape: appends str (n bytes) as a quoted JSON string; invalid
 * UTF-8 bytes become \ufffd. b must have 6 * n + 2 bytes free. */
static void json_escape(oip__buf *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    b->p[b->len++] = '"';
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            b->p[b->len++] = (char)c;
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t k = utf8_len(s + i, n - i);
            if (k) {
                put(b, (const char *)s + i, k);
                i += k;
            } else {
                puts_(b, "\\ufffd");
                i++;
            }
            continue;
        }
        b->p[b->len++] = '\\';
        switch (c) {
        case '"': b->p[b->len++] = '"'; break;
        case '\\': b->p[b->len++] = '\\'; break;
        case '\n': b->p[b->len++] = 'n'; break;
        case '\r': b->p[b->len++] = 'r'; break;
        case '\t': b->p[b->len++] = 't'; break;
        default:
            puts_(b, "u00");
            b->p[b->len++] = hex[c >> 4];
            b->p[b->len++] = hex[c & 15];
        }
        i++;
    }
    b->p[b->len++] = '"';
}

char *oip_error_body(const char *msg)
{
    if (!msg)
        msg = "";
    size_t n = strlen(msg);
    if (n > (SIZE_MAX - 32) / 6)
        return NULL;
    oip__buf b = {malloc(6 * n + 32), 0, 6 * n + 32};
    if (!b.p)
        return NULL;
    puts_(&b, "{\"error\":");
    json_escape(&b, msg, n);
    puts_(&b, "}");
    b.p[b.len] = 0;
    return b.p;
}

/* Max text per element in a JSON data array, including the comma. */
static size_t elem_chars(oip_dtype t)
{
    switch (t) {
    case OIP_FP32: return OIP__FLOAT_CHARS + 1;
    case OIP_INT32: return 12;
    case OIP_INT64: return 21;
    case OIP_BOOL: return 6;
    default: return 0;
    }
}

/* Writes the data array of an output; -1 (with its index) on a non-finite
 * float. */
static int put_data(oip__buf *b, const oip_output *o, size_t count,
                    size_t *bad)
{
    char *p = b->p + b->len;
    *p++ = '[';
    switch (o->dtype) {
    case OIP_FP32: {
        const float *d = o->data;
        for (size_t i = 0; i < count; i++)
            if (!isfinite(d[i])) {
                *bad = i;
                return -1;
            }
        p += oip__fmt_floats(d, count, p, 1);
        break;
    }
    case OIP_INT32: {
        const int32_t *d = o->data;
        for (size_t i = 0; i < count; i++) {
            p += oip__fmt_i64(d[i], p);
            *p++ = ',';
        }
        break;
    }
    case OIP_INT64: {
        const int64_t *d = o->data;
        for (size_t i = 0; i < count; i++) {
            p += oip__fmt_i64(d[i], p);
            *p++ = ',';
        }
        break;
    }
    case OIP_BOOL: {
        const uint8_t *d = o->data;
        for (size_t i = 0; i < count; i++) {
            if (d[i]) {
                memcpy(p, "true,", 5);
                p += 5;
            } else {
                memcpy(p, "false,", 6);
                p += 6;
            }
        }
        break;
    }
    default:
        break;
    }
    if (count)
        p--; /* the last comma */
    *p++ = ']';
    b->len = (size_t)(p - b->p);
    return 0;
}

/*
 * oip_encode: see oip.h. Pass 1 checks every output and sums an upper
 * bound of the text and the binary bytes (overflow-checked); one buffer of
 * that size is allocated; pass 2 writes the JSON, then each binary output
 * in order after it.
 */
int oip_encode(const char *model_name, const char *id,
               const oip_output *outs, int n_outs, const char *extra_params,
               char **body, size_t *len, size_t *header_len, char *err)
{
    json_t *extra = NULL;
    char *extra_text = NULL;
    oip__buf b = {0};
    size_t *counts = NULL;
    int rc = ATTN_EINVAL;

    *body = NULL;
    *len = 0;
    *header_len = 0;
    if (!model_name || n_outs < 0 || (n_outs && !outs))
        return oip__fail(err, ATTN_EINVAL, "oip_encode: bad arguments");
    if (extra_params &&
        oip__json_compact_object(extra_params, strlen(extra_params))) {
        /* as jansson would dump it (a step's {"sequence_length":N}) */
        if (!(extra_text = strdup(extra_params))) {
            rc = oip__fail(err, ATTN_ENOMEM, "oip_encode: out of memory");
            goto fail;
        }
    } else if (extra_params) {
        json_error_t jerr;
        int nomem;
        unsigned long mark = attn_json_mark();
        extra = attn_json_parse(extra_params, strlen(extra_params),
                               JSON_REJECT_DUPLICATES, &jerr, &nomem);
        if (nomem) {
            rc = oip__fail(err, ATTN_ENOMEM, "oip_encode: out of memory");
            goto fail;
        }
        if (!extra || !json_is_object(extra)) {
            rc = oip__fail(err, ATTN_EINVAL,
                           "oip_encode: extra_params is not a JSON object");
            goto fail;
        }
        if (!(extra_text = attn_json_dumps(extra, JSON_COMPACT, mark))) {
            rc = oip__fail(err, ATTN_ENOMEM, "oip_encode: out of memory");
            goto fail;
        }
    }
    counts = calloc((size_t)n_outs + 1, sizeof *counts);
    if (!counts) {
        rc = oip__fail(err, ATTN_ENOMEM, "oip_encode: out of memory");
        goto fail;
    }

    /* pass 1: sizes */
    size_t cap = 256 + 6 * strlen(model_name) + (id ? 6 * strlen(id) : 0) +
                 (extra_text ? strlen(extra_text) : 0);
    size_t bin = 0;
    int any_binary = 0;
    for (int i = 0; i < n_outs; i++) {
        const oip_output *o = &outs[i];
        size_t ec = elem_chars(o->dtype), count = 1, t;
        if (!o->name || !ec || o->rank < 0 || o->rank > OIP_MAX_RANK) {
            rc = oip__fail(err, ATTN_EINVAL, "output %d: bad name, datatype "
                           "or rank", i);
            goto fail;
        }
        for (int d = 0; d < o->rank; d++) {
            if (o->shape[d] < 0 ||
                (o->shape[d] && count > SIZE_MAX / (uint64_t)o->shape[d])) {
                rc = oip__fail(err, ATTN_EOVERFLOW,
                               "output %s: bad or overflowing shape", o->name);
                goto fail;
            }
            count *= (size_t)o->shape[d];
        }
        if (count && !o->data) {
            rc = oip__fail(err, ATTN_EINVAL, "output %s: NULL data", o->name);
            goto fail;
        }
        counts[i] = count;
        size_t meta = 128 + 6 * strlen(o->name) + 21 * (size_t)o->rank;
        if (o->binary) {
            any_binary = 1;
            t = count * oip_dtype_wire_size(o->dtype); /* < count * ec */
            if (count > SIZE_MAX / ec || bin > SIZE_MAX - t) {
                rc = oip__fail(err, ATTN_EOVERFLOW,
                               "output %s: too large", o->name);
                goto fail;
            }
            bin += t;
        } else {
            if (count > (SIZE_MAX - meta) / ec) {
                rc = oip__fail(err, ATTN_EOVERFLOW,
                               "output %s: too large", o->name);
                goto fail;
            }
            meta += count * ec;
        }
        if (cap > SIZE_MAX - meta) {
            rc = oip__fail(err, ATTN_EOVERFLOW, "response: too large");
            goto fail;
        }
        cap += meta;
    }
    if (cap > SIZE_MAX - bin - 1) {
        rc = oip__fail(err, ATTN_EOVERFLOW, "response: too large");
        goto fail;
    }
    b.cap = cap + bin + 1;
    if (!(b.p = malloc(b.cap))) {
        rc = oip__fail(err, ATTN_ENOMEM, "response: out of memory (%zu "
                       "bytes)", b.cap);
        goto fail;
    }

    /* pass 2: the JSON header */
    char num[24];
    puts_(&b, "{\"model_name\":");
    json_escape(&b, model_name, strlen(model_name));
    puts_(&b, ",\"model_version\":\"1\"");
    if (id) {
        puts_(&b, ",\"id\":");
        json_escape(&b, id, strlen(id));
    }
    if (extra_text) {
        puts_(&b, ",\"parameters\":");
        puts_(&b, extra_text);
    }
    puts_(&b, ",\"outputs\":[");
    for (int i = 0; i < n_outs; i++) {
        const oip_output *o = &outs[i];
        if (i)
            puts_(&b, ",");
        puts_(&b, "{\"name\":");
        json_escape(&b, o->name, strlen(o->name));
        puts_(&b, ",\"datatype\":\"");
        puts_(&b, oip_dtype_name(o->dtype));
        puts_(&b, "\",\"shape\":[");
        for (int d = 0; d < o->rank; d++) {
            if (d)
                puts_(&b, ",");
            put(&b, num, oip__fmt_i64(o->shape[d], num));
        }
        puts_(&b, "]");
        if (o->binary) {
            puts_(&b, ",\"parameters\":{\"binary_data_size\":");
            put(&b, num,
                oip__fmt_i64((int64_t)(counts[i] *
                                       oip_dtype_wire_size(o->dtype)),
                             num));
            puts_(&b, "}");
        } else {
            size_t bad;
            puts_(&b, ",\"data\":");
            if (put_data(&b, o, counts[i], &bad)) {
                rc = oip__fail(err, ATTN_EFORMAT,
                               "output %s: element %zu is not finite (the "
                               "inputs overflow FP32) and cannot be sent as "
                               "JSON; ask for it with binary_data",
                               o->name, bad);
                goto fail;
            }
        }
        puts_(&b, "}");
    }
    puts_(&b, "]}");

    /* the binary outputs, in order */
    if (any_binary) {
        *header_len = b.len;
        for (int i = 0; i < n_outs; i++)
            if (outs[i].binary && counts[i])
                put(&b, outs[i].data,
                    counts[i] * oip_dtype_wire_size(outs[i].dtype));
    }
    b.p[b.len] = 0; /* a terminated string when all-JSON */
    *body = b.p;
    *len = b.len;
    free(counts);
    free(extra_text);
    json_decref(extra);
    return 0;

fail:
    free(b.p);
    free(counts);
    free(extra_text);
    json_decref(extra);
    *header_len = 0;
    return rc;
}
