/*
 * oip_pb.h - the gRPC binding's infer messages (proto/kserve.proto:
 * ModelInferRequest / ModelInferResponse) to and from the same oip_request
 * and oip_output structs the JSON binding uses, so a gRPC request is
 * checked, scheduled and computed exactly as a REST one. Pure library like
 * oip.h: no sockets, no threads, any thread may call it.
 *
 * Decoding (oip_pb_decode) applies oip_decode's rules with its messages
 * ("inputs[0].shape: dimension 1 is -3, must be >= 1"): names, datatypes,
 * shapes, element counts against the contents, finite floats, BOOL 0/1,
 * limits and the memory budget. Tensor data comes either as
 * raw_input_contents (one little-endian entry per input, in input order:
 * what Triton's clients send; FP16 and BF16 only this way) or as typed
 * contents (fp32_contents, int_contents, int64_contents, bool_contents),
 * never both. Request parameters: causal, retain, binary_data_output
 * (bool_param), tokens (string_param holding a JSON array of strings),
 * Triton's sequence_id (int64/uint64/string), sequence_start and
 * sequence_end (bool), attnd's sequence_position (int64/uint64).
 * The protobuf parse itself runs under an allocator capped by the memory
 * budget. A string field holding a NUL byte is refused
 * (oip_pb_check_strings).
 *
 * Encoding (oip_pb_encode) writes a ModelInferResponse: outputs as
 * raw_output_contents when any output asks for binary (the decoder sets
 * binary_data_output when the request came raw), else typed contents; the
 * extra parameters (a JSON object, e.g. {"map_id":"m3-1a2b"}) become
 * response parameters. The message is written OIP_PB_HEADROOM bytes into
 * *body, leaving room for the gRPC frame header the server adds in place.
 */
#ifndef ATTN_OIP_PB_H
#define ATTN_OIP_PB_H

#include <stddef.h>
#include <stdint.h>

#include "proto/oip.h"

/* Bytes free before the encoded message: a 5-byte gRPC frame header plus a
 * ModelStreamInferResponse field header (tag + 10-byte varint). */
#define OIP_PB_HEADROOM 16

/*
 * oip_pb_decode: parse a ModelInferRequest (len bytes) into req, as
 * oip_decode does with a JSON body (header_len is ignored: same signature,
 * so the daemon can pick either decoder). 0, or ATTN_EINVAL /
 * ATTN_EOVERFLOW / ATTN_ENOMEM with err naming the field. On failure req is
 * empty (oip_request_free stays safe).
 */
int oip_pb_decode(oip_request *req, const char *body, size_t len,
                  size_t header_len, const oip_limits *lim, char *err);

/*
 * oip_pb_encode: a ModelInferResponse of outs (see oip_encode for the
 * arguments). *body (malloc'd) holds OIP_PB_HEADROOM free bytes, then the
 * message; *len counts both; *header_len is set to OIP_PB_HEADROOM.
 * 0, ATTN_EINVAL (bad output or extra_params) or ATTN_ENOMEM.
 */
int oip_pb_encode(const char *model_name, const char *id,
                  const oip_output *outs, int n_outs, const char *extra_params,
                  char **body, size_t *len, size_t *header_len, char *err);

/*
 * oip_pb_peek_model: model_name and model_version of a ModelInferRequest
 * without parsing the rest (the server needs the model before it hands the
 * message to the pool). name and version get at most cap - 1 bytes (a
 * longer version is cut there: it names no version either way). 0, or
 * ATTN_EINVAL when the top-level wire format is broken or the name is
 * longer (err says which).
 */
int oip_pb_peek_model(const char *msg, size_t len, char *name, char *version,
                      size_t cap, char *err);

/*
 * oip_pb_peek_seq_id: the request's parameters["sequence_id"] (an int64 or
 * uint64 param >= 1, or a string oip_sequence_id_valid takes: what
 * oip_pb_decode takes) as text into id (OIP_MAX_SEQ_ID bytes), read off the
 * wire as oip_pb_peek_model reads, without a parse; oip_peek_sequence_id's
 * signature (header_len is ignored). 1 when found, else 0 (id ""). For a
 * request refused undecoded. Any thread.
 */
int oip_pb_peek_seq_id(const char *msg, size_t len, size_t header_len,
                       char *id);

/*
 * The echo of a stream's failed request: Triton's server answers a
 * ModelStreamInfer request that fails with a ModelStreamInferResponse
 * whose error_message is set and whose infer_response carries the
 * request's id (and, for one that failed once issued, its model_name and
 * model_version) "so that client knows which request failed". attnd
 * echoes all three, whole, whenever it could read them. Fields 1-3 of
 * ModelInferRequest and of ModelInferResponse are the same three strings,
 * so an echo is as long as the request's own fields. OIP_PB_ECHO_MAX
 * bytes hold the echo of any request attnd could serve (names up to the
 * server's 128 bytes, an id up to OIP_MAX_ID - 1), and are the start of
 * a request that holds them first (every protobuf serializer writes
 * fields in number order); a longer one (a request refused for it) needs
 * oip_pb_echo_size bytes.
 */
#define OIP_PB_ECHO_NAME 129 /* model_name, model_version: < this many bytes
                                (the server's model names, SRV_NAME_MAX) */
#define OIP_PB_ECHO_MAX (3 * 3 + 2 * (OIP_PB_ECHO_NAME - 1) + OIP_MAX_ID - 1)

/* model_name, model_version and id (in field order): each n[i] bytes at
 * f[i], inside the message read (not NUL-terminated; n[i] 0: none). */
typedef struct oip_pb_echo {
    const char *f[3];
    size_t n[3];
} oip_pb_echo;

/*
 * oip_pb_peek_echo: e from the top-level model_name, model_version and id
 * of a ModelInferRequest (msg, len bytes: the message, or only its first
 * bytes), read off the wire as oip_pb_peek_model reads, without a parse;
 * e points into msg. The last of a field counts, as in the parse; one
 * that could not go back in a protobuf string (not UTF-8) is none, a NUL
 * byte and any length go back as they came. Reading stops where the wire
 * format breaks (or the bytes end, a field cut there included), keeping
 * what came before. Never fails; any thread.
 */
void oip_pb_peek_echo(const char *msg, size_t len, oip_pb_echo *e);

/* oip_pb_echo_size: the bytes oip_pb_echo_encode writes for e. */
size_t oip_pb_echo_size(const oip_pb_echo *e);

/*
 * oip_pb_echo_encode: e as a ModelInferResponse (its fields model_name,
 * model_version and id, those not empty) into out, oip_pb_echo_size(e)
 * bytes; returns them (0: nothing to echo, an empty message).
 */
size_t oip_pb_echo_encode(const oip_pb_echo *e, char *out);

/* oip_pb_put_varint: v as a protobuf varint at out; its length (at most
 * 10 bytes). */
size_t oip_pb_put_varint(unsigned char *out, uint64_t v);

/*
 * oip_pb_check_strings: does no string field of the message at msg (len
 * bytes; d its descriptor, e.g. &inference__model_ready_request__descriptor),
 * nor of a message inside it, hold a NUL byte? protobuf-c hands strings
 * over NUL-terminated, so one inside would cut a name, id or key there
 * ("demo\0x" naming demo, "causal\0x" read as causal), where REST's JSON
 * refuses \u0000 and Triton compares the whole string. 0, or ATTN_EINVAL
 * with err (OIP_ERRMAX) naming the field by its path ("inputs.name",
 * "parameters.key"). A wire format it cannot walk is the parse's to
 * refuse: 0. oip_pb_decode and oip_pb_peek_model check this themselves.
 */
struct ProtobufCMessageDescriptor;
int oip_pb_check_strings(const struct ProtobufCMessageDescriptor *d,
                         const char *msg, size_t len, char *err);

#endif
