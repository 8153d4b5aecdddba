/*
 * upload.h - a model uploaded in a load request, written to the repository
 * atomically. Pool-thread functions: no libuv, no shared state.
 */
#ifndef ATTND_UPLOAD_H
#define ATTND_UPLOAD_H

#include <stddef.h>

#include "core/model.h"

/* srv_upload_is_plain: 1 when body is a load request without files or
 * config ({} or parameters without "config"/"file:..."), i.e. "load the
 * folder". 0 otherwise (including bodies that are not JSON: those fail in
 * srv_upload_install with a message). */
int srv_upload_is_plain(const char *body, size_t len);

/*
 * srv_upload_install: decode a load request carrying parameters.config (a
 * JSON string, optional) and parameters["file:model.safetensors"] (base64),
 * write the files into a staging folder of repo (each: temp file, fsync),
 * load and validate them, then rename them into repo/name and fsync the
 * folder, so a crash never leaves a half file and a restart finds the
 * model. On success *out is the loaded model. Returns 0, or the HTTP status
 * (400, 500) with err naming the parameter.
 */
int srv_upload_install(const char *repo, const char *name, const char *body,
                       size_t len, model **out, char *err, size_t errlen);

#endif
