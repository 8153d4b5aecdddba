/*
 * peek.c - an infer request's parameters.sequence_id read off a JSON body
 * without decoding it: what the daemon needs to know of a request it
 * refuses before its decode (a full queue), so that a step retried as told
 * keeps its sequence. See oip.h (oip_peek_sequence_id).
 */
#include <stdint.h>
#include <string.h>

#include "oip_internal.h"

#define KEY "\"sequence_id\""

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* key_place: does the string that begins at q (a '"') stand where an
 * object's key does: after '{' or ',' and white space? (Not a value, not
 * inside a string, where its quote would follow a backslash.) */
static int key_place(const char *js, const char *q)
{
    while (q > js && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\n' ||
                      q[-1] == '\r'))
        q--;
    return q > js && (q[-1] == '{' || q[-1] == ',');
}

/* value: the id at p (a number 1 .. 2^64 - 1 as its decimal digits, or a
 * string oip_sequence_id_valid takes) into out: 1, or 0 for anything
 * else, as the decoder would refuse it. */
static int value(const char *p, const char *end, char *out)
{
    if (p < end && *p == '"') {
        const char *e = memchr(p + 1, '"', (size_t)(end - p - 1));
        size_t n = e ? (size_t)(e - p - 1) : 0;
        if (!e || !oip_sequence_id_valid(p + 1, n))
            return 0;
        memcpy(out, p + 1, n);
        out[n] = 0;
        return 1;
    }
    if (p < end && *p >= '1' && *p <= '9') {
        const char *d = p;
        uint64_t v = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (__builtin_mul_overflow(v, 10u, &v) ||
                __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
                return 0;
        if (p == end || *p == '.' || *p == 'e' || *p == 'E')
            return 0; /* not an integer, or cut here (a body so far) */
        memcpy(out, d, (size_t)(p - d));
        out[p - d] = 0;
        return 1;
    }
    return 0;
}

int oip_peek_sequence_id(const char *body, size_t len, size_t header_len,
                         char *id)
{
    const char *end, *p, *q;
    size_t klen = sizeof KEY - 1;
    id[0] = 0;
    if (!body)
        return 0;
    end = body + (header_len && header_len < len ? header_len : len);
    for (p = body; (size_t)(end - p) >= klen &&
                   (q = memmem(p, (size_t)(end - p), KEY, klen));
         p = q + 1) {
        const char *v = skip_ws(q + klen, end);
        if (!key_place(body, q) || v >= end || *v != ':')
            continue;
        if (value(skip_ws(v + 1, end), end, id))
            return 1;
    }
    id[0] = 0;
    return 0;
}
