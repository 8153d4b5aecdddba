/*
 * clock.c - the daemon's clock: srv_now_ns, CLOCK_MONOTONIC in ns, which
 * every layer's times, deadlines and idle sweeps read. A file of its own so
 * that no layer takes its time from another, and so that a test can stand
 * a clock of its own in for it at link time (tests/server/seq_fixture.h).
 */
#include "server/srv.h"

#include <time.h>

uint64_t srv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
