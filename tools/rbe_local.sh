#!/usr/bin/env bash
# A real Remote Execution API server on loopback, for --config=rbe:
#
#   tools/rbe_local.sh start [WORKERS]   PostgreSQL + BuildGrid + WORKERS bots (default: one per core)
#   tools/rbe_local.sh workers N         replaces the bots by N new ones (empty caches)
#   tools/rbe_local.sh stop              stops everything by pid, deletes its state
#   tools/rbe_local.sh prepare           only creates BuildGrid's Python environment
#   tools/rbe_local.sh status            what runs, with pids; exit 3 unless BuildGrid runs
#   tools/rbe_local.sh state             prints the state folder
#   tools/rbe_local.sh image             prints the executor image's folders, one a line
#
# BuildGrid (PyPI, tools/rbe/requirements.lock) runs on Python 3.13 from a venv
# tools/python_env.py makes; its scheduler keeps state in a private PostgreSQL
# cluster (Debian's) that listens only on a Unix socket in the state folder;
# tools/rbe/worker.py bots execute the actions. Everything lives in one temp
# folder ($RBE_STATE, default ${TMPDIR:-/tmp}/framework-internals-rbe): the CAS,
# the database, the bots' blob caches, logs and pid files.
# Environment: RBE_PORT (default 50051), PYTHON313 (a Python 3.13 interpreter).
set -euo pipefail
LIB_NAME=rbe_local
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROOT="$LIB_ROOT"
STATE="${RBE_STATE:-${TMPDIR:-/tmp}/framework-internals-rbe}"
PORT="${RBE_PORT:-50051}"

find_python313() {
  local candidate
  for candidate in "${PYTHON313:-}" "$(command -v python3.13 || true)" \
      "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.13*/bin/python3.13; do
    # (a pyenv shim is on PATH even where it cannot run 3.13: try each one)
    [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c \
      'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && { echo "$candidate"; return; }
  done
  die "BuildGrid needs Python 3.13 and none was found: install it (pyenv install 3.13) or set PYTHON313"
}

find_postgres() {
  local bin
  bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [ -x "$bin/initdb" ] || die "PostgreSQL is not installed: apt-get install postgresql"
  echo "$bin"
}

# Runs a PostgreSQL program as a user it accepts (it refuses root).
# (From /: the postgres user may not enter the current folder.)
as_pg() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }

wait_for_port() {  # PORT SECONDS LOG
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  tail -20 "$3" >&2
  die "nothing listens on 127.0.0.1:$1 after $2 s (log above: $3)"
}

buildgrid_env() {  # creates (once) and prints BuildGrid's environment
  "$(find_python313)" "$ROOT/tools/python_env.py" ensure --lock "$ROOT/tools/rbe/requirements.lock" \
    --python-version 3.13 --check buildgrid,psycopg
}

workspace_env() {  # prints the workspace's Python environment, which must exist
  local env
  env="$(python3.11 "$ROOT/tools/python_env.py" path 2>/dev/null || true)"
  [ -f "$env/.complete" ] || die "the workspace's Python environment is missing: run ./bazelw --version first"
  echo "$env"
}

start() {
  local workers="${1:-$(nproc)}" env pg pguser keys
  if pid_alive "$STATE/buildgrid.pid"; then die "already running (state in $STATE); stop it first"; fi
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && die "port $PORT is taken: set RBE_PORT"
  pg="$(find_postgres)"
  env="$(buildgrid_env)"
  workspace_env >/dev/null

  # Leftovers of a start that failed half-way (a PostgreSQL still running) go first.
  [ -d "$STATE" ] && stop >/dev/null 2>&1
  mkdir -p "$STATE/postgres" "$STATE/cas" && chmod 755 "$STATE"
  pguser="$(id -un)"
  if [ "$(id -u)" = 0 ]; then chown postgres "$STATE/postgres"; pguser=postgres; fi
  say "PostgreSQL cluster in $STATE/postgres"
  as_pg "$pg/initdb" -D "$STATE/postgres/data" -A trust -U "$pguser" >"$STATE/initdb.log" 2>&1 \
    || { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
  # Scratch state, rebuilt at every start: durability buys nothing here.
  as_pg "$pg/pg_ctl" -D "$STATE/postgres/data" -l "$STATE/postgres/server.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$STATE/postgres' -c fsync=off -c synchronous_commit=off -c max_connections=300" \
    start >/dev/null || { cat "$STATE/postgres/server.log" >&2; die "PostgreSQL did not start"; }
  as_pg "$pg/createdb" -h "$STATE/postgres" -U "$pguser" bgd
  "$env/bin/bgd" migrate apply "postgresql+psycopg://$pguser@/bgd?host=$STATE/postgres" \
    >"$STATE/migrate.log" 2>&1 || { cat "$STATE/migrate.log" >&2; die "database migration failed"; }

  keys="$("$env/bin/python" "$ROOT/tools/rbe/properties.py" keys)"
  sed -e "s|@STATE@|$STATE|g" -e "s|@PORT@|$PORT|g" -e "s|@PGUSER@|$pguser|g" \
    -e "s|@PROPERTY_KEYS@|$keys|g" "$ROOT/tools/rbe/buildgrid.yml.in" >"$STATE/buildgrid.yml"
  say "BuildGrid on 127.0.0.1:$PORT"
  nohup "$env/bin/bgd" server start "$STATE/buildgrid.yml" >"$STATE/buildgrid.log" 2>&1 &
  echo $! >"$STATE/buildgrid.pid"
  wait_for_port "$PORT" 60 "$STATE/buildgrid.log"

  workers "$workers"
  say "ready: $workers worker(s); logs in $STATE; stop with: tools/rbe_local.sh stop"
}

# The executor image: the workspace's Python environment and the interpreter it
# was made from, which stay visible to actions when $HOME is hidden.
image() {
  local env
  env="$(workspace_env)"
  echo "$env"
  dirname "$(sed -n 's/^home = //p' "$env/pyvenv.cfg")"
}

workers() {  # N: stops the bots there are, starts N new ones with empty blob caches
  local n="$1" env main_env i pidfile path image_args=()
  pid_alive "$STATE/buildgrid.pid" || die "the server is not running: tools/rbe_local.sh start"
  for pidfile in "$STATE"/worker-*.pid; do stop_pid "$pidfile"; done
  rm -rf "$STATE"/worker-*
  env="$(buildgrid_env)"
  main_env="$(workspace_env)"
  while read -r path; do image_args+=(--image-path "$path"); done < <(image)
  while read -r path; do image_args+=(--hide "$path"); done < <(host_cuda_dirs)
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$STATE/worker-$i"
    nohup "$env/bin/python" "$ROOT/tools/rbe/worker.py" --server "http://127.0.0.1:$PORT" \
      --name "worker-$i" --work-dir "$STATE/worker-$i" --python-env "$main_env" \
      "${image_args[@]}" --hide "$ROOT" \
      >"$STATE/worker-$i.log" 2>&1 &
    echo $! >"$STATE/worker-$i.pid"
  done
}

stop() {
  local pidfile pg
  [ -d "$STATE" ] || { say "not running"; return 0; }
  for pidfile in "$STATE"/worker-*.pid "$STATE/buildgrid.pid"; do stop_pid "$pidfile"; done
  if [ -f "$STATE/postgres/data/postmaster.pid" ]; then
    pg="$(find_postgres)"
    as_pg "$pg/pg_ctl" -D "$STATE/postgres/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$STATE"
  say "stopped"
}

# Exits 0 only while BuildGrid runs: a state folder a killed run left behind
# (its processes gone) is "not running", so callers start a server (start()
# clears the leftovers) instead of pointing Bazel at a closed port.
status() {
  local pidfile
  [ -d "$STATE" ] || { echo "not running"; return 3; }
  for pidfile in "$STATE/buildgrid.pid" "$STATE"/worker-*.pid; do
    if pid_alive "$pidfile"; then echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"
    else echo "$(basename "$pidfile" .pid): not running"; fi
  done
  echo "state: $STATE"
  pid_alive "$STATE/buildgrid.pid" || return 3
}

case "${1:-}" in
  start) shift; start "$@" ;;
  workers) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "usage: tools/rbe_local.sh workers N"; workers "$2" ;;
  prepare) buildgrid_env >/dev/null ;;
  stop) stop ;;
  status) status ;;
  state) echo "$STATE" ;;
  image) image ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] || exit 2 ;;
esac
