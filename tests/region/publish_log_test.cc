// The publish log's entries as a power cut may leave them: a medium keeps
// only aligned 8-byte stores whole, so an entry being sealed can reach it as
// any mix of its old and new words. Settling must then finish exactly the
// publish the new entry records, or nothing: never store into a link an
// entry's stale words name. Runs settle_publish_log on entries built word
// by word, over a plain buffer standing for the data pages.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "heap/layout.h"
#include "region/publish_log.h"

namespace memd::region {
namespace {

constexpr uint32_t kHolder = 7;
constexpr size_t kDataBytes = 4096;

struct Log {
  alignas(64) std::array<PublishEntry, kPublishEntries> entries{};
  alignas(64) std::array<uint64_t, kDataBytes / 8> data{};
  heap::Region region;
  Log() {
    region.data = reinterpret_cast<char*>(data.data());
    region.data_bytes = kDataBytes;
  }
  PublishEntry& entry() { return entries[0]; }
  uint32_t settle(const std::function<bool(uint64_t)>& live = nullptr) {
    return settle_publish_log(region, entries.data(), [](uint32_t h) { return h == kHolder; },
                              [](const void*, size_t) {}, live);
  }
};

// The entry's 8 words, as the medium sees them.
using Words = std::array<uint64_t, 8>;
Words words_of(const PublishEntry& e) {
  Words w;
  std::memcpy(w.data(), &e, sizeof e);
  return w;
}
void put_words(PublishEntry& e, const Words& w) { std::memcpy(static_cast<void*>(&e), w.data(), sizeof e); }

// Reserves `object` (offset + 1) in the entry and seals its publish into
// the link at `link` with the object as the value, as Region::publish does.
void seal_publish_of(PublishEntry& e, uint64_t object, uint64_t link) {
  e.object = object;
  seal_publish_entry(e, kEntryReserved);
  e.link = link;
  e.value = object;
  seal_publish_entry(e, kEntryPublishing);
}

// An entry that published object 0x100 into the link at 8 with value 0x101,
// then was emptied: what the medium holds before the entry is used again.
void used_once(PublishEntry& e) {
  e.holder.store(kHolder);
  seal_publish_of(e, 0x101, 8);
  set_publish_state(e, kEntryEmpty);
  e.holder.store(kHolder);  // claimed again by the next reservation
}

TEST(PublishLog, ASealedPublishingEntryIsFinished) {
  Log log;
  PublishEntry& e = log.entry();
  used_once(e);
  seal_publish_of(e, 0x201, 16);
  EXPECT_EQ(log.settle(), 0u);
  EXPECT_EQ(log.data[2], 0x201u);
  EXPECT_EQ(log.data[1], 0u);
  EXPECT_EQ(entry_state(e.state.load()), kEntryEmpty);
  EXPECT_EQ(e.holder.load(), 0u);
}

TEST(PublishLog, AnEntryFromBeforeSealingIsTakenAsItIs) {
  Log log;
  PublishEntry& e = log.entry();
  e.holder.store(kHolder);
  e.state.store(kEntryPublishing);  // nonce 0, no check
  e.object = 0x301;
  e.link = 24;
  e.value = 0x301;
  log.settle();
  EXPECT_EQ(log.data[3], 0x301u);
}

// Every mix of the old entry's words and the new one's, as a cut in the
// middle of the intent's persist leaves it: the link of the new publish
// gets its value only from the whole new entry, and no other word of the
// data pages is ever written.
TEST(PublishLog, EveryMixOfAnIntentsWordsFinishesItWholeOrDoesNothing) {
  PublishEntry before{}, after{};
  used_once(before);
  std::memcpy(static_cast<void*>(&after), &before, sizeof before);
  seal_publish_of(after, 0x401, 32);  // its reservation's sealing never reached the medium
  const Words old_words = words_of(before), new_words = words_of(after);
  int finished = 0;
  for (uint32_t mask = 0; mask < 256; ++mask) {
    Log log;
    Words w;
    for (int i = 0; i < 8; ++i) w[i] = (mask >> i & 1) ? new_words[i] : old_words[i];
    put_words(log.entry(), w);
    log.settle();
    for (size_t i = 0; i < log.data.size(); ++i) {
      if (i == 4 && log.data[i] == 0x401) continue;
      ASSERT_EQ(log.data[i], 0u) << "mask " << mask << ": word " << i << " of the data was written";
    }
    if (log.data[4] == 0x401) ++finished;
    EXPECT_EQ(entry_state(log.entry().state.load()), kEntryEmpty) << "mask " << mask;
  }
  // The mixes holding every word the sealing changed finish it; the words
  // it left as they were (holder, batch, leader, pad) may be either.
  EXPECT_GT(finished, 0);
  EXPECT_LT(finished, 256);
}

// The same for a reservation sealed over an emptied entry: only the whole
// new entry makes an orphan, and then of the new object.
TEST(PublishLog, EveryMixOfAReservationsWordsOrphansItsObjectOrNothing) {
  PublishEntry before{}, after{};
  used_once(before);
  std::memcpy(static_cast<void*>(&after), &before, sizeof before);
  after.object = 0x501;
  after.link = after.value = 0;
  seal_publish_entry(after, kEntryReserved);
  const Words old_words = words_of(before), new_words = words_of(after);
  for (uint32_t mask = 0; mask < 256; ++mask) {
    Log log;
    Words w;
    for (int i = 0; i < 8; ++i) w[i] = (mask >> i & 1) ? new_words[i] : old_words[i];
    put_words(log.entry(), w);
    uint32_t orphans = log.settle();
    ASSERT_LE(orphans, 1u);
    if (orphans == 1) {
      EXPECT_EQ(log.entry().object, 0x501u) << "mask " << mask;
      EXPECT_EQ(log.entry().holder.load(), kOrphanHolder);
    }
    for (uint64_t word : log.data) ASSERT_EQ(word, 0u) << "mask " << mask;
  }
}

TEST(PublishLog, AReservationWhoseObjectIsNotLiveIsDroppedNotOrphaned) {
  for (bool live : {false, true}) {
    Log log;
    PublishEntry& e = log.entry();
    e.holder.store(kHolder);
    e.object = 0x601;
    seal_publish_entry(e, kEntryReserved);
    std::vector<uint64_t> asked;
    uint32_t orphans = log.settle([&](uint64_t object) {
      asked.push_back(object);
      return live;
    });
    EXPECT_EQ(asked, std::vector<uint64_t>{0x600});
    EXPECT_EQ(orphans, live ? 1u : 0u);
    EXPECT_EQ(e.holder.load(), live ? kOrphanHolder : 0u);
  }
}

// Emptying changes the state word alone: the entry reads as it was, or empty.
TEST(PublishLog, EmptyingAnEntryChangesOnlyItsStateWord) {
  PublishEntry e{};
  e.holder.store(kHolder);
  seal_publish_of(e, 0x701, 40);
  Words before = words_of(e);
  release_publish_entry(e, [](const void*, size_t) {});
  Words after = words_of(e);
  for (int i = 1; i < 8; ++i) EXPECT_EQ(before[i], after[i]) << "word " << i;
  EXPECT_EQ(entry_state(e.state.load()), kEntryEmpty);
  EXPECT_EQ(e.holder.load(), 0u);
}

}  // namespace
}  // namespace memd::region
