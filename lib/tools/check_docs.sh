#!/bin/sh
# docs/configuration.md must be exactly what `ofccl_info -c --markdown` prints,
# so the documentation can never drift from the parameter table.
# Usage: check_docs.sh path/to/ofccl_info path/to/docs/configuration.md
set -eu
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$1" -c --markdown > "$tmp"
if ! diff -u "$2" "$tmp"; then
    echo "docs/configuration.md is stale: regenerate it with '$1 -c --markdown > docs/configuration.md'"
    exit 1
fi
echo "1 passed, 0 failed"
