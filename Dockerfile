# attnd container image.
#   docker build -t attnd . && docker run -p 8080:8080 attnd
# Two stages: "build" compiles with the -dev packages (the repo's own make,
# which installs them through tools/install-deps.sh as root); the final stage
# is a plain debian:bookworm-slim with only the runtime libraries, the
# daemon, and the models shipped in the repo's models/ folder (if any).
# Tested without a Docker engine by deploy/container-test.sh (buildah).

FROM debian:bookworm-slim AS build
WORKDIR /src
# Dependencies first, so that editing sources does not re-run apt.
COPY tools/install-deps.sh tools/install-deps.sh
RUN tools/install-deps.sh build
COPY . .
# The daemon only: unit-test binaries are make test's business.
RUN make -j2 deps build/default/attnd \
 && install -D -m 0755 build/default/attnd /out/usr/local/bin/attnd \
 && mkdir -p /out/models \
 && if [ -d models ]; then cp -a models/. /out/models/; fi

FROM debian:bookworm-slim
# Runtime libraries only (the build stage's -dev packages stay behind); ldd
# proves nothing the binary links is missing.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libuv1 libopenblas0-pthread \
        libnghttp2-14 libprotobuf-c1 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 attnd \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin attnd \
 && install -d -o 10001 -g 10001 -m 0755 /models
COPY --from=build /out/usr/local/bin/attnd /usr/local/bin/attnd
# The daemon's own, as the volume a plain `docker run` makes of it: an
# upload (POST /v2/repository/models/<name>/load with the files) writes
# there. A repository mounted over it keeps its own owner.
COPY --from=build --chown=10001:10001 /out/models /models
RUN ldd /usr/local/bin/attnd | awk '/not found/ {bad=1; print} END {exit bad}'

# Settings are ATTND_* variables (see attnd --help); these differ from the
# daemon's defaults because a container must listen on every interface.
ENV ATTND_HOST=0.0.0.0 \
    ATTND_PORT=8080 \
    ATTND_GRPC_PORT=8001 \
    ATTND_MODELS=/models
# The model repository: mount your own folder of <name>/model.safetensors.
VOLUME ["/models"]
# REST on 8080, gRPC (KServe v2 / Triton GRPCInferenceService, h2c) on 8001.
EXPOSE 8080 8001
# Numeric so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
# The daemon is PID 1 and handles SIGTERM itself: stop accepting, report
# not-ready, drain, exit 0. It starts no children, so no init is needed.
STOPSIGNAL SIGTERM
# No curl in the image: the daemon checks itself (plain sockets).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["/bin/sh", "-c", "exec /usr/local/bin/attnd --health-check \"http://127.0.0.1:${ATTND_PORT}/v2/health/ready\""]
ENTRYPOINT ["/usr/local/bin/attnd"]
