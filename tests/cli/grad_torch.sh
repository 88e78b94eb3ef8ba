# Every gradient rule against PyTorch (issue 12): tests/grad/torch_grads.py writes PyTorch's
# gradients for every case of tests/grad/cases_*.py, and the grad_check test binary (built next
# to the tests, tests/grad/grad_check.cc) compares tracecache's in eager and lazy mode on the
# reference and cpu kernels, checks finite differences, and fails for an op that has a gradient
# rule and no case. Needs Debian's python3-torch under /usr/bin/python3 (scripts/setup.sh --peers).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c "import torch, numpy" 2>/dev/null ||
  fail "python3-torch and python3-numpy are not installed; run scripts/setup.sh --peers"
CHECK="$(dirname "$TC")/../tests/grad_check"
[ -x "$CHECK" ] || fail "no grad_check binary at $CHECK: build the grad_check target"
"$PY" "$SRC/tests/grad/torch_grads.py" "$TMP/cases" > "$TMP/gen.txt" 2>&1 ||
  fail "torch_grads.py failed: $(cat "$TMP/gen.txt")"
"$CHECK" --require-coverage "$TMP/cases" > "$TMP/check.txt" 2>&1 || {
  grep -v '^ok ' "$TMP/check.txt" >&2
  fail "grad_check found gradients that differ from PyTorch's (listed above)"
}
grep '^family ' "$TMP/check.txt"
# The checker fails on a gradient that differs from PyTorch's: one planted error is found and named.
"$PY" - "$TMP/cases/mul_broadcast/grad_b.npy" <<'PY'
import sys
import numpy as np
g = np.load(sys.argv[1])
g.flat[1] += 0.5
np.save(sys.argv[1], g)
PY
expect_exit 1 "$CHECK" "$TMP/cases/mul_broadcast"
grep -q "FAIL mul_broadcast: eager-reference, grad of b: element \[0, 1\]" "$TMP/out" ||
  fail "the planted error is not reported: $(cat "$TMP/out")"
# An op with a gradient rule and no case fails the coverage check, named (here: every op but
# neg, with only the neg case given).
expect_exit 1 "$CHECK" --require-coverage "$TMP/cases/neg"
grep -q "FAIL op 'matmul' has a gradient rule and no PyTorch case" "$TMP/out" ||
  fail "an uncovered op is not reported: $(cat "$TMP/out")"
grep -q "op 'neg' has a gradient rule and no" "$TMP/out" && fail "neg has a case but is reported uncovered"
echo ok
