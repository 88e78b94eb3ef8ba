"""The cpu backend's thread team from Python: importing tracecache makes libgomp's idle members
sleep unless the user chose a policy, and the GEMMs run on the OpenBLAS numpy loads (the system's
pthreads build), never on the OpenMP build with PyTorch in the same process, where PyTorch's
sgemm hangs (docs/architecture.md, "The cpu backend: kernel libraries and threads")."""
import os
import subprocess
import sys
import unittest

PROBE = """
import os
import tracecache
print(os.environ.get("OMP_WAIT_POLICY", "-"))
maps = open("/proc/self/maps").read()
print("openmp-blas" if "openblas-openmp/libopenblas" in maps else "pthreads-blas")
print("libomp" if "/libomp.so" in maps else "gomp-only")
"""


def probe(code=PROBE, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    base.update(env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=base, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


class WaitPolicyAndBlas(unittest.TestCase):
    def test_default_is_passive_on_numpys_blas(self):
        self.assertEqual(probe(), ["passive", "pthreads-blas", "gomp-only"])

    def test_the_users_choice_stays(self):
        self.assertEqual(probe(OMP_WAIT_POLICY="active")[0], "active")
        self.assertEqual(probe(GOMP_SPINCOUNT="1000")[0], "-")

    def test_pytorch_convolution_after_tracecache(self):
        # The OpenMP OpenBLAS made this hang: PyTorch's unfolded convolution calls sgemm.
        code = PROBE + """
import torch
torch.set_num_threads(2)
x = torch.randn(2, 3, 16, 16)
w = torch.randn(4, 3, 3, 3)
y = torch.nn.functional.conv2d(x, w, dilation=2)
print(tuple(y.shape) == (2, 4, 12, 12))
"""
        self.assertEqual(probe(code)[-1], "True")


if __name__ == "__main__":
    unittest.main()
