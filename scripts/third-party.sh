#!/usr/bin/env bash
# Links the upstream source archives no registry reachable here serves (Metal3's baremetal-operator and the API
# module of ironic-standalone-operator) into third_party/ (not committed), where packages/appliance.yaml names
# them, after checking each against the sha256 the spec pins. They come from $FOOTHOLD_THIRD_PARTY, else the
# team's shared directory beside this repository (../shared/third_party). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
from=${FOOTHOLD_THIRD_PARTY:-../shared/third_party}
mkdir -p third_party
status=0
# Every archive the appliance spec names under third_party/, with its pin.
while read -r name sha; do
  if [ -f "third_party/$name" ] && echo "$sha  third_party/$name" | sha256sum -c --status; then
    continue
  fi
  if [ ! -f "$from/$name" ]; then
    echo "third-party: $name is not in $from (set FOOTHOLD_THIRD_PARTY to the directory that holds it)" >&2
    status=1
    continue
  fi
  if ! echo "$sha  $from/$name" | sha256sum -c --status; then
    echo "third-party: $from/$name does not have the sha256 packages/appliance.yaml pins ($sha)" >&2
    status=1
    continue
  fi
  ln -sfn "$(realpath "$from/$name")" "third_party/$name"
done < <(grep -oE 'path: \.\./third_party/[^,}]+, sha256: [0-9a-f]{64}' packages/appliance.yaml |
  sed -E 's#path: \.\./third_party/([^,}]+), sha256: ([0-9a-f]{64})#\1 \2#')
exit $status
