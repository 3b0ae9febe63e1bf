#include "daemon/lease_journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace memd::daemon {

namespace {
constexpr uint64_t kMagic = 0x6c6e72756f6a646dull;  // "mdjournl"
constexpr uint32_t kVersion = 1;
}  // namespace

struct LeaseJournal::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  JournalIntent intent;
};

struct LeaseJournal::SlotAnswers {
  int32_t pid;            // the process these answers were given to
  uint32_t pad;
  uint64_t start_time;
  uint64_t floor;         // every request id at or below it was answered and forgotten
  uint64_t pad2;
  JournalEntry entries[kDepth];
};

absl::StatusOr<std::unique_ptr<LeaseJournal>> LeaseJournal::open(const std::string& path, uint32_t slots,
                                                                  bool fresh) {
  size_t size = sizeof(Header) + size_t{slots} * sizeof(SlotAnswers);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st {};
  bool reuse = !fresh && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == size;
  if (!reuse) {
    // Start empty: a new region, or a file left by another layout.
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
      int e = errno;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat("cannot size ", path, ": ", std::strerror(e)));
    }
  }
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (map == MAP_FAILED) return absl::UnavailableError(absl::StrCat("cannot map ", path, ": ", std::strerror(e)));
  std::unique_ptr<LeaseJournal> j(new LeaseJournal());
  j->path_ = path;
  j->map_ = map;
  j->size_ = size;
  j->slots_ = slots;
  j->header_ = static_cast<Header*>(map);
  if (j->header_->magic != kMagic || j->header_->version != kVersion || j->header_->slots != slots) {
    std::memset(map, 0, size);
    j->header_->version = kVersion;
    j->header_->slots = slots;
    j->header_->magic = kMagic;  // last: a crash before it leaves a file that starts empty again
  }
  return j;
}

LeaseJournal::~LeaseJournal() {
  if (map_ != nullptr) munmap(map_, size_);
}

LeaseJournal::SlotAnswers& LeaseJournal::slot(uint32_t i) const {
  return reinterpret_cast<SlotAnswers*>(static_cast<char*>(map_) + sizeof(Header))[i];
}

void LeaseJournal::bind(uint32_t i, pid_t pid, uint64_t start_time) {
  if (i >= slots_) return;
  SlotAnswers& s = slot(i);
  if (s.pid == pid && s.start_time == start_time) return;
  clear_slot(i);
  s.pid = pid;
  s.start_time = start_time;
}

LeaseJournal::Seen LeaseJournal::look_up(uint32_t i, uint64_t request, JournalEntry* answer) const {
  if (i >= slots_) return Seen::kNew;
  const SlotAnswers& s = slot(i);
  for (const JournalEntry& e : s.entries) {
    if (e.request == request) {
      *answer = e;
      return Seen::kAnswered;
    }
  }
  return request <= s.floor ? Seen::kTooOld : Seen::kNew;
}

bool LeaseJournal::forget_grant(uint32_t i, uint64_t request, JournalEntry* grant) {
  if (i >= slots_ || request == 0) return false;
  SlotAnswers& s = slot(i);
  for (JournalEntry& e : s.entries) {
    if (e.request != request) continue;
    JournalOp op = static_cast<JournalOp>(e.op);
    if ((op != JournalOp::kLease && op != JournalOp::kLeaseRun) || e.count == 0) return false;
    *grant = e;
    // Still known (so a late retry is not applied afresh), granting nothing.
    e.count = 0;
    e.code = static_cast<int32_t>(absl::StatusCode::kAborted);
    e.abandoned = 1;
    return true;
  }
  if (request > s.floor) {
    JournalEntry mark{};
    mark.request = request;
    mark.code = static_cast<int32_t>(absl::StatusCode::kAborted);
    mark.abandoned = 1;
    keep(s, mark);
  }
  return false;
}

void LeaseJournal::begin(uint32_t i, uint64_t request, JournalOp op, const uint32_t* pages, uint32_t n) {
  JournalIntent& in = header_->intent;
  in.request = 0;  // while it is being written, no intent
  in.slot = i;
  in.op = static_cast<uint8_t>(op);
  in.count = n < region::kMaxReleaseBatch ? n : region::kMaxReleaseBatch;
  if (in.count != 0) std::memcpy(in.pages, pages, in.count * sizeof(uint32_t));
  __atomic_store_n(&in.request, request == 0 ? ~uint64_t{0} : request, __ATOMIC_RELEASE);
}

void LeaseJournal::granted(const uint32_t* pages, uint32_t n) {
  JournalIntent& in = header_->intent;
  std::memcpy(in.pages, pages, n * sizeof(uint32_t));
  __atomic_store_n(&in.count, n, __ATOMIC_RELEASE);
}

void LeaseJournal::keep(SlotAnswers& s, const JournalEntry& answer) {
  // The oldest answer makes room; its id and every one below it are then
  // too old to be answered again.
  JournalEntry* oldest = &s.entries[0];
  for (JournalEntry& e : s.entries) {
    if (e.request < oldest->request) oldest = &e;
  }
  if (oldest->request > s.floor) s.floor = oldest->request;
  *oldest = answer;
}

void LeaseJournal::finish(uint32_t i, const JournalEntry& answer) {
  if (answer.request != 0 && i < slots_) keep(slot(i), answer);
  // The answer is kept before the intent goes: a crash between leaves both,
  // and recovery goes by the answer.
  abandon_intent();
}

void LeaseJournal::abandon_intent() { __atomic_store_n(&header_->intent.request, uint64_t{0}, __ATOMIC_RELEASE); }

const JournalIntent* LeaseJournal::leftover() const {
  return header_->intent.request == 0 ? nullptr : &header_->intent;
}

void LeaseJournal::clear_slot(uint32_t i) {
  if (i < slots_) std::memset(&slot(i), 0, sizeof(SlotAnswers));
}

}  // namespace memd::daemon
