/* log.c - one line per request and the daemon's own messages, on stderr,
 * as text or JSON lines (--log-format). Loop thread. */
#include "server/srv.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void stamp(char *out, size_t n)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ts.tv_nsec / 1000000) % 1000);
}

/* json_str: s as a JSON string body (escapes quotes, backslashes, controls). */
static void json_str(char *out, size_t n, const char *s)
{
    size_t o = 0;
    for (; *s && o + 7 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            out[o++] = '\\', out[o++] = (char)c;
        else if (c < 0x20)
            o += (size_t)snprintf(out + o, n - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = 0;
}

void srv_log(srv *s, const char *level, const char *fmt, ...)
{
    char ts[64], msg[1024], esc[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    stamp(ts, sizeof ts);
    if (s && s->json_log) {
        json_str(esc, sizeof esc, msg);
        fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts,
                level, esc);
    } else {
        fprintf(stderr, "%s %s attnd: %s\n", ts, level, msg);
    }
}

void srv_log_request(srv *s, const srv_req *r)
{
    char ts[64], id[140], mdl[280], path[2100];
    static const char *methods[] = {"", "GET", "POST", "", "OPTIONS", "", "", "",
                                    "HEAD"};
    const char *m = r->method < 9 ? methods[r->method] : "OTHER";
    uint64_t us = (srv_now_ns() - r->t0_ns) / 1000;
    stamp(ts, sizeof ts);
    json_str(id, sizeof id, r->id);
    json_str(mdl, sizeof mdl, r->model);
    json_str(path, sizeof path, r->path);
    if (s->json_log)
        fprintf(stderr,
                "{\"ts\":\"%s\",\"level\":\"info\",\"method\":\"%s\",\"path\":\"%s\","
                "\"status\":%d,\"id\":\"%s\",\"model\":\"%s\",\"batch\":%d,"
                "\"queue_us\":%llu,\"compute_us\":%llu,\"total_us\":%llu}\n",
                ts, m, path, r->status, id, mdl, r->batch,
                (unsigned long long)r->queue_us, (unsigned long long)r->compute_us,
                (unsigned long long)us);
    else
        fprintf(stderr,
                "%s info %s %s %d id=%s model=%s batch=%d queue_us=%llu "
                "compute_us=%llu total_us=%llu\n",
                ts, m, path, r->status, id[0] ? id : "-", mdl[0] ? mdl : "-",
                r->batch, (unsigned long long)r->queue_us,
                (unsigned long long)r->compute_us, (unsigned long long)us);
}
