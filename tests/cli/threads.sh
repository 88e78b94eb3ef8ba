# --threads (and TRACECACHE_THREADS) set the cpu backend's threads (OpenBLAS and the kernels'
# loops). For one thread count, every mode gives the same bits and so does the environment
# variable; across thread counts, outputs agree within the matmul bound (OpenBLAS's threaded
# sgemm sums in another order) and outputs that touch no matmul are bitwise equal.
# Invalid values are bad input (tests/cli/bad_input.sh).
source "$(dirname "$0")/lib.sh"
P="$SRC/fixtures/programs"
PY=/usr/bin/python3
for f in mlp attention ops_tour; do
  for t in 1 2; do
    for m in eager lazy once; do
      "$TC" run "$P/$f.trace" --mode "$m" --no-cache --threads "$t" --json > "$TMP/$f.$m.$t.json" ||
        fail "$f.trace --mode $m --threads $t exited $?"
    done
    TRACECACHE_THREADS=$t "$TC" run "$P/$f.trace" --no-cache --json --save-outputs "$TMP/$f.out$t" \
      > "$TMP/$f.env.$t.json" || fail "$f.trace with TRACECACHE_THREADS=$t exited $?"
    $PY - "$TMP/$f" "$t" <<'PY' || fail "$f.trace --threads $t: modes or the environment variable disagree"
import json, sys
runs = [json.load(open(f"{sys.argv[1]}.{m}.{sys.argv[2]}.json")) for m in ("eager", "lazy", "once", "env")]
assert runs[0]["outputs"] and all(o["checksum"] for step in runs[0]["outputs"] for o in step)
assert all(r["outputs"] == runs[0]["outputs"] for r in runs), "checksums differ between modes"
PY
  done
  $PY - "$TMP/$f.out1" "$TMP/$f.out2" <<'PY' || fail "$f.trace: 1 and 2 threads disagree beyond the matmul bound"
import pathlib, sys
import numpy as np
a, b = (pathlib.Path(d) for d in sys.argv[1:3])
files = sorted(p.relative_to(a) for p in a.rglob("*.npy"))
assert files and files == sorted(p.relative_to(b) for p in b.rglob("*.npy")), "different output files"
for rel in files:
    x, y = np.load(a / rel), np.load(b / rel)
    assert x.dtype == y.dtype and x.shape == y.shape, rel
    if x.dtype.kind == "f":
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5, err_msg=str(rel))
    else:
        assert (x == y).all(), rel
PY
done
# A program without a matmul gives the same bits at every thread count.
cat > "$TMP/elementwise.trace" <<'T'
tracecache 1
input x : f32[512, 1024] = uniform(seed=3)
a = exp(x)
b = mul(a, x)
s = sum(b, axes=[1])
output s
T
for t in 1 2; do
  "$TC" run "$TMP/elementwise.trace" --no-cache --threads "$t" --json > "$TMP/ew.$t.json"
done
$PY -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a['outputs'] == b['outputs'], 'elementwise checksums depend on the thread count'
" "$TMP/ew.1.json" "$TMP/ew.2.json" || fail "elementwise program differs across thread counts"
"$TC" zoo run resnet18 --preset small --no-cache --threads 1 --save-outputs "$TMP/z1" > /dev/null
"$TC" zoo run resnet18 --preset small --no-cache --threads 2 --save-outputs "$TMP/z2" > /dev/null
$PY -c "
import pathlib, sys
import numpy as np
a, b = (pathlib.Path(d) for d in sys.argv[1:3])
files = sorted(p.relative_to(a) for p in a.rglob('*.npy'))
assert files
for rel in files:
    np.testing.assert_allclose(np.load(a / rel), np.load(b / rel), rtol=1e-4, atol=1e-5, err_msg=str(rel))
" "$TMP/z1" "$TMP/z2" || fail "zoo resnet18: 1 and 2 threads disagree beyond the matmul bound"
# The team's wait policy: idle members sleep unless the user chose (OMP_WAIT_POLICY or
# GOMP_SPINCOUNT); bench --json names it, the thread count and the OpenMP build of OpenBLAS.
policy() {
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" "$TC" bench "$P/mlp.trace" --modes once --steps 1 --warmup 0 \
    --threads 2 --json 2> /dev/null
}
policy > "$TMP/p.default.json" || fail "bench --json exited $?"
policy OMP_WAIT_POLICY=active > "$TMP/p.active.json" || fail "bench with OMP_WAIT_POLICY=active exited $?"
policy GOMP_SPINCOUNT=1000 > "$TMP/p.spin.json" || fail "bench with GOMP_SPINCOUNT exited $?"
# Under a tool that preloads itself (valgrind) the program does not run itself again.
policy LD_PRELOAD=libm.so.6 > "$TMP/p.preload.json" || fail "bench with LD_PRELOAD exited $?"
$PY - "$TMP" <<'PY' || fail "the wait policy, threads or BLAS reported by bench --json are wrong"
import json, sys
d = {k: json.load(open(f"{sys.argv[1]}/p.{k}.json")) for k in ("default", "active", "spin", "preload")}
assert d["preload"]["omp_wait_policy"] == "", d["preload"]["omp_wait_policy"]
assert d["default"]["omp_wait_policy"] == "passive", d["default"]["omp_wait_policy"]
assert d["active"]["omp_wait_policy"] == "active", d["active"]["omp_wait_policy"]
assert d["spin"]["omp_wait_policy"] == "", d["spin"]["omp_wait_policy"]
assert d["default"]["threads"] == 2, d["default"]["threads"]
assert d["default"]["blas"].startswith("OpenBLAS ") and d["default"]["blas"].endswith("(OpenMP)"), d["default"]["blas"]
PY
echo ok
