// SPDX-License-Identifier: Apache-2.0
// Logging: one spdlog logger per Runtime, its lines prefixed with the rank ("[kolo rank 3]").
// Level from KOLO_LOG_LEVEL (trace|debug|info|warning|error|fatal|off). Output to stderr.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace kolo {

using Logger = std::shared_ptr<spdlog::logger>;

// Never fails: an unknown level falls back to warning (Config validated it already).
Logger makeLogger(int rank, const std::string& level);

}  // namespace kolo
