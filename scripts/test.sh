#!/bin/sh
# Install what is missing, build, and run the whole test suite. Prints the
# meson summary and a final "N passed, N failed" line; fails when any test
# failed or when no test ran.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
. ./scripts/mpienv.sh
status=0
meson test -C build --print-errorlogs --num-processes 2 "$@" || status=$?
python3 - build/meson-logs/testlog.json <<'PY' || status=1
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: bad += 1
print(f"{ok} passed, {bad} failed, {skip} skipped")
sys.exit(1 if bad or ok == 0 else 0)
PY
exit $status
