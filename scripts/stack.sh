#!/usr/bin/env bash
# The docker-compose stack (docker-compose.yml): Docker, images, start and stop, on this machine or a
# user's. See docs/deployment.md.
#
#   scripts/stack.sh up [--no-build]    Docker ready, images made, stack started and healthy; prints
#                                       the UI address and login                     (make stack-up)
#                                       --no-build: the images of an earlier `images` are used as
#                                       they are (the stack proof builds them in the background)
#   scripts/stack.sh down [--volumes]   stops the stack and what this script started: containers,
#                                       networks, the dockerd it started and that dockerd's iptables
#                                       rules and bridges; --volumes deletes the volumes too
#                                                                     (make stack-down [VOLUMES=1])
#   scripts/stack.sh images             Docker ready and every image made, nothing started
#   scripts/stack.sh check              exit 0 when Docker can run here, else print why and exit 1
#   scripts/stack.sh secrets            the stack's secrets (JWT, Fernet, database, Spark RPC) generated
#                                       when missing (.hubflow/stack/secrets.env, mode 600) and checked; every
#                                       command that runs docker-compose does this first
#
# Docker: when no daemon answers, as root with apt it installs Debian's docker.io (and debootstrap)
# when missing and starts dockerd with the MTU of the host's default route (1400 on these
# machines). Images (each as images.lock records it, scripts/images.py: by its registry digest, or,
# made here, by the build inputs its label names; an image of the same name that is neither is
# replaced): debian:bookworm-slim is pulled, or made from Debian's packages with
# deploy/debian/rootfs.sh (debootstrap) + `docker import` when no registry answers; PostgreSQL and Redis are
# $HUBFLOW_POSTGRES_IMAGE / $HUBFLOW_REDIS_IMAGE (default postgres:15.19-bookworm,
# redis:7.0.15-bookworm: full versions, of the major versions Debian 12 ships, the same defaults as
# docker-compose.yml), or, when the default cannot be pulled, images built here from Debian's
# packages (hubflow-postgres:15-bookworm, hubflow-redis:7.0-bookworm); the project image
# hubflow:local is built from ./Dockerfile with the host's CA bundle (.build/) and the locks' files
# as the index serves them, hash-checked and kept in .hubflow/stack/wheelhouse by
# scripts/wheelhouse.py (served on 127.0.0.1 during the build). Everything this script records
# lives in .hubflow/stack/.
#
# Environment: COMPOSE_PROJECT_NAME (default hubflow), COMPOSE_FILE (default docker-compose.yml;
# e.g. docker-compose.yml:tests/deploy/stack/compose.override.yml), HUBFLOW_POSTGRES_IMAGE,
# HUBFLOW_REDIS_IMAGE, HUBFLOW_IMAGE (default hubflow:local), HUBFLOW_AIRFLOW_PORT (8080),
# HUBFLOW_STACK_TIMEOUT (seconds to wait for health, 900), HUBFLOW_BUILD_CA_BUNDLE,
# HUBFLOW_STACK_FRESH=1 (remove the project's containers and volumes of an earlier run first).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="$root/.hubflow/stack"
export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-hubflow}"
export COMPOSE_FILE="${COMPOSE_FILE:-docker-compose.yml}"
export HUBFLOW_IMAGE="${HUBFLOW_IMAGE:-hubflow:local}"
base_image="debian:bookworm-slim"
wheelhouse_port=47613

say() { echo "hubflow stack: $*" >&2; }
die() {
  say "$*"
  exit 1
}
elapsed() { echo "$((SECONDS - ${1:-0})) s"; }

# --- Docker -------------------------------------------------------------------------------------

docker_answers() { timeout 20 docker info >/dev/null 2>&1; }

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

# Why Docker cannot run here, or nothing when it can.
why_not() {
  if command -v docker >/dev/null 2>&1 && docker_answers; then
    return 0
  fi
  if command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    return 0
  fi
  if can_install; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "no Docker daemon answers, and starting one needs root (this is uid $(id -u)); start Docker, or run as root"
  else
    echo "no Docker daemon answers, dockerd is not installed and there is no apt-get to install docker.io"
  fi
}

apt_install() {
  say "installing $* (Debian packages)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } \
    >"$state/apt.log" 2>&1 || die "apt-get install $* failed; see $state/apt.log"
}

# The MTU of the interface of the default route (containers must not send larger packets).
host_mtu() {
  local dev
  dev="$(ip route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')"
  if [ -n "$dev" ] && [ -r "/sys/class/net/$dev/mtu" ]; then
    cat "/sys/class/net/$dev/mtu"
  else
    echo 1500
  fi
}

ensure_docker() {
  mkdir -p "$state"
  if command -v docker >/dev/null 2>&1 && docker_answers; then
    return 0
  fi
  local reason
  reason="$(why_not)"
  [ -z "$reason" ] || die "$reason"
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    apt_install docker.io debootstrap
  fi
  local mtu
  mtu="$(host_mtu)"
  # What exists before dockerd starts, so that `down` removes exactly what it added. A pid file
  # whose dockerd is gone means one this script started died without `down` (its machine or
  # session stopped): its rules and bridges are still here, so the baseline recorded before it
  # started stays, and `down` removes those too.
  local pid_file="$state/dockerd.pid"
  if [ -f "$pid_file" ] && ! kill -0 "$(cat "$pid_file")" 2>/dev/null && [ -f "$state/iptables.before" ]; then
    say "a dockerd this script started earlier died without 'down'; keeping the state from before it"
  else
    iptables-save >"$state/iptables.before" 2>/dev/null || true
    ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' >"$state/bridges.before" || true
  fi
  say "starting dockerd (MTU $mtu; log $state/dockerd.log)"
  setsid dockerd --mtu "$mtu" >"$state/dockerd.log" 2>&1 </dev/null &
  echo $! >"$state/dockerd.pid"
  local deadline=$((SECONDS + 60))
  until docker_answers; do
    if ! kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null; then
      tail -n 20 "$state/dockerd.log" >&2
      die "dockerd exited while starting; see $state/dockerd.log"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "dockerd did not answer within 60 s; see $state/dockerd.log"
    sleep 1
  done
}

# Stops the dockerd this script started (when nothing else runs on it) and removes the iptables
# rules, chains and bridges it added.
stop_our_dockerd() {
  local pid_file="$state/dockerd.pid"
  [ -f "$pid_file" ] || return 0
  local pid
  pid="$(cat "$pid_file")"
  if kill -0 "$pid" 2>/dev/null; then
    local others
    others="$(docker ps -q 2>/dev/null | wc -l)"
    if [ "$others" -gt 0 ]; then
      say "leaving dockerd (pid $pid) running: $others other container(s) still run on it"
      return 0
    fi
    say "stopping the dockerd this script started (pid $pid)"
    kill -TERM "$pid"
    local deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null; do
      [ "$SECONDS" -lt "$deadline" ] || {
        say "dockerd did not stop within 60 s; killing it"
        kill -KILL "$pid"
      }
      sleep 0.5
    done
  fi
  rm -f "$pid_file"
  remove_docker_leftovers
}

remove_docker_leftovers() {
  if [ -f "$state/iptables.before" ] && command -v iptables-save >/dev/null 2>&1; then
    local table
    for table in filter nat; do
      local before now
      before="$(awk -v t="*$table" '$0 == t {on = 1; next} /^\*/ {on = 0} on' "$state/iptables.before")"
      now="$(iptables-save -t "$table" | sed -n '/^[:-]/p')"
      # Rules dockerd appended: delete them (most recent first).
      while IFS= read -r rule; do
        [ -n "$rule" ] || continue
        grep -qxF -- "$rule" <<<"$before" && continue
        eval "iptables -t $table -D ${rule#-A }" 2>/dev/null || true
      done < <(grep '^-A ' <<<"$now" | tac)
      # Chains dockerd created: flush and delete them.
      while IFS= read -r chain; do
        grep -q "^:$chain " <<<"$before" && continue
        iptables -t "$table" -F "$chain" 2>/dev/null || true
        iptables -t "$table" -X "$chain" 2>/dev/null || true
      done < <(sed -n 's/^:\([^ ]*\) - .*/\1/p' <<<"$now")
      # Policies it changed (FORWARD DROP): back to what they were (ACCEPT, the kernel's default,
      # for a table that did not exist before).
      while IFS= read -r chain; do
        local policy
        policy="$(sed -n "s/^:$chain \([A-Z]*\) .*/\1/p" <<<"$before")"
        iptables -t "$table" -P "$chain" "${policy:-ACCEPT}" 2>/dev/null || true
      done < <(sed -n 's/^:\([A-Z]*\) \(ACCEPT\|DROP\) .*/\1/p' <<<"$now")
    done
    rm -f "$state/iptables.before"
  fi
  if [ -f "$state/bridges.before" ]; then
    local bridge
    while IFS= read -r bridge; do
      [ -n "$bridge" ] || continue
      grep -qxF -- "$bridge" "$state/bridges.before" && continue
      case "$bridge" in docker0 | br-*) ip link delete "$bridge" 2>/dev/null || true ;; esac
    done < <(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}')
    rm -f "$state/bridges.before"
  fi
}

# --- images -------------------------------------------------------------------------------------

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

try_pull() {
  local image="$1"
  say "pulling $image"
  timeout 600 docker pull -q "$image" >"$state/pull.log" 2>&1 && return 0
  say "cannot pull $image: $(tail -n 1 "$state/pull.log")"
  return 1
}

# The Debian mirror apt already uses (deb822 sources or sources.list).
debian_mirror() {
  local mirror
  mirror="$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\/\{0,1\}\)[[:space:]]*$/\1/p' \
    /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)"
  if [ -z "$mirror" ]; then
    mirror="$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
  fi
  echo "${mirror:-http://deb.debian.org/debian}"
}

# images.lock's record of an image (scripts/images.py): its recorded inputs, its recorded digest, or
# whether the image of that name here is the recorded one.
images_py() { python3 "$root/scripts/images.py" "$@"; }

# Pulls reference@digest when images.lock records a digest for it and tags it as the reference;
# else pulls the reference by its tag, saying it is not pinned. Prints what to use.
pull_pinned() {
  local reference="$1" digest
  digest="$(images_py digest "$reference")"
  if [ -n "$digest" ]; then
    try_pull "$reference@$digest" || return 1
    docker tag "$reference@$digest" "$reference"
    echo "$reference@$digest"
    return 0
  fi
  try_pull "$reference" || return 1
  say "WARNING: $reference was pulled by its tag: images.lock records no digest for it" \
    "(make lock-images DIGESTS=1 records it where a registry answers)"
  echo "$reference"
}

# debian:bookworm-slim: the one here when it is images.lock's (its digest, or the label of the inputs
# it was made from), else pulled, else made from Debian's packages (deploy/debian/rootfs.sh) and
# labelled with those inputs. Any other image of that name is replaced.
make_base_image() {
  local inputs
  inputs="$(images_py inputs "$base_image")" || die "images.lock does not match deploy/debian (see above)"
  if have_image "$base_image"; then
    images_py check "$base_image" 2>/dev/null && return 0
    say "$base_image here is not the one images.lock records; replacing it"
  fi
  pull_pinned "$base_image" >/dev/null && return 0
  command -v debootstrap >/dev/null 2>&1 || {
    can_install || die "cannot pull $base_image, and debootstrap is missing (needs root and apt-get)"
    apt_install debootstrap
  }
  local mirror rootfs started=$SECONDS
  mirror="$(debian_mirror)"
  rootfs="$(mktemp -d /tmp/hubflow-rootfs.XXXXXX)"
  say "making $base_image from Debian's packages: debootstrap --variant=minbase bookworm from $mirror"
  if ! bash "$root/deploy/debian/rootfs.sh" "$rootfs" "$mirror" >"$state/debootstrap.log" 2>&1; then
    rm -rf "$rootfs"
    die "debootstrap failed; see $state/debootstrap.log"
  fi
  tar -C "$rootfs" -c . | docker import \
    --change 'CMD ["bash"]' \
    --change 'LABEL org.hubflow.origin="debootstrap --variant=minbase bookworm (deploy/debian/rootfs.sh)"' \
    --change "LABEL org.hubflow.inputs=$inputs" \
    - "$base_image" >/dev/null
  rm -rf "$rootfs"
  say "made $base_image in $(elapsed "$started")"
}

# Writes VARIABLE=image to $state/image-<name>.env: $VARIABLE when set, else the official image
# when it is here or can be pulled, else the equivalent built from Debian's packages.
# $1 variable name, $2 official default, $3 tag of the Debian-built equivalent, $4 its build folder.
choose_service_image() {
  local variable="$1" official="$2" local_tag="$3" folder="$4"
  local name choice_file log
  name="$(basename "$folder")"
  choice_file="$state/image-$name.env"
  log="$state/build-$name.log"
  local wanted="${!variable:-}"
  if [ -n "$wanted" ]; then
    have_image "$wanted" || try_pull "$wanted" || die "$variable=$wanted cannot be pulled"
    echo "$variable=$wanted" >"$choice_file"
    return 0
  fi
  local digest pulled
  digest="$(images_py digest "$official")"
  if [ -n "$digest" ] && have_image "$official@$digest"; then
    echo "$variable=$official@$digest" >"$choice_file"
    return 0
  fi
  if pulled="$(pull_pinned "$official")"; then
    echo "$variable=$pulled" >"$choice_file"
    return 0
  fi
  local started=$SECONDS inputs
  inputs="$(images_py inputs "$local_tag")" || die "images.lock does not match $folder (see above)"
  say "building $local_tag from Debian's packages instead of $official ($folder, log $log)"
  docker build --label "org.hubflow.inputs=$inputs" -t "$local_tag" "$root/$folder" >"$log" 2>&1 ||
    die "building $local_tag failed; see $log"
  images_py check "$local_tag" || die "$local_tag is not the image images.lock records"
  say "built $local_tag in $(elapsed "$started")"
  echo "$variable=$local_tag" >"$choice_file"
}

# Python with the `packaging` module for scripts/wheelhouse.py: the project's virtualenv if any.
wheelhouse_python() {
  local python
  for python in "$root/.venv/bin/python" python3; do
    if "$python" -c 'import packaging.tags' >/dev/null 2>&1; then
      echo "$python"
      return 0
    fi
  done
  return 1
}

build_project_image() {
  local started=$SECONDS
  local ca="${HUBFLOW_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  if [ -s "$ca" ]; then
    cmp -s "$ca" "$root/.build/ca-certificates.crt" || cp "$ca" "$root/.build/ca-certificates.crt"
  fi
  local args=(--network host -t "$HUBFLOW_IMAGE")
  local server_pid="" python
  if python="$(wheelhouse_python)"; then
    "$python" "$root/scripts/wheelhouse.py" --lock "$root/requirements.lock" \
      --lock "$root/requirements-uv.lock" --lock "$root/requirements-build.lock" --out "$state/wheelhouse" 2>>"$state/build.log" || true
    if [ -n "$(ls -A "$state/wheelhouse" 2>/dev/null)" ]; then
      local port=$wheelhouse_port
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && port=$((port + RANDOM % 1000 + 1))
      "$python" -m http.server --bind 127.0.0.1 --directory "$state/wheelhouse" "$port" \
        >"$state/wheelhouse-server.log" 2>&1 &
      server_pid=$!
      echo "$server_pid" >"$state/wheelhouse-server.pid"
      args+=(--build-arg "HUBFLOW_WHEELHOUSE=http://127.0.0.1:$port/")
    fi
  fi
  say "building $HUBFLOW_IMAGE (log $state/build.log)"
  local status=0
  docker build "${args[@]}" "$root" >>"$state/build.log" 2>&1 || status=$?
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    rm -f "$state/wheelhouse-server.pid"
  fi
  if [ "$status" != 0 ]; then
    tail -n 30 "$state/build.log" >&2
    die "building $HUBFLOW_IMAGE failed; see $state/build.log"
  fi
  say "built $HUBFLOW_IMAGE in $(elapsed "$started")"
}

# HUBFLOW_STACK_FRESH=1 (the stack proof): containers and volumes left of this project by an earlier
# run go first. Their `restart: always` brings them back whenever dockerd starts (after a reboot, for
# instance), and they would take CPU from the build and data from the next run.
remove_leftovers() {
  [ "${HUBFLOW_STACK_FRESH:-0}" = 1 ] || return 0
  local label="label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"
  [ -n "$(docker ps -aq --filter "$label")$(docker volume ls -q --filter "$label")" ] || return 0
  say "removing what an earlier run of project $COMPOSE_PROJECT_NAME left (containers, volumes)"
  (cd "$root" && COMPOSE_PROFILES=microsoft ACCEPT_EULA="${ACCEPT_EULA:-N}" \
    compose down --remove-orphans --volumes --timeout 5) >/dev/null 2>&1 || true
  docker ps -aq --filter "$label" | xargs -r docker rm -f >/dev/null
  docker volume ls -q --filter "$label" | xargs -r docker volume rm >/dev/null
}

make_images() {
  local started=$SECONDS
  ensure_docker
  remove_leftovers
  : >"$state/build.log"
  make_base_image
  # PostgreSQL and Redis alongside the project image: their downloads overlap its build.
  rm -f "$state"/image-*.env
  choose_service_image HUBFLOW_POSTGRES_IMAGE postgres:15.19-bookworm hubflow-postgres:15-bookworm deploy/postgres &
  local postgres=$!
  choose_service_image HUBFLOW_REDIS_IMAGE redis:7.0.15-bookworm hubflow-redis:7.0-bookworm deploy/redis &
  local redis=$!
  local status=0
  (build_project_image) || status=$?
  wait "$postgres" || status=$?
  wait "$redis" || status=$?
  [ "$status" = 0 ] || die "making the images failed (see the messages above)"
  cat "$state/image-postgres.env" "$state/image-redis.env" >"$state/images.env"
  say "images ready in $(elapsed "$started")"
}

# --- compose ------------------------------------------------------------------------------------

# The stack's secrets: Airflow's JWT secret (signs the API's tokens) and Fernet key (encrypts
# connections and variables in the metadata DB), the metadata database's password, and Spark's RPC
# secret (spark.authenticate: only the stack's drivers, master and workers can join its cluster).
# docker-compose.yml has no default for any of them. Values set in the environment win; otherwise
# each is generated once into $state/secrets.env (mode 600, under .hubflow/, which git ignores) and
# read from there on every later call, so the containers of one stack always share them; one missing
# from an older file is added to it. Keep that file as long as the stack's volumes (the database's
# password is set when its volume is first made). The secrets reach docker-compose through its
# environment, never its command line. Known published values are refused.
SECRET_NAMES=(HUBFLOW_JWT_SECRET HUBFLOW_FERNET_KEY HUBFLOW_POSTGRES_PASSWORD HUBFLOW_SPARK_AUTH_SECRET)

new_secret() {
  case "$1" in
    HUBFLOW_FERNET_KEY) python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())' ;;
    *) python3 -c 'import secrets; print(secrets.token_urlsafe(48))' ;; # URL-safe: the DB URL holds it
  esac
}

load_secrets() {
  local file="$state/secrets.env" name missing=()
  mkdir -p "$state"
  for name in "${SECRET_NAMES[@]}"; do
    grep -q "^$name=" "$file" 2>/dev/null || missing+=("$name")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    (
      umask 077
      flock 9 # concurrent first calls: the second finds what the first wrote
      added=()
      for name in "${missing[@]}"; do
        grep -q "^$name=" "$file" 2>/dev/null && continue
        echo "$name=$(new_secret "$name")" >>"$file"
        added+=("$name")
      done
      [ "${#added[@]}" -eq 0 ] || say "generated ${added[*]} into $file (keep it with the stack's volumes)"
    ) 9>"$state/secrets.lock"
  fi
  for name in "${SECRET_NAMES[@]}"; do
    if [ -z "${!name:-}" ]; then
      printf -v "$name" '%s' "$(sed -n "s/^$name=//p" "$file")"
    fi
    export "${name?}"
  done
  case "$HUBFLOW_JWT_SECRET" in
    "" | hubflow-local-only-jwt-secret-change-me | change-me | secret)
      die "HUBFLOW_JWT_SECRET is empty or a published value: unset it (stack.sh generates one into $file) or set a long random one" ;;
  esac
  local value
  for name in HUBFLOW_JWT_SECRET HUBFLOW_SPARK_AUTH_SECRET; do
    value="${!name}"
    [ "${#value}" -ge 32 ] ||
      die "$name is ${#value} characters long; use at least 32 random ones (or unset it: stack.sh generates one into $file)"
  done
  case "$HUBFLOW_POSTGRES_PASSWORD" in
    "" | airflow | postgres | password)
      die "HUBFLOW_POSTGRES_PASSWORD is empty or a published value: unset it (stack.sh generates one into $file) or set a random one" ;;
  esac
  python3 -c 'import os, re, sys
sys.exit(not re.fullmatch(r"[A-Za-z0-9._~-]+", os.environ["HUBFLOW_POSTGRES_PASSWORD"]))' ||
    die "HUBFLOW_POSTGRES_PASSWORD may hold only letters, digits and . _ ~ - (it goes into the database URL): unset it (stack.sh generates one into $file) or choose another"
  python3 -c 'import base64, os, sys
sys.exit(len(base64.urlsafe_b64decode(os.environ["HUBFLOW_FERNET_KEY"].encode())) != 32)' 2>/dev/null ||
    die "HUBFLOW_FERNET_KEY is not a Fernet key (32 bytes, URL-safe base64): unset it (stack.sh generates one into $file) or set one"
}

compose() {
  load_secrets
  if docker compose version >/dev/null 2>&1; then
    docker compose "$@"
  elif command -v docker-compose >/dev/null 2>&1; then
    docker-compose "$@"
  else
    die "neither 'docker compose' nor docker-compose is installed (Debian: apt-get install docker-compose)"
  fi
}

load_images_env() {
  local line
  if [ -f "$state/images.env" ]; then
    while IFS= read -r line; do
      [ -n "$line" ] && export "${line?}"
    done <"$state/images.env"
  fi
}

# Every container of the project: "name state health exit-code" per line.
project_containers() {
  docker ps -a --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" -q |
    xargs -r docker inspect --format \
      '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}} {{index .Config.Labels "com.docker.compose.service"}}'
}

wait_until_healthy() {
  local timeout="${HUBFLOW_STACK_TIMEOUT:-900}" started=$SECONDS
  say "waiting until every service is healthy (at most $timeout s)"
  while :; do
    local waiting=() failed=() line name status health code service
    while read -r name status health code service; do
      [ -n "$name" ] || continue
      if [ "$status" = exited ] && [ "$code" != 0 ]; then
        failed+=("$service")
      elif [ "$health" = unhealthy ]; then
        failed+=("$service")
      elif [ "$status" = running ] && [ "$health" != healthy ] && [ "$health" != none ]; then
        waiting+=("$service")
      elif [ "$status" = created ] || [ "$status" = restarting ]; then
        waiting+=("$service")
      fi
    done < <(project_containers)
    if [ "${#failed[@]}" -gt 0 ]; then
      for service in "${failed[@]}"; do
        say "service $service failed; its last log lines:"
        compose logs --no-color --tail 30 "$service" >&2 || true
      done
      die "the stack did not come up: ${failed[*]} failed"
    fi
    if [ "${#waiting[@]}" -eq 0 ]; then
      say "every service is healthy after $(elapsed "$started")"
      return 0
    fi
    if [ $((SECONDS - started)) -ge "$timeout" ]; then
      die "still not healthy after $timeout s: ${waiting[*]} (docker-compose logs <service>)"
    fi
    sleep 3
  done
}

print_login() {
  local port="${HUBFLOW_AIRFLOW_PORT:-8080}" password
  password="$(compose exec -T airflow-apiserver python -c \
    'import json, os; print(json.load(open(os.path.join(os.environ["AIRFLOW_HOME"], "simple_auth_manager_passwords.json.generated")))["admin"])' \
    2>/dev/null || echo "(see simple_auth_manager_passwords.json.generated in the airflow-apiserver container)")"
  cat <<EOF
hubflow stack is up (project $COMPOSE_PROJECT_NAME):
  Airflow UI      http://localhost:$port   user admin, password $password
  status page     http://localhost:$port/hubflow/
  Spark master    http://localhost:${HUBFLOW_SPARK_MASTER_UI_PORT:-8081}
  Event Hubs      localhost:${HUBFLOW_EVENTHUBS_PORT:-5672} (AMQP, hubflow's emulator)
  stop it with    make stack-down   (VOLUMES=1 deletes the data too)
EOF
}

# The images an earlier `images` made (its choices in images.env), without building anything.
use_made_images() {
  ensure_docker
  remove_leftovers
  [ -f "$state/images.env" ] || die "no images made yet: run scripts/stack.sh images (or up without --no-build)"
  load_images_env
  local image
  for image in "$HUBFLOW_IMAGE" "$HUBFLOW_POSTGRES_IMAGE" "$HUBFLOW_REDIS_IMAGE"; do
    have_image "$image" || die "image $image is missing: run scripts/stack.sh images (or up without --no-build)"
  done
}

cmd_up() {
  local started=$SECONDS
  if [ "${1:-}" = "--no-build" ]; then
    use_made_images
  else
    make_images
    load_images_env
  fi
  say "starting the stack (compose files $COMPOSE_FILE)"
  (cd "$root" && compose up -d --no-build) || die "docker-compose up failed"
  wait_until_healthy
  say "stack up in $(elapsed "$started")"
  (cd "$root" && print_login)
}

cmd_down() {
  local volumes=()
  [ "${1:-}" = "--volumes" ] && volumes=(--volumes)
  mkdir -p "$state"
  if [ -f "$state/wheelhouse-server.pid" ]; then
    kill "$(cat "$state/wheelhouse-server.pid")" 2>/dev/null || true
    rm -f "$state/wheelhouse-server.pid"
  fi
  if command -v docker >/dev/null 2>&1 && docker_answers; then
    load_images_env
    say "stopping project $COMPOSE_PROJECT_NAME${volumes:+ and deleting its volumes}"
    (cd "$root" && COMPOSE_PROFILES=microsoft ACCEPT_EULA="${ACCEPT_EULA:-N}" \
      compose down --remove-orphans --timeout 20 "${volumes[@]}") || die "docker-compose down failed"
    local label="label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" left=()
    mapfile -t left < <(
      docker ps -aq --filter "$label" | sed 's/^/container /'
      docker network ls -q --filter "$label" | sed 's/^/network /'
      [ "${#volumes[@]}" -eq 0 ] || docker volume ls -q --filter "$label" | sed 's/^/volume /'
    )
    [ "${#left[@]}" -eq 0 ] || die "left behind by docker-compose down: ${left[*]}"
    say "nothing of project $COMPOSE_PROJECT_NAME is left${volumes:+ (volumes deleted)}"
    stop_our_dockerd
  else
    rm -f "$state/dockerd.pid"
    remove_docker_leftovers
  fi
}

main() {
  local command="${1:-}"
  shift || true
  case "$command" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    images) make_images ;;
    secrets)
      load_secrets
      say "the stack's secrets are in $state/secrets.env (values from the environment win)"
      ;;
    check)
      local reason
      reason="$(why_not)"
      if [ -n "$reason" ]; then
        echo "$reason"
        exit 1
      fi
      ;;
    *)
      sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
}

main "$@"
