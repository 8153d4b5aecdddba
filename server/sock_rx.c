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

uint64_t srv_sock_received(int fd)
{
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
        n < offsetof(struct tcp_info, tcpi_bytes_received) +
                sizeof ti.tcpi_bytes_received)
        return 0;
    return ti.tcpi_bytes_received;
}

long srv_sock_ack_age_ms(int fd)
{
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
        n < offsetof(struct tcp_info, tcpi_last_ack_recv) +
                sizeof ti.tcpi_last_ack_recv)
        return -1;
    return (long)ti.tcpi_last_ack_recv;
}
