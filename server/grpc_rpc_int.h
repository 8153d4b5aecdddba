/*
 * grpc_rpc_int.h - what grpc_rpc.c (the method table, inference,
 * statistics, the repository) and grpc_meta.c (health, metadata, the
 * model configuration) share; not part of the daemon's API. Loop thread.
 */
#ifndef ATTND_GRPC_RPC_INT_H
#define ATTND_GRPC_RPC_INT_H

#include <jansson.h>
#include <stddef.h>

#include "proto/kserve.pb-c.h"
#include "server/grpc.h"

/* The allocator of the calls' parses (srv_grpc__unpack): malloc and free,
 * each parse's blocks counted against its cap, noting a malloc that failed
 * (srv_grpc__unpack tells the two apart). Frees the messages it parsed
 * (protobuf_c_message_free_unpacked). */
extern ProtobufCAllocator srv_grpc__unpack_al;

/* srv_grpc__fail: r's REST error as a gRPC status, its words in err. */
int srv_grpc__fail(const srv_req *r, char *err);
/* srv_grpc__pack: a response message with OIP_PB_HEADROOM free bytes
 * before it (grpc_method.reply's out and len): GRPC_OK, or UNAVAILABLE. */
int srv_grpc__pack(const ProtobufCMessage *m, char **out, size_t *len,
                   char *err);
/* srv_grpc__answer_json: r's 200 answer as JSON; NULL with *code and err
 * when r failed (its REST error) or its answer cannot be read. */
json_t *srv_grpc__answer_json(const srv_req *r, int *code, char *err);
/* srv_grpc__unpack: msg (len bytes; freed here) as a message of d with
 * srv_grpc__unpack_al, its strings free of NUL bytes
 * (oip_pb_check_strings); NULL with *code and err when it is not one
 * (INVALID_ARGUMENT naming the message type or the string; UNAVAILABLE
 * when the parse ran out of memory), or when its parse needs more than
 * its cap: 64 KiB and twice len, at most --request-memory
 * (RESOURCE_EXHAUSTED naming the limit). */
ProtobufCMessage *srv_grpc__unpack(const ProtobufCMessageDescriptor *d,
                                   const srv_req *r, char *msg, size_t len,
                                   int *code, char *err);
/* srv_grpc__model_arg: name and version into r->arg[0] (REST's path
 * capture); only version "" or "1" exists. 0, or -1 with *code and err. */
int srv_grpc__model_arg(srv_req *r, const char *name, const char *version,
                        int *code, char *err);

/* grpc_meta.c's methods (health, metadata, configuration). */
extern const grpc_method srv_grpc__meta_methods[];
extern const size_t srv_grpc__n_meta_methods;

#endif
