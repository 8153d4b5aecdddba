/*
 * text.c - strings and numbers written on the request path without
 * printf (see srv.h). Any thread.
 */
#include "server/srv.h"

#include <string.h>

void srv_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

const char *srv_fmt_u(char d[24], unsigned long long v)
{
    char *q = d + 24;
    *--q = 0;
    do
        *--q = (char)('0' + v % 10);
    while (v /= 10);
    return q;
}
