#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The showdown in one command: build hotpath-showdown (release preset) unless its
# path is given, run every benchmark (5 interleaved repetitions), write
#   docs/results/showdown.json          Google Benchmark's JSON
#   docs/results/showdown-machine.json  cores, CPU model, load average, kernel, date, peers
# and draw docs/img/showdown-*.svg (benchmarks/peers/plot.py, python3-matplotlib).
# Refuses on a busy machine (load average above 1.5) unless HOTPATH_SHOWDOWN_BUSY=1.
# Usage: benchmarks/peers/run.sh [path/to/hotpath-showdown] [extra benchmark flags]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -gt 0 ] && [ -x "$1" ]; then
  bin=$1
  shift
else
  (cd "$src" && cmake --preset release >/dev/null && cmake --build --preset release --target hotpath-showdown)
  bin=$src/build/release/benchmarks/peers/hotpath-showdown
fi
out=$src/docs/results
mkdir -p "$out"

load() { cut -d' ' -f1-3 /proc/loadavg; }
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none; }
load_before=$(load)
# The results and plots it writes are the front page's: a busy machine's figures would
# mislead. Above a load average of 1.5 (one minute) it refuses, unless
# HOTPATH_SHOWDOWN_BUSY=1 (the plots' footer shows the load either way).
if awk -v l="${load_before%% *}" 'BEGIN { exit !(l > 1.5) }' && [ "${HOTPATH_SHOWDOWN_BUSY:-0}" != 1 ]; then
  echo "showdown: load average ${load_before%% *} is above 1.5: the machine is busy and the" \
    "front page's figures would mislead. Wait for a quiet machine, or set" \
    "HOTPATH_SHOWDOWN_BUSY=1 to write them anyway." >&2
  exit 1
fi
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# Aggregates only (mean, median, stddev, cv of the 5): the file stays small. Run from
# the binary's directory so that the JSON names no path of this machine.
cd "$(dirname "$bin")"
"./$(basename "$bin")" --benchmark_min_time=0.2 --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/showdown.json" --benchmark_out_format=json "$@"

model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
virt=$( (systemd-detect-virt --vm; systemd-detect-virt --container) 2>/dev/null | grep -v '^none$' |
  paste -sd+ -) || true
cat >"$out/showdown-machine.json" <<JSON
{
  "date": "$start",
  "finished": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "cpus": $(nproc),
  "cpu_model": "$model",
  "virtualisation": "${virt:-none}",
  "kernel": "$(uname -sr)",
  "load_average_before": "$load_before",
  "load_average_after": "$(load)",
  "compiler": "$(c++ --version | head -1)",
  "peers": {
    "libtbb-dev": "$(pkgver libtbb-dev)",
    "libabsl-dev": "$(pkgver libabsl-dev)",
    "libck-dev": "$(pkgver libck-dev)",
    "liburcu-dev": "$(pkgver liburcu-dev)",
    "libcuckoo-dev": "$(pkgver libcuckoo-dev)",
    "libbenchmark-dev": "$(pkgver libbenchmark-dev)"
  }
}
JSON
echo "showdown: wrote $out/showdown.json and showdown-machine.json"

# Debian's python3 has python3-matplotlib; a python3 earlier in PATH may not.
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then
    exec "$py" "$src/benchmarks/peers/plot.py" "$out" "$src/docs/img"
  fi
done
echo "showdown: python3-matplotlib not installed, no plots (apt-get install python3-matplotlib)"
