#!/usr/bin/env bash
# Run make test's passes one after another, each to the end whatever the
# ones before it did, and then say in one summary what failed.
#
#   tests/keep-going.sh LOGDIR NAME 'COMMAND' [NAME 'COMMAND' ...]
#
# Each COMMAND runs in bash; its output goes to the terminal and to
# LOGDIR/NAME.log.  A pass that fails does not keep the later ones from
# running: a failure in the main pytest pass still lets the sanitizer pass
# run and the background suites be waited for, so one run shows
# everything that is wrong.  The summary lists, per failed pass, the
# FAILED and ERROR lines pytest printed (or the log's last lines when it
# printed none).  Exit 0 when every pass succeeded, else 1.
set -u

if [ $# -lt 3 ] || [ $(( ($# - 1) % 2 )) != 0 ]; then
    echo "usage: $0 LOGDIR NAME 'COMMAND' [NAME 'COMMAND' ...]" >&2
    exit 2
fi
logs=$1
shift
mkdir -p "$logs" || exit 1

# CPU seconds of this shell's finished children so far: `times` in this
# shell (not in $(...), whose subshell has no children of its own).
cpu_seconds="$(dirname "$0")/../scripts/cpu-seconds.sh"

failed=()
took=()
while [ $# -gt 0 ]; do
    name=$1 cmd=$2
    shift 2
    echo "==== make test: $name: $cmd"
    start=$SECONDS
    times >"$logs/.times"
    cpu0=$("$cpu_seconds" "$logs/.times")
    bash -c "$cmd" 2>&1 | tee "$logs/$name.log"
    rc=${PIPESTATUS[0]}
    times >"$logs/.times"
    took+=("$name $((SECONDS - start))s/$(( $("$cpu_seconds" "$logs/.times") - cpu0 ))cpu")
    if [ "$rc" != 0 ]; then
        failed+=("$name")
        echo "==== make test: $name failed (exit $rc), going on"
    fi
done

# What each pass took, in seconds and CPU seconds, so a run that grew slow
# says where (a background suite's own figures are in its section).
echo "==== make test: time per pass: $(IFS=,; echo "${took[*]}" | sed 's/,/, /g')"
if [ ${#failed[@]} = 0 ]; then
    echo "==== make test: every pass succeeded"
    exit 0
fi
echo
echo "==== make test: ${#failed[@]} pass(es) failed: ${failed[*]}"
for name in "${failed[@]}"; do
    echo "---- $name (log: $logs/$name.log)"
    # pytest's short summary: one line per failed or erroring test.
    if ! grep -E '^(FAILED|ERROR) ' "$logs/$name.log"; then
        tail -n 15 "$logs/$name.log"
    fi
done
exit 1
