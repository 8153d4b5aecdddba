/*
 * dlhold.c - a library whose constructor never returns, for test_crash.c:
 * the thread whose dlopen runs it keeps holding the dynamic loader's lock
 * (glibc runs constructors under it), as a crash report must not need.
 * It writes one byte to the descriptor DLHOLD_FD names once it runs.
 */
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void hold(void)
{
    const char *fd = getenv("DLHOLD_FD");
    if (fd && write(atoi(fd), "h", 1) != 1)
        _exit(7);
    for (;;)
        pause();
}
