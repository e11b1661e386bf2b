#!/bin/sh
# scripts/cpu-seconds.sh FILE: the CPU seconds (user + system) of a
# shell's finished children, from what the shell's `times` wrote to FILE
# (its second line: "XmY.YYYs XmY.YYYs").  `times` must run in the shell
# itself, not in a pipeline, whose subshell has no children of its own.
awk 'NR == 2 {
	t = 0
	for (i = 1; i <= 2; i++) {
		split($i, p, "m")
		sub("s", "", p[2])
		t += p[1] * 60 + p[2]
	}
	printf "%d\n", t + 0.5
}' "$1"
