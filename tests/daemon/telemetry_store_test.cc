// The daemon's telemetry store without gRPC: what it keeps of clients'
// reports, its bounds, and its locking (ThreadSanitizer runs this).
#include "daemon/telemetry_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

namespace memd::daemon {
namespace {

v1::TelemetryReport counters(const std::string& region, uint32_t size_class, uint64_t allocs, uint64_t frees) {
  v1::TelemetryReport r;
  v1::HeapCounters* h = r.add_heaps();
  h->set_region(region);
  v1::ClassCounters* c = h->add_classes();
  c->set_size_class(size_class);
  c->set_allocations(allocs);
  c->set_frees(frees);
  c->set_allocated_bytes(allocs * size_class);
  c->set_freed_bytes(frees * size_class);
  return r;
}

void add_sample(v1::TelemetryReport* r, const std::string& region, uint64_t address, uint64_t bytes,
                const std::vector<uint64_t>& stack) {
  v1::Sample* s = r->add_samples();
  s->set_region(region);
  s->set_address(address);
  s->set_requested_bytes(bytes);
  for (uint64_t pc : stack) s->add_stack(pc);
}

v1::TelemetryReport sampled_free(const std::string& region, uint64_t address) {
  v1::TelemetryReport r;
  v1::SampledFree* f = r.add_frees();
  f->set_region(region);
  f->set_address(address);
  return r;
}

void add_symbol(v1::TelemetryReport* r, uint64_t pc, const std::string& name) {
  v1::Symbol* s = r->add_symbols();
  s->set_address(pc);
  s->set_name(name);
}

const std::set<std::string> kAttached{"jobs"};

TEST(TelemetryStore, RegionTotalsNeverGoDownWhenClientsLeaveOrCloseRegions) {
  TelemetryStore store;
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 16, 10, 4));
  store.report({2, 200, 0, "b"}, kAttached, counters("jobs", 16, 5, 5));
  auto totals = store.class_totals();
  EXPECT_EQ((totals[{"jobs", "16"}].allocations), 15u);
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 16, 30, 20));  // cumulative: replaces
  EXPECT_EQ((store.class_totals()[{"jobs", "16"}].allocations), 35u);
  // Session 1 closes the region (it stops reporting it), then session 2 ends.
  store.report({1, 100, 0, "a"}, kAttached, counters("", 24, 1, 0));
  store.end_session(2);
  totals = store.class_totals();
  EXPECT_EQ((totals[{"jobs", "16"}].allocations), 35u);
  EXPECT_EQ((totals[{"jobs", "16"}].frees), 25u);
  EXPECT_EQ((totals[{"(process)", "24"}].allocations), 1u);
  ASSERT_EQ(store.clients().size(), 1u);
  EXPECT_EQ(store.clients()[0].who.pid, 100);
}

TEST(TelemetryStore, ARegionOpenedAgainCountsOnFromItsTotals) {
  TelemetryStore store;
  v1::TelemetryReport first = counters("jobs", 16, 100, 40);
  first.mutable_heaps(0)->set_instance(1);
  store.report({1, 100, 0, "a"}, kAttached, first);
  // Closed and opened again before the next report: the client's counts
  // start from zero under a new instance; the first opening's stay.
  v1::TelemetryReport second = counters("jobs", 16, 7, 2);
  second.mutable_heaps(0)->set_instance(2);
  store.report({1, 100, 0, "a"}, kAttached, second);
  auto totals = store.class_totals();
  EXPECT_EQ((totals[{"jobs", "16"}].allocations), 107u);
  EXPECT_EQ((totals[{"jobs", "16"}].frees), 42u);
  store.end_session(1);
  EXPECT_EQ((store.class_totals()[{"jobs", "16"}].allocations), 107u);
}

TEST(TelemetryStore, ProcessSamplesDieWithTheProcessRegionSamplesStay) {
  TelemetryStore store;
  v1::TelemetryReport r;
  r.set_sample_period_bytes(1024);
  add_symbol(&r, 0x10, "make_job");
  add_sample(&r, "jobs", 4096, 100, {0x10});
  add_sample(&r, "", 0x7f0000, 200, {0x10});
  store.report({1, 100, 0, "a"}, kAttached, r);
  EXPECT_EQ(store.profile_input("jobs", 0, std::nullopt, nullptr).samples.size(), 1u);
  EXPECT_EQ(store.profile_input("(process)", 0, std::nullopt, nullptr).samples.size(), 1u);
  auto sites = store.top_sites(10, nullptr);
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_EQ(sites[0].site, "make_job");
  store.end_session(1);
  ProfileInput jobs = store.profile_input("jobs", 0, std::nullopt, nullptr);
  ASSERT_EQ(jobs.samples.size(), 1u);
  EXPECT_TRUE(jobs.samples[0].live);
  EXPECT_EQ(jobs.functions[jobs.samples[0].stack[0].function], "make_job");
  EXPECT_TRUE(store.profile_input("(process)", 0, std::nullopt, nullptr).samples.empty());
  // Another process freed it: the live check says so.
  jobs = store.profile_input("jobs", 0, std::nullopt, [](const std::string&, uint64_t) { return false; });
  EXPECT_FALSE(jobs.samples[0].live);
  store.forget_region("jobs");
  EXPECT_TRUE(store.profile_input("jobs", 0, std::nullopt, nullptr).samples.empty());
}

TEST(TelemetryStore, AFreeByAnotherProcessOfTheRegionEndsItsSample) {
  TelemetryStore store;
  v1::TelemetryReport r;
  add_sample(&r, "jobs", 4096, 100, {});
  store.report({1, 100, 0, "a"}, kAttached, r);
  v1::TelemetryReport f = sampled_free("jobs", 4096);
  // A session that never had the region open cannot end its samples.
  store.report({2, 200, 0, "b"}, {}, f);
  EXPECT_TRUE(store.profile_input("jobs", 100, std::nullopt, nullptr).samples.at(0).live);
  store.report({3, 300, 0, "c"}, kAttached, f);
  EXPECT_FALSE(store.profile_input("jobs", 100, std::nullopt, nullptr).samples.at(0).live);
}

TEST(TelemetryStore, AFreeReportMatchesItsSample) {
  TelemetryStore store;
  v1::TelemetryReport r;
  add_sample(&r, "jobs", 4096, 100, {});
  add_sample(&r, "jobs", 8192, 100, {});
  store.report({1, 100, 0, "a"}, kAttached, r);
  store.report({1, 100, 0, "a"}, kAttached, sampled_free("jobs", 4096));
  ProfileInput in = store.profile_input("jobs", 100, std::nullopt, nullptr);
  ASSERT_EQ(in.samples.size(), 2u);
  EXPECT_NE(in.samples[0].live, in.samples[1].live);
}

TEST(TelemetryStore, SamplesPerSessionAreBounded) {
  TelemetryStore store;
  for (uint64_t i = 0; i < 3 * TelemetryStore::kMaxSamplesPerSession; i += 1000) {
    v1::TelemetryReport r;
    for (uint64_t j = i; j < i + 1000; ++j) add_sample(&r, "", j * 16, 32, {1, 2, 3});
    store.report({1, 100, 0, "a"}, {}, r);
  }
  EXPECT_LE(store.profile_input("(process)", 0, std::nullopt, nullptr).samples.size(), TelemetryStore::kMaxSamplesPerSession);
  EXPECT_EQ(store.samples_total(), 3 * TelemetryStore::kMaxSamplesPerSession / 1000 * 1000 + 1000);
}

TEST(TelemetryStore, TopSitesKeepKPerRegion) {
  TelemetryStore store;
  v1::TelemetryReport r;
  for (uint64_t site = 1; site <= 30; ++site) {
    add_symbol(&r, site, "f" + std::to_string(site));
    for (uint64_t k = 0; k < site; ++k) add_sample(&r, "jobs", site * 100000 + k * 64, 64, {site});
  }
  store.report({1, 100, 0, "a"}, kAttached, r);
  auto sites = store.top_sites(10, nullptr);
  ASSERT_EQ(sites.size(), 10u);
  EXPECT_EQ(sites[0].site, "f30");  // the most live bytes first
  EXPECT_EQ(sites[9].site, "f21");
}

// A report of `samples` process-heap samples with stacks of kMaxFrames
// frames, each frame named with a long name: distinct names when
// `distinct`, else one name for all.
v1::TelemetryReport heavy_report(uint64_t first, int samples, bool distinct) {
  v1::TelemetryReport r;
  for (int i = 0; i < samples; ++i) {
    std::vector<uint64_t> stack;
    for (int f = 0; f < TelemetryStore::kMaxFrames; ++f) {
      uint64_t pc = distinct ? (first + i) * 1000 + f : f;
      stack.push_back(pc);
      if (distinct || i == 0) add_symbol(&r, pc, std::string(400, 'a' + f % 26) + std::to_string(pc));
    }
    add_sample(&r, "", (first + i) * 64, 64, stack);
  }
  return r;
}

uint64_t rejected(const TelemetryStore& store, Rejected reason) {
  return store.rejected()[static_cast<size_t>(reason)];
}

TEST(TelemetryStore, StoredBytesStayWithinTheBudgetAndGoWithTheSession) {
  TelemetryStore store;
  constexpr uint64_t kBudget = 1 << 20;
  for (uint64_t i = 0; i < 20; ++i) {
    store.report({1, 100, 0, "a"}, {}, heavy_report(i * 20, 20, true), kBudget);
    ASSERT_LE(store.stored_bytes(), kBudget);
  }
  // 20 * 20 samples of 64 names of 400 bytes: 10 MiB as names in frames.
  EXPECT_GT(store.stored_bytes(), kBudget / 2);
  EXPECT_GT(rejected(store, Rejected::kSessionBytes), 0u);
  EXPECT_EQ(store.samples_total(), 400u);
  EXPECT_FALSE(store.profile_input("(process)", 0, std::nullopt, nullptr).samples.empty());
  store.end_session(1);
  EXPECT_EQ(store.stored_bytes(), 0u);
}

// What `reports` cost one session of a store with room for all of it.
uint64_t stored_by_one_session(const std::vector<v1::TelemetryReport>& reports) {
  TelemetryStore scratch;
  for (const v1::TelemetryReport& r : reports) scratch.report({1, 100, 1000, "a"}, {}, r, uint64_t{1} << 30, uint64_t{1} << 30);
  return scratch.stored_bytes();
}

// Three reports of 10 samples, each frame a distinct name of ~400 bytes;
// `first` apart by 100 or more: the same cost, none of the same names.
std::vector<v1::TelemetryReport> distinct_reports(uint64_t first) {
  std::vector<v1::TelemetryReport> out;
  for (uint64_t i = 0; i < 3; ++i) out.push_back(heavy_report(first + i * 10, 10, true));
  return out;
}

TEST(TelemetryStore, TheLiveSessionsOfOneUidShareItsBudget) {
  const uint64_t one = stored_by_one_session(distinct_reports(100));
  ASSERT_EQ(one, stored_by_one_session(distinct_reports(200)));
  // Each session fits in its own budget; two of one uid do not fit in the uid's.
  const uint64_t per_session = one + one / 4;
  const uint64_t per_uid = one + one / 2;
  constexpr uint32_t kUid = 1000, kOtherUid = 2000;
  TelemetryStore store;
  auto send = [&](const ClientIdentity& who, uint64_t first) {
    for (const v1::TelemetryReport& r : distinct_reports(first)) {
      store.report(who, {}, r, per_session, per_uid);
      ASSERT_LE(store.uid_stored_bytes(kUid), per_uid);
    }
  };
  send({1, 100, kUid, "a"}, 100);
  EXPECT_EQ(store.uid_stored_bytes(kUid), one);
  send({2, 200, kUid, "b"}, 200);
  // Cut at the budget: short of it by less than one symbol or sample.
  EXPECT_LE(store.uid_stored_bytes(kUid), per_uid);
  EXPECT_GT(store.uid_stored_bytes(kUid), per_uid - 2048);
  EXPECT_GT(rejected(store, Rejected::kUidBytes), 0u);
  EXPECT_EQ(rejected(store, Rejected::kSessionBytes), 0u);

  // Another user's session is not affected.
  const uint64_t rejected_before = rejected(store, Rejected::kUidBytes);
  send({3, 300, kOtherUid, "c"}, 300);
  EXPECT_EQ(store.uid_stored_bytes(kOtherUid), one);
  EXPECT_EQ(rejected(store, Rejected::kUidBytes), rejected_before);
  EXPECT_EQ(store.stored_bytes(), store.uid_stored_bytes(kUid) + store.uid_stored_bytes(kOtherUid));

  // Ending sessions gives their bytes back, exactly.
  store.end_session(1);
  EXPECT_EQ(store.uid_stored_bytes(kUid), store.stored_bytes() - one);
  store.end_session(2);
  EXPECT_EQ(store.uid_stored_bytes(kUid), 0u);
  EXPECT_EQ(store.stored_bytes(), one);
  // And the uid's next session has all of it again.
  send({4, 400, kUid, "d"}, 400);
  EXPECT_EQ(store.uid_stored_bytes(kUid), one);
  EXPECT_EQ(rejected(store, Rejected::kUidBytes), rejected_before);
  store.end_session(3);
  store.end_session(4);
  EXPECT_EQ(store.stored_bytes(), 0u);
}

TEST(TelemetryStore, EachNameIsStoredOncePerSession) {
  TelemetryStore store;
  for (uint64_t i = 0; i < 10; ++i) {
    v1::TelemetryReport r = heavy_report(i * 100, 100, false);
    if (i > 0) r.clear_symbols();  // sent once per session
    store.report({1, 100, 0, "a"}, {}, r);
  }
  EXPECT_EQ(rejected(store, Rejected::kSessionBytes), 0u);
  ProfileInput in = store.profile_input("(process)", 0, std::nullopt, nullptr);
  ASSERT_EQ(in.samples.size(), 1000u);
  EXPECT_EQ(in.functions.size(), TelemetryStore::kMaxFrames + 1u);
  // 1,000 stacks of 64 frames: 16 bytes a frame, the 64 names once (the
  // names once per frame would be 26 MB).
  EXPECT_LT(store.stored_bytes(), 1000u * (64 * 16 + 256) + 64 * 1024);
}

TEST(TelemetryStore, RegionSamplesOfEndedSessionsAreKeptWithinTheBudget) {
  TelemetryStore store;
  constexpr uint64_t kBudget = 256 << 10;
  for (uint64_t s = 1; s <= 8; ++s) {
    v1::TelemetryReport r = heavy_report(s * 1000, 100, false);
    for (v1::Sample& x : *r.mutable_samples()) x.set_region("jobs");
    store.report({s, static_cast<pid_t>(s), 0, "a"}, kAttached, r, kBudget);
    store.end_session(s, kBudget);
    ASSERT_LE(store.stored_bytes(), kBudget);
  }
  EXPECT_FALSE(store.profile_input("jobs", 0, std::nullopt, nullptr).samples.empty());
  EXPECT_GT(rejected(store, Rejected::kRegionFull), 0u);
  store.forget_region("jobs");
  EXPECT_EQ(store.stored_bytes(), 0u);
}

TEST(TelemetryStore, ACounterThatGoesBackOrLeapsIsRefusedAndTheValueBeforeStands) {
  TelemetryStore store;
  auto allocations = [&] { return store.class_totals()[{"jobs", "16"}].allocations; };
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 16, 100, 10));
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 16, 5, 1));  // back
  EXPECT_EQ(allocations(), 100u);
  EXPECT_EQ(rejected(store, Rejected::kCounterDecreased), 1u);
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 16, uint64_t{1} << 61, 10));  // a leap
  EXPECT_EQ(allocations(), 100u);
  EXPECT_EQ(rejected(store, Rejected::kCounterJump), 1u);
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 16, 150, 20));  // on again
  EXPECT_EQ(allocations(), 150u);
  // A report without the class leaves its count as it was (cumulative).
  store.report({1, 100, 0, "a"}, kAttached, counters("jobs", 24, 1, 0));
  EXPECT_EQ(allocations(), 150u);
  // Impossible from the first report of a session on.
  store.report({2, 200, 0, "b"}, kAttached, counters("jobs", 16, 18'000'000'000'000'000'000u, 0));
  EXPECT_EQ(rejected(store, Rejected::kCounterTooLarge), 1u);
  EXPECT_EQ(allocations(), 150u);
  // A new opening counts from zero since the last report: a leap as well.
  v1::TelemetryReport reopened = counters("jobs", 16, uint64_t{1} << 61, 0);
  reopened.mutable_heaps(0)->set_instance(7);
  store.report({1, 100, 0, "a"}, kAttached, reopened);
  EXPECT_EQ(rejected(store, Rejected::kCounterJump), 2u);
  EXPECT_EQ(allocations(), 150u);
  // The client's own counters likewise.
  v1::TelemetryReport rpcs;
  rpcs.set_rpcs(1000);
  store.report({3, 300, 0, "c"}, {}, rpcs);
  rpcs.set_rpcs(3);
  store.report({3, 300, 0, "c"}, {}, rpcs);
  for (const ClientTelemetry& c : store.clients()) {
    if (c.who.session == 3) {
      EXPECT_EQ(c.rpcs, 1000u);
    }
  }
  EXPECT_EQ(rejected(store, Rejected::kCounterDecreased), 2u);
}

TEST(TelemetryStore, SymbolNamesAreMadeSafeToShow) {
  TelemetryStore store;
  v1::TelemetryReport r;
  add_symbol(&r, 0x10, std::string("evil\n\0name\xe2\x80\xae", 13) + std::string(1000, 'x'));
  add_sample(&r, "jobs", 4096, 100, {0x10});
  store.report({1, 100, 0, "a"}, kAttached, r);
  auto sites = store.top_sites(10, nullptr);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].site.substr(0, 22), "evil\\n\\x00name\\u{202E}");
  EXPECT_LE(sites[0].site.size(), TelemetryStore::kMaxSymbolBytes);
}

v1::Chain* add_chain(v1::TelemetryReport* r, v1::ChainOutcome outcome, uint32_t pool, uint32_t bytes,
                     const std::vector<uint64_t>& stack) {
  v1::Chain* c = r->mutable_chain_pools()->add_chains();
  c->set_outcome(outcome);
  c->set_pool(pool);
  c->set_object_bytes(bytes);
  c->set_counted(100);
  for (uint64_t pc : stack) c->add_stack(pc);
  return c;
}

std::optional<ClientTelemetry> client_of(const TelemetryStore& store, uint64_t session) {
  for (const ClientTelemetry& c : store.clients()) {
    if (c.who.session == session) return c;
  }
  return std::nullopt;
}

TEST(TelemetryStore, ChainPoolsAreKeptWithTheirFramesNamed) {
  TelemetryStore store;
  v1::TelemetryReport r;
  add_symbol(&r, 0x10, "xmalloc");
  add_symbol(&r, 0x20, "build_tree");
  add_symbol(&r, 0x30, std::string("bad\nname"));
  v1::ChainPools* c = r.mutable_chain_pools();
  c->set_chains_seen(9);
  c->set_pooled(2);
  c->set_wrappers(1);
  c->set_mixed_sizes(3);
  c->set_unwinds(40);
  add_chain(&r, v1::CHAIN_POOLED, 2, 48, {0x10, 0x20});
  add_chain(&r, v1::CHAIN_POOLED, 1, 32, {0x30, 0x99});  // 0x99: no symbol
  add_chain(&r, v1::CHAIN_WRAPPER, 0, 48, {0x10});
  add_chain(&r, v1::CHAIN_MIXED_SIZES, 0, 16, {0x20});
  store.report({1, 100, 0, "a"}, {}, r);
  std::optional<ClientTelemetry> t = client_of(store, 1);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(t->chain_pools);
  EXPECT_EQ(t->chains.seen, 9u);
  EXPECT_EQ(t->chains.pooled, 2u);
  EXPECT_EQ(t->chains.wrappers, 1u);
  EXPECT_EQ(t->chains.mixed_sizes, 3u);
  EXPECT_EQ(t->chains.unwinds, 40u);
  ASSERT_EQ(t->pools.size(), 2u);  // pooled chains only, by pool number
  EXPECT_EQ(t->pools[0].pool, 1u);
  EXPECT_EQ(t->pools[0].chain, "bad\\nname < 0x99");  // names made safe; an unnamed frame by address
  EXPECT_EQ(t->pools[0].object_bytes, 32u);
  EXPECT_EQ(t->pools[1].pool, 2u);
  EXPECT_EQ(t->pools[1].chain, "xmalloc < build_tree");
  EXPECT_EQ(rejected(store, Rejected::kChain), 0u);

  // The list is the state now: the next report's replaces it; the counters
  // are cumulative and pass the usual checks.
  v1::TelemetryReport next;
  *next.mutable_chain_pools() = r.chain_pools();
  next.mutable_chain_pools()->clear_chains();
  next.mutable_chain_pools()->set_chains_seen(5);  // went back
  next.mutable_chain_pools()->set_pooled(3);
  add_chain(&next, v1::CHAIN_POOLED, 3, 64, {0x20});
  store.report({1, 100, 0, "a"}, {}, next);
  t = client_of(store, 1);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->chains.seen, 9u);
  EXPECT_EQ(t->chains.pooled, 3u);
  EXPECT_EQ(rejected(store, Rejected::kCounterDecreased), 1u);
  ASSERT_EQ(t->pools.size(), 1u);
  EXPECT_EQ(t->pools[0].chain, "build_tree");

  // A client without pools reports none, and shows none.
  store.report({2, 200, 0, "b"}, {}, counters("", 16, 1, 0));
  t = client_of(store, 2);
  ASSERT_TRUE(t.has_value());
  EXPECT_FALSE(t->chain_pools);
}

TEST(TelemetryStore, MalformedChainsAreLeftOutAndCounted) {
  TelemetryStore store;
  v1::TelemetryReport r;
  add_chain(&r, v1::CHAIN_POOLED, 0, 32, {0x10});                     // pool 0
  add_chain(&r, v1::CHAIN_POOLED, 33, 32, {0x10});                    // past the pools
  add_chain(&r, v1::CHAIN_POOLED, 4, 32, {});                         // no frames
  add_chain(&r, v1::CHAIN_POOLED, 4, 32, {1, 2, 3, 4, 5});            // too many
  add_chain(&r, v1::CHAIN_POOLED, 4, 4096, {0x10});                   // too big to pool
  add_chain(&r, v1::CHAIN_POOLED, 4, 33, {0x10});                     // not in 8-byte units
  add_chain(&r, v1::CHAIN_WRAPPER, 4, 32, {0x10});                    // a wrapper with a pool
  add_chain(&r, static_cast<v1::ChainOutcome>(77), 0, 32, {0x10});    // no such outcome
  add_chain(&r, v1::CHAIN_OUTCOME_UNSPECIFIED, 0, 32, {0x10});
  add_chain(&r, v1::CHAIN_POOLED, 5, 32, {0x10});                     // good
  add_chain(&r, v1::CHAIN_POOLED, 5, 32, {0x20});                     // pool 5 again
  store.report({1, 100, 0, "a"}, {}, r);
  EXPECT_EQ(rejected(store, Rejected::kChain), 10u);
  std::optional<ClientTelemetry> t = client_of(store, 1);
  ASSERT_TRUE(t.has_value());
  ASSERT_EQ(t->pools.size(), 1u);
  EXPECT_EQ(t->pools[0].pool, 5u);
  EXPECT_EQ(t->pools[0].chain, "0x10");

  // More chains than a client has: the first kMaxReportedChains are looked
  // at, the rest counted; a client cannot name more than kMaxChainPools pools.
  v1::TelemetryReport flood;
  for (uint32_t i = 0; i < 1000; ++i) add_chain(&flood, v1::CHAIN_POOLED, i % 40 + 1, 32, {0x10 + i});
  store.report({1, 100, 0, "a"}, {}, flood);
  t = client_of(store, 1);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->pools.size(), TelemetryStore::kMaxChainPools);
  EXPECT_EQ(rejected(store, Rejected::kChain), 10u + (1000 - TelemetryStore::kMaxReportedChains) +
                                                  (TelemetryStore::kMaxReportedChains - TelemetryStore::kMaxChainPools));
}

TEST(TelemetryStore, AProfileForOneUserHoldsOnlyItsProcessesSamples) {
  TelemetryStore store;
  v1::TelemetryReport r;
  add_sample(&r, "", 0x1000, 100, {0x10});
  add_sample(&r, "jobs", 4096, 100, {0x10});
  store.report({1, 100, 1000, "a"}, kAttached, r);
  store.report({2, 200, 0, "root's"}, kAttached, r);
  EXPECT_EQ(store.profile_input("(process)", 0, std::nullopt, nullptr).samples.size(), 2u);
  EXPECT_EQ(store.profile_input("(process)", 0, 1000, nullptr).samples.size(), 1u);
  EXPECT_EQ(store.profile_input("jobs", 0, 1000, nullptr).samples.size(), 1u);
  EXPECT_EQ(store.profile_input("jobs", 0, 1001, nullptr).samples.size(), 0u);
}

TEST(TelemetryStore, ConcurrentReportsAndReadersAreSafe) {
  TelemetryStore store;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (uint64_t s = 1; s <= 4; ++s) {
    writers.emplace_back([&, s] {
      for (uint64_t i = 1; i <= 300; ++i) {
        v1::TelemetryReport r = counters("jobs", 32, i, i / 2);
        add_symbol(&r, i, "f");
        add_sample(&r, "jobs", s * 1000000 + i * 64, 64, {i});
        v1::SampledFree* f = r.add_frees();
        f->set_region("jobs");
        f->set_address(s * 1000000 + (i - 1) * 64);
        store.report({s, static_cast<pid_t>(s), 0, "w"}, kAttached, r);
      }
      store.end_session(s);
    });
  }
  std::thread reader([&] {
    while (!stop.load()) {
      (void)store.class_totals();
      (void)store.clients();
      (void)store.top_sites(10, nullptr);
      (void)store.profile_input("jobs", 0, std::nullopt, [](const std::string&, uint64_t) { return true; });
    }
  });
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ((store.class_totals()[{"jobs", "32"}].allocations), 4u * 300);
  EXPECT_TRUE(store.clients().empty());
}

}  // namespace
}  // namespace memd::daemon
