// Client sessions. A client process opens one session (a gRPC stream it
// keeps open) and names it in every call; the daemon checks each call's
// connection against the session's, so a session cannot be borrowed by
// another process. When the stream ends the daemon looks at the process:
// dead, its leases are taken back at once (its blocks abandoned for others
// to adopt); still running, its leases become orphans, watched until the
// process exits or resumes them in a new session (a daemon restart, a
// reconnect). A stopped process keeps its leases: it still maps them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/peer.h"
#include "daemon/region_registry.h"
#include "memd/v1/memd.pb.h"

namespace memd::daemon {

inline constexpr uint32_t kNoLeaseSlot = UINT32_MAX;  // a read-only attachment

struct Attachment {
  std::shared_ptr<ServedRegion> region;
  uint32_t slot = kNoLeaseSlot;
};

struct Session {
  uint64_t id = 0;
  Peer peer;
  std::string connection;  // gRPC's name of the connection ("fd:12")
  uint64_t start_time = 0;
  uint64_t image_id = 0;
  std::string program;
  uint64_t connected_ms = 0;
  std::atomic<uint64_t> rpcs{0};
  std::map<uint32_t, Attachment> attached;  // by region handle (guarded by the table)
  // Every region the session has had open (guarded by the table). Its
  // telemetry may name them: the last report of a region it closes can
  // arrive after the Close call.
  std::set<std::string> ever_attached;
  std::function<void(const v1::Command&)> send;  // pushes a command down the stream
  std::function<void()> cancel;  // ends the stream (the daemon is stopping); may be empty
};

class SessionTable {
 public:
  SessionTable(const DaemonConfig& config, RegionRegistry* regions);
  ~SessionTable();

  // A Hello on a new stream. Checks the claimed pid and start time against
  // the connection's credentials; resumes orphaned leases it names.
  absl::StatusOr<std::shared_ptr<Session>> open(const Peer& peer, const std::string& connection,
                                                const v1::Hello& hello, std::function<void(const v1::Command&)> send,
                                                v1::Welcome* welcome, std::function<void()> cancel = nullptr);
  // The session named in a call, if the call came on its connection.
  absl::StatusOr<std::shared_ptr<Session>> find(uint64_t id, const std::string& connection) const;
  // Registers the session's process as a client of `region`.
  absl::StatusOr<Attachment> attach(Session& s, const std::shared_ptr<ServedRegion>& region, bool read_only);
  absl::StatusOr<Attachment> attachment(const Session& s, uint32_t handle) const;
  absl::Status detach(Session& s, uint32_t handle);
  // A snapshot of what the session has open.
  std::vector<std::pair<uint32_t, Attachment>> attachments(const Session& s) const;
  std::set<std::string> ever_attached(const Session& s) const;
  // The session's stream ended.
  void end(uint64_t id);

  // Leases of clients of the previous daemon, until they resume or exit.
  void adopt_orphans(const std::vector<KeptLease>& kept);
  // Shutting down: no session opens any more, every open one's stream is
  // ended at once (a stream never ends on its own, and gRPC would wait for
  // it), and sessions that end now keep their leases (the clients resume
  // them with the next daemon).
  void shutting_down();

  std::vector<std::shared_ptr<Session>> list() const;
  // Asks sessions of `pid` (0: all) to drain `region` (empty: all).
  uint32_t drain(pid_t pid, const std::string& region);
  uint64_t sessions_total() const { return sessions_total_.load(); }
  uint64_t clients_reclaimed() const { return reclaimed_.load(); }
  // Processes whose leases are orphans now (alive, disconnected).
  size_t orphan_count() const;

 private:
  struct Orphan {
    std::shared_ptr<ServedRegion> region;
    uint32_t slot;
    pid_t pid;
    uint64_t start_time;
    uint64_t image_id;  // 0: unknown (kept from the previous daemon)
    bool replaced = false;  // its program image was replaced (exec): nobody maps its blocks
  };
  // Sessions per uid and per process (root is exempt). REQUIRES: mu_ held.
  absl::Status check_user_limits_locked(const Peer& peer, uint64_t start_time) const;
  void reap_loop();
  void reclaim(const std::shared_ptr<ServedRegion>& region, uint32_t slot, pid_t pid, const char* why);

  const DaemonConfig& config_;
  RegionRegistry* regions_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  std::vector<Orphan> orphans_;
  uint64_t next_id_ = 1;
  bool shutting_down_ = false;
  std::atomic<uint64_t> sessions_total_{0};
  std::atomic<uint64_t> reclaimed_{0};
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread reaper_;
};

}  // namespace memd::daemon
