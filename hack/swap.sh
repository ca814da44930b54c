#!/usr/bin/env bash
# The swap of docs/operations.md as a script: NVIDIA's ComputeDomain controller out, ours in
# (`in`), and back (`out`), in an install of NVIDIA's chart `dra-driver-nvidia-gpu`. NVIDIA's
# kubelet plugin and the running IMEX daemons are never touched. The integration test
# tests/integration/test_swap.py runs exactly this script.
#
#   IMAGE=<registry>/computedomain-controller:<tag> hack/swap.sh in [helm|kustomize|helm-beside]
#   hack/swap.sh out
#
#   helm         our chart into NVIDIA's driver namespace, reusing its daemon ServiceAccount and
#                its controller's Lease name (manifests/helm/values/nvidia-driver-namespace.yaml)
#   kustomize    the same with manifests/nvidia, rendered into NS
#   helm-beside  our chart in its own namespace ($OWN_NS), managing NVIDIA's driver namespace
#                (manifests/helm/values/beside-nvidia.yaml)
#
# `in` changes nothing until its preflight passed: IMAGE given and a well-formed image reference
# with a tag, the cluster's version within our chart's kubeVersion, `kubectl auth can-i` for every
# kind of write the swap makes, server-side dry runs of the CRDs and NVIDIA's scale, and a dry run
# of our install (kustomize: `kubectl apply --dry-run=server`; helm: `--dry-run=server`, which
# renders against the cluster but does not send the objects: an admission refusal of one of
# ours shows at step 3, and the roll-back puts NVIDIA back). Then:
#   1. record: NVIDIA's controller replicas and what `in` creates, as annotations
#      computedomain.dev/swap-* on NVIDIA's controller Deployment;
#   2. our CRDs (server-side apply);
#   3. our controller installed with 0 replicas;
#   4. NVIDIA's controller scaled to 0, its pods gone;
#   5. ours scaled up;
#   6. ours holds the Lease and has reconciled every ComputeDomain (its Ready condition, True or
#      not: an idle ComputeDomain is Ready=False WaitingForWorkload, which is the truth).
# A failure (or Ctrl-C) after step 1 runs `out`: ours removed, its status fields removed from
# the ComputeDomains, NVIDIA's controller back at its recorded replicas, the record removed; one
# line says so. `out` reads the record, so it restores
# exactly what `in` changed whatever the method, except the CRDs: they stay (NVIDIA's controller
# ignores our optional status fields; Helm never touches CRDs).
#
# Environment: IMAGE (our controller image, required by `in`), NVIDIA_DEPLOYMENT (NVIDIA's
# controller Deployment; default: whichever of dra-driver-nvidia-gpu-controller (fresh install)
# and nvidia-dra-driver-gpu-controller (upgraded, nameOverride=nvidia-dra-driver-gpu) exists),
# NS (NVIDIA's driver namespace, where that Deployment is; default: the one namespace that has
# it: dra-driver-nvidia-gpu for a fresh install as NVIDIA documents it, nvidia-dra-driver-gpu for
# an upgraded one), OWN_NS (default computedomain-system),
# RELEASE (default computedomain), WAIT_NAMESPACES (where step 6 waits for ComputeDomains;
# default: every namespace that has one), TIMEOUT (each wait, default 180s), KUBECTL and HELM
# (default: from PATH), KUBECONFIG.
set -euo pipefail
cd "$(dirname "$0")/.."

usage='usage: IMAGE=<image:tag> hack/swap.sh in [helm|kustomize|helm-beside] | hack/swap.sh out | hack/swap.sh --help'
action=${1:-}
method=${2:-}
NS=${NS:-}
OWN_NS=${OWN_NS:-computedomain-system}
RELEASE=${RELEASE:-computedomain}
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
TIMEOUT=${TIMEOUT:-180s}
CHART=manifests/helm/computedomain-controller
NVIDIA_DEPLOYMENTS="dra-driver-nvidia-gpu-controller nvidia-dra-driver-gpu-controller"
OURS=computedomain-controller # our Deployment, in every method
OUR_PODS=app.kubernetes.io/name=computedomain-controller
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

nvidia_field() { k -n "$NS" get deployment "$nvidia" -o go-template="$1"; }
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

# -- preflight (reads only) ----------------------------------------------------------------------

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

# Every kind of write the swap (and its roll-back) makes, asked of the apiserver.
check_rbac() {
  local denied=() check verb resource ns
  local checks=(
    "patch deployments $NS" "patch deployments/scale $NS" "list pods $NS"
    "patch customresourcedefinitions -" "create customresourcedefinitions -"
    "create clusterroles -" "delete clusterroles -" "create clusterrolebindings -" "delete clusterrolebindings -"
    "list computedomains -" "patch computedomains/status -"
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
# its binding-subject replacements follow), with our image, NVIDIA's daemon image and Lease name
# and (optionally) the replicas, rendered into $workdir/ours.yaml. For `out` (no image known)
# only the namespace: enough to name what to delete.
render_kustomize() { # $1: replicas ("" = the manifest's)
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
      [ -z "$1" ] || printf '      replicas: %s\n' "$1"
      printf '      template:\n        spec:\n          containers:\n          - name: controller\n            env:\n'
      printf '            - {name: IMAGE_NAME, value: "%s"}\n' "$daemon_image"
      printf '            - {name: LEADER_ELECTION_LEASE_LOCK_NAME, value: "%s"}\n' "$lease"
    fi
  } >"$workdir/kustomization.yaml" && k kustomize "$workdir" >"$workdir/ours.yaml"
}

install_ours() { # $1: replicas ("" = the chart's or manifest's); $2: --dry-run=server or ""
  local args
  case "$method" in
    helm | helm-beside)
      mapfile -t args < <(helm_args "$1")
      if [ -n "$2" ]; then
        "$HELM" "${args[@]}" "$2" >/dev/null
      else
        "$HELM" "${args[@]}" --wait --timeout "$TIMEOUT" >/dev/null
      fi
      ;;
    kustomize)
      render_kustomize "$1" && k apply ${2:+"$2"} -f "$workdir/ours.yaml" >/dev/null &&
        if [ -z "$2" ]; then k -n "$ours_ns" rollout status deployment/"$OURS" --timeout="$TIMEOUT" >/dev/null; fi
      ;;
  esac
}

# -- step 6: ours leads and reconciles ------------------------------------------------------------

# The Lease's holder identity is "<pod name>-<random>": held by a pod of ours that runs now.
held_by_ours() {
  local pod
  [ -n "$1" ] || return 1
  for pod in $(k -n "$ours_ns" get pods -l "$OUR_PODS" -o jsonpath='{.items[*].metadata.name}'); do
    case "$1" in "$pod"-*) return 0 ;; esac
  done
  return 1
}

wait_until_ours_leads() {
  local holder pid took=false
  # Every change of the Lease, from its first state on, until ours holds it or TIMEOUT passes.
  exec {leases}< <(exec timeout "$TIMEOUT" "$KUBECTL" -n "$lease_ns" get leases \
    --field-selector "metadata.name=$lease" --watch -o jsonpath='{.spec.holderIdentity}{"\n"}')
  pid=$!
  while read -r -u "$leases" holder; do
    if held_by_ours "$holder"; then
      took=true
      break
    fi
  done
  kill "$pid" 2>/dev/null || true
  exec {leases}<&-
  [ "$took" = true ] || fail "our controller did not take the Lease $lease_ns/$lease within $TIMEOUT"
}

# Every ComputeDomain carries our Ready condition, whatever its status: only our controller
# writes conditions, and Ready=False (WaitingForWorkload for an idle one) is a truthful answer.
wait_until_reconciled() {
  local namespaces ns total ready
  namespaces=${WAIT_NAMESPACES:-$(k get computedomains --all-namespaces \
    -o jsonpath='{range .items[*]}{.metadata.namespace}{"\n"}{end}' | sort -u)}
  for ns in $namespaces; do
    [ -n "$(k -n "$ns" get computedomains -o name)" ] || continue
    k -n "$ns" wait computedomains --all --timeout="$TIMEOUT" \
      --for=jsonpath='{.status.conditions[?(@.type=="Ready")].type}'=Ready >/dev/null
  done
  total=$(k get computedomains --all-namespaces -o name | wc -l)
  ready=$(k get computedomains --all-namespaces \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$' || true)
  reconciled="ComputeDomains reconciled: $total, $ready of them Ready=True (kubectl get computedomains -A says why for the others)"
}

# -- in -----------------------------------------------------------------------------------------

step=""
changed=false
rolling_back=false
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
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
  if [ "$method" = helm-beside ]; then
    lease=$OURS lease_ns=$OWN_NS
  else
    lease=$(nvidia_field '{{range (index .spec.template.spec.containers 0).env}}{{if eq .name "LEADER_ELECTION_LEASE_LOCK_NAME"}}{{.value}}{{end}}{{end}}')
    lease=${lease:-$nvidia} lease_ns=$NS
  fi
  say "NVIDIA's controller: deployment/$nvidia in $NS, $nvidia_replicas replicas, pods $nvidia_pods, image $daemon_image"

  check_rbac
  created_namespace=false
  if [ "$method" = helm-beside ] && ! k get namespace "$OWN_NS" -o name >/dev/null 2>&1; then
    created_namespace=true
  fi
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
  install_ours 0 --dry-run=server
  say "preflight passed: image $IMAGE, method $method, ours in $ours_ns, Lease $lease_ns/$lease"

  # From here on every failure rolls back (on_exit).
  step="1 (record)"
  changed=true
  local record=(
    "$RECORD-replicas=$nvidia_replicas" "$RECORD-method=$method" "$RECORD-namespace=$ours_ns"
    "$RECORD-lease=$created_lease" "$RECORD-created-namespace=$created_namespace"
  )
  [ "$method" = kustomize ] || record+=("$RECORD-release=$RELEASE")
  k -n "$NS" annotate deployment "$nvidia" "${record[@]}" >/dev/null
  say "1. recorded on deployment/$nvidia: replicas $nvidia_replicas, method $method (annotations $RECORD-*)"

  step="2 (CRDs)"
  # Our CRDs (a superset of NVIDIA's: optional status fields only). Helm never upgrades CRDs,
  # so this is always a server-side apply; --force-conflicts takes the fields over from the
  # manager that created them.
  k apply --server-side --force-conflicts -f crds/ >/dev/null
  say "2. CRDs applied"

  step="3 (install ours at 0 replicas)"
  [ "$created_namespace" = false ] || k create namespace "$OWN_NS" >/dev/null
  install_ours 0 ""
  say "3. ours installed in $ours_ns with 0 replicas"

  step="4 (NVIDIA's controller to 0)"
  # Two controllers would both write status and finalizers: NVIDIA's pods must be gone first.
  k -n "$NS" scale deployment "$nvidia" --replicas=0 >/dev/null
  k -n "$NS" wait --for=delete pod -l "$nvidia_pods" --timeout="$TIMEOUT" >/dev/null
  say "4. NVIDIA's controller scaled to 0, its pods are gone"

  step="5 (ours up)"
  install_ours "" ""
  say "5. ours scaled up"

  step="6 (ours leads and reconciles)"
  wait_until_ours_leads
  wait_until_reconciled
  say "6. ours holds the Lease $lease_ns/$lease; $reconciled"
  changed=false

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
  if k -n "$ours_ns" get deployment "$OURS" -o name >/dev/null 2>&1; then
    k -n "$ours_ns" scale deployment "$OURS" --replicas=0 >/dev/null
    k -n "$ours_ns" wait --for=delete pod -l "$OUR_PODS" --timeout="$TIMEOUT" >/dev/null
  fi
  case "$method" in
    helm | helm-beside)
      if "$HELM" status "$RELEASE" --namespace "$ours_ns" >/dev/null 2>&1; then
        "$HELM" uninstall "$RELEASE" --namespace "$ours_ns" --wait --timeout "$TIMEOUT" >/dev/null
      fi
      ;;
    kustomize) render_kustomize "" && k delete -f "$workdir/ours.yaml" --ignore-not-found --wait >/dev/null ;;
  esac

  # 2. Our status fields off every ComputeDomain (ours wrote them; NVIDIA's controller drops
  #    them only when it next writes that status), while no controller runs: left, they would
  #    speak for ours after it is gone, and would satisfy step 6 of a later `in` before ours
  #    has passed once. NVIDIA's two fields, status.status and status.nodes, stay.
  local cd
  for cd in $(k get computedomains --all-namespaces \
    -o jsonpath='{range .items[?(@.status.conditions)]}{.metadata.namespace}{"/"}{.metadata.name}{"\n"}{end}'); do
    k -n "${cd%%/*}" patch computedomain "${cd#*/}" --subresource=status --type=merge \
      -p "$OUR_STATUS_FIELDS_REMOVED" >/dev/null 2>&1 ||
      if k -n "${cd%%/*}" get computedomain "${cd#*/}" -o name >/dev/null 2>&1; then
        # Not a reason to stop: putting NVIDIA's controller back comes next, whatever happens.
        say "warning: could not remove our status fields from computedomain $cd; NVIDIA's controller drops them when it next writes its status"
      fi
  done

  # 3. NVIDIA's controller back as it was. The finalizer, labels and children are the ones it
  #    uses itself, so it resumes where ours left off; the CRDs stay (it ignores our status fields).
  k -n "$NS" scale deployment "$nvidia" --replicas="$nvidia_replicas" >/dev/null
  [ "$nvidia_replicas" = 0 ] || k -n "$NS" rollout status deployment/"$nvidia" --timeout="$TIMEOUT" >/dev/null

  # 4. What `in` created beside our install, then the record.
  if [ -n "$created_lease" ]; then
    k -n "${created_lease%%/*}" delete lease "${created_lease#*/}" --ignore-not-found >/dev/null
  fi
  if [ "$created_namespace" = true ]; then
    k delete namespace "$ours_ns" --ignore-not-found --wait --timeout="$TIMEOUT" >/dev/null
  fi
  local key unset=()
  for key in $RECORD_KEYS; do unset+=("$RECORD-$key-"); done
  k -n "$NS" annotate deployment "$nvidia" "${unset[@]}" >/dev/null
}

swap_out() {
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
  restore
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
