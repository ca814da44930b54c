#!/usr/bin/env bash
# The swap of docs/operations.md as a script: NVIDIA's ComputeDomain controller out, ours in
# (`in`), and back (`out`), in an install of NVIDIA's chart `dra-driver-nvidia-gpu`. NVIDIA's
# kubelet plugin and the running IMEX daemons are never touched. The integration test
# tests/integration/test_swap.py runs exactly this script.
#
#   IMAGE=<registry>/computedomain-controller:<tag> hack/swap.sh in [helm|kustomize|helm-beside] [--dry-run]
#   hack/swap.sh out [--dry-run]
#
#   helm         our chart into NVIDIA's driver namespace, reusing its daemon ServiceAccount and
#                its controller's Lease name (manifests/helm/values/nvidia-driver-namespace.yaml)
#   kustomize    the same with manifests/nvidia, rendered into NS
#   helm-beside  our chart in its own namespace ($OWN_NS), managing NVIDIA's driver namespace
#                (manifests/helm/values/beside-nvidia.yaml)
#
# `in` changes nothing until its preflight passed: IMAGE given and a well-formed image reference
# with a tag, the cluster's version within our chart's kubeVersion, `kubectl auth can-i` for every
# kind of write the swap makes, server-side dry runs of the CRDs, NVIDIA's scale, the probe pod
# and our install (kustomize: `kubectl apply --dry-run=server`; helm: `--dry-run=server`, which
# renders against the cluster but does not send the objects: an admission refusal of one of
# ours shows at step 2, and the roll-back removes ours), and last the image probe: a Pod
# `computedomain-swap-probe-<random>` (in ours' namespace if it exists, else NS; on PROBE_NODE if
# given, else where the scheduler puts it) runs IMAGE with `--version`, restartPolicy Never,
# imagePullPolicy PROBE_PULL_POLICY; it must reach Running or Succeeded within TIMEOUT. A pull
# the kubelet refuses (ErrImagePull, ImagePullBackOff, InvalidImageName, ...), a container that
# cannot start, or `--version` exiting non-zero ends the preflight with one line naming the image,
# the node and the kubelet's words. The probe pod is deleted in every case. Then, in this order,
# so that NVIDIA's controller is stopped only once ours runs and stands by, and the CRDs are
# upgraded only once ours leads:
#   1. record: NVIDIA's controller replicas and what `in` creates, as annotations
#      computedomain.dev/swap-* on NVIDIA's controller Deployment;
#   2. ours installed at its full replicas, its pods Ready (helm --wait, kubectl rollout status);
#   3. ours stands by, seen with kubectl: either the Lease ours elects on is held by a running pod
#      of NVIDIA's (helm and kustomize share NVIDIA's Lease name: with NVIDIA's leader election
#      on, ours waits for that Lease), or it is held by a pod of ours that has recorded the
#      Warning ConcurrentController on CRD computedomains.resource.nvidia.com (Events of
#      `default`, reportingInstance computedomain-controller-<pod>): it saw NVIDIA's pods and
#      writes nothing while they run (own Lease, or NVIDIA's leader election off), or NVIDIA's
#      pods wait on the Lease it holds. With no pod of NVIDIA's running, ours holding the Lease is
#      enough;
#   4. NVIDIA's controller scaled to 0, its pods gone; ours takes over by itself (it resumes as
#      NVIDIA's pods terminate, or takes the Lease NVIDIA's controller releases);
#   5. ours holds the Lease;
#   6. our CRDs (server-side apply), NVIDIA's saved first (ours writes only status.status and
#      status.nodes until then, and says CRDOutdated);
#   7. every ComputeDomain carries our Ready condition (True or not: an idle ComputeDomain is
#      Ready=False WaitingForWorkload, which is the truth).
# A failure (or Ctrl-C) after step 1 runs `out`, which puts back exactly what was there: ours
# removed (and OWN_NS and the Lease, if `in` created them), its status fields removed from the
# ComputeDomains, the CRDs as saved (only if step 6 ran), NVIDIA's controller at its recorded
# replicas, the record removed; one line says so. `out` reads the record, so it restores what `in`
# changed whatever the method, except the CRDs of a completed swap: they stay (NVIDIA's
# controller ignores our optional status fields; Helm never touches CRDs).
# --dry-run runs the preflight except the probe pod (it only dry-runs it server-side) and prints
# to stdout every step it would take, with the exact commands and the objects ours consists of;
# it changes nothing (reads, `kubectl auth can-i` and server-side dry runs only).
#
# Environment: IMAGE (our controller image, required by `in`), NVIDIA_DEPLOYMENT (NVIDIA's
# controller Deployment; default: whichever of dra-driver-nvidia-gpu-controller (fresh install)
# and nvidia-dra-driver-gpu-controller (upgraded, nameOverride=nvidia-dra-driver-gpu) exists),
# NS (NVIDIA's driver namespace, where that Deployment is; default: the one namespace that has
# it: dra-driver-nvidia-gpu for a fresh install as NVIDIA documents it, nvidia-dra-driver-gpu for
# an upgraded one), OWN_NS (default computedomain-system),
# RELEASE (default computedomain), WAIT_NAMESPACES (where step 7 waits for ComputeDomains;
# default: every namespace that has one), TIMEOUT (each wait, default 180s; Ns, Nm or Nh),
# PROBE_NODE (the node the probe pod runs on; default: the scheduler's choice), PROBE_PULL_POLICY
# (default Always: the registry is asked, not a node's cache), KUBECTL and HELM (default: from
# PATH), KUBECONFIG.
set -euo pipefail
cd "$(dirname "$0")/.."

usage='usage: IMAGE=<image:tag> hack/swap.sh in [helm|kustomize|helm-beside] [--dry-run] | hack/swap.sh out [--dry-run] | hack/swap.sh --help'
NS=${NS:-}
OWN_NS=${OWN_NS:-computedomain-system}
RELEASE=${RELEASE:-computedomain}
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
TIMEOUT=${TIMEOUT:-180s}
PROBE_NODE=${PROBE_NODE:-}
PROBE_PULL_POLICY=${PROBE_PULL_POLICY:-Always}
CHART=manifests/helm/computedomain-controller
NVIDIA_DEPLOYMENTS="dra-driver-nvidia-gpu-controller nvidia-dra-driver-gpu-controller"
OURS=computedomain-controller # our Deployment, in every method
OUR_PODS=app.kubernetes.io/name=computedomain-controller
PROBE_PODS=app.kubernetes.io/name=computedomain-swap-probe
# Where our controller's leader says it stands by: an Event on this CRD (in `default`, as every
# Event about a cluster-scoped object), its reportingInstance "<REPORTER>-<pod name>".
CD_CRD=computedomains.resource.nvidia.com
REPORTER=computedomain-controller
# The record on NVIDIA's controller Deployment (`kubectl -n $NS describe deployment ...`).
RECORD=computedomain.dev/swap
RECORD_KEYS="replicas method namespace release lease created-namespace"

say() { printf 'swap.sh: %s\n' "$*" >&2; }
reported=false
fail() {
  say "$*"
  reported=true
  exit 1
}
k() { "$KUBECTL" "$@"; }
# Our additive status fields (docs/contract.md), as a merge patch that removes them.
OUR_STATUS_FIELDS_REMOVED='{"status":{"conditions":null,"observedGeneration":null,"nodeCount":null,"readyNodeCount":null,"cliqueCount":null}}'

action=${1:-}
[ "$#" -eq 0 ] || shift
method=""
dry_run=false
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=true ;;
    -*) fail "unknown option '$arg'; $usage" ;;
    *)
      [ -z "$method" ] || fail "$usage"
      method=$arg
      ;;
  esac
done

# -- what changes the cluster: run, or in a dry run printed --------------------------------------

# The plan goes to stdout (fd 3, so that a command's own output sent to /dev/null does not take
# it along); everything else the script says goes to stderr.
exec 3>&1
plan() { [ "$dry_run" = false ] || printf '%s\n' "$@" >&3; }
# A step's line: said once done, or in a dry run printed as the heading of what follows.
heading() { plan "" "# $*"; }
did() { [ "$dry_run" = true ] || say "$@"; }
# A kubectl or helm command that writes (or waits on a write): run, or printed as a shell line.
act() {
  local tool=$1
  shift
  if [ "$dry_run" = true ]; then
    local line
    line=$(printf '%q ' "$tool" "$@")
    plan "${line% }"
    return 0
  fi
  case "$tool" in
    kubectl) "$KUBECTL" "$@" ;;
    helm) "$HELM" "$@" ;;
  esac
}

# TIMEOUT as seconds, for the waits the script makes itself.
timeout_seconds() {
  [[ $TIMEOUT =~ ^([0-9]+)(s|m|h)?$ ]] ||
    fail "preflight: TIMEOUT=$TIMEOUT is not a duration like 180s, 3m or 1h"
  local n=${BASH_REMATCH[1]}
  case "${BASH_REMATCH[2]}" in
    m) n=$((n * 60)) ;;
    h) n=$((n * 3600)) ;;
  esac
  timeout_s=$n
}

# NVIDIA's controller Deployment: named after the chart or its nameOverride, never the release
# (docs/contract.md §19); without NS, looked for in every namespace.
find_nvidia_deployment() { # sets nvidia (and NS)
  if [ -z "$NS" ]; then
    local wanted=${NVIDIA_DEPLOYMENT:-$NVIDIA_DEPLOYMENTS} found
    found=$(k get deployments --all-namespaces \
      -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' |
      awk -v wanted=" $wanted " 'index(wanted, " " $2 " ") { print $1 "/" $2 }')
    case "$(grep -c . <<<"$found")" in
      1)
        NS=${found%%/*} nvidia=${found#*/}
        return
        ;;
      0) fail "no Deployment named ${wanted// / or } in any namespace: is NVIDIA's chart installed? (set NS, or NVIDIA_DEPLOYMENT)" ;;
      *) fail "NVIDIA's controller Deployment is in more than one place (${found//$'\n'/ }): set NS" ;;
    esac
  fi
  if [ -n "${NVIDIA_DEPLOYMENT:-}" ]; then
    k -n "$NS" get deployment "$NVIDIA_DEPLOYMENT" -o name >/dev/null ||
      fail "NVIDIA_DEPLOYMENT=$NVIDIA_DEPLOYMENT: no such Deployment in namespace $NS"
    nvidia=$NVIDIA_DEPLOYMENT
    return
  fi
  local name found=()
  for name in $NVIDIA_DEPLOYMENTS; do
    if k -n "$NS" get deployment "$name" -o name >/dev/null 2>&1; then
      found+=("$name")
    fi
  done
  if [ "${#found[@]}" -ne 1 ]; then
    fail "expected one of NVIDIA's controller Deployments ($NVIDIA_DEPLOYMENTS) in namespace $NS, found ${#found[@]}; set NS, or NVIDIA_DEPLOYMENT"
  fi
  nvidia=${found[0]}
}

# Its pods, by the Deployment's own selector: v0.4.1's chart dropped the fixed label v0.4.0
# put on them, and the selector label's key follows the chart name or nameOverride.
pods_of() {
  local selector
  # shellcheck disable=SC2016 # a Go template, not shell
  selector=$(k -n "$NS" get deployment "$1" \
    -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}')
  echo "${selector%,}"
}

# Names of the pods in namespace $1 matching selector $2 that run (phase Running, not being
# deleted) and, with $3 = ready, are Ready: one a line.
running_pods() {
  local ready_only=${3:-}
  k -n "$1" get pods -l "$2" -o go-template='{{range .items}}{{if and (eq .status.phase "Running") (not .metadata.deletionTimestamp)}}{{.metadata.name}}{{range .status.conditions}}{{if eq .type "Ready"}} {{.status}}{{end}}{{end}}{{"\n"}}{{end}}{{end}}' |
    awk -v ready="$ready_only" '!ready || $2 == "True" { print $1 }'
}

nvidia_field() { k -n "$NS" get deployment "$nvidia" -o go-template="$1"; }
nvidia_env() { # the value of NVIDIA's controller container's environment variable $1
  nvidia_field "{{range (index .spec.template.spec.containers 0).env}}{{if eq .name \"$1\"}}{{.value}}{{end}}{{end}}"
}
annotation() { k -n "$NS" get deployment "$nvidia" -o jsonpath="{.metadata.annotations.${1//./\\.}}"; }
recorded() { annotation "$RECORD-$1"; }

# How NVIDIA's release would be upgraded, for the last lines (Helm's own annotations, else the
# chart's instance label).
nvidia_release() {
  local name
  name=$(annotation meta.helm.sh/release-name)
  [ -n "$name" ] || name=$(k -n "$NS" get deployment "$nvidia" -o jsonpath='{.metadata.labels.app\.kubernetes\.io/instance}')
  [ -n "$name" ] || name="<NVIDIA's release>"
  echo "$name"
}

# -- preflight (reads only, and the probe pod) ---------------------------------------------------

# A well-formed reference with a tag (and optionally a digest), as a registry resolves it.
check_image() {
  [ -n "${IMAGE:-}" ] ||
    fail "preflight: IMAGE is not set: give our controller image, e.g. IMAGE=ghcr.io/acme/computedomain-controller:0.1.0 (the chart's default names no registry)"
  local component='[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*'
  local domain='[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*(:[0-9]+)?'
  local re="^(($domain)/)?$component(/$component)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[0-9a-f]{64})?\$"
  [[ $IMAGE =~ $re ]] ||
    fail "preflight: IMAGE=$IMAGE is not an image reference with a tag ([registry/]repository:tag[@sha256:digest], lower-case repository)"
  local name=${IMAGE%@*}
  image_digest=${IMAGE#"$name"}
  image_repository=${name%:*}
  image_tag=${name##*:}
}

# The cluster against the chart's kubeVersion (a lower bound, ">=X.Y.Z-0").
check_cluster_version() {
  local want have
  want=$(sed -n 's/^kubeVersion: *"*>= *v*\([0-9][0-9.]*\)[^"]*"*.*$/\1/p' "$CHART/Chart.yaml")
  [ -n "$want" ] || fail "preflight: cannot read the lower bound of kubeVersion in $CHART/Chart.yaml"
  local version
  if ! version=$(k get --raw /version 2>&1); then
    fail "preflight: the cluster does not answer: kubectl get --raw /version: $(tail -n 1 <<<"$version")"
  fi
  have=$(sed -n 's/.*"gitVersion": *"v*\([0-9][0-9.]*\).*/\1/p' <<<"$version")
  [ -n "$have" ] || fail "preflight: cannot read the cluster's version from kubectl get --raw /version"
  local -a w h
  IFS=. read -ra w <<<"$want"
  IFS=. read -ra h <<<"$have"
  local i
  for i in 0 1 2; do
    if [ "${h[i]:-0}" -gt "${w[i]:-0}" ]; then return; fi
    if [ "${h[i]:-0}" -lt "${w[i]:-0}" ]; then
      fail "preflight: the cluster runs Kubernetes $have; our chart needs >= $want (kubeVersion in $CHART/Chart.yaml)"
    fi
  done
}

# Every kind of request the swap (and its roll-back) makes, asked of the apiserver.
check_rbac() {
  local denied=() check verb resource ns
  local checks=(
    "patch deployments $NS" "patch deployments/scale $NS" "list pods $NS"
    "get customresourcedefinitions -" "patch customresourcedefinitions -"
    "create customresourcedefinitions -" "update customresourcedefinitions -"
    "create clusterroles -" "delete clusterroles -" "create clusterrolebindings -" "delete clusterrolebindings -"
    "list computedomains -" "patch computedomains/status -" "list events default"
    "create pods $probe_ns" "get pods $probe_ns" "delete pods $probe_ns"
  )
  for ns in $(printf '%s\n' "$ours_ns" "$NS" | sort -u); do
    checks+=("create roles $ns" "delete roles $ns" "create rolebindings $ns" "delete rolebindings $ns")
  done
  checks+=(
    "create deployments $ours_ns" "delete deployments $ours_ns" "patch deployments/scale $ours_ns"
    "create serviceaccounts $ours_ns" "delete serviceaccounts $ours_ns"
    "create services $ours_ns" "delete services $ours_ns"
    "create poddisruptionbudgets $ours_ns" "delete poddisruptionbudgets $ours_ns"
    "list leases $ours_ns" "delete leases $ours_ns"
  )
  case "$method" in
    helm | helm-beside) checks+=("create secrets $ours_ns" "delete secrets $ours_ns") ;;
  esac
  [ "$method" != helm-beside ] || checks+=("create namespaces -" "delete namespaces -")
  # A CRD of ours that NVIDIA's install lacks is created at step 6, and deleted by a roll-back.
  local name
  for name in $(crd_names); do
    if ! k get crd "$name" -o name >/dev/null 2>&1; then
      checks+=("delete customresourcedefinitions -")
      break
    fi
  done
  for check in "${checks[@]}"; do
    read -r verb resource ns <<<"$check"
    local sub=() args=("$verb" "${resource%%/*}")
    [ "$resource" = "${resource%/*}" ] || sub=(--subresource "${resource#*/}")
    if [ "$ns" = - ]; then args+=(--all-namespaces); else args+=(-n "$ns"); fi
    if ! k auth can-i "${args[@]}" "${sub[@]}" >/dev/null 2>&1; then
      if [ "$ns" = - ]; then denied+=("$verb $resource"); else denied+=("$verb $resource in $ns"); fi
    fi
  done
  if [ "${#denied[@]}" -gt 0 ]; then
    local list
    list=$(printf '%s, ' "${denied[@]}")
    fail "preflight: not allowed to: ${list%, } (kubectl auth can-i)"
  fi
}

# The probe pod: our image with --version, once, nowhere near anything else.
probe_manifest() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $probe_pod
  namespace: $probe_ns
  labels:
    ${PROBE_PODS%%=*}: ${PROBE_PODS#*=}
    app.kubernetes.io/part-of: computedomain
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  automountServiceAccountToken: false
  enableServiceLinks: false${PROBE_NODE:+
  nodeName: $PROBE_NODE}
  securityContext:
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: probe
    image: "$IMAGE"
    imagePullPolicy: $PROBE_PULL_POLICY
    args: ["--version"]
    resources:
      requests: {cpu: 10m, memory: 64Mi}
      limits: {memory: 256Mi}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
EOF
}

# The probe pod's phase, node, and its container's waiting or terminated reason and message.
PROBE_STATE='{{.status.phase}}{{"\x1f"}}{{with .spec.nodeName}}{{.}}{{end}}{{"\x1f"}}{{range .status.containerStatuses}}{{with .state.waiting}}{{.reason}}{{"\x1f"}}{{with .message}}{{.}}{{end}}{{end}}{{with .state.terminated}}{{.reason}}{{"\x1f"}}exit code {{.exitCode}}{{with .message}}: {{.}}{{end}}{{end}}{{end}}'
# What the kubelet says when it cannot get an image.
PULL_FAILURES=" ErrImagePull ImagePullBackOff InvalidImageName ErrImageNeverPull ImageInspectError RegistryUnavailable SignatureValidationFailed "
# ... and when it has the image but cannot start it.
START_FAILURES=" CreateContainerError CreateContainerConfigError RunContainerError StartError "

# Our image pulled and run on a node: the probe pod made, waited for, deleted whatever happened.
probe_image() {
  if [ "$dry_run" = true ]; then
    probe_manifest | k create --dry-run=server -f - >/dev/null
    return
  fi
  probe_manifest | k create -f - >/dev/null
  probe_created=true
  local deadline=$((SECONDS + timeout_s)) state phase node reason message verdict=""
  while :; do
    # Fields apart by a unit separator (a tab is white space to read: empty fields would vanish).
    state=$(k -n "$probe_ns" get pod "$probe_pod" -o go-template="$PROBE_STATE")
    state=${state//$'\n'/ }
    IFS=$'\x1f' read -r phase node reason message <<<"$state"
    message=${message% }
    if [[ $PULL_FAILURES == *" $reason "* ]]; then
      verdict="preflight: image $IMAGE cannot be pulled on node $node: $reason: ${message:-no message}"
    elif [[ $START_FAILURES == *" $reason "* ]]; then
      verdict="preflight: image $IMAGE was pulled on node $node but does not start: $reason: ${message:-no message}"
    elif [ "$phase" = Failed ]; then
      verdict="preflight: image $IMAGE runs on node $node, but its --version failed: ${reason:-Failed}: ${message:-no message}"
    elif [ "$phase" = Running ] || [ "$phase" = Succeeded ]; then
      break
    elif [ "$SECONDS" -ge "$deadline" ]; then
      local why=${reason:+$reason${message:+: $message}}
      [ -n "$why" ] || why=$(k -n "$probe_ns" get pod "$probe_pod" -o go-template='{{range .status.conditions}}{{if eq .type "PodScheduled"}}{{with .reason}}{{.}}{{end}}{{with .message}}: {{.}}{{end}}{{end}}{{end}}')
      verdict="preflight: the probe pod $probe_ns/$probe_pod of image $IMAGE did not run within $TIMEOUT (${phase:-Pending}${node:+ on node $node}${why:+, $why})"
    fi
    [ -z "$verdict" ] || break
    sleep 1
  done
  delete_probe
  [ -z "$verdict" ] || fail "$verdict"
  probe_ran="$phase on node $node"
}

delete_probe() {
  if [ "$probe_created" = true ]; then
    k -n "$probe_ns" delete pod "$probe_pod" --ignore-not-found --wait=false >/dev/null
    probe_created=false
  fi
}

# -- our install --------------------------------------------------------------------------------

helm_args() { # $1: replicas ("" = the chart's)
  # NVIDIA's key image.* is the daemon image (IMAGE_NAME), exactly what NVIDIA's pod runs: a
  # digest stays in the repository, a missing tag is latest (the chart's "" would mean v0.4.0).
  local daemon_repository=$daemon_image daemon_tag="" last=${daemon_image##*/}
  if [[ $daemon_image != *@* ]]; then
    daemon_tag=latest
    if [[ $last == *:* ]]; then daemon_tag=${last##*:} daemon_repository=${daemon_image%:*}; fi
  fi
  local args=(upgrade --install "$RELEASE" "$CHART" --namespace "$ours_ns" --skip-crds
    --set-string "controllerImage.repository=$image_repository"
    --set-string "controllerImage.tag=$image_tag$image_digest"
    --set-string "image.repository=$daemon_repository" --set-string "image.tag=$daemon_tag")
  case "$method" in
    helm) args+=(-f manifests/helm/values/nvidia-driver-namespace.yaml
      --set-string "controller.leaderElection.leaseLockName=$lease") ;;
    helm-beside) args+=(-f manifests/helm/values/beside-nvidia.yaml --set-string "driverNamespace=$NS") ;;
  esac
  [ -z "$1" ] || args+=(--set "controller.replicas=$1")
  printf '%s\n' "${args[@]}"
}

# manifests/nvidia in namespace $ours_ns (a copy of its kustomization with that namespace, so
# its binding-subject replacements follow), with our image, NVIDIA's daemon image and Lease name,
# rendered into $workdir/ours.yaml. For `out` (no image known) only the namespace: enough to name
# what to delete.
render_kustomize() {
  local manifests
  mkdir -p "$workdir/nvidia"
  manifests=$(realpath --relative-to="$workdir/nvidia" manifests)
  sed -e "s|^namespace: .*|namespace: $ours_ns|" -e "s|^- \.\./|- $manifests/|" \
    manifests/nvidia/kustomization.yaml >"$workdir/nvidia/kustomization.yaml"
  {
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- nvidia\n'
    if [ -n "${image_repository:-}" ]; then
      printf 'images:\n- name: computedomain-controller\n  newName: "%s"\n  newTag: "%s"\n' "$image_repository" "$image_tag"
      [ -z "$image_digest" ] || printf '  digest: "%s"\n' "${image_digest#@}"
      printf 'patches:\n- patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: %s}\n    spec:\n' "$OURS"
      printf '      template:\n        spec:\n          containers:\n          - name: controller\n            env:\n'
      printf '            - {name: IMAGE_NAME, value: "%s"}\n' "$daemon_image"
      printf '            - {name: LEADER_ELECTION_LEASE_LOCK_NAME, value: "%s"}\n' "$lease"
    fi
  } >"$workdir/kustomization.yaml" && k kustomize "$workdir" >"$workdir/ours.yaml"
}

# The server-side dry run of our install; its objects (kind/name) into $workdir/ours.objects.
dry_run_ours() {
  local args
  case "$method" in
    helm | helm-beside)
      mapfile -t args < <(helm_args "")
      "$HELM" "${args[@]}" --dry-run=server >"$workdir/ours.dry-run"
      # The rendered manifest: between Helm's MANIFEST: and NOTES: lines.
      sed -n '/^MANIFEST:$/,/^NOTES:$/{/^MANIFEST:$/d;/^NOTES:$/d;p}' "$workdir/ours.dry-run" >"$workdir/ours.yaml"
      ;;
    kustomize)
      render_kustomize && k apply --dry-run=server -f "$workdir/ours.yaml" >/dev/null
      ;;
  esac
  k create --dry-run=client --validate=false -o name -f "$workdir/ours.yaml" >"$workdir/ours.objects" 2>/dev/null ||
    echo "(see the command)" >"$workdir/ours.objects"
}

install_ours() {
  local args
  case "$method" in
    helm | helm-beside)
      mapfile -t args < <(helm_args "")
      act helm "${args[@]}" --wait --timeout "$TIMEOUT" >/dev/null
      ;;
    kustomize)
      if [ "$dry_run" = true ]; then
        plan "# ours.yaml: manifests/nvidia in namespace $ours_ns with image $IMAGE, IMAGE_NAME=$daemon_image, LEADER_ELECTION_LEASE_LOCK_NAME=$lease (kubectl kustomize of a copy)"
        plan "kubectl apply -f ours.yaml"
        act kubectl -n "$ours_ns" rollout status deployment/"$OURS" --timeout="$TIMEOUT"
        return
      fi
      render_kustomize && k apply -f "$workdir/ours.yaml" >/dev/null &&
        k -n "$ours_ns" rollout status deployment/"$OURS" --timeout="$TIMEOUT" >/dev/null
      ;;
  esac
}

# -- steps 3 and 5: ours stands by, then leads ---------------------------------------------------

# The pod among $2... whose Lease holder identity $1 ("<pod name>-<random>") names.
holder_pod() {
  local holder=$1 pod
  shift
  [ -n "$holder" ] || return 1
  for pod in "$@"; do
    case "$holder" in "$pod"-*)
      echo "$pod"
      return 0
      ;;
    esac
  done
  return 1
}

lease_holder() { k -n "$lease_ns" get lease "$lease" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }

# Step 3: ours runs and writes nothing while NVIDIA's controller runs, seen with kubectl alone.
wait_until_ours_stands_by() {
  if [ "$dry_run" = true ]; then
    plan "# wait (up to $TIMEOUT) until the Lease $lease_ns/$lease is held by a running pod of NVIDIA's controller ($nvidia_pods) while ours' pods are Ready,"
    plan "# or by a pod of ours that recorded the Warning ConcurrentController on CRD $CD_CRD (kubectl -n default get events --field-selector reason=ConcurrentController,involvedObject.name=$CD_CRD: reportingInstance $REPORTER-<pod>)"
    return
  fi
  local deadline=$((SECONDS + timeout_s)) holder pod note
  local -a ours nvidias
  while :; do
    holder=$(lease_holder)
    mapfile -t ours < <(running_pods "$ours_ns" "$OUR_PODS" ready)
    mapfile -t nvidias < <(running_pods "$NS" "$nvidia_pods")
    if [ "${#ours[@]}" -gt 0 ]; then
      if pod=$(holder_pod "$holder" "${nvidias[@]}"); then
        standby="ours' ${#ours[@]} pods are Ready and wait for the Lease $lease_ns/$lease, which NVIDIA's pod $pod holds"
        return
      fi
      if pod=$(holder_pod "$holder" "${ours[@]}"); then
        if [ "${#nvidias[@]}" -eq 0 ]; then
          standby="no pod of NVIDIA's controller runs; ours' pod $pod leads on the Lease $lease_ns/$lease"
          return
        fi
        note=$(k -n default get events --field-selector "reason=ConcurrentController,involvedObject.name=$CD_CRD" \
          -o jsonpath='{range .items[*]}{.reportingInstance}{"\t"}{.message}{"\n"}{end}' |
          awk -F '\t' -v who="$REPORTER-$pod" '$1 == who { print $2; exit }')
        if [ -n "$note" ]; then
          if [[ $note == *"same Lease"* ]]; then
            standby="ours' pod $pod leads on the Lease $lease_ns/$lease, on which NVIDIA's controller waits (Warning ConcurrentController on CRD $CD_CRD)"
          else
            standby="ours' pod $pod leads on the Lease $lease_ns/$lease and stands by (Warning ConcurrentController on CRD $CD_CRD)"
          fi
          return
        fi
      fi
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "ours did not stand by within $TIMEOUT: ${#ours[@]} of ours' pods Ready, the Lease $lease_ns/$lease held by '${holder}', no Warning ConcurrentController on CRD $CD_CRD from a pod of ours"
    fi
    sleep 1
  done
}

# Step 5: the Lease held by a pod of ours that runs now.
wait_until_ours_leads() {
  if [ "$dry_run" = true ]; then
    plan "# wait (up to $TIMEOUT) until the Lease $lease_ns/$lease is held by a running pod of ours ($OUR_PODS)"
    return
  fi
  local holder pid took=false
  local -a ours
  # Every change of the Lease, from its first state on, until ours holds it or TIMEOUT passes.
  exec {leases}< <(exec timeout "$TIMEOUT" "$KUBECTL" -n "$lease_ns" get leases \
    --field-selector "metadata.name=$lease" --watch -o jsonpath='{.spec.holderIdentity}{"\n"}')
  pid=$!
  while read -r -u "$leases" holder; do
    mapfile -t ours < <(running_pods "$ours_ns" "$OUR_PODS")
    if holder_pod "$holder" "${ours[@]}" >/dev/null; then
      took=true
      break
    fi
  done
  kill "$pid" 2>/dev/null || true
  exec {leases}<&-
  [ "$took" = true ] || fail "our controller did not take the Lease $lease_ns/$lease within $TIMEOUT"
}

# -- step 6: the CRDs, saved first ----------------------------------------------------------------

crd_names() { k create --dry-run=client --validate=false -o name -f crds/ | sed 's|.*/||'; }

# Each of our CRDs as it is now (or that it is missing), for restore_crds.
save_crds() {
  local name
  saved_crds=() created_crds=()
  for name in $(crd_names); do
    if k get crd "$name" -o yaml >"$workdir/crd.$name.yaml" 2>/dev/null; then
      saved_crds+=("$name")
    else
      created_crds+=("$name")
    fi
  done
}

# The CRDs back as save_crds found them: each replaced by its saved self (at its current
# resourceVersion), unless it did not change; one that did not exist deleted.
restore_crds() {
  local name now saved
  for name in "${saved_crds[@]}"; do
    now=$(k get crd "$name" -o jsonpath='{.metadata.resourceVersion}')
    saved=$(sed -n 's/^  resourceVersion: "*\([0-9]*\)"*$/\1/p' "$workdir/crd.$name.yaml" | head -n 1)
    [ "$now" != "$saved" ] || continue
    awk -v rv="$now" '!done && /^  resourceVersion: / { print "  resourceVersion: \"" rv "\""; done = 1; next } { print }' \
      "$workdir/crd.$name.yaml" | k replace -f - >/dev/null
  done
  for name in "${created_crds[@]}"; do
    k delete crd "$name" --ignore-not-found >/dev/null
  done
}

# -- step 7: every ComputeDomain reconciled -----------------------------------------------------

# Every ComputeDomain carries our Ready condition, whatever its status: only our controller
# writes conditions, and Ready=False (WaitingForWorkload for an idle one) is a truthful answer.
wait_until_reconciled() {
  local namespaces ns total ready
  namespaces=${WAIT_NAMESPACES:-$(k get computedomains --all-namespaces \
    -o jsonpath='{range .items[*]}{.metadata.namespace}{"\n"}{end}' | sort -u)}
  for ns in $namespaces; do
    [ -n "$(k -n "$ns" get computedomains -o name)" ] || continue
    act kubectl -n "$ns" wait computedomains --all --timeout="$TIMEOUT" \
      --for=jsonpath='{.status.conditions[?(@.type=="Ready")].type}'=Ready >/dev/null
  done
  [ "$dry_run" = false ] || return 0
  total=$(k get computedomains --all-namespaces -o name | wc -l)
  ready=$(k get computedomains --all-namespaces \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$' || true)
  reconciled="ComputeDomains reconciled: $total, $ready of them Ready=True (kubectl get computedomains -A says why for the others)"
}

# -- in -----------------------------------------------------------------------------------------

step=""
changed=false
rolling_back=false
probe_created=false
crds_applied=false
standby=""
reconciled=""
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$probe_created" = true ]; then
    delete_probe || say "warning: could not delete the probe pod $probe_ns/$probe_pod: delete it"
  fi
  if [ "$rc" -ne 0 ] && [ "$changed" = false ] && [ "$reported" = false ]; then
    say "${step:-preflight} failed (above); nothing was changed"
  fi
  if [ "$rc" -ne 0 ] && [ "$changed" = true ] && [ "$rolling_back" = false ]; then
    rolling_back=true
    local restored
    set +e
    (
      set -e
      restore
    ) >"$workdir.rollback.log" 2>&1
    restored=$?
    set -e
    if [ "$restored" = 0 ]; then
      say "swap-in failed at step $step; rolled back: deployment/$nvidia in $NS is back at $nvidia_replicas replicas, ours is removed"
    else
      say "swap-in failed at step $step; the roll-back failed too ($(tail -n 1 "$workdir.rollback.log")): run hack/swap.sh out"
    fi
    rm -f "$workdir.rollback.log"
  fi
  [ -z "${workdir:-}" ] || rm -rf "$workdir"
  exit "$rc"
}

swap_in() {
  method=${method:-helm}
  case "$method" in
    helm | kustomize) ;;
    helm-beside) ours_ns=$OWN_NS ;;
    *) fail "unknown method '$method' (helm, kustomize or helm-beside)" ;;
  esac
  check_image
  timeout_seconds
  check_cluster_version # first: it also shows that the cluster answers
  find_nvidia_deployment
  [ "$method" = helm-beside ] || ours_ns=$NS
  nvidia_pods=$(pods_of "$nvidia")
  if [ -n "$(recorded method)" ]; then
    fail "preflight: deployment/$nvidia in $NS records a swap already (annotations $RECORD-*): run hack/swap.sh out first"
  fi
  if k -n "$ours_ns" get deployment "$OURS" -o name >/dev/null 2>&1; then
    fail "preflight: deployment/$OURS exists in $ours_ns already: remove it, or run hack/swap.sh out"
  fi
  nvidia_replicas=$(nvidia_field '{{.spec.replicas}}')
  # NVIDIA's driver image, read from its controller: ours must pass the same one on, or the
  # daemons of new ComputeDomains would run another release than the kubelet plugin.
  daemon_image=$(nvidia_field '{{(index .spec.template.spec.containers 0).image}}')
  # The Lease: NVIDIA's controller's (its LEADER_ELECTION_LEASE_LOCK_NAME, else "<name>-controller",
  # its Deployment's name) when ours runs in its namespace; the chart's beside it.
  local nvidia_election
  nvidia_election=$(nvidia_env LEADER_ELECTION_ENABLED)
  if [ "$method" = helm-beside ]; then
    lease=$OURS lease_ns=$OWN_NS
  else
    lease=$(nvidia_env LEADER_ELECTION_LEASE_LOCK_NAME)
    lease=${lease:-$nvidia} lease_ns=$NS
  fi
  say "NVIDIA's controller: deployment/$nvidia in $NS, $nvidia_replicas replicas, pods $nvidia_pods, image $daemon_image, leader election ${nvidia_election:-false}"

  created_namespace=false
  if [ "$method" = helm-beside ] && ! k get namespace "$OWN_NS" -o name >/dev/null 2>&1; then
    created_namespace=true
  fi
  # The probe runs where ours will (and may use its namespace's pull credentials), else in NS.
  probe_ns=$ours_ns
  [ "$created_namespace" = false ] || probe_ns=$NS
  probe_pod=computedomain-swap-probe-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  check_rbac
  created_lease=$lease_ns/$lease
  if k -n "$lease_ns" get lease "$lease" -o name >/dev/null 2>&1; then
    created_lease=""
  fi
  step="preflight (server-side dry run of the CRDs)"
  k apply --server-side --force-conflicts --dry-run=server -f crds/ >/dev/null
  step="preflight (server-side dry run of scaling NVIDIA's controller)"
  k -n "$NS" scale deployment "$nvidia" --replicas=0 --dry-run=server >/dev/null
  step="preflight (server-side dry run of our install)"
  [ "$created_namespace" = false ] || k create namespace "$OWN_NS" --dry-run=server -o name >/dev/null
  dry_run_ours
  step="preflight (image probe)"
  probe_image
  step=""
  if [ "$dry_run" = true ]; then
    say "preflight passed (the probe pod only dry-run): image $IMAGE, method $method, ours in $ours_ns, Lease $lease_ns/$lease"
    say "dry run: nothing was changed; the steps \`hack/swap.sh in $method\` would take are on stdout"
    plan "# hack/swap.sh in $method: image $IMAGE; NVIDIA's controller deployment/$nvidia in $NS ($nvidia_replicas replicas, leader election ${nvidia_election:-false}); ours in $ours_ns, Lease $lease_ns/$lease"
    heading "preflight: the image probe (a pod, deleted after whatever happens)"
    plan "kubectl create -f - <<'EOF'"
    plan "$(probe_manifest)"
    plan "EOF"
    plan "# wait (up to $TIMEOUT) until it is Running or Succeeded; a pull or start failure, or --version failing, ends the preflight"
    act kubectl -n "$probe_ns" delete pod "$probe_pod" --ignore-not-found --wait=false
  else
    say "preflight passed: image $IMAGE ran ($probe_ran), method $method, ours in $ours_ns, Lease $lease_ns/$lease"
  fi

  # From here on every failure rolls back (on_exit).
  step="1 (record)"
  [ "$dry_run" = true ] || changed=true
  local record=(
    "$RECORD-replicas=$nvidia_replicas" "$RECORD-method=$method" "$RECORD-namespace=$ours_ns"
    "$RECORD-lease=$created_lease" "$RECORD-created-namespace=$created_namespace"
  )
  [ "$method" = kustomize ] || record+=("$RECORD-release=$RELEASE")
  heading "1. record NVIDIA's replicas and what in creates on deployment/$nvidia"
  act kubectl -n "$NS" annotate deployment "$nvidia" "${record[@]}" >/dev/null
  did "1. recorded on deployment/$nvidia: replicas $nvidia_replicas, method $method (annotations $RECORD-*)"

  step="2 (ours installed)"
  heading "2. ours installed at its full replicas beside NVIDIA's controller, its pods Ready"
  plan "#    objects: $(tr '\n' ' ' <"$workdir/ours.objects")"
  [ "$created_namespace" = false ] || act kubectl create namespace "$OWN_NS" >/dev/null
  install_ours
  did "2. ours installed in $ours_ns, its pods Ready"

  step="3 (ours stands by)"
  heading "3. ours stands by while NVIDIA's controller runs"
  wait_until_ours_stands_by
  did "3. ours is up, and one controller writes at a time: $standby"

  step="4 (NVIDIA's controller to 0)"
  heading "4. NVIDIA's controller scaled to 0, its pods gone: ours takes over by itself"
  act kubectl -n "$NS" scale deployment "$nvidia" --replicas=0 >/dev/null
  act kubectl -n "$NS" wait --for=delete pod -l "$nvidia_pods" --timeout="$TIMEOUT" >/dev/null
  did "4. NVIDIA's controller scaled to 0, its pods are gone"

  step="5 (ours leads)"
  heading "5. ours holds the Lease"
  wait_until_ours_leads
  did "5. ours holds the Lease $lease_ns/$lease"

  step="6 (CRDs)"
  # Our CRDs (a superset of NVIDIA's: optional status fields only). Helm never upgrades CRDs,
  # so this is always a server-side apply; --force-conflicts takes the fields over from the
  # manager that created them. Not before ours leads: a roll-back before this step leaves the
  # CRDs untouched; one after it puts the saved ones back.
  heading "6. our CRDs (each saved first with kubectl get crd -o yaml; a roll-back puts it back)"
  save_crds
  crds_applied=true
  act kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  did "6. CRDs applied"

  step="7 (every ComputeDomain reconciled)"
  heading "7. every ComputeDomain carries our Ready condition"
  wait_until_reconciled
  did "7. $reconciled"
  changed=false

  if [ "$dry_run" = true ]; then
    heading "then: set controller.replicas=0 in the values of NVIDIA's release (helm upgrade $(nvidia_release) <NVIDIA's chart> -n $NS -f <your values> --set controller.replicas=0)"
    return
  fi
  say "swapped in: our controller runs in $ours_ns; NVIDIA's is at 0 replicas (was $nvidia_replicas; hack/swap.sh out restores it)"
  say "make the swap survive the next helm upgrade of NVIDIA's release: set controller.replicas=0 in its values, e.g."
  say "  helm upgrade $(nvidia_release) <NVIDIA's chart> -n $NS -f <your values> --set controller.replicas=0"
}

# -- out ----------------------------------------------------------------------------------------

# Everything `in` changed, undone from the record (the values in this shell when rolling back).
restore() {
  # 1. Stop ours first and wait until its pods are gone: on SIGTERM it finishes in-flight work
  #    and releases its Lease, which needs its RBAC, and an uninstall removes RBAC and
  #    Deployment together. Then remove what we installed.
  heading "1. ours stopped (it releases its Lease while its RBAC exists), then removed"
  if k -n "$ours_ns" get deployment "$OURS" -o name >/dev/null 2>&1; then
    act kubectl -n "$ours_ns" scale deployment "$OURS" --replicas=0 >/dev/null
    act kubectl -n "$ours_ns" wait --for=delete pod -l "$OUR_PODS" --timeout="$TIMEOUT" >/dev/null
  fi
  case "$method" in
    helm | helm-beside)
      if "$HELM" status "$RELEASE" --namespace "$ours_ns" >/dev/null 2>&1; then
        act helm uninstall "$RELEASE" --namespace "$ours_ns" --wait --timeout "$TIMEOUT" >/dev/null
      fi
      ;;
    kustomize)
      render_kustomize
      if [ "$dry_run" = true ]; then
        plan "# ours.yaml: manifests/nvidia in namespace $ours_ns (kubectl kustomize of a copy):"
        plan "#    $(k create --dry-run=client --validate=false -o name -f "$workdir/ours.yaml" 2>/dev/null | tr '\n' ' ')"
        plan "kubectl delete -f ours.yaml --ignore-not-found --wait"
      else
        k delete -f "$workdir/ours.yaml" --ignore-not-found --wait >/dev/null
      fi
      ;;
  esac

  # 2. Our status fields off every ComputeDomain (ours wrote them; NVIDIA's controller drops
  #    them only when it next writes that status), while no controller runs: left, they would
  #    speak for ours after it is gone, and would satisfy step 7 of a later `in` before ours
  #    has passed once. NVIDIA's two fields, status.status and status.nodes, stay.
  heading "2. our status fields off every ComputeDomain (NVIDIA's status.status and status.nodes stay)"
  local cd
  for cd in $(k get computedomains --all-namespaces \
    -o jsonpath='{range .items[?(@.status.conditions)]}{.metadata.namespace}{"/"}{.metadata.name}{"\n"}{end}'); do
    act kubectl -n "${cd%%/*}" patch computedomain "${cd#*/}" --subresource=status --type=merge \
      -p "$OUR_STATUS_FIELDS_REMOVED" >/dev/null 2>&1 ||
      if k -n "${cd%%/*}" get computedomain "${cd#*/}" -o name >/dev/null 2>&1; then
        # Not a reason to stop: putting NVIDIA's controller back comes next, whatever happens.
        say "warning: could not remove our status fields from computedomain $cd; NVIDIA's controller drops them when it next writes its status"
      fi
  done

  # 3. The CRDs as they were, if this run of `in` applied ours (a completed swap keeps them).
  if [ "$crds_applied" = true ]; then
    restore_crds
  fi

  # 4. NVIDIA's controller back as it was. The finalizer, labels and children are the ones it
  #    uses itself, so it resumes where ours left off; the CRDs stay (it ignores our status fields).
  heading "3. NVIDIA's controller back at its recorded replicas"
  act kubectl -n "$NS" scale deployment "$nvidia" --replicas="$nvidia_replicas" >/dev/null
  [ "$nvidia_replicas" = 0 ] || act kubectl -n "$NS" rollout status deployment/"$nvidia" --timeout="$TIMEOUT" >/dev/null

  # 5. What `in` created beside our install, then the record.
  heading "4. what in created beside ours (Lease, namespace), then the record"
  if [ -n "$created_lease" ]; then
    act kubectl -n "${created_lease%%/*}" delete lease "${created_lease#*/}" --ignore-not-found >/dev/null
  fi
  if [ "$created_namespace" = true ]; then
    act kubectl delete namespace "$ours_ns" --ignore-not-found --wait --timeout="$TIMEOUT" >/dev/null
  fi
  local key unset=()
  for key in $RECORD_KEYS; do unset+=("$RECORD-$key-"); done
  act kubectl -n "$NS" annotate deployment "$nvidia" "${unset[@]}" >/dev/null
}

swap_out() {
  timeout_seconds
  find_nvidia_deployment
  local given=$method
  method=$(recorded method)
  [ -n "$method" ] ||
    fail "no swap recorded on deployment/$nvidia in $NS (annotations $RECORD-*): nothing to restore"
  if [ -n "$given" ] && [ "$given" != "$method" ]; then
    say "the swap was made with method $method, not $given: restoring that"
  fi
  nvidia_replicas=$(recorded replicas)
  ours_ns=$(recorded namespace)
  RELEASE=$(recorded release)
  created_lease=$(recorded lease)
  created_namespace=$(recorded created-namespace)
  if [ "$dry_run" = true ]; then
    say "dry run: nothing was changed; the steps \`hack/swap.sh out\` would take are on stdout"
    plan "# hack/swap.sh out: the swap recorded on deployment/$nvidia in $NS (method $method, ours in $ours_ns, NVIDIA's replicas $nvidia_replicas)"
  fi
  restore
  [ "$dry_run" = false ] || return 0
  say "swapped out: NVIDIA's controller runs again in $NS with $nvidia_replicas replicas; ours is removed (the CRDs stay)"
  say "if you set controller.replicas=0 in the values of NVIDIA's release, set it back to $nvidia_replicas there, e.g."
  say "  helm upgrade $(nvidia_release) <NVIDIA's chart> -n $NS -f <your values> --set controller.replicas=$nvidia_replicas"
}

case "$action" in
  in)
    workdir=$(mktemp -d)
    trap on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    swap_in
    ;;
  out)
    workdir=$(mktemp -d)
    trap 'rm -rf "$workdir"' EXIT
    swap_out
    ;;
  -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" ;;
  *) fail "$usage" ;;
esac
