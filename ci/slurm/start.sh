#!/bin/bash
# start.sh SITE STATE_DIR -- bring up a throw-away Slurm cluster on this machine, configured
# from sites/SITE.yaml (see clusterkit/slurmconf.py). Needs root and Debian's slurmctld, slurmd,
# slurm-client and munge. Clients find it through SLURM_CONF=STATE_DIR/etc/slurm.conf.
set -euo pipefail
site=$1
state=$(realpath -m "$2")
python=${PYTHON:-python3}
mkdir -p "$state/etc" "$state/ctld" "$state/fakedev"
"$python" -m clusterkit.slurmconf "$site" --out "$state/etc" --state "$state" >/dev/null
for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "$state/fakedev/gpu$i"; done
export SLURM_CONF=$state/etc/slurm.conf

if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
mkdir -p /run/munge
chown munge:munge /run/munge
if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
fi

# Jobs look their nodes up by name (MASTER_ADDR=$(scontrol show hostnames ...)): make the
# logical nodes resolve to this machine, in a marked block that stop.sh removes.
marker="# clusterkit-slurm $state"
if ! grep -qF "$marker" /etc/hosts; then
    {
        echo "$marker BEGIN"
        echo "127.0.0.1 $(cut -d' ' -f1 "$state/etc/nodes" | tr '\n' ' ')"
        echo "$marker END"
    } >> /etc/hosts
fi

rm -rf "${state:?}/ctld/"*
/usr/sbin/slurmctld -c -f "$SLURM_CONF"
while read -r name _port; do
    mkdir -p "$state/slurmd-$name"
    /usr/sbin/slurmd -N "$name" -f "$SLURM_CONF"
done < "$state/etc/nodes"

expected=$(wc -l < "$state/etc/nodes")
for _ in $(seq 1 150); do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
    if [ "$idle" -eq "$expected" ]; then
        exit 0
    fi
    sleep 0.2
done
echo "slurm did not become ready" >&2
sinfo -R >&2 || true
exit 1
