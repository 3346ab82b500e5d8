// SPDX-License-Identifier: Apache-2.0
// Small helpers that append JSON text to a std::string: just what the timeline's trace-event
// output needs, so no JSON library is pulled in. All functions are pure, allocation happens only
// in `out`, and they are safe to call from any thread on distinct strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kolo {

// Appends `s` as a quoted JSON string literal. Quotes, backslashes and control characters are
// escaped (\" \\ \n \t ... or \u00XX); valid UTF-8 passes through unchanged; every byte that is
// not part of a well-formed UTF-8 sequence (stray continuation bytes, overlongs, surrogates,
// code points above U+10FFFF, truncated sequences) becomes U+FFFD, so the output is always valid
// UTF-8 JSON whatever bytes a tensor name holds.
void appendJsonString(std::string& out, std::string_view s);

// Appends a signed decimal integer.
void appendJsonInt(std::string& out, int64_t v);

// Appends a duration given in nanoseconds as microseconds with three decimals ("12.345"), the
// unit of the trace-event "ts" field. Negative values are clamped to 0.
void appendJsonMicros(std::string& out, int64_t ns);

// Appends a JSON array of integers: "[2,3,4]".
void appendJsonIntArray(std::string& out, const std::vector<int64_t>& values);

// Formats a wall-clock time, given as microseconds since the Unix epoch, as ISO 8601 in UTC with
// microseconds: "2024-05-01T12:34:56.123456Z".
std::string formatIso8601Utc(int64_t unixMicros);

}  // namespace kolo
