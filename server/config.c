/* config.c - settings from the table in config.h: defaults, ATTND_* env,
 * flags, --help. */
#include "server/config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_INT, T_STR };

typedef struct setting {
    const char *name; /* flag without "--"; env is ATTND_ + upper(name) */
    int type;
    long long def_int, min, max;
    const char *def_str;
    const char *help;
    size_t off; /* offset of the field in srv_config */
} setting;

#define S_INT(f, n, d, lo, hi, h)                                             \
    {n, T_INT, (long long)(d), lo, hi, NULL, h, offsetof(srv_config, f)},
#define S_STR(f, n, d, lo, hi, h)                                             \
    {n, T_STR, 0, lo, hi, d, h, offsetof(srv_config, f)},
#define S_ROW(f, n, t, d, lo, hi, h) S_##t(f, n, d, lo, hi, h)
static const setting settings[] = {SRV_SETTINGS(S_ROW)};
#undef S_ROW
#undef S_INT
#undef S_STR
#define N_SETTINGS (sizeof settings / sizeof settings[0])

static void env_name(const setting *s, char *out, size_t n)
{
    size_t i = 0;
    const char *p;
    snprintf(out, n, "ATTND_");
    i = strlen(out);
    for (p = s->name; *p && i + 1 < n; p++)
        out[i++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    out[i] = 0;
}

/* set_value: parse text into the field of s; -1 with err naming where. */
/* key_len: the length of an API key without the white space after it (a
 * Kubernetes secret made from a file keeps the file's newline, which no
 * Authorization header can carry: every request would be 401). */
static size_t key_len(const char *k)
{
    size_t n = strlen(k);
    while (n && strchr(" \t\r\n", k[n - 1]))
        n--;
    return n;
}

/* key_check: 0, or -1 with err when the key (where: the flag or variable
 * it came from) is only white space, which would turn the key off, or
 * holds a control character no header can carry. */
/* key_bytes_check: 0, or -1 with err when the n bytes of k hold a control
 * character (a NUL among them), which no Authorization header can carry. */
static int key_bytes_check(const char *k, size_t n, const char *where,
                           char *err)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f) {
            snprintf(err, SRV_ERRMAX, "%s: a control character at byte %zu, "
                     "which no Authorization header can carry", where, i);
            return -1;
        }
    return 0;
}

static int key_check(const char *k, const char *where, char *err)
{
    size_t n = key_len(k);
    if (!n && k[0]) {
        snprintf(err, SRV_ERRMAX, "%s: only white space; set a key or leave "
                 "it empty (no key)", where);
        return -1;
    }
    return key_bytes_check(k, n, where, err);
}

static int set_value(srv_config *cfg, const setting *s, const char *text,
                     const char *where, char *err)
{
    char *end = NULL;
    long long v;
    char **sp;
    if (s->type == T_STR) {
        sp = (char **)((char *)cfg + s->off);
        if (strcmp(s->name, "log-format") == 0 && strcmp(text, "text") != 0 &&
            strcmp(text, "json") != 0) {
            snprintf(err, SRV_ERRMAX, "%s: log format '%s' is not text or json", where,
                     text);
            return -1;
        }
        if (strcmp(s->name, "kv-dtype") == 0 && strcmp(text, "f32") != 0 &&
            strcmp(text, "f16") != 0 && strcmp(text, "bf16") != 0) {
            snprintf(err, SRV_ERRMAX, "%s: K/V dtype '%s' is not f32, f16 or bf16",
                     where, text);
            return -1;
        }
        if (strcmp(s->name, "api-key") == 0 && key_check(text, where, err) < 0)
            return -1;
        free(*sp);
        *sp = strcmp(s->name, "api-key") == 0 ? strndup(text, key_len(text))
                                               : strdup(text);
        if (!*sp) {
            snprintf(err, SRV_ERRMAX, "%s: out of memory", where);
            return -1;
        }
        return 0;
    }
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno || end == text || *end) {
        /* a variable holding an address: a Kubernetes Service named like
         * the prefix (attnd) injects ATTND_PORT=tcp://... into its pods */
        snprintf(err, SRV_ERRMAX, "%s: '%s' is not an integer%s", where, text,
                 where[0] != '-' && !strncmp(text, "tcp://", 6)
                     ? " (a Kubernetes Service's link variable? set the pod's "
                       "enableServiceLinks: false, as deploy/k8s/deployment.yaml "
                       "does, or give the setting as a flag)"
                     : "");
        return -1;
    }
    if (v < s->min || v > s->max) {
        snprintf(err, SRV_ERRMAX, "%s: %lld is outside [%lld, %lld]", where, v, s->min,
                 s->max);
        return -1;
    }
    *(long long *)((char *)cfg + s->off) = v;
    return 0;
}

static const setting *find(const char *name, size_t len)
{
    size_t i;
    for (i = 0; i < N_SETTINGS; i++)
        if (strlen(settings[i].name) == len &&
            strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    return NULL;
}

/* edits: the edit distance of a and b (at most 63 bytes each, else 99). */
static size_t edits(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j, row[64];
    if (la > 63 || lb > 63)
        return 99;
    for (j = 0; j <= lb; j++)
        row[j] = j;
    for (i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* service_link: a variable Kubernetes (enableServiceLinks) or docker --link
 * makes for a Service or container whose name starts with attnd:
 * <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT[_<port name>], <NAME>_PORT
 * (tcp://...), <NAME>_PORT_<n>_<PROTO>[_ADDR|_PORT|_PROTO], <NAME>_NAME
 * (/<container>/<alias>), <NAME>_ENV_<its variable>. */
static int service_link(const char *name, const char *value)
{
    const char *p;
    size_t len = strlen(name);
    if (strstr(name, "_SERVICE_HOST") || strstr(name, "_SERVICE_PORT"))
        return 1;
    if (len > 5 && strcmp(name + len - 5, "_PORT") == 0 && strstr(value, "://"))
        return 1;
    if (len > 5 && strcmp(name + len - 5, "_NAME") == 0 && value[0] == '/')
        return 1;
    if (strstr(name, "_ENV_"))
        return 1;
    for (p = strstr(name, "_PORT_"); p; p = strstr(p + 1, "_PORT_")) {
        const char *q = p + 6;
        if (*q < '0' || *q > '9')
            continue;
        while (*q >= '0' && *q <= '9')
            q++;
        if (strncmp(q, "_TCP", 4) == 0 || strncmp(q, "_UDP", 4) == 0 ||
            strncmp(q, "_SCTP", 5) == 0)
            return 1;
    }
    return 0;
}

int srv_config_stray_env(char *const *envp, size_t *pos, char *msg, size_t n)
{
    char env[96], name[96];
    for (; envp && envp[*pos]; (*pos)++) {
        const char *v = envp[*pos], *eq = strchr(v, '=');
        size_t len = eq ? (size_t)(eq - v) : strlen(v), i, best = 99;
        const setting *near = NULL;
        if (strncmp(v, "ATTND_", 6) != 0 || len >= sizeof name)
            continue;
        memcpy(name, v, len);
        name[len] = 0;
        if (service_link(name, eq ? eq + 1 : ""))
            continue;
        for (i = 0; i < N_SETTINGS; i++) {
            size_t d;
            env_name(&settings[i], env, sizeof env);
            d = edits(name, env);
            if (d < best) {
                best = d;
                near = &settings[i];
            }
        }
        if (best == 0)
            continue;
        (*pos)++;
        if (near && best <= 2) {
            env_name(near, env, sizeof env);
            snprintf(msg, n, "%s is no setting and is ignored (did you mean "
                     "%s? attnd --help lists them)", name, env);
        } else
            snprintf(msg, n, "%s is no setting and is ignored (attnd --help "
                     "lists them)", name);
        return 1;
    }
    return 0;
}

/* load_key_file: api_key from the first line of api_key_file (trailing
 * spaces and CR dropped); -1 with err, naming from (the flag or the
 * variable that gave the path), when unreadable, empty, holding a control
 * character (a NUL would have cut it short), or when --api-key (or
 * ATTND_API_KEY) is set too. */
static int load_key_file(srv_config *cfg, const char *from, char *err)
{
    char buf[4096 + 2], where[SRV_ERRMAX / 2];
    const char *nl;
    size_t n;
    FILE *f;
    char *k;
    if (cfg->api_key[0]) {
        snprintf(err, SRV_ERRMAX, "%s %s: --api-key (or ATTND_API_KEY) is "
                 "set too; use one", from, cfg->api_key_file);
        return -1;
    }
    f = fopen(cfg->api_key_file, "r");
    if (!f) {
        snprintf(err, SRV_ERRMAX, "%s %s: cannot read (%s)", from,
                 cfg->api_key_file, strerror(errno));
        return -1;
    }
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    if ((nl = memchr(buf, '\n', n)))
        n = (size_t)(nl - buf);
    buf[n] = 0;
    while (n && (buf[n - 1] == ' ' || buf[n - 1] == '\r' || buf[n - 1] == '\t'))
        buf[--n] = 0;
    if (n == 0 || n > 4096) {
        snprintf(err, SRV_ERRMAX, "%s %s: %s", from, cfg->api_key_file,
                 n ? "key longer than 4096 bytes" : "no key on its first line");
        return -1;
    }
    snprintf(where, sizeof where, "%s %s", from, cfg->api_key_file);
    if (key_bytes_check(buf, n, where, err) < 0)
        return -1;
    k = strdup(buf);
    if (!k) {
        snprintf(err, SRV_ERRMAX, "%s: out of memory", from);
        return -1;
    }
    free(cfg->api_key);
    cfg->api_key = k;
    return 0;
}

int srv_config_load(srv_config *cfg, int argc, char **argv,
                    srv_action *action, const char **arg, char *err)
{
    size_t i;
    int a;
    char env[96], where[128];
    unsigned char flagged[N_SETTINGS] = {0}; /* given as a flag */
    memset(cfg, 0, sizeof *cfg);
    *action = SRV_RUN;
    *arg = NULL;
    for (i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        if (s->type == T_INT)
            *(long long *)((char *)cfg + s->off) = s->def_int;
        else if (set_value(cfg, s, s->def_str, s->name, err) < 0)
            goto fail;
    }
    /* flags first, then the variables of the settings no flag gave: a flag
     * wins without its variable being read (a Service link's
     * ATTND_PORT=tcp://... under a --port), and --help and --version read
     * none */
    for (a = 1; a < argc; a++) {
        const char *f = argv[a], *eq, *val;
        const setting *s;
        size_t len;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            *action = SRV_HELP;
            return 0;
        }
        if (strcmp(f, "--version") == 0) {
            *action = SRV_VERSION;
            return 0;
        }
        if (strncmp(f, "--", 2) != 0) {
            snprintf(err, SRV_ERRMAX, "%s: unexpected argument (try --help)", f);
            goto fail;
        }
        f += 2;
        eq = strchr(f, '=');
        len = eq ? (size_t)(eq - f) : strlen(f);
        val = eq ? eq + 1 : (a + 1 < argc ? argv[a + 1] : NULL);
        if ((len == 12 && strncmp(f, "check-models", len) == 0) ||
            (len == 12 && strncmp(f, "health-check", len) == 0)) {
            if (!val) {
                snprintf(err, SRV_ERRMAX, "--%.*s needs a value", (int)len, f);
                goto fail;
            }
            *action = f[0] == 'c' ? SRV_CHECK_MODELS : SRV_HEALTH_CHECK;
            *arg = val;
            if (!eq)
                a++;
            continue;
        }
        s = find(f, len);
        if (!s) {
            snprintf(err, SRV_ERRMAX, "--%.*s: unknown flag (try --help)", (int)len, f);
            goto fail;
        }
        if (!val) {
            snprintf(err, SRV_ERRMAX, "--%s needs a value", s->name);
            goto fail;
        }
        snprintf(where, sizeof where, "--%s", s->name);
        if (set_value(cfg, s, val, where, err) < 0)
            goto fail;
        flagged[s - settings] = 1;
        if (!eq)
            a++;
    }
    for (i = 0; i < N_SETTINGS; i++) {
        const char *v;
        if (flagged[i])
            continue;
        env_name(&settings[i], env, sizeof env);
        v = getenv(env);
        if (v && set_value(cfg, &settings[i], v, env, err) < 0)
            goto fail;
    }
    if (cfg->api_key_file[0]) {
        const setting *kf = find("api-key-file", strlen("api-key-file"));
        if (load_key_file(cfg, kf && flagged[kf - settings] ? "--api-key-file"
                                                          : "ATTND_API_KEY_FILE",
                          err) < 0)
            goto fail;
    }
    /* one port for both doors: with --reuse-port 1 the kernel would share
     * its connections between the REST and the gRPC listener */
    if (cfg->port > 0 && cfg->grpc_port == cfg->port) {
        snprintf(err, SRV_ERRMAX, "--port %lld, --grpc-port %lld: the REST "
                 "and gRPC doors need a port each (--grpc-port 0: no gRPC)",
                 cfg->port, cfg->grpc_port);
        goto fail;
    }
    /* a body of max-body bytes reserves SRV_BODY_SLACK more of the
     * budget (REST: its terminating byte; gRPC: that, the message's and
     * its call's cost): a budget of max-body exactly took every request
     * but the largest, which got 503 "retry shortly" for good. A decoded
     * request of request-memory is held beside its connection's state too
     * (REST 36 KiB, gRPC 80 KiB with its call's and slot's, ~87 KiB: both
     * within SRV_BODY_SLACK): a budget of request-memory exactly started,
     * and then answered every request that large 503 for good. */
    if (cfg->memory_budget) {
        long long body = cfg->max_body > cfg->max_json_body ? cfg->max_body
                                                            : cfg->max_json_body;
        int req = cfg->request_memory > body;
        long long need = (req ? cfg->request_memory : body) + SRV_BODY_SLACK;
        if (cfg->memory_budget < need) {
            if (req)
                snprintf(err, SRV_ERRMAX, "--memory-budget %lld: below "
                         "--request-memory %lld plus the %d bytes a request "
                         "holds beside it (its connection's state, and a "
                         "gRPC call's): a request that large could never be "
                         "served; set --memory-budget to at least %lld (or "
                         "0: no budget)", cfg->memory_budget,
                         cfg->request_memory, SRV_BODY_SLACK, need);
            else
                snprintf(err, SRV_ERRMAX, "--memory-budget %lld: below --%s "
                         "%lld plus the %d bytes a body reserves beside its "
                         "own: a body that large could never be served; set "
                         "--memory-budget to at least %lld (or 0: no budget)",
                         cfg->memory_budget,
                         body == cfg->max_body ? "max-body" : "max-json-body",
                         body, SRV_BODY_SLACK, need);
            goto fail;
        }
    }
    return 0;
fail:
    srv_config_free(cfg);
    return -1;
}

void srv_config_free(srv_config *cfg)
{
    size_t i;
    for (i = 0; i < N_SETTINGS; i++)
        if (settings[i].type == T_STR) {
            char **sp = (char **)((char *)cfg + settings[i].off);
            free(*sp);
            *sp = NULL;
        }
}

void srv_config_help(FILE *out, const char *prog)
{
    size_t i;
    char env[96], flag[64], def[64];
    fprintf(out,
            "usage: %s [--setting VALUE ...]\n"
            "       %s --check-models DIR   validate every model folder, "
            "exit 1 if any is broken\n"
            "       %s --health-check URL   GET a URL, exit 0 on HTTP 200\n"
            "       %s --version | --help\n\n"
            "attnd serves multi-head attention over HTTP and gRPC (Open "
            "Inference Protocol v2).\nEvery setting is a flag or an environment variable "
            "(flags win):\n\n",
            prog, prog, prog, prog);
    fprintf(out, "%-22s %-24s %-12s %s\n", "flag", "environment", "default",
            "meaning [bounds]");
    for (i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        env_name(s, env, sizeof env);
        snprintf(flag, sizeof flag, "--%s", s->name);
        if (s->type == T_INT) {
            snprintf(def, sizeof def, "%lld", s->def_int);
            fprintf(out, "%-22s %-24s %-12s %s [%lld..%lld]\n", flag, env, def,
                    s->help, s->min, s->max);
        } else {
            snprintf(def, sizeof def, "%s", *s->def_str ? s->def_str : "\"\"");
            fprintf(out, "%-22s %-24s %-12s %s\n", flag, env, def, s->help);
        }
    }
}
