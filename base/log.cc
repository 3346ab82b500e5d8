// SPDX-License-Identifier: Apache-2.0
#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace kolo {

Logger makeLogger(int rank, const std::string& level) {
  // Not registered in spdlog's global registry: each Runtime owns its logger.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("kolo", sink);
  std::string prefix = rank >= 0 ? "[kolo rank " + std::to_string(rank) + "] " : "[kolo] ";
  logger->set_pattern(prefix + "%l: %v");
  std::string l = level == "warn" ? "warning" : level == "fatal" ? "critical" : level;
  auto parsed = spdlog::level::from_str(l);
  if (parsed == spdlog::level::off && l != "off") parsed = spdlog::level::warn;
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::warn);
  return logger;
}

}  // namespace kolo
