#!/usr/bin/env bash
# Builds a local image tagged $TIDB_IMAGE from the source-built static
# tidb-server, for machines that cannot pull the published image. The image
# mirrors the published one: entrypoint a bare /tidb-server (default store
# unistore), ports 4000 and 10080.
#
# FORCE=1 always (re)builds. FORCE=0 builds only when a Docker daemon answers
# and the tag is missing or is an older local build; a tag without our label
# (a real published image) is left alone.
set -euo pipefail
: "${TIDB_IMAGE:?}" "${TIDB_KEY:?}" "${TIDB_BIN:?}" "${FORCE:=0}"

if ! docker info >/dev/null 2>&1; then
  if [ "$FORCE" = 1 ]; then echo "tidb-image: no Docker daemon answers" >&2; exit 1; fi
  echo "tidb-image: no Docker daemon answers; the Docker branch will not be tested"
  exit 0
fi
current=$(docker image inspect --format '{{ index .Config.Labels "laneq.tidb.key" }}' "$TIDB_IMAGE" 2>/dev/null || echo missing)
if [ "$FORCE" != 1 ]; then
  if [ "$current" = "$TIDB_KEY" ]; then echo "tidb-image: $TIDB_IMAGE is up to date"; exit 0; fi
  if [ "$current" != missing ] && [ -z "$current" ]; then
    echo "tidb-image: $TIDB_IMAGE exists and is not a local laneq build; leaving it alone"; exit 0
  fi
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$TIDB_BIN" "$ctx/tidb-server"
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY tidb-server /tidb-server
LABEL laneq.tidb.key="$TIDB_KEY"
EXPOSE 4000 10080
ENTRYPOINT ["/tidb-server"]
DOCKERFILE
echo "==> building image $TIDB_IMAGE from $TIDB_BIN"
docker build --quiet -t "$TIDB_IMAGE" "$ctx"
