/*
 * oip_internal.h - helpers shared by the proto/ sources and their tests;
 * not part of the daemon's API (double-underscore names, see STYLE.md).
 */
#ifndef ATTN_OIP_INTERNAL_H
#define ATTN_OIP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "oip.h"

/* Longest text oip__fmt_float writes (no terminator): "-1.23456789e-38". */
#define OIP__FLOAT_CHARS 16
_Static_assert(OIP__FLOAT_CHARS + 1 == OIP_JSON_FLOAT_MAX, "oip.h's bound");

/*
 * oip__fmt_float: writes f as a JSON number that parses back (correctly
 * rounded, e.g. by strtof) to the identical float: 9 significant digits,
 * trailing zeros dropped, fixed notation for exponents -5..8, else
 * d.ddde[-]x. -0 prints "-0". f must be finite. Returns the length (at most
 * OIP__FLOAT_CHARS); out is not terminated.
 */
size_t oip__fmt_float(float f, char *out);

/*
 * oip__fmt_floats: f[0..n) as oip__fmt_float writes them, each followed by
 * ','; every f must be finite. out needs n * (OIP__FLOAT_CHARS + 1) bytes.
 * Returns the bytes written. With simd set and a CPU with AVX-512 (F, DQ,
 * CD, VL, BW), eight floats at a time, else one by one: the same text.
 * oip__fmt_floats_simd: 1 when simd would take the AVX-512 path.
 */
size_t oip__fmt_floats(const float *f, size_t n, char *out, int simd);
int oip__fmt_floats_simd(void);

/* oip__fmt_i64: decimal integer; returns the length (<= 20), unterminated. */
size_t oip__fmt_i64(int64_t v, char *out);

/*
 * A JSON number token split into parts: the value is
 * (neg ? -1 : 1) * mant * 10^exp10 when digits <= 19, exact otherwise in
 * the text [start, end). is_int: the token had no fraction and no exponent.
 */
typedef struct oip__num {
    const char *start, *end;
    uint64_t mant;
    int exp10;
    int digits; /* significant digits collected into mant (capped at 20) */
    int neg;
    int is_int;
} oip__num;

/* oip__lex_number: lexes one JSON number (RFC 8259 grammar) at p (< end).
 * Returns the position after it, or NULL when p does not start a valid
 * number. */
const char *oip__lex_number(const char *p, const char *end, oip__num *n);

/* oip__num_to_float: the correctly rounded float of n (ties to even, as
 * strtof); *out is +-inf when the value is beyond FLT_MAX's rounding range.
 */
float oip__num_to_float(const oip__num *n);

/* oip__short_float: the common shape -?d.f (one integer digit, one to seven
 * fraction digits, not zero) parsed in one go: *out is what lexing and
 * oip__num_to_float give, and the end is returned; NULL (nothing decided)
 * for any other shape or a value the general path must decide. */
const char *oip__short_float(const char *p, const char *end, float *out);

/*
 * oip__short_floats8: eight numbers of that shape at p, each followed by
 * ',' and the next starting right after it or after one space; out[0..8)
 * gets what oip__short_float (or, for a zero, the general path) gives for
 * each, and the position of the eighth ',' is returned. NULL, with out's
 * contents meaningless, for any other text, fewer than OIP__FLOATS8_ROOM
 * bytes to end, or a CPU without AVX-512 (F, DQ, CD, VL, BW; the test is
 * oip__fmt_floats_simd's). Reads up to OIP__FLOATS8_ROOM bytes past p.
 */
#define OIP__FLOATS8_ROOM 144
const char *oip__short_floats8(const char *p, const char *end, float *out);

/* oip__num_to_i64: integer value of an is_int token; 0, or -1 when it does
 * not fit in int64_t. */
int oip__num_to_i64(const oip__num *n, int64_t *out);

/* Byte buffer with a hard cap, for the encoder. */
typedef struct oip__buf {
    char *p;
    size_t len, cap;
} oip__buf;

/* oip__utf8_valid: the n bytes at s are valid UTF-8 (no overlong form,
 * surrogate or code point past U+10FFFF). */
int oip__utf8_valid(const char *s, size_t n);

/* Where the scanner found each inputs[i].data value. */
typedef struct oip__span {
    size_t off, len; /* len 0: no "data" key */
} oip__span;

typedef struct oip__scan {
    oip__span *data;  /* one per inputs[] entry seen, cap max_inputs */
    int n_inputs;     /* entries of the root "inputs" array */
    size_t n_values;  /* JSON values and keys outside the data spans */
    size_t data_bytes; /* total length of the data spans */
    oip__span seq_id;  /* root.parameters.sequence_id when it is a number
                          (len 0: not one): read from the text, since a
                          uint64 id past INT64_MAX does not fit jansson */
    size_t json_end;   /* when data follows the root object: where it ends
                          (so the message can name the header length a
                          binary request left out); 0 otherwise */
    int truncated;     /* the grammar error is the text's end: the object
                          is cut short (or a header length too small) */
} oip__scan;

/*
 * oip__scan_json: validates the JSON text [0, len) (grammar, nesting up to
 * OIP_MAX_DEPTH, root an object) and records the span of every
 * root.inputs[i].data value without parsing its numbers (that is
 * oip__read_data's job). max_inputs bounds the inputs array. Returns 0,
 * ATTN_EINVAL or ATTN_EOVERFLOW with a message; sc->data is malloc'd
 * (free it even on failure).
 */
int oip__scan_json(const char *js, size_t len, int max_inputs,
                   oip__scan *sc, char *err);

/* The skeleton as a tree (jtree.c): a value's type, its string (NUL
 * terminated) or integer, and an array's elements or an object's members
 * (each with its key) in text order; len is the string's bytes or the
 * number of elements or members. */
typedef enum oip__jtype {
    OIP__JNULL, OIP__JFALSE, OIP__JTRUE, OIP__JINT, OIP__JREAL, OIP__JSTR,
    OIP__JARR, OIP__JOBJ
} oip__jtype;

typedef struct oip__jv {
    oip__jtype type;
    size_t len;
    long long num;
    double real; /* an OIP__JREAL's value */
    const char *str;
    const char *key; /* a member's, NUL terminated, klen bytes */
    size_t klen;
    struct oip__jv **kids;
} oip__jv;

typedef struct oip__jtree {
    oip__jv *root;
    struct block *blocks; /* the arena everything above is in */
} oip__jtree;

/*
 * oip__jtree_parse: the JSON text [0, len), which oip__scan_json accepted,
 * as a tree in t (free with oip__jtree_free, even on failure). Plain text
 * is read in one pass; the rest through jansson (duplicate keys refused),
 * whose messages it keeps. 0, ATTN_EINVAL or ATTN_ENOMEM with a message.
 * oip__jtree_slow, set by tests, sends every text through jansson.
 */
int oip__jtree_parse(oip__jtree *t, const char *text, size_t len, char *err);
void oip__jtree_free(oip__jtree *t);
extern int oip__jtree_slow;

/* oip__json_compact_object: 1 when text is a JSON object jansson would
 * dump compact as the same bytes: no whitespace outside strings, ASCII
 * strings without escapes, integers of at most 18 digits, no duplicate
 * key (jtree.c's one pass reads it whole); else 0, whether valid or not. */
int oip__json_compact_object(const char *text, size_t len);

/* oip__jget: o's member key, or NULL (o NULL or not an object); oip__jat:
 * a's element i, or NULL. */
const oip__jv *oip__jget(const oip__jv *o, const char *key);
const oip__jv *oip__jat(const oip__jv *a, size_t i);

/*
 * oip__read_data: parses one data value (a JSON array, flat or nested,
 * row-major) into out: count elements of host type for dtype (FP32 ->
 * float, INT32, INT64, BOOL -> uint8_t). field names the value in messages
 * ("inputs[0].data"). Counts every element even past count so the message
 * says how many came. Returns 0 or ATTN_EINVAL.
 */
int oip__read_data(const char *s, size_t len, oip_dtype dtype, void *out,
                   size_t count, const char *field, char *err);

/*
 * oip__decode_binary: t->count little-endian wire elements of
 * t->wire_dtype at src to host values in t->data (allocated by the
 * caller), refusing non-finite floats and BOOL bytes other than 0/1; i is
 * the input's index for the message. 0 or ATTN_EINVAL. (The JSON binding's
 * binary part and the gRPC binding's raw_input_contents.)
 */
int oip__decode_binary(const oip_tensor *t, const unsigned char *src, int i,
                       char *err);

/* oip__resolve_limits: *L = *lim (or zeros) with every unset limit
 * replaced by its OIP_DEFAULT_* (the JSON and the protobuf decoders). */
void oip__resolve_limits(oip_limits *L, const oip_limits *lim);

/* An output's parameters.classification other than 0 (Triton's
 * classification extension, which attnd does not serve), both decoders'
 * message; its one argument, the output's index (size_t). */
#define OIP_NO_CLASSIFICATION                                                  \
    "outputs[%zu].parameters.classification: attnd does not serve Triton's "   \
    "classification extension (the top classes as BYTES); ask for the "        \
    "output without it and take its largest values yourself"

/* oip__tokens_jv: parameters.tokens t into pr: one array of strings (it
 * labels every batch item), or an array of arrays of strings, one per
 * batch item, all as long (pr->token_items lists back to back); at most
 * max_tokens strings in all, each < OIP_MAX_TOKEN bytes. *bytes grows by
 * what the copies take. 0, or ATTN_EINVAL / ATTN_EOVERFLOW /
 * ATTN_ENOMEM with err naming the entry. oip__tokens_shape: the same
 * rules for a caller that knows only each entry's kind (kind(ctx, i, j):
 * j < 0 the entry i itself, else entry j of list i: 0 a string of len
 * bytes, 1 a list of len entries, -1 anything else); 0 with *items (0:
 * one list) and *n (strings in all), or the error. */
int oip__tokens_jv(oip_params *pr, const oip__jv *t, int max_tokens,
                   size_t *bytes, char *err);
typedef int (*oip__tokens_kind)(void *ctx, size_t i, long j, size_t *len);
int oip__tokens_shape(oip__tokens_kind kind, void *ctx, size_t count,
                      int max_tokens, int *items, size_t *n, char *err);

/* oip__shm_param: whether key is one of Triton's shared-memory
 * extension's tensor parameters (shared_memory_region, _byte_size,
 * _offset), which attnd does not serve: on an input the tensor would be
 * missing, on an output a client would read its region's stale bytes.
 * OIP_NO_SHM is both decoders' message; its arguments, the list
 * ("inputs"/"outputs", char *), the index (size_t), the key and what to
 * do instead (char *). */
int oip__shm_param(const char *key);
#define OIP_NO_SHM                                                             \
    "%s[%zu].parameters.%s: attnd does not serve Triton's shared-memory "       \
    "extension (system or CUDA; /v2 does not list it); %s"
#define OIP_NO_SHM_IN "send the tensor in the request instead"
#define OIP_NO_SHM_OUT "ask for the output without it: it comes in the answer"

/* oip__misspelt: the name of known (one of the NULL-terminated lists
 * below) that key, a parameter attnd does not read, is a misspelling of:
 * the same once both are lowercased without '_', '-', '.' and ' ', or
 * within one edit of it so folded (insert, delete, substitute, swap two
 * neighbours: 'sequence' and 'sequence_len', two from sequence_id and
 * sequence_end, are custom names and pass); NULL when key is one of
 * known or near none (then it passes, as Triton passes such parameters
 * to its backend). OIP_MISSPELT is its message; its arguments, where
 * ("parameters", "outputs[0].parameters"), the key and the name meant. */
const char *oip__misspelt(const char *key, const char *const *known);
extern const char *const oip__request_params[], *const oip__output_params[],
    *const oip__input_params[];
#define OIP_MISSPELT                                                           \
    "%s.%.64s: not a parameter attnd reads; did you mean '%s'? (others it "    \
    "does not know pass, as Triton passes them to its backend)"

/* oip__param_check: key, a parameter of where ("parameters",
 * "outputs[1].parameters"), refused when it misspells one of known
 * (OIP_MISSPELT) or, strict (oip_limits.strict_params), when it is none
 * of them; else 0. */
int oip__param_check(const char *where, const char *key,
                     const char *const *known, int strict, char *err);
/* oip__tensor_param: key, a parameter of outputs[i] (output) or
 * inputs[i]: Triton's shared-memory keys refused (OIP_NO_SHM), then
 * oip__param_check against that list's names; 0 or ATTN_EINVAL. */
int oip__tensor_param(int output, size_t i, const char *key, int strict,
                      char *err);

/* printf into err (OIP_ERRMAX bytes) when err is not NULL; returns code. */
int oip__fail(char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* oip__scale_valid: x as parameters.scale keeps it, its float, into
 * *out: 0, or -1 when that float is not positive and finite (answered
 * OIP_SCALE_MSG). decode.c's and pb.c's. */
static inline int oip__scale_valid(double x, float *out)
{
    float f = (float)x;
    if (!(f > 0) || f > 3.4028235e38f)
        return -1;
    *out = f;
    return 0;
}

#endif
