/*
 * linger.h - a closed connection's last bytes are read, not reset
 * (linger.c). Loop thread.
 */
#ifndef ATTN_LINGER_H
#define ATTN_LINGER_H

typedef struct srv srv;
typedef struct srv_linger srv_linger;
typedef struct srv_conn srv_conn;

#include <stdint.h>

/* srv_linger_start: -1 when out of memory (nothing started). */
int srv_linger_start(srv *s);
/* srv_linger_stop: the stop begins: from now on a socket lingers (those
 * lingering already, and REST ones closed from now on) only while its
 * client has not acknowledged every byte of its answers, linger-ms 0 too,
 * until srv_linger_end (the caller's wait: ms, the flush's time left);
 * the others close now. srv_linger_poll: close those whose client has
 * every byte now; how many are left, *grpc (when not NULL) of them
 * gRPC connections' (closed before the stop, lingering then).
 * srv_linger_end: close every lingering socket now, and later closes do
 * not linger; how many REST ones still held bytes their client had not
 * acknowledged, *grpc (when not NULL) the gRPC ones (else not counted). */
void srv_linger_stop(srv *s, uint64_t ms);
int srv_linger_poll(srv *s, int *grpc);
int srv_linger_end(srv *s, int *grpc);
/* srv_sock_unacked: bytes of socket fd the kernel still holds that its
 * peer has not acknowledged (unsent and unacknowledged, a FIN's 1 too:
 * SIOCOUTQ); -1 when not known (not Linux, an error). */
int srv_sock_unacked(int fd);
/* srv_sock_unread: 1 when bytes wait in socket fd that its owner has not
 * read yet (FIONREAD), else 0 (none, or not known). */
int srv_sock_unread(int fd);
/* srv_sock_received: bytes socket fd's peer has sent it, read or not
 * (TCP_INFO; sock_rx.c); 0 when not known. */
uint64_t srv_sock_received(int fd);
/* srv_sock_ack_age_ms: how long ago (ms) socket fd's peer last sent an
 * ACK that was not stale (TCP_INFO's last_ack_recv: any segment of its,
 * data or a bare ACK, a window update as it reads what its kernel holds
 * too); -1 when not known. */
long srv_sock_ack_age_ms(int fd);
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
