# hubflow's image: Debian's Python 3.11 and OpenJDK 17 JRE, the virtualenv of requirements.lock (the
# runtime lock: no test or development tool, no installer), and this project. One image runs every Airflow service of docker-compose.yml, the Spark standalone
# master and workers, and the Event Hubs emulator, so the Spark driver (spark-submit inside a Celery
# worker) and the executors have the same Python, packages and jars.
#
#   docker build -t hubflow:local .      # or: make stack-up (scripts/stack.sh), see docs/deployment.md
#
# Build inputs that never belong in git or in the image:
#   .build/ca-certificates.crt  a CA bundle to trust while downloading (a TLS-inspecting proxy's);
#                               scripts/stack.sh copies the host's bundle there. Used by the RUN
#                               steps only, never installed into the image's trust store.
#   HUBFLOW_WHEELHOUSE          (build arg) a find-links URL of the lock's files; scripts/stack.sh
#                               serves the ones scripts/wheelhouse.py keeps on the host. Only spares
#                               downloads: the lock decides every version and every file's hash.
FROM debian:bookworm-slim

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1

# python3-venv: Debian's Python 3.11 with venv/ensurepip. openjdk-17-jre-headless: Spark's JVM.
# procps: Spark's scripts call ps. curl: health checks. tini: PID 1 that reaps the orphans of
# detached spark-submit drivers. JAVA_HOME gets one name whatever the CPU architecture.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends \
        python3 python3-venv openjdk-17-jre-headless procps curl tini ca-certificates; \
    ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/hubflow-java; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    useradd --uid 50000 --gid 0 --home-dir /opt/airflow --create-home --shell /bin/bash hubflow
ENV JAVA_HOME=/usr/lib/jvm/hubflow-java \
    VIRTUAL_ENV=/opt/hubflow/venv \
    PATH=/opt/hubflow/venv/bin:$PATH

# The locked virtualenv. uv, hash-checked from requirements-uv.lock, is installed outside it for this
# step only and deleted in the same step, so no layer keeps it. The build backend (setuptools,
# requirements-build.lock, hash-checked) goes into the virtualenv first, in place of the unlocked one
# venv seeds: every build here runs without isolation on it, so no build fetches a backend from the
# index. `uv pip sync --require-hashes` installs exactly the runtime lock and refuses any file whose
# sha256 the lock does not list (it keeps the seeded pip and setuptools): the Celery provider is in
# it, and pyspark-client is left out of it on purpose (it would overwrite pyspark's Python files with
# another version's); pyspark publishes only an sdist, built here by that setuptools
# (--no-build-isolation). Bytecode is compiled here because the services run as a user who cannot
# write into the virtualenv.
ARG HUBFLOW_WHEELHOUSE=
COPY .build/ /tmp/hubflow-build/
COPY requirements.lock requirements-uv.lock requirements-build.lock /opt/hubflow/
RUN set -eux; \
    if [ -s /tmp/hubflow-build/ca-certificates.crt ]; then \
        export SSL_CERT_FILE=/tmp/hubflow-build/ca-certificates.crt PIP_CERT=/tmp/hubflow-build/ca-certificates.crt; \
    fi; \
    find_links="${HUBFLOW_WHEELHOUSE:+--find-links $HUBFLOW_WHEELHOUSE}"; \
    python3 -m venv "$VIRTUAL_ENV"; \
    pip install --no-cache-dir --disable-pip-version-check --require-hashes --no-deps \
        --only-binary :all: --target /tmp/hubflow-uv $find_links -r /opt/hubflow/requirements-uv.lock; \
    /tmp/hubflow-uv/bin/uv pip install --no-cache --require-hashes --no-deps --only-binary :all: \
        $find_links -r /opt/hubflow/requirements-build.lock; \
    /tmp/hubflow-uv/bin/uv pip sync --no-cache --require-hashes --no-build-isolation --compile-bytecode \
        $find_links /opt/hubflow/requirements.lock; \
    rm -rf /tmp/hubflow-uv /tmp/uv-*.lock; \
    python -c "import airflow, pyspark; print('airflow', airflow.__version__, 'pyspark', pyspark.__version__)"

# The locked JVM jars of the jobs (delta-spark, hadoop-azure; jvm-deps.lock) into the virtualenv's
# pyspark/jars, checksums verified, by the same script as `make venv`: every Spark the image starts
# (drivers, master, workers, executors) has them, and no job fetches a jar at run time.
ARG HUBFLOW_MAVEN_REPO=
COPY jvm-deps.lock /opt/hubflow/jvm-deps.lock
COPY scripts/jvm_deps.py /opt/hubflow/scripts/jvm_deps.py
RUN set -eux; \
    if [ -s /tmp/hubflow-build/ca-certificates.crt ]; then export SSL_CERT_FILE=/tmp/hubflow-build/ca-certificates.crt; fi; \
    if [ -n "$HUBFLOW_MAVEN_REPO" ]; then export HUBFLOW_MAVEN_REPO; else unset HUBFLOW_MAVEN_REPO; fi; \
    HUBFLOW_JAR_CACHE=/tmp/hubflow-jars python /opt/hubflow/scripts/jvm_deps.py install; \
    rm -rf /tmp/hubflow-jars; \
    python /opt/hubflow/scripts/jvm_deps.py check

# The project's own packages, not editable and without dependencies (the lock has them all): the
# Event Hubs data source, the emulator, the control plane hubflow-control (which the plugins, the
# jobs and the command import) and the jobs runtime hubflow-jobs. The virtualenv's own pip builds
# them without isolation, with the locked setuptools already in the virtualenv, and --no-index: this
# step fetches no Python package. The connector's compiled loops (pyspark_eventhubs/_native.c) are
# built with Debian's gcc and Python headers, installed and purged in this same step, so no layer
# keeps a compiler; the step fails if the extension did not build. pip is then uninstalled: nothing
# at run time installs packages.
COPY connectors /opt/hubflow/src/connectors
COPY emulator /opt/hubflow/src/emulator
COPY control /opt/hubflow/src/control
COPY jobs /opt/hubflow/src/jobs
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends gcc libc6-dev python3-dev; \
    pip install --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation --no-index \
        /opt/hubflow/src/connectors /opt/hubflow/src/emulator /opt/hubflow/src/control \
        /opt/hubflow/src/jobs; \
    apt-get purge -y --auto-remove gcc libc6-dev python3-dev binutils; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    python -c "from pyspark_eventhubs import native; assert native.accel is not None, 'no compiled loops'"; \
    pip uninstall --yes --disable-pip-version-check pip; \
    rm -rf /tmp/hubflow-build

# DAGs, plugins, job entry scripts and configs (spark-submit runs jobs/*.py from $HUBFLOW_JOBS_DIR),
# the users' pipeline modules ($HUBFLOW_PIPELINES_DIR, docs/pipelines.md) and the deployment's settings.
COPY --chown=50000:0 dags /opt/airflow/dags
COPY --chown=50000:0 plugins /opt/airflow/plugins
COPY --chown=50000:0 jobs /opt/airflow/jobs
COPY --chown=50000:0 pipelines /opt/airflow/pipelines
COPY deploy/airflow/airflow.cfg /opt/airflow/config/airflow.cfg
COPY deploy/spark/spark-defaults.conf /opt/hubflow/spark-conf/spark-defaults.conf
COPY deploy/eventhubs/Config.json /opt/hubflow/eventhubs/Config.json
COPY deploy/healthcheck.py deploy/prepare_data.py /opt/hubflow/
# Folders the services write, owned by the image's user: a new named volume mounted on one of them
# starts with this owner.
RUN install -d -o 50000 -g 0 /opt/hubflow/data /var/lib/eventhubs /opt/airflow/logs

ENV AIRFLOW_HOME=/opt/airflow \
    AIRFLOW_CONFIG=/opt/airflow/config/airflow.cfg \
    HUBFLOW_REGISTRY=/opt/airflow/dags/registry.yaml \
    HUBFLOW_JOBS_DIR=/opt/airflow/jobs \
    HUBFLOW_PIPELINES_DIR=/opt/airflow/pipelines \
    PYSPARK_PYTHON=/opt/hubflow/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/hubflow/venv/bin/python \
    SPARK_CONF_DIR=/opt/hubflow/spark-conf
USER 50000:0
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["bash"]
