# Stage timing for .ci/run (sourced): `stage NAME COMMAND...` runs COMMAND (under the script's own
# `set -e`: a failing command inside it still ends CI) and keeps its seconds; when the script exits,
# however it exits, the time of each stage that ran (the one that failed marked so) and the total
# are printed, and a total over CI_BUDGET_S (3600: a CI must finish inside an hour) is named.

CI_BUDGET_S=${CI_BUDGET_S:-3600}
_ci_stage_lines=()
_ci_stage_name=""
_ci_stage_start=0

_ci_keep() {
    _ci_stage_lines+=("$(printf '%-24s %6d s%s' "$1" $((SECONDS - _ci_stage_start)) "$2")")
}

stage() {
    _ci_stage_name=$1
    _ci_stage_start=$SECONDS
    shift
    "$@"
    _ci_keep "$_ci_stage_name" ""
    _ci_stage_name=""
}

_ci_print_stages() {
    local code=$?
    if [ -n "$_ci_stage_name" ]; then
        _ci_keep "$_ci_stage_name" "  (failed: exit $code)"
    fi
    echo "CI stage times:"
    local line
    for line in "${_ci_stage_lines[@]}"; do
        echo "  $line"
    done
    printf '  %-24s %6d s\n' "total" "$SECONDS"
    if [ "$SECONDS" -gt "$CI_BUDGET_S" ]; then
        echo "  the total is over the budget of ${CI_BUDGET_S} s"
    fi
    return "$code"
}

trap _ci_print_stages EXIT
