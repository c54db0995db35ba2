#!/usr/bin/env bash
# with_progress.sh LABEL ESTIMATE_S COMMAND...: runs COMMAND and, while it runs, says every 30 s how long
# it has taken against the estimate, so a first install that compiles for minutes visibly works.
set -euo pipefail
label=$1; estimate=$2; shift 2
start=$(date +%s)
echo "$label (first time: about $((estimate / 60)) min here on 2 cores; seconds once cached)"
"$@" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	sleep 5
	elapsed=$(( $(date +%s) - start ))
	if kill -0 "$pid" 2>/dev/null && [ $((elapsed % 30)) -lt 5 ] && [ "$elapsed" -ge 30 ]; then
		echo "  ... $label: ${elapsed} s so far (estimate ${estimate} s)"
	fi
done
wait "$pid"
echo "$label: done in $(( $(date +%s) - start )) s"
