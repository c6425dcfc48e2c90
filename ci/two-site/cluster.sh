#!/bin/bash
# Writes the cluster file of the two-site runs to stdout: five nodes, RS(3,2), quorum 4,
# nodes 0-2 at address A and nodes 3-4 at address B, so that no write commits without
# both sites. Data folders go under DATA (each site's own, not shared).
#   ci/two-site/cluster.sh A B emu|verbs DATA
# With verbs every node opens rxe0 and takes the port's RoCEv2 GID of its address.
# The timings (microseconds) are the soak's unless HEARTBEAT_US, LEASE_US, DEAD_AFTER_US
# or TRANSPORT_TIMEOUT_US say otherwise (ci/softroce-2vm.sh: emulated CPUs are slower).
set -euo pipefail
a=$1 b=$2 fabric=$3 data=$4
cat <<TOML
[cluster]
name = "two-site"
k = 3
m = 2
quorum = 4
key_dir = "keys"
invalidation = "speculative"
predictive = false
value_bytes_max = 4096
store_bytes = 33554432
log_slots = 128
outcome_entries = 65536
heartbeat_us = ${HEARTBEAT_US:-1000}
lease_us = ${LEASE_US:-20000}
dead_after_us = ${DEAD_AFTER_US:-500000}
write_timeout_us = 3000000
transport_timeout_us = ${TRANSPORT_TIMEOUT_US:-50000}
fabric = "$fabric"
TOML
for i in 0 1 2 3 4; do
  if [ "$i" -lt 3 ]; then ip=$a; else ip=$b; fi
  echo
  echo "[[node]]"
  echo "id = $i"
  if [ "$fabric" = verbs ]; then echo 'device = "rxe0"'; else echo "fabric = \"$ip:$((7300 + i))\""; fi
  echo "control = \"$ip:$((7400 + i))\""
  echo "data_dir = \"$data/node$i\""
done
