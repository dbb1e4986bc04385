#!/usr/bin/env bash
# Installs what building Basalt needs on Debian/Ubuntu when it is missing: libclang (bindgen
# for rust-rocksdb), a C++ compiler, and python3 (`make lint`'s module-cycle check). Uses sudo when not root. No-op when all is present.
set -euo pipefail

# True when any one of the places libclang is installed to holds it (each glob checked on its
# own: one glob that matches nothing must not hide another that does).
have_libclang() {
  local pattern
  for pattern in /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* \
    /usr/lib/aarch64-linux-gnu/libclang*.so* /usr/lib64/libclang*.so* /usr/local/lib/libclang*.so*; do
    compgen -G "$pattern" >/dev/null && return 0
  done
  [ -n "${LIBCLANG_PATH:-}" ] && compgen -G "$LIBCLANG_PATH/libclang*.so*" >/dev/null
}

missing=()
have_libclang || missing+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: please install: ${missing[*]} (no apt-get on this system)" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
