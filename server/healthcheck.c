/* healthcheck.c - `attnd --health-check URL`: a tiny HTTP/1.0 GET with plain
 * sockets (the container has no curl). Exit 0 only on status 200. */
#include "server/srv.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/*
 * srv_health_check: GET url (http://host[:port]/path) with a 5 s timeout.
 * Returns 0 when the answer is 200, 1 for another status, -1 when the URL
 * is bad or the server cannot be reached; err (SRV_ERRMAX bytes) says
 * which, also for another status.
 */
int srv_health_check(const char *url, char *err)
{
    char host[256], port[16] = "80", req[1024], resp[64];
    const char *p, *path, *hend;
    struct addrinfo hints, *ai = NULL, *a;
    struct timeval tv = {5, 0};
    int fd = -1, code = -1;
    size_t got = 0;
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, SRV_ERRMAX, "--health-check %s: expected http://host[:port]/path", url);
        return -1;
    }
    p = url + 7;
    path = strchr(p, '/');
    if (!path)
        path = p + strlen(p);
    if (*p == '[') { /* [v6]:port */
        hend = strchr(p, ']');
        if (!hend || hend > path) {
            snprintf(err, SRV_ERRMAX, "--health-check %s: bad IPv6 host", url);
            return -1;
        }
        snprintf(host, sizeof host, "%.*s", (int)(hend - p - 1), p + 1);
        p = hend + 1;
    } else {
        hend = p + strcspn(p, ":/");
        snprintf(host, sizeof host, "%.*s", (int)(hend - p), p);
        p = hend;
    }
    if (*p == ':')
        snprintf(port, sizeof port, "%.*s", (int)(path - p - 1), p + 1);
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
        snprintf(err, SRV_ERRMAX, "--health-check %s: cannot resolve %s", url, host);
        return -1;
    }
    for (a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, SRV_ERRMAX, "--health-check %s: cannot connect", url);
        return -1;
    }
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n",
             *path ? path : "/", host);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        close(fd);
        snprintf(err, SRV_ERRMAX, "--health-check %s: send failed", url);
        return -1;
    }
    while (got < sizeof resp - 1) {
        ssize_t n = read(fd, resp + got, sizeof resp - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    resp[got] = 0;
    if (sscanf(resp, "HTTP/%*d.%*d %d", &code) != 1) {
        snprintf(err, SRV_ERRMAX, "--health-check %s: no HTTP answer", url);
        return -1;
    }
    snprintf(err, SRV_ERRMAX, "--health-check %s: HTTP %d", url, code);
    return code == 200 ? 0 : 1;
}
