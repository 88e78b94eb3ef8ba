# PyTorch as the oracle for the three training fixtures (issue 12, part 6): train_mlp (SGD with
# momentum, a decayed lr), train_convnet (conv + batch norm with batch statistics + max pool, Adam)
# and train_transformer (layer norm + 2-head attention, AdamW, clip_grad_norm_), each rewritten
# with torch.nn.functional and torch.optim in tests/train_fixtures/fixtures.py. tracecache runs an
# oracle copy of each fixture (which also outputs the initial params, the data and each step's new
# param values) for 20 steps in eager, lazy and once mode on cpu and in lazy and once mode on
# sim:h100; PyTorch trains from the same initial values, and every step's loss (and the
# transformer's gradient norm) and the final params must agree within 1e-4 relative.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
HERE="$SRC/tests/train_fixtures"
for f in train_mlp train_convnet train_transformer; do
  "$PY" - "$HERE" "$SRC/fixtures/programs/$f.trace" "$TMP/$f.trace" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from fixtures import fixture_name, oracle_trace
open(sys.argv[3], "w").write(oracle_trace(fixture_name(sys.argv[2]), open(sys.argv[2]).read()))
EOF
  runs=()
  for mode in eager lazy once; do
    "$TC" run "$TMP/$f.trace" --mode $mode --no-cache --save-outputs "$TMP/${f}_$mode" > /dev/null ||
      fail "$f --mode $mode exited $?"
    runs+=("cpu-$mode=$TMP/${f}_$mode")
  done
  for mode in lazy once; do
    "$TC" run "$TMP/$f.trace" --backend sim:h100 --mode $mode --no-cache --save-outputs "$TMP/${f}_sim_$mode" > /dev/null ||
      fail "$f --backend sim:h100 --mode $mode exited $?"
    runs+=("sim-$mode=$TMP/${f}_sim_$mode")
  done
  "$PY" "$HERE/compare.py" "$f" 20 1e-4 "${runs[@]}" || fail "$f: tracecache and PyTorch disagree"
done
echo ok
