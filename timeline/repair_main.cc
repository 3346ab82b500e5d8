// SPDX-License-Identifier: Apache-2.0
// kolo-timeline-repair FILE...: makes timeline files cut short by a killed writer valid JSON
// again (Timeline::repair: cut back to the last complete event, closed with
// "state":"truncated"). A complete file is left as it is. Exit status 0 when every file is now
// valid, 1 when one could not be repaired (the reason is printed), 2 on a usage error.
#include <cstdio>
#include <cstring>
#include <string>

#include "timeline/timeline.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout,
                 "usage: %s TIMELINE.json...\n"
                 "Cuts a kolo timeline that a killed process left ending mid-event back to its\n"
                 "last complete event and closes it (otherData.state \"truncated\"); a complete\n"
                 "file is left as it is.\n",
                 argv[0]);
    return argc < 2 ? 2 : 0;
  }
  int rc = 0;
  for (int i = 1; i < argc; ++i) {
    bool repaired = false;
    kolo::Status s = kolo::Timeline::repair(argv[i], &repaired);
    if (!s.isOk()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      rc = 1;
    } else {
      std::printf(
          "%s: %s\n", argv[i],
          repaired ? "repaired (cut to its last complete event)" : "complete, left as it is");
    }
  }
  return rc;
}
