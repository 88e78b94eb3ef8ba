"""The ATen ops torchvision's models need beyond the zoo, each against eager PyTorch: compiled
with fullgraph=True (an unmapped op is an error, never a graph break to PyTorch) in once mode
and in lazy mode, forward and backward (torch.autograd.grad inside the compiled function puts
the backward ops in the capture). Outputs agree within 1e-5 of the largest output (1e-4 for the
3-d convolutions, whose terms are summed in another order); nearest upsampling, indexing,
as_strided and max pooling are exact copies and compare equal.

- upsample_bilinear2d and upsample_nearest2d: align_corners both ways, up and down, odd sizes,
  an output of length 1, scale factors (also one that disagrees with the sizes, where PyTorch's
  channels-last kernel differs from its NCHW kernel), channels-last and one-channel inputs.
- index.Tensor and index_put: one index tensor (negative entries, duplicates), several
  (broadcast, adjacent or not), a boolean mask refused; index_add; repeat_interleave by a
  number (a tensor of repeats refused).
- as_strided / as_strided_: ConvNeXt's pooled head (adaptive_avg_pool2d of a channels-last
  tensor restrides its result in place), overlapping windows, an offset, a transposed source;
  a source with gaps and an explicit offset into a view refused.
- convolution (3-d): strides, dilations, paddings, groups, with and without bias, temporal-only
  and spatial-only kernels; max_pool3d (ceil_mode, dilation, ties), avg_pool3d (with and
  without the padding in the count), adaptive_avg_pool3d (overlapping windows).
- roll (Swin's shifted windows) and repeat; slice and select backward at any rank, with steps.
- writes through views: a slice, a select of a fresh buffer (detection's batched images), a
  transposed and a reshaped view, split and unbind pieces, a slice with a step, views of views,
  a view read after its base changed in place (it shows the change), the backward's writes
  through as_strided views; a write to an input's view refused (compile is pure).
- hardswish_backward, hardsigmoid_backward at -3, 3 and NaN; new_empty_strided.

Run by ctest as python.test_torch_ops (tests/python/run_test.sh)."""

import unittest

import torch
import torch.nn.functional as F

import tracecache
import tracecache.torch

MODES = ("once", "lazy")


def gradients(op):
    """A function returning op's value and the gradients of `grad · op(x, *rest)` with respect
    to all its inputs, computed by autograd inside the function."""
    def fn(grad, *inputs):
        leaves = [t.detach().requires_grad_() for t in inputs]
        out = op(*leaves)
        return (out,) + torch.autograd.grad(out, leaves, grad)
    fn.__name__ = f"gradients_of_{op.__name__}"
    return fn


def relative_error(got, want):
    got, want = got.double(), want.double()
    scale = want.abs().max().item() if want.numel() else 0.0
    return (got - want).abs().max().item() / (scale or 1.0) if want.numel() else 0.0


class OpCase(unittest.TestCase):
    def setUp(self):
        tracecache.configure(no_cache=True)

    def compare(self, fn, inputs, tol):
        want = fn(*inputs)
        want = want if isinstance(want, tuple) else (want,)
        for mode in MODES:
            got = tracecache.torch.compile(fn, fullgraph=True, mode=mode)(*inputs)
            got = got if isinstance(got, tuple) else (got,)
            self.assertEqual(len(got), len(want))
            for k, (g, w) in enumerate(zip(got, want)):
                w = w.detach()
                self.assertEqual(g.shape, w.shape, f"{fn.__name__} {mode} output {k}")
                self.assertEqual(g.dtype, w.dtype, f"{fn.__name__} {mode} output {k}")
                if tol == 0:
                    self.assertTrue(torch.equal(g, w), f"{fn.__name__} {mode} output {k}")
                else:
                    self.assertLessEqual(relative_error(g, w), tol, f"{fn.__name__} {mode} output {k}")

    def check(self, op, *inputs, tol=1e-5, grad_tol=None):
        """op's value, and its gradients too when `grad_tol` is given."""
        self.compare(op, inputs, tol)
        if grad_tol is not None:
            grad = torch.randn(op(*inputs).shape, generator=torch.Generator().manual_seed(5))
            self.compare(gradients(op), (grad,) + tuple(inputs), grad_tol)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Upsample(OpCase):
    def test_bilinear(self):
        x = randn(2, 3, 5, 7)

        def bilinear(x):
            return (F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True),
                    F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=False),
                    F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=True),
                    F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=False),
                    F.interpolate(x, size=(1, 1), mode="bilinear", align_corners=True),
                    F.interpolate(x, size=(1, 2), mode="bilinear", align_corners=False),
                    F.interpolate(x, scale_factor=(1.7, 2.3), mode="bilinear", align_corners=False),
                    F.interpolate(x, scale_factor=(0.6, 1.5), mode="bilinear", align_corners=True),
                    # 5 * 1.1 rounds down to 5: PyTorch copies that axis rather than use the scale.
                    F.interpolate(x, scale_factor=(1.1, 2.0), mode="bilinear", align_corners=False))
        self.check(bilinear, x)
        self.check(bilinear, x.contiguous(memory_format=torch.channels_last))

    def test_bilinear_backward(self):
        def up(x):
            return F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True)

        def up_unaligned(x):
            return F.interpolate(x, scale_factor=(1.7, 0.6), mode="bilinear", align_corners=False)
        for op in (up, up_unaligned):
            self.check(op, randn(2, 3, 5, 7), grad_tol=1e-5)

    def test_nearest(self):
        x = randn(2, 3, 5, 7)

        def nearest(x):
            return (F.interpolate(x, size=(9, 13), mode="nearest"),
                    F.interpolate(x, size=(2, 3), mode="nearest"),
                    F.interpolate(x, scale_factor=(2.0, 3.0), mode="nearest"),
                    F.interpolate(x, scale_factor=(2.1, 1.3), mode="nearest"),
                    F.interpolate(x, scale_factor=(1.1, 0.7), mode="nearest"))
        self.check(nearest, x, tol=0)
        # Channels-last inputs (also any one-channel input) take PyTorch's other kernel, which
        # reads 5 -> 10 with scale 2.1 as o // 2 and 5 -> 5 with scale 1.1 as a copy.
        self.check(nearest, x.contiguous(memory_format=torch.channels_last), tol=0)
        self.check(nearest, x[:, :1].contiguous(), tol=0)

    def test_nearest_backward(self):
        def up(x):
            return F.interpolate(x, size=(9, 13), mode="nearest")

        def up_scaled(x):
            return F.interpolate(x, scale_factor=(2.1, 0.7), mode="nearest")
        for op in (up, up_scaled):
            self.check(op, randn(2, 3, 5, 7), grad_tol=1e-5)


class Indexing(OpCase):
    def test_one_index_tensor(self):
        def rows(x):
            return x[torch.tensor([0, -1, 2, 2])]

        def table_lookup(x):
            return x[torch.tensor([[0, 5], [-2, 1], [3, 3]])]

        def middle_dim(x):
            return x[:, torch.tensor([3, -4, 0])]
        for op in (rows, table_lookup):
            self.check(op, randn(6, 4), tol=0, grad_tol=1e-6)
        self.check(middle_dim, randn(2, 4, 3), tol=0, grad_tol=1e-6)

    def test_several_index_tensors(self):
        def pairs(x):
            return x[torch.tensor([[0, 1], [5, -2]]), torch.tensor([1, -1])]

        def adjacent(x):
            return x[:, torch.tensor([0, 3]), torch.tensor([[1], [4]])]

        def apart(x):
            return x[:, torch.tensor([0, 3, 0]), :, torch.tensor([[1], [5]])]
        self.check(pairs, randn(6, 4), tol=0, grad_tol=1e-6)
        for op in (adjacent, apart):
            self.check(op, randn(3, 4, 5, 6), tol=0, grad_tol=1e-6)

    def test_index_put(self):
        def assign(x, v):
            y = x.clone()
            y[torch.tensor([1, -1]), torch.tensor([0, 2])] = v
            return y

        def accumulate(x, v):
            return x.index_put((torch.tensor([0, 2, 0]),), v, accumulate=True)
        def index_add(x, v):
            return x.index_add(1, torch.tensor([2, 0, 2]), v, alpha=2.0)
        self.check(assign, randn(4, 3), randn(2), tol=0)
        self.check(accumulate, randn(4, 3), randn(3, 3), tol=1e-6)
        self.check(index_add, randn(4, 3), randn(4, 3), tol=1e-6)

    def test_repeat_interleave_by_a_number(self):
        def repeated(x):
            return torch.repeat_interleave(x, 3, dim=0) * 2 + x.repeat_interleave(1, dim=0).sum()

        def columns(x):
            return x.repeat_interleave(2, dim=1)
        self.check(repeated, randn(4, 2), tol=0, grad_tol=1e-6)
        self.check(columns, randn(4, 2), tol=0, grad_tol=1e-6)

    def test_repeat_interleave_by_a_tensor_is_refused(self):
        def uneven(x):
            return torch.repeat_interleave(x, torch.tensor([1, 2, 0, 3]), dim=0)
        with self.assertRaisesRegex(tracecache.torch.CaptureError, "tensor of repeats"):
            tracecache.torch.compile(uneven, fullgraph=True)(randn(4, 2))

    def test_boolean_mask_is_refused(self):
        def masked(x):
            return x[x > 0]
        with self.assertRaisesRegex(tracecache.torch.CaptureError, "boolean mask"):
            tracecache.torch.compile(masked, fullgraph=True)(randn(5))


class AsStrided(OpCase):
    def test_pooled_channels_last_head(self):
        # PyTorch's adaptive_avg_pool2d to 1x1 of a channels-last tensor is a mean followed by
        # an in-place as_strided_ to channels-last strides (ConvNeXt, Swin).
        def head(x):
            return F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1).flatten(1) * 2
        # Its gradient writes through an as_strided view of a fresh buffer (ConvNeXt's training).
        self.check(head, randn(2, 3, 4, 5), tol=1e-6, grad_tol=1e-6)

    def test_windows_and_orders(self):
        def windows(x):
            return x.reshape(-1).as_strided((4, 3), (2, 1))

        def offset_windows(x):
            return (x * 2).as_strided((3, 3), (3, 1), 2)

        def transposed(x):
            return x.t().as_strided((3, 2), (1, 3))
        self.check(windows, randn(12), tol=0)
        self.check(offset_windows, randn(12), tol=0)
        self.check(transposed, randn(2, 3), tol=0)

    def test_a_source_with_gaps_is_refused(self):
        def gaps(x):
            return x[::2].as_strided((2, 2), (1, 2))
        with self.assertRaisesRegex(tracecache.torch.CaptureError, "dense"):
            tracecache.torch.compile(gaps, fullgraph=True)(randn(8))

    def test_an_offset_into_a_view_is_refused(self):
        def shifted(x):
            return x[1:].as_strided((2, 2), (1, 1), 3)
        with self.assertRaisesRegex(tracecache.torch.CaptureError, "storage_offset"):
            tracecache.torch.compile(shifted, fullgraph=True)(randn(8))


class Volumetric(OpCase):
    def test_conv3d(self):
        x = randn(2, 4, 7, 9, 8)

        def strided_grouped(x, w, b):
            return F.conv3d(x, w, b, stride=(2, 1, 2), padding=(1, 1, 0), dilation=(2, 1, 1), groups=2)

        def wide_stride(x, w):
            return F.conv3d(x, w, None, stride=(3, 2, 1), padding=(2, 1, 1))

        def temporal_only(x, w):
            return F.conv3d(x, w, None, padding=(1, 0, 0))

        def spatial_only(x, w, b):
            return F.conv3d(x, w, b, stride=(1, 2, 2), padding=(0, 1, 1))
        self.check(strided_grouped, x, randn(6, 2, 3, 3, 3, seed=1), randn(6, seed=2), tol=1e-4, grad_tol=1e-4)
        self.check(wide_stride, x, randn(5, 4, 3, 3, 3, seed=1), tol=1e-4, grad_tol=1e-4)
        self.check(temporal_only, x, randn(3, 4, 3, 1, 1, seed=1), tol=1e-4, grad_tol=1e-4)
        self.check(spatial_only, x, randn(3, 4, 1, 3, 3, seed=1), randn(3, seed=2), tol=1e-4, grad_tol=1e-4)

    def test_max_pool3d(self):
        def ceil(x):
            return F.max_pool3d(x, (3, 3, 3), (2, 2, 2), (1, 1, 1), ceil_mode=True)

        def dilated(x):
            return F.max_pool3d(x, (2, 3, 3), (1, 2, 2), (1, 1, 1), dilation=(2, 1, 1))
        for op in (ceil, dilated):
            self.check(op, randn(2, 3, 7, 9, 8), tol=0, grad_tol=1e-6)
            # Ties: the gradient goes to the first maximum in (time, row, column) order.
            ties = torch.randint(0, 3, (2, 2, 6, 5, 5), generator=torch.Generator().manual_seed(3)).float()
            self.check(op, ties, tol=0, grad_tol=1e-6)

    def test_avg_pool3d(self):
        def excluding_padding(x):
            return F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 1), ceil_mode=True, count_include_pad=False)

        def including_padding(x):
            return F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 1), count_include_pad=True)

        def s3d_head(x):
            return F.avg_pool3d(x, (2, 7, 7), 1)
        for op in (excluding_padding, including_padding, s3d_head):
            self.check(op, randn(2, 3, 7, 9, 8), grad_tol=1e-5)

    def test_adaptive_avg_pool3d(self):
        def overlapping(x):
            return F.adaptive_avg_pool3d(x, (3, 4, 2))

        def per_step(x):
            return F.adaptive_avg_pool3d(x, (7, 2, 2))
        for op in (overlapping, per_step):
            self.check(op, randn(2, 3, 7, 9, 8), grad_tol=1e-5)


class Layout(OpCase):
    def test_roll(self):
        def shifted_windows(x):
            return torch.roll(x, shifts=(-3, 2), dims=(1, 2))

        def beyond_the_length(x):
            return torch.roll(x, 7, 2)

        def flattened(x):
            return torch.roll(x, -5)
        for op in (shifted_windows, beyond_the_length, flattened):
            self.check(op, randn(2, 5, 6, 3), tol=0, grad_tol=0)

    def test_slice_and_select_backward_at_any_rank(self):
        # Swin's training: the backward of selects and slices on the first dims of rank-5 and
        # rank-6 tensors (the window partition), and of slices with a step.
        def selects(x):
            return x[1, :, 2] * 3

        def slices(x):
            return x[:, 1:3, :, ::2] + x[1:, :, :, :, 1:2].sum()

        def stepped_to_the_end(x):
            return x[:, ::4] * 2
        self.check(selects, randn(2, 3, 4, 2, 3, 2), tol=0, grad_tol=0)
        self.check(slices, randn(2, 4, 3, 5, 3), tol=1e-6, grad_tol=1e-6)
        self.check(stepped_to_the_end, randn(3, 6), tol=0, grad_tol=0)

    def test_repeat(self):
        def tiled(x):
            return x.repeat(2, 1, 3)

        def new_leading_dims(x):
            return x.repeat(2, 3, 1, 2)
        for op in (tiled, new_leading_dims):
            self.check(op, randn(4, 3, 2), tol=0, grad_tol=1e-6)


class ViewWrites(OpCase):
    def test_writes_reach_the_base(self):
        def slice_add(x):
            y = x * 1
            y[:, 1:3] += 1
            return y

        def batched_images(x):
            out = x.new_full((2, 3, 6, 7), 0.5)
            for i in range(2):
                out[i, :, : x.shape[2], : x.shape[3]].copy_(x[i])
            return out

        def transposed_and_reshaped(x):
            y = x * 2
            y.transpose(0, 1).mul_(3)
            y.reshape(-1)[::5].fill_(-1)
            y.view(2, 3, -1)[:, 0].zero_()
            return y

        def pieces(x):
            y = x + 0
            a, b = y.split([1, 2], dim=1)
            b.add_(10)
            u = y.unbind(0)
            u[1].mul_(-1)
            return y

        def stepped(x):
            y = x * 1
            y[::2, 1::3] += 5
            y[1:, :].relu_()
            return y

        def stale_view(x):
            y = x * 1
            row = y[0]
            y.add_(1)          # row shows it
            col = y[:, 2]
            col.mul_(2)        # and y, and row, show this
            return torch.cat([row, y.reshape(-1, 5)])
        for op in (slice_add, transposed_and_reshaped, stepped, stale_view):
            self.check(op, randn(2, 3, 5), tol=0, grad_tol=1e-6)
        self.check(pieces, randn(2, 3, 5), tol=0)  # autograd refuses writes to split's pieces
        self.check(batched_images, randn(2, 3, 4, 5), tol=0, grad_tol=1e-6)

    def test_a_write_to_an_input_is_refused(self):
        # compile runs a function as a pure one: an input written in place (through a view too)
        # is an error that says what to do.
        def write(x):
            x[:, 0] = 7.0
            return x.sum(0)
        with self.assertRaisesRegex(tracecache.torch.CaptureError, "modifies input0 in place"):
            tracecache.torch.compile(write, fullgraph=True)(randn(3, 4))


class Activations(OpCase):
    def test_hardswish_and_hardsigmoid_backward(self):
        x = torch.tensor([-4.0, -3.0, -2.5, 0.0, 2.9, 3.0, 3.5, float("nan")])
        g = torch.linspace(-1, 1, 8)

        def backward(g, x):
            x = x.detach().requires_grad_()
            return (torch.autograd.grad(F.hardswish(x), x, g)[0], torch.autograd.grad(F.hardsigmoid(x), x, g)[0])
        want = backward(g, x)
        for mode in MODES:
            got = tracecache.torch.compile(backward, fullgraph=True, mode=mode)(g, x)
            for k, (a, b) in enumerate(zip(got, want)):
                torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=f"{mode} output {k}")


class Sources(OpCase):
    def test_new_empty_strided(self):
        def restrided(x):
            y = x.new_empty_strided((3, 4), (1, 3))
            y.copy_(x)
            return y * 2
        self.check(restrided, randn(3, 4), tol=0)


if __name__ == "__main__":
    unittest.main()
