/*
 * web.h - the visualiser's files, compiled into the daemon.
 *
 * The files of server/web/ are turned into a table by tools/embed_assets.c
 * at build time (build/<variant>/gen/web_assets.c). The router answers
 *   GET /             with /web/index.html (which names its files
 *                     relatively, web/app.js: any prefix a proxy adds
 *                     stays in front of them)
 *   GET /web/<file>   with that file (/web/index.html: 301 to ../)
 * sending content_type, ETag (answer 304 to a matching If-None-Match),
 * "Cache-Control: no-cache" and the WEB_CSP Content-Security-Policy.
 * Everything here is read-only static data: any thread.
 */
#ifndef ATTN_WEB_H
#define ATTN_WEB_H

#include <stddef.h>

/* The page loads nothing but its own files and the daemon's API. */
#define WEB_CSP                                                           \
    "default-src 'self'; img-src 'self' data: blob:; "                    \
    "style-src 'self'; script-src 'self'; connect-src 'self'; "           \
    "frame-ancestors 'none'"

typedef struct web_asset {
    const char *path;         /* URL path, "/web/app.js" */
    const char *content_type; /* "text/javascript; charset=utf-8" */
    const unsigned char *data;
    size_t len;
    const char *etag;         /* quoted, e.g. "\"9f2c...\"" */
} web_asset;

extern const web_asset web_assets[];
extern const size_t web_n_assets;

/* web_asset_find: the asset for a request path ("/" means
 * /web/index.html; the query string must already be stripped), or NULL
 * (answer 404). */
const web_asset *web_asset_find(const char *path);

#endif
