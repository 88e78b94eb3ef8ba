// Reference kernels of the ops ONNX models need (issue 16) that are not elementwise or
// reductions: conv_transpose2d. Semantics in docs/ops.md.
#include <array>
#include <cstdint>

#include "capture/ops/attr_views.h"
#include "capture/ops/reference_kernels.h"

namespace tracecache::ref {

// conv2d_input_grad of the conv2d from the output plane to x's plane (sums in double, rounded
// once), then the bias added in f32.
void conv_transpose2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ConvTranspose2dAttrs a(attrs);
  const Shape& s = out.shape();
  const std::array<AttrValue, 5> grad_attrs = {
      AttrValue::of_ints(a.stride()), AttrValue::of_ints(a.padding()), AttrValue::of_ints(a.dilation()),
      AttrValue::of_int(a.groups()), AttrValue::of_ints({s[2], s[3]})};
  const std::array<const HostBuffer*, 2> operands = {in[0], in[1]};
  conv2d_input_grad(operands, grad_attrs, out);
  if (in.size() < 3) return;
  const float* bias = in[2]->data<float>();
  float* o = out.data<float>();
  const int64_t plane = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n) {
    for (int64_t c = 0; c < s[1]; ++c) {
      float* p = o + (n * s[1] + c) * plane;
      for (int64_t i = 0; i < plane; ++i) p[i] += bias[c];
    }
  }
}

}  // namespace tracecache::ref
