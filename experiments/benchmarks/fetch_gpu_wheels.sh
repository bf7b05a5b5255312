#!/usr/bin/env bash
# Fetches into .whl/ (git-ignored) the wheels that the lent GPU machines' image lacks, for its
# Python 3.12 on x86-64 (../shared/FACTS.md, H100 section: with these the project ran there), at
# the versions constraints.txt and the Makefile pin; --no-deps, since the image has the rest.
# A device run that names `.whl` in `carry` takes them along; `make gpu-check` installs them
# there (docs/performance.md, "On a GPU"). About 40 MB of the 64 MiB a device run may carry.
#
#   bash experiments/benchmarks/fetch_gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PACKAGES="ml_collections grain array_record portpicker tensorboardX transformers faiss-cpu"
pins=()
for name in $PACKAGES; do
  pin=$(grep -i "^${name}==" constraints.txt) || {
    echo "fetch_gpu_wheels.sh: constraints.txt pins no ${name}" >&2; exit 1; }
  pins+=("$pin")
done
pins+=("$(grep -o 'bfcl-eval==[^ ]*' Makefile)")  # the Makefile installs it, without its deps
rm -rf .whl && mkdir .whl  # one version of each: two stop the whole install there
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl "${pins[@]}"
du -sh .whl
