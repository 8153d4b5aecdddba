/*
 * accept.h - accept.c's calls: a door's listening socket, polled on the
 * loop and accepted by attnd itself (http_accept.c for REST, grpc_conn.c
 * for gRPC).
 */
#ifndef ATTND_ACCEPT_H
#define ATTND_ACCEPT_H

#include "server/srv.h"

/* A door's listener (srv_accept, srv.h). Loop thread.
 * srv_accept_init: none yet (fd -1), for s's door named door (static).
 * srv_accept_listen: a listening socket on --host and port, the setting
 * --<flag> (below 0: any free port) (SO_REUSEADDR; SO_REUSEPORT
 * with --reuse-port 1; on an IPv6 address IPV6_V6ONLY as the system has
 * it: "::" takes IPv4 clients too, as 0.0.0.0 its own), its bound port
 * in *bound, and in *v6 (may be NULL) whether the address is IPv6; 0, or
 * -1 with err (SRV_ERRMAX): the host does not resolve, the address is in
 * use, or why it cannot listen (nothing open).
 * srv_accept_start: poll it; each time it is readable, accept up to a
 * bounded number of connections (non-blocking, close-on-exec), each
 * after room said yes, each to take (the door closes it). An accept that
 * fails for want of descriptors or kernel memory is logged (a run's first
 * at once, then at most a line a second with the count: "<door>: cannot
 * accept a connection: ...") and pauses the listener SRV_ACCEPT_RETRY_MS,
 * its connections waiting in the listen backlog; "<door>: accepting
 * again" once one succeeds. data: the handles' data (on_closed's too).
 * srv_accept_pause: stop polling for ms (a door without room for more);
 * srv_accept_resume: poll again now.
 * srv_accept_stop: close the socket and both handles (on_closed for each;
 * nothing when it never listened). */
#define SRV_ACCEPT_RETRY_MS 100 /* a failed accept waits this long (nginx: 500) */
void srv_accept_init(srv_accept *a, srv *s, const char *door);
int srv_accept_listen(srv_accept *a, const char *flag, long long port,
                      int *bound, int *v6, char *err);
void srv_accept_start(srv_accept *a, void *data, int (*room)(void *data),
                      void (*take)(void *data, int fd,
                                   const struct sockaddr_storage *peer,
                                   socklen_t len));
void srv_accept_pause(srv_accept *a, unsigned ms);
void srv_accept_resume(srv_accept *a);
void srv_accept_stop(srv_accept *a, uv_close_cb on_closed);

#endif
