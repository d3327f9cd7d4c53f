# Shared by hack/ scripts: pinned versions and where the built binaries are cached.
# Sourced, not executed.
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=versions.env
. "$HACK_DIR/versions.env"
KUBEGANG_CACHE="${KUBEGANG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubegang}"
GO_VERSION_TAG="$(go env GOVERSION 2>/dev/null || echo nogo)"

# One folder per component and version, so a second run builds nothing.
k8s_bin_dir()  { echo "$KUBEGANG_CACHE/kubernetes-$KUBERNETES_VERSION/bin"; }
etcd_bin_dir() { echo "$KUBEGANG_CACHE/etcd-$ETCD_VERSION/bin"; }
kwok_bin_dir() { echo "$KUBEGANG_CACHE/kwok-$KWOK_VERSION/bin"; }
helm_bin_dir() { echo "$KUBEGANG_CACHE/helm-$HELM_VERSION/bin"; }
kueue_dir()    { echo "$KUBEGANG_CACHE/kueue-$KUEUE_VERSION"; }
kuberay_dir()  { echo "$KUBEGANG_CACHE/kuberay-$KUBERAY_VERSION"; }
all_bin_path() { echo "$(k8s_bin_dir):$(etcd_bin_dir):$(kwok_bin_dir):$(helm_bin_dir)"; }

log() { printf '[hack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# go install PKG@VERSION into OUT/BIN (skipped when it is there): works for modules whose go.mod has
# no replace directives (kwok, helm, kueue, kuberay). Installed under a temporary name and moved, so
# an interrupted build never leaves a binary that looks cached.
go_install() {
  local what=$1 pkg=$2 v=$3 out=$4 bin=$5 ld=${6:-}
  if [[ -x $out/$bin ]]; then log "$what $v: cached in $out"; return; fi
  local tmp; tmp=$(mktemp -d "$KUBEGANG_CACHE/work/gobin.XXXXXX")
  mkdir -p "$out"; log "$what $v: go install $pkg@$v"
  GOBIN="$tmp" go install -trimpath -ldflags "-s -w $ld" "$pkg@$v" \
    || { rm -rf "$tmp"; die "$pkg@$v: go install failed (Go error above)"; }
  mv "$tmp/$(basename "$pkg")" "$out/$bin"; rm -rf "$tmp"
}
