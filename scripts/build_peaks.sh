#!/usr/bin/env bash
# build_peaks.sh COMMAND...: runs COMMAND and, twice a second while it runs, counts the compiler
# processes (cc1, cc1plus) and reads the memory in use (MemTotal - MemAvailable); then prints the peaks
# and the wall time. What the Makefile's BUILD_JOBS limit is checked with (docs/install.md).
set -uo pipefail
start=$(date +%s)
"$@" &
pid=$!
peak_cc=0; peak_mb=0
while kill -0 "$pid" 2>/dev/null; do
	cc=$(ps -e -o comm= | grep -cE '^(cc1|cc1plus)$')
	mb=$(awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {print int((t - a) / 1024)}' /proc/meminfo)
	[ "$cc" -gt "$peak_cc" ] && peak_cc=$cc
	[ "$mb" -gt "$peak_mb" ] && peak_mb=$mb
	sleep 0.5
done
wait "$pid"; status=$?
echo "build_peaks: $(( $(date +%s) - start )) s, exit $status, compilers at once at most $peak_cc, memory in use at most $peak_mb MB"
exit $status
