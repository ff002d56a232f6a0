#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input with cargo fuzz (libFuzzer, nightly toolchain):
#   archive  whole .brv files: framing, trailer, index, then every record read back
#   record   one chunk record: program decoder, codecs, executor
#   index    an archive's index as every format version reads it (bases, row maps)
#   header   safetensors headers
#   pack     chunk bytes packed and decoded back: no record may fall back to literals
#   codec    each literal codec: arbitrary bytes decoded, arbitrary words round-tripped
# Seeds for `archive` are small real archives packed from a generated checkpoint.
#   scripts/test/fuzz.sh [SECONDS-PER-TARGET] [TARGET...]     (default: 300, all six)
# Crashes are saved under fuzz/artifacts/TARGET/ and make the script fail.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-300}
shift || true
targets=("${@:-archive record index header pack codec}")
# shellcheck disable=SC2206
targets=(${targets[*]})
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal

cargo build --release --quiet
seeds=fuzz/corpus/archive
mkdir -p "$seeds"
if [ -z "$(ls -A "$seeds")" ]; then
  work=$(mktemp -d)
  python3 - "$work/m.safetensors" <<'PY'
import json, math, struct, sys
tensors, data = {}, b""
def add(name, dtype, shape, raw):
    global data
    tensors[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
add("w", "F32", [600], b"".join(struct.pack("<f", math.sin(i / 7) * 0.1) for i in range(600)))
add("b", "BF16", [500], b"".join(struct.pack("<f", math.cos(i))[2:] for i in range(500)))
add("ids", "I64", [300], b"".join(struct.pack("<q", i) for i in range(300)))
add("mask", "U8", [400], bytes(i % 3 for i in range(400)))
add("zeros", "F16", [256], bytes(512))
header = json.dumps({"__metadata__": {"format": "pt"}, **tensors}).encode()
header += b" " * (-len(header) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + data)
PY
  for chunk in 256 1024 8192; do
    target/release/brevis pack -q --chunk-size $chunk "$work/m.safetensors" "$seeds/seed-$chunk.brv"
  done
  mkdir -p fuzz/corpus/header
  head -c 2048 "$work/m.safetensors" >fuzz/corpus/header/seed
  rm -rf "$work"
fi
# A format version 2 archive (its index names a base) among the seeds.
[ -e "$seeds/seed-v2.brv" ] || cp tests/golden/v2/tuned-again.brv "$seeds/seed-v2.brv"
# A format version 3 archive (Palette and Scaled programs) among the seeds, and
# its records among the record target's.
[ -e "$seeds/seed-v3.brv" ] || cp tests/golden/v3/dequantized.brv "$seeds/seed-v3.brv"
# A format version 4 archive (chunks that are differences from their base).
[ -e "$seeds/seed-v4.brv" ] || cp tests/golden/v4/difference-tuned.brv "$seeds/seed-v4.brv"
# A format version 4 archive (Match programs: copies in a header, F32 and BF16
# words) among the seeds, and its records among the record target's (each
# as the target reads it: layout, element count - 1 as u16le, the record).
[ -e "$seeds/seed-v4-match.brv" ] || cp tests/golden/v4/match-basis.brv "$seeds/seed-v4-match.brv"
# A format version 5 archive (Sparse programs in all three lane widths), and
# its records, the same way.
[ -e "$seeds/seed-v5-sparse.brv" ] || cp tests/golden/v5/sparse-pruned.brv "$seeds/seed-v5-sparse.brv"
# The indexes of a format version 9 archive (row maps of a base's rows,
# reordered) and a version 10 one (shared code tables) among the index
# target's seeds.
mkdir -p fuzz/corpus/index
for golden in v9/rows-pruned:v9-rows v10/shared-weights:v10-tables; do
python3 - "tests/golden/${golden%%:*}.brv" "fuzz/corpus/index/seed-${golden##*:}" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
off, n = struct.unpack_from("<QQ", b, len(b) - 32)
open(sys.argv[2], "wb").write(b[off:off + n])
PY
done
mkdir -p fuzz/corpus/record
for golden in v4/match-basis:v4-match v5/sparse-pruned:v5-sparse; do
python3 - "tests/golden/${golden%%:*}.brv" fuzz/corpus/record "${golden##*:}" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
off, n = struct.unpack_from("<QQ", b, len(b) - 32)
idx, pos = b[off:off + n], 0
def varint():
    global pos
    v = s = 0
    while True:
        c = idx[pos]; pos += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v
varint(); pos += 32; varint()
for _ in range(varint()):
    pos += 32; varint(); pos += varint()
at = 8
for k in range(varint()):
    kind = idx[pos]; pos += 1
    src, rec = varint(), varint(); pos += 8
    if kind & 0x80:
        varint(); varint()
    layout = kind & 0x7F
    elements = src // [1, 2, 4, 8][layout]
    if elements <= 65536:
        seed = bytes([layout]) + struct.pack("<H", elements - 1) + b[at:at + rec]
        open(f"{sys.argv[2]}/seed-{sys.argv[3]}-{k}", "wb").write(seed)
    at += rec
PY
done

for target in "${targets[@]}"; do
  echo "== fuzz $target for ${seconds}s"
  cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
echo "== no crashes"
