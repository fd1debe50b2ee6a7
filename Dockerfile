# jobforge: one image for the API, the native worker and `jobforge setup`
# (docker-compose.yml; docs/operations.md, "Running against a cluster").
# The package is installed at build time into its own venv; containers only run it.

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY engine ./engine
COPY activities ./activities
COPY api ./api
COPY worker ./worker
RUN python -m venv /opt/jobforge && /opt/jobforge/bin/pip install .

FROM python:3.11.13-slim-bookworm
# A fixed uid, so a volume's owner is the same on every host.
RUN useradd --create-home --uid 10001 --user-group jobforge \
    && mkdir -p /var/cache/jobforge/solvers \
    && chown -R jobforge:jobforge /var/cache/jobforge
COPY --from=build /opt/jobforge /opt/jobforge
ENV PATH=/opt/jobforge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER jobforge
WORKDIR /home/jobforge
EXPOSE 8000
# The API's liveness route (no auth, no Temporal call). Workers and `setup` get their
# own check, or none, in docker-compose.yml.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["jobforge"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
