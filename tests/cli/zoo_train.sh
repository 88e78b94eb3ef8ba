# `tracecache zoo train` (issue 12): a zoo model in training mode. resnet18 at the small preset
# trains 20 steps with its loss falling; the emitted training program run by `tracecache run`
# gives the same losses; a different learning rate reuses the cached executable (lr is a lifted
# input); bad hyperparameters are refused. Then PyTorch: resnet18 small built in torch
# (tests/zoo_train/torch_resnet18.py) from the same weights, batch and labels, trained 20 steps
# with SGD momentum 0.9 and with Adam, matches tracecache in eager, lazy and once mode on cpu and
# lazy on sim:h100 (every step's loss and the final parameters and running statistics within
# 1e-4 relative); so do SGD with Nesterov momentum and weight decay, and AdamW, in lazy mode. Needs torch and torchvision under /usr/bin/python3 (scripts/setup.sh --peers).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3

expect_exit 0 "$TC" zoo train --help
grep -q -- "--optimizer" "$TMP/out" || fail "zoo train --help: no --optimizer"

# The loss falls: SGD with momentum memorizes the fixed batch.
expect_exit 0 "$TC" zoo train resnet18 --preset small --steps 20 --momentum 0.9 --lr 0.05 --db "$TMP/a.db"
grep -c "^  loss " "$TMP/out" | grep -qx 20 || fail "expected 20 losses: $(cat "$TMP/out")"
first=$(grep "^  loss " "$TMP/out" | head -1 | awk '{print $3}')
last=$(grep "^  loss " "$TMP/out" | tail -1 | awk '{print $3}')
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 10) }' || fail "loss did not fall: $first -> $last"
grep -q "20 steps (lazy mode), 20 traces, 1 compiles" "$TMP/out" || fail "$(tail -3 "$TMP/out")"
grep "^  loss " "$TMP/out" | awk '{print $NF}' > "$TMP/train_losses"

# The same run through the emitted program.
expect_exit 0 "$TC" zoo train resnet18 --preset small --steps 20 --momentum 0.9 --lr 0.05 --emit "$TMP/train.trace"
grep -q "= grad(loss, conv1_weight" "$TMP/train.trace" || fail "no grad statement in the program"
grep -q "^update bn1_running_var = " "$TMP/train.trace" || fail "no running-stat update"
expect_exit 0 "$TC" run "$TMP/train.trace" --db "$TMP/b.db"
grep "^  loss " "$TMP/out" | awk '{print $NF}' | diff - "$TMP/train_losses" ||
  fail "tracecache run on the emitted program gives other losses"

# Another learning rate: the same graph (lr is an input), so no compile in a warm cache.
expect_exit 0 "$TC" zoo train resnet18 --preset small --steps 2 --momentum 0.9 --lr 0.01 --db "$TMP/a.db"
grep -q "2 steps (lazy mode), 2 traces, 0 compiles" "$TMP/out" || fail "another lr recompiled: $(tail -3 "$TMP/out")"

expect_exit 2 "$TC" zoo train resnet18 --preset small --nesterov --no-cache
grep -q "nesterov needs a momentum" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" zoo train resnet18 --preset small --batch 1 --no-cache
grep -q "more than 1 value per channel" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_exit 2 "$TC" zoo train resnet18 --preset small --optimizer adam --momentum 0.9 --no-cache
expect_exit 2 "$TC" zoo train resnet18 --preset small --lr -1 --no-cache

# PyTorch.
"$PY" -c "import torch, torchvision" 2>/dev/null ||
  fail "python3-torch and python3-torchvision are not installed; run scripts/setup.sh --peers"
"$PY" "$SRC/tests/zoo_train/torch_resnet18.py" prepare "$TMP" > "$TMP/prepare.txt" 2>&1 ||
  fail "prepare failed: $(cat "$TMP/prepare.txt")"
data=(--preset small --batch 8 --weights "$TMP/weights.safetensors" --input "image=$TMP/image.npy"
      --input "labels=$TMP/labels.npy" --steps 20 --output-params --no-cache --json)
train() {  # OPTIMIZER_FLAGS... -- RUN_NAME MODE BACKEND
  local name=$1 mode=$2 backend=$3; shift 3
  expect_exit 0 "$TC" zoo train resnet18 "${data[@]}" "$@" --mode "$mode" --backend "$backend" \
    --save-outputs "$TMP/$name"
}
for opt in sgd adam; do
  if [ "$opt" = sgd ]; then flags=(--optimizer sgd --momentum 0.9 --lr 0.05); else flags=(--optimizer adam --lr 0.001); fi
  for mode in eager lazy once; do train "${opt}_$mode" "$mode" cpu "${flags[@]}"; done
  train "${opt}_sim_lazy" lazy sim:h100 "${flags[@]}"
done
"$PY" "$SRC/tests/zoo_train/torch_resnet18.py" compare "$TMP" sgd-momentum 0.05 20 \
  "$TMP/sgd_eager" "$TMP/sgd_lazy" "$TMP/sgd_once" "$TMP/sgd_sim_lazy" || fail "SGD differs from PyTorch"
"$PY" "$SRC/tests/zoo_train/torch_resnet18.py" compare "$TMP" adam 0.001 20 \
  "$TMP/adam_eager" "$TMP/adam_lazy" "$TMP/adam_once" "$TMP/adam_sim_lazy" || fail "Adam differs from PyTorch"
# Nesterov with weight decay, and AdamW (its decoupled decay), in lazy mode.
train nesterov lazy cpu --optimizer sgd --momentum 0.9 --nesterov --weight-decay 1e-4 --lr 0.05
"$PY" "$SRC/tests/zoo_train/torch_resnet18.py" compare "$TMP" sgd-nesterov 0.05 20 "$TMP/nesterov" ||
  fail "SGD with Nesterov momentum and weight decay differs from PyTorch"
train adamw lazy cpu --optimizer adamw --lr 0.001
"$PY" "$SRC/tests/zoo_train/torch_resnet18.py" compare "$TMP" adamw 0.001 20 "$TMP/adamw" ||
  fail "AdamW differs from PyTorch"
echo ok
