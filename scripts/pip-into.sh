# Sourced by the install scripts: `pip_into <who> <dir> <requirement>...` installs the
# requirements from PyPI into <dir> alone (pip --target, through <dir>.part so that a broken
# install never looks complete), installing pip from Debian first when it is missing.
pip_into() {
  local who="$1" dir="$2"
  shift 2
  if ! python3 -m pip --version >/dev/null 2>&1; then
    . "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
    apt_install "$who" --with-recommends python3-pip
  fi
  echo "$who: installing $* into $dir"
  rm -rf "$dir.part"
  local pip=(python3 -m pip install --quiet --disable-pip-version-check --target "$dir.part" "$@")
  # A system Python that is "externally managed" asks for the flag even with --target.
  "${pip[@]}" 2>/dev/null || "${pip[@]}" --break-system-packages
  rm -rf "$dir"
  mv "$dir.part" "$dir"
}
