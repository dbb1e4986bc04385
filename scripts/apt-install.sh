# Sourced by the install scripts: `apt_install <who> [--with-recommends] <package>...` installs
# Debian packages with apt-get (through sudo when not root; without the packages they recommend
# unless asked), or fails naming them where there is no apt-get.
apt_install() {
  local who="$1" recommends=(--no-install-recommends)
  shift
  if [ "${1:-}" = --with-recommends ]; then
    recommends=()
    shift
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: please install: $* (no apt-get on this system)" >&2
    return 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "$who: installing $*"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${recommends[@]}" "$@"
}
