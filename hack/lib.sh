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
all_bin_path() { echo "$(k8s_bin_dir):$(etcd_bin_dir):$(kwok_bin_dir):$(helm_bin_dir)"; }

log() { printf '[hack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
