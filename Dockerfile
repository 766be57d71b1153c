# syntax=docker/dockerfile:1
#
# gangscope image: one image for every subcommand a cluster runs (collector, agent, snapshot, explain).
#
#   docker build -t gangscope:0.1.0 .
#   docker run --rm gangscope:0.1.0 collector --version
#
# The simulators (the demo, --nvml sim) are the separate gangscope-sim distribution and never
# enter the build context (.dockerignore); `gangscope demo` in this image says how to install them.
#
# Two stages so that the final image holds the installed package and its runtime dependencies,
# and nothing used to build them: the builder makes wheels (gangscope's own and every
# dependency's), the final stage installs them offline (--no-index) from a bind mount of the
# builder's /wheels, so the wheels themselves do not end up in a layer either.

FROM python:3.11-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# Every runtime dependency ships manylinux wheels for CPython 3.11 (amd64 and arm64), so no
# compiler is needed here either; the builder stage exists to keep pip's build environment,
# the source tree and the wheel cache out of the final image.
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="gangscope" \
      org.opencontainers.image.description="Observability for Kubernetes GPU clusters: Kueue admission, gang assembly, topology and NVLink per job" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels gangscope
# 65534 (nobody) by number: kubelet can only verify runAsNonRoot for a numeric USER. The agent's
# DaemonSet overrides it with runAsUser 0 (kubelet's pod-resources socket is root-only); see
# deploy/base/agent.yaml and docs/deploy.md.
USER 65534:65534
# collector, agent
EXPOSE 9400 9401
# No HEALTHCHECK: Kubernetes ignores it (the manifests use liveness/readiness probes on /healthz
# and /readyz), and the image also runs one-shot commands (snapshot, explain) and two servers on
# different ports, so no single probe fits every use.
HEALTHCHECK NONE
ENTRYPOINT ["gangscope"]
CMD ["--help"]
