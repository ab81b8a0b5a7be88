# Tileplan service image: `tileplan serve` (API) and `tileplan worker` (durable jobs) from one image.
#   docker build -t tileplan .
#   docker run -p 8000:8000 -v tileplan-data:/data tileplan            # embedded: SQLite + local solver pool
#   docker compose up                                                  # deployed: API + 2 workers + PostgreSQL
# Two stages: wheels are built and installed into a virtualenv in the first (with the codegen extra: TVM); the
# final image gets only that virtualenv, the hardware catalog, a non-root user and a C compiler, which code
# generation needs at run time (the Gemmini emulator and a module tar's host library are compiled on the server;
# POST /compile builds a compiled model's host target with make for its compile-time emulated run).
# No pip cache, no sources.

ARG PYTHON=3.11-slim-bookworm

FROM python:${PYTHON} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# dependencies first, so a source change does not reinstall them
COPY pyproject.toml README.md ./
COPY service ./service
COPY client ./client
# prometheus-client, uvloop and httptools are in the project's dependencies once pinned in pyproject.toml;
# listed here too so the image serves metrics and runs the fast event loop either way.
RUN pip install ".[codegen]" ./client "prometheus-client==0.26.0" "uvloop==0.23.0" "httptools==0.9.0" \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

FROM python:${PYTHON}
LABEL org.opencontainers.image.title="tileplan" \
      org.opencontainers.image.description="Tiling plans for DNN layers on GEMM accelerators, as a service"
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tileplan \
 && useradd --system --uid 10001 --gid tileplan --home-dir /data --shell /usr/sbin/nologin tileplan \
 && mkdir -p /data && chown tileplan:tileplan /data
COPY --from=build /opt/venv /opt/venv
COPY hw_catalog /app/hw_catalog
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TILEPLAN_CATALOG_DIR=/app/hw_catalog \
    TILEPLAN_DATA_DIR=/data
USER tileplan
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["tileplan", "serve", "--host", "0.0.0.0", "--port", "8000"]
