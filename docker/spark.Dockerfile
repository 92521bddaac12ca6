# A Spark driver image that runs the Shoal examples on local[*] Spark.
#   docker build -f docker/spark.Dockerfile -t shoal-spark .   (from the repository root)
# Java 17 from Debian; pyspark and pyarrow from the `spark` extra.
# Pinned to Debian 12 (bookworm): python:3.11-slim now follows Debian 13, which has no Java 17.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10002 spark \
 && useradd --system --uid 10002 --gid spark --create-home --home-dir /home/spark spark \
 && mkdir -p /data \
 && chown spark:spark /data

WORKDIR /opt/shoal
COPY pyproject.toml README.md ./
COPY shoal ./shoal
RUN pip install '.[spark]' && rm -rf /opt/shoal/build
COPY examples ./examples

USER spark
# local[*] Spark in one container; executors run Python workers with this interpreter,
# which has the shoal package.
ENV SPARK_LOCAL_IP=127.0.0.1 \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python
VOLUME ["/data"]
ENTRYPOINT ["python", "/opt/shoal/examples/spark_share_stream.py"]
