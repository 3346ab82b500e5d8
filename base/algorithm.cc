// SPDX-License-Identifier: Apache-2.0
// Names of the algorithm values (base/algorithm.h).
#include "base/algorithm.h"

#include <algorithm>
#include <cctype>

namespace kolo::ops {

const char* toString(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kNative:
      return "native";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kHalvingDoubling:
      return "halving_doubling";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kBruck:
      return "bruck";
  }
  return "unknown-algorithm";
}

const char* toString(Hierarchical h) {
  switch (h) {
    case Hierarchical::kAuto:
      return "auto";
    case Hierarchical::kOn:
      return "on";
    case Hierarchical::kOff:
      return "off";
  }
  return "unknown-hierarchical";
}

bool parseAlgorithm(const std::string& text, Algorithm* out) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (Algorithm a :
       {Algorithm::kAuto, Algorithm::kRing, Algorithm::kNative, Algorithm::kRecursiveDoubling,
        Algorithm::kHalvingDoubling, Algorithm::kTree, Algorithm::kBruck}) {
    if (lower == toString(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

bool appliesTo(Algorithm a, OpType op) {
  switch (a) {
    case Algorithm::kAuto:
    case Algorithm::kRing:
    case Algorithm::kNative:
      return true;
    case Algorithm::kRecursiveDoubling:
    case Algorithm::kHalvingDoubling:
      return op == OpType::kAllreduce;
    case Algorithm::kTree:
      return op == OpType::kBroadcast;
    case Algorithm::kBruck:
      return op == OpType::kAllgather;
  }
  return false;
}

}  // namespace kolo::ops
