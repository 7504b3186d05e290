#!/bin/sh
# First start: make the cluster with POSTGRES_USER (password POSTGRES_PASSWORD, required) and the
# database POSTGRES_DB, as the official image does. Every start: run postgres in the foreground,
# listening on every address of the container, passwords required over TCP.
set -eu
user="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "hubflow-postgres: set POSTGRES_PASSWORD (the password of $user) for the first start" >&2
    exit 1
  fi
  password_file="$(mktemp)"
  printf '%s' "$POSTGRES_PASSWORD" >"$password_file"
  initdb --username="$user" --pwfile="$password_file" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$database" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    createdb --username="$user" "$database"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  echo "hubflow-postgres: created the cluster with user $user and database $database"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
