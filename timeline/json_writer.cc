// SPDX-License-Identifier: Apache-2.0
#include "timeline/json_writer.h"

#include <charconv>

#include <cstdio>
#include <ctime>

namespace kolo {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when the bytes there are not
// one (RFC 3629, table 3-7 of the Unicode standard). Checking the second byte's range per lead
// byte is what rejects overlongs, surrogates and values above U+10FFFF.
size_t utf8SequenceLength(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](size_t k) { return k < s.size() && (byte(k) & 0xC0) == 0x80; };
  unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(i + 1) ? 2 : 0;
  unsigned char lo = 0x80, hi = 0xBF;
  size_t len = 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + 1 >= s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (!cont(i + k)) return 0;
  }
  return len;
}

}  // namespace

void appendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t len = utf8SequenceLength(s, i);
      if (len == 0) {
        out.append(kReplacement);
        ++i;
      } else {
        out.append(s.data() + i, len);
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default:
        if (c < 0x20) {
          out.append("\\u00");
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

// std::to_chars: the writer formats ~10 numbers per event, and snprintf was its hot spot.
void appendJsonInt(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

void appendJsonMicros(std::string& out, int64_t ns) {
  if (ns < 0) ns = 0;
  char buf[32];
  char* p = std::to_chars(buf, buf + 24, ns / 1000).ptr;
  const int64_t frac = ns % 1000;  // always three digits after the point
  *p++ = '.';
  *p++ = static_cast<char>('0' + frac / 100);
  *p++ = static_cast<char>('0' + frac / 10 % 10);
  *p++ = static_cast<char>('0' + frac % 10);
  out.append(buf, static_cast<size_t>(p - buf));
}

void appendJsonIntArray(std::string& out, const std::vector<int64_t>& values) {
  out.push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    appendJsonInt(out, values[i]);
  }
  out.push_back(']');
}

std::string formatIso8601Utc(int64_t unixMicros) {
  int64_t seconds = unixMicros / 1000000;
  int64_t micros = unixMicros % 1000000;
  if (micros < 0) {  // floor division for times before 1970
    micros += 1000000;
    seconds -= 1;
  }
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[64];
  int n = std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ",
                        utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                        utc.tm_sec, static_cast<long long>(micros));
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace kolo
