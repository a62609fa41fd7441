# Sourced by the install and test scripts: one clear line when a step fails, Debian packages by command, the
# Go toolchain the pins need, and the per-machine tools cache.
#
#   . scripts/lib/common.sh; on_error install-test-tools

# Every failing command is named with its script and line, instead of a bare `set -e` exit deep inside.
on_error() {
  _script=$1
  trap 'rc=$?; echo "$_script: failed (exit $rc) at ${BASH_SOURCE[0]##*/}:$LINENO: $BASH_COMMAND" >&2; exit $rc' ERR
  set -E
}

# Stops with one line naming what is missing and what to do about it.
die() {
  echo "$_script: $*" >&2
  exit 1
}

# apt_need <command-or-/path>:<package> ...: installs the packages whose command or file is missing.
apt_need() {
  local pair want=() what
  for pair in "$@"; do
    what=${pair%%:*}
    case "$what" in
      /*) [ -e "$what" ] || want+=("${pair#*:}") ;;
      *) command -v "$what" >/dev/null 2>&1 || want+=("${pair#*:}") ;;
    esac
  done
  [ ${#want[@]} -eq 0 ] && return 0
  apt_install "${want[@]}"
}

# apt_install <package> ...: Debian's packages, with apt's lists updated once per script run.
apt_install() {
  echo "$_script: apt-get install $*"
  if [ -z "${_apt_updated:-}" ]; then
    apt-get update -qq || die "apt-get update failed: Debian's mirror is needed to install $*"
    _apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
    die "apt-get install $* failed"
}

# Where test tools built or installed once per machine live, each in a directory named for what it is and its
# version (crane-v0.20.6-go1.26.8, sushy-tools-2.2.0-py3.11): a fresh clone links them instead of building.
tools_cache() {
  echo "${FOOTHOLD_TOOLS_CACHE:-$HOME/.cache/foothold/tools}"
}

# The first Debian mirror this machine's apt is configured with (deb822 `.sources` files, then sources.list; a
# machine may have either or both). Empty when there is none.
debian_mirror() {
  local files=() f
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    if [ -f "$f" ]; then files+=("$f"); fi
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk '(/^URIs:/ || $1 == "deb") && $2 !~ /security/ {print $2; exit}' "${files[@]}"
}

# backports_enable <what>: bookworm-backports in apt's sources (once) and apt's lists updated, for <what>.
backports_enable() {
  local mirror
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    mirror=$(debian_mirror)
    [ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list*: install $1 by hand"
    echo "deb $mirror bookworm-backports main" >/etc/apt/sources.list.d/foothold-backports.list
  fi
  apt-get update -qq || die "apt-get update failed (bookworm-backports, for $1)"
  _apt_updated=1
}

# qemu for boots under TCG: 10.0 or later. bookworm's 7.2 boots slower under TCG (docs/results.md) and its
# multi-threaded TCG has panicked trixie kernels early in their boot; trixie ships 10.0, bookworm-backports has it.
QEMU_MIN_MAJOR=10
qemu_major() {
  # Empty, not a failure, where qemu is missing: the callers run under pipefail and an ERR trap.
  command -v qemu-system-x86_64 >/dev/null 2>&1 || return 0
  qemu-system-x86_64 --version | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p'
}
qemu_need() {
  local have
  have=$(qemu_major)
  [ -n "$have" ] && [ "$have" -ge "$QEMU_MIN_MAJOR" ] && command -v qemu-img >/dev/null && return 0
  if [ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = bookworm ]; then
    echo "$_script: qemu ${have:-(none)} is older than $QEMU_MIN_MAJOR; installing qemu from bookworm-backports"
    backports_enable "qemu $QEMU_MIN_MAJOR"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports \
      qemu-system-x86 qemu-utils >/dev/null || die "installing qemu from bookworm-backports failed"
  else
    apt_install qemu-system-x86 qemu-utils
  fi
  hash -r
  have=$(qemu_major)
  [ -n "$have" ] && [ "$have" -ge "$QEMU_MIN_MAJOR" ] ||
    die "qemu-system-x86_64 is ${have:-missing}, the boots need $QEMU_MIN_MAJOR or later: install it by hand"
}

# The Go toolchain the appliance's pins were built with (scripts/go-version): another version builds other
# bytes. Where `go` is missing or too old to switch toolchains (before 1.21), Debian's golang from
# bookworm-backports bootstraps it, and `GOTOOLCHAIN=go<version>` fetches the pinned toolchain from the Go
# module proxy. That toolchain's bin/ goes first on PATH with GOTOOLCHAIN=local, so every `go` after this
# (the builder's too, which asks for the local one) is the pinned version.
go_need() {
  local want goroot
  want=go$(cat "$(dirname "${BASH_SOURCE[0]}")/../go-version")
  if [ "$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null)" = "$want" ]; then
    export GOTOOLCHAIN=local
    return 0
  fi
  # No go at all, or one before 1.21, which ignores GOTOOLCHAIN.
  if [ "$(GOTOOLCHAIN=$want go env GOVERSION 2>/dev/null)" != "$want" ]; then
    echo "$_script: no Go that can switch to $want; installing Debian's golang-go from bookworm-backports"
    backports_enable "Go $want"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports golang-go >/dev/null ||
      die "installing golang-go from bookworm-backports failed: install Go $want by hand"
    hash -r
  fi
  goroot=$(GOTOOLCHAIN=$want go env GOROOT 2>/dev/null) ||
    die "GOTOOLCHAIN=$want: the Go module proxy did not serve toolchain $want"
  export PATH="$goroot/bin:$PATH" GOTOOLCHAIN=local
  [ "$(go env GOVERSION)" = "$want" ] || die "go is $(go env GOVERSION), the pins need $want"
}

# phase <name> <command...>: runs it, recording its seconds and exit status as a line of $FOOTHOLD_PHASES
# (when set: .ci/run's table). Returns its status.
phase() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  echo "== $name: $*"
  "$@" || rc=$?
  if [ -n "${FOOTHOLD_PHASES:-}" ]; then
    printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - start))" "$rc" >>"$FOOTHOLD_PHASES"
  fi
  return $rc
}
