# hubflow's image: Airflow 3.3.2 + Java 17 (for Spark) + this project at the versions of requirements.lock.
# One image runs every Airflow service of docker-compose.yml and the Spark standalone master and
# worker, so the driver (in the Celery worker) and the executors have the same Python packages.
#
#   docker compose build            # or: docker build -t hubflow-airflow:local .
FROM apache/airflow:3.3.2-python3.11

USER root
# Java 17 for Spark's JVM (Debian's openjdk-17-jre-headless; on a base without it, Java 21, which
# Spark 4 supports too); procps because Spark's launch scripts call ps. JAVA_HOME gets a fixed name
# whatever the CPU architecture.
RUN apt-get update \
    && (apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
        || apt-get install -y --no-install-recommends openjdk-21-jre-headless procps) \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/hubflow-java \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/hubflow-java

USER airflow
WORKDIR /opt/hubflow/src
# The image's Python environment is the virtualenv at $VIRTUAL_ENV (/home/airflow/.local); uv uses it.
COPY --chown=airflow:root requirements.lock ./
# `uv pip sync` installs exactly the lock (pyspark-client is left out of it on purpose: it would
# overwrite pyspark's Python files with another version's). The lock has no Celery provider, which
# the base image ships for CeleryExecutor: reinstall the base image's version of it, held to the
# lock's versions for everything the lock pins.
RUN set -eux; \
    celery_provider="$(pip show apache-airflow-providers-celery | sed -n 's/^Version: //p')"; \
    pip install --no-cache-dir "uv==0.13.9"; \
    uv pip sync --no-cache requirements.lock; \
    uv pip install --no-cache --constraint requirements.lock \
        "apache-airflow-providers-celery[redis]==${celery_provider}"; \
    python -c "import pyspark, airflow; print('pyspark', pyspark.__version__, 'airflow', airflow.__version__)"

# The project's own packages (not editable): the Event Hubs data source, the emulator, and the jobs
# runtime hubflow_jobs, whose job-supervisor contract (hubflow_jobs.status_folder) the plugins import.
COPY --chown=airflow:root connectors ./connectors
COPY --chown=airflow:root emulator ./emulator
COPY --chown=airflow:root jobs ./jobs
RUN uv pip install --no-cache --no-deps ./connectors ./emulator ./jobs

# DAGs, plugins and jobs; docker-compose.yml mounts the working copies over these in development.
COPY --chown=airflow:root dags /opt/airflow/dags
COPY --chown=airflow:root plugins /opt/airflow/plugins
COPY --chown=airflow:root jobs /opt/airflow/jobs
ENV HUBFLOW_REGISTRY=/opt/airflow/dags/registry.yaml \
    HUBFLOW_JOBS_DIR=/opt/airflow/jobs \
    PYSPARK_PYTHON=/home/airflow/.local/bin/python \
    PYSPARK_DRIVER_PYTHON=/home/airflow/.local/bin/python \
    SPARK_CONF_DIR=/opt/hubflow/spark-conf
WORKDIR /opt/airflow
