FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY apiserver apiserver
COPY pipeline pipeline
COPY launcher launcher
RUN pip install --no-cache-dir . \
    && useradd --uid 10001 --create-home reports \
    && mkdir -p /var/lib/reports-pipeline && chown reports /var/lib/reports-pipeline
USER 10001
ENTRYPOINT ["reports-pipeline"]
CMD ["--help"]
