#!/usr/bin/env bash
# with_progress.sh LABEL ESTIMATE_S COMMAND...: runs COMMAND and, while it runs, says every 30 s how long
# it has taken against the estimate, so a first install that compiles for minutes visibly works; then
# the step's time. It returns as soon as COMMAND does (a quick step costs no polling delay).
set -euo pipefail
label=$1; estimate=$2; shift 2
start=$(date +%s)
if [ "$estimate" -ge 120 ]; then about="$((estimate / 60)) min"; else about="${estimate} s"; fi
echo "$label (first time: about $about here on 2 cores; seconds once cached)"
"$@" &
pid=$!
# the ticker's sleep holds no output open, so a pipe reading make's output ends when the step does
( while sleep 30 </dev/null >/dev/null 2>&1; do
	echo "  ... $label: $(( $(date +%s) - start )) s so far (estimate ${estimate} s)"
done ) &
ticker=$!
status=0
wait "$pid" || status=$?
kill "$ticker" 2>/dev/null || true
if [ "$status" -ne 0 ]; then
	echo "$label: failed after $(( $(date +%s) - start )) s (exit status $status)"
	exit "$status"
fi
echo "$label: done in $(( $(date +%s) - start )) s"
