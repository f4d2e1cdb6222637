#!/usr/bin/env bash
# Decisions per second, CPU per decision and resident memory of `tollgate
# serve` binaries under the same load, for the figures of
# docs/kubernetes.md ("Resources"): the static build against the glibc
# one, or any two builds.
#
#   deploy/container/measure.sh ROUNDS BINARY...
#   deploy/container/measure.sh 3 target/x86_64-unknown-linux-musl/release/tollgate target/release/tollgate
#
# Each round runs every binary in turn (alternating, so that a change in
# the machine's load falls on all of them): `serve` on a free loopback
# port with the image's default policies, then wrk (Debian's wrk) posting
# /v1/decide for 100,000 random keys over 32 connections for 10 s. Printed
# per run: resident memory at start and after the load, decisions per
# second, and CPU milliseconds per 1,000 decisions (the server's user and
# system time). The client runs on the same machine: quote ratios of one
# run, with the machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:?usage: measure.sh ROUNDS BINARY...}
shift
[ "$#" -gt 0 ] || { echo "usage: measure.sh ROUNDS BINARY..." >&2; exit 2; }
command -v wrk >/dev/null || { echo "error: wrk is not installed (Debian: apt-get install wrk)" >&2; exit 1; }

script=$(mktemp --suffix=.lua)
trap 'rm -f "$script"' EXIT
cat >"$script" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  return wrk.format(nil, "/v1/decide", nil, string.format('{"key": "user-%d", "cost": 1}', math.random(1, 100000)))
end
LUA

measure() {
    local binary=$1 port pid c0 c1 out requests tick
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$binary" serve --config "$here/policies.yaml" --listen "127.0.0.1:$port" 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do
        curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        sleep 0.05
    done
    rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
    cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
    local idle
    idle=$(rss)
    c0=$(cpu)
    out=$(wrk -t 1 -c 32 -d 10s -s "$script" "http://127.0.0.1:$port/")
    c1=$(cpu)
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    tick=$(getconf CLK_TCK)
    printf '%s: start %s KiB, loaded %s KiB, %s decisions/s, %s ms CPU per 1,000\n' "$binary" "$idle" "$(rss)" \
        "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
        "$(awk -v c="$((c1 - c0))" -v t="$tick" -v r="$requests" 'BEGIN { printf "%.1f", c / t * 1e6 / r }')"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

for round in $(seq "$rounds"); do
    echo "round $round"
    for binary in "$@"; do
        measure "$binary"
    done
done
