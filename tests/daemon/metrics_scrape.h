// /metrics of a test's daemon: where it is (Admin.Stats), its text over
// HTTP, and the values of its series.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "memd/v1/memd.grpc.pb.h"
#include "raw_session.h"

namespace memd::testing {

inline std::string metrics_address(const DaemonProcess& d) {
  RawSession s(d.socket());
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::StatsResponse resp;
  grpc::Status st = s.admin->Stats(&c, v1::StatsRequest(), &resp);
  return st.ok() ? resp.metrics_address() : "";
}

// GET http://address/metrics; the body, or "" on failure.
inline std::string scrape(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET /metrics HTTP/1.0\r\nHost: memd\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// The value of the series `name` whose labels include every `labels` pair
// (given as `key="value"`); -1 if there is none.
inline double value_of(const std::string& text, const std::string& name, const std::vector<std::string>& labels = {}) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t end = line.find_first_of("{ ");
    if (line.substr(0, end) != name) continue;
    bool all = true;
    for (const std::string& l : labels) all &= line.find(l) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// The sum of the series `name` whose labels include every `labels` pair; 0
// if there is none.
inline double sum_of(const std::string& text, const std::string& name, const std::vector<std::string>& labels = {}) {
  std::istringstream in(text);
  double sum = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.substr(0, line.find_first_of("{ ")) != name) continue;
    bool all = true;
    for (const std::string& l : labels) all &= line.find(l) != std::string::npos;
    if (all) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

}  // namespace memd::testing
