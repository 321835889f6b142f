# syntax=docker/dockerfile:1
# CacheScout proxy image. Also runs the simulated engine: `docker run IMAGE sim-engine --host 0.0.0.0`.
#
# Two stages: the build stage installs the package and its runtime dependencies into a virtualenv
# (wheels only, no compiler); the final stage copies just that virtualenv onto a fresh slim base, so
# the image holds no pip cache, no build tools, no sources beyond the installed package, and no .git.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=:all:
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# Every dependency must come as a wheel (PIP_ONLY_BINARY): a missing wheel fails the build instead
# of needing a compiler. pip itself is removed from the virtualenv that ships.
RUN /opt/venv/bin/pip install --no-cache-dir ".[kvevents]" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="cachescout" \
      org.opencontainers.image.description="Sidecar proxy that keeps multi-agent KV prefix caches warm in vLLM/SGLang" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 cachescout \
 && useradd --system --uid 10001 --gid cachescout --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin cachescout \
 && mkdir -p /var/lib/cachescout \
 && chown 10001:10001 /var/lib/cachescout
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CACHESCOUT_HOST=0.0.0.0 \
    CACHESCOUT_PORT=9000
USER 10001:10001
WORKDIR /var/lib/cachescout
EXPOSE 9000
# Liveness only (process up): /readyz also needs the engine, which may legitimately still be loading.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('CACHESCOUT_PORT', '9000'), timeout=2)"]
ENTRYPOINT ["cachescout"]
CMD ["serve"]
