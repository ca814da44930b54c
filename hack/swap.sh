#!/usr/bin/env bash
# The swap of docs/operations.md as a script: NVIDIA's ComputeDomain controller out, ours in
# (`in`), and back (`out`), in an install of NVIDIA's chart `dra-driver-nvidia-gpu`. NVIDIA's
# kubelet plugin and the running IMEX daemons are never touched. The integration test
# tests/integration/test_swap.py runs exactly this script.
#
#   hack/swap.sh in  [helm|kustomize|helm-beside]
#   hack/swap.sh out [helm|kustomize|helm-beside]
#
#   helm         our chart into NVIDIA's driver namespace, reusing its daemon ServiceAccount and
#                Lease name (manifests/helm/values/nvidia-driver-namespace.yaml)
#   kustomize    the same with `kubectl apply -k manifests/nvidia`
#   helm-beside  our chart in its own namespace ($OWN_NS), managing NVIDIA's driver namespace
#                (manifests/helm/values/beside-nvidia.yaml)
#
# Environment: NS (NVIDIA's driver namespace, default nvidia-dra-driver-gpu; a fresh install of
# NVIDIA's chart uses dra-driver-nvidia-gpu), NVIDIA_DEPLOYMENT (NVIDIA's controller Deployment;
# default: whichever of dra-driver-nvidia-gpu-controller (fresh install) and
# nvidia-dra-driver-gpu-controller (upgraded, nameOverride=nvidia-dra-driver-gpu) exists in NS),
# OWN_NS (default computedomain-system), RELEASE (default computedomain), IMAGE (our controller
# image; default: the chart's), WAIT_NAMESPACES (where to wait for Ready ComputeDomains; default
# all), KUBECTL and HELM (default: from PATH), KUBECONFIG.
set -euo pipefail
cd "$(dirname "$0")/.."

action=${1:?usage: hack/swap.sh in|out [helm|kustomize|helm-beside]}
method=${2:-helm}
NS=${NS:-nvidia-dra-driver-gpu}
OWN_NS=${OWN_NS:-computedomain-system}
RELEASE=${RELEASE:-computedomain}
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
CHART=manifests/helm/computedomain-controller
NVIDIA_DEPLOYMENTS="dra-driver-nvidia-gpu-controller nvidia-dra-driver-gpu-controller"
OUR_PODS=app.kubernetes.io/name=computedomain-controller
TIMEOUT=${TIMEOUT:-180s}

say() { printf 'swap.sh: %s\n' "$*" >&2; }
k() { "$KUBECTL" "$@"; }

case "$method" in
  helm | kustomize) ours_ns=$NS ;;
  helm-beside) ours_ns=$OWN_NS ;;
  *) say "unknown method '$method' (helm, kustomize or helm-beside)"; exit 2 ;;
esac
if [ "$method" = kustomize ] && [ "$NS" != nvidia-dra-driver-gpu ]; then
  say "manifests/nvidia targets nvidia-dra-driver-gpu; for $NS run 'kustomize edit set namespace $NS' in manifests/nvidia first"
  exit 2
fi

# NVIDIA's controller Deployment: named after the chart or its nameOverride, never the release
# (docs/contract.md §19).
find_nvidia_deployment() {
  if [ -n "${NVIDIA_DEPLOYMENT:-}" ]; then
    echo "$NVIDIA_DEPLOYMENT"
    return
  fi
  local name found=()
  for name in $NVIDIA_DEPLOYMENTS; do
    if k -n "$NS" get deployment "$name" -o name >/dev/null 2>&1; then
      found+=("$name")
    fi
  done
  if [ "${#found[@]}" -ne 1 ]; then
    say "expected one of NVIDIA's controller Deployments ($NVIDIA_DEPLOYMENTS) in namespace $NS, found ${#found[@]}; set NS, or NVIDIA_DEPLOYMENT"
    exit 2
  fi
  echo "${found[0]}"
}

# Its pods, by the Deployment's own selector: v0.4.1's chart dropped the fixed label v0.4.0
# put on them, and the selector label's key follows the chart name or nameOverride.
pods_of() {
  local selector
  selector=$(k -n "$NS" get deployment "$1" \
    -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}')
  echo "${selector%,}"
}

helm_image_args=()
if [ -n "${IMAGE:-}" ]; then
  helm_image_args=(--set "image.repository=${IMAGE%:*}" --set "image.tag=${IMAGE##*:}")
fi

swap_in() {
  # 1. NVIDIA's daemon image, read from its controller: ours must pass the same one on, or the
  #    daemons of new ComputeDomains would run another release than the kubelet plugin.
  local daemon_image nvidia_deployment nvidia_pods
  nvidia_deployment=$(find_nvidia_deployment)
  nvidia_pods=$(pods_of "$nvidia_deployment")
  say "NVIDIA's controller: deployment/$nvidia_deployment, pods $nvidia_pods"
  daemon_image=$(k -n "$NS" get deployment "$nvidia_deployment" \
    -o jsonpath='{.spec.template.spec.containers[0].image}')
  say "NVIDIA's driver image: $daemon_image"

  # 2. Stop NVIDIA's controller and wait until none of its pods is left: two controllers would
  #    both write status and finalizers.
  k -n "$NS" scale deployment "$nvidia_deployment" --replicas=0
  k -n "$NS" wait --for=delete pod -l "$nvidia_pods" --timeout="$TIMEOUT"

  # 3. Our CRDs (a superset of NVIDIA's: optional status fields only). Helm never upgrades CRDs,
  #    so this is always a server-side apply; --force-conflicts takes the fields over from the
  #    manager that created them.
  k apply --server-side --force-conflicts -f crds/

  # 4. Our controller.
  case "$method" in
    helm)
      "$HELM" upgrade --install "$RELEASE" "$CHART" --namespace "$NS" --skip-crds \
        -f manifests/helm/values/nvidia-driver-namespace.yaml \
        --set "daemonImage.repository=${daemon_image%:*}" --set "daemonImage.tag=${daemon_image##*:}" \
        "${helm_image_args[@]}" --wait --timeout "$TIMEOUT"
      ;;
    helm-beside)
      "$HELM" upgrade --install "$RELEASE" "$CHART" --namespace "$OWN_NS" --create-namespace \
        --skip-crds -f manifests/helm/values/beside-nvidia.yaml --set "driverNamespace=$NS" \
        --set "daemonImage.repository=${daemon_image%:*}" --set "daemonImage.tag=${daemon_image##*:}" \
        "${helm_image_args[@]}" --wait --timeout "$TIMEOUT"
      ;;
    kustomize)
      k apply -k manifests/nvidia
      # A no-op when NVIDIA runs the image the overlay names; otherwise one more rollout.
      k -n "$NS" set env deployment/computedomain-controller "IMAGE_NAME=$daemon_image"
      if [ -n "${IMAGE:-}" ]; then
        k -n "$NS" set image deployment/computedomain-controller "controller=$IMAGE"
      fi
      k -n "$NS" rollout status deployment/computedomain-controller --timeout="$TIMEOUT"
      ;;
  esac

  # 5. All is well when the ComputeDomains carry Ready=True again (only our controller writes
  #    that condition). WAIT_NAMESPACES (space-separated) narrows the check; default: all.
  if [ -n "${WAIT_NAMESPACES:-}" ]; then
    for ns in $WAIT_NAMESPACES; do
      k -n "$ns" wait --for=condition=Ready computedomains --all --timeout="$TIMEOUT"
    done
  else
    k wait --for=condition=Ready computedomains --all --all-namespaces --timeout="$TIMEOUT"
  fi
  say "swapped in: our controller runs in $ours_ns; NVIDIA's is at 0 replicas"
}

swap_out() {
  # 1. Stop ours first and wait until its pods are gone: on SIGTERM it finishes in-flight work
  #    and releases its Lease, which needs its RBAC, and an uninstall removes RBAC and
  #    Deployment together. Then remove what we installed.
  k -n "$ours_ns" scale deployment computedomain-controller --replicas=0
  k -n "$ours_ns" wait --for=delete pod -l "$OUR_PODS" --timeout="$TIMEOUT"
  case "$method" in
    helm | helm-beside) "$HELM" uninstall "$RELEASE" --namespace "$ours_ns" --wait --timeout "$TIMEOUT" ;;
    kustomize) k delete -k manifests/nvidia --ignore-not-found --wait ;;
  esac

  # 2. NVIDIA's controller back. The finalizer, labels and children are the ones it uses
  #    itself, so it resumes where ours left off; the CRDs stay (it ignores our status fields).
  local nvidia_deployment
  nvidia_deployment=$(find_nvidia_deployment)
  k -n "$NS" scale deployment "$nvidia_deployment" --replicas=1
  k -n "$NS" rollout status deployment/"$nvidia_deployment" --timeout="$TIMEOUT"
  say "swapped out: NVIDIA's controller runs again in $NS"
}

case "$action" in
  in) swap_in ;;
  out) swap_out ;;
  *) say "unknown action '$action' (in or out)"; exit 2 ;;
esac
