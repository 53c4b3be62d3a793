#!/bin/bash
# start.sh SITE STATE_DIR -- bring up a throw-away Slurm cluster on this machine, configured from
# sites/SITE.yaml by clusterkit/runs/slurmconf.py: slurmctld plus one slurmd per logical node, all on
# this host. Needs root and Debian's Slurm 22.05 and munge: missing packages are installed
# (apt-get). Everything the cluster writes (config, state, logs, pid files, fake GPU devices)
# stays under STATE_DIR; ci/slurm/stop.sh STATE_DIR takes it down again.
#
# Clients find the cluster through SLURM_CONF=STATE_DIR/etc/slurm.conf (printed at the end).
# Environment: PYTHON (python3) runs clusterkit; SLURM_CI_PORT_BASE (auto: the first free block
# of ports from 17000 on); SLURM_CI_HOSTS=auto|yes|no: add the logical node names to /etc/hosts
# (in a marked block that stop.sh removes) -- auto does so only when they do not resolve yet, as
# jobs that address their peers by node name (MASTER_ADDR=$(scontrol show hostnames ...)) need.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 SITE STATE_DIR" >&2
    exit 2
fi
site=$1
state=$(realpath -m "$2")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
port_base=${SLURM_CI_PORT_BASE:-auto}
hosts_mode=${SLURM_CI_HOSTS:-auto}
packages=(slurmctld slurmd slurm-client munge lmod openmpi-bin)

if [ "$(id -u)" -ne 0 ]; then
    echo "start.sh: a Slurm test cluster needs root" >&2
    exit 1
fi

# -- packages (CI starts from a fresh machine)
missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "start.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# -- configuration; one start at a time on this machine, so that two clusters (two test runs at
# once) never pick the same free ports
exec 9>"${TMPDIR:-/tmp}/clusterkit-slurm-start.lock"
flock -w 120 9
if [ -s "$state/slurmctld.pid" ] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
    echo "start.sh: a cluster is already running from $state (stop it with stop.sh)" >&2
    exit 1
fi
mkdir -p "$state/etc" "$state/ctld" "$state/fakedev"
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$python" -m clusterkit.runs.slurmconf "$site" \
    --out "$state/etc" --state "$state" --port-base "$port_base" >/dev/null
export SLURM_CONF=$state/etc/slurm.conf
max_gpus=$(awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { print m }' "$state/etc/nodes")
for ((i = 0; i < max_gpus; i++)); do
    ln -sfn /dev/null "$state/fakedev/gpu$i"
done
mapfile -t names < <(cut -d' ' -f1 "$state/etc/nodes")

# -- munge (shared by every cluster on this machine; left running by stop.sh)
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
mkdir -p /run/munge
chown munge:munge /run/munge
if ! munge -n </dev/null >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 9>&-
    for _ in $(seq 1 50); do
        munge -n </dev/null >/dev/null 2>&1 && break
        sleep 0.1
    done
fi

# -- /etc/hosts, only where the node names do not resolve
marker="# clusterkit-slurm $state"
need_hosts=no
case $hosts_mode in
    yes) need_hosts=yes ;;
    no) ;;
    *)
        # names that resolve only through another cluster's block count as unresolved: that
        # block goes when the other cluster stops
        others=$(awk '/^# clusterkit-slurm .* BEGIN$/ { on = 1; next }
                      /^# clusterkit-slurm .* END$/ { on = 0; next }
                      on { print }' /etc/hosts)
        for n in "${names[@]}"; do
            if ! getent hosts "$n" >/dev/null || grep -qw -- "$n" <<<"$others"; then
                need_hosts=yes
            fi
        done
        ;;
esac
if [ "$need_hosts" = yes ] && ! grep -qF "$marker BEGIN" /etc/hosts; then
    {
        echo "$marker BEGIN"
        echo "127.0.0.1 ${names[*]}"
        echo "$marker END"
    } >>/etc/hosts
fi

# -- daemons: a fresh controller state every time (-c, wiped directory), then one slurmd each
rm -rf "${state:?}/ctld/"*
/usr/sbin/slurmctld -c -f "$SLURM_CONF" </dev/null >>"$state/daemons.out" 2>&1 9>&-
for n in "${names[@]}"; do
    mkdir -p "$state/slurmd-$n"
    /usr/sbin/slurmd -N "$n" -f "$SLURM_CONF" </dev/null >>"$state/daemons.out" 2>&1 9>&-
done

# -- ready when every logical node with a slurmd is idle (at most 30 s)
nodelist=$(IFS=,; echo "${names[*]}")
for _ in $(seq 1 150); do
    idle=$(sinfo -h -N -n "$nodelist" -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
    if [ "$idle" -eq "${#names[@]}" ]; then
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 0.2
done
echo "start.sh: slurm did not become ready; nodes:" >&2
sinfo -N -n "$nodelist" >&2 || true
tail -n 20 "$state/slurmctld.log" >&2 || true
"$here/stop.sh" "$state" || true
exit 1
