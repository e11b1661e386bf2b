#!/bin/sh
# The packages' version, from git: TAG+gitN.HASH after a tag vTAG (N commits
# since it), 0.0~gitN.HASH where there is no tag (N commits in all).
# PVGPU_DEB_VERSION overrides it (the upgrade test builds a later one).
set -eu
if [ -n "${PVGPU_DEB_VERSION:-}" ]; then echo "$PVGPU_DEB_VERSION"; exit 0; fi
hash=$(git rev-parse --short=7 HEAD)
if desc=$(git describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
	tag=${desc%-*-g*}; n=${desc%-g*}; n=${n##*-}
	tag=${tag#v}
	if [ "$n" = 0 ]; then echo "$tag"; else echo "$tag+git$n.$hash"; fi
else
	echo "0.0~git$(git rev-list --count HEAD).$hash"
fi
