/*
 * bits.h - a float's IEEE-754 bits and back, for the tests/proto suites
 * that compare floats bit for bit (header-only).
 */
#ifndef ATTN_TESTS_PROTO_BITS_H
#define ATTN_TESTS_PROTO_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
