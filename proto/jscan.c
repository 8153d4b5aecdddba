/*
 * jscan.c - a validating JSON scanner that finds the big arrays, and the
 * streaming reader that decodes them.
 *
 * An infer request is a small JSON tree plus a few very large number
 * arrays (root.inputs[i].data). Parsing those with jansson would cost a
 * json_t per number (~20x the text in memory) before the shapes could even
 * be checked. So the decoder runs in two passes: oip__scan_json validates
 * the whole text and notes where each data value is (skipping it by
 * bracket matching only); the decoder then parses the rest (the skeleton)
 * with jansson, checks every shape and the memory budget, allocates, and
 * only then oip__read_data parses each array straight into its buffer,
 * validating the grammar inside it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/attn.h"
#include "oip_internal.h"

int oip__fail(char *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, OIP_ERRMAX, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* What a value means to the decoder, by its path from the root. Objects
 * with a role other than R_OTHER get duplicate keys reported with their
 * path; duplicates elsewhere are left to jansson. */
enum role {
    R_OTHER,
    R_ROOT,       /* the request */
    R_INPUTS,     /* root.inputs */
    R_INPUT,      /* root.inputs[i] */
    R_IN_PARAMS,  /* root.inputs[i].parameters */
    R_OUTPUTS,    /* root.outputs */
    R_OUTPUT,     /* root.outputs[i] */
    R_OUT_PARAMS, /* root.outputs[i].parameters */
    R_PARAMS,     /* root.parameters */
};

#define KEY_MAX 24   /* keys compared by name: shorter than this, ASCII */
#define SEEN_KEYS 32 /* keys remembered per object for duplicate checks */
#define SEEN_DEPTH 5 /* role objects nest at most this deep */

typedef struct scanner {
    const char *s;
    size_t len, pos;
    int max_inputs;
    int seen_inputs; /* the root "inputs" key was seen */
    oip__scan *sc;
    char *err;
    char seen[SEEN_DEPTH][SEEN_KEYS][KEY_MAX]; /* keys of open role objects */
} scanner;

/* The path of a role object, for messages. */
static void role_path(enum role role, int index, char *out, size_t cap)
{
    switch (role) {
    case R_INPUT: snprintf(out, cap, "inputs[%d]", index); break;
    case R_IN_PARAMS: snprintf(out, cap, "inputs[%d].parameters", index); break;
    case R_OUTPUT: snprintf(out, cap, "outputs[%d]", index); break;
    case R_OUT_PARAMS:
        snprintf(out, cap, "outputs[%d].parameters", index);
        break;
    case R_PARAMS: snprintf(out, cap, "parameters"); break;
    default: snprintf(out, cap, "request body"); break;
    }
}

/* The role of the value of key in an object of role parent. */
static enum role child_role(enum role parent, const char *key)
{
    switch (parent) {
    case R_ROOT:
        if (!strcmp(key, "inputs"))
            return R_INPUTS;
        if (!strcmp(key, "outputs"))
            return R_OUTPUTS;
        if (!strcmp(key, "parameters"))
            return R_PARAMS;
        return R_OTHER;
    case R_INPUT:
        return strcmp(key, "parameters") ? R_OTHER : R_IN_PARAMS;
    case R_OUTPUT:
        return strcmp(key, "parameters") ? R_OTHER : R_OUT_PARAMS;
    default:
        return R_OTHER;
    }
}

static int syntax(scanner *z, const char *what)
{
    z->sc->truncated = z->pos >= z->len;
    return oip__fail(z->err, ATTN_EINVAL,
                     "request body: invalid JSON at byte %zu: %s", z->pos,
                     what);
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* is_word: a letter, digit or '_', what the words of bad_word are made of */
static int is_word(char c)
{
    return is_alpha(c) || (c >= '0' && c <= '9') || c == '_';
}

/* bad_word: when p (before end) starts a word, which no JSON value does
 * but its literals, says what it is into buf (cap bytes) for a message:
 * "'nan' (JSON has no NaN or infinity)", also with a sign ("-Infinity"),
 * or "'None' (not a JSON value)" (the word cut at 32 bytes). NULL when p
 * starts no word (a stray ',', a malformed number such as "-x" or "1.":
 * the byte offset says enough). */
static const char *bad_word(const char *p, const char *end, char *buf,
                            size_t cap)
{
    const char *w = p + (p < end && (*p == '-' || *p == '+'));
    size_t n = 0, k;
    while (w + n < end && is_word(w[n]))
        n++;
    if (!n || !is_alpha(*w))
        return NULL;
    k = (size_t)(w - p) + n;
    if ((n == 3 && (!strncasecmp(w, "nan", 3) || !strncasecmp(w, "inf", 3))) ||
        (n == 8 && !strncasecmp(w, "infinity", 8)))
        snprintf(buf, cap, "'%.*s' (JSON has no NaN or infinity)", (int)k, p);
    else if (w != p)
        return NULL;
    else
        snprintf(buf, cap, "'%.*s%s' (not a JSON value)", k > 32 ? 32 : (int)k,
                 p, k > 32 ? "..." : "");
    return buf;
}

/* bad_value: syntax's "unexpected character" at z->pos, naming the word
 * there if it is one ("unexpected 'nan' (JSON has no NaN or infinity)"). */
static int bad_value(scanner *z)
{
    char buf[80], what[96];
    const char *w = bad_word(z->s + z->pos, z->s + z->len, buf, sizeof buf);
    if (!w)
        return syntax(z, "unexpected character");
    snprintf(what, sizeof what, "unexpected %s", w);
    return syntax(z, what);
}

static void skip_ws(scanner *z)
{
    while (z->pos < z->len) {
        char c = z->s[z->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        z->pos++;
    }
}

/* eat: after white space, c is next: moves past it and says 1; else 0. */
static int eat(scanner *z, char c)
{
    skip_ws(z);
    if (z->pos < z->len && z->s[z->pos] == c) {
        z->pos++;
        return 1;
    }
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * scan_string: z->pos is at the opening quote. Validates escapes and
 * control characters, leaves pos after the closing quote. When key is not
 * NULL, the string's ASCII value (escapes decoded) is copied there if it
 * fits in keycap - 1 bytes, else key[0] = 1 (matches nothing we look for).
 */
static int scan_string(scanner *z, char *key, size_t keycap)
{
    size_t k = 0;
    int fits = 1;
    z->pos++;
    for (;;) {
        if (z->pos >= z->len)
            return syntax(z, "unterminated string");
        unsigned char c = (unsigned char)z->s[z->pos];
        if (c == '"')
            break;
        if (c < 0x20)
            return syntax(z, "control character in string");
        unsigned v = c;
        if (c == '\\') {
            if (z->pos + 1 >= z->len)
                return syntax(z, "unterminated string");
            char e = z->s[z->pos + 1];
            z->pos += 2;
            switch (e) {
            case '"': case '\\': case '/': v = (unsigned char)e; break;
            case 'b': v = '\b'; break;
            case 'f': v = '\f'; break;
            case 'n': v = '\n'; break;
            case 'r': v = '\r'; break;
            case 't': v = '\t'; break;
            case 'u':
                v = 0;
                for (int i = 0; i < 4; i++) {
                    int h = z->pos < z->len ? hexval(z->s[z->pos]) : -1;
                    if (h < 0)
                        return syntax(z, "bad \\u escape");
                    v = v * 16 + (unsigned)h;
                    z->pos++;
                }
                break;
            default:
                z->pos--;
                return syntax(z, "bad escape");
            }
        } else {
            z->pos++;
        }
        if (key) {
            if (v == 0 || v > 0x7f || k + 1 >= keycap)
                fits = 0;
            else
                key[k++] = (char)v;
        }
    }
    z->pos++;
    if (key) {
        key[k] = 0;
        if (!fits)
            key[0] = 1, key[1] = 0;
    }
    return 0;
}

/*
 * skip_data: pos at the start of a data value. Arrays are skipped by
 * bracket matching (strings skipped whole); the grammar inside is checked
 * later by oip__read_data. Any other value is skipped the same way up to
 * the next ',' '}' or ']' at depth 0.
 */
/* skip_plain: inside brackets, the position of the next '"', '[', ']', '{'
 * or '}' at or after pos (len if none), 16 bytes at a time where SSE2 is;
 * the byte loop of skip_data does the rest. */
static size_t skip_plain(const unsigned char *u, size_t pos, size_t len)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
    while (len - pos >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(u + pos));
        __m128i l = _mm_or_si128(v, lower); /* '[' -> '{', ']' -> '}' */
        __m128i m = _mm_or_si128(_mm_cmpeq_epi8(v, quote),
                                 _mm_or_si128(_mm_cmpeq_epi8(l, open),
                                              _mm_cmpeq_epi8(l, close)));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits)
            return pos + (size_t)__builtin_ctz(bits);
        pos += 16;
    }
#else
    (void)u;
    (void)len;
#endif
    return pos;
}

static int skip_data(scanner *z)
{
    /* bytes skip_data must look at; everything else is skipped in bulk */
    static const unsigned char special[256] = {
        ['"'] = 1, ['['] = 1, [']'] = 1, ['{'] = 1, ['}'] = 1, [','] = 2};
    const unsigned char *u = (const unsigned char *)z->s;
    int depth = 0;
    while (z->pos < z->len) {
        /* inside brackets ',' does not matter either */
        unsigned skip = depth ? 2 : 0;
        if (depth)
            z->pos = skip_plain(u, z->pos, z->len);
        while (z->pos < z->len && (special[u[z->pos]] | skip) == skip)
            z->pos++;
        if (z->pos >= z->len)
            break;
        char c = z->s[z->pos];
        if (c == '"') {
            int rc = scan_string(z, NULL, 0);
            if (rc)
                return rc;
            continue;
        }
        if (c == '[' || c == '{') {
            if (++depth > OIP_MAX_DEPTH)
                return syntax(z, "nesting too deep");
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return 0;
            if (--depth == 0) {
                z->pos++;
                return 0;
            }
        } else if (c == ',' && depth == 0) {
            return 0;
        }
        z->pos++;
    }
    return depth ? syntax(z, "unterminated array") : 0;
}

static int scan_value(scanner *z, int depth, enum role role, int index);

/* scan_object: z->pos is at '{'. Scans every member and leaves pos after
 * the '}'. Duplicate keys of objects with a role are refused with their
 * path; an input's "data" is skipped and recorded as a span (index: the
 * input); other values recurse with their child role. 0, or a negative
 * code with the message set. */
static int scan_object(scanner *z, int depth, enum role role, int index)
{
    int nseen = 0;
    int check = role != R_OTHER && depth <= SEEN_DEPTH;
    z->pos++; /* '{' */
    if (eat(z, '}'))
        return 0;
    for (;;) {
        char key[KEY_MAX];
        skip_ws(z);
        if (z->pos >= z->len || z->s[z->pos] != '"')
            return syntax(z, "expected a string key");
        int rc = scan_string(z, key, sizeof key);
        if (rc)
            return rc;
        z->sc->n_values++;
        if (check && key[0] != 1) {
            char (*seen)[KEY_MAX] = z->seen[depth - 1];
            for (int i = 0; i < nseen; i++)
                if (!strcmp(seen[i], key)) {
                    char path[48];
                    role_path(role, index, path, sizeof path);
                    return oip__fail(z->err, ATTN_EINVAL,
                                     "%s: duplicate key \"%s\"", path, key);
                }
            if (nseen < SEEN_KEYS)
                memcpy(seen[nseen++], key, KEY_MAX);
        }
        if (!eat(z, ':'))
            return syntax(z, "expected ':'");
        skip_ws(z);
        if (role == R_INPUT && !strcmp(key, "data")) {
            size_t start = z->pos;
            if (z->pos >= z->len)
                return syntax(z, "expected a value");
            if ((rc = skip_data(z)))
                return rc;
            if (z->pos == start)
                return syntax(z, "expected a value");
            oip__span *sp = &z->sc->data[index];
            if (sp->len)
                return oip__fail(z->err, ATTN_EINVAL,
                                 "inputs[%d]: duplicate key \"data\"", index);
            sp->off = start;
            sp->len = z->pos - start;
            z->sc->data_bytes += sp->len;
        } else if (role == R_PARAMS && !strcmp(key, "sequence_id") &&
                   z->pos < z->len &&
                   (z->s[z->pos] == '-' || (z->s[z->pos] >= '0' && z->s[z->pos] <= '9'))) {
            size_t start = z->pos;
            if ((rc = scan_value(z, depth + 1, R_OTHER, index)))
                return rc;
            z->sc->seq_id.off = start;
            z->sc->seq_id.len = z->pos - start;
        } else {
            enum role child = child_role(role, key);
            /* spans must come from one array: refuse a second one even
             * past SEEN_KEYS (jansson would, but only after the skeleton) */
            if (child == R_INPUTS && z->seen_inputs++)
                return oip__fail(z->err, ATTN_EINVAL,
                                 "request body: duplicate key \"inputs\"");
            if ((rc = scan_value(z, depth + 1, child, index)))
                return rc;
        }
        if (eat(z, ','))
            continue;
        if (eat(z, '}'))
            return 0;
        return syntax(z, "expected ',' or '}'");
    }
}

/* scan_array: z->pos is at '['. Scans the elements (an element of
 * "inputs" gets its slot in z->sc->data, at most max_inputs) and leaves
 * pos after the ']'. 0, or a negative code with the message set. */
static int scan_array(scanner *z, int depth, enum role role)
{
    int n = 0;
    z->pos++; /* '[' */
    if (eat(z, ']'))
        return 0;
    for (;;) {
        int rc;
        enum role child = role == R_OUTPUTS ? R_OUTPUT : R_OTHER;
        if (role == R_INPUTS) {
            if (n >= z->max_inputs)
                return oip__fail(z->err, ATTN_EOVERFLOW,
                                 "inputs: more than %d entries",
                                 z->max_inputs);
            z->sc->data[n].off = z->sc->data[n].len = 0;
            z->sc->n_inputs = n + 1;
            child = R_INPUT;
        }
        if ((rc = scan_value(z, depth + 1, child, n)))
            return rc;
        n++;
        if (eat(z, ','))
            continue;
        if (eat(z, ']'))
            return 0;
        return syntax(z, "expected ',' or ']'");
    }
}

static int literal(scanner *z, const char *word)
{
    size_t n = strlen(word);
    if (z->len - z->pos < n || memcmp(z->s + z->pos, word, n))
        return bad_value(z);
    z->pos += n;
    return 0;
}

/* scan_value: one JSON value of any kind at z->pos (after white space),
 * counted in n_values; refuses nesting deeper than OIP_MAX_DEPTH. */
static int scan_value(scanner *z, int depth, enum role role, int index)
{
    if (depth > OIP_MAX_DEPTH)
        return syntax(z, "nesting too deep");
    skip_ws(z);
    if (z->pos >= z->len)
        return syntax(z, "expected a value");
    z->sc->n_values++;
    char c = z->s[z->pos];
    switch (c) {
    case '{':
        return scan_object(z, depth, role, index);
    case '[':
        return scan_array(z, depth, role);
    case '"':
        return scan_string(z, NULL, 0);
    case 't':
        return literal(z, "true");
    case 'f':
        return literal(z, "false");
    case 'n':
        return literal(z, "null");
    default: {
        oip__num n;
        const char *e = oip__lex_number(z->s + z->pos, z->s + z->len, &n);
        if (!e)
            return bad_value(z);
        z->pos = (size_t)(e - z->s);
        return 0;
    }
    }
}

/* not_object: the message for a body (s, n: from its first non-blank
 * byte) that does not open a JSON object, naming what came instead: its
 * first bytes (printable ASCII, others as '.'), or what users send by
 * mistake (a form upload, a gzip file, a UTF-8 byte-order mark). */
static int not_object(const char *s, size_t n, char *err)
{
    const unsigned char *u = (const unsigned char *)s;
    char shown[33];
    size_t i, k = n < sizeof shown - 1 ? n : sizeof shown - 1;
    if (n == 0)
        return oip__fail(err, ATTN_EINVAL,
                         "request body: empty; expected a JSON object");
    if (n >= 2 && u[0] == 0x1f && u[1] == 0x8b)
        return oip__fail(err, ATTN_EINVAL,
                         "request body: expected a JSON object, got "
                         "gzip-compressed data: send it uncompressed");
    if (n >= 3 && u[0] == 0xef && u[1] == 0xbb && u[2] == 0xbf)
        return oip__fail(err, ATTN_EINVAL,
                         "request body: expected a JSON object, got a UTF-8 "
                         "byte-order mark: send the JSON without it");
    for (i = 0; i < k; i++)
        shown[i] = u[i] >= 0x20 && u[i] < 0x7f ? s[i] : '.';
    shown[k] = 0;
    return oip__fail(err, ATTN_EINVAL,
                     "request body: expected a JSON object, got '%s'%s%s", shown,
                     n > k ? "..." : "",
                     n >= 2 && s[0] == '-' && s[1] == '-'
                         ? ": a form upload (curl -F)? send the JSON itself "
                           "(curl -d @file)"
                         : "");
}

int oip__scan_json(const char *js, size_t len, int max_inputs, oip__scan *sc,
                   char *err)
{
    memset(sc, 0, sizeof *sc);
    sc->data = calloc((size_t)(max_inputs > 0 ? max_inputs : 1),
                      sizeof *sc->data);
    if (!sc->data)
        return oip__fail(err, ATTN_ENOMEM, "request body: out of memory");
    scanner *z = malloc(sizeof *z); /* ~4 KiB: keep it off the stack */
    if (!z)
        return oip__fail(err, ATTN_ENOMEM, "request body: out of memory");
    *z = (scanner){js, len, 0, max_inputs, 0, sc, err, {{{0}}}};
    int rc = 0;
    skip_ws(z);
    if (z->pos >= len || js[z->pos] != '{')
        rc = not_object(js + z->pos, len - z->pos, err);
    else if (!(rc = scan_value(z, 1, R_ROOT, 0))) {
        size_t end = z->pos; /* binary data may begin with a blank byte */
        skip_ws(z);
        if (z->pos != len) {
            sc->json_end = end;
            rc = syntax(z, "data after the JSON object");
        }
    }
    free(z);
    return rc;
}

/* ---- the data reader ---------------------------------------------------- */

typedef struct reader {
    const char *p, *end, *base;
    oip_dtype dtype;
    void *out;
    size_t count, n;
    const char *field;
    char *err;
} reader;

static int rd_syntax(reader *r, const char *what)
{
    return oip__fail(r->err, ATTN_EINVAL, "%s: invalid JSON at byte %zu: %s",
                     r->field, (size_t)(r->p - r->base), what);
}

static void rd_ws(reader *r)
{
    while (r->p < r->end &&
           (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

static const char *kind_of(char c)
{
    switch (c) {
    case '"': return "a string";
    case '{': return "an object";
    case 'n': return "null";
    case 't': case 'f': return "a boolean";
    default: return "a number";
    }
}

static const char *want_of(oip_dtype t)
{
    return t == OIP_BOOL ? "true or false"
           : t == OIP_FP32 ? "a number" : "an integer";
}

/* literal_at: does the word at p (before end) read word exactly? */
static int literal_at(const char *p, const char *end, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(end - p) >= n && !memcmp(p, word, n) &&
           (p + n == end || !is_word(p[n]));
}

/* One scalar element at r->p. */
static int rd_scalar(reader *r)
{
    char c = *r->p;
    char word[80];
    size_t i = r->n;
    if (r->dtype == OIP_BOOL) {
        int v;
        if (c == 't' && r->end - r->p >= 4 && !memcmp(r->p, "true", 4))
            v = 1, r->p += 4;
        else if (c == 'f' && r->end - r->p >= 5 && !memcmp(r->p, "false", 5))
            v = 0, r->p += 5;
        else
            goto wrong_kind;
        if (i < r->count)
            ((uint8_t *)r->out)[i] = (uint8_t)v;
        r->n++;
        return 0;
    }
    if (c != '-' && (c < '0' || c > '9'))
        goto wrong_kind;
    oip__num num;
    const char *e = oip__lex_number(r->p, r->end, &num);
    if (!e && bad_word(r->p, r->end, word, sizeof word))
        goto wrong_kind; /* "-nan", "-Infinity" */
    if (!e)
        return rd_syntax(r, "malformed number");
    ptrdiff_t tlen = e - r->p;
    int len = tlen > 40 ? 40 : (int)tlen; /* quoted in messages */
    if (r->dtype == OIP_FP32) {
        float f = oip__num_to_float(&num);
        if (!isfinite(f))
            return oip__fail(r->err, ATTN_EINVAL,
                             "%s[%zu]: %.*s%s is out of FP32 range", r->field,
                             i, len, r->p, len == 40 ? "..." : "");
        if (i < r->count)
            ((float *)r->out)[i] = f;
    } else {
        int64_t v;
        if (!num.is_int)
            return oip__fail(r->err, ATTN_EINVAL,
                             "%s[%zu]: expected an integer, got %.*s%s",
                             r->field, i, len, r->p, len == 40 ? "..." : "");
        int bad = oip__num_to_i64(&num, &v) ||
                  (r->dtype == OIP_INT32 && (v < INT32_MIN || v > INT32_MAX));
        if (bad)
            return oip__fail(r->err, ATTN_EINVAL,
                             "%s[%zu]: %.*s%s is out of %s range", r->field, i,
                             len, r->p, len == 40 ? "..." : "",
                             oip_dtype_name(r->dtype));
        if (i < r->count) {
            if (r->dtype == OIP_INT32)
                ((int32_t *)r->out)[i] = (int32_t)v;
            else
                ((int64_t *)r->out)[i] = v;
        }
    }
    r->p = e;
    r->n++;
    return 0;
wrong_kind:
    /* a word but the literal its first letter starts ("nan", "tru") is
     * named as it is, not as null or a boolean */
    if (bad_word(r->p, r->end, word, sizeof word) &&
        !literal_at(r->p, r->end, "null") && !literal_at(r->p, r->end, "true") &&
        !literal_at(r->p, r->end, "false"))
        return oip__fail(r->err, ATTN_EINVAL, "%s[%zu]: expected %s, got %s",
                         r->field, i, want_of(r->dtype), word);
    if (c == 't' || c == 'f' || c == 'n' || c == '"' || c == '{' ||
        c == '-' || (c >= '0' && c <= '9'))
        return oip__fail(r->err, ATTN_EINVAL, "%s[%zu]: expected %s, got %s",
                         r->field, i, want_of(r->dtype), kind_of(c));
    return rd_syntax(r, "unexpected character");
}

/*
 * rd_run: one element, then (FP32) the rest of a flat run "a,b,c" or
 * "a, b, c" (one space after each comma: Python's json.dumps) in a tight
 * loop, the common shapes of big arrays. Anything unusual (other
 * whitespace, a bad or out-of-range number) drops back to rd_scalar, which
 * reports errors.
 */
static int rd_run(reader *r)
{
    int rc = rd_scalar(r);
    if (rc || r->dtype != OIP_FP32)
        return rc;
    float *out = r->out;
    /* eight at a time where the CPU can; after a block declined (another
     * shape, or no AVX-512), the next numbers go one by one, 8 of them,
     * twice as many after each block declined in a row, up to 512 (long
     * numbers throughout cost a declined block in hundreds) */
    int one_by_one = 0, backoff = 8;
    for (;;) {
        const char *q = r->p + 1;
        if (r->end - r->p < 3 || r->p[0] != ',')
            break;
        q += *q == ' ';
        if ((unsigned)(unsigned char)*q - '0' > 9 && *q != '-')
            break;
        if (!one_by_one && r->n + 8 <= r->count) {
            const char *e8 = oip__short_floats8(q, r->end, out + r->n);
            if (e8) {
                r->n += 8;
                r->p = e8;
                backoff = 8;
                continue;
            }
            one_by_one = backoff;
            backoff += backoff < 512 ? backoff : 0;
        }
        one_by_one -= one_by_one > 0;
        float sf;
        const char *se = oip__short_float(q, r->end, &sf);
        if (se) {
            if (r->n < r->count)
                out[r->n] = sf;
            r->n++;
            r->p = se;
            continue;
        }
        oip__num num;
        const char *e = oip__lex_number(q, r->end, &num);
        float f = e ? oip__num_to_float(&num) : 0.0f;
        if (!e || !isfinite(f)) {
            r->p = q;
            return rd_scalar(r);
        }
        if (r->n < r->count)
            out[r->n] = f;
        r->n++;
        r->p = e;
    }
    return 0;
}

/*
 * oip__read_data: an explicit-stack walk: after '[' a value or ']'; after a
 * value ',' or ']' (or the end at depth 0). Depth is bounded by the
 * scanner's OIP_MAX_DEPTH check, re-checked here so the reader stands alone.
 */
int oip__read_data(const char *s, size_t len, oip_dtype dtype, void *out,
                   size_t count, const char *field, char *err)
{
    reader r = {s, s + len, s, dtype, out, count, 0, field, err};
    int depth = 0, rc;
    rd_ws(&r);
    if (r.p >= r.end || *r.p != '[')
        return oip__fail(err, ATTN_EINVAL, "%s: expected an array, got %s",
                         field, r.p < r.end ? kind_of(*r.p) : "nothing");
    for (;;) {
        /* expecting a value, or ']' right after '[' */
        rd_ws(&r);
        if (r.p >= r.end)
            return rd_syntax(&r, "unterminated array");
        if (*r.p == '[') {
            if (++depth > OIP_MAX_DEPTH)
                return rd_syntax(&r, "nesting too deep");
            r.p++;
            rd_ws(&r);
            if (r.p < r.end && *r.p == ']')
                goto close; /* empty array */
            continue;
        }
        if ((rc = rd_run(&r)))
            return rc;
        for (;;) { /* after a value */
            rd_ws(&r);
            if (r.p >= r.end)
                return rd_syntax(&r, "unterminated array");
            if (*r.p == ',') {
                r.p++;
                break;
            }
            if (*r.p != ']')
                return rd_syntax(&r, "expected ',' or ']'");
        close:
            r.p++;
            if (--depth == 0) {
                rd_ws(&r);
                if (r.p != r.end)
                    return rd_syntax(&r, "data after the array");
                goto done;
            }
        }
    }
done:
    if (r.n != count)
        return oip__fail(err, ATTN_EINVAL, "%s: expected %zu value%s, got %zu",
                         field, count, count == 1 ? "" : "s", r.n);
    return 0;
}
