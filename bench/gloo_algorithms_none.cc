// SPDX-License-Identifier: Apache-2.0
// gloo_algorithms.h for a build without Gloo (bench/CMakeLists.txt picks this file then).
#include "bench/gloo_algorithms.h"

namespace kolo::bench {

Status timeGlooAlgorithms(const BenchJob&, const std::string&, size_t, long, long,
                          GlooAlgorithmTimes*) {
  return Status(ErrorCode::kUnsupported, "kolo was built without Gloo (KOLO_WITH_GLOO)");
}

}  // namespace kolo::bench
