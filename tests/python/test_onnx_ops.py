"""The ops ONNX models need (issue 16, docs/ops.md) against PyTorch and NumPy, the oracles where they
define the same semantics as ONNX: on random inputs with edge cases (ties, negatives, zeros, NaN,
integer dtypes), in lazy and eager mode on cpu, on the reference backend and on sim:h100 (which
must give the cpu kernels' bits)."""
import unittest

import numpy as np
import torch

import tracecache as tc

RNG = np.random.default_rng(16)


def floats(*shape, specials=True):
    a = (RNG.standard_normal(shape) * 3).astype(np.float32)
    if specials and a.size:
        flat = a.reshape(-1)
        picks = RNG.choice(flat.size, size=max(1, flat.size // 6), replace=False)
        flat[picks] = RNG.choice(np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.0, -0.0, 3.0, np.nan, np.inf, -np.inf],
                                          dtype=np.float32), size=picks.size)
    return a


def ints(*shape, low=-9, high=10, dtype=np.int64):
    return RNG.integers(low, high, shape).astype(dtype)


def nonzero_ints(*shape, dtype=np.int64):
    a = ints(*shape, dtype=dtype)
    a[a == 0] = 3
    return a


def T(a):
    return torch.from_numpy(np.array(a))


class OnnxOps(unittest.TestCase):
    def same(self, got, want, exact=True):
        got = got.numpy()
        want = np.asarray(want)
        self.assertEqual(got.shape, want.shape)
        self.assertEqual(got.dtype, want.dtype)
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    def check_elementwise(self):
        x = floats(5, 7)
        X = tc.from_numpy(x)
        self.same(tc.ops.floor(X), torch.floor(T(x)).numpy())
        self.same(tc.ops.ceil(X), torch.ceil(T(x)).numpy())
        self.same(tc.ops.round(X), torch.round(T(x)).numpy())  # half to even
        self.same(tc.ops.round(tc.tensor([0.5, 1.5, 2.5, -0.5, -1.5])), np.array([0, 2, 2, -0.0, -2], np.float32))
        self.same(tc.ops.sin(X), np.sin(x), exact=False)
        self.same(tc.ops.cos(X), np.cos(x), exact=False)
        i = ints(4, 5)
        self.same(tc.ops.floor(tc.from_numpy(i)), i)
        self.same(tc.ops.sin(tc.from_numpy(i)), np.sin(i.astype(np.float32)), exact=False)

        # Mod, fmod=1: torch.fmod; fmod=0 on integers: torch.remainder (= Python %); on floats
        # NumPy's np.mod (ONNX's reference).
        a, b = floats(4, 6), floats(6)
        b[b == 0] = 1.25
        A, B = tc.from_numpy(a), tc.from_numpy(b)
        self.same(tc.ops.fmod(A, B), torch.fmod(T(a), T(b)).numpy())
        with np.errstate(all="ignore"):
            self.same(tc.ops.remainder(A, B), np.mod(a, b))
        for dtype in (np.int32, np.int64):
            ia, ib = ints(4, 6, dtype=dtype), nonzero_ints(6, dtype=dtype)
            IA, IB = tc.from_numpy(ia), tc.from_numpy(ib)
            self.same(tc.ops.remainder(IA, IB), torch.remainder(T(ia), T(ib)).numpy())
            self.same(tc.ops.fmod(IA, IB), torch.fmod(T(ia), T(ib)).numpy())
            # Div on integers (ONNX: truncation).
            self.same(tc.ops.trunc_div(IA, IB), torch.div(T(ia), T(ib), rounding_mode="trunc").numpy())
        self.same(tc.ops.trunc_div(A, B), torch.div(T(a), T(b), rounding_mode="trunc").numpy())
        # Integer x % 0, fmod 0 and / 0 are 0 (ONNX leaves them undefined).
        z = tc.tensor([7, -7, 0])
        zero = tc.tensor([0, 0, 0])
        for op in (tc.ops.remainder, tc.ops.fmod, tc.ops.trunc_div):
            self.same(op(z, zero), np.zeros(3, np.int64))
        lo = np.iinfo(np.int64).min
        self.same(tc.ops.trunc_div(tc.tensor([lo]), tc.tensor([-1])), np.array([lo]))
        self.same(tc.ops.remainder(tc.tensor([lo]), tc.tensor([-1])), np.array([0]))

    def check_reductions(self):
        x = floats(4, 6, specials=False)
        x[1, 2] = x[1, 4] = x[1].min() - 1  # a tie
        X = tc.from_numpy(x)
        self.same(tc.ops.min(X, axes=[1]), torch.amin(T(x), dim=1).numpy())
        self.same(tc.ops.min(X, axes=[0], keepdim=True), torch.amin(T(x), dim=0, keepdim=True).numpy())
        self.same(tc.ops.min(X), np.array(x.min()))
        self.same(tc.ops.argmin(X, axis=1), torch.argmin(T(x), dim=1).numpy())
        self.assertEqual(tc.ops.argmin(X, axis=1).numpy()[1], 2)  # first of the tie
        self.assertEqual(tc.ops.argmin(X, axis=1, select_last_index=True).numpy()[1], 4)
        flipped = x.shape[1] - 1 - np.argmin(x[:, ::-1], axis=1)  # ONNX's reference for select_last_index
        self.same(tc.ops.argmin(X, axis=-1, select_last_index=True), flipped)
        self.same(tc.ops.argmin(X, axis=0, keepdim=True), np.argmin(x, axis=0)[None, :])
        n = np.array([3, np.nan, 1, np.nan], np.float32)
        self.same(tc.ops.argmin(tc.from_numpy(n), axis=0), np.array(np.argmin(n)))
        self.same(tc.ops.argmin(tc.from_numpy(n), axis=0, select_last_index=True), np.array(3))
        self.assertTrue(np.isnan(tc.ops.min(tc.from_numpy(n)).numpy()))
        i = ints(3, 5, low=-2, high=3)
        self.same(tc.ops.argmin(tc.from_numpy(i), axis=1), np.argmin(i, axis=1))
        self.same(tc.ops.min(tc.from_numpy(i), axes=[1]), i.min(axis=1))

    def check_conv_transpose(self):
        configs = [  # x, w, stride, padding, output_padding, dilation, groups
            ((2, 3, 4, 5), (3, 2, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1),
            ((1, 4, 3, 4), (4, 3, 3, 2), (2, 3), (1, 0), (1, 2), (2, 1), 2),
            ((2, 6, 5, 5), (6, 1, 4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 6),  # depthwise, as in upsamplers
            ((1, 2, 7, 3), (2, 5, 1, 1), (3, 1), (0, 0), (2, 0), (1, 1), 1),  # 1x1
        ]
        for xs, ws, stride, padding, output_padding, dilation, groups in configs:
            x, w = floats(*xs, specials=False), floats(*ws, specials=False)
            bias = floats(ws[1] * groups, specials=False)
            want = torch.nn.functional.conv_transpose2d(T(x), T(w), T(bias), stride=stride, padding=padding,
                                                        output_padding=output_padding, groups=groups,
                                                        dilation=dilation).numpy()
            got = tc.ops.conv_transpose2d(tc.from_numpy(x), tc.from_numpy(w), tc.from_numpy(bias),
                                          stride=list(stride), padding=list(padding),
                                          output_padding=list(output_padding), dilation=list(dilation),
                                          groups=groups).numpy()
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    def check_resize(self):
        F = torch.nn.functional
        x = floats(2, 3, 5, 4, specials=False)
        X = tc.from_numpy(x)
        for size in ((10, 8), (15, 12), (3, 2), (1, 1), (7, 9)):
            integer_factor = size[0] % 5 == 0 and size[1] % 4 == 0
            if integer_factor:  # torch's float scale agrees with ONNX's double one exactly
                # ONNX asymmetric + floor is torch's "nearest".
                self.same(tc.ops.resize_nearest2d(X, size=list(size), coordinate_transformation_mode=1, nearest_mode=2),
                          F.interpolate(T(x), size=size, mode="nearest").numpy())
            # ONNX half_pixel + round_prefer_ceil (and tf_half_pixel_for_nearest + floor) is "nearest-exact".
            exact = F.interpolate(T(x), size=size, mode="nearest-exact").numpy()
            self.same(tc.ops.resize_nearest2d(X, size=list(size), coordinate_transformation_mode=0, nearest_mode=1), exact)
            self.same(tc.ops.resize_nearest2d(X, size=list(size), coordinate_transformation_mode=4, nearest_mode=2), exact)
            # pytorch_half_pixel is bilinear with align_corners=False, except that it samples 0 for an
            # output length of 1 (ONNX's rule) where torch uses half_pixel; align_corners is
            # align_corners=True.
            mode = 0 if 1 in size else 3
            np.testing.assert_allclose(
                tc.ops.resize_linear2d(X, size=list(size), coordinate_transformation_mode=mode).numpy(),
                F.interpolate(T(x), size=size, mode="bilinear", align_corners=False).numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(
                tc.ops.resize_linear2d(X, size=list(size), coordinate_transformation_mode=2).numpy(),
                F.interpolate(T(x), size=size, mode="bilinear", align_corners=True).numpy(), rtol=1e-5, atol=1e-5)
        # The ONNX formulas without a PyTorch twin, from the spec: asymmetric and half_pixel
        # coordinates, round_prefer_floor, explicit scales, integer data.
        np.testing.assert_array_equal(
            tc.ops.resize_linear2d(tc.from_numpy(np.arange(20, dtype=np.float32).reshape(1, 1, 5, 4)), size=[1, 1],
                                   coordinate_transformation_mode=3).numpy(), np.zeros((1, 1, 1, 1), np.float32))

        def onnx_nearest_1d(n_in, n_out, coord, scale):
            idx = []
            for o in range(n_out):
                c = o / scale if coord == "asymmetric" else (o + 0.5) / scale - 0.5
                f = np.floor(c)
                i = f if c - f == 0.5 else np.round(c)  # round_prefer_floor
                idx.append(int(min(max(i, 0), n_in - 1)))
            return idx
        xi = ints(1, 2, 4, 6)
        for coord, code in (("asymmetric", 1), ("half_pixel", 0)):
            for scales in ((1.5, 0.5), (2.0, 1.75)):
                size = [int(np.floor(4 * scales[0])), int(np.floor(6 * scales[1]))]
                rows = onnx_nearest_1d(4, size[0], coord, scales[0])
                cols = onnx_nearest_1d(6, size[1], coord, scales[1])
                got = tc.ops.resize_nearest2d(tc.from_numpy(xi), size=size, scale_h=scales[0], scale_w=scales[1],
                                              coordinate_transformation_mode=code)
                self.same(got, xi[:, :, rows][:, :, :, cols])

    def check_topk(self):
        x = floats(4, 9, specials=False)
        x[1, 3] = x[1, 6] = x[1, 8] = x[1].max() + 1  # a three-way tie: lower index first (ONNX)
        x[2, 0] = x[2, 5] = x[2].min() - 1
        X = tc.from_numpy(x)
        for k, axis, largest in ((3, 1, True), (4, -1, False), (2, 0, True), (9, 1, False), (0, 1, True)):
            values = torch.topk(T(x), k, dim=axis, largest=largest, sorted=True).values
            self.same(tc.ops.topk(X, k=k, axis=axis, largest=largest), values.numpy())
            # torch orders ties arbitrarily; ONNX (and a stable sort) puts the lower index first.
            order = np.argsort(-x if largest else x, axis=axis, kind="stable")
            order = order[:, :k] if axis in (1, -1) else order[:k]
            self.same(tc.ops.topk_indices(X, k=k, axis=axis, largest=largest), order)
        self.assertEqual(tc.ops.topk_indices(X, k=3, axis=1).numpy()[1].tolist(), [3, 6, 8])
        self.assertEqual(tc.ops.topk_indices(X, k=2, axis=1, largest=False).numpy()[2].tolist(), [0, 5])
        i = ints(3, 8, low=-3, high=4)
        order = np.argsort(-i, axis=1, kind="stable")[:, :5]  # ties by lower index
        self.same(tc.ops.topk_indices(tc.from_numpy(i), k=5), order)
        self.same(tc.ops.topk(tc.from_numpy(i), k=5), np.take_along_axis(i, order, axis=1))
        n = np.array([1, np.nan, 3, np.nan, 2], np.float32)  # NaN is the largest value
        self.same(tc.ops.topk_indices(tc.from_numpy(n), k=3), np.array([1, 3, 2]))
        self.same(tc.ops.topk_indices(tc.from_numpy(n), k=3, largest=False), np.array([0, 4, 2]))

    def check_scatter_gather(self):
        x, u = floats(4, 5, specials=False), floats(3, 5, specials=False)
        perm = np.stack([RNG.permutation(4)[:3] for _ in range(5)], axis=1)  # distinct per column
        X, U = tc.from_numpy(x), tc.from_numpy(u)
        want = torch.scatter(T(x), 0, T(perm), T(u)).numpy()
        self.same(tc.ops.scatter_elements(X, tc.from_numpy(perm), U, axis=0), want)
        self.same(tc.ops.scatter_elements(X, tc.from_numpy(perm - 4), U, axis=0), want)  # negative: from the end
        dup = ints(3, 5, low=0, high=4)
        self.same(tc.ops.scatter_elements(X, tc.from_numpy(dup), U, axis=0, reduction=1),
                  torch.scatter_reduce(T(x), 0, T(dup), T(u), reduce="sum").numpy(), exact=False)
        self.same(tc.ops.scatter_elements(X, tc.from_numpy(dup), U, axis=0, reduction=2),
                  torch.scatter_reduce(T(x), 0, T(dup), T(u), reduce="prod").numpy(), exact=False)
        xi, ui = ints(3, 6), ints(3, 2)
        ci = ints(3, 2, low=0, high=6)
        self.same(tc.ops.scatter_elements(tc.from_numpy(xi), tc.from_numpy(ci), tc.from_numpy(ui), axis=1, reduction=1),
                  torch.scatter_add(T(xi), 1, T(ci), T(ui)).numpy())
        # gather_nd against ONNX's definition written with NumPy.
        def gather_nd(data, indices, b):
            batch = int(np.prod(data.shape[:b]))
            data_b = data.reshape((batch,) + data.shape[b:])
            idx_b = indices.reshape((batch, -1, indices.shape[-1]))
            out = [data_b[n][tuple(np.mod(idx_b[n], np.array(data.shape[b:b + indices.shape[-1]])).T)]
                   for n in range(batch)]
            return np.stack(out).reshape(indices.shape[:-1] + data.shape[b + indices.shape[-1]:])
        d = floats(2, 3, 4, 5)
        for idx, b in ((ints(6, 2, low=-2, high=2), 0), (ints(2, 4, 3, low=0, high=2), 0),
                       (ints(2, 7, 2, low=-3, high=3), 1), (ints(2, 3, 1, low=0, high=4), 2),
                       (ints(2, 3, 5, 2, low=-4, high=4), 2)):
            self.same(tc.ops.gather_nd(tc.from_numpy(d), tc.from_numpy(idx), batch_dims=b), gather_nd(d, idx, b))

    def check_all(self):
        self.check_elementwise()
        self.check_reductions()
        self.check_conv_transpose()
        self.check_resize()
        self.check_topk()
        self.check_scatter_gather()

    def test_lazy_cpu(self):
        tc.configure(mode="lazy", backend="cpu")
        self.check_all()

    def test_eager_cpu(self):
        tc.configure(mode="eager", backend="cpu")
        self.check_all()

    def test_reference(self):
        tc.configure(mode="lazy", backend="reference")
        self.check_all()

    def test_sim(self):
        tc.configure(mode="lazy", backend="sim:h100")
        self.check_all()

    def test_sim_gives_the_cpu_bits(self):
        x, w, b = floats(2, 4, 5, 5, specials=False), floats(4, 3, 3, 3, specials=False), floats(3)
        a, d = floats(6, 7), floats(7)
        results = []
        for backend in ("cpu", "sim:h100"):
            tc.configure(mode="lazy", backend=backend)
            A, D = tc.from_numpy(a), tc.from_numpy(d)
            outs = [tc.ops.conv_transpose2d(tc.from_numpy(x), tc.from_numpy(w), tc.from_numpy(b), stride=[2, 2]),
                    tc.ops.remainder(A, D), tc.ops.round(A), tc.ops.sin(A), tc.ops.min(A, axes=[1]),
                    tc.ops.argmin(A, axis=0, select_last_index=True),
                    tc.ops.resize_linear2d(tc.from_numpy(x), size=[9, 11], coordinate_transformation_mode=0),
                    tc.ops.resize_nearest2d(tc.from_numpy(x), size=[9, 11]),
                    tc.ops.topk(A, k=3), tc.ops.topk_indices(A, k=2, axis=0, largest=False)]
            results.append([o.numpy() for o in outs])
        for cpu, sim in zip(*results):
            np.testing.assert_array_equal(cpu, sim)


if __name__ == "__main__":
    unittest.main()
