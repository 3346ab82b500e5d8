// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: Config::fromEnvironment (base/config.h) through its getenv hook.
//
// Input: lines "NAME=VALUE" (split at the first '='; a later line for the same name wins, a line
// without '=' is ignored), served by the hook as the process environment. Properties:
//   - it returns a Status and never crashes, throws or reads outside the values;
//   - it only looks up KOLO_* and HOROVOD_* names;
//   - on failure the code is kInvalidArgument, the message names a variable, *out is untouched;
//   - on success the values are in their documented ranges, and printing the config and reading
//     the printed lines back gives the same config. Doubles are left out of that round trip:
//     toString prints them with 6 significant digits, a lossy format by design.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "base/config.h"
#include "test/fuzz/fuzz_util.h"

namespace {

using Env = std::map<std::string, std::string>;

using fuzz::fail;

Env parseLines(const std::string& text) {
  Env env;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    // A NUL ends a C string: what a real environment could hold.
    std::string name = line.substr(0, eq).c_str();
    std::string value = line.substr(eq + 1).c_str();
    env[name] = value;
  }
  return env;
}

kolo::Status parse(const Env& env, kolo::Config* out) {
  return kolo::Config::fromEnvironment(out, [&env](const char* name) -> const char* {
    std::string n(name);
    if (n.rfind("KOLO_", 0) != 0 && n.rfind("HOROVOD_", 0) != 0) fail("looked up " + n);
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

const std::set<std::string>& doubleKnobs() {
  static const std::set<std::string> k = {"KOLO_START_TIMEOUT",
                                          "KOLO_CYCLE_TIME",
                                          "KOLO_STALL_CHECK_TIME_SECONDS",
                                          "KOLO_STALL_SHUTDOWN_TIME_SECONDS",
                                          "KOLO_TIMEOUT_SECONDS",
                                          "KOLO_HEARTBEAT_SECONDS"};
  return k;
}

// The printed lines as an environment, without the "unset" values (-1 ranks, port 0, empty
// strings, which the parser rightly rejects or ignores) and without the doubles.
Env printedEnv(const kolo::Config& c) {
  Env env = parseLines(c.toString());
  for (auto it = env.begin(); it != env.end();) {
    const std::string& n = it->first;
    bool unset = it->second.empty() ||
                 (it->second == "-1" && n.find("RANK") != std::string::npos) ||
                 (it->second == "-1" && n.find("SIZE") != std::string::npos) ||
                 (n == "KOLO_RENDEZVOUS_PORT" && it->second == "0");
    it = unset || doubleKnobs().count(n) != 0 ? env.erase(it) : std::next(it);
  }
  return env;
}

void checkRanges(const kolo::Config& c) {
  auto in = [](double v, double lo, double hi) { return v >= lo && v <= hi; };
  if (c.rank >= 0 && c.size > 0 && c.rank >= c.size) fail("rank >= size accepted");
  if (c.size != -1 && c.size < 1) fail("size out of range");
  if (c.rendezvousPort != 0 && !in(c.rendezvousPort, 1, 65535)) fail("port out of range");
  if (!in(c.fusionThresholdBytes, 0, static_cast<double>(int64_t{1} << 40))) fail("fusion");
  if (!in(c.cycleTimeMs, 0, 60000)) fail("cycle time out of range");
  if (!in(c.timeoutSeconds, 0.1, 1e7)) fail("timeout out of range");
  if (!in(c.heartbeatSeconds, 0.001, 3600)) fail("heartbeat out of range");
  if (!in(c.startTimeoutSeconds, 1, 86400)) fail("start timeout out of range");
  if (!in(static_cast<double>(c.algorithms.segmentBytes), 4096, 1 << 30)) fail("segment bytes");
  if (!in(c.cacheCapacity, 0, 1 << 20)) fail("cache capacity out of range");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Env env = parseLines(std::string(reinterpret_cast<const char*>(data), size));
  kolo::Config sentinel;
  sentinel.hostname = "sentinel";
  kolo::Config c = sentinel;
  kolo::Status st = parse(env, &c);
  if (!st.isOk()) {
    if (st.code() != kolo::ErrorCode::kInvalidArgument) fail("error code " + st.toString());
    if (st.message().find("KOLO_") == std::string::npos &&
        st.message().find("HOROVOD_") == std::string::npos) {
      fail("error names no variable: " + st.message());
    }
    if (c.toString() != sentinel.toString()) fail("a failed parse modified its output");
    return 0;
  }
  checkRanges(c);
  kolo::Config again;
  kolo::Status st2 = parse(printedEnv(c), &again);
  if (!st2.isOk()) fail("the printed config does not parse: " + st2.toString());
  Env a = parseLines(c.toString()), b = parseLines(again.toString());
  for (const auto& name : doubleKnobs()) {
    a.erase(name);
    b.erase(name);
  }
  if (a != b) fail("printing and re-reading the config changed it");
  return 0;
}
