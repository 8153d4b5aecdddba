/* web.c - lookup of the visualiser's embedded files (see web.h). */
#include "server/web.h"

#include <string.h>

const web_asset *web_asset_find(const char *path)
{
    size_t i;

    if (!path)
        return NULL;
    if (strcmp(path, "/") == 0 || strcmp(path, "/web") == 0 ||
        strcmp(path, "/web/") == 0)
        path = "/web/index.html";
    for (i = 0; i < web_n_assets; i++)
        if (strcmp(web_assets[i].path, path) == 0)
            return &web_assets[i];
    return NULL;
}
