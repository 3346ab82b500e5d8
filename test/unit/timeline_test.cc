// SPDX-License-Identifier: Apache-2.0
// Timeline tests: the file is strict JSON (checked by a small parser below and, where available,
// by Python's json module), holds the events the issue asks for, survives flush/stop/crash, and
// the writer neither spins nor blocks producers; one writer per file; a failed or killed write
// leaves a file that is valid or that repair() makes valid.
#include "timeline/timeline.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "timeline/json_writer.h"

namespace kolo {
namespace {

// ---- a strict JSON parser (RFC 8259), enough to inspect traces --------------------------------

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;

  const Json* get(const std::string& key) const {
    for (const auto& kv : obj) {
      if (kv.first == key) return &kv.second;
    }
    return nullptr;
  }
  std::string getStr(const std::string& key) const {
    const Json* v = get(key);
    return v && v->kind == kString ? v->str : std::string("<missing>");
  }
  double getNum(const std::string& key) const {
    const Json* v = get(key);
    return v && v->kind == kNumber ? v->num : -1e300;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}
  // Throws std::runtime_error with the offset on any deviation from the grammar.
  Json parseDocument() {
    Json v = value();
    ws();
    if (i_ != s_.size()) fail("trailing bytes");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string(what) + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  void expect(char c) {
    if (i_ >= s_.size() || s_[i_] != c) fail("unexpected character");
    ++i_;
  }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }
  Json value() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    char c = s_[i_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      for (;;) {
        ws();
        std::string key = string();
        ws();
        expect(':');
        v.obj.emplace_back(key, value());
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      for (;;) {
        v.arr.push_back(value());
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      v.str = string();
      return v;
    }
    if (literal("true")) {
      v.kind = Json::kBool;
      v.b = true;
      return v;
    }
    if (literal("false")) {
      v.kind = Json::kBool;
      return v;
    }
    if (literal("null")) return v;
    v.kind = Json::kNumber;
    v.num = number();
    return v;
  }
  double number() {
    size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else {
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) fail("bad number");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("bad fraction");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("bad exponent");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    return std::stod(s_.substr(start, i_ - start));
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad hex digit");
    }
    return v;
  }
  static void putUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("raw control character in string");
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u':
          putUtf8(out, hex4());
          break;  // no surrogate pairs in our output
        default:
          fail("bad escape");
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

// ---- helpers ---------------------------------------------------------------------------------

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json parseFile(const std::string& path) {
  std::string text = readFile(path);
  INFO("file " << path << " (" << text.size() << " bytes)");
  Json doc;
  try {
    doc = Parser(text).parseDocument();
  } catch (const std::exception& e) {
    FAIL("invalid JSON: " << e.what() << "\n" << text.substr(0, 2000));
  }
  REQUIRE(doc.kind == Json::kObject);
  REQUIRE(doc.get("traceEvents") != nullptr);
  REQUIRE(doc.get("traceEvents")->kind == Json::kArray);
  REQUIRE(doc.get("otherData") != nullptr);
  return doc;
}

// Python's json module as a second, independent judge (strict UTF-8 decoding too).
bool pythonAccepts(const std::string& path) {
  std::string cmd =
      "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1], "
      "encoding=\"utf-8\", errors=\"strict\"))' '" +
      path + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}
bool havePython() { return access("/usr/bin/python3", X_OK) == 0; }

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kolo_timeline_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") ::unlink((path + "/" + n).c_str());
      }
      closedir(d);
    }
    ::rmdir(path.c_str());
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

const std::vector<Json>& events(const Json& doc) { return doc.get("traceEvents")->arr; }

// The row (tid) labelled with `name`, or -1.
int64_t rowOf(const Json& doc, const std::string& name) {
  for (const Json& e : events(doc)) {
    if (e.getStr("name") == "thread_name" && e.getStr("ph") == "M" && e.get("args") &&
        e.get("args")->getStr("name") == name) {
      return static_cast<int64_t>(e.getNum("tid"));
    }
  }
  return -1;
}

// Non-metadata events on one row, in file order.
std::vector<const Json*> rowEvents(const Json& doc, int64_t tid) {
  std::vector<const Json*> out;
  for (const Json& e : events(doc)) {
    if (e.getStr("ph") != "M" && static_cast<int64_t>(e.getNum("tid")) == tid) out.push_back(&e);
  }
  return out;
}

int countNamed(const Json& doc, const std::string& name) {
  int n = 0;
  for (const Json& e : events(doc)) n += e.getStr("name") == name;
  return n;
}

void emitAllreduce(Timeline& t, const std::string& name) {
  t.negotiateStart(name, OpType::kAllreduce);
  t.negotiateRankReady(name, 0);
  t.negotiateRankReady(name, 1);
  t.negotiateEnd(name);
  t.opStart(name, OpType::kAllreduce);
  t.activityStart(name, "QUEUE");
  t.activityEnd(name);
  t.activityStart(name, "MEMCPY_IN_FUSION_BUFFER");
  t.activityEnd(name);
  t.activityStart(name, "MPI_ALLREDUCE");
  t.activityEnd(name);
  t.activityStart(name, "MEMCPY_OUT_FUSION_BUFFER");
  t.activityEnd(name);
  t.opEnd(name, DataType::kFloat32, {2, 3});
}

// CPU time (user + system, in clock ticks) of this process's thread named `comm`, or -1.
long threadCpuTicks(const std::string& comm) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  long result = -1;
  while (dirent* e = readdir(d)) {
    std::string tid = e->d_name;
    if (tid == "." || tid == "..") continue;
    std::string base = "/proc/self/task/" + tid;
    std::string name = readFile(base + "/comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (name != comm) continue;
    std::string stat = readFile(base + "/stat");
    size_t close = stat.rfind(')');  // fields after the "(comm)" are space separated
    std::istringstream in(stat.substr(close + 2));
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    // After the comm: state is field 3, utime field 14, stime field 15 (1-based, man 5 proc).
    if (f.size() > 12) result = std::stol(f[11]) + std::stol(f[12]);
  }
  closedir(d);
  return result;
}

}  // namespace

// ---- json_writer -----------------------------------------------------------------------------

TEST_CASE("json_writer escapes strings and keeps the output valid UTF-8", "[timeline]") {
  auto esc = [](const std::string& s) {
    std::string out;
    appendJsonString(out, s);
    return out;
  };
  CHECK(esc("plain/name.1") == "\"plain/name.1\"");
  CHECK(esc("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(esc("\n\r\t\b\f") == "\"\\n\\r\\t\\b\\f\"");
  CHECK(esc(std::string("\x01\x1f\x00z", 4)) == "\"\\u0001\\u001f\\u0000z\"");
  CHECK(esc("caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80") ==
        "\"caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80\"");
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(esc("\xFF") == "\"" + fffd + "\"");
  CHECK(esc("a\x80z") == "\"a" + fffd + "z\"");                    // stray continuation byte
  CHECK(esc("\xC0\xAF") == "\"" + fffd + fffd + "\"");             // overlong '/'
  CHECK(esc("\xED\xA0\x80") == "\"" + fffd + fffd + fffd + "\"");  // surrogate U+D800
  CHECK(esc("\xF4\x90\x80\x80") == "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
  CHECK(esc("x\xE6\x97") == "\"x" + fffd + fffd + "\"");  // truncated at the end
}

TEST_CASE("json_writer formats numbers, micros and ISO 8601 times", "[timeline]") {
  std::string s;
  appendJsonInt(s, -42);
  s += ' ';
  appendJsonMicros(s, 1234567);
  s += ' ';
  appendJsonMicros(s, 5);
  s += ' ';
  appendJsonMicros(s, -7);
  s += ' ';
  appendJsonIntArray(s, {2, 3, 4});
  s += ' ';
  appendJsonIntArray(s, {});
  CHECK(s == "-42 1234.567 0.005 0.000 [2,3,4] []");
  CHECK(formatIso8601Utc(0) == "1970-01-01T00:00:00.000000Z");
  CHECK(formatIso8601Utc(1714566896123456LL) == "2024-05-01T12:34:56.123456Z");
  CHECK(formatIso8601Utc(-1) == "1969-12-31T23:59:59.999999Z");
}

// ---- Timeline --------------------------------------------------------------------------------

TEST_CASE("timeline records negotiation, op, activities, args and metadata", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("trace.json");
  const auto wallBefore = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  Timeline t;
  REQUIRE(t.start(path, false, 3).isOk());
  CHECK(t.active());
  CHECK_FALSE(t.markCycles());
  emitAllreduce(t, "grad/layer1.weight");
  t.opStart("other", OpType::kBroadcast);
  t.opEnd("other", DataType::kInt64, {});
  t.markCycleStart();  // markCycles off: no marker
  t.stop();
  CHECK_FALSE(t.active());
  t.stop();  // idempotent

  Json doc = parseFile(path);
  if (havePython()) CHECK(pythonAccepts(path));
  CHECK(countNamed(doc, "CYCLE_START") == 0);

  const Json& other = *doc.get("otherData");
  CHECK(other.getNum("rank") == 3);
  CHECK(other.getNum("dropped_events") == 0);
  CHECK(other.getStr("state") == "stopped");
  const double startUs = other.getNum("start_time_unix_us");
  CHECK(startUs >= static_cast<double>(wallBefore));
  CHECK(startUs < static_cast<double>(wallBefore) + 60e6);
  CHECK(other.getStr("start_time") == formatIso8601Utc(static_cast<int64_t>(startUs)));
  bool processNamed = false;
  for (const Json& e : events(doc)) {
    if (e.getStr("name") == "process_name") {
      processNamed = true;
      CHECK(e.getNum("pid") == 3);
      CHECK(e.get("args")->getStr("start_time") == other.getStr("start_time"));
      // Horovod's name for the same wall-clock start, in the process_name metadata's args.
      CHECK(e.get("args")->getNum("start_time_since_epoch_in_micros") == startUs);
    }
  }
  CHECK(processNamed);

  const int64_t tid = rowOf(doc, "grad/layer1.weight");
  REQUIRE(tid > 0);
  CHECK(rowOf(doc, "other") > 0);
  CHECK(rowOf(doc, "other") != tid);
  std::vector<const Json*> row = rowEvents(doc, tid);
  const std::vector<std::pair<std::string, std::string>> want = {{"NEGOTIATE_ALLREDUCE", "B"},
                                                                 {"0", "X"},
                                                                 {"1", "X"},
                                                                 {"", "E"},
                                                                 {"ALLREDUCE", "B"},
                                                                 {"QUEUE", "B"},
                                                                 {"", "E"},
                                                                 {"MEMCPY_IN_FUSION_BUFFER", "B"},
                                                                 {"", "E"},
                                                                 {"MPI_ALLREDUCE", "B"},
                                                                 {"", "E"},
                                                                 {"MEMCPY_OUT_FUSION_BUFFER", "B"},
                                                                 {"", "E"},
                                                                 {"", "E"}};
  REQUIRE(row.size() == want.size());
  double lastTs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("event " << i);
    CHECK(row[i]->getStr("name") == (want[i].second == "E" ? "<missing>" : want[i].first));
    CHECK(row[i]->getStr("ph") == want[i].second);
    CHECK(row[i]->getNum("pid") == 3);
    CHECK(row[i]->getNum("ts") >= lastTs);
    lastTs = row[i]->getNum("ts");
  }
  CHECK(lastTs < 60e6);  // microseconds since start, not since boot
  CHECK(row[1]->get("args")->getNum("rank") == 0);
  CHECK(row[2]->get("args")->getNum("rank") == 1);
  CHECK(row[1]->getNum("dur") == 0);
  const Json* args = row.back()->get("args");
  REQUIRE(args != nullptr);
  CHECK(args->getStr("dtype") == "float32");
  const Json* shape = args->get("shape");
  REQUIRE(shape != nullptr);
  REQUIRE(shape->arr.size() == 2);
  CHECK(shape->arr[0].num == 2);
  CHECK(shape->arr[1].num == 3);
  std::vector<const Json*> otherRow = rowEvents(doc, rowOf(doc, "other"));
  REQUIRE(otherRow.size() == 2);
  CHECK(otherRow[0]->getStr("name") == "BROADCAST");
  CHECK(otherRow[1]->get("args")->getStr("dtype") == "int64");
  CHECK(otherRow[1]->get("args")->get("shape")->arr.empty());
}

TEST_CASE("timeline marks coordinator cycles when asked", "[timeline]") {
  TempDir dir;
  Timeline t;
  REQUIRE(t.start(dir.file("cycles.json"), true, 0).isOk());
  CHECK(t.markCycles());
  t.markCycleStart();
  emitAllreduce(t, "x");
  t.markCycleStart();
  t.stop();
  Json doc = parseFile(dir.file("cycles.json"));
  CHECK(countNamed(doc, "CYCLE_START") == 2);
  for (const Json& e : events(doc)) {
    if (e.getStr("name") == "CYCLE_START") CHECK(e.getStr("ph") == "i");
  }
}

TEST_CASE("timeline start/stop/start writes separate files", "[timeline]") {
  TempDir dir;
  Timeline t;
  REQUIRE(t.start(dir.file("a.json"), false, 0).isOk());
  emitAllreduce(t, "tensor_a");
  t.stop();
  emitAllreduce(t, "ignored_while_stopped");
  REQUIRE(t.start(dir.file("b.json"), false, 0).isOk());
  emitAllreduce(t, "tensor_b");
  // Starting a third file while b is active stops b first.
  REQUIRE(t.start(dir.file("c.json"), false, 0).isOk());
  emitAllreduce(t, "tensor_c");
  t.stop();

  Json a = parseFile(dir.file("a.json"));
  Json b = parseFile(dir.file("b.json"));
  Json c = parseFile(dir.file("c.json"));
  CHECK(rowOf(a, "tensor_a") > 0);
  CHECK(rowOf(a, "tensor_b") < 0);
  CHECK(rowOf(b, "tensor_b") > 0);
  CHECK(rowOf(b, "tensor_a") < 0);
  CHECK(rowOf(b, "tensor_c") < 0);
  CHECK(rowOf(c, "tensor_c") > 0);
  for (const Json* d : {&a, &b, &c}) {
    CHECK(rowOf(*d, "ignored_while_stopped") < 0);
    CHECK(d->get("otherData")->getStr("state") == "stopped");
  }
}

TEST_CASE("timeline start twice with the same path is harmless", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("same.json");
  Timeline t;
  REQUIRE(t.start(path, false, 1).isOk());
  emitAllreduce(t, "first");
  t.flush();
  REQUIRE(t.start(path, true, 7).isOk());  // keeps the file, its events and rank
  CHECK(t.active());
  CHECK(t.markCycles());  // the new setting applies, as Horovod's start_timeline
  emitAllreduce(t, "second");
  REQUIRE(t.start(dir.path + "/./same.json", false, 1).isOk());  // same file, other spelling
  CHECK_FALSE(t.markCycles());
  emitAllreduce(t, "third");
  t.stop();
  Json doc = parseFile(path);
  CHECK(rowOf(doc, "first") > 0);
  CHECK(rowOf(doc, "second") > 0);
  CHECK(rowOf(doc, "third") > 0);
  CHECK(doc.get("otherData")->getNum("rank") == 1);
}

TEST_CASE("timeline start reports an unwritable path as kIo", "[timeline]") {
  Timeline t;
  const std::string bad = "/nonexistent_kolo_dir/trace.json";
  Status s = t.start(bad, false, 0);
  CHECK(s.code() == ErrorCode::kIo);
  CHECK(s.message().find(bad) != std::string::npos);
  CHECK_FALSE(t.active());
  t.negotiateStart("x", OpType::kAllreduce);  // inactive: no-ops
  t.flush();
  CHECK(t.droppedEvents() == 0);
  t.stop();
}

TEST_CASE("timeline start on a FIFO or a directory fails at once instead of blocking",
          "[timeline]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe.json");
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  pid_t child = fork();  // a start that blocked would hang the test: give it 20 s, in a child
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(20);
    Timeline t;
    Status s = t.start(fifo, false, 0);  // no reader: opening it for writing would block
    Status d = t.start(dir.path, false, 0);
    _exit(s.code() == ErrorCode::kIo && s.message().find(fifo) != std::string::npos &&
                  d.code() == ErrorCode::kIo && !t.active()
              ? 0
              : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));  // not killed by the alarm
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("timeline file is valid JSON after every flush while active", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("live.json");
  Timeline t;
  REQUIRE(t.start(path, true, 0).isOk());
  {
    Json doc = parseFile(path);  // valid right after start, before any event
    CHECK(doc.get("otherData")->getStr("state") == "running");
  }
  for (int round = 0; round < 3; ++round) {
    const std::string name = "live_" + std::to_string(round);
    emitAllreduce(t, name);
    t.markCycleStart();
    t.flush();
    Json doc = parseFile(path);
    if (havePython()) CHECK(pythonAccepts(path));
    CHECK(doc.get("otherData")->getStr("state") == "running");
    for (int k = 0; k <= round; ++k) {
      INFO("round " << round << " tensor " << k);
      const int64_t tid = rowOf(doc, "live_" + std::to_string(k));
      REQUIRE(tid > 0);
      CHECK(rowEvents(doc, tid).size() == 14);
    }
    CHECK(countNamed(doc, "CYCLE_START") == round + 1);
  }
  CHECK(t.writeStatus().isOk());
}

TEST_CASE("timeline writes on its own within a bounded time, without flush", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("periodic.json");
  Timeline t;
  REQUIRE(t.start(path, false, 0).isOk());
  emitAllreduce(t, "periodic_tensor");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = readFile(path).find("periodic_tensor") != std::string::npos;
  }
  REQUIRE(seen);
  Json doc = parseFile(path);
  CHECK(rowEvents(doc, rowOf(doc, "periodic_tensor")).size() == 14);
}

TEST_CASE("timeline file stays valid when the process dies of an exception", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("crash.json");
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGABRT, SIG_DFL);  // die quietly, without the test framework's report
    if (!std::freopen("/dev/null", "w", stderr)) _exit(5);
    auto* t = new Timeline();  // never destroyed: no orderly stop
    if (!t->start(path, true, 2).isOk()) _exit(3);
    emitAllreduce(*t, "before_flush");
    t->flush();
    emitAllreduce(*t, "before_crash");  // written by the periodic write, not by flush
    t->negotiateStart("stuck_tensor", OpType::kAllgather);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    std::thread([] { throw std::runtime_error("boom in a runtime thread"); }).join();
    _exit(4);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  Json doc = parseFile(path);
  if (havePython()) CHECK(pythonAccepts(path));
  CHECK(doc.get("otherData")->getStr("state") == "running");
  CHECK(rowEvents(doc, rowOf(doc, "before_flush")).size() == 14);
  CHECK(rowEvents(doc, rowOf(doc, "before_crash")).size() == 14);
  std::vector<const Json*> stuck = rowEvents(doc, rowOf(doc, "stuck_tensor"));
  REQUIRE(stuck.size() == 1);  // an open NEGOTIATE shows what was stuck
  CHECK(stuck[0]->getStr("name") == "NEGOTIATE_ALLGATHER");
}

TEST_CASE("timeline drops events on overflow without blocking and records the count",
          "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("overflow.json");
  Timeline t(8);  // tiny queue: the writer cannot keep up with a tight producer loop
  REQUIRE(t.start(path, false, 0).isOk());
  const int kEvents = 200000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kEvents / 2; ++i) {
    t.activityStart("flood", "MEMCPY_IN_FUSION_BUFFER");
    t.activityEnd("flood");
  }
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  CHECK(elapsed < std::chrono::seconds(20));
  t.stop();
  const uint64_t dropped = t.droppedEvents();
  CHECK(dropped > 0);
  CHECK(dropped < static_cast<uint64_t>(kEvents));
  Json doc = parseFile(path);
  CHECK(doc.get("otherData")->getNum("dropped_events") == static_cast<double>(dropped));
  const int64_t tid = rowOf(doc, "flood");
  REQUIRE(tid > 0);
  // Every event was either written or counted as dropped.
  CHECK(rowEvents(doc, tid).size() + dropped == static_cast<uint64_t>(kEvents));
}

TEST_CASE("timeline accepts events from many threads at once", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("threads.json");
  Timeline t;
  REQUIRE(t.start(path, true, 0).isOk());
  const int kThreads = 8, kPairs = 1000;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&t, k] {
      const std::string name = "thread_tensor_" + std::to_string(k);
      for (int i = 0; i < kPairs; ++i) {
        t.activityStart(name, "RING_ALLREDUCE");
        t.activityEnd(name);
        if (i % 100 == 0) t.markCycleStart();
        if (i % 250 == 0) t.flush();
      }
    });
  }
  for (auto& th : threads) th.join();
  t.stop();
  CHECK(t.droppedEvents() == 0);  // 16000 events < queue capacity: nothing may drop
  Json doc = parseFile(path);
  CHECK(countNamed(doc, "CYCLE_START") == kThreads * (kPairs / 100));
  for (int k = 0; k < kThreads; ++k) {
    INFO("thread " << k);
    const int64_t tid = rowOf(doc, "thread_tensor_" + std::to_string(k));
    REQUIRE(tid > 0);
    std::vector<const Json*> row = rowEvents(doc, tid);
    REQUIRE(row.size() == 2 * kPairs);
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i]->getStr("ph") != (i % 2 == 0 ? "B" : "E")) FAIL("B/E out of order at " << i);
    }
  }
}

TEST_CASE("timeline escapes tensor and activity names", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("escape.json");
  const std::vector<std::string> names = {"quote\"name",
                                          "back\\slash",
                                          "new\nline\ttab",
                                          std::string("ctl\x01\x1f", 5),
                                          "caf\xC3\xA9/\xE6\x97\xA5",
                                          "bad\xFFutf8"};
  Timeline t;
  REQUIRE(t.start(path, false, 0).isOk());
  for (const std::string& n : names) {
    t.opStart(n, OpType::kAllgather);
    t.activityStart(n, "act\"ivity\\");
    t.activityEnd(n);
    t.opEnd(n, DataType::kBFloat16, {5});
  }
  t.stop();
  Json doc = parseFile(path);
  if (havePython()) CHECK(pythonAccepts(path));
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    INFO("name " << i);
    const int64_t tid = rowOf(doc, names[i]);
    REQUIRE(tid > 0);
    std::vector<const Json*> row = rowEvents(doc, tid);
    REQUIRE(row.size() == 4);
    CHECK(row[0]->getStr("name") == "ALLGATHER");
    CHECK(row[1]->getStr("name") == "act\"ivity\\");
    CHECK(row[3]->get("args")->getStr("dtype") == "bfloat16");
  }
  CHECK(rowOf(doc, "bad\xEF\xBF\xBDutf8") > 0);  // invalid byte shown as U+FFFD
}

TEST_CASE("timeline writer sleeps while idle", "[timeline]") {
  TempDir dir;
  Timeline t;
  REQUIRE(t.start(dir.file("idle.json"), false, 0).isOk());
  emitAllreduce(t, "warmup");
  t.flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // let the periodic write settle
  const uint64_t wakeups0 = t.writerWakeups();
  const long ticks0 = threadCpuTicks("kolo-timeline");
  REQUIRE(ticks0 >= 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t wakeups1 = t.writerWakeups();
  const long ticks1 = threadCpuTicks("kolo-timeline");
  CHECK(wakeups1 - wakeups0 <= 1);  // at most the once-a-second idle re-arm
  CHECK(ticks1 - ticks0 <= 1);      // a spinning thread would burn ~30 ticks here
  t.stop();
  CHECK(threadCpuTicks("kolo-timeline") == -1);  // joined
}

TEST_CASE("timeline destructor stops and closes the file", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("dtor.json");
  {
    Timeline t;
    REQUIRE(t.start(path, false, 0).isOk());
    emitAllreduce(t, "scoped");
  }
  Json doc = parseFile(path);
  CHECK(doc.get("otherData")->getStr("state") == "stopped");
  CHECK(rowEvents(doc, rowOf(doc, "scoped")).size() == 14);
}

TEST_CASE("timeline resume continues an earlier session's file after a RESET marker",
          "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("elastic.json");
  {
    Timeline first;  // round 0, rank 2
    REQUIRE(first.start(path, false, 2).isOk());
    emitAllreduce(first, "before_reset");
    first.stop();
  }
  Timeline second;  // the re-initialised runtime: round 3, now rank 0 of 2
  REQUIRE(second.resume(path, false, Timeline::Reset{3, 0, 2}).isOk());
  emitAllreduce(second, "after_reset");
  second.stop();

  Json doc = parseFile(path);
  if (havePython()) CHECK(pythonAccepts(path));
  const int64_t oldRow = rowOf(doc, "before_reset");
  const int64_t newRow = rowOf(doc, "after_reset");
  CHECK(oldRow > 0);
  CHECK(newRow > 0);
  CHECK(newRow != oldRow);
  REQUIRE(countNamed(doc, "RESET") == 1);
  double resetTs = -1, lastOldTs = -1, firstNewTs = -1;
  for (const Json& e : events(doc)) {
    if (e.getStr("name") == "RESET") {
      CHECK(e.getStr("ph") == "i");
      CHECK(e.getNum("pid") == 0);
      CHECK(e.get("args")->getNum("round") == 3);
      CHECK(e.get("args")->getNum("rank") == 0);
      CHECK(e.get("args")->getNum("size") == 2);
      resetTs = e.getNum("ts");
    }
  }
  for (const Json* e : rowEvents(doc, oldRow)) lastOldTs = std::max(lastOldTs, e->getNum("ts"));
  for (const Json* e : rowEvents(doc, newRow)) {
    if (firstNewTs < 0) firstNewTs = e->getNum("ts");
  }
  CHECK(lastOldTs >= 0);
  CHECK(resetTs >= lastOldTs);  // one time axis: the second session comes after the first
  CHECK(firstNewTs >= resetTs);
  CHECK(doc.get("otherData")->getStr("state") == "stopped");
}

TEST_CASE("timeline resume of a missing or foreign file starts it afresh", "[timeline]") {
  TempDir dir;
  const std::string missing = dir.file("none.json");
  Timeline t;
  REQUIRE(t.resume(missing, false, Timeline::Reset{1, 0, 1}).isOk());
  emitAllreduce(t, "x");
  t.stop();
  Json a = parseFile(missing);
  CHECK(countNamed(a, "RESET") == 0);
  CHECK(rowOf(a, "x") > 0);

  const std::string foreign = dir.file("foreign.json");
  {
    std::ofstream f(foreign);
    f << "{\"not\":\"a kolo timeline\"}";
  }
  REQUIRE(t.resume(foreign, false, Timeline::Reset{2, 0, 1}).isOk());
  emitAllreduce(t, "y");
  t.stop();
  Json b = parseFile(foreign);
  CHECK(rowOf(b, "y") > 0);
  CHECK(countNamed(b, "RESET") == 0);
}

namespace {
void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

bool parses(const std::string& path) {
  try {
    Parser(readFile(path)).parseDocument();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace

TEST_CASE("timeline refuses a second writer of the same file and leaves the first's file intact",
          "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("shared.json");
  Timeline first;
  Timeline second;  // another runtime, or another job given the same KOLO_TIMELINE
  REQUIRE(first.start(path, false, 0).isOk());
  emitAllreduce(first, "first_before");
  first.flush();
  Status s = second.start(path, false, 1);
  CHECK(s.code() == ErrorCode::kIo);
  CHECK(s.message().find(path) != std::string::npos);
  CHECK(s.message().find("another timeline") != std::string::npos);
  CHECK_FALSE(second.active());
  // Nor may the second continue it (an elastic reset racing a writer that has not stopped).
  CHECK(second.resume(path, false, Timeline::Reset{1, 0, 2}).code() == ErrorCode::kIo);
  bool repaired = true;
  CHECK(Timeline::repair(path, &repaired).code() == ErrorCode::kIo);  // not while written
  CHECK_FALSE(repaired);
  emitAllreduce(second, "second_ignored");
  emitAllreduce(first, "first_after");
  first.stop();
  Json doc = parseFile(path);  // not truncated by the refused open, not interleaved
  CHECK(rowEvents(doc, rowOf(doc, "first_before")).size() == 14);
  CHECK(rowEvents(doc, rowOf(doc, "first_after")).size() == 14);
  CHECK(rowOf(doc, "second_ignored") < 0);
  CHECK(doc.get("otherData")->getStr("state") == "stopped");
  // Once the first stopped, the file is free again.
  REQUIRE(second.start(path, false, 1).isOk());
  second.stop();
}

TEST_CASE("timeline lock does not outlive stop() in a forked child", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("forked.json");
  Timeline t;
  REQUIRE(t.start(path, false, 0).isOk());
  int toChild[2];
  REQUIRE(pipe(toChild) == 0);
  pid_t child = fork();  // a data loader's worker: it shares the timeline's open file
  REQUIRE(child >= 0);
  if (child == 0) {
    char c;
    ssize_t n = read(toChild[0], &c, 1);  // until the parent says so (or dies: EOF)
    _exit(n == 1 ? 0 : 1);
  }
  close(toChild[0]);
  t.stop();
  Status again = t.start(path, false, 0);  // the child still has the old open file
  CHECK(again.isOk());
  t.stop();
  REQUIRE(write(toChild[1], "x", 1) == 1);
  close(toChild[1]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(parses(path));
}

TEST_CASE("timeline write failure (file size limit) leaves the last good file valid",
          "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("full.json");
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing us
    struct rlimit limit = {64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(10);
    Timeline t;
    if (!t.start(path, false, 0).isOk()) _exit(11);
    const std::string pad(100, 'p');
    for (int i = 0; i < 2000 && t.writeStatus().isOk(); ++i) {
      emitAllreduce(t, pad + std::to_string(i));
      if (i % 7 == 0) t.flush();  // writes of a few KiB: one of them crosses the limit
    }
    t.stop();
    _exit(t.writeStatus().code() == ErrorCode::kIo ? 0 : 12);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);  // the limit was hit and reported
  Json doc = parseFile(path);
  if (havePython()) CHECK(pythonAccepts(path));
  CHECK(rowEvents(doc, rowOf(doc, std::string(100, 'p') + "0")).size() == 14);
  CHECK(readFile(path).size() <= 64 * 1024);
}

// A SIGKILL inside the writer's pwrite cuts it at a page boundary: the file is the last good
// file's events plus a prefix of the new write (over the old closing, or beyond it). Every cut
// of a real file must repair to a valid file that keeps every complete event before the cut.
TEST_CASE("timeline repair makes a file cut anywhere by a killed write valid again", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("cut.json");
  Timeline t;
  REQUIRE(t.start(path, true, 5).isOk());
  emitAllreduce(t, "kept\"quoted\\name");
  t.flush();
  const std::string first = readFile(path);  // the last good file before the "kill"
  for (int i = 0; i < 3; ++i) emitAllreduce(t, "lost_" + std::to_string(i));
  t.markCycleStart();
  t.stop();
  const std::string second = readFile(path);
  const size_t dataEnd = first.rfind("\n],\n");
  REQUIRE(dataEnd != std::string::npos);
  REQUIRE(second.compare(0, dataEnd, first, 0, dataEnd) == 0);
  int repairedCount = 0;
  for (size_t k = 1; k < second.size() - dataEnd; ++k) {
    // The write landed up to dataEnd + k; past that the old file (its closing) remains.
    std::string cut = second.substr(0, dataEnd + k);
    if (dataEnd + k < first.size()) cut += first.substr(dataEnd + k);
    writeFile(path, cut);
    bool repaired = false;
    Status s = Timeline::repair(path, &repaired);
    INFO("cut after " << k << " bytes of the new write");
    REQUIRE(s.isOk());
    const bool wasValid = parses(path) && !repaired;
    if (!repaired) {
      CHECK(readFile(path) == cut);  // a complete file is left as it is
      CHECK(wasValid);
      continue;
    }
    ++repairedCount;
    Json doc = parseFile(path);
    CHECK(doc.get("otherData")->getStr("state") == "truncated");
    CHECK(doc.get("otherData")->getNum("rank") == 5);
    CHECK(rowEvents(doc, rowOf(doc, "kept\"quoted\\name")).size() == 14);
    bool again = true;
    REQUIRE(Timeline::repair(path, &again).isOk());  // idempotent
    CHECK_FALSE(again);
  }
  CHECK(repairedCount > 0);
  if (havePython()) {
    writeFile(path, second.substr(0, second.size() / 2));
    REQUIRE(Timeline::repair(path, nullptr).isOk());
    CHECK(pythonAccepts(path));
  }
  // Not a kolo timeline, or missing: errors that say so; the file is not touched.
  writeFile(path, "[{\"ph\":\"B\"");
  CHECK(Timeline::repair(path, nullptr).code() == ErrorCode::kInvalidArgument);
  CHECK(readFile(path) == "[{\"ph\":\"B\"");
  CHECK(Timeline::repair(dir.file("missing.json"), nullptr).code() == ErrorCode::kIo);
}

TEST_CASE("timeline resume continues a file its killed writer left cut mid-event", "[timeline]") {
  TempDir dir;
  const std::string path = dir.file("resume_cut.json");
  {
    Timeline before;
    REQUIRE(before.start(path, false, 1).isOk());
    emitAllreduce(before, "before_kill");
    before.stop();
  }
  std::string text = readFile(path);
  // The killed write: new events over the closing, cut inside an event.
  const size_t dataEnd = text.rfind("\n],\n");
  REQUIRE(dataEnd != std::string::npos);
  writeFile(path, text.substr(0, dataEnd) +
                      ",\n{\"name\":\"ALLREDUCE\",\"ph\":\"B\",\"ts\":1.000,\"pid\":1,\"ti");
  Timeline after;
  REQUIRE(after.resume(path, false, Timeline::Reset{1, 0, 1}).isOk());
  emitAllreduce(after, "after_reset");
  after.stop();
  Json doc = parseFile(path);
  if (havePython()) CHECK(pythonAccepts(path));
  CHECK(rowEvents(doc, rowOf(doc, "before_kill")).size() == 14);
  CHECK(rowEvents(doc, rowOf(doc, "after_reset")).size() == 14);
  CHECK(countNamed(doc, "RESET") == 1);
  CHECK(doc.get("otherData")->getStr("state") == "stopped");
  // The closing was padded over the cut line's bytes: still a complete file, not one to cut.
  bool repaired = true;
  REQUIRE(Timeline::repair(path, &repaired).isOk());
  CHECK_FALSE(repaired);
}

}  // namespace kolo
