#!/usr/bin/env bash
# Custom data provider example (data.json "example_generated"): madengine runs this on the host
# in the mirror folder ($MAD_DATAHOME) before the model starts; whatever it writes there is the
# data set. Arguments come from the provider's "args".
set -euo pipefail
rows="${1:-100}"
{
  echo "index,value"
  for ((i = 0; i < rows; i++)); do echo "$i,$((i * i))"; done
} > squares.csv
echo "generated $rows rows for $MAD_DATANAME in $MAD_DATAHOME"
