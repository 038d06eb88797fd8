#!/usr/bin/env bash
# The round's "before" tree: .gpucache/before.tgz (git archive of the commit before round 4) unpacked into
# /tmp/before with its own entry points installed, then tools/gpu/suite.sh run inside it.
set -u
mkdir -p "$OUT" /tmp/before
tar -xzf .gpucache/before.tgz -C /tmp/before || exit 1
(cd /tmp/before && PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation \
    --no-compile --target /tmp/kvc-before . >/dev/null 2>&1) || echo "warning: before tree's entry points"
PYTHONPATH=/tmp/site:/tmp/before:/tmp/kvc-before OUT="$OUT" bash tools/gpu/suite.sh /tmp/before
