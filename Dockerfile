# rollcheck for in-cluster runs (the chart's nightly, its report server, its Locust
# workers). Non-root, dependencies pinned by constraints.txt, no shell needed at run
# time beyond the workers' loop; the chart runs it with a read-only root filesystem
# (writable: /tmp and the reports volume), which Pod Security "restricted" admits.
#   docker build -t registry.example.com/rollcheck:0.1.0 .
#   docker run --rm registry.example.com/rollcheck:0.1.0 rollcheck --version
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HOME=/tmp
WORKDIR /app
COPY constraints.txt pyproject.toml README.md ./
COPY harness ./harness
COPY loadgen ./loadgen
RUN pip install --no-cache-dir -c constraints.txt . \
    && python -m compileall -q /usr/local/lib/python3.11/site-packages
# the scenarios the nightly runs (pytest scenarios ...) and their pytest configuration
COPY conftest.py ./
COPY scenarios ./scenarios
RUN groupadd --gid 10001 rollcheck && useradd --uid 10001 --gid 10001 --no-create-home \
    --home-dir /tmp --shell /usr/sbin/nologin rollcheck
USER 10001:10001
ENTRYPOINT []
CMD ["rollcheck", "--help"]
