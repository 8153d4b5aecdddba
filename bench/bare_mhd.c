/*
 * bare_mhd.c - the peer of the HTTP benchmark: a bare libmicrohttpd server
 * that reads a POST body and answers a fixed JSON body, on one epoll thread
 * (as attnd serves HTTP from one loop thread). What attnd adds on top of
 * this - routing, decode, batching, compute, encode - is the ratio the
 * benchmark prints.
 *
 *   bare_mhd [port] [response bytes]   (port 0 picks one; prints it)
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *body;
static size_t body_len;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    (void)cls, (void)url, (void)method, (void)version, (void)upload;
    if (!*con_cls) { /* first call: headers only */
        *con_cls = c;
        return MHD_YES;
    }
    if (*upload_size) { /* discard the body, as a server that parses it reads it */
        *upload_size = 0;
        return MHD_YES;
    }
    r = MHD_create_response_from_buffer(body_len, body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 0;
    size_t i, n = argc > 2 ? (size_t)atol(argv[2]) : 2048;
    struct MHD_Daemon *d;
    const union MHD_DaemonInfo *info;
    struct sockaddr_in sa;
    sigset_t stop;
    int sig;
    /* SIGTERM/SIGINT blocked before MHD's thread starts (it inherits the
     * mask), then taken by sigwait: the main thread always sees them */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    body = malloc(n + 1);
    if (!body)
        return 1;
    memset(body, ' ', n);
    memcpy(body, "{\"ok\":true}", n < 11 ? n : 11);
    for (i = 11; i < n; i++)
        body[i] = ' ';
    body_len = n;
    memset(&sa, 0, sizeof sa); /* loopback only */
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD, (uint16_t)port, NULL, NULL,
                         on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "bare_mhd: cannot listen on %d\n", port);
        return 1;
    }
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("listening on http://127.0.0.1:%u\n", info ? info->port : (unsigned)port);
    fflush(stdout);
    sigwait(&stop, &sig);
    MHD_stop_daemon(d);
    free(body);
    return 0;
}
