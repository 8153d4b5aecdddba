# attnd - build, run, test, bench.
#   make run                 build and start the daemon on its defaults
#   make test                every test suite (installs missing packages)
#   make bench               benchmarks with their peers (PyTorch, bare HTTP)
#   make SANITIZER=address|undefined|thread|address+undefined test
#   make test-daemon         make test but the page's suite and the generators'
#   make coverage            the suites on a gcov build: % of lines run per file
# Sources are found by folder: core/*.c -> libattn_core.a, proto/*.c ->
# libattn_proto.a, server/*.c -> attnd; tests/<layer>/test_*.c are Check
# binaries, one per source file.

SANITIZER ?=
BUILD ?= build/$(if $(SANITIZER),$(SANITIZER),default)
CC ?= cc
OPT ?= -O2 -g

PKGS := libmicrohttpd jansson libuv libnghttp2 libprotobuf-c
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
BLAS_LIBS = $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)

# WERROR=1 (.ci/run): a warning fails the build
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wvla $(if $(WERROR),-Werror)
SAN_address := -fsanitize=address -fno-omit-frame-pointer
SAN_undefined := -fsanitize=undefined -fno-sanitize-recover=all
SAN_thread := -fsanitize=thread
# SANITIZER=address+undefined: both in one build (build/address+undefined),
# as .ci/run runs them: one suite's run instead of two (thread goes with
# neither)
SAN_PARTS := $(subst +, ,$(SANITIZER))
SAN := $(foreach s,$(SAN_PARTS),$(SAN_$(s)))
$(foreach s,$(SAN_PARTS),$(if $(SAN_$(s)),,$(error SANITIZER must be address, undefined, thread or address+undefined, not '$(SANITIZER)')))
$(if $(and $(filter thread,$(SAN_PARTS)),$(filter-out thread,$(SAN_PARTS))),$(error SANITIZER=thread goes with no other sanitizer, not '$(SANITIZER)'))

CFLAGS_ALL = -std=c11 -D_GNU_SOURCE -pthread $(OPT) $(WARN) $(SAN) -MMD -MP \
             -I. -I$(BUILD)/gen $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = -pthread $(SAN) $(LDFLAGS)
LIBS_ALL = $(PKG_LIBS) $(BLAS_LIBS) -lm $(LDLIBS)

CORE_SRC := $(wildcard core/*.c)
PROTO_SRC := $(wildcard proto/*.c)
SERVER_SRC := $(filter-out server/main.c,$(wildcard server/*.c))
CORE_LIB := $(BUILD)/libattn_core.a
PROTO_LIB := $(BUILD)/libattn_proto.a
SERVER_LIB := $(BUILD)/libattnd.a
ATTND := $(BUILD)/attnd
UNIT_SRC := $(wildcard tests/core/test_*.c tests/proto/test_*.c \
                       tests/server/test_*.c)
UNIT_BIN := $(UNIT_SRC:%.c=$(BUILD)/%)

obj = $(1:%.c=$(BUILD)/%.o)

# Every runner fails fast instead of hanging: node --test stops a test file
# past NODE_TEST_TIMEOUT ms (SIGTERM; tests/server/helper.mjs and
# tests/web/harness.mjs then SIGKILL the daemons it started; with Debian 12's
# own node 18, which has no --test-timeout, tools/node-test.sh stops the
# whole run past NODE_SUITE_TIMEOUT s instead), Check a test
# case past CK_TIMEOUT s, the failover and affinity scripts past
# FAILOVER_TIMEOUT s and tests/grpc/test_grpc*.py past GRPC_PY_TIMEOUT s
# (tests/grpc/grpc_helper.py kills their daemons on SIGTERM too). A whole
# file takes 1-100 s on this project's 2-core machine (node's --test-timeout
# stops a file, not a test, when it runs several: tests/web's page,
# sequence and follow each ran past 120 s there beside other work), and CI
# hosts have been several times slower at compute: the bounds leave room
# for a host 5x slower. Sanitized builds get more time, never looser
# assertions.
NODE_TEST_TIMEOUT ?= $(if $(SANITIZER),1800000,600000)
NODE_SUITE_TIMEOUT ?= $(if $(SANITIZER),28800,7200)
NODE_TEST = NODE_TEST_TIMEOUT=$(NODE_TEST_TIMEOUT) \
    NODE_SUITE_TIMEOUT=$(NODE_SUITE_TIMEOUT) $(abspath tools/node-test.sh)
CK_TIMEOUT ?= $(if $(SANITIZER),300,60)
FAILOVER_TIMEOUT ?= $(if $(SANITIZER),900,300)
GRPC_PY_TIMEOUT ?= $(if $(SANITIZER),900,300)

.PHONY: all run test deps deps-test check-unit check-server check-web bench bench-server clean format
all: deps $(if $(wildcard server/main.c),$(ATTND)) $(UNIT_BIN)

deps:
	@tools/install-deps.sh build
deps-test:
	@tools/install-deps.sh test

# With make -j, deps runs beside the rest: nothing that compiles starts
# before it has installed the compilers and headers (the pattern rules here
# and below, and the explicit ones listed after the bench rules).
$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# --- proto/kserve.proto: the gRPC messages, C from protoc-c at build time --
# (build/<variant>/gen/proto/kserve.pb-c.[ch]; sources include them as
# "proto/kserve.pb-c.h").
PB_GEN := $(BUILD)/gen/proto/kserve.pb-c.c
PB_H := $(PB_GEN:.c=.h)
PB_OBJ := $(PB_GEN:.c=.o)
$(PB_GEN): proto/kserve.proto
	@mkdir -p $(dir $@)
	protoc-c --c_out=$(BUILD)/gen proto/kserve.proto
$(PB_H): $(PB_GEN)
$(PB_OBJ): $(PB_GEN)
	$(CC) $(CFLAGS_ALL) -c $< -o $@
# everything that includes the generated header waits for it
$(call obj,$(PROTO_SRC) $(SERVER_SRC) server/main.c): | $(PB_H)

$(CORE_LIB): $(call obj,$(CORE_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(PROTO_LIB): $(call obj,$(PROTO_SRC)) $(PB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^


$(SERVER_LIB): $(call obj,$(SERVER_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# server/ minus main.c is a library too, so tests/server/test_*.c can link it.
LINK_LIBS = $(if $(SERVER_SRC),$(SERVER_LIB)) $(if $(PROTO_SRC),$(PROTO_LIB)) $(CORE_LIB)

$(ATTND): $(BUILD)/server/main.o $(LINK_LIBS)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_ALL)

$(BUILD)/tests/%: tests/%.c $(LINK_LIBS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LINK_LIBS) $(CHECK_LIBS) \
	    $(LDFLAGS_ALL) $(LIBS_ALL)

# --- web: the visualiser (server/web/*) compiled into the daemon --------
# tools/embed_assets.c turns the files into a table (server/web.h) linked into
# libattnd.a, so attnd serves / and /web/<file> with no files on disk.
WEB_FILES := $(sort $(notdir $(wildcard server/web/*.html server/web/*.js \
                                         server/web/*.css)))
WEB_GEN := $(BUILD)/gen/web_assets.c
EMBED := $(BUILD)/tools/embed_assets
# HOSTCC: the embedder runs at build time, so a cross build
# (tools/test-cpus.sh) makes it with the host's compiler
HOSTCC ?= $(CC)
$(EMBED): tools/embed_assets.c
	@mkdir -p $(dir $@)
	$(HOSTCC) $(CFLAGS_ALL) -o $@ $< $(LDFLAGS_ALL)
# server/web itself too: a file added or removed changes the folder's time,
# so the table is made again even when every file is older than it
$(WEB_GEN): $(EMBED) $(addprefix server/web/,$(WEB_FILES)) server/web
	@mkdir -p $(dir $@)
	$(EMBED) $@ server/web $(WEB_FILES)
$(BUILD)/gen/web_assets.o: $(WEB_GEN)
	$(CC) $(CFLAGS_ALL) -c $< -o $@
$(SERVER_LIB): $(BUILD)/gen/web_assets.o

# Browser tests: Debian's chromium driven by playwright-core (npm, no
# browser download) against an attnd each test file starts itself.
tests/web/node_modules/playwright-core/package.json: tests/web/package.json \
        tests/web/package-lock.json
	cd tests/web && npm ci --no-audit --no-fund --loglevel=error
	@touch $@
check-web: deps-test all tests/web/node_modules/playwright-core/package.json
	@cd tests/web && ATTND=$(abspath $(ATTND)) $(NODE_TEST) \
	    --test-concurrency=1 --test-reporter=tap

# Each Check binary prints its own summary; the loop fails if any fails.
check-unit: deps $(UNIT_BIN)
	@fail=0; for t in $(UNIT_BIN); do echo "== $$t"; \
	    ATTN_TEST_DATA=tests CK_DEFAULT_TIMEOUT=$(CK_TIMEOUT) $$t || fail=1; \
	    done; exit $$fail

# --- server: the daemon's suites (node:test against a running attnd) -----
# Each file starts its own attnd ($(ATTND)) on 127.0.0.1, port 0.
SERVER_TESTS := $(sort $(wildcard tests/server/*.test.mjs))
# failalloc.test.mjs (and batching.test.mjs's plan test) preloads it into
# the default build's attnd: its own allocations fail on demand (built without a sanitizer, whose runtime
# would replace malloc itself; the test skips sanitized builds).
FAILALLOC := $(BUILD)/tests/server/failalloc.so
$(FAILALLOC): tests/server/failalloc.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 $(WARN) -fPIC -shared -o $@ $<
# upload_faults.test.mjs preloads it (any build): the repository's
# filesystem fails on demand where an upload writes and publishes.
FSFAULT := $(BUILD)/tests/server/fsfault.so
$(FSFAULT): tests/server/fsfault.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 $(WARN) -fPIC -shared -o $@ $<
# memfit.test.mjs preloads it (any build): attnd reads a cgroup memory
# limit of the test's making.
CGROUPFAKE := $(BUILD)/tests/server/cgroupfake.so
$(CGROUPFAKE): tests/server/cgroupfake.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 $(WARN) -fPIC -shared -o $@ $< -ldl
# test_crash dlopens it: a library whose constructor holds the dynamic
# loader's lock for good (a crash report must not wait for that lock).
DLHOLD := $(BUILD)/tests/server/dlhold.so
$(DLHOLD): tests/server/dlhold.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 $(WARN) -fPIC -shared -o $@ $<
$(BUILD)/tests/server/test_crash: | $(DLHOLD)
# test_crash_objs dlopens both: one library with only a GNU hash table,
# one with only a SysV one, each with the symbols dladdr's choice turns on.
OBJS_FIXTURE := $(BUILD)/tests/server/objs_gnu.so \
                $(BUILD)/tests/server/objs_sysv.so
$(BUILD)/tests/server/objs_%.so: tests/server/objs_fixture.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 $(WARN) -fPIC -shared -Wl,--hash-style=$* -o $@ $<
$(BUILD)/tests/server/test_crash_objs: | $(OBJS_FIXTURE)
check-server: deps-test $(ATTND) $(FAILALLOC) $(FSFAULT) $(CGROUPFAKE)
	@echo "== node --test tests/server ($(ATTND))"
	@ATTND_BIN=$(ATTND) $(NODE_TEST) --test-concurrency=1 $(SERVER_TESTS)

test: deps-test
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory check-unit
	@$(MAKE) --no-print-directory check-web
	@$(MAKE) --no-print-directory check-weights-gen
	@$(MAKE) --no-print-directory check-server
	@$(MAKE) --no-print-directory check-grpc
	@$(MAKE) --no-print-directory check-deploy

# test-daemon: make test without the page's suite (tests/web: Chromium
# driving the page, ~510 s of a run here, sanitized or not, the daemon
# answering REST requests check-server also sends) and the generators'
# check (Python only): .ci/run's sanitized stages (ASan and UBSan, TSan),
# after make test has run the page's suite.
.PHONY: test-daemon
test-daemon: deps-test
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory check-unit
	@$(MAKE) --no-print-directory check-server
	@$(MAKE) --no-print-directory check-grpc
	@$(MAKE) --no-print-directory check-deploy

# --- grpc: the gRPC door, two independent clients -----------------------------
# Python's grpcio with stubs protoc generates from proto/kserve.proto, and
# Node's @grpc/grpc-js loading the .proto at run time (tests/grpc, pinned by
# its package-lock.json). Each file starts its own attnd on free ports.
GRPC_PY := $(BUILD)/grpc/py
GRPC_STUBS := $(GRPC_PY)/kserve_pb2.py $(GRPC_PY)/kserve_pb2_grpc.py
$(GRPC_STUBS) &: proto/kserve.proto
	@mkdir -p $(GRPC_PY)
	protoc -Iproto --python_out=$(GRPC_PY) --grpc_python_out=$(GRPC_PY) \
	    --plugin=protoc-gen-grpc_python=$$(command -v grpc_python_plugin) \
	    proto/kserve.proto
GRPC_NPM := tests/grpc/node_modules/.package-lock.json
$(GRPC_NPM): tests/grpc/package.json tests/grpc/package-lock.json
	cd tests/grpc && npm ci --no-audit --no-fund --loglevel=error
.PHONY: check-grpc
GRPC_NODE_TESTS := $(sort $(wildcard tests/grpc/*.test.mjs))
# one unittest run (one summary) of every test_grpc*.py; they share
# tests/grpc/grpc_helper.py, which each puts on sys.path itself
GRPC_PY_TESTS := $(sort $(wildcard tests/grpc/test_grpc*.py))
check-grpc: deps-test $(ATTND) $(FAILALLOC) $(GRPC_STUBS) $(if $(GRPC_NODE_TESTS),$(GRPC_NPM))
	@echo "== python3 tests/grpc/test_grpc*.py ($(ATTND))"
	@ATTND=$(ATTND) GRPC_STUBS=$(GRPC_PY) timeout -k 10 $(GRPC_PY_TIMEOUT) \
	    /usr/bin/python3 -m unittest $(GRPC_PY_TESTS)
	$(if $(GRPC_NODE_TESTS),@echo "== node --test tests/grpc ($(ATTND))")
	$(if $(GRPC_NODE_TESTS),@ATTND_BIN=$(ATTND) $(NODE_TEST) \
	    --test-concurrency=1 $(GRPC_NODE_TESTS))

# bench-grpc: the REST bench's points over both doors of one attnd (wrk for
# REST, bench/bench_grpc.c, an nghttp2 client, for gRPC unary and streams),
# and one-token decode steps on a stream against REST.
BENCH_GRPC := $(BUILD)/bench/bench_grpc
.PHONY: bench-grpc
bench-grpc: deps $(ATTND) $(BENCH_GRPC)
	@tools/install-deps.sh bench
	python3 bench/grpc_bench.py --attnd $(ATTND) --client $(BENCH_GRPC)
bench: bench-grpc
all: $(BENCH_GRPC)

# --- deploy/ (issue 6): k8s manifests, nginx failover, container image ---
# check-deploy: the manifests against the Kubernetes schemas (offline, npm
# kubernetes-models, pinned by tests/deploy/package-lock.json), then three
# replicas behind deploy/nginx.conf with one killed under load (failover.mjs),
# then 24 sequences across three replicas with one killed mid-way, and
# retained maps through nginx.conf's sessions and the Ingress's session
# door (affinity.mjs; an attnd whose /v2 lists no sequences extension fails it),
# then one live replica cut off for one step: its sequences must not come
# back to stale copies, nor its sessions leave it for a replica without
# their maps (blip.mjs); then replicas stopped under sequences' steps: one
# SIGKILLed with steps unread in its sockets, brought back on its address,
# then two SIGTERMed at once (stop.mjs).
# container-test: build the Dockerfile with buildah and test the image.
DEPLOY_NPM := tests/deploy/node_modules/.package-lock.json
$(DEPLOY_NPM): tests/deploy/package.json tests/deploy/package-lock.json
	cd tests/deploy && npm ci --no-audit --no-fund --loglevel=error
.PHONY: check-deploy container-test
HAVE_ATTND := $(wildcard server/main.c)
check-deploy: deps-test $(DEPLOY_NPM) $(if $(HAVE_ATTND),$(ATTND))
	cd tests/deploy && $(if $(HAVE_ATTND),ATTND_BIN=$(abspath $(ATTND))) \
	    $(NODE_TEST) validate-k8s.test.mjs validate-ingress.test.mjs
	$(if $(HAVE_ATTND),ATTND_BIN=$(ATTND) timeout -k 10 $(FAILOVER_TIMEOUT) \
	    node tests/deploy/failover.mjs,\
	    @echo "check-deploy: no server/main.c yet, failover test not run")
	$(if $(HAVE_ATTND),ATTND_BIN=$(ATTND) timeout -k 10 $(FAILOVER_TIMEOUT) \
	    node tests/deploy/affinity.mjs)
	$(if $(HAVE_ATTND),ATTND_BIN=$(ATTND) timeout -k 10 $(FAILOVER_TIMEOUT) \
	    node tests/deploy/blip.mjs)
	$(if $(HAVE_ATTND),ATTND_BIN=$(ATTND) timeout -k 10 $(FAILOVER_TIMEOUT) \
	    node tests/deploy/stop.mjs)
# bench-memory: resident memory through a burst of sequences and after
# their deletes, steps, churn and refill a second (bench/mem_burst.py); PEER=an
# other attnd build (the one before a change) runs alternately beside it.
# Not part of `bench` (two daemons, two rounds each: ~3 minutes).
.PHONY: bench-memory
bench-memory: deps $(ATTND)
	python3 bench/mem_burst.py $(ATTND) $(if $(PEER),--peer $(PEER))

# bench-lb: what deploy/nginx.conf costs (wrk direct vs through nginx).
.PHONY: bench-lb
bench-lb: deps $(ATTND)
	@tools/install-deps.sh bench
	bench/bench_lb.sh $(ATTND)
bench: bench-lb
container-test:
	@tools/install-deps.sh container
	$(if $(HAVE_ATTND),deploy/container-test.sh,\
	    @echo "container-test: no server/main.c yet, nothing to build")

run: deps $(ATTND)
	$(ATTND)

clean:
	rm -rf build

format:
	clang-format -i $(CORE_SRC) $(PROTO_SRC) $(SERVER_SRC) server/main.c $(wildcard core/*.h proto/*.h server/*.h)

# ---- proto: fuzzing and benchmark -----------------------------------------
#   make fuzz [FUZZ_SECONDS=60]   libFuzzer (clang) on proto/, bounded in time
#   make bench-proto              decode/encode MB/s next to jansson/memcpy
FUZZ_SECONDS ?= 60
FUZZ_BIN := build/fuzz/fuzz_oip
# proto/ includes pb.c: the fuzzers link the protobuf-c code made for them
FUZZ_PB_GEN := build/fuzz/gen/proto/kserve.pb-c.c
$(FUZZ_PB_GEN): proto/kserve.proto
	@mkdir -p $(dir $@)
	protoc-c --c_out=build/fuzz/gen proto/kserve.proto
$(FUZZ_BIN): tests/proto/fuzz_oip.c $(PROTO_SRC) core/json_mem.c $(wildcard proto/*.h) $(FUZZ_PB_GEN)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 $(WARN) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -I. -Ibuild/fuzz/gen $(shell pkg-config --cflags jansson libprotobuf-c) \
	    -o $@ tests/proto/fuzz_oip.c $(PROTO_SRC) core/json_mem.c $(FUZZ_PB_GEN) \
	    $(shell pkg-config --libs jansson libprotobuf-c) -lm

# make fuzz-pb: the gRPC message decoder (proto/pb.c), seeded with valid
# ModelInferRequests from tests/proto/make_pb_corpus.py.
FUZZ_PB_BIN := build/fuzz/fuzz_pb
$(FUZZ_PB_BIN): tests/proto/fuzz_pb.c $(PROTO_SRC) core/json_mem.c $(wildcard proto/*.h) $(FUZZ_PB_GEN)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 $(WARN) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -I. -Ibuild/fuzz/gen $(shell pkg-config --cflags jansson libprotobuf-c) \
	    -o $@ tests/proto/fuzz_pb.c $(PROTO_SRC) core/json_mem.c $(FUZZ_PB_GEN) \
	    $(shell pkg-config --libs jansson libprotobuf-c) -lm
.PHONY: fuzz-pb
fuzz-pb:
	@tools/install-deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_PB_BIN)
	@mkdir -p build/fuzz/corpus_pb build/fuzz/crashes
	$(FUZZ_PB_BIN) -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/crashes/ build/fuzz/corpus_pb \
	    tests/proto/fuzz_pb_corpus

.PHONY: fuzz bench-proto
fuzz:
	@tools/install-deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BIN)
	@mkdir -p build/fuzz/corpus build/fuzz/crashes
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/crashes/ build/fuzz/corpus \
	    tests/proto/fuzz_corpus

# ---- soak (issue 11): make soak [SOAK_SECONDS=300]; CI: make soak-ci -----
# Mixed traffic against one attnd (tests/server/soak.mjs: small and large
# infers, retains and map reads, uploads and unloads, bad requests, slow and
# vanishing clients, sequence steps over REST and gRPC with rewinds, lost
# answers, ends, DELETEs and abandons, DELETEs and model reloads racing
# steps in flight, long polls on a growing map, gRPC calls cancelled or
# cut), RSS and fds sampled every SOAK_SAMPLE_MS; fails on a 5xx other than
# 503, a wrong sequence_length, a race outcome README does not list, drop
# counters that do not add up, a sanitizer report (make
# SANITIZER=address soak), sequences at the end other than those the soak
# holds or abandoned (which must expire), memory-budget not back to 0, fds
# not back to where they were, or RSS not flat (see the script's header;
# the gRPC clients are in tests/server/soak_grpc.mjs). SOAK_TIMEOUT=N
# stops a run still going N s after it began and fails it (coreutils
# timeout, SIGTERM: helper.mjs kills its attnd); soak-ci sets it, make soak
# has none (timeout's process group would keep Ctrl-C from the run).
SOAK_SECONDS ?= 300
SOAK_TIMEOUT ?=
.PHONY: soak
soak: deps-test $(ATTND)
	ATTND_BIN=$(ATTND) SOAK_SECONDS=$(SOAK_SECONDS) \
	    $(if $(SOAK_TIMEOUT),timeout -k 10 $(SOAK_TIMEOUT) )node tests/server/soak.mjs

# ---- the soak and the fuzzers in CI (.ci/run, after the sanitizer suites)
#   make soak-ci [SOAK_CI_SECONDS=120]
#   make fuzz-http [FUZZ_HTTP_SEED=7] [FUZZ_HTTP_SECONDS=90]
#   make fuzz-grpc [FUZZ_GRPC_SEED=7] [FUZZ_GRPC_SECONDS=60]
# They run on the ASan and UBSan build (SOAK_SANITIZER, address+undefined:
# build/address+undefined/attnd, .ci/run's, whatever SANITIZER is given)
# and build what they need when it is missing (deps-test, the binary), so
# they start on a clean clone: 2-3 and 1.5 min. soak-ci is
# make soak for SOAK_CI_SECONDS, stopped and failed past SOAK_CI_SECONDS +
# 600 s (its checks at the end take under a minute); its seed is new each
# run, printed: SOAK_SEED=N replays its choices, not their timing.
# fuzz-grpc does the same with tests/grpc/fuzz_grpc.mjs (the gRPC door,
# HTTP/2 frames built by hand, and fuzz_calls.mjs's call-level cases) for
# FUZZ_GRPC_SECONDS, after a few seconds' bisection of --request-memory.
# fuzz-http runs tests/server/fuzz_http.mjs from a fixed seed for
# FUZZ_HTTP_SECONDS, stopped and failed past FUZZ_HTTP_SECONDS + 300 s;
# each case draws from a generator seeded from the seed and its place, so
# a seed sends the same bytes in every run (the summary's digest says so;
# the daemon's state between cases still depends on timing), and a finding
# prints its case's place and the bytes it sent. Each prints its
# summary (operations or cases, statuses, the seed) and exits non-zero on
# a finding.
SOAK_SANITIZER ?= address+undefined
SOAK_CI_SECONDS ?= 120
FUZZ_HTTP_SEED ?= 7
FUZZ_HTTP_SECONDS ?= 90
FUZZ_GRPC_SEED ?= 7
FUZZ_GRPC_SECONDS ?= 60
.PHONY: soak-ci fuzz-http fuzz-grpc
soak-ci:
	@$(MAKE) --no-print-directory SANITIZER=$(SOAK_SANITIZER) SOAK_SECONDS=$(SOAK_CI_SECONDS) \
	    SOAK_TIMEOUT=$$(($(SOAK_CI_SECONDS) + 600)) soak
ifeq ($(SANITIZER),$(SOAK_SANITIZER))
fuzz-http: deps-test $(ATTND)
	ATTND_BIN=$(ATTND) ATTND_FUZZ_SEED=$(FUZZ_HTTP_SEED) ATTND_FUZZ_SECONDS=$(FUZZ_HTTP_SECONDS) \
	    timeout -k 10 $$(($(FUZZ_HTTP_SECONDS) + 300)) node tests/server/fuzz_http.mjs
fuzz-grpc: deps-test $(ATTND)
	ATTND_BIN=$(ATTND) ATTND_FUZZ_SEED=$(FUZZ_GRPC_SEED) ATTND_FUZZ_SECONDS=$(FUZZ_GRPC_SECONDS) \
	    timeout -k 10 $$(($(FUZZ_GRPC_SECONDS) + 300)) node tests/grpc/fuzz_grpc.mjs
else
fuzz-http fuzz-grpc:
	@$(MAKE) --no-print-directory SANITIZER=$(SOAK_SANITIZER) $@
endif

# ---- coverage: make coverage, not in CI -----------------------------------
# The unit, server, gRPC and page suites against build/cov (gcc --coverage, -O0;
# the other builds are untouched), then one line per source file: lines,
# the % of them run. A suite's failure is reported and the table printed
# all the same (at -O0 a few timing tests may miss their window, and
# failalloc's start with no memory kills gcov's own exit). The lines none
# runs: gcov -t -o build/cov/server server/http.c | grep -n '#####'
COV := build/cov
COV_MAKE = $(MAKE) --no-print-directory BUILD=$(COV) OPT='-O0 -g --coverage' \
    LDFLAGS=--coverage NODE_TEST_TIMEOUT=1800000
.PHONY: coverage coverage-table
coverage: deps-test
	@find $(COV) -name '*.gcda' -delete 2>/dev/null; true
	@$(COV_MAKE) check-unit || echo "coverage: check-unit failed"
	@$(COV_MAKE) check-server || echo "coverage: check-server failed"
	@$(COV_MAKE) check-grpc || echo "coverage: check-grpc failed"
	@$(COV_MAKE) check-web || echo "coverage: check-web failed"
	@$(MAKE) --no-print-directory coverage-table
coverage-table:
	@printf '%-24s %6s %6s\n' file lines run; for f in $(CORE_SRC) $(PROTO_SRC) \
	    $(SERVER_SRC) server/main.c; do gcov -n -o $(COV)/$$(dirname $$f) $$f \
	    2>/dev/null | awk -v f=$$f '$$0 == "File '\''" f "'\''" { t = 1; next } \
	    t && /^Lines/ { split($$0, a, /:|% of /); \
	    printf "%-24s %6d %5.1f%%\n", f, a[3], a[2]; exit }'; done

# ---- fuzzing at depth (issue 11): make fuzz-long, not in CI --------------
#   make fuzz-long [FUZZ_LONG_RUNS=10000000] [FUZZ_LONG_SECONDS=3600]
#                  [FUZZ_TARGETS="json framing st config upload maps_query pb"]
# Each target runs until FUZZ_LONG_RUNS executions or FUZZ_LONG_SECONDS,
# from its seed corpora in the repository (FUZZ_SEEDS_<target>), growing
# build/fuzz/long/<target>; crashes go to build/fuzz/crashes/<target>-*.
# One line per target at the end: executions, coverage (libFuzzer's cov:
# edges) and the crash files; the whole log is build/fuzz/long/<target>.log.
FUZZ_LONG_RUNS ?= 10000000
FUZZ_LONG_SECONDS ?= 3600
FUZZ_TARGETS ?= json framing st config upload maps_query pb
FUZZ_CC = clang -std=c11 -D_GNU_SOURCE -g -O1 $(WARN) \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. \
    -Ibuild/fuzz/gen $(shell pkg-config --cflags jansson libprotobuf-c)
FUZZ_LIBS = $(shell pkg-config --libs jansson libprotobuf-c) $(BLAS_LIBS) -lm -pthread
build/fuzz/fuzz_json: tests/proto/fuzz_oip.c $(PROTO_SRC) core/json_mem.c $(wildcard proto/*.h) $(FUZZ_PB_GEN)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ tests/proto/fuzz_oip.c $(PROTO_SRC) core/json_mem.c $(FUZZ_PB_GEN) $(FUZZ_LIBS)
build/fuzz/fuzz_framing: tests/proto/fuzz_oip.c $(PROTO_SRC) core/json_mem.c $(wildcard proto/*.h) $(FUZZ_PB_GEN)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -DFUZZ_FRAMING -o $@ tests/proto/fuzz_oip.c $(PROTO_SRC) core/json_mem.c \
	    $(FUZZ_PB_GEN) $(FUZZ_LIBS)
build/fuzz/fuzz_st build/fuzz/fuzz_config: build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c \
        $(CORE_SRC) $(wildcard core/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $< $(CORE_SRC) $(FUZZ_LIBS)
build/fuzz/fuzz_upload: tests/fuzz/fuzz_upload.c server/upload.c server/upload.h \
        $(CORE_SRC) $(wildcard core/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $< server/upload.c $(CORE_SRC) $(FUZZ_LIBS)
build/fuzz/fuzz_maps_query: tests/fuzz/fuzz_maps_query.c server/maps.c \
        server/maps_slice.c server/maps_norm.c server/maps_http.c server/maps.h \
        server/maps_int.h server/maps_norm.h $(CORE_SRC) $(PROTO_SRC) $(FUZZ_PB_GEN)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $< server/maps.c server/maps_slice.c server/maps_norm.c \
	    server/maps_http.c $(CORE_SRC) $(PROTO_SRC) $(FUZZ_PB_GEN) $(FUZZ_LIBS)
FUZZ_SEEDS_json := tests/fuzz/corpus/json tests/proto/fuzz_corpus
FUZZ_SEEDS_framing := tests/fuzz/corpus/framing
FUZZ_SEEDS_st := tests/fuzz/corpus/st tests/core/st_corpus
FUZZ_SEEDS_config := tests/fuzz/corpus/config
FUZZ_SEEDS_upload := tests/fuzz/corpus/upload
FUZZ_SEEDS_maps_query := tests/fuzz/corpus/maps_query
FUZZ_SEEDS_pb := tests/proto/fuzz_pb_corpus
.PHONY: fuzz-long
fuzz-long:
	@tools/install-deps.sh fuzz
	@$(MAKE) --no-print-directory $(addprefix build/fuzz/fuzz_,$(FUZZ_TARGETS))
	@mkdir -p build/fuzz/crashes $(addprefix build/fuzz/long/,$(FUZZ_TARGETS))
	@$(foreach t,$(FUZZ_TARGETS),echo "== fuzz_$(t): up to $(FUZZ_LONG_RUNS) runs or $(FUZZ_LONG_SECONDS) s"; \
	    build/fuzz/fuzz_$(t) -runs=$(FUZZ_LONG_RUNS) \
	        -max_total_time=$(FUZZ_LONG_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	        -max_len=65536 -print_final_stats=1 -close_fd_mask=1 \
	        -artifact_prefix=build/fuzz/crashes/$(t)- build/fuzz/long/$(t) \
	        $(FUZZ_SEEDS_$(t)) > build/fuzz/long/$(t).log 2>&1; \
	    echo "fuzz_$(t): exit $$?, $$(grep -o 'number_of_executed_units: [0-9]*' build/fuzz/long/$(t).log | tail -1), $$(grep -o 'cov: [0-9]*' build/fuzz/long/$(t).log | tail -1) edges, $$(ls build/fuzz/crashes | grep -c '^$(t)-') crash files";)

BENCH_PROTO := $(BUILD)/bench/bench_proto
$(BENCH_PROTO): bench/bench_proto.c $(PROTO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(PROTO_LIB) $(CORE_LIB) $(LDFLAGS_ALL) $(LIBS_ALL)
bench-proto: deps $(BENCH_PROTO)
	$(BENCH_PROTO)
bench: bench-proto

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- core: the engine's element-wise loops (bias, softmax scaling, online
# rescaling) want the vectorizer's full cost model: at -O2 GCC 12 vectorizes
# only loops whose trip count it knows.
$(call obj,$(CORE_SRC)): CFLAGS_ALL += -fvect-cost-model=dynamic

# ---- core: engine benchmark (bench/bench_attn.c + PyTorch peer) ----------
BENCH_BIN := $(BUILD)/bench/bench_attn
$(BUILD)/bench/%: bench/%.c $(CORE_LIB) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(CORE_LIB) $(LDFLAGS_ALL) $(LIBS_ALL)

.PHONY: bench-core
bench-core: deps $(BENCH_BIN)
	@tools/install-deps.sh bench
	$(BENCH_BIN) --threads 2 --peer bench/torch_peer.py
bench: bench-core
# Build the benchmark with everything else, so a change that breaks it
# fails `make test` (running it stays `make bench`).
all: $(BENCH_BIN)

# ---- core: decoder steps over the K/V cache (bench/bench_decode.c) -------
# N = 1, 8, 32 sequences of a Llama-like layer: engine tokens/s and GB/s
# against memcpy, the PyTorch peer, resending the history, and (when the
# daemon is built) N HTTP clients driving sequences through attnd.
# OPENBLAS_NUM_THREADS=1: OpenBLAS's own threads, started when the library
# loads, would spin beside the executor's (as attnd avoids, server/main.c);
# the PyTorch peer runs without it, with its own 2 threads.
# the decoder-step load generator (N C clients, one sequence each)
STEP_CLIENT := $(BUILD)/bench/step_client
$(STEP_CLIENT): bench/step_client.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LDFLAGS_ALL) -pthread
all: $(STEP_CLIENT)
DECODE_BIN := $(BUILD)/bench/bench_decode
.PHONY: bench-decode
bench-decode: deps $(DECODE_BIN) $(STEP_CLIENT) $(if $(HAVE_ATTND),$(ATTND))
	@tools/install-deps.sh bench
	OPENBLAS_NUM_THREADS=1 $(DECODE_BIN) --threads 2 \
	    --peer bench/torch_decode_peer.py \
	    $(if $(HAVE_ATTND),--http-tps "python3 bench/decode_http.py --client $(STEP_CLIENT) $(ATTND)")
bench: bench-decode
all: $(DECODE_BIN)

# ---- server: HTTP benchmark (attnd vs a bare libmicrohttpd, wrk) ---------
BARE_MHD := $(BUILD)/bench/bare_mhd
$(BARE_MHD): bench/bare_mhd.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LDFLAGS_ALL) $(PKG_LIBS)
.PHONY: bench-server
bench-server: deps $(ATTND) $(BARE_MHD) $(STEP_CLIENT) $(DECODE_BIN)
	@tools/install-deps.sh bench
	python3 bench/http_bench.py --attnd $(ATTND) --bare $(BARE_MHD) --client $(STEP_CLIENT) --engine $(DECODE_BIN)
bench: bench-server
$(PB_GEN) $(PB_OBJ) $(EMBED) $(BUILD)/gen/web_assets.o $(STEP_CLIENT) $(BARE_MHD) \
    $(BENCH_PROTO): | deps
# bench-path: where one small request goes (system calls, instructions by
# place, heap calls, loop<->pool hand-offs), attnd next to bare_mhd; then
# the same request on the pool path (the path under load).
.PHONY: bench-path
bench-path: deps $(ATTND) $(BARE_MHD)
	@tools/install-deps.sh bench
	python3 bench/path_profile.py --attnd $(ATTND) --bare $(BARE_MHD)
	python3 bench/path_profile.py --attnd $(ATTND) --bare '' --attnd-args '--inline-conns 0'

# ---- weights: load benchmark; committed generated files match generators --
LOAD_BENCH := $(BUILD)/bench/bench_load
.PHONY: bench-load check-weights-gen
bench-load: deps $(LOAD_BENCH)
	$(LOAD_BENCH) --mb 100 --reps 3
bench: bench-load

# ---- web: retained-map store benchmark (numpy peer for pooling) ----------
MAPS_BENCH := $(BUILD)/bench/bench_maps
$(MAPS_BENCH): bench/bench_maps.c $(LINK_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LINK_LIBS) $(LDFLAGS_ALL) $(LIBS_ALL)
.PHONY: bench-maps
bench-maps: deps $(MAPS_BENCH)
	@tools/install-deps.sh bench
	$(MAPS_BENCH) --t 4096 --max 512 --json 1024 --reps 5
bench: bench-maps

# Regenerates the safetensors corpus, the model corpus and models/demo (the
# demo generator prints each head's argmax pattern on the sample sentence)
# into a temporary folder and compares them with the committed files; then
# the unit tests of the standard-library tools they are made with.
check-weights-gen:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	python3 -B tests/core/make_st_corpus.py "$$d/st" >/dev/null && \
	diff -r "$$d/st" tests/core/st_corpus && \
	python3 -B tests/core/make_model_corpus.py "$$d/mc" >/dev/null && \
	diff -r "$$d/mc" tests/core/model_corpus && \
	python3 -B tools/make_demo.py "$$d/demo" && \
	diff -r "$$d/demo" models/demo && \
	echo "check-weights-gen: st_corpus, model_corpus and models/demo match their generators"
	@python3 -B tests/core/test_tools.py -v

# ---- other CPUs, emulated: make test-cpus [QEMU_CPUS="Nehalem IvyBridge"] --
# The core and proto Check binaries under qemu-x86_64 -cpu <model> for
# each QEMU_CPUS model (default Nehalem: no AVX, FMA or F16C), then a
# cross build for aarch64 (build/arm64) under qemu-aarch64, every Check
# binary and infer.test.mjs against its attnd (tools/test-cpus.sh).
# Installs qemu-user and the arm64 toolchain and libraries (adds arm64 to
# dpkg's architectures). About 8 min.
QEMU_CPUS ?= Nehalem
.PHONY: test-cpus
test-cpus:
	@tools/install-deps.sh cpus
	QEMU_CPUS="$(QEMU_CPUS)" tools/test-cpus.sh

# ---- fresh: the README's install story on a new Debian 12 -----------------
# A debootstrapped minbase bookworm root (chroot, host network, as root):
# the README's apt-get line, then make run and make test in a copy of the
# repository. Prints "fresh-machine: N passed, M failed". Needs root.
.PHONY: fresh-test
fresh-test:
	@tools/install-deps.sh fresh
	deploy/fresh-machine-test.sh
