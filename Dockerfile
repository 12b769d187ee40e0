# rollcheck for in-cluster runs (the nightly CronJob, Locust workers).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends nginx-light \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir /app
ENTRYPOINT []
CMD ["rollcheck", "--help"]
