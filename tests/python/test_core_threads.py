"""The cpu backend's thread team from Python: importing tracecache makes libgomp's idle members
sleep unless the user chose a policy (docs/architecture.md, "The cpu backend: kernel libraries and threads"), and the module
runs on Debian's OpenMP OpenBLAS when nothing loaded another one first."""
import os
import subprocess
import sys
import unittest

PROBE = """
import os
import tracecache
print(os.environ.get("OMP_WAIT_POLICY", "-"))
maps = open("/proc/self/maps").read()
print("openmp-blas" if "openblas-openmp/libopenblas" in maps else "other-blas")
print("libomp" if "/libomp.so" in maps else "gomp-only")
"""


def probe(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    base.update(env)
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=base)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


class WaitPolicy(unittest.TestCase):
    def test_default_is_passive(self):
        self.assertEqual(probe(), ["passive", "openmp-blas", "gomp-only"])

    def test_numpy_first_brings_its_own_blas(self):
        # Documented: numpy imported first loads the pthreads OpenBLAS under the same soname.
        out = subprocess.run([sys.executable, "-c", "import numpy\n" + PROBE], capture_output=True,
                             text=True, env=dict(os.environ)).stdout.split()
        self.assertEqual(out[1:], ["other-blas", "gomp-only"])

    def test_the_users_choice_stays(self):
        self.assertEqual(probe(OMP_WAIT_POLICY="active")[0], "active")
        self.assertEqual(probe(GOMP_SPINCOUNT="1000")[0], "-")


if __name__ == "__main__":
    unittest.main()
