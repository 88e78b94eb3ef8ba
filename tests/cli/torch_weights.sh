# Weights written by PyTorch (issue 5): torchvision 0.14's resnet18, seeded, with non-trivial
# batch-norm statistics, saved as .safetensors by scripts/export_torchvision_weights.py together
# with an input image and PyTorch's logits. tracecache loads the file by state_dict name, runs
# the same image in lazy and once mode, and its logits match PyTorch's within 1e-4 relative to
# the largest logit. Needs Debian's python3-torchvision under /usr/bin/python3
# (scripts/setup.sh --peers, which scripts/test.sh runs).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c "import torch, torchvision" 2>/dev/null ||
  fail "python3-torch and python3-torchvision are not installed; run scripts/setup.sh --peers"
"$PY" "$SRC/scripts/export_torchvision_weights.py" --model resnet18 --out-dir "$TMP" --random-bn-stats \
  > "$TMP/export.txt" 2>&1 || fail "export failed: $(cat "$TMP/export.txt")"
for mode in lazy once; do
  expect_exit 0 "$TC" zoo run resnet18 --weights "$TMP/resnet18.safetensors" \
    --input "image=$TMP/resnet18_input.npy" --mode "$mode" --no-cache --save-outputs "$TMP/$mode"
done
"$PY" - "$TMP" <<'PY'
import sys
import numpy as np
tmp = sys.argv[1]
want = np.load(f"{tmp}/resnet18_logits.npy")
for mode in ("lazy", "once"):
    got = np.load(f"{tmp}/{mode}/step0_logits.npy")
    assert got.shape == want.shape == (1, 1000), (got.shape, want.shape)
    rel = float(np.abs(got - want).max() / np.abs(want).max())
    assert rel <= 1e-4, f"{mode}: max relative error {rel}"
    assert got.argmax() == want.argmax()
PY
# A PyTorch state_dict of another model is refused by name, not misread.
"$PY" "$SRC/scripts/export_torchvision_weights.py" --model squeezenet1_1 --out-dir "$TMP/sq" \
  > "$TMP/export2.txt" 2>&1 || fail "export failed: $(cat "$TMP/export2.txt")"
expect_exit 2 "$TC" zoo run resnet18 --weights "$TMP/sq/squeezenet1_1.safetensors" --no-cache
grep -q "conv1.weight" "$TMP/err" || fail "the error does not name a missing tensor: $(cat "$TMP/err")"
expect_exit 2 "$TC" zoo run resnet18 --input "picture=$TMP/resnet18_input.npy" --no-cache
grep -q "no input 'picture'" "$TMP/err" || fail "$(cat "$TMP/err")"
echo ok
