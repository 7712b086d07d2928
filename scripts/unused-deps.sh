#!/usr/bin/env bash
# Fails when a crate of this workspace declares a dependency its code never names.
# A declared and unused dependency is built, audited and updated for nothing, and tells a
# reader the code does something it does not. Each dependency must appear as a path
# (`name::`) or in a `use` / `extern crate` in the crate's own sources (src, tests, benches,
# examples, build.rs). A crate that is needed only for a feature it turns on elsewhere can be
# listed in the manifest's `[package.metadata.unused-deps] allow = [...]` with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
for manifest in Cargo.toml */Cargo.toml; do
  dir=$(dirname "$manifest")
  grep -q '^\[package\]' "$manifest" || continue
  [ "$dir" = "fuzz" ] && continue
  sources=()
  for d in src tests benches examples build.rs; do
    [ -e "$dir/$d" ] && sources+=("$dir/$d")
  done
  allow=$(sed -n '/^\[package.metadata.unused-deps\]/,/^\[/p' "$manifest" | grep -o '"[^"]*"' | tr -d '"' || true)
  # Dependency names: keys of every [*dependencies] table.
  names=$(awk '
    /^\[/ { in_deps = ($0 ~ /dependencies\]$/) ; next }
    in_deps && /^[A-Za-z0-9_-]+[[:space:]]*=/ { sub(/[[:space:]]*=.*/, ""); print }
  ' "$manifest" | sort -u)
  for name in $names; do
    if grep -qx "$name" <<<"$allow"; then continue; fi
    ident=${name//-/_}
    if ! grep -rqE "(^|[^A-Za-z0-9_])${ident}::|use ${ident}( |;|::)|extern crate ${ident}" "${sources[@]}"; then
      echo "unused dependency: $manifest declares \`$name\` and no source in $dir names it" >&2
      status=1
    fi
  done
done
[ $status -eq 0 ] && echo "unused-deps: every declared dependency is used"
exit $status
