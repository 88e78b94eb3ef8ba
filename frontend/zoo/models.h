// The zoo's model factories (internal to zoo/; use make_model in frontend/zoo/model.h). Each returns the
// spec of its architecture under `options`, with the errors make_model documents.
#pragma once

#include <string_view>

#include "frontend/zoo/model.h"

namespace tracecache::zoo::detail {

// resnet18, resnet50, resnext50_32x4d.
Result<ModelSpec> make_resnet(std::string_view name, const ModelOptions& options);
Result<ModelSpec> make_alexnet(const ModelOptions& options);
Result<ModelSpec> make_vgg16(const ModelOptions& options);
Result<ModelSpec> make_squeezenet1_1(const ModelOptions& options);
Result<ModelSpec> make_mobilenet_v2(const ModelOptions& options);
Result<ModelSpec> make_mnasnet1_0(const ModelOptions& options);
Result<ModelSpec> make_vit_b_16(const ModelOptions& options);
Result<ModelSpec> make_bert_base(const ModelOptions& options);

}  // namespace tracecache::zoo::detail
