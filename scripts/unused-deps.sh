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
for manifest in Cargo.toml */Cargo.toml crates/*/Cargo.toml; do
  dir=$(dirname "$manifest")
  grep -q '^\[package\]' "$manifest" || continue
  [ "$dir" = "fuzz" ] && continue
  sources=()
  for d in src tests benches examples build.rs; do
    [ -e "$dir/$d" ] && sources+=("$dir/$d")
  done
  allow=$(sed -n '/^\[package.metadata.unused-deps\]/,/^\[/p' "$manifest" | grep -o '"[^"]*"' | tr -d '"' || true)
  # Dependency names with their table: `dev` for [dev-dependencies], `main` for the others
  # ([dependencies] and target-specific ones). A main dependency must be named by the crate's
  # own code (src/, build.rs): one only the tests use belongs in [dev-dependencies].
  deps=$(awk '
    /^\[/ { kind = ($0 ~ /dev-dependencies\]$/) ? "dev" : (($0 ~ /dependencies\]$/) ? "main" : ""); next }
    kind != "" && /^[A-Za-z0-9_-]+[[:space:]]*=/ { sub(/[[:space:]]*=.*/, ""); print kind, $0 }
  ' "$manifest" | sort -u)
  own=()
  for d in src build.rs; do
    [ -e "$dir/$d" ] && own+=("$dir/$d")
  done
  while read -r kind name; do
    [ -n "$name" ] || continue
    if grep -qx "$name" <<<"$allow"; then continue; fi
    ident=${name//-/_}
    pattern="(^|[^A-Za-z0-9_])${ident}::|use ${ident}( |;|::)|extern crate ${ident}"
    if [ "$kind" = main ]; then
      if ! grep -rqE "$pattern" "${own[@]}"; then
        echo "unused dependency: $manifest declares \`$name\` in [dependencies] and no code in $dir/src names it (a test-only one belongs in [dev-dependencies])" >&2
        status=1
      fi
    elif ! grep -rqE "$pattern" "${sources[@]}"; then
      echo "unused dependency: $manifest declares \`$name\` and no source in $dir names it" >&2
      status=1
    fi
  done <<<"$deps"
done
[ $status -eq 0 ] && echo "unused-deps: every declared dependency is used"
exit $status
