#!/bin/sh
# debian/changelog for version $1 (make deb; the file is not tracked).
set -eu
version=$1
date=$(git log -1 --format=%aD HEAD)
cat <<EOT
pvgpu ($version) unstable; urgency=medium

  * Built from git $(git rev-parse --short=12 HEAD): $(git log -1 --format=%s HEAD | cut -c1-40)

 -- pvgpu developers <pvgpu@example.org>  $date
EOT
