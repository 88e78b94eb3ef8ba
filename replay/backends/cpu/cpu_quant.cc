// quantize_linear and dequantize_linear on the cpu (cpu_quant.h).
#include "replay/backends/cpu/cpu_quant.h"

#include <algorithm>

#include "capture/core/shape.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/reference_kernels.h"
#include "replay/backends/cpu/cpu_loops.h"

namespace tracecache::cpu {

namespace {

// A small operand (scale or zero point) as f32 values, as the reference reads it.
HostBuffer floats_of(const HostBuffer& b) {
  HostBuffer f(DType::kF32, b.shape());
  ref::convert_through_float(b, f);
  return f;
}

// out[i] = f(x[i], scale, zero point) over runs of `inner` elements sharing one scale and zero
// point (see the header).
template <typename X, typename O, typename F>
void quant_runs(const HostBuffer& x_buf, const HostBuffer& scale_buf, const HostBuffer& zp_buf, HostBuffer& out,
                F f) {
  const Shape& s = out.shape();
  const IntList ss = broadcast_strides(scale_buf.shape(), s), zs = broadcast_strides(zp_buf.shape(), s);
  int k = s.rank();  // dims [k, rank) have one scale and zero point
  while (k > 0 && ss[k - 1] == 0 && zs[k - 1] == 0) --k;
  int64_t inner = 1;
  for (int d = k; d < s.rank(); ++d) inner *= s[d];
  const HostBuffer scale_f = floats_of(scale_buf), zp_f = floats_of(zp_buf);
  const float* scale = scale_f.data<float>();
  const float* zp = zp_f.data<float>();
  const X* x = x_buf.data<X>();
  O* o = out.data<O>();
  const int64_t numel = out.numel();
  if (numel == 0) return;
  parallel_chunks(numel, numel, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    while (i < end) {
      const int64_t run = i / inner;
      const int64_t run_end = std::min(end, (run + 1) * inner);
      int64_t rest = run, so = 0, zo = 0;
      for (int d = k - 1; d >= 0; --d) {
        const int64_t idx = rest % s[d];
        rest /= s[d];
        so += idx * ss[d];
        zo += idx * zs[d];
      }
      const float sc = scale[so], z = zp[zo];
      for (; i < run_end; ++i) o[i] = f(static_cast<float>(x[i]), sc, z);
    }
  });
}

}  // namespace

bool run_quant_op(OpKind op, std::span<const HostBuffer* const> inputs, HostBuffer& out) {
  const HostBuffer& x = *inputs[0];
  if (op == OpKind::kQuantizeLinear) {
    dispatch_dtype(x.dtype(), [&]<typename X>() {
      if (out.dtype() == DType::kI8) {
        quant_runs<X, int8_t>(x, *inputs[1], *inputs[2], out, ew::QuantizeLinear<int8_t>{});
      } else {
        quant_runs<X, uint8_t>(x, *inputs[1], *inputs[2], out, ew::QuantizeLinear<uint8_t>{});
      }
    });
    return true;
  }
  if (op == OpKind::kDequantizeLinear) {
    dispatch_dtype(x.dtype(), [&]<typename X>() {
      dispatch_dtype(out.dtype(), [&]<typename O>() {
        quant_runs<X, O>(x, *inputs[1], *inputs[2], out, [](float v, float sc, float z) {
          return static_cast<O>(ew::DequantizeLinear{}(v, sc, z));
        });
      });
    });
    return true;
  }
  return false;
}

}  // namespace tracecache::cpu
