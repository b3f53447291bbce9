#!/usr/bin/env bash
# Prepare an ONNX Runtime folder for building jaxconv's C++ projects (jaxconv to-cpp):
#
#   DEST/include/onnxruntime_cxx_api.h ...   C/C++ API headers
#   DEST/lib/libonnxruntime.so.1.X.Y         the runtime library (SONAME libonnxruntime.so.1)
#   DEST/lib/libonnxruntime.so.1, libonnxruntime.so   relative symlinks
#
# This is the layout of ONNX Runtime's own release archives, so CMake's -DONNXRUNTIME_ROOT
# accepts either. The library comes from the onnxruntime Python wheel (the one installed for
# PYTHON, else a downloaded wheel); the headers come from Debian's libonnxruntime-dev package,
# downloaded with a private, throw-away apt state and extracted (nothing is installed, the
# system's apt configuration is not touched). Headers of an older API version than the library
# are fine: the C++ API asks the library for the API version it was compiled with.
#
# Usage: get_onnxruntime.sh DEST   (run by `jaxconv cpp-runtime DEST`, and by the repository's
# scripts/get_onnxruntime.sh with DEST <repo>/.deps/onnxruntime). Prints DEST on the last line of stdout. Idempotent: a complete DEST for the same library
# version is reused without any download.
#
# Environment:
#   PYTHON              interpreter whose onnxruntime wheel provides the library (default: python3)
#   ORT_VERSION         wheel version to download when PYTHON has no onnxruntime
#   ORT_INCLUDE_DIR     use these headers (a folder with onnxruntime_cxx_api.h); default: a system
#                       install's (/usr/include/onnxruntime, /usr/local/include/onnxruntime), else Debian's
#   ORT_DEBIAN_SUITE    Debian suite to take libonnxruntime-dev from (default: trixie)
#   ORT_DEBIAN_MIRROR   Debian mirror URL (default: the first URIs: entry of this machine's apt sources)
set -euo pipefail

say() { echo "get_onnxruntime: $*" >&2; }
die() { say "error: $*"; exit 1; }

dest=${1:?usage: get_onnxruntime.sh DEST}
mkdir -p "$(dirname "$dest")"
dest=$(cd "$(dirname "$dest")" && pwd)/$(basename "$dest")

PYTHON=${PYTHON:-python3}
if [[ -z "${ORT_INCLUDE_DIR:-}" ]]; then
  for d in /usr/include/onnxruntime /usr/local/include/onnxruntime; do
    if [[ -f "$d/onnxruntime_cxx_api.h" ]]; then ORT_INCLUDE_DIR=$d; break; fi
  done
fi

# One preparation at a time per DEST (parallel test workers call this script too).
exec 9>"$dest.lock"
flock 9

wheel_lib() {  # path of libonnxruntime.so.1.X.Y inside PYTHON's onnxruntime, or nothing
  "$PYTHON" - <<'PY' 2>/dev/null || true
import glob, os
import onnxruntime
capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
libs = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so.1.*")))
print(libs[-1] if libs else "")
PY
}

complete() {  # DEST holds a finished preparation for library version $1 (any version when empty)
  [[ -f "$dest/VERSION" && -f "$dest/include/onnxruntime_cxx_api.h" && -e "$dest/lib/libonnxruntime.so.1" ]] \
    && [[ -z "$1" || "$(head -n1 "$dest/VERSION")" == "$1" ]]
}

lib=$(wheel_lib)
if [[ -n "$lib" ]]; then
  version=${lib##*/libonnxruntime.so.}
  wanted=$version
else
  wanted=${ORT_VERSION:-}
fi
if complete "$wanted"; then
  echo "$dest"
  exit 0
fi

work=$(mktemp -d "$dest.tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [[ -z "$lib" ]]; then
  say "no onnxruntime in $PYTHON; downloading the wheel${ORT_VERSION:+ $ORT_VERSION}"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$work/wheel" "onnxruntime${ORT_VERSION:+==$ORT_VERSION}" >&2 \
    || die "cannot download the onnxruntime wheel with $PYTHON -m pip"
  "$PYTHON" -m zipfile -e "$work"/wheel/onnxruntime-*.whl "$work/wheel/x" \
    || die "cannot unpack the onnxruntime wheel"
  lib=$(ls "$work"/wheel/x/onnxruntime/capi/libonnxruntime.so.1.* 2>/dev/null | sort | tail -n1)
  [[ -n "$lib" ]] || die "the onnxruntime wheel has no libonnxruntime.so.1.*"
  version=${lib##*/libonnxruntime.so.}
  lib_from="onnxruntime $version wheel (downloaded)"
else
  lib_from=$lib
fi

out=$work/out
mkdir -p "$out/include" "$out/lib"

if [[ -n "${ORT_INCLUDE_DIR:-}" ]]; then
  [[ -f "$ORT_INCLUDE_DIR/onnxruntime_cxx_api.h" ]] || die "ORT_INCLUDE_DIR=$ORT_INCLUDE_DIR has no onnxruntime_cxx_api.h"
  cp -r "$ORT_INCLUDE_DIR/." "$out/include/"
  header_from=$ORT_INCLUDE_DIR
else
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
    || die "apt-get and dpkg-deb are needed to fetch the headers (or set ORT_INCLUDE_DIR)"
  suite=${ORT_DEBIAN_SUITE:-trixie}
  mirror=${ORT_DEBIAN_MIRROR:-}
  if [[ -z "$mirror" ]]; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  fi
  if [[ -z "$mirror" ]]; then
    mirror=$(awk '$1=="deb" && $2 !~ /^\[/ {print $2; exit} $1=="deb" && $2 ~ /^\[/ {print $3; exit}' \
             /etc/apt/sources.list 2>/dev/null || true)
  fi
  [[ -n "$mirror" ]] || die "no Debian mirror found in /etc/apt; set ORT_DEBIAN_MIRROR (or ORT_INCLUDE_DIR)"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [[ -f "$keyring" ]] || die "$keyring is missing (package debian-archive-keyring); set ORT_INCLUDE_DIR instead"
  apt=$work/apt
  mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/deb"
  cat > "$apt/parts/onnxruntime.sources" <<SRC
Types: deb
URIs: $mirror
Suites: $suite
Components: main
Signed-By: $keyring
SRC
  opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/parts"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
        -o Dir::State::status=/var/lib/dpkg/status)
  if [[ $(id -u) == 0 ]]; then opts+=(-o APT::Sandbox::User=root); fi
  say "fetching libonnxruntime-dev headers from Debian $suite"
  apt-get "${opts[@]}" update -qq >&2 || die "apt-get update for Debian $suite failed"
  (cd "$apt/deb" && apt-get "${opts[@]}" download -qq libonnxruntime-dev >&2) \
    || die "apt-get download libonnxruntime-dev ($suite) failed"
  deb=$(ls "$apt"/deb/libonnxruntime-dev_*.deb | head -n1)
  dpkg-deb -x "$deb" "$apt/x"
  [[ -f "$apt/x/usr/include/onnxruntime/onnxruntime_cxx_api.h" ]] || die "$deb has no onnxruntime_cxx_api.h"
  cp -r "$apt/x/usr/include/onnxruntime/." "$out/include/"
  header_from=$(basename "$deb")
fi

api=$(awk '/^#define ORT_API_VERSION/{print $3; exit}' "$out/include/onnxruntime_c_api.h")
minor=$(echo "$version" | cut -d. -f2)
[[ -n "$api" ]] || die "no ORT_API_VERSION in the headers from $header_from"
if (( api > minor )); then
  die "headers from $header_from have API version $api, newer than the library $version (API $minor)"
fi

cp "$lib" "$out/lib/libonnxruntime.so.$version"
ln -s "libonnxruntime.so.$version" "$out/lib/libonnxruntime.so.1"
ln -s "libonnxruntime.so.1" "$out/lib/libonnxruntime.so"
printf '%s\nlibrary: %s\nheaders: %s (ORT_API_VERSION %s)\n' "$version" "$lib_from" "$header_from" "$api" > "$out/VERSION"

rm -rf "$dest.old"
if [[ -e "$dest" ]]; then mv "$dest" "$dest.old"; fi
mv "$out" "$dest"
rm -rf "$dest.old"
say "ONNX Runtime $version (headers: API $api) in $dest"
echo "$dest"
