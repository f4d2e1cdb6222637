#!/usr/bin/env bash
# Builds the OCI image tollgate:<version> from scratch: `tollgate` built
# statically for x86_64-unknown-linux-musl (the Debian package's features),
# stripped, with the CA certificates, a passwd and group naming the
# unprivileged user 65532, the default policies at
# /etc/tollgate/policies.yaml and the licences. Nothing is pulled from a
# registry (the Containerfile starts FROM scratch).
#
#   deploy/container/build.sh                 # tollgate:<version>, with buildah or podman
#   deploy/container/build.sh --rootfs DIR    # only stage the image's files in DIR
#   TAG=registry.example/tollgate:0.3.0 deploy/container/build.sh
#
# Needs: rustup's x86_64-unknown-linux-musl target, musl-gcc (Debian's
# musl-tools), binutils' strip, the CA certificates (Debian's
# ca-certificates) and buildah or podman. CARGO_TARGET_DIR is honoured, so
# the static build shares a build cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target_triple=x86_64-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
tag=${TAG:-tollgate:$version}
certificates=${CA_CERTIFICATES:-/etc/ssl/certs/ca-certificates.crt}

fail() {
    echo "error: $*" >&2
    exit 1
}

rootfs_only=""
case "${1:-}" in
'') ;;
--rootfs)
    [ -n "${2:-}" ] || fail "--rootfs needs a directory"
    rootfs_only=$2
    ;;
*)
    echo "usage: deploy/container/build.sh [--rootfs DIR]" >&2
    exit 2
    ;;
esac

rustup target list --installed | grep -qx "$target_triple" ||
    fail "the $target_triple target is not installed: rustup target add $target_triple"
command -v musl-gcc >/dev/null || fail "musl-gcc is not installed (Debian: apt-get install musl-tools)"
[ -s "$certificates" ] || fail "no CA certificates at $certificates (Debian: apt-get install ca-certificates)"

# The static binary. ring's C code is built with musl-gcc.
(cd "$root" && cargo build --release --locked --target "$target_triple" -p tollgate-cli)
binary=$(realpath -m "${CARGO_TARGET_DIR:-$root/target}")/$target_triple/release/tollgate
if readelf -l "$binary" | grep -q 'INTERP'; then
    fail "$binary asks for a dynamic loader: it is not statically linked"
fi

# stage DIR: the image's files under DIR.
stage() {
    local dir=$1
    rm -rf "$dir"
    install -d -m 0755 "$dir/usr/bin" "$dir/etc/ssl/certs" "$dir/etc/tollgate" \
        "$dir/usr/share/doc/tollgate"
    install -m 0755 "$binary" "$dir/usr/bin/tollgate"
    strip "$dir/usr/bin/tollgate"
    install -m 0644 "$certificates" "$dir/etc/ssl/certs/ca-certificates.crt"
    install -m 0644 "$here/policies.yaml" "$dir/etc/tollgate/policies.yaml"
    install -m 0644 "$root/LICENSE-MIT" "$root/LICENSE-APACHE" "$dir/usr/share/doc/tollgate/"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
        >"$dir/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
    chmod 0644 "$dir/etc/passwd" "$dir/etc/group"
}

if [ -n "$rootfs_only" ]; then
    stage "$rootfs_only"
    echo "staged the image's files in $rootfs_only" >&2
    exit 0
fi

if command -v buildah >/dev/null; then
    builder=(buildah build --layers=false)
elif command -v podman >/dev/null; then
    builder=(podman build)
else
    fail "neither buildah nor podman is installed (Debian: apt-get install buildah)"
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
stage "$context/rootfs"
cp "$here/Containerfile" "$context/Containerfile"
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"${builder[@]}" --format oci --pull=never -f "$context/Containerfile" -t "$tag" \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created" \
    "$context" >&2
echo "built $tag" >&2
