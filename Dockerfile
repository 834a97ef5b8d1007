# The build-prompt worker image: `docker build -t build-prompt-worker .`
#
# Two stages: the build stage installs the runtime dependencies exactly as uv.lock pins
# them, then the worker's wheel (scripts/install-runtime.sh, the same script CI runs),
# into a virtualenv; the final stage is a clean slim Python with only that virtualenv, no
# compiler, no pip, no uv, no test tools, running as an unprivileged user. Where the
# public registries are out of reach, scripts/build-image builds it on a Debian-built
# stand-in base (docs/OPERATIONS.md).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    UV=/opt/uv/bin/uv \
    UV_NO_CACHE=1 \
    UV_PYTHON_DOWNLOADS=never \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# SSL_CERT_FILE: uv trusts its own bundled roots unless told otherwise; the system's
# bundle is what pip trusts too (and holds an egress proxy's CA where there is one).
# The dependencies in a layer of their own, keyed on pyproject.toml and uv.lock alone: a
# change to the worker's code rebuilds only the small wheel below, not every dependency.
# uv is the version the lock pins, in a venv of its own that the final stage leaves out.
COPY pyproject.toml uv.lock ./
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN locked_uv=$(grep -A1 '^name = "uv"$' uv.lock | sed -n 's/^version = "\(.*\)"$/\1/p') \
 && python3 -m venv /opt/uv \
 && /opt/uv/bin/pip install --quiet "uv==${locked_uv:?}" \
 && python3 -m venv /opt/prompt-worker \
 && UV_PROJECT_ENVIRONMENT=/opt/prompt-worker "$UV" sync --quiet --frozen \
      --no-install-project --no-dev --extra tokenizers --extra otel
COPY scripts/install-runtime.sh scripts/install-runtime.sh
COPY README.md ./
COPY schemas/ schemas/
COPY worker/ worker/
# pip and setuptools installed the venv; the worker never runs them.
RUN scripts/install-runtime.sh /opt/prompt-worker \
 && /opt/prompt-worker/bin/python -m pip uninstall --quiet --yes pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="build-prompt-worker" \
      org.opencontainers.image.description="RabbitMQ worker that renders incident-investigation jobs into LLM message lists" \
      org.opencontainers.image.licenses="Apache-2.0"

# Debian's Hyperscan is the fat-runtime build (AVX2/AVX-512 code picked at run time):
# the masking scan's fastest engine (docs/MASKING.md). Hyperscan is x86-only; on other
# architectures Debian's Vectorscan provides the same library (libhs.so.5). Without
# either the worker still masks, with the slower engines and the same results.
# (The package is pinned in the variable, which hadolint cannot see.)
# The base's own pip, setuptools and wheel are build tools the worker never runs: gone
# (Debian's packages on a Debian-built base, the official image's own install otherwise).
# hadolint ignore=DL3008
RUN apt-get update \
 && case "$(dpkg --print-architecture)" in \
      amd64) hyperscan='libhyperscan5=5.4.*' ;; \
      *) hyperscan='libvectorscan5=5.4.*' ;; \
    esac \
 && apt-get install -y --no-install-recommends "$hyperscan" \
 && if dpkg-query --show python3-pip >/dev/null 2>&1; then \
      apt-get purge -y --auto-remove python3-pip python3-setuptools python3-wheel; \
    else \
      python3 -m pip uninstall --quiet --yes pip setuptools wheel; \
    fi \
 && rm -rf /var/lib/apt/lists/*

# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 prompt-worker \
 && useradd --system --uid 10001 --gid prompt-worker --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin prompt-worker

COPY --from=build /opt/prompt-worker /opt/prompt-worker
# Default configuration (empty MCP registry, built-in masking); mount your own over it:
# docker run -v ./worker.yaml:/etc/prompt-worker/worker.yaml:ro ... (docs/OPERATIONS.md).
COPY deploy/worker.yaml /etc/prompt-worker/worker.yaml

# The user has no home, so the compiled masking database is cached in /tmp instead
# (an emptyDir in deploy/k8s): a restarted worker or render helper reads it back rather
# than compiling it again. Unwritable (a read-only root without a /tmp mount), it is skipped.
ENV PATH="/opt/prompt-worker/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PROMPT_WORKER_CACHE_DIR=/tmp/prompt-worker \
    PROMPT_WORKER_CONFIG=/etc/prompt-worker/worker.yaml \
    PROMPT_WORKER_HTTP_PORT=8080 \
    PROMPT_WORKER_LOG_FORMAT=json

USER 10001:10001
EXPOSE 8080

# Liveness of the process, not of the broker (that is /readyz). The slim image has no
# curl: the venv's Python does the request; urlopen raises (exit 1) on any non-2xx.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PROMPT_WORKER_HTTP_PORT', '8080') + '/healthz', timeout=4)"]

# SIGTERM starts the worker's drain (stop consuming, finish in-flight jobs, then exit);
# the exec form makes prompt-worker PID 1 so it receives the signal itself.
STOPSIGNAL SIGTERM
ENTRYPOINT ["prompt-worker", "serve"]
CMD []
