#!/bin/bash
# stop.sh STATE_DIR -- stop the daemons start.sh started, by their pid files.
set -uo pipefail
state=$(realpath -m "$1")
export SLURM_CONF=$state/etc/slurm.conf
scancel --quiet --user=root 2>/dev/null || true
marker="# clusterkit-slurm $state"
if grep -qF "$marker" /etc/hosts; then
    # rewrite in place: /etc/hosts may be a bind mount that cannot be replaced
    python3 - "$marker" <<'PY'
import sys
marker = sys.argv[1]
kept, skip = [], False
with open("/etc/hosts") as f:
    for line in f:
        if line.startswith(marker + " BEGIN"):
            skip = True
        elif line.startswith(marker + " END"):
            skip = False
        elif not skip:
            kept.append(line)
with open("/etc/hosts", "w") as f:
    f.write("".join(kept))
PY
fi
pids=()
for f in "$state"/slurmd-*.pid "$state"/slurmctld.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    rm -f "$f"
    kill "$pid" 2>/dev/null && pids+=("$pid")
done
for _ in $(seq 1 50); do
    alive=()
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null && alive+=("$p")
    done
    [ ${#alive[@]} -eq 0 ] && exit 0
    sleep 0.1
done
kill -9 "${alive[@]}" 2>/dev/null || true
