#!/bin/sh
# The README's main job: runs Shoal's demo. Argument: the folder of the release binaries.
set -eu
bin=${1:-build/bin}
echo "== crdt-tour: three replicas, concurrent changes, deltas exchanged as bytes =="
"$bin/crdt-tour"
