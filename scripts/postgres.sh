#!/usr/bin/env bash
# Makes sure PostgreSQL answers on 127.0.0.1:5432 for the Airflow tests (a real metadata database).
#
# When something already answers there, nothing is changed. Otherwise, as root with apt: installs
# Debian's PostgreSQL when it is missing, lets the local user `postgres` connect over TCP from
# 127.0.0.1 without a password (trust, loopback only: a test machine's database), and starts the
# cluster. Elsewhere it says what to do and exits 0: the Airflow tests then skip, saying why.
set -euo pipefail

host=127.0.0.1
port=5432

answers() {
  (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

if answers; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "hubflow: nothing answers on $host:$port and PostgreSQL cannot be set up here (needs root and apt-get);" \
    "start a PostgreSQL that lets user postgres connect from $host without a password, or the Airflow tests skip" >&2
  exit 0
fi

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  echo "hubflow: installing PostgreSQL (Debian package) for the Airflow metadata database of the tests" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      postgresql; } >/dev/null
fi

# The cluster on our port: the one Debian created (usually 15/main), or a new one.
read -r version cluster < <(pg_lsclusters --no-header | awk -v p="$port" '$3 == p {print $1, $2; exit}') || true
if [ -z "${version:-}" ]; then
  version="$(ls /usr/lib/postgresql | sort -V | tail -1)"
  cluster=hubflow
  pg_createcluster --port "$port" "$version" "$cluster" >/dev/null
fi

hba="/etc/postgresql/$version/$cluster/pg_hba.conf"
rule="host all postgres $host/32 trust"
if ! grep -qxF "$rule" "$hba"; then
  # First matching line wins: put ours before Debian's scram-sha-256 lines.
  { echo "# hubflow tests: user postgres from loopback without password"; echo "$rule"; cat "$hba"; } >"$hba.new"
  mv "$hba.new" "$hba"
  chown postgres:postgres "$hba"
fi

pg_ctlcluster "$version" "$cluster" start 2>/dev/null || pg_ctlcluster "$version" "$cluster" reload
for _ in $(seq 1 30); do
  if answers; then
    echo "hubflow: PostgreSQL $version/$cluster answers on $host:$port" >&2
    exit 0
  fi
  sleep 1
done
echo "hubflow: PostgreSQL $version/$cluster did not answer on $host:$port; see /var/log/postgresql/" >&2
exit 1
