// SPDX-License-Identifier: Apache-2.0
// Small cached allreduces riding in the control round (core/piggyback.h), as N processes over
// TCP (KOLO_SHM=off, set by CTest). Each iteration submits, on every rank: float32 and int32 SUM
// tensors of 1..64 elements, an AVERAGE with prescale and postscale, an int32 AVERAGE (truncated
// toward zero), an out-of-place float64 SUM, and a 16 KiB tensor past the payload budget, with
// the ranks submitting at staggered times so that rounds see partial views. Every result is
// checked exactly against the closed form. At the end the timeline (rank 0) must show the
// CONTROL_PIGGYBACK_ALLREDUCE step when KOLO_TEST_PIGGYBACK=1, and none when 0
// (KOLO_CONTROL_PIGGYBACK_BYTES=0): the same checks pass on both paths.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <kolo.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Op {
  std::string name;
  kolo_handle_t handle = 0;
};

kolo_handle_t submit(const std::string& name, void* data, void* out, kolo_dtype_t dtype,
                     int64_t count, kolo_reduce_op_t op, double pre, double post) {
  int64_t shape[1] = {count};
  kolo_tensor_t in = {data, dtype, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_tensor_t o = {out, dtype, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  REQUIRE(kolo_allreduce_async(name.c_str(), &in, out ? &o : nullptr, op, pre, post, 0, nullptr,
                               nullptr, &h) == KOLO_OK);
  return h;
}

void wait(kolo_handle_t h) {
  REQUIRE(kolo_handle_wait(h, 60) == KOLO_OK);
  kolo_handle_release(h);
}

}  // namespace

TEST_CASE("small cached allreduces: exact results through the control round and without it") {
  const char* dir = std::getenv("KOLO_TEST_PIGGYBACK_DIR");
  const char* expectEnv = std::getenv("KOLO_TEST_PIGGYBACK");
  REQUIRE(dir != nullptr);
  REQUIRE(expectEnv != nullptr);
  const bool expectPiggyback = std::string(expectEnv) == "1";
  const std::string timeline = std::string(dir) + "/timeline.json";
  setenv("KOLO_TIMELINE", timeline.c_str(), 1);
  REQUIRE(kolo_init() == KOLO_OK);
  const int rank = kolo_rank(), n = kolo_size();
  REQUIRE(std::string(kolo_transport_name()) != "shm");
  const int64_t nn = n;
  const int64_t rankSum = nn * (nn - 1) / 2;

  for (int it = 0; it < 25; ++it) {
    if (it % 3 == 1) usleep(static_cast<useconds_t>(rank * 2000));  // staggered submissions
    std::vector<std::vector<float>> f(8);
    std::vector<std::vector<int32_t>> i32(8);
    std::vector<kolo_handle_t> hs;
    for (int k = 0; k < 8; ++k) {
      const int64_t count = 1 + 9 * k;
      f[k].assign(count, 0.f);
      i32[k].assign(count, 0);
      for (int64_t e = 0; e < count; ++e) {
        f[k][e] = static_cast<float>(rank + e + it);
        i32[k][e] = static_cast<int32_t>(rank * 3 - e + it);
      }
      hs.push_back(submit("f/" + std::to_string(k), f[k].data(), nullptr, KOLO_FLOAT32, count,
                          KOLO_SUM, 1, 1));
      hs.push_back(submit("i/" + std::to_string(k), i32[k].data(), nullptr, KOLO_INT32, count,
                          KOLO_SUM, 1, 1));
    }
    std::vector<float> avg(5);
    for (int e = 0; e < 5; ++e) avg[e] = static_cast<float>(4 * (rank + e));
    hs.push_back(submit("avg", avg.data(), nullptr, KOLO_FLOAT32, 5, KOLO_AVERAGE, 0.5, 2.0));
    std::vector<int32_t> iavg = {rank == 0 ? 1 : 0, 7 * rank};
    hs.push_back(submit("iavg", iavg.data(), nullptr, KOLO_INT32, 2, KOLO_AVERAGE, 1, 1));
    std::vector<double> src(3, rank + 0.25), dst(3, -1.0);
    hs.push_back(submit("oop", src.data(), dst.data(), KOLO_FLOAT64, 3, KOLO_SUM, 1, 1));
    std::vector<float> big(4096, static_cast<float>(rank));
    hs.push_back(submit("big", big.data(), nullptr, KOLO_FLOAT32, 4096, KOLO_SUM, 1, 1));
    for (auto h : hs) wait(h);

    INFO("rank " << rank << " iteration " << it);
    for (int k = 0; k < 8; ++k) {
      for (size_t e = 0; e < f[k].size(); ++e) {
        CHECK(f[k][e] == static_cast<float>(rankSum + nn * (static_cast<int64_t>(e) + it)));
        CHECK(i32[k][e] == static_cast<int32_t>(3 * rankSum + nn * (it - static_cast<int64_t>(e))));
      }
    }
    // AVERAGE: sum(0.5 * 4 (r + e)) * 2 / n = 4 (mean rank + e).
    for (int e = 0; e < 5; ++e) {
      CHECK(avg[e] == static_cast<float>(4.0 * (static_cast<double>(rankSum) / nn + e)));
    }
    CHECK(iavg[0] == static_cast<int32_t>(1 / nn));  // truncates toward zero
    CHECK(iavg[1] == static_cast<int32_t>(7 * rankSum / nn));
    for (double v : dst) CHECK(v == rankSum + 0.25 * nn);
    for (double v : src) CHECK(v == rank + 0.25);  // out of place: the input is untouched
    for (float v : big) CHECK(v == static_cast<float>(rankSum));
  }
  REQUIRE(kolo_shutdown() == KOLO_OK);
  if (rank == 0) {
    std::ifstream in(timeline);
    std::stringstream ss;
    ss << in.rdbuf();
    const bool seen = ss.str().find("CONTROL_PIGGYBACK_ALLREDUCE") != std::string::npos;
    CHECK(seen == expectPiggyback);
  }
}
