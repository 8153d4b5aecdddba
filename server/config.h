/*
 * config.h - every daemon setting, in one table.
 *
 * SRV_SETTINGS(X) lists each setting once: field, flag/env suffix, type,
 * default, bounds and help. Command-line flags (--name), environment
 * variables (ATTND_NAME) and `attnd --help` are all generated from it, so
 * they cannot drift apart. Flags override the environment, which overrides
 * the default. Loop thread only (read-only after srv_config_load).
 */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#define SRV_MiB (1024LL * 1024LL)
/* memory-budget a body reserves beside its bytes, at most: REST its
 * terminating byte (http_head.c), gRPC that with its message's, its
 * call's and its connection's cost (grpc_int.h asserts so);
 * memory-budget must hold the largest body and this */
#define SRV_BODY_SLACK (128 * 1024)

/* Bytes of the err buffer the daemon's set-up calls fill (srv_config_load,
 * srv_registry_start, srv_http_start, srv_health_check). */
#define SRV_ERRMAX 512

/* X(field, name, type, default, min, max, help)
 * type INT: default/min/max are integers (0 in min/max of a string = none).
 * type STR: default is a string, min/max unused.
 * threads default 0 = the number of CPUs attnd may run on. */
#define SRV_SETTINGS(X)                                                       \
    X(host, "host", STR, "127.0.0.1", 0, 0,                                   \
      "address to listen on (0.0.0.0 or :: for every interface; :: takes IPv4 clients too, unless net.ipv6.bindv6only is set)") \
    X(port, "port", INT, 8080, 0, 65535, "TCP port (0 picks a free one)")    \
    X(grpc_port, "grpc-port", INT, 8001, -1, 65535,                           \
      "gRPC port (inference.GRPCInferenceService; 0 = off, -1 picks a free one; not port's)") \
    X(grpc_buffer, "grpc-buffer", INT, 64 * SRV_MiB, 65536, 1LL << 40,        \
      "unsent gRPC answer bytes one connection may hold; past it its streams' requests wait") \
    X(models, "models", STR, "models", 0, 0,                                  \
      "model repository folder: <dir>/<name>/model.safetensors")              \
    X(threads, "threads", INT, 0, 0, 1024,                                    \
      "compute pool threads (0 = the CPUs attnd may run on)")                 \
    X(max_batch, "max-batch", INT, 8, 1, 4096,                                \
      "most sequences one batch runs")                                        \
    X(batch_delay_us, "batch-delay-us", INT, 0, 0, 10000000,                  \
      "longest wait of a queued request for batch company (us)")              \
    X(batch_invariant, "batch-invariant", INT, 0, 0, 1,                     \
      "1: a request's outputs the same bits alone and in any batch, batches of requests past 48 rows slower (and any batch a little where the AVX-512 skinny kernel does not run); 0: a request's last bits can change with its batch") \
    X(instances, "instances", INT, 2, 1, 64,                                  \
      "batches of one model that may run at once (a model under "           \
      "solo-max-weights runs small requests beside them)")                   \
    X(solo_max_weights, "solo-max-weights", INT, 256 * 1024, 0, 1LL << 40,    \
      "a model whose weights take at most this many bytes (the built-in sdpa: none) does not hold a small request back for a batch while its instances are busy: its decode, compute and encode run as one pool job, as on an idle model (a batch would save reading weights that stay in cache, less than its two extra hand-offs cost; 0 = every request waits for an instance)") \
    X(queue_size, "queue-size", INT, 256, 1, 1000000,                         \
      "requests one model may have in progress (queued, being decoded or "    \
      "running: attnd_inference_pending_requests) before 503")                \
    X(repository_waiters, "repository-waiters", INT, 16, 1, 100000,           \
      "repository calls (load, upload, unload) of one model that may wait "  \
      "at once while a load of it runs (503 past; a call identical to the "  \
      "last one waiting joins it and takes no place)")                       \
    X(deadline_ms, "deadline-ms", INT, 30000, 1, 3600000,                     \
      "request deadline from the request whole (its body read) to its answer (ms); past it 504")            \
    X(drain_ms, "drain-ms", INT, 30000, 0, 3600000,                           \
      "on SIGTERM/SIGINT/SIGHUP, time queued and running work gets to "       \
      "finish (ms)")                                                           \
    X(stop_flush_ms, "stop-flush-ms", INT, 1000, 0, 600000,                   \
      "once the drain is cut short (a second signal, or drain-ms passed) "   \
      "and its work has ended, time the answers made get to be written "     \
      "whole before their connections close; a client reading slower loses " \
      "the rest (ms). Within it too, at the stop, a connection whose "       \
      "client has not acknowledged every byte of its answers (REST, or "    \
      "gRPC after the final GOAWAY) waits until it has (or closes it; a "   \
      "signal ends the wait)")                                                \
    X(max_body, "max-body", INT, 64 * SRV_MiB, 1024, 1LL << 40,               \
      "largest request body in bytes (413 past it)")                          \
    X(max_json_body, "max-json-body", INT, 16 * SRV_MiB, 1024, 1LL << 40,     \
      "largest JSON part of a request in bytes (413 past it)")                \
    X(max_small_body, "max-small-body", INT, 64 * 1024, 64, 1LL << 30,       \
      "largest body of the repository index and unload calls (413 past it)")  \
    X(request_memory, "request-memory", INT, 512 * SRV_MiB, 1024, 1LL << 42,  \
      "bytes one decoded request with its outputs may occupy (with what "   \
      "laying out its sequences takes, the engine's tiles and sdpa's q "    \
      "times scale too: ~250 bytes a sequence), and a map's /attention "   \
      "answer (its floats and text; the stored planes are read in place)")   \
    X(max_tokens, "max-tokens", INT, 65536, 1, 1LL << 30,                     \
      "most query rows (batch x tokens; sdpa: q's rows, every head's) in "     \
      "one request")                                                          \
    X(max_connections, "max-connections", INT, 1024, 1, 100000,               \
      "open connection limit, REST and gRPC together")                       \
    X(conn_timeout_s, "connection-timeout", INT, 60, 0, 86400,                \
      "idle connection timeout (s; 0 = none); a client reading an answer "  \
      "(REST or gRPC) is not idle while it takes more of it")                \
    X(max_conn_per_ip, "max-connections-per-ip", INT, 64, 0, 100000,          \
      "open connections one client address may hold, REST and gRPC "       \
      "together (0 = no limit; raise it behind a proxy)")                    \
    X(header_timeout_s, "header-timeout", INT, 20, 0, 86400,                  \
      "seconds a connection gets to send a request head (gRPC: its first "  \
      "call), from its opening or from when its client has read its "       \
      "previous answer (REST: one still reading is closed only when it "    \
      "reads none of it for this long) (0 = none)")                          \
    X(linger_ms, "linger-ms", INT, 2000, 0, 600000,                           \
      "a connection attnd closes after an answer while its client may still send (a body answered from its head, requests pipelined behind Connection: close, gRPC's GOAWAY) is read and discarded until the client ends it too, for up to this long and max-body bytes (a 413's whole Content-Length), so the client's kernel gets an end, not a reset that can drop the answer (ms; 0 = close at once)") \
    X(min_body_rate, "min-body-rate", INT, 1024, 0, 1LL << 30,                \
      "bytes/s a body (gRPC: a message) must average once header-timeout "  \
      "has passed since its head (0 = none)")                                 \
    X(memory_budget, "memory-budget", INT, 1024 * SRV_MiB, 0, 1LL << 44,      \
      "bytes buffered bodies, decoded requests, unsent answers and "        \
      "connections (REST 36 KiB, gRPC 80 KiB each) may hold together; past " \
      "it 503, and a new connection is refused (REST: 503 at once, taken "   \
      "to 72 KiB past it for a probe; gRPC: closed) (0 = no budget: "        \
      "unlimited; else at least the largest of max-body, max-json-body "     \
      "and request-memory, plus 128 KiB)")                                   \
    X(strict_parameters, "strict-parameters", INT, 0, 0, 1,                   \
      "1: refuse an infer request's parameter (the request's, an output's, "  \
      "an input's) attnd does not read, priority and timeout too (400, gRPC " \
      "INVALID_ARGUMENT); 0: pass them, as Triton passes them to its "       \
      "backend (a misspelling of one attnd reads is refused either way)")     \
    X(reuse_port, "reuse-port", INT, 0, 0, 1,                                 \
      "1: share the ports (REST and gRPC) with other processes "             \
      "(SO_REUSEPORT); 0: refuse to start when one is in use")                \
    X(api_key, "api-key", STR, "", 0, 0,                                      \
      "when set, infer, repository, maps, sequences need "                   \
      "'Authorization: Bearer <key>' (white space after it dropped; a "     \
      "flag shows in ps: prefer ATTND_API_KEY or --api-key-file)")           \
    X(api_key_file, "api-key-file", STR, "", 0, 0,                            \
      "read the API key from this file (its first line; instead of --api-key)") \
    X(cors_origins, "cors-origins", STR, "", 0, 0,                            \
      "comma-separated allowed CORS origins, or * (empty: no CORS)")          \
    X(maps_waiters, "maps-waiters", INT, 64, 1, 100000,                       \
      "most connections waiting at once on GET /v2/maps/{id}?wait= (503 past)") \
    X(maps_wait_ms, "maps-wait-ms", INT, 20000, 0, 600000,                    \
      "longest wait of one GET /v2/maps/{id}?wait= before it answers (ms)")  \
    X(maps_bytes, "maps-bytes", INT, 256 * SRV_MiB, 0, 1LL << 40,             \
      "memory for retained attention maps (0 = retain refused)")              \
    X(kv_bytes, "kv-bytes", INT, 4096 * SRV_MiB, 0, 1LL << 42,                \
      "K/V cache budget of each weight-set model's sequences (0 = no "       \
      "sequences: a start answers 400)")                                      \
    X(kv_dtype, "kv-dtype", STR, "f32", 0, 0,                                 \
      "K/V cache element type: f32, f16 or bf16 (half the bytes)")            \
    X(max_sequences, "max-sequences", INT, 1024, 0, 1000000,                  \
      "live sequences (all models) before a start answers 503; as many "    \
      "that went are remembered (0 = no sequences: a start answers 400)")     \
    X(sequence_idle_ms, "sequence-idle-ms", INT, 60000, 1, 86400000,          \
      "a sequence with no step for this long is dropped, and one that went " \
      "is remembered this long (ms)")                                         \
    X(sequence_wait_us, "sequence-wait-us", INT, 10000, 0, 10000000,          \
      "longest a batch waits for the sequences just answered to send their next step (us; at most the last batch's run time; 0 = never)") \
    X(pool_spin_us, "pool-spin-us", INT, 500, 0, 100000,                      \
      "how long a pool job that finds no tile left in its batch's stage spins for the next stage before it ends (us; a thread woken again may start a millisecond late in a VM; 0 = end at once)") \
    X(busy_poll_us, "busy-poll-us", INT, 300, 0, 100000,                     \
      "after network activity or a finished pool job, the loop thread polls instead of sleeping, and idle pool threads on the other cores spin for new work, for this long while the pool leaves a core free, yielding to any other thread (us; a thread woken on an idle virtual CPU starts late; 0 = sleep at once)") \
    X(inline_conns, "inline-conns", INT, 1, 0, 100000,                       \
      "while at most this many connections are open (REST and gRPC; a page's long poll on a map and a connection idle for inline-idle-ms not counted) and no other request is in progress, a small request to an idle model (body and outputs up to 64 KiB each, plan under 8 MFLOP), a sequence step too, is decoded, computed and encoded on the loop thread itself, with no hand-off to the pool (0 = always on the pool)") \
    X(inline_idle_ms, "inline-idle-ms", INT, 1000, 0, 86400000,             \
      "a connection with no request in progress and none answered for this long (a metrics scraper's or a browser's keep-alive) does not count against inline-conns (ms; 0 = every open connection counts)") \
    X(pool_batch, "pool-batch", INT, 1, 0, 1,                                 \
      "pool threads run as SCHED_BATCH: one woken does not preempt the thread on its CPU, such as the loop that woke it (1; 0 = the default policy, for a node where latency-sensitive processes share the CPUs)") \
    X(log_format, "log-format", STR, "text", 0, 0,                            \
      "request log format: text or json (one line per request, stderr)")     \
    X(log_flush_ms, "log-flush-ms", INT, 100, 0, 10000,                       \
      "a request's log line waits up to this long to share one write with others (ms; a thread of its own writes stderr; daemon messages go at once; 0 = each line at once)") \
    X(log_buffer, "log-buffer", INT, SRV_MiB, 16384, 1LL << 30,               \
      "bytes of log lines waiting for stderr; when stderr does not keep up, lines past this are dropped and counted (attnd_log_lines_dropped_total), not waited for")

typedef struct srv_config {
#define SRV_CFG_FIELD_INT(f) long long f;
#define SRV_CFG_FIELD_STR(f) char *f;
#define SRV_CFG_FIELD(f, n, t, d, lo, hi, h) SRV_CFG_FIELD_##t(f)
    SRV_SETTINGS(SRV_CFG_FIELD)
#undef SRV_CFG_FIELD
} srv_config;

/* Actions main() takes besides serving. */
typedef enum srv_action {
    SRV_RUN = 0,
    SRV_HELP,
    SRV_VERSION,
    SRV_CHECK_MODELS, /* arg: the repository folder */
    SRV_HEALTH_CHECK, /* arg: the URL */
} srv_action;

/*
 * srv_config_load: fill cfg from defaults, then argv, then the ATTND_*
 * variables of the settings argv did not give (flags win; a variable under
 * a flag is not read, and --help and --version read none). Sets *action
 * (and *arg for --check-models/--health-check). Returns 0, or -1
 * with a message naming the flag or variable in err (SRV_ERRMAX bytes).
 * Strings in cfg are malloc'd; free with srv_config_free.
 */
int srv_config_load(srv_config *cfg, int argc, char **argv,
                    srv_action *action, const char **arg, char *err);
void srv_config_free(srv_config *cfg);

/*
 * srv_config_stray_env: from *pos on in envp (environ), the next ATTND_*
 * variable that names no setting, as a message in msg (n bytes) that says
 * it is ignored and names the setting it is closest to, if one is near;
 * advances *pos past it and returns 1, or returns 0 at the end. A
 * Service link's variables (ATTND_SERVICE_HOST, ATTND_PORT_80_TCP_ADDR,
 * ATTND_SEQUENCES_SERVICE_PORT_HTTP, ...) are not counted.
 */
int srv_config_stray_env(char *const *envp, size_t *pos, char *msg, size_t n);

/* srv_config_help: the usage text generated from the table. */
void srv_config_help(FILE *out, const char *prog);

#endif
