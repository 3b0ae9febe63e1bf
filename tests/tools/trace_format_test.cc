// Reading allocation traces back (docs/trace.md) for memdctl replay.
#include "tools/replay/trace_format.h"

#include <gtest/gtest.h>

namespace memd::replay {
namespace {

TEST(TraceFormat, ALineGivesItsBlocksAndSize) {
  absl::StatusOr<TraceCall> c = parse_trace_line("0xc658:0x0:5:(process):best:t.c,12:22423:325:");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->old_block, 0xc658u);
  EXPECT_EQ(c->new_block, 0u);
  EXPECT_EQ(c->size, 5u);
  c = parse_trace_line("0x0:0x7F00AB:18446744073709551615:(process):debug:/bin/x+0x1f:1:0:");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->new_block, 0x7f00abu);
  EXPECT_EQ(c->size, UINT64_MAX);
}

TEST(TraceFormat, BadLinesAreRefusedWithWhatIsWrong) {
  struct Case {
    const char* line;
    const char* says;
  } cases[] = {
      {"", "expected 8 fields"},
      {"0x0:0x10:5:(process):best:t.c,4:1:0", "expected 8 fields"},  // no final ':'
      {"0x0:0x10:5:(process):best:t.c,4:1:0:extra:", "expected 8 fields"},
      {"00:0x10:5:(process):best:t.c,4:1:0:", "old block"},
      {"0x0:0xzz:5:(process):best:t.c,4:1:0:", "new block"},
      {"0x0:0x10:-5:(process):best:t.c,4:1:0:", "size"},
      {"0x0:0x10:18446744073709551616:(process):best:t.c,4:1:0:", "size"},
      {"0x0:0x0:5:(process):best:t.c,4:1:0:", "neither"},
      {"0x0:0x10:5:(process):best:t.c,4:x:0:", "thread and time"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TraceCall> r = parse_trace_line(c.line);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.line << ": " << r.status();
  }
}

TEST(TraceFormat, ATraceBecomesSlotsThatAreReused) {
  absl::StatusOr<Replay> r = read_trace(
      "0x0:0xa0:4:(process):best:t.c,4:1:0:\n"
      "0x0:0xb0:5:(process):best:t.c,10:1:1:\n"
      "0xb0:0x0:5:(process):best:t.c,12:1:2:\n"
      "0x0:0xb0:7:(process):best:t.c,13:2:3:\n"     // the address again: a new block
      "0xa0:0xc0:40:(process):best:t.c,14:2:4:\n"   // a resize keeps its slot
      "0xffff:0x0:8:(process):best:t.c,15:2:5:\n"   // from before the trace: skipped
      "0xfff0:0xd0:8:(process):best:t.c,16:2:6:\n"  // resized from before: an allocation
      "\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ops.size(), 6u);
  EXPECT_EQ(r->skipped, 2u);
  EXPECT_EQ(r->ops[0].kind, ReplayOp::kAlloc);
  EXPECT_EQ(r->ops[2].kind, ReplayOp::kFree);
  EXPECT_EQ(r->ops[3].slot, r->ops[1].slot);  // the freed slot is taken again
  EXPECT_EQ(r->ops[4].kind, ReplayOp::kResize);
  EXPECT_EQ(r->ops[4].slot, r->ops[0].slot);
  EXPECT_EQ(r->ops[4].size, 40u);
  EXPECT_EQ(r->ops[5].kind, ReplayOp::kAlloc);
  EXPECT_EQ(r->slots, 3u);
}

TEST(TraceFormat, ABlockReturnedWhileLiveIsAnError) {
  absl::StatusOr<Replay> r = read_trace(
      "0x0:0xa0:4:(process):best:t.c,4:1:0:\n"
      "0x0:0xa0:4:(process):best:t.c,5:1:1:\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status();
  r = read_trace("0x0:0xa0:4:(process):best:t.c,4:1:0:\ngarbage\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace memd::replay
