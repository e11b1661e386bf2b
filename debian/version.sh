#!/bin/sh
# pvgpu's release version: the packages' version, and what the programs
# print (pvgpud --version; the Makefile's PVGPU_VERSION).
#
# From git: TAG+gitN.HASH after a tag vTAG (N commits since it),
# 0.0~gitN.HASH where there is no tag (N commits in all), with +dirty where
# tracked files differ from that commit.  Where the tree is not a git
# checkout (a source tarball, a copy of the working tree on another
# machine), the top entry of debian/changelog; with neither, 0.0~unknown.
# (make deb PVGPU_DEB_VERSION=V names packages otherwise: debian/deb.mk.)
set -eu
cd "$(dirname "$0")/.."
# Only this tree's own repository: a copy unpacked inside some other
# checkout must not take that one's commits.
top=$(git rev-parse --show-toplevel 2>/dev/null || true)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
	hash=$(git rev-parse --short=7 HEAD)
	if desc=$(git describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
		tag=${desc%-*-g*}; n=${desc%-g*}; n=${n##*-}
		tag=${tag#v}
		if [ "$n" = 0 ]; then v=$tag; else v="$tag+git$n.$hash"; fi
	else
		v="0.0~git$(git rev-list --count HEAD).$hash"
	fi
	if ! git diff --quiet HEAD -- 2>/dev/null; then v="$v+dirty"; fi
	echo "$v"
elif [ -r debian/changelog ]; then
	sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' debian/changelog
else
	echo "0.0~unknown"
fi
