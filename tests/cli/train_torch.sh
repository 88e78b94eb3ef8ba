# Training against PyTorch (issue 12): tiny models (an MLP, and one with a training-mode batch
# norm) trained 20 steps from identical weights and data with SGD (momentum, nesterov,
# dampening, weight decay), Adam and AdamW, clip_grad_norm_ and a learning-rate schedule, by
# PyTorch and by tracecache's train_driver (eager on the cpu kernels; lazy on the cpu backend
# through the Runtime, compiling once, and on the reference evaluator): every step's loss and the
# final weights and running statistics agree within 1e-4 relative (tests/train/compare_torch.py).
# The driver's path comes from ctest (TRAIN_DRIVER, tests/CMakeLists.txt).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c "import torch, numpy" 2>/dev/null || fail "python3-torch and numpy are not installed; run scripts/setup.sh --peers"
[ -x "${TRAIN_DRIVER:-}" ] || fail "TRAIN_DRIVER is not set to the train_driver executable (build target train_driver)"
"$PY" "$SRC/tests/train/compare_torch.py" "$TRAIN_DRIVER" "$TMP" > "$TMP/compare.txt" 2>&1 ||
  fail "$(cat "$TMP/compare.txt")"
cat "$TMP/compare.txt"
# A bad argument is a clear error, not a crash.
expect_exit 2 "$TRAIN_DRIVER" mode=eager executor=cpu data="$TMP/nowhere" out="$TMP" model=mlp loss=ce opt=sgd lrs=0.1
grep -q "nowhere" "$TMP/err" || fail "the error does not name the missing file: $(cat "$TMP/err")"
echo ok
