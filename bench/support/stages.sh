# Sourced by the GPU bench scripts (gpu_session.sh, gpu_fp8.sh, gpu_compare.sh): a call on the device runs several
# stages, each bounded on its own, so one failure or hang still leaves the others' results in the log.
# The caller sets START=$SECONDS, and BUDGET (seconds, 0: none) and BUDGET_NAME (the variable that set it) for fits.

stage() {  # stage NAME COMMAND...: run COMMAND between two log lines naming the stage, its start and its exit status
  local name=$1
  shift
  echo "=== $name start $(date +%T) ($((SECONDS - START)) s in)"
  "$@"
  echo "=== $name rc=$? end $(date +%T)"
}

fits() {  # fits SECONDS NAME: whether a stage needing that long still fits what is left of the budget (said if not)
  [ "${BUDGET:-0}" -le 0 ] || [ $((BUDGET - (SECONDS - START))) -ge "$1" ] || {
    echo "=== skipping $2: $((BUDGET - (SECONDS - START))) s left of ${BUDGET_NAME:-the budget}=$BUDGET"
    return 1
  }
}
