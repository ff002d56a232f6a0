#!/usr/bin/env bash
# Archives in Azure Blob Storage, against the Azurite emulator on loopback:
# installs Azurite and the Azure SDK for JavaScript from npm (once, under
# target/azurite; node and npm from apt where missing), starts Azurite's blob service, uploads
# a generated checkpoint's archive and a fine-tune's, then checks that
# `brevis verify az://…` passes, that `brevis unpack az://…` restores the
# originals bit for bit, that `brevis pack --base az://…` packs against a
# base where it is stored, and (as root, where /dev/fuse exists) that
# `brevis-mount az://…` shows the original. About 20 s once installed.
#
#   scripts/test/azurite.sh [TARGET_DIR]   (default target/debug: brevis, brevis-mount)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/debug}
here=$PWD/target/azurite
log() { printf 'azurite: %s\n' "$*" >&2; }
die() { printf 'azurite: FAILED: %s\n' "$*" >&2; exit 1; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  log "installing nodejs and npm (apt)"
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
if [[ ! -x $here/node_modules/.bin/azurite-blob || ! -d $here/node_modules/@azure/storage-blob ]]; then
  log "installing azurite and @azure/storage-blob from npm into $here"
  mkdir -p "$here"
  npm install --prefix "$here" --silent --no-audit --no-fund azurite@3 @azure/storage-blob@12 >&2
fi
python=$(scripts/test/pyenv.sh)

work=$(mktemp -d /tmp/brevis-azurite.XXXXXX)
pids=()
cleanup() {
  mountpoint -q "$work/mnt" 2>/dev/null && umount "$work/mnt"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$here/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
  --location "$work/data" --silent --skipApiVersionCheck --loose >"$work/azurite.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

# The emulator's well-known account, as object_store takes it from the
# environment.
export AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:$port
account=devstoreaccount1
key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

# A checkpoint and a fine-tune of it (safetensors with numpy), packed locally.
"$python" - "$work" <<'EOF'
import sys, numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(7)
w = {f"layer.{i}.weight": (rng.standard_normal((512, 1024)) * 0.02).astype(np.float32) for i in range(6)}
save_file(w, f"{sys.argv[1]}/base.safetensors")
w["layer.5.weight"] = w["layer.5.weight"] + np.float32(1e-3)
save_file(w, f"{sys.argv[1]}/tuned.safetensors")
EOF
mkdir -p "$work/up/base"
"$bin/brevis" pack -q "$work/base.safetensors" "$work/up/base/model.brv"
cp "$work/base.safetensors" "$work/up/base/config.bin"

# A container, and the files uploaded with the Azure SDK (not with brevis).
AZ_ACCOUNT=$account AZ_KEY=$key AZ_URL=$AZURITE_BLOB_STORAGE_URL/$account \
  NODE_PATH=$here/node_modules node - "$work/up" <<'EOF' || die "uploading with @azure/storage-blob"
const fs = require("fs"), path = require("path");
const { BlobServiceClient, StorageSharedKeyCredential } = require("@azure/storage-blob");
const cred = new StorageSharedKeyCredential(process.env.AZ_ACCOUNT, process.env.AZ_KEY);
const service = new BlobServiceClient(process.env.AZ_URL, cred);
(async () => {
  const container = service.getContainerClient("models");
  await container.createIfNotExists();
  const root = process.argv[2];
  const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]);
  for (const file of walk(root)) {
    const key = path.relative(root, file).split(path.sep).join("/");
    await container.getBlockBlobClient(key).uploadFile(file);
  }
})().catch((e) => { console.error(e); process.exit(1); });
EOF

url=az://models/base/model.brv
log "verify $url"
"$bin/brevis" verify "$url" | grep -q OK || die "brevis verify $url"
"$bin/brevis" unpack -q "$url" "$work/restored.safetensors"
cmp "$work/restored.safetensors" "$work/base.safetensors" || die "unpack of $url differs"
log "pack --base $url, unpack"
"$bin/brevis" pack -q --base "$url" "$work/tuned.safetensors" az://models/tuned/model.brv
"$bin/brevis" unpack -q az://models/tuned/model.brv "$work/tuned-restored.safetensors"
cmp "$work/tuned-restored.safetensors" "$work/tuned.safetensors" || die "the fine-tune differs"
if "$bin/brevis" verify az://models/none.brv 2>"$work/err"; then die "a missing blob verified"; fi
grep -q "az://models/none.brv" "$work/err" || die "the error does not name the URL: $(cat "$work/err")"

if [[ $(id -u) == 0 && -e /dev/fuse ]]; then
  log "brevis-mount az://models/base"
  mkdir -p "$work/mnt"
  "$bin/brevis-mount" az://models/base "$work/mnt" --log "$work/mount.log"
  cmp "$work/mnt/model.safetensors" "$work/base.safetensors" || die "the mount shows other bytes"
  cmp "$work/mnt/config.bin" "$work/base.safetensors" || die "a plain blob differs"
  umount "$work/mnt"
else
  log "not root or no /dev/fuse: the mount was not tried"
fi
log "all passed"
