/*
 * linger.h - a closed connection's last bytes are read, not reset
 * (linger.c). Loop thread.
 */
#ifndef ATTN_LINGER_H
#define ATTN_LINGER_H

typedef struct srv srv;
typedef struct srv_linger srv_linger;
typedef struct srv_conn srv_conn;

/* srv_linger_start: -1 when out of memory (nothing started); nothing to
 * start when linger-ms is 0. srv_linger_stop: close every lingering socket
 * now; later closes do not linger. */
int srv_linger_start(srv *s);
void srv_linger_stop(srv *s);
/* srv_linger_close: fd, c's socket (open until its owner closes it after
 * this call; c already removed from the guard's list), lingers when its client
 * has not ended its side and the guard did not shut it: a dup of it reads
 * and discards until the client ends it, linger-ms passes or max-body
 * bytes are discarded. */
void srv_linger_close(srv *s, int fd, const srv_conn *c);
/* srv_linger_refused: the same for a connection answered 503 at accept;
 * such sockets take at most half of the max-connections that linger. */
void srv_linger_refused(srv *s, int fd, const srv_conn *c);
/* sockets lingering now, and since start: lingered, ended by linger-ms
 * or max-body (not by their client) */
void srv_linger_counts(const srv *s, int *now, unsigned long long *kept,
                       unsigned long long *cut);

#endif
