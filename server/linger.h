/*
 * linger.h - a closed connection's last bytes are read, not reset
 * (linger.c). Loop thread.
 */
#ifndef ATTN_LINGER_H
#define ATTN_LINGER_H

typedef struct srv srv;
typedef struct srv_linger srv_linger;

/* srv_linger_start: -1 when out of memory (nothing started); nothing to
 * start when linger-ms is 0. srv_linger_stop: close every lingering socket
 * now; later closes do not linger. */
int srv_linger_start(srv *s);
void srv_linger_stop(srv *s);
/* srv_linger_close: fd (a connection's socket, open until its owner closes it
 * after this call) lingers when its client has not ended its side: a dup
 * of it reads and discards until the client ends it or linger-ms passes. */
void srv_linger_close(srv *s, int fd);
/* sockets lingering now, and since start: lingered, ended by linger-ms */
void srv_linger_counts(const srv *s, int *now, unsigned long long *kept,
                       unsigned long long *cut);

#endif
