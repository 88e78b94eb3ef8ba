#!/usr/bin/env bash
# Builds the fuzz harnesses' seed corpora from the fixtures into OUT_DIR/<harness>/:
#   program      fixtures/programs/*.trace, fixtures/programs/bad/*.trace
#   npy          fixtures/**/*.npy, plus every output of the fixture runs saved as .npy
#   safetensors  fixtures/**/*.safetensors
#   graph_codec, executable, guard_entry
#                the blobs of the graphs, executables and functions tables of a cache database
#                made by running fixture programs through the CLI (lazy and once modes),
#                extracted with the sqlite3 shell.
# Checked-in seeds (fuzz/corpus/<harness>/) are used as they are; this script does not copy them.
# Usage: fuzz/make_seeds.sh TRACECACHE_BINARY SOURCE_DIR OUT_DIR
set -euo pipefail
tc=$1 src=$2 out=$3
rm -rf "$out"
mkdir -p "$out"/{program,npy,safetensors,graph_codec,executable,guard_entry}
cp "$src"/fixtures/programs/*.trace "$src"/fixtures/programs/bad/*.trace "$out/program/"
find "$src/fixtures" -name '*.npy' -exec cp {} "$out/npy/" \;
find "$src/fixtures" -name '*.safetensors' -exec cp {} "$out/safetensors/" \;

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/cache.db"
for p in mlp attention convnet embedding ops_tour matmul_varying_batch lr_schedule; do
  for mode in lazy once; do
    "$tc" run "$src/fixtures/programs/$p.trace" --mode "$mode" --db "$db" \
      --save-outputs "$work/out-$p-$mode" >/dev/null
  done
done
n=0
for f in "$work"/out-*/*.npy; do
  cp "$f" "$out/npy/out$((n++)).npy"
done
dump() {  # dump TABLE DIR: one file per row's blob
  sqlite3 "$db" "SELECT writefile('$2/' || rowid || '.bin', blob) FROM $1;" >/dev/null
}
dump graphs "$out/graph_codec"
dump executables "$out/executable"
dump functions "$out/guard_entry"
for h in program npy safetensors graph_codec executable guard_entry; do
  echo "seeds: $h: $(find "$out/$h" -type f | wc -l) files"
done
