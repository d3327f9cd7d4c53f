#!/usr/bin/env bash
# Builds the real control plane from the Go module proxy: kube-apiserver, kube-scheduler,
# kube-controller-manager and kubectl (k8s.io/kubernetes), etcd, kwok and helm.
#
# Why from source: no container images or release binaries can be downloaded here, only Go
# modules. Each component is built in a small helper module under the cache, keyed by its
# version, and skipped when its binaries are already there, so only a cold machine pays.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
LDSTRIP="-s -w"

# build_helper NAME OUTDIR GOMOD_BODY MAIN_GO PACKAGES... : a throwaway module that requires the
# component, so replace directives in the component's own go.mod do not stop us.
build_in_module() {
  local what=$1 dir=$2; shift 2
  log "$what: resolving modules in $dir"
  ( cd "$dir" && go mod tidy >/dev/null 2>"$dir/tidy.log" ) || {
    cat "$dir/tidy.log" >&2; die "$what: 'go mod tidy' failed (see above)"; }
}

build_kubernetes() {
  local out; out=$(k8s_bin_dir)
  if [[ -x $out/kube-apiserver && -x $out/kube-scheduler && -x $out/kube-controller-manager && -x $out/kubectl ]]; then
    log "kubernetes $KUBERNETES_VERSION: cached in $out"; return; fi
  local v=$KUBERNETES_VERSION minor staging work
  minor=$(echo "$v" | cut -d. -f2)
  local sv="v0.${v#v1.}"   # v1.36.3 -> v0.36.3, the tag of every staging module
  work="$KUBEGANG_CACHE/work/kubernetes-$v"; rm -rf "$work"; mkdir -p "$work" "$out"
  log "kubernetes $v: reading its staging modules"
  local gomod; gomod=$(go mod download -json "k8s.io/kubernetes@$v" | python3 -c 'import json,sys;d=json.load(sys.stdin);print(d.get("GoMod") or sys.exit(d.get("Error")))') \
    || die "module k8s.io/kubernetes@$v did not resolve"
  staging=$(grep -E '=> \./staging/' "$gomod" | awk '{print $1}')
  {
    echo "module kubegang.local/k8sbuild"; echo; echo "go 1.26.0"; echo
    echo "require k8s.io/kubernetes $v"; echo
    for m in $staging; do
      if go mod download "$m@$sv" 2>/dev/null; then echo "replace $m => $m $sv"
      else log "kubernetes $v: staging module $m has no $sv tag; not replaced (unused by the binaries we build)"
           echo "replace $m => ./missing/$m"; mkdir -p "$work/missing/$m"; echo "module $m" > "$work/missing/$m/go.mod"; fi
    done
  } > "$work/go.mod"
  cat > "$work/tools.go" <<'GO'
//go:build tools

package tools
GO
  log "kubernetes $v: go get (first run downloads a few hundred MB of modules)"
  ( cd "$work" && go get "k8s.io/kubernetes/cmd/kube-apiserver@$v" "k8s.io/kubernetes/cmd/kube-scheduler@$v" \
       "k8s.io/kubernetes/cmd/kube-controller-manager@$v" "k8s.io/kubernetes/cmd/kubectl@$v" ) 2>"$work/get.log" \
    || { tail -30 "$work/get.log" >&2; die "k8s.io/kubernetes@$v: go get failed (Go error above)"; }
  local ld="$LDSTRIP"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    ld+=" -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitCommit=kubegang-$v"
  done
  for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
    log "kubernetes $v: building $cmd"
    ( cd "$work" && go build -trimpath -ldflags "$ld" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" ) \
      || die "k8s.io/kubernetes@$v: building cmd/$cmd failed (Go error above)"
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
}

build_etcd() {
  local out; out=$(etcd_bin_dir)
  if [[ -x $out/etcd ]]; then log "etcd $ETCD_VERSION: cached in $out"; return; fi
  local v=$ETCD_VERSION work="$KUBEGANG_CACHE/work/etcd-$ETCD_VERSION"
  rm -rf "$work"; mkdir -p "$work" "$out"
  cat > "$work/go.mod" <<GO
module kubegang.local/etcdbuild

go 1.26.0

require (
	go.etcd.io/etcd/server/v3 $v
	go.etcd.io/etcd/api/v3 $v
	go.etcd.io/etcd/client/pkg/v3 $v
	go.etcd.io/etcd/client/v3 $v
	go.etcd.io/etcd/pkg/v3 $v
)
GO
  cat > "$work/main.go" <<'GO'
// etcd's own main, built as a dependency because etcd's go.mod has replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  build_in_module "etcd $v" "$work"
  log "etcd $v: building"
  ( cd "$work" && go build -trimpath -ldflags "$LDSTRIP" -o "$out/etcd.tmp" . ) \
    || die "go.etcd.io/etcd/server/v3@$v: build failed (Go error above)"
  mv "$out/etcd.tmp" "$out/etcd"
}

# kwok's own stage definitions (node initialise + heartbeat with lease, fast pod lifecycle), taken
# from the very module version we built, so our stages file only adds what kubegang needs.
copy_kwok_stages() {
  local dst; dst="$(kwok_bin_dir)/../stages"
  [[ -f $dst/pod-ready.yaml ]] && return
  local src; src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  if [[ ! -d $src ]]; then ( cd "$(mktemp -d)" && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION" ) \
    || die "sigs.k8s.io/kwok@$KWOK_VERSION: cannot download its stage definitions"; fi
  mkdir -p "$dst"
  cp "$src/node/fast/node-initialize.yaml" "$src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$src/pod/fast/pod-ready.yaml" "$src/pod/fast/pod-delete.yaml" "$dst/"
  chmod u+w "$dst"/*.yaml
}

command -v go >/dev/null || die "Go is not installed; it is needed to build the control plane"
mkdir -p "$KUBEGANG_CACHE/work"
t0=$(date +%s)
build_kubernetes
build_etcd
go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" "$(kwok_bin_dir)" kwok
copy_kwok_stages
go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" "$(helm_bin_dir)" helm \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
log "control plane binaries ready in $KUBEGANG_CACHE ($(( $(date +%s) - t0 )) s)"
