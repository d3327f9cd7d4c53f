#!/usr/bin/env bash
# The demo: a local control plane with fake GPU nodes, kubegang running in it (extender, replay
# agent, two operators, kube-scheduler's kubegang profile), the demo's GPUJobs and every example in
# examples/ applied and placed. Leaves everything running so you can look around; `hack/cluster down`
# stops it all. KUBEGANG_CLUSTER_DIR (default .cluster/) says where the cluster lives.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
SHAPE="${SHAPE:-hack/shapes/superpod-h100.yaml}"
# The second GPU product the examples ask for (NVIDIA-H200), in a leaf of its own.
EXTRA_SHAPE="${EXTRA_SHAPE:-hack/shapes/demo-h200.yaml}"
CLUSTER_DIR="${KUBEGANG_CLUSTER_DIR:-$REPO_ROOT/.cluster}"
t0=$(date +%s)
hack/cluster up --shape "$SHAPE" --shape "$EXTRA_SHAPE"
hack/cluster kubegang up
export KUBECONFIG="$CLUSTER_DIR/kubeconfig" PATH="$(k8s_bin_dir):$(helm_bin_dir):$PATH"

echo; echo "== GPU nodes as the agent published them (kubectl get gpunodes)"
deadline=$((SECONDS + 120))
# The agent replays an NVML dump for each node that names one; the H200 nodes have none (see
# hack/shapes/demo-h200.yaml) and are placed from their Node object alone.
want=$(kubectl get nodes -l nvidia.com/gpu.present=true --no-headers \
  -o custom-columns='DUMP:.metadata.annotations.kubegang\.io/replay-dump' | grep -vc '^<none>$' || true)
until [[ $(kubectl get gpunodes -o name 2>/dev/null | wc -l) -ge $want ]]; do
  (( SECONDS < deadline )) || { echo "agent did not publish $want GPUNodes in 120s" >&2; exit 1; }; sleep 2
done
kubectl get gpunodes | sed -n 1,5p; echo "... $want GPUNodes"
echo "GPU nodes per product and leaf:"
kubectl get nodes -l nvidia.com/gpu.present=true -L nvidia.com/gpu.product,kubegang.io/leaf --no-headers |
  awk '{print $6, $7}' | sort | uniq -c

echo; echo "== queues and jobs (examples/demo/, then every example in examples/)"
for ns in team-a team-b; do kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"; done
kubectl apply -f examples/demo/priorityclasses.yaml -f examples/demo/queues.yaml
kubectl apply -f examples/demo/jobs.yaml
for example in examples/*.yaml; do kubectl apply -f "$example"; done
want=$(kubectl get gpujobs -A --no-headers | wc -l)
deadline=$((SECONDS + 180))
until [[ $(kubectl get gpujobs -A -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$') -ge $want ]]; do
  (( SECONDS < deadline )) || { echo "jobs not all Running after 180s:" >&2; kubectl get gpujobs -A >&2; exit 1; }; sleep 2
done
kubectl get gpujobs -A
echo; echo "== where each gang landed"
kubectl get gpujobs -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}: {.status.placement.level} {.status.placement.domain} on {range .status.placement.pods[*]}{.node}:{.gpus} {end}{"\n"}{end}'
# The operator writes queue status about once a second: wait until research counts its jobs.
jobs=$(kubectl get gpujobs -A -o jsonpath='{range .items[*]}{.spec.queue}{"\n"}{end}' | grep -c '^team-[ab]$' || true)
for _ in $(seq 20); do
  [[ $(kubectl get gpuqueue research -o jsonpath='{.status.admitted}') == "$jobs" ]] && break; sleep 0.5
done
kubectl get gpuqueues

echo
echo "demo ready in $(( $(date +%s) - t0 ))s. Look around:"
echo "  $(hack/cluster env); export PATH=$(k8s_bin_dir):\$PATH"
echo "  kubectl get gpujobs -A; kubectl get pods -n team-a -o wide; kubectl get gpunodes"
echo "  kubectl describe gpujob -n team-a pretrain-16x8    # conditions and events"
echo "  logs: $CLUSTER_DIR/logs/   metrics: see $CLUSTER_DIR/kubegang.json for ports"
echo "  hack/cluster down                                   # stop everything"
