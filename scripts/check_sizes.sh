#!/usr/bin/env bash
# Fail when a tracked file is larger than the repository keeps (models, weights, wheels and venvs are made
# again by scripts, never committed). JAXCONV_MAX_FILE_KIB overrides the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${JAXCONV_MAX_FILE_KIB:-2048}
command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1 || exit 0
big=$(git ls-files -z | xargs -0 -r du -k -- 2>/dev/null | awk -v limit="$limit" '$1 > limit {print $2 " (" $1 " KiB)"}')
if [ -n "$big" ]; then
  echo "check_sizes: tracked files over ${limit} KiB (generated files do not belong in the repository):" >&2
  echo "$big" | sed 's/^/  /' >&2
  exit 1
fi
