// SPDX-License-Identifier: Apache-2.0
#include "base/tensor.h"

namespace kolo {

std::string shapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace kolo
