#!/usr/bin/env bash
# hack/build-addons.sh [kueue|kuberay ...]: builds kubegang's neighbours from the Go module proxy —
# the Kueue controller manager (sigs.k8s.io/kueue/cmd/kueue) and the KubeRay operator
# (github.com/ray-project/kuberay/ray-operator) — with the CRDs (and Kueue's webhook manifests) copied
# from the very module version that was built. With no argument it builds both.
#
# Why from source: as for the control plane, no images or release binaries can be downloaded here.
# Neither module's go.mod has replace directives, so `go install pkg@version` builds each with its
# own pinned dependencies. Cached in ~/.cache/kubegang/<component>-<version>/ (KUBEGANG_CACHE); the
# binary is moved into place last, so its presence means the folder is complete.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

# module_dir MODULE VERSION: the module's source in the module cache (downloaded if missing).
module_dir() {
  local dir
  dir=$(cd "$KUBEGANG_CACHE/work" && go mod download -json "$1@$2" | python3 -c \
    'import json,sys;d=json.load(sys.stdin);print(d.get("Dir") or sys.exit(d.get("Error")))') \
    || die "module $1@$2 did not resolve from the Go module proxy"
  echo "$dir"
}

# copy_manifests SRC_DIR DST_DIR: the module's YAML, writable (the module cache is read-only).
copy_manifests() {
  [[ -d $1 ]] || die "$1 is missing from the module source"
  rm -rf "$2"; mkdir -p "$2"; cp "$1"/*.yaml "$2/"; chmod u+w "$2"/*.yaml
}

build_kueue() {
  local out; out=$(kueue_dir)
  if [[ -x $out/bin/kueue ]]; then log "kueue $KUEUE_VERSION: cached in $out"; return; fi
  local src; src=$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")
  copy_manifests "$src/config/components/crd/bases" "$out/crds"
  copy_manifests "$src/config/components/webhook" "$out/webhook"
  local pkg=sigs.k8s.io/kueue/pkg/version
  go_install kueue sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION" "$out/bin" kueue \
    "-X $pkg.GitVersion=$KUEUE_VERSION -X $pkg.GitCommit=kubegang-$KUEUE_VERSION -X $pkg.BuildDate=1970-01-01"
}

build_kuberay() {
  local out; out=$(kuberay_dir)
  if [[ -x $out/bin/ray-operator ]]; then log "kuberay $KUBERAY_VERSION: cached in $out"; return; fi
  local src; src=$(module_dir github.com/ray-project/kuberay/ray-operator "$KUBERAY_VERSION")
  copy_manifests "$src/config/crd/bases" "$out/crds"
  go_install kuberay github.com/ray-project/kuberay/ray-operator "$KUBERAY_VERSION" "$out/bin" ray-operator
}

command -v go >/dev/null || die "Go is not installed; it is needed to build the add-ons"
mkdir -p "$KUBEGANG_CACHE/work"
t0=$(date +%s)
[[ $# -gt 0 ]] || set -- kueue kuberay
for addon in "$@"; do
  case "$addon" in
    kueue) build_kueue ;;
    kuberay) build_kuberay ;;
    *) die "unknown add-on '$addon': allowed are kueue, kuberay" ;;
  esac
done
log "add-ons ready in $KUBEGANG_CACHE ($(( $(date +%s) - t0 )) s)"
