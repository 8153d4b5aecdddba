/*
 * params.c - parameter names both decoders (decode.c's JSON, pb.c's
 * protobuf) refuse rather than ignore.
 */
#include <string.h>

#include "oip_internal.h"

/* oip__shm_param: see oip_internal.h. */
int oip__shm_param(const char *key)
{
    return !strcmp(key, "shared_memory_region") ||
           !strcmp(key, "shared_memory_byte_size") ||
           !strcmp(key, "shared_memory_offset");
}
