/*
 * oip.h - the wire format: Open Inference Protocol v2 (KServe v2 / Triton
 * HTTP) requests and responses, JSON and Triton's binary-tensor extension,
 * to and from plain C structs. No sockets, no threads: a pure library that
 * the daemon calls on its pool threads, testable and fuzzable alone.
 *
 * Decoding checks everything that can be checked without a model: JSON
 * validity (exact length, duplicate keys rejected), datatypes, shapes
 * (dims > 0 ... see oip_decode), element count = product of shape with
 * overflow-checked products, binary_data_size against the body, header
 * length within the body, and the memory budget. Every error message names
 * the offending field, e.g. "inputs[0].shape: dimension 2 is -3".
 *
 * Tensor data is decoded to host types: FP32/FP16/BF16 -> float, INT32 ->
 * int32_t, INT64 -> int64_t (range-checked by the caller), BOOL -> uint8_t
 * (0/1). The request owns its decoded buffers.
 *
 * Floating-point data must be finite: JSON has no NaN/Inf, a JSON number
 * outside the FP32 range is refused, and binary FP32/FP16/BF16 elements
 * that are NaN or Inf are refused too (naming the element). BOOL binary
 * bytes must be 0 or 1. FP16/BF16 travel only as binary data (as in Triton);
 * BYTES is refused as an input.
 *
 * Error codes (the daemon maps them to HTTP statuses):
 *   ATTN_EINVAL    malformed request: JSON, field type, shape, data      400
 *   ATTN_EOVERFLOW over a limit: inputs/outputs/tokens, or a size
 *                  product that overflows                                400
 *   ATTN_EFULL     over the memory budget: a tensor of more than
 *                  max_elements, decoded tensors or a skeleton past it   413
 *                  (the daemon's request-memory, as its outputs are)
 *   ATTN_ENOMEM    allocation failed                                    503
 */
#ifndef ATTN_OIP_H
#define ATTN_OIP_H

#include <stddef.h>
#include <stdint.h>

#define OIP_MAX_RANK 8
#define OIP_MAX_NAME 64   /* tensor names: at most OIP_MAX_NAME - 1 bytes */
#define OIP_MAX_ID 256    /* request id: at most OIP_MAX_ID - 1 bytes */
#define OIP_MAX_TOKEN 256 /* one parameters.tokens label: < this many bytes */
#define OIP_MAX_SEQ_ID 129 /* parameters.sequence_id as text: < this many bytes */
#define OIP_MAX_DEPTH 64  /* JSON nesting */
#define OIP_ERRMAX 512

/* Defaults used for limits left at 0 (or lim == NULL). */
#define OIP_DEFAULT_MAX_ELEMENTS ((size_t)1 << 26) /* 64 Mi elements */
#define OIP_DEFAULT_MEMORY_BUDGET ((size_t)1 << 28) /* 256 MiB */
#define OIP_DEFAULT_MAX_INPUTS 16
#define OIP_DEFAULT_MAX_OUTPUTS 16
#define OIP_DEFAULT_MAX_TOKENS 8192

typedef enum oip_dtype {
    OIP_INVALID = 0,
    OIP_BOOL,
    OIP_INT32,
    OIP_INT64,
    OIP_FP16,
    OIP_BF16,
    OIP_FP32,
    OIP_BYTES, /* accepted in metadata only; never as attention input */
} oip_dtype;

const char *oip_dtype_name(oip_dtype t);      /* "FP32", ... */
oip_dtype oip_dtype_parse(const char *name);  /* OIP_INVALID if unknown */

/* Limits the decoder enforces; the daemon fills them from its settings.
 * A field left at 0 takes its OIP_DEFAULT_* value. */
typedef struct oip_limits {
    size_t max_elements;     /* per tensor */
    size_t memory_budget;    /* bytes the decoded request may occupy,
                                including an estimate of its JSON tree */
    int max_inputs;          /* inputs[] entries */
    int max_outputs;         /* outputs[] entries */
    int max_tokens;          /* parameters.tokens entries */
    int strict_params;       /* 1: a parameter (request, output, input)
                                attnd does not read is refused, not
                                ignored (--strict-parameters) */
} oip_limits;

typedef struct oip_tensor {
    char name[OIP_MAX_NAME];
    oip_dtype wire_dtype;        /* datatype as sent */
    int rank;
    int64_t shape[OIP_MAX_RANK]; /* every dim >= 1 */
    size_t count;                /* product of shape */
    void *data;                  /* decoded (see above); owned by request */
} oip_tensor;

typedef struct oip_output_req {
    char name[OIP_MAX_NAME];
    int binary; /* parameters.binary_data: -1 unset, 0, 1 */
} oip_output_req;

/* Request parameters attnd understands; others are ignored as Triton does. */
typedef struct oip_params {
    int causal;             /* -1 unset, 0, 1 */
    int retain;             /* 0/1 */
    int binary_data_output; /* 0/1 */
    char **tokens;          /* parameters.tokens, or NULL */
    int n_tokens;
    /* parameters.tokens sent as one list per batch item: how many (the
     * lists back to back in tokens, n_tokens / token_items each); 0: one
     * list, labelling every item */
    int token_items;
    /* Triton's sequence parameters (tritonclient.http sends all three when
     * its sequence_id is not 0). sequence_id is a JSON integer 1 ..
     * 2^64 - 1 (read from the text: jansson stops at 2^63 - 1), kept as
     * its decimal text, or a non-empty string of printable
     * ASCII without '/' (< OIP_MAX_SEQ_ID bytes): the number 7 and the
     * string "7" name the same sequence. seq_id[0] == 0: no sequence. */
    char seq_id[OIP_MAX_SEQ_ID];
    int seq_start, seq_end; /* 0/1 (the daemon checks they come with an id) */
    /* parameters.sequence_position (attnd's): the tokens the sequence holds
     * before this step, 0 .. INT32_MAX; a step at a position below the
     * sequence's length replaces the tokens from there on. */
    int has_seq_pos, seq_pos;
    /* parameters.scale (attnd's, for the built-in sdpa: PyTorch 2's
     * scaled_dot_product_attention scale=): what q is multiplied by
     * before Q K^T, a number whose float is positive and finite; 0 when
     * not given (1/sqrt(d_k)). */
    float scale;
} oip_params;

typedef struct oip_request {
    char *id;               /* echoed; NULL when absent */
    oip_tensor *inputs;
    int n_inputs;
    oip_output_req *outputs; /* NULL/0 when the request has no outputs list */
    int n_outputs;
    oip_params params;
    size_t bytes;           /* decoded size, counted against the budget */
} oip_request;

/*
 * oip_decode: parse one infer request body. header_len is the value of the
 * Inference-Header-Content-Length header (the JSON part's length) or 0 when
 * absent (the whole body is JSON). Binary inputs (parameters.
 * binary_data_size) follow the header in input order and must use the body
 * exactly. lim may be NULL (all defaults). Nothing is allocated before
 * every shape, size and the memory budget has been checked. On success req
 * owns everything (free with oip_request_free); on failure req is left
 * empty (oip_request_free is still safe) and err (OIP_ERRMAX bytes, may be
 * NULL) names the field. Any thread.
 */
int oip_decode(oip_request *req, const char *body, size_t len,
               size_t header_len, const oip_limits *lim, char *err);
void oip_request_free(oip_request *req);

/* oip_sequence_id_valid: 1 when s (len bytes) may be a string sequence id
 * (1 .. OIP_MAX_SEQ_ID - 1 bytes of printable ASCII, no space, '/', '"' or
 * backslash, and neither "." nor ".."), else 0. */
int oip_sequence_id_valid(const char *s, size_t len);
/* oip_sequence_id_dots: 1 when s (len bytes) is "." or "..", which the
 * rule above refuses for OIP_SEQ_ID_DOTS_WHY; the errors that refuse an
 * id say that instead of the rule's bytes then. */
int oip_sequence_id_dots(const char *s, size_t len);
#define OIP_SEQ_ID_DOTS_WHY                                                    \
    "'.' and '..' are no sequence ids: fetch, curl and proxies take them "    \
    "out of a path (RFC 3986's dot segments), so GET and DELETE "             \
    "/v2/sequences/{id} could not name the sequence"
/* oip_sequence_id_error: 0 when s (len bytes) is a sequence id
 * (oip_sequence_id_valid); else ATTN_EINVAL and err (OIP_ERRMAX bytes)
 * says why, after where ("parameters.sequence_id", "Attnd-Sequence-Id",
 * "path"): "where: '..': " OIP_SEQ_ID_DOTS_WHY for a dot id, otherwise
 * the rule, with s (its first 200 bytes) when quote ("where: 's' is not
 * a sequence id (1 to 128 bytes of ...)": a header's or a path's) or
 * without ("where: a string id is 1 to 128 bytes of ...": a body's). The
 * one place the rule's wording is written. */
int oip_sequence_id_error(const char *s, size_t len, const char *where,
                          int quote, char *err);

/* The error of a parameters.scale whose float is not positive and finite
 * (0, -1, 1e-50, 1e39) or that is no number. */
#define OIP_SCALE_MSG "parameters.scale: expected a positive number that " \
                      "a float holds (1.4e-45 to 3.4e38), what q is "      \
                      "multiplied by before Q K^T"

/* oip_peek_sequence_id: the sequence_id of an infer request body (as
 * oip_decode takes it) into id (OIP_MAX_SEQ_ID bytes, as oip_params has
 * it) without decoding the body: one pass over its JSON for the first
 * "sequence_id" key whose value is an id the decoder would take. 1 when
 * found, else 0 (id ""). It does not check where the key stands (a body
 * may name an id it would not be decoded as having); for a request that
 * is refused undecoded. Any thread. */
int oip_peek_sequence_id(const char *body, size_t len, size_t header_len,
                         char *id);

/* oip_find_input: the input called name, or NULL. */
const oip_tensor *oip_find_input(const oip_request *req, const char *name);

/* One output to encode. data is FP32 (float), INT32 (int32_t), INT64
 * (int64_t) or BOOL (uint8_t); dims >= 0. */
typedef struct oip_output {
    const char *name;
    oip_dtype dtype;
    int rank;
    int64_t shape[OIP_MAX_RANK];
    const void *data;
    int binary; /* 1: send as binary data after the JSON header */
} oip_output;

/*
 * oip_encode: build an infer response. extra_params is a JSON object text
 * merged into the response "parameters" (e.g. "{\"map_id\":\"m12\"}") or
 * NULL. *body is malloc'd (caller frees); *header_len is the JSON part's
 * length when any output is binary (send it as
 * Inference-Header-Content-Length), else 0. Floats are printed so that they
 * parse back to the same float (9 significant digits, trailing zeros
 * dropped). id and model_name are escaped. Returns 0, ATTN_ENOMEM,
 * ATTN_EFORMAT (a non-finite float in a JSON output: the client's inputs
 * overflowed, a 400), or ATTN_EINVAL (bad output description, extra_params
 * not a JSON object) with a message in err (may be NULL).
 * Any thread.
 */
int oip_encode(const char *model_name, const char *id,
               const oip_output *outs, int n_outs, const char *extra_params,
               char **body, size_t *len, size_t *header_len, char *err);
/* oip_encode_fn: an encoder with oip_encode's contract (oip_pb_encode). */
typedef int oip_encode_fn(const char *model_name, const char *id,
                          const oip_output *outs, int n_outs,
                          const char *extra_params, char **body, size_t *len,
                          size_t *header_len, char *err);

/*
 * oip_json_floats: f[0..n) as JSON numbers, as oip_encode prints them (9
 * significant digits that read back as the same float), each followed by
 * ','; a NaN or infinity as null. out needs n * OIP_JSON_FLOAT_MAX bytes.
 * Returns the bytes written. Any thread.
 */
#define OIP_JSON_FLOAT_MAX 17
size_t oip_json_floats(const float *f, size_t n, char *out);

/* oip_utf8_mend: s (NUL-terminated) with each byte that does not begin a
 * valid UTF-8 sequence, as oip_error_body judges them, made '?'. */
void oip_utf8_mend(char *s);

/* oip_utf8_seq: the length (1 to 4) of the valid UTF-8 sequence that begins
 * at s (n >= 1 bytes there), as oip_error_body judges them, or 0 when s[0]
 * begins none (a stray byte, or a sequence cut short by n). */
size_t oip_utf8_seq(const char *s, size_t n);

/* oip_error_body: {"error": msg} as a malloc'd JSON string (escaped; bytes
 * that are not valid UTF-8 become U+FFFD). NULL only when out of memory. */
char *oip_error_body(const char *msg);

/* Element size on the wire (binary form): 1 BOOL, 2 FP16/BF16, 4 INT32/FP32,
 * 8 INT64; 0 for BYTES/INVALID. */
size_t oip_dtype_wire_size(oip_dtype t);

/* Element size once decoded (see above): float for FP32/FP16/BF16. */
size_t oip_dtype_host_size(oip_dtype t);

/* IEEE binary16 and bfloat16 <-> float. To float: exact (normals,
 * subnormals, +-0, +-inf; NaNs stay NaN with their payload). From float:
 * round to nearest, ties to even; overflow gives inf; NaN stays NaN (quiet).
 * Any thread. */
float oip_fp16_to_float(uint16_t h);
float oip_bf16_to_float(uint16_t b);
uint16_t oip_float_to_fp16(float f);
uint16_t oip_float_to_bf16(float f);

#endif
