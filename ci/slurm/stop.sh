#!/bin/bash
# stop.sh STATE_DIR -- take down the cluster ci/slurm/start.sh started from STATE_DIR: cancel its
# jobs, stop its daemons by their pid files (SIGTERM, then SIGKILL after 5 s) and remove its
# block from /etc/hosts. munged is shared with any other cluster on the machine and keeps running.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 STATE_DIR" >&2
    exit 2
fi
state=$(realpath -m "$1")
export SLURM_CONF=$state/etc/slurm.conf

if [ -s "$state/slurmctld.pid" ] && [ -f "$SLURM_CONF" ]; then
    timeout 10 scancel --quiet --user=root 2>/dev/null || true
fi

pids=()
for f in "$state"/slurmd-*.pid "$state"/slurmctld.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if kill "$pid" 2>/dev/null; then
        pids+=("$pid")
    fi
done
alive=()
for _ in $(seq 1 50); do
    alive=()
    for p in ${pids[@]+"${pids[@]}"}; do
        if kill -0 "$p" 2>/dev/null; then
            alive+=("$p")
        fi
    done
    [ ${#alive[@]} -eq 0 ] && break
    sleep 0.1
done
if [ ${#alive[@]} -gt 0 ]; then
    kill -9 "${alive[@]}" 2>/dev/null || true
fi
rm -f "$state"/slurmd-*.pid "$state"/slurmctld.pid

# /etc/hosts may be a bind mount: rewrite it in place rather than replace it
marker="# clusterkit-slurm $state"
if grep -qF "$marker BEGIN" /etc/hosts; then
    kept=$(mktemp)
    awk -v begin="$marker BEGIN" -v end="$marker END" '
        $0 == begin { skip = 1; next }
        $0 == end { skip = 0; next }
        !skip { print }
    ' /etc/hosts >"$kept"
    cat "$kept" >/etc/hosts
    rm -f "$kept"
fi
