# The reports-pipeline image: `up`, `serve` and `worker` against an external
# Kafka (KAFKA_BOOTSTRAP) and ClickHouse (CLICKHOUSE_URL). Its name and tag:
# deploy/helm/reports-pipeline/values.yaml (image.repository) and the chart's
# appVersion, which is the version in pyproject.toml. README: "Build the image".

# Build: the project's wheel and the wheels of everything it needs.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY apiserver apiserver
COPY pipeline pipeline
COPY launcher launcher
COPY bench bench
COPY dashboard dashboard
COPY kubeclient kubeclient
COPY reportsamples reportsamples
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# Run: the installed wheels only, as a user without privileges.
FROM python:3.11-slim
RUN useradd --uid 10001 --no-create-home --home-dir /var/lib/reports-pipeline reports \
    && install -d -o 10001 -g 10001 /var/lib/reports-pipeline
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels reports-pipeline
USER 10001
WORKDIR /var/lib/reports-pipeline
ENTRYPOINT ["reports-pipeline"]
CMD ["--help"]
