#!/usr/bin/env bash
# The demo: a local control plane with fake GPU nodes, kubegang running in it, example GPUJobs placed.
# Leaves the cluster running so you can look around; `hack/cluster down` stops it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
SHAPE="${SHAPE:-hack/shapes/superpod-h100.yaml}"
t0=$(date +%s)
hack/cluster up --shape "$SHAPE"
export KUBECONFIG="$REPO_ROOT/.cluster/kubeconfig" PATH="$(k8s_bin_dir):$(helm_bin_dir):$PATH"
echo
echo "== fake GPU nodes (kubectl get nodes -l nvidia.com/gpu.present=true)"
kubectl get nodes -l nvidia.com/gpu.present=true \
  -L nvidia.com/gpu.product,nvidia.com/gpu.count,kubegang.io/leaf,kubegang.io/spine | head -12
echo "... $(kubectl get nodes -l nvidia.com/gpu.present=true -o name | wc -l) nodes in all"
echo
echo "demo ready in $(( $(date +%s) - t0 ))s. Next:"
echo "  $(hack/cluster env)"
echo "  export PATH=$(k8s_bin_dir):\$PATH    # the pinned kubectl"
echo "  hack/cluster down                       # stop everything"
