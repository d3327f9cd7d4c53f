#!/usr/bin/env bash
# The demo: a local control plane with fake GPU nodes, kubegang running in it (extender, replay
# agent, two operators, kube-scheduler's kubegang profile), example GPUJobs applied and placed.
# Leaves everything running so you can look around; `hack/cluster down` stops it all.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
SHAPE="${SHAPE:-hack/shapes/superpod-h100.yaml}"
t0=$(date +%s)
hack/cluster up --shape "$SHAPE"
hack/cluster kubegang up
export KUBECONFIG="$REPO_ROOT/.cluster/kubeconfig" PATH="$(k8s_bin_dir):$(helm_bin_dir):$PATH"

echo; echo "== GPU nodes as the agent published them (kubectl get gpunodes)"
deadline=$((SECONDS + 120))
want=$(kubectl get nodes -l nvidia.com/gpu.present=true -o name | wc -l)
until [[ $(kubectl get gpunodes -o name 2>/dev/null | wc -l) -ge $want ]]; do
  (( SECONDS < deadline )) || { echo "agent did not publish $want GPUNodes in 120s" >&2; exit 1; }; sleep 2
done
kubectl get gpunodes | sed -n 1,5p; echo "... $want GPU nodes"

echo; echo "== queues and jobs (examples/demo/)"
for ns in team-a team-b; do kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"; done
kubectl apply -f examples/demo/queues.yaml
kubectl apply -f examples/demo/jobs.yaml
deadline=$((SECONDS + 180))
until [[ $(kubectl get gpujobs -A -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$') -ge 3 ]]; do
  (( SECONDS < deadline )) || { echo "jobs not all Running after 180s:" >&2; kubectl get gpujobs -A >&2; exit 1; }; sleep 2
done
kubectl get gpujobs -A
echo; echo "== where each gang landed"
for job in team-a/pretrain-16x8 team-b/finetune-4x8 team-b/eval-1x2; do
  ns=${job%/*}; name=${job#*/}
  kubectl get gpujob -n "$ns" "$name" -o jsonpath='{.metadata.namespace}/{.metadata.name}: {.status.placement.level} {.status.placement.domain} on {range .status.placement.pods[*]}{.node}:{.gpus} {end}{"\n"}'
done
kubectl get gpuqueues

echo
echo "demo ready in $(( $(date +%s) - t0 ))s. Look around:"
echo "  $(hack/cluster env); export PATH=$(k8s_bin_dir):\$PATH"
echo "  kubectl get gpujobs -A; kubectl get pods -n team-a -o wide; kubectl get gpunodes"
echo "  kubectl describe gpujob -n team-a pretrain-16x8    # conditions and events"
echo "  logs: .cluster/logs/   metrics: see .cluster/kubegang.json for ports"
echo "  hack/cluster down                                   # stop everything"
