#include "heap/pool_method.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "heap/crash_point.h"

namespace memd::heap {
namespace {

inline constexpr uint64_t kPoolChunkKind = 0x706f6f6c2d63686bull;  // "pool-chk"
inline constexpr uint32_t kBitmapWords = kPoolMaxObjectsPerChunk / 64;
inline constexpr uint64_t kFull = ~uint64_t{0};

struct PoolChunk {
  uint64_t mark;    // chunk_mark(kPoolChunkKind): set last when made, cleared when freed
  uint64_t next;    // offset + 1 of the next older chunk, 0: none
  uint32_t stride;  // bytes per object
  uint32_t count;   // objects
  uint64_t recip;   // ceil(2^32 / stride): object indices without a division
  // The claim lock: the record id (claimer_id) of the thread taking a
  // word's bits in this chunk; free when it does not carry kClaimTag. Not
  // waited for long: a claimer finding it held looks elsewhere, and a dead
  // holder's is released with its record (pool_return_record). In chunks
  // made before it existed this was padding, never written: whatever it
  // holds there reads as free unless it happens to carry the tag.
  std::atomic<uint64_t> claimer;
  uint64_t pad[3];
  std::atomic<uint64_t> bits[kBitmapWords];  // 1: taken (or past `count`)
};
static_assert(offsetof(PoolChunk, bits) == 64);
inline constexpr size_t kObjectsAt = sizeof(PoolChunk);  // 576: objects are 16-aligned
static_assert(kObjectsAt % 16 == 0);

char* objects_of(PoolChunk* c) { return reinterpret_cast<char*>(c) + kObjectsAt; }
uint32_t words_of(const PoolChunk* c) { return (c->count + 63) / 64; }

size_t stride_for(size_t size) { return round16(size == 0 ? 1 : size); }
uint64_t recip_for(size_t stride) { return ((uint64_t{1} << 32) + stride - 1) / stride; }

size_t chunk_bytes_for(size_t stride) {
  size_t want = kObjectsAt + 8 * stride;  // at least 8 objects
  size_t bytes = (want + kPageSize - 1) & ~(kPageSize - 1);
  return bytes < kMinMethodChunk ? kMinMethodChunk : bytes;
}

// d / stride when d is a multiple of it (below 2^32), else some q with
// q * stride != d: with m = ceil(2^32 / s) = (2^32 + e) / s, e < s, a
// multiple d = q s gives d m = q 2^32 + q e, and q e < 2^32 for the chunks
// a pool makes (fewer than 4096 objects, under 4 GiB).
uint64_t index_of(uint64_t d, uint64_t recip) { return (d * recip) >> 32; }

// The chunk at data offset `off` if it is one of this pool's chunks of
// `stride`-byte objects (bounded by its run: every field is memory another
// process may have written), else nullptr.
PoolChunk* chunk_at(const Region& r, uint64_t off, size_t stride) {
  if (off >= r.data_bytes || off % kPageSize != 0) return nullptr;
  char* p = r.data + off;
  size_t run = 0;
  if (huge_run_of(r, p, &run) != p) return nullptr;
  auto* c = reinterpret_cast<PoolChunk*>(p);
  if (c->mark != chunk_mark(r, kPoolChunkKind, c) || c->stride != stride || c->count == 0 ||
      c->count > kPoolMaxObjectsPerChunk || kObjectsAt + size_t{c->count} * stride > run ||
      c->recip != recip_for(stride)) {
    return nullptr;
  }
  return c;
}

// A store to a thread's record in the region. Only compiler order matters
// (a killed process's stores all reach memory): the fences keep each store
// where the record's rules (pool_method.h) put it among the others.
template <class T>
void record_set(T* field, T value) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  __atomic_store_n(field, value, __ATOMIC_RELAXED);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// The bits of word `w` of `c` that stand for objects (the rest, past
// `count`, stay set from the chunk's making).
uint64_t object_bits(const PoolChunk* c, uint32_t w) {
  uint64_t lo = uint64_t{w} * 64;
  return c->count - lo >= 64 ? kFull : (uint64_t{1} << (c->count - lo)) - 1;
}

// Where a thread starts looking in a chunk's bitmap: spread over the words
// so that threads do not all fight over the first.
uint32_t start_word(uint32_t words) {
  static thread_local char here;
  return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(&here) >> 12) % words);
}

// The claim lock's value for the thread that owns `rec`: the tag, and the
// record's offset (unique among the region's records).
constexpr uint64_t kClaimTag = uint64_t{0xc1a1} << 48;
uint64_t claimer_id(const Region& r, const PoolCacheRecord* rec) {
  return kClaimTag | static_cast<uint64_t>(reinterpret_cast<const char*>(rec) - r.data);
}
bool claim_held(uint64_t lock) { return (lock & (uint64_t{0xffff} << 48)) == kClaimTag; }

// A claim holds the lock for a few dozen instructions, so a live holder is
// waited for a moment; one that stays (a preempted or dead holder) sends
// the caller elsewhere: never a wait on another process.
bool take_claim_lock(PoolChunk* c, uint64_t id) {
  for (int tries = 0; tries < 64; ++tries) {
    uint64_t lock = c->claimer.load(std::memory_order_relaxed);
    if (!claim_held(lock) && c->claimer.compare_exchange_strong(lock, id, std::memory_order_seq_cst)) {
      return true;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return false;
}

// Takes the free bits of word w of `c` for a thread whose claims are not
// recorded (no record, or no cache): they must not land in a word whose
// claim a dead holder of the lock has pending, or that holder's record would
// give them back while they are live. Taken first, the bits are given up
// again if the lock turns out held: either the holder read the word after
// they were taken (its claim leaves them alone) or it holds the lock now,
// and is seen. `all`: every free bit; else the lowest free one.
uint64_t take_unrecorded(PoolChunk* c, uint32_t w, bool all) {
  uint64_t claimed = 0;
  if (all) {
    claimed = ~c->bits[w].fetch_or(kFull, std::memory_order_seq_cst);
  } else {
    uint64_t bits = c->bits[w].load(std::memory_order_relaxed);
    while (bits != kFull) {
      uint64_t bit = ~bits & (bits + 1);  // the lowest clear bit
      uint64_t old = c->bits[w].fetch_or(bit, std::memory_order_seq_cst);
      if ((old & bit) == 0) {
        claimed = bit;
        break;
      }
      bits = old | bit;
    }
  }
  if (claimed != 0 && claim_held(c->claimer.load(std::memory_order_seq_cst))) {
    c->bits[w].fetch_and(~claimed, std::memory_order_release);
    return 0;
  }
  return claimed;
}

// Takes every free bit of word w of `c` for the thread that owns `rec`,
// which holds the chunk's claim lock: each attempt is named in the record
// before its compare-and-swap, so that the bits it took are known if the
// thread dies before the record says what it holds.
uint64_t take_recorded(PoolChunk* c, uint32_t w, PoolCacheRecord* rec) {
  // seq_cst, as the lock taken before it: take_unrecorded's bits are either
  // seen here or its check sees the lock.
  uint64_t old = c->bits[w].load(std::memory_order_seq_cst);
  while (old != kFull) {
    record_set(&rec->claim_old, old);
    record_set(&rec->claim_word, w + 1);
    if (c->bits[w].compare_exchange_weak(old, kFull, std::memory_order_acquire, std::memory_order_relaxed)) {
      return ~old;
    }
  }
  record_set(&rec->claim_word, uint32_t{0});
  return 0;
}

// Claims every free object of one word of `c` and hands one out; the others
// go to `cache` (or back at once when there is none). A thread goes on from
// the word after its last claim: behind it the words are likely full. A
// thread with a record claims under the chunk's claim lock (pool_method.h),
// and finds nothing in a chunk whose lock another holds.
void* claim_from(const Region& r, PoolState& s, PoolChunk* c, PoolCache* cache, uint64_t size) {
  PoolCacheRecord* rec = cache != nullptr ? cache->record : nullptr;
  if (rec != nullptr) {
    // Named before it is taken: a lock held by a dead thread is found by
    // its record.
    record_set(&rec->claiming, static_cast<uint64_t>(reinterpret_cast<char*>(c) - r.data) + 1);
    if (!take_claim_lock(c, claimer_id(r, rec))) {
      record_set(&rec->claiming, uint64_t{0});
      return nullptr;
    }
  } else if (claim_held(c->claimer.load(std::memory_order_relaxed))) {
    return nullptr;  // take_unrecorded would give up every word's bits again
  }
  void* got = nullptr;
  uint32_t words = words_of(c);
  uint32_t first = start_word(words);
  if (cache != nullptr && cache->cursor_chunk == reinterpret_cast<char*>(c) && cache->cursor_word < words) {
    first = cache->cursor_word;
  }
  for (uint32_t i = 0; i < words && got == nullptr; ++i) {
    uint32_t w = first + i < words ? first + i : first + i - words;
    if (c->bits[w].load(std::memory_order_relaxed) == kFull) continue;
    uint64_t claimed = rec != nullptr ? take_recorded(c, w, rec) : take_unrecorded(c, w, cache != nullptr);
    if (claimed == 0) continue;
    crash_point("pool_claim_taken");
    char* word_first = objects_of(c) + size_t{w} * 64 * c->stride;
    uint64_t bit = claimed & (~claimed + 1);
    if (cache != nullptr) {
      cache->state = &s;
      cache->clears = s.clears.load(std::memory_order_relaxed);
      cache->size = size;
      cache->chunk = reinterpret_cast<char*>(c);
      cache->first = word_first;
      cache->stride = c->stride;
      cache->word = w;
      cache->mask = claimed & ~bit;
      cache->cursor_chunk = reinterpret_cast<char*>(c);
      cache->cursor_word = w + 1;
      // The claim in the record (its mask is empty here: a claim follows
      // an empty cache), then no longer pending: from here a death gives
      // back the mask, and the object handed out is the caller's.
      if (rec != nullptr) {
        record_set(&rec->mask, uint64_t{0});
        record_set(&rec->chunk, static_cast<uint64_t>(reinterpret_cast<char*>(c) - r.data) + 1);
        record_set(&rec->word, w);
        record_set(&rec->clears, cache->clears);
        record_set(&rec->mask, cache->mask);
        record_set(&rec->claim_word, uint32_t{0});
      }
    }
    got = word_first + static_cast<size_t>(__builtin_ctzll(bit)) * c->stride;
  }
  if (rec != nullptr) {
    c->claimer.store(0, std::memory_order_release);
    record_set(&rec->claiming, uint64_t{0});
  }
  return got;
}

PoolChunk* make_chunk(const Region& r, ChunkSource& source, size_t stride) {
  size_t bytes = chunk_bytes_for(stride);
  char* p = source.alloc_chunk(bytes);
  if (p == nullptr) return nullptr;
  auto* c = reinterpret_cast<PoolChunk*>(p);
  size_t count = (bytes - kObjectsAt) / stride;
  if (count > kPoolMaxObjectsPerChunk) count = kPoolMaxObjectsPerChunk;
  c->next = 0;
  c->stride = static_cast<uint32_t>(stride);
  c->count = static_cast<uint32_t>(count);
  c->recip = recip_for(stride);
  c->claimer.store(0, std::memory_order_relaxed);
  for (uint32_t w = 0; w < kBitmapWords; ++w) {
    size_t lo = size_t{w} * 64;
    uint64_t past = lo >= count ? kFull : (count - lo >= 64 ? 0 : kFull << (count - lo));
    c->bits[w].store(past, std::memory_order_relaxed);
  }
  c->mark = chunk_mark(r, kPoolChunkKind, c);
  return c;
}

// Pushes a fresh chunk on the pool's list (published with release: a
// process that finds it sees its header).
void link_chunk(const Region& r, PoolState& s, PoolChunk* c) {
  uint64_t link = r.offset_of(c) + 1;
  uint64_t head = s.chunks.load(std::memory_order_relaxed);
  do {
    c->next = head;
  } while (!s.chunks.compare_exchange_weak(head, link, std::memory_order_release, std::memory_order_relaxed));
}

// Fixes the pool's size at `size` if none is fixed; false (EINVAL) if
// another size is.
bool agree_on_size(PoolState& s, size_t size) {
  uint64_t fixed = s.size.load(std::memory_order_acquire);
  if (fixed == 0 && size != 0 && size <= kPoolMaxObject) {
    if (s.size.compare_exchange_strong(fixed, size, std::memory_order_acq_rel)) return true;
  }
  if (fixed != size || size == 0) {
    errno = EINVAL;
    return false;
  }
  return true;
}

// The pool's position of `p`: its chunk and index, or nullptr.
PoolChunk* locate(const Region& r, const PoolState& s, const void* p, uint32_t* index) {
  size_t run = 0;
  char* start = huge_run_of(r, p, &run);
  uint64_t size = s.size.load(std::memory_order_acquire);
  if (start == nullptr || size == 0) return nullptr;
  size_t stride = stride_for(size);
  PoolChunk* c = chunk_at(r, r.offset_of(start), stride);
  if (c == nullptr) return nullptr;
  const char* at = static_cast<const char*>(p);
  if (at < objects_of(c)) return nullptr;
  uint64_t d = static_cast<uint64_t>(at - objects_of(c));
  uint64_t i = index_of(d, c->recip);
  if (i >= c->count || i * stride != d) return nullptr;
  *index = static_cast<uint32_t>(i);
  return c;
}

bool cache_current(const PoolCache* cache, const PoolState& s) {
  return cache != nullptr && cache->state == &s && cache->clears == s.clears.load(std::memory_order_relaxed);
}

}  // namespace

void* pool_alloc(const Region& r, PoolState& s, ChunkSource& source, PoolCache* cache, size_t size) {
  if (cache != nullptr && cache->size == size && cache_current(cache, s)) {
    // Out of the record before it is handed out.
    if (cache->freed_count != 0) {
      void* p = cache->freed[--cache->freed_count];
      if (cache->record != nullptr) record_set(&cache->record->freed_count, cache->freed_count);
      return p;
    }
    if (cache->mask != 0) {
      uint64_t bit = cache->mask & (~cache->mask + 1);
      cache->mask ^= bit;
      if (cache->record != nullptr) record_set(&cache->record->mask, cache->mask);
      return cache->first + static_cast<size_t>(__builtin_ctzll(bit)) * cache->stride;
    }
  }
  if (!agree_on_size(s, size)) return nullptr;
  if (cache != nullptr && !cache_current(cache, s)) pool_cache_flush(r, cache);
  size_t stride = stride_for(size);
  if (uint64_t h = s.hint.load(std::memory_order_acquire); h != 0) {
    if (PoolChunk* c = chunk_at(r, h - 1, stride)) {
      if (void* p = claim_from(r, s, c, cache, size)) return p;
    }
  }
  // The hint is full. Look through the chunks (newest first) only while one
  // may have room that no hint names: a free into a full word says so, a
  // look that finds nothing says not. The flag is cleared before the look
  // (a free during it sets it again) and set again when the look finds
  // room: others may have room too. Else a new chunk is the answer.
  if (s.room.exchange(0, std::memory_order_acq_rel) != 0) {
    uint32_t seen = 0;
    for (uint64_t link = s.chunks.load(std::memory_order_acquire); link != 0 && seen < r.data_pages; ++seen) {
      PoolChunk* c = chunk_at(r, link - 1, stride);
      if (c == nullptr) break;  // a list another process broke: stop, make a new chunk
      if (void* p = claim_from(r, s, c, cache, size)) {
        s.hint.store(link, std::memory_order_release);
        s.room.store(1, std::memory_order_release);
        return p;
      }
      link = c->next;
    }
  }
  PoolChunk* c = make_chunk(r, source, stride);
  if (c == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = claim_from(r, s, c, cache, size);
  link_chunk(r, s, c);
  s.hint.store(r.offset_of(c) + 1, std::memory_order_release);
  return p;
}

namespace {

// A chunk `cache` has checked in this epoch that holds p, or nullptr.
PoolChunk* known_chunk(const PoolCache* cache, const void* p) {
  auto at = reinterpret_cast<uintptr_t>(p);
  for (uint32_t k = 0; k < PoolCache::kKnownChunks; ++k) {
    auto start = reinterpret_cast<uintptr_t>(cache->known[k]);
    if (at - start < cache->known_end[k] - start) return reinterpret_cast<PoolChunk*>(cache->known[k]);
  }
  return nullptr;
}

void remember_chunk(PoolCache* cache, PoolChunk* c) {
  uint32_t k = cache->known_next++ % PoolCache::kKnownChunks;
  cache->known[k] = reinterpret_cast<char*>(c);
  cache->known_end[k] = reinterpret_cast<uintptr_t>(objects_of(c)) + uint64_t{c->count} * c->stride;
}

}  // namespace

MethodFree pool_free(const Region& r, PoolState& s, PoolCache* cache, void* p) {
  uint32_t i = 0;
  bool current = cache_current(cache, s);
  PoolChunk* c = current ? known_chunk(cache, p) : nullptr;
  if (c != nullptr) {
    uintptr_t d = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(objects_of(c));
    uint64_t q = index_of(d, c->recip);
    if (reinterpret_cast<uintptr_t>(p) < reinterpret_cast<uintptr_t>(objects_of(c)) || q * c->stride != d) {
      return MethodFree::kNotObject;
    }
    i = static_cast<uint32_t>(q);
  } else {
    c = locate(r, s, p, &i);
    if (c == nullptr) return MethodFree::kNotObject;
    if (current) remember_chunk(cache, c);
  }
  uint64_t bit = uint64_t{1} << (i % 64);
  std::atomic<uint64_t>& word = c->bits[i / 64];
  if (current && cache->stride == c->stride) {
    // Kept by this thread, taken in the bitmap: a free of an object the
    // bitmap has as free, or of one this thread holds already, is a double
    // free.
    if ((word.load(std::memory_order_relaxed) & bit) == 0) return MethodFree::kDoubleFree;
    if (cache->chunk == reinterpret_cast<char*>(c) && cache->word == i / 64 && (cache->mask & bit) != 0) {
      return MethodFree::kDoubleFree;
    }
    for (uint32_t k = 0; k < cache->freed_count; ++k) {
      if (cache->freed[k] == p) return MethodFree::kDoubleFree;
    }
    if (cache->freed_count < kPoolCacheFreed) {
      if (PoolCacheRecord* rec = cache->record) {
        record_set(&rec->freed[cache->freed_count], static_cast<uint64_t>(static_cast<char*>(p) - r.data));
        record_set(&rec->freed_count, cache->freed_count + 1);
      }
      cache->freed[cache->freed_count++] = p;
      return MethodFree::kOk;
    }
  }
  uint64_t old = word.fetch_and(~bit, std::memory_order_release);
  if ((old & bit) == 0) return MethodFree::kDoubleFree;
  if (old == kFull && s.room.load(std::memory_order_relaxed) == 0) {
    // A full word has room again: tell allocators where.
    s.hint.store(r.offset_of(c) + 1, std::memory_order_release);
    s.room.store(1, std::memory_order_release);
  }
  return MethodFree::kOk;
}

size_t pool_size(const Region& r, const PoolState& s, const PoolCache* cache, const void* p) {
  uint32_t i = 0;
  PoolChunk* c = locate(r, s, p, &i);
  if (c == nullptr) return 0;
  if (cache_current(cache, s)) {  // free, in this thread's cache
    if (cache->chunk == reinterpret_cast<char*>(c) && cache->word == i / 64 && (cache->mask >> (i % 64) & 1)) return 0;
    for (uint32_t k = 0; k < cache->freed_count; ++k) {
      if (cache->freed[k] == p) return 0;
    }
  }
  bool taken = (c->bits[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
  return taken ? c->stride : 0;
}

namespace {

// Gives a cache's objects back to their chunks' bitmaps: the objects `mask`
// names in word `word` of chunk `c` (none if c is null), and each of
// `freed`. Only bits that stand for objects are cleared, and only objects
// of the pool's chunks (`locate`): a record another process wrote is no
// better than its bytes. True if anything was given back.
bool give_back(const Region& r, const PoolState& s, PoolChunk* c, uint32_t word, uint64_t mask, void* const* freed,
               uint32_t n) {
  bool returned = false;
  if (c != nullptr && mask != 0 && word < words_of(c)) {
    c->bits[word].fetch_and(~(mask & object_bits(c, word)), std::memory_order_release);
    returned = true;
  }
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t i = 0;
    if (PoolChunk* fc = locate(r, s, freed[k], &i)) {
      fc->bits[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_release);
      returned = true;
    }
  }
  return returned;
}

}  // namespace

void pool_cache_flush(const Region& r, PoolCache* cache) {
  if (cache == nullptr || cache->state == nullptr) return;
  const PoolState& s = *cache->state;
  // The record goes empty first: a crash from here on leaks what the cache
  // held rather than have it given back twice.
  if (PoolCacheRecord* rec = cache->record) {
    record_set(&rec->freed_count, uint32_t{0});
    record_set(&rec->mask, uint64_t{0});
  }
  // A cache from before a clear names chunks that may be gone: drop it.
  if (cache_current(cache, s)) {
    PoolChunk* c = cache->mask != 0 ? chunk_at(r, r.offset_of(cache->chunk), cache->stride) : nullptr;
    (void)give_back(r, s, c, cache->word, cache->mask, cache->freed, cache->freed_count);
  }
  char* cursor_chunk = cache->cursor_chunk;
  uint32_t cursor_word = cache->cursor_word;
  PoolCacheRecord* record = cache->record;
  *cache = PoolCache{};
  cache->cursor_chunk = cursor_chunk;
  cache->cursor_word = cursor_word;
  cache->record = record;
}

void pool_return_record(const Region& r, PoolState& s, PoolCacheRecord* rec) {
  // Read once, then emptied before anything is given back (as a flush).
  uint64_t clears = rec->clears, chunk = rec->chunk, mask = rec->mask;
  uint32_t word = rec->word;
  uint32_t n = std::min<uint32_t>(rec->freed_count, kPoolCacheFreed);
  uint64_t claiming = rec->claiming, claim_old = rec->claim_old;
  uint32_t claim_word = rec->claim_word;
  if (mask == 0 && n == 0 && claiming == 0) return;  // held nothing: not even a write
  uint64_t freed[kPoolCacheFreed];
  std::memcpy(freed, rec->freed, sizeof freed);
  record_set(&rec->freed_count, uint32_t{0});
  record_set(&rec->mask, uint64_t{0});
  record_set(&rec->chunk, uint64_t{0});
  record_set(&rec->claim_word, uint32_t{0});
  record_set(&rec->claiming, uint64_t{0});
  uint64_t size = s.size.load(std::memory_order_acquire);
  // A clear since made the record stale: its chunks may be gone (and a
  // chunk made since starts unlocked).
  if (size == 0 || (clears != s.clears.load(std::memory_order_acquire) && claiming == 0)) return;
  size_t stride = stride_for(size);
  // The chunks a record names were linked by whoever made them (with
  // release); this acquire orders their headers before the reads below,
  // as a claimer's own look at the list did (the record itself, written by
  // another process, orders nothing).
  (void)s.chunks.load(std::memory_order_acquire);
  bool returned = false;
  // A claim lock the dead thread still holds: the bits its pending claim
  // took (or would have taken, still clear then: nobody else takes bits of
  // a locked chunk) go back first, then the lock. The bits are cleared
  // while the lock is still held, so that no claimer takes them in between.
  PoolChunk* locked = claiming != 0 ? chunk_at(r, claiming - 1, stride) : nullptr;
  const uint64_t me = claimer_id(r, rec);
  if (locked != nullptr && locked->claimer.load(std::memory_order_acquire) == me) {
    if (claim_word != 0 && claim_word - 1 < words_of(locked)) {
      uint64_t pending = ~claim_old & object_bits(locked, claim_word - 1);
      if (pending != 0) {
        locked->bits[claim_word - 1].fetch_and(~pending, std::memory_order_release);
        returned = true;
      }
    }
  } else {
    locked = nullptr;
  }
  if (clears == s.clears.load(std::memory_order_acquire)) {
    PoolChunk* c = mask != 0 && chunk != 0 ? chunk_at(r, chunk - 1, stride) : nullptr;
    // The record names offsets, which any process may have written: only
    // those inside the data pages become addresses.
    void* objects[kPoolCacheFreed];
    uint32_t valid = 0;
    for (uint32_t k = 0; k < n; ++k) {
      if (freed[k] < r.data_bytes) objects[valid++] = r.data + freed[k];
    }
    returned |= give_back(r, s, c, word, mask, objects, valid);
  }
  if (locked != nullptr) {
    uint64_t held = me;
    locked->claimer.compare_exchange_strong(held, 0, std::memory_order_release, std::memory_order_relaxed);
  }
  // Room where no hint may say: let allocators look.
  if (returned) s.room.store(1, std::memory_order_release);
}

void pool_clear(const Region& r, PoolState& s, ChunkSource& source) {
  uint64_t size = s.size.load(std::memory_order_acquire);
  // Every thread's cache goes stale first, then the chunks go.
  s.clears.fetch_add(1, std::memory_order_acq_rel);
  uint64_t link = s.chunks.exchange(0, std::memory_order_acq_rel);
  s.hint.store(0, std::memory_order_release);
  s.room.store(0, std::memory_order_release);
  size_t stride = stride_for(size);
  if (size != 0) free_chunk_list(r, link, source, [&](uint64_t off) { return chunk_at(r, off, stride); });
  s.size.store(0, std::memory_order_release);
}

PoolStats pool_stats(const Region& r, const PoolState& s) {
  PoolStats out;
  out.object_size = s.size.load(std::memory_order_acquire);
  if (out.object_size == 0) return out;
  out.stride = stride_for(out.object_size);
  uint64_t link = s.chunks.load(std::memory_order_acquire);
  for (uint32_t seen = 0; link != 0 && seen < r.data_pages; ++seen) {
    PoolChunk* c = chunk_at(r, link - 1, out.stride);
    if (c == nullptr) break;
    out.chunks += 1;
    uint32_t words = words_of(c);
    for (uint32_t w = 0; w < words; ++w) {
      out.live += static_cast<uint64_t>(__builtin_popcountll(c->bits[w].load(std::memory_order_relaxed)));
    }
    out.live -= size_t{words} * 64 - c->count;  // the bits past `count`, set at creation
    out.capacity += c->count;
    out.chunk_bytes += chunk_bytes_for(out.stride);
    link = c->next;
  }
  return out;
}

}  // namespace memd::heap
