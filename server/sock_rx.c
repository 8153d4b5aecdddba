/*
 * sock_rx.c - how many bytes a TCP socket's peer has sent it (TCP_INFO's
 * bytes_received, Linux 4.1 on), and how long ago its last ACK came
 * (last_ack_recv). Its own file: glibc's <netinet/tcp.h>,
 * which libuv's header brings into the rest, has no such field, and
 * <linux/tcp.h>, which has it, cannot sit beside it.
 */
#include "server/linger.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

/* info: socket fd's TCP_INFO in *ti, if the kernel gave at least `need`
 * bytes of it (UPTO: through field f). */
#define UPTO(f) (offsetof(struct tcp_info, f) + sizeof(((struct tcp_info *)0)->f))
static int info(int fd, struct tcp_info *ti, size_t need)
{
    socklen_t n = sizeof *ti;
    memset(ti, 0, sizeof *ti);
    return fd >= 0 && getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &n) == 0 &&
           n >= need;
}

uint64_t srv_sock_received(int fd)
{
    struct tcp_info ti;
    return info(fd, &ti, UPTO(tcpi_bytes_received)) ? ti.tcpi_bytes_received
                                                     : 0;
}

long srv_sock_ack_age_ms(int fd)
{
    struct tcp_info ti;
    return info(fd, &ti, UPTO(tcpi_last_ack_recv)) ? (long)ti.tcpi_last_ack_recv
                                                    : -1;
}
