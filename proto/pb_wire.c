/*
 * pb_wire.c - a gRPC message read off the wire without a parse: the
 * fields the daemon needs before it decodes (or when it refuses) a call,
 * oip_pb_peek_model, oip_pb_peek_seq_id and oip_pb_peek_echo, and
 * oip_pb_check_strings, the NUL bytes protobuf-c would let through. See
 * oip_pb.h; pb.c is the decode itself.
 */
#include "proto/oip_pb.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/attn.h"
#include "oip_internal.h"
#include "proto/kserve.pb-c.h"

#define NUL_MSG "contains a NUL byte (no name, id, key or string parameter may)"

/* varint: reads one at *p (< end); -1 when truncated or over 10 bytes. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    int shift;
    for (shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* field: steps *p (< end) over the next top-level field: its key (number
 * << 3 | wire type) in *key and, when it is length-delimited, its bytes in
 * [*val, *val + *n). -1 when the wire format breaks there (a group too:
 * the parse refuses them). */
static int field(const uint8_t **p, const uint8_t *end, uint64_t *key,
                 const uint8_t **val, uint64_t *n)
{
    uint64_t v;
    *val = NULL;
    *n = 0;
    if (varint(p, end, key) < 0)
        return -1;
    switch (*key & 7) {
    case 0:
        return varint(p, end, &v);
    case 1:
        if (end - *p < 8)
            return -1;
        *p += 8;
        return 0;
    case 5:
        if (end - *p < 4)
            return -1;
        *p += 4;
        return 0;
    case 2:
        if (varint(p, end, n) < 0 || *n > (uint64_t)(end - *p))
            return -1;
        *val = *p;
        *p += *n;
        return 0;
    default:
        return -1;
    }
}

int oip_pb_peek_model(const char *msg, size_t len, char *name, char *version,
                      size_t cap, char *err)
{
    const uint8_t *p = (const uint8_t *)msg, *end = p + len, *v;
    name[0] = version[0] = 0;
    while (p < end) {
        uint64_t key, n, f;
        char *dst;
        if (field(&p, end, &key, &v, &n) < 0)
            return oip__fail(err, ATTN_EINVAL, "request: not a valid "
                             "ModelInferRequest (protobuf wire format)");
        f = (key & 7) == 2 ? key >> 3 : 0;
        if (f != 1 && f != 2)
            continue;
        if (f == 1 && n >= cap)
            return oip__fail(err, ATTN_EINVAL, "model_name: longer than "
                             "%zu bytes", cap - 1);
        if (memchr(v, 0, n))
            return oip__fail(err, ATTN_EINVAL, "%s: " NUL_MSG,
                             f == 1 ? "model_name" : "model_version");
        dst = f == 1 ? name : version;
        if (n >= cap) /* a version: cut, it names none either way */
            n = cap - 1;
        memcpy(dst, v, n);
        dst[n] = 0;
    }
    return 0;
}

/* An InferParameter read off the wire: its oneof's member (its field
 * number, 0 for none or one that is no id) and value. */
typedef struct peek_param {
    int kind;
    uint64_t num;          /* int64 / uint64 value, or the string's length */
    char str[OIP_MAX_SEQ_ID];
} peek_param;

/* peek_param_merge: one InferParameter (n bytes at p) into *pp, as a parse
 * merges a message given twice: each member set replaces the oneof's. */
static void peek_param_merge(const uint8_t *p, uint64_t n, peek_param *pp)
{
    const uint8_t *end = p + n, *v;
    uint64_t key, len;
    while (p < end) {
        const uint8_t *at = p;
        if (field(&p, end, &key, &v, &len) < 0) {
            pp->kind = 0; /* the parse refuses it */
            return;
        }
        if (key == (2 << 3 | 0) || key == (5 << 3 | 0)) {
            varint(&at, end, &pp->num); /* its key again, then the value */
            varint(&at, end, &pp->num);
            pp->kind = (int)(key >> 3);
        } else if (key == (3 << 3 | 2)) {
            pp->kind = 3;
            pp->num = len;
            if (len < OIP_MAX_SEQ_ID)
                memcpy(pp->str, v, (size_t)len);
        } else if (key >> 3 >= 1 && key >> 3 <= 5) {
            pp->kind = 0; /* another member of the oneof */
        }
    }
}

/* peek_param_id: *pp as a sequence id, the way get_seq_id reads it, into
 * id: 1, or 0 for none the parse takes. */
static int peek_param_id(const peek_param *pp, char *id)
{
    if (pp->kind == 2 && (int64_t)pp->num >= 1) {
        snprintf(id, OIP_MAX_SEQ_ID, "%lld", (long long)(int64_t)pp->num);
        return 1;
    }
    if (pp->kind == 5 && pp->num >= 1) {
        snprintf(id, OIP_MAX_SEQ_ID, "%llu", (unsigned long long)pp->num);
        return 1;
    }
    if (pp->kind == 3 && pp->num < OIP_MAX_SEQ_ID &&
        oip_sequence_id_valid(pp->str, (size_t)pp->num)) {
        memcpy(id, pp->str, (size_t)pp->num);
        id[pp->num] = 0;
        return 1;
    }
    return 0;
}

int oip_pb_peek_seq_id(const char *msg, size_t len, size_t header_len,
                       char *id)
{
    const uint8_t *p = (const uint8_t *)msg, *end = p + len, *v;
    char found[OIP_MAX_SEQ_ID] = "";
    (void)header_len;
    id[0] = 0;
    while (p && p < end) {
        uint64_t key, n, klen = 0;
        const uint8_t *q, *qend, *k = NULL;
        peek_param pp = {0};
        int has_value = 0;
        if (field(&p, end, &key, &v, &n) < 0)
            break;
        if (key != (4 << 3 | 2)) /* parameters: a map entry */
            continue;
        for (q = v, qend = v + n; q < qend;) {
            uint64_t ek, en;
            const uint8_t *ev;
            if (field(&q, qend, &ek, &ev, &en) < 0)
                break;
            if (ek == (1 << 3 | 2)) { /* its key: the last one counts */
                k = ev, klen = en;
            } else if (ek == (2 << 3 | 2)) { /* its value, merged */
                peek_param_merge(ev, en, &pp);
                has_value = 1;
            }
        }
        /* the last entry of a key counts, as in the parse */
        if (k && klen == 11 && !memcmp(k, "sequence_id", 11)) {
            char one[OIP_MAX_SEQ_ID];
            if (!has_value || !peek_param_id(&pp, one))
                found[0] = 0;
            else
                memcpy(found, one, sizeof one);
        }
    }
    memcpy(id, found, sizeof found);
    return found[0] != 0;
}

void oip_pb_peek_echo(const char *msg, size_t len, oip_pb_echo *e)
{
    const uint8_t *p = (const uint8_t *)msg, *end, *v;
    memset(e, 0, sizeof *e);
    if (!p)
        return;
    end = p + len;
    while (p < end) {
        uint64_t key, n, f;
        if (field(&p, end, &key, &v, &n) < 0)
            return; /* what came before the break stays */
        f = (key & 7) == 2 ? key >> 3 : 0;
        if (f < 1 || f > 3)
            continue;
        /* the last one counts, as in the parse; one that could not go
         * back as a protobuf string is none */
        if (oip__utf8_valid((const char *)v, (size_t)n)) {
            e->f[f - 1] = (const char *)v;
            e->n[f - 1] = (size_t)n;
        } else {
            e->n[f - 1] = 0;
        }
    }
}

/* ---- NUL bytes in strings --------------------------------------------------- */

/* strings: oip_pb_check_strings over [p, end) of a message of d; path
 * (cap bytes) names the fields it is inside, plen bytes of it. */
static int strings(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                   const uint8_t *end, char *path, size_t plen, size_t cap,
                   char *err)
{
    while (p < end) {
        const ProtobufCFieldDescriptor *f;
        const uint8_t *v;
        uint64_t key, n;
        int rc;
        if (field(&p, end, &key, &v, &n) < 0)
            return 0;
        if ((key & 7) != 2)
            continue;
        f = (key >> 3) <= UINT32_MAX
                ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3))
                : NULL;
        if (f && (f->type == PROTOBUF_C_TYPE_STRING ||
                  f->type == PROTOBUF_C_TYPE_MESSAGE)) {
            snprintf(path + plen, cap - plen, "%s%s", plen ? "." : "", f->name);
            if (f->type == PROTOBUF_C_TYPE_STRING && memchr(v, 0, n))
                return oip__fail(err, ATTN_EINVAL, "%s: " NUL_MSG, path);
            if (f->type == PROTOBUF_C_TYPE_MESSAGE &&
                strlen(path) < cap - 1 && /* bounds the depth too */
                (rc = strings(f->descriptor, v, v + n, path, strlen(path), cap,
                              err)))
                return rc;
            path[plen] = 0;
        }
    }
    return 0;
}

int oip_pb_check_strings(const ProtobufCMessageDescriptor *d, const char *msg,
                         size_t len, char *err)
{
    char path[128];
    const uint8_t *p = (const uint8_t *)msg;
    path[0] = 0;
    return p ? strings(d, p, p + len, path, 0, sizeof path, err) : 0;
}
