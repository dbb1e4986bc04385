#!/usr/bin/env bash
# Installs what building and running Basalt needs on Debian/Ubuntu when it is missing:
# libclang (bindgen for rust-rocksdb), a C++ compiler, python3 (`make lint`'s module-cycle
# check), the font of text watermarks on images (WenQuanYi Micro Hei, which covers Chinese,
# Japanese and Korean as well as Latin), ffmpeg and ffprobe (video snapshots) and util-linux's
# prlimit, unshare, nsenter and fallocate. Uses sudo when not root.
# No-op when all is present.
set -euo pipefail

# True when any one of the places libclang is installed to holds it (each glob checked on its
# own: one glob that matches nothing must not hide another that does). Only libclang itself
# counts (libclang.so*, libclang-<version>.so*): libclang-cpp, which other packages bring, is
# not what bindgen loads.
have_libclang() {
  local dir name
  for dir in /usr/lib/llvm-*/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 \
    /usr/local/lib ${LIBCLANG_PATH:+"$LIBCLANG_PATH"}; do
    for name in 'libclang.so*' 'libclang-[0-9]*.so*'; do
      compgen -G "$dir/$name" >/dev/null && return 0
    done
  done
  return 1
}

missing=()
have_libclang || missing+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
[ -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing+=(fonts-wqy-microhei)
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
command -v ffprobe >/dev/null 2>&1 || missing+=(ffmpeg)
# prlimit bounds ffmpeg; unshare, nsenter and fallocate give the disk tests and jepsen's
# disk-full nemesis small filesystems of their own.
for tool in prlimit unshare nsenter fallocate; do
  command -v "$tool" >/dev/null 2>&1 || { missing+=(util-linux); break; }
done
[ ${#missing[@]} -eq 0 ] && exit 0

. "$(dirname "$0")/apt-install.sh"
apt_install install-deps "${missing[@]}"
