/* err.c - text for the engine's error codes. */
#include "attn.h"

#include <errno.h>

int attn_errno_code(int e)
{
    return e == ENOENT ? ATTN_ENOTFOUND
           : e == ENOMEM || e == EMFILE || e == ENFILE ? ATTN_ENOMEM
                                                       : ATTN_EIO;
}

const char *attn_strerror(int code)
{
    switch (code) {
    case ATTN_OK:
        return "success";
    case ATTN_EINVAL:
        return "invalid argument";
    case ATTN_ENOMEM:
        return "out of memory";
    case ATTN_EOVERFLOW:
        return "size overflow";
    case ATTN_EFORMAT:
        return "malformed data";
    case ATTN_EIO:
        return "input/output error";
    case ATTN_ENOTFOUND:
        return "not found";
    case ATTN_ERANGE:
        return "result not finite";
    case ATTN_EFULL:
        return "budget full";
    case ATTN_ECHANGED:
        return "file changed while being read";
    }
    return "unknown error";
}
